"""examples/ runs: the CLIP MLP block example, at batch 1, within its own tolerance of a float64
NumPy reference (the example computes the reference; this test checks the example's figures are
real: the shape, the dtype and an error that is neither NaN nor above the tolerance)."""

from __future__ import annotations

import importlib.util
import math
import sys
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def load_example(name: str) -> ModuleType:
    """An example script as a module, imported by path (examples/ is no package)."""
    spec = importlib.util.spec_from_file_location(f"example_{name}", EXAMPLES / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses and pickling look modules up by name
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(
    ("dtype", "input_dtype"),
    [("float32", "float32"), ("float16", "float16"), ("float16", "float32")],
    ids=["f32", "f16", "f16-from-f32"],
)
def test_clip_mlp_example(dtype: str, input_dtype: str, need_dtype, capsys: pytest.CaptureFixture[str]) -> None:
    """float16 from float32: X goes up in float32 and the block converts it with astype on the GPU."""
    need_dtype(dtype)
    clip_mlp = load_example("clip_mlp")
    result = clip_mlp.main(["--batch", "1", "--dtype", dtype, "--input-dtype", input_dtype, "--repeat", "1"])
    assert result["shape"] == (1, 77, 768) and result["dtype"] == dtype and result["input_dtype"] == input_dtype
    assert math.isfinite(result["max_error"]) and result["max_error"] <= clip_mlp.TOLERANCE[dtype]
    assert result["ok"] and len(result["seconds"]) == 1
    out = capsys.readouterr().out
    assert "max |Y - float64 reference|" in out and ": ok" in out and "host wall clock" in out
    assert ("converted to float16 on the GPU" in out) == (input_dtype != dtype)


def test_clip_mlp_reference_is_the_block() -> None:
    """The example's float64 reference, against the block written out another way (per token,
    with the sigmoid through tanh): a wrong reference would pass a wrong kernel."""
    clip_mlp = load_example("clip_mlp")
    arrays = clip_mlp.make_inputs(1, "float32", seed=3)
    want = clip_mlp.reference(arrays)
    x, w1, b1, w2, b2 = (arrays[k].astype(np.float64) for k in ("X", "W1", "b1", "W2", "b2"))
    token = x[0, 5]
    h = np.einsum("k,kn->n", token, w1) + b1
    a = h * 0.5 * (1.0 + np.tanh(0.5 * 1.702 * h))
    assert np.allclose(want[0, 5], np.einsum("k,kn->n", a, w2) + b2 + token, rtol=1e-12, atol=1e-12)
