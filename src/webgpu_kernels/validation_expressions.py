"""validate's expression stage: every expression of a manifest compiled on its own, so that every
bad one is reported, and every name it reads checked against what is visible where it is
evaluated (outputs and derive entries see each other but not constants, a variant sees its own
constants, ``shapes.<role>`` names an input or output, ...), and no output or derive entry reads
itself through the others. validation.py runs it as its third stage.
"""

from __future__ import annotations

import re
from typing import Any

from .contract import default_value_problems
from .errors import ExpressionError
from .expressions import NAMESPACES, RESERVED_NAMES, ExpressionCompiler, divides_truly
from .manifest import ONNX_TO_WGSL, Manifest
from .package import MANIFEST_FILE
from .program import (
    cycle_text,
    defined_names,
    dollar_source,
    evaluation_order,
    list_source,
    misread_namespace,
    node_label,
)  # fmt: skip
from .rendering import TEMPLATE_NAMES
from .validation_report import Problem, ProblemCollector

#: A quoted ONNX type name other than bool, whose WGSL-style name differs ('float16', "int32").
_ONNX_DTYPE_LITERAL = re.compile(r"""(['"])(%s)\1""" % "|".join(n for n, w in ONNX_TO_WGSL.items() if w != n))


def _onnx_dtype_literals(source: str) -> list[str]:
    """The ONNX type names an expression writes as strings, each once."""
    return list(dict.fromkeys(m.group(2) for m in _ONNX_DTYPE_LITERAL.finditer(source)))


def check_expressions(manifest: Manifest, out: ProblemCollector, device_limits: set[str] | None = None) -> list[Problem]:
    """Compile every expression of the manifest on its own and check each name it reads is visible there."""
    found: list[Problem] = []
    derive_names = list(manifest.derive)
    constant_names = list(manifest.constants)
    compiler = ExpressionCompiler(set(derive_names) | manifest.constant_names())
    input_roles = [s.role for s in manifest.inputs]
    output_roles = [s.role for s in manifest.outputs]

    def report(where: str, message: str) -> None:
        problem = out.error(MANIFEST_FILE, where, message)
        if problem is not None:
            found.append(problem)

    for json_path, message in default_value_problems(manifest):
        report(json_path, message)
    named = defined_names(manifest)
    for where, name in named:
        if name in RESERVED_NAMES:
            report(where, f"{name!r} is a reserved name (a namespace, a function or Jinja's self)")
    named += [(f"{p.json_path}.source.inputs.{n}", n) for v in manifest.variants for p in v.passes for n in p.source_inputs]
    for where, name in dict.fromkeys(named):
        if name == "range":
            out.warning(MANIFEST_FILE, where, "hides `range`, the templates' one global, in every template")
        elif name in TEMPLATE_NAMES:
            # A template input is in `inputs`, a derive entry or constant in `constants` (not both).
            reach = f"inputs.{name}" if ".source.inputs." in where else f"constants.{name}"
            out.warning(MANIFEST_FILE, where, f"templates see the template contract's own {name!r} under this name "
                                              f"(reach this value as {reach})")  # fmt: skip

    def check(value: Any, where: str, visible: set[str], roles: list[str], scope_note: str,
              suffix: str = "") -> tuple[str, ...]:  # fmt: skip
        """Report what is wrong with one expression; return the names it reads (none if it does not compile)."""
        if isinstance(value, str):
            out.counts["expressions"] = out.counts.get("expressions", 0) + 1
        try:
            expr = compiler.compile(value, where)
        except ExpressionError as exc:
            report(where, f"expression {exc.expression!r}: {exc.detail}{suffix}")
            return ()
        onnx_names = _onnx_dtype_literals(expr.source) if any(r.startswith("dtypes.") for r in expr.references) else []
        if onnx_names:  # dtypes.T == 'float16' is never true: a `when` that never holds hides its variant
            out.warning(MANIFEST_FILE, where, f"expression {expr.source!r} reads dtypes and writes "
                        f"{', '.join(repr(n) for n in onnx_names)}: dtypes.<T> is the WGSL-style name "
                        f"({', '.join(repr(ONNX_TO_WGSL[n]) for n in onnx_names)}), so a comparison of the two "
                        "never holds")  # fmt: skip
        for ref in expr.references:
            head, _, rest = ref.partition(".")
            wrong = misread_namespace(ref, manifest, roles)
            if not rest:
                if head not in visible and head not in NAMESPACES:
                    report(where, f"expression {expr.source!r} names {head!r}, which is not defined {scope_note}{suffix}")
            elif wrong:
                report(where, f"expression {expr.source!r} reads {ref!r}: {wrong}{suffix}")
            elif head == "device" and device_limits is not None and ref.startswith("device.limits."):
                limit = ref.split(".")[2]
                if limit not in device_limits:
                    report(where, f"expression {expr.source!r} reads {ref!r}: {limit!r} is not a WebGPU limit{suffix}")
        return expr.references

    all_roles = input_roles + output_roles
    for spec in manifest.inputs:
        if isinstance(spec.rank, str):
            check(spec.rank, f"{spec.json_path}.rank", set(), input_roles, "here (input ranks see only the namespaces)")
    # Outputs and derive entries see each other, each evaluated after what it reads (program.evaluation_order).
    output_reads: list[tuple[str, tuple[str, ...]]] = []
    note = "for output shapes (they see the namespaces, the outputs and derive, not constants)"
    for spec in manifest.outputs:
        reads: tuple[str, ...] = ()
        if spec.shape is not None:
            reads += check(spec.shape, f"{spec.json_path}.shape", set(derive_names), all_roles, note)
        if isinstance(spec.rank, str):  # checked after every shape and derive entry: not ordered
            check(spec.rank, f"{spec.json_path}.rank", set(derive_names), all_roles, note)
        output_reads.append((spec.role, reads))
    derive_reads = [(name, check(value, f"derive.{name}", set(derive_names), all_roles,
                                 "in derive (derive entries see the outputs and each other, not constants)"))
                    for name, value in manifest.derive.items()]  # fmt: skip
    # An output shape reads the derive value; a constant of the same name overrides it for the
    # variant's passes, which would then size their work differently from the output.
    read_by_outputs = {ref: spec for spec, (_, reads) in zip(manifest.outputs, output_reads) for ref in reads
                       if ref in manifest.derive}  # fmt: skip
    # A dimension must be an integer: `/` gives 1280.0 for an even D, and 2.5, refused at the call, for an odd one.
    sized = [(f"{spec.json_path}.shape", spec.shape) for spec in manifest.outputs if isinstance(spec.shape, str)]
    for where, source in sized + [(f"derive.{n}", manifest.derive[n]) for n in read_by_outputs]:
        if isinstance(source, str) and divides_truly(source):
            out.warning(MANIFEST_FILE, where, f"expression {source!r} sizes an output with `/`, true division: its "
                                              "result is a float, and a dimension that does not divide evenly "
                                              "(5 / 2 is 2.5) is refused at the call; `//` is integer division")  # fmt: skip
    shadows = [(f"constants.{n}", n) for n in manifest.constants] + [
        (f"{v.json_path}.constants.{n}", n) for v in manifest.variants for n in v.constants]
    for where, name in shadows:
        if name in read_by_outputs:
            out.warning(MANIFEST_FILE, where, f"shadows derive entry {name!r}, which {read_by_outputs[name].json_path}"
                                              ".shape reads: the output is sized by the derive value, the passes "
                                              "use this one")  # fmt: skip
        elif name in manifest.derive:  # legal, but a when clause meant to read the derive entry reads this
            out.warning(MANIFEST_FILE, where, f"shadows derive entry {name!r}: the variant's when clauses, constants "
                                              "and passes read this value instead (rename one if both are meant)")  # fmt: skip
    for cycle in evaluation_order(output_reads, derive_reads)[1]:
        labels = [node_label(node, output_reads, derive_reads) for node in cycle.path]
        kind, i = cycle.path[0]
        where = f"{manifest.outputs[i].json_path}.shape" if kind == "output" else f"derive.{derive_reads[i][0]}"
        report(where, f"reads itself: {cycle_text(labels)} (no order can evaluate {'it' if len(cycle.members) == 1 else 'these'})")
    for k, (name, value) in enumerate(manifest.constants.items()):
        check(value, f"constants.{name}", set(derive_names) | set(constant_names[:k]), all_roles,
              "before this entry (top-level constants see derive and the constants above)")  # fmt: skip
    top = set(derive_names) | set(constant_names)
    checked_sets: set[tuple[str, str]] = set()
    for v in manifest.variants:
        vnames = list(v.constants)
        for k, (name, value) in enumerate(v.constants.items()):
            check(value, f"{v.json_path}.constants.{name}", top | set(vnames[:k]), all_roles,
                  "before this entry (variant constants see derive, constants and the ones above)")  # fmt: skip
        visible = top | set(vnames)
        note = f"for variant {v.id!r} (not in derive, constants or its constants)"
        for i, clause in enumerate(v.when):
            check(clause, f"{v.json_path}.when[{i}]", visible, all_roles, note)
        for buffer in v.scratch:
            check(buffer.bytes, f"{buffer.json_path}.bytes", visible, all_roles, note)
        for p in v.passes:
            for name, value in p.source_inputs.items():
                check(value, f"{p.json_path}.source.inputs.{name}", visible, all_roles, note)
            check(p.dispatch.threads, f"{p.dispatch.json_path}.threads", visible, all_roles, note)
            for w in p.dispatch.workgroup_size:
                check(w, f"{p.dispatch.json_path}.workgroupSize", visible, all_roles, note)
            for b in p.bindings:
                shared = b.json_path.startswith("bindingSets.")
                suffix = f" (as used by variant {v.id!r})" if shared else ""
                if shared and (b.json_path, v.id) in checked_sets:
                    continue
                checked_sets.add((b.json_path, v.id))
                # A binding's elementType/length "$name" is checked by check_manifest (reported once
                # per pass using it); checking it here again reported every such mistake twice.
                for f in b.fields:
                    check(dollar_source(f.type), f"{f.json_path}.type", visible, all_roles, note, suffix)
                    check(list_source(f.value), f"{f.json_path}.value", visible, all_roles, note, suffix)
    return found
