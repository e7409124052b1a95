"""The template environment: Jinja's bounded sandbox (sandbox.py) set up for WGSL templates.

Templates compile in :class:`TemplateSandbox`: a node allow-list checked at compile time, the
filters (template_filters.py: each checks sizes before it builds text), tests and globals a
template may use, template-sized bounds, and a render budget around every render. A package's
templates load through :class:`PackageLoader`, by plain file names only; :func:`template_error`
turns anything a template raises into the library's TemplateError or TemplateSandboxError with
file and line.
The names a template sees are rendering.py's :func:`~webgpu_kernels.rendering.template_context`.
"""

from __future__ import annotations

import math
import re
import sys
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from types import TracebackType
from typing import Any, cast

from jinja2 import BaseLoader, Template, TemplateNotFound, TemplateSyntaxError, nodes
from jinja2 import tests as jinja_tests
from jinja2.environment import TemplateModule
from jinja2.exceptions import SecurityError, TemplateRuntimeError, UndefinedError
from jinja2.runtime import LoopContext, Macro, Undefined

from .digests import FILE_NOT_FOUND, templates_there
from .errors import (
    DigestError,
    KernelError,
    PackageError,
    TemplateError,
    TemplateSandboxError,
    name_meant,
    type_name,
)
from .power_syntax import ambiguous_power
from .sandbox import (
    LOAD_COST,
    MAX_EXPRESSION_DEPTH,
    MAX_INT_BITS,
    MISPLACED_SLICE,
    BoundedSandbox,
    OutOfFloatRange,
    SandboxViolation,
    TemplateMistake,
    charge_text,
    charge_work,
    harden,
    misplaced_slice,
    nested_items_exceed,
    refuse_iterating,
    render_budget,
)  # fmt: skip
from .template_filters import TEMPLATE_FILTERS, NonFiniteText, as_written
from .template_filters import wgsl_float as wgsl_float  # re-exported: the literals' old home, still imported
from .template_filters import wgsl_uint as wgsl_uint
from .value_names import WrittenAs, a_value_name, type_error_hint

#: Longest template source, in characters.
MAX_TEMPLATE_BYTES = 64 * 1024
#: Template source one package may load in all (compiling grows with the source and runs outside
#: the render deadline, so many large templates could take minutes). The shipped
#: templates are 4-8 KB.
MAX_PACKAGE_TEMPLATE_BYTES = 256 * 1024
#: Longest rendered WGSL, in characters (also the longest string a template may build).
MAX_RENDERED_BYTES = 1024 * 1024
#: Most items a template's list or ``range`` may hold, and the most iterations of one loop.
MAX_TEMPLATE_ITEMS = 100_000
#: Deepest nesting of statements (``{% for %}`` in ``{% if %}`` ...) in a template.
MAX_TEMPLATE_NESTING = 16
#: Template names (the manifest's ``shader``, ``{% include %}``/``{% import %}`` targets).
TEMPLATE_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,254}\Z")


# --- the template sandbox -------------------------------------------------------------------------

#: Node types a template may contain (checked when it compiles). Withheld: ``{% extends %}`` and
#: ``{% block %}`` (a package's templates are single files plus includes), ``{% autoescape %}``,
#: namespace assignments, and everything only extensions produce.
_TEMPLATE_NODES = frozenset([
    nodes.Template, nodes.Output, nodes.TemplateData, nodes.Name, nodes.Const, nodes.Getattr,
    nodes.Getitem, nodes.Slice, nodes.If, nodes.For, nodes.Assign, nodes.AssignBlock, nodes.Macro,
    nodes.CallBlock, nodes.FilterBlock, nodes.With, nodes.Include, nodes.Import, nodes.FromImport,
    nodes.Call, nodes.Keyword, nodes.Filter, nodes.Test, nodes.Compare, nodes.Operand, nodes.And,
    nodes.Or, nodes.Not, nodes.Neg, nodes.Pos, nodes.Add, nodes.Sub, nodes.Mul, nodes.Div,
    nodes.FloorDiv, nodes.Mod, nodes.Pow, nodes.Concat, nodes.CondExpr, nodes.List, nodes.Tuple,
    nodes.Dict, nodes.Pair,
])  # fmt: skip
_NODE_WORDS = {"Extends": "{% extends %}", "Block": "{% block %}", "NSRef": "assigning to a namespace attribute",
               "ScopedEvalContextModifier": "{% autoescape %}", "EvalContextModifier": "{% autoescape %}",
               "Scope": "{% autoescape %}"}  # fmt: skip
_LOOP_ATTRIBUTES = frozenset(["index", "index0", "revindex", "revindex0", "first", "last", "length", "depth",
                              "depth0", "previtem", "nextitem"])  # fmt: skip
#: The dict methods a template may call (a list, _DictMethod); validate reads `constants.items()` as reading every entry.
DICT_METHODS = frozenset(["items", "keys", "values"])


def _numbers_only(name: str, test: Callable[..., bool]) -> Callable[..., bool]:
    # Jinja's odd/even/divisibleby compute ``value % n``, which for a string is %-formatting.
    def checked(value: Any, *args: Any) -> bool:
        for v in (value, *args):
            if isinstance(v, Undefined):  # a misspelt name, said so: not "takes numbers, got a StrictUndefined"
                v._fail_with_undefined_error()
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                raise SandboxViolation(f"the test {name!r} takes numbers, got {a_value_name(v)}")
        return test(value, *args)

    return checked


def _bounded_comparison(name: str, test: Callable[..., bool]) -> Callable[..., bool]:
    # One comparison walks every nested item of both sides at once (see BoundedSandbox.check_weight).
    def checked(value: Any, *args: Any) -> bool:
        if name == "in" and args:  # `x is in(loop)` iterates the loop variable, as `x in loop` does
            refuse_iterating(args[0])
        for v in (value, *args):
            if not nested_items_exceed(v, MAX_TEMPLATE_ITEMS, MAX_RENDERED_BYTES):  # [s] * 100000 of a 1 MiB s
                continue
            if nested_items_exceed(v, MAX_TEMPLATE_ITEMS):  # refused: which bound, for the message
                raise SandboxViolation(f"the test {name!r} on values of more than {MAX_TEMPLATE_ITEMS} items in all")
            raise SandboxViolation(f"the test {name!r} on values holding more than {MAX_RENDERED_BYTES} "
                                   "characters of text in all")  # fmt: skip
        return test(value, *args)

    return checked


_JINJA_TESTS = cast(dict[str, Callable[..., bool]], jinja_tests.TESTS)  # Jinja's tests all return bool
_COMPARISON_TESTS = ("in", "eq", "equalto", "==", "ne", "!=", "lt", "lessthan", "<", "le", "<=", "gt",
                     "greaterthan", ">", "ge", ">=")  # fmt: skip


_TESTS: dict[str, Callable[..., bool]] = {name: as_written("test", name, test, _JINJA_TESTS.get(name)) for name, test in {
    **{name: _JINJA_TESTS[name] for name in (
        "defined", "undefined", "none", "boolean", "false", "true", "integer", "float", "number", "string",
        "mapping", "sequence", "iterable", "sameas")},
    **{name: _bounded_comparison(name, _JINJA_TESTS[name]) for name in _COMPARISON_TESTS},
    "odd": _numbers_only("odd", jinja_tests.test_odd),
    "even": _numbers_only("even", jinja_tests.test_even),
    "divisibleby": _numbers_only("divisibleby", jinja_tests.test_divisibleby),
}.items()}  # fmt: skip


class _Range(WrittenAs, python_name="function", hint="range is a function: call it, as in range(n)"):
    """The ``range`` global: Python's range, at most :data:`MAX_TEMPLATE_ITEMS` long. Python's messages
    call it 'function', as they call a function (no other value a template reaches is one)."""

    __slots__ = ()
    written_as = "the function range"
    advice = "call it, as in range(n)"

    def __call__(self, *args: Any, **kwargs: Any) -> range:
        if kwargs:  # Python's message named _Range.__call__
            raise TemplateRuntimeError(f"range() takes no keyword arguments, got {', '.join(map(repr, kwargs))}")
        for a in args:
            if isinstance(a, bool) or not isinstance(a, int):
                raise SandboxViolation(f"range() takes integers, got {a_value_name(a)}")
        result = range(*args)
        try:
            length = len(result)
        except OverflowError:
            length = MAX_TEMPLATE_ITEMS + 1
        if length > MAX_TEMPLATE_ITEMS:
            raise SandboxViolation(f"a range of more than {MAX_TEMPLATE_ITEMS} items")
        return result

    def __repr__(self) -> str:
        return "<range>"


class _DictMethod(WrittenAs, python_name="method",
                  hint="a dict's items, keys and values are methods: call them, as in d.items()"):
    """A dict's ``items``, ``keys`` or ``values`` in a template: called, a list, not a dict view. A
    view's set algebra (``d.keys() - [t]``) hashed every leaf of ``t``, and comparing two views
    compared every leaf, in one step past the render's budget and deadline (a comparison's bound
    counts lists, not views): ``(t, t)`` 40 times is 2^40 leaves. Python's messages call it 'method',
    as they call a bound method (no other value a template reaches is one)."""

    __slots__ = ("_dict", "_name")

    def __init__(self, mapping: dict[Any, Any], name: str) -> None:
        self._dict, self._name = mapping, name

    @property
    def written_as(self) -> str:  # type: ignore[override]  # a property where the base declares a str
        return f"the method {self._name}"

    @property
    def advice(self) -> str:  # type: ignore[override]  # a property where the base declares a str
        return f"call it, as in d.{self._name}()"

    def __call__(self, *args: Any, **kwargs: Any) -> list[Any]:
        if args or kwargs:
            raise TemplateRuntimeError(f"{self._name}() takes no arguments")
        items = list(getattr(self._dict, self._name)())
        charge_text(len(items))  # a list built, charged per item as the list filter charges one
        return items

    def __repr__(self) -> str:
        return f"<dict.{self._name}>"


class _BudgetedTemplate(Template):
    """Every render of a template (and what it includes) runs under one :class:`RenderBudget`."""

    def render(self, *args: Any, **kwargs: Any) -> str:
        with render_budget():
            return super().render(*args, **kwargs)

    def generate(self, *args: Any, **kwargs: Any) -> Any:
        with render_budget():
            yield from super().generate(*args, **kwargs)


class TemplateSandbox(BoundedSandbox):
    """The environment templates compile and render in: :class:`BoundedSandbox` with template-sized
    bounds, the filter/test/global allow-lists, the node allow-list and the render budget."""

    max_text = MAX_RENDERED_BYTES
    max_items = MAX_TEMPLATE_ITEMS
    # A comparison or max walks every character of every item in one step the render budget cannot
    # interrupt: ([s] * 100000)|max of a 1 MiB s lowercased 10^11 characters (32 s, past the deadline).
    max_weight_text = MAX_RENDERED_BYTES

    def __init__(self, loader: BaseLoader | None = None) -> None:
        super().__init__(loader=loader, keep_trailing_newline=True, trim_blocks=True, lstrip_blocks=True,
                         auto_reload=False)  # fmt: skip
        self.template_class = _BudgetedTemplate
        self.filters = dict(TEMPLATE_FILTERS)
        self.tests = dict(_TESTS)
        self.globals = {"range": _Range()}

    def parse_named(self, name: str) -> nodes.Template:
        """Template ``name``'s syntax tree, read through the package loader (its rules and bounds),
        not compiled: for the tools that read what a template names. Raises what the loader or the
        parser raises."""
        return self.parse(cast(BaseLoader, self.loader).get_source(self, name)[0])

    def compile(self, source: Any, name: str | None = None, filename: str | None = None, raw: bool = False,
                defer_init: bool = False) -> Any:  # fmt: skip
        """Parse, check against the allow-list, harden (:func:`harden`), then compile."""
        try:
            if isinstance(source, str):
                if len(source) > MAX_TEMPLATE_BYTES:
                    raise SandboxViolation(f"template source longer than {MAX_TEMPLATE_BYTES} characters")
                try:
                    ambiguous = ambiguous_power(self.lexer.tokeniter(source, name, filename))
                    if ambiguous is not None:
                        raise TemplateSyntaxError(ambiguous[1], ambiguous[0], name, filename)
                    tree = self._parse(source, name, filename)
                except RecursionError:
                    raise SandboxViolation("the template is nested too deeply") from None
                except ValueError as exc:  # Jinja's lexer reading a literal past Python's 4,300 digits
                    if "integer string conversion" not in str(exc):  # its words: use sys.set_int_max_str_digits()
                        raise
                    raise SandboxViolation(f"an integer literal of more than {MAX_INT_BITS} bits") from None
                _check_template(tree, name)
                source = harden(tree, template=True, name=name)
            try:
                return super().compile(  # type: ignore[call-overload]  # Jinja has no raw: bool overload
                    source, name, filename, raw, defer_init)
            except (RecursionError, SyntaxError, MemoryError) as exc:  # Python's compiler limits
                raise SandboxViolation(f"the template is too complex to compile ({type(exc).__name__})") from None
        except SandboxViolation as exc:
            exc.template_name = name  # type: ignore[attr-defined]
            raise

    def text_size(self, value: Any, limit: int, depth: int = 0) -> int:
        """As the sandbox's, and a float that is not finite is refused: every conversion of a value to
        text (``{{ }}``, ``~``, ``string``, ``join``, a list printed) sizes it here first, and WGSL has no
        literal for inf or NaN. "inf" text had reached the shader compiler, whose error named the
        rendered WGSL, far from the template line that printed it."""
        if isinstance(value, float) and not math.isfinite(value):
            raise NonFiniteText(value)
        return super().text_size(value, limit, depth)

    def _load_template(self, name: Any, globals: Any) -> Any:
        # Before Jinja's template cache hashes the name: a tuple nested by reference
        # ((t0,) * 10**5 of t0 = (0,) * 10**5) would be hashed item by item, past the budget.
        _check_template_name(name)
        return super()._load_template(name, globals)

    # --- access: mappings, loop objects, imported templates; nothing else --------------------------

    def getattr(self, obj: Any, attribute: str) -> Any:
        if type(obj) is dict and attribute not in obj and attribute in DICT_METHODS:
            return _DictMethod(obj, attribute)
        return super().getattr(obj, attribute)

    def _other_attribute(self, obj: Any, attribute: str) -> Any:
        if isinstance(obj, LoopContext) and attribute in _LOOP_ATTRIBUTES:
            return getattr(obj, attribute)
        if isinstance(obj, TemplateModule) and not attribute.startswith("_"):
            exported = sorted(k for k in vars(obj) if not k.startswith("_"))  # its macros and top-level sets
            if attribute in exported:  # (by name: one set to none is there too)
                return getattr(obj, attribute)
            # Jinja's words had been "'jinja2.environment.TemplateModule object' has no attribute 'x'"
            close = name_meant(attribute, exported)
            meant = f"; did you mean {close!r}?" if close else ""
            return self.undefined(f"the imported template {obj.__name__!r} has no macro or variable {attribute!r} "
                                  f"(it has: {', '.join(exported) or 'none'}{meant})", name=attribute)  # fmt: skip
        return super()._other_attribute(obj, attribute)

    def callable_allowed(self, obj: Any) -> bool:
        """``range``, macros (and ``caller``), and ``items()``/``keys()``/``values()`` of a dict."""
        return isinstance(obj, (_Range, Macro, _DictMethod))


def include_targets(target: nodes.Expr) -> list[str | None]:
    """The template names an ``{% include %}``/``{% import %}`` target writes (a list for an include
    of the first that exists): a literal's value, None for a name computed at render time."""
    items = target.items if isinstance(target, (nodes.List, nodes.Tuple)) else [target]
    return [i.value if isinstance(i, nodes.Const) and isinstance(i.value, str) else None for i in items]


def _check_template(tree: nodes.Template, name: str | None = None) -> None:
    """Refuse nodes outside the allow-list, ``self``, recursive loops, huge literals, deep nesting,
    and a slice that is not an index's one subscript; and, as a syntax error, a float literal
    beyond the largest float (Jinja reads ``1e400`` as inf, and its compiled code then failed with
    "NameError: name 'inf' is not defined")."""
    stray = misplaced_slice(tree)
    if stray is not None:
        raise SandboxViolation(MISPLACED_SLICE, stray.lineno)
    stack: list[tuple[nodes.Node, int, int]] = [(tree, 0, 0)]
    while stack:
        node, statements, expression = stack.pop()
        kind = type(node)
        if kind not in _TEMPLATE_NODES:
            what = _NODE_WORDS.get(kind.__name__, kind.__name__)
            raise SandboxViolation(f"{what} is not allowed in templates", node.lineno)
        if type(node) is nodes.Name and node.name == "self":
            raise SandboxViolation("'self' is not available in templates", node.lineno)
        if type(node) is nodes.For and node.recursive:
            raise SandboxViolation("recursive loops are not allowed in templates", node.lineno)
        if type(node) is nodes.Const and isinstance(node.value, int) and node.value.bit_length() > MAX_INT_BITS:
            raise SandboxViolation(f"an integer literal of more than {MAX_INT_BITS} bits", node.lineno)
        if type(node) is nodes.Const and isinstance(node.value, float) and not math.isfinite(node.value):
            raise TemplateSyntaxError(f"a float literal beyond the largest float ({sys.float_info.max!r}), read as "
                                      f"{node.value!r}, which WGSL has no literal for", node.lineno, name)  # fmt: skip
        if isinstance(node, nodes.Stmt):
            statements, expression = statements + 1, 0
            if statements > MAX_TEMPLATE_NESTING:
                raise SandboxViolation(f"statements nested more than {MAX_TEMPLATE_NESTING} levels deep", node.lineno)
        else:
            expression += 1
            if expression > MAX_EXPRESSION_DEPTH:
                raise SandboxViolation(f"an expression nested more than {MAX_EXPRESSION_DEPTH} levels deep",
                                       node.lineno)  # fmt: skip
        stack.extend((child, statements, expression) for child in node.iter_child_nodes())


_UNDEFINED_NAME = re.compile(r"^'(\w+)' is undefined$")


def template_error(exc: Exception, shader: str, names: Iterable[str] = (), files: Iterable[str] = (),
                   named: Iterable[str] = (), read: Callable[[str], str] | None = None) -> KernelError:
    """The library's error for ``exc``, raised while loading or rendering template ``shader``
    (``names``: those the template could read, for a "did you mean" under a misspelt one, the
    context itself where its namespaces are to be told; ``files``: the package's, whose templates a
    missing one is told beside; ``named``: the templates the manifest's passes name, which a renamed
    file no longer is; ``read``: a template's text, whose failing line names the namespace read)."""
    if isinstance(exc, DigestError):  # an included file present but unverified: the class calls rely on stays
        includer = _innermost_template_line(exc.__traceback__)
        if includer is not None:
            exc.add_note(f"included by {includer[0]}, line {includer[1]}")
        return exc
    if isinstance(exc, KernelError):
        return exc
    if isinstance(exc, TemplateNotFound):
        missing = exc.name if isinstance(exc.name, str) else shader
        if missing != shader:  # an {% include %} or {% import %} of a file the package lacks
            line = _template_line(exc.__traceback__, shader)
            return TemplateError(f"includes {missing!r}, which is not in the package{templates_there(missing, files)}",
                                 file=shader, line=line)  # fmt: skip
        return TemplateError(f"template not found in the package{templates_there(shader, files, named)}", file=shader)
    if isinstance(exc, TemplateSyntaxError):
        return TemplateError(f"syntax error: {exc.message}", file=exc.name or shader, line=exc.lineno)
    if isinstance(exc, (SecurityError, RecursionError)):
        where = getattr(exc, "template_name", None) or shader
        line = _template_line(exc.__traceback__, where) or getattr(exc, "lineno", None)
        reason = str(exc) if isinstance(exc, SecurityError) else "nested too deeply (recursion)"
        return TemplateSandboxError(f"refused by the sandbox: {reason}", file=where, line=line)
    # Where it failed: the innermost template line, in an included file too (the include line of
    # the top template had been named for a misspelt name inside the included file).
    shader, line = _innermost_template_line(exc.__traceback__) or (shader, None)
    if isinstance(exc, (NonFiniteText, OutOfFloatRange, TemplateMistake)):  # messages in the library's words already
        return TemplateError(str(exc), file=shader, line=line)
    absent = _NO_ATTRIBUTE.match(str(exc)) if isinstance(exc, UndefinedError) else None
    if absent and read is not None and line is not None and isinstance(names, Mapping):
        told = _absent_from_namespace(absent[1], _line_text(read, shader, line), names)
        if told:
            return TemplateError(told, file=shader, line=line)
    misspelt = _UNDEFINED_NAME.match(str(exc)) if isinstance(exc, UndefinedError) else None
    names = list(names)
    close = name_meant(misspelt[1], names) if misspelt else None
    hint = f" (did you mean {close!r}?)" if close else ""
    if misspelt and misspelt[1] in names:  # no misspelling: the context did not reach the file reading it
        hint = (f" (it is in the template context, but not in {shader}: a file brought in by {{% import %}} or "
                f"{{% from ... import %}} sees the context only when imported `with context` "
                f"(`{{% import '{shader}' as m with context %}}`); or pass the value to the macro as an argument)")
    if misspelt and misspelt[1] in TEMPLATE_HIDDEN_NAMESPACES and misspelt[1] not in names:
        hint = (f" (the expression namespace {misspelt[1]!r} is not in the template contract: give the template "
                "what it needs through the pass's source.inputs or a constant; docs/format.md, Template contract)")
    if isinstance(exc, TypeError):
        hint = type_error_hint(str(exc))
    return TemplateError(f"{type(exc).__name__}: {exc}{hint}", file=shader, line=line)


#: Jinja's words for a key a mapping lacks (`tunables.ROW_UNROLL` once the manifest renamed it).
_NO_ATTRIBUTE = re.compile(r"^'dict object' has no attribute '(\w+)'$")


def _line_text(read: Callable[[str], str], shader: str, line: int) -> str:
    try:
        lines = read(shader).splitlines()
    except Exception:  # noqa: BLE001 - the plain message stays where the text cannot be had
        return ""
    return lines[line - 1] if 0 < line <= len(lines) else ""


def _absent_from_namespace(key: str, text: str, context: Mapping[str, Any]) -> str | None:
    """'tunables has no ...', with the names it holds and the one meant, where ``text`` (the failing
    template line) reads ``key`` from a namespace of the context; None where it reads no such one
    (a macro's argument, a loop variable)."""
    heads = re.findall(rf"\b(\w+)\s*(?:\.\s*{key}\b|\[\s*(?:'{key}'|\"{key}\")\s*\])", text)
    for head in dict.fromkeys(heads):
        namespace = context.get(head)
        if isinstance(namespace, Mapping) and key not in namespace:
            held = sorted(str(k) for k in namespace)
            close = name_meant(key, held)
            meant = f"; did you mean {head}.{close}?" if close else ""
            return f"{head} has no {key!r} (the {head} are {', '.join(held) or 'none'}{meant})"
    return None


#: Expression namespaces a template does not see (it sees attrs, tunables and dtypes by those names).
TEMPLATE_HIDDEN_NAMESPACES = frozenset({"shapes", "ranks", "device"})


#: Files no template may load: the package's JSON documents, test data and notes. The tuning key
#: (tuning._template_files) digests every other file a template could load, so an edit to one of
#: these cannot change the WGSL behind a stored result.
NOT_TEMPLATE_SUFFIXES = (".json", ".npy", ".npz", ".safetensors", ".md")


class PackageLoader(BaseLoader):
    """Loads a package's templates by name through ``read`` (a file at the top of the package)."""

    def __init__(self, read: Callable[[str], str]) -> None:
        self._read = read
        self._sizes: dict[str, int] = {}  # of the templates loaded, by name (reloads count once)
        self._lock = threading.Lock()

    def get_source(self, environment: Any, template: str) -> tuple[str, str, Callable[[], bool]]:
        _check_template_name(template)  # TemplateSandbox checked it already; the loader holds on its own
        # Each file looked up, not each include: Jinja keeps what it loaded, but a name that is not
        # there is looked up again each time (an include of a list of names tries each).
        charge_work(LOAD_COST)
        # Case and trailing dots aside: macOS and Windows open MANIFEST.JSON as manifest.json, and
        # Windows opens manifest.json. as well
        if template.lower().rstrip(".").endswith(NOT_TEMPLATE_SUFFIXES):
            raise TemplateError(f"not a template: {', '.join(NOT_TEMPLATE_SUFFIXES)} files (the package's documents, "
                                "data and notes) cannot be included or imported", file=template)  # fmt: skip
        try:
            source = self._read(template)
        except DigestError:
            raise  # present but unverified: "not in the package" would send the author looking for it
        except PackageError as exc:
            if exc.detail.startswith(FILE_NOT_FOUND):
                raise TemplateNotFound(template) from None
            # there, but unreadable (not UTF-8, too large, no regular file): "not found" had sent the
            # author looking for a file beside the one that is there
            raise TemplateError(exc.detail, file=template) from None
        except KernelError:
            raise TemplateNotFound(template) from None
        if len(source) > MAX_TEMPLATE_BYTES:
            raise TemplateSandboxError(f"template larger than {MAX_TEMPLATE_BYTES} bytes", file=template)
        with self._lock:
            total = sum(size for name, size in self._sizes.items() if name != template) + len(source)
            if total > MAX_PACKAGE_TEMPLATE_BYTES:
                raise TemplateSandboxError(f"the package's templates hold more than {MAX_PACKAGE_TEMPLATE_BYTES} "
                                           "bytes together", file=template)  # fmt: skip
            self._sizes[template] = len(source)
        return source, template, lambda: True


def _check_template_name(name: Any) -> None:
    """Refuse a template name that is not a file at the top of the package. It becomes a file name
    and Jinja's code object file name: letters, digits, . _ - only, so no path, quote, newline or
    control character gets anywhere (CVE-2024-56201)."""
    if not isinstance(name, str) or not TEMPLATE_NAME.match(name):
        # (the length said: a 256-letter name, shown cut to 80, had been refused "named with letters")
        shown = f"{name[:80]!r} ({len(name)} characters)" if isinstance(name, str) else f"of type {type_name(name)}"
        raise SandboxViolation(f"template name {shown} is refused: a file at the top of the package, named "
                               "with letters, digits, '.', '_' and '-', not starting with '.' or '-', at most "
                               "255 characters")  # fmt: skip


def _template_frames(tb: TracebackType | None) -> Iterator[tuple[str, int]]:
    """(file, line) of each template frame of ``tb``, outermost first (Jinja names a template's
    frames by its name, which TEMPLATE_NAME allows only for a package's files)."""
    while tb is not None:
        name = tb.tb_frame.f_code.co_filename
        if TEMPLATE_NAME.match(name):
            yield name, tb.tb_lineno
        tb = tb.tb_next


def _innermost_template_line(tb: TracebackType | None) -> tuple[str, int] | None:
    """The file and line of the innermost template frame of ``tb``."""
    return next(reversed([*_template_frames(tb)]), None)


def _template_line(tb: TracebackType | None, filename: str) -> int | None:
    """The innermost line of ``tb`` in template ``filename``."""
    return next((line for name, line in reversed([*_template_frames(tb)]) if name == filename), None)
