"""Host time per call with a list attribute against the same values as a tuple, on GPU-resident
tensors (best of 4 x 5,000 calls of tests/test_execution.py's RAW_ATTRS package), and what choosing
a device by a request string costs (device.choose_adapter) against get_device's cached lookup.

    python scripts/list_attr_cost.py        (PYTHONPATH=OTHER/src for another tree's engine)
"""

import json
import pathlib
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "tests"))
from test_execution import RAW_ATTRS_MANIFEST, RAW_ATTRS_WGSL  # noqa: E402

import webgpu_kernels as wk  # noqa: E402
from webgpu_kernels.device import choose_adapter  # noqa: E402

print(wk.__file__)
folder = pathlib.Path(tempfile.mkdtemp())
(folder / "manifest.json").write_text(json.dumps(RAW_ATTRS_MANIFEST))
(folder / "raw.wgsl.jinja").write_text(RAW_ATTRS_WGSL)
kernel = wk.load_kernel(folder)
x = wk.to_gpu(np.ones(4096, np.float32))
for attrs in ({"coef": (1.0, 1.0)}, {"coef": [1.0, 1.0]}):
    rounds = []
    for _ in range(4):
        start = time.perf_counter()
        for _ in range(5000):
            kernel({"X": x}, attrs=attrs, output="gpu")
        rounds.append((time.perf_counter() - start) / 5000 * 1e6)
        wk.synchronize()
    print(f"{type(attrs['coef']).__name__} attribute: {min(rounds):.1f} us per call")

request = wk.get_device().adapter.backend.lower()
rounds = []
for _ in range(5):
    start = time.perf_counter()
    for _ in range(2000):
        choose_adapter(request)
    rounds.append((time.perf_counter() - start) / 2000 * 1e6)
wk.get_device(request)
start = time.perf_counter()
for _ in range(20000):
    wk.get_device(request)
cached = (time.perf_counter() - start) / 20000 * 1e6
print(f"choose_adapter({request!r}): {min(rounds):.1f} us; get_device({request!r}) once chosen: {cached:.2f} us")
