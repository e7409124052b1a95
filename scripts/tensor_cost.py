"""What a GpuTensor costs the per-call path on this host: construct one, read shape and dtype twice
(as a call's plan lookup does), release it; best of 7 x 200,000, no GPU involved.

    python scripts/tensor_cost.py

Run with each commit's tree on PYTHONPATH (PYTHONPATH=<tree>/src) to compare forms of the class; on
the CPU machine: read-only properties over slots 1.44-1.54 us, a __setattr__ hook (68cd24d)
2.50-2.57 us, plain assignable slots (b0bad87) 1.14-1.18 us (docs/performance.md, "The per-call path").
"""

import timeit

import numpy as np

from webgpu_kernels.tensor import GpuTensor


class _Memory:
    def release(self, buffer: object) -> None:
        pass


class _Device:
    memory = _Memory()


DEVICE, DTYPE = _Device(), np.dtype(np.float32)


def one() -> None:
    tensor = GpuTensor(object(), (4096,), DTYPE, DEVICE, 16384)
    tensor.shape, tensor.dtype, tensor.shape, tensor.dtype  # noqa: B018 - the reads are what is timed
    tensor.release()


if __name__ == "__main__":
    n = 200_000
    best = min(timeit.repeat(one, number=n, repeat=7)) / n
    print(f"GpuTensor construct + 4 reads + release: {best * 1e6:.2f} us")
