"""tests/packages/ai.onnx.Gemm: ONNX Gemm (ai.onnx, opset 13), written from the format documents
alone and run through load_kernel() with no engine change.

Semantics (Gemm-13): ``Y = alpha * A' @ B' + beta * C`` with ``A' = A.T if transA else A`` (A of
shape (M, K), or (K, M) with transA), ``B' = B.T if transB else B`` ((K, N), or (N, K) with
transB), C optional and unidirectionally broadcastable to (M, N) ((M, N), (1, N), (N,), (M, 1),
(1, 1), (1,) or rank 0). Attributes alpha, beta (floats, default 1.0), transA, transB (ints,
default 0). float32 and float16, the K products summed in f32 and the result rounded once to the
data type. Where ONNX's text leaves a choice, the package does what onnxruntime's CPU kernel
(1.32) does, checked below: a nonzero transA/transB (2, -1) transposes; beta = 0 ignores C, so a
NaN or infinity in C does not reach Y (the formula would give NaN); K = 0 gives beta * C, or zeros
without C. References: the ONNX operator documentation (Gemm-13) and onnxruntime's CPU Gemm.

Judged against a float64 NumPy reference written from the definition and against onnxruntime's
CPU kernel (a one-node opset-13 model), every variant, both dtypes. Tolerances are worst-case
bounds per element (Higham, "Accuracy and Stability of Numerical Algorithms", 3.1: a K-term f32
dot product in any order is within gamma_K * sum |a_k| |b_k|, gamma_K = K u / (1 - K u), u = 2^-24),
scaled by |alpha|, plus the f32 rounding of ``alpha * acc + beta * c`` and, for float16, one f16
ulp (WGSL may round the conversion either way). test.json's expected values come from
``expect_reference``: ``webgpu-kernels expect tests/packages/ai.onnx.Gemm --reference
tests/test_gemm_package.py:expect_reference``.
"""

from __future__ import annotations

import dataclasses
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

PACKAGE_NAME = "ai.onnx.Gemm"
PACKAGE = PACKAGES_DIR / PACKAGE_NAME
VARIANTS = ["rows_c", "rows", "blocked_c", "blocked", "tiled_c", "tiled", "simple_c", "simple", "blocked_splitk_c",
            "blocked_splitk"]  # fmt: skip
MAX_ROWS = 8  # the manifest's default: rows takes M <= MAX_ROWS
U = 2.0**-24  # f32 unit roundoff


# --- reference (also `webgpu-kernels expect`'s) ------------------------------------------------------


def gemm(a, b, c=None, alpha: float = 1.0, beta: float = 1.0, trans_a: int = 0, trans_b: int = 0) -> np.ndarray:
    """Gemm-13 in float64, with onnxruntime's choices: nonzero trans flags transpose, beta = 0
    ignores C. ValueError where K differs or C does not broadcast one way to (M, N)."""
    a = np.asarray(a, np.float64)
    b = np.asarray(b, np.float64)
    a = a.T if trans_a else a
    b = b.T if trans_b else b
    if a.ndim != 2 or b.ndim != 2 or a.shape[1] != b.shape[0]:
        raise ValueError(f"A' {a.shape} and B' {b.shape} do not multiply")
    with np.errstate(invalid="ignore", over="ignore"):
        y = alpha * (a @ b) if a.shape[1] else np.zeros((a.shape[0], b.shape[1]))
        if c is not None:
            c = np.asarray(c, np.float64)
            if np.broadcast_shapes(c.shape, y.shape) != y.shape:
                raise ValueError(f"C {c.shape} does not broadcast to {y.shape}")
            if beta != 0:
                y = y + beta * c
    return y


def expect_reference(inputs: dict, attrs: dict) -> dict:
    """For `webgpu-kernels expect`: inputs as `test` builds them, attributes over the defaults."""
    return {
        "Y": gemm(
            inputs["A"], inputs["B"], inputs.get("C"), attrs["alpha"], attrs["beta"], attrs["transA"], attrs["transB"]
        )
    }


def error_bound(
    a, b, c=None, alpha: float = 1.0, beta: float = 1.0, trans_a: int = 0, trans_b: int = 0, *, float16: bool = False
) -> np.ndarray:
    """Per element of Y, how far an f32-accumulating kernel may be from ``gemm`` (module docstring):
    |alpha| gamma_K sum_k |a_k| |b_k| for the dot product in any order, 2 u (|alpha acc| + |beta c|)
    for the epilogue's product and sum, 2 K 2^-126 for flushed subnormals; for float16 the f32 result's
    conversion, which may round either way: 2^-10 of (|y| + the bound), the |y| part left to the
    relative tolerance (1.5e-3 >= 2^-10 + 2^-11, the stored value's own rounding), and 2^-14 where a
    subnormal result is flushed."""
    a = np.abs(np.asarray(a, np.float64))
    b = np.abs(np.asarray(b, np.float64))
    a = a.T if trans_a else a
    b = b.T if trans_b else b
    k = a.shape[1]
    gamma = k * U / (1 - k * U)
    with np.errstate(invalid="ignore"):
        dot = np.nan_to_num(a @ b, nan=0.0, posinf=0.0) if k else np.zeros((a.shape[0], b.shape[1]))
    size = abs(alpha) * dot
    if c is not None and beta != 0:
        size = size + abs(beta) * np.nan_to_num(np.abs(np.asarray(c, np.float64)), nan=0.0, posinf=0.0)
    bound = abs(alpha) * gamma * dot + 2 * U * size + 2 * k * 2.0**-126
    if float16:
        bound = bound * (1 + 2.0**-10) + 2.0**-14
    return bound


def write_tolerances() -> None:
    """Gives each test.json case whose error bound (``error_bound``, its largest element) exceeds the
    file's tolerance its own ``atol`` (the bound plus the rounding of the stored value), for a GPU
    that sums in another order than lavapipe; then refreshes metadata.json. ``python
    tests/test_gemm_package.py`` after ``webgpu-kernels expect``."""
    from webgpu_kernels.digests import write_metadata

    kernel = wk.load_kernel(PACKAGE, verify_digests=False)
    path = PACKAGE / "test.json"
    doc = json.loads(path.read_text("utf-8"))
    defaults = {"alpha": 1.0, "beta": 1.0, "transA": 0, "transB": 0}
    for case in doc["cases"]:
        case.pop("tolerances", None)
        if "expected" not in case:
            continue
        inputs = wk.test_case_inputs(kernel, case["name"])
        attrs = {**defaults, **case.get("attrs", {})}
        f16 = inputs["A"].dtype == np.float16
        bound = error_bound(
            inputs["A"],
            inputs["B"],
            inputs.get("C"),
            attrs["alpha"],
            attrs["beta"],
            attrs["transA"],
            attrs["transB"],
            float16=f16,
        )
        dtype = "float16" if f16 else "float32"
        file_atol = doc["tolerances"][dtype]["atol"]
        worst = float(bound.max(initial=0.0))
        if worst > file_atol:
            case["tolerances"] = {dtype: {"atol": float(f"{worst * 1.01:.3g}")}}
    path.write_text(json.dumps(doc, indent=2) + "\n", "utf-8")
    write_metadata(PACKAGE)


@functools.lru_cache(maxsize=None)
def ort_session(c_rank: int | None, float16: bool, alpha: float, beta: float, trans_a: int, trans_b: int):
    """A one-node Gemm-13 model on onnxruntime's CPU provider (symbolic dimensions); C of rank
    ``c_rank``, or none."""
    pytest.importorskip("onnxruntime")
    pytest.importorskip("onnx")
    from onnx import TensorProto, helper

    from references import one_node_session, symbolic_tensor

    kind = TensorProto.FLOAT16 if float16 else TensorProto.FLOAT
    inputs = [symbolic_tensor("A", kind, 2), symbolic_tensor("B", kind, 2)]
    if c_rank is not None:
        inputs.append(symbolic_tensor("C", kind, c_rank))
    node = helper.make_node(
        "Gemm", [i.name for i in inputs], ["Y"], alpha=alpha, beta=beta, transA=trans_a, transB=trans_b
    )
    return one_node_session(node, inputs, [symbolic_tensor("Y", kind, 2)], 13)


def ort_gemm(a, b, c=None, alpha=1.0, beta=1.0, trans_a=0, trans_b=0) -> np.ndarray:
    session = ort_session(None if c is None else c.ndim, a.dtype == np.float16, alpha, beta, trans_a, trans_b)
    feed = {"A": a, "B": b, **({} if c is None else {"C": c})}
    return session.run(None, feed)[0]


@pytest.fixture(scope="module")
def kernel() -> wk.Kernel:
    return wk.load_kernel(PACKAGE)


def attrs_of(alpha=1.0, beta=1.0, trans_a=0, trans_b=0) -> dict:
    return {"alpha": alpha, "beta": beta, "transA": trans_a, "transB": trans_b}




def call(kernel: wk.Kernel, a, b, c=None, *, attrs: dict, **options) -> np.ndarray:
    """One call, its output poisoned first (an unwritten element reads NaN), the inputs untouched,
    checked against the float64 reference within ``error_bound``."""
    inputs = {"A": a, "B": b, **({} if c is None else {"C": c})}
    before = {k: v.copy() for k, v in inputs.items()}
    poison_outputs(kernel, inputs, attrs=attrs, tunables=options.get("tunables"))
    got = kernel(inputs, attrs=attrs, **options)["Y"]
    for k, v in inputs.items():
        assert v.tobytes() == before[k].tobytes(), k
    args = (a, b, c, attrs["alpha"], attrs["beta"], attrs["transA"], attrs["transB"])
    assert got.dtype == a.dtype
    assert_matches_within_bound(
        got,
        gemm(*args),
        error_bound(*args, float16=a.dtype == np.float16),
        a.dtype,
        f"{a.shape} {b.shape} {attrs} {options}",
    )
    return got


def accepting(kernel: wk.Kernel, inputs: dict, attrs: dict) -> list[str]:
    """The variants whose `when` holds for the call (test runs each of them forced)."""
    return [v.variant for v in kernel.explain(inputs, attrs=attrs).verdicts if v.accepted]


def operands(rng, m, k, n, trans_a, trans_b, c_shape, dtype):
    a = rng.standard_normal((k, m) if trans_a else (m, k)).astype(dtype)
    b = rng.standard_normal((n, k) if trans_b else (k, n)).astype(dtype)
    c = None if c_shape is None else np.asarray(rng.standard_normal(c_shape)).astype(dtype)
    return a, b, c


# --- the package ----------------------------------------------------------------------------------


def test_package_files(kernel):
    data = json.loads((PACKAGE / "manifest.json").read_text("utf-8"))
    assert (data["domain"], data["name"], data["sinceVersion"]) == ("ai.onnx", "Gemm", 13)
    assert data["attributes"] == {"alpha": 1.0, "beta": 1.0, "transA": 0, "transB": 0}
    assert [i["role"] for i in data["inputs"]] == ["A", "B", "C"] and [o["role"] for o in data["outputs"]] == ["Y"]
    assert data["typeConstraints"] == {"T": ["float32", "float16"]}
    assert kernel.op_id == PACKAGE_NAME and kernel.variants == VARIANTS
    bench = json.loads((PACKAGE / "bench.json").read_text("utf-8"))
    assert bench["flops"] == "2 * M * N * K"
    shapes = {(tuple(c["inputs"]["A"]["shape"]), tuple(c["inputs"]["B"]["shape"])) for c in bench["cases"]}
    assert {((77, 768), (3072, 768)), ((77, 3072), (768, 3072)), ((257, 1024), (4096, 1024)), ((2, 320), (1280, 320)),
            ((154, 768), (3072, 768)), ((154, 3072), (768, 3072))} <= shapes  # fmt: skip
    assert all(c.get("attrs") == {"transB": 1} for c in bench["cases"])
    # TFLOP/s: 2 M N K of CLIP's fc1
    assert (
        kernel.evaluate(
            "2 * M * N * K", {"A": ((77, 768), "float32"), "B": ((3072, 768), "float32")}, attrs={"transB": 1}
        )
        == 2 * 77 * 3072 * 768
    )


def test_engine_has_no_code_for_it():
    assert_engine_has_no_code_for(PACKAGE_NAME)


def test_validates_and_its_test_json_passes(kernel):
    assert_valid_and_passing(kernel, PACKAGE, VARIANTS)


def test_expected_outputs_are_the_reference(kernel):
    """test.json's stored outputs are this module's float64 reference of the case's inputs, rounded
    once to the output dtype; the cases cover every transpose pair, every C form and both dtypes."""
    from webgpu_kernels.casefile import read_test_file

    attrs = {
        c.name: {"alpha": 1.0, "beta": 1.0, "transA": 0, "transB": 0, **c.attrs}
        for c in read_test_file(kernel.package).cases
    }
    dtypes, trans, c_forms, nan_cases = set(), set(), set(), 0
    for case, inputs, stored in stored_expectations(kernel, "Y", lambda i: i["A"].dtype.name):
        at = attrs[case.name]
        a, b, c = inputs["A"], inputs["B"], inputs.get("C")
        want = gemm(a, b, c, at["alpha"], at["beta"], at["transA"], at["transB"]).astype(a.dtype).astype(np.float64)
        np.testing.assert_array_equal(stored, want, err_msg=case.name)
        dtypes.add(a.dtype.name)
        trans.add((at["transA"] != 0, at["transB"] != 0))
        c_forms.add(None if c is None else c.shape)
        nan_cases += bool(np.isnan(stored).any())
    assert dtypes == {"float32", "float16"} and len(trans) == 4 and nan_cases == 1
    m_n = {(5, 1), (1, 1), (1,), (), (1, 7), (7,), (9,), (6, 5)}
    assert None in c_forms and m_n <= c_forms, c_forms


# --- results -------------------------------------------------------------------------------------

# (M, K, N, transA, transB, C shape): nn.Linear's form, every transpose pair, every C form, K = 1,
# M = 1, N = 1, sizes off the tile, C absent (both transposed without C: test.json's noC-transAB-*, a
# float16 blocked shader less to compile)
CALLS = [
    (7, 5, 9, 0, 1, (9,)),
    (6, 11, 5, 0, 0, (6, 5)),
    (5, 7, 9, 1, 0, (5, 1)),
    (9, 4, 6, 1, 1, (1, 1)),
    (4, 3, 7, 0, 0, (1, 7)),
    (4, 3, 7, 1, 0, (1,)),
    (4, 3, 7, 0, 1, ()),
    (8, 6, 10, 0, 0, None),
    (3, 13, 2, 0, 0, None),
    (6, 1, 5, 0, 0, (5,)),
    (1, 9, 7, 0, 1, (7,)),
    (7, 9, 1, 1, 0, (7, 1)),
    (19, 33, 17, 0, 1, (17,)),
]
# float16 on nn.Linear's form and on C absent: each variant (and its C twin) once in float16. The
# other calls' branches (transposes, C forms, sizes) are float32's; float16 changes only the loads'
# and the store's conversions, and test.json runs each of those calls' float16 shaders
F16_CALLS = [CALLS[0], CALLS[7]]


@pytest.mark.parametrize(
    ("m", "k", "n", "trans_a", "trans_b", "c_shape", "dtype"),
    [(*call, np.float32) for call in CALLS] + [(*call, np.float16) for call in F16_CALLS],
)
def test_every_variant_against_the_reference_and_onnxruntime(kernel, rng, m, k, n, trans_a, trans_b, c_shape, dtype):
    a, b, c = operands(rng, m, k, n, trans_a, trans_b, c_shape, dtype)
    attrs = attrs_of(0.75, -1.5, trans_a, trans_b) if m % 2 else attrs_of(trans_a=trans_a, trans_b=trans_b)
    inputs = {"A": a, "B": b, **({} if c is None else {"C": c})}
    variants = accepting(kernel, inputs, attrs)
    few = ["rows"] if m <= MAX_ROWS else []
    assert variants == [v + "_c" if c is not None else v for v in [*few, "blocked", "tiled", "simple"]]
    assert kernel.explain(inputs, attrs=attrs).chosen == variants[0]
    args = (a, b, c, attrs["alpha"], attrs["beta"], trans_a, trans_b)
    want = ort_gemm(*args)
    # onnxruntime rounds its float16 result to nearest after an f32 sum: its own bound and ours
    both = 2 * error_bound(*args, float16=dtype == np.float16)
    for variant in variants:
        got = call(kernel, a, b, c, attrs=attrs, variant=variant)
        assert_matches_within_bound(got, want, both, dtype, f"onnxruntime: {variant} {a.shape} {b.shape} {attrs}")


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_beta_zero_ignores_c_and_nan_propagates_as_onnxruntime(kernel, rng, dtype):
    """beta = 0: a NaN or infinity in C does not reach Y (onnxruntime's CPU kernel skips C; the
    formula beta * C would give NaN). beta = 1: NaN in C, or in a row of A, is NaN in Y there only."""
    a, b, _ = operands(rng, 3, 4, 5, 0, 0, None, dtype)
    c = np.array([np.nan, 1, np.inf, -np.inf, 2], dtype)
    for beta in (0.0, 1.0):
        want = ort_gemm(a, b, c, 1.0, beta)
        assert np.isnan(want).any() == (beta != 0)
        for variant in ("rows_c", "blocked_c", "tiled_c", "simple_c"):
            got = call(kernel, a, b, c, attrs=attrs_of(beta=beta), variant=variant)
            assert_matches_within_bound(
                got,
                want,
                2 * error_bound(a, b, c, 1.0, beta, float16=dtype == np.float16),
                dtype,
                f"beta {beta} {variant}",
            )
    a[1, 2] = np.nan
    want = ort_gemm(a, b, None)
    assert np.isnan(want[1]).all() and not np.isnan(want[[0, 2]]).any()
    for variant in ("rows", "blocked", "tiled", "simple"):
        assert_matches_within_bound(call(kernel, a, b, attrs=attrs_of(), variant=variant), want, 2 * error_bound(a, b), dtype, variant)


def test_nonzero_trans_flags_transpose_as_onnxruntime(kernel, rng):
    a, b, c = operands(rng, 4, 3, 5, 1, 1, (5,), np.float32)
    for flag in (2, -1):
        want = ort_gemm(a, b, c, 1.0, 1.0, flag, flag)
        for variant in ("rows_c", "blocked_c", "tiled_c", "simple_c"):
            got = call(kernel, a, b, c, attrs=attrs_of(trans_a=flag, trans_b=flag), variant=variant)
            assert_matches_within_bound(got, want, 2 * error_bound(a, b, c, 1.0, 1.0, 1, 1), np.float32, f"trans {flag} {variant}")


@pytest.mark.parametrize(
    ("m", "k", "n", "c_shape"), [(0, 5, 4, (4,)), (3, 5, 0, (1,)), (3, 0, 4, (3, 4)), (3, 0, 4, None), (0, 0, 0, None)]
)
def test_empty_operands(kernel, rng, m, k, n, c_shape):
    """An empty M or N gives an empty Y (nothing dispatched); K = 0 gives beta * C, or zeros, as
    onnxruntime does."""
    a, b, c = operands(rng, m, k, n, 0, 0, c_shape, np.float32)
    attrs = attrs_of(beta=2.0)
    want = gemm(a, b, c, 1.0, 2.0).astype(np.float32)  # beta * C exactly: 2 * C is exact in float32
    assert want.shape == (m, n)
    inputs = {"A": a, "B": b, **({} if c is None else {"C": c})}
    for variant in accepting(kernel, inputs, attrs):
        got = call(kernel, a, b, c, attrs=attrs, variant=variant)
        np.testing.assert_array_equal(got, want)
    ort = ort_gemm(a, b, c, 1.0, 2.0)
    if not np.array_equal(ort, want):
        skip_for_older_onnxruntime("gives C for K = 0, not beta * C")
    np.testing.assert_array_equal(ort, want)


@pytest.mark.parametrize(("tunables", "variant"), [({"TILE": 1}, "tiled_c"), ({"TILE": 32}, "tiled_c"),
                                                   ({"WORKGROUP_SIZE": 1}, "simple_c"), ({"WORKGROUP_SIZE": 7}, "simple_c")])  # fmt: skip
def test_tunables(kernel, rng, tunables, variant):
    """Any TILE whose square fits the device's workgroup limits; any WORKGROUP_SIZE."""
    a, b, c = operands(rng, 35, 37, 33, 0, 1, (33,), np.float32)
    call(kernel, a, b, c, attrs=attrs_of(trans_b=1), variant=variant, tunables=tunables)


def test_bench_cases_choose_the_register_blocked_variants(kernel):
    """Every bench.json case of more than MAX_ROWS rows (CLIP and ViT-L/14 MLP linears) runs
    `blocked_c` by default (`blocked` where C is absent), but those of few blocks over a long K
    (SPLIT_K_BENCH), which run `blocked_splitk_c`; SD 1.5's time embedding (2 rows) runs `rows_c`;
    both dtypes, with the tunables' defaults."""
    bench = json.loads((PACKAGE / "bench.json").read_text("utf-8"))
    for case in bench["cases"]:
        for dtype in case["types"]["T"]:
            inputs = {role: (tuple(spec["shape"]), dtype) for role, spec in case["inputs"].items()}
            explained = kernel.explain(inputs, attrs=case.get("attrs"))
            want = "blocked_splitk" if case["name"] in SPLIT_K_BENCH else "blocked"
            want = ("rows" if inputs["A"][0][0] <= MAX_ROWS else want) + ("_c" if "C" in inputs else "")
            assert explained.chosen == want and explained.refused is None, (case["name"], dtype, str(explained))


# (M, K, N, transA, transB, C shape, dtype, tunables): nn.Linear's form on blocks partial in M, N and
# K (77, 70, 45: K off BK), transA (A' loaded along m) with M = 2, both transposed without C, M = N =
# 1, and two other block shapes, one whose loads do not split evenly over its invocations (BN 12: 24
# invocations, 32 elements of A' per step)
SMALL_BLOCK = {"BM": 8, "BN": 12, "BK": 4, "TM": 1, "TN": 4}
BLOCKED_CALLS = [
    (77, 45, 70, 0, 1, (70,), np.float32, None),
    (77, 45, 70, 0, 1, (70,), np.float16, None),
    (2, 40, 77, 1, 0, (2, 1), np.float32, None),
    (2, 40, 77, 1, 0, (2, 1), np.float16, None),
    (37, 70, 45, 1, 1, None, np.float32, None),
    (1, 37, 1, 0, 0, (1,), np.float32, None),
    (70, 45, 77, 0, 1, (77,), np.float32, SMALL_BLOCK),
    (70, 45, 77, 1, 1, (70, 77), np.float32, {"BM": 32, "BN": 32, "BK": 8, "TM": 2, "TN": 4}),
]


@pytest.mark.parametrize(("m", "k", "n", "trans_a", "trans_b", "c_shape", "dtype", "tunables"), BLOCKED_CALLS)
def test_blocked_edges_against_the_reference_and_onnxruntime(
    kernel, rng, need_dtype, m, k, n, trans_a, trans_b, c_shape, dtype, tunables
):
    """The register-blocked variants on partial blocks (masked loads and stores), each load mapping
    (transA, transB), tiny M and N, other block shapes; f16 summed in f32 (within the f32 bound)."""
    need_dtype(dtype)
    a, b, c = operands(rng, m, k, n, trans_a, trans_b, c_shape, dtype)
    attrs = attrs_of(0.75, -1.5, trans_a, trans_b)
    variant = "blocked" if c is None else "blocked_c"
    inputs = {"A": a, "B": b, **({} if c is None else {"C": c})}
    rows = "rows" if c is None else "rows_c"
    assert kernel.explain(inputs, attrs=attrs, tunables=tunables).chosen == (rows if m <= MAX_ROWS else variant)
    got = call(kernel, a, b, c, attrs=attrs, variant=variant, tunables=tunables)
    args = (a, b, c, attrs["alpha"], attrs["beta"], trans_a, trans_b)
    both = 2 * error_bound(*args, float16=dtype == np.float16)
    assert_matches_within_bound(got, ort_gemm(*args), both, dtype, f"onnxruntime: {a.shape} {b.shape} {attrs} {tunables}")


def test_blocked_refuses_block_shapes_it_cannot_run(kernel):
    """TN and BK multiples of 4 (vec4 rows in workgroup memory), BM / TM and BN / TN whole, the
    invocations and workgroup storage within the device's limits; the tiled variant takes the call."""
    a, b = np.ones((MAX_ROWS + 1, 7), np.float32), np.ones((7, 3), np.float32)
    for tunables, clause in (({"TN": 2}, "blockShapeOk=False"), ({"BK": 6}, "blockShapeOk=False"),
                             ({"BM": 60, "TM": 8}, "blockShapeOk=False"), ({"BM": 1024, "TM": 1}, "blockSizeOk=False"),
                             ({"BK": 1024}, "blockStorageOk=False")):  # fmt: skip
        explained = kernel.explain({"A": a, "B": b}, tunables=tunables)
        assert explained.chosen == "tiled" and clause in str(explained), (tunables, str(explained))
        with pytest.raises(errors.VariantRejectedError, match=clause):
            kernel({"A": a, "B": b}, variant="blocked", tunables=tunables)


# (M, K, N, transA, transB, C shape, dtype): the rows variants at M = 1, 2 and MAX_ROWS, every
# transpose pair (B read along k under transB, along n otherwise), every C form and none, K and N of
# 1, 37, 45, 70 (off every column block and lane count) and a long K (1,000: 31.25 trips of 32 lanes)
ROWS_CALLS = [
    (1, 37, 45, 0, 1, (45,), np.float32),
    (2, 70, 37, 0, 1, (2, 37), np.float16),
    (MAX_ROWS, 45, 70, 1, 0, (MAX_ROWS, 1), np.float32),
    (MAX_ROWS, 45, 70, 1, 1, (), np.float16),
    (2, 1, 70, 0, 0, (1,), np.float32),
    (MAX_ROWS, 70, 1, 0, 0, None, np.float32),
    (1, 1, 1, 1, 1, None, np.float16),
    (2, 45, 37, 1, 0, (1, 37), np.float32),
    (3, 37, 70, 0, 0, (3, 70), np.float16),
    (MAX_ROWS, 1000, 45, 0, 1, (45,), np.float32),
]


@pytest.mark.parametrize(("m", "k", "n", "trans_a", "trans_b", "c_shape", "dtype"), ROWS_CALLS)
def test_rows_against_the_reference_and_onnxruntime(kernel, rng, need_dtype, m, k, n, trans_a, trans_b, c_shape, dtype):
    """The rows variants are chosen for M <= MAX_ROWS and agree with the float64 reference and with
    onnxruntime (f16 summed in f32: within the f32 bound of any order, the tree's included)."""
    need_dtype(dtype)
    a, b, c = operands(rng, m, k, n, trans_a, trans_b, c_shape, dtype)
    attrs = attrs_of(0.75, -1.5, trans_a, trans_b) if m % 2 else attrs_of(trans_a=trans_a, trans_b=trans_b)
    variant = "rows" if c is None else "rows_c"
    inputs = {"A": a, "B": b, **({} if c is None else {"C": c})}
    assert kernel.explain(inputs, attrs=attrs).chosen == variant
    got = call(kernel, a, b, c, attrs=attrs)
    args = (a, b, c, attrs["alpha"], attrs["beta"], trans_a, trans_b)
    both = 2 * error_bound(*args, float16=dtype == np.float16)
    assert_matches_within_bound(got, ort_gemm(*args), both, dtype, f"onnxruntime: {a.shape} {b.shape} {attrs}")


@pytest.mark.parametrize(("trans_a", "trans_b"), [(0, 1), (1, 0)])
def test_rows_stop_at_max_rows(kernel, rng, trans_a, trans_b):
    """One row more than MAX_ROWS goes to the blocked variants (rows refuses it: rowsFew=False), as
    does M above a MAX_ROWS tunable; a forced rows is a VariantRejectedError."""
    a, b, c = operands(rng, MAX_ROWS + 1, 45, 37, trans_a, trans_b, (37,), np.float32)
    attrs = attrs_of(0.75, -1.5, trans_a, trans_b)
    explained = kernel.explain({"A": a, "B": b, "C": c}, attrs=attrs)
    assert explained.chosen == "blocked_c" and "rowsFew=False" in str(explained)
    call(kernel, a, b, c, attrs=attrs)
    with pytest.raises(errors.VariantRejectedError, match="rowsFew=False"):
        kernel({"A": a, "B": b, "C": c}, attrs=attrs, variant="rows_c")
    few = {"A": a[:3] if not trans_a else a[:, :3], "B": b}
    assert kernel.explain(few, attrs=attrs).chosen == "rows"
    assert kernel.explain(few, attrs=attrs, tunables={"MAX_ROWS": 2}).chosen == "blocked"
    if trans_b:  # M = MAX_ROWS at a tunable MAX_ROWS: a shader of its own, one mapping of B is enough
        call(kernel, few["A"], b, attrs=attrs, tunables={"MAX_ROWS": 3})


# (tunables, M, K, transB): MAX_ROWS 32 at M = 32 with one lane over k (no tree: the tree of 32 rows is
# the costliest shader to compile on lavapipe, and the trees are run by the other cases); the largest
# workgroup whose partial sums fit lavapipe's 32 KiB, all 1,024 lanes on one column, K = 700 (past
# 512: the tree's every level adds sums of some k, 512 included), one k a trip: no lane has a second
# k, so a larger ROWS_UNROLL would only compile a loop that never runs (ROWS_CALLS' K of 1,000 runs
# the default 4). Columns per workgroup not dividing N: ROWS_CALLS' N of 37, 45 and 70.
ROWS_TUNABLES = [
    ({"MAX_ROWS": 32, "ROWS_WORKGROUP": 32, "ROWS_COLS_N": 32, "ROWS_UNROLL": 1}, 32, 70, 0),
    ({"ROWS_WORKGROUP": 1024, "ROWS_COLS_K": 1, "ROWS_UNROLL": 1}, 8, 700, 1),
]


@pytest.mark.parametrize(("tunables", "m", "k", "trans_b"), ROWS_TUNABLES)
def test_rows_tunables(kernel, rng, tunables, m, k, trans_b):
    a, b, c = operands(rng, m, k, 45, 0, trans_b, (45,), np.float32)
    attrs = attrs_of(0.75, -1.5, 0, trans_b)
    assert kernel.explain({"A": a, "B": b, "C": c}, attrs=attrs, tunables=tunables).chosen == "rows_c"
    call(kernel, a, b, c, attrs=attrs, tunables=tunables)


def test_rows_refuses_shapes_it_cannot_run(kernel):
    """COLS dividing ROWS_WORKGROUP with a power-of-two quotient (the tree), MAX_ROWS 1 to 32
    (registers), ROWS_UNROLL 1 to 16, the invocations and 4 x MAX_ROWS x ROWS_WORKGROUP bytes of workgroup storage within
    the device's limits; the blocked variant takes the call."""
    a, b = np.ones((2, 7), np.float32), np.ones((7, 3), np.float32)
    limits = wk.get_device().limits
    too_big = 2 * max(limits["max-compute-invocations-per-workgroup"], limits["max-compute-workgroup-size-x"])
    for tunables, clause in (({"ROWS_COLS_N": 3}, "rowsShapeOk=False"), ({"ROWS_WORKGROUP": 96, "ROWS_COLS_N": 32}, "rowsShapeOk=False"),
                             ({"MAX_ROWS": 33}, "rowsShapeOk=False"), ({"ROWS_UNROLL": 0}, "rowsShapeOk=False"),
                             ({"ROWS_UNROLL": 17}, "rowsShapeOk=False"), ({"ROWS_COLS_N": 0}, "rowsShapeOk=False"),
                             ({"MAX_ROWS": 32, "ROWS_WORKGROUP": 1024}, "rowsStorageOk=False"),
                             ({"ROWS_WORKGROUP": too_big}, "rowsSizeOk=False")):  # fmt: skip
        explained = kernel.explain({"A": a, "B": b}, tunables=tunables)
        assert explained.chosen == "blocked" and clause in str(explained), (tunables, str(explained))
        with pytest.raises(errors.VariantRejectedError, match=clause):
            kernel({"A": a, "B": b}, variant="rows", tunables=tunables)


def test_float16_overflow_is_infinite_on_lavapipe(kernel):
    """A float16 result past 65504 (200 * 200 * 2 = 80,000) is the infinity of its sign on lavapipe
    and in onnxruntime; another device's conversion may differ (the manifest's description says so)."""
    adapter = wk.get_device().adapter
    if "llvmpipe" not in f"{adapter.name} {adapter.vendor}".lower():
        pytest.skip("the value of an out-of-range f32 -> f16 conversion is the device's")
    a = np.full((2, 2), 200, np.float16)
    a[1] *= -1
    b = np.full((2, 1), 200, np.float16)
    want = ort_gemm(a, b)
    assert want.ravel().tolist() == [np.inf, -np.inf]
    for variant in ("rows", "blocked", "tiled", "simple"):
        assert kernel({"A": a, "B": b}, variant=variant)["Y"].ravel().tolist() == [np.inf, -np.inf], variant


def test_loop_bounds_for_llvmpipe(kernel):
    """llvmpipe stops an invocation's loops after 65,535 iterations (docs/format.md): the simple
    variants take K <= 65,535, the tiled ones ceil(K / TILE) <= 65,535 steps (their inner loop over
    a tile has a constant count, which llvmpipe unrolls), the blocked ones ceil(K / BK) <= 65,535 (the
    template unrolls their other loops). Past all three only split-K (its own bound:
    test_split_k_loop_bounds_for_llvmpipe) takes the call, which it takes anyway for K >= 1,024 (one
    block): the other variants' bounds are read from their verdicts. (MAX_ROWS + 1 rows: the rows
    variants, bounded below, take fewer.)"""

    def explain(k, **tunables):
        inputs = {"A": ((MAX_ROWS + 1, k), "float32"), "B": ((k, 1), "float32")}
        explained = kernel.explain(inputs, tunables=tunables or None)
        assert explained.chosen == "blocked_splitk", str(explained)
        # the variant the call would run without split-K
        other = next((v.variant for v in explained.verdicts if v.accepted and "splitk" not in v.variant), None)
        return dataclasses.replace(explained, chosen=other)

    assert explain(65535).chosen == "blocked" and "simple (priority 0): accepted" in str(explain(65535))
    assert explain(65536).chosen == "blocked" and "simpleLoopOk=False" in str(explain(65536))
    assert explain(65536, BK=4, TILE=1).chosen == "blocked" and explain(4 * 65535 + 1, BK=4).chosen == "tiled"
    refused = str(explain(4 * 65535 + 1, TILE=1, BK=4))
    assert explain(4 * 65535 + 1, TILE=1, BK=4).chosen is None and "blockedLoopOk=False" in refused
    assert "tiledLoopOk=False" in refused and "simpleLoopOk=False" in refused
    assert explain(16 * 65535).chosen == "blocked" and explain(16 * 65535 + 1).chosen is None
    with pytest.raises(errors.VariantRejectedError, match="blockedLoopOk=False"):
        k = 4 * 65535 + 1
        kernel(
            {"A": np.ones((MAX_ROWS + 1, k), np.float32), "B": np.ones((k, 1), np.float32)},
            variant="blocked",
            tunables={"TILE": 1, "BK": 4},
        )
    # at the bounds the sums are whole on lavapipe: K ones (blocked: a block of one invocation)
    one = {"BM": 1, "TM": 1, "BN": 4, "TN": 4, "BK": 4}
    for k, variant, tunables in ((65535, "simple", {}), (4 * 65535, "tiled", {"TILE": 4}), (4 * 65535, "blocked", one)):
        y = kernel(
            {"A": np.ones((1, k), np.float32), "B": np.ones((k, 1), np.float32)},
            variant=variant,
            tunables=tunables,
        )["Y"]
        assert y.tolist() == [[float(k)]], (variant, k)


def test_rows_loop_bounds_for_llvmpipe(kernel):
    """The rows variants' one loop runs ceil(K / KS) trips, KS = ROWS_WORKGROUP / COLS lanes over k
    (16 by default, 32 under transB): rows takes K up to 65,535 KS, and past it (blocked's bound too,
    at BK = 16 and KS = 16) only split-K does (one block of Y over a long K). At the bound the sums are
    whole on lavapipe (KS = 2), with one k a trip (ROWS_UNROLL 1: a lone loop of 65,535 trips) and with
    the default four."""

    def explain(k, trans_b=0, **tunables):
        b = (1, k) if trans_b else (k, 1)
        return kernel.explain(
            {"A": ((1, k), "float32"), "B": (b, "float32")}, attrs={"transB": trans_b}, tunables=tunables or None
        )

    assert explain(16 * 65535).chosen == "rows" and explain(32 * 65535, 1).chosen == "rows"
    past = explain(32 * 65535 + 1, 1)
    assert past.chosen == "blocked_splitk" and "rowsLoopOk=False" in str(past), str(past)
    past = explain(16 * 65535 + 1)
    assert past.chosen == "blocked_splitk" and "rowsLoopOk=False" in str(past) and "blockedLoopOk=False" in str(past)
    assert explain(2 * 65535 + 1, ROWS_WORKGROUP=2, ROWS_COLS_N=1).chosen == "blocked_splitk"
    k = 2 * 65535
    for trans_b, tunables in ((0, {"ROWS_WORKGROUP": 2, "ROWS_COLS_N": 1, "ROWS_UNROLL": 1}),
                              (1, {"ROWS_WORKGROUP": 2, "ROWS_COLS_K": 1, "ROWS_UNROLL": 1}),
                              (1, {"ROWS_WORKGROUP": 2, "ROWS_COLS_K": 1})):  # fmt: skip
        assert explain(k, trans_b, **tunables).chosen == "rows"
        b = np.ones((1, k) if trans_b else (k, 1), np.float32)
        y = kernel({"A": np.ones((1, k), np.float32), "B": b}, attrs={"transB": trans_b}, tunables=tunables)["Y"]
        assert y.tolist() == [[float(k)]], trans_b


def test_invalid_attributes_and_inputs_are_typed_errors(kernel):
    """A non-integer transA/transB is an AttributeValueError naming it (as is a non-number alpha);
    shapes that do not multiply, or a C that does not broadcast one way to (M, N), a SelectionError
    naming the clause, as onnxruntime refuses them."""
    a = np.ones((2, 3), np.float32)
    b = np.ones((3, 4), np.float32)
    for name in ("transA", "transB"):
        for bad in (1.5, "1", True, None, [1]):
            with pytest.raises(errors.AttributeValueError, match=f"argument '{name}'") as info:
                kernel({"A": a, "B": b}, attrs={name: bad})
            assert info.value.argument == name
    with pytest.raises(errors.AttributeValueError, match="argument 'alpha'"):
        kernel({"A": a, "B": b}, attrs={"alpha": "2"})
    assert kernel({"A": a, "B": b}, attrs={"transB": 0.0})["Y"].shape == (2, 4)  # an integral float is the int
    with pytest.raises(wk.SelectionError, match="kOk=False") as mismatch:
        kernel({"A": a, "B": b}, attrs={"transB": 1})
    # transB given, read with the shapes: named for these inputs; at its default it is not blamed
    assert str(mismatch.value).startswith("ai.onnx.Gemm: no variant accepts attribute transB=1 for these inputs:")
    with pytest.raises(wk.SelectionError, match="kOk=False") as mismatch:
        kernel({"A": a, "B": np.ones((5, 4), np.float32)})
    assert str(mismatch.value).startswith("ai.onnx.Gemm: no variant can run this call:")
    assert mismatch.value.attributes == ()
    with pytest.raises(Exception, match="Dimension mismatch"):
        ort_gemm(a, b, None, 1.0, 1.0, 0, 1)
    for c_shape in ((3,), (4, 4), (1, 3)):
        c = np.ones(c_shape, np.float32)
        with pytest.raises(wk.SelectionError, match="cOk=False"):
            kernel({"A": a, "B": b, "C": c})
        with pytest.raises(Exception, match="Invalid bias shape"):
            ort_gemm(a, b, c)
    with pytest.raises(errors.RankError) as rank:
        kernel({"A": a, "B": b, "C": np.ones((1, 1, 4), np.float32)})
    assert rank.value.argument == "C"
    with pytest.raises(errors.RankError):
        kernel({"A": a[None], "B": b})
    with pytest.raises(errors.DTypeError):
        kernel({"A": a, "B": b.astype(np.float16)})
    with pytest.raises(errors.UnknownInputError):
        kernel({"A": a, "B": b}, attrs={"trans_a": 1})


# --- split-K (helper-271) ------------------------------------------------------------------------

# bench.json cases of few blocks over a long K, which the split-K variants take: CLIP's text fc2 at
# batch 1 and 2 (24 and 36 blocks, K 3072), ViT-L/14's fc2 (80 blocks, K 4096) and SD 1.5's time
# embedding linear_2 (20 blocks, K 1280)
# sd15-time-emb2 (2 rows, K 1,280, 20 blocks) would take split-K too, but rows takes it first
SPLIT_K_BENCH = {"clip-text-fc2-77x3072x768", "clip-text-fc2-154x3072x768", "vit-l14-fc2-257x4096x1024"}
# The rows variants take M <= MAX_ROWS first (priority 30 above split-K's 25); the split-K tests'
# small shapes turn them off (rowsShapeOk wants MAX_ROWS >= 1) to test split-K's own choice.
NO_ROWS = {"MAX_ROWS": 0}


def split_k(kernel, m, k, n, trans_a=0, trans_b=0, c_shape=None, dtype="float32", tunables=None):
    """The explanation of a call by shapes alone, the rows variants off."""
    inputs = {"A": ((k, m) if trans_a else (m, k), dtype), "B": ((n, k) if trans_b else (k, n), dtype)}
    if c_shape is not None:
        inputs["C"] = (c_shape, dtype)
    return kernel.explain(inputs, attrs=attrs_of(trans_a=trans_a, trans_b=trans_b), tunables={**NO_ROWS, **(tunables or {})})


def test_split_k_is_chosen_for_few_blocks_over_a_long_k(kernel):
    """Chosen above blocked where Y has fewer than 128 blocks of 64 x 64 and K >= 1,024, with
    ceil(steps / ceil(steps / S0)) slices of K, S0 = ceil(256 / blocks) bounded by 8 steps a slice and
    64 slices; blocked still accepts those calls. Many blocks or a short K: blocked."""
    # (M, K, N, blocks, slices, steps a slice): CLIP text fc2, batch 1 and 2; ViT-L/14 fc2; SD 1.5
    # linear_2; the tests' small shapes (one block, 69 steps of 16)
    for m, k, n, blocks, slices, steps in ((77, 3072, 768, 24, 11, 18), (154, 3072, 768, 36, 8, 24),
                                           (257, 4096, 1024, 80, 4, 64), (2, 1280, 1280, 20, 10, 8),
                                           (5, 1100, 7, 1, 8, 9), (1, 1024, 1, 1, 8, 8)):  # fmt: skip
        for c_shape, want in (((n,), "blocked_splitk_c"), (None, "blocked_splitk")):
            explained = split_k(kernel, m, k, n, 0, 1, c_shape)
            assert explained.chosen == want and explained.refused is None, str(explained)
            assert "+ blocked" in str(explained), str(explained)
            values = explained.values
            got = (values["splitKBlocks"], values["splitKSlices"], values["splitKSliceSteps"])
            assert got == (blocks, slices, steps), (m, k, n, got)
            assert values["splitKScratchBytes"] == 4 * slices * -(-m // 64) * 64 * -(-n // 64) * 64
    # CLIP text fc1 (96 blocks, K 768), ViT-L/14 fc1 (320 blocks), 128 blocks, K 1,023
    for m, k, n in ((77, 768, 3072), (257, 1024, 4096), (64, 4096, 128 * 64), (5, 1023, 7)):
        explained = split_k(kernel, m, k, n, 0, 1, (n,))
        assert explained.chosen == "blocked_c" and "splitKFew=False" in str(explained), str(explained)
        forced = kernel.explain({"A": ((m, k), "float32"), "B": ((k, n), "float32")}, variant="blocked_splitk")
        assert forced.chosen is None and "splitKFew=False" in forced.refused, str(forced)
    with pytest.raises(errors.VariantRejectedError, match="splitKFew=False"):
        kernel({"A": np.ones((5, 1023), np.float32), "B": np.ones((1023, 7), np.float32)}, variant="blocked_splitk")
    # with the rows variants on (the default), SD 1.5's linear_2 (2 rows) goes to rows_c first
    explained = kernel.explain({"A": ((2, 1280), "float32"), "B": ((1280, 1280), "float32"), "C": ((1280,), "float32")},
                               attrs=attrs_of(trans_b=1))  # fmt: skip
    assert explained.chosen == "rows_c" and "+ blocked_splitk_c (priority 25): accepted" in str(explained), str(explained)


# (M, K, N, transA, transB, C shape, dtype, tunables, slices): M and N below a block or not whole
# blocks, K off BK (1,100 = 68 x 16 + 12) and off the slice (69 steps in 8 slices of 9: the last 6),
# each transpose pair ((0, 0) in float16 only: the loads' branches are the dtype's, and (0, 1), (1, 0)
# run them in float32), each C form, float16, the S = 1 edge (SPLITK_STEPS past the steps), many
# slices of 2 steps (the last 1), another block shape (BN 12: partN a multiple of 12). nn.Linear's
# form at the default S is test.json's splitk-5x1100x7-transB-c7-* (both dtypes); float16 without C is
# its splitk-noC-* (the reduce) and the (0, 0) case below (the partial pass: C is only the reduce's).
SPLIT_K_CALLS = [
    (70, 1100, 77, 1, 0, (70, 1), np.float32, None, 8),
    (3, 1100, 9, 1, 1, None, np.float32, None, 8),
    (9, 1030, 66, 0, 0, (9, 66), np.float16, None, 8),
    (6, 1100, 5, 0, 1, (), np.float32, {"SPLITK_STEPS": 100}, 1),
    (6, 1100, 5, 0, 1, (1, 5), np.float32, {"SPLITK_STEPS": 1}, 35),
    (70, 1100, 77, 0, 1, (77,), np.float32, SMALL_BLOCK, 5),
]


@pytest.mark.parametrize(("m", "k", "n", "trans_a", "trans_b", "c_shape", "dtype", "tunables", "slices"), SPLIT_K_CALLS)
def test_split_k_against_the_reference_and_onnxruntime(
    kernel, rng, need_dtype, m, k, n, trans_a, trans_b, c_shape, dtype, tunables, slices
):
    """The split-K variants chosen and right (the f32 bound holds whatever the order of the sums)."""
    need_dtype(dtype)
    tunables = {**NO_ROWS, **(tunables or {})}
    a, b, c = operands(rng, m, k, n, trans_a, trans_b, c_shape, dtype)
    attrs = attrs_of(0.75, -1.5, trans_a, trans_b) if m % 2 else attrs_of(trans_a=trans_a, trans_b=trans_b)
    variant = "blocked_splitk" if c is None else "blocked_splitk_c"
    inputs = {"A": a, "B": b, **({} if c is None else {"C": c})}
    explained = kernel.explain(inputs, attrs=attrs, tunables=tunables)
    assert explained.chosen == variant and explained.values["splitKSlices"] == slices, str(explained)
    got = call(kernel, a, b, c, attrs=attrs, tunables=tunables)
    args = (a, b, c, attrs["alpha"], attrs["beta"], trans_a, trans_b)
    both = 2 * error_bound(*args, float16=dtype == np.float16)
    assert_matches_within_bound(
        got, ort_gemm(*args), both, dtype, f"onnxruntime: {a.shape} {b.shape} {attrs} {tunables}"
    )
    # the slices are added in a fixed order: the same bits every call
    again = kernel(inputs, attrs=attrs, tunables=tunables)["Y"]
    assert again.tobytes() == got.tobytes()


def test_split_k_nan_beta_zero_and_empty_outputs(kernel, rng):
    """NaN in a row of A is NaN in that row of Y only (the partials carry it to the sum); beta = 0
    ignores C, NaN or not; an empty M or N dispatches nothing."""
    a, b, _ = operands(rng, 3, 1100, 5, 0, 0, None, np.float32)
    c = np.array([np.nan, 1, np.inf, -np.inf, 2], np.float32)
    for beta in (0.0, 1.0):
        want = ort_gemm(a, b, c, 1.0, beta)
        got = call(kernel, a, b, c, attrs=attrs_of(beta=beta), variant="blocked_splitk_c")
        assert_matches_within_bound(got, want, 2 * error_bound(a, b, c, 1.0, beta), np.float32, f"beta {beta}")
    a[1, 1000] = np.nan
    got = call(kernel, a, b, attrs=attrs_of(), variant="blocked_splitk")
    assert np.isnan(got[1]).all() and not np.isnan(got[[0, 2]]).any()
    for m, n in ((0, 5), (3, 0)):
        a, b, c = operands(rng, m, 1100, n, 0, 0, (n,), np.float32)
        assert kernel.explain({"A": a, "B": b, "C": c}, tunables=NO_ROWS).chosen == "blocked_splitk_c"
        assert kernel({"A": a, "B": b, "C": c}, tunables=NO_ROWS)["Y"].shape == (m, n)


def test_split_k_loop_bounds_for_llvmpipe(kernel):
    """Each slice takes at most 65,535 steps of BK (llvmpipe's loop cap): where 64 slices would not
    do, the slices are ceil(steps / 65,535), so split-K takes a K past blocked's bound; at such a
    bound the sum of K ones is whole on lavapipe."""
    one = {"BM": 1, "TM": 1, "BN": 4, "TN": 4, "BK": 4}
    explained = split_k(kernel, 1, 4 * 64 * 65535 + 4, 1, tunables=one)
    assert explained.chosen == "blocked_splitk" and "blockedLoopOk=False" in str(explained)
    assert (explained.values["splitKSlices"], explained.values["splitKSliceSteps"]) == (65, 64527)
    assert split_k(kernel, 1, 16 * 65535 + 1, 1).chosen == "blocked_splitk"
    k = 4 * 65535 + 1
    ones = {"A": np.ones((1, k), np.float32), "B": np.ones((k, 1), np.float32)}
    assert kernel(ones, tunables={**NO_ROWS, **one})["Y"].tolist() == [[float(k)]]
    assert kernel(ones, tunables={**NO_ROWS, **one, "SPLITK_STEPS": 65535})["Y"].tolist() == [[float(k)]]  # 2 slices


if __name__ == "__main__":
    write_tolerances()


# (M, K, N, transA, transB, C shape, dtype, tunables, variant): the register prefetch (PREFETCH) on and
# off on K below BK (3: one partial step, in float16), BK + 1 (17: the second step one k deep), K off BK
# (17, 1,100), both load mappings of A' and of B' ((0, 1) and (1, 0) take each branch of the loads: the
# other pairs combine the same two), the default block (exact loads) and a block shape whose loads do
# not split evenly over its invocations (the guarded last round), and split-K slices (8 of 9 steps, the
# last 6: the prefetch stops at its slice's end). The PREFETCH off shaders but the small block's float16
# one are shaders test.json or another test compiles anyway.
PREFETCH_CALLS = [
    (70, 17, 45, 1, 0, (70, 1), np.float32, None, "blocked_c"),
    (70, 3, 77, 0, 1, (77,), np.float16, SMALL_BLOCK, "blocked_c"),
    (5, 1100, 7, 0, 1, (7,), np.float32, None, "blocked_splitk_c"),
]


@pytest.mark.parametrize(("m", "k", "n", "trans_a", "trans_b", "c_shape", "dtype", "tunables", "variant"), PREFETCH_CALLS)
def test_blocked_prefetch_on_and_off(kernel, rng, need_dtype, m, k, n, trans_a, trans_b, c_shape, dtype, tunables, variant):
    """PREFETCH loads the next step's elements into registers while the current step computes: the
    same sums in the same order, so the same bits as without it, both within the bound of float64's."""
    need_dtype(dtype)
    a, b, c = operands(rng, m, k, n, trans_a, trans_b, c_shape, dtype)
    attrs = attrs_of(0.75, -1.5, trans_a, trans_b)
    # call checks each against the float64 reference within error_bound
    got = {p: call(kernel, a, b, c, attrs=attrs, variant=variant, tunables={**(tunables or {}), "PREFETCH": p})
           for p in (False, True)}  # fmt: skip
    assert got[True].tobytes() == got[False].tobytes()
