"""``webgpu-kernels test --junit FILE``: the test reports as JUnit XML, for CI systems to display.

One ``<testsuite>`` per package (its op id; the adapter and where the package came from as
properties) and one ``<testcase>`` per case and variant, as the table shows them: ``classname`` is
the op id (and the path, where two packages of one op id are tested together), so
``com.microsoft.BiasAdd`` files under ``com.microsoft`` in Jenkins and GitLab. A
failed run is a ``<failure>``, an error (a broken case, a variant the case names but the package
lacks) an ``<error>``, a skip ``<skipped>``. A package that could not be tested at all (no
test.json, a crashed child) is one more testcase, ``(package)``, holding an ``<error>``: a report
with no testcases would read as green.

XML 1.0 cannot hold most control characters, which a message may quote from a package's file;
they are written as ``\\xNN``.
"""

from __future__ import annotations

import os
import re
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from xml.etree import ElementTree as ET

from .digests import replace_file
from .package_tests import ERROR, FAIL, SKIP, PackageReport, RunResult

_NOT_XML = re.compile("[^\t\n\r\u0020-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")
_TAG = {FAIL: "failure", ERROR: "error", SKIP: "skipped"}
PACKAGE_CASE = "(package)"


def _text(value: object) -> str:
    return _NOT_XML.sub(lambda m: f"\\x{ord(m.group()):02x}", str(value))


def _first_line(message: str) -> str:
    return message.strip().split("\n")[0].rstrip("\r")  # not splitlines: it also splits at \x1c-\x1e, \x85


def _testcase(kernel: str, result: RunResult) -> ET.Element:
    name = f"{result.case} [{result.variant}]" if result.variant else result.case
    case = ET.Element("testcase", classname=_text(kernel), name=_text(name), time=f"{result.seconds:.6f}")
    tag = _TAG.get(result.status)
    if tag is not None:
        outcome = ET.SubElement(case, tag, message=_text(_first_line(result.message)), type=result.status)
        if tag != "skipped":
            outcome.text = _text(result.message)
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


def _testsuite(report: PackageReport, name: str) -> ET.Element:
    cases = [_testcase(name, r) for r in report.results]
    if report.error is not None:
        case = ET.Element("testcase", classname=_text(name), name=PACKAGE_CASE, time="0")
        ET.SubElement(case, "error", message=_text(_first_line(report.error)), type="package").text = _text(report.error)
        cases.append(case)
    counts = report.counts()
    suite = ET.Element(
        "testsuite", name=_text(name), tests=str(len(cases)), failures=str(counts[FAIL]),
        errors=str(counts[ERROR] + (report.error is not None)), skipped=str(counts[SKIP]),
        time=f"{sum(r.seconds for r in report.results):.6f}",
    )  # fmt: skip
    properties = ET.SubElement(suite, "properties")
    for key, value in (("adapter", report.adapter), ("path", report.path), ("origin", report.origin),
                       ("isolated", str(report.isolated).lower())):  # fmt: skip
        if value is not None:
            ET.SubElement(properties, "property", name=key, value=_text(value))
    suite.extend(cases)
    return suite


def junit_xml(reports: Sequence[PackageReport], *, name: str = "webgpu-kernels test") -> str:
    """The reports as one JUnit XML document (with its declaration; write it as UTF-8)."""
    # CI systems key a case by classname and name: two packages of one op id (a copy under test
    # beside the original) would merge, so each of those is told apart by its path.
    seen = Counter(r.kernel for r in reports)
    suites = [_testsuite(r, r.kernel if seen[r.kernel] == 1 else f"{r.kernel} ({r.path})") for r in reports]
    root = ET.Element("testsuites", name=name)
    for key in ("tests", "failures", "errors", "skipped"):
        root.set(key, str(sum(int(s.get(key, "0")) for s in suites)))
    root.set("time", f"{sum(float(s.get('time', '0')) for s in suites):.6f}")
    root.extend(suites)
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def write_junit(reports: Sequence[PackageReport], path: str | os.PathLike[str]) -> None:
    """Write :func:`junit_xml` to ``path`` whole or not at all (digests.replace_file), so a CI
    step that reads it never sees half a report. Raises OSError."""
    replace_file(Path(path), junit_xml(reports))
