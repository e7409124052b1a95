"""A Stable Diffusion 1.5 UNet feed-forward block (GEGLU) on the GPU, without a browser.

    P = X @ W1                 demo.MatMul: W1 (C, 8C), the GEGLU projection to value and gate
    G = BiasSplitGelu(P, b1)   demo.BiasSplitGelu: (P + b1)[..., :4C] * gelu((P + b1)[..., 4C:])
    Y = G @ W2 + b2 + X        demo.MatMul, then com.microsoft.BiasAdd (skip = X, the residual)

on X of shape (B, T, C): T = H*W tokens of the latent (4096, 1024, 256, 64 at a 64x64 latent) and C
the level's width (320, 640, 1280). gelu is the exact erf form. The LayerNorm that comes before the
feed-forward in a transformer block is left out: X is both its input and the residual. The weights
are random (seeded, N(0, 0.02)). Every intermediate stays on the GPU (``output="gpu"``); only Y is
read back, and compared with a float64 NumPy reference. The bias b1 goes into BiasSplitGelu, which
adds it before the split, so the first MatMul needs no BiasAdd of its own (unlike clip_mlp.py's).

    python3 examples/sd_feed_forward.py --tokens 256 --channels 320 --dtype float16 [--input-dtype float32]
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

import webgpu_kernels as wk

INIT_STD = 0.02
#: Largest |Y - reference| accepted. float16 rounds P, G, G @ W2 and Y to 11 significant bits: |Y|
#: stays below 8 (X ~ N(0, 1) plus a feed-forward term), where half a float16 step is 0.002 to 0.004
#: (seen, seed 0, batch 2 on lavapipe: 1.9e-3 at (256, 320), 1.8e-3 at (64, 640), 2.0e-3 at (64, 1280)).
#: float32 sums up to 4C = 5,120 products in f32 (seen: 3.6e-7, 1.6e-6 and 5.8e-6 at those shapes).
#: (`python3 examples/sd_feed_forward.py --dtype D --tokens T --channels C --repeat 0`; an H100's: run AQ.)
TOLERANCE = {"float32": 3e-5, "float16": 8e-3}
#: The two packages this example runs: the repository's test packages (not in the wheel).
PACKAGES = Path(__file__).resolve().parents[1] / "tests" / "packages"
#: erf for float64 arrays: NumPy has none, and SciPy is no dependency of the project.
_erf = np.vectorize(math.erf, otypes=[np.float64])


def make_inputs(batch: int, tokens: int, channels: int, dtype: str, seed: int,
                input_dtype: str | None = None) -> dict[str, np.ndarray]:  # fmt: skip
    """X (batch, tokens, channels) in ``input_dtype`` (default ``dtype``) and the weights in
    ``dtype``: W1 (C, 8C) and W2 (4C, C) as nn.Linear's transposed weights (y = x @ W), biases (8C,)
    and (C,). W1's first 4C columns make the value, the last 4C the gate (diffusers' GEGLU chunks
    its projection in that order)."""
    rng = np.random.default_rng(seed)
    inner = 4 * channels
    arrays = {
        "X": rng.standard_normal((batch, tokens, channels)),
        "W1": rng.normal(0.0, INIT_STD, (channels, 2 * inner)),
        "b1": rng.normal(0.0, INIT_STD, 2 * inner),
        "W2": rng.normal(0.0, INIT_STD, (inner, channels)),
        "b2": rng.normal(0.0, INIT_STD, channels),
    }
    return {name: array.astype((input_dtype or dtype) if name == "X" else dtype) for name, array in arrays.items()}


def reference(arrays: dict[str, np.ndarray]) -> np.ndarray:
    """The block in float64 NumPy from the inputs the GPU gets (X rounded to the weights' dtype
    first, as the block's ``astype`` does)."""
    dtype = arrays["W1"].dtype
    x, w1, b1, w2, b2 = (arrays[name].astype(dtype).astype(np.float64) for name in ("X", "W1", "b1", "W2", "b2"))
    value, gate = np.split(x @ w1 + b1, 2, axis=-1)
    return (value * (0.5 * gate * (1.0 + _erf(gate / math.sqrt(2.0))))) @ w2 + b2 + x


class SdFeedForward:
    """The block's weights uploaded once, and the three kernels it runs."""

    def __init__(self, arrays: dict[str, np.ndarray], adapter: str | None = None) -> None:
        self.adapter = adapter
        self.matmul = wk.load_kernel(PACKAGES / "demo.MatMul")
        self.split_gelu = wk.load_kernel(PACKAGES / "demo.BiasSplitGelu")
        self.bias_add = wk.get_kernel("com.microsoft.BiasAdd")
        self.dtype = arrays["W1"].dtype
        self.weights = {name: wk.to_gpu(arrays[name], adapter=adapter) for name in ("W1", "b1", "W2", "b2")}

    def __call__(self, x: wk.GpuTensor) -> tuple[wk.GpuTensor, list[wk.GpuTensor]]:
        """Y for a GPU-resident X (B, T, C), recorded and not yet run, and the tensors made on the
        way (views included: each is released on its own) to release once Y is read."""
        gpu: dict[str, Any] = {"output": "gpu", "adapter": self.adapter}
        w = self.weights
        made: list[wk.GpuTensor] = []
        if x.dtype != self.dtype:  # float32 activations into a float16 block: converted on the GPU
            x = x.astype(self.dtype)
            made.append(x)
        *lead, channels = x.shape
        # demo.MatMul wants operands of one rank and the weights stay 2-D: X and G go in as (B*T, K)
        # views; BiasSplitGelu and BiasAdd want (N, S, C), so the products come back as (B, T, N) views.
        x_rows = x.reshape(-1, channels)
        p_rows = self.matmul({"A": x_rows, "B": w["W1"]}, **gpu)["Y"]
        p = p_rows.reshape(*lead, 8 * channels)
        g = self.split_gelu({"X": p, "bias": w["b1"]}, **gpu)["Y"]  # (B, T, 4C)
        g_rows = g.reshape(-1, 4 * channels)
        z_rows = self.matmul({"A": g_rows, "B": w["W2"]}, **gpu)["Y"]
        z = z_rows.reshape(x.shape)
        y = self.bias_add({"X": z, "bias": w["b2"], "skip": x}, **gpu)["Y"]
        return y, [*made, x_rows, p_rows, p, g, g_rows, z_rows, z]

    def release(self) -> None:
        for tensor in self.weights.values():
            tensor.release()


def run(batch: int = 2, tokens: int = 256, channels: int = 320, dtype: str = "float32", adapter: str | None = None,
        repeats: int = 5, seed: int = 0, input_dtype: str | None = None) -> dict[str, Any]:  # fmt: skip
    """Runs the block once to check it, then ``repeats`` more times to time it (host wall clock
    from the call to Y in NumPy and the intermediates released). Returns what ``main`` prints."""
    summary = wk.choose_adapter(adapter)
    if dtype == "float16" and "shader-f16" not in summary.features:
        raise SystemExit(f"{summary.name} ({summary.backend}) has no shader-f16 feature: use --dtype float32")
    arrays = make_inputs(batch, tokens, channels, dtype, seed, input_dtype)
    block = SdFeedForward(arrays, adapter)
    x = wk.to_gpu(arrays["X"], adapter=adapter)

    def once() -> np.ndarray:
        y, made = block(x)
        try:
            return y.numpy()  # the only readback: submits the recorded calls (4, 5 with astype), waits
        finally:
            for tensor in (y, *made):
                tensor.release()

    try:
        got = once()
        seconds = []
        for _ in range(repeats):
            start = time.perf_counter()
            once()
            seconds.append(time.perf_counter() - start)
    finally:
        x.release()
        block.release()
    error = float(np.max(np.abs(got.astype(np.float64) - reference(arrays)))) if got.size else 0.0
    return {
        "adapter": f"{summary.name} ({summary.backend})",
        "shape": got.shape,
        "dtype": str(got.dtype),
        "input_dtype": str(arrays["X"].dtype),
        "max_error": error,
        "tolerance": TOLERANCE[dtype],
        "ok": error <= TOLERANCE[dtype],  # NaN is not
        "seconds": seconds,
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description="A Stable Diffusion 1.5 UNet feed-forward block (GEGLU: C -> 8C, "
                                                 "split gelu -> 4C -> C, residual) through webgpu-kernels, "
                                                 "checked against NumPy float64.")  # fmt: skip
    parser.add_argument("--batch", type=int, default=2, help="B of X (B, T, C); default 2 (classifier-free guidance)")
    parser.add_argument("--tokens", type=int, default=256,
                        help="T = H*W of the latent level: 4096, 1024, 256 or 64 at 64x64; default 256")
    parser.add_argument("--channels", type=int, default=320, help="C, the level's width: 320, 640 or 1280; default 320")
    parser.add_argument("--dtype", choices=sorted(TOLERANCE), default="float32", help="the block's; default float32")
    parser.add_argument("--input-dtype", choices=sorted(TOLERANCE), default=None,
                        help="X's, as uploaded (converted on the GPU to --dtype); default: --dtype")
    parser.add_argument("--adapter", default=None,
                        help="a backend (vulkan, metal, d3d12, gl) or part of the adapter's name; default: the best")
    parser.add_argument("--repeat", type=int, default=5, help="timed runs after the checked one; default 5")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if min(args.batch, args.tokens, args.channels) < 1 or args.repeat < 0:
        parser.error("--batch, --tokens and --channels must be at least 1 and --repeat at least 0")
    result = run(args.batch, args.tokens, args.channels, args.dtype, args.adapter, args.repeat, args.seed,
                 args.input_dtype)  # fmt: skip
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


def cli(argv: list[str] | None = None) -> int:
    """The script's exit status: 1 when Y is further from the reference than the tolerance."""
    return 0 if main(argv)["ok"] else 1


if __name__ == "__main__":
    sys.exit(cli())
