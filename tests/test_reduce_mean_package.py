"""tests/packages/ai.onnx.ReduceMean: ONNX ReduceMean (ai.onnx, since opset 18), written from the
format documents alone and run through load_kernel() with no engine change.

Semantics (ReduceMean-18): the mean of ``data`` over the axes named by the optional int64 input
``axes`` (no longer an attribute); ``keepdims`` keeps them as 1s; ``axes`` absent or empty reduces
every axis, or none with ``noop_with_empty_axes`` 1 (``reduced`` is then ``data``).

The output's shape depends on the *values* of ``axes``, and a manifest's expressions see only the
inputs' shapes (docs/format.md, "Names"), so the package takes only the calls whose shape follows
from the shapes: ``axes`` absent or empty, or of rank(data) entries (every axis once: the mean of
every element). The others are refused by name (``outputShapeNeedsNoAxesValues=False``); the test
below pins that refusal beside onnxruntime computing the same call.

Every element's mean runs in one workgroup (``mean_all``) up to 8,192 elements and in two passes
past that (``mean_all_multi``: each workgroup sums a chunk of 8,192 elements into the variant's
scratch buffer ``partials``, one workgroup adds those), which also takes the sizes whose
one-workgroup loop would pass lavapipe's 65,535 iterations. The scratch buffer is no output: the
contract is ONNX's (``reduced`` alone), so onnxruntime checks the two-pass variants too, and a call
that names its outputs (``outputs=["reduced"]``) takes them as readily as any other.

Judged against a float64 NumPy reference and onnxruntime's CPU kernel (a one-node opset-18 model),
float32 and float16. test.json's expected values come from ``expect_reference``: ``webgpu-kernels
expect tests/packages/ai.onnx.ReduceMean --reference tests/test_reduce_mean_package.py:expect_reference``.
"""

from __future__ import annotations

import functools
import json

import numpy as np
import pytest

import webgpu_kernels as wk
from webgpu_kernels.poisoned_buffers import fill_pooled_buffers

from conftest import (
    DTYPE_IDS,
    DTYPES,
    PACKAGES_DIR,
    assert_engine_has_no_code_for,
    assert_valid_and_passing,
)

PACKAGE_NAME = "ai.onnx.ReduceMean"
PACKAGE = PACKAGES_DIR / PACKAGE_NAME
VARIANTS = ["copy", "copy_axes", "mean_all_multi", "mean_all_multi_axes", "mean_all", "mean_all_axes"]
MULTI = ["mean_all_multi", "mean_all_multi_axes"]
#: the elements each of the multi variants' workgroups sums into one float32 of its scratch `partials`
CHUNK = 8192
# one float32 sum of up to ~300,000 elements in another order than NumPy's; float16: the f32 mean
# rounded once to float16 (half an ulp, 2^-11 relative)
TOLERANCE = {np.dtype(np.float32): (1e-5, 1e-6), np.dtype(np.float16): (1e-3, 1e-4)}


# --- reference (also `webgpu-kernels expect`'s) ------------------------------------------------------


def reduce_mean(data, axes=None, keepdims: int = 1, noop_with_empty_axes: int = 0) -> np.ndarray:
    """ReduceMean-18 in float64, as the package computes it: ``axes`` absent or empty, or naming
    every axis once, reduce every axis; ``axes`` of rank entries that do not (a repeat, an axis out
    of range) give NaN of that shape (the kernel cannot raise). ValueError for the calls the package
    refuses (another length of ``axes``)."""
    x = np.asarray(data, dtype=np.float64)
    n_axes = 0 if axes is None else len(axes)
    if n_axes == 0 and noop_with_empty_axes:
        return x.copy()
    if n_axes not in (0, x.ndim):
        raise ValueError(f"axes of {n_axes} entries on rank {x.ndim}: its shape needs the axes' values")
    shape = (1,) * x.ndim if keepdims else ()
    every = n_axes == 0 or sorted(int(a) % x.ndim if -x.ndim <= a < x.ndim else -1 for a in axes) == list(range(x.ndim))
    if not every or x.size == 0:
        return np.full(shape, np.nan)
    with np.errstate(invalid="ignore"):  # inf + -inf is NaN, as the kernel's
        return np.full(shape, x.sum() / x.size)


def expect_reference(inputs: dict, attrs: dict) -> dict:
    """For `webgpu-kernels expect`: inputs as `test` builds them, attributes over the defaults."""
    data, axes = inputs["data"], inputs.get("axes")
    return {"reduced": reduce_mean(data, axes, attrs["keepdims"], attrs["noop_with_empty_axes"])}


@functools.lru_cache(maxsize=None)
def ort_session(rank: int, float16: bool, has_axes: bool, keepdims: int, noop: int, out_rank: int):
    """A one-node ReduceMean-18 model on onnxruntime's CPU provider, axes an int64 graph input."""
    pytest.importorskip("onnxruntime")
    pytest.importorskip("onnx")
    from onnx import TensorProto, helper

    from references import one_node_session

    kind = TensorProto.FLOAT16 if float16 else TensorProto.FLOAT
    vi = helper.make_tensor_value_info
    names = ["data"] + (["axes"] if has_axes else [])
    node = helper.make_node("ReduceMean", names, ["reduced"], keepdims=keepdims, noop_with_empty_axes=noop)
    inputs = [vi("data", kind, [f"d{i}" for i in range(rank)])]
    if has_axes:
        inputs.append(vi("axes", TensorProto.INT64, ["n"]))
    return one_node_session(node, inputs, [vi("reduced", kind, [f"r{i}" for i in range(out_rank)])], 18)


def ort_reduce_mean(x: np.ndarray, axes=None, keepdims: int = 1, noop: int = 0, out_rank: int | None = None) -> np.ndarray:
    """onnxruntime's output; ``out_rank`` (the output's rank in the model) defaults to data's."""
    out_rank = x.ndim if out_rank is None else out_rank
    session = ort_session(x.ndim, x.dtype == np.float16, axes is not None, keepdims, noop, out_rank)
    feeds = {"data": x, **({"axes": np.asarray(axes, np.int64)} if axes is not None else {})}
    return session.run(None, feeds)[0]


def assert_close(got: np.ndarray, want: np.ndarray, dtype, what: str) -> None:
    rtol, atol = TOLERANCE[np.dtype(dtype)]
    np.testing.assert_allclose(got.astype(np.float64), np.asarray(want, np.float64), rtol=rtol, atol=atol, err_msg=what)


@pytest.fixture(scope="module")
def kernel() -> wk.Kernel:
    return wk.load_kernel(PACKAGE)


def poison(kernel: wk.Kernel, inputs: dict, attrs: dict, **options) -> None:
    """Before a call: one pooled buffer of all-ones bytes (NaN as float16 and float32) per tensor of
    the call and per scratch buffer of the variant that runs it, as `test` fills them: an output
    element left unwritten, or a partial sum pass mean reads that pass parts never wrote, shows NaN."""
    tunables, variant = options.get("tunables"), options.get("variant")
    outputs = kernel.explain(inputs, attrs=attrs, tunables=tunables, variant=variant).outputs
    _, plan = kernel.plan(inputs, attrs=attrs, tunables=tunables, variant=variant)
    fill_pooled_buffers(wk.get_device(), inputs, outputs, 0xFF, scratch=[nbytes for _, nbytes in plan.scratch])


def call(kernel: wk.Kernel, x: np.ndarray, axes=None, keepdims: int = 1, noop: int = 0, **options) -> np.ndarray:
    """One call, its output and scratch poisoned first, inputs untouched, returning ``reduced``
    alone, checked against the float64 reference rounded to data's dtype."""
    inputs = {"data": x, **({"axes": np.asarray(axes, np.int64)} if axes is not None else {})}
    attrs = {"keepdims": keepdims, "noop_with_empty_axes": noop}
    before = {k: v.copy() for k, v in inputs.items()}
    poison(kernel, inputs, attrs, **options)
    result = kernel(inputs, attrs=attrs, **options)
    assert list(result) == ["reduced"], list(result)
    got = result["reduced"]
    assert all(inputs[k].tobytes() == before[k].tobytes() for k in inputs)
    want = reduce_mean(x, axes, keepdims, noop)
    what = f"data {x.shape} {x.dtype} axes {axes} keepdims {keepdims} noop {noop} {options}"
    assert got.dtype == x.dtype and got.shape == want.shape, (what, got.shape, got.dtype)
    assert_close(got, want.astype(x.dtype), x.dtype, what)
    return got


# --- the package ----------------------------------------------------------------------------------


def test_package_files(kernel):
    data = json.loads((PACKAGE / "manifest.json").read_text("utf-8"))
    assert (data["domain"], data["name"], data["sinceVersion"]) == ("ai.onnx", "ReduceMean", 18)
    assert data["attributes"] == {"keepdims": 1, "noop_with_empty_axes": 0}
    assert [i["role"] for i in data["inputs"]] == ["data", "axes"] and data["inputs"][1]["optional"]
    assert data["typeConstraints"] == {"T": ["float32", "float16"], "I": ["int64"]}
    assert [(o["role"], o.get("optional", False)) for o in data["outputs"]] == [("reduced", False)]
    assert kernel.op_id == PACKAGE_NAME and kernel.variants == VARIANTS
    scratch = {v["id"]: [s["name"] for s in v.get("scratch", [])] for v in data["variants"]}
    assert scratch == {v: ["partials"] if v in MULTI else [] for v in VARIANTS}


def test_engine_has_no_code_for_it():
    assert_engine_has_no_code_for(PACKAGE_NAME)


def test_validates_and_its_test_json_passes(kernel):
    """Valid with no warning (validate --strict is clean), every case passing. The axes-absent twins
    (copy, mean_all) are exercised by calls that bind no I (axes absent): those count for each
    T x I row, I having one type (validate had warned of four rows no case could reach)."""
    from webgpu_kernels.validation import validate_package

    assert_valid_and_passing(kernel, PACKAGE, VARIANTS)
    report = validate_package(PACKAGE, gpu=True)
    assert report.ok and not report.warnings, [p.message for p in report.problems]
    rows = {(c.variant, c.dtype): c.status for c in report.coverage}
    assert rows == {(v, f"T={t}, I=int64"): "compiled" for v in VARIANTS for t in ("float32", "float16")}


def test_expected_outputs_are_the_reference(kernel):
    """test.json's stored outputs are this module's float64 reference of the case's inputs, rounded
    once to data's dtype."""
    from webgpu_kernels.casefile import read_test_file

    dtypes, seen, multi = set(), set(), set()
    for case in read_test_file(kernel.package).cases:
        if case.refused is not None:
            continue
        inputs = wk.test_case_inputs(kernel, case.name)
        dtype = inputs["data"].dtype
        stored = case.build_expected(kernel.package.read_bytes, {"reduced": dtype.name})["reduced"]
        want = expect_reference(inputs, {"keepdims": 1, "noop_with_empty_axes": 0, **case.attrs})["reduced"]
        np.testing.assert_array_equal(stored, want.astype(dtype).astype(np.float64), err_msg=case.name)
        assert list(case.expected) == ["reduced"], case.name
        if set(case.variants or ()) & set(MULTI):
            multi.add(dtype.name)
        dtypes.add(dtype.name)
        axes = inputs.get("axes")
        seen.add("absent" if axes is None else "empty" if axes.size == 0 else "negative" if (axes < 0).any() else "positive")
    assert dtypes == multi == {"float32", "float16"}
    assert seen == {"absent", "empty", "negative", "positive"}


# --- results -------------------------------------------------------------------------------------

# (data shape, axes, keepdims, noop): axes absent, empty, every axis in any order and sign; both noops
CALLS = [
    ((2, 3, 4), None, 1, 0),
    ((2, 3, 4), None, 0, 0),
    ((2, 3, 4), None, 1, 1),
    ((2, 3, 4), None, 0, 1),
    ((2, 3, 4), [], 1, 0),
    ((2, 3, 4), [], 0, 1),
    ((2, 3, 4), [2, 0, 1], 0, 0),
    ((2, 3, 4), [-1, -2, -3], 1, 1),  # noop_with_empty_axes does nothing for non-empty axes
    ((4096,), [-1], 0, 0),
    ((7, 11, 13), [0, 1, 2], 1, 0),
    ((10, 32, 32), [-3, 1, -1], 1, 0),  # one SD 1.5 GroupNorm group (10 channels, 32x32)
    ((1, 77, 768), None, 0, 0),  # CLIP hidden state
    ((2, 64, 320), None, 1, 1),
    ((), None, 1, 0),
    ((), None, 0, 1),
]


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize(("shape", "axes", "keepdims", "noop"), CALLS)
def test_against_the_reference_and_onnxruntime(kernel, rng, shape, axes, keepdims, noop, dtype):
    x = np.asarray(rng.standard_normal(shape) + 0.5).astype(dtype)
    got = call(kernel, x, axes, keepdims, noop)
    want = ort_reduce_mean(x, axes, keepdims, noop, got.ndim)
    assert want.shape == got.shape and want.dtype == got.dtype
    assert_close(got, want, dtype, f"onnxruntime: {shape} axes {axes}")


@pytest.mark.parametrize("variant_size", [(v, wg) for v in ("mean_all", "mean_all_axes") for wg in (1, 32, 1024)])
def test_workgroup_sizes(kernel, rng, variant_size):
    variant, wg = variant_size
    x = rng.standard_normal((5, 999)).astype(np.float32)
    call(kernel, x, [1, 0] if variant == "mean_all_axes" else None, variant=variant, tunables={"WORKGROUP_SIZE": wg})


@pytest.mark.parametrize("axes", [None, [0]])
def test_float16_tail_padding_is_masked(kernel, axes):
    """An odd float16 count: the last word's second half is the binding's padding, which a GpuTensor's
    producer may leave holding anything (NumPy uploads zero it). Here it holds NaN, in a buffer of
    our own: a kernel that summed it would return NaN."""
    import wgpu

    gpu = wk.get_device().gpu
    held = np.full(8, np.nan, np.float16)  # 16 bytes: 7 elements and a NaN in the padding
    held[:7] = np.arange(1, 8)
    mine = gpu.create_buffer(size=16, usage=wgpu.BufferUsage.STORAGE | wgpu.BufferUsage.COPY_SRC | wgpu.BufferUsage.COPY_DST)
    gpu.queue.write_buffer(mine, 0, held)
    data = wk.from_wgpu_buffer(mine, (7,), np.float16)
    try:
        inputs = {"data": data, **({"axes": np.asarray(axes, np.int64)} if axes is not None else {})}
        got = kernel(inputs)["reduced"]
    finally:
        data.release()
    assert got.shape == (1,) and got[0] == np.float16(4.0)


def test_axes_not_naming_every_axis_give_nan(kernel, rng):
    """axes of rank entries that repeat an axis or leave the range: the kernel cannot raise (its
    description says NaN); onnxruntime refuses the one and reads the other as fewer axes."""
    x = rng.standard_normal((2, 3)).astype(np.float32)
    assert np.isnan(call(kernel, x, [0, 0])).all()
    assert np.isnan(call(kernel, x, [1, -3])).all()
    assert np.isnan(call(kernel, x, [1, 2**32])).all()  # high word set: not an axis
    assert ort_reduce_mean(x, [0, 0]).shape == (1, 3)


# --- what the format cannot do: a shape from the values of an input -----------------------------


@pytest.mark.parametrize(
    ("shape", "axes", "ort_shape"),
    [((1, 77, 768), [-1], (1, 77, 1)), ((2, 32, 160), [2], (2, 32, 1)), ((2, 3), [0, 1, 1], (1, 1))],
)
def test_axes_whose_values_decide_the_shape_are_refused_by_name(kernel, rng, shape, axes, ort_shape):
    """CLIP's per-token mean (axes [-1]) and GroupNorm's per-group statistics (axes [2]) run in
    onnxruntime, but their output shape depends on the axes' values: the package refuses them with a
    SelectionError (a KernelError) naming the clause, before any GPU work."""
    x = rng.standard_normal(shape).astype(np.float32)
    inputs = {"data": x, "axes": np.asarray(axes, np.int64)}
    with pytest.raises(wk.SelectionError, match="outputShapeNeedsNoAxesValues=False") as info:
        kernel(inputs)
    assert isinstance(info.value, wk.KernelError)
    assert f"axesN={len(axes)}" in str(info.value) and f"ranks.data={len(shape)}" in str(info.value)
    assert ort_reduce_mean(x, axes).shape == ort_shape  # onnxruntime computes it
    explanation = kernel.explain(inputs)
    assert explanation.chosen is None


def test_invalid_attributes_and_inputs_are_typed_errors(kernel):
    x = np.ones((2, 3), np.float32)
    with pytest.raises(wk.SelectionError, match="keepdimsOk=False"):
        kernel({"data": x}, attrs={"keepdims": 2})
    with pytest.raises(wk.errors.DTypeError, match="axes"):
        kernel({"data": x, "axes": np.array([0, 1], np.int32)})
    with pytest.raises(wk.errors.RankError, match="axes"):
        kernel({"data": x, "axes": np.array([[0, 1]], np.int64)})
    with pytest.raises(wk.errors.AttributeValueError):
        kernel({"data": x}, attrs={"keepdims": True})


# --- the two-pass variants (mean_all_multi, mean_all_multi_axes) ----------------------------------

# (data shape, axes, keepdims): past one chunk of 8,192 elements, odd counts (a partial last
# 16-byte unit; float16's last word half padding), chunks that divide evenly, every axes form
MULTI_CALLS = [
    ((8193,), None, 1),
    ((3, 8193), None, 0),
    ((5, 9999), [], 1),
    ((2, 64, 320), [-1, 0, 1], 0),  # SD 1.5-like (2, 64, 320): five chunks exactly
    ((1, 77, 768), [2, 1, 0], 1),  # CLIP hidden state
]


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize(("shape", "axes", "keepdims"), MULTI_CALLS)
def test_multi_against_the_reference_and_onnxruntime(kernel, rng, shape, axes, keepdims, dtype):
    """Past one chunk the two-pass variant is the default, also for a call that names its outputs,
    and returns ``reduced`` alone (its partial sums stay in scratch): the reference's mean and
    onnxruntime's, the same bits on a second run (a fixed order, no atomics), with its output and
    scratch poisoned first (call)."""
    x = np.asarray(rng.standard_normal(shape) + 0.5).astype(dtype)
    variant = "mean_all_multi" if axes is None else "mean_all_multi_axes"
    meta = {"data": (shape, x.dtype), **({"axes": ((len(axes),), "int64")} if axes is not None else {})}
    assert kernel.explain(meta, attrs={"keepdims": keepdims}).chosen == variant
    assert kernel.explain(meta, attrs={"keepdims": keepdims}, outputs=["reduced"]).chosen == variant
    got = call(kernel, x, axes, keepdims)
    again = call(kernel, x, axes, keepdims, outputs=["reduced"])
    np.testing.assert_array_equal(again, got)  # deterministic: the same bits again
    want = ort_reduce_mean(x, axes, keepdims, 0, got.ndim)
    assert want.shape == got.shape and want.dtype == got.dtype
    assert_close(got, want, dtype, f"onnxruntime: {shape} axes {axes}")


def test_small_inputs_keep_one_workgroup(kernel):
    """Up to one chunk (8,192 elements, whatever the dtype) mean_all takes the call, past it
    mean_all_multi(_axes), whether or not the call names its outputs: the scratch buffer plays no
    part in selection (with an optional output `partials`, outputs=["reduced"] had taken mean_all)."""
    for dtype in (np.float32, np.float16):
        for outputs in (None, ["reduced"]):
            assert kernel.explain({"data": ((8192,), dtype)}, outputs=outputs).chosen == "mean_all"
            assert kernel.explain({"data": ((8193,), dtype)}, outputs=outputs).chosen == "mean_all_multi"
            with_axes = {"data": ((2, 8192), dtype), "axes": ((0,), "int64")}
            assert kernel.explain(with_axes, outputs=outputs).chosen == "mean_all_multi_axes"
    assert list(kernel({"data": np.ones(8192, np.float32)})) == ["reduced"]


def test_outputs_reduced_on_a_large_input_runs_the_multi_variant(kernel, rng):
    """The reason for scratch: an SD-like GroupNorm input (40 chunks) with outputs=["reduced"]
    plans mean_all_multi, its scratch 4 bytes a chunk, nothing dropped, and returns reduced alone,
    NumPy's float64 mean and onnxruntime's."""
    x = (rng.standard_normal((1, 320, 32, 32)) + 0.5).astype(np.float32)
    _, plan = kernel.plan({"data": x}, outputs=["reduced"])
    assert plan.variant == "mean_all_multi" and plan.scratch == (("partials", 4 * 40),)
    assert [o.role for o in plan.outputs] == ["reduced"] and not plan.dropped
    got = call(kernel, x, outputs=["reduced"])
    assert_close(got, ort_reduce_mean(x), np.float32, "onnxruntime")


@pytest.mark.parametrize("axes", [None, [0, -1]])
def test_what_the_scratch_held_before_the_call_does_not_matter(kernel, rng, axes):
    """The pooled scratch holds anything when a call starts (an earlier call's sums; `test` fills
    it with 0xFF bytes, NaN as float32): pass parts writes every partial sum pass mean reads, the
    last chunk's too (its lanes past n masked), so the mean has the same bits whatever the pool's
    buffers held, zeros or NaN."""
    x = (rng.standard_normal((3, CHUNK + 1)) + 0.5).astype(np.float32)  # four chunks, the last of 3 elements
    inputs = {"data": x, **({"axes": np.asarray(axes, np.int64)} if axes is not None else {})}
    outputs = kernel.explain(inputs).outputs
    _, plan = kernel.plan(inputs)
    assert plan.variant in MULTI and plan.scratch == (("partials", 16),)
    got = {}
    for byte in (0x00, 0xFF, 0x00):
        fill_pooled_buffers(wk.get_device(), inputs, outputs, byte, scratch=[16])
        got[byte] = kernel(inputs)["reduced"]
        assert_close(got[byte], reduce_mean(x).astype(np.float32), np.float32, f"pool filled with {byte:#x}")
    assert got[0x00].tobytes() == got[0xFF].tobytes()


@pytest.mark.parametrize("variant_size", [(v, wg) for v in MULTI for wg in (64, 1024)])
def test_multi_workgroup_sizes(kernel, rng, variant_size):
    """The chunk is the same at every workgroup size (each invocation loads 8192 / (4 or 8) / wg
    16-byte units), so is the scratch (4 bytes a chunk)."""
    variant, wg = variant_size
    for dtype in (np.float32, np.float16):
        x = (rng.standard_normal((3, 9001)) + 0.5).astype(dtype)
        axes = [1, 0] if variant == "mean_all_multi_axes" else None
        inputs = {"data": x, **({"axes": np.asarray(axes, np.int64)} if axes is not None else {})}
        _, plan = kernel.plan(inputs, variant=variant, tunables={"WORKGROUP_SIZE": wg})
        assert plan.scratch == (("partials", 4 * 4),)  # ceil(27,003 / 8,192) chunks
        call(kernel, x, axes, variant=variant, tunables={"WORKGROUP_SIZE": wg})


def test_multi_refuses_workgroups_below_64(kernel):
    """Below 64 invocations a workgroup would unroll more than 32 loads of its chunk: refused by name."""
    with pytest.raises(wk.errors.VariantRejectedError, match="multiWorkgroupOk"):
        kernel({"data": np.ones(9000, np.float32)}, variant="mean_all_multi", tunables={"WORKGROUP_SIZE": 32})


def test_multi_float16_tail_padding_is_masked(kernel):
    """An odd float16 count past one chunk in a buffer of our own whose padding holds NaN: the last
    workgroup masks the lanes past n (a kernel that summed them would return NaN)."""
    import wgpu

    n = 2 * CHUNK + 1
    held = np.full(n + 7, np.nan, np.float16)  # 16,392 halves: whole 16-byte units, NaN past n
    held[:n] = 1.0
    held[n - 1] = 1000.0
    gpu = wk.get_device().gpu
    usage = wgpu.BufferUsage.STORAGE | wgpu.BufferUsage.COPY_SRC | wgpu.BufferUsage.COPY_DST
    mine = gpu.create_buffer(size=held.nbytes, usage=usage)
    gpu.queue.write_buffer(mine, 0, held)
    data = wk.from_wgpu_buffer(mine, (n,), np.float16)
    try:
        got = kernel({"data": data})
    finally:
        data.release()
    assert list(got) == ["reduced"]
    assert got["reduced"].shape == (1,) and got["reduced"][0] == np.float16((n - 1 + 1000.0) / n)


def test_multi_takes_what_the_one_workgroup_loop_refuses(kernel):
    """mean_all's loop runs ceil(words / WORKGROUP_SIZE) trips per invocation, past lavapipe's 65,535
    for 2^24 float32 elements at the default 256: refused (loopOk), where mean_all_multi takes the
    call, its passes looping ceil(2048 / 256) = 8 trips. Explained, not run (64 MiB); test.json runs
    the same at 64 invocations on 4,202,500 elements."""
    meta = {"data": ((16, 1024, 1024), np.float32)}
    explanation = kernel.explain(meta)
    assert explanation.chosen == "mean_all_multi" and explanation.refused is None
    verdicts = {v.variant: v for v in explanation.verdicts}
    assert not verdicts["mean_all"].accepted and verdicts["mean_all"].clause == "loopOk"
    with pytest.raises(wk.errors.VariantRejectedError, match="loopOk"):
        kernel.plan(meta, variant="mean_all")  # no GPU work: refused when the call is planned
