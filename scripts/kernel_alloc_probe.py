"""Is run Z's kernel-only slow state (QuickGelu 84M f16 at 155-204 us where it reads 83, steady over
a whole timing, while its copy read 4.1 TB/s; docs/perf/runs.md, "Run Z") a property of the
buffers the kernel was given, or of the process?

Round after round: the kernel on a fresh input and output, timed twice on those same buffers, then
on one pair kept for the whole probe. A slow reading that repeats on the same fresh pair and not on
the kept one points at the allocation (where the driver placed those buffers); one that hits both
points at the process or the moment. Run it in several fresh processes: bench met the state in
about one process in three on run Z's lend.

    python scripts/kernel_alloc_probe.py [ROUNDS] [SECONDS] [SCALE]

SCALE divides the 84M-element shape's last dimension for a smoke run on a small adapter (lavapipe: 64).
"""

import json
import math
import sys
import time

import numpy as np
import wgpu

import webgpu_kernels as wk
from webgpu_kernels import benchmark
from webgpu_kernels.benchmark import random_array, time_calls
from webgpu_kernels.buffers import padded_size
from webgpu_kernels.execution import bind, upload

rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 20
seconds = float(sys.argv[2]) if len(sys.argv) > 2 else 60
scale = int(sys.argv[3]) if len(sys.argv) > 3 else 1

kernel = wk.get_kernel("com.microsoft.QuickGelu")
rng = np.random.default_rng(0)
x = random_array((16, 1280, 4096 // scale), "float16", rng)
device, plan = kernel.plan({"X": x})
(out,) = plan.outputs
out_bytes = math.prod(out.shape) * np.dtype(out.dtype).itemsize
moved = x.nbytes + out_bytes
print(json.dumps({"adapter": device.adapter.name, "shape": list(x.shape), "bytes": moved}), flush=True)


def fresh_pair() -> dict:
    output = device.gpu.create_buffer(size=padded_size(out_bytes),
                                      usage=wgpu.BufferUsage.STORAGE | wgpu.BufferUsage.COPY_SRC)
    return {"X": (upload(device, x), padded_size(x.nbytes)), out.role: (output, padded_size(out_bytes))}


def us(buffers: dict) -> float:
    return time_calls(device, bind(device, plan, buffers)).median_s * 1e6


benchmark.warm_up(device, 2.0)
start = time.perf_counter()
kept = fresh_pair()
readings: list[dict] = []
for r in range(rounds):
    if time.perf_counter() - start > seconds:
        break
    pair = fresh_pair()
    try:
        row = {"round": r, "fresh": [round(us(pair), 1), round(us(pair), 1)], "kept": round(us(kept), 1),
               "t": round(time.perf_counter() - start, 1)}
    finally:
        for buffer, _ in pair.values():
            buffer.destroy()
    readings.append(row)
    print(json.dumps(row), flush=True)

every = [v for row in readings for v in (*row["fresh"], row["kept"])]
best = min(every)
print(f"{len(readings)} rounds; best {best:.1f} us ({moved / best / 1e6:.3f} TB/s); "
      f"fresh pairs slow (> 1.5x best) on both timings: {sum(all(v > 1.5 * best for v in r['fresh']) for r in readings)}, "
      f"on one: {sum(sum(v > 1.5 * best for v in r['fresh']) == 1 for r in readings)}; "
      f"kept pair slow: {sum(r['kept'] > 1.5 * best for r in readings)}")
