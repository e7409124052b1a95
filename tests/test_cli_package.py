"""cli_package.py's printing: `digest --check`'s table of changes, `test`'s table of results."""

from __future__ import annotations

import shutil

import pytest
from click.testing import CliRunner

from webgpu_kernels.cli import main
from webgpu_kernels.package import embedded_root

from cli_helpers import CLI, without_any_adapter


def test_digest_check_names_the_metadata_file_on_one_line(runner: CliRunner, tmp_path) -> None:
    """The title of digest's table of changes was wrapped to the table's width: the path of
    metadata.json came out cut mid-name ("metadata.js" / "on") in a log, where nothing needs wrapping."""
    root = tmp_path / "a-package-folder-with-a-rather-long-name" / "com.microsoft.QuickGelu"
    shutil.copytree(embedded_root() / "com.microsoft.QuickGelu", root)
    (root / "bench.json").write_text("{}", "utf-8")
    result = runner.invoke(main, ["digest", "--check", str(root)])
    assert result.exit_code == 1 and "changed" in result.output, result.output
    assert str(root / "metadata.json") in result.output, result.output


@pytest.mark.parametrize("columns", ["80", "60"])
def test_the_test_table_keeps_every_column_on_a_narrow_terminal(runner: CliRunner, columns) -> None:
    """At 80 columns the table's right edge was cropped, its result column first ("pas"), since
    rich cannot narrow a no-wrap column; its columns now fold."""
    from conftest import PACKAGES_DIR

    result = runner.invoke(main, ["test", str(PACKAGES_DIR / "demo.Softmax"), "--case", "rank3-3x5x100-wg64-f32"],
                           env={"COLUMNS": columns})  # fmt: skip
    assert result.exit_code == 0, result.output
    table = [line for line in result.stdout.splitlines() if line.startswith(("│", "┃"))]
    assert table and all(len(line) <= int(columns) and line.endswith(("│", "┃")) for line in table), result.stdout
    assert any(line.rstrip("│ ").endswith("pass") for line in table), result.stdout


def test_digest_check_out_of_date_says_what_to_do(runner: CliRunner, tmp_path) -> None:
    """`digest --check` ended "metadata.json is out of date" and left the author to guess: it names
    the digest command to run for changes that are theirs, and the added files (a report written
    into the folder) to remove instead (an author's walkthrough)."""
    root = tmp_path / "pkg"
    shutil.copytree(embedded_root() / "com.microsoft.QuickGelu", root)
    (root / "report.xml").write_text("<testsuites/>", "utf-8")
    result = runner.invoke(main, ["digest", "--check", str(root)])
    assert result.exit_code == 1, result.output
    last = " ".join(result.stdout.split("metadata.json is out of date", 1)[1].split())
    assert f"`webgpu-kernels digest {root}`" in last and "report.xml" in last and "remove" in last, result.stdout
    # a changed file alone: the digest command, no word of removing anything
    (root / "report.xml").unlink()
    (root / "bench.json").write_text("{}", "utf-8")
    result = runner.invoke(main, ["digest", "--check", str(root)])
    last = " ".join(result.stdout.split("metadata.json is out of date", 1)[1].split())
    assert result.exit_code == 1 and f"`webgpu-kernels digest {root}`" in last and "remove" not in last, result.stdout


def test_digest_warns_of_a_template_the_package_no_longer_has(runner: CliRunner, tmp_path) -> None:
    """A pass's shader deleted from the folder was recorded as "removed" and digest exited 0 in
    silence; the package then fails every call that reaches it. It still writes (exit 0: a warning),
    and says which file and where the manifest names it, on stderr. A template only another
    includes is validate's to find (digest parses no template)."""
    import json

    from conftest import PACKAGES_DIR

    root = shutil.copytree(PACKAGES_DIR / "demo.Gather", tmp_path / "demo.Gather")
    (root / "gather-row.wgsl.jinja").unlink()
    (root / "gather-vec4.wgsl.jinja").unlink()
    result = runner.invoke(main, ["digest", str(root)])
    assert result.exit_code == 0, result.output
    warnings = [" ".join(line.split()) for line in result.stderr.split("warning: ")[1:]]
    assert len(warnings) == 1, result.stderr  # gather-row.wgsl.jinja is only included by another template
    vec4 = json.loads((root / "manifest.json").read_text("utf-8"))["variants"]
    where = next(f"variants[{i}].passes[0]" for i, v in enumerate(vec4) if "vec4" in json.dumps(v["passes"][0]))
    assert "'gather-vec4.wgsl.jinja'" in warnings[0] and where in warnings[0], warnings
    assert "no longer has" in warnings[0] and "warning" not in result.stdout, result.output
    data = json.loads(runner.invoke(main, ["digest", str(root), "--json"]).stdout)
    assert len(data["warnings"]) == 1 and "does not have" in data["warnings"][0], data  # digested: not "no longer"


def test_a_package_that_cannot_load_points_to_validate(runner: CliRunner, tmp_path, monkeypatch) -> None:
    """`test` on a package whose manifest breaks the schema said "cannot load the package: ..."
    under an empty results table. It names `validate PATH`, which lists every problem, prints no
    empty table, and --json and --junit give the package's absolute path, as for a package that
    loads (they had the argument as typed: "b")."""
    import json
    from xml.etree import ElementTree as ET

    root = shutil.copytree(embedded_root() / "com.microsoft.QuickGelu", tmp_path / "b")
    manifest = json.loads((root / "manifest.json").read_text("utf-8"))
    (root / "manifest.json").write_text(json.dumps({**manifest, "bogus": 1}), "utf-8")
    assert runner.invoke(main, ["digest", str(root)]).exit_code == 0
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(main, ["test", "b", "--junit", str(tmp_path / "report.xml")])
    assert result.exit_code == 1, result.output
    text = " ".join(result.stdout.split())
    assert "cannot load the package" in text and "`webgpu-kernels validate b` lists every problem" in text, text
    assert "Test results" not in result.stdout and "┏" not in result.stdout, result.stdout
    suite = ET.parse(tmp_path / "report.xml").getroot().find("testsuite")
    assert suite is not None
    properties = {p.get("name"): p.get("value") for p in suite.iter("property")}
    assert properties["path"] == str(root.resolve()), properties
    error = suite.find("testcase/error")
    assert error is not None and "webgpu-kernels validate b" in (error.text or ""), ET.tostring(suite)
    data = json.loads(runner.invoke(main, ["test", "b", "--json"]).stdout)
    package = data["packages"][0]
    assert package["path"] == str(root.resolve()) and "webgpu-kernels validate b" in package["error"], package
    assert data["ok"] is False and package["results"] == [], data


def test_the_commands_digest_and_test_suggest_run_as_written_for_a_folder_named_like_an_option(
        runner: CliRunner, tmp_path, monkeypatch) -> None:  # fmt: skip
    """digest --check's "run `webgpu-kernels digest PATH`" and test's "`webgpu-kernels validate PATH`
    lists every problem" had printed a folder named "-b" bare: the command as written read it as
    options ("No such option: -b"). They name it as new's next: line does, ./-b."""
    import json

    root = shutil.copytree(embedded_root() / "com.microsoft.QuickGelu", tmp_path / "-b")
    monkeypatch.chdir(tmp_path)
    (root / "notes.md").write_text("notes", "utf-8")
    text = " ".join(runner.invoke(main, ["digest", "--check", "--", "-b"]).stdout.split())
    assert "run `webgpu-kernels digest ./-b` to record them" in text, text
    manifest = json.loads((root / "manifest.json").read_text("utf-8"))
    (root / "manifest.json").write_text(json.dumps({**manifest, "bogus": 1}), "utf-8")
    assert runner.invoke(main, ["digest", "--", "-b"]).exit_code == 0
    text = " ".join(runner.invoke(main, ["test", "--", "-b"]).stdout.split())
    assert "`webgpu-kernels validate ./-b` lists every problem" in text, text
    assert runner.invoke(main, ["validate", "./-b"]).exit_code == 1  # the package's problems, not a usage error


def test_test_isolated_without_any_adapter_exits_2_and_writes_no_report(tmp_path) -> None:
    """package-files.md's CI step runs `test "$PKG" --timeout 600 --junit report.xml`, and says a
    command that could not run ("no adapter at all") exits 2 and writes no report. Isolated
    (--timeout, --isolate) the child's AdapterNotFoundError had become the package's error: exit 1,
    NO_ADAPTER on stdout and a JUnit report with one error, where in-process it exits 2."""
    import subprocess

    from webgpu_kernels.device import NO_ADAPTER

    env, _ = without_any_adapter(tmp_path)
    for isolation in (["--timeout", "600"], ["--isolate"], []):
        report = tmp_path / "report.xml"
        run = subprocess.run([*CLI, "test", "com.microsoft.QuickGelu", *isolation, "--junit", str(report)], env=env,
                             capture_output=True, text=True, timeout=120)  # fmt: skip
        assert run.returncode == 2 and NO_ADAPTER in run.stderr, (isolation, run.stdout, run.stderr)
        assert not report.exists(), isolation


def test_digest_check_ends_with_what_to_do_where_the_version_differs_from_since_version(runner: CliRunner,
                                                                                      tmp_path) -> None:  # fmt: skip
    """cli.md: `digest --check` on an out-of-date metadata.json, "its last line says what to do". For
    a package whose contract version is not its sinceVersion (any ONNX op past opset 1 that `new`
    started at version 1: demo.ArgMax, opset 13) the kept-version note came after the verdict, so a
    CI log's last line said "--version N sets it" instead of the digest to run."""
    from conftest import PACKAGES_DIR

    root = tmp_path / "demo.ArgMax"
    shutil.copytree(PACKAGES_DIR / "demo.ArgMax", root)
    (root / "bench.json").write_text((root / "bench.json").read_text("utf-8") + "\n", "utf-8")
    # the note is said in a run whose manifest.json changed (test_digests.py), where sinceVersion may have
    (root / "manifest.json").write_text((root / "manifest.json").read_text("utf-8") + "\n", "utf-8")
    result = runner.invoke(main, ["digest", "--check", str(root)])
    assert result.exit_code == 1, result.output
    assert "sinceVersion 13" in result.stdout, result.stdout  # the note is still said
    last = " ".join(result.stdout.split("metadata.json is out of date", 1)[1].split())
    assert last.endswith(f"run `webgpu-kernels digest {root}` to record them"), result.stdout


def test_digest_check_of_another_op_id_is_not_up_to_date(runner: CliRunner, tmp_path) -> None:
    """A metadata.json whose id is not the manifest's domain.name (the op renamed in the manifest,
    digest not run) failed `digest --check` (exit 1) under "metadata.json is up to date", with no
    digest to run, and --json said "upToDate": true."""
    import json

    root = tmp_path / "pkg"
    shutil.copytree(embedded_root() / "com.microsoft.QuickGelu", root)
    metadata = json.loads((root / "metadata.json").read_text("utf-8"))
    metadata["id"] = "com.microsoft.QuickGeluOld"
    (root / "metadata.json").write_text(json.dumps(metadata, indent=2), "utf-8")
    result = runner.invoke(main, ["digest", "--check", str(root)])
    assert result.exit_code == 1 and "up to date" not in result.stdout, result.stdout
    last = " ".join(result.stdout.split("metadata.json is out of date", 1)[1].split())
    assert "com.microsoft.QuickGeluOld" in last and f"run `webgpu-kernels digest {root}`" in last, result.stdout
    result = runner.invoke(main, ["digest", "--check", "--json", str(root)])
    assert result.exit_code == 1 and json.loads(result.stdout)["upToDate"] is False, result.stdout


def test_validate_prints_a_file_name_with_a_newline_on_one_line(runner: CliRunner, tmp_path) -> None:
    """A package file named "a\\nPASSED b.txt" had printed its name across two lines of validate's
    report, the second reading "PASSED b.txt": a stranger's package could write a line of its
    choosing into a CI log. The name is shown escaped, on its problem's line."""
    root = tmp_path / "pkg"
    shutil.copytree(embedded_root() / "com.microsoft.QuickGelu", root)
    (root / "a\nPASSED b.txt").write_text("x", "utf-8")
    result = runner.invoke(main, ["validate", "--no-gpu", str(root)])
    assert result.exit_code == 1, result.output
    assert not any(line.startswith("PASSED") for line in result.output.splitlines()), result.output
    assert "a\\nPASSED b.txt" in result.output, result.output
