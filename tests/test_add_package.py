"""tests/packages/ai.onnx.Add: ONNX Add (ai.onnx, opset 14), written from the format documents alone and
run through load_kernel() with no engine change.

Semantics (the operator definition): ``C = A + B`` elementwise with multidirectional (NumPy) broadcasting;
float32 and float16 here (opset 14 also takes integers, double and bfloat16: a DTypeError). The package
adds in f32 and rounds once to the data type, which for float16 is the correctly rounded sum (f32 holds
2 * 11 + 2 bits, so the double rounding is innocuous), so every result is compared exactly.

Judged against a float64 NumPy reference (the sum, rounded once) and onnxruntime's CPU Add-14 (a
one-node model). test.json's expected values come from ``expect_reference``: ``webgpu-kernels expect
tests/packages/ai.onnx.Add --reference tests/test_add_package.py:expect_reference``.
"""

from __future__ import annotations

import functools
import json

import numpy as np
import pytest

import webgpu_kernels as wk
from webgpu_kernels import errors

from conftest import (
    DTYPE_IDS,
    DTYPES,
    PACKAGES_DIR,
    assert_engine_has_no_code_for,
    assert_valid_and_passing,
    poison_outputs,
    stored_expectations,
)

PACKAGE_NAME = "ai.onnx.Add"
PACKAGE = PACKAGES_DIR / PACKAGE_NAME
VARIANTS = ["flat", "suffix", "broadcast"]


def add(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Add-14 in float64, NumPy's broadcasting being ONNX's multidirectional one."""
    with np.errstate(invalid="ignore", over="ignore"):
        return np.asarray(a, np.float64) + np.asarray(b, np.float64)


def expect_reference(inputs: dict, attrs: dict) -> dict:
    """For `webgpu-kernels expect`: inputs as `test` builds them."""
    return {"C": add(inputs["A"], inputs["B"])}


@functools.lru_cache(maxsize=None)
def ort_session(rank_a: int, rank_b: int, float16: bool):
    """A one-node Add-14 model on onnxruntime's CPU provider (symbolic dimensions)."""
    pytest.importorskip("onnxruntime")
    pytest.importorskip("onnx")
    from onnx import TensorProto, helper

    from references import one_node_session, symbolic_tensor

    kind = TensorProto.FLOAT16 if float16 else TensorProto.FLOAT
    node = helper.make_node("Add", ["A", "B"], ["C"])
    return one_node_session(node, [symbolic_tensor("A", kind, rank_a), symbolic_tensor("B", kind, rank_b)],
                            [symbolic_tensor("C", kind, max(rank_a, rank_b))], 14)  # fmt: skip


def ort_add(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return ort_session(a.ndim, b.ndim, a.dtype == np.float16).run(None, {"A": a, "B": b})[0]


def run(kernel: wk.Kernel, a: np.ndarray, b: np.ndarray, **options) -> np.ndarray:
    """One call, every output element written (poisoned first), inputs untouched, equal to the float64
    sum rounded once."""
    inputs = {"A": a, "B": b}
    before = (a.copy(), b.copy())
    poison_outputs(kernel, inputs, tunables=options.get("tunables"))
    got = kernel(inputs, **options)["C"]
    assert a.tobytes() == before[0].tobytes() and b.tobytes() == before[1].tobytes()
    with np.errstate(over="ignore"):
        want = add(a, b).astype(a.dtype)
    assert got.dtype == a.dtype and got.shape == want.shape, (got.shape, want.shape)
    np.testing.assert_array_equal(got, want, err_msg=f"A {a.shape} B {b.shape} {a.dtype} {options}")
    return got


@pytest.fixture(scope="module")
def kernel() -> wk.Kernel:
    return wk.load_kernel(PACKAGE)


def draw(rng: np.random.Generator, shape: tuple, dtype) -> np.ndarray:
    return rng.standard_normal(shape).astype(dtype)


# --- the package ----------------------------------------------------------------------------------


def test_package_files(kernel):
    data = json.loads((PACKAGE / "manifest.json").read_text("utf-8"))
    assert (data["domain"], data["name"], data["sinceVersion"]) == ("ai.onnx", "Add", 14)
    assert data["typeConstraints"] == {"T": ["float32", "float16"]}
    assert kernel.op_id == PACKAGE_NAME and kernel.variants == VARIANTS


def test_engine_has_no_code_for_it():
    assert_engine_has_no_code_for("ai.onnx.Add")


def test_validates_and_its_test_json_passes(kernel):
    assert_valid_and_passing(kernel, PACKAGE, VARIANTS)


def test_expected_outputs_are_the_reference(kernel):
    """test.json's stored outputs are the float64 sum of the case's inputs, rounded once."""
    shapes = set()
    for case, inputs, stored in stored_expectations(kernel, "C", lambda ins: ins["A"].dtype.name):
        with np.errstate(over="ignore"):
            want = expect_reference(inputs, {})["C"].astype(inputs["A"].dtype)
        np.testing.assert_array_equal(stored, want.astype(np.float64), err_msg=case.name)
        shapes.add((inputs["A"].shape, inputs["B"].shape))
    assert {((), ()), ((), (3, 5)), ((2, 64, 320), (320,)), ((1023,), (1023,))} <= shapes


# --- results on every variant, against the float64 reference ---------------------------------------

# (A, B, the variant chosen): rank 0, size-1 dimensions, differing ranks, empty, odd counts
SHAPES = [
    ((), (), "flat"),
    ((), (7,), "suffix"),
    ((5, 3), (), "suffix"),
    ((9,), (9,), "flat"),
    ((2, 3, 7), (7,), "suffix"),
    ((1, 7), (2, 3, 7), "broadcast"),
    ((3, 1), (1, 5), "broadcast"),
    ((4, 1, 3), (5, 1), "broadcast"),
    ((2, 1, 3, 1, 5), (4, 1, 6, 1), "broadcast"),
    ((1, 2, 1, 2, 1, 2, 1, 3), (2, 1, 2, 1, 2, 1, 3, 1), "broadcast"),
    ((2, 0, 3), (1, 3), "broadcast"),
    ((0,), (0,), "flat"),
]


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("a_shape,b_shape,chosen", SHAPES, ids=lambda s: "x".join(map(str, s)) if isinstance(s, tuple) else s)
def test_broadcasting_on_every_variant(kernel, rng, need_dtype, a_shape, b_shape, chosen, dtype):
    need_dtype(dtype)
    a, b = draw(rng, a_shape, dtype), draw(rng, b_shape, dtype)
    assert kernel.explain({"A": a, "B": b}).chosen == chosen
    ran = []
    for variant in VARIANTS:
        try:
            run(kernel, a, b, variant=variant)
            ran.append(variant)
        except errors.VariantRejectedError:
            pass
    assert chosen in ran and "broadcast" in ran


@pytest.mark.parametrize("wg", [1, 64, 1024])
def test_workgroup_sizes(kernel, need_workgroup_size, rng, wg):
    need_workgroup_size(wg)
    a = draw(rng, (3, 5, 11), np.float32)
    for b_shape in [(3, 5, 11), (11,), (5, 1)]:
        run(kernel, a, draw(rng, b_shape, np.float32), tunables={"WORKGROUP_SIZE": wg})


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_specials(kernel, need_dtype, dtype):
    """NaN stays NaN, inf - inf is NaN, signed zeros follow IEEE, a float16 sum past 65504 is an infinity."""
    need_dtype(dtype)
    big = float(np.finfo(dtype).max)
    a = np.array([np.nan, np.inf, np.inf, -0.0, -0.0, big, -big, 1.0], dtype)
    b = np.array([1.0, 1.0, -np.inf, -0.0, 0.0, big, -big, -1.0], dtype)
    for variant in VARIANTS:
        got = kernel({"A": a, "B": b}, variant=variant)["C"]
        assert np.isnan(got[0]) and got[1] == np.inf and np.isnan(got[2]), (variant, got)
        assert got[3] == 0 and np.signbit(got[3]) and got[4] == 0 and not np.signbit(got[4]), (variant, got)
        assert got[5] == np.inf and got[6] == -np.inf and got[7] == 0, (variant, got)


def test_float16_runs_without_shader_f16(kernel, gl_device, rng):
    """Every variant moves float16 as u32 words, so an adapter without shader-f16 runs them all."""
    a, b = draw(rng, (3, 1, 5), np.float16), draw(rng, (4, 5), np.float16)
    got = kernel({"A": a, "B": b}, adapter="gl")["C"]
    np.testing.assert_array_equal(got, add(a, b).astype(np.float16))


# --- model shapes against onnxruntime ----------------------------------------------------------------

# model-shapes.md: the SD 1.5 UNet's bias over (N, S, C), its ResBlock time embedding, a CLIP residual.
MODEL_SHAPES = {
    "sd-bias-2x4096x320": ((2, 4096, 320), (320,)),
    "sd-temb-2x320x32x32": ((2, 320, 32, 32), (2, 320, 1, 1)),
    "clip-residual-1x77x768": ((1, 77, 768), (1, 77, 768)),
    "bias-first-640-over-2x256x640": ((640,), (2, 256, 640)),
}


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("model", MODEL_SHAPES)
def test_model_shapes_against_onnxruntime(kernel, rng, need_dtype, model, dtype):
    """The float64 reference exactly, and onnxruntime's Add-14 on the CPU exactly (it rounds each sum once too)."""
    need_dtype(dtype)
    a_shape, b_shape = MODEL_SHAPES[model]
    a, b = draw(rng, a_shape, dtype), draw(rng, b_shape, dtype)
    got = run(kernel, a, b)
    np.testing.assert_array_equal(got, ort_add(a, b), err_msg=model)


# --- refusals ------------------------------------------------------------------------------------


def test_shapes_that_do_not_broadcast_are_a_shape_error(kernel):
    with pytest.raises(errors.ShapeError, match="expected shapes that broadcast together"):
        kernel({"A": np.ones((3, 4), np.float32), "B": np.ones(5, np.float32)})


def test_other_dtypes_and_ranks_are_refused(kernel):
    for dtype in (np.float64, np.int32):
        with pytest.raises(errors.DTypeError):
            kernel({"A": np.ones(3, dtype), "B": np.ones(3, dtype)})
    with pytest.raises(errors.DTypeError):
        kernel({"A": np.ones(3, np.float32), "B": np.ones(3, np.float16)})
    with pytest.raises(errors.RankError):
        kernel({"A": np.ones((1,) * 9, np.float32), "B": np.ones(1, np.float32)})
