"""The sandbox regression corpus: published Jinja2 sandbox escapes, MRO/globals walks and resource
attacks, each tried as a manifest expression and inside a template. Every one must end in the
library's error (naming the expression or the template), leak nothing of Python's internals, run
nothing (a canary file stays absent) and allocate nothing large (compile time included).

Also: crafted template names (CVE-2024-56201), what templates may still do (so the sandbox does
not refuse the documented features), and huge or deeply nested manifests refused quickly.
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
import time
import tracemalloc
from dataclasses import dataclass

import jinja2.exceptions
import numpy as np
import pytest
from jinja2.exceptions import SecurityError
from test_rendering import refusal_of, render_template

import webgpu_kernels as wk
from webgpu_kernels import errors
from webgpu_kernels.expressions import STATIC_FUNCTIONS, ExpressionCompiler
from webgpu_kernels.manifest import parse_manifest
from webgpu_kernels.package import KernelPackage
from webgpu_kernels.sandbox import MAX_RENDER_SECONDS, MAX_SEQUENCE_LENGTH, RenderBudget, SandboxViolation
from webgpu_kernels.templates import MAX_RENDERED_BYTES, TemplateSandbox

from conftest import PACKAGES_DIR

DEMO_MANIFEST = json.loads((PACKAGES_DIR / "demo.ScaleShift" / "manifest.json").read_text())
DEMO_TEMPLATE = (PACKAGES_DIR / "demo.ScaleShift" / "scale-shift.wgsl.jinja").read_text()
SHADER = "scale-shift.wgsl.jinja"
X = {"X": wk.TensorMeta((3,), "float32")}

#: Text that only a leak of Python internals would put into an error message (no corpus entry
#: contains any of these itself).
LEAK_MARKERS = ("<class '", " at 0x", "<function ", "<built-in", "<bound method", "<module '", "'__name__':",
                "'__builtins__': {", "<TemplateReference", "<Context ", "posix.", "root:x:0:0")  # fmt: skip

CANARY = "@CANARY@"  # replaced by a path: a payload that escaped would create that file


@dataclass(frozen=True)
class Escape:
    id: str
    expression: str | None  # as a manifest expression (None: template only)
    template: str | None = None  # inside a template (default: "{{ expression }}"; None with no expression)
    resource: bool = False  # a resource attack: must be refused by a SandboxError

    def template_source(self) -> str | None:
        if self.template is not None:
            return self.template
        return None if self.expression is None else "{{ " + self.expression + " }}"


CORPUS = [
    # --- CVE-2016-10745: str.format reaches attributes through the format string --------------
    Escape("cve-2016-10745-format-class", "'{0.__class__.__mro__}'.format(attrs)",
           "{{ '{0.__class__.__mro__[1].__subclasses__}'.format(bindings) }}"),
    Escape("cve-2016-10745-format-globals", "'{0.__init__.__globals__}'.format(shapes)",
           "{{ '{0.__init__.__globals__[sys]}'.format(bindingList) }}"),
    Escape("str-format-width", "'{0:>50000000}'.format(1)", resource=True),
    # --- CVE-2019-10906: str.format_map --------------------------------------------------------
    Escape("cve-2019-10906-format-map", "'{a.__class__.__mro__}'.format_map(attrs)",
           "{{ '{x.__class__.__mro__}'.format_map({'x': bindings}) }}"),
    # --- CVE-2024-56326: a stored reference to format, called indirectly ------------------------
    Escape("cve-2024-56326-stored-format", None,
           "{% set f = '{0.__class__.__init__.__globals__}'.format %}{{ f(bindings) }}"),
    Escape("cve-2024-56326-format-in-list", "['{0.__class__}'.format][0](1)",
           "{{ ['{0.__class__}'.format] | first }}"),
    Escape("cve-2024-56326-format-by-item", "shapes['format']", "{{ ''['format']('{0.__class__}', bindings) }}"),
    Escape("cve-2024-56326-format-through-macro", None,
           "{% macro m(f) %}{{ f('{0.__class__}', 1) }}{% endmacro %}{{ m(''.format) }}"),
    # --- CVE-2025-27516: |attr reaches format ---------------------------------------------------
    Escape("cve-2025-27516-attr-format", "'x' | attr('format')",
           "{{ ''|attr('format')('{0.__class__.__mro__}', bindings) }}"),
    Escape("cve-2025-27516-attr-dunder", None, "{{ bindings|attr('__class__') }}"),
    Escape("cve-2025-27516-map-attr", None, "{{ bindingList|map(attribute='__class__')|list }}"),
    # --- MRO and globals walks ------------------------------------------------------------------
    Escape("mro-tuple", "().__class__.__mro__"),
    Escape("mro-subclasses", "().__class__.__base__.__subclasses__()",
           "{{ ().__class__.__base__.__subclasses__() }}"),
    Escape("mro-str", "''.__class__.__mro__[1].__subclasses__()"),
    Escape("mro-getitem", "shapes['__class__']['__mro__']", "{{ bindings['__class__']['__mro__'] }}"),
    Escape("mro-namespace", "attrs.__class__", "{{ attrs.__class__ }}"),
    Escape("mro-value", "dtypes.T.__class__", "{{ scalar.__class__.__mro__ }}"),
    Escape("mro-mro-method", "shapes.X.mro()", "{{ scalar.mro() }}"),
    Escape("cycler-globals", "cycler.__init__.__globals__",
           f"{{{{ cycler.__init__.__globals__.os.popen('touch {CANARY}').read() }}}}"),
    Escape("lipsum-globals", "lipsum.__globals__", f"{{{{ lipsum.__globals__['os'].popen('touch {CANARY}') }}}}"),
    Escape("joiner-globals", "joiner.__init__.__globals__", "{{ joiner.__init__.__globals__ }}"),
    Escape("namespace-globals", "namespace.__init__.__globals__", "{{ namespace.__init__.__globals__ }}"),
    Escape("range-globals", "range.__globals__", "{{ range.__globals__ }}"),
    Escape("self", "self", "{{ self }}"),
    Escape("self-context", "self._TemplateReference__context", "{{ self._TemplateReference__context }}"),
    Escape("self-dict", "self.__dict__", "{{ self.__dict__ }}"),
    Escape("config", "config", "{{ config }}"),
    Escape("config-items", "config.items()", "{{ config.items() }}"),
    Escape("request", "request.application.__globals__", "{{ request.application.__globals__.__builtins__ }}"),
    Escape("loop-object", None, "{% for i in [1] %}{{ loop.__class__.__init__.__globals__ }}{% endfor %}"),
    Escape("loop-cycle", None, "{% for i in [1] %}{{ loop.cycle.__globals__ }}{% endfor %}"),
    Escape("dict-method-self", "shapes.items", "{{ bindings.items.__self__ }}"),
    Escape("method-of-value", "numel.__globals__", "{{ bindings.x.name.upper() }}"),
    Escape("dunder-name", "__builtins__", "{{ __builtins__ }}"),
    Escape("import", "__import__('os')", f"{{{{ __import__('os').system('touch {CANARY}') }}}}"),
    Escape("getattr-builtin", "getattr(shapes, '__class__')", "{{ getattr(bindings, '__class__') }}"),
    Escape("dict-update", None, "{{ bindings.update({'x': 1}) }}"),
    Escape("list-append", None, "{% set l = [] %}{{ l.append(1) }}"),
    Escape("python-format-percent", "'%s' % shapes", "{{ '%(x)s' % bindings }}"),
    # --- resources: sizes, folding at compile time, loop work ------------------------------------
    Escape("repeat-at-compile", "'A' * 10**8", resource=True),
    Escape("repeat-literal", "'A' * 100000000", resource=True),
    Escape("repeat-list", "[0] * 100000000", resource=True),
    Escape("center", "'a' | center(50000000)", template="{{ 'a'|center(50000000) }}"),  # no such filter
    Escape("percent-width", "'%0100000000d' % 1", resource=True),
    Escape("percent-in-test", None, "{{ '%0100000000d' is odd }}", resource=True),
    Escape("percent-in-divisibleby", None, "{{ '%0100000000d' is divisibleby(3) }}", resource=True),
    Escape("indent-width", None, "{{ 'a\\nb'|indent(100000000) }}", resource=True),
    Escape("replace-growth", None, "{{ ('x' * 4000)|replace('', 'y' * 4000) }}", resource=True),
    Escape("join-growth", None, "{{ range(100)|join('x' * 20000) }}", resource=True),
    Escape("concat-doubling", "'x' * 4096 ~ 'x' * 4096", "{% set s = 'x' * 700000 %}{{ s ~ s }}", resource=True),
    Escape("set-doubling", None,
           "{% set s = 'ab' * 300000 %}{% set s = s ~ s %}{% set s = s ~ s %}{% set s = s ~ s %}{{ s|length }}",
           resource=True),
    Escape("add-doubling", None, "{% set s = 'x' * 600000 %}{% set s = s + s %}{{ s|length }}", resource=True),
    Escape("macro-doubling", None,
           "{% macro d(s, n) %}{% if n %}{{ d(s ~ s, n - 1) }}{% else %}{{ s|length }}{% endif %}{% endmacro %}"
           "{{ d('x', 64) }}", resource=True),
    Escape("power", "2 ** (10 ** 8)", resource=True),
    Escape("power-chain", "(9 ** 9) ** 9", resource=True),
    Escape("huge-int-literal", "1" + "0" * 400, resource=True),
    Escape("range", "range(10**9)", "{{ range(10**9)|list|length }}", resource=True),
    Escape("nested-loops", None,
           "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}", resource=True),
    Escape("exponential-macro", None,
           "{% macro f(n) %}{% if n %}{{ f(n - 1) }}{{ f(n - 1) }}{% endif %}{% endmacro %}{{ f(60) }}",
           resource=True),
    Escape("macro-output-growth", None,
           "{% set s = 'x' * 1000000 %}{% macro m() %}{% for i in range(100000) %}{{ s }}{% endfor %}{% endmacro %}"
           "{% set y = m() %}", resource=True),
    Escape("output-size", None, "{% for i in range(100000) %}{{ 'x' * 100 }}{% endfor %}", resource=True),
    Escape("deep-nesting", "(" * 2000 + "1" + ")" * 2000, "{{ " + "(" * 2000 + "1" + ")" * 2000 + " }}",
           resource=True),
    Escape("deep-not", "not " * 1000 + "true", "{{ " + "not " * 1000 + "true }}", resource=True),
    Escape("deep-statements", None, "{% if true %}" * 200 + "x" + "{% endif %}" * 200, resource=True),
    Escape("deep-loops", None, "{% for i in [1] %}" * 30 + "x" + "{% endfor %}" * 30, resource=True),
    Escape("too-long-expression", "1 + " * 2000 + "1", resource=True),
    # --- one uninterruptible step over aliased nested lists (2^36 item comparisons) ----------------
    Escape("compare-aliased-lists", "[[[0]*4096]*4096]*4096 == [[[0]*4096]*4096]*4096",
           "{% set a = range(100000)|list %}{% set b = range(100000)|list %}{{ [a]*100000 == [b]*100000 }}",
           resource=True),
    Escape("in-aliased-lists", "[[0]*4096]*4096 in [[[0]*4096]*4096]",
           "{% set a = range(100000)|list %}{{ [a]*100000 in [[range(100000)|list]*100000] }}", resource=True),
    Escape("eq-test-aliased-lists", None,
           "{% set a = range(100000)|list %}{{ [a]*100000 is eq([range(100000)|list]*100000) }}", resource=True),
    Escape("max-aliased-lists", None, "{% set a = range(100000)|list %}{{ ([a]*100000)|max }}", resource=True),
    # repeating a list that holds lists: short to write, 2^24 items to walk (each manifest value
    # is walked once, for functions hidden inside it)
    Escape("repeat-nested-list", "[[0] * 4096] * 4096", "{% set a = [[0] * 100000] * 100000 %}", resource=True),
    Escape("heavy-literal-result", "[[0] * 4096, [0] * 4096]",
           "{{ [[0] * 100000, [0] * 100000] == [[0] * 100000, [0] * 100000] }}", resource=True),
    Escape("max-of-heavy-values", "max([[0] * 4096, [0] * 4096], [[0] * 4096, [0] * 4096])",
           "{{ [[[0] * 100000, [0] * 100000], [[0] * 100000, [0] * 100000]]|max }}", resource=True),
    # ... and over lists of long strings: each reference to a 1 MiB string is walked in full
    # (([s] * 100000)|max lowercased 10^11 characters: 32 s in one step, past the render deadline)
    Escape("max-of-long-strings", None, "{% set s = 'x' * 1000000 %}{{ ([s] * 1000)|max|length }}", resource=True),
    Escape("min-of-long-strings", None, "{% set s = 'x' * 1000000 %}{{ ([s] * 1000)|min|length }}", resource=True),
    Escape("compare-lists-of-long-strings", None,
           "{% set s = 'x' * 1000000 %}{% set t = 'x' * 1000000 %}{{ [s] * 1000 == [t] * 1000 }}", resource=True),
    Escape("in-test-long-strings", None,
           "{% set s = 'x' * 1000000 %}{% set t = 'x' * 1000000 %}{{ s is in([t] * 1000) }}", resource=True),
    # round computes 10 ** precision in one step
    Escape("round-precision", None, "{{ 5|round(-30000000) }}", resource=True),
    Escape("round-ceil-precision", None, "{{ 1.5|round(30000000, 'ceil') }}", resource=True),
    # a template name is hashed for Jinja's cache before it is loaded
    Escape("include-a-tuple-name", None, "{% set t = (0,) * 1000 %}{% include (t,) %}", resource=True),
    Escape("import-a-tuple-name", None, "{% set t = (0,) * 1000 %}{% import t as m %}", resource=True),
    Escape("lone-surrogate", None, "{{ '\\ud800' }}"),
    Escape("hash-nested-tuple", None,
           "{% set t = (1,2,3,4,5,6,7,8,9,10) %}" + "{% set t = (t,t,t,t,t,t,t,t,t,t) %}" * 8 + "{{ {t: 1} }}",
           resource=True),
]  # fmt: skip


def peak_rss() -> int:
    """The process's peak resident memory so far, in bytes (``VmHWM`` of /proc/self/status)."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return 0


#: What the render deadline's error says: the wall-clock stop, there for what no limit counts. A
#: corpus entry or bound stopped by it took seconds (10 of them) where a limit that counts (work
#: units, sizes, depth) would have stopped it at once: the regression these tests look for,
#: told apart without timing anything (a loaded machine slows both).
DEADLINE_TEXT = "took longer than"


def assert_not_the_deadline(error: Exception) -> None:
    assert DEADLINE_TEXT not in str(error), f"stopped by the render deadline, not by a limit that counts: {error}"


def test_render_deadline_stops_work_past_it():
    """The backstop for work no limit counts: a charge past the deadline stops the render. The suite
    lengthens the deadline (conftest.py), which a budget reads when it is made."""
    budget = RenderBudget()
    assert budget.seconds == MAX_RENDER_SECONDS == 120.0
    budget.charge(1)
    budget.deadline = time.monotonic() - 1.0
    with pytest.raises(SandboxViolation, match=f"{DEADLINE_TEXT} 120 s$"):
        budget.charge(1)
    assert RenderBudget(seconds=2.5).seconds == 2.5


def _with_canary(text: str, canary) -> str:
    return text.replace(CANARY, str(canary))


def assert_nothing_leaked(error: Exception, canary) -> None:
    message = str(error)
    for marker in LEAK_MARKERS:
        assert marker not in message, f"{marker!r} leaked into {message[:300]!r}"
    assert not canary.exists(), "a payload ran"


def demo_with_probe(write_package, expression: str | None = None, template: str | None = None):
    """The demo package with ``expression`` as a template input of every pass (evaluated at render,
    so evaluation errors propagate) and ``template`` put before its shader."""
    manifest = copy.deepcopy(DEMO_MANIFEST)
    if expression is not None:
        for variant in manifest["variants"]:
            for pass_ in variant["passes"]:
                pass_.setdefault("source", {}).setdefault("inputs", {})["probe"] = expression
    return write_package(manifest, {SHADER: (template or "") + DEMO_TEMPLATE})


@pytest.mark.parametrize("escape", [e for e in CORPUS if e.expression is not None], ids=lambda e: e.id)
def test_escape_as_manifest_expression(escape, write_package, tmp_path, device):
    canary = tmp_path / "canary"
    source = _with_canary(escape.expression, canary)
    root = demo_with_probe(write_package, expression=source)
    peak_before = peak_rss()
    with pytest.raises(errors.ExpressionError) as info:
        wk.load_kernel(root).render(X)
    assert_not_the_deadline(info.value)
    assert peak_rss() - peak_before < 64 * 2**20, "the process's peak memory grew"
    error = info.value
    assert error.expression in (source, source[:80] + "...")
    assert error.where  # names where the expression sits
    if escape.resource:
        assert isinstance(error, errors.SandboxError), error
    assert_nothing_leaked(error, canary)


@pytest.mark.parametrize("escape", [e for e in CORPUS if e.template_source() is not None], ids=lambda e: e.id)
def test_escape_in_template(escape, write_package, tmp_path, device):
    canary = tmp_path / "canary"
    template = _with_canary(escape.template_source(), canary) + "\n"
    kernel = wk.load_kernel(demo_with_probe(write_package, template=template))
    peak_before = peak_rss()
    with pytest.raises(errors.TemplateError) as info:
        kernel.render(X)
    assert_not_the_deadline(info.value)
    assert peak_rss() - peak_before < 96 * 2**20, "the process's peak memory grew"
    error = info.value
    assert error.file == SHADER
    if escape.resource:
        assert isinstance(error, errors.SandboxError), error
    assert_nothing_leaked(error, canary)


def test_sandbox_errors_are_both_kinds():
    assert issubclass(errors.ExpressionSandboxError, errors.ExpressionError)
    assert issubclass(errors.ExpressionSandboxError, errors.SandboxError)
    assert issubclass(errors.TemplateSandboxError, errors.TemplateError)
    assert issubclass(errors.TemplateSandboxError, errors.SandboxError)
    assert issubclass(errors.SandboxError, errors.KernelError)


# --- nothing is evaluated at compile time -----------------------------------------------------------


@pytest.mark.parametrize("source", ["'A' * 10**8", "'A' * 100000000", "'ab' ~ 'cd' ~ 'A' * 100000000",
                                    "[1] * 100000000", "10 ** 100000000", "'%0100000000d' % 1"])  # fmt: skip
def test_expression_compile_allocates_nothing(source):
    tracemalloc.start()
    try:
        expression = ExpressionCompiler(()).compile(source, "test")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 4 * 2**20, f"compiling {source!r} allocated {peak / 2**20:.0f} MiB"
    with pytest.raises(errors.ExpressionSandboxError):
        expression.evaluate(dict(STATIC_FUNCTIONS))


@pytest.mark.parametrize(
    "template",
    ["{{ 'A' * 100000000 }}", "{{ 'A' * 10**8 }}", "{{ 'a\nb'|indent(100000000) }}", "{{ '%0100000000d' is odd }}",
     "{{ 'x'|replace('', 'y' * 100000000) }}", "{{ [1] * 100000000 }}", "{{ 'a' ~ 'b' * 100000000 }}",
     "{{ range(100000)|join('x' * 10000) }}", "{{ '%0100000000d' % 1 }}"],
)  # fmt: skip
def test_template_compile_allocates_nothing(template):
    env = TemplateSandbox()
    tracemalloc.start()
    try:
        compiled = env.from_string(template)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 4 * 2**20, f"compiling {template!r} allocated {peak / 2**20:.0f} MiB"
    with pytest.raises(SecurityError):  # rendered outside the library: Jinja's own error class
        compiled.render()


# --- crafted template names (CVE-2024-56201) ---------------------------------------------------------

CRAFTED_NAMES = [
    "x'+__import__('os').system('touch canary')+'.wgsl.jinja",
    "x\"); __import__('os').system('touch canary') #.wgsl.jinja",
    "a\n__import__('os').system('touch canary')\n.wgsl.jinja",
    "{{ 7 * 7 }}.wgsl.jinja",
    "x\\'.wgsl.jinja",
    " .wgsl.jinja",
]


@pytest.mark.parametrize("name", CRAFTED_NAMES)
def test_crafted_shader_file_name_cannot_break_out(name, write_package, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    manifest = copy.deepcopy(DEMO_MANIFEST)
    for variant in manifest["variants"]:
        for pass_ in variant["passes"]:
            if "shader" in pass_:
                pass_["shader"] = name
            else:
                pass_["source"]["shader"] = name
    try:
        root = write_package(manifest, {name: DEMO_TEMPLATE})
    except OSError:
        pytest.skip("the file system refuses this name")
    with pytest.raises(wk.KernelError) as info:
        wk.load_kernel(root).render(X)
    assert isinstance(info.value, (errors.TemplateSandboxError, errors.ManifestError)), info.value
    if isinstance(info.value, errors.TemplateError):
        assert "refused" in str(info.value)
    assert not (tmp_path / "canary").exists()
    assert not os.path.exists("canary")


@pytest.mark.parametrize("name", ["../demo.ScaleShift/scale-shift.wgsl.jinja", "/etc/passwd", "..\\x.wgsl.jinja"])
def test_shader_names_with_paths_are_manifest_errors(name, write_package):
    manifest = copy.deepcopy(DEMO_MANIFEST)
    manifest["variants"][0]["passes"][0]["shader"] = name
    with pytest.raises(errors.ManifestError):
        wk.load_kernel(write_package(manifest, {SHADER: DEMO_TEMPLATE}))


@pytest.mark.parametrize(
    "statement",
    ["{% include '/etc/passwd' %}", "{% include '../../../../etc/passwd' %}", "{% include 'a/../manifest.json' %}",
     "{% include 'x\\'+__import__(\"os\").system(\"touch canary\")+\\'' %}", "{% import '/etc/hosts' as h %}",
     "{% from '../x.wgsl.jinja' import y %}", "{% include ['/etc/passwd', '/etc/hosts'] %}",
     "{% include '.hidden' %}", "{% include '\\x00' %}"],
)  # fmt: skip
def test_includes_cannot_leave_the_package(statement, write_package, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    kernel = wk.load_kernel(demo_with_probe(write_package, template=statement + "\n"))
    with pytest.raises(errors.TemplateError) as info:
        kernel.render(X)
    assert info.value.file == SHADER
    assert_nothing_leaked(info.value, tmp_path / "canary")


# --- what templates may still do ----------------------------------------------------------------------

ALLOWED = {
    "loop": ("{% for b in bindingList %}// {{ loop.index }} {{ b.name }}{{ ',' if not loop.last else '' }}\n"
             "{% endfor %}",
             "// 1 x,"),
    "dict-items": ("{% for k, v in bindings.items() %}// {{ k }}={{ v.binding }}\n{% endfor %}", "// params=2"),
    "keys-values": ("// {{ bindings.keys()|list|join(',') }} {{ bindings.values()|list|length }}\n", "// x,y,params 3"),
    "macro": ("{% macro decl(b) %}// {{ b.name }}:{{ b.type }}{% endmacro %}{{ decl(bindings.x) }}\n",
              "// x:array<f32>"),
    "call-block": ("{% macro w() %}// [{{ caller() }}]{% endmacro %}{% call w() %}in{% endcall %}\n", "// [in]"),
    "set-block": ("{% set t %}abc{% endset %}// {{ t|upper }}\n", "// ABC"),
    "filter-block": ("{% filter upper %}// shout{% endfilter %}\n", "// SHOUT"),
    "with": ("{% with n = 3 %}// {{ n * 2 }}{% endwith %}\n", "// 6"),
    "filters": ("// {{ [3, 1, 2]|max }} {{ 'a b'|replace(' ', '_') }} {{ ' x '|trim }} {{ 2.5|round|int }} "
                "{{ 'L1\nL2'|indent(2) }} {{ nope|default('d') }} {{ -3|abs }} {{ '7'|int + 1 }}\n",
                "// 3 a_b x 2 L1\n  L2 d 3 8"),
    "tests": ("// {{ 4 is even }} {{ 3 is odd }} {{ 9 is divisibleby 3 }} {{ scalar is string }} "
              "{{ nope is defined }}\n", "// True True True True False"),
    "arithmetic": ("// {{ 2 ** 10 }} {{ 7 // 2 }} {{ 7 % 3 }} {{ 'ab' * 3 }} {{ [1] + [2] }} {{ 'v' ~ 4 }}\n",
                   "// 1024 3 1 ababab [1, 2] v4"),
    "range-unroll": ("{% for i in range(4) %}x[{{ i }}]{% endfor %}\n", "x[0]x[1]x[2]x[3]"),
    "big-but-bounded": ("{% set s = 'y' * 100000 %}// {{ (s ~ s)|length }}\n", "// 200000"),
    "chained-comparison": ("// {{ 0 < 1 < 5 }} {{ 0 < 1 > 5 }} {{ 1 < 0 < 'abc'[0.5:] }}\n",
                           "// True False False"),
    "slice": ("// {{ 'abcdef'[1:3] }} {{ bindingList[:1]|length }} {{ range(10)[::3]|list }}\n",
              "// bc 1 [0, 3, 6, 9]"),
}  # fmt: skip


@pytest.mark.parametrize("name", ALLOWED)
def test_documented_template_features_still_work(name, write_package):
    template, expected = ALLOWED[name]
    text = wk.load_kernel(demo_with_probe(write_package, template=template)).render(X)["main"]
    assert expected in text


@pytest.mark.parametrize("template", ["// {{ bindingList[true:] }}\n", "// {{ 'abc'[0.5:] }}\n",
                                      "// {{ bindings[1:] }}\n"])  # fmt: skip
def test_template_slices_go_through_the_sandbox(template, write_package):
    """Jinja compiles a slice to plain Python indexing; the sandbox routes it through its getitem."""
    with pytest.raises(errors.TemplateError) as info:
        wk.load_kernel(demo_with_probe(write_package, template=template)).render(X)
    assert info.value.file == SHADER


def test_include_and_import_of_package_files(write_package):
    manifest = copy.deepcopy(DEMO_MANIFEST)
    root = write_package(manifest, {
        SHADER: "{% include 'header.wgsl' %}{% import 'macros.wgsl' as m %}{% from 'macros.wgsl' import twice %}"
                "// {{ m.twice(21) }} {{ twice(2) }}\n" + DEMO_TEMPLATE,
        "header.wgsl": "// header for {{ scalar }}\n",
        "macros.wgsl": "{% macro twice(n) %}{{ n * 2 }}{% endmacro %}",
    })  # fmt: skip
    text = wk.load_kernel(root).render(X)["main"]
    assert "// header for f32" in text and "// 42 4" in text


def test_self_including_template_is_stopped(write_package):
    root = demo_with_probe(write_package, template="{% include 'scale-shift.wgsl.jinja' %}"
                                                   "{% include 'scale-shift.wgsl.jinja' %}")  # fmt: skip
    # Stopped by a limit that counts (include depth, work units), not by the wall-clock deadline,
    # which 2**N renders would reach (a test timing it had failed on a loaded machine).
    with pytest.raises(errors.TemplateSandboxError) as info:
        wk.load_kernel(root).render(X)
    assert_not_the_deadline(info.value)


def test_rendered_size_limit_names_the_template(write_package):
    big = "{% for i in range(%d) %}{{ 'x' * 1000 }}{%% endfor %%}\n".replace("%d", str(MAX_RENDERED_BYTES // 1000 + 1))
    big = big.replace("%%", "%")
    with pytest.raises(errors.TemplateSandboxError) as info:
        wk.load_kernel(demo_with_probe(write_package, template=big)).render(X)
    assert info.value.file == SHADER and str(MAX_RENDERED_BYTES) in str(info.value)


def test_rendered_size_limit_counts_bytes(write_package):
    """1 MiB of WGSL is bytes: 600,000 two-byte characters passed a count of characters."""
    big = "// {{ '\u00e9' * 600000 }}\n"
    with pytest.raises(errors.TemplateSandboxError, match="bytes"):
        wk.load_kernel(demo_with_probe(write_package, template=big)).render(X)


def test_deeply_nested_wgsl_is_refused_before_the_driver_parses_it(write_package, device):
    """Plain text, no Jinja: 10,000 nested parentheses overflowed wgpu-native's parser stack and
    killed the process (segfault); the rendered WGSL's nesting is checked first. Real nesting passes."""
    deep = "const DEEP: f32 = " + "(" * 10_000 + "1.0" + ")" * 10_000 + ";\n"
    kernel = wk.load_kernel(demo_with_probe(write_package, template=deep))
    with pytest.raises(errors.TemplateSandboxError) as info:
        kernel.render(X)  # what a call renders before it compiles (a call here would crash the suite on a regression)
    assert info.value.file == SHADER and "more than 256 deep" in str(info.value)
    fine = "const FINE: f32 = " + "(" * 200 + "1.0" + ")" * 200 + ";\n"
    y = wk.load_kernel(demo_with_probe(write_package, template=fine))({"X": np.ones(4, np.float32)})["Y"]
    assert y.shape == (4,)


@pytest.mark.parametrize(("deep", "fine", "what"), [
    ("let z = " + "!" * 30_000 + "true;", "let z = " + "!" * 200 + "true;", "expressions"),
    # rendered from a loop: 120 KB of source would be refused as a template over 64 KiB
    ("let z = {% for i in range(20000) %}1.0 + {% endfor %}1.0;", "let z = " + "1.0 + " * 500 + "1.0;", "expressions"),
    ("let z = vec4f(1.0)" + ".x" * 20_000 + ";", "let z = vec4f(1.0).x;", "expressions"),
    ("alias Deep = " + "array<" * 3000 + "f32" + ">" * 3000 + ";", "alias Fine = array<vec4<f32>, 4>;", "template lists"),
], ids=["prefix-operators", "a-long-sum", "member-accesses", "template-lists"])  # fmt: skip
def test_deep_wgsl_expressions_are_refused_before_the_driver_parses_them(write_package, device, deep, fine, what):
    """Not brackets, yet as deadly: wgpu-native's parser and lowering recurse per operator, member
    access or template list, and these killed the process (exit 139). Only render: a regression
    here must not crash the suite. What real shaders hold still renders, and runs."""
    body = "fn probe() {\n  " + deep + "\n}\n" if deep.startswith("let") else deep + "\n"
    with pytest.raises(errors.TemplateSandboxError, match=f"nests {what}"):
        wk.load_kernel(demo_with_probe(write_package, template=body)).render(X)
    body = "fn probe() {\n  " + fine + "\n}\n" if fine.startswith("let") else fine + "\n"
    kernel = wk.load_kernel(demo_with_probe(write_package, template=body))
    kernel.render(X)
    if what == "expressions" and "vec4f" not in fine:
        assert kernel({"X": np.ones(4, np.float32)})["Y"].shape == (4,)


@pytest.mark.parametrize("line_break", ["\r", "\v", "\f", "\x85", "\u2028", "\u2029"],
                         ids=["cr", "vt", "ff", "nel", "ls", "ps"])
def test_a_comment_ends_at_every_wgsl_line_break(line_break):
    """The checks blanked a `//` comment to the next "\n", but WGSL ends it at any line break: code
    after "// x\r" was hidden from them and the compiler read 5,000 nested brackets (exit 139,
    helper-12), or a workgroup array past the device's limit."""
    from webgpu_kernels.rendering import check_nesting
    from webgpu_kernels.workgroup_memory import workgroup_storage

    with pytest.raises(errors.TemplateSandboxError, match="nests brackets"):
        check_nesting(f"// hidden{line_break} const Q = " + "(" * 5000 + "1.0" + ")" * 5000 + ";\n", SHADER)
    wgsl = (f"// hidden{line_break} var<workgroup> big: array<f32, 1000000>;\n"
            "@compute @workgroup_size(1) fn main() { big[0] = 1.0; }\n")
    assert workgroup_storage(wgsl, "main") == {"big": 4_000_000}
    hidden = "var\u200e<workgroup> big: array<f32, 1000000>;\n@compute @workgroup_size(1) fn main() { big[0] = 1.0; }\n"
    assert workgroup_storage(hidden, "main") == {"big": 4_000_000}  # U+200E is blankspace


def test_else_if_chains_and_index_chains_count_as_depth():
    """The compiler nests each `else if` in the one before and each index in the expression before,
    though the brackets close: 10,000 `else if`s and 30,000 `[0]`s killed the process."""
    from webgpu_kernels.rendering import check_nesting

    for between in (" ", "/**/", "\u200e", "\n// x\n"):  # a comment and U+200E are blankspace to WGSL
        chain = "fn f(c: bool) {\n  if c {}" + f" else{between}if c {{}}" * 300 + "\n}\n"
        with pytest.raises(errors.TemplateSandboxError, match="else-if chain"):
            check_nesting(chain, SHADER)
    check_nesting("fn f(c: bool) {\n  if c {}" + " else if c {}" * 200 + "\n}\n", SHADER)
    # a chain inside the last link's block goes on as deep: 50 chains of 20, nested so, are 1,000 deep
    nested = "fn f(c: bool) {\n" + ("if c {}" + " else if c {}" * 20 + " else {\n") * 50 + "}\n" * 51
    with pytest.raises(errors.TemplateSandboxError, match="else-if chain"):
        check_nesting(nested, SHADER)
    # separate statements are separate chains, with or without a `;` between them
    check_nesting("fn f(c: bool) {\n" + "  if c { x = 1; } else if c { x = 2; } else if c {}\n" * 300 + "}\n", SHADER)
    with pytest.raises(errors.TemplateSandboxError, match="nests expressions"):
        check_nesting("fn f() {\n  let z = a" + "[0]" * 5000 + ";\n}\n", SHADER)
    check_nesting("fn f() {\n  let z = a" + "[0]" * 4 + " + b[c[d[0]]];\n}\n", SHADER)
    # an unrolled dot product's indexes are no chain, and 600 taps in one term pass
    check_nesting("fn f() {\n  let z = " + " + ".join(f"a[{i}] * b[{i}]" for i in range(600)) + ";\n}\n", SHADER)


def test_a_text_that_passed_the_depth_check_is_not_read_again(monkeypatch):
    """Every new plan renders, and a new shape mostly renders a text already checked: the check ran
    on each (a fifth of a new plan's host time on lavapipe). A text refused is refused every time."""
    from webgpu_kernels import rendering

    reads = []
    real = rendering._check_nesting
    monkeypatch.setattr(rendering, "_check_nesting", lambda wgsl, shader: (reads.append(shader), real(wgsl, shader)))
    fine = f"fn f() {{ let z = {time.time_ns()}.0; }}\n"  # a text no earlier test checked
    deep = f"// {time.time_ns()}\nconst Q = " + "(" * 5000 + "1.0" + ")" * 5000 + ";\n"
    for shader in ("a.wgsl.jinja", "b.wgsl.jinja"):
        rendering.check_nesting(rendering.RenderedWGSL(fine, ((0, shader, 1, True),)), shader)
        with pytest.raises(errors.TemplateSandboxError, match=f"{shader}.*nests brackets"):
            rendering.check_nesting(deep, shader)
    assert reads == ["a.wgsl.jinja", "a.wgsl.jinja", "b.wgsl.jinja"]


def test_the_depth_check_reads_numbers_and_comments_as_such():
    """A table of 4,096 negative literals is 4,096 short terms, and a comment of dashes no chain."""
    from webgpu_kernels.rendering import check_nesting

    check_nesting("const T = array<f32, 4096>(" + ", ".join(["-1.5e-3"] * 4096) + ");\n", SHADER)
    check_nesting("// " + "-" * 5000 + "\n/* " + "!" * 5000 + " */\nfn f() {}\n", SHADER)
    with pytest.raises(errors.TemplateSandboxError, match="at rendered line 3"):
        check_nesting("// a\n\nlet z = " + "-" * 5000 + "1.0;\n", SHADER)


def test_unclosed_block_comments_are_read_in_linear_time(write_package):
    """Every ``/*`` that no ``*/`` follows had been scanned to the end of the rendered text by the
    comment blanking before the depth checks: 90 KB of them took about 15 s after the render, outside
    its deadline (1 MiB, about half an hour). Unclosed, they are no comment: still checked as code."""
    from webgpu_kernels.rendering import check_nesting

    kernel = wk.load_kernel(demo_with_probe(write_package, template="{{ '/*;' * 30000 }}\n"))
    kernel.render(X)  # ';' ends each term: nothing here is too deep, so all of it is read
    # A hang guard, not a speed target: 1 MiB of them, checked in about a second, took the
    # quadratic blanking about half an hour; a child process, since one regular expression step
    # holds the interpreter and no thread could give up on it.
    probe = "from webgpu_kernels.rendering import check_nesting; check_nesting('/*;' * 350_000, 'x.wgsl')"
    subprocess.run([sys.executable, "-c", probe], check=True, timeout=60)
    check_nesting("/* a */ // b /*\n/* " + "-" * 5000 + " */ x;\n", SHADER)  # both kinds still blanked
    with pytest.raises(errors.TemplateSandboxError, match="at rendered line 2"):
        check_nesting("/* never closed;\n" + "-" * 5000 + "1.0;\n", SHADER)


def test_template_source_limit(write_package):
    root = demo_with_probe(write_package, template="// " + "x" * (256 * 1024) + "\n")
    with pytest.raises(errors.TemplateSandboxError) as info:
        wk.load_kernel(root).render(X)
    assert SHADER in str(info.value)


# --- huge, deep or many: refused by the limit that names them ------------------------------------------


def _refused(call, limit_text: str):
    """The library's error, saying which bound refused the input: a parse, walk or compile that ran
    unbounded first fails some other way (a RecursionError, a raw error) or never ends."""
    with pytest.raises(wk.KernelError, match=limit_text) as info:
        call()
    return info.value


def _load_text(tmp_path, text: str):
    root = tmp_path / "pkg"
    root.mkdir()
    (root / "manifest.json").write_text(text)
    (root / SHADER).write_text(DEMO_TEMPLATE)
    return lambda: wk.load_kernel(root)


@pytest.mark.parametrize("nesting", ["[" * 100_000 + "]" * 100_000, '{"a":' * 50_000 + "1" + "}" * 50_000],
                         ids=["lists", "objects"])
def test_deeply_nested_manifest_json(tmp_path, nesting):
    _refused(_load_text(tmp_path, nesting), "JSON nested too deeply")


def test_manifest_with_a_huge_integer(tmp_path):
    text = json.dumps(DEMO_MANIFEST).replace('"scale": 1.0', '"scale": ' + "9" * 5000)
    error = _refused(_load_text(tmp_path, text), "an integer of 5000 digits is beyond float64's range")
    assert "expected a number of at most 309 digits" in str(error) and "set_int_max_str_digits" not in str(error)


def test_manifest_with_huge_numbers_fails_at_load_or_at_the_call(write_package):
    manifest = copy.deepcopy(DEMO_MANIFEST)
    manifest["attributes"]["scale"] = 1e308 * 10  # json writes Infinity, which is not JSON: refused at load
    _refused(lambda: wk.load_kernel(write_package(manifest, {SHADER: DEMO_TEMPLATE})), "Infinity is not JSON")
    manifest["attributes"]["scale"] = 1.0
    manifest["tunables"]["WORKGROUP_SIZE"] = 1e300  # no caller could pass it: refused at load
    error = _refused(lambda: wk.load_kernel(write_package(manifest, {SHADER: DEMO_TEMPLATE})), "WORKGROUP_SIZE")
    assert isinstance(error, errors.ManifestError) and error.json_path == "tunables.WORKGROUP_SIZE"


def test_deeply_nested_manifest_value(write_package):
    manifest = copy.deepcopy(DEMO_MANIFEST)
    nested: object = 1
    for _ in range(5000):
        nested = [nested]
    manifest["attributes"]["scale"] = nested
    # the depth check, or (where something raised the recursion limit) the schema at the value
    _refused(lambda: parse_manifest(manifest), "nested too deeply to validate|^attributes\\.scale\\[0\\]")


def test_huge_strings_in_a_manifest(write_package, tmp_path):
    manifest = copy.deepcopy(DEMO_MANIFEST)
    manifest["derive"]["n"] = "numel(shapes.X)" + " + 0" * 100_000
    error = _refused(lambda: wk.load_kernel(write_package(manifest, {SHADER: DEMO_TEMPLATE})), str(MAX_SEQUENCE_LENGTH))
    assert isinstance(error, errors.ExpressionSandboxError)
    manifest = copy.deepcopy(DEMO_MANIFEST)
    manifest["derive"]["n"] = "'" + "x" * 7_000_000 + "'"
    _refused(lambda: wk.load_kernel(write_package(manifest, {SHADER: DEMO_TEMPLATE})), "longer than 4096 characters")


def test_many_expressions_are_refused(write_package, monkeypatch):
    """Refused before any is compiled (compiling 2,048 to find the 2,049th took seconds)."""
    manifest = copy.deepcopy(DEMO_MANIFEST)
    for i in range(3_000):  # past MAX_EXPRESSIONS (2048), inside the manifest value bound
        manifest["constants"][f"c{i}"] = f"{i} + 1"
    root = write_package(manifest, {SHADER: DEMO_TEMPLATE})
    compiled = []
    real_compile = ExpressionCompiler.compile
    monkeypatch.setattr(ExpressionCompiler, "compile", lambda self, *a, **k: compiled.append(a) or real_compile(self, *a, **k))
    error = _refused(lambda: wk.load_kernel(root), "more than 2048 distinct expressions")
    assert isinstance(error, errors.ExpressionSandboxError)
    assert compiled == []


@pytest.mark.parametrize("source", ["(" * 3000 + "1" + ")" * 3000, "-" * 4000 + "1", "[" * 1500 + "]" * 1500,
                                    "not " * 1000 + "1", "a" * 4097],
                         ids=["parens", "minus", "lists", "not", "long"])  # fmt: skip
def test_deep_or_long_expressions_are_refused(source):
    error = _refused(lambda: ExpressionCompiler(()).compile(source, "derive.x"),
                     "longer than 4096 characters|nested more than 32 levels deep")
    assert isinstance(error, errors.ExpressionSandboxError)
    assert error.where == "derive.x"


def test_package_outside_any_folder_cannot_read_files(tmp_path):
    package = KernelPackage(root=tmp_path, origin="local")
    with pytest.raises(errors.PackageError):
        package.read_text("../../etc/passwd")


@pytest.mark.parametrize(
    "name, source, error",
    [("ok.wgsl.jinja", "{% for i in range(3) %}{{ i }}{% endfor %}", None),
     ("ext.wgsl.jinja", "{% extends 'ok.wgsl.jinja' %}", errors.TemplateSandboxError),
     ("self.wgsl.jinja", "{{ self }}", errors.TemplateSandboxError),
     ("bad'name.wgsl.jinja", "x", errors.TemplateSandboxError),
     ("syntax.wgsl.jinja", "{% for %}", errors.TemplateError),
     ("missing.wgsl.jinja", None, errors.TemplateError)],
)  # fmt: skip
def test_renderer_check_compiles_without_rendering(name, source, error):
    from webgpu_kernels.rendering import TemplateRenderer

    def read(file: str) -> str:
        if source is None:
            raise errors.PackageError("no such file", path=file)
        return source

    renderer = TemplateRenderer(read)
    if error is None:
        renderer.check(name)
        return
    with pytest.raises(error) as info:
        renderer.check(name)
    assert info.value.file == name


def _with_passes(count: int) -> dict:
    """The demo manifest whose vec4 variant runs its one pass ``count`` times (pass ids main0...)."""
    manifest = copy.deepcopy(DEMO_MANIFEST)
    vec4 = manifest["variants"][0]
    vec4["passes"] = [{**copy.deepcopy(vec4["passes"][0]), "id": f"main{i}"} for i in range(count)]
    return manifest


def test_the_passes_of_one_call_share_one_render_budget(write_package):
    """Each pass had a budget of its own, so many passes over one slow template took that many
    budgets. A template using 60% of the work budget renders once, not twice per call."""
    heavy = "{% for i in range(100000) %}{% endfor %}" * 3 + "\n"  # an empty iteration costs 1 unit: 300,000
    one = wk.load_kernel(write_package(_with_passes(1), {SHADER: heavy + DEMO_TEMPLATE}))
    assert list(one.render({"X": wk.TensorMeta((8,), "float32")})) == ["main0"]
    two = wk.load_kernel(write_package(_with_passes(2), {SHADER: heavy + DEMO_TEMPLATE}))
    with pytest.raises(errors.TemplateSandboxError, match="more than 500000 units of work"):
        two.render({"X": wk.TensorMeta((8,), "float32")})


def test_a_package_loads_a_bounded_amount_of_template_source(write_package):
    """Compiling grows with the source and runs outside the render deadline: templates are held to
    64 KiB each and 256 KiB together."""
    from webgpu_kernels.templates import MAX_PACKAGE_TEMPLATE_BYTES, MAX_TEMPLATE_BYTES

    padding = "{# " + "x" * (MAX_TEMPLATE_BYTES - len(DEMO_TEMPLATE) - 200) + " #}\n"
    manifest = _with_passes(5)
    templates = {}
    for i, p in enumerate(manifest["variants"][0]["passes"]):
        p["shader"] = f"t{i}.wgsl.jinja"
        templates[p["shader"]] = padding + DEMO_TEMPLATE
    assert 4 * len(padding + DEMO_TEMPLATE) <= MAX_PACKAGE_TEMPLATE_BYTES < 5 * len(padding + DEMO_TEMPLATE)
    kernel = wk.load_kernel(write_package(manifest, templates))
    with pytest.raises(errors.TemplateSandboxError, match="templates hold more than 262144 bytes together") as info:
        kernel.render({"X": wk.TensorMeta((8,), "float32")})
    assert info.value.file == "t4.wgsl.jinja"


#: A tuple of 2^16 leaves by reference (`(t, t)` 16 times; the review's 40 times rendered until killed).
NESTED_TUPLE = "{% set t = (0,) %}" + "{% set t = (t, t) %}" * 16


@pytest.mark.parametrize("call", ["t|wgsl_float", "t|wgsl_uint", "1.0|wgsl_float(t)", "1.5|round(t)",
                                  "1.5|round(0, t)", "[1][s]"])  # fmt: skip
def test_a_filter_quotes_a_huge_argument_by_a_bounded_text(call):
    """wgsl_float and wgsl_uint repr()'d the value whole into their message: `(t, t)` 40 times
    then `t|wgsl_float` built text of 2^40 leaves, never charged to the render budget (review,
    f4); round() built 1 MiB of text to quote 40 characters and hashed its method whole; `[1][s]`
    quoted all of a 1 MiB key."""
    template, key = TemplateSandbox().from_string(NESTED_TUPLE + "{{ " + call + " }}"), "k" * MAX_RENDERED_BYTES
    # rendered outside the library: the filters' ValueError, or Jinja's own classes
    refusals = (ValueError, jinja2.exceptions.TemplateRuntimeError)
    with pytest.raises(refusals):  # once untraced: a first call's lazy setup in this process is no quote (the H100
        template.render(s=key)     # machine's Python 3.12.3 peaked at 0.3 MiB on a worker's first wgsl_float refusal)
    tracemalloc.start()
    try:
        with pytest.raises(refusals) as info:
            template.render(s=key)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    message = str(info.value)
    assert len(message) < 200 and ("(tuple)" in message or "'kkk" in message), f"{len(message)} characters"
    assert peak < 256 * 1024, f"{peak / 2**20:.1f} MiB allocated for a 40-character quote"


def test_trim_with_characters_takes_linear_time():
    """str.strip(chars) scans chars for each character it strips: 131,072 emoji stripped by
    131,072 other characters and that emoji took 45 s in one step, past the render deadline
    (review, f5; 65,536 took 7 s of CPU). str.strip is now given at most 64 distinct characters
    (64 comparisons a character stripped: the 65,536 here are 2), more are looked up in a set."""
    from webgpu_kernels import template_filters

    emoji, other = "\U0001f600", "\U0001f601"
    template = TemplateSandbox().from_string("{{ s|trim(c)|length }},{{ ('ab' ~ s ~ 'ba')|trim(c ~ 'ab') }}")
    text, chars = emoji * 65536, other * 65535 + emoji
    assert template.render(s=text, c=chars) == "0,"

    class Text(str):  # what str.strip is asked to scan for each character it strips
        scanned: list[int] = []

        def strip(self, chars=None):
            Text.scanned.append(len(chars or ""))
            return str(self).strip(chars)

    assert template_filters._strip(Text(text), chars) == ""
    hundred = "".join(chr(0x4E00 + i) for i in range(100))
    assert template_filters._strip(Text(hundred + "mid"), hundred) == "mid"
    assert Text.scanned == [2]  # the 65,536 as their 2 distinct characters; the 100 went to a set
    # as str.strip does, with few characters (str.strip itself) and with many (a set)
    many = "".join(chr(0x4E00 + i) for i in range(100))
    for value, strip in [("xxabcxx", "x"), ("  a b  ", " "), ("abc", ""), ("ab\u00e9cba", "ba"), ("", "ab"),
                         (many[:5] + "mid" + many[-5:], many), ("mid", many), (many, many + "x")]:  # fmt: skip
        assert TemplateSandbox().from_string("{{ v|trim(c) }}").render(v=value, c=strip) == value.strip(strip)


def test_an_include_of_many_names_is_charged_per_name(write_package):
    """`{% include names %}` tries each name of a list; 100,000 names of 200 characters took 20 s,
    none of it charged to the render's budget. Each attempt is charged now."""
    kernel = wk.load_kernel(demo_with_probe(write_package, template="{% include ['a' * 200] * 100000 %}\n"))
    with pytest.raises(errors.TemplateSandboxError, match="units of work"):
        kernel.render(X)
    # a short list still works: the first name that exists is included
    template = "{% include ['missing.wgsl.jinja', 'helper.wgsl.jinja'] %}\n" + DEMO_TEMPLATE
    root = write_package(copy.deepcopy(DEMO_MANIFEST), {SHADER: template, "helper.wgsl.jinja": "// the helper\n"})
    assert "// the helper" in wk.load_kernel(root).render(X)["main"]
    # a file Jinja loaded once is not charged again: a helper included in a loop of 2,000
    template = "{% for i in range(2000) %}{% include 'helper.wgsl.jinja' %}{% endfor %}\n" + DEMO_TEMPLATE
    root = write_package(copy.deepcopy(DEMO_MANIFEST), {SHADER: template, "helper.wgsl.jinja": "// h\n"})
    assert wk.load_kernel(root).render(X)["main"].count("// h") == 2000


def test_nested_block_comments_and_line_broken_index_chains_hide_nothing():
    """WGSL's block comments nest: `/* /* */ // */ code` is one comment then code, which the checks
    had read as a comment ending at the first `*/` and a line comment hiding `code`; and a line
    break between two indexes had hidden their chain (helper-19: both crashed the compiler)."""
    from webgpu_kernels.rendering import check_nesting

    deep = "let z = " + "(" * 5000 + "1.0" + ")" * 5000 + ";"
    with pytest.raises(errors.TemplateSandboxError, match="nests brackets"):
        check_nesting("fn f() {\n  /* /* */ // */ " + deep + "\n}\n", SHADER)
    check_nesting("fn f() {\n  /* /* " + deep + " */ */\n}\n", SHADER)  # all of it a comment
    with pytest.raises(errors.TemplateSandboxError, match="nests expressions"):
        check_nesting("fn f() {\n  let z = a" + "[0]\n" * 5000 + ";\n}\n", SHADER)


def test_flat_wgsl_the_compiler_recurses_on_compiles_on_the_deep_stack(tmp_path):
    """No bracket or operator is deep in 40,000 functions each calling the next (1 MB), yet the
    compiler's recursion over them killed the process on an 8 MiB stack. Pipelines are
    built on a thread with a 512 MiB stack (deep_stack.py); the crash was in the module's parse,
    which is all this builds (lavapipe takes a minute to make a pipeline of it). In a child: a
    regression must not kill the suite."""
    code = "".join(f"fn f{i}() {{ f{i + 1}(); }}\n" for i in range(40_000)) + \
        "fn f40000() {}\n@compute @workgroup_size(1) fn main() { f0(); }\n"
    (tmp_path / "chain.wgsl").write_text(code, "utf-8")
    child = ("import sys, wgpu\nfrom webgpu_kernels.deep_stack import on_deep_stack\n"
             "gpu = wgpu.utils.get_default_device()\ncode = open(sys.argv[1]).read()\n"
             "on_deep_stack(lambda: gpu.create_shader_module(code=code))\nprint('built')\n")  # fmt: skip
    result = subprocess.run([sys.executable, "-c", child, str(tmp_path / "chain.wgsl")], capture_output=True,
                            text=True, timeout=300)  # fmt: skip
    assert result.returncode == 0 and "built" in result.stdout, (result.returncode, result.stderr[-2000:])


def test_the_deep_stack_hands_back_results_and_errors_and_nests():
    from webgpu_kernels.deep_stack import on_deep_stack

    assert on_deep_stack(lambda: 7) == 7
    with pytest.raises(ZeroDivisionError):
        on_deep_stack(lambda: 1 // 0)
    assert on_deep_stack(lambda: on_deep_stack(lambda: 8)) == 8  # a call from its own thread runs there


@pytest.mark.parametrize("line_break", ["\\n", "\\r", "\\r\\n", "\\x0b", "\\x0c", "\\x1c", "\\x1d", "\\x1e", "\\x85",
                                        "\\u2028", "\\u2029"])  # fmt: skip
def test_indent_counts_every_line_break_it_splits_at(line_break):
    """indent splits its text with str.splitlines, which breaks at \\r, \\x85, U+2028 ... too, but
    its bound counted only \\n: `('a\\r' * 300000)|indent(448000)` passed it as one line and built
    134 GB of text. Every line break is counted now, before anything is built."""
    template = TemplateSandbox().from_string("{{ ('a" + line_break + "' * 20000)|indent(2000, true, true) }}")
    tracemalloc.start()
    try:
        with pytest.raises(SecurityError, match="indent would build"):
            template.render()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 8 * 2**20, f"{peak / 2**20:.0f} MiB built before the bound refused it"
    # a text within the bound is indented as Jinja does it
    text = TemplateSandbox().from_string("{{ ('a" + line_break + "' * 3)|indent(2) }}").render()
    assert text.count("  a") == 2


@pytest.mark.parametrize("use", ["({}.keys() - [t])|length", "({'a': t}.items() - [])|length",
                                 "{'a': t}.items() == {'a': s}.items()", "{'a': t}.values() is eq({'a': s}.values())",
                                 "{'a': t}.items() is in([{'a': s}.items()])"])  # fmt: skip
def test_a_dicts_keys_items_and_values_are_lists_bounded_as_lists(use):
    """keys() and items() had been dict views: their set algebra (`d.keys() - [t]`) hashed every
    leaf of `t` and comparing two views compared every leaf, in one step past the render's budget
    and deadline, since a comparison's bound counted no view (`(t, t)` 40 times: 2^40 leaves, hours;
    helper-118). They are lists now: `-` of lists is no operator, and a comparison is bounded."""
    chain = "{% set s = (0,) %}" + "{% set s = (s, s) %}" * 16
    template = TemplateSandbox().from_string(NESTED_TUPLE + chain + "{{ " + use + " }}")
    with pytest.raises((SecurityError, TypeError)):  # rendered outside the library: Python's and Jinja's classes
        template.render()
    listed = "{% set d = {'a': 1, 'b': 2} %}{{ d.keys()|list }} {{ d.items()|list }} {{ d.values()|list }} {{ 'a' in d.keys() }}"
    assert TemplateSandbox().from_string(listed).render() == "['a', 'b'] [('a', 1), ('b', 2)] [1, 2] True"


def test_the_lists_a_dicts_methods_build_are_charged():
    """items(), keys() and values() build a list each call (they had been views): charged per item,
    as the list filter charges one, so that lists held in recursing macros' frames count."""
    from webgpu_kernels.sandbox import render_budget

    template = TemplateSandbox().from_string("{% for i in range(200) %}{{ d.items()|length }}{% endfor %}")
    with render_budget(RenderBudget(text_limit=1000)), pytest.raises(SecurityError, match="characters of text"):
        template.render(d={str(i): i for i in range(10)})


@pytest.mark.parametrize("digits", [40, 5000])
def test_a_huge_integer_literal_is_refused_in_the_sandboxs_words(digits):
    """A literal past Python's 4,300 digits failed in Jinja's lexer with Python's own advice ("use
    sys.set_int_max_str_digits() to increase the limit"), which a package author cannot follow; it is
    refused as a shorter one past 128 bits is."""
    with pytest.raises(SandboxViolation, match="an integer literal of more than 128 bits") as info:
        TemplateSandbox().from_string("{{ " + "1" * digits + " }}")
    assert "set_int_max_str_digits" not in str(info.value)


# --- coverage audit: the bounded sandbox's refusals in a template, rendered directly ------


@pytest.mark.parametrize(("source", "error", "message"), [
    ("{{ bindingList[1.5] }}", errors.TemplateSandboxError, "a list cannot be indexed by a float"),
    ("{{ bindingList[true] }}", errors.TemplateSandboxError, "a list cannot be indexed by a bool"),
    ("{{ 'abc'[none] }}", errors.TemplateSandboxError, "a str cannot be indexed by none"),
    ("{{ 5[0] }}", errors.TemplateSandboxError, "an int cannot be indexed here"),
    ("{{ 5['a'] }}", errors.TemplateSandboxError, "attribute 'a' of an int is not accessible here"),
    ("{{ bindingList[0:1:2.5] }}", errors.TemplateSandboxError, "integers or left out, not a float"),
    ("{{ 5[0:1] }}", errors.TemplateSandboxError, "can be sliced, not an int"),
    ("{% set f = 5 %}{{ f() }}", errors.TemplateSandboxError, "calling an int is not allowed here"),
    ("{{ 'abc' is odd }}", errors.TemplateSandboxError, "the test 'odd' takes numbers, got a str"),
    ("{{ range(2, 7 is odd) }}", errors.TemplateSandboxError, "range() takes integers, got a bool"),
    ("{{ bindings.x() }}", errors.TemplateSandboxError, "calling a dict is not allowed here"),
    ("{{ bindingList() }}", errors.TemplateSandboxError, "calling a list is not allowed here"),
    ("{% for c in 'a' * 100001 %}{% endfor %}", errors.TemplateSandboxError, "a loop of more than 100000 iterations"),
    ("{{ [('a' * 1000)] * 1045 }}", errors.TemplateSandboxError,
     "converting a list to text exceeds the limit of 1048576 characters"),
    ("{{ (0 - 1) ** 0.5 }}", errors.TemplateSandboxError, "complex numbers are not values here"),
    ("{% set c = (0 - 4) ** 0.5 %}", errors.TemplateSandboxError, "complex numbers are not values here"),
    ("{{ ('a' * 100001)|list }}", errors.TemplateSandboxError, "a string of 100001 characters exceeds the limit of 100000 items"),
    ("{{ ('a' * 100001)|join(',') }}", errors.TemplateSandboxError, "a string of 100001 characters exceeds the limit"),
    ("{{ nope|list }}", errors.TemplateError, "'nope' is undefined"),
    ("{{ bindingList[5] }}", errors.TemplateError, "list object has no element 5"),
    ("{{ range(3)[7] }}", errors.TemplateError, "range object has no element 7"),
    ("{{ nope[1:2] }}", errors.TemplateError, "'nope' is undefined"),
    ("{% for x in nope %}{% endfor %}", errors.TemplateError, "'nope' is undefined"),
])  # fmt: skip
def test_a_templates_refused_index_call_loop_or_value_is_named(source, error, message):
    with pytest.raises(error) as info:
        render_template("// one\n" + source)
    assert message in str(info.value) and info.value.line == 2
    assert not any(marker in str(info.value) for marker in LEAK_MARKERS)
    if error is errors.TemplateError:  # a plain template mistake, not a refusal by the sandbox
        assert not isinstance(info.value, errors.TemplateSandboxError)


def test_the_sandboxs_bounds_let_through_what_is_just_within_them():
    assert render_template("{% for c in 'a' * 100000 %}{% endfor %}done") == "done"
    assert render_template("{{ ('a' * 100000)|list|length }}") == "100000"
    assert len(render_template("{{ [('a' * 1000)] * 1044 }}")) == len(str(["a" * 1000] * 1044))
    assert render_template("{{ range(3) ~ 'x' }} {{ bindingList[0].name }} {{ 'abc'[2] }} {{ 4 ** 0.5 }}") == \
        "range(0, 3)x x c 2.0"


# --- each bound's own refusal, with operands just past it (mutation audit) ---------------------------------


def _evaluate(source: str):
    return ExpressionCompiler(()).compile(source, "derive.x").evaluate(dict(STATIC_FUNCTIONS))


@pytest.mark.parametrize(("source", "said"), [
    ("'ab' * 2049", "repeating a sequence of 2 items 2049 times exceeds the limit of 4096"),
    ("2049 * [0, 1]", "repeating a sequence of 2 items 2049 times exceeds the limit of 4096"),
    ("'a' * 3000 + 'b' * 3000", "joining sequences of 3000 and 3000 items exceeds the limit of 4096"),
    ("[0] * 3000 + [1] * 3000", "joining sequences of 3000 and 3000 items exceeds the limit of 4096"),
    ("2 ** 129", "exponent 129 exceeds the limit of 128"),
    ("4 ** 66", "the power exceeds the limit of 128 bits"),  # 2 * 66 = 132 bits, from a small exponent
    ("'%s' % 1", "string formatting with % is not allowed"),
])  # fmt: skip
def test_an_operator_past_a_bound_is_refused_before_it_computes(source, said):
    """The refusal is the operator's check, made before computing: a result's own bound says "a string of
    4098 characters exceeds ...", once it is built (a precheck skipped for one operator let `'A' * 10**8`
    and `10 ** 10**8` be computed first: the tests that tried them only ran out of time)."""
    with pytest.raises(errors.ExpressionSandboxError) as info:
        _evaluate(source)
    assert str(info.value).endswith(f"refused by the sandbox: {said}"), str(info.value)


def test_an_operator_just_within_its_bound_computes():
    assert _evaluate("'ab' * 2048") == "ab" * 2048
    assert _evaluate("[0] * 2048 + [1] * 2048") == [0] * 2048 + [1] * 2048
    assert _evaluate("2 ** 127") == 2**127 and _evaluate("4 ** 63") == 4**63


def test_each_call_a_template_makes_is_charged_32_units():
    """A call costs 32 units (docs/security.md) beyond its loop iteration's weight (which is the same taken
    or not): the work of 50 calls made is 50 * 32 more than of none, same template, same iterations."""
    from webgpu_kernels.sandbox import render_budget

    template = TemplateSandbox().from_string(
        "{% for i in range(60) %}{% if i < k %}{{ range(0)|length }}{% endif %}{% endfor %}")

    def work(calls: int) -> int:
        with render_budget(RenderBudget()) as budget:
            assert template.render(k=calls) == "0" * calls
        return budget.work

    assert work(50) - work(0) == 50 * 32


@pytest.mark.parametrize(("built", "chars"), [("x ~ x", 200), ("x + x", 200), ("x[1:]", 99)])
def test_text_a_template_builds_and_never_writes_is_charged_to_its_render(built, chars):
    """A `~` join, a `+` and a slice each build a copy, charged to the render's text budget though it is
    never written: 5 copies and the 4 characters written fit a budget of exactly that, a 6th does not."""
    from webgpu_kernels.sandbox import render_budget

    template = TemplateSandbox().from_string("{% for i in range(n) %}{% set s = " + built + " %}{% endfor %}done")
    with render_budget(RenderBudget(text_limit=5 * chars + 4)):
        assert template.render(n=5, x="a" * 100) == "done"
    with render_budget(RenderBudget(text_limit=5 * chars + 4)), \
            pytest.raises(SandboxViolation, match=f"^the template builds more than {5 * chars + 4} characters"):
        template.render(n=6, x="a" * 100)


def test_a_macros_returned_text_is_bounded_as_a_value():
    """What a call returns is checked as any value is: a macro's 1.2 MB of text is not a string a
    template may hold (1 MiB), though each piece it wrote was within the bound."""
    with pytest.raises(errors.TemplateSandboxError) as info:
        render_template("{% macro m() %}{% for i in range(2) %}{{ 'a' * 600000 }}{% endfor %}{% endmacro %}"
                        "{% set s = m() %}{{ s|length }}")
    assert str(info.value) == ("main.wgsl.jinja:1: refused by the sandbox: a string of 1200000 characters exceeds "
                               "the limit of 1048576"), str(info.value)


_A_LIST = "'" + "a" * 100 + "'"


@pytest.mark.parametrize(("source", "said"), [
    # a key is hashed (every item of a tuple nested by reference) before it is looked up or stored: (a, a)
    # is 200,001 items, and ((a, a), (a, a)) doubles it with each level of a literal
    ("{% set a = (0,) * 100000 %}{{ bindings[(a, a)] }}",
     "refused by the sandbox: looking up values of more than 100000 items in all (nested lists count every item)"),
    ("{% set a = (0,) * 100000 %}{{ {(a, a): 1} }}",
     "refused by the sandbox: hashing values of more than 100000 items in all (nested lists count every item)"),
    # a string index of a list or string is an attribute, refused as such; a long name is quoted in 60 characters
    ("{{ bindingList['name'] }}", "refused by the sandbox: attribute 'name' of a list is not accessible here"),
    ("{{ 'abc'['upper'] }}", "refused by the sandbox: attribute 'upper' of a str is not accessible here"),
    (f"{{{{ bindingList[{_A_LIST}] }}}}",
     f"refused by the sandbox: attribute {repr('a' * 100)[:57]}... of a list is not accessible here"),
    # a missing key: a long string cut to 60 characters, a tuple named by its type
    (f"{{{{ bindings[{_A_LIST}] }}}}", f"UndefinedError: 'dict object' has no attribute '{'a' * 57}...'"),
    ("{{ {(1, 2): 4}[(1, 3)] }}", "UndefinedError: 'dict object' has no attribute '<tuple>'"),
])  # fmt: skip
def test_a_templates_key_or_index_is_bounded_and_named_in_few_words(source, said):
    message = refusal_of(source)
    assert message == f"main.wgsl.jinja:1: {said}", message


# --- the loop variable is read by its attributes, never iterated -----------------------------------------

_LOOP_ITERATED = ("the loop variable cannot be iterated: its items are the rest of the loop's, which iterating "
                  "would take, ending the loop early; read its attributes instead, as in loop.index, "
                  "loop.length, loop.last, loop.nextitem")  # fmt: skip


@pytest.mark.parametrize("use", [
    "{{ loop|list }}", "{{ loop|join(',') }}", "{{ loop|first }}", "{{ loop|last }}", "{{ loop|max }}",
    "{{ loop|min }}", "{{ loop|list|length }}", "{% for x in loop %}{{ x }}{% endfor %}", "{{ 2 in loop }}",
    "{{ 2 not in loop }}", "{{ 2 is in(loop) }}", "{% set a, b = loop %}",
    "{% macro m(a, b) %}{% endmacro %}{{ m(*loop) }}",
    # a filter's or test's *args, a for's tuple target and a nested tuple target unpack it too
    "{{ 1|default(*loop) }}", "{{ 1 is sameas(*loop) }}", "{% filter default(*loop) %}x{% endfilter %}",
    "{% for a, b in [loop] %}{% endfor %}", "{% for (a, b), c in [(loop, 1)] %}{% endfor %}",
    "{% set (a, b), c = [loop, 1] %}", "{% set a, (b, c) = [1, loop] %}",
])  # fmt: skip
@pytest.mark.parametrize("items", ["range(4)", "[1]"])  # on the last iteration, none is left: `loop|list` was []
def test_iterating_the_loop_variable_is_a_template_error_at_its_line(use, items):
    """`loop|list` rendered [] on a loop's last iteration (Jinja's loop object iterates over the items
    the loop has left), `2 in loop` False, and elsewhere it ended the loop early or was refused as
    "the loop variable cannot be converted to text", a conversion the template never wrote."""
    with pytest.raises(errors.TemplateError) as info:
        render_template(f"// one\n{{% for i in {items} %}}\n{use}\n{{% endfor %}}")
    assert not isinstance(info.value, errors.TemplateSandboxError)  # a mistake, not a refusal
    assert str(info.value) == f"main.wgsl.jinja:3: {_LOOP_ITERATED}", str(info.value)


@pytest.mark.parametrize("use", ["{% with a, b = loop %}{% endwith %}", "{% with (a, b), c = [loop, 1] %}{% endwith %}"])
def test_a_with_blocks_tuple_target_does_not_iterate_the_loop_variable(use):
    """`{% with a, b = loop %}` had taken the loop's next two items and ended it."""
    with pytest.raises(errors.TemplateError) as info:
        render_template(f"{{% for i in range(4) %}}{use}{{% endfor %}}")
    assert not isinstance(info.value, errors.TemplateSandboxError)
    assert str(info.value) == f"main.wgsl.jinja:1: {_LOOP_ITERATED}", str(info.value)


def test_the_loop_variables_length_is_read_without_iterating_it():
    """`loop|length` had iterated the loop's remaining items: 3 of range(4), and the loop ended there."""
    source = "{% for i in range(4) %}[{{ loop|length }} {{ loop.length }} {{ loop.index }}]{% endfor %}"
    assert render_template(source) == "[4 4 1][4 4 2][4 4 3][4 4 4]"
    assert render_template("{% for i in range(3) %}{{ loop is iterable }}{% if loop.last %}.{% endif %}{% endfor %}") \
        == "TrueTrueTrue."  # (a test that only asks for an iterator takes no item)


@pytest.mark.parametrize(("source", "said"), [
    ("{{ range|round }}", "type function doesn't define __round__ method (range is a function: call it, as in "
                          "range(n))"),
    ("{{ bindings.items|round }}", "type method doesn't define __round__ method (a dict's items, keys and values "
                                   "are methods: call them, as in d.items())"),
    ("{{ range * loop }}", None),
    # Python quotes the class in double quotes here: the hint had been dropped for the loop variable
    ("{{ [1] + range }}", 'can only concatenate list (not "function") to list (range is a function: call it, as in '
                          'range(n))'),
    ("{% for i in [1] %}{{ [1] + loop }}{% endfor %}", 'can only concatenate list (not "LoopContext") to list '
                                                       '(LoopContext is the loop variable: read its attributes, as in '
                                                       'loop.index)'),
    ("{{ range(*range) }}", "Value after * must be an iterable, not function (range is a function: call it, as in "
                            "range(n))"),
    ("{% macro tile() %}{% endmacro %}{{ 'a' + tile }}", 'can only concatenate str (not "Macro") to str (Macro is a '
                                                         'macro: call it, as in name(), for the text it renders)'),
])  # fmt: skip
def test_one_table_names_the_librarys_and_jinjas_classes_in_pythons_type_errors(source, said):
    """Python's "type function doesn't define __round__ method" had been left without the hint: only
    the quoted class name ('function') was looked for, where Jinja's classes were found by any mention."""
    if said is None:  # range and the loop variable in one message: both told, in one parenthesis
        source = "{% for i in [1] %}" + source + "{% endfor %}"
        said = ("unsupported operand type(s) for *: 'function' and 'LoopContext' (range is a function: call it, "
                "as in range(n); LoopContext is the loop variable: read its attributes, as in loop.index)")
    message = refusal_of(source)
    assert message == f"main.wgsl.jinja:1: TypeError: {said}", message


@pytest.mark.parametrize(("source", "rendered"), [
    ("{% set a, b = [1, 2] %}{{ a }}{{ b }}", "12"),
    ("{% set (a, b), c = [(1, 2), 3] %}{{ a }}{{ b }}{{ c }}", "123"),
    ("{% set a, (b, c) = [1, 'xy'] %}{{ a }}{{ b }}{{ c }}", "1xy"),
    ("{% macro m() %}{% set a, b = [1, 2] %}{{ a }}{{ b }}{% endmacro %}{{ m() }}", "12"),
    ("{% with a, b = [1, 2] %}{{ a }}{{ b }}{% endwith %}", "12"),
    ("{% with (a, b), c = [(1, 2), 3], d = 4 %}{{ a }}{{ b }}{{ c }}{{ d }}{% endwith %}", "1234"),
    ("{% for a, b in [(1, 2), (3, 4)] %}{{ a }}{{ b }}{% endfor %}", "1234"),
    ("{% for (a, b), c in [((1, 2), 3), ((4, 5), 6)] %}{{ a }}{{ b }}{{ c }}{% if not loop.first %}{{ loop.previtem }}{% endif %}|"
     "{% endfor %}", "123|456((1, 2), 3)|"),
    ("{% for i in range(2) %}{% set a, b = [i, loop.index] %}{{ a }}{{ b }}{% endfor %}", "0112"),
    ("{% for a, b in {'x': 1}.items() %}{{ a }}{{ b }}{% endfor %}", "x1"),
])  # fmt: skip
def test_tuple_targets_unpack_as_python_does_where_no_loop_variable_is_in_them(source, rendered):
    """What the check of the loop variable adds to a tuple target's unpacking leaves every other
    value's unpacking as it was: nested targets, {% with %}, for targets, in macros and loops."""
    assert render_template(source) == rendered


@pytest.mark.parametrize(("source", "said"), [
    ("{% set a, b = [1, 2, 3] %}", "ValueError: too many values to unpack (expected 2)"),
    ("{% set (a, b), c = [(1, 2, 3), 4] %}", "ValueError: too many values to unpack (expected 2)"),
    ("{% set (a, b), c = [(1,), 4] %}", "ValueError: not enough values to unpack (expected 2, got 1)"),
    ("{% for (a, b), c in [(1, 2)] %}{% endfor %}", "TypeError: cannot unpack non-iterable int object"),
])  # fmt: skip
def test_a_tuple_target_that_does_not_fit_is_pythons_error(source, said):
    message = refusal_of(source)
    assert message == f"main.wgsl.jinja:1: {said}", message


_NOT_A_MAPPING = "the argument after ** must be a mapping of keyword arguments, not"
_TWICE = "the keyword argument 'a' is given twice, by name and in the mapping after **"


@pytest.mark.parametrize(("source", "said"), [
    ("{% macro m(a) %}{% endmacro %}{{ m(**[1]) }}", f"the macro m: {_NOT_A_MAPPING} a list"),
    ("{% macro m(a) %}{% endmacro %}{% for i in [1] %}{{ m(**loop) }}{% endfor %}",
     f"the macro m: {_NOT_A_MAPPING} the loop variable (read its attributes, as in loop.index)"),
    ("{% macro m(a) %}{% endmacro %}{{ m(1, *[], **range) }}",
     f"the macro m: {_NOT_A_MAPPING} the function range (call it, as in range(n))"),
    ("{% macro m(a) %}{% endmacro %}{% call m(**'a') %}{% endcall %}", f"the macro m: {_NOT_A_MAPPING} a str"),
    ("{% import 'lib.wgsl.jinja' as lib %}{{ lib.load(**none) }}", f"the macro load: {_NOT_A_MAPPING} none"),
    ("{{ range(**[1]) }}", f"the function range: {_NOT_A_MAPPING} a list"),
    ("{{ bindings.items(**1) }}", f"the method items: {_NOT_A_MAPPING} an int"),
    ("{{ 1|default(**[1]) }}", f"the filter 'default': {_NOT_A_MAPPING} a list"),
    ("{% filter default(**[1]) %}x{% endfilter %}", f"the filter 'default': {_NOT_A_MAPPING} a list"),
    ("{{ 1 is sameas(**[1]) }}", f"the test 'sameas': {_NOT_A_MAPPING} a list"),
    ("{% macro m(a) %}{% endmacro %}{{ m(a=1, **{'a': 2}) }}", f"the macro m: {_TWICE}"),
    ("{% macro m(a) %}{% endmacro %}{% call m(a=1, **{'b': 0, 'a': 2}) %}{% endcall %}", f"the macro m: {_TWICE}"),
    ("{{ range(a=1, **{'a': 2}) }}", f"the function range: {_TWICE}"),
    ("{{ 1|default(a=1, **{'a': 2}) }}", f"the filter 'default': {_TWICE}"),
    ("{{ 1 is sameas(a=1, **{'a': 2}) }}", f"the test 'sameas': {_TWICE}"),
])  # fmt: skip
def test_a_double_star_mistake_is_told_with_what_the_template_called(source, said):
    """Python's "argument after ** must be a mapping, not list" and "got multiple values for keyword
    argument" named the function they were passed to: the sandbox's own call()
    (webgpu_kernels.sandbox.BoundedSandbox.call()) or a filter's function."""
    files = {"lib.wgsl.jinja": "{% macro load(i) %}x[{{ i }}]{% endmacro %}"}
    with pytest.raises(errors.TemplateError) as info:
        render_template("// one\n" + source, files)
    assert not isinstance(info.value, errors.TemplateSandboxError)  # a mistake, not a refusal
    assert str(info.value) == f"main.wgsl.jinja:2: {said}", str(info.value)
    assert "webgpu_kernels" not in str(info.value) and "BoundedSandbox" not in str(info.value)


@pytest.mark.parametrize(("source", "rendered"), [
    ("{% macro m(a, b=2) %}{{ a }}{{ b }}{% endmacro %}{{ m(**{'a': 1}) }}{{ m(0, **{'b': 3}) }}", "1203"),
    ("{% macro m(a) %}{{ a }}{{ caller() }}{% endmacro %}{% call m(**{'a': 1}) %}c{% endcall %}", "1c"),
    ("{% set d = {'default_value': 'x'} %}{{ nosuch|default(**d) }}{{ 1 is sameas(**{'other': 1}) }}", "xTrue"),
])  # fmt: skip
def test_a_mapping_after_double_star_gives_keyword_arguments(source, rendered):
    assert render_template(source) == rendered


def test_an_undefined_value_after_double_star_is_told_undefined():
    message = refusal_of("{% macro m(a) %}{% endmacro %}{{ m(**nosuch) }}")
    assert message == "main.wgsl.jinja:1: UndefinedError: 'nosuch' is undefined", message


@pytest.mark.parametrize(("source", "line", "said"), [
    ("{{ -2 ** 30 }}", 2, "a unary minus before ** applies to the base here"),
    ("x\n{% set a = 2 ** 3 ** 2 %}{{ a }}", 3, "a ** b ** c groups to the left here"),
    ("{% if 1 > -2 ** 8 %}x{% endif %}", 2, "write (-a) ** b or -(a ** b)"),
    ("{{ -{'a': 2}['a'] ** 2 }}", 2, "a unary minus before ** applies to the base here"),  # a dict literal's item
])  # fmt: skip
def test_a_power_jinja_reads_otherwise_than_python_is_refused_in_a_template(source, line, said):
    """A template's ** follows Jinja's grouping, not Python's: the ambiguous forms are refused at
    their line, and the parenthesised ones render Python's value."""
    message = refusal_of("// one\n" + source)
    assert message.startswith(f"main.wgsl.jinja:{line}: ") and said in message, message
    assert render_template("{{ (-2) ** 2 }} {{ -(2 ** 2) }} {{ 2 ** (3 ** 2) }} {{ 3 - 2 ** 2 }}") == "4 -4 512 -1"


@pytest.mark.parametrize(("source", "said"), [
    ("{{ -3|abs ** 2 }}", "a unary minus before ** applies to the base here"),
    ("{{ 1 - -3.7|round|int ** 2 }}", "a unary minus before ** applies to the base here"),
    ("{{ 2 ** 3|int ** 2 }}", "a ** b ** c groups to the left here"),
    ("{{ 2 ** 3|round(1)|int ** 2 }}", "a ** b ** c groups to the left here"),
])  # fmt: skip
def test_a_power_whose_operand_has_a_filter_is_read_with_it(source, said):
    """A filter is part of a ** operand in Jinja (`-3|abs ** 2` is abs(-3) ** 2, 9; `2 ** 3|int ** 2`
    is (2 ** 3) ** 2, 64): the minus or the left grouping past one had rendered without a word."""
    message = refusal_of(source)
    assert said in message, message
    assert render_template("{{ -(3|abs ** 2) }} {{ (-3)|abs ** 2 }} {{ 2 ** (3|int ** 2) }} {{ 3|abs ** 2 }}") == \
        "-9 9 512 9"


def test_the_power_check_reads_a_template_in_one_pass_over_its_brackets():
    """The ** check runs before the parser bounds nesting: walking each bracketed base back to its
    partner token by token made `((...(a) ** 2) ** 2 ...)` quadratic in the template's size at
    load. Its work, counted in traced lines, grows with the source, not its square."""
    import sys

    from jinja2.sandbox import SandboxedEnvironment

    from webgpu_kernels import power_syntax

    def work(depth: int) -> int:
        tokens = list(SandboxedEnvironment().lexer.tokeniter("{{ " + "(" * depth + "a" + ") ** 2" * depth + " }}", None))
        count = 0

        def trace(frame, event, arg):
            nonlocal count
            if frame.f_code.co_filename != power_syntax.__file__:
                return None
            count += 1
            return trace

        sys.settrace(trace)
        try:
            assert power_syntax.ambiguous_power(tokens) is None
        finally:
            sys.settrace(None)
        return count

    assert work(400) < 3 * work(200), (work(200), work(400))


@pytest.mark.parametrize("source", [
    "{% if false %}{% elif -2 ** 2 > 0 %}x{% endif %}",
    "{%- if false -%}{%- elif -2 ** 2 > 0 -%}x{%- endif -%}",
])  # fmt: skip
def test_a_power_after_a_tag_name_is_read_as_the_tags_expression(source):
    """The name that opens a block (`elif`) ends no operand: the minus after it is unary, and
    `{% elif -2 ** 2 > 0 %}` (Jinja: true; Python: false) had rendered its body without a word."""
    message = refusal_of(source)
    assert "a unary minus before ** applies to the base here" in message, message
