"""docs/package-files.md as a contract: the checkable claims about metadata.json, test.json and
bench.json that no other test pinned. Organised by the doc's headings; each test's docstring quotes
the line it pins. Packages are copies of tests/packages/demo.ScaleShift (T: float32 or float16)
given a test.json; `validate` runs without the GPU stage, so no pipeline is built."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import numpy as np
import pytest

import webgpu_kernels as wk
from webgpu_kernels import casefile, digests
from webgpu_kernels.casefile import CaseFileError
from webgpu_kernels.cli_bench import bench_cases
from webgpu_kernels.comparison import Tolerance, compare
from webgpu_kernels.manifest import parse_manifest
from webgpu_kernels.validation import validate_package

from conftest import PACKAGES_DIR

SCALE_SHIFT = json.loads((PACKAGES_DIR / "demo.ScaleShift" / "manifest.json").read_text())
SCALE_SHIFT_WGSL = (PACKAGES_DIR / "demo.ScaleShift" / "scale-shift.wgsl.jinja").read_text()
X4 = {"X": {"shape": [4], "values": [1, 2, 3, 4]}}


def case(name: str = "c", **fields) -> dict:
    return {"name": name, "types": {"T": "float32"}, "inputs": X4,
            "expected": {"Y": {"shape": [4], "values": [1, 2, 3, 4]}}, **fields}


@pytest.fixture
def package(write_package):
    """``package(test_json, manifest_change=None) -> Path``: demo.ScaleShift with that test.json."""

    def make(test_json: dict | None, manifest_change=None) -> Path:
        manifest = copy.deepcopy(SCALE_SHIFT)
        if manifest_change is not None:
            manifest_change(manifest)
        files = {"scale-shift.wgsl.jinja": SCALE_SHIFT_WGSL}
        if test_json is not None:
            files["test.json"] = json.dumps(test_json)
        return write_package(manifest, files)

    return make


def warnings_of(path: Path) -> list[str]:
    return [f"{p.file} {p.json_path}: {p.message}" for p in validate_package(path, gpu=False).warnings]


# --- metadata.json: `webgpu-kernels digest PATH` ---------------------------------------------------


def test_a_new_metadata_takes_its_version_from_since_version_and_keeps_it_after(package):
    """Doc: "An existing `metadata.json` keeps its `version`, `description` and `provenance`; a new one
    takes `version` from `sinceVersion` and `provenance: {"generator": "webgpu-kernels <version> digest"}`" """
    root = package(None, lambda m: m.update(sinceVersion=3))
    metadata, _ = digests.write_metadata(root)
    assert metadata["version"] == 3
    assert metadata["provenance"] == {"generator": f"webgpu-kernels {wk.__version__} digest"}
    kept = dict(metadata, version=5, description="mine", provenance={"license": "MIT"})
    (root / "metadata.json").write_text(json.dumps(kept))
    again, _ = digests.write_metadata(root)
    assert (again["version"], again["description"], again["provenance"]) == (5, "mine", {"license": "MIT"})


def test_a_contract_version_below_since_version_is_no_problem(package):
    """Doc: "After that the two are independent ... so a version below `sinceVersion` is no error
    (`validate` says nothing ...)" """
    root = package(None, lambda m: m.update(sinceVersion=13))
    digests.write_metadata(root, version=1)
    report = validate_package(root, gpu=False)
    assert report.ok and not [p for p in report.problems if p.file == "metadata.json" or "ersion" in p.message], \
        [p.message for p in report.problems]
    assert digests.kept_version_note(root, 1) is not None and digests.kept_version_note(root, 13) is None


def test_digest_leaves_out_editor_backups_and_tool_folders(package):
    """Doc: "listing every file of the folder except hidden ones, editor backups (`x~`, `#x#`) and
    what lies in `__pycache__/` or `node_modules/`" """
    root = package(None)
    for name in ["notes.txt", "manifest.json~", "#scale-shift.wgsl.jinja#", ".hidden"]:
        (root / name).write_text("x")
    for folder in ["__pycache__", "node_modules"]:
        (root / folder).mkdir()
        (root / folder / "x.json").write_text("{}")
    metadata, _ = digests.write_metadata(root)
    assert sorted(metadata["digest"]["files"]) == ["manifest.json", "notes.txt", "scale-shift.wgsl.jinja"]
    wk.load_kernel(root)  # and an open does not count them as unlisted content files


# --- test.json: The file ---------------------------------------------------------------------------


def test_an_attribute_description_of_no_declared_attribute_is_a_warning_not_a_load_error(package):
    """Doc: "An `attributeDescriptions` key that names no declared attribute (a misspelling, an
    attribute since removed) is a warning: it documents nothing, and a package that runs still
    loads." Nothing had checked it (a first check made it a load error; a warning keeps such a package
    running, as the format's other documentation-only slips do)."""
    misspelt = package({"cases": [case()]}, lambda m: m["attributeDescriptions"].update(sclae="A misspelt scale."))
    assert [w for w in warnings_of(misspelt) if "attributeDescriptions" in w] == [
        "manifest.json attributeDescriptions.sclae: describes 'sclae', which is not an attribute of this manifest "
        "(the declared ones are ['scale', 'shift'])"]
    wk.load_kernel(misspelt)  # loads, and runs as before
    none = package({"cases": [case()]}, lambda m: (m.pop("attributes"), m["attributeDescriptions"].update(scale="x")))
    assert any(w.endswith("(it declares none)") for w in warnings_of(none))
    assert not [w for w in warnings_of(package({"cases": [case()]})) if "attributeDescriptions" in w]


def test_validate_warns_of_a_floating_point_output_dtype_without_a_tolerance(package):
    """Doc: "A dtype with no entry is compared exactly (`validate` warns about floating-point dtypes
    without one: a kernel that copies values, which must match exactly, says so with `{"rtol": 0,
    "atol": 0}`)." The warning had not said how to mean it."""
    warned = [w for w in warnings_of(package({"cases": [case()]})) if "no tolerance" in w]
    assert warned == ["test.json tolerances: no tolerance for float32 outputs: they must match exactly "
                      '(where that is meant, a copy, say so with "float32": {"rtol": 0, "atol": 0})']
    exact = {"tolerances": {"float32": {"rtol": 0, "atol": 0}}, "cases": [case()]}
    assert not [w for w in warnings_of(package(exact)) if "no tolerance" in w]
    tolerant = {"tolerances": {"float32": {"atol": 1e-6}}, "cases": [case()]}
    assert not [w for w in warnings_of(package(tolerant)) if "no tolerance" in w]
    # a case's own entry covers it as well
    own = {"cases": [case(tolerances={"float32": {"rtol": 0}})]}
    assert not [w for w in warnings_of(package(own)) if "no tolerance" in w]


def test_a_tolerance_left_out_is_zero():
    """Doc: "`{"rtol": r, "atol": a}` (both finite and >= 0; a missing one is 0)" """
    parsed = casefile.parse_test_file({"tolerances": {"float32": {"atol": 0.5}}, "cases": [case()]})
    assert parsed.cases[0].tolerance("float32") == Tolerance(rtol=0.0, atol=0.5)
    assert parsed.cases[0].tolerance("float16") == Tolerance(rtol=0.0, atol=0.0)


# --- test.json: A case -----------------------------------------------------------------------------


def test_case_tolerances_merge_key_by_key_over_the_files():
    """Doc: "per-dtype overrides for this case, merged key by key over the file's
    (`{"float32": {"rtol": 2e-5}}` keeps the file's `atol`)" """
    data = {"tolerances": {"float32": {"rtol": 1e-5, "atol": 1e-6}, "float16": {"rtol": 2e-3}},
            "cases": [case("own", tolerances={"float32": {"rtol": 2e-5}}), case("file")]}
    own, plain = casefile.parse_test_file(data).cases
    assert own.tolerance("float32") == Tolerance(rtol=2e-5, atol=1e-6)
    assert own.tolerance("float16") == Tolerance(rtol=2e-3, atol=0.0)
    assert plain.tolerance("float32") == Tolerance(rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name, ok", [("alpha-1.0+x=y_z", True), ("_a", True), ("9", True), (".a", False),
                                      ("-a", False), ("+a", False), ("=a", False), ("a b", False), ("a/b", False)])
def test_case_names_are_letters_digits_and_five_marks_not_first(name, ok):
    """Doc: "unique in the file; letters, digits and `_ . + = -`, the first a letter, digit or `_`" """
    data = {"cases": [case(name)]}
    if ok:
        assert casefile.parse_test_file(data).cases[0].name == name
    else:
        with pytest.raises(CaseFileError, match=r"cases\[0\]\.name"):
            casefile.parse_test_file(data)


# --- test.json: Tensor entries (inputs) --------------------------------------------------------------


def test_normal_draws_an_odd_count_by_dropping_the_last_of_its_pair():
    """Doc: "(an odd count drops the last one); then `mean + std * x`" """
    spec = {"distribution": "normal", "seed": 11, "mean": 3.0, "std": 2.0}
    three = casefile.build_tensor({"shape": [3], "generate": spec}, dtype="float64", read_bytes=None,
                                  file="test.json", where="w")
    four = casefile.build_tensor({"shape": [4], "generate": spec}, dtype="float64", read_bytes=None,
                                 file="test.json", where="w")
    unit = casefile.build_tensor({"shape": [4], "generate": {"distribution": "normal", "seed": 11}},
                                 dtype="float64", read_bytes=None, file="test.json", where="w")
    assert three.tolist() == four[:3].tolist()
    assert four.tolist() == (3.0 + 2.0 * unit).tolist()


# --- test.json: Expected entries ---------------------------------------------------------------------


def expected(values: list, dtype: str) -> np.ndarray:
    return casefile.build_tensor({"shape": [len(values)], "values": values}, dtype=dtype, read_bytes=None,
                                 file="test.json", where="w", expected=True)


def test_expected_values_are_rounded_to_the_dtype_they_are_stored_in():
    """Doc: "`dtype` giving the precision the values are stored in (default: the output's dtype): the
    values are rounded to it, then compared in float64" """
    data = {"cases": [case(expected={"Y": {"dtype": "float16", "shape": [1], "values": [0.1]}})]}
    want = casefile.parse_test_file(data).cases[0].build_expected(None, {"Y": "float32"})["Y"]
    assert want.dtype == np.float64 and want.tolist() == [float(np.float16(0.1))]
    plain = {"cases": [case(expected={"Y": {"shape": [1], "values": [0.1]}})]}
    assert casefile.parse_test_file(plain).cases[0].build_expected(None, {"Y": "float32"})["Y"].tolist() == [
        float(np.float32(0.1))]


def test_an_expected_non_integer_for_an_integer_output_is_rounded_and_never_clipped():
    """Doc: "other numbers are rounded as for inputs (to nearest, ties to even), and one that rounds
    outside the dtype's range is an error too: an expected value is never clipped" """
    assert expected([2.5, 3.5, -2.5, 127.4], "int8").tolist() == [2, 4, -2, 127]
    for value in [127.6, 300.0, -128.6]:
        with pytest.raises(CaseFileError, match="outside int8's range"):
            expected([value], "int8")
    # an input is clipped instead (validate warns of it)
    clipped = casefile.build_tensor({"shape": [1], "values": [300.0]}, dtype="int8", read_bytes=None,
                                    file="test.json", where="w")
    assert clipped.tolist() == [127]


# --- bench.json --------------------------------------------------------------------------------------


def test_a_bench_case_runs_once_per_combination_and_an_inputs_own_dtype_wins():
    """Doc: "The case runs once per combination of the lists (`{"T": ["float32", "float16"]}`: twice).
    An input's dtype is its own `dtype`, else the combination's value for its type variable" """
    manifest = parse_manifest(SCALE_SHIFT)
    both = {"name": "b", "inputs": {"X": {"shape": [8]}}, "types": {"T": ["float32", "float16"]}}
    own = {"name": "o", "inputs": {"X": {"shape": [8], "dtype": "float16"}}, "types": {"T": ["float32"]}}
    bench = casefile.parse_bench_file({"cases": [both, own]})
    assert [i.inputs["X"] for i in bench.cases[0].expand(manifest)] == [((8,), "float32"), ((8,), "float16")]
    assert [i.inputs["X"] for i in bench.cases[1].expand(manifest)] == [((8,), "float16")]


# --- `webgpu-kernels test`: how a case's verdict reads ----------------------------------------------


def test_a_passing_case_can_read_max_rel_err_1_where_atol_holds_a_flushed_value():
    """Doc: "the relative error is reported over the elements whose expected magnitude is at least the
    output dtype's smallest normal number (1.2e-38 in float32, 6.1e-5 in float16). An element the `atol`
    passes may be off by any relative amount, so a passing case can read `max rel err 1`" """
    want = np.array([-3.8e-38, 1.0, -1e-39])
    got = np.array([0.0, 1.0, 0.0], np.float32)  # the tiny results flushed to zero
    result = compare("Y", got, want, Tolerance(atol=1e-7, rtol=4e-6))
    assert result.ok and result.max_rel_error == 1.0 and result.max_abs_error == pytest.approx(3.8e-38)
    below = compare("Y", np.float32([0.0]), np.array([-1e-39]), Tolerance(atol=1e-7))
    assert below.ok and below.max_rel_error is None  # below float32's smallest normal: no relative figure
    half = compare("Y", np.float16([0.0]), np.array([-6e-5]), Tolerance(atol=1e-4))
    assert half.max_rel_error is None and np.finfo(np.float16).tiny == pytest.approx(6.1e-5, rel=1e-2)
    assert not compare("Y", got, want, Tolerance(atol=1e-38)).ok  # beyond its bound: the case fails


def test_bench_counts_flops_with_the_cases_attributes():
    """The page (`flops`): "evaluated for each case ... with the case's `attrs` and `tunables` applied
    (ai.onnx.Gemm's "2 * M * N * K" reads M, N and K from derive entries that follow transA and
    transB)" """
    from webgpu_kernels.benchmark import bench_count

    gemm = wk.load_kernel(PACKAGES_DIR / "ai.onnx.Gemm")
    inputs = {"A": np.zeros((3, 4), np.float32), "B": np.zeros((5, 4), np.float32)}
    assert bench_count(gemm, "flops", "2 * M * N * K", inputs, attrs={"transB": 1}) == 2 * 3 * 5 * 4
    assert bench_count(gemm, "flops", "2 * M * N * K", inputs, attrs={"transB": 0}) == 2 * 3 * 4 * 4


def test_any_nan_matches_any_nan_in_the_comparison():
    """The page ("The comparison"): "any NaN matches any NaN, whatever its payload or sign, as "nan"
    in the JSON carries none" """
    payloads = np.array([0x7FC00001, 0xFFC00000, 0x7F800001], np.uint32).view(np.float32)  # quiet, negative, signalling
    assert compare("Y", payloads, np.full(3, np.nan), Tolerance()).ok
    assert not compare("Y", np.float32([1.0, np.nan, np.nan]), np.full(3, np.nan), Tolerance()).ok


# --- bench.json: tags -------------------------------------------------------------------------------


def test_tags_select_cases_by_the_whole_string_and_variant_tags_name_a_variant():
    """Doc: "`bench --tag T` and `tune --tag T` keep the cases with any of the tags named (the whole
    string: `--tag model:clip`, not `--tag clip`)" and "`variant:ID` for the variant a case was written
    for" """
    gelu = wk.load_kernel(PACKAGES_DIR / "ai.onnx.Gelu")
    clip = bench_cases(gelu, (), ("model:clip",), (), {})
    assert clip and all("model:clip" in c["tags"] for c in clip)
    assert bench_cases(gelu, (), ("clip",), (), {}) == []
    either = bench_cases(gelu, (), ("model:clip", "model:vit-b16"), (), {})
    assert len(either) > len(clip) and all({"model:clip", "model:vit-b16"} & set(c["tags"]) for c in either)
    roots = [*PACKAGES_DIR.glob("*/bench.json"), *(Path(wk.__file__).parent / "kernels").glob("*/bench.json")]
    for path in roots:
        ids = {v["id"] for v in json.loads((path.parent / "manifest.json").read_text())["variants"]}
        for c in json.loads(path.read_text())["cases"]:
            for tag in c.get("tags", []):
                assert not tag.startswith("variant:") or tag.removeprefix("variant:") in ids, (path, tag)

