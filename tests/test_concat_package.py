"""tests/packages/demo.Concat: a third-party package written from the docs alone by a kernel author
: ONNX Concat of two inputs A and B along the integer attribute axis (negative counted
from the end), as in Stable Diffusion UNet skip connections, run through load_kernel() with no
engine change. It stresses an output shape computed from two inputs and an attribute, a required
ONNX attribute (the format has none: its default is refused), a rank tied to another input's
(`"rank": "ranks.A"`), and a vec4 variant that copies float16 as u32 words without shader-f16.

A concatenation copies values, so results are judged bit for bit against np.concatenate: NaN
payloads, signed zeros and subnormals must pass unchanged.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

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

PACKAGE = PACKAGES_DIR / "demo.Concat"
VARIANTS = ("vec4", "scalar")


@pytest.fixture(scope="module")
def concat():
    return wk.load_kernel(PACKAGE)


def draw(rng, shape, dtype) -> np.ndarray:
    return np.asarray((rng.standard_normal(shape) * 100).astype(dtype))


def assert_concatenated(out: np.ndarray, a: np.ndarray, b: np.ndarray, axis: int) -> None:
    """out is np.concatenate((a, b), axis), with the same shape and dtype and the same bits."""
    want = np.concatenate((a, b), axis=axis)
    assert out.shape == want.shape and out.dtype == want.dtype == a.dtype, (out.shape, want.shape)
    bits = BITS[out.dtype]
    got_bits, want_bits = out.reshape(-1).view(bits), want.reshape(-1).view(bits)
    bad = got_bits != want_bits
    assert not bad.any(), f"{int(bad.sum())} of {out.size} elements differ; first at {np.argwhere(bad)[0]}"


def run(concat, a, b, axis, **options) -> np.ndarray:
    inputs = {"A": a, "B": b}
    poison_outputs(concat, inputs, attrs={"axis": axis}, tunables=options.get("tunables"))
    before = {k: np.array(v, copy=True) for k, v in inputs.items()}
    out = concat(inputs, attrs={"axis": axis}, **options)["Y"]
    for name, value in inputs.items():
        assert np.array_equal(value, before[name], equal_nan=True), name
    return out


def accepted(concat, a, b, axis, tunables=None) -> list[str]:
    explanation = concat.explain({"A": a, "B": b}, attrs={"axis": axis}, tunables=tunables)
    return [v.variant for v in explanation.verdicts if v.accepted]


def blocks_of_four(a_shape, b_shape, axis) -> bool:
    """The vec4 variant's condition: A's and B's blocks (the axis and the dimensions after it) are
    multiples of 4 elements."""
    ax = axis % len(a_shape)
    inner = int(np.prod(a_shape[ax + 1:], dtype=np.int64))
    return (a_shape[ax] * inner) % 4 == 0 and (b_shape[ax] * inner) % 4 == 0


# --- the package ---------------------------------------------------------------------------------


def test_package_files():
    data = json.loads((PACKAGE / "manifest.json").read_text("utf-8"))
    assert check_manifest(data) == []
    assert [(v["id"], v["priority"]) for v in data["variants"]] == [("vec4", 10), ("scalar", 0)]
    assert data["typeConstraints"] == {"T": ["float32", "float16"]}


def test_engine_has_no_code_for_it():
    assert_engine_has_no_code_for("demo.Concat")


def test_validates_and_its_test_json_passes(concat):
    assert_valid_and_passing(concat, PACKAGE, VARIANTS)


def test_expected_outputs_are_the_reference(concat):
    """test.json's expected outputs are np.concatenate of the cases' inputs (written by `expect`
    with such a reference, and by hand for the hand- cases), independent of the WGSL."""
    checked = 0
    for case, ins, stored in stored_expectations(concat, "Y", lambda ins: ins["A"].dtype.name):
        want = np.concatenate((ins["A"], ins["B"]), axis=case.attrs["axis"])
        assert stored.shape == want.shape, case.name
        np.testing.assert_array_equal(stored, want.astype(stored.dtype), err_msg=case.name)
        checked += 1
    assert checked >= 20


# --- results -------------------------------------------------------------------------------------

# SD 1.5 UNet decoder skip connections (channels 1280 + 1280, 640 + 320, 320 + 320) with the
# spatial size cut down, then small shapes on every axis, negative ones included.
CALLS = [
    ((2, 1280, 2, 2), (2, 1280, 2, 2), 1),
    ((2, 640, 4, 4), (2, 320, 4, 4), 1),
    ((2, 320, 3, 3), (2, 320, 3, 3), -3),
    ((5,), (3,), 0),
    ((2, 3, 5), (2, 3, 2), -1),
    ((1, 3, 4), (2, 3, 4), 0),
    ((3, 7), (3, 1), 1),
    ((2, 4), (2, 0), 1),
    ((0, 3), (4, 3), -2),
    ((0, 3), (0, 5), 1),
]


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("call", CALLS, ids=lambda c: "x".join(map(str, c[0])) + "+" + "x".join(map(str, c[1])) + f"@{c[2]}")
def test_shapes_on_every_variant_that_takes_them(concat, rng, call, dtype):
    a_shape, b_shape, axis = call
    a, b = draw(rng, a_shape, dtype), draw(rng, b_shape, dtype)
    variants = accepted(concat, a, b, axis)
    assert "scalar" in variants and ("vec4" in variants) == blocks_of_four(a_shape, b_shape, axis), variants
    for variant in variants:
        assert_concatenated(run(concat, a, b, axis, variant=variant), a, b, axis)


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_special_values_pass_bit_for_bit(concat, variant, dtype):
    """NaNs with payloads, infinities, signed zeros and subnormals are copied as they are."""
    a = np.array([np.nan, np.inf, -np.inf, -0.0, 0.0, 1.0, -1.0, 65504.0], dtype).reshape(2, 4)
    if dtype == np.float16:  # a NaN with a payload, a negative one, +-subnormals, -0, inf, 1, -2
        words = [0x7C01, 0xFE12, 0x0001, 0x8001, 0x8000, 0x7C00, 0x3C00, 0xC000]
    else:
        words = [0x7F800001, 0xFFC01234, 0x00000001, 0x80000001, 0x80000000, 0x7F800000, 0x3F800000, 0xC0000000]
    b = np.array(words * 2, BITS[np.dtype(dtype)]).view(dtype).reshape(2, 8)
    assert_concatenated(run(concat, a, b, 1, variant=variant), a, b, 1)


@pytest.mark.parametrize("variant", VARIANTS)
def test_many_elements_spill_the_grid(concat, plan_of, rng, variant):
    """More than 65,535 workgroups at WORKGROUP_SIZE 1: the grid spills into y, and each element is
    still written once."""
    a, b = draw(rng, (2, 70_000 * 2), np.float32), draw(rng, (2, 4), np.float32)
    tunables = {"WORKGROUP_SIZE": 1}
    grid = plan_of(concat, {"A": a, "B": b}, variant=variant, attrs={"axis": 1}, tunables=tunables).passes[0].grid
    assert grid[1] > 1 and grid[0] * grid[1] * grid[2] >= 65_536
    assert_concatenated(run(concat, a, b, 1, variant=variant, tunables=tunables), a, b, 1)


def test_non_contiguous_inputs_and_gpu_tensors(concat, rng):
    a = draw(rng, (4, 6), np.float32).T  # (6, 4), Fortran order
    b = wk.to_gpu(draw(rng, (6, 8), np.float32))
    first = concat({"A": a, "B": b}, attrs={"axis": 1}, output="gpu")["Y"]
    assert isinstance(first, wk.GpuTensor) and first.shape == (6, 12)
    again = concat({"A": first, "B": a}, attrs={"axis": -1})["Y"]
    assert_concatenated(again, np.concatenate((a, b.numpy()), axis=1), a, 1)
    first.release()
    b.release()


def test_the_vec4_variant_runs_without_shader_f16(concat, gl_device, rng):
    """vec4 copies float16 as u32 words, so it runs on lavapipe's OpenGL adapter; scalar names f16,
    and forcing it there is the adapter's DeviceLimitError (its f16Ok guard)."""
    a, b = draw(rng, (2, 4, 3), np.float16), draw(rng, (2, 8, 3), np.float16)
    out = concat({"A": a, "B": b}, attrs={"axis": 1}, adapter="gl")["Y"]
    assert_concatenated(out, a, b, 1)
    with pytest.raises(errors.DeviceLimitError, match="shader-f16"):
        concat({"A": a, "B": b}, attrs={"axis": 1}, variant="scalar", adapter="gl")


def test_printing_enables_in_the_bit_copy_would_refuse_it_there(concat, gl_device, rng, tmp_path):
    """docs/format.md: a shader that only moves float16 data as u32 words "leaves `{{ enables }}`
    out: that says `enable f16;` for every call whose type variable is bound to float16, which an
    adapter without `shader-f16` refuses to compile". demo.Concat's template prints it for scalar only."""
    import shutil

    root = shutil.copytree(PACKAGE, tmp_path / "concat")
    (root / "metadata.json").unlink()
    template = root / "concat.wgsl.jinja"
    template.write_text(template.read_text("utf-8").replace("{% if enables and not vec4 %}", "{% if enables %}"), "utf-8")
    a, b = draw(rng, (2, 4), np.float16), draw(rng, (2, 4), np.float16)
    assert concat.render({"A": a, "B": b}, attrs={"axis": 1})["main"].startswith("struct Params")
    with pytest.raises(errors.ShaderCompileError, match="enable"):
        wk.load_kernel(root)({"A": a, "B": b}, attrs={"axis": 1}, adapter="gl")


# --- refusals ------------------------------------------------------------------------------------


def test_axis_is_required(concat):
    x = np.ones((2, 3), np.float32)
    with pytest.raises(errors.SelectionError, match="axisGiven=False"):
        concat({"A": x, "B": x})


@pytest.mark.parametrize("axis", [2, 3, -3, 100])
def test_an_axis_out_of_range_leaves_no_variant(concat, axis):
    x = np.ones((2, 3), np.float32)
    with pytest.raises(errors.SelectionError, match="axisOk=False"):
        concat({"A": x, "B": x}, attrs={"axis": axis})


@pytest.mark.parametrize("a_shape, b_shape, axis", [((2, 3), (3, 3), 1), ((2, 3, 4), (2, 5, 4), 0),
                                                    ((2, 3, 4), (2, 3, 5), -2)])  # fmt: skip
def test_other_dimensions_that_differ_leave_no_variant(concat, a_shape, b_shape, axis):
    with pytest.raises(errors.SelectionError, match="dimsOk=False"):
        concat({"A": np.ones(a_shape, np.float32), "B": np.ones(b_shape, np.float32)}, attrs={"axis": axis})


def test_ranks_must_agree_and_be_1_or_more(concat):
    with pytest.raises(errors.RankError) as info:
        concat({"A": np.ones((2, 3), np.float32), "B": np.ones(3, np.float32)}, attrs={"axis": 0})
    assert info.value.argument == "B"
    with pytest.raises(errors.RankError) as info:
        concat({"A": np.float32(1), "B": np.float32(2)}, attrs={"axis": 0})
    assert info.value.argument == "A"


@pytest.mark.parametrize("axis", [1.5, "1", True])
def test_an_axis_that_is_no_integer_is_the_callers_error(concat, axis):
    x = np.ones((2, 3), np.float32)
    with pytest.raises(errors.AttributeValueError):
        concat({"A": x, "B": x}, attrs={"axis": axis})


def test_other_and_mixed_dtypes_are_refused(concat):
    with pytest.raises(errors.DTypeError):
        concat({"A": np.ones((2, 3), np.int32), "B": np.ones((2, 3), np.int32)}, attrs={"axis": 0})
    with pytest.raises(errors.DTypeError):
        concat({"A": np.ones((2, 3), np.float32), "B": np.ones((2, 3), np.float16)}, attrs={"axis": 0})


# --- random shapes and axes ----------------------------------------------------------------------


@st.composite
def concat_calls(draw_):
    rank = draw_(st.integers(1, 5))
    shape = [draw_(st.integers(0, 5)) if draw_(st.integers(0, 9)) == 0 else draw_(st.integers(1, 6))
             for _ in range(rank)]  # fmt: skip
    axis = draw_(st.integers(-rank, rank - 1))
    b_shape = list(shape)
    b_shape[axis] = draw_(st.integers(0, 9))
    while np.prod(shape, dtype=np.int64) + np.prod(b_shape, dtype=np.int64) > 4000:
        big = shape.index(max(shape))
        shape[big] = b_shape[big] = 1
    wg = draw_(st.sampled_from([1, 7, 64, 256]))
    return tuple(shape), tuple(b_shape), axis, draw_(st.sampled_from(DTYPES)), wg, draw_(st.integers(0, 2**32 - 1))


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(call=concat_calls())
def test_property_random_shapes_and_axes(concat, call):
    """Random ranks 1 to 5 (zero and one dimensions), axes (negative too), dtypes and workgroup
    sizes, on every variant that accepts them, against np.concatenate."""
    a_shape, b_shape, axis, dtype, wg, seed = call
    rng = np.random.default_rng(seed)
    a, b = draw(rng, a_shape, dtype), draw(rng, b_shape, dtype)
    tunables = {"WORKGROUP_SIZE": wg}
    variants = accepted(concat, a, b, axis, tunables)
    assert "scalar" in variants and ("vec4" in variants) == blocks_of_four(a_shape, b_shape, axis), variants
    for variant in variants:
        assert_concatenated(run(concat, a, b, axis, variant=variant, tunables=tunables), a, b, axis)
