"""First look on a GPU machine: bandwidth of every variant at large sizes, the copy roofline, the host
cost per call, and template experiments (packages under scripts/experiments/). Prints a table and
writes JSON to $OUT/probe.json when OUT is set."""

import json
import os
import statistics
import time

import numpy as np

import webgpu_kernels as wk
from webgpu_kernels.benchmark import bench_copy, bench_kernel, random_array
from webgpu_kernels.comparison import Tolerance, check_against
from webgpu_kernels.device import get_device

rng = np.random.default_rng(0)
dev = get_device()
print("adapter:", dev.adapter.label(), flush=True)
rows = []


def ref_qg(x, alpha=1.702):
    x = x.astype(np.float64)
    with np.errstate(over="ignore"):
        return x / (1 + np.exp(-alpha * x))


def report(r, copy_tbps):
    r.copy_tbps = copy_tbps
    r.copy_fraction = r.tbps / copy_tbps
    rows.append(r.as_dict())
    print(f"{r.kernel:26s} {r.case:22s} {r.variant:10s} {list(r.dtypes.values())[0]:8s} {r.elements:>10d} "
          f"{r.median_s*1e3:9.4f} ms {r.tbps:6.3f} TB/s peak {r.peak_fraction or 0:5.1%} copy {r.copy_fraction:5.1%} "
          f"err {r.max_error}", flush=True)


def run_kernel(k, name, arrays, ref, variants, copy_tbps, **kw):
    for v in variants:
        try:
            r = bench_kernel(k, arrays, case=name, variant=v, check=ref, **kw)
        except wk.KernelError as e:
            print("skip", name, v, e)
            continue
        report(r, copy_tbps)


copies = {}
def copy_for(nbytes):
    key = nbytes
    if key not in copies:
        t = bench_copy(dev, nbytes // 2)  # the copy reads nbytes/2 and writes nbytes/2
        copies[key] = (nbytes // 2 // 16 * 16) * 2 / t.median_s / 1e12
        print(f"copy {nbytes/2**20:.0f} MiB moved: {copies[key]:.3f} TB/s", flush=True)
    return copies[key]


qg = wk.get_kernel("com.microsoft.QuickGelu")
ba = wk.get_kernel("com.microsoft.BiasAdd")
experiments = {name: wk.load_kernel(os.path.join("scripts/experiments", name))
               for name in sorted(os.listdir("scripts/experiments")) if os.path.isdir(os.path.join("scripts/experiments", name))}
for n, label in ((84 * 2**20 // 1, "84M"), (268435456, "268M")):
    for dt in ("float32", "float16"):
        x = random_array((n // 4096, 4096), dt, rng)
        def err(o, x=x, dt=dt):  # bench_kernel's check gives an Agreement (comparison.check_against)
            return check_against(o, {"Y": ref_qg(x)}, Tolerance.of([dt]))

        c = copy_for(2 * x.nbytes)
        run_kernel(qg, f"qg-{label}", {"X": x}, err, [None, "vec4_tail", "scalar"], c)
        for ename, ek in experiments.items():
            if ek.op_id == qg.op_id:
                run_kernel(ek, f"{ename}-{label}", {"X": x}, err, [None], c)
        C = 1280
        X = random_array((n // C // 16, 16, C), dt, rng)
        S = random_array(X.shape, dt, rng)
        B = random_array((C,), dt, rng)
        def err(o, X=X, S=S, B=B, dt=dt):
            return check_against(o, {"Y": X.astype(np.float64) + B + S}, Tolerance.of([dt]))

        c = copy_for(3 * X.nbytes)
        run_kernel(ba, f"ba-{label}", {"X": X, "bias": B, "skip": S}, err, [None, "scalar"], c)
        for ename, ek in experiments.items():
            if ek.op_id == ba.op_id:
                run_kernel(ek, f"{ename}-{label}", {"X": X, "bias": B, "skip": S}, err, [None], c)
        if label == "84M":
            for wg in (64, 128, 512, 1024):
                run_kernel(qg, f"qg-{label}-wg{wg}", {"X": x}, None, [None], copy_for(2 * x.nbytes), tunables={"WORKGROUP_SIZE": wg})
                run_kernel(ba, f"ba-{label}-wg{wg}", {"X": X, "bias": B, "skip": S}, None, [None], c, tunables={"WORKGROUP_SIZE": wg})
        del x, X, S

# host cost per call on GPU-resident data (QuickGelu, 4096 elements)
x = random_array((4096,), "float32", rng)
t = qg({"X": x}, output="gpu")["Y"]
times = []
for _ in range(3000):
    s = time.perf_counter()
    out = qg({"X": t}, output="gpu")["Y"]
    times.append(time.perf_counter() - s)
    out.release()
print(f"host per call (gpu in/out, 4096 el): median {statistics.median(times)*1e6:.1f} us, p90 {sorted(times)[int(len(times)*.9)]*1e6:.1f} us")
for n in (40960, 2_621_440, 84 * 2**20):
    a = random_array((n,), "float32", rng)
    ts = []
    for _ in range(5):
        s = time.perf_counter()
        qg({"X": a})
        ts.append(time.perf_counter() - s)
    print(f"numpy round trip {n} el f32: median {statistics.median(ts)*1e3:.3f} ms")
if os.environ.get("OUT"):
    json.dump(rows, open(os.path.join(os.environ["OUT"], "probe.json"), "w"), indent=1)
