"""tests/packages/ai.onnx.ScatterElements: ONNX ScatterElements-18 (``axis``; ``reduction`` none, add,
mul, max, min), written from the format documents alone and run through load_kernel() with no engine
change.

Semantics (ScatterElements-18's definition, with onnxruntime's CPU kernel where the definition is
silent): ``output`` is ``data`` with each ``updates[q]`` combined into the element whose coordinates are
q's, except on ``axis``, where ``indices[q]`` gives the coordinate (negative counts from the end).
onnxruntime applies the updates in C order: with ``reduction`` none the last of duplicates wins (ONNX:
undefined), and an index outside [-s, s-1] refuses the whole call (ONNX: an error). The package drops
such an update instead (a shader cannot raise) and keeps the last duplicate in its ``gather`` variant;
its ``atomic`` variant keeps any one of them.

Two variants. ``gather`` (one invocation per output word, scanning the K = indices.shape[axis]
candidates in C order) is deterministic and gives onnxruntime's float32 bits; it costs numel(data) * K
index reads, so it is chosen only up to K = GATHER_MAX_K. ``atomic`` copies data, then combines each
update with an atomic (a compare-and-swap loop on the 32-bit word for floats, as WGSL has no float
atomics): numel(data) + numel(updates) work, the order of a sum whatever the atomics make it. A float16
element is half a word: the compare-and-swap covers the whole word, so updates to the two halves never
lose each other (a case checks it with exact integer sums).

References: a float64 NumPy reference (np.add.at etc., the last duplicate for none), and onnxruntime's
CPU kernel (opset 18) on the same inputs. A float32 sum in another order differs from the exact one
by at most (n - 1) * 2^-24 * sum |terms| for n terms; the add cases are held to that bound, computed
from their inputs. onnxruntime's CPU kernel has no float16 add or mul ("MLFloat16 data type is not
supported"), so those are checked against NumPy only.

test.json's expected values come from ``expect_reference``: ``webgpu-kernels expect
tests/packages/ai.onnx.ScatterElements --reference tests/test_scatter_elements_package.py:expect_reference``.
"""

from __future__ import annotations

import functools
import json

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

PACKAGE_NAME = "ai.onnx.ScatterElements"
PACKAGE = PACKAGES_DIR / PACKAGE_NAME
VARIANTS = ["gather", "atomic"]
DEFAULTS = {"axis": 0, "reduction": "none"}
REDUCTIONS = ["none", "add", "mul", "max", "min"]
AT = {"add": np.add.at, "mul": np.multiply.at, "max": np.maximum.at, "min": np.minimum.at}
U = {np.dtype(np.float32): 2.0**-24, np.dtype(np.float16): 2.0**-11}


# --- reference (also `webgpu-kernels expect`'s) ------------------------------------------------------


def targets(data_shape, indices: np.ndarray, axis: int):
    """(flat target of each update in C order, mask of the updates kept): an index outside [-s, s-1]
    is dropped, as the package does (onnxruntime refuses the call)."""
    s = data_shape[axis]
    idx = np.asarray(indices).astype(np.int64)
    keep = (idx >= -s) & (idx < s)
    coords = list(np.indices(idx.shape))
    coords[axis] = np.where(idx < 0, idx + s, idx)
    flat = np.ravel_multi_index(tuple(c[keep] for c in coords), data_shape) if keep.any() else np.zeros(0, np.int64)
    return flat, keep


def scatter_elements(data, indices, updates, axis: int = 0, reduction: str = "none") -> np.ndarray:
    """ScatterElements in float64 (int32 data: in int64, wrapped to int32 as two's complement)."""
    data = np.asarray(data)
    axis = axis + data.ndim if axis < 0 else axis
    integer = data.dtype.kind in "iu"
    out = data.astype(np.int64 if integer else np.float64).reshape(-1)
    flat, keep = targets(data.shape, indices, axis)
    values = np.asarray(updates)[keep].astype(out.dtype)
    if reduction == "none":
        # the last update of each target in C order (onnxruntime's; ONNX leaves duplicates undefined)
        _, last = np.unique(flat[::-1], return_index=True)
        chosen = len(flat) - 1 - last
        out[flat[chosen]] = values[chosen]
    else:
        with np.errstate(over="ignore", invalid="ignore"):
            AT[reduction](out, flat, values)
    if integer:
        out = (out + 2**31) % 2**32 - 2**31
    return out.reshape(data.shape)


def expect_reference(inputs: dict, attrs: dict) -> dict:
    """For `webgpu-kernels expect`: inputs as `test` builds them, attributes over the defaults."""
    a = DEFAULTS | dict(attrs)
    return {"output": scatter_elements(inputs["data"], inputs["indices"], inputs["updates"], a["axis"], a["reduction"])}


def sum_bound(data, indices, updates, axis: int) -> np.ndarray:
    """Per element, how far a float sum of its terms in any order, rounded after each step (float32:
    2^-24, float16: 2^-11 of a partial sum), may lie from the exact sum: (n - 1) * u * sum |terms|,
    plus the half-ulp of the expected value's own rounding (float16: of each step's)."""
    u = U[np.asarray(data).dtype]
    axis = axis + data.ndim if axis < 0 else axis
    flat, keep = targets(data.shape, indices, axis)
    count = np.ones(data.size)
    np.add.at(count, flat, 1.0)
    mass = np.abs(data.astype(np.float64)).reshape(-1)
    np.add.at(mass, flat, np.abs(updates[keep].astype(np.float64)))
    return ((count - 1) * u * mass + u * mass).reshape(data.shape)


@functools.lru_cache(maxsize=None)
def ort_session(rank: int, axis: int, reduction: str, dtype: str, index_dtype: str):
    """A one-node ScatterElements-18 model on onnxruntime's CPU provider."""
    pytest.importorskip("onnxruntime")
    pytest.importorskip("onnx")
    from onnx import TensorProto, helper

    from references import one_node_session

    t = {"float32": TensorProto.FLOAT, "float16": TensorProto.FLOAT16, "int32": TensorProto.INT32}[dtype]
    ti = {"int32": TensorProto.INT32, "int64": TensorProto.INT64}[index_dtype]
    vi = helper.make_tensor_value_info
    node = helper.make_node(
        "ScatterElements", ["data", "indices", "updates"], ["output"], axis=axis, reduction=reduction
    )
    dims = [f"d{i}" for i in range(rank)]
    idims = [f"i{i}" for i in range(rank)]
    return one_node_session(node, [vi("data", t, dims), vi("indices", ti, idims), vi("updates", t, idims)],
                            [vi("output", t, dims)], 18)  # fmt: skip


def ort_scatter(data, indices, updates, attrs: dict) -> np.ndarray:
    a = DEFAULTS | attrs
    session = ort_session(data.ndim, a["axis"], a["reduction"], data.dtype.name, indices.dtype.name)
    return session.run(None, {"data": data, "indices": indices, "updates": updates})[0]


def bits(x: np.ndarray) -> np.ndarray:
    return x.view({4: np.uint32, 2: np.uint16}[x.dtype.itemsize])


def run(kernel: wk.Kernel, data, indices, updates, attrs: dict, *, variant=None, tunables=None, ort: bool = True):
    """One call, every output word written (poisoned first), inputs untouched, checked against the float64
    reference (exactly, or within sum_bound for add and n roundings for mul) and onnxruntime's CPU
    kernel (exactly where the order is onnxruntime's: none, max, min, int32, and gather's float32)."""
    inputs = {"data": data, "indices": indices, "updates": updates}
    before = {k: v.copy() for k, v in inputs.items()}
    poison_outputs(kernel, inputs, attrs=attrs, tunables=tunables)
    got = kernel(inputs, attrs=attrs, variant=variant, tunables=tunables)["output"]
    for k, v in inputs.items():
        np.testing.assert_array_equal(
            bits(v) if v.dtype.kind == "f" else v, bits(before[k]) if v.dtype.kind == "f" else before[k]
        )
    a = DEFAULTS | attrs
    what = f"data {data.shape} {data.dtype}, indices {indices.shape} {indices.dtype}, {attrs}, {variant}"
    want = scatter_elements(data, indices, updates, a["axis"], a["reduction"])
    assert got.dtype == data.dtype and got.shape == data.shape, what
    if data.dtype.kind == "i" or a["reduction"] in ("none", "max", "min"):
        np.testing.assert_array_equal(got, want.astype(data.dtype), err_msg=what)
    elif a["reduction"] == "add":
        err = np.abs(got.astype(np.float64) - want)
        assert (err <= sum_bound(data, indices, updates, a["axis"])).all(), (what, err.max())
    else:  # mul: n roundings of a product, each within a relative 1 ulp
        np.testing.assert_allclose(got, want, rtol=20 * U[data.dtype] * indices.shape[a["axis"]], err_msg=what)
    if ort and not (data.dtype == np.float16 and a["reduction"] in ("add", "mul")):
        theirs = ort_scatter(data, indices, updates, attrs)
        if (
            a["reduction"] in ("none", "max", "min")
            or data.dtype.kind == "i"
            or kernel.explain(inputs, attrs=attrs, tunables=tunables, variant=variant).chosen == "gather"
        ):
            np.testing.assert_array_equal(got, theirs, err_msg=what + " (onnxruntime)")
        else:
            err = np.abs(got.astype(np.float64) - theirs.astype(np.float64))
            assert (err <= 2 * sum_bound(data, indices, updates, a["axis"])).all(), what + " (onnxruntime)"
    return got


@pytest.fixture(scope="module")
def scatter_kernel() -> wk.Kernel:
    return wk.load_kernel(PACKAGE)


def random_indices(rng, shape, s: int, *, negative: bool = True, dtype=np.int64) -> np.ndarray:
    return rng.integers(-s if negative else 0, s, size=shape).astype(dtype)


# --- the package ----------------------------------------------------------------------------------


def test_package_files(scatter_kernel):
    names = sorted(p.name for p in PACKAGE.iterdir() if not p.name.endswith(".npy"))
    assert names == ["bench.json", "common.wgsl.jinja", "copy.wgsl.jinja", "gather.wgsl.jinja", "manifest.json",
                     "metadata.json", "scatter.wgsl.jinja", "test.json"]  # fmt: skip
    data = json.loads((PACKAGE / "manifest.json").read_text("utf-8"))
    assert (data["domain"], data["name"], data["sinceVersion"]) == ("ai.onnx", "ScatterElements", 18)
    assert data["attributes"] == DEFAULTS
    assert data["typeConstraints"] == {"T": ["float32", "float16", "int32"], "Tind": ["int32", "int64"]}
    assert scatter_kernel.op_id == PACKAGE_NAME and scatter_kernel.variants == VARIANTS


def test_engine_has_no_code_for_it():
    assert_engine_has_no_code_for("ScatterElements")


def test_validates_and_its_test_json_passes(scatter_kernel):
    assert_valid_and_passing(scatter_kernel, PACKAGE, VARIANTS)


def test_expected_outputs_are_the_reference(scatter_kernel):
    """test.json's stored outputs are this module's float64 reference of the case's inputs, rounded once."""
    checked = 0
    for case, inputs, stored in stored_expectations(scatter_kernel, "output", lambda ins: ins["data"].dtype.name):
        want = expect_reference(inputs, dict(case.attrs))["output"].astype(inputs["data"].dtype)
        np.testing.assert_array_equal(stored, want.astype(np.float64), err_msg=case.name)
        checked += 1
    assert checked == 24


def test_tolerances_cover_the_order_bound(scatter_kernel):
    """Each add case's atol is at least the worst element's bound on a sum in another order (float32:
    (n - 1) * 2^-24 * sum |terms| plus the expected value's rounding; float16: a rounding after every
    step), computed from the case's inputs; each mul case's rtol covers n roundings. Copies, max, min
    and int32 are held exactly."""
    doc = json.loads((PACKAGE / "test.json").read_text("utf-8"))
    assert doc["tolerances"] == {"float32": {"rtol": 0, "atol": 0}, "float16": {"rtol": 0, "atol": 0}}
    seen = set()
    for case in doc["cases"]:
        if "expected" not in case:
            continue
        a = DEFAULTS | case.get("attrs", {})
        inputs = wk.test_case_inputs(scatter_kernel, case["name"])
        data, indices = inputs["data"], inputs["indices"]
        tol = case.get("tolerances", {}).get(data.dtype.name, {"rtol": 0, "atol": 0})
        if data.dtype.kind == "i" or a["reduction"] in ("none", "max", "min"):
            assert "tolerances" not in case, case["name"]
        elif a["reduction"] == "add" and exact_sums(data, inputs["updates"]):
            assert "tolerances" not in case, case["name"]
        elif a["reduction"] == "add":
            bound = sum_bound(data, indices, inputs["updates"], a["axis"]).max()
            assert bound <= tol["atol"] and tol.get("rtol", 0) == 0, (case["name"], bound)
            assert tol["atol"] <= 4 * bound, (case["name"], bound)  # not loose either
            seen.add(case["name"])
        else:
            axis = a["axis"] + data.ndim if a["axis"] < 0 else a["axis"]
            flat, _ = targets(data.shape, indices, axis)
            terms = np.bincount(flat, minlength=data.size).max() + 1
            assert terms * U[data.dtype] <= tol["rtol"] <= 4 * terms * U[data.dtype], (case["name"], terms)
            seen.add(case["name"])
    assert len(seen) == 6, seen


def exact_sums(data, updates) -> bool:
    """Integers whose every partial sum the dtype holds exactly (|sum| <= 2^11 in float16): any order
    gives the exact sum."""
    terms = np.concatenate([data.reshape(-1), updates.reshape(-1)]).astype(np.float64)
    limit = 2.0 ** (11 if data.dtype == np.float16 else 24)
    return bool((terms == np.round(terms)).all() and np.abs(terms).sum() <= limit)


def test_float16_moves_as_words_and_needs_no_shader_f16(scatter_kernel):
    inputs = {
        "data": np.zeros((2, 3), np.float16),
        "indices": np.zeros((1, 3), np.int64),
        "updates": np.ones((1, 3), np.float16),
    }
    for variant in VARIANTS:
        for text in scatter_kernel.render(inputs, attrs={"reduction": "add"}, variant=variant).values():
            assert "enable f16" not in text and "f16" not in text.replace("2x16float", "")
    scatter = scatter_kernel.render(inputs, attrs={"reduction": "add"}, variant="atomic")["scatter"]
    assert "array<atomic<u32>>" in scatter and "atomicCompareExchangeWeak" in scatter


def test_selection_follows_the_candidate_count(scatter_kernel):
    """gather while K = indices.shape[axis] <= GATHER_MAX_K (16), atomic beyond."""

    def chosen(k, **tunables):
        inputs = {"data": ((4, 8), "float32"), "indices": ((k, 8), "int64"), "updates": ((k, 8), "float32")}
        return scatter_kernel.explain(inputs, tunables=tunables or None).chosen

    assert chosen(16) == "gather" and chosen(17) == "atomic" and chosen(17, GATHER_MAX_K=32) == "gather"


# --- realistic shapes ----------------------------------------------------------------------------


def test_llm_logits_mask(scatter_kernel, rng):
    """1x32000 logits; 50 top-k positions along axis 1 set (reduction none): exact, onnxruntime's."""
    logits = (3 * rng.standard_normal((1, 32000))).astype(np.float32)
    top = np.argsort(-logits[0])[:50][None, :].astype(np.int64)
    keep = np.full((1, 32000), -np.inf, np.float32)
    got = run(scatter_kernel, keep, top, logits[:, top[0]], {"axis": 1})
    np.testing.assert_array_equal(np.sort(np.flatnonzero(np.isfinite(got))), np.sort(top[0]))
    run(scatter_kernel, keep, top, logits[:, top[0]], {"axis": 1}, tunables={"GATHER_MAX_K": 64})
    run(scatter_kernel, logits, top - 32000, np.full((1, 50), -np.inf, np.float32), {"axis": -1})


def embedding_gradient(rng, dtype=np.float32):
    """A 4096x768 gradient table, 77 tokens (ids with repeats: a prompt repeats words) x 768."""
    tokens = rng.choice(np.arange(100, 400), size=77)
    tokens[[10, 20, 30, 40, 50]] = tokens[3]
    indices = np.repeat(tokens[:, None], 768, axis=1).astype(np.int64)
    return (np.zeros((4096, 768), dtype), indices, rng.standard_normal((77, 768)).astype(dtype))


def test_embedding_gradient_accumulation(scatter_kernel, rng):
    """reduction add along axis 0, atomic (K = 77): within the order bound of the exact sum, and of
    onnxruntime's sequential float32 sum; gather (forced by GATHER_MAX_K) gives onnxruntime's bits."""
    data, indices, updates = embedding_gradient(rng)
    assert scatter_kernel.explain({"data": data, "indices": indices, "updates": updates}).chosen == "atomic"
    run(scatter_kernel, data, indices, updates, {"reduction": "add"})
    data = (0.01 * rng.standard_normal(data.shape)).astype(np.float32)  # a table already holding sums
    run(scatter_kernel, data, indices, updates, {"reduction": "add"})
    # gather reads numel(data) * 77 indices: a 512-row table keeps lavapipe quick
    run(scatter_kernel, data[:512].copy(), indices % 512, updates, {"reduction": "add"}, tunables={"GATHER_MAX_K": 128},
        variant="gather")  # fmt: skip


def test_gather_sums_in_onnxruntimes_order(scatter_kernel):
    """1 + 1e8 + 1 - 1e8 is 0 in float32 in C order (onnxruntime's, and gather's), 2 exactly."""
    data = np.ones(1, np.float32)
    indices = np.zeros(3, np.int64)
    updates = np.array([1e8, 1.0, -1e8], np.float32)
    got = scatter_kernel(
        {"data": data, "indices": indices, "updates": updates}, attrs={"reduction": "add"}, variant="gather"
    )
    assert got["output"][0] == 0.0 == ort_scatter(data, indices, updates, {"reduction": "add"})[0]
    assert scatter_elements(data, indices, updates, reduction="add")[0] == 2.0


# --- semantics ------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [np.float32, np.float16], ids=["f32", "f16"])
@pytest.mark.parametrize("reduction", ["max", "min", "mul", "add"])
def test_many_collisions(scatter_kernel, rng, reduction, dtype):
    """48 updates per column into 3 rows, both variants, int32 and int64 indices."""
    for variant, index_dtype in (("gather", np.int64), ("atomic", np.int32), ("atomic", np.int64)):
        data = rng.uniform(0.5, 1.5, (3, 7)).astype(dtype)
        updates = (rng.uniform(0.9, 1.1, (48, 7)) if reduction == "mul" else rng.standard_normal((48, 7))).astype(dtype)
        run(scatter_kernel, data, random_indices(rng, (48, 7), 3, dtype=index_dtype), updates, {"reduction": reduction},
            variant=variant, tunables={"GATHER_MAX_K": 64})  # fmt: skip


# The index arithmetic that depends on rank and axis (gather: an output element's coordinates;
# atomic: an update's target) is one text for every reduction and dtype, but what it feeds is not:
# gather reads a whole word or two float16 halves of one, atomic's scatter ends in atomicStore
# (none), atomicAdd (int32 add), a compare-and-swap loop on the word, or one on half a word
# (float16). One (reduction, dtype) per such path runs every rank, its axis first, last or either
# side of the middle (rank 8: axes 3 and 4, the two vec4s of the padded shapes); each other pair
# runs one rank (its combine code also runs, both variants, in test.json and test_many_collisions).
EVERY_RANK = tuple(range(1, 9))
AXIS_OF = {
    "first": lambda rank: 0,
    "last": lambda rank: rank - 1,
    "middle": lambda rank: rank // 2,
    "below middle": lambda rank: (rank - 1) // 2,
}
RANK_CASES = [
    ("none", np.float32, EVERY_RANK, "last"),
    ("add", np.float16, EVERY_RANK, "first"),
    ("add", np.int32, EVERY_RANK, "middle"),
    ("max", np.int32, EVERY_RANK, "below middle"),
    ("add", np.float32, (5,), None),  # None: an axis drawn at random
    ("mul", np.float32, (7,), None),
    ("max", np.float32, (3,), None),
    ("min", np.float32, (6,), None),
    ("none", np.float16, (8,), None),
    ("mul", np.float16, (4,), None),
    ("max", np.float16, (2,), None),
    ("min", np.float16, (5,), None),
    ("none", np.int32, (3,), None),
    ("mul", np.int32, (6,), None),
    ("min", np.int32, (8,), None),
]


def test_rank_cases_cover_every_reduction_and_dtype():
    pairs = [(r, np.dtype(d).name) for r, d, _, _ in RANK_CASES]
    assert sorted(pairs) == sorted((r, d) for r in REDUCTIONS for d in ("float32", "float16", "int32"))
    assert [len(ranks) for _, _, ranks, _ in RANK_CASES].count(len(EVERY_RANK)) == 4


@pytest.mark.parametrize(
    ("reduction", "dtype", "ranks", "axis_at"),
    RANK_CASES,
    ids=[f"{r}-{np.dtype(d).name}-rank{'s1-8' if len(rs) > 1 else rs[0]}" for r, d, rs, _ in RANK_CASES],
)
def test_every_rank_and_axis(scatter_kernel, rng, reduction, dtype, ranks, axis_at):
    """Ranks 1 to 8 (every rank for one reduction and dtype per code path the index arithmetic
    feeds, one rank for the others), each axis given as a negative one, indices shorter than data
    off the axis, negative indices; no duplicates for none (the atomic variant keeps any one of them)."""
    for rank in ranks:
        shape = tuple(int(d) for d in rng.integers(1, 4, size=rank))
        axis = int(rng.integers(0, rank)) if axis_at is None else AXIS_OF[axis_at](rank)
        ishape = [int(rng.integers(1, d + 1)) for d in shape]
        ishape[axis] = int(rng.integers(1, 6))
        if reduction == "none":
            ishape[axis] = min(ishape[axis], shape[axis])
            order = np.argsort(rng.random(tuple(ishape[:axis]) + (shape[axis],) + tuple(ishape[axis + 1 :])), axis=axis)
            indices = np.take(order, np.arange(ishape[axis]), axis=axis) - shape[axis] * rng.integers(0, 2, size=ishape)
        else:
            indices = random_indices(rng, ishape, shape[axis])
        if dtype == np.int32:
            data, updates = rng.integers(-50, 50, shape).astype(dtype), rng.integers(-50, 50, ishape).astype(dtype)
        else:
            data = rng.uniform(0.5, 1.5, shape).astype(dtype)
            updates = rng.uniform(0.5, 1.5, ishape).astype(dtype)
        for variant in VARIANTS:
            run(scatter_kernel, data, indices.astype(np.int64), updates, {"axis": axis - rank, "reduction": reduction},
                variant=variant)  # fmt: skip


def test_float16_halves_of_a_word_do_not_lose_each_other(scatter_kernel):
    """Thousands of updates on the two halves of 4 words at once, as integers (exact in any order): the
    compare-and-swap on the whole word keeps every one."""
    for reduction in ("add", "max", "min"):
        data = np.zeros(8, np.float16)
        indices = np.tile(np.arange(8), 512).astype(np.int64)
        updates = ((np.arange(4096) * 7) % 23 - 11).astype(np.float16)
        for _ in range(3):
            got = run(scatter_kernel, data, indices, updates, {"reduction": reduction}, variant="atomic")
            want = scatter_elements(data, indices, updates, reduction=reduction)
            np.testing.assert_array_equal(got, want)


def test_duplicates_with_reduction_none(scatter_kernel):
    """ONNX leaves them undefined. onnxruntime and gather: the last in C order; atomic: one of them."""
    data = np.zeros((3, 2), np.float32)
    indices = np.array([[1, 0], [1, 0], [1, 2], [-2, 0]], np.int64)
    updates = np.arange(1, 9, dtype=np.float32).reshape(4, 2)
    inputs = {"data": data, "indices": indices, "updates": updates}
    want = np.array([[0, 8], [7, 0], [0, 6]], np.float32)
    np.testing.assert_array_equal(ort_scatter(data, indices, updates, {}), want)
    np.testing.assert_array_equal(scatter_kernel(inputs, variant="gather")["output"], want)
    got = scatter_kernel(inputs, variant="atomic")["output"]
    assert (
        got[0, 1] in (2, 4, 8)
        and got[1, 0] in (1, 3, 5, 7)
        and got[2, 1] == 6
        and got[0, 0] == got[1, 1] == got[2, 0] == 0
    )


def test_out_of_range_indices_are_dropped_where_onnxruntime_refuses(scatter_kernel):
    data = np.arange(1, 5, dtype=np.float32)
    updates = np.full(3, 10, np.float32)
    for bad in (4, -5, 2**32 + 1, -(2**32) + 1, 2**40):
        indices = np.array([0, bad, -1], np.int64)
        for variant in VARIANTS:
            got = scatter_kernel({"data": data, "indices": indices, "updates": updates}, attrs={"reduction": "add"},
                                 variant=variant)["output"]  # fmt: skip
            np.testing.assert_array_equal(got, [11, 2, 3, 14])
        with pytest.raises(Exception, match="out of data bounds"):
            ort_scatter(data, indices, updates, {"reduction": "add"})


def test_nan_in_max_and_min(scatter_kernel):
    """The package: a NaN anywhere makes the element NaN (numpy.maximum). onnxruntime keeps a NaN only
    where it comes last (std::max(update, current)), so the two differ where it does not."""
    data = np.array([1.0, np.nan], np.float32)
    indices = np.array([0, 0, 1], np.int64)
    updates = np.array([np.nan, 2.0, 3.0], np.float32)
    for reduction in ("max", "min"):
        for variant in VARIANTS:
            got = scatter_kernel({"data": data, "indices": indices, "updates": updates}, attrs={"reduction": reduction},
                                 variant=variant)["output"]  # fmt: skip
            assert np.isnan(got).all()
        theirs = ort_scatter(data, indices, updates, {"reduction": reduction})
        assert theirs[0] == 2.0 and theirs[1] == 3.0


def test_int32_wraps(scatter_kernel):
    data = np.array([2**31 - 10, -(2**31) + 10, 3], np.int32)
    indices = np.array([0, 0, 1, 2, 2], np.int64)
    updates = np.array([6, 6, -11, 2**20, 2**15], np.int32)
    for reduction in ("add", "mul"):
        for variant in VARIANTS:
            run(scatter_kernel, data, indices, updates, {"reduction": reduction}, variant=variant)


def test_empty_tensors(scatter_kernel):
    for variant in VARIANTS:
        got = run(scatter_kernel, np.ones((2, 3), np.float16), np.zeros((0, 3), np.int64), np.zeros((0, 3), np.float16),
                  {"reduction": "add"}, variant=variant)  # fmt: skip
        np.testing.assert_array_equal(got, np.ones((2, 3)))
        assert run(scatter_kernel, np.ones((0, 3), np.float32), np.zeros((0, 3), np.int64), np.zeros((0, 3), np.float32),
                   {}, variant=variant, ort=False).shape == (0, 3)  # fmt: skip


def test_workgroup_sizes(scatter_kernel, rng):
    data = rng.standard_normal((5, 9)).astype(np.float16)
    indices = random_indices(rng, (7, 9), 5)
    updates = rng.standard_normal((7, 9)).astype(np.float16)
    for wg in (1, 64, 100):
        for variant in VARIANTS:
            run(
                scatter_kernel,
                data,
                indices,
                updates,
                {"reduction": "max"},
                variant=variant,
                tunables={"WORKGROUP_SIZE": wg},
            )


# --- contract -------------------------------------------------------------------------------------


def test_refusals(scatter_kernel):
    data = np.zeros((2, 3), np.float32)
    indices = np.zeros((1, 3), np.int64)
    updates = np.ones((1, 3), np.float32)
    for inputs, attrs, clause in [
        ({}, {"axis": 2}, "axisOk=False"),
        ({}, {"axis": -3}, "axisOk=False"),
        ({}, {"reduction": "mean"}, "reductionOk=False"),
        ({"updates": np.ones((1, 2), np.float32)}, {}, "updatesOk=False"),
        ({"indices": np.zeros((1, 4), np.int64), "updates": np.ones((1, 4), np.float32)}, {}, "dimsOk=False"),
    ]:
        with pytest.raises(errors.SelectionError, match=clause):
            scatter_kernel({"data": data, "indices": indices, "updates": updates} | inputs, attrs=attrs)
    with pytest.raises(errors.RankError):
        scatter_kernel({"data": data, "indices": np.zeros(3, np.int64), "updates": np.ones(3, np.float32)})
    with pytest.raises(errors.RankError):
        scatter_kernel(
            {"data": np.float32(1).reshape(()), "indices": np.zeros((), np.int64), "updates": np.ones((), np.float32)}
        )
    with pytest.raises(errors.DTypeError):
        scatter_kernel({"data": data, "indices": indices.astype(np.float32), "updates": updates})
    with pytest.raises(errors.DTypeError):
        scatter_kernel({"data": data, "indices": indices, "updates": updates.astype(np.float16)})
    with pytest.raises(errors.AttributeValueError):
        scatter_kernel({"data": data, "indices": indices, "updates": updates}, attrs={"reduction": 1})


def test_onnxruntime_refuses_what_the_package_refuses():
    """The shape refusals follow onnxruntime's CPU kernel."""
    pytest.importorskip("onnxruntime")
    data = np.zeros((2, 3), np.float32)
    with pytest.raises(Exception, match="greater than input dim"):
        ort_scatter(data, np.zeros((1, 4), np.int64), np.ones((1, 4), np.float32), {})
    with pytest.raises(Exception, match="dimensions differs"):
        ort_scatter(data, np.zeros((1, 3), np.int64), np.ones((1, 2), np.float32), {})
    # along axis, indices may be longer than data
    np.testing.assert_array_equal(ort_scatter(data, np.zeros((4, 3), np.int64), np.ones((4, 3), np.float32), {"reduction": "add"}),
                                  [[4, 4, 4], [0, 0, 0]])  # fmt: skip
