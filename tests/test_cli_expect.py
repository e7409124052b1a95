"""``webgpu-kernels expect PATH --reference FILE.py:FUNCTION``: test.json's expected values written
again from the author's reference after the kernel changed; what it refuses, writing nothing."""

from __future__ import annotations

import io
import json

import numpy as np
import pytest
from click.testing import CliRunner

import webgpu_kernels as wk

from cli_helpers import assert_error, invoke

OP = "com.example.TripleIt"
REFERENCES = '''
import numpy as np

def triple(inputs, attrs):
    return {"Y": 3.0 * inputs["X"]}

def raises(inputs, attrs):
    raise ZeroDivisionError("my reference broke")

def not_a_dict(inputs, attrs):
    return 3.0 * inputs["X"]

def no_output(inputs, attrs):
    return {"Z": inputs["X"]}

def wrong_shape(inputs, attrs):
    return {"Y": inputs["X"].reshape(-1)}

def not_numbers(inputs, attrs):
    return {"Y": "three"}

def lower_key(inputs, attrs):
    return {"y": 3.0 * inputs["X"]}

def near_key(inputs, attrs):
    return {"YY": 3.0 * inputs["X"]}
'''
REFUSAL = {"name": "int32-refused", "types": {"T": "int32"},
           "inputs": {"X": {"shape": [4], "values": [1, 2, 3, 4]}},
           "refused": {"error": "DTypeError"}}  # fmt: skip


@pytest.fixture
def package(tmp_path):
    """``new``'s starter whose template now computes 3 * X, a refusal case in the middle of test.json."""
    root = tmp_path / "pkg"
    invoke(CliRunner(), "new", str(root), "--op", OP)
    shader = root / "triple-it.wgsl.jinja"
    text = shader.read_text("utf-8")
    assert "2.0 * f32(x[i])" in text
    shader.write_text(text.replace("2.0 * f32(x[i])", "3.0 * f32(x[i])"), "utf-8")
    doc = json.loads((root / "test.json").read_text("utf-8"))
    doc["cases"].insert(1, REFUSAL)
    (root / "test.json").write_text(json.dumps(doc, indent=1), "utf-8")
    (tmp_path / "ref.py").write_text(REFERENCES, "utf-8")
    return root


def test_expect_writes_what_the_changed_kernel_computes(package) -> None:
    before = json.loads((package / "test.json").read_text("utf-8"))["cases"]
    # the template changed: metadata.json is stale until expect refreshes it
    assert invoke(CliRunner(), "digest", str(package), "--check", code=1)
    result = invoke(CliRunner(), "expect", str(package), "--reference", f"{package.parent / 'ref.py'}:triple")
    assert "2 cases written, 1 refusal case left" in result.stdout
    after = json.loads((package / "test.json").read_text("utf-8"))["cases"]
    assert [c["name"] for c in after] == [c["name"] for c in before]  # the order kept
    assert after[1] == REFUSAL  # left alone
    kernel = wk.load_kernel(package)
    for case in (after[0], after[2]):
        x = wk.test_case_inputs(kernel, case["name"])["X"]
        want = (3.0 * x.astype(np.float64)).astype(x.dtype)
        got = np.asarray(case["expected"]["Y"]["values"], dtype=np.float64).astype(x.dtype).reshape(x.shape)
        np.testing.assert_array_equal(got, want)
        assert case["expected"]["Y"]["dtype"] == case["types"]["T"]
    invoke(CliRunner(), "digest", str(package), "--check")
    tested = json.loads(invoke(CliRunner(), "test", str(package), "--json").stdout)
    assert tested["ok"] and {r["status"] for r in tested["packages"][0]["results"]} == {"pass"}



def test_the_authors_loop_of_package_files_md_ends_in_a_passing_test(package) -> None:
    """docs/package-files.md's loop after `new` (edit; then its commands in order) had been digest,
    validate, test: after a template that computes something else, that ended in a failing test
    (the starter's expected values, 2 * X, kept) with nothing naming `expect`. The first command of
    each of the section's steps 2 to 4 ("Steps 1 to 4 are the loop"), as the page writes it,
    FILE.py:FUNCTION the author's reference, pass in order."""
    import re
    import shlex

    from conftest import REPO_ROOT

    page = (REPO_ROOT / "docs" / "package-files.md").read_text("utf-8")
    section = re.search(r"^## The author's loop\n(.*?)^## ", page, re.S | re.M)
    assert section, "the author's loop is no longer on the page"
    steps = dict(re.findall(r"^(\d+)\. (.*?)(?=^\d+\. |\Z)", section.group(1), re.S | re.M))
    assert "Steps 1 to 4 are the loop" in steps["4"], steps
    commands = [re.findall(r"`webgpu-kernels ([^`]*)`", steps[n])[0] for n in ("2", "3", "4")]
    assert commands[0].startswith("expect ") and commands[1:] == ["validate PATH", "test PATH"], commands
    reference = f"{package.parent / 'ref.py'}:triple"
    for command in commands:
        args = [str(package) if a == "PATH" else reference if a == "FILE.py:FUNCTION" else a
                for a in shlex.split(command)]
        invoke(CliRunner(), *args)

def test_a_case_with_inputs_only_gets_every_output_and_test_refuses_it_until_then(package) -> None:
    """A case the author adds with its inputs alone: `expect` had refused it (give exactly one of
    'expected' and 'refused', exit 2) though docs/cli.md says it gets every output returned."""
    added = {"name": "added-7-f32", "types": {"T": "float32"},
             "inputs": {"X": {"shape": [7], "generate": {"distribution": "normal", "seed": 9}}}}  # fmt: skip
    _edit_tests(package, lambda cases: cases.append(added))
    # test and validate still refuse it, pointing at expect: a case comparing nothing must not pass
    tested = invoke(CliRunner(), "test", str(package), code=1)
    assert "cases[3]" in tested.output and "has neither" in tested.output and "webgpu-kernels expect" in tested.output
    validated = invoke(CliRunner(), "validate", str(package), code=1)
    assert "has neither" in validated.output and "webgpu-kernels expect" in validated.output
    result = invoke(CliRunner(), "expect", str(package), "--reference", f"{package.parent / 'ref.py'}:triple")
    assert "3 cases written, 1 refusal case left" in result.stdout
    case = json.loads((package / "test.json").read_text("utf-8"))["cases"][3]
    x = wk.test_case_inputs(wk.load_kernel(package), "added-7-f32")["X"]
    assert case["expected"]["Y"]["shape"] == [7] and case["expected"]["Y"]["dtype"] == "float32"
    np.testing.assert_array_equal(np.asarray(case["expected"]["Y"]["values"], np.float32),
                                  (3.0 * x.astype(np.float64)).astype(np.float32))  # fmt: skip
    tested_json = json.loads(invoke(CliRunner(), "test", str(package), "--json").stdout)
    assert tested_json["ok"] and "added-7-f32" in {r["case"] for r in tested_json["packages"][0]["results"]}


@pytest.mark.parametrize("step", ["    ", "\t", "  "])
def test_the_author_s_indent_is_kept(package, step) -> None:
    """A test.json indented by four spaces (or a tab) is written again so, not in new's two spaces
    (every line of the file had changed, burying the new values in the diff)."""
    doc = json.loads((package / "test.json").read_text("utf-8"))
    (package / "test.json").write_text(json.dumps(doc, indent=step), "utf-8")
    _expect(package)
    lines = (package / "test.json").read_text("utf-8").splitlines()
    assert lines[1].startswith(step + '"') and lines[1][len(step)] == '"', lines[:3]
    indents = {len(line) - len(line.lstrip()) for line in lines}
    assert all(n % len(step) == 0 for n in indents) and len(step) * 3 in indents, sorted(indents)
    assert all(set(line[: len(line) - len(line.lstrip())]) <= set(step) for line in lines)


@pytest.mark.parametrize(("function", "code", "fragments"), [
    ("raises", 1, ["ref.py:raises raised for case 'tail-3x5-f32'", "ZeroDivisionError: my reference broke"]),
    ("not_a_dict", 2, ["case 'tail-3x5-f32'", "expected a dict of output arrays (Y)", "got an array of shape [3, 5]"]),
    ("no_output", 2, ["ref.py:no_output's return value for case 'tail-3x5-f32'",
                      "expected the required outputs ['Y'], got the keys ['Z']"]),
    ("no_output", 2, ["got the keys ['Z']\n"]),  # no guess where none is close
    ("lower_key", 2, ["expected the required outputs ['Y'], got the keys ['y'] (did you mean 'Y'?)"]),
    ("near_key", 2, ["got the keys ['YY'] (did you mean 'Y'?)"]),
    ("wrong_shape", 2, ["return value for case 'tail-3x5-f32'['Y']",
                        "expected shape [3, 5] (the kernel's output for the case's inputs), got shape [15]"]),
    ("not_numbers", 2, ["expected an array of numbers (rounded to the output's float32)", "got str 'three'"]),
])  # fmt: skip
def test_a_reference_that_fails_writes_nothing(package, function, code, fragments) -> None:
    files = {p.name: p.read_bytes() for p in package.iterdir()}
    result = invoke(CliRunner(), "expect", str(package), "--reference", f"{package.parent / 'ref.py'}:{function}",
                    code=code)  # fmt: skip
    if code == 2:
        assert_error(result, *fragments)
    else:
        assert all(f in result.stderr for f in fragments), result.stderr
        assert "nothing was written" in result.stderr
    assert {p.name: p.read_bytes() for p in package.iterdir()} == files


@pytest.mark.parametrize(("reference", "fragment"), [
    ("missing.py:triple", "no file"),
    ("REF:absent", "has no function 'absent' (its functions: lower_key, near_key, no_output, not_a_dict, not_numbers, raises, "
                   "triple, wrong_shape)"),
    ("REF", "expected FILE.py:FUNCTION"),
])  # fmt: skip
def test_a_reference_that_cannot_be_found_is_a_usage_error(package, reference, fragment) -> None:
    reference = reference.replace("REF", str(package.parent / "ref.py"))
    before = (package / "test.json").read_bytes()
    result = invoke(CliRunner(), "expect", str(package), "--reference", reference, code=2)
    assert "Invalid value for '--reference'" in result.stderr and fragment in result.stderr, result.stderr
    assert (package / "test.json").read_bytes() == before


def test_importing_a_reference_that_raises_exits_1(package) -> None:
    (package.parent / "broken.py").write_text("raise RuntimeError('import-time failure')\n", "utf-8")
    result = invoke(CliRunner(), "expect", str(package), "--reference", f"{package.parent / 'broken.py'}:f", code=1)
    assert "RuntimeError: import-time failure" in result.stderr


def test_a_reference_imports_the_modules_beside_it_as_python_file_would(package, tmp_path, monkeypatch) -> None:
    """A reference in a tests folder that imports its neighbour (`references`) had failed with
    ModuleNotFoundError, the working directory being first on sys.path instead of FILE's folder."""
    monkeypatch.setattr("sys.path", list(__import__("sys").path))  # the folder added is this test's alone
    monkeypatch.chdir(tmp_path)  # elsewhere than FILE's folder
    folder = package.parent / "refs"
    folder.mkdir()
    (folder / "scaled_helper.py").write_text("def three(x):\n    return 3 * x\n", "utf-8")
    (folder / "ref_neighbour.py").write_text("import scaled_helper\n\n\ndef triple(inputs, attrs):\n"
                                              "    import scaled_helper as late  # imported when called, too\n"
                                              "    return {'Y': late.three(inputs['X'])}\n", "utf-8")  # fmt: skip
    result = invoke(CliRunner(), "expect", str(package), "--reference", f"{folder / 'ref_neighbour.py'}:triple")
    assert "2 cases written" in result.stdout
    assert str(folder) not in __import__("sys").path  # on it while the command ran, not after
    tested = json.loads(invoke(CliRunner(), "test", str(package), "--json").stdout)
    assert tested["ok"]


# --- data files -----------------------------------------------------------------------------------


def _edit_tests(package, edit) -> None:
    doc = json.loads((package / "test.json").read_text("utf-8"))
    edit(doc["cases"])
    (package / "test.json").write_text(json.dumps(doc, indent=1), "utf-8")
    invoke(CliRunner(), "digest", str(package))  # a package whose digests held before the kernel changed


def _npy(array) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, array)
    return buffer.getvalue()


def _npz(**arrays) -> bytes:
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    return buffer.getvalue()


def _tripled(package, case):
    x = wk.test_case_inputs(wk.load_kernel(package, verify_digests=False), case)["X"]
    return (3.0 * x.astype(np.float64)).astype(x.dtype)


@pytest.mark.parametrize("form", ["npy", "npz", "safetensors"])
def test_a_data_file_entry_stays_a_data_file(package, form) -> None:
    """The entry keeps naming its file, which holds the new values (other arrays of a shared archive
    kept, an input read from it too); test.json gets no inline values and metadata.json is fresh."""
    x = wk.test_case_inputs(wk.load_kernel(package, verify_digests=False), "tail-3x5-f32")["X"]
    old = (2.0 * x).astype(np.float32)
    other = np.arange(6, dtype=np.int32).reshape(2, 3)
    name = f"data/tail.{form}"
    (package / "data").mkdir()
    if form == "npy":
        (package / name).write_bytes(_npy(old))
        entry = {"file": name}
    elif form == "npz":
        (package / name).write_bytes(_npz(X=x, Y=old, other=other))
        entry = {"file": name, "tensor": "Y"}
    else:
        import safetensors.numpy

        (package / name).write_bytes(safetensors.numpy.save({"Y": old, "other": other}, metadata={"by": "me"}))
        entry = {"file": name, "tensor": "Y", "shape": [3, 5]}

    def edit(cases):
        cases[0]["expected"] = {"Y": dict(entry)}
        if form == "npz":  # the input from the same archive: another member, left as it is
            cases[0]["inputs"]["X"] = {"file": name, "tensor": "X"}

    _edit_tests(package, edit)
    result = invoke(CliRunner(), "expect", str(package), "--reference", f"{package.parent / 'ref.py'}:triple")
    assert "2 cases written, 1 refusal case left" in result.stdout and "1 data file written" in result.stdout
    text = (package / "test.json").read_text("utf-8")
    after = json.loads(text)["cases"]
    assert after[0]["expected"] == {"Y": entry}
    assert after[2]["expected"]["Y"]["values"]  # an inline entry stays inline
    data = (package / name).read_bytes()
    got = wk.case_data.load_array(data, name, entry.get("tensor"))
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got, _tripled(package, "tail-3x5-f32"))
    if form == "npz":
        np.testing.assert_array_equal(wk.case_data.load_array(data, name, "X"), x)
        np.testing.assert_array_equal(wk.case_data.load_array(data, name, "other"), other)
    elif form == "safetensors":
        np.testing.assert_array_equal(wk.case_data.load_array(data, name, "other"), other)
        header = json.loads(data[8 : 8 + int.from_bytes(data[:8], "little")])
        assert header["__metadata__"] == {"by": "me"}
    invoke(CliRunner(), "digest", str(package), "--check")
    tested = json.loads(invoke(CliRunner(), "test", str(package), "--json").stdout)
    assert tested["ok"] and {r["status"] for r in tested["packages"][0]["results"]} == {"pass"}


def test_each_data_file_is_read_once(package, monkeypatch) -> None:
    """A case's archive holding its input and its expected array, and another case's .npy, are
    read from the package once each in a run (the archive had been read four times: the input, the
    entry, the check that no input reads the array, the rewrite; the .npy twice), whatever reads them."""
    from collections import Counter

    from webgpu_kernels.package import KernelPackage

    x = wk.test_case_inputs(wk.load_kernel(package, verify_digests=False), "tail-3x5-f32")["X"]
    (package / "tail.npz").write_bytes(_npz(X=x, Y=x))
    (package / "wide.Y.npy").write_bytes(_npy(np.zeros((2, 65), np.float16)))

    def edit(cases):
        cases[0]["inputs"]["X"] = {"file": "tail.npz", "tensor": "X"}
        cases[0]["expected"] = {"Y": {"file": "tail.npz", "tensor": "Y"}}
        cases[2]["expected"] = {"Y": {"file": "wide.Y.npy"}}

    _edit_tests(package, edit)
    reads: Counter[str] = Counter()
    real_read = KernelPackage.read_bytes

    def read_bytes(self, name):
        reads[self.relative_name(name)] += 1
        return real_read(self, name)

    monkeypatch.setattr(KernelPackage, "read_bytes", read_bytes)
    assert "2 data files written" in _expect(package).stdout
    assert reads["tail.npz"] == 1 and reads["wide.Y.npy"] == 1, reads
    monkeypatch.undo()
    tested = json.loads(invoke(CliRunner(), "test", str(package), "--json").stdout)
    assert tested["ok"] and {r["status"] for r in tested["packages"][0]["results"]} == {"pass"}


def test_a_failing_case_leaves_the_data_files_as_they_were(package) -> None:
    (package / "tail.Y.npy").write_bytes(_npy(np.zeros((3, 5), np.float32)))
    _edit_tests(package, lambda cases: cases[0].update(expected={"Y": {"file": "tail.Y.npy"}}))
    (package.parent / "late.py").write_text(
        "def fails_for_f16(inputs, attrs):\n"
        "    if inputs['X'].shape != (3, 5):\n"
        "        raise RuntimeError('second case')\n"
        "    return {'Y': 3.0 * inputs['X']}\n", "utf-8")  # fmt: skip
    files = {p.name: p.read_bytes() for p in package.iterdir()}
    result = invoke(CliRunner(), "expect", str(package), "--reference", f"{package.parent / 'late.py'}:fails_for_f16",
                    code=1)  # fmt: skip
    assert "nothing was written" in result.stderr
    assert {p.name: p.read_bytes() for p in package.iterdir()} == files


def test_two_entries_of_one_array_with_other_values_are_refused(package) -> None:
    (package / "shared.npy").write_bytes(_npy(np.zeros((3, 5), np.float32)))

    def edit(cases):
        cases[0]["expected"] = {"Y": {"file": "shared.npy"}}
        twin = json.loads(json.dumps(cases[0]))
        twin["name"], twin["inputs"]["X"]["generate"]["seed"] = "tail-3x5-f32-seed-9", 9
        cases.append(twin)

    _edit_tests(package, edit)
    files = {p.name: p.read_bytes() for p in package.iterdir()}
    result = invoke(CliRunner(), "expect", str(package), "--reference", f"{package.parent / 'ref.py'}:triple", code=2)
    assert_error(result, "test.json: cases[3].expected.Y: 'shared.npy' is also cases[0].expected.Y's, which gets other "
                 "values from the reference: give each entry a file (or tensor) of its own")  # a .npy: no tensor named
    assert {p.name: p.read_bytes() for p in package.iterdir()} == files


def test_two_entries_of_one_array_with_the_same_values_write_it_once(package) -> None:
    (package / "shared.npy").write_bytes(_npy(np.zeros((3, 5), np.float32)))

    def edit(cases):
        cases[0]["expected"] = {"Y": {"file": "shared.npy"}}
        twin = json.loads(json.dumps(cases[0]))
        twin["name"], twin["tunables"] = "tail-3x5-f32-wg32", {"WORKGROUP_SIZE": 32}
        cases.append(twin)

    _edit_tests(package, edit)
    result = invoke(CliRunner(), "expect", str(package), "--reference", f"{package.parent / 'ref.py'}:triple")
    assert "3 cases written" in result.stdout and "1 data file written" in result.stdout
    np.testing.assert_array_equal(np.load(package / "shared.npy"), _tripled(package, "tail-3x5-f32"))


def test_an_expected_entry_on_an_input_s_array_is_refused(package) -> None:
    x = wk.test_case_inputs(wk.load_kernel(package, verify_digests=False), "tail-3x5-f32")["X"]
    (package / "x.npz").write_bytes(_npz(X=x))

    def edit(cases):
        cases[0]["inputs"]["X"] = {"file": "x.npz"}
        cases[0]["expected"] = {"Y": {"file": "x.npz", "tensor": "X"}}

    _edit_tests(package, edit)
    files = {p.name: p.read_bytes() for p in package.iterdir()}
    result = invoke(CliRunner(), "expect", str(package), "--reference", f"{package.parent / 'ref.py'}:triple", code=2)
    assert_error(result, "test.json: cases[0].expected.Y: 'x.npz' tensor 'X' is the array cases[0].inputs.X reads: writing "
                 "the expected values there would change that input; give them a file (or tensor) of their own")
    assert {p.name: p.read_bytes() for p in package.iterdir()} == files


# --- optional outputs -----------------------------------------------------------------------------

OPTIONAL = '''
def y_only(inputs, attrs):
    return {"Y": 3.0 * inputs["X"]}

def y_and_z(inputs, attrs):
    return {"Y": 3.0 * inputs["X"], "Z": -inputs["X"]}

def z_only(inputs, attrs):
    return {"Z": -inputs["X"]}
'''


@pytest.fixture
def optional_package(package):
    """The package with an optional output Z = -X, which its one variant writes."""
    manifest = json.loads((package / "manifest.json").read_text("utf-8"))
    manifest["outputs"].append({"role": "Z", "dtype": "T", "rank": "ranks.X", "shape": "shapes.X", "optional": True})
    manifest["args"]["Z"] = {"kind": "tensor", "semantic": "Z", "role": "output"}
    bindings = manifest["variants"][0]["passes"][0]["bindings"]
    bindings.insert(2, {"name": "z", "arg": "Z", "semantic": "Z", "buffer": {"type": "storage"},
                        "elementType": "$scalar"})  # fmt: skip
    (package / "manifest.json").write_text(json.dumps(manifest, indent=2), "utf-8")
    shader = package / "triple-it.wgsl.jinja"
    text = shader.read_text("utf-8").replace("  y[i] =", "  z[i] = -x[i];\n  y[i] =")
    shader.write_text(text, "utf-8")
    (package.parent / "optional.py").write_text(OPTIONAL, "utf-8")
    return package


def test_an_optional_output_is_written_where_the_case_lists_it(optional_package) -> None:
    ref = f"{optional_package.parent / 'optional.py'}"
    result = invoke(CliRunner(), "expect", str(optional_package), "--reference", f"{ref}:y_only")
    assert "2 cases written" in result.stdout
    cases = json.loads((optional_package / "test.json").read_text("utf-8"))["cases"]
    assert [sorted(c["expected"]) for c in (cases[0], cases[2])] == [["Y"], ["Y"]]
    tested = json.loads(invoke(CliRunner(), "test", str(optional_package), "--json").stdout)
    assert tested["ok"]  # Z is not compared where no value is expected for it
    # returned, Z is written where the case lists it (here a placeholder entry), and compared; the
    # other case keeps its own choice of outputs
    _edit_tests(optional_package, lambda cases: cases[0]["expected"].update(Z={"shape": [0], "values": []}))
    invoke(CliRunner(), "expect", str(optional_package), "--reference", f"{ref}:y_and_z")
    cases = json.loads((optional_package / "test.json").read_text("utf-8"))["cases"]
    assert [list(c["expected"]) for c in (cases[0], cases[2])] == [["Y", "Z"], ["Y"]]
    x = wk.test_case_inputs(wk.load_kernel(optional_package), "tail-3x5-f32")["X"]
    assert cases[0]["expected"]["Z"]["shape"] == [3, 5]
    np.testing.assert_array_equal(np.asarray(cases[0]["expected"]["Z"]["values"], np.float32), -x.reshape(-1))
    tested = json.loads(invoke(CliRunner(), "test", str(optional_package), "--json").stdout)
    assert tested["ok"] and {r["status"] for r in tested["packages"][0]["results"]} == {"pass"}
    assert {tuple(sorted(o["output"] for o in r["outputs"])) for r in tested["packages"][0]["results"]
            if r["case"] != REFUSAL["name"]} == {("Y", "Z"), ("Y",)}  # fmt: skip


def test_an_expected_value_the_reference_leaves_out_is_refused(optional_package) -> None:
    ref = f"{optional_package.parent / 'optional.py'}"
    _edit_tests(optional_package, lambda cases: cases[0]["expected"].update(Z={"shape": [0], "values": []}))
    invoke(CliRunner(), "expect", str(optional_package), "--reference", f"{ref}:y_and_z")
    files = {p.name: p.read_bytes() for p in optional_package.iterdir()}
    result = invoke(CliRunner(), "expect", str(optional_package), "--reference", f"{ref}:y_only", code=2)
    assert_error(result, "case 'tail-3x5-f32'", "expected ['Z'] too: the case has an expected value for the optional "
                 "output (return it, or delete the case's expected entry to stop comparing it), got the keys ['Y']")  # fmt: skip
    assert {p.name: p.read_bytes() for p in optional_package.iterdir()} == files
    # a required output still must be returned
    result = invoke(CliRunner(), "expect", str(optional_package), "--reference", f"{ref}:z_only", code=2)
    assert_error(result, "expected the required outputs ['Y'], and any of the optional outputs ['Z'], got the keys ['Z']")
    # and a return value that is no dict is told every output it may hold
    (optional_package.parent / "optional.py").write_text(OPTIONAL + "\ndef array(inputs, attrs):\n    return inputs['X']\n",
                                                         "utf-8")  # fmt: skip
    result = invoke(CliRunner(), "expect", str(optional_package), "--reference", f"{ref}:array", code=2)
    assert_error(result, "case 'tail-3x5-f32'", "expected a dict of output arrays (Y, Z), got an array of shape [3, 5]")


# --- new data files -------------------------------------------------------------------------------


def _tree(package) -> dict[str, bytes | None]:
    """Every file (its bytes) and folder (None) under the package, hidden ones too."""
    return {p.relative_to(package).as_posix(): None if p.is_dir() else p.read_bytes() for p in package.rglob("*")}


def _expect(package, function="triple", code=0):
    return invoke(CliRunner(), "expect", str(package), "--reference", f"{package.parent / 'ref.py'}:{function}",
                  code=code)  # fmt: skip


@pytest.mark.parametrize(("name", "tensor", "key"), [
    ("tail.Y.npy", None, None),
    ("tail.npz", "Y", "Y"),
    ("tail.npz", None, "arr_0"),  # NumPy's key for np.savez(file, array), the archive's only member
    ("tail.safetensors", "Y", "Y"),
    ("data/new/tail.Y.npy", None, None),  # the missing folders made
])  # fmt: skip
def test_an_entry_naming_a_new_data_file_creates_it(package, name, tensor, key) -> None:
    entry = {"file": name, **({"tensor": tensor} if tensor else {})}
    _edit_tests(package, lambda cases: cases[0].update(expected={"Y": dict(entry)}))
    result = _expect(package)
    assert f"1 data file written (1 new: {name})" in result.stdout
    assert json.loads((package / "test.json").read_text("utf-8"))["cases"][0]["expected"] == {"Y": entry}
    data = (package / name).read_bytes()
    want = _tripled(package, "tail-3x5-f32")
    np.testing.assert_array_equal(wk.case_data.load_array(data, name, tensor), want)
    if name.endswith(".npz"):
        assert list(np.load(package / name)) == [key]  # the one array, as NumPy reads it too
        np.testing.assert_array_equal(np.load(package / name)[key], want)
    metadata = json.loads((package / "metadata.json").read_text("utf-8"))
    assert name in metadata["digest"]["files"]
    invoke(CliRunner(), "digest", str(package), "--check")
    tested = json.loads(invoke(CliRunner(), "test", str(package), "--json").stdout)
    assert tested["ok"] and {r["status"] for r in tested["packages"][0]["results"]} == {"pass"}


@pytest.mark.parametrize("form", ["npz", "safetensors"])
def test_two_entries_of_one_new_file_with_other_tensors_share_it(package, form) -> None:
    name = f"outputs.{form}"

    def edit(cases):
        cases[0]["expected"] = {"Y": {"file": name, "tensor": "tail"}}
        cases[2]["expected"] = {"Y": {"file": name, "tensor": "workgroups"}}

    _edit_tests(package, edit)
    assert "1 data file written (1 new: outputs." in _expect(package).stdout
    data = (package / name).read_bytes()
    for case, tensor in (("tail-3x5-f32", "tail"), ("workgroups-2x65-f16", "workgroups")):
        np.testing.assert_array_equal(wk.case_data.load_array(data, name, tensor), _tripled(package, case))
    tested = json.loads(invoke(CliRunner(), "test", str(package), "--json").stdout)
    assert tested["ok"] and {r["status"] for r in tested["packages"][0]["results"]} == {"pass"}


@pytest.mark.parametrize(("entries", "fragments"), [
    # one array of a new file, two values: refused as for a file already there
    ({0: {"file": "new.npz", "tensor": "Y"}, 2: {"file": "new.npz", "tensor": "Y"}},
     ["cases[2].expected.Y", "'new.npz' tensor 'Y' is also cases[0].expected.Y's", "other values"]),
    # a .npz without tensor holds one array, which another entry's tensor would make two
    ({0: {"file": "new.npz"}, 2: {"file": "new.npz", "tensor": "Z"}},
     ["test.json: cases[0].expected.Y: 'new.npz', a new .npz file, would hold the arrays ['Z', 'arr_0']",
      "names no 'tensor'"]),
    ({0: {"file": "new.safetensors"}}, ["cases[0].expected.Y", "a new .safetensors file needs 'tensor'"]),
    ({0: {"file": "new.npy", "tensor": "Y"}}, ["test.json: cases[0].expected.Y: 'new.npy' is not in the package and expect "
                                               "creates it, but 'tensor' applies to .npz and .safetensors"]),
    ({0: {"file": "con.npy"}}, ["test.json: cases[0].expected.Y: 'con.npy' is not in the package, and expect does not "
                                "create it", "the device CON to Windows"]),
    ({0: {"file": "__pycache__/y.npy"}}, ["expect does not create it", "files under __pycache__/ are never listed"]),
    ({0: {"file": "Data/y.npy"}}, ["expect does not create it", "'Data' differs from the package's 'data' only in case"]),
    ({0: {"file": "data/X.npy"}}, ["expect does not create it", "'data/X.npy' differs from the package's 'data/x.npy'"]),
    # a folder on disk that holds no listed file (empty here) is a case twin too
    ({0: {"file": "EMPTY/y.npy"}}, ["expect does not create it", "'EMPTY' differs from the package's 'empty' only"]),
    ({0: {"file": "new/y.npy"}, 2: {"file": "NEW/y.npy"}}, ["cases[2].expected.Y", "from the package's 'new' only"]),
    ({0: {"file": "new/a/y.npy"}, 2: {"file": "new/A/z.npy"}}, ["cases[2].expected.Y", "'new/A' differs from the package's 'new/a' only"]),
    ({0: {"file": "data/inner/EMPTY/y.npy"}}, ["'data/inner/EMPTY' differs from the package's 'data/inner/empty' only"]),
    ({0: {"file": "data/x.npy/y.npy"}}, ["expect does not create it", "'data/x.npy' is a file, not a folder"]),
    ({0: {"file": "manifest.json/y.npy"}}, ["expect does not create it", "'manifest.json' is a file, not a folder"]),
    ({0: {"file": "linked/y.npy"}}, ["expect does not create it", "linked/ is a symbolic link to a folder"]),
    # one new name the folder of another: written, one had failed on the other, leaving a.npy/b.npy behind
    ({0: {"file": "a.npy"}, 2: {"file": "a.npy/b.npy"}},
     ["cases[2].expected.Y", "'a.npy' is a new file another entry names, not a folder"]),
    ({0: {"file": "a.npy/b.npy"}, 2: {"file": "a.npy"}},
     ["cases[2].expected.Y", "'a.npy' is a folder of the new file 'a.npy/b.npy' another entry names"]),
    ({0: {"file": "d/a.npy"}, 2: {"file": "d/a.npy/b.npy"}},  # the new file two folders down
     ["cases[2].expected.Y", "'d/a.npy' is a new file another entry names, not a folder"]),
])  # fmt: skip
def test_a_new_data_file_that_cannot_be_created_is_refused(package, entries, fragments) -> None:
    (package / "data").mkdir()
    (package / "data" / "x.npy").write_bytes(_npy(np.zeros(3, np.float32)))
    (package / "empty").mkdir()
    (package / "data" / "inner" / "empty").mkdir(parents=True)
    outside = package.parent / "outside"
    outside.mkdir()
    (package / "linked").symlink_to(outside, target_is_directory=True)

    def edit(cases):
        for index, entry in entries.items():
            cases[index]["expected"] = {"Y": entry}

    _edit_tests(package, edit)
    files = _tree(package)
    result = _expect(package, code=2)
    assert_error(result, *fragments)
    assert _tree(package) == files and not list(outside.iterdir())


@pytest.mark.parametrize(("entry", "fragment"), [
    ({"file": "data/x.npy", "tensor": "Y"}, "data/x.npy: 'tensor' applies to .npz and .safetensors files only"),
    ({"file": "data/s.npz", "tensor": "Q"}, "data/s.npz: no member 'Q' in the archive (it holds ['A', 'B'])"),
    ({"file": "data/s.npz"}, "data/s.npz: the archive holds ['A', 'B']: name one with 'tensor'"),
    ({"file": "linked/x.npy"}, "linked/ is a symbolic link to a folder"),  # there, but not the package's
])  # fmt: skip
def test_an_entry_on_a_package_file_without_its_array_is_refused_naming_it(package, entry, fragment) -> None:
    """A file already there is not created again: an entry it holds no array for is refused, naming
    test.json's entry and why, writing nothing."""
    (package / "data").mkdir()
    (package / "data" / "x.npy").write_bytes(_npy(np.zeros(3, np.float32)))
    (package / "data" / "s.npz").write_bytes(_npz(A=np.zeros(3, np.float32), B=np.ones(2, np.float32)))
    outside = package.parent / "outside"
    outside.mkdir()
    (outside / "x.npy").write_bytes(_npy(np.zeros(3, np.float32)))
    (package / "linked").symlink_to(outside, target_is_directory=True)
    _edit_tests(package, lambda cases: cases[0].update(expected={"Y": entry}))
    files = _tree(package)
    assert_error(_expect(package, code=2), "error: test.json: cases[0].expected.Y: ", fragment)
    assert _tree(package) == files and (outside / "x.npy").read_bytes() == _npy(np.zeros(3, np.float32))


def test_a_failing_case_leaves_no_new_file_behind(package) -> None:
    _edit_tests(package, lambda cases: cases[0].update(expected={"Y": {"file": "data/new/tail.Y.npy"}}))
    (package.parent / "ref.py").write_text(
        REFERENCES + "\ndef fails_for_f16(inputs, attrs):\n"
        "    if inputs['X'].shape != (3, 5):\n"
        "        raise RuntimeError('second case')\n"
        "    return {'Y': 3.0 * inputs['X']}\n", "utf-8")  # fmt: skip
    files = _tree(package)
    assert "nothing was written" in _expect(package, "fails_for_f16", code=1).stderr
    assert _tree(package) == files


def test_a_write_that_fails_removes_the_folders_it_made(package) -> None:
    """The second new file's name is too long for the file system's temporary file: the first's
    folder, made before the files were written, goes too."""
    long_name = "y" * 240 + ".npy"  # a name the package may hold, whose temporary file (22 more) may not

    def edit(cases):
        cases[0]["expected"] = {"Y": {"file": "data/new/tail.Y.npy"}}
        cases[2]["expected"] = {"Y": {"file": long_name}}

    _edit_tests(package, edit)
    files = _tree(package)
    result = _expect(package, code=1)
    assert "cannot write" in result.stderr and "nothing was written" in result.stderr, result.stderr
    assert _tree(package) == files


def test_a_rename_that_fails_puts_back_the_files_already_replaced(package, monkeypatch) -> None:
    """test.json's rename fails (a full disk, injected) after the data files' succeeded: they are
    put back and the new one removed, so the package is as it was and its digests still hold (the
    data files had stayed new beside the old test.json, a package half-written)."""
    import os

    (package / "tail.Y.npy").write_bytes(_npy(np.zeros((3, 5), np.float32)))

    def edit(cases):
        cases[0]["expected"] = {"Y": {"file": "tail.Y.npy"}}
        cases[2]["expected"] = {"Y": {"file": "data/new.Y.npy"}}

    _edit_tests(package, edit)
    files = _tree(package)
    real_replace = os.replace

    def replace(src, dst):
        if os.path.basename(dst) == "test.json":
            raise OSError(28, "No space left on device")
        return real_replace(src, dst)

    monkeypatch.setattr(os, "replace", replace)
    result = _expect(package, code=1)
    assert "test.json: cannot write it (No space left on device); nothing was written" in result.stderr, result.stderr
    assert _tree(package) == files
    monkeypatch.undo()
    invoke(CliRunner(), "digest", str(package), "--check")


@pytest.mark.parametrize("there", [True, False])
def test_a_data_file_larger_than_a_package_file_may_be_is_refused(package, there) -> None:
    """9 MB of float32 values: refused before anything is written (the file and test.json had been
    replaced, then metadata.json's refresh failed reading the file, leaving the package stale)."""
    if there:
        (package / "big.Y.npy").write_bytes(_npy(np.zeros((3, 5), np.float32)))

    def edit(cases):
        cases[0]["inputs"]["X"]["shape"] = [1500, 1500]
        cases[0]["expected"] = {"Y": {"file": "big.Y.npy"}}

    _edit_tests(package, edit)
    files = _tree(package)
    result = _expect(package, code=2)
    assert_error(result, "test.json: cases[0].expected.Y: 'big.Y.npy' would be 9000128 bytes, more than a package file may "
                 "be (8388608): make the case smaller, or give the arrays of a shared file files of their own\n")
    assert _tree(package) == files


def test_a_data_file_of_exactly_a_package_file_s_bytes_is_written(package) -> None:
    """8 MiB, which the loader reads: a .npy of 128 header bytes and 2,097,120 float32 values."""
    def edit(cases):
        cases[0]["inputs"]["X"]["shape"] = [2097120]
        cases[0]["expected"] = {"Y": {"file": "big.Y.npy"}}

    _edit_tests(package, edit)
    assert "1 data file written (1 new: big.Y.npy)" in _expect(package).stdout
    assert (package / "big.Y.npy").stat().st_size == 8 * 1024 * 1024


def test_a_large_inline_entry_is_written_with_a_note_naming_the_data_file_to_name_instead(package) -> None:
    """An author's 6,000 expected values went into test.json inline without a word:
    written, and a note names the entry and the data file that keeps test.json readable; at the
    limit and below, no note."""
    _edit_tests(package, lambda cases: cases[0]["inputs"]["X"].update(shape=[2, 513]))
    result = _expect(package)
    assert ('note: test.json cases[0].expected.Y: this entry holds 1026 values inline; name a data file instead '
            '({"file": "tail-3x5-f32.Y.npy"}), which expect creates') in " ".join(result.stdout.split())  # fmt: skip
    written = json.loads((package / "test.json").read_text("utf-8"))["cases"][0]["expected"]["Y"]
    assert len(written["values"]) == 1026  # written inline all the same
    _edit_tests(package, lambda cases: cases[0]["inputs"]["X"].update(shape=[2, 512]))
    assert "note:" not in _expect(package).stdout

    def to_file(cases):  # an entry naming a data file holds no values inline, whatever the shape it gives
        cases[0]["inputs"]["X"].update(shape=[2, 513])
        cases[0]["expected"] = {"Y": {"file": "tail.Y.npy", "dtype": "float32", "shape": [2, 513]}}

    _edit_tests(package, to_file)
    assert "note:" not in _expect(package).stdout


def test_a_test_json_larger_than_a_package_file_may_be_is_refused(package) -> None:
    """A million values written inline make test.json about 11 MB: refused before anything is
    written, naming the entry and the data file to name instead (test.json had been replaced, then
    metadata.json's refresh failed reading it, and the package no longer loaded)."""
    _edit_tests(package, lambda cases: cases[0]["inputs"]["X"].update(shape=[1000, 1000]))
    files = _tree(package)
    result = _expect(package, code=2)
    assert_error(result, "cases[0].expected.Y", "test.json would be", "more than a package file may be (8388608)",
                 "1000000 values inline", '{"file": "tail-3x5-f32.Y.npy"}')  # fmt: skip
    assert _tree(package) == files


def test_a_package_larger_than_the_loader_opens_is_refused(package) -> None:
    """Files of 8 MiB (sparse: no disk used) leave the package 1 MiB below the 512 MiB its listed
    files may hold together; a new 2 MB data file would pass it: refused before anything is
    written, naming the entry (it had been written and the digests refreshed, and the package no
    longer loaded: 'the listed files hold more than 512 MiB together')."""
    from webgpu_kernels.digests import MAX_FILE_BYTES, MAX_PACKAGE_BYTES, package_files

    def edit(cases):
        cases[2]["inputs"]["X"]["shape"] = [1000, 1000]
        cases[2]["expected"] = {"Y": {"file": "data/wide.Y.npy"}}
        cases[0]["expected"] = {"Y": {"file": "tail.Y.npy"}}  # smaller, and named after it: the largest is by size

    _edit_tests(package, edit)
    room = MAX_PACKAGE_BYTES - sum((package / name).stat().st_size for name in package_files(package)) - (1 << 20)
    (package / "blobs").mkdir()
    for i in range(room // MAX_FILE_BYTES + 1):
        with open(package / "blobs" / f"b{i}.bin", "wb") as blob:
            blob.truncate(min(MAX_FILE_BYTES, room - i * MAX_FILE_BYTES))
    before = (package / "test.json").read_bytes(), (package / "metadata.json").read_bytes()
    result = _expect(package, code=2)
    assert_error(result, "test.json: cases[2].expected.Y: the package's files would hold",
                 "bytes together, more than the loader opens (536870912)",
                 "; the largest file written is 'data/wide.Y.npy' (2000128 bytes): make cases smaller or fewer")  # fmt: skip
    assert ((package / "test.json").read_bytes(), (package / "metadata.json").read_bytes()) == before
    assert not (package / "data").exists() and not (package / "tail.Y.npy").exists()


def test_a_package_an_inline_entry_takes_past_what_the_loader_opens_is_refused_naming_test_json(package) -> None:
    """No data file written: test.json's own growth (a case given its expected values) passes the
    512 MiB, refused naming test.json's cases, no data file to blame."""
    from webgpu_kernels.digests import MAX_FILE_BYTES, MAX_PACKAGE_BYTES, package_files
    from webgpu_kernels.expected import dumps

    _expect(package)  # test.json in expect's own layout: what it grows by is the entry it writes
    doc = json.loads((package / "test.json").read_text("utf-8"))
    del doc["cases"][0]["expected"]
    (package / "test.json").write_text(dumps(doc, step=" ") + "\n", "utf-8")
    room = MAX_PACKAGE_BYTES - sum((package / name).stat().st_size for name in package_files(package)) - 10
    (package / "blobs").mkdir()
    for i in range(room // MAX_FILE_BYTES + 1):
        with open(package / "blobs" / f"b{i}.bin", "wb") as blob:
            blob.truncate(min(MAX_FILE_BYTES, room - i * MAX_FILE_BYTES))
    files = {name: (package / name).read_bytes() for name in ("test.json", "metadata.json")}
    result = _expect(package, code=2)
    assert_error(result, "test.json: cases: the package's files would hold", "more than the loader opens (536870912)")
    assert result.stderr.splitlines()[0].endswith("more than the loader opens (536870912)")  # no data file named
    assert {name: (package / name).read_bytes() for name in files} == files


def test_new_data_files_past_the_package_s_file_count_are_refused(package) -> None:
    """A package of 999 files (metadata.json aside) gets two new ones: refused before anything is
    written, naming the entry (the files and test.json had been written, then metadata.json's
    refresh refused the folder as 'not a kernel package', leaving it stale)."""
    from webgpu_kernels.digests import MAX_PACKAGE_FILES, package_files

    notes = package / "notes"
    notes.mkdir()
    for i in range(MAX_PACKAGE_FILES - 1 - len(package_files(package))):
        (notes / f"n{i}.txt").write_text("x", "utf-8")

    def edit(cases):
        cases[0]["expected"] = {"Y": {"file": "a.Y.npy"}}
        cases[2]["expected"] = {"Y": {"file": "b.Y.npy"}}

    _edit_tests(package, edit)
    files = _tree(package)
    result = _expect(package, code=2)
    assert_error(result, "cases[2].expected.Y", "'b.Y.npy' would make the package's files 1001",
                 f"more than a package may hold ({MAX_PACKAGE_FILES})")  # fmt: skip
    assert _tree(package) == files


@pytest.mark.parametrize("function", ["wider_float", "wider_int"])
def test_an_integer_output_the_dtype_cannot_hold_is_refused(tmp_path, function) -> None:
    """A reference's integer result past the output's range was clipped (a float64 one: 2^40 + x as
    int32's maximum) or wrapped (an int64 one), and written: a saturating (or wrapping) kernel then
    passed, where test.json's own inline value past the range is refused (an expected value is the
    true result, never clipped)."""
    import shutil

    from conftest import PACKAGES_DIR

    root = shutil.copytree(PACKAGES_DIR / "demo.Transpose", tmp_path / "pkg")
    doc = json.loads((root / "test.json").read_text("utf-8"))
    doc["cases"] = [c for c in doc["cases"] if c["name"] == "rank1-7-i32"]
    (root / "test.json").write_text(json.dumps(doc, indent=1), "utf-8")
    (tmp_path / "ref.py").write_text("import numpy as np\n\n"
                                     "def wider_float(inputs, attrs):\n"
                                     "    return {'transposed': inputs['data'].astype(np.float64) + 2.0**40}\n\n"
                                     "def wider_int(inputs, attrs):\n"
                                     "    return {'transposed': inputs['data'].astype(np.int64) + 2**40}\n", "utf-8")  # fmt: skip
    before = (root / "test.json").read_bytes()
    result = invoke(CliRunner(), "expect", str(root), "--reference", f"{tmp_path / 'ref.py'}:{function}", code=2)
    assert_error(result, "case 'rank1-7-i32'", "outside int32's range")
    assert (root / "test.json").read_bytes() == before


def test_a_case_s_bad_input_is_placed_in_test_json(package) -> None:
    """A case whose inputs cannot be built is named where test.json holds it, as `validate` and
    `test` name it: `expect` had said "case 'x' given as a dict (read as cases[0]): cases[0]...",
    a path that was not in the file, for the third case of test.json."""
    _edit_tests(package, lambda cases: cases[2]["inputs"]["X"].update(special={"at": [130], "values": [1]}))
    result = invoke(CliRunner(), "expect", str(package), "--reference", f"{package.parent / 'ref.py'}:triple", code=2)
    assert_error(result, f"{package / 'test.json'}: cases[2].inputs.X.special.at: index 130 is out of range")
    assert "read as cases[0]" not in result.stderr


def test_a_case_dtype_outside_the_constraint_is_told_to_change_the_package_not_astype(package) -> None:
    """A test.json case whose dtype its type constraint lacks ended in Python's advice, "(convert
    with .astype(np.float32))", which a case file cannot follow (a review)."""
    doc = json.loads((package / "test.json").read_text("utf-8"))
    doc["cases"].append({**{k: v for k, v in REFUSAL.items() if k != "refused"}, "name": "int32-kept",
                         "expected": {"Y": {"shape": [4], "values": [3, 6, 9, 12]}}})  # fmt: skip
    (package / "test.json").write_text(json.dumps(doc, indent=1), "utf-8")
    invoke(CliRunner(), "digest", str(package))
    advice = "add int32 to typeConstraints.T in manifest.json, or make the case refused: \"refused\": {\"error\": \"DTypeError\""
    tested = invoke(CliRunner(), "test", str(package), code=1)
    validated = invoke(CliRunner(), "validate", str(package), code=1)
    expected = invoke(CliRunner(), "expect", str(package), "--reference", f"{package.parent / 'ref.py'}:triple", code=2)
    for result in (tested, validated, expected):
        text = " ".join(result.output.split())  # rich wraps long lines
        assert "got int32" in text and advice in text and ".astype" not in text, result.output


def test_a_case_boolean_for_a_number_is_told_the_number_to_write(package) -> None:
    """A case's `"tunables": {"WORKGROUP_SIZE": true}` said "(pass 1: ...)", a Python call's advice."""
    doc = json.loads((package / "test.json").read_text("utf-8"))
    doc["cases"][0]["tunables"] = {"WORKGROUP_SIZE": True}
    (package / "test.json").write_text(json.dumps(doc, indent=1), "utf-8")
    invoke(CliRunner(), "digest", str(package))
    tested = invoke(CliRunner(), "test", str(package), code=1)
    validated = invoke(CliRunner(), "validate", str(package), code=1)
    expected = invoke(CliRunner(), "expect", str(package), "--reference", f"{package.parent / 'ref.py'}:triple", code=2)
    for result in (tested, validated, expected):
        text = " ".join(result.output.split())
        assert "(write 1 in the case's tunables: a boolean is not a number here)" in text, result.output
        assert "pass 1" not in text and "--tunable" not in text, result.output


def test_a_case_missing_an_input_is_told_to_give_it_in_the_case_not_with_i(package) -> None:
    """A test.json case without a required input: expect's error ended in the command line's advice
    "on the command line: -i X=DIMS:f32 (or f16)", an option expect does not take."""
    doc = json.loads((package / "test.json").read_text("utf-8"))
    doc["cases"][0]["inputs"] = {}
    (package / "test.json").write_text(json.dumps(doc, indent=1), "utf-8")
    invoke(CliRunner(), "digest", str(package))
    result = invoke(CliRunner(), "expect", str(package), "--reference", f"{package.parent / 'ref.py'}:triple", code=2)
    text = " ".join(result.output.split())
    assert "argument 'X'" in text and "got nothing" in text, result.output
    assert "-i X=" not in text and "on the command line" not in text, result.output
    assert "(give 'X' in the case's \"inputs\")" in text, result.output


def test_a_first_metadata_json_written_by_expect_is_contract_version_1(package) -> None:
    """With metadata.json missing, `expect` wrote one at the manifest's sinceVersion (17 for an
    opset-17 op), silently, where package-files.md says a first contract is 1 (`new` writes 1).
    An existing one keeps its version."""
    manifest = json.loads((package / "manifest.json").read_text("utf-8"))
    (package / "manifest.json").write_text(json.dumps({**manifest, "sinceVersion": 17}, indent=2), "utf-8")
    (package / "metadata.json").unlink()
    result = invoke(CliRunner(), "expect", str(package), "--reference", f"{package.parent / 'ref.py'}:triple")
    assert json.loads((package / "metadata.json").read_text("utf-8"))["version"] == 1
    assert "metadata.json written (contract version 1" in result.stdout, result.stdout
    invoke(CliRunner(), "digest", str(package), "--version", "3")
    result = invoke(CliRunner(), "expect", str(package), "--reference", f"{package.parent / 'ref.py'}:triple")
    assert json.loads((package / "metadata.json").read_text("utf-8"))["version"] == 3
    assert "metadata.json refreshed" in result.stdout


@pytest.mark.parametrize(("case", "first"), [(0, {"shape": [3, 5], "generate": {"distribution": "normal", "seed": 1}}),
                                             (0, {"file": "x0.npy"}),
                                             (1, {"file": "b.npz", "tensor": "Q"})])  # a refusal case's unreadable one
def test_an_expected_entry_on_the_array_a_later_input_reads_is_refused(package, case, first) -> None:
    """Every input of every case is checked, not only those before an inline one, one of another
    file or one that cannot be read."""
    manifest = json.loads((package / "manifest.json").read_text("utf-8"))
    manifest["inputs"].append({"role": "B", "dtype": "T", "optional": True})
    manifest["args"]["B"] = {"kind": "tensor", "semantic": "B", "role": "input"}
    (package / "manifest.json").write_text(json.dumps(manifest, indent=2), "utf-8")
    (package / "x0.npy").write_bytes(_npy(np.zeros((3, 5), np.float32)))
    (package / "b.npz").write_bytes(_npz(B=np.ones((3, 5), np.float32)))

    def edit(cases):
        cases[case]["inputs"] = {"X": first, "B": {"file": "b.npz", "tensor": "B"}}
        cases[0]["expected"] = {"Y": {"file": "b.npz", "tensor": "B"}}

    _edit_tests(package, edit)
    files = _tree(package)
    assert_error(_expect(package, code=2), "test.json: cases[0].expected.Y: 'b.npz' tensor 'B' is the array "
                 f"cases[{case}].inputs.B reads")  # fmt: skip
    assert _tree(package) == files


def test_the_reference_gets_float_inputs_in_float64_others_as_they_are_and_the_attributes(tmp_path) -> None:
    """docs/cli.md: FUNCTION(inputs, attrs) gets each case's inputs as `test` builds them, float ones
    widened to float64, integer and boolean ones as they are, and the case's attributes over the
    manifest's defaults. The starter's references (3 * X) computed the same in float32 as in float64."""
    import shutil

    from conftest import PACKAGES_DIR

    root = shutil.copytree(PACKAGES_DIR / "ai.onnx.Cast", tmp_path / "pkg")
    doc = json.loads((root / "test.json").read_text("utf-8"))
    names = ["f32-specials-9", "f16-subnormals-5", "i32-ties-to-even-11", "u64-extremes-5", "bool-mask-3x5"]
    doc["cases"] = [c for c in doc["cases"] if c["name"] in names or "refused" in c][:len(names) + 1]
    assert [c["name"] for c in doc["cases"] if "refused" not in c] == names and "refused" in doc["cases"][-1]
    # a bfloat16 input (no NumPy float: ml_dtypes' kind "V") is widened too; expect runs no shader
    manifest = json.loads((root / "manifest.json").read_text("utf-8"))
    manifest["typeConstraints"]["T1"].append("bfloat16")
    (root / "manifest.json").write_text(json.dumps(manifest, indent=2), "utf-8")
    doc["cases"].append({"name": "bf16-3", "types": {"T1": "bfloat16"}, "attrs": {"to": 1},
                         "inputs": {"input": {"shape": [3], "values": [1.5, -2.0, 3.0]}}})  # fmt: skip
    (root / "test.json").write_text(json.dumps(doc, indent=1), "utf-8")
    log = tmp_path / "calls.jsonl"
    (tmp_path / "ref.py").write_text("import json\n\nimport numpy as np\n\n"
                                     "def cast(inputs, attrs):\n"
                                     f"    with open({str(log)!r}, 'a') as log:\n"
                                     "        log.write(json.dumps([inputs['input'].dtype.name, attrs]) + '\\n')\n"
                                     "    return {'output': inputs['input'].astype(np.float64)}\n", "utf-8")  # fmt: skip
    result = invoke(CliRunner(), "expect", str(root), "--reference", f"{tmp_path / 'ref.py'}:cast")
    assert f"{len(names) + 1} cases written, 1 refusal case left" in result.stdout
    calls = [json.loads(line) for line in log.read_text("utf-8").splitlines()]
    dtypes = ("float64", "float64", "int32", "uint64", "bool", "float64")
    assert calls == [[dtype, {"to": 1, "saturate": 1}] for dtype in dtypes]


def test_the_output_shape_checked_is_the_one_the_case_s_attributes_give(tmp_path) -> None:
    """A Transpose case's perm [2, 0, 1] makes its output [4, 2, 3] of a [2, 3, 4] input (the
    default perm, reversed axes, [4, 3, 2]): the reference's right answer is written, not refused
    as another shape than the kernel's."""
    import shutil

    from conftest import PACKAGES_DIR

    root = shutil.copytree(PACKAGES_DIR / "demo.Transpose", tmp_path / "pkg")
    doc = json.loads((root / "test.json").read_text("utf-8"))
    names = ["rank3-2x3x4-201-f32", "rank3-2x3x4-201-i32"]
    doc["cases"] = [c for c in doc["cases"] if c["name"] in names]
    for case in doc["cases"]:
        del case["expected"]  # written afresh, as for a case added with its inputs only
    (root / "test.json").write_text(json.dumps(doc, indent=1), "utf-8")
    (tmp_path / "ref.py").write_text("import numpy as np\n\n"
                                     "def transpose(inputs, attrs):\n"
                                     "    return {'transposed': np.transpose(inputs['data'], attrs['perm'] or None)}\n",
                                     "utf-8")  # fmt: skip
    result = invoke(CliRunner(), "expect", str(root), "--reference", f"{tmp_path / 'ref.py'}:transpose")
    assert "2 cases written" in result.stdout
    kernel = wk.load_kernel(root, verify_digests=False)
    for case in json.loads((root / "test.json").read_text("utf-8"))["cases"]:
        x = wk.test_case_inputs(kernel, case["name"])["data"]
        entry = case["expected"]["transposed"]
        assert entry["shape"] == [4, 2, 3] and entry["dtype"] == x.dtype.name, entry
        np.testing.assert_array_equal(np.asarray(entry["values"], np.float64).astype(x.dtype),
                                      x.transpose(2, 0, 1).reshape(-1))  # fmt: skip


def test_an_entry_s_stale_dtype_and_shape_are_those_of_the_output_written(package) -> None:
    """A case whose types or shapes changed since its entries were written: each entry's own
    `dtype` and `shape` become the output's (the data file's entry keeping its keys, in their
    order), so that `test` reads the values as they were written."""
    def edit(cases):
        cases[0]["expected"] = {"Y": {"file": "tail.Y.npy", "dtype": "float16", "shape": [1]}}
        cases[2]["expected"] = {"Y": {"dtype": "float32", "shape": [2], "values": [0, 0]}}

    _edit_tests(package, edit)
    _expect(package)
    cases = json.loads((package / "test.json").read_text("utf-8"))["cases"]
    assert cases[0]["expected"] == {"Y": {"file": "tail.Y.npy", "dtype": "float32", "shape": [3, 5]}}
    assert [(k, v) for k, v in cases[2]["expected"]["Y"].items() if k != "values"] == [("dtype", "float16"),
                                                                                         ("shape", [2, 65])]  # fmt: skip
    np.testing.assert_array_equal(np.load(package / "tail.Y.npy"), _tripled(package, "tail-3x5-f32"))
    np.testing.assert_array_equal(np.asarray(cases[2]["expected"]["Y"]["values"], np.float16),
                                  _tripled(package, "workgroups-2x65-f16").reshape(-1))  # fmt: skip
    tested = json.loads(invoke(CliRunner(), "test", str(package), "--json").stdout)
    assert tested["ok"] and {r["status"] for r in tested["packages"][0]["results"]} == {"pass"}
