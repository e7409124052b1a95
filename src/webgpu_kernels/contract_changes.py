"""What a new manifest changes of an old one's contract, in the words a caller would use.

A change is incompatible where a call that worked may now be refused or compute something else: an
input or output role removed or renamed, a new required input, an optional input made required, a
dtype an input no longer accepts, an output's dtype rule changed, an attribute removed, its default
changed or its kind narrowed (a number to an integer), an input's rank narrowed where both rules
are numbers or the old one was "any". Rank expressions and output shapes are not compared;
variants and tunables are the implementation and are not compared either. ``upload`` refuses such
a change on a Hub revision vN that holds the old manifest (contract version N+1 is the way).
"""

from __future__ import annotations

import json
from typing import Any

from .manifest import Manifest, TensorSpec


def incompatible_changes(old: Manifest, new: Manifest) -> list[str]:
    """Each incompatible change from ``old`` to ``new``, one line each; [] where every call that
    worked with ``old`` works the same with ``new``."""
    changes = _role_changes("input", old.inputs, new.inputs)
    changes += _role_changes("output", old.outputs, new.outputs)
    now_inputs = {spec.role: spec for spec in new.inputs}
    for spec in old.inputs:
        now = now_inputs.get(spec.role)
        if now is None:
            continue
        if spec.optional and not now.optional:
            changes.append(f"input {spec.role!r} was optional, now it is required")
        dropped = [d for d in old.type_constraints.get(spec.dtype, ()) if d not in new.type_constraints.get(now.dtype, ())]
        if dropped:
            allowed = ", ".join(new.type_constraints.get(now.dtype, ()))
            changes.append(f"input {spec.role!r}: {', '.join(dropped)} {'is' if len(dropped) == 1 else 'are'} no "
                           f"longer accepted (type variable {now.dtype}: {allowed})")  # fmt: skip
        if isinstance(now.rank, int) and not isinstance(spec.rank, str) and spec.rank != now.rank:
            was = "any rank" if spec.rank is None else f"rank {spec.rank}"
            changes.append(f"input {spec.role!r}: {was} was accepted, now only rank {now.rank}")
    now_outputs = {spec.role: spec for spec in new.outputs}
    for spec in old.outputs:
        now = now_outputs.get(spec.role)
        if now is None:
            continue
        before, after = _output_dtype(old, spec), _output_dtype(new, now)
        if before != after and (before[1] is None or before[1] in now_inputs):  # a renamed input is named above
            changes.append(f"output {spec.role!r}: its dtype was {before[0]}, now {after[0]}")
    for name, default in old.attributes.items():
        if name not in new.attributes:
            changes.append(f"attribute {name!r} was removed")
            continue
        value = new.attributes[name]
        kinds = (_kind(default), _kind(value))
        if kinds[0] != kinds[1] and kinds != ("an integer", "a number"):  # an integer attribute may take numbers
            changes.append(f"attribute {name!r}: {kinds[0]} was accepted, now only {kinds[1]}")
        elif default != value:
            changes.append(f"attribute {name!r}: its default changed from {json.dumps(default)} to {json.dumps(value)}")
    return changes


def _role_changes(kind: str, old: tuple[TensorSpec, ...], new: tuple[TensorSpec, ...]) -> list[str]:
    """Roles removed (a renamed one is a removal: the new roles are named beside it, as it may be
    one of them), and, where none was, new required inputs."""
    old_roles = {spec.role for spec in old}
    added = [spec for spec in new if spec.role not in old_roles]
    removed = [spec.role for spec in old if spec.role not in {s.role for s in new}]
    if removed:
        hint = f" (the new {kind}s: {', '.join(repr(s.role) for s in added)})" if added else ""
        return [f"{kind} {role!r} was removed or renamed{hint}" for role in removed]
    return [f"{kind} {spec.role!r} is new and required" for spec in added if kind == "input" and not spec.optional]


def _output_dtype(manifest: Manifest, spec: TensorSpec) -> tuple[str, str | None]:
    """An output's dtype rule in words, and the input it follows (None for a fixed dtype): the first
    input of its type variable binds it, else its one-type constraint fixes it."""
    source = next((i.role for i in manifest.inputs if i.dtype == spec.dtype), None)
    if source is not None:
        return f"that of input {source!r}", source
    return ", ".join(manifest.type_constraints.get(spec.dtype, ())), None


def _kind(value: Any) -> str:
    """The kind of value an attribute takes, as contract.py checks it (its default's kind)."""
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    return "a list of numbers"
