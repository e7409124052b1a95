"""``webgpu-kernels run``: a kernel on seeded random inputs, its outputs summarised, timed on the
host, and compared with the NumPy float64 and ONNX Runtime references (where they exist)."""

from __future__ import annotations

import statistics
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import click
import numpy as np
from rich.console import Console
from rich.table import Table
from rich.text import Text

from .call_arguments import in_manifest_order
from .case_data import numpy_dtype, random_values
from .cli import adapter_option, adapter_request_of, onnx_op_option
from .cli_inspect import OUTPUT_NAMES_OPTION
from .command_output import as_manifest_text, echo_json, is_live, safe_console
from .comparison import reference_report
from .device import choose_adapter
from .errors import KernelError
from .kernel_arguments import (
    GENERATE_OPTION,
    InputSpec,
    input_options,
    kernel_source,
    resolve_kernel,
    source_text,
    trust_option,
    with_generators,
)
from .manifest import TensorSpec
from .references import (
    UNCOMPUTED_OUTPUTS,
    ReferenceShapeMismatch,
    ReferenceUnavailable,
    manifest_positions,
    names_an_onnx_op,
    no_numpy_reference,
    numpy_reference,
    onnxruntime_for,
)

TIMING_NOTE = "host wall clock per call (upload + dispatch + readback), not GPU kernel time"


@click.command("run")
@trust_option
@adapter_option
@input_options
@GENERATE_OPTION
@click.option("--variant", metavar="ID", default=None, help="Force this variant instead of selecting one.")
@OUTPUT_NAMES_OPTION
@click.option("--seed", type=click.IntRange(min=0), default=0, show_default=True, help="Seed of the random inputs.")
@click.option("--repeat", type=click.IntRange(min=0), default=10, show_default=True,
              help="Timed calls after the first one (their median is reported).")  # fmt: skip
@click.option("--onnx-op", metavar="DOMAIN.NAME", default=None, callback=onnx_op_option,
              help="Compare with this ONNX op in onnxruntime (com.microsoft.FastGelu): the op a "
                   "package mirrors under an id of its own. Default: KERNEL's op id.")  # fmt: skip
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_context
def run_cmd(ctx: click.Context, kernel: str, inputs: dict[str, InputSpec], attrs: dict[str, Any],
            tunables: dict[str, Any], generators: dict[str, dict[str, Any]], variant: str | None,
            output_names: tuple[str, ...], seed: int, repeat: int, onnx_op: str | None, as_json: bool) -> None:  # fmt: skip
    """Run KERNEL on seeded random inputs (standard normal unless --generate; bool half true):
    output summary, time and error against the references. Exit status 1 when an output element is
    beyond its tolerance (float32: 1e-4 + 1e-5 x |reference|; float16: 1e-2 + 1e-3 x |reference|)."""
    inputs = with_generators(inputs, generators)
    adapter = adapter_request_of(ctx)
    k = resolve_kernel(kernel)
    metas = {name: spec.meta() for name, spec in inputs.items()}
    asked = list(output_names) or None  # in_manifest_order below lists a repeated --output once
    # The plan the call will run (a stored tuning result included): the contract, the selection and
    # the device's limits are checked, with the call's own typed errors, before any data is made
    # (gigabytes of random data for an input the device would refuse).
    _, plan = k.plan(metas, attrs=attrs, variant=variant, tunables=tunables, adapter=adapter, tuned=True, outputs=asked)
    try:  # whether that is a stored tuning result's plan, not the manifest's own selection's
        tuned = plan is not k.plan(metas, attrs=attrs, variant=variant, tunables=tunables, adapter=adapter,
                                   outputs=asked)[1]  # fmt: skip
    except KernelError:  # the manifest's selection cannot run here (its tunables past a device
        tuned = True  # limit, say), the stored result can: run had exited 2 on the former
    arrays = random_inputs(inputs, seed)
    status_console = safe_console(stderr=True)
    with _status(status_console, f"running {k.op_id} ..."):
        start = time.perf_counter()
        outputs = k(arrays, attrs=attrs, variant=variant, tunables=tunables, adapter=adapter, outputs=asked)
        first = time.perf_counter() - start
        times = []
        for _ in range(repeat):
            start = time.perf_counter()
            k(arrays, attrs=attrs, variant=variant, tunables=tunables, adapter=adapter, outputs=asked)
            times.append(time.perf_counter() - start)
    all_attrs = {**k.manifest.attributes, **attrs}
    report: dict[str, Any] = {
        "op": k.op_id, "source": kernel_source(k), "adapter": choose_adapter(adapter).label(), "variant": plan.variant,
        "forced": variant is not None, "tuned": tuned, "seed": seed,
        "asked": None if asked is None else list(in_manifest_order(k.manifest, asked) or ()),  # explain's order
        "inputs": {n: {"shape": list(s.shape), "dtype": s.dtype, **({"generate": dict(s.generate)} if s.generate else {})}
                   for n, s in inputs.items()},
        "attrs": all_attrs, "tunables": dict(plan.tunables),
        "outputs": {name: summarize(array) for name, array in outputs.items()},
        "timing": {"clock": TIMING_NOTE, "firstCallMs": first * 1e3, "repeat": repeat,
                   "medianMs": statistics.median(times) * 1e3 if times else None},
        "reference": {"numpy": None, "onnxruntime": None},
        "referenceUnavailable": {},  # why a reference compared nothing, by reference
    }  # fmt: skip
    ref = numpy_reference(k.op_id)
    if ref is not None:
        expected = ref(arrays, all_attrs)
        report["reference"]["numpy"] = {n: reference_report(outputs[n], expected[n]) for n in outputs if n in expected}
    else:  # said as onnxruntime's reason is: the JSON had named onnxruntime's alone
        report["referenceUnavailable"]["numpy"] = no_numpy_reference(k.op_id)
    # ONNX reads a node's inputs and outputs by position: the op's formal positions where the roles
    # are its formal names, else the manifest's order, "" for one left out (listing only what there
    # was shifted a later one into an earlier one's place).
    # A required output the call did not ask for (--output Mean) is still named: ONNX refuses a node
    # that leaves one out ("marked single but has an empty string"); only the returned are compared.
    named = {*outputs, *(o.role for o in k.manifest.outputs if not o.optional)}
    positions = manifest_positions(k.manifest, arrays, named, op_id=onnx_op)
    report["onnxruntimeOp"] = onnx_op or k.op_id
    report["onnxruntimeMatchedBy"] = "name" if positions[2] else "position"
    try:
        ort_out = onnxruntime_for(k.manifest, arrays, all_attrs, outputs, positions=positions, op_id=onnx_op)
    except ReferenceShapeMismatch as mismatch:  # the kernel's shape is not the op's: WRONG, as a compared shape is
        report["reference"]["onnxruntime"] = {mismatch.output: {"shapeMismatch": [mismatch.kernel, mismatch.inferred]}}
    except ReferenceUnavailable as why:
        report["referenceUnavailable"]["onnxruntime"] = str(why)
    else:
        report["reference"]["onnxruntime"] = {n: reference_report(outputs[n], ort_out[n]) for n in outputs if n in ort_out}
        # an optional output ORT computed no value for (onnxruntime_reference leaves it out): said, not silent
        report["referenceUncompared"] = {"onnxruntime": [n for n in outputs if n not in ort_out]}
    for results in report["reference"].values():
        for c in (results or {}).values():
            c["ok"] = _agrees(c)
    report["notCompared"] = not_compared(k.manifest.outputs, outputs, asked, plan.left_out, plan.variant)
    compared = [c for results in report["reference"].values() for c in (results or {}).values()]
    report["ok"] = all(c["ok"] for c in compared)  # nothing found wrong ...
    report["checked"] = bool(compared)  # ... by at least one reference: `ok` alone read true for a package no reference knows
    if as_json:
        echo_json(report)
    else:
        _print_run(report)
    if not report["ok"]:  # as bench fails a WRONG output: a script or CI job must see it
        ctx.exit(1)


#: Why an output the call did not return was not compared (``notCompared`` in --json).
NOT_ASKED = "not asked for (--output)"


def not_compared(declared: tuple[TensorSpec, ...], returned: Mapping[str, Any], asked: list[str] | None, left_out: tuple[str, ...],
                 variant: str) -> dict[str, str]:  # fmt: skip
    """The declared outputs the call did not return, each with why: not asked for (an output left
    out of --output), or not produced by the variant that ran (an optional one it writes nowhere)."""
    why: dict[str, str] = {}
    for role in (t.role for t in declared):
        if role in returned:
            continue
        if asked is not None and role not in asked:  # first: forcing a variant that writes it would not return it
            why[role] = NOT_ASKED
        elif role in left_out:
            why[role] = f"not produced by variant {variant}"
    return why


def _agrees(c: dict[str, Any]) -> bool:
    """An output agrees with a reference: same shape, the same NaN and inf, and no element beyond
    its tolerance (``reference_report``)."""
    return "shapeMismatch" not in c and not c["nonFiniteMismatches"] and not c["beyondTolerance"]


@contextmanager
def _status(console: Console, message: str) -> Iterator[None]:
    if is_live(console):
        with console.status(message):
            yield
    else:
        yield


def random_inputs(inputs: Mapping[str, InputSpec], seed: int) -> dict[str, np.ndarray]:
    """Each input drawn in the order given as bench draws it (case_data.random_values)."""
    rng = np.random.default_rng(seed)
    return {name: random_values(tuple(spec.shape), spec.dtype, rng, spec.generate) for name, spec in inputs.items()}


def summarize(array: Any) -> dict[str, Any]:
    """Shape, dtype, NaN count and min/max/mean (over the non-NaN values, in float64)."""
    a = np.asarray(array)
    values = a.astype(np.float64).ravel()
    nan = np.isnan(values)
    rest = values[~nan]
    stats: dict[str, Any] = {"shape": list(a.shape), "dtype": a.dtype.name, "size": int(a.size),
                             "nanCount": int(nan.sum())}  # fmt: skip
    if rest.size:
        with np.errstate(invalid="ignore", over="ignore"):  # +inf and -inf make a NaN mean: the summary says so
            stats.update(min=float(rest.min()), max=float(rest.max()), mean=float(rest.mean()))
    else:
        stats.update(min=None, max=None, mean=None)
    return stats


def _drawn_from(generate: Mapping[str, Any] | None) -> str:
    """`` uniform [0, 49407)`` or `` normal (mean 0, std 2)``: how --generate drew an input."""
    if not generate:
        return ""
    if generate["distribution"] == "uniform":
        return f" uniform [{generate['low']:g}, {generate['high']:g})"
    return f" normal (mean {generate['mean']:g}, std {generate['std']:g})"


def _num(value: float | None, fmt: str = ".6g") -> str:
    return "-" if value is None else format(value, fmt)


def _print_run(r: dict[str, Any]) -> None:
    console = safe_console()
    console.print(Text(f"{r['op']} on {r['adapter']}", style="bold"))
    console.print(Text(f"kernel: {source_text(r['source'])}"), soft_wrap=True)  # what reproducing it needs
    inputs = ", ".join(f"{n} {s['shape']} {s['dtype']}{_drawn_from(s.get('generate'))}" for n, s in r["inputs"].items())
    drawn = "standard normal" + ("; bool half true" if any(s["dtype"] == "bool" for s in r["inputs"].values()) else "")
    drawn = f"{drawn} unless said" if any("generate" in s for s in r["inputs"].values()) else drawn
    console.print(f"inputs ({drawn}, seed {r['seed']}): {inputs}", soft_wrap=True)
    if r["attrs"]:
        console.print("attributes: " + ", ".join(f"{k}={as_manifest_text(v)}" for k, v in r["attrs"].items()))
    how = " (forced)" if r["forced"] else (" (a stored tuning result)" if r["tuned"] else " (selected)")
    console.print(f"variant: {r['variant']}{how}")

    table = Table(title="Outputs", title_justify="left")
    for col in ("output", "shape", "dtype", "min", "max", "mean", "NaN"):
        table.add_column(col, justify="right" if col in ("min", "max", "mean", "NaN") else "left")
    for name, s in r["outputs"].items():
        table.add_row(name, str(s["shape"]), s["dtype"], _num(s["min"]), _num(s["max"]), _num(s["mean"]),
                      str(s["nanCount"]))  # fmt: skip
    console.print(table)

    t = r["timing"]
    console.print(f"time: {t['clock']}")
    console.print(f"  first call: {t['firstCallMs']:.3f} ms (includes building the pipeline)")
    if t["medianMs"] is not None:
        console.print(f"  median of {t['repeat']} more calls: {t['medianMs']:.3f} ms")

    refs = r["reference"]
    mismatched = False
    # --onnx-op: the ONNX op compared is named, not the package's own
    ort_label = "ONNX Runtime CPU" + (f" {r['onnxruntimeOp']}" if r["onnxruntimeOp"] != r["op"] else "")
    for key, label in (("numpy", "NumPy float64 reference"), ("onnxruntime", ort_label)):
        results = refs[key]
        if results is None:
            if key in r["referenceUnavailable"]:
                console.print(f"{label}: not available ({r['referenceUnavailable'][key]})", markup=False)
            continue
        if key == "onnxruntime" and r["onnxruntimeMatchedBy"] == "position":
            console.print("ONNX Runtime's inputs and outputs are matched to the manifest's by position: its roles "
                          "are not all the op's formal names")  # fmt: skip
        for name, c in results.items():
            if "shapeMismatch" in c:  # the kernel's shape or the reference's reading of the values: not told apart
                mismatched = True
                console.print(Text(f"{name}: shape {c['shapeMismatch'][0]}, {label}'s {c['shapeMismatch'][1]}: "
                                   "the reference computed another shape for these inputs", style="bold red"))  # fmt: skip
                continue
            if c["maxAbsError"] is None and not c["nonFiniteMismatches"]:
                console.print(f"error vs {label} ({name}): no finite elements to compare")
                continue
            line = f"error vs {label} ({name}): max abs {_num(c['maxAbsError'], '.3e')}, " \
                   f"max rel {_num(c['maxRelError'], '.3e')}"  # fmt: skip
            if c["nonFiniteMismatches"]:
                line += f", {c['nonFiniteMismatches']} NaN/inf mismatches"
            if c["beyondTolerance"]:
                tol = c["tolerance"]
                line += (f", {c['beyondTolerance']} elements beyond {tol['absolute']:g} + "
                         f"{tol['relative']:g} x |reference|")  # fmt: skip
            console.print(Text(line + ("" if c["ok"] else ": WRONG"), style="" if c["ok"] else "bold red"))
        uncompared = r.get("referenceUncompared", {}).get(key)
        if uncompared:
            console.print(Text(f"{label}: computed no value for {', '.join(uncompared)} ({UNCOMPUTED_OUTPUTS}): "
                               "not compared", style="yellow"))  # fmt: skip
    if mismatched:  # an integer input's random values (axes, indices, a shape) may decide the reference's shape
        for name, s in r["inputs"].items():
            if numpy_dtype(s["dtype"]).kind in "iu":
                drawn = _drawn_from(s.get("generate")).strip() or "standard normal"
                console.print(Text(f"{name} ({s['dtype']}) holds random values ({drawn}, rounded): they may decide "
                                   f"the reference's shape; fix them with --generate {name}=normal:VALUE:0 (every "
                                   f"value VALUE) or {name}=uniform:LOW:HIGH", style="yellow"))  # fmt: skip
    if r["notCompared"]:  # one line: the declared outputs the call did not return, grouped by why
        groups: dict[str, list[str]] = {}
        for name, why in r["notCompared"].items():
            groups.setdefault(why, []).append(name)
        said = "; ".join(f"{', '.join(names)}: {why}" for why, names in groups.items())
        console.print(f"not compared: {said}", markup=False)
    if not r["checked"]:
        # --onnx-op is no advice for a package already under an ONNX op's id (or a run that gave it):
        # ONNX Runtime's own line says why it compared nothing (an opset without the op, say)
        onnx_named = r["onnxruntimeOp"] != r["op"] or names_an_onnx_op(r["op"])
        other = ("ONNX Runtime's line above says why it compared nothing" if onnx_named else
                 "or with --onnx-op DOMAIN.NAME against the ONNX op it mirrors")  # fmt: skip
        console.print(Text("not checked: no reference compared the outputs (a package's own op is checked by "
                           f"`webgpu-kernels test` against its test.json{'; ' if onnx_named else ', '}{other})",
                           style="yellow"))  # fmt: skip


COMMANDS = [run_cmd]
