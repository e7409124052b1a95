"""tests/packages/demo.Upsample: a third-party package written from the docs alone by a kernel
author: nearest-neighbour 2-D upsampling of an NCHW tensor by the integer attributes
scale_h and scale_w, as the Stable Diffusion UNet's Upsample2D (`F.interpolate(x,
scale_factor=2.0, mode="nearest")`), run through load_kernel() with no engine change. It stresses
an output shape computed from an input and two attributes (read through derive entries with a
harmless fallback, so that a scale below 1 is a SelectionError naming the clause), a vec4 variant
that moves float16 as u32 words without shader-f16, and a grid past 65,535 workgroups.

An upsampling copies values, so results are judged bit for bit against
`x.repeat(scale_h, axis=2).repeat(scale_w, axis=3)`: NaN payloads, signed zeros and subnormals
must pass unchanged.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

import webgpu_kernels as wk
from webgpu_kernels import errors
from webgpu_kernels.manifest import check_manifest

from conftest import (
    BITS,
    DTYPE_IDS,
    DTYPES,
    PACKAGES_DIR,
    assert_engine_has_no_code_for,
    assert_valid_and_passing,
    poison_outputs,
    stored_expectations,
)

PACKAGE = PACKAGES_DIR / "demo.Upsample"
VARIANTS = ("vec4", "scalar")


@pytest.fixture(scope="module")
def upsample():
    return wk.load_kernel(PACKAGE)


def reference(x: np.ndarray, sh: int, sw: int) -> np.ndarray:
    return x.repeat(sh, axis=2).repeat(sw, axis=3)


def draw(rng, shape, dtype) -> np.ndarray:
    return np.asarray((rng.standard_normal(shape) * 100).astype(dtype))


def assert_upsampled(out: np.ndarray, x: np.ndarray, sh: int, sw: int) -> None:
    """out is x repeated sh times along H and sw times along W, with the same dtype and bits."""
    want = reference(x, sh, sw)
    assert out.shape == want.shape and out.dtype == want.dtype == x.dtype, (out.shape, want.shape)
    bits = BITS[out.dtype]
    bad = out.reshape(-1).view(bits) != want.reshape(-1).view(bits)
    assert not bad.any(), f"{int(bad.sum())} of {out.size} elements differ; first at {np.argwhere(bad)[0]}"


def attrs_of(sh: int, sw: int) -> dict:
    return {"scale_h": sh, "scale_w": sw}


def run(upsample, x, sh, sw, **options) -> np.ndarray:
    inputs = {"X": x}
    poison_outputs(upsample, inputs, attrs=attrs_of(sh, sw), tunables=options.get("tunables"))
    before = np.array(x, copy=True)
    out = upsample(inputs, attrs=attrs_of(sh, sw), **options)["Y"]
    assert np.array_equal(x, before, equal_nan=True)
    return out


def accepted(upsample, x, sh, sw, tunables=None) -> list[str]:
    explanation = upsample.explain({"X": x}, attrs=attrs_of(sh, sw), tunables=tunables)
    return [v.variant for v in explanation.verdicts if v.accepted]


# --- the package ---------------------------------------------------------------------------------


def test_package_files():
    data = json.loads((PACKAGE / "manifest.json").read_text("utf-8"))
    assert check_manifest(data) == []
    assert [(v["id"], v["priority"]) for v in data["variants"]] == [("vec4", 10), ("scalar", 0)]
    assert data["typeConstraints"] == {"T": ["float32", "float16"]}
    assert data["attributes"] == {"scale_h": 2, "scale_w": 2}


def test_engine_has_no_code_for_it():
    assert_engine_has_no_code_for("demo.Upsample")


def test_validates_and_its_test_json_passes(upsample):
    assert_valid_and_passing(upsample, PACKAGE, VARIANTS)


def test_expected_outputs_are_the_reference(upsample):
    """test.json's expected outputs are the NumPy repeat of the cases' inputs (written by `expect`
    with that reference, and by hand for the hand- cases), independent of the WGSL."""
    checked = 0
    for case, ins, stored in stored_expectations(upsample, "Y", lambda ins: ins["X"].dtype.name):
        attrs = {"scale_h": 2, "scale_w": 2, **case.attrs}
        want = reference(ins["X"], attrs["scale_h"], attrs["scale_w"])
        assert stored.shape == want.shape, case.name
        np.testing.assert_array_equal(stored, want.astype(stored.dtype), err_msg=case.name)
        checked += 1
    assert checked >= 15


# --- results -------------------------------------------------------------------------------------

# SD 1.5 UNet Upsample2D inputs (2x1280x8x8, 2x1280x16x16, 2x640x32x32) with the channels cut
# down, then odd widths, scale 1 and unequal scales.
CALLS = [
    ((2, 40, 8, 8), 2, 2),
    ((2, 20, 16, 16), 2, 2),
    ((1, 8, 32, 32), 2, 2),
    ((2, 3, 5, 3), 3, 1),
    ((1, 3, 5, 3), 1, 4),
    ((1, 2, 3, 5), 2, 4),
    ((2, 2, 3, 7), 4, 3),
    ((1, 1, 1, 1), 1, 1),
    ((3, 1, 2, 2), 1, 2),
    ((0, 4, 3, 3), 2, 2),
    ((2, 3, 0, 4), 2, 2),
]


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("call", CALLS, ids=lambda c: "x".join(map(str, c[0])) + f"-{c[1]}x{c[2]}")
def test_shapes_on_every_variant_that_takes_them(upsample, rng, need_dtype, call, dtype):
    need_dtype(dtype)
    shape, sh, sw = call
    x = draw(rng, shape, dtype)
    variants = accepted(upsample, x, sh, sw)
    assert "scalar" in variants and ("vec4" in variants) == (shape[3] * sw % 4 == 0), variants
    for variant in variants:
        assert_upsampled(run(upsample, x, sh, sw, variant=variant), x, sh, sw)


def test_the_default_is_scale_2_and_vec4(upsample, rng):
    x = draw(rng, (2, 4, 3, 2), np.float32)
    assert upsample.explain({"X": x}).chosen == "vec4"
    assert_upsampled(upsample({"X": x})["Y"], x, 2, 2)


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_special_values_pass_bit_for_bit(upsample, need_dtype, variant, dtype):
    """NaNs with payloads, infinities, signed zeros and subnormals are copied as they are."""
    need_dtype(dtype)
    if dtype == np.float16:  # a NaN with a payload, a negative one, +-subnormals, -0, inf, 1, -2
        words = [0x7C01, 0xFE12, 0x0001, 0x8001, 0x8000, 0x7C00, 0x3C00, 0xC000]
    else:
        words = [0x7F800001, 0xFFC01234, 0x00000001, 0x80000001, 0x80000000, 0x7F800000, 0x3F800000, 0xC0000000]
    x = np.array(words + words[::-1], BITS[np.dtype(dtype)]).view(dtype).reshape(1, 2, 2, 4)
    assert_upsampled(run(upsample, x, 2, 3, variant=variant), x, 2, 3)


@pytest.mark.parametrize("variant", VARIANTS)
def test_many_invocations_spill_the_grid(upsample, plan_of, rng, variant):
    """More than 65,535 workgroups at WORKGROUP_SIZE 1: the grid spills into y, and each output
    element is still written once."""
    x = draw(rng, (1, 1, 256, 256), np.float32)  # 262,144 output elements, 65,536 groups of 4
    tunables = {"WORKGROUP_SIZE": 1}
    grid = plan_of(upsample, {"X": x}, variant=variant, attrs=attrs_of(2, 2), tunables=tunables).passes[0].grid
    assert grid[1] > 1 and grid[0] * grid[1] * grid[2] >= 65_536
    assert_upsampled(run(upsample, x, 2, 2, variant=variant, tunables=tunables), x, 2, 2)


@pytest.mark.parametrize("wg", [1, 7, 64, 1024])
def test_workgroup_sizes(upsample, need_workgroup_size, rng, wg):
    need_workgroup_size(wg)
    x = draw(rng, (1, 3, 5, 6), np.float32)
    for variant in VARIANTS:
        assert_upsampled(run(upsample, x, 3, 2, variant=variant, tunables={"WORKGROUP_SIZE": wg}), x, 3, 2)


def test_non_contiguous_inputs_and_gpu_tensors(upsample, rng):
    x = draw(rng, (4, 3, 2, 2), np.float32).transpose(3, 2, 1, 0)  # (2, 2, 3, 4), Fortran order
    first = upsample({"X": wk.to_gpu(x)}, attrs=attrs_of(1, 2), output="gpu")["Y"]
    assert isinstance(first, wk.GpuTensor) and first.shape == (2, 2, 3, 8)
    again = upsample({"X": first}, attrs=attrs_of(2, 1), variant="scalar")["Y"]
    assert_upsampled(again, np.ascontiguousarray(x), 2, 2)
    first.release()


def test_the_vec4_variant_runs_without_shader_f16(upsample, gl_device, rng):
    """vec4 moves float16 as u32 words, so it runs on lavapipe's OpenGL adapter, an odd W too
    (rows starting at the high half of a word); scalar names f16, and forcing it there is the
    adapter's DeviceLimitError (its f16Ok guard)."""
    for shape, sh, sw in (((2, 3, 4, 4), 2, 2), ((1, 2, 3, 5), 3, 4)):
        x = draw(rng, shape, np.float16)
        assert_upsampled(upsample({"X": x}, attrs=attrs_of(sh, sw), adapter="gl")["Y"], x, sh, sw)
    x = draw(rng, (1, 1, 2, 3), np.float16)
    with pytest.raises(errors.DeviceLimitError, match="shader-f16"):
        upsample({"X": x}, attrs=attrs_of(1, 3), adapter="gl")


# --- refusals ------------------------------------------------------------------------------------


@pytest.mark.parametrize("name, value", [("scale_h", 0), ("scale_h", -2), ("scale_w", 0), ("scale_w", -1),
                                         ("scale_h", 2**32), ("scale_w", 2**62)])  # fmt: skip
def test_a_scale_out_of_range_leaves_no_variant(upsample, name, value):
    """Below 1, or past a u32 (the uniform field, and an output shape of 2^62 elements, which
    would be the shape's ExpressionError): the attribute is read through a derive entry with a
    fallback, so that `when` names the clause (docs/format.md)."""
    clause = "scaleHOk" if name == "scale_h" else "scaleWOk"
    with pytest.raises(errors.SelectionError, match=f"{clause}=False"):
        upsample({"X": np.ones((1, 1, 2, 2), np.float32)}, attrs={name: value})


@pytest.mark.parametrize("value", [1.5, "2", True, [2]])
def test_a_scale_that_is_no_integer_is_the_callers_error(upsample, value):
    with pytest.raises(errors.AttributeValueError):
        upsample({"X": np.ones((1, 1, 2, 2), np.float32)}, attrs={"scale_w": value})


def test_an_integral_float_scale_is_taken(upsample, rng):
    x = draw(rng, (1, 1, 2, 2), np.float32)
    assert_upsampled(upsample({"X": x}, attrs={"scale_h": 3.0})["Y"], x, 3, 2)


@pytest.mark.parametrize("shape", [(2, 3, 4), (1, 1, 2, 2, 2), ()])
def test_only_rank_4_is_taken(upsample, shape):
    with pytest.raises(errors.RankError, match="rank 4"):
        upsample({"X": np.ones(shape, np.float32)})


def test_other_dtypes_and_unknown_attributes_are_refused(upsample):
    with pytest.raises(errors.DTypeError):
        upsample({"X": np.ones((1, 1, 2, 2), np.int32)})
    with pytest.raises(errors.UnknownInputError):
        upsample({"X": np.ones((1, 1, 2, 2), np.float32)}, attrs={"scale": 2})


def test_vec4_forced_on_a_row_not_of_4_is_rejected(upsample):
    with pytest.raises(errors.VariantRejectedError, match="rowsOf4=False"):
        upsample({"X": np.ones((1, 1, 2, 3), np.float32)}, variant="vec4")
