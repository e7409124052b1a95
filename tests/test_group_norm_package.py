"""tests/packages/demo.GroupNorm: the GroupNorm of Stable Diffusion UNets (PyTorch ``nn.GroupNorm``;
ONNX GroupNormalization opset 21 with per-channel scale and bias) as a third-party package written
from docs/format.md and docs/package-files.md alone, run through load_kernel() with no engine change.

X is [N, C, ...] (rank >= 3); group (n, g) is the (C / G) * S elements of channels g * C/G ..
(g + 1) * C/G - 1 of sample n, contiguous in memory. Three variants: ``twopass_vec4`` (S % 4 == 0:
vec4 loads) and ``twopass`` (any S), SPLIT workgroups per group (each computes the group's mean by
a workgroup sum and then the sum of squared deviations from it by a second, the two-pass variance,
and writes its share of Y); ``welford`` (the general fallback), one workgroup per group, Welford per
invocation and Chan's pairwise merge. Every variant is run on every shape it
accepts and judged against a float64 NumPy reference written from the definition.

Tolerances (``bound``) are worst-case bounds per element, not fitted numbers, derived as for
demo.LayerNorm (tests/test_layer_norm_package.py). With u = 2^-24 (f32 unit roundoff), k the longest
chain of f32 roundings of a group's sums (``chain``: a strided partial of ceil(len / WG) terms, one
tree level per power of two below WG, or up to WG additions where subgroupAdd sums in the
implementation's order, then the division), gamma_k = 2 k u (Higham's gamma_k, doubled for the
denominator and contracted multiply-adds):

- mean:  |dm| <= gamma_k * max|x| over the group;
- inv = 1 / sqrt(var + eps): relative error <= gamma_k + (dm inv)^2 + 4u (the squared deviations are
  positive terms; a wrong mean adds dm^2 to the variance; inverseSqrt is 2 ulp), plus 2 dm inv for
  welford (Welford's update and Chan's merge take deviations from running means: first order);
- Y:     |dm| inv |gamma| + |n gamma| (rel(inv) + 4u) + 2u (|beta| + |Y|), n = (x - mean) inv.

Float16 adds one f16 ulp (2^-10 relative: WGSL lets an f32 -> f16 conversion round either way) and
2^-14 absolute (a subnormal result may be flushed). The bound is far above what lavapipe shows
(``webgpu-kernels test`` reports the largest errors: about 1e-6 for float32) and far below what a
wrong index, a wrong channel of gamma or E[x^2] - E[x]^2 would give (test_offset_data...).

The package's test.json is written by this module: ``python tests/test_group_norm_package.py``
(it refreshes metadata.json too, as ``webgpu-kernels digest`` does);
test_expected_outputs_are_the_reference checks that the stored outputs are still the reference.
"""

from __future__ import annotations

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
from references import F16_FLUSH, F16_STEP, F32_TINY, U32, assert_within_bound

PACKAGE = PACKAGES_DIR / "demo.GroupNorm"
VARIANTS = ["twopass_vec4", "twopass", "welford"]
DEFAULT_WG = 1024  # the manifest's WORKGROUP_SIZE, clamped to the device's largest workgroup


@pytest.fixture(scope="module")
def group_norm():
    return wk.load_kernel(PACKAGE)


# --- reference and tolerance ---------------------------------------------------------------------


def grouped(x: np.ndarray, num_groups: int) -> np.ndarray:
    """X as [N, G, group length] in float64 (a group's elements are contiguous)."""
    return np.asarray(x, np.float64).reshape(x.shape[0], num_groups, x.shape[1] // num_groups * math.prod(x.shape[2:]))


def reference(x, gamma, beta, num_groups=32, epsilon=1e-5) -> np.ndarray:
    """GroupNorm in float64 from its definition (biased variance, epsilon inside the square root,
    per-channel affine). epsilon is taken as the f32 the kernel receives."""
    if np.asarray(x).size == 0:
        return np.zeros(np.shape(x))
    g = grouped(x, num_groups)
    mean = g.mean(axis=2, keepdims=True)
    var = np.square(g - mean).mean(axis=2, keepdims=True)
    n = ((g - mean) / np.sqrt(var + float(np.float32(epsilon)))).reshape(x.shape)
    affine = (1, x.shape[1]) + (1,) * (x.ndim - 2)
    return n * np.asarray(gamma, np.float64).reshape(affine) + np.asarray(beta, np.float64).reshape(affine)


def chain(length: int, wg: int, subgroups: bool = False) -> int:
    """Longest chain of f32 roundings of one group's sums: a strided partial of ceil(len / wg) terms
    (vec4 units sum fewer), the tree levels (or subgroupAdd's order and the slots: at most wg), the
    division and the conversion."""
    return -(-length // wg) + (wg if subgroups else (wg - 1).bit_length()) + 2


def workgroup_size(tunables) -> int:
    """The workgroup a call runs: WORKGROUP_SIZE, clamped to the device's largest (the manifest's wgSize)."""
    limits = wk.get_device().limits
    largest = min(limits["max-compute-invocations-per-workgroup"], limits["max-compute-workgroup-size-x"])
    return min((tunables or {}).get("WORKGROUP_SIZE", DEFAULT_WG), largest)


def uses_subgroups(variant: str, tunables) -> bool:
    """Whether the variant's sums are subgroupAdd here (its constant `subgroups`)."""
    on = (tunables or {}).get("SUBGROUPS", False)
    return variant.startswith("twopass") and on and "subgroups" in wk.get_device().info.feature_names


def bound(x, gamma, beta, num_groups, epsilon, want, *, k: int, welford: bool) -> np.ndarray:
    """Per-element absolute tolerance for Y (the derivation is in the module docstring)."""
    g = grouped(x, num_groups)
    mean = g.mean(axis=2, keepdims=True)
    inv = 1.0 / np.sqrt(np.square(g - mean).mean(axis=2, keepdims=True) + float(np.float32(epsilon)))
    gamma_k = 2 * k * U32
    dm = gamma_k * np.max(np.abs(g), axis=2, keepdims=True) + F32_TINY
    rel_inv = gamma_k + np.square(dm * inv) + 4 * U32
    if welford:
        rel_inv = rel_inv + 2 * dm * inv
    affine = (1, x.shape[1]) + (1,) * (x.ndim - 2)
    s = np.abs(np.asarray(gamma, np.float64)).reshape(affine)
    babs = np.abs(np.asarray(beta, np.float64)).reshape(affine)
    per_group = lambda a: np.broadcast_to(a, g.shape).reshape(x.shape)  # noqa: E731
    ns = np.abs((g - mean) * inv).reshape(x.shape) * s
    tol = per_group(dm * inv) * s + ns * (per_group(rel_inv) + 4 * U32) + 2 * U32 * (babs + np.abs(want)) + F32_TINY
    if np.asarray(x).dtype == np.float16:
        tol = tol + F16_STEP * np.abs(want) + F16_FLUSH
    return tol


def run(kernel, x, gamma, beta, *, num_groups=32, epsilon=None, variant=None, tunables=None) -> tuple[np.ndarray, str]:
    """One call, checked against the float64 reference (every element written, inputs untouched).
    Returns (Y, the variant that ran)."""
    inputs = {"X": x, "gamma": gamma, "beta": beta}
    attrs = {"num_groups": num_groups} | ({} if epsilon is None else {"epsilon": epsilon})
    eps = 1e-5 if epsilon is None else epsilon
    chosen = variant or kernel.explain(inputs, attrs=attrs, tunables=tunables).chosen
    want = reference(x, gamma, beta, num_groups, eps)
    poison_outputs(kernel, inputs, attrs=attrs, tunables=tunables)  # an unwritten element would show as NaN
    before = {k: v.copy() for k, v in inputs.items()}
    y = kernel(inputs, attrs=attrs, variant=variant, tunables=tunables)["Y"]
    for k, v in inputs.items():
        np.testing.assert_array_equal(v, before[k])
    what = f"{x.shape} {x.dtype} G={num_groups} {chosen} {tunables or {}}"
    assert isinstance(y, np.ndarray) and y.dtype == x.dtype and y.shape == x.shape, what
    if x.size:
        y64 = y.astype(np.float64)
        assert np.all(np.isfinite(y64)), f"{what}: {np.count_nonzero(~np.isfinite(y64))} non-finite values"
        wg = workgroup_size(tunables)
        k = chain(x.size // (x.shape[0] * num_groups), wg, uses_subgroups(chosen, tunables))
        tol = bound(x, gamma, beta, num_groups, eps, want, k=k, welford=chosen == "welford")
        assert_within_bound(y64, want, tol, what)
    return y, chosen


def accepted(kernel, inputs, attrs=None, tunables=None) -> list[str]:
    return [v.variant for v in kernel.explain(inputs, attrs=attrs, tunables=tunables).verdicts if v.accepted]


def run_every_variant(kernel, x, gamma, beta, *, num_groups=32, epsilon=None, tunables=None) -> list[str]:
    """Run on each variant whose `when` holds (as `webgpu-kernels test` does); returns their ids."""
    attrs = {"num_groups": num_groups}
    ids = accepted(kernel, {"X": x, "gamma": gamma, "beta": beta}, attrs, tunables)
    assert ids, "no variant accepts the call"
    for vid in ids:
        run(kernel, x, gamma, beta, num_groups=num_groups, epsilon=epsilon, variant=vid, tunables=tunables)
    return ids


def make_inputs(rng, shape, dtype, mean=0.3, std=1.5):
    """X ~ N(mean, std^2), gamma ~ U(0.5, 1.5), beta ~ N(0, 0.25^2), as trained GroupNorm weights look."""
    x = (mean + std * rng.standard_normal(shape)).astype(dtype)
    gamma = rng.uniform(0.5, 1.5, shape[1]).astype(dtype)
    beta = (0.25 * rng.standard_normal(shape[1])).astype(dtype)
    return x, gamma, beta


def meta(shape, dtype="float32"):
    return wk.TensorMeta(tuple(shape), dtype)


# --- the package ---------------------------------------------------------------------------------


def test_package_files():
    data = json.loads((PACKAGE / "manifest.json").read_text("utf-8"))
    assert check_manifest(data) == []
    assert [(v["id"], v["priority"]) for v in data["variants"]] == [("twopass_vec4", 30), ("twopass", 20),
                                                                     ("welford", 10)]  # fmt: skip
    assert all(v.get("when") for v in data["variants"])
    assert sorted(p.name for p in PACKAGE.glob("*.jinja")) == ["group-norm-twopass.wgsl.jinja",
                                                                "group-norm-welford.wgsl.jinja"]  # fmt: skip


def test_engine_has_no_code_for_it():
    assert_engine_has_no_code_for("GroupNorm")


def test_loads(group_norm):
    assert group_norm.op_id == "demo.GroupNorm"
    assert group_norm.variants == VARIANTS


def test_validates_and_its_test_json_passes(group_norm):
    assert_valid_and_passing(group_norm, PACKAGE, VARIANTS)


def test_expected_outputs_are_the_reference(group_norm):
    """test.json's expected outputs are the float64 reference of the case inputs (built by
    wk.test_case_inputs, as `test` builds them), rounded once to the output dtype."""
    from webgpu_kernels.casefile import read_test_file

    checked = 0
    for case in read_test_file(group_norm.package).cases:
        if case.refused is not None:
            continue
        inputs = wk.test_case_inputs(group_norm, case.name)
        x = inputs["X"]
        want = reference(x, inputs["gamma"], inputs["beta"], case.attrs.get("num_groups", 32),
                         case.attrs.get("epsilon", 1e-5))  # fmt: skip
        stored = case.build_expected(group_norm.package.read_bytes, {"Y": x.dtype.name})["Y"]
        # one ulp of slack: the generator's log/cos may differ in the last bit between math libraries
        np.testing.assert_allclose(stored, want.astype(x.dtype).astype(np.float64), rtol=float(np.finfo(x.dtype).eps),
                                   atol=float(np.finfo(x.dtype).smallest_subnormal), err_msg=case.name)  # fmt: skip
        checked += 1
    assert checked >= 30


# --- results -------------------------------------------------------------------------------------

# The GroupNorms of the SD 1.5 UNet at 512x512 (batch 2 for classifier-free guidance, 32 groups).
MODEL_SHAPES = [(2, 320, 64, 64), (2, 640, 32, 32), (2, 1280, 16, 16), (2, 1280, 8, 8)]


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("shape", MODEL_SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_model_shapes(group_norm, need_dtype, rng, shape, dtype):
    """The variant chosen on every shape; the other two on the two smaller ones only, whose groups
    (10240 and 2560 elements) already take several strides of the default workgroup, as the larger
    ones' do: the same shaders and branches, at a quarter of the reference's cost."""
    need_dtype(dtype)
    x, gamma, beta = make_inputs(rng, shape, dtype)
    _, chosen = run(group_norm, x, gamma, beta)
    assert chosen == "twopass_vec4"  # H * W is a multiple of 4 in every SD shape
    if x.size <= 2 * 1280 * 16 * 16:
        run(group_norm, x, gamma, beta, variant="twopass")
        run(group_norm, x, gamma, beta, variant="welford")


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize(
    ("shape", "num_groups", "tunables", "variants"),
    [
        ((2, 320, 4, 4), 32, None, VARIANTS),  # SD channel counts, small spatial size
        ((2, 64, 5, 7), 32, None, ["twopass", "welford"]),  # S = 35: no vec4; groups of 70 < WG
        ((1, 60, 10, 10), 6, {"WORKGROUP_SIZE": 256}, VARIANTS),  # groups of 1000 = 3 x 256 + 232
        ((1, 60, 10, 10), 6, None, VARIANTS),  # groups of 1000, fewer than the default workgroup
        ((1, 60, 10, 10), 6, {"WORKGROUP_SIZE": 96}, VARIANTS),  # WG not a power of two
        ((2, 32, 6, 6), 32, None, VARIANTS),  # groups of one channel (InstanceNorm)
        ((2, 16, 4, 4), 1, None, VARIANTS),  # one group per sample
        ((2, 64, 1, 1), 32, None, ["twopass", "welford"]),  # H * W = 1: groups of 2
        ((2, 64, 2, 2), 32, {"WORKGROUP_SIZE": 1}, VARIANTS),  # a workgroup of one invocation
        ((3, 30, 9), 5, None, ["twopass", "welford"]),  # rank 3: [N, C, L]
        ((1, 32, 2, 3, 4), 4, None, VARIANTS),  # rank 5: [N, C, D, H, W]
        ((2, 96, 3, 5), 32, {"WORKGROUP_SIZE": 64}, ["twopass", "welford"]),  # C = 96 not a multiple of 64
        ((1, 60, 10, 10), 6, {"SUBGROUPS": True}, VARIANTS),  # subgroupAdd sums where the device has them
        ((2, 40, 3, 3), 8, {"WORKGROUP_SIZE": 7, "SUBGROUPS": True}, ["twopass", "welford"]),
        # a workgroup of 33: a partial last subgroup, which lavapipe's num_subgroups leaves out
        ((1, 60, 10, 10), 6, {"WORKGROUP_SIZE": 33, "SUBGROUPS": True}, VARIANTS),
        ((2, 320, 8, 8), 32, {"WORKGROUP_SIZE": 1024}, VARIANTS),  # the largest workgroup tune tries
        ((2, 320, 8, 8), 32, {"WORKGROUP_SIZE": 1024, "SUBGROUPS": True}, VARIANTS),
        ((1, 60, 10, 10), 6, {"SPLIT": 1}, VARIANTS),  # one workgroup per group
        ((1, 60, 10, 10), 6, {"SPLIT": 7}, VARIANTS),  # shares of 36 vec4 units of 250, the last one 34
        ((2, 64, 1, 1), 32, {"SPLIT": 8}, ["twopass", "welford"]),  # groups of 2: six of the eight shares empty
        ((2, 320, 8, 8), 32, {"SPLIT": 64, "WORKGROUP_SIZE": 64}, VARIANTS),  # the largest SPLIT
    ],
    ids=str,
)
def test_edge_shapes(group_norm, need_dtype, need_workgroup_size, rng, shape, num_groups, tunables, variants, dtype):
    need_dtype(dtype)
    need_workgroup_size((tunables or {}).get("WORKGROUP_SIZE", 1))  # the default is clamped to the device
    x, gamma, beta = make_inputs(rng, shape, dtype)
    assert run_every_variant(group_norm, x, gamma, beta, num_groups=num_groups, tunables=tunables) == variants


@pytest.mark.parametrize("variant", ["twopass_vec4", "twopass"])
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_the_split_workgroups_of_a_group_agree_bit_for_bit(group_norm, need_dtype, rng, dtype, variant):
    """Each of a group's SPLIT workgroups computes the whole group's statistics in the same order
    and writes its share of Y: Y does not depend on SPLIT, to the bit (a share written with another
    share's statistics, or by two workgroups, would show)."""
    need_dtype(dtype)
    x, gamma, beta = make_inputs(rng, (2, 320, 8, 8), dtype)
    inputs = {"X": x, "gamma": gamma, "beta": beta}
    one = group_norm(inputs, variant=variant, tunables={"SPLIT": 1})["Y"]
    for split in (2, 3, 5, 64):
        np.testing.assert_array_equal(group_norm(inputs, variant=variant, tunables={"SPLIT": split})["Y"], one,
                                      err_msg=f"SPLIT {split}")  # fmt: skip


def test_split_is_bounded(group_norm):
    inputs = {"X": meta((2, 64, 4, 4)), "gamma": meta((64,)), "beta": meta((64,))}
    for split in (0, 65):
        verdict = group_norm.explain(inputs, tunables={"SPLIT": split}).verdicts
        assert [(v.variant, v.clause) for v in verdict[:2]] == [("twopass_vec4", "splitOk"), ("twopass", "splitOk")]
        assert group_norm.explain(inputs, tunables={"SPLIT": split}).chosen == "welford"


@pytest.mark.parametrize("variant", ["twopass", "welford"])
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_a_group_of_one_element_gives_beta_exactly(group_norm, need_dtype, rng, dtype, variant):
    """G = C and H * W = 1: each group is one element, its variance 0, x - mean exactly 0: Y is beta."""
    need_dtype(dtype)
    x, gamma, beta = make_inputs(rng, (3, 32, 1, 1), dtype)
    y = group_norm({"X": x, "gamma": gamma, "beta": beta}, variant=variant)["Y"]
    np.testing.assert_array_equal(y, np.broadcast_to(beta.reshape(1, 32, 1, 1), x.shape))


@pytest.mark.parametrize("variant", VARIANTS)
def test_constant_groups_and_epsilon(group_norm, rng, variant):
    """Groups whose values are all equal have no variance: Y is beta whatever epsilon is."""
    x = np.repeat(np.array([3.0, -0.5, 0.0, 1024.0], np.float32), 4 * 16).reshape(1, 16, 4, 4)  # G = 4
    gamma, beta = rng.uniform(0.5, 1.5, 16).astype(np.float32), rng.standard_normal(16).astype(np.float32)
    for eps in (1e-5, 1e-6, 0.25):
        y, _ = run(group_norm, x, gamma, beta, num_groups=4, epsilon=eps, variant=variant)
        np.testing.assert_array_equal(y, np.broadcast_to(beta.reshape(1, 16, 1, 1), x.shape))


@pytest.mark.parametrize("variant", VARIANTS)
def test_offset_data_keeps_its_variance(group_norm, rng, variant):
    """X = 1000 + N(0, 1) in f32: |mean| / stddev = 1000. E[x^2] - E[x]^2 in f32 would lose the
    variance to cancellation (1e6 * 2^-24 ~ 0.06 absolute per term); the two-pass and Welford
    variances keep Y within a few 1e-4 of the float64 reference."""
    x = (1000.0 + rng.standard_normal((2, 64, 16, 16))).astype(np.float32)
    gamma, beta = np.ones(64, np.float32), np.zeros(64, np.float32)
    y, _ = run(group_norm, x, gamma, beta, variant=variant)
    err = np.abs(y.astype(np.float64) - reference(x, gamma, beta)).max()
    assert err < 2e-3, err


@pytest.mark.parametrize("variant", VARIANTS)
def test_gamma_and_beta_follow_the_channel(group_norm, variant):
    """Integer-valued data whose statistics are exact: Y = n * gamma[c] + beta[c] with distinct
    gamma and beta per channel, so reading another channel's (or group's) gamma shows at once."""
    n = np.tile(np.array([-1.0, 1.0, -1.0, 1.0], np.float32), 8 * 4).reshape(1, 8, 4, 4)  # mean 0, var 1
    gamma, beta = np.arange(1, 9, dtype=np.float32), np.arange(8, dtype=np.float32) * 10
    y = group_norm({"X": n, "gamma": gamma, "beta": beta}, attrs={"num_groups": 2, "epsilon": 0.0}, variant=variant)[
        "Y"
    ]
    np.testing.assert_array_equal(y, n * gamma.reshape(1, 8, 1, 1) + beta.reshape(1, 8, 1, 1))


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_many_groups_spill_the_grid(group_norm, plan_of, need_dtype, rng, dtype):
    """2049 x 32 = 65568 groups, one workgroup each: more than maxComputeWorkgroupsPerDimension
    (65535), so the engine spills the grid into y and the shaders linearise the workgroup index."""
    need_dtype(dtype)
    x, gamma, beta = make_inputs(rng, (2049, 64, 1, 1), dtype)
    tunables = {"WORKGROUP_SIZE": 2}
    for vid in ("twopass", "welford"):
        grid = (
            plan_of(group_norm, {"X": x, "gamma": gamma, "beta": beta}, variant=vid, tunables=tunables).passes[0].grid
        )
        assert grid[1] > 1 and grid[0] * grid[1] * grid[2] >= 2049 * 32
    assert run_every_variant(group_norm, x, gamma, beta, tunables=tunables) == ["twopass", "welford"]


@pytest.mark.parametrize("variant", VARIANTS)
# the last two: dimensions whose products would not fit the u32 uniform fields if X were not empty
@pytest.mark.parametrize(
    "shape", [(0, 32, 4, 4), (2, 32, 0, 4), (2, 0, 4, 4), (0, 64, 2**20, 2**20), (2**40, 0, 4, 4)], ids=str
)
def test_empty_inputs(group_norm, plan_of, variant, shape):
    """No elements: an empty Y, nothing dispatched."""
    inputs = {"X": np.zeros(shape, np.float32), "gamma": np.ones(shape[1], np.float32),
              "beta": np.zeros(shape[1], np.float32)}  # fmt: skip
    assert group_norm(inputs, variant=variant)["Y"].shape == shape
    assert all(p.grid == (0, 0, 0) for p in plan_of(group_norm, inputs, variant=variant).passes)


# --- selection, errors ---------------------------------------------------------------------------


def test_explain(group_norm):
    sd = {"X": meta((2, 320, 64, 64), "float16"), "gamma": meta((320,), "float16"), "beta": meta((320,), "float16")}
    explanation = group_norm.explain(sd)
    assert explanation.chosen == "twopass_vec4"
    assert {k: explanation.values[k] for k in ("N", "C", "S", "G", "channelsPerGroup", "groups", "groupLen")} == {
        "N": 2, "C": 320, "S": 4096, "G": 32, "channelsPerGroup": 10, "groups": 64, "groupLen": 40960}  # fmt: skip
    odd = {"X": meta((2, 64, 5, 7)), "gamma": meta((64,)), "beta": meta((64,))}
    explanation = group_norm.explain(odd)
    assert explanation.chosen == "twopass"
    assert (explanation.verdicts[0].variant, explanation.verdicts[0].clause) == ("twopass_vec4", "vec4Ok")


def test_forced_vec4_on_odd_spatial_size_is_refused(group_norm):
    inputs = {
        "X": np.zeros((2, 64, 5, 7), np.float32),
        "gamma": np.ones(64, np.float32),
        "beta": np.zeros(64, np.float32),
    }
    with pytest.raises(errors.VariantRejectedError) as info:
        group_norm(inputs, variant="twopass_vec4")
    assert (info.value.variant, info.value.clause) == ("twopass_vec4", "vec4Ok")


def test_contract_errors(group_norm):
    f32 = np.float32
    x, g, b = np.ones((2, 64, 4, 4), f32), np.ones(64, f32), np.zeros(64, f32)
    with pytest.raises(errors.SelectionError) as info:  # gamma must be [C]
        group_norm({"X": x, "gamma": np.ones(65, f32), "beta": b})
    assert "gammaOk=False" in str(info.value) and "shapes.gamma=[65]" in str(info.value)
    with pytest.raises(errors.SelectionError) as info:  # [1, C] is not [C] either
        group_norm({"X": x, "gamma": np.ones((1, 64), f32), "beta": b})
    assert "gammaOk=False" in str(info.value)
    with pytest.raises(errors.SelectionError) as info:
        group_norm({"X": x, "gamma": g, "beta": np.zeros(32, f32)})
    assert "betaOk=False" in str(info.value)
    with pytest.raises(errors.SelectionError) as info:  # C = 30 is no multiple of 32 groups
        group_norm({"X": np.ones((2, 30, 4, 4), f32), "gamma": np.ones(30, f32), "beta": np.zeros(30, f32)})
    assert "groupsOk=False" in str(info.value) and "C=30" in str(info.value) and "G=32" in str(info.value)
    with pytest.raises(errors.SelectionError) as info:
        group_norm({"X": x, "gamma": g, "beta": b}, attrs={"num_groups": 0})
    assert "groupsOk=False" in str(info.value)
    with pytest.raises(errors.SelectionError) as info:  # any G divides C = 0, but must fit the u32 field
        group_norm({"X": np.ones((2, 0, 4, 4), f32), "gamma": np.ones(0, f32), "beta": np.ones(0, f32)},
                   attrs={"num_groups": 2**40})  # fmt: skip
    assert "groupsOk=False" in str(info.value)
    with pytest.raises(errors.SelectionError) as info:
        group_norm({"X": x, "gamma": g, "beta": b}, attrs={"epsilon": -1e-5})
    assert "epsilonOk=False" in str(info.value)
    with pytest.raises(errors.AttributeValueError) as info:
        group_norm({"X": x, "gamma": g, "beta": b}, attrs={"num_groups": 2.5})
    assert info.value.argument == "num_groups"
    with pytest.raises(errors.RankError) as info:  # rank >= 3
        group_norm({"X": np.ones((2, 64), f32), "gamma": g, "beta": b})
    assert info.value.argument == "X" and "expected rank 3" in str(info.value)
    with pytest.raises(errors.DTypeError) as info:
        group_norm({"X": x, "gamma": g, "beta": b.astype(np.float16)})
    assert info.value.argument == "beta"
    with pytest.raises(errors.DTypeError):
        group_norm({"X": x.astype(np.float64), "gamma": g, "beta": b})
    with pytest.raises(errors.MissingInputError) as info:
        group_norm({"X": x, "gamma": g})
    assert info.value.argument == "beta"


# --- rendering and pipelines ---------------------------------------------------------------------


def test_render_vec4(group_norm, need_dtype):
    need_dtype(np.float16)
    inputs = {"X": meta((2, 320, 8, 8), "float16"), "gamma": meta((320,), "float16"), "beta": meta((320,), "float16")}
    text = group_norm.render(inputs)["main"]
    assert text.lstrip().startswith("enable f16;")
    assert "var<storage, read> x: array<vec4<f16>>;" in text and "var<storage, read_write> y: array<vec4<f16>>;" in text
    assert "var<storage, read> gamma: array<f16>;" in text
    first_stride = 1 << (workgroup_size(None) - 1).bit_length() - 1  # the largest power of two below WG
    assert "subgroupAdd" not in text and f"partial[lix + {first_stride}u]" in text


def test_render_subgroups(group_norm):
    if "subgroups" not in wk.get_device().info.feature_names:
        pytest.skip("this adapter has no subgroups")
    inputs = {"X": meta((2, 64, 4, 4)), "gamma": meta((64,)), "beta": meta((64,))}
    text = group_norm.render(inputs, tunables={"SUBGROUPS": True})["main"]
    assert "let s = subgroupAdd(value);" in text and "partial[lix + " not in text
    assert "@builtin(subgroup_id) sid: u32" in text and "enable subgroups" not in text
    welford = group_norm.render(inputs, variant="welford", tunables={"SUBGROUPS": True})["main"]
    assert "subgroupAdd" not in welford


def test_shape_travels_in_the_uniform(group_norm, plan_of):
    """Shapes and attributes are uniform fields: other shapes, group counts and epsilons reuse the pipeline."""
    a = plan_of(group_norm, {"X": np.ones((2, 64, 5, 7), np.float32), "gamma": np.ones(64, np.float32),
                             "beta": np.ones(64, np.float32)}, variant="twopass")  # fmt: skip
    b = plan_of(group_norm, {"X": np.ones((1, 30, 9), np.float32), "gamma": np.ones(30, np.float32),
                             "beta": np.ones(30, np.float32)}, variant="twopass",
                attrs={"num_groups": 5, "epsilon": 1e-6})  # fmt: skip
    assert [p.pipeline for p in a.passes] == [p.pipeline for p in b.passes]


# --- a property test -----------------------------------------------------------------------------


@st.composite
def group_norm_calls(draw):
    rank = draw(st.integers(3, 5))
    groups = draw(st.integers(1, 6))
    per_group = draw(st.integers(1, 5))
    shape = (draw(st.integers(1, 3)), groups * per_group) + tuple(draw(st.lists(st.integers(1, 7), min_size=rank - 2,
                                                                                max_size=rank - 2)))  # fmt: skip
    wg = draw(st.sampled_from([1, 3, 32, 64, 256]))
    split = draw(st.sampled_from([1, 2, 3, 4, 9]))
    return shape, groups, draw(st.sampled_from(DTYPES)), wg, split, draw(st.booleans()), draw(st.integers(0, 2**32 - 1))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(call=group_norm_calls())
def test_property_any_shape(group_norm, call):
    """Random ranks (3 to 5), group counts and sizes, dtypes, workgroup sizes and splits, on every
    variant that accepts them: the vec4 variant exactly when S % 4 == 0."""
    shape, groups, dtype, wg, split, subgroups, seed = call
    if dtype == np.float16 and not wk.get_device().has_f16:
        return
    x, gamma, beta = make_inputs(np.random.default_rng(seed), shape, dtype)
    tunables = {"WORKGROUP_SIZE": wg, "SPLIT": split, "SUBGROUPS": subgroups}
    ran = run_every_variant(group_norm, x, gamma, beta, num_groups=groups, tunables=tunables)
    assert ran == (VARIANTS if math.prod(shape[2:]) % 4 == 0 else ["twopass", "welford"])


# --- writing test.json ---------------------------------------------------------------------------
# python tests/test_group_norm_package.py  writes test.json, its .npy files and metadata.json.

INLINE_MAX = 64  # outputs of at most this many elements are written inline
TOLERANCES = {"float32": {"rtol": 1e-5, "atol": 1e-5}, "float16": {"rtol": 2e-3, "atol": 1e-3}}
BOTH = ("float32", "float16")

# name, X shape, num_groups, dtypes, options (description, tunables, attrs, tolerances, x_mean, x_std)
CASES: list[tuple[str, list[int], int, tuple[str, ...], dict[str, Any]]] = [
    ("sd15-2x320x4x4", [2, 320, 4, 4], 32, BOTH,
     {"description": "SD 1.5 UNet, 320 channels (the model runs 2x320x64x64): groups of 10 channels"}),
    ("sd15-2x640x4x4", [2, 640, 4, 4], 32, BOTH, {"description": "640 channels (2x640x32x32): groups of 20 channels"}),
    ("sd15-2x1280x2x2", [2, 1280, 2, 2], 32, BOTH, {"description": "1280 channels (2x1280x16x16): groups of 40"}),
    ("sd15-mid-2x1280x8x8", [2, 1280, 8, 8], 32, ("float16",),
     {"description": "the SD 1.5 mid block's real shape (groups of 2560 elements)"}),
    ("sd15-group-1x10x64x64-g1", [1, 10, 64, 64], 1, BOTH,
     {"description": "one group of 40960 elements, as long as a group of SD's 2x320x64x64 (10 channels of 64x64)"}),
    ("odd-2x64x5x7", [2, 64, 5, 7], 32, BOTH,
     {"description": "H*W = 35, not a multiple of 4: no vec4; groups of 70, fewer than the workgroup"}),
    ("tail-1x60x10x10-g6", [1, 60, 10, 10], 6, BOTH,
     {"description": "groups of 1000 = 3 x 256 + 232", "tunables": {"WORKGROUP_SIZE": 256}}),
    ("wg96-1x60x10x10-g6", [1, 60, 10, 10], 6, BOTH,
     {"description": "workgroups of 96 (not a power of two)", "tunables": {"WORKGROUP_SIZE": 96}}),
    ("wg64-2x96x3x5", [2, 96, 3, 5], 32, BOTH,
     {"description": "C = 96, not a multiple of the workgroup of 64; groups of 45", "tunables": {"WORKGROUP_SIZE": 64}}),
    ("wg1-2x64x2x2", [2, 64, 2, 2], 32, BOTH,
     {"description": "a workgroup of one invocation", "tunables": {"WORKGROUP_SIZE": 1}}),
    ("subgroups-1x60x10x10-g6", [1, 60, 10, 10], 6, BOTH,
     {"description": "SUBGROUPS on: the two-pass sums with subgroupAdd where the device has subgroups",
      "tunables": {"SUBGROUPS": True}}),
    ("instance-2x32x6x6", [2, 32, 6, 6], 32, BOTH, {"description": "groups of one channel (G = C: InstanceNorm)"}),
    ("layer-2x16x4x4-g1", [2, 16, 4, 4], 1, BOTH, {"description": "one group per sample (G = 1)"}),
    ("hw1-2x64x1x1", [2, 64, 1, 1], 32, BOTH, {"description": "H*W = 1: groups of two elements"}),
    ("hw1-g32-3x32x1x1", [3, 32, 1, 1], 32, BOTH,
     {"description": "H*W = 1 and G = C: groups of one element, variance 0, Y = beta"}),
    ("rank3-3x30x9-g5", [3, 30, 9], 5, BOTH, {"description": "rank 3 [N, C, L]"}),
    ("rank5-1x32x2x3x4-g4", [1, 32, 2, 3, 4], 4, BOTH, {"description": "rank 5 [N, C, D, H, W]"}),
    ("eps-1e-6-2x64x4x4", [2, 64, 4, 4], 32, BOTH,
     {"description": "the SD VAE's epsilon 1e-6", "attrs": {"epsilon": 1e-6}}),
    ("offset-2x32x8x8-g8", [2, 32, 8, 8], 8, BOTH,
     {"description": "X = 100 + N(0, 1): |mean| / stddev = 100, which E[x^2] - E[x]^2 would get wrong. float32 atol "
                     "2e-4: the mean's rounding (k = 12 roundings of values up to 104: 2 k 2^-24 104 = 1.5e-4, times "
                     "InvStdDev ~ 1) dominates; lavapipe shows 1.2e-5",
      "x_mean": 100.0, "x_std": 1.0, "tolerances": {"float32": {"atol": 2e-4}}}),
    ("spill-2049x64x1x1", [2049, 64, 1, 1], 32, ("float16",),
     {"description": "65568 groups at WORKGROUP_SIZE 2: the grid spills past 65535 workgroups into y",
      "tunables": {"WORKGROUP_SIZE": 2}}),
    ("empty-0x32x4x4", [0, 32, 4, 4], 32, BOTH, {"description": "N = 0: nothing dispatched"}),
    # later additions go last, so that the cases above keep their seeds (2000 + 10 * index)
    ("split1-1x60x10x10-g6", [1, 60, 10, 10], 6, BOTH,
     {"description": "SPLIT 1: one workgroup per group writes all of it", "tunables": {"SPLIT": 1}}),
    ("split7-1x60x10x10-g6", [1, 60, 10, 10], 6, BOTH,
     {"description": "SPLIT 7: shares of 36 vec4 units of 250 (143 elements of 1000 on twopass), the last one 34 (142)", "tunables": {"SPLIT": 7}}),
    ("split8-2x64x1x1", [2, 64, 1, 1], 32, ("float32",),
     {"description": "SPLIT 8 on groups of 2 elements: six of each group's eight shares are empty",
      "tunables": {"SPLIT": 8}}),
]  # fmt: skip

F32_INPUTS = {"X": {"shape": [2, 64, 4, 4], "generate": {"distribution": "normal", "seed": 7}},
              "gamma": {"shape": [64], "generate": {"distribution": "uniform", "seed": 8, "low": 0.5, "high": 1.5}},
              "beta": {"shape": [64], "generate": {"distribution": "normal", "seed": 9, "std": 0.25}}}  # fmt: skip


def refused_cases() -> list[dict[str, Any]]:
    def with_inputs(**changes):
        inputs = json.loads(json.dumps(F32_INPUTS))
        for role, entry in changes.items():
            inputs[role] = entry
        return inputs

    normal = {"distribution": "normal", "seed": 11}
    return [
        {"name": "refused-gamma-65", "description": "gamma of 65 elements for C = 64", "types": {"T": "float32"},
         "inputs": with_inputs(gamma={"shape": [65], "generate": normal}),
         "refused": {"error": "SelectionError", "message": "gammaOk=False"}},
        {"name": "refused-gamma-1x64", "description": "gamma of shape [1, C], not [C]", "types": {"T": "float32"},
         "inputs": with_inputs(gamma={"shape": [1, 64], "generate": normal}),
         "refused": {"error": "SelectionError", "message": "gammaOk=False"}},
        {"name": "refused-beta-32", "types": {"T": "float32"}, "inputs": with_inputs(beta={"shape": [32], "generate": normal}),
         "refused": {"error": "SelectionError", "message": "betaOk=False"}},
        {"name": "refused-c30-g32", "description": "C = 30 is not a multiple of num_groups = 32", "types": {"T": "float32"},
         "inputs": with_inputs(X={"shape": [2, 30, 4, 4], "generate": normal}, gamma={"shape": [30], "generate": normal},
                               beta={"shape": [30], "generate": normal}),
         "refused": {"error": "SelectionError", "message": "groupsOk=False"}},
        {"name": "refused-num-groups-0", "types": {"T": "float32"}, "attrs": {"num_groups": 0}, "inputs": with_inputs(),
         "refused": {"error": "SelectionError", "message": "groupsOk=False"}},
        {"name": "refused-num-groups-2.5", "types": {"T": "float32"}, "attrs": {"num_groups": 2.5}, "inputs": with_inputs(),
         "refused": {"error": "AttributeValueError", "message": "num_groups"}},
        {"name": "refused-negative-epsilon", "types": {"T": "float32"}, "attrs": {"epsilon": -1e-5},
         "inputs": with_inputs(), "refused": {"error": "SelectionError", "message": "epsilonOk=False"}},
        {"name": "refused-rank2", "description": "X of rank 2: rank >= 3 is required", "types": {"T": "float32"},
         "inputs": with_inputs(X={"shape": [2, 64], "generate": normal}),
         "refused": {"error": "RankError", "message": "expected rank 3"}},
        {"name": "refused-int32", "types": {"T": "int32"}, "inputs": with_inputs(),
         "refused": {"error": "DTypeError", "message": "int32"}},
        {"name": "refused-beta-f16", "types": {"T": "float32"},
         "inputs": with_inputs(beta={"shape": [64], "dtype": "float16", "generate": normal}),
         "refused": {"error": "DTypeError", "message": "float16"}},
        {"name": "refused-vec4-odd", "description": "twopass_vec4 forced on H*W = 35", "types": {"T": "float32"},
         "inputs": with_inputs(X={"shape": [2, 64, 5, 7], "generate": normal}), "variants": ["twopass_vec4"],
         "refused": {"error": "VariantRejectedError", "message": "vec4Ok"}},
    ]  # fmt: skip


def case_document() -> dict[str, Any]:
    """test.json without its expected outputs (filled in by write_test_files)."""
    cases = []
    for index, (name, shape, num_groups, dtypes, options) in enumerate(CASES):
        for dtype in dtypes:
            seed = 2000 + 10 * index + (0 if dtype == "float32" else 5)
            x_gen = {"distribution": "normal", "seed": seed, "mean": options.get("x_mean", 0.3),
                     "std": options.get("x_std", 1.5)}  # fmt: skip
            c = shape[1]
            case: dict[str, Any] = {"name": f"{name}-{'f32' if dtype == 'float32' else 'f16'}"}
            if "description" in options:
                case["description"] = options["description"]
            case["types"] = {"T": dtype}
            case["attrs"] = {"num_groups": num_groups} | options.get("attrs", {})
            if "tunables" in options:
                case["tunables"] = options["tunables"]
            if "tolerances" in options:
                case["tolerances"] = options["tolerances"]
            case["inputs"] = {
                "X": {"shape": shape, "generate": x_gen},
                "gamma": {
                    "shape": [c],
                    "generate": {"distribution": "uniform", "seed": seed + 1, "low": 0.5, "high": 1.5},
                },
                "beta": {"shape": [c], "generate": {"distribution": "normal", "seed": seed + 2, "std": 0.25}},
            }
            case["expected"] = {"Y": {}}
            cases.append(case)
    return {
        "description": (
            "Correctness cases for demo.GroupNorm: the SD 1.5 UNet's channel counts (320, 640, 1280, 32 groups) on "
            "small spatial sizes, the mid block's real 2x1280x8x8, one group as long as SD's longest (40960), H*W "
            "not a multiple of 4, groups shorter than and not a multiple of the workgroup, workgroups of 96, 64 and "
            "1, SPLIT 1, 7 and 8 (empty shares), subgroup sums, groups of one channel, one group, H*W = 1, groups of one element, ranks 3 and 5, "
            "epsilon 1e-6, offset data, a grid spilled past 65535 workgroups, an empty X, and the calls the contract "
            "refuses. Inputs: X ~ N(0.3, 1.5^2) (offset case N(100, 1)), gamma ~ U(0.5, 1.5), beta ~ N(0, 0.25^2). "
            "Expected Y: the float64 reference of tests/test_group_norm_package.py (which writes this file) on the "
            "typed inputs, rounded once to the output type. Tolerances: float32 rtol 1e-5, atol 1e-5 (on lavapipe "
            "the largest float32 error is about 1e-6 with |Y| < 10; the per-element worst-case bound in the test "
            "module is looser); float16 rtol 2e-3 = 2^-9, two f16 ulps (WGSL lets the f32 -> f16 conversion round "
            "either way, on top of the f32 arithmetic), atol 1e-3 for elements near zero, where beta cancels "
            "(X - mean) / std * gamma."
        ),
        "tolerances": TOLERANCES,
        "cases": cases + refused_cases(),
    }


def write_test_files() -> None:
    from webgpu_kernels.digests import write_metadata

    document = case_document()
    (PACKAGE / "test.json").write_text(json.dumps(document, indent=1) + "\n", encoding="utf-8")
    kernel = wk.load_kernel(PACKAGE, verify_digests=False)
    written = set()
    for spec in document["cases"]:
        if "expected" not in spec:
            continue
        arrays = wk.test_case_inputs(kernel, {k: v for k, v in spec.items() if k != "expected"})
        attrs = spec["attrs"]
        x = arrays["X"]
        stored = reference(x, arrays["gamma"], arrays["beta"], attrs["num_groups"], attrs.get("epsilon", 1e-5)).astype(
            x.dtype
        )
        if stored.size <= INLINE_MAX:
            spec["expected"]["Y"] = {"shape": list(stored.shape), "values": [float(v) for v in stored.ravel()]}
        else:
            file = f"{spec['name']}.Y.npy"
            np.save(PACKAGE / file, stored)
            written.add(file)
            spec["expected"]["Y"] = {"file": file}
    for stale in PACKAGE.glob("*.npy"):
        if stale.name not in written:
            stale.unlink()
    (PACKAGE / "test.json").write_text(json.dumps(document, indent=1) + "\n", encoding="utf-8")
    write_metadata(PACKAGE)
    print(f"wrote {PACKAGE / 'test.json'}: {len(document['cases'])} cases, {len(written)} data files")


if __name__ == "__main__":
    write_test_files()
    sys.exit(0)
