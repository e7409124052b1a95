"""A manifest with every expression compiled, and the scope a call evaluates them in.

Built once per package. For a call, :meth:`Program.call_scope` gives the names the manifest's
expressions see, in this order: the namespaces (``shapes``, ``ranks``, ``dtypes``, ``attrs``,
``tunables``, ``device``), the outputs' shapes, then ``derive`` entries in order (each sees the
earlier ones), then top-level ``constants``. :meth:`Program.variant_scope` adds a variant's own
constants on top. A derive or constant that fails to evaluate does not fail the call: it becomes
an undefined value that raises, with the original reason, only where something uses it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from jinja2.runtime import Undefined

from .contract import CallSignature
from .errors import ExpressionError, ManifestError, RankError
from .expressions import (
    FUNCTION_NAMES,
    NAMESPACES,
    STATIC_FUNCTIONS,
    Expression,
    ExpressionCompiler,
    as_count,
    failed_value,
)  # fmt: skip
from .manifest import ONNX_TO_WGSL, Binding, Manifest, Pass, Variant


@dataclass(frozen=True)
class DeviceInfo:
    """What expressions and templates may know about the device."""

    limits: Mapping[str, int]  # camelCase WebGPU limit names
    features: frozenset[str]

    @property
    def has_f16(self) -> bool:
        return "shader-f16" in self.features


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


@dataclass
class Program:
    manifest: Manifest
    input_ranks: tuple[tuple[str, Expression], ...]
    outputs: tuple[tuple[str, str, Expression, Expression | None], ...]  # role, type variable, shape, rank
    derive: tuple[tuple[str, Expression], ...]
    constants: tuple[tuple[str, Expression], ...]
    variants: tuple[CompiledVariant, ...]
    compiler: ExpressionCompiler = field(repr=False)

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
        scope["f16Ok"] = lambda dtype: dtype != "f16" or device.has_f16
        scope.update(
            shapes=shapes,
            ranks={role: len(shape) for role, shape in shapes.items()},
            dtypes={tv: ONNX_TO_WGSL[dt] for tv, dt in type_bindings.items()},
            attrs=signature.attr_map(),
            tunables=signature.tunable_map(),
            device={"limits": dict(device.limits)},
        )
        for role, rank_expr in self.input_ranks:
            if role in shapes:
                expected = as_count(rank_expr.evaluate(scope), rank_expr, "a rank")
                if len(shapes[role]) != expected:
                    raise RankError(role, f"rank {expected} ({rank_expr.source})", f"rank {len(shapes[role])}")
        outputs = []
        for role, type_var, shape_expr, rank_expr in self.outputs:
            shape = self._output_shape(shape_expr, scope)
            if rank_expr is not None:
                rank = as_count(rank_expr.evaluate(scope), rank_expr, "an output rank")
                if rank != len(shape):
                    raise ExpressionError(f"shape {list(shape)} has rank {len(shape)}, the manifest's rank says {rank}",
                                          expression=shape_expr.source, where=shape_expr.where)  # fmt: skip
            if type_var not in type_bindings:
                raise ExpressionError(f"output {role!r} has type variable {type_var!r}, which no input binds",
                                      expression=type_var, where=shape_expr.where)  # fmt: skip
            scope["shapes"][role] = shape
            scope["ranks"][role] = len(shape)
            outputs.append(OutputSpec(role=role, shape=shape, dtype=type_bindings[type_var]))
        _define_all(scope, self.derive)
        _define_all(scope, self.constants)
        return scope, tuple(outputs)

    @staticmethod
    def variant_scope(variant: CompiledVariant, scope: Mapping[str, Any]) -> dict[str, Any]:
        """``scope`` with the variant's constants added (overriding top-level ones)."""
        inner = dict(scope)
        _define_all(inner, variant.constants)
        return inner

    @staticmethod
    def _output_shape(expr: Expression, scope: Mapping[str, Any]) -> tuple[int, ...]:
        value = expr.evaluate(scope)
        if not isinstance(value, (list, tuple)):
            raise ExpressionError(f"an output shape must be a list of integers, got {value!r}",
                                  expression=expr.source, where=expr.where)  # fmt: skip
        for d in value:
            if isinstance(d, Undefined):  # e.g. a derive entry: outputs are evaluated before derive
                raise ExpressionError(f"{d._undefined_name!r} is not defined when output shapes are evaluated (they "
                                      "see shapes, ranks, dtypes, attrs, tunables, device and earlier outputs, not "
                                      "derive or constants)", expression=expr.source, where=expr.where)  # fmt: skip
        return tuple(as_count(d, expr, "an output dimension") for d in value)


def _define_all(scope: dict[str, Any], entries: tuple[tuple[str, Expression], ...]) -> None:
    for name, expr in entries:
        try:
            scope[name] = expr.evaluate(scope)
        except ExpressionError as exc:
            scope[name] = failed_value(name, exc)


def compile_program(manifest: Manifest) -> Program:
    """Compile every expression of ``manifest``; syntax and unknown names fail here, once."""
    reserved = set(NAMESPACES) | set(FUNCTION_NAMES)
    for section, names in (("derive", manifest.derive), ("constants", manifest.constants)):
        for name in names:
            if name in reserved:
                raise ManifestError(f"{name!r} is a reserved name", json_path=f"{section}.{name}")
    for variant in manifest.variants:
        for name in variant.constants:
            if name in reserved:
                raise ManifestError(f"{name!r} is a reserved name", json_path=f"{variant.json_path}.constants.{name}")

    compiler = ExpressionCompiler(set(manifest.derive) | manifest.constant_names())
    c = compiler.compile

    def compile_binding(binding: Binding) -> CompiledBinding:
        element = None
        if binding.element_type is not None:
            element = c(_dollar(binding.element_type), f"{binding.json_path}.elementType")
        length = None
        if binding.length is not None:
            # "$name" reads a constant; any other string is an expression, numbers are literals.
            source = binding.length[1:] if isinstance(binding.length, str) and binding.length.startswith("$") else binding.length
            length = c(source, f"{binding.json_path}.length")
        fields = tuple(
            (f.name, c(_dollar(f.type), f"{f.json_path}.type"), c(_list_source(f.value), f"{f.json_path}.value")) for f in binding.fields
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
        )
        for v in manifest.variants
    )
    return Program(
        manifest=manifest,
        input_ranks=tuple((s.role, c(s.rank, f"{s.json_path}.rank")) for s in manifest.inputs if isinstance(s.rank, str)),
        outputs=tuple(
            (s.role, s.dtype, c(s.shape, f"{s.json_path}.shape"),
             c(s.rank, f"{s.json_path}.rank") if s.rank is not None else None)
            for s in manifest.outputs
        ),  # fmt: skip
        derive=tuple((k, c(e, f"derive.{k}")) for k, e in manifest.derive.items()),
        constants=tuple((k, c(e, f"constants.{k}")) for k, e in manifest.constants.items()),
        variants=variants,
        compiler=compiler,
    )


def _list_source(value: Any) -> Any:
    """A JSON list of expressions and numbers as one list expression; anything else unchanged."""
    if not isinstance(value, list):
        return value
    parts = [f"({v})" if isinstance(v, str) else ("true" if v is True else "false" if v is False else repr(v)) for v in value]
    return "[" + ", ".join(parts) + "]"


def _dollar(value: str) -> str:
    """``$name`` reads the constant ``name``; any other string is a literal WGSL type name."""
    if value.startswith("$"):
        return value[1:]
    return repr(value)
