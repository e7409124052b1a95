"""The filters a template may use, each bounded: TemplateSandbox (templates.py) installs them.

Every filter checks the size of what it would build before it builds it, and charges the render
budget for what it built: its work (a str method, a join, an indent, a rounding) runs in one step
of C code that neither the render budget nor the deadline can interrupt, so a check after the fact
would come only once the minutes and gigabytes were spent. The filters written here take the
template context, so Jinja never runs one at compile time, outside the render budget; each binds
its arguments as the template wrote them (:func:`as_written`) and fails on an undefined one by
its name.
"""

from __future__ import annotations

import functools
import inspect
import math
import operator
import struct
from collections.abc import Callable
from typing import Any, Literal

import numpy as np
from jinja2 import filters as jinja_filters
from jinja2 import pass_context
from jinja2.exceptions import FilterArgumentError, TemplateRuntimeError
from jinja2.runtime import LoopContext, Undefined

from .errors import short_repr, type_name
from .sandbox import BoundedSandbox, SandboxViolation, charge_text
from .value_names import a_value_told

#: The most digits the round filter may round to, either side of the point.
MAX_ROUND_PRECISION = 400

#: Filters a template may use; Jinja's others (and its globals cycler, joiner, lipsum, namespace) are withheld.
_FILTERS = ("abs", "default", "first", "float", "int", "join", "last", "length", "lower", "max", "min", "round",
            "string", "trim", "upper", "list", "replace", "indent")  # fmt: skip

#: Each literal suffix and the struct format of its type (none: an abstract float, any finite value).
_FLOAT_SUFFIX_PACKING = {"": None, "f": "<f", "h": "<e"}


def _shown(value: Any) -> str:
    """A template's value in a filter's message: its type and at most 40 characters of it, built from
    no more (repr() of a tuple nesting 2^40 leaves by reference, ``(t, t)`` 40 times, never ended);
    ``range``, a macro, the loop variable ... as the template wrote them, with what to write instead
    (by class they had read "<function> (function)")."""
    return a_value_told(value) or f"{short_repr(value, 40)} ({type_name(value)})"


def wgsl_float(value: Any, suffix: str = "") -> str:
    """A WGSL floating-point literal for ``value`` (``1.702``, ``1e-05``); ``suffix`` "f" or "h"."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"wgsl_float needs a number, got {_shown(value)}")
    if not isinstance(suffix, str) or suffix not in _FLOAT_SUFFIX_PACKING:  # (a tuple would be hashed whole)
        raise ValueError(f"wgsl_float's suffix is 'f', 'h' or none, got {_shown(suffix)}")
    try:
        number = float(value)
    except OverflowError:  # an int past float64 (templates' integers are bounded far below; a Python caller's not)
        raise ValueError(f"wgsl_float's value is beyond float64, got {_shown(value)}") from None
    if not math.isfinite(number):
        raise ValueError(f"WGSL has no literal for {number!r}")
    text = repr(number)
    packing = _FLOAT_SUFFIX_PACKING[suffix]
    if packing:
        # Rounded to the suffix's type first, then its shortest text in that type: the shortest
        # float64 text of a value halfway between two f32s (1 + 2^-24) read back as the other one
        # in the shader, and a value that rounds to the largest f32 (3.4028235e38, as NumPy prints
        # it) was refused. Only a value that rounds to an infinity is beyond the type.
        try:
            rounded = struct.unpack(packing, struct.pack(packing, number))[0]
        except OverflowError:  # the shader compiler would refuse it, far from here
            raise ValueError(f"{number!r} is beyond the range of {'f32' if suffix == 'f' else 'f16'}") from None
        # all read back as `rounded` in the type; the shortest ("1.702", not "1.7020000219345093"), ties
        # to the first. NumPy's shortest digits, not str(): its choice of positional or scientific
        # changed in NumPy 2 (1.26 wrote 65504 in f16 as "65500.0"), and the WGSL with it.
        typed = (np.float32 if suffix == "f" else np.float16)(rounded)
        text = min(repr(rounded), np.format_float_positional(typed, unique=True, trim="0"),
                   np.format_float_scientific(typed, unique=True, trim="-"), key=len)  # fmt: skip
    if "e" not in text and "." not in text:  # never today; NumPy's text formats have changed before, and a
        text += ".0"                           # literal without either would be an abstract int in WGSL
    return text + suffix


def wgsl_uint(value: Any) -> str:
    """A WGSL u32 literal for ``value`` (``7u``)."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 2**32:
        raise ValueError(f"wgsl_uint needs an integer in [0, 2^32), got {_shown(value)}")
    return f"{value}u"


class NonFiniteText(TemplateRuntimeError):
    """A template turned a float that is not finite into text (templates.TemplateSandbox.text_size) or
    an integer (``| int``); templates.template_error makes it a TemplateError naming the template line."""

    def __init__(self, value: float, what: str = "prints") -> None:
        super().__init__(f"{what} {value!r}: there is no WGSL literal for a number that is not finite (an "
                         "overflow, or NaN, in the template's arithmetic); test it (`is number`, a comparison) "
                         "before it is printed, or print it with wgsl_float, which names the value")  # fmt: skip


def as_written(kind: str, name: str, f: Callable[..., Any], like: Callable[..., Any] | None = None) -> Callable[..., Any]:
    """``f``, its arguments bound to ``like``'s signature (``f``'s by default) before it runs: Python's
    own message named the function behind a filter or test, not what the template wrote, and counted
    the context Jinja passes (``1|abs(2)``: "_f_abs() takes 2 positional arguments but 3 were given")."""
    try:
        signature = inspect.signature(like or f)
    except (TypeError, ValueError):  # no signature to read: Python's message stands
        return f

    @functools.wraps(f)  # keeps pass_context's mark
    def checked(*args: Any, **kwargs: Any) -> Any:
        try:
            signature.bind(*args, **kwargs)
        except TypeError as exc:  # bind's messages count nothing: "too many positional arguments"
            error = FilterArgumentError if kind == "filter" else TemplateRuntimeError
            raise error(f"the {kind} {name!r}: {exc}") from None
        return f(*args, **kwargs)

    return checked


# --- filters: each checks sizes before building, is charged, and is never folded at compile time ---


def _env(context: Any) -> BoundedSandbox:
    return context.environment


def _result(context: Any, value: Any) -> Any:
    value = _env(context).check_value(value)
    if isinstance(value, (str, list, tuple)):
        charge_text(len(value))  # a list built (``range(n)|list``) is charged per item, as '+' charges one
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
    # the loop variable's too, as Jinja documents (its length, not the items it has left)
    if isinstance(value, (str, list, tuple, dict, range, LoopContext)):
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
    text = _env(context).to_text(value)
    if chars is None:
        return _result(context, text.strip())
    return _result(context, _strip(text, _env(context).to_text(chars)))


def _strip(text: str, chars: str) -> str:
    """``text.strip(chars)`` in time linear in both: str.strip scans ``chars`` for each character it
    strips, so 131,072 emoji stripped by 131,072 characters took 45 s in one step (review, f5)."""
    distinct = "".join(set(chars))
    if len(distinct) <= 64:  # at most 64 comparisons a character, in C
        return text.strip(distinct)
    strip = frozenset(distinct)
    start, end = 0, len(text)
    while start < end and text[start] in strip:
        start += 1
    while end > start and text[end - 1] in strip:
        end -= 1
    return text[start:end]


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


#: Where str.splitlines breaks a line ("\r\n" is one break).
_LINE_BREAKS = ("\n", "\r", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029")


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
    # Jinja splits with str.splitlines, which breaks at \r, \x85, U+2028 ... too: counting only
    # "\n", `('a\r' * 300000)|indent(448000)` passed as one line and built 134 GB.
    lines = sum(map(s.count, _LINE_BREAKS)) - s.count("\r\n") + 1
    if len(s) + lines * len(indention) > env.max_text:
        raise SandboxViolation(f"indent would build more than {env.max_text} characters")
    return _result(context, jinja_filters.do_indent(s, indention, first, blank))


def _ends(context: Any, value: Any) -> Any:
    """What first and last read: a string as it is (one character taken is cheap, and the string was
    bounded by the text limit where it was built: take()'s item limit, which bounds a list that
    |list, join or max builds or walks item by item, had refused 200,000 characters); else take()'s."""
    return value if isinstance(value, str) else _env(context).take(value)


@pass_context
def _f_first(context: Any, value: Any) -> Any:
    return jinja_filters.do_first(_env(context), _ends(context, value))


@pass_context
def _f_last(context: Any, value: Any) -> Any:
    return jinja_filters.do_last(_env(context), _ends(context, value))


@pass_context
def _f_max(context: Any, value: Any, case_sensitive: bool = False, attribute: Any = None) -> Any:
    return jinja_filters.do_max(_env(context), _env(context).check_weight(_env(context).take(value), "max of"),
                                case_sensitive, attribute)  # fmt: skip


@pass_context
def _f_min(context: Any, value: Any, case_sensitive: bool = False, attribute: Any = None) -> Any:
    return jinja_filters.do_min(_env(context), _env(context).check_weight(_env(context).take(value), "min of"),
                                case_sensitive, attribute)  # fmt: skip


@pass_context
def _f_default(context: Any, value: Any, default_value: Any = "", boolean: bool = False) -> Any:
    return jinja_filters.do_default(value, default_value, boolean)


@pass_context
def _f_abs(context: Any, value: Any) -> Any:
    return _result(context, abs(value))


@pass_context
def _f_round(context: Any, value: Any, precision: int = 0,
             method: Literal["common", "ceil", "floor"] = "common") -> float:
    # Rounding computes 10 ** precision in one step the render budget cannot interrupt; a float
    # has no digits past about 330 places either way.
    if isinstance(precision, bool) or not isinstance(precision, int) or abs(precision) > MAX_ROUND_PRECISION:
        raise SandboxViolation(f"round() takes a precision of at most {MAX_ROUND_PRECISION} digits either "
                               f"way, an integer; got {_shown(precision)}")  # fmt: skip
    if not isinstance(method, str):  # Jinja's `method not in {...}` hashes it: a nested tuple walks every leaf
        raise FilterArgumentError(f"round()'s method is 'common', 'ceil' or 'floor', got {_shown(method)}")
    return _result(context, jinja_filters.do_round(value, precision, method))


def _no_number(name: str, value: Any) -> None:
    """Refuse ``range``, a macro, the loop variable ...: Jinja's int and float give them the default,
    a wrong constant in the WGSL with no word said. Any other value that does not convert keeps the
    default, as Jinja documents."""
    told = a_value_told(value)
    if told is not None:
        raise ValueError(f"{name} needs a number or a string of one, got {told}")


@pass_context
def _f_int(context: Any, value: Any, default: int = 0, base: int = 10) -> int:
    _no_number("int", value)
    if isinstance(value, str) and len(value) > 64:
        raise SandboxViolation("int() of a string longer than 64 characters")
    if isinstance(value, float) and not math.isfinite(value):
        # Jinja gives NaN the default (0), a wrong constant in the WGSL with no word said, and inf
        # a bare OverflowError
        raise NonFiniteText(value, "| int of")
    return _result(context, jinja_filters.do_int(value, default, base))


@pass_context
def _f_float(context: Any, value: Any, default: float = 0.0) -> float:
    _no_number("float", value)
    if isinstance(value, str) and len(value) > 64:
        raise SandboxViolation("float() of a string longer than 64 characters")
    return _result(context, jinja_filters.do_float(value, default))


def _defined_arguments(f: Callable[..., Any], *, skip: int = 0) -> Callable[..., Any]:
    """``f``, failing with Jinja's "'name' is undefined" on an undefined argument (past the first
    ``skip``). abs, round and wgsl_float/wgsl_uint had said "got <StrictUndefined>" or "bad operand
    type" of a misspelt name, with no name to look for."""

    @functools.wraps(f)  # keeps pass_context's mark
    def checked(*args: Any, **kwargs: Any) -> Any:
        for value in (*args[skip:], *kwargs.values()):
            if isinstance(value, Undefined):
                value._fail_with_undefined_error()
        return f(*args, **kwargs)

    return checked


_UNCHECKED_FILTERS: dict[str, Callable[..., Any]] = {
    "abs": _f_abs, "first": _f_first, "float": _f_float, "int": _f_int, "join": _f_join,
    "last": _f_last, "length": _f_length, "lower": _f_lower, "max": _f_max, "min": _f_min, "round": _f_round,
    "string": _f_string, "trim": _f_trim, "upper": _f_upper, "list": _f_list, "replace": _f_replace,
    "indent": _f_indent, "wgsl_float": wgsl_float, "wgsl_uint": wgsl_uint,
}  # fmt: skip
TEMPLATE_FILTERS = {name: _defined_arguments(as_written("filter", name, f)) for name, f in _UNCHECKED_FILTERS.items()}
TEMPLATE_FILTERS["default"] = _defined_arguments(as_written("filter", "default", _f_default), skip=2)  # (context, value): an undefined value is its use
assert set(TEMPLATE_FILTERS) == set(_FILTERS) | {"wgsl_float", "wgsl_uint"}
