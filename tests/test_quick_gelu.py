"""com.microsoft.QuickGelu on the real device: every variant x {f32, f16} against the float64
reference (and ONNX Runtime's CPU kernel where installed), ranks 0-5, sizes 0/1/3/5/8, several
alphas, NaN/inf, values at the f16 limits."""

from __future__ import annotations

import functools

import numpy as np
import pytest

import webgpu_kernels as wk

import references as ref
from conftest import DTYPE_IDS, DTYPES, poison_outputs

VARIANTS = ("vec4", "vec4_tail", "scalar")


def rank_shapes() -> list[tuple[int, ...]]:
    """Rank 0, then ranks 1-5 with one axis of size 0, 1, 3, 5 or 8 (the others 2)."""
    shapes = [()]
    for rank in range(1, 6):
        for n in (0, 1, 3, 5, 8):
            axis = (rank - 1) if rank % 2 == 0 else 0
            shape = [2] * rank
            shape[axis] = n
            shapes.append(tuple(shape))
    return shapes


SHAPES = rank_shapes()


def applicable(numel: int) -> set[str]:
    """The variants whose `when` holds, read off the manifest by hand (not by the engine)."""
    ok = {"scalar"}
    if numel > 0:
        ok.add("vec4_tail")
        if numel % 4 == 0:
            ok.add("vec4")
    return ok


def expected_default(numel: int) -> str:
    return "scalar" if numel == 0 else ("vec4" if numel % 4 == 0 else "vec4_tail")


def sample(rng: np.random.Generator, shape, dtype, spread: float = 4.0) -> np.ndarray:
    return np.asarray(rng.standard_normal(shape) * spread).astype(dtype)


def check(y, x, dtype, alpha=1.702, what=""):
    ref.assert_matches(y, ref.quick_gelu(x, alpha), dtype, **ref.quick_gelu_tolerance(dtype), what=what)


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_default_variant(quick_gelu, plan_of, need_dtype, rng, shape, dtype):
    need_dtype(dtype)
    x = sample(rng, shape, dtype)
    numel = int(np.prod(shape, dtype=np.int64))
    assert quick_gelu.explain({"X": x}).chosen == expected_default(numel)
    y = quick_gelu({"X": x})["Y"]
    assert plan_of(quick_gelu, {"X": x}).variant == expected_default(numel)
    check(y, x, dtype, what=f"default variant on {shape}")


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_forced_variant(quick_gelu, plan_of, need_dtype, rng, shape, dtype, variant):
    need_dtype(dtype)
    x = sample(rng, shape, dtype)
    numel = int(np.prod(shape, dtype=np.int64))
    if variant not in applicable(numel):
        with pytest.raises(wk.VariantRejectedError) as info:
            quick_gelu({"X": x}, variant=variant)
        assert info.value.variant == variant
        assert info.value.clause in str(info.value)
        return
    y = quick_gelu({"X": x}, variant=variant)["Y"]
    assert plan_of(quick_gelu, {"X": x}, variant=variant).variant == variant
    check(y, x, dtype, what=f"variant {variant} on {shape}")


@pytest.mark.parametrize("workgroup_size", (32, 64, 256, 1024))
@pytest.mark.parametrize("numel", (4 * 255, 4 * 257, 8 * 1000, 4 * 4097))
def test_f16_vec4_covers_every_element(quick_gelu, need_dtype, need_workgroup_size, rng, numel, workgroup_size):
    """f16 vec4 works in 16-byte units from every other workgroup: odd vec4 counts (the last unit
    half in the padding), counts that leave the last working workgroup partly idle, and every
    workgroup size still write every element once (the output buffer starts as NaN)."""
    need_dtype(np.float16)
    need_workgroup_size(workgroup_size)
    x = sample(rng, (numel,), np.float16)
    poison_outputs(quick_gelu, {"X": x}, tunables={"WORKGROUP_SIZE": workgroup_size})
    y = quick_gelu({"X": x}, tunables={"WORKGROUP_SIZE": workgroup_size})["Y"]
    check(y, x, np.float16, what=f"numel {numel}, workgroup size {workgroup_size}")


def test_f16_vec4_past_the_workgroup_grid_limit(quick_gelu, need_dtype, rng):
    """More workgroups than max-compute-workgroups-per-dimension spill into y: the working
    workgroups are found by their linear index, so the whole tensor is still covered."""
    need_dtype(np.float16)
    limit = wk.get_device().limits["max-compute-workgroups-per-dimension"]
    # WORKGROUP_SIZE 1: limit + 37 workgroups (spilling into y) from 0.5 MiB; at 64 it took
    # 32 MiB and 13.1 s of a cold suite's worker time for the same grid (0.1 s so).
    numel = 4 * (limit + 37)
    x = sample(rng, (numel,), np.float16)
    y = quick_gelu({"X": x}, tunables={"WORKGROUP_SIZE": 1})["Y"]
    check(y, x, np.float16, what=f"numel {numel} over a 2-D grid")


@pytest.mark.parametrize("variant", ("vec4_tail", "scalar"))
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_rank0_value(quick_gelu, need_dtype, dtype, variant):
    need_dtype(dtype)
    x = np.array(-0.75, dtype=dtype)
    y = quick_gelu({"X": x}, variant=variant)["Y"]
    assert y.size == 1
    check(np.reshape(y, ()), x, dtype, what="rank 0")


def test_rank0_shape_is_kept(quick_gelu):
    """Regression: np.ascontiguousarray in kernel._prepare_inputs made 0-d inputs shape (1,)."""
    x = np.array(2.0, dtype=np.float32)
    assert quick_gelu.explain({"X": x}).outputs[0].shape == ()
    assert quick_gelu({"X": x})["Y"].shape == ()


ALPHAS = (1.702, 1.0, 0.0, -1.0, -1.702, 0.5, 3.25)


@pytest.mark.parametrize("alpha", ALPHAS)
@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_alpha(quick_gelu, need_dtype, rng, dtype, variant, alpha):
    need_dtype(dtype)
    shape = (3, 8) if variant == "vec4" else (3, 7)
    x = sample(rng, shape, dtype, spread=6.0)
    y = quick_gelu({"X": x}, attrs={"alpha": alpha}, variant=variant)["Y"]
    check(y, x, dtype, alpha, what=f"alpha={alpha}")


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_alpha_defaults_to_1_702(quick_gelu, need_dtype, rng, dtype):
    need_dtype(dtype)
    x = sample(rng, (4, 5), dtype)
    y = quick_gelu({"X": x})["Y"]
    check(y, x, dtype, 1.702)
    # and it is really used: with alpha = 1 the results differ
    assert not np.allclose(y.astype(np.float64), ref.quick_gelu(x, 1.0), rtol=1e-2, atol=0)


@pytest.mark.parametrize("alpha", (1.702, -1.0, 0.25, 0.0, -0.0, 1e-50))
@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_nan_and_inf(quick_gelu, need_dtype, dtype, variant, alpha):
    """NaN stays NaN; inf gives inf, NaN (inf * 0) or -0 exactly as the IEEE float64 reference.

    alpha = 0 (and 1e-50, which is 0 as the float32 an ONNX attribute holds): ``0 * inf`` is NaN,
    and the drivers' folding of ``0 * x`` to 0 had given ±inf (inf / 2) on every variant.
    """
    need_dtype(dtype)
    big = float(np.finfo(dtype).max)
    values = [np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, -1.0, 30.0, -30.0, big, -big, np.nan, 2.5, -np.inf, np.inf, -2.5]
    x = np.array(values, dtype=dtype)
    assert x.size % 4 == 0  # so that every variant applies
    y = quick_gelu({"X": x}, attrs={"alpha": alpha}, variant=variant)["Y"]
    expected = ref.quick_gelu(x, alpha)
    np.testing.assert_array_equal(np.isnan(y), np.isnan(expected), err_msg="NaN positions")
    check(y, x, dtype, alpha, what="NaN/inf inputs")


@pytest.mark.parametrize("alpha", (1.702, 1.0, 0.0, -1.0))
@pytest.mark.parametrize("variant", VARIANTS)
def test_f16_limits_do_not_become_nan(quick_gelu, need_dtype, variant, alpha):
    need_dtype(np.float16)
    tiny = float(np.finfo(np.float16).smallest_subnormal)
    values = [65504.0, -65504.0, 60000.0, -60000.0, 32768.0, -32768.0, 1000.0, -1000.0,
              tiny, -tiny, 3 * tiny, -5 * tiny, 2.0**-14, -(2.0**-14), 0.0, 11.0]  # fmt: skip
    x = np.array(values, dtype=np.float16)
    y = quick_gelu({"X": x}, attrs={"alpha": alpha}, variant=variant)["Y"]
    assert not np.isnan(y).any(), f"NaN at {x[np.isnan(y)]}"
    assert np.isfinite(y).all(), f"overflow at {x[~np.isfinite(y)]}"
    check(y, x, np.float16, alpha, what="f16 limits")


@pytest.mark.parametrize("variant", VARIANTS)
def test_f32_limits(quick_gelu, variant):
    big = float(np.finfo(np.float32).max)
    tiny = float(np.finfo(np.float32).tiny)
    x = np.array([big, -big, 1e38, -1e38, 1e20, -1e20, tiny, -tiny], dtype=np.float32)
    y = quick_gelu({"X": x}, variant=variant)["Y"]
    assert not np.isnan(y).any()
    check(y, x, np.float32, what="f32 limits")


def test_large_positive_and_negative_inputs_saturate(quick_gelu, rng):
    """x * sigmoid(1.702 x) -> x for x >> 0 and -> -0 for x << 0, with no NaN on the way."""
    x = np.concatenate([np.linspace(-200, -20, 50), np.linspace(20, 200, 50)]).astype(np.float32)
    y = quick_gelu({"X": x})["Y"]
    np.testing.assert_allclose(y[x > 0], x[x > 0], rtol=1e-6)
    np.testing.assert_array_less(np.abs(y[x < 0]), 1e-12)


@pytest.mark.parametrize("alpha", (3e38, -3e38, 2.4e38, 1.1e37))
@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_alpha_near_the_f32_limit_keeps_signed_zeros(quick_gelu, need_dtype, dtype, variant, alpha):
    """From 2.36e38 (F32_MAX / log2(e)) a driver folding exp into exp2 overflows alpha * log2(e)
    to inf, and x = ±0 gave NaN (inf * 0) on every variant (found by a numerics review)."""
    need_dtype(dtype)
    x = np.array([0.0, -0.0, 1, -1, 0.5, -0.5, 1e-3, -1e-3], dtype=dtype)
    y = quick_gelu({"X": x}, attrs={"alpha": alpha}, variant=variant)["Y"]
    check(y, x, dtype, alpha, what=f"alpha={alpha}")
    assert not np.isnan(y).any() and np.signbit(y[:2]).tolist() == [False, True]


def test_ordinary_alphas_render_without_the_zero_guard(quick_gelu):
    """The guard costs a compare and a select per element: only alphas past 1e37 get it."""
    meta = {"X": wk.TensorMeta((4096,), "float32")}
    for alpha, guarded in ((1.702, False), (-1e30, False), (1.1e37, True), (-3e38, True)):
        wgsl = "".join(quick_gelu.render(meta, attrs={"alpha": alpha}).values())
        assert ("select(" in wgsl) is guarded, alpha


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_output_matches_input_metadata(quick_gelu, need_dtype, rng, dtype):
    need_dtype(dtype)
    x = sample(rng, (2, 3, 4, 5), dtype)
    y = quick_gelu({"X": x})["Y"]
    assert isinstance(y, np.ndarray) and y.shape == x.shape and y.dtype == x.dtype
    assert set(quick_gelu({"X": x})) == {"Y"}


# --- ONNX Runtime (CPU) ---------------------------------------------------------------------


@functools.lru_cache(maxsize=None)
def _ort_session(dtype_name: str, alpha: float):
    onnx = pytest.importorskip("onnx")
    ort = pytest.importorskip("onnxruntime")
    from onnx import TensorProto, helper

    elem = {"float32": TensorProto.FLOAT, "float16": TensorProto.FLOAT16}[dtype_name]
    node = helper.make_node("QuickGelu", ["X"], ["Y"], domain="com.microsoft", alpha=alpha)
    dims = ["N", "S", "C"]
    graph = helper.make_graph([node], "quick_gelu", [helper.make_tensor_value_info("X", elem, dims)],
                              [helper.make_tensor_value_info("Y", elem, dims)])  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])
    model.ir_version = 10
    onnx.checker.check_model(model)
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    try:
        return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    except Exception as exc:  # an onnxruntime build without this contrib op / dtype
        pytest.skip(f"onnxruntime CPU cannot run QuickGelu({dtype_name}): {exc}")


@pytest.mark.parametrize("alpha", (1.702, 1.0, -0.5))
@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_matches_onnxruntime_cpu(quick_gelu, need_dtype, rng, dtype, variant, alpha):
    pytest.importorskip("onnx")
    pytest.importorskip("onnxruntime")
    need_dtype(dtype)
    x = sample(rng, (2, 5, 8), dtype, spread=5.0)
    session = _ort_session(np.dtype(dtype).name, alpha)
    expected = session.run(None, {"X": x})[0]
    assert expected.dtype == np.dtype(dtype)
    y = quick_gelu({"X": x}, attrs={"alpha": alpha}, variant=variant)["Y"]
    # both are within one tolerance of the float64 truth, so within two of each other
    tol = ref.quick_gelu_tolerance(dtype)
    np.testing.assert_allclose(y.astype(np.float64), expected.astype(np.float64),
                               rtol=2 * tol["rtol"], atol=2 * tol["atol"])  # fmt: skip
    check(expected, x, dtype, alpha, what="onnxruntime itself against the float64 reference")
