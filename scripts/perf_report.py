"""Markdown tables from `webgpu-kernels bench --json` output (used for docs/performance.md).

    python scripts/perf_report.py docs/perf/h200-full.json
"""

import json
import sys


def fmt(value, spec):
    return "-" if value is None else format(value, spec)


def main(path: str) -> None:
    data = json.load(open(path, encoding="utf-8"))
    print(f"Adapter: {data['adapter']}; datasheet peak {data['peak_tbps']} TB/s.\n")
    print("| kernel | case | dtype | variant | GPU µs | TB/s | % peak | % copy | torch eager TB/s | torch.compile TB/s "
          "| ORT WebGPU µs | ORT / ours | round trip ms | ORT round trip ms | torch transfer ms | max abs err |")
    print("|" + "---|" * 16)
    for r in data["cases"]:
        if "error" in r:
            print(f"| {r['kernel']} | {r['case']} | {r['dtype']} | error: {r['error'][:60]} |")
            continue
        torch = r.get("peers", {}).get("torch", {})
        ort = r.get("peers", {}).get("ort-webgpu", {})
        tb = lambda s: None if not s else r["bytes"] / s / 1e12  # noqa: E731
        ort_s = ort.get("device_s")
        print(f"| {r['kernel'].split('.')[-1]} | {r['case']} | {r['dtype'].replace('float', 'f')} | {r['variant']} "
              f"| {r['median_s'] * 1e6:.1f} | {r['tbps']:.3f} | {fmt(r.get('peak_fraction') and r['peak_fraction'] * 100, '.1f')} "
              f"| {r['copy_fraction'] * 100:.0f} | {fmt(tb(torch.get('eager_s')), '.3f')} | {fmt(tb(torch.get('compile_s')), '.3f')} "
              f"| {fmt(ort_s and ort_s * 1e6, '.1f')} | {fmt(ort_s and ort_s / r['median_s'], '.2f')} "
              f"| {fmt(r.get('roundtrip_s') and r['roundtrip_s'] * 1e3, '.3f')} "
              f"| {fmt(ort.get('numpy_roundtrip_s') and ort['numpy_roundtrip_s'] * 1e3, '.3f')} "
              f"| {fmt(torch.get('transfer_s') and torch['transfer_s'] * 1e3, '.3f')} | {fmt(r.get('max_error'), '.1e')} |")
    for h in data.get("host", []):
        print(f"\nHost time per call, {h['kernel']} {h.get('shapes')} on GPU-resident tensors: median "
              f"{h['median_s'] * 1e6:.1f} µs, p90 {h['p90_s'] * 1e6:.1f} µs over {h['calls']} calls.")


if __name__ == "__main__":
    main(sys.argv[1])
