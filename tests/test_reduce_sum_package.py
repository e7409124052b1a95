"""tests/packages/demo.ReduceSum: a third-party package for an op that is not elementwise (a sum
over one axis, with a workgroup tree reduction), run through load_kernel() with no engine change.

Results are judged against np.sum in float64. The tolerance is the worst-case bound of
floating-point summation: a term that goes through k roundings in f32 is off by at most about
k * 2^-24 * sum(|x|) (Higham, "Accuracy and Stability of Numerical Algorithms", 4.2), where k is
the longest chain of additions of the variant's order (``chain``). That bound is loose for random
data, so the indexing itself is checked exactly too: small-integer inputs have exact f32 sums.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

import webgpu_kernels as wk
from webgpu_kernels import errors
from webgpu_kernels.manifest import check_manifest

import references as ref
from conftest import DTYPE_IDS, DTYPES, PACKAGES_DIR, assert_engine_has_no_code_for, poison_outputs

PACKAGE = PACKAGES_DIR / "demo.ReduceSum"
DEFAULT_WG = 256


@pytest.fixture(scope="module")
def reduce_sum():
    return wk.load_kernel(PACKAGE)


# --- reference and tolerance ---------------------------------------------------------------------


def chain(n: int, variant: str, wg: int) -> int:
    """Longest chain of f32 additions one term goes through when n terms are summed."""
    if n <= 1:
        return 0
    if variant == "strided":  # sequential
        return n - 1
    # a strided partial of ceil(n / wg) terms, then one tree level per power of two below wg
    return -(-n // wg) - 1 + (wg - 1).bit_length()


def tolerance(x, axis, keepdims, dtype, k: int) -> dict[str, object]:
    # eps32 = 2u: twice the first-order bound, for the gamma_k denominator and a contracted add
    magnitude = np.sum(np.abs(x.astype(np.float64)), axis=axis, keepdims=keepdims)
    atol = k * ref.F32_EPS * magnitude + k * float(np.finfo(np.float32).tiny)  # + flushed subnormals
    if np.dtype(dtype) == np.float32:
        return {"rtol": 0.0, "atol": atol}
    return {"rtol": ref.F16_ULP, "atol": atol + 2.0**-14}  # one f16 rounding of the result, either way


def expected_variant(shape, axis, wg=DEFAULT_WG) -> str:
    a = axis % len(shape)
    inner = int(np.prod(shape[a + 1 :], dtype=np.int64))
    return "workgroup" if inner == 1 and shape[a] >= wg else "strided"


def run(kernel, x, axis=-1, keepdims=0, *, variant=None, tunables=None, exact=False):
    """Run the kernel, check it left x alone and matches np.sum; returns (Y, the variant that ran)."""
    attrs = {"axis": axis, "keepdims": keepdims}
    chosen = variant or kernel.explain({"X": x}, attrs=attrs, tunables=tunables).chosen
    before = x.copy()
    want = np.sum(x.astype(np.float64), axis=axis, keepdims=bool(keepdims))
    poison_outputs(kernel, {"X": x}, attrs=attrs, tunables=tunables)  # an unwritten element would show as NaN
    y = kernel({"X": x}, attrs=attrs, variant=variant, tunables=tunables)["Y"]
    np.testing.assert_array_equal(x, before)
    what = f"{x.shape} axis={axis} keepdims={keepdims} {chosen}"
    if exact:
        ref.assert_matches(y, want, x.dtype, rtol=0.0 if x.dtype == np.float32 else ref.F16_ULP, atol=0.0, what=what)
    else:
        wg = (tunables or {}).get("WORKGROUP_SIZE", DEFAULT_WG)
        n = x.shape[axis] if x.ndim else 1
        ref.assert_matches(y, want, x.dtype, **tolerance(x, axis, bool(keepdims), x.dtype, chain(n, chosen, wg)),
                           what=what)  # fmt: skip
    return y, chosen


def small_ints(rng, shape, dtype):
    """Integers in [-8, 8]: every partial sum is exact in f32 (the shapes here stay far below 2^24 / 8)."""
    return rng.integers(-8, 9, size=shape).astype(dtype)


# --- the package ---------------------------------------------------------------------------------


def test_package_files():
    names = sorted(p.name for p in PACKAGE.iterdir())
    assert names == ["bench.json", "manifest.json", "metadata.json", "reduce-sum-strided.wgsl.jinja",
                     "reduce-sum-workgroup.wgsl.jinja", "test.json"]  # fmt: skip
    data = json.loads((PACKAGE / "manifest.json").read_text("utf-8"))
    assert check_manifest(data) == []
    assert [v["id"] for v in data["variants"]] == ["workgroup", "strided"]
    assert all(v.get("when") for v in data["variants"])


def test_engine_has_no_code_for_it():
    assert_engine_has_no_code_for("ReduceSum")


def test_validates():
    """metadata.json is current (run `webgpu-kernels digest` after an edit) and nothing is wrong."""
    from webgpu_kernels.validation import validate_package

    report = validate_package(PACKAGE, gpu=False)
    assert report.ok, [p.message for p in report.errors]


def test_its_test_json_passes_with_the_out_of_range_axis_refused(reduce_sum):
    """`webgpu-kernels test`: the cases' sums, and the refusals, the out-of-range axis's
    ExpressionError among them (test_axis_out_of_range below raises it directly)."""
    from webgpu_kernels.package_tests import run_package_tests

    report = run_package_tests(reduce_sum)
    assert report.ok, [(r.case, r.variant, r.message) for r in report.results if r.status != "pass"]
    ran = {(r.case, r.variant) for r in report.results if not r.refused and r.status == "pass"}
    assert {v for _, v in ran} == {"workgroup", "strided"}, ran
    refused = {r.case: r.message for r in report.results if r.refused}
    assert refused.keys() == {"axis-out-of-range-f32", "keepdims-2-f32", "rank0-f32"}, refused
    assert refused["axis-out-of-range-f32"].startswith("refused: ExpressionError: outputs[0].shape: ")
    assert "axis 3 is out of range for a shape of rank 3" in refused["axis-out-of-range-f32"]


def test_loads(reduce_sum):
    assert reduce_sum.op_id == "demo.ReduceSum"
    assert reduce_sum.variants == ["workgroup", "strided"]


# --- results ------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("keepdims", [0, 1])
@pytest.mark.parametrize("axis", [0, 1, 2, -1, -2, -3])
def test_every_axis_of_rank_3(reduce_sum, need_dtype, rng, axis, keepdims, dtype):
    need_dtype(dtype)
    x = (rng.standard_normal((3, 5, 7)) * 4).astype(dtype)
    y, chosen = run(reduce_sum, x, axis, keepdims)
    assert chosen == "strided"  # 7 < WORKGROUP_SIZE
    assert y.shape == np.sum(x, axis=axis, keepdims=bool(keepdims)).shape
    if axis % 3 == 2:  # the workgroup variant too, with a workgroup no longer than the axis
        run(reduce_sum, x, axis, keepdims, variant="workgroup", tunables={"WORKGROUP_SIZE": 4})


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize(
    ("shape", "axis", "variant"),
    [
        ((2, 77, 768), -1, "workgroup"),  # CLIP text encoder hidden size
        ((2, 256, 1280), -1, "workgroup"),  # SD 1.5 UNet, 1280 channels
        ((2, 4096, 320), -1, "workgroup"),  # SD 1.5 UNet at 512x512, 320 channels
        ((2, 4096, 320), 1, "strided"),  # the same, summed over the 4096 positions
    ],
    ids=str,
)
def test_model_shapes(reduce_sum, need_dtype, rng, shape, axis, variant, dtype):
    need_dtype(dtype)
    x = rng.standard_normal(shape).astype(dtype)
    _, chosen = run(reduce_sum, x, axis)
    assert chosen == variant == expected_variant(shape, axis)


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize(
    ("shape", "axis", "wg"),
    [((6, 97), -1, 1), ((6, 97), -1, 3), ((6, 97), -1, 32), ((5, 300), 1, 96), ((5, 300), 1, 256), ((3, 1000), -1, 64)],
    ids=str,
)
def test_exact_on_integers(reduce_sum, need_dtype, rng, shape, axis, wg, dtype):
    """Both variants, workgroup sizes that are and are not powers of two: every term counted once."""
    need_dtype(dtype)
    x = small_ints(rng, shape, dtype)
    tunables = {"WORKGROUP_SIZE": wg}
    for variant in ("workgroup", "strided"):
        run(reduce_sum, x, axis, variant=variant, tunables=tunables, exact=True)


@pytest.mark.parametrize("variant", ["workgroup", "strided"])
def test_f16_accumulates_in_f32(reduce_sum, need_dtype, variant):
    """2048 + 1 is 2048 again in f16; in f32 the thousand ones count, and 3048 is an f16 number."""
    need_dtype(np.float16)
    x = np.ones((2, 1001), np.float16)
    x[:, 0] = 2048
    y = reduce_sum({"X": x}, variant=variant, tunables={"WORKGROUP_SIZE": 64})["Y"]
    np.testing.assert_array_equal(y, np.full(2, 3048, np.float16))


@pytest.mark.parametrize("axis", [0, 1, 2, 3])
def test_exact_on_integers_every_axis_of_rank_4(reduce_sum, rng, axis):
    x = small_ints(rng, (3, 4, 5, 6), np.float32)
    run(reduce_sum, x, axis, exact=True)
    run(reduce_sum, x, axis, 1, exact=True)


@pytest.mark.parametrize("keepdims", [0, 1])
@pytest.mark.parametrize("n", [1, 5, 300])
def test_rank_1(reduce_sum, rng, n, keepdims):
    x = rng.standard_normal(n).astype(np.float32)
    y, chosen = run(reduce_sum, x, 0, keepdims)
    assert y.shape == ((1,) if keepdims else ())
    assert chosen == expected_variant((n,), 0)


@pytest.mark.parametrize("variant", ["workgroup", "strided"])
def test_axis_of_length_1_copies(reduce_sum, rng, variant):
    """A sum of one term is that term, exactly."""
    x = rng.standard_normal((4, 6, 1)).astype(np.float32)
    y = reduce_sum({"X": x}, attrs={"axis": 2}, variant=variant, tunables={"WORKGROUP_SIZE": 1})["Y"]
    np.testing.assert_array_equal(y, x[:, :, 0])
    x = rng.standard_normal((4, 1, 6)).astype(np.float32)
    y = reduce_sum({"X": x}, attrs={"axis": 1, "keepdims": 1})["Y"]
    np.testing.assert_array_equal(y, x)


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("keepdims", [0, 1])
@pytest.mark.parametrize(("shape", "axis"), [((0,), 0), ((5, 0), -1), ((3, 0, 4), 1), ((0, 3), 0)], ids=str)
def test_empty_axis_gives_zeros(reduce_sum, need_dtype, shape, axis, keepdims, dtype):
    need_dtype(dtype)
    x = np.zeros(shape, dtype)
    y, chosen = run(reduce_sum, x, axis, keepdims)  # onto a NaN-filled buffer: every zero is written
    assert chosen == "strided" and y.size > 0
    np.testing.assert_array_equal(y, np.zeros(y.shape, dtype))


@pytest.mark.parametrize(("shape", "axis", "variant"), [((0, 300), -1, "workgroup"), ((0, 5), -1, "strided"),
                                                        ((2, 0, 3), 0, "strided"), ((4, 0), 0, "strided")], ids=str)  # fmt: skip
def test_empty_output_dispatches_nothing(reduce_sum, plan_of, shape, axis, variant):
    x = np.zeros(shape, np.float32)
    y, chosen = run(reduce_sum, x, axis)
    assert chosen == variant and y.size == 0
    assert plan_of(reduce_sum, {"X": x}, attrs={"axis": axis}).passes[0].grid == (0, 0, 0)


def test_workgroup_grid_spills_into_y(reduce_sum, plan_of, rng):
    """70001 rows: one workgroup each, more than 65535 in x (a grid of 2 x 35001, one workgroup past
    the last row). Chosen by the rules, not forced."""
    x = rng.standard_normal((70001, 5)).astype(np.float32)
    tunables = {"WORKGROUP_SIZE": 4}
    _, chosen = run(reduce_sum, x, -1, tunables=tunables)
    assert chosen == "workgroup"
    grid = plan_of(reduce_sum, {"X": x}, attrs={"axis": -1, "keepdims": 0}, tunables=tunables).passes[0].grid
    assert grid[1] > 1 and grid[0] * grid[1] * grid[2] > 70001
    run(reduce_sum, small_ints(rng, (70001, 5), np.float32), -1, tunables=tunables, exact=True)


def test_strided_grid_spills_into_y(reduce_sum, plan_of, rng):
    x = small_ints(rng, (3, 70001), np.float32)
    tunables = {"STRIDED_WORKGROUP_SIZE": 1}
    run(reduce_sum, x, 0, tunables=tunables, exact=True)
    assert plan_of(reduce_sum, {"X": x}, attrs={"axis": 0}, tunables=tunables).passes[0].grid[1] > 1


# --- selection, errors ------------------------------------------------------------------------------


def test_forced_strided_where_workgroup_is_chosen(reduce_sum, rng):
    x = rng.standard_normal((4, 512)).astype(np.float32)
    assert reduce_sum.explain({"X": x}).chosen == "workgroup"
    run(reduce_sum, x, -1, variant="strided")


@pytest.mark.parametrize(("shape", "axis", "clause"), [((4, 512), 0, "contiguous"), ((4, 100), -1, "longAxis")])
def test_forced_workgroup_refused(reduce_sum, shape, axis, clause):
    with pytest.raises(errors.VariantRejectedError) as info:
        reduce_sum({"X": np.ones(shape, np.float32)}, attrs={"axis": axis}, variant="workgroup")
    assert info.value.clause == clause


def test_explain_names_the_variant(reduce_sum):
    explanation = reduce_sum.explain({"X": wk.TensorMeta((2, 77, 768), "float16")}, attrs={"axis": -1})
    assert explanation.chosen == "workgroup"
    assert "chosen variant 'workgroup'" in str(explanation) and "* workgroup" in str(explanation)
    assert {k: explanation.values[k] for k in ("a", "outer", "reduce", "inner", "rows")} == {
        "a": 2, "outer": 154, "reduce": 768, "inner": 1, "rows": 154}  # fmt: skip
    assert [(o.role, o.shape) for o in explanation.outputs] == [("Y", (2, 77))]

    explanation = reduce_sum.explain({"X": wk.TensorMeta((2, 77, 768), "float32")}, attrs={"axis": 1, "keepdims": 1})
    assert explanation.chosen == "strided" and "* strided" in str(explanation)
    workgroup = explanation.verdicts[0]
    assert (workgroup.variant, workgroup.clause, workgroup.values.get("inner")) == ("workgroup", "contiguous", 768)
    assert explanation.outputs[0].shape == (2, 1, 768)


@pytest.mark.parametrize("axis", [3, -4, 100])
def test_axis_out_of_range(reduce_sum, axis):
    with pytest.raises(errors.ExpressionError) as info:
        reduce_sum({"X": np.ones((2, 3, 4), np.float32)}, attrs={"axis": axis})
    # the output shape reads derive.a, whose else branch's dim() fails with the reason
    assert info.value.where == "outputs[0].shape"
    assert "'a' could not be evaluated: derive.a" in str(info.value)
    assert f"axis {axis} is out of range for a shape of rank 3" in str(info.value)


def test_rank_0_refused(reduce_sum):
    with pytest.raises(errors.RankError) as info:
        reduce_sum({"X": np.array(1.0, np.float32)})
    assert info.value.argument == "X" and "rank 0" in str(info.value)


def test_keepdims_other_than_0_or_1_refused(reduce_sum):
    with pytest.raises(errors.SelectionError) as info:
        reduce_sum({"X": np.ones((2, 3), np.float32)}, attrs={"keepdims": 2})
    assert "keepdimsOk" in str(info.value) and "attrs.keepdims=2" in str(info.value)


def test_contract_errors(reduce_sum):
    with pytest.raises(errors.DTypeError):
        reduce_sum({"X": np.ones(4, np.float64)})
    with pytest.raises(errors.AttributeValueError):
        reduce_sum({"X": np.ones(4, np.float32)}, attrs={"axis": 0.5})
    with pytest.raises(errors.SelectionError) as info:
        reduce_sum({"X": np.ones(4, np.float32)}, tunables={"STRIDED_WORKGROUP_SIZE": 100000})
    assert "stridedFits" in str(info.value)


# --- rendering and pipelines -----------------------------------------------------------------------


def test_render_workgroup(reduce_sum, need_dtype):
    need_dtype(np.float16)
    text = reduce_sum.render({"X": wk.TensorMeta((3, 200), "float16")}, tunables={"WORKGROUP_SIZE": 96})["main"]
    assert text.lstrip().startswith("enable f16;")
    assert "var<workgroup> partial: array<f32, 96>;" in text and "const WG: u32 = 96u;" in text
    assert "@compute @workgroup_size(96)" in text
    assert "partial[lix + 64u]" in text and "partial[lix + 128u]" not in text  # the tree starts below 96
    assert "struct Params {\n  outer: u32,\n  reduce: u32,\n  inner: u32,\n  rows: u32,\n};" in text


def test_shape_travels_in_the_uniform(reduce_sum, plan_of):
    """outer, reduce and inner are uniform fields: other shapes reuse the pipeline."""
    a = plan_of(reduce_sum, {"X": np.ones((2, 5, 7), np.float32)}, attrs={"axis": 1})
    b = plan_of(reduce_sum, {"X": np.ones((9, 3), np.float32)}, attrs={"axis": 0})
    assert (a.variant, b.variant) == ("strided", "strided")
    assert a.passes[0].pipeline is b.passes[0].pipeline
