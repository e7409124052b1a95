"""Where a rare 2x-slow reading comes from: every timing batch's median, in order, for the
configurations that once read 2x slow under call-span timing (docs/perf/h200-experiments-9.log:
bias_wide wide16 at 2.03 TB/s, -11.log: the qg_spread split copy at 1.67), each timed three
times on fresh buffers, next to the embedded kernel.

    python scripts/slow_state_probe.py
"""

import statistics
import time

import numpy as np

import webgpu_kernels as wk
from webgpu_kernels import benchmark
from webgpu_kernels.benchmark import bench_kernel, random_array

batches: list[tuple[float, float, int]] = []
real_one_batch = benchmark._one_batch


def logged_one_batch(gpu, bound, spans, calls):
    samples = real_one_batch(gpu, bound, spans, calls)
    batches.append((time.perf_counter(), statistics.median(samples[1:] or samples), spans))
    return samples


benchmark._one_batch = logged_one_batch
rng = np.random.default_rng(0)
QG, BA = "com.microsoft.QuickGelu", "com.microsoft.BiasAdd"
x = random_array((16, 1280, 4096), "float16", rng)
ba = {"X": random_array((16, 4096, 1280), "float16", rng), "bias": random_array((1280,), "float16", rng),
      "skip": random_array((16, 4096, 1280), "float16", rng)}  # fmt: skip
spread, bias_wide = wk.load_kernel("scripts/experiments/qg_spread"), wk.load_kernel("scripts/experiments/bias_wide")
configs = [
    ("QG embedded", wk.get_kernel(QG), {"X": x}, {}),
    ("QG split copy WG 256", spread, {"X": x}, {"MODE": 1, "ACTIVE": -2, "SPREAD": 2, "WORKGROUP_SIZE": 256}),
    ("QG split WG 256", spread, {"X": x}, {"MODE": 0, "ACTIVE": -2, "SPREAD": 2, "WORKGROUP_SIZE": 256}),
    ("BA embedded", wk.get_kernel(BA), ba, {}),
    ("BA bias_wide wide16", bias_wide, ba, {"WORKGROUP_SIZE": 256}),
]
for trial in range(3):
    for name, kernel, arrays, tunables in configs:
        batches.clear()
        start = time.perf_counter()
        r = bench_kernel(kernel, arrays, tunables=tunables)
        trace = " ".join(f"{m * 1e6:.1f}" for _, m, _ in batches)
        print(f"trial {trial} {name:22s} {r.median_s * 1e6:7.1f} us {r.tbps:.3f} TB/s in {time.perf_counter() - start:.2f} s;"
              f" batch medians (us): {trace}", flush=True)  # fmt: skip
