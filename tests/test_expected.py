"""expected.py's JSON writing: ``dumps`` (how ``new`` and ``expect`` write test.json) and
``indent_of`` (the author's indent, which ``expect`` keeps); properties checked with hypothesis.
The command's behaviour: test_cli_expect.py."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from webgpu_kernels.digests import MAX_FILE_BYTES
from webgpu_kernels.errors import CaseFileError, InputError
from webgpu_kernels.expected import InlineEntry, _rounded, check_test_file_size, dumps, indent_of, largest_inline_entry

STEPS = st.sampled_from(["  ", "    ", "\t", " "])

#: What a test.json may hold: nested objects and lists of numbers, strings (any Unicode), booleans, null.
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=8), inner, max_size=5),
    max_leaves=30,
)


def _same(a: Any, b: Any) -> bool:
    """Equal and of the same JSON types (Python has 1 == 1.0 == True)."""
    return a == b and json.dumps(a) == json.dumps(b)


@settings(max_examples=300, deadline=None)
@given(value=JSON_VALUES, step=STEPS)
def test_dumps_reads_back_as_the_value_indented_by_its_step(value: Any, step: str) -> None:
    """What ``expect`` writes reads back as what it was given, every line indented by whole steps
    (a nested level written with another step would mix the author's indent with two spaces), and
    ``indent_of`` finds that step again, or two spaces where no line is indented."""
    text = dumps(value, step=step)
    assert _same(json.loads(text), value), text
    indents = [line[: len(line) - len(line.lstrip(" \t"))] for line in text.split("\n")]
    assert all(indent == step * (len(indent) // len(step)) for indent in indents), (step, text)
    assert indent_of(text) == (step if any(indents) else "  "), (step, text)


@settings(max_examples=200, deadline=None)
@given(value=JSON_VALUES, step=STEPS)
def test_indent_of_finds_the_step_of_an_author_s_file(value: Any, step: str) -> None:
    """An author's test.json written by another tool (here Python's own ``json.dumps``) keeps its
    indent when ``expect`` rewrites it."""
    text = json.dumps(value, indent=step, ensure_ascii=False)
    assert indent_of(text) == (step if "\n" in text else "  "), (step, text)
    assert indent_of(text.replace("\n", "\r\n")) == indent_of(text)  # written on Windows


def _strings(value: Any) -> list[str]:
    """Every string of a JSON value, object keys included."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for key, item in value.items() for s in [key, *_strings(item)]]
    if isinstance(value, list):
        return [s for item in value for s in _strings(item)]
    return []


@settings(max_examples=200, deadline=None)
@given(value=JSON_VALUES)
def test_dumps_writes_every_string_as_the_package_s_json_files_do(value: Any) -> None:
    """Non-ASCII text as itself (ensure_ascii=False, as metadata.json is written), in the one-line
    form and the multi-line one alike: a multi-line object's keys had been escaped ("\\u00e9")."""
    text = dumps(value)
    for string in _strings(value):
        assert json.dumps(string, ensure_ascii=False) in text, (string, text)


def test_dumps_writes_a_non_ascii_key_alike_on_one_line_and_on_several() -> None:
    assert dumps({"\u00e9": 1}) == '{"\u00e9": 1}'
    assert dumps({"\u00e9": {"x": [1, {"\u00fc": 2}]}}) == '{\n  "\u00e9": {\n    "x": [\n      1,\n      {"\u00fc": 2}\n    ]\n  }\n}'


@settings(max_examples=200, deadline=None)
@given(dtype=st.sampled_from(["int8", "uint8", "int32", "uint32", "int64"]),
       values=st.lists(st.integers(-(2**40), 2**40) | st.integers(-300, 300), min_size=1, max_size=8),
       as_float=st.booleans(), half=st.booleans(), nan=st.booleans())  # fmt: skip
def test_a_reference_output_for_an_integer_output_is_taken_exactly_or_refused(dtype, values, as_float, half, nan):
    """`expect` rounds a reference's output once to the output's dtype: integers taken exactly,
    floats rounded half to even; a value past the dtype's range (or NaN) is refused naming the
    reference's output, as the true result the case would compare (it had been clipped or wrapped)."""
    import math

    import numpy as np
    import pytest

    from webgpu_kernels.errors import InputError
    from webgpu_kernels.expected import _rounded

    low, high = int(np.iinfo(dtype).min), int(np.iinfo(dtype).max)
    nan = nan and as_float  # an integer array holds no NaN
    if as_float:
        given_values = np.array(values, np.float64) + (0.5 if half else 0.0)
        if nan:
            given_values[0] = math.nan
        meant = [int(v) for v in np.rint(given_values)] if not nan else None
    else:
        given_values, meant = np.array(values, np.int64), values
    outside = meant is not None and any(not low <= v <= high for v in meant)
    if nan or outside:
        with pytest.raises(InputError) as info:
            _rounded(given_values, dtype, "ref['Y']")
        assert info.value.argument == "ref['Y']" and f"values an output of dtype {dtype} holds" in info.value.expected
        assert ("NaN" if nan else f"outside {dtype}'s range [{low}, {high}]") in info.value.received
        return
    rounded = _rounded(given_values, dtype, "ref['Y']")
    assert rounded.dtype == np.dtype(dtype) and rounded.tolist() == meant


@pytest.mark.parametrize(("value", "text"), [
    ({"k": "x" * 91}, '{"k": "' + "x" * 91 + '"}'),  # 100 characters: one line
    ({"k": "x" * 92}, '{\n  "k": "' + "x" * 92 + '"\n}'),  # 101
    ({"a": {"k": "x" * 89}}, '{\n  "a": {"k": "' + "x" * 89 + '"}\n}'),  # 100 with its indent
    ({"a": {"k": "x" * 90}}, '{\n  "a": {\n    "k": "' + "x" * 90 + '"\n  }\n}'),
])  # fmt: skip
def test_dumps_writes_a_small_object_on_one_line_up_to_100_characters_with_its_indent(value, text) -> None:
    assert dumps(value) == text


@pytest.mark.parametrize(("text", "step"), [
    ('{\n' + " " * 8 + '"a": 1\n}', " " * 8),
    ('{\n' + " " * 9 + '"a": 1\n}', "  "),  # past 8 spaces: not an indent step an author meant
    ('{\n\t"a": 1\n}', "\t"),
    ('{\n\t\t"a": 1\n}', "  "),
    ('{\n \t"a": 1\n}', "  "),
    ('{"a": 1}', "  "),
])  # fmt: skip
def test_indent_of_takes_1_to_8_spaces_or_one_tab_else_two_spaces(text: str, step: str) -> None:
    assert indent_of(text) == step


@pytest.mark.parametrize(("value", "received"), [
    ("1.5", "str '1.5'"),
    (None, "NoneType None"),
    ({"a": 1}, "dict {'a': 1}"),
    (np.array(["a"]), "an array of shape [1] and dtype <U1"),
    (np.array([1 + 2j]), "an array of shape [1] and dtype complex128"),
    ("x" * 300, "str '" + "x" * 195),  # cut at 200 characters
    ([[1.0, 2.0], [3.0]], "list [[1.0, 2.0], [3.0]]"),  # ragged: NumPy's ValueError had escaped as a traceback (exit 1)
])  # fmt: skip
def test_a_reference_output_that_is_no_array_of_numbers_is_refused_naming_it(value, received) -> None:
    with pytest.raises(InputError) as info:
        _rounded(value, "float32", "ref['Y']")
    assert (info.value.argument, info.value.expected, info.value.received) == (
        "ref['Y']", "an array of numbers (rounded to the output's float32)", received)  # fmt: skip


@pytest.mark.parametrize(("value", "dtype", "rounded"), [
    (np.array([2**53 + 1, -(2**62) - 1]), "int64", [2**53 + 1, -(2**62) - 1]),  # exact past float64's integers
    (np.array([2**64 - 1], np.uint64), "uint64", [2**64 - 1]),
    (np.array([255, 0], np.int64), "uint8", [255, 0]),  # the range's ends are in it
    (np.array([-0.5, 255.49]), "uint8", [0, 255]),
    (np.array([2**24 + 1]), "float32", [2.0**24]),  # an integer for a float output: rounded to nearest even
    (np.zeros(0), "int32", []),
    (np.zeros(0, np.int64), "int32", []),
])  # fmt: skip
def test_a_reference_output_is_rounded_once_to_the_output_s_dtype(value, dtype, rounded) -> None:
    got = _rounded(value, dtype, "ref['Y']")
    assert got.dtype == np.dtype(dtype) and got.tolist() == rounded


@pytest.mark.parametrize(("value", "dtype", "received"), [
    (np.array([3.0, 255.5]), "uint8", "256 is outside uint8's range [0, 255]"),  # printed as the integer it rounds to
    (np.array([np.inf]), "int32", "inf is outside int32's range [-2147483648, 2147483647]"),
    (np.array([-np.inf, 3.0]), "int8", "-inf is outside int8's range [-128, 127]"),
    (np.array([256, 3]), "uint8", "256 is outside uint8's range [0, 255]"),
])  # fmt: skip
def test_a_reference_output_past_the_output_s_range_is_refused(value, dtype, received) -> None:
    with pytest.raises(InputError) as info:
        _rounded(value, dtype, "ref['Y']")
    assert info.value.argument == "ref['Y']" and info.value.received == received


@pytest.mark.parametrize("value", [np.array([2, 0, -1, 1]), np.array([2.0, 0.0, -1.0, 1.0]), np.array([0.4, -0.0, -1e-9, 1.0]),
                                   np.array([True, False, True, True])])  # fmt: skip
def test_a_reference_output_for_a_bool_output_is_true_where_nonzero_whatever_its_dtype(value) -> None:
    """NumPy's and ONNX Cast's rule: the integers [2, 0, -1] were written [true, false, true] but the same
    values as floats [true, false, false] (rounded, then >= 1: the rule for drawing random inputs)."""
    assert _rounded(value, "bool", "ref['Y']").tolist() == [v != 0 for v in value.tolist()]


def test_a_nan_for_a_bool_output_is_refused_naming_the_reference_s_output() -> None:
    with pytest.raises(InputError) as info:
        _rounded(np.array([1.0, np.nan]), "bool", "ref['Y']")
    assert info.value.argument == "ref['Y']" and "NaN" in info.value.received


def _inline(shape: list[int]) -> dict[str, Any]:
    return {"dtype": "float32", "shape": shape, "values": [0.0] * int(np.prod(shape))}


def test_the_largest_inline_entry_is_named_with_a_data_file_to_name_instead() -> None:
    """The entry holding the most values (a data file's entry holds none inline, whatever its shape),
    with ``CASE.ROLE.npy`` to name, or ``data/caseINDEX.ROLE.npy`` where the case's name makes no file name."""
    cases = [{"name": "refused", "refused": {"error": "DTypeError"}},
             {"name": "a b", "expected": {"Y": _inline([2, 3]), "Z": {"file": "z.npy", "shape": [100]}}},
             {"name": "small", "expected": {"Y": _inline([2]), "Z": _inline([5])}}]  # fmt: skip
    assert largest_inline_entry(cases) == InlineEntry(6, 1, "Y", "data/case1.Y.npy")
    assert largest_inline_entry(cases).json_path == "cases[1].expected.Y"
    cases[1]["name"] = "wide"
    assert largest_inline_entry(cases) == InlineEntry(6, 1, "Y", "wide.Y.npy")
    assert largest_inline_entry([cases[0], {"name": "f", "expected": {"Y": {"file": "y.npy"}}}]) is None


def test_a_test_json_of_at_most_a_package_file_s_bytes_is_taken_and_a_larger_one_refused_naming_its_largest_entry():
    """The loader reads a file of at most 8 MiB: test.json's new text is counted in UTF-8 bytes."""
    cases = [{"name": "c0", "expected": {"Y": _inline([2])}}, {"name": "c1", "expected": {"Y": _inline([3])}}]
    check_test_file_size(cases, "x" * MAX_FILE_BYTES)
    with pytest.raises(CaseFileError) as info:
        check_test_file_size(cases, "x" * (MAX_FILE_BYTES - 1) + "\u00e9")  # 2 bytes in UTF-8
    assert info.value.json_path == "cases[1].expected.Y" and info.value.file == "test.json"
    assert info.value.detail == (f"test.json would be {MAX_FILE_BYTES + 1} bytes, more than a package file may be "
                                 f"({MAX_FILE_BYTES}): this entry holds 3 values inline; name a data file instead "
                                 '({"file": "c1.Y.npy"}), which expect creates')  # fmt: skip
    with pytest.raises(CaseFileError) as info:  # no inline entry to name: test.json's cases
        check_test_file_size([], "x" * (MAX_FILE_BYTES + 1))
    assert info.value.json_path == "cases" and info.value.detail.endswith(f"({MAX_FILE_BYTES})")
