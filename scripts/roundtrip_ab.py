"""NumPy-in, NumPy-out round trips (benchmark.numpy_round_trip) of this tree's code, or another's
put first on PYTHONPATH (an untracked copy: git archive REV src | tar -x -C DIR), three samples
each, for an A/B of the round-trip path on one host:

    PYTHONPATH=DIR/src python3 scripts/roundtrip_ab.py; python3 scripts/roundtrip_ab.py
"""

import numpy as np

import webgpu_kernels as wk
from webgpu_kernels.benchmark import numpy_round_trip

print(wk.__file__)
rng = np.random.default_rng(0)
quick_gelu, bias_add = wk.get_kernel("com.microsoft.QuickGelu"), wk.get_kernel("com.microsoft.BiasAdd")
x = rng.standard_normal(4096).astype(np.float32)
mid = rng.standard_normal((2, 64, 1280)).astype(np.float32)
sdxl = rng.standard_normal((2, 1024, 1280)).astype(np.float32)
bias = rng.standard_normal(1280).astype(np.float32)
for name, kernel, inputs in (("QuickGelu tiny-4096 f32", quick_gelu, {"X": x}),
                             ("BiasAdd sd15-mid-2x64x1280 f32", bias_add, {"X": mid, "bias": bias, "skip": mid}),
                             ("BiasAdd sdxl-2x1024x1280 f32", bias_add, {"X": sdxl, "bias": bias, "skip": sdxl})):
    print(name, "ms:", [round(numpy_round_trip(kernel, inputs) * 1e3, 3) for _ in range(3)])
