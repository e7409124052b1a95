"""How much workgroup memory a rendered WGSL entry point uses, to check it against the device.

WebGPU refuses a compute pipeline whose entry point statically uses more workgroup storage than
the device's maxComputeWorkgroupStorageSize: the sum of roundUp(16, SizeOf(T)) over its
``var<workgroup>`` variables. wgpu-native 0.32 does not check it (gfx-rs/wgpu#8946), and what
happens then depends on the driver: lavapipe (limit 32768) builds and runs a shader at 4x the
limit correctly, while on an NVIDIA H200 (49152) one at 2x hung the readback for good
(``scripts/workgroup_memory_probe.py``, docs/perf/h200-wgmem-30.log). So a package that passes
on lavapipe in CI could hang a user's GPU; the engine checks the limit itself.

This reads only what it needs from the WGSL, in one linear pass over its tokens (comments,
nested ones too, removed first): the module-scope struct, alias, const and override declarations,
the workgroup variables, and which functions the entry point reaches. A variable counts when the
entry point or a function it calls names it (not as a member, ``p.x``; a local of the same name
counts it too, which can only over-count). Sizes follow the WGSL specification's memory layout
tables. An ``override`` counts as its default, the value it has in every pipeline the engine
builds (it sets no pipeline constants). What it cannot size (an expression as an array count or
attribute argument, an ``override`` without a default, a type it does not know, unbalanced
braces) gives None: the check is skipped, never guessed.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

_SCALARS = {"f32": (4, 4), "i32": (4, 4), "u32": (4, 4), "f16": (2, 2), "bool": (4, 4)}
_SUFFIX = {"f": "f32", "i": "i32", "u": "u32", "h": "f16"}
_COMMENT_MARK = re.compile(r"//|/\*|\*/")
#: What ends a `//` comment: every WGSL line break, not only "\n". A comment taken to run on past a
#: "\r" or U+2028 hid code that the compiler then read: a workgroup array past the device's limit,
#: or nesting deep enough to crash it (rendering.check_nesting).
_LINE_BREAK = re.compile("[\n\v\f\r\x85\u2028\u2029]")
#: WGSL's blankspace that Python's \s does not match (the left-to-right and right-to-left marks),
#: as str.translate spaces them: `var\u200e<workgroup>` is a declaration to the compiler.
_MARKS_AS_SPACES = {0x200E: " ", 0x200F: " "}
_NOT_NEWLINE = re.compile("[^\n]")
# identifiers (Unicode, as WGSL's), numbers with their suffixes (``1u``, ``0x400``), one punctuation character
_TOKEN = re.compile(r"[^\W\d]\w*|\d\w*|\S")
_IDENT = re.compile(r"[^\W\d]\w*")
_INT = re.compile(r"([0-9]+)[iu]?")
_SHORT = re.compile(r"(vec[234]|mat[234]x[234])([fihu])")
_VECTOR = re.compile(r"vec([234])")
_MATRIX = re.compile(r"mat([234])x([234])")


class _Unknown(Exception):
    """A type, count or declaration this reader cannot size."""


def _predeclared(name: str) -> bool:
    """Whether ``name`` is one of WGSL's types that align_size knows (a module may shadow it)."""
    return (name in _SCALARS or name in ("array", "atomic")
            or any(p.fullmatch(name) for p in (_SHORT, _VECTOR, _MATRIX)))  # fmt: skip


def _round_up(k: int, n: int) -> int:
    return -(-n // k) * k


def blank_comments(wgsl: str, *, keep_offsets: bool = False) -> str:
    """``wgsl`` with every ``// ...`` and ``/* ... */`` comment replaced by a space and the newlines
    it holds, in one pass (a regular expression over an unclosed ``/*`` repeated had scanned to the
    end of the text from each: 120 KB took 29 s). Block comments nest, as WGSL's do: reading
    ``/* /* */ // */ code`` as a comment that ends at the first ``*/`` hid ``code`` from the checks,
    which the compiler read. A ``/*`` never closed is no comment: its text is checked.
    U+200E and U+200F, blankspace to WGSL but not to ``\\s``, become spaces. With ``keep_offsets``
    each comment character but "\\n" becomes a space instead, so that an offset in the result is
    the same one in ``wgsl`` (workgroup_declarations)."""
    wgsl = wgsl.translate(_MARKS_AS_SPACES)
    pieces, start, pos, depth, opened = [], 0, 0, 0, 0
    while (mark := _COMMENT_MARK.search(wgsl, pos)) is not None:
        token, pos = mark.group(), mark.end()
        if depth == 0 and token == "//":
            line_end = _LINE_BREAK.search(wgsl, mark.start())
            end = len(wgsl) if line_end is None else line_end.start()
            pieces += [wgsl[start:mark.start()], " " * (end - mark.start()) if keep_offsets else " "]
            start = pos = end
        elif token == "/*":
            if depth == 0:
                opened = mark.start()
            depth += 1
        elif token == "*/" and depth > 0:
            depth -= 1
            if depth == 0:
                blank = (_NOT_NEWLINE.sub(" ", wgsl[opened:pos]) if keep_offsets
                         else " " + "\n" * wgsl.count("\n", opened, pos))  # fmt: skip
                pieces += [wgsl[start:opened], blank]
                start = pos
    pieces.append(wgsl[start:])  # from an unclosed comment's start: checked as code
    return "".join(pieces)


def _split_top(tokens: Sequence[str], separator: str = ",") -> list[list[str]]:
    """Split at ``separator`` outside ``<>``, ``()`` and ``[]``; empty parts (a trailing comma) dropped."""
    parts: list[list[str]] = [[]]
    depth = 0
    for t in tokens:
        if t in "<([":
            depth += 1
        elif t in ">)]":
            depth -= 1
        if t == separator and depth == 0:
            parts.append([])
        else:
            parts[-1].append(t)
    return [part for part in parts if part]


class _Module:
    """The module-scope declarations of one WGSL module, from its tokens."""

    def __init__(self, tokens: list[str]) -> None:
        self.tokens = tokens
        self.close: dict[int, int] = {}  # index of each "{" -> its "}"
        stack = []
        for i, t in enumerate(tokens):
            if t == "{":
                stack.append(i)
            elif t == "}":
                if not stack:
                    raise _Unknown("unbalanced braces")
                self.close[stack.pop()] = i
        if stack:
            raise _Unknown("unbalanced braces")
        self.functions: dict[str, tuple[int, int]] = {}
        self.structs: dict[str, list[str]] = {}
        self.aliases: dict[str, list[str]] = {}
        self.consts: dict[str, list[str]] = {}
        self.workgroup: dict[str, list[str]] = {}
        #: each workgroup variable -> the indexes of its ``var`` and of its ``;`` (len(tokens): none)
        self.workgroup_at: dict[str, tuple[int, int]] = {}
        self._sized: dict[str, tuple[int, int]] = {}
        self._scan()

    def _statement(self, i: int) -> tuple[list[str], int]:
        """Tokens from ``i`` to the next ";" (a block skipped whole), and the index after it."""
        j, n = i, len(self.tokens)
        while j < n and self.tokens[j] != ";":
            j = self.close[j] + 1 if self.tokens[j] == "{" else j + 1
        return self.tokens[i:j], j + 1

    def _scan(self) -> None:
        tokens, i, n = self.tokens, 0, len(self.tokens)
        while i < n:
            t = tokens[i]
            if t == "{":
                i = self.close[i] + 1
            elif t == "fn" and i + 1 < n:
                j = i + 2
                while j < n and tokens[j] != "{":
                    j += 1
                if j == n:
                    raise _Unknown("a function without a body")
                self.functions[tokens[i + 1]] = (j + 1, self.close[j])
                i = self.close[j] + 1
            elif t == "struct" and i + 2 < n and tokens[i + 2] == "{":
                self.structs[tokens[i + 1]] = tokens[i + 3:self.close[i + 2]]
                i = self.close[i + 2] + 1
            elif t in ("alias", "const", "override", "var"):
                at = i
                statement, i = self._statement(i + 1)
                self._declare(t, statement, at)
            else:
                i += 1

    def _declare(self, keyword: str, statement: list[str], at: int) -> None:
        if keyword == "var":
            if not statement or statement[0] != "<":
                return
            end = statement.index(">") if ">" in statement else -1
            space = statement[1:end]
            rest = statement[end + 1:]
            if space[:1] == ["workgroup"] and len(rest) >= 3 and rest[1] == ":":
                self.workgroup[rest[0]] = rest[2:rest.index("=")] if "=" in rest else rest[2:]
                self.workgroup_at[rest[0]] = (at, at + 1 + len(statement))
            return
        if not statement:
            return
        name = statement[0]
        if keyword == "override" and "=" not in statement:
            self.consts[name] = []  # no default: a count that reads it is unknown
        elif "=" in statement:  # an override's default is its value: the engine sets no pipeline constants
            value = statement[statement.index("=") + 1:]
            (self.aliases if keyword == "alias" else self.consts)[name] = value

    # --- sizes -----------------------------------------------------------------------------------

    def predeclared(self, tokens: Sequence[str]) -> bool:
        """Whether the type ``tokens`` spell names only WGSL's own types (and numbers): no const,
        override, alias or struct of the module (which shadow WGSL's names), whose lines size it."""
        return all(not _IDENT.fullmatch(t) or (t not in self.consts and t not in self.aliases
                                                and t not in self.structs and _predeclared(t))
                   for t in tokens)  # fmt: skip

    def count(self, tokens: Sequence[str], depth: int = 0) -> int:
        if len(tokens) == 1:
            literal = _INT.fullmatch(tokens[0])
            if literal:
                return int(literal[1])
            if tokens[0] in self.consts and depth < 32:
                return self.count(self.consts[tokens[0]], depth + 1)
        raise _Unknown(" ".join(tokens))

    def align_size(self, tokens: Sequence[str], depth: int = 0) -> tuple[int, int]:
        """(AlignOf, SizeOf) of the WGSL type ``tokens`` spell."""
        if depth > 32 or not tokens:
            raise _Unknown(" ".join(tokens))
        name = tokens[0]
        args: list[list[str]] = []
        if len(tokens) > 1:
            if tokens[1] != "<" or tokens[-1] != ">":
                raise _Unknown(" ".join(tokens))
            args = _split_top(tokens[2:-1])
        if not args:  # declared names shadow the predeclared ones
            if name in self.aliases:
                return self.align_size(self.aliases[name], depth + 1)
            if name in self.structs:
                return self._struct(name, depth)
            if name in _SCALARS:
                return _SCALARS[name]
            short = _SHORT.fullmatch(name)
            if short:
                return self.align_size([short[1], "<", _SUFFIX[short[2]], ">"], depth + 1)
            raise _Unknown(name)
        if name == "atomic" and args in ([["i32"]], [["u32"]]):
            return 4, 4
        vector = _VECTOR.fullmatch(name)
        if vector and len(args) == 1:
            lanes = int(vector[1])
            align, size = self.align_size(args[0], depth + 1)
            return align * (4 if lanes == 3 else lanes), size * lanes
        matrix = _MATRIX.fullmatch(name)
        if matrix and len(args) == 1:  # C columns of vecR
            column_align, column_size = self.align_size([f"vec{matrix[2]}", "<", *args[0], ">"], depth + 1)
            return column_align, int(matrix[1]) * _round_up(column_align, column_size)
        if name == "array" and len(args) == 2:
            align, size = self.align_size(args[0], depth + 1)
            return align, self.count(args[1]) * _round_up(align, size)
        raise _Unknown(" ".join(tokens))

    def _struct(self, name: str, depth: int) -> tuple[int, int]:
        if name in self._sized:
            return self._sized[name]
        offset, struct_align = 0, 1
        for member in _split_top(self.structs[name]):
            attrs: dict[str, int] = {}
            while len(member) >= 2 and member[0] == "@":  # @align(16), @size(32), @location(0) ...
                attr = member[1]
                args: list[str] = []
                rest = member[2:]
                if rest[:1] == ["("]:
                    close = rest.index(")") if ")" in rest else -1
                    if close < 0:
                        raise _Unknown(" ".join(member))
                    args, rest = rest[1:close], rest[close + 1:]
                if attr in ("size", "align"):
                    literal = _INT.fullmatch(args[0]) if len(args) == 1 else None
                    if literal is None:  # a const or an expression: not read, so not guessed
                        raise _Unknown(" ".join(member))
                    attrs[attr] = int(literal[1])
                member = rest
            if len(member) < 3 or member[1] != ":":
                raise _Unknown(" ".join(member))
            align, size = self.align_size(member[2:], depth + 1)
            align, size = attrs.get("align", align), attrs.get("size", size)
            offset = _round_up(align, offset) + size
            struct_align = max(struct_align, align)
        sized = struct_align, _round_up(struct_align, offset)
        self._sized[name] = sized
        return sized

    # --- static use ------------------------------------------------------------------------------

    def names_reached(self, entry_point: str) -> set[str] | None:
        """Every identifier the entry point and the functions it calls name (not as ``p.member``)."""
        if entry_point not in self.functions:
            return None
        named: set[str] = set()
        pending, reached = [entry_point], set()
        while pending:
            fn = pending.pop()
            if fn in reached:
                continue
            reached.add(fn)
            start, end = self.functions[fn]
            for k in range(start, end):
                t = self.tokens[k]
                if _IDENT.fullmatch(t) and self.tokens[k - 1] != ".":
                    named.add(t)
                    if t in self.functions:
                        pending.append(t)
        return named


def workgroup_storage(wgsl: str, entry_point: str) -> Mapping[str, int] | None:
    """Each workgroup variable the entry point statically uses -> the bytes it counts for
    (roundUp(16, SizeOf)), or None when something cannot be read (see the module's docstring).
    Their sum is what maxComputeWorkgroupStorageSize bounds."""
    if "workgroup" not in wgsl:
        return {}
    try:
        module = _Module(_TOKEN.findall(blank_comments(wgsl)))
        if not module.workgroup:
            return {}
        named = module.names_reached(entry_point)
        if named is None:
            return None
        return {name: _round_up(16, module.align_size(type_tokens)[1])
                for name, type_tokens in module.workgroup.items() if name in named}  # fmt: skip
    except (_Unknown, KeyError, ValueError, IndexError):
        return None


@dataclass(frozen=True)
class WorkgroupDeclaration:
    """Where one workgroup variable is declared, and whether its type alone decides its size."""

    #: offset of its ``var`` in the text, and of the ``;`` that ends it (the text's length: none)
    start: int
    end: int
    #: its type names only WGSL's own types: no const, override, alias or struct of the module
    predeclared: bool


def workgroup_declarations(wgsl: str) -> Mapping[str, WorkgroupDeclaration] | None:
    """Each module-scope workgroup variable of ``wgsl`` -> its declaration, read as
    workgroup_storage reads it (comments are none); None when the module cannot be read. For a
    refusal's message only: it tokenizes the text again, with the offsets."""
    try:
        found = list(_TOKEN.finditer(blank_comments(wgsl, keep_offsets=True)))
        module = _Module([m.group() for m in found])
    except (_Unknown, KeyError, ValueError, IndexError):
        return None
    return {name: WorkgroupDeclaration(found[at].start(), found[end].start() if end < len(found) else len(wgsl),
                                       module.predeclared(module.workgroup[name]))
            for name, (at, end) in module.workgroup_at.items()}  # fmt: skip


def describe(usage: Mapping[str, int]) -> str:
    """``partial 1024 + tile 4096 = 5120 bytes``."""
    parts = " + ".join(f"{name} {size}" for name, size in usage.items())
    return f"{parts} = {sum(usage.values())} bytes" if len(usage) > 1 else f"{parts} bytes"
