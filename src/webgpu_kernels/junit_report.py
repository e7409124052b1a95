"""``webgpu-kernels test --junit FILE`` and ``validate --junit FILE``: the reports as JUnit XML,
for CI systems to display.

``test``:

One ``<testsuite>`` per package (its op id; the adapter and where the package came from as
properties) and one ``<testcase>`` per case and variant, as the table shows them: ``classname`` is
the op id (and the path, where two packages of one op id are tested together), so
``com.microsoft.BiasAdd`` files under ``com.microsoft`` in Jenkins and GitLab. A
failed run is a ``<failure>``, an error (a broken case, a variant the case names but the package
lacks) an ``<error>``, a skip ``<skipped>``. A package that could not be tested at all (no
test.json, a crashed child) is one more testcase, ``(package)``, holding an ``<error>``: a report
with no testcases would read as green. Its time is the run's not spent in any case (starting the
child, opening the device, the crash), so a crashed package's suite takes the real elapsed time.

A child that died leaves the runs it never reached (``PackageReport.not_run``): each is a
testcase, named as a run would be, holding an ``<error type="not run">``. Not ``<skipped>``: CI
systems read a skip as intended and neutral (a test disabled, a feature absent), and these runs
were meant to run and are unverified; a skip would hide them as the missing testcases did.

Each ``<testsuite>`` has ``tests``, ``failures``, ``errors``, ``skipped`` and ``time`` counted
from its testcases, a ``timestamp`` (when it started: local time with its UTC offset, to the
second) and a ``hostname``; the ``<testsuites>`` root sums the counts.

``validate``: one ``<testsuite>`` per package, a testcase per variant x dtype (``compile vec4
[float16]``: a ``<failure>`` with its render or compile errors, an error validate reports once for
several under the first of them and as "the same error as compile ..." in the others, ``<skipped>``
when no case made it compile), one per other error (named by file and JSON path or line), and a ``validate`` testcase
that always passes, holding what was checked and every warning. A compile testcase takes its
row's time (``Coverage.seconds``), ``validate`` the rest of the report's (``seconds``), the errors
none: the suite's time is the validation's.

XML 1.0 cannot hold most control characters, which a message may quote from a package's file;
they are written as ``\\xNN``.
"""

from __future__ import annotations

import os
import re
import socket
import stat
import time
from collections import Counter
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from xml.etree import ElementTree as ET

from .replacing import replace_file
from .run_results import ERROR, FAIL, SKIP, PackageReport, RunResult
from .validation_report import Problem, ValidationReport

_NOT_XML = re.compile("[^\t\n\r\u0020-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")
_TAG = {FAIL: "failure", ERROR: "error", SKIP: "skipped"}
PACKAGE_CASE = "(package)"


def _text(value: object) -> str:
    return _NOT_XML.sub(lambda m: f"\\x{ord(m.group()):02x}", str(value))


# wgpu's lines before the reason of a refused call ("Validation Error", "Caused by:", "In
# wgpuDeviceCreateShaderModule, label = ..."): the same for every error, they say nothing of it
_WGPU_PREAMBLE = re.compile(r"Validation Error|Caused by:|In wgpu[A-Za-z]+\b.*")


def _summary(message: str) -> str:
    """The outcome's ``message`` attribute, what a CI page lists: the first line, and the next one
    where the first ends with a colon ("... does not compile:" and then the compiler's reason),
    wgpu's preamble left out."""
    lines = [line.strip() for line in message.strip().split("\n")]  # not splitlines: it also splits at \x1c-\x1e, \x85
    lines = [line for line in lines if line]
    lines = [line for line in lines if not _WGPU_PREAMBLE.fullmatch(line)] or lines
    return " ".join(lines[:2]) if len(lines) > 1 and lines[0].endswith(":") else (lines[0] if lines else "")


def _testcase(kernel: str, result: RunResult, kind: str | None = None, *, strict: bool = False) -> ET.Element:
    """``kind``: the outcome's ``type`` (default: the run's status); ``strict`` (test --strict):
    a skipped run is a failure, as the exit status has it."""
    name = f"{result.case} [{result.variant}]" if result.variant else result.case
    case = ET.Element("testcase", classname=_text(kernel), name=_text(name), time=f"{result.seconds:.6f}")
    tag = _TAG.get(result.status)
    if strict and result.status == SKIP:
        _outcome(case, "failure", f"skipped, and --strict fails a skip: {result.message}", kind or result.status)
    elif tag is not None:
        _outcome(case, tag, result.message, kind or result.status)
    details = [f"dtype: {result.dtype}"]
    for output in result.outputs:
        errors = ", ".join(f"{key} {output[key]:.3g}" for key in ("maxAbsError", "maxRelError")
                           if output.get(key) is not None)  # fmt: skip
        if errors:
            details.append(f"{output.get('output', '?')}: {errors}")
    if result.status == "pass" and result.message:  # a refused case says what refused it
        details.append(result.message)
    ET.SubElement(case, "system-out").text = _text("\n".join(details))
    return case


def _suite(name: str, cases: list[ET.Element], properties: Sequence[tuple[str, str | None]],
           started: float) -> ET.Element:  # fmt: skip
    """A testsuite of ``cases``, its counts taken from their outcomes; ``started``: epoch seconds."""
    def count(tag: str) -> str:
        return str(sum(1 for c in cases if c.find(tag) is not None))

    suite = ET.Element("testsuite", name=_text(name), tests=str(len(cases)), failures=count("failure"),
                       errors=count("error"), skipped=count("skipped"),
                       time=f"{sum(float(c.get('time', '0')) for c in cases):.6f}",
                       # the offset says which zone: readers differ on what a bare local time means
                       timestamp=datetime.fromtimestamp(started).astimezone().isoformat(timespec="seconds"),
                       hostname=_text(socket.gethostname()))  # fmt: skip
    listed = ET.SubElement(suite, "properties")
    for key, value in properties:
        if value is not None:
            ET.SubElement(listed, "property", name=key, value=_text(value))
    suite.extend(cases)
    return suite


def _outcome(case: ET.Element, tag: str, message: str, kind: str) -> None:
    outcome = ET.SubElement(case, tag, message=_text(_summary(message)), type=kind)
    if tag != "skipped":
        outcome.text = _text(message)


def _test_suite(report: PackageReport, name: str, strict: bool) -> ET.Element:
    cases = [_testcase(name, r, strict=strict) for r in report.results]
    cases += [_testcase(name, r, "not run", strict=strict) for r in report.not_run]
    if report.error is not None:
        # the time in no run (the child's start, the device, the crash): the suite's time is then the real one
        rest = max(0.0, report.seconds - sum(r.seconds for r in report.results))
        case = ET.Element("testcase", classname=_text(name), name=PACKAGE_CASE, time=f"{rest:.6f}")
        _outcome(case, "error", report.error, "package")
        cases.append(case)
    return _suite(name, cases, (("adapter", report.adapter), ("path", report.path), ("origin", report.origin),
                                ("isolated", str(report.isolated).lower())), report.started)  # fmt: skip


def _suite_names(keys: Sequence[tuple[str, str]]) -> list[str]:
    """CI systems key a case by classname and name: two packages of one op id (a copy under test
    beside the original) would merge, so each of those is told apart by its path."""
    seen = Counter(op for op, _ in keys)
    return [op if seen[op] == 1 else f"{op} ({path})" for op, path in keys]


def _document(suites: list[ET.Element], name: str) -> str:
    root = ET.Element("testsuites", name=name)
    for key in ("tests", "failures", "errors", "skipped"):
        root.set(key, str(sum(int(s.get(key, "0")) for s in suites)))
    root.set("time", f"{sum(float(s.get('time', '0')) for s in suites):.6f}")
    root.extend(suites)
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def junit_xml(reports: Sequence[PackageReport], *, name: str = "webgpu-kernels test", strict: bool = False) -> str:
    """``test``'s reports as one JUnit XML document (with its declaration; write it as UTF-8);
    ``strict`` (test --strict): each skipped run a failure."""
    names = _suite_names([(r.kernel, r.path) for r in reports])
    return _document([_test_suite(r, n, strict) for r, n in zip(reports, names)], name)


# --- validate ---------------------------------------------------------------------------------------


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def _problem_name(problem: Problem) -> str:
    extra = ", ".join(x for x in (problem.variant, problem.dtype, f"case {problem.case}" if problem.case else None) if x)
    return problem.place() + (f" [{extra}]" if extra else "")


def _validation_suite(report: ValidationReport, name: str, started: float, strict: bool) -> ET.Element:
    cases: list[ET.Element] = []
    names: Counter[str] = Counter()

    def add(case_name: str, seconds: float = 0.0) -> ET.Element:
        names[case_name] += 1  # two problems at one place: each its own testcase, not merged
        shown = case_name if names[case_name] == 1 else f"{case_name} #{names[case_name]}"
        case = ET.Element("testcase", classname=_text(name), name=_text(shown), time=f"{seconds:.6f}")
        cases.append(case)
        return case

    absorbed: set[int] = set()
    for cov in report.coverage:
        case = add(f"compile {cov.variant} [{cov.dtype}]", cov.seconds)
        if cov.failed:
            mine = [p for p in report.errors if p.variant == cov.variant and p.dtype == cov.dtype]
            absorbed.update(id(p) for p in mine)
            # Its own errors and those reported under another that it shares: one pass may fail on its own
            # and another as a second variant x dtype does.
            text = "\n".join([*(f"{p.place()}: {p.message}" for p in mine),
                              *(f"the same error as compile {p.variant} [{p.dtype}]: {p.place()}: {p.message}"
                                for p in report.errors if (cov.variant, cov.dtype) in p.also)])  # fmt: skip
            # an error about the variant as a whole (a tensor some calls lack) has no dtype: its own testcase
            text = text or (f"{_count(cov.failed, 'render or compile failure')}: the errors are in the other "
                            "failing testcases")
            _outcome(case, "failure", text, "compile")
        elif not cov.pipelines and cov.expected_refusal is None:  # a refusal test.json expects passes
            _outcome(case, "skipped", cov.status, "not compiled")
        ET.SubElement(case, "system-out").text = _text(f"{_count(cov.cases, 'case')}, {_count(cov.pipelines, 'pipeline')}: "
                                                       f"{cov.status}")  # fmt: skip
    for problem in report.errors:
        if id(problem) not in absorbed:
            _outcome(add(_problem_name(problem)), "failure", problem.message, "error")
    failing = report.package_warnings if strict else []  # validate --strict: each fails, as a testcase of its own
    for problem in failing:
        _outcome(add(_problem_name(problem)), "failure", problem.message, "warning")
    # always there: a valid package is one passing testcase, its warnings in it; its time is the
    # validation's not spent compiling (the files, expressions, the device), so the suite's is the whole
    summary = add("validate", max(0.0, report.seconds - sum(cov.seconds for cov in report.coverage)))
    lines = [f"checked: {', '.join(f'{k} {v}' for k, v in report.checked.items()) or 'nothing'}"]
    if report.skipped:
        lines.append(f"not checked: {report.skipped}")
    if not report.adapter:
        lines.append("not checked: the GPU stage (no adapter, --no-gpu, or the manifest did not load)")
    lines += [f"warning {_problem_name(p)}: {p.message}" for p in report.warnings if p not in failing]
    ET.SubElement(summary, "system-out").text = _text("\n".join(lines))
    return _suite(name, cases, (("adapter", report.adapter), ("path", report.path),
                                ("isolated", str(report.isolated).lower())), started)  # fmt: skip


def validation_junit_xml(reports: Sequence[ValidationReport], *, name: str = "webgpu-kernels validate",
                         started: float | None = None, strict: bool = False) -> str:  # fmt: skip
    """``validate``'s reports as one JUnit XML document: per package a testcase per variant x dtype
    compiled (failed, or skipped when nothing compiled it and test.json does not expect its
    refusal), one per error elsewhere, and a
    ``validate`` testcase holding what was checked and the warnings (``strict``: each warning is
    a failing testcase instead). ``started``: when the validation began (epoch seconds; a
    ValidationReport does not say), default now."""
    names = _suite_names([(r.op_id or Path(r.path).name, r.path) for r in reports])
    when = time.time() if started is None else started
    return _document([_validation_suite(r, n, when, strict) for r, n in zip(reports, names)], name)


def write_junit(path: str | os.PathLike[str], document: str) -> None:
    """Write a JUnit document to ``path``, the caller's own choice, as ``tee`` would: through a
    symbolic link, and into a pipe, a device or ``/dev/stdout`` in place. A regular file (or a
    new one) is replaced whole (replacing.replace_file), so a CI step never reads half a report.
    Raises OSError."""
    target = Path(os.path.realpath(path))  # a link's target is the file the caller means
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        mode = None
    if mode is not None and not stat.S_ISREG(mode):
        with open(path, "w", encoding="utf-8") as stream:
            stream.write(document)
        return
    replace_file(target, document)
