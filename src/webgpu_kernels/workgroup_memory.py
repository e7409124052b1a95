"""How much workgroup memory a rendered WGSL entry point uses, to check it against the device.

WebGPU refuses a compute pipeline whose entry point statically uses more workgroup storage than
the device's maxComputeWorkgroupStorageSize: the sum of roundUp(16, SizeOf(T)) over its
``var<workgroup>`` variables. wgpu-native 0.32 does not check it (gfx-rs/wgpu#8946), and what
happens then depends on the driver: lavapipe (limit 32768) builds and runs a shader at 4x the
limit correctly, while on an NVIDIA H200 (49152) one at 2x hung the readback for good
(``scripts/workgroup_memory_probe.py``, docs/perf/h200-wgmem-30.log). So a package that passes
on lavapipe in CI could hang a user's GPU; the engine checks the limit itself.

This reads only what it needs from the WGSL: struct, alias and const declarations, the
workgroup variables, and which functions the entry point reaches (a variable counts when the
entry point or a function it calls names it). Sizes follow the WGSL specification's memory
layout tables. What it cannot size (an ``override`` or an expression as an array count, a type it
does not know) gives None: the check is skipped, never guessed.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

_SCALARS = {"f32": (4, 4), "i32": (4, 4), "u32": (4, 4), "f16": (2, 2), "bool": (4, 4)}
_SUFFIX = {"f": "f32", "i": "i32", "u": "u32", "h": "f16"}
_COMMENT = re.compile(r"//[^\n]*|/\*.*?\*/", re.DOTALL)  # WGSL block comments nest; templates rarely do
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_STRUCT = re.compile(r"\bstruct\s+(\w+)\s*\{([^{}]*)\}")
_ALIAS = re.compile(r"\balias\s+(\w+)\s*=\s*([^;]+);")
_CONST = re.compile(r"\bconst\s+(\w+)\s*(?::\s*\w+\s*)?=\s*([0-9]+)[iu]?\s*;")
_WORKGROUP_VAR = re.compile(r"\bvar\s*<\s*workgroup\s*>\s*(\w+)\s*:\s*([^;]+);")
_FN = re.compile(r"\bfn\s+(\w+)\s*\(")
_MEMBER_ATTR = re.compile(r"@(size|align)\s*\(\s*([0-9]+)[iu]?\s*\)")


class _Unknown(Exception):
    """A type or count this reader cannot size."""


def _round_up(k: int, n: int) -> int:
    return -(-n // k) * k


def _split_args(text: str) -> list[str]:
    """``f32, 4`` -> ["f32", "4"], at the top nesting level of ``<>``."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(text[start:i].strip())
            start = i + 1
    tail = text[start:].strip()
    if tail:
        parts.append(tail)
    return parts


class _Layout:
    def __init__(self, wgsl: str) -> None:
        self.aliases = {m[1]: m[2].strip() for m in _ALIAS.finditer(wgsl)}
        self.consts = {m[1]: int(m[2]) for m in _CONST.finditer(wgsl)}
        self.structs = {m[1]: m[2] for m in _STRUCT.finditer(wgsl)}
        self._sized: dict[str, tuple[int, int]] = {}

    def count(self, text: str) -> int:
        text = text.strip()
        literal = re.fullmatch(r"([0-9]+)[iu]?", text)
        if literal:
            return int(literal[1])
        if text in self.consts:
            return self.consts[text]
        raise _Unknown(text)

    def align_size(self, text: str, depth: int = 0) -> tuple[int, int]:
        """(AlignOf, SizeOf) of a WGSL type."""
        if depth > 32:
            raise _Unknown(text)
        text = re.sub(r"\s+", "", text)
        if text in _SCALARS:
            return _SCALARS[text]
        if text in self.aliases:
            return self.align_size(self.aliases[text], depth + 1)
        if text in self.structs:
            return self._struct(text, depth)
        short = re.fullmatch(r"(vec[234]|mat[234]x[234])([fihu])", text)
        if short:
            text = f"{short[1]}<{_SUFFIX[short[2]]}>"
        generic = re.fullmatch(r"(\w+)<(.*)>", text)
        if generic is None:
            raise _Unknown(text)
        name, args = generic[1], _split_args(generic[2])
        if name == "atomic" and len(args) == 1 and args[0] in ("i32", "u32"):
            return 4, 4
        vector = re.fullmatch(r"vec([234])", name)
        if vector and len(args) == 1:
            lanes = int(vector[1])
            align, size = self.align_size(args[0], depth + 1)
            return align * (4 if lanes == 3 else lanes), size * lanes
        matrix = re.fullmatch(r"mat([234])x([234])", name)
        if matrix and len(args) == 1:  # C columns of vecR
            column_align, column_size = self.align_size(f"vec{matrix[2]}<{args[0]}>", depth + 1)
            return column_align, int(matrix[1]) * _round_up(column_align, column_size)
        if name == "array" and len(args) == 2:
            align, size = self.align_size(args[0], depth + 1)
            return align, self.count(args[1]) * _round_up(align, size)
        raise _Unknown(text)

    def _struct(self, name: str, depth: int) -> tuple[int, int]:
        if name in self._sized:
            return self._sized[name]
        offset, struct_align = 0, 1
        for member in (m.strip() for m in self.structs[name].split(",")):
            if not member:
                continue
            attrs = {k: int(v) for k, v in _MEMBER_ATTR.findall(member)}
            declaration = _MEMBER_ATTR.sub("", member).strip()
            if ":" not in declaration:
                raise _Unknown(member)
            align, size = self.align_size(declaration.split(":", 1)[1], depth + 1)
            align, size = attrs.get("align", align), attrs.get("size", size)
            offset = _round_up(align, offset) + size
            struct_align = max(struct_align, align)
        sized = struct_align, _round_up(struct_align, offset)
        self._sized[name] = sized
        return sized


def _function_bodies(wgsl: str) -> dict[str, str]:
    """Function name -> its body text (braces matched)."""
    bodies = {}
    for match in _FN.finditer(wgsl):
        start = wgsl.find("{", match.end())
        if start < 0:
            continue
        depth = 0
        for end in range(start, len(wgsl)):
            depth += {"{": 1, "}": -1}.get(wgsl[end], 0)
            if depth == 0:
                bodies[match[1]] = wgsl[start:end + 1]
                break
    return bodies


def workgroup_storage(wgsl: str, entry_point: str) -> Mapping[str, int] | None:
    """Each workgroup variable the entry point statically uses -> the bytes it counts for
    (roundUp(16, SizeOf)), or None when some variable cannot be sized (or the entry point is not
    found). Their sum is what maxComputeWorkgroupStorageSize bounds."""
    text = _COMMENT.sub(" ", wgsl)
    variables = {m[1]: m[2] for m in _WORKGROUP_VAR.finditer(text)}
    if not variables:
        return {}
    bodies = _function_bodies(text)
    if entry_point not in bodies:
        return None
    reached, pending, named = set(), [entry_point], set()
    while pending:
        fn = pending.pop()
        if fn in reached:
            continue
        reached.add(fn)
        idents = set(_IDENT.findall(bodies[fn]))
        named |= idents
        pending.extend(name for name in idents if name in bodies)
    layout = _Layout(text)
    used = {}
    try:
        for name, type_text in variables.items():
            if name in named:
                used[name] = _round_up(16, layout.align_size(type_text)[1])
    except (_Unknown, KeyError, ValueError):
        return None
    return used


def describe(usage: Mapping[str, int]) -> str:
    """``partial 1024 + tile 4096 = 5120 bytes``."""
    parts = " + ".join(f"{name} {size}" for name, size in usage.items())
    return f"{parts} = {sum(usage.values())} bytes" if len(usage) > 1 else f"{parts} bytes"
