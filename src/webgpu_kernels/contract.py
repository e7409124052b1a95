"""A call checked against the manifest's contract, before any expression or GPU work.

Takes what the caller passed (tensor shapes and dtypes, attributes, tunables) and returns a
hashable :class:`CallSignature`, or raises an :class:`InputError` subclass naming the argument,
what was expected and what came.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .errors import (
    AttributeValueError, DTypeError, MissingInputError, RankError, UnknownInputError,
)  # fmt: skip
from .manifest import ONNX_TO_WGSL, Manifest


@dataclass(frozen=True)
class CallSignature:
    """Everything about a call that shapes its plan; equal signatures share one plan."""

    shapes: tuple[tuple[str, tuple[int, ...]], ...]
    dtypes: tuple[tuple[str, str], ...]  # type variable -> ONNX dtype name
    attrs: tuple[tuple[str, Any], ...]
    tunables: tuple[tuple[str, Any], ...]

    def shape_map(self) -> dict[str, tuple[int, ...]]:
        return dict(self.shapes)

    def type_bindings(self) -> dict[str, str]:
        return dict(self.dtypes)

    def attr_map(self) -> dict[str, Any]:
        return {k: _thaw(v) for k, v in self.attrs}

    def tunable_map(self) -> dict[str, Any]:
        return {k: _thaw(v) for k, v in self.tunables}


def check_call(
    manifest: Manifest,
    tensors: Mapping[str, tuple[tuple[int, ...], str]],
    attrs: Mapping[str, Any] | None,
    tunables: Mapping[str, Any] | None,
) -> CallSignature:
    """Check inputs (name -> (shape, ONNX dtype name)), attributes and tunables."""
    declared = {spec.role: spec for spec in manifest.inputs}
    for name in tensors:
        if name not in declared:
            outputs = {spec.role for spec in manifest.outputs}
            hint = "it is an output, returned by the call" if name in outputs else ""
            raise UnknownInputError(name, f"one of the inputs {sorted(declared)}", "an unknown input", hint=hint)
    type_bindings: dict[str, tuple[str, str]] = {}  # type variable -> (dtype, the argument that bound it)
    shapes = []
    for spec in manifest.inputs:
        if spec.role not in tensors:
            if spec.optional:
                continue
            raise MissingInputError(spec.role, f"a {spec.dtype} tensor", "nothing")
        shape, dtype = tensors[spec.role]
        if isinstance(spec.rank, int) and len(shape) != spec.rank:
            raise RankError(spec.role, f"rank {spec.rank}", f"rank {len(shape)} (shape {list(shape)})")
        allowed = manifest.type_constraints[spec.dtype]
        if dtype not in allowed:
            raise DTypeError(spec.role, f"dtype in {list(allowed)} (type variable {spec.dtype})", dtype)
        if ONNX_TO_WGSL.get(dtype) is None:
            raise DTypeError(spec.role, f"a dtype WebGPU can hold ({_wgsl_types(allowed)})", dtype,
                             hint="the package declares it but WGSL has no such type")  # fmt: skip
        bound = type_bindings.setdefault(spec.dtype, (dtype, spec.role))
        if bound[0] != dtype:
            raise DTypeError(spec.role, f"{bound[0]} like {bound[1]!r} (both are type variable {spec.dtype})", dtype)
        shapes.append((spec.role, tuple(int(d) for d in shape)))
    return CallSignature(
        shapes=tuple(shapes),
        dtypes=tuple((tv, dt) for tv, (dt, _) in type_bindings.items()),
        attrs=_check_values("attribute", manifest.attributes, attrs),
        tunables=_check_values("tunable", manifest.tunables, tunables),
    )


def _wgsl_types(allowed: tuple[str, ...]) -> str:
    return ", ".join(t for t in allowed if ONNX_TO_WGSL.get(t)) or "none"


def _check_values(kind: str, defaults: Mapping[str, Any], given: Mapping[str, Any] | None) -> tuple[tuple[str, Any], ...]:
    """Merge caller values over the manifest's defaults; each must match its default's kind."""
    given = dict(given or {})
    for name in given:
        if name not in defaults:
            raise UnknownInputError(name, f"one of the {kind}s {sorted(defaults)}", f"an unknown {kind}")
    merged = []
    for name, default in defaults.items():
        value = given.get(name, default)
        merged.append((name, _freeze(_check_value(kind, name, default, value))))
    return tuple(merged)


def _check_value(kind: str, name: str, default: Any, value: Any) -> Any:
    value = _unwrap_numpy(value)
    if isinstance(default, bool):
        if not isinstance(value, bool):
            raise AttributeValueError(name, f"a boolean {kind}", _describe(value))
        return value
    if isinstance(default, (int, float)):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise AttributeValueError(name, f"a number ({kind})", _describe(value))
        if not math.isfinite(value):
            raise AttributeValueError(name, f"a finite number ({kind})", repr(value))
        if isinstance(default, int) and not isinstance(value, int):
            if not float(value).is_integer():
                raise AttributeValueError(name, f"an integer ({kind})", repr(value))
            value = int(value)
        return value
    if isinstance(default, str):
        if not isinstance(value, str):
            raise AttributeValueError(name, f"a string ({kind})", _describe(value))
        return value
    if isinstance(default, list):
        if not isinstance(value, (list, tuple)) or not all(
            isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in value
        ):
            raise AttributeValueError(name, f"a list of finite numbers ({kind})", _describe(value))
        return list(value)
    return value


def _unwrap_numpy(value: Any) -> Any:
    # NumPy scalars arrive from user code all the time; compare them as Python numbers.
    item = getattr(value, "item", None)
    if callable(item) and getattr(value, "shape", None) == ():
        return item()
    return value


def _describe(value: Any) -> str:
    text = repr(value)
    return f"{type(value).__name__} {text[:60]}"


def _freeze(value: Any) -> Any:
    return tuple(value) if isinstance(value, list) else value


def _thaw(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value
