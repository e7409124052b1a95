"""docs/performance.md, "How the timing works": each test pins one claim of that section (quoted
in its docstring) that tests/test_benchmark.py, test_cli_bench.py and test_peers.py leave open.

The batch rule is driven with given per-call times (what the timing code computes from them is
asserted, never how fast anything ran); the warm-up runs its real copies on the GPU under a clock
that only the copies move.
"""

from __future__ import annotations

import json
import statistics

import pytest
from click.testing import CliRunner

from webgpu_kernels import benchmark, cli_bench, peers, slow_states, walltime
from webgpu_kernels.cli import main
from webgpu_kernels.package import embedded_root

QG_DIR = str(embedded_root() / "com.microsoft.QuickGelu")


class Batches:
    """``one_batch`` for walltime.settle: batch i's spans all read ``per_call[i]`` seconds per call,
    except the first span of each batch, which reads ``first`` (a clock still ramping up)."""

    def __init__(self, per_call: list[float], first: float | None = None):
        self.per_call, self.first, self.spans_asked = per_call, first, []

    def __call__(self, spans: int) -> list[float]:
        value = self.per_call[min(len(self.spans_asked), len(self.per_call) - 1)]
        self.spans_asked.append(spans)
        return [value if self.first is None else self.first] + [value] * (spans - 1)


# --- Sustained load --------------------------------------------------------------------------------


def test_a_batch_is_about_50_ms_of_gpu_time_and_at_least_5_spans():
    """"A measurement batch records hundreds of calls into one submission (about 50 ms of GPU
    time, at least 5 spans)." """
    fast = Batches([2e-6])  # spans of 50 calls of 2 µs: 100 µs a span
    walltime.settle(fast, calls_per_span=50)
    assert fast.spans_asked[0] == walltime.MIN_SPANS == 5  # nothing known yet: the least
    assert all(s == 500 for s in fast.spans_asked[1:])  # 500 x 50 x 2 µs = 50 ms
    slow = Batches([0.02])  # one span alone outlasts 50 ms: still 5
    walltime.settle(slow, calls_per_span=1)
    assert set(slow.spans_asked) == {5}
    assert walltime.TARGET_BATCH_S == 0.05


def test_batches_repeat_until_two_medians_agree_within_2_percent_after_03_s():
    """"Batches repeat until two consecutive batch medians agree within 2% and at least 0.3 s of
    GPU time has run"."""
    # 10 µs, then 5% off, then within 2%: the third batch settles (0.05 s each, 0.3 s not yet run)
    moving = Batches([10e-6, 10.5e-6, 10.6e-6, 10.6e-6, 10.6e-6, 10.6e-6, 10.6e-6, 10.6e-6])
    settled = walltime.settle(moving, calls_per_span=50)
    assert settled.stable
    gpu_s = [spans * 50 * t for spans, t in zip(moving.spans_asked, moving.per_call)]
    assert sum(gpu_s) >= walltime.MIN_TOTAL_S == 0.3 and sum(gpu_s[:-1]) < 0.3  # stopped at 0.3 s, not before
    assert walltime.REL_TOL == 0.02
    # 2.5% apart every time: never within 2%
    apart = Batches([10e-6 * 1.025**i for i in range(50)])
    assert not walltime.settle(apart, calls_per_span=50).stable


def test_two_medians_are_compared_whatever_min_batches_says():
    """"until two consecutive batch medians agree": a caller's min_batches of 1 (bench_kernel passes
    it through) had compared the first batch's median with a second that did not exist (IndexError)."""
    steady = Batches([1e-3])
    settled = walltime.settle(steady, calls_per_span=50, min_batches=1, min_total_s=0.0)
    assert settled.stable and settled.batches == 2 and len(steady.spans_asked) == 2


def test_the_first_span_is_dropped_and_the_figure_is_the_median_of_the_two_batches_that_agreed():
    """"the first span of each batch is dropped (clock ramp-up). The figure is the median over the
    two batches that agreed." """
    ramping = Batches([10e-6, 20e-6, 20.1e-6], first=1.0)  # a first span 100,000x slower
    settled = walltime.settle(ramping, calls_per_span=50, min_total_s=0.0)
    assert settled.batches == 3 and 1.0 not in settled.samples
    last_two = [20e-6] * (ramping.spans_asked[1] - 1) + [20.1e-6] * (ramping.spans_asked[2] - 1)
    assert settled.samples == sorted(last_two)
    assert statistics.median(settled.samples) == statistics.median(last_two)


def test_forty_batches_that_never_agree_are_reported_unstable():
    """"A timing whose 40 batches ran out before two medians agreed is reported all the same,
    marked "unstable" ... `"stable": false` (with `"batches"`)"."""
    apart = Batches([10e-6 * 1.05**i for i in range(60)])
    settled = walltime.settle(apart, calls_per_span=50)
    assert (settled.stable, settled.batches) == (False, walltime.MAX_BATCHES) and walltime.MAX_BATCHES == 40
    assert settled.samples  # the figure is given all the same


# --- Warm-up -----------------------------------------------------------------------------------


class CopyClock:
    """benchmark's ``time``: it moves only when a copy runs, ``per_copy`` seconds each."""

    def __init__(self, per_copy: float):
        self.now, self.per_copy = 0.0, per_copy

    def perf_counter(self) -> float:
        return self.now


@pytest.mark.parametrize("per_copy", [0.015, 0.0003])
def test_the_warm_up_stops_near_its_seconds_on_a_slow_adapter(device, monkeypatch, per_copy):
    """"keep the GPU busy with back-to-back 64 MiB copies for 2 s": submissions doubling from one
    copy had run 3.0 s on lavapipe (15 ms a copy), the last as long as all before it."""
    clock = CopyClock(per_copy)
    real_one_batch = benchmark._one_batch

    def copies_then_tick(gpu, bound, spans, calls):
        real_one_batch(gpu, bound, spans, calls)  # the real copies, on the GPU
        clock.now += calls * clock.per_copy
        return []

    monkeypatch.setattr(benchmark, "time", clock)
    monkeypatch.setattr(benchmark, "_one_batch", copies_then_tick)
    copies = benchmark.warm_up(device, 2.0, nbytes=1 << 12)
    assert 2.0 <= clock.now < 2.0 + per_copy  # at most one copy past the seconds asked
    assert copies == round(clock.now / per_copy)


def test_bench_and_tune_warm_up_with_2_s_of_64_mib_copies_by_default():
    """"`bench` and `tune` keep the GPU busy with back-to-back 64 MiB copies for 2 s (`--warm-up
    SECONDS`; `benchmark.warm_up`)"."""
    assert benchmark.WARM_UP_BYTES == 64 << 20
    assert [p.default for p in cli_bench.bench_cmd.params if p.name == "warm_up_s"] == [2.0]


# --- Spans of 50 calls -----------------------------------------------------------------------------


def test_ours_and_torchs_spans_are_50_calls_under_one_batch_rule():
    """"a sample is the span divided by 50" ... "This is how torch's peer is timed too (CUDA events
    around 50 launches ... the same rule as ours"."""
    assert benchmark.CALLS_PER_SPAN == peers.SPAN_CALLS == 50
    assert peers.MIN_TOTAL_S == walltime.MIN_TOTAL_S


# --- Rooflines ---------------------------------------------------------------------------------


def test_percent_of_copy_divides_by_a_copy_moving_the_same_bytes(device, monkeypatch):
    """""% copy" by a 16-byte-per-invocation WGSL copy kernel moving the same bytes, timed the same
    way in the same run": a kernel moving N bytes (read + written) is set against a copy of N / 2."""
    timed = []

    def copy(dev, nbytes):
        timed.append(nbytes)
        return benchmark.bench_copy(dev, nbytes, target_batch_s=0.005, min_batches=2, max_batches=4, min_total_s=0.0)

    monkeypatch.setattr(slow_states, "bench_copy", copy)
    cache: dict[int, float] = {}
    tbps = slow_states.copy_tbps(device, 1 << 16, cache)
    assert timed == [1 << 15] and cache == {1 << 16: tbps} and tbps > 0
    assert slow_states.copy_tbps(device, 1 << 16, cache) == tbps and len(timed) == 1  # once per size
    assert "array<vec4<u32>>" in benchmark._COPY_WGSL  # 16 bytes per invocation


# --- Host figures ----------------------------------------------------------------------------------


def test_host_cost_per_call_is_taken_before_any_gpu_timing_and_again_after(monkeypatch, tuning_dir):
    """"Ours run before any GPU timing in the process ..., and so does the host cost per call
    (`host_per_call`: 10,000 calls on GPU-resident tensors, median), which is measured again after
    the GPU timing for the record." Round trips: "back-to-back calls in three batches"."""
    events: list[tuple[str, object]] = []
    real_host, real_b2b, real_one_batch = cli_bench.host_per_call, benchmark.back_to_back, benchmark._one_batch
    monkeypatch.setattr(cli_bench, "host_per_call", lambda k, a, **kw: events.append(("host", kw["calls"])) or real_host(k, a, **kw))
    monkeypatch.setattr(benchmark, "back_to_back", lambda *a, **kw: events.append(("rt", kw["batches"])) or real_b2b(*a, **kw))
    monkeypatch.setattr(benchmark, "_one_batch", lambda *a: events.append(("gpu", None)) or real_one_batch(*a))
    result = CliRunner().invoke(main, ["bench", QG_DIR, "--case", "tiny", "--dtype", "f32", "--calls", "30",
                                       "--warm-up", "0", "--json", "-"])  # fmt: skip
    assert result.exit_code == 0, result.output
    kinds = [kind for kind, _ in events]
    first_gpu, last_gpu = kinds.index("gpu"), len(kinds) - 1 - kinds[::-1].index("gpu")
    assert kinds[:first_gpu] == ["host", "rt"] and kinds[last_gpu + 1:] == ["host"]
    assert ("host", 30) in events and ("rt", 3) in events
    (host,) = json.loads(result.stdout)["host"]
    assert host["calls"] == 30 and host["after_gpu_timing_median_s"] > 0
    assert [p.default for p in cli_bench.bench_cmd.params if p.name == "calls"] == [10_000]


# --- The slow state ------------------------------------------------------------------------------


def test_the_slow_state_rule_is_past_64_mib_below_60_percent_twice_at_most():
    """"past 64 MiB ... `bench` times a case again (twice at most, keeping the fastest kernel and
    copy) while its copy reads below 60% of the run's best copy past 64 MiB"."""
    assert (slow_states.SLOW_STATE_BYTES, slow_states.SLOW_STATE_FRACTION, slow_states.SLOW_STATE_RETRIES) == (64 << 20, 0.6, 2)
    result = benchmark.BenchResult(kernel="k", case="c", variant="v", dtypes={}, shapes={}, elements=0,
                                   bytes=(64 << 20) - 1, median_s=1e-4, p10_s=1e-5, p90_s=1e-4, samples=8, tbps=1.0)  # fmt: skip
    copies = {(64 << 20) - 1: 0.1, 1 << 30: 4.0}
    assert slow_states.slow_state(result, copies) is None  # just under 64 MiB: never
    result.bytes = 64 << 20
    copies[64 << 20] = 0.59 * 4.0
    assert "its copy read 2.36 TB/s" in (slow_states.slow_state(result, copies) or "")
    copies[64 << 20] = 0.61 * 4.0
    assert "spread" in (slow_states.slow_state(result, copies) or "")  # p10 a tenth of the median


def test_the_under_copy_rule_is_asked_of_the_reading_kept_within_three_timings(monkeypatch):
    """"this is asked of the reading kept after a re-timing too, within the same three timings at
    most"."""
    nbytes = 336 << 20

    def reading(p10_us: float, median_us: float) -> benchmark.BenchResult:
        return benchmark.BenchResult(kernel="k", case="c", variant="v", dtypes={}, shapes={}, elements=0, bytes=nbytes,
                                     median_s=median_us * 1e-6, p10_s=p10_us * 1e-6, p90_s=median_us * 1e-6, samples=8,
                                     tbps=nbytes / (median_us * 1e-6) / 1e12, peak_fraction=0.1)  # fmt: skip

    monkeypatch.setattr(slow_states, "bench_copy", lambda device, half: type("T", (), {"median_s": 84e-6})())
    # spread (timed again), then steady at 44% of its copy (asked again: 83 µs), then no fourth
    readings = iter([reading(118.6, 229.0), reading(185.6, 186.0), reading(83.0, 83.1), reading(83.0, 83.0)])
    result, slow = slow_states.time_steadily(lambda: next(readings), None, {})
    assert result.median_s == pytest.approx(83.1e-6) and len(slow["replaced"]) == 2
    assert next(readings).median_s == pytest.approx(83.0e-6)  # three timings, the fourth never taken
