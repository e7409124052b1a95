"""``webgpu-kernels validate``: every problem of a package at once, each with its file and JSON path."""

from __future__ import annotations

import copy
import json
import re
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from webgpu_kernels import TemplateError, digests, load_kernel
from webgpu_kernels.cli import main
from webgpu_kernels.package import embedded_root
from webgpu_kernels.package_tests import CRASH_HOOK_ENV
from webgpu_kernels.validation import validate_package, validate_package_isolated

from conftest import copy_package, optional_output_package  # noqa: E402

QUICK_GELU = "com.microsoft.QuickGelu"
BIAS_ADD = "com.microsoft.BiasAdd"
BROKEN_F16_TAIL = "{% if scalar == 'f16' and vec4Tail %}  let broken: f32 = no_such_name;\n{% endif %}"



def edit_json(path: Path, edit) -> None:
    data = json.loads(path.read_text("utf-8"))
    edit(data)
    path.write_text(json.dumps(data, indent=1), encoding="utf-8")


def where(report) -> set[tuple[str, str, str]]:
    return {(p.severity, p.file, p.json_path) for p in report.problems}


@pytest.fixture
def qg(tmp_path: Path) -> Path:
    return copy_package(QUICK_GELU, tmp_path / "qg")


# --- clean packages ---------------------------------------------------------------------------------


def package_problems(problems):
    """The problems that are the package's: without the warnings that a case's tensors exceed this
    adapter's limits (the shipped bench.json's 84M-element cases are over lavapipe's 128 MiB)."""
    return [p for p in problems if "is refused on this adapter" not in p.message]


def package_problems_json(problems):
    return [p for p in problems if "is refused on this adapter" not in p["message"]]


@pytest.mark.parametrize("op_id", [QUICK_GELU, BIAS_ADD])
def test_embedded_packages_are_valid(op_id: str) -> None:
    report = validate_package(embedded_root() / op_id)
    assert package_problems(report.problems) == []
    assert report.op_id == op_id and report.ok
    variants = {c.variant for c in report.coverage}
    assert {(c.variant, c.dtype) for c in report.coverage} == {(v, d) for v in variants for d in ("float32", "float16")}
    assert all(c.status == "compiled" and c.pipelines > 0 for c in report.coverage)


def test_cli_validate_embedded_by_id(runner: CliRunner) -> None:
    result = runner.invoke(main, ["validate", BIAS_ADD])
    assert result.exit_code == 0, result.output
    refused = result.stdout.count("is refused on this adapter")  # the large cases on a small adapter
    assert f"0 errors, {refused} warnings: valid" in result.stdout and "Pipelines compiled" in result.stdout
    assert "not checked" not in result.stdout
    data = json.loads(runner.invoke(main, ["validate", BIAS_ADD, "--json"]).stdout)
    assert data["ok"] is True and data["errors"] == 0 and data["op"] == BIAS_ADD
    assert {c["variant"] for c in data["coverage"]} == {"vec4", "scalar"}


# --- a WGSL error ------------------------------------------------------------------------------------


def test_wgsl_error_is_reported_with_variant_dtype_and_message(qg: Path, runner: CliRunner) -> None:
    template = qg / "quick-gelu.wgsl.jinja"
    head, sep, tail = template.read_text("utf-8").rpartition("fn quick_gelu(v: f32) -> f32 {\n")
    text = head + sep + BROKEN_F16_TAIL + tail  # the ordinary-alpha form (the last of two)
    template.write_text(text, encoding="utf-8")
    digests.write_metadata(qg)
    result = runner.invoke(main, ["validate", str(qg)])
    assert result.exit_code == 1, result.output
    out = result.stdout
    assert "WGSL does not compile for variant 'vec4_tail' (float16), pass 'main'" in out
    assert "no_such_name" in out  # the compiler's message
    assert "variant vec4_tail, float16" in out
    data = json.loads(runner.invoke(main, ["validate", str(qg), "--json"]).stdout)
    (problem,) = package_problems_json(data["problems"])  # one error however many shaders showed it
    assert problem["severity"] == "error" and problem["file"] == "quick-gelu.wgsl.jinja"
    assert problem["variant"] == "vec4_tail" and problem["dtype"] == "float16"
    assert problem["jsonPath"] == "variants[1].passes[0].source.shader"
    status = {(c["variant"], c["dtype"]): c["status"] for c in data["coverage"]}
    assert status[("vec4_tail", "float16")] == "failed" and status[("vec4_tail", "float32")] == "compiled"


def test_one_template_mistake_every_variant_renders_is_one_error(qg: Path) -> None:
    """A WGSL error in a line every variant and dtype renders printed the compiler's whole text once
    per variant x dtype (8 copies, 187 lines, for an author's package): one error now, naming the
    others; a different error at another line stays its own."""
    template = qg / "quick-gelu.wgsl.jinja"
    text = template.read_text("utf-8")
    mistake = "  let broken: f32 = 1u;\n"  # a u32 where an f32 goes, in every variant's WGSL
    head, sep, tail = text.rpartition("fn quick_gelu(v: f32) -> f32 {\n")
    template.write_text(head + sep + mistake + BROKEN_F16_TAIL + tail, encoding="utf-8")
    digests.write_metadata(qg)
    errors = [p for p in validate_package(qg).problems if p.severity == "error"]
    assert len(errors) == 2, [p.message[:80] for p in errors]
    typed, unnamed = sorted(errors, key=lambda p: "no_such_name" in p.message)
    assert "the same error in 4 more variant x dtype: " in typed.message and typed.message.count("Caused by") <= 1
    assert "no_such_name" in unnamed.message and "the same error" not in unnamed.message  # vec4_tail f16 only


def _one_error_every_pair_fails(qg: Path, runner: CliRunner) -> tuple[dict, dict, set]:
    """validate --json of a package whose six variant x dtype pairs all fail with one error: that
    error, the whole report and the pairs."""
    result = runner.invoke(main, ["validate", str(qg), "--json"])
    assert result.exit_code == 1, result.output
    data = json.loads(result.stdout)
    (error,) = [p for p in data["problems"] if p["severity"] == "error"]
    pairs = {(c["variant"], c["dtype"]) for c in data["coverage"]}
    assert len(pairs) == 6 and {c["status"] for c in data["coverage"]} == {"failed"}
    return error, data, pairs


def test_an_error_every_pair_shares_names_them_all_in_json_and_through_the_child(qg: Path, runner: CliRunner) -> None:
    """The message names four of the pairs that share an error; JUnit had read them from it, so a
    sixth's compile testcase got no error. `also` lists every one, in --json and from the child."""
    template = qg / "quick-gelu.wgsl.jinja"
    head, sep, tail = template.read_text("utf-8").rpartition("fn quick_gelu(v: f32) -> f32 {\n")
    template.write_text(head + sep + "  let broken: f32 = 1u;\n" + tail, encoding="utf-8")
    digests.write_metadata(qg)
    error, data, pairs = _one_error_every_pair_fails(qg, runner)
    assert len(error["also"]) == 5 and all(isinstance(pair, list) for pair in error["also"])
    assert {(error["variant"], error["dtype"]), *map(tuple, error["also"])} == pairs
    assert "the same error in 5 more variant x dtype: " in error["message"] and error["message"].endswith(" ...")
    assert all(p["also"] == [] for p in data["problems"] if p is not error)
    (isolated,) = [p for p in validate_package_isolated(qg, timeout=120).problems if p.severity == "error"]
    assert isolated.also == tuple(map(tuple, error["also"]))  # tuples again, as the parent's own report has them


def test_template_that_does_not_render_or_parse(qg: Path) -> None:
    template = qg / "quick-gelu.wgsl.jinja"
    text = template.read_text("utf-8").replace("const ALPHA", "{{ no_such_value }}\nconst ALPHA")
    template.write_text(text, encoding="utf-8")
    (qg / "other.wgsl.jinja").write_text("{% if %}\n", encoding="utf-8")
    edit_json(qg / "manifest.json", lambda m: m["variants"][2]["passes"][0]["source"].update(shader="other.wgsl.jinja"))
    digests.write_metadata(qg)
    report = validate_package(qg)
    messages = {(p.file, p.line, p.variant) for p in report.errors}
    assert ("other.wgsl.jinja", 1, None) in messages  # the syntax error, with its line
    render = [p for p in report.errors if p.file == "quick-gelu.wgsl.jinja"]
    assert render and "no_such_value" in render[0].message and render[0].variant in ("vec4", "vec4_tail")
    # the JSON path names the pass that renders it, as a compile error's does
    index = 0 if render[0].variant == "vec4" else 1
    assert render[0].json_path == f"variants[{index}].passes[0].source.shader"


def test_a_render_error_every_pair_meets_is_one_error_naming_the_others(qg: Path, runner: CliRunner) -> None:
    """A template line that fails to render for every variant and dtype had been six errors, one per
    variant x dtype, where a compile error is reported once naming the others (`also`)."""
    template = qg / "quick-gelu.wgsl.jinja"
    template.write_text(template.read_text("utf-8").replace("const ALPHA", "{{ no_such_value }}\nconst ALPHA"), "utf-8")
    digests.write_metadata(qg)
    error, _, pairs = _one_error_every_pair_fails(qg, runner)
    assert "does not render for variant" in error["message"] and "'no_such_value' is undefined" in error["message"]
    assert {(error["variant"], error["dtype"]), *map(tuple, error["also"])} == pairs
    assert "the same error in 5 more variant x dtype: " in error["message"]


def test_validate_stops_rendering_once_the_templates_took_their_time_in_all(qg: Path, monkeypatch) -> None:
    """Each render may take up to the 10 s render deadline, and validate renders every case x variant:
    4 variants of a template that spends its deadline took 41 s, and a package of hundreds of cases
    or variants would have taken hours (red team). Past MAX_RENDER_SECONDS_IN_ALL of
    rendering the other pairs are not rendered, and one error says how many and why."""
    from webgpu_kernels import validation_gpu

    monkeypatch.setattr(validation_gpu, "MAX_RENDER_SECONDS_IN_ALL", 0.0)  # spent by the first render
    report = validate_package(qg)
    (error,) = [p for p in report.errors if "in all" in p.message]
    assert error.message.startswith("the templates took ") and "more than the 0 s validate gives them in all" in error.message
    assert f"{sum(c.cases for c in report.coverage) - 1} renders (case x variant) were not checked" in error.message
    monkeypatch.setattr(validation_gpu, "MAX_RENDER_SECONDS_IN_ALL", 60.0)
    assert not [p for p in validate_package(qg).errors if "in all" in p.message]


# --- many problems at once ----------------------------------------------------------------------------


def test_an_unknown_field_does_not_hide_the_other_problems(qg: Path) -> None:
    """A stray field is a schema error; the expressions, references and templates are still checked
    as if it were gone (one unknown field used to stop validation of the manifest there)."""

    def manifest(m: dict) -> None:
        m["bogus"] = 1
        m["variants"][0]["passes"][0]["bogusToo"] = True
        m["variants"][0]["when"].append("vec4Tial")
        m["variants"][2]["passes"][0]["source"]["shader"] = "missing.wgsl.jinja"

    edit_json(qg / "manifest.json", manifest)
    digests.write_metadata(qg)
    problems = validate_package(qg, gpu=False).problems
    messages = " | ".join(f"{p.json_path}: {p.message}" for p in problems)
    for fragment in ("'bogus' was unexpected", "'bogusToo' was unexpected", "variants[0].when[2]: ",
                     "unknown name 'vec4Tial'", "'missing.wgsl.jinja' is not in the package"):  # fmt: skip
        assert fragment in messages, (fragment, messages)
    # Any other schema violation still stops the manifest checks (the model cannot be trusted).
    edit_json(qg / "manifest.json", lambda m: m["variants"][1].update(priority="high"))
    messages = " | ".join(p.message for p in validate_package(qg, gpu=False).problems)
    assert "'high' is not of type" in messages and "vec4Tial" not in messages


def test_several_problems_are_reported_at_once(qg: Path, runner: CliRunner) -> None:
    def manifest(m: dict) -> None:
        m["derive"]["vec4Ok"] = "numel(shapes.X) > 0 and numel(shapes.X) % 4 == 0 and attrs.alhpa > 0"
        m["derive"]["early"] = "later * 2"  # reading an entry below is fine: each is evaluated after what it reads
        m["derive"]["later"] = "numel(shapes.Z)"
        m["derive"]["loopA"] = "loopB + 1"
        m["derive"]["loopB"] = "loopA * 2"
        m["variants"][0]["when"].append("vec4Tial")
        m["variants"][0]["when"].append("dtypes.U == 'f32' and device.limits.maxFoo > 0")
        m["variants"][1]["constants"]["scalar"] = "dtypes.T +"
        m["variants"][2]["when"].append("vectorScalar == 'x'")  # a constant of variant vec4 only
        m["bindingSets"]["scalarTail"][0]["elementType"] = "$vectorScalar"
        m["variants"][2]["passes"][0]["source"]["shader"] = "missing.wgsl.jinja"

    edit_json(qg / "manifest.json", manifest)
    edit_json(qg / "test.json", lambda t: t["cases"][0]["inputs"]["X"]["generate"].update(distribution="gaussian"))
    edit_json(qg / "bench.json", lambda b: b["cases"][0].update(types={"T": "float32"}))
    (qg / "notes.json").write_text("{}", encoding="utf-8")  # not in metadata.json
    result = runner.invoke(main, ["validate", str(qg), "--json"])
    assert result.exit_code == 1
    report = json.loads(result.stdout)
    found = {(p["file"], p["jsonPath"]) for p in report["problems"] if p["severity"] == "error"}
    expected = {
        ("manifest.json", ""),  # digest mismatch (the manifest was edited after `digest`)
        ("notes.json", ""),  # unlisted
        ("manifest.json", "bindingSets.scalarTail[0].elementType"),  # $vectorScalar (check_manifest)
        ("manifest.json", "derive.vec4Ok"),  # attrs.alhpa
        ("manifest.json", "derive.loopA"),  # loopA -> loopB -> loopA
        ("manifest.json", "derive.later"),  # shapes.Z
        ("manifest.json", "variants[0].when[2]"),  # vec4Tial: unknown name
        ("manifest.json", "variants[0].when[3]"),  # dtypes.U and device.limits.maxFoo
        ("manifest.json", "variants[1].constants.scalar"),  # syntax error
        ("manifest.json", "variants[2].when[2]"),  # another variant's constant
        ("manifest.json", "bindingSets.scalarTail[0].elementType"),  # per variant using the set
        ("manifest.json", "variants[2].passes[0].source.shader"),  # missing template
        ("test.json", "cases[0].inputs.X.generate.distribution"),
        ("bench.json", "cases[0].types.T"),
    }
    assert expected <= found, expected - found
    assert ("manifest.json", "derive.early") not in found and ("manifest.json", "derive.loopB") not in found
    loop = [p["message"] for p in report["problems"] if p["jsonPath"] == "derive.loopA"]
    assert loop == ["reads itself: loopA -> loopB -> loopA (no order can evaluate these)"], loop
    shared = [p["message"] for p in report["problems"] if p["jsonPath"] == "bindingSets.scalarTail[0].elementType"]
    assert len(shared) == 2 and all("as used by variants[" in m for m in shared), shared  # once per pass, not twice
    texts = " | ".join(p["message"] for p in report["problems"])
    for fragment in ("'alhpa'", "reads itself: loopA -> loopB", "'Z' is not an input or output",
                     "unknown name 'vec4Tial'", "'U' is not a type variable", "'maxFoo' is not a WebGPU limit",
                     "syntax error", "not defined for variant 'scalar'", "'missing.wgsl.jinja' is not in the package",
                     "'gaussian' is not one of"):  # fmt: skip
        assert fragment in texts, fragment
    assert report["errors"] >= len(expected)


def test_case_files_against_the_manifest(qg: Path) -> None:
    def test_json(t: dict) -> None:
        t["cases"][0]["inputs"]["W"] = t["cases"][0]["inputs"].pop("X")
        t["cases"][1]["expected"]["Y"] = {"file": "data/nope.npy"}
        t["cases"][4]["expected"]["Y"]["shape"] = [3, 5, 1]
        t["cases"][4]["expected"]["Z"] = t["cases"][4]["expected"]["Y"]
        t["cases"][5]["attrs"] = {"beta": 1}
        t["cases"][6]["variants"] = ["vec8"]
        t["cases"][7]["variants"] = ["scalr"]

    edit_json(qg / "test.json", test_json)
    edit_json(qg / "bench.json", lambda b: b["cases"][0]["inputs"].update(Q={"shape": [3]}))
    digests.write_metadata(qg)
    report = validate_package(qg, gpu=False)
    messages = {p.json_path: p.message for p in report.errors if p.file == "test.json"}
    assert "not an input" in messages["cases[0].inputs.W"]
    assert "file not found" in messages["cases[1].expected.Y"]
    assert "'Z' is not an output" in messages["cases[4].expected.Z"]
    assert "have shape [3, 5, 1], the manifest gives the output shape [3, 5]" in messages["cases[4].expected.Y"]
    assert "breaks the contract" in messages["cases[5]"] and "beta" in messages["cases[5]"]
    assert "no variant 'vec8'" in messages["cases[6].variants[0]"]
    assert messages["cases[7].variants[0]"].startswith("no variant 'scalr' (did you mean 'scalar'?) (the variants are")
    bench = {p.json_path: p.message for p in report.errors if p.file == "bench.json"}
    assert "'Q' is not an input" in bench["cases[0].inputs.Q"]
    assert report.coverage == []  # --no-gpu


def test_a_bad_bench_json_tolerance_is_reported_at_its_json_path_as_test_json_s(qg: Path) -> None:
    """bench.json's `tolerances` takes test.json's form: validate reports a bad one where it lies,
    in test.json's words; a good one is no problem."""
    edit_json(qg / "bench.json", lambda b: b.update(tolerances={"float32": {"rtol": -1}, "float17": {"atol": 1}}))
    edit_json(qg / "test.json", lambda t: t.update(tolerances={"float32": {"rtol": -1}, "float17": {"atol": 1}}))
    digests.write_metadata(qg)
    report = validate_package(qg, gpu=False)
    found = {f: {(p.json_path, p.message) for p in report.errors if p.file == f} for f in ("bench.json", "test.json")}
    assert {path for path, _ in found["bench.json"]} == {"tolerances.float32.rtol", "tolerances"}, found
    assert found["bench.json"] == found["test.json"]
    edit_json(qg / "bench.json", lambda b: b.update(tolerances={"float32": {"rtol": 1e-3, "atol": 0.5}}))
    edit_json(qg / "test.json", lambda t: t.pop("tolerances"))
    digests.write_metadata(qg)
    assert not [p for p in validate_package(qg, gpu=False).errors if p.file == "bench.json"]


# --- warnings and package-level problems --------------------------------------------------------------


def test_missing_metadata_is_an_error_and_missing_cases_warnings(qg: Path) -> None:
    for name in ("metadata.json", "bench.json"):
        (qg / name).unlink()
    edit_json(qg / "test.json", lambda t: t.update(cases=[c for c in t["cases"] if c["name"] == "tail-3x5-f32"]))
    report = validate_package(qg)
    assert ("error", "metadata.json", "") in where(report)
    assert "run `webgpu-kernels digest PATH`" in report.errors[0].message
    warnings = [p for p in report.warnings]
    assert any(p.file == "bench.json" and "no bench.json" in p.message for p in warnings)
    unexercised = {(p.variant, p.dtype) for p in warnings if "no test.json or bench.json case exercises" in p.message}
    assert unexercised == {("vec4", "float32"), ("vec4", "float16"), ("vec4_tail", "float16"), ("scalar", "float16")}
    assert len(report.errors) == 1


def test_a_type_variable_of_one_type_is_set_apart_in_the_unexercised_warning(tmp_path: Path) -> None:
    """demo.ArgMax's output type I has one type (`"I": ["int64"]`): "no case exercises variant
    'workgroup' with T=float16, I=int64" read as if a case with another I were wanted. The label
    (the coverage row, the warning's dtype) stays `T=float16, I=int64`, as `test` labels its runs;
    the message sets I apart as the one type its constraint lists."""
    argmax = tmp_path / "argmax"
    shutil.copytree(Path(__file__).parent / "packages" / "demo.ArgMax", argmax)
    edit_json(argmax / "test.json", lambda t: t.update(cases=[c for c in t["cases"]
                                                              if c.get("types") != {"T": "float16"}]))
    edit_json(argmax / "bench.json", lambda b: [c.update(types={"T": ["float32"]}) for c in b["cases"]])
    digests.write_metadata(argmax)
    report = validate_package(argmax)
    warned = {(p.variant, p.dtype): p.message for p in report.warnings
              if "no test.json or bench.json case exercises" in p.message}  # fmt: skip
    assert set(warned) == {("workgroup", "T=float16, I=int64"), ("strided", "T=float16, I=int64")}, warned
    assert warned[("strided", "T=float16, I=int64")] == (
        "no test.json or bench.json case exercises variant 'strided' with T=float16 (and I=int64, the one type its "
        "constraint lists): it was not compiled")  # fmt: skip
    assert {c.dtype for c in report.coverage} == {"T=float32, I=int64", "T=float16, I=int64"}


def test_a_metadata_json_folder_is_reported_as_such_not_as_missing(qg: Path, runner: CliRunner) -> None:
    """validate said "the package has no metadata.json" for a folder of that name (Path.is_file is
    False for both), as if the package were simply unsigned."""
    (qg / "metadata.json").unlink()
    (qg / "metadata.json").mkdir()
    report = validate_package(qg)
    metadata = [p.message for p in report.errors if p.file == "metadata.json"]
    assert len(metadata) == 1 and "metadata.json is not a regular file (a folder)" in metadata[0], metadata
    assert not any("has no metadata.json" in p.message for p in report.problems)
    result = runner.invoke(main, ["validate", str(qg), "--no-gpu"])
    assert result.exit_code == 1 and "is not a regular file (a folder)" in result.output, result.output
    assert "no metadata.json" not in result.output


def test_metadata_naming_another_op(qg: Path) -> None:
    edit_json(qg / "metadata.json", lambda m: m.update(id="com.example.Other"))
    report = validate_package(qg)
    assert [(p.file, p.json_path) for p in report.errors] == [("metadata.json", "id")]
    assert "com.example.Other" in report.errors[0].message


def test_not_a_package(tmp_path: Path, runner: CliRunner) -> None:
    result = runner.invoke(main, ["validate", str(tmp_path)])
    assert result.exit_code == 1 and "no manifest.json" in result.stdout
    result = runner.invoke(main, ["validate", "com.example.Nothing"])
    assert result.exit_code == 2 and "neither a package folder nor an embedded kernel" in result.stderr
    # a Hub repository is read as every command reads it, and validate says how to get its folder
    # (with the pin as download takes it: the hint had left out the --version download requires)
    for ref, fetch in [("@v2", "--version 2"), ("", "--version 1"), ("@dev", "--revision dev"), ("@v²", "--revision v²")]:
        result = runner.invoke(main, ["validate", f"webgpu-kernels/com.example.Nothing{ref}"])
        assert result.exit_code == 2 and f"download webgpu-kernels/com.example.Nothing {fetch}`" in result.stderr


def test_schema_errors_stop_the_manifest_stages_only(qg: Path) -> None:
    edit_json(qg / "manifest.json", lambda m: (m.pop("outputs"), m["variants"][0].update(priority="high")))
    edit_json(qg / "test.json", lambda t: t["cases"][0].update(name=""))
    report = validate_package(qg)
    paths = {(p.file, p.json_path) for p in report.errors}
    assert ("manifest.json", "") in paths or ("manifest.json", "(root)") in paths or any(
        f == "manifest.json" and "outputs" in p.message for f, _ in paths for p in report.errors)
    assert ("manifest.json", "variants[0].priority") in paths
    assert ("test.json", "cases[0].name") in paths
    assert report.op_id is None and report.coverage == []


# --- isolation --------------------------------------------------------------------------------------


def test_isolated_validation(qg: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    report = validate_package_isolated(qg, timeout=120)
    assert report.isolated and report.ok and package_problems(report.problems) == []
    assert {c.status for c in report.coverage} == {"compiled"}
    monkeypatch.setenv(CRASH_HOOK_ENV, "specials-f16")
    crashed = validate_package_isolated(qg, timeout=120)
    assert not crashed.ok
    (problem,) = crashed.problems
    assert "the validation process exit status 70 while compiling variant" in problem.message
    assert "for case 'specials-f16'" in problem.message and problem.dtype == "float16"


def test_cli_validate_isolated_crash(qg: Path, runner: CliRunner, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(CRASH_HOOK_ENV, "vec4-2x64-f32")
    result = runner.invoke(main, ["validate", "--isolate", str(qg)])
    assert result.exit_code == 1
    assert "exit status 70 while compiling variant 'vec4' (float32) for case 'vec4-2x64-f32'" in result.stdout


def test_cli_validate_timeout_runs_isolated_and_says_it_timed_out(qg: Path, runner: CliRunner,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    """--timeout without --isolate had been ignored; an isolated timeout read as SIGKILL. The child
    stalls at its first case (STALL_HOOK_ENV): the whole run had taken less than 1 s on a fast machine
    (a fresh clone's run), and the test failed."""
    from webgpu_kernels.package_tests import STALL_HOOK_ENV

    monkeypatch.setenv(STALL_HOOK_ENV, "1")
    result = runner.invoke(main, ["validate", str(qg), "--timeout", "1"])
    assert result.exit_code == 1, result.output
    assert "the validation process ran past its 1 s timeout (--timeout) and was stopped" in " ".join(result.stdout.split())
    refused = runner.invoke(main, ["validate", str(qg), "--timeout", "5", "--no-isolate"])
    assert refused.exit_code == 2 and "--timeout needs the child process" in refused.output


@pytest.mark.parametrize("args, fragment", [
    (["--adapter", "no-such-adapter", "validate"], "no adapter matches 'no-such-adapter'"),
    (["validate", "@manifest"], "a file, not a package folder"),
    (["validate", "./no-such-folder"], "./no-such-folder: no such folder"),  # `validate no-such-folder` was 2 already
    (["--adapter", "no-such-adapter", "test", "--isolate"], "no adapter matches 'no-such-adapter'"),
    (["test", "com.microsoft.NoSuchOp"], "com.microsoft.NoSuchOp"),
    (["test", "./no-such-folder"], "./no-such-folder: no such folder"),
])  # fmt: skip
def test_the_callers_mistakes_exit_2_not_invalid(qg: Path, runner: CliRunner, args, fragment) -> None:
    """A mistyped --adapter, or manifest.json named instead of its folder, read as "INVALID" (exit 1)
    with "not checked (no GPU adapter)"; exit status 1 is for packages that are invalid. `test` gave
    1 (FAILED) for an unknown kernel, and for a mistyped --adapter in a child process."""
    args = [a if a != "@manifest" else str(qg / "manifest.json") for a in args]
    if args[-1] in ("validate", "--isolate"):
        args.append(str(qg))
    result = runner.invoke(main, args)
    assert result.exit_code == 2 and fragment in result.output and "INVALID" not in result.output, result.output


def test_a_case_over_the_adapters_limits_is_a_warning(device) -> None:
    """demo.Gather's f32 CLIP table (151,781,376 bytes) passes a 2 GB binding limit and not
    lavapipe's 128 MiB: validate says a call would be refused here, as a warning (the adapter's
    limit, not the package's fault), naming the case and the binding."""
    from conftest import PACKAGES_DIR

    report = validate_package(PACKAGES_DIR / "demo.Gather")
    refused = [p for p in report.warnings if "is refused on this adapter" in p.message]
    table = 49408 * 768 * 4
    if device.limits["max-storage-buffer-binding-size"] >= table:
        assert refused == []
    else:
        assert refused and all(p.file == "bench.json" and "argument 'data'" in p.message for p in refused)
        assert {p.case for p in refused} == {"clip-token-embedding-1x77", "clip-token-embedding-2x77-i32"}
    assert report.ok


def _add_bench_only_variant(qg: Path, body: str) -> None:
    """A variant 'big' of QuickGelu whose `when` holds only for bench.json's large shapes, its
    shader's body ``body``; the package's digests written again."""
    (qg / "zeros.wgsl.jinja").write_text(
        "{{ enables }}\n{{ declarations }}\n@compute @workgroup_size({{ workgroupSize }})\n"
        "fn {{ entryPoint }}({{ entryParams }}) {\n  let i = {{ globalIndex }};\n" + body + "}\n", encoding="utf-8")

    def add_variant(manifest: dict) -> None:
        manifest["variants"].insert(0, {
            "id": "big", "priority": 30, "when": ["baseOk", "numel(shapes.X) >= 100000"],
            "constants": {"scalar": "dtypes.T"},
            "passes": [{"id": "main", "name": "QuickGelu.big", "shader": "zeros.wgsl.jinja", "bindings": "scalarTail",
                        "dispatch": {"threads": "numel(shapes.X)", "workgroupSize": "tunables.WORKGROUP_SIZE"}}],
        })  # fmt: skip

    edit_json(qg / "manifest.json", add_variant)
    digests.write_metadata(qg)


def test_a_variant_only_bench_cases_exercise_is_a_warning(qg: Path) -> None:
    """A variant whose `when` holds only for bench.json's shapes was compiled ("compiled", no warning)
    and never run by `test`: a wrong one passed both, and calls of those shapes select it."""
    _add_bench_only_variant(qg, "  if (i >= params.count) {\n    return;\n  }\n  y[i] = {{ scalar }}(0.0);\n")
    report = validate_package(qg)
    flagged = {(p.severity, p.variant, p.dtype, p.json_path) for p in package_problems(report.problems)}
    assert flagged == {("warning", "big", "float32", "variants[0]"), ("warning", "big", "float16", "variants[0]")}
    assert all("no test.json case checks its results" in p.message for p in package_problems(report.problems))
    assert report.ok  # a warning: a package may ship a variant its tests do not reach


def test_a_bench_only_variant_that_does_not_compile_is_not_said_to_compile(qg: Path) -> None:
    """The bench-only warning said "it compiles" of a variant x dtype whose WGSL failed (its table
    status "failed", its compile error just above)."""
    _add_bench_only_variant(qg, "  y[i] = no_such_name;\n")
    report = validate_package(qg)
    assert {c.status for c in report.coverage if c.variant == "big"} == {"failed"}
    bench_only = [p for p in report.warnings if p.variant == "big" and "only bench.json cases" in p.message]
    assert bench_only and all("it compiles" not in p.message for p in bench_only), bench_only


def test_a_variant_binding_a_tensor_the_call_lacks_is_one_error_not_a_crash(qg: Path) -> None:
    """A variant whose `when` forgot to require an optional input crashed the GPU stage with
    "KeyError: 'Z'" and hid every other problem; `test` and calls already said it plainly."""
    def add_optional_input(manifest: dict) -> None:
        manifest["inputs"].append({"role": "Z", "dtype": "T", "optional": True})
        manifest["args"]["Z"] = {"kind": "tensor", "semantic": "Z", "role": "input"}
        manifest["bindingSets"]["withZ"] = [*manifest["bindingSets"]["scalarTail"], {
            "name": "z", "arg": "Z", "buffer": {"type": "read-only-storage"}, "elementType": "$scalar"}]
        variant = json.loads(json.dumps(manifest["variants"][2]))
        variant.update(id="zed", priority=99)  # its `when` does not ask for 'Z' in shapes
        variant["passes"][0]["bindings"] = "withZ"
        manifest["variants"].insert(0, variant)

    edit_json(qg / "manifest.json", add_optional_input)
    digests.write_metadata(qg)
    report = validate_package(qg, progress=None)
    (problem,) = [p for p in report.errors if p.variant == "zed"]
    assert problem.json_path == "variants[0]" and "accepts calls that have no tensor 'Z' but binds it" in problem.message
    assert "`'Z' in shapes`" in problem.message and "and " in problem.message  # the cases, a few named
    assert not any("failed unexpectedly" in p.message for p in report.problems)


def test_a_variant_that_accepts_an_optional_input_it_never_binds_is_warned_of(qg: Path) -> None:
    """A variant whose `when` forgot to refuse an optional input it does not bind (a SkipLayerNormalization
    `_nobeta` variant without `'beta' not in shapes`) returned results computed without it, and
    validate --strict passed the package."""
    def add_optional_input(manifest: dict) -> None:
        manifest["inputs"].append({"role": "Z", "dtype": "T", "optional": True})
        manifest["args"]["Z"] = {"kind": "tensor", "semantic": "Z", "role": "input"}

    def give_z(tests: dict) -> None:
        case = next(c for c in tests["cases"] if "expected" in c and c["types"] == {"T": "float32"})
        case["inputs"]["Z"] = {"shape": [1], "values": [0.0]}

    edit_json(qg / "manifest.json", add_optional_input)
    edit_json(qg / "test.json", give_z)
    digests.write_metadata(qg)
    report = validate_package(qg, progress=None)
    flagged = [p for p in report.warnings if "optional input 'Z'" in p.message]
    assert flagged and all(p.json_path.startswith("variants[") and p.variant for p in flagged)
    assert all("binds it nowhere" in p.message and "`'Z' not in shapes`" in p.message for p in flagged)
    assert report.ok  # a warning: ignoring it may be the package's intent


def test_a_derive_entry_refusing_an_optional_input_leaves_nothing_ignored(qg: Path) -> None:
    """docs/format.md: "unless its `when` refuses such calls (`"'B' not in shapes"`, in the clause or in a
    `derive` entry the clause reads: either way the variant accepts no call giving it, so nothing is
    ignored)" (the com.microsoft.MultiHeadAttention author's question: its `noKeyPaddingMask`)."""
    def refuse_optional_input(manifest: dict) -> None:
        manifest["inputs"].append({"role": "Z", "dtype": "T", "optional": True})
        manifest["derive"]["noZ"] = "'Z' not in shapes"
        for variant in manifest["variants"]:
            variant["when"].append("noZ")

    def give_z(tests: dict) -> None:
        case = next(c for c in tests["cases"] if "expected" in c and c["types"] == {"T": "float32"})
        refused = {k: v for k, v in case.items() if k not in ("expected", "name")}
        refused["inputs"] = {**case["inputs"], "Z": {"shape": [1], "values": [0.0]}}
        tests["cases"].append({"name": "z-refused", **refused, "refused": {"error": "SelectionError", "message": "noZ=False"}})

    edit_json(qg / "manifest.json", refuse_optional_input)
    edit_json(qg / "test.json", give_z)
    digests.write_metadata(qg)
    report = validate_package(qg, progress=None)
    assert report.ok and not [p for p in report.problems if "'Z'" in p.message], [p.message for p in report.problems]
    assert report.checked["refusedCases"] >= 1


def test_a_when_clause_reading_an_optional_inputs_shape_acknowledges_ignoring_it(qg: Path) -> None:
    """A variant meant to ignore an optional input when it is empty (ONNX ReduceMean-18's copy for an
    empty `axes`) could silence "binds it nowhere" only by binding the input unread: a clause of its
    own `when` that reads the input's shape (`numel(shapes.Z) == 0`) now says it saw the input.
    A shared derive entry reading it says nothing of a variant (every variant reads those), and a
    variant without such a clause is still warned of."""
    def add_optional_input(manifest: dict) -> None:
        manifest["inputs"].append({"role": "Z", "dtype": "T", "optional": True})
        manifest["derive"]["zSeen"] = "'Z' not in shapes or ranks.Z >= 0"
        empty = json.loads(json.dumps(manifest["variants"][2]))  # scalar's copy
        empty.update(id="empty_z", priority=99)
        empty["when"] = [*empty["when"], "'Z' in shapes", "numel(shapes.Z) == 0"]
        manifest["variants"].insert(0, empty)
        for variant in manifest["variants"][1:]:
            variant["when"].append("zSeen")  # reads shapes.Z through a derive entry: no acknowledgment

    def give_empty_z(tests: dict) -> None:
        case = next(c for c in tests["cases"] if "expected" in c and c["types"] == {"T": "float32"})
        case["inputs"]["Z"] = {"shape": [0], "values": []}

    edit_json(qg / "manifest.json", add_optional_input)
    edit_json(qg / "test.json", give_empty_z)
    digests.write_metadata(qg)
    report = validate_package(qg, progress=None)
    flagged = {p.variant for p in report.warnings if "optional input 'Z'" in p.message}
    assert report.ok and flagged == {"vec4", "vec4_tail", "scalar"} - {None}, [p.message for p in report.problems]
    assert "empty_z" in {c.variant for c in report.coverage if c.status == "compiled"}


@pytest.mark.parametrize("index_types", [["int64"], ["int32", "int64"]])
def test_calls_without_an_optional_input_cover_its_type_variable(qg: Path, index_types) -> None:
    """An optional input with a type variable of its own (ONNX ReduceX-18's int64 `axes`, I): a
    call without it binds no I, and its coverage row was "float32" beside the rows the constraints
    make ("T=float32, I=int64"), which no case could reach: validate --strict failed on every
    variant that refuses the input. A call without it runs the variant whatever I would be, so it
    counts for each such row."""
    def add_optional_input(manifest: dict) -> None:
        manifest["inputs"].append({"role": "Z", "dtype": "I", "rank": 1, "optional": True})
        manifest["typeConstraints"]["I"] = index_types
        for variant in manifest["variants"]:
            variant["when"].append("'Z' not in shapes")

    edit_json(qg / "manifest.json", add_optional_input)
    digests.write_metadata(qg)
    report = validate_package(qg, progress=None)
    assert report.ok and package_problems(report.warnings) == [], [p.message for p in report.problems]
    rows = {(c.variant, c.dtype): c for c in report.coverage}
    want = {f"T={t}, I={i}" for t in ("float32", "float16") for i in index_types}
    assert {d for _, d in rows} == want  # no row of the calls' own "float32"
    assert all(c.status == "compiled" and c.cases > 0 and c.pipelines > 0 for c in rows.values())
    # each row has the counts of the calls it was given (the same calls for each I)
    for vid in {v for v, _ in rows}:
        assert len({(rows[(vid, d)].cases, rows[(vid, d)].pipelines) for d in want if d.startswith("T=float32")}) == 1


def test_a_field_value_out_of_range_is_one_error_per_variant_and_dtype_naming_its_expression(qg: Path) -> None:
    """A uniform field's value out of its type's range is the manifest's mistake, made in every case:
    validate repeated it once per case and variant (26 errors for one expression), and
    named the field but not the expression that made the value."""
    def shrink_count(manifest: dict) -> None:
        manifest["bindingSets"]["scalarTail"][2]["struct"]["fields"][0]["value"] = "numel(shapes.X) - 1000000"

    edit_json(qg / "manifest.json", shrink_count)
    digests.write_metadata(qg)
    report = validate_package(qg, progress=None)
    unresolved = [p for p in report.errors if "cannot resolve the variant" in p.message]
    assert unresolved
    per_variant_dtype = [(p.variant, p.dtype) for p in unresolved]
    assert len(per_variant_dtype) == len(set(per_variant_dtype)), [p.message for p in unresolved]
    assert all("(the value of 'numel(shapes.X) - 1000000')" in p.message for p in unresolved)
    assert any(" more cases: " in p.message for p in unresolved)  # the others are counted, a few named

    # cases that fail there for other reasons are not counted under the first one's
    def two_reasons(manifest: dict) -> None:
        manifest["bindingSets"]["scalarTail"][2]["struct"]["fields"][0]["value"] = \
            "dim(shapes.X, -2) * 0 + 1 // (numel(shapes.X) - 15)"

    edit_json(qg / "manifest.json", two_reasons)
    digests.write_metadata(qg)
    messages = [p.message for p in validate_package(qg, progress=None).errors
                if p.variant == "scalar" and p.dtype == "float32" and "cannot resolve the variant" in p.message]
    assert any("out of range" in m for m in messages) and any("ZeroDivisionError" in m for m in messages), messages


def test_a_case_naming_a_variant_that_rejects_it_is_an_error(qg: Path, runner: CliRunner) -> None:
    """`test` fails a case whose `variants` names a variant its `when` rejects, and validate said
    "valid" (the variant counted as merely not exercised)."""
    edit_json(qg / "test.json", lambda t: t["cases"][4].update(variants=["vec4"]))  # tail-3x5-f32: 15 elements
    digests.write_metadata(qg)
    report = validate_package(qg)
    (problem,) = [p for p in report.errors]
    assert (problem.file, problem.json_path) == ("test.json", "cases[4].variants[0]")
    assert "names variant 'vec4', which rejects case 'tail-3x5-f32' (float32): when[" in problem.message


# --- a variant meant for one dtype, and the case saying so ----------------------------------------

HALF_REFUSAL = {
    "name": "half-forced-on-f32", "description": "half is float16 only.", "variants": ["half"],
    "types": {"T": "float32"}, "inputs": {"X": {"shape": [2, 8], "generate": {"distribution": "normal", "seed": 7}}},
    "refused": {"error": "VariantRejectedError", "message": "\"dtypes.T == 'f16'\" is false"},
}  # fmt: skip
HALF_REFUSED_STATUS = "refused, as test.json expects (case half-forced-on-f32)"


def _add_f16_only_variant(qg: Path, refusal: dict | None) -> None:
    """QuickGelu with 'half', its scalar variant for float16 only, and ``refusal`` (a test.json case) appended."""
    def add_variant(manifest: dict) -> None:
        scalar = next(v for v in manifest["variants"] if v["id"] == "scalar")
        manifest["variants"].append({**copy.deepcopy(scalar), "id": "half", "when": ["baseOk", "dtypes.T == 'f16'"]})

    edit_json(qg / "manifest.json", add_variant)
    if refusal is not None:
        edit_json(qg / "test.json", lambda t: t["cases"].append(refusal))
    digests.write_metadata(qg)


def test_a_one_dtype_variant_a_case_forces_and_expects_refused_is_no_warning(qg: Path, runner: CliRunner,
                                                                             tmp_path: Path) -> None:  # fmt: skip
    """A float16-only variant could not pass --strict: "no test.json or bench.json case exercises
    variant 'vec8' with float32" though a case forced it on float32 and expected its refusal
    (demo.BiasSplitGelu accepted empty float32 calls to get by). That case now says the refusal is meant."""
    _add_f16_only_variant(qg, HALF_REFUSAL)
    report = validate_package(qg)
    status = {(c.variant, c.dtype): c.status for c in report.coverage}
    assert status[("half", "float32")] == HALF_REFUSED_STATUS and status[("half", "float16")] == "compiled"
    assert not [p for p in report.problems if p.variant == "half"], report.problems
    assert report.uncompiled == 0  # nothing left unchecked: the verdict has no "not compiled" caveat
    text = runner.invoke(main, ["validate", str(qg), "--strict"])
    assert text.exit_code == 0 and HALF_REFUSED_STATUS in text.output and "not compiled" not in text.output, text.output
    as_json = runner.invoke(main, ["validate", str(qg), "--strict", "--json"])
    data = json.loads(as_json.stdout)
    assert as_json.exit_code == 0 and data["passed"] is True and data["uncompiled"] == 0, as_json.output
    (row,) = [c for c in data["coverage"] if (c["variant"], c["dtype"]) == ("half", "float32")]
    assert row["status"] == HALF_REFUSED_STATUS and row["expectedRefusal"] == "half-forced-on-f32"
    isolated = validate_package_isolated(qg)  # the child's report comes back through JSON
    assert {(c.variant, c.dtype): c.status for c in isolated.coverage}[("half", "float32")] == HALF_REFUSED_STATUS
    import xml.etree.ElementTree as ET

    xml_path = tmp_path / "strict.xml"
    junit = runner.invoke(main, ["validate", str(qg), "--strict", "--junit", str(xml_path)])
    assert junit.exit_code == 0, junit.output
    (case,) = ET.parse(xml_path).getroot().findall(".//testcase[@name='compile half [float32]']")
    assert [child.tag for child in case] == ["system-out"]  # a pass: the refusal is what the package means
    assert case.find("system-out").text == f"0 cases, 0 pipelines: {HALF_REFUSED_STATUS}"


@pytest.mark.parametrize("refusal", [
    None,
    {**HALF_REFUSAL, "refused": {"error": "SelectionError", "message": "\"dtypes.T == 'f16'\" is false"}},
    {**HALF_REFUSAL, "refused": {"error": "VariantRejectedError", "message": "'baseOk' is false"}},
    {**HALF_REFUSAL, "variants": ["vec4"], "inputs": {"X": {"shape": [5], "generate": {"distribution": "normal", "seed": 7}}},
     "refused": {"error": "VariantRejectedError", "message": "'vec4Ok' is false"}},
], ids=["no-case", "selection-error", "another-message", "another-variant"])  # fmt: skip
def test_a_one_dtype_variant_without_a_case_expecting_its_refusal_is_still_a_warning(qg: Path, runner: CliRunner,
                                                                                     refusal) -> None:  # fmt: skip
    """Only a VariantRejectedError of the variant's own `when`, which the case expects of it, says
    the refusal is meant: a SelectionError says nothing of which variant refused, a message the
    refusal does not contain fails `test`, and a case forcing another variant is about that one."""
    _add_f16_only_variant(qg, refusal)
    report = validate_package(qg)
    status = {(c.variant, c.dtype): c.status for c in report.coverage}[("half", "float32")]
    warned = [p for p in report.warnings if p.variant == "half"]
    assert status == "not exercised"
    assert [(p.dtype, p.message) for p in warned] == [("float32", "no test.json or bench.json case exercises variant "
                                                                  "'half' with float32: it was not compiled")]  # fmt: skip
    strict = runner.invoke(main, ["validate", str(qg), "--strict"])
    assert strict.exit_code == 1 and "INVALID (--strict: warnings fail)" in strict.output, strict.output


def test_a_forced_refusal_of_the_shapes_not_the_dtype_leaves_the_warning(qg: Path) -> None:
    """A case forcing a variant on float32 and expecting the refusal of a shape clause (as
    BiasSplitGelu's vec4-forced-on-d5-f32 does) marked the variant x float32 "refused, as test.json
    expects", though the variant takes float32 calls of other shapes, which nothing compiled."""
    def add_variant(manifest: dict) -> None:
        scalar = next(v for v in manifest["variants"] if v["id"] == "scalar")
        manifest["variants"].append({**copy.deepcopy(scalar), "id": "big", "when": ["baseOk", "numel(shapes.X) >= 100000000"]})

    edit_json(qg / "manifest.json", add_variant)
    refusal = {**HALF_REFUSAL, "name": "big-forced-on-f32", "variants": ["big"],
               "refused": {"error": "VariantRejectedError", "message": "'numel(shapes.X) >= 100000000' is false"}}  # fmt: skip
    edit_json(qg / "test.json", lambda t: t["cases"].append(refusal))
    digests.write_metadata(qg)
    report = validate_package(qg)
    status = {(c.variant, c.dtype): c.status for c in report.coverage}
    assert status[("big", "float32")] == "not exercised"
    warned = [(p.dtype, p.message) for p in report.warnings if p.variant == "big"]
    assert ("float32", "no test.json or bench.json case exercises variant 'big' with float32: it was not compiled") in warned


def test_not_checked_says_the_manifest_is_the_reason(qg: Path, runner: CliRunner) -> None:
    """An invalid manifest left validate saying "not checked (no GPU adapter)" on a machine with one."""
    edit_json(qg / "manifest.json", lambda m: m["variants"][0].update(priority="high"))
    digests.write_metadata(qg)
    out = runner.invoke(main, ["validate", str(qg)]).stdout
    assert "not checked (the manifest did not load)" in out and "no GPU adapter" not in out


def test_stages_skipped_for_an_expression_error_say_so(qg: Path, runner: CliRunner) -> None:
    """With an expression error, the GPU stage and the per-case selection checks did not run, and
    the report did not say so: the other problems surfaced only once that error was fixed."""
    edit_json(qg / "manifest.json", lambda m: m["derive"].update(vec4Ok="numel(shapes.X) % fuor == 0"))
    digests.write_metadata(qg)
    report = validate_package(qg)
    assert report.skipped and "expressions have errors" in report.skipped
    assert validate_package_isolated(qg).skipped == report.skipped  # survives the child process
    out = runner.invoke(main, ["validate", str(qg)]).stdout
    assert "not checked (the manifest's expressions have errors" in out
    assert validate_package(embedded_root() / QUICK_GELU, gpu=False).skipped is None


def test_an_output_no_case_checks_is_a_warning(tmp_path: Path) -> None:
    """`test` compares only the outputs a case lists under `expected`: an output no case lists was
    never checked, and validate said nothing."""
    import shutil

    from conftest import PACKAGES_DIR

    root = Path(shutil.copytree(PACKAGES_DIR / "demo.LayerNorm", tmp_path / "ln"))
    edit_json(root / "test.json", lambda t: [c["expected"].pop("InvStdDev", None) for c in t["cases"]])
    digests.write_metadata(root)
    report = validate_package(root, gpu=False)
    (problem,) = [p for p in report.problems if "InvStdDev" in p.message]
    assert problem.severity == "warning" and (problem.file, problem.json_path) == ("test.json", "cases")
    assert "no case lists output 'InvStdDev' under `expected`" in problem.message
    assert not [p for p in validate_package(PACKAGES_DIR / "demo.LayerNorm", gpu=False).problems if "no case lists" in p.message]


def test_an_inline_integer_input_the_dtype_cannot_hold_is_a_warning(tmp_path: Path) -> None:
    """An inline integer input outside its dtype's range is clipped, silently: a wrap-around case
    writing 2147483648 into an int32 input ran with 2147483647. An expected value of
    that kind was already an error; the input is a warning at its JSON path."""
    import shutil

    from conftest import PACKAGES_DIR

    root = Path(shutil.copytree(PACKAGES_DIR / "demo.Gather", tmp_path / "gather"))

    def widen(t: dict) -> None:
        case = t["cases"][0]
        case["types"]["Tind"] = "int32"
        case["inputs"]["indices"]["values"] = [[0, 9, -1], [-10, 3, 2147483648]]

    edit_json(root / "test.json", widen)
    digests.write_metadata(root)
    report = validate_package(root, gpu=False)
    (problem,) = [p for p in report.problems if "outside int32's range" in p.message]
    assert (problem.severity, problem.json_path) == ("warning", "cases[0].inputs.indices.values"), problem
    assert "2147483648" in problem.message and "clipped" in problem.message
    assert not [p for p in validate_package(PACKAGES_DIR / "demo.Gather", gpu=False).problems if "range" in p.message]


def test_a_case_expecting_an_optional_output_a_variant_leaves_out_is_an_error(write_package, runner: CliRunner) -> None:
    """validate said valid, then `test` failed the case on every variant that does not produce the
    optional output it expects ("the kernel returned no output 'Z'"). Pinning the case
    to the variants that produce it makes it valid; `test` then passes."""
    root = optional_output_package(write_package, [("withz", 10, True), ("noz", 1, False)])
    x = [1.0, -2.0, 3.5, 0.25]
    case = {"name": "both", "inputs": {"X": {"shape": [4], "values": x}},
            "expected": {"Y": {"shape": [4], "values": x}, "Z": {"shape": [4], "values": [2 * v for v in x]}}}  # fmt: skip
    (root / "test.json").write_text(json.dumps({"cases": [case]}), encoding="utf-8")
    digests.write_metadata(root)
    problems = [p for p in validate_package(root).problems if p.severity == "error"]
    assert [(p.file, p.json_path, p.variant) for p in problems] == [("test.json", "cases[0].expected", "noz")]
    assert "expects optional output 'Z', which variant 'noz' (it accepts the case) does not produce" in problems[0].message
    assert runner.invoke(main, ["test", str(root)]).exit_code == 1  # as validate said
    misspelt = {**case, "expected": {"Y": case["expected"]["Y"], "Zz": case["expected"]["Z"]}}
    (root / "test.json").write_text(json.dumps({"cases": [misspelt]}), encoding="utf-8")
    digests.write_metadata(root)
    problems = [p for p in validate_package(root).problems if p.severity == "error"]
    assert [p.json_path for p in problems] == ["cases[0].expected.Zz"]  # no output: one error, not one per variant
    case["variants"] = ["withz"]
    (root / "test.json").write_text(json.dumps({"cases": [case]}), encoding="utf-8")
    digests.write_metadata(root)
    assert not [p for p in validate_package(root).problems if p.severity == "error"]
    assert runner.invoke(main, ["test", str(root)]).exit_code == 0


@pytest.mark.parametrize("edit, fragment", [
    (lambda o: o.update(shape="shapes.X[:-1] + [1]"), "write `shapes.X[:-1] + (1,)`"),
    (lambda o: o.update(rank=5), "the manifest's rank says 5 (at outputs[0].rank: one of the two is wrong)"),
], ids=["tuple-plus-list", "rank"])  # fmt: skip
def test_an_output_shape_error_is_one_error_per_dtype_with_its_fix(qg: Path, edit, fragment) -> None:
    """An output shape every case fails on was one error per case (24 for an author's package), each
    variant then warned "not exercised", and `shapes.X[:-1] + [1]` said only Python's "can only
    concatenate tuple (not "list") to tuple"."""
    edit_json(qg / "manifest.json", lambda m: edit(m["outputs"][0]))
    digests.write_metadata(qg)
    report = validate_package(qg)
    errors = [p for p in report.problems if p.severity == "error"]
    assert {p.json_path for p in errors} == {"outputs[0].shape"} and len(errors) == 2  # float32, float16
    assert all(fragment in p.message and "more cases" in p.message for p in errors), errors
    assert not [p for p in report.problems if "exercises variant" in p.message]
    assert {c.status for c in report.coverage} == {"not reached (scope error)"}


def test_a_scope_error_of_some_cases_leaves_the_other_warnings(qg: Path) -> None:
    """One case's scope error marked every case-less variant of its dtype 'not reached' and dropped
    its 'not exercised' warning, though the dtype's other cases were judged."""
    def edit(m):
        m["outputs"][0]["shape"] = "shapes.X if numel(shapes.X) != 4096 else (1, 2, 3)"  # the 4096 case fails
        m["variants"].append({**copy.deepcopy(m["variants"][-1]), "id": "never", "when": ["false"]})

    edit_json(qg / "manifest.json", edit)
    digests.write_metadata(qg)
    report = validate_package(qg)
    assert [p.json_path for p in report.problems if p.severity == "error"] == ["outputs[0].shape"] * 2  # f32, f16
    unexercised = [p for p in report.problems if "exercises variant 'never'" in p.message]
    assert {p.dtype for p in unexercised} == {"float32", "float16"}
    assert {c.status for c in report.coverage if c.variant == "never"} == {"not exercised"}


def test_a_test_case_no_variant_accepts_says_what_the_clauses_read(qg: Path) -> None:
    """validate's "no variant accepts" showed `baseOk=False` alone, where `test` and `explain` show
    what baseOk was made of."""
    edit_json(qg / "manifest.json", lambda m: m["tunables"].update(WORKGROUP_SIZE=4096))  # over every device's cap
    digests.write_metadata(qg)
    report = validate_package(qg)
    refused = [p for p in report.errors if "no variant accepts case 'vec4-2x64-f32'" in p.message]
    assert refused and "tunables.WORKGROUP_SIZE=4096" in refused[0].message, refused


def test_a_case_an_input_rank_expression_refuses_is_an_error_without_the_gpu(tmp_path: Path) -> None:
    """demo.Gather's data rank is `max(ranks.data, 1)`: a rank-0 `data` in test.json or bench.json
    was `valid` under --no-gpu (the output-shape check swallowed the RankError), and the GPU stage
    blamed manifest.json at path "" instead of the case."""
    import shutil

    from conftest import PACKAGES_DIR

    root = Path(shutil.copytree(PACKAGES_DIR / "demo.Gather", tmp_path / "gather"))

    def rank0_test(t: dict) -> None:
        t["cases"][0]["inputs"]["data"] = {"shape": [], "values": 1.5}
        t["cases"][0]["expected"] = {"Y": {"shape": [1], "values": [1.5]}}

    edit_json(root / "test.json", rank0_test)
    edit_json(root / "bench.json", lambda b: b["cases"][0]["inputs"].update(data={"shape": []}))
    digests.write_metadata(root)
    report = validate_package(root, gpu=False)
    found = {(p.file, p.json_path) for p in report.problems if p.severity == "error" and "breaks the contract" in p.message}
    assert found == {("test.json", "cases[0]"), ("bench.json", "cases[0]")}, report.problems
    assert all("rank" in p.message for p in report.problems if "breaks the contract" in p.message)
    with_gpu = validate_package(root)
    assert not [p for p in with_gpu.problems if p.file == "manifest.json"], with_gpu.problems


def test_a_constant_named_like_a_template_name_is_a_warning(qg: Path) -> None:
    """A constant `bindings` was hidden from every template by the contract's own `bindings`, and a
    constant `range` hid the templates' one global: both silently."""
    def shadow(m: dict) -> None:
        m.setdefault("constants", {}).update(bindings="1", range="2")
        m["variants"][0]["passes"][0]["source"].setdefault("inputs", {})["declarations"] = "3"

    edit_json(qg / "manifest.json", shadow)
    digests.write_metadata(qg)
    warned = {p.json_path: p.message for p in validate_package(qg, gpu=False).warnings
              if "nothing reads" not in p.message}  # also true of `range`, at the same path  # fmt: skip
    # where each is reached: it had said "constants.bindings or inputs.bindings", and inputs has no constants
    assert warned["constants.bindings"].endswith("under this name (reach this value as constants.bindings)")
    assert warned["variants[0].passes[0].source.inputs.declarations"].endswith("(reach this value as inputs.declarations)")
    assert "hides `range`" in warned["constants.range"]
    assert not [p for p in validate_package(embedded_root() / QUICK_GELU, gpu=False).warnings
                if "template" in p.message]  # fmt: skip


def test_a_constant_shadowing_a_derive_entry_is_a_warning(qg: Path) -> None:
    """Only a shadowed entry an output shape read was warned about; a variant constant `vec4Ok: true`
    silently replaced the derive entry in the variant's when clauses (an author's trial)."""
    edit_json(qg / "manifest.json", lambda m: m["variants"][0]["constants"].update(vec4Ok=True))
    digests.write_metadata(qg)
    warned = {p.json_path: p.message for p in validate_package(qg, gpu=False).warnings}
    assert "shadows derive entry 'vec4Ok': the variant's when clauses" in warned["variants[0].constants.vec4Ok"]
    assert not [p for p in validate_package(embedded_root() / QUICK_GELU, gpu=False).warnings if "shadows" in p.message]


NOTHING_READS = "nothing reads"


def unused_warned(report) -> dict[str, str]:
    return {p.json_path: p.message for p in report.warnings if NOTHING_READS in p.message}


def test_a_derive_entry_or_constant_nothing_reads_is_a_warning(qg: Path, runner: CliRunner) -> None:
    """An author left a derive entry no clause read (a `rowLoopOk` meant for a `when`): validate
    said nothing, so the check it was written for silently never ran."""
    def add(m: dict) -> None:
        m["derive"].update(unusedOk="numel(shapes.X) > 0", half="numel(shapes.X) // 2", quarter="half // 2",
                           work="numel(shapes.X)")  # fmt: skip
        m.setdefault("constants", {}).update(spare="2")
        m["variants"][0]["constants"].update(leftOver="3")
        m["variants"][1]["passes"][0]["dispatch"]["threads"] = "max(ceilDiv(numel(shapes.X), 4), quarter * 0)"

    edit_json(qg / "manifest.json", add)
    edit_json(qg / "bench.json", lambda b: b.update(flops="4 * work"))  # read by bench.json's flops only
    digests.write_metadata(qg)
    report = validate_package(qg, gpu=False)
    warned = unused_warned(report)
    # half is read by quarter, quarter by a dispatch, work by bench.json's flops: not warned
    assert set(warned) == {"derive.unusedOk", "constants.spare", "variants[0].constants.leftOver"}, warned
    assert all(p.severity == "warning" for p in report.problems if NOTHING_READS in p.message)
    assert "derive entry 'unusedOk'" in warned["derive.unusedOk"]
    assert "variant 'vec4'" in warned["variants[0].constants.leftOver"]
    assert report.ok  # a warning: an unused entry is harmless
    strict = runner.invoke(main, ["validate", str(qg), "--no-gpu", "--strict"])
    assert strict.exit_code == 1 and "derive entry 'unusedOk'" in strict.stdout, strict.output



def test_a_derive_entry_read_by_bench_json_bytes_only_is_read(qg: Path) -> None:
    """bench.json's ``bytes`` reads top-level names as ``flops`` does: an entry only it names is used."""
    edit_json(qg / "manifest.json", lambda m: m["derive"].update(moved="2 * numel(shapes.X) * itemSize(dtypes.T)",
                                                                 spare="1"))  # fmt: skip
    edit_json(qg / "bench.json", lambda b: b.update(bytes="moved"))
    digests.write_metadata(qg)
    report = validate_package(qg, gpu=False)
    assert set(unused_warned(report)) == {"derive.spare"}, unused_warned(report)
    assert "nor bench.json's flops or bytes names it" in unused_warned(report)["derive.spare"]
    assert report.ok


@pytest.mark.parametrize(("value", "fragment"), [
    (-1, "-1"),  # the schema's minimum
    (2.5, "2.5"),  # no integer
    ("2 * numel(shapes.X) * itemSize(dtypes.T)", None),  # a good one
    ("numel(shapes.X) / 3", "a byte count must be a non-negative integer"),  # bench's words
    ("numel(shapes.Xx)", "Xx"),  # a misspelt name
    ("itemSize('f8')", "itemSize(): unknown dtype 'f8'"),
])  # fmt: skip
def test_validate_reports_a_bad_bench_json_bytes_at_its_path(qg: Path, value, fragment) -> None:
    """A ``bytes`` that is no count, or no count for some case, is an error at bench.json ``bytes``,
    said per case and dtype as ``flops`` is; a good one passes."""
    edit_json(qg / "bench.json", lambda b: b.update(bytes=value))
    digests.write_metadata(qg)
    report = validate_package(qg, gpu=False)
    problems = [p for p in report.errors if p.file == "bench.json" and p.json_path == "bytes"]
    if fragment is None:
        assert not problems and report.ok, report.problems
        return
    assert problems and all(fragment in p.message for p in problems), report.problems


@pytest.mark.parametrize(("key", "what", "advice"), [
    ("bytes", "TB/s", "count the bytes one call reads and writes"),
    ("flops", "TFLOP/s", "count the floating-point operations of one call, or leave flops out"),
])  # fmt: skip
def test_a_bench_json_count_of_zero_for_a_case_with_data_is_warned_of(qg: Path, key, what, advice) -> None:
    """A count of 0 is a count, but for a case whose tensors hold data it made bench report 0 TB/s
    (or TFLOP/s) without a word: a warning per case and dtype, at the count's path. The advice fits
    the count: a flops of 0 had been told to "count what one call moves"."""
    edit_json(qg / "bench.json", lambda b: b.update({key: "0 * numel(shapes.X)"}))
    digests.write_metadata(qg)
    report = validate_package(qg, gpu=False)
    warned = [p for p in report.warnings if p.file == "bench.json" and p.json_path == key]
    cases = json.loads((qg / "bench.json").read_text("utf-8"))["cases"]
    assert len(warned) >= len(cases), report.problems
    assert all(f"{key} is 0 for case " in p.message and f"bench would report 0 {what}; {advice}" in p.message
               for p in warned), warned  # fmt: skip
    assert report.ok


def test_an_entry_read_only_by_unused_entries_is_unused_too(qg: Path) -> None:
    """The warning was not transitive: `half` read only by an unused `quarter` was warned of only
    once `quarter` was removed, one validate run per link of the chain."""
    def add(m: dict) -> None:
        m["derive"].update(half="numel(shapes.X) // 2", quarter="half // 2", eighth="quarter // 2",
                           shared="numel(shapes.X) * 2", sharedUse="shared + 1")  # fmt: skip
        m.setdefault("constants", {}).update(base="3")
        m["variants"][0]["constants"].update(leftOver="base * 2", onlyForLeftOver="leftOver + 1")
        m["variants"][1]["passes"][0]["dispatch"]["threads"] = "max(ceilDiv(numel(shapes.X), 4), shared * 0)"

    edit_json(qg / "manifest.json", add)
    digests.write_metadata(qg)
    warned = unused_warned(validate_package(qg, gpu=False))
    # shared is read by a dispatch too (its unused reader sharedUse does not make it unused)
    assert set(warned) == {"derive.half", "derive.quarter", "derive.eighth", "derive.sharedUse", "constants.base",
                           "variants[0].constants.leftOver", "variants[0].constants.onlyForLeftOver"}, warned  # fmt: skip
    assert warned["derive.eighth"].startswith("nothing reads derive entry 'eighth': no expression")
    assert warned["derive.quarter"].startswith("nothing reads derive entry 'quarter' but unused entries: "
                                               "it is read only by derive entry 'eighth', itself unused")  # fmt: skip
    assert "read only by derive entry 'quarter', itself unused" in warned["derive.half"]
    assert "read only by constant 'leftOver' of variant 'vec4', itself unused" in warned["constants.base"]
    assert "read only by constant 'onlyForLeftOver' of variant 'vec4', itself unused" in \
        warned["variants[0].constants.leftOver"]
    assert warned["variants[0].constants.onlyForLeftOver"].startswith("nothing reads constant 'onlyForLeftOver' "
                                                                      "of variant 'vec4': no `when` clause")  # fmt: skip
    # A template that could read any entry: none of them is warned of, nor what they read
    template = qg / "quick-gelu.wgsl.jinja"
    template.write_text(template.read_text("utf-8") + "{% for name, value in constants.items() %}// {{ name }}\n"
                        "{% endfor %}\n", encoding="utf-8")  # fmt: skip
    digests.write_metadata(qg)
    assert unused_warned(validate_package(qg, gpu=False)) == {}


def test_a_name_a_template_reads_is_not_unused(qg: Path) -> None:
    """Templates see every derive entry and constant, bare and in `constants` (docs/format.md's
    template contract): a read there, in a file the template includes too, counts; a dynamic read
    of `constants` could be any of them, so then nothing is warned."""
    def add(m: dict) -> None:
        m["derive"].update(bare="1", viaAttr="2", viaItem="3", included="4", nobody="5")

    edit_json(qg / "manifest.json", add)
    template = qg / "quick-gelu.wgsl.jinja"
    original = template.read_text("utf-8")
    template.write_text(original + "// {{ bare }} {{ constants.viaAttr }} {{ constants['viaItem'] }}\n"
                        "{% include 'extra.wgsl.jinja' %}\n", encoding="utf-8")  # fmt: skip
    (qg / "extra.wgsl.jinja").write_text("// {{ included }}\n", encoding="utf-8")
    digests.write_metadata(qg)
    assert set(unused_warned(validate_package(qg, gpu=False))) == {"derive.nobody"}
    template.write_text(template.read_text("utf-8") + "{% for name, value in constants.items() %}// {{ name }}\n"
                        "{% endfor %}\n", encoding="utf-8")  # fmt: skip
    digests.write_metadata(qg)
    assert unused_warned(validate_package(qg, gpu=False)) == {}


def _checked_by_their_own_tests() -> set[str]:
    """Test packages whose own test module calls conftest's assert_valid_and_passing, which makes the
    same ``validate_package(root, gpu=False)`` call and refuses a "nothing reads" warning too."""
    names = set()
    for module in Path(__file__).parent.glob("test_*.py"):
        text = module.read_text("utf-8")
        if re.search(r"assert_valid_and_passing\(\w+, PACKAGE,", text):  # its PACKAGE, named on one of:
            names.update(re.findall(r'^PACKAGE(?:_NAME)? = (?:PACKAGES_DIR / )?"([^"]+)"$', text, re.MULTILINE))
    return names


def _every_package() -> list[Path]:
    """The shipped packages and the test packages no test module of their own checks (see above)."""
    checked = _checked_by_their_own_tests()
    tests = [p for p in sorted((Path(__file__).parent / "packages").iterdir()) if p.name not in checked]
    return sorted(embedded_root().iterdir()) + tests


@pytest.mark.parametrize("root", _every_package(), ids=lambda p: p.name)
def test_no_shipped_or_test_package_has_an_entry_nothing_reads(root: Path) -> None:
    """The check found demo.Concat's derive 'outer' and demo.Transpose's constant 'wide', named only
    in a description and a template comment: both removed. A test package whose own tests call
    assert_valid_and_passing is checked there (the same validate call), not again here."""
    assert unused_warned(validate_package(root, gpu=False)) == {}


def test_the_packages_left_to_their_own_tests_are_checked_there() -> None:
    """_checked_by_their_own_tests read the test modules right: it finds most test packages (a
    regression to none would check them nowhere but here, as before), each one a folder there."""
    checked = _checked_by_their_own_tests()
    folders = {p.name for p in (Path(__file__).parent / "packages").iterdir()}
    assert len(checked) >= 30 and checked <= folders, checked - folders


def test_a_template_including_an_unlisted_file_is_invalid_as_every_call_refuses_it(qg: Path) -> None:
    """A template that includes a file added after `digest` (a .txt may sit unlisted) validated
    as "valid", while every call, test and render refused it with a DigestError."""
    template = qg / "quick-gelu.wgsl.jinja"
    template.write_text(template.read_text("utf-8").replace("{{ enables }}", '{{ enables }}\n{% include "helpers.txt" %}', 1),
                        encoding="utf-8")  # fmt: skip
    digests.write_metadata(qg)
    (qg / "helpers.txt").write_text("// helpers\n", encoding="utf-8")
    report = validate_package(qg)  # includes are resolved when templates render, which --no-gpu skips
    assert not report.ok
    assert any("helpers.txt" in p.message and "not listed in metadata.json" in p.message for p in report.problems), report.problems
    # Reported as the variant's render error, naming the include, not as a traceback that ended the GPU checks
    unlisted = [p for p in report.problems if "helpers.txt" in p.message]
    assert unlisted and all("does not render for variant" in p.message and "Traceback" not in p.message
                            and 'File "' not in p.message for p in unlisted)  # fmt: skip
    assert "included by quick-gelu.wgsl.jinja, line " in unlisted[0].message


def test_a_misspelt_dollar_reference_is_reported_once(qg: Path) -> None:
    """`"$scalr"` gave two errors at one place: check_manifest's, then the program compile's."""
    def misspell(m):
        m["variants"][1]["passes"][0]["bindings"] = [dict(b) for b in m["bindingSets"]["scalarTail"]]
        m["variants"][1]["passes"][0]["bindings"][0]["elementType"] = "$scalr"

    edit_json(qg / "manifest.json", misspell)
    digests.write_metadata(qg)
    report = validate_package(qg, gpu=False)
    at = [p for p in report.problems if p.json_path == "variants[1].passes[0].bindings[0].elementType"]
    assert [p.message for p in at] == ["'$scalr' names no constant of this variant"], report.problems


def test_without_shader_f16_validate_compiles_what_test_runs(gl_device) -> None:
    """demo.Where copies float16 data as u32 words, so its float16 calls need no shader-f16, and
    `test` runs them on the OpenGL adapter. validate had dropped every float16 call there up front
    ("this adapter has no shader-f16 feature: variant ... was not compiled")."""
    import webgpu_kernels as wk
    from webgpu_kernels.package_tests import run_package_tests

    from conftest import PACKAGES_DIR

    package = PACKAGES_DIR / "demo.Where"
    report = validate_package(package, adapter="gl")
    assert report.ok and not report.warnings, [p.message for p in report.problems]
    compiled = {(c.variant, c.dtype): c.pipelines for c in report.coverage}
    assert compiled[("flat", "B=bool, T=float16")] > 0 and compiled[("broadcast", "B=bool, T=float16")] > 0
    tested = run_package_tests(wk.load_kernel(package), adapter="gl", cases=["same-2x3x5-f16"])
    assert [r.status for r in tested.results] == ["pass", "pass"]


def test_without_shader_f16_a_named_variant_only_the_adapter_refuses_is_skipped(gl_device) -> None:
    """demo.Concat's float16 case `last-3x4-3x8-axis-1-f16` names vec4 (which copies float16 as
    u32 words) and scalar (guarded by f16Ok). On the OpenGL adapter, without shader-f16, `test`
    failed scalar ("the case names this variant but it rejects the case") and validate called the
    package invalid, though a case no variant accepts there is skipped and the docs say float16
    cases are skipped, not failed, on such an adapter: the rejection is the adapter's."""
    import webgpu_kernels as wk
    from webgpu_kernels.package_tests import run_package_tests

    from conftest import PACKAGES_DIR

    package = PACKAGES_DIR / "demo.Concat"
    report = validate_package(package, adapter="gl")
    assert report.ok, [p.message for p in report.errors]
    assert all(p.adapter_only for p in report.warnings), [p.message for p in report.warnings]
    tested = run_package_tests(wk.load_kernel(package), adapter="gl", cases=["last-3x4-3x8-axis-1-f16"])
    assert sorted((r.variant, r.status) for r in tested.results) == [("scalar", "skip"), ("vec4", "pass")]
    assert all("shader-f16" in r.message for r in tested.results if r.status == "skip")


def test_without_shader_f16_an_unguarded_f16_variant_is_an_error_with_the_guard(tmp_path: Path, gl_device) -> None:
    """A variant that accepts float16 calls on an adapter without shader-f16 and enables f16 does
    not compile there (`test` fails it): validate says so, and names the guard that refuses such a
    call cleanly. The guarded package (the embedded QuickGelu) is valid there, its float16 rows
    marked "no shader-f16"."""
    package = copy_package("com.microsoft.QuickGelu", tmp_path / "qg")
    edit_json(package / "manifest.json", lambda m: m["derive"].update(
        baseOk=m["derive"]["baseOk"].replace(" and f16Ok(dtypes.T)", "")))  # fmt: skip
    digests.write_metadata(package)
    report = validate_package(package, adapter="gl")
    f16_errors = [p for p in report.errors if "float16" in (p.dtype or "")]
    assert f16_errors and not [p for p in report.errors if p not in f16_errors]
    assert all("WGSL does not compile" in p.message and '"f16Ok(dtypes.T)" in the variant\'s `when`' in p.message
               for p in f16_errors)  # fmt: skip
    guarded = validate_package(embedded_root() / "com.microsoft.QuickGelu", adapter="gl")
    assert guarded.ok and {c.note for c in guarded.coverage if "float16" in c.dtype} == {"no shader-f16"}


def test_valid_says_how_many_variants_were_never_compiled(runner: CliRunner, tmp_path: Path) -> None:
    """A package whose cases reach no variant was "valid" with a broken shader, which the first
    call then failed to compile: the verdict now counts the variant x dtype pairs not compiled."""
    from conftest import PACKAGES_DIR

    package = tmp_path / "scale-shift"
    shutil.copytree(PACKAGES_DIR / "demo.ScaleShift", package)
    template = next(package.glob("*.wgsl.jinja"))
    template.write_text(template.read_text("utf-8").replace("y[", "yyy["), encoding="utf-8")
    digests.write_metadata(package)
    out = runner.invoke(main, ["validate", str(package)])
    assert out.exit_code == 0, out.output
    assert "0 errors, 6 warnings: valid (4 of 4 variant x dtype pairs not compiled: their status above says why)" in " ".join(out.output.split())
    full = runner.invoke(main, ["validate", "com.microsoft.BiasAdd"])
    assert full.exit_code == 0 and "not compiled: their status" not in full.output
    as_json = runner.invoke(main, ["validate", str(package), "--json"])  # the API and --json say it too
    assert json.loads(as_json.output)["uncompiled"] == 4
    assert validate_package(package).uncompiled == 4 and validate_package(embedded_root() / "com.microsoft.BiasAdd").uncompiled == 0


def test_without_shader_f16_a_pair_no_case_reaches_is_not_exercised_not_no_shader_f16(tmp_path: Path, gl_device) -> None:
    """demo.Where without the float16 cases its 'flat' variant accepts: on the OpenGL adapter that
    pair had been labelled "no shader-f16", though flat runs there; only a variant whose f16Ok
    guard alone rejects the cases is."""
    from conftest import PACKAGES_DIR

    package = tmp_path / "where"
    shutil.copytree(PACKAGES_DIR / "demo.Where", package)

    def same_shapes(case):
        shapes = {tuple(v.get("shape", ())) for v in case["inputs"].values()}
        return len(shapes) == 1 or any("file" in v for v in case["inputs"].values())

    edit_json(package / "test.json", lambda t: t.update(cases=[c for c in t["cases"] if not (
        c["types"]["T"] == "float16" and same_shapes(c))]))  # fmt: skip
    edit_json(package / "bench.json", lambda b: b.update(cases=[c for c in b["cases"] if "same" not in c["name"]]))
    digests.write_metadata(package)
    status = {(c.variant, c.dtype): c.status for c in validate_package(package, adapter="gl").coverage}
    assert status[("flat", "B=bool, T=float16")] == "not exercised"
    assert status[("broadcast", "B=bool, T=float16")] == "compiled"


def test_a_dtype_compared_with_an_onnx_type_name_is_a_warning(qg: Path) -> None:
    """`dtypes.T in ["float32", "float16"]` never holds (dtypes.T is "f32"), so the variant it
    guards silently ran on nothing: validate only said "not exercised"."""
    def guard(m: dict) -> None:
        m["variants"][0]["when"] = [*m["variants"][0].get("when", []), 'dtypes.T in ["float32", \'float16\']']

    edit_json(qg / "manifest.json", guard)
    digests.write_metadata(qg)
    warned = [p.message for p in validate_package(qg, gpu=False).warnings if "WGSL-style name" in p.message]
    assert warned == ["expression 'dtypes.T in [\"float32\", \\'float16\\']' reads dtypes and writes 'float32', "
                      "'float16': dtypes.<T> is the WGSL-style name ('f32', 'f16'), so a comparison of the two "
                      "never holds"], warned
    assert not [p for p in validate_package(embedded_root() / QUICK_GELU, gpu=False).warnings
                if "WGSL-style" in p.message]  # the seeds compare nothing with ONNX names


def test_an_output_sized_with_true_division_is_a_warning(qg: Path) -> None:
    """`shapes.X[-1] / 2` gives 1280.0 for the even widths every case has, so validate and test
    passed, and an odd width was refused at the call (an author's BiasSplitGelu). Output shapes and
    the derive entries they read are checked; `//` and a `/` elsewhere are not warned of."""
    def halve(m: dict) -> None:
        m["derive"] = {**m.get("derive", {}), "half": "shapes.X[-1] / 2", "ratio": "1 / 3",
                       "whole": "(shapes.X[-1] / 2) | int"}  # `| int` makes it an integer: not warned
        m["outputs"][0]["shape"] = "shapes.X[:-1] + (half * 2 + whole - whole,)"

    edit_json(qg / "manifest.json", halve)
    digests.write_metadata(qg)
    warned = {p.json_path: p.message for p in validate_package(qg, gpu=False).warnings if "true division" in p.message}
    assert list(warned) == ["derive.half"], warned
    assert warned["derive.half"].startswith("expression 'shapes.X[-1] / 2' sizes an output with `/`, true division")

    edit_json(qg / "manifest.json", lambda m: m["outputs"][0].update(shape="shapes.X[:-1] + (shapes.X[-1] / 1,)"))
    digests.write_metadata(qg)
    warned = [p.json_path for p in validate_package(qg, gpu=False).warnings if "true division" in p.message]
    assert warned == ["outputs[0].shape"], warned
    assert not [p for p in validate_package(embedded_root() / QUICK_GELU, gpu=False).warnings
                if "true division" in p.message]  # fmt: skip


def test_validate_folds_the_package_s_file_names_once(qg: Path, monkeypatch) -> None:
    """The case-twin lookup (digests.case_twins) was built three times a package: for the passes'
    templates, their includes and test.json's data files. Once now, passed down; what
    it finds is tests/test_portability.py's."""
    from webgpu_kernels import portability, validation

    built = []
    real = digests.case_twins

    def counted(files):
        built.append(1)
        return real(files)

    monkeypatch.setattr(validation, "case_twins", counted)
    monkeypatch.setattr(portability, "case_twins", counted, raising=False)  # (it builds none now)
    assert not validate_package(qg, gpu=False).errors
    assert len(built) == 1


def test_validate_checks_test_json_and_bench_json_against_their_schemas_once(monkeypatch) -> None:
    """Each file was checked when it was loaded (every problem reported) and again when its cases
    were built, the schema walk (about 0.1 s for a 40-case test.json) done twice for nothing."""
    from webgpu_kernels import case_format

    checked: list[str] = []
    real = case_format.schema_errors
    monkeypatch.setattr(case_format, "schema_errors", lambda data, kind, **kw: checked.append(kind) or real(data, kind, **kw))
    report = validate_package(embedded_root() / QUICK_GELU, gpu=False)
    assert not report.errors and sorted(checked) == ["bench", "test"], (report.errors, checked)


def test_a_template_syntax_error_is_one_error_not_one_per_variant_and_dtype(tmp_path: Path) -> None:
    """One typo in demo.Where's template had been three errors (and three JUnit failures): the
    syntax error, then "does not render" for each dtype whose cases render it. The
    variants and dtypes it stops still read "failed" in the coverage."""
    from conftest import PACKAGES_DIR

    package = tmp_path / "where"
    shutil.copytree(PACKAGES_DIR / "demo.Where", package)
    template = package / "where-broadcast.wgsl.jinja"
    template.write_text(template.read_text("utf-8").replace("{% for k in", "{% if %}{% for k in", 1), "utf-8")
    digests.write_metadata(package)
    report = validate_package(package)
    errors = [(p.file, p.message) for p in report.errors]
    assert len(errors) == 1 and errors[0][0] == "where-broadcast.wgsl.jinja" and "syntax error" in errors[0][1], errors
    assert {c.status for c in report.coverage if c.variant == "broadcast" and c.cases} == {"failed"}


def test_a_missing_template_lists_those_there_and_the_one_meant(qg: Path, runner: CliRunner) -> None:
    """`'quick-glu.wgsl.jinja' is not in the package` named neither the templates the package has nor the
    one meant (a review); validate and digest both say them now, and validate says it
    once, not again for each render of the missing file."""
    edit_json(qg / "manifest.json",
              lambda m: m["variants"][2]["passes"][0]["source"].update(shader="quick-glu.wgsl.jinja"))  # fmt: skip
    digests.write_metadata(qg)
    report = validate_package(qg)
    missing = [p for p in report.errors if "quick-glu" in p.message or p.file == "quick-glu.wgsl.jinja"]
    assert len(missing) == 1, missing
    assert missing[0].message == ("template 'quick-glu.wgsl.jinja' is not in the package (its templates: "
                                  "quick-gelu.wgsl.jinja; did you mean 'quick-gelu.wgsl.jinja'?)"), missing[0].message
    result = runner.invoke(main, ["digest", str(qg)])
    assert "(its templates: quick-gelu.wgsl.jinja; did you mean 'quick-gelu.wgsl.jinja'?)" in " ".join(
        result.stderr.split()), result.stderr


def test_a_renamed_template_is_suggested_over_one_another_pass_names(qg: Path, runner: CliRunner) -> None:
    """A template renamed on disk and not in the manifest: the closest name had been suggested, here
    the template variant vec4 still runs, where the renamed file (which no pass names) was meant
   ."""
    (qg / "quick-gelu-vec4.wgsl.jinja").write_bytes((qg / "quick-gelu.wgsl.jinja").read_bytes())
    (qg / "quick-gelu.wgsl.jinja").rename(qg / "gelu-scalar.wgsl.jinja")
    edit_json(qg / "manifest.json",
              lambda m: m["variants"][0]["passes"][0]["source"].update(shader="quick-gelu-vec4.wgsl.jinja"))  # fmt: skip
    result = runner.invoke(main, ["digest", str(qg)])
    said = " ".join(result.stderr.split())
    assert "names 'quick-gelu.wgsl.jinja', which the package no longer has" in said, said
    assert "did you mean 'gelu-scalar.wgsl.jinja' (which no pass names)?" in said, said
    report = validate_package(qg, gpu=False)
    missing = {p.message for p in report.errors if "quick-gelu.wgsl.jinja" in p.message}
    assert missing == {"template 'quick-gelu.wgsl.jinja' is not in the package (its templates: gelu-scalar.wgsl.jinja, "
                       "quick-gelu-vec4.wgsl.jinja; did you mean 'gelu-scalar.wgsl.jinja' (which no pass names)?)"}, missing
    with pytest.raises(TemplateError, match=r"did you mean 'gelu-scalar\.wgsl\.jinja' \(which no pass names\)"):
        load_kernel(qg).render({"X": ([5], "float32")}, variant="scalar")
    # a misspelling of a template passes name is still suggested when no unnamed template is close
    (qg / "gelu-scalar.wgsl.jinja").unlink()
    edit_json(qg / "manifest.json",
              lambda m: m["variants"][1]["passes"][0]["source"].update(shader="quick-gelu-vec.wgsl.jinja"))  # fmt: skip
    digests.write_metadata(qg)
    report = validate_package(qg, gpu=False)
    assert any(p.message.endswith("did you mean 'quick-gelu-vec4.wgsl.jinja'?)") for p in report.errors), report.errors


def _said(result) -> str:
    return " ".join(result.output.split())  # rich wraps long lines


def test_a_case_s_two_dtypes_for_one_type_variable_are_told_to_agree(tmp_path: Path, runner: CliRunner) -> None:
    """A test.json case giving 'bias' float16 beside a float32 'X' ended in Python's advice, "convert
    'bias' with .astype(np.float32)", which a case file cannot follow (a review)."""
    ba = copy_package(BIAS_ADD, tmp_path / "ba")
    edit_json(ba / "test.json", lambda t: t["cases"][0]["inputs"]["bias"].update(dtype="float16"))
    digests.write_metadata(ba)
    advice = ("(make the case's dtypes agree: one dtype for 'X' and 'bias' (the case's \"types\", or an input's "
              "\"dtype\"), or make the case refused: \"refused\": {\"error\": \"DTypeError\"}, docs/package-files.md)")
    for command in ("validate", "test"):
        text = _said(runner.invoke(main, [command, str(ba)]))
        assert "argument 'bias': expected float32 like 'X'" in text and advice in text, text
        assert ".astype" not in text


def test_a_bench_case_s_dtype_errors_are_told_in_bench_json_s_terms(tmp_path: Path, runner: CliRunner) -> None:
    """validate said of a bench.json case's int32 "(convert with .astype(np.float32))", and of two
    dtypes for one type variable "convert 'bias' with .astype(np.float32)": Python's advice, which
    a bench.json case cannot follow (a review)."""
    qg = copy_package(QUICK_GELU, tmp_path / "qg")
    edit_json(qg / "bench.json", lambda b: b["cases"][0].update(types={"T": ["float32", "int32"]}))
    digests.write_metadata(qg)
    text = _said(runner.invoke(main, ["validate", str(qg)]))
    assert ("got int32 (add int32 to typeConstraints.T in manifest.json, or take int32 out of the case's dtypes "
            "(its \"types\", an input's \"dtype\"))") in text, text
    ba = copy_package(BIAS_ADD, tmp_path / "ba")
    edit_json(ba / "bench.json", lambda b: b["cases"][0]["inputs"]["bias"].update(dtype="float16"))
    digests.write_metadata(ba)
    text = _said(runner.invoke(main, ["validate", str(ba)]))
    assert ("argument 'bias': expected float32 like 'X' (both are type variable T), got float16 (make the case's "
            "dtypes agree: one dtype for 'X' and 'bias' (the case's \"types\", or an input's \"dtype\"))") in text, text
    assert ".astype" not in text and "\"refused\"" not in text  # bench.json has no refusals


def test_a_case_s_boolean_inside_a_list_attribute_is_told_the_list_to_write(tmp_path: Path, runner: CliRunner) -> None:
    """A case's `"perm": [1, true]` was told "write 1 in the case's attributes", which would replace
    the list with a number (a review)."""
    transpose = tmp_path / "transpose"
    shutil.copytree(Path(__file__).parent / "packages" / "demo.Transpose", transpose)
    edit_json(transpose / "test.json", lambda t: t["cases"][5].update(attrs={"perm": [1, True]}))
    digests.write_metadata(transpose)
    for command in ("validate", "test"):
        text = _said(runner.invoke(main, [command, str(transpose)]))
        assert "(write [1, 1] in the case's attributes: a boolean is not a number here)" in text, text


# --- coverage audit -------------------------------------------------------------------------


def test_a_case_naming_a_type_variable_the_manifest_lacks_is_an_error_naming_the_ones_it_has(qg: Path) -> None:
    """bench.json's message named the type variables; test.json's (validate's) had named none."""
    edit_json(qg / "test.json", lambda t: t["cases"][0]["types"].update(U="float32"))
    digests.write_metadata(qg)
    report = validate_package(qg, gpu=False)
    [error] = [p for p in report.errors if p.json_path == "cases[0].types.U"]
    assert error.file == "test.json" and error.case == "vec4-2x64-f32"
    assert error.message == f"'U' is not a type variable of {QUICK_GELU} (its type variables: ['T'])"


def test_no_device_to_compile_on_is_one_error_and_the_other_stages_still_report(qg: Path) -> None:
    edit_json(qg / "test.json", lambda t: t["cases"][0]["types"].update(U="float32"))
    digests.write_metadata(qg)
    report = validate_package(qg, gpu=True, adapter="no-such-adapter-204")
    [device] = [p for p in report.errors if p.file == ""]
    assert device.message.startswith("no WebGPU device to compile pipelines on: no adapter matches "
                                      "'no-such-adapter-204'")  # fmt: skip
    assert "cases[0].types.U" in {p.json_path for p in report.errors}  # the case checks ran without it
    assert report.adapter is None and not report.ok


@pytest.mark.parametrize(("clause", "error"), [
    ("numel(shapes.X)", "a when clause must be true or false, got int 128"),
    ("dim(shapes.X, 5) > 0", "dim("),
])  # fmt: skip
def test_a_when_clause_that_gives_neither_true_nor_false_is_a_warning_at_it(qg: Path, clause: str, error: str) -> None:
    """The variant is rejected (as a call rejects it), and validate says which clause and why."""
    edit_json(qg / "manifest.json", lambda m: m["variants"][0]["when"].append(clause))
    edit_json(qg / "test.json", lambda t: t.update(cases=t["cases"][:1]))  # vec4-2x64-f32: 128 elements, rank 2
    digests.write_metadata(qg)
    report = validate_package(qg)
    [warning] = [p for p in report.warnings if p.json_path == "variants[0].when[2]" and p.case == "vec4-2x64-f32"]
    assert warning.file == "manifest.json" and warning.variant == "vec4" and warning.dtype == "float32"
    assert warning.message.startswith(f"clause {clause!r} gives neither true nor false (which rejects the variant): ")
    assert error in warning.message


def test_a_template_that_is_not_utf8_is_one_error_saying_so(qg: Path) -> None:
    """It had said 'template not found in the package' of the file that is there."""
    template = qg / "quick-gelu.wgsl.jinja"
    template.write_bytes(template.read_bytes() + b"// \xff\xfe\n")
    digests.write_metadata(qg)
    [error] = validate_package(qg, gpu=False).errors
    assert (error.file, error.message) == ("quick-gelu.wgsl.jinja", "not UTF-8 text")


# --- error-message polish ----------------------------------------------------------------


def test_a_when_clause_that_fails_for_several_cases_is_one_warning_naming_the_others(qg: Path) -> None:
    """Doc (package-files.md): one warning "per clause, variant, dtype and reason". It had been one
    line per case (30 for one clause in QuickGelu), each the same but for the case and its numbers."""
    kept = ["vec4-2x64-f32", "multi-workgroup-3x77x16-f32", "alpha-0-f32"]
    edit_json(qg / "manifest.json", lambda m: m["variants"][0]["when"].append("numel(shapes.X)"))
    edit_json(qg / "test.json", lambda t: t.update(cases=[c for c in t["cases"] if c["name"] in kept]))
    (qg / "bench.json").unlink()
    digests.write_metadata(qg)
    report = validate_package(qg)
    [warning] = [p for p in report.warnings if p.json_path == "variants[0].when[2]"]
    assert (warning.variant, warning.dtype, warning.case) == ("vec4", "float32", "vec4-2x64-f32")
    assert warning.message == ("clause 'numel(shapes.X)' gives neither true nor false (which rejects the variant): "
                               "a when clause must be true or false, got int 128 (and in 2 more cases: "
                               "multi-workgroup-3x77x16-f32, alpha-0-f32)")  # fmt: skip


def test_when_clause_warnings_of_different_reasons_stay_apart(qg: Path) -> None:
    """Grouped by the reason less its numbers, never across reasons: a clause that is an int for one
    case and a string for another is two warnings."""
    edit_json(qg / "manifest.json", lambda m: m["variants"][0]["when"].append("numel(shapes.X) if ranks.X == 2 "
                                                                             "else 'x'"))  # fmt: skip
    edit_json(qg / "test.json", lambda t: t.update(cases=[c for c in t["cases"] if c["name"] in
                                                          ("vec4-2x64-f32", "multi-workgroup-3x77x16-f32")]))  # fmt: skip
    (qg / "bench.json").unlink()
    digests.write_metadata(qg)
    warnings = [p for p in validate_package(qg).warnings if p.json_path == "variants[0].when[2]"]
    assert sorted(p.case for p in warnings) == ["multi-workgroup-3x77x16-f32", "vec4-2x64-f32"]
    assert not any("more case" in p.message for p in warnings)


def test_template_count_includes_included_templates() -> None:
    """validate's "checked: N templates" counted the templates passes name, not those they include:
    ai.onnx.Gemm's four pass templates (rows, blocked, tiled, simple) all include gemm-epilogue.wgsl.jinja,
    which validate checks (its syntax, its include's case) as it checks theirs, so all five are counted."""
    from conftest import PACKAGES_DIR

    report = validate_package(PACKAGES_DIR / "ai.onnx.Gemm", gpu=False)
    assert report.checked["templates"] == 5
    # a package without includes: the templates its passes name, each once
    assert validate_package(embedded_root() / "com.microsoft.QuickGelu", gpu=False).checked["templates"] == len(
        load_kernel(embedded_root() / "com.microsoft.QuickGelu").manifest.shaders())
