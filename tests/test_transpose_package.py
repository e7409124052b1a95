"""tests/packages/demo.Transpose: a third-party package written from the docs alone by a kernel
author: ONNX Transpose(data) with the list attribute perm, run through load_kernel()
with no engine change. It stresses what the other packages do not: a list attribute (its default
standing for ONNX's absent perm, its validation as a permutation of the right length, read by
expressions), an output shape that permutes the input's, int64 data moved as vec2<u32> words,
and rank-0 and empty tensors.

A transpose copies values, so results are judged bit for bit against np.transpose (which copies
the elements' bytes): NaN payloads, signed zeros and subnormals must pass unchanged.
"""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import webgpu_kernels as wk
from webgpu_kernels import errors
from webgpu_kernels.manifest import check_manifest

from conftest import (
    PACKAGES_DIR,
    assert_engine_has_no_code_for,
    assert_valid_and_passing,
    poison_outputs,
    stored_expectations,
)

PACKAGE = PACKAGES_DIR / "demo.Transpose"
VARIANTS = ("copy", "general")
DTYPES = (np.float32, np.float16, np.int32, np.int64)
DTYPE_IDS = ("f32", "f16", "i32", "i64")
BITS = {np.dtype(np.float32): np.uint32, np.dtype(np.float16): np.uint16, np.dtype(np.int32): np.uint32,
        np.dtype(np.int64): np.uint64}  # fmt: skip


@pytest.fixture(scope="module")
def transpose():
    return wk.load_kernel(PACKAGE)


def draw(rng, shape, dtype) -> np.ndarray:
    dtype = np.dtype(dtype)
    if dtype.kind == "i":
        info = np.iinfo(dtype)
        return rng.integers(info.min, info.max, size=shape, dtype=dtype, endpoint=True)
    return np.asarray((rng.standard_normal(shape) * 100).astype(dtype))


def reference(x: np.ndarray, perm) -> np.ndarray:
    # np.array, not np.ascontiguousarray: the latter makes a rank-0 array rank 1
    return np.array(np.transpose(x, None if perm is None else tuple(perm)), order="C")


def assert_transposed(out: np.ndarray, x: np.ndarray, perm) -> None:
    """out is np.transpose(x, perm), with the same shape and dtype and the same bits."""
    want = reference(x, perm)
    assert out.shape == want.shape and out.dtype == want.dtype == x.dtype, (out.shape, want.shape)
    bits = BITS[out.dtype]
    got_bits, want_bits = out.reshape(-1).view(bits), want.reshape(-1).view(bits)
    bad = got_bits != want_bits
    assert not bad.any(), f"{int(bad.sum())} of {out.size} elements differ; first at {np.argwhere(bad)[0]}"


def attrs_of(perm) -> dict:
    return {} if perm is None else {"perm": perm}


def run(transpose, x, perm, **options) -> np.ndarray:
    inputs = {"data": x}
    poison_outputs(transpose, inputs, attrs=attrs_of(perm), tunables=options.get("tunables"))
    before = np.array(x, copy=True)
    out = transpose(inputs, attrs=attrs_of(perm), **options)["transposed"]
    assert np.array_equal(x, before, equal_nan=True)
    return out


def accepted(transpose, x, perm, tunables=None) -> list[str]:
    explanation = transpose.explain({"data": x}, attrs=attrs_of(perm), tunables=tunables)
    return [v.variant for v in explanation.verdicts if v.accepted]


def keeps_memory_order(shape, perm) -> bool | None:
    """Whether the axes of size > 1 stay in their order (the copy variant's condition); None for an
    empty tensor, which either variant may take (nothing is dispatched)."""
    if 0 in shape:
        return None
    order = list(range(len(shape)))[::-1] if perm is None else list(perm)
    big = [a for a in order if shape[a] != 1]
    return big == sorted(big)


# --- the package ---------------------------------------------------------------------------------


def test_package_files():
    data = json.loads((PACKAGE / "manifest.json").read_text("utf-8"))
    assert check_manifest(data) == []
    assert [(v["id"], v["priority"]) for v in data["variants"]] == [("copy", 10), ("general", 0)]
    assert data["typeConstraints"] == {"T": ["float32", "float16", "int32", "int64"]}
    assert data["attributes"] == {"perm": []}


def test_engine_has_no_code_for_it():
    assert_engine_has_no_code_for("demo.Transpose")


def test_validates_and_its_test_json_passes(transpose):
    assert_valid_and_passing(transpose, PACKAGE, VARIANTS)


def test_expected_outputs_are_the_reference(transpose):
    """test.json's expected outputs are np.transpose of the cases' inputs in the inputs' dtype
    (scripts/make_transpose_cases.py writes them), independent of the WGSL."""
    for case, ins, stored in stored_expectations(transpose, "transposed", lambda ins: ins["data"].dtype.name):
        perm = case.attrs.get("perm") if case.attrs else None
        want = reference(ins["data"], perm or None)  # [] (the default) reverses
        assert stored.shape == want.shape, case.name
        np.testing.assert_array_equal(stored, want.astype(stored.dtype), err_msg=case.name)


# --- results -------------------------------------------------------------------------------------

# Attention head split / merge (B, S, H, D) <-> (B, H, S, D) for the CLIP text encoder and SD 1.5's
# first UNet self-attention (model-shapes.md: S = 4096, C = 320 = 8 x 40), the keys'
# (B, S, H, D) -> (B, H, D, S), a 2-D weight transpose and int64 position ids (1, 77) -> (77, 1).
MODEL_CALLS = [
    ((1, 77, 12, 64), [0, 2, 1, 3]),
    ((1, 12, 77, 64), [0, 2, 1, 3]),
    ((2, 4096, 8, 40), [0, 2, 1, 3]),
    ((2, 4096, 8, 40), [0, 2, 3, 1]),
    ((768, 3072), None),
    ((1, 77), [1, 0]),
]


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("call", MODEL_CALLS, ids=lambda c: "x".join(map(str, c[0])) + "-" + str(c[1]))
def test_model_shapes_on_every_variant_that_takes_them(transpose, rng, call, dtype):
    shape, perm = call
    x = draw(rng, shape, dtype)
    variants = accepted(transpose, x, perm)
    assert variants == (["copy", "general"] if keeps_memory_order(shape, perm) else ["general"])
    for variant in variants:
        assert_transposed(run(transpose, x, perm, variant=variant), x, perm)


EDGE_CALLS = [
    ((), None),                        # rank 0: one element, default perm
    ((), []),                          # rank 0, the only permutation
    ((1,), None),
    ((7,), [0]),
    ((3, 5), [1, 0]),                  # 15 elements: an odd f16 count
    ((3, 5), [0, 1]),                  # identity: copy
    ((1, 5, 1, 3), [2, 1, 0, 3]),      # only size-1 axes move: copy
    ((0,), None),                      # empty
    ((3, 0, 2), [1, 2, 0]),
    ((2, 0), None),
    ((2, 1, 3, 1, 2, 3), [5, 3, 1, 0, 2, 4]),  # rank 6
    ((1, 1, 1, 1, 1, 1), None),
]


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("call", EDGE_CALLS, ids=lambda c: ("x".join(map(str, c[0])) or "r0") + "-" + str(c[1]))
def test_rank_0_and_empty_shapes(transpose, rng, call, dtype):
    shape, perm = call
    x = draw(rng, shape, dtype)
    variants = accepted(transpose, x, perm)
    assert "general" in variants and keeps_memory_order(shape, perm) in (None, "copy" in variants)
    for variant in variants:
        assert_transposed(run(transpose, x, perm, variant=variant), x, perm)


@pytest.mark.parametrize("rank", range(7))
def test_the_default_perm_reverses_the_axes(transpose, rng, rank):
    """perm left out (the manifest's default []) is ONNX's absent perm: the axes reversed."""
    x = draw(rng, tuple(range(2, 2 + rank)), np.float32)
    out = transpose({"data": x})["transposed"]
    assert out.shape == x.shape[::-1]
    assert_transposed(out, x, None)
    assert transpose.evaluate("P", {"data": x}) == list(range(rank))[::-1]


@pytest.mark.parametrize("form", ["list", "tuple", "ndarray", "numpy-ints"])
def test_perm_as_list_tuple_or_array(transpose, rng, form):
    x = draw(rng, (2, 3, 4), np.float32)
    perm = {"list": [2, 0, 1], "tuple": (2, 0, 1), "ndarray": np.array([2, 0, 1]),
            "numpy-ints": [np.int64(2), np.int32(0), np.uint8(1)]}[form]  # fmt: skip
    out = transpose({"data": x}, attrs={"perm": perm})["transposed"]
    assert_transposed(out, x, [2, 0, 1])


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_non_contiguous_inputs(transpose, rng, dtype):
    """Views (a transposed view, a strided slice, a broadcast view, a big-endian copy) are taken
    as the arrays they show."""
    base = draw(rng, (6, 8, 10), dtype)
    views = [base.transpose(2, 0, 1), base[::2, 1::3, ::-1], np.broadcast_to(base[:1, :1], (3, 1, 4, 10))[..., 0]]
    if dtype != np.float16:
        views.append(base.astype(np.dtype(dtype).newbyteorder(">")))
    for view in views:
        perm = list(range(view.ndim))[::-1][1:] + [view.ndim - 1] if view.ndim > 1 else None
        out = transpose({"data": view}, attrs=attrs_of(perm))["transposed"]
        assert_transposed(out, np.ascontiguousarray(view).astype(dtype), perm)


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_special_values_pass_bit_for_bit(transpose, variant, dtype):
    """NaNs with payloads and signs, infinities, signed zeros, subnormals, the extremes; int64
    values whose two 32-bit words both matter."""
    if dtype == np.float16:
        raw = [0x7E00, 0xFE00, 0x7C01, 0x7D55, 0x7C00, 0xFC00, 0x0000, 0x8000, 0x0001, 0x83FF, 0x7BFF, 0xFBFF]
    elif dtype == np.float32:
        raw = [0x7FC00000, 0xFFC00000, 0x7F800001, 0x7FA55555, 0x7F800000, 0xFF800000, 0x00000000, 0x80000000,
               0x00000001, 0x807FFFFF, 0x7F7FFFFF, 0xFF7FFFFF]  # fmt: skip
    elif dtype == np.int32:
        raw = [-2**31, 2**31 - 1, 0, -1, 1, 2**16, -2**16, 0x55555555, -0x55555555, 7, -7, 65535]
    else:
        raw = [-2**63, 2**63 - 1, 0, -1, 1, 2**32, -2**32, 2**53 + 1, -(2**53 + 1), 2**32 - 1, -(2**31), 2**62 + 5]
    x = np.array(raw, BITS[np.dtype(dtype)] if np.dtype(dtype).kind == "f" else dtype).view(dtype).reshape(3, 4)
    perm = [0, 1] if variant == "copy" else [1, 0]
    assert_transposed(run(transpose, x, perm, variant=variant), x, perm)


def test_gpu_tensors_in_and_out(transpose, rng):
    """A GpuTensor in (to_gpu), an output kept on the GPU fed to the inverse permutation."""
    x = draw(rng, (2, 3, 4, 5), np.float16)
    g = wk.to_gpu(x)
    first = transpose({"data": g}, attrs={"perm": [3, 1, 0, 2]}, output="gpu")["transposed"]
    assert isinstance(first, wk.GpuTensor) and first.shape == (5, 3, 2, 4)
    back = transpose({"data": first}, attrs={"perm": list(np.argsort([3, 1, 0, 2]))})["transposed"]
    assert_transposed(back, x, [0, 1, 2, 3])
    first.release()
    g.release()


@pytest.mark.parametrize("variant", VARIANTS)
def test_many_elements_spill_the_grid(transpose, plan_of, rng, variant):
    """More than 65,535 workgroups at WORKGROUP_SIZE 1: the grid spills into y, and each element is
    still written once."""
    x = draw(rng, (70_001 * 4, 1) if variant == "copy" else (1_001, 71), np.float32)
    perm = [1, 0]
    tunables = {"WORKGROUP_SIZE": 1}
    grid = plan_of(transpose, {"data": x}, variant=variant, attrs={"perm": perm}, tunables=tunables).passes[0].grid
    assert grid[1] > 1 and grid[0] * grid[1] * grid[2] >= 65_536
    assert_transposed(run(transpose, x, perm, variant=variant, tunables=tunables), x, perm)


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_runs_on_an_adapter_without_shader_f16(transpose, gl_device, rng, dtype):
    """Bits are moved as words, so float16 and int64 run on lavapipe's OpenGL adapter too."""
    x = draw(rng, (3, 5, 7), dtype)
    for variant, perm in (("copy", [0, 1, 2]), ("general", [2, 0, 1])):
        out = transpose({"data": x}, attrs={"perm": perm}, variant=variant, adapter="gl")["transposed"]
        assert_transposed(out, x, perm)


# --- refusals ------------------------------------------------------------------------------------

BAD_PERMS = [
    ([1, 0], "lenOk=False"),            # too short
    ([0, 1, 2, 3], "lenOk=False"),      # too long
    ([0, 0, 1], "distinctOk=False"),    # a repeated axis
    ([0, 1, 3], "itemsOk=False"),       # out of range
    ([-1, 0, 1], "itemsOk=False"),      # negative (ONNX allows none)
    ([2.0, 1.0, 0.0], "itemsOk=False"),  # floats, even integral ones
    ([1.5, 0, 2], "itemsOk=False"),
]


@pytest.mark.parametrize("perm, why", BAD_PERMS, ids=[str(p) for p, _ in BAD_PERMS])
def test_a_perm_that_is_no_permutation_leaves_no_variant(transpose, perm, why):
    x = np.ones((2, 3, 4), np.float32)
    with pytest.raises(errors.SelectionError, match="permOk") as info:
        transpose({"data": x}, attrs={"perm": perm})
    assert why in str(info.value)
    assert transpose.explain({"data": x}, attrs={"perm": perm}).chosen is None


def test_an_explicit_empty_perm_reverses_the_axes_too(transpose, rng):
    """The format has no absent attribute: the default [] stands for it, so [] given reverses."""
    x = draw(rng, (2, 3, 4), np.int32)
    assert_transposed(transpose({"data": x}, attrs={"perm": []})["transposed"], x, None)


@pytest.mark.parametrize("perm", ["012", 3, [True, False], [[0], [1]], [float("nan"), 0]])
def test_a_perm_that_is_no_list_of_numbers_is_the_callers_error(transpose, perm):
    with pytest.raises(errors.AttributeValueError) as info:
        transpose({"data": np.ones((2, 3), np.float32)}, attrs={"perm": perm})
    assert info.value.argument == "perm"


def test_a_rank_above_6_is_refused(transpose):
    with pytest.raises(errors.RankError) as info:
        transpose({"data": np.ones((1,) * 7, np.float32)})
    assert info.value.argument == "data"


@pytest.mark.parametrize("dtype", [np.float64, np.uint8, np.int16, np.bool_, np.uint32])
def test_other_dtypes_are_refused(transpose, dtype):
    with pytest.raises(errors.DTypeError) as info:
        transpose({"data": np.ones((2, 3), dtype)})
    assert info.value.argument == "data"


# --- random shapes and perms ---------------------------------------------------------------------


@st.composite
def transpose_calls(draw_):
    rank = draw_(st.integers(0, 6))
    shape = [draw_(st.sampled_from([0, 1, 2, 3, 5, 7])) if draw_(st.integers(0, 9)) == 0
             else draw_(st.integers(1, 5)) for _ in range(rank)]  # fmt: skip
    while np.prod(shape, dtype=np.int64) > 3000:
        shape[shape.index(max(shape))] = 1
    perm = None if draw_(st.integers(0, 4)) == 0 else draw_(st.permutations(range(rank)))
    form = draw_(st.sampled_from([list, tuple, np.array]))
    wg = draw_(st.sampled_from([1, 7, 64, 256]))
    return tuple(shape), perm, form, draw_(st.sampled_from(DTYPES)), wg, draw_(st.integers(0, 2**32 - 1))


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(call=transpose_calls())
def test_property_random_shapes_and_perms(transpose, call):
    """Random shapes (rank 0 to 6, zero and one dimensions), perms (or the default), perm forms,
    dtypes and workgroup sizes, on every variant that accepts them."""
    shape, perm, form, dtype, wg, seed = call
    x = draw(np.random.default_rng(seed), shape, dtype)
    given_perm = None if perm is None else form(list(perm))
    tunables = {"WORKGROUP_SIZE": wg}
    variants = accepted(transpose, x, given_perm, tunables)
    keeps = keeps_memory_order(shape, perm)
    assert "general" in variants and keeps in (None, "copy" in variants), (shape, perm, variants)
    for variant in variants:
        assert_transposed(run(transpose, x, given_perm, variant=variant, tunables=tunables), x, perm)


@pytest.mark.parametrize("rank", range(5))
def test_perm_check_agrees_with_numpy_on_every_short_list(transpose, rank):
    """permOk holds exactly for the lists np.transpose takes, on all lists of length rank - 1 to
    rank + 1 over -1 .. rank (numpy's negative axes aside: ONNX has none, and the package refuses
    them); at rank 4, the lists one too long are those that start with a permutation (the 7,632
    others, none close to one, took 8 s of the suite)."""
    x = np.zeros((2,) * rank, np.float32)
    for length in range(max(rank - 1, 0), rank + 2):
        for perm in itertools.product(range(-1, rank + 1), repeat=length):
            if not perm:
                continue  # [] is the default: reversed
            if rank == 4 and length == 5 and sorted(perm[:4]) != [0, 1, 2, 3]:
                continue
            ok = transpose.evaluate("permOk", {"data": x}, attrs={"perm": list(perm)})
            assert ok is (sorted(perm) == list(range(rank))), perm


def test_a_bad_perm_on_float16_without_shader_f16_is_the_perms_fault(transpose, gl_device):
    """On an adapter without shader-f16 a float16 call that no variant accepts had always been
    the adapter's DeviceLimitError, even where the perm was what every variant refused (and
    variants that move f16 as words run there)."""
    data = np.arange(24, dtype=np.float16).reshape(2, 3, 4)
    with pytest.raises(errors.SelectionError, match=r"'permOk' is false .*lenOk=False"):
        transpose({"data": data}, attrs={"perm": [1, 0]}, adapter="gl")
    got = transpose({"data": data}, attrs={"perm": [2, 0, 1]}, adapter="gl")["transposed"]
    np.testing.assert_array_equal(got, np.transpose(data, (2, 0, 1)))
