"""tests/packages/com.example.RotaryEmbedding: ONNX Runtime's contrib op ``com.microsoft.RotaryEmbedding``
(the rotary position embedding of Llama-style LLMs) as a package written from the docs alone
(docs/format.md, docs/package-files.md, docs/python-api.md, docs/cli.md, docs/errors.md), run through
load_kernel() with no engine change.

Each head vector of ``input`` ([B, S, N * H] or [B, N, S, H]) is rotated by its token's position p:
its first R elements (R = rotary_embedding_dim, or H) form R / 2 pairs, (j, j + R/2) or, interleaved,
(2j, 2j + 1), each turned by ``(a, b) -> (a cos - b sin, b cos + a sin)`` with cos_cache[p, j] and
sin_cache[p, j]; the rest is copied. ``position_ids`` is [B, S] or one base (token s at base + s).
A position outside the cache gives zeros for the rotated elements (ORT refuses such a call).

Judged against a float64 NumPy reference written from ORT's documented semantics and against
onnxruntime's CPU kernel (where it has the op). Tolerance: the kernel computes ``a * cos - b * sin``
in f32 from inputs that are exact in f32, so each output is within 3 u (|a cos| + |b sin|) of the
float64 value (two products, one sum; a contracted multiply-add only removes a rounding), plus one
f16 ulp of the result for float16 (the final conversion may round either way).

test.json's expected values come from ``expect_reference``:
``webgpu-kernels expect tests/packages/com.example.RotaryEmbedding
--reference tests/test_rotary_embedding_package.py:expect_reference``.
"""

from __future__ import annotations

import functools

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
from references import F16_FLUSH, F16_STEP, F32_TINY, U32

PACKAGE_NAME = "com.example.RotaryEmbedding"
PACKAGE = PACKAGES_DIR / PACKAGE_NAME
VARIANTS = ["pairs", "elements"]


# --- reference (also `webgpu-kernels expect`'s) ----------------------------------------------------


def layout(shape, num_heads: int, half: int) -> tuple[int, int, int, int]:
    """(B, S, N, H) of an input as ORT's CPU kernel reads it."""
    if len(shape) == 4:
        return shape[0], shape[2], shape[1], shape[3]
    head = shape[2] // num_heads if num_heads > 0 else 2 * half
    return shape[0], shape[1], shape[2] // head, head


def positions(position_ids, b: int, s: int, max_pos: int) -> np.ndarray:
    """[B, S] cache rows, -1 where out of range: [B, S] ids as given, one base as base + s
    (a negative base is out of range for every token)."""
    ids = np.asarray(position_ids, np.int64)
    if ids.ndim == 2:
        p = ids.copy()
    else:
        base = int(ids.reshape(-1)[0])
        p = np.broadcast_to(base + np.arange(s, dtype=np.int64), (b, s)).copy()
        if base < 0:
            p[:] = -1
    p[(p < 0) | (p >= max_pos)] = -1
    return p


def reference(x, position_ids, cos_cache, sin_cache, *, interleaved=0, num_heads=0, rotary_embedding_dim=0):
    """RotaryEmbedding in float64; also returns |a cos| + |b sin| per element (the error scale)."""
    x = np.asarray(x, np.float64)
    cos_cache, sin_cache = np.asarray(cos_cache, np.float64), np.asarray(sin_cache, np.float64)
    b, s, n, h = layout(x.shape, num_heads, cos_cache.shape[1])
    r = rotary_embedding_dim or h
    heads = x.reshape(b, s, n, h) if x.ndim == 3 else x.transpose(0, 2, 1, 3)  # [B, S, N, H]
    p = positions(position_ids, b, s, cos_cache.shape[0])
    ok = (p >= 0)[:, :, None, None]
    cos = np.where(ok, cos_cache[np.maximum(p, 0)][:, :, None, :], 0.0)  # [B, S, 1, R/2]
    sin = np.where(ok, sin_cache[np.maximum(p, 0)][:, :, None, :], 0.0)
    if interleaved:
        a, c = heads[..., 0:r:2], heads[..., 1:r:2]
    else:
        a, c = heads[..., : r // 2], heads[..., r // 2 : r]
    ra, rc = a * cos - c * sin, c * cos + a * sin
    ea, ec = np.abs(a * cos) + np.abs(c * sin), np.abs(c * cos) + np.abs(a * sin)
    out, scale = heads.copy(), np.zeros_like(heads)
    if interleaved:
        out[..., 0:r:2], out[..., 1:r:2], scale[..., 0:r:2], scale[..., 1:r:2] = ra, rc, ea, ec
    else:
        out[..., : r // 2], out[..., r // 2 : r], scale[..., : r // 2], scale[..., r // 2 : r] = ra, rc, ea, ec
    if x.ndim == 4:
        return out.transpose(0, 2, 1, 3), scale.transpose(0, 2, 1, 3)
    return out.reshape(x.shape), scale.reshape(x.shape)


def expect_reference(inputs: dict, attrs: dict) -> dict:
    """For `webgpu-kernels expect`: inputs as `test` builds them (floats as float64), attributes over the defaults."""
    out, _ = reference(inputs["input"], inputs["position_ids"], inputs["cos_cache"], inputs["sin_cache"],
                       interleaved=attrs["interleaved"], num_heads=attrs["num_heads"],
                       rotary_embedding_dim=attrs["rotary_embedding_dim"])  # fmt: skip
    return {"output": out}


def bound(scale: np.ndarray, want: np.ndarray, dtype, steps: int = 3) -> np.ndarray:
    """Per-element absolute tolerance (module docstring): ``steps`` f32 roundings of the error scale,
    plus one f16 ulp of the result for float16. An out-of-range row (zeros) and the copied tail are exact."""
    tol = steps * U32 * scale + F32_TINY
    if np.dtype(dtype) == np.float16:
        tol = tol + F16_STEP * np.abs(want) + F16_FLUSH
    return tol


def assert_within(got, want, tol, what: str) -> None:
    err = np.abs(got.astype(np.float64) - want)
    worst = int(np.argmax(err - tol)) if err.size else 0
    assert np.all(err <= tol), (
        f"{what}: {np.count_nonzero(err > tol)} elements off, worst at {worst}: {err.flat[worst]} > {tol.flat[worst]}"
    )


@functools.lru_cache(maxsize=None)
def ort_session(dtype_name: str, rank: int, position_rank: int, interleaved: int, num_heads: int, rotary: int):
    """A one-node com.microsoft.RotaryEmbedding model on onnxruntime's CPU provider (symbolic
    dimensions), or None where this onnxruntime has no CPU kernel for the op and dtype."""
    pytest.importorskip("onnxruntime")
    pytest.importorskip("onnx")
    from onnx import TensorProto, helper

    elem = TensorProto.FLOAT16 if dtype_name == "float16" else TensorProto.FLOAT
    vi = helper.make_tensor_value_info
    dims = [f"d{i}" for i in range(rank)]
    inputs = [vi("input", elem, dims), vi("position_ids", TensorProto.INT64, [f"p{i}" for i in range(position_rank)]),
              vi("cos_cache", elem, ["m", "h"]), vi("sin_cache", elem, ["m", "h"])]  # fmt: skip
    attrs = {"interleaved": interleaved}
    if num_heads:
        attrs["num_heads"] = num_heads
    if rotary:
        attrs["rotary_embedding_dim"] = rotary
    node = helper.make_node("RotaryEmbedding", [i.name for i in inputs], ["output"], domain="com.microsoft", **attrs)
    from references import one_node_session

    try:
        return one_node_session(node, inputs, [vi("output", elem, dims)], 17)
    except Exception as exc:  # an onnxruntime without the op (or without its float16 kernel)
        if (
            "NOT_IMPLEMENTED" in str(exc)
            or "not a registered function/op" in str(exc)
            or "Could not find an implementation" in str(exc)
        ):
            return None
        raise


def ort_run(inputs, attrs) -> np.ndarray | None:
    x, p = inputs["input"], inputs["position_ids"]
    session = ort_session(x.dtype.name, x.ndim, p.ndim, attrs.get("interleaved", 0), attrs.get("num_heads", 0),
                          attrs.get("rotary_embedding_dim", 0))  # fmt: skip
    return None if session is None else session.run(None, dict(inputs))[0]


def make_inputs(rng, shape, dtype, *, half: int, max_pos=256, positions_shape=None, base=None) -> dict:
    """Inputs of a call: normal input (std 2), real cos/sin tables of R / 2 = ``half`` columns (theta
    10000), drawn [B, S] positions, or one base when ``base`` is given."""
    b, s = (shape[0], shape[2]) if len(shape) == 4 else (shape[0], shape[1])
    freqs = 10000.0 ** (-np.arange(half) / max(half, 1))
    angles = np.arange(max_pos)[:, None] * freqs[None, :]
    if base is None:
        p = rng.integers(0, max_pos, size=positions_shape or (b, s)).astype(np.int64)
    else:
        p = np.array([base], np.int64)
    return {"input": (2.0 * rng.standard_normal(shape)).astype(dtype), "position_ids": p,
            "cos_cache": np.cos(angles).astype(dtype), "sin_cache": np.sin(angles).astype(dtype)}  # fmt: skip


def run(kernel, inputs, *, attrs=None, variant=None, tunables=None, with_ort=True) -> np.ndarray:
    """One call, checked against the float64 reference and onnxruntime (every output element
    written, inputs untouched)."""
    attrs = attrs or {}
    want, scale = reference(inputs["input"], inputs["position_ids"], inputs["cos_cache"], inputs["sin_cache"], **attrs)
    poison_outputs(kernel, inputs, attrs=attrs, tunables=tunables)  # an unwritten element shows as NaN
    before = {k: v.copy() for k, v in inputs.items()}
    got = kernel(inputs, attrs=attrs, variant=variant, tunables=tunables)["output"]
    for k, v in inputs.items():
        np.testing.assert_array_equal(v, before[k])
    x = inputs["input"]
    assert got.dtype == x.dtype and got.shape == x.shape
    what = f"{x.shape} {x.dtype} {attrs} {variant} {tunables or ''}"
    tol = bound(scale, want, x.dtype)
    assert_within(got, want, tol, what)
    if with_ort and x.size:
        theirs = ort_run(inputs, attrs)
        if theirs is not None:  # ORT may round each step to float16: three more f16 roundings
            extra = 3 * F16_STEP * scale if x.dtype == np.float16 else 3 * U32 * scale
            assert_within(got, theirs.astype(np.float64), 2 * tol + extra, what + " vs onnxruntime")
    return got


def accepted(kernel, inputs, attrs=None, tunables=None) -> list[str]:
    return [v.variant for v in kernel.explain(inputs, attrs=attrs, tunables=tunables).verdicts if v.accepted]


def run_every_variant(kernel, inputs, *, attrs=None, tunables=None, with_ort=True) -> list[str]:
    ids = accepted(kernel, inputs, attrs, tunables)
    assert ids, "no variant accepts the call"
    for vid in ids:
        run(kernel, inputs, attrs=attrs, variant=vid, tunables=tunables, with_ort=with_ort)
    return ids


@pytest.fixture(scope="module")
def rope():
    return wk.load_kernel(PACKAGE)


# --- the package ----------------------------------------------------------------------------------


def test_loads(rope):
    assert rope.op_id == PACKAGE_NAME
    assert rope.variants == VARIANTS


def test_package_is_valid_and_its_cases_pass(rope):
    assert_valid_and_passing(rope, PACKAGE, VARIANTS)


def test_engine_has_no_code_for_it():
    assert_engine_has_no_code_for("RotaryEmbedding")


def test_expected_outputs_are_the_reference(rope):
    """test.json's stored outputs are this module's float64 reference of the case's inputs, rounded once."""
    checked = 0
    for case, inputs, stored in stored_expectations(rope, "output", lambda ins: ins["input"].dtype.name):
        want = expect_reference(inputs, {"interleaved": 0, "num_heads": 0, "rotary_embedding_dim": 0} | dict(case.attrs))["output"]
        dtype = np.dtype(case.types["T"])
        np.testing.assert_array_equal(stored, want.astype(dtype).astype(np.float64), err_msg=case.name)
        checked += 1
    assert checked == 16


# --- results --------------------------------------------------------------------------------------

MODEL_SHAPES = [
    ((1, 1, 2048), 0),  # Llama 3.2 1B queries at decode: 32 heads of 64
    ((1, 128, 2048), 0),  # the same at a 128-token prefill
    ((1, 1, 4096), 0),  # Llama 2 7B / Llama 3 8B queries at decode: 32 heads of 128
    ((1, 8, 128, 128), 0),  # Llama 3 8B keys at prefill, [B, N, S, H]: 8 KV heads of 128
    ((2, 1, 4096), 1),  # batch 2 at decode, interleaved (GPT-J pairing)
]


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize(("shape", "interleaved"), MODEL_SHAPES, ids=str)
def test_model_shapes(rope, need_dtype, rng, shape, interleaved, dtype):
    need_dtype(dtype)
    head = shape[3] if len(shape) == 4 else (64 if shape[2] == 2048 else 128)
    inputs = make_inputs(rng, shape, dtype, half=head // 2, max_pos=512)
    assert run_every_variant(rope, inputs, attrs={"interleaved": interleaved}) == VARIANTS


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_one_base_position_is_base_plus_token(rope, need_dtype, rng, dtype):
    """position_ids [1] (and rank 0): token s at base + s, the same as [B, S] ids written out."""
    need_dtype(dtype)
    inputs = make_inputs(rng, (2, 7, 256), dtype, half=32, max_pos=64, base=50)
    a = rope(inputs)["output"]
    for ids in (np.int64(50), np.broadcast_to(np.arange(50, 57, dtype=np.int64), (2, 7)).copy()):
        np.testing.assert_array_equal(rope({**inputs, "position_ids": ids})["output"], a)
    run_every_variant(rope, inputs)


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_layouts_agree(rope, need_dtype, rng, dtype):
    """[B, N, S, H] gives [B, S, N * H]'s result transposed, bit for bit, in both pairings."""
    need_dtype(dtype)
    inputs = make_inputs(rng, (2, 5, 3 * 64), dtype, half=32, max_pos=32)
    four = {**inputs, "input": np.ascontiguousarray(inputs["input"].reshape(2, 5, 3, 64).transpose(0, 2, 1, 3))}
    for interleaved in (0, 1):
        three = rope(inputs, attrs={"interleaved": interleaved})["output"]
        y = rope(four, attrs={"interleaved": interleaved})["output"]
        np.testing.assert_array_equal(y.transpose(0, 2, 1, 3).reshape(2, 5, 192), three)
        run_every_variant(rope, four, attrs={"interleaved": interleaved})


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize(("shape", "num_heads", "rotary"), [((2, 3, 160), 2, 32), ((1, 4, 2, 96), 4, 64), ((1, 2, 12), 3, 2)],
                         ids=str)  # fmt: skip
def test_partial_rotary_copies_the_tail(rope, need_dtype, rng, shape, num_heads, rotary, dtype):
    need_dtype(dtype)
    inputs = make_inputs(rng, shape, dtype, half=rotary // 2, max_pos=16)
    for interleaved in (0, 1):
        attrs = {"num_heads": num_heads, "rotary_embedding_dim": rotary, "interleaved": interleaved}
        for vid in run_every_variant(rope, inputs, attrs=attrs):
            y = rope(inputs, attrs=attrs, variant=vid)["output"]
            head = shape[-1] if len(shape) == 4 else shape[-1] // num_heads
            tail = lambda t: t.reshape(-1, head)[:, rotary:]  # noqa: E731
            np.testing.assert_array_equal(tail(y), tail(inputs["input"]))


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_out_of_range_positions_give_zeros(rope, need_dtype, rng, dtype):
    """The package's rule where onnxruntime refuses the call (a shader cannot raise)."""
    need_dtype(dtype)
    inputs = make_inputs(rng, (1, 6, 32), dtype, half=4, max_pos=8)
    inputs["position_ids"] = np.array([[0, 7, 8, -1, 2**32 + 1, -(2**40)]], np.int64)
    attrs = {"num_heads": 2, "rotary_embedding_dim": 8}
    for vid in run_every_variant(rope, inputs, attrs=attrs, with_ort=False):
        y = rope(inputs, attrs=attrs, variant=vid)["output"].reshape(6, 2, 16)
        assert not np.any(y[2:, :, :8]) and np.all(y[:2, :, :8] != 0)
        np.testing.assert_array_equal(y[:, :, 8:], inputs["input"].reshape(6, 2, 16)[:, :, 8:])
    base = make_inputs(rng, (1, 4, 16), dtype, half=8, max_pos=8, base=-1)  # a negative base: every token
    assert not np.any(rope(base)["output"])
    if ort_session(np.dtype(dtype).name, 3, 2, 0, 2, 8) is not None:
        with pytest.raises(Exception, match="out of range"):
            ort_run(inputs, attrs)


@pytest.mark.parametrize("variant", VARIANTS)
def test_small_workgroups_and_a_spilled_grid(rope, rng, variant):
    """WORKGROUP_SIZE 1: one unit per workgroup, 70,000+ workgroups spill the grid into y."""
    inputs = make_inputs(rng, (1, 1100, 64), np.float32, half=32, max_pos=2048)
    run(rope, inputs, variant=variant, tunables={"WORKGROUP_SIZE": 1}, with_ort=False)
    run(
        rope,
        make_inputs(rng, (3, 5, 24), np.float32, half=12, max_pos=8),
        variant=variant,
        tunables={"WORKGROUP_SIZE": 7},
    )


def test_empty_input(rope):
    inputs = make_inputs(np.random.default_rng(0), (0, 3, 64), np.float32, half=32, positions_shape=(0, 3))
    assert rope(inputs)["output"].shape == (0, 3, 64)


# --- contract ---------------------------------------------------------------------------------------


def test_explain(rope):
    meta = {"input": ((1, 128, 4096), "float16"), "position_ids": ((1, 128), "int64"),
            "cos_cache": ((8192, 64), "float16"), "sin_cache": ((8192, 64), "float16")}  # fmt: skip
    explanation = rope.explain(meta)
    assert explanation.chosen == "pairs"
    assert {k: explanation.values[k] for k in ("headSize", "heads", "rotary", "units")} == {
        "headSize": 128, "heads": 32, "rotary": 128, "units": 128 * 32 * 64}  # fmt: skip
    assert [(o.shape, o.dtype) for o in explanation.outputs] == [((1, 128, 4096), "float16")]


def test_refusals(rope):
    f32 = np.float32
    x, pos, cache = np.ones((1, 2, 8), f32), np.zeros(1, np.int64), np.ones((4, 4), f32)
    call = {"input": x, "position_ids": pos, "cos_cache": cache, "sin_cache": cache}
    with pytest.raises(errors.SelectionError, match="rotaryOk=False"):
        rope(
            {**call, "cos_cache": np.ones((4, 2), f32), "sin_cache": np.ones((4, 2), f32)},
            attrs={"rotary_embedding_dim": 4},
        )
    with pytest.raises(errors.SelectionError, match="rotaryOk=False"):
        rope(call, attrs={"num_heads": 1, "rotary_embedding_dim": 3})
    with pytest.raises(errors.SelectionError, match="cacheOk=False"):
        rope({**call, "sin_cache": np.ones((5, 4), f32)})
    with pytest.raises(errors.SelectionError, match="positionsOk=False"):
        rope({**call, "position_ids": np.zeros((2, 2), np.int64)})
    with pytest.raises(errors.SelectionError, match="headsOk=False"):
        rope({**call, "input": np.ones((1, 2, 12), f32)}, attrs={"num_heads": 0})  # 12 is no multiple of 8
    with pytest.raises(errors.SelectionError, match="flagsOk=False"):
        rope(call, attrs={"interleaved": 2})
    with pytest.raises(errors.DTypeError) as info:
        rope({**call, "position_ids": np.zeros(1, np.int32)})
    assert info.value.argument == "position_ids"
    with pytest.raises(errors.DTypeError):
        rope({**call, "cos_cache": cache.astype(np.float16)})  # T bound to two dtypes
    with pytest.raises(errors.RankError):
        rope({**call, "cos_cache": np.ones(16, f32)})
    with pytest.raises(errors.MissingInputError):
        rope({"input": x, "cos_cache": cache, "sin_cache": cache})
    with pytest.raises(errors.VariantRejectedError, match="cacheOk"):
        rope({**call, "sin_cache": np.ones((5, 4), f32)}, variant="pairs")
