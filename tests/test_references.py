"""references.py: the NumPy and onnxruntime references (the tolerance outputs are judged by: test_comparison.py)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from webgpu_kernels import references

from cli_helpers import BIAS_ADD, HAS_ORT, QUICK_GELU


def test_quick_gelu_reference_ieee() -> None:
    x = np.array([-np.inf, -1000.0, -3.0, -0.0, 0.0, 1.0, 1000.0, np.inf, np.nan])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no overflow / invalid warnings
        for alpha in (1.702, 1.0, 0.0, -1.5):
            got = references.quick_gelu({"X": x}, {"alpha": alpha})["Y"]
            a = float(np.float32(alpha))  # as ONNX holds a float attribute
            with np.errstate(all="ignore"):
                plain = x / (1.0 + np.exp(-a * x))
            np.testing.assert_allclose(got, plain, rtol=1e-15, atol=0)  # NaN and inf positions alike
            assert (np.signbit(got) == np.signbit(plain))[~np.isnan(plain)].all()
    got = references.quick_gelu({"X": x}, {})["Y"]
    assert np.isnan(got[0]) and got[-2] == np.inf and got[1] == 0.0 and np.signbit(got[1])


def test_bias_add_reference() -> None:
    x = np.arange(24, dtype=np.float16).reshape(2, 3, 4)
    bias = np.array([1, 2, 3, 4], np.float16)
    got = references.bias_add({"X": x, "bias": bias, "skip": x}, {})["Y"]
    assert got.dtype == np.float64
    np.testing.assert_array_equal(got, 2 * x.astype(np.float64) + bias)


@pytest.mark.skipif(not HAS_ORT, reason="onnxruntime not installed")
def test_onnxruntime_reference() -> None:
    x = np.linspace(-4, 4, 10, dtype=np.float32).reshape(2, 5)
    got = references.onnxruntime_reference(QUICK_GELU, {"X": x}, {"alpha": 1})
    want = references.quick_gelu({"X": x}, {"alpha": 1.0})["Y"]
    np.testing.assert_allclose(got["Y"], want, rtol=1e-6, atol=1e-7)
    assert references.onnxruntime_reference(QUICK_GELU, {"X": np.float32(2.0)}, {})["Y"].shape == ()
    x3 = np.ones((1, 2, 4), np.float32)
    three = {"X": x3, "bias": np.ones(4, np.float32), "skip": x3}
    with pytest.raises(references.ReferenceUnavailable, match="^onnxruntime has no CPU kernel for this op and dtype$"):
        references.onnxruntime_reference(BIAS_ADD, three, {})
    with pytest.raises(references.ReferenceUnavailable, match="^onnxruntime does not know this op$"):
        references.onnxruntime_reference("demo.ScaleShift", {"X": x}, {"scale": 1.0})
    # Refusals of this call's data or attributes say what ORT said (they had read "no CPU kernel").
    data = np.arange(6, dtype=np.float32).reshape(2, 3)
    with pytest.raises(references.ReferenceUnavailable, match="^onnxruntime refused this call: .*indices"):
        references.onnxruntime_reference("ai.onnx.Gather", {"data": data, "indices": np.array([5], np.int64)}, {})
    # With the kernel's output shapes: a model ONNX infers to other shapes is not run (a package
    # naming ai.onnx.RandomNormal with shape [16384, 16384] had `run` allocate 3.4 GB in ORT).
    with pytest.raises(references.ReferenceUnavailable, match=r"output Y of shape \[16384, 16384\], not the kernel's \[4\]"):
        references.onnxruntime_reference("ai.onnx.RandomNormal", {}, {"shape": [16384, 16384]}, output_names=["Y"],
                                         output_shapes={"Y": (4,)})  # fmt: skip
    gathered = references.onnxruntime_reference("ai.onnx.Gather", {"data": data, "indices": np.array([1], np.int64)},
                                                {}, output_shapes={"Y": (1, 3)})  # fmt: skip
    np.testing.assert_array_equal(gathered["Y"], data[[1]])
    got = references.onnxruntime_reference(QUICK_GELU, {"X": x}, {"alpha": 1.0}, output_shapes={"Y": x.shape})
    np.testing.assert_allclose(got["Y"], want, rtol=1e-6, atol=1e-7)  # a contrib op: nothing inferred, run



@pytest.mark.skipif(not HAS_ORT, reason="onnxruntime not installed")
def test_an_attribute_the_onnx_op_lacks_is_named_not_blamed_on_the_opset() -> None:
    """A package mirroring TopK-1 with attributes of its own (largest, sorted) had `run --onnx-op
    ai.onnx.TopK` advise setting sinceVersion to the version the package mirrors, which it already
    was: every attribute of the package goes on the node, and ORT refused the one TopK-1 lacks. The
    refusal names that attribute and the op version's own attributes instead."""
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    with pytest.raises(references.ReferenceUnavailable) as info:
        references.onnxruntime_reference("ai.onnx.TopK", {"X": x}, {"k": 2, "axis": -1, "largest": 1}, opset=1,
                                         output_names=["Values", "Indices"])  # fmt: skip
    said = str(info.value)
    assert "sinceVersion" not in said, said
    assert "'largest' is no attribute of TopK-1 (its attributes: axis, k); TopK-11 and later have it" in said, said


@pytest.mark.skipif(not HAS_ORT, reason="onnxruntime not installed")
def test_a_package_naming_an_exact_older_op_version_is_not_told_to_change_it() -> None:
    """A package mirroring Pad-2 (sinceVersion 2) in float16, which ORT runs for Pad-2 in no kernel,
    was told to "set the manifest's sinceVersion ... to the version the package mirrors", which it
    was: a sinceVersion above 1 that is a version of the op was chosen, so only the fact is said."""
    data = np.ones((1, 2, 3), np.float16)
    with pytest.raises(references.ReferenceUnavailable) as info:
        references.onnxruntime_reference("ai.onnx.Pad", {"data": data}, {"pads": [0, 0, 1, 0, 0, 1], "mode": "constant",
                                                                          "value": 0.0}, opset=2, output_names=["output"])  # fmt: skip
    said = str(info.value)
    assert "sinceVersion" not in said, said
    assert "the model imports ai.onnx opset 2, which selects Pad-2 of its versions 1, 2, 11" in said, said


@pytest.mark.skipif(not HAS_ORT, reason="onnxruntime not installed")
def test_onnxruntime_refusal_names_an_older_opset() -> None:
    """A package mirroring ai.onnx.HardSigmoid with `new`'s sinceVersion 1 had `run --onnx-op` say only
    "no CPU kernel for this op and dtype" (float32) or an ORT Cast error (float16): ORT registers
    HardSigmoid from version 6. The refusal names the opset, the version it selects and the op's
    versions."""
    x = np.linspace(-4, 4, 8, dtype=np.float32)
    for dtype in (np.float32, np.float16):
        with pytest.raises(references.ReferenceUnavailable, match=r"opset 1, .*HardSigmoid-1.*versions 1, 6, 22"):
            references.onnxruntime_reference("ai.onnx.HardSigmoid", {"X": x.astype(dtype)}, {}, opset=1)
    got = references.onnxruntime_reference("ai.onnx.HardSigmoid", {"X": x}, {"alpha": 0.25}, opset=6)["Y"]
    np.testing.assert_allclose(got, np.clip(0.25 * x.astype(np.float64) + 0.5, 0, 1), rtol=1e-6)
    # An op newer than the opset: "does not know this op" had read as if ONNX had no such op.
    with pytest.raises(references.ReferenceUnavailable, match=r"opset 1 has no Gelu \(its versions 20\)"):
        references.onnxruntime_reference("ai.onnx.Gelu", {"X": x}, {}, opset=1)
    # The newest version selected: ORT's own reason, no hint.
    with pytest.raises(references.ReferenceUnavailable, match="^onnxruntime has no CPU kernel for this op and dtype$"):
        references.onnxruntime_reference("com.microsoft.BiasAdd", {"X": x.reshape(1, 2, 4), "bias": x[:4],
                                                                   "skip": x.reshape(1, 2, 4)}, {}, opset=1)  # fmt: skip
