"""Rendering: a variant's passes resolved for a call, and their WGSL rendered from templates.

For each pass this stage evaluates the pass's expressions in the variant's scope (bindings'
element types, uniform struct values, dispatch size, template inputs), lays out the uniform
struct, and renders the ``.wgsl.jinja`` template in the template sandbox (templates.py) from the
documented template context (docs/format.md, "Template contract").
"""

from __future__ import annotations

import bisect
import functools
import hashlib
import math
import re
import struct
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

from jinja2 import nodes
from jinja2.runtime import StrictUndefined, Undefined

from .errors import AttributeValueError, ExpressionError, LayoutError, TemplateSandboxError, describe_value, short_repr
from .expressions import NAMESPACES, STATIC_FUNCTIONS, Expression, as_count
from .forks import fresh_in_child
from .layout import StructLayout, struct_layout
from .program import CompiledPass, CompiledVariant, Program
from .sandbox import render_budget
from .templates import DICT_METHODS, MAX_RENDERED_BYTES, PackageLoader, TemplateSandbox, include_targets, template_error
from .workgroup_memory import WorkgroupDeclaration, blank_comments, workgroup_declarations

_ACCESS = {"read-only-storage": ("storage", "read"), "storage": ("storage", "read_write"), "uniform": ("uniform", None)}


@dataclass(frozen=True)
class ResolvedBinding:
    """A binding with its expressions evaluated: what execution binds and templates declare."""

    name: str
    group: int
    binding: int
    buffer_type: str
    arg: str | None
    element_type: str | None
    length: int | None
    struct: StructLayout | None
    uniform_bytes: bytes | None

    def declaration(self) -> str:
        space, access = _ACCESS[self.buffer_type]
        qualifier = f"{space}, {access}" if access else space
        return f"@group({self.group}) @binding({self.binding}) var<{qualifier}> {self.name}: {self.wgsl_type()};"

    def wgsl_type(self) -> str:
        if self.struct is not None:
            return self.struct.name
        return f"array<{self.element_type}>"

    def template_view(self) -> dict[str, Any]:
        space, access = _ACCESS[self.buffer_type]
        return {
            "name": self.name, "group": self.group, "binding": self.binding, "addressSpace": space,
            "accessMode": access, "type": self.wgsl_type(), "elementType": self.element_type,
            "length": self.length, "arg": self.arg, "declaration": self.declaration(),
            "struct": self.struct.declaration() if self.struct else None,
        }  # fmt: skip


@dataclass(frozen=True)
class ResolvedPass:
    pass_id: str
    label: str
    shader: str
    entry_point: str
    bindings: tuple[ResolvedBinding, ...]
    threads: int
    workgroup_size: tuple[int, int, int]
    source_inputs: dict[str, Any]
    grid: tuple[int, int, int]  # the workgroups dispatched (workgroup_grid)

    @property
    def invocations_per_workgroup(self) -> int:
        return math.prod(self.workgroup_size)


def _unpackable(json_path: str, types: list[tuple[str, str]], values: list[Any], exc: Exception) -> LayoutError:
    """A LayoutError naming the uniform field whose value cannot be packed (found by packing each alone)."""
    for i, ((name, type_text), value) in enumerate(zip(types, values)):
        try:
            struct_layout("Field", [(name, type_text)]).pack([value])
        except Exception:  # noqa: BLE001 - this is the field that fails, whatever the reason
            return _with_field(LayoutError(f"{json_path}.struct.fields[{i}]: field {name!r} ({type_text}) cannot "
                                           f"hold {_short(value)}: {type(exc).__name__}: {exc}"), name)  # fmt: skip
    return LayoutError(f"{json_path}: the uniform values cannot be packed: {type(exc).__name__}: {exc}")


def _with_field(error: LayoutError, field: str | None) -> LayoutError:
    error.field = field  # the re-raised error keeps the field, which callers read (docs/errors.md)
    return error


def _short(value: Any) -> str:
    return short_repr(value)


def _struct_layout(json_path: str, name: str, types: list[tuple[str, str]]) -> StructLayout:
    try:
        return struct_layout(name, types)
    except LayoutError as exc:
        raise _with_field(LayoutError(f"{json_path}: {exc}"), exc.field) from None


#: What a u32 index counts: templates' globalIndex counts a grid's invocations, workgroupIndex its
#: workgroups, and past it each wraps to small values that pass a shader's `i >= count` guard.
U32_COUNT = 2**32


def workgroup_grid(threads: int, invocations: int, max_per_dimension: int) -> tuple[int, int, int]:
    """Workgroups for ``threads`` invocations, spilling into y then z past the per-dimension limit.

    The grid may hold more workgroups than needed; shaders bound-check with their own count. More
    workgroups than the grid holds, or a grid of more than workgroupIndex counts (U32_COUNT), is an
    ExpressionError.
    """
    total = -(-threads // invocations)
    if total == 0:
        return (0, 0, 0)
    x = min(total, max_per_dimension)
    rest = -(-total // x)
    y = min(rest, max_per_dimension)
    z = -(-rest // y)
    if z > max_per_dimension:
        raise ExpressionError(f"{threads} threads need more than {max_per_dimension}^3 workgroups of {invocations}",
                              expression="dispatch.threads")  # fmt: skip
    # Shrink x again so the grid wastes as little as possible.
    x = -(-total // (y * z))
    if x * y * z > U32_COUNT:  # the grid's, not the work's: a surplus workgroup's index would wrap below the count
        grid = "" if total > U32_COUNT else f" in a grid of {x} x {y} x {z} = {x * y * z}"
        raise ExpressionError(f"{threads} threads are {total} workgroups of {invocations}{grid}, more than the 2^32 "
                              f"= {U32_COUNT} that workgroupIndex, a u32, counts", expression="dispatch.threads")  # fmt: skip
    return (x, y, z)


def resolve_pass(cpass: CompiledPass, scope: Mapping[str, Any]) -> ResolvedPass:
    """Evaluate a pass's expressions in the chosen variant's scope."""
    p = cpass.pass_
    # In the manifest's reading order (source, bindings, dispatch): the first failing expression
    # is the one reported (docs/format.md, "Evaluation order").
    inputs = {name: expr.evaluate(scope) for name, expr in cpass.source_inputs}
    bindings = []
    for index, cb in enumerate(cpass.bindings):
        b = cb.binding
        element_type = None
        if cb.element_type is not None:
            element_type = cb.element_type.evaluate(scope)
            if not isinstance(element_type, str) or not element_type:
                raise ExpressionError(f"an element type must be a WGSL type name, got {short_repr(element_type)}",
                                      expression=cb.element_type.source, where=cb.element_type.where)  # fmt: skip
        length = as_count(cb.length.evaluate(scope), cb.length, "a length") if cb.length is not None else None
        layout, uniform = None, None
        if b.struct_name is not None:
            types = []
            for name, type_expr, _ in cb.fields:
                type_text = type_expr.evaluate(scope)
                if not isinstance(type_text, str):
                    raise ExpressionError(f"a field type must be a WGSL type name, got {short_repr(type_text)}",
                                          expression=type_expr.source, where=type_expr.where)  # fmt: skip
                types.append((name, type_text))
            layout = _struct_layout(b.json_path, b.struct_name, types)
            values = [value.evaluate(scope) for _, _, value in cb.fields]
            try:
                uniform = layout.pack(values)
            except LayoutError as exc:
                made_by = next((f" (the value of {v.source!r})" for n, _, v in cb.fields if n == exc.field), "")
                raise _with_field(LayoutError(f"{b.json_path}: {exc}{made_by}"), exc.field) from None
            except (OverflowError, ValueError, TypeError, struct.error) as exc:  # e.g. 1e39 into an f32 field
                raise _unpackable(b.json_path, types, values, exc) from None
        bindings.append(ResolvedBinding(
            name=b.name, group=0, binding=index, buffer_type=b.buffer_type, arg=b.arg,
            element_type=element_type, length=length, struct=layout, uniform_bytes=uniform,
        ))  # fmt: skip
    threads = as_count(cpass.threads.evaluate(scope), cpass.threads, "dispatch.threads")
    sizes = [_workgroup_size(e, scope) for e in cpass.workgroup_size]
    sizes += [1] * (3 - len(sizes))
    try:  # refused here, where the expression is known (execution builds the same grid)
        grid = workgroup_grid(threads, math.prod(sizes),
                              scope["device"]["limits"].get("maxComputeWorkgroupsPerDimension", 65535))  # fmt: skip
    except ExpressionError as exc:
        raise ExpressionError(f"{exc.detail} (pass {p.id!r})", expression=cpass.threads.source,
                              where=cpass.threads.where) from None  # fmt: skip
    return ResolvedPass(
        pass_id=p.id, label=p.name, shader=p.shader, entry_point=p.entry_point, bindings=tuple(bindings),
        threads=threads, workgroup_size=(sizes[0], sizes[1], sizes[2]), source_inputs=inputs, grid=grid,
    )  # fmt: skip


def _workgroup_size(expr: Expression, scope: Mapping[str, Any]) -> int:
    value = expr.evaluate(scope)
    try:
        size = as_count(value, expr, "dispatch.workgroupSize", least=1)
    except ExpressionError:
        # A size read from the caller's tunables is the caller's mistake, not the package's.
        tunable = next((ref for ref in expr.references if ref.startswith("tunables.")), None)
        if tunable is None:
            raise
        given = expr.peek(scope).get(tunable)  # named as every attribute and tunable error names a value
        got = f"{describe_value(given)} (workgroup size {short_repr(value)} from {expr.source!r})"
        raise AttributeValueError(tunable.removeprefix("tunables."), "a value that makes the workgroup size a positive "
                                  "integer (tunable)", got) from None  # fmt: skip
    return size


def resolve_variant(variant: CompiledVariant, scope: Mapping[str, Any]) -> tuple[ResolvedPass, ...]:
    return tuple(resolve_pass(cp, scope) for cp in variant.passes)


def resolve_scratch(variant: CompiledVariant, scope: Mapping[str, Any]) -> tuple[tuple[str, int], ...]:
    """(name, bytes) of each of the variant's scratch buffers, their sizes evaluated in its scope:
    once per plan, never per call. An error names the buffer and the variant."""
    sizes = []
    for name, expr in variant.scratch:
        whose = f"scratch buffer {name!r} of variant {variant.variant.id!r}"
        try:
            sizes.append((name, as_count(expr.evaluate(scope), expr, f"the size of {whose}")))
        except ExpressionError as exc:
            if whose in exc.detail:
                raise
            raise ExpressionError(f"{exc.detail} (the size of {whose})", expression=exc.expression,
                                  where=exc.where) from None  # fmt: skip
    return tuple(sizes)


def bound_roles(resolved: Sequence[ResolvedPass]) -> set[str]:
    """The tensors some pass binds (its inputs and the outputs the variant returns)."""
    return {b.arg for r in resolved for b in r.bindings if b.arg is not None}


def produced_outputs(resolved: Sequence[ResolvedPass], outputs: Iterable[Any]) -> frozenset[str]:
    """The roles of ``outputs`` (OutputSpecs) that some pass binds: what the variant returns."""
    return frozenset(bound_roles(resolved)) & {o.role for o in outputs}


def _key_read(access: nodes.Getattr | nodes.Getitem) -> Any:
    """The key ``x.key`` or ``x['key']`` reads (a Const's value for an index; None for one computed)."""
    return access.attr if isinstance(access, nodes.Getattr) else getattr(access.arg, "value", None)


class TemplateRenderer:
    """One sandboxed Jinja environment per package; templates compile once and are cached."""

    def __init__(self, read_template: Callable[[str], str], files: Iterable[str] = (), named: Iterable[str] = ()) -> None:
        """``files``: the package's file names, whose templates a missing one is told beside;
        ``named``: the templates the passes name (a renamed file is suggested before them)."""
        self._read = read_template
        self._files = tuple(files)
        self._named = frozenset(named)
        self.env = TemplateSandbox(PackageLoader(read_template))

    def check(self, name: str) -> None:
        """Load and compile template ``name`` without rendering it: its name, syntax and the sandbox's
        allow-list are checked (for validation tools). Raises TemplateError/TemplateSandboxError."""
        try:
            self.env.get_template(name)
        except Exception as exc:  # noqa: BLE001 - every failure becomes the library's error
            raise template_error(exc, name, files=self._files) from None

    def lines_read(self, shader: str, lines: range) -> list[str] | None:
        """What ``lines`` of template ``shader`` read, as expressions' references are written
        (``tunables.X``, ``attrs.X``, ``inputs.X``, ``constants.X``, a bare name); None where they
        read a namespace some other way (``tunables | length``) or the template cannot be parsed."""
        try:
            tree = self.env.parse_named(shader)
        except Exception:  # noqa: BLE001 - rendering would have failed first; no blame is then known
            return None
        on_line = [n for n in tree.find_all((nodes.Name, nodes.Getattr, nodes.Getitem)) if n.lineno in lines]
        reads, heads = [], set()
        for node in on_line:
            if isinstance(node, (nodes.Getattr, nodes.Getitem)) and isinstance(node.node, nodes.Name):
                key = _key_read(node)
                if node.node.name in _TEMPLATE_NAMESPACES and isinstance(key, str):
                    reads.append(f"{node.node.name}.{key}")
                    heads.add(id(node.node))
        for node in on_line:
            if isinstance(node, nodes.Name) and id(node) not in heads:
                if node.name in _TEMPLATE_NAMESPACES:
                    return None
                reads.append(node.name)
        return reads

    def names_read(self, shader: str) -> set[str] | None:
        """The derive and constant names template ``shader`` and the files it includes or imports
        may read: every bare name and ``constants.X`` / ``constants['X']``. None where that cannot
        be told: ``constants`` read some other way (``constants[k]``, ``constants.items()``), a
        file named by a variable, a file that does not parse. Over-counts (a local ``set`` of a
        constant's name counts), never under-counts."""
        names: set[str] = set()
        seen: set[str] = set()
        pending = [shader]
        while pending:
            file = pending.pop()
            if file in seen:
                continue
            seen.add(file)
            try:
                tree = self.env.parse_named(file)
            except Exception:  # noqa: BLE001 - its own error is reported elsewhere
                return None
            for include in tree.find_all((nodes.Include, nodes.Import, nodes.FromImport)):
                targets = include_targets(cast(Any, include).template)
                if None in targets:  # a file named at render time: it could read anything
                    return None
                pending.extend(cast(list[str], targets))
            heads = set()
            for access in tree.find_all((nodes.Getattr, nodes.Getitem)):
                head = cast(Any, access).node
                if isinstance(head, nodes.Name) and head.name == "constants":
                    key = _key_read(cast(Any, access))
                    if not isinstance(key, str) or key in DICT_METHODS:  # any entry, or all of them (constants.items())
                        return None
                    names.add(key)
                    heads.add(id(head))
            for read in tree.find_all(nodes.Name):
                name = cast(nodes.Name, read).name
                if name == "constants" and id(read) not in heads:
                    return None  # passed whole to a filter, a loop or a macro
                names.add(name)
        return names

    def render_passes(self, resolved: Sequence[ResolvedPass], scope: Mapping[str, Any]) -> list[str]:
        """Every pass of one variant under one render budget: the passes share its deadline and
        work units (each pass had had a budget of its own)."""
        with render_budget():
            return [self.render(r, scope) for r in resolved]

    def render(self, resolved: ResolvedPass, scope: Mapping[str, Any]) -> str:
        context = template_context(resolved, scope)
        stream = None
        try:
            with render_budget() as budget:
                template = self.env.get_template(resolved.shader)
                stream = template.generate(context)
                pieces, origins, size = [], [], 0
                for piece in stream:
                    if piece:  # the emit just before this yield made it: that is where it came from
                        origins.append((size, *budget.location))
                    size += len(piece)
                    if size > MAX_RENDERED_BYTES:
                        raise TemplateSandboxError(f"rendered WGSL exceeds {MAX_RENDERED_BYTES} bytes",
                                                   file=resolved.shader)  # fmt: skip
                    pieces.append(piece)
                text = RenderedWGSL("".join(pieces), tuple(origins))
        except Exception as exc:  # noqa: BLE001 - every failure inside the template is the template's error
            raise template_error(exc, resolved.shader, names=context, files=self._files, named=self._named,
                                 read=self._read) from None
        finally:
            if stream is not None:
                stream.close()  # type: ignore[attr-defined]  # generate() is a generator function
        try:
            size = len(text.encode())  # the loop counted characters; 'é' is two bytes
        except UnicodeEncodeError as exc:  # a lone surrogate, from a '\ud800' literal in the template
            raise TemplateSandboxError(f"the rendered WGSL is not Unicode text: {exc.reason} at character "
                                       f"{exc.start}", file=resolved.shader) from None  # fmt: skip
        if size > MAX_RENDERED_BYTES:
            raise TemplateSandboxError(f"rendered WGSL exceeds {MAX_RENDERED_BYTES} bytes", file=resolved.shader)
        check_nesting(text, resolved.shader)
        return text


class RenderedWGSL(str):
    """Rendered WGSL that knows which template line each piece came from, so that a compile error
    at a rendered line can name the template line to fix (an ordinary ``str`` everywhere else)."""

    #: (offset in the text, template, line, literal text?): a literal piece spans its own lines, an
    #: expression's value (``{{ declarations }}``) comes from one line however many it has.
    origins: tuple[tuple[int, str | None, int, bool], ...]

    def __new__(cls, text: str, origins: tuple[tuple[int, str | None, int, bool], ...] = ()) -> RenderedWGSL:
        self = super().__new__(cls, text)
        self.origins = origins
        return self

    def template_line(self, line: int, column: int = 1) -> tuple[str, int] | None:
        """(template file, line) that rendered line ``line`` (1-based) at ``column`` came from."""
        lines = self.split("\n")
        if not 1 <= line <= len(lines) or not self.origins:
            return None
        offset = sum(len(text) + 1 for text in lines[: line - 1]) + min(max(column, 1), len(lines[line - 1]) + 1) - 1
        index = bisect.bisect_right([origin[0] for origin in self.origins], offset) - 1
        if index < 0:
            return None
        start, name, first_line, literal = self.origins[index]
        if name is None or first_line < 1:
            return None
        return name, first_line + (self.count("\n", start, offset) if literal else 0)


#: Deepest bracket nesting the rendered WGSL may have. wgpu-native's WGSL parser recurses per level
#: and overflows its stack (a segfault: the whole process dies) somewhere between 2,000 and 10,000.
MAX_WGSL_NESTING = 256
#: Comments are blanked before the checks below (a line of dashes is no chain of minus signs) by
#: workgroup_memory.blank_comments, which that module's own reading of the WGSL shares.
#: What opens a template list (`array<`: a `<` right after a name, before a name), closes one,
#: or ends every open one (WGSL's template list discovery gives up at `;`, `{`, `}` and `:`).
_TEMPLATE_TOKENS = re.compile(r"(?<=[A-Za-z0-9_])<(?=[A-Za-z_])|[>;{}:\n]")
#: The tokens that decide how deep an expression tree gets: numbers and names (skipped whole, so
#: the point in 1.5 or the e in 1e5 is no operator), brackets, separators, operator characters.
_DEPTH_TOKENS = re.compile(r"(?:\d|\.\d)(?:[eEpP][+-]|[\w.])*|(\belse\s+if\b|\bif\b|[()\[\]{},;\n]|[-+*/%&|^!~<>=.@])|[A-Za-z_]\w*")
#: The deepest expression tree (operators chained in one term, through every bracket) allowed.
#: 1024 refused a 600-tap dot product written as one sum; on the deep-stack thread trees of 8192
#: compile on lavapipe and the H200 (`python3 scripts/expr_depth_probe.py`, docs/perf/h200-expr-depth-34.log).
MAX_WGSL_EXPRESSION_DEPTH = 4096


#: The sha256 of the texts check_nesting passed, most recent last. Every new plan renders, and a new
#: shape of the same variant mostly renders the same text: the check then runs once per text, not
#: once per shape (a QuickGelu plan's host cost went from 2.37-2.49 ms to 1.72-1.82 on the 2-core
#: CPU machine, `python3 scripts/new_shape_cost.py`).
#: Digests, not the texts: 256 rendered texts may be 256 MiB, and a collision of
#: Python's hash() would skip the check.
_CHECKED_TEXTS: OrderedDict[bytes, None] = OrderedDict()
_CHECKED_TEXTS_SIZE = 256
_checked_lock = threading.Lock()
fresh_in_child(globals(), _checked_lock=threading.Lock)  # a fork while another thread held it


def check_nesting(wgsl: str, shader: str) -> None:
    """Refuse WGSL nested too deep before any driver parses it: more than MAX_WGSL_NESTING
    brackets or template lists (`array<array<...>>`), or an expression tree deeper than
    MAX_WGSL_EXPRESSION_DEPTH (`a + a + ... + a`, `v.x.x...`, `!!!...x`). wgpu-native recurses
    into each level while it parses and lowers a shader, and a few thousand levels overflow the
    stack, which kills the process. Every new plan renders, so this must stay cheap: comments
    blanked, then one regular expression pass for template lists and one over the tokens; a text
    that passed before is not read again."""
    key = hashlib.sha256(wgsl.encode("utf-8", "surrogatepass")).digest()
    with _checked_lock:
        if key in _CHECKED_TEXTS:
            _CHECKED_TEXTS.move_to_end(key)
            return
    _check_nesting(wgsl, shader)
    with _checked_lock:
        _CHECKED_TEXTS[key] = None
        if len(_CHECKED_TEXTS) > _CHECKED_TEXTS_SIZE:
            _CHECKED_TEXTS.popitem(last=False)


def _check_nesting(wgsl: str, shader: str) -> None:
    code = blank_comments(wgsl)
    depth, line_number = 0, 1
    for token in _TEMPLATE_TOKENS.findall(code):
        if token == "<":
            depth += 1
            if depth > MAX_WGSL_NESTING:
                raise _too_deep(shader, "template lists (<...>)", MAX_WGSL_NESTING, line_number)
        elif token == ">":
            depth = max(depth - 1, 0)
        elif token == "\n":
            line_number += 1
        else:
            depth = 0
    _check_expression_depth(code, shader)


def _check_expression_depth(code: str, shader: str) -> None:
    """Brackets at most MAX_WGSL_NESTING deep, and an upper bound of every expression tree's
    depth: within one term (between commas, semicolons and braces) each operator character and
    each chained index (`a[0][0]`) may add a level, and a bracket adds its deepest term. An
    `else if` chain counts as deep as it is long: the compiler nests each link in the one before
    (and a chain inside a link's block continues that depth)."""
    # frames[i] = [operators in the current term, deepest bracket in it, deepest finished term,
    #              depth of the else-if chain now, that depth where the frame opened]
    frames, line_number, previous = [[0, 0, 0, 0, 0]], 1, ""
    for token in _DEPTH_TOKENS.findall(code):
        before = previous
        if token != "\n":  # `a[0]` then a line break then `[0]` is still a chain
            previous = token
        if not token:
            continue  # a number or a name
        frame = frames[-1]
        if token in "([{":
            if len(frames) > MAX_WGSL_NESTING:
                raise _too_deep(shader, "brackets", MAX_WGSL_NESTING, line_number)
            if token == "[" and before in ("]", ")"):  # a chained index nests in the one before
                frame[0] += 1
            if token == "{":  # a block: the condition or header before it has ended
                _end_term(frame)
            frames.append([0, 0, 0, frame[3], frame[3]])
        elif token in ")]}":
            if len(frames) > 1:
                frames.pop()
                frames[-1][1] = max(frames[-1][1], max(frame[2], frame[0] + frame[1]) + 1)
                if token == "}":  # no expression goes on past a block
                    _end_term(frames[-1])
        elif token in ",;":
            _end_term(frame)
            frame[3] = frame[4]
        elif token == "\n":
            line_number += 1
        elif token == "if":  # a new chain, as deep as the block it is in
            frame[3] = frame[4]
        elif token.startswith("else"):
            frame[3] += 1
            line_number += token.count("\n")
            if len(frames) + frame[3] > MAX_WGSL_NESTING:
                raise _too_deep(shader, "blocks (an else-if chain)", MAX_WGSL_NESTING, line_number)
        else:
            frame[0] += 1
        if frame[0] + frame[1] > MAX_WGSL_EXPRESSION_DEPTH or frames[-1][1] > MAX_WGSL_EXPRESSION_DEPTH:
            raise _too_deep(shader, "expressions", MAX_WGSL_EXPRESSION_DEPTH, line_number)


def _end_term(frame: list[int]) -> None:
    frame[2] = max(frame[2], frame[0] + frame[1])
    frame[0] = frame[1] = 0


def _too_deep(shader: str, what: str, limit: int, line_number: int) -> TemplateSandboxError:
    return TemplateSandboxError(f"the rendered WGSL nests {what} more than {limit} deep (at rendered line "
                                f"{line_number})", file=shader)  # fmt: skip


#: The names template_context gives every template. A constant or pass input of one of these
#: names is hidden by it in templates, and one named ``range`` hides the templates' one global.
TEMPLATE_NAMES = frozenset({
    "constants", "inputs", "tunables", "attrs", "dtypes", "bindings", "bindingList", "declarations", "enables",
    "workgroupSize", "workgroupSizeX", "workgroupSizeY", "workgroupSizeZ", "workgroupInvocations", "entryPoint",
    "entryParams", "globalIndex", "workgroupIndex",
})  # fmt: skip


#: The workgroup's linear index across the grid, which spills into y and z past the device's
#: workgroups per dimension: for kernels that give each workgroup one row or tile.
_WORKGROUP_INDEX = "((wid.z * nwg.y + wid.y) * nwg.x + wid.x)"


def template_context(resolved: ResolvedPass, scope: Mapping[str, Any]) -> dict[str, Any]:
    """The names a ``.wgsl.jinja`` template sees (docs/format.md, "Template contract")."""
    hidden = set(NAMESPACES) | set(STATIC_FUNCTIONS) | {"f16Ok"}
    constants = {k: v for k, v in scope.items() if k not in hidden and not isinstance(v, Undefined)}
    bindings = {b.name: b.template_view() for b in resolved.bindings}
    structs = [b.struct.declaration() for b in resolved.bindings if b.struct is not None]
    declarations = "\n".join(structs + [b.declaration() for b in resolved.bindings])
    uses_f16 = "f16" in scope.get("dtypes", {}).values() or any(
        "f16" in (b.element_type or "") or (b.struct and any(t.scalar == "f16" for _, t, _ in b.struct.fields))
        for b in resolved.bindings
    )
    x, y, z = resolved.workgroup_size
    invocations = resolved.invocations_per_workgroup
    context: dict[str, Any] = dict(constants)
    context.update(resolved.source_inputs)
    context.update(
        constants=constants,
        inputs=dict(resolved.source_inputs),
        tunables=dict(scope.get("tunables", {})),
        attrs=dict(scope.get("attrs", {})),
        dtypes=dict(scope.get("dtypes", {})),
        bindings=bindings,
        bindingList=list(bindings.values()),
        declarations=declarations,
        enables="enable f16;" if uses_f16 else "",
        workgroupSize=str(x) if (y, z) == (1, 1) else f"{x}, {y}, {z}",
        workgroupSizeX=x, workgroupSizeY=y, workgroupSizeZ=z,
        workgroupInvocations=invocations,
        entryPoint=resolved.entry_point,
        entryParams=("@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, "
                     "@builtin(local_invocation_index) lix: u32"),  # fmt: skip
        globalIndex=_global_index(resolved),
        workgroupIndex=_WORKGROUP_INDEX,
    )
    return context


def _global_index(resolved: ResolvedPass) -> Any:
    """globalIndex's text, or, where the grid passes what a u32 counts, an undefined value that
    says so where a template reads it (one indexing by workgroupIndex still renders)."""
    invocations = resolved.invocations_per_workgroup
    dispatched = math.prod(resolved.grid) * invocations
    if dispatched <= U32_COUNT:
        return f"({_WORKGROUP_INDEX} * {invocations}u + lix)"
    return StrictUndefined(name="globalIndex", hint=(
        f"globalIndex is a u32 and pass {resolved.pass_id!r} dispatches {dispatched} invocations ({resolved.threads} "
        f"threads in a grid of {resolved.grid[0]} x {resolved.grid[1]} x {resolved.grid[2]} workgroups of "
        f"{invocations}), more than the 2^32 = {U32_COUNT} it counts: past that it wraps and threads write the "
        f"wrong elements; index by {{{{ workgroupIndex }}}} (a u32 of up to 2^32 workgroups) and lix, or dispatch "
        f"fewer threads"))  # fmt: skip

#: The template context's namespaces a line reads by key (templates see no ``shapes``).
_TEMPLATE_NAMESPACES = frozenset({"tunables", "attrs", "constants", "inputs"})
#: Template names that follow the pass's workgroup size.
_WORKGROUP_NAMES = frozenset({"workgroupSize", "workgroupSizeX", "workgroupSizeY", "workgroupSizeZ",
                              "workgroupInvocations", "globalIndex"})  # fmt: skip


def workgroup_memory_arguments(program: Program, variant: CompiledVariant, cpass: CompiledPass,
                               renderer: TemplateRenderer, wgsl: str, names: Iterable[str]) -> list[str] | None:  # fmt: skip
    """What the caller can change to shrink the workgroup variables ``names`` of ``cpass``'s
    rendered ``wgsl``: Program.arguments_read of what their declarations' template lines read (a
    tunable, attribute or input, directly or through a constant, a pass input or the workgroup
    size); [] where they read none of those (the package fixes the size); None where a declaration
    cannot be traced to a template line the engine can read (a ``{% set %}`` name, a macro)."""
    if not isinstance(wgsl, RenderedWGSL):
        return None
    declarations = workgroup_declarations(wgsl)  # the reader that sized them: a comment is no declaration
    if declarations is None:
        return None
    named = {name for name, _ in (*program.derive, *program.constants, *variant.constants)}
    source_inputs = dict(cpass.source_inputs)
    exprs: list[Expression] = []
    references: list[str] = []
    for name in names:
        declaration = declarations.get(name)
        reads = None if declaration is None else _declaration_reads(renderer, wgsl, declaration)
        if reads is None:
            return None
        for ref in reads:
            head, _, key = ref.partition(".")
            if head in ("tunables", "attrs"):
                references.append(ref)
            elif head == "constants" and key in named:
                references.append(key)
            elif (head == "inputs" and key in source_inputs) or (not key and ref in source_inputs):
                exprs.append(source_inputs[key or ref])
            elif ref in _WORKGROUP_NAMES:
                exprs.extend(cpass.workgroup_size)
            elif ref in named:
                references.append(ref)
            elif ref not in TEMPLATE_NAMES:  # a name set inside the template, a loop's variable: not traced
                return None
    return program.arguments_read(exprs, variant, references)


def _declaration_reads(renderer: TemplateRenderer, wgsl: RenderedWGSL,
                       declaration: WorkgroupDeclaration) -> list[str] | None:  # fmt: skip
    """What the template lines of a workgroup variable's ``declaration`` read, every line from
    ``var`` to its ``;`` (a type written over two lines); None where its type names a declaration of
    the module (``array<f32, TILE>`` with ``const TILE = {{ tunables.TILE }}u;``: the size follows
    another line, which had been taken for one the package fixes) or a line cannot be traced."""
    if not declaration.predeclared:
        return None

    def origin(offset: int) -> tuple[str, int] | None:
        return wgsl.template_line(wgsl.count("\n", 0, offset) + 1, offset - wgsl.rfind("\n", 0, offset))

    first, last = origin(declaration.start), origin(max(declaration.end - 1, declaration.start))
    if first is None or last is None or first[0] != last[0] or last[1] < first[1]:
        return None
    return renderer.lines_read(first[0], range(first[1], last[1] + 1))  # the template parsed once, not per line


def workgroup_memory_blame(program: Program, variant: CompiledVariant, cpass: CompiledPass, renderer: TemplateRenderer,
                           wgsl: str) -> Callable[[Iterable[str]], list[str] | None]:  # fmt: skip
    """The blame a refused pass's message asks (execution.Blame): workgroup_memory_arguments of
    ``cpass``'s rendered ``wgsl``, traced only when the pass is refused."""
    return functools.partial(workgroup_memory_arguments, program, variant, cpass, renderer, wgsl)
