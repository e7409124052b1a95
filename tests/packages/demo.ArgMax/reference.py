"""NumPy reference for demo.ArgMax, for `webgpu-kernels expect PATH --reference reference.py:argmax`.

NumPy's argmax takes the first maximum and treats NaN as the maximum (the first NaN wins);
select_last_index reverses the axis first, so the last maximum (or last NaN) wins.
"""

from __future__ import annotations

import numpy as np


def argmax(inputs: dict[str, np.ndarray], attrs: dict[str, int]) -> dict[str, np.ndarray]:
    x = inputs["X"]
    axis = int(attrs.get("axis", 0)) % x.ndim
    if attrs.get("select_last_index", 0):
        idx = x.shape[axis] - 1 - np.argmax(np.flip(x, axis=axis), axis=axis)
    else:
        idx = np.argmax(x, axis=axis)
    if attrs.get("keepdims", 1):
        idx = np.expand_dims(idx, axis)
    return {"reduced": np.asarray(idx, dtype=np.int64)}
