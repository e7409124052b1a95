"""f1b: a long ``else if`` chain got past the WGSL nesting check.

Attack: the template renders ``if c {} else if c {} else if c {} ...`` with N ``else if``. Every
brace closes, so the nesting check counted no depth, but naga nests each ``else if`` one level
deeper than the last and overflows wgpu-native's stack.

Before: 6,000 repeats ran; 10,000 (about 130 KB of WGSL) killed the process with
SIGSEGV (exit 139).

Now (lavapipe, 2 shared cores): an else-if chain counts as depth: render and call raise
TemplateSandboxError ('the rendered WGSL nests blocks (an else-if chain) more than 256 deep'), at
6,000 as at 10,000; the script exits 1 in about 3.5 s.

    python3 scripts/redteam/f1b_else_if_chain.py 10000
"""
import argparse
import sys
from pathlib import Path

import numpy as np

import webgpu_kernels as wk

sys.path.insert(0, str(Path(__file__).parent))
from hostile_package import BODY, GOOD, SHAPES, attempt, exit_status, make  # noqa: E402

parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
parser.add_argument("n", type=int, nargs="?", default=10000, help="how many 'else if' (default 10000)")
args = parser.parse_args()

chain = "  let c = i > 7u;\n  if c {}{{ ' else if c {}' * %d }}\n" % args.n
folder = make("elseif", template=GOOD.replace(BODY, chain + BODY))
kernel = wk.load_kernel(folder)
attempt("render (bytes)", lambda: len(kernel.render(SHAPES)["main"]))
attempt(f"call elseif n={args.n}", lambda: kernel({"A": np.ones(8, np.float32)})["Y"][:3])
sys.exit(exit_status())
