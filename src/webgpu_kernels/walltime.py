"""Wall-clock timing of host calls, shared by our benchmark and the peers' processes (so both sides of
a comparison are timed the same way). No GPU library is imported here: peers run in processes
where wgpu-native must not load."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

#: The batch rule of GPU timing, ours (benchmark.time_calls) and torch's peer alike: batches of
#: about TARGET_BATCH_S of GPU time, at least MIN_SPANS spans each, until two consecutive batch
#: medians agree within REL_TOL after MIN_BATCHES batches and MIN_TOTAL_S of GPU time in all.
TARGET_BATCH_S, MIN_SPANS, MIN_BATCHES, MAX_BATCHES, REL_TOL, MIN_TOTAL_S = 0.05, 5, 3, 40, 0.02, 0.3


@dataclass(frozen=True)
class Settled:
    samples: list[float]  # seconds per call, the last two batches' (sorted)
    batches: int
    stable: bool  # False when max_batches ran out before two medians agreed


def settle(one_batch: Callable[[int], list[float]], *, calls_per_span: int, target_batch_s: float = TARGET_BATCH_S,
           min_batches: int = MIN_BATCHES, max_batches: int = MAX_BATCHES, rel_tol: float = REL_TOL,
           min_total_s: float = MIN_TOTAL_S, max_spans: int = 2048) -> Settled:  # fmt: skip
    """Run ``one_batch(spans)`` (seconds per call of each span of ``calls_per_span`` calls) under
    the batch rule above. The first span of each batch is dropped: the GPU may still be ramping up."""
    spans, total, batches, medians = MIN_SPANS, 0.0, [], []
    stable = False
    for batch in range(max_batches):
        samples = one_batch(max(MIN_SPANS, min(spans, max_spans)))
        total += sum(samples) * calls_per_span
        batches.append(samples[1:])
        medians.append(statistics.median(batches[-1]))
        # Size the next batch to about target_batch_s of GPU time.
        spans = int(target_batch_s / max(medians[-1] * calls_per_span, 1e-7))
        # Two medians whatever min_batches says (1 had compared the first with one not yet taken).
        if batch + 1 >= max(min_batches, 2) and total >= min_total_s and abs(medians[-1] - medians[-2]) <= rel_tol * medians[-1]:
            stable = True
            break
    return Settled(sorted(batches[-1] + (batches[-2] if len(batches) > 1 else [])), len(medians), stable)


#: Bytes each warm-up copy moves (benchmark.warm_up, and torch's peer before its first timing).
WARM_UP_BYTES = 64 << 20


def sustain(batch: Callable[[int], Any], seconds: float, *, max_calls: int,
            clock: Callable[[], float] = time.perf_counter) -> int:  # fmt: skip
    """Keep the GPU busy for about ``seconds`` of wall time: ``batch(n)`` makes n back-to-back calls
    and waits for them; n doubles from 1, capped at ``max_calls`` and at what fits in the time left
    (doubling alone let the last batch run as long as all before it: lavapipe, 15 ms a copy, 2 s
    asked, 3.0 s run). Returns the calls made."""
    calls, n = 0, 1
    start = clock()
    while (elapsed := clock() - start) < seconds:
        batch(n)
        calls += n
        now = clock() - start
        per_call = max(now - elapsed, 1e-9) / n
        n = max(1, min(2 * n, max_calls, int((seconds - now) / per_call)))
    return calls


def back_to_back(fn: Callable[[], Any], sync: Callable[[], Any], *, min_s: float = 0.3, batches: int = 5,
                 sync_cost: float = 0.0) -> float:  # fmt: skip
    """Median per-call time of back-to-back calls, in batches sized to about min_s / batches;
    each batch ends with ``sync()``, whose own ``sync_cost`` is subtracted."""
    fn()
    sync()
    start = time.perf_counter()
    n = 0
    while time.perf_counter() - start < 0.05 or n < 2:
        fn()
        n += 1
    sync()
    per = max(time.perf_counter() - start - sync_cost, 1e-7) / n
    reps = max(2, int(min_s / batches / per))
    samples = []
    for _ in range(batches):
        sync()
        t = time.perf_counter()
        for _ in range(reps):
            fn()
        sync()
        samples.append(max(time.perf_counter() - t - sync_cost, 0.0) / reps)
    return statistics.median(samples)
