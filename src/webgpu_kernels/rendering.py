"""Rendering: a variant's passes resolved for a call, and their WGSL rendered from templates.

For each pass this stage evaluates the pass's expressions in the variant's scope (bindings'
element types, uniform struct values, dispatch size, template inputs), lays out the uniform
struct, and renders the ``.wgsl.jinja`` template in Jinja's sandbox from the documented template
context (docs/format.md, "Template contract").
"""

from __future__ import annotations

import math
import operator
import re
import struct
import types
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import TracebackType
from typing import Any

from jinja2 import BaseLoader, Template, TemplateNotFound, TemplateSyntaxError, nodes, pass_context
from jinja2 import filters as jinja_filters
from jinja2 import tests as jinja_tests
from jinja2.environment import TemplateModule
from jinja2.exceptions import SecurityError
from jinja2.runtime import LoopContext, Macro, Undefined

from .errors import ExpressionError, KernelError, LayoutError, TemplateError, TemplateSandboxError
from .expressions import (
    MAX_EXPRESSION_DEPTH, MAX_INT_BITS, NAMESPACES, STATIC_FUNCTIONS, BoundedSandbox, SandboxViolation, as_count,
    charge_text, harden, render_budget,
)  # fmt: skip
from .layout import StructLayout, struct_layout
from .program import CompiledPass, CompiledVariant

#: Longest template source, in characters.
MAX_TEMPLATE_BYTES = 256 * 1024
#: Longest rendered WGSL, in characters (also the longest string a template may build).
MAX_RENDERED_BYTES = 1024 * 1024
#: Most items a template's list or ``range`` may hold, and the most iterations of one loop.
MAX_TEMPLATE_ITEMS = 100_000
#: Deepest nesting of statements (``{% for %}`` in ``{% if %}`` ...) in a template.
MAX_TEMPLATE_NESTING = 16
#: Template names (the manifest's ``shader``, ``{% include %}``/``{% import %}`` targets).
TEMPLATE_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,254}\Z")

_ACCESS = {"read-only-storage": ("storage", "read"), "storage": ("storage", "read_write"), "uniform": ("uniform", None)}

#: Filters a template may use; Jinja's others (and its globals cycler, joiner, lipsum, namespace) are withheld.
_FILTERS = ("abs", "default", "first", "float", "int", "join", "last", "length", "lower", "max", "min", "round",
            "string", "trim", "upper", "list", "replace", "indent")  # fmt: skip


@dataclass(frozen=True)
class ResolvedBinding:
    """A binding with its expressions evaluated: what execution binds and templates declare."""

    name: str
    group: int
    binding: int
    buffer_type: str
    arg: str | None
    element_type: str | None
    length: int | None
    struct: StructLayout | None
    uniform_bytes: bytes | None

    def declaration(self) -> str:
        space, access = _ACCESS[self.buffer_type]
        qualifier = f"{space}, {access}" if access else space
        return f"@group({self.group}) @binding({self.binding}) var<{qualifier}> {self.name}: {self.wgsl_type()};"

    def wgsl_type(self) -> str:
        if self.struct is not None:
            return self.struct.name
        return f"array<{self.element_type}>"

    def template_view(self) -> dict[str, Any]:
        space, access = _ACCESS[self.buffer_type]
        return {
            "name": self.name, "group": self.group, "binding": self.binding, "addressSpace": space,
            "accessMode": access, "type": self.wgsl_type(), "elementType": self.element_type,
            "length": self.length, "arg": self.arg, "declaration": self.declaration(),
            "struct": self.struct.declaration() if self.struct else None,
        }  # fmt: skip


@dataclass(frozen=True)
class ResolvedPass:
    pass_id: str
    label: str
    shader: str
    entry_point: str
    bindings: tuple[ResolvedBinding, ...]
    threads: int
    workgroup_size: tuple[int, int, int]
    source_inputs: dict[str, Any]

    @property
    def invocations_per_workgroup(self) -> int:
        return math.prod(self.workgroup_size)


def _unpackable(json_path: str, types: list[tuple[str, str]], values: list[Any], exc: Exception) -> LayoutError:
    """A LayoutError naming the uniform field whose value cannot be packed (found by packing each alone)."""
    for i, ((name, type_text), value) in enumerate(zip(types, values)):
        try:
            struct_layout("Field", [(name, type_text)]).pack([value])
        except Exception:  # noqa: BLE001 - this is the field that fails, whatever the reason
            return LayoutError(f"{json_path}.struct.fields[{i}]: field {name!r} ({type_text}) cannot hold "
                               f"{_short(value)}: {type(exc).__name__}: {exc}")  # fmt: skip
    return LayoutError(f"{json_path}: the uniform values cannot be packed: {type(exc).__name__}: {exc}")


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _struct_layout(json_path: str, name: str, types: list[tuple[str, str]]) -> StructLayout:
    try:
        return struct_layout(name, types)
    except LayoutError as exc:
        raise LayoutError(f"{json_path}: {exc}") from None


def workgroup_grid(threads: int, invocations: int, max_per_dimension: int) -> tuple[int, int, int]:
    """Workgroups for ``threads`` invocations, spilling into y then z past the per-dimension limit.

    The grid may hold more workgroups than needed; shaders bound-check with their own count.
    """
    total = -(-threads // invocations)
    if total == 0:
        return (0, 0, 0)
    x = min(total, max_per_dimension)
    rest = -(-total // x)
    y = min(rest, max_per_dimension)
    z = -(-rest // y)
    if z > max_per_dimension:
        raise ExpressionError(f"{threads} threads need more than {max_per_dimension}^3 workgroups",
                              expression="dispatch.threads")  # fmt: skip
    # Shrink x again so the grid wastes as little as possible.
    x = -(-total // (y * z))
    return (x, y, z)


def resolve_pass(cpass: CompiledPass, scope: Mapping[str, Any]) -> ResolvedPass:
    """Evaluate a pass's expressions in the chosen variant's scope."""
    p = cpass.pass_
    bindings = []
    for index, cb in enumerate(cpass.bindings):
        b = cb.binding
        element_type = None
        if cb.element_type is not None:
            element_type = cb.element_type.evaluate(scope)
            if not isinstance(element_type, str) or not element_type:
                raise ExpressionError(f"an element type must be a WGSL type name, got {element_type!r}",
                                      expression=cb.element_type.source, where=cb.element_type.where)  # fmt: skip
        length = as_count(cb.length.evaluate(scope), cb.length, "a length") if cb.length is not None else None
        layout, uniform = None, None
        if b.struct_name is not None:
            types = []
            for name, type_expr, _ in cb.fields:
                type_text = type_expr.evaluate(scope)
                if not isinstance(type_text, str):
                    raise ExpressionError(f"a field type must be a WGSL type name, got {type_text!r}",
                                          expression=type_expr.source, where=type_expr.where)  # fmt: skip
                types.append((name, type_text))
            layout = _struct_layout(b.json_path, b.struct_name, types)
            values = [value.evaluate(scope) for _, _, value in cb.fields]
            try:
                uniform = layout.pack(values)
            except LayoutError as exc:
                raise LayoutError(f"{b.json_path}: {exc}") from None
            except (OverflowError, ValueError, TypeError, struct.error) as exc:  # e.g. 1e39 into an f32 field
                raise _unpackable(b.json_path, types, values, exc) from None
        bindings.append(ResolvedBinding(
            name=b.name, group=0, binding=index, buffer_type=b.buffer_type, arg=b.arg,
            element_type=element_type, length=length, struct=layout, uniform_bytes=uniform,
        ))  # fmt: skip
    threads = as_count(cpass.threads.evaluate(scope), cpass.threads, "dispatch.threads")
    sizes = [as_count(e.evaluate(scope), e, "dispatch.workgroupSize") for e in cpass.workgroup_size]
    for size, expr in zip(sizes, cpass.workgroup_size):
        if size < 1:
            raise ExpressionError("a workgroup size must be at least 1", expression=expr.source, where=expr.where)
    sizes += [1] * (3 - len(sizes))
    inputs = {name: expr.evaluate(scope) for name, expr in cpass.source_inputs}
    return ResolvedPass(
        pass_id=p.id, label=p.name, shader=p.shader, entry_point=p.entry_point, bindings=tuple(bindings),
        threads=threads, workgroup_size=(sizes[0], sizes[1], sizes[2]), source_inputs=inputs,
    )  # fmt: skip


def resolve_variant(variant: CompiledVariant, scope: Mapping[str, Any]) -> tuple[ResolvedPass, ...]:
    return tuple(resolve_pass(cp, scope) for cp in variant.passes)


def wgsl_float(value: Any, suffix: str = "") -> str:
    """A WGSL floating-point literal for ``value`` (``1.702``, ``1e-05``); ``suffix`` "f" or "h"."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"wgsl_float needs a number, got {value!r}")
    number = float(value)
    if not math.isfinite(number):
        raise ValueError(f"WGSL has no literal for {number!r}")
    text = repr(number)
    if "e" not in text and "." not in text:
        text += ".0"
    return text + suffix


def wgsl_uint(value: Any) -> str:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 2**32:
        raise ValueError(f"wgsl_uint needs an integer in [0, 2^32), got {value!r}")
    return f"{value}u"


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
_DICT_METHODS = frozenset(["items", "keys", "values"])


def _numbers_only(name: str, test: Callable[..., bool]) -> Callable[..., bool]:
    # Jinja's odd/even/divisibleby compute ``value % n``, which for a string is %-formatting.
    def checked(value: Any, *args: Any) -> bool:
        for v in (value, *args):
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                raise SandboxViolation(f"the test {name!r} takes numbers, got a {type(v).__name__}")
        return test(value, *args)

    return checked


_TESTS: dict[str, Callable[..., bool]] = {
    **{name: jinja_tests.TESTS[name] for name in (
        "defined", "undefined", "none", "boolean", "false", "true", "integer", "float", "number", "string",
        "mapping", "sequence", "iterable", "sameas", "in", "eq", "equalto", "==", "ne", "!=", "lt", "lessthan", "<",
        "le", "<=", "gt", "greaterthan", ">", "ge", ">=")},
    "odd": _numbers_only("odd", jinja_tests.test_odd),
    "even": _numbers_only("even", jinja_tests.test_even),
    "divisibleby": _numbers_only("divisibleby", jinja_tests.test_divisibleby),
}  # fmt: skip


class _Range:
    """The ``range`` global: Python's range, at most :data:`MAX_TEMPLATE_ITEMS` long."""

    def __call__(self, *args: Any) -> range:
        for a in args:
            if isinstance(a, bool) or not isinstance(a, int):
                raise SandboxViolation(f"range() takes integers, got a {type(a).__name__}")
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

    def __init__(self, loader: BaseLoader | None = None) -> None:
        super().__init__(loader=loader, keep_trailing_newline=True, trim_blocks=True, lstrip_blocks=True,
                         auto_reload=False)  # fmt: skip
        self.template_class = _BudgetedTemplate
        self.filters = dict(_TEMPLATE_FILTERS)
        self.tests = dict(_TESTS)
        self.globals = {"range": _Range()}

    def compile(self, source: Any, name: str | None = None, filename: str | None = None, raw: bool = False,
                defer_init: bool = False) -> Any:  # fmt: skip
        """Parse, check against the allow-list, harden (:func:`harden`), then compile."""
        try:
            if isinstance(source, str):
                if len(source) > MAX_TEMPLATE_BYTES:
                    raise SandboxViolation(f"template source longer than {MAX_TEMPLATE_BYTES} characters")
                try:
                    tree = self._parse(source, name, filename)
                except RecursionError:
                    raise SandboxViolation("the template is nested too deeply") from None
                _check_template(tree)
                source = harden(tree, template=True)
            try:
                return super().compile(source, name, filename, raw, defer_init)
            except (RecursionError, SyntaxError, MemoryError) as exc:  # Python's compiler limits
                raise SandboxViolation(f"the template is too complex to compile ({type(exc).__name__})") from None
        except SandboxViolation as exc:
            exc.template_name = name  # type: ignore[attr-defined]
            raise

    # --- access: mappings, loop objects, imported templates; nothing else --------------------------

    def getattr(self, obj: Any, attribute: str) -> Any:
        if type(obj) is dict and attribute not in obj and attribute in _DICT_METHODS:
            return getattr(obj, attribute)
        return super().getattr(obj, attribute)

    def _other_attribute(self, obj: Any, attribute: str) -> Any:
        if isinstance(obj, LoopContext) and attribute in _LOOP_ATTRIBUTES:
            return getattr(obj, attribute)
        if isinstance(obj, TemplateModule) and not attribute.startswith("_"):
            value = getattr(obj, attribute, None)
            if value is not None:
                return value
            return self.undefined(obj=obj, name=attribute)
        return super()._other_attribute(obj, attribute)

    def callable_allowed(self, obj: Any) -> bool:
        """``range``, macros (and ``caller``), and ``items()``/``keys()``/``values()`` of a dict."""
        if isinstance(obj, (_Range, Macro)):
            return True
        return (isinstance(obj, types.BuiltinMethodType) and obj.__name__ in _DICT_METHODS
                and type(obj.__self__) is dict)  # fmt: skip


def _check_template(tree: nodes.Template) -> None:
    """Refuse nodes outside the allow-list, ``self``, recursive loops, huge literals, deep nesting."""
    stack: list[tuple[nodes.Node, int, int]] = [(tree, 0, 0)]
    while stack:
        node, statements, expression = stack.pop()
        kind = type(node)
        if kind not in _TEMPLATE_NODES:
            what = _NODE_WORDS.get(kind.__name__, kind.__name__)
            raise SandboxViolation(f"{what} is not allowed in templates", node.lineno)
        if kind is nodes.Name and node.name == "self":
            raise SandboxViolation("'self' is not available in templates", node.lineno)
        if kind is nodes.For and node.recursive:
            raise SandboxViolation("recursive loops are not allowed in templates", node.lineno)
        if kind is nodes.Const and isinstance(node.value, int) and node.value.bit_length() > MAX_INT_BITS:
            raise SandboxViolation(f"an integer literal of more than {MAX_INT_BITS} bits", node.lineno)
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


# --- filters: each checks sizes before building, is charged, and is never folded at compile time ---


def _env(context: Any) -> TemplateSandbox:
    return context.environment


def _result(context: Any, value: Any) -> Any:
    value = _env(context).check_value(value)
    if isinstance(value, str):
        charge_text(len(value))
    return value


@pass_context
def _f_join(context: Any, value: Any, d: Any = "", attribute: Any = None) -> str:
    env = _env(context)
    if attribute is not None:
        raise SandboxViolation("join(attribute=...) is not supported in templates")
    items = env.take(value)
    separator = env.to_text(d)
    total = len(separator) * max(len(items) - 1, 0)
    for item in items:
        total += env.text_size(item, env.max_text)
        if total > env.max_text:
            raise SandboxViolation(f"join would build more than {env.max_text} characters")
    return _result(context, separator.join(env.to_text(item) for item in items))


@pass_context
def _f_list(context: Any, value: Any) -> list[Any]:
    return _result(context, list(_env(context).take(value)))


@pass_context
def _f_length(context: Any, value: Any) -> int:
    if isinstance(value, (str, list, tuple, dict, range)):
        return len(value)
    return len(_env(context).take(value))


@pass_context
def _f_string(context: Any, value: Any) -> str:
    return _result(context, _env(context).to_text(value))


@pass_context
def _f_lower(context: Any, value: Any) -> str:
    return _result(context, _env(context).to_text(value).lower())


@pass_context
def _f_upper(context: Any, value: Any) -> str:
    return _result(context, _env(context).to_text(value).upper())


@pass_context
def _f_trim(context: Any, value: Any, chars: Any = None) -> str:
    if chars is not None:
        chars = _env(context).to_text(chars)
    return _result(context, _env(context).to_text(value).strip(chars))


@pass_context
def _f_replace(context: Any, s: Any, old: Any, new: Any, count: Any = None) -> str:
    env = _env(context)
    s, old, new = env.to_text(s), env.to_text(old), env.to_text(new)
    if count is not None and (isinstance(count, bool) or not isinstance(count, int)):
        raise SandboxViolation("replace(): count must be an integer")
    n = s.count(old) if old else len(s) + 1
    if count is not None and count >= 0:
        n = min(n, count)
    if len(s) + n * (len(new) - len(old)) > env.max_text:
        raise SandboxViolation(f"replace would build more than {env.max_text} characters")
    return _result(context, s.replace(old, new, -1 if count is None else count))


@pass_context
def _f_indent(context: Any, s: Any, width: Any = 4, first: bool = False, blank: bool = False) -> str:
    env = _env(context)
    s = env.to_text(s)
    if isinstance(width, str):
        indention = env.to_text(width)
    else:
        width = operator.index(width)
        if width > env.max_text:
            raise SandboxViolation(f"indent width {width} exceeds the limit of {env.max_text}")
        indention = " " * max(width, 0)
    if len(s) + (s.count("\n") + 1) * len(indention) > env.max_text:
        raise SandboxViolation(f"indent would build more than {env.max_text} characters")
    return _result(context, jinja_filters.do_indent(s, indention, first, blank))


@pass_context
def _f_first(context: Any, value: Any) -> Any:
    return jinja_filters.do_first(_env(context), _env(context).take(value))


@pass_context
def _f_last(context: Any, value: Any) -> Any:
    return jinja_filters.do_last(_env(context), _env(context).take(value))


@pass_context
def _f_max(context: Any, value: Any, case_sensitive: bool = False, attribute: Any = None) -> Any:
    return jinja_filters.do_max(_env(context), _env(context).take(value), case_sensitive, attribute)


@pass_context
def _f_min(context: Any, value: Any, case_sensitive: bool = False, attribute: Any = None) -> Any:
    return jinja_filters.do_min(_env(context), _env(context).take(value), case_sensitive, attribute)


@pass_context
def _f_default(context: Any, value: Any, default_value: Any = "", boolean: bool = False) -> Any:
    return jinja_filters.do_default(value, default_value, boolean)


@pass_context
def _f_abs(context: Any, value: Any) -> Any:
    return _result(context, abs(value))


@pass_context
def _f_round(context: Any, value: Any, precision: int = 0, method: str = "common") -> float:
    return _result(context, jinja_filters.do_round(value, precision, method))


@pass_context
def _f_int(context: Any, value: Any, default: int = 0, base: int = 10) -> int:
    if isinstance(value, str) and len(value) > 64:
        raise SandboxViolation("int() of a string longer than 64 characters")
    return _result(context, jinja_filters.do_int(value, default, base))


@pass_context
def _f_float(context: Any, value: Any, default: float = 0.0) -> float:
    if isinstance(value, str) and len(value) > 64:
        raise SandboxViolation("float() of a string longer than 64 characters")
    return _result(context, jinja_filters.do_float(value, default))


_TEMPLATE_FILTERS: dict[str, Callable[..., Any]] = {
    "abs": _f_abs, "default": _f_default, "first": _f_first, "float": _f_float, "int": _f_int, "join": _f_join,
    "last": _f_last, "length": _f_length, "lower": _f_lower, "max": _f_max, "min": _f_min, "round": _f_round,
    "string": _f_string, "trim": _f_trim, "upper": _f_upper, "list": _f_list, "replace": _f_replace,
    "indent": _f_indent, "wgsl_float": wgsl_float, "wgsl_uint": wgsl_uint,
}  # fmt: skip
assert set(_TEMPLATE_FILTERS) == set(_FILTERS) | {"wgsl_float", "wgsl_uint"}


class TemplateRenderer:
    """One sandboxed Jinja environment per package; templates compile once and are cached."""

    def __init__(self, read_template: Callable[[str], str]) -> None:
        self._read = read_template
        self.env = TemplateSandbox(_PackageLoader(read_template))

    def check(self, name: str) -> None:
        """Load and compile template ``name`` without rendering it: its name, syntax and the sandbox's
        allow-list are checked (for validation tools). Raises TemplateError/TemplateSandboxError."""
        try:
            self.env.get_template(name)
        except Exception as exc:  # noqa: BLE001 - every failure becomes the library's error
            raise _template_error(exc, name) from None

    def render(self, resolved: ResolvedPass, scope: Mapping[str, Any]) -> str:
        context = template_context(resolved, scope)
        stream = None
        try:
            with render_budget():
                template = self.env.get_template(resolved.shader)
                stream = template.generate(context)
                pieces, size = [], 0
                for piece in stream:
                    size += len(piece)
                    if size > MAX_RENDERED_BYTES:
                        raise TemplateSandboxError(f"rendered WGSL exceeds {MAX_RENDERED_BYTES} bytes",
                                                   file=resolved.shader)  # fmt: skip
                    pieces.append(piece)
                return "".join(pieces)
        except Exception as exc:  # noqa: BLE001 - every failure inside the template is the template's error
            raise _template_error(exc, resolved.shader) from None
        finally:
            if stream is not None:
                stream.close()


def _template_error(exc: Exception, shader: str) -> KernelError:
    """The library's error for ``exc``, raised while loading or rendering template ``shader``."""
    if isinstance(exc, KernelError):
        return exc
    if isinstance(exc, TemplateNotFound):
        missing = exc.name if isinstance(exc.name, str) else shader
        if missing != shader:  # an {% include %} or {% import %} of a file the package lacks
            line = _template_line(exc.__traceback__, shader)
            return TemplateError(f"includes {missing!r}, which is not in the package", file=shader, line=line)
        return TemplateError("template not found in the package", file=shader)
    if isinstance(exc, TemplateSyntaxError):
        return TemplateError(f"syntax error: {exc.message}", file=exc.name or shader, line=exc.lineno)
    if isinstance(exc, (SecurityError, RecursionError)):
        where = getattr(exc, "template_name", None) or shader
        line = _template_line(exc.__traceback__, where) or getattr(exc, "lineno", None)
        reason = str(exc) if isinstance(exc, SecurityError) else "nested too deeply (recursion)"
        return TemplateSandboxError(f"refused by the sandbox: {reason}", file=where, line=line)
    line = _template_line(exc.__traceback__, shader)
    return TemplateError(f"{type(exc).__name__}: {exc}", file=shader, line=line)


class _PackageLoader(BaseLoader):
    def __init__(self, read: Callable[[str], str]) -> None:
        self._read = read

    def get_source(self, environment: Any, template: str) -> tuple[str, str, Callable[[], bool]]:
        # The name becomes a file name and Jinja's code object file name: letters, digits, . _ -
        # only, so no path, quote, newline or control character gets anywhere (CVE-2024-56201).
        if not isinstance(template, str) or not TEMPLATE_NAME.match(template):
            raise SandboxViolation(f"template name {str(template)[:80]!r} is refused: a file at the top of the "
                                   "package, named with letters, digits, '.', '_' and '-'")  # fmt: skip
        try:
            source = self._read(template)
        except KernelError:
            raise TemplateNotFound(template) from None
        if len(source) > MAX_TEMPLATE_BYTES:
            raise TemplateSandboxError(f"template larger than {MAX_TEMPLATE_BYTES} bytes", file=template)
        return source, template, lambda: True


def _template_line(tb: TracebackType | None, filename: str) -> int | None:
    line = None
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == filename:
            line = tb.tb_lineno
        tb = tb.tb_next
    return line


def template_context(resolved: ResolvedPass, scope: Mapping[str, Any]) -> dict[str, Any]:
    """The names a ``.wgsl.jinja`` template sees (docs/format.md, "Template contract")."""
    hidden = set(NAMESPACES) | set(STATIC_FUNCTIONS) | {"f16Ok"}
    constants = {k: v for k, v in scope.items() if k not in hidden and not isinstance(v, Undefined)}
    bindings = {b.name: b.template_view() for b in resolved.bindings}
    structs = [b.struct.declaration() for b in resolved.bindings if b.struct is not None]
    declarations = "\n".join(structs + [b.declaration() for b in resolved.bindings])
    uses_f16 = "f16" in scope.get("dtypes", {}).values() or any(
        "f16" in (b.element_type or "") or (b.struct and any(t.scalar == "f16" for _, t, _ in b.struct.fields))
        for b in resolved.bindings
    )
    x, y, z = resolved.workgroup_size
    invocations = resolved.invocations_per_workgroup
    context: dict[str, Any] = dict(constants)
    context.update(resolved.source_inputs)
    context.update(
        constants=constants,
        inputs=dict(resolved.source_inputs),
        tunables=dict(scope.get("tunables", {})),
        attrs=dict(scope.get("attrs", {})),
        dtypes=dict(scope.get("dtypes", {})),
        bindings=bindings,
        bindingList=list(bindings.values()),
        declarations=declarations,
        enables="enable f16;" if uses_f16 else "",
        workgroupSize=str(x) if (y, z) == (1, 1) else f"{x}, {y}, {z}",
        workgroupSizeX=x, workgroupSizeY=y, workgroupSizeZ=z,
        workgroupInvocations=invocations,
        entryPoint=resolved.entry_point,
        entryParams=("@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, "
                     "@builtin(local_invocation_index) lix: u32"),  # fmt: skip
        globalIndex=f"(((wid.z * nwg.y + wid.y) * nwg.x + wid.x) * {invocations}u + lix)",
    )
    return context
