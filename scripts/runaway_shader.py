"""Does `webgpu-kernels test --timeout` stop a child whose shader runs on?

Builds a copy of QuickGelu whose scalar variant loops ITERATIONS times per element (2M elements),
runs `test --timeout TIMEOUT --json` on it, and prints how the child ended and how long the parent
waited. On lavapipe each loop ends after 65,535 iterations (a driver cap); a GPU runs them all, so
keep ITERATIONS such that the shader would end on its own within minutes if the kill did not stop it.

    python3 scripts/runaway_shader.py [ITERATIONS] [TIMEOUT]
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from webgpu_kernels.package import embedded_root

ITERATIONS = int(sys.argv[1]) if len(sys.argv) > 1 else 4_000_000_000
TIMEOUT = int(sys.argv[2]) if len(sys.argv) > 2 else 20
ELEMENTS = 2_000_000  # within test.json's 8 MiB a file for the expected output

root = Path(tempfile.mkdtemp()) / "slow"
shutil.copytree(embedded_root() / "com.microsoft.QuickGelu", root)
for path in root.iterdir():
    path.chmod(0o644)
(root / "metadata.json").unlink()
template = root / "quick-gelu.wgsl.jinja"
scalar = "fn quick_gelu(v: f32) -> f32 {\n  return v / (1.0 + exp(-ALPHA * v));\n}"
text = template.read_text(encoding="utf-8")
assert scalar in text
template.write_text(text.replace(scalar, (
    "fn quick_gelu(v: f32) -> f32 {\n  var acc = v;\n"
    f"  for (var k = 0u; k < {ITERATIONS}u; k++) {{\n"
    "    acc = sin(acc) + cos(acc * 1.5) + exp(-abs(acc)) + sqrt(abs(acc) + 1.0);\n  }\n  return acc;\n}")),
    encoding="utf-8")  # fmt: skip
np.save(root / "big.Y.npy", np.zeros(ELEMENTS, np.float32))
(root / "test.json").write_text(json.dumps({"cases": [{
    "name": "big", "types": {"T": "float32"}, "variants": ["scalar"],
    "inputs": {"X": {"shape": [ELEMENTS], "generate": {"distribution": "normal", "seed": 1}}},
    "expected": {"Y": {"file": "big.Y.npy"}}}]}), encoding="utf-8")  # fmt: skip

started = time.perf_counter()
done = subprocess.run([sys.executable, "-m", "webgpu_kernels", "test", str(root), "--timeout", str(TIMEOUT), "--json"],
                      capture_output=True, text=True)  # fmt: skip
waited = time.perf_counter() - started
print(f"iterations {ITERATIONS}, timeout {TIMEOUT} s: exit {done.returncode} after {waited:.1f} s")
try:
    (package,) = json.loads(done.stdout)["packages"]
    print("adapter:", package.get("adapter"))
    print("package error:", package.get("error"))
    for run in package.get("results", []):
        print("run:", run["case"], run["variant"], run["status"], "|", run.get("message"), "|", run.get("seconds"))
except (ValueError, KeyError) as exc:
    print("no JSON report:", exc, done.stdout[-2000:], done.stderr[-2000:])
