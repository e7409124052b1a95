"""`webgpu-kernels bench`: the benchmark command.

bench runs bench.json cases (or given shapes) with benchmark.py's honest timing, against a copy
kernel run the same way and the device's datasheet peak, and optionally against peers (torch on
CUDA, ONNX Runtime's WebGPU provider), each in its own process. Its case selection, inputs,
output check and options serve `tune` too (cli_tune.py).
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import click
import numpy as np
from rich.progress import Progress
from rich.text import Text

from . import bench_report, peers, slow_states, tuning
from .benchmark import (
    bench_count,
    bench_kernel,
    host_per_call,
    known_peak,
    numpy_round_trip,
    quick_timing,
    random_array,
    warm_up,
)  # fmt: skip
from .case_data import numpy_dtype
from .case_format import BENCH_FILE
from .casefile import advise_case, case_name_matches, parse_bench_file
from .cli import FiniteFloatRange, adapter_option, adapter_request_of, onnx_op_option, output_file
from .command_output import echo_json, is_live, jsonable, safe_console
from .comparison import Agreement, held_to
from .contract import check_call, shape_text
from .device import default_device, env_count, get_device
from .errors import DeviceLimitError, InputError, KernelError, SelectionError, TuningFileWarning, names_meant
from .kernel import Kernel
from .kernel_arguments import (
    DTYPE_ALIASES,
    GENERATE_OPTION,
    assignments_callback,
    dtypes_callback,
    inputs_callback,
    resolve_kernel,
    trust_option,
    with_generators,
)
from .package import embedded_ids
from .references import (
    ReferenceShapeMismatch,
    ReferenceUnavailable,
    no_numpy_reference,
    numpy_reference,
    onnxruntime_for,
)
from .run_results import NO_F16, cannot_hold


def no_cases_reason(kernels: list[Kernel], names: tuple[str, ...], tags: tuple[str, ...], dtypes: tuple[str, ...],
              what: str) -> str:  # fmt: skip
    """Why there is nothing to ``what``: no package has a bench.json, or the filters left nothing."""
    without = [k.op_id for k in kernels if not k.package.has(BENCH_FILE)]
    if len(without) == len(kernels):
        # bench's and tune's option (tune's since 3bba5b5: its message had still offered only a bench.json)
        return f"{', '.join(without)}: no {BENCH_FILE} in the package (nothing to {what}: give shapes with -i ROLE=SHAPE:DTYPE, or add one)"
    if not (names or tags or dtypes):
        return f"the {BENCH_FILE} cases expand to nothing (nothing to {what})"
    return f"no {BENCH_FILE} case matches --case/--tag/--dtype (nothing to {what})"


def bench_cases(kernel: Kernel, names: tuple[str, ...], tags: tuple[str, ...], dtypes: tuple[str, ...],
           inputs: dict[str, Any], attrs: dict[str, Any] | None = None) -> list[dict[str, Any]]:  # fmt: skip
    """The cases to run, each with every input's shape and dtype resolved. bench.json is read the
    way `validate` reads it: a malformed file stops the command with its file and JSON path."""
    bench = (parse_bench_file(kernel.package.read_json(BENCH_FILE), manifest=kernel.manifest)
             if kernel.package.has(BENCH_FILE) else None)  # fmt: skip
    # flops, bytes and tolerances apply to -i shapes too: they are the op's, not a case's
    op_wide = {"flops": bench.flops if bench is not None else None, "bytes": bench.bytes if bench is not None else None,
               "tolerances": {d: t.as_dict() for d, t in (bench.tolerances if bench is not None else {}).items()}}
    if inputs:
        # Shapes the contract refuses, the device cannot hold or no variant takes are the caller's
        # mistake (exit 2; a --variant that refuses them is an error row). Any other failure is the
        # package's (a template that does not render or compile, a uniform value its layout cannot
        # hold, an expression that fails, the GPU refusing what it built): an error row (exit 1), as
        # for a bench.json case (each had exited 2). Then the type variables they bind, as a
        # bench.json case has them (tune's labels and tolerance).
        try:
            kernel.plan({role: spec.meta() for role, spec in inputs.items()}, attrs=attrs or None)
        except (InputError, SelectionError):
            raise
        except KernelError:
            pass
        metas = {role: (spec.shape, spec.dtype) for role, spec in inputs.items()}
        types = check_call(kernel.manifest, metas, attrs or None, None).type_bindings()
        return [{"name": "custom", "tags": [], "attrs": dict(attrs or {}), "tunables": {}, "types": types, **op_wide,
                 "inputs": {k: {"shape": v.shape, "dtype": v.dtype, **_generate(v.generate)} for k, v in inputs.items()}}]  # fmt: skip
    if bench is None:
        return []
    cases: list[dict[str, Any]] = [
        {"name": case.name, "tags": list(case.tags), "attrs": case.attrs, "tunables": case.tunables, "types": inst.types,
         **op_wide, "tolerances": {d: t.as_dict() for d, t in case.tolerances.items()}, "inputs": {role: {"shape": shape, "dtype": dtype, **_generate(case.inputs[role]["generate"])}
                                    for role, (shape, dtype) in inst.inputs.items()}}
        for case in bench.cases for inst in case.expand(kernel.manifest)
    ]  # fmt: skip
    cases = [c for c in cases if case_name_matches(c["name"], names)]
    if tags:
        cases = [c for c in cases if set(tags) & set(c["tags"])]
    if dtypes:
        wanted = {DTYPE_ALIASES[d.strip().lower()] for d in dtypes}  # f16 as -i takes it (checked by dtypes_callback)
        cases = [c for c in cases if set(c["types"].values()) & wanted]  # a gather's (float32, int64): f32
    return cases


def skip_reason(kernel: Kernel, case: dict[str, Any], variant: str | None = None) -> str | None:
    """Why a case is skipped on the command's device (``variant``: bench's --variant), or None:
    float16 data that no variant accepts on an adapter without shader-f16, which `test` skips
    (package_tests.py), or a call past the device's limits (a binding larger than lavapipe's
    128 MiB), which `validate` warns of as the adapter's. Both had been error rows, and a CI job on
    such an adapter failed where nothing was wrong. Decided from shapes alone: nothing is allocated."""
    # (-i shapes that no variant takes or the device cannot hold were refused before, exit 2)
    metas = {role: (spec["shape"], spec["dtype"]) for role, spec in case["inputs"].items()}
    attrs, tunables = case["attrs"] or None, case["tunables"] or None
    dtypes = [numpy_dtype(spec["dtype"]).name for spec in case["inputs"].values()]
    if get_device().info.lacks_f16_for(dtypes):
        try:
            explanation = kernel.explain(metas, attrs=attrs, tunables=tunables)
        except KernelError:  # a call refused for another reason: its error row says which
            return None
        if not any(v.accepted for v in explanation.verdicts):
            return NO_F16
    try:
        kernel.plan(metas, attrs=attrs, variant=variant, tunables=tunables)  # the device's checks, before any buffer
    except DeviceLimitError as exc:  # its split hint is for a caller's own call, not for a bench case
        return cannot_hold(exc)
    except KernelError:  # the case's own error: its error row says it
        return None
    return None


def _skipped_row(kernel: Kernel, case: dict[str, Any], why: str) -> dict[str, Any]:
    """A skipped case's row: which case, and why; no figure (the plot and the peers leave it out)."""
    return {**_row_head(kernel, case), "skipped": why}


def _row_head(kernel: Kernel, case: dict[str, Any]) -> dict[str, Any]:
    """``attrs``: the attributes given (the peers are handed these); ``effective_attrs``: all of
    them as the call has them, defaults filled in (a row of a call the contract refuses has none)."""
    head = {"kernel": kernel.op_id, "case": case["name"], "tags": case["tags"],
            "dtype": dtypes_label(str(numpy_dtype(s["dtype"])) for s in case["inputs"].values()),
            "shapes": {k: list(s["shape"]) for k, s in case["inputs"].items()}, "attrs": case["attrs"],
            **({"tolerances": case["tolerances"]} if case.get("tolerances") else {})}  # fmt: skip
    metas = {role: (tuple(spec["shape"]), spec["dtype"]) for role, spec in case["inputs"].items()}
    try:
        head["effective_attrs"] = check_call(kernel.manifest, metas, case["attrs"] or None, None).attr_map()
    except KernelError:  # the row's error says why
        pass
    return head


def _generate(generate: dict[str, Any] | None) -> dict[str, Any]:
    """A bench.json input's ``generate``, as the key it keeps in a case's inputs (none: {})."""
    return {"generate": generate} if generate else {}


def case_arrays(case: dict[str, Any], seed: int) -> dict[str, np.ndarray]:
    """The case's random inputs; an input the device could not hold is refused before the host
    allocates it (a bench.json shape of 10^12 elements had ended in NumPy's raw MemoryError)."""
    limit = get_device().limits["max-buffer-size"]  # the command's --adapter (default_device)
    for name, spec in case["inputs"].items():
        nbytes = math.prod(spec["shape"]) * numpy_dtype(spec["dtype"]).itemsize
        if nbytes > limit:
            raise DeviceLimitError(name, f"at most {limit} bytes (the device's maxBufferSize)",
                                   f"shape {shape_text(spec['shape'])} of {spec['dtype']}, {nbytes} bytes")  # fmt: skip
    rng = np.random.default_rng(seed)
    return {name: random_array(tuple(spec["shape"]), spec["dtype"], rng, spec.get("generate"))
            for name, spec in case["inputs"].items()}  # fmt: skip


def _checker(kernel: Kernel, arrays: dict[str, np.ndarray], attrs: dict[str, Any], held: Any,
             uncompared: list[str], unavailable: dict[str, str], onnx_op: str | None = None) -> Any:  # fmt: skip
    """The check of an output against the op's registered NumPy reference, else onnxruntime's CPU
    provider as `run` uses it (``onnx_op``: the ONNX op compared, as `run --onnx-op` names it),
    by ``held``, the case's rule (:func:`held_to`: the tolerance of its dtypes, or bench.json's
    ``tolerances`` for an output of a dtype they name): one rule for ours, tuned and every peer's figure. The
    check returns None where no reference has the op, and ``unavailable`` then says why, by
    reference, in `run`'s words. The outputs the reference computed no value for, so left
    unchecked, are added to ``uncompared``."""
    reference = numpy_reference(kernel.op_id) if onnx_op is None else None
    if reference is None:
        unavailable["numpy"] = no_numpy_reference(kernel.op_id)
    full_attrs = {**kernel.manifest.attributes, **attrs}
    # Computed at the first check (retries and the tuned run reuse it); onnxruntime's per set of
    # outputs, since a variant may leave an optional output out and the node then lists fewer.
    expected: dict[frozenset[str] | None, dict[str, np.ndarray] | ReferenceUnavailable] = {}

    def onnxruntime_expected(outputs: dict[str, np.ndarray]) -> dict[str, np.ndarray] | ReferenceUnavailable:
        try:
            return onnxruntime_for(kernel.manifest, arrays, full_attrs, outputs, op_id=onnx_op)
        except ReferenceUnavailable as why:  # a shape mismatch among them: WRONG, as `run` says
            if not isinstance(why, ReferenceShapeMismatch):
                unavailable["onnxruntime"] = str(why)
            return why

    def check(outputs: dict[str, np.ndarray]) -> Agreement | None:
        key = None if reference is not None else frozenset(outputs)
        if key not in expected:
            expected[key] = reference(arrays, full_attrs) if reference is not None else onnxruntime_expected(outputs)
        found = expected[key]
        if isinstance(found, ReferenceShapeMismatch):
            return Agreement(float("inf"), False)
        if isinstance(found, ReferenceUnavailable):
            return None
        if len(found) < len(outputs):  # onnxruntime's optional outputs that
            # its release computes no value for (before 1.30): said, as `run` says them, not passed silently
            uncompared.extend(n for n in outputs if n not in found and n not in uncompared)
        # a reference that computed none of them checked nothing: no figure, as where none has the op
        return held(outputs, found) if found else None

    return check


def dtypes_label(dtypes: Iterable[str]) -> str:
    return ",".join(sorted(set(dtypes)))


#: bench and tune: the seed of the random inputs.
SEED_OPTION = click.option("--seed", type=click.IntRange(min=0), default=0, show_default=True,
                           help="Seed of the random inputs.")  # fmt: skip


def _plottable(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """--plot needs matplotlib (the ``plot`` extra): said now, not after a run of many minutes."""
    if value is not None:
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            raise click.BadParameter("needs matplotlib: pip install 'webgpu-kernels[plot]'", ctx=ctx, param=param) from None
        if value == "-":  # --json's stdout; a PNG has nowhere to go there (it had been written to ./-.png)
            raise click.BadParameter("a PNG file's path ('-', stdout, is for --json only)", ctx=ctx, param=param)
        if Path(value).suffix.lower() != ".png":  # matplotlib picks the format by it: `x.txt` crashed after the
            # run (no such format), and `x` was written as x.png while bench said "plot: x"
            raise click.BadParameter(f"{value!r}: a PNG file's path, ending in .png", ctx=ctx, param=param)
    return output_file(ctx, param, value)


#: bench and tune: a smoke run (benchmark.quick_timing), its warm-up 0 unless --warm-up is given.
QUICK_OPTION = click.option("--quick", is_flag=True,
                            help="A smoke run (CI on a CPU adapter): every timing two short batches, no wait for steady "
                                 "figures, no warm-up unless --warm-up is given. Outputs are still checked; figures are "
                                 "rough.")  # fmt: skip


def quick_warm_up(ctx: click.Context, quick: bool, warm_up_s: float) -> float:
    """The warm-up a run makes: none under --quick, unless --warm-up was given."""
    given = ctx.get_parameter_source("warm_up_s") not in (click.core.ParameterSource.DEFAULT, None)
    return 0.0 if quick and not given else warm_up_s


#: bench and tune: seconds of GPU load before their first timing (benchmark.warm_up).
WARM_UP_OPTION = click.option("--warm-up", "warm_up_s", type=FiniteFloatRange(min=0), default=2.0, show_default=True,
              help="Seconds of back-to-back copies before the first timing (ours, and torch's under bench --compare), "
                                   "so the GPU's clocks are up.")  # fmt: skip


def given_shapes_option(verb: str) -> Callable[[Any], Any]:
    """bench's and tune's -i (shapes of one kernel's inputs instead of its bench.json cases),
    --generate (how those inputs are drawn) and --attr (the attributes of their call)."""
    def options(fn: Any) -> Any:
        fn = click.option("--attr", "attrs", multiple=True, metavar="NAME=VALUE", callback=assignments_callback,
                          help="An attribute of the -i shapes' call (value parsed as JSON, else a string). "
                               "Repeatable.")(fn)  # fmt: skip
        fn = GENERATE_OPTION(fn)
        return click.option("--input", "-i", "inputs", multiple=True, metavar="NAME=DIMS:DTYPE",
                            callback=inputs_callback, help=f"{verb} this shape instead of bench.json cases (one kernel).")(fn)  # fmt: skip
    return options


def case_selection_options(fn: Any) -> Any:
    """bench's and tune's --case, --tag and --dtype: which bench.json cases run."""
    fn = click.option("--dtype", "dtypes", multiple=True, callback=dtypes_callback,
                      help="Only cases of this dtype (float32/f32, float16/f16). Repeatable.")(fn)  # fmt: skip
    fn = click.option("--tag", "tags", multiple=True, help="Only cases with this tag (large, small, model:...). Repeatable.")(fn)
    return click.option("--case", "names", multiple=True,
                        help="Only cases whose name contains this or matches it as a glob. Repeatable.")(fn)  # fmt: skip


def check_given_shapes(kernels: tuple[str, ...], inputs: dict[str, Any], generators: dict[str, Any],
                       attrs: dict[str, Any], names: tuple[str, ...], tags: tuple[str, ...],
                       dtypes: tuple[str, ...]) -> dict[str, Any]:  # fmt: skip
    """-i's usage errors, said before anything is loaded or timed; the -i inputs with --generate's
    distributions."""
    if generators and not inputs:
        raise click.UsageError("--generate draws -i/--input shapes: bench.json cases give their own `generate`")
    if attrs and not inputs:
        raise click.UsageError("--attr sets the -i/--input shapes' attributes: bench.json cases give their own `attrs`")
    inputs = with_generators(inputs, generators)
    if inputs and len(kernels) != 1:
        raise click.UsageError("-i/--input gives one kernel's shapes: name exactly one KERNEL with it")
    if inputs and (names or tags or dtypes):
        raise click.UsageError("-i/--input replaces bench.json's cases: --case, --tag and --dtype do not apply")
    return inputs


@click.command("bench")
@trust_option
@adapter_option
@click.argument("kernels", nargs=-1)
@given_shapes_option("Benchmark")
@case_selection_options
@click.option("--variant", default=None, metavar="ID",
              help="Time this variant on every case (a case it does not accept is an error row); "
                   "without it, the manifest's selection and the tuned choice.")  # fmt: skip
@click.option("--onnx-op", metavar="DOMAIN.NAME", default=None, callback=onnx_op_option,
              help="Check the outputs against this ONNX op in onnxruntime's CPU provider, as `run --onnx-op` "
                   "does: the op one package mirrors under an id of its own.")  # fmt: skip
@click.option("--compare", is_flag=True, help="Also run torch (eager, torch.compile) and ONNX Runtime WebGPU.")
@click.option("--compile-tag", default="large", show_default=True,
              help="torch.compile only cases with this tag (compiles take seconds each); 'all' for every case.")
@click.option("--host/--no-host", default=True, show_default=True,
              help="Also measure host cost per call and NumPy round trips.")  # fmt: skip
@click.option("--calls", type=click.IntRange(min=1), default=10_000, show_default=True,
              help="Calls timed for the per-call host cost.")  # fmt: skip
@WARM_UP_OPTION
@QUICK_OPTION
@SEED_OPTION
@click.option("--json", "json_path", type=click.Path(dir_okay=False), default=None, callback=output_file,
              help="Write all results as JSON to this file ('-' for stdout).")  # fmt: skip
@click.option("--plot", "plot_path", type=click.Path(dir_okay=False), default=None, callback=_plottable,
              help="Save bandwidth against size, with the rooflines, to this PNG.")  # fmt: skip
@click.pass_context
def bench_cmd(ctx: click.Context, kernels: tuple[str, ...], inputs: dict[str, Any], generators: dict[str, Any],
              attrs: dict[str, Any], names: tuple[str, ...],
              tags: tuple[str, ...], dtypes: tuple[str, ...], variant: str | None, onnx_op: str | None,
              compare: bool, compile_tag: str,
              host: bool, calls: int, warm_up_s: float, quick: bool, seed: int, json_path: str | None,
              plot_path: str | None) -> None:  # fmt: skip
    """Time kernels on the GPU: effective TB/s, share of the device's peak and of a copy kernel,
    and TFLOP/s where the package's bench.json gives a `flops` count.

    GPU time per call comes from timestamps around spans of 50 back-to-back calls in one compute
    pass, as the engine records a chain of calls (fewer calls for one slower than 1 ms, as on a CPU
    adapter; docs/performance.md). Bytes are the inputs read and the outputs written, once each (a
    multi-pass kernel's intermediate buffers not counted), or the package's own count where its
    bench.json gives `bytes` (a kernel that reads part of an input, as a gather does).
    """
    console = safe_console(stderr=json_path == "-")  # stdout carries only the JSON then
    if quick and compare:  # rough figures beside the peers' steady ones would mislead
        raise click.UsageError("--quick times roughly and --compare compares figures: give one of them")
    warm_up_s = quick_warm_up(ctx, quick, warm_up_s)
    # Checked before any timing: a bad value should not cost a whole run first.
    peer_timeout_s = env_count(PEER_TIMEOUT_ENV, 420) if compare else 0
    device = ctx.with_resource(default_device(adapter_request_of(ctx)))  # every timing and call on --adapter's device
    peak = known_peak(device.adapter.name)
    inputs = check_given_shapes(kernels, inputs, generators, attrs, names, tags, dtypes)
    loaded = [resolve_kernel(k) for k in (kernels or embedded_ids())]
    if onnx_op is not None and len(loaded) != 1:
        raise click.BadParameter(f"--onnx-op names the ONNX op of one package, and {len(loaded)} kernels are "
                                 "benched: give one KERNEL", ctx=ctx, param_hint="'--onnx-op'")  # fmt: skip
    for kernel in loaded if variant is not None else []:  # `--variant ""` too: it had failed every case (exit 1)
        if variant not in kernel.variants:
            raise click.BadParameter(f"{kernel.op_id} has no variant {variant!r}{names_meant([str(variant)], kernel.variants)} "
                                     f"(its variants: {', '.join(kernel.variants)})", ctx=ctx, param_hint="'--variant'")  # fmt: skip
    plan = [(k, c) for k in loaded for c in bench_cases(k, names, tags, dtypes, inputs, attrs)]
    if not plan:
        raise click.UsageError(no_cases_reason(loaded, names, tags, dtypes, "time"))
    # After the caller's arguments are checked: a mistyped KERNEL had printed this line above its error.
    console.print(f"adapter: {device.adapter.label()}; datasheet peak: {f'{peak / 1e12:.2f} TB/s' if peak else 'unknown'}")
    for kernel in loaded if not inputs else []:  # one named among others had been left out without a word
        if not kernel.package.has(BENCH_FILE):
            safe_console(stderr=True).print(Text(f"{kernel.op_id}: no {BENCH_FILE} in the package, so nothing of it is "
                                             "timed (give shapes with -i ROLE=SHAPE:DTYPE)", style="yellow"))  # fmt: skip
    # The caller's own mistakes are usage errors (exit 2), said before any timing; a bench.json
    # case the kernel refuses stays a failed row (exit 1), one past the device's limits a skip (skip_reason).
    # Off: the file is not read at all (a load marks its problem as said, and a library call later
    # in the process, with tuning on again, had then read the damaged file without a word).
    cache = None if tuning.disabled() else load_tuning_cache(device)  # also refuses a bad WEBGPU_KERNELS_NO_TUNING
    if cache is not None and cache.problem is not None:  # the tuned column would be missing without a word
        safe_console(stderr=True).print(Text(cache.problem.message(cache.path), style="yellow"), soft_wrap=True)
    run = _BenchRun(device, cache, seed, variant, onnx_op=onnx_op, quick=quick)
    rows: list[dict[str, Any]] = []
    results: dict[str, Any] = {"adapter": device.adapter.label(), "peak_tbps": peak / 1e12 if peak else None,
                               "cases": rows, "host": []}  # fmt: skip

    unsaved: list[OSError] = []  # the last write of the --json file, if it failed

    def save() -> None:
        # Written after every phase and on Ctrl-C, so a run cut short still leaves its figures.
        if json_path and json_path != "-":  # as stdout gets it: strict JSON ("inf" as a string)
            try:
                Path(json_path).write_text(json.dumps(jsonable(results), indent=1, allow_nan=False), "utf-8")
            except OSError as exc:  # a full disk: said after the table (the traceback had lost the figures)
                unsaved[:] = [exc]
            else:
                unsaved.clear()

    try:
        with quick_timing(quick):
            _time_cases(run, loaded, plan, results, console, host=host, calls=calls, warm_up_s=warm_up_s)
        save()
        if host:
            # Measured again after the GPU timing, for the record (see _time_cases).
            for row, again in zip(results["host"], _host_per_call(loaded, calls, seed)):
                if "median_s" in again:
                    row["after_gpu_timing_median_s"] = again["median_s"]
            save()
        if compare:
            _compare(rows, compile_tag, console, save, peer_timeout_s, warm_up_s, kernels=loaded, onnx_op=onnx_op)
    except KeyboardInterrupt:  # what was measured is kept, in the file or on stdout
        save()
        where = f"; they are in {json_path}" if json_path and json_path != "-" and not unsaved else ""
        console.print(Text(f"interrupted with {len(rows)} of {len(plan)} cases done{where}", style="red"))
        if json_path == "-":
            echo_json(results)
        ctx.exit(130)
    host_rows = results["host"]
    bench_report.print_rows(console, rows, host_rows)
    if json_path == "-":
        echo_json(results)
    if plot_path:
        try:
            bench_report.plot(rows, peak, plot_path)
        except OSError as exc:
            unsaved.append(exc)
        else:
            console.print(f"plot: {plot_path}")
    skipped = [r for r in rows if "skipped" in r]
    if skipped:  # apart from the failures: a skip is the adapter's, and fails nothing (as in `test`)
        for why in dict.fromkeys(r["skipped"] for r in skipped):
            these = [f"{r['kernel'].split('.')[-1]} {r['case']} {r['dtype']}" for r in skipped if r["skipped"] == why]
            console.print(Text(f"{len(these)} of {len(rows)} cases skipped ({why}): {', '.join(these)}", style="yellow"))
    failed = [r for r in rows if _failed(r)]
    if failed:  # a CI job must see it: exit status 1, as `test` and `validate` do
        names_ = ", ".join(f"{r['kernel'].split('.')[-1]} {r['case']} {r['dtype']}" for r in failed)
        console.print(Text(f"{len(failed)} of {len(rows)} cases failed (error or WRONG output): {names_}", style="red"))
    if unsaved:  # exit 1, as test's and validate's --junit file that cannot be written after the run
        raise click.FileError(unsaved[0].filename or json_path or plot_path or "", hint=unsaved[0].strerror or str(unsaved[0]))
    if failed:
        ctx.exit(1)


def load_tuning_cache(device: Any) -> tuning.TuningCache:
    """The adapter's tuning cache. A problem with its file (``cache.problem``) is the command's to
    say, in its own words: Python's warning text adds a source line of this package."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TuningFileWarning)
        return tuning.cache_for(device.adapter.name, device.adapter.backend)


def _failed(row: dict[str, Any]) -> bool:
    """Whether a case failed: an error or a WRONG output, of the default or of the tuned choice (what
    calls of the class run: one that errors had been said in red and exited 0)."""
    tuned = row.get("tuned", {})
    return "error" in row or row.get("error_ok") is False or "error" in tuned or tuned.get("error_ok") is False


@dataclass
class _BenchRun:
    """What every case of one bench run is timed with: the device, its stored tuning results (None
    with tuning off), the seed of the random inputs, the --variant forced, and the copy kernel's figure per size in bytes
    (each size timed once, by its first case)."""

    device: Any
    tuning_cache: tuning.TuningCache | None  # None: $WEBGPU_KERNELS_NO_TUNING
    seed: int
    variant: str | None = None
    copies: dict[int, float] = field(default_factory=dict)
    onnx_op: str | None = None  # --onnx-op: the ONNX op the outputs are compared with in onnxruntime
    quick: bool = False  # --quick: each row says its figures are rough


def _time_cases(run: _BenchRun, loaded: list[Kernel], plan: list[tuple[Kernel, dict[str, Any]]], results: dict[str, Any],
                console: Any, *, host: bool, calls: int, warm_up_s: float) -> None:  # fmt: skip
    """bench's host figures (into ``results``), then each case's GPU timing, appended to
    ``results["cases"]`` as it ends."""
    seed, variant, rows = run.seed, run.variant, results["cases"]
    with Progress(console=console, transient=True, disable=not is_live(console)) as progress:
        # Host figures first: the GPU timing below leaves wgpu-native slower at submitting for the
        # rest of the process (benchmark._one_batch), which a user's process never sees. Each
        # phase makes its own (seeded, identical) arrays: keeping every case's at once takes GBs.
        round_trips: list[float | None] = [None] * len(plan)
        skips = [skip_reason(kernel, case, variant) for kernel, case in plan]
        results["host"] = _host_per_call(loaded, calls, seed) if host else []
        if host:
            task = progress.add_task("NumPy round trips", total=len(plan))
            for i, (kernel, case) in enumerate(plan):
                try:
                    if skips[i] is None:  # a skipped case makes no arrays either
                        round_trips[i] = numpy_round_trip(kernel, case_arrays(case, seed), attrs=case["attrs"],
                                                          variant=variant, tunables=case["tunables"] or None)
                except KernelError:
                    pass  # reported by the timing below
                progress.advance(task)
        warm_up_gpu(progress, run.device, warm_up_s)
        task = progress.add_task("benchmarking", total=len(plan))
        for (kernel, case), round_trip, why in zip(plan, round_trips, skips):
            now_running(progress, task, f"{kernel.manifest.name} {case['name']} {bench_report.assignments(case['types'])}")
            row = _bench_case(kernel, case, run) if why is None else _skipped_row(kernel, case, why)
            if run.quick:  # every row, a skipped one too: how the run was made
                row["quick"] = True
            if round_trip is not None and "error" not in row:
                row["roundtrip_s"] = round_trip
            rows.append(row)
            progress.console.print(bench_report.one_line(row))
            progress.advance(task)


def now_running(progress: Progress, task: Any, text: str) -> None:
    """Say what runs now: on a terminal, as the progress line. Elsewhere (a CI log, a pipe) rich
    draws no live line, and a tune search of many minutes printed nothing until its case ended; so
    there each line is printed as it starts, to stderr, and stdout keeps only the results."""
    progress.update(task, description=text)
    _off_terminal_line(progress, text)


def _off_terminal_line(progress: Progress, text: str) -> None:
    if not is_live(progress.console):
        safe_console(stderr=True).print(Text(text), soft_wrap=True)


def warm_up_gpu(progress: Progress, device: Any, seconds: float) -> None:
    if seconds > 0:
        text = f"warming up the GPU ({seconds:g} s)"
        task = progress.add_task(text, total=None)
        _off_terminal_line(progress, text)
        warm_up(device, seconds)
        progress.remove_task(task)


def _bench_case(kernel: Kernel, case: dict[str, Any], run: _BenchRun) -> dict[str, Any]:
    attrs, device, variant, copies = case["attrs"], run.device, run.variant, run.copies
    row = _row_head(kernel, case)
    generated = {k: spec["generate"] for k, spec in case["inputs"].items() if "generate" in spec}
    if generated:  # the peers draw their inputs the same way
        row["generate"] = generated
    try:
        arrays = case_arrays(case, run.seed)
        flops, nbytes = (None if case.get(key) is None else
                         bench_count(kernel, key, case[key], arrays, attrs=attrs, tunables=case["tunables"] or None)
                         for key in ("flops", "bytes"))  # fmt: skip
        # The default selection (manifest tunables) or the --variant given, then the tuned choice if
        # `tune` stored one (not with --variant: the tuner's choice may be another variant).
        cache = None if variant is not None else run.tuning_cache  # None too with tuning off
        choice = None if cache is None else cache.lookup(kernel.tuning_key, *kernel.tuning_class(arrays, attrs))
        uncompared: list[str] = []
        unavailable: dict[str, str] = {}  # why each reference checked nothing, where none did
        held = held_to(row["dtype"].split(","), case.get("tolerances"))  # ours', the tuned choice's and the peers' rule
        check = _checker(kernel, arrays, attrs, held, uncompared, unavailable, run.onnx_op)

        def timed() -> Any:
            return bench_kernel(kernel, arrays, case=case["name"], attrs=attrs, tunables=case["tunables"] or None,
                                variant=variant, check=check, flops=flops, nbytes=nbytes)  # fmt: skip

        result, slow_state = slow_states.time_steadily(timed, device, copies)
        if slow_state is not None:
            row["slow_state"] = slow_state
        row.update(result.as_dict())
        row["copy_tbps"] = copies[result.bytes]
        row["copy_fraction"] = result.tbps / row["copy_tbps"]
        row["beyond_memory"] = slow_states.beyond_memory(result.peak_fraction, row["copy_fraction"])
        row["error_ok"] = result.error_ok  # None: no reference checked it (it had read True)
        if result.error_ok is None and unavailable:  # said under the table, as `run` says "not checked"
            row["reference_unavailable"] = unavailable
    except KernelError as exc:
        # A dtype or value refused here is bench.json's (-i's were checked in bench_cases, exit 2): said
        # in the case's terms, as validate says it, not as a Python call's .astype.
        advise_case(exc, BENCH_FILE)
        row["error"] = str(exc)
        return row
    if choice is not None:
        try:
            row["tuned"] = _bench_tuned(kernel, arrays, attrs, result, held, (flops, nbytes), check, run)
        except KernelError as exc:  # the default's figures stand
            row["tuned"] = {"variant": choice.variant, "tunables": choice.tunables, "error": str(exc)}
    if uncompared:  # ours and the tuned run's, by the case's reference
        row["reference_uncompared"] = uncompared
    return row


def _bench_tuned(kernel: Kernel, arrays: dict[str, np.ndarray], attrs: dict[str, Any], default: Any, held: Any,
                 counts: tuple[int | None, int | None], check: Any, run: _BenchRun) -> dict[str, Any]:  # fmt: skip
    """The "tuned" figures: what a call without variant or tunables runs, checked as the default is
    (``check``: the default's; where no reference checked the default, against its output by the
    default's rule, ``held``: :func:`held_to`), and
    timed under the default's slow-state rule (``run``'s device and copies). ``counts``: the call's
    FLOPs and bytes where bench.json gives them (None where not)."""
    flops, nbytes = counts
    # A stored choice the call cannot use (stale, or refused by `when` or the device) falls back to
    # the default selection there, so it is that plan that is timed, not the stored entry.
    _, runs = kernel.plan(arrays, attrs=attrs, tuned=True)
    variant, tunables = runs.variant, dict(runs.tunables)
    # The same work as the default (equal tunables, or ones the variant never reads): timing the
    # same kernel again would only add noise, shown as a tuning gain or loss.
    same = (variant == default.variant and tunables == default.tunables) or (
        kernel.work_key(arrays, attrs=attrs, variant=variant, tunables=tunables)
        == kernel.work_key(arrays, attrs=attrs, variant=default.variant, tunables=default.tunables))
    against = "reference"
    if default.error_ok is None and not same:  # no reference has the op: the default's output is the measure
        expected = {n: np.asarray(v, dtype=np.float64) for n, v in
                    kernel(arrays, attrs=attrs, variant=default.variant, tunables=default.tunables).items()}  # fmt: skip
        check, against = (lambda outputs: held(outputs, expected)), "default"
    slow_state = None
    if same:
        tuned = default
    else:
        # Under the default's rule: a tuned reading taken in the slow state, timed once where the
        # default had been timed again and the fastest kept, read as a loss tuning never made.
        tuned, slow_state = slow_states.time_steadily(
            lambda: bench_kernel(kernel, arrays, attrs=attrs, variant=variant, tunables=tunables, check=check,
                                 flops=flops, nbytes=nbytes), run.device, run.copies)  # fmt: skip
    # A tuned kernel that computes something else is WRONG, not fast. Its TB/s counts the default's
    # bytes, as the peers' do: a variant writing an optional output the default does not had been
    # credited with those bytes too.
    tbps = default.bytes / tuned.median_s / 1e12 if tuned.median_s > 0 else float("nan")
    return {"variant": variant, "tunables": tunables, "tbps": tbps, "tflops": tuned.tflops, "median_s": tuned.median_s,
            "same_as_default": same, "max_error": tuned.max_error, "error_ok": tuned.error_ok,
            "checked_against": against if tuned.max_error is not None else None,
            **({"slow_state": slow_state} if slow_state is not None else {})}


def _host_per_call(kernels: list[Kernel], calls: int, seed: int) -> list[dict[str, Any]]:
    """Per-call host cost on each kernel's smallest bench case (launch-bound), f32."""
    rows = []
    for kernel in kernels:
        cases = [c for c in bench_cases(kernel, (), (), ("float32",), {})]
        if not cases:
            continue
        smallest = min(cases, key=lambda c: max(int(np.prod(s["shape"])) for s in c["inputs"].values()))
        try:
            arrays = case_arrays(smallest, seed)
            stats = host_per_call(kernel, arrays, calls=calls, attrs=smallest["attrs"])
        except KernelError as exc:
            advise_case(exc, BENCH_FILE)  # a bench.json case's, as its timing row says it
            rows.append({"kernel": kernel.op_id, "case": smallest["name"], "error": str(exc)})
            continue
        rows.append({"kernel": kernel.op_id, "case": smallest["name"], "shapes": {k: list(a.shape) for k, a in arrays.items()},
                     **stats})  # fmt: skip
    return rows


def _compare(rows: list[dict[str, Any]], compile_tag: str, console: Any, save: Any, timeout_s: int,
             warm_up_s: float = 0.0, *, kernels: Iterable[Kernel], onnx_op: str | None = None) -> None:  # fmt: skip
    """Run each peer in its own process over the same cases (the ONNX node of each ``kernels``'
    call, ``onnx_op`` where --onnx-op names it: peers.peer_cases) and merge its figures into rows."""
    # a row with no figure of ours (an error, a skip) has nothing to set a peer's against
    timed = [(i, row) for i, row in enumerate(rows) if bench_report.timed(row)]
    cases = peers.peer_cases(timed, kernels, compile_tag, onnx_op)
    for peer in ("torch", "ort-webgpu"):
        group_of = peers.PROCESS_GROUPS.get(peer, lambda case: None)
        groups: dict[Any, list[dict[str, Any]]] = {}
        for case in cases:
            groups.setdefault(group_of(case), []).append(case)
        processes = "its own process" if len(groups) == 1 else f"{len(groups)} processes of its own"
        console.print(f"running peer {peer} on {len(cases)} cases ({processes}, {timeout_s} s at most each)")
        start, done = time.perf_counter(), 0
        for group in groups.values():
            with tempfile.TemporaryDirectory() as folder:
                path = Path(folder) / "cases.json"
                path.write_text(json.dumps(group), "utf-8")
                command = [sys.executable, "-m", f"{__package__}.peers", peer, repr(warm_up_s), str(path)]
                why: list[str] = []
                for result in _stream_peer(peer, command, console, timeout_s, why=why):
                    rows[int(result.pop("case"))].setdefault("peers", {})[peer] = result
                    done += 1
            # A case the peer never answered (not installed, crashed, killed) is recorded as such,
            # in the JSON too: an absent figure must not read as one that was never asked for.
            for case in group:
                if peer not in rows[case["id"]].get("peers", {}):
                    reason = why[0] if why else "it exited without one"
                    rows[case["id"]].setdefault("peers", {})[peer] = {"peer": peer, "error": f"no result: {reason}"}
        console.print(f"peer {peer}: {done} of {len(cases)} cases in {time.perf_counter() - start:.0f} s")
        save()


PEER_TIMEOUT_ENV = "WEBGPU_KERNELS_PEER_TIMEOUT"  # seconds each peer process may run (420)


def _stream_peer(peer: str, command: list[str], console: Any, timeout_s: int, why: list[str] | None = None) -> Any:
    """Yield the JSON lines of the peer process ``command`` as they come; a peer past ``timeout_s``
    is killed, keeping what it said. A failed process's reason is appended to ``why``."""
    # stderr goes to a file: a pipe read only at the end would stall a chatty peer once it filled.
    # Popen's context closes the stdout pipe (left to the garbage collector, a ResourceWarning).
    with tempfile.TemporaryFile("w+") as errors, \
            subprocess.Popen(command, stdout=subprocess.PIPE, stderr=errors, text=True) as process:
        killed = threading.Event()

        def kill() -> None:
            killed.set()
            process.kill()

        timer = threading.Timer(timeout_s, kill)
        timer.start()
        try:
            assert process.stdout is not None
            for line in process.stdout:
                try:
                    result = json.loads(line)
                except ValueError:
                    continue
                # What else a peer's libraries print may parse as JSON too (`1`, a list): a result
                # is an object naming its case
                if isinstance(result, dict) and isinstance(result.get("case"), int):
                    yield result
        finally:
            timer.cancel()
            process.wait()
            if process.returncode != 0:
                errors.seek(0)
                last_line = errors.read().strip().splitlines()[-1:]  # a killed peer may have said nothing
                reason = (f"killed after {timeout_s} s (${PEER_TIMEOUT_ENV})" if killed.is_set()
                          else f"exited with {process.returncode}")  # fmt: skip
                said = f"peer {peer} {reason}" + "".join(f": {line}" for line in last_line)
                console.print(Text(said, style="red"))
                if why is not None:
                    why.append(said)


COMMANDS = [bench_cmd]
