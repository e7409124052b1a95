"""The bounded Jinja sandbox that manifest expressions and WGSL templates both run in.

:class:`BoundedSandbox` is Jinja2's sandbox with what that sandbox leaves open closed (Jinja
documents that its sandbox bounds no resources):

- the arithmetic that can grow values (``* ** + % // / -``) is intercepted: operand and result
  sizes are checked *before* anything is computed, ``%`` string formatting is refused, and an
  intercepted operator is never folded at compile time (``'A' * 10**8`` allocates nothing);
- ``~`` concatenation is compiled into a bounded join (:func:`harden` rewrites ``Concat`` nodes);
- attribute and item access walk only mappings (and, in templates, loop and module objects):
  no attribute of a string, number, list or function is reachable, so no ``format``,
  ``format_map``, ``__class__``, ``__globals__`` or ``mro`` walk exists;
- calls reach only an allow-list (checked at run time, whatever the syntax);
- in templates, loop iterations, macro calls, includes and text built or written are charged to
  a per-render budget with a wall-clock deadline (:class:`RenderBudget`).

The expression language (expressions.py) and the template environment (templates.py) subclass
it with their own bounds and allow-lists. docs/security.md states the guarantees and their limits.
"""

from __future__ import annotations

import contextvars
import dataclasses
import operator
import time
import types
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, cast

from jinja2 import StrictUndefined, nodes
from jinja2.compiler import CodeGenerator, Frame
from jinja2.exceptions import SecurityError, TemplateRuntimeError
from jinja2.runtime import LoopContext, Undefined
from jinja2.sandbox import SandboxedEnvironment

from .errors import short_repr, shorten, type_name
from .value_names import a_value_name, a_value_told, advice_for

# Largest string or sequence an expression may build (and the longest expression source), the
# largest integer (in bits) and the deepest nesting: manifest values are shapes and small numbers.
MAX_SEQUENCE_LENGTH = 4096
MAX_INT_BITS = 128
MAX_EXPRESSION_DEPTH = 32


class SandboxViolation(SecurityError):
    """Raised inside a sandbox when something is refused (a construct or a resource bound).

    A :class:`jinja2.exceptions.SecurityError`, so it passes through Jinja unchanged; the
    expression and template front ends turn it into the library's sandbox errors. ``lineno``
    is set where the refusal is known at compile time.
    """

    def __init__(self, message: str, lineno: int | None = None) -> None:
        super().__init__(message)
        self.lineno = lineno


class TemplateMistake(TemplateRuntimeError):
    """A template's mistake told in the library's words (templates.template_error shows the message as
    it is, at the template's line): a mistake, not a refusal of the sandbox's."""


def refuse_iterating(value: Any) -> None:
    """Refuse to iterate the loop variable. Jinja's loop object iterates over the items its loop has
    left, taking them: ``loop|list`` had rendered ``[]`` on a loop's last iteration, ``2 in loop``
    False, ``loop|length`` the items left, and each ended the loop early without a word."""
    if isinstance(value, LoopContext):
        raise TemplateMistake("the loop variable cannot be iterated: its items are the rest of the loop's, which "
                              "iterating would take, ending the loop early; read its attributes instead, as in "
                              "loop.index, loop.length, loop.last, loop.nextitem")  # fmt: skip


def _not_a_mapping(value: Any) -> str:
    return f"the argument after ** must be a mapping of keyword arguments, not {a_value_told(value) or a_value_name(value)}"


class _KeywordMistake:
    """A call's ``**`` mistake (no mapping, or a keyword it gives again), carried to
    :meth:`BoundedSandbox.call` under the keyword :data:`_NOT_A_MAPPING` (no keyword a template
    writes): the callee is known only there. Python's own messages named the function the
    arguments were passed to, the sandbox's call() or a filter's."""

    __slots__ = ("problem",)

    def __init__(self, problem: str) -> None:
        self.problem = problem


_NOT_A_MAPPING = "**"


class OutOfFloatRange(ArithmeticError):
    """An operator whose float result is past float64's range. Python's float ``**`` raises
    OverflowError in the C library's words ("(34, 'Numerical result out of range')") where ``*``
    gives inf; the expression and template front ends show this message as it is."""


# --- per-render budget ----------------------------------------------------------------------------

#: Work units one template render may spend: each loop iteration costs the node count of the loop
#: body (so an iteration's uncharged work is bounded by the template's size), each call
#: CALL_COST, each macro call and each include also the node count of what runs.
MAX_RENDER_WORK = 500_000
CALL_COST = 32
#: Work units of one attempt to load a template (a package file lookup, about 0.4 ms): `{% include
#: names %}` tries each name of a list, and 100,000 of them had taken 20 s outside any charge.
LOAD_COST = 256
#: Characters of text one render may build or write in all (values, macro bodies, output).
MAX_RENDER_TEXT = 64 * 1024 * 1024
#: Wall-clock seconds one render may take (checked at each charge).
MAX_RENDER_SECONDS = 10.0


@dataclass
class RenderBudget:
    """What one template render has spent; every loop iteration, call and text is charged here."""

    work_limit: int = MAX_RENDER_WORK
    text_limit: int = MAX_RENDER_TEXT
    # read when a render starts, not when this module is imported: a test suite on a loaded machine
    # lengthens it (tests/conftest.py), where the limits that count must be what stops a render
    seconds: float = dataclasses.field(default_factory=lambda: MAX_RENDER_SECONDS)
    work: int = 0
    text: int = 0
    deadline: float = 0.0
    #: (template name, line, literal text?) of the last piece of output emitted: read after each
    #: piece the top-level stream yields, it maps rendered WGSL back to template lines.
    location: tuple[str | None, int, bool] = (None, 0, False)

    def __post_init__(self) -> None:
        self.deadline = time.monotonic() + self.seconds

    def charge(self, units: int) -> None:
        self.work += units
        if self.work > self.work_limit:
            raise SandboxViolation(f"the template does more than {self.work_limit} units of work "
                                   "(loop iterations weighted by the loop body's size, calls, includes)")  # fmt: skip
        if time.monotonic() > self.deadline:
            raise SandboxViolation(f"rendering took longer than {self.seconds:g} s")

    def build(self, chars: int) -> None:
        self.text += chars
        if self.text > self.text_limit:
            raise SandboxViolation(f"the template builds more than {self.text_limit} characters of text in all")


_BUDGET: contextvars.ContextVar[RenderBudget | None] = contextvars.ContextVar("webgpu_kernels_budget", default=None)


@contextmanager
def render_budget(budget: RenderBudget | None = None) -> Iterator[RenderBudget]:
    """Make a budget current for this thread (a fresh one, unless a render is already running)."""
    current = _BUDGET.get()
    if current is not None:
        yield current
        return
    budget = budget or RenderBudget()
    token = _BUDGET.set(budget)
    try:
        yield budget
    finally:
        _BUDGET.reset(token)


def _charge(units: int) -> None:
    budget = _BUDGET.get()
    if budget is not None:
        budget.charge(units)


def charge_work(units: int) -> None:
    """Charge ``units`` of work to the current render's budget (if a render runs)."""
    _charge(units)


def charge_text(chars: int) -> None:
    """Charge ``chars`` characters of text built to the current render's budget (if a render runs)."""
    budget = _BUDGET.get()
    if budget is not None:
        budget.build(chars)


# --- the bounded sandbox --------------------------------------------------------------------------


def _is_index(value: Any) -> bool:
    """An int usable as an index or slice bound (a bool is refused: ``x[true]`` is a slip)."""
    return isinstance(value, int) and not isinstance(value, bool)


def nested_items_exceed(value: Any, limit: int, text_limit: int | None = None) -> bool:
    """Whether ``value`` holds more than ``limit`` items counted through every level of nesting
    (a list repeated by reference counts each time); stops counting past ``limit``. With
    ``text_limit``, also whether its strings hold more than that many characters in all, counted
    the same way: comparing ``[s] * 100000`` with another such list, or taking its ``max`` (which
    lowercases every item), walks every character of every reference to ``s``."""
    if isinstance(value, str):
        return text_limit is not None and len(value) > text_limit
    if not isinstance(value, (list, tuple, dict)):
        return False
    count, text, stack = 0, 0, [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            item = [part for pair in item.items() for part in pair]
        count += len(item)
        if count > limit:
            return True
        for i in item:
            if isinstance(i, (list, tuple, dict)):
                stack.append(i)
            elif text_limit is not None and isinstance(i, str):
                text += len(i)
                if text > text_limit:
                    return True
    return False


def nested_deeper_than(value: Any, limit: int) -> bool:
    """Whether ``value`` nests lists, tuples or dicts more than ``limit`` levels deep (iteratively:
    a deep value is what would overflow a recursive walk, repr() included)."""
    stack = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, (list, tuple, dict)):
            if depth >= limit:
                return True
            children = (p for pair in item.items() for p in pair) if isinstance(item, dict) else item
            stack.extend((child, depth + 1) for child in children if isinstance(child, (list, tuple, dict)))
    return False


class _Internal:
    """A function the hardened code calls through ``environment.<name>`` (never reachable by name)."""

    __slots__ = ("fn",)

    def __init__(self, fn: Callable[..., Any]) -> None:
        self.fn = fn

    def __repr__(self) -> str:
        return f"<sandbox {self.fn.__name__}>"


_NUMBER = (int, float)
_BINOPS = {
    "*": operator.mul, "**": operator.pow, "+": operator.add, "%": operator.mod,
    "//": operator.floordiv, "/": operator.truediv, "-": operator.sub,
}  # fmt: skip


class _LineMarkingCodeGenerator(CodeGenerator):
    """Jinja's code generator, marking a ``{% with %}``'s own line before its values: Jinja marks none
    there, so an error in a value had been told at the statement before the ``{% with %}``."""

    def visit_With(self, node: nodes.With, frame: Frame) -> None:
        self.newline(node)
        super().visit_With(node, frame)


class BoundedSandbox(SandboxedEnvironment):
    """Jinja's sandbox with growth, access and calls bounded (see the module docstring).

    Subclasses set the size bounds and widen access for templates.
    """

    #: Longest string a value may be, in characters.
    max_text = MAX_SEQUENCE_LENGTH
    #: Most items a list or tuple (or a range, a loop) may hold.
    max_items = MAX_SEQUENCE_LENGTH
    #: Largest integer, in bits.
    max_int_bits = MAX_INT_BITS
    #: Most characters of text a compared, hashed or max/min value may hold in all, counted
    #: through every nesting level (None: not bounded; an expression's strings and lists are so
    #: short that comparing the largest costs milliseconds).
    max_weight_text: int | None = None

    intercepted_binops = frozenset(_BINOPS)
    intercepted_unops = frozenset(["-", "+"])
    code_generator_class = _LineMarkingCodeGenerator

    def __init__(self, **options: Any) -> None:
        options.setdefault("undefined", StrictUndefined)
        options.setdefault("autoescape", False)
        # No compile-time constant folding by the optimizer: nothing is evaluated before the
        # bounds apply (intercepted operators and the hardened nodes are never folded either).
        options.setdefault("optimized", False)
        super().__init__(**options)

    # --- values ---------------------------------------------------------------------------------

    def refuse(self, message: str) -> SandboxViolation:
        return SandboxViolation(message)

    def check_value(self, value: Any) -> Any:
        """``value`` if it is within the bounds; else the sandbox refuses it."""
        if isinstance(value, str):
            if len(value) > self.max_text:
                raise self.refuse(f"a string of {len(value)} characters exceeds the limit of {self.max_text}")
        elif isinstance(value, bool) or value is None or isinstance(value, float):
            pass
        elif isinstance(value, int):
            if value.bit_length() > self.max_int_bits:
                raise self.refuse(f"an integer of {value.bit_length()} bits exceeds the limit of {self.max_int_bits}")
        elif isinstance(value, (list, tuple)):
            if len(value) > self.max_items:
                raise self.refuse(f"a sequence of {len(value)} items exceeds the limit of {self.max_items}")
        elif isinstance(value, complex):
            raise self.refuse("complex numbers are not values here")
        return value

    def text_size(self, value: Any, limit: int, depth: int = 0) -> int:
        """An upper bound of ``len(str(value))``, computed without building it (stops past ``limit``)."""
        if isinstance(value, str):
            return len(value)
        if value is None or isinstance(value, (bool, float)):
            return 24
        if isinstance(value, int):
            return value.bit_length() // 3 + 2
        if isinstance(value, Undefined):
            value._fail_with_undefined_error()
        if isinstance(value, range):
            return 48
        if isinstance(value, (list, tuple, dict)):
            if depth > MAX_EXPRESSION_DEPTH:
                raise self.refuse("a value nested too deeply to convert to text")
            items: Iterable[Any] = value
            if isinstance(value, dict):
                items = (part for pair in value.items() for part in pair)
            total = 2
            for item in items:
                if isinstance(item, str):  # repr() inside a container: quotes and escapes
                    total += len(item) + 2 if item.isprintable() else 10 * len(item) + 2
                else:
                    total += self.text_size(item, limit - total, depth + 1)
                total += 2
                if total > limit:
                    break
            return total
        advice = advice_for(value)  # range, a macro, the loop variable ...: what to write instead
        raise self.refuse(f"{a_value_name(value)} cannot be converted to text{f' ({advice})' if advice else ''}")

    def check_weight(self, value: Any, what: str) -> Any:
        """``value`` if it holds at most ``max_items`` items counted through every nesting level, else
        refused. Comparing, hashing or searching a value walks all of them in one uninterruptible
        step; ``[[[0]*4096]*4096]*4096`` is three short lists of references that compare 2^36 items."""
        if not nested_items_exceed(value, self.max_items, self.max_weight_text):  # one walk for both bounds
            return value
        if nested_items_exceed(value, self.max_items):  # refused: which bound, for the message
            raise self.refuse(f"{what} values of more than {self.max_items} items in all (nested lists count "
                              "every item)")  # fmt: skip
        raise self.refuse(f"{what} values holding more than {self.max_weight_text} characters of text in all "
                          "(a string repeated in a list counts each time)")  # fmt: skip

    def to_text(self, value: Any) -> str:
        """``str(value)``, refused before building if it would exceed the text bound."""
        if isinstance(value, str):
            return self.check_value(value)
        size = self.text_size(value, self.max_text)
        if size > self.max_text:
            raise self.refuse(
                f"converting {a_value_name(value)} to text exceeds the limit of {self.max_text} characters"
            )
        return self.check_value(str(value))

    def take(self, value: Any) -> Any:
        """``value`` as a sized sequence of at most ``max_items`` items (iterating at most that far)."""
        if isinstance(value, Undefined):
            value._fail_with_undefined_error()
        refuse_iterating(value)
        if isinstance(value, (list, tuple, range, str)):
            if len(value) > self.max_items:
                if isinstance(value, str):  # bounded by the text limit where built, by the item limit as items
                    raise self.refuse(f"a string of {len(value)} characters exceeds the limit of {self.max_items} "
                                      "items")  # fmt: skip
                raise self.refuse(f"a sequence of {len(value)} items exceeds the limit of {self.max_items}")
            return value
        if isinstance(value, Mapping):
            value = value.keys()
        items = []
        for item in value:
            items.append(item)
            if len(items) > self.max_items:
                raise self.refuse(f"a sequence of more than {self.max_items} items")
        return items

    # --- operators ------------------------------------------------------------------------------

    def call_binop(self, context: Any, operator_name: str, left: Any, right: Any) -> Any:
        for operand in (left, right):
            if isinstance(operand, Undefined):
                operand._fail_with_undefined_error()
        self._precheck(operator_name, left, right)
        try:
            result = self.check_value(_BINOPS[operator_name](left, right))
        except OverflowError:  # operands are numbers here: a sequence's repetition was checked above
            raise OutOfFloatRange(f"{short_repr(left, 40)} {operator_name} {short_repr(right, 40)} is past "
                                  "float64's range: expected a result within float64's range (at most about "
                                  "1.8e308 in magnitude); test the operands before the operation") from None  # fmt: skip
        if isinstance(result, (str, list, tuple)):
            charge_text(len(result))
        return result

    def _precheck(self, op: str, left: Any, right: Any) -> None:
        """Refuse, before computing, what would exceed the bounds."""
        if op == "%" and isinstance(left, str):
            raise self.refuse("string formatting with % is not allowed")
        if op == "*":
            for seq, count in ((left, right), (right, left)):
                if isinstance(seq, (str, list, tuple)) and isinstance(count, int):
                    limit = self.max_text if isinstance(seq, str) else self.max_items
                    if len(seq) * max(count, 0) > limit:
                        raise self.refuse(f"repeating a sequence of {len(seq)} items {count} times exceeds "
                                          f"the limit of {limit}")  # fmt: skip
                    # Items nested inside count too: [[0] * 4096] * 4096 is short, and 2^24 items
                    # to compare, hash or walk.
                    if count > 0 and not isinstance(seq, str) and nested_items_exceed(seq, limit // count):
                        raise self.refuse(f"repeating a sequence {count} times exceeds the limit of {limit} "
                                          "items in all (nested lists count every item)")  # fmt: skip
            if isinstance(left, int) and isinstance(right, int):
                if left.bit_length() + right.bit_length() > 2 * self.max_int_bits + 2:
                    raise self.refuse(f"the product exceeds the limit of {self.max_int_bits} bits")
        elif op == "+":
            if isinstance(left, (str, list, tuple)) and isinstance(right, (str, list, tuple)):
                limit = self.max_text if isinstance(left, str) else self.max_items
                if len(left) + len(right) > limit:
                    raise self.refuse(
                        f"joining sequences of {len(left)} and {len(right)} items exceeds the limit of {limit}"
                    )
        elif op == "**":
            if isinstance(right, _NUMBER) and not isinstance(right, bool) and abs(right) > self.max_int_bits:
                raise self.refuse(f"exponent {right!r} exceeds the limit of {self.max_int_bits}")
            if isinstance(left, int) and isinstance(right, int) and right > 0:
                if (left.bit_length() - 1) * right > self.max_int_bits + 1:
                    raise self.refuse(f"the power exceeds the limit of {self.max_int_bits} bits")

    def call_unop(self, context: Any, operator_name: str, arg: Any) -> Any:
        if isinstance(arg, Undefined):
            arg._fail_with_undefined_error()
        return -arg if operator_name == "-" else +arg

    # --- access ---------------------------------------------------------------------------------

    def getattr(self, obj: Any, attribute: str) -> Any:
        if isinstance(obj, Undefined):
            obj._fail_with_undefined_error()
        if isinstance(obj, Mapping):
            if attribute in obj:
                return obj[attribute]
            return self.undefined(obj=obj, name=attribute)
        return self._other_attribute(obj, attribute)

    def _other_attribute(self, obj: Any, attribute: str) -> Any:
        # (built at once: `[1][s]` of a 1 MiB s in a loop had built 1 MiB per iteration)
        return self.undefined(f"attribute {short_repr(attribute, 60)} of {a_value_name(obj)} is not accessible here",
                              name=attribute, exc=SecurityError)  # fmt: skip

    def getitem(self, obj: Any, argument: Any) -> Any:
        if isinstance(obj, Undefined):
            obj._fail_with_undefined_error()
        if isinstance(argument, Undefined):  # its own reason (a failed derive entry's), not "cannot be indexed"
            argument._fail_with_undefined_error()
        if isinstance(obj, Mapping):
            self.check_weight(argument, "looking up")  # hashing a key walks all of it
            try:
                return obj[argument]
            except TypeError:  # unhashable: a list or dict is no key (Jinja's words: "has no attribute '<list>'")
                return self._not_a_key(obj, argument)
            except KeyError:  # name a key that is not a plain value by its type (no repr, no address)
                if isinstance(argument, tuple) and not self._holds_tuple_keys(obj):
                    return self._not_a_key(obj, argument)  # only a template's own dict literal can hold one
                shown = argument if isinstance(argument, (int, float, type(None))) else f"<{type_name(argument)}>"
                if isinstance(argument, str):
                    shown = shorten(argument, 60)  # a template's key may be 1 MiB long
                return self.undefined(obj=obj, name=shown)  # type: ignore[arg-type]  # Jinja names items by any key
        if isinstance(obj, (list, tuple, str, range)):
            if _is_index(argument):
                try:
                    return obj[argument]
                except IndexError:
                    return self.undefined(obj=obj, name=argument)
            if isinstance(argument, str):
                return self.getattr(obj, argument)
            return self.undefined(f"{a_value_name(obj)} cannot be indexed by {a_value_name(argument)}",
                                  name=f"<{type(argument).__name__}>", exc=SecurityError)  # fmt: skip
        if isinstance(argument, str):
            return self.getattr(obj, argument)
        return self.undefined(f"{a_value_name(obj)} cannot be indexed here", name=f"<{type_name(argument)}>",
                              exc=SecurityError)  # fmt: skip

    def _not_a_key(self, obj: Any, argument: Any) -> Any:
        return self.undefined(f"{a_value_name(obj)} cannot be indexed by {a_value_name(argument)} (its keys are "
                              "strings or numbers)", name=f"<{type_name(argument)}>", exc=SecurityError)  # fmt: skip

    @staticmethod
    def _holds_tuple_keys(obj: Mapping[Any, Any]) -> bool:
        _charge(len(obj))  # a walk of every key, on a miss only
        return any(isinstance(key, tuple) for key in obj)

    # --- calls ----------------------------------------------------------------------------------

    def call(__self, __context: Any, __obj: Any, *args: Any, **kwargs: Any) -> Any:  # noqa: N805
        if isinstance(__obj, _Internal):
            return __obj.fn(__self, *args)  # (Jinja adds _loop_vars/_block_vars keywords: not for these)
        if isinstance(__obj, Undefined):
            __obj._fail_with_undefined_error()
        _charge(CALL_COST)
        if not __self.callable_allowed(__obj):
            raise __self.refuse(f"calling {a_value_name(__obj)} is not allowed here")
        carried = kwargs.get(_NOT_A_MAPPING)
        if isinstance(carried, _KeywordMistake):
            raise TemplateMistake(f"{a_value_name(__obj)}: {carried.problem}")
        return __self.check_value(__context.call(__obj, *args, **kwargs))

    def callable_allowed(self, obj: Any) -> bool:
        """Expressions call only the plain Python functions their scope holds (the allow-list is
        enforced on the syntax: only the named functions can be called at all)."""
        return isinstance(obj, types.FunctionType)

    # --- what :func:`harden` compiles in ---------------------------------------------------------

    def _concat(self, *parts: Any) -> str:
        total = 0
        for part in parts:
            total += self.text_size(part, self.max_text)
            if total > self.max_text:
                raise self.refuse(f"'~' would build more than {self.max_text} characters")
        text = "".join(self.to_text(part) for part in parts)
        charge_text(len(text))
        return self.check_value(text)

    def _iterate(self, iterable: Any, weight: int, target: tuple[Any, ...] | None = None) -> Iterator[Any]:
        """A ``{% for %}``'s items, counted and charged; ``target``: the shape of a tuple target
        (:func:`_target_shape`), which unpacks each item."""
        if isinstance(iterable, Undefined):
            iterable._fail_with_undefined_error()
        refuse_iterating(iterable)
        count = 0
        for item in iterable:
            count += 1
            if count > self.max_items:
                raise self.refuse(f"a loop of more than {self.max_items} iterations")
            _charge(weight)
            yield item if target is None else self._unpacked(item, target)

    def _operand(self, value: Any) -> Any:
        """An operand of a comparison, bounded by :meth:`check_weight` before Python compares it
        (comparing walks all of it)."""
        if isinstance(value, Undefined):
            value._fail_with_undefined_error()
        return self.check_weight(value, "comparing")

    def _iterable(self, value: Any) -> Any:
        """What a ``*args`` call, filter or test unpacks (Python iterates it)."""
        refuse_iterating(value)
        return value

    def _mapping(self, value: Any, called: str | None, named: tuple[str, ...]) -> Any:
        """What a ``**`` unpacks in a call, filter or test (``called``: "the filter 'default'", None in a
        call, whose callee :meth:`call` names; ``named``: the keywords the call gives by name): one that
        is no mapping, or gives a keyword again, is the template's mistake, told with what it called."""
        if isinstance(value, Undefined):
            value._fail_with_undefined_error()
        if not (isinstance(value, Mapping) or hasattr(value, "keys")):  # what Python takes as a mapping
            problem = _not_a_mapping(value)
        elif twice := [key for key in named if key in value.keys()]:
            problem = f"the keyword argument {twice[0]!r} is given twice, by name and in the mapping after **"
        else:
            return value
        if called is None:
            return {_NOT_A_MAPPING: _KeywordMistake(problem)}
        raise TemplateMistake(f"{called}: {problem}")

    def _unpacked(self, value: Any, target: tuple[Any, ...]) -> Any:
        """``value``, which a tuple target unpacks (``{% set a, (b, c) = ... %}``, ``{% with %}``, a
        ``{% for %}``'s item): Python iterates it, and each part a nested target (a tuple in
        ``target``, :func:`_target_shape`) unpacks, which a list, tuple or dict gives again untaken."""
        refuse_iterating(value)
        if isinstance(value, (list, tuple, dict)):
            for item, part in zip(value, target):
                if isinstance(part, tuple):
                    self._unpacked(item, part)
        return value

    def _container(self, value: Any) -> Any:
        """The right operand of ``in`` or ``not in``, which Python iterates where it has no ``__contains__``."""
        refuse_iterating(value)
        return self._operand(value)

    def _charge_work(self, units: int) -> str:
        _charge(units)
        return ""

    def _emit(self, value: Any, name: str | None = None, lineno: int = 0, literal: bool = False) -> str:
        text = self.to_text(value)
        budget = _BUDGET.get()
        if budget is not None:
            budget.build(len(text))
            budget.location = (name, lineno, literal)
        return text

    def _key(self, value: Any) -> Any:
        return self.check_weight(value, "hashing")

    def _literal(self, value: Any) -> Any:
        return self.check_weight(value, "a list or tuple literal holds")

    def _slice(self, obj: Any, start: Any, stop: Any, step: Any) -> Any:
        if isinstance(obj, Undefined):
            obj._fail_with_undefined_error()
        for bound in (start, stop, step):
            if isinstance(bound, Undefined):
                bound._fail_with_undefined_error()
            if bound is not None and not _is_index(bound):
                raise self.refuse(f"a slice's start, stop and step are integers or left out, not "
                                  f"{a_value_name(bound)}")  # fmt: skip
        if not isinstance(obj, (list, tuple, str, range)):
            raise self.refuse(f"only a list, tuple, string or range can be sliced, not {a_value_name(obj)}")
        result = obj[start:stop:step]  # step 0 is a ValueError, reported by the caller
        if isinstance(result, (str, list, tuple)):
            charge_text(len(result))  # a copy, built like '+' builds one
        return result

    wk_operand = _Internal(_operand)
    wk_container = _Internal(_container)
    wk_iterable = _Internal(_iterable)
    wk_mapping = _Internal(_mapping)
    wk_unpacked = _Internal(_unpacked)
    wk_key = _Internal(_key)
    wk_literal = _Internal(_literal)
    wk_slice = _Internal(_slice)
    wk_concat = _Internal(_concat)
    wk_iterate = _Internal(_iterate)
    wk_charge = _Internal(_charge_work)
    wk_emit = _Internal(_emit)


def _internal_call(name: str, args: list[nodes.Expr], lineno: int) -> nodes.Call:
    return nodes.Call(nodes.EnvironmentAttribute(name, lineno=lineno), args, [], None, None, lineno=lineno)


def _target_shape(target: nodes.Tuple) -> tuple[Any, ...]:
    """A tuple target's shape as a constant: ``(a, b), c`` is ``((None, None), None)``."""
    return tuple(_target_shape(item) if isinstance(item, nodes.Tuple) else None for item in target.items)


def _weight(node_list: Iterable[nodes.Node]) -> int:
    return sum(1 + sum(1 for _ in node.find_all(nodes.Node)) for node in node_list)


def harden(tree: nodes.Node, *, template: bool, name: str | None = None) -> nodes.Node:
    """Rewrite a checked tree so that what Jinja leaves unbounded goes through the sandbox.

    Every ``a ~ b`` becomes a bounded join, every comparison a bounded one, every slice a checked
    ``getitem``. In expressions also: every list or tuple literal is bounded through every level as
    a result is. In templates also: every piece of output is charged
    (text written inside macros, ``{% set %}`` blocks and filters counts too), every loop
    iteration is charged by the size of what it runs, and every template body, macro body and
    ``{% call %}`` body is charged by its size when it runs, what ``in``, a ``*args`` call, filter
    or test, or a tuple target (of ``{% set %}``, ``{% with %}`` or ``{% for %}``, nested ones too)
    iterates is checked not to be the loop variable (:func:`refuse_iterating`), and what a ``**``
    unpacks to be a mapping that gives no keyword the call names too (:meth:`BoundedSandbox._mapping`).
    """

    def rewrite(node: nodes.Node) -> nodes.Node:
        if template:
            if isinstance(node, nodes.For):
                weight = 1 + _weight(node.body) + (_weight([node.test]) if node.test is not None else 0)
                iterable = cast(nodes.Expr, node.iter)  # Jinja's parser makes an Expr
                args = [iterable, nodes.Const(weight)]
                if isinstance(node.target, nodes.Tuple):  # each item is unpacked
                    args.append(nodes.Const(_target_shape(node.target)))
                node.iter = _internal_call("wk_iterate", args, node.lineno)
            elif isinstance(node, (nodes.Template, nodes.Macro, nodes.CallBlock)):
                charge = _internal_call("wk_charge", [nodes.Const(1 + _weight(node.body))], node.lineno or 1)
                node.body = [nodes.Output([charge], lineno=node.lineno or 1), *node.body]
        for field in node.fields:
            value = getattr(node, field, None)
            if isinstance(value, nodes.Node):
                setattr(node, field, rewrite(value))
            elif isinstance(value, list):
                setattr(node, field, [rewrite(v) if isinstance(v, nodes.Node) else v for v in value])
        if template and isinstance(node, (nodes.Call, nodes.Filter, nodes.Test)) and node.dyn_args is not None:
            node.dyn_args = _internal_call("wk_iterable", [node.dyn_args], node.lineno)
        if template and isinstance(node, (nodes.Call, nodes.Filter, nodes.Test)) and node.dyn_kwargs is not None:
            called = None if isinstance(node, nodes.Call) else f"the {type(node).__name__.lower()} {node.name!r}"
            named = nodes.Const(tuple(keyword.key for keyword in node.kwargs))
            node.dyn_kwargs = _internal_call("wk_mapping", [node.dyn_kwargs, nodes.Const(called), named], node.lineno)
        if template and isinstance(node, nodes.Assign) and isinstance(node.target, nodes.Tuple):
            value = cast(nodes.Expr, node.node)  # Jinja's parser makes an Expr
            node.node = _internal_call("wk_unpacked", [value, nodes.Const(_target_shape(node.target))], node.lineno)
        if template and isinstance(node, nodes.With):
            node.values = [_internal_call("wk_unpacked", [value, nodes.Const(_target_shape(target))], node.lineno)
                           if isinstance(target, nodes.Tuple) else value
                           for target, value in zip(node.targets, node.values, strict=True)]  # fmt: skip
        if isinstance(node, nodes.Concat):
            return _internal_call("wk_concat", list(node.nodes), node.lineno)
        if isinstance(node, nodes.Getitem) and isinstance(node.arg, nodes.Slice):
            # Jinja compiles a slice to plain Python indexing, past the sandbox's getitem
            bounds = [part if part is not None else nodes.Const(None)
                      for part in (node.arg.start, node.arg.stop, node.arg.step)]  # fmt: skip
            return _internal_call("wk_slice", [node.node, *bounds], node.lineno)
        if isinstance(node, nodes.Pair):  # a dict literal's key is hashed, which walks all of it
            node.key = _internal_call("wk_key", [node.key], node.lineno)
        if isinstance(node, nodes.Compare):
            # Each operand bounded, the chain left to Python's: every operand evaluated once, and
            # the chain stops at its first false link (`1 < 0 < dim(shapes.X, 9)` is false). Links
            # as calls joined by `and` had evaluated a middle operand in two of them: nested chains
            # compiled to code 2^depth long (161 characters took 28 s to load).
            node.expr = _internal_call("wk_operand", [node.expr], node.lineno)
            for operand in node.ops:
                checked = "wk_container" if operand.op in ("in", "notin") else "wk_operand"
                operand.expr = _internal_call(checked, [operand.expr], node.lineno)
            return node
        if not template and isinstance(node, (nodes.List, nodes.Tuple)):
            # Only the result had been: [d, d, ...] of d = [s] * 4095 held 800,000 items by
            # reference for a function's argument (whose error message had repr()'d all of it).
            return _internal_call("wk_literal", [node], node.lineno)
        if template and isinstance(node, nodes.Output):
            node.nodes = [
                _internal_call("wk_emit", [nodes.Const(child.data) if isinstance(child, nodes.TemplateData) else child,
                                           nodes.Const(name), nodes.Const(child.lineno),
                                           nodes.Const(isinstance(child, nodes.TemplateData))], child.lineno)
                for child in node.nodes
            ]  # fmt: skip
        return node

    return rewrite(tree)


MISPLACED_SLICE = "a slice is allowed only as the one subscript of an index (x[a:b], not x[a:b, c])"


def misplaced_slice(tree: nodes.Node) -> nodes.Slice | None:
    """A slice that is not the one subscript of an index (``x[a:b, c]``), which Jinja would compile
    into Python that does not parse (refused with :data:`MISPLACED_SLICE`); ``None`` if there is none."""
    every = [tree, *tree.find_all(nodes.Node)]  # find_all leaves out the root
    placed = {id(node.arg) for node in every if isinstance(node, nodes.Getitem) and isinstance(node.arg, nodes.Slice)}
    return next((node for node in every if isinstance(node, nodes.Slice) and id(node) not in placed), None)


def tree_depth_error(tree: nodes.Node, max_depth: int) -> tuple[int, int] | None:
    """(depth, lineno) of the first node nested deeper than ``max_depth``, else None."""
    stack = [(tree, 0)]
    while stack:
        node, depth = stack.pop()
        if depth > max_depth:
            return depth, node.lineno
        stack.extend((child, depth + 1) for child in node.iter_child_nodes())
    return None
