"""Two host-side effects seen while measuring NumPy round trips (run anywhere; lavapipe is fine):

1. One command encoder holding many compute passes makes every later submit in the process slower
   (wgpu-native keeps and resets that encoder's command buffers when it reuses it).
2. The engine's round trip with the staging buffer mapped as READ (wgpu-py first submits an empty
   command buffer) against "READ_NOSYNC" (it does not), alternated in one process.

    python scripts/submit_probe.py
"""

import statistics
import subprocess
import sys

import numpy as np

if len(sys.argv) > 1 and sys.argv[1] == "passes":  # child: a fresh process per pass count
    import webgpu_kernels as wk
    from webgpu_kernels.benchmark import numpy_round_trip
    from webgpu_kernels.device import get_device

    kernel = wk.get_kernel("com.microsoft.QuickGelu")
    x = np.random.default_rng(0).standard_normal(4096).astype(np.float32)
    before = min(numpy_round_trip(kernel, {"X": x}) for _ in range(3))
    gpu = get_device().gpu
    encoder = gpu.create_command_encoder()
    for _ in range(int(sys.argv[2])):
        encoder.begin_compute_pass().end()
    gpu.queue.submit([encoder.finish()])
    wk.synchronize()
    kernel({"X": x})  # waits for the GPU
    after = min(numpy_round_trip(kernel, {"X": x}) for _ in range(3))
    print(f"{sys.argv[2]:>5} passes in one earlier encoder: round trip {before * 1e6:6.1f} -> {after * 1e6:6.1f} us")
    sys.exit(0)

for passes in (0, 100, 4000):
    subprocess.run([sys.executable, __file__, "passes", str(passes)], check=True)

import webgpu_kernels as wk  # noqa: E402
from webgpu_kernels import buffers  # noqa: E402
from webgpu_kernels.benchmark import numpy_round_trip  # noqa: E402

kernel = wk.get_kernel("com.microsoft.QuickGelu")
for n in (4096, 236544):
    x = np.random.default_rng(0).standard_normal(n).astype(np.float32)
    times = {"READ": [], "READ_NOSYNC": []}
    for _ in range(8):
        for mode in times:
            buffers.READBACK_MAP_MODE = "READ" if mode == "READ" else "READ_NOSYNC"
            times[mode].append(numpy_round_trip(kernel, {"X": x}, min_s=0.2))
    buffers.READBACK_MAP_MODE = "READ_NOSYNC"
    print(f"QuickGelu {n * 4} bytes round trip, median of 8: " +
          ", ".join(f"{mode} {statistics.median(v) * 1e6:.1f} us" for mode, v in times.items()))
