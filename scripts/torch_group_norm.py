"""torch's GroupNorm on CUDA (eager, cuDNN/ATen) on demo.GroupNorm's bench.json shapes: the peer
figure for `webgpu-kernels bench tests/packages/demo.GroupNorm` on the same GPU.

Timed as bench's torch peer times torch (``peers._gpu_time``: CUDA events around spans of 50
back-to-back calls, batches until their medians agree) on random data; TB/s counts X read and Y
written once (gamma and beta too), as bench does. Each output is checked against torch's float64
GroupNorm on the same inputs, so a fast wrong answer shows.

    python3 scripts/torch_group_norm.py [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

from webgpu_kernels.peers import _gpu_time

BENCH = Path(__file__).resolve().parent.parent / "tests" / "packages" / "demo.GroupNorm" / "bench.json"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", help="write the rows as JSON to this file")
    args = parser.parse_args()
    cases = json.loads(BENCH.read_text("utf-8"))["cases"]
    rows = []
    print(f"torch {torch.__version__} on {torch.cuda.get_device_name()}")
    print(f"{'case':<28} {'dtype':<8} {'time (us)':>10} {'TB/s':>7} {'max abs err':>12}")
    for case in cases:
        shape = case["inputs"]["X"]["shape"]
        attrs = case.get("attrs", {})
        groups, eps = attrs.get("num_groups", 32), attrs.get("epsilon", 1e-5)
        for name in case.get("types", {}).get("T", ["float32", "float16"]):
            dtype = getattr(torch, name)
            gen = torch.Generator(device="cuda").manual_seed(0)
            x = torch.randn(shape, generator=gen, device="cuda").to(dtype)
            gamma = (0.5 + torch.rand(shape[1], generator=gen, device="cuda")).to(dtype)
            beta = (0.25 * torch.randn(shape[1], generator=gen, device="cuda")).to(dtype)
            y = F.group_norm(x, groups, gamma, beta, eps)
            want = F.group_norm(x.double(), groups, gamma.double(), beta.double(), eps)
            err = (y.double() - want).abs().max().item()
            seconds = statistics.median(_gpu_time(lambda x=x, g=gamma, b=beta, n=groups, e=eps: F.group_norm(x, n, g, b, e), torch).samples)
            nbytes = (2 * math.prod(shape) + 2 * shape[1]) * x.element_size()
            row = {"case": case["name"], "dtype": name, "seconds": seconds, "tbps": nbytes / seconds / 1e12,
                   "max_abs_error": err, "shape": shape}  # fmt: skip
            rows.append(row)
            print(f"{case['name']:<28} {name:<8} {seconds * 1e6:>10.1f} {row['tbps']:>7.3f} {err:>12.3g}")
    if args.json:
        Path(args.json).write_text(json.dumps({"torch": torch.__version__, "device": torch.cuda.get_device_name(),
                                               "rows": rows}, indent=1) + "\n", encoding="utf-8")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
