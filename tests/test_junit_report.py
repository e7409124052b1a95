"""``webgpu-kernels test --junit FILE`` and ``validate --junit FILE``: the same results as the table
and --json, as JUnit XML."""

from __future__ import annotations

import json
import shutil
import socket
import time
from datetime import datetime
from pathlib import Path
from xml.etree import ElementTree as ET

import pytest
from click.testing import CliRunner
from test_package_tests import QUICK_GELU, case_named, edit_test_json  # noqa: E402

import webgpu_kernels as wk
from webgpu_kernels import digests
from webgpu_kernels.cli import main
from webgpu_kernels.junit_report import PACKAGE_CASE, junit_xml
from webgpu_kernels.package import open_folder
from webgpu_kernels.package_tests import CRASH_HOOK_ENV, selected_cases, unreached_runs
from webgpu_kernels.run_results import PackageReport, RunResult
from webgpu_kernels.validation_report import Problem

from conftest import copy_package  # noqa: E402

SOFTMAX = Path(__file__).parent / "packages" / "demo.Softmax"


def outcomes(suite: ET.Element) -> dict[str, str]:
    """testcase name -> pass | failure | error | skipped."""
    found = {}
    for case in suite.iter("testcase"):
        tags = [child.tag for child in case if child.tag in ("failure", "error", "skipped")]
        assert len(tags) <= 1
        found[case.get("name")] = tags[0] if tags else "pass"
    return found


def test_a_failing_package_reads_as_the_json_does(tmp_path: Path, runner: CliRunner) -> None:
    root = copy_package(QUICK_GELU, tmp_path / "qg")

    def edit(data: dict) -> None:
        case_named(data, "tail-3x5-f32")["expected"]["Y"]["values"][4] += 0.01  # far outside the tolerance
        case_named(data, "one-element-f32")["variants"] = ["nope"]  # a variant the package lacks: an error

    edit_test_json(root, edit)
    xml_path = tmp_path / "report.xml"
    result = runner.invoke(main, ["test", str(root), "--json", "--junit", str(xml_path)])
    assert result.exit_code == 1, result.output
    (package,) = json.loads(result.stdout)["packages"]
    suites = ET.parse(xml_path).getroot()
    (suite,) = suites.findall("testsuite")

    want = {}
    for r in package["results"]:
        name = f"{r['case']} [{r['variant']}]" if r["variant"] else r["case"]
        want[name] = {"pass": "pass", "fail": "failure", "error": "error", "skip": "skipped"}[r["status"]]
    assert outcomes(suite) == want
    assert want["tail-3x5-f32 [vec4_tail]"] == "failure" and want["one-element-f32 [nope]"] == "error"
    counts = package["counts"]
    for element in (suite, suites):
        assert element.get("tests") == str(len(package["results"]))
        assert element.get("failures") == str(counts["fail"]) == "2"
        assert element.get("errors") == str(counts["error"]) == "1"
        assert element.get("skipped") == "0"
    assert suite.get("name") == QUICK_GELU
    assert {c.get("classname") for c in suite.iter("testcase")} == {QUICK_GELU}
    properties = {p.get("name"): p.get("value") for p in suite.find("properties")}
    assert properties["adapter"] == package["adapter"] == wk.get_device().adapter.label()
    assert properties["path"] == str(root) and properties["isolated"] == "false"

    by_name = {c.get("name"): c for c in suite.iter("testcase")}
    failed = by_name["tail-3x5-f32 [vec4_tail]"]
    failure = failed.find("failure")
    assert "1 of 15 elements outside rtol=1e-05 atol=1e-06" in failure.text
    assert failure.get("message") == failure.text.strip().splitlines()[0]
    assert "dtype: float32" in failed.find("system-out").text and "Y: maxAbsError" in failed.find("system-out").text
    for r in package["results"]:  # each run's own seconds, and the suite's sum
        name = f"{r['case']} [{r['variant']}]" if r["variant"] else r["case"]
        assert float(by_name[name].get("time")) == pytest.approx(r["seconds"], abs=1e-6)
    assert float(suite.get("time")) == pytest.approx(sum(r["seconds"] for r in package["results"]), abs=1e-5)
    assert float(suite.get("time")) > 0


def test_the_report_is_written_whole_and_where_the_path_leads(tmp_path: Path, runner: CliRunner) -> None:
    """A regular file is replaced by a new one renamed over it (replacing.replace_file: a reader never
    sees half a report); a link is the caller's own, so its target is the file written, as tee does."""
    target = tmp_path / "elsewhere.xml"
    target.write_text("old report", encoding="utf-8")
    inode = target.stat().st_ino
    link = tmp_path / "report.xml"
    link.symlink_to(target)
    result = runner.invoke(main, ["test", QUICK_GELU, "--case", "rank0-f32", "--junit", str(link)])
    assert result.exit_code == 0, result.output
    assert link.is_symlink() and ET.parse(target).getroot().get("tests") == "2"
    assert target.stat().st_ino != inode  # a new file renamed over the old one, not the old one rewritten
    assert sorted(p.name for p in tmp_path.iterdir()) == ["elsewhere.xml", "report.xml"]  # no temporary file left


def test_the_report_goes_into_a_pipe_in_place(tmp_path: Path, runner: CliRunner) -> None:
    """`--junit /dev/stdout` or `--junit >(cat)`: a file that is not a regular one is written into,
    never replaced (as root in a CI container, the rename had replaced the container's /dev/stdout)."""
    import os
    import threading

    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    received: list[bytes] = []
    reader = threading.Thread(target=lambda: received.append(fifo.read_bytes()), daemon=True)
    reader.start()
    result = runner.invoke(main, ["test", QUICK_GELU, "--case", "rank0-f32", "--junit", str(fifo)])
    reader.join(timeout=30)
    assert result.exit_code == 0, result.output
    assert received and ET.fromstring(received[0]).get("tests") == "2"
    assert fifo.is_fifo() and sorted(p.name for p in tmp_path.iterdir()) == ["pipe"]


def test_a_package_that_cannot_be_tested_is_an_error_not_an_empty_suite(tmp_path: Path, runner: CliRunner) -> None:
    """A suite with no testcases reads as green in CI; a package without test.json must not."""
    root = copy_package(QUICK_GELU, tmp_path / "qg")
    (root / "test.json").unlink()
    digests.write_metadata(root)
    xml_path = tmp_path / "report.xml"
    result = runner.invoke(main, ["test", str(root), "--junit", str(xml_path)])
    assert result.exit_code == 1, result.output
    (suite,) = ET.parse(xml_path).getroot().findall("testsuite")
    assert outcomes(suite) == {PACKAGE_CASE: "error"}
    assert suite.get("errors") == "1" and suite.get("tests") == "1"
    assert "the package has no test.json" in suite.find("testcase/error").get("message")


def test_a_passing_run_and_the_isolated_child_name_the_adapter(tmp_path: Path, runner: CliRunner) -> None:
    xml_path = tmp_path / "report.xml"
    result = runner.invoke(main, ["test", QUICK_GELU, "--isolate", "--case", "refused-*", "--case", "rank0-f32",
                                  "--junit", str(xml_path)])  # fmt: skip
    assert result.exit_code == 0, result.output
    (suite,) = ET.parse(xml_path).getroot().findall("testsuite")
    found = outcomes(suite)
    assert set(found.values()) == {"pass"} and "rank0-f32 [scalar]" in found
    assert any(name.startswith("refused-") for name in found)
    properties = {p.get("name"): p.get("value") for p in suite.find("properties")}
    assert properties["adapter"] == wk.get_device().adapter.label() and properties["isolated"] == "true"
    refused = next(c for c in suite.iter("testcase") if c.get("name") == "refused-int32-input")
    assert "refused: DTypeError" in refused.find("system-out").text


def test_a_message_ending_its_first_line_with_a_colon_keeps_the_reason() -> None:
    """A CI page lists the outcome's message attribute: for a shader it read "... shader does not
    compile:" and stopped there, the compiler's reason only in the body."""
    compile_error = ("bias-split-gelu.wgsl.jinja:44: shader does not compile:\n\n"
                     "  Shader 'X' parsing error: no definition in scope for identifier: `HAFL`\n  ┌─ wgsl:38:9\n")
    report = PackageReport(kernel="demo.X", path="-", origin="local", isolated=False, results=[
        RunResult("demo.X", "a", "v", "float32", "error", message=compile_error),
        RunResult("demo.X", "b", "v", "float32", "fail", message="Y: 1 of 3 elements outside\nfirst at [0]"),
    ])  # fmt: skip
    cases = {c.get("name"): c for c in ET.fromstring(junit_xml([report]).encode("utf-8")).iter("testcase")}
    assert cases["a [v]"].find("error").get("message") == (
        "bias-split-gelu.wgsl.jinja:44: shader does not compile: Shader 'X' parsing error: no definition in scope "
        "for identifier: `HAFL`")
    assert cases["b [v]"].find("failure").get("message") == "Y: 1 of 3 elements outside"


def test_the_summary_skips_wgpus_preamble_for_the_reason() -> None:
    """wgpu 0.32 opens a shader error with "Validation Error", "Caused by:" and the call it came
    from: the message attribute, all a CI page lists, read "... shader does not compile:
    Validation Error" and never said what was wrong."""
    compile_error = ("silu.wgsl.jinja:18: com.example.Silu variant 'scalar' pass 'main': shader does not compile:\n"
                     "Validation Error\n\nCaused by:\n  In wgpuDeviceCreateShaderModule, label = 'Silu.scalar'\n\n"
                     "Shader 'Silu.scalar' parsing error: expected expression, found \";\"\n   \u250c\u2500 wgsl:15:22\n")
    report = PackageReport(kernel="com.example.Silu", path="-", origin="local", isolated=False, results=[
        RunResult("com.example.Silu", "a", "scalar", "float32", "error", message=compile_error)])  # fmt: skip
    (case,) = ET.fromstring(junit_xml([report]).encode("utf-8")).iter("testcase")
    assert case.find("error").get("message") == (
        "silu.wgsl.jinja:18: com.example.Silu variant 'scalar' pass 'main': shader does not compile: "
        "Shader 'Silu.scalar' parsing error: expected expression, found \";\"")
    assert case.find("error").text == compile_error  # the body keeps every line


def test_control_characters_cannot_break_the_document() -> None:
    """A message may quote bytes of a package's file; XML 1.0 has no way to hold most control characters."""
    report = PackageReport(kernel="demo.X", path="-", origin="local", isolated=False, results=[
        RunResult("demo.X", "case\x00one", "v", "float32", "fail", message="bad \x1b[31mva\x1clue\x07\nsecond line"),
        RunResult("demo.X", "two", None, "float16", "skip", message="no shader-f16 <here> & \"there\""),
    ], error="crashed \x01")  # fmt: skip
    root = ET.fromstring(junit_xml([report]).encode("utf-8"))
    cases = {c.get("name"): c for c in root.iter("testcase")}
    assert set(cases) == {"case\\x00one [v]", "two", PACKAGE_CASE}
    failure = cases["case\\x00one [v]"].find("failure")
    assert failure.get("message") == "bad \\x1b[31mva\\x1clue\\x07" and failure.text.endswith("second line")
    skipped = cases["two"].find("skipped")
    assert skipped.get("message") == 'no shader-f16 <here> & "there"' and skipped.text is None
    assert cases[PACKAGE_CASE].find("error").text == "crashed \\x01"
    assert (root.get("tests"), root.get("failures"), root.get("errors"), root.get("skipped")) == ("3", "1", "1", "1")


@pytest.mark.parametrize("where", ["folder", "missing-folder/report.xml", "", "new-folder/"])  # a slash: a folder
def test_a_report_path_that_can_never_be_written_is_refused_before_any_test(tmp_path: Path, runner: CliRunner,
                                                                           where: str) -> None:  # fmt: skip
    (tmp_path / "folder").mkdir()
    path = str(tmp_path / where) + "/" * where.endswith("/") if where else ""  # Path drops a trailing slash
    result = runner.invoke(main, ["test", QUICK_GELU, "--case", "rank0-f32", "--junit", path])
    assert result.exit_code == 2, result.output
    assert "--junit" in result.stderr and "rank0-f32" not in result.stdout  # nothing ran
    assert sorted(p.name for p in tmp_path.iterdir()) == ["folder"] and not any((tmp_path / "folder").iterdir())


def test_a_write_that_fails_after_the_run_is_an_error_once_the_results_are_shown(tmp_path: Path, runner: CliRunner,
                                                                                monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    from webgpu_kernels import junit_report

    def full_disk(path: Path, text: str) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(junit_report, "replace_file", full_disk)
    result = runner.invoke(main, ["test", QUICK_GELU, "--case", "rank0-f32", "--junit", str(tmp_path / "r.xml")])
    assert result.exit_code == 1
    assert "rank0-f32" in result.stdout  # the table came first
    assert "r.xml" in result.stderr and "No space left on device" in result.stderr


def test_a_crashed_child_reaches_the_report(tmp_path: Path, runner: CliRunner, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(CRASH_HOOK_ENV, "tail-3x5-f16")
    xml_path = tmp_path / "report.xml"
    result = runner.invoke(main, ["test", "--isolate", QUICK_GELU, "--junit", str(xml_path)])
    assert result.exit_code == 1, result.output
    (suite,) = ET.parse(xml_path).getroot().findall("testsuite")
    found = outcomes(suite)
    assert found["tail-3x5-f16 [vec4_tail]"] == "error" and found[PACKAGE_CASE] == "error"
    assert list(found.values()).count("pass") > 30  # what ran before the crash
    package_error = next(c for c in suite.iter("testcase") if c.get("name") == PACKAGE_CASE).find("error")
    assert "exit status 70 while running case 'tail-3x5-f16'" in package_error.text
    assert {p.get("name"): p.get("value") for p in suite.find("properties")}["adapter"] == wk.get_device().adapter.label()


def check_counts(root: ET.Element, started: float, ended: float) -> None:
    """What a CI system reads off the attributes is what the testcases hold: in every testsuite
    and in the root. Each suite says when it started (between ``started`` and ``ended``, epoch
    seconds) and on which host."""
    assert root.tag == "testsuites"
    suites = root.findall("testsuite")
    assert suites
    for suite in suites:
        cases = suite.findall("testcase")
        tags = [child.tag for case in cases for child in case if child.tag in ("failure", "error", "skipped")]
        assert len(tags) <= len(cases)  # (outcomes() checks one outcome per testcase)
        assert suite.get("tests") == str(len(cases))
        for key, tag in (("failures", "failure"), ("errors", "error"), ("skipped", "skipped")):
            assert suite.get(key) == str(tags.count(tag)), (suite.get("name"), key)
        assert float(suite.get("time")) == pytest.approx(sum(float(c.get("time")) for c in cases), abs=1e-6 * len(cases))
        stamp = datetime.fromisoformat(suite.get("timestamp"))
        assert stamp.tzinfo is not None and int(started) <= stamp.timestamp() <= ended
        assert suite.get("hostname") == socket.gethostname()
    for key in ("tests", "failures", "errors", "skipped"):
        assert root.get(key) == str(sum(int(s.get(key)) for s in suites)), key
    assert root.get("tests") == str(len(root.findall("testsuite/testcase")))
    assert float(root.get("time")) == pytest.approx(sum(float(s.get("time")) for s in suites), abs=1e-6 * len(suites))


def test_every_count_agrees_with_the_testcases(tmp_path: Path, runner: CliRunner, monkeypatch: pytest.MonkeyPatch) -> None:
    """A passing run, a failing one over two packages, a crashed child, a validation, and a report
    holding every outcome: the counts, times, timestamps and hostnames of each document."""
    broken = copy_package(QUICK_GELU, tmp_path / "qg")
    edit_test_json(broken, lambda data: case_named(data, "tail-3x5-f32")["expected"]["Y"]["values"].__setitem__(4, 9.0))
    runs = {
        "pass": (["test", QUICK_GELU, "--case", "rank0-*", "--case", "refused-*"], 0, None),
        "fail": (["test", QUICK_GELU, str(broken), "--case", "tail-3x5-f32", "--case", "rank0-f32"], 1, None),
        "crash": (["test", "--isolate", QUICK_GELU, "--case", "alpha-*"], 1, "alpha-0-f32"),
        "validate": (["validate", str(broken), "--no-gpu"], 0, None),
    }  # fmt: skip
    documents = {}
    for label, (args, status, crash_at) in runs.items():
        if crash_at:
            monkeypatch.setenv(CRASH_HOOK_ENV, crash_at)
        else:
            monkeypatch.delenv(CRASH_HOOK_ENV, raising=False)
        path = tmp_path / f"{label}.xml"
        started = time.time()
        result = runner.invoke(main, [*args, "--junit", str(path)])
        assert result.exit_code == status, (label, result.output)
        documents[label] = root = ET.parse(path).getroot()
        check_counts(root, started, time.time())
    assert [s.get("failures") for s in documents["fail"].findall("testsuite")] == ["0", "2"]
    (crashed,) = documents["crash"].findall("testsuite")
    assert int(crashed.get("errors")) > 10 and crashed.get("tests") == str(int(crashed.get("errors")) + 3)  # 3 ran

    report = PackageReport(kernel="demo.X", path="-", origin="local", isolated=True, results=[
        RunResult("demo.X", "a", "v", "float32", "pass", seconds=0.25),
        RunResult("demo.X", "b", "v", "float32", "fail", message="wrong", seconds=0.5),
        RunResult("demo.X", "c", None, "float32", "error", message="broken case"),
        RunResult("demo.X", "d", None, "float16", "skip", message="no shader-f16"),
    ], error="the test process killed by signal SIGSEGV", started=1_700_000_000.0, seconds=2.0, not_run=[
        RunResult("demo.X", "e", "v", "float32", "error", message="not run: the test process died"),
    ])  # fmt: skip
    root = ET.fromstring(junit_xml([report]).encode("utf-8"))
    check_counts(root, report.started, report.started)
    (suite,) = root.findall("testsuite")
    assert outcomes(suite) == {"a [v]": "pass", "b [v]": "failure", "c": "error", "d": "skipped", "e [v]": "error",
                               PACKAGE_CASE: "error"}  # fmt: skip
    assert suite.find("testcase[@name='e [v]']/error").get("type") == "not run"
    # the time in no run (the child's start, the crash) is the package's: the suite's is the run's real time
    assert suite.find(f"testcase[@name='{PACKAGE_CASE}']").get("time") == "1.250000" and suite.get("time") == "2.000000"


def test_a_crashed_child_lists_every_run_it_did_not_reach(tmp_path: Path, runner: CliRunner,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    """The runs after the crash were absent: a dashboard showed fewer tests than the package has."""
    select = ["--case", "refused-vec4*", "--case", "alpha-*"]
    whole, crashed = tmp_path / "whole.xml", tmp_path / "crashed.xml"
    result = runner.invoke(main, ["test", QUICK_GELU, *select, "--junit", str(whole)])
    assert result.exit_code == 0, result.output
    monkeypatch.setenv(CRASH_HOOK_ENV, "alpha-0-f32")
    started, began = time.time(), time.monotonic()
    result = runner.invoke(main, ["test", "--isolate", QUICK_GELU, *select, "--junit", str(crashed)])
    wall = time.monotonic() - began
    assert result.exit_code == 1, result.output
    assert f"{QUICK_GELU}: 3 passed, 0 failed, 1 error, 0 skipped (isolated), 15 not run:" in result.output  # the table's line
    (want,) = ET.parse(whole).getroot().findall("testsuite")
    (suite,) = ET.parse(crashed).getroot().findall("testsuite")
    names = [c.get("name") for c in suite.iter("testcase")]
    assert names == [c.get("name") for c in want.iter("testcase")] + [PACKAGE_CASE]  # every run, in the run's order

    found = outcomes(suite)
    at = names.index("alpha-0-f32 [vec4]")
    assert [found[n] for n in names[:at]] == ["pass"] * 3  # alpha-1.0-4x33-f32 on 3 variants (the refusal is last in test.json)
    cases = suite.findall("testcase")
    assert cases[at].find("error").get("type") == "error" and float(cases[at].get("time")) > 0
    not_run = cases[at + 1:-1]
    assert len(not_run) == 15 and suite.get("errors") == str(len(not_run) + 2) and suite.get("tests") == str(len(names))
    for case in not_run:
        error = case.find("error")
        assert error.get("type") == "not run" and float(case.get("time")) == 0
        assert error.text == ("not run: the test process exit status 70 while running case 'alpha-0-f32' on variant "
                              "'vec4' (float32), before reaching this run")  # fmt: skip
    assert "dtype: float16" in not_run[-2].find("system-out").text and not_run[-1].get("name").startswith("refused-vec4")
    # the child's start and the crash count, as (package)'s time (check_counts: the suite's is the
    # cases' sum): starting Python, NumPy and the device takes more than 0.1 s however idle the
    # machine, and a load only adds to it (the runs' times alone left it 0); all within the command
    package_time = float(cases[-1].get("time"))
    assert package_time > 0.1 and float(suite.get("time")) <= wall
    check_counts(ET.parse(crashed).getroot(), started, time.time())


def test_a_child_that_died_before_its_plan_leaves_the_test_json_cases(tmp_path: Path) -> None:
    """No plan came (the child died opening the device): the selected cases (selected_cases) are
    listed, on the variants they name; a test.json that cannot be read lists nothing (and does not raise)."""
    report = PackageReport(kernel=QUICK_GELU, path="-", origin="embedded", isolated=True,
                           error="the test process killed by signal SIGSEGV")  # fmt: skip
    kernel = wk.get_kernel(QUICK_GELU)
    runs = unreached_runs(kernel, report, None, selected_cases(kernel, ["rank0-f16", "refused-*"]))
    assert [(r.case, r.variant, r.dtype, r.status) for r in runs] == [
        ("rank0-f16", None, "float16", "error"), ("refused-int32-input", None, "int32", "error"),
        ("refused-alpha-not-a-number", None, "float32", "error"), ("refused-workgroup-size-0", None, "float32", "error"),
        ("refused-vec4-on-5-elements", "vec4", "float32", "error"),
    ]  # fmt: skip
    assert runs[0].message == "not run: the test process killed by signal SIGSEGV, before reaching this run"
    report.not_run = runs  # the JSON report carries them too, and reads them back
    data = report.as_dict()
    assert [(r["case"], r["status"]) for r in data["notRun"]] == [(r.case, "error") for r in runs]
    assert PackageReport.from_dict(data).not_run == runs
    report.results.append(RunResult(QUICK_GELU, "rank0-f16", None, "float16", "error", message="crashed here"))
    assert [r.case for r in unreached_runs(kernel, report, None, selected_cases(kernel, ["rank0-f16"]))] == []

    root = copy_package(QUICK_GELU, tmp_path / "qg")
    (root / "test.json").write_text("{", encoding="utf-8")
    digests.write_metadata(root)
    unreadable = wk.Kernel(open_folder(root))
    assert selected_cases(unreadable, None) == [] and unreached_runs(unreadable, report, None, []) == []


def test_two_packages_of_one_op_id_are_told_apart(tmp_path: Path, runner: CliRunner) -> None:
    """CI systems key cases by classname and name: a copy tested beside the original merged with it."""
    root = copy_package(QUICK_GELU, tmp_path / "qg")
    xml_path = tmp_path / "report.xml"
    result = runner.invoke(main, ["test", QUICK_GELU, str(root), "--case", "rank0-f32", "--junit", str(xml_path)])
    assert result.exit_code == 0, result.output
    suites = ET.parse(xml_path).getroot().findall("testsuite")
    names = [s.get("name") for s in suites]
    assert len(set(names)) == 2 and names[1] == f"{QUICK_GELU} ({root})"
    keys = [(c.get("classname"), c.get("name")) for s in suites for c in s.iter("testcase")]
    assert len(keys) == 4 and len(set(keys)) == 4


# --- validate --junit -------------------------------------------------------------------------------


def break_template(root: Path) -> None:
    """demo.Softmax's workgroup variant stops compiling (its row variant still does)."""
    path = root / "softmax-wg.wgsl.jinja"
    text = path.read_text(encoding="utf-8")
    path.write_text(text.replace(";", "; let broken: u32 = nope;", 1), encoding="utf-8")
    digests.write_metadata(root)


def test_validate_junit_fails_the_variants_that_do_not_compile(tmp_path: Path, runner: CliRunner) -> None:
    root = Path(shutil.copytree(SOFTMAX, tmp_path / "sm"))
    break_template(root)
    xml_path = tmp_path / "validate.xml"
    result = runner.invoke(main, ["validate", str(root), "--json", "--junit", str(xml_path)])
    assert result.exit_code == 1, result.output
    data = json.loads(result.stdout)
    (suite,) = ET.parse(xml_path).getroot().findall("testsuite")
    assert suite.get("name") == "demo.Softmax"
    want = {f"compile {c['variant']} [{c['dtype']}]": "failure" if c["status"] == "failed" else "pass"
            for c in data["coverage"]}  # fmt: skip
    want["validate"] = "pass"
    assert outcomes(suite) == want
    assert list(want.values()).count("failure") == 2 == int(suite.get("failures"))
    failed = next(c for c in suite.iter("testcase") if c.get("name") == "compile workgroup [float32]").find("failure")
    assert "no definition in scope for identifier: `nope`" in failed.text
    texts = "\n".join(f.text for f in suite.iter("failure"))
    assert data["errors"] > 0 and all(p["message"] in texts for p in data["problems"] if p["severity"] == "error")
    properties = {p.get("name"): p.get("value") for p in suite.find("properties")}
    assert properties["adapter"] == data["adapter"] and properties["path"] == str(root)


def test_validate_junit_names_each_error_outside_the_gpu_stage(tmp_path: Path, runner: CliRunner) -> None:
    """A stale metadata.json and a broken test.json case: each error its own failing testcase."""
    root = copy_package(QUICK_GELU, tmp_path / "qg")
    path = root / "test.json"
    data = json.loads(path.read_text("utf-8"))
    data["cases"][0]["inputs"]["X"]["shape"] = [2, 3, 999]  # more elements than its values
    path.write_text(json.dumps(data, indent=1), encoding="utf-8")  # metadata.json not refreshed
    xml_path = tmp_path / "validate.xml"
    result = runner.invoke(main, ["validate", str(root), "--no-gpu", "--json", "--junit", str(xml_path)])
    assert result.exit_code == 1, result.output
    report = json.loads(result.stdout)
    errors = [p for p in report["problems"] if p["severity"] == "error"]
    assert len(errors) >= 2
    (suite,) = ET.parse(xml_path).getroot().findall("testsuite")
    found = outcomes(suite)
    assert found.pop("validate") == "pass"
    assert list(found.values()) == ["failure"] * len(errors) and int(suite.get("failures")) == len(errors)
    assert any(name.startswith("metadata.json") or "test.json" in name for name in found)
    assert len(list(suite.iter("testcase"))) == len(errors) + 1  # no two errors merged into one testcase
    summary = next(c for c in suite.iter("testcase") if c.get("name") == "validate").find("system-out").text
    assert "not checked: the GPU stage" in summary and "checked: " in summary


def test_validate_junit_on_a_valid_package_passes_with_its_warnings(tmp_path: Path, runner: CliRunner) -> None:
    root = copy_package(QUICK_GELU, tmp_path / "qg")
    xml_path = tmp_path / "validate.xml"
    result = runner.invoke(main, ["validate", str(root), "--json", "--junit", str(xml_path)])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    (suite,) = ET.parse(xml_path).getroot().findall("testsuite")
    found = outcomes(suite)
    assert set(found.values()) == {"pass"} and len(found) == len(report["coverage"]) + 1
    summary = next(c for c in suite.iter("testcase") if c.get("name") == "validate").find("system-out").text
    assert f"expressions {report['checked']['expressions']}" in summary
    assert summary.count("warning ") == report["warnings"]


def test_two_errors_at_one_place_are_two_testcases() -> None:
    from webgpu_kernels.junit_report import validation_junit_xml
    from webgpu_kernels.validation_report import Coverage, Problem, ValidationReport

    report = ValidationReport(path="/p/demo.X", op_id="demo.X", problems=[
        Problem("error", "manifest.json", "derive.n", "first"), Problem("error", "manifest.json", "derive.n", "second"),
        Problem("error", "x.wgsl.jinja", "", "does not compile", variant="v", dtype="float16", line=3),
        Problem("warning", "test.json", "", "no case for variant 'w'"),
    ], coverage=[Coverage("v", "float16", cases=2, failed=1), Coverage("w", "float32")])  # fmt: skip
    root = ET.fromstring(validation_junit_xml([report]).encode("utf-8"))
    (suite,) = root.findall("testsuite")
    assert outcomes(suite) == {"compile v [float16]": "failure", "compile w [float32]": "skipped",
                               "manifest.json derive.n": "failure", "manifest.json derive.n #2": "failure",
                               "validate": "pass"}  # fmt: skip
    compile_failure = suite.find("testcase[@name='compile v [float16]']/failure")
    assert compile_failure.text == "x.wgsl.jinja:3: does not compile"  # the compile error sits in its row, once
    summary = suite.find("testcase[@name='validate']/system-out").text
    assert "warning test.json: no case for variant 'w'" in summary
    assert (root.get("tests"), root.get("failures"), root.get("skipped")) == ("5", "3", "1")


def test_validate_strict_fails_on_the_packages_warnings_not_the_adapters(tmp_path: Path, runner: CliRunner) -> None:
    """A `when` that never holds left its variant "not exercised", a warning, and validate exited 0,
    so CI never noticed a fast path gone. --strict fails on such warnings; the shipped
    packages' 84M-element bench cases, beyond lavapipe's binding limit, warn about the adapter only."""
    shipped = runner.invoke(main, ["validate", str(copy_package(QUICK_GELU, tmp_path / "qg")), "--strict", "--json"])
    report = json.loads(shipped.stdout)
    assert shipped.exit_code == 0 and report["passed"] is True, shipped.output
    assert all(p["severity"] == "warning" and p["adapterOnly"] for p in report["problems"]), report["problems"]

    root = copy_package(QUICK_GELU, tmp_path / "never")
    manifest = json.loads((root / "manifest.json").read_text("utf-8"))
    manifest["variants"][0]["when"] = [*manifest["variants"][0].get("when", []), "dtypes.T == 'float32'"]  # 'f32'
    (root / "manifest.json").write_text(json.dumps(manifest), "utf-8")
    digests.write_metadata(root)
    plain = runner.invoke(main, ["validate", str(root)])
    assert plain.exit_code == 0 and "not exercised" in plain.output, plain.output
    xml_path = tmp_path / "strict.xml"
    strict = runner.invoke(main, ["validate", str(root), "--strict", "--junit", str(xml_path)])
    assert strict.exit_code == 1 and "INVALID (--strict: warnings fail)" in strict.output, strict.output
    as_json = json.loads(runner.invoke(main, ["validate", str(root), "--strict", "--json"]).stdout)
    assert as_json["strict"] is True and as_json["passed"] is False and as_json["ok"] is True
    (suite,) = ET.parse(xml_path).getroot().findall("testsuite")
    failed = {name for name, outcome in outcomes(suite).items() if outcome == "failure"}
    vid = manifest["variants"][0]["id"]
    assert failed and all(name.startswith("manifest.json") for name in failed), failed
    assert any(f"{vid!r}" in c.find("failure").get("message", "") + (c.find("failure").text or "")
               for c in suite.iter("testcase") if c.find("failure") is not None)  # fmt: skip


def test_a_report_path_under_home_is_written_there(tmp_path: Path, runner: CliRunner,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    """`--junit '~/r.xml'` (quoted, or `--junit=~/r.xml`, which the shell does not expand) had been
    refused as "'~' does not exist", while bench's --json wrote there."""
    monkeypatch.setenv("HOME", str(tmp_path))
    result = runner.invoke(main, ["test", QUICK_GELU, "--case", "rank0-f32", "--junit", "~/r.xml"])
    assert result.exit_code == 0, result.output
    assert "<testsuites" in (tmp_path / "r.xml").read_text(encoding="utf-8")


def test_a_warning_about_the_adapter_alone_is_labelled_adapter(tmp_path: Path, runner: CliRunner, gl_device) -> None:
    """No shader-f16 on this adapter is a warning with no file: --json marks it adapterOnly and
    --strict ignores it, yet the text and JUnit reports labelled it `(package)`, the package's fault."""
    junit = tmp_path / "validate.xml"
    out = runner.invoke(main, ["--adapter", "gl", "validate", QUICK_GELU, "--junit", str(junit)])
    assert out.exit_code == 0, out.output
    heads = [line.split("  [")[0] for line in out.output.splitlines() if "[variant" in line]
    assert heads and set(heads) == {"warning (adapter)"} and "(package)" not in out.output, out.output
    summary = ET.parse(junit).getroot().find("testsuite/testcase[@name='validate']/system-out").text
    f16 = [line for line in summary.splitlines() if "no shader-f16" in line]
    assert f16 and all(line.startswith("warning (adapter) [") for line in f16), summary
    assert Problem("warning", "", "", "about the package as a whole").place() == PACKAGE_CASE


def test_validate_junit_gives_each_compile_and_the_suite_the_time_it_took(tmp_path: Path, runner: CliRunner) -> None:
    """Every testcase and the suite had time="0" though validate takes seconds: a compile testcase
    now has its variant x dtype's time, `validate` the rest, so the suite's is the whole run's."""
    from webgpu_kernels.validation import validate_package_isolated

    junit = tmp_path / "validate.xml"
    out = runner.invoke(main, ["validate", QUICK_GELU, "--junit", str(junit)])
    assert out.exit_code == 0, out.output
    root = ET.parse(junit).getroot()
    (suite,) = root.findall("testsuite")
    times = {c.get("name"): float(c.get("time")) for c in suite.findall("testcase")}
    compiled = [name for name, seconds in times.items() if name.startswith("compile") and seconds > 0]
    assert "compile vec4 [float32]" in compiled and times["validate"] > 0, times
    assert float(suite.get("time")) == pytest.approx(sum(times.values()), abs=1e-5) == float(root.get("time"))
    # isolated: the child's start counts too, and the figures come back from it
    report = validate_package_isolated(copy_package(QUICK_GELU, tmp_path / "qg"), timeout=120)
    assert report.ok and report.seconds > sum(c.seconds for c in report.coverage) > 0, report


def test_validate_junit_gives_every_failed_compile_its_error(tmp_path: Path, runner: CliRunner) -> None:
    """validate reports an error that several variant x dtype share once, under the first ("the same
    error in 1 more variant x dtype: ..."): the other's testcase said only "1 render or compile
    failures", nothing a CI page reader could act on."""
    root = Path(shutil.copytree(SOFTMAX, tmp_path / "sm"))
    break_template(root)
    xml_path = tmp_path / "validate.xml"
    result = runner.invoke(main, ["validate", str(root), "--junit", str(xml_path)])
    assert result.exit_code == 1, result.output
    (suite,) = ET.parse(xml_path).getroot().findall("testsuite")
    failed = [c for c in suite.iter("testcase") if c.find("failure") is not None]
    assert len(failed) == 2
    for case in failed:
        failure = case.find("failure")
        assert "no definition in scope for identifier: `nope`" in failure.text, case.get("name")
        assert "softmax-wg.wgsl.jinja:" in failure.get("message"), case.get("name")


def test_every_compile_testcase_names_its_shared_error_past_the_four_the_message_names(tmp_path: Path,
                                                                                     runner: CliRunner) -> None:  # fmt: skip
    """The testcases read the pairs sharing an error from its message, which names four: of
    QuickGelu's six pairs failing on one template line, the sixth's said only "1 render or compile
    failure: the errors are in the other failing compile testcases"."""
    root = copy_package(QUICK_GELU, tmp_path / "qg")
    template = root / "quick-gelu.wgsl.jinja"
    head, sep, tail = template.read_text("utf-8").rpartition("fn quick_gelu(v: f32) -> f32 {\n")
    template.write_text(head + sep + "  let broken: f32 = 1u;\n" + tail, encoding="utf-8")
    digests.write_metadata(root)
    xml_path = tmp_path / "validate.xml"
    result = runner.invoke(main, ["validate", str(root), "--junit", str(xml_path)])
    assert result.exit_code == 1, result.output
    (suite,) = ET.parse(xml_path).getroot().findall("testsuite")
    compiles = [c for c in suite.iter("testcase") if c.get("name").startswith("compile ")]
    assert len(compiles) == 6 and all(c.find("failure") is not None for c in compiles)
    shared = [c for c in compiles if "the same error as compile " in c.find("failure").text]
    assert len(shared) == 5, [c.find("failure").text for c in compiles]
    for case in compiles:
        text = case.find("failure").text
        assert "quick-gelu.wgsl.jinja:" in text and "the errors are in the other" not in text, (case.get("name"), text)


def test_a_compile_testcase_with_an_error_of_its_own_also_carries_one_it_shares() -> None:
    """A variant x dtype whose pass 'a' fails on its own and whose pass 'b' fails as another's does
    (validate reports that one under the other, `also` naming this one):
    its testcase had held only its own error, the shared one left to the other testcase."""
    from webgpu_kernels.junit_report import validation_junit_xml
    from webgpu_kernels.validation_report import Coverage, ValidationReport

    own = Problem("error", "v.wgsl.jinja", "", "WGSL does not compile for variant 'v' (float32), pass 'a':\nbad a",
                  variant="v", dtype="float32", line=3)  # fmt: skip
    shared = Problem("error", "b.wgsl.jinja", "", "WGSL does not compile for variant 'w' (float32), pass 'b':\nbad b\n"
                     "the same error in 1 more variant x dtype: 'v' (float32)", variant="w", dtype="float32", line=5,
                     also=(("v", "float32"),))  # fmt: skip
    report = ValidationReport(path="/p/demo.X", op_id="demo.X", problems=[own, shared],
                              coverage=[Coverage("v", "float32", cases=1, failed=2),
                                        Coverage("w", "float32", cases=1, failed=1)])  # fmt: skip
    cases = {c.get("name"): c for c in ET.fromstring(validation_junit_xml([report]).encode()).iter("testcase")}
    text = cases["compile v [float32]"].find("failure").text
    assert "bad a" in text and "the same error as compile w [float32]: b.wgsl.jinja:5: " in text and "bad b" in text, text
    assert "bad b" in cases["compile w [float32]"].find("failure").text
