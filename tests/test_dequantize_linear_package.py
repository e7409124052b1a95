"""tests/packages/ai.onnx.DequantizeLinear: ONNX DequantizeLinear as of opset 21 (the dequantization of
int8 models' weights and activations and of LLM weights blocked along K), written from the format
documents alone and run through load_kernel() with no engine change.

Semantics (the ONNX operator definition, DequantizeLinear-21 and QuantizeLinear-21's granularities):
``y = (x - x_zero_point) * x_scale``, x int8 or uint8, x_scale float32 or float16 (y's type),
x_zero_point optional (0), of x's type and x_scale's shape. With ``block_size`` 0 the scale is a
scalar or one-element 1-D tensor (per tensor; ``axis`` not read) or 1-D of length ``x.shape[axis]``
(per axis); with ``block_size`` > 0 it has x's shape but ``ceil(x.shape[axis] / block_size)`` on
``axis`` (blocked, the last block possibly shorter). ``axis`` is in [-r, r-1]. The package leaves
out the types opset 21 also takes (int16, uint16, int32, int4, uint4, float8; bfloat16 scales): a
DTypeError.

Two variants, ``zero_point`` and ``no_zero_point`` (a binding is always bound, so each optional
input doubles the variants); one invocation per u32 word of x, four codes, the first in the low byte.

Judged against a float64 NumPy reference written from the definition and onnxruntime's CPU kernel
(a one-node opset-21 model: ``block_size`` needs opset 21). Exactness: ``x - x_zero_point`` is an
integer of at most 9 bits, exact in f32, so the kernel's only rounding is the f32 product (correctly
rounded in WGSL), which for a float16 scale (11 significant bits) is exact and is rounded once to
float16. float32 results therefore equal the reference rounded to float32 bit for bit, and float16
ones are within one float16 ulp of it (WGSL leaves the rounding mode of the conversion open; lavapipe
rounds to nearest, and the tests below hold it to that here).

test.json's expected values come from ``expect_reference``: ``webgpu-kernels expect
tests/packages/ai.onnx.DequantizeLinear --reference tests/test_dequantize_linear_package.py:expect_reference``.
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

PACKAGE_NAME = "ai.onnx.DequantizeLinear"
PACKAGE = PACKAGES_DIR / PACKAGE_NAME
VARIANTS = ["zero_point", "no_zero_point"]
CODES = (np.int8, np.uint8)
CODE_IDS = ("i8", "u8")


# --- reference (also `webgpu-kernels expect`'s) ------------------------------------------------------


def expand(value: np.ndarray, shape: tuple, axis: int, block_size: int) -> np.ndarray:
    """A scale or zero point broadcast to x's shape, in float64, by the definition's granularity;
    ValueError for a shape the definition does not admit."""
    v = np.asarray(value, np.float64)
    rank = len(shape)
    if block_size < 0:
        raise ValueError(f"block_size {block_size} is negative")
    if block_size == 0 and (v.ndim == 0 or (v.ndim == 1 and v.size == 1)):
        return np.broadcast_to(v.reshape(()), shape)  # per tensor: axis not read
    if not -rank <= axis < rank:
        raise ValueError(f"axis {axis} out of range for rank {rank}")
    a = axis % rank
    if block_size == 0:
        if v.shape != (shape[a],):
            raise ValueError(f"per-axis scale of shape {v.shape} for axis length {shape[a]}")
        return np.broadcast_to(v.reshape([shape[a] if i == a else 1 for i in range(rank)]), shape)
    want = tuple(-(-shape[a] // block_size) if i == a else d for i, d in enumerate(shape))
    if v.shape != want:
        raise ValueError(f"blocked scale of shape {v.shape}, expected {want}")
    return np.take(np.repeat(v, block_size, axis=a), np.arange(shape[a]), axis=a)


def dequantize(inputs: dict, attrs: dict) -> np.ndarray:
    """y in float64."""
    x = np.asarray(inputs["x"])
    axis, block_size = int(attrs.get("axis", 1)), int(attrs.get("block_size", 0))
    zp = inputs.get("x_zero_point")
    z = 0.0 if zp is None else expand(zp, x.shape, axis, block_size)
    return (x.astype(np.float64) - z) * expand(inputs["x_scale"], x.shape, axis, block_size)


def expect_reference(inputs: dict, attrs: dict) -> dict:
    """For `webgpu-kernels expect`: inputs as `test` builds them, attributes over the defaults."""
    return {"y": dequantize(inputs, attrs)}


@functools.lru_cache(maxsize=None)
def ort_session(code: str, scale: str, rank: int, scale_rank: int, zero_point: bool, axis: int, block_size: int):
    """A one-node DequantizeLinear-21 model on onnxruntime's CPU provider (symbolic dimensions)."""
    pytest.importorskip("onnxruntime")
    pytest.importorskip("onnx")
    from onnx import TensorProto, helper

    from references import one_node_session

    t1 = TensorProto.INT8 if code == "int8" else TensorProto.UINT8
    t2 = TensorProto.FLOAT16 if scale == "float16" else TensorProto.FLOAT
    vi = helper.make_tensor_value_info
    ins = [vi("x", t1, [f"d{i}" for i in range(rank)]), vi("x_scale", t2, [f"s{i}" for i in range(scale_rank)])]
    if zero_point:
        ins.append(vi("x_zero_point", t1, [f"s{i}" for i in range(scale_rank)]))
    node = helper.make_node("DequantizeLinear", [i.name for i in ins], ["y"], axis=axis, block_size=block_size)
    return one_node_session(node, ins, [vi("y", t2, [f"d{i}" for i in range(rank)])], 21)


def ort_run(inputs: dict, attrs: dict) -> np.ndarray:
    x, s = inputs["x"], inputs["x_scale"]
    session = ort_session(x.dtype.name, s.dtype.name, x.ndim, s.ndim, "x_zero_point" in inputs,
                          int(attrs.get("axis", 1)), int(attrs.get("block_size", 0)))  # fmt: skip
    return session.run(None, dict(inputs))[0]


def assert_exact(got: np.ndarray, inputs: dict, attrs: dict, what: str, *, with_ort: bool = True) -> None:
    """``got`` is the float64 reference rounded once to the scale's type (module docstring), and so
    is onnxruntime's result for the same call."""
    dtype = inputs["x_scale"].dtype
    want = dequantize(inputs, attrs).astype(dtype)
    assert isinstance(got, np.ndarray) and got.dtype == dtype and got.shape == inputs["x"].shape, (what, got)
    np.testing.assert_array_equal(got, want, err_msg=what)
    if with_ort and want.size:
        np.testing.assert_array_equal(ort_run(inputs, attrs), want, err_msg=what + " (onnxruntime)")


def run(kernel, inputs: dict, attrs: dict, *, variant=None, tunables=None, with_ort=True) -> np.ndarray:
    """One call, every output element written (poisoned first), inputs untouched, checked."""
    poison_outputs(kernel, inputs, attrs=attrs, tunables=tunables)
    before = {k: v.copy() for k, v in inputs.items()}
    got = kernel(inputs, attrs=attrs, variant=variant, tunables=tunables)["y"]
    for k, v in inputs.items():
        np.testing.assert_array_equal(v, before[k])
    what = (
        f"x {inputs['x'].shape} {inputs['x'].dtype}, scale {inputs['x_scale'].shape} {inputs['x_scale'].dtype}, {attrs}"
    )
    assert_exact(got, inputs, attrs, what, with_ort=with_ort)
    return got


def accepted(kernel, inputs, attrs=None) -> list[str]:
    return [v.variant for v in kernel.explain(inputs, attrs=attrs).verdicts if v.accepted]


def make_inputs(rng, shape, scale_shape, code, scale_dtype, *, zero_point: bool) -> dict:
    info = np.iinfo(code)
    inputs = {"x": rng.integers(info.min, info.max + 1, size=shape).astype(code),
              "x_scale": rng.uniform(0.002, 0.05, size=scale_shape).astype(scale_dtype)}  # fmt: skip
    if zero_point:
        mid = (int(info.min) + int(info.max) + 1) // 2
        inputs["x_zero_point"] = rng.integers(mid - 20, mid + 21, size=scale_shape).astype(code)
    return inputs


@pytest.fixture(scope="module")
def dql() -> wk.Kernel:
    return wk.load_kernel(PACKAGE)


# --- the package ----------------------------------------------------------------------------------


def test_package_files(dql):
    names = sorted(p.name for p in PACKAGE.iterdir() if not p.name.endswith(".npy"))
    assert names == ["bench.json", "dequantize-linear.wgsl.jinja", "manifest.json", "metadata.json", "test.json"]
    data = json.loads((PACKAGE / "manifest.json").read_text("utf-8"))
    assert (data["domain"], data["name"], data["sinceVersion"]) == ("ai.onnx", "DequantizeLinear", 21)
    assert data["attributes"] == {"axis": 1, "block_size": 0}
    assert data["typeConstraints"] == {"T1": ["int8", "uint8"], "T2": ["float32", "float16"]}
    assert dql.op_id == PACKAGE_NAME and dql.variants == VARIANTS


def test_engine_has_no_code_for_it():
    assert_engine_has_no_code_for("DequantizeLinear")


def test_validates_and_its_test_json_passes(dql):
    assert_valid_and_passing(dql, PACKAGE, VARIANTS)


def test_expected_outputs_are_the_reference(dql):
    """test.json's stored outputs are this module's float64 reference of the case's inputs, rounded once."""
    checked = 0
    for case, inputs, stored in stored_expectations(dql, "y", lambda ins: ins["x_scale"].dtype.name):
        want = expect_reference(inputs, {"axis": 1, "block_size": 0} | dict(case.attrs))["y"]
        np.testing.assert_array_equal(
            stored, want.astype(inputs["x_scale"].dtype).astype(np.float64), err_msg=case.name
        )
        checked += 1
    assert checked == 28


def test_no_f16_declared_and_codes_read_as_words(dql):
    """float16 moves as u32 words: no `enable f16`, so float16 calls need no shader-f16."""
    inputs = {
        "x": np.zeros((2, 5), np.int8),
        "x_scale": np.ones((2, 2), np.float16),
        "x_zero_point": np.zeros((2, 2), np.int8),
    }
    wgsl = dql.render(inputs, attrs={"block_size": 4})["main"]
    assert "enable f16" not in wgsl and "f16" not in wgsl.replace("2x16float", "")
    assert "var<storage, read> x: array<u32>" in wgsl and "array<vec2<u32>>" in wgsl


# --- real-model shapes ----------------------------------------------------------------------------

# (x shape, scale shape, attrs): scaled where full sizes would slow lavapipe (bench.json has them).
MODEL_SHAPES = {
    # Llama-3-8B gate/up weight [K = 4096, N = 14336] blocked along K by 128: K kept, N cut to 64
    "llama3-blocked-k": ((4096, 64), (32, 64), {"axis": 0, "block_size": 128}),
    # the same weight stored [N, K], blocked along the last axis
    "llama3-blocked-last": ((48, 4096), (48, 32), {"axis": -1, "block_size": 128}),
    # SD 1.5 UNet conv weight [320, 320, 3, 3] per output channel: 320 channels, in-channels cut to 32
    "sd-unet-conv": ((320, 32, 3, 3), (320,), {"axis": 0}),
    # CLIP ViT-L/14 text encoder activation [1, 77, 768] per tensor (full size)
    "clip-activation": ((1, 77, 768), (), {}),
}


@pytest.mark.parametrize("scale_dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("code", CODES, ids=CODE_IDS)
@pytest.mark.parametrize("zero_point", [True, False], ids=["zp", "no-zp"])
@pytest.mark.parametrize("model", list(MODEL_SHAPES))
def test_model_shapes(dql, rng, model, zero_point, code, scale_dtype):
    shape, scale_shape, attrs = MODEL_SHAPES[model]
    inputs = make_inputs(rng, shape, scale_shape, code, scale_dtype, zero_point=zero_point)
    assert accepted(dql, inputs, attrs) == ["zero_point" if zero_point else "no_zero_point"]
    run(dql, inputs, attrs)


# --- edges ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("n", range(1, 10))
def test_odd_counts_fill_the_last_word_partly(dql, rng, n):
    """A u32 word holds four codes: counts 1..9 leave 1, 2 or 3 in the last word, per tensor, per axis
    and blocked (blocks of 2 and 3 across word boundaries), f32 and f16 outputs (f16 writes words of
    two halves)."""
    for scale_dtype in DTYPES:
        for code in CODES:
            run(dql, make_inputs(rng, (n,), (), code, scale_dtype, zero_point=True), {})
            run(dql, make_inputs(rng, (n,), (n,), code, scale_dtype, zero_point=True), {"axis": 0})
            for b in (2, 3):
                blocks = -(-n // b)  # one block: onnxruntime reads its scale as per tensor and refuses (below)
                run(dql, make_inputs(rng, (n,), (blocks,), code, scale_dtype, zero_point=False),
                    {"axis": -1, "block_size": b}, with_ort=blocks > 1)  # fmt: skip


@pytest.mark.parametrize("rank_axis", [(2, 0), (2, 1), (3, 1), (4, 2), (4, 3)], ids=str)
def test_negative_axis_is_the_same_axis(dql, rng, rank_axis):
    rank, axis = rank_axis
    shape = (3, 5, 6, 7)[4 - rank :]
    for block_size in (0, 4):
        d = shape[axis]
        scale_shape = (d,) if block_size == 0 else tuple(-(-d // 4) if i == axis else s for i, s in enumerate(shape))
        inputs = make_inputs(rng, shape, scale_shape, np.int8, np.float32, zero_point=True)
        pos = run(dql, inputs, {"axis": axis, "block_size": block_size})
        neg = run(dql, inputs, {"axis": axis - rank, "block_size": block_size})
        np.testing.assert_array_equal(pos, neg)


def test_extreme_codes_and_zero_points(dql):
    """-128 - 127 and 255 - 0: the widest differences, exact before the product."""
    x = np.array([-128, 127, 0, -1, 1], np.int8)
    got = dql({"x": x, "x_scale": np.array(0.5, np.float32), "x_zero_point": np.array(127, np.int8)})["y"]
    np.testing.assert_array_equal(got, (x.astype(np.float64) - 127) * 0.5)
    x = np.array([0, 255, 128, 127], np.uint8)
    for zp in (0, 255):
        got = dql({"x": x, "x_scale": np.array([0.25], np.float16), "x_zero_point": np.array([zp], np.uint8)})["y"]
        np.testing.assert_array_equal(got, ((x.astype(np.float64) - zp) * 0.25).astype(np.float16))


def test_workgroup_sizes(dql, rng):
    inputs = make_inputs(rng, (5, 77), (5, 3), np.uint8, np.float16, zero_point=True)
    for wg in (1, 64, 100, 256):
        run(dql, inputs, {"axis": 1, "block_size": 32}, tunables={"WORKGROUP_SIZE": wg})


def test_empty_and_rank0(dql, rng):
    out = run(dql, make_inputs(rng, (0, 8), (0, 2), np.uint8, np.float32, zero_point=True), {"block_size": 4})
    assert out.shape == (0, 8)
    x = np.array(-7, np.int8)
    got = dql({"x": x, "x_scale": np.array(0.5, np.float16), "x_zero_point": np.array(3, np.int8)})["y"]
    assert got.shape == () and got.dtype == np.float16 and float(got) == -5.0


def test_one_block_rank1_is_taken_where_onnxruntime_refuses_it(dql):
    """x [5], block_size 8, x_scale [1]: blocked by the definition (ceil(5 / 8) = 1 block); onnxruntime
    1.32 reads a one-element scale as per tensor and then refuses the block size. The result is the
    same as per tensor."""
    inputs = {"x": np.arange(5, dtype=np.int8), "x_scale": np.array([0.5], np.float32)}
    attrs = {"axis": 0, "block_size": 8}
    got = run(dql, inputs, attrs, with_ort=False)
    np.testing.assert_array_equal(got, np.arange(5) * 0.5)


# --- contract -------------------------------------------------------------------------------------


def test_refusals(dql, rng):
    inputs = make_inputs(rng, (4, 6), (6,), np.int8, np.float32, zero_point=True)
    with pytest.raises(errors.SelectionError, match="scaleShapeOk=False"):
        dql({**inputs, "x_scale": np.ones(5, np.float32), "x_zero_point": np.zeros(5, np.int8)})
    with pytest.raises(errors.SelectionError, match="zeroPointOk=False"):
        dql({**inputs, "x_zero_point": np.zeros(3, np.int8)})
    with pytest.raises(errors.SelectionError, match="axisOk=False"):
        dql(inputs, attrs={"axis": 2})
    with pytest.raises(errors.SelectionError, match="axisOk=False"):
        dql(inputs, attrs={"axis": -3})
    with pytest.raises(errors.SelectionError, match="blockOk=False"):
        dql(inputs, attrs={"block_size": -2})
    with pytest.raises(errors.SelectionError, match="scaleShapeOk=False"):  # per tensor takes no block size
        dql({"x": inputs["x"], "x_scale": np.array(1.0, np.float32)}, attrs={"block_size": 2})
    blocked = make_inputs(rng, (4, 7), (4, 3), np.uint8, np.float16, zero_point=True)
    dql(blocked, attrs={"block_size": 3})
    for bad in (2, 4):  # ceil(7 / 2) = 4 and ceil(7 / 4) = 2 blocks, not 3
        with pytest.raises(errors.SelectionError, match="scaleShapeOk=False"):
            dql(blocked, attrs={"block_size": bad})
    with pytest.raises(errors.DTypeError) as info:
        dql({**inputs, "x_zero_point": inputs["x_zero_point"].astype(np.uint8)})
    assert info.value.argument == "x_zero_point"
    with pytest.raises(errors.DTypeError) as info:
        dql({**inputs, "x": inputs["x"].astype(np.int32), "x_zero_point": inputs["x_zero_point"].astype(np.int32)})
    assert info.value.argument == "x"
    with pytest.raises(errors.DTypeError):
        dql({**inputs, "x_scale": inputs["x_scale"].astype(np.float64)})
    with pytest.raises(errors.VariantRejectedError, match="'x_zero_point' not in shapes"):
        dql(inputs, variant="no_zero_point")


def test_onnxruntime_refuses_what_the_package_refuses(rng):
    """The refusals follow onnxruntime's CPU kernel (and the definition) where both speak."""
    pytest.importorskip("onnxruntime")
    inputs = make_inputs(rng, (4, 7), (4, 2), np.int8, np.float32, zero_point=False)
    with pytest.raises(Exception, match="ceil"):
        ort_run(inputs, {"block_size": 3})
    with pytest.raises(Exception, match="per-tensor"):
        ort_run({"x": inputs["x"], "x_scale": np.array(1.0, np.float32)}, {"block_size": 2})
