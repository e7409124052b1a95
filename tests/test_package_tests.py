"""``webgpu-kernels test``: test.json cases on every variant that accepts them, in process or isolated."""

from __future__ import annotations

import json
import re
import shutil
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

import webgpu_kernels as wk
from webgpu_kernels import cli_package, digests
from webgpu_kernels.cli import main
from webgpu_kernels.package_tests import (
    CRASH_HOOK_ENV,
    run_package_tests,
    run_package_tests_isolated,
)  # fmt: skip
from webgpu_kernels.run_results import RunResult
from webgpu_kernels.validation import validate_package

from conftest import PACKAGES_DIR, copy_package  # noqa: E402

QUICK_GELU = "com.microsoft.QuickGelu"
BIAS_ADD = "com.microsoft.BiasAdd"



def edit_test_json(root: Path, edit) -> None:
    path = root / "test.json"
    data = json.loads(path.read_text("utf-8"))
    edit(data)
    path.write_text(json.dumps(data, indent=1), encoding="utf-8")
    digests.write_metadata(root)


def case_named(data: dict, name: str) -> dict:
    return next(c for c in data["cases"] if c["name"] == name)


@pytest.fixture(scope="module")
def reports() -> dict[str, object]:
    return {op: run_package_tests(wk.get_kernel(op)) for op in (QUICK_GELU, BIAS_ADD)}


# --- the embedded kernels -------------------------------------------------------------------------


@pytest.mark.parametrize("op_id", [QUICK_GELU, BIAS_ADD])
def test_embedded_kernels_pass(reports, op_id: str) -> None:
    report = reports[op_id]
    assert report.error is None
    failed = [(r.case, r.variant, r.message) for r in report.results if r.status != "pass"]
    assert not failed
    assert report.ok


@pytest.mark.parametrize("op_id", [QUICK_GELU, BIAS_ADD])
def test_every_variant_and_dtype_is_covered(reports, op_id: str) -> None:
    kernel = wk.get_kernel(op_id)
    # (a refused case's pass is no run of a variant: it ran nothing)
    ran = {(r.variant, r.dtype) for r in reports[op_id].results if r.status == "pass" and not r.case.startswith("refused-")}
    assert ran == {(v, d) for v in kernel.variants for d in ("float32", "float16")}


def test_edge_shapes_and_specials_run_on_every_accepting_variant(reports) -> None:
    qg = {(r.case, r.variant) for r in reports[QUICK_GELU].results}
    for dtype in ("f32", "f16"):
        assert {v for c, v in qg if c == f"rank0-{dtype}"} == {"vec4_tail", "scalar"}
        assert {v for c, v in qg if c == f"empty-0x3-{dtype}"} == {"scalar"}
        assert {v for c, v in qg if c == f"one-element-{dtype}"} == {"vec4_tail", "scalar"}
        assert {v for c, v in qg if c == f"tail-5x77x13-{dtype}"} == {"vec4_tail", "scalar"}
        assert {v for c, v in qg if c == f"specials-{dtype}"} == {"vec4", "vec4_tail", "scalar"}
    ba = {(r.case, r.variant) for r in reports[BIAS_ADD].results}
    assert {v for c, v in ba if c == "specials-f16"} == {"vec4", "scalar"}
    assert {v for c, v in ba if c == "c6-numel12-2x1x6-f32"} == {"scalar"}
    assert {v for c, v in ba if c == "empty-c0-f16"} == {"scalar"}
    refused = {r.case: r.message.split(":")[:2] for r in reports[BIAS_ADD].results if r.case.startswith("refused-")}
    assert refused == {"refused-rank-2": ["refused", " RankError"], "refused-bias-length": ["refused", " SelectionError"],
                       "refused-skip-shape": ["refused", " SelectionError"],
                       "refused-mixed-dtypes": ["refused", " DTypeError"],
                       "refused-vec4-on-c5": ["refused", " VariantRejectedError"]}  # fmt: skip


def test_cli_test_default_runs_every_embedded_kernel(runner: CliRunner) -> None:
    result = runner.invoke(main, ["test"])
    assert result.exit_code == 0, result.output
    out = result.stdout
    for header in ("kernel", "case", "variant", "dtype", "max abs err", "max rel err", "result"):
        assert header in out
    assert re.search(r"com\.microsoft\.QuickGelu: [1-9][0-9]* passed, 0 failed", out), out
    assert "all passed" in out


def test_cli_test_case_takes_a_part_of_the_name(runner: CliRunner) -> None:
    """`test --case tail-3x5` took globs only (bench and tune took parts of names too): it matched nothing."""
    result = runner.invoke(main, ["test", QUICK_GELU, "--case", "tail-3x5", "--json"])
    assert result.exit_code == 0, result.output
    (package,) = json.loads(result.stdout)["packages"]
    assert {r["case"] for r in package["results"]} == {"tail-3x5-f32", "tail-3x5-f16"}


def test_cli_test_json_and_case_filter(runner: CliRunner) -> None:
    result = runner.invoke(main, ["test", QUICK_GELU, "--case", "specials-*", "--case", "rank0-f16", "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["ok"] is True
    (package,) = data["packages"]
    assert package["kernel"] == QUICK_GELU and package["isolated"] is False
    cases = {r["case"] for r in package["results"]}
    assert cases == {"specials-f32", "specials-f16", "specials-scattered-2x1024-f32", "specials-scattered-2x1024-f16",
                     "rank0-f16"}  # fmt: skip
    first = package["results"][0]
    assert set(first) >= {"kernel", "case", "variant", "dtype", "status", "maxAbsError", "maxRelError", "outputs"}
    assert first["outputs"][0]["tolerance"] == {"rtol": 1e-5, "atol": 1e-6}


def test_a_run_is_labelled_with_every_type_variable_as_validate_labels_it(runner: CliRunner) -> None:
    """demo.ArgMax's output type I (`"I": ["int64"]`, bound by no input) is in the run's dtype, as in
    validate's coverage (`T=float32, I=int64`); it had been `float32`."""
    from conftest import PACKAGES_DIR

    package = str(PACKAGES_DIR / "demo.ArgMax")
    result = runner.invoke(main, ["test", package, "--case", "default-axis0-4x5-f32", "--json"])
    assert result.exit_code == 0, result.output
    (tested,) = json.loads(result.stdout)["packages"]
    assert {r["dtype"] for r in tested["results"]} == {"T=float32, I=int64"}
    coverage = validate_package(package).coverage
    assert {r["dtype"] for r in tested["results"]} <= {c.dtype for c in coverage}


# --- failures ---------------------------------------------------------------------------------------


def test_wrong_expected_values_fail_with_exit_1(tmp_path: Path, runner: CliRunner) -> None:
    root = copy_package(QUICK_GELU, tmp_path / "qg")

    def corrupt(data: dict) -> None:
        values = case_named(data, "tail-3x5-f32")["expected"]["Y"]["values"]
        values[4] = values[4] + 0.01  # one element off by far more than the tolerance
        case_named(data, "specials-f16")["expected"]["Y"]["values"][0] = 1.0  # NaN expected -> 1.0

    edit_test_json(root, corrupt)
    result = runner.invoke(main, ["test", str(root)])
    assert result.exit_code == 1, result.output
    assert "FAILED" in result.stdout
    assert "FAIL com.microsoft.QuickGelu tail-3x5-f32 [vec4_tail]" in result.stdout
    assert "1 of 15 elements outside rtol=1e-05 atol=1e-06" in result.stdout
    assert "NaN position mismatch" in result.stdout
    # an author who changed the kernel on purpose is pointed at the command that writes the values again
    assert "if the kernel's results changed on purpose, `webgpu-kernels expect PATH" in " ".join(result.stdout.split())
    # the table's result says how many elements are off: the NaN case's error columns (finite elements
    # alone) read as small as a pass
    rows = [line for line in result.stdout.splitlines() if "│" in line]
    assert any("tail-3x5-f32" in line and "FAIL (1 of 15)" in line for line in rows)
    assert any("specials-f16" in line and "FAIL (1 of" in line for line in rows)
    data = json.loads(runner.invoke(main, ["test", str(root), "--json"]).stdout)
    failed = {(r["case"], r["variant"]) for r in data["packages"][0]["results"] if r["status"] == "fail"}
    assert failed == {("tail-3x5-f32", "vec4_tail"), ("tail-3x5-f32", "scalar"), ("specials-f16", "vec4"),
                      ("specials-f16", "vec4_tail"), ("specials-f16", "scalar")}  # fmt: skip
    assert data["ok"] is False


def test_wrong_expected_data_file_fails(tmp_path: Path) -> None:
    import numpy as np

    root = copy_package(BIAS_ADD, tmp_path / "ba")
    path = root / "vec4-2x5x320-f32.Y.npy"
    array = np.load(path)
    array[1, 2, 3] += 1.0
    np.save(path, array)
    digests.write_metadata(root)
    report = run_package_tests(wk.load_kernel(root), cases=["vec4-2x5x320-f32"])
    assert [(r.variant, r.status) for r in report.results] == [("vec4", "fail"), ("scalar", "fail")]
    assert "first at [1, 2, 3]" in report.results[0].message


def test_case_problems_are_reported_per_case(tmp_path: Path) -> None:
    root = copy_package(QUICK_GELU, tmp_path / "qg")

    def edit(data: dict) -> None:
        case_named(data, "tail-3x5-f32")["variants"] = ["vec4", "scalar"]  # vec4 refuses 15 elements
        case_named(data, "rank0-f32")["inputs"]["X"]["shape"] = [2]  # 1 value for 2 elements
        case_named(data, "one-element-f32")["variants"] = ["nope"]

    edit_test_json(root, edit)
    report = run_package_tests(wk.load_kernel(root), cases=["tail-3x5-f32", "one-element-f32", "rank0-f32"])
    by = {(r.case, r.variant): r for r in report.results}
    assert by[("tail-3x5-f32", "vec4")].status == "fail"
    assert "rejects the case" in by[("tail-3x5-f32", "vec4")].message
    assert by[("tail-3x5-f32", "scalar")].status == "pass"
    assert ("tail-3x5-f32", "vec4_tail") not in by  # not named by the case
    assert by[("rank0-f32", None)].status == "error"
    assert "test.json cases[" in by[("rank0-f32", None)].message and "for shape [2]" in by[("rank0-f32", None)].message
    assert by[("one-element-f32", "nope")].status == "error"
    assert not report.ok


def test_a_case_whose_call_is_refused_names_its_place_in_test_json(tmp_path: Path) -> None:
    """An unknown attribute in a case was reported as "argument 'alhpa': ..." alone; validate
    named the case's JSON path, test did not."""
    root = copy_package(QUICK_GELU, tmp_path / "qg")
    edit_test_json(root, lambda data: case_named(data, "rank0-f32").update(attrs={"alhpa": 1.0}))
    report = run_package_tests(wk.load_kernel(root), cases=["rank0-f32"])
    (result,) = [r for r in report.results if r.case == "rank0-f32"]
    assert result.status == "error", result
    assert re.match(r"test\.json cases\[\d+\]: argument 'alhpa': expected one of the attributes", result.message), result.message


def test_a_case_past_a_device_limit_is_skipped_with_the_calls_limit_before_any_upload(tmp_path: Path, monkeypatch) -> None:
    """The runner puts each case's inputs on the device itself (their padding poisoned), before the
    call: an input past maxBufferSize reached that upload first, and a device's refusal there is a
    GPU error, not the DeviceLimitError a plain call gives. The call is planned first (its contract
    and the device's limits), so nothing is put on the device, and the run is skipped in bench's and
    tune's words, naming the call's limit: the adapter's limit is not the package's fault (it had
    been an error, failing a CI job on lavapipe where bench skipped the same case). A lowered binding
    limit stands in: a case may not build an input past lavapipe's 2 GiB buffers."""
    device = wk.get_device()
    monkeypatch.setitem(device.limits, "max-storage-buffer-binding-size", 4096)  # the case's X is 8192 bytes
    kernel = wk.load_kernel(copy_package(QUICK_GELU, tmp_path / "qg"))  # no plan cached under the real limit
    with pytest.raises(wk.DeviceLimitError) as plain:
        kernel({"X": np.zeros((2, 1024), np.float32)}, variant="scalar")
    acquired: list[int] = []
    acquire = device.memory.acquire
    monkeypatch.setattr(device.memory, "acquire", lambda nbytes, *rest: acquired.append(nbytes) or acquire(nbytes, *rest))
    report = run_package_tests(kernel, cases=["specials-scattered-2x1024-f32"])
    assert [(r.variant, r.status) for r in report.results] == [(v, "skip") for v in ("vec4", "vec4_tail", "scalar")]
    limit = plain.value
    want = f"this adapter cannot hold it: argument {limit.argument!r}: expected {limit.expected}, got {limit.received}"
    assert all(r.message == want for r in report.results), (report.results, want)
    assert "maxStorageBufferBindingSize" in want and "8192" in want and acquired == []
    assert report.ok, "a skip is no failure without --strict"
    # planned once per run: a second fill byte would only meet the same limit
    planned: list[str | None] = []
    plan = kernel.plan
    monkeypatch.setattr(kernel, "plan", lambda *a, **k: planned.append(k.get("variant")) or plan(*a, **k))
    run_package_tests(kernel, cases=["specials-scattered-2x1024-f32"])
    assert sorted(planned) == sorted(["vec4", "vec4_tail", "scalar"]), planned


def test_the_runner_keeps_inputs_for_the_runs_up_to_the_case_bound(monkeypatch) -> None:
    """`test` built every case's inputs before running any and kept them all: 12 cases of one
    2^24-element input each held as much as the one case of 12 the case bound now refuses. Past
    MAX_CASE_TOTAL_ELEMENTS kept, a case's inputs are built again when it runs."""
    from webgpu_kernels import package_tests
    from webgpu_kernels.casefile import TestCase

    monkeypatch.setattr(package_tests, "MAX_CASE_TOTAL_ELEMENTS", 15)
    built: list[str] = []
    build_inputs = TestCase.build_inputs
    monkeypatch.setattr(TestCase, "build_inputs", lambda self, *a: built.append(self.name) or build_inputs(self, *a))
    names = ["tail-3x5-f32", "one-element-f32", "refused-vec4-on-5-elements"]
    report = run_package_tests(wk.get_kernel(QUICK_GELU), cases=names)
    assert report.ok and {r.case for r in report.results} == set(names), report.results
    # 15 elements kept; then 1 and 5, past the 15, built again to run (a refusal's too)
    assert sorted(built) == sorted([*names, "one-element-f32", "refused-vec4-on-5-elements"])


# --- cases whose call must be refused ------------------------------------------------------------

REFUSED_CASES = [
    # (name, inputs' dtype and shape, extra case fields, refused)
    ("case-int-input", ("int32", [4]), {}, {"error": "DTypeError", "message": "float32"}),
    ("case-wrong-attr-type", ("float32", [4]), {"attrs": {"alpha": "big"}}, {"error": "AttributeValueError"}),
    ("case-workgroup-too-big", ("float32", [8]), {"tunables": {"WORKGROUP_SIZE": 100000}},
     {"error": "SelectionError", "message": "workgroupOk"}),
    ("case-vec4-on-5", ("float32", [5]), {"variants": ["vec4"]}, {"error": "VariantRejectedError", "message": "vec4Ok"}),
    ("case-forced-vec4-is-a-selection-error", ("float32", [5]), {"variants": ["vec4"]}, {"error": "SelectionError"}),
]


def refused_case(name: str, dtype: str, shape: list[int], extra: dict, refused: dict) -> dict:
    generate = {"distribution": "uniform", "seed": 3}
    return {"name": name, "inputs": {"X": {"dtype": dtype, "shape": shape, "generate": generate}}, **extra,
            "refused": refused}  # fmt: skip


def test_cases_that_must_be_refused_pass_when_the_call_is_refused_so(tmp_path: Path) -> None:
    root = copy_package(QUICK_GELU, tmp_path / "qg")
    edit_test_json(root, lambda data: data["cases"].extend(refused_case(n, *x, e, r) for n, x, e, r in REFUSED_CASES))
    report = run_package_tests(wk.load_kernel(root), cases=[c[0] for c in REFUSED_CASES])
    got = {r.case: (r.variant, r.status) for r in report.results}
    assert got == {"case-int-input": (None, "pass"), "case-wrong-attr-type": (None, "pass"),
                   "case-workgroup-too-big": (None, "pass"), "case-vec4-on-5": ("vec4", "pass"),
                   "case-forced-vec4-is-a-selection-error": ("vec4", "pass")}, report.results  # fmt: skip
    messages = {r.case: r.message for r in report.results}
    assert messages["case-int-input"].startswith("refused: DTypeError: ")
    assert messages["case-vec4-on-5"].startswith("refused: VariantRejectedError: ")
    assert report.ok
    validation = validate_package(root)
    assert not [p for p in validation.problems if p.file == "test.json" and p.severity == "error"], validation.problems


@pytest.mark.parametrize(("shape", "refused", "says"), [
    ([4], {"error": "DTypeError"}, "the call ran (outputs Y [4]); the case expects a refusal: DTypeError"),
    ([5], {"error": "RankError"}, "refused with VariantRejectedError: "),
    ([5], {"error": "SelectionError", "message": "baseOk"}, "the case expects SelectionError whose message contains "
                                                            "'baseOk'"),
])  # fmt: skip
def test_a_case_that_must_be_refused_fails_when_the_call_runs_or_is_refused_otherwise(
    tmp_path: Path, shape: list[int], refused: dict, says: str
) -> None:
    root = copy_package(QUICK_GELU, tmp_path / "qg")
    case = refused_case("must-refuse", "float32", shape, {"variants": ["vec4"]}, refused)
    edit_test_json(root, lambda data: data["cases"].append(case))
    report = run_package_tests(wk.load_kernel(root), cases=["must-refuse"])
    (result,) = report.results
    assert result.status == "fail" and says in result.message, result.message
    assert not report.ok


def test_a_case_gives_expected_outputs_or_a_refusal_not_both_nor_neither(tmp_path: Path) -> None:
    root = copy_package(QUICK_GELU, tmp_path / "qg")

    def edit(data: dict) -> None:
        case_named(data, "rank0-f32")["refused"] = {"error": "DTypeError"}
        del case_named(data, "one-element-f32")["expected"]

    edit_test_json(root, edit)
    report = run_package_tests(wk.load_kernel(root))
    assert report.error is not None and "exactly one of 'expected'" in report.error, report.error
    problems = [p for p in validate_package(root).problems if "exactly one of 'expected'" in p.message]
    assert len(problems) == 2, problems


def test_validate_reports_a_contract_refusal_other_than_the_one_a_case_expects(tmp_path: Path) -> None:
    root = copy_package(QUICK_GELU, tmp_path / "qg")
    edit_test_json(root, lambda data: data["cases"].append(
        refused_case("int-input", "int32", [4], {}, {"error": "RankError"})))
    problems = [p for p in validate_package(root).problems if p.severity == "error"]
    assert [(p.file, p.json_path.rsplit(".", 1)[-1]) for p in problems] == [("test.json", "refused")], problems
    assert "refused with DTypeError" in problems[0].message and "expects RankError" in problems[0].message


def test_a_refused_case_naming_no_variant_of_the_package_is_an_error_not_a_pass(tmp_path: Path) -> None:
    """The unknown variant's own SelectionError had counted as the expected refusal."""
    root = copy_package(QUICK_GELU, tmp_path / "qg")
    case = refused_case("case-no-such-variant", "float32", [5], {"variants": ["vec8"]}, {"error": "SelectionError"})
    edit_test_json(root, lambda data: data["cases"].append(case))
    (result,) = run_package_tests(wk.load_kernel(root), cases=["case-no-such-variant"]).results
    assert result.status == "error" and result.message.startswith("no variant 'vec8' (did you mean 'vec4'?) (the variants are vec4, ")


@pytest.mark.parametrize("refused", [False, True])
def test_a_case_naming_a_misspelt_variant_names_the_one_meant(tmp_path: Path, refused: bool) -> None:
    root = copy_package(QUICK_GELU, tmp_path / "qg")
    """test.json's `"variants": ["scalr"]` said "no variant" without the one meant, on a case that runs
    and on one that must be refused."""
    if refused:
        case = refused_case("misspelt", "float32", [8], {"variants": ["scalr"]}, {"error": "SelectionError"})
        edit_test_json(root, lambda data: data["cases"].append(case))
    else:
        edit_test_json(root, lambda data: data["cases"][0].update(name="misspelt", variants=["scalr"]))
    (result,) = run_package_tests(wk.load_kernel(root), cases=["misspelt"]).results
    assert result.status == "error" and result.message.startswith("no variant 'scalr' (did you mean 'scalar'?) (the variants")


def test_a_refused_case_may_pass_an_unknown_input_with_its_dtype(tmp_path: Path) -> None:
    root = copy_package(QUICK_GELU, tmp_path / "qg")
    case = refused_case("case-extra-input", "float32", [4], {}, {"error": "UnknownInputError", "message": "'W'"})
    case["inputs"]["W"] = {"dtype": "float32", "shape": [4], "generate": {"distribution": "normal", "seed": 1}}
    edit_test_json(root, lambda data: data["cases"].append(case))
    (result,) = run_package_tests(wk.load_kernel(root), cases=["case-extra-input"]).results
    assert (result.status, result.refused) == ("pass", True), result
    assert result.message.startswith("refused: UnknownInputError: argument 'W'")
    assert not [p for p in validate_package(root).problems if p.file == "test.json"]
    del case["inputs"]["W"]["dtype"]  # without a dtype it is the file's error, as in any case
    edit_test_json(root, lambda data: data["cases"].__setitem__(-1, case))
    (result,) = run_package_tests(wk.load_kernel(root), cases=["case-extra-input"]).results
    assert result.status == "error" and "a refused case may name one, with its own 'dtype'" in result.message


def test_validate_flags_refusals_that_cannot_come_and_broad_ones_without_a_message(tmp_path: Path) -> None:
    root = copy_package(QUICK_GELU, tmp_path / "qg")
    cases = [refused_case("case-fine-dtype", "float32", [4], {}, {"error": "DTypeError"}),
             refused_case("case-fine-rank", "float32", [4], {}, {"error": "RankError"}),
             refused_case("case-broad", "float32", [4], {"tunables": {"WORKGROUP_SIZE": 0}}, {"error": "SelectionError"})]
    edit_test_json(root, lambda data: data["cases"].extend(cases))
    report = validate_package(root)
    said = {(p.severity, p.case): p.message for p in report.problems if p.file == "test.json"}
    # the call as the contract saw it: a case that left an input out by mistake shows it
    assert said[("error", "case-fine-dtype")] == ("the contract accepts the call (X (4,); float32), its attributes "
                                                  "and tunables, so it is never refused with DTypeError")  # fmt: skip
    assert said[("error", "case-fine-rank")].endswith("so it is never refused with RankError")
    assert said[("warning", "case-broad")].startswith("no 'message': a call refused with any SelectionError passes")
    assert len(said) == 3 and report.checked["refusedCases"] == 4 + 3


def reduce_sum_with_cases(root: Path, cases: list[dict]) -> Path:
    """A writable copy of tests/packages/demo.ReduceSum whose test.json holds ``cases``."""
    shutil.copytree(PACKAGES_DIR / "demo.ReduceSum", root)
    (root / "test.json").write_text(json.dumps({"cases": cases}, indent=1), encoding="utf-8")
    digests.write_metadata(root)
    return root


def axis_case(name: str, attrs: dict, refused: dict, dtype: str = "float32") -> dict:
    generate = {"distribution": "normal", "seed": 1}
    return {"name": name, "types": {"T": dtype}, "attrs": attrs,
            "inputs": {"X": {"shape": [2, 3, 4], "generate": generate}}, "refused": refused}  # fmt: skip


@pytest.mark.parametrize(("attrs", "refused", "status", "says"), [
    ({"axis": 3}, {"error": "ExpressionError", "message": "axis 3 is out of range for a shape of rank 3"}, "pass",
     "refused: ExpressionError: outputs[0].shape: "),
    ({"axis": -4}, {"error": "ExpressionError"}, "pass", "refused: ExpressionError: "),
    ({"axis": 3}, {"error": "ExpressionError", "message": "axis 4"}, "fail",
     "the case expects ExpressionError whose message contains 'axis 4'"),
    ({"axis": 1}, {"error": "ExpressionError"}, "fail",
     "the call ran (outputs Y [2, 4]); the case expects a refusal: ExpressionError"),
    ({"keepdims": 2}, {"error": "ExpressionError"}, "fail", "refused with SelectionError: "),
    ({"axis": 3}, {"error": "SelectionError"}, "fail", "refused with ExpressionError: "),
])  # fmt: skip
def test_a_case_may_expect_the_expression_error_of_a_call(
    tmp_path: Path, attrs: dict, refused: dict, status: str, says: str
) -> None:
    """demo.ReduceSum's dim(shapes.X, attrs.axis) fails for an axis out of range: the call's
    ExpressionError is a refusal a case may expect, judged as any other."""
    root = reduce_sum_with_cases(tmp_path / "rs", [axis_case("axis-case", attrs, refused)])
    (result,) = run_package_tests(wk.load_kernel(root)).results
    assert (result.status, result.refused) == (status, True), result
    assert says in result.message, result.message


def test_an_expression_error_case_does_not_pass_a_sandbox_refusal(tmp_path: Path) -> None:
    """An expression the sandbox refuses for the call's values is the package's defect: a case
    expecting an ExpressionError fails on it, whatever its message piece."""
    cases = [
        axis_case("any", {"axis": 100}, {"error": "ExpressionError"}),
        axis_case("worded", {"axis": 100}, {"error": "ExpressionError", "message": "refused by the sandbox"}),
    ]
    root = reduce_sum_with_cases(tmp_path / "rs", cases)
    manifest = json.loads((root / "manifest.json").read_text("utf-8"))
    shape = manifest["outputs"][0]["shape"]
    manifest["outputs"][0]["shape"] = f"({shape}) if attrs.axis < 100 else [1] * (attrs.axis * 1000)"
    (root / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    digests.write_metadata(root)
    results = run_package_tests(wk.load_kernel(root)).results
    assert [(r.case, r.status) for r in results] == [("any", "fail"), ("worded", "fail")], results
    for result in results:
        assert result.message.startswith("refused with ExpressionSandboxError: "), result.message
        assert "a sandbox refusal is the package's defect" in result.message


def test_validate_leaves_an_expression_error_to_test_and_wants_its_message(tmp_path: Path) -> None:
    """Whether an expression fails can rest on the device (its limits, its features): validate
    judges only what the contract decides, and warns of a case that names no message."""
    cases = [
        axis_case("worded", {"axis": 3}, {"error": "ExpressionError", "message": "out of range"}),
        axis_case("unworded", {"axis": 3}, {"error": "ExpressionError"}),
        axis_case("runs", {"axis": 1}, {"error": "ExpressionError", "message": "out of range"}),  # test's to fail
        axis_case("int-input", {"axis": 3}, {"error": "ExpressionError"}, dtype="int32"),  # the contract's DTypeError
    ]
    root = reduce_sum_with_cases(tmp_path / "rs", cases)
    report = validate_package(root, gpu=False)
    said = {(p.severity, p.case): p.message for p in report.problems if p.file == "test.json" and p.case}
    assert said.keys() == {("warning", "unworded"), ("error", "int-input")}, said
    assert said[("warning", "unworded")].startswith("no 'message': a call refused with any ExpressionError passes")
    assert said[("error", "int-input")].startswith("the call is refused with DTypeError: ")
    assert report.checked["refusedCases"] == 4


def test_the_table_marks_a_pass_that_was_a_refusal(runner: CliRunner) -> None:
    out = runner.invoke(main, ["test", QUICK_GELU, "--case", "refused-int32-input", "--case", "rank0-f32"])
    assert out.exit_code == 0, out.output
    rows = {line.split("│")[2].strip(): line.split("│")[-2].strip() for line in out.output.splitlines()
            if line.count("│") > 6}  # fmt: skip
    assert rows == {"refused-int32-input": "pass (refused)", "rank0-f32": "pass"}, out.output


def test_a_broken_test_json_is_named_where_variants_look_unexercised(tmp_path: Path) -> None:
    root = copy_package(QUICK_GELU, tmp_path / "qg")
    (root / "bench.json").unlink()  # (its cases would compile every variant)
    edit_test_json(root, lambda data: case_named(data, "rank0-f32").update(refused={"error": "DTypeError"}))
    unexercised = [p.message for p in validate_package(root).problems if "it was not compiled" in p.message]
    assert unexercised and all(m.endswith("(test.json has errors, so its cases were not used)") for m in unexercised)


def test_the_schema_lists_every_error_a_call_can_be_refused_with() -> None:
    from webgpu_kernels import errors
    from webgpu_kernels.case_format import case_schema

    listed = set(case_schema("test")["$defs"]["refused"]["properties"]["error"]["enum"])
    classes = {name for name, cls in vars(errors).items()
               if isinstance(cls, type) and issubclass(cls, (errors.InputError, errors.SelectionError))}  # fmt: skip
    # ExpressionError stands for its subclasses (a BroadcastError outside an output's shape); the
    # sandbox's are a package's defect, which no refused case names (nor matches: test_casefile.py).
    # MissingOutputError comes after a call, from indexing its result by a name it does not hold.
    assert listed == (classes - {"MissingOutputError"}) | {"ExpressionError"}


def test_package_without_test_json_fails(tmp_path: Path, runner: CliRunner) -> None:
    root = copy_package(QUICK_GELU, tmp_path / "qg")
    (root / "test.json").unlink()
    for path in root.glob("*.npy"):
        path.unlink()
    digests.write_metadata(root)
    result = runner.invoke(main, ["test", str(root), QUICK_GELU])
    assert result.exit_code == 1
    assert "the package has no test.json" in result.stdout
    assert "webgpu-kernels expect" not in result.stdout  # no values failed: the hint would send the reader astray
    assert re.search(r"com\.microsoft\.QuickGelu: [1-9][0-9]* passed", result.stdout)  # the other package still ran


def test_package_that_does_not_load_fails(tmp_path: Path, runner: CliRunner) -> None:
    root = copy_package(QUICK_GELU, tmp_path / "qg")
    (root / "manifest.json").write_text("{}", encoding="utf-8")
    result = runner.invoke(main, ["test", str(root), "--json"])
    assert result.exit_code == 1
    data = json.loads(result.stdout)
    assert "cannot load the package" in data["packages"][0]["error"] and "manifest.json" in data["packages"][0]["error"]
    assert data["packages"][0]["kernel"] == str(root)  # no op id to read: the argument names it


def test_a_package_that_does_not_load_keeps_its_name(tmp_path: Path, runner: CliRunner) -> None:
    """A stale digest had renamed the package's report after its folder, origin '?', not isolated
    under --timeout: a CI system's history of it moved to a new name (an author's trial)."""
    root = copy_package(QUICK_GELU, tmp_path / "qg")
    (root / "quick-gelu.wgsl.jinja").write_text("// edited, digest not run\n", encoding="utf-8")
    result = runner.invoke(main, ["test", str(root), "--timeout", "600", "--json"])
    assert result.exit_code == 1, result.output
    (package,) = json.loads(result.stdout)["packages"]
    assert "cannot load the package" in package["error"] and "does not match metadata.json" in package["error"]
    assert (package["kernel"], package["path"], package["origin"], package["isolated"]) == (
        QUICK_GELU, str(root), "local", True)


# --- isolation --------------------------------------------------------------------------------------


def test_isolated_run_matches_in_process(reports) -> None:
    kernel = wk.get_kernel(BIAS_ADD)
    isolated = run_package_tests_isolated(kernel, timeout=120)
    assert isolated.isolated and isolated.error is None and isolated.ok
    here = [(r.case, r.variant, r.status, r.max_abs_error) for r in reports[BIAS_ADD].results]
    there = [(r.case, r.variant, r.status, r.max_abs_error) for r in isolated.results]
    assert there == here


def test_the_isolated_child_tests_the_bytes_the_parent_verified(tmp_path: Path) -> None:
    """The child opened the folder again: a template edited (and digested) after the parent opened
    the package, or a Hub copy's metadata.json deleted, was what it tested, where the in-process run
    tests what was opened."""
    from conftest import copy_package

    root = copy_package(QUICK_GELU, tmp_path / "qg")
    kernel = wk.load_kernel(root)
    _skip_writes(root, "quick-gelu.wgsl.jinja", "y[i] = {{ scalar }}(quick_gelu(f32(x[i])));",
                 "y[i] = {{ scalar }}(2.0 * quick_gelu(f32(x[i])));")  # wrong now, and digested
    (root / "metadata.json").unlink()
    isolated = run_package_tests_isolated(kernel, cases=["tail-3x5-f32"], timeout=120)
    assert isolated.error is None and isolated.ok, isolated
    assert [r.status for r in isolated.results] == ["pass"] * len(isolated.results) and isolated.results


def test_crashing_child_fails_the_package_not_the_command(runner: CliRunner, monkeypatch) -> None:
    monkeypatch.setenv(CRASH_HOOK_ENV, "tail-3x5-f16")
    # the tail cases only (both packages have some): each child compiles a few shaders, not all
    result = runner.invoke(main, ["test", "--isolate", QUICK_GELU, BIAS_ADD, "--case", "tail-*", "--json"])
    assert result.exit_code == 1, result.output
    data = json.loads(result.stdout)
    qg, ba = data["packages"]
    assert qg["ok"] is False and qg["isolated"] is True
    assert qg["error"] == ("the test process exit status 70 while running case 'tail-3x5-f16' on variant "
                           "'vec4_tail' (float16)")  # fmt: skip
    last = qg["results"][-1]
    assert (last["case"], last["variant"], last["status"]) == ("tail-3x5-f16", "vec4_tail", "error")
    # what ran before the crash came back: the three tail cases before it, on both variants
    assert [(r["case"], r["status"]) for r in qg["results"][:-1]] == [
        (case, "pass") for case in ("tail-5x77x13-f32", "tail-3x5-f32", "tail-5x77x13-f16") for _ in range(2)]  # fmt: skip
    assert ba["ok"] is True and ba["isolated"] is True  # the next package still ran, in a child of its own
    assert ba["counts"]["pass"] == len(ba["results"]) > 0


def test_isolation_defaults_to_the_package_needing_trust(runner: CliRunner, monkeypatch) -> None:
    trusted = wk.get_kernel(QUICK_GELU)
    untrusted = wk.Kernel(replace(trusted.package, needs_trust=True))
    monkeypatch.setattr(cli_package, "resolve_kernel", lambda ref: untrusted if ref == "remote" else trusted)
    data = json.loads(runner.invoke(main, ["test", "remote", "local", "--case", "rank0-*", "--json"]).stdout)
    assert [p["isolated"] for p in data["packages"]] == [True, False]
    assert data["ok"] is True
    data = json.loads(runner.invoke(main, ["test", "remote", "--no-isolate", "--case", "rank0-*", "--json"]).stdout)
    assert [p["isolated"] for p in data["packages"]] == [False]


def test_float16_cases_are_skipped_without_shader_f16(monkeypatch: pytest.MonkeyPatch) -> None:
    from types import SimpleNamespace

    from webgpu_kernels import device as device_module
    from webgpu_kernels import kernel as kernel_module
    from webgpu_kernels.program import DeviceInfo

    real = wk.get_device()
    no_f16 = SimpleNamespace(info=DeviceInfo(limits=real.info.limits, features=frozenset()), adapter=real.adapter)
    monkeypatch.setattr(kernel_module, "get_device", lambda adapter=None: no_f16)
    monkeypatch.setattr(device_module, "get_device", lambda adapter=None: no_f16)
    report = run_package_tests(wk.get_kernel(QUICK_GELU), cases=["rank0-f16"])  # (no GPU work on the fake device)
    assert [(r.case, r.status) for r in report.results] == [("rank0-f16", "skip")]
    assert report.results[0].message == "this adapter has no shader-f16 feature"
    assert report.ok


def test_a_run_where_every_case_skipped_does_not_say_all_passed(capsys: pytest.CaptureFixture[str]) -> None:
    """Nothing verified is no failure (exit 0, as pytest), but the summary must not say "all passed"."""
    from webgpu_kernels.cli_package import _print_test_reports
    from webgpu_kernels.run_results import PackageReport

    report = PackageReport(kernel=QUICK_GELU, path="-", origin="embedded", isolated=False,
                           results=[RunResult(QUICK_GELU, "rank0-f16", None, "float16", "skip", message="no f16")])  # fmt: skip
    _print_test_reports([report])
    out = capsys.readouterr().out
    assert "nothing ran: every case was skipped" in out and "all passed" not in out
    assert report.ok


def test_a_run_with_some_skipped_says_how_many(capsys: pytest.CaptureFixture[str]) -> None:
    """"all passed" alone had read as every case run where float16's were skipped."""
    from webgpu_kernels.cli_package import _print_test_reports
    from webgpu_kernels.run_results import PackageReport

    report = PackageReport(kernel=QUICK_GELU, path="-", origin="embedded", isolated=False,
                           results=[RunResult(QUICK_GELU, "rank0-f32", None, "float32", "pass"),
                                    RunResult(QUICK_GELU, "rank0-f16", None, "float16", "skip", message="no f16")])  # fmt: skip
    _print_test_reports([report])
    assert "all passed, 1 skipped" in capsys.readouterr().out
    _print_test_reports([report], strict=True)
    assert "FAILED (--strict: 1 skipped)" in capsys.readouterr().out


def test_strict_fails_a_run_with_a_skip_in_every_report(tmp_path: Path, runner: CliRunner, gl_device) -> None:
    """A CI job that must run every case had to parse the JUnit counts itself: on an adapter
    without shader-f16 the float16 cases skip and the run exits 0. --strict makes a skip fail:
    exit 1, the summary, --json's ok and the JUnit report (a failure, not a skip) all say so."""
    import xml.etree.ElementTree as ET

    args = ["--adapter", "gl", "test", QUICK_GELU, "--case", "rank0-f*"]
    lenient = runner.invoke(main, args)
    assert lenient.exit_code == 0 and "all passed, 1 skipped" in lenient.stdout, lenient.output
    junit = tmp_path / "r.xml"
    strict = runner.invoke(main, [*args, "--strict", "--junit", str(junit)])
    assert strict.exit_code == 1 and "FAILED (--strict: 1 skipped)" in strict.stdout, strict.output
    root = ET.parse(junit).getroot()
    assert (root.get("failures"), root.get("skipped")) == ("1", "0") and int(root.get("tests")) >= 2
    failure = root.find(".//testcase/failure")
    assert failure is not None and "--strict" in failure.get("message") and "shader-f16" in failure.get("message")
    data = json.loads(runner.invoke(main, [*args, "--strict", "--json"]).stdout)
    assert (data["ok"], data["strict"]) == (False, True) and data["packages"][0]["ok"] is True
    assert json.loads(runner.invoke(main, [*args, "--json"]).stdout)["ok"] is True
    # nothing skipped: --strict passes
    passed = runner.invoke(main, ["--adapter", "gl", "test", QUICK_GELU, "--case", "rank0-f32", "--strict"])
    assert passed.exit_code == 0 and "all passed" in passed.stdout, passed.output


def test_a_case_filter_that_matches_nothing_fails(runner: CliRunner) -> None:
    """`test --case 'nomatch*'` said "all passed" with exit status 0: a typo in a CI filter ran nothing."""
    result = runner.invoke(main, ["test", QUICK_GELU, "--case", "nomatch*"])
    assert result.exit_code == 1 and "no test.json case matches --case nomatch*" in result.stdout, result.output
    data = json.loads(runner.invoke(main, ["test", QUICK_GELU, "--case", "nomatch*", "--json"]).stdout)
    assert data["ok"] is False


def test_run_reports_the_variant_a_stored_tuning_result_picks(runner: CliRunner, tmp_path, monkeypatch) -> None:
    """`run` passes tunables={} and reported the selection of explain(); a plain call ran the tuned plan."""
    from webgpu_kernels import tuning

    monkeypatch.setenv(tuning.CACHE_ENV, str(tmp_path / "tuning"))
    tuning._caches.clear()
    device = wk.get_device()
    cache = tuning.cache_for(device.adapter.name, device.adapter.backend)
    cache.record(wk.get_kernel(QUICK_GELU).tuning_key, {"T": "float32"}, {"X": (4096,)},
                 tuning.TunedChoice("scalar", {"WORKGROUP_SIZE": 64}, 1e-5))  # fmt: skip
    try:
        data = json.loads(runner.invoke(main, ["run", QUICK_GELU, "-i", "X=4096:f32", "--json"]).stdout)
        assert data["variant"] == "scalar" and data["tuned"] is True
        plain = json.loads(runner.invoke(main, ["run", QUICK_GELU, "-i", "X=8192:f32", "--json"]).stdout)
        assert plain["tuned"] is False  # another shape class: no entry
    finally:
        tuning._caches.clear()


def test_the_results_table_names_the_output_with_the_largest_error(runner: CliRunner) -> None:
    """One column holds every output's error: with several outputs (demo.LayerNorm's Y, Mean and
    InvStdDev) it says whose it is; with one (QuickGelu) nothing is added."""
    from conftest import PACKAGES_DIR

    out = " ".join(runner.invoke(main, ["test", str(PACKAGES_DIR / "demo.LayerNorm"), "--case", "nobias-3x50-f32"]).output.split())
    assert re.search(r"onepass_nobias │ float32 │ [0-9.e-]+ \((Y|Mean|InvStdDev)\) │ [0-9.e-]+ \((Y|Mean|InvStdDev)\)", out), out
    single = " ".join(runner.invoke(main, ["test", QUICK_GELU, "--case", "tail-3x5-f32"]).output.split())
    assert "(Y)" not in single and "tail-3x5-f32" in single


# --- elements the kernel never writes -----------------------------------------------------------------


def _skip_writes(root: Path, template: str, old: str, new: str) -> None:
    path = root / template
    text = path.read_text("utf-8")
    assert old in text
    path.write_text(text.replace(old, new), encoding="utf-8")
    digests.write_metadata(root)


def test_an_unwritten_tail_fails_although_the_pooled_buffer_holds_the_answer(tmp_path: Path) -> None:
    """A naive MatMul that never wrote Y's last element passed: its output buffer came from the
    pool holding the tiled variant's correct result, run just before on the same case."""
    import shutil

    from conftest import PACKAGES_DIR

    root = Path(shutil.copytree(PACKAGES_DIR / "demo.MatMul", tmp_path / "mm"))
    _skip_writes(root, "matmul-naive.wgsl.jinja", "if (i >= params.count) {", "if (i + 1u >= params.count) {")
    report = run_package_tests(wk.load_kernel(root), cases=["tails-3x17x33-19-f32"])
    by = {r.variant: r for r in report.results}
    assert by["tiled"].status == "pass"
    assert by["naive"].status == "fail", by["naive"].message
    assert "first at [2, 16, 18]: got nan" in by["naive"].message and "0xFF bytes" in by["naive"].message


def test_an_unwritten_element_fails_where_nan_is_expected(tmp_path: Path) -> None:
    """Where NaN is expected, a NaN-filled buffer cannot tell an unwritten element: it is run again
    with zeros."""
    root = copy_package(QUICK_GELU, tmp_path / "qg")
    _skip_writes(root, "quick-gelu.wgsl.jinja", "  y[i] = {{ scalar }}(quick_gelu(f32(x[i])));\n{% endif %}",
                 "  if (i == 0u && params.count == 20u) {\n    return;\n  }\n"
                 "  y[i] = {{ scalar }}(quick_gelu(f32(x[i])));\n{% endif %}")  # element 0 of specials-*: NaN
    report = run_package_tests(wk.load_kernel(root), cases=["specials-f32"])
    by = {r.variant: r for r in report.results}
    assert by["vec4"].status == "pass" and by["vec4_tail"].status == "pass"
    assert by["scalar"].status == "fail", by["scalar"].message
    assert "got 0.0, expected nan" in by["scalar"].message
    assert "(1 failing element still holds the 0x00 bytes" in by["scalar"].message, by["scalar"].message


def test_a_wrong_value_the_kernel_wrote_is_not_blamed_on_the_fill(tmp_path: Path) -> None:
    """The note about the fill bytes came with every mismatch, also where the kernel wrote a wrong
    number: it is for elements that still hold the fill."""
    root = copy_package(QUICK_GELU, tmp_path / "qg")
    _skip_writes(root, "quick-gelu.wgsl.jinja", "  y[i] = {{ scalar }}(quick_gelu(f32(x[i])));\n{% endif %}",
                 "  y[i] = {{ scalar }}(2.0 * quick_gelu(f32(x[i])));\n{% endif %}")
    by = {r.variant: r for r in run_package_tests(wk.load_kernel(root), cases=["tail-3x5-f32"]).results}
    assert by["scalar"].status == "fail" and "filled with" not in by["scalar"].message, by["scalar"].message
    assert by["vec4_tail"].status == "pass"


def test_a_written_value_with_the_fills_bytes_is_not_called_unwritten(tmp_path: Path) -> None:
    """A Transpose that ignores perm writes every element, but one of them is the data's -1, whose
    bytes are the 0xFF fill: the note said "the kernel does not write them". A second
    run with another fill tells the two apart."""
    import shutil

    from conftest import PACKAGES_DIR

    root = Path(shutil.copytree(PACKAGES_DIR / "demo.Transpose", tmp_path / "t"))
    _skip_writes(root, "transpose-general.wgsl.jinja", "  y[u] = x[source(u)];", "  y[u] = x[u];")
    (run,) = run_package_tests(wk.load_kernel(root), cases=["specials-3x4-i32"]).results
    assert run.status == "fail" and "10 of 12 elements" in run.message, run.message
    assert "filled with" not in run.message, run.message


def _padding_summer(write_package) -> Path:
    """demo.PadSum: Y = the float32 sum of a float16 X read as u32 words (no shader-f16). Variant
    ``unmasked`` adds both halves of every word, the last one's second half too, which for an odd
    count is the binding's padding; ``masked`` leaves that half out."""
    params = {"name": "params", "semantic": "kernel.params", "buffer": {"type": "uniform"},
              "struct": {"name": "Params", "fields": [{"name": "n", "type": "u32", "value": "numel(shapes.X)"},
                                                      {"name": "words", "type": "u32",
                                                       "value": "(numel(shapes.X) + 1) // 2"}]}}
    bindings = [{"name": "x", "arg": "X", "buffer": {"type": "read-only-storage"}, "elementType": "u32"},
                {"name": "y", "arg": "Y", "buffer": {"type": "storage"}, "elementType": "f32"}, params]
    manifest = {
        "domain": "demo", "name": "PadSum", "inputs": [{"role": "X", "dtype": "T", "rank": 1}],
        "outputs": [{"role": "Y", "dtype": "U", "rank": 1, "shape": "(1,)"}],
        "typeConstraints": {"T": ["float16"], "U": ["float32"]},
        "variants": [{"id": vid, "priority": priority, "passes": [{"id": "main", "shader": "sum.wgsl.jinja",
                      "bindings": bindings, "dispatch": {"threads": "1", "workgroupSize": "1"}}],
                      "constants": {"masked": vid == "masked"}}
                     for vid, priority in (("unmasked", 20), ("masked", 10))],
    }  # fmt: skip
    template = ("{{ declarations }}\n@compute @workgroup_size({{ workgroupSize }})\n"
                "fn {{ entryPoint }}({{ entryParams }}) {\n  var s = 0.0;\n"
                "  for (var w = 0u; w < params.words; w++) {\n    let h = unpack2x16float(x[w]);\n    s += h.x;\n"
                "{% if masked %}    if (2u * w + 1u < params.n) { s += h.y; }\n{% else %}    s += h.y;\n{% endif %}"
                "  }\n  y[0] = s;\n}\n")
    root = write_package(manifest, {"sum.wgsl.jinja": template})
    tests = {"cases": [{"name": f"x{n}", "types": {"T": "float16"},
                        "inputs": {"X": {"shape": [n], "values": list(range(1, n + 1))}},
                        "expected": {"Y": {"dtype": "float32", "shape": [1], "values": [n * (n + 1) / 2]}}}
                       for n in (3, 4, 1)]}  # fmt: skip
    (root / "test.json").write_text(json.dumps(tests), encoding="utf-8")
    return root


def test_an_input_s_padding_is_poison_so_a_kernel_reading_it_fails(write_package) -> None:
    """`test` filled the pooled buffers with 0xFF, but a NumPy input of a byte count not a multiple
    of 4 (3 float16) is uploaded zero-padded, so a kernel that summed its last word's padding half
    passed: every input's binding padding now holds 0xFF bytes (NaN) in every case, and such a
    kernel fails where the padding is part of a word it reads (3 and 1 elements, not 4)."""
    import numpy as np

    kernel = wk.load_kernel(_padding_summer(write_package))
    by = {(r.case, r.variant): r for r in run_package_tests(kernel).results}
    assert {k: r.status for k, r in by.items()} == {
        ("x3", "unmasked"): "fail", ("x4", "unmasked"): "pass", ("x1", "unmasked"): "fail",
        ("x3", "masked"): "pass", ("x4", "masked"): "pass", ("x1", "masked"): "pass"}, [r.message for r in by.values()]
    assert "got nan" in by[("x3", "unmasked")].message, by[("x3", "unmasked")].message
    # an ordinary call still uploads as before (zeros there): the unmasked kernel "works" on it
    got = kernel({"X": np.arange(1, 4, dtype=np.float16)}, variant="unmasked")["Y"]
    assert got.tolist() == [6.0]


# --- the command's own arguments ------------------------------------------------------------------


def test_a_timeout_runs_isolated_and_says_it_timed_out(runner: CliRunner, monkeypatch) -> None:
    """--timeout without --isolate had been ignored (the run went to its end, exit 0), and an
    isolated timeout read as "killed by signal SIGKILL", as a driver crash or the OOM killer reads.
    The child stalls at its first case (STALL_HOOK_ENV), so the 1 s timeout is reached on any machine."""
    from webgpu_kernels.package_tests import STALL_HOOK_ENV

    from conftest import PACKAGES_DIR

    monkeypatch.setenv(STALL_HOOK_ENV, "1")

    result = runner.invoke(main, ["test", str(PACKAGES_DIR / "demo.Gather"), "--timeout", "1", "--json"])
    assert result.exit_code == 1, result.output
    (package,) = json.loads(result.stdout)["packages"]
    assert package["isolated"] is True
    assert package["error"].startswith("the test process ran past its 1 s timeout (--timeout) and was stopped")
    assert "SIGKILL" not in package["error"]
    refused = runner.invoke(main, ["test", QUICK_GELU, "--timeout", "5", "--no-isolate"])
    assert refused.exit_code == 2 and "--timeout needs the child process" in refused.output


def test_every_kernel_argument_is_opened_before_any_test_runs(runner: CliRunner, monkeypatch) -> None:
    """A mistyped last KERNEL was refused only after the others' tests had run."""
    monkeypatch.setattr(cli_package, "run_package_tests", lambda *a, **k: pytest.fail("ran before refusing"))
    result = runner.invoke(main, ["test", QUICK_GELU, "nope.Op"])
    assert result.exit_code == 2 and "no embedded kernel 'nope.Op'" in result.output


@pytest.mark.parametrize("error", ["hub", "trust"])
def test_a_hub_kernel_that_cannot_be_fetched_or_is_not_trusted_is_a_usage_error(runner, monkeypatch, error) -> None:
    """Exit 2, as `info` gives: they had been failed packages (exit 1), which CI reads as a regression."""
    exc = (wk.errors.HubError("no kernel repository 'org/nope' on the Hub") if error == "hub"
           else wk.errors.TrustError("refusing to load 'org/op': pass trust_remote_code=True",
                                      location="org/op", reason="outside the organisation"))  # fmt: skip

    def resolve(ref):
        raise exc

    monkeypatch.setattr(cli_package, "resolve_kernel", resolve)
    result = runner.invoke(main, ["test", "org/op"])
    assert result.exit_code == 2 and str(exc) in " ".join(result.output.split()), result.output


def test_a_case_filter_over_several_packages_fails_only_when_it_matches_nothing(runner: CliRunner) -> None:
    """`test --case alpha-1.0` (a QuickGelu case) had failed BiasAdd for having none."""
    data = json.loads(runner.invoke(main, ["test", "--case", "alpha-1.0", "--json"]).stdout)
    assert data["ok"] is True
    counts = {p["kernel"]: p["counts"]["pass"] for p in data["packages"]}
    assert counts[QUICK_GELU] > 0 and counts[BIAS_ADD] == 0
    result = runner.invoke(main, ["test", "--case", "no-such-case", "--json"])
    assert result.exit_code == 1
    assert all("no test.json case matches --case no-such-case" in p["error"] for p in json.loads(result.stdout)["packages"])


def test_a_template_that_does_not_compile_is_reported_once_and_counted_as_errors(runner: CliRunner,
                                                                                tmp_path: Path) -> None:  # fmt: skip
    """Every run of a shader that does not compile fails alike: the table had repeated the compiler
    output per run (54 copies, 779 lines) and its line called the errors 'failed' while --json and
    --junit count them apart (an author's trial)."""
    root = copy_package(QUICK_GELU, tmp_path / "qg")
    template = root / "quick-gelu.wgsl.jinja"
    template.write_text(template.read_text("utf-8").replace("@compute", "@compute oops", 1), encoding="utf-8")
    digests.write_metadata(root)
    result = runner.invoke(main, ["test", str(root), "--case", "rank0-f32", "--case", "tail-3x5-f32"])
    assert result.exit_code == 1, result.output
    errors = [line for line in result.stdout.splitlines() if line.startswith("ERROR ")]
    assert len(errors) >= 2, result.stdout
    repeats = result.stdout.count("same message as ")
    variants = {line.rsplit("[", 1)[1] for line in errors}  # the compiler's output names the variant's WGSL
    assert repeats == len(errors) - len(variants) > 0  # each message once, in full, at the first run that had it
    assert re.search(rf"{re.escape(QUICK_GELU)}: 0 passed, 0 failed, {len(errors)} errors, 0 skipped", result.stdout)


def test_a_timeout_stops_a_shader_that_runs_on(tmp_path: Path, runner: CliRunner, monkeypatch: pytest.MonkeyPatch) -> None:
    """--timeout had only been seen to stop a child before its runs began: here the child is inside
    a run, waiting on a shader that would take many minutes, and the run in progress is the error
    that says so. (lavapipe ends an invocation's loops after 65,535 iterations in all
    (scripts/loop_cap_probe.py), so the time comes from 2M invocations of a costly loop: 256K of
    them took 101 s in all on this 2-core machine. A GPU would run all 4e9 iterations: lavapipe only.)

    The timeout is reached on a readiness signal, not after a fixed margin: the parent's clock
    (package_tests' time.monotonic, which the deadline reads) runs true until the child's "start"
    event for the case, and jumps past the 25 s deadline RUN_SECONDS after it. The whole run of
    this case with a 1-iteration loop (inputs, compile, dispatch, readback, compare) took 0.57 s
    (`LP_NUM_THREADS=1 scripts/runaway_shader.py 1 120`), so the child is waiting on the shader
    by then; a fixed 25 s from the spawn had made this test take 25 s (the run began about 2.5 s
    after the spawn unloaded, later under load). The deadline on the true clock is
    test_a_timeout_runs_isolated_and_says_it_timed_out's."""
    import time

    import numpy as np

    from webgpu_kernels import package_tests

    if "llvmpipe" not in wk.get_device().adapter.label():
        pytest.skip("sized for lavapipe, whose loop cap bounds the shader")

    root = copy_package(QUICK_GELU, tmp_path / "slow")
    (root / "metadata.json").unlink()
    template = root / "quick-gelu.wgsl.jinja"
    text = template.read_text(encoding="utf-8")
    scalar = "fn quick_gelu(v: f32) -> f32 {\n  return v / (1.0 + exp(-ALPHA * v));\n}"
    assert scalar in text
    template.write_text(text.replace(scalar, "fn quick_gelu(v: f32) -> f32 {\n  var acc = v;\n"
                                     "  for (var k = 0u; k < 4000000000u; k++) {\n"
                                     "    acc = sin(acc) + cos(acc * 1.5) + exp(-abs(acc)) + sqrt(abs(acc) + 1.0);\n  }\n"
                                     "  return acc;\n}"), encoding="utf-8")  # fmt: skip
    np.save(root / "big.Y.npy", np.zeros(2_000_000, np.float32))  # within test.json's 8 MiB a file
    (root / "test.json").write_text(json.dumps({"cases": [{
        "name": "big", "types": {"T": "float32"}, "variants": ["scalar"],
        "inputs": {"X": {"shape": [2_000_000], "generate": {"distribution": "normal", "seed": 1}}},
        "expected": {"Y": {"file": "big.Y.npy"}}}]}), encoding="utf-8")  # fmt: skip
    monkeypatch.setenv("LP_NUM_THREADS", "1")  # the child's lavapipe on one core: the suite's other tests keep the rest

    # 2 s into the run: the test needs the stop to land inside the run (the shader or the case's work
    # before it), which 2 s does as 5 s did (7.5 s -> 3.9 s of a cold suite's worker time).
    run_seconds, timeout = 2.0, 25.0
    began: list[float] = []  # the true monotonic time of the child's "start" event
    real_run_in_child, true_clock = package_tests.run_in_child, time.monotonic
    spawned = true_clock()

    def watched(target, payload, handle, *, timeout=None):
        def seen(message) -> None:
            if message[:2] == ("progress", "start") and not began:
                began.append(true_clock())
            handle(message)

        return real_run_in_child(target, payload, seen, timeout=timeout)

    class Clock:
        """time as package_tests sees it: monotonic jumps by the timeout once the run has gone on
        run_seconds (or 120 s after the spawn without a start: the test then fails, not hangs)."""

        def __getattr__(self, name: str):
            return getattr(time, name)

        def monotonic(self) -> float:
            now = true_clock()
            ready = (began and now - began[0] >= run_seconds) or now - spawned >= 120
            return now + timeout if ready else now

    monkeypatch.setattr(package_tests, "run_in_child", watched)
    monkeypatch.setattr(package_tests, "time", Clock())
    result = runner.invoke(main, ["test", str(root), "--timeout", f"{timeout:g}", "--json"])
    assert result.exit_code == 1, result.output
    assert began, "the child never started its run"
    (package,) = json.loads(result.stdout)["packages"]
    assert package["error"], package
    assert package["error"].startswith("the test process ran past its 25 s timeout (--timeout) and was stopped")
    (run,) = package["results"]
    assert (run["case"], run["variant"], run["status"]) == ("big", "scalar", "error")
    assert "during this run" in run["message"]
    assert run["seconds"] > run_seconds - 0.5  # stopped inside the run, run_seconds after it began


def test_a_case_whose_input_is_a_data_file_shows_the_files_dtype(tmp_path: Path) -> None:
    """A case whose dtype only its data file gives (no `types`, no `dtype`: the file's is the
    input's) had '-' in the dtype column, also on the row of a float16 case skipped for want of
    shader-f16."""
    import numpy as np

    root = copy_package(QUICK_GELU, tmp_path / "qg")
    np.save(root / "x16.npy", np.array([1.0, -2.0, 0.5], dtype=np.float16))

    def add(data: dict) -> None:
        data["cases"] = [{"name": "from-file", "inputs": {"X": {"file": "x16.npy"}},
                          "expected": {"Y": {"file": "x16.npy"}}}]  # (compared or not: the label is the point)

    edit_test_json(root, add)
    report = run_package_tests(wk.load_kernel(root))
    assert report.results and {r.dtype for r in report.results} == {"float16"}, [r.as_dict() for r in report.results]


def test_a_child_dying_in_a_refused_case_counts_that_run_once(monkeypatch) -> None:
    """A refused case without ``variants`` runs once, with no variant: its "start" event had
    named the variant "-" (the progress bar's text), so the dead child's run was reported as an
    error of variant "-" and again as a run never reached, two testcases for one run."""
    monkeypatch.setenv(CRASH_HOOK_ENV, "refused-int32-input")
    report = run_package_tests_isolated(wk.get_kernel(QUICK_GELU), cases=["refused-int32-input"], timeout=120)
    assert [(r.case, r.variant, r.status) for r in report.results] == [("refused-int32-input", None, "error")]
    assert report.not_run == []
    assert report.error == "the test process exit status 70 while running case 'refused-int32-input' (int32)"


def test_a_child_dying_between_runs_blames_no_finished_run(monkeypatch) -> None:
    """After a run's result the child builds the next case's inputs and expected values before it
    says which run starts: a child that died (or timed out) there had its death reported "while
    running" the run that had already passed."""
    from webgpu_kernels import package_tests

    run = {"case": "tail-3x5-f32", "variant": "scalar", "dtype": "float32"}
    passed = RunResult(QUICK_GELU, "tail-3x5-f32", "scalar", "float32", "pass")

    def child(target, payload, handle, *, timeout=None):
        handle(("progress", "plan", [run, {**run, "case": "tail-3x5-f16", "dtype": "float16"}]))
        handle(("progress", "start", run))
        handle(("result", passed.as_dict()))
        return False, "ran past its 5 s timeout (--timeout) and was stopped"

    monkeypatch.setattr(package_tests, "run_in_child", child)
    report = run_package_tests_isolated(wk.get_kernel(QUICK_GELU), timeout=5)
    assert [(r.case, r.status) for r in report.results] == [("tail-3x5-f32", "pass")]
    assert report.error == "the test process ran past its 5 s timeout (--timeout) and was stopped"
    assert [(r.case, r.variant) for r in report.not_run] == [("tail-3x5-f16", "scalar")]


def test_a_test_json_saved_during_an_isolated_run_leaves_one_version_in_the_report(
    tmp_path: Path, runner: CliRunner, monkeypatch
) -> None:
    """An author's folder (no metadata.json: test.json is read from disk) saved while the child ran:
    the parent had read test.json twice after the child ended, once for the results' order and once
    for a plan-less child's runs not reached, so a save between them mixed two versions. Both come
    from test.json as the command first read it."""
    from webgpu_kernels import package_tests

    root = copy_package(QUICK_GELU, tmp_path / "qg")
    (root / "metadata.json").unlink()
    refused = RunResult(QUICK_GELU, "refused-workgroup-size-0", None, "float32", "error",
                                      message="refused while planning")  # fmt: skip

    def child(target, payload, handle, *, timeout=None):
        # The author reorders the cases and drops one, then the child dies before its plan, having
        # sent the results of two cases refused while planning (in the new file's order).
        path = root / "test.json"
        data = json.loads(path.read_text("utf-8"))
        data["cases"] = [c for c in reversed(data["cases"]) if c["name"] != "refused-int32-input"]
        path.write_text(json.dumps(data), encoding="utf-8")
        handle(("result", refused.as_dict()))
        handle(("result", replace(refused, case="tail-3x5-f16", dtype="float16").as_dict()))
        return False, "killed by signal SIGSEGV"

    monkeypatch.setattr(package_tests, "run_in_child", child)
    result = runner.invoke(main, ["test", "--isolate", str(root), "--case", "tail-3x5-*", "--case", "refused-*",
                                  "--json"])  # fmt: skip
    assert result.exit_code == 1, result.output
    (package,) = json.loads(result.stdout)["packages"]
    assert package["error"] == "the test process killed by signal SIGSEGV"
    assert [r["case"] for r in package["results"]] == ["tail-3x5-f16", "refused-workgroup-size-0"]
    assert [(r["case"], r["variant"]) for r in package["notRun"]] == [
        ("tail-3x5-f32", None), ("refused-int32-input", None), ("refused-alpha-not-a-number", None),
        ("refused-vec4-on-5-elements", "vec4"),
    ]  # fmt: skip


def test_cases_run_and_are_reported_in_test_json_order(tmp_path: Path) -> None:
    """Cases expecting a refusal had all run and been reported first, and a case refused while
    planning (an unknown attribute) before every run: the order is test.json's, as its author wrote it."""
    root = copy_package(QUICK_GELU, tmp_path / "qg")
    order = ["refused-int32-input", "tail-3x5-f32", "bad-attr", "refused-vec4-on-5-elements", "one-element-f32"]

    def edit(data: dict) -> None:
        bad = {**case_named(data, "one-element-f32"), "name": "bad-attr", "attrs": {"alhpa": 1.0}}
        data["cases"] = [bad if name == "bad-attr" else case_named(data, name) for name in order]

    edit_test_json(root, edit)
    events: list[tuple[str, object]] = []
    for run in (run_package_tests, run_package_tests_isolated):
        events.clear()
        report = run(wk.load_kernel(root), progress=lambda kind, value: events.append((kind, value)))
        seen = [r.case for r in report.results]
        assert list(dict.fromkeys(seen)) == order, (run.__name__, seen)
        assert [r.status for r in report.results if r.case == "bad-attr"] == ["error"]
        started = [v["case"] for k, v in events if k == "start"]
        assert list(dict.fromkeys(started)) == [n for n in order if n != "bad-attr"], (run.__name__, started)
        (plan,) = [v for k, v in events if k == "plan"]
        assert list(dict.fromkeys(p["case"] for p in plan)) == [n for n in order if n != "bad-attr"]


def test_a_case_s_runs_follow_the_manifest_s_variant_order_refused_cases_too(tmp_path: Path) -> None:
    """cli.md: "each case's runs in the manifest's variant order". A case expecting a refusal had run
    (and been listed) in the order its `variants` names them, the others in the manifest's."""
    root = copy_package(QUICK_GELU, tmp_path / "qg")
    named = ["scalar", "vec4"]  # the manifest's order is vec4, vec4_tail, scalar

    def edit(data: dict) -> None:
        data["cases"].append(refused_case("named-order-refused", "int32", [8], {"variants": named}, {"error": "DTypeError"}))

    edit_test_json(root, edit)
    for run in (run_package_tests, run_package_tests_isolated):
        report = run(wk.load_kernel(root), cases=["named-order-refused"])
        assert [r.variant for r in report.results] == ["vec4", "scalar"], (run.__name__, report.results)
        assert report.ok, report.results


# --- coverage audit -------------------------------------------------------------------------


def test_a_case_no_variant_accepts_fails_naming_each_variants_reason(tmp_path: Path) -> None:
    root = copy_package(QUICK_GELU, tmp_path / "qg")
    manifest = json.loads((root / "manifest.json").read_text("utf-8"))
    for variant in manifest["variants"]:  # none takes a single element now
        variant["when"] = [*variant["when"], "numel(shapes.X) > 1"]
    (root / "manifest.json").write_text(json.dumps(manifest, indent=1), encoding="utf-8")
    digests.write_metadata(root)
    report = run_package_tests(wk.load_kernel(root), cases=["one-element-f32", "tail-3x5-f32"])
    [result] = [r for r in report.results if r.case == "one-element-f32"]
    assert result.status == "fail" and result.variant is None
    assert result.message.startswith("no variant accepts the case (vec4: ")
    assert "; vec4_tail: " in result.message and "; scalar: " in result.message and "numel(shapes.X) > 1" in result.message
    assert {r.status for r in report.results if r.case == "tail-3x5-f32"} == {"pass"}
    assert not report.ok


def test_expected_values_that_cannot_be_built_are_an_error_for_each_accepting_variant(tmp_path: Path) -> None:
    root = copy_package(QUICK_GELU, tmp_path / "qg")
    edit_test_json(root, lambda data: case_named(data, "tail-3x5-f32")["expected"]["Y"].update(values=[1.0] * 14))
    report = run_package_tests(wk.load_kernel(root), cases=["tail-3x5-f32"])
    by = {r.variant: r for r in report.results}
    assert set(by) == {"vec4_tail", "scalar"}  # vec4 rejects 15 elements
    for result in by.values():
        assert result.status == "error"
        assert re.search(r"test\.json cases\[\d+\]\.expected\.Y\.values: 14 values .* for shape \[3, 5\]",
                         result.message), result.message  # fmt: skip
    assert not report.ok


def test_describe_exit_names_a_signal_by_name_where_it_has_one() -> None:
    """What a child's death reads as: by signal name (SIGKILL: a timeout or the OOM killer), by
    number where the number names no signal, else the exit status. Every code from -300 to 300
    (hypothesis had drawn 100 of these 601, 1.9 s with its start-up; all of them take microseconds)."""
    import signal

    from webgpu_kernels.package_tests import describe_exit

    assert describe_exit(None) == "did not exit"
    assert describe_exit(-signal.SIGKILL) == "killed by signal SIGKILL"
    assert describe_exit(-signal.SIGSEGV) == "killed by signal SIGSEGV"
    assert describe_exit(-200) == "killed by signal 200"  # no signal has that number

    names = {s.value: s.name for s in signal.Signals}
    for code in range(-300, 301):
        if code >= 0:
            assert describe_exit(code) == f"exit status {code}"
        else:
            assert describe_exit(code) == f"killed by signal {names.get(-code, -code)}"
