"""validate's warning of a derive entry or constant that nothing reads: one left behind (a check
written for a `when` clause that never names it) silently does nothing. A warning, not an error:
an unused entry is harmless.

Readers are every expression of the compiled program (input ranks, outputs, derive, constants,
`when`, scratch sizes, template inputs, bindings, dispatch), bench.json's ``flops`` and ``bytes`` (top-level
names only) and the templates, which see every derive entry and constant bare and in ``constants``
(rendering.template_context). Where a reader cannot be told for sure (a template reading
``constants`` dynamically, a ``flops`` or ``bytes`` that does not compile) nothing it could read is warned of.
An entry that only unused entries read is unused too: what counts is reached from the readers
that are not entries, so a chain of unused entries is warned of in one run, not one per link.
"""

from __future__ import annotations

from collections.abc import Iterable

from .errors import ExpressionError
from .expressions import Expression
from .package import MANIFEST_FILE
from .program import CompiledVariant, Program
from .rendering import TemplateRenderer
from .validation_report import ProblemCollector


def _bare(expressions: Iterable[Expression], skip: str | None = None) -> set[str]:
    """The bare names (derive entries, constants) the expressions read, but ``skip`` (their own name)."""
    return {ref for e in expressions for ref in e.references if "." not in ref and ref != skip}


def _variant_expressions(v: CompiledVariant) -> list[Expression]:
    found = list(v.when) + [e for _, e in v.scratch]
    for p in v.passes:
        found += [e for _, e in p.source_inputs] + [p.threads, *p.workgroup_size]
        for b in p.bindings:
            found += [e for e in (b.element_type, b.length) if e is not None]
            found += [e for _, t, value in b.fields for e in (t, value)]
    return found


#: A derive entry or constant: (None, name) at the top level, (variant index, name) a variant's.
_Entry = tuple[int | None, str]


def _label(entry: _Entry, program: Program) -> str:
    index, name = entry
    if index is not None:
        return f"constant {name!r} of variant {program.variants[index].variant.id!r}"
    return f"derive entry {name!r}" if name in dict(program.derive) else f"constant {name!r}"


def _read_only_by(entry: _Entry, readers: dict[_Entry, list[_Entry]], program: Program) -> str:
    """'' where no entry reads ``entry``; else the clause naming its readers, all unused (a used one
    would have made it used)."""
    names = [_label(r, program) for r in readers.get(entry, [])]
    if not names:
        return ""
    listed = names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"
    return f"it is read only by {listed}, {'itself' if len(names) == 1 else 'themselves'} unused"


def check_unused(renderer: TemplateRenderer, program: Program, counts: Iterable[str | float | None],
                 out: ProblemCollector) -> None:  # fmt: skip
    """Warn of each derive entry and constant (top-level or a variant's) that nothing reads, or that
    only entries nothing reads read (to a fixpoint: a chain of them is warned of in one run).
    ``counts``: bench.json's ``flops`` and ``bytes``, which read top-level names too."""
    by_shader: dict[str, set[str] | None] = {}
    known = True  # False once some reader of top-level names cannot be told
    top = {name for name, _ in program.derive + program.constants}

    def at_top(names: set[str]) -> set[_Entry]:
        return {(None, n) for n in names if n in top}

    def in_variant(index: int, names: set[str]) -> set[_Entry]:
        # A variant's name counts for its constant and for the top-level entry it shadows (as before:
        # the shadowing is a warning of its own)
        own = {n for n, _ in program.variants[index].constants}
        return at_top(names) | {(index, n) for n in names if n in own}

    reads: dict[_Entry, set[_Entry]] = {}  # what each entry reads
    # Input ranks see only the namespaces; outputs, derive and constants see derive and constants.
    roots = at_top(_bare(e for _, _, shape, rank in program.outputs for e in (shape, rank) if e is not None))
    for name, e in program.derive + program.constants:
        reads[(None, name)] = at_top(_bare([e], skip=name))
    variant_known: list[bool] = []
    for index, v in enumerate(program.variants):
        mine = _bare(_variant_expressions(v))
        for p in v.passes:
            shader = p.pass_.shader
            if shader not in by_shader:
                by_shader[shader] = renderer.names_read(shader) if shader else None
            mine |= by_shader[shader] or set()
        for name, e in v.constants:
            reads[(index, name)] = in_variant(index, _bare([e], skip=name))
        roots |= in_variant(index, mine)
        variant_known.append(all(by_shader[p.pass_.shader] is not None for p in v.passes))
        if not variant_known[-1]:  # its templates could read any of its constants
            known = False
            roots |= {(index, name) for name, _ in v.constants}
    for count in counts:
        if isinstance(count, str):
            try:
                roots |= at_top(_bare([program.compiler.compile(count, "bench.json")]))
            except ExpressionError:  # reported by the bench.json checks
                known = False
    used: set[_Entry] = set()
    stack = list(roots)
    while stack:
        entry = stack.pop()
        if entry not in used:
            used.add(entry)
            stack.extend(reads.get(entry, ()))
    readers: dict[_Entry, list[_Entry]] = {}
    for reader, read in reads.items():
        for entry in read:
            readers.setdefault(entry, []).append(reader)
    remove = "remove it, or read it where it was meant to be read"
    remove_all = "remove them all, or read one where it was meant to be read"
    if known:
        for kind, entries in (("derive entry", program.derive), ("constant", program.constants)):
            for name, _ in entries:
                if (None, name) in used:
                    continue
                only = _read_only_by((None, name), readers, program)
                if only:
                    message = f"nothing reads {kind} {name!r} but unused entries: {only} ({remove_all})"
                else:
                    output = "output shape, " if kind == "derive entry" else ""
                    message = (f"nothing reads {kind} {name!r}: no expression, `when` clause, scratch size, binding, dispatch, "
                               f"{output}other entry, template nor bench.json's flops or bytes names it ({remove})")  # fmt: skip
                out.warning(MANIFEST_FILE, f"{'derive' if kind == 'derive entry' else 'constants'}.{name}", message)
    for index, v in enumerate(program.variants):
        if not variant_known[index]:
            continue
        for name, _ in v.constants:
            if (index, name) in used:
                continue
            only = _read_only_by((index, name), readers, program)
            message = (f"nothing reads constant {name!r} of variant {v.variant.id!r} but unused entries: {only} "
                       f"({remove_all})" if only else
                       f"nothing reads constant {name!r} of variant {v.variant.id!r}: no `when` clause, binding, "
                       f"dispatch, other constant nor template of the variant names it ({remove})")  # fmt: skip
            out.warning(MANIFEST_FILE, f"{v.variant.json_path}.constants.{name}", message)
