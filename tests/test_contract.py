"""Contract checks, before any GPU work: each mistake raises the library's error class, and the
message names the argument, what was expected and what came."""

from __future__ import annotations

import json

import numpy as np
import pytest

import webgpu_kernels as wk
from webgpu_kernels import errors

f32 = np.float32
f16 = np.float16


def bias_inputs(shape=(2, 3, 8), dtype=f32, **override):
    inputs = {"X": np.ones(shape, dtype), "bias": np.ones(shape[-1:], dtype), "skip": np.ones(shape, dtype)}
    inputs.update(override)
    return {k: v for k, v in inputs.items() if v is not None}


def raises(error_class, call, *mentions, argument=None):
    """Run ``call``; it must raise exactly ``error_class`` (or a subclass) naming ``mentions``."""
    with pytest.raises(error_class) as info:
        call()
    message = str(info.value)
    for text in mentions:
        assert text in message, f"{text!r} not in {message!r}"
    assert isinstance(info.value, wk.KernelError)
    if argument is not None:
        assert info.value.argument == argument
        assert repr(argument) in message
    return info.value


def no_plan_built(kernel, call):
    """``call`` fails before a plan (pipeline, buffers) is made."""
    before = len(kernel._plans)
    with pytest.raises(wk.KernelError):
        call()
    assert len(kernel._plans) == before


# --- inputs -------------------------------------------------------------------------------------


def test_unknown_input(quick_gelu):
    x = np.ones(4, f32)
    error = raises(errors.UnknownInputError, lambda: quick_gelu({"X": x, "Z": x}), "an unknown input", "['X']",
                   argument="Z")  # fmt: skip
    assert error.expected.startswith("one of the inputs")


def test_an_output_passed_as_input_says_so(quick_gelu):
    raises(errors.UnknownInputError, lambda: quick_gelu({"X": np.ones(4, f32), "Y": np.ones(4, f32)}), "output",
           argument="Y")  # fmt: skip


@pytest.mark.parametrize("missing", ["X", "bias", "skip"])
def test_missing_input(bias_add, missing):
    inputs = bias_inputs(**{missing: None})
    error = raises(errors.MissingInputError, lambda: bias_add(inputs), "nothing", argument=missing)
    assert "T" in error.expected


def test_missing_everything(quick_gelu):
    raises(errors.MissingInputError, lambda: quick_gelu({}), argument="X")


@pytest.mark.parametrize(
    "arg, value, expected_rank",
    [("X", np.ones((6, 8), f32), 3), ("X", np.ones((1, 2, 3, 8), f32), 3), ("bias", np.ones((1, 8), f32), 1),
     ("skip", np.ones((2, 3, 8, 1), f32), 3), ("bias", np.float32(1.0), 1)],
)  # fmt: skip
def test_wrong_rank(bias_add, arg, value, expected_rank):
    inputs = bias_inputs(**{arg: value})
    error = raises(errors.RankError, lambda: bias_add(inputs), f"rank {expected_rank}", f"rank {np.ndim(value)}",
                   argument=arg)  # fmt: skip
    assert isinstance(error, errors.InputError)


@pytest.mark.parametrize("dtype", ["float64", "int32", "int64", "uint8", "bool", "complex64"])
def test_dtype_outside_the_constraint(quick_gelu, dtype):
    raises(errors.DTypeError, lambda: quick_gelu({"X": np.ones(4, dtype)}), dtype, "float32", "float16", argument="X")


def test_bfloat16_is_refused(quick_gelu):
    ml_dtypes = pytest.importorskip("ml_dtypes")
    x = np.ones(4, dtype=ml_dtypes.bfloat16)
    raises(errors.DTypeError, lambda: quick_gelu({"X": x}), "bfloat16", argument="X")


@pytest.mark.parametrize("dtype, hint", [
    ("bfloat16", "(convert with .astype(np.float32))"),
    ("int64", "(convert with .astype(np.float32), or np.asarray(x, np.float32) from a list)"),
    ("uint8", "(convert with .astype(np.float32))"),
    ("bool", "(convert with .astype(np.float32), or np.asarray(x, np.float32) from a list; True becomes 1 and "
             "False 0, and 'X' is: Input tensor of any shape.)"),
    ("float64", "(NumPy's default, Python floats and lists of them are float64: convert with .astype(np.float32), "
                "or np.asarray(x, np.float32) from a list)"),
])  # fmt: skip
def test_a_refused_numeric_dtype_says_how_to_convert(quick_gelu, dtype, hint):
    """Only float64 got advice; a bfloat16, integer or bool array for a float input got none. The
    dtypes a Python list gives are also told the conversion from a list, which has no .astype
   ."""
    if dtype == "bfloat16":
        dtype = pytest.importorskip("ml_dtypes").bfloat16
    error = raises(errors.DTypeError, lambda: quick_gelu({"X": np.ones(4, dtype)}), argument="X")
    assert str(error).endswith(hint)


def test_a_conversion_hint_picks_a_type_that_holds_the_values():
    """One that holds every value of what came first, else the widest: uint64 had been told
    int32 (the first integer type allowed), whose range it passes far more often than int64's."""
    from webgpu_kernels.contract import conversion_hint

    assert conversion_hint("uint64", ["int32", "int64"]).endswith(".astype(np.int64)")
    assert conversion_hint("uint8", ["int32", "int64"]).endswith(".astype(np.int32)")
    assert conversion_hint("int16", ["int8", "float16", "float32"]).endswith(".astype(np.float32)")
    assert conversion_hint("float64", ["float16", "float32"]).endswith(
        ".astype(np.float32), or np.asarray(x, np.float32) from a list")


def test_a_conversion_hint_keeps_to_the_kind_of_the_values():
    """Integers to an integer type first; a float is never told to become an integer (that truncates);
    what converts to no number (strings, objects, complex) gets no advice."""
    from conftest import PACKAGES_DIR

    gather = wk.load_kernel(PACKAGES_DIR / "demo.Gather")
    data = np.ones((4, 2), f32)
    error = raises(errors.DTypeError, lambda: gather({"data": data, "indices": np.zeros(2, np.uint8)}),
                   argument="indices")  # fmt: skip
    assert str(error).endswith("(convert with .astype(np.int32))")
    error = raises(errors.DTypeError, lambda: gather({"data": data, "indices": np.zeros(2, f32)}), argument="indices")
    assert str(error).endswith("got float32")
    for value in (np.array(["1.0"]), np.array([1.0, None]), np.ones(2, np.complex64)):
        error = raises(errors.DTypeError, lambda v=value: gather({"data": v, "indices": np.zeros(2, np.int32)}))
        assert str(error).endswith(f"got {value.dtype.name}")


def test_an_integer_mask_for_a_bool_input_is_told_the_conversion():
    """An integer 0/1 mask (a Hugging Face attention_mask is int64) where the input is bool: told
    to convert, nonzero becoming True; a float is not (an additive mask of 0 and -inf is no bool)."""
    from conftest import PACKAGES_DIR

    where = wk.load_kernel(PACKAGES_DIR / "demo.Where")
    x = np.ones(4, f32)
    for dtype in (np.int64, np.uint8):
        error = raises(errors.DTypeError, lambda d=dtype: where({"condition": np.array([1, 0, 1, 0], d), "X": x, "Y": x}),
                       argument="condition")  # fmt: skip
        assert "(convert with .astype(np.bool_)" in str(error) and str(error).endswith("; nonzero values become True)")
    error = raises(errors.DTypeError, lambda: where({"condition": x, "X": x, "Y": x}), argument="condition")
    assert str(error).endswith("got float32")


def test_a_float64_gpu_tensor_is_told_to_upload_a_converted_array(quick_gelu):
    """wk.to_gpu([1.0]) is float64: the hint said .astype(np.float32), which a GpuTensor lacks."""
    t = wk.to_gpu([1.0, 2.0])
    try:
        for call in (lambda: quick_gelu({"X": t}), lambda: quick_gelu.explain({"X": t})):
            message = str(raises(errors.DTypeError, call, "got float64", argument="X"))
            assert "convert with" not in message
            assert "to_gpu(a.astype(np.float32))" in message and "to_gpu(t.numpy().astype(np.float32))" in message
        converted = wk.to_gpu(t.numpy().astype(np.float32))  # the advice, as written
        np.testing.assert_allclose(quick_gelu({"X": converted})["Y"], quick_gelu({"X": t.numpy().astype(f32)})["Y"])
        converted.release()
    finally:
        t.release()


@pytest.mark.parametrize("arg", ["bias", "skip"])
def test_type_variable_bound_to_two_dtypes(bias_add, arg):
    inputs = bias_inputs(dtype=f32)
    inputs[arg] = inputs[arg].astype(f16)
    error = raises(errors.DTypeError, lambda: bias_add(inputs), "float32", "float16", "'X'", "T", argument=arg)
    assert error.received == "float16"


def test_x_in_f16_with_f32_bias(bias_add):
    inputs = bias_inputs(dtype=f16)
    inputs["bias"] = inputs["bias"].astype(f32)
    raises(errors.DTypeError, lambda: bias_add(inputs), "float16", argument="bias")


_ONE_DTYPE = "but a call gives type variable T one dtype"


@pytest.mark.parametrize("dtype, changed, hint", [
    (f32, {"bias": f16}, f"('X' is float32 and 'bias' float16, {_ONE_DTYPE}: convert 'bias' with .astype(np.float32))"),
    (f32, {"skip": f16},
     f"('X' and 'bias' are float32 and 'skip' float16, {_ONE_DTYPE}: convert 'skip' with .astype(np.float32))"),
    (f16, {"bias": f32}, f"('X' is float16 and 'bias' float32, {_ONE_DTYPE}: convert 'bias' with .astype(np.float16))"),
])  # fmt: skip
def test_a_type_variable_given_two_dtypes_says_which_inputs_and_how_to_convert(bias_add, dtype, changed, hint):
    """X float32 with a float16 bias said what T was bound to, not what to do."""
    inputs = bias_inputs(dtype=dtype)
    inputs.update({k: inputs[k].astype(v) for k, v in changed.items()})
    (argument,) = changed
    for call in (lambda: bias_add(inputs), lambda: bias_add.explain(inputs)):
        assert str(raises(errors.DTypeError, call, argument=argument)).endswith(hint)
    if dtype is f32:  # the advice, as written
        inputs[argument] = inputs[argument].astype(np.float32)
        np.testing.assert_array_equal(bias_add(inputs)["Y"], bias_add(bias_inputs())["Y"])


@pytest.mark.parametrize("value", [[1.0] * 8, np.ones(8), np.ones(8, np.int64)], ids=["list", "float64", "int64"])
def test_a_refused_dtype_after_the_type_variable_is_bound_is_told_the_bound_dtype(bias_add, value):
    """A float16 X with a bias from a Python list was told .astype(np.float32), which the call then
    refused as float32 unlike X: the advice is the dtype the inputs before it gave T."""
    inputs = bias_inputs(dtype=f16, bias=value)
    for call in (lambda: bias_add(inputs), lambda: bias_add.explain(inputs)):
        assert str(raises(errors.DTypeError, call, argument="bias")).endswith(
            "with .astype(np.float16), or np.asarray(x, np.float16) from a list)")
    inputs["bias"] = np.asarray(value, np.float16)  # the advice, as written
    np.testing.assert_array_equal(bias_add(inputs)["Y"], bias_add(bias_inputs(dtype=f16))["Y"])


def test_a_refused_dtype_before_the_others_is_told_their_dtype(bias_add):
    """X from a list before a float16 bias and skip: told float32, each of the others was then
    refused in turn; the advice is the dtype the inputs after it agree on."""
    inputs = bias_inputs(dtype=f16, X=np.ones((2, 3, 8)).tolist())
    for call in (lambda: bias_add(inputs), lambda: bias_add.explain(inputs)):
        assert str(raises(errors.DTypeError, call, argument="X")).endswith(
            "with .astype(np.float16), or np.asarray(x, np.float16) from a list)")
    inputs["X"] = np.asarray(inputs["X"], np.float16)  # the advice, as written
    np.testing.assert_array_equal(bias_add(inputs)["Y"], bias_add(bias_inputs(dtype=f16))["Y"])


def test_a_type_variable_given_two_dtypes_by_a_gpu_tensor_says_to_convert_it_on_the_gpu(bias_add):
    inputs = bias_inputs()
    half = inputs["bias"] = wk.to_gpu(np.ones(8, f16))
    try:
        for call in (lambda: bias_add(inputs), lambda: bias_add.explain(inputs)):
            message = str(raises(errors.DTypeError, call, "'X' is float32 and 'bias' float16", argument="bias"))
            assert message.endswith("convert 'bias' on the GPU: t.astype(np.float32), a new GpuTensor (release the "
                                    "old one after its last use))")
        inputs["bias"] = half.astype(np.float32)  # the advice, as written
        np.testing.assert_array_equal(bias_add(inputs)["Y"], bias_add({**inputs, "bias": np.ones(8, np.float32)})["Y"])
        inputs["bias"].release()
    finally:
        half.release()


def test_a_type_variable_given_a_float_after_an_integer_converts_the_integers():
    """A float is never advised to become an integer: the inputs before it are advised to convert."""
    from webgpu_kernels.contract import _mixed_dtypes_hint

    assert _mixed_dtypes_hint("T", "B", "float32", ["A", "C"], "int32", ()).endswith(
        ": convert 'A' and 'C' with .astype(np.float32)")
    assert _mixed_dtypes_hint("T", "B", "float32", ["A"], "int32", ["A"]).endswith(
        ": upload 'A' converted: to_gpu(a.astype(np.float32)) from the array, or to_gpu(t.numpy().astype(np.float32)) "
        "from this tensor (GpuTensor.astype converts only between float32 and float16)")
    assert _mixed_dtypes_hint("T", "B", "int32", ["A"], "bool", ()).endswith(": convert 'A' with .astype(np.int32)")
    assert _mixed_dtypes_hint("T", "B", "complex64", ["A"], "float32", ()) == (  # no conversion fits: the facts alone
        "'A' is float32 and 'B' complex64, but a call gives type variable T one dtype")


def test_python_lists_become_float64_and_are_refused(quick_gelu):
    raises(errors.DTypeError, lambda: quick_gelu({"X": [1.0, 2.0]}), "float64", argument="X")


@pytest.mark.parametrize("value", ["text", object(), {"a": 1}])
def test_not_an_array(quick_gelu, value):
    with pytest.raises(errors.InputError) as info:
        quick_gelu({"X": value})
    assert "'X'" in str(info.value)


@pytest.mark.parametrize("inputs", [[np.ones(4, f32)], np.ones(4, f32), None, {1: np.ones(4, f32)}])
def test_inputs_must_be_a_dict_of_names(quick_gelu, inputs):
    raises(errors.InputError, lambda: quick_gelu(inputs), "inputs")


def test_shapes_that_do_not_fit_leave_no_variant(bias_add):
    """bias of the wrong length, skip of another shape: no `when` holds; the error lists why."""
    inputs = bias_inputs(bias=np.ones(4, f32))
    error = raises(errors.SelectionError, lambda: bias_add(inputs), "dim(shapes.bias, 0) == dim(shapes.X, 2)",
                   "vec4", "scalar")  # fmt: skip
    assert len(error.trace) == 2
    inputs = bias_inputs(skip=np.ones((2, 4, 8), f32))
    raises(errors.SelectionError, lambda: bias_add(inputs), "sameShape(shapes.X, shapes.skip)")


# --- options ------------------------------------------------------------------------------------


@pytest.mark.parametrize("output", ["cpu", "NUMPY", "", None, "torch"])
def test_bad_output_kind(quick_gelu, output):
    raises(errors.InputError, lambda: quick_gelu({"X": np.ones(4, f32)}, output=output), "numpy", "gpu",
           argument="output")  # fmt: skip


def test_bad_output_kind_is_refused_even_after_a_good_call(quick_gelu):
    x = np.ones(4, f32)
    quick_gelu({"X": x}, output="numpy")
    raises(errors.InputError, lambda: quick_gelu({"X": x}, output="bogus"), argument="output")


def test_unknown_variant(quick_gelu):
    error = raises(errors.SelectionError, lambda: quick_gelu({"X": np.ones(4, f32)}, variant="vec8"), "'vec8'",
                   "vec4", "vec4_tail", "scalar")  # fmt: skip
    assert not isinstance(error, errors.VariantRejectedError)


@pytest.mark.parametrize(
    "kernel_name, inputs, variant, clause",
    [
        ("com.microsoft.QuickGelu", {"X": np.ones(5, f32)}, "vec4", "vec4Ok"),
        ("com.microsoft.QuickGelu", {"X": np.ones(0, f32)}, "vec4_tail", "numel(shapes.X) > 0"),
        ("com.microsoft.BiasAdd", bias_inputs((2, 2, 6)), "vec4", "dim(shapes.X, 2) % 4 == 0"),
        ("com.microsoft.BiasAdd", bias_inputs((1, 5, 3)), "vec4", "numel(shapes.X) % 4 == 0"),
        ("com.microsoft.BiasAdd", bias_inputs((0, 5, 4)), "vec4", "numel(shapes.X) > 0"),
    ],
)  # fmt: skip
def test_forcing_a_variant_whose_when_fails(kernel_name, inputs, variant, clause):
    kernel = wk.get_kernel(kernel_name)
    error = raises(errors.VariantRejectedError, lambda: kernel(inputs, variant=variant), repr(variant), clause)
    assert error.variant == variant and error.clause == clause
    # render() and explain() agree
    with pytest.raises(errors.VariantRejectedError):
        kernel.render(inputs, variant=variant)
    verdict = next(v for v in kernel.explain(inputs).verdicts if v.variant == variant)
    assert verdict.clause == clause


def test_unknown_attribute(quick_gelu):
    raises(errors.UnknownInputError, lambda: quick_gelu({"X": np.ones(4, f32)}, attrs={"beta": 1.0}), "alpha",
           argument="beta")  # fmt: skip


@pytest.mark.parametrize(("inputs", "attrs", "tunables", "argument", "hint"), [
    ({"X": np.ones(4, f32)}, {"X": 1.0}, None, "X", "it is an input of this kernel: pass it in the inputs dict"),
    ({"X": np.ones(4, f32), "alpha": np.float32(1.0)}, None, None, "alpha", "it is an attribute of this kernel: pass it in attrs="),
    ({"X": np.ones(4, f32)}, None, {"alpha": 1.0}, "alpha", "it is an attribute of this kernel: pass it in attrs="),
    ({"X": np.ones(4, f32)}, {"WORKGROUP_SIZE": 64}, None, "WORKGROUP_SIZE", "it is a tunable of this kernel: pass it in tunables="),
])  # fmt: skip
def test_a_name_given_in_the_wrong_place_says_where_it_goes(quick_gelu, inputs, attrs, tunables, argument, hint):
    """attrs={"axis": 1} for an op whose axis is an input (ONNX CumSum, ReduceSum-13) said only
    "unknown attribute", though the output passed as an input says what it is."""
    raises(errors.UnknownInputError, lambda: quick_gelu(inputs, attrs=attrs, tunables=tunables), hint,
           argument=argument)  # fmt: skip


@pytest.mark.parametrize("alpha", ["1.7", None, [1.0], True, float("nan"), float("inf"), -float("inf")])
def test_bad_attribute_value(quick_gelu, alpha):
    raises(errors.AttributeValueError, lambda: quick_gelu({"X": np.ones(4, f32)}, attrs={"alpha": alpha}),
           argument="alpha")  # fmt: skip


@pytest.mark.parametrize("alpha", [2, np.float32(0.5), np.float64(-1.25), np.int64(3)])
def test_numeric_attribute_values_of_other_types_are_accepted(quick_gelu, alpha):
    x = np.linspace(-3, 3, 8, dtype=f32)
    y = quick_gelu({"X": x}, attrs={"alpha": alpha})["Y"]
    a = float(alpha)
    np.testing.assert_allclose(y, x / (1 + np.exp(-a * x.astype(np.float64))), rtol=1e-5, atol=1e-6)


class _MutableScalar:
    """What a torch or JAX 0-d tensor is to the engine: an array-like, hashed by identity, that
    can change in place."""

    def __init__(self, value):
        self.value = np.asarray(value, np.float32)

    def __array__(self, dtype=None, copy=None):
        return self.value.astype(dtype) if dtype is not None else self.value.copy()


def test_an_array_like_attribute_is_read_through_numpy_on_every_call(quick_gelu):
    """alpha=torch.tensor(1.702) was refused where np.float32 ran. It is identity-hashed and
    mutable, so its calls never get a fast plan keyed by it: a changed value is a new alpha."""
    x = np.linspace(-3, 3, 8, dtype=f32)
    alpha = _MutableScalar(0.5)
    for value in (0.5, 2.0):
        alpha.value[()] = value
        y = quick_gelu({"X": x}, attrs={"alpha": alpha})["Y"]
        np.testing.assert_allclose(y, x / (1 + np.exp(-value * x.astype(np.float64))), rtol=1e-5, atol=1e-6)


def test_array_like_attribute_values_keep_their_checks(quick_gelu, bias_add):
    from webgpu_kernels.contract import _check_value

    assert _check_value("attribute", "axes", [0], _MutableScalar([1.0, 2.0])) == [1, 2]
    raises(errors.AttributeValueError, lambda: quick_gelu({"X": np.ones(4, f32)}, attrs={"alpha": _MutableScalar([1, 2])}),
           "a number", argument="alpha")  # fmt: skip

    class Unreadable:  # a CUDA tensor: NumPy cannot read it
        def __array__(self, dtype=None, copy=None):
            raise TypeError("can't convert cuda:0 device type tensor to numpy")

    raises(errors.AttributeValueError, lambda: quick_gelu({"X": np.ones(4, f32)}, attrs={"alpha": Unreadable()}),
           "Unreadable", argument="alpha")  # fmt: skip


def test_attribute_beyond_f32_is_a_contract_error(quick_gelu):
    raises(errors.InputError, lambda: quick_gelu({"X": np.ones(4, f32)}, attrs={"alpha": 1e39}), argument="alpha")


def test_an_attribute_for_a_kernel_without_attributes_says_it_has_none(bias_add):
    """It said "expected one of the attributes [], got an unknown attribute"."""
    error = raises(errors.UnknownInputError, lambda: bias_add(bias_inputs(), attrs={"alpha": 1}),
                   "expected no attributes (this kernel has none), got an unknown attribute", argument="alpha")  # fmt: skip
    assert "[]" not in str(error)


def test_a_tunable_for_a_kernel_without_tunables_says_it_has_none():
    from webgpu_kernels.contract import check_call
    from webgpu_kernels.manifest import parse_manifest

    manifest = parse_manifest(_stats_manifest(["float32"]))
    assert not manifest.tunables
    raises(errors.UnknownInputError, lambda: check_call(manifest, {"X": ((2,), "float32")}, None, {"TILE": 4}),
           "expected no tunables (this kernel has none), got an unknown tunable", argument="TILE")  # fmt: skip


def test_unknown_tunable(bias_add):
    raises(errors.UnknownInputError, lambda: bias_add(bias_inputs(), tunables={"TILE": 4}), "WORKGROUP_SIZE",
           argument="TILE")  # fmt: skip


@pytest.mark.parametrize("value", [1.5, "64", True, None])
def test_bad_tunable_value(bias_add, value):
    raises(errors.AttributeValueError, lambda: bias_add(bias_inputs(), tunables={"WORKGROUP_SIZE": value}),
           argument="WORKGROUP_SIZE")  # fmt: skip


def test_integral_float_tunable_is_accepted(bias_add):
    inputs = bias_inputs()
    y = bias_add(inputs, tunables={"WORKGROUP_SIZE": 64.0})["Y"]
    np.testing.assert_array_equal(y, np.full((2, 3, 8), 3.0, f32))


def test_workgroup_size_beyond_the_device(bias_add, quick_gelu):
    limit = wk.get_device().info.limits["maxComputeInvocationsPerWorkgroup"]
    raises(errors.DeviceLimitError, lambda: bias_add(bias_inputs(), tunables={"WORKGROUP_SIZE": limit * 2}),
           "maxCompute", argument="WORKGROUP_SIZE")  # fmt: skip
    # QuickGelu guards it in its `when` clauses instead: no variant applies
    raises(errors.SelectionError, lambda: quick_gelu({"X": np.ones(8, f32)}, tunables={"WORKGROUP_SIZE": limit * 2}),
           "baseOk")  # fmt: skip


def test_workgroup_size_zero(bias_add, quick_gelu):
    with pytest.raises(errors.AttributeValueError) as info:  # the caller's tunable, not the package's expression
        bias_add(bias_inputs(), tunables={"WORKGROUP_SIZE": 0})
    assert info.value.argument == "WORKGROUP_SIZE" and "tunables.WORKGROUP_SIZE" in str(info.value)
    raises(errors.SelectionError, lambda: quick_gelu({"X": np.ones(8, f32)}, tunables={"WORKGROUP_SIZE": 0}))


def test_unknown_adapter(quick_gelu):
    with pytest.raises(errors.GPUError) as info:
        quick_gelu({"X": np.ones(4, f32)}, adapter="no-such-adapter-xyz")
    assert "no-such-adapter-xyz" in str(info.value)


# --- nothing happens before the checks ----------------------------------------------------------


@pytest.mark.parametrize(
    "call",
    [
        lambda k: k(bias_inputs(bias=np.ones((1, 8), f32))),
        lambda k: k(bias_inputs(dtype=np.float64)),
        lambda k: k(bias_inputs(skip=None)),
        lambda k: k({**bias_inputs(), "extra": np.ones(1, f32)}),
        lambda k: k(bias_inputs(), attrs={"alpha": 1.0}),
        lambda k: k(bias_inputs((2, 2, 6)), variant="vec4"),
        lambda k: k(bias_inputs(), variant="nope"),
    ],
)
def test_errors_come_before_any_plan(bias_add, call):
    no_plan_built(bias_add, lambda: call(bias_add))


def test_explain_and_render_check_the_contract_too(quick_gelu, bias_add):
    raises(errors.DTypeError, lambda: quick_gelu.explain({"X": wk.TensorMeta((4,), "float64")}), argument="X")
    raises(errors.RankError, lambda: bias_add.render({"X": ((4,), "float32"), "bias": ((4,), "float32"),
                                                      "skip": ((4,), "float32")}), argument="X")  # fmt: skip
    raises(errors.MissingInputError, lambda: bias_add.explain({"X": ((1, 1, 4), "float32")}), argument="bias")


class _TorchLike:
    """A CPU torch tensor as the engine sees one: shape, a dtype NumPy does not know (torch.float32)
    and __array__."""

    def __init__(self, array):
        self._array, self.shape = array, array.shape
        self.dtype = type("dtype", (), {"__str__": lambda self: "torch.float32"})()

    def __array__(self, dtype=None, copy=None):
        return self._array if dtype is None else self._array.astype(dtype)


def test_explain_reads_what_a_call_runs(quick_gelu):
    """A list, a buffer or a tensor whose dtype is not NumPy's, which a call reads through NumPy,
    had been refused by explain (InputError, or DTypeError "got torch.float32")."""
    import array

    x = np.linspace(-1, 1, 8, dtype=f32)
    for value in ([np.float32(1.0), np.float32(2.0)], memoryview(x), array.array("f", x.tolist()), _TorchLike(x)):
        expected = quick_gelu({"X": value})["Y"].shape
        explained = quick_gelu.explain({"X": value})
        assert explained.chosen is not None and explained.outputs[0].shape == expected, value
    raises(errors.DTypeError, lambda: quick_gelu.explain({"X": [1.0, 2.0]}), "float64", argument="X")  # as a call
    raises(errors.InputError, lambda: quick_gelu.explain({"X": "text"}), "a TensorMeta", argument="X")


def test_binding_larger_than_the_device_allows(quick_gelu, device):
    limit = min(device.limits["max-storage-buffer-binding-size"], device.limits["max-buffer-size"])
    if limit > 256 * 2**20:
        pytest.skip(f"the binding limit ({limit} bytes) is too large to exceed cheaply in a unit test")
    x = np.broadcast_to(np.float32(1.0), (limit // 4 + 1,))  # a view: no memory until the engine copies it
    before = len(quick_gelu._plans)
    raises(errors.DeviceLimitError, lambda: quick_gelu({"X": x}), str(limit), argument="X")
    assert len(quick_gelu._plans) == before


# --- type variables that no input binds ------------------------------------------------------------

def _stats_manifest(u_types: list[str], *, optional_binder: bool = False) -> dict:
    """X of type T; output S of type U (ONNX's pattern for statistics outputs); U bound by an input
    only with ``optional_binder`` (an optional input W of type U)."""
    inputs = [{"role": "X", "dtype": "T"}]
    if optional_binder:
        inputs.append({"role": "W", "dtype": "U", "optional": True})
    return {
        "domain": "test", "name": "Stats", "inputs": inputs,
        "outputs": [{"role": "Y", "dtype": "T", "rank": "ranks.X", "shape": "shapes.X"},
                    {"role": "S", "dtype": "U", "rank": 1, "shape": "[1]"}],
        "typeConstraints": {"T": ["float32", "float16"], "U": u_types},
        "constants": {"stat": "dtypes.U"},
        "variants": [{"id": "main", "priority": 0, "when": ["true"], "passes": [{"id": "main", "shader": "s.wgsl.jinja",
                      "bindings": [{"name": "y", "arg": "Y", "buffer": {"type": "storage"}, "elementType": "f32"},
                                   {"name": "s", "arg": "S", "buffer": {"type": "storage"}, "elementType": "f32"}],
                      "dispatch": {"threads": 0, "workgroupSize": 1}}]}],
    }  # fmt: skip


def test_a_one_type_constraint_binds_a_type_variable_no_input_binds():
    """ONNX gives statistics outputs a type U that is float32 whatever X is: U: ["float32"] makes S
    float32 for a float16 X, and `dtypes.U` is "f32" in expressions."""
    from test_selection import F16_DEVICE

    from webgpu_kernels.contract import check_call
    from webgpu_kernels.manifest import parse_manifest
    from webgpu_kernels.program import compile_program

    manifest = parse_manifest(_stats_manifest(["float32"]))
    signature = check_call(manifest, {"X": ((2, 3), "float16")}, None, None)
    assert signature.type_bindings() == {"T": "float16", "U": "float32"}
    scope, outputs = compile_program(manifest).call_scope(signature, F16_DEVICE)
    assert [(o.role, o.dtype) for o in outputs] == [("Y", "float16"), ("S", "float32")]
    assert scope["dtypes"] == {"T": "f16", "U": "f32"} and scope["stat"] == "f32"


@pytest.mark.parametrize("u_types, optional_binder", [(["float32", "float16"], False), (["float32", "float16"], True)])
def test_an_output_type_nothing_determines_is_refused_at_load(u_types, optional_binder):
    """Two allowed types and no required input of that type: the output's dtype cannot be known. It was
    an ExpressionError at call time, pointing at the output's shape."""
    from webgpu_kernels.manifest import parse_manifest

    with pytest.raises(errors.ManifestError) as info:
        parse_manifest(_stats_manifest(u_types, optional_binder=optional_binder))
    assert info.value.json_path == "outputs[1].dtype"
    assert "output 'S' has type variable 'U', which no required input binds" in str(info.value)
    assert "exactly one type, not ['float32', 'float16']" in str(info.value)


def test_an_optional_input_of_a_determined_type_must_match_it():
    from webgpu_kernels.contract import check_call
    from webgpu_kernels.manifest import parse_manifest

    manifest = parse_manifest(_stats_manifest(["float32"], optional_binder=True))
    assert check_call(manifest, {"X": ((2,), "float16"), "W": ((1,), "float32")}, None, None).type_bindings()["U"] \
        == "float32"
    raises(errors.DTypeError, lambda: check_call(manifest, {"X": ((2,), "float16"), "W": ((1,), "float16")}, None, None),
           "dtype in ['float32']", argument="W")


def test_a_one_type_constraint_no_tensor_has_stays_unbound():
    """A type variable H: ["float16"] that no input or output has made every call float16-typed: its
    WGSL enabled f16, which an adapter without shader-f16 refuses, for a float32 call."""
    from webgpu_kernels.contract import check_call
    from webgpu_kernels.manifest import parse_manifest

    data = _stats_manifest(["float32"])
    data["typeConstraints"]["H"] = ["float16"]
    manifest = parse_manifest(data)
    assert check_call(manifest, {"X": ((2, 3), "float32")}, None, None).type_bindings() == {"T": "float32", "U": "float32"}


def test_a_negative_zero_attribute_is_its_own_signature(quick_gelu):
    """-0.0 == 0.0, so signatures (plan keys) carry which values hold a negative zero."""
    from webgpu_kernels.contract import check_call

    meta = {"X": ((4,), "float32")}
    plus, minus = (check_call(quick_gelu.manifest, meta, {"alpha": a}, None) for a in (0.0, -0.0))
    assert plus != minus and minus.negative_zeros == ("alpha",) and plus.negative_zeros == ()
    assert minus == check_call(quick_gelu.manifest, meta, {"alpha": -0.0}, None)


def test_a_negative_zero_list_item_is_its_own_signature():
    """[-0.0, 0.0] == [0.0, -0.0]: signatures carry which items are the negative zeros, not only
    that the list holds one."""
    from webgpu_kernels.contract import check_call
    from webgpu_kernels.manifest import parse_manifest

    manifest = parse_manifest({**_stats_manifest(["float32"]), "attributes": {"coef": [1.0, 2.0]}})
    first, second = (check_call(manifest, {"X": ((4,), "float32")}, {"coef": c}, None) for c in ([-0.0, 0.0], [0.0, -0.0]))
    assert first != second and first.negative_zeros == ("coef[0]",) and second.negative_zeros == ("coef[1]",)


def test_an_int_and_an_equal_float_attribute_are_two_signatures():
    """1 == 1.0, yet a float attribute given an int keeps it (a template renders "1", not "1.0"):
    signatures (plan keys) carry each value's type, and each list item's."""
    from webgpu_kernels.contract import check_call
    from webgpu_kernels.manifest import parse_manifest

    manifest = parse_manifest({**_stats_manifest(["float32"]), "attributes": {"scale": 1.0, "coef": [1.0, 2.0]}})
    meta = {"X": ((4,), "float32")}

    def sig(**attrs):
        return check_call(manifest, meta, attrs, None)

    assert sig(scale=1) != sig(scale=1.0) and sig(scale=1.0) == sig() == sig(scale=np.float64(1.0))
    assert sig(coef=[1, 2.0]) != sig(coef=[1.0, 2.0]) and sig(coef=(1.0, 2.0)) == sig() == sig(coef=np.array([1.0, 2.0]))


@pytest.mark.parametrize("shape, fragment", [
    ((10**5000,), "fewer than 2^62 elements, got shape [<a 16610-bit integer>]"),
    ((2, -10**5000), "non-negative dimensions, got shape [2, <a 16610-bit integer>]"),
], ids=["huge", "huge-negative"])  # fmt: skip
def test_a_huge_dimension_is_described_not_printed(quick_gelu, shape, fragment):
    """str() of an integer past 4,300 digits raises: the ShapeError's own message became a raw ValueError."""
    with pytest.raises(errors.ShapeError) as info:
        quick_gelu.explain({"X": (shape, "float32")})
    assert fragment in str(info.value)


def test_a_list_attribute_of_integers_takes_integral_floats_as_integers():
    """An int scalar attribute makes 2.0 into 2; items of a list whose default holds integers had
    stayed floats, and `shapes.X[attrs.axes[0]]` then failed as the manifest's sandbox refusal."""
    from webgpu_kernels.contract import _check_value

    assert _check_value("attribute", "axes", [0], [1.0, np.int64(2), np.float32(3.0)]) == [1, 2, 3]
    assert all(type(v) is int for v in _check_value("attribute", "axes", [0], (1.0, 2)))
    with pytest.raises(errors.AttributeValueError, match=r"argument 'axes': expected a list of integers"):
        _check_value("attribute", "axes", [0], [1.5])
    assert _check_value("attribute", "scales", [1.0, 2.0], [3, 4.5]) == [3, 4.5]  # a float list keeps its items
    assert _check_value("attribute", "perm", [], [1.0, 0]) == [1.0, 0]  # an empty default says nothing


def test_a_masked_value_in_a_list_attribute_is_refused():
    """np.ma.masked as a list item had been taken as 0 (its item()), as the integer 0 under an
    integer default: axes=[1, np.ma.masked] ran as [1, 0]."""
    from webgpu_kernels.contract import _check_value

    for value in ([1, np.ma.masked], np.ma.masked_array([1, 2], mask=[0, 1]), np.ma.masked_array([1, 2])):
        with pytest.raises(errors.AttributeValueError, match=r"argument 'axes': expected a"):
            _check_value("attribute", "axes", [0], value)


@pytest.mark.parametrize(
    ("kind", "default", "value", "expected", "received"),
    [
        ("attribute", True, 1, "a boolean (attribute)", "int 1"),
        ("tunable", False, "yes", "a boolean (tunable)", "str 'yes'"),
        ("attribute", 1.5, "x", "a number (attribute)", "str 'x'"),
        ("attribute", 1.5, float("nan"), "a finite number (attribute)", "float nan"),
        ("attribute", 2, 1.5, "an integer (attribute)", "float 1.5"),
        ("tunable", 2, 2**63, "an integer below 2^63 in magnitude (tunable)", "int 9223372036854775808"),
        ("attribute", 2.0, [1.0], "a number (attribute)", "list [1.0]"),
        ("attribute", "a", 1, "a string (attribute)", "int 1"),
        ("attribute", [1.0], "x", "a list of finite numbers (attribute)", "str 'x'"),
        ("attribute", [1.0], [2**64], "a list of finite numbers below 2^63 in magnitude (attribute)",
         "int 18446744073709551616"),
        ("attribute", [1], [1.5], "a list of integers (attribute)", "list [1.5]"),
        ("tunable", 2, 1.5, "an integer (tunable)", "float 1.5"),
        ("attribute", 1.5, float("-inf"), "a finite number (attribute)", "float -inf"),
        ("attribute", 1.5, 1e39, "a number that rounds to a finite float32 (|x| < 3.4028235677973366e+38; "
                                 "the largest is 3.4028234663852886e+38) (attribute)", "float 1e+39"),
        ("attribute", [1.0], [float("nan")], "a finite number (attribute)", "float nan"),
        ("attribute", "a", "x" * 4097, "a string of at most 4096 characters (attribute)", "4097 characters"),
        ("attribute", [1], [1] * 4097, "a list of at most 4096 numbers (attribute)", "4097 items"),
        ("tunable", "a", "x" * 4097, "a string of at most 4096 characters (tunable)", "4097 characters"),
        ("attribute", [1.0], np.zeros(4097), "a list of at most 4096 numbers (attribute)", "4097 items"),
    ],
)  # fmt: skip
def test_attribute_and_tunable_messages_share_one_form(kind, default, value, expected, received):
    """Every kind check says "argument NAME: expected WHAT (KIND), got WHAT CAME": a boolean had read
    "expected a boolean attribute" and a big integer "expected a number (tunable), below 2^63 in
    magnitude", beside "expected a number (attribute)"."""
    from webgpu_kernels.contract import check_call
    from webgpu_kernels.manifest import parse_manifest

    data = _stats_manifest(["float32"])
    data["attributes" if kind == "attribute" else "tunables"] = {"v": default}
    manifest = parse_manifest(data)
    given = {"v": value}
    call = lambda: check_call(manifest, {"X": ((2,), "float32")}, given if kind == "attribute" else None,  # noqa: E731
                              given if kind == "tunable" else None)  # fmt: skip
    error = raises(errors.AttributeValueError, call, f"argument 'v': expected {expected}, got ", argument="v")
    assert error.expected == expected
    # a value is named by its type and repr, as every InputError's is: nan, 1.5 and 1e+39 had come bare
    assert error.received == received


@pytest.mark.parametrize(("default", "value", "hint"), [(0, True, "pass 1"), (1, np.bool_(False), "pass 0"),
                                                    (1.5, True, "pass 1"), ([0], [1, False], "pass [1, 0]"),
                                                    ([0], [np.int64(2), np.bool_(True)], "pass [2, 1]")])  # fmt: skip
def test_a_boolean_for_a_number_attribute_says_which_number_to_pass(default, value, hint):
    """ONNX's 0/1 flags (CumSum's exclusive) are int attributes: True was refused without saying that
    1 is what to pass (a kernel author writing demo.CumSum from the docs)."""
    from webgpu_kernels.contract import _check_value

    with pytest.raises(errors.AttributeValueError) as info:
        _check_value("attribute", "exclusive", default, value)
    assert info.value.received.startswith("bool ")
    assert str(info.value).endswith(f"({hint}: a boolean is not a number here)")
    # what the command line and a test.json case read to give their own advice (InputError.replace_hint)
    assert (info.value.kind, info.value.number_meant) == ("attribute", int(hint.rstrip("]")[-1]))
    # inside a list, the list meant ("pass 0" had been advised for [1, False], which would replace the list)
    assert info.value.list_meant == (json.loads(hint[5:]) if isinstance(default, list) else None)


def test_workgroup_size_error_names_a_long_tunable_as_every_tunable_error_does(scale_shift_variant):
    # The 'got' part is type and a repr of at most 60 characters, as _check_value's errors: a string
    # tunable of 4,000 characters that makes the workgroup size 0 had been quoted whole.
    def change(manifest: dict) -> None:
        manifest["tunables"]["MODE"] = "wide"
        for variant in manifest["variants"]:
            for p in variant["passes"]:
                p["dispatch"]["workgroupSize"] = "64 if tunables.MODE == 'wide' else 0"

    kernel = scale_shift_variant(change)
    with pytest.raises(errors.AttributeValueError) as info:
        kernel({"X": np.ones(8, f32)}, tunables={"MODE": "x" * 4000})
    assert info.value.argument == "MODE" and "got str 'xxx" in str(info.value)
    assert "(workgroup size 0 from" in str(info.value) and len(str(info.value)) < 400


def test_a_misspelt_or_renamed_tunable_or_attribute_names_the_one_meant(quick_gelu):
    """A case or call still giving a tunable by its old name (ROW_UNROLL renamed UNROLL) listed the
    tunables, leaving the author to spot the one meant."""
    error = raises(errors.UnknownInputError, lambda: quick_gelu({"X": np.ones(4, f32)}, tunables={"WORKGROUP_SIZ": 64}),
                   "got an unknown tunable", argument="WORKGROUP_SIZ")  # fmt: skip
    assert "did you mean 'WORKGROUP_SIZE'?" in str(error), str(error)
    error = raises(errors.UnknownInputError, lambda: quick_gelu({"X": np.ones(4, f32)}, attrs={"alpah": 1.0}),
                   "got an unknown attribute", argument="alpah")  # fmt: skip
    assert "did you mean 'alpha'?" in str(error), str(error)
    error = raises(errors.UnknownInputError, lambda: quick_gelu({"X": np.ones(4, f32)}, attrs={"zzqqx": 1.0}),
                   "got an unknown attribute", argument="zzqqx")  # fmt: skip
    assert "did you mean" not in str(error), str(error)


@pytest.mark.parametrize(("default", "value"), [("a", "x" * 4096), ([1], list(range(4096))), ([0.5], np.ones(4096))])
def test_a_string_or_list_as_long_as_an_expression_may_hold_is_taken_whole(default, value):
    """The bound on a string or list attribute is the sandbox's (4096): one at the bound reaches the
    call's signature unchanged, as a frozen tuple for a list; one past it is refused (above)."""
    from webgpu_kernels.contract import check_call
    from webgpu_kernels.manifest import parse_manifest

    data = _stats_manifest(["float32"])
    data["attributes"] = {"v": default}
    signature = check_call(parse_manifest(data), {"X": ((2,), "float32")}, {"v": value}, None)
    assert signature.attr_map()["v"] == (value if isinstance(value, str) else list(value))


class _ReprFails:
    def __repr__(self) -> str:
        raise RuntimeError("no repr")


@pytest.mark.parametrize(("default", "expected"), [(1.5, "a number"), (2, "an integer"), ("a", "a string"),
                                                   (True, "a boolean"), ([1.0], "a list of finite numbers")])  # fmt: skip
def test_a_value_whose_repr_fails_is_still_refused_naming_its_type(default, expected):
    """The 'got' part quotes a value's repr: a caller's object whose repr raises is named by its type,
    and the caller gets the AttributeValueError, not the RuntimeError of its repr."""
    from webgpu_kernels.contract import check_call
    from webgpu_kernels.manifest import parse_manifest

    data = _stats_manifest(["float32"])
    data["attributes"] = {"v": default}
    error = raises(errors.AttributeValueError,
                   lambda: check_call(parse_manifest(data), {"X": ((2,), "float32")}, {"v": _ReprFails()}, None),
                   argument="v")  # fmt: skip
    assert error.expected == f"{expected} (attribute)" and error.received == "_ReprFails ?"
