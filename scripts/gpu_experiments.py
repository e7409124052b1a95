"""Template experiments on a GPU machine: packages under scripts/experiments/ against the embedded
kernel of the same op, on the same random data, timed the same way (benchmark.py)."""

import os

import numpy as np

import webgpu_kernels as wk
from webgpu_kernels.benchmark import bench_kernel, random_array
from webgpu_kernels.references import REFERENCES

rng = np.random.default_rng(0)
root = "scripts/experiments"
embedded = wk.get_kernel("com.microsoft.QuickGelu")
spread = wk.load_kernel(os.path.join(root, "qg_spread"))
# Run 1 (docs/perf/h200-experiments-2.log) tried WORKGROUP_SIZE 64..1024, f16 math, SPREAD 2/4/8 and
# grid-stride loops: none beat the embedded kernel. Run 2: copy controls (MODE 1) of the same access
# patterns, to tell the math's share from the access pattern's.
configs = [(embedded, "embedded", {"WORKGROUP_SIZE": 256})]
configs += [(spread, "copy8B", {"SPREAD": 1, "MODE": 1}), (spread, "copy16B", {"SPREAD": 2, "MODE": 1}),
            (spread, "copy32B", {"SPREAD": 4, "MODE": 1, "ACTIVE": 132 * 1024}),
            (spread, "copy16B-wg1024", {"SPREAD": 2, "MODE": 1, "WORKGROUP_SIZE": 1024}),
            (spread, "gelu8B", {"SPREAD": 1})]  # fmt: skip
for dtype in ("float16", "float32"):
    x = random_array((21504, 4096), dtype, rng)  # 88M elements
    ref = REFERENCES["com.microsoft.QuickGelu"]({"X": x}, {"alpha": 1.702})["Y"]
    for k, name, tunables in configs if dtype == "float16" else configs[:1]:
        r = bench_kernel(k, {"X": x}, tunables=tunables,
                         check=lambda o: float(np.nanmax(np.abs(o["Y"].astype(np.float64) - (x if tunables.get("MODE") else ref)))))
        print(f"{name:10s} {dtype} {tunables}: {r.median_s * 1e6:8.1f} us {r.tbps:.3f} TB/s err {r.max_error:.2e}",
              flush=True)  # fmt: skip
