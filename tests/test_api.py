"""api.py beyond get_kernel/load_kernel (tested with the kernels themselves): test_case_inputs."""

from __future__ import annotations

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


def test_dir_of_the_package_is_its_public_api_lazy_exports_included():
    """dir(webgpu_kernels) listed the names that build the module (TYPE_CHECKING, Any, _LAZY) and
    the submodules imports had left on it. It lists __all__ and the dunders, the lazily exported
    names before their first use too, and reading it imports nothing (helper-91)."""
    from conftest import run_script_for_result

    script = ("import json, sys, webgpu_kernels as wk\n"
              "listed = dir(wk)\n"
              "print('RESULT ' + json.dumps({'dir': listed, 'all': wk.__all__, 'numpy': 'numpy' in sys.modules}))\n")  # fmt: skip
    fresh = run_script_for_result(script)
    assert not fresh["numpy"]  # dir() loads no lazy export
    for listed in (fresh["dir"], dir(wk)):  # before the first use, and in this process after many
        public = [name for name in listed if not (name.startswith("__") and name.endswith("__"))]
        assert sorted(public) == sorted(name for name in fresh["all"] if name != "__version__")
        assert {"get_kernel", "Kernel", "GpuTensor", "TensorMeta", "__version__", "__doc__"} <= set(listed)
        assert all(hasattr(wk, name) for name in listed)
