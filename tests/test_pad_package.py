"""tests/packages/ai.onnx.Pad: ONNX Pad as of opset 2 (``pads`` and ``value`` attributes), written from
the format documents alone and run through load_kernel() with no engine change.

Semantics (Pad-2's definition, with onnxruntime's CPU kernel where the definition is silent):
``output.shape[i] = data.shape[i] + pads[i] + pads[i + R]``, pads the begins then the ends. A negative
pad removes elements from its side first (the ONNX reference implementation, np.pad, refuses negative
pads; onnxruntime crops first and pads what is left, and refuses a reflect pad not below the length
left), then ``constant`` fills with ``value``, ``edge`` repeats the first or last element and
``reflect`` mirrors on them without repeating them (np.pad's ``reflect``). onnxruntime also refuses
edge and reflect padding of an axis with nothing left; the package refuses the same calls with a
SelectionError naming the clause.

Pad copies values, so results are judged exactly (bit for bit, NaN payloads and signed zeros
included) against a float64 NumPy reference and onnxruntime's CPU kernel (a one-node opset-2 model).
onnxruntime's Pad-2 kernel takes float only (for float16 it inserts a Cast that opset 2 cannot
express and the session does not load), so float16 data is checked through its float32 run, which
is exact for a copy; ``value`` is the float32 the ONNX attribute holds, rounded to float16 for
float16 data.

test.json's expected values come from ``expect_reference``: ``webgpu-kernels expect
tests/packages/ai.onnx.Pad --reference tests/test_pad_package.py:expect_reference``.
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

PACKAGE_NAME = "ai.onnx.Pad"
PACKAGE = PACKAGES_DIR / PACKAGE_NAME
VARIANTS = ["general"]
DEFAULTS = {"mode": "constant", "pads": [0], "value": 0.0}


# --- reference (also `webgpu-kernels expect`'s) ------------------------------------------------------


def pad(data: np.ndarray, pads, mode: str = "constant", value: float = 0.0) -> np.ndarray:
    """Pad-2 in float64: crop by the negative pads, then np.pad by the positive ones. ValueError for
    what onnxruntime refuses."""
    x = np.asarray(data).astype(np.float64)
    rank = x.ndim
    pads = [int(p) for p in pads]
    if len(pads) != 2 * rank:
        raise ValueError(f"pads has {len(pads)} items for rank {rank}")
    if mode not in ("constant", "reflect", "edge"):
        raise ValueError(f"mode {mode!r}")
    begins, ends = pads[:rank], pads[rank:]
    if any(d + b + e < 0 for d, b, e in zip(x.shape, begins, ends)):
        raise ValueError("an output dimension below 0")
    shape = tuple(d + b + e for d, b, e in zip(x.shape, begins, ends))
    if mode == "constant":
        # output element o is data[o - begin] where that is inside data, else the value: a crop past
        # the data's far side (pads [-6, 2] on 5 elements) leaves the value alone
        out = np.full(shape, float(np.float32(value)))
        src = tuple(slice(max(-b, 0), max(min(n, d - b), max(-b, 0))) for n, b, d in zip(x.shape, begins, shape))
        dst = tuple(slice(s.start + b, s.stop + b) for s, b in zip(src, begins))
        out[dst] = x[src]
        return out
    width = []
    for axis, (b, e) in enumerate(zip(begins, ends)):
        x = np.take(x, np.arange(max(-b, 0), x.shape[axis] - max(-e, 0)), axis=axis)
        left, grow = x.shape[axis], (max(b, 0), max(e, 0))
        if mode == "reflect" and max(grow) > 0 and max(grow) >= left:
            raise ValueError(f"reflect pad {max(grow)} on axis {axis} of length {left} after the crop")
        if mode == "edge" and max(grow) > 0 and left == 0:
            raise ValueError(f"edge pad on axis {axis} of length 0 after the crop")
        width.append(grow)
    return np.pad(x, width, mode=mode)


def expect_reference(inputs: dict, attrs: dict) -> dict:
    """For `webgpu-kernels expect`: inputs as `test` builds them, attributes over the defaults."""
    attrs = DEFAULTS | dict(attrs)
    return {"output": pad(inputs["data"], attrs["pads"], attrs["mode"], attrs["value"])}


@functools.lru_cache(maxsize=None)
def ort_session(rank: int, mode: str, pads: tuple, value: float):
    """A one-node Pad-2 model on onnxruntime's CPU provider, float32 (symbolic dimensions)."""
    pytest.importorskip("onnxruntime")
    pytest.importorskip("onnx")
    import onnxruntime
    from onnx import TensorProto, helper

    from references import one_node_session

    onnxruntime.set_default_logger_severity(3)  # an opset-2 model draws a warning per session
    vi = helper.make_tensor_value_info
    node = helper.make_node("Pad", ["data"], ["output"], mode=mode, pads=list(pads), value=value)
    return one_node_session(node, [vi("data", TensorProto.FLOAT, [f"d{i}" for i in range(rank)])],
                            [vi("output", TensorProto.FLOAT, [f"o{i}" for i in range(rank)])], 2)  # fmt: skip


def ort_pad(data: np.ndarray, attrs: dict) -> np.ndarray:
    """onnxruntime's result in data's dtype (float16 data runs as float32: a copy is exact)."""
    attrs = DEFAULTS | attrs
    session = ort_session(data.ndim, attrs["mode"], tuple(attrs["pads"]), float(attrs["value"]))
    return session.run(None, {"data": data.astype(np.float32)})[0].astype(data.dtype)


def assert_bits_equal(got: np.ndarray, want: np.ndarray, what: str) -> None:
    """Equal as bits: NaN payloads and signed zeros included."""
    assert got.dtype == want.dtype and got.shape == want.shape, (what, got.dtype, got.shape, want.shape)
    view = np.uint32 if got.dtype == np.float32 else np.uint16
    np.testing.assert_array_equal(got.view(view), want.view(view), err_msg=what)


def run(kernel: wk.Kernel, data: np.ndarray, attrs: dict, *, tunables=None, with_ort: bool = True) -> np.ndarray:
    """One call, every output element written (poisoned first), data untouched, checked exactly against
    the reference and onnxruntime."""
    inputs = {"data": data}
    before = data.copy()
    poison_outputs(kernel, inputs, attrs=attrs, tunables=tunables)
    got = kernel(inputs, attrs=attrs, tunables=tunables)["output"]
    np.testing.assert_array_equal(data.view(np.uint8), before.view(np.uint8))
    what = f"data {data.shape} {data.dtype}, {attrs}"
    a = DEFAULTS | attrs
    with np.errstate(over="ignore"):
        want = pad(data, a["pads"], a["mode"], a["value"]).astype(data.dtype)
    assert_bits_equal(got, want, what)  # random data: no NaN, whose payload a float64 trip may change
    if with_ort and (a["mode"] == "constant" or got.size):
        # onnxruntime refuses edge and reflect calls whose crop empties an axis (test below)
        assert_bits_equal(got, ort_pad(data, attrs), what + " (onnxruntime)")
    return got


@pytest.fixture(scope="module")
def pad_kernel() -> wk.Kernel:
    return wk.load_kernel(PACKAGE)


# --- the package ----------------------------------------------------------------------------------


def test_package_files(pad_kernel):
    names = sorted(p.name for p in PACKAGE.iterdir() if not p.name.endswith(".npy"))
    assert names == ["bench.json", "manifest.json", "metadata.json", "pad.wgsl.jinja", "test.json"]
    data = json.loads((PACKAGE / "manifest.json").read_text("utf-8"))
    assert (data["domain"], data["name"], data["sinceVersion"]) == ("ai.onnx", "Pad", 2)
    assert data["attributes"] == DEFAULTS
    assert data["typeConstraints"] == {"T": ["float32", "float16"]}
    assert pad_kernel.op_id == PACKAGE_NAME and pad_kernel.variants == VARIANTS


def test_engine_has_no_code_for_it():
    assert_engine_has_no_code_for("ai.onnx.Pad")


def test_validates_and_its_test_json_passes(pad_kernel):
    assert_valid_and_passing(pad_kernel, PACKAGE, VARIANTS)


def test_expected_outputs_are_the_reference(pad_kernel):
    """test.json's stored outputs are this module's float64 reference of the case's inputs, rounded once."""
    checked = 0
    for case, inputs, stored in stored_expectations(pad_kernel, "output", lambda ins: ins["data"].dtype.name):
        with np.errstate(over="ignore"):
            want = expect_reference(inputs, dict(case.attrs))["output"].astype(inputs["data"].dtype)
        np.testing.assert_array_equal(stored, want.astype(np.float64), err_msg=case.name)
        checked += 1
    assert checked == 28


def test_float16_moves_as_words_and_one_pipeline_per_mode(pad_kernel):
    """No `enable f16`: float16 calls need no shader-f16. The mode is rendered into the shader."""
    data = np.zeros((2, 5), np.float16)
    texts = {m: pad_kernel.render({"data": data}, attrs={"mode": m, "pads": [0, 1, 0, 1]})["main"]
             for m in ("constant", "reflect", "edge")}  # fmt: skip
    for text in texts.values():
        assert "enable f16" not in text and "var<storage, read> x: array<u32>" in text
    assert len(set(texts.values())) == 3


# --- real-model shapes ----------------------------------------------------------------------------

# (data shape, attrs): scaled where full sizes would slow lavapipe (bench.json has them).
MODEL_SHAPES = {
    # SD VAE encoder Downsample: pad (0, 1, 0, 1) before a stride-2 3x3 conv; 1x128x512x512 and
    # 1x256x256x256 there, H and W cut to 64 and 32
    "sd-vae-downsample-128": ((1, 128, 64, 64), {"pads": [0, 0, 0, 0, 0, 0, 1, 1]}),
    "sd-vae-downsample-256": ((1, 256, 32, 32), {"pads": [0, 0, 0, 0, 0, 0, 1, 1]}),
    # ReflectionPad2d(3) of an RGB image before a 7x7 conv; 1x3x512x512 there
    "reflect-image": ((1, 3, 128, 128), {"mode": "reflect", "pads": [0, 0, 3, 3, 0, 0, 3, 3]}),
    # ReplicationPad2d(1) of a feature map
    "edge-feature-map": ((1, 8, 33, 17), {"mode": "edge", "pads": [0, 0, 1, 1, 0, 0, 1, 1]}),
}


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("model", list(MODEL_SHAPES))
def test_model_shapes(pad_kernel, rng, model, dtype):
    shape, attrs = MODEL_SHAPES[model]
    run(pad_kernel, rng.standard_normal(shape).astype(dtype), attrs)


# --- semantics ------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("mode", ["constant", "reflect", "edge"])
def test_every_rank_and_random_pads(pad_kernel, rng, mode, dtype):
    """Ranks 1 to 6, pads drawn from what onnxruntime takes (crops included), odd element counts."""
    for rank in range(1, 7):
        for _ in range(4):
            shape = tuple(int(d) for d in rng.integers(1, 6, size=rank))
            pads = []
            for d in shape:
                b, e = (int(v) for v in rng.integers(-1, 3, size=2))
                if mode != "constant":  # what is left after the crop, and reflect's bound
                    b, e = max(b, -(d - 1) // 2), max(e, -(d - 1) // 2)
                    left = d - max(-b, 0) - max(-e, 0)
                    top = left - 1 if mode == "reflect" else 3
                    b, e = min(b, top), min(e, top)
                pads.append((b, max(e, -(d + b))))  # no output dimension below 0
            attrs = {"mode": mode, "pads": [p[0] for p in pads] + [p[1] for p in pads], "value": -1.25}
            run(pad_kernel, rng.standard_normal(shape).astype(dtype), attrs)


def test_reflect_does_not_repeat_the_edge(pad_kernel):
    x = np.array([1, 2, 3, 4, 5], np.float32)
    np.testing.assert_array_equal(run(pad_kernel, x, {"mode": "reflect", "pads": [4, 4]}),
                                  [5, 4, 3, 2, 1, 2, 3, 4, 5, 4, 3, 2, 1])  # fmt: skip
    np.testing.assert_array_equal(run(pad_kernel, x, {"mode": "edge", "pads": [2, 1]}), [1, 1, 1, 2, 3, 4, 5, 5])


def test_negative_pads_crop_first(pad_kernel):
    """onnxruntime's order: crop, then pad what is left (reflect mirrors the cropped data)."""
    x = np.array([1, 2, 3, 4, 5], np.float32)
    np.testing.assert_array_equal(run(pad_kernel, x, {"mode": "reflect", "pads": [-1, 2]}), [2, 3, 4, 5, 4, 3])
    np.testing.assert_array_equal(run(pad_kernel, x, {"mode": "reflect", "pads": [3, -1]}), [4, 3, 2, 1, 2, 3, 4])
    np.testing.assert_array_equal(run(pad_kernel, x, {"mode": "edge", "pads": [-1, 2]}), [2, 3, 4, 5, 5, 5])
    np.testing.assert_array_equal(run(pad_kernel, x, {"pads": [2, -4], "value": 7.5}), [7.5, 7.5, 1])
    np.testing.assert_array_equal(run(pad_kernel, x, {"pads": [-6, 2], "value": 7.5}), [7.5])
    np.testing.assert_array_equal(run(pad_kernel, x, {"pads": [-2, -3]}), np.zeros(0))


def test_empty_tensors(pad_kernel):
    out = run(pad_kernel, np.zeros((2, 0), np.float32), {"pads": [0, 1, 0, 2], "value": 7.5})
    np.testing.assert_array_equal(out, np.full((2, 3), 7.5))
    assert run(pad_kernel, np.zeros((2, 0), np.float16), {"mode": "edge", "pads": [1, 0, 0, 0]}).shape == (3, 0)
    assert run(pad_kernel, np.zeros((2, 0), np.float32), {"mode": "reflect", "pads": [1, 0, 0, 0]}).shape == (3, 0)


@pytest.mark.parametrize(
    "value", [0.1, -0.0, 65504.0, 65519.0, 65520.0, 1e5, -1e5, 6.1e-5, 3e-8, 2.98e-8, 1e-7, 1e30, 1.0 + 2**-11]
)
def test_float16_value_rounds_to_nearest_even(pad_kernel, value):
    """The value is the attribute's float32, rounded to float16 in the shader (no shader-f16)."""
    got = pad_kernel({"data": np.ones(3, np.float16)}, attrs={"pads": [1, 2], "value": value})["output"]
    with np.errstate(over="ignore"):
        want = np.float16(np.float32(value))
    assert_bits_equal(got[[0, 4, 5]], np.full(3, want, np.float16), str(value))


def test_specials_are_copied_as_bits(pad_kernel):
    for dtype, view, payload in ((np.float32, np.uint32, 0x7FC01234), (np.float16, np.uint16, 0x7E55)):
        x = np.array([np.nan, np.inf, -np.inf, -0.0, 0.0, 1.0], dtype)
        x.view(view)[0] = payload
        got = pad_kernel({"data": x}, attrs={"mode": "reflect", "pads": [2, 3]})["output"]
        assert_bits_equal(got, x[[2, 1, 0, 1, 2, 3, 4, 5, 4, 3, 2]], dtype.__name__)


def test_workgroup_sizes(pad_kernel, rng):
    x = rng.standard_normal((3, 7, 5)).astype(np.float16)
    for wg in (1, 64, 100, 256):
        run(pad_kernel, x, {"mode": "reflect", "pads": [1, 2, 0, 2, 3, 4]}, tunables={"WORKGROUP_SIZE": wg})


# --- contract -------------------------------------------------------------------------------------


def test_refusals(pad_kernel):
    x = np.zeros((3, 5), np.float32)
    for attrs, clause in [
        ({}, "padsOk=False"),
        ({"pads": [1, 1, 1]}, "padsOk=False"),
        ({"pads": [1, 1, 1, 1, 1, 1]}, "padsOk=False"),
        ({"pads": [0, -6, 0, 0]}, "dimsOk=False"),
        ({"mode": "wrap", "pads": [0, 1, 0, 1]}, "modeOk=False"),
        ({"mode": "reflect", "pads": [0, 5, 0, 0]}, "reflectOk=False"),
        ({"mode": "reflect", "pads": [3, 0, 0, 0]}, "reflectOk=False"),
        ({"mode": "reflect", "pads": [0, -2, 0, 3]}, "reflectOk=False"),
        ({"mode": "edge", "pads": [0, -5, 0, 1]}, "edgeOk=False"),
        ({"pads": [0, 2**30, 0, 0]}, "rangeOk=False"),
    ]:
        with pytest.raises(errors.SelectionError, match=clause):
            pad_kernel({"data": x}, attrs=attrs)
    with pytest.raises(errors.AttributeValueError) as info:
        pad_kernel({"data": x}, attrs={"pads": [0, 1.5, 0, 0]})
    assert info.value.argument == "pads"
    with pytest.raises(errors.RankError):
        pad_kernel({"data": np.float32(1.0).reshape(())}, attrs={"pads": []})
    with pytest.raises(errors.RankError):
        pad_kernel({"data": np.zeros((1,) * 7, np.float32)}, attrs={"pads": [0] * 14})
    with pytest.raises(errors.DTypeError):
        pad_kernel({"data": x.astype(np.int32)}, attrs={"pads": [0, 1, 0, 1]})
    # an integral float is an integer pad
    np.testing.assert_array_equal(pad_kernel({"data": x}, attrs={"pads": [0, 1.0, 0, 0]})["output"], np.zeros((3, 6)))


def test_a_crop_that_empties_an_axis_gives_an_empty_output(pad_kernel):
    """Edge and reflect read nothing then: the output is empty, as the shape rule says. onnxruntime
    refuses these calls ("zero effective input extent")."""
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    for mode in ("edge", "reflect"):
        for pads in ([-1, 0, -1, 0], [0, -3, 0, 0], [1, -3, 0, 0], [0, -1, 0, -2]):
            assert run(pad_kernel, x, {"mode": mode, "pads": pads}, with_ort=False).size == 0
            with pytest.raises(Exception, match="Pad"):
                ort_pad(x, {"mode": mode, "pads": pads})


def test_onnxruntime_refuses_what_the_package_refuses():
    """The refusals follow onnxruntime's CPU kernel where the definition is silent."""
    pytest.importorskip("onnxruntime")
    x = np.arange(15, dtype=np.float32).reshape(3, 5)
    for attrs, words in [
        ({"mode": "reflect", "pads": [0, 5, 0, 0]}, "exceeds maximum allowed"),
        ({"mode": "reflect", "pads": [0, -2, 0, 3]}, "exceeds maximum allowed"),
        ({"mode": "edge", "pads": [0, -5, 0, 1]}, "zero effective input extent"),
    ]:
        with pytest.raises(Exception, match=words):
            ort_pad(x, attrs)
