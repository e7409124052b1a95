"""Host time of Kernel.explain for one call (QuickGelu 2x77x3072 float16), best of 5 rounds of 100: the
cost of what explain judges (selection, device limits, rendering). Run it against another tree with
PYTHONPATH=DIR/src (git archive REV src | tar -x -C DIR)."""

import time

import webgpu_kernels as wk
from webgpu_kernels import TensorMeta

k = wk.get_kernel("com.microsoft.QuickGelu")
x = {"X": TensorMeta((2, 77, 3072), "float16")}
k.explain(x)
best = []
for _ in range(5):
    t = time.perf_counter()
    for _ in range(100):
        k.explain(x)
    best.append((time.perf_counter() - t) / 100 * 1e3)
print(f"explain: {min(best):.2f} ms per call (best of 5 rounds of 100)")
