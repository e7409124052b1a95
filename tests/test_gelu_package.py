"""tests/packages/ai.onnx.Gelu: ONNX Gelu (ai.onnx, since opset 20), written from the format documents
alone and run through load_kernel() with no engine change.

Semantics (the operator definition): ``Y = 0.5 * X * (1 + erf(X / sqrt(2)))`` with ``approximate =
"none"`` (default), ``Y = 0.5 * X * (1 + tanh(sqrt(2 / pi) * (X + 0.044715 * X^3)))`` with
``approximate = "tanh"``; float32 and float16 here (opset 20 also takes double and bfloat16: a
DTypeError). The package computes in f32 and rounds to float16 once; erf is a polynomial
approximation in the template (within 1.3e-8 relative of 1 + erf in float64, checked below).

Judged against a float64 NumPy reference written from the definition (``math.erfc`` per element, so
that 1 + erf keeps its digits for negative X; for the tanh form ``1 + tanh(u)`` as ``2 / (1 +
exp(-2u))``, the same number without 1 + tanh's cancellation, and checked against ``np.tanh`` below) and onnxruntime's CPU kernel (a
one-node opset-20 model), which has Gelu for float32 and float16.

test.json's expected values come from ``expect_reference``: ``webgpu-kernels expect
tests/packages/ai.onnx.Gelu --reference tests/test_gelu_package.py:expect_reference``.
"""

from __future__ import annotations

import functools
import json
import math
import re

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

PACKAGE_NAME = "ai.onnx.Gelu"
PACKAGE = PACKAGES_DIR / PACKAGE_NAME
VARIANTS = ["vec4", "scalar"]
FORMS = ("none", "tanh")
# f32: the kernel's own error (lavapipe's exp and the f32 evaluation; 4.8e-7 relative emulated in
# NumPy f32) with room for a GPU's exp; f16: one f16 ulp (2^-10) for the double rounding, and the
# subnormal step near 0.
TOLERANCE = {np.dtype(np.float32): (4e-6, 1e-7), np.dtype(np.float16): (1e-3, 1e-7)}


# --- reference (also `webgpu-kernels expect`'s) ------------------------------------------------------


def gelu(x: np.ndarray, approximate: str = "none") -> np.ndarray:
    """Gelu-20 in float64. ValueError for an `approximate` the operator does not define."""
    x = np.asarray(x, dtype=np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        if approximate == "none":
            # 1 + erf(x / sqrt(2)) = erfc(-x / sqrt(2)): no cancellation for negative x
            one_plus = np.array([math.erfc(-v / math.sqrt(2.0)) if not math.isnan(v) else math.nan for v in x.ravel()])
            return 0.5 * x * one_plus.reshape(x.shape)
        if approximate == "tanh":
            # 1 + tanh(u) written as 2 / (1 + exp(-2u)), the same number: 1 + np.tanh(u) cancels for
            # u < -18 (x < -5.5), where float64's tanh is -1 to the last bit
            u = math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)
            return 0.5 * x * (2.0 / (1.0 + np.exp(-2.0 * u)))
    raise ValueError(f"approximate {approximate!r}")


def expect_reference(inputs: dict, attrs: dict) -> dict:
    """For `webgpu-kernels expect`: inputs as `test` builds them, attributes over the defaults."""
    return {"Y": gelu(inputs["X"], attrs.get("approximate", "none"))}


@functools.lru_cache(maxsize=None)
def ort_session(approximate: str, float16: bool):
    """A one-node Gelu-20 model on onnxruntime's CPU provider (a symbolic shape of rank 1)."""
    pytest.importorskip("onnxruntime")
    pytest.importorskip("onnx")
    from onnx import TensorProto, helper

    from references import one_node_session

    kind = TensorProto.FLOAT16 if float16 else TensorProto.FLOAT
    vi = helper.make_tensor_value_info
    node = helper.make_node("Gelu", ["X"], ["Y"], approximate=approximate)
    return one_node_session(node, [vi("X", kind, ["n"])], [vi("Y", kind, ["n"])], 20)


def ort_gelu(x: np.ndarray, approximate: str) -> np.ndarray:
    session = ort_session(approximate, x.dtype == np.float16)
    return session.run(None, {"X": x.reshape(-1)})[0].reshape(x.shape)


def assert_close(got: np.ndarray, want: np.ndarray, dtype, what: str, factor: float = 1.0) -> None:
    rtol, atol = TOLERANCE[np.dtype(dtype)]
    np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=rtol * factor,
                               atol=atol * factor, err_msg=what)  # fmt: skip


def run(kernel: wk.Kernel, x: np.ndarray, approximate: str = "none", **options) -> np.ndarray:
    """One call, every output element written (poisoned first), X untouched, checked against the
    float64 reference rounded to X's dtype."""
    attrs = {"approximate": approximate}
    before = x.copy()
    poison_outputs(kernel, {"X": x}, attrs=attrs, tunables=options.get("tunables"))
    got = kernel({"X": x}, attrs=attrs, **options)["Y"]
    assert x.tobytes() == before.tobytes()
    assert got.dtype == x.dtype and got.shape == x.shape
    with np.errstate(over="ignore"):
        want = gelu(x, approximate).astype(x.dtype)
    assert_close(got, want, x.dtype, f"X {x.shape} {x.dtype} {approximate} {options}")
    return got


@pytest.fixture(scope="module")
def kernel() -> wk.Kernel:
    return wk.load_kernel(PACKAGE)


def draw(rng: np.random.Generator, shape: tuple, dtype, std: float = 2.0) -> np.ndarray:
    return (rng.standard_normal(shape) * std).astype(dtype)


# --- the package ----------------------------------------------------------------------------------


def test_package_files(kernel):
    data = json.loads((PACKAGE / "manifest.json").read_text("utf-8"))
    assert (data["domain"], data["name"], data["sinceVersion"]) == ("ai.onnx", "Gelu", 20)
    assert data["attributes"] == {"approximate": "none"}
    assert data["typeConstraints"] == {"T": ["float32", "float16"]}
    assert kernel.op_id == PACKAGE_NAME and kernel.variants == VARIANTS


def test_engine_has_no_code_for_it():
    assert_engine_has_no_code_for("ai.onnx.Gelu")


def test_validates_and_its_test_json_passes(kernel):
    assert_valid_and_passing(kernel, PACKAGE, VARIANTS)


def test_expected_outputs_are_the_reference(kernel):
    """test.json's stored outputs are this module's float64 reference of the case's inputs, rounded once."""
    checked = set()
    for case, inputs, stored in stored_expectations(kernel, "Y", lambda ins: ins["X"].dtype.name):
        with np.errstate(over="ignore"):
            want = expect_reference(inputs, dict(case.attrs))["Y"].astype(inputs["X"].dtype)
        np.testing.assert_array_equal(stored, want.astype(np.float64), err_msg=case.name)
        checked.add((case.attrs.get("approximate", "none"), inputs["X"].dtype.name, inputs["X"].size))
    assert {(f, d) for f, d, _ in checked} == {(f, d) for f in FORMS for d in ("float32", "float16")}
    assert {1, 7, 1023} <= {n for _, _, n in checked}


def test_the_tanh_reference_is_the_formula():
    """The reference's 2 / (1 + exp(-2u)) is 1 + tanh(u): equal to float64 rounding where 1 + np.tanh(u)
    does not cancel, and the digits it keeps below."""
    x = np.linspace(-4.0, 20.0, 100_001)
    literal = 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)))
    np.testing.assert_allclose(gelu(x, "tanh"), literal, rtol=1e-11, atol=1e-300)
    assert gelu(np.array([-7.0]), "tanh")[0] < 0.0  # 1 + np.tanh(u) is 0 there


# --- the erf approximation, in float64 -----------------------------------------------------------


def template_value(name: str):
    """A list the template sets (`{% set NAME = [...] %}`) or a number."""
    text = (PACKAGE / "gelu.wgsl.jinja").read_text("utf-8")
    found = re.search(r"\{% set " + name + r" = ([^%]*) %\}", text)
    assert found, name
    return json.loads(found[1])


def horner(coefs: list, v: np.ndarray) -> np.ndarray:
    r = np.full_like(v, coefs[0])
    for c in coefs[1:]:
        r = r * v + c
    return r


def test_the_erf_approximation_is_accurate_in_float64():
    """As written in the template, with its coefficients rounded to f32, 1 + erf(z) is within 1.3e-8 of
    itself, relative, wherever it is not below f32's range (z > -9.2; far beyond, erfc underflows)."""
    near = [float(np.float32(c)) for c in template_value("ERF_NEAR")]
    far = [float(np.float32(c)) for c in template_value("ERFC_R")]
    limit = template_value("NEAR")
    z = np.concatenate([np.linspace(-9.2, 9.2, 368_001), [-limit, limit, -1e-30, 0.0, 1e-30]])
    a = np.abs(z)
    t = 1.0 / (1.0 + 0.5 * a)
    erfc_a = t * np.exp(-a * a + horner(far, t))
    got = np.where(a <= limit, 1.0 + z * horner(near, z * z), np.where(z > 0, 2.0 - erfc_a, erfc_a))
    want = np.array([math.erfc(-v) for v in z])
    assert np.max(np.abs(got - want) / want) < 1.3e-8


# --- results -------------------------------------------------------------------------------------

SHAPES = [(1,), (7,), (33, 31), (), (2, 0, 3), (5, 77), (4, 1024)]


@pytest.mark.parametrize("approximate", FORMS)
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)) or "rank0")
def test_shapes_on_every_variant(kernel, rng, need_dtype, shape, dtype, approximate):
    need_dtype(dtype)
    x = draw(rng, shape, dtype)
    assert kernel.explain({"X": x}, attrs={"approximate": approximate}).chosen == "vec4"
    for variant in VARIANTS:
        run(kernel, x, approximate, variant=variant)


# The MLP intermediates of model-shapes.md (CLIP text, ViT-B/32) and the SD UNet GEGLU gate, batch and
# sequence cut for lavapipe.
MODEL_SHAPES = {
    "clip-text-1x77x3072": (1, 77, 3072),
    "vit-b32-1x50x3072": (1, 50, 3072),
    "sd-gate-1x64x1280": (1, 64, 1280),
}


@pytest.mark.parametrize("approximate", FORMS)
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("model", MODEL_SHAPES)
def test_model_shapes_against_onnxruntime(kernel, rng, need_dtype, model, dtype, approximate):
    """The float64 reference, and onnxruntime's Gelu-20 on the CPU: within twice test.json's tolerance of
    it for the erf form. Its tanh form is off by up to 5.7e-7 absolute (float32) near the negative tail
    (-2.2738e-4 for -2.2712e-4, and -7.5e-6 for -7.3e-6: 1 + tanh(u) in f32 cancels there; the float64
    reference agrees with the package), so that comparison gets an absolute slack of 1e-6."""
    need_dtype(dtype)
    x = draw(rng, MODEL_SHAPES[model], dtype, std=1.5)
    got = run(kernel, x, approximate)
    theirs = ort_gelu(x, approximate)
    rtol, atol = TOLERANCE[np.dtype(dtype)]
    atol = 1e-6 if approximate == "tanh" else 2 * atol
    np.testing.assert_allclose(
        got.astype(np.float64), theirs.astype(np.float64), rtol=2 * rtol, atol=atol, err_msg=model
    )


@pytest.mark.parametrize("approximate", FORMS)
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_specials(kernel, need_dtype, dtype, approximate):
    """NaN stays NaN, +inf gives +inf and -inf NaN (-inf * 0, as the formula), signed zeros stay, large
    finite values give x or -0."""
    need_dtype(dtype)
    big = float(np.finfo(dtype).max)
    x = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, big, -big, 1.0], dtype)
    for variant in VARIANTS:
        got = kernel({"X": x}, attrs={"approximate": approximate}, variant=variant)["Y"]
        assert np.isnan(got[0]) and got[1] == np.inf and np.isnan(got[2]), (variant, got)
        assert got[3] == 0 and not np.signbit(got[3]) and got[4] == 0 and np.signbit(got[4]), (variant, got)
        assert got[5] == big and got[6] == 0 and np.signbit(got[6]), (variant, got)


@pytest.mark.parametrize("approximate", FORMS)
def test_the_negative_tail_keeps_its_digits(kernel, approximate):
    """In f32 on the device, gelu(x) for x in [-9, 0] (|Y| from 1e-20 to 0.17) is within 3e-5 of itself,
    with no absolute slack: 1 + erf is computed as erfc there and 1 + tanh as 2 e / (1 + e), neither as
    1 - (almost 1). (lavapipe: 1.2e-5 at worst.)"""
    x = -np.linspace(0.0, 9.0, 8192, dtype=np.float32)
    for variant in VARIANTS:
        got = kernel({"X": x}, attrs={"approximate": approximate}, variant=variant)["Y"]
        np.testing.assert_allclose(got.astype(np.float64), gelu(x, approximate), rtol=3e-5, atol=0.0, err_msg=variant)


@pytest.mark.parametrize("wg", [1, 7, 64, 1024])
def test_workgroup_sizes(kernel, need_workgroup_size, rng, wg):
    need_workgroup_size(wg)
    x = draw(rng, (3, 341), np.float32)
    for variant in VARIANTS:
        run(kernel, x, "tanh" if wg % 2 else "none", variant=variant, tunables={"WORKGROUP_SIZE": wg})


def test_gpu_tensors_and_non_contiguous_inputs(kernel, rng):
    x = draw(rng, (16, 40), np.float32)[:, ::3]
    run(kernel, x)
    on_gpu = wk.to_gpu(x)
    y = kernel({"X": on_gpu}, output="gpu")["Y"]
    assert_close(y.numpy(), gelu(x).astype(np.float32), np.float32, "gpu")
    y.release()
    on_gpu.release()


def test_one_pipeline_per_form_and_float16_vec4_moves_words(kernel):
    """The form is baked in (two distinct WGSL texts); vec4 views float16 as u32 words and enables no f16."""
    x = np.zeros(8, np.float16)
    texts = {f: kernel.render({"X": x}, attrs={"approximate": f})["main"] for f in FORMS}
    assert len(set(texts.values())) == 2
    for text in texts.values():
        assert "enable f16" not in text and "var<storage, read> x: array<vec2<u32>>" in text


def test_vec4_runs_without_shader_f16(kernel, gl_device, rng):
    """On an adapter without shader-f16 vec4 takes float16 (any count); scalar is refused there."""
    x = draw(rng, (3, 7), np.float16)
    got = kernel({"X": x}, adapter="gl")["Y"]
    assert_close(got, gelu(x).astype(np.float16), np.float16, "gl")
    with pytest.raises(errors.DeviceLimitError, match="shader-f16"):
        kernel({"X": x}, adapter="gl", variant="scalar")


# --- refusals ------------------------------------------------------------------------------------


@pytest.mark.parametrize("value", ["exact", "TANH", "", "erf"])
def test_an_unknown_approximate_is_refused_naming_the_attribute(kernel, value):
    """ONNX defines "none" and "tanh" only: any other string is a SelectionError (a KernelError) whose
    trace names the clause and the attribute's value, on every variant, forced or not."""
    x = np.ones((2, 3), np.float32)
    with pytest.raises(errors.SelectionError) as info:
        kernel({"X": x}, attrs={"approximate": value})
    message = str(info.value)
    assert "approximateOk=False" in message and f"attrs.approximate={value!r}" in message, message
    assert isinstance(info.value, wk.KernelError)
    # the attribute alone refuses it, on any device: the headline names it, not "no variant can run"
    assert message.splitlines()[0] == f"ai.onnx.Gelu: no variant accepts attribute approximate={value!r}:"
    assert info.value.attributes == ("approximate",)
    for variant in VARIANTS:
        with pytest.raises(errors.VariantRejectedError, match="approximateOk"):
            kernel({"X": x}, attrs={"approximate": value}, variant=variant)


@pytest.mark.parametrize("value", [1, 0.5, True, None, ["tanh"]])
def test_a_non_string_approximate_is_an_attribute_value_error(kernel, value):
    with pytest.raises(errors.AttributeValueError) as info:
        kernel({"X": np.ones(3, np.float32)}, attrs={"approximate": value})
    assert info.value.argument == "approximate" and "string" in str(info.value)


def test_other_dtypes_are_refused(kernel):
    for dtype in (np.float64, np.int32):
        with pytest.raises(errors.DTypeError):
            kernel({"X": np.ones(3, dtype)})


def test_onnxruntime_refuses_an_unknown_approximate_too():
    """The package's refusal matches the operator's: onnxruntime does not run approximate='exact'."""
    pytest.importorskip("onnxruntime")
    x = np.ones(3, np.float32)
    with pytest.raises(Exception, match="Unsupported approximation_algorithm: exact"):
        ort_gelu(x, "exact")
