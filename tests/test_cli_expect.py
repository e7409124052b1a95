"""``webgpu-kernels expect PATH --reference FILE.py:FUNCTION``: test.json's expected values written
again from the author's reference after the kernel changed; what it refuses, writing nothing."""

from __future__ import annotations

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


@pytest.mark.parametrize(("function", "code", "fragments"), [
    ("raises", 1, ["ref.py:raises raised for case 'tail-3x5-f32'", "ZeroDivisionError: my reference broke"]),
    ("not_a_dict", 2, ["case 'tail-3x5-f32'", "expected a dict of output arrays (Y)", "got an array of shape [3, 5]"]),
    ("no_output", 2, ["expected a dict of the outputs ['Y']", "got the keys ['Z']"]),
    ("wrong_shape", 2, ["['Y']", "expected shape [3, 5]", "got shape [15]"]),
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
    ("REF:absent", "has no function 'absent' (its functions: no_output, not_a_dict, not_numbers, raises, "
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
