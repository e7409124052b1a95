"""kernel.py's Kernel beyond its calls (tested with the kernels): evaluate, errors naming the manifest, copies."""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pytest

import webgpu_kernels as wk
from webgpu_kernels import errors


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
    # With its digest: a process whose release embeds another QuickGelu (here: a pickle whose digest
    # differs) refuses it, at its first use, rather than run other code than the pickling process did.
    pickled = pickle.dumps(kernel)
    assert kernel.tuning_key.encode() in pickled
    other = pickled.replace(kernel.tuning_key.encode(), kernel.tuning_key[::-1].encode())
    with pytest.raises(wk.PackageError, match=r"embeds another com\.microsoft\.QuickGelu than the pickling process's"):
        pickle.loads(other)({"X": np.ones(4, np.float32)})
    shutil.copytree(kernel.package.root, tmp_path / "pkg")
    local = wk.load_kernel(tmp_path / "pkg")
    assert copy.deepcopy(local) is local
    assert pickle.loads(pickle.dumps(local)).package.root == local.package.root  # as its path (test_processes.py)


@pytest.fixture
def name_checks(monkeypatch):
    """The input names each check_input_names call was given, sorted, in order."""
    from webgpu_kernels import call_arguments, contract

    checks = []
    real = contract.check_input_names

    def counted(manifest, names):
        checks.append(sorted(names))
        return real(manifest, names)

    monkeypatch.setattr(contract, "check_input_names", counted)
    monkeypatch.setattr(call_arguments, "check_input_names", counted)
    return checks


def test_a_new_shape_checks_the_input_names_once(tmp_path, name_checks):
    """The names were checked before any value was read, then again by the contract check: twice on
    every call of a new shape (and for explain, plan and tuning_class). Once now."""
    import shutil

    kernel = wk.load_kernel(shutil.copytree(wk.get_kernel("com.microsoft.BiasAdd").package.root, tmp_path / "pkg"))
    inputs = {"X": np.ones((2, 3, 8), np.float32), "bias": np.ones(8, np.float32), "skip": np.ones((2, 3, 8), np.float32)}
    for use in (kernel, kernel.explain, kernel.plan, kernel.tuning_class):
        name_checks.clear()
        use(inputs)
        assert name_checks == [["X", "bias", "skip"]], use
    name_checks.clear()
    kernel(inputs)  # a shape planned before: no check at all
    assert name_checks == []
    with pytest.raises(errors.UnknownInputError, match="'nothing'"):  # refused as before, by that one check
        kernel({**inputs, "nothing": None})
    assert len(name_checks) == 1


def test_a_call_with_an_optional_input_given_as_none_checks_the_names_once(name_checks):
    """The call left the input out by calling itself again without it, which checked the names a
    second time: twice on every such call, of a new shape or not."""
    from conftest import PACKAGES_DIR

    kernel = wk.load_kernel(PACKAGES_DIR / "demo.LayerNorm")
    f32 = np.float32
    inputs = {"X": np.ones((2, 8), f32), "Scale": np.ones(8, f32), "B": None}
    for _ in range(2):  # a new shape, then one planned before
        name_checks.clear()
        out = kernel(inputs)
        assert name_checks == [["B", "Scale", "X"]] and np.allclose(out["Y"], 0), name_checks  # each row's X is its mean
    name_checks.clear()
    with pytest.raises(errors.UnknownInputError, match="'nothing'"):  # refused as before, by that one check
        kernel({**inputs, "nothing": None})
    assert len(name_checks) == 1


def test_a_variant_argument_of_another_type_is_named_briefly(quick_gelu):
    """variant= given a 100,000-item list quoted it whole in the error; it is named by type and at
    most 60 characters, as every attribute, tunable and adapter= error."""
    import numpy as np

    from webgpu_kernels import errors

    with pytest.raises(errors.InputError) as info:
        quick_gelu({"X": np.ones(4, np.float32)}, variant=list(range(100_000)))
    assert info.value.argument == "variant" and len(str(info.value)) < 400, len(str(info.value))
    assert "got list [0, 1, 2" in str(info.value)
