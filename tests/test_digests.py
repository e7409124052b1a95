"""metadata.json: digests checked when a package is opened, and written by ``webgpu-kernels digest``."""

from __future__ import annotations

import json
import os
import shutil
import threading
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

import webgpu_kernels as wk
from webgpu_kernels import digests
from webgpu_kernels.cli import main
from webgpu_kernels.errors import DigestError, PackageError
from webgpu_kernels.package import embedded_ids, embedded_root, open_embedded, open_folder
from webgpu_kernels.validation import validate_package

from conftest import copy_package  # noqa: E402

QUICK_GELU = "com.microsoft.QuickGelu"
BIAS_ADD = "com.microsoft.BiasAdd"



@pytest.fixture
def qg(tmp_path: Path) -> Path:
    return copy_package(QUICK_GELU, tmp_path / "qg")


def flip_byte(path: Path, offset: int = 10) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= 0x01
    path.write_bytes(bytes(data))


# --- the embedded packages ------------------------------------------------------------------------


@pytest.mark.parametrize("op_id", [QUICK_GELU, BIAS_ADD])
def test_embedded_packages_are_verified(op_id: str) -> None:
    package = open_embedded(op_id)
    assert package.is_verified
    assert package.metadata["id"] == op_id
    assert package.metadata["version"] == 1
    listed = set(package.metadata["digest"]["files"])
    assert {"manifest.json", "test.json", "bench.json"} <= listed
    assert listed == set(digests.package_files(package.root))
    # What the engine reads is the verified bytes.
    assert package.read_bytes("manifest.json") is package.verified["manifest.json"]


@pytest.mark.parametrize("op_id", [QUICK_GELU, BIAS_ADD])
def test_embedded_metadata_is_current(op_id: str) -> None:
    """Editing a file of an embedded package needs `webgpu-kernels digest` (or make_test_cases.py) after."""
    root = embedded_root() / op_id
    existing = json.loads((root / "metadata.json").read_text("utf-8"))
    _, changes = digests.build_metadata(root, existing)
    stale = [(c.file, c.status) for c in changes if c.status != "unchanged"]
    assert not stale, f"run `webgpu-kernels digest {root}`: {stale}"


def test_embedded_packages_are_small() -> None:
    for op_id in embedded_ids():
        size = sum(p.stat().st_size for p in (embedded_root() / op_id).rglob("*") if p.is_file())
        assert size < 200 * 1024, (op_id, size)


def test_a_changed_installed_copy_says_reinstall_not_digest(qg: Path) -> None:
    """An installed (embedded) package's user is not its author: "run digest" on site-packages
    would make a changed install load (a review)."""
    (qg / "bench.json").write_text((qg / "bench.json").read_text("utf-8") + "\n", encoding="utf-8")
    with pytest.raises(DigestError) as info:
        open_folder(qg, origin="embedded")
    assert "reinstall webgpu-kernels" in str(info.value) and "webgpu-kernels digest" not in str(info.value)
    with pytest.raises(DigestError, match="webgpu-kernels digest"):  # an author's folder keeps the advice
        open_folder(qg)


# --- refusals -------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["quick-gelu.wgsl.jinja", "manifest.json", "test.json", "bench.json",
                                  "vec4-2x64-f32.Y.npy"])  # fmt: skip
def test_one_byte_changed_is_refused(qg: Path, name: str) -> None:
    open_folder(qg)  # loads before the change
    flip_byte(qg / name)
    with pytest.raises(DigestError) as info:
        open_folder(qg)
    assert info.value.file == name
    assert info.value.reason == "mismatch"
    assert name in str(info.value) and "does not match metadata.json" in str(info.value)
    assert "run `webgpu-kernels digest PATH` to record the package's files again if you changed it" in str(info.value)
    with pytest.raises(DigestError):
        wk.load_kernel(qg)


@pytest.mark.parametrize("name", ["manifest.json", "test.json"])
def test_a_changed_json_file_that_no_longer_parses_says_where_with_the_mismatch(qg: Path, name: str) -> None:
    """A manifest missing a comma was reported only as a digest mismatch; `digest` then refused it
    for its JSON, a second round trip to learn what was wrong."""
    path = qg / name
    broken = path.read_text("utf-8").replace(",\n", "\n", 1)  # a comma that ends a line: structural
    path.write_text(broken, encoding="utf-8")
    with pytest.raises(json.JSONDecodeError) as syntax:
        json.loads(broken)
    with pytest.raises(DigestError) as info:
        wk.load_kernel(qg)
    assert info.value.reason == "mismatch" and "does not match metadata.json" in str(info.value)
    where = (f"it is not valid JSON either (invalid JSON at line {syntax.value.lineno} column {syntax.value.colno}: "
             f"{syntax.value.msg}): fix that first")  # decode_json's words, as every other JSON error has them
    assert where in str(info.value)


def test_a_changed_json_file_that_still_parses_is_only_a_mismatch(qg: Path) -> None:
    path = qg / "bench.json"
    path.write_text(path.read_text("utf-8") + "\n", encoding="utf-8")
    with pytest.raises(DigestError) as info:
        open_folder(qg)
    assert "valid JSON" not in str(info.value)


def test_unlisted_template_is_refused(qg: Path) -> None:
    (qg / "helpers.wgsl.jinja").write_text("// not listed\n", encoding="utf-8")
    with pytest.raises(DigestError) as info:
        open_folder(qg)
    assert info.value.file == "helpers.wgsl.jinja" and info.value.reason == "unlisted"
    assert "not listed" in str(info.value) and "`webgpu-kernels digest PATH`" in str(info.value)


@pytest.mark.parametrize("name", ["extra.json", "data/extra.npy", "sub/dir/x.safetensors", "inc.wgsl"])
def test_unlisted_content_files_anywhere_are_refused(qg: Path, name: str) -> None:
    (qg / name).parent.mkdir(parents=True, exist_ok=True)
    (qg / name).write_bytes(b"x")
    with pytest.raises(DigestError) as info:
        open_folder(qg)
    assert info.value.file == name


def test_unlisted_other_and_hidden_files_are_allowed(qg: Path) -> None:
    (qg / "README.md").write_text("about\n", encoding="utf-8")
    (qg / ".DS_Store").write_bytes(b"\0")
    (qg / ".git").mkdir()
    (qg / ".git" / "config.json").write_text("{}", encoding="utf-8")
    assert open_folder(qg).is_verified


def test_missing_listed_file_is_refused(qg: Path) -> None:
    (qg / "bench.json").unlink()
    with pytest.raises(DigestError) as info:
        open_folder(qg)
    assert info.value.file == "bench.json" and info.value.reason == "missing"
    assert "if you removed it" in str(info.value)  # each edit's digest problem says what fixes it


def test_several_problems_are_counted(qg: Path) -> None:
    flip_byte(qg / "bench.json")
    (qg / "other.jinja").write_text("x", encoding="utf-8")
    with pytest.raises(DigestError, match="and 1 more digest problem"):
        open_folder(qg)


@pytest.mark.parametrize(
    ("edit", "fragment"),
    [
        (lambda m: m["digest"].update(algorithm="md5"), "'sha256' was expected"),
        (lambda m: m["digest"]["files"].update({"manifest.json": "abc"}), "does not match"),
        (lambda m: m.pop("id"), "'id' is a required property"),
        (lambda m: m.update(extra=1), "Additional properties"),
        # the name rule in words, not metadata.schema.json's regular expression
        (lambda m: m["digest"]["files"].update({"../escape.json": "0" * 64}),
         r"'\.\./escape\.json' is no package file name: names are package-relative paths .* no '\.\.'"),
    ],
)
def test_malformed_metadata_is_refused(qg: Path, edit, fragment: str) -> None:
    path = qg / "metadata.json"
    data = json.loads(path.read_text("utf-8"))
    edit(data)
    path.write_text(json.dumps(data), encoding="utf-8")
    with pytest.raises(DigestError, match=fragment) as info:
        open_folder(qg)
    assert info.value.file == "metadata.json" and info.value.reason == "metadata"


def test_metadata_that_is_not_json_is_refused(qg: Path) -> None:
    (qg / "metadata.json").write_text("{nope", encoding="utf-8")
    with pytest.raises(DigestError, match="invalid JSON") as info:
        open_folder(qg)
    assert info.value.file == "metadata.json"


def _rename_op(qg: Path, domain: str, name: str) -> None:
    """The manifest made another op's, its digest recorded again with metadata.json's id kept."""
    manifest = json.loads((qg / "manifest.json").read_text("utf-8"))
    manifest["domain"], manifest["name"] = domain, name
    (qg / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    metadata = json.loads((qg / "metadata.json").read_text("utf-8"))
    metadata["digest"]["files"]["manifest.json"] = digests.sha256_hex((qg / "manifest.json").read_bytes())
    (qg / "metadata.json").write_text(json.dumps(metadata), encoding="utf-8")


def test_a_metadata_id_naming_another_op_is_refused_at_load(qg: Path) -> None:
    """Every digest matched, so a package whose metadata.json says one op and whose manifest is
    another loaded silently from a folder (the Hub loader and validate refused it)."""
    _rename_op(qg, "com.example", "MyOp")
    with pytest.raises(DigestError) as info:
        wk.load_kernel(qg)
    error = info.value
    assert (error.file, error.reason) == ("metadata.json", "metadata")
    assert error.path == str((qg / "metadata.json").resolve())
    assert "'com.microsoft.QuickGelu'" in str(error) and "'com.example.MyOp'" in str(error)
    assert "webgpu-kernels digest" in str(error)  # digest takes the id from the manifest
    result = CliRunner().invoke(main, ["test", str(qg)])
    assert result.exit_code != 0 and "'com.example.MyOp'" in result.output, result.output
    report = validate_package(qg)  # validate's report says the same
    assert [(p.file, p.json_path) for p in report.errors] == [("metadata.json", "id")]
    assert "'com.microsoft.QuickGelu'" in report.errors[0].message and "'com.example.MyOp'" in report.errors[0].message
    with pytest.raises(DigestError, match="reinstall webgpu-kernels") as info:  # an installed copy: no "run digest"
        wk.Kernel(open_folder(qg, origin="embedded"))
    assert "webgpu-kernels digest" not in str(info.value)
    wk.load_kernel(qg, verify_digests=False)  # an author's unchecked open reads no metadata.json
    assert CliRunner().invoke(main, ["digest", str(qg)]).exit_code == 0
    assert wk.load_kernel(qg).op_id == "com.example.MyOp"


def test_package_without_metadata_loads_unverified(qg: Path) -> None:
    (qg / "metadata.json").unlink()
    package = open_folder(qg)
    assert not package.is_verified and package.metadata is None
    assert wk.load_kernel(qg).op_id == QUICK_GELU
    with pytest.raises(DigestError, match="no metadata.json"):
        open_folder(qg, require_metadata=True)


def test_verification_can_be_skipped(qg: Path) -> None:
    flip_byte(qg / "manifest.json", offset=3)
    assert not open_folder(qg, verify_digests=False).is_verified


def test_an_author_script_loads_a_stale_package_unverified_and_refreshes_it(qg: Path) -> None:
    # a generator rewriting test.json reads cases back through the package, then refreshes metadata.json
    test_file = qg / "test.json"
    doc = json.loads(test_file.read_text(encoding="utf-8"))
    doc["cases"] = doc["cases"][:1]
    test_file.write_text(json.dumps(doc), encoding="utf-8")
    (qg / "extra.npy").write_bytes(b"not verified")
    with pytest.raises(DigestError):
        wk.load_kernel(qg)
    kernel = wk.load_kernel(qg, verify_digests=False)
    inputs = wk.test_case_inputs(kernel, doc["cases"][0]["name"])
    assert set(inputs) == {"X"} and not kernel.package.is_verified
    (qg / "extra.npy").unlink()
    digests.write_metadata(qg)
    assert wk.load_kernel(qg).package.is_verified


def test_reads_after_open_see_the_verified_bytes(qg: Path) -> None:
    package = open_folder(qg)
    original = package.read_text("quick-gelu.wgsl.jinja")
    (qg / "quick-gelu.wgsl.jinja").write_text("changed after opening", encoding="utf-8")
    assert package.read_text("quick-gelu.wgsl.jinja") == original
    (qg / "late.wgsl.jinja").write_text("added after opening", encoding="utf-8")
    assert package.has("late.wgsl.jinja")
    with pytest.raises(DigestError, match="not verified when the package was opened"):
        package.read_text("late.wgsl.jinja")
    # a file of any name: a verified package reads nothing it did not verify
    (qg / "NOTES.txt").write_text("not a content file", encoding="utf-8")
    with pytest.raises(DigestError, match="not verified when the package was opened") as info:
        package.read_text("NOTES.txt")
    assert info.value.file == "NOTES.txt" and info.value.reason == "unlisted"


def test_a_template_cannot_include_an_unlisted_file(qg: Path) -> None:
    """A README may sit unlisted in a verified package, but a template that includes an unlisted
    file would run bytes nobody verified (a Hub cache copy changed after download, for one)."""
    template = qg / "quick-gelu.wgsl.jinja"
    template.write_text('{% include "helpers.txt" %}\n' + template.read_text("utf-8"), encoding="utf-8")
    (qg / "helpers.txt").write_text("// shared helpers\n", encoding="utf-8")
    digests.write_metadata(qg)  # `digest` lists every file
    meta = wk.TensorMeta((8,), "float32")
    assert wk.load_kernel(qg).render({"X": meta})["main"].startswith("// shared helpers")
    metadata = json.loads((qg / "metadata.json").read_text("utf-8"))
    del metadata["digest"]["files"]["helpers.txt"]  # still a valid package: a .txt may be unlisted
    (qg / "metadata.json").write_text(json.dumps(metadata), encoding="utf-8")
    kernel = wk.load_kernel(qg)
    with pytest.raises(DigestError, match="helpers.txt: not listed") as info:
        kernel.render({"X": meta})
    assert info.value.reason == "unlisted" and "run `webgpu-kernels digest`" in str(info.value)
    # A downloaded package's user is not its author: digesting the cached copy would make it load.
    hub_copy = wk.Kernel(open_folder(qg, origin="hub"))
    with pytest.raises(DigestError, match="helpers.txt: not listed") as info:
        hub_copy.render({"X": meta})
    assert "webgpu-kernels digest" not in str(info.value) and "tell the repository's authors" in str(info.value)


def test_a_file_named_in_another_case_says_which_file_is_there(qg: Path) -> None:
    """A test.json naming X.npy for x.npy failed `test` with only "file not found" (validate names the
    file meant: portability.py); a verified package's read says it too."""
    name = next(n for n in sorted(open_folder(qg).verified) if n.endswith(".npy"))
    with pytest.raises(PackageError, match=f"file not found in the package \\({name!r} is: names are case-sensitive\\)"):
        open_folder(qg).read_bytes(name.upper())
    with pytest.raises(PackageError) as info:
        open_folder(qg).read_bytes("nothing-like-it.npy")
    assert "case-sensitive" not in str(info.value)


@pytest.mark.parametrize("name", ["../x.json", "/etc/passwd", "a/../../x", "", "a\\b"])
def test_names_leaving_the_package_are_refused(qg: Path, name: str) -> None:
    with pytest.raises(PackageError):
        open_folder(qg).read_bytes(name)


def test_symlinked_files_count_as_their_targets(tmp_path: Path) -> None:
    """A Hugging Face cache snapshot is a folder of symlinks into a blob store."""
    source = copy_package(QUICK_GELU, tmp_path / "blobs")
    snapshot = tmp_path / "snapshot"
    for path in source.rglob("*"):
        if path.is_file():
            link = snapshot / path.relative_to(source)
            link.parent.mkdir(parents=True, exist_ok=True)
            os.symlink(path, link)
    package = open_folder(snapshot)
    assert package.is_verified
    assert wk.Kernel(package).op_id == QUICK_GELU



def linked_folder(qg: Path, tmp_path: Path) -> bytes:
    """``qg/linked`` a symbolic link to a folder outside the package holding ``data.npy``; returns its bytes."""
    outside = tmp_path / "outside"
    outside.mkdir()
    np.save(outside / "data.npy", np.arange(4, dtype=np.float32))
    (qg / "linked").symlink_to(outside, target_is_directory=True)
    return (outside / "data.npy").read_bytes()


def test_a_listed_file_under_a_linked_folder_is_not_part_of_the_package(qg: Path, tmp_path: Path) -> None:
    """os.walk (what digest lists) does not follow a link to a folder, but the digest check read
    every listed name through it: metadata.json listing linked/data.npy, with its right digest,
    made a file anywhere on the disk part of a verified package."""
    data = linked_folder(qg, tmp_path)
    metadata = json.loads((qg / "metadata.json").read_text("utf-8"))
    metadata["digest"]["files"]["linked/data.npy"] = digests.sha256_hex(data)
    (qg / "metadata.json").write_text(json.dumps(metadata), encoding="utf-8")
    with pytest.raises(DigestError, match=r"linked/data\.npy: linked/ is a symbolic link to a folder") as info:
        open_folder(qg)
    assert info.value.file == "linked/data.npy" and info.value.reason == "missing"
    assert "not part of the package" in str(info.value)


def test_a_file_under_a_linked_folder_is_never_read(qg: Path, tmp_path: Path) -> None:
    """The same rule for unverified reads (validate, an author's package without metadata.json) and
    for digest, which lists nothing behind the link."""
    linked_folder(qg, tmp_path)
    (qg / "deeper").mkdir()
    (qg / "deeper" / "link").symlink_to(tmp_path / "outside", target_is_directory=True)
    digests.write_metadata(qg)
    listed = json.loads((qg / "metadata.json").read_text("utf-8"))["digest"]["files"]
    assert not any(name.startswith(("linked/", "deeper/")) for name in listed)
    assert open_folder(qg).is_verified  # what is not listed is not read, so the package opens
    for package in (open_folder(qg, verify_digests=False), open_folder(qg)):
        for name, link in (("linked/data.npy", "linked/"), ("deeper/link/data.npy", "deeper/link/")):
            assert not package.has(name)
            with pytest.raises(PackageError, match=f"{link} is a symbolic link to a folder"):
                package.read_bytes(name)
    with pytest.raises(PackageError, match="linked/ is a symbolic link to a folder") as info:
        digests.read_file(qg, "linked/data.npy")
    assert info.value.path == str(qg / "linked" / "data.npy")


def test_a_linked_file_that_points_outside_the_package_is_followed(qg: Path, tmp_path: Path) -> None:
    """Links to files are followed (a Hugging Face snapshot links every file into blobs/): the digest
    covers what the link reads."""
    (tmp_path / "blobs").mkdir()
    manifest = qg / "manifest.json"
    manifest.rename(tmp_path / "blobs" / "manifest")
    manifest.symlink_to(tmp_path / "blobs" / "manifest")
    assert open_folder(qg).is_verified and wk.load_kernel(qg).op_id == QUICK_GELU


@pytest.mark.parametrize("kind", ["folder", "fifo", "device", "dangling link"])
def test_a_metadata_json_that_is_no_regular_file_is_not_taken_for_a_missing_one(qg: Path, tmp_path: Path,
                                                                                 kind: str) -> None:  # fmt: skip
    """A folder named metadata.json made validate say "no metadata.json" and load_kernel open the
    package unverified, as if it had none."""
    path = qg / "metadata.json"
    path.unlink()
    if kind == "folder":
        path.mkdir()
    elif kind == "fifo":
        if not hasattr(os, "mkfifo"):
            pytest.skip("no FIFOs here")
        os.mkfifo(path)
    elif kind == "device":
        path.symlink_to(os.devnull)
    else:
        path.symlink_to(tmp_path / "nothing.json")
    word = {"folder": "a folder", "fifo": "a FIFO", "device": "a device", "dangling link": "a symbolic link to nothing"}
    with pytest.raises(DigestError, match=rf"metadata\.json is not a regular file \({word[kind]}\)") as info:
        wk.load_kernel(qg)
    assert info.value.file == "metadata.json" and info.value.reason == "metadata"
    check = CliRunner(env={"COLUMNS": "200"}).invoke(main, ["digest", str(qg), "--check"])
    assert check.exit_code == 1 and f"metadata.json is not a regular file ({word[kind]})" in check.output, check.output


def test_a_manifest_json_folder_is_not_a_missing_manifest(qg: Path) -> None:
    (qg / "manifest.json").unlink()
    (qg / "manifest.json").mkdir()
    for opens in (wk.load_kernel, digests.write_metadata):
        with pytest.raises(PackageError, match=r"manifest\.json is not a regular file \(a folder\)"):
            opens(qg)


# --- writing ----------------------------------------------------------------------------------------


def test_write_metadata_for_a_new_package(tmp_path: Path) -> None:
    root = copy_package(QUICK_GELU, tmp_path / "qg")
    (root / "metadata.json").unlink()
    metadata, changes = digests.write_metadata(root)
    assert metadata["id"] == QUICK_GELU and metadata["version"] == 1
    assert metadata["provenance"]["generator"].startswith("webgpu-kernels")
    assert {c.status for c in changes} == {"added"}
    assert open_folder(root).is_verified
    on_disk = json.loads((root / "metadata.json").read_text("utf-8"))
    assert on_disk == metadata


def test_refresh_keeps_identity_and_reports_changes(qg: Path) -> None:
    path = qg / "metadata.json"
    data = json.loads(path.read_text("utf-8"))
    data["version"] = 3
    data["provenance"] = {"source": "mine", "license": "MIT"}
    path.write_text(json.dumps(data), encoding="utf-8")
    flip_byte(qg / "bench.json")
    (qg / "bench.json").rename(qg / "bench2.json")
    (qg / "README.md").write_text("hi\n", encoding="utf-8")
    metadata, changes = digests.write_metadata(qg)
    assert metadata["version"] == 3 and metadata["provenance"] == {"source": "mine", "license": "MIT"}
    status = {c.file: c.status for c in changes}
    assert status["bench2.json"] == "added" and status["README.md"] == "added"
    assert status["bench.json"] == "removed" and status["manifest.json"] == "unchanged"
    assert open_folder(qg).is_verified


def test_digest_lists_what_changed_and_counts_the_rest(qg: Path) -> None:
    """`digest --check` printed a row per file, 49 for a package with that many, when nothing had
    changed: it lists the files added, changed or removed, and counts the others."""
    runner = CliRunner(env={"COLUMNS": "200"})
    total = len(json.loads((qg / "metadata.json").read_text("utf-8"))["digest"]["files"])
    result = runner.invoke(main, ["digest", "--check", str(qg)])
    assert result.exit_code == 0 and f"{total} files, all unchanged" in result.output, result.output
    assert "manifest.json" not in result.output and "metadata.json is up to date" in result.output
    flip_byte(qg / "bench.json")
    result = runner.invoke(main, ["digest", "--check", str(qg)])
    assert result.exit_code == 1 and "bench.json" in result.output and "changed" in result.output, result.output
    assert f"{total - 1} other files unchanged" in result.output and "manifest.json" not in result.output


def test_file_names_that_cannot_be_listed_are_refused(qg: Path) -> None:
    (qg / "bad name.json").write_text("{}", encoding="utf-8")
    with pytest.raises(PackageError, match="cannot be listed"):
        digests.write_metadata(qg)


def test_a_non_content_file_whose_name_cannot_be_listed_stays_unlisted(qg: Path) -> None:
    """The docs let a README sit unlisted, but `digest` refused the whole package over a
    "design notes.txt" that the package loaded, validated and tested with."""
    (qg / "design notes.txt").write_text("notes", encoding="utf-8")
    metadata, changes = digests.write_metadata(qg)
    assert "design notes.txt" not in metadata["digest"]["files"]
    assert [c for c in changes if c.file == "design notes.txt"] == [
        digests.DigestChange("design notes.txt", digests.UNLISTABLE, None)]  # fmt: skip
    assert open_folder(qg).is_verified
    result = CliRunner().invoke(main, ["digest", "--check", str(qg)])
    assert result.exit_code == 0 and "metadata.json is up to date" in result.output, result.output


def test_a_file_name_ending_in_a_newline_cannot_be_listed(qg: Path) -> None:
    """The name check's `$` matched before a final newline: digest listed "notes\\n", then refused
    the metadata.json it wrote ("is no package file name"), and --check failed for good."""
    (qg / "notes\n").write_text("notes", encoding="utf-8")
    metadata, changes = digests.write_metadata(qg)
    assert "notes\n" not in metadata["digest"]["files"]
    assert digests.DigestChange("notes\n", digests.UNLISTABLE, None) in changes
    result = CliRunner().invoke(main, ["digest", "--check", str(qg)])
    assert result.exit_code == 0 and "metadata.json is up to date" in result.output, result.output


def test_a_missing_file_is_reported_as_missing_not_as_unlisted(qg: Path) -> None:
    """A verified package asked for a file that is not there said "not listed in metadata.json ...
    run digest", which running digest never fixed."""
    package = open_folder(qg)
    with pytest.raises(PackageError, match="file not found in the package") as info:
        package.read_bytes("no-such.npy")
    assert not isinstance(info.value, DigestError)


def test_digest_command(qg: Path) -> None:
    runner = CliRunner(env={"COLUMNS": "200"})
    result = runner.invoke(main, ["digest", str(qg), "--check"])
    assert result.exit_code == 0, result.output
    assert "up to date" in result.stdout
    flip_byte(qg / "test.json")
    result = runner.invoke(main, ["digest", str(qg), "--check"])
    assert result.exit_code == 1 and "out of date" in result.stdout and "changed" in result.stdout
    result = runner.invoke(main, ["info", str(qg)])
    assert result.exit_code == 2 and "test.json" in result.stderr and "does not match" in result.stderr
    result = runner.invoke(main, ["digest", str(qg), "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert [c["file"] for c in data["changes"] if c["status"] == "changed"] == ["test.json"]
    assert runner.invoke(main, ["info", str(qg)]).exit_code == 0
    result = runner.invoke(main, ["digest", str(qg / "nope")])
    assert result.exit_code == 2 and "nope: no such folder" in result.stderr


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_a_fifo_or_a_device_is_refused_at_once(qg: Path) -> None:
    """A FIFO (a read blocks forever) or a symlink to /dev/zero (a read never ends) reports a size
    of 0: reading either as a package file is refused (the manifest's own shader, a test.json data
    file), not attempted."""
    os.mkfifo(qg / "fifo.npy")
    (qg / "zero.npy").symlink_to("/dev/zero")
    (qg / "metadata.json").unlink()  # an author's work in progress: no digests to stop them first
    package = open_folder(qg)
    refusals: list[str] = []

    def read_all() -> None:
        for name in ("fifo.npy", "zero.npy"):
            for read in (lambda: digests.read_file(qg, name), lambda: package.read_bytes(name)):
                try:
                    read()
                except PackageError as exc:
                    refusals.append(str(exc))

    # A hang guard, not a speed target: a blocked read would never return, so the reads run on a
    # thread given a minute; a writer then releases a FIFO's blocked open so that the test ends.
    reader = threading.Thread(target=read_all, daemon=True)
    reader.start()
    reader.join(timeout=60)
    hung = reader.is_alive()
    if hung:
        try:
            os.close(os.open(qg / "fifo.npy", os.O_WRONLY | os.O_NONBLOCK))
        except OSError:  # no reader waits on the FIFO: stuck elsewhere
            pass
    assert not hung, f"a read did not return in 60 s (refused so far: {refusals})"
    assert len(refusals) == 4, refusals
    assert all("not a regular file" in message for message in refusals), refusals


def test_a_listed_file_replaced_by_a_device_says_so(qg: Path) -> None:
    (qg / "test.json").unlink()
    (qg / "test.json").symlink_to("/dev/zero")
    with pytest.raises(DigestError, match="test.json: not a regular file") as info:
        open_folder(qg)
    assert info.value.file == "test.json"


def test_digest_follows_a_renamed_op_and_skips_editor_backups(qg: Path) -> None:
    """Starting a new op from a copy: digest kept the old id (validate then refused the package),
    and an editor's backup file (x.jinja~) stopped it with an error."""
    manifest = json.loads((qg / "manifest.json").read_text("utf-8"))
    manifest["domain"], manifest["name"] = "com.example", "MyGelu"
    (qg / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    (qg / "quick-gelu.wgsl.jinja~").write_text("backup", encoding="utf-8")
    (qg / "#quick-gelu.wgsl.jinja#").write_text("autosave", encoding="utf-8")
    check = CliRunner().invoke(main, ["digest", str(qg), "--check"])
    assert check.exit_code == 1 and "id: com.microsoft.QuickGelu -> com.example.MyGelu" in check.output
    result = CliRunner().invoke(main, ["digest", str(qg)])
    assert result.exit_code == 0, result.output
    metadata = json.loads((qg / "metadata.json").read_text("utf-8"))
    assert metadata["id"] == "com.example.MyGelu" and metadata["version"] == 1
    assert not any(name.endswith("#") or name.endswith("~") for name in metadata["digest"]["files"])
    assert wk.load_kernel(qg).op_id == "com.example.MyGelu"


def test_digest_check_on_an_unreadable_metadata_json_says_out_of_date(qg: Path) -> None:
    """It exited 2 (a usage error) where the documented status for "missing or out of date" is 1."""
    (qg / "metadata.json").write_text('{"id": ', encoding="utf-8")
    result = CliRunner().invoke(main, ["digest", str(qg), "--check"])
    assert result.exit_code == 1 and "metadata.json cannot be read" in result.output, result.output
    assert CliRunner().invoke(main, ["digest", str(qg)]).exit_code == 2  # not overwritten: fix or delete it


def test_digest_check_on_a_schema_breaking_metadata_json_says_out_of_date(qg: Path) -> None:
    """--check compared digests only: version 0, sha512 and a stray field read "up to date" (exit
    0) where validate and every load refuse the file, and digest kept the version 0 and then
    refused to write it (exit 2) instead of refreshing it as documented."""
    path = qg / "metadata.json"
    data = json.loads(path.read_text("utf-8"))
    data["version"], data["digest"]["algorithm"], data["extra"] = 0, "sha512", "x"
    path.write_text(json.dumps(data), encoding="utf-8")
    check = CliRunner(env={"COLUMNS": "200"}).invoke(main, ["digest", str(qg), "--check"])
    assert check.exit_code == 1 and "out of date" in check.output, check.output
    assert "up to date" not in check.output.replace("out of date", "")
    result = CliRunner().invoke(main, ["digest", str(qg)])
    assert result.exit_code == 0, result.output
    metadata = json.loads(path.read_text("utf-8"))
    assert metadata["version"] == 1 and metadata["digest"]["algorithm"] == "sha256" and "extra" not in metadata
    assert CliRunner().invoke(main, ["digest", str(qg), "--check"]).exit_code == 0
    assert open_folder(qg).is_verified


def test_digest_sets_the_contract_version_a_hub_revision_must_hold(qg: Path) -> None:
    """Publishing revision v2 needs metadata.json to say version 2, and digest kept 1 with no way to
    change it short of editing the file (an author's trial as an author)."""
    runner = CliRunner(env={"COLUMNS": "200"})
    check = runner.invoke(main, ["digest", str(qg), "--check", "--version", "2"])
    assert check.exit_code == 1 and "it says contract version 1, not 2" in check.output, check.output
    moved = runner.invoke(main, ["digest", str(qg), "--version", "2"])
    # "all unchanged" alone had read as if nothing happened (a maintainer's trial): the move is said
    assert moved.exit_code == 0 and "contract version: 1 -> 2" in moved.output, moved.output
    assert "contract version:" not in runner.invoke(main, ["digest", str(qg), "--version", "2"]).output
    assert json.loads((qg / "metadata.json").read_text("utf-8"))["version"] == 2
    assert runner.invoke(main, ["digest", str(qg), "--check", "--version", "2"]).exit_code == 0
    assert runner.invoke(main, ["digest", str(qg)]).exit_code == 0  # kept without --version
    assert json.loads((qg / "metadata.json").read_text("utf-8"))["version"] == 2
    assert runner.invoke(main, ["digest", str(qg), "--version", "0"]).exit_code == 2


def test_digest_says_which_contract_version_it_kept_where_sinceversion_differs(qg: Path) -> None:
    """`new` writes version 1; an author who then sets the manifest's sinceVersion to 13 (demo.ArgMax)
    saw digest keep 1 without a word. The two are independent (the opset the op dates from; the
    package's contract version), so digest keeps it, but says so and how to change it."""
    runner = CliRunner(env={"COLUMNS": "200"})
    manifest = json.loads((qg / "manifest.json").read_text("utf-8"))
    (qg / "manifest.json").write_text(json.dumps({**manifest, "sinceVersion": 13}), encoding="utf-8")
    out = " ".join(runner.invoke(main, ["digest", str(qg)]).output.split())
    assert "contract version 1 kept from metadata.json, not the manifest's sinceVersion 13" in out, out
    assert "a package published as Hub revision vN must say N" in out, out
    # An author read "--version N sets it, as a package published as vN must say N" as "run
    # digest --version 13": the note says 1 is right, and what --version is for.
    assert "Keep it: a first contract is version 1, whatever sinceVersion" in out, out
    assert "--version N is for a later, changed contract (published as vN), not for matching sinceVersion" in out, out
    # A passing --check says nothing of it: a CI job's every green log had carried the note;
    # a failing one still does (test_cli_package.py).
    green = runner.invoke(main, ["digest", str(qg), "--check"])
    assert green.exit_code == 0 and "kept" not in green.output, green.output
    assert json.loads((qg / "metadata.json").read_text("utf-8"))["version"] == 1
    (qg / "metadata.json").unlink()  # a new metadata.json starts at sinceVersion: nothing kept
    assert "kept" not in runner.invoke(main, ["digest", str(qg)]).output
    assert json.loads((qg / "metadata.json").read_text("utf-8"))["version"] == 13
    for args in ([], ["--version", "2"]):  # the same number, or one the author just chose: no note
        assert "kept" not in runner.invoke(main, ["digest", str(qg), *args]).output


def test_the_kept_version_note_is_said_when_the_manifest_changed_not_on_every_digest(tmp_path: Path) -> None:
    """ai.onnx.Gelu is contract version 1 of an opset-20 op: digest said its six-line note after every
    template edit, each edit-digest cycle. The numbers can only come to differ in a run that records
    a changed manifest.json: the note is said then, and not for a change to another file or none."""
    from conftest import PACKAGES_DIR

    root = tmp_path / "ai.onnx.Gelu"
    shutil.copytree(PACKAGES_DIR / "ai.onnx.Gelu", root)
    runner = CliRunner(env={"COLUMNS": "200"})

    def digest(*args: str) -> str:
        result = runner.invoke(main, ["digest", str(root), *args])
        return " ".join(result.output.split())

    template = root / "gelu.wgsl.jinja"
    template.write_text(template.read_text("utf-8") + "// edited\n", "utf-8")
    edited = digest()
    assert "changed" in edited and "kept from metadata.json" not in edited, edited
    assert "kept from metadata.json" not in digest()  # nothing changed
    manifest = json.loads((root / "manifest.json").read_text("utf-8"))
    (root / "manifest.json").write_text(json.dumps({**manifest, "description": "edited"}), encoding="utf-8")
    checked = digest("--check")  # out of date, the manifest among the changes: said before the verdict
    assert "sinceVersion 20" in checked and checked.endswith("to record them"), checked
    said = digest()
    assert "contract version 1 kept from metadata.json, not the manifest's sinceVersion 20" in said, said
    assert "kept from metadata.json" not in digest()
    assert json.loads((root / "metadata.json").read_text("utf-8"))["version"] == 1


def test_digest_reads_the_manifest_once(qg: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """digest read manifest.json up to four times a run (its digest, the op id, the templates it names,
    the kept version's note), and each read could see another file. The digests are the same."""
    runner = CliRunner(env={"COLUMNS": "200"})
    manifest = json.loads((qg / "manifest.json").read_text("utf-8"))
    (qg / "manifest.json").write_text(json.dumps({**manifest, "sinceVersion": 13}), encoding="utf-8")
    reads = []
    read_file = digests.read_file

    def counted(root: Path, name: str) -> bytes:
        reads.append(name)
        return read_file(root, name)

    monkeypatch.setattr(digests, "read_file", counted)
    outputs = []
    for args in ([], ["--check"], ["--json"]):
        reads.clear()
        result = runner.invoke(main, ["digest", str(qg), *args])
        assert result.exit_code == 0, result.output
        assert reads.count("manifest.json") == 1, (args, reads)
        outputs.append(" ".join(result.output.split()))
    assert "contract version 1 kept from metadata.json, not the manifest's sinceVersion 13" in outputs[0]
    files = json.loads((qg / "metadata.json").read_text("utf-8"))["digest"]["files"]
    assert files["manifest.json"] == digests.sha256_hex((qg / "manifest.json").read_bytes())


def test_digest_reads_metadata_json_once(qg: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """digest read metadata.json two or three times a run (the old id and version, then --check's
    comparison or the refresh that keeps its version), and each read could see another file. Both
    readers are counted: package.py's (open_folder's) and digests.py's."""
    from webgpu_kernels import package

    runner = CliRunner(env={"COLUMNS": "200"})
    reads = []

    def counting(read_file):
        def counted(root: Path, name: str) -> bytes:
            reads.append(name)
            return read_file(root, name)

        return counted

    monkeypatch.setattr(digests, "read_file", counting(digests.read_file))
    monkeypatch.setattr(package, "read_file", counting(package.read_file))
    for args in ([], ["--check"], ["--json"], ["--check", "--json"], ["--version", "2"], ["--check", "--version", "2"]):
        reads.clear()
        result = runner.invoke(main, ["digest", str(qg), *args])
        assert result.exit_code == 0, (args, result.output)
        assert reads.count("metadata.json") == 1, (args, reads)
    (qg / "metadata.json").write_text('{"id": ', encoding="utf-8")  # no JSON: read once, refused in the same words
    for args, code, said in (([], 2, "the existing metadata.json cannot be read (invalid JSON at line 1 column 8"),
                             (["--check"], 1, "metadata.json cannot be read (invalid JSON at line 1 column 8")):  # fmt: skip
        reads.clear()
        result = runner.invoke(main, ["digest", str(qg), *args])
        assert result.exit_code == code and said in " ".join(result.output.split()), (args, result.output)
        assert reads.count("metadata.json") == 1, (args, reads)


def test_digest_that_cannot_write_metadata_json_says_so(qg: Path) -> None:
    """A failed write (here a folder where the file goes) ended in an IsADirectoryError traceback."""
    (qg / "metadata.json").unlink()
    (qg / "metadata.json").mkdir()
    result = CliRunner().invoke(main, ["digest", str(qg)])
    assert result.exit_code == 2 and "metadata.json" in result.stderr and "Traceback" not in result.output, result.output


def test_a_lone_surrogate_in_package_json_is_refused() -> None:
    """"\\ud800" is valid JSON but no text: it failed later, as a raw UnicodeEncodeError where a
    template's output or the console encoded it. A proper pair still decodes."""
    from webgpu_kernels.reading import decode_json

    with pytest.raises(ValueError, match="lone surrogate"):
        decode_json(b'{"description": "bad \\ud800 text"}')
    assert decode_json(b'{"description": "\\ud83d\\ude00"}') == {"description": "\U0001f600"}


def test_a_repeated_key_in_package_json_is_refused(qg: Path) -> None:
    """Python's JSON reader keeps the last of a repeated key, other readers the first: a second
    "domain" changed the op id where a reviewer reading the file saw the first."""
    from webgpu_kernels.reading import decode_json

    with pytest.raises(ValueError, match="the key 'domain' appears more than once in one object"):
        decode_json(b'{"domain": "com.microsoft", "name": "QuickGelu", "domain": "evil"}')
    assert decode_json(b'{"a": {"x": 1}, "b": {"x": 2}}') == {"a": {"x": 1}, "b": {"x": 2}}  # per object
    text = (qg / "manifest.json").read_text("utf-8")
    (qg / "manifest.json").write_text(text.replace('"domain":', '"domain": "evil", "domain":', 1), "utf-8")
    with pytest.raises(PackageError, match="appears more than once"):
        wk.load_kernel(qg)


@pytest.mark.parametrize("name", ["node_modules/data.npy", "__pycache__/data.npy", "data.npy~"])
def test_a_file_digest_never_lists_is_refused_unverified_too(qg: Path, name: str) -> None:
    """validate opens a package unverified and read such a file from disk ("valid"); `test` opens it
    verified and refused the file, advising `digest`, which never lists it."""
    (qg / name).parent.mkdir(exist_ok=True)
    np.save(qg / "tmp.npy", np.zeros(3, np.float32))
    (qg / "tmp.npy").rename(qg / name)
    digests.write_metadata(qg)
    assert name not in json.loads((qg / "metadata.json").read_text("utf-8"))["digest"]["files"]
    for package in (open_folder(qg, verify_digests=False), open_folder(qg)):
        with pytest.raises(PackageError, match="never listed in metadata.json"):
            package.read_bytes(name)
    assert open_folder(qg, verify_digests=False).read_bytes("test.json")  # listable names still read


@pytest.mark.parametrize(("path", "says"), [("~no_such_user_xyz/pkg", "no such folder"),
                                            ("/tmp/" + "a" * 5000, "cannot be opened")], ids=["unknown-user", "too-long"])
def test_a_path_that_cannot_be_opened_is_a_package_error(path: str, says: str) -> None:
    """expanduser() of an unknown user raised a raw RuntimeError, and a name too long an OSError."""
    with pytest.raises(PackageError, match=says):
        wk.load_kernel(path)


def test_has_a_name_too_long_is_false(qg: Path) -> None:
    assert open_folder(qg).has("a" * 5000 + ".wgsl.jinja") is False


def test_a_listed_name_too_long_for_the_file_system_is_a_digest_problem(qg: Path) -> None:
    """A 300-character name in digest.files raised a raw OSError (ENAMETOOLONG, from Path.is_file)
    in get_kernel, load_kernel, info and test: a package from the Hub could ship one."""
    metadata = json.loads((qg / "metadata.json").read_text("utf-8"))
    metadata["digest"]["files"]["a" * 300 + ".json"] = "0" * 64
    (qg / "metadata.json").write_text(json.dumps(metadata), encoding="utf-8")
    with pytest.raises(DigestError, match="not a valid package file name"):
        wk.load_kernel(qg)
    assert not digests.valid_file_name("a" * 256) and digests.valid_file_name("a" * 255)
    assert not digests.valid_file_name("/".join(["a" * 200] * 6))  # 1205 characters


@pytest.mark.parametrize("target", ["dangling", "a file"])
def test_digest_never_writes_through_a_symlinked_metadata_json(qg: Path, tmp_path: Path, target: str) -> None:
    """digest wrote metadata.json through a symbolic link: a dangling one created its target outside
    the package, and one to a user's file overwrote it."""
    outside = tmp_path / "outside.json"
    if target == "a file":
        outside.write_text('{"important": "user data"}', encoding="utf-8")
    (qg / "metadata.json").unlink()
    (qg / "metadata.json").symlink_to(outside)
    result = CliRunner().invoke(main, ["digest", str(qg)])
    assert result.exit_code == 0, result.output
    assert not (qg / "metadata.json").is_symlink() and open_folder(qg).is_verified
    if target == "a file":
        assert outside.read_text("utf-8") == '{"important": "user data"}'
    else:
        assert not outside.exists()
    assert [p.name for p in qg.iterdir() if p.name.endswith(".tmp")] == []
    umask = os.umask(0)
    os.umask(umask)
    assert (qg / "metadata.json").stat().st_mode & 0o777 == 0o666 & ~umask  # a new file, as open() makes one


def test_digest_keeps_the_permissions_of_the_metadata_json_it_replaces(qg: Path) -> None:
    (qg / "metadata.json").chmod(0o664)  # group-writable: a shared checkout
    digests.write_metadata(qg)
    assert (qg / "metadata.json").stat().st_mode & 0o777 == 0o664


def test_the_bytes_a_package_opens_with_are_bounded_before_they_are_read(qg: Path, monkeypatch) -> None:
    """Every listed file is read and kept: 990 hard links to one 8 MiB file (an 8 MB folder) cost
    gigabytes of memory to open, and every listed file was read before the file-count refusal."""
    blob = qg / "blob.npy"
    np.save(blob, np.zeros(1000, np.float64))  # 8,128 bytes
    for i in range(5):
        os.link(blob, qg / f"link{i}.npy")
    digests.write_metadata(qg)
    read = []
    real_read = digests.read_file
    monkeypatch.setattr(digests, "read_file", lambda root, name: read.append(name) or real_read(root, name))
    monkeypatch.setattr(digests, "MAX_PACKAGE_BYTES", 30_000)
    with pytest.raises(DigestError, match="more than 0 MiB together: not a kernel package"):
        open_folder(qg)
    assert sum((qg / n).stat().st_size for n in read if n != "metadata.json") <= 30_000  # none past the bound


def test_digest_refuses_files_past_what_the_loader_opens(qg: Path, monkeypatch) -> None:
    """digest listed files holding more together than a package's opening reads (MAX_PACKAGE_BYTES,
    shrunk here to a byte below this package), and the package it had digested no longer loaded
    ('the listed files hold more than 512 MiB together'), where expect refuses such a run. Refused
    as expect refuses it (exit 2), naming the largest file, before any file is read; at the limit
    it is digested, and loads."""
    (qg / "notes.txt").write_bytes(b"x" * 30_000)  # no content file, but listed and read all the same
    total = sum((qg / name).stat().st_size for name in digests.package_files(qg))
    before = (qg / "metadata.json").read_bytes()
    read = []
    real_read = digests.read_file
    monkeypatch.setattr(digests, "read_file", lambda root, name: read.append(name) or real_read(root, name))
    monkeypatch.setattr(digests, "MAX_PACKAGE_BYTES", total - 1)
    result = CliRunner().invoke(main, ["digest", str(qg)])
    assert result.exit_code == 2, result.output
    assert f"hold {total} bytes together, more than the loader opens ({total - 1})" in result.stderr, result.stderr
    assert "the largest is 'notes.txt', 30000 bytes" in result.stderr and "Traceback" not in result.output
    assert (qg / "metadata.json").read_bytes() == before
    assert set(read) == {"metadata.json", "manifest.json"}  # for the id and what is kept, no file hashed
    monkeypatch.setattr(digests, "MAX_PACKAGE_BYTES", total)
    assert CliRunner().invoke(main, ["digest", str(qg)]).exit_code == 0
    assert open_folder(qg).is_verified


def test_metadata_listing_more_files_than_a_package_holds_is_one_problem(qg: Path) -> None:
    """Every bad entry gave its own schema errors: a huge list made validate take minutes."""
    metadata = json.loads((qg / "metadata.json").read_text("utf-8"))
    metadata["digest"]["files"] = {f"f{i} bad": "x" for i in range(digests.MAX_PACKAGE_FILES + 1)}
    problems = digests.schema_problems(metadata)
    assert len(problems) == 1 and "lists 1001 files, more than a package may hold (1000)" in problems[0].message


def test_a_content_file_whose_name_cannot_be_listed_is_not_sent_to_digest(qg: Path) -> None:
    """validate (and a load) said of "x 32.npy" to run `webgpu-kernels digest PATH` to record it,
    which refuses that name ("rename it"): the two commands disagreed on what to do."""
    (qg / "x 32.npy").write_bytes((qg / "vec4-2x64-f32.Y.npy").read_bytes())
    problems = [p for p in validate_package(qg, gpu=False).errors if p.file == "x 32.npy"]
    assert len(problems) == 1 and "rename or remove it" in problems[0].message, problems
    assert "webgpu-kernels digest" not in problems[0].message
    with pytest.raises(PackageError, match="cannot be listed"):
        digests.write_metadata(qg)


def test_case_twins_answers_as_case_twin_does():
    """case_twins (the list folded once, for validate's loops) names the twin case_twin names: the
    first in sorted order where several fold alike, none for a name that is a file."""
    files = ["b.npy", "A.npy", "a.npy", "Caf\u00e9.wgsl.jinja", "data/X.npy"]
    twin = digests.case_twins(files)
    for name in ["A.NPY", "a.npy", "B.npy", "cafe\u0301.wgsl.jinja", "data/x.npy", "DATA/x.npy", "none.npy"]:
        assert twin(name) == digests.case_twin(name, files), name
    assert twin("A.NPY") == "A.npy" and twin("a.npy") is None and twin("cafe\u0301.wgsl.jinja") == "Caf\u00e9.wgsl.jinja"


# --- what digest takes from the manifest and an existing metadata.json ---------------------------------


def _write_manifest(root: Path, change) -> None:
    manifest = json.loads((root / "manifest.json").read_text("utf-8"))
    (root / "manifest.json").write_text(json.dumps(change(manifest)), "utf-8")


@pytest.mark.parametrize(("change", "fragment"), [
    (lambda m: [m], "the manifest is not a JSON object"),
    (lambda m: {k: v for k, v in m.items() if k != "domain"}, "the manifest has no domain and name to take the package id"),
])  # fmt: skip
def test_digest_refuses_a_manifest_it_cannot_take_the_package_id_from(qg: Path, change, fragment) -> None:
    _write_manifest(qg, change)
    (qg / "metadata.json").unlink()
    with pytest.raises(PackageError, match=fragment) as info:
        digests.write_metadata(qg)
    assert info.value.path == str(qg.resolve() / "manifest.json")
    assert not (qg / "metadata.json").exists()


def test_a_manifest_without_domain_keeps_the_existing_id(qg: Path) -> None:
    _write_manifest(qg, lambda m: {k: v for k, v in m.items() if k != "domain"})
    (qg / "metadata.json").write_text(json.dumps({"id": "x.Kept", "version": 2}), "utf-8")
    metadata, _ = digests.write_metadata(qg)
    assert (metadata["id"], metadata["version"]) == ("x.Kept", 2)


@pytest.mark.parametrize(("since", "version"), [(7, 7), (0, 1), ("2", 1), (True, 1), (None, 1)])
def test_a_new_metadata_json_starts_at_the_manifest_s_since_version_when_it_is_one(qg: Path, since, version) -> None:
    """sinceVersion a version (an integer from 1) is a new package's contract version; anything else starts at 1."""
    _write_manifest(qg, lambda m: {**m, "sinceVersion": since} if since is not None else
                    {k: v for k, v in m.items() if k != "sinceVersion"})  # fmt: skip
    (qg / "metadata.json").unlink()
    metadata, _ = digests.write_metadata(qg)
    assert metadata["version"] == version and type(metadata["version"]) is int


def test_a_refreshed_metadata_json_keeps_its_description_and_version(qg: Path) -> None:
    (qg / "metadata.json").write_text(json.dumps({"id": "x.Y", "version": 3, "description": "kept text"}), "utf-8")
    metadata, _ = digests.write_metadata(qg)
    assert metadata["description"] == "kept text" and metadata["version"] == 3
    assert metadata["id"] == QUICK_GELU  # the manifest's id, not the stale one
    assert json.loads((qg / "metadata.json").read_text("utf-8"))["description"] == "kept text"


@pytest.mark.parametrize(("name", "fragment"), [
    ("kernel.wgsl.jinja", None), ("data/case0.X.npy", None), ("a+b-c_d.txt", None),
    ("a b.txt", "this name can never be listed"), ("x/.hidden", "this name can never be listed"),
    ("\u00e9.txt", "this name can never be listed"), ("a\\b.txt", "this name can never be listed"),
    ("__pycache__/m.py", "files under __pycache__/ are never listed"), ("notes.txt~", "editor backup files"),
    ("#notes.txt#", "editor backup files"),
])  # fmt: skip
def test_never_listed_says_why_digest_would_never_list_a_name(name: str, fragment: str | None) -> None:
    """What a read of a file outside metadata.json is told; None for a name digest lists."""
    why = digests.never_listed(name)
    assert (why is None) if fragment is None else (why is not None and why.startswith(fragment)), why
