"""What the command-line tests share: the seed kernels' ids and -i options, HAS_ORT, invoke/assert_error,
and a machine without any adapter (without_any_adapter)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from webgpu_kernels.cli import main

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


# A LayerNormalization package of one pass, Mean left out, which onnxruntime checks (run's and bench's tests).
LAYER_NORM_MANIFEST = {
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
LAYER_NORM_TEMPLATE = """{{ declarations }}
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


#: The command line in a fresh process, as a user runs it.
CLI = [sys.executable, "-m", "webgpu_kernels"]


def without_any_adapter(tmp_path: Path) -> tuple[dict[str, str], subprocess.CompletedProcess[str]]:
    """The environment of a machine with no WebGPU adapter (no Vulkan driver, no EGL vendor: a CI
    machine without Mesa), for commands run in fresh processes (the drivers are read once per
    process), and what `devices` printed there. Skips the test where an adapter is still listed."""
    from webgpu_kernels.device import NO_ADAPTER

    nowhere = str(tmp_path / "none.json")
    env = {**os.environ, "VK_ICD_FILENAMES": nowhere, "VK_DRIVER_FILES": nowhere,
           "__EGL_VENDOR_LIBRARY_FILENAMES": nowhere, "WEBGPU_KERNELS_ADAPTER": ""}  # fmt: skip
    devices = subprocess.run([*CLI, "devices"], env=env, capture_output=True, text=True, timeout=120)
    if NO_ADAPTER not in devices.stdout:
        pytest.skip("an adapter is still listed with the drivers hidden (another backend on this machine)")
    return env, devices
