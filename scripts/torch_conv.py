"""torch's conv2d on CUDA (cuDNN) on demo.Conv's bench.json shapes: the peer figure for
`webgpu-kernels bench tests/packages/demo.Conv` on the same GPU.

Timed as bench's torch peer times torch (``peers._gpu_time``: CUDA events around spans of
back-to-back calls, batches until their medians agree) on random data; TFLOP/s from bench.json's
``flops`` formula (2 N M outH outW Cg kH kW). float32 runs with TF32 off unless ``--tf32``
(cuDNN's default for convolutions is TF32 on, which rounds the inputs to 10-bit mantissas: the
package computes in full float32). Each output is checked against torch's float64 conv2d on the
same inputs, so a fast wrong answer shows.

    python3 scripts/torch_conv.py [--tf32] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

from webgpu_kernels.peers import _gpu_time

BENCH = Path(__file__).resolve().parent.parent / "tests" / "packages" / "demo.Conv" / "bench.json"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tf32", action="store_true", help="let cuDNN use TF32 for float32 (its default)")
    parser.add_argument("--json", help="write the rows as JSON to this file")
    args = parser.parse_args()
    torch.backends.cudnn.allow_tf32 = args.tf32
    torch.backends.cudnn.benchmark = True  # cuDNN picks its fastest algorithm per shape, as a tuned model would
    cases = json.loads(BENCH.read_text("utf-8"))["cases"]
    rows = []
    print(f"torch {torch.__version__} on {torch.cuda.get_device_name()}, cuDNN {torch.backends.cudnn.version()}, "
          f"TF32 {'on' if args.tf32 else 'off'}")  # fmt: skip
    print(f"{'case':<32} {'dtype':<8} {'time (us)':>10} {'TFLOP/s':>8} {'max abs err':>12}")
    for case in cases:
        x_shape, w_shape = case["inputs"]["X"]["shape"], case["inputs"]["W"]["shape"]
        attrs = case.get("attrs", {})
        strides, dilations, group = attrs.get("strides", [1, 1]), attrs.get("dilations", [1, 1]), attrs.get("group", 1)
        top, left, bottom, right = attrs.get("pads", [0, 0, 0, 0])
        for name in case.get("types", {}).get("T", ["float32", "float16"]):
            dtype = getattr(torch, name)
            gen = torch.Generator(device="cuda").manual_seed(0)
            x = torch.randn(x_shape, generator=gen, device="cuda").to(dtype)
            w = (torch.randn(w_shape, generator=gen, device="cuda") / (w_shape[1] * w_shape[2] * w_shape[3]) ** 0.5).to(dtype)
            b = torch.randn(w_shape[0], generator=gen, device="cuda").to(dtype) if "B" in case["inputs"] else None

            def conv(x=x, w=w, b=b):  # ONNX's begin/end pads as an explicit pad, then conv2d without one
                padded = F.pad(x, (left, right, top, bottom)) if (top, left) != (bottom, right) else x
                pad = 0 if padded is not x else (top, left)
                return F.conv2d(padded, w, b, stride=strides, padding=pad, dilation=dilations, groups=group)

            y = conv()
            want = F.conv2d(F.pad(x.double(), (left, right, top, bottom)), w.double(),
                            None if b is None else b.double(), stride=strides, dilation=dilations, groups=group)  # fmt: skip
            err = (y.double() - want).abs().max().item()
            seconds = statistics.median(_gpu_time(conv, torch).samples)
            n, m, out_h, out_w = y.shape
            flops = 2 * n * m * out_h * out_w * w_shape[1] * w_shape[2] * w_shape[3]
            row = {"case": case["name"], "dtype": name, "seconds": seconds, "tflops": flops / seconds / 1e12,
                   "max_abs_error": err, "x": x_shape, "w": w_shape}  # fmt: skip
            rows.append(row)
            print(f"{case['name']:<32} {name:<8} {seconds * 1e6:>10.1f} {row['tflops']:>8.2f} {err:>12.3g}")
    if args.json:
        Path(args.json).write_text(json.dumps({"torch": torch.__version__, "device": torch.cuda.get_device_name(),
                                               "tf32": args.tf32, "rows": rows}, indent=1) + "\n", encoding="utf-8")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
