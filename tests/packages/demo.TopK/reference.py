"""NumPy reference for demo.TopK, for `webgpu-kernels expect PATH --reference reference.py:topk`.

A stable argsort (kind="stable": equal values keep increasing index order, ONNX's tie rule) of -X
for the k largest, of X for the k smallest. NumPy sorts NaN last in both, where the package (as
onnxruntime's CPU kernel) takes NaN as greater than every number: with largest = 1 the NaNs of a
line move to its front, in increasing index order. -0 and +0 are equal to both sorts.
"""

from __future__ import annotations

import numpy as np


def topk_indices(x: np.ndarray, k: int, axis: int = -1, largest: int = 1) -> np.ndarray:
    """int64 indices of the k best elements along ``axis``, best first."""
    a = axis % x.ndim
    line = np.moveaxis(np.asarray(x, np.float64), a, -1)
    order = np.argsort(-line if largest else line, axis=-1, kind="stable")
    if largest:
        # argsort put the NaNs last, in index order: a stable sort on "is not NaN" brings them first.
        nan_last = np.isnan(np.take_along_axis(line, order, axis=-1))
        order = np.take_along_axis(order, np.argsort(~nan_last, axis=-1, kind="stable"), axis=-1)
    return np.moveaxis(order[..., :k], -1, a).astype(np.int64)


def topk(inputs: dict[str, np.ndarray], attrs: dict[str, int]) -> dict[str, np.ndarray]:
    x = inputs["X"]
    axis = int(attrs.get("axis", -1))
    idx = topk_indices(x, int(attrs["k"]), axis, int(attrs.get("largest", 1)))
    return {"Values": np.take_along_axis(x, idx, axis=axis % x.ndim), "Indices": idx}
