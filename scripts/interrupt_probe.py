"""Ctrl-C at random moments of wk.synchronize(): is a tensor whose work was dropped ever read
back silently wrong? (at 9191ee9, before batches were tracked: 253 of 3000, this script)

    python3 scripts/interrupt_probe.py [TRIALS]

Each trial records a QuickGelu call with output="gpu", arms SIGALRM (raising KeyboardInterrupt)
0-400 us ahead, synchronizes, then reads the tensor: right, flagged (UncomputedTensorError) or wrong.
"""

from __future__ import annotations

import random
import signal
import sys
import time

import numpy as np

import webgpu_kernels as wk

trials = int(sys.argv[1]) if len(sys.argv) > 1 else 3000
signal.signal(signal.SIGALRM, signal.default_int_handler)
kernel = wk.get_kernel("com.microsoft.QuickGelu")
x = np.linspace(-3, 3, 1024, dtype=np.float32)
inputs = [wk.to_gpu(x), wk.to_gpu(-x)]
expected = [kernel({"X": t})["Y"] for t in inputs]  # alternating: a stale buffer holds the other one
interrupted = flagged = wrong = 0
random.seed(1)
for i in range(trials):
    y = kernel({"X": inputs[i % 2]}, output="gpu")["Y"]
    try:
        signal.setitimer(signal.ITIMER_REAL, random.uniform(0, 4e-4))
        wk.synchronize()
        time.sleep(1e-3)
    except KeyboardInterrupt:
        interrupted += 1
    signal.setitimer(signal.ITIMER_REAL, 0)
    try:
        wrong += not np.array_equal(y.numpy(), expected[i % 2])
    except wk.UncomputedTensorError:
        flagged += 1
    y.release()
print(f"{trials} trials: interrupted {interrupted}, flagged uncomputed {flagged}, silently wrong {wrong}")
