"""A call's result is a dict keyed by output name. Indexed by a name it does not hold, it had
raised a bare ``KeyError: 'output'`` (demo.Transpose's output is 'transposed', and
com.example.Attention's P exists only for the `passes` variants): the error now names the outputs
the call returns, and says why an optional output is absent. It stays a KeyError, so code that
catches one (``try: p = result["P"] except KeyError``) still works."""

from __future__ import annotations

import copy
import pickle

import numpy as np
import pytest

import webgpu_kernels as wk

from conftest import PACKAGES_DIR


def gelu_reference(x: np.ndarray) -> np.ndarray:
    x = x.astype(np.float64)
    return x / (1.0 + np.exp(-1.702 * x))


@pytest.mark.parametrize("output", ["numpy", "gpu"])
def test_unknown_output_names_the_outputs(output: str) -> None:
    x = np.linspace(-3, 3, 24, dtype=np.float32).reshape(4, 6)
    result = wk.get_kernel("com.microsoft.QuickGelu")({"X": x}, output=output)
    with pytest.raises(wk.MissingOutputError) as info:
        result["output"]
    assert isinstance(info.value, KeyError) and isinstance(info.value, wk.InputError)
    assert info.value.argument == "output"
    assert str(info.value) == ("argument 'output': expected one of the outputs ['Y'] (a call returns a dict keyed "
                               "by output name), got an unknown output")  # fmt: skip
    y = result["Y"]  # the result is otherwise the dict it was
    got = y if output == "numpy" else y.numpy()
    np.testing.assert_allclose(got, gelu_reference(x), rtol=1e-5, atol=1e-6)
    assert result.get("output") is None and "output" not in result and set(result) == {"Y"}
    if output == "gpu":
        y.release()


def test_index_by_position_says_the_result_is_a_dict() -> None:
    result = wk.get_kernel("com.microsoft.QuickGelu")({"X": np.ones(4, np.float32)})
    with pytest.raises(KeyError) as info:
        result[0]
    assert str(info.value) == ("argument '0': expected one of the outputs ['Y'] (a call returns a dict keyed by "
                               "output name: result['Y'], not result[0]), got int 0")  # fmt: skip


def test_optional_output_the_variant_does_not_produce() -> None:
    attention = wk.load_kernel(PACKAGES_DIR / "com.example.Attention")
    rng = np.random.default_rng(0)
    q = rng.standard_normal((1, 2, 5, 4)).astype(np.float32)
    result = attention({"Q": q, "K": q, "V": q}, variant="rows")
    with pytest.raises(wk.MissingOutputError) as info:
        result["P"]
    assert str(info.value) == (
        "argument 'P': expected one of the outputs ['Y'] (a call returns a dict keyed by output name), got 'P', "
        "an optional output that variant 'rows' does not produce (kernel.explain(inputs) says which variants "
        "would; force one with variant=...)")  # fmt: skip
    # The advice holds: the `passes` variant returns P, the softmax of the scaled scores.
    p = attention({"Q": q, "K": q, "V": q}, variant="passes")["P"]
    scores = q.astype(np.float64) @ q.astype(np.float64).transpose(0, 1, 3, 2) / 2.0
    want = np.exp(scores - scores.max(-1, keepdims=True))
    np.testing.assert_allclose(p, want / want.sum(-1, keepdims=True), rtol=1e-5, atol=1e-6)


def test_result_pickles_and_copies_as_a_plain_dict() -> None:
    x = np.linspace(-1, 1, 8, dtype=np.float32)
    result = wk.get_kernel("com.microsoft.QuickGelu")({"X": x})
    for again in (pickle.loads(pickle.dumps(result)), copy.copy(result), copy.deepcopy(result)):
        assert type(again) is dict and set(again) == {"Y"}
        np.testing.assert_array_equal(again["Y"], result["Y"])


def test_an_output_the_call_did_not_ask_for_says_so() -> None:
    """outputs=["Y"] runs a variant that writes no Mean: result["Mean"] had said "an optional output
    that variant ... does not produce ... force one with variant=", though forcing a variant that
    writes it would not return it either: the call did not ask for it (a kernel author's report)."""
    ln = wk.load_kernel(PACKAGES_DIR / "ai.onnx.LayerNormalization")
    x = np.random.default_rng(0).standard_normal((4, 300)).astype(np.float32)
    inputs = {"X": x, "Scale": np.ones(300, np.float32)}
    result = ln(inputs, outputs=["Y"])
    with pytest.raises(wk.MissingOutputError) as info:
        result["Mean"]
    assert str(info.value) == (
        "argument 'Mean': expected one of the outputs ['Y'] (a call returns a dict keyed by output name), got 'Mean', "
        "an output the call did not ask for (add it to outputs=: the result holds the outputs it names)")  # fmt: skip
    assert "variant=" not in str(info.value)
    # computed but not asked for (a forced variant that writes it): the same words
    forced = ln(inputs, outputs=["Y"], variant="workgroup_nobias")
    with pytest.raises(wk.MissingOutputError, match=r"did not ask for \(add it to outputs=:"):
        forced["Mean"]
    # The advice holds: asked for, Mean is x's mean over its last axis.
    mean = ln(inputs, outputs=["Y", "Mean"])["Mean"]
    np.testing.assert_allclose(mean, x.astype(np.float64).mean(-1, keepdims=True), rtol=1e-5, atol=1e-6)
