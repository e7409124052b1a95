"""Bad input, each a documented error (docs/errors.md) and a test: the error class, a message that
names the argument, what was expected and what came; and for every one of them: the inputs are
not modified, no output is returned, nothing is dispatched, no plan is built for a contract
failure, and no GPU state is left behind (live buffers, pooled bytes, pending dispatches).
"""

from __future__ import annotations

import array
import math
import re
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
import pytest

import webgpu_kernels as wk
from webgpu_kernels import errors
from webgpu_kernels.api import to_gpu

f32, f16 = np.float32, np.float16
QG, BA = "com.microsoft.QuickGelu", "com.microsoft.BiasAdd"


def bias_inputs(shape=(2, 3, 8), dtype=f32, **override):
    inputs = {"X": np.ones(shape, dtype), "bias": np.ones(shape[-1:], dtype), "skip": np.ones(shape, dtype)}
    inputs.update(override)
    return {k: v for k, v in inputs.items() if v is not None}


def qg_inputs(shape=(4, 8), dtype=f32):
    return {"X": np.linspace(-2, 2, int(np.prod(shape)), dtype=np.float64).astype(dtype).reshape(shape)}


@dataclass(frozen=True)
class Case:
    id: str
    kernel: str
    inputs: Callable[[], dict[str, Any]]
    error: type
    mentions: tuple[str, ...] = ()
    argument: str | None = None
    options: dict[str, Any] = field(default_factory=dict)
    contract: bool = True  # fails before any plan is built


LIMIT = 1024  # lavapipe's maxComputeInvocationsPerWorkgroup; the test below reads the real one

CASES = [
    # inputs present or not
    Case("missing-input", BA, lambda: bias_inputs(skip=None), errors.MissingInputError, ("nothing",), "skip"),
    Case("missing-all", QG, lambda: {}, errors.MissingInputError, (), "X"),
    # None is how an optional input is left out; a required one given None had been refused as a
    # value, "expected a NumPy array or a GpuTensor, got NoneType"
    Case("required-input-none", BA, lambda: {**bias_inputs(), "bias": None}, errors.MissingInputError,
         ("a T tensor (float32 or float16)", "got None (a required input: None leaves out only an optional one)"),
         "bias"),
    Case("extra-input", BA, lambda: {**bias_inputs(), "residual": np.ones(8, f32)}, errors.UnknownInputError,
         ("an unknown input", "['X', 'bias', 'skip']"), "residual"),
    Case("output-as-input", QG, lambda: {**qg_inputs(), "Y": np.ones(4, f32)}, errors.UnknownInputError,
         ("output",), "Y"),
    # an unknown name whatever its value: the names are checked before any value is read (None and a
    # string had been refused as "expected a NumPy array or a GpuTensor, got NoneType")
    Case("extra-input-none", BA, lambda: {**bias_inputs(), "nothing": None}, errors.UnknownInputError,
         ("an unknown input", "['X', 'bias', 'skip']"), "nothing"),
    Case("extra-input-str", BA, lambda: {**bias_inputs(), "nothing": "text"}, errors.UnknownInputError,
         ("an unknown input",), "nothing"),
    Case("output-as-input-none", QG, lambda: {**qg_inputs(), "Y": None}, errors.UnknownInputError, ("output",), "Y"),
    # ranks and shapes
    Case("wrong-rank", BA, lambda: bias_inputs(X=np.ones((6, 8), f32)), errors.RankError, ("rank 3", "rank 2"), "X"),
    Case("wrong-rank-bias", BA, lambda: bias_inputs(bias=np.ones((1, 8), f32)), errors.RankError,
         ("rank 1", "rank 2"), "bias"),
    Case("x-skip-shape-mismatch", BA, lambda: bias_inputs(skip=np.ones((2, 4, 8), f32)), errors.SelectionError,
         ("no variant can run this call", "sameShape(shapes.X, shapes.skip)", "shapes.X=[2, 3, 8]",
          "shapes.skip=[2, 4, 8]")),
    Case("bias-length-not-c", BA, lambda: bias_inputs(bias=np.ones(4, f32)), errors.SelectionError,
         ("dim(shapes.bias, 0) == dim(shapes.X, 2)", "shapes.bias=[4]", "shapes.X=[2, 3, 8]")),
    # dtypes
    Case("dtype-float64", QG, lambda: {"X": np.ones(4, np.float64)}, errors.DTypeError,
         ("float64", "float32", "float16", "type variable T"), "X"),
    # a bfloat16, integer or bool array got no advice where float64 got one
    Case("dtype-int32", BA, lambda: bias_inputs(dtype=np.int32), errors.DTypeError,
         ("int32", "(convert with .astype(np.float32))"), "X"),
    Case("dtype-bool", QG, lambda: {"X": np.ones(4, bool)}, errors.DTypeError,
         ("bool", "(convert with .astype(np.float32), or np.asarray(x, np.float32) from a list; True becomes 1"),
         "X"),
    Case("dtype-bfloat16", QG, lambda: {"X": np.ones(4, pytest.importorskip("ml_dtypes").bfloat16)},
         errors.DTypeError, ("got bfloat16 (convert with .astype(np.float32))",), "X"),
    Case("mixed-dtypes", BA, lambda: bias_inputs(bias=np.ones(8, f16)), errors.DTypeError,
         ("float32 like 'X'", "type variable T", "float16"), "bias"),
    Case("mixed-dtypes-skip", BA, lambda: bias_inputs(dtype=f16, skip=np.ones((2, 3, 8), f32)), errors.DTypeError,
         ("float16 like 'X'",), "skip"),
    Case("object-array", QG, lambda: {"X": np.array([object(), 1.0], dtype=object)}, errors.DTypeError,
         ("object",), "X"),
    Case("string-array", QG, lambda: {"X": np.array(["1.0", "2.0"])}, errors.DTypeError, ("str",), "X"),
    Case("bytes-array", QG, lambda: {"X": np.array([b"ab"])}, errors.DTypeError, ("bytes",), "X"),
    Case("python-list", QG, lambda: {"X": [1.0, 2.0]}, errors.DTypeError,
         ("float64", "lists of them are float64: convert with .astype(np.float32), or np.asarray(x, np.float32) from a list"),
         "X"),
    Case("not-an-array", QG, lambda: {"X": "text"}, errors.InputError, ("'X'",), "X"),
    Case("bytes", QG, lambda: {"X": b"\0\0\0\0"}, errors.InputError, ("got bytes",), "X"),
    Case("float64-buffer", QG, lambda: {"X": array.array("d", [1.0, 2.0])}, errors.DTypeError, ("float64",), "X"),
    Case("bytearray", QG, lambda: {"X": bytearray(8)}, errors.DTypeError, ("uint8",), "X"),
    Case("released-memoryview", QG, lambda: {"X": released_memoryview()}, errors.InputError, ("expected a live buffer, got a released memoryview",), "X"),
    Case("unreadable-buffer-format", QG, lambda: {"X": memoryview(bytes(16)).cast("P")}, errors.InputError,
         ("an array NumPy can read", "memoryview"), "X"),
    Case("masked-array", QG, lambda: {"X": np.ma.masked_array(np.ones(4, f32), mask=[0, 1, 0, 0])}, errors.InputError,
         ("a masked array",), "X"),
    Case("ragged-list", QG, lambda: {"X": [[1.0, 2.0], [3.0]]}, errors.InputError, ("a rectangular array", "list"), "X"),
    Case("none-input", QG, lambda: {"X": None}, errors.InputError, ("'X'",), "X"),
    # a tensor described without data (explain's forms): NumPy read ((2, 3), "float32") as a ragged
    # list ("not a rectangular array"), and (4, "float32") as an array of two strings
    Case("shape-dtype-tuple", QG, lambda: {"X": ((2, 3), "float32")}, errors.InputError,
         ("a NumPy array or a GpuTensor", "a (shape, dtype) tuple", "explain", "np.zeros((2, 3), 'float32')"), "X"),
    Case("shape-dtype-tuple-int-shape", QG, lambda: {"X": (4, np.float32)}, errors.InputError,
         ("a (shape, dtype) tuple", "np.zeros(4, 'float32')"), "X"),
    Case("tensor-meta-input", QG, lambda: {"X": wk.TensorMeta([2, 3], "f16")}, errors.InputError,
         ("a TensorMeta", "np.zeros((2, 3), 'float16')"), "X"),
    # attributes
    Case("attr-nan", QG, qg_inputs, errors.AttributeValueError, ("finite", "nan"), "alpha",
         {"attrs": {"alpha": float("nan")}}),
    Case("attr-inf", QG, qg_inputs, errors.AttributeValueError, ("finite", "inf"), "alpha",
         {"attrs": {"alpha": float("inf")}}),
    Case("attr-minus-inf", QG, qg_inputs, errors.AttributeValueError, ("finite", "-inf"), "alpha",
         {"attrs": {"alpha": -float("inf")}}),
    Case("attr-numpy-nan", QG, qg_inputs, errors.AttributeValueError, ("finite",), "alpha",
         {"attrs": {"alpha": np.float32("nan")}}),
    Case("attr-huge-int", QG, qg_inputs, errors.AttributeValueError, ("rounds to a finite float32",), "alpha", {"attrs": {"alpha": 10**400}}),
    Case("attr-string", QG, qg_inputs, errors.AttributeValueError, ("a number",), "alpha", {"attrs": {"alpha": "1.7"}}),
    Case("attr-bool", QG, qg_inputs, errors.AttributeValueError, ("a number",), "alpha", {"attrs": {"alpha": True}}),
    Case("attr-array", QG, qg_inputs, errors.AttributeValueError, ("a number",), "alpha",
         {"attrs": {"alpha": np.array([1.0, 2.0])}}),
    # a masked value had run as what its mask hides: np.ma.masked as 0
    Case("attr-masked", QG, qg_inputs, errors.AttributeValueError, ("a masked array", ".filled("), "alpha",
         {"attrs": {"alpha": np.ma.masked}}),
    Case("attr-masked-array", QG, qg_inputs, errors.AttributeValueError, ("a masked array",), "alpha",
         {"attrs": {"alpha": np.ma.masked_array(2.0, mask=True)}}),
    Case("unknown-attribute", QG, qg_inputs, errors.UnknownInputError, ("an unknown attribute", "['alpha']"), "beta",
         {"attrs": {"beta": 1.0}}),
    # it said "expected one of the attributes [], got an unknown attribute"
    Case("no-attributes", BA, bias_inputs, errors.UnknownInputError,
         ("expected no attributes (this kernel has none), got an unknown attribute",), "alpha", {"attrs": {"alpha": 1}}),
    Case("attrs-not-a-dict", QG, qg_inputs, errors.InputError, ("a dict",), "attrs", {"attrs": [("alpha", 1.0)]}),
    Case("attr-name-not-a-string", QG, qg_inputs, errors.InputError, ("names",), "attrs", {"attrs": {1: 1.0}}),
    # tunables
    Case("unknown-tunable", BA, bias_inputs, errors.UnknownInputError, ("an unknown tunable", "WORKGROUP_SIZE"),
         "TILE", {"tunables": {"TILE": 4}}),
    Case("tunable-fraction", BA, bias_inputs, errors.AttributeValueError, ("an integer",), "WORKGROUP_SIZE",
         {"tunables": {"WORKGROUP_SIZE": 1.5}}),
    Case("tunable-string", BA, bias_inputs, errors.AttributeValueError, ("an integer (tunable)",), "WORKGROUP_SIZE",
         {"tunables": {"WORKGROUP_SIZE": "64"}}),
    Case("tunable-huge", BA, bias_inputs, errors.AttributeValueError, ("2^63",), "WORKGROUP_SIZE",
         {"tunables": {"WORKGROUP_SIZE": 2**70}}),
    Case("tunable-zero", BA, bias_inputs, errors.AttributeValueError, ("positive integer", "got int 0 (workgroup size 0"), "WORKGROUP_SIZE",
         {"tunables": {"WORKGROUP_SIZE": 0}}),
    Case("tunable-negative", BA, bias_inputs, errors.AttributeValueError, ("positive integer", "got int -5 (workgroup size -5"),
         "WORKGROUP_SIZE", {"tunables": {"WORKGROUP_SIZE": -5}}),
    Case("workgroup-above-device-when", QG, qg_inputs, errors.SelectionError,
         ("no variant can run this call", "baseOk"), None,
         {"tunables": {"WORKGROUP_SIZE": 4 * LIMIT}}),
    Case("workgroup-above-device-limit", BA, bias_inputs, errors.DeviceLimitError,
         ("maxComputeWorkgroupSizeX", f"{4 * LIMIT}", "pass 'main'"), "WORKGROUP_SIZE",
         {"tunables": {"WORKGROUP_SIZE": 4 * LIMIT}}, contract=False),
    # options
    Case("bad-output-kind", QG, qg_inputs, errors.InputError, ("numpy", "gpu"), "output", {"output": "torch"}),
    Case("unknown-variant", QG, qg_inputs, errors.SelectionError, ("'vec8'", "vec4", "scalar"), None,
         {"variant": "vec8"}),
    Case("variant-not-a-string", QG, qg_inputs, errors.InputError, ("a variant id", "['scalar']"), "variant",
         {"variant": ["scalar"]}),
    Case("adapter-not-a-string", QG, qg_inputs, errors.InputError, ("a backend", "int 0"), "adapter", {"adapter": 0}),
    Case("forced-variant-rejected", QG, lambda: qg_inputs((5,)), errors.VariantRejectedError, ("vec4Ok",), None,
         {"variant": "vec4"}),
]  # fmt: skip


def gpu_state(device) -> tuple[int, int, int]:
    memory = device.memory
    return memory.live_buffers, memory.pooled_bytes, memory._pending


@pytest.fixture
def dispatches(monkeypatch):
    """Every plan run_plan was asked to dispatch (all dispatches go through it)."""
    import webgpu_kernels.kernel as kernel_module

    real, seen = kernel_module.run_plan, []

    def spy(*args, **kwargs):
        seen.append(args[1])
        return real(*args, **kwargs)

    monkeypatch.setattr(kernel_module, "run_plan", spy)
    return seen


def check_refused(kernel, call, error_class, mentions=(), argument=None, *, device, inputs=(), contract=True,
                  dispatches=None):  # fmt: skip
    """``call()`` raises ``error_class`` naming ``mentions``; nothing else happens."""
    copies = [(a, a.copy()) for a in inputs if isinstance(a, np.ndarray)]
    before, plans = gpu_state(device), len(kernel._plans)
    with pytest.raises(error_class) as info:
        call()
    error = info.value
    message = str(error)
    for text in mentions:
        assert text in message, f"{text!r} not in {message!r}"
    if argument is not None:
        assert error.argument == argument and repr(argument) in message
    assert isinstance(error, wk.KernelError)
    assert gpu_state(device) == before, "GPU state was left behind"
    if contract:
        assert len(kernel._plans) == plans, "a plan was built for a call that failed its contract"
    if dispatches is not None:
        assert not dispatches, "a shader was dispatched"
    for original, copy in copies:
        np.testing.assert_array_equal(original, copy)
    return error


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_bad_input(case, device, dispatches):
    kernel = wk.get_kernel(case.kernel)
    inputs = case.inputs()
    limit = device.info.limits["maxComputeInvocationsPerWorkgroup"]
    options = dict(case.options)
    if options.get("tunables", {}).get("WORKGROUP_SIZE") == 4 * LIMIT:
        options["tunables"] = {"WORKGROUP_SIZE": 4 * limit}
    mentions = tuple(m.replace(str(4 * LIMIT), str(4 * limit)) for m in case.mentions)
    check_refused(kernel, lambda: kernel(inputs, **options), case.error, mentions, case.argument, device=device,
                  inputs=inputs.values(), contract=case.contract, dispatches=dispatches)  # fmt: skip


@pytest.mark.parametrize("case", [c for c in CASES if c.id in ("missing-input", "wrong-rank", "mixed-dtypes",
                                                                 "x-skip-shape-mismatch", "attr-nan")],
                         ids=lambda c: c.id)  # fmt: skip
def test_bad_input_with_gpu_tensors(case, device, dispatches, has_f16):
    """The same checks when the inputs already live on the GPU (their buffers stay theirs)."""
    kernel = wk.get_kernel(case.kernel)
    arrays = case.inputs()
    if any(a.dtype == f16 for a in arrays.values() if isinstance(a, np.ndarray)) and not has_f16:
        pytest.skip("no shader-f16")
    inputs = {k: to_gpu(v) for k, v in arrays.items()}
    try:
        check_refused(kernel, lambda: kernel(inputs, **case.options), case.error, case.mentions, case.argument,
                      device=device, contract=case.contract, dispatches=dispatches)  # fmt: skip
        for role, tensor in inputs.items():
            np.testing.assert_array_equal(tensor.numpy(), arrays[role])
    finally:
        for tensor in inputs.values():
            tensor.release()


@pytest.mark.parametrize(
    "metas, error, mentions",
    [({"X": wk.TensorMeta((-1, 4), "float32")}, errors.ShapeError, ("non-negative",)),
     ({"X": wk.TensorMeta((2.5, 4), "float32")}, errors.ShapeError, ("integer",)),
     ({"X": wk.TensorMeta((True, 4), "float32")}, errors.ShapeError, ("integer",)),
     ({"X": wk.TensorMeta((2**40, 2**40), "float32")}, errors.ShapeError, ("elements",)),
     ({"X": wk.TensorMeta((1,) * 65, "float32")}, errors.RankError, ("rank at most 64",)),
     ({"X": wk.TensorMeta((4,), "nonsense")}, errors.DTypeError, ("nonsense",)),
     ({"X": wk.TensorMeta((4,), np.float32)}, None, ()),
     ({"X": wk.TensorMeta((4,), np.dtype("float16"))}, None, ()),
     ({"X": wk.TensorMeta((4,), "f4")}, None, ()),
     ({"X": wk.TensorMeta(5, "float32")}, errors.ShapeError, ("a shape", "int 5")),
     ({"X": ((2,), "nonsense")}, errors.DTypeError, ("nonsense",)),
     # any sequence of integers is a shape: a NumPy array of them had been refused
     ({"X": wk.TensorMeta(np.array([4, 8]), "float32")}, None, ()),
     ({"X": wk.TensorMeta([np.int64(4), np.uint8(8)], "float32")}, None, ()),
     ({"X": wk.TensorMeta(range(4, 6), "float32")}, None, ()),
     ({"X": (np.array([4, 8], np.int32), "float32")}, None, ()),
     ({"X": wk.TensorMeta(np.array([4.0, 8.0]), "float32")}, errors.ShapeError,
      ("integer dimensions", "float 4.0 as dimension 0")),
     ({"X": wk.TensorMeta([4, np.bool_(True)], "float32")}, errors.ShapeError, ("integer", "bool", "dimension 1")),
     ({"X": wk.TensorMeta(np.array([4, -8]), "float32")}, errors.ShapeError, ("non-negative", "[4, -8]")),
     ({"X": wk.TensorMeta(np.array([[4, 8]]), "float32")}, errors.ShapeError, ("a shape", "ndarray")),
     ({"X": wk.TensorMeta({4, 8}, "float32")}, errors.ShapeError, ("a shape", "set")),
     ({"X": wk.TensorMeta("4x8", "float32")}, errors.ShapeError, ("a shape", "str '4x8'")),
     ({"X": wk.TensorMeta(range(10**12), "float32")}, errors.RankError, ("rank at most 64", f"rank {10**12}"))],
    ids=["negative", "fraction", "bool", "too-many-elements", "rank-65", "unknown-dtype", "dtype-class",
         "dtype-object", "dtype-code", "shape-not-a-sequence", "tuple-unknown-dtype", "numpy-array-shape",
         "numpy-integers", "range", "tuple-numpy-array-shape", "numpy-float-array", "numpy-bool",
         "numpy-negative", "numpy-2d", "set", "string", "huge-range"],
)  # fmt: skip
def test_shape_only_metas(quick_gelu, device, metas, error, mentions):
    if error is None:
        assert quick_gelu.explain(metas).chosen == "vec4"
        return
    check_refused(quick_gelu, lambda: quick_gelu.plan(metas), error, mentions, "X", device=device)


# --- device limits ------------------------------------------------------------------------------


def binding_limit(device) -> int:
    return min(device.limits["max-storage-buffer-binding-size"], device.limits["max-buffer-size"])


def test_binding_above_the_device_limit_shape_only(quick_gelu, bias_add, device, dispatches):
    """2^25 + 1 float32 elements (128 MiB + 4 bytes on lavapipe): refused by ``plan`` from shapes alone."""
    limit = binding_limit(device)
    n = limit // 4 + 1
    for kernel, metas in (
        (quick_gelu, {"X": wk.TensorMeta((n,), "float32")}),
        (bias_add, {"X": wk.TensorMeta((1, n // 4 + 1, 4), "float32"), "bias": wk.TensorMeta((4,), "float32"),
                    "skip": wk.TensorMeta((1, n // 4 + 1, 4), "float32")}),
    ):  # fmt: skip
        error = check_refused(kernel, lambda: kernel.plan(metas), errors.DeviceLimitError,
                              (str(limit), "maxStorageBufferBindingSize"), "X", device=device, contract=False,
                              dispatches=dispatches)  # fmt: skip
        assert str(4 * (n if kernel is quick_gelu else (n // 4 + 1) * 4)) in error.received
        # explain() names the variant and says the call would still fail, without raising
        explanation = kernel.explain(metas)
        assert explanation.chosen is not None and explanation.refused == str(error)
        assert "the call would fail" in str(explanation) and explanation.as_dict()["refused"] == str(error)


def test_an_input_past_every_buffer_is_named_before_the_manifest_runs(quick_gelu, device):
    """10^15 elements: the call, render and explain had said "variants[0].passes[0].bindings[2]:
    field 'count' (u32) value ... is outside [0, 4294967295]", in the manifest's terms."""
    metas = {"X": wk.TensorMeta((100_000, 100_000, 100_000), "float32")}
    fragment = rf"argument 'X': expected at most {device.limits['max-buffer-size']} bytes \(the device's maxBufferSize"
    for attempt in (lambda: quick_gelu.plan(metas), lambda: quick_gelu.render(metas)):
        with pytest.raises(errors.DeviceLimitError, match=fragment):
            attempt()
    assert re.search(fragment, quick_gelu.explain(metas).refused)
    # Within maxBufferSize (padding aside) but past a binding: the binding limit speaks, as before
    # (the early check had refused 2147483644 bytes as past 2147483647).
    n = device.limits["max-buffer-size"] // 4
    with pytest.raises(errors.DeviceLimitError, match="per binding") as info:
        quick_gelu.plan({"X": wk.TensorMeta((n,), "float32")})
    assert "maxBufferSize" not in str(info.value)


@pytest.mark.parametrize("value", [None, "text", np.ones(8, f32)])
def test_explain_refuses_an_unknown_input_by_its_name_whatever_its_value(bias_add, value):
    """As a call does: explain had said "expected an array, a GpuTensor or a TensorMeta, got NoneType"."""
    with pytest.raises(errors.UnknownInputError, match="'nothing': expected one of the inputs"):
        bias_add.explain({**bias_inputs(), "nothing": value})


def test_explain_within_the_limits_refuses_nothing(quick_gelu):
    explanation = quick_gelu.explain({"X": wk.TensorMeta((4096,), "float32")})
    assert explanation.refused is None and "would fail" not in str(explanation)


def test_binding_above_the_device_limit_real_call(quick_gelu, device, dispatches):
    """A real 130 MiB array: the error comes before any GPU work (no buffer is even created)."""
    limit = binding_limit(device)
    if limit > 512 * 2**20:
        pytest.skip(f"the binding limit ({limit} bytes) is too large to exceed cheaply in a test")
    x = np.ones(limit // 4 + 2**18, f32)  # 130 MiB on lavapipe
    check_refused(quick_gelu, lambda: quick_gelu({"X": x}), errors.DeviceLimitError,
                  (str(limit), "maxStorageBufferBindingSize", "bytes"), "X", device=device, inputs=[],
                  contract=False, dispatches=dispatches)  # fmt: skip
    # Unchanged: all ones still. (check_refused's copy and assert_array_equal made 130 MiB temporaries
    # several times over, slow on a VM whose host backs pages on first touch: 9.3 s of a cold
    # suite's worker time in session 60, 0.9 s so in session 61.)
    assert x.min() == x.max() == 1


def test_an_oversized_view_is_refused_before_any_host_copy(quick_gelu, device, dispatches):
    """A broadcast view (a few bytes of memory) past the binding limit, or of a wrong dtype: the
    contract and limit checks come before the copy to contiguous memory (it would be the full size)."""
    import tracemalloc

    n = binding_limit(device) // 4 + 2**20
    for view, error in ((np.broadcast_to(f32(1), (n,)), errors.DeviceLimitError),
                        (np.broadcast_to(np.float64(1), (n,)), errors.DTypeError)):  # fmt: skip
        tracemalloc.start()
        try:
            check_refused(quick_gelu, lambda: quick_gelu({"X": view}), error, (), "X", device=device, contract=False,
                          dispatches=dispatches)  # fmt: skip
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert peak < 2**20, f"{peak} bytes allocated for a refused call"


def test_to_gpu_refuses_an_oversized_view_before_any_host_copy(device):
    """to_gpu made the view contiguous first: 16 GiB of host memory for a 2**32-element float32
    broadcast view, then a DeviceError from create_buffer that named no argument."""
    import tracemalloc

    limit = device.limits["max-buffer-size"]
    view = np.broadcast_to(f32(1), (limit // 4 + 2**20,))
    tracemalloc.start()
    try:
        with pytest.raises(errors.DeviceLimitError, match="argument 'array'.*maxBufferSize"):
            to_gpu(view)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 2**20, f"{peak} bytes allocated for a refused upload"


def test_gpu_tensor_shape_dtype_sizes_and_device_are_read_only(quick_gelu, device):
    """Calls trust a GpuTensor's shape, dtype, sizes and device to describe its buffer, so they
    cannot be reassigned: `t.bound_bytes = 16` had made a call bind 4 of 48 floats and return
    zeros for the rest, `t.device = None` a raw AttributeError inside the call."""
    x = np.linspace(-2, 2, 48, dtype=f32).reshape(2, 3, 8)
    t = to_gpu(x)
    try:
        for name, value in (("shape", (4, 3, 8)), ("dtype", np.dtype(f16)), ("nbytes", 16), ("bound_bytes", 16),
                            ("device", None)):  # fmt: skip
            with pytest.raises(AttributeError, match=f"GpuTensor.{name} is read-only"):
                setattr(t, name, value)
        assert t.shape == (2, 3, 8) and t.dtype == f32 and t.nbytes == 192 and t.bound_bytes == 192
        assert t.device is device
        expected = x / (1 + np.exp(-1.702 * x.astype(np.float64)))
        np.testing.assert_allclose(quick_gelu({"X": t})["Y"], expected, rtol=1e-5, atol=1e-6)
    finally:
        t.release()
    assert t.released


def test_a_released_tensor_is_refused_by_to_gpu_and_asarray_copy_false_is_refused(device):
    """to_gpu(released) handed the dead tensor back; np.asarray(t, copy=False) copied silently."""
    t = to_gpu(np.arange(8, dtype=f32))
    if np.lib.NumpyVersion(np.__version__) >= "2.0.0":  # NumPy 1's asarray has no copy= (nor passes it on)
        with pytest.raises(ValueError, match="cannot avoid a copy"):
            np.asarray(t, copy=False)
    np.testing.assert_array_equal(np.asarray(t), np.arange(8, dtype=f32))  # a copy is fine
    t.release()
    with pytest.raises(errors.InputError, match="a released GpuTensor") as info:
        to_gpu(t)
    assert info.value.argument == "array"


@pytest.mark.parametrize("value, error, mentions", [
    (None, errors.InputError, ("NoneType",)),
    ({"a": 1}, errors.InputError, ("dict",)),
    ("abc", errors.InputError, ("str",)),
    (np.array([1, None]), errors.DTypeError, ("object",)),
    (np.array(["1.0"]), errors.DTypeError, ("<U3",)),
    (np.zeros(3, "V4"), errors.DTypeError, ("V4",)),  # raw bytes: uploaded as void32, which no kernel takes
    (np.zeros(3, [("a", f32)]), errors.DTypeError, ("dtype [('a', '<f4')]",)),
    ([[1.0], [2.0, 3.0]], errors.InputError, ("a rectangular array",)),
    # to_gpu uploaded the masked values a call refuses (QuickGelu then returned the 1e30 under the mask)
    (np.ma.masked_array(np.array([1, 1e30], f32), mask=[0, 1]), errors.InputError, ("a masked array",)),
])  # fmt: skip
def test_to_gpu_refuses_what_no_kernel_takes(value, error, mentions, device):
    before = gpu_state(device)
    with pytest.raises(error) as info:
        to_gpu(value)
    assert info.value.argument == "array" and all(m in str(info.value) for m in mentions)
    assert gpu_state(device) == before


@pytest.mark.parametrize("kernel_name", [QG, BA])
def test_f16_on_an_adapter_without_shader_f16(kernel_name, gl_device, dispatches):
    kernel = wk.get_kernel(kernel_name)
    inputs = qg_inputs(dtype=f16) if kernel_name == QG else bias_inputs(dtype=f16)
    check_refused(kernel, lambda: kernel(inputs, adapter="gl"), errors.DeviceLimitError,
                  ("float16", "shader-f16", "float32"), "X", device=gl_device, inputs=inputs.values(),
                  contract=True, dispatches=dispatches)  # fmt: skip
    # explain() says the same without raising (QuickGelu's verdicts only read 'baseOk is false',
    # which reads f16Ok through a derive: its explanation had not said why); f32 runs on that adapter
    explanation = kernel.explain(inputs, adapter="gl")
    assert explanation.chosen is None
    assert explanation.refused == "argument 'X': expected float32 (this adapter has no shader-f16 feature), got float16"
    assert f"the call fails: {explanation.refused}" in str(explanation)
    y = kernel({k: v.astype(f32) for k, v in inputs.items()}, adapter="gl")["Y"]
    assert y.dtype == f32


@pytest.mark.parametrize("kernel_name", [QG, BA])
def test_a_forced_f16_variant_on_an_adapter_without_shader_f16(kernel_name, gl_device, dispatches):
    """Forcing a variant that shader-f16 would let run is the same DeviceLimitError as an unforced
    call (it was a VariantRejectedError quoting 'baseOk is false'); a variant refused for its own
    sake stays a VariantRejectedError, and explain(variant=) agrees with the call either way."""
    kernel = wk.get_kernel(kernel_name)
    inputs = qg_inputs(dtype=f16) if kernel_name == QG else bias_inputs(dtype=f16)
    wanted = "argument 'X': expected float32 (this adapter has no shader-f16 feature), got float16"
    check_refused(kernel, lambda: kernel(inputs, adapter="gl", variant="scalar"), errors.DeviceLimitError,
                  ("float16", "shader-f16", "float32"), "X", device=gl_device, inputs=inputs.values(),
                  contract=True, dispatches=dispatches)  # fmt: skip
    explanation = kernel.explain(inputs, adapter="gl", variant="scalar")
    assert explanation.chosen is None and explanation.refused == wanted
    odd = qg_inputs((3, 5), f16) if kernel_name == QG else bias_inputs((2, 3, 7), f16)  # no vec4 with or without f16
    with pytest.raises(errors.VariantRejectedError):
        kernel(odd, adapter="gl", variant="vec4")
    assert "cannot run this call" in kernel.explain(odd, adapter="gl", variant="vec4").refused


def test_to_gpu_with_another_adapter_copies_the_tensor(quick_gelu, device, gl_device):
    """``to_gpu(t, adapter=...)`` puts the tensor on that adapter's device (a GpuTensor of another one
    used to come back unchanged, and the call then refused it)."""
    if gl_device is device:
        pytest.skip("the default adapter is the OpenGL one")
    x = np.linspace(-2, 2, 64, dtype=f32)
    t = to_gpu(x)
    moved = to_gpu(t, adapter="gl")
    try:
        assert moved.device is gl_device and to_gpu(t) is t
        np.testing.assert_array_equal(moved.numpy(), x)
        np.testing.assert_array_equal(quick_gelu({"X": moved}, adapter="gl")["Y"], quick_gelu({"X": t})["Y"])
    finally:
        t.release()
        moved.release()


def test_a_tensor_on_another_adapter_says_how_to_run_the_call(quick_gelu, device, gl_device, dispatches):
    """The error named both adapters but not what to do: the adapter= it quotes runs the call on
    the tensor's device, and the to_gpu it quotes copies the tensor to the call's."""
    if gl_device is device:
        pytest.skip("the default adapter is the OpenGL one")
    x = np.linspace(-2, 2, 64, dtype=f32)
    t = to_gpu(x, adapter="gl")
    try:
        error = check_refused(quick_gelu, lambda: quick_gelu({"X": t}), errors.InputError,
                              (gl_device.adapter.label(), device.adapter.label()), "X", device=device,
                              dispatches=dispatches)  # fmt: skip
        there, here = re.search(r"with adapter=('[^']+'), or copy the tensor to the call's device with "
                                r"to_gpu\(t, adapter=('[^']+')\)\)$", str(error)).groups()  # fmt: skip
        moved = to_gpu(t, adapter=eval(here))
        try:
            expected = quick_gelu({"X": x})["Y"]
            np.testing.assert_array_equal(quick_gelu({"X": t}, adapter=eval(there))["Y"], expected)
            np.testing.assert_array_equal(quick_gelu({"X": moved})["Y"], expected)
        finally:
            moved.release()
    finally:
        t.release()


def test_tensors_on_two_devices_are_told_to_copy_not_to_move_the_call(bias_add, device, gl_device, dispatches, rng):
    """With X on the default device and bias on the OpenGL one, the hint said "run it on the
    tensor's device with adapter='opengl'", and that call then refused X with the mirror hint: the
    user was sent back and forth. Running elsewhere cannot help; copying can."""
    if gl_device is device:
        pytest.skip("the default adapter is the OpenGL one")
    x, skip = (rng.standard_normal((2, 3, 8)).astype(f32) for _ in range(2))
    bias = rng.standard_normal(8).astype(f32)
    tx, tb = to_gpu(x), to_gpu(bias, adapter="gl")
    try:
        inputs, raised = {"X": tx, "bias": tb, "skip": skip}, {}
        for adapter, foreign, other in ((None, "bias", "X"), ("gl", "X", "bias")):
            raised[adapter] = error = check_refused(bias_add, lambda: bias_add(inputs, adapter=adapter), errors.InputError,
                                  (f"a call runs on one device, and {other!r} is not on this tensor's: copy the "
                                   "tensor to the call's device with to_gpu(t, adapter=",), foreign,
                                  device=gl_device if adapter else device, dispatches=dispatches)  # fmt: skip
            assert "run it on the tensor's device" not in str(error)
        # The default call's hint, followed: bias copied to the default device.
        moved = to_gpu(tb, adapter=eval(re.search(r"to_gpu\(t, adapter=('[^']+')\)", str(raised[None])).group(1)))
        try:
            want = x.astype(np.float64) + bias.astype(np.float64) + skip.astype(np.float64)
            np.testing.assert_allclose(bias_add({"X": tx, "bias": moved, "skip": skip})["Y"], want, rtol=1e-6, atol=1e-6)
        finally:
            moved.release()
    finally:
        tx.release()
        tb.release()


def test_a_released_tensor_as_input_says_what_to_do(quick_gelu, device, dispatches):
    """It said only "expected a live GpuTensor, got a released GpuTensor", without the advice the
    tensor's own error gives."""
    t = to_gpu(np.ones(8, f32))
    t.release()
    error = check_refused(quick_gelu, lambda: quick_gelu({"X": t}), errors.InputError,
                          ("expected a live GpuTensor, got a released GpuTensor (release() gave its buffer back to "
                           "the pool", "to_gpu(t) on t's device returns t itself", "release a tensor after its last use)"),
                          "X", device=device, dispatches=dispatches)  # fmt: skip
    assert "was released" not in str(error)  # "got a released GpuTensor" says it once


def test_to_gpu_of_a_released_tensor_says_what_to_do(device):
    t = to_gpu(np.ones(8, f32))
    t.release()
    with pytest.raises(errors.InputError) as info:
        to_gpu(t)
    assert info.value.argument == "array"
    assert str(info.value).startswith("argument 'array': expected a live GpuTensor or an array, got a released "
                                      "GpuTensor (release() gave its buffer back to the pool")  # fmt: skip


# --- what comes back after an error -------------------------------------------------------------


def test_a_good_call_after_every_bad_one_is_right(quick_gelu, bias_add, device):
    """Errors leave nothing behind that a later call could trip over (plans, caches, pool)."""
    for case in CASES:
        kernel = wk.get_kernel(case.kernel)
        try:
            kernel(case.inputs(), **case.options)
        except wk.KernelError:
            pass
    x = np.linspace(-3, 3, 32, dtype=f32)
    y = quick_gelu({"X": x})["Y"]
    np.testing.assert_allclose(y, x / (1 + np.exp(-1.702 * x.astype(np.float64))), rtol=1e-5, atol=1e-6)
    inputs = bias_inputs()
    np.testing.assert_array_equal(bias_add(inputs)["Y"], np.full((2, 3, 8), 3.0, f32))


def test_error_classes_are_documented():
    """docs/errors.md lists every error class the library exports."""
    from pathlib import Path

    text = (Path(__file__).resolve().parents[1] / "docs" / "errors.md").read_text()
    for name in dir(errors):
        cls = getattr(errors, name)
        if isinstance(cls, type) and issubclass(cls, errors.KernelError):
            assert f"`{name}`" in text, f"{name} is not in docs/errors.md"


@pytest.mark.parametrize("scale, error, mentions", [
    (1e39, errors.AttributeValueError, ("'scale'", "rounds to a finite float32", "3.4028234663852886e+38", "1e+39")),
    (3.5e38, errors.AttributeValueError, ("'scale'", "rounds to a finite float32")),
    (10**400, errors.AttributeValueError, ("rounds to a finite float32",)),
    (float("nan"), errors.AttributeValueError, ("finite",)),
])  # fmt: skip
def test_attribute_that_does_not_fit_its_uniform_field(scale, error, mentions, device, dispatches):
    """demo.ScaleShift packs ``scale`` into a vec2<f32> uniform field: a value beyond f32 (which no
    WebGPU shader can hold) or beyond any number is a contract error naming it, before any GPU work."""
    from conftest import PACKAGES_DIR

    kernel = wk.load_kernel(PACKAGES_DIR / "demo.ScaleShift")
    x = np.ones(4, f32)
    check_refused(kernel, lambda: kernel({"X": x}, attrs={"scale": scale}), error, mentions, device=device,
                  inputs=[x], contract=False, dispatches=dispatches)  # fmt: skip


def test_render_and_work_key_refuse_a_variant_that_is_not_a_string_as_a_call_does(quick_gelu):
    """render and work_key had raised SelectionError("no variant ['scalar']") where a call says
    which argument was wrong."""
    x = np.ones(8, f32)
    for method in (quick_gelu, quick_gelu.render, quick_gelu.work_key):
        with pytest.raises(errors.InputError, match=r"argument 'variant': expected a variant id, one of .*got list \['scalar'\]"):
            method({"X": x}, variant=["scalar"])


def test_a_tensor_meta_without_a_dtype_is_refused_as_none_not_float64(quick_gelu):
    with pytest.raises(errors.DTypeError, match="got None$"):
        quick_gelu.explain({"X": wk.TensorMeta((2,), None)})


def released_memoryview() -> memoryview:
    view = memoryview(np.ones(4, f32))
    view.release()
    return view


def test_typed_buffers_are_the_arrays_their_format_says(quick_gelu):
    """A memoryview or array.array of float32 had been refused ("expected a NumPy array or a
    GpuTensor, got memoryview") while a list was converted; both are read as NumPy reads them."""
    x = np.linspace(-3, 3, 12, dtype=f32).reshape(3, 4)
    want = quick_gelu({"X": x})["Y"]
    np.testing.assert_array_equal(quick_gelu({"X": memoryview(x)})["Y"], want)
    np.testing.assert_array_equal(quick_gelu({"X": array.array("f", x.ravel().tolist())})["Y"], want.ravel())
    np.testing.assert_array_equal(to_gpu(memoryview(x)).numpy(), x)
    with pytest.raises(errors.InputError, match="got a released memoryview"):  # it had been a bare ValueError
        to_gpu(released_memoryview())


def test_a_tensor_meta_takes_the_short_dtype_names(quick_gelu):
    """TensorMeta(shape, "f16"), the name the CLI and dtypes.T use, had been NumPy's "f16",
    float128 ("expected dtype in ['float32', 'float16'], got float128"), and "f32" unknown.
    A name NumPy reads as another type the engine knows ("i8": int64, int8 to the CLI) is refused."""
    for given, read in (("f16", "float16"), ("f32", "float32"), ("float16", "float16"), ("f2", "float16"),
                        (np.float16, "float16"), ("bf16", "bfloat16"), ("int64", "int64"), ("i32", "int32")):
        meta = {"X": wk.TensorMeta((2, 8), given)}
        if read in ("float16", "float32"):
            explained = quick_gelu.explain(meta)
            assert explained.chosen == "vec4" and explained.outputs[0].dtype == read
        else:
            with pytest.raises(errors.DTypeError, match=f"got {read}( \\(convert with|$)"):  # then a conversion hint
                quick_gelu.explain(meta)
    for given, numpy_reading, short_reading in (("i8", "int64", "int8"), ("u8", "uint64", "uint8")):
        with pytest.raises(errors.DTypeError, match=f"argument 'X': expected a dtype name with one reading: "
                                                    f"'{numpy_reading}' .* or '{short_reading}' .*, got '{given}'"):
            quick_gelu.explain({"X": wk.TensorMeta((2, 8), given)})


def test_tensor_metas_of_one_dtype_are_equal_whatever_its_spelling():
    """TensorMeta((2,), "f16") != TensorMeta((2,), "float16"), so metas as dict keys or
    in a comparison told one dtype apart from itself. A name of two readings stays as given (the
    call refuses it, naming the input), as does a name that is no dtype."""
    spellings = ["float16", "f16", "f2", np.float16, np.dtype("float16")]
    assert len({wk.TensorMeta((2, 3), d) for d in spellings}) == 1
    assert wk.TensorMeta([2, 3], "f32") == wk.TensorMeta((2, 3), "float32")
    assert wk.TensorMeta((2,), "i8").dtype == "i8" and wk.TensorMeta((2,), "weird").dtype == "weird"


def test_a_tensor_meta_keeps_any_sequence_of_integers_as_a_tuple_of_ints():
    """TensorMeta(np.array([2, 3]), ...) kept the array: explain refused it ("expected a shape (a
    tuple of dimensions), got ndarray"), and the meta could neither be hashed nor compared. NumPy
    integers become ints (a shape of np.int64 printed as such); the array is not modified."""
    shape = np.array([2, 3])
    for given in (shape, [np.int64(2), np.int32(3)], range(2, 4), (np.uint16(2), 3)):
        meta = wk.TensorMeta(given, "float32")
        assert meta == wk.TensorMeta((2, 3), "float32") and hash(meta) == hash(wk.TensorMeta((2, 3), "float32"))
        assert [type(d) for d in meta.shape] == [int, int] and repr(meta) == "TensorMeta(shape=(2, 3), dtype='float32')"
    np.testing.assert_array_equal(shape, [2, 3])
    # what is no shape is kept for the call to refuse, naming the input (test_shape_only_metas)
    assert wk.TensorMeta(5, "float32").shape == 5 and wk.TensorMeta((2.0, 3), "float32").shape == (2.0, 3)


def test_a_float_attribute_takes_an_int_as_the_number_it_is(quick_gelu):
    """alpha=2**63 had been refused ("below 2^63 in magnitude") while alpha=2.0**63 ran; an int
    past float64 is past f32 and says so."""
    x = np.linspace(-2, 2, 16, dtype=f32)
    for big in (2**63, -(2**64)):
        np.testing.assert_array_equal(quick_gelu({"X": x}, attrs={"alpha": big})["Y"],
                                      quick_gelu({"X": x}, attrs={"alpha": float(big)})["Y"])  # fmt: skip
    with pytest.raises(errors.AttributeValueError, match=r"argument 'alpha': expected a number that rounds to a finite float32 "
                                                         r"\(\|x\| < 3\.4028235677973366e\+38; the largest is 3\.4028234663852886e\+38\)"):
        quick_gelu({"X": x}, attrs={"alpha": 10**400})
    # past Python's 4,300-digit repr limit the value had shown as a bare '?'
    with pytest.raises(errors.AttributeValueError, match=r"got int <int of 16610 bits>$"):
        quick_gelu({"X": x}, attrs={"alpha": 10**5000})


def test_a_float_attribute_that_rounds_to_the_largest_f32_is_taken(quick_gelu):
    """3.4028235e38 is how NumPy prints float32's largest value, and rounds to it: it had been refused
    as beyond "|x| <= 3.402823e+38", a bound that read like the value itself. A float
    rounds to infinity only from F32_MAX plus half its last unit."""
    x = np.linspace(-2, 2, 16, dtype=f32)
    largest = float(np.finfo(f32).max)
    for alpha in (3.4028235e38, -3.4028235e38, np.nextafter(largest + 2.0**103, 0)):
        np.testing.assert_array_equal(quick_gelu({"X": x}, attrs={"alpha": alpha})["Y"],
                                      quick_gelu({"X": x}, attrs={"alpha": math.copysign(largest, alpha)})["Y"])  # fmt: skip
    with pytest.raises(errors.AttributeValueError, match=r"the largest is 3\.4028234663852886e\+38\).*got float 3\.40282356779"):
        quick_gelu({"X": x}, attrs={"alpha": largest + 2.0**103})


def test_a_longdouble_attribute_is_a_number(quick_gelu):
    """np.longdouble(1.5).item() is a longdouble again (Python has no wider float): it was refused
    as "expected a number (attribute), got longdouble"."""
    x = np.linspace(-2, 2, 16, dtype=f32)
    got = quick_gelu({"X": x}, attrs={"alpha": np.longdouble(1.5)})["Y"]
    np.testing.assert_allclose(got, x / (1 + np.exp(-1.5 * x.astype(np.float64))), rtol=1e-5, atol=1e-6)


class _ArrayInterfaceOnly:
    """An object NumPy reads through __array_interface__ alone (as Pillow's images are)."""

    def __init__(self, array: np.ndarray) -> None:
        self._array = array  # keeps the memory alive
        self.__array_interface__ = array.__array_interface__


class _RefusingArray:
    """An __array__ that raises, as a CUDA torch tensor's (TypeError) or a requires-grad one's (RuntimeError)."""

    def __init__(self, error: Exception) -> None:
        self.error = error

    def __array__(self, dtype=None, copy=None):
        raise self.error


def test_an_array_interface_object_is_read_as_numpy_reads_it(quick_gelu):
    """It had been refused: "expected a NumPy array or a GpuTensor, got _ArrayInterfaceOnly"."""
    x = np.linspace(-3, 3, 12, dtype=f32).reshape(3, 4)
    want = quick_gelu({"X": x})["Y"]
    np.testing.assert_array_equal(quick_gelu({"X": _ArrayInterfaceOnly(x)})["Y"], want)
    np.testing.assert_array_equal(to_gpu(_ArrayInterfaceOnly(x)).numpy(), x)


@pytest.mark.parametrize("error", [
    TypeError("can't convert cuda:0 device type tensor to numpy. Use Tensor.cpu() to copy the tensor to host memory first."),
    RuntimeError("Can't call numpy() on Tensor that requires grad. Use tensor.detach().numpy() instead."),
], ids=["TypeError", "RuntimeError"])  # fmt: skip
@pytest.mark.parametrize("how", ["numpy", "gpu", "to_gpu"])
def test_an_array_whose_conversion_raises_is_an_input_error_naming_the_argument(quick_gelu, device, error, how):
    """The object's own TypeError or RuntimeError had escaped the call raw (errors.md: nothing but a
    KernelError escapes a call on bad input)."""
    before = gpu_state(device)
    value = _RefusingArray(error)
    with pytest.raises(errors.InputError) as info:
        to_gpu(value) if how == "to_gpu" else quick_gelu({"X": value}, output=how)
    assert info.value.argument == ("array" if how == "to_gpu" else "X")
    assert str(error) in str(info.value) and type(error).__name__ in str(info.value)
    assert gpu_state(device) == before


def test_a_torch_tensor_numpy_cannot_read_gets_a_hint_of_what_to_do(quick_gelu):
    """A bfloat16 torch tensor's refusal ("Got unsupported ScalarType BFloat16") said what failed but
    not what to do (an author's trial); only torch's tensors get torch's advice."""
    tensor_type = type("Tensor", (_RefusingArray,), {"__module__": "torch"})  # as torch.Tensor reports itself
    with pytest.raises(errors.InputError) as info:
        quick_gelu({"X": tensor_type(TypeError("Got unsupported ScalarType BFloat16"))})
    assert str(info.value).endswith("(for a torch tensor, x.detach().cpu().numpy(); bfloat16 has no NumPy dtype: "
                                    "x.float() or x.half() first)")  # fmt: skip
    with pytest.raises(errors.InputError) as info:
        quick_gelu({"X": _RefusingArray(TypeError("no"))})
    assert "torch" not in str(info.value)


def test_a_gpu_tensor_of_a_refused_dtype_is_told_to_upload_it_converted(quick_gelu):
    """A GpuTensor has no NumPy astype for int32 -> float32: the call's DTypeError says to upload it
    converted (docs: GpuTensor.astype converts only between float32 and float16), not .astype."""
    tensor = wk.to_gpu(np.arange(4, dtype=np.int32))
    with pytest.raises(errors.DTypeError) as info:
        quick_gelu({"X": tensor})
    assert "upload it converted: to_gpu(a.astype(np.float32))" in str(info.value), info.value
    tensor.release()
