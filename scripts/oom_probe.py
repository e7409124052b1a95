"""What running out of GPU memory looks like on a real GPU (run AB): do the engine's buffers
past the device's memory raise OutOfMemoryError, and does the pool's trim-and-retry (buffers.py,
DeviceMemory.create) give their memory to a new size?

1. Lease buffers of SIZE_MIB until the device refuses one (or CAP_GIB are held, or SECONDS pass):
   what was raised, after how many, and how long the refusal took (the retry's trim and wait).
2. Release them all to the pool (it keeps its budget plus four of the largest size), then lease
   buffers of another size class until the device refuses one: as many bytes as in step 1 fit
   only if the pool's free buffers were trimmed (it ends empty).
3. A QuickGelu call afterwards, checked against NumPy float64: the device still works.

    python scripts/oom_probe.py [SIZE_MIB] [CAP_GIB] [SECONDS]
"""

import json
import sys
import time

import numpy as np

import webgpu_kernels as wk
from webgpu_kernels.errors import DeviceLostError, OutOfMemoryError

size_mib = int(sys.argv[1]) if len(sys.argv) > 1 else 1024
cap_gib = float(sys.argv[2]) if len(sys.argv) > 2 else 200
seconds = float(sys.argv[3]) if len(sys.argv) > 3 else 120

device = wk.get_device()
memory = device.memory
size = size_mib << 20
print(json.dumps({"adapter": device.adapter.label(), "size_mib": size_mib, "max_buffer_size": memory.max_buffer_size}), flush=True)


def fill(nbytes: int, until_bytes: float) -> tuple[list, dict]:
    held: list = []
    start = time.perf_counter()
    outcome: dict = {"stopped": "cap"}
    while len(held) * nbytes < until_bytes and time.perf_counter() - start < seconds:
        t = time.perf_counter()
        try:
            held.append(memory.acquire(nbytes))
        except (OutOfMemoryError, DeviceLostError) as exc:
            outcome = {"stopped": type(exc).__name__, "after_s": round(time.perf_counter() - t, 3),
                       "message": str(exc)[:600]}
            break
    else:
        if time.perf_counter() - start >= seconds:
            outcome = {"stopped": "time"}
    outcome.update(buffers=len(held), held_gib=round(len(held) * nbytes / 2**30, 2),
                   seconds=round(time.perf_counter() - start, 2))
    return held, outcome


held, first = fill(size, cap_gib * 2**30)
print(json.dumps({"step": 1, **first}), flush=True)
for buffer in held:
    memory.release(buffer)
print(json.dumps({"step": 2, "pooled_gib": round(memory.pooled_bytes / 2**30, 2)}), flush=True)
other = size - (size >> 2)  # another size class: no pool hit
again, second = fill(other, cap_gib * 2**30)  # until refused: past what the pool's trim frees
print(json.dumps({"step": 2, **second, "pooled_gib_after": round(memory.pooled_bytes / 2**30, 2)}), flush=True)
for buffer in again:
    memory.release(buffer)
wk.empty_cache()
x = np.random.default_rng(0).standard_normal((2, 77, 3072)).astype(np.float32)
y = wk.get_kernel("com.microsoft.QuickGelu")({"X": x})["Y"]
want = x / (1 + np.exp(-1.702 * x.astype(np.float64)))
print(json.dumps({"step": 3, "max_err": float(np.abs(y - want).max())}), flush=True)
