"""`webgpu-kernels upload PATH REPO` (hub_upload.py): publishing a package to a kernel repository,
through the real huggingface_hub client against the local Hub of hub_server.py (its write routes).

Each test copies the test package demo.ScaleShift to a temporary folder and digests it; the server
starts on an empty folder (repositories are created by the uploads). ``HF_ENDPOINT``/``HF_HOME``
are isolated as in test_hub.py (the ``hub_env`` fixture), and ``HF_TOKEN`` is a write token.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

import webgpu_kernels as wk
from webgpu_kernels import hub
from webgpu_kernels.digests import write_metadata
from webgpu_kernels.errors import HubError, PackageError
from webgpu_kernels.hub import PACKAGE_DIR
from webgpu_kernels.hub_upload import SHOWN_LINKS, can_upload, describe, upload_package

from conftest import PACKAGES_DIR
from hub_server import HubServer
from references import scale_shift

hf_constants = pytest.importorskip("huggingface_hub.constants")
_hf_version = pytest.importorskip("huggingface_hub").__version__
# Loading needs pyproject's floor (1.26), publishing 2.3: with an older release every upload is refused.
pytestmark = pytest.mark.skipif(not can_upload(_hf_version),
                                reason=f"upload needs huggingface_hub>=2.3; {_hf_version} is installed")

OP_ID = "demo.ScaleShift"
REPO = f"webgpu-kernels/{OP_ID}"
TOKEN = "hf_writer_secret_123"


@pytest.fixture
def package(tmp_path) -> Path:
    """A digested copy of demo.ScaleShift, with files that are no part of the package beside it."""
    root = shutil.copytree(PACKAGES_DIR / OP_ID, tmp_path / "pkg" / OP_ID)
    (root / "README.md").write_text("# ScaleShift\n", encoding="utf-8")
    write_metadata(root)
    # Never uploaded: caches, editor backups, hidden files, a name metadata.json cannot hold.
    (root / "__pycache__").mkdir()
    (root / "__pycache__" / "x.cpython-311.pyc").write_bytes(b"\0")
    (root / "scale-shift.wgsl.jinja~").write_text("old\n", encoding="utf-8")
    (root / ".DS_Store").write_bytes(b"\0")
    (root / "design notes.txt").write_text("notes\n", encoding="utf-8")
    return root


@pytest.fixture
def server(tmp_path, hub_env, monkeypatch):
    """An empty local Hub; HF_TOKEN a token that may write; no huggingface_hub login."""
    srv = HubServer(tmp_path / "hub-root").start()
    monkeypatch.setenv("HF_ENDPOINT", srv.url)
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    monkeypatch.setattr(hf_constants, "HF_TOKEN_PATH", str(tmp_path / "no-token"))
    monkeypatch.setattr(hf_constants, "HF_STORED_TOKENS_PATH", str(tmp_path / "no-stored-tokens"))
    yield srv
    srv.stop()


def _cli():
    from webgpu_kernels.cli import main

    return main


def upload(*args: str):
    return CliRunner().invoke(_cli(), ["upload", *args])


def served(server: HubServer, repo: str, ref: str) -> list[str]:
    folder = server.root / repo / ref
    return sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file())


PACKAGE_FILES = ["build/webgpu/README.md", "build/webgpu/manifest.json", "build/webgpu/metadata.json",
                 "build/webgpu/scale-shift.wgsl.jinja"]  # fmt: skip


# --- the round trip ---------------------------------------------------------------------------------


def test_an_uploaded_package_loads_with_get_kernel(server, package, hub_env, rng):
    result = upload_package(package, REPO)
    commit = server.commit_of(REPO, "v1")
    assert (result.repo_id, result.revision, result.commit, result.version) == (REPO, "v1", commit, 1)
    assert result.created_repo and result.created_branch and result.new_commit and result.verified
    assert result.files == PACKAGE_FILES  # exactly what metadata.json lists, and metadata.json
    assert served(server, REPO, "v1") == [".gitattributes", *PACKAGE_FILES]  # the Hub's first commit's file stays
    # One commit, named after the op and version
    [(repo, branch, header, operations)] = server.commits
    assert (repo, branch) == (REPO, "v1") and OP_ID in header["summary"] and "version 1" in header["summary"]
    assert sorted(path for _, path in operations) == PACKAGE_FILES
    # The check downloaded into a temporary cache: the user's is untouched.
    assert not (hub_env / "hub").exists() or not any((hub_env / "hub").iterdir())
    assert result.load_call == f"get_kernel('{REPO}', version=1)"

    kernel = wk.get_kernel(REPO, version=1)
    assert kernel.package.commit == commit
    x = rng.standard_normal((3, 41)).astype(np.float32)
    y = kernel({"X": x}, attrs={"scale": 2.5, "shift": -1.0})["Y"]
    np.testing.assert_allclose(y, scale_shift(x, 2.5, -1.0), rtol=1e-6, atol=1e-6)


def test_a_second_upload_removes_what_the_package_no_longer_has(server, package):
    first = upload_package(package, REPO)
    (package / "README.md").unlink()
    manifest = json.loads((package / "manifest.json").read_text(encoding="utf-8"))
    manifest["description"] = "changed"
    (package / "manifest.json").write_text(json.dumps(manifest, indent=2), encoding="utf-8")
    write_metadata(package)
    second = upload_package(package, REPO, message="second")
    assert second.deleted == ["build/webgpu/README.md"]
    assert second.new_commit and second.commit != first.commit and not second.created_repo and not second.created_branch
    assert served(server, REPO, "v1") == [".gitattributes", *(f for f in PACKAGE_FILES if not f.endswith("README.md"))]
    assert server.commits[-1][2]["summary"] == "second"
    assert ("deletedFile", "build/webgpu/README.md") in server.commits[-1][3]
    hub.clear_cache()
    assert wk.get_kernel(REPO, version=1).package.commit == second.commit == server.commit_of(REPO, "v1")
    # The same package again: nothing changed, no commit made.
    third = upload_package(package, REPO)
    assert third.commit == second.commit and not third.new_commit and len(server.commits) == 2


def test_a_new_version_is_a_new_branch_of_the_same_repository(server, package):
    upload_package(package, REPO)
    write_metadata(package, version=2)
    result = upload_package(package, REPO, version=2)
    assert (result.revision, result.created_repo, result.created_branch) == ("v2", False, True)
    assert set(server.revisions(REPO)) >= {"v1", "v2"}
    assert json.loads((server.root / REPO / "v2" / "build/webgpu/metadata.json").read_text())["version"] == 2


def test_another_organisation_and_a_private_repository(server, package, monkeypatch):
    repo = f"someone/{OP_ID}"
    result = upload_package(package, repo, private=True)
    assert server.private[repo] == TOKEN and result.verified
    assert result.load_call == f"get_kernel('{repo}', version=1, trust_remote_code=True, expected_op_id='{OP_ID}')"
    kernel = wk.get_kernel(repo, version=1, trust_remote_code=True, expected_op_id=OP_ID)
    assert kernel.package.commit == result.commit


def test_the_command_prints_where_it_went_and_how_to_load_it(server, package):
    result = upload(str(package), REPO)
    assert result.exit_code == 0, result.output
    commit = server.commit_of(REPO, "v1")
    out = " ".join(result.stdout.split())
    assert f"uploaded 4 files of {OP_ID} (contract version 1) to {REPO} @ v1" in out
    # "its 3 files match" under "uploaded 4 files" had read as a file lost: the 4th is metadata.json
    assert "verified: the commit downloads and the 3 files metadata.json lists match it" in out, out
    assert f"commit {commit}" in out and "created the repository" in out and "created the branch v1" in out
    assert f"load it with: get_kernel('{REPO}', version=1)" in out
    assert "warning: " in result.stderr  # validate's warnings (no test.json): printed, not fatal


def test_json(server, package):
    result = upload(str(package), REPO, "--json", "--message", "first")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert set(data) == {"repo", "revision", "commit", "endpoint", "op", "version", "fileCount", "files", "deleted",
                         "newCommit", "createdRepository", "createdBranch", "private", "verified", "dryRun",
                         "warnings", "load", "outsideLinks"}  # fmt: skip
    assert (data["repo"], data["revision"], data["commit"]) == (REPO, "v1", server.commit_of(REPO, "v1"))
    assert (data["fileCount"], data["files"], data["endpoint"]) == (4, PACKAGE_FILES, server.url)
    assert data["verified"] is True and data["dryRun"] is False and data["warnings"] and data["outsideLinks"] == []
    assert data["load"] == f"get_kernel('{REPO}', version=1)"
    assert server.commits[0][2]["summary"] == "first"


def test_a_dry_run_sends_nothing(server, package):
    result = upload(str(package), REPO, "--dry-run")
    assert result.exit_code == 0, result.output
    assert "would upload 4 files" in result.stdout and all(f in result.stdout for f in PACKAGE_FILES)
    assert "__pycache__" not in result.stdout and "notes" not in result.stdout
    data = json.loads(upload(str(package), REPO, "--dry-run", "--json").stdout)
    assert data["dryRun"] is True and data["commit"] is None and data["files"] == PACKAGE_FILES
    assert server.requests == []


# --- refused before any request ------------------------------------------------------------------


def _stale(package: Path) -> None:
    template = package / "scale-shift.wgsl.jinja"
    template.write_text(template.read_text(encoding="utf-8") + "\n// edited\n", encoding="utf-8")


def _added(package: Path, *names: str) -> None:
    """Files whose names get_kernel refuses (on every system), listed by digest."""
    for name in names:
        (package / name).parent.mkdir(exist_ok=True)
        (package / name).write_text("x\n", encoding="utf-8")
    write_metadata(package)


def _invalid(package: Path) -> None:
    manifest = json.loads((package / "manifest.json").read_text(encoding="utf-8"))
    manifest["derive"]["n"] = "numel(shapes.Q)"
    (package / "manifest.json").write_text(json.dumps(manifest, indent=2), encoding="utf-8")
    write_metadata(package)


@pytest.mark.parametrize(("change", "args", "said"), [
    (lambda p: shutil.rmtree(p), [], "no such folder"),
    (lambda p: (p / "manifest.json").unlink(), [], "manifest.json"),
    (lambda p: (p / "metadata.json").unlink(), [], "has no metadata.json, which a Hub package must carry"),
    (_stale, [], "metadata.json is out of date (changed: scale-shift.wgsl.jinja): if these changes are yours, run "
                 "`webgpu-kernels digest"),
    (lambda p: (p / "extra.json").write_text("{}"), [], "added: extra.json"),
    (_invalid, [], "finds 1 error in the package"),
    (lambda p: _added(p, "readme.md"), [], "'README.md' and 'readme.md' differ only in case"),
    (lambda p: _added(p, "docs/nul.md"), [], "docs/nul.md"),
    (lambda p: _added(p, "caf\u00e9.md", "cafe\u0301.md"), [], "differ only in their Unicode normal form"),
    (None, ["--version", "2"], "says contract version 1, not 2: run `webgpu-kernels digest --version 2"),
    (None, ["--repo", "com.example.NoSlash"], "is not a Hub repository id: expected 'org/name'"),
    (None, ["--repo", "a/b/c"], "is not a Hub repository id"),
    (None, ["--repo", "org/op/"], "did you mean org/op?"),
    (None, ["--repo", f"{REPO}@v1"], "the revision comes from metadata.json's version"),
    (None, ["--repo", f"https://hub.example/kernels/{REPO}"], "HF_ENDPOINT=https://hub.example"),
    (None, ["--repo", "org/bad--name"], "is not a valid Hub repository id"),
    (None, ["--repo", "webgpu-kernels/demo.Other"], "the repository's name 'demo.Other' is not the package's op id "
                                                     f"'{OP_ID}'"),
])  # fmt: skip
def test_refused_before_any_request(server, package, change, args, said):
    repo = REPO
    if args[:1] == ["--repo"]:
        repo, args = args[1], args[2:]
    if change is not None:
        change(package)
    result = upload(str(package), repo, "--no-gpu", *args)
    assert result.exit_code == 2, result.output
    assert said in " ".join(result.stderr.split()), result.stderr
    assert server.requests == []


def test_a_validation_error_is_named(server, package):
    _invalid(package)
    with pytest.raises(PackageError, match=r"(?s)validate .* finds 1 error.*manifest\.json.*'Q'") as info:
        upload_package(package, REPO, gpu=False)
    assert "derive" in str(info.value)
    assert server.requests == []


def test_no_adapter_for_the_gpu_stage_says_how_to_leave_it_out(server, package):
    with pytest.raises(PackageError, match=r"(?s)no WebGPU device.*--no-gpu \(gpu=False\) leaves out the GPU stage"):
        upload_package(package, REPO, adapter="no-such-adapter-anywhere")
    assert server.requests == []


def test_offline_mode_refuses_before_any_request(server, package, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(HubError, match=r"offline mode is on \(HF_HUB_OFFLINE\): an upload needs the Hub"):
        upload_package(package, REPO, gpu=False)
    assert server.requests == []
    # docs/hub.md: a dry run sends no request, so it runs offline
    planned = upload_package(package, REPO, gpu=False, dry_run=True)
    assert planned.dry_run and "build/webgpu/manifest.json" in planned.files
    assert server.requests == []


@pytest.mark.parametrize("installed", ["1.26.0", "2.2.0", "2.2.1rc0"])
def test_a_huggingface_hub_too_old_to_upload_is_refused_before_any_request(server, package, monkeypatch, installed):
    """huggingface_hub 1.26.0 (loading's floor) to 2.2.0 raised "Invalid repo type" from preupload_lfs_files
    after the repository and branch were made (run AF, an H100 whose huggingface_hub was
    older: 15 of these tests failed; here with 1.26.0 and 2.2.0 installed); 2.3.0 passed them all."""
    import huggingface_hub

    monkeypatch.setattr(huggingface_hub, "__version__", installed)
    for dry_run in (False, True):  # a dry run stands for the upload, so it says it too
        with pytest.raises(HubError, match=rf"uploading needs huggingface_hub 2\.3 or later.*this is {installed}, "
                                           r"enough to load packages but not to publish one: "
                                           r"pip install -U 'huggingface_hub>=2\.3'"):  # fmt: skip
            upload_package(package, REPO, gpu=False, dry_run=dry_run)
    result = upload(str(package), REPO, "--no-gpu")
    assert result.exit_code == 2 and "uploading needs huggingface_hub 2.3 or later" in result.output
    assert server.requests == [] and not (server.root / REPO).exists()


@pytest.mark.parametrize("installed", ["2.3.0", "2.3.0.dev0", "2.10.1", "10.0.0", "unknown"])
def test_a_huggingface_hub_new_enough_uploads(server, package, monkeypatch, installed):
    import huggingface_hub

    assert can_upload(installed)
    monkeypatch.setattr(huggingface_hub, "__version__", installed)
    assert upload_package(package, REPO, gpu=False, dry_run=True).dry_run


def test_which_releases_can_upload():
    assert [v for v in ("1.26.0", "1.33.0", "2.0.0", "2.2.0", "2.2.9", "2.3.0", "3.0") if can_upload(v)] == [
        "2.3.0", "3.0"]


def test_any_name_publishes_under_another_name(server, package):
    result = upload(str(package), "webgpu-kernels/scale-shift", "--any-name", "--no-gpu", "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["load"] == "get_kernel('webgpu-kernels/scale-shift', version=1)"


# --- what the Hub refuses ------------------------------------------------------------------------


def test_a_token_the_hub_refuses_says_what_to_do_and_is_never_shown(server, package):
    server.tokens = {"hf_someone_else"}
    with pytest.raises(HubError, match=r"401 .*Invalid credentials.*renew it, with write access to webgpu-kernels, "
                                       r"and set it in HF_TOKEN or log in with `hf auth login`") as info:
        upload_package(package, REPO, gpu=False)
    assert info.value.repo_id == REPO and TOKEN not in str(info.value)
    result = upload(str(package), REPO, "--no-gpu")
    assert result.exit_code == 2 and "hf auth login" in result.stderr
    assert TOKEN not in result.output
    assert not any(path.endswith("/commit/v1") for _, path in server.requests)


def test_no_token_says_how_to_send_one(server, package, monkeypatch):
    monkeypatch.delenv("HF_TOKEN")
    with pytest.raises(HubError, match=r"401 .*no token was sent: set HF_TOKEN, or log in with `hf auth login`, as an "
                                       "account that may write to webgpu-kernels"):  # fmt: skip
        upload_package(package, REPO, gpu=False)


def test_a_token_without_write_access_is_named(server, package):
    server.writers["webgpu-kernels"] = {"hf_maintainer"}
    with pytest.raises(HubError, match=r"403 .*may not write to webgpu-kernels: use one with write access"):
        upload_package(package, REPO, gpu=False)
    assert not server.commits and not (server.root / REPO).exists()


def test_an_unreachable_hub_is_named(server, package, monkeypatch):
    url = server.url
    server.stop()
    with pytest.raises(HubError, match=r"cannot be reached \(ConnectError"):
        upload_package(package, REPO, gpu=False, endpoint=url)


# --- what the download refuses is refused before the upload ------------------------------------


def test_as_many_files_as_a_package_may_hold_is_refused_before_any_request(server, package, monkeypatch):
    # A folder holds MAX_PACKAGE_FILES files besides metadata.json; the repository's build/webgpu/
    # holds metadata.json too, and the download counts it: the commit had been made, then not loaded.
    from webgpu_kernels import digests

    monkeypatch.setattr(digests, "MAX_PACKAGE_FILES", 3)
    monkeypatch.setattr(hub, "MAX_PACKAGE_FILES", 3)
    (package / "design notes.txt").unlink()  # the folder: manifest.json, the template and README.md
    with pytest.raises(PackageError, match=r"holds more than 3 files, more than a kernel package may"):
        upload_package(package, REPO, gpu=False)
    assert server.requests == []


@pytest.mark.filterwarnings("ignore:Use 'content=:DeprecationWarning")  # huggingface_hub's LFS PUT
def test_binary_files_go_through_lfs_as_on_the_hub(server, package, monkeypatch):
    # The Hub's .gitattributes stores *.npy and *.npz in LFS: preupload answers "lfs", the client
    # uploads the object through the LFS batch API and commits a pointer (an lfsFile line).
    monkeypatch.setattr(hf_constants, "HF_HUB_DISABLE_XET", True)  # hub_server.py serves no Xet
    data = np.arange(12, dtype=np.float32).reshape(3, 4)
    np.save(package / "reference.npy", data)
    write_metadata(package)
    first = upload_package(package, REPO, gpu=False)
    assert "build/webgpu/reference.npy" in first.files and first.verified
    assert ("lfsFile", "build/webgpu/reference.npy") in server.commits[-1][3]
    assert ("file", "build/webgpu/manifest.json") in server.commits[-1][3]
    assert np.array_equal(np.load(server.root / REPO / "v1" / "build/webgpu/reference.npy"), data)
    # Again unchanged: the LFS oid (sha256) matches, no commit; changed: a new object, a new commit.
    assert not upload_package(package, REPO, gpu=False).new_commit
    np.save(package / "reference.npy", data * 2)
    write_metadata(package)
    second = upload_package(package, REPO, gpu=False)
    assert second.new_commit and second.verified and len(server.lfs_objects) == 2
    assert server.commits[-1][3] == [("lfsFile", "build/webgpu/reference.npy"), ("file", "build/webgpu/metadata.json")]


# --- a Hub that leaves files out, or fails midway --------------------------------------------------


def _existing_repository(server: HubServer, gitignore: str) -> None:
    """REPO, created before the upload, its main holding a .gitignore (a repository that also keeps sources)."""
    main = server.root / REPO / "main"
    main.mkdir(parents=True)
    (main / ".gitattributes").write_text("*.npy filter=lfs diff=lfs merge=lfs -text\n", encoding="utf-8")
    (main / ".gitignore").write_text(gitignore, encoding="utf-8")
    server.rescan()


@pytest.mark.parametrize("gitignore", ["build/\n", "*.md\n"])
def test_files_the_repositorys_gitignore_ignores_are_named_before_the_commit(server, package, gitignore):
    # The Hub answers preupload with shouldIgnore for them, and the client leaves them out of the
    # commit without a word: the commit had been made without them, then refused by the check.
    _existing_repository(server, gitignore)
    with pytest.raises(HubError, match=r"the repository's \.gitignore \(on v1\) ignores build/webgpu/README\.md"
                                       r".*nothing was committed") as info:  # fmt: skip
        upload_package(package, REPO, gpu=False)
    assert info.value.__notes__ == ["this upload created the branch v1 (which holds no package yet): upload again to "
                                    "complete it"]  # fmt: skip
    assert server.commits == []


def test_a_failure_after_creating_the_repository_says_what_is_there_now(server, package):
    server.failing["commit"] = (500, "Internal Error")
    with pytest.raises(HubError, match=r"committing to v1 .*'500 Internal Server Error'") as info:
        upload_package(package, REPO, gpu=False)
    assert info.value.__notes__ == ["this upload created the repository and its branch v1 (which holds no package "
                                    "yet): upload again to complete it"]  # fmt: skip
    cli = upload(str(package), f"webgpu-kernels/{OP_ID}", "--no-gpu")  # the command prints the note
    assert cli.exit_code == 2 and "this upload created" not in cli.stderr  # this time nothing was created
    assert "committing to v1" in cli.stderr
    # Again, the Hub mended: the repository and the branch are there, the commit completes them.
    del server.failing["commit"]
    result = upload_package(package, REPO, gpu=False)
    assert result.verified and not result.created_repo and not result.created_branch


@pytest.mark.parametrize("stop", [KeyboardInterrupt(), HubError("the Hub cannot be reached (ConnectError: down)")])
def test_a_check_that_does_not_finish_says_the_commit_is_made(server, package, monkeypatch, stop):
    def download(*args, **kwargs):
        raise stop

    monkeypatch.setattr(hub, "download", download)
    result = upload(str(package), REPO, "--no-gpu")
    commit = server.commit_of(REPO, "v1")
    assert result.exit_code == (130 if isinstance(stop, KeyboardInterrupt) else 2), result.output
    said = " ".join(result.stderr.split())
    assert f"the commit {commit} was made on v1 of {REPO}, and is what get_kernel('{REPO}', version=1) loads now" in said
    assert f"`webgpu-kernels download {REPO} --revision {commit}` checks it again" in said
    assert ("interrupted while checking it" if isinstance(stop, KeyboardInterrupt) else "checking it failed") in said


def test_an_interrupted_commit_says_what_to_do(server, package, monkeypatch):
    from huggingface_hub import HfApi

    def create_commit(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(HfApi, "create_commit", create_commit)
    result = upload(str(package), REPO, "--no-gpu")
    assert result.exit_code == 130, result.output
    said = " ".join(result.stderr.split())
    assert "interrupted" in said and "this upload created the repository and its branch v1" in said
    assert f"v1 may hold the commit or not; `webgpu-kernels download {REPO} --revision v1` shows what it holds" in said


def test_a_repository_the_token_may_not_see_is_not_reported_as_created(server, package):
    # The Hub answers a private repository of another account as missing; creating it answers 409,
    # which create_repo(exist_ok=True) had taken for "created": the branch request then read as a
    # refused token, with a note that this upload had created the repository.
    _existing_repository(server, "")
    server.private[REPO] = "hf_someone_else"
    with pytest.raises(HubError, match=r"exists on .*, but the Hub does not show it to the token sent") as info:
        upload_package(package, REPO, gpu=False)
    assert "renew" not in str(info.value) and not getattr(info.value, "__notes__", [])
    assert not any("/branch/" in path for _, path in server.requests)


def test_no_gpu_needs_no_adapter_for_the_check_either(server, package):
    result = upload_package(package, REPO, gpu=False, adapter="no-such-adapter-anywhere")
    assert result.verified


# --- symbolic links that lead out of the package folder ------------------------------------------


def _secret(tmp_path: Path) -> Path:
    """A private file outside the package folder (as ~/.ssh/id_rsa would be)."""
    secret = tmp_path / "home" / ".ssh" / "id_rsa"
    secret.parent.mkdir(parents=True)
    secret.write_text("-----BEGIN PRIVATE KEY----- not for the Hub\n", encoding="utf-8")
    return secret


def _linked_outside(package: Path, tmp_path: Path) -> Path:
    """A folder written by a stranger: notes.txt a link to the user's private file, digested."""
    secret = _secret(tmp_path)
    (package / "notes.txt").symlink_to(secret)
    write_metadata(package)  # digest follows it: the digest covers what loading reads
    return secret


@pytest.mark.parametrize("dry_run", [False, True])
def test_a_link_to_a_file_outside_the_folder_is_refused_before_any_request(server, package, tmp_path, dry_run):
    secret = _linked_outside(package, tmp_path)
    args = ["--dry-run"] if dry_run else []
    result = upload(str(package), REPO, "--no-gpu", *args)
    assert result.exit_code == 2, result.output
    said = " ".join(result.stderr.split())
    assert f"notes.txt -> {secret}" in said, said
    assert "--follow-outside-links" in said and "Hugging Face cache" in said and "copy" in said
    assert "BEGIN PRIVATE KEY" not in result.output and "would upload" not in result.output
    assert server.requests == [] and server.commits == []
    with pytest.raises(PackageError, match=r"(?s)symbolic link.*outside.*notes\.txt -> .*id_rsa.*follow_outside_links"):
        upload_package(package, REPO, gpu=False, dry_run=dry_run)
    assert server.requests == []


def test_each_link_leading_outside_is_named_a_chain_through_the_folder_too(server, package, tmp_path):
    secret = _secret(tmp_path)
    (package / "b.txt").symlink_to(secret)
    (package / "a.txt").symlink_to("b.txt")  # inside the folder, then out of it
    write_metadata(package)
    with pytest.raises(PackageError) as info:
        upload_package(package, REPO, gpu=False, dry_run=True)
    said = str(info.value)
    assert f"a.txt -> {secret}" in said and f"b.txt -> {secret}" in said and "2 files" in said
    assert server.requests == []


def test_the_opt_in_publishes_what_the_links_read(server, package, tmp_path):
    secret = _linked_outside(package, tmp_path)
    dry = upload(str(package), REPO, "--no-gpu", "--dry-run", "--follow-outside-links")
    assert dry.exit_code == 0 and "build/webgpu/notes.txt" in dry.stdout, dry.output
    assert server.requests == []
    result = upload_package(package, REPO, gpu=False, follow_outside_links=True)
    assert "build/webgpu/notes.txt" in result.files and result.verified
    assert (server.root / REPO / "v1" / "build/webgpu/notes.txt").read_bytes() == secret.read_bytes()
    cli = upload(str(package), REPO, "--no-gpu", "--follow-outside-links")  # the command's flag
    assert cli.exit_code == 0 and "unchanged" in cli.stdout, cli.output


def test_a_link_inside_the_folder_uploads(server, package, tmp_path):
    (package / "copy.md").symlink_to("README.md")
    (package / "docs").mkdir()
    (package / "docs" / "up.md").symlink_to("../README.md")
    write_metadata(package)
    via = tmp_path / "via"
    via.symlink_to(package, target_is_directory=True)  # the folder itself reached through a link: fine
    result = upload_package(via, REPO, gpu=False)
    assert {"build/webgpu/copy.md", "build/webgpu/docs/up.md"} <= set(result.files) and result.verified
    assert (server.root / REPO / "v1" / "build/webgpu/copy.md").read_bytes() == (package / "README.md").read_bytes()


def test_a_link_to_a_folder_outside_sends_nothing_behind_it(server, package, tmp_path):
    # The one rule for links to folders (digests.through_folder_link): digest does not list what lies
    # behind one, and a metadata.json that lists such a name is refused (digest --check's comparison
    # finds it gone) before any request, with the opt-in too.
    secret = _secret(tmp_path)
    (package / "keys").symlink_to(secret.parent, target_is_directory=True)
    write_metadata(package)
    result = upload_package(package, REPO, gpu=False, dry_run=True)
    assert not any("keys" in name for name in result.files)
    metadata = json.loads((package / "metadata.json").read_text(encoding="utf-8"))
    metadata["digest"]["files"]["keys/id_rsa"] = "0" * 64
    (package / "metadata.json").write_text(json.dumps(metadata, indent=2), encoding="utf-8")
    with pytest.raises(PackageError, match=r"metadata\.json is out of date \(removed: keys/id_rsa\)"):
        upload_package(package, REPO, gpu=False, dry_run=True, follow_outside_links=True)
    assert server.requests == []


def test_a_downloaded_snapshot_is_republished_only_with_the_opt_in(server, package):
    # The Hugging Face cache makes each file of a snapshot a link into its blobs/, outside the snapshot.
    first = upload_package(package, REPO, gpu=False)
    hub.clear_cache()
    snapshot = wk.get_kernel(REPO, version=1).package.root
    with pytest.raises(PackageError, match=r"(?s)manifest\.json -> .*blobs.*Hugging Face cache") as info:
        upload_package(snapshot, REPO, gpu=False)
    assert "metadata.json -> " in str(info.value)
    again = upload_package(snapshot, REPO, gpu=False, follow_outside_links=True)
    assert again.commit == first.commit and not again.new_commit
    # Every file named, each as the symbolic link into blobs/ it is (a blob has one name: no hard link)
    assert [f"{PACKAGE_DIR}/{link.file}" for link in again.outside_links] == again.files
    assert all(link.kind == "symbolic" and "/blobs/" in str(link.target) for link in again.outside_links)


def test_the_opt_in_names_each_file_that_came_through_an_outside_link(server, package, tmp_path):
    # What left the folder is said, a dry run's listing included: the flag had published quietly.
    secret = _linked_outside(package, tmp_path)
    dry = upload(str(package), REPO, "--no-gpu", "--dry-run", "--follow-outside-links")
    assert dry.exit_code == 0, dry.output
    said = dry.stdout
    assert "1 file read through a link outside the folder (--follow-outside-links)" in said, said
    assert f"  notes.txt -> {secret}" in said and "BEGIN PRIVATE KEY" not in said
    result = upload_package(package, REPO, gpu=False, follow_outside_links=True)
    assert [(link.file, link.target) for link in result.outside_links] == [("notes.txt", str(secret))]
    cli = upload(str(package), REPO, "--no-gpu", "--follow-outside-links", "--json")
    assert cli.exit_code == 0, cli.output
    assert json.loads(cli.stdout)["outsideLinks"] == [{"file": "notes.txt", "kind": "symbolic", "target": str(secret)}]
    plain = upload(str(package), REPO, "--no-gpu", "--follow-outside-links")
    assert f"  notes.txt -> {secret}" in plain.stdout, plain.output


def test_a_package_without_outside_links_says_nothing_of_them(server, package):
    result = upload_package(package, REPO, gpu=False, dry_run=True, follow_outside_links=True)
    assert result.outside_links == [] and result.as_dict()["outsideLinks"] == []
    assert not any("outside" in line for line in describe(result))


# --- hard links: a second name of a file elsewhere -------------------------------------------------


def test_a_hard_link_to_a_file_outside_the_folder_is_refused(server, package, tmp_path):
    # A hard link is the file itself under a second name: by its path, notes.txt is a plain file of the
    # folder, but its link count says another name of it lies elsewhere (~/.ssh/id_rsa here).
    secret = _secret(tmp_path)
    (package / "notes.txt").hardlink_to(secret)
    write_metadata(package)
    for args in ([], ["--dry-run"]):
        result = upload(str(package), REPO, "--no-gpu", *args)
        assert result.exit_code == 2, result.output
        said = " ".join(result.stderr.split())
        assert "notes.txt (a hard link: 1 of its 2 names is outside the folder)" in said, said
        assert "--follow-outside-links" in said and "copy" in said and "would upload" not in result.output
    assert server.requests == []
    dry = upload_package(package, REPO, gpu=False, dry_run=True, follow_outside_links=True)
    assert [(link.file, link.kind, link.names, link.names_inside) for link in dry.outside_links] == [
        ("notes.txt", "hard", 2, 1)]
    assert any("notes.txt (a hard link: 1 of its 2 names is outside the folder)" in line for line in describe(dry))
    assert {"file": "notes.txt", "kind": "hard", "names": 2, "namesInFolder": 1} in dry.as_dict()["outsideLinks"]


def test_hard_links_whose_names_are_all_in_the_folder_upload(server, package):
    # Two files of the package that are one file, and a hidden backup beside them: every name of the
    # file is in the folder, so nothing of it comes from elsewhere.
    (package / "copy.md").hardlink_to(package / "README.md")
    (package / ".README.md.bak").hardlink_to(package / "README.md")
    (package / "docs").mkdir()
    (package / "docs" / "again.md").hardlink_to(package / "README.md")
    (package / "via.md").symlink_to("copy.md")  # a symbolic link to one of them counts no name
    write_metadata(package)
    assert (package / "README.md").stat().st_nlink == 4
    result = upload_package(package, REPO, gpu=False)
    assert {"build/webgpu/copy.md", "build/webgpu/docs/again.md", "build/webgpu/via.md"} <= set(result.files)
    assert result.verified and result.outside_links == []


def test_a_hard_link_behind_an_inside_symbolic_link_is_named_by_its_link(server, package, tmp_path):
    secret = _secret(tmp_path)
    (package / "b.txt").hardlink_to(secret)
    (package / "a.txt").symlink_to("b.txt")
    write_metadata(package)
    with pytest.raises(PackageError) as info:
        upload_package(package, REPO, gpu=False, dry_run=True)
    said = str(info.value)
    assert "a.txt (a hard link: 1 of its 2 names" in said and "b.txt (a hard link: 1 of its 2 names" in said, said


# --- the lists are capped --------------------------------------------------------------------------


def _many_outside_links(package: Path, tmp_path: Path, count: int) -> Path:
    secret = _secret(tmp_path)
    for i in range(count):
        (package / f"n{i:03}.txt").symlink_to(secret)
    write_metadata(package)
    return secret


def test_the_refusal_names_the_first_links_and_counts_the_rest(server, package, tmp_path):
    secret = _many_outside_links(package, tmp_path, SHOWN_LINKS + 30)
    result = upload(str(package), REPO, "--no-gpu", "--dry-run")
    assert result.exit_code == 2, result.output
    said = result.stderr
    assert f"{SHOWN_LINKS + 30} files of the package" in " ".join(said.split())
    shown = [f"n{i:03}.txt -> {secret}" for i in range(SHOWN_LINKS)]
    assert all(line in said for line in shown) and f"n{SHOWN_LINKS:03}.txt" not in said
    assert "... and 30 more" in said
    assert len(said.splitlines()) < SHOWN_LINKS + 15, said


def test_the_opt_in_list_is_capped_and_json_holds_every_link(server, package, tmp_path):
    _many_outside_links(package, tmp_path, SHOWN_LINKS + 1)
    dry = upload(str(package), REPO, "--no-gpu", "--dry-run", "--follow-outside-links")
    assert dry.exit_code == 0, dry.output
    said = dry.stdout
    assert f"{SHOWN_LINKS + 1} files read through links outside the folder" in said, said
    assert sum(1 for line in said.splitlines() if line.startswith("  n") and " -> " in line) == SHOWN_LINKS
    assert "... and 1 more" in said
    full = upload(str(package), REPO, "--no-gpu", "--dry-run", "--follow-outside-links", "--json")
    assert len(json.loads(full.stdout)["outsideLinks"]) == SHOWN_LINKS + 1


# --- republishing vN: the contract compared with the one the revision holds ----------------------------


def _edit_contract(package: Path, edit) -> None:
    """``edit`` applied to the package's manifest (a dict, changed in place), then digested again."""
    path = package / "manifest.json"
    manifest = json.loads(path.read_text(encoding="utf-8"))
    edit(manifest)
    path.write_text(json.dumps(manifest, indent=2), encoding="utf-8")
    write_metadata(package)


def _renamed(old: str, new: str):
    """A role renamed wherever the manifest names it (inputs, args, bindings, expressions)."""
    def edit(manifest: dict) -> None:
        renamed = json.loads(re.sub(rf"\b{old}\b", new, json.dumps(manifest)))
        manifest.clear()
        manifest.update(renamed)
    return edit


def _added_input(role: str, *, optional: bool = False):
    def edit(manifest: dict) -> None:
        manifest["inputs"].append({"role": role, "dtype": "T", **({"optional": True} if optional else {})})
        manifest["args"][role] = {"kind": "tensor", "semantic": role, "role": "input"}
    return edit


def _without_shift(manifest: dict) -> None:
    del manifest["attributes"]["shift"], manifest["attributeDescriptions"]["shift"]
    manifest.update(json.loads(json.dumps(manifest).replace('"attrs.shift"', '"0.0"')))


def _float32_only(manifest: dict) -> None:
    manifest["typeConstraints"]["T"] = ["float32"]


def _with_new_variant(manifest: dict) -> None:
    variant = json.loads(json.dumps(manifest["variants"][-1]))
    variant.update(id="scalarAgain", priority=-1)
    manifest["variants"].append(variant)


@pytest.mark.parametrize(("edit", "said"), [
    (_float32_only, "input 'X': float16 is no longer accepted (type variable T: float32)"),
    (_renamed("X", "A"), "input 'X' was removed or renamed (the new inputs: 'A')"),
    (_renamed("Y", "Z"), "output 'Y' was removed or renamed (the new outputs: 'Z')"),
    (_added_input("B"), "input 'B' is new and required"),
    (_without_shift, "attribute 'shift' was removed"),
    (lambda m: m["attributes"].update(scale=2.0), "attribute 'scale': its default changed from 1.0 to 2.0"),
    (lambda m: m["inputs"][0].update(rank=2), "input 'X': any rank was accepted, now only rank 2"),
])  # fmt: skip
def test_republishing_a_version_with_an_incompatible_contract_is_refused(server, package, edit, said):
    first = upload_package(package, REPO, gpu=False)
    _edit_contract(package, edit)
    with pytest.raises(PackageError) as info:
        upload_package(package, REPO, gpu=False)
    message = " ".join(str(info.value).split())
    assert said in message, message
    assert "version=1" in message and f"`webgpu-kernels digest {package} --version 2`" in message, message
    assert "--allow-incompatible" in message
    assert server.commit_of(REPO, "v1") == first.commit and len(server.commits) == 1  # nothing committed


def test_the_refusal_names_every_change(server, package):
    upload_package(package, REPO, gpu=False)
    _edit_contract(package, lambda m: (_float32_only(m), _without_shift(m), m["attributes"].update(scale=0.5)))
    with pytest.raises(PackageError, match=r"3 incompatible changes") as info:
        upload_package(package, REPO, gpu=False)
    assert all(word in str(info.value) for word in ("float16", "'shift'", "'scale'")), info.value


def test_a_compatible_change_republishes_the_version(server, package):
    _edit_contract(package, _float32_only)
    upload_package(package, REPO, gpu=False)
    # float16 added, a variant, an optional input and an attribute more: every call that worked still does
    _edit_contract(package, lambda m: (m["typeConstraints"].update(T=["float32", "float16"]), _with_new_variant(m),
                                       _added_input("B", optional=True)(m), m["attributes"].update(unused=0.0)))
    result = upload_package(package, REPO, gpu=False)
    assert result.new_commit and result.commit == server.commit_of(REPO, "v1")
    assert not [w for w in result.warnings if "contract" in w], result.warnings


def test_the_opt_in_republishes_with_a_warning(server, package):
    upload_package(package, REPO, gpu=False)
    _edit_contract(package, _float32_only)
    result = upload_package(package, REPO, gpu=False, allow_incompatible=True)
    assert result.new_commit and result.commit == server.commit_of(REPO, "v1")
    [said] = [w for w in result.warnings if "float16" in w]
    assert "version=1" in said and "--version 2" in said and "--allow-incompatible" in said, said


def test_the_command_refuses_and_its_flag_warns(server, package):
    upload_package(package, REPO, gpu=False)
    _edit_contract(package, _float32_only)
    refused = upload(str(package), REPO, "--no-gpu")
    assert refused.exit_code == 2 and "float16 is no longer accepted" in refused.stderr, refused.output
    allowed = upload(str(package), REPO, "--no-gpu", "--allow-incompatible")
    assert allowed.exit_code == 0, allowed.output
    assert "warning: " in allowed.stderr and "float16 is no longer accepted" in " ".join(allowed.stderr.split())


def test_the_changed_contract_published_as_the_next_version_uploads(server, package):
    upload_package(package, REPO, gpu=False)
    _edit_contract(package, _float32_only)
    write_metadata(package, version=2)
    result = upload_package(package, REPO, gpu=False, version=2)  # a first upload of v2: nothing to compare
    assert result.created_branch and not [w for w in result.warnings if "contract" in w]
    hub.clear_cache()
    assert wk.get_kernel(REPO, version=1).manifest.type_constraints["T"] == ("float32", "float16")


def test_a_manifest_on_the_revision_that_does_not_parse_is_no_refusal(server, package):
    upload_package(package, REPO, gpu=False)
    (server.root / REPO / "v1" / PACKAGE_DIR / "manifest.json").write_text("{}", encoding="utf-8")
    server.rescan()
    _edit_contract(package, _float32_only)
    result = upload_package(package, REPO, gpu=False)
    assert result.new_commit
    assert [w for w in result.warnings if "not compared" in w], result.warnings
