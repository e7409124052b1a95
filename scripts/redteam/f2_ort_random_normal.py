"""f2: `webgpu-kernels run` let ONNX Runtime allocate memory sized by the package's attributes.

Attack: `run` checks a kernel against a one-node ONNX Runtime model built from the package's op id
and attributes. This package names the op ai.onnx.RandomNormal, with no inputs, an output of 4
elements and the attribute ``shape: [SIDE, SIDE]``. The script only writes the package; the attack
is the `webgpu-kernels run` it prints next.

Before: with SIDE 16384, `run` reached 3.4 GB RSS inside ONNX Runtime (SIDE 65536
would ask for 16 GiB; attribute lists take values up to 2^63).

Now (lavapipe, 2 shared cores): `run` infers the ONNX model's output shapes first and does not hand
ONNX Runtime a model whose outputs differ from the kernel's: it reports 'ONNX Runtime CPU: Y shape
[4] != reference [16384, 16384]: WRONG' and exits 1 (the kernel's output is not the op's), at
184 MB peak RSS.

    python3 scripts/redteam/f2_ort_random_normal.py 16384
    webgpu-kernels run PACKAGE      # the folder the script prints
"""
import argparse
import copy
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from hostile_package import BASE, BODY, GOOD, make  # noqa: E402

parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
parser.add_argument("side", type=int, nargs="?", default=16384,
                    help="RandomNormal's shape is SIDE x SIDE (default 16384)")
args = parser.parse_args()

manifest = copy.deepcopy(BASE)
manifest.update({
    "domain": "ai.onnx",
    "name": "RandomNormal",
    "inputs": [],
    "outputs": [{"role": "Y", "dtype": "T", "rank": 1, "shape": "[4]"}],
    "typeConstraints": {"T": ["float32"]},
    "attributes": {"shape": [args.side, args.side], "dtype": 1},
    "derive": {"n": 4},
    "constants": {"scalar": "'f32'"},
})
main_pass = manifest["variants"][0]["passes"][0]
main_pass["bindings"] = [b for b in main_pass["bindings"] if b["name"] != "a"]
folder = make("ort_alloc", manifest=manifest, template=GOOD.replace(BODY, "  y[i] = 0.0;"))
print(f"next: webgpu-kernels run {folder}")
