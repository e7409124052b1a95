"""tests/packages/demo.BiasSplitGelu: a third-party package written from the docs alone by a kernel
author: ONNX Runtime's contrib op com.microsoft.BiasSplitGelu, the GEGLU of the
Stable Diffusion UNets' transformer feed-forward, run through load_kernel() with no engine change.
X (N, S, 2D) plus a bias (2D,) is split into halves, and Y = left * gelu(right) with the exact
(erf) GELU. WGSL has no erf: the template approximates it (a polynomial near 0, erfc as exp times a
polynomial beyond), computing in f32 for float16 too. It stresses an output shape that halves an
input's dimension, shape relations refused by `when` clauses that name the shapes, an elementwise
function with a long tail, and vec4 and vec8 variants that do f32 arithmetic on float16 moved as
u32 words, so without shader-f16 (vec8, float16 only, moves 16 bytes of each half of X per load).

Results are judged against a float64 NumPy reference (tests/bias_split_gelu_reference.py, erf
from Python's math module) rounded once to the output dtype, with test.json's tolerances.
"""

from __future__ import annotations

import json
import math
import re

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import webgpu_kernels as wk
from webgpu_kernels import errors
from webgpu_kernels.manifest import check_manifest
from webgpu_kernels.validation import validate_package

from bias_split_gelu_reference import split_gelu  # tests/, beside conftest: the sdist ships it
from conftest import (
    DTYPE_IDS,
    DTYPES,
    PACKAGES_DIR,
    assert_engine_has_no_code_for,
    assert_valid_and_passing,
    poison_outputs,
    stored_expectations,
)

PACKAGE = PACKAGES_DIR / "demo.BiasSplitGelu"
VARIANTS = ("vec8", "vec4", "scalar")
#: test.json's tolerances, by output dtype.
TOLERANCES = {np.dtype(np.float32): (1e-5, 1e-6), np.dtype(np.float16): (2e-3, 1e-5)}


@pytest.fixture(scope="module")
def kernel():
    return wk.load_kernel(PACKAGE)


def draw(rng, shape, dtype, std=2.0) -> np.ndarray:
    return np.asarray((rng.standard_normal(shape) * std).astype(dtype))


def rounded_reference(x: np.ndarray, bias: np.ndarray) -> np.ndarray:
    """The float64 reference rounded once to the inputs' dtype (an f16 overflow becomes inf)."""
    with np.errstate(over="ignore", invalid="ignore"):
        return split_gelu(x, bias).astype(x.dtype)


def assert_split_gelu(out: np.ndarray, x: np.ndarray, bias: np.ndarray, rtol=None, atol=None) -> None:
    """out is the reference within the tolerance, with its NaNs and infinities where they are."""
    want = rounded_reference(x, bias)
    assert out.shape == want.shape and out.dtype == want.dtype == x.dtype, (out.shape, want.shape, out.dtype)
    default_rtol, default_atol = TOLERANCES[out.dtype]
    rtol, atol = (default_rtol if rtol is None else rtol), (default_atol if atol is None else atol)
    got, exp = out.astype(np.float64), want.astype(np.float64)
    assert np.array_equal(np.isnan(got), np.isnan(exp)), "NaN positions differ"
    finite = np.isfinite(exp)
    assert np.array_equal(got[~finite & ~np.isnan(exp)], exp[~finite & ~np.isnan(exp)]), "infinities differ"
    bad = np.abs(got[finite] - exp[finite]) > atol + rtol * np.abs(exp[finite])
    assert not bad.any(), (f"{int(bad.sum())} of {out.size} elements beyond rtol {rtol}, atol {atol}; worst "
                           f"{np.max(np.abs(got[finite] - exp[finite]))}")  # fmt: skip


def run(kernel, x, bias, **options) -> np.ndarray:
    inputs = {"X": x, "bias": bias}
    poison_outputs(kernel, inputs, tunables=options.get("tunables"))
    before = {k: np.array(v, copy=True) for k, v in inputs.items()}
    out = kernel(inputs, **options)["Y"]
    for name, value in inputs.items():
        assert np.array_equal(value, before[name], equal_nan=True), name
    return out


def accepted(kernel, x, bias, tunables=None) -> list[str]:
    explanation = kernel.explain({"X": x, "bias": bias}, tunables=tunables)
    return [v.variant for v in explanation.verdicts if v.accepted]


def expected_variants(shape, dtype) -> list[str]:
    """The variants that take a call: vec8 float16 with D a multiple of 8, vec4 D a multiple of 4,
    scalar any D."""
    d = shape[2] // 2
    vec8 = d % 8 == 0 and np.dtype(dtype) == np.float16
    return ["vec8"] * vec8 + ["vec4"] * (d % 4 == 0) + ["scalar"]


# --- the package ---------------------------------------------------------------------------------


def test_package_files():
    data = json.loads((PACKAGE / "manifest.json").read_text("utf-8"))
    assert check_manifest(data) == []
    assert [(v["id"], v["priority"]) for v in data["variants"]] == [("vec8", 20), ("vec4", 10), ("scalar", 0)]
    assert data["typeConstraints"] == {"T": ["float32", "float16"]}
    assert "attributes" not in data


def test_engine_has_no_code_for_it():
    assert_engine_has_no_code_for("demo.BiasSplitGelu")
    assert_engine_has_no_code_for("BiasSplitGelu")


def test_validates_and_its_test_json_passes(kernel):
    assert_valid_and_passing(kernel, PACKAGE, VARIANTS)


def test_expected_outputs_are_the_reference(kernel):
    """test.json's expected outputs are the float64 reference of the cases' inputs rounded once to
    the dtype (written by `expect` with tests/bias_split_gelu_reference.py), independent of the WGSL."""
    checked = 0
    for case, ins, stored in stored_expectations(kernel, "Y", lambda ins: ins["X"].dtype.name):
        want = rounded_reference(ins["X"], ins["bias"])
        assert stored.shape == want.shape, case.name
        np.testing.assert_array_equal(stored, want, err_msg=case.name)
        checked += 1
    assert checked >= 20


# --- the erf approximation, in float64 -----------------------------------------------------------


def template_value(name: str):
    """A value the template sets (`{% set NAME = ... %}`): a number or a list of coefficients,
    highest degree first."""
    text = (PACKAGE / "bias-split-gelu.wgsl.jinja").read_text("utf-8")
    found = re.search(r"\{% set " + name + r" = ([^%]*) %\}", text)
    assert found, name
    return json.loads(found[1])


def horner(coefs: list[float], v: np.ndarray) -> np.ndarray:
    r = np.full_like(v, coefs[0])
    for c in coefs[1:]:
        r = r * v + c
    return r


def approx_one_plus_erf(z: np.ndarray) -> np.ndarray:
    """The template's 1 + erf(z), evaluated in float64 with its (f32-rounded) coefficients."""
    near = [float(np.float32(c)) for c in template_value("ERF_NEAR")]
    far = [float(np.float32(c)) for c in template_value("ERFC_FAR")]
    limit = template_value("NEAR_LIMIT")
    a = np.abs(z)
    t = 1.0 / (1.0 + 0.5 * a)
    with np.errstate(over="ignore", invalid="ignore"):
        erfc_a = np.exp(-z * z) * t * horner(far, t)
        return np.where(a <= limit, 1.0 + z * horner(near, z * z), np.where(z > 0, 2.0 - erfc_a, erfc_a))


def test_the_erf_approximation_is_accurate_in_float64():
    """As written in the template, 1 + erf(z) is within 1e-7 of itself, relative, over the whole
    line (the negative tail computed as erfc, not as 1 - (1 - erfc)), and erf within 5e-8;
    Abramowitz-Stegun 7.1.26 is 1.5e-7 absolute on erf, and 5e-5 relative on 1 + erf at z = -2."""
    z = np.concatenate([np.linspace(-9.0, 9.0, 360_001), [-0.5, 0.5, -1e-30, 0.0, 1e-30, -20.0, 20.0]])
    want = np.array([math.erfc(-v) for v in z])
    got = approx_one_plus_erf(z)
    assert np.max(np.abs(got - want) / want) < 1e-7
    assert np.max(np.abs((got - 1.0) - np.array([math.erf(v) for v in z]))) < 5e-8


def test_gelu_keeps_its_digits_in_the_negative_tail(kernel, rng):
    """On the GPU, in f32: gelu of gates in [-8, 0] (|Y| from 5e-15 up to 0.17) is within 5e-5 of
    itself, with no absolute slack (lavapipe: 6e-6; the rounding of x / sqrt(2) alone grows by 2 z^2
    in exp(-z^2), and WGSL lets exp be 3 + 2|x| ulps off). Written as 1 - (1 - erfc), 1 + erf would
    lose digits of the tail in f32 from x = -2 on and all of them past -5.8, and the float64
    reference 2% at -8."""
    d = 8192
    right = -np.linspace(0.0, 8.0, d, dtype=np.float32)
    x = np.concatenate([np.ones(d, np.float32), right]).reshape(1, 1, 2 * d)
    bias = np.zeros(2 * d, np.float32)
    assert accepted(kernel, x, bias) == ["vec4", "scalar"]  # vec8 is float16 only
    for variant in ("vec4", "scalar"):
        assert_split_gelu(run(kernel, x, bias, variant=variant), x, bias, rtol=5e-5, atol=0.0)


# --- results -------------------------------------------------------------------------------------

# SD 1.5's feed-forward widths (D = 1280, 2560, 5120) with N * S cut down, then small and odd D.
CALLS = [
    (2, 16, 2560),
    (1, 8, 5120),
    (1, 2, 10240),
    (2, 5, 16),
    (3, 1, 10),
    (1, 7, 2),
    (1, 1, 8),
    (4, 3, 6),
    (0, 4, 8),
    (2, 0, 8),
    (2, 3, 0),
]


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("shape", CALLS, ids=lambda s: "x".join(map(str, s)))
def test_shapes_on_every_variant_that_takes_them(kernel, rng, need_dtype, shape, dtype):
    need_dtype(dtype)
    x, bias = draw(rng, shape, dtype), draw(rng, shape[2:], dtype, std=0.5)
    variants = accepted(kernel, x, bias)
    assert variants == expected_variants(shape, dtype), variants
    for variant in variants:
        assert_split_gelu(run(kernel, x, bias, variant=variant), x, bias)


@pytest.mark.parametrize("d", [1280, 2560, 5120])
def test_the_default_is_vec8_for_float16_and_vec4_for_float32_at_sd_widths(kernel, rng, d):
    for dtype, chosen in ((np.float16, "vec8"), (np.float32, "vec4")):
        x, bias = draw(rng, (2, 4, 2 * d), dtype), draw(rng, (2 * d,), dtype)
        assert kernel.explain({"X": x, "bias": bias}).chosen == chosen
        out = kernel({"X": x, "bias": bias})["Y"]
        assert out.shape == (2, 4, d)
        assert_split_gelu(out, x, bias)


@pytest.mark.parametrize("shape", [(1, 1, 16), (3, 1, 16), (2, 5, 32), (1, 3, 48), (2, 2, 2560), (1, 1, 10240)],
                         ids=lambda s: "x".join(map(str, s)))
def test_vec8_against_the_float64_reference(kernel, need_dtype, rng, shape):
    """vec8 on D = 8, 16, 24 and SD widths with few rows: each output of the 8 an invocation
    computes lands in its place (a mix-up of the two vec4 halves of a unit, or of a row's
    halves, would show), within test.json's float16 tolerance."""
    need_dtype(np.float16)
    for std in (0.5, 2.0, 6.0):
        x, bias = draw(rng, shape, np.float16, std), draw(rng, shape[2:], np.float16, std / 2)
        assert_split_gelu(run(kernel, x, bias, variant="vec8"), x, bias)
    # each output in its place, exactly: gates of 10 (gelu(10) is 10 in f32: 2 - erfc rounds to 2)
    # and values k = (r * D + j) % 256 give Y = 10 k, a float16 (below 2560, even)
    d = shape[2] // 2
    rows = math.prod(shape[:2])
    k = (np.arange(rows * d) % 256).reshape(rows, d)
    x = np.concatenate([k, np.full((rows, d), 10)], axis=1).astype(np.float16).reshape(shape)
    out = run(kernel, x, np.zeros(shape[2], np.float16), variant="vec8")
    np.testing.assert_array_equal(out, (10 * k).astype(np.float16).reshape(shape[:2] + (d,)))


@pytest.mark.parametrize("variant", VARIANTS)
def test_float16_sums_past_its_range_are_kept_in_f32(kernel, need_dtype, variant):
    """X + bias = 120,000 is no float16, but the result 120,000 * gelu(-3) is: the sum is made in
    f32; a product past 65,504 is an infinity, and NaN, inf and -inf pass through as the formula
    says (gelu(-inf) = -inf * 0 = NaN)."""
    need_dtype(np.float16)
    x = np.array([60000, 1e-4, 300, 2, np.nan, np.inf, 1, -0.0,
                  -3, 60000, 300, -np.inf, 1, -200, np.inf, 0], np.float16).reshape(1, 1, 16)  # fmt: skip
    bias = np.array([60000, 0, 0, 0, 0, 0, 0, 0, 0, 60000, 0, 0, 0, 0, 0, 0], np.float16)
    out = run(kernel, x, bias, variant=variant)
    assert out[0, 0, 0] == np.float16(120000 * -0.0040496525)  # -486
    assert out[0, 0, 1] == np.float16(12.0)
    assert np.isinf(out[0, 0, 2]) and np.isnan(out[0, 0, 3]) and np.isnan(out[0, 0, 4]) and np.isnan(out[0, 0, 5])
    assert np.isinf(out[0, 0, 6]) and out[0, 0, 7] == 0
    assert_split_gelu(out, x, bias)


@pytest.mark.parametrize("variant", VARIANTS)
def test_many_invocations_spill_the_grid(kernel, plan_of, need_dtype, rng, variant):
    """More than 65,535 workgroups at WORKGROUP_SIZE 1: the grid spills into y, and each output
    element is still written once. vec8 (float16) needs 8 outputs per invocation: 532,480."""
    if variant == "vec8":
        need_dtype(np.float16)
        x, bias = draw(rng, (2, 320, 1664), np.float16), draw(rng, (1664,), np.float16)
    else:
        x, bias = draw(rng, (2, 160, 1664), np.float32), draw(rng, (1664,), np.float32)  # 266,240 outputs
    tunables = {"WORKGROUP_SIZE": 1}
    grid = plan_of(kernel, {"X": x, "bias": bias}, variant=variant, tunables=tunables).passes[0].grid
    assert grid[1] > 1 and grid[0] * grid[1] * grid[2] >= 65_536
    assert_split_gelu(run(kernel, x, bias, variant=variant, tunables=tunables), x, bias)


@pytest.mark.parametrize("wg", [1, 7, 64, 1024])
def test_workgroup_sizes(kernel, need_workgroup_size, has_f16, rng, wg):
    need_workgroup_size(wg)
    x, bias = draw(rng, (3, 5, 24), np.float32), draw(rng, (24,), np.float32)
    for variant in ("vec4", "scalar"):
        assert_split_gelu(run(kernel, x, bias, variant=variant, tunables={"WORKGROUP_SIZE": wg}), x, bias)
    if has_f16:  # vec8: D = 24, 45 invocations
        x, bias = draw(rng, (3, 5, 48), np.float16), draw(rng, (48,), np.float16)
        assert_split_gelu(run(kernel, x, bias, variant="vec8", tunables={"WORKGROUP_SIZE": wg}), x, bias)


def test_non_contiguous_inputs_and_gpu_tensors(kernel, rng):
    x = draw(rng, (16, 3, 2), np.float32).transpose(2, 1, 0)  # (2, 3, 16), Fortran order
    bias = wk.to_gpu(draw(rng, (16,), np.float32))
    first = kernel({"X": x, "bias": bias}, output="gpu")["Y"]
    assert isinstance(first, wk.GpuTensor) and first.shape == (2, 3, 8)
    half = draw(rng, (8,), np.float32)
    again = kernel({"X": first, "bias": half}, variant="scalar")["Y"]
    assert_split_gelu(again, first.numpy(), half)
    assert_split_gelu(first.numpy(), np.ascontiguousarray(x), bias.numpy())
    first.release()
    bias.release()


def test_vec8_takes_non_contiguous_inputs_and_gpu_tensors(kernel, need_dtype, rng):
    """float16 X in Fortran order and a GpuTensor bias go to vec8 (D = 16), and its GpuTensor output,
    (2, 3, 16), is X for a second vec8 call (D = 8)."""
    need_dtype(np.float16)
    x = draw(rng, (32, 3, 2), np.float16).transpose(2, 1, 0)  # (2, 3, 32), Fortran order
    bias = wk.to_gpu(draw(rng, (32,), np.float16))
    assert kernel.explain({"X": x, "bias": bias}).chosen == "vec8"
    first = kernel({"X": x, "bias": bias}, output="gpu")["Y"]
    assert isinstance(first, wk.GpuTensor) and first.shape == (2, 3, 16)
    half = draw(rng, (16,), np.float16)
    again = kernel({"X": first, "bias": half}, variant="vec8")["Y"]
    assert_split_gelu(again, first.numpy(), half)
    assert_split_gelu(first.numpy(), np.ascontiguousarray(x), bias.numpy())
    sliced = draw(rng, (2, 3, 64), np.float16)[:, :, ::2]  # strided: every other channel
    assert_split_gelu(run(kernel, sliced, half.repeat(2), variant="vec8"), np.ascontiguousarray(sliced), half.repeat(2))
    first.release()
    bias.release()


@pytest.mark.parametrize("variant", ["vec8", "vec4"])
def test_the_vec8_and_vec4_variants_run_without_shader_f16(kernel, gl_device, rng, variant):
    """vec8 and vec4 read and write float16 as u32 words (unpack2x16float, pack2x16float) and
    compute in f32, so they run on lavapipe's OpenGL adapter (vec8 is chosen there for D = 8);
    scalar names f16, and a call only it takes (D not a multiple of 4) is the adapter's
    DeviceLimitError there (its f16Ok guard)."""
    x, bias = draw(rng, (2, 3, 16), np.float16), draw(rng, (16,), np.float16)
    assert kernel.explain({"X": x, "bias": bias}, adapter="gl").chosen == "vec8"
    assert_split_gelu(kernel({"X": x, "bias": bias}, adapter="gl", variant=variant)["Y"], x, bias)
    x, bias = draw(rng, (3, 7, 48), np.float16) * 4, draw(rng, (48,), np.float16)  # D = 24
    assert_split_gelu(kernel({"X": x, "bias": bias}, adapter="gl", variant=variant)["Y"], x, bias)
    x, bias = draw(rng, (1, 2, 6), np.float16), draw(rng, (6,), np.float16)
    with pytest.raises(errors.DeviceLimitError, match="shader-f16"):
        kernel({"X": x, "bias": bias}, adapter="gl")


# --- refusals ------------------------------------------------------------------------------------


@pytest.mark.parametrize("c", [1, 5, 2561])
def test_an_odd_last_dimension_is_refused_naming_it(kernel, c):
    with pytest.raises(errors.SelectionError) as info:
        kernel({"X": np.ones((2, 3, c), np.float32), "bias": np.ones(c, np.float32)})
    assert f"'dim(shapes.X, 2) % 2 == 0' is false (with shapes.X=[2, 3, {c}])" in str(info.value)


@pytest.mark.parametrize("c, b", [(8, 6), (8, 4), (8, 16), (2560, 1280)])
def test_a_bias_of_another_length_is_refused_naming_both(kernel, c, b):
    with pytest.raises(errors.SelectionError) as info:
        kernel({"X": np.ones((1, 2, c), np.float16), "bias": np.ones(b, np.float16)})
    assert (f"'dim(shapes.bias, 0) == dim(shapes.X, 2)' is false (with shapes.bias=[{b}], shapes.X=[1, 2, {c}])"
            in str(info.value))  # fmt: skip


def test_ranks_are_3_and_1(kernel):
    with pytest.raises(errors.RankError) as info:
        kernel({"X": np.ones((3, 8), np.float32), "bias": np.ones(8, np.float32)})
    assert info.value.argument == "X" and "rank 3" in str(info.value)
    with pytest.raises(errors.RankError) as info:
        kernel({"X": np.ones((1, 3, 8), np.float32), "bias": np.ones((1, 8), np.float32)})
    assert info.value.argument == "bias" and "rank 1" in str(info.value)


def test_other_and_mixed_dtypes_are_refused(kernel):
    with pytest.raises(errors.DTypeError):
        kernel({"X": np.ones((1, 2, 4), np.int32), "bias": np.ones(4, np.int32)})
    with pytest.raises(errors.DTypeError):
        kernel({"X": np.ones((1, 2, 4), np.float32), "bias": np.ones(4, np.float16)})
    with pytest.raises(errors.UnknownInputError):
        kernel({"X": np.ones((1, 2, 4), np.float32), "bias": np.ones(4, np.float32)}, attrs={"approximate": 1})


def test_vec4_forced_on_d_not_of_4_is_rejected(kernel):
    with pytest.raises(errors.VariantRejectedError, match=r"'D % 4 == 0' is false \(with D=5"):
        kernel({"X": np.ones((1, 1, 10), np.float32), "bias": np.ones(10, np.float32)}, variant="vec4")


@pytest.mark.parametrize("d", [4, 12, 5, 20])
def test_vec8_forced_on_d_not_of_8_is_rejected(kernel, d):
    with pytest.raises(errors.VariantRejectedError, match=rf"'D % 8 == 0' is false \(with D={d}"):
        kernel({"X": np.ones((1, 2, 2 * d), np.float16), "bias": np.ones(2 * d, np.float16)}, variant="vec8")


@pytest.mark.parametrize("shape", [(1, 1, 16), (0, 2, 16)], ids=["d-8", "empty"])
def test_vec8_forced_on_float32_is_rejected(kernel, shape):
    """float32 is vec4's (16 bytes a load already), an empty call too: vec8 had accepted an empty
    float32 call only so that validate --strict compiled it for both dtypes, before test.json's
    refusal case could say that vec8 is meant for float16 only."""
    x, bias = np.ones(shape, np.float32), np.ones(shape[2], np.float32)
    with pytest.raises(errors.VariantRejectedError, match=r"\"dtypes.T == 'f16'\" is false \(with dtypes.T='f32'\)"):
        kernel({"X": x, "bias": bias}, variant="vec8")


def test_validate_takes_vec8_on_float32_as_refused_on_purpose():
    """vec8 x float32 compiles nothing, and --strict passes: vec8-forced-on-f32 expects the refusal."""
    report = validate_package(PACKAGE)
    status = {(c.variant, c.dtype): c.status for c in report.coverage}
    assert status[("vec8", "float32")] == "refused, as test.json expects (case vec8-forced-on-f32)"
    assert status[("vec8", "float16")] == "compiled"
    assert not report.package_warnings and report.uncompiled == 0, report.package_warnings


# --- random shapes -------------------------------------------------------------------------------


@st.composite
def calls(draw_):
    n, s = draw_(st.integers(0, 3)), draw_(st.integers(0, 9))
    d = draw_(st.sampled_from([0, 1, 2, 3, 4, 5, 8, 12, 16, 20, 24, 33, 64, 130]))
    wg = draw_(st.sampled_from([1, 7, 64, 256]))
    return (n, s, 2 * d), draw_(st.sampled_from(DTYPES)), wg, draw_(st.floats(0.1, 8.0)), draw_(st.integers(0, 2**32 - 1))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(call=calls())
def test_property_random_shapes(kernel, has_f16, call):
    """Random N, S and D (empty, odd, multiples of 4 and of 8), dtypes, value scales and workgroup sizes, on
    every variant that accepts them, against the float64 reference."""
    shape, dtype, wg, std, seed = call
    if dtype == np.float16 and not has_f16:
        return
    rng = np.random.default_rng(seed)
    x, bias = draw(rng, shape, dtype, std), draw(rng, shape[2:], dtype, std / 2)
    tunables = {"WORKGROUP_SIZE": wg}
    variants = accepted(kernel, x, bias, tunables)
    assert variants == expected_variants(shape, dtype), variants
    for variant in variants:
        assert_split_gelu(run(kernel, x, bias, variant=variant, tunables=tunables), x, bias)
