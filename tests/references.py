"""Float64 NumPy references for the kernels under test, and how closely results must match them.

Written from the ops' definitions (ONNX contrib ops ``com.microsoft.QuickGelu`` and
``com.microsoft.BiasAdd``), not from the WGSL templates: QuickGelu here is ``x * sigmoid(alpha * x)``
with a sign-split sigmoid, while the shader computes ``x / (1 + exp(-alpha * x))`` in f32.

Used by the tests and by ``scripts/error_matrix.py``.
"""

from __future__ import annotations

import numpy as np

F16_TINY = float(np.finfo(np.float16).smallest_subnormal)  # 2**-24
F16_ULP = 2.0**-10  # relative spacing of f16 numbers (at the bottom of a binade: the worst case)
F32_EPS = float(np.finfo(np.float32).eps)  # 2**-23
# The worst-case error bounds of the package tests (LayerNorm, GroupNorm, MatMul):
U32 = 2.0**-24  # f32 unit roundoff
F32_TINY = float(np.finfo(np.float32).tiny)  # 2^-126: a flushed f32 subnormal
F16_STEP = 2.0**-10  # one f16 ulp, relative: an f32 -> f16 conversion may round either way
F16_FLUSH = 2.0**-14  # smallest normal f16: a subnormal result may be flushed to zero


# --- references ---------------------------------------------------------------------------------


def sigmoid(z: np.ndarray) -> np.ndarray:
    """1 / (1 + e^-z) in float64, split by sign so that neither branch overflows."""
    z = np.asarray(z, dtype=np.float64)
    out = np.empty_like(z)
    pos = z >= 0
    neg = ~pos  # NaN lands here: e^NaN / (1 + e^NaN) is NaN
    with np.errstate(over="ignore", invalid="ignore"):
        out[pos] = 1.0 / (1.0 + np.exp(-z[pos]))
        e = np.exp(z[neg])
        out[neg] = e / (1.0 + e)
    return out


def quick_gelu(x: np.ndarray, alpha: float = 1.702) -> np.ndarray:
    """QuickGelu: ``x * sigmoid(alpha * x)``, in float64 (IEEE: -inf * 0 is NaN), with ``alpha``
    the float32 an ONNX float attribute holds (1e-50 is 0)."""
    alpha = float(np.float32(alpha))
    x64 = np.asarray(x).astype(np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        return x64 * sigmoid(alpha * x64)


def bias_add(x: np.ndarray, bias: np.ndarray, skip: np.ndarray) -> np.ndarray:
    """BiasAdd: ``X + bias + skip``, bias broadcast over the last (channel) axis, in float64."""
    with np.errstate(invalid="ignore"):  # inf + -inf is NaN, as it should be
        return np.asarray(x).astype(np.float64) + np.asarray(bias).astype(np.float64) + np.asarray(skip).astype(np.float64)


def scale_shift(x: np.ndarray, scale: float, shift: float) -> np.ndarray:
    """The test package demo.ScaleShift: ``x * scale + shift``, in float64."""
    return np.asarray(x).astype(np.float64) * scale + shift


# --- tolerances ---------------------------------------------------------------------------------


def quick_gelu_tolerance(dtype) -> dict[str, float]:
    """QuickGelu computes in f32 for both dtypes; the GPU's exp() is a few ulps off.

    f32: 1e-5 relative (a few ulps of exp, amplified a little by the division), 1e-6 absolute
    for results near zero. f16: one f16 ulp relative (the final rounding, which WGSL allows to go
    either way), and the f16 normal minimum absolute (a driver may flush f16 subnormals).
    """
    if np.dtype(dtype) == np.float32:
        return {"rtol": 1e-5, "atol": 1e-6}
    return {"rtol": F16_ULP, "atol": 2.0**-14}


def bias_add_tolerance(x, bias, skip, dtype) -> dict[str, object]:
    """BiasAdd sums in f32: two roundings of at most half an f32 ulp of the running sum, so at
    most eps32 * (|x| + |bias| + |skip|) per element in any order of addition. Allowed: twice
    that (a compiler may reassociate or contract), plus the f32 normal minimum (flushed
    subnormals). f16 adds one rounding of the result to f16 (one f16 ulp allowed)."""
    magnitude = np.abs(np.asarray(x, np.float64)) + np.abs(np.asarray(bias, np.float64)) + np.abs(np.asarray(skip, np.float64))
    atol = 2 * F32_EPS * magnitude + float(np.finfo(np.float32).tiny)
    if np.dtype(dtype) == np.float32:
        return {"rtol": 0.0, "atol": atol}
    return {"rtol": F16_ULP, "atol": atol + 2.0**-14}


def scale_shift_tolerance(x, scale, shift, dtype) -> dict[str, object]:
    magnitude = np.abs(np.asarray(x, np.float64) * scale) + abs(shift)
    atol = 2 * F32_EPS * magnitude
    if np.dtype(dtype) == np.float32:
        return {"rtol": 0.0, "atol": atol}
    return {"rtol": F16_ULP, "atol": atol + 2.0**-14}


# --- comparison ---------------------------------------------------------------------------------


def expected_in(dtype, reference: np.ndarray) -> np.ndarray:
    """The float64 reference, except where rounding to ``dtype`` overflows: there, +-inf."""
    reference = np.asarray(reference, dtype=np.float64)
    with np.errstate(over="ignore"):
        rounded = reference.astype(dtype).astype(np.float64)
    overflow = np.isinf(rounded) & np.isfinite(reference)
    return np.where(overflow, rounded, reference)


def assert_matches(actual, reference, dtype, *, rtol, atol, what: str = "") -> None:
    """``actual`` has the reference's shape and ``dtype`` and matches it: NaN exactly where the
    reference is NaN, the same infinities, every other element within ``atol + rtol * |ref|``
    (``atol`` may be an array, one bound per element)."""
    actual = np.asarray(actual)
    assert actual.dtype == np.dtype(dtype), f"{what}: dtype {actual.dtype}, expected {np.dtype(dtype)}"
    assert actual.shape == np.shape(reference), f"{what}: shape {actual.shape}, expected {np.shape(reference)}"
    expected = expected_in(dtype, reference)
    got = actual.astype(np.float64)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(expected), err_msg=f"{what}: NaN positions differ")
    inf = np.isinf(expected) | np.isinf(got)
    np.testing.assert_array_equal(got[inf], expected[inf], err_msg=f"{what}: infinities differ")
    finite = np.isfinite(expected) & np.isfinite(got)
    with np.errstate(invalid="ignore"):  # the non-finite positions were checked above
        allowed = np.broadcast_to(np.asarray(atol, dtype=np.float64), expected.shape) + rtol * np.abs(expected)
        error = np.where(finite, np.abs(got - expected), 0.0)
        excess = error - np.where(finite, allowed, 0.0)
    if np.any(excess > 0):
        bad = np.argwhere(excess > 0)
        worst = tuple(np.unravel_index(int(np.argmax(excess)), excess.shape)) if excess.ndim else ()
        raise AssertionError(
            f"{what}: {len(bad)} of {expected.size} elements out of tolerance (rtol={rtol:g}); worst at "
            f"{worst}: got {got[worst]!r}, expected {expected[worst]!r}, error {error[worst]:.3e} > allowed "
            f"{allowed[worst]:.3e}; first bad indices {bad[:5].tolist()}"
        )


def max_errors(actual, reference, dtype) -> tuple[float, float]:
    """Largest absolute and relative error of ``actual`` against the float64 reference.

    Positions where both are NaN or both the same infinity are not errors; a mismatch there is
    reported as an infinite error. The relative error counts only elements whose reference is at
    least the dtype's smallest normal number.
    """
    actual = np.asarray(actual, dtype=np.float64).reshape(-1)
    expected = expected_in(dtype, reference).reshape(-1)
    if actual.size == 0:
        return 0.0, 0.0
    same_special = (np.isnan(actual) & np.isnan(expected)) | (np.isinf(actual) & (actual == expected))
    special = ~np.isfinite(actual) | ~np.isfinite(expected)
    if np.any(special & ~same_special):
        return float("inf"), float("inf")
    finite = ~special
    if not finite.any():
        return 0.0, 0.0
    err = np.abs(actual[finite] - expected[finite])
    ref = np.abs(expected[finite])
    normal = ref >= np.finfo(dtype).tiny
    rel = float((err[normal] / ref[normal]).max()) if normal.any() else 0.0
    return float(err.max()), rel


def assert_same_bits(got: np.ndarray, want: np.ndarray) -> None:
    """The same values bit for bit as far as NumPy can tell: NaN where NaN, signed zeros and infinities."""
    assert np.array_equal(got, want, equal_nan=True) and np.array_equal(np.signbit(got), np.signbit(want))


def assert_within_bound(got, want: np.ndarray, tol, what: str) -> None:
    """Every finite element of ``want`` within its own tolerance (``tol`` broadcast to its shape):
    for derived per-element error bounds. A failure names how many elements missed and the worst."""
    import pytest

    g64 = np.asarray(got, np.float64)
    finite = np.isfinite(want)
    tol = np.broadcast_to(tol, want.shape)
    with np.errstate(invalid="ignore"):  # inf - inf where the reference holds inf: masked out
        excess = np.where(finite, np.abs(g64 - np.where(finite, want, 0)) - tol, -1.0)
    if excess.size and excess.max() > 0:
        i = np.unravel_index(int(np.argmax(excess)), want.shape)
        pytest.fail(f"{what}: {np.count_nonzero(excess > 0)} of {want.size} elements outside the bound; worst at "
                    f"{list(map(int, i))}: got {g64[i]!r}, want {want[i]!r}, tolerance {tol[i]:.3g}")


def assert_outputs_within(got: dict, want: dict, tol: dict, dtypes: dict, what: str) -> None:
    """Each output of ``want`` came back as a finite NumPy array of its ``dtypes[role]`` and shape,
    within its derived bound (:func:`assert_within_bound`): the normalisation packages' check."""
    for role, expected in want.items():
        g = got[role]
        assert isinstance(g, np.ndarray) and g.dtype == dtypes[role], (what, role, type(g), getattr(g, "dtype", None))
        assert g.shape == expected.shape, (what, role, g.shape, expected.shape)
        g64 = g.astype(np.float64)
        assert np.all(np.isfinite(g64)), f"{what}: {role} has {np.count_nonzero(~np.isfinite(g64))} non-finite values"
        assert_within_bound(g64, expected, tol[role], f"{what}: {role}")


def symbolic_tensor(name: str, elem_type: int, rank: int):
    """A graph input or output for :func:`one_node_session`: ``rank`` symbolic dimensions named after
    the tensor (``A_0``, ``A_1``, ...), so that no two tensors' dimensions are tied and one session
    serves every shape of that rank."""
    from onnx import helper

    return helper.make_tensor_value_info(name, elem_type, [f"{name}_{i}" for i in range(rank)])


def one_node_session(node, inputs: list, outputs: list, opset: int, domain_version: int = 1):
    """An onnxruntime CPU session of one ONNX node with these graph inputs and outputs (value infos,
    symbolic dimensions allowed, so one session serves many shapes, but each with a shape: one of
    None fails onnx's checker, "Field 'shape' of 'type' is required"), single-threaded. ``opset`` is
    the default domain's; a node of another domain (``com.microsoft``) imports that one too, at
    ``domain_version``."""
    import onnx
    import onnxruntime as ort
    from onnx import helper

    imports = [helper.make_opsetid("", opset)]
    if node.domain not in ("", "ai.onnx"):
        imports.append(helper.make_opsetid(node.domain, domain_version))
    model = helper.make_model(helper.make_graph([node], f"{node.op_type}_reference", inputs, outputs),
                              opset_imports=imports)  # fmt: skip
    model.ir_version = 10  # onnx 1.23 writes a newer IR version than older onnxruntime builds read
    onnx.checker.check_model(model)
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])


#: The onnxruntime release whose CPU kernels the package modules' edge cases were checked against
#: (CI installs the newest). Older ones refuse or answer otherwise on a few: 1.30, the GPU machine's,
#: refuses Split with more outputs than the axis has elements and a MatMul batch of 1 against 0, and
#: gives Gemm with K = 0 as C, not beta * C (run BC, docs/perf/runs.md).
ONNXRUNTIME_CHECKED = (1, 32)


def skip_for_older_onnxruntime(what: str) -> None:
    """Where the installed onnxruntime is older than :data:`ONNXRUNTIME_CHECKED`, skip the rest of
    the test, saying ``what`` it did (call it where onnxruntime refused or disagreed, after ours
    was checked against the NumPy reference, so that the skip hides no result of ours). On that
    release or newer it returns, and the caller fails the test."""
    import onnxruntime
    import pytest

    version = tuple(int(part) for part in onnxruntime.__version__.split(".")[:2])
    if version < ONNXRUNTIME_CHECKED:
        pytest.skip(f"onnxruntime {onnxruntime.__version__} {what}; {'.'.join(map(str, ONNXRUNTIME_CHECKED))} "
                    "agrees with the NumPy reference, which ours matched")  # fmt: skip


def assert_matches_within_bound(got, want, bound, dtype, what: str) -> None:
    """:func:`assert_within_bound` with the non-finite values checked too: the same shape, NaN where
    ``want`` is NaN, the same infinity where it is infinite; float16 gets its relative step, 1.5e-3,
    on top of ``bound`` (tests/test_gemm_package.py, tests/test_matmul_onnx_package.py)."""
    g64, w64 = np.asarray(got, np.float64), np.asarray(want, np.float64)
    assert g64.shape == w64.shape, (what, g64.shape, w64.shape)
    np.testing.assert_array_equal(np.isnan(g64), np.isnan(w64), err_msg=what)
    infinite = np.isinf(w64)
    np.testing.assert_array_equal(g64[infinite], w64[infinite], err_msg=what)
    rel = 1.5e-3 if np.dtype(dtype) == np.float16 else 0.0
    with np.errstate(invalid="ignore"):  # the relative part of a non-finite element is masked out there
        assert_within_bound(g64, w64, np.broadcast_to(bound, w64.shape) + rel * np.abs(w64), what)
