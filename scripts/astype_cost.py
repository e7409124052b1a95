"""Host wall clock of a float32 -> float16 conversion of a GPU-resident tensor: GpuTensor.astype on the
device against the host round trip it replaces (numpy(), NumPy's astype, to_gpu). Both end with the
float16 tensor read back, so each figure includes one readback of the result; the median of 7 runs.

    python scripts/astype_cost.py [--sizes 1048576,16777216,88080384]

With --chain, the host time of astype and copy.copy themselves inside a chain of recorded calls
instead: each step records QuickGelu -> astype(float16) -> astype(float32) -> copy.copy -> QuickGelu
on a GPU tensor, and only the astype and copy calls are timed; nothing is read until the end. The
mean includes the submissions a step pays for (astype's or the copy's own where they submit, or the
one every 256 recorded dispatches), the median the typical call. Host time on this adapter only,
not GPU time.

    python scripts/astype_cost.py --chain [--sizes 4096,1048576] [--steps 1000]
"""

import argparse
import copy
import statistics
import time

import numpy as np

import webgpu_kernels as wk


def median_ms(fn, repeats: int = 7) -> float:
    fn()  # the first run builds the pipeline and sizes the pool
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def chain_cost(sizes: list[int], steps: int) -> None:
    """Host time of each astype and copy.copy in a chain of calls recorded on GPU tensors (--chain)."""
    gelu = wk.get_kernel("com.microsoft.QuickGelu")
    for n in sizes:
        x = wk.to_gpu(np.random.default_rng(0).uniform(-3, 3, n).astype(np.float32))
        converts: list[float] = []
        copies: list[float] = []
        for step in range(steps + 20):  # the first 20 build the plans and pipelines and fill the pool
            y = gelu({"X": x}, output="gpu")["Y"]
            start = time.perf_counter()
            h = y.astype(np.float16)
            middle = time.perf_counter()
            back = h.astype(np.float32)
            end = time.perf_counter()
            duplicate = copy.copy(back)
            copied = time.perf_counter()
            z = gelu({"X": duplicate}, output="gpu")["Y"]
            for t in (y, h, back, duplicate, z):
                t.release()
            if step >= 20:
                converts += [middle - start, end - middle]
                copies.append(copied - end)
        wk.synchronize()
        for what, times in (("astype", converts), ("copy.copy", copies)):
            us = [t * 1e6 for t in times]
            print(f"{n:>10} elements: host time per {what} in a recorded chain ({len(us)} calls): median "
                  f"{statistics.median(us):.1f} us, mean {statistics.mean(us):.1f} us")  # fmt: skip
        x.release()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default=None, help="element counts, comma-separated")
    parser.add_argument("--chain", action="store_true", help="astype's and copy.copy's host time inside a chain of recorded calls")  # fmt: skip
    parser.add_argument("--steps", type=int, default=1000, help="--chain's timed steps (two astype calls and a copy each)")  # fmt: skip
    args = parser.parse_args()
    print(f"adapter: {wk.get_device().adapter.label()}")
    if args.chain:
        chain_cost([int(s) for s in (args.sizes or "4096,1048576").split(",")], args.steps)
        return
    args.sizes = args.sizes or "1048576,16777216,88080384"
    rng = np.random.default_rng(0)
    for n in (int(s) for s in args.sizes.split(",")):
        host = rng.standard_normal(n).astype(np.float32)
        x = wk.to_gpu(host)

        def on_device() -> None:
            y = x.astype(np.float16)
            y.numpy()
            y.release()

        def round_trip() -> None:
            y = wk.to_gpu(x.numpy().astype(np.float16))
            y.numpy()
            y.release()

        check = x.astype(np.float16)
        exact = np.array_equal(check.numpy().view(np.uint16), host.astype(np.float16).view(np.uint16))
        check.release()
        device_ms, trip_ms = median_ms(on_device), median_ms(round_trip)
        print(f"{n:>10} elements: astype {device_ms:8.2f} ms, host round trip {trip_ms:8.2f} ms "
              f"({trip_ms / device_ms:.1f}x); bit-equal to NumPy: {exact}")
        x.release()


if __name__ == "__main__":
    main()
