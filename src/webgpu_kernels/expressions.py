"""The manifest expression language.

Manifest expressions are a small language: Jinja expression syntax, parsed with Jinja's parser,
admitted only if every node is on an allow-list (node types, names, functions, attribute walks
into the documented namespaces), then compiled once per package and cached by source text. They
are evaluated in :class:`ExpressionSandbox`, the bounded sandbox of sandbox.py with the bounds of
manifest values (:data:`MAX_SEQUENCE_LENGTH`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple, NoReturn

from jinja2 import StrictUndefined, TemplateSyntaxError, nodes
from jinja2.exceptions import SecurityError, UndefinedError
from jinja2.exceptions import TemplateError as JinjaTemplateError
from jinja2.parser import Parser
from jinja2.runtime import Undefined

from .errors import BroadcastError, ExpressionError, ExpressionSandboxError, short_repr, shorten
from .manifest import ITEMSIZE, ONNX_TO_WGSL
from .power_syntax import ambiguous_power
from .sandbox import (
    MAX_EXPRESSION_DEPTH,
    MAX_INT_BITS,
    MAX_SEQUENCE_LENGTH,
    MISPLACED_SLICE,
    BoundedSandbox,
    OutOfFloatRange,
    SandboxViolation,
    harden,
    misplaced_slice,
    nested_deeper_than,
    nested_items_exceed,
    tree_depth_error,
)  # fmt: skip

#: Namespaces an expression can walk into with ``.name``: these hold plain dicts.
NAMESPACES = ("shapes", "ranks", "dtypes", "attrs", "tunables", "device")

#: Most distinct expressions one package may hold (each is compiled to Python when it loads; the
#: shipped packages have about 30).
MAX_EXPRESSIONS = 2048
#: Most characters of distinct expression source one package may hold: compiling costs about 50 us
#: a character (CPU machine), and 100 list literals of about 2.3 kB (each under the 4096-character bound)
#: took 12 s to load. The shipped packages hold about 500 characters, the test packages 1.1 kB at most.
MAX_EXPRESSION_CHARS = 64 * 1024


# --- the built-in functions -----------------------------------------------------------------------


def _dim(shape: Any, axis: Any) -> int:
    shape = _as_shape(shape, "dim")
    if not isinstance(axis, int) or isinstance(axis, bool):
        raise ExpressionEvalError(f"dim(): axis must be an integer, got {_short(axis)}")
    if not -len(shape) <= axis < len(shape):
        raise ExpressionEvalError(f"dim(): axis {axis} is out of range for a shape of rank {len(shape)}")
    return shape[axis]


def _numel(shape: Any) -> int:
    dims = _as_shape(shape, "numel")
    if 0 in dims:
        return 0
    product = 1
    for d in dims:  # bounded as it grows: math.prod of 4096 dims of 127 bits takes 0.33-0.38 s (CPU machine)
        product *= d
        if product.bit_length() > MAX_INT_BITS:
            raise SandboxViolation(f"numel(): the product exceeds the limit of {MAX_INT_BITS} bits")
    return product


def _same_shape(a: Any, b: Any) -> bool:
    return _as_shape(a, "sameShape") == _as_shape(b, "sameShape")


def _ceil_div(a: Any, b: Any) -> int:
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (a, b)):
        raise ExpressionEvalError(f"ceilDiv() takes numbers, got {_short(a)} and {_short(b)}")
    if b == 0:
        raise ExpressionEvalError("ceilDiv(): division by zero")
    quotient = -(-a // b)
    if isinstance(quotient, float) and not math.isfinite(quotient):
        raise ExpressionEvalError(f"ceilDiv(): the result {quotient!r} is not a finite number")
    return int(quotient)


#: Bytes of one element by dtype name: the ``dtypes.<T>`` name (``f16``, ``i64``) and the ONNX one (``float16``).
_ITEM_SIZES: dict[str, int] = {**ITEMSIZE, **{wgsl: ITEMSIZE[onnx] for onnx, wgsl in ONNX_TO_WGSL.items() if wgsl}}


def _item_size(dtype: Any) -> int:
    if not isinstance(dtype, str):
        raise ExpressionEvalError(f"itemSize() takes a dtype name (a string), got {_short(dtype)}")
    if dtype not in _ITEM_SIZES:
        raise ExpressionEvalError(f"itemSize(): unknown dtype {_short(dtype)} (known: {', '.join(sorted(_ITEM_SIZES))})")
    return _ITEM_SIZES[dtype]


def _broadcast(shapes: tuple[Any, ...], fn: str) -> tuple[int, ...] | str:
    """NumPy's (and ONNX's multidirectional) broadcast of ``shapes``: their shape, or why not."""
    if not shapes:
        raise ExpressionEvalError(f"{fn}() takes one or more shapes")
    dims = [_as_shape(shape, fn, sizes=True) for shape in shapes]
    if sum(len(d) for d in dims) > MAX_SEQUENCE_LENGTH:
        raise SandboxViolation(f"{fn}() of shapes of more than {MAX_SEQUENCE_LENGTH} dimensions in all")
    rank = max(len(d) for d in dims)
    out = []
    for axis in range(-rank, 0):
        sizes = {d[axis] for d in dims if len(d) >= -axis} - {1}
        if len(sizes) > 1:
            return f"sizes {' and '.join(map(str, sorted(sizes)))} at axis {axis} (counted from the last)"
        out.append(sizes.pop() if sizes else 1)
    return tuple(out)


def _broadcastable(*shapes: Any) -> bool:
    return not isinstance(_broadcast(shapes, "broadcastable"), str)


def _broadcast_shape(*shapes: Any) -> tuple[int, ...]:
    result = _broadcast(shapes, "broadcastShape")
    if isinstance(result, str):
        raise ShapesDoNotBroadcast(tuple(_as_shape(s, "broadcastShape") for s in shapes), result)
    return result


def _broadcast_strides(shape: Any, target: Any) -> tuple[int, ...]:
    dims, out = _as_shape(shape, "broadcastStrides", sizes=True), _as_shape(target, "broadcastStrides", sizes=True)
    if _broadcast((dims, out), "broadcastStrides") != out:
        raise ExpressionEvalError(f"broadcastStrides(): {_short(list(dims))} does not broadcast to {_short(list(out))}")
    strides, step = [0] * len(out), 1
    for axis in range(1, len(dims) + 1):  # C order, from the last axis; a broadcast axis reads one element
        strides[-axis] = step if dims[-axis] != 1 else 0
        step *= dims[-axis]
    return tuple(strides)


def _as_shape(value: Any, fn: str, *, sizes: bool = False) -> tuple[int, ...]:
    """``value`` as a tuple of integers; with ``sizes``, none negative (broadcasting reads them as
    dimensions: a negative one is the manifest's arithmetic, never the caller's shape)."""
    if isinstance(value, Undefined):
        value._fail_with_undefined_error()  # names what is missing (e.g. shapes.Z), not "Undefined"
    if isinstance(value, (tuple, list)) and all(isinstance(d, int) and not isinstance(d, bool) for d in value):
        if sizes and any(d < 0 for d in value):
            raise ExpressionEvalError(f"{fn}() expects sizes of 0 or more, got {_short(value)}")
        return tuple(value)
    raise ExpressionEvalError(f"{fn}() expects a shape (a list of integers), got {_short(value)}")


def _min(*values: Any) -> Any:
    _check_compared(values, "min")
    return min(values[0]) if len(values) == 1 else min(values)


def _max(*values: Any) -> Any:
    _check_compared(values, "max")
    return max(values[0]) if len(values) == 1 else max(values)


def _check_compared(values: tuple[Any, ...], fn: str) -> None:
    # Comparing walks every nested item in one step: bounded as a value is. One argument is the
    # value compared (min(x)), not the argument tuple, which had made a 4096-item list one too many.
    if nested_items_exceed(values[0] if len(values) == 1 else values, MAX_SEQUENCE_LENGTH):
        raise SandboxViolation(f"{fn}() of values of more than {MAX_SEQUENCE_LENGTH} items in all "
                               "(nested lists count every item)")  # fmt: skip


def _short(value: Any) -> str:
    # Never repr() whole: 4095 references to a 4096-character string, 200 times in one list
    # literal, had built 3 GB of text to keep 80 characters of it.
    return short_repr(value)


#: Functions every expression may call. ``f16Ok`` depends on the device and is added per device.
STATIC_FUNCTIONS: dict[str, Callable[..., Any]] = {
    "dim": _dim,
    "numel": _numel,
    "sameShape": _same_shape,
    "ceilDiv": _ceil_div,
    "itemSize": _item_size,
    "broadcastable": _broadcastable,
    "broadcastShape": _broadcast_shape,
    "broadcastStrides": _broadcast_strides,
    "min": _min,
    "max": _max,
}
for _name, _function in STATIC_FUNCTIONS.items():  # Python's "_dim() missing 1 required ..." names them
    _function.__name__ = _function.__qualname__ = _name  # as the language does
DEVICE_FUNCTIONS = ("f16Ok",)
FUNCTION_NAMES = frozenset(STATIC_FUNCTIONS) | frozenset(DEVICE_FUNCTIONS)
#: Names a derive entry or constant may not take: the namespaces, the functions, and ``self``,
#: which Jinja compiles to a reference to the template itself wherever it is read.
RESERVED_NAMES = frozenset(NAMESPACES) | FUNCTION_NAMES | {"self"}


class ExpressionEvalError(Exception):
    """Raised inside the sandbox by the built-in functions; turned into ExpressionError."""


class ShapesDoNotBroadcast(ExpressionEvalError):
    """broadcastShape() of ``shapes`` that do not broadcast (``reason`` says where); ``message``,
    where given, replaces the default one (a failed derive's, which names the derive)."""

    def __init__(self, shapes: tuple[tuple[int, ...], ...], reason: str, message: str = "") -> None:
        super().__init__(message or f"broadcastShape(): {', '.join(_short(list(s)) for s in shapes)} do not "
                                    f"broadcast: {reason}")  # fmt: skip
        self.shapes, self.reason = shapes, reason


class ExpressionSandbox(BoundedSandbox):
    """The sandbox manifest expressions are evaluated in (bounds of :data:`MAX_SEQUENCE_LENGTH`)."""

    def __init__(self) -> None:
        super().__init__(cache_size=0)

    def call_binop(self, context: Any, operator_name: str, left: Any, right: Any) -> Any:
        result = super().call_binop(context, operator_name, left, right)
        if operator_name == "+" and isinstance(result, (list, tuple)):  # [d] + [d] nests as [d, d] does
            self.check_weight(result, "a sum of lists holds")
        return result


_SANDBOX = ExpressionSandbox()

_ALLOWED_NODES = frozenset([
    nodes.Const, nodes.Name, nodes.Getattr, nodes.Getitem, nodes.Compare, nodes.Operand,
    nodes.And, nodes.Or, nodes.Not, nodes.Neg, nodes.Pos, nodes.Add, nodes.Sub, nodes.Mul,
    nodes.Div, nodes.FloorDiv, nodes.Mod, nodes.Pow, nodes.Concat, nodes.CondExpr, nodes.Call,
    nodes.List, nodes.Tuple, nodes.Slice,
])  # fmt: skip


@dataclass(frozen=True)
class Expression:
    """One compiled manifest expression (or a literal value standing for one)."""

    source: str
    where: str
    #: Dotted names the expression reads (``shapes.X``, ``hidden``), for explanations.
    references: tuple[str, ...]
    _compiled: Any = None
    _literal: Any = None
    #: The built-in functions it calls (``f16Ok``, which reads the device, among them).
    calls: tuple[str, ...] = ()
    #: (namespace, name) of each ``'name' in namespace`` or ``not in`` test: a trace of the namespace
    #: names the tested names it lacks (``shapes=[X, Y] (no B)``), which a list of names leaves unsaid.
    membership: tuple[tuple[str, str], ...] = ()

    def evaluate(self, scope: Mapping[str, Any]) -> Any:
        """Evaluate in ``scope``; every failure becomes :class:`ExpressionError`."""
        if self._compiled is None:
            return self._literal
        try:
            context = self._compiled.new_context(scope, shared=True)
            for _ in self._compiled.root_render_func(context):
                pass
            result = context.vars["result"]
            return _bounded(result, "an expression's result holds")
        except ExpressionError:
            raise
        except UndefinedError as exc:
            raise ExpressionError(f"undefined value: {self._absent_tensor(scope) or exc}", expression=self.source,
                                  where=self.where) from None  # fmt: skip
        except SecurityError as exc:
            raise ExpressionSandboxError(f"refused by the sandbox: {exc}", expression=self.source,
                                         where=self.where) from None  # fmt: skip
        except ShapesDoNotBroadcast as exc:
            raise BroadcastError(str(exc), expression=self.source, where=self.where, shapes=exc.shapes,
                                 reason=exc.reason) from None  # fmt: skip
        except ExpressionEvalError as exc:
            raise ExpressionError(str(exc), expression=self.source, where=self.where) from None
        except RecursionError:
            raise ExpressionSandboxError("refused by the sandbox: nested too deeply", expression=self.source,
                                         where=self.where) from None  # fmt: skip
        except OutOfFloatRange as exc:  # its message is the library's own: no exception name before it
            raise ExpressionError(str(exc), expression=self.source, where=self.where) from None
        except (JinjaTemplateError, ArithmeticError, LookupError, TypeError, ValueError, AttributeError,
                MemoryError) as exc:  # fmt: skip
            hint = _JOIN_HINT if isinstance(exc, TypeError) and _TUPLE_AND_LIST.search(str(exc)) else ""
            raise ExpressionError(f"{type(exc).__name__}: {exc}{hint}", expression=self.source,
                                  where=self.where) from None  # fmt: skip

    def _absent_tensor(self, scope: Mapping[str, Any]) -> str | None:
        """Why ``shapes.C`` is undefined, in an author's words: Jinja's own "'dict object' has no
        attribute 'C'" does not say that an optional input the call left out reads this way."""
        for ref in self.references:
            head, _, rest = ref.partition(".")
            role = rest.split(".")[0]
            known = scope.get(head)
            if head in ("shapes", "ranks") and role and isinstance(known, Mapping) and role not in known:
                return (f"{head}.{role}: this call has no tensor {role!r} (an optional input it left out, or not "
                        f"an input or output of the manifest); read it only where `'{role}' in shapes` is true")
        return None

    def peek(self, scope: Mapping[str, Any]) -> dict[str, Any]:
        """The values of the names this expression reads, as far as they resolve (for traces)."""
        seen: dict[str, Any] = {}
        for ref in self.references:
            value: Any = scope
            for part in ref.split("."):
                value = value.get(part) if isinstance(value, Mapping) else None
                if value is None or isinstance(value, Undefined):
                    break
            if isinstance(value, Mapping):  # a namespace read whole (`'B' in shapes`): its names, and
                names = NamespaceNames(value)  # those tested for that it lacks
                names.absent = tuple(dict.fromkeys(n for ns, n in self.membership if ns == ref and n not in value))
                value = names
            if value is not None and not isinstance(value, Undefined) and not callable(value):
                seen[ref] = value
        return seen


#: `shapes.X[:-1] + [1]` is the natural way to write a reduced shape, and Python refuses it.
_TUPLE_AND_LIST = re.compile(r'can only concatenate (tuple \(not "list"\)|list \(not "tuple"\))')
_JOIN_HINT = (" (a shape such as shapes.X is a tuple, and `+` joins a tuple only to a tuple: write "
              "`shapes.X[:-1] + (1,)`)")


class NamespaceNames(list):
    """The names of a namespace an expression read whole (a trace shows them unquoted, in full);
    ``absent``: the names an ``in``/``not in`` of the expression tested for that it lacks."""

    __slots__ = ("absent",)

    def __init__(self, names: Iterable[str] = (), absent: tuple[str, ...] = ()) -> None:
        super().__init__(names)
        self.absent = absent


def _bounded(value: Any, what: str) -> Any:
    """``value`` if it is a value within the bounds, an expression's result or a JSON literal alike;
    else SandboxViolation (or the undefined value's own error)."""
    # Bounded through every nesting level (later expressions compare, index and print a value;
    # derive entries could otherwise nest references: b = [a] * 8, c = [b] * 8, ... or [[a]], [[b]]).
    _SANDBOX.check_weight(value, what)
    if nested_deeper_than(value, MAX_EXPRESSION_DEPTH):
        raise SandboxViolation(f"a value nested more than {MAX_EXPRESSION_DEPTH} levels deep")
    _check_items(value)
    return value


def _check_items(value: Any) -> None:
    """Each item within the sandbox's bounds (128-bit integers, 4096-item strings and lists), and
    neither a function nor an undefined value, alone or inside a list (``[dim]``, ``[shapes.Z]``):
    either would reach traces, JSON output and templates as a Python object."""
    if isinstance(value, Undefined):
        value._fail_with_undefined_error()  # names what is missing, as it does at the top level
    if callable(value):
        raise SandboxViolation("a function is not a value (call it)")
    _SANDBOX.check_value(value)
    if isinstance(value, (list, tuple, Mapping)):  # at most MAX_EXPRESSION_DEPTH deep (_bounded)
        for item in value.values() if isinstance(value, Mapping) else value:
            _check_items(item)


def divides_truly(source: str) -> bool:
    """Whether an expression uses ``/`` (true division: a float) rather than ``//``, other than
    under ``| int``, which makes the float an integer again; False for one that does
    not parse (its compile error is reported where it is checked)."""

    def found(node: nodes.Node, converted: bool) -> bool:
        if isinstance(node, nodes.Div) and not converted:
            return True
        converted = converted or (isinstance(node, nodes.Filter) and node.name == "int")
        return any(found(child, converted) for child in node.iter_child_nodes())

    try:
        tree = Parser(_SANDBOX, source, state="variable").parse_expression()
    except TemplateSyntaxError:
        return False
    return found(tree, False)


def literal(value: Any, where: str) -> Expression:
    """An Expression standing for a literal JSON value (numbers, booleans, lists), held to the
    bounds an expression's value is (``"derive": {"big": 2**200}`` as JSON, not as ``"2**200"``)."""
    try:
        _bounded(value, "a literal holds")
    except SandboxViolation as exc:
        raise ExpressionSandboxError(f"refused by the sandbox: {exc}", expression="(a JSON literal)",
                                     where=where) from None  # fmt: skip  # repr() of 10**5000 fails
    return Expression(source=_literal_source(value), where=where, references=(), _literal=value)


def _literal_source(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return repr(value)


# Brackets without quotes or ~: a half-quoted concatenation ("vec4<\" ~ dtypes.T ~ \">") would get a hint still wrong.
_WGSL_TYPE = re.compile(r"""^\s*(bool|[fiu]32|f16|(vec[234]|mat[234]x[234])[fhiu]?|array|atomic|ptr)(<[^"'~]*>)?\s*$""")


def _quote_hint(source: str) -> str:
    """The commonest slip in a constant: a WGSL type name meant as a string (``"vec4<f32>"``)."""
    return f" (a string is quoted inside the JSON string: \"'{source.strip()}'\")" if _WGSL_TYPE.match(source) else ""


class _Reads(NamedTuple):
    """What an expression's syntax tree shows it reads, found once when it is compiled."""

    references: tuple[str, ...]  # the dotted names (``shapes.X``)
    calls: tuple[str, ...]  # the built-in functions it calls
    membership: tuple[tuple[str, str], ...]  # (namespace, name) of each ``'name' in namespace`` / ``not in``


class _Compiled(NamedTuple):
    """The compiler's cache entry for one source text."""

    template: Any
    reads: _Reads


class ExpressionCompiler:
    """Parses, checks and compiles expressions; one per package, caching by source text."""

    def __init__(self, known_names: Iterable[str]) -> None:
        self.known_names = frozenset(known_names) | FUNCTION_NAMES | frozenset(NAMESPACES)
        self._cache: dict[str, _Compiled] = {}
        self._chars = 0  # of the sources in _cache

    def compile(self, value: Any, where: str) -> Expression:
        """Compile a manifest value: strings are expressions, anything else a literal."""
        if not isinstance(value, str):
            return literal(value, where)
        cached = self._cache.get(value)
        if cached is None:
            if len(self._cache) >= MAX_EXPRESSIONS:
                raise ExpressionSandboxError(f"the package has more than {MAX_EXPRESSIONS} distinct expressions",
                                             expression=value[:80], where=where)  # fmt: skip
            # (an expression too long on its own gets that error from _compile_source instead)
            if self._chars + len(value) > MAX_EXPRESSION_CHARS and len(value) <= MAX_SEQUENCE_LENGTH:
                raise ExpressionSandboxError(f"the package's expressions hold more than {MAX_EXPRESSION_CHARS} "
                                             "characters together", expression=value[:80], where=where)  # fmt: skip
            cached = self._compile_source(value, where)
            self._cache[value] = cached
            self._chars += len(value)
        reads = cached.reads
        return Expression(source=value, where=where, references=reads.references, _compiled=cached.template,
                          calls=reads.calls, membership=reads.membership)  # fmt: skip

    def _compile_source(self, source: str, where: str) -> _Compiled:
        if len(source) > MAX_SEQUENCE_LENGTH:
            raise ExpressionSandboxError(f"expression is longer than {MAX_SEQUENCE_LENGTH} characters",
                                         expression=source[:80] + "...", where=where)  # fmt: skip
        try:
            ambiguous = ambiguous_power(_SANDBOX.lexer.tokeniter(source, None, state="variable"))
            if ambiguous is not None:
                raise TemplateSyntaxError(ambiguous[1], ambiguous[0])
            parser = Parser(_SANDBOX, source, state="variable")
            tree = parser.parse_expression()
            if not parser.stream.eos:
                raise TemplateSyntaxError("unexpected text after the expression", parser.stream.current.lineno)
        except TemplateSyntaxError as exc:
            raise ExpressionError(f"syntax error: {exc.message}{_quote_hint(source)}", expression=source,
                                  where=where) from None  # fmt: skip
        except RecursionError:
            raise ExpressionSandboxError(f"nested more than {MAX_EXPRESSION_DEPTH} levels deep", expression=source,
                                         where=where) from None  # fmt: skip
        reads = self._check(tree, source, where)
        body = [nodes.Assign(nodes.Name("result", "store"), harden(tree, template=False), lineno=1)]
        try:
            template = _SANDBOX.from_string(nodes.Template(body, lineno=1))
        except (RecursionError, SyntaxError, MemoryError) as exc:
            raise ExpressionSandboxError(f"cannot be compiled ({type(exc).__name__})", expression=source,
                                         where=where) from None  # fmt: skip
        return _Compiled(template, reads)

    def _check(self, tree: nodes.Node, source: str, where: str) -> _Reads:
        """Admit only the allow-listed subset; return the dotted names the expression reads, the
        functions it calls and the (namespace, name) pairs its ``'name' in namespace`` tests name."""
        references: list[str] = []
        calls: list[str] = []
        membership: list[tuple[str, str]] = []

        def refuse(message: str) -> NoReturn:
            raise ExpressionSandboxError(message, expression=source, where=where)

        too_deep = tree_depth_error(tree, MAX_EXPRESSION_DEPTH)
        if too_deep is not None:
            refuse(f"nested more than {MAX_EXPRESSION_DEPTH} levels deep")
        if misplaced_slice(tree) is not None:
            refuse(MISPLACED_SLICE)

        def visit(node: nodes.Node) -> None:
            if type(node) not in _ALLOWED_NODES:
                refuse(f"{type(node).__name__.lower()} is not allowed in manifest expressions")
            if isinstance(node, nodes.Call):
                if not isinstance(node.node, nodes.Name) or node.node.name not in FUNCTION_NAMES:
                    refuse(f"only the functions {', '.join(sorted(FUNCTION_NAMES))} can be called")
                if node.kwargs or node.dyn_args or node.dyn_kwargs:
                    refuse("functions take positional arguments only")
                calls.append(node.node.name)
                for arg in node.args:
                    visit(arg)
                return
            if isinstance(node, nodes.Getattr):
                path = _dotted(node)
                if path is None or path.split(".")[0] not in NAMESPACES:
                    refuse(f"attribute access is allowed only on {', '.join(NAMESPACES)}")
                if path.startswith("device.") and not (path in ("device.limits", "device.features")
                                                       or path.startswith("device.limits.")):  # fmt: skip
                    refuse("only device.limits.<name> and device.features can be read from device")
                if "._" in path:  # a part starting with _ (an inner "__", attrs.a__b, is an identifier as any)
                    refuse("names starting with an underscore are not allowed")
                references.append(path)
                return
            if (isinstance(node, nodes.Getitem) and isinstance(node.node, nodes.Name) and node.node.name in NAMESPACES
                    and isinstance(node.arg, nodes.Const) and isinstance(node.arg.value, str)):
                references.append(f"{node.node.name}.{node.arg.value}")  # shapes['Z'] reads what shapes.Z reads
            if isinstance(node, nodes.Compare):
                left = node.expr
                for operand in node.ops:  # a chain's links: each compares the previous operand
                    if (operand.op in ("in", "notin") and isinstance(left, nodes.Const) and isinstance(left.value, str)
                            and isinstance(operand.expr, nodes.Name) and operand.expr.name in NAMESPACES):  # fmt: skip
                        membership.append((operand.expr.name, left.value))
                    left = operand.expr
            if isinstance(node, nodes.Name):
                if node.name.startswith("_"):
                    refuse(f"unknown name {node.name!r}: names starting with an underscore are not allowed")
                if node.name not in self.known_names:
                    raise ExpressionError(f"unknown name {node.name!r}{_quote_hint(source)}", expression=source,
                                          where=where)  # fmt: skip
                if node.name not in FUNCTION_NAMES:
                    references.append(node.name)
                return
            if isinstance(node, nodes.Const):
                value = node.value
                if not isinstance(value, (int, float, str, bool, type(None))):
                    refuse("only number, string and boolean literals are allowed")
                if isinstance(value, int) and value.bit_length() > MAX_INT_BITS:
                    refuse(f"an integer literal of more than {MAX_INT_BITS} bits")
                if isinstance(value, float) and not math.isfinite(value):  # 1e400: Jinja would emit the name inf
                    refuse("a float literal past the float64 range")
            for child in node.iter_child_nodes():
                visit(child)

        visit(tree)
        return _Reads(tuple(dict.fromkeys(references)), tuple(dict.fromkeys(calls)), tuple(dict.fromkeys(membership)))


def _dotted(node: nodes.Node) -> str | None:
    parts: list[str] = []
    while isinstance(node, nodes.Getattr):
        parts.append(node.attr)
        node = node.node
    if not isinstance(node, nodes.Name):
        return None
    parts.append(node.name)
    return ".".join(reversed(parts))


#: Most characters of a failed entry's reason kept in its error (an entry reading a failed one
#: embeds that one's error: a chain of N would otherwise hold N^2 characters).
MAX_REASON_CHARS = 1000


def failed_value(name: str, error: ExpressionError) -> Undefined:
    """A scope entry for a derive/constant that failed: using it raises with the original reason."""
    reason = shorten(str(error), MAX_REASON_CHARS)
    hint = f"{shorten(name)!r} could not be evaluated: {reason}"
    if isinstance(error, BroadcastError):  # still the inputs' fault where an output's shape reads it
        return _FailedBroadcast(hint=hint, broadcast=(error.shapes, error.reason))
    return StrictUndefined(hint=hint)


class _FailedBroadcast(StrictUndefined):
    """A derive whose broadcastShape() failed: reading it fails as that call did, so that an
    output shape reading the derive is refused as the inputs' error too (a BroadcastError), with
    the message of any other failed derive ("'s' could not be evaluated: derive.s: ...")."""

    __slots__ = ("_broadcast",)

    def __init__(self, *, hint: str, broadcast: tuple[tuple[tuple[int, ...], ...], str]) -> None:
        super().__init__(hint=hint)
        self._broadcast = broadcast

    def _fail_with_undefined_error(self, *args: Any, **kwargs: Any) -> Any:
        raise ShapesDoNotBroadcast(*self._broadcast, message=self._undefined_hint or "")


def as_count(value: Any, expression: Expression, what: str, *, least: int = 0) -> int:
    """An integer of at least ``least`` from an expression's value: integral floats pass, 10.5 does
    not. One rule said for every value refused (a workgroup size of -5 had been told "must be a
    non-negative integer", which 0 is, and 0 "must be at least 1")."""
    rule = "a non-negative integer" if least == 0 else f"an integer of at least {least}"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ExpressionError(f"{what} must be {rule}, got {_short(value)}",
                              expression=expression.source, where=expression.where)  # fmt: skip
    if isinstance(value, float):
        if not value.is_integer():
            raise ExpressionError(f"{what} must be {rule}, got {value!r}",
                                  expression=expression.source, where=expression.where)  # fmt: skip
        value = int(value)
    if value < least:
        raise ExpressionError(f"{what} must be {rule}, got {value!r}",
                              expression=expression.source, where=expression.where)  # fmt: skip
    return value
