"""docs/security.md's claims that no other test pins, by the page's headings; each test quotes its line.

The templates render in the sandbox directly (no package, no GPU): what a package's template may
and may not do is the environment's business, and tests/test_sandbox.py covers the path through a
package and the published escapes.
"""

from __future__ import annotations

import pytest

from webgpu_kernels import errors
from webgpu_kernels.templates import PackageLoader, TemplateSandbox, template_error

MAIN = "main.wgsl.jinja"
CONTEXT = {"bindings": {"x": {"name": "x"}}, "bindingList": [{"name": "x"}], "constants": {"n": 3}}


def render(source: str, files: dict[str, str] | None = None) -> str:
    """``source`` rendered as a package's template (``files``: the package's other templates); what
    it raises comes back as the library's error, as rendering.py turns it."""
    package = {**(files or {}), MAIN: source}

    def read(name: str) -> str:
        if name not in package:
            raise errors.PackageError("file not found in the package", path=name)
        return package[name]

    try:
        return TemplateSandbox(PackageLoader(read)).get_template(MAIN).render(CONTEXT)
    except Exception as exc:
        raise template_error(exc, MAIN, CONTEXT) from None


# --- Templates render in a bounded sandbox -----------------------------------------------------------


def test_recursive_loops_are_refused():
    """Doc: "**Statements**: output, `if`, `for` (not `recursive`), ..." """
    with pytest.raises(errors.TemplateSandboxError, match="recursive loops"):
        render("{% for i in [1] recursive %}{{ i }}{% endfor %}")


def test_statements_nest_at_most_16_deep_the_output_counting():
    """Doc: "statements nested at most 16 deep (the output itself counts: 15 nested blocks around it)" """
    assert render("{% if true %}" * 15 + "x" + "{% endif %}" * 15) == "x"
    with pytest.raises(errors.TemplateSandboxError, match="statements nested more than 16"):
        render("{% if true %}" * 16 + "x" + "{% endif %}" * 16)


def test_expressions_nest_at_most_32_deep():
    """Doc: "... statements nested at most 16 deep ..., expressions at most 32." """
    assert render("{{ " + "not " * 31 + "true }}") == "False"
    with pytest.raises(errors.TemplateSandboxError, match="nested more than 32"):
        render("{{ " + "not " * 32 + "true }}")


def test_round_takes_a_precision_of_at_most_400_digits():
    """Doc: "The `round` filter takes a precision of at most 400 digits (it computes `10 ** precision`
    in one step)." """
    assert render("{{ 1.5|round(400) }} {{ 1.5|round(-400) }}") == "1.5 0.0"
    for precision in (401, -401):
        with pytest.raises(errors.TemplateSandboxError, match="at most 400 digits"):
            render(f"{{{{ 1.5|round({precision}) }}}}")


def test_template_names_are_at_most_255_characters_and_the_error_says_so():
    """Doc: "**Template names** ... must match `[A-Za-z0-9_][A-Za-z0-9_.-]*` (at most 255 characters)"
    (a 256-letter name had been refused as if its letters were at fault)."""
    with pytest.raises(errors.TemplateError, match="which is not in the package") as allowed:
        render("{% include '" + "a" * 255 + "' %}")
    assert not isinstance(allowed.value, errors.TemplateSandboxError)
    with pytest.raises(errors.TemplateSandboxError, match=r"\(256 characters\).*at most 255 characters"):
        render("{% include '" + "a" * 256 + "' %}")
    with pytest.raises(errors.TemplateSandboxError, match="not starting with '.' or '-'"):
        render("{% include '.hidden' %}")


def test_the_public_attributes_of_loop_and_nothing_else():
    """Doc: "**Attributes**: keys of mappings ..., the public attributes of `loop`, the macros of an
    imported template. Nothing of strings, numbers, lists or functions." """
    text = "{% for i in [5, 6] %}{{ loop.index }}{{ loop.revindex0 }}{{ loop.length }}{{ loop.first }};{% endfor %}"
    assert render(text) == "112True;202False;"
    for attribute in ("changed", "cycle", "_iterator", "__class__"):
        with pytest.raises(errors.TemplateSandboxError, match=f"attribute '{attribute}' of the loop variable "):
            render(f"{{% for i in [1] %}}{{{{ loop.{attribute} }}}}{{% endfor %}}")


def test_an_imported_template_gives_its_macros_and_names_and_no_internals():
    """Doc: "the macros of an imported template" (and `include`/`import`/`from ... import` of files at
    the top of the package)."""
    files = {"lib.wgsl.jinja": "{% set width = 4 %}{% macro f(n) %}f{{ n }}{% endmacro %}"}
    assert render("{% import 'lib.wgsl.jinja' as m %}{{ m.f(1) }}{{ m.width }}", files) == "f14"
    assert render("{% from 'lib.wgsl.jinja' import f %}{{ f(2) }}", files) == "f2"
    with pytest.raises(errors.TemplateSandboxError, match="'_body_stream' of the imported template 'lib.wgsl.jinja' "):
        render("{% import 'lib.wgsl.jinja' as m %}{{ m._body_stream }}", files)
    with pytest.raises(errors.TemplateError, match="names starting with an underline"):
        render("{% from 'lib.wgsl.jinja' import __init__ %}", files)


def test_a_dicts_items_keys_values_are_its_only_calls():
    """Doc: "**Calls**: `range`, macros (and `caller`), and a dict's `items()`/`keys()`/`values()`" """
    assert render("{% for k, v in bindings.items() %}{{ k }}={{ v.name }}{% endfor %}") == "x=x"
    assert render("{{ bindings.keys()|list }}{{ bindings.values()|list|length }}") == "['x']1"
    for method in ("get", "pop", "update", "setdefault", "copy"):  # keys of the mapping only: no such key
        with pytest.raises(errors.TemplateError, match=f"no attribute '{method}'"):
            render(f"{{{{ bindings.{method}('x') }}}}")
    with pytest.raises(errors.TemplateSandboxError, match="'mapping' of a list"):
        render("{{ bindings.keys().mapping }}")


@pytest.mark.parametrize(("source", "written"), [
    ("{{ 1|abs(2) }}", "the filter 'abs': too many positional arguments"),
    ("{{ 'x'|replace('x') }}", "the filter 'replace': missing a required argument: 'new'"),
    ("{{ 1|int(z=1) }}", "the filter 'int': got an unexpected keyword argument 'z'"),
    ("{{ 1|wgsl_uint(2) }}", "the filter 'wgsl_uint': too many positional arguments"),
    ("{{ 1 is odd(2) }}", "the test 'odd': too many positional arguments"),
    ("{{ 1 is defined(2) }}", "the test 'defined': too many positional arguments"),
    ("{{ range(stop=3) }}", "range() takes no keyword arguments, got 'stop'"),
])  # fmt: skip
def test_a_filter_test_or_range_called_wrongly_is_named_as_the_template_wrote_it(source, written):
    """Doc: "**Filters**: `abs default first ...`" and "**Tests**: the harmless ones" by those names:
    Python's own message had named the function behind one (`_f_abs() takes 2 positional arguments
    but 3 were given` of `1|abs(2)`, counting the context Jinja passes; `test_odd()`,
    `_Range.__call__()`)."""
    with pytest.raises(errors.TemplateError) as error:
        render(source)
    assert written in str(error.value)
    assert "_f_" not in str(error.value) and "test_" not in str(error.value) and "__call__" not in str(error.value)


def test_the_allowed_filters_and_tests_still_take_their_arguments():
    """Doc: the filters and tests listed, with their arguments, still work."""
    text = ("{{ -1|abs }} {{ 'a b'|replace(' ', '-', 1) }} {{ 'zz'|int(0, 36) }} {{ [3, 1]|max }} "
            "{{ x|default(7) }} {{ 1.25|round(1, 'floor') }} {{ 2|wgsl_float('f') }} {{ 'ab'|indent(2, true) }} "
            "{{ 4 is divisibleby(2) }} {{ 1 is in([1]) }} {{ 2 is eq(2) }}")
    assert render(text) == "1 a-b 1295 3 7 1.2 2.0f   ab True True True"
