"""How the engine waits for a readback, and where a small NumPy round trip's time goes.

Configurations run interleaved in one process (host drift hits all alike). For each, a QuickGelu
NumPy round trip on 16 KB, 0.95 MB and 16 MB, in stages: an empty submission (its host cost,
"submit") waited for by mapping an idle 16-byte buffer ("empty": the floor of any readback), the
upload (to_gpu), the call recorded on GPU tensors ("record"), the readback ("read"), and the whole
NumPy-in, NumPy-out call ("call"). Medians in microseconds.

By default the configurations are ways of waiting for the staging map (mapped READ_NOSYNC): the
engine's own (on a GPU adapter a spin bounded at buffers.READBACK_SPIN_S, then the poll thread;
on a CPU adapter the poll thread alone), wgpu-py's poll thread alone (the caller sleeps on a
threading.Event), a blocking poll on the calling thread (wgpu-py 0.32's private
GPUDevice._poll_wait), non-blocking polls in a loop on the calling thread (a spin, like CUDA's
default sync on an idle host), and that spin with os.sched_yield() between polls. (Earlier logs
also have a "spin <= 1 ms, then thread" row: the prototype of what is now the engine's own.)
With --map-modes they are the map mode, READ (wgpu-py first submits an empty command buffer) or
READ_NOSYNC, each waited for by the poll thread or by a blocking poll on the calling thread.

    python scripts/wait_probe.py [ROUNDS] [--map-modes]
"""

import os
import statistics
import sys
import time

import numpy as np
import wgpu

import webgpu_kernels as wk
from webgpu_kernels import buffers

engine_wait = buffers.DeviceMemory._map_for_read


def poll_thread_only(gpu, promise):
    pass


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


# name -> (map mode of the readback, what the caller does before wgpu-py's sync_wait; None: the
# engine's own DeviceMemory._map_for_read)
WAYS_TO_WAIT = {
    "engine": ("READ_NOSYNC", None),
    "poll thread only": ("READ_NOSYNC", poll_thread_only),
    "blocking poll, caller": ("READ_NOSYNC", blocking_poll),
    "spin, caller": ("READ_NOSYNC", spin),
    "spin + yield, caller": ("READ_NOSYNC", spin_yield),
}
MAP_MODES = {
    "READ, poll thread": (wgpu.MapMode.READ, poll_thread_only),
    "READ_NOSYNC, poll thread": ("READ_NOSYNC", poll_thread_only),
    "READ, calling thread": (wgpu.MapMode.READ, blocking_poll),
    "READ_NOSYNC, calling thread": ("READ_NOSYNC", blocking_poll),
}
STAGES = ("submit", "empty", "upload", "record", "read", "call")
REPS = 20
SIZES = (4096, 236544, 4194304)  # elements: 16 KB, 0.95 MB, 16 MB of f32
clock = time.perf_counter


def empty_round_trip(memory, idle):
    """Submit an empty command buffer, then map an idle buffer the way readbacks do: the host's
    round trip to the queue. Returns the host time of the submit alone."""
    t0 = clock()
    memory.gpu.queue.submit([memory.gpu.create_command_encoder().finish()])
    submitted = clock() - t0
    memory._map_for_read(idle, 16)
    idle.unmap()
    return submitted


def main(rounds: int, configs: dict) -> None:
    kernel = wk.get_kernel("com.microsoft.QuickGelu")
    device = wk.get_device()
    print(f"adapter: {device.adapter.name}", flush=True)
    idle = device.gpu.create_buffer(size=16, usage=wgpu.BufferUsage.MAP_READ | wgpu.BufferUsage.COPY_DST)
    for n in SIZES:
        x = np.random.default_rng(0).standard_normal(n).astype(np.float32)
        expect = kernel({"X": x})["Y"]
        times = {name: {stage: [] for stage in STAGES} for name in configs}
        for _ in range(rounds):
            for name, (mode, strategy) in configs.items():
                buffers.READBACK_MAP_MODE = mode
                buffers.DeviceMemory._map_for_read = engine_wait if strategy is None else caller_wait(strategy)
                t = times[name]
                for _ in range(REPS):
                    t0 = clock()
                    t["submit"].append(empty_round_trip(device.memory, idle))
                    t1 = clock()
                    xg = wk.to_gpu(x)
                    t2 = clock()
                    yg = kernel({"X": xg}, output="gpu")["Y"]
                    t3 = clock()
                    y = yg.numpy()
                    t4 = clock()
                    kernel({"X": x})
                    t5 = clock()
                    for stage, seconds in zip(STAGES[1:], (t1 - t0, t2 - t1, t3 - t2, t4 - t3, t5 - t4)):
                        t[stage].append(seconds)
                    xg.release()
                    yg.release()
                if not np.array_equal(y, expect):
                    raise SystemExit(f"{name}: wrong result")
        print(f"QuickGelu on {n * 4} bytes, medians of {rounds * REPS} (us):", flush=True)
        for name, t in times.items():
            cells = "  ".join(f"{k} {statistics.median(v) * 1e6:7.1f}" for k, v in t.items())
            print(f"  {name:28s} {cells}", flush=True)


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    main(int(args[0]) if args else 30, MAP_MODES if "--map-modes" in sys.argv else WAYS_TO_WAIT)
