"""tests/packages/demo.CumSum: ONNX CumSum (opset 14, its `axis` input an attribute here), a
package written from the docs alone by a kernel author, run through load_kernel()
with no engine change. Two variants: `sequential` (one invocation per scan line) and `workgroup`
(one workgroup per line, a workgroup-memory scan over chunks of WORKGROUP_SIZE x ITEMS elements
with the running total carried from chunk to chunk, so a line may be any length).

Results are judged against a float64 reference written here independently of the package's
reference.py (a loop along the axis, not np.cumsum). The tolerance is the
worst-case bound of floating-point summation (Higham, "Accuracy and Stability of Numerical
Algorithms", 4.2): a running sum whose terms go through at most k f32 roundings is off by about
k * 2^-24 * (the sum of |x| up to there); k is the longest chain of additions of either variant's
order. float16 data is summed in f32, so the same bound holds, plus one f16 rounding of the result
(and a flushed f16 subnormal). Small-integer inputs have exact sums, which checks the indexing,
the flags and the carries exactly.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import webgpu_kernels as wk
from webgpu_kernels import errors
from webgpu_kernels.manifest import check_manifest

import references as ref
from conftest import (
    DTYPE_IDS,
    DTYPES,
    PACKAGES_DIR,
    assert_engine_has_no_code_for,
    assert_valid_and_passing,
    poison_outputs,
    stored_expectations,
)

PACKAGE = PACKAGES_DIR / "demo.CumSum"
VARIANTS = ("workgroup", "sequential")
DEFAULTS = {"WORKGROUP_SIZE": 256, "ITEMS": 4}


@pytest.fixture(scope="module")
def cumsum():
    return wk.load_kernel(PACKAGE)


# --- reference and tolerance ---------------------------------------------------------------------


def reference(x: np.ndarray, axis: int = -1, exclusive: int = 0, reverse: int = 0) -> np.ndarray:
    """ONNX CumSum in float64, spelled out: walk the axis in scan order, writing the running sum
    before (exclusive) or after adding each element."""
    x64 = np.moveaxis(np.asarray(x).astype(np.float64), axis, -1)
    y = np.zeros(x64.shape)
    acc = np.zeros(x64.shape[:-1])
    n = x64.shape[-1]
    for p in range(n - 1, -1, -1) if reverse else range(n):
        if exclusive:
            y[..., p] = acc
        acc = acc + x64[..., p]
        if not exclusive:
            y[..., p] = acc
    return np.moveaxis(y, -1, axis)


def chain(n: int, tunables: dict | None) -> int:
    """An upper bound on the f32 additions one term goes through in a running sum of n terms, in
    either variant: n in the sequential one; ITEMS, the scan's levels and one carry per chunk in
    the workgroup one."""
    t = {**DEFAULTS, **(tunables or {})}
    return n + t["ITEMS"] + (t["WORKGROUP_SIZE"] - 1).bit_length() + 2


def tolerance(x, axis, reverse, tunables) -> dict[str, object]:
    n = x.shape[axis] if x.ndim else 1
    magnitude = reference(np.abs(x.astype(np.float64)), axis, 0, reverse)  # inclusive >= exclusive
    k = chain(n, tunables)
    atol = 2 * k * ref.U32 * magnitude + k * ref.F32_TINY  # 2u: the gamma_k denominator, a contracted add
    if x.dtype == np.float32:
        return {"rtol": 0.0, "atol": atol}
    return {"rtol": ref.F16_STEP, "atol": atol + ref.F16_FLUSH}


def run(kernel, x, axis=-1, exclusive=0, reverse=0, *, variant=None, tunables=None, exact=False):
    """Run the kernel onto NaN-filled buffers, check it left x alone and matches the reference;
    returns (Y, the variant that ran)."""
    attrs = {"axis": axis, "exclusive": exclusive, "reverse": reverse}
    chosen = variant or kernel.explain({"X": x}, attrs=attrs, tunables=tunables).chosen
    before = x.copy()
    want = reference(x, axis, exclusive, reverse)
    poison_outputs(kernel, {"X": x}, attrs=attrs, tunables=tunables)  # an unwritten element shows as NaN
    y = kernel({"X": x}, attrs=attrs, variant=variant, tunables=tunables)["Y"]
    np.testing.assert_array_equal(x, before)
    what = f"{x.shape} {attrs} {tunables} {chosen}"
    if exact:
        rtol = 0.0 if x.dtype == np.float32 else ref.F16_STEP  # sums past 2048 round in f16
        ref.assert_matches(y, want, x.dtype, rtol=rtol, atol=0.0, what=what)
    else:
        ref.assert_matches(y, want, x.dtype, **tolerance(x, axis, reverse, tunables), what=what)
    return y, chosen


def small_ints(rng, shape, dtype):
    """Integers in [-8, 8]: every running sum is exact in f32 (the lines here stay far below 2^21)."""
    return rng.integers(-8, 9, size=shape).astype(dtype)


def accepted(kernel, x, attrs=None, tunables=None) -> list[str]:
    return [v.variant for v in kernel.explain({"X": x}, attrs=attrs, tunables=tunables).verdicts if v.accepted]


# --- the package ---------------------------------------------------------------------------------


def test_package_files():
    names = sorted(p.name for p in PACKAGE.iterdir() if p.name != "__pycache__" and p.suffix != ".npy")
    assert names == ["bench.json", "cum-sum-sequential.wgsl.jinja", "cum-sum-workgroup.wgsl.jinja", "manifest.json",
                     "metadata.json", "reference.py", "test.json"]  # fmt: skip
    assert len(list(PACKAGE.glob("*.Y.npy"))) == 8  # expected outputs of more than 64 elements
    data = json.loads((PACKAGE / "manifest.json").read_text("utf-8"))
    assert check_manifest(data) == []
    assert [(v["id"], v["priority"]) for v in data["variants"]] == [("workgroup", 10), ("sequential", 0)]
    assert data["attributes"] == {"axis": -1, "exclusive": 0, "reverse": 0}
    assert "attribute here" in data["description"]  # ONNX's axis input, as an attribute
    assert "{{ workgroupIndex }}" in (PACKAGE / "cum-sum-workgroup.wgsl.jinja").read_text("utf-8")


def test_engine_has_no_code_for_it():
    assert_engine_has_no_code_for("CumSum")


def test_validates_and_its_test_json_passes(cumsum):
    assert_valid_and_passing(cumsum, PACKAGE, VARIANTS)


def test_expected_outputs_are_the_reference(cumsum):
    """test.json's expected outputs (written by `expect` from the package's reference.py) agree with
    this file's own reference, rounded to the output dtype, to within one rounding."""
    seen = 0
    for case, inputs, stored in stored_expectations(cumsum, "Y", lambda ins: ins["X"].dtype.name):
        attrs = {"axis": -1, "exclusive": 0, "reverse": 0, **case.attrs}
        x = inputs["X"]
        want = reference(x, attrs["axis"], attrs["exclusive"], attrs["reverse"])
        step = 2.0**-23 if x.dtype == np.float32 else 2.0**-10
        np.testing.assert_allclose(stored.astype(np.float64), want, rtol=step, atol=1e-30, err_msg=case.name)
        seen += 1
    assert seen == 20


# --- results -------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize(
    ("shape", "axis", "exclusive", "variant"),
    [
        ((4, 32000), -1, 0, "workgroup"),  # top-p sampling: the running sum over a sorted vocabulary
        ((2, 77, 768), 1, 0, "sequential"),  # CLIP text tokens, summed over the 77 positions
        ((2, 1024, 64), 1, 1, "workgroup"),  # positions of a 32x32 latent, lines 64 apart
        ((3, 64), -1, 1, "sequential"),
    ],
    ids=str,
)
def test_model_shapes(cumsum, need_dtype, rng, shape, axis, exclusive, variant, dtype):
    need_dtype(dtype)
    x = rng.standard_normal(shape).astype(dtype)
    _, chosen = run(cumsum, x, axis, exclusive)
    assert chosen == variant


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize(("exclusive", "reverse"), [(0, 0), (1, 0), (0, 1), (1, 1)])
@pytest.mark.parametrize("axis", [0, 1, 2, -1, -2, -3])
def test_every_axis_and_flag_of_rank_3_exactly(cumsum, need_dtype, rng, axis, exclusive, reverse, dtype):
    """Both variants (the workgroup one with a workgroup shorter than the axis), every axis, both flags."""
    need_dtype(dtype)
    x = small_ints(rng, (3, 5, 7), dtype)
    for variant in VARIANTS:
        run(cumsum, x, axis, exclusive, reverse, variant=variant, tunables={"WORKGROUP_SIZE": 2, "ITEMS": 1}, exact=True)


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize(
    ("shape", "axis", "wg", "items"),
    [((3, 1000), -1, 32, 2), ((2, 777), -1, 96, 3), ((2, 300, 3), 1, 64, 1), ((5, 129), -1, 1, 1), ((2, 4097), 1, 256, 4),
     ((1, 2048), -1, 64, 16)],  # fmt: skip
    ids=str,
)
def test_lines_longer_than_a_chunk_exactly(cumsum, need_dtype, rng, shape, axis, wg, items, dtype):
    """Lines of many chunks, not a multiple of the chunk; workgroup sizes that are and are not
    powers of two: every chunk's carry counted once, in both scan directions."""
    need_dtype(dtype)
    x = small_ints(rng, shape, dtype)
    tunables = {"WORKGROUP_SIZE": wg, "ITEMS": items}
    for exclusive, reverse in [(0, 0), (1, 1)]:
        for variant in VARIANTS:
            run(cumsum, x, axis, exclusive, reverse, variant=variant, tunables=tunables, exact=True)


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize(("exclusive", "reverse"), [(0, 0), (1, 1)])
def test_random_normal_long_lines(cumsum, need_dtype, rng, exclusive, reverse, dtype):
    need_dtype(dtype)
    x = (rng.standard_normal((3, 5000)) * 3).astype(dtype)
    for variant in VARIANTS:
        run(cumsum, x, -1, exclusive, reverse, variant=variant)


@pytest.mark.parametrize("variant", VARIANTS)
def test_f16_accumulates_in_f32(cumsum, need_dtype, variant):
    """2048 + 1 is 2048 again in f16; in f32 the ones count, and 2048 + 2k is an f16 number."""
    need_dtype(np.float16)
    x = np.ones((2, 1001), np.float16)
    x[:, 0] = 2048
    y = cumsum({"X": x}, variant=variant, tunables={"WORKGROUP_SIZE": 64})["Y"]
    want = (2048 + np.arange(1001, dtype=np.float64)).astype(np.float16)
    np.testing.assert_array_equal(y, np.broadcast_to(want, (2, 1001)))


@pytest.mark.parametrize("n", [1, 2, 7, 300])
def test_rank_1(cumsum, rng, n):
    x = rng.standard_normal(n).astype(np.float32)
    y, chosen = run(cumsum, x, 0)
    assert y.shape == (n,) and chosen == ("workgroup" if n >= 256 else "sequential")
    run(cumsum, x, -1, 1, 1)


def test_onnx_examples(cumsum):
    """The examples of ONNX's CumSum definition."""
    x = np.array([1, 2, 3, 4, 5], np.float32)
    for (exclusive, reverse), want in {(0, 0): [1, 3, 6, 10, 15], (1, 0): [0, 1, 3, 6, 10],
                                       (0, 1): [15, 14, 12, 9, 5], (1, 1): [14, 12, 9, 5, 0]}.items():  # fmt: skip
        for variant in VARIANTS:
            y = cumsum({"X": x}, attrs={"axis": 0, "exclusive": exclusive, "reverse": reverse}, variant=variant,
                       tunables={"WORKGROUP_SIZE": 2})["Y"]  # fmt: skip
            np.testing.assert_array_equal(y, np.array(want, np.float32))
    x = np.array([[1, 2, 3], [4, 5, 6]], np.float32)
    np.testing.assert_array_equal(cumsum({"X": x}, attrs={"axis": 0})["Y"], [[1, 2, 3], [5, 7, 9]])
    np.testing.assert_array_equal(cumsum({"X": x}, attrs={"axis": 1})["Y"], [[1, 3, 6], [4, 9, 15]])


@pytest.mark.parametrize("variant", VARIANTS)
def test_axis_of_length_1(cumsum, rng, variant):
    """A running sum of one term is that term, exactly; exclusive, zero."""
    x = rng.standard_normal((4, 1, 6)).astype(np.float32)
    options = {"variant": variant, "tunables": {"WORKGROUP_SIZE": 1}}
    np.testing.assert_array_equal(cumsum({"X": x}, attrs={"axis": 1}, **options)["Y"], x)
    y = cumsum({"X": x}, attrs={"axis": -2, "exclusive": 1, "reverse": 1}, **options)["Y"]
    np.testing.assert_array_equal(y, np.zeros_like(x))


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize(("shape", "axis"), [((0,), 0), ((5, 0), -1), ((3, 0, 4), 1), ((0, 3), 0), ((0, 300), -1)],
                         ids=str)  # fmt: skip
def test_empty_input_gives_an_empty_output(cumsum, need_dtype, shape, axis, dtype):
    need_dtype(dtype)
    x = np.zeros(shape, dtype)
    y, chosen = run(cumsum, x, axis)
    assert y.shape == shape and y.dtype == dtype
    assert chosen == ("workgroup" if shape[axis] >= DEFAULTS["WORKGROUP_SIZE"] else "sequential")  # nothing dispatched


def test_many_lines_spill_the_grid(cumsum, plan_of, rng):
    """70,001 lines at WORKGROUP_SIZE 1: one workgroup per line, past 65,535 workgroups, so the
    grid spills into y and each line is still scanned once. Chosen by the rules, not forced."""
    x = small_ints(rng, (70_001, 3), np.float32)
    tunables = {"WORKGROUP_SIZE": 1, "ITEMS": 2}
    _, chosen = run(cumsum, x, -1, tunables=tunables, exact=True)
    assert chosen == "workgroup"
    grid = plan_of(cumsum, {"X": x}, attrs={"axis": -1, "exclusive": 0, "reverse": 0}, tunables=tunables).passes[0].grid
    assert grid[1] > 1 and grid[0] * grid[1] * grid[2] >= 70_001
    # the sequential variant: 70,001 lines of 3 (not one line of 70,001: lavapipe stops an
    # invocation's loops after 65,535 iterations, docs/format.md "Loops on lavapipe")
    tunables = {"SEQUENTIAL_WORKGROUP_SIZE": 1}
    x = small_ints(rng, (3, 70_001), np.float32)
    run(cumsum, x, 0, 1, 1, variant="sequential", tunables=tunables, exact=True)
    grid = plan_of(cumsum, {"X": x}, variant="sequential", attrs={"axis": 0, "exclusive": 1, "reverse": 1},
                   tunables=tunables).passes[0].grid  # fmt: skip
    assert grid[1] > 1


def test_a_line_past_the_loop_cap_goes_to_the_workgroup_variant(cumsum, rng):
    """lavapipe stops an invocation's loops after 65,535 iterations without an error
    (docs/format.md, "Loops on lavapipe"): a forced sequential variant there had left most of a
    line of 70,001 unwritten. Each variant refuses a line it would loop over more than that."""
    x = small_ints(rng, (1, 70_001), np.float32)
    _, chosen = run(cumsum, x, -1, 1, 0, exact=True)
    assert chosen == "workgroup"
    with pytest.raises(errors.VariantRejectedError) as info:
        cumsum({"X": x}, variant="sequential")
    assert info.value.clause == "sequentialLoopOk"
    with pytest.raises(errors.VariantRejectedError) as info:
        cumsum({"X": x}, variant="workgroup", tunables={"WORKGROUP_SIZE": 1, "ITEMS": 1})
    assert info.value.clause == "chunkLoopOk"


# --- selection, errors ---------------------------------------------------------------------------


def test_selection_follows_the_line_length(cumsum):
    meta = wk.TensorMeta((8, 255), "float32")
    assert accepted(cumsum, meta) == ["sequential"]
    assert accepted(cumsum, wk.TensorMeta((8, 256), "float32")) == ["workgroup", "sequential"]
    explanation = cumsum.explain({"X": meta}, tunables={"WORKGROUP_SIZE": 300})
    workgroup = explanation.verdicts[0]
    assert (workgroup.variant, workgroup.clause) == ("workgroup", "longLine")
    explanation = cumsum.explain({"X": wk.TensorMeta((2, 77, 768), "float16")}, attrs={"axis": -2})
    assert {k: explanation.values[k] for k in ("a", "outer", "length", "inner", "lines")} == {
        "a": 1, "outer": 2, "length": 77, "inner": 768, "lines": 1536}  # fmt: skip


@pytest.mark.parametrize("axis", [2, -3, 100])
def test_axis_out_of_range(cumsum, axis):
    with pytest.raises(errors.SelectionError) as info:
        cumsum({"X": np.ones((2, 3), np.float32)}, attrs={"axis": axis})
    assert "axisOk=False" in str(info.value) and f"attrs.axis={axis}" in str(info.value)


def test_rank_0_refused(cumsum):
    with pytest.raises(errors.RankError) as info:
        cumsum({"X": np.array(1.0, np.float32)})
    assert info.value.argument == "X" and "rank 0" in str(info.value)


@pytest.mark.parametrize("attrs", [{"exclusive": 2}, {"reverse": -1}])
def test_flags_other_than_0_or_1_refused(cumsum, attrs):
    with pytest.raises(errors.SelectionError, match="flagsOk=False"):
        cumsum({"X": np.ones((2, 3), np.float32)}, attrs=attrs)


def test_contract_errors(cumsum):
    with pytest.raises(errors.DTypeError):
        cumsum({"X": np.ones(4, np.int32)})
    with pytest.raises(errors.AttributeValueError):
        cumsum({"X": np.ones(4, np.float32)}, attrs={"axis": 0.5})
    with pytest.raises(errors.VariantRejectedError) as info:
        cumsum({"X": np.ones((2, 3), np.float32)}, variant="workgroup")
    assert info.value.clause == "longLine"
    with pytest.raises(errors.SelectionError, match="itemsOk"):
        cumsum({"X": np.ones((2, 300), np.float32)}, variant="workgroup", tunables={"ITEMS": 17})


def test_shape_and_flags_travel_in_the_uniform(cumsum, plan_of):
    """length, inner and the flags are uniform fields: other shapes and flags reuse the pipeline."""
    a = plan_of(cumsum, {"X": np.ones((2, 5, 7), np.float32)}, attrs={"axis": 1, "exclusive": 0, "reverse": 0})
    b = plan_of(cumsum, {"X": np.ones((9, 3), np.float32)}, attrs={"axis": 0, "exclusive": 1, "reverse": 1})
    assert (a.variant, b.variant) == ("sequential", "sequential")
    assert a.passes[0].pipeline is b.passes[0].pipeline


# --- property --------------------------------------------------------------------------------------


@st.composite
def cumsum_calls(draw):
    rank = draw(st.integers(1, 3))
    shape = tuple(draw(st.lists(st.integers(0, 40), min_size=rank, max_size=rank)))
    axis = draw(st.integers(-rank, rank - 1))
    flags = (draw(st.integers(0, 1)), draw(st.integers(0, 1)))
    tunables = {"WORKGROUP_SIZE": draw(st.sampled_from([1, 3, 8, 32])), "ITEMS": draw(st.integers(1, 5))}
    return shape, axis, flags, tunables, draw(st.sampled_from(DTYPES)), draw(st.integers(0, 2**32 - 1))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(call=cumsum_calls())
def test_property_any_shape_axis_and_flags(cumsum, call):
    """Random shapes (rank 1 to 3, empty axes included), axes, flags, dtypes and workgroup shapes,
    on every variant that accepts them."""
    shape, axis, (exclusive, reverse), tunables, dtype, seed = call
    if dtype == np.float16 and not wk.get_device().has_f16:
        return
    x = (np.random.default_rng(seed).standard_normal(shape) * 4).astype(dtype)
    attrs = {"axis": axis, "exclusive": exclusive, "reverse": reverse}
    variants = accepted(cumsum, x, attrs, tunables)
    assert "sequential" in variants
    assert ("workgroup" in variants) == (shape[axis] >= tunables["WORKGROUP_SIZE"])
    for variant in variants:
        run(cumsum, x, axis, exclusive, reverse, variant=variant, tunables=tunables)
