"""What a new value of an attribute the WGSL is rendered with costs: com.microsoft.QuickGelu writes
alpha into its shader source (the seed manifest passes it as a template input), so each distinct
alpha is its own shader and pipeline. Times calls on 4,096 float32 elements with a new alpha each
(a plan, a render, a pipeline compiled), then calls repeating one alpha (cached), and the process's
RSS over the new ones (the device keeps 256 pipelines; wgpu-native frees a dropped one when the
device is next polled, which a call's readback does).

    python3 scripts/attribute_churn.py [NEW_VALUES]
"""

from __future__ import annotations

import statistics
import sys
import time

import numpy as np

import webgpu_kernels as wk


def rss_mib() -> float:
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmRSS")) / 1024


def main(new_values: int = 1000) -> None:
    gelu = wk.get_kernel("com.microsoft.QuickGelu")
    x = np.random.default_rng(0).standard_normal(4096).astype(np.float32)
    gelu({"X": x}, attrs={"alpha": 1.702})  # the device, the pool and the first plan
    fresh, start_rss = [], rss_mib()
    for i in range(new_values):
        alpha = 1.0 + i * 1e-4
        t0 = time.perf_counter()
        y = gelu({"X": x}, attrs={"alpha": alpha})["Y"]
        fresh.append(time.perf_counter() - t0)
        if i == 0:
            np.testing.assert_allclose(y, x / (1 + np.exp(-alpha * x.astype(np.float64))), rtol=1e-5, atol=1e-6)
        if (i + 1) % max(new_values // 5, 1) == 0:
            print(f"{i + 1} new alphas: RSS {rss_mib():.1f} MiB ({rss_mib() - start_rss:+.1f})", flush=True)
    cached = []
    for _ in range(200):
        t0 = time.perf_counter()
        gelu({"X": x}, attrs={"alpha": 1.702})
        cached.append(time.perf_counter() - t0)
    adapter = wk.choose_adapter()
    print(f"{adapter.name} ({adapter.backend}): a call with a new alpha "
          f"{statistics.median(fresh) * 1e3:.2f} ms (median of {new_values}), with a cached one "
          f"{statistics.median(cached) * 1e3:.3f} ms (NumPy in and out); RSS per new alpha "
          f"{(rss_mib() - start_rss) * 1024 / new_values:.1f} KiB")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 1000)
