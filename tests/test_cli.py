"""The ``webgpu-kernels`` command line, through click's CliRunner, on real shaders (lavapipe in CI).

Shapes are small: every kernel call here builds or reuses a real pipeline on the device.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import warnings

import numpy as np
import pytest
from click.testing import CliRunner

import webgpu_kernels as wk
from webgpu_kernels import references
from webgpu_kernels.cli import InputSpec, main, parse_input_spec, parse_value
from webgpu_kernels.cli_run import compare, summarize
from webgpu_kernels.package import embedded_root

BIAS_ADD = "com.microsoft.BiasAdd"
QUICK_GELU = "com.microsoft.QuickGelu"
BA_F32 = ["--input", "X=2x5x6:f32", "--input", "bias=6:f32", "--input", "skip=2x5x6:f32"]  # scalar variant
BA_F16_VEC4 = ["-i", "X=2x3x8:f16", "-i", "bias=8:f16", "-i", "skip=2x3x8:f16"]  # vec4 variant
QG_F32 = ["--input", "X=3x5:f32"]  # 15 elements: vec4_tail
QG_F16_VEC4 = ["--input", "X=2x8:f16"]  # 16 elements: vec4

try:
    import onnxruntime  # noqa: F401

    HAS_ORT = True
except ImportError:
    HAS_ORT = False


@pytest.fixture(scope="module")
def has_f16() -> bool:
    return wk.get_device().has_f16


def invoke(runner: CliRunner, *args: str, code: int = 0):
    result = runner.invoke(main, list(args))
    assert result.exit_code == code, (result.exit_code, result.output, result.exception)
    if code == 0:
        assert result.exception is None
    return result


def invoke_json(runner: CliRunner, *args: str):
    return json.loads(invoke(runner, *args, "--json").stdout)


def assert_error(result, *fragments: str) -> None:
    """A library error: exit 2, one ``error:`` line first on stderr, no traceback, nothing on stdout."""
    assert result.exit_code == 2, result.output
    assert result.stdout == ""
    first = result.stderr.splitlines()[0]
    assert first.startswith("error: ")
    assert "Traceback" not in result.stderr
    for fragment in fragments:
        assert fragment in result.stderr, (fragment, result.stderr)


# --- parsing ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("X=2x64x320:f16", InputSpec("X", (2, 64, 320), "float16")),
        ("bias=320:float32", InputSpec("bias", (320,), "float32")),
        ("X=:f32", InputSpec("X", (), "float32")),
        ("X=scalar:F32", InputSpec("X", (), "float32")),
        ("X=0x3:f64", InputSpec("X", (0, 3), "float64")),
        ("X=4:int32", InputSpec("X", (4,), "int32")),
        ("X=4:bf16", InputSpec("X", (4,), "bfloat16")),
    ],
)
def test_parse_input_spec(text: str, expected: InputSpec) -> None:
    assert parse_input_spec(text) == expected


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("X2x3:f32", "is not NAME=DIMS:DTYPE"),
        ("X=2x3", "has no dtype"),
        ("X=2x3:f17", "unknown dtype 'f17'"),
        ("X=2xax3:f32", "bad dimension 'a'"),
        ("X=2x-1:f32", "bad dimension '-1'"),
        ("X=2x:f32", "bad dimension ''"),
        ("X=2x²:f32", "bad dimension '²'"),  # str.isdigit() takes it; int() had raised
        ("=2:f32", "is not NAME=DIMS:DTYPE"),
    ],
)
def test_parse_input_spec_rejects(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_input_spec(text)


def test_parse_value() -> None:
    assert parse_value("1.0") == 1.0 and isinstance(parse_value("1.0"), float)
    assert parse_value("3") == 3 and isinstance(parse_value("3"), int)
    assert parse_value("true") is True
    assert parse_value('"s"') == "s"
    assert parse_value("[1, 2]") == [1, 2]
    assert parse_value("vec4") == "vec4"  # not JSON: the string itself
    # the case files' spellings are numbers, as JSON's NaN and Infinity are (they had stayed strings,
    # so alpha=nan was "expected a number, got str 'nan'" where NaN got "expected a finite number")
    assert math.isnan(parse_value("nan")) and parse_value("inf") == math.inf and parse_value("-INF") == -math.inf
    assert math.isnan(parse_value("NaN")) and parse_value("-Infinity") == -math.inf


# --- version, devices, list ----------------------------------------------------------------------------


def test_version(runner: CliRunner) -> None:
    assert wk.__version__ in invoke(runner, "--version").stdout


def test_devices(runner: CliRunner) -> None:
    out = invoke(runner, "devices").stdout
    chosen = wk.choose_adapter()
    assert chosen.name in out and chosen.backend in out
    for limit in ("maxStorageBufferBindingSize", "maxBufferSize", "maxComputeWorkgroupsPerDimension",
                  "maxComputeInvocationsPerWorkgroup", "maxComputeWorkgroupSizeX"):  # fmt: skip
        assert limit in out
    # What format.md tells authors to bound var<workgroup> arrays with (an author missed it here).
    storage = wk.get_device().limits["max-compute-workgroup-storage-size"]
    assert f"maxComputeWorkgroupStorageSize: {storage}" in out
    assert "(chosen)" in out and "features" in out
    # What manifests see, by the names they use: wgpu-native lists WebGPU's "subgroups" as "subgroup".
    seen = {"shader-f16", "subgroups", "timestamp-query"} & set(wk.get_device().info.feature_names)
    assert f"device.features (what manifests see): {', '.join(sorted(seen))}" in out


def test_devices_json(runner: CliRunner) -> None:
    data = invoke_json(runner, "devices")
    assert len(data) == len(wk.list_adapters()) >= 1
    assert [d["chosen"] for d in data].count(True) == 1
    chosen = next(d for d in data if d["chosen"])
    assert chosen["index"] == wk.choose_adapter().index
    for d in data:
        assert set(d["limits"]) == {"maxStorageBufferBindingSize", "maxBufferSize", "maxComputeWorkgroupsPerDimension",
                                    "maxComputeInvocationsPerWorkgroup", "maxComputeWorkgroupSizeX",
                                    "maxComputeWorkgroupStorageSize"}  # fmt: skip
        assert all(isinstance(v, int) for v in d["limits"].values())
        assert isinstance(d["features"], list) and d["backend"] and d["type"]
    assert chosen["deviceFeatures"] == list(wk.get_device().info.feature_names)


def test_devices_adapter_option_and_env(runner: CliRunner, monkeypatch: pytest.MonkeyPatch) -> None:
    adapters = wk.list_adapters()
    last = adapters[-1]
    data = json.loads(invoke(runner, "--adapter", last.backend, "devices", "--json").stdout)
    assert next(d for d in data if d["chosen"])["backend"] == last.backend
    monkeypatch.setenv("WEBGPU_KERNELS_ADAPTER", last.backend)
    data = json.loads(invoke(runner, "devices", "--json").stdout)
    assert next(d for d in data if d["chosen"])["backend"] == last.backend


def test_unknown_adapter(runner: CliRunner) -> None:
    result = invoke(runner, "--adapter", "no-such-gpu", "devices", code=2)
    assert_error(result, "no adapter matches 'no-such-gpu'", "present:")


def test_list(runner: CliRunner) -> None:
    out = invoke(runner, "list").stdout
    assert BIAS_ADD in out and QUICK_GELU in out
    assert "vec4_tail" in out
    assert "Computes `x * sigmoid(alpha * x)` elementwise, a fast approximation of GELU activation." in out
    assert "The output has the same shape" not in out  # first sentence only


def test_list_json(runner: CliRunner) -> None:
    data = {row["op"]: row for row in invoke_json(runner, "list")}
    assert set(data) >= {BIAS_ADD, QUICK_GELU}
    assert data[BIAS_ADD]["variants"] == ["vec4", "scalar"]
    assert data[QUICK_GELU]["variants"] == ["vec4", "vec4_tail", "scalar"]
    assert data[BIAS_ADD]["description"].startswith("Adds a 1-D `bias`") and data[BIAS_ADD]["description"].endswith(".")


# --- info ---------------------------------------------------------------------------------------------


def test_info_quick_gelu(runner: CliRunner) -> None:
    out = invoke(runner, "info", QUICK_GELU).stdout
    for fragment in ("com.microsoft.QuickGelu", "T: float32, float16", "alpha", "1.702", "approximates GELU",
                     "WORKGROUP_SIZE = 256", "vec4Ok := numel(shapes.X) > 0 and numel(shapes.X) % 4 == 0",
                     "vec4_tail (priority 10)", "when[1]: vec4Ok", "shader quick-gelu.wgsl.jinja",
                     "threads ceilDiv(numel(shapes.X), 4)", "shapes.X"):  # fmt: skip
        assert fragment in out, fragment


def test_info_bias_add(runner: CliRunner) -> None:
    out = invoke(runner, "info", BIAS_ADD).stdout
    for fragment in ("bias", "skip", "Attributes: none", "hidden := dim(shapes.X, ranks.X - 1)",
                     "vec4 (priority 30)", "when[10]: dim(shapes.X, 2) % 4 == 0",
                     "template input itemsPerInvocation := 4",
                     "shader bias-add.wgsl.jinja"):  # fmt: skip
        assert fragment in out, fragment


@pytest.mark.parametrize("command", [["info"], ["validate", "--no-gpu"], ["test", "--case", "rank0-f32"],
                                     ["explain", "-i", "X=4:f32"]])  # fmt: skip
def test_an_embedded_id_that_is_also_a_package_folder_here_is_refused(runner: CliRunner, tmp_path, monkeypatch,
                                                                        command) -> None:  # fmt: skip
    """Neither reading may stand in for the other silently: the embedded id had won, so a CI
    script testing its package folder named by the op id passed a broken copy (helper-4's trial);
    the other way round, a copy being edited would stand in for the shipped kernel. ``./<id>``
    names the folder; a same-named folder that holds no package does not clash."""
    from conftest import copy_package

    copy = copy_package(QUICK_GELU, tmp_path / QUICK_GELU)
    manifest = json.loads((copy / "manifest.json").read_text())
    manifest["description"] = "THE LOCAL COPY"
    (copy / "manifest.json").write_text(json.dumps(manifest))
    (copy / "metadata.json").unlink()  # an author's work in progress
    monkeypatch.chdir(tmp_path)
    name, *options = command
    result = runner.invoke(main, [name, QUICK_GELU, *options])
    assert result.exit_code == 2, result.output
    assert f"names both the embedded kernel and the package folder ./{QUICK_GELU} here" in result.output
    assert "Traceback" not in result.output
    if name == "info":
        assert "THE LOCAL COPY" in invoke(runner, "info", f"./{QUICK_GELU}").stdout
        assert "has no metadata.json" in runner.invoke(main, ["validate", f"./{QUICK_GELU}", "--no-gpu"]).output
        (copy / "manifest.json").rename(copy / "manifest.json.away")  # no package there now: the embedded one
        assert invoke_json(runner, "info", QUICK_GELU)["origin"] == "embedded"
        monkeypatch.chdir(embedded_root())  # the folder is the embedded package itself: nothing to tell apart
        assert invoke_json(runner, "info", QUICK_GELU)["origin"] == "embedded"


def test_a_folder_named_like_a_hub_repository_is_ambiguous(runner: CliRunner, tmp_path, monkeypatch) -> None:
    """`someone-else/com.microsoft.QuickGelu` read the folder of that name here, unverified, where
    Python's get_kernel reads the Hub repository, which another organisation's needs trust
    (helper-27). `./org/op` and a path of two slashes name the folder."""
    from conftest import copy_package

    monkeypatch.chdir(tmp_path)
    copy_package(QUICK_GELU, tmp_path / "someone-else" / QUICK_GELU)
    ref = f"someone-else/{QUICK_GELU}"
    result = runner.invoke(main, ["info", ref])
    assert result.exit_code == 2 and f"{ref!r} names both a Hub repository and the package folder ./{ref}" in result.output
    assert invoke_json(runner, "info", f"./{ref}")["origin"] == "local"
    assert invoke_json(runner, "info", str(tmp_path / ref))["origin"] == "local"
    for command in (["validate", ref, "--no-gpu"], ["digest", "--check", ref]):  # these read only folders
        assert runner.invoke(main, command).exit_code == 0, command


@pytest.mark.parametrize("ref, kind, repo, pin", [
    (QUICK_GELU, "embedded", "", ""), ("./pkg", "folder", "", ""), ("/no/such/pkg", "folder", "", ""),
    ("~/pkg", "folder", "", ""), ("webgpu-kernels/com.x.Op", "hub", "webgpu-kernels/com.x.Op", ""),
    ("org/op@v3", "hub", "org/op", "v3"), ("org/op@main", "hub", "org/op", "main"), ("com.x.Op", "unknown", "", ""),
])  # fmt: skip
def test_one_rule_reads_every_kernel_argument(ref, kind, repo, pin) -> None:
    from webgpu_kernels.cli import classify_kernel_ref

    where = classify_kernel_ref(ref)
    assert (where.kind, where.repo, where.pin) == (kind, repo, pin)


def test_info_json(runner: CliRunner) -> None:
    data = invoke_json(runner, "info", BIAS_ADD)
    assert data["op"] == BIAS_ADD and data["origin"] == "embedded"
    assert [(i["role"], i["typeVar"], i["rank"]) for i in data["inputs"]] == [("X", "T", 3), ("bias", "T", 1),
                                                                            ("skip", "T", 3)]  # fmt: skip
    assert data["outputs"][0]["shape"] == "shapes.X"
    assert data["typeConstraints"] == {"T": ["float32", "float16"]}
    vec4 = data["variants"][0]
    assert vec4["id"] == "vec4" and vec4["priority"] == 30 and len(vec4["when"]) == 11
    dispatch = vec4["passes"][0]["dispatch"]
    assert dispatch == {"threads": "numel(shapes.X) / 4", "workgroupSize": ["tunables.WORKGROUP_SIZE"]}

    data = invoke_json(runner, "info", QUICK_GELU)
    assert data["attributes"]["alpha"]["default"] == 1.702
    assert "GELU" in data["attributes"]["alpha"]["description"]
    assert data["inputs"][0]["rank"] is None
    assert list(data["derive"]) == ["deviceWorkgroupCap", "workgroupOk", "baseOk", "vec4Ok"]
    assert data["variants"][2]["passes"][0]["shader"] == "quick-gelu.wgsl.jinja"


@pytest.fixture
def package_folder(tmp_path):
    """A copy of the embedded QuickGelu package, renamed, with a second pass in its scalar variant."""
    folder = tmp_path / "my.QuickGelu2"
    # Without metadata.json: an author's working copy, whose digests have not been taken yet.
    shutil.copytree(embedded_root() / QUICK_GELU, folder, ignore=shutil.ignore_patterns("metadata.json"))
    manifest = json.loads((folder / "manifest.json").read_text())
    manifest["domain"], manifest["name"] = "my", "QuickGelu2"
    scalar = manifest["variants"][2]
    scalar["passes"].append({**scalar["passes"][0], "id": "again", "name": "QuickGelu.again"})
    (folder / "manifest.json").write_text(json.dumps(manifest))
    return folder


def test_info_package_folder(runner: CliRunner, package_folder) -> None:
    out = invoke(runner, "info", str(package_folder)).stdout
    assert "my.QuickGelu2" in out and "local package" in out and "pass 'again'" in out
    data = json.loads(invoke(runner, "info", str(package_folder), "--json").stdout)
    assert data["op"] == "my.QuickGelu2" and data["origin"] == "local"
    assert [p["id"] for p in data["variants"][2]["passes"]] == ["main", "again"]


def test_package_text_reaches_the_terminal_without_control_characters(runner: CliRunner, package_folder) -> None:
    """A description with ESC sequences (retitle the window, clear the screen) was printed as it
    was by `info`; each control character is now one U+FFFD. JSON escapes them by itself."""
    manifest = json.loads((package_folder / "manifest.json").read_text())
    manifest["description"] = "before \x1b]0;owned\x07 \x1b[2J after"
    (package_folder / "manifest.json").write_text(json.dumps(manifest))
    out = invoke(runner, "info", str(package_folder)).stdout
    assert "\x1b" not in out and "\x07" not in out and "before \ufffd]0;owned\ufffd \ufffd[2J after" in out
    assert json.loads(invoke(runner, "info", str(package_folder), "--json").stdout)["description"] == (
        manifest["description"])


def test_render_two_passes_from_folder(runner: CliRunner, package_folder) -> None:
    out = invoke(runner, "render", str(package_folder), "-i", "X=5:f32", "--variant", "scalar").stdout
    assert "// ---- pass main ----" in out and "// ---- pass again ----" in out
    assert out.count("@compute") == 2


# --- explain ------------------------------------------------------------------------------------------


def test_explain_bias_add(runner: CliRunner) -> None:
    out = invoke(runner, "explain", BIAS_ADD, *BA_F32).stdout
    assert "chosen variant 'scalar'" in out
    assert "- vec4 (priority 30): when[10] 'dim(shapes.X, 2) % 4 == 0' is false (with shapes.X=[2, 5, 6])" in out
    assert "output Y: shape [2, 5, 6] float32" in out


def test_explain_json(runner: CliRunner, has_f16: bool) -> None:
    data = invoke_json(runner, "explain", BIAS_ADD, *BA_F32)
    assert data["chosen"] == "scalar"
    assert data["variants"][0]["clause"] == "dim(shapes.X, 2) % 4 == 0"
    assert data["outputs"] == [{"name": "Y", "shape": [2, 5, 6], "dtype": "float32", "produced": True}]
    assert data["values"]["hidden"] == 6

    data = invoke_json(runner, "explain", QUICK_GELU, "-i", "X=:f32", "--attr", "alpha=1.0", "--tunable",
                       "WORKGROUP_SIZE=64")  # fmt: skip
    assert data["chosen"] == "vec4_tail"  # rank 0: one element
    assert data["outputs"][0]["shape"] == []
    if has_f16:
        assert invoke_json(runner, "explain", QUICK_GELU, *QG_F16_VEC4)["chosen"] == "vec4"


def test_explain_no_variant(runner: CliRunner) -> None:
    out = invoke(runner, "explain", QUICK_GELU, *QG_F32, "--tunable", "WORKGROUP_SIZE=100000").stdout
    assert "no variant applies" in out and "'baseOk' is false" in out


def test_explain_a_forced_variant(runner: CliRunner) -> None:
    """`explain --variant ID` explains the call `run --variant ID` makes (it had no --variant)."""
    out = invoke(runner, "explain", QUICK_GELU, *QG_F32, "--variant", "scalar").stdout
    assert "chosen variant 'scalar' (forced)" in out and "  * scalar (priority 0): accepted" in out
    rejected = invoke(runner, "explain", QUICK_GELU, *QG_F32, "--variant", "vec4").stdout  # explained: exit 0
    assert "forced variant 'vec4' rejected" in rejected
    assert "the call fails: variant 'vec4' cannot run this call: when[1] 'vec4Ok' is false" in rejected
    data = invoke_json(runner, "explain", QUICK_GELU, *QG_F32, "--variant", "vec4")
    assert data["forced"] == "vec4" and data["chosen"] is None and "cannot run this call" in data["refused"]
    assert_error(runner.invoke(main, ["explain", QUICK_GELU, *QG_F32, "--variant", "vec8"]), "no variant 'vec8'")


# --- render -------------------------------------------------------------------------------------------


def test_render(runner: CliRunner, has_f16: bool) -> None:
    out = invoke(runner, "render", BIAS_ADD, *BA_F32).stdout
    assert "@compute @workgroup_size(256)" in out and "array<f32>" in out
    assert "// ---- pass" not in out  # one pass: no header
    out = invoke(runner, "render", QUICK_GELU, *QG_F32, "--variant", "scalar", "--tunable", "WORKGROUP_SIZE=64").stdout
    assert "@workgroup_size(64)" in out
    out = invoke(runner, "render", QUICK_GELU, *QG_F32, "--attr", "alpha=0.5").stdout
    assert "0.5" in out
    if has_f16:
        assert "enable f16;" in invoke(runner, "render", BIAS_ADD, *BA_F16_VEC4).stdout


# --- run ----------------------------------------------------------------------------------------------


def test_run_quick_gelu_text(runner: CliRunner) -> None:
    out = invoke(runner, "run", QUICK_GELU, *QG_F32, "--repeat", "2").stdout
    assert "variant: vec4_tail (selected)" in out
    assert "[3, 5]" in out and "float32" in out
    assert "host wall clock" in out and "not GPU kernel time" in out
    assert "first call:" in out and "median of 2 more calls:" in out
    assert "error vs NumPy float64 reference (Y): max abs" in out
    if HAS_ORT:
        assert "error vs ONNX Runtime CPU (Y): max abs" in out


@pytest.mark.parametrize("dtype", ["f32", "f16"])
def test_run_quick_gelu_json(runner: CliRunner, has_f16: bool, dtype: str) -> None:
    if dtype == "f16" and not has_f16:
        pytest.skip("no shader-f16")
    data = invoke_json(runner, "run", QUICK_GELU, "-i", f"X=2x8:{dtype}", "--repeat", "1", "--seed", "3",
                       "--attr", "alpha=1.5")  # fmt: skip
    assert data["variant"] == "vec4" and data["forced"] is False and data["attrs"] == {"alpha": 1.5}
    y = data["outputs"]["Y"]
    assert y["shape"] == [2, 8] and y["dtype"] == ("float32" if dtype == "f32" else "float16") and y["nanCount"] == 0
    assert y["min"] <= y["mean"] <= y["max"]
    # the same seeded inputs, drawn here as bench draws them (standard normal float32, cast)
    x = np.random.default_rng(3).standard_normal((2, 8), dtype=np.float32).astype(np.float32 if dtype == "f32"
                                                                                  else np.float16)  # fmt: skip
    expected = references.quick_gelu({"X": x}, {"alpha": 1.5})["Y"]
    assert y["max"] == pytest.approx(expected.max(), rel=2e-3)
    numpy_err = data["reference"]["numpy"]["Y"]
    assert numpy_err["nonFiniteMismatches"] == 0
    assert numpy_err["maxRelError"] < (1e-5 if dtype == "f32" else 2e-3)
    assert data["timing"]["firstCallMs"] > 0 and data["timing"]["repeat"] == 1 and data["timing"]["medianMs"] > 0
    assert "not GPU kernel time" in data["timing"]["clock"]
    if HAS_ORT:
        assert data["reference"]["onnxruntime"]["Y"]["maxRelError"] < (1e-5 if dtype == "f32" else 2e-3)


def test_run_says_when_no_reference_checked_the_outputs(runner: CliRunner) -> None:
    """A package's own op, which no NumPy reference and no ONNX Runtime kernel knows: `run` printed
    no verdict and its JSON said "ok": true, which a CI gate read as checked (helper-24)."""
    from conftest import PACKAGES_DIR

    package = str(PACKAGES_DIR / "demo.ScaleShift")
    data = invoke_json(runner, "run", package, "-i", "X=4x8:f32")
    assert data["ok"] is True and data["checked"] is False and data["reference"] == {"numpy": None, "onnxruntime": None}
    assert "not checked: no reference compared the outputs" in invoke(runner, "run", package, "-i", "X=4x8:f32").stdout


def test_run_bias_add(runner: CliRunner, has_f16: bool) -> None:
    data = invoke_json(runner, "run", BIAS_ADD, *BA_F32, "--repeat", "1")
    assert data["variant"] == "scalar"
    assert data["outputs"]["Y"]["shape"] == [2, 5, 6]
    assert data["reference"]["numpy"]["Y"]["maxAbsError"] < 1e-5
    assert data["reference"]["onnxruntime"] is None  # ORT has no CPU BiasAdd
    assert data["ok"] is True and data["checked"] is True  # by the NumPy reference
    why = "onnxruntime has no CPU kernel for this op and dtype" if HAS_ORT else "is not installed"
    assert why in data["referenceUnavailable"]["onnxruntime"]
    out = invoke(runner, "run", BIAS_ADD, *BA_F32, "--variant", "scalar", "--repeat", "0").stdout
    assert "variant: scalar (forced)" in out and "median" not in out
    assert "ONNX Runtime CPU: not available (" in out and why in out
    if has_f16:
        data = invoke_json(runner, "run", BIAS_ADD, *BA_F16_VEC4, "--repeat", "1")
        assert data["variant"] == "vec4" and data["outputs"]["Y"]["dtype"] == "float16"
        assert data["reference"]["numpy"]["Y"]["maxRelError"] < 2e-3


def test_run_generate_draws_an_input_from_its_distribution(runner: CliRunner) -> None:
    """run drew every input standard normal: an integer input got about 68% zeros, so a gather's
    indices read the same few rows. --generate takes bench.json's distributions."""
    from webgpu_kernels.cli_run import random_inputs

    data = invoke_json(runner, "run", QUICK_GELU, "-i", "X=4x64:f32", "--generate", "X=uniform:5:6", "--repeat", "0")
    assert data["inputs"]["X"]["generate"] == {"distribution": "uniform", "low": 5.0, "high": 6.0}
    y = data["outputs"]["Y"]  # x * sigmoid(1.702 x) for x in [5, 6): within [4.999, 6)
    assert 4.99 < y["min"] and y["max"] < 6 and data["ok"]
    assert data["reference"]["numpy"]["Y"]["maxAbsError"] < 1e-5  # the reference read the same data
    out = invoke(runner, "run", QUICK_GELU, "-i", "X=4x64:f32", "--generate", "X=normal:-4:0.5", "--repeat", "0").stdout
    assert "X [4, 64] float32 normal (mean -4, std 0.5)" in out and "standard normal unless said" in out
    indices = InputSpec("indices", (10_000,), "int64", {"distribution": "uniform", "low": 0, "high": 999})
    drawn = random_inputs({"indices": indices}, seed=0)["indices"]
    assert drawn.dtype == np.int64 and drawn.min() == 0 and drawn.max() == 999
    assert len(np.unique(drawn)) == 1000  # every row, where the normal default gave -3..3
    normal = random_inputs({"indices": InputSpec("indices", (10_000,), "int64")}, seed=0)["indices"]
    assert (normal == 0).mean() > 0.6


@pytest.mark.parametrize("spec, fragment", [
    ("Z=uniform:0:1", "--generate names 'Z', which no -i/--input gives (-i inputs: X)"),
    ("X=uniform:1:0", "'X=uniform:1:0': low is above high"),
    ("X=uniform:-1e308:1e308", "high - low is past float64's range"),  # every value inf (helper-22)
    ("X=normal:0:-1", "std in 'X=normal:0:-1' must be at least 0"),
    ("X=uniform:0:inf", "high in 'X=uniform:0:inf' must be a finite number, got 'inf'"),
    ("X=uniform:a:1", "low in 'X=uniform:a:1' must be a finite number, got 'a'"),
    ("X=poisson:3", "write X=uniform:LOW:HIGH or X=normal:MEAN:STD"),
    ("X", "is not NAME=uniform:LOW:HIGH"),
])  # fmt: skip
def test_run_generate_refuses_what_it_cannot_draw(runner: CliRunner, spec: str, fragment: str) -> None:
    result = runner.invoke(main, ["run", QUICK_GELU, "-i", "X=4:f32", "--generate", spec])
    assert result.exit_code == 2 and fragment in result.output and "Traceback" not in result.output, result.output


def test_run_holds_large_outputs_to_a_relative_tolerance(runner: CliRunner) -> None:
    """The absolute tolerance alone (1e-4 float32) marked a correct output WRONG wherever it is large:
    float32 holds 3000 to 2.4e-4 (helper-21: a LayerNorm's mean of 1000, 5e-7 off relative)."""
    data = invoke_json(runner, "run", QUICK_GELU, "-i", "X=64x64:f32", "--generate", "X=uniform:3000:4000",
                       "--attr", "alpha=0.001", "--repeat", "0")  # fmt: skip
    numpy_err = data["reference"]["numpy"]["Y"]
    assert numpy_err["maxAbsError"] > 1e-4 and numpy_err["maxRelError"] < 1e-6  # past the absolute tolerance alone
    assert numpy_err["beyondTolerance"] == 0 and numpy_err["ok"] and data["ok"]


def test_run_empty(runner: CliRunner) -> None:
    data = invoke_json(runner, "run", QUICK_GELU, "-i", "X=0x3:f32", "--repeat", "1")
    assert data["variant"] == "scalar"
    assert data["outputs"]["Y"] == {"shape": [0, 3], "dtype": "float32", "size": 0, "nanCount": 0, "min": None,
                                    "max": None, "mean": None}  # fmt: skip


def test_run_rank0(runner: CliRunner) -> None:
    data = invoke_json(runner, "run", QUICK_GELU, "-i", "X=:f32", "--repeat", "0")
    assert data["outputs"]["Y"]["shape"] == []
    assert data["reference"]["numpy"]["Y"]["maxAbsError"] < 1e-6


def test_run_past_the_binding_limit_fails_before_making_data(runner: CliRunner) -> None:
    """One element past the device's binding limit: refused by the limit check, before random data
    (a NumPy allocation that large would take seconds and gigabytes first). Within maxBufferSize:
    the H200's 4 * its binding limit had been past it too, a message this test did not expect."""
    import tracemalloc

    device = wk.get_device()
    binding, buffer = device.limits["max-storage-buffer-binding-size"], device.limits["max-buffer-size"]
    elements = min(binding, buffer) // 4 + 1
    if 4 * elements > buffer:
        pytest.skip(f"the binding limit ({binding} bytes) is the device's maxBufferSize ({buffer})")
    command = ["run", QUICK_GELU, "-i", f"X={elements}:f32", "--repeat", "0"]
    runner.invoke(main, command)  # the modules a first run imports are not what is measured
    tracemalloc.start()
    try:
        result = runner.invoke(main, command)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert_error(result, "maxStorageBufferBindingSize", f"{4 * elements} bytes")
    assert peak < 2**20, peak
    explained = invoke(runner, "explain", QUICK_GELU, "-i", f"X={elements}:f32").stdout
    assert "chosen variant" in explained and "but the call would fail" in explained, explained


# --- errors -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("command", [["test", "com.microsoft.QuickGelu", "--case", "vec4-2x64-f32"],
                                     ["run", "com.microsoft.QuickGelu", "-i", "X=4:f32"]])
def test_a_bad_no_tuning_setting_is_the_callers_error_in_every_command(runner: CliRunner, monkeypatch,
                                                                        command: list[str]) -> None:
    """`test` had reported each case as an ERROR of the package (exit 1, a JUnit error per case) where
    run, explain and bench refuse the setting (exit 2)."""
    monkeypatch.setenv(wk.tuning.DISABLE_ENV, "maybe")
    result = runner.invoke(main, command)
    assert result.exit_code == 2, result.output
    assert "WEBGPU_KERNELS_NO_TUNING" in result.output and "ERROR" not in result.output


def test_digest_check_names_the_metadata_file_on_one_line(runner: CliRunner, tmp_path) -> None:
    """The title of digest's table of changes was wrapped to the table's width: the path of
    metadata.json came out cut mid-name ("metadata.js" / "on") in a log, where nothing needs wrapping."""
    root = tmp_path / "a-package-folder-with-a-rather-long-name" / "com.microsoft.QuickGelu"
    shutil.copytree(embedded_root() / "com.microsoft.QuickGelu", root)
    (root / "bench.json").write_text("{}", "utf-8")
    result = runner.invoke(main, ["digest", "--check", str(root)])
    assert result.exit_code == 1 and "changed" in result.output, result.output
    assert str(root / "metadata.json") in result.output, result.output


def test_columns_zero_does_not_silence_the_output() -> None:
    """rich took COLUMNS=0 (a terminal of unknown size) for a width of 0: every table, verdict and
    error message came out empty, with only the exit status left."""
    runner = CliRunner(env={"COLUMNS": "0"})
    result = runner.invoke(main, ["list"])
    assert result.exit_code == 0 and "com.microsoft.QuickGelu" in result.output, result.output
    result = runner.invoke(main, ["run", "no.such.Op", "-i", "X=4:f32"])
    assert result.exit_code == 2 and "no embedded kernel 'no.such.Op'" in result.output, result.output


@pytest.mark.parametrize("term, live", [("xterm-256color", True), ("dumb", False)])
def test_progress_is_live_only_on_a_terminal_that_redraws(monkeypatch, term: str, live: bool) -> None:
    """On TERM=dumb rich draws no live progress, and the lines written where progress cannot redraw
    were not written either: a tune search of minutes printed nothing until its case ended."""
    import io

    from rich.console import Console

    from webgpu_kernels.cli import is_live

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    monkeypatch.setenv("TERM", term)
    monkeypatch.delenv("FORCE_COLOR", raising=False)
    monkeypatch.delenv("TTY_COMPATIBLE", raising=False)
    console = Console(file=Terminal())
    assert console.is_terminal and is_live(console) is live


def test_unknown_kernel(runner: CliRunner) -> None:
    for command in (["info", "com.microsoft.Nope"], ["run", "com.microsoft.Nope", "-i", "X=2:f32"]):
        assert_error(runner.invoke(main, command), "no embedded kernel 'com.microsoft.Nope'", QUICK_GELU)


def test_missing_folder(runner: CliRunner, tmp_path) -> None:
    assert_error(runner.invoke(main, ["info", str(tmp_path / "nope")]), "not a folder")
    assert_error(runner.invoke(main, ["info", str(tmp_path)]), "no manifest.json")


def test_float64_input(runner: CliRunner) -> None:
    """The command line says how to write the dtype there; a Python caller's message no longer
    does (it had named `-i NAME=DIMS:f32` to Python users, helper-20)."""
    for command in ("explain", "render", "run"):
        result = runner.invoke(main, [command, QUICK_GELU, "-i", "X=2x3:f64"])
        assert_error(result, "argument 'X'", "float64", "['float32', 'float16']", "on the command line: -i X=DIMS:f32")
    with pytest.raises(wk.errors.DTypeError) as info:
        wk.get_kernel(QUICK_GELU)({"X": np.zeros(3)})
    assert ".astype(np.float32)" in str(info.value) and "command line" not in str(info.value)


def test_contract_errors(runner: CliRunner) -> None:
    assert_error(runner.invoke(main, ["run", BIAS_ADD, "-i", "X=2x3x4:f32", "-i", "bias=4:f32"]),
                 "argument 'skip'", "got nothing")  # fmt: skip
    assert_error(runner.invoke(main, ["explain", BIAS_ADD, "-i", "X=2x3x4:f32", "-i", "bias=4:f16", "-i",
                                      "skip=2x3x4:f32"]), "argument 'bias'", "float16")  # fmt: skip
    assert_error(runner.invoke(main, ["run", BIAS_ADD, "-i", "X=3x4:f32", "-i", "bias=4:f32", "-i", "skip=3x4:f32"]),
                 "argument 'X'", "rank 3")  # fmt: skip
    assert_error(runner.invoke(main, ["run", QUICK_GELU, "-i", "X=3:f32", "--attr", "beta=1"]), "'beta'")
    assert_error(runner.invoke(main, ["run", QUICK_GELU, "-i", "X=3:f32", "--attr", "alpha=fast"]),
                 "argument 'alpha'", "a number")  # fmt: skip


def test_selection_errors(runner: CliRunner) -> None:
    result = runner.invoke(main, ["run", QUICK_GELU, *QG_F32, "--variant", "vec4"])
    assert_error(result, "variant 'vec4' cannot run this call", "vec4Ok")
    assert_error(runner.invoke(main, ["render", QUICK_GELU, *QG_F32, "--variant", "nope"]), "no variant 'nope'")
    result = runner.invoke(main, ["run", BIAS_ADD, "-i", "X=2x3x4:f32", "-i", "bias=5:f32", "-i", "skip=2x3x4:f32"])
    assert_error(result, "no variant can run this call", "dim(shapes.bias, 0) == dim(shapes.X, 2)")


@pytest.mark.parametrize(
    ("spec", "message"),
    [("X2x3", "is not NAME=DIMS:DTYPE"), ("X=2x3:f17", "unknown dtype 'f17'"), ("X=2xa:f32", "bad dimension 'a'")],
)
def test_bad_input_spec(runner: CliRunner, spec: str, message: str) -> None:
    result = runner.invoke(main, ["run", QUICK_GELU, "--input", spec])
    assert result.exit_code == 2
    assert "Invalid value for '--input'" in result.stderr and message in result.stderr
    assert "Traceback" not in result.stderr


def test_usage_errors(runner: CliRunner) -> None:
    result = runner.invoke(main, ["run", QUICK_GELU, "-i", "X=2:f32", "-i", "X=3:f32"])
    assert result.exit_code == 2 and "given twice" in result.stderr
    result = runner.invoke(main, ["explain", QUICK_GELU, "-i", "X=2:f32", "--attr", "alpha"])
    assert result.exit_code == 2 and "is not NAME=VALUE" in result.stderr
    result = runner.invoke(main, ["frobnicate"])
    assert result.exit_code == 2 and "No such command" in result.stderr
    result = runner.invoke(main, ["run", QUICK_GELU, "--repeat", "-1"])
    assert result.exit_code == 2


# --- references and comparisons ----------------------------------------------------------------------------


def test_quick_gelu_reference_ieee() -> None:
    x = np.array([-np.inf, -1000.0, -3.0, -0.0, 0.0, 1.0, 1000.0, np.inf, np.nan])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no overflow / invalid warnings
        for alpha in (1.702, 1.0, 0.0, -1.5):
            got = references.quick_gelu({"X": x}, {"alpha": alpha})["Y"]
            a = float(np.float32(alpha))  # as ONNX holds a float attribute
            with np.errstate(all="ignore"):
                plain = x / (1.0 + np.exp(-a * x))
            np.testing.assert_allclose(got, plain, rtol=1e-15, atol=0)  # NaN and inf positions alike
            assert (np.signbit(got) == np.signbit(plain))[~np.isnan(plain)].all()
    got = references.quick_gelu({"X": x}, {})["Y"]
    assert np.isnan(got[0]) and got[-2] == np.inf and got[1] == 0.0 and np.signbit(got[1])


def test_a_reference_past_the_outputs_range_is_its_infinity(runner: CliRunner, has_f16: bool) -> None:
    """A correct float16 BiasAdd of 50000 + 50000 is inf; against the finite float64 reference it
    was WRONG in bench, tune's check, the peers' and run (helper-31). What the output's dtype rounds
    to an infinity is that infinity; 65504 (the largest finite float16) is still wrong there."""
    tol = references.Tolerance.of(["float16"])
    ref = np.array([1e5, -1e5, 65504.0, 1.0])
    assert tol.agrees({"Y": np.array([np.inf, -np.inf, 65504, 1], np.float16)}, {"Y": ref})
    assert not tol.agrees({"Y": np.array([65504, -np.inf, 65504, 1], np.float16)}, {"Y": ref})
    assert not references.Tolerance.of(["float32"]).agrees({"Y": np.array([np.inf], np.float32)}, {"Y": ref[:1]})
    if has_f16:
        large = [a for role in ("X", "skip") for a in ("--generate", f"{role}=uniform:40000:60000")]
        data = invoke_json(runner, "run", BIAS_ADD, "-i", "X=1x4x8:f16", "-i", "bias=8:f16", "-i", "skip=1x4x8:f16",
                           *large, "--generate", "bias=uniform:0:1")  # fmt: skip
        assert data["ok"] is True and data["reference"]["numpy"]["Y"]["nonFiniteMismatches"] == 0, data


def test_bias_add_reference() -> None:
    x = np.arange(24, dtype=np.float16).reshape(2, 3, 4)
    bias = np.array([1, 2, 3, 4], np.float16)
    got = references.bias_add({"X": x, "bias": bias, "skip": x}, {})["Y"]
    assert got.dtype == np.float64
    np.testing.assert_array_equal(got, 2 * x.astype(np.float64) + bias)


def test_the_tolerance_is_judged_element_by_element() -> None:
    """bench and tune's check (references.Tolerance): each element against absolute + relative x
    its own |reference|, so a large element's allowance does not cover a small one's error."""
    tol = references.Tolerance.of(["float32"])
    ref = np.array([1000.0, 1.0, np.nan, np.inf])
    ok = np.array([1000.0 + 0.009, 1.0 + 1e-4, np.nan, np.inf])  # 0.009 <= 1e-4 + 1e-5 * 1000
    assert tol.agrees({"Y": ok}, {"Y": ref}) and references.max_abs_error({"Y": ok}, {"Y": ref}) > tol.absolute
    for i, bad in ((1, 1.0 + 0.009), (0, 1000.0 + 0.02), (2, 0.0), (3, -np.inf), (0, np.nan)):
        got = ok.copy()
        got[i] = bad
        assert not tol.agrees({"Y": got}, {"Y": ref}), (i, bad)
    assert not tol.agrees({}, {"Y": ref}) and not tol.agrees({"Y": ok[:2]}, {"Y": ref})
    assert references.Tolerance.of(["int64"]).agrees({"Y": np.array([5])}, {"Y": np.array([5.0])})
    assert not references.Tolerance.of(["int64"]).agrees({"Y": np.array([50040])}, {"Y": np.array([50000.0])})


def test_the_tolerance_judges_a_rank_0_output() -> None:
    """A rank-0 output (QuickGelu of X=:f32) crashed bench's and tune's check with "'numpy.float64'
    object does not support item assignment": np.abs of a 0-d array is a scalar (helper-34)."""
    tol = references.Tolerance.of(["float32"])
    assert tol.agrees({"Y": np.array(1.00001, np.float32)}, {"Y": np.array(1.0)})
    assert not tol.agrees({"Y": np.array(1.5, np.float32)}, {"Y": np.array(1.0)})
    assert tol.agrees({"Y": np.array(np.inf, np.float32)}, {"Y": np.array(np.inf)})
    assert tol.allowance(np.array(np.nan)).shape == ()


def test_the_tolerance_judges_an_integer_reference() -> None:
    """onnxruntime's reference for an int output (bench checks with it since 004cbc2) is an integer
    array: the allowance scaled |ref| in place in its dtype, and NumPy's casting error escaped bench."""
    tol = references.Tolerance.of(["int32"])
    assert tol.agrees({"Y": np.array([3, -4], np.int32)}, {"Y": np.array([3, -4], np.int32)})
    assert not tol.agrees({"Y": np.array([3, -5], np.int32)}, {"Y": np.array([3, -4], np.int32)})
    assert references.Tolerance.of(["float32"]).agrees({"Y": np.array(7, np.int64)}, {"Y": np.array(7, np.int64)})
    assert references.Tolerance.of(["int32"]).allowance(np.array([np.iinfo(np.int32).min], np.int32))[0] > 0


@pytest.mark.skipif(not HAS_ORT, reason="onnxruntime not installed")
def test_onnxruntime_reference() -> None:
    x = np.linspace(-4, 4, 10, dtype=np.float32).reshape(2, 5)
    got = references.onnxruntime_reference(QUICK_GELU, {"X": x}, {"alpha": 1})
    want = references.quick_gelu({"X": x}, {"alpha": 1.0})["Y"]
    np.testing.assert_allclose(got["Y"], want, rtol=1e-6, atol=1e-7)
    assert references.onnxruntime_reference(QUICK_GELU, {"X": np.float32(2.0)}, {})["Y"].shape == ()
    x3 = np.ones((1, 2, 4), np.float32)
    three = {"X": x3, "bias": np.ones(4, np.float32), "skip": x3}
    with pytest.raises(references.ReferenceUnavailable, match="^onnxruntime has no CPU kernel for this op and dtype$"):
        references.onnxruntime_reference(BIAS_ADD, three, {})
    with pytest.raises(references.ReferenceUnavailable, match="^onnxruntime does not know this op$"):
        references.onnxruntime_reference("demo.ScaleShift", {"X": x}, {"scale": 1.0})
    # Refusals of this call's data or attributes say what ORT said (they had read "no CPU kernel").
    data = np.arange(6, dtype=np.float32).reshape(2, 3)
    with pytest.raises(references.ReferenceUnavailable, match="^onnxruntime refused this call: .*indices"):
        references.onnxruntime_reference("ai.onnx.Gather", {"data": data, "indices": np.array([5], np.int64)}, {})
    # With the kernel's output shapes: a model ONNX infers to other shapes is not run (helper-12: a package
    # naming ai.onnx.RandomNormal with shape [16384, 16384] had `run` allocate 3.4 GB in ORT).
    with pytest.raises(references.ReferenceUnavailable, match=r"output Y of shape \[16384, 16384\], not the kernel's \[4\]"):
        references.onnxruntime_reference("ai.onnx.RandomNormal", {}, {"shape": [16384, 16384]}, output_names=["Y"],
                                         output_shapes={"Y": (4,)})  # fmt: skip
    gathered = references.onnxruntime_reference("ai.onnx.Gather", {"data": data, "indices": np.array([1], np.int64)},
                                                {}, output_shapes={"Y": (1, 3)})  # fmt: skip
    np.testing.assert_array_equal(gathered["Y"], data[[1]])
    got = references.onnxruntime_reference(QUICK_GELU, {"X": x}, {"alpha": 1.0}, output_shapes={"Y": x.shape})
    np.testing.assert_allclose(got["Y"], want, rtol=1e-6, atol=1e-7)  # a contrib op: nothing inferred, run


_LAYER_NORM_MANIFEST = {
    "domain": "ai.onnx", "name": "LayerNormalization", "sinceVersion": 17,
    "inputs": [{"role": "X", "dtype": "T", "rank": 2}, {"role": "Scale", "dtype": "T"}],
    "outputs": [{"role": "Y", "dtype": "T", "rank": 2, "shape": "shapes.X"},
                {"role": "Mean", "dtype": "T", "rank": 2, "shape": "[shapes.X[0], 1]", "optional": True},
                {"role": "InvStdDev", "dtype": "T", "rank": 2, "shape": "[shapes.X[0], 1]", "optional": True}],
    "attributes": {"axis": -1, "epsilon": 1e-05},
    "typeConstraints": {"T": ["float32"]},
    "variants": [{"id": "main", "passes": [{"id": "main", "shader": "ln.wgsl.jinja", "bindings": [
        {"name": "x", "arg": "X", "buffer": {"type": "read-only-storage"}, "elementType": "f32"},
        {"name": "scale", "arg": "Scale", "buffer": {"type": "read-only-storage"}, "elementType": "f32"},
        {"name": "y", "arg": "Y", "buffer": {"type": "storage"}, "elementType": "f32"},
        {"name": "inv", "arg": "InvStdDev", "buffer": {"type": "storage"}, "elementType": "f32"},
        {"name": "params", "semantic": "kernel.params", "buffer": {"type": "uniform"}, "struct": {"name": "Params", "fields": [
            {"name": "rows", "type": "u32", "value": "shapes.X[0]"}, {"name": "cols", "type": "u32", "value": "shapes.X[1]"},
            {"name": "eps", "type": "f32", "value": "attrs.epsilon"}]}}],
        "dispatch": {"threads": "shapes.X[0]"}}]}],
}  # fmt: skip
_LAYER_NORM_TEMPLATE = """{{ declarations }}
@compute @workgroup_size({{ workgroupSize }})
fn {{ entryPoint }}({{ entryParams }}) {
  let r = {{ globalIndex }};
  if (r >= params.rows) { return; }
  var s = 0.0;
  for (var c = 0u; c < params.cols; c++) { s += x[r * params.cols + c]; }
  let m = s / f32(params.cols);
  var v = 0.0;
  for (var c = 0u; c < params.cols; c++) { let d = x[r * params.cols + c] - m; v += d * d; }
  let iv = 1.0 / sqrt(v / f32(params.cols) + params.eps);
  inv[r] = iv;
  for (var c = 0u; c < params.cols; c++) { y[r * params.cols + c] = (x[r * params.cols + c] - m) * iv * scale[c]; }
}
"""


@pytest.mark.skipif(not HAS_ORT, reason="onnxruntime not installed")
def test_run_compares_with_onnxruntime_by_position(write_package, runner: CliRunner) -> None:
    """ONNX reads a node's inputs and outputs by position. A LayerNormalization that leaves out its
    optional Mean: InvStdDev had been compared with ORT's Mean (WRONG, exit 1); and inputs given as
    `-i Scale=... -i X=...` had built the node as (Scale, X) (helper-10's review)."""
    root = write_package(_LAYER_NORM_MANIFEST, {"ln.wgsl.jinja": _LAYER_NORM_TEMPLATE})
    for order in (["-i", "X=4x16:f32", "-i", "Scale=16:f32"], ["-i", "Scale=16:f32", "-i", "X=4x16:f32"]):
        result = runner.invoke(main, ["run", str(root), *order, "--json"])
        assert result.exit_code == 0, result.output
        compared = json.loads(result.stdout)["reference"]["onnxruntime"]
        assert set(compared) == {"Y", "InvStdDev"} and all(c["ok"] for c in compared.values()), compared


@pytest.mark.skipif(not HAS_ORT, reason="onnxruntime not installed")
def test_run_places_onnxruntimes_inputs_and_outputs_by_their_formal_names(write_package, runner: CliRunner) -> None:
    """A manifest listing the op's own names in another order than ONNX's had them compared by its
    order: ORT's Mean against the kernel's InvStdDev, all WRONG on a correct kernel (helper-21). The
    roles are LayerNormalization's formal names, so each goes to its place; with a name that is
    not one, the manifest's order holds and `run` says so."""
    manifest = json.loads(json.dumps(_LAYER_NORM_MANIFEST))
    manifest["inputs"].reverse()  # Scale, X
    y, mean, inv = manifest["outputs"]
    manifest["outputs"] = [y, inv, mean]
    root = write_package(manifest, {"ln.wgsl.jinja": _LAYER_NORM_TEMPLATE})
    data = invoke_json(runner, "run", str(root), "-i", "X=4x16:f32", "-i", "Scale=16:f32")
    assert data["onnxruntimeMatchedBy"] == "name" and data["ok"], data
    assert set(data["reference"]["onnxruntime"]) == {"Y", "InvStdDev"}
    manifest = json.loads(json.dumps(_LAYER_NORM_MANIFEST))
    manifest["inputs"][1]["role"] = "Gamma"
    manifest["variants"][0]["passes"][0]["bindings"][1]["arg"] = "Gamma"
    root = write_package(manifest, {"ln.wgsl.jinja": _LAYER_NORM_TEMPLATE})
    out = invoke(runner, "run", str(root), "-i", "X=4x16:f32", "-i", "Gamma=16:f32").stdout
    assert "matched to the manifest's by position: its roles are not all the op's formal names" in " ".join(out.split())


@pytest.mark.skipif(not HAS_ORT, reason="onnxruntime not installed")
def test_run_says_why_onnxruntime_refused_the_call(write_package, runner: CliRunner) -> None:
    """An attribute of another type than the op declares (epsilon written 1, an int) makes ORT refuse
    the model; `run` had said "onnxruntime has no CPU kernel" for every ORT error (helper-11)."""
    root = write_package(_LAYER_NORM_MANIFEST, {"ln.wgsl.jinja": _LAYER_NORM_TEMPLATE})
    result = runner.invoke(main, ["run", str(root), "-i", "X=4x16:f32", "-i", "Scale=16:f32", "--attr", "epsilon=1",
                                  "--json"])  # fmt: skip
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["reference"]["onnxruntime"] is None
    assert data["referenceUnavailable"]["onnxruntime"].startswith("onnxruntime refused this call: ")
    assert "epsilon" in data["referenceUnavailable"]["onnxruntime"], data["referenceUnavailable"]
    out = runner.invoke(main, ["run", str(root), "-i", "X=4x16:f32", "-i", "Scale=16:f32", "--attr", "epsilon=1"]).stdout
    assert "ONNX Runtime CPU: not available (onnxruntime refused this call: " in " ".join(out.split())


_SOFTMAX_11_MANIFEST = {
    "domain": "ai.onnx", "name": "Softmax", "sinceVersion": 11,
    "inputs": [{"role": "input", "dtype": "T"}],
    "outputs": [{"role": "output", "dtype": "T", "rank": "ranks.input", "shape": "shapes.input"}],
    "attributes": {"axis": 1},
    "typeConstraints": {"T": ["float32"]},
    "derive": {"a": "attrs.axis % ranks.input"},
    "variants": [{"id": "main", "passes": [{"id": "main", "shader": "sm.wgsl.jinja", "bindings": [
        {"name": "x", "arg": "input", "buffer": {"type": "read-only-storage"}, "elementType": "f32"},
        {"name": "y", "arg": "output", "buffer": {"type": "storage"}, "elementType": "f32"},
        {"name": "params", "semantic": "kernel.params", "buffer": {"type": "uniform"}, "struct": {"name": "Params", "fields": [
            {"name": "rows", "type": "u32", "value": "numel(shapes.input[:a])"},
            {"name": "cols", "type": "u32", "value": "numel(shapes.input[a:])"}]}}],
        "dispatch": {"threads": "numel(shapes.input[:a])"}}]}],
}  # fmt: skip
_SOFTMAX_11_TEMPLATE = """{{ declarations }}
@compute @workgroup_size({{ workgroupSize }})
fn {{ entryPoint }}({{ entryParams }}) {
  let r = {{ globalIndex }};
  if (r >= params.rows) { return; }
  var m = x[r * params.cols];
  for (var c = 1u; c < params.cols; c++) { m = max(m, x[r * params.cols + c]); }
  var s = 0.0;
  for (var c = 0u; c < params.cols; c++) { s += exp(x[r * params.cols + c] - m); }
  for (var c = 0u; c < params.cols; c++) { y[r * params.cols + c] = exp(x[r * params.cols + c] - m) / s; }
}
"""


@pytest.mark.skipif(not HAS_ORT, reason="onnxruntime not installed")
def test_run_compares_with_the_onnx_version_the_manifest_names(write_package, runner: CliRunner) -> None:
    """The one-node model imported ai.onnx opset 17 whatever the manifest's sinceVersion: a correct
    Softmax-11 (the input coerced to 2-D at axis 1) was compared with Softmax-13 (axis 1 alone),
    WRONG and exit 1 (helper-37)."""
    root = write_package(_SOFTMAX_11_MANIFEST, {"sm.wgsl.jinja": _SOFTMAX_11_TEMPLATE})
    result = runner.invoke(main, ["run", str(root), "-i", "input=2x3x4:f32", "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["checked"] and data["ok"], data["reference"]
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4) / 10
    flat = np.exp(x.reshape(2, 12) - x.reshape(2, 12).max(1, keepdims=True))
    v11 = references.onnxruntime_reference("ai.onnx.Softmax", {"input": x}, {"axis": 1}, opset=11,
                                              output_names=["output"])["output"]  # fmt: skip
    np.testing.assert_allclose(v11, (flat / flat.sum(1, keepdims=True)).reshape(2, 3, 4), rtol=1e-6)
    v13 = references.onnxruntime_reference("ai.onnx.Softmax", {"input": x}, {"axis": 1},
                                              output_names=["output"])["output"]  # fmt: skip
    np.testing.assert_allclose(v13.sum(1), np.ones((2, 4)), rtol=1e-6)  # without an opset: AI_ONNX_OPSET's


@pytest.mark.skipif(not HAS_ORT, reason="onnxruntime not installed")
def test_run_marks_an_output_shape_onnx_infers_otherwise_wrong(write_package, runner: CliRunner) -> None:
    """The guard that keeps ORT from a model sized otherwise turned a kernel's wrong output shape into
    "not available", exit 0 (helper-18): ORT is the only reference a package's own op has."""
    manifest = json.loads(json.dumps(_LAYER_NORM_MANIFEST))
    manifest["outputs"][0].update(rank=3, shape="[shapes.X[0], shapes.X[1], 1]")  # the elements of X, not its shape
    root = write_package(manifest, {"ln.wgsl.jinja": _LAYER_NORM_TEMPLATE})
    result = runner.invoke(main, ["run", str(root), "-i", "X=4x16:f32", "-i", "Scale=16:f32", "--json"])
    assert result.exit_code == 1, result.output
    data = json.loads(result.stdout)
    assert data["reference"]["onnxruntime"] == {"Y": {"shapeMismatch": [[4, 16, 1], [4, 16]], "ok": False}}
    assert data["ok"] is False and "onnxruntime" not in data["referenceUnavailable"]


def test_compare_and_summarize() -> None:
    got = np.array([1.0, np.nan, np.inf, 2.0, 0.0], np.float32)
    want = np.array([1.5, np.nan, np.inf, np.nan, 0.0])
    c = compare(got, want)
    assert c["maxAbsError"] == 0.5 and c["maxRelError"] == pytest.approx(0.5 / 1.5) and c["nonFiniteMismatches"] == 1
    assert compare(np.zeros(2), np.zeros(3))["shapeMismatch"] == [[2], [3]]
    # 1e-4 + 1e-5 |reference| for float32: 3e-4 off is beyond it at 1, within it at 1000
    near = compare(np.array([1.0003, 1000.0003], np.float32), np.array([1.0, 1000.0]))
    assert near["beyondTolerance"] == 1 and near["tolerance"] == {"absolute": 1e-4, "relative": 1e-5}
    assert compare(np.array([1.02, 1000.5], np.float16), np.array([1.0, 1000.0]))["beyondTolerance"] == 1
    # integers have no relative part: an index of 50000 off by 40 is wrong (helper-22)
    indices = compare(np.array([1000, 50000], np.int64), np.array([1000, 50040]))
    assert indices["beyondTolerance"] == 1 and indices["tolerance"]["relative"] == 0.0
    s = summarize(got)
    assert s["nanCount"] == 1 and s["min"] == 0.0 and s["max"] == np.inf and s["shape"] == [5]


@pytest.mark.parametrize("command", ["info", "test"])
def test_a_mistyped_folder_that_reads_as_a_hub_repository_says_so(runner, tmp_path, monkeypatch, command) -> None:
    """`tests/demo.Gathr` (no such folder; `tests` is one) got only the trust refusal, whose advice,
    --trust-remote-code, fetches `tests/demo.Gathr` from the Hub."""
    (tmp_path / "tests").mkdir()
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(main, [command, "tests/demo.Gathr"])
    assert result.exit_code == 2, result.output
    text = " ".join(result.output.split())
    assert "refusing to load 'tests/demo.Gathr'" in text
    assert "there is no folder 'tests/demo.Gathr' here (a folder 'tests' is)" in text and "./tests/demo.Gathr" in text
    plain = runner.invoke(main, [command, "someorg/demo.Gathr"])  # no folder of that name: no note
    assert plain.exit_code == 2 and "no folder" not in plain.output
    pinned = " ".join(runner.invoke(main, [command, "tests/demo.Gathr@v2"]).output.split())
    assert "write ./tests/demo.Gathr " in pinned + " " and "@v2 here" not in pinned  # a ./ path takes no pin
    # three parts are no repository id (one slash): a missing folder, trusted or not, exit 2 in `test` as in `info`
    deep = runner.invoke(main, ["--trust-remote-code", command, "tests/packages/demo.Gathr"])
    assert deep.exit_code == 2 and "tests/packages/demo.Gathr: not a folder" in deep.output, deep.output


def test_run_fails_an_output_beyond_benchs_tolerance(runner: CliRunner, tmp_path) -> None:
    """A package copy whose scalar path computes 2 x QuickGelu printed its error (max rel 1.0) and
    exited 0; `run` now marks it WRONG, as bench does, and exits 1. The right one exits 0."""
    from webgpu_kernels.digests import write_metadata

    from conftest import copy_package

    package = copy_package(QUICK_GELU, tmp_path / "qg")
    template = package / "quick-gelu.wgsl.jinja"
    text = template.read_text("utf-8")
    assert "return v / (1.0 + exp(-ALPHA * v));" in text
    template.write_text(text.replace("return v / (1.0 + exp(-ALPHA * v));", "return 2.0 * v / (1.0 + exp(-ALPHA * v));"),
                        encoding="utf-8")  # fmt: skip
    write_metadata(package)
    wrong = runner.invoke(main, ["run", str(package), "-i", "X=8:f32", "--variant", "scalar"])
    assert wrong.exit_code == 1 and "elements beyond 0.0001 + 1e-05 x |reference|: WRONG" in " ".join(wrong.output.split())
    data = json.loads(runner.invoke(main, ["run", str(package), "-i", "X=8:f32", "--variant", "scalar", "--json"]).stdout)
    assert data["ok"] is False and data["reference"]["numpy"]["Y"]["ok"] is False
    right = runner.invoke(main, ["run", str(package), "-i", "X=8:f32", "--variant", "vec4_tail", "--json"])
    assert right.exit_code == 0 and json.loads(right.stdout)["ok"] is True


@pytest.mark.parametrize("args", [["--trust-remote-code", "info", "nodir/x/pkg"], ["info", "nodir/x/pkg"]])
def test_a_missing_path_of_three_parts_is_a_missing_folder_not_a_hub_repository(runner: CliRunner, args) -> None:
    """A repository id has one slash: `nodir/x/pkg` with --trust-remote-code got "version= and
    revision= apply to Hub repositories", without it the Python trust advice (helper-14)."""
    result = runner.invoke(main, args)
    assert result.exit_code == 2, result.output
    assert "nodir/x/pkg: not a folder" in result.output and "version=" not in result.output


@pytest.mark.parametrize(("command", "option"), [("bench", "--warm-up"), ("tune", "--warm-up"), ("test", "--timeout"),
                                                 ("validate", "--timeout")])  # fmt: skip
@pytest.mark.parametrize("value", ["nan", "inf"])
def test_a_seconds_option_refuses_nan_and_infinity(runner: CliRunner, command, option, value) -> None:
    """click's FloatRange passes NaN (every comparison is false) and infinity: `--warm-up inf` warmed up
    for ever, `--timeout nan` meant no timeout (helper-14)."""
    result = runner.invoke(main, [command, QUICK_GELU, option, value])
    assert result.exit_code == 2, result.output
    assert f"Invalid value for '{option}'" in result.output and "not a finite number" in result.output


@pytest.mark.parametrize("command", ["bench", "tune"])
def test_an_unknown_dtype_filter_is_named(runner: CliRunner, command) -> None:
    """`--dtype fp16` matched no case and the error blamed --case/--tag/--dtype together (helper-14)."""
    result = runner.invoke(main, [command, QUICK_GELU, "--dtype", "fp16"])
    assert result.exit_code == 2, result.output
    assert "unknown dtype 'fp16'" in result.output and "f16" in result.output


def test_summarize_of_both_infinities_warns_nothing() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a RuntimeWarning leaked to run's stderr (helper-14)
        stats = summarize(np.array([np.inf, -np.inf, 1.0], np.float32))
    assert stats["min"] == -np.inf and stats["max"] == np.inf and math.isnan(stats["mean"])


def test_a_reader_that_stops_early_leaves_the_commands_own_exit_status() -> None:
    """`test PKG | head -1`: rich exited 1 on the broken pipe, which says "a case failed", so a
    passing command failed a CI step run with pipefail (helper-35). The rest is dropped now and the
    command goes on to its own verdict."""
    from webgpu_kernels.cli import _PackageTextConsole

    read_end, write_end = os.pipe()
    os.close(read_end)  # as head does after its line
    with os.fdopen(write_end, "w") as stream:
        console = _PackageTextConsole(file=stream, width=80)
        console.print("a line nobody reads")  # rich raised SystemExit(1) here
        console.print("and the next one")
        assert console.quiet


@pytest.mark.parametrize("columns", ["80", "60"])
def test_the_test_table_keeps_every_column_on_a_narrow_terminal(runner: CliRunner, columns) -> None:
    """At 80 columns the table's right edge was cropped, its result column first ("pas"), since
    rich cannot narrow a no-wrap column (helper-35); its columns now fold."""
    from conftest import PACKAGES_DIR

    result = runner.invoke(main, ["test", str(PACKAGES_DIR / "demo.Softmax"), "--case", "rank3-3x5x100-wg64-f32"],
                           env={"COLUMNS": columns})  # fmt: skip
    assert result.exit_code == 0, result.output
    table = [line for line in result.stdout.splitlines() if line.startswith(("│", "┃"))]
    assert table and all(len(line) <= int(columns) and line.endswith(("│", "┃")) for line in table), result.stdout
    assert any(line.rstrip("│ ").endswith("pass") for line in table), result.stdout


@pytest.mark.parametrize("command", [["info", "com.microsoft.QuickGelu", "--json"],
                                     ["render", "com.microsoft.QuickGelu", "-i", "X=8:f32"]])
def test_a_reader_that_stops_early_leaves_the_status_of_click_echos_output(command: list[str]) -> None:
    """`test --json | head -1`, `render ... | head`: click.echo met the closed pipe and click exited 1,
    "a case failed", the status 34cb5c0 had fixed for the console's text only (helper-38)."""
    import subprocess
    import sys

    read_end, write_end = os.pipe()
    os.close(read_end)  # a reader that has stopped already: the first write meets the closed pipe
    try:
        proc = subprocess.run([sys.executable, "-m", "webgpu_kernels", *command], stdout=write_end,
                              stderr=subprocess.PIPE, text=True, timeout=120)  # fmt: skip
    finally:
        os.close(write_end)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
