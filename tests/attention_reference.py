"""Float64 NumPy reference of tests/packages/com.example.Attention, for
`webgpu-kernels expect tests/packages/com.example.Attention --reference tests/attention_reference.py:attention`
(scripts/make_attention_cases.py runs it) and tests/test_attention_package.py.

Written from the definition, independent of the WGSL: scores = Q K^T * scale (+ mask), a softmax
over the keys with the row maximum subtracted, Y = P V. scale 0 means 1 / sqrt(D) (1 for D = 0).
A row whose every score is -inf is NaN (exp(-inf - -inf)), as the definition gives.
"""
from __future__ import annotations

import numpy as np


def effective_scale(scale: float, head_size: int) -> float:
    if scale != 0:
        return float(scale)
    return 1.0 / np.sqrt(head_size) if head_size > 0 else 1.0


def probabilities(q: np.ndarray, k: np.ndarray, mask: np.ndarray | None, scale: float) -> np.ndarray:
    q, k = q.astype(np.float64), k.astype(np.float64)
    scores = (q @ np.swapaxes(k, -1, -2)) * effective_scale(scale, q.shape[-1])
    if mask is not None:
        scores = scores + mask.astype(np.float64)
    if scores.size == 0:
        return scores
    with np.errstate(invalid="ignore"):  # an all -inf row (or a NaN) gives NaN
        e = np.exp(scores - scores.max(axis=-1, keepdims=True))
        return e / e.sum(axis=-1, keepdims=True)


def attention(inputs: dict[str, np.ndarray], attrs: dict[str, float]) -> dict[str, np.ndarray]:
    """{"Y": softmax(Q K^T * scale + mask) V, "P": the softmax}, in float64."""
    p = probabilities(inputs["Q"], inputs["K"], inputs.get("mask"), attrs.get("scale", 0.0))
    return {"Y": p @ inputs["V"].astype(np.float64), "P": p}
