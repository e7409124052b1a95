"""f6: a bindingSets entry named by many passes made a small manifest slow to load.

Attack: the manifest declares one bindingSets entry of N bindings and M passes that each name it,
so it stays small and within the 20,000-JSON-value bound while loading expands it to N * M
bindings. MODE 'bad' gives the bindings an unknown element type (``$nope``), so the expanded
bindings are also errors to report.

Before: N 1400, M 1300 (a 252 KB manifest) took 104 s and 1.3 GB RSS in
`load_kernel`; the work scaled with passes * bindings.

Now (lavapipe, 2 shared cores): the passes may hold at most 4,096 bindings and struct fields
together, each bindingSets entry counted once per pass that names it, checked before the schema:
load_kernel raises ManifestError ('the passes hold 1821300 bindings and struct fields together, ...;
the format allows at most 4096') in 0.02 s, and the script exits 1 (1.7 s, 49 MB).

    python3 scripts/redteam/f6_binding_sets_fanout.py 1400 1300 good
"""
import argparse
import copy
import sys
from pathlib import Path

import webgpu_kernels as wk

sys.path.insert(0, str(Path(__file__).parent))
from hostile_package import BASE, attempt, exit_status, make  # noqa: E402

parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
parser.add_argument("n", type=int, nargs="?", default=1400, help="bindings in the set (default 1400)")
parser.add_argument("m", type=int, nargs="?", default=1300, help="passes that name the set (default 1300)")
parser.add_argument("mode", nargs="?", default="good", choices=["good", "bad"],
                    help="bad: each binding's element type is unknown (default good)")
args = parser.parse_args()

element_type = "$nope" if args.mode == "bad" else "$scalar"
bindings = [{"name": f"b{i}", "arg": "A", "buffer": {"type": "read-only-storage"}, "elementType": element_type}
            for i in range(args.n)]
bindings.append({"name": "y", "arg": "Y", "buffer": {"type": "storage"}, "elementType": "$scalar"})
manifest = copy.deepcopy(BASE)
manifest["bindingSets"] = {"S": bindings}
manifest["variants"] = [{
    "id": "v",
    "passes": [{"id": f"p{j}", "shader": "k.wgsl.jinja", "bindings": "S", "dispatch": {"threads": "n"}}
               for j in range(args.m)],
}]
folder = make("bindingsets", manifest=manifest)
print("manifest bytes", (folder / "manifest.json").stat().st_size)
attempt(f"load N={args.n} M={args.m} {args.mode}", lambda: wk.load_kernel(folder))
sys.exit(exit_status())
