"""tests/packages/demo.Gather: a third-party package for ONNX Gather on axis 0 (an embedding lookup),
run through load_kernel() with no engine change. It is the proof that storage-only element types
work: int64 indices reach the shader as their bytes, read through the template's own vec2<u32> view.

Judged against np.take with the package's rule for indices outside [-V, V) (a row of zeros), with
exact bit equality: a gather copies values, so NaN payloads and signed zeros must survive too.
"""

from __future__ import annotations

import hashlib
import json

import numpy as np
import pytest

import webgpu_kernels as wk
from webgpu_kernels import errors
from webgpu_kernels.manifest import check_manifest

from conftest import (
    BITS,
    DTYPE_IDS,
    DTYPES,
    PACKAGES_DIR,
    assert_engine_has_no_code_for,
    assert_valid_and_passing,
    poison_outputs,
)

PACKAGE = PACKAGES_DIR / "demo.Gather"
INDEX_DTYPES = (np.int32, np.int64)
INDEX_IDS = ("i32", "i64")
CLIP_VOCAB, CLIP_HIDDEN = 49408, 768  # CLIP ViT-L/14 text encoder (SD 1.x, Flux): token embedding


@pytest.fixture(scope="module")
def gather():
    return wk.load_kernel(PACKAGE)


@pytest.fixture(scope="module")
def clip_tables():
    """CLIP's token-embedding table in f32 and f16, built once (152 MB and 76 MB)."""
    f32 = np.random.default_rng(49408).standard_normal((CLIP_VOCAB, CLIP_HIDDEN), dtype=np.float32)
    return {np.float32: f32, np.float16: f32.astype(np.float16)}


@pytest.fixture(scope="module")
def clip_gpu(clip_tables):
    """The tables uploaded once, as GpuTensors, for the lookups. A table above the device's
    maxStorageBufferBindingSize (the f32 one on lavapipe: 128 MiB) is replaced by its first 512
    columns, which keeps the whole vocabulary."""
    limit = wk.get_device().limits["max-storage-buffer-binding-size"]
    tables = {dt: t if t.nbytes <= limit else np.ascontiguousarray(t[:, :512]) for dt, t in clip_tables.items()}
    uploaded = {dt: (t, wk.to_gpu(t)) for dt, t in tables.items()}
    yield uploaded
    for _, t in uploaded.values():
        t.release()


# --- reference -----------------------------------------------------------------------------------


def reference(data: np.ndarray, indices: np.ndarray) -> np.ndarray:
    """np.take on axis 0 after ONNX's negative-index rule; an index outside [-V, V) gives zeros."""
    v = data.shape[0]
    idx = np.asarray(indices).astype(np.int64)
    ok = (idx >= -v) & (idx < v)
    if v == 0:
        return np.zeros(idx.shape + data.shape[1:], data.dtype)
    y = np.array(np.take(data, np.where(ok, np.where(idx < 0, idx + v, idx), 0), axis=0))  # 0-d stays an array
    y[~ok] = 0
    return y


def assert_bits_equal(got: np.ndarray, want: np.ndarray, what: str = "") -> None:
    assert isinstance(got, np.ndarray), what
    assert got.dtype == want.dtype and got.shape == want.shape, (what, got.dtype, got.shape, want.shape)
    bits = BITS[want.dtype]
    mismatch = np.flatnonzero(got.view(bits).reshape(-1) != want.view(bits).reshape(-1))
    assert mismatch.size == 0, f"{what}: {mismatch.size} elements differ, first at {mismatch[0]}"


def accepted_variants(kernel, inputs, tunables=None) -> list[str]:
    return [v.variant for v in kernel.explain(inputs, tunables=tunables).verdicts if v.accepted]


def digest(data: np.ndarray) -> bytes:
    """The array's bytes, hashed in place: a copy and assert_array_equal of CLIP's 76 MB f16 table
    made fresh temporaries, slow on a VM whose host backs memory on first touch (test_clip_table_from_numpy[f16]:
    5.8 s -> 1.6 s of a cold suite's worker time, sessions 60 and 61)."""
    return hashlib.sha256(np.ascontiguousarray(data).view(np.uint8).reshape(-1)).digest()


def run(kernel, data, indices, *, variant=None, tunables=None) -> np.ndarray:
    """One call, checked against the reference (every output element written, inputs untouched)."""
    want = reference(data, indices)
    before = digest(data), np.array(indices, copy=True)
    poison_outputs(kernel, {"data": data, "indices": indices}, tunables=tunables)  # unwritten: NaN
    y = kernel({"data": data, "indices": indices}, variant=variant, tunables=tunables)["Y"]
    assert digest(data) == before[0], "the call changed its data"
    np.testing.assert_array_equal(indices, before[1])
    assert_bits_equal(y, want, f"data {data.shape} {data.dtype}, indices {np.shape(indices)} {variant}")
    return y


def run_every_variant(kernel, data, indices, tunables=None) -> list[str]:
    """Run on each variant whose `when` holds (as `webgpu-kernels test` does); returns their ids."""
    ran = accepted_variants(kernel, {"data": data, "indices": indices}, tunables)
    assert ran, "no variant accepts the call"
    for vid in ran:
        run(kernel, data, indices, variant=vid, tunables=tunables)
    return ran


def table(rng, shape, dtype) -> np.ndarray:
    return (rng.standard_normal(shape) * 3).astype(dtype)


# --- the package ---------------------------------------------------------------------------------


def test_package_files():
    names = sorted(p.name for p in PACKAGE.iterdir())
    assert names == ["bench.json", "gather-row.wgsl.jinja", "gather-scalar.wgsl.jinja", "gather-vec4.wgsl.jinja",
                     "manifest.json", "metadata.json", "test.json"]  # fmt: skip
    data = json.loads((PACKAGE / "manifest.json").read_text("utf-8"))
    assert check_manifest(data) == []
    assert data["typeConstraints"] == {"T": ["float32", "float16"], "Tind": ["int32", "int64"]}
    assert [(v["id"], v["priority"]) for v in data["variants"]] == [("vec4", 10), ("scalar", 0)]
    assert all(v.get("when") for v in data["variants"])


def test_engine_has_no_code_for_it():
    assert_engine_has_no_code_for("demo.Gather")


def test_validates_and_its_test_json_passes(gather):
    # warnings allowed: its f32 CLIP table passes lavapipe's binding limit (a warning of that adapter)
    assert_valid_and_passing(gather, PACKAGE, ("vec4", "scalar"), warnings_ok=True)


@pytest.mark.parametrize(("index_dtype", "view"), [(np.int64, "array<vec2<u32>>"), (np.int32, "array<i32>")],
                         ids=INDEX_IDS[::-1])  # fmt: skip
def test_indices_are_read_through_the_templates_own_view(gather, index_dtype, view):
    """int64 has no WGSL type: the template declares the binding as u32 pairs and prints no
    `declarations` (which would repeat it). f16 data is moved as u32 words: no `enable f16`."""
    for dtype in DTYPES:
        inputs = {"data": np.zeros((4, 8), dtype), "indices": np.zeros(3, index_dtype)}
        for vid in ("vec4", "scalar"):
            wgsl = gather.render(inputs, variant=vid)["main"]
            assert f"@group(0) @binding(1) var<storage, read> indices: {view};" in wgsl
            assert wgsl.count("@binding(1)") == 1
            assert "i64" not in wgsl and "f16" not in wgsl


# --- CLIP's token embedding ----------------------------------------------------------------------


def clip_ids(rng, batch: int, dtype) -> np.ndarray:
    """Token ids as a CLIP tokenizer gives them: start token 49406, text, end token 49407 as padding."""
    ids = np.full((batch, 77), 49407, np.int64)
    ids[:, 0] = 49406
    ids[:, 1:20] = rng.integers(0, CLIP_VOCAB - 2, size=(batch, 19))
    ids[-1, 20] = 0  # the first row of the table too
    return ids.astype(dtype)


@pytest.mark.parametrize("index_dtype", INDEX_DTYPES, ids=INDEX_IDS)
@pytest.mark.parametrize("batch", [1, 2])
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_clip_token_embedding(gather, clip_gpu, rng, dtype, batch, index_dtype):
    host, table_gpu = clip_gpu[dtype]
    ids = clip_ids(rng, batch, index_dtype)
    assert gather.explain({"data": table_gpu, "indices": ids}).chosen == "vec4"
    y = gather({"data": table_gpu, "indices": ids})["Y"]
    assert_bits_equal(y, reference(host, ids), f"{batch}x77 {index_dtype.__name__}")
    assert y.shape == (batch, 77, host.shape[1])


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_clip_table_from_numpy(gather, clip_tables, rng, dtype):
    """The NumPy path (the table uploaded by the call, left unmodified). Above the device's
    maxStorageBufferBindingSize the engine refuses the table before any GPU work, naming `data`."""
    host = clip_tables[dtype]
    ids = clip_ids(rng, 2, np.int64)
    inputs = {"data": host, "indices": ids}
    if host.nbytes <= wk.get_device().limits["max-storage-buffer-binding-size"]:
        run(gather, host, ids)
        return
    assert "maxStorageBufferBindingSize" in str(gather.explain(inputs).refused)
    with pytest.raises(errors.DeviceLimitError) as info:
        gather(inputs)
    assert info.value.argument == "data"


def test_clip_gpu_table_is_left_unmodified(gather, clip_gpu, clip_tables):
    host, table_gpu = clip_gpu[np.float16]
    gather({"data": table_gpu, "indices": clip_ids(np.random.default_rng(0), 2, np.int64)})
    assert_bits_equal(table_gpu.numpy(), host)


# --- shapes --------------------------------------------------------------------------------------

SHAPES = [
    ((5, 3), ()),  # rank-0 indices: Y is one row
    ((7, 4), (2, 3)),  # rank-2 indices
    ((9,), (4,)),  # rank-1 data: D = 1, Y has indices' shape
    ((9,), ()),  # both: a rank-0 Y
    ((6, 3, 5), (2, 2)),  # rank-3 data, D = 15 (not a multiple of 4; odd for f16)
    ((6, 2, 4), (3,)),  # rank-3 data, D = 8
    ((3, 1, 1, 2), (1, 1, 1)),  # rank 4, D = 2
    ((4, 4), (0,)),  # empty indices: nothing dispatched
    ((4, 0), (3,)),  # D = 0: an empty Y
    ((1, 5), (6,)),  # V = 1
    ((1,), ()),
    ((40, 13), (37,)),  # several workgroups' worth at a small WORKGROUP_SIZE
]


@pytest.mark.parametrize("index_dtype", INDEX_DTYPES, ids=INDEX_IDS)
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize(("data_shape", "index_shape"), SHAPES, ids=str)
def test_shapes(gather, rng, data_shape, index_shape, dtype, index_dtype):
    data = table(rng, data_shape, dtype)
    v = data_shape[0]
    indices = rng.integers(-v, v, size=index_shape).astype(index_dtype)
    y = run(gather, data, indices)
    assert y.shape == tuple(index_shape) + tuple(data_shape[1:])
    d = int(np.prod(data_shape[1:]))
    want = ["vec4", "scalar"] if d % 4 == 0 else ["scalar"]
    assert run_every_variant(gather, data, indices, tunables={"WORKGROUP_SIZE": 16}) == want


@pytest.mark.parametrize("index_dtype", INDEX_DTYPES, ids=INDEX_IDS)
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("d", [8, 7])
def test_every_negative_and_positive_index(gather, rng, d, dtype, index_dtype):
    v = 11
    data = table(rng, (v, d), dtype)
    indices = np.concatenate([np.arange(-v, 0), np.arange(v)]).astype(index_dtype)
    for vid in run_every_variant(gather, data, indices):
        y = gather({"data": data, "indices": indices}, variant=vid)["Y"]
        assert_bits_equal(y[:v], data, vid)  # -V .. -1 is rows 0 .. V-1
        assert_bits_equal(y[v:], data, vid)


# --- out-of-range indices ------------------------------------------------------------------------

I31, I32 = 2**31, 2**32
# Each outside [-V, V) for V = 5. The int64 ones beyond the int32 range include values whose low
# word alone is a valid row (2^32 + 1: row 1; 4 - 2^32: low word 4 with the high word all ones).
OUT_OF_RANGE_I32 = [5, -6, 2**31 - 1, -(2**31), 100, -100]
OUT_OF_RANGE_I64 = OUT_OF_RANGE_I32 + [I31, -I31 - 1, I32, I32 + 1, 4 - I32, -I32, 2**40 + 2, -(2**40), 2**62 + 3,
                                       2**63 - 1, -(2**63)]  # fmt: skip


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("d", [4, 3])
@pytest.mark.parametrize(("index_dtype", "bad"), [(np.int32, OUT_OF_RANGE_I32), (np.int64, OUT_OF_RANGE_I64)],
                         ids=INDEX_IDS)  # fmt: skip
def test_out_of_range_indices_give_zero_rows(gather, rng, index_dtype, bad, d, dtype):
    v = 5
    data = table(rng, (v, d), dtype) + dtype(10)  # no zeros in the table
    good = [0, 4, -1, -5, 2]
    indices = np.array([(b, good[k % len(good)]) for k, b in enumerate(bad)], index_dtype)  # columns: bad, good
    assert indices[:, 0].tolist() == bad  # no wrap in the cast
    for vid in run_every_variant(gather, data, indices):
        y = run(gather, data, indices, variant=vid)
        assert not np.any(y[:, 0].view(BITS[np.dtype(dtype)])), vid  # +0.0, every bit
        assert np.all(y[:, 1] != 0), vid


@pytest.mark.parametrize("index_dtype", INDEX_DTYPES, ids=INDEX_IDS)
def test_an_empty_table_gives_zeros(gather, index_dtype):
    """V = 0: every index is out of range."""
    data = np.zeros((0, 8), np.float32)
    indices = np.array([0, -1, 3], index_dtype)
    assert run_every_variant(gather, data, indices) == ["vec4", "scalar"]


# --- variants, selection, explain ----------------------------------------------------------------


def test_explain_names_the_chosen_variant(gather):
    meta = {"data": ((100, 64), "float16"), "indices": ((2, 77), "int64")}
    explanation = gather.explain(meta)
    assert explanation.chosen == "vec4"
    assert "chosen variant 'vec4'" in str(explanation)
    assert [(o.shape, o.dtype) for o in explanation.outputs] == [((2, 77, 64), "float16")]
    odd = gather.explain({"data": ((100, 6), "float32"), "indices": ((3,), "int32")})
    assert odd.chosen == "scalar"
    assert "when[3] 'quadRows' is false" in str(odd)


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_forced_variants(gather, rng, dtype):
    data = table(rng, (12, 16), dtype)
    indices = rng.integers(-12, 12, size=(3, 5)).astype(np.int64)
    a = run(gather, data, indices, variant="vec4")
    b = run(gather, data, indices, variant="scalar")
    assert_bits_equal(a, b)
    with pytest.raises(errors.VariantRejectedError) as info:
        gather({"data": table(rng, (12, 6), dtype), "indices": indices}, variant="vec4")
    assert (info.value.variant, info.value.clause) == ("vec4", "quadRows")


@pytest.mark.parametrize("variant", ["vec4", "scalar"])
def test_a_grid_spilled_into_y(gather, plan_of, rng, variant):
    """WORKGROUP_SIZE 1 puts one invocation in each of 70000+ workgroups: beyond 65535 the engine
    spills the grid into y, and globalIndex still numbers every unit once."""
    data = table(rng, (50, 4), np.float32)
    indices = rng.integers(-50, 50, size=70_001).astype(np.int64)
    tunables = {"WORKGROUP_SIZE": 1}
    grid = plan_of(gather, {"data": data, "indices": indices}, variant=variant, tunables=tunables).passes[0].grid
    assert grid[1] > 1 and grid[0] * grid[1] * grid[2] >= 70_001
    run(gather, data, indices, variant=variant, tunables=tunables)


# --- bits, GPU tensors, refusals -----------------------------------------------------------------


@pytest.mark.parametrize("index_dtype", INDEX_DTYPES, ids=INDEX_IDS)
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_values_are_copied_as_bits(gather, dtype, index_dtype):
    """Quiet and signalling NaNs with payloads, -0.0, subnormals, infinities: unchanged."""
    if dtype is np.float32:
        words = [0x7FC00001, 0xFFBFFFFF, 0x7F800001, 0x80000000, 0x00000001, 0x807FFFFF, 0x7F800000, 0xFF7FFFFF]
    else:
        words = [0x7E01, 0xFDFF, 0x7C01, 0x8000, 0x0001, 0x83FF, 0xFC00, 0x7BFF]
    data = np.array(words, BITS[np.dtype(dtype)]).view(dtype).reshape(2, 4)
    indices = np.array([1, 0, -1, -2], index_dtype)
    assert run_every_variant(gather, data, indices) == ["vec4", "scalar"]


def test_gpu_tensors_in_and_out(gather, rng):
    """output="gpu" keeps Y on the device; it feeds a second gather as its table, and indices may be a
    GpuTensor too (int64, bound as its bytes). GPU inputs are left as they were."""
    data = table(rng, (30, 8), np.float16)
    ids = rng.integers(-30, 30, size=(4, 6)).astype(np.int64)
    ids_gpu = wk.to_gpu(ids)
    first = gather({"data": data, "indices": ids_gpu}, output="gpu")["Y"]
    assert isinstance(first, wk.GpuTensor) and first.shape == (4, 6, 8) and first.dtype == np.float16
    want = reference(data, ids)
    assert_bits_equal(first.numpy(), want)
    again = np.array([[3, -1], [0, 9]], np.int32)  # rows of the first Y, viewed as a 4-row table
    table_gpu = wk.to_gpu(want.reshape(4, 48))
    second = gather({"data": table_gpu, "indices": again})["Y"]
    assert_bits_equal(second, reference(want.reshape(4, 48), again))
    chained = gather({"data": first, "indices": np.array([3, -4, 7], np.int64)})["Y"]
    assert_bits_equal(chained, reference(want, np.array([3, -4, 7])))
    assert_bits_equal(first.numpy(), want)
    np.testing.assert_array_equal(ids_gpu.numpy(), ids)
    for t in (ids_gpu, first, table_gpu):
        t.release()


@pytest.mark.parametrize(("role", "inputs", "dtype"), [
    ("indices", {"data": np.zeros((4, 4), np.float32), "indices": np.zeros(3, np.uint8)}, "uint8"),
    ("indices", {"data": np.zeros((4, 4), np.float32), "indices": np.zeros(3, np.int16)}, "int16"),
    ("indices", {"data": np.zeros((4, 4), np.float32), "indices": np.zeros(3, np.float32)}, "float32"),
    ("data", {"data": np.zeros((4, 4), np.float64), "indices": np.zeros(3, np.int64)}, "float64"),
    ("data", {"data": np.zeros((4, 4), np.int64), "indices": np.zeros(3, np.int64)}, "int64"),
], ids=["u8-indices", "i16-indices", "f32-indices", "f64-data", "i64-data"])  # fmt: skip
def test_dtypes_outside_the_constraints_are_refused(gather, role, inputs, dtype):
    with pytest.raises(errors.DTypeError) as info:
        gather(inputs)
    assert info.value.argument == role
    assert dtype in str(info.value)


def test_rank_0_data_is_refused(gather):
    with pytest.raises(errors.RankError) as info:
        gather({"data": np.float32(1.0), "indices": np.int64(0)})
    assert info.value.argument == "data"
