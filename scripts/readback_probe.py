"""How the engine waits for a readback, compared in one process with the configurations interleaved
(so host drift hits all alike): the staging map as "READ" (wgpu-py first submits an empty command
buffer) or "READ_NOSYNC", waited for by wgpu-py's poll thread or by a blocking poll on the calling
thread (wgpu-py 0.32's private GPUDevice._poll_wait, patched in here). For each, the stages of a
QuickGelu NumPy round trip: upload (to_gpu), record (GPU in, GPU out), read (numpy()), and the
whole call. Medians in microseconds.

    python scripts/readback_probe.py [ROUNDS]
"""

import statistics
import sys
import time

import numpy as np

import webgpu_kernels as wk
from webgpu_kernels import buffers

thread_wait = buffers.DeviceMemory._map_for_read


def caller_wait(memory, staging, size):
    promise = staging.map_async(buffers.READBACK_MAP_MODE, 0, size)
    memory.gpu._poll_wait()
    promise.sync_wait()


CONFIGS = {
    "READ, poll thread": (buffers.wgpu.MapMode.READ, False),
    "READ_NOSYNC, poll thread": ("READ_NOSYNC", False),
    "READ, calling thread": (buffers.wgpu.MapMode.READ, True),
    "READ_NOSYNC, calling thread": ("READ_NOSYNC", True),
}
ROUNDS = int(sys.argv[1]) if len(sys.argv) > 1 else 30
REPS = 20

kernel = wk.get_kernel("com.microsoft.QuickGelu")
clock = time.perf_counter
for n in (4096, 236544):
    x = np.random.default_rng(0).standard_normal(n).astype(np.float32)
    expect = kernel({"X": x})["Y"]
    stages = {name: {"upload": [], "record": [], "read": [], "call": []} for name in CONFIGS}
    for _ in range(ROUNDS):
        for name, (mode, on_caller) in CONFIGS.items():
            buffers.READBACK_MAP_MODE = mode
            buffers.DeviceMemory._map_for_read = caller_wait if on_caller else thread_wait
            s = stages[name]
            for _ in range(REPS):
                t0 = clock()
                xg = wk.to_gpu(x)
                t1 = clock()
                yg = kernel({"X": xg}, output="gpu")["Y"]
                t2 = clock()
                y = yg.numpy()
                t3 = clock()
                kernel({"X": x})
                t4 = clock()
                s["upload"].append(t1 - t0)
                s["record"].append(t2 - t1)
                s["read"].append(t3 - t2)
                s["call"].append(t4 - t3)
                xg.release()
                yg.release()
            if not np.array_equal(y, expect):
                raise SystemExit(f"{name}: wrong result")
    print(f"QuickGelu on {n * 4} bytes, medians of {ROUNDS * REPS} (us):", flush=True)
    for name, s in stages.items():
        cells = "  ".join(f"{k} {statistics.median(v) * 1e6:7.1f}" for k, v in s.items())
        print(f"  {name:28s} {cells}", flush=True)
