"""tests/packages/ai.onnx.Cast: ONNX Cast-21 to float32, written from the format documents alone and
run through load_kernel() with no engine change.

The format cannot make an output's element type follow an attribute: an output's type variable is
bound by a required input or else lists exactly one type. So the package casts to float32 only
(`to` = 1, TensorProto.FLOAT), from float32, float16, the 8- to 64-bit integers and bool, and refuses
every other `to` by name; its manifest's description says so, and a test below pins the
ManifestError that a two-type output constraint gets.

Judged bit for bit against NumPy's ``astype(np.float32)`` (exact for float16 and the small integers;
round to nearest, ties to even, for int32/uint32/int64/uint64 past 2^24, as C's conversion) and
onnxruntime's CPU Cast (a one-node opset-21 model).

test.json's expected values come from ``expect_reference``: ``webgpu-kernels expect
tests/packages/ai.onnx.Cast --reference tests/test_cast_package.py:expect_reference``.
"""

from __future__ import annotations

import functools
import json
import shutil

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

PACKAGE_NAME = "ai.onnx.Cast"
PACKAGE = PACKAGES_DIR / PACKAGE_NAME
VARIANTS = ["scalar"]
SOURCES = ["float32", "float16", "int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64", "bool"]
FLOAT = 1  # TensorProto.FLOAT


# --- reference (also `webgpu-kernels expect`'s) ------------------------------------------------------


def expect_reference(inputs: dict, attrs: dict) -> dict:
    """For `webgpu-kernels expect`: Cast to float32 (the only `to` the package takes)."""
    if attrs.get("to") != FLOAT:
        raise ValueError(f"to={attrs.get('to')!r}: the package casts to float32 (1) only")
    return {"output": np.asarray(inputs["input"]).astype(np.float32)}


@functools.lru_cache(maxsize=None)
def ort_session(source: str):
    """A one-node Cast-21 model (to FLOAT) on onnxruntime's CPU provider, a symbolic rank-1 shape."""
    pytest.importorskip("onnxruntime")
    pytest.importorskip("onnx")
    from onnx import TensorProto, helper

    from references import one_node_session

    kind = helper.np_dtype_to_tensor_dtype(np.dtype(source))
    vi = helper.make_tensor_value_info
    node = helper.make_node("Cast", ["input"], ["output"], to=TensorProto.FLOAT)
    return one_node_session(node, [vi("input", kind, ["n"])], [vi("output", TensorProto.FLOAT, ["n"])], 21)


def ort_cast(x: np.ndarray) -> np.ndarray:
    return ort_session(x.dtype.name).run(None, {"input": x.reshape(-1)})[0].reshape(x.shape)


def cast(kernel: wk.Kernel, x, **options) -> np.ndarray:
    """One call, every output element written (poisoned first), the input untouched, the float32
    result equal to NumPy's bit for bit (NaNs and signed zeros included)."""
    x = np.asarray(x)
    attrs = {"to": FLOAT}
    before = x.copy()
    poison_outputs(kernel, {"input": x}, attrs=attrs, tunables=options.get("tunables"))
    got = kernel({"input": x}, attrs=attrs, **options)["output"]
    assert x.tobytes() == before.tobytes()
    assert got.dtype == np.float32 and got.shape == x.shape
    want = x.astype(np.float32)
    mismatch = np.flatnonzero(got.view(np.uint32) != want.view(np.uint32))
    assert mismatch.size == 0, (x.dtype, x.ravel()[mismatch[:5]], got.ravel()[mismatch[:5]], want.ravel()[mismatch[:5]])
    return got


@pytest.fixture(scope="module")
def kernel() -> wk.Kernel:
    return wk.load_kernel(PACKAGE)


def draw(rng: np.random.Generator, shape: tuple, dtype: str) -> np.ndarray:
    """Values of every magnitude the dtype holds: random bits shifted right by a random amount (so
    small and large integers, and ties past 2^24), the extremes first; normal floats."""
    n = int(np.prod(shape))
    if dtype == "bool":
        return rng.integers(0, 2, size=shape).astype(bool)
    if dtype in ("float32", "float16"):
        return (rng.standard_normal(shape) * 100).astype(dtype)
    info = np.iinfo(dtype)
    bits = rng.integers(0, 2**64, size=n, dtype=np.uint64, endpoint=False)
    shift = rng.integers(0, info.bits, size=n).astype(np.uint64)
    x = (bits >> shift).astype(np.uint64).view(np.int64).astype(dtype)  # wraps to the dtype's width
    x[: min(n, 2)] = [info.min, info.max][: min(n, 2)]
    return x.reshape(shape)


# --- the package ----------------------------------------------------------------------------------


def test_package_files(kernel):
    data = json.loads((PACKAGE / "manifest.json").read_text("utf-8"))
    assert (data["domain"], data["name"], data["sinceVersion"]) == ("ai.onnx", "Cast", 21)
    assert data["attributes"] == {"to": 0, "saturate": 1}
    assert data["typeConstraints"] == {"T1": SOURCES, "T2": ["float32"]}
    assert kernel.op_id == PACKAGE_NAME and kernel.variants == VARIANTS


def test_engine_has_no_code_for_it():
    assert_engine_has_no_code_for("ai.onnx.Cast")


def test_validates_and_its_test_json_passes(kernel):
    assert_valid_and_passing(kernel, PACKAGE, VARIANTS)


def test_expected_outputs_are_the_reference(kernel):
    """test.json's stored outputs are NumPy's float32 cast of the case's inputs; every source dtype
    has a case."""
    seen = set()
    for case, inputs, stored in stored_expectations(kernel, "output", lambda ins: "float32"):
        want = expect_reference(inputs, dict(case.attrs))["output"]
        np.testing.assert_array_equal(stored, want.astype(np.float64), err_msg=case.name)
        seen.add(inputs["input"].dtype.name)
    assert seen == set(SOURCES)


def test_an_output_type_cannot_follow_an_attribute(tmp_path):
    """The format's limit the package is shaped by: an output type variable no required input binds
    must list one type, so Cast's `to` cannot choose among several (a ManifestError at load)."""
    folder = tmp_path / "ai.onnx.Cast"
    shutil.copytree(PACKAGE, folder)
    (folder / "metadata.json").unlink()
    manifest = json.loads((folder / "manifest.json").read_text("utf-8"))
    manifest["typeConstraints"]["T2"] = ["float32", "float16"]
    (folder / "manifest.json").write_text(json.dumps(manifest), "utf-8")
    with pytest.raises(errors.ManifestError, match="which no required input binds"):
        wk.load_kernel(folder)


# --- results -------------------------------------------------------------------------------------

SHAPES = [(1,), (7,), (33, 31), (), (2, 0, 3), (5, 77)]


@pytest.mark.parametrize("source", SOURCES)
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)) or "rank0")
def test_every_source_on_every_shape(kernel, rng, shape, source):
    x = draw(rng, shape, source)
    assert kernel.explain({"input": x}, attrs={"to": FLOAT}).chosen == "scalar"
    for variant in VARIANTS:
        cast(kernel, x, variant=variant)


def test_every_float16_exactly(kernel):
    """All 65,536 float16 bit patterns: subnormals, both zeros, infinities and NaN payloads, bit for bit."""
    cast(kernel, np.arange(65536, dtype=np.uint32).astype(np.uint16).view(np.float16))


def test_float32_is_copied_bit_for_bit(kernel, rng):
    bits = rng.integers(0, 2**32, size=4099, dtype=np.uint64).astype(np.uint32)
    bits[:4] = [0x80000000, 0x00000001, 0x7FC00001, 0xFF800000]  # -0, a subnormal, a NaN payload, -inf
    cast(kernel, bits.view(np.float32))


@pytest.mark.parametrize("source", ["int32", "uint32", "int64", "uint64"])
def test_wide_integers_round_to_nearest_even(kernel, source):
    """Past 2^24 the nearest float32, ties to even (2^24 + 1 -> 2^24, 2^24 + 3 -> 2^24 + 4), up to the
    extremes (2^63 - 1 -> 2^63, which the float32 holds)."""
    info = np.iinfo(source)
    values = [2**24 + k for k in range(-3, 9)] + [2**31 - 1, 2**31 + 2**7, 2**31 + 2**7 + 1, info.max, info.min]
    if info.bits == 64:
        values += [2**53 + 1, 2**62 + 2**38, 2**62 + 2**38 + 1, 2**62 + 3 * 2**38]
    if info.min < 0:
        values += [-v for v in values if -v >= info.min]
    x = np.array([v for v in values if info.min <= v <= info.max], dtype=source)
    got = cast(kernel, x)
    if source == "int64":
        assert got[x == info.max][0] == 2.0**63 and got[x == 2**24 + 1][0] == 2.0**24


def test_negative_zero_keeps_its_sign(kernel):
    for x in (np.float16(-0.0), np.array([-0.0], np.float32), np.array([0.0, -0.0, 0.0], np.float16)):
        got = cast(kernel, x)
        assert np.array_equal(np.signbit(got), np.signbit(np.asarray(x)))


def test_bool_nonzero_bytes_are_true(kernel):
    """ONNX bool is one byte; a byte other than 0 or 1 (a NumPy view of uint8 data) reads as true, 1.0."""
    raw = np.array([0, 1, 2, 255, 0, 128, 1], np.uint8).view(np.bool_)
    got = kernel({"input": raw}, attrs={"to": FLOAT})["output"]
    assert got.tolist() == [0.0, 1.0, 1.0, 1.0, 0.0, 1.0, 1.0]


@pytest.mark.parametrize("wg", [1, 7, 256])
def test_workgroup_sizes(kernel, need_workgroup_size, rng, wg):
    need_workgroup_size(wg)
    for source in ("float16", "int64", "bool"):
        cast(kernel, draw(rng, (3, 41), source), tunables={"WORKGROUP_SIZE": wg})


def test_gpu_tensors_and_non_contiguous_inputs(kernel, rng):
    x = draw(rng, (16, 40), "int64")[:, ::3]
    cast(kernel, x)
    on_gpu = wk.to_gpu(np.ascontiguousarray(x))
    y = kernel({"input": on_gpu}, attrs={"to": FLOAT}, output="gpu")["output"]
    assert np.array_equal(y.numpy(), x.astype(np.float32))
    y.release()
    on_gpu.release()


def test_float16_needs_no_shader_f16(kernel, gl_device, rng):
    """The template enables no f16: float16 is read as u32 words, on an adapter without shader-f16 too."""
    x = draw(rng, (3, 7), "float16")
    assert "enable f16" not in kernel.render({"input": x}, attrs={"to": FLOAT})["main"]
    got = kernel({"input": x}, attrs={"to": FLOAT}, adapter="gl")["output"]
    assert np.array_equal(got.view(np.uint32), x.astype(np.float32).view(np.uint32))


# The model shapes of bench.json (../shared/reference/model-shapes.md), the SD hidden state halved
# for lavapipe.
MODEL_CASES = {
    "sd15-hidden-1x4096x320-f16": ((1, 4096, 320), "float16"),
    "llama-position-ids-1x2048-i64": ((1, 2048), "int64"),
    "clip-causal-mask-1x1x77x77-bool": ((1, 1, 77, 77), "bool"),
}


@pytest.mark.parametrize("model", MODEL_CASES)
def test_model_shapes_against_onnxruntime(kernel, rng, model):
    """Bit for bit equal to onnxruntime's Cast-21 on the CPU (and to NumPy, in `cast`)."""
    shape, source = MODEL_CASES[model]
    x = draw(rng, shape, source)
    if source == "int64":
        x = np.arange(2048, dtype=np.int64).reshape(shape) * 4099 + 16777215  # positions past 2^24, ties included
    got = cast(kernel, x)
    theirs = ort_cast(x)
    assert theirs.dtype == np.float32
    assert np.array_equal(got.view(np.uint32), theirs.view(np.uint32)), model


# --- refusals ------------------------------------------------------------------------------------


@pytest.mark.parametrize("to", [0, 10, 6, 7, 9, 11, 16])
def test_any_other_to_is_refused_naming_it(kernel, to):
    """The output is float32 whatever `to` says, so any `to` but 1 is a SelectionError naming toOk and
    the value (0, the default, stands for ONNX's required attribute left out)."""
    x = np.ones((2, 3), np.float32)
    attrs = {} if to == 0 else {"to": to}
    with pytest.raises(errors.SelectionError) as info:
        kernel({"input": x}, attrs=attrs)
    message = str(info.value)
    assert "toOk=False" in message and f"attrs.to={to}" in message, message
    with pytest.raises(errors.VariantRejectedError, match="toOk"):
        kernel({"input": x}, attrs=attrs, variant="scalar")


def test_other_dtypes_are_refused(kernel):
    for dtype in (np.float64,):
        with pytest.raises(errors.DTypeError):
            kernel({"input": np.ones(3, dtype)}, attrs={"to": FLOAT})


def test_saturate_is_ignored(kernel):
    x = np.array([1e5, -3.0], np.float32)
    for saturate in (0, 1):
        got = kernel({"input": x}, attrs={"to": FLOAT, "saturate": saturate})["output"]
        assert np.array_equal(got, x)
