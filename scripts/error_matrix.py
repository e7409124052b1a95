#!/usr/bin/env python3
"""Run the variant x dtype x shape matrix of the seed kernels (and the test package
demo.ScaleShift) on the WebGPU device and print the largest error against the float64 NumPy
references of tests/references.py, one row per kernel / variant / dtype.

    python scripts/error_matrix.py            # the table
    python scripts/error_matrix.py --cases    # also one line per case

Each variant is forced (``variant=``) on every shape where its ``when`` holds; "default" counts
the cases in which it is also the default choice. "of tol" is the largest error as a fraction of
the tolerance the tests allow for that element (tests/references.py: atol + rtol * |reference|),
so 1.0 would be a failing test. BiasAdd's relative error is large only where X + bias + skip
cancels; its tolerance is bounded by eps * (|X| + |bias| + |skip|) instead.
"""

from __future__ import annotations

import argparse
import atexit
import os
import shutil
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

if not os.environ.get("XDG_RUNTIME_DIR"):  # a folder made only when needed, and removed at exit
    os.environ["XDG_RUNTIME_DIR"] = tempfile.mkdtemp(prefix="wk-xdg-")
    atexit.register(shutil.rmtree, os.environ["XDG_RUNTIME_DIR"], ignore_errors=True)

import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

import webgpu_kernels as wk  # noqa: E402
from webgpu_kernels.errors import SelectionError  # noqa: E402

import references as ref  # noqa: E402

DTYPES = (np.float32, np.float16)
QUICK_GELU_SHAPES = [(), (1,), (3,), (5,), (8,), (2, 3), (2, 4), (2, 3, 5), (2, 2, 2, 2, 2), (1, 1, 1, 1, 5),
                     (2, 77, 64), (1, 50, 3072 // 16), (1, 4099)]  # fmt: skip
QUICK_GELU_ALPHAS = (1.702, 1.0, 0.0, -1.0)
BIAS_ADD_SHAPES = [(1, 5, 3), (2, 5, 3), (1, 3, 6), (2, 2, 6), (2, 5, 4), (1, 1, 4), (2, 5, 320), (1, 3, 320),
                   (1, 3, 1280), (2, 1, 1280), (2, 1, 640), (2, 5, 768), (1, 3, 1536), (2, 64, 320)]  # fmt: skip
SCALE_SHIFT_SHAPES = [(), (3,), (8,), (2, 3, 5), (4, 64)]


def inputs_for(rng: np.random.Generator, shape: tuple[int, ...], dtype, spread: float = 4.0) -> np.ndarray:
    return (rng.standard_normal(shape) * spread).astype(dtype)


def run_matrix(show_cases: bool) -> list[tuple]:
    rng = np.random.default_rng(20260911)
    device = wk.get_device()
    dtypes = [d for d in DTYPES if d is np.float32 or device.has_f16]
    stats: dict[tuple, list] = defaultdict(lambda: [0.0, 0.0, 0, 0, set(), 0.0])

    def record(kernel: wk.Kernel, variant: str, dtype, shape, actual, reference, default: bool, tol) -> None:
        abs_err, rel_err = ref.max_errors(actual, reference, dtype)
        row = stats[(kernel.op_id, variant, np.dtype(dtype).name)]
        row[0] = max(row[0], abs_err)
        row[1] = max(row[1], rel_err)
        row[2] += 1
        row[3] += int(default)
        row[4].add(shape)
        row[5] = max(row[5], tolerance_used(actual, reference, dtype, tol))
        if show_cases:
            print(f"  {kernel.op_id:24} {variant:10} {np.dtype(dtype).name:8} {str(shape):18} "
                  f"abs {abs_err:.3e} rel {rel_err:.3e}{' (default)' if default else ''}")  # fmt: skip

    def forced_runs(kernel: wk.Kernel, inputs: dict, attrs: dict | None):
        default = kernel.explain(inputs, attrs=attrs).chosen
        for variant in kernel.variants:
            try:
                out = kernel(inputs, attrs=attrs, variant=variant)["Y"]
            except SelectionError:
                continue  # its `when` does not hold for this shape
            yield variant, out, variant == default

    quick_gelu = wk.get_kernel("com.microsoft.QuickGelu")
    for dtype in dtypes:
        for shape in QUICK_GELU_SHAPES:
            for alpha in QUICK_GELU_ALPHAS:
                x = inputs_for(rng, shape, dtype)
                expected = ref.quick_gelu(x, alpha)
                for variant, y, default in forced_runs(quick_gelu, {"X": x}, {"alpha": alpha}):
                    record(quick_gelu, variant, dtype, shape, y, expected, default, ref.quick_gelu_tolerance(dtype))

    bias_add = wk.get_kernel("com.microsoft.BiasAdd")
    for dtype in dtypes:
        for shape in BIAS_ADD_SHAPES:
            x, skip = inputs_for(rng, shape, dtype), inputs_for(rng, shape, dtype)
            bias = inputs_for(rng, shape[-1:], dtype)
            expected = ref.bias_add(x, bias, skip)
            for variant, y, default in forced_runs(bias_add, {"X": x, "bias": bias, "skip": skip}, None):
                record(bias_add, variant, dtype, shape, y, expected, default,
                       ref.bias_add_tolerance(x, bias, skip, dtype))  # fmt: skip

    scale_shift = wk.load_kernel(ROOT / "tests" / "packages" / "demo.ScaleShift")
    for dtype in dtypes:
        for shape in SCALE_SHIFT_SHAPES:
            x = inputs_for(rng, shape, dtype)
            attrs = {"scale": 1.5, "shift": -0.25}
            expected = ref.scale_shift(x, 1.5, -0.25)
            for variant, y, default in forced_runs(scale_shift, {"X": x}, attrs):
                record(scale_shift, variant, dtype, shape, y, expected, default,
                       ref.scale_shift_tolerance(x, 1.5, -0.25, dtype))  # fmt: skip

    return [(k, v, d, *row[:4], len(row[4]), row[5]) for (k, v, d), row in stats.items()]


def tolerance_used(actual, reference, dtype, tol) -> float:
    """max |actual - reference| / (atol + rtol * |reference|) over the finite elements."""
    expected = ref.expected_in(dtype, reference)
    got = np.asarray(actual, dtype=np.float64)
    finite = np.isfinite(expected) & np.isfinite(got)
    if not finite.any():
        return 0.0
    allowed = np.broadcast_to(np.asarray(tol["atol"], np.float64), expected.shape) + tol["rtol"] * np.abs(expected)
    return float((np.abs(got - expected)[finite] / allowed[finite]).max())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cases", action="store_true", help="print every case, not only the table")
    args = parser.parse_args()
    device = wk.get_device()
    print(f"device: {device.adapter.label()}, shader-f16: {device.has_f16}")
    rows = run_matrix(args.cases)
    header = ("kernel", "variant", "dtype", "max abs err", "max rel err", "of tol", "cases", "default", "shapes")
    widths = (24, 10, 8, 12, 12, 7, 6, 8, 6)
    line = "  ".join(h.ljust(w) for h, w in zip(header, widths))
    print(line)
    print("-" * len(line))
    for kernel, variant, dtype, abs_err, rel_err, cases, defaults, shapes, used in rows:
        cells = (kernel, variant, dtype, f"{abs_err:.3e}", f"{rel_err:.3e}", f"{used:.3f}", str(cases), str(defaults),
                 str(shapes))  # fmt: skip
        print("  ".join(c.ljust(w) for c, w in zip(cells, widths)).rstrip())
    print("\nmax per dtype:")
    for dtype in sorted({r[2] for r in rows}):
        sel = [r for r in rows if r[2] == dtype]
        for kernel in sorted({r[0] for r in sel}):
            k_rows = [r for r in sel if r[0] == kernel]
            print(f"  {dtype:8} {kernel:24} abs {max(r[3] for r in k_rows):.3e}  rel {max(r[4] for r in k_rows):.3e}"
                  f"  of tol {max(r[8] for r in k_rows):.3f}")  # fmt: skip


if __name__ == "__main__":
    main()
