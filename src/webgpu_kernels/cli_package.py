"""Package commands for authors: ``digest``, ``test`` and ``validate`` (registered by cli.py).

* ``digest PATH`` writes or refreshes ``metadata.json`` (sha256 of every package file).
* ``test [KERNEL|PATH ...]`` runs every test.json case on every variant that accepts it.
* ``validate PATH`` reports every problem of a package at once.

``test`` and ``validate`` can run their GPU work in a child process (``--isolate``), the default
for packages that needed ``trust_remote_code``: wgpu-native may abort the whole process on some
invalid GPU work, and then only the child dies.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from . import tuning
from .cli import FiniteFloatRange, adapter_option, adapter_request_of, output_file
from .command_output import echo_json, is_live, safe_console, shell_word
from .device import choose_adapter
from .digests import (
    METADATA_FILE,
    UNLISTABLE,
    DigestChange,
    ManifestFile,
    MetadataFile,
    build_metadata,
    kept_version_note,
    manifest_op_id,
    missing_templates,
    pass_templates,
    schema_problems,
    templates_there,
    write_metadata,
)
from .errors import DigestError, KernelError, PackageError, one_line
from .junit_report import junit_xml, validation_junit_xml, write_junit
from .kernel_arguments import FOLDER, classify_kernel_ref, hub_pin, kernel_folder, resolve_kernel, trust_option
from .package import MANIFEST_FILE, embedded_ids, embedded_root
from .package_tests import run_package_tests, run_package_tests_isolated
from .reading import not_regular
from .run_results import FAIL, PASS, SKIP, PackageReport, RunResult
from .validation import ERROR, ValidationReport, validate_package, validate_package_isolated

_STATUS_STYLE = {"pass": "green", "fail": "bold red", "error": "bold red", "skip": "yellow"}


@contextmanager
def _progress(console: Console, label: str) -> Iterator[Any]:
    """A rich progress bar on ``console`` (stderr), or a no-op callback when it is not a terminal."""
    if not is_live(console):
        yield lambda kind, value: None
        return
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=console, transient=True) as progress:
        task = progress.add_task(escape(label), total=None)

        def update(kind: str, value: Any) -> None:
            if kind == "total":
                progress.update(task, total=value)
            elif kind == "advance":
                progress.advance(task, value)
            elif kind == "start":
                text = " / ".join(str(v) for v in value.values()) if isinstance(value, dict) else str(value)
                progress.update(task, description=escape(f"{label}: {text}"))

        yield update


def _result_text(r: RunResult) -> str:
    """The table's result: a failed comparison says how many elements are off, since its error
    columns cover only the elements finite in both, and a kernel that leaves one element unwritten
    (NaN) had read 'FAIL' beside errors of 1e-7, like the passing rows."""
    if r.status == "pass":
        return "pass (refused)" if r.refused else "pass"
    if r.status != FAIL or not r.outputs:
        return r.status.upper() if r.failed else r.status
    off = [o for o in r.outputs if not o.get("ok", True)]
    if any(o.get("message", "").startswith("shape ") for o in off):
        return "FAIL (shape)"
    bad, size = sum(o.get("mismatches", 0) for o in off), sum(o.get("size", 0) for o in off)
    return f"FAIL ({bad} of {size})" if bad else "FAIL"


def _err(value: float | None) -> str:
    return "-" if value is None or not math.isfinite(value) else f"{value:.3g}"


def _worst(result: RunResult, key: str) -> str:
    """A run's largest error over its outputs (``maxAbsError``/``maxRelError``), naming the output
    that holds it when the kernel has several (the table has one column for all of them)."""
    errors = [(o[key], o["output"]) for o in result.outputs if o.get(key) is not None]
    if not errors:
        return _err(None)
    value, output = next(((v, out) for v, out in errors if not math.isfinite(v)), None) or max(errors)
    return _err(value) + (f" ({output})" if len(result.outputs) > 1 else "")


# --- digest -----------------------------------------------------------------------------------------


@click.command("digest")
@click.argument("path", type=FOLDER)
@click.option("--check", is_flag=True, help="Write nothing; exit 1 if metadata.json is missing or out of date.")
@click.option("--version", "version", type=click.IntRange(min=1), default=None, metavar="N",
              help="Set the contract version to N, for a later, changed contract published as Hub revision vN "
                   "(which must hold N); kept otherwise.")  # fmt: skip
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def digest_cmd(path: Path, check: bool, version: int | None, as_json: bool) -> None:
    """Write or refresh PATH/metadata.json: the sha256 of every file of the package.

    The id is the manifest's domain.name; the version and provenance already there are kept (a
    new metadata.json takes its version from sinceVersion; --version N sets it for a later, changed
    contract, as a package published as Hub revision vN must say N). Editor backups (x~, #x#) are
    skipped.
    """
    root = path.expanduser().resolve()
    manifest_file = ManifestFile(root)  # read once, for all that follows
    metadata_file = MetadataFile(root)  # as is metadata.json
    old = _old_metadata(metadata_file)
    old_id = old.get("id") if isinstance(old.get("id"), str) else None
    unreadable = None
    if check:
        existing = None
        if (root / METADATA_FILE).is_file():
            try:
                existing = metadata_file.value()
            except PackageError as exc:  # out of date too (exit 1); writing it is refused until fixed
                unreadable = exc.detail
            except ValueError as exc:  # no JSON: decode_json's words
                unreadable = str(exc)
        metadata, changes = build_metadata(root, existing if isinstance(existing, dict) else None, version=version,
                                           manifest_file=manifest_file)  # fmt: skip
        # Equal digests are not enough: a version 0 or a stray field is a file every load refuses.
        broken = schema_problems(existing) if isinstance(existing, dict) else []
        other_version = isinstance(existing, dict) and existing.get("version") != metadata["version"]
        # another op's id (the manifest renamed): exit 1 had come under "metadata.json is up to date"
        other_id = isinstance(existing, dict) and not broken and old_id != metadata["id"]
        current = (existing is not None and not broken and not other_version and not other_id
                   and all(c.status in ("unchanged", UNLISTABLE) for c in changes))  # fmt: skip
    else:
        metadata, changes = write_metadata(root, version=version, manifest_file=manifest_file, metadata_file=metadata_file)
        current = True
    removed = {c.file for c in changes if c.status == "removed"}
    listed = [c.file for c in changes if c.status != "removed"]
    named = {name for name, _ in pass_templates(root, manifest_file)}
    warnings = [f"{where} names {name!r}, which the package {'no longer has' if name in removed else 'does not have'}"
                f"{templates_there(name, listed, named)}: every call that reaches it fails; restore the file, or "
                "change what names it" for name, where in missing_templates(root, manifest_file)]  # fmt: skip
    if as_json:
        echo_json({"path": str(root / METADATA_FILE), "written": not check, "upToDate": current,
                    "metadata": metadata, "changes": [c.__dict__ for c in changes], "warnings": warnings})  # fmt: skip
    else:
        console = safe_console()
        title = f"{metadata['id']} (version {metadata['version']}): {root / METADATA_FILE}"
        shown = [c for c in changes if c.status != "unchanged"]  # a package of 49 files listed them all
        same = len(changes) - len(shown)
        if shown:
            # The title on a line of its own: as the table's, it was wrapped to the table's width, the
            # metadata.json path cut mid-name even in a log 160 columns wide.
            console.print(Text(title, style="italic"), soft_wrap=True)
            table = Table()
            for col in ("file", "status", "sha256"):
                table.add_column(col)
            for c in shown:
                style = {"added": "green", "changed": "yellow", "removed": "red", UNLISTABLE: "dim"}[c.status]
                table.add_row(one_line(c.file), Text(c.status, style=style), (c.sha256 or "-")[:16] + ("..." if c.sha256 else ""))
            console.print(table)
            if same:
                console.print(f"{same} other file{'' if same == 1 else 's'} unchanged")
        else:
            console.print(Text(f"{title}\n{same} file{'' if same == 1 else 's'}, all unchanged"), soft_wrap=True)
        notes: list[Text] = []  # what digest renamed or kept
        if old_id is not None and old_id != metadata["id"]:
            notes.append(Text(f"id: {old_id} -> {metadata['id']} (the manifest's domain.name)"))
        if version is not None and old.get("version") not in (None, metadata["version"]):  # "all unchanged" hid it
            notes.append(Text(f"contract version: {old['version']} -> {metadata['version']} (--version)"))
        # Not on a passing --check: every green CI log had carried it. Only in a run whose manifest.json
        # changed, where sinceVersion can have come to differ: a package at contract version 1 of an
        # opset-20 op had carried it through every template edit's digest.
        manifest_changed = any(c.file == MANIFEST_FILE and c.status in ("added", "changed") for c in changes)
        keep_note = version is None and "version" in old and not (check and current) and manifest_changed
        note = kept_version_note(root, metadata["version"], manifest_file) if keep_note else None
        if note is not None:
            notes.append(Text(note, style="dim"))
        if check:
            # before the verdict, whose last line says what to do (cli.md): the kept-version note had
            # followed it, and a CI log ended on "--version N sets it" instead of the digest to run
            for line in notes:
                console.print(line, soft_wrap=True)
            if unreadable:
                console.print(f"metadata.json cannot be read ({unreadable}): fix or delete it, then run digest")
            else:
                kind = not_regular(root / METADATA_FILE)  # a folder of that name is no missing file
                verdict = ("metadata.json is up to date" if current else
                           f"metadata.json is not a regular file ({kind})" if kind else
                           ("no metadata.json" if not (root / METADATA_FILE).is_file() else "metadata.json is out of date"
                            + (f" ({broken[0].json_path or '(root)'}: {broken[0].message})" if broken else
                               f" (it says contract version {(existing or {}).get('version')!r}, not {version})"
                               if other_version else
                               f" (it says id {old_id}, not the manifest's {metadata['id']})" if other_id else "")))  # fmt: skip
                if not current and not kind:
                    verdict += _check_advice(path, version, changes, missing=not (root / METADATA_FILE).is_file())
                console.print(verdict, soft_wrap=True)
        else:
            console.print(f"wrote {root / METADATA_FILE}")
            for line in notes:
                console.print(line, soft_wrap=True)
    for warning in warnings:  # after the table, which lists the file as removed; the digest is still taken (exit 0)
        safe_console(stderr=True).print(Text("warning: " + warning, style="yellow"), soft_wrap=True)
    if check and (not current or old_id != metadata["id"]):
        click.get_current_context().exit(1)


def _check_advice(path: Path, version: int | None, changes: list[DigestChange], *, missing: bool) -> str:
    """What `digest --check` adds to its verdict: "out of date" alone left a CI job's author to guess
    whether to digest or to undo. PATH is one shell word (shell_word)."""
    command = f"`webgpu-kernels digest {shell_word(str(path))}" + (f" --version {version}`" if version else "`")
    if missing:
        return f": run {command} to write one"
    text = f": if these changes are yours, run {command} to record them"
    added = [c.file for c in changes if c.status == "added"]
    if added:
        # a report or notes written into the folder would be digested as part of the package
        text += ("; remove any file listed as added that is no package file (a report, notes: keep those "
                 "outside the folder) instead of digesting it: " + ", ".join(added))  # fmt: skip
    return text


def _old_metadata(metadata_file: MetadataFile) -> dict[str, Any]:
    """metadata.json as digest found it ({} where there is none or it cannot be read)."""
    try:
        data = metadata_file.value()
    except (KernelError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


# --- test -------------------------------------------------------------------------------------------

_JUNIT_OPTION = click.option(
    "--junit", "junit_path", default=None, metavar="FILE", callback=output_file,
    help="Also write the results as JUnit XML to FILE, for CI systems to show.")


@click.command("test")
@trust_option
@adapter_option
@click.argument("kernels", nargs=-1, metavar="[KERNEL|PATH]...")
@click.option("--case", "cases", multiple=True, metavar="NAME",
              help="Only cases whose name contains NAME or matches it as a glob. Repeatable.")
@click.option("--isolate/--no-isolate", default=None,
              help="Run the GPU work in a child process. Default: on for packages loaded with "
                   "trust_remote_code, off otherwise.")  # fmt: skip
@click.option("--timeout", type=FiniteFloatRange(min=1), default=None, metavar="SECONDS",
              help="Give up on a package after this long (counted from the child's start, imports "
                   "included). Runs isolated: --isolate is implied.")  # fmt: skip
@click.option("--strict", is_flag=True,
              help="Skipped runs fail too (exit 1): for a CI job that must run every case, where an adapter "
                   "without shader-f16 would skip the float16 ones.")  # fmt: skip
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@_JUNIT_OPTION
@click.pass_context
def test_cmd(ctx: click.Context, kernels: tuple[str, ...], cases: tuple[str, ...], isolate: bool | None,
             timeout: float | None, strict: bool, as_json: bool, junit_path: str | None) -> None:  # fmt: skip
    """Run each package's test.json: every case on every variant whose `when` holds for it.

    KERNEL is an embedded op id, a package folder or a Hub repository org/op[@vN]; default:
    every embedded kernel. Exit status 1 if any case fails or errors, a package cannot be loaded
    or has no test.json (nothing was tested), or --case matches no case in any package; with
    --strict, if any run was skipped.
    """
    adapter = adapter_request_of(ctx)
    isolate = _isolation(isolate, timeout)
    # A mistyped --adapter, or no adapter at all, is the caller's error (exit 2, no report), in a child
    # process too: isolated (--timeout), no adapter had been the package's error (exit 1, a report).
    choose_adapter(adapter)
    # So is a bad WEBGPU_KERNELS_NO_TUNING, read only when a call chooses its plan: it had made every
    # case an ERROR of the package (exit 1, each a JUnit error), as bench, run and explain refuse it (2).
    tuning.disabled()
    refs = list(kernels) or embedded_ids()
    reports: list[PackageReport] = []
    status = safe_console(stderr=True)
    # Every KERNEL is opened before any test runs: a mistyped last one had been refused only
    # after the others' tests.
    opened: list[tuple[str, Any]] = []
    for ref in refs:
        try:
            opened.append((ref, resolve_kernel(ref)))
        except KernelError as exc:
            # The caller's errors (exit 2): an unknown kernel, and a Hub kernel that cannot be
            # fetched, is not trusted or is no repository id (as in `info`). A package that does
            # not load, a fetched one whose files do not match included, fails (1).
            unfetched = (isinstance(exc, PackageError) and not isinstance(exc, DigestError)
                         and classify_kernel_ref(ref).kind == "hub")  # fmt: skip
            if unfetched or _names_nothing(ref):
                raise
            opened.append((ref, exc))
    for ref, kernel in opened:
        if isinstance(kernel, KernelError):
            # Named as when it loads (its op id, where the manifest says one), so that a CI system's
            # history of the package does not move to a new name on the day its digest is stale.
            where = classify_kernel_ref(ref)
            reports.append(PackageReport(kernel=manifest_op_id(where.path) or ref, path=_unloaded_path(ref, where),
                                         origin="local" if where.kind == "folder" else where.kind,
                                         isolated=bool(isolate), error=_load_error(ref, where.kind, kernel)))  # fmt: skip
            continue
        isolated = kernel.package.needs_trust if isolate is None else isolate
        with _progress(status, kernel.op_id) as progress:
            if isolated:
                report = run_package_tests_isolated(kernel, adapter=adapter, cases=cases or None, progress=progress,
                                                    timeout=timeout)  # fmt: skip
            else:
                report = run_package_tests(kernel, adapter=adapter, cases=cases or None, progress=progress)
        reports.append(report)
    # A typo in a CI filter must not pass; a filter that names one package's cases, run over
    # several packages, passes the others by (they had failed for having none).
    if cases and not any(r.results for r in reports):
        for report in reports:
            if report.error is None:
                report.error = f"no test.json case matches --case {' '.join(cases)}"
    ok = all(r.ok for r in reports) and not (strict and _skipped(reports))
    if as_json:
        echo_json({"ok": ok, "strict": strict, "packages": [r.as_dict() for r in reports]})
    else:
        _print_test_reports(reports, strict=strict)
    _write_report(junit_path, lambda: junit_xml(reports, strict=strict))
    if not ok:
        click.get_current_context().exit(1)


def _unloaded_path(ref: str, where: Any) -> str:
    """The ``path`` a package that did not load is reported under: absolute, as a loaded package's
    (its root), so that --json and the JUnit property do not hold the argument as typed instead."""
    if where.kind == "embedded":
        return str(embedded_root() / ref)
    if where.kind == "folder":
        return str(where.path.resolve())
    return str(where.path)  # a Hub repository id: no folder of its own to name


def _load_error(ref: str, kind: str, exc: KernelError) -> str:
    """The package's error: "cannot load" stops at the first problem, so a folder's names
    `validate`, which lists them all (a Hub kernel is validated once
    downloaded, which _package_path says)."""
    text = f"cannot load the package: {exc}"
    if kind in ("folder", "embedded"):
        text += f"; `webgpu-kernels validate {shell_word(ref)}` lists every problem"
    return text


def _write_report(path: str | None, document: Callable[[], str]) -> None:
    """Write ``document()`` to the --junit path, if one was given; a failure is exit 1 (the results
    were shown already)."""
    if path is not None:
        try:
            write_junit(path, document())
        except OSError as exc:
            raise click.FileError(path, hint=exc.strerror or str(exc)) from None


def _skipped(reports: list[PackageReport]) -> int:
    """The skipped runs of every package: what --strict fails, and what the last line counts (the
    exit status and the printed verdict read this one count)."""
    return sum(r.counts()[SKIP] for r in reports)


def _print_test_reports(reports: list[PackageReport], *, strict: bool = False) -> None:
    console = safe_console()
    table = Table(title="Test results", title_justify="left")
    for col in ("kernel", "case", "variant", "dtype", "max abs err", "max rel err", "result"):
        # Every column folds: rich cannot narrow a no-wrap one, and cropped the table's right edge
        # instead, the result column first ("pas" at 80 columns).
        table.add_column(col, justify="right" if col.startswith("max") else "left", overflow="fold")
    failures: list[tuple[str, RunResult]] = []
    for report in reports:
        for r in report.results:
            table.add_row(report.kernel, one_line(r.case), r.variant or "-", r.dtype, _worst(r, "maxAbsError"), _worst(r, "maxRelError"),
                          Text(_result_text(r), style=_STATUS_STYLE[r.status]))  # fmt: skip
            if r.failed or r.status == "skip":
                failures.append((report.kernel, r))
    if table.rows:  # a run of packages that all failed to load had printed an empty table above their errors
        console.print(table)
    first_with: dict[tuple[str, str], str] = {}  # (kernel, message) -> the run that printed it
    for kernel, r in failures:
        run = f"{r.case}" + (f" [{r.variant}]" if r.variant else "")
        console.print(Text(f"{r.status.upper()} {kernel} {run}", style=_STATUS_STYLE[r.status]))
        # A template that does not compile fails every run alike: its compiler output once, not per run
        # (54 copies, 779 lines, in one author's trial).
        earlier = first_with.setdefault((kernel, r.message), run)
        text = f"same message as {earlier}" if earlier != run else r.message.replace("\n", "\n  ")
        console.print(Text("  " + text), soft_wrap=True)
    for report in reports:
        counts = report.counts()
        mode = "isolated" if report.isolated else "in-process"
        errors = counts["error"]  # apart from failures, as --json and --junit count them
        line = (f"{report.kernel}: {counts['pass']} passed, {counts['fail']} failed, {errors} error{'s' * (errors != 1)}, "
                f"{counts['skip']} skipped ({mode})")  # fmt: skip
        if report.not_run:
            line += f", {len(report.not_run)} not run"
        if report.error:
            console.print(Text(f"{line}: {report.error}", style="bold red"), soft_wrap=True)
        else:
            console.print(Text(line, style="bold red" if not report.ok else "green" if counts["pass"] else "yellow"))
    passed = sum(r.counts()[PASS] for r in reports)
    skipped = _skipped(reports)
    if not all(r.ok for r in reports):  # a failed or errored run, or a package error: test_cmd's exit 1
        console.print(Text("FAILED", style="bold red"))
        if any(r.status == FAIL for report in reports for r in report.results):
            # An author who changed what the kernel computes meets this first
            console.print("if the kernel's results changed on purpose, `webgpu-kernels expect PATH --reference "
                          "FILE.py:FUNCTION` writes test.json's expected values again (docs/package-files.md)",
                          soft_wrap=True)  # fmt: skip
    elif strict and skipped:
        console.print(Text(f"FAILED (--strict: {skipped} skipped)", style="bold red"))
    elif passed:  # a skip is said here too: "all passed" alone had read as every case run
        console.print(Text("all passed" + (f", {skipped} skipped" if skipped else ""),
                           style="bold yellow" if skipped else "bold green"))  # fmt: skip
    else:  # as pytest: all skipped is no failure (exit 0), but it is no pass either
        console.print(Text("nothing ran: every case was skipped", style="yellow"))


# --- validate ---------------------------------------------------------------------------------------


def _isolation(isolate: bool | None, timeout: float | None) -> bool | None:
    """--isolate's value once --timeout is read: a timeout implies isolation (it had been ignored
    in process, silently), and contradicts --no-isolate."""
    if timeout is None:
        return isolate
    if isolate is False:
        raise click.UsageError("--timeout needs the child process that --no-isolate turns off")
    return True


def _names_nothing(ref: str) -> bool:
    """Whether a KERNEL argument is neither an embedded id, nor a folder, nor a Hub repository (a
    file named as a package is the caller's slip too, refused as the other commands refuse it)."""
    where = classify_kernel_ref(ref)
    if where.kind != "folder":
        return where.kind == "unknown"
    try:
        return not where.path.is_dir()
    except (OSError, ValueError):  # a name too long, a NUL byte
        return True


def _package_path(ref: str) -> Path:
    """The folder ``validate`` checks, read by the same rule as every KERNEL argument."""
    where = classify_kernel_ref(ref)
    if where.kind == "embedded":
        return embedded_root() / ref
    if where.kind == "folder":
        return kernel_folder(ref)  # as every command refuses a path that is no folder, naming it as typed
    if where.kind == "hub":
        version, revision = hub_pin(where.pin)  # as every KERNEL argument reads it
        fetch = f"--version {version}" if revision is None else f"--revision {revision}"
        raise PackageError(f"{ref!r} is neither a package folder nor an embedded kernel; validate checks a folder: "
                           f"`webgpu-kernels download {where.repo} {fetch}` fetches a Hub kernel, then validate "
                           "the folder it prints")  # fmt: skip
    raise PackageError(f"{ref!r} is neither a package folder nor an embedded kernel")


@click.command("validate")
@adapter_option
@click.argument("path", metavar="PATH")
@click.option("--gpu/--no-gpu", default=True, show_default=True,
              help="Render and compile every variant x dtype on the current adapter.")  # fmt: skip
@click.option("--isolate/--no-isolate", default=None,
              help="Run the checks in a child process (a crash there is reported, not suffered). Default: off.")
@click.option("--timeout", type=FiniteFloatRange(min=1), default=None, metavar="SECONDS",
              help="Give up after this long (counted from the child's start, imports included). "
                   "Runs isolated: --isolate is implied.")  # fmt: skip
@click.option("--strict", is_flag=True,
              help="Fail on the package's warnings too (exit 1; in --junit each is a failing testcase): for a CI "
                   "job that must keep every variant exercised. Warnings about this adapter (a case beyond its "
                   "limits, no shader-f16) do not fail.")  # fmt: skip
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@_JUNIT_OPTION
@click.pass_context
def validate_cmd(ctx: click.Context, path: str, gpu: bool, isolate: bool | None, timeout: float | None,
                 strict: bool, as_json: bool, junit_path: str | None) -> None:  # fmt: skip
    """Check the package folder PATH and report every problem at once.

    Digests (metadata.json), the manifest schema, every expression and the names it reads,
    bindingSets and $ references, templates, test.json and bench.json, and every variant x
    dtype rendered and compiled on the current adapter for the shapes of the package's cases.
    Exit status 1 if there is any error (with --strict, any warning too).
    """
    adapter = adapter_request_of(ctx)
    isolate = bool(_isolation(isolate, timeout))
    root = _package_path(path)
    if gpu:  # a mistyped --adapter, or no adapter at all, is the caller's problem (exit 2), not the package's:
        choose_adapter(adapter)  # with none, validate had reported the package INVALID (exit 1)
    status = safe_console(stderr=True)
    started = time.time()  # the JUnit suite's timestamp: a ValidationReport does not keep it
    with _progress(status, f"validating {root.name}") as progress:
        if isolate:
            report = validate_package_isolated(root, adapter=adapter, gpu=gpu, progress=progress, timeout=timeout)
        else:
            report = validate_package(root, adapter=adapter, gpu=gpu, progress=progress)
    failed_strictly = strict and report.ok and bool(report.package_warnings)
    if as_json:
        echo_json({**report.as_dict(), "strict": strict, "passed": report.ok and not failed_strictly})
    else:
        _print_validation(report, gpu_skipped=not gpu, strict=strict)
    _write_report(junit_path, lambda: validation_junit_xml([report], started=started, strict=strict))
    if not report.ok or failed_strictly:
        click.get_current_context().exit(1)


def _print_validation(report: ValidationReport, *, gpu_skipped: bool = False, strict: bool = False) -> None:
    console = safe_console()
    title = report.op_id or Path(report.path).name
    console.print(Text(f"{title}: {report.path}", style="bold"))
    if report.adapter:
        console.print(f"adapter: {report.adapter}" + (" (checks ran in a child process)" if report.isolated else ""))
    c = report.checked
    parts = []
    if "digests" in c:
        parts.append(f"{c['digests']} files against metadata.json")
    if "expressions" in c:
        parts.append(f"{c['expressions']} expressions")
    if "templates" in c:
        parts.append(f"{c['templates']} template{'s' if c['templates'] != 1 else ''}")
    if "testCases" in c:
        parts.append(f"{c['testCases']} test.json cases" + (f" ({c['refusedCases']} refused)" if c.get("refusedCases") else ""))
    if "benchCases" in c:
        runs = f" ({c['benchRuns']} with their dtypes)" if "benchRuns" in c else ""
        parts.append(f"{c['benchCases']} bench.json cases{runs}")
    if parts:
        console.print("checked: " + ", ".join(parts), soft_wrap=True)
    if not report.adapter:  # --no-gpu, or no adapter: say what that leaves out rather than report less
        # The GPU stage needs a loaded manifest: an invalid one is the reason, not the adapter.
        why = "--no-gpu" if gpu_skipped else "the manifest did not load" if report.op_id is None else "no GPU adapter"
        console.print(f"not checked ({why}): which variant accepts each test.json case (its `when` may read "
                      "device limits), rendering and compiling every variant x dtype, and the warnings for "
                      "variants and dtypes that no test.json case exercises", soft_wrap=True)  # fmt: skip
    elif report.skipped:
        console.print(f"not checked ({report.skipped}): the cases' output shapes and which variant accepts each, "
                      "and rendering and compiling every variant x dtype", soft_wrap=True)  # fmt: skip
    for p in report.problems:
        style = "bold red" if p.severity == ERROR else "yellow"
        extra = one_line(", ".join(x for x in (f"variant {p.variant}" if p.variant else "", p.dtype or "",
                                               f"case {p.case}" if p.case else "") if x))  # fmt: skip
        # one line: a file named "a\nPASSED" had printed a line of the package's choosing
        head = Text.assemble((f"{p.severity:<7} ", style), (one_line(p.place()), "bold"),
                             (f"  [{extra}]" if extra else "", "cyan"))  # fmt: skip
        console.print(head, soft_wrap=True)
        console.print(Text("        " + p.message.replace("\n", "\n        ")), soft_wrap=True)
    if report.coverage:
        table = Table(title="Pipelines compiled", title_justify="left")
        for col in ("variant", "dtype", "cases", "pipelines", "status"):
            table.add_column(col, justify="right" if col in ("cases", "pipelines") else "left")
        for cov in report.coverage:
            style = {"compiled": "green", "failed": "bold red"}.get(cov.status, "yellow")
            if cov.expected_refusal is not None:  # as meant: nothing left to check
                style = "green"
            table.add_row(cov.variant, cov.dtype, str(cov.cases), str(cov.pipelines), Text(cov.status, style=style))
        console.print(table)
    errors, warnings = len(report.errors), len(report.warnings)
    summary = f"{errors} error{'s' if errors != 1 else ''}, {warnings} warning{'s' if warnings != 1 else ''}"
    # "valid" says nothing of WGSL that was never compiled: a broken shader no case reaches passes.
    uncompiled = report.uncompiled
    caveat = (f" ({uncompiled} of {len(report.coverage)} variant x dtype pairs not compiled: their status above "
              "says why)" if report.ok and uncompiled else "")  # fmt: skip
    passed = report.ok and not (strict and report.package_warnings)
    verdict = "valid" if passed else "INVALID" if not report.ok else "INVALID (--strict: warnings fail)"
    console.print(Text(f"{summary}: {verdict}" + caveat, style="bold green" if passed else "bold red"), soft_wrap=True)


COMMANDS = [digest_cmd, test_cmd, validate_cmd]
