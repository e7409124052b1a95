"""Variant selection: a pure function from a call's scope to the chosen variant and a trace.

The rule: the variant with the highest ``priority`` whose ``when`` clauses all hold; ties go to
the one declared first. Clauses are checked in order and the first that does not hold (is false,
or fails to evaluate) rejects the variant; the trace keeps that clause and the values it read.

A call that names the outputs it wants (``outputs=``) narrows it: a variant that writes no
binding of an asked optional output is rejected, and the variants that write no optional output
the call did not ask for come first (the others only where none of those accepts the call).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from .contract import CallSignature
from .errors import (
    ExpressionError,
    KernelError,
    SelectionError,
    VariantRejectedError,
    no_variant,
    short_repr,
    shorten,
    type_name,
)
from .expressions import DEVICE_FUNCTIONS, Expression, NamespaceNames
from .program import CompiledVariant, DeviceInfo, Program
from .sandbox import MAX_SEQUENCE_LENGTH, nested_items_exceed

#: Most characters of text one value of a JSON trace holds in all (its strings counted at every
#: reference): a heavier value is shown as the string of its first 80 characters.
MAX_JSON_VALUE_TEXT = 16 * 1024


@dataclass(frozen=True)
class Verdict:
    """Why one variant was accepted or rejected for a call."""

    variant: str
    priority: float
    accepted: bool
    clause: str | None = None  # the first clause that did not hold
    clause_index: int | None = None
    values: dict[str, Any] = field(default_factory=dict)  # what that clause read
    error: str | None = None  # set when the clause failed to evaluate rather than being false
    #: Where the clause is false and reads the call's attributes and nothing else but the inputs'
    #: shapes and ranks (no dtype, tunable, device limit or feature, through every derive entry and
    #: constant it reads): those attributes and their values, wrong for the call on any device.
    #: Empty otherwise. Not in as_dict (the JSON trace is documented).
    attributes: dict[str, Any] = field(default_factory=dict)
    #: With ``attributes``: True where the clause reads the inputs' shapes or ranks too (the
    #: attributes are wrong for these inputs), False where it reads the attributes alone.
    for_inputs: bool = False
    #: The optional outputs the call asks for (``outputs=``) that the variant writes nowhere: it
    #: is rejected for them, before its ``when`` is evaluated.
    lacks: tuple[str, ...] = ()
    #: The optional outputs the variant writes that the call does not ask for: it runs only where
    #: no variant that writes none of them accepts the call (they are computed, then dropped).
    unasked: tuple[str, ...] = ()

    def reason(self) -> str:
        if self.lacks:
            return f"does not write {', '.join(self.lacks)}, which the call asks for (outputs=)"
        if self.accepted:
            if self.unasked:
                return (f"accepted, but writes {', '.join(self.unasked)}, which the call does not ask for "
                        f"(outputs=): a variant that writes none of them comes first")  # fmt: skip
            return "accepted"
        seen = ", ".join(f"{k}={_short(v)}" for k, v in self.values.items())
        what = f"failed: {self.error}" if self.error else "is false"
        return f"when[{self.clause_index}] {self.clause!r} {what}" + (f" (with {seen})" if seen else "")

    def as_dict(self) -> dict[str, Any]:
        return {
            "variant": self.variant, "priority": self.priority, "accepted": self.accepted,
            "clause": self.clause, "clauseIndex": self.clause_index,
            "values": {k: json_value(v) for k, v in self.values.items()},
            "error": self.error, "lacks": list(self.lacks), "unasked": list(self.unasked),
        }  # fmt: skip


@dataclass(frozen=True)
class Selection:
    chosen: CompiledVariant | None
    scope: dict[str, Any] | None  # the chosen variant's scope (its constants added)
    trace: tuple[Verdict, ...]


def json_value(value: Any) -> Any:
    """A derive or constant value for JSON output: a tuple as a list, and a value holding more than
    MAX_SEQUENCE_LENGTH items or MAX_JSON_VALUE_TEXT characters of text, counted through every
    nesting level, as its short_repr. Such a value is a few references (a constant of
    ``[['x' * 4096] * 4095]`` holds 4,096 items): written whole, 16 MB of JSON for each name that
    holds it (20 made one `explain --json` 336 MB)."""
    if nested_items_exceed(value, MAX_SEQUENCE_LENGTH, MAX_JSON_VALUE_TEXT):
        return short_repr(value)
    return list(value) if isinstance(value, (tuple, NamespaceNames)) else value  # a namespace's names: a plain list


def _short(value: Any) -> str:
    if isinstance(value, NamespaceNames):
        # a namespace read whole (`'beta' in shapes`): its names, unquoted and cut later, since
        # the one a clause asks about may come last (cut at 60, it had been lost)
        # the names tested for that it lacks follow, after any cut: `shapes=[X, Y] (no B)`
        absent = f" (no {', '.join(value.absent)})" if value.absent else ""
        return shorten("[" + ", ".join(value) + "]", 200) + absent
    # never repr() whole: a derive entry of 4095 references to a 4096-character string is 16 MB of it
    return short_repr(list(value) if isinstance(value, tuple) else value, 60)


def judge(
    variant: CompiledVariant, scope: Mapping[str, Any], definitions: Mapping[str, Expression] | None = None
) -> tuple[Verdict, dict[str, Any]]:
    """Check one variant's ``when`` clauses in the scope with its constants added.

    ``definitions`` (derive and constant expressions by name) let the trace show what a clause
    like ``baseOk`` was made of, not only that it was false.
    """
    inner = Program.variant_scope(variant, scope)
    v = variant.variant
    for index, clause in enumerate(variant.when):
        try:
            value = clause.evaluate(inner)
            holds, error = value is True, None
            if not isinstance(value, bool):  # "'false'" or [1] would be truthy: a manifest bug, not a choice
                error = f"a when clause must be true or false, got {type_name(value)} {value!r:.60}"
        except ExpressionError as exc:
            holds, error = False, exc.detail
        if not holds:  # the variant's own constants shadow top-level names, in the trace as in the scope
            named = {**(definitions or {}), **dict(variant.constants)}
            values = _seen(clause, inner, named)
            read, for_inputs = _attributes_read(clause, named) if error is None else ((), False)
            attributes = {name: inner["attrs"][name] for name in read if name in inner.get("attrs", {})}
            if len(attributes) < len(read):  # an attribute the call does not hold: not certain
                attributes = {}
            return Verdict(v.id, v.priority, False, clause.source, index, values, error, attributes,
                           for_inputs=bool(attributes) and for_inputs), inner  # fmt: skip
    return Verdict(v.id, v.priority, True), inner


def _seen(clause: Expression, scope: Mapping[str, Any], definitions: Mapping[str, Expression]) -> dict[str, Any]:
    """The values a clause read, and (three levels deep) those its derive/constant names read."""
    values: dict[str, Any] = {}
    pending, depth = [clause], 0
    while pending and depth < 3:
        following = []
        for expr in pending:
            for name, value in expr.peek(scope).items():
                known = values.get(name)
                if isinstance(known, NamespaceNames) and isinstance(value, NamespaceNames):  # read by two: both tests
                    values[name] = NamespaceNames(known, tuple(dict.fromkeys(known.absent + value.absent)))
                if name not in values:
                    values[name] = value
                    if name in definitions:
                        following.append(definitions[name])
        pending, depth = following, depth + 1
    return values


#: The namespaces of the call's inputs that a clause may read besides attributes and still refuse
#: the attributes on any device: the inputs' shapes and ranks (not their dtypes, a device's matter
#: where one has no shader-f16).
INPUT_NAMESPACES = ("shapes", "ranks")


def _attributes_read(clause: Expression, definitions: Mapping[str, Expression]) -> tuple[tuple[str, ...], bool]:
    """The attributes ``clause`` reads, itself or through derive entries and constants at any depth,
    where it reads nothing else but the inputs' shapes and ranks, and whether it reads those:
    ``((), False)`` where it reads another namespace (dtypes, tunables, the device), a device
    function (f16Ok), a name the engine cannot follow, or no attribute."""
    attributes: list[str] = []
    inputs = False
    pending, followed = [clause], set()
    while pending:
        expr = pending.pop()
        if any(name in DEVICE_FUNCTIONS for name in expr.calls):
            return (), False
        for ref in expr.references:
            head, _, rest = ref.partition(".")
            if head == "attrs" and rest:
                attributes.append(rest.split(".")[0])
            elif ref in definitions:
                if ref not in followed:
                    followed.add(ref)
                    pending.append(definitions[ref])
            elif head in INPUT_NAMESPACES:  # a shape or rank, or the names read whole ('B' in shapes)
                inputs = True
            else:  # another namespace, or `attrs` read whole (`'k' in attrs`): which attribute is not known
                return (), False
    return (tuple(dict.fromkeys(attributes)), inputs) if attributes else ((), False)


def _blamed(verdict: Verdict, defaults: Mapping[str, Any]) -> dict[str, Any]:
    """The attributes a rejected verdict holds the call's own mistake: all it names where they alone
    refuse it, and where it read the inputs' shapes too, those not at their default."""
    if not verdict.for_inputs:
        return verdict.attributes
    return {k: v for k, v in verdict.attributes.items() if k not in defaults or defaults[k] != v}


def ranked(variants: tuple[CompiledVariant, ...]) -> list[CompiledVariant]:
    """Variants in the order selection considers them: priority descending, then declaration."""
    return sorted(variants, key=lambda cv: (-cv.variant.priority, cv.variant.index))


def written_outputs(variant: CompiledVariant, optional: frozenset[str]) -> frozenset[str]:
    """The ``optional`` outputs some pass of ``variant`` binds: those it writes (a binding's tensor
    is fixed in the manifest, so this holds for every call)."""
    return frozenset(cb.binding.arg for cp in variant.passes for cb in cp.bindings if cb.binding.arg is not None) & optional


def _outputs_verdict(variant: CompiledVariant, asked: frozenset[str] | None,
                     optional: tuple[str, ...]) -> tuple[tuple[str, ...], tuple[str, ...]]:  # fmt: skip
    """(the asked optional outputs ``variant`` does not write, the unasked ones it writes), each in
    the manifest's order (``optional``); both empty where the call names no outputs."""
    if asked is None:
        return (), ()
    written = written_outputs(variant, frozenset(optional))
    return (tuple(o for o in optional if o in asked and o not in written),
            tuple(o for o in optional if o in written and o not in asked))  # fmt: skip


def select_variant(
    variants: tuple[CompiledVariant, ...],
    scope: Mapping[str, Any],
    *,
    forced: str | None = None,
    exhaustive: bool = False,
    definitions: Mapping[str, Expression] | None = None,
    asked: frozenset[str] | None = None,
    optional: tuple[str, ...] = (),
) -> Selection:
    """Choose a variant for ``scope``. With ``exhaustive`` every variant is judged (for explain).

    ``asked``: the outputs the call asks for (None: it takes what the chosen variant writes);
    ``optional``: the manifest's optional outputs, in its order. A variant that writes no binding
    of an asked optional output is rejected; one that writes an unasked one is chosen only where
    no variant that writes none accepts the call."""
    if forced is not None:
        target = next((cv for cv in variants if cv.variant.id == forced), None)
        if target is None:
            known = [cv.variant.id for cv in variants]
            raise SelectionError(no_variant(forced, known))
        lacks, unasked = _outputs_verdict(target, asked, optional)
        if lacks:
            verdict = Verdict(forced, target.variant.priority, False, lacks=lacks)
            raise VariantRejectedError(f"variant {forced!r} cannot run this call: {verdict.reason()}",
                                       variant=forced, clause=None, trace=(verdict,))  # fmt: skip
        verdict, inner = judge(target, scope, definitions)
        if not verdict.accepted:
            raise VariantRejectedError(f"variant {forced!r} cannot run this call: {verdict.reason()}",
                                       variant=forced, clause=verdict.clause, trace=(verdict,))  # fmt: skip
        return Selection(target, inner, (replace(verdict, unasked=unasked),))
    trace: list[Verdict] = []
    chosen, chosen_scope, fallback = None, None, None
    for cv in ranked(variants):
        lacks, unasked = _outputs_verdict(cv, asked, optional)
        if lacks:
            trace.append(Verdict(cv.variant.id, cv.variant.priority, False, lacks=lacks))
            continue
        verdict, inner = judge(cv, scope, definitions)
        trace.append(replace(verdict, unasked=unasked) if unasked else verdict)
        if not verdict.accepted or chosen is not None:
            continue
        if unasked:  # a fallback: a variant further down may write only what was asked
            fallback = fallback or (cv, inner)
            continue
        chosen, chosen_scope = cv, inner
        if not exhaustive:
            break
    if chosen is None and fallback is not None:
        chosen, chosen_scope = fallback
    return Selection(chosen, chosen_scope, tuple(trace))


def accepted_with_f16(program: Program, signature: CallSignature, info: DeviceInfo) -> frozenset[str]:
    """The variants that would accept the call if the device had shader-f16: on one that lacks it,
    their rejection is the adapter's (an f16Ok guard), not the call's. Empty where the call fails
    with shader-f16 too. `test` skips such a variant a case names; `validate` reports no error."""
    try:
        scope, _ = program.call_scope(signature, replace(info, features=info.features | {"shader-f16"}))
    except KernelError:
        return frozenset()
    selection = select_variant(program.variants, scope, exhaustive=True, definitions=program.definitions)
    return frozenset(verdict.variant for verdict in selection.trace if verdict.accepted)


def require_choice(selection: Selection, op_id: str, *, defaults: Mapping[str, Any] | None = None) -> CompiledVariant:
    """The chosen variant, or a :class:`SelectionError` listing why each one was rejected. Where
    each variant's clause is false for the call's attributes alone, the headline names them: the
    call's argument is wrong, no device would run it; where some clause reads the inputs' shapes
    or ranks too, it names them "for these inputs", but only those the call sets to another value
    than the manifest's ``defaults``: an attribute left at its default, read with the shapes (a
    matrix product's K through transA), is no more the call's mistake than the shapes are."""
    if selection.chosen is None:
        reasons = "\n".join(f"  {v.variant}: {v.reason()}" for v in selection.trace)
        attributes: dict[str, Any] = {}
        blamed = [_blamed(v, defaults or {}) for v in selection.trace]
        if selection.trace and all(blamed):
            for named_here in blamed:
                attributes.update(named_here)
        if attributes:
            named = ", ".join(f"{k}={short_repr(v, 60)}" for k, v in attributes.items())
            inputs = " for these inputs" if any(v.for_inputs for v in selection.trace) else ""
            head = f"no variant accepts attribute{'s' if len(attributes) > 1 else ''} {named}{inputs}"
        else:
            head = "no variant can run this call"
        raise SelectionError(f"{op_id}: {head}:\n{reasons}", trace=selection.trace, attributes=tuple(attributes))
    return selection.chosen
