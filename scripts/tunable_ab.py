#!/usr/bin/env python3
"""One tunable's values timed against each other, alternately, on bench.json cases.

    python scripts/tunable_ab.py tests/packages/ai.onnx.Gemm PREFETCH true false --case fc1-77 --case fc2-77

Each round times every value once per case and dtype (bench's timing: spans of back-to-back calls,
timestamps, median), after bench's warm-up, on the same random inputs, so a slow moment of the GPU
shows in every value alike; prints one line per timing and a table of medians over the rounds.
`tune` reports only its winner's time; this gives both sides of a comparison.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

import webgpu_kernels as wk
from webgpu_kernels.benchmark import bench_kernel, warm_up
from webgpu_kernels.casefile import binding_label
from webgpu_kernels.cli_bench import bench_cases, case_arrays


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("package", type=Path)
    parser.add_argument("tunable")
    parser.add_argument("values", nargs="+", help="values, each parsed as JSON")
    parser.add_argument("--case", action="append", default=[], help="part of a case name (repeatable)")
    parser.add_argument("--dtype", action="append", default=[], help="float32 or float16 (repeatable)")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()

    values = [json.loads(v) for v in args.values]
    kernel = wk.load_kernel(args.package)
    # bench.json's cases and inputs as `bench` reads and makes them (every type variable, each
    # input's dtype and `generate`, the case's own tunables under the one compared)
    jobs = [(case["name"], binding_label(case["types"]), case_arrays(case, seed), case["attrs"], case["tunables"])
            for seed, case in enumerate(bench_cases(kernel, tuple(args.case), (), tuple(args.dtype), {}))]
    device = wk.get_device()
    warm_up(device, 2.0)
    times: dict[tuple[str, str, str], list[float]] = {}
    for r in range(args.rounds):
        for name, dtype, arrays, attrs, tunables in jobs:
            for value in values:
                result = bench_kernel(kernel, arrays, case=name, attrs=attrs, tunables={**tunables, args.tunable: value})
                times.setdefault((name, dtype, json.dumps(value)), []).append(result.median_s * 1e6)
                print(f"round {r} {name} {dtype} {args.tunable}={json.dumps(value)} {result.variant}: "
                      f"{result.median_s * 1e6:.1f} us", flush=True)  # fmt: skip
    print(f"\n{device.adapter.name}: median over {args.rounds} rounds (us)")
    for name, dtype, *_ in jobs:
        cells = [f"{args.tunable}={json.dumps(v)} {statistics.median(times[(name, dtype, json.dumps(v))]):.1f}" for v in values]
        print(f"{name} {dtype}: " + "  ".join(cells))


if __name__ == "__main__":
    main()
