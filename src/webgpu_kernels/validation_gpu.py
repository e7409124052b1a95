"""The GPU stage of ``webgpu-kernels validate``: for every test.json and bench.json case, every
variant whose ``when`` holds is resolved, rendered and compiled into a compute pipeline on the
current adapter; a variant x dtype no case exercises is a warning, unless a test.json case forces
the variant on that dtype and expects its `when` to refuse it."""

from __future__ import annotations

import itertools
import json
import math
import re
import time
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from . import sandbox
from .case_data import dtype_name
from .case_format import BENCH_FILE, TEST_FILE
from .casefile import binding_label
from .errors import (
    DeviceLimitError,
    DigestError,
    ExpressionError,
    InputError,
    KernelError,
    LayoutError,
    MissingInputError,
    SelectionError,
    ShaderCompileError,
    TemplateError,
    VariantRejectedError,
)
from .manifest import Manifest
from .package import MANIFEST_FILE, KernelPackage
from .sandbox import render_budget
from .validation_report import (
    ERROR,
    WARNING,
    Coverage,
    ProblemCollector,
    Progress,
    ValidationReport,
    shader_path,
)  # fmt: skip
from .workgroup_memory import describe, workgroup_storage

if TYPE_CHECKING:
    from .rendering import TemplateRenderer

#: What every WebGPU device offers (the limit's default): more is a variant that some devices refuse.
PORTABLE_WORKGROUP_STORAGE = 16384

#: Seconds of rendering validate gives a package in all: each render may take the sandbox's 10 s
#: deadline, and validate renders every case x variant (4 variants of a template spending its
#: deadline took 41 s; hundreds of cases would have taken hours). Shipped packages take well under 1 s.
MAX_RENDER_SECONDS_IN_ALL = 60.0


@dataclass(frozen=True)
class _Call:
    source: str  # "test.json" | "bench.json"
    case: str
    json_path: str
    inputs: dict[str, tuple[tuple[int, ...], str]]
    attrs: dict[str, Any]
    tunables: dict[str, Any]
    variants: tuple[str, ...] | None = None  # a test.json case's own list (`test` runs only those)
    expected: tuple[str, ...] = ()  # the outputs a test.json case checks


#: A number or a list of them in an error message (a case's own values: a shape of any rank),
#: where reasons are compared.
_NUMBER = re.compile(r"\[[-\d.,e+ ]*\]|-?\d+(?:\.\d+)?(?:e[-+]?\d+)?")

#: A variant x dtype pair that meets a template error: the pass's JSON path, the variant, the dtype,
#: the pass id, the case and the error's text.
_Alike = tuple[str, str, str, str, str, str]


def _calls(package: KernelPackage, manifest: Manifest, test_file: Any, bench_file: Any) -> list[_Call]:
    calls = []
    if test_file is not None:
        for case in test_file.cases:
            if case.refused is not None:  # meant to be refused: nothing of it compiles
                continue
            try:
                arrays = case.build_inputs(manifest, package.read_bytes)
            except KernelError:
                continue  # reported by the test.json stage
            metas = {k: (tuple(a.shape), dtype_name(a.dtype)) for k, a in arrays.items()}
            calls.append(_Call(TEST_FILE, case.name, case.json_path, metas, case.attrs, case.tunables,
                               tuple(case.variants) if case.variants is not None else None,
                               tuple(case.expected)))  # fmt: skip
    if bench_file is not None:
        for case in bench_file.cases:
            try:
                instances = case.expand(manifest)
            except KernelError:
                continue
            for inst in instances:
                calls.append(_Call(BENCH_FILE, case.name, case.json_path, inst.inputs, case.attrs, case.tunables))
    return calls


#: The refusal a test.json case must expect for it to say that a variant's refusal of a dtype is
#: meant: the variant's own `when` (a SelectionError, a parent class, says nothing of which
#: variant refused; a RankError or another InputError comes before any variant is judged).
VARIANT_REFUSAL = VariantRejectedError.__name__


def _expected_refusals(package: KernelPackage, manifest: Manifest, program: Any, test_file: Any,
                       device: Any) -> dict[tuple[str, str], str]:  # fmt: skip
    """(variant, dtype label) -> the first test.json case that forces the variant (``variants``) on a
    call of that dtype and expects (``refused``) the VariantRejectedError its `when` gives the call,
    as `test` sees it: a clause that is false, not one that fails to evaluate (a defect), nor one
    refusing only for want of shader-f16 on this adapter (the adapter's, not the variant's), nor
    one the call's shapes make false (the variant takes them in another dtype: _takes_another_dtype)."""
    from .contract import check_call
    from .selection import accepted_with_f16, select_variant

    found: dict[tuple[str, str], str] = {}
    for case in test_file.cases if test_file is not None else ():
        refusal = case.refused
        if refusal is None or refusal.error != VARIANT_REFUSAL or not case.variants:
            continue
        try:
            arrays = case.build_inputs(manifest, package.read_bytes)
            metas = {k: (tuple(a.shape), dtype_name(a.dtype)) for k, a in arrays.items()}
            signature = check_call(manifest, metas, case.attrs, case.tunables)
            scope, _ = program.call_scope(signature, device.info)
        except KernelError:
            continue  # refused before any variant is judged (or the case is broken: the test.json stage says so)
        label = binding_label(signature.type_bindings())
        no_f16 = device.info.lacks_f16_for(dtype for _, dtype in metas.values())
        for vid in case.variants:
            try:
                select_variant(program.variants, scope, forced=vid, definitions=program.definitions)
            except VariantRejectedError as exc:
                verdict = exc.trace[0] if exc.trace else None
                if (not refusal.matches(exc) or verdict is None or verdict.error is not None
                        or (no_f16 and vid in accepted_with_f16(program, signature, device.info))
                        or (vid, label) in found):  # fmt: skip
                    continue
                if _takes_another_dtype(manifest, program, case, metas, vid, device.info):
                    found[(vid, label)] = case.name

            except SelectionError:
                continue  # no such variant: the test.json stage's error
    return found


def _takes_another_dtype(manifest: Manifest, program: Any, case: Any, metas: dict[str, tuple[tuple[int, ...], str]],
                         vid: str, info: Any) -> bool:  # fmt: skip
    """Whether variant ``vid`` accepts the case's call, its shapes and attributes as they are, with
    the inputs of one type variable in another dtype its constraint allows (shader-f16 assumed:
    the adapter's lack of it is no dtype's refusal). Only then is the refusal the dtype's: one of
    the shapes (D % 8 on float32) leaves other calls of the dtype that select the variant."""
    from dataclasses import replace

    from .contract import check_call
    from .selection import judge

    target = next(cv for cv in program.variants if cv.variant.id == vid)
    type_vars = {spec.role: spec.dtype for spec in manifest.inputs}
    with_f16 = replace(info, features=info.features | {"shader-f16"})
    for tv, allowed in manifest.type_constraints.items():
        for other in allowed:
            swapped = {k: (shape, other if type_vars.get(k) == tv else dt) for k, (shape, dt) in metas.items()}
            if swapped == metas:
                continue
            try:
                scope, _ = program.call_scope(check_call(manifest, swapped, case.attrs, case.tunables), with_f16)
            except KernelError:
                continue
            if judge(target, scope, program.definitions)[0].accepted:
                return True
    return False


#: What differs between variants in the compiler's report of one template mistake: the shader's
#: label ('QuickGelu.vec4'), positions in the rendered WGSL ("┌─ wgsl:80:12", the "80 │" gutter,
#: "rendered line 80") and naga's expression numbers ("[72]"). Types and messages stay.
_COMPILER_PLACES = re.compile(r"'[^'\n]*'|┌─ [^\n]*|^\s*\d+ │|rendered line \d+|\[\d+\]", re.MULTILINE)

#: The most type combinations the coverage lists whether or not a case exercises them.
MAX_LISTED_COMBINATIONS = 256


def _first_few(names: list[str]) -> str:
    """``a, b, c and 4 more``: the names an error grouped over several cases shows."""
    return ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")


def _more_cases(others: list[str]) -> str:
    """`` (and in 2 more cases: a, b)``: where else an error grouped by its reason was met."""
    if not others:
        return ""
    return f" (and in {len(others)} more cases: {', '.join(others[:3])}{' ...' if len(others) > 3 else ''})"


def _said(label: str, binding: dict[str, str] | None, manifest: Manifest) -> str:
    """``label`` as a warning says it: a type variable whose constraint lists one type is set apart
    (``T=float16 (and I=int64, the one type its constraint lists)``), since every call binds it so
    and no case could give it another ("with T=float16, I=int64" had read as asking for one)."""
    if not binding or len(set(binding.values())) == 1:
        return label  # `float32`: no type variable is named
    fixed = [tv for tv in binding if len(manifest.type_constraints.get(tv, ())) == 1]
    if not fixed or len(fixed) == len(binding):
        return label
    free = ", ".join(f"{tv}={binding[tv]}" for tv in binding if tv not in fixed)
    one = ", ".join(f"{tv}={binding[tv]}" for tv in fixed)
    whose = "its constraint lists" if len(fixed) == 1 else "their constraints list"
    return f"{free} (and {one}, the one type {whose})"


def _type_combos(manifest: Manifest) -> list[dict[str, str]]:
    names = list(manifest.type_constraints)
    lists = [list(manifest.type_constraints[n]) for n in names]
    return [dict(zip(names, combo)) for combo in itertools.product(*lists)]


def _rows_of(binding: dict[str, str], combos: list[dict[str, str]]) -> list[str]:
    """The coverage rows a call of ``binding`` counts for: its own where it binds every type
    variable; where an absent optional input leaves one unbound (ONNX ReduceX-18's int64 `axes`),
    every combination that agrees with it, since nothing the call runs can depend on a type no
    tensor of it has (its label alone had been a row of its own, and the combinations' rows
    "not exercised" whatever the cases)."""
    if len(binding) == len(combos[0]):
        return [binding_label(binding)]
    found = [binding_label(c) for c in combos if all(c.get(tv) == dt for tv, dt in binding.items())]
    return found or [binding_label(binding)]


def _shapes_read(cv: Any) -> set[str]:
    """The tensors whose shape or rank a clause of the variant's own `when` reads (`numel(shapes.B) == 0`):
    a variant that binds such an optional input nowhere ignores it knowingly. Not through a derive
    entry, which every variant may read (a `_nobeta` twin's forgotten `'beta' not in shapes` stays a warning)."""
    return {ref.split(".")[1] for clause in cv.when for ref in clause.references
            if ref.count(".") >= 1 and ref.split(".")[0] in ("shapes", "ranks")}  # fmt: skip


def _fold_partial_rows(coverage: dict[tuple[str, str], Coverage], rows_of: dict[str, list[str]],
                       built: dict[tuple[str, str], set[str]], tested: set[tuple[str, str]],
                       needs_f16: set[tuple[str, str]]) -> None:  # fmt: skip
    """Counts the rows of calls that leave a type variable unbound into the rows of the combinations
    they count for (:func:`_rows_of`), and drops them: pipelines are the distinct WGSL compiled for
    either, seconds go to the first row alone (JUnit sums them)."""
    for (vid, label), cov in list(coverage.items()):
        targets = rows_of.get(label, [label])
        if targets == [label]:
            continue
        del coverage[(vid, label)]
        for i, row in enumerate(targets):
            into = coverage.setdefault((vid, row), Coverage(vid, row))
            into.cases += cov.cases
            into.failed += cov.failed
            into.refused += cov.refused
            shaders = built.setdefault((vid, row), set())
            shaders |= built.get((vid, label), set())
            into.pipelines = len(shaders)
            into.seconds += cov.seconds if i == 0 else 0.0
    for marks in (tested, needs_f16):
        marks |= {(vid, row) for vid, label in marks for row in rows_of.get(label, [label])}


def check_gpu(package: KernelPackage, manifest: Manifest, program: Any, test_file: Any, bench_file: Any,
               out: ProblemCollector, report: ValidationReport, *, device: Any, notify: Progress,
               broken_templates: AbstractSet[str] = frozenset(), renderer: TemplateRenderer) -> None:  # fmt: skip
    """``broken_templates``: those whose error the static checks reported; a render that fails in one
    counts against its variant and dtype without saying it again (a typo had been one error per
    variant and dtype); ``renderer``: the package's TemplateRenderer, the static checks' own."""
    from .contract import check_call
    from .execution import check_bound, check_limits, compile_pipeline
    from .program import tensor_bytes
    from .rendering import bound_roles, resolve_scratch, resolve_variant, workgroup_memory_blame
    from .selection import accepted_with_f16, judge

    coverage: dict[tuple[str, str], Coverage] = {}
    count = math.prod(len(types) for types in manifest.type_constraints.values())
    combos = _type_combos(manifest) if count <= MAX_LISTED_COMBINATIONS else []
    if count > MAX_LISTED_COMBINATIONS:  # 8 type variables of 13 dtypes would be 8e8 rows, each a warning
        out.warning(MANIFEST_FILE, "typeConstraints", f"the type variables allow {count} combinations, more than "
                    f"{MAX_LISTED_COMBINATIONS}: the coverage lists only those the cases exercise")  # fmt: skip
    bindings: dict[str, dict[str, str]] = {binding_label(combo): combo for combo in combos}  # label -> binding
    for v in manifest.variants:
        for combo in combos:
            coverage[(v.id, binding_label(combo))] = Coverage(v.id, binding_label(combo))
    calls = _calls(package, manifest, test_file, bench_file)
    compiled: dict[tuple[str, str], set[str]] = {}
    built: dict[tuple[str, str], set[str]] = {}  # the WGSL that compiled, per variant x dtype
    rows_of: dict[str, list[str]] = {}  # a call's dtype label -> the coverage rows it counts for
    tested: set[tuple[str, str]] = set()  # variant x dtype that a test.json case runs (`test` checks its results)
    needs_f16: set[tuple[str, str]] = set()  # variant x dtype rejected here only for want of shader-f16
    unbound: dict[tuple[str, str, str], list[str]] = {}  # (json path, variant, arg) -> the calls it lacks for
    unproduced: dict[tuple[str, tuple[str, ...]], list[_Call]] = {}  # (variant, outputs) -> test cases expecting them
    ignored: dict[tuple[str, str, str], list[str]] = {}  # (json path, variant, optional input) -> calls giving it
    no_scope: dict[tuple[str, str, tuple[str, str]], list[tuple[str, str]]] = {}  # (where, dtype, reason) -> (case, why)
    scoped: set[str] = set()  # dtypes some call got a scope for
    optional_outputs = {spec.role for spec in manifest.outputs if spec.optional}  # other roles: validation.py's error
    optional_inputs = {spec.role for spec in manifest.inputs if spec.optional}
    uncompiled: dict[tuple[str, int | None, str, str], list[_Alike]] = {}
    unrendered: dict[tuple[str, int | None, str, str], list[_Alike]] = {}  # the same, for render errors
    unresolved: dict[tuple[str, str, str, tuple[str, str]], list[tuple[str, str]]] = {}  # (where, variant, dtype, reason) -> (case, why)
    unjudged: dict[tuple[str, str, str, str], list[tuple[str, str]]] = {}  # (clause path, variant, dtype, reason) -> (case, text)
    unportable: set[tuple[str, int]] = set()  # (variant, pass) warned of for its workgroup memory
    too_much: dict[str, str] = {}  # WGSL refused for its workgroup memory -> the refusal, for every case it serves
    # A variant guards itself with the limit when its `when` or constants, or the top-level
    # derive and constants they may read, name it.
    shared = json.dumps([manifest.raw.get("derive"), manifest.raw.get("constants")])
    guards_storage = {v.id: "maxComputeWorkgroupStorageSize" in shared + json.dumps(manifest.raw["variants"][v.index])
                      for v in manifest.variants}  # fmt: skip
    definitions = program.definitions
    clock = _Clock()
    render_seconds = 0.0
    unrendered_late: list[tuple[str, str, str, str, str]] = []  # (template, json path, variant, dtype, case)
    notify("total", len(calls))
    for call in calls:
        notify("advance", 1)
        try:
            signature = check_call(manifest, call.inputs, call.attrs, call.tunables)
        except InputError:
            continue  # reported by the case-file stages
        binding = signature.type_bindings()
        label = binding_label(binding)
        bindings.setdefault(label, binding)
        if combos and label not in rows_of:
            rows_of[label] = _rows_of(binding, combos)
        # Without shader-f16 a float16 call is judged like any other: a variant that copies f16 data
        # as u32 words runs there, and `test` runs it; a guarded one (f16Ok) rejects it. `test`
        # skips a case that no variant accepts when an input is float16: so does this.
        no_f16 = device.info.lacks_f16_for(dtype for _, dtype in call.inputs.values())
        f16_accepts: frozenset[str] | None = None  # accepted_with_f16, computed where first needed
        try:
            scope, outputs = program.call_scope(signature, device.info)
        except InputError:
            continue  # an input rank given by an expression: reported by the case-file stages too
        except KernelError as exc:
            where = getattr(exc, "where", "") or ""
            reason = (type(exc).__name__, _NUMBER.sub("#", getattr(exc, "detail", "") or str(exc)))
            no_scope.setdefault((where, label, reason), []).append((call.case, str(exc)))
            continue
        scoped.add(label)
        sizes = tensor_bytes(manifest, signature, outputs)
        accepted_any = False
        refusals: dict[str, list[str]] = {}  # the device's refusal -> the variants it stops, one warning each
        rejected: dict[str, Any] = {}  # variant -> its verdict, where `when` rejects the call
        for cv in program.variants:
            clock.charge(None)
            vid = cv.variant.id
            verdict, inner = judge(cv, scope, definitions)  # definitions: traces show what `baseOk` was made of
            if not verdict.accepted:
                rejected[vid] = verdict
                if no_f16 and f16_accepts is None:
                    f16_accepts = accepted_with_f16(program, signature, device.info)
                if no_f16 and vid in (f16_accepts or ()):
                    needs_f16.add((vid, label))  # its f16Ok guard, not the case, keeps it from compiling
                if verdict.error is not None:  # grouped as `unresolved` is: each case's numbers differ
                    text = (f"clause {verdict.clause!r} gives neither true nor false (which rejects the variant): "
                            f"{verdict.error}")  # fmt: skip
                    key = (f"{cv.variant.json_path}.when[{verdict.clause_index}]", vid, label, _NUMBER.sub("#", text))
                    unjudged.setdefault(key, []).append((call.case, text))
                continue
            accepted_any = True
            if call.source == TEST_FILE:
                tested.add((vid, label))
            cov = coverage.setdefault((vid, label), Coverage(vid, label))
            clock.charge(cov)  # what follows, to the next variant, is this row's work
            cov.cases += 1
            notify("start", {"variant": vid, "dtype": label, "case": call.case})
            try:
                resolved = resolve_variant(cv, inner)
                scratch = resolve_scratch(cv, inner)  # as a call sizes them, after the passes
            except (ExpressionError, LayoutError) as exc:
                cov.failed += 1
                where = getattr(exc, "where", "") or cv.variant.json_path
                # grouped by the reason less its numbers (each case's differ), never across reasons
                reason = (type(exc).__name__, _NUMBER.sub("#", getattr(exc, "detail", "") or str(exc)))
                unresolved.setdefault((where, vid, label, reason), []).append((call.case, str(exc)))
                continue
            if call.source == TEST_FILE and (call.variants is None or vid in call.variants):
                produced = bound_roles(resolved)
                missing = tuple(role for role in call.expected if role in optional_outputs and role not in produced)
                if missing:  # an optional output this variant leaves out: `test` would fail the case on it
                    unproduced.setdefault((vid, missing), []).append(call)
            scratch_arguments = {name: program.arguments_read([expr], cv) for name, expr in cv.scratch}
            variant_sizes = {**sizes, **dict(scratch)} if scratch else sizes
            try:
                for r in resolved:
                    check_bound(r, variant_sizes, vid)
            except MissingInputError as exc:  # the package's fault: `test` and calls would refuse it too
                cov.failed += 1
                unbound.setdefault((cv.variant.json_path, vid, exc.argument), []).append(f"{call.case} ({label})")
                continue
            for role in sorted(optional_inputs & set(call.inputs) - bound_roles(resolved) - _shapes_read(cv)):
                # a call giving it gets a result computed without it, and nothing says so (unless
                # the variant's own `when` reads its shape: it saw the input, an empty one say)
                ignored.setdefault((cv.variant.json_path, vid, role), []).append(f"{call.case} ({label})")
            for r, cpass in zip(resolved, cv.passes, strict=True):
                try:
                    check_limits(device, r, variant_sizes, program.arguments_read(cpass.workgroup_size, cv),
                                 scratch_arguments)  # fmt: skip
                except DeviceLimitError as exc:  # this adapter's limits, not the package's fault: a warning
                    refusals.setdefault(str(exc), []).append(vid)
                    cov.refused += 1
                    break
            if render_seconds > MAX_RENDER_SECONDS_IN_ALL:  # each render may take its deadline: not hours in all
                cov.failed += 1
                unrendered_late.append((cv.passes[0].pass_.shader, shader_path(manifest, cv.variant.index, 0), vid,
                                        label, call.case))  # fmt: skip
                continue
            rendered = []
            started = time.perf_counter()
            with render_budget():  # as a call renders them: the variant's passes share one budget
                for p_index, r in enumerate(resolved):
                    try:
                        rendered.append((p_index, r, renderer.render(r, inner)))
                    except (TemplateError, DigestError) as exc:  # DigestError: it includes an unverified file
                        cov.failed += 1
                        if isinstance(exc, DigestError):
                            file, line, detail = r.shader, None, "; ".join([str(exc), *getattr(exc, "__notes__", ())])
                        else:
                            file, line, detail = exc.file, exc.line, exc.detail
                        if file in broken_templates:  # said once already, by the template checks
                            break
                        # grouped by template line and cause, less its numbers: one mistake had been
                        # an error per variant and dtype, where a compile error is said once
                        said = (f"does not render for variant {vid!r} ({label}), pass {r.pass_id!r}"
                                + (f" (its {len(resolved)} passes share one render budget)" if len(resolved) > 1 else "")
                                + f": {detail}")  # fmt: skip
                        unrendered.setdefault((file, line, _NUMBER.sub("#", detail), ""), []).append(
                            (shader_path(manifest, cv.variant.index, p_index), vid, label, r.pass_id, call.case, said))
                        break  # a call stops here too; later passes would meet a spent budget
            render_seconds += time.perf_counter() - started
            for p_index, r, wgsl in rendered:  # compiled after: compiling is no render time
                done = compiled.setdefault((vid, label), set())
                if wgsl in too_much:  # each case it serves is refused, and says so
                    refusals.setdefault(too_much[wgsl], []).append(vid)
                    cov.refused += 1
                    continue
                if wgsl in done:
                    continue
                try:
                    compile_pipeline(device, wgsl, r, kernel=manifest.op_id, variant=vid,
                                     blame=workgroup_memory_blame(program, cv, cv.passes[p_index], renderer, wgsl))
                except DeviceLimitError as exc:  # its workgroup memory is past this adapter's: a warning, as above
                    too_much[wgsl] = str(exc)
                    refusals.setdefault(str(exc), []).append(vid)
                    cov.refused += 1
                    continue
                except ShaderCompileError as exc:
                    cov.failed += 1
                    guards = " and ".join(f"f16Ok(dtypes.{tv})" for tv, dt in binding.items() if dt == "float16")
                    advice = (f"\nthis adapter has no shader-f16 feature and the WGSL enables f16: with "
                              f"\"{guards}\" in the variant's `when`, such calls are refused with a clear error"
                              if no_f16 and "enable f16" in wgsl else "")  # fmt: skip
                    # grouped by template line and the compiler's text less where it points in this
                    # variant's WGSL: one template mistake had printed it whole once per variant and dtype
                    key = (exc.file or r.shader, exc.line, _COMPILER_PLACES.sub("#", exc.detail or ""), advice)
                    uncompiled.setdefault(key, []).append(
                        (shader_path(manifest, cv.variant.index, p_index), vid, label, r.pass_id, call.case, exc.detail))
                    done.add(wgsl)
                    continue
                done.add(wgsl)
                built.setdefault((vid, label), set()).add(wgsl)
                cov.pipelines += 1
                usage = workgroup_storage(wgsl, r.entry_point)
                if usage is None and (vid, p_index) not in unportable:
                    unportable.add((vid, p_index))
                    out.warning(r.shader, shader_path(manifest, cv.variant.index, p_index),
                                f"the workgroup memory of pass {r.pass_id!r} of variant {vid!r} cannot be sized from "
                                "its WGSL (an expression or an override without a default as a count or attribute argument): the engine "
                                "does not check it against the device's maxComputeWorkgroupStorageSize",
                                variant=vid, dtype=label, case=call.case)  # fmt: skip
                elif (usage and sum(usage.values()) > PORTABLE_WORKGROUP_STORAGE and not guards_storage[vid]
                        and (vid, p_index) not in unportable):  # fmt: skip
                    unportable.add((vid, p_index))
                    out.warning(r.shader, shader_path(manifest, cv.variant.index, p_index),
                                f"pass {r.pass_id!r} of variant {vid!r} uses {describe(usage)} of workgroup memory "
                                f"(case {call.case}, {label}), more than the {PORTABLE_WORKGROUP_STORAGE} every WebGPU "
                                "device offers: on a device with less its calls are refused (DeviceLimitError); a "
                                "`when` on device.limits.maxComputeWorkgroupStorageSize lets another variant take "
                                "them", variant=vid, dtype=label, case=call.case)  # fmt: skip
        clock.charge(None)
        skipped = no_f16 and not accepted_any  # `test` skips such a case: this adapter cannot run float16
        for i, vid in enumerate(call.variants or ()):
            # `test` would fail the case: it names a variant that refuses it (not for want of shader-f16 alone,
            # which `test` skips, as it does a case no variant accepts here)
            if vid in rejected and not skipped and vid not in (f16_accepts or ()):
                out.error(TEST_FILE, f"{call.json_path}.variants[{i}]", f"names variant {vid!r}, which rejects case "
                          f"{call.case!r} ({label}): {rejected[vid].reason()}", variant=vid, dtype=label,
                          case=call.case)  # fmt: skip
        for refusal, variants in refusals.items():
            out.warning(call.source, call.json_path, f"a call of case {call.case!r} ({label}) is refused on this "
                                                     f"adapter ({', '.join(variants)}): {refusal}",
                        dtype=label, case=call.case, adapter_only=True)  # fmt: skip
        if not accepted_any and not skipped:
            reasons = "; ".join(f"{vv.variant.id}: {judge(vv, scope, definitions)[0].reason()}" for vv in program.variants)
            severity = ERROR if call.source == TEST_FILE else WARNING
            out.add(severity, call.source, call.json_path,
                    f"no variant accepts case {call.case!r} ({label}) on this adapter: {reasons}",
                    dtype=label, case=call.case)  # fmt: skip
    for (file, line, _, _), alike in unrendered.items():
        _error_once(out, file, line, alike, alike[0][5])
    if unrendered_late:
        file, where, vid, label, case = unrendered_late[0]
        out.error(file, where, f"the templates took {render_seconds:.1f} s to render, more than the "
                  f"{MAX_RENDER_SECONDS_IN_ALL:.0f} s validate gives them in all: {len(unrendered_late)} renders (case x "
                  f"variant) were not checked, from case {case!r} on variant {vid!r} ({label}); a call with new "
                  f"shapes renders as slowly (up to {sandbox.MAX_RENDER_SECONDS:.0f} s a call)",
                  variant=vid, dtype=label, case=case)  # fmt: skip
    for (file, line, _, advice), alike in uncompiled.items():
        _, vid, label, pass_id, _, detail = alike[0]
        _error_once(out, file, line, alike,
                    f"WGSL does not compile for variant {vid!r} ({label}), pass {pass_id!r}:\n{detail}{advice}")
    for (where, label, _), failures in no_scope.items():  # one error per place, dtype and reason, as below
        (case, why), others = failures[0], [c for c, _ in failures[1:]]
        out.error(MANIFEST_FILE, where, f"cannot evaluate the call's scope ({label}): {why}{_more_cases(others)}",
                  dtype=label, case=case)  # fmt: skip
    for (where, vid, label, _), failures in unresolved.items():  # one error per place, variant, dtype and reason
        (case, why), others = failures[0], [c for c, _ in failures[1:]]
        out.error(MANIFEST_FILE, where, f"cannot resolve the variant: {why}{_more_cases(others)}",
                  variant=vid, dtype=label, case=case)  # fmt: skip
    for (where, vid, label, _), failures in unjudged.items():  # one warning per clause, variant, dtype and reason
        (case, text), others = failures[0], [c for c, _ in failures[1:]]  # (it had been one per case: 30 lines)
        out.warning(MANIFEST_FILE, where, text + _more_cases(others), variant=vid, dtype=label, case=case)
    for (where, vid, arg), calls_without in unbound.items():  # one error per variant and tensor, not per case
        shown = _first_few(calls_without)
        out.error(MANIFEST_FILE, where, f"accepts calls that have no tensor {arg!r} but binds it: its `when` must "
                                        f"require it (`'{arg}' in shapes`); calls: {shown}", variant=vid)  # fmt: skip
    for (where, vid, arg), calls_with in ignored.items():  # one warning per variant and tensor, not per case
        out.warning(MANIFEST_FILE, where, f"accepts calls that give the optional input {arg!r} but binds it nowhere, "
                                          f"so their {arg!r} is ignored: unless that is right, its `when` must refuse "
                                          f"them (`'{arg}' not in shapes`); calls: {_first_few(calls_with)}",
                    variant=vid)  # fmt: skip
    for (vid, missing), cases in unproduced.items():  # one error per variant and outputs, not per case
        first, shown = cases[0], _first_few(sorted({c.case for c in cases}))
        roles = ", ".join(map(repr, missing))
        out.error(TEST_FILE, f"{first.json_path}.expected",
                  f"expects optional output{'s' if len(missing) > 1 else ''} {roles}, which variant {vid!r} (it "
                  f"accepts the case) does not produce: `test` would fail it there. List under `variants` only the "
                  f"variants that produce {'them' if len(missing) > 1 else 'it'}, or leave {roles} out of `expected`"
                  f" (cases: {shown})", variant=vid, case=first.case)  # fmt: skip
    # a case file with errors has no cases here: say so where its variants look unexercised
    broken = [name for name, parsed in ((TEST_FILE, test_file), (BENCH_FILE, bench_file))
              if parsed is None and package.has(name)]  # fmt: skip
    unread = f" ({' and '.join(broken)} has errors, so its cases were not used)" if broken else ""
    _fold_partial_rows(coverage, rows_of, built, tested, needs_f16)

    def rows(labels: AbstractSet[str]) -> set[str]:
        return {row for label in labels for row in rows_of.get(label, [label])}

    scopeless = rows({label for _, label, _ in no_scope}) - rows(scoped)  # every call of the dtype stopped there
    expected_refusals = {(vid, row): case for (vid, label), case in
                         (_expected_refusals(package, manifest, program, test_file, device)
                          if any(not cov.cases for cov in coverage.values()) else {}).items()
                         for row in rows({label})}  # fmt: skip
    for cov in coverage.values():
        if cov.cases and test_file is not None and (cov.variant, cov.dtype) not in tested:
            # bench.json only compiles it: `test` never runs it, so nothing checks what it computes,
            # although calls of the bench cases' shapes select it.
            # "it compiles" only where it did: a failed compile is its own error above, and an adapter
            # that refused every case compiled nothing (the warning had said "it compiles" for both)
            variant = manifest.variant(cov.variant)
            compiles = "it compiles, but " if cov.status == "compiled" else ""
            out.warning(MANIFEST_FILE, variant.json_path if variant else "",
                        f"only bench.json cases exercise variant {cov.variant!r} with "
                        f"{_said(cov.dtype, bindings.get(cov.dtype), manifest)}: {compiles}"
                        "no test.json case checks its results", variant=cov.variant, dtype=cov.dtype)  # fmt: skip
        if cov.cases:
            continue
        if (cov.variant, cov.dtype) in needs_f16:
            cov.note = "no shader-f16"
            out.warning("", "", f"this adapter has no shader-f16 feature: variant {cov.variant!r} ({cov.dtype}) "
                                "was not compiled", variant=cov.variant, dtype=cov.dtype, adapter_only=True)  # fmt: skip
            continue
        refusal_case = expected_refusals.get((cov.variant, cov.dtype))
        if refusal_case is not None:  # the variant is not meant for the dtype, and a test.json case checks that
            cov.expected_refusal = refusal_case
            continue
        if cov.dtype in scopeless:  # its cases stopped at the scope error above, which is what to fix
            cov.note = "not reached (scope error)"
            continue
        variant = manifest.variant(cov.variant)
        out.warning(MANIFEST_FILE, variant.json_path if variant else "",
                    f"no test.json or bench.json case exercises variant {cov.variant!r} with "
                    f"{_said(cov.dtype, bindings.get(cov.dtype), manifest)}: "
                    f"it was not compiled{unread}", variant=cov.variant, dtype=cov.dtype)  # fmt: skip
    report.coverage = sorted(coverage.values(), key=lambda c: ([v.id for v in manifest.variants].index(c.variant)
                                                                if manifest.variant(c.variant) else 99, c.dtype))  # fmt: skip


def _error_once(out: ProblemCollector, file: str, line: int | None, alike: list[_Alike], text: str) -> None:
    """One error for a template mistake that several variant x dtype pairs meet (``alike``, the
    first's ``text`` said whole), naming the others, in ``also`` every one: said once per pair, the
    compiler's text had been printed eight times over."""
    where, vid, label, _, case, _ = alike[0]
    rest = list(dict.fromkeys((v, d) for _, v, d, _, _, _ in alike if (v, d) != (vid, label)))  # each once
    also = ", ".join(f"{v!r} ({d})" for v, d in rest[:4]) + (" ..." if len(rest) > 4 else "")
    out.error(file, where, text + (f"\nthe same error in {len(rest)} more variant x dtype: {also}" if rest else ""),
              variant=vid, dtype=label, case=case, line=line, also=tuple(rest))  # fmt: skip


class _Clock:
    """Charges the time from one :meth:`charge` to the next to the row named then (None: to no row)."""

    def __init__(self) -> None:
        self.row: Coverage | None = None
        self.since = time.perf_counter()

    def charge(self, row: Coverage | None) -> None:
        now = time.perf_counter()
        if self.row is not None:
            self.row.seconds += now - self.since
        self.row, self.since = row, now
