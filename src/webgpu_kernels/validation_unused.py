"""validate's warning of a derive entry or constant that nothing reads: one left behind (a check
written for a `when` clause that never names it) silently does nothing. A warning, not an error:
an unused entry is harmless.

Readers are every expression of the compiled program (input ranks, outputs, derive, constants,
`when`, template inputs, bindings, dispatch), bench.json's ``flops`` (top-level names only) and
the templates, which see every derive entry and constant bare and in ``constants``
(rendering.template_context). Where a reader cannot be told for sure (a template reading
``constants`` dynamically, a ``flops`` that does not compile) nothing it could read is warned of.
"""

from __future__ import annotations

from collections.abc import Iterable

from .errors import ExpressionError
from .expressions import Expression
from .package import MANIFEST_FILE, KernelPackage
from .program import CompiledVariant, Program
from .rendering import TemplateRenderer
from .validation_report import ProblemCollector


def _bare(expressions: Iterable[Expression], skip: str | None = None) -> set[str]:
    """The bare names (derive entries, constants) the expressions read, but ``skip`` (their own name)."""
    return {ref for e in expressions for ref in e.references if "." not in ref and ref != skip}


def _variant_expressions(v: CompiledVariant) -> list[Expression]:
    found = list(v.when)
    for p in v.passes:
        found += [e for _, e in p.source_inputs] + [p.threads, *p.workgroup_size]
        for b in p.bindings:
            found += [e for e in (b.element_type, b.length) if e is not None]
            found += [e for _, t, value in b.fields for e in (t, value)]
    return found


def check_unused(package: KernelPackage, program: Program, flops: str | float | None, out: ProblemCollector) -> None:
    """Warn of each derive entry and constant (top-level or a variant's) that nothing reads."""
    renderer = TemplateRenderer(package.read_text)
    by_shader: dict[str, set[str] | None] = {}
    known = True  # False once some reader of top-level names cannot be told
    # Input ranks see only the namespaces; outputs, derive and constants see derive and constants.
    read = _bare(e for _, _, shape, rank in program.outputs for e in (shape, rank) if e is not None)
    for name, e in program.derive + program.constants:
        read |= _bare([e], skip=name)
    variant_reads: dict[int, set[str] | None] = {}
    for index, v in enumerate(program.variants):
        mine = _bare(_variant_expressions(v))
        for name, e in v.constants:
            mine |= _bare([e], skip=name)
        for p in v.passes:
            shader = p.pass_.shader
            if shader not in by_shader:
                by_shader[shader] = renderer.names_read(shader) if shader else None
            mine |= by_shader[shader] or set()
        if any(by_shader[p.pass_.shader] is None for p in v.passes):
            known = False
            variant_reads[index] = None
        else:
            variant_reads[index] = mine
        read |= mine
    if isinstance(flops, str):
        try:
            read |= _bare([program.compiler.compile(flops, "flops")])
        except ExpressionError:  # reported by the bench.json checks
            known = False
    if known:
        for name, _ in program.derive:
            if name not in read:
                out.warning(MANIFEST_FILE, f"derive.{name}", f"nothing reads derive entry {name!r}: no expression, "
                            "`when` clause, binding, dispatch, output shape, other entry, template nor bench.json's "
                            "flops names it (remove it, or read it where it was meant to be read)")  # fmt: skip
        for name, _ in program.constants:
            if name not in read:
                out.warning(MANIFEST_FILE, f"constants.{name}", f"nothing reads constant {name!r}: no expression, "
                            "`when` clause, binding, dispatch, other entry, template nor bench.json's flops names it "
                            "(remove it, or read it where it was meant to be read)")  # fmt: skip
    for index, v in enumerate(program.variants):
        seen = variant_reads[index]
        if seen is None:
            continue
        for name, _ in v.constants:
            if name not in seen:
                out.warning(MANIFEST_FILE, f"{v.variant.json_path}.constants.{name}",
                            f"nothing reads constant {name!r} of variant {v.variant.id!r}: no `when` clause, "
                            "binding, dispatch, other constant nor template of the variant names it (remove it, or "
                            "read it where it was meant to be read)")  # fmt: skip
