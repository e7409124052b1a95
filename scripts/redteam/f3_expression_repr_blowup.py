"""f3: one manifest expression's error message built a repr of gigabytes.

Attack: the manifest derives ``s = 'x' * 4096`` and ``d = [s] * 4095`` (references, so both are
cheap), then selects its variant with ``when: ceilDiv([d, d, ...K times...], 1) > 0``. The list
literal inside the call was not bounded, only an expression's final result was, and the function's
error message repr()'d the whole argument before shortening it: K * 4095 * 4096 characters. FN
picks the function: ceilDiv, dim, numel, sameShape or broadcastable.

Before: K 200 took 22 s and 2.5 GB RSS for one `explain` (K about 1000, still a short
expression, would need about 17 GB), on every call that evaluated the clause.

Now (lavapipe, 2 shared cores): list and tuple literals are bounded through every level, and
messages quote a value by at most 80 characters: explain reports the variant refused ('a list or
tuple literal holds values of more than 4096 items in all') after 1.5 s, at K 1000 as at 200; the
whole script takes 3 s and 132 MB peak RSS, and exits 0.

    python3 scripts/redteam/f3_expression_repr_blowup.py 200
"""
import argparse
import copy
import sys
from pathlib import Path

import webgpu_kernels as wk

sys.path.insert(0, str(Path(__file__).parent))
from hostile_package import BASE, SHAPES, attempt, exit_status, make  # noqa: E402

CALLS = {
    "ceilDiv": "ceilDiv([%s], 1) > 0",
    "dim": "dim([%s], 0) > 0",
    "numel": "numel([%s]) > 0",
    "sameShape": "sameShape([%s], [1])",
    "broadcastable": "broadcastable([%s], [1])",
}

parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
parser.add_argument("k", type=int, nargs="?", default=200, help="how many d in the list (default 200)")
parser.add_argument("fn", nargs="?", default="ceilDiv", choices=CALLS, help="the function called (default ceilDiv)")
args = parser.parse_args()

manifest = copy.deepcopy(BASE)
manifest["derive"].update({"s": "'x' * 4096", "d": "[s] * 4095", "bad": CALLS[args.fn] % ", ".join(["d"] * args.k)})
manifest["variants"][0]["when"] = ["bad"]
folder = make(f"repr_blowup_{args.fn}", manifest=manifest)
kernel = attempt("load", lambda: wk.load_kernel(folder))
if kernel is not None:
    def explain() -> str:
        """explain's text, the long quoted expression in the middle cut out."""
        text = str(kernel.explain(SHAPES))
        return text if len(text) <= 360 else f"{text[:100]} ... {text[-250:]}"

    attempt(f"explain k={args.k}", explain)
sys.exit(exit_status())
