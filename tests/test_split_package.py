"""tests/packages/ai.onnx.Split: a third-party package written from the docs alone by a kernel
author: ONNX Split-18 with `num_outputs` (2 to 4), `input` cut along the integer attribute `axis`
(default 0, negative counted from the end), run through load_kernel() with no engine change. As in
the Stable Diffusion 1.5 UNet's GEGLU (`hidden_states.chunk(2, dim=-1)`) and a fused QKV projection
split in three (Llama, CLIP).

Semantics (onnx/defs/tensor/defs.cc, Split-18; onnxruntime's CPU kernel,
onnxruntime/core/providers/cpu/tensor/split.cc, PrepareForCompute): with `num_outputs` n and no
`split`, each of the first n - 1 parts has ceil(L / n) elements along the axis and the last the
rest, L - (n - 1) * ceil(L / n), which may be 0 (9 into 4: 3, 3, 3, 0) and where negative (5 into 4)
onnxruntime refuses the call ("Split sizes would produce a negative final split"); the package
refuses it too. ONNX's one variadic output `outputs` is spelled outputs_0 ... outputs_3 (outputs_2
and outputs_3 optional, returned by the variants for 3 and 4 parts only). The optional int64 input
`split`, whose values decide the output shapes, is refused by name, as ai.onnx.ReduceMean refuses
its `axes`: no manifest expression reads an input's values.

A split copies values, so results are judged bit for bit against NumPy slicing (np.split at the
ceil boundaries) and onnxruntime's CPU kernel (a one-node opset-18 model): NaN payloads, signed
zeros and subnormals must pass unchanged, in float32, float16 (moved as halves of u32 words, no
shader-f16) and int64 (vec2<u32> words).
"""

from __future__ import annotations

import json

import numpy as np
import pytest

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
from references import skip_for_older_onnxruntime

PACKAGE = PACKAGES_DIR / "ai.onnx.Split"
VARIANTS = ("split2", "split3", "split4")
ALL_DTYPES = (np.float32, np.float16, np.int64)
BITS = {np.dtype(np.float32): np.uint32, np.dtype(np.float16): np.uint16, np.dtype(np.int64): np.uint64}


def part_lengths(length: int, n: int) -> list[int]:
    """onnxruntime's rule: ceil(L / n) for the first n - 1 parts, the rest for the last."""
    chunk = -(-length // n)
    return [chunk] * (n - 1) + [length - chunk * (n - 1)]


def reference(x: np.ndarray, axis: int, n: int) -> list[np.ndarray]:
    """np.split at the boundaries of part_lengths (NumPy's own array_split cuts otherwise)."""
    lengths = part_lengths(x.shape[axis], n)
    assert lengths[-1] >= 0
    return np.split(x, np.cumsum(lengths)[:-1], axis=axis)


def expect_reference(inputs: dict, attrs: dict) -> dict:
    """For `webgpu-kernels expect tests/packages/ai.onnx.Split --reference
    tests/test_split_package.py:expect_reference`."""
    parts = reference(inputs["input"], int(attrs["axis"]), int(attrs["num_outputs"]))
    return {f"outputs_{k}": p for k, p in enumerate(parts)}


@pytest.fixture(scope="module")
def split():
    return wk.load_kernel(PACKAGE)


@pytest.fixture(scope="module")
def ort_split():
    """onnxruntime's CPU Split-18, one session per (axis, num_outputs, dtype)."""
    from onnx import TensorProto, helper

    from references import one_node_session, symbolic_tensor

    elem = {np.dtype(np.float32): TensorProto.FLOAT, np.dtype(np.float16): TensorProto.FLOAT16,
            np.dtype(np.int64): TensorProto.INT64}  # fmt: skip
    sessions: dict = {}

    def run(x: np.ndarray, axis: int, n: int) -> list[np.ndarray]:
        key = (axis, n, x.dtype, x.ndim)
        if key not in sessions:
            outs = [f"o{k}" for k in range(n)]
            node = helper.make_node("Split", ["x"], outs, axis=axis, num_outputs=n)
            sessions[key] = one_node_session(node, [symbolic_tensor("x", elem[x.dtype], x.ndim)],
                                             [symbolic_tensor(o, elem[x.dtype], x.ndim) for o in outs], 18)  # fmt: skip
        return sessions[key].run(None, {"x": x})

    return run


def draw(rng, shape, dtype) -> np.ndarray:
    if np.dtype(dtype) == np.int64:  # both words of each element vary, negative ones included
        return rng.integers(-(2**62), 2**62, size=shape, dtype=np.int64)
    return np.asarray((rng.standard_normal(shape) * 100).astype(dtype))


def assert_same_bits(got: np.ndarray, want: np.ndarray, what) -> None:
    assert got.shape == want.shape and got.dtype == want.dtype, (what, got.shape, want.shape, got.dtype)
    bits = BITS[got.dtype]
    bad = np.ascontiguousarray(got).reshape(-1).view(bits) != np.ascontiguousarray(want).reshape(-1).view(bits)
    assert not bad.any(), f"{what}: {int(bad.sum())} of {got.size} elements differ; first at {np.argwhere(bad)[0]}"


def run(split, x, axis, n, **options) -> dict:
    """A call on a poisoned pool (an element left unwritten shows NaN bits), checking that the
    input is left as it was and that exactly outputs_0 .. outputs_{n-1} come back."""
    attrs = {"axis": axis, "num_outputs": n}
    poison_outputs(split, {"input": x}, attrs=attrs, tunables=options.get("tunables"))
    before = np.array(x, copy=True)
    out = split({"input": x}, attrs=attrs, **options)
    assert_same_bits(x, before, "input")
    assert sorted(out) == [f"outputs_{k}" for k in range(n)], sorted(out)
    return out


def assert_split(out: dict, want: list[np.ndarray], what) -> None:
    for k, part in enumerate(want):
        assert_same_bits(out[f"outputs_{k}"], part, (what, k))


# --- the package ---------------------------------------------------------------------------------


def test_package_files():
    data = json.loads((PACKAGE / "manifest.json").read_text("utf-8"))
    assert check_manifest(data) == []
    assert [v["id"] for v in data["variants"]] == list(VARIANTS)
    assert [len(v["passes"]) for v in data["variants"]] == [2, 3, 4]
    assert [(o["role"], o.get("optional", False)) for o in data["outputs"]] == [
        ("outputs_0", False), ("outputs_1", False), ("outputs_2", True), ("outputs_3", True)]  # fmt: skip
    assert data["typeConstraints"] == {"T": ["float32", "float16", "int64"], "I": ["int64"]}


def test_engine_has_no_code_for_it():
    assert_engine_has_no_code_for("ai.onnx.Split")
    assert_engine_has_no_code_for("outputs_0")


def test_validates_and_its_test_json_passes(split):
    assert_valid_and_passing(split, PACKAGE, VARIANTS)


def test_expected_outputs_are_the_reference(split):
    """test.json's expected outputs (written by `expect` with expect_reference) are NumPy's slices,
    and onnxruntime's, of the cases' inputs: independent of the WGSL."""
    checked = 0
    for name in ("outputs_0", "outputs_1"):
        for case, ins, stored in stored_expectations(split, name, lambda ins: ins["input"].dtype.name):
            x, axis, n = ins["input"], case.attrs["axis"], case.attrs["num_outputs"]
            k = int(name[-1])
            np.testing.assert_array_equal(stored, reference(x, axis, n)[k], err_msg=case.name)
            assert stored.shape == reference(x, axis, n)[k].shape, case.name
            checked += 1
    assert checked >= 60


# --- results -------------------------------------------------------------------------------------

# (shape, axis, num_outputs): the GEGLU chunk and fused QKV cut down, then the edge cases.
CALLS = [
    ((2, 8, 40), -1, 2),
    ((1, 4, 3 * 32), 2, 3),
    ((1, 7, 3 * 24), -1, 3),
    ((7,), 0, 3),
    ((7,), -1, 2),
    ((10, 3), 0, 4),
    ((9, 2), 0, 4),
    ((3,), 0, 4),
    ((1, 3), 0, 2),
    ((4, 0, 3), 0, 2),
    ((4, 0, 3), 1, 3),
    ((0,), 0, 4),
    ((3, 5, 2), -2, 2),
    ((2, 1, 3, 2, 5, 3), 4, 2),
    ((2, 1, 3, 2, 5, 3), -6, 2),
    ((3, 2, 2, 2, 7), -1, 4),
]


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=("f32", "f16", "i64"))
@pytest.mark.parametrize("call", CALLS, ids=lambda c: "x".join(map(str, c[0])) + f"@{c[1]}/{c[2]}")
def test_against_numpy_and_onnxruntime(split, ort_split, rng, call, dtype):
    shape, axis, n = call
    x = draw(rng, shape, dtype)
    want = reference(x, axis, n)
    explanation = split.explain({"input": x}, attrs={"axis": axis, "num_outputs": n})
    assert explanation.chosen == f"split{n}"
    assert_split(run(split, x, axis, n), want, call)
    try:
        ort = ort_split(x, axis, n)
    except Exception as exc:  # onnxruntime's own error types
        skip_for_older_onnxruntime(f"refuses it: {exc}")
        raise
    assert len(ort) == n
    assert_split({f"outputs_{k}": o for k, o in enumerate(ort)}, want, "onnxruntime")


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=("f32", "f16", "i64"))
def test_special_values_pass_bit_for_bit(split, ort_split, dtype):
    """NaNs with payloads (negative, signalling), infinities, signed zeros and subnormals, in parts
    whose float16 offsets are odd (5 into 2: halves taken from either half of a word)."""
    if dtype == np.float16:
        words = [0x7C01, 0xFE12, 0x0001, 0x8001, 0x8000, 0x7C00, 0x3C00, 0xC000, 0x7E00, 0xFC00]
    elif dtype == np.float32:
        words = [0x7F800001, 0xFFC01234, 1, 0x80000001, 0x80000000, 0x7F800000, 0x3F800000, 0xC0000000, 0x7FC00000, 0xFF800000]
    else:
        words = [2**63 - 1, 2**63, 1, 2**64 - 1, 2**32, 2**32 - 1, 0xFFFFFFFF00000000, 7, 2**31, 0x8000000080000000]
    x = np.array(words * 3, BITS[np.dtype(dtype)]).view(dtype).reshape(2, 3, 5)
    for axis, n in ((2, 2), (-1, 3), (1, 3), (0, 2), (1, 2)):
        want = reference(x, axis, n)
        assert_split({f"outputs_{k}": o for k, o in enumerate(ort_split(x, axis, n))}, want, "onnxruntime")
        assert_split(run(split, x, axis, n), want, (axis, n))


def test_workgroup_sizes_and_a_spilled_grid(split, rng):
    """More than 65,535 workgroups at WORKGROUP_SIZE 1: the grid spills into y."""
    x = draw(rng, (2, 2 * 70_000), np.float32)
    assert_split(run(split, x, 1, 2, tunables={"WORKGROUP_SIZE": 1}), reference(x, 1, 2), "spill")
    for wg in (7, 64):
        x = draw(rng, (3, 301), np.float16)
        assert_split(run(split, x, -1, 3, tunables={"WORKGROUP_SIZE": wg}), reference(x, -1, 3), wg)


def test_gpu_tensors_and_non_contiguous_inputs(split, rng):
    x = draw(rng, (6, 4), np.float32).T  # (4, 6), Fortran order
    out = split({"input": x}, attrs={"axis": 1, "num_outputs": 3}, output="gpu")
    assert all(isinstance(t, wk.GpuTensor) for t in out.values())
    again = split({"input": out["outputs_0"]}, attrs={"axis": 0, "num_outputs": 2})
    assert_split(again, reference(x[:, :2], 0, 2), "gpu")
    for t in out.values():
        t.release()


def test_it_runs_without_shader_f16(split, gl_device, rng):
    """Every variant moves float16 as u32 words: lavapipe's OpenGL adapter runs them."""
    x = draw(rng, (2, 3, 7), np.float16)
    for n in (2, 3, 4):
        out = split({"input": x}, attrs={"axis": -1, "num_outputs": n}, adapter="gl")
        assert_split(out, reference(x, -1, n), n)


def test_asking_for_fewer_outputs_is_refused_not_truncated(split, rng):
    """outputs= selects among the variants that accept the call; num_outputs alone decides which
    one does, so naming an optional output num_outputs does not produce is refused."""
    x = draw(rng, (2, 6), np.float32)
    with pytest.raises(errors.SelectionError):
        split({"input": x}, attrs={"axis": 1, "num_outputs": 2}, outputs=["outputs_0", "outputs_2"])


# --- refusals ------------------------------------------------------------------------------------


@pytest.mark.parametrize("n", [0, 1, 5, -2])
def test_num_outputs_outside_2_to_4(split, n):
    with pytest.raises(errors.SelectionError, match="numOutputsOk=False"):
        split({"input": np.ones((2, 12), np.float32)}, attrs={"axis": 1, "num_outputs": n})


def test_num_outputs_is_required(split):
    with pytest.raises(errors.SelectionError, match="numOutputsOk=False"):
        split({"input": np.ones(8, np.float32)})


def test_the_split_input_is_refused_by_name(split):
    """Its values would decide the output shapes; no expression reads values. Refused even where
    num_outputs is given and the sizes are the ones num_outputs would give."""
    x = np.ones((2, 6), np.float32)
    with pytest.raises(errors.SelectionError, match="'split' not in shapes"):
        split({"input": x, "split": np.array([3, 3], np.int64)}, attrs={"axis": 1, "num_outputs": 2})
    with pytest.raises(errors.DTypeError):
        split({"input": x, "split": np.array([3, 3], np.int32)}, attrs={"axis": 1, "num_outputs": 2})


@pytest.mark.parametrize("length, n", [(5, 4), (2, 4), (6, 4), (1, 3)])
def test_a_negative_last_part_is_refused_as_onnxruntime_refuses_it(split, ort_split, length, n):
    x = np.ones((length, 2), np.float32)
    if part_lengths(length, n)[-1] >= 0:  # (6, 4): 2, 2, 2, 0; (1, 3): 1, 0, 0 ... is negative
        assert_split(run(split, x, 0, n), reference(x, 0, n), (length, n))
        return
    # 1.32 says "negative final split", 1.30 "Invalid num_outputs value" or "exceeds the remaining size"
    with pytest.raises(Exception, match="running Split node"):
        ort_split(x, 0, n)
    with pytest.raises(errors.SelectionError, match="lastPartOk=False"):
        split({"input": x}, attrs={"axis": 0, "num_outputs": n})


@pytest.mark.parametrize("axis", [2, -3, 100])
def test_an_axis_out_of_range(split, axis):
    with pytest.raises(errors.SelectionError, match="axisOk=False"):
        split({"input": np.ones((2, 4), np.float32)}, attrs={"axis": axis, "num_outputs": 2})


def test_rank_0_and_other_dtypes(split):
    with pytest.raises(errors.RankError):
        split({"input": np.float32(1)}, attrs={"num_outputs": 2})
    for dtype in (np.int32, np.float64, np.uint8):
        with pytest.raises(errors.DTypeError):
            split({"input": np.ones(4, dtype)}, attrs={"num_outputs": 2})


@pytest.mark.parametrize("value", [2.5, "2", True])
def test_attributes_of_the_wrong_kind(split, value):
    with pytest.raises(errors.AttributeValueError):
        split({"input": np.ones(4, np.float32)}, attrs={"num_outputs": value})


def test_a_variant_forced_on_another_count(split):
    with pytest.raises(errors.VariantRejectedError, match="attrs.num_outputs == 4"):
        split({"input": np.ones(8, np.float32)}, attrs={"num_outputs": 2}, variant="split4")
