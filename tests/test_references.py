"""references.py: the NumPy and onnxruntime references and the tolerance outputs are judged by."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from click.testing import CliRunner

from webgpu_kernels import references

from cli_helpers import BIAS_ADD, HAS_ORT, QUICK_GELU, invoke_json


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
    # With the kernel's output shapes: a model ONNX infers to other shapes is not run (helper-12: a package
    # naming ai.onnx.RandomNormal with shape [16384, 16384] had `run` allocate 3.4 GB in ORT).
    with pytest.raises(references.ReferenceUnavailable, match=r"output Y of shape \[16384, 16384\], not the kernel's \[4\]"):
        references.onnxruntime_reference("ai.onnx.RandomNormal", {}, {"shape": [16384, 16384]}, output_names=["Y"],
                                         output_shapes={"Y": (4,)})  # fmt: skip
    gathered = references.onnxruntime_reference("ai.onnx.Gather", {"data": data, "indices": np.array([1], np.int64)},
                                                {}, output_shapes={"Y": (1, 3)})  # fmt: skip
    np.testing.assert_array_equal(gathered["Y"], data[[1]])
    got = references.onnxruntime_reference(QUICK_GELU, {"X": x}, {"alpha": 1.0}, output_shapes={"Y": x.shape})
    np.testing.assert_allclose(got["Y"], want, rtol=1e-6, atol=1e-7)  # a contrib op: nothing inferred, run


# --- tolerance ----------------------------------------------------------------------------------------


def test_the_tolerance_is_judged_element_by_element() -> None:
    """bench and tune's check (references.Tolerance): each element against absolute + relative x
    its own |reference|, so a large element's allowance does not cover a small one's error."""
    tol = references.Tolerance.of(["float32"])
    ref = np.array([1000.0, 1.0, np.nan, np.inf])
    ok = np.array([1000.0 + 0.009, 1.0 + 1e-4, np.nan, np.inf])  # 0.009 <= 1e-4 + 1e-5 * 1000
    assert tol.agrees({"Y": ok}, {"Y": ref}) and references.max_abs_error({"Y": ok}, {"Y": ref}) > tol.absolute
    for i, bad in ((1, 1.0 + 0.009), (0, 1000.0 + 0.02), (2, 0.0), (3, -np.inf), (0, np.nan)):
        got = ok.copy()
        got[i] = bad
        assert not tol.agrees({"Y": got}, {"Y": ref}), (i, bad)
    assert not tol.agrees({}, {"Y": ref}) and not tol.agrees({"Y": ok[:2]}, {"Y": ref})
    assert references.Tolerance.of(["int64"]).agrees({"Y": np.array([5])}, {"Y": np.array([5.0])})
    assert not references.Tolerance.of(["int64"]).agrees({"Y": np.array([50040])}, {"Y": np.array([50000.0])})


def test_the_tolerance_judges_a_rank_0_output() -> None:
    """A rank-0 output (QuickGelu of X=:f32) crashed bench's and tune's check with "'numpy.float64'
    object does not support item assignment": np.abs of a 0-d array is a scalar (helper-34)."""
    tol = references.Tolerance.of(["float32"])
    assert tol.agrees({"Y": np.array(1.00001, np.float32)}, {"Y": np.array(1.0)})
    assert not tol.agrees({"Y": np.array(1.5, np.float32)}, {"Y": np.array(1.0)})
    assert tol.agrees({"Y": np.array(np.inf, np.float32)}, {"Y": np.array(np.inf)})
    assert tol.allowance(np.array(np.nan)).shape == ()


def test_the_tolerance_judges_an_integer_reference() -> None:
    """onnxruntime's reference for an int output (bench checks with it since 004cbc2) is an integer
    array: the allowance scaled |ref| in place in its dtype, and NumPy's casting error escaped bench."""
    tol = references.Tolerance.of(["int32"])
    assert tol.agrees({"Y": np.array([3, -4], np.int32)}, {"Y": np.array([3, -4], np.int32)})
    assert not tol.agrees({"Y": np.array([3, -5], np.int32)}, {"Y": np.array([3, -4], np.int32)})
    assert references.Tolerance.of(["float32"]).agrees({"Y": np.array(7, np.int64)}, {"Y": np.array(7, np.int64)})
    assert references.Tolerance.of(["int32"]).allowance(np.array([np.iinfo(np.int32).min], np.int32))[0] > 0


def test_a_reference_past_the_outputs_range_is_its_infinity(runner: CliRunner, has_f16: bool) -> None:
    """A correct float16 BiasAdd of 50000 + 50000 is inf; against the finite float64 reference it
    was WRONG in bench, tune's check, the peers' and run (helper-31). What the output's dtype rounds
    to an infinity is that infinity; 65504 (the largest finite float16) is still wrong there."""
    tol = references.Tolerance.of(["float16"])
    ref = np.array([1e5, -1e5, 65504.0, 1.0])
    assert tol.agrees({"Y": np.array([np.inf, -np.inf, 65504, 1], np.float16)}, {"Y": ref})
    assert not tol.agrees({"Y": np.array([65504, -np.inf, 65504, 1], np.float16)}, {"Y": ref})
    assert not references.Tolerance.of(["float32"]).agrees({"Y": np.array([np.inf], np.float32)}, {"Y": ref[:1]})
    if has_f16:
        large = [a for role in ("X", "skip") for a in ("--generate", f"{role}=uniform:40000:60000")]
        data = invoke_json(runner, "run", BIAS_ADD, "-i", "X=1x4x8:f16", "-i", "bias=8:f16", "-i", "skip=1x4x8:f16",
                           *large, "--generate", "bias=uniform:0:1")  # fmt: skip
        assert data["ok"] is True and data["reference"]["numpy"]["Y"]["nonFiniteMismatches"] == 0, data
