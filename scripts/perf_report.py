"""Markdown tables from `webgpu-kernels bench --json` output (used for docs/performance.md).

    python scripts/perf_report.py docs/perf/h200-run-c.json

A figure whose output failed the reference check (ours tuned, or a peer's) is marked WRONG next to
it, with bench's own tolerance; a peer that gave no result for a case shows its error.
"""

import json
import math
import sys

from webgpu_kernels.comparison import Tolerance


def fmt(value, spec):
    # bench's JSON writes non-finite numbers as strings ("nan", "inf")
    return "-" if value is None else value if isinstance(value, str) else format(value, spec)


def wrong(error, dtype, ok=None):
    """bench's verdict where the file has one (``*_ok``, since bench judged outputs element by
    element); before, the absolute part of its tolerance was the rule."""
    if ok is not None or error is None:
        return ok is False
    error = float(error)
    return not math.isfinite(error) or error > Tolerance.of(dtype.split(",")).absolute


def mark(error, dtype, ok=None):
    return " WRONG" if wrong(error, dtype, ok) else ""


def peer_mark(peer, figure, dtype):
    return mark(peer.get(f"{figure}_error"), dtype, peer.get(f"{figure}_ok"))


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
        dt = r["dtype"]
        ort_mark, ort_rt_mark = peer_mark(ort, "device", dt), peer_mark(ort, "numpy", dt)
        eager_mark, compile_mark = peer_mark(torch, "eager", dt), peer_mark(torch, "compile", dt)
        tuned_row = r.get("tuned", {})
        tuned = "error" if "error" in tuned_row else fmt(tuned_row.get("tbps"), ".3f") + mark(tuned_row.get("max_error"), dt, tuned_row.get("error_ok"))
        for name, peer in (("torch", torch), ("ORT", ort)):
            if "error" in peer and not any(k.endswith("_s") for k in peer):
                print(f"<!-- {r['case']} {dt}: {name}: {peer['error'][:120]} -->")
        print(f"| {r['kernel'].split('.')[-1]} | {r['case']} | {r['dtype'].replace('float', 'f')} "
              f"| {r['median_s'] * 1e6:.1f} | {r['tbps']:.3f}{mark(r.get('max_error'), dt, r.get('error_ok'))} | {fmt(r.get('peak_fraction') and r['peak_fraction'] * 100, '.1f')} "
              f"| {r['copy_fraction'] * 100:.0f} | {tuned} | {fmt(tb(torch.get('eager_s')), '.3f')}{eager_mark} "
              f"| {fmt(tb(torch.get('compile_s')), '.3f')}{compile_mark} "
              f"| {fmt(ort_s and ort_s * 1e6, '.1f')}{ort_mark} | {fmt(ort_s and ort_s / r['median_s'], '.2f')} "
              f"| {fmt(rt and rt * 1e3, '.3f')} | {fmt(ort_rt and ort_rt * 1e3, '.3f')}{ort_rt_mark} "
              f"| {fmt(ort_rt and rt and ort_rt / rt, '.2f')} "
              f"| {fmt(torch.get('transfer_s') and torch['transfer_s'] * 1e3, '.3f')} | {fmt(r.get('max_error'), '.1e')} |")
    for h in data.get("host", []):
        if "error" in h:  # a kernel whose smallest f32 case could not run (this had raised a KeyError)
            print(f"\nHost time per call, {h['kernel']}: error: {h['error']}")
            continue
        print(f"\nHost time per call, {h['kernel']} {h.get('shapes')} on GPU-resident tensors: median "
              f"{h['median_s'] * 1e6:.1f} µs, p90 {h['p90_s'] * 1e6:.1f} µs over {h['calls']} calls"
              + (f"; after the GPU timing, {h['after_gpu_timing_median_s'] * 1e6:.1f} µs."
                 if "after_gpu_timing_median_s" in h else "."))


if __name__ == "__main__":
    main(sys.argv[1])
