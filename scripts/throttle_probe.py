"""Is the slow state of the H200 (84M-element f16 kernels and their copy at 1.47-1.69 TB/s, about
2.4x slower, in runs O and P and in docs/perf/h200-slow-state.log's predecessor) the machine's
clocks? Times the four large bench.json cases and the copy of each, round after round, for
SECONDS, printing one JSON line per timing with its wall time; run it beside
`nvidia-smi --query-gpu=... -lms 200` and line the two up.

    python scripts/throttle_probe.py [SECONDS] [IDLE_EVERY]

IDLE_EVERY > 0 sleeps 2 s after every IDLE_EVERY-th round (idle gaps were one cause of slow
readings in issue 5).
"""

import json
import sys
import time

import numpy as np

import webgpu_kernels as wk
from webgpu_kernels.benchmark import bench_copy, bench_kernel, random_array

seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 240
idle_every = int(sys.argv[2]) if len(sys.argv) > 2 else 0
rng = np.random.default_rng(0)
qg, ba = wk.get_kernel("com.microsoft.QuickGelu"), wk.get_kernel("com.microsoft.BiasAdd")
cases = []
for dtype in ("float32", "float16"):
    x = random_array((16, 4096, 1280), dtype, rng)
    cases.append((f"BiasAdd {dtype}", ba, {"X": x, "bias": random_array((1280,), dtype, rng), "skip": x[::-1].copy()}))
    cases.append((f"QuickGelu {dtype}", qg, {"X": random_array((16, 1280, 4096), dtype, rng)}))
device = wk.get_device()
start = time.perf_counter()
round_ = 0
while time.perf_counter() - start < seconds:
    for name, kernel, arrays in cases:
        r = bench_kernel(kernel, arrays)
        copy = bench_copy(device, r.bytes // 2)
        print(json.dumps({"t": round(time.time(), 3), "s": round(time.perf_counter() - start, 2), "round": round_,
                          "case": name, "us": round(r.median_s * 1e6, 1), "tbps": round(r.tbps, 3),
                          "p10_us": round(r.p10_s * 1e6, 1), "p90_us": round(r.p90_s * 1e6, 1),
                          "copy_tbps": round(r.bytes / copy.median_s / 1e12, 3), "stable": r.stable}), flush=True)
    round_ += 1
    if idle_every and round_ % idle_every == 0:
        time.sleep(2)
