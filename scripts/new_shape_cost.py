"""Host time of a call whose shape is new (a plan built: expressions, selection, render, checks,
bind group) against a call of a shape already planned, for QuickGelu on 5040 float32 elements
reshaped to rank-5 shapes (each call a new one), outputs left on the GPU. The difference is what a
cache miss costs, as a caller with varying shapes (sequence lengths) pays it.

With ``--tuned``, a copy of tests/packages/demo.LayerNorm instead, its Mean and InvStdDev made
optional outputs (as ONNX's are; no shipped package has one), on X of 2 or 3 rows of
1024-2047 elements (few rows: little GPU work, one workgroup a row), with a stored tuning entry for that shape class in a temporary tuning folder:
every new shape also looks the entry up and checks that it returns the outputs the manifest's own
selection does.

    python scripts/new_shape_cost.py [--calls 1500] [--tuned] [--cpu] [--profile FILE]

``--cpu`` times the calling thread's CPU time (time.thread_time) instead of the wall clock: on a
loaded machine it moves far less, and the host work is all on that thread.

To compare two versions, run it with PYTHONPATH naming the other one's src.
"""

import argparse
import itertools
import json
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

import webgpu_kernels as wk

clock = time.perf_counter


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


def quick_gelu(calls: int):
    """QuickGelu's timed call and its shapes."""
    kernel = wk.get_kernel("com.microsoft.QuickGelu")
    x = np.random.default_rng(0).standard_normal(5040).astype(np.float32)

    def timed(shape: tuple[int, ...]) -> float:
        started = clock()
        kernel({"X": x.reshape(shape)}, output="gpu")["Y"].release()
        return clock() - started

    return timed, list(itertools.islice(rank5_shapes(5040), 200 + calls))


def tuned_layer_norm(calls: int):
    """demo.LayerNorm's timed call (X, Scale and B) and its shapes, one shape class, for which a
    tuning entry is stored (onepass with WORKGROUP_SIZE 128 and ROW_ITEMS 16; the default is 256 and 8)."""
    from webgpu_kernels import tuning
    from webgpu_kernels.device import get_device

    scratch = Path(tempfile.mkdtemp(prefix="new-shape-cost-"))
    os.environ[tuning.CACHE_ENV] = str(scratch / "tuning")  # no real tuning file read
    folder = scratch / "LayerNorm"
    shutil.copytree(Path(__file__).resolve().parent.parent / "tests" / "packages" / "demo.LayerNorm", folder)
    (folder / "metadata.json").unlink()  # its digests are the original's
    manifest = json.loads((folder / "manifest.json").read_text())
    for spec in manifest["outputs"][1:]:  # Mean, InvStdDev: each call checks the stored entry keeps them
        spec["optional"] = True
    (folder / "manifest.json").write_text(json.dumps(manifest))
    kernel = wk.load_kernel(folder)
    rng = np.random.default_rng(0)
    x, scale, bias = (rng.standard_normal(n).astype(np.float32) for n in (3 * 2047, 2047, 2047))
    adapter = get_device().adapter
    cache = tuning.cache_for(adapter.name, adapter.backend)
    cache.record(kernel.tuning_key, *kernel.tuning_class({"X": x[:2 * 1024].reshape(2, 1024), "Scale": scale[:1024],
                                                          "B": bias[:1024]})[:2],  # fmt: skip
                 tuning.TunedChoice("onepass", {"WORKGROUP_SIZE": 128, "ROW_ITEMS": 16}, 1e-5))
    rows_norms = [(r, n) for n in range(1024, 2048) for r in (2, 3)]
    shapes = [rows_norms[i] for i in np.random.default_rng(1).permutation(len(rows_norms))[:200 + calls]]

    def timed(shape: tuple[int, ...]) -> float:
        rows, norm = shape
        inputs = {"X": x[:rows * norm].reshape(rows, norm), "Scale": scale[:norm], "B": bias[:norm]}
        started = clock()
        for out in kernel(inputs, output="gpu").values():
            out.release()
        return clock() - started

    plan = kernel.plan({"X": x[:3 * 2047].reshape(3, 2047), "Scale": scale, "B": bias}, tuned=True)[1]
    assert plan.tunables["WORKGROUP_SIZE"] == 128, "the stored entry does not apply"
    return timed, shapes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=1500, help="calls of each kind (default 1500)")
    parser.add_argument("--tuned", action="store_true",
                        help="LayerNorm with optional outputs and a stored tuning entry, not QuickGelu")
    parser.add_argument("--profile", metavar="FILE", help="write a cProfile of the new-shape calls to FILE")
    parser.add_argument("--cpu", action="store_true", help="this thread's CPU time, not the wall clock")
    args = parser.parse_args()
    if args.cpu:
        global clock
        clock = time.thread_time
    timed, shapes = (tuned_layer_norm if args.tuned else quick_gelu)(args.calls)

    for shape in shapes[:200]:  # the pipeline compiled, the pool and the caches warm
        timed(shape)
    if args.profile:
        import cProfile

        with cProfile.Profile() as profile:
            new = [timed(shape) for shape in shapes[200:]]
        profile.dump_stats(args.profile)
    else:
        new = [timed(shape) for shape in shapes[200:]]
    same = [timed(shapes[-1]) for _ in range(args.calls)]
    new_ms, same_ms = statistics.median(new) * 1e3, statistics.median(same) * 1e3
    print(f"new shape {new_ms:.3f} ms, same shape {same_ms:.3f} ms per call (medians of {args.calls}); "
          f"a plan costs {new_ms - same_ms:.3f} ms")


if __name__ == "__main__":
    main()
