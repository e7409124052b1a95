"""What each template filter says of a value a template wrote where a plain value belongs: ``range``
or a dict's ``items`` left uncalled, a macro, the loop variable, an imported template. Python's own
messages had named them by class ("wgsl_float needs a number, got <function> (function)"), and
``| int`` and ``| float`` had turned each into 0 without a word."""

from __future__ import annotations

import re

import numpy as np
import pytest
from test_rendering import refusal_of, render_template

from webgpu_kernels.template_filters import TEMPLATE_FILTERS, wgsl_float

from conftest import run_on_words

_IMPORTED = {"lib.wgsl.jinja": "{% macro load(i) %}x[{{ i }}]{% endmacro %}"}

#: Each value as a template writes it, and the words any message about it must use (one of them).
_VALUES = {
    "range": ("{{ range|F }}", ("the function range", "range is a function")),
    "items": ("{{ bindings.items|F }}", ("the method items", "items, keys and values are methods")),
    "macro": ("{% macro tile() %}{% endmacro %}{{ tile|F }}", ("the macro tile", "Macro is a macro")),
    "loop": ("{% for i in range(2) %}{{ loop|F }}{% endfor %}", ("the loop variable",)),
    "module": ("{% import 'lib.wgsl.jinja' as lib %}{{ lib|F }}",
               ("the imported template 'lib.wgsl.jinja'", "TemplateModule is a template brought in")),
}
_ARGUMENTS = {"replace": "('a', 'b')"}
_CLASS_WORDS = ("<function>", "<method>", "(function)", "(method)", "<Macro>", "<LoopContext>", "<TemplateModule>",
                "_Range", "_DictMethod")  # fmt: skip


@pytest.mark.parametrize("value", sorted(_VALUES))
@pytest.mark.parametrize("name", sorted(TEMPLATE_FILTERS))
def test_every_filter_names_a_value_as_the_template_wrote_it(name, value):
    source, words = _VALUES[value]
    source = source.replace("|F", f"|{name}{_ARGUMENTS.get(name, '')}")
    if (name, value) == ("length", "loop"):  # the loop's length, as Jinja documents
        assert render_template(source, _IMPORTED) == "22"
        return
    message = refusal_of(source, _IMPORTED)
    assert message.startswith("main.wgsl.jinja:1: "), message
    assert any(w in message for w in words), message
    assert not any(w in message for w in _CLASS_WORDS), message


@pytest.mark.parametrize(("source", "said"), [
    ("{{ range|wgsl_float }}", "ValueError: wgsl_float needs a number, got the function range (call it, as in "
                               "range(n))"),
    ("{{ bindings.keys|wgsl_uint }}", "ValueError: wgsl_uint needs an integer in [0, 2^32), got the method keys "
                                      "(call it, as in d.keys())"),
    ("{% macro tile() %}{% endmacro %}{{ tile|wgsl_float('f') }}", "ValueError: wgsl_float needs a number, got "
     "the macro tile (call it, as in tile(), for the text it renders)"),
    ("{% for i in [1] %}{{ loop|wgsl_uint }}{% endfor %}", "ValueError: wgsl_uint needs an integer in [0, 2^32), "
     "got the loop variable (read its attributes, as in loop.index)"),
    ("{% import 'lib.wgsl.jinja' as lib %}{{ lib|wgsl_float }}", "ValueError: wgsl_float needs a number, got the "
     "imported template 'lib.wgsl.jinja' (call its macros, as in name.macro())"),
    ("{{ range|int }}", "ValueError: int needs a number or a string of one, got the function range (call it, as in "
                        "range(n))"),
    ("{{ bindings.values|float }}", "ValueError: float needs a number or a string of one, got the method values "
                                    "(call it, as in d.values())"),
    ("{% for i in [1] %}{{ loop|int }}{% endfor %}", "ValueError: int needs a number or a string of one, got the "
     "loop variable (read its attributes, as in loop.index)"),
])  # fmt: skip
def test_a_filters_message_says_what_the_value_is_and_what_to_write(source, said):
    message = refusal_of(source, _IMPORTED)
    assert message == f"main.wgsl.jinja:1: {said}", message


def test_int_and_float_still_give_their_default_for_what_is_no_number():
    """Jinja documents the default for a value that does not convert: only the template's functions,
    macros, loop variable and imported templates, which are never numbers, are told."""
    assert render_template("{{ 'x'|int }} {{ none|float }} {{ [1]|int(7) }} {{ '2.5'|float }}") == "0 0.0 7 2.5"


# --- wgsl_float's literals, as the shader compiler reads them -------------------------------------------

#: WGSL's decimal_float_literal (the spec's grammar, "Numeric Literals"); a leading '-' is the unary minus.
_DECIMAL_FLOAT = re.compile(r"0[fh]|[1-9][0-9]*[fh]|[0-9]*\.[0-9]+([eE][+-]?[0-9]+)?[fh]?"
                            r"|[0-9]+\.[0-9]*([eE][+-]?[0-9]+)?[fh]?|[0-9]+[eE][+-]?[0-9]+[fh]?")  # fmt: skip

#: The edges of each type: negative zero, the smallest subnormal, the smallest normal, the largest finite, an
#: integer-valued value (no point of its own in repr: an unsuffixed "2" is an abstract *int*), a tie that rounds
#: to even, a value nearest the largest but above it.
_F32 = [1.702, 0.1, -0.0, 2**-149, -1e-40, 2.0**-126, 3.4028234663852886e38, -3.4028235e38, 2, 16777217.0, 1e7]
_F16 = [0.1, -0.0, 2.0**-24, 2.0**-14, 65504.0, 65519.0, -65504.0, 2049.0, 3]
_ABSTRACT = [1.702, 2, -3.0, -0.0, 1e-5, 1e7, 2.0**-126]  # concretised to f32 by `let`, so within its range


def _literal_bits(lines: list[str], f16: bool, functions: str) -> np.ndarray:
    """Run `o[i] = <expression i>` once on the device and return o as u32 words."""
    body = "\n".join(f"  o[{i}] = {line};" for i, line in enumerate(lines))
    wgsl = (("enable f16;\n" if f16 else "") + functions
            + f"@group(0) @binding(0) var<storage, read_write> o: array<u32, {len(lines)}>;\n"
            + f"@compute @workgroup_size(1) fn main() {{\n{body}\n}}\n")  # fmt: skip
    return run_on_words(wgsl, [0] * len(lines))


def test_wgsl_float_literals_are_wgsl_and_read_back_on_the_device_as_the_value_in_its_type(device):
    """Each literal is WGSL's grammar, and the device's shader compiler reads it as the value rounded to the
    type (bit for bit: the sign of zero, subnormals, the largest finite); an unsuffixed one is a float (`let`
    makes it f32, not i32)."""
    cases = [(v, "f") for v in _F32] + [(v, "") for v in _ABSTRACT] + [(v, "h") for v in _F16] * device.has_f16
    literals = [wgsl_float(value, suffix) for value, suffix in cases]
    for literal in literals:
        assert _DECIMAL_FLOAT.fullmatch(literal.removeprefix("-")), literal
    # f32 and unsuffixed through a `let`, which takes the literal's own type (an abstract int: i32, refused)
    functions = "".join(f"fn lit_{i}() -> f32 {{ let v = {literal}; return v; }}\n"
                        for i, literal in enumerate(literals) if not literal.endswith("h"))  # fmt: skip
    lines = [f"pack2x16float(vec2(f32({literal}), 0.0))" if literal.endswith("h") else f"bitcast<u32>(lit_{i}())"
             for i, literal in enumerate(literals)]  # fmt: skip
    expected = [int(np.array(value, np.float16).view(np.uint16)) if suffix == "h"
                else int(np.array(value, np.float32).view(np.uint32)) for value, suffix in cases]  # fmt: skip
    got = _literal_bits(lines, device.has_f16, functions)
    assert list(zip(literals, got.tolist(), strict=True)) == list(zip(literals, expected, strict=True))


@pytest.mark.parametrize("text", ["", "ab", "xyz", "aXb"])
def test_trim_by_more_than_64_characters_strips_as_str_strip(text):
    """More than 64 distinct characters take the linear path (template_filters._strip): the same result as
    str.strip, an empty string included (reading before its start had raised IndexError)."""
    chars = "ab" + "".join(chr(0x100 + i) for i in range(70))
    assert render_template(f"{{{{ {text!r}|trim({chars!r}) }}}}") == text.strip(chars)


def test_wgsl_float_of_an_int_past_float64_is_its_value_error():
    """A Python caller's int past float64 (a template's integers are bounded far below) had raised OverflowError."""
    with pytest.raises(ValueError, match=r"^wgsl_float's value is beyond float64, got <int of 1329 bits> \(int\)$"):
        wgsl_float(10**400, "f")
