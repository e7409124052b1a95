"""tests/packages/demo.ArgMax: ONNX ArgMax written from the format documents alone, the first
package whose output is int64 (a storage-only type: the template writes (low, high) u32 pairs).

Results are judged exactly against NumPy's argmax (NaN as the maximum, the first maximum; with
select_last_index the last, through a flipped axis), on every variant that accepts the call, with
the outputs' pooled buffers poisoned first so that an unwritten element shows.
"""

from __future__ import annotations

import json

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

PACKAGE = PACKAGES_DIR / "demo.ArgMax"


@pytest.fixture(scope="module")
def argmax() -> wk.Kernel:
    return wk.load_kernel(PACKAGE)


def reference(x: np.ndarray, axis: int, keepdims: int, last: int) -> np.ndarray:
    a = axis % x.ndim
    if last:
        idx = x.shape[a] - 1 - np.argmax(np.flip(x, axis=a), axis=a)
    else:
        idx = np.argmax(x, axis=a)
    return np.asarray(np.expand_dims(idx, a) if keepdims else idx, dtype=np.int64)


def run_every_variant(kernel: wk.Kernel, x: np.ndarray, attrs: dict, tunables: dict | None = None) -> list[str]:
    """Run the call on each variant whose `when` holds; return their ids."""
    want = reference(x, attrs.get("axis", 0), attrs.get("keepdims", 1), attrs.get("select_last_index", 0))
    ran = []
    verdicts = kernel.explain({"X": x}, attrs=attrs, tunables=tunables).verdicts
    for vid in [v.variant for v in verdicts if v.accepted]:
        poison_outputs(kernel, {"X": x}, attrs=attrs, tunables=tunables)
        got = kernel({"X": x}, attrs=attrs, variant=vid, tunables=tunables)["reduced"]
        assert got.dtype == np.int64 and got.shape == want.shape, (vid, got.dtype, got.shape)
        np.testing.assert_array_equal(got, want, err_msg=f"variant {vid}, attrs {attrs}")
        ran.append(vid)
    return ran


# --- the package ---------------------------------------------------------------------------------


def test_package_files():
    names = sorted(p.name for p in PACKAGE.iterdir())
    assert names == ["arg-max-key.wgsl.jinja", "arg-max-strided.wgsl.jinja", "arg-max-workgroup.wgsl.jinja",
                     "bench.json", "manifest.json", "metadata.json", "reference.py", "test.json"]  # fmt: skip
    data = json.loads((PACKAGE / "manifest.json").read_text("utf-8"))
    assert check_manifest(data) == []
    # ONNX's int64 output, bound by the one-type constraint
    assert data["typeConstraints"] == {"T": ["float32", "float16"], "I": ["int64"]}


def test_engine_has_no_code_for_it():
    assert_engine_has_no_code_for("demo.ArgMax")


def test_validates_and_its_test_json_passes(argmax):
    assert_valid_and_passing(argmax, PACKAGE, ("workgroup", "strided"))


def test_output_is_int64_written_as_u32_pairs(argmax):
    wgsl = argmax.render({"X": np.zeros((2, 3), np.float16)}, attrs={"axis": 1})["main"]
    assert "array<vec2<u32>>" in wgsl and "enable f16" not in wgsl  # f16 read as words: no shader-f16


# --- against NumPy -------------------------------------------------------------------------------


SHAPES = [(1,), (7,), (300,), (3, 1), (4, 5), (2, 3, 4), (5, 257), (2, 1, 6, 3), (3, 2, 2, 2, 2)]


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_random_shapes_and_axes(argmax, rng, shape, dtype):
    # small integers: many ties; a few NaNs in some rows
    x = rng.integers(-4, 5, size=shape).astype(dtype)
    flat = x.reshape(-1)
    flat[rng.choice(flat.size, size=flat.size // 11, replace=False)] = np.nan
    for axis in range(-len(shape), len(shape)):
        for keepdims in (0, 1):
            last = int(rng.integers(0, 2))
            assert run_every_variant(argmax, x, {"axis": axis, "keepdims": keepdims, "select_last_index": last})


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("last", [0, 1])
@pytest.mark.parametrize("wg", [64, 100, 256])
def test_long_rows_on_both_variants(argmax, rng, dtype, last, wg):
    """The workgroup tree's tie rule: maxima spread over invocations (and a non-power-of-two tree)."""
    x = rng.standard_normal((3, 1001)).astype(dtype)
    x[0, [3, 500, 999]] = 9.0
    x[1, [10, 11]] = np.nan
    x[2, :] = -np.inf
    ran = run_every_variant(argmax, x, {"axis": -1, "keepdims": 0, "select_last_index": last}, {"WORKGROUP_SIZE": wg})
    assert ran == ["workgroup", "strided"]


@pytest.mark.parametrize(("shape", "axis"), [((70000, 2), 0), ((2, 70000), 1)], ids=["axis0", "last-axis"])
def test_axes_past_lavapipe_s_loop_cap_go_to_the_workgroup_variant(argmax, shape, axis):
    """An axis of 65,536 or more: the strided walk stops after 65,535 iterations on lavapipe (it had
    returned 0 for a maximum at 69,000), so selection takes the workgroup variant, any axis."""
    x = np.zeros(shape, np.float32)
    hits = [69000, 65535]
    for col, at in enumerate(hits):
        x[(at, col) if axis == 0 else (col, at)] = 1.0
    assert argmax.explain({"X": x}, attrs={"axis": axis}).chosen == "workgroup"
    assert argmax({"X": x}, attrs={"axis": axis, "keepdims": 0})["reduced"].tolist() == hits


def test_signed_zeros_tie(argmax):
    x = np.array([[-0.0, 0.0, -0.0], [0.0, -0.0, -1.0]], np.float32)
    assert argmax({"X": x}, attrs={"axis": 1, "keepdims": 0})["reduced"].tolist() == [0, 0]
    assert argmax({"X": x}, attrs={"axis": 1, "keepdims": 0, "select_last_index": 1})["reduced"].tolist() == [2, 1]


# --- refusals ------------------------------------------------------------------------------------


def test_an_empty_reduced_axis_is_refused(argmax):
    with pytest.raises(errors.SelectionError, match="reduceOk=False"):
        argmax({"X": np.zeros((2, 0, 3), np.float32)}, attrs={"axis": 1})


def test_an_empty_other_axis_gives_an_empty_output(argmax):
    got = argmax({"X": np.zeros((0, 5), np.float32)}, attrs={"axis": 1, "keepdims": 0})["reduced"]
    assert got.shape == (0,) and got.dtype == np.int64


@pytest.mark.parametrize(("attrs", "clause"), [({"axis": 2}, "axisOk=False"), ({"axis": -3}, "axisOk=False"),
                                               ({"keepdims": 2}, "keepdimsOk=False"),
                                               ({"select_last_index": -1}, "lastOk=False")])  # fmt: skip
def test_bad_attributes_are_refused(argmax, attrs, clause):
    with pytest.raises(errors.SelectionError, match=clause):
        argmax({"X": np.zeros((2, 3), np.float32)}, attrs=attrs)


def test_rank_0_is_refused(argmax):
    with pytest.raises(errors.RankError):
        argmax({"X": np.float32(1.0)})


# --- the doc claims this package led to ----------------------------------------------------------


def test_comparisons_in_a_call_need_parentheses():
    """docs/format.md: "`select(i < j, i > j, last)` does not parse ...: put such comparisons in
    parentheses" (the workgroup template's tie rule first failed so)."""
    device = wk.get_device()
    source = "fn f(i: u32, j: u32, last: bool) -> bool {{ return select({}, last); }}"
    with pytest.raises(Exception, match="expected `\\)`"):
        device.gpu.create_shader_module(code=source.format("i < j, i > j"))
    device.gpu.create_shader_module(code=source.format("(i < j), (i > j)"))


def test_its_refusal_may_be_written_either_way():
    """ArgMax checks the axis in every variant's `when` (`axisOk`), from when a refused case could
    not expect an ExpressionError; now it may (demo.ReduceSum's out-of-range axis), so
    test.json takes both forms of the refusal."""
    from webgpu_kernels.case_format import check_test_data

    case = {"name": "c", "types": {"T": "float32"}, "attrs": {"axis": 2},
            "inputs": {"X": {"shape": [2, 3], "values": [0, 1, 2, 3, 4, 5]}}}  # fmt: skip
    assert not check_test_data({"cases": [{**case, "refused": {"error": "ExpressionError", "message": "axis"}}]})
    assert not check_test_data({"cases": [{**case, "refused": {"error": "SelectionError", "message": "axisOk=False"}}]})
