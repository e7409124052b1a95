"""tests/packages/com.microsoft.MultiHeadAttention: ONNX Runtime's contrib op MultiHeadAttention
(com.microsoft, since version 1), a subset, written from the format documents alone and run through
load_kernel() with no engine change.

Semantics (onnxruntime's schema and CPU kernel, 1.32): query (B, S, H*D), key (B, L, H*D) and value
(B, L, H*Dv), 3-D and separate; the optional bias (H*D + H*D + H*Dv) is added to query, key and value
first. Each head h takes columns h*D .. h*D + D - 1 (h*Dv .. for value); output (B, S, H*Dv) holds
head h's ``softmax(Q_h K_h^T * scale) V_h`` in its columns h*Dv ..; scale 0 (the default) is
1 / sqrt(D). unidirectional=1 drops key j for query i where j > i, taken only for S == L: onnxruntime's
CPU kernel masks from the first key and lets the last query attend every key when L > S (measured
below), which no definition says. Every other input form of the op (packed QKV, packed KV, BNSH key
and value, key_padding_mask, attention_bias, past state, past_sequence_length, cache_indirection) is
refused with a SelectionError naming it.

Judged against a float64 NumPy reference written from that definition and against onnxruntime's CPU
MultiHeadAttention (a one-node model, domain com.microsoft, opset 1), which in 1.32 runs float32 and
float16 and Dv != D, every variant, both dtypes; bfloat16 (the op's third type, which onnxruntime's
CPU kernel does not run: "Could not find an implementation") against the reference alone. test.json's expected values come from
``expect_reference``: ``python3 -m webgpu_kernels expect tests/packages/com.microsoft.MultiHeadAttention
--reference tests/test_multi_head_attention_package.py:expect_reference``.
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

PACKAGE_NAME = "com.microsoft.MultiHeadAttention"
PACKAGE = PACKAGES_DIR / PACKAGE_NAME
VARIANTS = ["tiled", "tiled_bias", "rows", "rows_bias"]
# f32: scores of D products and a softmax in f32 with WGSL's exp (3 + 2|x| ulp); f16: the f16 rounding
# of the inputs is the reference's too, so two f16 ulps of the result (2^-10 relative each) and a
# subnormal step.
TOLERANCE = {np.dtype(np.float32): (2e-5, 2e-6), np.dtype(np.float16): (2e-3, 2e-4), "bfloat16": (1e-2, 1e-4)}
INPUTS = ("query", "key", "value", "bias", "key_padding_mask", "attention_bias", "past_key", "past_value",
          "past_sequence_length", "cache_indirection")  # fmt: skip


# --- reference (also `webgpu-kernels expect`'s) ------------------------------------------------------


def mha(query, key, value, bias=None, num_heads: int = 1, scale: float = 0.0, unidirectional: int = 0) -> np.ndarray:
    """MultiHeadAttention (3-D query, key, value; optional bias) in float64. ValueError for a form
    outside that, heads that do not divide the hidden sizes, or unidirectional with S != L."""
    q, k, v = (np.asarray(a, np.float64) for a in (query, key, value))
    if q.ndim != 3 or k.ndim != 3 or v.ndim != 3:
        raise ValueError("query, key and value must be 3-D")
    (b, s, hidden), (_, n_keys, _), v_hidden = q.shape, k.shape, v.shape[2]
    h = num_heads
    if h < 1 or hidden % h or v_hidden % h or k.shape != (b, n_keys, hidden) or v.shape[:2] != (b, n_keys):
        raise ValueError(f"shapes {q.shape} {k.shape} {v.shape} with {h} heads")
    if bias is not None:
        bias = np.asarray(bias, np.float64)
        if bias.shape != (2 * hidden + v_hidden,):
            raise ValueError(f"bias {bias.shape}")
        q, k, v = q + bias[:hidden], k + bias[hidden : 2 * hidden], v + bias[2 * hidden :]
    d, dv = hidden // h, v_hidden // h
    if unidirectional and s != n_keys:
        raise ValueError("unidirectional needs S == L")
    qh = q.reshape(b, s, h, d).transpose(0, 2, 1, 3)
    kh = k.reshape(b, n_keys, h, d).transpose(0, 2, 1, 3)
    vh = v.reshape(b, n_keys, h, dv).transpose(0, 2, 1, 3)
    scores = qh @ kh.transpose(0, 1, 3, 2) * (scale if scale else 1.0 / np.sqrt(d))
    if unidirectional:
        scores = np.where(np.arange(n_keys)[None, :] > np.arange(s)[:, None], -np.inf, scores)
    if scores.size:
        scores = scores - scores.max(axis=-1, keepdims=True)
    e = np.exp(scores)
    p = e / e.sum(axis=-1, keepdims=True) if e.size else e
    return (p @ vh).transpose(0, 2, 1, 3).reshape(b, s, h * dv)


def expect_reference(inputs: dict, attrs: dict) -> dict:
    """For `webgpu-kernels expect`: inputs as `test` builds them, attributes over the defaults."""
    return {"output": mha(inputs["query"], inputs["key"], inputs["value"], inputs.get("bias"),
                          attrs["num_heads"], attrs["scale"], attrs["unidirectional"])}  # fmt: skip


@functools.lru_cache(maxsize=None)
def ort_session(names: tuple, ranks: tuple, kinds: tuple, attrs: tuple):
    """A one-node com.microsoft MultiHeadAttention model (opset 1) on onnxruntime's CPU provider,
    inputs named and placed by ONNX's formal positions (an empty name for an absent one between)."""
    pytest.importorskip("onnxruntime")
    pytest.importorskip("onnx")
    from onnx import helper

    from references import one_node_session, symbolic_tensor

    last = max(INPUTS.index(n) for n in names)
    node_inputs = [n if n in names else "" for n in INPUTS[: last + 1]]
    node = helper.make_node("MultiHeadAttention", node_inputs, ["output"], domain="com.microsoft", **dict(attrs))
    graph_inputs = [symbolic_tensor(n, kind, r) for n, r, kind in zip(names, ranks, kinds)]
    return one_node_session(node, graph_inputs, [symbolic_tensor("output", kinds[0], 3)], 17)


def ort_mha(inputs: dict, **attrs) -> np.ndarray:
    from onnx import helper

    names = tuple(n for n in INPUTS if n in inputs)
    kinds = tuple(helper.np_dtype_to_tensor_dtype(inputs[n].dtype) for n in names)
    session = ort_session(names, tuple(inputs[n].ndim for n in names), kinds, tuple(sorted(attrs.items())))
    return session.run(None, {n: inputs[n] for n in names})[0]


def assert_close(got: np.ndarray, want: np.ndarray, dtype, what: str, scale: float = 1.0) -> None:
    rtol, atol = TOLERANCE["bfloat16" if np.dtype(dtype).name == "bfloat16" else np.dtype(dtype)]
    np.testing.assert_allclose(got.astype(np.float64), np.asarray(want, np.float64), rtol=rtol * scale,
                               atol=atol * scale, err_msg=what)  # fmt: skip


@pytest.fixture(scope="module")
def kernel() -> wk.Kernel:
    return wk.load_kernel(PACKAGE)


def accepting(kernel: wk.Kernel, inputs: dict, attrs: dict) -> list[str]:
    """The variants whose `when` holds for the call (test runs each of them forced)."""
    return [v.variant for v in kernel.explain(inputs, attrs=attrs).verdicts if v.accepted]


def call(kernel: wk.Kernel, inputs: dict, attrs: dict, **options) -> np.ndarray:
    """One call, its output poisoned first, the inputs untouched, checked against the float64
    reference rounded to the dtype."""
    before = {n: a.copy() for n, a in inputs.items()}
    poison_outputs(kernel, inputs, attrs=attrs, tunables=options.get("tunables"))
    got = kernel(inputs, attrs=attrs, **options)["output"]
    assert all(inputs[n].tobytes() == a.tobytes() for n, a in before.items())
    q = inputs["query"]
    want = mha(q, inputs["key"], inputs["value"], inputs.get("bias"), attrs["num_heads"], attrs.get("scale", 0.0),
               attrs.get("unidirectional", 0))  # fmt: skip
    assert got.dtype == q.dtype and got.shape == want.shape
    assert_close(got, want.astype(q.dtype), q.dtype, f"{ {n: a.shape for n, a in inputs.items()} } {attrs} {options}")
    return got


def draw(rng, dtype, b, s, n_keys, h, d, dv, bias=False, std=1.0) -> dict:
    inputs = {
        "query": (rng.standard_normal((b, s, h * d)) * std).astype(dtype),
        "key": (rng.standard_normal((b, n_keys, h * d)) * std).astype(dtype),
        "value": rng.standard_normal((b, n_keys, h * dv)).astype(dtype),
    }
    if bias:
        inputs["bias"] = rng.standard_normal(2 * h * d + h * dv).astype(dtype)
    return inputs


# --- the package ----------------------------------------------------------------------------------


def test_package_files(kernel):
    data = json.loads((PACKAGE / "manifest.json").read_text("utf-8"))
    assert (data["domain"], data["name"], data["sinceVersion"]) == ("com.microsoft", "MultiHeadAttention", 1)
    assert data["attributes"] == {"num_heads": 0, "scale": 0.0, "unidirectional": 0, "mask_filter_value": -10000.0}
    assert tuple(i["role"] for i in data["inputs"]) == INPUTS and [o["role"] for o in data["outputs"]] == ["output"]
    assert data["typeConstraints"] == {"T": ["float32", "float16", "bfloat16"], "M": ["int32"]}
    assert kernel.op_id == PACKAGE_NAME and kernel.variants == VARIANTS
    bench = json.loads((PACKAGE / "bench.json").read_text("utf-8"))
    shapes = {(tuple(c["inputs"]["query"]["shape"]), tuple(c["inputs"]["key"]["shape"])) for c in bench["cases"]}
    assert {((2, 4096, 320), (2, 4096, 320)), ((2, 1024, 640), (2, 1024, 640)), ((2, 4096, 320), (2, 77, 320)),
            ((1, 77, 768), (1, 77, 768))} <= shapes  # fmt: skip


def test_engine_has_no_code_for_it():
    assert_engine_has_no_code_for(PACKAGE_NAME)
    assert_engine_has_no_code_for("MultiHeadAttention")


def test_validates_and_its_test_json_passes(kernel):
    assert_valid_and_passing(kernel, PACKAGE, VARIANTS)


def test_expected_outputs_are_the_reference(kernel):
    """test.json's stored outputs are this module's float64 reference, rounded once to the dtype (to an ulp);
    the cases cover both dtypes, bias and no bias, causal, Dv != D, L != S and an explicit scale."""
    from webgpu_kernels.casefile import read_test_file

    attrs = {c.name: c.attrs for c in read_test_file(kernel.package).cases}
    seen = set()
    for case, inputs, stored in stored_expectations(kernel, "output", lambda i: i["query"].dtype.name):
        a = {"scale": 0.0, "unidirectional": 0, **attrs[case.name]}
        q, k, v = inputs["query"], inputs["key"], inputs["value"]
        want = mha(q, k, v, inputs.get("bias"), a["num_heads"], a["scale"], a["unidirectional"])
        # one ulp of the dtype either way: the float64 reference's last digits depend on the machine's
        # summation, and its rounding to bfloat16 on ml_dtypes' release (29 of 9,856 one ulp off in run BD)
        # (relative at a normal value, the subnormals' spacing below)
        ulp, tiny = {"float32": (2.0**-23, 2.0**-149), "float16": (2.0**-10, 2.0**-24),
                     "bfloat16": (2.0**-7, 2.0**-133)}[q.dtype.name]  # fmt: skip
        np.testing.assert_allclose(stored, want, rtol=ulp, atol=tiny, err_msg=case.name)
        h = a["num_heads"]
        seen |= {q.dtype.name, "bias" if "bias" in inputs else "plain"}
        seen |= {"causal"} if a["unidirectional"] else set()
        seen |= {"dv"} if v.shape[2] // max(h, 1) != q.shape[2] // max(h, 1) else set()
        seen |= {"cross"} if k.shape[1] != q.shape[1] else set()
        seen |= {"scale"} if a["scale"] else set()
    assert seen == {"float32", "float16", "bfloat16", "bias", "plain", "causal", "dv", "cross", "scale"}, seen


# --- results -------------------------------------------------------------------------------------

# (B, S, L, H, D, Dv, bias, unidirectional): SD-like cross-attention cut down, CLIP-like causal,
# odd head sizes, Dv != D, L < S and L > S, a single key, S below the tiled variant's 16. Each
# (variant, D, Dv, dtype, bias, causal, tiles) is its own shader, a cold lavapipe compile per suite run
# (seconds for heads of 40 and more, unrolled): every call here is a configuration test.json compiles.
# Heads of 40 and 80 in float32 only, as in test.json: a float16 element is loaded and stored by the
# same unrolled text at any head size that is a multiple of 4 (run at 64, 8 and 16; with the bias at 4 and 8).
CALLS = [
    (2, 37, 29, 3, 9, 13, False, 0),
    (2, 37, 29, 3, 9, 13, True, 0),
    (1, 70, 77, 2, 40, 40, True, 0),
    (1, 77, 77, 2, 64, 64, False, 1),
    (1, 20, 20, 1, 8, 24, True, 1),
    (2, 5, 7, 2, 8, 8, False, 0),
    (1, 18, 1, 2, 4, 3, True, 0),
    (1, 33, 65, 1, 80, 80, False, 0),  # heads of 80 (sd15-self's shaders) over L = 65: 4 key tiles and 1 key
]
CALL_DTYPES = [pytest.param(c, dt, id="x".join(map(str, c[:6])) + ("-bias" if c[6] else "") + ("-causal" if c[7] else "") + "-" + i)
               for c in CALLS for dt, i in zip(DTYPES, DTYPE_IDS) if dt == np.float32 or c[4] not in (40, 80)]  # fmt: skip


@pytest.mark.parametrize(("shape", "dtype"), CALL_DTYPES)
def test_every_variant_against_the_reference_and_onnxruntime(kernel, need_dtype, rng, shape, dtype):
    b, s, n_keys, h, d, dv, bias, causal = shape
    inputs = draw(rng, dtype, b, s, n_keys, h, d, dv, bias)
    attrs = {"num_heads": h, "unidirectional": causal}
    want = ort_mha(inputs, **attrs)
    variants = accepting(kernel, inputs, attrs)
    assert ("tiled" + ("_bias" if bias else "") in variants) == (s >= 16)
    assert "rows" + ("_bias" if bias else "") in variants and len(variants) == 1 + (s >= 16)
    for variant in variants:
        got = call(kernel, inputs, attrs, variant=variant)
        assert_close(got, want, dtype, f"onnxruntime: {shape} {variant}", scale=2.0)


@pytest.mark.parametrize("shape", [(2, 37, 29, 3, 9, 14, True, 0), (1, 20, 20, 2, 8, 6, False, 1), (2, 5, 7, 2, 8, 8, True, 0)])
def test_bfloat16_as_words_on_every_variant(kernel, rng, shape):
    """bfloat16 data is read and written as u32 words (two elements a word, rounded to nearest even),
    for an even Dv, so that each invocation writes whole words of its row; an odd Dv is refused."""
    ml_dtypes = pytest.importorskip("ml_dtypes")
    b, s, n_keys, h, d, dv, bias, causal = shape
    inputs = draw(rng, ml_dtypes.bfloat16, b, s, n_keys, h, d, dv, bias)
    attrs = {"num_heads": h, "unidirectional": causal}
    variants = accepting(kernel, inputs, attrs)
    assert len(variants) == 1 + (s >= 16)
    for variant in variants:
        assert call(kernel, inputs, attrs, variant=variant).dtype == ml_dtypes.bfloat16
    with pytest.raises(wk.SelectionError, match="bf16NeedsEvenDv=False"):
        kernel(draw(rng, ml_dtypes.bfloat16, 1, 4, 5, 2, 4, 3), attrs={"num_heads": 2})


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_large_scores_stay_finite_and_a_given_scale_is_used(kernel, need_dtype, rng, dtype):
    """Scores of several hundred (exp would overflow without the running maximum) give finite,
    correct rows; scale 0.3 is not 1/sqrt(D)."""
    inputs = draw(rng, dtype, 1, 24, 20, 2, 16, 16, std=6.0)
    for scale in (0.3, 4.0):
        attrs = {"num_heads": 2, "scale": scale}
        want = ort_mha(inputs, **attrs)
        for variant in accepting(kernel, inputs, attrs):
            got = kernel(inputs, attrs=attrs, variant=variant)["output"]
            assert np.isfinite(got.astype(np.float64)).all()
            # a score of 16 products of |x| ~ 6 times 4 is ~ 2,000: its f32 error is that much larger
            assert_close(got, want, dtype, f"scale {scale} {variant}", scale=50.0 if scale == 4.0 else 2.0)
            want64 = mha(inputs["query"], inputs["key"], inputs["value"], num_heads=2, scale=scale)
            assert_close(got, want64, dtype, f"scale {scale} {variant} (float64)", scale=50.0 if scale == 4.0 else 2.0)


@pytest.mark.parametrize("tiles", [{"TILE_WORKGROUP": 16, "KV_TILE": 5}, {"TILE_WORKGROUP": 32, "KV_TILE": 1}])
def test_tiles_that_do_not_divide_the_shape(kernel, rng, tiles):
    for causal in (0, 1):
        inputs = draw(rng, np.float32, 1, 41, 41, 2, 12, 7, bias=bool(causal))
        variant = "tiled_bias" if causal else "tiled"
        call(kernel, inputs, {"num_heads": 2, "unidirectional": causal}, variant=variant, tunables=tiles)


def test_head_sizes_up_to_256_and_no_further(kernel, rng):
    """Both variants unroll the head loops into registers when the template renders: heads up to 256
    (every model's here), refused by name past it."""
    inputs = draw(rng, np.float32, 1, 3, 2, 1, 256, 4)
    assert accepting(kernel, inputs, {"num_heads": 1}) == ["rows"]
    call(kernel, inputs, {"num_heads": 1})
    with pytest.raises(wk.SelectionError, match="headSizeSupported=False"):
        kernel(draw(rng, np.float32, 1, 17, 9, 1, 8, 260), attrs={"num_heads": 1})


def test_variants_refuse_what_llvmpipe_cannot_loop_over(kernel, rng):
    """The head loops are unrolled, so the rows variant's only loop is the one over the keys: right
    at L = 65,527 on lavapipe, refused past it (rowLoopOk); the tiled variant counts its tile loops
    (tiledLoopOk) and leaves such a call to rows."""
    inputs = draw(rng, np.float32, 1, 1, 65527, 1, 4, 4)
    call(kernel, inputs, {"num_heads": 1})
    with pytest.raises(wk.SelectionError, match="rowLoopOk=False"):
        kernel(draw(rng, np.float32, 1, 1, 65528, 1, 4, 4), attrs={"num_heads": 1})
    many = {"query": ((1, 16, 4), "float32"), "key": ((1, 65000, 4), "float32"), "value": ((1, 65000, 4), "float32")}
    explanation = kernel.explain(many, attrs={"num_heads": 1})
    assert explanation.chosen == "rows" and "tiledLoopOk=False" in str(explanation)


def test_empty_outputs_dispatch_nothing(kernel, rng):
    for b, s, n_keys in ((0, 5, 4), (2, 0, 4), (0, 3, 0), (1, 0, 0)):
        inputs = draw(rng, np.float32, b, s, n_keys, 2, 4, 4)
        attrs = {"num_heads": 2}
        for variant in accepting(kernel, inputs, attrs):
            assert kernel(inputs, attrs=attrs, variant=variant)["output"].shape == (b, s, 8)
    assert ort_mha(draw(rng, np.float32, 2, 0, 4, 2, 4, 4), num_heads=2).shape == (2, 0, 8)


def test_onnxruntime_causal_mask_when_l_differs_from_s(rng):
    """Why unidirectional is taken for S == L only: onnxruntime's CPU kernel (1.32) masks key j > i
    for every query i but the last, which attends all L keys when L > S (with value = identity, the
    output rows are the attention probabilities)."""
    s, n_keys = 5, 7
    inputs = {"query": np.zeros((1, s, 4), np.float32), "key": np.zeros((1, n_keys, 4), np.float32),
              "value": np.eye(n_keys, dtype=np.float32)[None]}  # fmt: skip
    p = ort_mha(inputs, num_heads=1, unidirectional=1)[0]
    np.testing.assert_allclose(p[0], np.eye(n_keys)[0], atol=1e-6)  # query 0: key 0 only, not keys 0..L-S
    np.testing.assert_allclose(p[s - 1], np.full(n_keys, 1 / n_keys), atol=1e-6)  # the last: every key


def test_mask_filter_value_is_accepted_and_changes_nothing(kernel, rng):
    """mask_filter_value fills key_padding_mask's masked scores (refused here); onnxruntime's causal
    mask does not use it either."""
    inputs = draw(rng, np.float32, 1, 6, 6, 2, 4, 4, std=4.0)
    base = kernel(inputs, attrs={"num_heads": 2, "unidirectional": 1})["output"]
    other = kernel(inputs, attrs={"num_heads": 2, "unidirectional": 1, "mask_filter_value": -1.0})["output"]
    np.testing.assert_array_equal(base, other)
    assert_close(other, ort_mha(inputs, num_heads=2, unidirectional=1, mask_filter_value=-1.0), np.float32, "ort")


# the forms of the op this package refuses, each run by onnxruntime's CPU kernel (which proves the form
# is the op's) but the packed ones, which it refuses as not implemented, and the name the refusal gives
def _refused_forms(rng) -> list:
    f = np.float32
    q, k, v = draw(rng, f, 1, 4, 5, 2, 4, 4).values()
    return [
        ({"query": rng.standard_normal((1, 4, 2, 3, 4)).astype(f)}, "packedQKV=True"),
        ({"query": q, "key": rng.standard_normal((1, 5, 2, 2, 4)).astype(f)}, "packedKV=True"),
        ({"query": q, "key": rng.standard_normal((1, 2, 5, 4)).astype(f), "value": rng.standard_normal((1, 2, 5, 4)).astype(f)},
         "keyValueBNSH=True"),
        ({"query": q, "key": k, "value": v, "key_padding_mask": np.array([[1, 1, 1, 0, 0]], np.int32)}, "noKeyPaddingMask=False"),
        ({"query": q, "key": k, "value": v, "attention_bias": rng.standard_normal((1, 2, 4, 5)).astype(f)}, "noAttentionBias=False"),
        ({"query": q, "key": k, "value": v, "past_key": rng.standard_normal((1, 2, 3, 4)).astype(f),
          "past_value": rng.standard_normal((1, 2, 3, 4)).astype(f)}, "noPastKeyValue=False"),
    ]  # fmt: skip


def test_every_other_input_form_is_refused_by_name(kernel, rng):
    for inputs, name in _refused_forms(rng):
        with pytest.raises(wk.SelectionError, match=name):
            kernel(inputs, attrs={"num_heads": 2})
        if name.startswith("packed"):  # the form is the op's, but onnxruntime's CPU kernel has none
            with pytest.raises(Exception, match="not implemented for CPU"):
                ort_mha(inputs, num_heads=2)
        else:
            assert ort_mha(inputs, num_heads=2).shape[:2] == (1, 4), name
    with pytest.raises(wk.SelectionError, match="keyGiven=False"):
        kernel({"query": np.zeros((1, 4, 8), np.float32)}, attrs={"num_heads": 2})


def test_invalid_attributes_and_inputs_are_typed_errors(kernel, rng):
    inputs = draw(rng, np.float32, 1, 4, 5, 2, 4, 4)
    with pytest.raises(wk.SelectionError, match="numHeadsGiven=False"):
        kernel(inputs)
    with pytest.raises(wk.SelectionError, match="headsDivideHidden=False"):
        kernel(inputs, attrs={"num_heads": 3})
    with pytest.raises(wk.SelectionError, match="causalNeedsSEqualL=False"):
        kernel(inputs, attrs={"num_heads": 2, "unidirectional": 1})
    with pytest.raises(wk.SelectionError, match="unidirectionalOk=False"):
        kernel(inputs, attrs={"num_heads": 2, "unidirectional": 2})
    with pytest.raises(wk.SelectionError, match="biasShapeOk=False"):
        kernel({**inputs, "bias": np.zeros(23, np.float32)}, attrs={"num_heads": 2})
    for bad in (1.5, "2", True):
        with pytest.raises(errors.AttributeValueError) as info:
            kernel(inputs, attrs={"num_heads": bad})
        assert info.value.argument == "num_heads"
    with pytest.raises(errors.RankError) as rank:
        kernel({**inputs, "query": np.zeros((1, 4, 2, 4), np.float32)}, attrs={"num_heads": 2})
    assert rank.value.argument == "query"
    with pytest.raises(errors.DTypeError):
        kernel({n: a.astype(np.float64) for n, a in inputs.items()}, attrs={"num_heads": 2})
    with pytest.raises(errors.DTypeError):
        kernel({**inputs, "value": inputs["value"].astype(np.float16)}, attrs={"num_heads": 2})
    with pytest.raises(errors.UnknownInputError):
        kernel(inputs, attrs={"num_heads": 2, "do_rotary": 1})
