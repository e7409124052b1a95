"""cli_run.py: `run` (its outputs, references, verdict and timing) and its compare/summarize, on real shaders."""

from __future__ import annotations

import json
import math
import shutil
import warnings

import numpy as np
import pytest
from click.testing import CliRunner

import webgpu_kernels as wk
from webgpu_kernels import references
from webgpu_kernels.cli import main
from webgpu_kernels.cli_run import summarize
from webgpu_kernels.comparison import reference_report as compare
from webgpu_kernels.kernel_arguments import InputSpec

from cli_helpers import (
    BA_F16_VEC4,
    BA_F32,
    BIAS_ADD,
    HAS_ORT,
    LAYER_NORM_MANIFEST,
    LAYER_NORM_TEMPLATE,
    QG_F32,
    QUICK_GELU,
    assert_error,
    invoke,
    invoke_json,
)


def test_run_quick_gelu_text(runner: CliRunner) -> None:
    out = invoke(runner, "run", QUICK_GELU, *QG_F32, "--repeat", "2").stdout
    assert "variant: vec4_tail (selected)" in out
    assert "[3, 5]" in out and "float32" in out
    assert "host wall clock" in out and "not GPU kernel time" in out
    assert "first call:" in out and "median of 2 more calls:" in out
    assert "error vs NumPy float64 reference (Y): max abs" in out
    if HAS_ORT:
        assert "error vs ONNX Runtime CPU (Y): max abs" in out


def test_run_names_where_the_kernel_came_from(runner: CliRunner, tmp_path) -> None:
    """An embedded kernel is named so, a package folder by its path (a Hub kernel: test_hub.py)."""
    out = invoke(runner, "run", QUICK_GELU, *QG_F32, "--repeat", "0").stdout
    assert "kernel: embedded" in out.splitlines(), out
    embedded = wk.get_kernel(QUICK_GELU).package.root
    assert invoke_json(runner, "run", QUICK_GELU, *QG_F32, "--repeat", "0")["source"] == {
        "origin": "embedded", "path": str(embedded)}
    folder = tmp_path / "copy"
    shutil.copytree(embedded, folder)
    out = invoke(runner, "run", str(folder), *QG_F32, "--repeat", "0").stdout
    assert f"kernel: local package {folder}" in out.splitlines(), out
    data = invoke_json(runner, "run", str(folder), *QG_F32, "--repeat", "0")
    assert data["source"] == {"origin": "local", "path": str(folder)} and data["ok"] and data["checked"]


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
    no verdict and its JSON said "ok": true, which a CI gate read as checked."""
    from conftest import PACKAGES_DIR

    package = str(PACKAGES_DIR / "demo.ScaleShift")
    data = invoke_json(runner, "run", package, "-i", "X=4x8:f32")
    assert data["ok"] is True and data["checked"] is False and data["reference"] == {"numpy": None, "onnxruntime": None}
    out = invoke(runner, "run", package, "-i", "X=4x8:f32").stdout
    assert "not checked: no reference compared the outputs" in out
    # each reference says why it compared nothing, in the JSON as in the text (the JSON had named
    # onnxruntime alone, though no NumPy reference is registered for the op either)
    assert set(data["referenceUnavailable"]) == {"numpy", "onnxruntime"}
    assert data["referenceUnavailable"]["numpy"].startswith("none registered for demo.ScaleShift")
    assert f"NumPy float64 reference: not available ({data['referenceUnavailable']['numpy']})" in " ".join(out.split())


def test_run_bias_add(runner: CliRunner, has_f16: bool) -> None:
    data = invoke_json(runner, "run", BIAS_ADD, *BA_F32, "--repeat", "1")
    assert data["variant"] == "scalar"
    assert data["outputs"]["Y"]["shape"] == [2, 5, 6]
    assert data["reference"]["numpy"]["Y"]["maxAbsError"] < 1e-5
    assert data["reference"]["onnxruntime"] is None  # ORT has no CPU BiasAdd
    assert data["ok"] is True and data["checked"] is True  # by the NumPy reference
    assert "numpy" not in data["referenceUnavailable"]
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


def test_run_holds_large_outputs_to_a_relative_tolerance(runner: CliRunner) -> None:
    """The absolute tolerance alone (1e-4 float32) marked a correct output WRONG wherever it is large:
    float32 holds 3000 to 2.4e-4 (a LayerNorm's mean of 1000, 5e-7 off relative, was WRONG)."""
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


@pytest.mark.parametrize("command", ["run", "bench"])
def test_a_device_limit_refusal_advises_the_other_adapter_as_the_command_line_chooses_it(runner, monkeypatch, command):
    """The advice had been Python's, `or run it with adapter='metal' (...)`, which a command line does
    not take: there it is the --adapter option. The Python call's words stay (test_execution.py)."""
    import dataclasses

    from webgpu_kernels import device as device_module

    device = wk.get_device()  # opened on this machine's adapter before a larger one is listed
    real = device_module.list_adapters()
    big = dataclasses.replace(real[0], index=len(real), name="Big GPU", backend="Metal", adapter_type="DiscreteGPU",
                              limits={**real[0].limits, "max-buffer-size": 2**40,
                                      "max-storage-buffer-binding-size": 2**40})  # fmt: skip
    monkeypatch.setattr(device_module, "list_adapters", lambda: [*real, big])
    elements = min(device.limits["max-storage-buffer-binding-size"], device.limits["max-buffer-size"]) // 4 + 4
    extra = ["--repeat", "0"] if command == "run" else ["--warm-up", "0", "--no-host"]
    result = runner.invoke(main, [command, QUICK_GELU, "-i", f"X={elements}:f32", *extra])
    assert_error(result, f"or run it with --adapter metal (Big GPU (Metal, DiscreteGPU) binds up to {2**40} bytes)",
                 "make at least 2 calls on smaller pieces")  # fmt: skip
    assert "adapter=" not in result.stderr, result.stderr


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


# --- onnxruntime --------------------------------------------------------------------------------------


@pytest.mark.skipif(not HAS_ORT, reason="onnxruntime not installed")
def test_run_compares_with_onnxruntime_by_position(write_package, runner: CliRunner) -> None:
    """ONNX reads a node's inputs and outputs by position. A LayerNormalization that leaves out its
    optional Mean: InvStdDev had been compared with ORT's Mean (WRONG, exit 1); and inputs given as
    `-i Scale=... -i X=...` had built the node as (Scale, X) (a review)."""
    root = write_package(LAYER_NORM_MANIFEST, {"ln.wgsl.jinja": LAYER_NORM_TEMPLATE})
    for order in (["-i", "X=4x16:f32", "-i", "Scale=16:f32"], ["-i", "Scale=16:f32", "-i", "X=4x16:f32"]):
        result = runner.invoke(main, ["run", str(root), *order, "--json"])
        assert result.exit_code == 0, result.output
        compared = json.loads(result.stdout)["reference"]["onnxruntime"]
        assert set(compared) == {"Y", "InvStdDev"} and all(c["ok"] for c in compared.values()), compared


@pytest.mark.skipif(not HAS_ORT, reason="onnxruntime not installed")
def test_run_places_onnxruntimes_inputs_and_outputs_by_their_formal_names(write_package, runner: CliRunner) -> None:
    """A manifest listing the op's own names in another order than ONNX's had them compared by its
    order: ORT's Mean against the kernel's InvStdDev, all WRONG on a correct kernel. The
    roles are LayerNormalization's formal names, so each goes to its place; with a name that is
    not one, the manifest's order holds and `run` says so."""
    manifest = json.loads(json.dumps(LAYER_NORM_MANIFEST))
    manifest["inputs"].reverse()  # Scale, X
    y, mean, inv = manifest["outputs"]
    manifest["outputs"] = [y, inv, mean]
    root = write_package(manifest, {"ln.wgsl.jinja": LAYER_NORM_TEMPLATE})
    data = invoke_json(runner, "run", str(root), "-i", "X=4x16:f32", "-i", "Scale=16:f32")
    assert data["onnxruntimeMatchedBy"] == "name" and data["ok"], data
    assert set(data["reference"]["onnxruntime"]) == {"Y", "InvStdDev"}
    manifest = json.loads(json.dumps(LAYER_NORM_MANIFEST))
    manifest["inputs"][1]["role"] = "Gamma"
    manifest["variants"][0]["passes"][0]["bindings"][1]["arg"] = "Gamma"
    root = write_package(manifest, {"ln.wgsl.jinja": LAYER_NORM_TEMPLATE})
    out = invoke(runner, "run", str(root), "-i", "X=4x16:f32", "-i", "Gamma=16:f32").stdout
    assert "matched to the manifest's by position: its roles are not all the op's formal names" in " ".join(out.split())


@pytest.mark.skipif(not HAS_ORT, reason="onnxruntime not installed")
def test_run_onnx_op_compares_a_package_with_the_onnx_op_it_mirrors(runner: CliRunner) -> None:
    """com.example.SkipLayerNormalization mirrors com.microsoft.SkipLayerNormalization under an id
    of its own: run had said "onnxruntime does not know this op" and compared nothing.
    --onnx-op names the op: all four outputs compared, by name."""
    from conftest import PACKAGES_DIR

    package = str(PACKAGES_DIR / "com.example.SkipLayerNormalization")
    shapes = ["-i", "input=2x7x64:f32", "-i", "skip=2x7x64:f32", "-i", "gamma=64:f32", "-i", "bias=64:f32"]
    plain = invoke_json(runner, "run", package, *shapes)
    assert plain["onnxruntimeOp"] == "com.example.SkipLayerNormalization" and not plain["checked"], plain
    assert plain["referenceUnavailable"]["onnxruntime"] == "onnxruntime does not know this op"
    data = invoke_json(runner, "run", package, *shapes, "--onnx-op", "com.microsoft.SkipLayerNormalization")
    assert data["onnxruntimeOp"] == "com.microsoft.SkipLayerNormalization" and data["onnxruntimeMatchedBy"] == "name"
    assert data["checked"] and data["ok"], data
    assert set(data["reference"]["onnxruntime"]) == {"output", "mean", "inv_std_var", "input_skip_bias_sum"}
    text = " ".join(invoke(runner, "run", package, *shapes, "--onnx-op", "com.microsoft.SkipLayerNormalization")
                    .stdout.split())  # fmt: skip
    assert "error vs ONNX Runtime CPU com.microsoft.SkipLayerNormalization (output): max abs" in text
    refused = runner.invoke(main, ["run", package, *shapes, "--onnx-op", "SkipLayerNormalization"])
    assert refused.exit_code == 2 and "expected DOMAIN.NAME" in refused.stderr, refused.output


@pytest.mark.skipif(not HAS_ORT, reason="onnxruntime not installed")
def test_run_does_not_advise_onnx_op_for_a_package_under_an_onnx_ops_id(write_package, runner: CliRunner) -> None:
    """ai.onnx.Gelu at sinceVersion 1 (as `new` writes it): ai.onnx opset 1 has no Gelu, and the line
    saying so was followed by advice to name the ONNX op with --onnx-op, which the package's id
    already is. The advice points at that line instead; a package of an id of its own keeps it."""
    from conftest import PACKAGES_DIR

    source = PACKAGES_DIR / "ai.onnx.Gelu"
    manifest = json.loads((source / "manifest.json").read_text(encoding="utf-8"))
    manifest["sinceVersion"] = 1
    root = write_package(manifest, {"gelu.wgsl.jinja": (source / "gelu.wgsl.jinja").read_text(encoding="utf-8")})
    data = invoke_json(runner, "run", str(root), "-i", "X=4x8:f32")
    assert not data["checked"] and "opset 1 has no Gelu" in data["referenceUnavailable"]["onnxruntime"], data
    text = " ".join(invoke(runner, "run", str(root), "-i", "X=4x8:f32").stdout.split())
    assert "not checked: no reference compared the outputs" in text and "--onnx-op" not in text, text
    assert "ONNX Runtime's line above says why it compared nothing" in text, text
    own = " ".join(invoke(runner, "run", str(PACKAGES_DIR / "demo.ScaleShift"), "-i", "X=4x8:f32").stdout.split())
    assert "or with --onnx-op DOMAIN.NAME against the ONNX op it mirrors" in own, own


@pytest.mark.skipif(not HAS_ORT, reason="onnxruntime not installed")
def test_run_compares_only_the_outputs_onnxruntime_computed(runner: CliRunner, monkeypatch) -> None:
    """onnxruntime 1.18 to 1.29 return None for SkipLayerNormalization's optional mean and inv_std_var
    (its CPU kernel computes them from 1.30): `run` had compared np.asarray(None), shape [], and
    called the package's correct outputs WRONG, exit 1 (the suite at pyproject's lower bounds).
    Those two are not compared; the other two are. Here ORT's session is made to answer as 1.29 did."""
    import onnxruntime as ort

    from conftest import PACKAGES_DIR

    class SessionOf129(ort.InferenceSession):  # type: ignore[misc]
        def run(self, output_names, input_feed, run_options=None):
            results = super().run(output_names, input_feed, run_options)
            return [None if n in ("mean", "inv_std_var") else r for n, r in zip(output_names, results)]

    monkeypatch.setattr(ort, "InferenceSession", SessionOf129)
    package = str(PACKAGES_DIR / "com.example.SkipLayerNormalization")
    shapes = ["-i", "input=2x7x64:f32", "-i", "skip=2x7x64:f32", "-i", "gamma=64:f32", "-i", "bias=64:f32"]
    data = invoke_json(runner, "run", package, *shapes, "--onnx-op", "com.microsoft.SkipLayerNormalization")
    assert data["checked"] and data["ok"], data
    assert set(data["reference"]["onnxruntime"]) == {"output", "input_skip_bias_sum"}
    assert data["referenceUncompared"] == {"onnxruntime": ["mean", "inv_std_var"]}
    said = runner.invoke(main, ["run", package, *shapes, "--onnx-op", "com.microsoft.SkipLayerNormalization"])
    assert said.exit_code == 0, said.output
    assert ("ONNX Runtime CPU com.microsoft.SkipLayerNormalization: computed no value for mean, inv_std_var "
            "(optional outputs its release leaves out): not compared") in " ".join(said.stdout.split())
    arrays = {"input": np.ones((2, 3), np.float32), "skip": np.ones((2, 3), np.float32),
              "gamma": np.ones(3, np.float32)}  # fmt: skip
    got = references.onnxruntime_reference("com.microsoft.SkipLayerNormalization", arrays,
                                           output_names=["output", "mean", "inv_std_var"])  # fmt: skip
    assert set(got) == {"output"} and got["output"].shape == (2, 3)


@pytest.mark.skipif(not HAS_ORT, reason="onnxruntime not installed")
def test_run_says_why_onnxruntime_refused_the_call(write_package, runner: CliRunner) -> None:
    """An attribute of another type than the op declares (epsilon written 1, an int) makes ORT refuse
    the model; `run` had said "onnxruntime has no CPU kernel" for every ORT error."""
    root = write_package(LAYER_NORM_MANIFEST, {"ln.wgsl.jinja": LAYER_NORM_TEMPLATE})
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
    WRONG and exit 1."""
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
    "not available", exit 0: ORT is the only reference a package's own op has."""
    manifest = json.loads(json.dumps(LAYER_NORM_MANIFEST))
    manifest["outputs"][0].update(rank=3, shape="[shapes.X[0], shapes.X[1], 1]")  # the elements of X, not its shape
    root = write_package(manifest, {"ln.wgsl.jinja": LAYER_NORM_TEMPLATE})
    result = runner.invoke(main, ["run", str(root), "-i", "X=4x16:f32", "-i", "Scale=16:f32", "--json"])
    assert result.exit_code == 1, result.output
    data = json.loads(result.stdout)
    assert data["reference"]["onnxruntime"] == {"Y": {"shapeMismatch": [[4, 16, 1], [4, 16]], "ok": False}}
    assert data["ok"] is False and "onnxruntime" not in data["referenceUnavailable"]


# --- compare, summarize -------------------------------------------------------------------------------


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
    # integers have no relative part: an index of 50000 off by 40 is wrong
    indices = compare(np.array([1000, 50000], np.int64), np.array([1000, 50040]))
    assert indices["beyondTolerance"] == 1 and indices["tolerance"]["relative"] == 0.0
    s = summarize(got)
    assert s["nanCount"] == 1 and s["min"] == 0.0 and s["max"] == np.inf and s["shape"] == [5]


def test_summarize_of_both_infinities_warns_nothing() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a RuntimeWarning leaked to run's stderr
        stats = summarize(np.array([np.inf, -np.inf, 1.0], np.float32))
    assert stats["min"] == -np.inf and stats["max"] == np.inf and math.isnan(stats["mean"])


def test_run_explain_and_render_take_output_names(runner: CliRunner) -> None:
    """--output NAME (repeatable) is the call's outputs=: run reports and compares only those, explain
    and render show the variant that skips the optional outputs left out; an unknown name exits 2."""
    from conftest import PACKAGES_DIR

    ln = str(PACKAGES_DIR / "ai.onnx.LayerNormalization")
    args = ["-i", "X=4x300:f32", "-i", "Scale=300:f32"]
    data = json.loads(invoke(runner, "run", ln, *args, "--output", "Y", "--repeat", "1", "--json").stdout)
    assert data["variant"] == "workgroup_nostats_nobias" and data["asked"] == ["Y"]
    assert list(data["outputs"]) == ["Y"] and data["ok"]
    # repeats are one name, and "asked" keeps the manifest's order, as explain's does
    asking = ["--output", "Mean", "--output", "Y", "--output", "Mean"]
    data = json.loads(invoke(runner, "run", ln, *args, *asking, "--repeat", "1", "--json").stdout)
    assert data["variant"] == "workgroup_nobias" and list(data["outputs"]) == ["Y", "Mean"] and data["ok"]
    assert data["asked"] == ["Y", "Mean"]
    explained = json.loads(invoke(runner, "explain", ln, *args, "--output", "Y", "--json").stdout)
    assert explained["chosen"] == "workgroup_nostats_nobias" and explained["asked"] == ["Y"]
    assert "not asked for" in invoke(runner, "explain", ln, *args, "--output", "Y").stdout
    assert "read_write> mean" not in invoke(runner, "render", ln, *args, "--output", "Y").stdout
    assert "read_write> mean" in invoke(runner, "render", ln, *args).stdout
    result = runner.invoke(main, ["explain", ln, *args, "--output", "Mena"])
    assert result.exit_code == 2 and "argument 'outputs'" in result.output and "'Mean'" in result.output, result.output


def test_run_names_the_outputs_it_did_not_compare(runner: CliRunner) -> None:
    """run compared what the call returned and said nothing of the outputs it did not: one line
    (and the JSON's `notCompared`) names each and why, not asked for (--output) or not produced by
    the variant that ran (a kernel author's report)."""
    from conftest import PACKAGES_DIR

    ln = str(PACKAGES_DIR / "ai.onnx.LayerNormalization")
    args = ["-i", "X=4x300:f32", "-i", "Scale=300:f32", "--repeat", "0"]
    data = invoke_json(runner, "run", ln, *args, "--output", "Y")
    assert data["notCompared"] == {"Mean": "not asked for (--output)", "InvStdDev": "not asked for (--output)"}
    if HAS_ORT:  # what it returned it compared, and Y agrees with onnxruntime's
        assert list(data["reference"]["onnxruntime"]) == ["Y"] and data["ok"], data["reference"]
    text = invoke(runner, "run", ln, *args, "--output", "Y").stdout
    assert "not compared: Mean, InvStdDev: not asked for (--output)" in text, text
    forced = ["--variant", "workgroup_nostats_nobias"]
    data = invoke_json(runner, "run", ln, *args, *forced)
    why = "not produced by variant workgroup_nostats_nobias"
    assert data["notCompared"] == {"Mean": why, "InvStdDev": why} and list(data["outputs"]) == ["Y"]
    assert f"not compared: Mean, InvStdDev: {why}" in invoke(runner, "run", ln, *args, *forced).stdout
    every = invoke_json(runner, "run", ln, *args)  # all three returned: nothing to say
    assert every["notCompared"] == {} and list(every["outputs"]) == ["Y", "Mean", "InvStdDev"]
    assert "not compared:" not in invoke(runner, "run", ln, *args).stdout


@pytest.mark.skipif(not HAS_ORT, reason="onnxruntime not installed")
def test_run_output_of_an_optional_output_alone_is_compared_with_onnxruntime(runner: CliRunner) -> None:
    """--output Mean left Y, an output no ONNX node may leave out, unnamed in the reference's node:
    onnxruntime refused the model ("output 0 is marked single but has an empty string") and nothing
    was checked. The node names every required output; only the returned ones are compared."""
    from conftest import PACKAGES_DIR

    ln = str(PACKAGES_DIR / "ai.onnx.LayerNormalization")
    args = ["-i", "X=4x64:f32", "-i", "Scale=64:f32", "--repeat", "0"]
    data = invoke_json(runner, "run", ln, *args, "--output", "Mean")
    assert "onnxruntime" not in data["referenceUnavailable"], data["referenceUnavailable"]
    assert list(data["outputs"]) == ["Mean"] and list(data["reference"]["onnxruntime"]) == ["Mean"]
    assert data["checked"] and data["ok"], data["reference"]
    assert data["notCompared"] == {"Y": "not asked for (--output)", "InvStdDev": "not asked for (--output)"}


@pytest.mark.skipif(not HAS_ORT, reason="onnxruntime not installed")
def test_run_says_the_reference_computed_another_shape_and_which_random_input_may_decide_it(
        runner: CliRunner) -> None:  # fmt: skip
    """ReduceMean with a random int64 `axes` printed `ONNX Runtime CPU: reduced shape [1, 1, 1] !=
    ONNX Runtime CPU's [1, 77, 1]: WRONG`: the reference's name twice, and the kernel blamed for a
    shape that the random axes decided (ONNX Runtime reads their values; the kernel refuses no call
    of rank(data) axes and writes NaN where they are not every axis once)."""
    from conftest import PACKAGES_DIR

    rm = str(PACKAGES_DIR / "ai.onnx.ReduceMean")
    args = ["-i", "data=1x77x8:f32", "-i", "axes=3:int64", "--repeat", "0"]
    data = json.loads(invoke(runner, "run", rm, *args, "--json", code=1).stdout)
    [[kernel_shape, ort_shape]] = [c["shapeMismatch"] for c in data["reference"]["onnxruntime"].values()]
    # seed 0's standard normal axes round to a list that is not every axis once: ONNX Runtime keeps 77
    assert kernel_shape == [1, 1, 1] and ort_shape != kernel_shape and data["outputs"]["reduced"]["nanCount"] == 1
    text = " ".join(invoke(runner, "run", rm, *args, code=1).stdout.split())
    assert (f"reduced: shape [1, 1, 1], ONNX Runtime CPU's {ort_shape}: the reference computed another shape "
            "for these inputs") in text, text  # fmt: skip
    assert "WRONG" not in text and "CPU: reduced" not in text
    assert ("axes (int64) holds random values (standard normal, rounded): they may decide the reference's shape; "
            "fix them with --generate axes=normal:VALUE:0 (every value VALUE) or axes=uniform:LOW:HIGH") in text, text
    # the hint holds: axes pinned to 1 (repeated, which ONNX Runtime reads as axis 1 once) give its shape for that
    pinned = json.loads(invoke(runner, "run", rm, *args, "--generate", "axes=normal:1:0", "--json", code=1).stdout)
    assert [c["shapeMismatch"] for c in pinned["reference"]["onnxruntime"].values()] == [[[1, 1, 1], [1, 1, 8]]]
