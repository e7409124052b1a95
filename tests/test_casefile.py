"""test.json and bench.json (casefile.py, case_format.py): schemas, tensor entries, data files (the
comparison rule: test_comparison.py)."""

from __future__ import annotations

import io
import json
import math
import subprocess
import sys
import warnings
import zipfile
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import safetensors.numpy
from hypothesis import event, given, settings
from hypothesis import strategies as st

import webgpu_kernels as wk
from webgpu_kernels import case_format, casefile
from webgpu_kernels.case_data import generate
from webgpu_kernels.casefile import CaseFileError
from webgpu_kernels.comparison import Tolerance
from webgpu_kernels.digests import json_path as json_path_of
from webgpu_kernels.package import embedded_ids, open_embedded

REPO = Path(__file__).resolve().parent.parent
QUICK_GELU = "com.microsoft.QuickGelu"
BIAS_ADD = "com.microsoft.BiasAdd"


def npy(array: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, array)
    return buffer.getvalue()


def build(spec: dict, dtype: str | None = "float32", files: dict[str, bytes] | None = None) -> np.ndarray:
    def read(name: str) -> bytes:
        if files is None or name not in files:
            raise wk.PackageError("file not found in the package", path=name)
        return files[name]

    return casefile.build_tensor(spec, dtype=dtype, read_bytes=read, file="test.json", where="cases[0].inputs.X")


# --- tensor entries -----------------------------------------------------------------------------------


def test_inline_values() -> None:
    flat = build({"shape": [2, 3], "values": [1, 2, 3, 4, "nan", "-inf"]})
    nested = build({"shape": [2, 3], "values": [[1, 2, 3], [4, "nan", "-inf"]]})
    assert flat.dtype == np.float32 and flat.shape == (2, 3)
    assert np.array_equal(flat, nested, equal_nan=True)
    assert build({"shape": [], "values": -1.25}).shape == ()
    assert build({"shape": [], "values": [7]}).tolist() == 7.0
    assert build({"shape": [0, 4], "values": []}).shape == (0, 4)
    # Nested lists stop at the first zero dimension (JSON cannot nest inside []): [[], []] had been
    # "0 values (shape [2, 0]) for shape [2, 0, 1]"; a nesting that disagrees is still refused.
    assert build({"shape": [2, 0, 1], "values": [[], []]}).shape == (2, 0, 1)
    with pytest.raises(CaseFileError, match=r"0 values \(shape \[3, 0\]\) for shape \[2, 0, 1\]"):
        build({"shape": [2, 0, 1], "values": [[], [], []]})
    assert build({"shape": [2], "values": [True, False]}, dtype="int32").tolist() == [1, 0]
    with pytest.raises(CaseFileError, match=r"5 values .* for shape \[2, 3\]") as info:
        build({"shape": [2, 3], "values": [1, 2, 3, 4, 5]})
    assert info.value.json_path == "cases[0].inputs.X.values"
    with pytest.raises(CaseFileError, match="no dtype"):
        build({"shape": [1], "values": [1]}, dtype=None)
    with pytest.raises(CaseFileError, match="no shape"):  # the schema requires one; a direct call may lack it
        build({"values": [1]})


@pytest.mark.parametrize("dtype", ["float32", "int32", "int64", "bool"])
@pytest.mark.parametrize("values", [[[1, 2], [3]], [[1, 2], 3], [1, [2, 3]]])
def test_ragged_inline_values_are_a_case_file_error_at_values(dtype, values) -> None:
    """A nesting whose lists differ in length is no tensor: the case's own error, at its values,
    for an integer dtype (read value by value) as for a float one."""
    with pytest.raises(CaseFileError) as info:
        build({"shape": [2, 2], "values": values}, dtype=dtype)
    assert info.value.json_path == "cases[0].inputs.X.values" and str(info.value).startswith("test.json: ")


def test_special_values_are_written_over_generated_data() -> None:
    spec = {"shape": [4, 4], "generate": {"distribution": "normal", "seed": 1},
            "special": {"at": [0, 5, 15], "values": ["nan", "inf", 65504]}}  # fmt: skip
    array = build(spec, dtype="float16")
    flat = array.reshape(-1)
    assert math.isnan(flat[0]) and flat[5] == np.inf and flat[15] == 65504
    plain = build({k: v for k, v in spec.items() if k != "special"}, dtype="float16").reshape(-1)
    assert flat[1:5].tolist() == plain[1:5].tolist()
    with pytest.raises(CaseFileError, match="out of range") as info:
        build({**spec, "special": {"at": [16], "values": [1]}})
    assert info.value.json_path == "cases[0].inputs.X.special.at"


def test_data_files() -> None:
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    h = np.linspace(-1, 1, 6, dtype=np.float16)
    archive = io.BytesIO()
    np.savez(archive, a=x, b=h)
    files = {"x.npy": npy(x), "both.npz": archive.getvalue(), "t.safetensors": safetensors.numpy.save({"x": x, "h": h}),
             "one.safetensors": safetensors.numpy.save({"h": h})}  # fmt: skip
    assert build({"file": "x.npy"}, files=files).tolist() == x.tolist()
    assert build({"file": "x.npy", "shape": [3, 4]}, files=files).dtype == np.float32
    assert build({"file": "both.npz", "tensor": "a"}, files=files).tolist() == x.tolist()
    assert build({"file": "t.safetensors", "tensor": "x"}, files=files).tolist() == x.tolist()
    assert build({"file": "one.safetensors"}, dtype="float16", files=files).tolist() == h.tolist()
    with pytest.raises(CaseFileError, match="holds float32 data, the input is float16"):
        build({"file": "x.npy"}, dtype="float16", files=files)
    with pytest.raises(CaseFileError, match=r"holds shape \[3, 4\]"):
        build({"file": "x.npy", "shape": [12]}, files=files)
    with pytest.raises(CaseFileError, match="name one with 'tensor'"):
        build({"file": "both.npz"}, files=files)
    with pytest.raises(CaseFileError, match="no tensor 'y'"):
        build({"file": "t.safetensors", "tensor": "y"}, files=files)
    with pytest.raises(CaseFileError, match="file not found"):
        build({"file": "missing.npy"}, files=files)
    with pytest.raises(CaseFileError):
        build({"file": "bad.npy"}, files={"bad.npy": b"not numpy"})
    pickled = io.BytesIO()
    np.save(pickled, np.array([{"a": 1}], dtype=object), allow_pickle=True)
    with pytest.raises(CaseFileError):
        build({"file": "obj.npy"}, files={"obj.npy": pickled.getvalue()})


@pytest.mark.parametrize("names", [("m0.npy", "m0"), ("m0", "m0.npy"), ("m0.npy", "m0.npy")])
def test_npz_members_that_share_a_key_are_refused(names: tuple[str, str]) -> None:
    """NumPy keys m0.npy and m0 both as m0 (and a zip may hold one name twice): the member read
    had been whichever came last, silently."""
    archive = io.BytesIO()
    with zipfile.ZipFile(archive, "w") as zf, warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # zipfile warns of a duplicate name
        zf.writestr(names[0], npy(np.zeros(3, np.float32)))
        zf.writestr(names[1], npy(np.ones(3, np.float32)))
    files = {"twins.npz": archive.getvalue()}
    for tensor in ("m0", None):
        with pytest.raises(CaseFileError, match="twins.npz") as info:
            build({"file": "twins.npz", **({"tensor": tensor} if tensor else {})}, files=files)
        assert info.value.file == "test.json" and info.value.json_path == "cases[0].inputs.X"
        assert f"{names[0]!r} and {names[1]!r}" in str(info.value) and "'m0'" in str(info.value)


# --- test.json --------------------------------------------------------------------------------------


def minimal_case(**extra) -> dict:
    case = {"name": "c", "types": {"T": "float32"}, "inputs": {"X": {"shape": [2], "values": [1, 2]}},
            "expected": {"Y": {"shape": [2], "values": [1, 2]}}}  # fmt: skip
    case.update(extra)
    return case


def test_schema_errors_all_with_json_paths() -> None:
    data = {
        "tolerances": {"float32": {"rtol": -1}},
        "cases": [
            minimal_case(inputs={"X": {"shape": [2], "generate": {"distribution": "gaussian", "seed": 1}}}),
            minimal_case(name="d", expected={"Y": {"values": [1]}}),
            minimal_case(name="e", typo=1),
        ],
    }
    errors = case_format.check_test_data(data)
    paths = {e.json_path for e in errors}
    assert "tolerances.float32.rtol" in paths
    assert "cases[0].inputs.X.generate.distribution" in paths
    assert "cases[1].expected.Y" in paths
    assert "cases[2]" in paths
    with pytest.raises(CaseFileError):
        casefile.parse_test_file(data)


def test_structure_errors() -> None:
    data = {"cases": [
        minimal_case(),
        minimal_case(inputs={"X": {"shape": [2], "values": [1, 2], "generate": {"distribution": "normal", "seed": 1}}}),
        minimal_case(name="u", inputs={"X": {"shape": [2], "generate": {"distribution": "uniform", "seed": 1,
                                                                         "mean": 0, "low": 3, "high": 1}}}),
        minimal_case(name="s", inputs={"X": {"shape": [2], "values": [1, 2], "special": {"at": [0, 1], "values": [1]}}}),
    ]}  # fmt: skip
    messages = {(e.json_path, e.detail) for e in case_format.check_test_data(data)}
    assert ("cases[1].name", "duplicate case name 'c' (also cases[0])") in messages
    assert any(p == "cases[1].inputs.X" and "exactly one of" in m for p, m in messages)
    assert any(p == "cases[2].inputs.X.generate" and "['mean'] do not apply" in m for p, m in messages)
    assert any(p == "cases[2].inputs.X.generate" and "low is above high" in m for p, m in messages)
    assert any(p == "cases[3].inputs.X.special" for p, m in messages)


def test_tolerances_merge_per_key() -> None:
    data = {"tolerances": {"float32": {"rtol": 1e-5, "atol": 1e-6}, "float16": {"rtol": 1e-3}},
            "cases": [minimal_case(tolerances={"float32": {"rtol": 2e-5}}), minimal_case(name="d")]}  # fmt: skip
    first, second = casefile.parse_test_file(data).cases
    assert first.tolerance("float32") == Tolerance(rtol=2e-5, atol=1e-6)
    assert second.tolerance("float32") == Tolerance(rtol=1e-5, atol=1e-6)
    assert first.tolerance("float16") == Tolerance(rtol=1e-3, atol=0.0)
    assert first.tolerance("int32") == Tolerance()


def test_case_inputs_and_expected_through_the_manifest() -> None:
    manifest = wk.get_kernel(BIAS_ADD).manifest
    data = {"cases": [{
        "name": "c", "types": {"T": "float16"},
        "inputs": {"X": {"shape": [1, 1, 4], "values": [1, 2, 3, 4]}, "bias": {"shape": [4], "dtype": "float16",
                                                                            "values": [0, 0, 0, 0.1]},
                   "skip": {"shape": [1, 1, 4], "generate": {"distribution": "normal", "seed": 5}}},
        "expected": {"Y": {"shape": [1, 1, 4], "values": [1, 2, 3, 0.1]}},
    }]}  # fmt: skip
    case = casefile.parse_test_file(data).cases[0]
    arrays = case.build_inputs(manifest, lambda name: b"")
    assert {a.dtype for a in arrays.values()} == {np.dtype(np.float16)}
    assert case.type_label(manifest) == "float16"
    expected = case.build_expected(lambda name: b"", {"Y": "float16"})["Y"]
    assert expected.dtype == np.float64
    assert expected.reshape(-1)[3] == float(np.float16(0.1))  # stored precision: the output's dtype
    bad = casefile.parse_test_file({"cases": [{**data["cases"][0], "inputs": {"W": {"shape": [1], "values": [1]}}}]})
    with pytest.raises(CaseFileError, match="'W' is not an input") as info:
        bad.cases[0].build_inputs(manifest, lambda name: b"")
    assert info.value.json_path == "cases[0].inputs.W"


def test_a_tensor_past_max_case_elements_says_how_many_it_holds() -> None:
    """It said "more than 16777216 elements" of a real SD shape, with no count."""
    manifest = wk.get_kernel(QUICK_GELU).manifest
    big = {"name": "sd", "types": {"T": "float32"},
           "inputs": {"X": {"shape": [2, 4096, 2560], "generate": {"distribution": "normal", "seed": 1}}},
           "expected": {"Y": {"shape": [1], "values": [0]}}}  # fmt: skip
    with pytest.raises(CaseFileError) as info:
        casefile.parse_test_file({"cases": [big]}).cases[0].build_inputs(manifest, lambda name: b"")
    assert info.value.json_path == "cases[0].inputs.X.shape"
    assert info.value.detail == ("[2, 4096, 2560] holds 20971520 elements, more than the 16777216 (2^24) one tensor "
                                 "of a case may hold (bench.json's shapes have no such bound)")


def test_a_case_holds_at_most_max_case_total_elements() -> None:
    """Each tensor is at most 2^24 elements, but a case's count of them was free: one of 12
    generated inputs of 2^24 took `webgpu-kernels test` to 2.8 GB (a review). The
    shapes the file gives are summed when it is read, inputs and expected outputs together."""
    from webgpu_kernels.case_data import MAX_CASE_ELEMENTS, MAX_CASE_TOTAL_ELEMENTS

    generate = {"distribution": "normal", "seed": 1}
    big = {"shape": [MAX_CASE_ELEMENTS], "generate": generate}
    n = MAX_CASE_TOTAL_ELEMENTS // MAX_CASE_ELEMENTS  # 4: a full case, its expected output included
    case = {"name": "many-big", "inputs": {f"I{i}": big for i in range(n - 1)},
            "expected": {"Y": {"shape": [MAX_CASE_ELEMENTS], "file": "y.npy"}}}  # fmt: skip
    assert case_format.check_test_data({"cases": [case]}) == []
    case["inputs"]["A"] = {"shape": [1], "values": [0]}  # one element more
    [error] = case_format.check_test_data({"cases": [case]})
    assert (error.json_path, error.detail) == ("cases[0]", (
        f"case 'many-big' holds {MAX_CASE_TOTAL_ELEMENTS + 1} elements in its inputs and expected outputs together, "
        f"more than the {MAX_CASE_TOTAL_ELEMENTS} (2^26) a case may hold: split it"))
    with pytest.raises(CaseFileError, match="holds 67108865 elements"):
        casefile.parse_test_file({"cases": [case]})


def test_data_files_without_a_shape_count_toward_the_case_when_read(monkeypatch) -> None:
    """A data file's shape is known once it is read (a .npz member of 2^24 zeros is 65 KB): the
    case is refused as it reaches the bound, before its next shaped entry is built."""
    monkeypatch.setattr(casefile, "MAX_CASE_TOTAL_ELEMENTS", 100)
    manifest = wk.get_kernel(BIAS_ADD).manifest
    files = {"x.npy": npy(np.zeros(60, np.float32)), "y.npy": npy(np.zeros(60, np.float32))}
    generate = {"distribution": "normal", "seed": 1}
    case = {"name": "c", "types": {"T": "float32"}, "inputs": {"X": {"file": "x.npy"}},
            "expected": {"Y": {"file": "y.npy"}}}  # fmt: skip
    parsed = casefile.parse_test_file({"cases": [case]}).cases[0]  # no shape given: nothing to sum yet
    inputs = parsed.build_inputs(manifest, files.__getitem__)
    with pytest.raises(CaseFileError, match="case 'c' holds 120 elements in its inputs and expected") as info:
        parsed.build_expected(files.__getitem__, {"Y": "float32"}, inputs=inputs)
    assert info.value.json_path == "cases[0].expected"
    case["inputs"]["bias"] = {"shape": [41], "generate": generate}  # 60 read, 41 would be built
    parsed = casefile.parse_test_file({"cases": [case]}).cases[0]
    with pytest.raises(CaseFileError, match="case 'c' holds 101 elements") as info:
        parsed.build_inputs(manifest, files.__getitem__)
    assert info.value.json_path == "cases[0].inputs.bias"
    case["inputs"] = {"bias": {"shape": [41], "generate": generate}, "X": {"file": "x.npy"}}  # the file last
    parsed = casefile.parse_test_file({"cases": [case]}).cases[0]
    with pytest.raises(CaseFileError, match="case 'c' holds 101 elements") as info:
        parsed.build_inputs(manifest, files.__getitem__)
    assert info.value.json_path == "cases[0].inputs"


# --- bench.json -------------------------------------------------------------------------------------


@pytest.mark.parametrize("op_id", [QUICK_GELU, BIAS_ADD])
def test_shipped_bench_json_expands_once_per_dtype(op_id: str) -> None:
    """Every embedded case expands once per dtype of its type-variable list, in file order, with
    every input's shape and dtype resolved (what `bench` and `tune` run)."""
    data = open_embedded(op_id).read_json("bench.json")
    assert case_format.check_bench_data(data) == []
    bench = casefile.parse_bench_file(data)
    manifest = wk.get_kernel(op_id).manifest
    instances = [i for c in bench.cases for i in c.expand(manifest)]
    assert [(i.case.name, i.types) for i in instances] == [(c["name"], {"T": t}) for c in data["cases"] for t in c["types"]["T"]]
    assert len(instances) == 2 * len(data["cases"])  # every embedded case lists float32 and float16
    for inst, raw in zip(instances, [c for c in data["cases"] for _ in c["types"]["T"]]):
        assert inst.case.tags == tuple(raw["tags"]) and inst.case.attrs == {} and inst.case.tunables == {}
        assert inst.inputs == {role: (tuple(spec["shape"]), inst.types["T"]) for role, spec in raw["inputs"].items()}
    assert {i.type_label() for i in instances} == {"float32", "float16"}


def test_bench_case_expansion_is_the_cartesian_product_of_its_types() -> None:
    """Several type variables give their full product (first variable slowest), an input's own
    dtype wins over its type variable and fills an unlisted one (an empty list is a schema error).
    (BenchCase.expand reads only the manifest's op id, input roles and type variables.)"""
    manifest = SimpleNamespace(op_id="demo.Pair", inputs=[SimpleNamespace(role="A", dtype="T"),
                                                         SimpleNamespace(role="B", dtype="U"),
                                                         SimpleNamespace(role="C", dtype="V")],
                               type_constraints={"T": [], "U": [], "V": []})  # fmt: skip
    bench = casefile.parse_bench_file({"cases": [
        {"name": "two-vars", "inputs": {"A": {"shape": [2, 3]}, "B": {"shape": [3]}, "C": {"shape": [], "dtype": "int32"}},
         "types": {"T": ["float32", "float16"], "U": ["int32", "int64", "uint32"]},
         "attrs": {"alpha": 0.5}, "tunables": {"WORKGROUP_SIZE": 64}, "tags": ["small"]},
    ]})  # fmt: skip
    (two,) = bench.cases
    instances = two.expand(manifest)
    assert [i.types for i in instances] == [
        {"T": t, "U": u, "V": "int32"} for t in ("float32", "float16") for u in ("int32", "int64", "uint32")
    ]
    assert instances[4].inputs == {"A": ((2, 3), "float16"), "B": ((3,), "int64"), "C": ((), "int32")}
    assert (two.attrs, two.tunables, two.tags) == ({"alpha": 0.5}, {"WORKGROUP_SIZE": 64}, ("small",))
    empty = {"cases": [{"name": "none", "inputs": {"A": {"shape": [1]}}, "types": {"T": []}}]}
    assert [e.json_path for e in case_format.check_bench_data(empty)] == ["cases[0].types.T"]


def test_a_bench_case_names_type_variables_and_few_combinations() -> None:
    """8 type variables of 13 dtypes in a 1 kB bench.json were 8e8 instances built by validate and
    bench, and the names need not even be the manifest's type variables."""
    manifest = wk.get_kernel(QUICK_GELU).manifest
    dtypes = ["float32", "float16", "int32", "uint32", "int64", "uint64", "int8", "uint8"]
    many = casefile.parse_bench_file({"cases": [{"name": "a", "inputs": {"X": {"shape": [4]}},
                                                 "types": {f"V{i}": dtypes for i in range(8)}}]})  # fmt: skip
    with pytest.raises(CaseFileError, match="'V0', 'V1'.*not a type variable") as info:
        many.cases[0].expand(manifest)
    assert info.value.json_path == "cases[0].types"
    product = SimpleNamespace(op_id="demo.Many", inputs=[SimpleNamespace(role="X", dtype="V0")],
                              type_constraints={f"V{i}": dtypes for i in range(8)})  # fmt: skip
    with pytest.raises(CaseFileError, match=f"{8**8} combinations, more than {casefile.MAX_TYPE_COMBINATIONS}"):
        many.cases[0].expand(product)


def test_bench_errors() -> None:
    bad = {"cases": [{"name": "a", "inputs": {"X": {"shape": [4]}}, "types": {"T": "float32"}},
                     {"name": "a", "inputs": {"X": {"shape": [-1]}}}]}  # fmt: skip
    paths = {e.json_path for e in case_format.check_bench_data(bad)}
    assert {"cases[0].types.T", "cases[1].inputs.X.shape[0]"} <= paths
    dup = {"cases": [{"name": "a", "inputs": {"X": {"shape": [4]}}}, {"name": "a", "inputs": {"X": {"shape": [4]}}}]}
    assert [e.json_path for e in case_format.check_bench_data(dup)] == ["cases[1].name"]
    manifest = wk.get_kernel(QUICK_GELU).manifest
    case = casefile.parse_bench_file({"cases": [{"name": "a", "inputs": {"X": {"shape": [4]}}}]}).cases[0]
    with pytest.raises(CaseFileError, match="no dtype"):
        case.expand(manifest)
    typed = casefile.parse_bench_file({"cases": [{"name": "a", "inputs": {"X": {"shape": [4], "dtype": "float16"}}}]})
    assert typed.cases[0].expand(manifest)[0].inputs == {"X": ((4,), "float16")}



def test_bench_byte_count_is_read_as_flops_is() -> None:
    """bench.json's top-level ``bytes`` (what one call moves, for a kernel that reads part of an
    input): an expression or a non-negative integer, kept as written; absent, None."""
    case = {"name": "a", "inputs": {"X": {"shape": [4]}}}
    assert casefile.parse_bench_file({"bytes": "2 * numel(shapes.X) * itemSize(dtypes.T)", "cases": [case]}).bytes == \
        "2 * numel(shapes.X) * itemSize(dtypes.T)"
    assert casefile.parse_bench_file({"bytes": 4096, "cases": [case]}).bytes == 4096
    assert casefile.parse_bench_file({"cases": [case]}).bytes is None
    for bad in (-1, "", 1.5, True, [8]):
        assert [e.json_path for e in case_format.check_bench_data({"bytes": bad, "cases": [case]})] == ["bytes"], bad


def test_bench_tolerances_are_read_as_test_json_s() -> None:
    """bench.json's optional top-level ``tolerances`` (how closely bench holds its outputs) takes
    test.json's form and is read as test.json's: a missing rtol or atol is 0; none given, {}."""
    case = {"name": "a", "inputs": {"X": {"shape": [4]}}}
    given = {"float32": {"rtol": 1e-5, "atol": 0.5}, "float16": {"atol": 2}}
    assert case_format.check_bench_data({"tolerances": given, "cases": [case]}) == []
    bench = casefile.parse_bench_file({"tolerances": given, "cases": [case]})
    assert bench.tolerances == {"float32": Tolerance(rtol=1e-5, atol=0.5), "float16": Tolerance(rtol=0.0, atol=2.0)}
    assert casefile.parse_bench_file({"cases": [case]}).tolerances == {}
    bench_schema, test_schema = case_format.case_schema("bench"), case_format.case_schema("test")
    assert bench_schema["properties"]["tolerances"] == test_schema["properties"]["tolerances"]
    for name in ("tolerance", "tolerances", "dtype"):  # one form: the piece is test.json's
        assert bench_schema["$defs"][name] == test_schema["$defs"][name], name


def test_a_bench_case_s_tolerances_merge_over_the_file_s_per_key_as_in_test_json() -> None:
    """A case's ``tolerances`` (one case of a package whose cases differ: a long sum, an int8 path an
    attribute allows) merge key by key over the file's, as test.json's do."""
    data = {"tolerances": {"float32": {"rtol": 1e-5, "atol": 10}, "float16": {"rtol": 1e-3}},
            "cases": [{"name": "a", "inputs": {"X": {"shape": [4]}}, "tolerances": {"float32": {"atol": 0.1}}},
                      {"name": "b", "inputs": {"X": {"shape": [4]}}}]}  # fmt: skip
    assert case_format.check_bench_data(data) == []
    first, second = casefile.parse_bench_file(data).cases
    assert first.tolerances == {"float32": Tolerance(rtol=1e-5, atol=0.1), "float16": Tolerance(rtol=1e-3, atol=0.0)}
    assert second.tolerances == {"float32": Tolerance(rtol=1e-5, atol=10.0), "float16": Tolerance(rtol=1e-3, atol=0.0)}
    bad = {"cases": [{"name": "a", "inputs": {"X": {"shape": [4]}}, "tolerances": {"float32": {"atol": math.inf}}}]}
    assert [e.json_path for e in case_format.check_bench_data(bad)] == ["cases[0].tolerances.float32.atol"]


@pytest.mark.parametrize("tolerances", [
    {"float32": {"rtol": -1}}, {"float33": {"rtol": 1}}, {"float32": {}}, {"float32": {"tol": 1}},
    {"float32": {"atol": "1e-3"}}, {"float32": {"atol": math.inf}}, {"float16": {"rtol": math.nan, "atol": 1}}, [1],
])  # fmt: skip
def test_a_bad_bench_tolerance_is_refused_at_its_json_path_as_test_json_s(tolerances) -> None:
    bench = {"tolerances": tolerances, "cases": [{"name": "a", "inputs": {"X": {"shape": [4]}}}]}
    test = {"tolerances": tolerances, "cases": [minimal_case()]}
    found = [(e.json_path, e.detail) for e in case_format.check_bench_data(bench)]
    assert found and found == [(e.json_path, e.detail) for e in case_format.check_test_data(test)], found
    assert all(path.startswith("tolerances") for path, _ in found), found
    with pytest.raises(CaseFileError):
        casefile.parse_bench_file(bench)


_MISPLACED = {"X": {"shape": [4]}, "generate": {"distribution": "uniform", "seed": 1}}
_MISPLACED_TEST = {"X": {"shape": [4], "values": [1, 2, 3, 4]}, "generate": {"distribution": "uniform", "seed": 1}}


@pytest.mark.parametrize(("kind", "case"), [
    ("bench", {"name": "c", "types": {"T": ["float32"]}, "inputs": _MISPLACED}),
    ("test", {"name": "c", "types": {"T": "float32"}, "inputs": _MISPLACED_TEST,
              "expected": {"Y": {"shape": [4], "values": [0, 0, 0, 0]}}}),
])  # fmt: skip
def test_a_key_written_beside_the_inputs_is_said_to_be_no_input(kind: str, case: dict) -> None:
    """`"inputs": {"X": {...}, "generate": {...}}` got `'shape' is a required property` (bench.json)
    or "Additional properties are not allowed" (test.json) at cases[0].inputs.generate: nothing said
    generate is no input of the op, nor that it belongs inside one."""
    manifest = wk.get_kernel(QUICK_GELU).manifest
    check = case_format.check_bench_data if kind == "bench" else case_format.check_test_data
    [error] = check({"cases": [case]}, manifest=manifest)
    assert error.json_path == "cases[0].inputs.generate"
    assert error.detail.startswith(f"'generate' is not an input of {QUICK_GELU} (its inputs: X); did you mean it "
                                   "inside an input's entry, as in \"X\": {\"shape\": [...], \"generate\": ...}?")
    assert check({"cases": [case]}), "without the manifest: the schema's errors, as before"
    parse = casefile.parse_bench_file if kind == "bench" else casefile.parse_test_file
    with pytest.raises(CaseFileError, match="'generate' is not an input of"):
        parse({"cases": [case]}, manifest=manifest)


def test_an_input_of_another_name_gets_a_did_you_mean() -> None:
    manifest = wk.get_kernel(BIAS_ADD).manifest
    [error] = case_format.check_bench_data({"cases": [{"name": "c", "inputs": {"x": {"shap": [4]}}}]}, manifest=manifest)
    assert error.detail == f"'x' is not an input of {BIAS_ADD} (its inputs: X, bias, skip); did you mean 'X'?"
    parsed = casefile.parse_bench_file({"cases": [{"name": "c", "inputs": {"Bias": {"shape": [4]}}}]})
    with pytest.raises(CaseFileError, match="'Bias' is not an input of .*; did you mean 'bias'"):
        parsed.cases[0].expand(manifest)  # a valid entry under a wrong name: said alike when it is built


def test_a_misplaced_key_in_a_package_s_files_is_named_by_test_validate_and_bench(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from webgpu_kernels import digests
    from webgpu_kernels.cli import main

    from conftest import copy_package

    def edit_json(path: Path, edit) -> None:
        data = json.loads(path.read_text("utf-8"))
        edit(data)
        path.write_text(json.dumps(data), "utf-8")

    root = copy_package(QUICK_GELU, tmp_path / "qg")
    edit_json(root / "bench.json", lambda b: b["cases"].append({"name": "misplaced", "inputs": _MISPLACED}))
    edit_json(root / "test.json", lambda t: t["cases"].append({
        "name": "misplaced", "types": {"T": "float32"}, "inputs": _MISPLACED_TEST, "refused": {"error": "InputError"}}))
    digests.write_metadata(root)
    said = "'generate' is not an input of com.microsoft.QuickGelu (its inputs: X); did you mean it inside"
    for command, code in ((["validate", str(root), "--no-gpu"], 1), (["test", str(root)], 1),
                          (["bench", str(root)], 2)):  # fmt: skip
        result = CliRunner().invoke(main, command)
        text = " ".join(result.output.split())
        assert result.exit_code == code and said in text, (command, result.output)
        assert "required property" not in text and "Additional properties" not in text


def test_a_refused_case_s_own_input_keeps_its_schema_error() -> None:
    """A refused case may pass an input the op lacks, with its own dtype, to test its refusal. Its
    entry without a shape had said 'shape' is a dependency of 'values'; with the manifest known it
    says the name is no input and that a refused case may name one with its own 'dtype', which it
    does: nothing says what is wrong with it."""
    manifest = wk.get_kernel(QUICK_GELU).manifest
    case = {"name": "c", "types": {"T": "float32"}, "refused": {"error": "UnknownInputError"},
            "inputs": {"X": {"shape": [2], "values": [1, 2]}, "W": {"dtype": "float32", "values": [1]}}}  # fmt: skip
    [bare] = case_format.check_test_data({"cases": [case]})
    assert "'shape'" in bare.detail and bare.json_path == "cases[0].inputs.W"
    [error] = case_format.check_test_data({"cases": [case]}, manifest=manifest)
    assert "'shape'" in error.detail, error.detail


def test_an_expression_error_refusal_matches_a_failed_evaluation_never_a_sandbox_refusal() -> None:
    """A call refused while an expression is evaluated for its values (an axis out of range) may be
    a refused case; a sandbox refusal is the package's defect, and no case turns it into a pass."""
    from webgpu_kernels import errors

    data = {"cases": [{"name": "c", "inputs": {}, "refused": {"error": "ExpressionError", "message": "out of range"}}]}
    assert case_format.check_test_data(data) == []
    refusal = casefile.checked_test_file(data).cases[0].refused
    assert refusal == casefile.Refusal("ExpressionError", "out of range")
    failed = errors.ExpressionError("axis 3 is out of range for a shape of rank 3", expression="dim(shapes.X, 3)")
    assert refusal.matches(failed)
    assert not refusal.matches(errors.ExpressionError("division by zero", expression="1 // 0"))  # another message
    broadcast = errors.BroadcastError("[2], [3] do not broadcast: out of range", expression="broadcastShape(a, b)")
    assert refusal.matches(broadcast)  # a subclass, as for any refusal
    sandbox = errors.ExpressionSandboxError("refused by the sandbox: out of range", expression="[0] * n")
    assert not refusal.matches(sandbox) and not casefile.Refusal("ExpressionError").matches(sandbox)
    assert refusal.mismatch(sandbox).startswith("refused with ExpressionSandboxError: ")
    assert "a sandbox refusal is the package's defect" in refusal.mismatch(sandbox)
    assert not refusal.matches(errors.SelectionError("out of range"))
    data["cases"][0]["refused"]["error"] = "ExpressionSandboxError"  # not an error a call is refused with
    [problem] = case_format.check_test_data(data)
    assert problem.json_path == "cases[0].refused.error", problem


def test_a_bench_shape_no_array_can_have_is_refused_when_the_file_is_read() -> None:
    """[0, 2**70] holds no element, so it passed bench's maxBufferSize check, and NumPy raised a raw
    ValueError drawing its inputs (a traceback from `webgpu-kernels bench`)."""
    for shape in ([0, 2**70], [2**62], [2**40, 2**40, 0]):
        bad = {"cases": [{"name": "a", "inputs": {"X": {"shape": [4]}, "Y": {"shape": shape}}}]}
        [error] = case_format.check_bench_data(bad)
        assert error.json_path == "cases[0].inputs.Y.shape" and "no array has it" in error.detail
    assert case_format.check_bench_data({"cases": [{"name": "a", "inputs": {"X": {"shape": [0, 2**61]}}}]}) == []



def test_a_test_shape_no_array_can_have_is_refused_when_the_file_is_read() -> None:
    """test.json's shapes had only their element count summed, which a zero dimension makes 0: an
    input of [0, 2**62, 2**62, 2**62] reached NumPy, whose own message ('array is too big; `arr.size *
    arr.dtype.itemsize` is larger than the maximum possible size') was the case's error, as
    [2**32, 2**32, 0]'s 'cannot reshape array of size 0' was (red team)."""
    for section, role in (("inputs", "X"), ("expected", "Y")):
        for shape in ([0, 2**62, 2**62, 2**62], [2**32, 2**32, 0], [0, 2**70]):
            case = {"name": "a", "inputs": {"X": {"shape": [2], "values": [1, 2]}},
                    "expected": {"Y": {"shape": [2], "values": [1, 2]}}}  # fmt: skip
            case[section][role] = {"shape": shape, "values": []} if section == "expected" else {
                "shape": shape, "generate": {"distribution": "normal", "seed": 1}}
            [error] = case_format.check_test_data({"cases": [case]})
            assert error.json_path == f"cases[0].{section}.{role}.shape", error
            assert error.detail.startswith("shape [") and "no array has it" in error.detail, error.detail
    empty = {"name": "a", "inputs": {"X": {"shape": [0, 2**61], "values": []}}, "expected": {"Y": {"shape": [0], "values": []}}}
    assert case_format.check_test_data({"cases": [empty]}) == []

def test_a_bench_input_may_say_how_it_is_drawn() -> None:
    """bench.json's `generate`: test.json's object without its seed (bench's --seed draws it)."""
    ids = {"name": "a", "inputs": {"I": {"shape": [77], "dtype": "int64",
                                         "generate": {"distribution": "uniform", "low": 0, "high": 49407}}}}  # fmt: skip
    bench = casefile.parse_bench_file({"cases": [ids]})
    assert bench.cases[0].inputs["I"]["generate"] == {"distribution": "uniform", "low": 0, "high": 49407}

    def errors(generate):
        case = {"name": "a", "inputs": {"I": {"shape": [4], "generate": generate}}}
        return [(e.json_path, e.detail) for e in case_format.check_bench_data({"cases": [case]})]

    where = "cases[0].inputs.I.generate"
    assert errors({"distribution": "uniform", "low": 2, "high": 1}) == [(where, "low is above high")]
    # low + (high - low) * u with high - low past float64: every value inf
    assert errors({"distribution": "uniform", "low": -1e308, "high": 1e308}) == [
        (where, "high - low is past float64's range: every value drawn would be infinite")]
    # the same as JSON integers: their difference had been an int past float, a raw OverflowError
    assert errors({"distribution": "uniform", "low": -(10**308), "high": 10**308}) == [
        (where, "high - low is past float64's range: every value drawn would be infinite")]
    # and a JSON integer past float64 itself (float() of it had raised OverflowError)
    assert errors({"distribution": "uniform", "low": -(10**400), "high": 1}) == [
        (where, "high - low is past float64's range: every value drawn would be infinite")]
    assert errors({"distribution": "normal", "low": 0}) == [(where, "['low'] do not apply to the normal distribution")]
    assert errors({"distribution": "normal", "std": 2}) == []
    assert [p for p, _ in errors({"distribution": "uniform", "seed": 3})] == [where]  # bench's --seed, not the file's
    assert [p for p, _ in errors({"distribution": "zipf"})] == [f"{where}.distribution"]


def test_a_normal_draw_past_float64_is_refused_when_the_file_is_read() -> None:
    """mean + std * z had no check (uniform's high - low had): std 1e308 made the draws past 1.8 sigma
    infinite, with NumPy's RuntimeWarning 'overflow encountered in multiply' printed by `test` and
    `bench` and the case run on infinite inputs (red team)."""
    where = "cases[0].inputs.I.generate"
    bad = ({"std": 1e308}, {"mean": -1.7e308, "std": 1e307}, {"mean": 1e308, "std": 1e308}, {"std": 10**308},
           {"mean": -(10**400)}, {"std": 10**400})
    for extra in bad:
        spec = {"distribution": "normal", **extra}
        bench = {"cases": [{"name": "a", "inputs": {"I": {"shape": [4], "generate": spec}}}]}
        test = {"cases": [{"name": "a", "inputs": {"I": {"shape": [4], "generate": {**spec, "seed": 1}}},
                           "expected": {"Y": {"shape": [1], "values": [0]}}}]}  # fmt: skip
        for problems in (case_format.check_bench_data(bench), case_format.check_test_data(test)):
            assert [(e.json_path, e.detail) for e in problems] == [(where, (
                "mean + 9 std (further than any draw) is past float64's range: values drawn would be infinite"))]
    fine = {"distribution": "normal", "mean": 1e307, "std": 1e306}
    assert case_format.check_bench_data({"cases": [{"name": "a", "inputs": {"I": {"shape": [4], "generate": fine}}}]}) == []
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no overflow in the draw itself
        assert np.isfinite(generate({**fine, "seed": 1}, (4096,), "float64")).all()


# --- the embedded test.json files ---------------------------------------------------------------------


@pytest.mark.parametrize("op_id", [QUICK_GELU, BIAS_ADD])
def test_shipped_test_json_is_valid(op_id: str) -> None:
    package = open_embedded(op_id)
    test_file = casefile.read_test_file(package)
    manifest = wk.get_kernel(op_id).manifest
    computed = [case for case in test_file.cases if case.refused is None]
    for case in computed:
        arrays = case.build_inputs(manifest, package.read_bytes)
        expected = case.build_expected(package.read_bytes, {"Y": case.type_label(manifest)})
        assert expected["Y"].shape == arrays["X"].shape, case.name
    assert {c.type_label(manifest) for c in computed} == {"float32", "float16"}
    refused = [case for case in test_file.cases if case.refused is not None]
    assert len(refused) >= 4 and all(c.name.startswith("refused-") and not c.expected for c in refused)


def test_generator_script_output_is_current() -> None:
    """test.json and its data files are what scripts/make_test_cases.py writes (from the float64 references)."""
    result = subprocess.run([sys.executable, str(REPO / "scripts" / "make_test_cases.py"), "--check"],
                            capture_output=True, text=True, timeout=120)  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    assert sorted(line.split(":")[0] for line in result.stdout.splitlines()) == sorted(embedded_ids())


def test_a_case_file_nested_too_deeply_is_one_clear_error():
    """500 nested lists of values made jsonschema's repr recurse out (``validate`` said "the checks
    failed unexpectedly"); the depth is checked first and named where it happens."""
    values: list = [1.0]
    for _ in range(500):
        values = [values]
    data = {"description": "deep", "cases": [{"name": "a", "inputs": {"X": {"shape": [1], "values": values}}}]}
    (error,) = case_format.schema_errors(data, "test", file="test.json")
    assert "nested more than 80 levels deep" in str(error) and error.json_path.startswith("cases[0].inputs.X.values")


@pytest.mark.parametrize("kind", ["test", "bench"])
def test_a_case_file_of_too_many_cases_is_one_error_before_the_schema_walks_them(kind, monkeypatch):
    """validate calls, selects and renders each case per type combination: 10,000 small bench.json
    cases took it 19.7 s. More than MAX_CASES is one error naming the count, and no case is
    schema-checked (a million of them would have been checked one by one first)."""
    case = {"name": "a", "inputs": {"X": {"shape": [2]}}}
    limit = case_format.MAX_CASES
    at_limit = {"cases": [dict(case, name=f"c{i}") for i in range(limit)]}
    assert case_format.schema_errors(at_limit, kind, file=f"{kind}.json") == []
    walked = []
    monkeypatch.setattr(case_format, "_too_deep", lambda data: walked.append(data))
    over = {"cases": at_limit["cases"] + [dict(case, name="one-more")]}
    (error,) = case_format.schema_errors(over, kind, file=f"{kind}.json")
    assert f"holds {limit + 1} cases, more than {limit}" in str(error) and error.json_path == "cases"
    assert walked == []
    schema = case_format.case_schema(kind)
    assert schema["properties"]["cases"]["maxItems"] == limit  # the schema files say it to other tools


def test_metadata_json_nested_too_deeply_or_with_a_huge_number_is_a_problem_not_a_crash(tmp_path):
    from webgpu_kernels import digests

    from conftest import copy_package

    root = copy_package("com.microsoft.QuickGelu", tmp_path / "qg")
    # Python 3.11 refuses to parse the deep one; 3.12 parses it, and the schema check reports it.
    for text, message in (('{"a":' + "[" * 5000 + "]" * 5000 + "}", ""), ('{"a": ' + "1" * 5000 + "}", "the number 1111")):
        (root / "metadata.json").write_text(text)
        data, problems = digests.load_metadata(root)
        assert data is None and problems and problems[0].message.startswith(message), problems
        with pytest.raises(wk.errors.DigestError):
            wk.load_kernel(root)
    with pytest.raises(wk.errors.PackageError, match="cannot be read"):
        digests.write_metadata(root)


def test_a_test_json_integer_of_thousands_of_digits_is_refused_in_the_librarys_words(tmp_path):
    """A 5,000-digit seed in test.json had failed `test` and `validate` with Python's "Exceeds the limit
    (4300 digits) for integer string conversion ...; use sys.set_int_max_str_digits()", which a
    package author cannot follow."""
    from click.testing import CliRunner

    from webgpu_kernels.cli import main

    from conftest import copy_package

    root = copy_package("com.microsoft.QuickGelu", tmp_path / "qg")
    text = (root / "test.json").read_text("utf-8")
    assert '"seed": 101' in text
    (root / "test.json").write_text(text.replace('"seed": 101', '"seed": ' + "7" * 5000, 1), encoding="utf-8")
    assert CliRunner().invoke(main, ["digest", str(root)]).exit_code == 0
    for command in ("test", "validate"):
        result = CliRunner().invoke(main, [command, str(root)])
        assert result.exit_code != 0, result.output
        assert "an integer of 5000 digits is beyond float64's range" in result.output, result.output
        assert "expected a number of at most 309 digits" in result.output and "set_int_max_str_digits" not in result.output


@pytest.mark.parametrize("spelt", ["NaN", "Infinity", "-INF", "+inf"])
def test_a_misspelt_special_value_is_told_the_spelling(spelt) -> None:
    """"NaN" in values got only the schema's "is not valid under any of the given schemas"."""
    data = {"cases": [minimal_case(inputs={"X": {"shape": [2], "values": [1, spelt]}})]}
    problems = case_format.check_test_data(data)
    assert problems and all('spelt "nan", "inf" and "-inf"' in p.detail for p in problems), problems
    assert not any('spelt "nan"' in p.detail for p in case_format.check_test_data(
        {"cases": [minimal_case(inputs={"X": {"shape": [2], "values": [1, "one"]}})]}))  # fmt: skip


def test_infinite_and_nan_tolerances_are_refused() -> None:
    """An infinite atol passed a kernel that wrote zeros everywhere: package JSON cannot spell one
    any more (below), and data given as Python values is checked too."""
    data = {"tolerances": {"float32": {"rtol": 0, "atol": math.inf}, "float16": {"atol": math.inf}},
            "cases": [minimal_case(tolerances={"float16": {"rtol": math.nan}})]}  # fmt: skip
    messages = {(e.json_path, e.detail) for e in case_format.check_test_data(data)}
    assert messages == {("tolerances.float32.atol", "atol must be a finite number, not inf"),
                        ("tolerances.float16.atol", "atol must be a finite number, not inf"),
                        ("cases[0].tolerances.float16.rtol", "rtol must be a finite number, not nan")}  # fmt: skip
    with pytest.raises(CaseFileError, match="finite"):
        casefile.parse_test_file(data)


@pytest.mark.parametrize("text, reason", [
    ('{"atol": 1e400}', "beyond float64's range"), ('{"atol": Infinity}', "Infinity is not JSON"),
    ('{"atol": -Infinity}', "-Infinity is not JSON"), ('{"rtol": NaN}', "NaN is not JSON"),
    ('{"atol": 1' + "0" * 400 + "}", "beyond float64's range"), ('[-1' + "0" * 400 + "]", "beyond float64's range"),
], ids=["1e400", "Infinity", "-Infinity", "NaN", "400-digit-int", "negative-400-digit-int"])  # fmt: skip
def test_package_json_refuses_numbers_json_does_not_have(text: str, reason: str) -> None:
    """Python's reader took NaN and Infinity (not JSON) and made 1e400 infinite: atol 1e400 in a
    test.json passed a kernel that wrote zeros. A 400-digit integer crashed `test` and `bench`
    with an OverflowError where a tolerance or value met float()."""
    from webgpu_kernels.reading import decode_json

    with pytest.raises(ValueError, match=reason) as info:
        decode_json(text.encode())
    # a number past float64 is valid JSON that is refused: not called invalid (NaN and Infinity are)
    assert str(info.value).startswith("invalid JSON") == ("Infinity" in text or "NaN" in text)
    assert decode_json(b'[1e-400, -0.0, 65504]') == [0.0, 0.0, 65504]
    assert decode_json(b'[18446744073709551615]') == [2**64 - 1]  # uint64's largest stays exact


def test_an_expected_integer_the_output_cannot_hold_is_refused_not_clipped():
    """Expected inline integers were clipped to the output's range, so a saturating int32 kernel
    passed against the wrapped or wider result the case wrote. Inputs still clip."""
    def expected(values: list, dtype: str) -> np.ndarray:
        return casefile.build_tensor({"shape": [len(values)], "values": values}, dtype=dtype, read_bytes=None,
                                     file="test.json", where="cases[0].expected.Y", expected=True)  # fmt: skip

    with pytest.raises(CaseFileError, match=r"2147483648 is outside int32's range \[-2147483648, 2147483647\]") as info:
        expected([7, 2**31], "int32")
    assert info.value.json_path == "cases[0].expected.Y.values"
    with pytest.raises(CaseFileError, match="99999999999999999999999 is outside int64's range"):
        expected([1, 99999999999999999999999], "int64")
    with pytest.raises(CaseFileError, match="-1 is outside uint8's range"):
        expected([300 - 300, -1], "uint8")
    for written in ([1.0, 300.0], [1, "inf"]):  # floats and infinities are held to the range too
        with pytest.raises(CaseFileError, match="is outside uint8's range"):
            expected(written, "uint8")
    assert expected([254.6, 0.4], "uint8").tolist() == [255, 0]  # whole numbers after rounding
    assert expected([2**31 - 1, -(2**31)], "int32").tolist() == [2**31 - 1, -(2**31)]
    assert build({"shape": [2], "values": [300, -1]}, dtype="uint8").tolist() == [255, 0]  # an input clips


def test_inline_integers_stay_exact_past_2_to_the_53():
    """Inline values went through float64, where 2^53 + 1 is 2^53 and 2^63 - 1 is 2^63 (clipped
    back to 2^63 - 1 only by luck of the bound): an int64 input or expected value there was
    silently another number. Other numbers are still rounded half to even and clipped."""
    exact = build({"shape": [4], "values": [2**53 + 1, 2**63 - 2, -(2**63) + 1, 2**62 + 3]}, dtype="int64")
    assert exact.dtype == np.int64 and exact.tolist() == [2**53 + 1, 2**63 - 2, -(2**63) + 1, 2**62 + 3]
    unsigned = build({"shape": [2], "values": [2**64 - 3, 2**53 + 1]}, dtype="uint64")
    assert unsigned.tolist() == [2**64 - 3, 2**53 + 1]
    mixed = build({"shape": [2, 3], "values": [[2.5, -0.5, "inf"], [2**70, -(2**70), True]]}, dtype="int64")
    assert mixed.tolist() == [[2, 0, 2**63 - 1], [2**63 - 1, -(2**63), 1]]
    assert build({"shape": [], "values": 2**53 + 1}, dtype="int64").tolist() == 2**53 + 1
    generated = build({"shape": [3], "generate": {"distribution": "uniform", "seed": 1, "low": 0, "high": 9}}, dtype="int64")
    special = build({"shape": [3], "generate": {"distribution": "uniform", "seed": 1, "low": 0, "high": 9},
                     "special": {"at": [1], "values": [2**53 + 1]}}, dtype="int64")  # fmt: skip
    assert special.tolist() == [generated[0], 2**53 + 1, generated[2]]
    with pytest.raises(CaseFileError, match="NaN cannot be held by int32") as info:
        build({"shape": [2], "values": [1, "nan"]}, dtype="int32")
    assert info.value.json_path == "cases[0].inputs.X.values"
    with pytest.raises(CaseFileError, match=r"3 values .* for shape \[2\]"):
        build({"shape": [2], "values": [1, 2, 3]}, dtype="int64")


def test_special_values_reach_an_input_read_from_a_fortran_order_file() -> None:
    """np.array(copy=True) kept Fortran order, so reshape(-1) gave a copy and `special` wrote into
    it: a case whose NaN should have failed the test passed."""
    data = np.asfortranarray(np.arange(6, dtype=np.float32).reshape(2, 3))
    got = build({"file": "x.npy", "special": {"at": [1], "values": ["nan"]}}, files={"x.npy": npy(data)})
    assert np.isnan(got.reshape(-1)[1]) and np.isnan(got[0, 1])
    assert np.array_equal(np.delete(got.reshape(-1), 1), np.delete(np.arange(6, dtype=np.float32), 1))


def test_an_npy_header_with_a_dimension_past_c_long_is_a_case_file_error() -> None:
    header = "{'descr': '<f4', 'fortran_order': False, 'shape': (0, 99999999999999999999999), }"
    header += " " * (-(len(header) + 11) % 64) + "\n"
    data = b"\x93NUMPY\x01\x00" + len(header).to_bytes(2, "little") + header.encode()
    with pytest.raises(CaseFileError, match="x.npy"):  # had escaped as a raw OverflowError
        build({"file": "x.npy"}, files={"x.npy": data})


def test_a_one_type_constraint_binds_case_inputs_without_a_types_entry() -> None:
    """demo.Where's condition is type variable B, allowed only bool. A test.json or bench.json case
    without "types": {"B": "bool"} had been refused ("no dtype: give 'dtype' here or the case's
    'types' ..."), though a one-type constraint binds an output with nothing said."""
    from conftest import PACKAGES_DIR

    kernel = wk.load_kernel(PACKAGES_DIR / "demo.Where")
    case = {"name": "no-B", "types": {"T": "float16"}, "inputs": {
        "condition": {"shape": [2], "values": [True, False]},
        "X": {"shape": [2], "values": [1, 2]}, "Y": {"shape": [2], "values": [3, 4]}}}  # fmt: skip
    inputs = wk.test_case_inputs(kernel, case)
    assert inputs["condition"].dtype == np.bool_ and inputs["condition"].tolist() == [True, False]
    assert kernel(inputs)["output"].tolist() == [1.0, 4.0]
    bench = casefile.parse_bench_file({"cases": [{"name": "no-B", "types": {"T": ["float32"]}, "inputs": {
        "condition": {"shape": [2, 1]}, "X": {"shape": [2, 3]}, "Y": {"shape": [3]}}}]})  # fmt: skip
    (instance,) = bench.cases[0].expand(kernel.manifest)
    assert instance.inputs["condition"] == ((2, 1), "bool") and instance.inputs["X"] == ((2, 3), "float32")
    # A type variable of two or more types still needs saying.
    with pytest.raises(CaseFileError, match="no dtype"):
        wk.test_case_inputs(kernel, {**case, "types": {}})


# --- the manifest's part in a case file's errors: a property (hypothesis) ------------------------

#: An op without inputs: its every case input is no input of it ("(it has no inputs)").
_NO_INPUTS = SimpleNamespace(op_id="demo.NoInputs", inputs=[])
_ENTRY_PARTS = st.fixed_dictionaries({}, optional={
    "shape": st.sampled_from([[2], [], "2", [-1]]), "values": st.sampled_from([[1, 2], 1.5, "nan", [[True]], {}]),
    "dtype": st.sampled_from(["float32", "float8"]), "file": st.sampled_from(["a.npy", "../a.npy"]),
    "generate": st.sampled_from([{"distribution": "normal", "seed": 1}, {"distribution": "cauchy"}]),
    "tensor": st.sampled_from(["t", ""]), "special": st.sampled_from([{"at": [0], "values": [1.0]}, {"at": []}]),
    "shap": st.just([2]),
})  # fmt: skip
_ENTRIES = st.sampled_from([{"shape": [2], "values": [1, 2]}, {"shape": [2]}, {"dtype": "float32", "values": [1]},
                            {"shape": [2], "generate": {"distribution": "uniform", "seed": 1, "low": 2, "high": 1}}]) \
    | _ENTRY_PARTS | st.sampled_from([[2], 2, "X", None])  # fmt: skip


@st.composite
def _case_files(draw, roles: list[str], kind: str) -> dict:
    names = st.sampled_from([*roles, *case_format._ENTRY_KEYS, "x", "Bias", "1bad", "a.b", ""]) | st.text(max_size=4)
    cases = []
    for i in range(draw(st.integers(1, 3))):
        case: dict = {"name": f"c{i}", "inputs": draw(st.dictionaries(names, _ENTRIES, max_size=4))}
        if kind == "test" and draw(st.booleans()):
            case["refused"] = {"error": "UnknownInputError"}
        if kind == "test" and draw(st.booleans()):
            case["expected"] = {"Y": draw(_ENTRIES)}
        case["types"] = {"T": "float32" if kind == "test" else ["float32"]}
        cases.append(case)
    return {"cases": cases}


def _entry_of(error: CaseFileError, data: dict) -> str:
    """The JSON path of the case's input entry ``error`` lies in, else the error's own."""
    path = error.json_path
    for i, case in enumerate(data["cases"]):
        for name in case["inputs"]:
            entry = json_path_of(["cases", i, "inputs", name])
            if path == entry or path.startswith((entry + ".", entry + "[")):
                return entry
    return path


@settings(max_examples=200, deadline=None)
@given(data=st.data(), op=st.sampled_from([QUICK_GELU, BIAS_ADD, None]), kind=st.sampled_from(["test", "bench"]))
def test_the_manifest_says_an_entry_is_no_input_in_place_of_its_errors_never_beside_them(data, op, kind) -> None:
    """With the op's manifest, an input entry of a name the op lacks gets one error saying so in
    place of its schema errors: every entry (or other place) in error without the manifest is in
    error with it, and no other; an entry no input of the op gets exactly one; nothing raises."""
    manifest = wk.get_kernel(op).manifest if op else _NO_INPUTS
    roles = [spec.role for spec in manifest.inputs]
    doc = data.draw(_case_files(roles, kind))
    check = case_format.check_test_data if kind == "test" else case_format.check_bench_data
    bare, known = check(doc), check(doc, manifest=manifest)
    entries = [_entry_of(error, doc) for error in known]
    assert set(entries) == {_entry_of(error, doc) for error in bare}, ([e.json_path for e in bare], known)
    said = [error.json_path for error in known if "is not an input of" in error.detail]
    assert all(entries.count(path) == 1 for path in said), known
    others = {json_path_of(["cases", i, "inputs", n]) for i, c in enumerate(doc["cases"]) for n in c["inputs"]
              if n not in roles}  # fmt: skip
    assert set(said) <= others, (said, roles)
    event("no error" if not bare else "an entry said to be no input" if said else "errors")


@pytest.mark.parametrize(("package", "case_name", "label"), [
    ("demo.ArgMax", "default-axis0-4x5-f32", "T=float32, I=int64"),
    ("demo.LayerNorm", "clip-l-1x4x768-f16", "T=float16, U=float32"),
    ("demo.LayerNorm", "nobias-3x50-f32", "float32"),
])  # fmt: skip
def test_type_label_names_a_type_variable_only_a_one_type_constraint_fixes(package: str, case_name: str,
                                                                           label: str) -> None:  # fmt: skip
    """`test` labels a run as `validate` labels the call (check_call's binding): demo.ArgMax's int64
    output type I, bound by no input, had been left out (`float32` against validate's `T=float32, I=int64`)."""
    from webgpu_kernels.contract import check_call

    from conftest import PACKAGES_DIR

    kernel = wk.load_kernel(PACKAGES_DIR / package)
    case = next(c for c in casefile.read_test_file(kernel.package).cases if c.name == case_name)
    arrays = case.build_inputs(kernel.manifest, kernel.package.read_bytes)
    binding = check_call(kernel.manifest, {k: (a.shape, casefile.dtype_name(a.dtype)) for k, a in arrays.items()},
                         case.attrs, case.tunables).type_bindings()  # fmt: skip
    assert case.type_binding(kernel.manifest, arrays) == binding
    assert case.type_label(kernel.manifest) == case.type_label(kernel.manifest, arrays) == label


def test_misspelt_case_field_names_the_field_meant() -> None:
    """'expcted' in a case, 'rtoll' in a tolerance, 'tgas' in a bench case: the schema error names the
    field meant (it had said only that the field was unexpected)."""
    case = {"name": "a", "inputs": {"X": {"shape": [2], "values": [1, 2]}},
            "expcted": {"Y": {"shape": [2], "values": [2, 4]}}}  # fmt: skip
    data = {"tolerances": {"float32": {"rtoll": 1e-5}}, "cases": [case]}
    found = {e.json_path: str(e) for e in case_format.schema_errors(data, "test", file="test.json")}
    assert "(did you mean 'expected'?)" in found["cases[0]"]
    assert "(did you mean 'rtol'?)" in found["tolerances.float32"]
    bench = {"cases": [{"name": "b", "tgas": ["x"], "inputs": {"X": {"shape": [2]}}}]}
    (error,) = case_format.schema_errors(bench, "bench", file="bench.json")
    assert "(did you mean 'tags'?)" in str(error)


# --- coverage audit -------------------------------------------------------------------------


def test_a_tensor_member_without_a_data_file_is_named_at_its_tensor() -> None:
    """'tensor' picks a member of a data 'file': beside inline values it is a slip, said at its path."""
    data = {"cases": [minimal_case(inputs={"X": {"shape": [2], "values": [1, 2], "tensor": "x"}})]}
    messages = [(e.json_path, e.detail) for e in case_format.check_test_data(data)]
    assert messages == [("cases[0].inputs.X.tensor", "'tensor' names a member of a data 'file'")]
    with pytest.raises(CaseFileError, match="'tensor' names a member of a data 'file'"):
        casefile.parse_test_file(data)
    with_file = {"cases": [minimal_case(inputs={"X": {"shape": [2], "file": "x.npz", "tensor": "x"}})]}
    assert case_format.check_test_data(with_file) == []


@given(length=st.integers(min_value=1, max_value=600))
@settings(max_examples=40, deadline=None)
def test_a_schema_message_is_cut_at_300_characters(length: int) -> None:
    """jsonschema repeats the wrong value in its message: a long one is cut, never the whole value."""
    wrong = "s" * length  # a string where a shape (an array) is expected
    data = {"cases": [minimal_case(inputs={"X": {"shape": wrong, "values": [1, 2]}})]}
    details = [e.detail for e in case_format.check_test_data(data) if e.json_path == "cases[0].inputs.X.shape"]
    assert len(details) == 1
    full = f"{wrong!r} is not of type 'array'"
    assert details[0] == (full if len(full) <= 300 else full[:297] + "...")


@pytest.mark.parametrize("shape", [[1], [1, 1], [1, 1, 1]])
def test_a_lone_number_fills_a_shape_of_one_element(shape) -> None:
    """`"values": 7` for shape [1] (or [1, 1]) as for shape []: one element either way."""
    array = build({"shape": shape, "values": 7})
    assert array.shape == tuple(shape) and array.reshape(-1).tolist() == [7.0]
    with pytest.raises(CaseFileError, match=r"for shape \[2\]"):
        build({"shape": [2], "values": 7})


def _schema_calls(data: dict) -> int:
    """Python calls that checking ``data`` as a test.json's schema makes (the JSON Schema library's,
    and case_format's own): its work, counted without timing anything."""
    import jsonschema as library

    libraries = str(Path(library.__file__).parent.parent)
    count = 0

    def profile(frame, event, arg):
        nonlocal count
        name = frame.f_code.co_filename
        if event == "call" and (name.startswith(libraries) or name == case_format.__file__):
            count += 1

    sys.setprofile(profile)
    try:
        errors = case_format.schema_errors(data, "test", file="test.json")
    finally:
        sys.setprofile(None)
    assert errors == []
    return count


def test_the_schema_check_of_inline_values_is_not_per_value() -> None:
    """A 4 MB test.json of 2 x 10^6 inline zeros took `validate` 213 s, nearly all of it
    jsonschema descending a oneOf and a $ref per value (about 0.1 ms each): the values (and a
    special's positions and values) are checked in one walk of the library's own, so the schema's
    work does not grow with them."""
    def data(n: int) -> dict:
        nested = [[0.5, "nan", True]] * n
        return {"cases": [minimal_case(
            inputs={"X": {"shape": [n, 3], "values": nested,
                          "special": {"at": list(range(n)), "values": ["inf"] * n}}},
            expected={"Y": {"shape": [n, 3], "values": nested}})]}  # fmt: skip

    assert _schema_calls(data(4000)) < 2 * _schema_calls(data(4)), (_schema_calls(data(4)), _schema_calls(data(4000)))


@pytest.mark.parametrize(("values", "path", "said"), [
    ("NaN", "values", "'NaN' is not valid under any of the given schemas (non-finite values are spelt"),
    ([1, [True, "Infinity"]], "values[1][1]", "'Infinity' is not valid under any of the given schemas"),
    ([[1], [None]], "values[1][0]", "None is not valid under any of the given schemas"),
    ([1, {}], "values[1]", "{} is not valid under any of the given schemas"),
    ({"a": 1}, "values", "{'a': 1} is not valid under any of the given schemas"),
])  # fmt: skip
def test_a_bad_inline_value_is_named_at_its_place(values, path: str, said: str) -> None:
    data = {"cases": [minimal_case(inputs={"X": {"shape": [2], "values": values}})]}
    found = [(e.json_path, e.detail) for e in case_format.check_test_data(data)]
    assert any(p == f"cases[0].inputs.X.{path}" and d.startswith(said) for p, d in found), found


@pytest.mark.parametrize(("special", "path", "said"), [
    ({"at": [0], "values": [[1]]}, "special.values[0]", "[1] is not valid under any of the given schemas"),
    ({"at": [0], "values": []}, "special.values", "[] should be non-empty"),
    ({"at": [0, -1], "values": [1]}, "special.at[1]", "-1 is less than the minimum of 0"),
    ({"at": [0, 1.5], "values": [1]}, "special.at[1]", "1.5 is not of type 'integer'"),
    ({"at": [0, True], "values": [1]}, "special.at[1]", "True is not of type 'integer'"),
    ({"at": [], "values": [1]}, "special.at", "[] should be non-empty"),
])  # fmt: skip
def test_a_bad_special_entry_is_named_at_its_place(special, path: str, said: str) -> None:
    data = {"cases": [minimal_case(inputs={"X": {"shape": [2], "values": [1, 2], "special": special}})]}
    found = [(e.json_path, e.detail) for e in case_format.check_test_data(data)]
    assert any(p == f"cases[0].inputs.X.{path}" and d.startswith(said) for p, d in found), found
