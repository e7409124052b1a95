"""`webgpu-kernels tune`: search variants and tunables per bench.json case and store the fastest
per adapter and shape class (tuning.py), timed as `bench` times (benchmark.py)."""

from __future__ import annotations

import errno
import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import click
import numpy as np
from rich.progress import Progress
from rich.table import Table
from rich.text import Text

from . import tuning
from .bench_report import assignments
from .benchmark import QUICK_NOTE, bench_kernel, quick_timing
from .case_format import BENCH_FILE
from .casefile import advise_case
from .cli import adapter_option, adapter_request_of
from .cli_bench import (
    QUICK_OPTION,
    SEED_OPTION,
    WARM_UP_OPTION,
    bench_cases,
    case_arrays,
    case_selection_options,
    check_given_shapes,
    dtypes_label,
    given_shapes_option,
    load_tuning_cache,
    no_cases_reason,
    now_running,
    quick_warm_up,
    skip_reason,
    warm_up_gpu,
)
from .command_output import is_live, safe_console
from .comparison import Agreement, held_to
from .contract import check_tunables
from .device import default_device
from .errors import KernelError
from .kernel import Kernel
from .kernel_arguments import options_by_name, parse_value, resolve_kernel, trust_option
from .package import embedded_ids

WORKGROUP_CANDIDATES = (64, 128, 256, 512, 1024)

# What a tuning class's calls should run: (variant, tunables), or None for the manifest's own
# selection at the manifest's tunables (what they run when nothing is stored).
Outcome = tuple[str, dict[str, Any]] | None


@dataclass
class _ClassCases:
    """One tuning class's cases tuned so far in a run and the distinct outcomes their searches found."""
    cases: list[tuple[dict[str, Any], str]] = field(default_factory=list)  # (case, its name and dtype)
    candidates: list[Outcome] = field(default_factory=list)
    kept: Outcome = None  # what the class keeps now
    #: (case index, candidate index) -> its timing or why it is out: each pair is timed once, so a
    #: class's later cases time only what is new (the lists above only grow)
    timed: dict[tuple[int, int], float | str] = field(default_factory=dict)


def _searched_callback(ctx: click.Context, param: click.Parameter, values: tuple[str, ...]) -> dict[str, list[Any]]:
    def parse(text: str) -> tuple[str, list[Any]]:
        name, eq, given = text.partition("=")
        if not eq or not name.strip() or not given.strip():
            raise ValueError(f"{text!r} is not NAME=V[,V...]")
        # the values in the order given, once each: the first is where the search starts. Not through
        # a dict: True is 1 there (`1,true` had dropped true unchecked) and [64] was a TypeError.
        values: list[Any] = []
        for value in (parse_value(v.strip()) for v in given.split(",")):
            if not any(type(seen) is type(value) and seen == value for seen in values):
                values.append(value)
        return name.strip(), values

    return options_by_name(ctx, param, values, parse, "tunable {!r} given twice")


@click.command("tune")
@trust_option
@adapter_option
@click.argument("kernels", nargs=-1)
@given_shapes_option("Tune")
@case_selection_options
@WARM_UP_OPTION
@QUICK_OPTION
@SEED_OPTION
@click.option("--tunable", "searched", multiple=True, metavar="NAME=V[,V...]", callback=_searched_callback,
              help="Try only these values of tunable NAME (one value pins it; each parsed as JSON, else a string; "
                   "equal ones, 64 and 64.0, tried once) while the others are searched. Repeatable.")  # fmt: skip
@click.option("--dry-run", is_flag=True, help="Measure and print, but do not write the tuning file.")
@click.pass_context
def tune_cmd(ctx: click.Context, kernels: tuple[str, ...], inputs: dict[str, Any], generators: dict[str, Any],
             attrs: dict[str, Any], names: tuple[str, ...], tags: tuple[str, ...], dtypes: tuple[str, ...],
             warm_up_s: float, quick: bool, seed: int, searched: dict[str, list[Any]], dry_run: bool) -> None:  # fmt: skip
    """Search variants and tunables per case; keep the fastest per adapter.

    Every variant is tried (one whose `when` refuses a candidate costs the attempt; one line per case
    names the variants it refuses at every candidate, and why) with each
    tunable in turn over its candidates
    (workgroup sizes 64 to 1024 for tunables named like WORKGROUP_SIZE, powers of two from 1/4x to
    4x the default for other integers, the other value for booleans), the others held at the best
    so far, starting from the case's own tunables where bench.json names some; a candidate is kept
    only if its output agrees with the default's. Nothing is stored for a class (the inputs' dimensions
    rounded down to powers of two) whose winner is the manifest's own selection: calls there run
    it. Where cases of one class find different winners, each of those is timed on every case of
    the class, and the class keeps the one fastest over them all among those that run each case
    with the default's output (nothing stored if that is the manifest's selection). `--tunable
    NAME=V[,V...]` replaces NAME's candidates with those values and starts the search at the first;
    the case's default is still timed, and wins where no candidate beats it."""
    console = safe_console()
    device = ctx.with_resource(default_device(adapter_request_of(ctx)))  # every timing and call on --adapter's device
    cache = load_tuning_cache(device)
    inputs = check_given_shapes(kernels, inputs, generators, attrs, names, tags, dtypes)
    loaded = [resolve_kernel(k) for k in (kernels or embedded_ids())]
    # each value checked as a call would check it: a refused one is never tried
    given = [_as_taken(kernel, searched, several=len(loaded) > 1) for kernel in loaded]
    work = [(k, c, g) for k, g in zip(loaded, given, strict=True) for c in bench_cases(k, names, tags, dtypes, inputs, attrs)]
    if not work:
        raise click.UsageError(no_cases_reason(loaded, names, tags, dtypes, "tune"))
    if not dry_run:
        _check_writable(cache.path)
    _say_problem(console, cache, dry_run)
    table = Table(title=f"tuning on {device.adapter.label()}")
    for col in ("kernel", "case", "dtype", "default", "default µs", "best", "best µs", "speed-up"):
        table.add_column(col)
    errors: list[str] = []  # the cases that failed for a reason other than the adapter's limits
    skips: dict[str, list[str]] = {}  # why -> the cases skipped for it on this adapter
    saved = False  # whether a case's result reached the tuning file
    wrote = False  # whether a save changed the file (one that changes no entry writes nothing)
    existed = os.path.lexists(cache.path)
    by_class: dict[str, _ClassCases] = {}  # tuning class -> its cases and what it keeps
    earlier_entries = set(cache.entries)  # the classes the file held before this run
    dropped: set[str] = set()  # of those, the classes whose entry this run removed
    with quick_timing(quick), Progress(console=console, transient=True, disable=not is_live(console)) as progress:
        warm_up_gpu(progress, device, quick_warm_up(ctx, quick, warm_up_s))
        task = progress.add_task("tuning", total=len(work))
        for kernel, case, only in work:
            now_running(progress, task, f"{kernel.manifest.name} {case['name']} {assignments(case['types'])}")
            # The case's own tunables over the manifest's are where its search starts and what a
            # candidate must beat (a case may name them because the manifest's cannot run it).
            defaults = {**kernel.manifest.tunables, **case["tunables"]}
            reason = skip_reason(kernel, case)
            if reason is not None:  # as `test` and bench skip it: the adapter's, no failure
                label = dtypes_label(case["types"].values())
                skips.setdefault(reason, []).append(f"{kernel.manifest.name} {case['name']} {label}")
                progress.console.print(f"{kernel.manifest.name} {case['name']} {assignments(case['types'])}: skipped: {reason}",
                                       soft_wrap=True)  # fmt: skip
                table.add_row(kernel.manifest.name, case["name"], label, Text("skipped", style="yellow"))
                progress.advance(task)
                continue
            # Full timing first: it also brings the GPU to sustained load before the search.
            try:
                arrays = case_arrays(case, seed)
                default = bench_kernel(kernel, arrays, attrs=case["attrs"], tunables=defaults)
            except KernelError as exc:  # a case that cannot run for another reason (bench's error row)
                advise_case(exc, BENCH_FILE)  # bench.json's dtype or value, as bench's row says it
                errors.append(f"{kernel.manifest.name} {case['name']} {dtypes_label(case['types'].values())}")
                progress.console.print(Text(f"{kernel.manifest.name} {case['name']} {assignments(case['types'])}: not tuned: {exc}",
                                            style="red"), soft_wrap=True)  # fmt: skip
                table.add_row(kernel.manifest.name, case["name"], dtypes_label(case["types"].values()),
                              Text("error", style="red"))  # fmt: skip
                progress.advance(task)
                continue
            tolerance = held_to(case["types"].values(), case.get("tolerances"))  # bench's rule
            label = f"{kernel.manifest.name} {case['name']} {assignments(case['types'])}"

            def show(variant: str, tunables: dict[str, Any], label: str = label) -> None:
                # A search on a slow adapter takes minutes per case: the line names what runs now.
                now_running(progress, task, f"{label}: trying {variant} {assignments(tunables)}")

            start = {**defaults, **{name: values[0] for name, values in only.items()}}
            never_took: list[str] = []
            best, skipped = _search(kernel, arrays, case["attrs"], default,
                                    _tunable_axes(kernel, device, start, only=only), tolerance, defaults,
                                    on_candidate=show, start=start, never_took=never_took)  # fmt: skip
            if never_took:  # no "trying" line showed they were considered: one line says why not
                progress.console.print(f"{label}: not tried, as each refuses the case at every candidate: "
                                       f"{_refusals(kernel, arrays, case['attrs'], start, never_took)}", soft_wrap=True)
            default_s = default.median_s  # the default's time the table shows next to the winner's
            if (best[1], best[2]) != (default.variant, defaults):
                best, default_s = _confirm(kernel, arrays, case["attrs"], default, best, defaults)
            if (best[1], best[2]) == (default.variant, defaults):
                best, default_s = (default.median_s, default.variant, defaults), default.median_s  # no false "1.01x"
            if skipped:
                progress.console.print(Text(f"{kernel.manifest.name} {case['name']}: skipped (output differs from the "
                                            f"default's): {', '.join(skipped)}", style="yellow"), soft_wrap=True)  # fmt: skip
            tuning_class = kernel.tuning_class(arrays, case["attrs"])
            # What calls of this class should run: nothing stored when the manifest's own selection
            # won (an entry would impose this shape's default variant on every shape of the class),
            # where two cases of one class found different winners, the one fastest over all its
            # cases (_resolve_class); else the winner.
            # Compared by the work the GPU is given (work_key): a tunable the winner never reads
            # makes no other outcome.
            winner = (best[1], best[2])
            outcome = None if _same_work(kernel, arrays, case["attrs"], winner, None) else winner
            key = tuning.entry_key(kernel.tuning_key, *tuning_class)
            # the dtype: a case name runs in each of its dtypes, and each dtype is a class of its own
            named = f"{case['name']!r} ({dtypes_label(case['types'].values())})"
            cls = by_class.setdefault(key, _ClassCases())
            cls.cases.append((case, named))
            if not any(_same_work(kernel, arrays, case["attrs"], c, outcome) for c in cls.candidates):
                cls.candidates.append(outcome)
            del arrays  # the resolution rebuilds each case's inputs: one case's at a time in memory
            cls.kept, kept_s = outcome, best[0]
            if len(cls.candidates) > 1:  # a conflict, now or earlier: this case joins the totals
                now_running(progress, task, f"{label}: timing its class's {len(cls.candidates)} choices on its "
                                            f"{len(cls.cases)} cases")  # fmt: skip
                cls.kept, kept_s, text = _resolve_class(kernel, cls, seed)
                progress.console.print(Text(f"{kernel.manifest.name} {named}: {text}", style="yellow"), soft_wrap=True)
            if not dry_run:
                if cls.kept is None:
                    if key in earlier_entries:
                        dropped.add(key)
                    cache.forget(kernel.tuning_key, *tuning_class)
                else:
                    cache.record(kernel.tuning_key, tuning_class[0], tuning_class[1],
                                 tuning.TunedChoice(*cls.kept, kept_s), *tuning_class[2:])  # fmt: skip
                try:
                    wrote = cache.save() or wrote  # after every case: an interrupted search keeps what it found
                    saved = True
                except OSError as exc:  # what _check_writable could not foresee (the folder changed since)
                    raise click.ClickException(f"cannot save the tuning file {cache.path}: {exc}") from None
            table.add_row(kernel.manifest.name, case["name"], dtypes_label(case["types"].values()),
                          f"{default.variant} {assignments(defaults)}", f"{default_s * 1e6:.1f}",
                          f"{best[1]} {assignments(best[2])}", f"{best[0] * 1e6:.1f}", f"{default_s / best[0]:.2f}x")  # fmt: skip
            progress.console.print(f"{kernel.manifest.name} {case['name']} {assignments(case['types'])}: default {default.variant} "
                                   f"{default_s * 1e6:.1f} µs, best {best[1]} {assignments(best[2])} {best[0] * 1e6:.1f} µs")
            progress.advance(task)
    console.print(table)
    if quick:
        console.print(QUICK_NOTE)
    # "saved:" alone had read as a stored choice where the selection won and nothing was stored.
    stored = sum(1 for cls in by_class.values() if cls.kept is not None)
    if dry_run:
        console.print(f"dry run: nothing written to {cache.path} (a run would store a choice for "
                      f"{stored} of {len(by_class)} tuning classes)", soft_wrap=True)  # fmt: skip
    elif saved:
        # "saved:" had also ended a run that stored nothing, its file holding no entry for it.
        kept = len(by_class) - stored
        them = "it" if kept == 1 else "them"
        entries = f"{len(dropped)} earlier entr{'y' if len(dropped) == 1 else 'ies'}"
        removed = f"; {entries} for {them} removed from {cache.path}" if dropped else ""
        why = (f"the manifest's own selection: nothing is stored for {them} (the selection won, over all their "
               f"cases where those disagreed, or nothing else ran them all){removed}")  # fmt: skip
        if not stored:
            classes = "its one tuning class keeps" if kept == 1 else f"all {kept} tuning classes keep"
            # a run that changed nothing writes nothing: no file of no entries, none rewritten
            untouched = "" if wrote else f"; {cache.path} {'is as it was' if existed else 'was not created'}"
            console.print(f"nothing stored in {cache.path}: {classes} {why}{untouched}", soft_wrap=True)
        else:
            choices = f"(a choice for {stored} of {len(by_class)} tuning classes)"
            if wrote:
                console.print(f"saved: {cache.path} {choices}", soft_wrap=True)
            else:  # every entry (median included) as the file held it: "saved:" had named a file not written
                console.print(f"{cache.path} already held these choices {choices}: nothing written", soft_wrap=True)
            if kept:
                console.print(f"{kept} of {len(by_class)} tuning classes keep {why}", soft_wrap=True)
    else:  # every case errored or was skipped: "saved:" had named a file that nothing was written to
        console.print(f"nothing saved: no case was tuned, so {cache.path} is as it was")
    if cache.backup is not None:
        console.print(Text(f"the tuning file as it was is kept as {cache.backup}", style="yellow"), soft_wrap=True)
    for reason, these in skips.items():  # apart from the errors: a skip fails nothing
        console.print(Text(f"{len(these)} of {len(work)} cases skipped ({reason}): {', '.join(these)}", style="yellow"),
                      soft_wrap=True)  # fmt: skip
    if errors:  # as bench: a CI job must see that a case failed. Not "on this device": those are skips now
        console.print(Text(f"{len(errors)} of {len(work)} cases could not be tuned (see the errors above): "
                           f"{', '.join(errors)}", style="red"), soft_wrap=True)  # fmt: skip
        ctx.exit(1)


def _as_taken(kernel: Kernel, searched: dict[str, list[Any]], *, several: bool) -> dict[str, list[Any]]:
    """--tunable's values as ``kernel``'s contract takes them (64.0 is the integer 64 for an integer
    tunable), numerically equal ones collapsed into the first given: 64,64.0 had been two candidates,
    the second shown and possibly stored as a float. A value the contract refuses is its error;
    ``several``: other KERNELs are tuned too, so the error says which kernel's contract refused it."""
    taken: dict[str, list[Any]] = {}
    for name, values in searched.items():
        kept = taken.setdefault(name, [])
        for value in values:
            try:
                value = check_tunables(kernel.manifest, {name: value})[name]
            except KernelError as exc:
                if several:  # which of them: the message lists that kernel's tunables alone
                    exc.add_note(f"note: that is {kernel.op_id}'s contract; --tunable applies to every "
                                 "KERNEL tuned, so tune the kernels that declare it without the others")
                raise
            # a float tunable keeps an integer as one (it renders "64", not "64.0"): equal all the same
            if not any(seen == value and isinstance(seen, bool) == isinstance(value, bool) for seen in kept):
                kept.append(value)
    return taken


def _check_writable(path: Path) -> None:
    """The tuning file's folder made and writable now, its lock file writable and the file itself
    readable: a read-only folder had crashed with a raw OSError after the first case's search, and
    another user's lock file (or tuning file) in a shared folder the same."""
    folder = path.parent
    try:
        folder.mkdir(parents=True, exist_ok=True)
        _probe_new_file(folder)
        lock = folder / tuning.LOCK_NAME
        if lock.exists():
            with open(lock, "a"):  # as filelock opens it
                pass
        if path.is_file() and not os.access(path, os.R_OK):
            raise PermissionError(errno.EACCES, "this user cannot read the tuning file", str(path))
        if path.is_dir():  # no file can be renamed over it: the first save had failed, after a search
            raise IsADirectoryError(errno.EISDIR, "a folder has the tuning file's name", str(path))
        if os.path.lexists(path) and not path.is_file():  # a FIFO, a link to nothing: calls say to make it a
            # regular file, and the first save had replaced it with one of its own (not moved it aside)
            raise OSError(errno.EEXIST, "the tuning file's name is not a regular file (a FIFO, or a link to nothing)",
                          str(path))  # fmt: skip
        target = tuning.write_path(path)
        if target != path:  # a link of this user's: the save writes beside the file it points to
            _check_writable_beside(target)
    except OSError as exc:
        raise click.UsageError(f"the tuning folder {folder} is not writable ({exc.strerror or exc}"
                               f"{': ' + exc.filename if exc.filename and exc.filename != str(folder) else ''}): set "
                               f"{tuning.CACHE_ENV} to a folder of your own, or pass --dry-run") from None  # fmt: skip


def _probe_new_file(folder: Path) -> None:
    """An OSError unless this user can make a file in ``folder`` (a temporary one, removed at once)."""
    tempfile.NamedTemporaryFile(dir=folder, prefix=".write-check.").close()  # noqa: SIM115 - closed at once


def _check_writable_beside(target: Path) -> None:
    """The folder of the file a tuning file's link points to takes a new file, or that file is
    written in place (what replace_file does where its folder takes none)."""
    try:
        _probe_new_file(target.parent)
    except OSError as exc:
        if not (target.is_file() and os.access(target, os.W_OK)):
            raise PermissionError(exc.errno or errno.EACCES, "the tuning file is a link to a file this user cannot "
                                  "write, in a folder this user cannot write", str(target)) from None  # fmt: skip


def _say_problem(console: Any, cache: tuning.TuningCache, dry_run: bool) -> None:
    """What is wrong with the tuning file, and what this run does with it: the first save moves a
    damaged or other-version file aside, never over it (a hand edit with one typo is kept)."""
    problem = cache.problem
    if problem is None:
        return
    if dry_run or not problem.readable:  # as calls and bench say it (an unreadable file: refused before this)
        text = problem.message(cache.path)
    else:
        kept = "its valid entries go into the new file" if not problem.whole else "nothing of it goes into the new file"
        # the name the save will use: <name>.1.bak where <name>.bak is taken, beside a link's file; a
        # run that stores nothing makes no save (the line had said the file moves regardless)
        text = (f"tuning file {cache.path}: {problem.what}; the first save moves it aside to "
                f"{tuning.backup_text(cache.path)} (an earlier backup is kept) and {kept}; a run that stores "
                "nothing leaves it as it is")  # fmt: skip
    console.print(Text(text, style="yellow"), soft_wrap=True)


def _same_work(kernel: Kernel, arrays: dict[str, np.ndarray], attrs: dict[str, Any],
               a: tuple[str, dict[str, Any]] | None, b: tuple[str, dict[str, Any]] | None) -> bool:
    """Whether choices ``a`` and ``b`` ((variant, tunables), or None for the manifest's own
    selection at its tunables) give the GPU the same work for these inputs; one that cannot run
    them is no match."""
    def work(choice: tuple[str, dict[str, Any]] | None) -> Any:
        return kernel.work_key(arrays, attrs=attrs) if choice is None else kernel.work_key(
            arrays, attrs=attrs, variant=choice[0], tunables=choice[1])

    if a == b:
        return True
    try:
        return work(a) == work(b)
    except KernelError:
        return False


def _outcome_text(outcome: Outcome) -> str:
    return "the manifest's selection" if outcome is None else f"{outcome[0]} {assignments(outcome[1])}"


def _resolve_class(kernel: Kernel, cls: _ClassCases, seed: int) -> tuple[Outcome, float, str]:
    """What a class whose cases found different winners keeps: of its candidates (those winners)
    that run every case of the class with the case default's output, the one with the smallest
    total of full timings over the cases (the search's own two near-equal local optima were both
    3.4x the selection's speed, and the class had kept the selection). Returns it, its time on the
    latest case (what is stored with it) and the line that says why."""
    for i, (case, _) in enumerate(cls.cases):
        new = [j for j in range(len(cls.candidates)) if (i, j) not in cls.timed]
        if new:
            results = _time_candidates(kernel, case, seed, [cls.candidates[j] for j in new])
            cls.timed.update(((i, j), r) for j, r in zip(new, results, strict=True))
    per_case = [[cls.timed[i, j] for j in range(len(cls.candidates))] for i in range(len(cls.cases))]
    totals: list[float] = []
    notes: list[str] = []  # per candidate: its total, or why it is out
    for i, candidate in enumerate(cls.candidates):
        failed = next(((named, r[i]) for (_, named), r in zip(cls.cases, per_case, strict=True)
                       if isinstance(r[i], str)), None)  # fmt: skip
        totals.append(float("inf") if failed else sum(float(r[i]) for r in per_case))
        notes.append(f"{_outcome_text(candidate)} disqualified on {failed[0]} ({failed[1]})" if failed
                     else f"{_outcome_text(candidate)} {totals[i] * 1e6:.1f} µs")  # fmt: skip
    best = min(range(len(totals)), key=totals.__getitem__)
    cases = ", ".join(named for _, named in cls.cases)
    head = f"its tuning class's cases found different choices; timed on each of its {len(cls.cases)} cases ({cases}), "
    if totals[best] == float("inf"):  # none runs them all: calls run the selection, as with nothing stored
        return None, 0.0, f"{head}none ran them all: nothing is stored for the class ({'; '.join(notes)})"
    kept = cls.candidates[best]
    what = "the manifest's selection (nothing is stored for it)" if kept is None else _outcome_text(kept)
    others = "; ".join(n for i, n in enumerate(notes) if i != best)
    return kept, float(per_case[-1][best]), f"{head}the class keeps {what}: {totals[best] * 1e6:.1f} µs in all, against {others}"


def _time_candidates(kernel: Kernel, case: dict[str, Any], seed: int, candidates: list[Outcome]) -> list[float | str]:
    """Per candidate, its full timing on ``case`` (inputs rebuilt from it: a large case's are GBs,
    not kept between cases), or why it cannot stand for the case: its variant refuses it, it
    raises, or its output differs from the case default's (the search's check)."""
    arrays, attrs = case_arrays(case, seed), case["attrs"]
    defaults = {**kernel.manifest.tunables, **case["tunables"]}
    try:  # the default's variant forced: no stored choice answers (tunables {} would let one)
        default_variant = kernel.work_key(arrays, attrs=attrs, tunables=defaults)[0]
        expected = _as_float64(kernel(arrays, attrs=attrs, variant=default_variant, tunables=defaults))
    except KernelError as exc:  # it ran in this run's search: a device gone wrong since
        return [f"the case's default failed: {exc}"] * len(candidates)
    tolerance = held_to(case["types"].values(), case.get("tolerances"))  # bench's rule
    results: list[float | str] = []
    for candidate in candidates:
        try:
            # None: the selection at the manifest's tunables, forced so that no stored choice answers
            variant, tunables = (kernel.work_key(arrays, attrs=attrs)[0], dict(kernel.manifest.tunables)) \
                if candidate is None else candidate
            outputs = kernel(arrays, attrs=attrs, variant=variant, tunables=tunables)
            if set(outputs) != set(expected) or not tolerance(outputs, expected).ok:
                results.append("its output differs from the default's")
                continue
            results.append(bench_kernel(kernel, arrays, attrs=attrs, variant=variant, tunables=tunables).median_s)
        except KernelError as exc:
            results.append(f"refused or failed: {exc}")
    return results


def _search(kernel: Kernel, arrays: dict[str, np.ndarray], attrs: dict[str, Any], default: Any,
            axes: list[tuple[str, list[Any]]], tolerance: Callable[..., Agreement], defaults: dict[str, Any] | None = None,
            on_candidate: Callable[[str, dict[str, Any]], None] | None = None, start: dict[str, Any] | None = None,
            never_took: list[str] | None = None) -> tuple[tuple[float, str, dict[str, Any]], list[str]]:  # fmt: skip
    """The fastest (median_s, variant, tunables) found for one case, and the candidates skipped for
    computing something else. Every variant gets a coordinate search (one that refuses the case
    at every candidate costs only the attempts): each
    tunable in turn over its candidate values, the others held at the best found so far for that
    variant (a grid over three tunables would be ~100 timings per variant; a sweep is ~13), then a
    second sweep from where the first ended (a better ROW_ITEMS can make another WORKGROUP_SIZE the
    better one, the default's included). No candidate is timed twice, so a second sweep from where
    the first started, or over one tunable, times nothing. The search moves only to a candidate
    whose output agrees with the default's, checked when it is about to become the variant's best
    (reading back and comparing 84M elements costs about a second). ``defaults``: the tunables
    ``default`` ran with (the manifest's unless the case names some); ``on_candidate(variant,
    tunables)`` hears of each candidate before it is timed (the progress line); ``start``: where each
    variant's search starts (tune --tunable's first values over ``defaults``), ``defaults`` if None;
    ``never_took``: gets the variants that refused the case at every candidate, by their `when` or
    their plan's error (no "trying" line says they were considered)."""
    defaults = dict(kernel.manifest.tunables) if defaults is None else defaults
    start = defaults if start is None else start
    best = (default.median_s, default.variant, defaults)
    # A candidate must compute what the default computes: a variant that skips its work would
    # otherwise "win" and be stored for every later call.
    expected: dict[str, np.ndarray] = {}
    skipped: list[str] = []
    # No candidate is timed whose work the GPU was given already: the same tunables again, or a
    # tunable its variant never reads (a naive variant's workgroup size in a tiled one), which could
    # only "win" by noise; the default is timed in full, a short re-timing could only flatter it.
    timed = {kernel.work_key(arrays, attrs=attrs, variant=default.variant, tunables=defaults)}
    refused: set[tuple[str, tuple[tuple[str, Any], ...]]] = set()  # not tried again by the second sweep
    # Every variant, not only those that accept the manifest's tunables: one may accept the case only
    # at other values (or at the case's own); a refused candidate costs the attempt alone.
    for variant in kernel.variants:
        # The default's time to beat where the start gives the GPU the default's work: also where it
        # differs only in a tunable this variant never reads (a slower candidate had become the lead).
        here, here_s = start, float("inf")
        took = False  # whether the variant took the case (its `when` and its plan) at some candidate
        if variant == default.variant and _same_work(kernel, arrays, attrs, (variant, start), (variant, defaults)):
            here_s = default.median_s
        for sweep in ([("", [None]), *axes], axes):
            for name, values in sweep:
                origin = here  # each axis swept around the best so far (not `start`: the next variant's)
                for value in values:
                    tunables = origin if not name else {**origin, name: value}
                    candidate = (variant, tuple(sorted(tunables.items())))
                    if candidate in refused:
                        continue
                    try:
                        work = kernel.work_key(arrays, attrs=attrs, variant=variant, tunables=tunables)
                    except KernelError:  # a candidate the variant's `when` (or its plan) refuses
                        refused.add(candidate)
                        continue
                    took = True
                    if work in timed:
                        continue
                    timed.add(work)
                    if on_candidate is not None:
                        on_candidate(variant, tunables)
                    try:
                        r = bench_kernel(kernel, arrays, attrs=attrs, variant=variant, tunables=tunables,
                                         min_total_s=0.1, min_batches=3)  # fmt: skip
                    except KernelError:  # or the device
                        continue
                    if r.median_s >= here_s:  # best[0] <= here_s: not a lead either
                        continue
                    if not expected:  # the default's output (variant forced: no stored choice answers)
                        expected.update(_as_float64(kernel(arrays, attrs=attrs, variant=default.variant,
                                                           tunables=defaults)))  # fmt: skip
                    outputs = kernel(arrays, attrs=attrs, variant=variant, tunables=tunables)
                    # other outputs (an optional one only some variants produce) are other work
                    if set(outputs) != set(expected) or not tolerance(outputs, expected).ok:
                        skipped.append(f"{variant} {assignments(tunables)}")
                        continue  # not a point to search around either
                    here, here_s = tunables, r.median_s
                    if r.median_s < best[0]:
                        best = (r.median_s, variant, tunables)
        if not took and never_took is not None:
            never_took.append(variant)
    return best, skipped


def _refusals(kernel: Kernel, arrays: dict[str, np.ndarray], attrs: dict[str, Any], tunables: dict[str, Any],
              variants: list[str]) -> str:  # fmt: skip
    """``variants``, each with what refuses it at ``tunables``: the clause of its `when` (the selection
    trace's words), else the error its plan raises (a `when` that holds is not what refused it)."""
    try:
        verdicts = {v.variant: v for v in kernel.explain(arrays, attrs=attrs, tunables=tunables).verdicts}
    except KernelError:  # the start's tunables refused by the contract: the names alone
        return ", ".join(variants)

    def why(variant: str) -> str | None:
        if variant in verdicts and not verdicts[variant].accepted:
            return verdicts[variant].reason()
        try:
            kernel.work_key(arrays, attrs=attrs, variant=variant, tunables=tunables)
        except KernelError as exc:
            return f"{type(exc).__name__}: {exc}"
        return None  # refused at other candidates only

    return ", ".join(v if (reason := why(v)) is None else f"{v} ({reason})" for v in variants)


def _as_float64(outputs: dict[str, Any]) -> dict[str, np.ndarray]:
    return {name: np.asarray(value, dtype=np.float64) for name, value in outputs.items()}


def _confirm(kernel: Kernel, arrays: dict[str, np.ndarray], attrs: dict[str, Any], default: Any,
             best: tuple[float, str, dict[str, Any]],
             defaults: dict[str, Any]) -> tuple[tuple[float, str, dict[str, Any]], float]:  # fmt: skip
    """Re-time the winner against the default, alternating, with full timing; keep the winner only
    if it is at least 3% faster in both rounds (short searches can be fooled by clock changes).
    Returns the choice and the default's time of the last round: the winner's is compared with
    that, not with the search's first timing of the default (a slower-looking winner was stored)."""
    wins = []
    for _ in range(2):
        d = bench_kernel(kernel, arrays, attrs=attrs, tunables=defaults)
        b = bench_kernel(kernel, arrays, attrs=attrs, variant=best[1], tunables=best[2])
        wins.append(b.median_s < 0.97 * d.median_s)
    if all(wins):
        return (b.median_s, best[1], best[2]), d.median_s
    return (d.median_s, default.variant, defaults), d.median_s


def _tunable_axes(kernel: Kernel, device: Any, start: dict[str, Any] | None = None,
                  only: dict[str, list[Any]] | None = None) -> list[tuple[str, list[Any]]]:  # fmt: skip
    """Per tunable, the values the search tries, the manifest's default and the value in ``start``
    (a case's own tunables) among them (a second sweep may have to return to either): for an integer named like a workgroup size the usual sizes (64 to
    1024, within the device's limit), for another positive integer the powers of two from a quarter
    to four times the default, for a boolean both values. A tunable with no other value is not an
    axis. A candidate a variant's `when` refuses costs nothing but the attempt. ``only``: tunable ->
    the values to try instead (tune --tunable), as given."""
    limit = device.info.limits.get("maxComputeInvocationsPerWorkgroup", 256)
    axes = []
    for name, value in kernel.manifest.tunables.items():
        given = (start or {}).get(name, value)
        given = given if type(given) is type(value) else value  # a mistyped one: the call refuses it
        values: list[Any]
        if only and name in only:
            values = list(only[name])
        elif isinstance(value, bool):
            values = [value, not value]
        elif isinstance(value, int) and "WORKGROUP" in name.upper():
            values = sorted({size for size in WORKGROUP_CANDIDATES if size <= limit} | {value, given})
        elif isinstance(value, int) and value > 0:
            values = sorted({v for v in (value // 4, value // 2, value, value * 2, value * 4) if v > 0} | {given})
        else:
            continue
        if len(values) > 1:
            axes.append((name, values))
    return axes


COMMANDS = [tune_cmd]
