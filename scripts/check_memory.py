"""Host memory and time of the reference check (comparison.check_against, max_abs_error,
reference_report) on one large output against a float64 reference, with some NaN and infinities
(and float16 overflow) present. Each measurement runs in a fresh process, so ru_maxrss growth is
the check's own.

    python scripts/check_memory.py [--elements N] [--source comparison.py ...] [--repeat R]

``--source`` loads comparison.py from a file (an older copy, say) instead of the package; several
are measured alternately, so their times are comparable.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import resource
import subprocess
import sys
import time
import tracemalloc
from typing import Any

import numpy as np

FUNCTIONS = ("check_against", "max_abs_error", "reference_report")
DTYPES = ("float32", "float16", "int64")


def load(source: str) -> Any:
    if source == "package":
        from webgpu_kernels import comparison

        return comparison
    spec = importlib.util.spec_from_file_location("comparison_under_test", source)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def arrays(elements: int, dtype: str) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    ref = rng.standard_normal(elements) * (1000.0 if dtype == "int64" else 1.0)
    if dtype == "int64":
        ref = np.rint(ref)
    else:
        ref[:: 1 << 16] = np.nan
        ref[7 :: 1 << 17] = np.inf
        ref[9 :: 1 << 18] = 1e5  # float16 rounds it to inf
    got = ref.astype(dtype)
    return got, ref


def measure(source: str, function: str, elements: int, dtype: str) -> dict[str, Any]:
    comparison = load(source)
    got, ref = arrays(elements, dtype)
    call = {
        "check_against": lambda: comparison.check_against({"Y": got}, {"Y": ref}, comparison.Tolerance.of([dtype])),
        "max_abs_error": lambda: comparison.max_abs_error({"Y": got}, {"Y": ref}),
        "reference_report": lambda: comparison.reference_report(got, ref),
    }[function]
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # first: ru_maxrss only grows
    call()
    grown_mib = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    start = time.perf_counter()  # the second call, warm
    result = call()
    seconds = time.perf_counter() - start
    tracemalloc.start()
    call()
    peak_mib = tracemalloc.get_traced_memory()[1] / 2**20
    tracemalloc.stop()
    return {"seconds": seconds, "maxrss_growth_mib": grown_mib, "tracemalloc_peak_mib": peak_mib,
            "output_f64_mib": elements * 8 / 2**20, "result": repr(result)[:80]}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--elements", type=int, default=20_000_000)
    parser.add_argument("--source", action="append", help="comparison.py to load (default: the package's)")
    parser.add_argument("--function", action="append", choices=FUNCTIONS)
    parser.add_argument("--dtype", action="append", choices=DTYPES)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--one", nargs=3, metavar=("SOURCE", "FUNCTION", "DTYPE"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(measure(args.one[0], args.one[1], args.elements, args.one[2])))
        return
    for function in args.function or FUNCTIONS[:2]:
        for dtype in args.dtype or DTYPES[:2]:
            for _ in range(args.repeat):
                for source in args.source or ["package"]:  # alternately, in fresh processes
                    out = subprocess.run([sys.executable, __file__, "--elements", str(args.elements),
                                          "--one", source, function, dtype], capture_output=True, text=True, check=True)  # fmt: skip
                    m = json.loads(out.stdout)
                    print(f"{function:16} {dtype:7} {source:30} {m['seconds'] * 1e3:8.1f} ms  "
                          f"tracemalloc peak {m['tracemalloc_peak_mib']:7.1f} MiB  ru_maxrss +{m['maxrss_growth_mib']:6.1f} MiB  "
                          f"(output in float64: {m['output_f64_mib']:.0f} MiB)  {m['result']}", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
