"""Bisect which earlier tests make a later one hang (the NVIDIA suite hang).

    python3 scripts/hang_bisect.py --tail tests/test_execution.py --deadline 560 \
        tests/test_api.py tests/test_bad_input.py ...

Each trial runs pytest on a subset of the given items (files or node ids, in the given order)
followed by the --tail items, in a fresh process, with scripts/hang_probe_plugin.py: a test past
$HANG_S seconds dumps every thread's stack and ends the process. A trial "hangs" when that dump
is in its log. The search keeps the half of the items that still hangs; when neither half does
alone, the hang needs both and the search stops there. Every trial's log is appended to --log,
and the smallest set found is printed after each step, so that a call cut short still reports.
--expand splits a single remaining file into its node ids and goes on bisecting inside it;
--guess tries an item alone first; --recheck K=V reruns the set found with that environment."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time

HANG_MARK = "Timeout ("  # faulthandler.dump_traceback_later's header


def collect(item: str) -> list[str]:
    out = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", item],
                         capture_output=True, text=True).stdout
    return [line for line in out.splitlines() if "::" in line]


class Trials:
    def __init__(self, tail: list[str], log: str, deadline: float, hang_s: int, extra_env: dict[str, str]):
        self.tail, self.log, self.deadline, self.hang_s, self.env = tail, log, deadline, hang_s, extra_env
        self.count = self.dumps = 0

    def time_left(self) -> float:
        return self.deadline - time.monotonic()

    def hangs(self, items: list[str]) -> bool | None:
        """True or False; None when too little time is left to run the trial to its end."""
        budget = self.time_left()
        if budget < 20:
            return None
        self.count += 1
        with tempfile.NamedTemporaryFile("r", suffix=".log", delete=False) as handle:
            run_log = handle.name
        env = dict(os.environ, HANG_LOG=run_log, HANG_S=str(self.hang_s), **self.env)
        env["PYTHONPATH"] = "scripts" + os.pathsep + env.get("PYTHONPATH", "")
        started = time.monotonic()
        try:
            proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "hang_probe_plugin",
                                   *items, *self.tail], capture_output=True, text=True, env=env, timeout=budget)
            rc, tail = proc.returncode, (proc.stdout + proc.stderr).strip().splitlines()[-1:]
        except subprocess.TimeoutExpired:
            return None
        text = open(run_log).read()
        hung = HANG_MARK in text
        last = [line for line in text.splitlines() if line[:1].isdigit()][-1:]
        with open(self.log, "a") as out:
            out.write(f"=== trial {self.count}: {len(items)} items {items[:3]}{' ...' if len(items) > 3 else ''} "
                      f"-> {'HANG' if hung else 'ok'} rc {rc} in {time.monotonic() - started:.0f} s; last {last}; {tail}\n")
            if hung and self.dumps < 2:  # the stacks of the first two hung trials only: they repeat
                self.dumps += 1
                out.write(text[text.index(HANG_MARK):])
        print(f"trial {self.count}: {len(items)} items -> {'HANG' if hung else 'ok'} "
              f"({time.monotonic() - started:.0f} s, {self.time_left():.0f} s left)", flush=True)
        return hung


def bisect(trials: Trials, items: list[str], expand: bool) -> list[str]:
    while True:
        print(f"smallest hanging set so far ({len(items)}): {items}", flush=True)
        if len(items) == 1:
            if not expand or "::" in items[0]:
                return items
            items = collect(items[0])
            print(f"expanded into {len(items)} node ids", flush=True)
            if len(items) <= 1:
                return items
            continue
        half = len(items) // 2
        first, second = items[:half], items[half:]
        verdict = trials.hangs(first)
        if verdict is None:
            return items
        if verdict:
            items = first
            continue
        verdict = trials.hangs(second)
        if verdict is None:
            return items
        if verdict:
            items = second
            continue
        print("neither half hangs alone: the hang needs items from both", flush=True)
        return items


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("items", nargs="+")
    parser.add_argument("--tail", action="append", required=True, help="run after the items in every trial")
    parser.add_argument("--deadline", type=float, default=540, help="seconds from now for the whole search")
    parser.add_argument("--hang-s", type=int, default=30)
    parser.add_argument("--log", default="bisect.log")
    parser.add_argument("--expand", action="store_true")
    parser.add_argument("--confirm", action="store_true", help="first check that all the items hang")
    parser.add_argument("--env", action="append", default=[], help="K=V for every trial")
    parser.add_argument("--guess", action="append", default=[], help="an item to try alone first")
    parser.add_argument("--recheck", action="append", default=[], help="K=V: rerun the set found with it")
    args = parser.parse_args()
    trials = Trials(args.tail, args.log, time.monotonic() + args.deadline, args.hang_s,
                    dict(pair.split("=", 1) for pair in args.env))
    if args.confirm and not trials.hangs(args.items):
        print("all the items together do not hang", flush=True)
        return
    start = args.items
    for guess in args.guess:
        if trials.hangs([guess]):
            start = [guess]
            break
    found = bisect(trials, start, args.expand)
    report(args.log, f"RESULT after {trials.count} trials: {found}")
    for pair in args.recheck:
        key, value = pair.split("=", 1)
        trials.env[key] = value
        verdict = {True: "HANG", False: "ok", None: "no time"}[trials.hangs(found)]
        report(args.log, f"RECHECK {pair}: {verdict}")
        del trials.env[key]


def report(log: str, line: str) -> None:
    print(line, flush=True)
    with open(log, "a") as out:
        out.write(line + "\n")


if __name__ == "__main__":
    main()
