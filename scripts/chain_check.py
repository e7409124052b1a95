"""A CLIP MLP's elementwise tail on GPU-resident tensors, as a user chains it: BiasAdd then
QuickGelu on 2x77x3072, read back once, against a float64 NumPy reference; then the host time of
1,000 GPU-resident QuickGelu calls (4,096 float32 elements unless --shape/--dtype say otherwise),
each output released, to show what the submission every MAX_PENDING_DISPATCHES recorded calls
costs the call that makes it (on lavapipe that call runs the queued kernels).

    python3 scripts/chain_check.py [--shape 2x77x3072 --dtype float16]
"""
import argparse
import statistics
import time

import numpy as np

import webgpu_kernels as wk
from webgpu_kernels.buffers import MAX_PENDING_DISPATCHES

parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
parser.add_argument("--shape", default="4096", help="the timed calls' input shape, dims joined by x")
parser.add_argument("--dtype", default="float32", choices=["float32", "float16"])
args = parser.parse_args()
shape = tuple(int(d) for d in args.shape.split("x"))

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

x = wk.to_gpu(rng.standard_normal(shape).astype(args.dtype))
gelu({"X": x}, output="gpu")["Y"].release()
wk.synchronize()
times = []
for _ in range(1000):
    start = time.perf_counter()
    gelu({"X": x}, output="gpu")["Y"].release()
    times.append(time.perf_counter() - start)
wk.synchronize()
ordered = sorted(range(len(times)), key=times.__getitem__, reverse=True)
print(f"1000 calls on {args.shape} {args.dtype}: median {statistics.median(times) * 1e6:.1f} us, mean {statistics.mean(times) * 1e6:.1f} us; "
      f"slowest calls (index: ms): {', '.join(f'{i}: {times[i] * 1e3:.2f}' for i in sorted(ordered[:4]))} "
      f"(a submission every {MAX_PENDING_DISPATCHES} recorded calls)")
