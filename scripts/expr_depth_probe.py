"""Deep WGSL expressions built into a pipeline on the deep-stack thread (webgpu_kernels.deep_stack),
each in a child process (a crash is exit -11): how deep the nesting check may let them go.

    python3 scripts/expr_depth_probe.py [DEPTH]    (default 8192)
"""

from __future__ import annotations

import subprocess
import sys

CHILD = """
import sys, wgpu
from webgpu_kernels.deep_stack import on_deep_stack
body, n = sys.argv[1], int(sys.argv[2])
body = {"not": "let z = " + "!" * n + "true;", "sum": "let z = " + "1.0 + " * n + "1.0;",
        "member": "let v = vec4f(1.0); let z = vec4f(v" + ".xyzw" * n + ");",
        "parens": "let z = " + "(" * min(n, 256) + "1.0" + ")" * min(n, 256) + ";"}[body]
code = "fn probe() {\\n  " + body + "\\n}\\n@compute @workgroup_size(1) fn main() { probe(); }\\n"
gpu = wgpu.utils.get_default_device()
on_deep_stack(lambda: gpu.create_compute_pipeline(layout="auto", compute={
    "module": gpu.create_shader_module(code=code), "entry_point": "main"}))
print("compiled on", gpu.adapter.info["device"])
"""


def main() -> None:
    depth = int(sys.argv[1]) if len(sys.argv) > 1 else 8192
    for kind in ("not", "sum", "member", "parens"):
        child = subprocess.run([sys.executable, "-c", CHILD, kind, str(depth)], capture_output=True, text=True,
                               timeout=300)  # fmt: skip
        outcome = child.stdout.strip().splitlines()[-1] if child.returncode == 0 else f"exit {child.returncode}"
        print(f"{kind} x{depth}: {outcome}", flush=True)


if __name__ == "__main__":
    main()
