"""Wall-clock timing of host calls, shared by our benchmark and the peers' processes (so both sides of
a comparison are timed the same way). No GPU library is imported here: peers run in processes
where wgpu-native must not load."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any


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
