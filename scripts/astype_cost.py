"""Host wall clock of a float32 -> float16 conversion of a GPU-resident tensor: GpuTensor.astype on the
device against the host round trip it replaces (numpy(), NumPy's astype, to_gpu). Both end with the
float16 tensor read back, so each figure includes one readback of the result; the median of 7 runs.

    python scripts/astype_cost.py [--sizes 1048576,16777216,88080384]
"""

import argparse
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1048576,16777216,88080384")
    args = parser.parse_args()
    print(f"adapter: {wk.get_device().adapter.label()}")
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
