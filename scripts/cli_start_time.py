"""Wall-clock start-up of the command line, this tree against another, in fresh processes.

    git archive REV src | tar -x -C /tmp/old   # the other tree
    python3 scripts/cli_start_time.py /tmp/old/src [--runs 10]

Each command runs as ``python3 -m webgpu_kernels ...`` (no console-script shim), the two trees
alternated, and the best and median of ``--runs`` are printed per command and tree.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

COMMANDS = (["--help"], ["list"], ["info", "com.microsoft.BiasAdd"], ["run", "--help"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("other_src", help="the other tree's src folder")
    parser.add_argument("--runs", type=int, default=10)
    args = parser.parse_args()
    trees = {"this tree": str(Path(__file__).resolve().parents[1] / "src"), "other": args.other_src}
    times: dict[tuple[str, str], list[float]] = {}
    for _ in range(args.runs):
        for tree, src in trees.items():
            for command in COMMANDS:
                start = time.perf_counter()
                subprocess.run([sys.executable, "-m", "webgpu_kernels", *command], env={**os.environ, "PYTHONPATH": src},
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)  # fmt: skip
                times.setdefault((tree, " ".join(command)), []).append(time.perf_counter() - start)
    for command in COMMANDS:
        name = " ".join(command)
        cells = [f"{tree}: best {min(times[tree, name]):.2f} s, median {statistics.median(times[tree, name]):.2f} s"
                 for tree in trees]  # fmt: skip
        print(f"{name:28s} " + "; ".join(cells))


if __name__ == "__main__":
    main()
