#!/usr/bin/env python3
"""The long fuzz run (and the resource soak) as one command.

    python scripts/fuzz_long.py                 # tests/test_fuzz.py and the runtime's state machine
                                                # (tests/test_runtime_state_machine.py), 40x the CI
                                                # examples, random
    python scripts/fuzz_long.py --scale 100     # more
    python scripts/fuzz_long.py --seed 1234     # reproduce a run
    python scripts/fuzz_long.py --soak          # also: 10,000 calls with distinct alpha values and
                                                # 10,000 with distinct shapes, shipped cache sizes

The fuzz strategies are the CI ones (tests/test_fuzz.py); ``WK_FUZZ_SCALE`` multiplies every
``max_examples`` and ``WK_FUZZ_RANDOM=1`` drops ``derandomize``, so each run explores new cases;
``WK_FUZZ_SLOW_S`` (3 unless set) fails an example that takes longer, which the CI run does not time.
The soak is tests/test_resources.py with ``WK_SOAK_CALLS`` (distinct-alpha calls; ~16 ms each on
lavapipe, since each compiles a pipeline). Extra arguments go to pytest. Exit status: pytest's.
"""

from __future__ import annotations

import argparse
import atexit
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run(title: str, args: list[str], env: dict[str, str]) -> int:
    print(f"\n=== {title}: pytest {' '.join(args)}", flush=True)
    started = time.perf_counter()
    status = subprocess.call([sys.executable, "-m", "pytest", *args], cwd=ROOT, env=env)
    print(f"=== {title}: exit {status} after {time.perf_counter() - started:.0f} s", flush=True)
    return status


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scale", type=float, default=40.0, help="multiplier of every max_examples (default 40: 76,000 cases, as many as 20x before the CI budgets were halved)")
    parser.add_argument("--seed", type=int, default=None, help="hypothesis seed (default: random)")
    parser.add_argument("--soak", action="store_true", help="also run the 10,000-call resource soak")
    parser.add_argument("--soak-calls", type=int, default=10_000, help="distinct-alpha calls in the soak")
    parser.add_argument("--no-fuzz", action="store_true", help="only the soak")
    args, pytest_args = parser.parse_known_args()

    env = dict(os.environ)
    if not env.get("XDG_RUNTIME_DIR"):  # a folder made only when needed, and removed at exit
        env["XDG_RUNTIME_DIR"] = tempfile.mkdtemp(prefix="wk-xdg-")
        atexit.register(shutil.rmtree, env["XDG_RUNTIME_DIR"], ignore_errors=True)
    env["WK_FUZZ_SCALE"] = str(args.scale)
    env["WK_FUZZ_RANDOM"] = "1"
    env.setdefault("WK_FUZZ_SLOW_S", "3")  # an example slower than this fails here (the suite times nothing)
    status = 0
    if not args.no_fuzz:
        fuzz = ["tests/test_fuzz.py", "tests/test_runtime_state_machine.py", "-q", "-p", "no:cacheprovider", "--hypothesis-show-statistics", *pytest_args]
        if args.seed is not None:
            fuzz.append(f"--hypothesis-seed={args.seed}")
        status = run(f"fuzz x{args.scale:g}", fuzz, env) or status
    if args.soak:
        env["WK_SOAK_CALLS"] = str(args.soak_calls)
        soak = ["tests/test_resources.py", "-q", "-s", "-p", "no:cacheprovider", "-k",
                "distinct_alpha or distinct_shapes", *pytest_args]  # fmt: skip
        status = run(f"soak ({args.soak_calls} distinct alpha values)", soak, env) or status
    return status


if __name__ == "__main__":
    sys.exit(main())
