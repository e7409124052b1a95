"""Host time per GPU-resident call (benchmark.host_per_call), best median of 4 x 20,000 calls, for
QuickGelu on 4,096 elements and BiasAdd on 2x5x320 float32: the per-call path's cost on this host.

    python scripts/host_cost.py
"""

import numpy as np

import webgpu_kernels as wk
from webgpu_kernels.benchmark import host_per_call

rng = np.random.default_rng(0)
x = rng.standard_normal(4096).astype(np.float32)
xb = rng.standard_normal((2, 5, 320)).astype(np.float32)
cases = {
    "QuickGelu": (wk.get_kernel("com.microsoft.QuickGelu"), {"X": x}),
    "BiasAdd": (wk.get_kernel("com.microsoft.BiasAdd"), {"X": xb, "bias": xb[0, 0].copy(), "skip": xb}),
}
for name, (kernel, inputs) in cases.items():
    best = min(host_per_call(kernel, inputs, calls=20_000)["median_s"] for _ in range(4))
    print(f"{name}: {best * 1e6:.2f} us per call")
