"""tests/packages/com.example.MatMulNBits: ONNX Runtime's contrib op ``com.microsoft.MatMulNBits`` with
``bits = 4`` (the 4-bit weight-only quantized MatMul of LLM inference), as a package written from the
docs alone (docs/format.md, docs/package-files.md, docs/python-api.md, docs/cli.md, docs/errors.md) and
run through load_kernel() with no engine change.

Semantics (ORT's ContribOperators.md, checked against its CPU kernel): W [N, K] is quantized in blocks
of ``block_size`` along K; B [N, n_blocks, block_size / 2] holds the 4-bit codes of a column packed
two per byte, the first in the low nibble; ``W[n, k] = (q[n, k] - zp[n, b]) * scales[n * n_blocks + b]``
with b = k // block_size; zero_points [N * ceil(n_blocks / 2)] packs each column's zero points the
same way (low nibble: even block), a column padded to whole bytes; without it every zero point is 8.
``Y = A @ W^T``. The codes past K (K not a multiple of block_size) are ignored.

Four variants: ``gemv`` / ``gemv_zp`` (M <= 8: a workgroup per row and COLUMNS columns, K split over
its invocations word by word, reduced in a tree) and ``tiled`` / ``tiled_zp`` (any M: TILE x TILE
blocks of Y, A and the dequantized weights staged in workgroup memory). The ``_zp`` twins bind
zero_points; the others take calls without it.

Judged against a float64 NumPy dequantize-then-matmul reference and onnxruntime's CPU kernel (a
one-node com.microsoft opset-1 model; skipped where this onnxruntime lacks the op).

Tolerance (``bound``): every weight is (q - z) * s with q - z an exact small integer, so each term
a_k (q - z) s is computed with at most two f32 roundings (the product with s, then with a_k; gemv
rounds a (q - z), the sum of 8 and its product with s instead), and the K terms are summed in f32
in some order: Higham's bound gives |err| <= gamma_{K+2} * sum_k |a_k| |w_k| (+ 2 (K + 2) 2^-126
for flushed subnormals), gamma_n = n u / (1 - n u), u = 2^-24. float16 then rounds the f32 result
either way: + 2^-10 |y| + 2^-14. onnxruntime gets a bound of the same form (its CPU kernel at
accuracy_level 0 accumulates in f32 and rounds a float16 result once, to nearest: 2^-11 |y|).

test.json's expected values come from ``expect_reference``: ``webgpu-kernels expect
tests/packages/com.example.MatMulNBits --reference tests/test_matmul_nbits_package.py:expect_reference``.
"""

from __future__ import annotations

import functools
import json
import math

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
from references import F16_FLUSH, F16_STEP, F32_TINY, U32, assert_within_bound

PACKAGE_NAME = "com.example.MatMulNBits"
PACKAGE = PACKAGES_DIR / PACKAGE_NAME
VARIANTS = ["gemv", "gemv_zp", "tiled", "tiled_zp"]


# --- reference (also `webgpu-kernels expect`'s) ------------------------------------------------------


def unpack_nibbles(packed: np.ndarray, rows: int) -> np.ndarray:
    """uint8 [rows, bytes] -> [rows, 2 * bytes] codes, the first of each byte its low nibble."""
    b = np.asarray(packed, np.uint8).reshape(rows, -1)
    return np.stack([b & 0xF, b >> 4], axis=-1).reshape(rows, -1)


def pack_nibbles(codes: np.ndarray) -> np.ndarray:
    """[rows, 2 * bytes] codes in 0..15 -> uint8 [rows, bytes], the first code in the low nibble."""
    c = np.asarray(codes, np.uint8).reshape(codes.shape[0], -1, 2)
    return (c[..., 0] | (c[..., 1] << 4)).astype(np.uint8)


def dequantize(b, scales, zero_points, k: int, n: int, block_size: int) -> np.ndarray:
    """W [N, K] in float64: (code - zero point) * scale, block by block along K."""
    blocks = -(-k // block_size)
    codes = unpack_nibbles(b, n)[:, :k].astype(np.float64)
    if zero_points is None:
        zp = np.full((n, blocks), 8.0)
    else:
        zp = unpack_nibbles(zero_points, n)[:, :blocks].astype(np.float64)
    s = np.asarray(scales, np.float64).reshape(n, blocks)
    return (codes - np.repeat(zp, block_size, axis=1)[:, :k]) * np.repeat(s, block_size, axis=1)[:, :k]


def reference(inputs: dict, attrs: dict) -> tuple[np.ndarray, np.ndarray]:
    """Y in float64, and sum_k |a_k| |w_k| per element (the error scale)."""
    k, n, bs = int(attrs["K"]), int(attrs["N"]), int(attrs["block_size"])
    w = dequantize(inputs["B"], inputs["scales"], inputs.get("zero_points"), k, n, bs)
    a = np.asarray(inputs["A"], np.float64)
    return a @ w.T, np.abs(a) @ np.abs(w).T


def expect_reference(inputs: dict, attrs: dict) -> dict:
    """For `webgpu-kernels expect`: inputs as `test` builds them, attributes over the defaults."""
    return {"Y": reference(inputs, attrs)[0]}


def gamma(n: int, u: float = U32) -> float:
    return n * u / (1 - n * u)


def bound(scale: np.ndarray, want: np.ndarray, k: int, dtype) -> np.ndarray:
    """The kernel's worst-case error per element (module docstring)."""
    tol = gamma(k + 2) * scale + 2 * (k + 2) * F32_TINY
    if np.dtype(dtype) == np.float16:
        tol = tol * (1 + F16_STEP) + F16_STEP * np.abs(want) + F16_FLUSH
    return tol


def ort_bound(scale: np.ndarray, want: np.ndarray, k: int, dtype) -> np.ndarray:
    """onnxruntime's (its CPU kernel at accuracy_level 0): f32 accumulation; float16 rounded once,
    to nearest."""
    acc = gamma(k + 2) * scale + 2 * (k + 2) * F32_TINY
    if np.dtype(dtype) == np.float16:
        return acc * (1 + F16_STEP / 2) + F16_STEP / 2 * np.abs(want) + F16_FLUSH
    return acc


@functools.lru_cache(maxsize=None)
def ort_session(dtype_name: str, rank: int, k: int, n: int, block_size: int, zp_shape: tuple | None,
                scales_rank: int):  # fmt: skip
    """A one-node com.microsoft.MatMulNBits model on onnxruntime's CPU provider, or None where this
    onnxruntime has no CPU kernel for it."""
    pytest.importorskip("onnxruntime")
    pytest.importorskip("onnx")
    from onnx import TensorProto, helper

    elem = TensorProto.FLOAT16 if dtype_name == "float16" else TensorProto.FLOAT
    vi = helper.make_tensor_value_info
    blocks = -(-k // block_size)
    lead = [f"d{i}" for i in range(rank - 1)]
    inputs = [vi("A", elem, lead + [k]), vi("B", TensorProto.UINT8, [n, blocks, block_size // 2]),
              vi("scales", elem, [n * blocks] if scales_rank == 1 else [n, blocks])]  # fmt: skip
    if zp_shape is not None:
        inputs.append(vi("zero_points", TensorProto.UINT8, list(zp_shape)))
    node = helper.make_node("MatMulNBits", [i.name for i in inputs], ["Y"], domain="com.microsoft",
                            K=k, N=n, bits=4, block_size=block_size)  # fmt: skip
    from references import one_node_session

    try:
        return one_node_session(node, inputs, [vi("Y", elem, lead + [n])], 21)
    except Exception as exc:  # an onnxruntime without the op (or without its float16 kernel), or
        # one whose kernel takes fewer block sizes (1.30 refuses 2048: "block_size_ == 16 || ...")
        if any(
            s in str(exc)
            for s in ("NOT_IMPLEMENTED", "not a registered function/op", "Could not find an implementation",
                      "block_size_ ==")
        ):
            return None
        raise


def ort_run(inputs: dict, attrs: dict) -> np.ndarray | None:
    a, zp = inputs["A"], inputs.get("zero_points")
    session = ort_session(a.dtype.name, a.ndim, int(attrs["K"]), int(attrs["N"]), int(attrs["block_size"]),
                          None if zp is None else tuple(zp.shape), inputs["scales"].ndim)  # fmt: skip
    return None if session is None else session.run(None, dict(inputs))[0]


def assert_matches(got, inputs: dict, attrs: dict, what: str, *, with_ort: bool = True) -> None:
    """``got`` within the kernel's bound of the float64 reference, and within both bounds of
    onnxruntime's result where it has the op."""
    a = inputs["A"]
    want, scale = reference(inputs, attrs)
    assert isinstance(got, np.ndarray) and got.dtype == a.dtype, (what, getattr(got, "dtype", None))
    assert got.shape == a.shape[:-1] + (int(attrs["N"]),), (what, got.shape)
    k = int(attrs["K"])
    tol = bound(scale, want, k, a.dtype)
    assert_within_bound(got, want, tol, what)
    if with_ort and want.size:
        theirs = ort_run(inputs, attrs)
        if theirs is not None:
            assert_within_bound(
                got, theirs.astype(np.float64), tol + ort_bound(scale, want, k, a.dtype), what + " vs onnxruntime"
            )


def run(kernel, inputs: dict, attrs: dict, *, variant=None, tunables=None, with_ort=True) -> np.ndarray:
    """One call (every output element written: poisoned first; inputs untouched), checked."""
    poison_outputs(kernel, inputs, attrs=attrs, tunables=tunables)
    before = {k: v.copy() for k, v in inputs.items()}
    got = kernel(inputs, attrs=attrs, variant=variant, tunables=tunables)["Y"]
    for k, v in inputs.items():
        np.testing.assert_array_equal(v, before[k])
    what = f"{inputs['A'].shape} {inputs['A'].dtype} {attrs} {variant} {tunables or ''}"
    assert_matches(got, inputs, attrs, what, with_ort=with_ort)
    return got


def accepted(kernel, inputs, attrs=None, tunables=None) -> list[str]:
    return [v.variant for v in kernel.explain(inputs, attrs=attrs, tunables=tunables).verdicts if v.accepted]


def run_every_variant(kernel, inputs, attrs, *, tunables=None, with_ort=True) -> list[str]:
    ids = accepted(kernel, inputs, attrs, tunables)
    assert ids, "no variant accepts the call"
    for vid in ids:
        run(kernel, inputs, attrs, variant=vid, tunables=tunables, with_ort=with_ort)
    return ids


def make_inputs(
    rng, lead, k: int, n: int, block_size: int, dtype, *, zero_points=True, scales_rank=1
) -> tuple[dict, dict]:
    """A call of a quantized layer: A ~ N(0, 1); W ~ N(0, 1/K) quantized to 4 bits per block as
    onnxruntime's quantizer does (asymmetric with zero points, else symmetric around 8)."""
    blocks = -(-k // block_size)
    w = rng.standard_normal((n, blocks * block_size)) / math.sqrt(k)
    w[:, k:] = 0.0
    wb = w.reshape(n, blocks, block_size)
    if zero_points:
        lo, hi = np.minimum(wb.min(-1), 0.0), np.maximum(wb.max(-1), 0.0)
        s = np.maximum((hi - lo) / 15.0, 1e-8)
        z = np.clip(np.round(-lo / s), 0, 15)
    else:
        s = np.maximum(np.abs(wb).max(-1) / 8.0, 1e-8)
        z = np.full((n, blocks), 8.0)
    s = s.astype(dtype)
    codes = np.clip(np.round(wb / s.astype(np.float64)[..., None] + z[..., None]), 0, 15).astype(np.uint8)
    inputs = {"A": rng.standard_normal(tuple(lead) + (k,)).astype(dtype),
              "B": pack_nibbles(codes.reshape(n, -1)).reshape(n, blocks, block_size // 2),
              "scales": s.reshape(-1) if scales_rank == 1 else s}  # fmt: skip
    if zero_points:
        zs = -(-blocks // 2)
        zpad = np.zeros((n, 2 * zs), np.uint8)
        zpad[:, :blocks] = z
        inputs["zero_points"] = pack_nibbles(zpad).reshape(-1)
    return inputs, {"K": k, "N": n, "bits": 4, "block_size": block_size}


@pytest.fixture(scope="module")
def nbits():
    return wk.load_kernel(PACKAGE)


# --- the package ----------------------------------------------------------------------------------


def test_loads(nbits):
    assert nbits.op_id == PACKAGE_NAME
    assert nbits.variants == VARIANTS


def test_package_is_valid_and_its_cases_pass(nbits):
    assert_valid_and_passing(nbits, PACKAGE, VARIANTS)


def test_engine_has_no_code_for_it():
    assert_engine_has_no_code_for("MatMulNBits")


def test_expected_outputs_are_the_reference(nbits):
    """test.json's stored outputs are this module's float64 reference of the case's inputs, rounded once."""
    checked = 0
    for case, inputs, stored in stored_expectations(nbits, "Y", lambda ins: ins["A"].dtype.name):
        want = expect_reference(inputs, {"accuracy_level": 0} | dict(case.attrs))["Y"]
        dtype = np.dtype(case.types["T"])
        np.testing.assert_array_equal(stored, want.astype(dtype).astype(np.float64), err_msg=case.name)
        checked += 1
    assert checked == 16


def test_bench_json_counts_flops_and_bytes():
    bench = json.loads((PACKAGE / "bench.json").read_text("utf-8"))
    assert bench["flops"] == "2 * M * N * K"
    assert "numel(shapes.B)" in bench["bytes"]
    decode = [c for c in bench["cases"] if "decode" in c["tags"]]
    assert decode and all(c["inputs"]["A"]["shape"][:-1] == [1, 1] for c in decode)


# --- semantics ------------------------------------------------------------------------------------


def test_nibble_order_and_default_zero_point(nbits):
    """One column, K = 16, block 16: code k sits in byte k // 2, low nibble first; the zero point is
    8 without zero_points, and the low nibble of zero_points' byte for block 0."""
    codes = np.arange(16, dtype=np.uint8)  # q_k = k
    b = pack_nibbles(codes[None, :]).reshape(1, 1, 8)
    assert b[0, 0, 0] == 0x10  # codes 0 (low) and 1 (high)
    a = np.zeros((1, 16), np.float32)
    attrs = {"K": 16, "N": 1, "bits": 4, "block_size": 16}
    scales = np.array([1.0], np.float32)
    for k in (0, 1, 5, 15):
        a[:] = 0
        a[0, k] = 1.0
        for vid in ("gemv", "tiled"):
            assert nbits({"A": a, "B": b, "scales": scales}, attrs=attrs, variant=vid)["Y"][0, 0] == k - 8
        for vid in ("gemv_zp", "tiled_zp"):
            zp = np.array([0xA3], np.uint8)  # block 0's zero point: 3 (low nibble)
            got = nbits({"A": a, "B": b, "scales": scales, "zero_points": zp}, attrs=attrs, variant=vid)["Y"]
            assert got[0, 0] == k - 3


# Real layers (test.json holds scaled-down ones): Phi-3-mini (hidden 3072, block 32) and Llama-3-8B
# (hidden 4096, block 128), rows cut to keep lavapipe fast.
MODEL_SHAPES = [
    ((1, 1), 3072, 256, 32, False),  # Phi-3-mini q/k/v at decode, 256 of its 9216 columns
    ((1, 1), 4096, 128, 128, True),  # Llama-3-8B at decode with zero points, 128 of 4096 columns
    ((1, 7), 3072, 64, 32, True),  # a 7-token prefill still on gemv
    ((1, 20), 1024, 48, 64, True),  # a 20-token prefill: tiled
]


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize(("lead", "k", "n", "block_size", "zero_points"), MODEL_SHAPES, ids=str)
def test_model_shapes(nbits, need_dtype, rng, lead, k, n, block_size, zero_points, dtype):
    need_dtype(dtype)
    inputs, attrs = make_inputs(rng, lead, k, n, block_size, dtype, zero_points=zero_points)
    chosen = nbits.explain(inputs, attrs=attrs).chosen
    assert chosen.startswith("gemv" if math.prod(lead) <= 8 else "tiled")
    assert chosen.endswith("_zp") == zero_points
    run_every_variant(nbits, inputs, attrs)


@pytest.mark.parametrize(
    ("lead", "k", "n", "block_size", "tunables"),
    [
        ((3,), 100, 7, 16, None),  # K not a multiple of the block nor of 8; 7 blocks (odd)
        ((2,), 40, 5, 32, {"WORKGROUP_SIZE": 1, "COLUMNS": 1, "TILE": 1}),  # one invocation per workgroup
        ((1,), 2048, 3, 2048, {"WORKGROUP_SIZE": 1024, "COLUMNS": 2, "TILE": 32}),  # the largest block
        ((5,), 64, 70, 64, {"COLUMNS": 32, "TILE": 5}),  # N not a multiple of either
        ((), 48, 4, 16, None),  # rank-1 A: Y is [N]
    ],
    ids=str,
)
def test_edge_shapes(nbits, rng, lead, k, n, block_size, tunables):
    for zero_points in (False, True):
        inputs, attrs = make_inputs(rng, lead, k, n, block_size, np.float32, zero_points=zero_points)
        ids = run_every_variant(nbits, inputs, attrs, tunables=tunables)
        assert len(ids) == 2, ids


def test_scales_and_zero_points_of_rank_2(nbits, rng):
    inputs, attrs = make_inputs(rng, (2,), 96, 6, 32, np.float32, scales_rank=2)
    inputs["zero_points"] = inputs["zero_points"].reshape(6, 2)
    assert inputs["scales"].shape == (6, 3)
    run_every_variant(nbits, inputs, attrs)


def test_empty_rows(nbits, rng):
    inputs, attrs = make_inputs(rng, (0,), 32, 4, 32, np.float32)
    assert nbits(inputs, attrs=attrs)["Y"].shape == (0, 4)


# --- contract -------------------------------------------------------------------------------------


def test_refusals(nbits, rng):
    inputs, attrs = make_inputs(rng, (1,), 64, 4, 32, np.float32)
    with pytest.raises(errors.SelectionError, match="bitsOk=False"):
        nbits(inputs, attrs=attrs | {"bits": 8})
    with pytest.raises(errors.SelectionError, match="blockOk=False"):
        nbits(inputs, attrs=attrs | {"block_size": 8})
    with pytest.raises(errors.SelectionError, match="nOk=False"):
        nbits(inputs, attrs=attrs | {"N": 0})
    with pytest.raises(errors.SelectionError, match="kOk=False"):
        nbits(inputs, attrs=attrs | {"K": 32})
    with pytest.raises(errors.SelectionError, match="bShapeOk=False"):
        nbits({**inputs, "B": inputs["B"][:, :, :8].copy()}, attrs=attrs)
    with pytest.raises(errors.SelectionError, match="scalesOk=False"):
        nbits({**inputs, "scales": inputs["scales"][:-1].copy()}, attrs=attrs)
    with pytest.raises(errors.SelectionError, match="zpOk=False"):
        nbits({**inputs, "zero_points": np.zeros(8, np.uint8)}, attrs=attrs)
    with pytest.raises(errors.DTypeError) as info:
        nbits({**inputs, "zero_points": np.full(8, 8.0, np.float32)}, attrs=attrs)
    assert info.value.argument == "zero_points"
    with pytest.raises(errors.DTypeError):
        nbits({**inputs, "scales": inputs["scales"].astype(np.float16)}, attrs=attrs)  # T bound twice
    with pytest.raises(errors.UnknownInputError, match="g_idx"):
        nbits({**inputs, "g_idx": np.zeros(64, np.int32)}, attrs=attrs)
    with pytest.raises(errors.RankError):
        nbits({**inputs, "B": inputs["B"].reshape(4, -1)}, attrs=attrs)
    with pytest.raises(errors.VariantRejectedError, match="decode"):
        nbits({**inputs, "A": np.ones((9, 64), np.float32)}, attrs=attrs, variant="gemv_zp")


# --- test.json's tolerances -------------------------------------------------------------------------


def round_up(x: float, digits: int = 2) -> float:
    """x rounded up to `digits` significant digits (a tolerance never below its bound)."""
    if x <= 0:
        return 0.0
    scale = 10.0 ** (math.floor(math.log10(x)) - digits + 1)
    return float(f"{math.ceil(x / scale * (1 - 1e-12)) * scale:.{digits}g}")


def case_tolerances() -> dict[str, dict]:
    """Per case, the module's bound as test.json's rule takes it (|got - want| <= atol + rtol |want|):
    atol the largest accumulation bound of the case (float16: with its f16 rounding and 2^-14), rtol
    from the file (float32 2^-23, the stored value's rounding; float16 1.5e-3 >= 2^-10 + 2^-11, the
    kernel's rounding either way and the stored value's to nearest)."""
    from webgpu_kernels.casefile import read_test_file

    kernel = wk.load_kernel(PACKAGE, verify_digests=False)
    out = {}
    for case in read_test_file(kernel.package).cases:
        if case.refused is not None:
            continue
        inputs = wk.test_case_inputs(kernel, case.name)
        attrs = dict(case.attrs)
        _, scale = reference(inputs, attrs)
        acc = float(gamma(int(attrs["K"]) + 2) * scale.max() + 2 * (int(attrs["K"]) + 2) * F32_TINY)
        dtype = case.types["T"]
        atol = acc if dtype == "float32" else acc * (1 + F16_STEP) + F16_FLUSH
        out[case.name] = {dtype: {"atol": round_up(atol)}}
    return out


def test_tolerances_are_the_bound(nbits):
    document = json.loads((PACKAGE / "test.json").read_text("utf-8"))
    assert document["tolerances"] == {
        "float32": {"rtol": 2.0**-23, "atol": 0.0},
        "float16": {"rtol": 1.5e-3, "atol": 2.0**-14},
    }
    want = case_tolerances()
    assert {c["name"]: c["tolerances"] for c in document["cases"] if "tolerances" in c} == want


if __name__ == "__main__":
    # Writes test.json's tolerances; then `webgpu-kernels expect` (module docstring) writes its
    # values again, in its own layout, and refreshes metadata.json.
    path = PACKAGE / "test.json"
    doc = json.loads(path.read_text("utf-8"))
    doc["tolerances"] = {"float32": {"rtol": 2.0**-23, "atol": 0.0}, "float16": {"rtol": 1.5e-3, "atol": 2.0**-14}}
    tolerances = case_tolerances()
    for c in doc["cases"]:
        if c["name"] in tolerances:
            c["tolerances"] = tolerances[c["name"]]
    path.write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
