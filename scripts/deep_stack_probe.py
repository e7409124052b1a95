"""Flat WGSL that wgpu-native's compiler recurses on, compiled on the caller's stack and on the
deep-stack thread (webgpu_kernels.deep_stack), each in a child process (a crash is exit -11).

    python3 scripts/deep_stack_probe.py

On lavapipe: 40,000 functions each calling the next (1.0 MB), 45,000 constants each
naming the next (1.0 MB) and a sum of 200,000 hex literals (1.0 MB) each crashed on the caller's
stack and compiled on the deep one.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

CHILD = """
import sys, wgpu
from webgpu_kernels.deep_stack import on_deep_stack
gpu = wgpu.utils.get_default_device()
code = open(sys.argv[1], encoding="utf-8").read()
build = lambda: gpu.create_shader_module(code=code)
on_deep_stack(build) if sys.argv[2] == "deep" else build()
print("compiled")
"""

OUT = "@group(0) @binding(0) var<storage, read_write> o: array<u32, 4>;\n"
CASES = {
    "40,000 functions, each calling the next": "".join(f"fn f{i}() {{ f{i + 1}(); }}\n" for i in range(40_000))
    + "fn f40000() {}\n@compute @workgroup_size(1) fn main() { f0(); }\n",
    "45,000 constants, each naming the next": "".join(f"const c{i} = c{i + 1};\n" for i in range(45_000))
    + "const c45000 = 1u;\n" + OUT + "@compute @workgroup_size(1) fn main() { o[0] = c0; }\n",
    "a sum of 200,000 hex literals": OUT + "@compute @workgroup_size(1) fn main() {\n  o[0] = u32("
    + "+".join(["0x1e"] * 200_000) + ");\n}\n",
}


def main() -> None:
    with tempfile.TemporaryDirectory() as folder:
        for name, code in CASES.items():
            path = Path(folder) / "probe.wgsl"
            path.write_text(code, "utf-8")
            for where in ("caller", "deep"):
                child = subprocess.run([sys.executable, "-c", CHILD, str(path), where], capture_output=True,
                                       text=True, timeout=600)  # fmt: skip
                outcome = "compiled" if "compiled" in child.stdout else f"exit {child.returncode}"
                print(f"{name} ({len(code.encode()) / 1e6:.1f} MB), {where} stack: {outcome}", flush=True)


if __name__ == "__main__":
    main()
