"""Where a small NumPy round trip's time goes, and whether the way the host waits for the GPU is it.

The H200 shows about 300 us for a QuickGelu round trip on 16 KB (readback_probe.py), against
about 30 us for torch moving the same bytes there and back. This probe times, in one process with
the configurations interleaved (host drift hits all alike):

1. an empty submission (its host cost, "submit") waited for by mapping an idle buffer ("empty",
   the floor of any readback), and
2. the whole QuickGelu round trip and its readback,

for four ways of waiting for the staging map: wgpu-py's poll thread (the engine's default, the
caller sleeps on a threading.Event), a blocking poll on the calling thread, non-blocking polls in a
loop on the calling thread (a spin, like CUDA's default sync on an idle host), and the spin with
os.sched_yield() between polls. Medians in microseconds.

    python scripts/wait_probe.py [ROUNDS]
"""

import os
import statistics
import sys
import time

import numpy as np
import wgpu

import webgpu_kernels as wk
from webgpu_kernels import buffers

thread_wait = buffers.DeviceMemory._map_for_read


def blocking_poll(gpu, promise):
    gpu._poll_wait()


def spin(gpu, promise):
    while promise._state == "pending":
        gpu._poll(False)


def spin_yield(gpu, promise):
    while promise._state == "pending":
        gpu._poll(False)
        os.sched_yield()


def caller_wait(strategy):
    def map_for_read(memory, staging, size):
        promise = staging.map_async(buffers.READBACK_MAP_MODE, 0, size)
        strategy(memory.gpu, promise)
        promise.sync_wait()

    return map_for_read


STRATEGIES = {
    "poll thread (default)": None,
    "blocking poll, caller": blocking_poll,
    "spin, caller": spin,
    "spin + yield, caller": spin_yield,
}
ROUNDS = int(sys.argv[1]) if len(sys.argv) > 1 else 30
REPS = 20
clock = time.perf_counter


def empty_round_trip(gpu, strategy, idle):
    """Submit an empty command buffer, then map an idle buffer: the host's round trip to the queue."""
    t0 = clock()
    gpu.queue.submit([gpu.create_command_encoder().finish()])
    submitted = clock() - t0
    promise = idle.map_async(wgpu.MapMode.READ, 0, 16)
    if strategy is not None:
        strategy(gpu, promise)
    promise.sync_wait()
    idle.unmap()
    return submitted


def main() -> None:
    kernel = wk.get_kernel("com.microsoft.QuickGelu")
    device = wk.get_device()
    print(f"adapter: {device.adapter.name}", flush=True)
    idle = device.gpu.create_buffer(size=16, usage=wgpu.BufferUsage.MAP_READ | wgpu.BufferUsage.COPY_DST)
    for n in (4096, 236544):
        x = np.random.default_rng(0).standard_normal(n).astype(np.float32)
        expect = kernel({"X": x})["Y"]
        xg = wk.to_gpu(x)
        times = {name: {"submit": [], "empty": [], "read": [], "call": []} for name in STRATEGIES}
        for _ in range(ROUNDS):
            for name, strategy in STRATEGIES.items():
                buffers.DeviceMemory._map_for_read = thread_wait if strategy is None else caller_wait(strategy)
                t = times[name]
                for _ in range(REPS):
                    t0 = clock()
                    t["submit"].append(empty_round_trip(device.gpu, strategy, idle))
                    t1 = clock()
                    yg = kernel({"X": xg}, output="gpu")["Y"]
                    t2 = clock()
                    y = yg.numpy()
                    t3 = clock()
                    kernel({"X": x})
                    t4 = clock()
                    yg.release()
                    t["empty"].append(t1 - t0)
                    t["read"].append(t3 - t2)
                    t["call"].append(t4 - t3)
                if not np.array_equal(y, expect):
                    raise SystemExit(f"{name}: wrong result")
        print(f"QuickGelu on {n * 4} bytes, medians of {ROUNDS * REPS} (us):", flush=True)
        for name, t in times.items():
            cells = "  ".join(f"{k} {statistics.median(v) * 1e6:7.1f}" for k, v in t.items())
            print(f"  {name:24s} {cells}", flush=True)
        xg.release()


if __name__ == "__main__":
    main()
