"""tests/packages/ai.onnx.DynamicQuantizeLinear: ONNX DynamicQuantizeLinear-11, written from the format
documents alone and run through load_kernel() with no engine change.

Semantics (the ONNX definition, whose function body computes in float32, with onnxruntime's CPU kernel
where the definition is silent): ``x_min = min(0, min(x))``, ``x_max = max(0, max(x))``, ``y_scale =
(x_max - x_min) / 255`` (1 where the two are equal: onnxruntime's choice; the function body would make
the zero point 0/0, and onnx's reference implementation gives 1/255), ``y_zero_point =
round(saturate(0 - x_min / y_scale))``, ``y = saturate(round(x / y_scale) + y_zero_point)``, rounding half
to even and saturating to [0, 255]. A NaN of x takes no part in the range and quantizes to 0; a NaN
zero point (``-inf / inf``) saturates to 255, as onnxruntime's ``std::min``/``std::max`` make it.

The reference below runs in float64 and rounds to float32 after each step of the function body (a
float64 sum, difference or quotient of float32 values rounded to float32 is the float32 operation's
correctly rounded result). onnxruntime's CPU kernel gives the same outputs bit for bit on data without
NaN; with a NaN its SIMD minimum and maximum drop other elements or keep the NaN depending on the NaN's
lane, so NaN cases are judged against the reference alone (``test_onnxruntime_nan_depends_on_the_lane``
records it). WGSL's f32 division is accurate to 2.5 ULP, not correctly rounded: where the device divides
exactly (lavapipe) the kernel matches bit for bit, and elsewhere y_scale may be 2 ULP off and a quotient
within a few ULP of a half-integer may round to the neighbouring code, which ``check`` allows and
nothing else.

test.json's expected values come from ``expect_reference``: ``webgpu-kernels expect
tests/packages/ai.onnx.DynamicQuantizeLinear --reference
tests/test_dynamic_quantize_linear_package.py:expect_reference``.
"""

from __future__ import annotations

import functools
import json

import numpy as np
import pytest

import webgpu_kernels as wk
from webgpu_kernels import errors

from conftest import (
    PACKAGES_DIR,
    assert_engine_has_no_code_for,
    assert_valid_and_passing,
    poison_outputs,
    stored_expectations,
)

PACKAGE_NAME = "ai.onnx.DynamicQuantizeLinear"
PACKAGE = PACKAGES_DIR / PACKAGE_NAME
VARIANTS = ["single", "atomic"]
F32_ULP = 2.0**-23


# --- reference (also `webgpu-kernels expect`'s) ------------------------------------------------------


def f32(v) -> np.ndarray:
    """Round float64 values to float32 and back (overflow gives inf, as float32 arithmetic does)."""
    with np.errstate(over="ignore"):
        return np.asarray(v, np.float64).astype(np.float32).astype(np.float64)


def quant_params(x: np.ndarray) -> tuple[float, float]:
    """(y_scale, y_zero_point) of float32 ``x``, each step rounded to float32."""
    finite = np.asarray(x, np.float32).astype(np.float64).ravel()
    finite = finite[~np.isnan(finite)]
    lo = min(0.0, float(finite.min())) if finite.size else 0.0
    hi = max(0.0, float(finite.max())) if finite.size else 0.0
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        scale = 1.0 if hi == lo else float(f32(f32(hi - lo) / 255.0))
        initial = 0.0 - float(f32(lo / scale))
    zero_point = 255.0 if np.isnan(initial) else float(np.rint(min(255.0, max(0.0, initial))))
    return scale, zero_point


def quantize(x: np.ndarray, scale: float, zero_point: float) -> np.ndarray:
    """saturate(round_half_even(float32(x / scale)) + zero_point) as uint8; a NaN quotient is 0."""
    with np.errstate(invalid="ignore", divide="ignore"):
        q = f32(np.asarray(x, np.float32).astype(np.float64) / np.float64(np.float32(scale)))
        y = np.clip(np.rint(q) + zero_point, 0, 255)
    return np.where(np.isnan(q), 0, y).astype(np.uint8)


def dynamic_quantize_linear(x: np.ndarray) -> tuple[np.ndarray, float, float]:
    scale, zero_point = quant_params(x)
    return quantize(x, scale, zero_point), scale, zero_point


def expect_reference(inputs: dict, attrs: dict) -> dict:
    """For `webgpu-kernels expect`: inputs as `test` builds them (x widened to float64 from float32)."""
    y, scale, zero_point = dynamic_quantize_linear(inputs["x"].astype(np.float32))
    return {"y": y.astype(np.float64), "y_scale": np.array(scale), "y_zero_point": np.array(zero_point)}


@functools.lru_cache(maxsize=None)
def ort_session(rank: int):
    """A one-node DynamicQuantizeLinear-11 model on onnxruntime's CPU provider (symbolic dimensions)."""
    pytest.importorskip("onnxruntime")
    pytest.importorskip("onnx")
    from onnx import TensorProto, helper

    from references import one_node_session

    vi = helper.make_tensor_value_info
    node = helper.make_node("DynamicQuantizeLinear", ["x"], ["y", "y_scale", "y_zero_point"])
    dims = [f"d{i}" for i in range(rank)]
    outputs = [
        vi("y", TensorProto.UINT8, dims),
        vi("y_scale", TensorProto.FLOAT, []),
        vi("y_zero_point", TensorProto.UINT8, []),
    ]
    return one_node_session(node, [vi("x", TensorProto.FLOAT, dims)], outputs, 11)


def ort_dql(x: np.ndarray) -> tuple[np.ndarray, float, float]:
    y, scale, zero_point = ort_session(x.ndim).run(None, {"x": x})
    assert scale.shape == () and zero_point.shape == ()
    return y, float(scale), float(zero_point)


def near_half(q: np.ndarray, ulps: float = 8.0) -> np.ndarray:
    """Where a float32 quotient lies within ``ulps`` ULP of a half-integer: a 2.5-ULP division may
    round it to either code."""
    q = np.asarray(q, np.float64)
    return np.abs(np.abs(q - np.floor(q)) - 0.5) <= ulps * F32_ULP * np.maximum(np.abs(q), 1.0)


def check(got: dict, x: np.ndarray, what: str) -> None:
    """The kernel's outputs against the reference: y_scale within 3 ULP (exact where the device
    divides exactly), the zero point exact unless its quotient is near a tie, and y the reference's
    quantization of x with the kernel's own scale and zero point, exact except near ties."""
    y, scale, zero_point = got["y"], got["y_scale"], got["y_zero_point"]
    assert y.dtype == np.uint8 and y.shape == x.shape, what
    assert (
        scale.dtype == np.float32 and scale.shape == () and zero_point.dtype == np.uint8 and zero_point.shape == ()
    ), what
    want_scale, want_zp = quant_params(x)
    if np.isfinite(want_scale):
        assert abs(float(scale) - want_scale) <= 3 * F32_ULP * want_scale, (what, float(scale), want_scale)
    else:
        assert float(scale) == want_scale, what
    finite = x[~np.isnan(x)]
    lo = min(0.0, float(finite.min())) if finite.size else 0.0
    with np.errstate(invalid="ignore", divide="ignore"):
        zp_quotient = -lo / float(scale)
    if float(zero_point) != want_zp:
        assert abs(float(zero_point) - want_zp) == 1 and near_half(zp_quotient), (what, int(zero_point), want_zp)
    want = quantize(x, float(scale), float(zero_point))
    off = y != want
    if off.any():
        with np.errstate(invalid="ignore", divide="ignore"):
            q = x.astype(np.float64) / float(scale)
        assert np.all(np.abs(y[off].astype(int) - want[off]) == 1) and np.all(near_half(q[off])), (what, int(off.sum()))


def run(kernel: wk.Kernel, x: np.ndarray, *, variant=None, tunables=None, with_ort: bool = True) -> dict:
    """One call (outputs poisoned first, x untouched), checked against the reference and, where x has
    no NaN, onnxruntime."""
    inputs = {"x": x}
    before = x.copy()
    poison_outputs(kernel, inputs, tunables=tunables)
    got = kernel(inputs, variant=variant, tunables=tunables)
    np.testing.assert_array_equal(x.reshape(-1).view(np.uint8), before.reshape(-1).view(np.uint8))
    what = f"x {x.shape}, variant {variant}, {tunables}"
    check(got, x, what)
    if with_ort and not np.isnan(x).any():
        y, scale, zero_point = ort_dql(x)
        check({"y": y, "y_scale": np.float32(scale), "y_zero_point": np.uint8(zero_point)}, x, what + " (onnxruntime)")
        if float(got["y_scale"]) == scale and int(got["y_zero_point"]) == zero_point:
            assert np.abs(got["y"].astype(int) - y).max(initial=0) <= 1, what
    return got


@pytest.fixture(scope="module")
def dql_kernel() -> wk.Kernel:
    return wk.load_kernel(PACKAGE)


# --- the package ----------------------------------------------------------------------------------


def test_package_files(dql_kernel):
    names = sorted(p.name for p in PACKAGE.iterdir() if not p.name.endswith(".npy"))
    assert names == ["bench.json", "dql-common.wgsl.jinja", "dql-init.wgsl.jinja", "dql-quantize.wgsl.jinja",
                     "dql-reduce.wgsl.jinja", "dql-single.wgsl.jinja", "manifest.json", "metadata.json", "test.json"]  # fmt: skip
    data = json.loads((PACKAGE / "manifest.json").read_text("utf-8"))
    assert (data["domain"], data["name"], data["sinceVersion"]) == ("ai.onnx", "DynamicQuantizeLinear", 11)
    assert data["typeConstraints"] == {"T1": ["float32"], "T2": ["uint8"], "TS": ["float32"]}
    assert dql_kernel.op_id == PACKAGE_NAME and dql_kernel.variants == VARIANTS


def test_engine_has_no_code_for_it():
    assert_engine_has_no_code_for("DynamicQuantizeLinear")


def test_validates_and_its_test_json_passes(dql_kernel):
    assert_valid_and_passing(dql_kernel, PACKAGE, VARIANTS)


def test_expected_outputs_are_the_reference(dql_kernel):
    """test.json's stored outputs are this module's reference of the case's inputs."""
    checked = 0
    for case, inputs, stored in stored_expectations(dql_kernel, "y", lambda ins: "uint8"):
        y, _, _ = dynamic_quantize_linear(inputs["x"])
        np.testing.assert_array_equal(stored, y.astype(np.float64), err_msg=case.name)
        checked += 1
    assert checked == 19


def test_selection_and_the_rank_0_outputs(dql_kernel):
    """single up to SINGLE_MAX elements, atomic above; y_scale and y_zero_point are rank 0."""
    small = dql_kernel.explain({"x": ((1, 1, 4096), "float32")})
    large = dql_kernel.explain({"x": ((1, 128, 768), "float32")})
    assert small.chosen == "single" and large.chosen == "atomic"
    assert [(o.role, tuple(o.shape), o.dtype) for o in small.outputs] == [
        ("y", (1, 1, 4096), "uint8"), ("y_scale", (), "float32"), ("y_zero_point", (), "uint8")]  # fmt: skip


# --- real-model shapes ----------------------------------------------------------------------------

# Scaled where the full sizes would slow lavapipe (bench.json has 8x128x768 and 1x512x4096).
MODEL_SHAPES = {
    "bert-base-1x128x768": (1, 128, 768),
    "bert-base-2x128x768": (2, 128, 768),  # 8x128x768 in bench.json
    "llm-decode-1x1x4096": (1, 1, 4096),
    "llm-prefill-1x64x4096": (1, 64, 4096),  # 1x512x4096 in bench.json
}


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("model", list(MODEL_SHAPES))
def test_model_shapes(dql_kernel, rng, model, variant):
    """Normal activations with a few outliers, as a transformer's hidden states have."""
    x = (rng.standard_normal(MODEL_SHAPES[model]) * 0.8).astype(np.float32)
    flat = x.reshape(-1)
    flat[rng.integers(0, flat.size, 3)] = [14.0, -9.5, 6.25]
    run(dql_kernel, x, variant=variant, tunables={"SINGLE_MAX": x.size})


# --- semantics ------------------------------------------------------------------------------------


@pytest.mark.parametrize("variant", VARIANTS)
def test_odd_counts_and_signs(dql_kernel, rng, variant):
    """Element counts of every residue mod 4 (a word of y holds four codes), all-positive, all-negative
    and mixed data, over one and several workgroups."""
    for n in (1, 2, 3, 5, 6, 7, 255, 1021, 1022, 1023, 4097):
        for low, high in ((-3.0, 5.0), (0.125, 7.0), (-6.0, -0.5)):
            x = rng.uniform(low, high, n).astype(np.float32)
            got = run(dql_kernel, x, variant=variant, tunables={"SINGLE_MAX": n, "WORKGROUP_SIZE": 64, "ITEMS": 2})
            if low > 0:
                assert int(got["y_zero_point"]) == 0 and got["y"].max() == 255
            if high < 0:
                assert int(got["y_zero_point"]) == 255 and got["y"].min() == 0


@pytest.mark.parametrize("variant", VARIANTS)
def test_zeros_empty_and_rank_0(dql_kernel, variant):
    """A range of 0 gives scale 1 and zero point 0, as onnxruntime does; an empty x too."""
    for x in (np.zeros((3, 5), np.float32), np.full(4, -0.0, np.float32), np.zeros((0, 768), np.float32)):
        got = run(dql_kernel, x, variant=variant)
        assert float(got["y_scale"]) == 1.0 and int(got["y_zero_point"]) == 0 and not got["y"].any()
    got = run(dql_kernel, np.array(-3.5, np.float32), variant=variant)
    assert (int(got["y"]), int(got["y_zero_point"])) == (0, 255)


def test_hand_computed_codes(dql_kernel):
    """Range [-1, 2]: scale 3/255, zero point 85; a tie of x / scale goes to the even code."""
    x = np.array([-1.0, 0.0, 2.0, 0.5, -0.25, 1.0], np.float32)
    for variant in VARIANTS:
        got = run(dql_kernel, x, variant=variant)
        assert float(got["y_scale"]) == float(np.float32(np.float32(3.0) / np.float32(255.0)))
        assert int(got["y_zero_point"]) == 85
        # 0.5 / scale is 42.5 exactly in float32: the even code 42 + 85 where the device divides
        # exactly, either neighbour where a 2.5-ULP division lands beside the tie
        np.testing.assert_array_equal(np.delete(got["y"], 3), [0, 85, 255, 64, 170])
        assert int(got["y"][3]) in (127, 128)


@pytest.mark.parametrize("variant", VARIANTS)
def test_special_values(dql_kernel, variant):
    """NaN is skipped and quantizes to 0; infinities and an overflowing range give an infinite scale,
    each as onnxruntime gives it (checked against it where x has no NaN). The first row's 2 / scale is
    127.49999 in float32 (code 191), near a tie: ``run``'s check holds it."""
    nan, inf = np.nan, np.inf
    for values, codes, scale, zero_point in [
        ([nan, 1.0, -1.0, 2.0, nan, 0.5, 3.0], [0, 128, 0, None, 0, 96, 255], 4.0 / 255, 64),
        ([nan] * 5, [0] * 5, 1.0, 0),
        ([inf, 1.0, -1.0, 0.0, 3.0], [0, 0, 0, 0, 0], inf, 0),
        ([-inf, 1.0, -2.0], [0, 255, 255], inf, 255),
        ([3e38, -3e38, 1.0], [0, 0, 0], inf, 0),
    ]:
        x = np.array(values, np.float32)
        got = run(dql_kernel, x, variant=variant)
        known = [i for i, c in enumerate(codes) if c is not None]
        np.testing.assert_array_equal(got["y"][known], [codes[i] for i in known], err_msg=str(values))
        assert float(got["y_scale"]) == float(np.float32(scale)) and int(got["y_zero_point"]) == zero_point, values


def test_onnxruntime_nan_depends_on_the_lane():
    """onnxruntime 1.32's CPU min and max of data holding a NaN depend on the NaN's position (its SIMD
    lanes): the same values with the NaN moved give different scales, one of them NaN. The package
    skips every NaN instead, so NaN cases are judged against the reference alone."""
    x = np.linspace(-3.0, 5.0, 16, dtype=np.float32)
    scales = set()
    for pos in range(16):
        z = x.copy()
        z[pos] = np.nan
        scales.add(str(ort_dql(z)[1]))
    assert "nan" in scales and len(scales) > 2


def test_workgroup_sizes_and_items(dql_kernel, rng):
    x = rng.standard_normal(3001).astype(np.float32)
    for wg, items in ((1, 1), (64, 3), (100, 16), (256, 4), (1024, 1)):
        for variant in VARIANTS:
            run(dql_kernel, x, variant=variant, tunables={"WORKGROUP_SIZE": wg, "ITEMS": items, "SINGLE_MAX": 4096})


def test_x_written_nowhere_and_one_pipeline_per_pass(dql_kernel):
    """The atomic variant renders three passes, the padding words of y_scale as its scratch; no pass
    enables f16."""
    texts = dql_kernel.render({"x": np.zeros((1, 128, 768), np.float32)})
    assert list(texts) == ["init", "reduce", "quantize"]
    assert "var<storage, read_write> y_scale: array<atomic<u32>>" in texts["reduce"]
    assert all("enable f16" not in t for t in texts.values())
    assert list(dql_kernel.render({"x": np.zeros(4096, np.float32)})) == ["main"]


# --- contract -------------------------------------------------------------------------------------


def test_refusals(dql_kernel):
    with pytest.raises(errors.DTypeError):
        dql_kernel({"x": np.zeros(4, np.float16)})
    with pytest.raises(errors.UnknownInputError):
        dql_kernel({"x": np.zeros(4, np.float32)}, attrs={"axis": 1})
    with pytest.raises(errors.VariantRejectedError, match="small=False"):
        dql_kernel({"x": np.zeros(20000, np.float32)}, variant="single")
    with pytest.raises(errors.SelectionError, match="itemsOk=False"):
        dql_kernel({"x": np.zeros(20000, np.float32)}, tunables={"ITEMS": 17})


@pytest.mark.parametrize("variant", VARIANTS)
def test_the_scale_is_the_correctly_rounded_quotient_over_every_exponent(dql_kernel, variant):
    """y_scale is (max - min) / 255 rounded to nearest even, as onnxruntime divides: the template
    takes the quotient in integers (div255), since WGSL allows an f32 division 2.5 ULP of error and
    an H100 returned 3 / 255 one ULP above it (run BB, session 57). Ranges over every exponent the
    integer path takes, with significands at and beside rounding ties (m * 512 / 255 dropping
    exactly half a unit), each x holding just 0 and the range's end."""
    rng = np.random.default_rng(57)
    ends = [np.float32(3.0), np.float32(255.0), np.float32(1.0), np.float32(2.0 ** -118), np.float32(3.0e38)]
    ends += list(np.ldexp(rng.uniform(1.0, 2.0, 40), rng.integers(-117, 127, 40)).astype(np.float32))
    ends += [np.nextafter(e, np.float32(np.inf)) for e in ends[:5]]
    ends += list(np.float32(np.arange(1, 256)) * np.float32(2.0 ** -20))  # significands of few bits: exact quotients and ties
    for end in ends:
        for x in (np.array([0.0, end], np.float32), np.array([-end, 0.0], np.float32)):
            got = dql_kernel({"x": x}, variant=variant)
            want = np.float32(np.float32(end) / np.float32(255.0))
            assert got["y_scale"].view(np.uint32) == want.view(np.uint32), (float(end), float(got["y_scale"]), float(want))
