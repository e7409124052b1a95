"""Template experiments on a GPU machine: packages under scripts/experiments/ against the embedded
kernel of the same op, on the same random data, timed the same way (benchmark.py).

    python scripts/gpu_experiments.py [wide|interleave|f32|split|mid]

Earlier rounds (docs/performance.md, "f16 QuickGelu"): qg_spread and qg_f16math tried ways of
moving more bytes per invocation inside the seed manifest's numel/4 grid; none beat the embedded
kernel (docs/perf/h200-experiments-2.log, -3.log). "wide" (the default; -4.log): qg_wide and
bias_wide, the seed manifests plus an f16 variant with another dispatch (numel/8 invocations over
16-byte units), to measure what a manifest change, not a template change, would buy.
"interleave": inside the seed's grid again, but the idle half of it spread over the run (every
SPREAD-th workgroup works on SPREAD workgroups' data, qg_spread ACTIVE -1) instead of at its end;
now the shipped f16 QuickGelu; exp2 rows: the same with the exponent's constant folded (MODE 2).
Its BiasAdd part measured the same pattern for BiasAdd f16 as a
package (-7.log: 4.148 -> 4.201 TB/s), since shipped; the round now times the embedded BiasAdd at
two workgroup sizes against bias_wide's numel/8 variant.
"split": the idle half of the seed's grid inside each workgroup (its second half exits) instead
of every other workgroup (qg_spread ACTIVE -2); QuickGelu only.
"mid": f16 QuickGelu at model shapes (CLIP, ViT, Qwen2-VL) where the shipped template reads
79-89% of the copy kernel in run J: the shipped template, the old 8-byte pattern, a run-time
branch on the size (qg_spread ACTIVE -3, and its 8-byte path alone; ACTIVE -4, the branch over
the vec4<f16> view, and its 16-byte path alone), wide16; and the large shape. Both branches lose
(-13.log, -14.log): each view is slow for the other path's access pattern.
"f32": the same interleave for f32 (qg_spread and bias_wide with ACTIVE -1 / SPREAD 2 or 4:
every SPREAD-th workgroup moves SPREAD vec4<f32> units per invocation), against the embedded
kernels, which sit 0.3% behind torch.compile at 84M elements.
"""

import sys

import numpy as np

import webgpu_kernels as wk
from webgpu_kernels.benchmark import bench_kernel, random_array
from webgpu_kernels.comparison import Tolerance, check_against
from webgpu_kernels.references import REFERENCES

rng = np.random.default_rng(0)
QG, BA = "com.microsoft.QuickGelu", "com.microsoft.BiasAdd"
qg_wide = wk.load_kernel("scripts/experiments/qg_wide")
qg_spread = wk.load_kernel("scripts/experiments/qg_spread")
bias_wide = wk.load_kernel("scripts/experiments/bias_wide")
ROUND = sys.argv[1] if len(sys.argv) > 1 else "wide"
if ROUND not in ("wide", "interleave", "f32", "split", "mid"):
    raise SystemExit(f"unknown round {ROUND!r}: wide, interleave, f32, split or mid")
DTYPE = "float32" if ROUND == "f32" else "float16"


def run(op: str, arrays: dict, configs: list) -> None:
    """Time each (kernel, name, tunables, expected) on the same arrays; expected None: the reference."""
    reference = REFERENCES[op](arrays, {"alpha": 1.702} if op == QG else {})
    for kernel, name, tunables, expected in configs:
        want = expected or reference
        r = bench_kernel(kernel, arrays, tunables=tunables, check=lambda o, want=want: check_against(o, want, Tolerance.of([DTYPE])))
        print(f"{op.split('.')[-1]} {DTYPE} {name:24s}: {r.variant:8s} {r.median_s * 1e6:8.1f} us {r.tbps:.3f} TB/s "
              f"err {r.max_error:.2e}", flush=True)  # fmt: skip


if ROUND == "mid":  # model shapes, where the shipped f16 template reads 79-89% of copy in run J
    for shape in ((2, 77, 3072), (8, 50, 3072), (8, 197, 3072), (1, 1024, 5120), (8, 257, 4096), (16, 1280, 4096)):
        print(f"--- QuickGelu {shape}", flush=True)
        x = random_array(shape, DTYPE, rng)
        run(QG, {"X": x}, [
            (wk.get_kernel(QG), "embedded (interleave S2)", {"WORKGROUP_SIZE": 256}, None),
            (qg_spread, "8 B/invocation, all working", {"WORKGROUP_SIZE": 256, "SPREAD": 1, "MODE": 0, "ACTIVE": 0}, None),
            (qg_spread, "run-time branch, 8M", {"WORKGROUP_SIZE": 256, "SPREAD": 2, "MODE": 0, "ACTIVE": -3}, None),
            (qg_spread, "branch's 8-byte path", {"WORKGROUP_SIZE": 256, "SPREAD": 2, "MODE": 0, "ACTIVE": -3,
                                                 "THRESHOLD": 2**31}, None),
            (qg_spread, "vec4<f16> branch, 8M", {"WORKGROUP_SIZE": 256, "SPREAD": 2, "MODE": 0, "ACTIVE": -4}, None),
            (qg_spread, "vec4<f16> branch, 16 B path", {"WORKGROUP_SIZE": 256, "SPREAD": 2, "MODE": 0, "ACTIVE": -4,
                                                        "THRESHOLD": 1}, None),
            (qg_spread, "interleave S2 copy", {"WORKGROUP_SIZE": 256, "SPREAD": 2, "MODE": 1, "ACTIVE": -1}, {"Y": x}),
            (qg_wide, "wide16 (numel/8)", {"WORKGROUP_SIZE": 256, "MODE": 0}, None),
            (qg_wide, "wide16 copy control", {"WORKGROUP_SIZE": 256, "MODE": 1}, {"Y": x}),
        ])  # fmt: skip
    raise SystemExit(0)

x = random_array((16, 1280, 4096), DTYPE, rng)  # the bench.json "large" QuickGelu case
configs = [(wk.get_kernel(QG), "embedded vec4", {"WORKGROUP_SIZE": 256}, None)]
spread = {"MODE": 0, "ACTIVE": -1}
if ROUND == "wide":
    configs += [(qg_wide, f"wide16 WG {wg}", {"WORKGROUP_SIZE": wg, "MODE": 0}, None) for wg in (128, 256, 512)]
    configs += [(qg_wide, "wide16 copy control", {"WORKGROUP_SIZE": 256, "MODE": 1}, {"Y": x})]
elif ROUND == "interleave":
    configs += [(qg_spread, "copy 8 B/invocation", {"WORKGROUP_SIZE": 256, "SPREAD": 1, "MODE": 1, "ACTIVE": 0},
                 {"Y": x})]  # fmt: skip
    configs += [(qg_spread, f"interleave S2 WG {wg}", {**spread, "WORKGROUP_SIZE": wg, "SPREAD": 2}, None)
                for wg in (128, 256, 512, 1024)]  # fmt: skip
    configs += [(qg_spread, f"interleave S4 WG {wg}", {**spread, "WORKGROUP_SIZE": wg, "SPREAD": 4}, None)
                for wg in (256, 512)]  # fmt: skip
    configs += [(qg_spread, f"interleave S{n} WG {wg} exp2", {**spread, "WORKGROUP_SIZE": wg, "SPREAD": n, "MODE": 2},
                 None) for n, wg in ((2, 256), (4, 512))]  # fmt: skip
    configs += [(qg_spread, "interleave S2 copy", {**spread, "WORKGROUP_SIZE": 256, "SPREAD": 2, "MODE": 1}, {"Y": x})]
    configs += [(qg_wide, "wide16 WG 256 (numel/8)", {"WORKGROUP_SIZE": 256, "MODE": 0}, None)]
    configs += [(qg_wide, "wide16 copy control", {"WORKGROUP_SIZE": 256, "MODE": 1}, {"Y": x})]
elif ROUND == "split":  # the idle half inside each workgroup instead of every other workgroup
    split = {"MODE": 0, "ACTIVE": -2, "SPREAD": 2}
    configs += [(qg_spread, f"split WG {wg}", {**split, "WORKGROUP_SIZE": wg}, None) for wg in (128, 256, 512, 1024)]
    configs += [(qg_spread, "split WG 256 copy", {**split, "WORKGROUP_SIZE": 256, "MODE": 1}, {"Y": x})]
    configs += [(qg_spread, "interleave S4 WG 512", {**spread, "WORKGROUP_SIZE": 512, "SPREAD": 4}, None)]
    configs += [(qg_wide, "wide16 WG 256 (numel/8)", {"WORKGROUP_SIZE": 256, "MODE": 0}, None)]
    configs += [(wk.get_kernel(QG), "embedded vec4 (again)", {"WORKGROUP_SIZE": 256}, None)]
else:  # f32: the vec4<f32> units interleaved, SPREAD of them per working invocation
    configs += [(wk.get_kernel(QG), f"embedded vec4 WG {wg}", {"WORKGROUP_SIZE": wg}, None) for wg in (128, 512)]
    configs += [(qg_spread, f"interleave S{n} WG {wg}", {**spread, "WORKGROUP_SIZE": wg, "SPREAD": n}, None)
                for n in (2, 4) for wg in (128, 256, 512)]  # fmt: skip
    configs += [(qg_spread, "interleave S2 copy", {**spread, "WORKGROUP_SIZE": 256, "SPREAD": 2, "MODE": 1}, {"Y": x})]
run(QG, {"X": x}, configs)
del x
if ROUND == "split":
    raise SystemExit(0)

arrays = {"X": random_array((16, 4096, 1280), DTYPE, rng), "bias": random_array((1280,), DTYPE, rng),
          "skip": random_array((16, 4096, 1280), DTYPE, rng)}  # fmt: skip
configs = [(wk.get_kernel(BA), "embedded vec4", {"WORKGROUP_SIZE": 256}, None)]
if ROUND == "wide":
    configs += [(bias_wide, f"wide16 WG {wg}", {"WORKGROUP_SIZE": wg}, None) for wg in (128, 256, 512)]
elif ROUND == "interleave":
    configs += [(wk.get_kernel(BA), "embedded vec4 WG 512", {"WORKGROUP_SIZE": 512}, None)]
    configs += [(bias_wide, "wide16 WG 256 (numel/8)", {"WORKGROUP_SIZE": 256}, None)]
else:
    configs += [(bias_wide, f"interleave S{n} WG {wg}", {"WORKGROUP_SIZE": wg, "SPREAD": n}, None)
                for n in (2, 4) for wg in (128, 256, 512)]  # fmt: skip
    configs += [(wk.get_kernel(BA), "embedded vec4 (again)", {"WORKGROUP_SIZE": 256}, None)]
run(BA, arrays, configs)
