"""Host time of a call whose shape is new (a plan built: expressions, selection, render, checks,
bind group) against a call of a shape already planned, for QuickGelu on 5040 float32 elements
reshaped to rank-5 shapes (each call a new one), outputs left on the GPU. The difference is what a
cache miss costs, as a caller with varying shapes (sequence lengths) pays it.

    python scripts/new_shape_cost.py [--calls 1500]

To compare two versions, run it with PYTHONPATH naming the other one's src.
"""

import argparse
import itertools
import statistics
import time

import numpy as np

import webgpu_kernels as wk


def rank5_shapes(n: int):
    """Every ordered way to write ``n`` as a product of five positive integers."""
    for a in range(1, n + 1):
        if n % a:
            continue
        for b in range(1, n // a + 1):
            if (n // a) % b:
                continue
            for c in range(1, n // a // b + 1):
                if (n // a // b) % c:
                    continue
                for d in range(1, n // a // b // c + 1):
                    if (n // a // b // c) % d == 0:
                        yield (a, b, c, d, n // a // b // c // d)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=1500, help="calls of each kind (default 1500)")
    args = parser.parse_args()
    kernel = wk.get_kernel("com.microsoft.QuickGelu")
    x = np.random.default_rng(0).standard_normal(5040).astype(np.float32)
    shapes = list(itertools.islice(rank5_shapes(5040), 200 + args.calls))

    def timed(shape: tuple[int, ...]) -> float:
        started = time.perf_counter()
        kernel({"X": x.reshape(shape)}, output="gpu")["Y"].release()
        return time.perf_counter() - started

    for shape in shapes[:200]:  # the pipeline compiled, the pool and the caches warm
        timed(shape)
    new = [timed(shape) for shape in shapes[200:]]
    same = [timed(shapes[-1]) for _ in range(args.calls)]
    new_ms, same_ms = statistics.median(new) * 1e3, statistics.median(same) * 1e3
    print(f"new shape {new_ms:.3f} ms, same shape {same_ms:.3f} ms per call (medians of {args.calls}); "
          f"a plan costs {new_ms - same_ms:.3f} ms")


if __name__ == "__main__":
    main()
