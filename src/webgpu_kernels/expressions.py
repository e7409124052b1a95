"""The manifest expression language: Jinja expression syntax, a small allow-listed subset of it,
evaluated in Jinja2's sandboxed environment with strict undefined.

Every expression is parsed once, checked against the allow-list (node types, names, functions,
attribute walks), then compiled once per package and cached by its source text.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from jinja2 import StrictUndefined, TemplateSyntaxError, nodes
from jinja2.exceptions import SecurityError, UndefinedError
from jinja2.parser import Parser
from jinja2.runtime import Undefined
from jinja2.sandbox import SandboxedEnvironment

from .errors import ExpressionError

#: Namespaces an expression can walk into with ``.name``: these hold plain dicts.
NAMESPACES = ("shapes", "ranks", "dtypes", "attrs", "tunables", "device")

# Largest string or sequence an expression may build, and the largest exponent and integer
# result of ``**``/``*``: manifest values are shapes and small numbers, nothing bigger is needed.
MAX_SEQUENCE_LENGTH = 4096
MAX_INT_BITS = 128


def _dim(shape: Any, axis: Any) -> int:
    shape = _as_shape(shape, "dim")
    if not isinstance(axis, int) or isinstance(axis, bool):
        raise ExpressionEvalError(f"dim(): axis must be an integer, got {axis!r}")
    if not -len(shape) <= axis < len(shape):
        raise ExpressionEvalError(f"dim(): axis {axis} is out of range for a shape of rank {len(shape)}")
    return shape[axis]


def _numel(shape: Any) -> int:
    return math.prod(_as_shape(shape, "numel"))


def _same_shape(a: Any, b: Any) -> bool:
    return _as_shape(a, "sameShape") == _as_shape(b, "sameShape")


def _ceil_div(a: Any, b: Any) -> int:
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (a, b)):
        raise ExpressionEvalError(f"ceilDiv() takes numbers, got {a!r} and {b!r}")
    if b == 0:
        raise ExpressionEvalError("ceilDiv(): division by zero")
    return int(-(-a // b))


def _as_shape(value: Any, fn: str) -> tuple[int, ...]:
    if isinstance(value, (tuple, list)) and all(isinstance(d, int) and not isinstance(d, bool) for d in value):
        return tuple(value)
    raise ExpressionEvalError(f"{fn}() expects a shape (a list of integers), got {value!r}")


def _min(*values: Any) -> Any:
    return min(values[0]) if len(values) == 1 else min(values)


def _max(*values: Any) -> Any:
    return max(values[0]) if len(values) == 1 else max(values)


#: Functions every expression may call. ``f16Ok`` depends on the device and is added per device.
STATIC_FUNCTIONS: dict[str, Callable[..., Any]] = {
    "dim": _dim,
    "numel": _numel,
    "sameShape": _same_shape,
    "ceilDiv": _ceil_div,
    "min": _min,
    "max": _max,
}
DEVICE_FUNCTIONS = ("f16Ok",)
FUNCTION_NAMES = frozenset(STATIC_FUNCTIONS) | frozenset(DEVICE_FUNCTIONS)


class ExpressionEvalError(Exception):
    """Raised inside the sandbox by the built-in functions; turned into ExpressionError."""


_ALLOWED_NODES = (
    nodes.Const, nodes.Name, nodes.Getattr, nodes.Getitem, nodes.Compare, nodes.Operand,
    nodes.And, nodes.Or, nodes.Not, nodes.Neg, nodes.Pos, nodes.Add, nodes.Sub, nodes.Mul,
    nodes.Div, nodes.FloorDiv, nodes.Mod, nodes.Pow, nodes.Concat, nodes.CondExpr, nodes.Call,
    nodes.List, nodes.Tuple,
)  # fmt: skip


def _bounded(value: Any) -> Any:
    if isinstance(value, (str, list, tuple)) and len(value) > MAX_SEQUENCE_LENGTH:
        raise SecurityError(f"value of length {len(value)} exceeds the limit of {MAX_SEQUENCE_LENGTH}")
    if isinstance(value, int) and value.bit_length() > MAX_INT_BITS:
        raise SecurityError(f"integer of {value.bit_length()} bits exceeds the limit of {MAX_INT_BITS}")
    return value


class ExpressionSandbox(SandboxedEnvironment):
    """Jinja's sandbox with the growing arithmetic intercepted and bounded.

    Interception also stops Jinja from folding constants at compile time, which would otherwise
    evaluate ``'A' * 10**8`` unchecked inside ``compile``.
    """

    intercepted_binops = frozenset(["*", "**", "+", "%", "//", "/", "-"])
    intercepted_unops = frozenset(["-", "+"])
    _binops = {
        "*": operator.mul, "**": operator.pow, "+": operator.add, "%": operator.mod,
        "//": operator.floordiv, "/": operator.truediv, "-": operator.sub,
    }  # fmt: skip

    def __init__(self) -> None:
        super().__init__(undefined=StrictUndefined, autoescape=False, cache_size=0)

    def call_binop(self, context: Any, operator_name: str, left: Any, right: Any) -> Any:
        for operand in (left, right):
            if isinstance(operand, Undefined):
                operand._fail_with_undefined_error()
        if operator_name == "**" and isinstance(right, (int, float)) and abs(right) > MAX_INT_BITS:
            raise SecurityError(f"exponent {right!r} exceeds the limit of {MAX_INT_BITS}")
        if operator_name == "*":
            for seq, count in ((left, right), (right, left)):
                if isinstance(seq, (str, list, tuple)) and isinstance(count, int):
                    _bounded(seq * 0)  # type check only
                    if len(seq) * max(count, 0) > MAX_SEQUENCE_LENGTH:
                        raise SecurityError("repeating a sequence beyond the length limit")
        return _bounded(self._binops[operator_name](left, right))

    def call_unop(self, context: Any, operator_name: str, arg: Any) -> Any:
        if isinstance(arg, Undefined):
            arg._fail_with_undefined_error()
        return -arg if operator_name == "-" else +arg


_SANDBOX = ExpressionSandbox()


@dataclass(frozen=True)
class Expression:
    """One compiled manifest expression (or a literal value standing for one)."""

    source: str
    where: str
    #: Dotted names the expression reads (``shapes.X``, ``hidden``), for explanations.
    references: tuple[str, ...]
    _compiled: Any = None
    _literal: Any = None

    def evaluate(self, scope: Mapping[str, Any]) -> Any:
        """Evaluate in ``scope``; every failure becomes :class:`ExpressionError`."""
        if self._compiled is None:
            return self._literal
        try:
            context = self._compiled.new_context(scope, shared=True)
            for _ in self._compiled.root_render_func(context):
                pass
            result = context.vars["result"]
            if isinstance(result, Undefined):
                result._fail_with_undefined_error()
            return result
        except ExpressionError:
            raise
        except UndefinedError as exc:
            raise ExpressionError(f"undefined value: {exc}", expression=self.source, where=self.where) from None
        except SecurityError as exc:
            raise ExpressionError(f"refused by the sandbox: {exc}", expression=self.source, where=self.where) from None
        except ExpressionEvalError as exc:
            raise ExpressionError(str(exc), expression=self.source, where=self.where) from None
        except (TypeError, ValueError, ZeroDivisionError, OverflowError, IndexError, KeyError,
                AttributeError, RecursionError) as exc:  # fmt: skip
            raise ExpressionError(f"{type(exc).__name__}: {exc}", expression=self.source, where=self.where) from None

    def peek(self, scope: Mapping[str, Any]) -> dict[str, Any]:
        """The values of the names this expression reads, as far as they resolve (for traces)."""
        seen: dict[str, Any] = {}
        for ref in self.references:
            value: Any = scope
            for part in ref.split("."):
                value = value.get(part) if isinstance(value, Mapping) else None
                if value is None or isinstance(value, Undefined):
                    break
            if value is not None and not isinstance(value, Undefined) and not callable(value):
                seen[ref] = value
        return seen


def literal(value: Any, where: str) -> Expression:
    """An Expression standing for a literal JSON value (numbers, booleans, lists)."""
    return Expression(source=_literal_source(value), where=where, references=(), _literal=value)


def _literal_source(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return repr(value)


class ExpressionCompiler:
    """Parses, checks and compiles expressions; one per package, caching by source text."""

    def __init__(self, known_names: Iterable[str]) -> None:
        self.known_names = frozenset(known_names) | FUNCTION_NAMES | frozenset(NAMESPACES)
        self._cache: dict[str, tuple[Any, tuple[str, ...]]] = {}

    def compile(self, value: Any, where: str) -> Expression:
        """Compile a manifest value: strings are expressions, anything else a literal."""
        if not isinstance(value, str):
            return literal(value, where)
        cached = self._cache.get(value)
        if cached is None:
            cached = self._compile_source(value, where)
            self._cache[value] = cached
        compiled, references = cached
        return Expression(source=value, where=where, references=references, _compiled=compiled)

    def _compile_source(self, source: str, where: str) -> tuple[Any, tuple[str, ...]]:
        if len(source) > MAX_SEQUENCE_LENGTH:
            raise ExpressionError("expression is too long", expression=source[:80] + "...", where=where)
        try:
            parser = Parser(_SANDBOX, source, state="variable")
            tree = parser.parse_expression()
            if not parser.stream.eos:
                raise TemplateSyntaxError("unexpected text after the expression", parser.stream.current.lineno)
        except TemplateSyntaxError as exc:
            raise ExpressionError(f"syntax error: {exc.message}", expression=source, where=where) from None
        references = self._check(tree, source, where)
        body = [nodes.Assign(nodes.Name("result", "store"), tree, lineno=1)]
        template = _SANDBOX.from_string(nodes.Template(body, lineno=1))
        return template, references

    def _check(self, tree: nodes.Node, source: str, where: str) -> tuple[str, ...]:
        """Admit only the allow-listed subset; return the dotted names the expression reads."""
        references: list[str] = []

        def fail(message: str) -> None:
            raise ExpressionError(message, expression=source, where=where)

        def visit(node: nodes.Node) -> None:
            if not isinstance(node, _ALLOWED_NODES):
                fail(f"{type(node).__name__.lower()} is not allowed in manifest expressions")
            if isinstance(node, nodes.Call):
                if not isinstance(node.node, nodes.Name) or node.node.name not in FUNCTION_NAMES:
                    fail(f"only the functions {', '.join(sorted(FUNCTION_NAMES))} can be called")
                if node.kwargs or node.dyn_args or node.dyn_kwargs:
                    fail("functions take positional arguments only")
                for arg in node.args:
                    visit(arg)
                return
            if isinstance(node, nodes.Getattr):
                path = _dotted(node)
                if path is None or path.split(".")[0] not in NAMESPACES:
                    fail(f"attribute access is allowed only on {', '.join(NAMESPACES)}")
                if path.startswith("device.") and not (path == "device.limits" or path.startswith("device.limits.")):
                    fail("only device.limits.<name> can be read from device")
                if "__" in path or "._" in path:
                    fail("names starting with an underscore are not allowed")
                references.append(path)
                return
            if isinstance(node, nodes.Name):
                if node.name.startswith("_") or node.name not in self.known_names:
                    fail(f"unknown name {node.name!r}")
                if node.name not in FUNCTION_NAMES:
                    references.append(node.name)
                return
            if isinstance(node, nodes.Const) and not isinstance(node.value, (int, float, str, bool, type(None))):
                fail("only number, string and boolean literals are allowed")
            for child in node.iter_child_nodes():
                visit(child)

        visit(tree)
        return tuple(dict.fromkeys(references))


def _dotted(node: nodes.Node) -> str | None:
    parts: list[str] = []
    while isinstance(node, nodes.Getattr):
        parts.append(node.attr)
        node = node.node
    if not isinstance(node, nodes.Name):
        return None
    parts.append(node.name)
    return ".".join(reversed(parts))


def failed_value(name: str, error: ExpressionError) -> Undefined:
    """A scope entry for a derive/constant that failed: using it raises with the original reason."""
    return StrictUndefined(hint=f"{name!r} could not be evaluated: {error}")


def is_failed(value: Any) -> bool:
    return isinstance(value, Undefined)


def as_count(value: Any, expression: Expression, what: str) -> int:
    """A non-negative integer from an expression's value: integral floats pass, 10.5 does not."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ExpressionError(f"{what} must be a non-negative integer, got {value!r}",
                              expression=expression.source, where=expression.where)  # fmt: skip
    if isinstance(value, float):
        if not value.is_integer():
            raise ExpressionError(f"{what} must be a non-negative integer, got {value!r}",
                                  expression=expression.source, where=expression.where)  # fmt: skip
        value = int(value)
    if value < 0:
        raise ExpressionError(f"{what} must be a non-negative integer, got {value!r}",
                              expression=expression.source, where=expression.where)  # fmt: skip
    return value
