"""f1a: a line break other than \\n inside a // comment hid deep nesting from the WGSL nesting check.

Attack: the template writes ``// hidden{{ '\\r' }} let q = ((((...1.0...))));`` with DEPTH
parentheses. WGSL (naga) ends a // comment at \\r, VT, FF, NEL, U+2028 and U+2029 as well as at \\n,
so it parses the "hidden" code; the nesting check, which blanked comments up to \\n only, did not
see it. SEP picks the line break; 'none' writes the same text without the comment, which the check
has always refused.

Before: depth 5000 with r, ff or u2028 passed the check and the call killed the process
with SIGSEGV (exit 139); 'none' gave a TemplateSandboxError. `webgpu-kernels validate` and `test` on
such a package crashed the same way.

Now (lavapipe, 2 shared cores): the nesting check ends a // comment at every WGSL line break, so it
sees the hidden parentheses: render and call raise TemplateSandboxError ('the rendered WGSL nests
brackets more than 256 deep') for every SEP, and the script exits 1 in about 3 s. `validate` and
`test` on the package, given a test.json, report the same error and exit 1.

    python3 scripts/redteam/f1a_comment_line_breaks.py 5000 r
"""
import argparse
import sys
from pathlib import Path

import numpy as np

import webgpu_kernels as wk

sys.path.insert(0, str(Path(__file__).parent))
from hostile_package import BODY, GOOD, SHAPES, attempt, exit_status, make  # noqa: E402

# SEP -> the Jinja string literal that renders the line break
BREAKS = {"none": "", "r": "\\r", "u2028": "\\u2028", "vt": "\\x0b", "ff": "\\x0c", "nel": "\\x85"}

parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
parser.add_argument("depth", type=int, nargs="?", default=5000, help="how many parentheses (default 5000)")
parser.add_argument("sep", nargs="?", default="r", choices=BREAKS, help="the line break in the comment (default r)")
args = parser.parse_args()

comment = "//" if args.sep != "none" else ""
hidden = "  %s hidden{{ '%s' }} let q = {{ '(' * %d }}1.0{{ ')' * %d }};\n" % (
    comment, BREAKS[args.sep], args.depth, args.depth)
folder = make(f"depth_{args.sep}", template=GOOD.replace(BODY, hidden + BODY))
kernel = wk.load_kernel(folder)
attempt("render", lambda: kernel.render(SHAPES)["main"].splitlines()[-3][:80])
attempt(f"call depth={args.depth} sep={args.sep}", lambda: kernel({"A": np.ones(8, np.float32)})["Y"][:3])
sys.exit(exit_status())
