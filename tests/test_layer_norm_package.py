"""tests/packages/demo.LayerNorm: ONNX LayerNormalization (opset 17) as a third-party package written
from docs/format.md and docs/package-files.md alone, run through load_kernel() with no engine change.

Four variants: ``onepass`` (a workgroup per row, the row in registers) and ``twopass`` (pass
``stats`` writes the outputs Mean and InvStdDev, pass ``apply`` reads them back as read-only
storage and writes Y), each with a ``_nobias`` twin for calls without the optional B (the engine
cannot bind an absent input). Every variant is run on every shape it accepts and judged against a
NumPy float64 reference and against onnxruntime's CPU LayerNormalization (a one-node opset-17 model).

Tolerances (``bound``) are worst-case bounds per element, not fitted numbers. With u = 2^-24 (the
f32 unit roundoff) and k the longest chain of f32 roundings of the row's sums (``chain``: a strided
partial of ceil(norm / WG) terms, one tree level per power of two below WG, or up to WG additions
where onepass sums with subgroupAdd in the implementation's order, then the division),
gamma = 2 k u (Higham's gamma_k, doubled for the gamma denominator and contracted multiply-adds):

- Mean:      |dm| <= gamma * max|x| over the row (summation error; Welford's update is bounded the
  same way, each step's error being relative to |x - m| + |m| <= 2 max|x|, which the 2 covers);
- InvStdDev: relative error <= gamma + (dm * inv)^2 + 4u for onepass (the sum of squared deviations
  is a sum of positive terms, a wrong mean adds (dm)^2 to the variance, inverseSqrt is 2 ulp); twopass
  adds 2 dm inv: Welford's update and Chan's merge take deviations from running or partial means, so
  their errors enter to first order;
- Y:         |dm| * inv * |scale| + |n * scale| * (rel(inv) + 4u) + 2u (|B| + |Y|), n = (x - m) inv.

Float16 adds one f16 ulp (2^-10 relative: WGSL lets an f32 -> f16 conversion round either way) and
2^-14 absolute (a subnormal result may be flushed) to Y. Mean and InvStdDev are float32 for both
dtypes (ONNX's type U: a one-type constraint no input binds), so pass ``apply`` reads the statistics
as pass ``stats`` computed them (test_twopass_hands_over_f32_statistics).
onnxruntime is allowed its own bound on top (k = norm: a sequential sum; its variance is
E[x^2] - E[x]^2, which loses (m inv)^2 gamma more).

The package's test.json is written by this module: ``python tests/test_layer_norm_package.py``
(then ``webgpu-kernels digest tests/packages/demo.LayerNorm``); test_expected_outputs_are_the_reference
checks that the stored expected outputs are still the float64 reference of their inputs.
"""

from __future__ import annotations

import functools
import json
import math
import sys
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

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
from references import F16_FLUSH, F16_STEP, F32_TINY, U32, assert_outputs_within, one_node_session

PACKAGE = PACKAGES_DIR / "demo.LayerNorm"
VARIANTS = ["onepass", "onepass_nobias", "twopass", "twopass_nobias"]
DEFAULT_WG = 256
OUTPUTS = ("Y", "Mean", "InvStdDev")
STATS_DTYPE = np.dtype(np.float32)  # type U of Mean and InvStdDev, whatever X's type


def output_dtype(role: str, x_dtype) -> np.dtype:
    return np.dtype(x_dtype) if role == "Y" else STATS_DTYPE


@pytest.fixture(scope="module")
def layer_norm():
    return wk.load_kernel(PACKAGE)


# --- reference and tolerance ---------------------------------------------------------------------


def reference(x, scale, b=None, axis=-1, epsilon=1e-5) -> dict[str, np.ndarray]:
    """LayerNormalization in float64 from its ONNX definition (biased variance, epsilon inside the
    square root). epsilon is taken as the f32 the kernel receives."""
    x64 = np.asarray(x, np.float64)
    dims = tuple(range(axis % x64.ndim, x64.ndim))
    mean = x64.mean(axis=dims, keepdims=True)
    var = np.square(x64 - mean).mean(axis=dims, keepdims=True)
    inv = 1.0 / np.sqrt(var + float(np.float32(epsilon)))
    y = (x64 - mean) * inv * np.asarray(scale, np.float64)
    if b is not None:
        y = y + np.asarray(b, np.float64)
    return {"Y": y, "Mean": mean, "InvStdDev": inv}


def chain(norm: int, wg: int, subgroups: bool = False) -> int:
    """Longest chain of f32 roundings of one row's sums: a strided partial of ceil(norm / wg) terms,
    one tree level per power of two below wg (or, with subgroups, subgroupAdd's sg - 1 additions in
    an order the implementation picks, then the wg / sg subgroup slots one after another: at most
    wg in all), the division by norm and the conversion."""
    return -(-norm // wg) + (wg if subgroups else (wg - 1).bit_length()) + 2


def uses_subgroups(variant: str, tunables) -> bool:
    """Whether onepass reduces with subgroup operations here (its constant `subgroups`)."""
    on = (tunables or {}).get("SUBGROUPS", False)
    return variant.startswith("onepass") and on and "subgroups" in wk.get_device().info.feature_names


def bound(x, scale, b, axis, want, *, k: int, twopass: bool = False, cancelling: bool = False):
    """Per-element absolute tolerances for Y, Mean and InvStdDev (the derivation is in the module
    docstring). ``twopass``: the variance is Welford's and Chan's; ``cancelling``: the variance was taken as E[x^2] - E[x]^2
    (onnxruntime)."""
    x64 = np.asarray(x, np.float64)
    dims = tuple(range(axis % x64.ndim, x64.ndim))
    s = np.abs(np.asarray(scale, np.float64))
    babs = 0.0 if b is None else np.abs(np.asarray(b, np.float64))
    m, inv, y = want["Mean"], want["InvStdDev"], want["Y"]
    gamma = 2 * k * U32
    dm = gamma * np.max(np.abs(x64), axis=dims, keepdims=True) + F32_TINY
    rel_inv = gamma + np.square(dm * inv) + 4 * U32
    if twopass:  # Welford's deviations are taken from running means: first order in their error
        rel_inv = rel_inv + 2 * dm * inv
    if cancelling:
        rel_inv = rel_inv + gamma * np.square(m * inv)
    ns = np.abs((x64 - m) * inv) * s
    tol = {
        "Y": dm * inv * s + ns * (rel_inv + 4 * U32) + 2 * U32 * (babs + np.abs(y)) + F32_TINY,
        "Mean": dm + U32 * np.abs(m),
        "InvStdDev": (rel_inv + U32) * inv,
    }
    if np.asarray(x).dtype == np.float16:  # Y's rounding to f16 (Mean and InvStdDev stay f32)
        tol["Y"] = tol["Y"] + F16_STEP * np.abs(y) + F16_FLUSH
    return tol


def assert_within(got: dict, want: dict, tol: dict, dtype, what: str) -> None:
    assert_outputs_within(got, {r: want[r] for r in OUTPUTS}, tol, {r: output_dtype(r, dtype) for r in OUTPUTS}, what)


@functools.lru_cache(maxsize=None)
def ort_session(dtype_name: str, rank: int, axis: int, bias: bool, epsilon: float):
    """A one-node opset-17 LayerNormalization model on onnxruntime's CPU provider. Mean and
    InvStdDev are float32 (ONNX's type U for stash_type 1), whatever X's type."""
    from onnx import TensorProto, helper

    elem = TensorProto.FLOAT16 if dtype_name == "float16" else TensorProto.FLOAT
    a = axis % rank
    dims = [f"d{i}" for i in range(rank)]
    inputs = [helper.make_tensor_value_info("X", elem, dims), helper.make_tensor_value_info("Scale", elem, dims[a:])]
    if bias:
        inputs.append(helper.make_tensor_value_info("B", elem, dims[a:]))
    stats = dims[:a] + [1] * (rank - a)
    outputs = [helper.make_tensor_value_info("Y", elem, dims),
               helper.make_tensor_value_info("Mean", TensorProto.FLOAT, stats),
               helper.make_tensor_value_info("InvStdDev", TensorProto.FLOAT, stats)]  # fmt: skip
    node = helper.make_node("LayerNormalization", [i.name for i in inputs], list(OUTPUTS), axis=axis, epsilon=epsilon)
    return one_node_session(node, inputs, outputs, 17)


def run(kernel, x, scale, b=None, axis=-1, *, variant=None, tunables=None, epsilon=None):
    """One call, checked against the float64 reference and onnxruntime (every output element
    written, inputs untouched). Returns (outputs, the variant that ran)."""
    inputs = {"X": x, "Scale": scale} | ({} if b is None else {"B": b})
    attrs = {"axis": axis} | ({} if epsilon is None else {"epsilon": epsilon})
    eps = 1e-5 if epsilon is None else epsilon
    chosen = variant or kernel.explain(inputs, attrs=attrs, tunables=tunables).chosen
    want = reference(x, scale, b, axis, eps)
    poison_outputs(kernel, inputs, attrs=attrs, tunables=tunables)  # an unwritten element would show as NaN
    before = {k: v.copy() for k, v in inputs.items()}
    got = kernel(inputs, attrs=attrs, variant=variant, tunables=tunables)
    for k, v in inputs.items():
        np.testing.assert_array_equal(v, before[k])
    tun = tunables or {}
    norm = int(np.prod(x.shape[axis % x.ndim :], dtype=np.int64))
    k = chain(norm, tun.get("WORKGROUP_SIZE", DEFAULT_WG), uses_subgroups(chosen, tun))
    what = f"{x.shape} {x.dtype} axis={axis} B={b is not None} {chosen} {tun}"
    ours = bound(x, scale, b, axis, want, k=k, twopass=chosen.startswith("twopass"))
    assert_within(got, want, ours, x.dtype, what)
    if x.size:
        session = ort_session(np.dtype(x.dtype).name, x.ndim, axis, b is not None, float(eps))
        theirs = dict(zip(OUTPUTS, session.run(None, inputs)))
        theirs = {r: v.astype(np.float64) for r, v in theirs.items()}
        ort_bound = bound(x, scale, b, axis, want, k=norm + 2, cancelling=True)
        assert_within(got, theirs, {r: ours[r] + ort_bound[r] for r in OUTPUTS}, x.dtype, what + " vs onnxruntime")
    return got, chosen


def accepted(kernel, inputs, attrs=None, tunables=None) -> list[str]:
    return [v.variant for v in kernel.explain(inputs, attrs=attrs, tunables=tunables).verdicts if v.accepted]


def run_every_variant(kernel, x, scale, b=None, axis=-1, *, tunables=None) -> list[str]:
    """Run on each variant whose `when` holds (as `webgpu-kernels test` does); returns their ids."""
    inputs = {"X": x, "Scale": scale} | ({} if b is None else {"B": b})
    ids = accepted(kernel, inputs, {"axis": axis}, tunables)
    assert ids, "no variant accepts the call"
    for vid in ids:
        run(kernel, x, scale, b, axis, variant=vid, tunables=tunables)
    return sorted(ids)


def make_inputs(rng, shape, axis, dtype, bias=True):
    """X ~ N(0.5, 2^2), Scale ~ U(0.5, 1.5), B ~ N(0, 0.25^2), as trained LayerNorm weights look."""
    x = (0.5 + 2.0 * rng.standard_normal(shape)).astype(dtype)
    trailing = shape[axis % len(shape) :]
    scale = rng.uniform(0.5, 1.5, trailing).astype(dtype)
    b = (0.25 * rng.standard_normal(trailing)).astype(dtype) if bias else None
    return x, scale, b


# --- the package ---------------------------------------------------------------------------------


def test_package_files():
    data = json.loads((PACKAGE / "manifest.json").read_text("utf-8"))
    assert check_manifest(data) == []
    assert [(v["id"], v["priority"]) for v in data["variants"]] == [("onepass", 20), ("onepass_nobias", 20),
                                                                     ("twopass", 10), ("twopass_nobias", 10)]  # fmt: skip
    assert all(v.get("when") for v in data["variants"])
    assert [p["id"] for p in data["variants"][2]["passes"]] == ["stats", "apply"]
    templates = sorted(p.name for p in PACKAGE.glob("*.jinja"))
    assert templates == ["layer-norm-apply.wgsl.jinja", "layer-norm-onepass.wgsl.jinja", "layer-norm-stats.wgsl.jinja"]


def test_engine_has_no_code_for_it():
    assert_engine_has_no_code_for("LayerNorm")


def test_validates_and_its_test_json_passes(layer_norm):
    assert_valid_and_passing(layer_norm, PACKAGE, VARIANTS)


def test_expected_outputs_are_the_reference(layer_norm):
    """test.json's expected outputs are the float64 reference of the case inputs, rounded once to
    the output dtype (so they are independent of the WGSL); regenerate them with this module. The
    inputs come from wk.test_case_inputs, as an author's reference script would build them."""
    from webgpu_kernels.casefile import read_test_file

    for case in read_test_file(layer_norm.package).cases:
        inputs = wk.test_case_inputs(layer_norm, case.name)
        axis, eps = case.attrs.get("axis", -1), case.attrs.get("epsilon", 1e-5)
        want = reference(inputs["X"], inputs["Scale"], inputs.get("B"), axis, eps)
        dtypes = {role: output_dtype(role, inputs["X"].dtype) for role in OUTPUTS}
        stored = case.build_expected(layer_norm.package.read_bytes, {role: dt.name for role, dt in dtypes.items()})
        assert stored, case.name
        for role, values in stored.items():
            dtype = dtypes[role]
            assert values.shape == want[role].shape, (case.name, role)
            # one ulp of slack: the generator's log/cos may differ in the last bit between math libraries
            np.testing.assert_allclose(values, want[role].astype(dtype).astype(np.float64), rtol=float(np.finfo(dtype).eps),
                                       atol=float(np.finfo(dtype).smallest_subnormal), err_msg=f"{case.name} {role}")  # fmt: skip


def test_loads(layer_norm):
    assert layer_norm.op_id == "demo.LayerNorm"
    assert layer_norm.variants == VARIANTS


# --- results -------------------------------------------------------------------------------------

MODEL_SHAPES = [
    (1, 77, 768),  # CLIP ViT-L/14 text encoder (SD 1.x, Flux)
    (1, 77, 1024),  # OpenCLIP ViT-H/14 text encoder (SD 2.x)
    (2, 4096, 320),  # SD 1.5 UNet transformer blocks at 512x512, classifier-free guidance batch
    (2, 1024, 640),
    (2, 256, 1280),
    (2, 64, 1280),  # mid block
]


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("shape", MODEL_SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_model_shapes(layer_norm, need_dtype, rng, shape, dtype):
    need_dtype(dtype)
    x, scale, b = make_inputs(rng, shape, -1, dtype)
    _, chosen = run(layer_norm, x, scale, b)
    assert chosen == "onepass"  # every hidden size here fits 256 invocations x 8 registers
    run(layer_norm, x, scale, b, variant="twopass")


# Shapes and axes at the default tunables: the shaders are those of every default call, so each runs
# in both dtypes, with and without B, at no new compile.
EDGE_SHAPES = [
    ((5, 300), 0, ["onepass", "twopass"]),  # axis 0: the whole tensor is one row of 1500
    ((3, 77, 64), 0, ["twopass"]),  # axis 0, one row of 14784: too long for onepass
    ((3, 5, 7), -2, ["onepass", "twopass"]),  # axis -2: rows of 35, Scale of shape [5, 7]
    ((2, 77, 96), -2, ["twopass"]),  # axis -2, rows of 7392
    ((2, 3, 4, 5), 1, ["onepass", "twopass"]),  # rank 4, axis 1
    ((1000,), 0, ["onepass", "twopass"]),  # rank 1
    ((6, 1), -1, ["onepass", "twopass"]),  # rows of one element: Y = B exactly
    ((4, 300), -1, ["onepass", "twopass"]),  # 300 = 256 + 44: a partial second round
]
# Partial workgroups, rows off WORKGROUP_SIZE x ROW_ITEMS and subgroup sums, each at its own
# tunables (each a new set of shaders): float32 with B only. The code they reach (the strided loops'
# bounds, the trees' `lix + s < WG`, the subgroup slots, apply's `i >= count`) is one text for both
# dtypes and for B or none, which only change the loads and the last store; float16 and the _nobias
# twins run it at the default tunables above, and test.json runs the first three, and 129, in float16.
EDGE_TUNABLES = [
    ((3, 1000), {"WORKGROUP_SIZE": 96, "ROW_ITEMS": 11, "APPLY_WORKGROUP_SIZE": 100}, ["onepass", "twopass"]),
    ((4, 300), {"SUBGROUPS": True}, ["onepass", "twopass"]),  # onepass's sums with subgroupAdd
    ((3, 128), {"WORKGROUP_SIZE": 32, "ROW_ITEMS": 4}, ["onepass", "twopass"]),  # exactly WG x ROW_ITEMS
    ((3, 129), {"WORKGROUP_SIZE": 32, "ROW_ITEMS": 4}, ["twopass"]),  # one more
    ((2, 700), {"WORKGROUP_SIZE": 1000}, ["onepass", "twopass"]),  # more invocations than elements
    ((5, 37), {"WORKGROUP_SIZE": 3, "ROW_ITEMS": 13, "SUBGROUPS": True}, ["onepass", "twopass"]),
    # a workgroup of 33: a partial last subgroup, which lavapipe's num_subgroups leaves out
    ((3, 300), {"WORKGROUP_SIZE": 33, "ROW_ITEMS": 10, "SUBGROUPS": True}, ["onepass", "twopass"]),
    ((5, 37), {"WORKGROUP_SIZE": 3, "ROW_ITEMS": 13, "APPLY_WORKGROUP_SIZE": 7}, ["onepass", "twopass"]),
    ((4, 9), {"WORKGROUP_SIZE": 1, "ROW_ITEMS": 9}, ["onepass", "twopass"]),  # a workgroup of one
]


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize(("shape", "axis", "variants"), EDGE_SHAPES, ids=str)
def test_edge_shapes(layer_norm, need_dtype, rng, shape, axis, variants, dtype):
    need_dtype(dtype)
    x, scale, b = make_inputs(rng, shape, axis, dtype)
    assert run_every_variant(layer_norm, x, scale, b, axis) == variants
    assert run_every_variant(layer_norm, x, scale, None, axis) == [v + "_nobias" for v in variants]


@pytest.mark.parametrize(("shape", "tunables", "variants"), EDGE_TUNABLES, ids=str)
def test_edge_tunables(layer_norm, rng, shape, tunables, variants):
    x, scale, b = make_inputs(rng, shape, -1, np.float32)
    assert run_every_variant(layer_norm, x, scale, b, tunables=tunables) == variants


@pytest.mark.parametrize("variant", ["onepass", "twopass"])
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_a_row_of_one_element_gives_b_exactly(layer_norm, need_dtype, rng, dtype, variant):
    """Variance 0: Mean is X, InvStdDev is 1 / sqrt(epsilon), x - mean is exactly 0, Y is B."""
    need_dtype(dtype)
    x, scale, b = make_inputs(rng, (9, 1), -1, dtype)
    got = layer_norm({"X": x, "Scale": scale, "B": b}, variant=variant)
    np.testing.assert_array_equal(got["Y"], np.broadcast_to(b, x.shape))
    np.testing.assert_array_equal(got["Mean"], x)
    np.testing.assert_allclose(got["InvStdDev"].astype(np.float64), 1 / math.sqrt(np.float32(1e-5)), rtol=4 * U32)


@pytest.mark.parametrize("variant", ["onepass", "twopass"])
def test_constant_rows_and_epsilon(layer_norm, rng, variant):
    """Rows whose mean is exact in f32 have no variance: Y is B, InvStdDev is 1 / sqrt(epsilon) for
    the caller's epsilon."""
    x = np.repeat(np.array([[3.0], [-0.5], [0.0], [1024.0]], np.float32), 40, axis=1)
    scale, b = rng.uniform(0.5, 1.5, 40).astype(np.float32), rng.standard_normal(40).astype(np.float32)
    for eps in (1e-5, 1e-3, 0.25):
        got, _ = run(layer_norm, x, scale, b, variant=variant, epsilon=eps)
        np.testing.assert_array_equal(got["Y"], np.broadcast_to(b, x.shape))
        np.testing.assert_allclose(got["InvStdDev"], 1 / np.sqrt(np.float32(eps)), rtol=4 * U32)


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_many_rows_spill_the_grid(layer_norm, plan_of, need_dtype, rng, dtype):
    """70001 rows, one workgroup each: more than maxComputeWorkgroupsPerDimension (65535), so the
    engine spills the grid into y (docs/format.md, Dispatch) and the shaders linearise the
    workgroup index; pass apply's grid spills too at APPLY_WORKGROUP_SIZE 2. Chosen by the rules."""
    need_dtype(dtype)
    limit = wk.get_device().limits["max-compute-workgroups-per-dimension"]
    rows = limit + 4466
    x, scale, b = make_inputs(rng, (rows, 3), -1, dtype)
    tunables = {"WORKGROUP_SIZE": 2, "ROW_ITEMS": 2, "APPLY_WORKGROUP_SIZE": 2}
    inputs = {"X": x, "Scale": scale, "B": b}
    for vid in ("onepass", "twopass"):
        plan = plan_of(layer_norm, inputs, variant=vid, tunables=tunables)
        for p in plan.passes:
            assert p.grid[1] > 1 and p.grid[0] <= limit and p.grid[0] * p.grid[1] * p.grid[2] >= rows
    assert run_every_variant(layer_norm, x, scale, b, tunables=tunables) == ["onepass", "twopass"]


@pytest.mark.parametrize("variant", ["onepass", "twopass"])
def test_twopass_hands_over_f32_statistics(layer_norm, need_dtype, rng, variant):
    """X = 100.03 + N(0, 0.1^2) in f16: |mean| / stddev = 1000. Mean is type U (float32), so pass
    apply reads the mean pass stats computed: an f16 Mean (ulp 0.0625 at 100, 0.6 standard deviations)
    put twopass's Y off by up to 0.3. Both variants now stay within a few f16 ulps of Y."""
    need_dtype(np.float16)
    x = (100.03 + 0.1 * rng.standard_normal((8, 512))).astype(np.float16)
    scale = np.ones(512, np.float16)
    b = np.zeros(512, np.float16)
    got, _ = run(layer_norm, x, scale, b, variant=variant)
    assert got["Mean"].dtype == np.float32 and got["InvStdDev"].dtype == np.float32
    err = np.abs(got["Y"].astype(np.float64) - reference(x, scale, b)["Y"]).max()
    assert err < 0.01, err


def test_an_optional_input_given_as_none_is_left_out(layer_norm, rng):
    """`"B": None` (ONNX's and PyTorch's way of leaving out an optional input) was refused: "expected
    a NumPy array or a GpuTensor, got NoneType". It is the call without B, on the cached
    path too; a required input given as None is still refused by name."""
    x, scale, _ = make_inputs(rng, (4, 64), -1, np.float32)
    want = reference(x, scale)
    for _ in range(2):  # the second call takes the cached plan
        got = layer_norm({"X": x, "Scale": scale, "B": None})
        np.testing.assert_allclose(got["Y"], want["Y"], rtol=1e-4, atol=1e-5)
        np.testing.assert_array_equal(got["Y"], layer_norm({"X": x, "Scale": scale})["Y"])
    with pytest.raises(wk.errors.InputError, match="argument 'Scale'"):
        layer_norm({"X": x, "Scale": None, "B": None})
    # what a call would do, asked of the same inputs (explain, plan and render had refused None)
    leaving_out, without = {"X": x, "Scale": scale, "B": None}, {"X": x, "Scale": scale}
    assert layer_norm.explain(leaving_out).chosen == layer_norm.explain(without).chosen
    assert layer_norm.plan(leaving_out)[1] is layer_norm.plan(without)[1]
    assert layer_norm.render(leaving_out) == layer_norm.render(without)
    assert layer_norm.tuning_class(leaving_out) == layer_norm.tuning_class(without)


@pytest.mark.parametrize("variant", ["onepass", "twopass"])
def test_empty_rows(layer_norm, plan_of, variant):
    """No rows: empty outputs, nothing dispatched."""
    inputs = {"X": np.zeros((0, 8), np.float32), "Scale": np.ones(8, np.float32), "B": np.zeros(8, np.float32)}
    got = layer_norm(inputs, variant=variant)
    assert [got[r].shape for r in OUTPUTS] == [(0, 8), (0, 1), (0, 1)]
    assert all(p.grid == (0, 0, 0) for p in plan_of(layer_norm, inputs, variant=variant).passes)


# --- selection, errors ---------------------------------------------------------------------------


def meta(shape, dtype="float32"):
    return wk.TensorMeta(tuple(shape), dtype)


def test_explain_chooses_by_row_length(layer_norm):
    clip = {"X": meta((1, 77, 768), "float16"), "Scale": meta((768,), "float16"), "B": meta((768,), "float16")}
    explanation = layer_norm.explain(clip)
    assert explanation.chosen == "onepass"
    assert "chosen variant 'onepass'" in str(explanation) and "+ twopass (priority 10): accepted" in str(explanation)
    assert {k: explanation.values[k] for k in ("a", "rows", "norm", "count")} == {
        "a": 2, "rows": 77, "norm": 768, "count": 59136}  # fmt: skip
    assert [(o.role, o.shape, o.dtype) for o in explanation.outputs] == [
        ("Y", (1, 77, 768), "float16"), ("Mean", (1, 77, 1), "float32"), ("InvStdDev", (1, 77, 1), "float32")]  # fmt: skip

    # axis -2 over the same tensor: rows of 59136, more than 256 x 8 registers
    whole = {"X": meta((1, 77, 768)), "Scale": meta((77, 768)), "B": meta((77, 768))}
    explanation = layer_norm.explain(whole, attrs={"axis": -2})
    assert explanation.chosen == "twopass"
    onepass = explanation.verdicts[0]
    assert (onepass.variant, onepass.clause, onepass.values.get("norm")) == ("onepass", "rowFits", 59136)
    assert explanation.outputs[1].shape == (1, 1, 1)

    # the register budget is a tunable: 64 x 4 = 256 < 768
    assert layer_norm.explain(clip, tunables={"WORKGROUP_SIZE": 64, "ROW_ITEMS": 4}).chosen == "twopass"
    # no B: the twins
    assert layer_norm.explain({"X": meta((2, 64, 1280)), "Scale": meta((1280,))}).chosen == "onepass_nobias"
    assert layer_norm.explain({"X": meta((2, 3000)), "Scale": meta((3000,))}).chosen == "twopass_nobias"


@pytest.mark.parametrize(
    ("variant", "inputs", "clause"),
    [
        ("onepass", {"X": meta((2, 3000)), "Scale": meta((3000,)), "B": meta((3000,))}, "rowFits"),
        ("onepass_nobias", {"X": meta((2, 30)), "Scale": meta((30,)), "B": meta((30,))}, "noBias"),
        ("twopass", {"X": meta((2, 30)), "Scale": meta((30,))}, "hasBias"),
        ("twopass", {"X": meta((2, 30)), "Scale": meta((30,)), "B": meta((31,))}, "hasBias"),
    ],
)
def test_forced_variant_refused(layer_norm, variant, inputs, clause):
    arrays = {k: np.zeros(m.shape, m.dtype) for k, m in inputs.items()}
    with pytest.raises(errors.VariantRejectedError) as info:
        layer_norm(arrays, variant=variant)
    assert (info.value.variant, info.value.clause) == (variant, clause)


def test_contract_errors(layer_norm):
    f32 = np.float32
    with pytest.raises(errors.SelectionError) as info:  # Scale must be X.shape[axis:] exactly
        layer_norm({"X": np.ones((2, 8), f32), "Scale": np.ones((1, 8), f32)})
    assert "scaleOk" in str(info.value)
    with pytest.raises(errors.SelectionError) as info:
        layer_norm({"X": np.ones((2, 8), f32), "Scale": np.ones(8, f32)}, attrs={"stash_type": 0})
    assert "stashOk" in str(info.value) and "attrs.stash_type=0" in str(info.value)
    with pytest.raises(errors.SelectionError) as info:  # an empty row has no mean
        layer_norm({"X": np.ones((2, 0), f32), "Scale": np.ones(0, f32)})
    assert "rowsOk" in str(info.value)
    with pytest.raises(errors.ExpressionError) as info:
        layer_norm({"X": np.ones((2, 8), f32), "Scale": np.ones(8, f32)}, attrs={"axis": 2})
    assert "axis 2 is out of range for a shape of rank 2" in str(info.value)
    with pytest.raises(errors.RankError):
        layer_norm({"X": np.array(1.0, f32), "Scale": np.array(1.0, f32)})
    with pytest.raises(errors.DTypeError) as info:
        layer_norm({"X": np.ones((2, 8), f32), "Scale": np.ones(8, f32), "B": np.ones(8, np.float16)})
    assert info.value.argument == "B"
    with pytest.raises(errors.MissingInputError):
        layer_norm({"X": np.ones((2, 8), f32)})


# --- rendering and pipelines ---------------------------------------------------------------------


def test_render_twopass_hands_the_statistics_over(layer_norm, need_dtype):
    need_dtype(np.float16)
    inputs = {"X": meta((3, 5000), "float16"), "Scale": meta((5000,), "float16"), "B": meta((5000,), "float16")}
    wgsl = layer_norm.render(inputs)
    assert sorted(wgsl) == ["apply", "stats"]
    assert "var<storage, read_write> mean: array<f32>;" in wgsl["stats"]  # type U, one-type constraint
    assert "var<storage, read> mean: array<f32>;" in wgsl["apply"]
    assert "var<storage, read> invStdDev: array<f32>;" in wgsl["apply"]
    assert "var<storage, read> x: array<f16>;" in wgsl["apply"]
    assert all(text.lstrip().startswith("enable f16;") for text in wgsl.values())
    nobias = layer_norm.render({"X": inputs["X"], "Scale": inputs["Scale"]})["apply"]
    assert " b:" not in nobias and "b[j]" not in nobias


def test_render_onepass(layer_norm):
    inputs = {"X": meta((3, 200)), "Scale": meta((200,)), "B": meta((200,))}
    text = layer_norm.render(inputs, tunables={"WORKGROUP_SIZE": 96, "ROW_ITEMS": 3})["main"]
    assert "@compute @workgroup_size(96)" in text and "const ITEMS: u32 = 3u;" in text
    assert "partial[lix + 64u]" in text and "partial[lix + 128u]" not in text  # the tree starts below 96
    assert "subgroupAdd" not in text and "subgroup_id" not in text


def test_render_onepass_with_subgroups(layer_norm):
    """SUBGROUPS on and `'subgroups' in device.features` turn the sums into subgroupAdd, with the
    builtins appended to the entry point's parameters and no enable directive (naga refuses
    `enable subgroups;`)."""
    if "subgroups" not in wk.get_device().info.feature_names:
        pytest.skip("this adapter has no subgroups")
    inputs = {"X": meta((3, 200)), "Scale": meta((200,)), "B": meta((200,))}
    text = layer_norm.render(inputs, tunables={"SUBGROUPS": True})["main"]
    assert "let s = subgroupAdd(value);" in text and "partial[lix + " not in text
    assert "@builtin(local_invocation_index) lix: u32, @builtin(subgroup_id) sid: u32" in text
    assert "enable subgroups" not in text


def test_shape_travels_in_the_uniform(layer_norm, plan_of):
    """rows, norm and count are uniform fields: other shapes reuse the pipelines."""
    a = plan_of(layer_norm, {"X": np.ones((2, 5, 7), np.float32), "Scale": np.ones((5, 7), np.float32)},
                attrs={"axis": 1}, variant="twopass_nobias")  # fmt: skip
    b = plan_of(layer_norm, {"X": np.ones((9, 3), np.float32), "Scale": np.ones(3, np.float32)},
                variant="twopass_nobias")  # fmt: skip
    assert [p.pipeline for p in a.passes] == [p.pipeline for p in b.passes]


# --- a property test -----------------------------------------------------------------------------


@st.composite
def layer_norm_calls(draw):
    rank = draw(st.integers(1, 4))
    shape = tuple(draw(st.lists(st.integers(1, 7), min_size=rank, max_size=rank)))
    axis = draw(st.integers(-rank, rank - 1))
    dtype = draw(st.sampled_from(DTYPES))
    bias = draw(st.booleans())
    seed = draw(st.integers(0, 2**32 - 1))
    return shape, axis, dtype, bias, seed


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(call=layer_norm_calls())
def test_property_any_shape_and_axis(layer_norm, call):
    """Random shapes (up to 7^4 elements), axes and dtypes, with or without B, on a small register
    budget (8 x 4: rows of more than 32 go to twopass), every accepted variant, NumPy and onnxruntime."""
    shape, axis, dtype, bias, seed = call
    x, scale, b = make_inputs(np.random.default_rng(seed), shape, axis, dtype, bias)
    ran = run_every_variant(layer_norm, x, scale, b, axis, tunables={"WORKGROUP_SIZE": 8, "ROW_ITEMS": 4})
    norm = int(np.prod(shape[axis % len(shape) :]))
    suffix = "" if bias else "_nobias"
    assert ran == (["onepass" + suffix, "twopass" + suffix] if norm <= 32 else ["twopass" + suffix])


# --- writing test.json ---------------------------------------------------------------------------
# python tests/test_layer_norm_package.py  writes test.json and its .npy files; then run
# `webgpu-kernels digest tests/packages/demo.LayerNorm`.

BOTH = ("float32", "float16")
ALL = ("Y", "Mean", "InvStdDev")
STATS = ("Mean", "InvStdDev")
INLINE_MAX = 64  # outputs of at most this many elements are written inline
TOLERANCES = {"float32": {"rtol": 1e-5, "atol": 1e-5}, "float16": {"rtol": 2e-3, "atol": 1e-3}}

# name, X shape, axis, {dtype: outputs checked}, options (description, tunables, attrs, variants, bias, x)
CASES: list[tuple[str, list[int], int, dict[str, tuple[str, ...]], dict[str, Any]]] = [
    # Real hidden sizes (the row length is what the kernels depend on) on a few rows each, to keep the
    # package small; test_model_shapes runs the full model shapes against NumPy and onnxruntime.
    ("clip-l-1x4x768", [1, 4, 768], -1, {"float32": ALL, "float16": ALL},
     {"description": "CLIP ViT-L/14 text encoder's hidden size (SD 1.x, Flux; the model runs 1x77x768)"}),
    ("clip-h-1x4x1024", [1, 4, 1024], -1, {"float32": ALL, "float16": ALL},
     {"description": "OpenCLIP ViT-H/14 text encoder's hidden size (SD 2.x; the model runs 1x77x1024)"}),
    ("sd15-2x4x320", [2, 4, 320], -1, {"float32": ALL, "float16": ALL},
     {"description": "SD 1.5 UNet transformer blocks, 320 channels (the model runs 2x4096x320 at 512x512)"}),
    ("sd15-2x4x640", [2, 4, 640], -1, {"float32": ALL, "float16": ALL},
     {"description": "SD 1.5 UNet transformer blocks, 640 channels (2x1024x640)"}),
    ("sd15-2x4x1280", [2, 4, 1280], -1, {"float32": ALL, "float16": ALL},
     {"description": "SD 1.5 UNet transformer blocks, 1280 channels (2x256x1280, 2x64x1280)"}),
    ("axis0-5x300", [5, 300], 0, {"float32": ALL, "float16": ALL},
     {"description": "axis 0: one row of 1500 (onepass and twopass)"}),
    ("axis0-3x77x64", [3, 77, 64], 0, {"float32": STATS, "float16": STATS},
     {"description": "axis 0: one row of 14784, twopass only", "variants": ["twopass"]}),
    ("axis-2-3x5x7", [3, 5, 7], -2, {"float32": ALL, "float16": ALL},
     {"description": "axis -2: rows of 35, Scale and B of shape [5, 7]"}),
    ("axis-2-2x77x96", [2, 77, 96], -2, {"float32": ALL, "float16": ALL},
     {"description": "axis -2: rows of 7392, twopass only", "variants": ["twopass"]}),
    ("rank4-axis1-2x3x4x5", [2, 3, 4, 5], 1, {"float32": ALL, "float16": ALL}, {}),
    ("row-of-1-6x1", [6, 1], -1, {"float32": ALL, "float16": ALL},
     {"description": "rows of one element: variance 0, Y = B"}),
    ("tail-4x300", [4, 300], -1, {"float32": ALL, "float16": ALL},
     {"description": "300 = 256 + 44: a partial round of the default workgroup"}),
    ("tail-wg96-3x1000", [3, 1000], -1, {"float32": ALL, "float16": ALL},
     {"description": "workgroups of 96 (not a power of two), 11 registers, apply workgroups of 100",
      "tunables": {"WORKGROUP_SIZE": 96, "ROW_ITEMS": 11, "APPLY_WORKGROUP_SIZE": 100}}),
    ("subgroup-sums-4x300", [4, 300], -1, {"float32": ALL, "float16": ALL},
     {"description": "SUBGROUPS on: onepass's sums with subgroupAdd where the device has subgroups (trees over "
                     "workgroup memory by default, and without subgroups)", "tunables": {"SUBGROUPS": True}}),
    ("fits-wg32x4-3x128", [3, 128], -1, {"float32": ALL, "float16": ALL},
     {"description": "a row of exactly WORKGROUP_SIZE x ROW_ITEMS", "tunables": {"WORKGROUP_SIZE": 32, "ROW_ITEMS": 4}}),
    ("overflows-wg32x4-3x129", [3, 129], -1, {"float32": ALL, "float16": ALL},
     {"description": "one more than WORKGROUP_SIZE x ROW_ITEMS: twopass only",
      "tunables": {"WORKGROUP_SIZE": 32, "ROW_ITEMS": 4}, "variants": ["twopass"]}),
    ("nobias-3x50", [3, 50], -1, {"float32": ALL, "float16": ALL},
     {"description": "no B: onepass_nobias and twopass_nobias", "bias": False}),
    ("nobias-2x3000", [2, 3000], -1, {"float32": ALL, "float16": ALL},
     {"description": "no B, rows of 3000: twopass_nobias only", "bias": False, "variants": ["twopass_nobias"]}),
    ("epsilon-0.01-2x96", [2, 96], -1, {"float32": ALL, "float16": ALL}, {"attrs": {"epsilon": 0.01}}),
    ("constant-rows-3x8", [3, 8], -1, {"float32": ALL, "float16": ALL},
     {"description": "constant rows (exact means): variance 0, Y = B, InvStdDev = 1 / sqrt(epsilon)",
      "attrs": {"epsilon": 0.001}, "x": [[3.0] * 8, [-0.5] * 8, [0.0] * 8]}),
    ("many-rows-65537x1", [65537, 1], -1, {"float16": ("Mean",)},
     {"description": "65537 rows, one workgroup each and one apply invocation each: both grids spill past "
                     "maxComputeWorkgroupsPerDimension (65535) into y. Rows of one element give exact "
                     "results: Mean is X, so a row mixed up anywhere shows (Y is B, InvStdDev a constant)",
      "tunables": {"WORKGROUP_SIZE": 1, "ROW_ITEMS": 1, "APPLY_WORKGROUP_SIZE": 1}}),
    ("empty-0x8", [0, 8], -1, {"float32": ALL, "float16": ALL}, {"description": "no rows: nothing dispatched"}),
]  # fmt: skip


def case_document() -> dict[str, Any]:
    """test.json without its expected outputs (filled in by write_test_files)."""
    cases = []
    for index, (name, shape, axis, outputs, options) in enumerate(CASES):
        for dtype in outputs:
            seed = 1000 + 10 * index + (0 if dtype == "float32" else 5)
            trailing = shape[axis % len(shape) :]
            x: dict[str, Any] = {"shape": shape, "generate": {"distribution": "normal", "seed": seed, "mean": 0.5,
                                                              "std": 2.0}}  # fmt: skip
            if "x" in options:
                x = {"shape": shape, "values": options["x"]}
            inputs = {"X": x, "Scale": {"shape": trailing, "generate": {"distribution": "uniform", "seed": seed + 1,
                                                                        "low": 0.5, "high": 1.5}}}  # fmt: skip
            if options.get("bias", True):
                inputs["B"] = {"shape": trailing, "generate": {"distribution": "normal", "seed": seed + 2, "std": 0.25}}
            case: dict[str, Any] = {"name": f"{name}-{'f32' if dtype == 'float32' else 'f16'}"}
            if "description" in options:
                case["description"] = options["description"]
            case["types"] = {"T": dtype}
            attrs = {"axis": axis} | options.get("attrs", {})
            case["attrs"] = attrs
            if "tunables" in options:
                case["tunables"] = options["tunables"]
            case["inputs"] = inputs
            case["expected"] = {role: {} for role in outputs[dtype]}
            if "variants" in options:
                case["variants"] = options["variants"]
            cases.append(case)
    return {
        "description": (
            "Correctness cases for demo.LayerNorm: CLIP text-encoder and SD 1.5 UNet shapes, axis 0 and -2, rows of "
            "one element, rows that are not a multiple of the workgroup, register budgets met exactly and missed by "
            "one, no B, epsilon, constant rows, grids spilled past 65535 workgroups, no rows. Inputs: X ~ N(0.5, 2^2), "
            "Scale ~ U(0.5, 1.5), B ~ N(0, 0.25^2). Expected outputs: the float64 reference of "
            "tests/test_layer_norm_package.py (which writes this file) on the typed inputs, rounded once to the "
            "output type (Y: T; Mean and InvStdDev: float32, type U). Tolerances, by output dtype: float32 (every "
            "Mean and InvStdDev, and float32 Y) rtol 1e-5, atol 1e-5: on lavapipe (`webgpu-kernels test --json`) the "
            "largest float32 errors are 9.5e-7 on Y (|Y| < 10), 1.2e-7 on Mean and 1.9e-6 on an InvStdDev of 31.6 "
            "(6e-8 relative); the worst-case bound in the test module is looser; float16 (Y of float16 calls) rtol 2e-3 = "
            "2^-9, two f16 ulps (WGSL lets the conversion to f16 round either way, on top of the f32 arithmetic), atol "
            "1e-3 for elements near zero, where B cancels (X - Mean) InvStdDev Scale."
        ),
        "tolerances": TOLERANCES,
        "cases": cases,
    }


def write_test_files() -> None:
    from webgpu_kernels import case_data, casefile
    from webgpu_kernels.manifest import parse_manifest

    manifest = parse_manifest(json.loads((PACKAGE / "manifest.json").read_text("utf-8")))
    document = case_document()
    parsed = casefile.parse_test_file({"cases": [{**c, "expected": {"Y": {"file": "x.npy"}}}
                                                 for c in document["cases"]]})  # fmt: skip
    written = set()
    for case, spec in zip(parsed.cases, document["cases"]):
        arrays = case.build_inputs(manifest, lambda name: b"")
        attrs = spec["attrs"]
        want = reference(arrays["X"], arrays["Scale"], arrays.get("B"), attrs["axis"], attrs.get("epsilon", 1e-5))
        for role in spec["expected"]:
            stored = want[role].astype(output_dtype(role, arrays["X"].dtype))
            if stored.size <= INLINE_MAX:
                spec["expected"][role] = {"shape": list(stored.shape), "values": case_data.encode_values(stored)}
            else:
                file = f"{spec['name']}.{role}.npy"
                np.save(PACKAGE / file, stored)
                written.add(file)
                spec["expected"][role] = {"file": file}
    for stale in PACKAGE.glob("*.npy"):
        if stale.name not in written:
            stale.unlink()
    casefile.parse_test_file(document)
    (PACKAGE / "test.json").write_text(json.dumps(document, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {PACKAGE / 'test.json'}: {len(document['cases'])} cases, {len(written)} data files")


if __name__ == "__main__":
    write_test_files()
    sys.exit(0)
