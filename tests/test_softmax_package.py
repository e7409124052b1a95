"""tests/packages/demo.Softmax: a third-party package written from the docs alone by a kernel
author, softmax over the last axis with a workgroup tree reduction, run through
load_kernel() with no engine change. Its workgroup variant reads its row from ``workgroupIndex``.

Results are judged against a float64 NumPy softmax. The bound per element follows WGSL's accuracy
rules: exp(x) in f32 is within 3 + 2|x| ULP (WGSL spec, "Floating Point Accuracy"), applied to
x - max; the row's sum of n terms in f32 adds at most about n * 2^-24 relative (Higham 4.2); the
division and the product a few ULP more; a float16 output one f16 rounding (2^-11). Outputs
below the normal range may be flushed to zero (lavapipe), hence the absolute floor.
"""

from __future__ import annotations

import json

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
    stored_expectations,
)

PACKAGE = PACKAGES_DIR / "demo.Softmax"
VARIANTS = ("row", "workgroup")


@pytest.fixture(scope="module")
def softmax():
    return wk.load_kernel(PACKAGE)


def reference(x: np.ndarray) -> np.ndarray:
    x = x.astype(np.float64)
    if x.size == 0:
        return x.copy()
    with np.errstate(invalid="ignore"):  # an all -inf row is NaN, as in the kernel
        e = np.exp(x - x.max(axis=-1, keepdims=True))
        return e / e.sum(axis=-1, keepdims=True)


def assert_softmax(y: np.ndarray, x: np.ndarray) -> None:
    assert y.shape == x.shape and y.dtype == x.dtype
    want = reference(x)
    x64 = x.astype(np.float64)
    distance = np.abs(x64 - x64.max(axis=-1, keepdims=True)) if x.size else x64
    cols = x.shape[-1]
    rtol = (3 + 2 * distance) * 2.0**-23 + (cols + 4) * 2.0**-24
    floor = float(np.finfo(np.float32).tiny)
    if x.dtype == np.float16:
        rtol, floor = rtol + 2.0**-11, 2.0**-14
    error = np.abs(y.astype(np.float64) - want)
    bad = ~(error <= rtol * want + floor)
    assert not bad.any(), f"{int(bad.sum())} of {y.size} elements off; worst {error[bad].max()} at {np.argwhere(bad)[0]}"


def run(softmax, x, **options) -> np.ndarray:
    poison_outputs(softmax, {"X": x}, **{k: v for k, v in options.items() if k == "tunables"})
    before = x.copy()
    y = softmax({"X": x}, **options)["Y"]
    assert np.array_equal(x, before, equal_nan=True)
    return y


def accepted(softmax, x, tunables=None) -> list[str]:
    return [v.variant for v in softmax.explain({"X": x}, tunables=tunables).verdicts if v.accepted]


# --- the package ---------------------------------------------------------------------------------


def test_package_files():
    data = json.loads((PACKAGE / "manifest.json").read_text("utf-8"))
    assert check_manifest(data) == []
    assert [(v["id"], v["priority"]) for v in data["variants"]] == [("row", 20), ("workgroup", 10)]
    assert "{{ workgroupIndex }}" in (PACKAGE / "softmax-wg.wgsl.jinja").read_text("utf-8")


def test_engine_has_no_code_for_it():
    assert_engine_has_no_code_for("Softmax")


def test_validates_and_its_test_json_passes(softmax):
    assert_valid_and_passing(softmax, PACKAGE, VARIANTS)


def test_expected_outputs_are_the_reference(softmax):
    """test.json's expected outputs are the float64 reference rounded once to the output dtype
    (scripts/make_softmax_cases.py writes them), independent of the WGSL."""
    for case, inputs, stored in stored_expectations(softmax, "Y", lambda ins: ins["X"].dtype.name):
        x = inputs["X"]
        np.testing.assert_array_equal(stored, reference(x).astype(x.dtype), err_msg=case.name)


# --- results -------------------------------------------------------------------------------------

# Attention scores: CLIP text (12 heads, 77 tokens), SD 1.5 cross-attention at 32x32 latents
# (8 heads, 1024 queries over 77 text tokens); and short rows the row variant takes.
SHAPES = [(1, 12, 77, 77), (2, 8, 1024, 77), (4096, 32), (3, 64)]


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_model_shapes_on_every_variant_that_takes_them(softmax, need_dtype, rng, shape, dtype):
    need_dtype(dtype)
    x = (rng.standard_normal(shape) * 4).astype(dtype)
    variants = accepted(softmax, x)
    assert variants == (["row", "workgroup"] if shape[-1] <= 64 else ["workgroup"])
    for variant in variants:
        assert_softmax(run(softmax, x, variant=variant), x)


@pytest.mark.parametrize("variant", VARIANTS)
def test_many_rows_spill_the_grid(softmax, plan_of, rng, variant):
    """70,001 rows at WORKGROUP_SIZE 1: one workgroup per row (workgroup) or per invocation (row),
    past 65,535 workgroups, so the grid spills into y and each row is still computed once."""
    x = rng.standard_normal((70_001, 3)).astype(np.float32)
    tunables = {"WORKGROUP_SIZE": 1}
    grid = plan_of(softmax, {"X": x}, variant=variant, tunables=tunables).passes[0].grid
    assert grid[1] > 1 and grid[0] * grid[1] * grid[2] >= 70_001
    assert_softmax(run(softmax, x, variant=variant, tunables=tunables), x)


def test_a_rank_0_input_is_refused(softmax):
    with pytest.raises(errors.RankError) as info:
        softmax({"X": np.float32(1.0)})
    assert info.value.argument == "X"


def test_a_workgroup_size_not_a_power_of_two_is_refused(softmax):
    x = np.ones((2, 100), np.float32)
    with pytest.raises(errors.SelectionError, match="wgPow2"):
        softmax({"X": x}, tunables={"WORKGROUP_SIZE": 96})


@st.composite
def softmax_calls(draw):
    rank = draw(st.integers(1, 3))
    shape = tuple(draw(st.lists(st.integers(1, 70), min_size=rank, max_size=rank)))
    wg = draw(st.sampled_from([1, 8, 32, 128]))
    return shape, draw(st.sampled_from(DTYPES)), wg, draw(st.floats(0.1, 30)), draw(st.integers(0, 2**32 - 1))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(call=softmax_calls())
def test_property_any_shape_and_workgroup_size(softmax, call):
    """Random shapes (rank 1 to 3, up to 70 per axis), dtypes, spreads and workgroup sizes, on
    every variant that accepts them."""
    shape, dtype, wg, spread, seed = call
    if dtype == np.float16 and not wk.get_device().has_f16:
        return
    x = (np.random.default_rng(seed).standard_normal(shape) * spread).astype(dtype)
    tunables = {"WORKGROUP_SIZE": wg}
    variants = accepted(softmax, x, tunables)
    assert variants, shape
    for variant in variants:
        assert_softmax(run(softmax, x, variant=variant, tunables=tunables), x)
