"""The checks behind ``webgpu-kernels validate PATH``: everything wrong with a package, at once.

In order, each stage reporting every problem it finds (a stage that needs a sound earlier one is
skipped when that one failed):

0. file names that break on macOS or Windows (portability.py): case collisions, Windows names;
1. metadata.json: present, well formed, every digest matching, no unlisted file, id = the op id;
2. manifest.json: the JSON Schema and the references between parts (``manifest.check_manifest``);
3. expressions (validation_expressions.py): each compiled on its own, so that every bad one is reported, and every name it
   reads checked against what is visible where it is evaluated (outputs and derive entries see
   each other but not constants, a variant sees its own constants, ``shapes.<role>`` names an
   input or output, ...), and no output or derive entry reads itself through the others; a derive
   entry or constant that nothing reads, templates included, is a warning (validation_unused.py);
4. templates: each pass's template exists and parses, and no pass or literal include names its
   file in another case;
5. test.json and bench.json: their JSON Schemas, then each case against the manifest (inputs,
   dtypes, attributes, data files, expected shapes);
6. the GPU: for every case of test.json and bench.json, every variant whose ``when`` holds is
   resolved, rendered and compiled into a compute pipeline on the current adapter. A variant x
   dtype that no case exercises is a warning (nothing to compile it for), and so is a case whose
   tensors the adapter cannot bind.

Each problem carries its severity, the file, the JSON path (or template line), and for GPU work
the variant and dtype (validation_report.py; stage 6 lives in validation_gpu.py). With isolation, all of it runs in a child process (package_tests.run_in_child).
"""

from __future__ import annotations

import math
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import Any

from . import case_format, casefile
from .case_data import dtype_name, inline_values
from .case_format import BENCH_FILE, TEST_FILE
from .casefile import CaseFileError, advise_case
from .digests import (
    METADATA_FILE,
    DigestProblem,
    ReadBudget,
    case_twins,
    id_problem,
    inspect_package,
    read_file,
    templates_there,
)  # fmt: skip
from .errors import (
    AdapterNotFoundError,
    DeviceError,
    ExpressionError,
    InputError,
    KernelError,
    ManifestError,
    PackageError,
    TemplateError,
    no_variant,
)  # fmt: skip
from .expressions import as_count
from .manifest import Manifest, build_manifest, reference_errors, schema_errors, without_unknown_fields
from .package import MANIFEST_FILE, KernelPackage, open_folder
from .portability import check_file_names, twin_message, walk_includes
from .program import (
    DeviceInfo,
    Program,
    compile_program,
)  # fmt: skip
from .rendering import TemplateRenderer
from .validation_expressions import check_expressions
from .validation_gpu import check_gpu
from .validation_report import (  # noqa: F401 - ERROR, WARNING, Problem, Coverage: this module's public names too
    ERROR,
    WARNING,
    Coverage,
    Problem,
    ProblemCollector,
    Progress,
    ValidationReport,
    shader_path,
)  # fmt: skip
from .validation_unused import check_unused

# --- the stages -------------------------------------------------------------------------------------


def validate_package(
    path: str | Path,
    *,
    adapter: str | None = None,
    gpu: bool = True,
    progress: Progress | None = None,
) -> ValidationReport:
    """Every problem with the package folder at ``path`` (``gpu=False`` skips stage 6)."""
    began = time.perf_counter()
    report = _validate(path, adapter=adapter, gpu=gpu, progress=progress)
    report.seconds = time.perf_counter() - began
    return report


def _validate(path: str | Path, *, adapter: str | None, gpu: bool, progress: Progress | None) -> ValidationReport:
    notify = progress or (lambda kind, value: None)
    root = Path(path).expanduser()
    report = ValidationReport(path=str(root))
    out = ProblemCollector()
    report.problems = out.problems
    try:
        package = open_folder(root, verify_digests=False)
    except PackageError as exc:
        out.error(str(root), "", str(exc))
        return report
    report.path = str(package.root)

    files = _guarded(out, "file name", check_file_names, package.root, out)  # what breaks on macOS/Windows
    twin_of = case_twins(files or ())  # the names folded once, for the templates' and the cases' checks
    checked = _guarded(out, "metadata.json", _check_metadata, package, out, files)  # the folder listed once
    metadata = checked[0] if checked is not None else None
    if metadata is not None:
        package = _as_opened(package, metadata, *checked[1:])
    manifest = _guarded(out, MANIFEST_FILE, _check_manifest, package, out)
    if manifest is not None:
        report.op_id = manifest.op_id
        mismatch = id_problem(metadata, manifest.op_id)  # the loader's own check and wording
        if mismatch is not None:
            out.error(METADATA_FILE, mismatch.json_path, mismatch.text)
    program = None
    device = None
    if gpu and manifest is not None:
        from .device import get_device

        try:
            device = get_device(adapter)
            report.adapter = device.adapter.label()
        except (AdapterNotFoundError, DeviceError) as exc:
            out.error("", "", f"no WebGPU device to compile pipelines on: {exc}")
    # One template environment for every stage: each template is read and compiled once
    renderer = TemplateRenderer(package.read_text)
    if manifest is not None:
        limits = set(device.info.limits) if device is not None else None
        expression_problems = check_expressions(manifest, out, limits)
        broken_templates = _guarded(out, "templates", _check_templates, package, manifest, out, files, twin_of,
                                    renderer)  # fmt: skip
        if not expression_problems:
            try:
                program = compile_program(manifest)
            except (ManifestError, ExpressionError) as exc:  # what check_expressions missed, if anything
                where = getattr(exc, "json_path", getattr(exc, "where", ""))
                if not any(p.file == MANIFEST_FILE and p.json_path == where for p in out.problems):  # said once
                    out.error(MANIFEST_FILE, where, str(exc))
    # The program compiled above serves every case below (None: the manifest's own errors are
    # reported, and the cases' output shapes, flops and bytes are not evaluated).
    if manifest is not None and program is None:
        report.skipped = "the manifest's expressions have errors: fix them, then validate again"
    test_file = _guarded(out, TEST_FILE, _check_test_json, package, manifest, program, out, twin_of)
    bench_file = _guarded(out, BENCH_FILE, _check_bench_json, package, manifest, program, out)
    if program is not None:  # every expression compiled: what each reads is known
        counts = (bench_file.flops, bench_file.bytes) if bench_file else ()
        _guarded(out, "unused entries", check_unused, renderer, program, counts, out)
    if metadata is not None:
        report.checked["digests"] = len(metadata["digest"]["files"])
    if manifest is not None:
        report.checked["expressions"] = out.counts.get("expressions", 0)
        report.checked["templates"] = out.counts.get("templates", len(manifest.shaders()))
    if test_file is not None:
        report.checked["testCases"] = len(test_file.cases)
        report.checked["refusedCases"] = sum(1 for c in test_file.cases if c.refused is not None)
    if bench_file is not None:
        report.checked["benchCases"] = len(bench_file.cases)
        if manifest is not None:
            try:
                report.checked["benchRuns"] = sum(len(c.expand(manifest)) for c in bench_file.cases)
            except KernelError:
                pass
    if device is not None and manifest is not None and program is not None:
        _guarded(out, "GPU", check_gpu, package, manifest, program, test_file, bench_file, out, report, device=device,
                 notify=notify, broken_templates=broken_templates or set(), renderer=renderer)  # fmt: skip
    order = {ERROR: 0, WARNING: 1}
    files = [METADATA_FILE, MANIFEST_FILE]
    report.problems = out.problems = sorted(
        out.problems, key=lambda p: (order[p.severity], files.index(p.file) if p.file in files else 2, p.file)
    )
    return report


def _guarded(out: ProblemCollector, stage: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Run one stage; an unexpected exception becomes an error of that stage instead of ending the report."""
    try:
        return fn(*args, **kwargs)
    except Exception as exc:  # noqa: BLE001 - a validator reports, it does not crash
        last = traceback.format_exc().strip().splitlines()[-3:]
        out.error("", "", f"the {stage} checks failed unexpectedly: {type(exc).__name__}: {exc}\n" + "\n".join(last))
        return None


def _as_opened(package: KernelPackage, metadata: dict[str, Any], verified: dict[str, bytes],
               problems: list[DigestProblem]) -> KernelPackage:  # fmt: skip
    """``package`` as a call sees it once opened: only the files metadata.json lists can be read,
    so a template that includes an unlisted file fails here as it fails every call (it had
    validated). The bytes are those the digest check read; a listed file that did not match, and
    an unlisted content file (both reported already), are read as they are now, so that their own
    checks still run, within the bound on what a package may hold."""
    view, budget = dict(verified), ReadBudget(sum(map(len, verified.values())))
    for p in problems:
        if p.reason in ("mismatch", "unlisted") and p.file not in view:
            if not budget.admits(package.root / p.file):
                break  # past the bound, which _check_metadata reported if the listed files reach it
            try:
                view[p.file] = read_file(package.root, p.file)
            except PackageError:
                continue  # reported by _check_metadata
    return replace(package, metadata=metadata, verified=view)


def _check_metadata(package: KernelPackage, out: ProblemCollector, files: list[str] | None
                    ) -> tuple[dict[str, Any] | None, dict[str, bytes], list[DigestProblem]]:  # fmt: skip
    """``files``: check_file_names' listing (None where the folder could not be listed)."""
    metadata, problems, verified = inspect_package(package.root, files)
    if metadata is None and not problems:
        out.error(METADATA_FILE, "", "the package has no metadata.json, so its files cannot be verified: "
                                     "run `webgpu-kernels digest PATH` to write one")  # fmt: skip
    for p in problems:
        if p.reason == "metadata":
            out.error(METADATA_FILE, p.json_path, p.text)
        elif p.reason == "unlisted":
            out.error(p.file, "", p.text)
        else:
            out.error(p.file, "", f"{p.text} ({METADATA_FILE} {p.json_path})")
    return metadata, verified, problems


def _read_json(package: KernelPackage, name: str, out: ProblemCollector) -> Any:
    try:
        return package.read_json(name)
    except PackageError as exc:
        out.error(name, "", str(exc).removeprefix(f"{package.path_of(name)}: "))
        return None


def _check_manifest(package: KernelPackage, out: ProblemCollector) -> Manifest | None:
    data = _read_json(package, MANIFEST_FILE, out)
    if data is None:
        return None
    schema = schema_errors(data)
    for p in schema:
        out.error(MANIFEST_FILE, p.json_path, p.detail)
    if schema:
        data = without_unknown_fields(data)  # unknown fields only: check the rest as if they were gone
        if data is None:
            return None
    for p in reference_errors(data):
        out.error(MANIFEST_FILE, p.json_path, p.detail)
    # A description of no declared attribute (misspelt, or one since removed) documents nothing. A
    # warning, not a load error: documentation never stops a package that runs.
    attributes = sorted(data.get("attributes", {}))
    for name in data.get("attributeDescriptions", {}):
        if name not in attributes:
            declared = f"the declared ones are {attributes}" if attributes else "it declares none"
            out.warning(MANIFEST_FILE, f"attributeDescriptions.{name}",
                        f"describes {name!r}, which is not an attribute of this manifest ({declared})")  # fmt: skip
    # With references broken between parts the model can usually still be built, so the later
    # stages can report their problems too.
    try:
        return build_manifest(data)
    except (KeyError, TypeError, ValueError, IndexError):
        return None


def _check_templates(package: KernelPackage, manifest: Manifest, out: ProblemCollector, files: list[str] | None,
                     twin_of: Callable[[str], str | None], renderer: TemplateRenderer) -> set[str]:  # fmt: skip
    """``files``: check_file_names' listing (None where the folder could not be listed);
    ``twin_of``: digests.case_twins of it. Returns the templates whose error it reported, which
    every call that renders them meets again."""
    parsed: set[str] = set()
    broken: set[str] = set()
    for v in manifest.variants:
        for p_index, p in enumerate(v.passes):
            where = shader_path(manifest, v.index, p_index)
            twin = twin_of(p.shader)  # before has(), which macOS and Windows answer for it
            if twin is not None:
                out.error(MANIFEST_FILE, where, twin_message("the pass names template", p.shader, twin), variant=v.id)
                continue
            if not package.has(p.shader):
                there = templates_there(p.shader, files or (), manifest.shaders())
                out.error(MANIFEST_FILE, where, f"template {p.shader!r} is not in the package{there}", variant=v.id)
                broken.add(p.shader)  # every render of it would say so again
                continue
            if p.shader in parsed:
                continue
            parsed.add(p.shader)
            try:
                renderer.check(p.shader)  # name, syntax and the sandbox's allow-list
            except TemplateError as exc:
                out.error(p.shader, "", exc.detail, line=exc.line)
                broken.add(exc.file or p.shader)
            except KernelError as exc:
                out.error(p.shader, "", str(exc))
                broken.add(p.shader)
    walk = walk_includes(renderer.env, parsed, files or (), twin_of)
    for name, line, message in walk.problems:
        out.error(name, "", message, line=line)
    out.counts["templates"] = len(set(manifest.shaders()).union(walk.templates))  # passes' (found or not) and included
    return broken


def _load_case_data(package: KernelPackage, name: str, check: Any, out: ProblemCollector, missing: str) -> Any:
    """The decoded test.json/bench.json if present and valid on its own (``check``: its checks, made
    once here: the caller builds its cases with casefile.checked_*_file); problems go to ``out``."""
    if not package.has(name):
        out.warning(name, "", missing)
        return None
    data = _read_json(package, name, out)
    if data is None:
        return None
    errors = check(data, file=name)
    for e in errors:
        out.error(name, e.json_path, e.detail)
    return None if errors else data


def _data_file_twins(package: KernelPackage, case: casefile.TestCase,
                     twin_of: Callable[[str], str | None]) -> list[tuple[str, str]]:  # fmt: skip
    """(where, message) for each data file the case names in another case than its file's name
    (``twin_of``: digests.case_twins of the package's files)."""
    found = []
    for section, entries in (("inputs", case.inputs), ("expected", case.expected)):
        for role, spec in entries.items():
            if not isinstance(spec.get("file"), str):
                continue
            try:
                name = package.relative_name(spec["file"])
            except PackageError:
                continue  # building the case says why
            twin = twin_of(name)  # before has(), which macOS and Windows answer for it
            if twin is not None:
                where = f"{case.json_path}.{section}.{role}.file"
                found.append((where, twin_message("the entry names data file", spec["file"], twin)))
    return found


def _check_test_json(package: KernelPackage, manifest: Manifest | None, program: Program | None,
                     out: ProblemCollector, twin_of: Callable[[str], str | None]) -> casefile.TestFile | None:  # fmt: skip
    """``twin_of``: digests.case_twins of the package's files."""
    data = _load_case_data(package, TEST_FILE, partial(case_format.check_test_data, manifest=manifest), out,
                           "the package has no test.json: `webgpu-kernels test` has nothing to run, and "
                           "pipelines are compiled only for bench.json shapes")  # fmt: skip
    if data is None:
        return None
    test_file = casefile.checked_test_file(data, file=TEST_FILE)
    twinned: set[int] = set()  # cases whose data would only be 'not found'
    for case in test_file.cases:
        for where, message in _data_file_twins(package, case, twin_of):
            out.error(TEST_FILE, where, message, case=case.name)
            twinned.add(case.index)
    if manifest is None:
        return test_file
    from .contract import check_call

    output_types = {o.role: o.dtype for o in manifest.outputs}
    float_dtypes = {"float32", "float16", "bfloat16", "float64"}
    missing_tolerance: set[str] = set()
    for case in test_file.cases:
        if case.index in twinned:
            continue
        try:
            arrays = case.build_inputs(manifest, package.read_bytes)
            signature = check_call(manifest, {k: (a.shape, dtype_name(a.dtype)) for k, a in arrays.items()},
                                   case.attrs, case.tunables)  # fmt: skip
        except CaseFileError as exc:
            out.error(TEST_FILE, exc.json_path, exc.detail, case=case.name)
            continue
        except InputError as exc:
            if case.refused is None:
                advise_case(exc)
                out.error(TEST_FILE, case.json_path, f"the case breaks the contract: {exc}", case=case.name)
            elif not case.refused.matches(exc):
                out.error(TEST_FILE, f"{case.json_path}.refused", f"the call is {case.refused.mismatch(exc)}",
                          case=case.name)  # fmt: skip
            continue
        _check_inline_integers(case, arrays, out)
        for tv in case.types:
            if tv not in manifest.type_constraints:
                out.error(TEST_FILE, f"{case.json_path}.types.{tv}", f"{tv!r} is not a type variable of "
                          f"{manifest.op_id} (its type variables: {sorted(manifest.type_constraints)})",
                          case=case.name)  # fmt: skip
        # Refused later than the contract (selection, an expression's failure, device limits: each
        # may read the device's limits and features): `test` judges it.
        if case.refused is not None:
            _check_case_variants(case, manifest, out)
            _check_late_refusal(case, case.refused, program, signature, out)
            continue
        binding = signature.type_bindings()
        out_dtypes = {role: binding.get(tv, "") for role, tv in output_types.items()}
        for role in case.expected:
            if role not in output_types:
                out.error(TEST_FILE, f"{case.json_path}.expected.{role}",
                          f"{role!r} is not an output of {manifest.op_id} (outputs: {', '.join(output_types)})")  # fmt: skip
        try:
            expected = case.build_expected(package.read_bytes, out_dtypes, inputs=arrays)
        except CaseFileError as exc:
            out.error(TEST_FILE, exc.json_path, exc.detail, case=case.name)
            continue
        for role in expected:
            dtype = out_dtypes.get(role)
            if dtype in float_dtypes and dtype not in case.tolerances:
                missing_tolerance.add(dtype)
        try:
            case_shapes = _expected_output_shapes(program, signature)
        except InputError as exc:  # e.g. an input rank given by an expression (max(ranks.data, 1))
            out.error(TEST_FILE, case.json_path, f"the case breaks the contract: {exc}", case=case.name)
            continue
        for role, want in expected.items():
            shape = case_shapes.get(role)
            if shape is not None and tuple(want.shape) != shape:
                out.error(TEST_FILE, f"{case.json_path}.expected.{role}",
                          f"expected values have shape {list(want.shape)}, the manifest gives the output "
                          f"shape {list(shape)} for these inputs", case=case.name)  # fmt: skip
        _check_case_variants(case, manifest, out)
    for dtype in sorted(missing_tolerance):
        out.warning(TEST_FILE, "tolerances", f"no tolerance for {dtype} outputs: they must match exactly "
                    f'(where that is meant, a copy, say so with "{dtype}": {{"rtol": 0, "atol": 0}})')
    checked = {role for case in test_file.cases for role in case.expected}
    for role in output_types:
        if role not in checked:  # `test` compares only the outputs a case lists: this one, never
            out.warning(TEST_FILE, "cases", f"no case lists output {role!r} under `expected`: `webgpu-kernels test` "
                                            "never checks what the kernel writes there")  # fmt: skip
    return test_file


def _check_inline_integers(case: casefile.TestCase, arrays: dict[str, Any], out: ProblemCollector) -> None:
    """An inline integer input the dtype cannot hold is clipped (as a generated one is), silently: a
    wrap-around case writing x = [2147483648, 1] for int32 ran with [2147483647, 1] and failed
    against its own wrapped expectation. An expected value of that kind is an error."""
    for role, spec in case.inputs.items():
        array = arrays.get(role)
        if array is None or array.dtype.kind not in "iu":
            continue
        for key, values in (("values", spec.get("values")), ("special.values", (spec.get("special") or {}).get("values"))):
            if values is None:
                continue
            try:
                inline_values(values, dtype_name(array.dtype), clip=False,
                              why="the input holds the nearest bound instead (inline inputs are clipped)")  # fmt: skip
            except ValueError as exc:
                out.warning(TEST_FILE, f"{case.json_path}.inputs.{role}.{key}", str(exc), case=case.name)


#: Refusals only the contract check makes (contract.check_call): a call it accepts never raises them.
_CONTRACT_ONLY_ERRORS = ("UnknownInputError", "DTypeError")
#: Classes broad enough that a case naming one should say which message it expects.
_BROAD_ERRORS = ("InputError", "SelectionError", "VariantRejectedError", "ExpressionError")


def _check_late_refusal(case: casefile.TestCase, refusal: casefile.Refusal, program: Program | None, signature: Any,
                        out: ProblemCollector) -> None:  # fmt: skip
    """A refused case whose call passed the contract check: refusals that cannot come any more."""
    where = f"{case.json_path}.refused"
    never = refusal.error in _CONTRACT_ONLY_ERRORS
    if refusal.error == "RankError":  # also from input ranks given by expressions, in the call's scope
        try:
            never = _default_call_scope(program, signature) is not None
        except InputError as exc:
            if not refusal.matches(exc):
                out.error(TEST_FILE, where, f"the call is {refusal.mismatch(exc)}", case=case.name)
            return
    if never:
        out.error(TEST_FILE, where, f"the contract accepts the call ({_call_text(signature)}), its attributes "
                                    f"and tunables, so it is never refused with {refusal.error}", case=case.name)  # fmt: skip
    elif refusal.message is None and refusal.error in _BROAD_ERRORS:
        out.warning(TEST_FILE, where, f"no 'message': a call refused with any {refusal.error} passes, whatever "
                                      "the reason (name the clause or argument)", case=case.name)  # fmt: skip


def _call_text(signature: Any) -> str:
    """The call as the contract saw it (``X (4,), bias (8,); float32``): an input a case left out by
    mistake shows by its absence."""
    shapes = ", ".join(f"{role} {shape}" for role, shape in signature.shapes)
    return f"{shapes}; {casefile.binding_label(signature.type_bindings())}"


def _check_case_variants(case: casefile.TestCase, manifest: Manifest, out: ProblemCollector) -> None:
    ids = [v.id for v in manifest.variants]
    for i, vid in enumerate(case.variants or ()):
        if vid not in ids:
            out.error(TEST_FILE, f"{case.json_path}.variants[{i}]", no_variant(vid, ids, parenthesised=True))


def _expected_output_shapes(program: Program | None, signature: Any) -> dict[str, tuple[int, ...]]:
    """Output shapes from the manifest's shape expressions, without a device (best effort)."""
    found = _default_call_scope(program, signature)
    return {} if found is None else {o.role: tuple(o.shape) for o in found[1]}


def _default_call_scope(program: Program | None, signature: Any) -> Any:
    """The call's (scope, outputs) under WebGPU's default limits, or None where that cannot be
    known without the real device (an expression reading a limit, say). An InputError is the
    case breaking the contract (input ranks given by expressions are checked here) and is raised."""
    if program is None:
        return None
    try:
        return program.call_scope(signature, _DEFAULT_DEVICE)
    except InputError:
        raise
    except KernelError:
        return None


#: WebGPU's default limits (camelCase), for evaluating output shapes without a device.
_DEFAULT_LIMITS = {
    "maxComputeInvocationsPerWorkgroup": 256, "maxComputeWorkgroupSizeX": 256, "maxComputeWorkgroupSizeY": 256,
    "maxComputeWorkgroupSizeZ": 64, "maxComputeWorkgroupsPerDimension": 65535,
    "maxStorageBufferBindingSize": 134217728, "maxBufferSize": 268435456, "maxComputeWorkgroupStorageSize": 16384,
    "maxStorageBuffersPerShaderStage": 8, "maxUniformBufferBindingSize": 65536,
}  # fmt: skip
_DEFAULT_DEVICE = DeviceInfo(limits=_DEFAULT_LIMITS, features=frozenset({"shader-f16"}))


def _check_bench_json(package: KernelPackage, manifest: Manifest | None, program: Program | None,
                      out: ProblemCollector) -> casefile.BenchFile | None:  # fmt: skip
    data = _load_case_data(package, BENCH_FILE, partial(case_format.check_bench_data, manifest=manifest), out,
                           "the package has no bench.json: `webgpu-kernels bench` and `tune` have no cases")
    if data is None:
        return None
    bench = casefile.checked_bench_file(data, file=BENCH_FILE)
    if manifest is None:
        return bench
    from .contract import check_call

    counts = {key: compiled for key in ("flops", "bytes")
              if (compiled := _bench_count(program, getattr(bench, key), key, out)) is not None}
    for case in bench.cases:
        try:
            instances = case.expand(manifest)
        except CaseFileError as exc:
            out.error(BENCH_FILE, exc.json_path, exc.detail, case=case.name)
            continue
        for inst in instances:
            try:
                signature = check_call(manifest, inst.inputs, case.attrs, case.tunables)
            except InputError as exc:
                advise_case(exc, BENCH_FILE)
                out.error(BENCH_FILE, case.json_path, f"the case breaks the contract ({inst.type_label()}): {exc}",
                          case=case.name, dtype=inst.type_label())  # fmt: skip
                continue
            try:
                found = _default_call_scope(program, signature)
            except InputError as exc:
                out.error(BENCH_FILE, case.json_path, f"the case breaks the contract ({inst.type_label()}): {exc}",
                          case=case.name, dtype=inst.type_label())  # fmt: skip
                continue
            if program is not None:
                _check_counts(program, counts, signature, found, inst, out)
    return bench


def _check_counts(program: Program, counts: dict[str, Any], signature: Any, found: Any, inst: casefile.BenchInstance,
                  out: ProblemCollector) -> None:  # fmt: skip
    """bench.json's ``flops`` and ``bytes`` (``counts``, compiled) evaluated for one case and dtype
    as bench evaluates them (Kernel.evaluate), with WebGPU's default limits: each must give a count.
    A count of 0 where the case's inputs hold data is warned of: bench reports a rate of 0 from it."""
    case, label = inst.case, inst.type_label()
    for key, count in counts.items():
        what, rate = casefile.BENCH_COUNTS[key]
        try:
            scope, _ = found or program.call_scope(signature, _DEFAULT_DEVICE)  # again: for its error
            value = as_count(count.evaluate(scope), count, what)
        except KernelError as exc:
            out.error(BENCH_FILE, key, f"for case {case.name!r} ({label}): {exc}", case=case.name, dtype=label)
            continue
        if value == 0 and any(math.prod(shape) for shape, _ in inst.inputs.values()):
            advice = ("count the bytes one call reads and writes" if key == "bytes" else
                      "count the floating-point operations of one call, or leave flops out for a kernel that computes none")  # fmt: skip
            out.warning(BENCH_FILE, key, f"{key} is 0 for case {case.name!r} ({label}), whose inputs hold data: bench "
                        f"would report 0 {rate}; {advice}", case=case.name, dtype=label)  # fmt: skip


def _bench_count(program: Program | None, source: str | int | None, key: str, out: ProblemCollector) -> Any:
    """bench.json's ``flops`` or ``bytes`` (``key``) compiled in the program's language, or None when
    it is absent, the manifest did not compile (its own errors are reported), or it does not compile
    (reported)."""
    if source is None or program is None:
        return None
    try:
        return program.compiler.compile(source, key)
    except ExpressionError as exc:
        out.error(BENCH_FILE, key, str(exc))
        return None


# --- isolation --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ValidateJob:
    path: str
    adapter: str | None
    gpu: bool


def _child_main(conn: Any, job: ValidateJob) -> None:
    from .package_tests import child_hooks

    def progress(kind: str, value: Any) -> None:
        conn.send(("progress", kind, value))
        child_hooks(kind, value.get("case") if isinstance(value, dict) else None)

    try:
        report = validate_package(job.path, adapter=job.adapter, gpu=job.gpu, progress=progress)
        conn.send(("done", report.as_dict()))
    except BaseException as exc:  # noqa: BLE001 - everything must reach the parent as data
        conn.send(("done", {"crash": f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}"}))
    finally:
        conn.close()


def validate_package_isolated(
    path: str | Path,
    *,
    adapter: str | None = None,
    gpu: bool = True,
    progress: Progress | None = None,
    timeout: float | None = None,
) -> ValidationReport:
    """:func:`validate_package` in a child process; a child that dies is reported as an error."""
    from .package_tests import run_in_child

    notify = progress or (lambda kind, value: None)
    result: dict[str, Any] = {}
    current: list[dict[str, str]] = []

    def handle(message: tuple[Any, ...]) -> None:
        if message[0] == "progress":
            if message[1] == "start":
                current[:] = [message[2]]
            notify(message[1], message[2])
        elif message[0] == "done":
            result.update(message[1])

    began = time.perf_counter()
    finished, ended = run_in_child(_child_main, ValidateJob(str(path), adapter, gpu), handle, timeout=timeout)
    seconds = time.perf_counter() - began  # the child's start and imports too: what a CI job waited
    if finished and "crash" not in result:
        report = ValidationReport.from_dict(result)
        report.isolated, report.seconds = True, seconds
        return report
    report = ValidationReport(path=str(Path(path).expanduser()), isolated=True, seconds=seconds)
    if finished:
        message = f"validation failed unexpectedly: {result['crash']}"
    else:
        run = current[0] if current else None
        where = (f" while compiling variant {run['variant']!r} ({run['dtype']}) for case {run['case']!r}"
                 if run else "")  # fmt: skip
        message = f"the validation process {ended}{where}"
    report.problems.append(Problem(ERROR, "", "", message, variant=(current[0]["variant"] if current else None),
                                   dtype=(current[0]["dtype"] if current else None)))  # fmt: skip
    return report

