"""Float64 NumPy reference of tests/packages/demo.BiasSplitGelu (ONNX Runtime's contrib op
com.microsoft.BiasSplitGelu), written from the op's definition, not from the WGSL, for
`webgpu-kernels expect tests/packages/demo.BiasSplitGelu --reference tests/bias_split_gelu_reference.py:bias_split_gelu`
and for tests/test_bias_split_gelu_package.py.

Y = H[..., :D] * gelu(H[..., D:]), H = X + bias, gelu(x) = 0.5 * x * (1 + erf(x / sqrt(2))), with
1 + erf(z) taken as erfc(-z) from Python's math module: written as 1 + erf, float64 cancels in the
negative tail (a relative error of 4e-11 at x = -5, 2e-6 at -7, 2% at -8, and 0 from about -8.4 on,
where gelu is still 1e-16), which the f32 shader, computing erfc there, does not.
"""

from __future__ import annotations

import math

import numpy as np

_erfc = np.frompyfunc(math.erfc, 1, 1)


def gelu(x: np.ndarray) -> np.ndarray:
    """The exact (erf) GELU in float64; IEEE: gelu(-inf) is -inf * 0 = NaN, gelu(nan) NaN."""
    x = np.asarray(x, np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        return 0.5 * x * _erfc(-x / math.sqrt(2.0)).astype(np.float64)


def split_gelu(x: np.ndarray, bias: np.ndarray) -> np.ndarray:
    """Y of X (N, S, 2D) and bias (2D,) in float64 (inputs widened first, so X + bias is exact
    for float16 and float32 data)."""
    h = np.asarray(x, np.float64) + np.asarray(bias, np.float64)
    d = h.shape[-1] // 2
    with np.errstate(invalid="ignore", over="ignore"):
        return h[..., :d] * gelu(h[..., d:])


def bias_split_gelu(inputs: dict, attrs: dict) -> dict:
    """`expect`'s reference: inputs X and bias (float64, as `test` builds them), no attributes."""
    return {"Y": split_gelu(inputs["X"], inputs["bias"])}
