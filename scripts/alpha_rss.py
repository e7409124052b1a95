"""RSS of a process calling QuickGelu with N distinct alphas (each builds a pipeline: the seed bakes
alpha into the WGSL), printed every 200 calls, to see whether the bounded caches hold memory flat.

    python3 scripts/alpha_rss.py 3000
"""

import gc
import sys

import numpy as np

from webgpu_kernels import get_kernel


def rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096 / 2**20


kernel = get_kernel("com.microsoft.QuickGelu")
x = np.random.default_rng(0).standard_normal(4096).astype(np.float32)
kernel({"X": x})
print("start", round(rss_mb(), 1))
for i in range(int(sys.argv[1]) if len(sys.argv) > 1 else 1000):
    kernel({"X": x}, attrs={"alpha": 1.0 + i * 1e-3})
    if i % 200 == 199:
        gc.collect()
        print(i + 1, round(rss_mb(), 1), flush=True)
