"""How long, and how much memory, the adapter's own compiler takes for a small hostile shader: a
WGSL function of LOOPS one-iteration loops, each writing the output, called CALLS times from the
entry point. The rendered text is a few KB, far inside every bound of the sandbox and the WGSL
checks; lavapipe (Mesa's CPU Vulkan, LLVM) inlines every call and its compile time and memory
grow faster than the loops it inlines. Each size runs in a child process of its own, so the peak
RSS is that compile's; the child is stopped after TIMEOUT s.

    python3 scripts/driver_compile_cost.py [LOOPS] [CALLS ...] [--timeout TIMEOUT]
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

MANIFEST = {
    "domain": "com.probe", "name": "Compile", "sinceVersion": 1,
    "inputs": [{"role": "A", "dtype": "T"}],
    "outputs": [{"role": "Y", "dtype": "T", "rank": "ranks.A", "shape": "shapes.A"}],
    "typeConstraints": {"T": ["float32"]},
    "derive": {"n": "numel(shapes.A)"},
    "variants": [{"id": "v", "passes": [{
        "id": "main", "shader": "k.wgsl.jinja",
        "bindings": [
            {"name": "a", "arg": "A", "buffer": {"type": "read-only-storage"}, "elementType": "f32"},
            {"name": "y", "arg": "Y", "buffer": {"type": "storage"}, "elementType": "f32"},
            {"name": "params", "semantic": "kernel.params", "buffer": {"type": "uniform"},
             "struct": {"name": "Params", "fields": [{"name": "count", "type": "u32", "value": "n"}]}},
        ],
        "dispatch": {"threads": "n", "workgroupSize": 64},
    }]}],
}  # fmt: skip

TEMPLATE = """{{ declarations }}
fn f(j: u32) {
{% for q in range(LOOPS) %}  for (var k{{ q }} = 0u; k{{ q }} < 1u; k{{ q }}++) { y[j] = a[j] * 2.0; }
{% endfor %}}
@compute @workgroup_size({{ workgroupSize }})
fn {{ entryPoint }}({{ entryParams }}) {
  let i = {{ globalIndex }};
  if (i >= params.count) { return; }
{% for q in range(CALLS) %}  f(i);
{% endfor %}}
"""


def child(folder: str) -> None:
    import webgpu_kernels as wk

    kernel = wk.load_kernel(folder)
    wgsl = kernel.render({"A": ((8,), "float32")})["main"]
    start = time.perf_counter()
    result = kernel({"A": np.ones(8, np.float32)})["Y"]
    seconds = time.perf_counter() - start
    assert result.tolist() == [2.0] * 8
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"wgsl_bytes": len(wgsl.encode()), "seconds": round(seconds, 2), "peak_mib": round(peak)}))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("loops", type=int, nargs="?", default=50)
    parser.add_argument("calls", type=int, nargs="*", default=[1, 5, 10, 20])
    parser.add_argument("--timeout", type=float, default=300)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child)
        return 0
    for calls in args.calls:
        folder = Path(tempfile.mkdtemp(prefix="wk-compile-"))
        (folder / "manifest.json").write_text(json.dumps(MANIFEST))
        (folder / "k.wgsl.jinja").write_text(TEMPLATE.replace("LOOPS", str(args.loops)).replace("CALLS", str(calls)))
        try:
            done = subprocess.run([sys.executable, __file__, "--child", str(folder)], capture_output=True, text=True,
                                  timeout=args.timeout, check=True)  # fmt: skip
            print(f"{args.loops} loops x {calls} calls: {done.stdout.strip()}", flush=True)
        except subprocess.TimeoutExpired:
            print(f"{args.loops} loops x {calls} calls: still compiling after {args.timeout:.0f} s, stopped", flush=True)
        except subprocess.CalledProcessError as exc:
            print(f"{args.loops} loops x {calls} calls: failed: {exc.stderr.strip()[-400:]}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
