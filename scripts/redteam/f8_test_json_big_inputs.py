"""f8: a test.json case had no limit on its total size.

Attack: the manifest declares N optional inputs besides A, and test.json's one case gives each of
them ``[16777216]`` generated values (2^24, the cap on one test tensor). Neither the number of
inputs nor a case's total size was capped. The script only writes the package; the attack is the
`webgpu-kernels test` it prints next.

Before: N 12 drove `webgpu-kernels test` to 2.8 GB RSS in 54 s, growing linearly with
N; thousands of inputs fit the 20,000-value bound.

Now (lavapipe, 2 shared cores): a test.json case may hold at most 2^26 elements, inputs and expected
outputs together, summed when the file is read: `webgpu-kernels test` refuses the case ('case 'c1'
holds 201326608 elements in its inputs and expected outputs together, more than the 67108864 (2^26)
a case may hold: split it') and exits 1, in 1.7 s at 54 MB peak RSS.

    python3 scripts/redteam/f8_test_json_big_inputs.py 12
    webgpu-kernels test PACKAGE     # the folder the script prints
"""
import argparse
import copy
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from hostile_package import BASE, make  # noqa: E402

parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
parser.add_argument("n", type=int, nargs="?", default=12, help="how many inputs of 2^24 elements (default 12)")
args = parser.parse_args()

manifest = copy.deepcopy(BASE)
manifest["inputs"] = [{"role": "A", "dtype": "T"}] + [
    {"role": f"I{i}", "dtype": "T", "optional": True} for i in range(args.n)]
big_inputs = {f"I{i}": {"shape": [1 << 24], "generate": {"distribution": "normal", "seed": i}} for i in range(args.n)}
case = {
    "name": "c1",
    "types": {"T": "float32"},
    "inputs": {"A": {"shape": [8], "values": [1] * 8}, **big_inputs},
    "expected": {"Y": {"shape": [8], "values": [2] * 8}},
}
folder = make("bigcase", manifest=manifest, extra={"test.json": json.dumps({"cases": [case]})})
print(f"next: webgpu-kernels test {folder}")
