"""A CLIP MLP's elementwise tail on GPU-resident tensors, as a user chains it: BiasAdd then
QuickGelu on 2x77x3072, read back once, against a float64 NumPy reference; then the host time of
1,000 GPU-resident QuickGelu calls on 4,096 elements, each output released, to show what the
submission every MAX_PENDING_DISPATCHES recorded calls costs the call that makes it.

    python3 scripts/chain_check.py
"""
import statistics
import time

import numpy as np

import webgpu_kernels as wk
from webgpu_kernels.buffers import MAX_PENDING_DISPATCHES

bias_add, gelu = wk.get_kernel("com.microsoft.BiasAdd"), wk.get_kernel("com.microsoft.QuickGelu")
rng = np.random.default_rng(0)
for dtype in (np.float32, np.float16):
    x, skip = (rng.standard_normal((2, 77, 3072)).astype(dtype) for _ in range(2))
    bias = rng.standard_normal(3072).astype(dtype)
    h = bias_add({"X": wk.to_gpu(x), "bias": bias, "skip": wk.to_gpu(skip)}, output="gpu")["Y"]
    y = gelu({"X": h}, output="gpu")["Y"].numpy()
    s = x.astype(np.float64) + bias + skip  # the reference rounds the sum to the dtype, as the kernel's output is
    s = s.astype(dtype).astype(np.float64)
    want = s / (1 + np.exp(-1.702 * s))
    print(f"chain {np.dtype(dtype).name}: max abs error {np.abs(y.astype(np.float64) - want).max():.2e}")

x = wk.to_gpu(rng.standard_normal(4096).astype(np.float32))
gelu({"X": x}, output="gpu")["Y"].release()
wk.synchronize()
times = []
for _ in range(1000):
    start = time.perf_counter()
    gelu({"X": x}, output="gpu")["Y"].release()
    times.append(time.perf_counter() - start)
wk.synchronize()
ordered = sorted(range(len(times)), key=times.__getitem__, reverse=True)
print(f"1000 calls: median {statistics.median(times) * 1e6:.1f} us, mean {statistics.mean(times) * 1e6:.1f} us; "
      f"slowest calls (index: ms): {', '.join(f'{i}: {times[i] * 1e3:.2f}' for i in sorted(ordered[:4]))} "
      f"(a submission every {MAX_PENDING_DISPATCHES} recorded calls)")
