"""The runner behind ``webgpu-kernels test``: every test.json case on every variant that accepts it.

For each case the runner builds the inputs from the package alone (casefile.py), asks the
kernel which variants' ``when`` clauses hold (``Kernel.explain``), runs each of those with
``variant=`` forced, and compares every expected output (NaN positions must agree, infinities
must be equal, finite values within the case's tolerance for the output dtype).

With isolation the GPU work runs in a child process (multiprocessing, "spawn"): wgpu-native
aborts the whole process on some invalid GPU work, and a package that needed
``trust_remote_code`` must not be able to take the command down with it. Results come back as
plain dicts, one message per run, so a child that dies still leaves the results it sent and
the case it was running; the crash is reported as a failure of that package, and every run it
had planned but not reached is kept (``PackageReport.not_run``) so that a report can count it.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import time
import traceback
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from .call_inputs import TensorMeta
from .case_data import MAX_CASE_TOTAL_ELEMENTS, numpy_dtype
from .case_format import TEST_FILE
from .casefile import CaseFileError, Refusal, TestCase, advise_case, case_name_matches, read_test_file
from .comparison import compare, elements_ok
from .contract import check_call
from .errors import DeviceLimitError, KernelError, no_variant
from .forks import quiet_child, sigint_held_for_spawn
from .kernel import Kernel
from .poisoned_buffers import fill_pooled_buffers, padding_poisoned_inputs
from .program import DeviceInfo, OutputSpec
from .run_results import ERROR, FAIL, NO_F16, PASS, SKIP, PackageReport, RunResult, cannot_hold
from .selection import accepted_with_f16

#: Test-only hook: a child process whose environment names a case here exits abruptly (as
#: wgpu-native does when it aborts) when it reaches that case. Only the isolated child reads it.
CRASH_HOOK_ENV = "WEBGPU_KERNELS_TEST_CRASH_AT"
#: Test-only hook: such a child stops for good at the first case it reaches (any value), so that a
#: --timeout test times out on any machine: a 1 s timeout had passed where the whole run took less.
STALL_HOOK_ENV = "WEBGPU_KERNELS_TEST_STALL"


def child_hooks(kind: str, case: Any) -> None:
    """The test-only hooks an isolated child runs at each progress event (CRASH_HOOK_ENV, STALL_HOOK_ENV)."""
    if kind != "start":
        return
    if os.environ.get(STALL_HOOK_ENV):
        time.sleep(3600)  # the parent's timeout stops it
    if case is not None and case == os.environ.get(CRASH_HOOK_ENV):
        os._exit(70)  # what an abort inside wgpu-native looks like from outside

#: Before each run every buffer the call will get from the device's pool is filled with one of these
#: bytes: pooled buffers keep what earlier calls left (often the right answer, from the variant tested
#: just before), so an element the kernel never writes must read as something that fails. 0xFF is NaN
#: in every float dtype and -1 (or the maximum) in integers; where the expected value would accept
#: it (an expected NaN), the run is repeated with 0x00 and then 0x55 (a finite non-zero number).
POISON_BYTES = (0xFF, 0x00, 0x55)
#: Progress events: ("adapter", label), ("plan", [{"case", "variant", "dtype"}, ...]: every run, in order, sent
#: before the first), ("total", n), ("start", {"case", "variant", "dtype"}), ("advance", 1).
Progress = Callable[[str, Any], None]


@dataclass(frozen=True)
class TestJob:
    """What a child process needs to run a package's tests: the package as the parent opened it
    (for a verified one, the very bytes it verified), and the options."""

    __test__ = False  # not a pytest class

    root: str
    origin: str
    needs_trust: bool
    adapter: str | None
    cases: tuple[str, ...] | None
    metadata: dict[str, Any] | None = field(default=None, hash=False, compare=False)
    verified: dict[str, bytes] = field(default_factory=dict, hash=False, compare=False)


# --- the runner -------------------------------------------------------------------------------------


def run_package_tests(
    kernel: Kernel,
    *,
    adapter: str | None = None,
    cases: Sequence[str] | None = None,
    progress: Progress | None = None,
    on_result: Callable[[RunResult], None] | None = None,
) -> PackageReport:
    """Run the package's test.json in this process. ``cases``: glob patterns of case names."""
    from .device import get_device

    notify = progress or (lambda kind, value: None)
    report = PackageReport(kernel=kernel.op_id, path=str(kernel.package.root), origin=kernel.package.origin,
                           isolated=False)  # fmt: skip

    def add(result: RunResult) -> None:
        report.results.append(result)
        if on_result is not None:
            on_result(result)

    if not kernel.package.has(TEST_FILE):
        report.error = f"the package has no {TEST_FILE}"
        return report
    try:
        test_file = read_test_file(kernel.package)
    except KernelError as exc:
        report.error = str(exc)
        return report
    device = get_device(adapter)
    report.adapter = device.adapter.label()
    notify("adapter", report.adapter)
    read = kernel.package.read_bytes
    manifest = kernel.manifest
    selected = [c for c in test_file.cases if case_name_matches(c.name, cases)]

    # Plan: build each case's inputs and find the variants that accept it (no GPU work yet). The
    # inputs are kept for the runs while they hold at most MAX_CASE_TOTAL_ELEMENTS in all, else
    # built again when their case runs: every case's at once let a file of many cases, each
    # within the case bound, take gigabytes.
    # One list in test.json's order, refusals among the others: the order the author wrote is the
    # order the cases run and are reported in (refusals had all come first).
    plans: list[_Planned | _PlannedRefusal] = []
    held = 0

    def keep(arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray] | None:
        nonlocal held
        size = sum(a.size for a in arrays.values())
        if held + size > MAX_CASE_TOTAL_ELEMENTS:
            return None
        held += size
        return arrays

    for case in selected:
        label = case.type_label(manifest)
        try:
            arrays = case.build_inputs(manifest, read)
            label = case.type_label(manifest, arrays)  # a data file's dtype is known once it is read
            if case.refused is not None:  # its call is judged whole, refusal included
                plans.append(_PlannedRefusal(case, case.refused, label, keep(arrays), _refusal_runs(case, kernel.variants)))
                continue
            explanation = kernel.explain({k: TensorMeta(a.shape, a.dtype.name) for k, a in arrays.items()},
                                         attrs=case.attrs or None, tunables=case.tunables or None, adapter=adapter)  # fmt: skip
        except KernelError as exc:  # the case's call is refused (its attrs, tunables, inputs): say where the case is
            advise_case(exc)
            add(RunResult(kernel.op_id, case.name, None, label, ERROR, message=_message(exc, case.json_path)))
            continue
        verdicts = {v.variant: v for v in explanation.verdicts}
        accepted = [v.variant for v in explanation.verdicts if v.accepted]
        accepted.sort(key=lambda vid: kernel.variants.index(vid))
        if not accepted and device.info.lacks_f16_for(a.dtype.name for a in arrays.values()):
            add(RunResult(kernel.op_id, case.name, None, label, SKIP, message=NO_F16))
            continue
        if case.variants is not None:
            for vid in case.variants:
                if vid not in verdicts:
                    add(RunResult(kernel.op_id, case.name, vid, label, ERROR,
                                  message=no_variant(vid, kernel.variants, parenthesised=True)))
                elif not verdicts[vid].accepted and vid in _accepted_with_f16(kernel, arrays, case, device.info):
                    add(RunResult(kernel.op_id, case.name, vid, label, SKIP, message=f"{NO_F16}, which this variant "
                                  "needs for the case"))  # fmt: skip
                elif not verdicts[vid].accepted:
                    add(RunResult(kernel.op_id, case.name, vid, label, FAIL,
                                  message=f"the case names this variant but it rejects the case: "
                                          f"{verdicts[vid].reason()}"))  # fmt: skip
            accepted = [v for v in accepted if v in case.variants]
        if not accepted and case.variants is None:
            reasons = "; ".join(f"{v.variant}: {v.reason()}" for v in explanation.verdicts)
            add(RunResult(kernel.op_id, case.name, None, label, FAIL, message=f"no variant accepts the case ({reasons})"))
            continue
        plans.append(_Planned(case, label, keep(arrays), accepted, tuple(explanation.outputs)))
    arrays = {}  # the last case's, when its plan does not keep them

    # Every run, before any: an isolated child that dies midway leaves the parent the list of those it never reached.
    notify("plan", [{"case": p.case.name, "variant": variant, "dtype": p.label} for p in plans for variant in p.runs])
    notify("total", sum(len(p.runs) for p in plans))
    for plan in plans:
        if isinstance(plan, _PlannedRefusal):
            _run_refusal(kernel, plan, adapter, device.info, add, notify)
            continue
        case, label, held_arrays, accepted, output_specs = plan
        try:
            arrays = held_arrays if held_arrays is not None else case.build_inputs(manifest, read)
            expected = case.build_expected(read, {o.role: o.dtype for o in output_specs}, inputs=arrays)
        except KernelError as exc:
            for vid in accepted:
                add(RunResult(kernel.op_id, case.name, vid, label, ERROR, message=_message(exc)))
                notify("advance", 1)
            continue
        for vid in accepted:
            notify("start", {"case": case.name, "variant": vid, "dtype": label})
            add(_run_one(kernel, case, label, vid, arrays, output_specs, expected, adapter))
            notify("advance", 1)
    # A case refused while planning (no variant accepts it, its attrs) was reported then: put in its place.
    report.results = in_case_order(report.results, [c.name for c in selected])
    return report


class _Planned(NamedTuple):
    """A case to run on the variants that accept it."""

    case: TestCase
    label: str
    arrays: dict[str, np.ndarray] | None  # None: built again when it runs
    accepted: list[str]
    outputs: tuple[OutputSpec, ...]

    @property
    def runs(self) -> list[str | None]:
        return list(self.accepted)


class _PlannedRefusal(NamedTuple):
    """A case whose call must be refused, judged on each variant it names (or on none)."""

    case: TestCase
    refusal: Refusal
    label: str
    arrays: dict[str, np.ndarray] | None
    runs: list[str | None]  # _refusal_runs


def _accepted_with_f16(kernel: Kernel, arrays: Mapping[str, np.ndarray], case: TestCase, info: DeviceInfo) -> frozenset[str]:
    """The variants that would accept the case's float16 call if this adapter, which lacks it, had
    shader-f16 (selection.accepted_with_f16). Empty where the adapter has it or no input is float16."""
    if not info.lacks_f16_for(a.dtype.name for a in arrays.values()):
        return frozenset()
    metas = {k: (a.shape, a.dtype.name) for k, a in arrays.items()}
    try:
        signature = check_call(kernel.manifest, metas, case.attrs or None, case.tunables or None)
    except KernelError:  # explain accepted these inputs, so this is not reached
        return frozenset()
    return accepted_with_f16(kernel.program, signature, info)


def _refusal_runs(case: TestCase, variants: Sequence[str]) -> list[str | None]:
    """The variants a refused case names, in the manifest's order (``variants``), as a case that runs
    is run (an unknown id last, for its refusal; the case's own order had decided); [None] for none."""
    if not case.variants:
        return [None]
    return sorted(case.variants, key=lambda v: variants.index(v) if v in variants else len(variants))


def _run_refusal(kernel: Kernel, plan: _PlannedRefusal, adapter: str | None, info: DeviceInfo,
                 add: Callable[[RunResult], None], notify: Callable[[str, Any], None]) -> None:  # fmt: skip
    case, label = plan.case, plan.label
    try:
        arrays = plan.arrays if plan.arrays is not None else case.build_inputs(kernel.manifest, kernel.package.read_bytes)
    except KernelError as exc:  # built once already: a data file changed since
        for variant in plan.runs:
            add(RunResult(kernel.op_id, case.name, variant, label, ERROR, refused=True,
                          message=_message(exc, case.json_path)))  # fmt: skip
            notify("advance", 1)
        return
    for variant in plan.runs:
        notify("start", {"case": case.name, "variant": variant or "-", "dtype": label})
        add(_judge_refusal(kernel, case, plan.refusal, label, variant, arrays, adapter, info))
        notify("advance", 1)


def in_case_order(results: list[RunResult], names: Sequence[str]) -> list[RunResult]:
    """``results`` in the order of their cases in ``names`` (test.json's), a case's own results in
    the order they came; a result of a case not named goes last."""
    place: dict[str, int] = {}
    for i, name in enumerate(names):
        place.setdefault(name, i)
    return sorted(results, key=lambda r: place.get(r.case, len(place)))


def _judge_refusal(kernel: Kernel, case: TestCase, refusal: Refusal, label: str, variant: str | None,
                   arrays: Mapping[str, np.ndarray], adapter: str | None, info: DeviceInfo) -> RunResult:  # fmt: skip
    """A case that must be refused: its call (on ``variant``, forced, when the case names variants)
    passes when it raises the error the case gives, and fails when it raises another or runs."""
    if variant is not None and variant not in kernel.variants:  # its SelectionError is the file's, not the call's
        return RunResult(kernel.op_id, case.name, variant, label, ERROR, refused=True,
                         message=no_variant(variant, kernel.variants, parenthesised=True))
    start = time.perf_counter()
    try:
        got = kernel({k: v.copy() for k, v in arrays.items()}, attrs=case.attrs or None, variant=variant,
                     tunables=case.tunables or None, adapter=adapter)  # fmt: skip
    except KernelError as exc:
        seconds = time.perf_counter() - start
        if refusal.matches(exc):
            return RunResult(kernel.op_id, case.name, variant, label, PASS, message=f"refused: {type(exc).__name__}: "
                             f"{exc}", seconds=seconds, refused=True)  # fmt: skip
        status, message = FAIL, refusal.mismatch(exc)
    else:
        seconds = time.perf_counter() - start
        shapes = ", ".join(f"{role} {list(np.shape(out))}" for role, out in got.items())
        status, message = FAIL, f"the call ran (outputs {shapes}); the case expects a refusal: {refusal.describe()}"
    if info.lacks_f16_for(a.dtype.name for a in arrays.values()):
        status, message = SKIP, f"{NO_F16} (the refusal may be the adapter's)"
    return RunResult(kernel.op_id, case.name, variant, label, status, message=message, seconds=seconds, refused=True)


def _run_one(kernel: Kernel, case: TestCase, label: str, variant: str, arrays: Mapping[str, np.ndarray],
             outputs: Sequence[OutputSpec], expected: Mapping[str, np.ndarray], adapter: str | None) -> RunResult:  # fmt: skip
    """One case on one variant, in buffers filled with POISON_BYTES[0]; again with the next byte
    while some expected element would accept the bytes the previous runs left there."""
    # The call's own checks (contract, device limits), once, before any buffer is filled or input
    # uploaded: a case past a limit is the call's DeviceLimitError (skipped, as bench and tune skip
    # it: the adapter's limit, not the package's fault), not the upload's GPU error.
    start = time.perf_counter()
    try:
        kernel.plan({k: TensorMeta(a.shape, a.dtype.name) for k, a in arrays.items()}, attrs=case.attrs or None,
                    variant=variant, tunables=case.tunables or None, adapter=adapter)  # fmt: skip
    except DeviceLimitError as exc:
        return RunResult(kernel.op_id, case.name, variant, label, SKIP, seconds=time.perf_counter() - start,
                         message=cannot_hold(exc))  # fmt: skip
    except KernelError as exc:
        return RunResult(kernel.op_id, case.name, variant, label, ERROR, message=_message(exc),
                         seconds=time.perf_counter() - start)  # fmt: skip
    undetected = {role: np.ones(want.shape, dtype=bool) for role, want in expected.items()}
    dtypes = {o.role: numpy_dtype(o.dtype) for o in outputs}
    left = list(POISON_BYTES)
    while True:
        byte = left.pop(0)
        result, suspects = _poisoned_run(kernel, case, label, variant, arrays, outputs, expected, adapter, byte)
        if result.failed:
            return _note_unwritten(kernel, case, variant, arrays, outputs, adapter, result, suspects, byte)
        if not left:
            return result
        for role, mask in undetected.items():
            if role in dtypes:  # (a role that is no output failed above)
                poison = np.frombuffer(bytes([byte]) * dtypes[role].itemsize, dtype=dtypes[role])[0]
                got = np.full(mask.shape, poison, dtype=dtypes[role])
                mask &= elements_ok(got, expected[role], case.tolerance(dtypes[role].name))
        if not any(mask.any() for mask in undetected.values()):
            return result


def _poisoned_run(kernel: Kernel, case: TestCase, label: str, variant: str, arrays: Mapping[str, np.ndarray],
                  outputs: Sequence[OutputSpec], expected: Mapping[str, np.ndarray], adapter: str | None,
                  byte: int) -> tuple[RunResult, dict[str, np.ndarray]]:  # fmt: skip
    """The run, and per failing output the elements (flat) that fail and hold the fill ``byte``."""
    start = time.perf_counter()
    try:
        got = _filled_call(kernel, case, variant, arrays, outputs, adapter, byte)
    except KernelError as exc:
        return RunResult(kernel.op_id, case.name, variant, label, ERROR, message=_message(exc),
                         seconds=time.perf_counter() - start), {}  # fmt: skip
    seconds = time.perf_counter() - start
    comparisons = []
    missing = []
    judged: dict[str, tuple[np.ndarray, Any]] = {}  # role -> the output and its tolerance
    for role, want in expected.items():
        if role not in got:
            missing.append(role)
            continue
        actual = np.asarray(got[role])
        judged[role] = actual, case.tolerance(np.dtype(actual.dtype).name)
        comparisons.append(compare(role, actual, want, judged[role][1]))
    abs_errors = [c.max_abs_error for c in comparisons if c.max_abs_error is not None]
    rel_errors = [c.max_rel_error for c in comparisons if c.max_rel_error is not None]
    failed = [c for c in comparisons if not c.ok]
    messages = [f"{c.output}: {c.message}" for c in failed]
    if missing:
        messages.append(f"the kernel returned no output {', '.join(map(repr, missing))}")
    # "failing": an unwritten element whose expected value the fill matches (NaN) is not counted
    suspects = {c.output: _unwritten(*judged[c.output], expected[c.output], byte) for c in failed}
    return RunResult(
        kernel.op_id, case.name, variant, label, FAIL if (failed or missing) else PASS,
        max_abs_error=max(abs_errors) if abs_errors else None, max_rel_error=max(rel_errors) if rel_errors else None,
        message="; ".join(messages), outputs=[c.as_dict() for c in comparisons], seconds=seconds,
    ), {role: mask for role, mask in suspects.items() if mask.any()}  # fmt: skip


def _filled_call(kernel: Kernel, case: TestCase, variant: str, arrays: Mapping[str, np.ndarray],
                 outputs: Sequence[OutputSpec], adapter: str | None, byte: int) -> Mapping[str, Any]:  # fmt: skip
    """The case's call on ``arrays`` uploaded with poisoned padding, its pooled buffers filled with
    ``byte`` first (the call planned already: _run_one)."""
    from .device import get_device

    device = get_device(adapter)
    # the plan _run_one built (a cache hit): its scratch buffers are pooled too, and filled as outputs are
    _, plan = kernel.plan({k: TensorMeta(a.shape, a.dtype.name) for k, a in arrays.items()}, attrs=case.attrs or None,
                          variant=variant, tunables=case.tunables or None, adapter=adapter)  # fmt: skip
    with device.lock:  # no other thread's call takes the filled buffers first (an RLock: the call takes it too)
        fill_pooled_buffers(device, arrays, outputs, byte, scratch=[nbytes for _, nbytes in plan.scratch])
        tensors = padding_poisoned_inputs(device, arrays)
        try:
            return kernel(dict(tensors), attrs=case.attrs or None, variant=variant, tunables=case.tunables or None,
                          adapter=adapter)  # fmt: skip
        finally:
            for tensor in tensors.values():
                tensor.release()


def _note_unwritten(kernel: Kernel, case: TestCase, variant: str, arrays: Mapping[str, np.ndarray],
                    outputs: Sequence[OutputSpec], adapter: str | None, result: RunResult,
                    suspects: Mapping[str, np.ndarray], byte: int) -> RunResult:  # fmt: skip
    """``result`` with a note on how many of its failing elements the kernel does not write: those
    that held the fill ``byte`` (``suspects``) and again hold another fill in a second run. A value
    the kernel computes can have the fill's bytes (-1 under 0xFF in an integer output, a data value
    a wrong index copied there): it stays the same under the other fill, and is not blamed on it."""
    if not suspects:
        return result
    other = next(b for b in POISON_BYTES if b != byte)
    try:
        got = _filled_call(kernel, case, variant, arrays, outputs, adapter, other)
    except KernelError:  # it ran once: without the second run, nothing is claimed
        return result
    unwritten = sum(int((mask & _holds(np.asarray(got[role]), other)).sum())
                    for role, mask in suspects.items() if role in got)  # fmt: skip
    if not unwritten:
        return result
    note = (f"({unwritten} failing element{'s' if unwritten > 1 else ''} still hold{'s' if unwritten == 1 else ''} "
            f"the 0x{byte:02X} bytes the buffers were filled with before the run: the kernel does not write them)")
    return replace(result, message="; ".join(m for m in (result.message, note) if m))


def _unwritten(actual: np.ndarray, tolerance: Any, want: np.ndarray, byte: int) -> np.ndarray:
    """Which failing elements of ``actual`` (flat) are made of the fill ``byte`` alone."""
    if not actual.size or actual.shape != want.shape:
        return np.zeros(0, dtype=bool)
    bad = ~elements_ok(actual.reshape(-1), want.reshape(-1), tolerance)
    return _holds(actual, byte) & bad


def _holds(actual: np.ndarray, byte: int) -> np.ndarray:
    """Which elements of ``actual`` (flat) are made of ``byte`` alone."""
    if not actual.size:
        return np.zeros(0, dtype=bool)
    raw = np.ascontiguousarray(actual).view(np.uint8).reshape(actual.size, -1)
    return np.asarray((raw == byte).all(axis=1))


def _message(exc: BaseException, case_path: str | None = None) -> str:
    """``exc`` located in test.json: at its own JSON path, or at ``case_path`` (the case whose
    call it refused)."""
    if isinstance(exc, CaseFileError):
        return f"{TEST_FILE} {exc.json_path or '(root)'}: {exc.detail}"
    return f"{TEST_FILE} {case_path}: {exc}" if case_path else str(exc)


# --- isolation --------------------------------------------------------------------------------------


def job_for(kernel: Kernel, *, adapter: str | None, cases: Sequence[str] | None) -> TestJob:
    p = kernel.package
    return TestJob(root=str(p.root), origin=p.origin, needs_trust=p.needs_trust, adapter=adapter,
                   cases=tuple(cases) if cases else None, metadata=None if p.metadata is None else dict(p.metadata),
                   verified=dict(p.verified))  # fmt: skip


def open_job_kernel(job: TestJob) -> Kernel:
    """The kernel of a job in the child: a verified package from the bytes the parent verified. It
    had opened the folder again, without the Hub's and embedded packages' require_metadata, so a
    file changed (or a metadata.json removed) after the parent opened it was what the child tested
   . An unverified package (an author's folder without metadata.json) is read from its
    folder, as in the parent."""
    from .package import KernelPackage, open_folder

    if job.metadata is not None:
        package = KernelPackage(root=Path(job.root), origin=job.origin, needs_trust=job.needs_trust,
                                metadata=job.metadata, verified=job.verified)  # fmt: skip
    else:
        package = open_folder(job.root, origin=job.origin, needs_trust=job.needs_trust, verify_digests=False)
    return Kernel(package)


def _child_main(conn: Any, job: TestJob) -> None:
    """Entry point of the child process: run the tests, sending each result as it comes."""
    def progress(kind: str, value: Any) -> None:
        conn.send(("progress", kind, value))
        child_hooks(kind, value.get("case") if isinstance(value, dict) else None)

    try:
        kernel = open_job_kernel(job)
        report = run_package_tests(kernel, adapter=job.adapter, cases=job.cases, progress=progress,
                                   on_result=lambda r: conn.send(("result", r.as_dict())))  # fmt: skip
        conn.send(("done", {"kernel": report.kernel, "error": report.error}))
    except KernelError as exc:
        conn.send(("done", {"kernel": None, "error": str(exc)}))
    except BaseException as exc:  # noqa: BLE001 - everything must reach the parent as data
        conn.send(("done", {"kernel": None, "error": f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}"}))
    finally:
        conn.close()


def describe_exit(code: int | None) -> str:
    if code is None:
        return "did not exit"
    if code < 0:
        try:
            return f"killed by signal {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit status {code}"


def run_in_child(
    target: Callable[..., None],
    payload: Any,
    handle: Callable[[tuple[Any, ...]], None],
    *,
    timeout: float | None = None,
) -> tuple[bool, str]:
    """Run ``target(conn, payload)`` in a spawned child, passing each message it sends to ``handle``.

    Returns (finished, how the child ended): finished is False when the child died (or timed out)
    before sending a ``("done", ...)`` message. ``timeout`` counts from the spawn (the child's
    imports included); a child stopped for it is said to have timed out, not to have been killed
    by a signal that a driver crash or the OOM killer would also send. The child ignores SIGINT:
    Ctrl-C interrupts the caller, which stops the child before the KeyboardInterrupt goes on.
    """
    context = multiprocessing.get_context("spawn")
    receiver, sender = context.Pipe(duplex=False)
    process = context.Process(target=quiet_child, args=(target, sender, payload), daemon=True)
    finished = timed_out = interrupted = False
    deadline = None if timeout is None else time.monotonic() + timeout
    try:
        # Ctrl-C reaches the child too (a terminal signals the whole process group): in its
        # imports it had printed a KeyboardInterrupt traceback under the parent's one line.
        with sigint_held_for_spawn():
            process.start()
        sender.close()
        while True:
            if deadline is not None and time.monotonic() > deadline:
                process.kill()
                timed_out = True
                break
            if receiver.poll(0.05):
                try:
                    message = receiver.recv()
                except (EOFError, OSError):
                    break
                if message[0] == "done":
                    finished = True
                handle(message)
                if finished:
                    break
            elif not process.is_alive():
                while receiver.poll(0):  # what it sent before dying
                    try:
                        message = receiver.recv()
                    except (EOFError, OSError):
                        break
                    finished = finished or message[0] == "done"
                    handle(message)
                break
    except BaseException:  # Ctrl-C: the parent says so; the child, deaf to it, must not outlive it
        interrupted = True
        raise
    finally:
        sender.close()
        if process.pid is not None:  # started
            if interrupted:
                process.kill()
            process.join(timeout=10)
            if process.is_alive():
                process.kill()
                process.join()
        receiver.close()
    if timed_out:
        return finished, f"ran past its {timeout:g} s timeout (--timeout) and was stopped"
    return finished, describe_exit(process.exitcode)


def run_package_tests_isolated(
    kernel: Kernel,
    *,
    adapter: str | None = None,
    cases: Sequence[str] | None = None,
    progress: Progress | None = None,
    timeout: float | None = None,
) -> PackageReport:
    """:func:`run_package_tests` in a child process; a child that dies fails the package, not the caller."""
    notify = progress or (lambda kind, value: None)
    job = job_for(kernel, adapter=adapter, cases=cases)
    report = PackageReport(kernel=kernel.op_id, path=job.root, origin=job.origin, isolated=True)
    current: list[dict[str, Any]] = []  # the run going on (its variant None: a refused case run without one)
    planned: list[dict[str, Any]] | None = None  # None: the child never got as far as sending its plan
    # test.json is read here once, before the child starts, for both the results' order and the runs a
    # child that died before its plan did not reach: it had been read twice after the child ended, so
    # an author's file saved in between could order the results by one version and list the runs not
    # run from another. The child's own read is authoritative for what ran: its results and its plan
    # (a verified package's bytes are the ones read here, sent with the job; an author's folder is
    # read from disk again, and a result of a case this read lacks goes last, never dropped).
    selected = selected_cases(kernel, cases)
    spawned = run_began = time.perf_counter()

    def handle(message: tuple[Any, ...]) -> None:
        nonlocal planned, run_began
        kind = message[0]
        if kind == "progress":
            if message[1] == "adapter":  # sent before any case runs: known even if the child dies
                report.adapter = message[2]
            if message[1] == "plan":
                planned = message[2]
            if message[1] == "start":
                # A refused case run with no variant is "-" in the event (the progress bar's text), None
                # in its result and the plan: "-" had made a dead child's run an error and a run not reached.
                current[:] = [{**message[2], "variant": None if message[2]["variant"] == "-" else message[2]["variant"]}]
                run_began = time.perf_counter()
            notify(message[1], message[2])
        elif kind == "result":
            report.results.append(RunResult.from_dict(message[1]))
            # That run is over: a child dying before the next "start" (building the next case) had
            # been reported as dying "while running" it, a run that had passed.
            if current and (current[0]["case"], current[0]["variant"]) == (message[1]["case"], message[1]["variant"]):
                current.clear()
        elif kind == "done":
            report.error = message[1]["error"]

    finished, ended = run_in_child(_child_main, job, handle, timeout=timeout)
    now = time.perf_counter()
    report.seconds = now - spawned
    # The child sends a case refused while planning before any run: its place is test.json's, as in process.
    report.results = in_case_order(report.results, [c.name for c in selected])
    if not finished:
        run = current[0] if current else None
        on = f" on variant {run['variant']!r}" if run and run["variant"] is not None else ""
        where = f" while running case {run['case']!r}{on} ({run['dtype']})" if run else ""
        report.error = f"the test process {ended}{where}"
        if run and not any(r.case == run["case"] and r.variant == run["variant"] for r in report.results):
            report.results.append(RunResult(kernel.op_id, run["case"], run["variant"], run["dtype"], ERROR,
                                            message=f"the test process {ended} during this run",
                                            seconds=now - run_began))  # fmt: skip
        report.not_run = unreached_runs(kernel, report, planned, selected)
    return report


def selected_cases(kernel: Kernel, cases: Sequence[str] | None) -> list[TestCase]:
    """The selected test.json cases in its order ([] where it cannot be read: the child says why)."""
    if not kernel.package.has(TEST_FILE):
        return []
    try:
        return [c for c in read_test_file(kernel.package).cases if case_name_matches(c.name, cases)]
    except KernelError:  # an unreadable test.json is its own error, not runs to list
        return []


def unreached_runs(kernel: Kernel, report: PackageReport, planned: Sequence[Mapping[str, Any]] | None,
                   selected: Sequence[TestCase]) -> list[RunResult]:  # fmt: skip
    """The runs of ``planned`` (the child's plan) that have no result in ``report``, as errors
    saying why (``report.error``). A child that died before sending its plan (opening the device)
    leaves the runs of ``selected`` (:func:`selected_cases`, read by the caller): on the variants a
    case names, else as the case alone, since which variants accept it is the device's to say and
    this process opens none."""
    if planned is None:
        planned = [{"case": case.name, "variant": variant, "dtype": case.type_label(kernel.manifest)}
                   for case in selected for variant in case.variants or (None,)]  # fmt: skip
    reported = Counter((r.case, r.variant) for r in report.results)
    missing = []
    for run in planned:
        key = (run["case"], run["variant"])
        if reported[key]:
            reported[key] -= 1
        else:
            missing.append(RunResult(kernel.op_id, run["case"], run["variant"], run["dtype"], ERROR,
                                     message=f"not run: {report.error}, before reaching this run"))  # fmt: skip
    return missing
