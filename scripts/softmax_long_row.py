"""One long softmax row on demo.Softmax, checked with tests/test_softmax_package.py's WGSL bound.

On lavapipe a row of 1,500,000 f32 at WORKGROUP_SIZE 64 comes back wrong without an error: the
row loop passes llvmpipe's 65,535-iteration limit (docs/format.md). On a real GPU it must not.
    python3 scripts/softmax_long_row.py [COLS ...]
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from test_softmax_package import PACKAGE, assert_softmax  # noqa: E402

import webgpu_kernels as wk  # noqa: E402


def main(columns: list[int]) -> int:
    softmax = wk.load_kernel(PACKAGE)
    rng = np.random.default_rng(28)
    failures = 0
    for cols in columns:
        x = rng.standard_normal((1, cols), dtype=np.float32)
        for tunables in ({"WORKGROUP_SIZE": 64}, None):
            start = time.perf_counter()
            y = softmax({"X": x}, tunables=tunables)["Y"]
            seconds = time.perf_counter() - start
            try:
                assert_softmax(y, x)
                verdict = "ok"
            except AssertionError as error:
                failures += 1
                verdict = f"WRONG: {error}"
            print(f"1x{cols} f32 tunables={tunables}: {verdict} (sum {float(y.sum(dtype=np.float64)):.6f}, {seconds:.2f} s)",
                  flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main([int(c) for c in sys.argv[1:]] or [1_000_000, 1_500_000, 4_000_000]))
