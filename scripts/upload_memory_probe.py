"""Host memory and time of back-to-back uploads with no dispatch between them (to_gpu), as when a
model's weights are loaded: wgpu-native keeps a staging copy of each write until a submission
carries it (buffers.MAX_UNSUBMITTED_WRITE_BYTES).

    python scripts/upload_memory_probe.py [COUNT] [MIB]
"""

import sys
import time

import numpy as np

import webgpu_kernels as wk


def rss_mb() -> int:
    return int(open("/proc/self/status").read().split("VmRSS:")[1].split()[0]) // 1024


count = int(sys.argv[1]) if len(sys.argv) > 1 else 100
mib = int(sys.argv[2]) if len(sys.argv) > 2 else 16
x = np.random.default_rng(0).standard_normal(mib << 18).astype(np.float32)
wk.to_gpu(x).numpy()  # device, pool and staging ready
for keep in (False, True):
    start_rss, kept = rss_mb(), []
    start = time.perf_counter()
    for _ in range(count):
        tensor = wk.to_gpu(x)
        if keep:
            kept.append(tensor)
        else:
            tensor.release()
    wk.synchronize()
    seconds = time.perf_counter() - start
    grown = rss_mb() - start_rss
    check = float(np.abs(kept[-1].numpy() - x).max()) if keep else 0.0
    print(f"{'kept' if keep else 'released'}: {count} x {mib} MiB to_gpu in {seconds * 1e3:.1f} ms "
          f"({count * mib / 1024 / seconds:.2f} GiB/s), host memory +{grown} MB after synchronize(); max |error| {check}")
    for tensor in kept:
        tensor.release()
    wk.empty_cache()
