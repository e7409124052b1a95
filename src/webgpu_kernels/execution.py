"""Execution on WebGPU: pipelines (cached per device), buffers, dispatch and readback.

This is the one place that talks to wgpu and the one place that turns wgpu's errors into the
library's typed errors. Pipelines are keyed by everything that shapes them: the rendered WGSL,
the entry point and the binding layout, so two calls share a pipeline only if their shaders are
identical (an f32 and an f16 call never do).
"""

from __future__ import annotations

import math
import re
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np
import wgpu

from .buffers import STORAGE_USAGE, append_dispatch, is_device_lost, padded_size, translate_gpu_errors
from .deep_stack import on_deep_stack
from .device import Device, binding_adapter_advice
from .errors import (
    DeviceLimitError,
    InputError,
    MissingInputError,
    MissingOutputError,
    ShaderCompileError,
    TensorReleasedError,
    short_repr,
)
from .program import DeviceInfo, OutputSpec
from .rendering import RenderedWGSL, ResolvedPass
from .tensor import RELEASED_ADVICE, UNCOMPUTED_TENSOR, GpuTensor
from .workgroup_memory import describe, workgroup_storage

PIPELINE_CACHE_SIZE = 256
_BUFFER_TYPES = {"read-only-storage": wgpu.BufferBindingType.read_only_storage,
                 "storage": wgpu.BufferBindingType.storage, "uniform": wgpu.BufferBindingType.uniform}  # fmt: skip


@dataclass(frozen=True)
class CompiledPipeline:
    pipeline: Any
    bind_group_layout: Any


@dataclass(frozen=True)
class PassProgram:
    """A pass ready to dispatch: its pipeline, what each binding is bound to, and the grid."""

    label: str
    pipeline: CompiledPipeline
    entries: tuple[tuple[int, str | None, Any], ...]  # (binding, arg name or None, uniform buffer or None)
    grid: tuple[int, int, int]


@dataclass(frozen=True)
class ExecutionPlan:
    variant: str
    passes: tuple[PassProgram, ...]
    outputs: tuple[OutputSpec, ...]
    #: every tunable's value the passes were built with (the manifest's defaults, overridden)
    tunables: Mapping[str, Any] = field(default_factory=dict, compare=False)
    #: [True] until a run of this plan was submitted on its own (run_plan)
    unproven: list[bool] = field(default_factory=lambda: [True], compare=False, repr=False)
    #: the optional outputs the variant binds nowhere, left out of the result (CallOutputs says so)
    left_out: tuple[str, ...] = ()
    #: the outputs computed but not asked for (a call's ``outputs=``): their buffers go back to
    #: the pool as the call returns, never read back
    dropped: tuple[str, ...] = ()
    #: the outputs the call asked for (its ``outputs=``), None where it named none
    asked: frozenset[str] | None = None
    #: (name, bytes) of each scratch buffer the variant's passes bind: pooled for the call, never returned
    scratch: tuple[tuple[str, int], ...] = ()

    @cached_property
    def label(self) -> str:
        return f"variant {self.variant!r}"  # formatted once, not on every call

    @cached_property
    def output_buffers(self) -> tuple[tuple[str, tuple[int, ...], np.dtype, int], ...]:
        """(role, shape, dtype, bytes) of each output, computed once."""
        specs = []
        for out in self.outputs:
            dtype = np.dtype(out.dtype)
            specs.append((out.role, out.shape, dtype, math.prod(out.shape) * dtype.itemsize))
        return tuple(specs)


class CallOutputs(dict[str, Any]):
    """A call's result: a dict keyed by output name, whose missing key says which outputs there are
    and why an optional one is absent (a bare ``KeyError: 'P'`` had said neither). It pickles and
    copies as a plain dict: the plan it refers to holds wgpu objects."""

    __slots__ = ("_plan",)
    _plan: ExecutionPlan  # set by _outputs: dict's own __init__ and a slot cost less per call than an __init__ here

    def __missing__(self, key: Any) -> Any:
        outputs = list(self)
        expected = f"one of the outputs {outputs} (a call returns a dict keyed by output name"
        if not isinstance(key, str):
            hint = f": result[{outputs[0]!r}], not result[{short_repr(key)}])" if outputs else ")"
            raise MissingOutputError(short_repr(key), expected + hint, f"{type(key).__name__} {short_repr(key)}")
        plan = self._plan
        if key in plan.dropped or (key in plan.left_out and plan.asked is not None and key not in plan.asked):
            # not asked for: forcing a variant that writes it would not return it either
            raise MissingOutputError(key, expected + ")", f"{key!r}, an output the call did not ask for (add it "
                                     "to outputs=: the result holds the outputs it names)")  # fmt: skip
        if key in plan.left_out:
            raise MissingOutputError(key, expected + ")", f"{key!r}, an optional output that variant "
                                     f"{self._plan.variant!r} does not produce (kernel.explain(inputs) says which "
                                     "variants would; force one with variant=...)")  # fmt: skip
        raise MissingOutputError(key, expected + ")", "an unknown output")

    def __reduce__(self) -> tuple[Any, ...]:
        return dict, (dict(self),)


def _outputs(values: Mapping[str, Any], plan: ExecutionPlan) -> CallOutputs:
    result = CallOutputs(values)
    result._plan = plan
    return result


def _pipeline_cache(device: Device) -> OrderedDict[Any, CompiledPipeline]:
    cache = getattr(device, "_pipelines", None)
    if cache is None:  # setdefault: two threads' first calls on a new device keep one cache, not one each
        cache = vars(device).setdefault("_pipelines", OrderedDict())
    return cache


#: What the caller could change to shrink the named workgroup variables of a pass (see
#: rendering.workgroup_memory_arguments), asked only when the pass is refused; None: not known.
Blame = Callable[[Sequence[str]], "Sequence[str] | None"]


def compile_pipeline(device: Device, wgsl: str, resolved: ResolvedPass, *, kernel: str, variant: str,
                     blame: Blame | None = None) -> CompiledPipeline:  # fmt: skip
    """The compute pipeline for ``wgsl`` with ``resolved``'s binding layout, from the cache if built."""
    layout_key = tuple((b.binding, b.buffer_type) for b in resolved.bindings)
    key = (wgsl, resolved.entry_point, layout_key)
    cache = _pipeline_cache(device)
    with device.lock:
        hit = cache.get(key)
        if hit is not None:
            cache.move_to_end(key)
            return hit
        check_workgroup_storage(device, wgsl, resolved, variant, blame)
        gpu = device.gpu
        layout = None

        def build() -> Any:  # the compiler recurses per level of the WGSL: on a deep stack (deep_stack.py)
            nonlocal layout
            module = gpu.create_shader_module(label=resolved.label, code=wgsl)
            layout = gpu.create_bind_group_layout(entries=[
                {"binding": b.binding, "visibility": wgpu.ShaderStage.COMPUTE,
                 "buffer": {"type": _BUFFER_TYPES[b.buffer_type]}}
                for b in resolved.bindings
            ])  # fmt: skip
            return gpu.create_compute_pipeline(
                label=resolved.label,
                layout=gpu.create_pipeline_layout(bind_group_layouts=[layout]),
                compute={"module": module, "entry_point": resolved.entry_point},
            )

        try:
            pipeline = on_deep_stack(build)
        except wgpu.GPUError as exc:
            if is_device_lost(exc):
                with translate_gpu_errors("building a pipeline", device.memory):
                    raise
            message, file, line = str(exc).strip(), None, None
            if _MISSING_BINDING.search(message):  # wgpu names the binding, not the manifest's ones
                known = ", ".join(f"@group({b.group}) @binding({b.binding}) {b.name}" for b in resolved.bindings)
                message += (f"\n(this pass's bindings are {known}; a template that declares its own variables takes "
                            "each place from {{ bindings.NAME.group }} and {{ bindings.NAME.binding }})")
            if _WIDE_TYPES.search(message):  # the compiler names its capability, not the format's way round it
                message += ("\n(the engine enables no 64-bit shader types: an int64, uint64 or float64 tensor is "
                            "storage-only, bound as its bytes; read int64 as array<vec2<u32>>, the low word first: "
                            "format.md, storage-only types)")
            position = _COMPILER_POSITION.search(message)
            if position and isinstance(wgsl, RenderedWGSL):  # it knows which template line made each line
                origin = wgsl.template_line(int(position[1]), int(position[2]))
                if origin is not None:
                    file, line = origin
                    message += f"\n(rendered line {position[1]} comes from {file} line {line})"
            raise ShaderCompileError(message, kernel=kernel, variant=variant, pass_id=resolved.pass_id, file=file,
                                     line=line) from None  # fmt: skip
        compiled = CompiledPipeline(pipeline, layout)
        cache[key] = compiled
        if len(cache) > PIPELINE_CACHE_SIZE:
            cache.popitem(last=False)
        return compiled


def check_bound(resolved: ResolvedPass, sizes: Mapping[str, int], variant: str) -> None:
    """Refuse a pass that binds a tensor the call does not have (an optional input left out,
    which the variant's ``when`` should have required)."""
    for b in resolved.bindings:
        if b.arg is not None and b.arg not in sizes:
            raise MissingInputError(b.arg, f"a tensor (variant {variant!r} binds it)", "nothing")


def split_hints(size: int, limit: int) -> dict[str, str]:
    """What to do about a tensor past a device limit (a DeviceLimitError's ``hint``, and its
    ``command_line_hint`` where another adapter is named): the engine never splits a call itself.
    Said for any tensor: a weight table has no batch to split, so the split is only where the op
    allows it. Another adapter is named only where one present binds the tensor."""
    other = binding_adapter_advice(size)
    split = (f"the engine does not split a call: where the op allows it (a batch dimension split, say), make at least "
             f"{-(-size // max(limit, 1))} calls on smaller pieces and join the results")  # fmt: skip
    if other is None:
        return {"hint": f"{split}; no adapter present binds it whole"}
    return {"hint": f"{split}, or run it with {other.python} {other.words}",
            "command_line_hint": f"{split}, or run it with {other.command_line} {other.words}"}


def check_input_sizes(info: DeviceInfo, sizes: Mapping[str, int]) -> None:
    """Refuse an input no buffer of the device can hold, before the variant's expressions run:
    a shape of 10^15 elements had been reported as a uniform field past u32, in the manifest's terms."""
    max_buffer, max_binding = info.limits["maxBufferSize"], info.limits["maxStorageBufferBindingSize"]
    for role, size in sizes.items():
        if size > max_buffer:  # one within it but past a binding is check_limits' to refuse, as a binding
            raise DeviceLimitError(role, f"at most {max_buffer} bytes (the device's maxBufferSize; a storage binding "
                                   f"holds at most {min(max_binding, max_buffer)})", f"{size} bytes",
                                   **split_hints(size, min(max_binding, max_buffer)))  # fmt: skip


def check_limits(device: Device, resolved: ResolvedPass, sizes: Mapping[str, int],
                 workgroup_arguments: Sequence[str],
                 scratch_arguments: Mapping[str, Sequence[str]] | None = None) -> None:  # fmt: skip
    """Refuse, before any GPU work, what the device cannot do: binding sizes, workgroup sizes. A
    workgroup too large is blamed on the tunables its size reads, else the attributes and inputs
    (``workgroup_arguments``: Program.arguments_read), which the caller can change; one fixed by the
    package is the variant's. So is a scratch buffer too large (``scratch_arguments``: what each
    one's size reads, by name; ``sizes`` holds its bytes)."""
    most = min(device.limits["max-storage-buffer-binding-size"], device.limits["max-buffer-size"])
    for b in resolved.bindings:
        if b.arg is None or padded_size(sizes[b.arg]) <= most:
            continue
        if scratch_arguments and b.arg in scratch_arguments:  # its size is the variant's: blame what it reads
            argument, fixed = _blamed(scratch_arguments[b.arg], "a size")
            raise DeviceLimitError(argument, f"a scratch buffer of at most {most} bytes "
                                   "(the device's maxStorageBufferBindingSize)", f"{sizes[b.arg]} bytes for scratch "
                                   f"buffer {b.arg!r} (pass {resolved.pass_id!r}{fixed})")  # fmt: skip
        raise DeviceLimitError(b.arg, f"at most {most} bytes per binding (the device's maxStorageBufferBindingSize)",
                               f"{sizes[b.arg]} bytes", **split_hints(padded_size(sizes[b.arg]), most))  # fmt: skip
    x, y, z = resolved.workgroup_size
    limits = device.info.limits
    checks = (("maxComputeWorkgroupSizeX", x), ("maxComputeWorkgroupSizeY", y), ("maxComputeWorkgroupSizeZ", z),
              ("maxComputeInvocationsPerWorkgroup", x * y * z))  # fmt: skip
    for limit, value in checks:
        if value > limits[limit]:
            argument, fixed = _blamed(workgroup_arguments, "a workgroupSize")
            raise DeviceLimitError(argument, f"a workgroup within the device's {limit} = {limits[limit]}",
                                   f"{value} (pass {resolved.pass_id!r}{fixed})")  # fmt: skip


def _blamed(arguments: Sequence[str] | None, what: str) -> tuple[str, str]:
    """The argument a device limit refusal names (Program.arguments_read: the tunables, else the
    attributes and inputs, the value past the limit follows) and what it adds where the package
    fixes ``what`` (no argument: 'variant'). None, not known: 'tunables', what every such refusal
    had named."""
    if arguments is None:
        return "tunables", ""
    return ", ".join(arguments) or "variant", "" if arguments else f", {what} the package fixes"


def check_workgroup_storage(device: Device, wgsl: str, resolved: ResolvedPass, variant: str,
                            blame: Blame | None = None) -> None:  # fmt: skip
    """Refuse a pass whose WGSL uses more workgroup memory than the device allows: wgpu-native does
    not check it, and a driver may then hang (workgroup_memory.py). Runs once per pipeline built.
    The refusal names what ``blame`` says the sizes follow, as check_limits does for the workgroup."""
    usage = workgroup_storage(wgsl, resolved.entry_point)
    limit = device.limits.get("max-compute-workgroup-storage-size")
    if usage and limit is not None and sum(usage.values()) > limit:
        argument, fixed = _blamed(None if blame is None else blame(list(usage)), "a size")
        raise DeviceLimitError(argument, f"workgroup memory within the device's maxComputeWorkgroupStorageSize = "
                               f"{limit} bytes", f"{describe(usage)} in pass {resolved.pass_id!r} of variant "
                               f"{variant!r}{fixed}")  # fmt: skip


def build_pass(device: Device, resolved: ResolvedPass, wgsl: str, *, kernel: str, variant: str,
               blame: Blame | None = None) -> PassProgram:  # fmt: skip
    compiled = compile_pipeline(device, wgsl, resolved, kernel=kernel, variant=variant, blame=blame)
    entries = []
    # A new shape whose WGSL is compiled already reaches the device first here: on a lost one that
    # was wgpu's raw error, and the device was never replaced.
    with translate_gpu_errors("building a plan", device.memory):
        for b in resolved.bindings:
            uniform = None
            if b.uniform_bytes is not None:  # mapped at creation, so no staging copy: not ``written``
                data = b.uniform_bytes
                uniform = device.memory.create(len(data), lambda: device.gpu.create_buffer_with_data(
                    data=data, usage=wgpu.BufferUsage.UNIFORM))  # fmt: skip
            entries.append((b.binding, b.arg, uniform))
    # The grid the pass was resolved and rendered for (globalIndex is defined only where it counts it)
    return PassProgram(label=resolved.label, pipeline=compiled, entries=tuple(entries), grid=resolved.grid)


def host_array(value: np.ndarray) -> np.ndarray:
    """``value`` as C-contiguous little-endian data for upload: the caller's array when it already
    is, else a copy (never a change to the caller's array)."""
    if value.dtype.byteorder == ">":
        value = value.astype(value.dtype.newbyteorder("<"))
    return np.asarray(value, order="C")  # ascontiguousarray would make rank 0 rank 1


def upload(device: Device, array: np.ndarray) -> Any:
    """A new storage buffer holding ``array`` (C-contiguous, little-endian), zero-padded to the
    size a binding binds (``padded_size``): a 20,020-byte tensor is bound as 20,032 bytes."""
    data = _padded_bytes(array, whole=True)
    return device.memory.create(data.nbytes, lambda: device.gpu.create_buffer_with_data(data=data, usage=STORAGE_USAGE))


def _padded_bytes(array: np.ndarray, *, whole: bool = False, padding: int = 0) -> np.ndarray:
    """``array``'s bytes, padded with ``padding`` to ``padded_size`` when WebGPU needs it (a write of
    a multiple of 4 bytes into a pooled buffer, which is already that size, needs no copy) or
    ``whole`` asks, as any padding other than zeros does."""
    data = array.reshape(-1).view(np.uint8)
    whole = whole or padding != 0
    if data.nbytes % 4 or data.nbytes == 0 or (whole and data.nbytes != padded_size(data.nbytes)):
        padded = np.full(padded_size(data.nbytes), padding, dtype=np.uint8)
        padded[: data.nbytes] = data
        data = padded
    return data


#: What naga says of a 64-bit type the device was not opened for ("Using `i64` values requires the
#: `naga::valid::Capabilities::SHADER_INT64` flag"; FLOAT64 for f64), not the source lines it echoes.
_WIDE_TYPES = re.compile(r"Capabilities::(?:SHADER_INT64|FLOAT64)\b")
_MISSING_BINDING = re.compile(r"ResourceBinding \{ group: \d+, binding: \d+ \} is not available in the pipeline layout")
#: Where naga's report points in the rendered WGSL: "┌─ wgsl:28:33" (parse errors) or
#: "┌─ QuickGelu.vec4:15:12" (validation errors, under the shader's label).
_COMPILER_POSITION = re.compile(r"┌─ .*?:(\d+):(\d+)\s*$", re.MULTILINE)


@dataclass(frozen=True)
class BoundPass:
    label: str
    pipeline: Any
    bind_group: Any
    grid: tuple[int, int, int]


def bind_groups(device: Device, plan: ExecutionPlan, buffers: Mapping[str, tuple[Any, int]]) -> list[tuple[PassProgram, Any]]:
    """(pass, bind group) for each pass that dispatches work, over ``buffers`` (arg -> (wgpu
    buffer, bytes to bind)). The per-call path: no objects beyond the list."""
    groups = []
    for program in plan.passes:
        if program.grid[0] == 0:
            continue
        entries = tuple((binding, uniform, None) if arg is None else (binding, *buffers[arg])
                        for binding, arg, uniform in program.entries)  # fmt: skip
        groups.append((program, device.memory.bind_group(program.pipeline.bind_group_layout, entries)))
    return groups


def bind(device: Device, plan: ExecutionPlan, buffers: Mapping[str, tuple[Any, int]]) -> list[BoundPass]:
    """:func:`bind_groups` as BoundPass records (for encoders outside the recorder, e.g. timing)."""
    with device.lock:  # the bind-group cache is shared with calls on other threads (run_plan holds it)
        return [BoundPass(p.label, p.pipeline.pipeline, group, p.grid) for p, group in bind_groups(device, plan, buffers)]


def dispatch_calls(compute: Any, bound: list[BoundPass], calls: int) -> None:
    """Append ``calls`` back-to-back calls of ``bound`` to the open compute pass ``compute``, with the
    recorder's own append_dispatch (pipeline and bind group set only when they change)."""
    state: tuple[Any, Any] = (None, None)
    for _ in range(calls):
        for p in bound:
            state = append_dispatch(compute, state, p.pipeline, p.bind_group, p.grid)


def run_plan(
    device: Device,
    plan: ExecutionPlan,
    inputs: Mapping[str, np.ndarray | GpuTensor],
    *,
    to_numpy: bool,
) -> dict[str, np.ndarray | GpuTensor]:
    """Dispatch every pass of ``plan`` over ``inputs`` and return the outputs by name.

    GPU work is recorded, not submitted: it goes to the GPU when a result is read (NumPy
    outputs, ``GpuTensor.numpy()``), on ``flush()``, or when enough work is pending.
    """
    memory = device.memory
    with translate_gpu_errors(plan.label, memory), device.lock:
        buffers: dict[str, tuple[Any, int]] = {}
        staged: list[Any] = []
        results: dict[str, GpuTensor] = {}
        try:
            for name, value in inputs.items():
                if isinstance(value, GpuTensor):  # its slots: the read-only property costs 17 ns more a read (CPU machine)
                    if memory.lost_batches and memory.lost(value._work):  # GpuTensor.uncomputed, under the lock
                        raise InputError(name, "a GpuTensor holding computed data", UNCOMPUTED_TENSOR)
                    try:
                        buffer = value.buffer
                    except TensorReleasedError:  # by another thread since the call checked it: the same error
                        raise InputError(name, "a live GpuTensor", "a released GpuTensor", hint=RELEASED_ADVICE) from None
                    buffers[name] = (buffer, value._bound_bytes)
                else:
                    buffer = memory.acquire(value.nbytes)
                    staged.append(buffer)
                    if value.nbytes:
                        memory.write(buffer, _padded_bytes(value))
                    buffers[name] = (buffer, padded_size(value.nbytes))
            for role, shape, dtype, nbytes in plan.output_buffers:
                buffer = memory.acquire(nbytes)
                tensor = GpuTensor(buffer, shape, dtype, device, nbytes)
                buffers[role] = (buffer, tensor._bound_bytes)
                results[role] = tensor
            for name, nbytes in plan.scratch:  # released with `staged`, below: later work runs after this call's
                buffer = memory.acquire(nbytes)
                staged.append(buffer)
                buffers[name] = (buffer, padded_size(nbytes))
            # WebGPU reports a dispatch it rejects (a binding smaller than the shader reads, say)
            # only when the command buffer is finished. A plan's first run is submitted on its
            # own, so that error fails this call, named by its variant, and takes no other
            # call's recorded work down with it; later runs of the plan are recorded as usual.
            unproven = plan.unproven[0]
            if unproven:
                memory.flush()
            first = last = memory.batch
            for program, group in bind_groups(device, plan, buffers):
                last = memory.batch  # a record may submit the batch it joins (MAX_PENDING_DISPATCHES)
                memory.record(program.pipeline.pipeline, group, program.grid)
            work = (first, last)
            for tensor in results.values():
                tensor._work = work
            if unproven:
                try:
                    memory.flush()
                except BaseException:
                    # Its batches held this call's work alone (the flush above submitted the rest, under
                    # the lock) and its tensors are released below: kept, a call retried on and on
                    # grew the lost batches without bound, each scanned by every GpuTensor input.
                    memory.forget_lost(work)
                    raise
                plan.unproven[0] = False
            for role in plan.dropped:  # pooled now, never read back: later work runs after this (as for `staged`)
                results.pop(role).release()
        except BaseException:
            for tensor in results.values():  # nothing is half-returned, nothing leaks
                tensor.release()
            raise
        finally:
            # Recorded work runs in order on one queue, so these may be reused by later work at once.
            for buffer in staged:
                memory.release(buffer)
        if not to_numpy:
            return _outputs(results, plan)
        arrays: dict[str, np.ndarray | GpuTensor] = {}
        for role, tensor in results.items():
            arrays[role] = tensor.numpy()
            tensor.release()
        return _outputs(arrays, plan)


def to_gpu(device: Device, array: np.ndarray, *, padding: int = 0) -> GpuTensor:
    """A GpuTensor holding a copy of ``array`` (made C-contiguous little-endian first), the bytes
    its binding reads past the data (up to ``padded_size``) all ``padding``: zeros unless a test
    run poisons them."""
    with translate_gpu_errors("upload", device.memory), device.lock:
        buffer = device.memory.acquire(array.nbytes)
        try:
            if array.nbytes or padding:  # an empty tensor's binding still reads 16 bytes: a test run poisons them
                device.memory.write(buffer, _padded_bytes(array, padding=padding))
        except BaseException:  # a failed or interrupted upload (Ctrl-C) had kept its buffer leased for good
            device.memory.release(buffer)
            raise
        return GpuTensor(buffer, array.shape, array.dtype, device)


def flush(device: Device) -> None:
    """Submit every recorded dispatch of ``device`` to the GPU now."""
    with translate_gpu_errors("flush", device.memory):
        device.memory.flush()
