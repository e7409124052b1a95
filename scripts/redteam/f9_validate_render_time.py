"""f9: `validate` rendered every case x variant, each up to the render deadline.

Attack: N variants of one template that spends the sandbox's 10 s render deadline comparing two
lists of 100,000 integers in a loop (within the work budget: each comparison is one step). A call
renders one variant, so it ends at the deadline; `validate` renders every case x variant, each
another 10 s. The script only writes the package; the attack is the `webgpu-kernels validate` it
prints next.

Before: 4 variants took `validate` 41 s, 12 variants 121 s, growing by 10 s per case
x variant: a package of hundreds of cases or variants would take hours.

Now (lavapipe, 2 shared cores): `validate` stops rendering once its renders took 60 s in all and
says so in one error ('the templates took 60.1 s to render, more than the 60 s validate gives them
in all: 6 renders (case x variant) were not checked, ...'); 12 variants take 61 s.

    python3 scripts/redteam/f9_validate_render_time.py 12
    webgpu-kernels validate PACKAGE     # the folder the script prints
"""
import argparse
import copy
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from hostile_package import BASE, BODY, GOOD, make  # noqa: E402

parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
parser.add_argument("n", type=int, nargs="?", default=12, help="how many variants (default 12)")
args = parser.parse_args()

SLOW = ("{% set l = range(100000)|list %}{% set m = range(100000)|list %}"
        "{% for i in range(100000) %}{% if l == m %}{% endif %}{% endfor %}")
manifest = copy.deepcopy(BASE)
manifest["variants"] = [dict(copy.deepcopy(BASE["variants"][0]), id=f"v{i}") for i in range(args.n)]
case = {"name": "c", "types": {"T": "float32"}, "inputs": {"A": {"shape": [8], "values": [1] * 8}},
        "expected": {"Y": {"shape": [8], "values": [2] * 8}}}
folder = make("slowrender", GOOD.replace(BODY, SLOW), manifest=manifest, extra={"test.json": json.dumps({"cases": [case]})})
print(f"next: webgpu-kernels validate {folder}")
