"""How the sandbox's messages name the values a template reaches by name that are no plain value:
``range``, a dict's ``items``/``keys``/``values``, the loop variable, macros and imported templates.
Named by their classes, messages had read "a _Range cannot be converted to text" or "a LoopContext";
one table (:data:`_NAMED`) says how the template wrote each, what to write instead, and the hint
after a TypeError of Python's, which names an operand by its class alone.
"""

from __future__ import annotations

import operator
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from jinja2.environment import TemplateModule
from jinja2.runtime import LoopContext, Macro

from .errors import a_type_name


@dataclass(frozen=True)
class _Named:
    """How the sandbox's messages name one kind of object a template reaches by name (see :data:`_NAMED`)."""

    kind: type
    #: what Python's own messages call the class ("'function' object is not iterable")
    python_name: str
    #: what the template wrote ("the macro load"), for :func:`a_value_name`
    written_as: Callable[[Any], str]
    #: what to write instead ("call it, as in load()"), for :func:`a_value_told`
    advice: Callable[[Any], str]
    #: said after a TypeError of Python's that names ``python_name``, which knows the class alone
    hint: str


#: The one table of the objects a template reaches by name that are no plain value: by class they
#: had read "a LoopContext", "a Macro", "a TemplateModule", "a _Range" (Jinja's classes are looked
#: up here and stay as they are; each :class:`WrittenAs` subclass adds its own row).
_NAMED: list[_Named] = [
    _Named(LoopContext, "LoopContext", lambda loop: "the loop variable",
           lambda loop: "read its attributes, as in loop.index",
           "LoopContext is the loop variable: read its attributes, as in loop.index"),
    # (a {% call %} block's macro is nameless)
    _Named(Macro, "Macro", lambda macro: f"the macro {macro.name or 'caller'}",
           lambda macro: f"call it, as in {macro.name or 'caller'}(), for the text it renders",
           "Macro is a macro: call it, as in name(), for the text it renders"),
    _Named(TemplateModule, "TemplateModule", lambda module: f"the imported template {module.__name__!r}",
           lambda module: "call its macros, as in name.macro()",
           "TemplateModule is a template brought in by {% import %}: call its macros, as in name.macro()"),
]  # fmt: skip


class WrittenAs:
    """A value of the library's own that a template reaches by name (its ``range``, a dict's ``items``):
    :func:`a_value_name` names it as the template wrote it, by ``written_as`` ("the function range"),
    not by its private class ("a _Range cannot be converted to text" had reached package authors).

    A subclass names what Python's messages are to call it (``python_name``: its class takes that
    name, as Python names a function "function") and the ``hint`` told after such a message; both,
    with ``written_as`` and ``advice``, make its row of :data:`_NAMED`."""

    __slots__ = ()
    written_as: str
    #: what to write instead, as in "call it, as in range(n)"
    advice: str

    def __init_subclass__(cls, *, python_name: str, hint: str, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        # Python's own messages name an object by its class ("'_Range' object is not iterable")
        cls.__name__ = cls.__qualname__ = python_name
        _NAMED.append(_Named(cls, python_name, operator.attrgetter("written_as"), operator.attrgetter("advice"), hint))


def _named(value: Any) -> _Named | None:
    return next((row for row in _NAMED if isinstance(value, row.kind)), None)


def a_value_name(value: Any) -> str:
    """What the sandbox's messages call ``value``: a :class:`WrittenAs`, a loop variable, macro or
    imported template as the template wrote it ("the function range", "the macro load"), anything
    else by :func:`~webgpu_kernels.errors.a_type_name` ("an int", "none")."""
    row = _named(value)
    return row.written_as(value) if row else a_type_name(value)


def advice_for(value: Any) -> str | None:
    """What to write instead of ``value`` ("call it, as in range(n)") where it is one of :data:`_NAMED`'s, else None."""
    row = _named(value)
    return row.advice(value) if row else None


def a_value_told(value: Any) -> str | None:
    """``value`` named as the template wrote it, with what to write instead ("the function range (call
    it, as in range(n))"), where it is one of :data:`_NAMED`'s, which no filter or test takes; else None."""
    row = _named(value)
    return f"{row.written_as(value)} ({row.advice(value)})" if row else None


def type_error_hint(message: str) -> str:
    """' (Macro is a macro: call it, ...)' for each class of :data:`_NAMED` that Python's TypeError
    ``message`` names ("unsupported operand type(s) for +: 'Macro' and 'int'", "type function doesn't
    define __round__ method"), '' where none is: Python names the operands by class alone. In the
    order the message names them."""
    found = []
    for row in _NAMED:
        name = re.escape(row.python_name)
        # "'Macro' object ...", "type Macro doesn't ...", 'can only concatenate list (not "Macro") to list',
        # "Value after * must be an iterable, not Macro"
        match = re.search(rf"'{name}'|\"{name}\"|\b(type|not) {name}\b", message)
        if match:
            found.append((match.start(), row.hint))
    return f" ({'; '.join(hint for _, hint in sorted(found))})" if found else ""
