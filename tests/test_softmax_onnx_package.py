"""tests/packages/ai.onnx.Softmax: ONNX Softmax (ai.onnx, opset 13), written from the format documents
alone and run through load_kernel() with no engine change.

Semantics (Softmax-13): ``output = exp(input - max) / sum(exp(input - max))`` along the one axis
``axis`` (default -1, negative counted from the end, in [-r, r - 1]), each slice along it on its own;
opset 1-11's coercion of the input to 2-D is gone since 13. float32 and float16 (computed in f32,
rounded to float16 once). ONNX refuses a rank-0 input. A slice holding NaN or +inf, or only -inf,
is NaN whole: what the float64 formula gives (inf - inf, exp(nan)) and what onnxruntime's CPU
kernel returns (checked below), which the package matches.

Judged against a float64 NumPy reference written from the definition and onnxruntime's CPU kernel
(a one-node opset-13 model), every variant, both dtypes. test.json's expected values come from
``expect_reference``: ``webgpu-kernels expect tests/packages/ai.onnx.Softmax --reference
tests/test_softmax_onnx_package.py:expect_reference``.
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

PACKAGE_NAME = "ai.onnx.Softmax"
PACKAGE = PACKAGES_DIR / PACKAGE_NAME
VARIANTS = ["split", "strided", "rows", "workgroup"]
# f32: WGSL's exp (3 + 2|x| ulp) and a float32 sum in another order, with room for a GPU's exp over
# lavapipe's 2.9e-6 (the strided variant's online rescaling); f16: one f16 ulp (2^-10) for the
# double rounding, and the subnormal step.
TOLERANCE = {np.dtype(np.float32): (1e-5, 1e-7), np.dtype(np.float16): (1e-3, 1e-6)}


# --- reference (also `webgpu-kernels expect`'s) ------------------------------------------------------


def softmax(x, axis: int = -1) -> np.ndarray:
    """Softmax-13 in float64; ValueError for an axis out of [-r, r - 1] (or a rank-0 input)."""
    x = np.asarray(x, dtype=np.float64)
    if not -x.ndim <= axis < x.ndim:
        raise ValueError(f"axis {axis} out of range for rank {x.ndim}")
    if x.size == 0:
        return x.copy()
    with np.errstate(invalid="ignore", over="ignore"):
        e = np.exp(x - np.max(x, axis=axis, keepdims=True))
        return e / np.sum(e, axis=axis, keepdims=True)


def expect_reference(inputs: dict, attrs: dict) -> dict:
    """For `webgpu-kernels expect`: inputs as `test` builds them, attributes over the defaults."""
    return {"output": softmax(inputs["input"], attrs["axis"])}


@functools.lru_cache(maxsize=None)
def ort_session(rank: int, axis: int, float16: bool):
    """A one-node Softmax-13 model on onnxruntime's CPU provider (symbolic dimensions)."""
    pytest.importorskip("onnxruntime")
    pytest.importorskip("onnx")
    from onnx import TensorProto, helper

    from references import one_node_session, symbolic_tensor

    kind = TensorProto.FLOAT16 if float16 else TensorProto.FLOAT
    node = helper.make_node("Softmax", ["input"], ["output"], axis=axis)
    return one_node_session(node, [symbolic_tensor("input", kind, rank)], [symbolic_tensor("output", kind, rank)], 13)


def ort_softmax(x: np.ndarray, axis: int = -1) -> np.ndarray:
    return ort_session(x.ndim, axis, x.dtype == np.float16).run(None, {"input": x})[0]


def assert_close(got: np.ndarray, want: np.ndarray, dtype, what: str) -> None:
    rtol, atol = TOLERANCE[np.dtype(dtype)]
    np.testing.assert_allclose(got.astype(np.float64), np.asarray(want, np.float64), rtol=rtol, atol=atol, err_msg=what)


@pytest.fixture(scope="module")
def kernel() -> wk.Kernel:
    return wk.load_kernel(PACKAGE)


def call(kernel: wk.Kernel, x: np.ndarray, axis: int = -1, **options) -> np.ndarray:
    """One call, its output poisoned first (an unwritten element reads NaN), the input untouched,
    checked against the float64 reference rounded to x's dtype (NaN where it is NaN)."""
    attrs = {"axis": axis}
    before = x.copy()
    poison_outputs(kernel, {"input": x}, attrs=attrs, tunables=options.get("tunables"))
    got = kernel({"input": x}, attrs=attrs, **options)["output"]
    assert x.tobytes() == before.tobytes()
    assert got.dtype == x.dtype and got.shape == x.shape
    assert_close(got, softmax(x, axis).astype(x.dtype), x.dtype, f"input {x.shape} {x.dtype} axis {axis} {options}")
    return got


def accepting(kernel: wk.Kernel, x: np.ndarray, axis: int) -> list[str]:
    """The variants whose `when` holds for the call (test runs each of them forced)."""
    verdicts = kernel.explain({"input": x}, attrs={"axis": axis}).verdicts
    return [v.variant for v in verdicts if v.accepted]


# --- the package ----------------------------------------------------------------------------------


def test_package_files(kernel):
    data = json.loads((PACKAGE / "manifest.json").read_text("utf-8"))
    assert (data["domain"], data["name"], data["sinceVersion"]) == ("ai.onnx", "Softmax", 13)
    assert data["attributes"] == {"axis": -1}
    assert [i["role"] for i in data["inputs"]] == ["input"] and [o["role"] for o in data["outputs"]] == ["output"]
    assert data["typeConstraints"] == {"T": ["float32", "float16"]}
    assert kernel.op_id == PACKAGE_NAME and kernel.variants == VARIANTS
    bench = json.loads((PACKAGE / "bench.json").read_text("utf-8"))
    shapes = {tuple(c["inputs"]["input"]["shape"]) for c in bench["cases"]}
    assert {(1, 12, 77, 77), (2, 12, 77, 77), (2, 8, 4096, 77), (2, 8, 1024, 1024), (2, 8, 256, 256)} <= shapes


def test_engine_has_no_code_for_it():
    assert_engine_has_no_code_for(PACKAGE_NAME)


def test_validates_and_its_test_json_passes(kernel):
    assert_valid_and_passing(kernel, PACKAGE, VARIANTS)


def test_expected_outputs_are_the_reference(kernel):
    """test.json's stored outputs are this module's float64 reference of the case's inputs, rounded
    once to the input's dtype; the cases cover both dtypes, a non-last axis and every NaN kind."""
    from webgpu_kernels.casefile import read_test_file

    attrs = {c.name: c.attrs for c in read_test_file(kernel.package).cases}
    dtypes, axes, nan_cases = set(), set(), 0
    for case, inputs, stored in stored_expectations(kernel, "output", lambda i: i["input"].dtype.name):
        x = inputs["input"]
        axis = attrs[case.name].get("axis", -1)
        want = softmax(x, axis).astype(x.dtype).astype(np.float64)
        np.testing.assert_array_equal(stored, want, err_msg=case.name)
        dtypes.add(x.dtype.name)
        axes.add(axis % x.ndim == x.ndim - 1)
        nan_cases += bool(np.isnan(stored).any())
    assert dtypes == {"float32", "float16"} and axes == {True, False} and nan_cases == 6


# --- results -------------------------------------------------------------------------------------

# (shape, axis): CLIP-like rows, non-last axes of either sign, length-1 axes, a row longer than a
# workgroup, odd lengths, rank 1
CALLS = [
    ((1, 2, 77, 77), -1),
    ((2, 5, 7), 0),
    ((2, 5, 7), 1),
    ((2, 5, 7), -3),
    ((2, 5, 7), 2),
    ((3, 1, 4), 1),
    ((3, 4, 1), -1),
    ((2, 1300, 3), 1),
    ((2, 1300), -1),
    ((4, 33), 1),
    ((13,), 0),
    # split: more columns than a workgroup (inner 300 > 128, a partial last block), an odd inner
    # under a deeper axis, a long axis over few columns (chunks of 79, the last of 23)
    ((2, 37, 300), 1),
    ((2, 3, 67, 9), 2),
    ((1, 5000, 16), -2),
]


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize(("shape", "axis"), CALLS)
def test_every_variant_against_the_reference_and_onnxruntime(kernel, rng, shape, axis, dtype):
    x = (rng.standard_normal(shape) * 3).astype(dtype)
    want = ort_softmax(x, axis)
    variants = accepting(kernel, x, axis)
    # strided and split take exactly the non-last axes (of a slice longer than 1 element apart)
    strided = int(np.prod(shape[axis % len(shape) + 1 :])) > 1
    assert ("strided" in variants) == ("split" in variants) == strided and "workgroup" in variants
    # rows takes the last axis (a contiguous row) up to 4,096 elements at WORKGROUP_SIZE 128
    assert ("rows" in variants) == (not strided)
    for variant in variants:
        got = call(kernel, x, axis, variant=variant)
        assert_close(got, want, dtype, f"onnxruntime: {shape} axis {axis} {variant}")


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("axis", [-1, 0])
def test_nan_inf_and_large_values_as_onnxruntime(kernel, axis, dtype):
    """Slices of only -inf, of +inf, of NaN and of only +inf are NaN whole in onnxruntime (and in
    the float64 formula); -inf among numbers is 0; |x| of 1e4 (float32) or 6e4 (float16) neither
    overflows nor gives NaN."""
    big = 1e4 if dtype == np.float32 else 6e4
    inf, nan = np.inf, np.nan
    rows = [[-inf, -inf, -inf], [-inf, 0, 1], [inf, 0, 1], [nan, 0, 1], [inf, inf, inf], [big, 0, -big],
            [-big, -big, -big], [big, big - 1, 0.5], [1, 2, 3]]  # fmt: skip
    x = np.array(rows, dtype)
    if axis == 0:
        x = np.ascontiguousarray(x.T)
    want = ort_softmax(x, axis)
    nan_slices = np.isnan(want).all(axis=axis)
    assert nan_slices.tolist() == [True, False, True, True, True, False, False, False, False]
    for variant in accepting(kernel, x, axis):
        got = call(kernel, x, axis, variant=variant)
        np.testing.assert_array_equal(np.isnan(got), np.isnan(want), err_msg=variant)
        assert np.isfinite(got[~np.isnan(want)]).all()
        assert_close(got, want, dtype, f"onnxruntime, axis {axis} {variant}")


@pytest.mark.parametrize("shape_axis", [((0, 4), -1), ((2, 0, 3), 1), ((2, 3, 0), -1), ((0,), 0)])
def test_empty_tensors(kernel, shape_axis):
    shape, axis = shape_axis
    x = np.zeros(shape, np.float32)
    for variant in accepting(kernel, x, axis):
        assert call(kernel, x, axis, variant=variant).shape == shape
    assert ort_softmax(x, axis).shape == shape


@pytest.mark.parametrize(
    ("variant", "size"),
    [
        ("workgroup", 1),
        ("workgroup", 32),
        ("workgroup", 1024),
        ("strided", 1),
        ("strided", 7),
        ("split", 1),
        ("split", 7),
    ],
)
def test_workgroup_sizes(kernel, rng, variant, size):
    """The workgroup variant's tree needs a power of two; strided and split take any size (split at
    7 runs five columns of one row, at 1 one column)."""
    x = rng.standard_normal((3, 1100, 5)).astype(np.float32)
    call(kernel, x, 1, variant=variant, tunables={"WORKGROUP_SIZE": size})


@pytest.mark.parametrize(
    ("shape", "axis", "grid"),
    [
        # (columns per workgroup, rows per workgroup, column blocks, chunks, chunk length)
        ((2, 5000, 64), 1, (64, 2, 1, 64, 79)),
        ((2, 8, 256, 256), 2, (128, 1, 2, 16, 16)),
        ((2, 5000, 3), 1, (3, 42, 1, 64, 79)),
        ((3, 1, 4), 1, (4, 32, 1, 1, 1)),
        ((2, 37, 300), 1, (128, 1, 3, 4, 10)),
    ],
)
def test_split_is_chosen_for_a_non_last_axis_and_splits_it(kernel, shape, axis, grid):
    """A non-last axis (inner > 1) runs split, whose grid cuts the axis into about sqrt(L) chunks
    (fewer where the columns already make ~1024 workgroups), so that few columns still give many
    workgroups; each workgroup covers `cols` adjacent columns in `rows` rows."""
    explained = kernel.explain({"input": (shape, "float32")}, attrs={"axis": axis})
    assert explained.chosen == "split", str(explained)
    v = explained.values
    assert (v["splitCols"], v["splitRows"], v["splitBlocks"], v["chunks"], v["chunkLen"]) == grid
    # the chunks tile the axis: none empty, none missing
    assert (v["chunks"] - 1) * v["chunkLen"] < v["L"] <= v["chunks"] * v["chunkLen"]


def test_bench_cases_of_a_non_last_axis_run_split(kernel):
    """bench.json's cases over axis 1 or 2 (the slow ones under strided) run split by default."""
    bench = json.loads((PACKAGE / "bench.json").read_text("utf-8"))
    cases = [c for c in bench["cases"] if c.get("attrs", {}).get("axis", -1) not in (-1, 3)]
    assert len(cases) == 2 and all("variant:split" in c["tags"] for c in cases)
    for case in cases:
        for dtype in case["types"]["T"]:
            got = kernel.explain({"input": (case["inputs"]["input"]["shape"], dtype)}, attrs=case["attrs"]).chosen
            assert got == "split", (case["name"], dtype)


def test_bench_cases_of_the_last_axis_run_rows(kernel):
    """bench.json's last-axis cases (CLIP and SD 1.5 attention scores, rows of 77 to 1,024) run rows
    by default; `bench --variant workgroup --tag variant:rows` times the variant they ran before."""
    bench = json.loads((PACKAGE / "bench.json").read_text("utf-8"))
    cases = [c for c in bench["cases"] if c.get("attrs", {}).get("axis", -1) in (-1, 3)]
    assert len(cases) == 5 and all("variant:rows" in c["tags"] for c in cases)
    for case in cases:
        for dtype in case["types"]["T"]:
            got = kernel.explain(
                {"input": (case["inputs"]["input"]["shape"], dtype)}, attrs=case.get("attrs", {})
            ).chosen
            assert got == "rows", (case["name"], dtype)


def test_split_refuses_what_llvmpipe_cannot_loop_over(kernel):
    """split's chunk length is bounded (at most 32,768), so its loops stay under llvmpipe's cap far
    past strided's; where the combine loop and the chunk loop together would not, it refuses."""
    assert kernel.explain({"input": ((1, 40000, 2), "float32")}, attrs={"axis": 1}).chosen == "split"
    past = kernel.explain({"input": ((1, 2**31, 128), "float16")}, attrs={"axis": 1})
    assert past.chosen != "split" and "splitLoopOk" in str(past), str(past)


def test_variants_refuse_what_llvmpipe_cannot_loop_over(kernel):
    """Two loops of the axis' length per invocation stay under llvmpipe's 65,535 iterations up to
    32,766 elements; past that split (chunked, so far longer) or the workgroup variant takes the
    call, each bounded so."""
    at = kernel.explain({"input": ((2, 32766, 2), "float32")}, attrs={"axis": 1}, variant="strided")
    past = kernel.explain({"input": ((2, 32767, 2), "float32")}, attrs={"axis": 1}, variant="strided")
    assert at.chosen == "strided" and past.chosen is None
    assert "stridedLoopOk" in str(past)
    # unforced, split (of higher priority) takes the longer one
    assert kernel.explain({"input": ((2, 32767, 2), "float32")}, attrs={"axis": 1}).chosen == "split"
    # the workgroup variant's three loops of ceil(length / WORKGROUP_SIZE): 21,844 at most
    one = {"WORKGROUP_SIZE": 1}
    assert kernel.explain({"input": ((21844,), "float32")}, tunables=one).chosen == "workgroup"
    with pytest.raises(wk.SelectionError, match="workgroupLoopOk=False") as info:
        kernel({"input": np.zeros(21845, np.float32)}, tunables=one)
    # strided refuses the axis for this input (`inner > 1`), workgroup the tunable: no attribute is to blame
    assert str(info.value).splitlines()[0] == "ai.onnx.Softmax: no variant can run this call:", str(info.value)
    assert info.value.attributes == ()


def test_invalid_attributes_and_inputs_are_typed_errors(kernel):
    """A non-integer axis is an AttributeValueError naming it; an axis out of [-r, r - 1] a
    SelectionError (a KernelError) naming the clause and the axis, as onnxruntime refuses it."""
    x = np.ones((2, 3, 4), np.float32)
    for bad in (1.5, "1", True, None):
        with pytest.raises(errors.AttributeValueError, match="argument 'axis'") as info:
            kernel({"input": x}, attrs={"axis": bad})
        assert info.value.argument == "axis"
    for bad in (3, -4):
        with pytest.raises(wk.SelectionError, match=f"axisOk=False, ranks.input=3, attrs.axis={bad}") as refused:
            kernel({"input": x}, attrs={"axis": bad})
        # the axis is wrong for this input's rank, on any device: the headline names it
        headline = str(refused.value).splitlines()[0]
        assert headline == f"ai.onnx.Softmax: no variant accepts attribute axis={bad} for these inputs:", headline
        assert refused.value.attributes == ("axis",)
        with pytest.raises(Exception, match="axis"):
            ort_softmax(x, bad)
    assert kernel({"input": x}, attrs={"axis": 2.0})["output"].shape == x.shape  # an integral float is the int
    with pytest.raises(errors.RankError) as rank:
        kernel({"input": np.float32(1.0)})
    assert rank.value.argument == "input"
    with pytest.raises(errors.DTypeError):
        kernel({"input": np.ones((2, 3), np.float64)})
    with pytest.raises(errors.UnknownInputError):
        kernel({"input": x}, attrs={"axes": 1})


# --- rows: several rows a workgroup, each row in registers -----------------------------------------


def rows_grid(kernel: wk.Kernel, shape, dtype, **options) -> tuple:
    """(lanes per row, units per lane, elements per unit, rows per workgroup) of the rows variant."""
    explained = kernel.explain({"input": (shape, dtype)}, **options)
    assert explained.chosen == "rows", str(explained)
    v = explained.values
    return v["rowLanes"], v["laneUnits"], v["rowVec"], v["rowsPerGroup"]


@pytest.mark.parametrize(
    ("shape", "grid"),
    [
        # about VALUES_PER_LANE (8) elements an invocation, vec4 or vec2 loads where L allows them
        ((2, 8, 4096, 77), (16, 5, 1, 8)),
        ((1, 12, 77, 77), (16, 5, 1, 8)),
        ((2, 8, 1024, 1024), (128, 2, 4, 1)),
        ((2, 8, 256, 256), (32, 2, 4, 4)),
        ((7, 1), (1, 1, 1, 128)),
        ((7, 2), (1, 1, 2, 128)),
        ((7, 31), (4, 8, 1, 32)),
        ((7, 32), (4, 2, 4, 32)),
        ((7, 33), (8, 5, 1, 16)),
        ((3, 1302), (128, 6, 2, 1)),
        ((3, 4096), (128, 8, 4, 1)),
    ],
)
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_rows_is_chosen_for_the_last_axis_and_its_grid(kernel, shape, grid, dtype):
    assert rows_grid(kernel, shape, dtype) == grid


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("length", [1, 2, 33, 77, 4096])
def test_rows_against_the_reference_and_onnxruntime(kernel, rng, length, dtype):
    """13 rows: the last workgroup is partial wherever a workgroup holds several rows; rows of 4,096
    are the longest rows takes at WORKGROUP_SIZE 128. One length per kind of row: one lane (1), vec2
    loads on one lane (2), a partial last unit (33), CLIP's 77; test.json's 21, 30 (vec2 over four
    lanes) and 256 (vec4, whole units) and CALLS' 1,300 (lanes capped at the workgroup) cover the rest."""
    x = (rng.standard_normal((13, length)) * 3).astype(dtype)
    assert rows_grid(kernel, x.shape, x.dtype)[3] in (1, 8, 16, 32, 128)
    got = call(kernel, x, -1, variant="rows")
    assert_close(got, ort_softmax(x, -1), dtype, f"onnxruntime: rows of {length}")


@pytest.mark.parametrize(
    ("size", "bound", "past"),
    # (WORKGROUP_SIZE, longest row, the variant taking one element more): 32 values an invocation at
    # most, lanes a power of two at most the size (4 of 7, 32 of 48); workgroup refuses 7 and 48
    [(128, 4096, "workgroup"), (256, 8192, "workgroup"), (1, 32, "workgroup"), (7, 128, None), (48, 1024, None)],
)
def test_rows_takes_rows_up_to_32_values_an_invocation(kernel, size, bound, past):
    tunables = {"WORKGROUP_SIZE": size}
    for dtype in ("float32", "float16"):
        lanes, units, vec, _ = rows_grid(kernel, (3, bound), dtype, tunables=tunables)
        assert units * vec == 32 and lanes <= size
        longer = kernel.explain({"input": ((3, bound + 1), dtype)}, tunables=tunables)
        assert longer.chosen == past and "rowsRegistersOk=False" in str(longer), str(longer)
    if size in (1, 7, 48):  # test.json runs rows of 4,096 at 128
        x = (np.random.default_rng(size).standard_normal((3, bound)) * 3).astype(np.float32)
        call(kernel, x, -1, variant="rows", tunables=tunables)


@pytest.mark.parametrize(
    ("size", "length", "dtype"),
    [(2, 33, np.float32), (48, 30, np.float16), (96, 1000, np.float32), (1024, 77, np.float16)],
)
def test_rows_workgroup_sizes(kernel, rng, size, length, dtype):
    """Any WORKGROUP_SIZE: one that is no power of two (48, 96; test.json's 7) leaves its last
    invocations idle (96 on rows of 1,000: one row of 64 lanes, 32 idle). Size 1 is
    test_rows_takes_rows_up_to_32_values_an_invocation's."""
    x = (rng.standard_normal((11, length)) * 3).astype(dtype)
    call(kernel, x, -1, variant="rows", tunables={"WORKGROUP_SIZE": size})


@pytest.mark.parametrize(("values", "length"), [(1, 77), (32, 77), (2, 256), (32, 4096)])
def test_rows_values_per_lane(kernel, rng, values, length):
    """VALUES_PER_LANE sets the lanes a row (1: one unit an invocation); refused outside 1..32."""
    x = (rng.standard_normal((9, length)) * 3).astype(np.float32)
    call(kernel, x, -1, variant="rows", tunables={"VALUES_PER_LANE": values})
    with pytest.raises(wk.VariantRejectedError, match="laneValuesOk=False"):
        kernel({"input": x}, variant="rows", tunables={"VALUES_PER_LANE": 33})


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("length", [77, 256])
def test_rows_nan_inf_and_large_values_as_onnxruntime(kernel, length, dtype):
    """Whole lanes' parts of -inf (their merge term is 0, not NaN), the max in the last partial
    unit, a lone NaN or +inf at either end, only -inf, and |x| near the dtype's largest: the row's
    max is subtracted first, so nothing overflows."""
    big = 1e4 if dtype == np.float32 else 6e4
    x = np.full((9, length), -np.inf, dtype)
    x[1, -1] = 2.0  # only the last element a number: every other lane part is -inf
    x[2, -5:] = [1, 2, 3, 4, 5]
    x[3] = np.linspace(-3, 3, length)
    x[3, 0] = np.nan
    x[4] = np.linspace(-3, 3, length)
    x[4, -1] = np.inf
    x[5] = np.linspace(-big, big, length)
    x[6, : length // 2] = big
    x[7] = -big
    x[8, ::3] = np.linspace(-2, 2, len(x[8, ::3]))
    want = ort_softmax(x, -1)
    assert np.isnan(want).all(axis=1).tolist() == [True, False, False, True, True, False, False, False, False]
    for variant in ("rows", "workgroup"):
        got = call(kernel, x, -1, variant=variant)
        np.testing.assert_array_equal(np.isnan(got), np.isnan(want), err_msg=variant)
        assert_close(got, want, dtype, f"onnxruntime, {variant}")
