"""What each template filter says of a value a template wrote where a plain value belongs: ``range``
or a dict's ``items`` left uncalled, a macro, the loop variable, an imported template. Python's own
messages had named them by class ("wgsl_float needs a number, got <function> (function)"), and
``| int`` and ``| float`` had turned each into 0 without a word."""

from __future__ import annotations

import pytest
from test_rendering import render_template

from webgpu_kernels import errors
from webgpu_kernels.template_filters import TEMPLATE_FILTERS

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
    with pytest.raises(errors.TemplateError) as info:
        render_template(source, _IMPORTED)
    message = str(info.value)
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
    with pytest.raises(errors.TemplateError) as info:
        render_template(source, _IMPORTED)
    assert str(info.value) == f"main.wgsl.jinja:1: {said}", str(info.value)


def test_int_and_float_still_give_their_default_for_what_is_no_number():
    """Jinja documents the default for a value that does not convert: only the template's functions,
    macros, loop variable and imported templates, which are never numbers, are told."""
    assert render_template("{{ 'x'|int }} {{ none|float }} {{ [1]|int(7) }} {{ '2.5'|float }}") == "0 0.0 7 2.5"
