"""Peak memory and time of rendering a template that slices a 1 MB string N times (the attack the
slice review found: slices were not charged to the render budget). Compare two trees:

    PYTHONPATH=OLD/src python scripts/slice_budget_probe.py 3000
    python scripts/slice_budget_probe.py 3000
"""
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path

import webgpu_kernels as wk

n = int(sys.argv[1])
src = Path(__file__).resolve().parents[1] / "tests" / "packages" / "demo.ScaleShift"
root = Path(tempfile.mkdtemp()) / "pkg"
shutil.copytree(src, root)
t = root / "scale-shift.wgsl.jinja"
attack = "{% set s = 'a' * 1000000 %}{% set l = [" + ", ".join(["s[1:]"] * n) + "] %}\n"
t.write_text(attack + t.read_text())
k = wk.load_kernel(root)
start = time.perf_counter()
try:
    k.render({"X": wk.TensorMeta((3,), "float32")})
    outcome = "rendered"
except wk.KernelError as exc:
    outcome = f"refused: {type(exc).__name__}: {str(exc)[:120]}"
print(f"{wk.__file__}: {n} slices: {outcome}; {time.perf_counter() - start:.1f} s; "
      f"peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6:.2f} GB")
