"""tests/packages/ai.onnx.Less: ONNX Less (ai.onnx, opset 13), written from the format documents alone and
run through load_kernel() with no engine change.

Semantics (the operator definition): ``C = A < B`` elementwise with multidirectional (NumPy) broadcasting,
C of type bool; float32, float16, int32 and int64 here (opset 13 also takes the other integer types,
double and bfloat16: a DTypeError). The package compares by the bits in integer arithmetic: NaN on
either side is false, -0 equals +0, subnormals compare by value, int64 as signed 64-bit values. The bool
output is written as u32 words of four bytes, each word by one invocation.

Judged against NumPy's ``np.less`` on the exact values (float16 compared as float16, which is what
widening it exactly to float64 gives) and onnxruntime's CPU Less-13 (a one-node model). test.json's
expected values come from ``expect_reference``: ``webgpu-kernels expect tests/packages/ai.onnx.Less
--reference tests/test_less_package.py:expect_reference``.
"""

from __future__ import annotations

import functools
import json

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import webgpu_kernels as wk
from webgpu_kernels import errors

from conftest import (
    PACKAGES_DIR,
    assert_engine_has_no_code_for,
    assert_valid_and_passing,
    poison_outputs,
    stored_expectations,
)

PACKAGE_NAME = "ai.onnx.Less"
PACKAGE = PACKAGES_DIR / PACKAGE_NAME
VARIANTS = ["flat", "suffix", "broadcast"]
TYPES = (np.float32, np.float16, np.int32, np.int64)
TYPE_IDS = ("f32", "f16", "i32", "i64")


def less(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Less-13 from the definition: NumPy's comparison of the exact values (IEEE: NaN false, -0 == +0),
    NumPy's broadcasting being ONNX's multidirectional one. Floats are widened exactly to float64
    (float16 and float32 are subsets of it), integers compared as they are (int64 not through a float)."""
    with np.errstate(invalid="ignore"):  # a float16 NaN's payload, widened
        if a.dtype.kind == "f":
            a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
        return np.less(a, b)


def expect_reference(inputs: dict, attrs: dict) -> dict:
    """For `webgpu-kernels expect`: inputs as `test` builds them (floats widened to float64, integers as they are)."""
    return {"C": less(inputs["A"], inputs["B"])}


ONNX_TYPES = {"float32": 1, "float16": 10, "int32": 6, "int64": 7}  # TensorProto's numbers


@functools.lru_cache(maxsize=None)
def ort_session(rank_a: int, rank_b: int, dtype: str):
    """A one-node Less-13 model on onnxruntime's CPU provider (symbolic dimensions)."""
    pytest.importorskip("onnxruntime")
    pytest.importorskip("onnx")
    from onnx import TensorProto, helper

    from references import one_node_session, symbolic_tensor

    kind = ONNX_TYPES[dtype]
    node = helper.make_node("Less", ["A", "B"], ["C"])
    return one_node_session(node, [symbolic_tensor("A", kind, rank_a), symbolic_tensor("B", kind, rank_b)],
                            [symbolic_tensor("C", TensorProto.BOOL, max(rank_a, rank_b))], 13)  # fmt: skip


def ort_less(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return ort_session(a.ndim, b.ndim, a.dtype.name).run(None, {"A": a, "B": b})[0]


def assert_bools(got: np.ndarray, want: np.ndarray, what: str) -> None:
    """The same shape and, byte for byte, the same bools (each byte 0 or 1)."""
    assert isinstance(got, np.ndarray) and got.dtype == np.bool_ and got.shape == want.shape, (what, got.dtype, got.shape, want.shape)
    np.testing.assert_array_equal(got.view(np.uint8), want.astype(np.bool_).view(np.uint8), err_msg=what)


def run(kernel: wk.Kernel, a: np.ndarray, b: np.ndarray, **options) -> np.ndarray:
    """One call, every output byte written (poisoned first), inputs untouched, equal to np.less."""
    inputs = {"A": a, "B": b}
    before = (a.copy(), b.copy())
    poison_outputs(kernel, inputs, tunables=options.get("tunables"))
    got = kernel(inputs, **options)["C"]
    assert a.tobytes() == before[0].tobytes() and b.tobytes() == before[1].tobytes()
    assert_bools(got, less(a, b), f"A {a.shape} B {b.shape} {a.dtype} {options}")
    return got


@pytest.fixture(scope="module")
def kernel() -> wk.Kernel:
    return wk.load_kernel(PACKAGE)


def draw(rng: np.random.Generator, shape: tuple, dtype) -> np.ndarray:
    """Floats: standard normal, or (a third of the draws) values from a few, signed zeros among them,
    so that equal pairs occur; integers: -3..3, so that equal pairs occur, or (half the int64 draws)
    values of any magnitude."""
    dtype = np.dtype(dtype)
    if dtype.kind == "f":
        if rng.random() < 0.3:
            return np.asarray(rng.choice(np.array([-1.5, -0.0, 0.0, 0.5, 1.0], dtype), size=shape), dtype)
        return np.asarray(rng.standard_normal(shape), dtype)
    if dtype == np.int64 and rng.random() < 0.5:
        return rng.integers(-(2**62), 2**62, size=shape, dtype=np.int64)
    return np.asarray(rng.integers(-3, 4, size=shape), dtype)


# --- the package ----------------------------------------------------------------------------------


def test_package_files(kernel):
    data = json.loads((PACKAGE / "manifest.json").read_text("utf-8"))
    assert (data["domain"], data["name"], data["sinceVersion"]) == ("ai.onnx", "Less", 13)
    assert data["typeConstraints"] == {"T": ["float32", "float16", "int32", "int64"], "T1": ["bool"]}
    assert kernel.op_id == PACKAGE_NAME and kernel.variants == VARIANTS


def test_engine_has_no_code_for_it():
    assert_engine_has_no_code_for("ai.onnx.Less")


def test_validates_and_its_test_json_passes(kernel):
    assert_valid_and_passing(kernel, PACKAGE, VARIANTS)


def test_expected_outputs_are_the_reference(kernel):
    """test.json's stored outputs are np.less of the case's inputs, and onnxruntime's Less agrees."""
    shapes = set()
    for case, inputs, stored in stored_expectations(kernel, "C", lambda ins: "bool"):
        a, b = inputs["A"], inputs["B"]
        np.testing.assert_array_equal(stored, less(a, b).astype(np.float64), err_msg=case.name)
        np.testing.assert_array_equal(stored, ort_less(a, b).astype(np.float64), err_msg=case.name)
        shapes.add((a.dtype.name, a.shape, b.shape))
    assert {("float32", (20,), (20,)), ("float16", (9, 1), (1, 9)), ("int64", (22,), (22,)), ("int32", (18,), (18,))} <= shapes


# --- results on every variant, against np.less and onnxruntime --------------------------------------

# (A, B, the variant chosen): rank 0, size-1 dimensions, differing ranks, empty, tails of 16 and of 4
SHAPES = [
    ((), (), "flat"),
    ((), (7,), "suffix"),
    ((5, 3), (), "suffix"),
    ((33,), (33,), "flat"),
    ((2, 3, 7), (7,), "suffix"),
    ((1, 7), (2, 3, 7), "broadcast"),
    ((3, 1), (1, 5), "broadcast"),
    ((4, 1, 3), (5, 1), "broadcast"),
    ((2, 1, 3, 1, 5), (4, 1, 6, 1), "broadcast"),
    ((1, 2, 1, 2, 1, 2, 1, 3), (2, 1, 2, 1, 2, 1, 3, 1), "broadcast"),
    ((2, 0, 3), (1, 3), "broadcast"),
    ((0,), (0,), "flat"),
]


@pytest.mark.parametrize("dtype", TYPES, ids=TYPE_IDS)
@pytest.mark.parametrize("a_shape,b_shape,chosen", SHAPES, ids=lambda s: "x".join(map(str, s)) if isinstance(s, tuple) else s)
def test_broadcasting_on_every_variant(kernel, rng, a_shape, b_shape, chosen, dtype):
    a, b = draw(rng, a_shape, dtype), draw(rng, b_shape, dtype)
    assert kernel.explain({"A": a, "B": b}).chosen == chosen
    ran = []
    for variant in VARIANTS:
        try:
            got = run(kernel, a, b, variant=variant)
        except errors.VariantRejectedError:
            continue
        ran.append(variant)
        assert_bools(got, ort_less(a, b), f"onnxruntime, {variant}")
    assert chosen in ran and "broadcast" in ran


@pytest.mark.parametrize("wg", [1, 64, 1024])
def test_workgroup_sizes(kernel, need_workgroup_size, rng, wg):
    need_workgroup_size(wg)
    a = draw(rng, (3, 5, 11), np.int64)
    for b_shape in [(3, 5, 11), (11,), (5, 1)]:
        run(kernel, a, draw(rng, b_shape, np.int64), tunables={"WORKGROUP_SIZE": wg})


FLOAT_SPECIALS = {
    np.float32: [np.nan, -np.inf, -3.4028235e38, -1.0, -1.17549435e-38, -1e-45, -0.0, 0.0, 1e-45, 1.1754942e-38,
                 1.17549435e-38, 1.0, 3.4028235e38, np.inf],
    np.float16: [np.nan, -np.inf, -65504.0, -1.0, -6.1035156e-05, -6e-08, -0.0, 0.0, 6e-08, 6.097555e-05,
                 6.1035156e-05, 1.0, 65504.0, np.inf],
}


@pytest.mark.parametrize("dtype", [np.float32, np.float16], ids=["f32", "f16"])
def test_every_pair_of_special_floats(kernel, dtype):
    """Every ordered pair of NaN, the infinities, the extremes, signed zeros, subnormals (compared by
    value, not flushed) and normals, on every variant: np.less and onnxruntime alike."""
    values = np.array(FLOAT_SPECIALS[dtype], dtype)
    values = np.append(values, -values[:1])  # a NaN with its sign bit set too
    assert np.signbit(values[-1]) and np.isnan(values[-1])
    a, b = np.repeat(values, values.size), np.tile(values, values.size)
    want = ort_less(a, b)
    assert_bools(want, less(a, b), "onnxruntime against np.less")
    for variant in VARIANTS:
        assert_bools(run(kernel, a, b, variant=variant), want, variant)
    # the outer form, through broadcasting
    assert_bools(run(kernel, values[:, None], values[None, :]), want.reshape(values.size, values.size), "outer")


def test_negative_nan_and_nan_payloads_compare_false(kernel):
    """NaN of either sign and any payload, float32 and float16, against numbers and each other."""
    bits32 = np.array([0x7FC00000, 0xFFC00000, 0x7F800001, 0xFFFFFFFF, 0x3F800000, 0xBF800000], np.uint32)
    bits16 = np.array([0x7E00, 0xFE00, 0x7C01, 0xFFFF, 0x3C00, 0xBC00], np.uint16)
    for bits, dtype in ((bits32, np.float32), (bits16, np.float16)):
        values = bits.view(dtype)
        a, b = np.repeat(values, values.size), np.tile(values, values.size)
        for variant in VARIANTS:
            assert_bools(run(kernel, a, b, variant=variant), ort_less(a, b), f"{dtype.__name__} {variant}")


def test_int64_past_32_bits(kernel, rng):
    """Signed 64-bit order: across the high word's sign, equal high words with low words on either side
    of 2^31, neighbours across a high-word boundary, the extremes; and random values of every magnitude."""
    edges = np.array([-(2**63), -(2**63) + 1, -(2**32) - 1, -(2**32), -(2**32) + 1, -(2**31) - 1, -(2**31), -1, 0, 1,
                      2**31 - 1, 2**31, 2**32 - 1, 2**32, 2**32 + 1, 3 * 2**32 + 2**31, 2**63 - 1], np.int64)  # fmt: skip
    a, b = np.repeat(edges, edges.size), np.tile(edges, edges.size)
    for variant in VARIANTS:
        assert_bools(run(kernel, a, b, variant=variant), ort_less(a, b), variant)
    wide = rng.integers(-(2**63), 2**63 - 1, size=(2, 3, 41), dtype=np.int64, endpoint=True)
    other = wide.copy()
    other[0] ^= rng.integers(0, 2, size=other[0].shape, dtype=np.int64)  # differ in the low bit only
    for variant in VARIANTS:
        assert_bools(run(kernel, wide, other, variant=variant), ort_less(wide, other), variant)


def test_int32_extremes(kernel):
    edges = np.array([-(2**31), -(2**31) + 1, -65536, -1, 0, 1, 65535, 2**31 - 1], np.int32)
    a, b = np.repeat(edges, edges.size), np.tile(edges, edges.size)
    for variant in VARIANTS:
        assert_bools(run(kernel, a, b, variant=variant), ort_less(a, b), variant)


def test_float16_runs_without_shader_f16(kernel, gl_device, rng):
    """Every variant reads float16 as u32 words and compares their bits, so an adapter without
    shader-f16 runs them all."""
    a, b = draw(rng, (3, 1, 5), np.float16), draw(rng, (4, 5), np.float16)
    got = kernel({"A": a, "B": b}, adapter="gl")["C"]
    assert_bools(got, less(a, b), "gl")
    a = draw(rng, (2, 17), np.float16)
    got = kernel({"A": a, "B": a[::-1].copy()}, adapter="gl", variant="flat")["C"]
    assert_bools(got, less(a, a[::-1]), "gl flat")


def test_gpu_resident_bool_output_reads_back(kernel, rng):
    """output="gpu": the bool C stays a GpuTensor of the broadcast shape and reads back as np.bool_."""
    a, b = np.arange(7, dtype=np.int64).reshape(7, 1), np.arange(7, dtype=np.int64).reshape(1, 7)
    c = kernel({"A": a, "B": b}, output="gpu")["C"]
    assert isinstance(c, wk.GpuTensor) and c.shape == (7, 7)
    assert_bools(c.numpy(), np.triu(np.ones((7, 7), bool), 1), "causal")
    c.release()


# --- a property: random broadcast shapes of ranks 0 to 4 ---------------------------------------------


@st.composite
def broadcast_calls(draw_):
    """Two shapes broadcasting together (ranks 0 to 4, sizes 0 to 5, 1s on either side), a dtype, a seed."""
    rank = draw_(st.integers(0, 4))
    target = draw_(st.lists(st.integers(0, 5), min_size=rank, max_size=rank))
    shapes = []
    for _ in range(2):
        own = draw_(st.integers(0, rank))
        shapes.append(tuple(1 if draw_(st.booleans()) else n for n in target[rank - own:]))
    dtype = draw_(st.sampled_from(TYPES))
    return shapes[0], shapes[1], dtype, draw_(st.integers(0, 2**32 - 1))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(call=broadcast_calls())
def test_property_random_broadcast_shapes(kernel, call):
    """Every variant that accepts the call gives np.less, and onnxruntime agrees."""
    a_shape, b_shape, dtype, seed = call
    rng = np.random.default_rng(seed)
    a, b = draw(rng, a_shape, dtype), draw(rng, b_shape, dtype)
    want = ort_less(a, b)
    assert_bools(want, less(a, b), "onnxruntime against np.less")
    verdicts = kernel.explain({"A": a, "B": b}).verdicts
    accepted = [v.variant for v in verdicts if v.accepted]
    assert "broadcast" in accepted and ("flat" in accepted) == (a_shape == b_shape), accepted
    for variant in accepted:
        assert_bools(run(kernel, a, b, variant=variant), want, variant)


# --- model shapes against onnxruntime ----------------------------------------------------------------

# bench.json has the full shapes; these are the same forms, smaller (lavapipe).
MODEL_SHAPES = {
    "clip-causal-mask-1x1x77x77": ((1, 1, 77, 1), (1, 1, 1, 77), np.int64),
    "sd-2x64x320-vs-scalar-f32": ((2, 64, 320), (), np.float32),
    "sd-2x64x320-vs-scalar-f16": ((2, 64, 320), (), np.float16),
    "sd-2x64x320-same-shape-f16": ((2, 64, 320), (2, 64, 320), np.float16),
}


@pytest.mark.parametrize("model", MODEL_SHAPES)
def test_model_shapes_against_onnxruntime(kernel, rng, model):
    a_shape, b_shape, dtype = MODEL_SHAPES[model]
    if dtype == np.int64:
        a = np.arange(77, dtype=np.int64).reshape(a_shape)
        b = np.arange(77, dtype=np.int64).reshape(b_shape)
    else:
        a, b = draw(rng, a_shape, dtype), np.asarray(rng.standard_normal(b_shape), dtype)
    got = run(kernel, a, b)
    assert_bools(got, ort_less(a, b), model)


# --- refusals ------------------------------------------------------------------------------------


def test_shapes_that_do_not_broadcast_are_a_shape_error(kernel):
    with pytest.raises(errors.ShapeError, match="expected shapes that broadcast together"):
        kernel({"A": np.ones((3, 4), np.int64), "B": np.ones(5, np.int64)})


def test_other_dtypes_and_ranks_are_refused(kernel):
    for dtype in (np.float64, np.int8, np.uint32, np.bool_):
        with pytest.raises(errors.DTypeError):
            kernel({"A": np.ones(3, dtype), "B": np.ones(3, dtype)})
    with pytest.raises(errors.DTypeError):
        kernel({"A": np.ones(3, np.int32), "B": np.ones(3, np.int64)})
    with pytest.raises(errors.RankError):
        kernel({"A": np.ones((1,) * 9, np.float32), "B": np.ones(1, np.float32)})


def test_forced_variants_refuse_what_they_cannot_do(kernel):
    a, b = np.ones((3, 1), np.float32), np.ones((1, 3), np.float32)
    with pytest.raises(errors.VariantRejectedError, match="sameShapes=False"):
        kernel({"A": a, "B": b}, variant="flat")
    with pytest.raises(errors.VariantRejectedError, match="aSuffix=False"):
        kernel({"A": a, "B": b}, variant="suffix")
    with pytest.raises(errors.SelectionError, match="workgroupOk=False"):
        kernel({"A": a, "B": b}, tunables={"WORKGROUP_SIZE": 0})
