"""A CLIP text encoder MLP block on the GPU, without a browser.

    H = X @ W1 + b1          demo.MatMul, then com.microsoft.BiasAdd (skip = zeros)
    A = QuickGelu(H)         com.microsoft.QuickGelu, alpha 1.702
    Y = A @ W2 + b2 + X      demo.MatMul, then com.microsoft.BiasAdd (skip = X, the residual)

with CLIP ViT-L/14's text tower sizes (hidden 768, intermediate 3072, 77 tokens). The weights are
random (seeded, N(0, 0.02) as a fresh CLIP's init). Every intermediate stays on the GPU
(``output="gpu"``); only Y is read back, and compared with a float64 NumPy reference. The weights
stay 2-D (K, N), as a checkpoint has them: the MatMuls run on (B*77, K) views of X and A
(``GpuTensor.reshape``, no copy). ``--input-dtype float32`` with ``--dtype float16`` uploads X in
float32, as activations usually come, and converts it on the GPU (``GpuTensor.astype``).

    python3 examples/clip_mlp.py --batch 2 --dtype float16 [--input-dtype float32] [--adapter vulkan]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

import webgpu_kernels as wk

SEQUENCE, HIDDEN, INTERMEDIATE = 77, 768, 3072
ALPHA = 1.702  # quick_gelu: x * sigmoid(1.702 x)
INIT_STD = 0.02
#: Largest |Y - reference| accepted. float16 rounds H, A and Y to 11 significant bits: |Y| stays
#: below 8 (X ~ N(0, 1) plus a small MLP term), where half a float16 step is 0.002 to 0.004 (seen,
#: seed 0: 1.7e-3 and 2.1e-3 at batch 1 and 2 on lavapipe, 2.3e-3 at batch 8 on an H100, run AL, before the reshape rewrite).
#: float32 sums 3,072 products in f32 (seen: 3.8e-6 and 3.6e-6 on lavapipe, 5.3e-6 on the H100).
TOLERANCE = {"float32": 3e-5, "float16": 8e-3}
#: The MatMul package this example runs: one of the repository's test packages (not in the wheel).
MATMUL_PACKAGE = Path(__file__).resolve().parents[1] / "tests" / "packages" / "demo.MatMul"


def make_inputs(batch: int, dtype: str, seed: int, input_dtype: str | None = None) -> dict[str, np.ndarray]:
    """X in ``input_dtype`` (default ``dtype``) and the block's weights in ``dtype``: W1 (768, 3072)
    and W2 (3072, 768) as nn.Linear's transposed weights (y = x @ W), biases (3072,) and (768,)."""
    rng = np.random.default_rng(seed)
    arrays = {
        "X": rng.standard_normal((batch, SEQUENCE, HIDDEN)),
        "W1": rng.normal(0.0, INIT_STD, (HIDDEN, INTERMEDIATE)),
        "b1": rng.normal(0.0, INIT_STD, INTERMEDIATE),
        "W2": rng.normal(0.0, INIT_STD, (INTERMEDIATE, HIDDEN)),
        "b2": rng.normal(0.0, INIT_STD, HIDDEN),
    }
    return {name: array.astype((input_dtype or dtype) if name == "X" else dtype) for name, array in arrays.items()}


def reference(arrays: dict[str, np.ndarray]) -> np.ndarray:
    """The block in float64 NumPy, from the same (rounded) inputs the GPU gets: X in the weights'
    dtype, as the block's ``astype`` converts it (on lavapipe bit for bit as NumPy's astype)."""
    dtype = arrays["W1"].dtype
    x, w1, b1, w2, b2 = (arrays[name].astype(dtype).astype(np.float64) for name in ("X", "W1", "b1", "W2", "b2"))
    h = x @ w1 + b1
    a = h / (1.0 + np.exp(-ALPHA * h))
    return a @ w2 + b2 + x


class ClipMlp:
    """The block's weights uploaded once, and the three kernels it runs."""

    def __init__(self, arrays: dict[str, np.ndarray], adapter: str | None = None) -> None:
        self.adapter = adapter
        self.matmul = wk.load_kernel(MATMUL_PACKAGE)
        self.bias_add = wk.get_kernel("com.microsoft.BiasAdd")
        self.quick_gelu = wk.get_kernel("com.microsoft.QuickGelu")
        self.dtype = arrays["W1"].dtype
        self.w1 = wk.to_gpu(arrays["W1"], adapter=adapter)  # (768, 3072), 2-D as a checkpoint has it
        self.w2 = wk.to_gpu(arrays["W2"], adapter=adapter)
        self.b1 = wk.to_gpu(arrays["b1"], adapter=adapter)
        self.b2 = wk.to_gpu(arrays["b2"], adapter=adapter)
        self._zeros: wk.GpuTensor | None = None  # BiasAdd's skip for H = X @ W1 + b1

    def zeros(self, shape: tuple[int, ...], dtype: np.dtype) -> wk.GpuTensor:
        """BiasAdd's skip is required: adding b1 alone needs a tensor of zeros the size of H. Only
        the last shape's is kept: one per shape grew without bound where the sequence length varies."""
        if self._zeros is None or self._zeros.shape != shape:
            if self._zeros is not None:
                self._zeros.release()  # safe with calls that read it still recorded: the engine keeps the order
            self._zeros = wk.to_gpu(np.zeros(shape, dtype), adapter=self.adapter)
        return self._zeros

    def __call__(self, x: wk.GpuTensor) -> tuple[wk.GpuTensor, list[wk.GpuTensor]]:
        """Y for a GPU-resident X (B, 77, 768), recorded and not yet run; also the tensors made on
        the way, views included (a view and its base are released each on its own), to release
        once Y is read."""
        gpu: dict[str, Any] = {"output": "gpu", "adapter": self.adapter}
        made: list[wk.GpuTensor] = []
        if x.dtype != self.dtype:  # float32 activations into a float16 block: converted on the GPU
            x = x.astype(self.dtype)
            made.append(x)
        # demo.MatMul wants A and B of one rank: X and A go in as (B*77, K) views beside 2-D weights,
        # and the products come back as (B, 77, N) views, the (N, S, C) that BiasAdd wants.
        x_rows = x.reshape(-1, HIDDEN)
        h0_rows = self.matmul({"A": x_rows, "B": self.w1}, **gpu)["Y"]
        h0 = h0_rows.reshape(*x.shape[:-1], INTERMEDIATE)
        h = self.bias_add({"X": h0, "bias": self.b1, "skip": self.zeros(h0.shape, h0.dtype)}, **gpu)["Y"]
        a = self.quick_gelu({"X": h}, attrs={"alpha": ALPHA}, **gpu)["Y"]
        a_rows = a.reshape(-1, INTERMEDIATE)
        z_rows = self.matmul({"A": a_rows, "B": self.w2}, **gpu)["Y"]
        z = z_rows.reshape(x.shape)
        y = self.bias_add({"X": z, "bias": self.b2, "skip": x}, **gpu)["Y"]
        return y, [*made, x_rows, h0_rows, h0, h, a, a_rows, z_rows, z]

    def release(self) -> None:
        for tensor in (self.w1, self.w2, self.b1, self.b2, *([self._zeros] if self._zeros else [])):
            tensor.release()
        self._zeros = None


def run(batch: int = 2, dtype: str = "float32", adapter: str | None = None, repeats: int = 5,
        seed: int = 0, input_dtype: str | None = None) -> dict[str, Any]:  # fmt: skip
    """Runs the block once to check it, then ``repeats`` more times to time it (host wall clock
    from the first call to Y in NumPy; X's conversion, if any, included). Returns what ``main``
    prints."""
    summary = wk.choose_adapter(adapter)
    if dtype == "float16" and "shader-f16" not in summary.features:
        raise SystemExit(f"{summary.name} ({summary.backend}) has no shader-f16 feature: use --dtype float32")
    arrays = make_inputs(batch, dtype, seed, input_dtype)
    want = reference(arrays)
    block = ClipMlp(arrays, adapter)
    x = wk.to_gpu(arrays["X"], adapter=adapter)
    try:
        y, intermediates = block(x)
        got = y.numpy()  # the only readback: submits the five recorded calls and waits for them
        for tensor in (y, *intermediates):
            tensor.release()
        seconds = []
        for _ in range(repeats):
            start = time.perf_counter()
            y, intermediates = block(x)
            y.numpy()
            seconds.append(time.perf_counter() - start)
            for tensor in (y, *intermediates):
                tensor.release()
    finally:
        x.release()
        block.release()
    error = float(np.max(np.abs(got.astype(np.float64) - want))) if got.size else 0.0
    return {
        "adapter": f"{summary.name} ({summary.backend})",
        "shape": got.shape,
        "dtype": str(got.dtype),
        "input_dtype": str(arrays["X"].dtype),
        "max_error": error,
        "tolerance": TOLERANCE[dtype],
        "ok": error <= TOLERANCE[dtype],
        "seconds": seconds,
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description="A CLIP text encoder MLP block (768 -> 3072 -> 768, quick_gelu, "
                                                 "residual) through webgpu-kernels, checked against NumPy float64.")
    parser.add_argument("--batch", type=int, default=2, help="B of X (B, 77, 768); default 2")
    parser.add_argument("--dtype", choices=sorted(TOLERANCE), default="float32", help="the block's; default float32")
    parser.add_argument("--input-dtype", choices=sorted(TOLERANCE), default=None,
                        help="X's, as uploaded (converted on the GPU to --dtype); default: --dtype")
    parser.add_argument("--adapter", default=None,
                        help="a backend (vulkan, metal, d3d12, gl) or part of the adapter's name; default: the best")
    parser.add_argument("--repeat", type=int, default=5, help="timed runs after the checked one; default 5")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if args.batch < 1 or args.repeat < 0:
        parser.error("--batch must be at least 1 and --repeat at least 0")
    result = run(args.batch, args.dtype, args.adapter, args.repeat, args.seed, args.input_dtype)
    print(f"adapter: {result['adapter']}")
    if result["input_dtype"] != result["dtype"]:
        print(f"X uploaded in {result['input_dtype']}, converted to {result['dtype']} on the GPU (astype)")
    print(f"Y {result['shape']} {result['dtype']}: max |Y - float64 reference| = {result['max_error']:.3g} "
          f"(tolerance {result['tolerance']:g}): {'ok' if result['ok'] else 'TOO LARGE'}")
    if result["seconds"]:
        ms = [s * 1e3 for s in result["seconds"]]
        print(f"host wall clock per block on this adapter, upload of X excluded, readback of Y included "
              f"({len(ms)} runs): median {statistics.median(ms):.1f} ms, min {min(ms):.1f} ms "
              f"(one run of a script, not a benchmark: see `webgpu-kernels bench` for kernel timings)")
    return result


if __name__ == "__main__":
    sys.exit(0 if main()["ok"] else 1)
