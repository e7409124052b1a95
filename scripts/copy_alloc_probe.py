"""Is the H200's slow copy (1.66-1.70 TB/s where it reads 4.1-4.2; docs/perf/runs.md, "Run P
and the slow state") a property of the buffers it was given, or of the moment it ran?

Round after round, as `bench` does for a large case: the kernel on fresh buffers, then the copy
on a fresh source and destination, timed twice on those same buffers; beside them, a copy on one
pair of buffers kept for the whole probe, timed once per round. A slow reading that persists on
the same fresh pair and not on the kept one points at the allocation; one that hits both at once
points at the machine's state.

    python scripts/copy_alloc_probe.py [ROUNDS] [SECONDS] [SCALE]

SCALE divides the 84M-element shapes (and the kept pair) for a smoke run on a small adapter.
"""

import json
import sys
import time

import numpy as np

import webgpu_kernels as wk
from webgpu_kernels import benchmark
from webgpu_kernels.benchmark import bench_kernel, random_array, time_calls
from webgpu_kernels.device import get_device

rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 30
seconds = float(sys.argv[2]) if len(sys.argv) > 2 else 150
scale = int(sys.argv[3]) if len(sys.argv) > 3 else 1
SLOW = 0.6  # slow_states.SLOW_STATE_FRACTION

rng = np.random.default_rng(0)
qg, ba = wk.get_kernel("com.microsoft.QuickGelu"), wk.get_kernel("com.microsoft.BiasAdd")
cases = []
for dtype in ("float32", "float16"):
    x = random_array((16 // scale, 4096, 1280), dtype, rng)
    cases.append((f"BiasAdd {dtype}", ba, {"X": x, "bias": random_array((1280,), dtype, rng), "skip": x[::-1].copy()}))
    cases.append((f"QuickGelu {dtype}", qg, {"X": random_array((16 // scale, 1280, 4096), dtype, rng)}))

device = get_device()
print(json.dumps({"adapter": device.adapter.name}), flush=True)
benchmark.warm_up(device, 2.0)
start = time.perf_counter()
rows: list[dict] = []


def log(**row) -> None:
    row["t"] = round(time.perf_counter() - start, 2)
    rows.append(row)
    print(json.dumps(row), flush=True)


def copy_tbps(passes, half: int) -> float:
    return 2 * half / time_calls(device, passes).median_s / 1e12


kept_half = (503 << 20) // scale  # about half of the 84M f32 BiasAdd's bytes, as bench's copy for it
with benchmark._copy_pass(device, kept_half, seed=99) as kept:
    for r in range(rounds):
        if time.perf_counter() - start > seconds:
            break
        name, kernel, arrays = cases[r % len(cases)]
        result = bench_kernel(kernel, arrays, case=name)
        log(round=r, kind="kernel", case=name, tbps=round(result.tbps, 3))
        half = max(16, result.bytes // 2 // 16 * 16)
        with benchmark._copy_pass(device, half, seed=r) as fresh:
            for rep in range(2):
                log(round=r, kind="fresh copy", case=name, rep=rep, tbps=round(copy_tbps(fresh[0], half), 3))
        log(round=r, kind="kept copy", rep=0, tbps=round(copy_tbps(kept[0], kept_half), 3))

for kind in ("kernel", "fresh copy", "kept copy"):
    values = [row["tbps"] for row in rows if row["kind"] == kind]
    print(f"{kind}: {len(values)} timings, min {min(values):.3f} median {np.median(values):.3f} max {max(values):.3f}")
best = max(row["tbps"] for row in rows if row["kind"] != "kernel")
slow = [row for row in rows if row["kind"] != "kernel" and row["tbps"] < SLOW * best]
print(f"slow copies (< {SLOW} x best {best:.3f}): {len(slow)}")
for row in slow:
    same_round = [o for o in rows if o["round"] == row["round"] and o is not row and o["kind"] != "kernel"]
    print(" ", row, "| same round:", [(o["kind"], o.get("rep"), o["tbps"]) for o in same_round])
