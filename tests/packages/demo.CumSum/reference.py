"""Float64 NumPy reference for demo.CumSum (ONNX CumSum, opset 14), for
`webgpu-kernels expect PATH --reference reference.py:cumsum` and tests/test_cumsum_package.py.

Written from ONNX's definition, not from the WGSL: `reverse` flips the axis before and after the
running sum, `exclusive` shifts the sums one place along the scan (the first becomes 0).
"""

from __future__ import annotations

import numpy as np


def cum_sum(x: np.ndarray, axis: int = -1, exclusive: int = 0, reverse: int = 0) -> np.ndarray:
    x = np.asarray(x).astype(np.float64)
    axis = int(axis) % x.ndim
    if reverse:
        x = np.flip(x, axis)
    y = np.cumsum(x, axis=axis)
    if exclusive:  # shifted one place along the axis: the first sum is 0, the last element left out
        y = np.roll(y, 1, axis=axis)
        index = [slice(None)] * x.ndim
        index[axis] = slice(0, 1)
        y[tuple(index)] = 0.0
    if reverse:
        y = np.flip(y, axis)
    return y


def cumsum(inputs: dict[str, np.ndarray], attrs: dict[str, int]) -> dict[str, np.ndarray]:
    return {"Y": cum_sum(inputs["X"], attrs["axis"], attrs["exclusive"], attrs["reverse"])}
