"""f7: a package without metadata.json hashed every top-level file on its first call.

Attack: a package folder holds N symbolic links, f0.txt ... f{N-1}.txt, to one 8 MiB file of
random bytes (big.bin, written next to the package). Without metadata.json the package is
unverified, and ``Kernel.tuning_key`` read every top-level file to key the tuning cache; the
1,000-file and 512 MiB package limits did not apply there.

Before: 1,000 links added 38 s to the first call, and the cost had no ceiling.

Now (lavapipe, 2 shared cores): the tuning key reads only files a template can be (at most 256 KiB
each) and at most 1,000 of them, the others counted by size: the first call with 1,000 links takes
3.0 s, as with none (3.3 s; most of it is starting the device), and the script exits 0.

    python3 scripts/redteam/f7_tuning_key_many_links.py 1000
"""
import argparse
import os
import sys
from pathlib import Path

import numpy as np

import webgpu_kernels as wk

sys.path.insert(0, str(Path(__file__).parent))
from hostile_package import attempt, exit_status, make, package_root  # noqa: E402

parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
parser.add_argument("n", type=int, nargs="?", default=1000, help="how many links (default 1000)")
args = parser.parse_args()

big = package_root() / "big.bin"
big.write_bytes(os.urandom(8 << 20))
folder = make("manylinks")
for i in range(args.n):
    (folder / f"f{i}.txt").symlink_to(big)
kernel = wk.load_kernel(folder)
attempt(f"first call with {args.n} links", lambda: kernel({"A": np.ones(8, np.float32)})["Y"][:3])
attempt("second call", lambda: kernel({"A": np.ones(16, np.float32)})["Y"][:3])
sys.exit(exit_status())
