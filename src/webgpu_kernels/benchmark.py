"""Honest kernel timing: random data, sustained back-to-back load, GPU timestamps, medians.

Why each rule: on an H200, zero-filled buffers read up to 2.5x faster than random data
(compression), and a kernel timed right after an upload or after idle gaps looks up to 2.5x
slower than under sustained load. So inputs are random, every measurement batch records
hundreds of calls into one submission, batches repeat until their medians agree, and the time
per call comes from timestamp queries around runs of 50 back-to-back calls in one compute pass,
recorded as the engine records a chain of calls (and as torch's peer is timed, between two CUDA
events around 50 launches).
"""

from __future__ import annotations

import math
import re
import statistics
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import asdict, dataclass, field
from typing import Any, cast

import numpy as np
import wgpu

from .buffers import padded_size, translate_gpu_errors
from .case_data import random_values
from .casefile import BENCH_COUNTS
from .comparison import Agreement
from .device import Device
from .errors import GPUError
from .execution import BoundPass, ExecutionPlan, bind, dispatch_calls, upload
from .expressions import as_count
from .kernel import Kernel
from .tensor import GpuTensor
from .walltime import (
    MAX_BATCHES,
    MIN_BATCHES,
    MIN_TOTAL_S,
    REL_TOL,
    TARGET_BATCH_S,
    WARM_UP_BYTES,
    back_to_back,
    settle,
    sustain,
)

#: Datasheet memory bandwidth (bytes/s) by model name, matched as a whole word in the adapter name.
KNOWN_PEAKS: dict[str, float] = {
    "H200": 4.8e12, "H100 PCIe": 2.0e12, "H100": 3.35e12, "A100": 2.0e12, "L40S": 864e9, "L4": 300e9,
    "RTX 4090": 1008e9, "RTX 3090": 936e9, "A10G": 600e9, "T4": 320e9,
}  # fmt: skip
QUERY_SET_MAX = 4096  # WebGPU's maximum query count per query set


def known_peak(adapter_name: str) -> float | None:
    """The datasheet peak of the first model named in ``adapter_name`` ("L4" does not match "L40")."""
    for key, peak in KNOWN_PEAKS.items():
        if re.search(rf"(?<![A-Za-z0-9]){re.escape(key)}(?![A-Za-z0-9])", adapter_name, re.IGNORECASE):
            return peak
    return None


@dataclass(frozen=True)
class Timing:
    """GPU time per call (all passes of one call), from timestamp queries; a sample is the mean
    over one span of back-to-back calls."""

    median_s: float
    p10_s: float
    p90_s: float
    samples: int
    batches: int
    #: False when max_batches ran out before two consecutive batch medians agreed
    stable: bool = True
    #: Calls between two timestamps: CALLS_PER_SPAN, fewer for a call slower than a batch's target
    calls_per_span: int = 0


#: Calls between two timestamps: torch's peer times 50 launches between two CUDA events.
CALLS_PER_SPAN = 50

#: bench's and tune's --quick: a smoke run (a CI job on a CPU adapter, where figures mean nothing)
_quick: ContextVar[bool] = ContextVar("quick_timing", default=False)
#: What --quick prints under its results.
QUICK_NOTE = "quick: two short batches a timing, so the figures are rough (without --quick each timing waits for steady ones)"


@contextmanager
def quick_timing(on: bool = True) -> Iterator[None]:
    """Within it (``on``), every timing of :func:`time_calls` (a kernel, a tune candidate, the copy
    kernel) is two batches of the fewest spans, whatever rule its caller asks for: the batch rule's
    wait for two agreeing medians, up to 40 batches of 50 ms, was most of a run on lavapipe."""
    token = _quick.set(on)
    try:
        yield
    finally:
        _quick.reset(token)


def time_calls(
    device: Device,
    bound: list[BoundPass],
    *,
    target_batch_s: float = TARGET_BATCH_S,
    min_batches: int = MIN_BATCHES,
    max_batches: int = MAX_BATCHES,
    rel_tol: float = REL_TOL,
    min_total_s: float = MIN_TOTAL_S,
    calls_per_span: int = CALLS_PER_SPAN,
) -> Timing:
    """GPU time per call of ``bound`` called back to back, in batches until two consecutive batch
    medians agree; the statistics are over those two batches' samples.

    Calls are recorded as the engine records consecutive calls, into one compute pass (wgpu
    inserts the barriers that order them), and timed in spans of ``calls_per_span`` calls between
    the pass's two timestamps, as torch's peer is timed between two CUDA events. One pass per call
    with its own timestamps would charge every call a pass boundary that chained calls never pay:
    2.8-3.5 us more per call on the H200 (scripts/timing_probe.py, docs/performance.md).
    """
    if "timestamp-query" not in device.info.features:  # the library's error: bench reports it per case
        raise GPUError(f"{device.adapter.label()} has no timestamp-query feature: GPU time cannot be measured")
    gpu = device.gpu
    calls_per_span = _span_for(gpu, bound, calls_per_span, target_batch_s)
    if _quick.get():  # a batch target of 0: each batch the fewest spans (walltime.MIN_SPANS)
        min_batches, max_batches, min_total_s, target_batch_s = 2, 2, 0.0, 0.0

    def one_batch(spans: int) -> list[float]:
        samples = _one_batch(gpu, bound, spans, calls_per_span)
        if len(samples) < 2:  # a timer that does not count up (spans with end <= start are dropped)
            raise GPUError(f"{device.adapter.label()}: only {len(samples)} of {spans} timed spans ended after they began")
        return samples

    settled = settle(one_batch, calls_per_span=calls_per_span, target_batch_s=target_batch_s,
                     min_batches=min_batches, max_batches=max_batches, rel_tol=rel_tol, min_total_s=min_total_s,
                     max_spans=QUERY_SET_MAX // 2)  # fmt: skip
    ordered = settled.samples
    return Timing(
        median_s=statistics.median(ordered), p10_s=ordered[len(ordered) // 10],
        p90_s=ordered[(len(ordered) * 9) // 10], samples=len(ordered), batches=settled.batches, stable=settled.stable,
        calls_per_span=calls_per_span,
    )  # fmt: skip


def _span_for(gpu: Any, bound: list[BoundPass], calls: int, target_batch_s: float) -> int:
    """``calls`` per span, or fewer when that many would outlast a batch's target on their own.

    A batch is at least MIN_SPANS spans, so on a slow adapter the fixed span made every batch take
    MIN_SPANS x calls x one call: lavapipe timed QuickGelu at 16M f32 (83 ms a call) in 21 s
    batches, 284 s for one case. For such a call its launch cost, which the span amortises, is
    nothing; a fast kernel (every case on the H200) keeps ``calls``."""
    probe = _one_batch(gpu, bound, 2, 1)  # the slower span of two: a span sized too long is the risk
    per_call = max(probe, default=0.0)
    if per_call * calls <= target_batch_s:
        return calls
    return max(1, int(target_batch_s / per_call))


def _one_batch(gpu: Any, bound: list[BoundPass], spans: int, calls: int) -> list[float]:
    """``spans`` runs of ``calls`` back-to-back calls, one timed compute pass each, in one encoder
    and one submission: seconds per call of each run (runs whose timestamps do not count up dropped).

    Many passes in one encoder have a lasting side effect: wgpu-native keeps that encoder's
    command buffers for reuse and resets all of them whenever it is reused, so every later submit
    in the process gets slower (lavapipe, scripts/submit_probe.py: 222 -> 420 us per NumPy round
    trip after 4,000 timed passes; H200: 0.8 instead of 0.35 ms). A pass per span keeps the count
    low, and ``bench`` times host round trips before any of this runs.
    """
    query_set = gpu.create_query_set(type=wgpu.QueryType.timestamp, count=2 * spans)
    resolve = gpu.create_buffer(size=16 * spans, usage=wgpu.BufferUsage.QUERY_RESOLVE | wgpu.BufferUsage.COPY_SRC)
    encoder = gpu.create_command_encoder()
    for span in range(spans):
        compute = encoder.begin_compute_pass(timestamp_writes={
            "query_set": query_set, "beginning_of_pass_write_index": 2 * span, "end_of_pass_write_index": 2 * span + 1,
        })  # fmt: skip
        dispatch_calls(compute, bound, calls)
        compute.end()
    encoder.resolve_query_set(query_set, 0, 2 * spans, resolve, 0)
    gpu.queue.submit([encoder.finish()])
    stamps = np.frombuffer(gpu.queue.read_buffer(resolve), dtype=np.uint64)
    query_set.destroy()
    resolve.destroy()
    # Subtract as integers: NVIDIA's stamps are ns since the epoch (~1.7e18), where float64 steps
    # by 256 ns. A span whose end is not after its start saw the counter reset or wrap (WebGPU:
    # ignore such values); it is dropped, never a negative or zero time.
    ticks = stamps[1::2].astype(np.int64) - stamps[0::2].astype(np.int64)
    ns_per_tick = timestamp_period(gpu)
    return [int(t) * ns_per_tick * 1e-9 / calls for t in ticks if t > 0]


def timestamp_period(gpu: Any) -> float:
    """Nanoseconds per timestamp tick of ``gpu``'s queue. wgpu-native resolves raw ticks (WebGPU's
    nanoseconds only with automatic normalization, which wgpu-py does not turn on): 1 on NVIDIA
    and lavapipe, tens of ns on many Intel and AMD GPUs. 1.0 where the library cannot say."""
    try:
        from wgpu.backends.wgpu_native._ffi import lib

        period = float(lib.wgpuQueueGetTimestampPeriod(gpu.queue._internal))
    except (ImportError, AttributeError, TypeError):
        return 1.0
    return period if math.isfinite(period) and period > 0 else 1.0


# --- inputs ------------------------------------------------------------------------------------


#: Standard-normal data of a dtype (never zeros: zero pages read faster on some GPUs), or drawn as
#: a bench.json input's ``generate`` says: case_data.random_values, which the peers use too.
random_array = random_values


# --- kernels and the copy baseline ---------------------------------------------------------------


@dataclass
class BenchResult:
    kernel: str
    case: str
    variant: str
    dtypes: dict[str, str]
    shapes: dict[str, list[int]]
    elements: int  # of the largest input or output
    bytes: int  # moved by one call: the package's count (bench.json's `bytes`), else every tensor once
    median_s: float
    p10_s: float
    p90_s: float
    samples: int
    tbps: float
    batches: int = 0
    stable: bool = True  # two consecutive batch medians agreed (Timing.stable)
    calls_per_span: int = 0  # Timing.calls_per_span
    peak_fraction: float | None = None
    copy_tbps: float | None = None
    copy_fraction: float | None = None
    tunables: dict[str, Any] = field(default_factory=dict)
    max_error: float | None = None  # against the check's reference (see ``check``)
    error_ok: bool | None = None  # every element within the check's tolerance (None: not checked)
    flops: int | None = None  # of one call, when the package's bench.json says (its `flops`)
    tflops: float | None = None
    bytes_counted: str = "tensors"  # "bench.json": ``bytes`` is the package's count
    tensor_bytes: int = 0  # every input read once and every output written once (``bytes`` where counted so)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def bench_kernel(
    kernel: Kernel,
    arrays: Mapping[str, np.ndarray],
    *,
    case: str = "",
    attrs: Mapping[str, Any] | None = None,
    tunables: Mapping[str, Any] | None = None,
    variant: str | None = None,
    adapter: str | None = None,
    check: Callable[[dict[str, np.ndarray]], Agreement | None] | None = None,
    flops: int | None = None,
    nbytes: int | None = None,
    **timing: Any,
) -> BenchResult:
    """Time one kernel call on GPU-resident copies of ``arrays``; bytes = inputs read + outputs
    written, or ``nbytes`` where the package counts them (bench.json's ``bytes``: a kernel that
    reads part of an input); ``flops``, the call's floating-point operations if known, gives TFLOP/s. ``check``
    compares the outputs with a reference (its ``max_error`` and ``ok`` become the result's; None
    from it, as no check, leaves them None)."""
    device, plan = kernel.plan(arrays, attrs=attrs, variant=variant, tunables=tunables, adapter=adapter)
    with translate_gpu_errors(f"benchmarking {plan.label}", device.memory):
        t, out_bytes, agreement = _time_plan(device, plan, arrays, check, timing)
    tensors = sum(a.nbytes for a in arrays.values()) + out_bytes
    total = tensors if nbytes is None else nbytes
    tbps = total / t.median_s / 1e12 if t.median_s > 0 else float("nan")
    peak = known_peak(device.adapter.name)
    dtypes = {name: str(a.dtype) for name, a in arrays.items()}
    return BenchResult(
        kernel=kernel.op_id, case=case, variant=plan.variant, dtypes=dtypes,
        shapes={name: list(a.shape) for name, a in arrays.items()},
        # the largest tensor read or written: a reduction's size is its input's (as tuning's shape class)
        elements=max([a.size for a in arrays.values()] + [math.prod(o.shape) for o in plan.outputs], default=0),
        bytes=total, median_s=t.median_s, p10_s=t.p10_s, p90_s=t.p90_s, samples=t.samples, tbps=tbps,
        batches=t.batches, stable=t.stable, calls_per_span=t.calls_per_span,
        peak_fraction=(tbps * 1e12 / peak) if peak else None, tunables={**kernel.manifest.tunables, **(tunables or {})},
        max_error=None if agreement is None else agreement.max_error, error_ok=None if agreement is None else agreement.ok,
        flops=flops, tflops=flops / t.median_s / 1e12 if flops is not None and t.median_s > 0 else None,
        bytes_counted="tensors" if nbytes is None else "bench.json", tensor_bytes=tensors,
    )  # fmt: skip


def bench_count(kernel: Kernel, key: str, source: str | int, inputs: Mapping[str, Any], *,
                attrs: Mapping[str, Any] | None = None, tunables: Mapping[str, Any] | None = None) -> int:  # fmt: skip
    """bench.json's ``flops`` or ``bytes`` (``key``) for one call: a number, or an expression
    evaluated in the scope the call sees (:meth:`Kernel.evaluate`); it must come out a non-negative
    integer."""
    where = f"bench.json {key}"
    value = kernel.evaluate(source, inputs, attrs=attrs, tunables=tunables, where=where)
    return as_count(value, kernel.program.compiler.compile(source, where), BENCH_COUNTS[key][0])


def _time_plan(device: Device, plan: ExecutionPlan, arrays: Mapping[str, np.ndarray],
               check: Callable[[dict[str, np.ndarray]], Agreement | None] | None, timing: dict[str, Any]) -> tuple[Timing, int, Agreement | None]:  # fmt: skip
    """GPU timing of ``plan`` on fresh device copies of ``arrays``: (timing, output bytes, the check's verdict)."""
    buffers = {name: (upload(device, np.asarray(a, order="C")), padded_size(a.nbytes)) for name, a in arrays.items()}
    out_bytes = 0
    try:
        for out in plan.outputs:
            nbytes = math.prod(out.shape) * np.dtype(out.dtype).itemsize
            out_bytes += nbytes
            buffer = device.gpu.create_buffer(size=padded_size(nbytes), usage=wgpu.BufferUsage.STORAGE | wgpu.BufferUsage.COPY_SRC)
            buffers[out.role] = (buffer, padded_size(nbytes))
        for name, nbytes in plan.scratch:  # the variant's own memory: bound, never read back nor counted
            buffer = device.gpu.create_buffer(size=padded_size(nbytes), usage=wgpu.BufferUsage.STORAGE)
            buffers[name] = (buffer, padded_size(nbytes))
        t = time_calls(device, bind(device, plan, buffers), **timing)
        agreement = None
        if check is not None:
            outputs = {
                out.role: np.frombuffer(device.gpu.queue.read_buffer(buffers[out.role][0]), dtype=out.dtype,
                                        count=math.prod(out.shape)).reshape(out.shape)
                for out in plan.outputs
            }  # fmt: skip
            agreement = check(outputs)
    finally:
        for b, _ in buffers.values():
            device.memory.destroy(b)
    return t, out_bytes, agreement


_COPY_WGSL = """
@group(0) @binding(0) var<storage, read> src: array<vec4<u32>>;
@group(0) @binding(1) var<storage, read_write> dst: array<vec4<u32>>;
struct Params { count: u32 };
@group(0) @binding(2) var<uniform> params: Params;
@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lix: u32) {
  let i = ((wid.z * nwg.y + wid.y) * nwg.x + wid.x) * 256u + lix;
  if (i < params.count) { dst[i] = src[i]; }
}
"""


def _copy_pipeline(device: Device) -> tuple[Any, Any]:
    """The copy kernel's (pipeline, bind group layout), built on the device's first copy and kept,
    as a kernel's pipeline is: every bench case times the copy beside its kernel."""

    def build() -> tuple[Any, Any]:
        gpu = device.gpu
        pipeline = gpu.create_compute_pipeline(
            label="bench copy", layout="auto",
            compute={"module": gpu.create_shader_module(label="bench copy", code=_COPY_WGSL), "entry_point": "main"})
        return pipeline, pipeline.get_bind_group_layout(0)

    return device.internal_pipeline("bench copy", build)


@contextmanager
def _copy_pass(device: Device, nbytes: int, seed: int) -> Iterator[tuple[list[BoundPass], Any]]:
    """A plain 16-byte-per-invocation copy of ``nbytes`` random bytes, bound and ready to dispatch,
    and its destination buffer. One dispatch per chunk the device can bind: a kernel moving more
    than twice maxStorageBufferBindingSize has a copy of half its bytes as its roofline (lavapipe
    binds 128 MiB: a BiasAdd of three 100 MiB tensors had its row refused for the copy's sake)."""
    from .rendering import workgroup_grid

    gpu = device.gpu
    nbytes = max(16, nbytes // 16 * 16)
    # Chunk offsets must be multiples of the offset alignment (256 at most, by the WebGPU spec).
    chunk = device.limits["max-storage-buffer-binding-size"] // 256 * 256
    rng = np.random.default_rng(seed)
    src = upload(device, rng.integers(0, 2**32, size=nbytes // 4, dtype=np.uint32))
    dst = gpu.create_buffer(size=nbytes, usage=wgpu.BufferUsage.STORAGE | wgpu.BufferUsage.COPY_SRC)
    try:
        pipeline, layout = _copy_pipeline(device)
        passes = []
        for offset in range(0, nbytes, chunk):
            size = min(chunk, nbytes - offset)
            count = size // 16
            params = gpu.create_buffer_with_data(data=np.array([count, 0, 0, 0], dtype=np.uint32),
                                                 usage=wgpu.BufferUsage.UNIFORM)  # fmt: skip
            group = gpu.create_bind_group(layout=layout, entries=[
                {"binding": 0, "resource": {"buffer": src, "offset": offset, "size": size}},
                {"binding": 1, "resource": {"buffer": dst, "offset": offset, "size": size}},
                {"binding": 2, "resource": {"buffer": params}},
            ])  # fmt: skip
            grid = workgroup_grid(count, 256, device.limits["max-compute-workgroups-per-dimension"])
            passes.append(BoundPass("copy", pipeline, group, grid))
        yield passes, dst
    finally:
        src.destroy()
        dst.destroy()


def bench_copy(device: Device, nbytes: int, *, seed: int = 0, **timing: Any) -> Timing:
    """The same timing applied to a plain 16-byte-per-invocation copy kernel: the practical roofline."""
    with translate_gpu_errors("benchmarking the copy kernel", device.memory), _copy_pass(device, nbytes, seed) as copy:
        return time_calls(device, copy[0], **timing)


#: Bytes the warm-up copies per call: large enough to load every memory channel, small enough for
#: any adapter's storage binding (lavapipe allows 128 MiB).
WARM_UP_MAX_CALLS = 1024  # H200: about 33 ms per submission


def warm_up(device: Device, seconds: float, *, nbytes: int = WARM_UP_BYTES) -> int:
    """Keep the GPU busy with back-to-back copies for about ``seconds`` of wall time; returns the
    number of copies.

    A guard against timing on clocks that are still ramping up: run J's first case (3,200
    elements, the first kernel ``bench`` timed after the host phase) read 5.0 us per call, 42% of
    the copy kernel timed right after it, where the same kernel reads 2.1 us in later runs. The
    per-case batches stop once two medians agree, which a slow but steady clock also satisfies.
    Four fresh processes on one lend did not reproduce it with or without this load
    (docs/perf/h200-warmup.log), so it is rare; two seconds per run are cheap insurance.
    """
    if seconds <= 0 or "timestamp-query" not in device.info.features:
        return 0  # without timestamps nothing can be timed (time_calls says so); the waits below use them
    nbytes = min(nbytes, device.limits["max-storage-buffer-binding-size"])
    with translate_gpu_errors("warming up the GPU", device.memory), _copy_pass(device, nbytes, 0) as copy:
        # Timed from after the buffers are made (a short warm-up had run no copy at all); one pass
        # per submission (few passes: see _one_batch), which returns once the GPU is done.
        return sustain(lambda calls: _one_batch(device.gpu, copy[0], 1, calls), seconds, max_calls=WARM_UP_MAX_CALLS,
                       clock=time.perf_counter)  # fmt: skip


# --- host-side costs -----------------------------------------------------------------------------


def host_per_call(kernel: Kernel, arrays: Mapping[str, np.ndarray], *, calls: int = 10_000,
                  attrs: Mapping[str, Any] | None = None) -> dict[str, float]:  # fmt: skip
    """Host time per call on GPU-resident inputs and outputs with a cached plan (wall clock).

    Each call records its dispatch; outputs are released at once (their buffers return to the
    pool), as a chain of layers would. The recorded work is submitted as it accumulates.
    """
    from .api import synchronize, to_gpu

    inputs = {name: to_gpu(a) for name, a in arrays.items()}
    kernel(inputs, attrs=attrs, output="gpu")  # build the plan and the pipeline
    samples = np.empty(calls)
    clock = time.perf_counter
    for i in range(calls):
        start = clock()
        outputs = kernel(inputs, attrs=attrs, output="gpu")
        samples[i] = clock() - start
        for tensor in cast(dict[str, GpuTensor], outputs).values():  # output="gpu" gives GpuTensors
            tensor.release()
    synchronize()
    for tensor in inputs.values():
        tensor.release()
    return {"median_s": float(np.median(samples)), "p90_s": float(np.percentile(samples, 90)), "calls": calls}


def numpy_round_trip(kernel: Kernel, arrays: Mapping[str, np.ndarray], *, attrs: Mapping[str, Any] | None = None,
                     variant: str | None = None, tunables: Mapping[str, Any] | None = None,
                     min_s: float = 0.15) -> float:  # fmt: skip
    """Wall time per NumPy-in, NumPy-out call (upload, dispatch, readback), back to back, timed
    exactly as the peers' ``session.run`` and transfers are (walltime.back_to_back)."""
    return back_to_back(lambda: kernel(arrays, attrs=attrs, variant=variant, tunables=tunables), lambda: None,
                        min_s=min_s, batches=3)  # fmt: skip
