"""What the command-line tests share: the seed kernels' ids and -i options, HAS_ORT, and invoke/assert_error."""

from __future__ import annotations

import json

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
