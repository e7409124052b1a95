"""WGSL uniform-address-space layout: struct declarations and their packed bytes.

Supports scalars (u32, i32, f32, f16), vectors of them (``vec4<f32>``, ``vec4f``) and fixed-size
arrays of either (``array<u32, 4>``, whose element stride rounds up to 16 bytes in uniforms).
Alignment and size follow the WGSL specification's "Memory Layout" tables.
"""

from __future__ import annotations

import math
import re
import struct
from dataclasses import dataclass
from typing import Any

from .errors import LayoutError, short_repr

_SCALARS = {"u32": ("<I", 4), "i32": ("<i", 4), "f32": ("<f", 4), "f16": ("<e", 2)}
_SHORT_SUFFIX = {"f": "f32", "i": "i32", "u": "u32", "h": "f16"}
_VECTOR = re.compile(r"^vec([234])(?:<\s*(\w+)\s*>|([fiuh]))$")
_ARRAY = re.compile(r"^array<\s*(.+?)\s*,\s*(\d+)u?\s*>$")


@dataclass(frozen=True)
class WgslType:
    scalar: str
    lanes: int = 1  # vector width, 1 for scalars
    count: int | None = None  # array length, None when not an array

    @property
    def _element_size(self) -> int:
        return _SCALARS[self.scalar][1] * self.lanes

    @property
    def _element_align(self) -> int:
        return _SCALARS[self.scalar][1] * (4 if self.lanes == 3 else self.lanes)

    @property
    def align(self) -> int:
        return _round_up(16, self._element_align) if self.count is not None else self._element_align

    @property
    def stride(self) -> int:
        # Uniform buffers round an array's element stride up to 16 bytes.
        return _round_up(16, _round_up(self._element_align, self._element_size))

    @property
    def size(self) -> int:
        return self.stride * self.count if self.count is not None else self._element_size

    def wgsl(self) -> str:
        element = self.scalar if self.lanes == 1 else f"vec{self.lanes}<{self.scalar}>"
        return f"array<{element}, {self.count}>" if self.count is not None else element


def parse_type(text: str) -> WgslType:
    text = text.strip()
    array = _ARRAY.match(text)
    if array:
        if _ARRAY.match(array.group(1)):  # before the element's own checks: its stride advice leads here
            raise LayoutError(f"nested arrays are not supported in uniform structs: {short_repr(text)}")
        element = parse_type(array.group(1))
        if _round_up(element._element_align, element._element_size) % 16:
            # WGSL requires a uniform array's element stride to be a multiple of 16 bytes.
            raise LayoutError(f"{short_repr(text)} cannot live in a uniform buffer (element stride must be a multiple "
                              f"of 16 bytes); use an array of vec4 (e.g. array<vec4<u32>, N>)")  # fmt: skip
        return WgslType(element.scalar, element.lanes, int(array.group(2)))
    if text in _SCALARS:
        return WgslType(text)
    vector = _VECTOR.match(text)
    if vector:
        scalar = vector.group(2) or _SHORT_SUFFIX[vector.group(3)]
        if scalar in _SCALARS:
            return WgslType(scalar, int(vector.group(1)))
    raise LayoutError(f"unsupported uniform field type {short_repr(text)} (use u32, i32, f32, f16, vecN<T> or array<T, N>)")


#: WebGPU's default maxUniformBufferBindingSize: a struct of 100,000,000,000,000 vec4s had raised
#: a raw MemoryError in every call, and smaller huge ones allocated gigabytes before their LayoutError.
MAX_UNIFORM_BYTES = 65536


def _round_up(k: int, n: int) -> int:
    return -(-n // k) * k


@dataclass(frozen=True)
class StructLayout:
    name: str
    fields: tuple[tuple[str, WgslType, int], ...]  # (name, type, byte offset)
    size: int  # padded to 16 bytes, the size of the uniform buffer to bind

    def declaration(self) -> str:
        body = "".join(f"  {name}: {t.wgsl()},\n" for name, t, _ in self.fields)
        return f"struct {self.name} {{\n{body}}};"

    def pack(self, values: list[Any]) -> bytes:
        """Pack one value per field (numbers, or lists for vectors and arrays)."""
        out = bytearray(self.size)
        for (name, t, offset), value in zip(self.fields, values, strict=True):
            try:
                elements = _split(name, t, value)
                for e, element in enumerate(elements):
                    # a scalar's list is refused by _convert: as lanes it had run past the field
                    lanes = element if t.lanes > 1 else [element]
                    base = offset + e * (t.stride if t.count is not None else 0)
                    fmt, width = _SCALARS[t.scalar]
                    for lane, number in enumerate(lanes):
                        struct.pack_into(fmt, out, base + lane * width, _convert(name, t.scalar, number))
            except LayoutError as exc:
                exc.field = name  # so that the caller can name the expression that made the value
                raise
        return bytes(out)


def struct_layout(name: str, fields: list[tuple[str, str]]) -> StructLayout:
    """Lay out ``fields`` ((name, WGSL type)) in declaration order."""
    offset, align, placed = 0, 4, []
    for field_name, type_text in fields:
        try:
            t = parse_type(type_text)
        except LayoutError as exc:  # which field: a "$name" type is seen only when the call is planned
            error = LayoutError(f"field {field_name!r}: {exc}")
            error.field = field_name
            raise error from None
        if t.count == 0:  # WGSL needs a fixed count >= 1; 0 bytes here had failed later in the shader compiler
            error = LayoutError(f"field {field_name!r} ({t.wgsl()}) is an array of 0 elements; WGSL requires a "
                                f"uniform array's element count to be at least 1")  # fmt: skip
            error.field = field_name
            raise error
        offset = _round_up(t.align, offset)
        placed.append((field_name, t, offset))
        offset += t.size
        align = max(align, t.align)
    size = _round_up(16, _round_up(align, max(offset, 1)))
    if size > MAX_UNIFORM_BYTES:  # refused when a call is planned, before pack() allocates the bytes
        raise LayoutError(f"uniform struct {name!r} needs {size} bytes, more than WebGPU's maxUniformBufferBindingSize "
                          f"of {MAX_UNIFORM_BYTES} (the limit every device has; the engine asks for no more)")  # fmt: skip
    return StructLayout(name=name, fields=tuple(placed), size=size)


def _split(name: str, t: WgslType, value: Any) -> list[Any]:
    if t.count is None:
        elements = [value]
    else:
        if not isinstance(value, (list, tuple)) or len(value) != t.count:
            raise LayoutError(f"field {name!r} of type {t.wgsl()} needs a list of {t.count} values, got {short_repr(value)}")
        elements = list(value)
    for element in elements:
        if t.lanes > 1 and (not isinstance(element, (list, tuple)) or len(element) != t.lanes):
            raise LayoutError(f"field {name!r} needs vectors of {t.lanes} values, got {short_repr(element)}")
    return elements


# The smallest magnitudes that round to infinity (half an ulp past the largest finite value): below
# them a value packs as the largest finite one, as wgsl_float writes it (65519 -> 65504.0h).
F32_ROUNDS_TO_INFINITY = 2.0**128 - 2.0**103
F16_ROUNDS_TO_INFINITY = 65520.0


def _convert(name: str, scalar: str, value: Any) -> int | float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise LayoutError(f"field {name!r} ({scalar}) needs a number, got {short_repr(value)}")
    if scalar in ("u32", "i32"):
        if isinstance(value, float):
            if not value.is_integer():
                raise LayoutError(f"field {name!r} ({scalar}) needs an integer, got {short_repr(value)}")
            value = int(value)
        low, high = (0, 2**32 - 1) if scalar == "u32" else (-(2**31), 2**31 - 1)
        if not low <= value <= high:
            raise LayoutError(f"field {name!r} ({scalar}) value {value} is outside [{low}, {high}]")
        return value
    if not math.isfinite(value):
        raise LayoutError(f"field {name!r} ({scalar}) needs a finite number, got {short_repr(value)}")
    if scalar == "f16" and abs(value) >= F16_ROUNDS_TO_INFINITY:
        raise LayoutError(f"field {name!r} (f16) value {short_repr(value)} overflows f16")
    if scalar == "f32" and abs(value) >= F32_ROUNDS_TO_INFINITY:
        raise LayoutError(f"field {name!r} (f32) value {short_repr(value)} overflows f32")
    return float(value)
