"""Template experiments on a GPU machine: each package under scripts/experiments/ against the
embedded kernel of the same op, on the same random data, timed the same way (benchmark.py)."""

import os

import numpy as np

import webgpu_kernels as wk
from webgpu_kernels.benchmark import bench_kernel, random_array
from webgpu_kernels.references import REFERENCES

rng = np.random.default_rng(0)
root = "scripts/experiments"
packages = {"embedded": None, **{n: wk.load_kernel(os.path.join(root, n)) for n in sorted(os.listdir(root))}}
for dtype in ("float16", "float32"):
    x = random_array((21504, 4096), dtype, rng)  # 88M elements
    ref = REFERENCES["com.microsoft.QuickGelu"]({"X": x}, {"alpha": 1.702})["Y"]
    for name, k in packages.items():
        k = k or wk.get_kernel("com.microsoft.QuickGelu")
        if k.op_id != "com.microsoft.QuickGelu":
            continue
        for wg in (256, 512, 1024):
            r = bench_kernel(k, {"X": x}, tunables={"WORKGROUP_SIZE": wg},
                             check=lambda o: float(np.nanmax(np.abs(o["Y"].astype(np.float64) - ref))))
            print(f"{name:12s} {dtype} wg{wg}: {r.median_s * 1e6:8.1f} us {r.tbps:.3f} TB/s err {r.max_error:.2e}", flush=True)
