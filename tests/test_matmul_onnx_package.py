"""tests/packages/ai.onnx.MatMul: ONNX MatMul (ai.onnx, opset 13), written from the format documents
alone and run through load_kernel() with no engine change.

Semantics (MatMul-13, "behaves like numpy.matmul"): A (..., M, K) x B (..., K, N) -> Y (..., M, N), the
batch dimensions broadcast NumPy-style (ranks may differ, a 1 on either side broadcasts); a 1-D A (K,)
is promoted to (1, K) and the prepended 1 removed from Y, a 1-D B (K,) to (K, 1) and the appended 1
removed, so two 1-D operands give a rank-0 Y. float32 and float16, the K products summed in f32 and
the result rounded once to the data type. K = 0 gives zeros. The package refuses rank 0 and ranks above
8 (RankError), batch dimensions that do not broadcast (ShapeError) and a K of B other than A's
(SelectionError, ``kOk=False`` with both shapes). References: the ONNX operator documentation
(MatMul-13), NumPy's ``matmul`` and onnxruntime's CPU MatMul.

Judged against a float64 NumPy reference (``np.matmul`` in float64) and against onnxruntime's CPU
kernel (a one-node opset-13 model), every variant, both dtypes. Tolerances are worst-case bounds per
element (Higham, "Accuracy and Stability of Numerical Algorithms", 3.1: a K-term f32 dot product in
any order is within gamma_K * sum |a_k| |b_k|, gamma_K = K u / (1 - K u), u = 2^-24), plus, for
float16, the result's conversion (WGSL may round it either way). test.json's expected values come
from ``expect_reference``: ``webgpu-kernels expect tests/packages/ai.onnx.MatMul --reference
tests/test_matmul_onnx_package.py:expect_reference``; its per-case ``atol``s from ``write_tolerances``
(``python tests/test_matmul_onnx_package.py``).
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
from references import assert_matches_within_bound, skip_for_older_onnxruntime

PACKAGE_NAME = "ai.onnx.MatMul"
PACKAGE = PACKAGES_DIR / PACKAGE_NAME
VARIANTS = ["rows", "blocked", "tiled", "simple"]
MAX_ROWS = 8  # the manifest's default: rows takes M <= MAX_ROWS (A's second-to-last dimension)
U = 2.0**-24  # f32 unit roundoff


# --- reference (also `webgpu-kernels expect`'s) ------------------------------------------------------


def matmul(a, b) -> np.ndarray:
    """MatMul-13 in float64: numpy.matmul, whose rules (broadcast batches, 1-D promotion) are ONNX's.
    ValueError where K differs or the batches do not broadcast."""
    with np.errstate(invalid="ignore", over="ignore"):
        return np.asarray(np.matmul(np.asarray(a, np.float64), np.asarray(b, np.float64)))


def expect_reference(inputs: dict, attrs: dict) -> dict:
    """For `webgpu-kernels expect`: inputs as `test` builds them."""
    return {"Y": matmul(inputs["A"], inputs["B"])}


def error_bound(a, b, *, float16: bool = False) -> np.ndarray:
    """Per element of Y, how far an f32-accumulating kernel may be from ``matmul`` (module docstring):
    gamma_K sum_k |a_k| |b_k| for the dot product in any order, 2 K 2^-126 for flushed subnormals; for
    float16 the f32 result's conversion, which may round either way: 2^-10 of (|y| + the bound), the |y|
    part left to the relative tolerance (1.5e-3 >= 2^-10 + 2^-11, the stored value's own rounding), and
    2^-14 where a subnormal result is flushed."""
    a = np.abs(np.asarray(a, np.float64))
    b = np.abs(np.asarray(b, np.float64))
    k = a.shape[-1]
    gamma = k * U / (1 - k * U)
    with np.errstate(invalid="ignore"):
        dot = np.nan_to_num(np.matmul(a, b), nan=0.0, posinf=0.0)
    bound = gamma * dot + 2 * k * 2.0**-126
    if float16:
        bound = bound * (1 + 2.0**-10) + 2.0**-14
    return np.asarray(bound)


def write_tolerances() -> None:
    """Gives each test.json case whose error bound (``error_bound``, its largest element) exceeds the
    file's tolerance its own ``atol`` (the bound, 1% over), for a GPU that sums in another order than
    lavapipe; then refreshes metadata.json. ``python tests/test_matmul_onnx_package.py`` after
    ``webgpu-kernels expect``."""
    from webgpu_kernels.digests import write_metadata

    kernel = wk.load_kernel(PACKAGE, verify_digests=False)
    path = PACKAGE / "test.json"
    doc = json.loads(path.read_text("utf-8"))
    for case in doc["cases"]:
        case.pop("tolerances", None)
        if "expected" not in case:
            continue
        inputs = wk.test_case_inputs(kernel, case["name"])
        f16 = inputs["A"].dtype == np.float16
        worst = float(error_bound(inputs["A"], inputs["B"], float16=f16).max(initial=0.0))
        dtype = "float16" if f16 else "float32"
        if worst > doc["tolerances"][dtype]["atol"]:
            case["tolerances"] = {dtype: {"atol": float(f"{worst * 1.01:.3g}")}}
    path.write_text(json.dumps(doc, indent=2) + "\n", "utf-8")
    write_metadata(PACKAGE)


@functools.lru_cache(maxsize=None)
def ort_session(rank_a: int, rank_b: int, rank_y: int, float16: bool):
    """A one-node MatMul-13 model on onnxruntime's CPU provider (symbolic dimensions)."""
    pytest.importorskip("onnxruntime")
    pytest.importorskip("onnx")
    from onnx import TensorProto, helper

    from references import one_node_session, symbolic_tensor

    kind = TensorProto.FLOAT16 if float16 else TensorProto.FLOAT
    node = helper.make_node("MatMul", ["A", "B"], ["Y"])
    return one_node_session(node, [symbolic_tensor("A", kind, rank_a), symbolic_tensor("B", kind, rank_b)],
                            [symbolic_tensor("Y", kind, rank_y)], 13)  # fmt: skip


def ort_matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    rank_y = max(a.ndim, b.ndim) - (a.ndim == 1) - (b.ndim == 1) if a.ndim > 1 or b.ndim > 1 else 0
    return np.asarray(ort_session(a.ndim, b.ndim, rank_y, a.dtype == np.float16).run(None, {"A": a, "B": b})[0])


@pytest.fixture(scope="module")
def kernel() -> wk.Kernel:
    return wk.load_kernel(PACKAGE)




def call(kernel: wk.Kernel, a, b, **options) -> np.ndarray:
    """One call, its output poisoned first (an unwritten element reads NaN), the inputs untouched,
    checked against the float64 reference within ``error_bound``."""
    inputs = {"A": a, "B": b}
    before = {k: v.copy() for k, v in inputs.items()}
    poison_outputs(kernel, inputs, tunables=options.get("tunables"))
    got = kernel(inputs, **options)["Y"]
    for k, v in inputs.items():
        assert v.tobytes() == before[k].tobytes(), k
    assert got.dtype == a.dtype
    assert_matches_within_bound(got, matmul(a, b), error_bound(a, b, float16=a.dtype == np.float16), a.dtype,
          f"{a.shape} {b.shape} {a.dtype} {options}")  # fmt: skip
    return got


def rows_of(a_shape) -> int:
    """M: A's second-to-last dimension, 1 for a 1-D A."""
    return a_shape[-2] if len(a_shape) >= 2 else 1


def accepting(kernel: wk.Kernel, inputs: dict, **options) -> list[str]:
    """The variants whose `when` holds for the call (test runs each of them forced)."""
    return [v.variant for v in kernel.explain(inputs, **options).verdicts if v.accepted]


# --- the package ----------------------------------------------------------------------------------


def test_package_files(kernel):
    data = json.loads((PACKAGE / "manifest.json").read_text("utf-8"))
    assert (data["domain"], data["name"], data["sinceVersion"]) == ("ai.onnx", "MatMul", 13)
    assert [i["role"] for i in data["inputs"]] == ["A", "B"] and [o["role"] for o in data["outputs"]] == ["Y"]
    assert data["typeConstraints"] == {"T": ["float32", "float16"]} and "attributes" not in data
    assert kernel.op_id == PACKAGE_NAME and kernel.variants == VARIANTS
    bench = json.loads((PACKAGE / "bench.json").read_text("utf-8"))
    assert bench["flops"] == "2 * count * K"
    shapes = {(tuple(c["inputs"]["A"]["shape"]), tuple(c["inputs"]["B"]["shape"])) for c in bench["cases"]}
    assert {((1, 12, 77, 64), (1, 12, 64, 77)), ((1, 12, 77, 77), (1, 12, 77, 64)), ((2, 8, 4096, 40), (2, 8, 40, 77)),
            ((2, 8, 4096, 77), (2, 8, 77, 40)), ((2, 77, 768), (768, 3072))} <= shapes  # fmt: skip
    # TFLOP/s: 2 M N K per batch matrix, the batch broadcast
    flops = kernel.evaluate(bench["flops"], {"A": ((2, 77, 768), "float32"), "B": ((768, 3072), "float32")})
    assert flops == 2 * 2 * 77 * 3072 * 768


def test_engine_has_no_code_for_it():
    assert_engine_has_no_code_for(PACKAGE_NAME)


def test_validates_and_its_test_json_passes(kernel):
    assert_valid_and_passing(kernel, PACKAGE, VARIANTS)


def test_expected_outputs_are_the_reference(kernel):
    """test.json's stored outputs are np.matmul in float64 of the case's inputs, rounded once to the
    output dtype; the cases cover each 1-D rule, broadcasting, K = 0 and 1, empty dimensions, both
    dtypes."""
    seen, dtypes = set(), set()
    for case, inputs, stored in stored_expectations(kernel, "Y", lambda i: i["A"].dtype.name):
        a, b = inputs["A"], inputs["B"]
        want = matmul(a, b).astype(a.dtype).astype(np.float64)
        np.testing.assert_array_equal(stored, want, err_msg=case.name)
        seen.add((a.shape, b.shape))
        dtypes.add(a.dtype.name)
    assert dtypes == {"float32", "float16"}
    assert {((7,), (3, 7, 5)), ((2, 4, 7), (7,)), ((9,), (9,)), ((1, 3, 5, 4), (2, 1, 4, 6)), ((3, 4, 1), (1, 5)),
            ((2, 3, 0), (0, 4)), ((0, 3, 4), (4, 5))} <= seen  # fmt: skip


# --- results -------------------------------------------------------------------------------------

# (A, B): each 1-D rule, batch broadcasting both ways and across ranks, K = 1, odd sizes over tiles
# (ranks 6 and 8, whose batch loops are shaders of their own, are test.json's: rank6-*-f16, rank8-*-f32)
CALLS = [
    ((6, 5), (5, 7)),
    ((5,), (5, 7)),
    ((7,), (2, 3, 7, 4)),
    ((4, 6), (6,)),
    ((2, 3, 4, 6), (6,)),
    ((11,), (11,)),
    ((1, 3, 5, 4), (2, 1, 4, 6)),
    ((2, 1, 3, 4), (1, 2, 4, 5)),
    ((2, 4, 9, 8), (8, 3)),
    ((9, 8), (3, 1, 8, 2)),
    ((3, 6, 1), (2, 1, 1, 5)),
    ((2, 19, 33), (2, 33, 17)),
]


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize(("a_shape", "b_shape"), CALLS, ids=lambda s: "x".join(map(str, s)))
def test_every_variant_against_the_reference_and_onnxruntime(kernel, rng, need_dtype, a_shape, b_shape, dtype):
    need_dtype(dtype)
    a = rng.standard_normal(a_shape).astype(dtype)
    b = rng.standard_normal(b_shape).astype(dtype)
    inputs = {"A": a, "B": b}
    variants = VARIANTS if rows_of(a_shape) <= MAX_ROWS else VARIANTS[1:]
    assert accepting(kernel, inputs) == variants and kernel.explain(inputs).chosen == variants[0]
    want = ort_matmul(a, b)
    assert want.shape == np.matmul(a, b).shape
    # onnxruntime rounds its float16 result to nearest after an f32 sum: its own bound and ours
    both = 2 * error_bound(a, b, float16=dtype == np.float16)
    for variant in variants:
        got = call(kernel, a, b, variant=variant)
        assert_matches_within_bound(got, want, both, dtype, f"onnxruntime: {variant} {a_shape} {b_shape}")


@pytest.mark.parametrize(
    ("a_shape", "b_shape"), [((2, 3, 0), (0, 4)), ((0,), (0,)), ((0, 3, 4), (4, 5)), ((2, 0, 4), (4, 5)),
                             ((3, 4), (4, 0)), ((1, 3, 4), (0, 4, 2))])  # fmt: skip
def test_empty_operands(kernel, rng, a_shape, b_shape):
    """K = 0 gives zeros (a rank-0 zero for two empty vectors); an empty batch, M or N an empty Y,
    nothing dispatched; as onnxruntime."""
    a = rng.standard_normal(a_shape).astype(np.float32)
    b = rng.standard_normal(b_shape).astype(np.float32)
    want = matmul(a, b).astype(np.float32)  # K = 0: zeros, exactly
    for variant in accepting(kernel, {"A": a, "B": b}):
        got = call(kernel, a, b, variant=variant)
        np.testing.assert_array_equal(got, want)
    try:
        ort = ort_matmul(a, b)
    except Exception as exc:  # onnxruntime's own error types
        skip_for_older_onnxruntime(f"refuses it: {exc}")
        raise
    np.testing.assert_array_equal(ort, want)


@pytest.mark.parametrize(("tunables", "variant"), [({"TILE": 1}, "tiled"), ({"TILE": 32}, "tiled"),
                                                   ({"WORKGROUP_SIZE": 1}, "simple"), ({"WORKGROUP_SIZE": 7}, "simple")])  # fmt: skip
def test_tunables(kernel, rng, tunables, variant):
    """Any TILE whose square fits the device's workgroup limits; any WORKGROUP_SIZE."""
    a = rng.standard_normal((2, 35, 37)).astype(np.float32)
    b = rng.standard_normal((37, 33)).astype(np.float32)
    call(kernel, a, b, variant=variant, tunables=tunables)


def test_bench_cases_choose_the_register_blocked_variant(kernel):
    """Every bench.json case of more than MAX_ROWS rows (SD 1.5 cross-attention, CLIP attention and
    fc1) runs `blocked` by default, CLIP's text projection of the pooled token (1 row) `rows`, both
    dtypes, with the tunables' defaults."""
    bench = json.loads((PACKAGE / "bench.json").read_text("utf-8"))
    for case in bench["cases"]:
        for dtype in case["types"]["T"]:
            inputs = {role: (tuple(spec["shape"]), dtype) for role, spec in case["inputs"].items()}
            explained = kernel.explain(inputs)
            want = "rows" if rows_of(inputs["A"][0]) <= MAX_ROWS else "blocked"
            assert explained.chosen == want and explained.refused is None, (case["name"], dtype, str(explained))


# (A, B, tunables): M, N, K of 1 and 2, 37, 45, 70, 77, K off BK, batch broadcast on either side; blocks
# of other shapes, one whose A and B loads do not split evenly over the invocations (BN 12: 24
# invocations, 32 elements of A to load)
BLOCKED_CALLS = [
    ((2, 77, 45), (45, 70), None),
    ((2, 40), (2, 40, 77), None),
    ((1, 37), (37, 1), None),
    ((3, 1, 70, 2), (1, 2, 2, 77), None),
    ((2, 77, 45), (45, 70), {"BM": 32, "BN": 32, "BK": 8, "TM": 2, "TN": 4}),
    ((2, 37, 45), (1, 45, 70), {"BM": 8, "BN": 12, "BK": 4, "TM": 1, "TN": 4}),
]


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize(("a_shape", "b_shape", "tunables"), BLOCKED_CALLS, ids=lambda s: "x".join(map(str, s)) if isinstance(s, tuple) else str(s))
def test_blocked_edges_against_the_reference_and_onnxruntime(kernel, rng, need_dtype, a_shape, b_shape, tunables, dtype):
    """The register-blocked variant on partial blocks in M, N and K (masked loads and stores), tiny M and
    N, batch broadcasting, and other block shapes; f16 summed in f32 (within the f32 bound)."""
    need_dtype(dtype)
    a = rng.standard_normal(a_shape).astype(dtype)
    b = rng.standard_normal(b_shape).astype(dtype)
    want = "rows" if rows_of(a_shape) <= MAX_ROWS else "blocked"
    assert kernel.explain({"A": a, "B": b}, tunables=tunables).chosen == want
    got = call(kernel, a, b, variant="blocked", tunables=tunables)
    both = 2 * error_bound(a, b, float16=dtype == np.float16)
    assert_matches_within_bound(got, ort_matmul(a, b), both, dtype, f"onnxruntime: {a_shape} {b_shape} {tunables}")


def test_blocked_refuses_block_shapes_it_cannot_run(kernel):
    """TN and BK multiples of 4 (vec4 rows in workgroup memory), BM / TM and BN / TN whole, the
    invocations and workgroup storage within the device's limits; another variant takes the call."""
    inputs = {"A": ((MAX_ROWS + 1, 7), "float32"), "B": ((7, 3), "float32")}
    for tunables, clause in (({"TN": 2}, "blockShapeOk=False"), ({"BK": 6}, "blockShapeOk=False"),
                             ({"BM": 60, "TM": 8}, "blockShapeOk=False"), ({"BM": 1024, "TM": 1}, "blockSizeOk=False"),
                             ({"BK": 1024}, "blockStorageOk=False")):  # fmt: skip
        explained = kernel.explain(inputs, tunables=tunables)
        assert explained.chosen == "tiled" and clause in str(explained), (tunables, str(explained))
        with pytest.raises(errors.VariantRejectedError, match=clause):
            kernel({"A": np.ones((5, 7), np.float32), "B": np.ones((7, 3), np.float32)}, variant="blocked", tunables=tunables)


def test_specials(kernel):
    """NaN in a row of A is NaN in that row of Y only; a float16 result past 65504 is the infinity of
    its sign on lavapipe, as in onnxruntime (another device's conversion may differ)."""
    a = np.ones((3, 4), np.float32)
    a[1, 2] = np.nan
    b = np.ones((4, 2), np.float32)
    for variant in VARIANTS:
        got = kernel({"A": a, "B": b}, variant=variant)["Y"]
        assert np.isnan(got[1]).all() and (got[[0, 2]] == 4).all(), variant
    adapter = wk.get_device().adapter
    if "llvmpipe" in f"{adapter.name} {adapter.vendor}".lower():
        a16 = np.full((2, 2), 200, np.float16)
        a16[1] *= -1
        b16 = np.full((2,), 200, np.float16)
        assert ort_matmul(a16, b16).tolist() == [np.inf, -np.inf]
        for variant in VARIANTS:
            assert kernel({"A": a16, "B": b16}, variant=variant)["Y"].tolist() == [np.inf, -np.inf], variant


def test_loop_bounds_for_llvmpipe(kernel):
    """llvmpipe stops an invocation's loops after 65,535 iterations (docs/format.md): simple takes
    K <= 65,535, tiled ceil(K / TILE) <= 65,535 steps; past both no variant takes the call. (MAX_ROWS + 1
    rows: rows, bounded below, takes fewer.)"""

    def explain(k, **tunables):
        return kernel.explain({"A": ((MAX_ROWS + 1, k), "float32"), "B": ((k,), "float32")}, tunables=tunables or None)

    assert accepting(kernel, {"A": ((65535,), "float32"), "B": ((65535,), "float32")}) == VARIANTS
    assert explain(65536).chosen == "blocked" and "simpleLoopOk=False" in str(explain(65536))
    # blocked walks K in steps of BK (its inner loops are unrolled by the template): ceil(K / BK) <= 65,535
    assert explain(4 * 65535, BK=4).chosen == "blocked" and explain(4 * 65535 + 1, BK=4).chosen == "tiled"
    refused = explain(4 * 65535 + 1, TILE=1, BK=4)
    assert refused.chosen is None and "tiledLoopOk=False" in str(refused) and "simpleLoopOk=False" in str(refused)
    assert "blockedLoopOk=False" in str(refused)
    with pytest.raises(errors.VariantRejectedError, match="simpleLoopOk=False"):
        kernel({"A": np.ones(65536, np.float32), "B": np.ones(65536, np.float32)}, variant="simple")
    # at the bound the sum is whole on lavapipe: K ones
    y = kernel({"A": np.ones(65535, np.float32), "B": np.ones(65535, np.float32)}, variant="simple")["Y"]
    assert y.shape == () and float(y) == 65535.0


def test_rows_loop_bounds_for_llvmpipe(kernel):
    """rows' one loop runs ceil(K / KS) trips, KS = ROWS_WORKGROUP / ROWS_COLS lanes over k (16 by
    default): it takes K up to 65,535 KS, and past it (blocked's bound too, at BK = 16) no variant does.
    At the bound the sum is whole on lavapipe (KS = 2), one k a trip (ROWS_UNROLL 1: a lone loop of
    65,535 trips) and the default four."""

    def explain(k, **tunables):
        return kernel.explain({"A": ((k,), "float32"), "B": ((k,), "float32")}, tunables=tunables or None)

    assert explain(16 * 65535).chosen == "rows"
    assert explain(16 * 65535 + 1).chosen is None and "rowsLoopOk=False" in str(explain(16 * 65535 + 1))
    tunables = {"ROWS_WORKGROUP": 2, "ROWS_COLS": 1}
    assert explain(2 * 65535, **tunables).chosen == "rows" and explain(2 * 65535 + 1, **tunables).chosen == "blocked"
    k = 2 * 65535
    for unroll in (1, 4):
        y = kernel({"A": np.ones(k, np.float32), "B": np.ones(k, np.float32)}, tunables={**tunables, "ROWS_UNROLL": unroll})["Y"]
        assert y.shape == () and float(y) == float(k), unroll


# (A, B): rows at M = 1 (1-D A too), 2 and MAX_ROWS, batch broadcast on either side and across ranks,
# a 1-D B (N = 1), K = 1, N and K of 37, 45, 70 (off the column block and the lanes) and a long K
ROWS_CALLS = [
    ((2, 1, MAX_ROWS, 37), (3, 37, 45)),
    ((70,), (70, 45)),
    ((1, 45), (2, 45, 70)),
    ((1, 3, 2, 45), (2, 1, 45, 37)),
    ((3, 4, 70), (70,)),
    ((2, 1, 1), (1, 37)),
    ((MAX_ROWS, 1000), (1000, 37)),
]


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize(("a_shape", "b_shape"), ROWS_CALLS, ids=lambda s: "x".join(map(str, s)))
def test_rows_against_the_reference_and_onnxruntime(kernel, rng, need_dtype, a_shape, b_shape, dtype):
    """rows is chosen for M <= MAX_ROWS and agrees with the float64 reference and with onnxruntime
    (f16 summed in f32: within the f32 bound of any order, the tree's included)."""
    need_dtype(dtype)
    a = rng.standard_normal(a_shape).astype(dtype)
    b = rng.standard_normal(b_shape).astype(dtype)
    assert kernel.explain({"A": a, "B": b}).chosen == "rows"
    got = call(kernel, a, b)
    both = 2 * error_bound(a, b, float16=dtype == np.float16)
    assert_matches_within_bound(got, ort_matmul(a, b), both, dtype, f"onnxruntime: {a_shape} {b_shape}")


def test_rows_stop_at_max_rows(kernel, rng):
    """One row more than MAX_ROWS goes to blocked (rows refuses it: rowsFew=False), as does M above a
    MAX_ROWS tunable; a forced rows is a VariantRejectedError."""
    a = rng.standard_normal((2, MAX_ROWS + 1, 45)).astype(np.float32)
    b = rng.standard_normal((45, 37)).astype(np.float32)
    explained = kernel.explain({"A": a, "B": b})
    assert explained.chosen == "blocked" and "rowsFew=False" in str(explained)
    call(kernel, a, b)
    with pytest.raises(errors.VariantRejectedError, match="rowsFew=False"):
        kernel({"A": a, "B": b}, variant="rows")
    assert kernel.explain({"A": a[:, :3], "B": b}).chosen == "rows"
    assert kernel.explain({"A": a[:, :3], "B": b}, tunables={"MAX_ROWS": 2}).chosen == "blocked"
    call(kernel, a[:, :3], b, tunables={"MAX_ROWS": 3})


# tunables: one lane over k (no tree), 256 lanes per column, MAX_ROWS 16 at M = 16, 1, 2 and 8 k a trip
@pytest.mark.parametrize(("tunables", "m"), [({"ROWS_WORKGROUP": 32, "ROWS_COLS": 32, "ROWS_UNROLL": 2}, 5),
                                             ({"ROWS_COLS": 1, "ROWS_UNROLL": 8}, 5),
                                             ({"MAX_ROWS": 16, "ROWS_WORKGROUP": 64, "ROWS_COLS": 8, "ROWS_UNROLL": 1}, 16)])  # fmt: skip
def test_rows_tunables(kernel, rng, tunables, m):
    a = rng.standard_normal((2, m, 70)).astype(np.float32)
    b = rng.standard_normal((70, 45)).astype(np.float32)
    assert kernel.explain({"A": a, "B": b}, tunables=tunables).chosen == "rows"
    call(kernel, a, b, tunables=tunables)


def test_rows_refuses_shapes_it_cannot_run(kernel):
    """ROWS_COLS dividing ROWS_WORKGROUP with a power-of-two quotient (the tree), MAX_ROWS 1 to 32
    (registers), ROWS_UNROLL 1 to 16, the invocations and 4 x MAX_ROWS x ROWS_WORKGROUP bytes of workgroup storage within
    the device's limits; blocked takes the call."""
    inputs = {"A": ((2, 7), "float32"), "B": ((7, 3), "float32")}
    limits = wk.get_device().limits
    too_big = 2 * max(limits["max-compute-invocations-per-workgroup"], limits["max-compute-workgroup-size-x"])
    for tunables, clause in (({"ROWS_COLS": 3}, "rowsShapeOk=False"), ({"ROWS_WORKGROUP": 96, "ROWS_COLS": 32}, "rowsShapeOk=False"),
                             ({"MAX_ROWS": 33}, "rowsShapeOk=False"), ({"ROWS_COLS": 0}, "rowsShapeOk=False"),
                             ({"ROWS_UNROLL": 0}, "rowsShapeOk=False"), ({"ROWS_UNROLL": 17}, "rowsShapeOk=False"),
                             ({"MAX_ROWS": 32, "ROWS_WORKGROUP": 1024}, "rowsStorageOk=False"),
                             ({"ROWS_WORKGROUP": too_big}, "rowsSizeOk=False")):  # fmt: skip
        explained = kernel.explain(inputs, tunables=tunables)
        assert explained.chosen == "blocked" and clause in str(explained), (tunables, str(explained))
        with pytest.raises(errors.VariantRejectedError, match=clause):
            kernel({"A": np.ones((2, 7), np.float32), "B": np.ones((7, 3), np.float32)}, variant="rows", tunables=tunables)


def test_refusals_are_typed_errors_naming_the_inputs(kernel):
    """A K mismatch is a SelectionError whose clause shows both shapes; batches that do not broadcast
    a ShapeError naming A and B; rank 0 and rank 9 RankErrors naming the input; dtypes outside the
    constraint, or two dtypes, DTypeErrors; onnxruntime refuses the same calls."""
    f32 = np.float32
    with pytest.raises(
        wk.SelectionError, match=r"'kOk' is false \(with kOk=False, shapes.A=\[3, 4\], ranks.B=2, shapes.B=\[5, 6\]"
    ):
        kernel({"A": np.ones((3, 4), f32), "B": np.ones((5, 6), f32)})
    with pytest.raises(Exception, match="MatMul dimension mismatch"):
        ort_matmul(np.ones((3, 4), f32), np.ones((5, 6), f32))
    with pytest.raises(wk.SelectionError, match=r"shapes.A=\[4\], ranks.B=1, shapes.B=\[5\]"):
        kernel({"A": np.ones(4, f32), "B": np.ones(5, f32)})
    with pytest.raises(errors.ShapeError, match="broadcast together") as shape:
        kernel({"A": np.ones((2, 3, 4), f32), "B": np.ones((3, 4, 5), f32)})
    assert shape.value.argument == "A, B"
    with pytest.raises(Exception, match="cannot broadcast"):
        ort_matmul(np.ones((2, 3, 4), f32), np.ones((3, 4, 5), f32))
    for a, b, name in ((np.float32(2), np.ones(3, f32), "A"), (np.ones(3, f32), np.float32(2), "B"),
                       (np.ones((1,) * 9, f32), np.ones((1, 1), f32), "A")):  # fmt: skip
        with pytest.raises(errors.RankError) as rank:
            kernel({"A": a, "B": b})
        assert rank.value.argument == name
    with pytest.raises(errors.DTypeError):
        kernel({"A": np.ones((2, 2), f32), "B": np.ones((2, 2), np.float16)})
    with pytest.raises(errors.DTypeError):
        kernel({"A": np.ones((2, 2), np.int32), "B": np.ones((2, 2), np.int32)})
    with pytest.raises(errors.UnknownInputError):
        kernel({"A": np.ones((2, 2), f32), "B": np.ones((2, 2), f32)}, attrs={"transA": 1})


@pytest.fixture(scope="module")
def hypothesis_api():
    return pytest.importorskip("hypothesis")


def test_random_broadcastable_shapes(kernel, hypothesis_api):
    """Random ranks 1 to 5 on either side, batch sizes 1 or the other side's, small M, K, N (0
    included): both variants agree with np.matmul within the bound."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    @st.composite
    def shapes(draw):
        ra, rb = draw(st.integers(1, 5)), draw(st.integers(1, 5))
        m, k, n = draw(st.integers(0, 5)), draw(st.integers(0, 6)), draw(st.integers(0, 5))
        nb = max(ra, rb, 2) - 2
        full = [draw(st.integers(1, 3)) for _ in range(nb)]
        ones = lambda r: [d if draw(st.booleans()) else 1 for d in full[nb - max(r - 2, 0) :]]  # noqa: E731
        a = (ones(ra) + [m, k]) if ra >= 2 else [k]
        b = (ones(rb) + [k, n]) if rb >= 2 else [k]
        return tuple(a), tuple(b), draw(st.sampled_from(VARIANTS)), draw(st.integers(0, 2**32 - 1))

    @settings(max_examples=25, deadline=None, derandomize=True)
    @given(shapes())
    def run(example):
        a_shape, b_shape, variant, seed = example
        rng = np.random.default_rng(seed)
        a = rng.standard_normal(a_shape).astype(np.float32)
        b = rng.standard_normal(b_shape).astype(np.float32)
        call(kernel, a, b, variant=variant)

    run()


if __name__ == "__main__":
    write_tolerances()


# (A, B, dtype, tunables): the register prefetch (PREFETCH) on and off on K below BK (7: one partial
# step), BK + 1 (17: the second step one k deep), both in float16, K off BK (45 over BK 4), batch
# broadcast, and a block shape whose loads do not split evenly over its invocations (float32). Each
# case's PREFETCH off shader is one test.json compiles anyway.
PREFETCH_CALLS = [
    ((2, 77, 7), (7, 70), np.float16, None),
    ((77, 17), (2, 17, 45), np.float16, None),
    ((2, 37, 45), (1, 45, 70), np.float32, {"BM": 8, "BN": 12, "BK": 4, "TM": 1, "TN": 4}),
]


@pytest.mark.parametrize(("a_shape", "b_shape", "dtype", "tunables"), PREFETCH_CALLS)
def test_blocked_prefetch_on_and_off(kernel, rng, need_dtype, a_shape, b_shape, dtype, tunables):
    """PREFETCH loads the next step's elements into registers while the current step computes: the
    same sums in the same order, so the same bits as without it, both within the bound of float64's."""
    need_dtype(dtype)
    a = rng.standard_normal(a_shape).astype(dtype)
    b = rng.standard_normal(b_shape).astype(dtype)
    # call checks each against the float64 reference within error_bound
    got = {p: call(kernel, a, b, variant="blocked", tunables={**(tunables or {}), "PREFETCH": p}) for p in (False, True)}
    assert got[True].tobytes() == got[False].tobytes()
