"""tests/packages/demo.TopK: ONNX TopK (opset 1: k an attribute) written from the format documents
alone, with opset 11's `largest` and `sorted` as the package's own extension.

Results are judged exactly (Values are copies of X's elements, Indices int64) against the
package's NumPy reference (a stable argsort, NaN as the largest value) and against onnxruntime's
CPU kernel, on every variant that accepts the call, with the outputs' pooled buffers poisoned
first so that an unwritten element shows.
"""

from __future__ import annotations

import json
import types

import numpy as np
import pytest

import webgpu_kernels as wk
from webgpu_kernels import errors
from webgpu_kernels.manifest import check_manifest

from conftest import (
    DTYPE_IDS,
    DTYPES,
    PACKAGES_DIR,
    assert_engine_has_no_code_for,
    assert_valid_and_passing,
    poison_outputs,
)

PACKAGE = PACKAGES_DIR / "demo.TopK"


def _load_reference():
    # Run from its source, not imported: an import writes __pycache__ into the package folder, a file
    # its metadata does not list (test_package_files failed once bytecode writing was on).
    path = PACKAGE / "reference.py"
    module = types.ModuleType("demo_topk_reference")
    module.__file__ = str(path)
    exec(compile(path.read_text("utf-8"), str(path), "exec"), module.__dict__)
    return module


reference = _load_reference()


@pytest.fixture(scope="module")
def topk() -> wk.Kernel:
    return wk.load_kernel(PACKAGE)


def expected(x: np.ndarray, attrs: dict) -> tuple[np.ndarray, np.ndarray]:
    want = reference.topk({"X": x}, {"axis": -1, "largest": 1, **attrs})
    return want["Values"], want["Indices"]


def assert_same(got: dict, values: np.ndarray, indices: np.ndarray, what: str) -> None:
    assert got["Indices"].dtype == np.int64 and got["Indices"].shape == indices.shape, what
    np.testing.assert_array_equal(got["Indices"], indices, err_msg=what)
    assert got["Values"].dtype == values.dtype and got["Values"].shape == values.shape, what
    np.testing.assert_array_equal(got["Values"], values, err_msg=what)  # NaN equals NaN here


def run_every_variant(kernel: wk.Kernel, x: np.ndarray, attrs: dict, tunables: dict | None = None) -> list[str]:
    """Run the call on each variant whose `when` holds, compare with the reference; return their ids."""
    values, indices = expected(x, attrs)
    ran = []
    for verdict in kernel.explain({"X": x}, attrs=attrs, tunables=tunables).verdicts:
        if verdict.accepted:
            poison_outputs(kernel, {"X": x}, attrs=attrs, tunables=tunables)
            got = kernel({"X": x}, attrs=attrs, variant=verdict.variant, tunables=tunables)
            assert_same(got, values, indices, f"variant {verdict.variant}, attrs {attrs}, tunables {tunables}")
            ran.append(verdict.variant)
    return ran


# --- the package ---------------------------------------------------------------------------------


def test_package_files():
    names = sorted(p.name for p in PACKAGE.iterdir())
    assert names == ["bench.json", "manifest.json", "metadata.json", "reference.py", "test.json",
                     "top-k-key.wgsl.jinja", "top-k-rank.wgsl.jinja", "top-k-select.wgsl.jinja"]  # fmt: skip
    data = json.loads((PACKAGE / "manifest.json").read_text("utf-8"))
    assert check_manifest(data) == []
    assert data["sinceVersion"] == 1 and data["attributes"] == {"k": 0, "axis": -1, "largest": 1, "sorted": 1}
    assert data["typeConstraints"] == {"T": ["float32", "float16"], "I": ["int64"]}


def test_engine_has_no_code_for_it():
    assert_engine_has_no_code_for("demo.TopK")


def test_validates_and_its_test_json_passes(topk):
    assert_valid_and_passing(topk, PACKAGE, ("rank", "select"))


def test_indices_are_int64_written_as_u32_pairs(topk):
    wgsl = topk.render({"X": np.zeros((2, 3), np.float32)}, attrs={"k": 2})["main"]
    assert "array<vec2<u32>>" in wgsl and "enable f16" not in wgsl


def test_selection_by_line_length(topk):
    assert topk.explain({"X": np.zeros((3, 512), np.float32)}, attrs={"k": 50}).chosen == "rank"
    assert topk.explain({"X": np.zeros((3, 513), np.float32)}, attrs={"k": 50}).chosen == "select"


# --- against the NumPy reference ----------------------------------------------------------------


SHAPES = [(1,), (9,), (4, 5), (2, 3, 4), (3, 70), (2, 1, 6, 3)]


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_random_shapes_axes_and_ties(topk, rng, shape, dtype):
    # small integers: many ties; a few NaNs and signed zeros
    x = rng.integers(-4, 5, size=shape).astype(dtype)
    flat = x.reshape(-1)
    flat[rng.choice(flat.size, size=flat.size // 9, replace=False)] = np.nan
    flat[flat == 0] = np.where(rng.random(int((flat == 0).sum())) < 0.5, -0.0, 0.0)
    for axis in range(-len(shape), len(shape)):
        n = shape[axis]
        for k in sorted({1, (n + 1) // 2, n}):
            attrs = {"k": k, "axis": axis, "largest": int(rng.integers(0, 2)), "sorted": int(rng.integers(0, 2))}
            assert run_every_variant(topk, x, attrs) == ["rank", "select"]


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("largest", [0, 1])
@pytest.mark.parametrize("wg", [64, 100, 256])
def test_long_lines_on_both_variants(topk, rng, dtype, largest, wg):
    """The workgroup tree's tie rule: equal values spread over invocations, a non-power-of-two tree."""
    x = rng.standard_normal((3, 700)).astype(dtype)
    x[0, [3, 350, 699, 100]] = 9.0
    x[1, [10, 11, 650]] = np.nan
    x[2, :] = -np.inf
    ran = run_every_variant(topk, x, {"k": 20, "largest": largest}, {"WORKGROUP_SIZE": wg, "RANK_MAX_LENGTH": 1024})
    assert ran == ["rank", "select"]


@pytest.mark.parametrize(
    ("shape", "dtype"), [((2, 8000), np.float16), ((1, 128256), np.float32)], ids=["2x8000-f16", "1x128256-f32"]
)
def test_llm_sampling_shapes(topk, rng, shape, dtype):
    """k = 50 of a vocabulary's logits (bench.json: 32000 and 128256, batch 1 and 8). Each invocation of
    select loops about 50 * 128256 / 256 = 25,050 times: below lavapipe's 65,535."""
    x = (3 * rng.standard_normal(shape)).astype(dtype)
    assert run_every_variant(topk, x, {"k": 50}) == ["select"]


def test_sorted_0_returns_the_sorted_result(topk, rng):
    x = rng.standard_normal((4, 40)).astype(np.float32)
    a = topk({"X": x}, attrs={"k": 7, "sorted": 0})
    b = topk({"X": x}, attrs={"k": 7})
    assert_same(a, b["Values"], b["Indices"], "sorted 0")


def test_signed_zeros_tie_and_are_copied(topk):
    x = np.array([[-0.0, 0.0, -0.0, -1.0]], np.float32)
    for variant in ("rank", "select"):
        got = topk({"X": x}, attrs={"k": 3}, variant=variant)
        assert got["Indices"].tolist() == [[0, 1, 2]]
        assert np.signbit(got["Values"]).tolist() == [[True, False, True]], variant


# --- against onnxruntime -------------------------------------------------------------------------


def ort_topk(x: np.ndarray, k: int, axis: int = -1, largest: int = 1, *, opset: int = 11):
    """onnxruntime CPU TopK of one node: opset 1 with the attribute k, or opset 11 with k an initializer."""
    ort = pytest.importorskip("onnxruntime")
    pytest.importorskip("onnx")
    from onnx import TensorProto, helper

    elem = TensorProto.FLOAT if x.dtype == np.float32 else TensorProto.FLOAT16
    graph_inputs = [helper.make_tensor_value_info("X", elem, list(x.shape))]
    outputs = [
        helper.make_tensor_value_info("Values", elem, None),
        helper.make_tensor_value_info("Indices", TensorProto.INT64, None),
    ]
    if opset == 1:
        node = helper.make_node("TopK", ["X"], ["Values", "Indices"], k=k, axis=axis)
        inits = []
    else:
        node = helper.make_node("TopK", ["X", "K"], ["Values", "Indices"], axis=axis, largest=largest, sorted=1)
        inits = [helper.make_tensor("K", TensorProto.INT64, [1], [k])]
    graph = helper.make_graph([node], "topk", graph_inputs, outputs, initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 10
    options = ort.SessionOptions()
    options.log_severity_level = 3  # opset 1 is below what onnxruntime guarantees: it warns, and runs
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    values, indices = session.run(None, {"X": x})
    return values, indices


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("largest", [1, 0])
@pytest.mark.parametrize(("shape", "axis", "k"), [((5, 37), -1, 9), ((600,), 0, 50), ((6, 4, 3), 1, 4)],
                         ids=["5x37", "600", "6x4x3-axis1"])  # fmt: skip
def test_matches_onnxruntime_opset_11(topk, rng, dtype, largest, shape, axis, k):
    # Ties and infinities, no NaN: onnxruntime's NaN order differs between releases (1.32 puts NaN
    # first for largest=1, as this package does; 1.30 last), so NaN is judged by the NumPy reference.
    x = rng.integers(-6, 7, size=shape).astype(dtype)  # ties
    x.reshape(-1)[:2] = [np.inf, -np.inf]
    values, indices = ort_topk(x, k, axis, largest)
    attrs = {"k": k, "axis": axis, "largest": largest}
    for verdict in topk.explain({"X": x}, attrs=attrs).verdicts:
        if verdict.accepted:
            got = topk({"X": x}, attrs=attrs, variant=verdict.variant)
            assert_same(got, values, indices, f"variant {verdict.variant}")
    # and the package's reference agrees with onnxruntime
    want_values, want_indices = expected(x, attrs)
    np.testing.assert_array_equal(want_indices, indices)


def test_matches_onnxruntime_opset_1_with_k_an_attribute(topk, rng):
    x = rng.integers(-3, 4, size=(4, 50)).astype(np.float32)  # ties; no NaN (see above)
    values, indices = ort_topk(x, 5, opset=1)
    assert_same(topk({"X": x}, attrs={"k": 5}), values, indices, "opset 1")


# --- refusals ------------------------------------------------------------------------------------


@pytest.mark.parametrize(("attrs", "clause"), [({}, "kOk=False"), ({"k": 0}, "kOk=False"), ({"k": 6}, "kOk=False"),
                                               ({"k": -2}, "kOk=False"), ({"k": 1, "axis": 2}, "axisOk=False"),
                                               ({"k": 1, "largest": 2}, "largestOk=False"),
                                               ({"k": 1, "sorted": -1}, "sortedOk=False")])  # fmt: skip
def test_bad_attributes_are_refused(topk, attrs, clause):
    with pytest.raises(errors.SelectionError, match=clause):
        topk({"X": np.zeros((2, 5), np.float32)}, attrs=attrs)


def test_an_empty_axis_is_refused_and_an_empty_other_axis_is_empty(topk):
    with pytest.raises(errors.SelectionError, match="kOk=False"):
        topk({"X": np.zeros((2, 0), np.float32)}, attrs={"k": 1})
    got = topk({"X": np.zeros((0, 5), np.float16)}, attrs={"k": 2})
    assert got["Values"].shape == got["Indices"].shape == (0, 2) and got["Indices"].dtype == np.int64


def test_rank_0_is_refused(topk):
    with pytest.raises(errors.RankError):
        topk({"X": np.float32(1.0)}, attrs={"k": 1})
