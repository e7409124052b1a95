"""A call checked against the manifest's contract, before any expression or GPU work.

Takes what the caller passed (tensor shapes and dtypes, attributes, tunables) and returns a
hashable :class:`CallSignature`, or raises an :class:`InputError` subclass naming the argument,
what was expected and what came.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .errors import (
    AttributeValueError,
    DTypeError,
    InputError,
    MissingInputError,
    RankError,
    ShapeError,
    UnknownInputError,
    describe_value,
    name_meant,
    one_line,
    short_repr,
    shorten,
)  # fmt: skip
from .manifest import Manifest
from .sandbox import MAX_SEQUENCE_LENGTH

#: Highest rank an input may have (NumPy's own limit).
MAX_RANK = 64
#: An input has fewer elements than this (and no dimension this large).
MAX_ELEMENTS = 2**62
#: Longest string (and list) attribute or tunable: what an expression may hold.
MAX_TEXT = MAX_SEQUENCE_LENGTH


@dataclass(frozen=True)
class CallSignature:
    """Everything about a call that shapes its plan; equal signatures share one plan."""

    shapes: tuple[tuple[str, tuple[int, ...]], ...]
    dtypes: tuple[tuple[str, str], ...]  # type variable -> ONNX dtype name
    attrs: tuple[tuple[str, Any], ...]
    tunables: tuple[tuple[str, Any], ...]
    #: where among attrs and tunables a value is -0.0 (``alpha``, or ``coef[1]`` for a list's
    #: item): it equals 0.0, yet a kernel given it (a uniform, a template) can compute another
    #: result, so the two share no plan. A list's items by index: [-0.0, 0.0] == [0.0, -0.0]
    negative_zeros: tuple[str, ...] = ()
    #: the type of each value among attrs and tunables (of each item of a list): a float default
    #: keeps an int an int (docs/format.md), and 1 == 1.0, yet a template renders "1" for one and
    #: "1.0" for the other (and `/` in WGSL divides them differently), so the two share no plan
    value_types: tuple[Any, ...] = ()

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
    *,
    gpu_inputs: Collection[str] = (),
    names_checked: bool = False,
) -> CallSignature:
    """Check inputs (name -> (shape, ONNX dtype name)), attributes and tunables. ``gpu_inputs``
    names the inputs given as GpuTensors, which a dtype's conversion hint treats apart;
    ``names_checked``: the caller ran :func:`check_input_names` on these names (or more) already."""
    declared = {spec.role: spec for spec in manifest.inputs}
    if not names_checked:
        check_input_names(manifest, tensors)
    type_bindings: dict[str, tuple[str, str]] = {}  # type variable -> (dtype, the argument that bound it)
    bound_by: dict[str, list[str]] = {}  # type variable -> every input of that dtype so far, for the hint
    shapes = []
    for spec in manifest.inputs:
        if spec.role not in tensors:
            if spec.optional:
                continue
            raise missing_input(manifest, spec.role, "nothing")
        shape, dtype = checked_tensor_meta(spec.role, tensors[spec.role])
        if isinstance(spec.rank, int) and len(shape) != spec.rank:
            raise RankError(spec.role, f"rank {spec.rank}", f"rank {len(shape)} (shape {list(shape)})")
        allowed = manifest.type_constraints[spec.dtype]
        if dtype not in allowed:
            # Where other inputs give the type variable an allowed dtype, converting to another one
            # would be refused next, as unlike theirs (float16 X, a bias from a list told float32).
            peer = _peer_dtype(manifest, tensors, spec.role, spec.dtype, allowed)
            on_gpu = spec.role in gpu_inputs
            hint = conversion_hint(dtype, [peer], on_gpu=on_gpu) if peer else ""
            hint = hint or conversion_hint(dtype, allowed, on_gpu=on_gpu)
            if dtype == "bool" and hint and spec.description:
                # True and False become 1 and 0, which need not be what the input's numbers mean (a
                # keep-mask made an additive mask that dropped no key): its description says what they do.
                hint += (f"; True becomes 1 and False 0, and {spec.role!r} is: "
                         f"{shorten(one_line(spec.description), 240)}")  # fmt: skip
            raise DTypeError(spec.role, f"dtype in {list(allowed)} (type variable {spec.dtype})", dtype,
                             hint=hint, type_variable=spec.dtype, allowed=tuple(allowed))  # fmt: skip
        bound = type_bindings.setdefault(spec.dtype, (dtype, spec.role))
        if bound[0] != dtype:
            raise DTypeError(spec.role, f"{bound[0]} like {bound[1]!r} (both are type variable {spec.dtype})", dtype,
                             hint=_mixed_dtypes_hint(spec.dtype, spec.role, dtype, bound_by[spec.dtype], bound[0],
                                                     gpu_inputs), type_variable=spec.dtype,
                             bound_by=tuple(bound_by[spec.dtype]), bound_dtype=bound[0])  # fmt: skip
        bound_by.setdefault(spec.dtype, []).append(spec.role)
        shapes.append((spec.role, shape))
    output_types = {spec.dtype for spec in manifest.outputs}
    for type_var, allowed in manifest.type_constraints.items():
        # An output's type variable no input binds is determined by a one-type constraint (ONNX ops
        # give statistics outputs a type U of float32 whatever the input's type): the output and
        # `dtypes.U` get it. manifest.reference_errors refuses an output that nothing determines. A
        # type variable no tensor has stays unbound: a float16 one would make every call need f16.
        if type_var not in type_bindings and len(allowed) == 1 and type_var in output_types:
            type_bindings[type_var] = (allowed[0], "")
    checked_attrs = _check_values("attribute", manifest.attributes, attrs,
                                  {"input": declared, "tunable": manifest.tunables})  # fmt: skip
    checked_tunables = _check_values("tunable", manifest.tunables, tunables,
                                     {"input": declared, "attribute": manifest.attributes})  # fmt: skip
    return CallSignature(
        shapes=tuple(shapes),
        dtypes=tuple((tv, dt) for tv, (dt, _) in type_bindings.items()),
        attrs=checked_attrs,
        tunables=checked_tunables,
        negative_zeros=tuple(place for k, v in checked_attrs + checked_tunables for place in _negative_zeros(k, v)),
        value_types=tuple(
            tuple(map(type, v)) if isinstance(v, tuple) else type(v) for _, v in checked_attrs + checked_tunables
        ),
    )


def check_input_names(manifest: Manifest, names: Iterable[Any]) -> None:
    """Refuse a name the manifest declares no input for (UnknownInputError), whatever its value: a
    call checks the names before it reads any value, so an unknown name given None or a string is
    reported as unknown, not as a value that is no array."""
    declared = {spec.role for spec in manifest.inputs}
    for name in names:
        if name not in declared:
            outputs = {spec.role for spec in manifest.outputs}
            hint = ("it is an output, returned by the call" if name in outputs
                    else _elsewhere(name, {"attribute": manifest.attributes, "tunable": manifest.tunables}))  # fmt: skip
            raise UnknownInputError(str(name), f"one of the inputs {sorted(declared)}", "an unknown input", hint=hint)


def has_negative_zero(value: Any) -> bool:
    """Whether ``value`` (a number, or a tuple or list of them) holds a -0.0."""
    if isinstance(value, (float, np.floating)):
        return value == 0.0 and math.copysign(1.0, value) < 0
    if isinstance(value, (tuple, list)):
        return any(has_negative_zero(v) for v in value)
    return False


def negative_zero_indices(value: Any) -> tuple[int, ...]:
    """The indices of a tuple's or list's items that are -0.0."""
    return tuple(i for i, v in enumerate(value) if has_negative_zero(v))


def _negative_zeros(name: str, value: Any) -> list[str]:
    """Where a checked value (a number, or a tuple of numbers) holds -0.0: ``name``, ``name[i]``."""
    if isinstance(value, tuple):
        return [f"{name}[{i}]" for i in negative_zero_indices(value)]
    return [name] if has_negative_zero(value) else []


def checked_tensor_meta(role: str, meta: Any) -> tuple[tuple[int, ...], str]:
    """(shape, ONNX dtype name) of one input: dimensions non-negative integers, dtype a name."""
    try:
        shape, dtype = meta
    except (TypeError, ValueError):
        raise InputError(role, "a tensor (an array, a GpuTensor or a TensorMeta)", describe_value(meta)) from None
    try:
        dims = tuple(shape)
    except TypeError:
        raise ShapeError(role, "a shape (a sequence of integers)", describe_value(shape)) from None
    if len(dims) > MAX_RANK:
        raise RankError(role, f"rank at most {MAX_RANK}", f"rank {len(dims)}")
    checked: list[int] = []
    for i, d in enumerate(dims):
        try:
            if isinstance(d, (bool, np.bool_)):  # an int to Python; np.bool_ has __index__ in some NumPy releases
                raise TypeError
            d = operator.index(d)  # ints and NumPy integers; never a float, not even 2.0
        except TypeError:
            raise ShapeError(role, "integer dimensions",
                             f"{describe_value(d)} as dimension {i} of {describe_value(shape)}") from None  # fmt: skip
        if d < 0:
            raise ShapeError(role, "non-negative dimensions", f"shape {shape_text(checked + [d])}")
        checked.append(d)
    if too_many_elements(checked):
        raise ShapeError(role, f"fewer than 2^{MAX_ELEMENTS.bit_length() - 1} elements", f"shape {shape_text(checked)}")
    if not isinstance(dtype, str):
        try:
            dtype = np.dtype(dtype).name
        except (TypeError, ValueError):
            raise DTypeError(role, "a NumPy dtype or an ONNX dtype name", describe_value(dtype)) from None
    return tuple(checked), dtype


#: The dtypes a refused one may be converted to, most wanted first, by the kind of what came: a
#: float (bfloat16 too) only to floats, float32 first (the type kernels compute in); an integer or
#: bool to integers, then floats; an integer last to bool (a 0/1 mask, as Hugging Face's int64
#: attention_mask). A float is never advised to become an integer (that truncates) or a bool (an
#: additive mask of 0 and -inf is none).
_FLOAT_TARGETS = ("float32", "float16", "bfloat16", "float64")
_INT_TARGETS = ("int32", "int64", "uint32", "uint64", "int16", "uint16", "int8", "uint8")
_CONVERSION_TARGETS = {"f": _FLOAT_TARGETS, "i": _INT_TARGETS + _FLOAT_TARGETS + ("bool",),
                       "u": _INT_TARGETS + _FLOAT_TARGETS + ("bool",), "b": _INT_TARGETS + _FLOAT_TARGETS}  # fmt: skip


_LIST_DTYPES = ("float64", "int64", "bool")  # what NumPy makes of a Python list of floats, ints or bools


def missing_input(manifest: Manifest, role: str, got: str) -> MissingInputError:
    """The error for required input ``role`` given ``got`` instead of a tensor."""
    spec = next(spec for spec in manifest.inputs if spec.role == role)
    allowed = manifest.type_constraints.get(spec.dtype, ())
    return MissingInputError(role, f"a {spec.dtype} tensor ({' or '.join(allowed)})", got)


def conversion_hint(dtype: str, allowed: Sequence[str], *, on_gpu: bool = False, names: str = "") -> str:
    """How to convert an input of ``dtype`` that the constraint ``allowed`` refused, or "" where no
    conversion fits (an object or string array, a float for an integer input). A GpuTensor
    (``on_gpu``) converts itself between float32 and float16 (GpuTensor.astype); another dtype is
    uploaded again, converted. ``names`` says which inputs to convert, where the message names
    others too."""
    target = _conversion_target(dtype, allowed)
    if target is None:
        return ""
    convert = f".astype({_dtype_expression(target)})"
    if on_gpu and {dtype, target} == {"float32", "float16"}:
        how = f"convert {names or 'it'} on the GPU: t{convert}, a new GpuTensor (release the old one after its last use)"
    elif on_gpu:
        how = (f"upload {names or 'it'} converted: to_gpu(a{convert}) from the array, or to_gpu(t.numpy(){convert}) "
               "from this tensor (GpuTensor.astype converts only between float32 and float16)")
    else:
        how = f"convert {names + ' ' if names else ''}with {convert}"
    if not on_gpu and not names and dtype in _LIST_DTYPES:  # a list has no .astype
        how += f", or np.asarray(x, {_dtype_expression(target)}) from a list"
    if target == "bool":
        how += "; nonzero values become True"
    if dtype == "float64":  # what NumPy's defaults, Python floats and lists of them give
        return f"NumPy's default, Python floats and lists of them are float64: {how}"
    return how


def _peer_dtype(manifest: Manifest, tensors: Mapping[str, Any], role: str, type_var: str,
                allowed: Sequence[str]) -> str | None:  # fmt: skip
    """The first allowed dtype among the other inputs of ``type_var``, in the manifest's order (the
    one that binds it), read as checked_tensor_meta reads it; None where none has one."""
    for spec in manifest.inputs:
        if spec.dtype != type_var or spec.role == role or spec.role not in tensors:
            continue
        try:
            _, dtype = tensors[spec.role]
            name = dtype if isinstance(dtype, str) else np.dtype(dtype).name
        except (TypeError, ValueError):  # refused when its own turn comes
            continue
        if name in allowed:
            return name
    return None


def _mixed_dtypes_hint(type_var: str, role: str, dtype: str, bound_roles: Sequence[str], bound_dtype: str,
                       gpu_inputs: Collection[str]) -> str:  # fmt: skip
    """Which inputs gave type variable ``type_var`` which dtype, and the conversion that makes them
    one: ``role``'s to the dtype the inputs before it have, else theirs to ``role``'s (a float
    is never advised to become an integer, nor an integer a bool)."""
    others = " and ".join(map(repr, bound_roles))
    said = (f"{others} {'is' if len(bound_roles) == 1 else 'are'} {bound_dtype} and {role!r} {dtype}, but a call "
            f"gives type variable {type_var} one dtype")  # fmt: skip
    # a bool is widened to the integers, not the integers narrowed to bool
    how = "" if bound_dtype == "bool" else conversion_hint(dtype, [bound_dtype], on_gpu=role in gpu_inputs,
                                                             names=repr(role))  # fmt: skip
    if not how:
        how = conversion_hint(bound_dtype, [dtype], on_gpu=any(r in gpu_inputs for r in bound_roles), names=others)
    return f"{said}: {how}" if how else said


def _conversion_target(dtype: str, allowed: Sequence[str]) -> str | None:
    if dtype == "bfloat16":  # ml_dtypes' type: NumPy's kind for it is V (raw bytes)
        kind = "f"
    else:
        try:
            kind = np.dtype(dtype).kind
        except (TypeError, ValueError):  # a name NumPy does not know (the CLI's, a typo)
            return None
    targets = [t for t in _CONVERSION_TARGETS.get(kind, ()) if t in allowed]
    # One that holds every value first (uint8 to int32); else the widest (uint64 to int64, not to
    # int32, whose range it passes far more often).
    safe = [t for t in targets if dtype != "bfloat16" and t != "bfloat16" and np.can_cast(dtype, t, "safe")]
    if safe or not targets:
        return safe[0] if safe else None
    return max(targets, key=lambda t: 2 if t == "bfloat16" else np.dtype(t).itemsize)


def _dtype_expression(name: str) -> str:
    """The Python expression for a dtype, as a user would write it in ``.astype(...)``."""
    if name == "bfloat16":
        return "ml_dtypes.bfloat16"
    return "np.bool_" if name == "bool" else f"np.{name}"


def _elsewhere(name: str, sections: Mapping[str, Mapping[str, Any]]) -> str:
    """The hint for a name given in the wrong place that the manifest declares as another kind: an
    ONNX op's axis or axes, an attribute in early opsets, is an input in later ones."""
    where = {"input": "the inputs dict", "attribute": "attrs=", "tunable": "tunables="}
    for kind, names in sections.items():
        if name in names:
            return f"it is {'an' if kind[0] in 'aeiou' else 'a'} {kind} of this kernel: pass it in {where[kind]}"
    return ""


def _check_values(
    kind: str, defaults: Mapping[str, Any], given: Mapping[str, Any] | None,
    elsewhere: Mapping[str, Mapping[str, Any]] | None = None,
) -> tuple[tuple[str, Any], ...]:
    """Merge caller values over the manifest's defaults; each must match its default's kind.
    ``elsewhere``: the manifest's other kinds of names (kind -> names), for an unknown name's hint."""
    keyword = "attrs" if kind == "attribute" else f"{kind}s"  # the call's keyword: attrs=, tunables=
    if given is not None and not isinstance(given, Mapping):
        raise InputError(keyword, f"a dict of {kind} name -> value", describe_value(given))
    given = dict(given or {})
    for name in given:
        if not isinstance(name, str):
            raise InputError(keyword, f"{kind} names (strings)", describe_value(name))
        if name not in defaults:
            # "one of the attributes []" read as a list the caller had failed to find a name in
            expected = f"one of the {kind}s {sorted(defaults)}" if defaults else f"no {kind}s (this kernel has none)"
            # a name the manifest renamed or the caller misspelt: the list alone left it to be spotted
            close = name_meant(name, [str(d) for d in defaults])
            hint = _elsewhere(name, elsewhere or {}) or (f"did you mean {close!r}?" if close else "")
            raise UnknownInputError(name, expected, f"an unknown {kind}", hint=hint)
    merged = []
    for name, default in defaults.items():
        value = given.get(name, default)
        merged.append((name, _freeze(_check_value(kind, name, default, value))))
    return tuple(merged)


def check_tunables(manifest: Manifest, tunables: Mapping[str, Any]) -> dict[str, Any]:
    """``tunables`` checked as a call checks them (names declared, values of their default's kind),
    merged over the manifest's: for a caller that checks them before any call (tune --tunable)."""
    return dict(_check_values("tunable", manifest.tunables, tunables,
                              {"input": {s.role: s for s in manifest.inputs}, "attribute": manifest.attributes}))


def default_value_problems(manifest: Manifest) -> list[tuple[str, str]]:
    """(JSON path, message) for each attribute or tunable default that no caller could pass (1e39,
    2**70, a 5,000-character string): every call leaving it alone would fail, blaming the caller."""
    problems = []
    for kind, section, defaults in (("attribute", "attributes", manifest.attributes),
                                    ("tunable", "tunables", manifest.tunables)):  # fmt: skip
        for name, default in defaults.items():
            try:
                _check_value(kind, name, default, default)
            except AttributeValueError as exc:
                problems.append((f"{section}.{name}", f"the default must be a value a caller may pass: expected "
                                                      f"{exc.expected}, got {exc.received}"))  # fmt: skip
    return problems


def _check_value(kind: str, name: str, default: Any, value: Any) -> Any:
    """``value`` as a plain Python value of its default's kind (bool, number, string, list of
    numbers), within the sizes expressions handle; anything else is an AttributeValueError."""
    if isinstance(value, np.ma.MaskedArray):  # as an input is: a masked alpha had run as 0, or as the data under its mask
        raise AttributeValueError(name, f"a value of its default's kind ({kind})", "a masked array",
                                  hint="pass .filled(...) or .data")  # fmt: skip
    value = _unwrap_numpy(value)
    if isinstance(default, bool):
        if not isinstance(value, bool):
            raise AttributeValueError(name, f"a boolean ({kind})", describe_value(value))
        return bool(value)
    if isinstance(default, (int, float)):
        if isinstance(default, float) and isinstance(value, int) and abs(value) >= 2**63:
            # A float attribute keeps a smaller int as an int (a template renders "1", not "1.0"),
            # but one past 2^63, which no template could render as a WGSL integer, is taken as the
            # float it is: 2**63 had been refused while 2.0**63 ran.
            try:
                value = float(value)
            except OverflowError:  # past float64, so past f32 too
                raise AttributeValueError(name, f"{_F32_RANGE} ({kind})", describe_value(value)) from None
        value = _number(kind, name, value, "an integer" if isinstance(default, int) else "a number")
        if isinstance(default, int) and not isinstance(value, int):
            if not value.is_integer():
                raise AttributeValueError(name, f"an integer ({kind})", describe_value(value))
            value = _number(kind, name, int(value), "an integer")
        return value
    if isinstance(default, str):
        if not isinstance(value, str):
            raise AttributeValueError(name, f"a string ({kind})", describe_value(value))
        if len(value) > MAX_TEXT:
            raise AttributeValueError(name, f"a string of at most {MAX_TEXT} characters ({kind})",
                                      f"{len(value)} characters")  # fmt: skip
        return str(value)
    if isinstance(default, list):
        if isinstance(value, np.ndarray) and value.ndim == 1:
            value = value.tolist()
        if not isinstance(value, (list, tuple)):
            raise AttributeValueError(name, f"a list of finite numbers ({kind})", describe_value(value))
        if len(value) > MAX_TEXT:
            raise AttributeValueError(name, f"a list of at most {MAX_TEXT} numbers ({kind})", f"{len(value)} items")
        try:
            items = [_number(kind, name, _unwrap_numpy(v), "a list of finite numbers") for v in value]
        except AttributeValueError as exc:
            if exc.number_meant is None:
                raise
            # The advice is the whole list, its booleans as numbers: "pass 1" would replace the list.
            meant = [int(v) if isinstance(v, bool) else v for v in map(_unwrap_numpy, value)]
            raise AttributeValueError(name, exc.expected, exc.received, kind=kind, number_meant=exc.number_meant,
                                      list_meant=meant, hint=f"pass {meant!r}: a boolean is not a number here") from None  # fmt: skip
        if default and all(isinstance(d, int) and not isinstance(d, bool) for d in default):
            # A list of integers by its default, as an int scalar is: [1.0] had reached expressions as
            # a float, where indexing with it was blamed on the manifest.
            if not all(isinstance(v, int) or v.is_integer() for v in items):
                raise AttributeValueError(name, f"a list of integers ({kind})", describe_value(value))
            items = [_number(kind, name, int(v), "a list of integers") for v in items]
        return items
    raise AttributeValueError(name, f"a value of the kind of the manifest's default {short_repr(default)} ({kind})",
                              describe_value(value))  # fmt: skip


F32_MAX = 3.4028234663852886e38
#: The float32 rounding bound: the largest f32 plus half its last unit (2^103). A float below it in
#: magnitude rounds to a finite f32 (3.4028235e38, NumPy's print of F32_MAX, is such a float; it
#: had been refused); one at it or past it rounds to infinity.
F32_ROUNDING_BOUND = F32_MAX + 2.0**103
_F32_RANGE = f"a number that rounds to a finite float32 (|x| < {F32_ROUNDING_BOUND!r}; the largest is {F32_MAX!r})"


def _number(kind: str, name: str, value: Any, what: str) -> int | float:
    """A finite int or float (plain Python, integers below 2^63 in magnitude). ``what``: the value
    expected, as "a number"; every message says it as "WHAT (KIND)"."""
    if isinstance(value, bool):  # ONNX's 0/1 flags are int attributes, where Python code writes True
        raise AttributeValueError(name, f"{what} ({kind})", describe_value(value),
                                  hint=f"pass {int(value)}: a boolean is not a number here", kind=kind,
                                  number_meant=int(value))  # fmt: skip
    if not isinstance(value, (int, float)):
        raise AttributeValueError(name, f"{what} ({kind})", describe_value(value))
    if isinstance(value, int):
        if abs(value) >= 2**63:
            raise AttributeValueError(name, f"{what} below 2^63 in magnitude ({kind})", describe_value(value))
        return int(value)
    if not math.isfinite(value):
        raise AttributeValueError(name, f"a finite number ({kind})", describe_value(value))
    if abs(value) >= F32_ROUNDING_BOUND:
        # WebGPU computes in at most 32-bit floats: a larger value cannot reach a shader.
        raise AttributeValueError(name, f"{_F32_RANGE} ({kind})", describe_value(value))
    if abs(value) > F32_MAX:  # rounds to the largest f32, as a float32 conversion would
        return math.copysign(F32_MAX, value)
    return float(value)


def _unwrap_numpy(value: Any) -> Any:
    # NumPy scalars (and 0-d arrays) arrive from user code all the time; compare them as Python values.
    # Other array-likes (a torch or JAX 0-d tensor, a 1-d one for a list, a typed buffer such as
    # array.array or memoryview, as an input takes) are read through NumPy; one NumPy cannot read
    # (a CUDA tensor, a buffer of pointers) is described as it came. A masked value (np.ma.masked in
    # a list) stays as it came, to be refused: its item() is 0, or the data under its mask.
    if isinstance(value, np.ma.MaskedArray):
        return value
    if not isinstance(value, _PLAIN) and (hasattr(value, "__array__") or is_buffer(value)):
        try:
            value = np.asarray(value)
        except Exception:
            return value
        if value.ndim == 1:
            return value.tolist()
    if isinstance(value, (np.generic, np.ndarray)) and value.shape == ():
        item = value.item()
        # longdouble's item() is itself (Python has no wider float): take the nearest float
        return float(item) if isinstance(item, np.floating) else item
    return value


_PLAIN = (int, float, str, list, tuple, np.generic, np.ndarray)


def is_buffer(value: Any) -> bool:
    """A typed buffer (memoryview, array.array); str and bytes are text, not numbers."""
    if isinstance(value, (str, bytes)):
        return False
    try:
        memoryview(value).release()
    except (TypeError, ValueError):  # ValueError: a released memoryview
        return False
    return True


def too_many_elements(dims: Sequence[int]) -> bool:
    """Whether a shape reaches :data:`MAX_ELEMENTS`, zero dimensions counted as 1 (NumPy cannot
    make a [2**40, 2**40, 0] array either)."""
    return any(d >= MAX_ELEMENTS for d in dims) or math.prod(max(d, 1) for d in dims) >= MAX_ELEMENTS


def check_array_shape(argument: str, dims: Sequence[int], itemsize: int) -> None:
    """Refuse, with a ShapeError naming ``argument``, a shape of non-negative dimensions that NumPy
    cannot make an array of for elements of ``itemsize`` bytes: only an empty one gets past the
    element count with huge dimensions ([2**62, 0], [2**61, 0] of float32), and NumPy, counting
    zeros as 1, refuses it with a bare ValueError ("array is too big") that numpy() would raise."""
    if too_many_elements(dims) or math.prod(max(d, 1) for d in dims) * itemsize > np.iinfo(np.intp).max:
        raise ShapeError(argument, "a shape NumPy can make (its dimensions, zeros counted as 1, multiply to fewer "
                         "than 2^62 elements and 2^63 bytes)", f"shape {shape_text(dims)}")  # fmt: skip


def shape_text(dims: Any) -> str:
    """``[2, 3]`` for a message; a dimension of more than 64 bits is described, not printed (str()
    of a 5,000-digit integer raises, and nobody reads one)."""
    return "[" + ", ".join(str(d) if abs(d).bit_length() <= 64 else f"<a {abs(d).bit_length()}-bit integer>"
                           for d in dims) + "]"  # fmt: skip


def _freeze(value: Any) -> Any:
    return tuple(value) if isinstance(value, list) else value


def _thaw(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value
