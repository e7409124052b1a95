"""tests/packages/com.example.Attention: a third-party package written from the docs alone
, scaled dot-product attention softmax(Q K^T * scale + mask) V in six variants: a
tiled one-pass kernel staging K and V in workgroup memory, one invocation per query row, and three
passes through the optional float32 output P (the format has no scratch buffers), each with and
without the optional mask (a variant's bindings are fixed). It runs through load_kernel() with no
engine change.

Results are judged against the float64 NumPy reference of tests/attention_reference.py. The
bound per output follows WGSL's f32 accuracy: a score of D products is off by about
(D + 2) * 2^-24 * scale * sum |q_d k_d|, exp(x) by (3 + 2|x|) ULP over the row's score range, the
sums of T terms by (T + 4) * 2^-24; each moves an output by at most that much of the row's
largest |V|. A float16 output adds one f16 rounding (2^-11 of the value, or half the smallest
subnormal).
"""

from __future__ import annotations

import json

import numpy as np
import pytest

import webgpu_kernels as wk
from webgpu_kernels import errors
from webgpu_kernels.manifest import check_manifest

import attention_reference as reference_module  # tests/, beside conftest: the sdist ships it
from conftest import (
    DTYPE_IDS,
    DTYPES,
    PACKAGES_DIR,
    assert_engine_has_no_code_for,
    assert_valid_and_passing,
    poison_outputs,
    stored_expectations,
)

PACKAGE = PACKAGES_DIR / "com.example.Attention"
VARIANTS = ("tiled", "tiled_mask", "rows", "rows_mask", "passes", "passes_mask")
EPS = 2.0**-24


@pytest.fixture(scope="module")
def attention():
    return wk.load_kernel(PACKAGE)


def reference(inputs: dict, scale: float = 0.0) -> dict:
    return reference_module.attention(inputs, {"scale": scale})


def assert_attention(out: dict, inputs: dict, scale: float = 0.0) -> None:
    q, k, v = (inputs[r].astype(np.float64) for r in "QKV")
    want = reference(inputs, scale)
    y = out["Y"]
    assert y.shape == want["Y"].shape and y.dtype == inputs["Q"].dtype
    if y.size == 0:
        return
    s = reference_module.effective_scale(scale, q.shape[-1])
    magnitude = np.abs(q) @ np.swapaxes(np.abs(k), -1, -2) * abs(s)  # sum_d |q_d k_d| * scale
    scores = q @ np.swapaxes(k, -1, -2) * s
    if "mask" in inputs:
        scores = scores + inputs["mask"].astype(np.float64)
    finite = np.where(np.isfinite(scores), scores, np.nan)
    spread = np.nanmax(finite, axis=-1, keepdims=True) - np.nanmin(finite, axis=-1, keepdims=True)
    d, t = q.shape[-1], k.shape[-2]
    per_row = ((d + 2) * EPS * 2 * magnitude.max(axis=-1, keepdims=True) + (3 + 2 * spread) * 2 * EPS
               + (t + 4) * 2 * EPS)
    bound = per_row * np.abs(v).max(axis=-2, keepdims=True) + 4 * EPS * np.abs(want["Y"])
    if y.dtype == np.float16:
        bound = bound + 2.0**-11 * np.abs(want["Y"]) + 2.0**-25
    got = y.astype(np.float64)
    nan = np.isnan(want["Y"])
    assert np.array_equal(np.isnan(got), nan), "NaN where the reference has none, or the other way"
    error = np.abs(got - want["Y"])[~nan]
    bad = ~(error <= bound[~nan])
    assert not bad.any(), f"{int(bad.sum())} of {y.size} off; worst {error[bad].max()} (bound {bound[~nan][bad].min()})"
    if "P" in out:
        p, want_p = out["P"].astype(np.float64), want["P"]
        assert p.dtype == np.float64 and out["P"].dtype == np.float32 and p.shape == want_p.shape
        nan_p = np.isnan(want_p)
        assert np.array_equal(np.isnan(p), nan_p)
        assert np.all(np.abs(p - want_p)[~nan_p] <= (per_row * np.ones_like(want_p))[~nan_p] + 4 * EPS)


def make(rng, b, h, s, t, d, dv, dtype, mask_shape=None) -> dict:
    inputs = {"Q": rng.standard_normal((b, h, s, d)).astype(dtype),
              "K": rng.standard_normal((b, h, t, d)).astype(dtype),
              "V": rng.standard_normal((b, h, t, dv)).astype(dtype)}
    if mask_shape is not None:
        inputs["mask"] = rng.standard_normal(mask_shape).astype(dtype)
    return inputs


def run(attention, inputs, **options) -> dict:
    poison_outputs(attention, inputs, **{k: v for k, v in options.items() if k in ("attrs", "tunables")})
    before = {r: a.copy() for r, a in inputs.items()}
    out = attention(inputs, **options)
    assert all(np.array_equal(inputs[r], before[r], equal_nan=True) for r in inputs)
    return out


def accepted(attention, inputs, tunables=None) -> list[str]:
    return [v.variant for v in attention.explain(inputs, tunables=tunables).verdicts if v.accepted]


# --- the package ---------------------------------------------------------------------------------


def test_package_files():
    data = json.loads((PACKAGE / "manifest.json").read_text("utf-8"))
    assert check_manifest(data) == []
    assert [(v["id"], v["priority"]) for v in data["variants"]] == [
        ("tiled", 20), ("tiled_mask", 20), ("rows", 10), ("rows_mask", 10), ("passes", 0), ("passes_mask", 0)]
    assert [p["id"] for p in data["variants"][4]["passes"]] == ["scores", "softmax", "weighted"]
    assert "var<workgroup>" in (PACKAGE / "attention-tiled.wgsl.jinja").read_text("utf-8")


def test_engine_has_no_code_for_it():
    assert_engine_has_no_code_for("com.example.Attention")


def test_validates_and_its_test_json_passes(attention):
    assert_valid_and_passing(attention, PACKAGE, VARIANTS)


def test_expected_outputs_are_the_reference(attention):
    """test.json's expected outputs are the float64 reference rounded once to the output dtype
    (scripts/make_attention_cases.py writes them through `expect`), independent of the WGSL."""
    for case, inputs, stored in stored_expectations(attention, "Y", lambda ins: ins["Q"].dtype.name):
        want = reference(inputs, case.attrs.get("scale", 0.0))["Y"].astype(inputs["Q"].dtype)
        np.testing.assert_array_equal(stored, want, err_msg=case.name)


# --- results -------------------------------------------------------------------------------------

# (B, H, S, T, D, Dv): CLIP text self-attention (12 heads of 64 over 77 tokens); SD 1.5
# cross-attention against 77 text tokens with 8 heads of 40 and of 80 (its first two levels, 320 / 8
# and 640 / 8; S scaled down from 4096 and 1024 so that lavapipe runs it quickly); S, T, D, Dv none a
# multiple of the tiles (64 rows, 16 keys); a decoding step (S = 1). Heads of 160 (SD 1.5's third
# level) cost a slow cold compile per dtype and mask variant, as the head loops unroll at render time
# (seconds a shader on lavapipe, cold): test.json's sd15-mid case covers them in float32 alone (a float16
# shader differs only in its loads and stores, which its sd15-cross cases run at 40 and 80), and the
# head-loop test below the largest fused head (256).
SHAPES = [(1, 12, 77, 77, 64, 64), (1, 8, 128, 77, 40, 40), (1, 8, 20, 77, 80, 80), (2, 3, 37, 29, 19, 23),
          (2, 4, 1, 33, 16, 16)]
MASKS = {"none": None, "causal": "causal", "keypad": "keypad", "full": "full"}
# Each (variant, head sizes, dtype, mask or not) renders its own WGSL, which a fresh machine's lavapipe
# compiles once per suite run (Mesa's disk cache serves every later process): for these real heads, 1 to
# 4 s a shader. test.json compiles CLIP's 64 with a mask and SD's 40 and 80 without, in both dtypes, so
# those run here in both for no compile; the other half (64 without a mask, 40 and 80 with one) runs in
# float32 alone, under this module's tighter float32 bound: the float16 shader differs only in its loads
# and stores, which test.json runs at these heads. Every variant still runs each real head, both dtypes
# each variant and mask state. (D, masked):
ONE_DTYPE = {(64, False), (40, True), (80, True)}


def model_cases():
    for shape in SHAPES:
        for dtype, dtype_id in zip(DTYPES, DTYPE_IDS):
            for mask in MASKS:
                if (shape[4], mask != "none") not in ONE_DTYPE or dtype == np.float32:
                    yield pytest.param(shape, dtype, mask, id=f"{'x'.join(map(str, shape))}-{dtype_id}-{mask}")


def mask_shape(kind, b, h, s, t):
    return {"none": None, "causal": (s, t), "keypad": (b, 1, 1, t), "full": (b, h, s, t)}[kind]


@pytest.mark.parametrize("shape, dtype, mask", list(model_cases()))
def test_model_shapes_on_every_variant_that_takes_them(attention, need_dtype, rng, shape, dtype, mask):
    need_dtype(dtype)
    b, h, s, t, d, dv = shape
    inputs = make(rng, *shape, dtype, mask_shape(mask, b, h, s, t))
    if mask == "causal":
        inputs["mask"] = np.where(np.tril(np.ones((s, t), bool)), 0.0, -np.inf).astype(dtype)
    suffix = "_mask" if mask != "none" else ""
    variants = accepted(attention, inputs)
    assert variants == ([f"tiled{suffix}"] if s >= 16 else []) + [f"rows{suffix}", f"passes{suffix}"]
    for variant in variants:
        out = run(attention, inputs, variant=variant)
        assert ("P" in out) == variant.startswith("passes")
        assert_attention(out, inputs)


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("tiles", [(16, 5), (7, 3), (64, 1), (1, 16)], ids=lambda t: f"rows{t[0]}-keys{t[1]}")
def test_tiles_that_do_not_divide_the_shape(attention, need_dtype, rng, dtype, tiles):
    """The tiled variant with workgroups of 16, 7, 64 or 1 rows and 5, 3, 1 or 16 keys a step,
    over S = 37 and T = 29: partial row blocks and partial key tiles, a mask broadcast per head."""
    need_dtype(dtype)
    inputs = make(rng, 2, 3, 37, 29, 19, 23, dtype, (1, 3, 1, 29))
    tunables = {"TILE_WORKGROUP": tiles[0], "KV_TILE": tiles[1]}
    assert_attention(run(attention, inputs, variant="tiled_mask", tunables=tunables), inputs)


@pytest.mark.parametrize("mask", [None, (13,), (), (1, 2, 1, 1)], ids=["none", "rank1", "rank0", "per-head"])
def test_masks_of_every_rank_broadcast(attention, rng, mask):
    inputs = make(rng, 1, 2, 20, 13, 8, 8, np.float32, mask)
    for variant in accepted(attention, inputs):
        assert_attention(run(attention, inputs, variant=variant), inputs)


def test_default_scale_is_one_over_sqrt_d(attention, rng):
    """scale 0 (the default) runs as 1 / sqrt(D): the same f32 value given explicitly gives the
    same bits on every variant, and another scale does not. Heads of 40 (1 / sqrt(40) is not exact), Dv
    40 too: test.json's sd15-cross case compiles that shader."""
    inputs = make(rng, 1, 2, 18, 11, 40, 40, np.float32)
    for variant in accepted(attention, inputs):
        default = attention(inputs, variant=variant)["Y"]
        explicit = attention(inputs, variant=variant, attrs={"scale": float(np.float32(1 / np.sqrt(40)))})["Y"]
        np.testing.assert_array_equal(default, explicit)
        assert not np.array_equal(default, attention(inputs, variant=variant, attrs={"scale": 0.5})["Y"])
        assert_attention(run(attention, inputs, variant=variant, attrs={"scale": 0.5}), inputs, 0.5)


def test_a_fully_masked_row_is_nan_and_the_others_are_not(attention):
    q = np.ones((1, 1, 3, 4), np.float32)
    inputs = {"Q": q, "K": q.copy(), "V": np.arange(12, dtype=np.float32).reshape(1, 1, 3, 4),
              "mask": np.array([[0, -np.inf, 0], [-np.inf] * 3, [-np.inf, -np.inf, 0]], np.float32)}
    for variant in accepted(attention, inputs):
        y = run(attention, inputs, variant=variant)["Y"][0, 0]
        assert np.isnan(y[1]).all() and np.array_equal(y[2], [8, 9, 10, 11]), variant
        np.testing.assert_allclose(y[0], [4, 5, 6, 7], rtol=1e-6)


def test_head_sizes_over_256_take_the_passes(attention, rng):
    inputs = make(rng, 1, 2, 20, 7, 300, 9, np.float32)
    assert accepted(attention, inputs) == ["passes"]
    with pytest.raises(errors.VariantRejectedError, match="headOk=False"):
        attention(inputs, variant="rows")
    assert_attention(run(attention, inputs), inputs)


@pytest.mark.parametrize(
    "variant, head",
    [(v, h) for v in VARIANTS for h in [(40, 40), (19, 23)]] + [("tiled", (256, 256))],
    # 256 on `tiled` only, the largest head the fused variants take (its tiles fill lavapipe's 32 KiB of workgroup
    # memory), and the only call that runs that boundary: lavapipe takes about 20 s to compile each such shader.
    # `rows` runs the same unrolled head code (attention-common.wgsl.jinja) at T = 1000 here with heads of 40
    # and 19/23 (odd, Dv != D: partial vec4s; the shaders test.json and the model shapes compile), and at 160
    # in test.json's sd15-mid case (float32).
    ids=lambda x: x if isinstance(x, str) else f"d{x[0]}-dv{x[1]}")
def test_head_loops_do_not_count_toward_lavapipes_loop_cap(attention, rng, variant, head):
    """lavapipe stops an invocation's loops after 65,535 iterations in all, and counts a constant
    loop it does not unroll: over 32 trips, fewer for a longer body (docs/format.md, "Loops on lavapipe"). `rows` looped over the head
    (D or Dv) about three times per key, so T = 1000 keys and D = 40 ran past the cap and returned
    wrong values silently (max error 2.28); `tiled` did too. Their head loops are unrolled when the
    template renders, so only the loops over the keys count: T = 1000 with heads of 40 and 256 is
    right on every variant, as with odd heads of 19 and 23."""
    d, dv = head
    s = 16 if variant.startswith("tiled") else 1
    inputs = make(rng, 1, 1, s, 1000, d, dv, np.float32, (1000,) if variant.endswith("_mask") else None)
    assert_attention(run(attention, inputs, variant=variant), inputs)


def test_the_key_loops_are_right_up_to_lavapipes_cap_and_tiled_is_refused_past_its_own(attention, rng):
    """With the head loops unrolled, `rows` loops only over the keys (T trips and the test that ends
    them: right up to T = 65,534 on lavapipe); `tiled` over the tiles and each tile's keys,
    ceil(T / KV_TILE) * (KV_TILE + 2) + 1 trips, within 65,535 up to T = 58,240 with tiles of 16, and
    refused past it (tiledLoopOk) so that `rows` takes those calls; `passes` sweeps a row of P three
    times in its softmax pass, right up to T = 21,844. A workgroup of one row loads a tile of heads
    of 40 in a runtime loop (640 loads a buffer, past the 64 the template unrolls), which counts
    too: 50 steps of 16 + 2 + 2 * 641 trips, T = 800, and refused past it."""
    one_row = {"TILE_WORKGROUP": 1}
    # heads of 4 (test.json's t1 shaders) unless the load loop needs more
    for variant, s, t, head, tunables in [("rows", 1, 65_534, (4, 4), None), ("tiled", 16, 58_240, (4, 4), None),
                                          ("passes", 1, 21_844, (4, 4), None), ("tiled", 16, 800, (40, 40), one_row)]:
        inputs = make(rng, 1, 1, s, t, *head, np.float32)
        assert_attention(run(attention, inputs, variant=variant, tunables=tunables), inputs)
    for t, head, tunables in [(58_241, (4, 4), None), (801, (40, 40), one_row)]:
        inputs = make(rng, 1, 1, 16, t, *head, np.float32)
        assert accepted(attention, inputs, tunables) == ["rows", "passes"]
        with pytest.raises(errors.VariantRejectedError, match="tiledLoopOk=False"):
            attention(inputs, variant="tiled", tunables=tunables)


def test_empty_outputs_dispatch_nothing(attention, rng):
    for shape in [(1, 2, 0, 5, 4, 4), (1, 2, 3, 5, 4, 0), (0, 2, 3, 5, 4, 4), (1, 2, 0, 0, 4, 4)]:
        inputs = make(rng, *shape, np.float32)
        for variant in accepted(attention, inputs):
            out = attention(inputs, variant=variant)
            assert out["Y"].shape == shape[:3] + shape[5:], (shape, variant)


def test_refusals_name_the_clause(attention, rng):
    inputs = make(rng, 1, 2, 4, 5, 8, 8, np.float32)
    with pytest.raises(errors.SelectionError, match="maskOk=False"):
        attention({**inputs, "mask": np.zeros((4, 4), np.float32)})
    with pytest.raises(errors.SelectionError, match="tOk=False"):
        attention(make(rng, 1, 2, 4, 0, 8, 8, np.float32))
    with pytest.raises(errors.DTypeError) as info:
        attention({**inputs, "mask": np.zeros((4, 5), np.float16)})
    assert info.value.argument == "mask"
    with pytest.raises(errors.RankError) as info:
        attention({**inputs, "K": inputs["K"][0]})
    assert info.value.argument == "K"


def test_a_boolean_mask_is_told_what_the_mask_holds(attention, rng):
    """A boolean keep-mask (True = attend, as torch's SDPA takes) is refused, and the hint had said
    only "convert with .astype(np.float32)": that makes an additive mask of 1.0 and 0.0, which
    drops no key, so CLIP's causal attention silently attended to the future. The hint
    now says what True and False become and quotes what the input holds; following it gives the
    causal reference."""
    inputs = make(rng, 2, 3, 6, 6, 8, 8, np.float32)
    keep = np.tril(np.ones((6, 6), bool))
    with pytest.raises(errors.DTypeError) as info:
        attention({**inputs, "mask": keep})
    assert info.value.argument == "mask"
    assert str(info.value).endswith(
        "got bool (convert with .astype(np.float32), or np.asarray(x, np.float32) from a list; True becomes 1 and "
        "False 0, and 'mask' is: Additive mask (added to the scores: 0 keeps a key, -inf drops it; a boolean "
        "keep-mask m is np.where(m, 0, -np.inf)), rank 0 to 4, broadcastable to [B, H, S, T] (not beyond it).)")
    mask = np.where(keep, 0, -np.inf).astype(np.float32)
    assert_attention(attention({**inputs, "mask": mask}), {**inputs, "mask": mask})
