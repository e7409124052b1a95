"""api.py's helpers beyond get_kernel/load_kernel (those are tested with the kernels themselves)."""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pytest

import webgpu_kernels as wk
from webgpu_kernels import errors

from references import quick_gelu as quick_gelu_reference


def splitmix64_unit(seed: int, i: int) -> float:
    """Element i's uniform draw, as docs/package-files.md specifies the generator (Python ints)."""
    mask = 2**64 - 1
    z = (seed + (i + 1) * 0x9E3779B97F4A7C15) & mask
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & mask
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & mask
    return ((z ^ (z >> 31)) >> 11) * 2.0**-53


def test_test_case_inputs_are_the_documented_draws_and_match_the_stored_expectation(quick_gelu):
    inputs = wk.test_case_inputs(quick_gelu, "tail-5x77x13-f32")  # uniform over [-12, 12), seed 103
    x = inputs["X"]
    assert list(inputs) == ["X"] and x.shape == (5, 77, 13) and x.dtype == np.float32
    flat = x.reshape(-1)
    for i in (0, 1, 2, 4096, flat.size - 1):
        assert flat[i] == np.float32(-12.0 + 24.0 * splitmix64_unit(103, i))
    # the package's stored expected output is the reference on exactly these inputs
    stored = np.load(quick_gelu.package.root / "tail-5x77x13-f32.Y.npy")
    np.testing.assert_allclose(stored, quick_gelu_reference(x.astype(np.float64), 1.702), rtol=1e-6, atol=1e-7)


def test_test_case_inputs_of_a_case_not_yet_in_test_json(quick_gelu):
    """Authors compute a case's expected outputs from its inputs: a case had to be in test.json,
    with an `expected` entry, before its inputs could be built (placeholder zeros first)."""
    draft = {"name": "new-case", "types": {"T": "float32"}, "inputs": {"X": {"shape": [5, 77, 13], "generate": {
        "distribution": "uniform", "seed": 103, "low": -12.0, "high": 12.0}}}}  # tail-5x77x13-f32 less `expected`
    np.testing.assert_array_equal(wk.test_case_inputs(quick_gelu, draft)["X"],
                                  wk.test_case_inputs(quick_gelu, "tail-5x77x13-f32")["X"])
    with pytest.raises(wk.CaseFileError, match="cases\\[0\\].inputs.X") as info:
        wk.test_case_inputs(quick_gelu, {**draft, "inputs": {"X": {"shape": [2], "values": [1, 2, 3]}}})
    assert info.value.file == "case 'new-case' given as a dict (read as cases[0])"  # it had read "case"
    with pytest.raises(errors.InputError, match="a case name, or a case as a dict, got list"):
        wk.test_case_inputs(quick_gelu, ["new-case"])


def test_test_case_inputs_refuses_an_unknown_case_or_a_non_kernel(quick_gelu):
    with pytest.raises(errors.InputError, match="one of .*'tail-5x77x13-f32'") as info:
        wk.test_case_inputs(quick_gelu, "no-such-case")
    assert info.value.argument == "case"
    with pytest.raises(errors.InputError, match="a Kernel") as info:
        wk.test_case_inputs("com.microsoft.QuickGelu", "tail-5x77x13-f32")
    assert info.value.argument == "kernel"


def test_test_case_inputs_parses_test_json_once_per_content(tmp_path, monkeypatch):
    """An author's script asks for one case at a time: test.json was re-read and schema-checked on
    every call (0.1 s each for a 40-case file). Now once per content, and an edit is seen at once."""
    import json
    import shutil

    from webgpu_kernels import casefile

    from conftest import PACKAGES_DIR

    def case(name: str) -> dict:
        return {"name": name, "types": {"T": "float32"}, "inputs": {"X": {"shape": [2], "values": [1.0, 2.0]}},
                "expected": {"Y": {"shape": [2], "values": [0.0, 0.0]}}}  # fmt: skip

    root = shutil.copytree(PACKAGES_DIR / "demo.ScaleShift", tmp_path / "demo.ScaleShift")  # no metadata.json
    (root / "test.json").write_text(json.dumps({"cases": [case("a"), case("b")]}), encoding="utf-8")
    kernel = wk.load_kernel(root)
    parses = []
    real = casefile.parse_test_file
    monkeypatch.setattr(casefile, "parse_test_file", lambda *a, **k: parses.append(1) or real(*a, **k))
    for name in ("a", "b", "a"):
        np.testing.assert_array_equal(wk.test_case_inputs(kernel, name)["X"], np.array([1.0, 2.0], np.float32))
    assert len(parses) == 1
    (root / "test.json").write_text(json.dumps({"cases": [case("c")]}), encoding="utf-8")  # an unverified folder
    assert list(wk.test_case_inputs(kernel, "c")) == ["X"] and len(parses) == 2


def test_evaluate_gives_an_expression_value_in_the_call_scope():
    """Kernel.evaluate sees what the manifest's top-level expressions see: inputs' and outputs'
    shapes, dtypes as WGSL names, top-level constants (not a variant's own)."""
    bias_add = wk.get_kernel("com.microsoft.BiasAdd")
    inputs = {"X": ((2, 5, 8), "float16"), "bias": ((8,), "float16"), "skip": ((2, 5, 8), "float16")}
    assert bias_add.evaluate("numel(shapes.Y) * hidden", inputs) == 80 * 8
    assert bias_add.evaluate("[scalar, usesF16]", inputs) == ["f16", True]
    with pytest.raises(errors.ExpressionError, match="vectorScalar.* is undefined") as info:  # vec4's own constant
        bias_add.evaluate("vectorScalar", inputs)
    assert str(info.value).startswith("evaluate: expression 'vectorScalar'")  # had read "expression: expression"
    with pytest.raises(errors.MissingInputError, match="bias"):  # the contract is checked first
        bias_add.evaluate("1", {"X": ((2, 5, 8), "float16")})


def test_evaluate_takes_what_a_manifest_takes_in_an_expression_s_place():
    """A string is an expression and a JSON number or boolean a literal value, as in a manifest
    (manifest.schema.json's `value`; bench.json's `flops` may be a number); anything else had come
    back unchanged, a list or None as if it had been evaluated."""
    quick_gelu = wk.get_kernel("com.microsoft.QuickGelu")
    meta = {"X": wk.TensorMeta((2, 4), "float32")}
    assert quick_gelu.evaluate("numel(shapes.X)", meta) == 8
    for literal in (5, 2.5, True):
        value = quick_gelu.evaluate(literal, meta)
        assert value == literal and type(value) is type(literal)
    with pytest.raises(errors.ExpressionSandboxError, match="128"):  # held to a manifest literal's bounds
        quick_gelu.evaluate(2**200, meta)
    for given, got in (([1, 2], "list [1, 2]"), (None, "NoneType None"), ((8,), "tuple (8,)"),
                       ({"a": 1}, "dict {'a': 1}"), (np.int64(3), "int64"), (b"1", "bytes b'1'")):
        with pytest.raises(errors.InputError, match=re.escape(f"got {got}")) as info:
            quick_gelu.evaluate(given, meta)
        assert info.value.argument == "expression"
        assert "an expression string, or a number or boolean" in str(info.value)
    with pytest.raises(errors.InputError) as info:  # the argument is checked before the inputs
        quick_gelu.evaluate([1], {})
    assert info.value.argument == "expression"


def test_an_expression_that_fails_for_a_call_names_its_manifest(tmp_path):
    """The error said where in the manifest (bindingSets...value) but not which manifest."""
    import json
    import shutil

    from conftest import PACKAGES_DIR

    root = shutil.copytree(PACKAGES_DIR / "demo.ScaleShift", tmp_path / "broken")
    manifest = json.loads((root / "manifest.json").read_text("utf-8"))
    manifest["derive"]["quads"] = "n // (n - n)"  # fails for every call, not at load
    manifest["bindingSets"]["scalarIO"][2]["struct"]["fields"][0]["value"] = "quads"
    (root / "manifest.json").write_text(json.dumps(manifest), "utf-8")
    kernel = wk.load_kernel(root)
    with pytest.raises(errors.ExpressionError, match="ZeroDivisionError") as info:
        kernel({"X": np.ones(7, np.float32)})
    assert f"in {root / 'manifest.json'}" in info.value.__notes__


def test_a_kernel_copies_as_itself_and_pickles_as_where_it_came_from(tmp_path):
    """copy.deepcopy of a kernel (a model or dataclasses.asdict holding one) had raised TypeError
    "Template.__new__() missing 1 required positional argument: 'source'", and pickling it (a spawn
    worker's argument) a PicklingError about a local function."""
    import copy
    import dataclasses
    import pickle
    import shutil

    kernel = wk.get_kernel("com.microsoft.QuickGelu")
    assert copy.copy(kernel) is kernel and copy.deepcopy(kernel) is kernel

    @dataclasses.dataclass
    class Block:
        act: Any

    assert dataclasses.asdict(Block(kernel))["act"] is kernel
    assert pickle.loads(pickle.dumps(kernel)) is kernel  # the process's shared embedded kernel
    shutil.copytree(kernel.package.root, tmp_path / "pkg")
    local = wk.load_kernel(tmp_path / "pkg")
    assert copy.deepcopy(local) is local
    assert pickle.loads(pickle.dumps(local)).package.root == local.package.root  # as its path (test_processes.py)
