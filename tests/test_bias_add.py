"""com.microsoft.BiasAdd on the real device: both variants x {f32, f16} against the float64
reference, C = 3, 4, 6, 320, 1280 (and the other real-model channel counts), N*S*C not a
multiple of 4, zero sizes, NaN/inf, values at the f16 limits."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import webgpu_kernels as wk

import references as ref
from conftest import DTYPE_IDS, DTYPES, poison_outputs

VARIANTS = ("vec4", "scalar")

SHAPES = [
    (1, 1, 3), (1, 5, 3), (2, 5, 3),      # C = 3: N*S*C = 3, 15, 30, never a multiple of 4
    (1, 1, 4), (2, 5, 4), (3, 7, 4),      # C = 4
    (1, 3, 6), (1, 1, 6), (2, 2, 6),      # C = 6: 18 and 6 are not multiples of 4; 24 is, C is not
    (1, 1, 320), (2, 5, 320), (1, 3, 320),
    (1, 1, 1280), (1, 3, 1280), (2, 1, 1280),
    (2, 1, 640), (2, 5, 768), (1, 3, 1536),  # ONNX Runtime's own test shapes, SDXL refiner widths
    (1, 1, 1), (3, 1, 5), (1, 7, 2),
]  # fmt: skip
ZERO_SHAPES = [(0, 5, 4), (2, 0, 3), (1, 2, 0), (0, 0, 0)]


def applicable(shape) -> set[str]:
    numel = int(np.prod(shape))
    ok = {"scalar"}
    if numel > 0 and numel % 4 == 0 and shape[2] % 4 == 0:
        ok.add("vec4")
    return ok


def expected_default(shape) -> str:
    return "vec4" if "vec4" in applicable(shape) else "scalar"


def make_inputs(rng, shape, dtype, spread=4.0):
    x = (rng.standard_normal(shape) * spread).astype(dtype)
    bias = (rng.standard_normal(shape[-1:]) * spread).astype(dtype)
    skip = (rng.standard_normal(shape) * spread).astype(dtype)
    return {"X": x, "bias": bias, "skip": skip}


def check(y, inputs, dtype, what=""):
    x, bias, skip = inputs["X"], inputs["bias"], inputs["skip"]
    tol = ref.bias_add_tolerance(x, bias, skip, dtype)
    ref.assert_matches(y, ref.bias_add(x, bias, skip), dtype, **tol, what=what)


def test_not_a_multiple_of_4_is_covered():
    assert any(int(np.prod(s)) % 4 for s in SHAPES)
    assert {s[2] for s in SHAPES} >= {3, 4, 6, 320, 1280}


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_default_variant(bias_add, plan_of, need_dtype, rng, shape, dtype):
    need_dtype(dtype)
    inputs = make_inputs(rng, shape, dtype)
    assert bias_add.explain(inputs).chosen == expected_default(shape)
    y = bias_add(inputs)["Y"]
    assert plan_of(bias_add, inputs).variant == expected_default(shape)
    check(y, inputs, dtype, what=f"default variant on {shape}")


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_forced_variant(bias_add, plan_of, need_dtype, rng, shape, dtype, variant):
    need_dtype(dtype)
    inputs = make_inputs(rng, shape, dtype)
    if variant not in applicable(shape):
        with pytest.raises(wk.VariantRejectedError) as info:
            bias_add(inputs, variant=variant)
        assert info.value.clause in str(info.value)
        return
    y = bias_add(inputs, variant=variant)["Y"]
    assert plan_of(bias_add, inputs, variant=variant).variant == variant
    check(y, inputs, dtype, what=f"variant {variant} on {shape}")


@pytest.mark.parametrize("tunable", (1, 7, 64, 256))
@pytest.mark.parametrize("variant", VARIANTS)
def test_workgroup_size_tunable(bias_add, rng, variant, tunable):
    inputs = make_inputs(rng, (2, 9, 8), np.float32)
    y = bias_add(inputs, variant=variant, tunables={"WORKGROUP_SIZE": tunable})["Y"]
    check(y, inputs, np.float32)


@pytest.mark.parametrize("variant", VARIANTS)
def test_each_channel_gets_its_own_bias(bias_add, variant):
    """Zero X and skip, bias = 0..C-1: Y[n, s, c] must be exactly c."""
    n, s, c = 2, 3, 12
    x = np.zeros((n, s, c), np.float32)
    bias = np.arange(c, dtype=np.float32)
    y = bias_add({"X": x, "bias": bias, "skip": x}, variant=variant)["Y"]
    np.testing.assert_array_equal(y, np.broadcast_to(bias, (n, s, c)))


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("shape", ZERO_SHAPES, ids=str)
def test_zero_size(bias_add, need_dtype, shape, dtype):
    need_dtype(dtype)
    inputs = {"X": np.zeros(shape, dtype), "bias": np.zeros(shape[-1:], dtype), "skip": np.zeros(shape, dtype)}
    assert bias_add.explain(inputs).chosen == "scalar"
    y = bias_add(inputs)["Y"]
    assert y.shape == shape and y.dtype == np.dtype(dtype) and y.size == 0


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_nan_and_inf(bias_add, need_dtype, dtype, variant):
    need_dtype(dtype)
    x = np.array([[[np.nan, 1.0, np.inf, -np.inf], [1.0, 2.0, np.inf, 0.5]]], dtype=dtype)
    bias = np.array([0.5, np.nan, -np.inf, 1.0], dtype=dtype)
    skip = np.array([[[1.0, 1.0, 1.0, np.inf], [np.inf, -np.inf, -1.0, -0.5]]], dtype=dtype)
    inputs = {"X": x, "bias": bias, "skip": skip}
    y = bias_add(inputs, variant=variant)["Y"]
    expected = ref.bias_add(x, bias, skip)
    np.testing.assert_array_equal(np.isnan(y), np.isnan(expected), err_msg="NaN positions")
    check(y, inputs, dtype, what="NaN/inf inputs")


@pytest.mark.parametrize("variant", VARIANTS)
def test_f16_limits_do_not_overflow_into_nan(bias_add, need_dtype, variant):
    """X + bias overflows f16 before skip brings it back; summed in f32 it must not turn into
    inf or NaN. Tiny subnormals survive (or flush to 0, within tolerance) without NaN."""
    need_dtype(np.float16)
    tiny = float(np.finfo(np.float16).smallest_subnormal)
    x = np.array([[[65504.0, -65504.0, 60000.0, -60000.0], [tiny, -tiny, 3 * tiny, 65504.0]]], np.float16)
    bias = np.array([65504.0, -65504.0, 60000.0, -60000.0], np.float16)
    skip = np.array([[[-65504.0, 65504.0, -60000.0, 60000.0], [0.0, 0.0, -tiny, -131000.0 / 2]]], np.float16)
    inputs = {"X": x, "bias": bias, "skip": skip}
    y = bias_add(inputs, variant=variant)["Y"]
    assert not np.isnan(y).any(), f"NaN at {np.argwhere(np.isnan(y)).tolist()}"
    assert np.isfinite(y).all(), f"overflow at {np.argwhere(~np.isfinite(y)).tolist()}"
    check(y, inputs, np.float16, what="f16 limits")


@pytest.mark.parametrize("variant", VARIANTS)
def test_f32_sums_match_f64_rounding(bias_add, rng, variant):
    """Magnitudes far apart (1e6, 1, 1e-6): the f32 sum stays within two roundings of the f64 sum."""
    shape = (2, 4, 8)
    inputs = {"X": (rng.standard_normal(shape) * 1e6).astype(np.float32),
              "bias": rng.standard_normal(8).astype(np.float32),
              "skip": (rng.standard_normal(shape) * 1e-6).astype(np.float32)}  # fmt: skip
    y = bias_add(inputs, variant=variant)["Y"]
    check(y, inputs, np.float32)


@pytest.mark.parametrize("workgroup_size", (32, 64, 256, 1024))
@pytest.mark.parametrize("shape", [(2, 5, 320), (1, 3, 1536), (3, 7, 8), (2, 51, 640), (1, 1, 8)], ids=str)
def test_f16_units_match_the_scalar_variant_bit_for_bit(bias_add, need_dtype, need_workgroup_size, rng, shape,
                                                         workgroup_size):
    """f16 with C % 8 == 0 runs in 16-byte units from every other workgroup (pack2x16float); it must
    give exactly the scalar variant's bits (an f16 cast of the same f32 sum), overflow to inf, NaN and
    signed zeros included, and write every element (the output buffer starts as NaN). The shapes
    leave the last working workgroup partly idle or alone."""
    need_dtype(np.float16)
    need_workgroup_size(workgroup_size)
    inputs = make_inputs(rng, shape, np.float16)
    inputs["X"].flat[:6] = [65504, -65504, np.inf, np.nan, -0.0, 3.0]
    inputs["skip"].flat[:6] = [65504, -65504, -np.inf, 1, -0.0, -3.0]
    inputs["bias"][:6] = [1, -1, 0, 0, -0.0, 0]
    assert "wg % 2u" in bias_add.render(inputs)["main"]
    tunables = {"WORKGROUP_SIZE": workgroup_size}
    poison_outputs(bias_add, inputs, tunables=tunables)
    got = bias_add(inputs, tunables=tunables)["Y"]
    want = bias_add(inputs, variant="scalar", tunables=tunables)["Y"]
    ref.assert_same_bits(got, want)
    assert np.isposinf(got.flat[0]) and np.isneginf(got.flat[1]) and np.isnan(got.flat[2:4]).all()
    check(got, inputs, np.float16, what=f"f16 units on {shape}, workgroup size {workgroup_size}")


@pytest.mark.parametrize("channels", (4, 12, 324))
def test_f16_with_c_not_a_multiple_of_8_keeps_the_vec4_path(bias_add, need_dtype, rng, channels):
    need_dtype(np.float16)
    inputs = make_inputs(rng, (2, 6, channels), np.float16)
    assert "wg % 2u" not in bias_add.render(inputs)["main"]
    check(bias_add(inputs)["Y"], inputs, np.float16, what=f"C = {channels}")


def test_f16_units_past_the_workgroup_grid_limit(bias_add, need_dtype, rng):
    """More workgroups than max-compute-workgroups-per-dimension spill into y: the working ones are
    found by their linear index, so the whole tensor is still covered."""
    need_dtype(np.float16)
    limit = wk.get_device().limits["max-compute-workgroups-per-dimension"]
    # WORKGROUP_SIZE 1: limit + 37 workgroups (spilling into y) over C = 8 from 0.5 MiB a tensor;
    # at 64 it took 32 MiB a tensor and 17.5 s of a cold suite's worker time for the same grid (0.2 s so).
    rows = 4 * (limit + 37) // 8
    inputs = make_inputs(rng, (1, rows, 8), np.float16)
    y = bias_add(inputs, tunables={"WORKGROUP_SIZE": 1})["Y"]
    check(y, inputs, np.float16, what=f"{rows} rows over a 2-D grid")


@settings(max_examples=30, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])  # fmt: skip
@given(n=st.integers(1, 3), s=st.integers(1, 40), groups=st.integers(1, 200),
       workgroup_size=st.sampled_from([1, 8, 64, 256]), seed=st.integers(0, 2**32 - 1))  # fmt: skip
def test_f16_units_match_the_scalar_variant_on_any_shape(bias_add, need_dtype, n, s, groups, workgroup_size, seed):
    """Any (N, S, C) with C % 8 == 0 and any workgroup size: the 16-byte-unit path (what the default
    picks) gives the scalar variant's bits."""
    need_dtype(np.float16)
    shape = (n, s, 8 * groups)
    inputs = make_inputs(np.random.default_rng(seed), shape, np.float16, spread=1e4)  # sums overflow too
    tunables = {"WORKGROUP_SIZE": workgroup_size}
    got = bias_add(inputs, tunables=tunables)["Y"]
    want = bias_add(inputs, variant="scalar", tunables=tunables)["Y"]
    ref.assert_same_bits(got, want)
