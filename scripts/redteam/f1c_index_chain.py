"""f1c: a chain of indexes, ``a[0][0]...[0]``, got past the WGSL nesting check.

Attack: the template writes an expression of N postfix steps. A closed ``[...]`` added only 1 to
the check's count each time, not a cumulative depth, so a long chain passed, and naga's recursive
parser then overflowed wgpu-native's stack. FORM picks the expression: 'index' (``a[0]...``),
'vecidx' (the same on a vec4), 'call' (``abs(abs(...1.0...))``), 'unary' (``----1.0``),
'neg_paren' (``-(-(...1.0...))``) or 'bitcast_chain' (``bitcast<f32>(...)`` nested). The
'unary' and 'call' forms were refused already.

Before: 'index' with 10,000 indexes gave a ShaderCompileError; 30,000 killed the
process with SIGSEGV (exit 139).

Now (lavapipe, 2 shared cores): an index counts as an operator: render and call raise
TemplateSandboxError ('the rendered WGSL nests expressions more than 4096 deep'), at 10,000 as at
30,000; the script exits 1 in about 3 s (2.6 s and 133 MB in session 35, with the limit at 4096).

    python3 scripts/redteam/f1c_index_chain.py 30000 index
"""
import argparse
import sys
from pathlib import Path

import numpy as np

import webgpu_kernels as wk

sys.path.insert(0, str(Path(__file__).parent))
from hostile_package import BODY, GOOD, SHAPES, attempt, exit_status, make  # noqa: E402

FORMS = {
    "index": "  let q = a{{ '[0]' * %(n)d }};\n",
    "vecidx": "  let v = vec4<f32>(1.0);\n  let q = v{{ '[0]' * %(n)d }};\n",
    "call": "  let q = {{ 'abs(' * %(n)d }}1.0{{ ')' * %(n)d }};\n",
    "unary": "  let q = {{ '-' * %(n)d }}1.0;\n",
    "neg_paren": "  let q = {{ '-(' * %(n)d }}1.0{{ ')' * %(n)d }};\n",
    "bitcast_chain": "  let q = {{ 'bitcast<f32>(' * %(n)d }}1.0{{ ')' * %(n)d }};\n",
}

parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
parser.add_argument("n", type=int, nargs="?", default=30000, help="how many steps in the chain (default 30000)")
parser.add_argument("form", nargs="?", default="index", choices=FORMS, help="the expression (default index)")
args = parser.parse_args()

body = FORMS[args.form] % {"n": args.n}
folder = make(f"chain_{args.form}", template=GOOD.replace(BODY, body + BODY))
kernel = wk.load_kernel(folder)
attempt("render (bytes)", lambda: len(kernel.render(SHAPES)["main"]))
attempt(f"call {args.form} n={args.n}", lambda: kernel({"A": np.ones(8, np.float32)})["Y"][:3])
sys.exit(exit_status())
