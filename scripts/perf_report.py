"""Markdown tables from `webgpu-kernels bench --json` output (used for docs/performance.md).

    python scripts/perf_report.py docs/perf/h200-run-c.json

A peer whose output failed the reference check is marked WRONG next to its figure.
"""

import json
import math
import sys


def fmt(value, spec):
    return "-" if value is None else format(value, spec)


def wrong(error, dtype):
    limit = {"float32": 1e-4, "float16": 1e-2}.get(dtype, 1e-2)
    return error is not None and (not math.isfinite(error) or error > limit)


def main(path: str) -> None:
    data = json.load(open(path, encoding="utf-8"))
    print(f"Adapter: {data['adapter']}; datasheet peak {data['peak_tbps']} TB/s.\n")
    print("| kernel | case | dtype | GPU µs | TB/s | % peak | % copy | tuned TB/s | torch eager TB/s | torch.compile TB/s "
          "| ORT WebGPU µs | ORT / ours | round trip ms | ORT round trip ms | ORT rt / ours | torch transfer ms "
          "| max abs err |")
    print("|" + "---|" * 17)
    for r in data["cases"]:
        if "error" in r:
            print(f"| {r['kernel']} | {r['case']} | {r['dtype']} | error: {r['error'][:60]} |")
            continue
        torch = r.get("peers", {}).get("torch", {})
        ort = r.get("peers", {}).get("ort-webgpu", {})
        tb = lambda s: None if not s else r["bytes"] / s / 1e12  # noqa: E731
        ort_s, ort_rt, rt = ort.get("device_s"), ort.get("numpy_roundtrip_s"), r.get("roundtrip_s")
        ort_mark = " WRONG" if wrong(ort.get("device_error"), r["dtype"]) else ""
        ort_rt_mark = " WRONG" if wrong(ort.get("numpy_error"), r["dtype"]) else ""
        tuned = r.get("tuned", {}).get("tbps")
        print(f"| {r['kernel'].split('.')[-1]} | {r['case']} | {r['dtype'].replace('float', 'f')} "
              f"| {r['median_s'] * 1e6:.1f} | {r['tbps']:.3f} | {fmt(r.get('peak_fraction') and r['peak_fraction'] * 100, '.1f')} "
              f"| {r['copy_fraction'] * 100:.0f} | {fmt(tuned, '.3f')} | {fmt(tb(torch.get('eager_s')), '.3f')} "
              f"| {fmt(tb(torch.get('compile_s')), '.3f')} "
              f"| {fmt(ort_s and ort_s * 1e6, '.1f')}{ort_mark} | {fmt(ort_s and ort_s / r['median_s'], '.2f')} "
              f"| {fmt(rt and rt * 1e3, '.3f')} | {fmt(ort_rt and ort_rt * 1e3, '.3f')}{ort_rt_mark} "
              f"| {fmt(ort_rt and rt and ort_rt / rt, '.2f')} "
              f"| {fmt(torch.get('transfer_s') and torch['transfer_s'] * 1e3, '.3f')} | {fmt(r.get('max_error'), '.1e')} |")
    for h in data.get("host", []):
        print(f"\nHost time per call, {h['kernel']} {h.get('shapes')} on GPU-resident tensors: median "
              f"{h['median_s'] * 1e6:.1f} µs, p90 {h['p90_s'] * 1e6:.1f} µs over {h['calls']} calls"
              + (f"; after the GPU timing, {h['after_gpu_timing_median_s'] * 1e6:.1f} µs."
                 if "after_gpu_timing_median_s" in h else "."))


if __name__ == "__main__":
    main(sys.argv[1])
