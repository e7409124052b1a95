"""Template experiments on a GPU machine: packages under scripts/experiments/ against the embedded
kernel of the same op, on the same random data, timed the same way (benchmark.py)."""

import itertools
import os

import numpy as np

import webgpu_kernels as wk
from webgpu_kernels.benchmark import bench_kernel, random_array
from webgpu_kernels.references import REFERENCES

rng = np.random.default_rng(0)
root = "scripts/experiments"
embedded = wk.get_kernel("com.microsoft.QuickGelu")
spread = wk.load_kernel(os.path.join(root, "qg_spread"))
f16math = wk.load_kernel(os.path.join(root, "qg_f16math"))
configs = [(embedded, "embedded", {"WORKGROUP_SIZE": wg}) for wg in (64, 128, 256, 512, 1024)]
configs += [(f16math, "f16math", {"WORKGROUP_SIZE": 256})]
configs += [(spread, "spread", {"WORKGROUP_SIZE": wg, "SPREAD": s}) for wg, s in itertools.product((256, 1024), (2, 4, 8))]
configs += [(spread, "persistent", {"WORKGROUP_SIZE": wg, "SPREAD": s, "ACTIVE": a})
            for wg, s, a in itertools.product((256, 1024), (2, 4), (132 * 1024, 132 * 2048, 132 * 4096))]  # fmt: skip
for dtype in ("float16", "float32"):
    x = random_array((21504, 4096), dtype, rng)  # 88M elements
    ref = REFERENCES["com.microsoft.QuickGelu"]({"X": x}, {"alpha": 1.702})["Y"]
    for k, name, tunables in configs if dtype == "float16" else configs[2:3]:
        r = bench_kernel(k, {"X": x}, tunables=tunables,
                         check=lambda o: float(np.nanmax(np.abs(o["Y"].astype(np.float64) - ref))))
        print(f"{name:10s} {dtype} {tunables}: {r.median_s * 1e6:8.1f} us {r.tbps:.3f} TB/s err {r.max_error:.2e}",
              flush=True)  # fmt: skip
