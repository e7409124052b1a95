"""A manifest with every expression compiled, and the scope a call evaluates them in.

Built once per package. For a call, :meth:`Program.call_scope` gives the names the manifest's
expressions see: the namespaces (``shapes``, ``ranks``, ``dtypes``, ``attrs``, ``tunables``,
``device``); then the outputs' shapes and the ``derive`` entries, each evaluated after what it
reads (:func:`evaluation_order`: an output shape may read a derive entry, a derive entry an output
or a derive entry below it); then top-level ``constants`` in order. :meth:`Program.variant_scope`
adds a variant's own constants on top. A derive or constant that fails to evaluate does not fail
the call: it becomes an undefined value that raises, with the original reason, only where
something uses it. A derive entry that reads itself, directly or through others, is such a failure;
an output shape that does is refused when the package loads.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, NamedTuple

from .contract import MAX_ELEMENTS, MAX_RANK, CallSignature, default_value_problems, shape_text, too_many_elements
from .errors import (
    BroadcastError,
    ExpressionError,
    ExpressionSandboxError,
    ManifestError,
    RankError,
    ShapeError,
    short_repr,
    shorten,
)
from .expressions import (
    MAX_EXPRESSIONS,
    NAMESPACES,
    RESERVED_NAMES,
    STATIC_FUNCTIONS,
    Expression,
    ExpressionCompiler,
    as_count,
    failed_value,
)  # fmt: skip
from .manifest import ITEMSIZE, ONNX_TO_WGSL, Binding, Manifest, Pass, TensorSpec, Variant


@dataclass(frozen=True)
class DeviceInfo:
    """What expressions and templates may know about the device."""

    limits: Mapping[str, int]  # camelCase WebGPU limit names
    features: frozenset[str]

    @property
    def has_f16(self) -> bool:
        return "shader-f16" in self.features

    def lacks_f16_for(self, input_dtypes: Iterable[str]) -> bool:
        """Whether a call with inputs of these dtypes (NumPy names) has float16 data and the device
        no shader-f16: `test` skips such a case where it does not run as the file says, and
        `validate` judges it as `test` does."""
        return not self.has_f16 and "float16" in input_dtypes

    @cached_property  # every call scope reads it: sorted once per device
    def feature_names(self) -> tuple[str, ...]:
        """The device's features by their WebGPU names, as `device.features` (wgpu-native says
        "subgroup" for WebGPU's "subgroups")."""
        return tuple(sorted(WEBGPU_FEATURE_NAMES.get(f, f) for f in self.features))


#: wgpu-native feature names that differ from the WebGPU spec's
WEBGPU_FEATURE_NAMES = {"subgroup": "subgroups"}


@dataclass(frozen=True)
class OutputSpec:
    role: str
    shape: tuple[int, ...]
    dtype: str  # ONNX dtype name


@dataclass(frozen=True)
class CompiledBinding:
    binding: Binding
    element_type: Expression | None
    length: Expression | None
    fields: tuple[tuple[str, Expression, Expression], ...]  # (name, WGSL type, value)


@dataclass(frozen=True)
class CompiledPass:
    pass_: Pass
    source_inputs: tuple[tuple[str, Expression], ...]
    bindings: tuple[CompiledBinding, ...]
    threads: Expression
    workgroup_size: tuple[Expression, ...]


@dataclass(frozen=True)
class CompiledVariant:
    variant: Variant
    constants: tuple[tuple[str, Expression], ...]
    when: tuple[Expression, ...]
    passes: tuple[CompiledPass, ...]
    #: (name, its size in bytes) of each scratch buffer, in the manifest's order
    scratch: tuple[tuple[str, Expression], ...] = ()


@dataclass
class Program:
    manifest: Manifest
    input_ranks: tuple[tuple[str, Expression], ...]
    outputs: tuple[tuple[str, str, Expression, Expression | None], ...]  # role, type variable, shape, rank
    derive: tuple[tuple[str, Expression], ...]
    constants: tuple[tuple[str, Expression], ...]
    variants: tuple[CompiledVariant, ...]
    compiler: ExpressionCompiler = field(repr=False)
    #: outputs and derive entries as ("output" | "derive", index), each after what it reads
    order: tuple[tuple[str, int], ...] = ()
    #: derive entries that read themselves (index -> the cycle, for the error)
    cyclic: Mapping[int, str] = field(default_factory=dict)

    def variant(self, variant_id: str) -> CompiledVariant | None:
        return next((v for v in self.variants if v.variant.id == variant_id), None)

    @property
    def definitions(self) -> dict[str, Expression]:
        """Top-level derive and constant expressions by name (for selection traces)."""
        return dict(self.derive + self.constants)

    def call_scope(self, signature: CallSignature, device: DeviceInfo) -> tuple[dict[str, Any], tuple[OutputSpec, ...]]:
        """The scope for a call and the outputs' shapes and dtypes."""
        shapes = signature.shape_map()
        type_bindings = signature.type_bindings()
        scope: dict[str, Any] = dict(STATIC_FUNCTIONS)

        def f16Ok(dtype: Any) -> bool:  # noqa: N802 - the language's name, which a wrong call's message shows
            return bool(dtype != "f16" or device.has_f16)

        f16Ok.__qualname__ = "f16Ok"
        scope["f16Ok"] = f16Ok
        scope.update(
            shapes=shapes,
            ranks={role: len(shape) for role, shape in shapes.items()},
            dtypes={tv: ONNX_TO_WGSL[dt] for tv, dt in type_bindings.items()},
            attrs=signature.attr_map(),
            tunables=signature.tunable_map(),
            device={"limits": dict(device.limits), "features": device.feature_names},
        )
        for role, input_rank in self.input_ranks:
            if role in shapes:
                expected = as_count(input_rank.evaluate(scope), input_rank, "a rank")
                if len(shapes[role]) != expected:
                    raise RankError(role, f"rank {expected} ({input_rank.source})",
                                    f"rank {len(shapes[role])} (shape {list(shapes[role])})")  # as a fixed rank's error
        outputs: dict[int, OutputSpec] = {}
        for kind, index in self.order:
            if kind == "output":
                outputs[index] = self._output(index, scope, type_bindings)
                continue
            name, expr = self.derive[index]
            if index in self.cyclic:
                scope[name] = failed_value(name, ExpressionError(f"reads itself: {self.cyclic[index]}",
                                                                 expression=expr.source, where=expr.where))  # fmt: skip
            else:
                _define(scope, name, expr)
        for role, _, shape_expr, rank_expr in self.outputs:  # checks nothing reads: after every shape and derive
            if rank_expr is not None:
                rank = as_count(rank_expr.evaluate(scope), rank_expr, "an output rank")
                if rank != scope["ranks"][role]:
                    raise ExpressionError(f"shape {list(scope['shapes'][role])} has rank {scope['ranks'][role]}, the "
                                          f"manifest's rank says {rank} (at {rank_expr.where}: one of the two is "
                                          f"wrong)", expression=shape_expr.source, where=shape_expr.where)  # fmt: skip
        _define_all(scope, self.constants)
        return scope, tuple(outputs[i] for i in range(len(self.outputs)))

    def _output(self, index: int, scope: dict[str, Any], type_bindings: Mapping[str, str]) -> OutputSpec:
        """Output ``index``'s shape, added to ``shapes``/``ranks`` (its rank is checked later)."""
        role, type_var, shape_expr, _ = self.outputs[index]
        shape = self._output_shape(shape_expr, scope)
        scope["shapes"][role] = shape
        scope["ranks"][role] = len(shape)
        if type_var not in type_bindings:
            # unreachable for a manifest that passed reference_errors, which refuses such an output
            raise ExpressionError(f"output {role!r} has type variable {type_var!r}, which no input binds",
                                  expression=type_var, where=f"outputs[{index}].dtype")  # fmt: skip
        return OutputSpec(role=role, shape=shape, dtype=type_bindings[type_var])

    @staticmethod
    def variant_scope(variant: CompiledVariant, scope: Mapping[str, Any]) -> dict[str, Any]:
        """``scope`` with the variant's constants added (overriding top-level ones)."""
        inner = dict(scope)
        _define_all(inner, variant.constants)
        return inner

    def _inputs_read(self, expr: Expression) -> list[str]:
        """The inputs whose shape or rank ``expr`` reads, itself or through derive entries."""
        inputs = {spec.role for spec in self.manifest.inputs}
        return self._names_read([expr.references], ("shapes", "ranks"), inputs, dict(self.derive))

    def arguments_read(self, exprs: Sequence[Expression], variant: CompiledVariant,
                       references: Sequence[str] = ()) -> list[str]:  # fmt: skip
        """The tunables ``exprs`` of ``variant`` (and ``references``, written as theirs: a template
        line's) read, themselves or through derive entries and constants; where they read none, the
        attributes and inputs (shapes, ranks) they read: what the caller can change (a tunable
        first). None: a literal, the package's ("the package fixes" had been said of a workgroup the
        size of an input's dimension)."""
        named = dict(self.derive + self.constants + variant.constants)  # a variant's constant shadows
        reads = [*(e.references for e in exprs), references]
        tunables = self._names_read(reads, ("tunables",), set(self.manifest.tunables), named)
        return tunables or [*self._names_read(reads, ("attrs",), set(self.manifest.attributes), named),
                            *self._names_read(reads, ("shapes", "ranks"), {s.role for s in self.manifest.inputs}, named)]

    @staticmethod
    def _names_read(reads: Sequence[Sequence[str]], namespaces: tuple[str, ...], names: set[str],
                    named: Mapping[str, Expression]) -> list[str]:  # fmt: skip
        """The ``names`` under ``namespaces`` that ``reads`` (lists of references) read, themselves
        or through ``named``."""
        found: list[str] = []
        pending, seen = list(reads), set()
        while pending:
            for ref in pending.pop():
                namespace, _, name = ref.partition(".")
                if namespace in namespaces and name in names and name not in found:
                    found.append(name)
                elif ref in named and ref not in seen:
                    seen.add(ref)
                    pending.append(named[ref].references)
        return found

    def _output_shape(self, expr: Expression, scope: Mapping[str, Any]) -> tuple[int, ...]:
        try:
            value = expr.evaluate(scope)
        except BroadcastError as exc:  # the inputs' shapes, not the package: the call's error
            given = [tuple(s) for s in exc.shapes]
            read = [role for role in self._inputs_read(expr) if role in scope["shapes"]]
            # the inputs whose shapes are the ones that failed, else every input the shape reads
            roles = [role for role in read if tuple(scope["shapes"][role]) in given] or read or ["inputs"]
            raise ShapeError(", ".join(roles), f"shapes that broadcast together ({expr.where}: {expr.source})",
                             f"{', '.join(str(list(s)) for s in given)}: {exc.reason}") from None  # fmt: skip
        except ExpressionError:
            for name in expr.references:
                if "." not in name and name not in scope:  # e.g. a constant: those come after the outputs
                    raise ExpressionError(f"{name!r} is not defined when output shapes are evaluated (they see "
                                          "shapes, ranks, dtypes, attrs, tunables, device, other outputs and derive, "
                                          "not constants)", expression=expr.source, where=expr.where) from None  # fmt: skip
            raise
        if not isinstance(value, (list, tuple)):
            raise ExpressionError(f"an output shape must be a list of integers, got {short_repr(value)}",
                                  expression=expr.source, where=expr.where)  # fmt: skip
        if len(value) > MAX_RANK:  # as inputs are held; NumPy refuses more, after the GPU work had run
            raise ExpressionError(f"an output of rank {len(value)}, more than {MAX_RANK}", expression=expr.source,
                                  where=expr.where)  # fmt: skip
        shape = tuple(as_count(d, expr, "an output dimension") for d in value)
        if too_many_elements(shape):  # as inputs are held
            raise ExpressionError(f"an output of shape {shape_text(shape)} has 2^{MAX_ELEMENTS.bit_length() - 1} "
                                  "elements or more (zero dimensions counted as 1)", expression=expr.source,
                                  where=expr.where)  # fmt: skip
        return shape


def tensor_bytes(manifest: Manifest, signature: CallSignature, outputs: Sequence[OutputSpec]) -> dict[str, int]:
    """The bytes of every tensor of a call, inputs and outputs, by role (what the bindings hold)."""
    dtypes = signature.type_bindings()
    type_vars = {spec.role: spec.dtype for spec in manifest.inputs}
    sizes = {role: math.prod(shape) * ITEMSIZE[dtypes[type_vars[role]]] for role, shape in signature.shapes}
    sizes.update({o.role: math.prod(o.shape) * ITEMSIZE[o.dtype] for o in outputs})
    return sizes


def _define(scope: dict[str, Any], name: str, expr: Expression) -> None:
    try:
        scope[name] = expr.evaluate(scope)
    except ExpressionError as exc:
        scope[name] = failed_value(name, exc)


def _define_all(scope: dict[str, Any], entries: tuple[tuple[str, Expression], ...]) -> None:
    for name, expr in entries:
        _define(scope, name, expr)


class Cycle(NamedTuple):
    """Entries that read themselves: every member (a strongly connected group, in manifest order)
    and one read path through them from the first (``path[i]`` reads ``path[i + 1]``, the last
    reads ``path[0]``), for the error."""

    members: list[tuple[str, int]]
    path: list[tuple[str, int]]


def evaluation_order(
    output_reads: Sequence[tuple[str, Sequence[str]]], derive_reads: Sequence[tuple[str, Sequence[str]]]
) -> tuple[list[tuple[str, int]], list[Cycle]]:
    """Outputs and derive entries ordered so that each comes after what it reads, and the cycles.

    ``output_reads`` is (role, the references of its shape: ranks are checked once everything
    else is known), ``derive_reads`` (name, its references), in manifest order; a reference is a
    bare name or a dotted ``shapes.R``/``ranks.R``.
    Returns the order as ("output" | "derive", index) and every group that reads itself (a
    strongly connected component of two or more, or one that reads itself directly); its members
    stay in the order, after nothing in particular. Pure: validation reports what calls would do.
    """
    nodes = [("output", i) for i in range(len(output_reads))] + [("derive", j) for j in range(len(derive_reads))]
    by_role = {role: ("output", i) for i, (role, _) in enumerate(output_reads)}
    by_name = {name: ("derive", j) for j, (name, _) in enumerate(derive_reads)}

    def reads(references: Sequence[str]) -> list[tuple[str, int]]:
        found = []
        for ref in references:
            head, _, rest = ref.partition(".")
            role = rest.split(".")[0]
            if not rest and head in by_name:
                found.append(by_name[head])
            elif head in ("shapes", "ranks") and role in by_role:
                found.append(by_role[role])
        return found

    edges = {("output", i): reads(refs) for i, (_, refs) in enumerate(output_reads)}
    edges.update({("derive", j): reads(refs) for j, (_, refs) in enumerate(derive_reads)})
    order: list[tuple[str, int]] = []
    cycles: list[Cycle] = []
    for component in _components(nodes, edges):  # dependencies first
        component.sort(key=lambda node: (node[0] != "output", node[1]))  # outputs, then derive, in manifest order
        order.extend(component)
        if len(component) > 1 or component[0] in edges[component[0]]:
            cycles.append(Cycle(component, _path_back(component, edges)))
    return order, cycles


def _path_back(members: Sequence[Any], edges: Mapping[Any, Sequence[Any]]) -> list[Any]:
    """A shortest read path from ``members[0]`` back to itself inside the group (breadth first)."""
    start, inside = members[0], set(members)
    parent: dict[Any, Any] = {}
    queue = [start]
    for node in queue:  # the list grows as it is walked
        for succ in edges[node]:
            if succ == start:
                path = [node]
                while path[-1] != start:
                    path.append(parent[path[-1]])
                return path[::-1]
            if succ in inside and succ not in parent:
                parent[succ] = node
                queue.append(succ)
    return [start]  # not reached: every member of a group reaches every other


def _components(nodes: Sequence[Any], edges: Mapping[Any, Sequence[Any]]) -> list[list[Any]]:
    """Strongly connected components, each after the ones it has edges to (Tarjan's algorithm,
    without recursion: a manifest may chain thousands of entries)."""
    index: dict[Any, int] = {}
    low: dict[Any, int] = {}
    stack: list[Any] = []
    on_stack: set[Any] = set()
    found: list[list[Any]] = []
    for root in nodes:
        if root in index:
            continue
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        work = [(root, iter(edges[root]))]
        while work:
            node, successors = work[-1]
            for succ in successors:
                if succ not in index:
                    index[succ] = low[succ] = len(index)
                    stack.append(succ)
                    on_stack.add(succ)
                    work.append((succ, iter(edges[succ])))
                    break
                if succ in on_stack:
                    low[node] = min(low[node], index[succ])
            else:
                work.pop()
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    found.append(component)
    return found


def compile_program(manifest: Manifest, *, file: str | None = None) -> Program:
    """Compile every expression of ``manifest``; syntax and unknown names fail here, once. ``file``
    (the manifest's path) is named by the ManifestErrors raised here (reserved names, cycles)."""
    bad_defaults = default_value_problems(manifest)
    if bad_defaults:
        json_path, message = bad_defaults[0]
        raise ManifestError(message, json_path=json_path, file=file)
    for where, name in defined_names(manifest):
        if name in RESERVED_NAMES:
            raise ManifestError(f"{name!r} is a reserved name", json_path=where, file=file)

    _refuse_too_many_expressions(manifest)
    compiler = ExpressionCompiler(set(manifest.derive) | manifest.constant_names())
    compiled: list[Expression] = []

    def c(value: Any, where: str) -> Expression:
        expr = compiler.compile(value, where)
        compiled.append(expr)
        return expr

    def compile_binding(binding: Binding) -> CompiledBinding:
        element = None
        if binding.element_type is not None:
            element = c(dollar_source(binding.element_type), f"{binding.json_path}.elementType")
        length = None
        if binding.length is not None:
            # "$name" reads a constant; any other string is an expression, numbers are literals.
            source = binding.length[1:] if isinstance(binding.length, str) and binding.length.startswith("$") else binding.length
            length = c(source, f"{binding.json_path}.length")
        fields = tuple(
            (f.name, c(dollar_source(f.type), f"{f.json_path}.type"), c(list_source(f.value), f"{f.json_path}.value")) for f in binding.fields
        )
        return CompiledBinding(binding=binding, element_type=element, length=length, fields=fields)

    def compile_pass(pass_: Pass) -> CompiledPass:
        return CompiledPass(
            pass_=pass_,
            source_inputs=tuple((k, c(v, f"{pass_.json_path}.source.inputs.{k}")) for k, v in pass_.source_inputs.items()),
            bindings=tuple(compile_binding(b) for b in pass_.bindings),
            threads=c(pass_.dispatch.threads, f"{pass_.dispatch.json_path}.threads"),
            workgroup_size=tuple(c(w, f"{pass_.dispatch.json_path}.workgroupSize") for w in pass_.dispatch.workgroup_size),
        )

    variants = tuple(
        CompiledVariant(
            variant=v,
            constants=tuple((k, c(e, f"{v.json_path}.constants.{k}")) for k, e in v.constants.items()),
            when=tuple(c(w, f"{v.json_path}.when[{i}]") for i, w in enumerate(v.when)),
            passes=tuple(compile_pass(p) for p in v.passes),
            scratch=tuple((b.name, c(b.bytes, f"{b.json_path}.bytes")) for b in v.scratch),
        )
        for v in manifest.variants
    )
    outputs = tuple(
        (s.role, s.dtype, c(s.shape, f"{s.json_path}.shape"),
         c(s.rank, f"{s.json_path}.rank") if s.rank is not None else None)
        for s in manifest.outputs
    )  # fmt: skip
    derive = tuple((k, c(e, f"derive.{k}")) for k, e in manifest.derive.items())
    constants = tuple((k, c(e, f"constants.{k}")) for k, e in manifest.constants.items())
    order, cycles = evaluation_order([(role, shape.references) for role, _, shape, _ in outputs],
                                     [(name, expr.references) for name, expr in derive])  # fmt: skip
    cyclic: dict[int, str] = {}
    for cycle in cycles:
        text = cycle_text([node_label(node, outputs, derive) for node in cycle.path])
        for kind, index in cycle.members:
            if kind == "output":  # every call would fail: refuse the package now (members[0], the path's start)
                raise ManifestError(f"the output shape reads itself: {text}", json_path=outputs[index][2].where,
                                    file=file)  # fmt: skip
            cyclic[index] = text
    input_ranks = tuple((s.role, _input_rank(compiler, s)) for s in manifest.inputs if isinstance(s.rank, str))
    input_roles = [spec.role for spec in manifest.inputs]
    roles = input_roles + [spec.role for spec in manifest.outputs]
    for expr, visible in [*((e, roles) for e in compiled), *((e, input_roles) for _, e in input_ranks)]:
        for ref in expr.references:  # a misspelt name under a namespace would fail every call that evaluates it
            wrong = misread_namespace(ref, manifest, visible)
            if wrong:  # an ExpressionError, as an unknown bare name is at load
                raise ExpressionError(f"reads {ref!r}: {wrong}", expression=expr.source, where=expr.where)
    return Program(
        manifest=manifest,
        input_ranks=input_ranks,
        outputs=outputs,
        derive=derive,
        constants=constants,
        variants=variants,
        compiler=compiler,
        order=tuple(order),
        cyclic=cyclic,
    )


def _input_rank(compiler: ExpressionCompiler, spec: TensorSpec) -> Expression:
    """An input's rank expression (within the package's expression budget). It is checked before
    any derive entry or constant exists, so it reads none of them."""
    try:
        expr = compiler.compile(spec.rank, f"{spec.json_path}.rank")
    except ExpressionError as exc:
        if exc.detail.startswith("unknown name"):
            raise ExpressionError(f"{exc.detail} (input ranks see only the namespaces)", expression=exc.expression,
                                  where=exc.where) from None  # fmt: skip
        raise
    for ref in expr.references:
        if "." not in ref and ref not in NAMESPACES:
            raise ExpressionError(f"unknown name {ref!r} (input ranks see only the namespaces)",
                                  expression=expr.source, where=expr.where)  # fmt: skip
    return expr


def _refuse_too_many_expressions(manifest: Manifest) -> None:
    """Refuse, before compiling any, a manifest whose distinct expression strings alone pass the
    budget: compiling 2,048 of them first took about 3 s."""
    places = [(f"derive.{k}", e) for k, e in manifest.derive.items()]
    places += [(f"constants.{k}", e) for k, e in manifest.constants.items()]
    for v in manifest.variants:
        places += [(f"{v.json_path}.constants.{k}", e) for k, e in v.constants.items()]
        places += [(f"{v.json_path}.when[{i}]", e) for i, e in enumerate(v.when)]
    first: dict[str, str] = {}  # each distinct string and its first place
    for where, e in places:
        if isinstance(e, str):
            first.setdefault(e, where)
    if len(first) > MAX_EXPRESSIONS:
        source, where = list(first.items())[MAX_EXPRESSIONS]  # the 2,049th distinct one
        raise ExpressionSandboxError(f"the package has more than {MAX_EXPRESSIONS} distinct expressions "
                                     f"({len(first)} in its derive, constants and when clauses alone)",
                                     expression=shorten(source), where=where)  # fmt: skip


def defined_names(manifest: Manifest) -> list[tuple[str, str]]:
    """(JSON path, name) of every derive entry, top-level constant and variant constant."""
    names = [(f"derive.{n}", n) for n in manifest.derive] + [(f"constants.{n}", n) for n in manifest.constants]
    return names + [(f"{v.json_path}.constants.{n}", n) for v in manifest.variants for n in v.constants]


def misread_namespace(ref: str, manifest: Manifest, roles: Sequence[str]) -> str | None:
    """What is wrong with a dotted name an expression reads (``shapes.Xx``, ``attrs.alhpa``), or
    None: ``roles`` are the tensors visible there (input ranks see only the inputs)."""
    head, _, rest = ref.partition(".")
    key = rest.split(".")[0]
    if not rest:
        return None
    if head in ("shapes", "ranks") and key not in roles:
        outputs = any(spec.role in roles for spec in manifest.outputs)
        return (f"{key!r} is not {'an input or output' if outputs else 'an input (input ranks see only inputs)'} "
                f"({', '.join(roles)})")  # fmt: skip
    if head == "dtypes" and key not in manifest.type_constraints:
        return f"{key!r} is not a type variable ({', '.join(sorted(manifest.type_constraints))})"
    if head == "attrs" and key not in manifest.attributes:
        return f"no attribute {key!r} (attributes: {', '.join(sorted(manifest.attributes)) or 'none'})"
    if head == "tunables" and key not in manifest.tunables:
        return f"no tunable {key!r} (tunables: {', '.join(sorted(manifest.tunables)) or 'none'})"
    return None


def cycle_text(labels: Sequence[str], most: int = 8) -> str:
    """``a -> b -> a``; a long cycle shows its first names and its length (each member carries the
    text in its error, so it must not grow with the cycle)."""
    shown = [shorten(label) for label in labels[:most]]
    if len(labels) > most:
        return " -> ".join(shown) + f" -> ... ({len(labels)} entries in all)"
    return " -> ".join([*shown, shown[0]])


def node_label(node: tuple[str, int], outputs: Sequence[tuple[Any, ...]], derive: Sequence[tuple[Any, ...]]) -> str:
    """How an error names an :func:`evaluation_order` node: ``shapes.Y`` or the derive name (each
    entry of ``outputs``/``derive`` starts with the role/name)."""
    kind, index = node
    return f"shapes.{outputs[index][0]}" if kind == "output" else str(derive[index][0])


def list_source(value: Any) -> Any:
    """A JSON list of expressions and numbers as one list expression; anything else unchanged."""
    if not isinstance(value, list):
        return value
    parts = [f"({v})" if isinstance(v, str) else ("true" if v is True else "false" if v is False else repr(v)) for v in value]
    return "[" + ", ".join(parts) + "]"


def dollar_source(value: str) -> str:
    """``$name`` reads the constant ``name``; any other string is a literal WGSL type name."""
    if value.startswith("$"):
        return value[1:]
    return repr(value)
