"""Benchmark building blocks (benchmark.py, walltime.py): bench.json case expansion, random inputs,
GPU timing of real kernels and of the copy baseline, host-side costs, datasheet peaks.

Timings run on lavapipe, so only their sanity is checked (positive, finite, ordered, consistent
with the byte counts); the timing loops are shortened with ``FAST`` to keep the file quick.
"""

from __future__ import annotations

import json
import math
import re
import time

import numpy as np
import pytest

import webgpu_kernels as wk
from webgpu_kernels import benchmark, walltime
from webgpu_kernels.benchmark import (
    KNOWN_PEAKS,
    BenchResult,
    Timing,
    bench_copy,
    bench_count,
    bench_kernel,
    host_per_call,
    known_peak,
    numpy_round_trip,
    random_array,
    warm_up,
)  # fmt: skip
from webgpu_kernels.comparison import Agreement, Tolerance, check_against

import references as ref
from conftest import DTYPE_IDS, DTYPES

# Short timing loops: enough batches to exercise the loop, far from the defaults' 0.3 s minimum.
FAST = {"target_batch_s": 0.005, "min_batches": 2, "max_batches": 4, "min_total_s": 0.0}


def _against(expected: dict[str, np.ndarray]):
    """bench's check (cli_bench._checker) against ``expected``, at float32's tolerance."""
    return lambda outputs: check_against(outputs, expected, Tolerance.of(["float32"]))
EMBEDDED = ("com.microsoft.BiasAdd", "com.microsoft.QuickGelu")


def assert_timing(t):
    """A Timing (or BenchResult) whose figures are positive, finite and ordered."""
    assert 0 < t.p10_s <= t.median_s <= t.p90_s and math.isfinite(t.p90_s)
    assert t.samples > 0


# --- random_array -------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", ["float32", "float16", "float64"])
@pytest.mark.parametrize("shape", [(4096,), (2, 5, 320), (3, 1, 7)], ids=str)
def test_random_array(shape, dtype):
    """Random inputs have the requested shape and dtype, are finite, not zero, and seed-reproducible."""
    a = random_array(shape, dtype, np.random.default_rng(1))
    assert isinstance(a, np.ndarray) and a.shape == shape and a.dtype == np.dtype(dtype)
    assert np.all(np.isfinite(a))
    assert np.count_nonzero(a) > a.size // 2  # standard normal data, not a zero page
    if a.size >= 32:
        assert 0.5 < float(np.std(a.astype(np.float64))) < 2.0
    np.testing.assert_array_equal(a, random_array(shape, dtype, np.random.default_rng(1)))
    assert not np.array_equal(a, random_array(shape, dtype, np.random.default_rng(2)))


def test_random_array_empty_and_scalar():
    """Zero-size and rank-0 shapes are honoured."""
    rng = np.random.default_rng(0)
    assert random_array((0, 3), "float32", rng).shape == (0, 3)
    s = random_array((), "float16", rng)
    assert s.shape == () and s.dtype == np.float16


# --- bench_kernel -------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_bench_kernel_quick_gelu(quick_gelu, need_dtype, dtype):
    """QuickGelu: bytes = input read + output written, tbps = bytes / median, the check callback
    sees the real outputs and its max error (vs float64) is what the result reports."""
    need_dtype(dtype)
    x = random_array((4096,), np.dtype(dtype).name, np.random.default_rng(3))
    expected = x.astype(np.float64) / (1.0 + np.exp(-1.702 * x.astype(np.float64)))
    seen = {}

    def check(outputs):
        seen.update(outputs)
        return Agreement(float(np.max(np.abs(outputs["Y"].astype(np.float64) - expected))), True)

    r = bench_kernel(quick_gelu, {"X": x}, case="tiny", check=check, **FAST)
    assert isinstance(r, BenchResult)
    assert (r.kernel, r.case, r.variant) == ("com.microsoft.QuickGelu", "tiny", "vec4")
    assert r.dtypes == {"X": np.dtype(dtype).name} and r.shapes == {"X": [4096]} and r.elements == 4096
    assert r.bytes == x.nbytes + 4096 * np.dtype(dtype).itemsize == 2 * 4096 * np.dtype(dtype).itemsize
    assert_timing(r)
    assert r.tbps == pytest.approx(r.bytes / r.median_s / 1e12, rel=1e-9)
    assert set(seen) == {"Y"} and seen["Y"].shape == (4096,) and seen["Y"].dtype == np.dtype(dtype)
    ref.assert_matches(seen["Y"], ref.quick_gelu(x), dtype, **ref.quick_gelu_tolerance(dtype))
    assert r.max_error == float(np.max(np.abs(seen["Y"].astype(np.float64) - expected)))
    assert r.max_error < (1e-5 if dtype == np.float32 else 1e-2) and r.error_ok is True
    peak = known_peak(wk.get_device().adapter.name)
    assert r.peak_fraction == (pytest.approx(r.tbps * 1e12 / peak) if peak else None)
    assert r.copy_tbps is None and r.tunables == {"WORKGROUP_SIZE": 256}  # the effective tunables
    d = r.as_dict()
    assert d["bytes"] == r.bytes and d["max_error"] == r.max_error
    json.dumps(d)  # the CLI writes it as JSON


def test_bench_kernel_leaves_no_bind_group_over_its_destroyed_buffers(quick_gelu):
    """bench's timing makes its own buffers and destroys them; the bind groups over them had stayed in
    the device's cache (up to 1,024 of them) until newer ones pushed them out."""
    memory = wk.get_device().memory
    before = set(memory._bind_groups)
    bench_kernel(quick_gelu, {"X": random_array((4096,), "float32", np.random.default_rng(0))}, **FAST)
    assert not set(memory._bind_groups) - before, "the timing's bind groups, over its destroyed buffers, stayed cached"

@pytest.mark.parametrize("shape", [(3,), (5, 77, 13), (1, 77, 3071)])
def test_bench_kernel_on_sizes_that_are_not_whole_16_byte_units(quick_gelu, shape):
    """Inputs are bound as their bytes rounded up to 16 (docs/format.md); bench's own uploads were
    not, so an f32 tensor of 20,020 bytes failed ("Binding with size 20032 would overflow ... 20020")."""
    x = random_array(shape, "float32", np.random.default_rng(5))
    expected = x.astype(np.float64) / (1.0 + np.exp(-1.702 * x.astype(np.float64)))
    r = bench_kernel(quick_gelu, {"X": x}, check=_against({"Y": expected}), **FAST)
    assert r.variant == "vec4_tail" and r.median_s > 0 and r.max_error < 1e-5 and r.error_ok is True


def test_bench_kernel_bias_add_forced_variant(bias_add):
    """BiasAdd with a forced variant and tunables: three inputs read, one output written, the
    variant and tunables reported, the output checked against a float64 reference."""
    rng = np.random.default_rng(4)
    arrays = {"X": random_array((2, 5, 320), "float32", rng), "bias": random_array((320,), "float32", rng),
              "skip": random_array((2, 5, 320), "float32", rng)}  # fmt: skip
    expected = ref.bias_add(arrays["X"], arrays["bias"], arrays["skip"])
    r = bench_kernel(bias_add, arrays, case="ort", variant="scalar", tunables={"WORKGROUP_SIZE": 64},
                     check=_against({"Y": expected}), **FAST)  # fmt: skip
    in_bytes = (3200 + 320 + 3200) * 4
    assert r.bytes == in_bytes + 3200 * 4 == sum(a.nbytes for a in arrays.values()) + 3200 * 4
    assert r.variant == "scalar" and r.tunables == {"WORKGROUP_SIZE": 64} and r.elements == 3200
    assert r.shapes == {"X": [2, 5, 320], "bias": [320], "skip": [2, 5, 320]}
    assert_timing(r)
    assert r.tbps == pytest.approx(r.bytes / r.median_s / 1e12, rel=1e-9)
    assert r.max_error is not None and r.max_error <= 1e-5 and r.error_ok is True


def test_bench_kernel_reduction_counts_its_input():
    """A reduction's size is its input's (the largest tensor it touches), not its output's."""
    from conftest import PACKAGES_DIR

    kernel = wk.load_kernel(PACKAGES_DIR / "demo.ReduceSum")
    x = random_array((8, 512), "float32", np.random.default_rng(5))
    r = bench_kernel(kernel, {"X": x}, case="rows", **FAST)
    assert r.variant == "workgroup" and r.elements == 8 * 512
    assert r.bytes == x.nbytes + 8 * 4



def test_bench_kernel_counts_the_bytes_it_is_given(quick_gelu):
    """A package's own byte count (bench.json's ``bytes``) replaces the tensors' for TB/s and % peak;
    the row says which count it used."""
    x = random_array((4096,), "float32", np.random.default_rng(6))
    counted = bench_kernel(quick_gelu, {"X": x}, nbytes=1000, **FAST)
    assert counted.bytes == 1000 and counted.bytes_counted == "bench.json"
    assert counted.tbps == pytest.approx(1000 / counted.median_s / 1e12, rel=1e-9)
    peak = known_peak(wk.get_device().adapter.name)
    assert counted.peak_fraction == (pytest.approx(counted.tbps * 1e12 / peak) if peak else None)
    assert counted.as_dict()["bytes_counted"] == "bench.json"
    tensors = bench_kernel(quick_gelu, {"X": x}, **FAST)
    assert tensors.bytes == 2 * x.nbytes and tensors.bytes_counted == "tensors"


def test_byte_count_evaluates_in_the_calls_scope(quick_gelu):
    x = random_array((4096,), "float16", np.random.default_rng(6))
    assert bench_count(quick_gelu, "bytes", "2 * numel(shapes.X) * itemSize(dtypes.T)", {"X": x}) == 2 * 4096 * 2
    assert bench_count(quick_gelu, "bytes", 512, {"X": x}) == 512
    for bad, fragment in (("-1", "a byte count must be a non-negative integer, got -1"),
                          ("numel(shapes.X) / 3", "a byte count must be a non-negative integer"),
                          ("numl(shapes.X)", "numl")):  # fmt: skip
        with pytest.raises(wk.ExpressionError, match=re.escape(fragment)) as info:
            bench_count(quick_gelu, "bytes", bad, {"X": x})
        assert "bench.json bytes" in str(info.value)


def test_bench_kernel_check_sees_wrong_reference(quick_gelu):
    """max_error and error_ok are the callback's verdict, so a wrong reference is reported as a
    large error, and WRONG."""
    x = random_array((1024,), "float32", np.random.default_rng(5))
    r = bench_kernel(quick_gelu, {"X": x}, check=_against({"Y": x.astype(np.float64)}), **FAST)
    assert r.max_error > 0.1 and r.error_ok is False  # QuickGelu(x) differs from x by far more than rounding
    r = bench_kernel(quick_gelu, {"X": x}, **FAST)
    assert r.max_error is None and r.error_ok is None


def test_a_gpu_error_while_benchmarking_is_the_librarys_error(quick_gelu, device, monkeypatch):
    """A WebGPU error during timing reaches the caller as a DeviceError (bench reports it per case
    instead of crashing), and every buffer the benchmark made is destroyed."""
    import wgpu
    from wgpu.backends.wgpu_native import GPUBuffer


    made, destroyed = [], []
    real_create, real_destroy = type(device.gpu).create_buffer, GPUBuffer.destroy

    def failing_timing(device_, bound, **kwargs):
        raise wgpu.GPUValidationError("timestamp queries refused")

    x = np.ones(4096, dtype=np.float32)
    bench_kernel(quick_gelu, {"X": x}, **FAST)  # the plan (and its uniform buffer) exists from here on
    # Work an earlier test recorded and left unsubmitted (test_concurrency's read racing a release)
    # keeps a compute pass open, and a buffer destroyed meanwhile is destroyed at the next flush
    # instead (DeviceMemory._destroy): submitted first, it is destroyed when the benchmark gives it up.
    device.memory.flush()

    monkeypatch.setattr(type(device.gpu), "create_buffer", lambda self, **kw: made.append(real_create(self, **kw)) or made[-1])
    monkeypatch.setattr(GPUBuffer, "destroy", lambda self: destroyed.append(self) or real_destroy(self))
    monkeypatch.setattr(benchmark, "time_calls", failing_timing)
    with pytest.raises(wk.errors.DeviceError, match=r"benchmarking variant 'vec4'\): timestamp queries refused"):
        bench_kernel(quick_gelu, {"X": x})
    assert len(made) == 2 and all(any(b is d for d in destroyed) for b in made)  # X and Y
    with pytest.raises(wk.errors.DeviceError, match=r"benchmarking the copy kernel\): timestamp queries refused"):
        bench_copy(device, 4096)
    monkeypatch.undo()
    assert bench_kernel(quick_gelu, {"X": x}, **FAST).median_s > 0


def test_time_per_call_is_a_span_over_its_calls(device):
    """A span's time is divided by its calls: spans of 1 and of 32 calls of the same kernel agree
    within the adapters' spread (an undivided span would be ~32x apart), and 256x the bytes cost
    more per call (on the H200 both sizes sit in L2, so only "more" holds everywhere)."""
    one = bench_copy(device, 1 << 20, calls_per_span=1, **FAST)
    many = bench_copy(device, 1 << 20, calls_per_span=32, **{**FAST, "target_batch_s": 1.0})  # spans of 32 kept
    assert (one.calls_per_span, many.calls_per_span) == (1, 32)
    assert 0.25 < one.median_s / many.median_s < 4
    small, large = bench_copy(device, 1 << 14, **FAST), bench_copy(device, 1 << 22, **FAST)
    assert large.median_s > small.median_s


def test_warm_up_keeps_the_gpu_busy_for_its_seconds(device, monkeypatch):
    """Back-to-back copies, one pass per submission, calls doubling from 1 (fewer where the time
    left holds fewer: test_timing_claims), until ``seconds`` of wall time have passed; ``seconds`` 0
    submits nothing."""
    submitted = []
    real_one_batch = benchmark._one_batch
    monkeypatch.setattr(benchmark, "_one_batch",
                        lambda gpu, bound, spans, calls: submitted.append((spans, calls)) or real_one_batch(gpu, bound, spans, calls))  # fmt: skip
    start = time.perf_counter()
    copies = warm_up(device, 0.3, nbytes=1 << 20)
    assert time.perf_counter() - start >= 0.3
    assert copies == sum(calls for _, calls in submitted) > 0
    assert all(spans == 1 for spans, _ in submitted)
    calls = [calls for _, calls in submitted]
    assert calls[0] == 1 and all(1 <= c <= min(2 * p, benchmark.WARM_UP_MAX_CALLS) for p, c in zip(calls, calls[1:]))
    submitted.clear()
    assert warm_up(device, 0) == 0 and submitted == []


def test_warm_up_fits_the_adapters_storage_binding(device, monkeypatch):
    """The default 64 MiB is cut to the adapter's storage binding limit, never refused."""
    monkeypatch.setitem(device.limits, "max-storage-buffer-binding-size", 1 << 16)
    sizes = []
    real_copy_pass = benchmark._copy_pass
    monkeypatch.setattr(benchmark, "_copy_pass", lambda dev, nbytes, seed: sizes.append(nbytes) or real_copy_pass(dev, nbytes, seed))
    assert warm_up(device, 0.01) > 0 and sizes == [1 << 16]


# --- bench_copy -----------------------------------------------------------------------------------


def test_the_copy_is_chunked_to_what_the_device_binds(device, monkeypatch):
    """A copy past maxStorageBufferBindingSize is one dispatch per bindable chunk, every byte copied
    (lavapipe binds 128 MiB: bench's row for a kernel moving 300 MiB was refused for its copy)."""
    monkeypatch.setitem(device.limits, "max-storage-buffer-binding-size", 4096 + 100)  # chunks of 4096
    nbytes = 3 * 4096 + 48
    with benchmark._copy_pass(device, nbytes, seed=7) as (passes, dst):
        assert len(passes) == 4
        encoder = device.gpu.create_command_encoder()
        compute = encoder.begin_compute_pass()
        benchmark.dispatch_calls(compute, passes, 1)
        compute.end()
        device.gpu.queue.submit([encoder.finish()])
        got = np.frombuffer(device.gpu.queue.read_buffer(dst), dtype=np.uint32)
    want = np.random.default_rng(7).integers(0, 2**32, size=nbytes // 4, dtype=np.uint32)
    np.testing.assert_array_equal(got, want)
    assert_timing(bench_copy(device, nbytes, **FAST))


def test_the_copy_pipeline_is_built_once_per_device(device, monkeypatch):
    """Every bench case times the copy beside its kernel: its pipeline is built on the device's
    first copy and reused, as a kernel's is, not compiled again per case."""
    built = []
    real = device.gpu.create_compute_pipeline
    monkeypatch.setattr(device.gpu, "create_compute_pipeline", lambda **kw: built.append(kw) or real(**kw))
    for nbytes in (4096, 65536, 4096):
        with benchmark._copy_pass(device, nbytes, seed=1) as (passes, _):
            assert {p.pipeline for p in passes} == {device.internal_pipelines["bench copy"][0]}
    assert len(built) <= 1  # 0 when an earlier test on this device built it


@pytest.mark.parametrize("nbytes", [10, 32768, 100_000])
def test_bench_copy(device, nbytes):
    """The copy baseline times like a kernel, for any size (rounded to whole 16-byte vectors)."""
    t = bench_copy(device, nbytes, **FAST)
    assert isinstance(t, Timing)
    assert_timing(t)
    assert 1 <= t.batches <= FAST["max_batches"]


# --- host-side costs ------------------------------------------------------------------------------


def test_host_per_call(quick_gelu):
    """Host cost per call on GPU-resident data: median, p90, number of calls."""
    x = random_array((4096,), "float32", np.random.default_rng(6))
    stats = host_per_call(quick_gelu, {"X": x}, calls=200)
    assert set(stats) == {"median_s", "p90_s", "calls"} and stats["calls"] == 200
    assert 0 < stats["median_s"] <= stats["p90_s"] < 1.0


def test_host_per_call_bias_add(bias_add):
    """Per-call host cost of a three-input kernel with attrs=None."""
    rng = np.random.default_rng(7)
    arrays = {"X": random_array((2, 5, 320), "float32", rng), "bias": random_array((320,), "float32", rng),
              "skip": random_array((2, 5, 320), "float32", rng)}  # fmt: skip
    stats = host_per_call(bias_add, arrays, calls=50)
    assert stats["calls"] == 50 and 0 < stats["median_s"] <= stats["p90_s"] < 1.0


def test_numpy_round_trip(quick_gelu):
    """Wall time of a NumPy-in, NumPy-out call: positive, finite, under a second for 4096 floats."""
    x = random_array((4096,), "float32", np.random.default_rng(8))
    s = numpy_round_trip(quick_gelu, {"X": x}, min_s=0.03)
    assert 0 < s < 1.0 and math.isfinite(s)


def test_numpy_round_trip_passes_attrs(quick_gelu, monkeypatch):
    """attrs reach the timed calls (alpha=0 would make every call return x / 2)."""
    seen = []
    real_call = type(quick_gelu).__call__

    def spy(self, inputs, **kwargs):
        seen.append(kwargs.get("attrs"))
        return real_call(self, inputs, **kwargs)

    monkeypatch.setattr(type(quick_gelu), "__call__", spy)
    x = random_array((64,), "float32", np.random.default_rng(9))
    assert numpy_round_trip(quick_gelu, {"X": x}, attrs={"alpha": 0.0}, min_s=0.01) > 0
    assert seen and all(a == {"alpha": 0.0} for a in seen)


# --- known_peak ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "peak"),
    [
        ("NVIDIA H200", 4.8e12),
        ("NVIDIA H100 PCIe", 2.0e12),
        ("NVIDIA H100 80GB HBM3", 3.35e12),
        ("nvidia a100-sxm4-40gb", 2.0e12),
        ("NVIDIA L40S", 864e9),
        ("NVIDIA GeForce RTX 4090", 1008e9),
        ("Tesla T4", 320e9),
        ("NVIDIA L40", None),  # not the L4's 300 GB/s: models match as whole words
        ("NVIDIA L4", 300e9),
        ("llvmpipe (LLVM 15.0.6, 256 bits)", None),
        ("AMD Radeon Pro W7900", None),
        ("", None),
    ],
)
def test_known_peak(name, peak):
    """Datasheet peaks by model name (a whole word of the adapter name, any case); unknown adapters give None."""
    assert known_peak(name) == peak


def test_known_peaks_table():
    """Every listed peak is a plausible bandwidth in bytes/s and finds itself."""
    for key, value in KNOWN_PEAKS.items():
        assert 1e11 < value < 1e13
        assert known_peak(f"NVIDIA {key}") == value


# --- walltime.back_to_back ----------------------------------------------------------------------


def test_back_to_back_sleep():
    """A 2 ms function measures about 2 ms per call, and every batch ends with a sync."""
    syncs = []
    calls = []

    def fn():
        calls.append(1)
        time.sleep(0.002)

    per_call = walltime.back_to_back(fn, lambda: syncs.append(1), min_s=0.06, batches=3)
    # at least the sleep; under a batch's 0.06 s, which an undivided batch would reach (a load only
    # lengthens sleeps: 20 ms had been the bound; the division itself is test_back_to_back_sync_cost's)
    assert 1.5e-3 <= per_call < 0.06
    assert len(syncs) == 2 + 2 * 3  # warm-up, calibration, then before and after each batch
    assert len(calls) >= 1 + 2 + 3 * 2  # warm-up, at least 2 calibration calls, at least 2 per batch


class FakeClock:
    """Stands in for walltime's ``time`` module: time only moves when fn or sync says so."""

    def __init__(self):
        self.now = 100.0

    def perf_counter(self):
        return self.now


@pytest.mark.parametrize("batches", [1, 5])
def test_back_to_back_sync_cost(monkeypatch, batches):
    """With a deterministic clock: fn costs 2 ms, sync 10 ms. Subtracting sync_cost = 10 ms gives
    exactly 2 ms per call; without it the sync's share of each batch is counted."""
    clock = FakeClock()
    monkeypatch.setattr(walltime, "time", clock)
    counts = {"fn": 0, "sync": 0}

    def fn():
        counts["fn"] += 1
        clock.now += 0.002

    def sync():
        counts["sync"] += 1
        clock.now += 0.010

    with_cost = walltime.back_to_back(fn, sync, min_s=0.3, batches=batches, sync_cost=0.010)
    assert with_cost == pytest.approx(0.002, rel=1e-6)
    assert counts["sync"] == 2 + 2 * batches
    counts["sync"] = 0
    without = walltime.back_to_back(fn, sync, min_s=0.3, batches=batches)
    assert counts["sync"] == 2 + 2 * batches
    # Calibration: 25 calls (the 50 ms warm-up loop) + one sync -> 2.4 ms per call, so each batch
    # has about 0.3 / batches / 0.0024 calls (give or take one: float rounding) and one 10 ms sync.
    reps = 0.3 / batches / 0.0024
    assert without == pytest.approx(0.002 + 0.010 / reps, rel=0.01)
    assert without - with_cost > 0.5 * 0.010 / reps


# --- timestamps: units, precision, counters that reset ------------------------------------------


class FakeGPU:
    """Just what _one_batch touches; ``read_buffer`` returns the given timestamps (2 per span)."""

    def __init__(self, stamps):
        self.stamps = np.asarray(stamps, dtype=np.uint64)
        done = type("Done", (), {"destroy": lambda self: None, "end": lambda self: None})
        self.queue = type("Queue", (), {"submit": lambda q, buffers: None,
                                        "read_buffer": lambda q, buffer: self.stamps.tobytes()})()  # fmt: skip
        self._done = done

    def create_query_set(self, **_):
        return self._done()

    def create_buffer(self, **_):
        return self._done()

    def create_command_encoder(self):
        gpu = self
        return type("Encoder", (), {"begin_compute_pass": lambda e, **_: gpu._done(),
                                    "resolve_query_set": lambda e, *a: None, "finish": lambda e: None})()  # fmt: skip


def fake_device(stamps, features=frozenset({"timestamp-query"})):
    from types import SimpleNamespace

    return SimpleNamespace(gpu=FakeGPU(stamps), info=SimpleNamespace(features=features),
                           adapter=SimpleNamespace(label=lambda: "fake adapter"))  # fmt: skip


def test_ticks_are_converted_to_ns_by_the_queues_timestamp_period(monkeypatch, device):
    """wgpu-native resolves raw ticks; the queue's period (ns per tick) is 1 on NVIDIA and lavapipe
    but tens of ns on many Intel and AMD GPUs, whose times (and TB/s) were off by that factor."""
    period = benchmark.timestamp_period(device.gpu)
    assert math.isfinite(period) and period > 0  # the real queue answers (1.0 on lavapipe)
    monkeypatch.setattr(benchmark, "timestamp_period", lambda gpu: 52.0)
    assert benchmark._one_batch(FakeGPU([1000, 3000]), [], 1, 50) == pytest.approx([2000 * 52.0 * 1e-9 / 50])


def test_timestamps_are_subtracted_as_integers():
    """NVIDIA's timestamps are ns since the epoch (~1.7e18), where float64 steps by 256 ns: a span
    of 109,877 ns read 110,080 (each stamp rounded before the subtraction)."""
    start = 1_700_000_000_000_000_123
    (per_call,) = benchmark._one_batch(FakeGPU([start, start + 109_877]), [], 1, 50)
    assert per_call == pytest.approx(109_877e-9 / 50, rel=1e-12)


def test_a_span_whose_counter_reset_or_wrapped_is_dropped():
    """A span that ends before it begins (the counter reset, or wrapped at fewer than 64 valid bits)
    gave a negative time per call, which pulled the median and p10 down; WebGPU says to ignore it."""
    stamps = [100, 5100, 2**36 - 10, 4990, 9000, 14000]  # the middle span wrapped at 36 bits
    assert benchmark._one_batch(FakeGPU(stamps), [], 3, 50) == pytest.approx([5000e-9 / 50, 5000e-9 / 50])


@pytest.mark.parametrize("per_call_s, span", [(0.083, 1), (0.004, 12), (2e-6, 50)])
def test_a_call_slower_than_a_batch_is_timed_in_shorter_spans(monkeypatch, per_call_s, span):
    """A batch is at least MIN_SPANS spans of CALLS_PER_SPAN calls: lavapipe's 83 ms QuickGelu at
    16M f32 took 21 s a batch and 284 s a case. A call that long gets spans of fewer calls (a
    simulated adapter here: every span lasts its calls x per_call_s); a fast one keeps 50."""
    spans_run = []

    def one_batch(gpu, bound, spans, calls):
        spans_run.append((spans, calls))
        return [per_call_s] * spans

    monkeypatch.setattr(benchmark, "_one_batch", one_batch)
    timing = benchmark.time_calls(fake_device([]), [])
    assert timing.calls_per_span == span and timing.median_s == per_call_s and timing.stable
    gpu_s = sum(spans * calls for spans, calls in spans_run) * per_call_s
    assert gpu_s < max(2.0, 12 * benchmark.MIN_TOTAL_S), spans_run  # it had been 62 s at 83 ms a call


def test_a_timer_that_does_not_count_up_is_an_error_not_a_zero_time():
    """Spans of equal stamps gave a median of 0 s (and a NaN TB/s) as if it were a measurement."""
    with pytest.raises(wk.errors.GPUError, match="timed spans ended after they began"):
        benchmark.time_calls(fake_device([7] * 10), [], **FAST)


def test_no_timestamp_feature_is_the_librarys_error():
    """A RuntimeError went through bench's per-case handling and ended the command with a traceback."""
    with pytest.raises(wk.errors.GPUError, match="no timestamp-query feature"):
        benchmark.time_calls(fake_device([], features=frozenset()), [], **FAST)


def test_a_timing_that_never_settled_says_so(device, quick_gelu):
    """When max_batches runs out before two batch medians agree, the figure is still given, marked
    unstable (before, nothing told it from one that converged)."""
    t = bench_copy(device, 1 << 14, **{**FAST, "rel_tol": -1.0})
    assert t.stable is False and t.batches == FAST["max_batches"]
    assert bench_copy(device, 1 << 14, **{**FAST, "rel_tol": 10.0}).stable is True
    x = random_array((1024,), "float32", np.random.default_rng(5))
    r = bench_kernel(quick_gelu, {"X": x}, **{**FAST, "rel_tol": -1.0})
    assert r.stable is False and r.batches == FAST["max_batches"] and r.as_dict()["stable"] is False
