"""f1d: the comment trick of f1a also hid a ``var<workgroup>`` from the workgroup-memory check.

Attack: the template declares ``var<workgroup> big: array<f32, 1000000>;`` (4 MB, where a device
allows 16 to 32 KiB) and uses it. 'hide' puts ``// note{{ '\\r' }}`` in front of the declaration
on the same line: the check stripped the comment up to \\n and never saw the array, while WGSL ends
the comment at the \\r and declares it. 'show' leaves the declaration in plain sight.

Before: 'show' raised DeviceLimitError; 'hide' ran the 4 MB workgroup array (the docs
say an H200 hung at twice its limit), and `validate` did not warn.

Now (lavapipe, 2 shared cores): the workgroup-memory check ends a // comment at every WGSL line
break too: 'hide' raises the same DeviceLimitError as 'show' ('expected workgroup memory within the
device's maxComputeWorkgroupStorageSize = 32768 bytes, got big 4000000 bytes'; 32768 is lavapipe's
limit), and the script exits 1.

    python3 scripts/redteam/f1d_hidden_workgroup_memory.py hide
    python3 scripts/redteam/f1d_hidden_workgroup_memory.py show
"""
import argparse
import sys
from pathlib import Path

import numpy as np

import webgpu_kernels as wk

sys.path.insert(0, str(Path(__file__).parent))
from hostile_package import BODY, GOOD, attempt, exit_status, make  # noqa: E402

parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
parser.add_argument("mode", nargs="?", default="hide", choices=["show", "hide"],
                    help="hide the declaration behind a comment ending in \\r, or not (default hide)")
args = parser.parse_args()

declaration = ("// note{{ '\\r' }}" if args.mode == "hide" else "") + "var<workgroup> big: array<f32, 1000000>;\n"
template = (GOOD.replace("@compute", declaration + "@compute")
            .replace(BODY, "  big[lix] = a[i];\n  y[i] = big[lix] * 2.0;"))
folder = make(f"wgmem_{args.mode}", template=template)
kernel = wk.load_kernel(folder)
attempt(f"call {args.mode}", lambda: kernel({"A": np.ones(8, np.float32)})["Y"][:3])
sys.exit(exit_status())
