"""``webgpu-kernels new``: the package it writes is valid, passes its tests and computes what it says;
what it refuses (a folder in use, an op id the manifest would not take)."""

from __future__ import annotations

import json
import os
import shlex
import sys

import numpy as np
import pytest
from click.testing import CliRunner

import webgpu_kernels as wk
from webgpu_kernels.cli import main
from webgpu_kernels.digests import build_metadata, package_files

from cli_helpers import invoke

OP = "com.example.DoubleIt"


@pytest.fixture(scope="module")
def package(tmp_path_factory):
    root = tmp_path_factory.mktemp("new") / "pkg"
    result = invoke(CliRunner(), "new", str(root), "--op", OP)
    assert "metadata.json" in result.stdout
    return root


def test_the_new_package_validates_clean_and_passes_its_tests(package) -> None:
    report = json.loads(invoke(CliRunner(), "validate", str(package), "--json").stdout)
    assert report["ok"] and report["op"] == OP
    assert (report["errors"], report["warnings"]) == (0, 0), report["problems"]
    tested = json.loads(invoke(CliRunner(), "test", str(package), "--json").stdout)
    results = tested["packages"][0]["results"]
    assert tested["ok"] and {r["dtype"] for r in results} == {"float32", "float16"}
    assert all(r["status"] == "pass" for r in results), results


def test_the_new_package_holds_one_of_each_feature(package) -> None:
    assert sorted(package_files(package)) == ["bench.json", "double-it.wgsl.jinja", "manifest.json", "test.json"]
    manifest = json.loads((package / "manifest.json").read_text("utf-8"))
    assert f"{manifest['domain']}.{manifest['name']}" == OP
    assert manifest["typeConstraints"] == {"T": ["float32", "float16"]}
    (variant,) = manifest["variants"]
    assert variant["when"] and list(manifest["tunables"]) == ["WORKGROUP_SIZE"]
    cases = json.loads((package / "test.json").read_text("utf-8"))["cases"]
    assert {c["types"]["T"] for c in cases} == {"float32", "float16"}
    assert any(np.prod(c["inputs"]["X"]["shape"]) % 4 for c in cases)  # a tail that is no multiple of 4
    # metadata.json is what `digest` writes: the folder is current
    metadata = json.loads((package / "metadata.json").read_text("utf-8"))
    assert build_metadata(package, metadata)[0] == metadata
    assert invoke(CliRunner(), "digest", str(package), "--check").exit_code == 0


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_the_new_package_computes_twice_its_input(package, dtype) -> None:
    x = np.random.default_rng(5).standard_normal((3, 7, 11)).astype(dtype)
    y = wk.load_kernel(package)({"X": x})["Y"]
    assert y.dtype == dtype and y.shape == x.shape
    np.testing.assert_array_equal(y, (2.0 * x.astype(np.float64)).astype(dtype))


def test_the_new_test_json_expects_twice_each_case_s_input_in_its_dtype(tmp_path) -> None:
    """docs/cli.md: test.json's expected values are 2 * X in float64 on the inputs as `test` builds
    them, rounded once to the output dtype, each entry `dtype`, `shape`, `values` (as `expect`
    writes inline ones). An entry of dtype float64 for the float16 case would still pass `test`.
    (A package of its own: mutmut runs only the tests that call `new`, as the module's fixture's first user.)"""
    package = tmp_path / "pkg"
    invoke(CliRunner(), "new", str(package), "--op", OP)
    kernel = wk.load_kernel(package)
    cases = json.loads((package / "test.json").read_text("utf-8"))["cases"]
    for case in cases:
        x = wk.test_case_inputs(kernel, case["name"])["X"]
        entry = case["expected"]["Y"]
        assert list(entry) == ["dtype", "shape", "values"] and entry["dtype"] == case["types"]["T"] == x.dtype.name
        assert entry["shape"] == list(x.shape) == case["inputs"]["X"]["shape"]
        np.testing.assert_array_equal(np.asarray(entry["values"], np.float64).astype(x.dtype),  # shortest repr
                                      (2.0 * x.astype(np.float64)).astype(x.dtype).reshape(-1))  # fmt: skip


def test_the_op_id_defaults_to_the_folder_name_and_an_empty_folder_is_taken(tmp_path) -> None:
    root = tmp_path / "org.lab.Scale_2"
    root.mkdir()
    invoke(CliRunner(), "new", str(root))
    manifest = json.loads((root / "manifest.json").read_text("utf-8"))
    assert (manifest["domain"], manifest["name"]) == ("org.lab", "Scale_2")
    assert wk.load_kernel(root).op_id == "org.lab.Scale_2"


def test_a_folder_in_use_is_refused_and_left_as_it_was(tmp_path) -> None:
    (tmp_path / "notes.txt").write_text("mine", "utf-8")
    result = invoke(CliRunner(), "new", str(tmp_path), "--op", OP, code=2)
    assert "Invalid value for 'PATH'" in result.stderr
    assert "expected a new or empty folder" in result.stderr and "notes.txt" in result.stderr
    assert [p.name for p in tmp_path.iterdir()] == ["notes.txt"]
    file = tmp_path / "notes.txt"
    result = invoke(CliRunner(), "new", str(file), "--op", OP, code=2)
    assert "Invalid value for 'PATH'" in result.stderr and "is a file" in result.stderr


@pytest.mark.parametrize("op_id, says", [
    ("DoubleIt", "it has no domain"),
    (".DoubleIt", "it has no domain"),
    ("com.example.2x", "its name '2x'"),
    ("com..DoubleIt", "its domain 'com.'"),
    ("com.example.Double-It", "its name 'Double-It'"),
])  # fmt: skip
def test_an_op_id_the_manifest_would_not_take_is_refused(tmp_path, op_id, says) -> None:
    result = invoke(CliRunner(), "new", str(tmp_path / "pkg"), "--op", op_id, code=2)
    assert "Invalid value for '--op'" in result.stderr and "DOMAIN.NAME" in result.stderr
    assert says in result.stderr and repr(op_id) in result.stderr
    assert not (tmp_path / "pkg").exists()


def test_without_op_a_folder_name_that_is_no_op_id_is_refused(tmp_path) -> None:
    result = invoke(CliRunner(), "new", str(tmp_path / "my-kernel"), code=2)
    assert "--op DOMAIN.NAME is needed" in result.stderr and "'my-kernel'" in result.stderr
    assert not (tmp_path / "my-kernel").exists()


@pytest.mark.parametrize("name", ["Con", "Lpt1"])
def test_an_op_named_as_a_windows_device_gets_a_template_windows_can_hold(tmp_path, name) -> None:
    """`--op com.example.Con` had written con.wgsl.jinja, a name validate refuses (Windows reads it
    as the device CON): the package `new` writes passes validate whatever the op's name."""
    root = tmp_path / "pkg"
    invoke(CliRunner(), "new", str(root), "--op", f"com.example.{name}")
    report = json.loads(invoke(CliRunner(), "validate", str(root), "--no-gpu", "--json").stdout)
    assert report["ok"] and report["errors"] == 0, report["problems"]
    manifest = json.loads((root / "manifest.json").read_text("utf-8"))
    assert manifest["variants"][0]["passes"][0]["shader"].startswith(name.lower())  # still named after the op


def test_a_path_that_is_a_file_through_tilde_or_a_dangling_link_is_refused(tmp_path, monkeypatch) -> None:
    """click checks PATH as written: a file reached through '~' (quoted, so the shell left it) had
    ended in a NotADirectoryError traceback, a symbolic link to nothing in a FileExistsError."""
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / "notes.txt").write_text("mine", "utf-8")
    result = invoke(CliRunner(), "new", "~/notes.txt", "--op", OP, code=2)
    assert "Invalid value for 'PATH'" in result.stderr and "'~/notes.txt'" in result.stderr, result.stderr
    assert "is a file" in result.stderr and (tmp_path / "notes.txt").read_text("utf-8") == "mine"
    (tmp_path / "link").symlink_to(tmp_path / "nowhere")
    result = invoke(CliRunner(), "new", str(tmp_path / "link"), "--op", OP, code=2)
    assert "Invalid value for 'PATH'" in result.stderr and "symbolic link to nothing" in result.stderr, result.stderr
    assert (tmp_path / "link").is_symlink() and not (tmp_path / "nowhere").exists()


def test_a_path_that_cannot_be_made_is_refused_and_says_why(tmp_path) -> None:
    """A PATH below a file had ended in a NotADirectoryError traceback from mkdir."""
    (tmp_path / "notes.txt").write_text("mine", "utf-8")
    result = invoke(CliRunner(), "new", str(tmp_path / "notes.txt" / "pkg"), "--op", OP, code=2)
    assert "Invalid value for 'PATH'" in result.stderr and "cannot be made" in result.stderr, result.stderr
    assert "Not a directory" in result.stderr and (tmp_path / "notes.txt").read_text("utf-8") == "mine"


@pytest.mark.parametrize("args", [
    ["com.microsoft.QuickGelu"],  # the op id from the folder name: an embedded kernel's
    ["myorg/myop", "--op", "com.example.MyOp"],  # a folder named as a Hub repository
    ["my pkgs/com.example.MyOp"],  # a space: the shell had split the folder in two
    ["it's/com.example.MyOp"],  # a quote: the shell had waited for its closing one
])  # fmt: skip
def test_the_next_commands_new_prints_name_the_folder_it_wrote(tmp_path, monkeypatch, args) -> None:
    """A bare com.microsoft.QuickGelu (or myorg/myop) names the embedded kernel (the Hub repository)
    as well as the folder: the commands `new` suggested were refused as ambiguous (exit 2). Read as
    a shell reads them, they name the folder written, whatever characters its name holds."""
    monkeypatch.chdir(tmp_path)
    result = invoke(CliRunner(), "new", *args)
    next_line = result.stdout.splitlines()[-1]
    assert next_line.startswith("next: ")
    for command in next_line.removeprefix("next: ").split(" && "):
        name, *rest = shlex.split(command)
        assert name == "webgpu-kernels" and (tmp_path / rest[-1]).resolve() == (tmp_path / args[0]).resolve()
        invoke(CliRunner(), *rest)


def test_an_embedded_kernels_op_id_is_taken_with_a_note(tmp_path, monkeypatch) -> None:
    """An op id that is an embedded kernel's is the op a package reimplements (a copy beside the
    original is tested so): taken, with a note on which the bare id names and how to name the folder."""
    from cli_helpers import QUICK_GELU

    monkeypatch.chdir(tmp_path)
    result = invoke(CliRunner(), "new", QUICK_GELU)
    assert f"{QUICK_GELU} is also the op id of an embedded kernel" in result.stderr, result.stderr
    assert f"./{QUICK_GELU}" in result.stderr and "--op" in result.stderr
    assert wk.load_kernel(tmp_path / QUICK_GELU).op_id == QUICK_GELU
    result = invoke(CliRunner(), "new", str(tmp_path / "pkg"), "--op", OP)
    assert "embedded" not in result.stderr


def test_an_onnx_ops_id_gets_the_ops_newest_version_from_onnxs_schemas(tmp_path, monkeypatch) -> None:
    """`new ai.onnx.Gelu` wrote sinceVersion 1, an opset without Gelu (its one version is 20), so
    `run` compared nothing until the author found the number. Where onnx's operator schemas know the
    op, its newest version is written and `new` says where it came from; the contract version in
    metadata.json is still 1 (a first contract). An op onnx does not know, or no onnx, keeps 1."""
    onnx = pytest.importorskip("onnx")
    newest = onnx.defs.get_schema("Gelu", domain="").since_version
    assert newest > 1
    result = invoke(CliRunner(), "new", str(tmp_path / "ai.onnx.Gelu"))
    root = tmp_path / "ai.onnx.Gelu"
    assert json.loads((root / "manifest.json").read_text("utf-8"))["sinceVersion"] == newest
    assert json.loads((root / "metadata.json").read_text("utf-8"))["version"] == 1
    said = " ".join(result.stdout.split())
    assert (f"sinceVersion {newest}: the newest version of ai.onnx Gelu in onnx {onnx.__version__}'s operator "
            "schemas") in said, said
    assert invoke(CliRunner(), "digest", str(root), "--check").exit_code == 0
    for op in ("com.example.Gelu", "ai.onnx.NoSuchOp"):
        result = invoke(CliRunner(), "new", str(tmp_path / op))
        assert json.loads((tmp_path / op / "manifest.json").read_text("utf-8"))["sinceVersion"] == 1
        assert "sinceVersion" not in result.stdout, result.stdout
    monkeypatch.setitem(sys.modules, "onnx", None)  # not installed: an import of it fails
    invoke(CliRunner(), "new", str(tmp_path / "no-onnx"), "--op", "ai.onnx.Gelu")
    assert json.loads((tmp_path / "no-onnx" / "manifest.json").read_text("utf-8"))["sinceVersion"] == 1


def test_a_failed_write_leaves_no_folder_it_made(tmp_path, monkeypatch) -> None:
    """A write that fails removes what it wrote and the folders it made for PATH, parents too (they
    had been left behind, empty), and leaves an existing empty folder as it was, empty."""
    from webgpu_kernels import cli_new

    def fail(root, op_id):
        (root / "manifest.json").write_text("{}", "utf-8")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(cli_new, "write_package", fail)
    result = CliRunner().invoke(main, ["new", str(tmp_path / "a" / "b" / OP)])
    assert result.exit_code != 0 and isinstance(result.exception, OSError)
    assert list(tmp_path.iterdir()) == []
    (tmp_path / "empty").mkdir()
    CliRunner().invoke(main, ["new", str(tmp_path / "empty"), "--op", OP])
    assert [p.name for p in tmp_path.iterdir()] == ["empty"] and list((tmp_path / "empty").iterdir()) == []


@pytest.mark.parametrize("name, template", [
    ("MyOp", "my-op.wgsl.jinja"),
    ("QuickGelu", "quick-gelu.wgsl.jinja"),
    ("RMSNorm", "rms-norm.wgsl.jinja"),  # an acronym is a word of its own
    ("GELU", "gelu.wgsl.jinja"),
    ("QLinearMatMul", "q-linear-mat-mul.wgsl.jinja"),
    ("Conv2D", "conv2d.wgsl.jinja"),  # a digit and the capital after it stay one word
    ("Conv2DTranspose", "conv2d-transpose.wgsl.jinja"),
    ("ReduceL2", "reduce-l2.wgsl.jinja"),
    ("Scale_2", "scale_2.wgsl.jinja"),
])  # fmt: skip
def test_the_template_is_named_after_the_op_in_kebab_case(name, template) -> None:
    """`RMSNorm` had given `rmsnorm.wgsl.jinja` and `Conv2D` `conv2-d.wgsl.jinja`: docs/cli.md's
    rule (`MyOp` gives `my-op.wgsl.jinja`) splits words, an acronym's too, and nothing inside one."""
    from webgpu_kernels.cli_new import template_name

    assert template_name(name) == template


def test_new_says_which_folder_and_files_it_wrote(tmp_path, monkeypatch) -> None:
    """It had printed "wrote com.example.RMSNorm in com.example.RMSNorm" for a folder named after the op."""
    monkeypatch.chdir(tmp_path)
    files = "manifest.json, rms-norm.wgsl.jinja, test.json, bench.json, metadata.json"
    result = invoke(CliRunner(), "new", "com.example.RMSNorm")
    assert result.stdout.splitlines()[0] == f"wrote com.example.RMSNorm{os.sep} ({files})"
    result = invoke(CliRunner(), "new", "mine", "--op", "com.example.RMSNorm")
    assert result.stdout.splitlines()[0] == f"wrote com.example.RMSNorm in mine{os.sep} ({files})"


def test_the_new_template_renders_with_no_blank_first_line(package, need_dtype) -> None:
    """`{{ enables }}` is empty for f32: on a line of its own it had left the WGSL a blank first line."""
    kernel = wk.load_kernel(package)
    f32 = kernel.render({"X": np.zeros(5, np.float32)})
    assert all(text.startswith("struct ") for text in f32.values()), f32
    need_dtype(np.float16)
    f16 = kernel.render({"X": np.zeros(5, np.float16)})
    assert all(text.startswith("enable f16;\nstruct ") for text in f16.values()), f16
