"""How `webgpu-kernels bench` shows its rows: the line per case while it runs, the table, the
notes under it and the plot (bandwidth against size, with the rooflines)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rich.measure import Measurement
from rich.table import Table
from rich.text import Text

from .benchmark import CALLS_PER_SPAN, QUICK_NOTE
from .command_output import is_live
from .references import UNCOMPUTED_OUTPUTS, names_an_onnx_op


def assignments(values: dict[str, Any]) -> str:
    """``{'T': 'float32'}`` as ``T=float32``, ``{'X': [2, 5]}`` as ``X=2x5`` (a rank-0 shape as
    ``scalar``): as -i and --tunable are written, for the lines bench and tune print."""
    def text(value: Any) -> str:
        if isinstance(value, (list, tuple)):
            return "x".join(map(str, value)) or "scalar"
        return str(value)

    return " ".join(f"{name}={text(value)}" for name, value in values.items())


def tbps_text(row: dict[str, Any]) -> str:
    """The row's TB/s, marked ``*`` when it is past what memory allows (slow_states.beyond_memory)."""
    return f"{row['tbps']:.3f}" + ("*" if row.get("beyond_memory") else "")


def timed(row: dict[str, Any]) -> bool:
    """Whether the row has figures: not an error row, nor a case skipped on this adapter."""
    return "error" not in row and "skipped" not in row


def one_line(row: dict[str, Any]) -> str:
    name = f"{row['kernel'].split('.')[-1]} {row['case']} {row['dtype']}"
    if "skipped" in row:
        return f"{name}: skipped: {row['skipped']}"
    if "error" in row:
        return f"{name}: error {row['error'][:100]}"
    tuned = "" if "tbps" not in row.get("tuned", {}) else _tuned_text(row)
    if "error" in row.get("tuned", {}):
        tuned = f", tuned: error {row['tuned']['error'][:100]}"
    if row.get("tuned", {}).get("error_ok") is False:
        tuned += f" WRONG: max error {row['tuned']['max_error']:.3g}"
    if (row.get("tuned", {}).get("slow_state") or {}).get("persists"):  # as the default's below
        tuned += f" (SLOW STATE persisted: {row['tuned']['slow_state']['persists']})"
    wrong = "" if row.get("error_ok") is not False else f", WRONG: max error {row['max_error']:.3g}"
    if not row.get("stable", True) and not row.get("quick"):  # two batches that did not agree (--quick asks for two)
        wrong += f", unstable: batch medians did not agree in {row['batches']} batches"
    if "slow_state" in row:
        slow = row["slow_state"]
        wrong += (f", re-timed {len(slow['replaced'])}x (first {slow['replaced'][0]['tbps']:.3f} TB/s: "
                  f"{slow['replaced'][0]['why']})")  # fmt: skip
        if slow["persists"]:
            wrong += f", SLOW STATE persisted: {slow['persists']}"
    flops = f" {row['tflops']:.3f} TFLOP/s" if row.get("tflops") is not None else ""
    return (f"{name}: {row['variant']} {row['median_s'] * 1e6:.1f} µs {tbps_text(row)} TB/s{flops} "
            f"({row['copy_fraction'] * 100:.0f}% of copy){tuned}{wrong}")  # fmt: skip


def _tuned_text(row: dict[str, Any]) -> str:
    """The tuned figures after the default's: its time, TB/s, TFLOP/s where the case counts FLOPs
    (a compute-bound kernel's TB/s says little), and its speed-up over the default."""
    tuned = row["tuned"]
    flops = f" {tuned['tflops']:.3f} TFLOP/s" if tuned.get("tflops") is not None else ""
    if not tuned.get("median_s"):  # a report written before the tuned row had its time
        return f", tuned {tuned['tbps']:.3f} TB/s{flops}"
    return (f", tuned {tuned['median_s'] * 1e6:.1f} µs {tuned['tbps']:.3f} TB/s{flops} "
            f"({row['median_s'] / tuned['median_s']:.2f}x the default)")  # fmt: skip


def span_text(rows: list[dict[str, Any]]) -> str:
    """How many calls the rows' timestamp spans held: "50", or "4 to 50" where slow calls got shorter spans."""
    spans = sorted({row["calls_per_span"] for row in rows if row.get("calls_per_span")}) or [CALLS_PER_SPAN]
    return str(spans[0]) if len(spans) == 1 else f"{spans[0]} to {spans[-1]}"


def _fmt(value: Any, spec: str) -> str:
    return "-" if value is None else format(value, spec)


#: The columns a terminal too narrow for the table leaves out, in this order, until it fits (after
#: those with no figure): it keeps which case, its time and bandwidth, and whether its output was
#: right ("max err" says WRONG): kernel, case, dtype, µs, TB/s, % peak, max err.
_DROPPED_FIRST = ("torch xfer ms", "ORT rt ms", "round trip ms", "ORT/ours", "ORT µs", "compile TB/s", "torch TB/s",
                  "elements", "% copy", "tuned TFLOP/s", "TFLOP/s", "variant", "tuned TB/s")  # fmt: skip


def _columns(rows: list[dict[str, Any]]) -> dict[str, list[str | Text]]:
    """The table's cells, by column: an error or skipped row fills kernel, case and dtype, and says
    "error" or "skipped" in the first column shown after them (see _table)."""
    # TFLOP/s only where some package's bench.json counts FLOPs (a compute-bound op)
    flops = any(row.get("tflops") is not None for row in rows)
    names = ("kernel", "case", "dtype", "variant", "elements", "µs", "TB/s", *(("TFLOP/s",) if flops else ()),
             "% peak", "% copy", "tuned TB/s", *(("tuned TFLOP/s",) if flops else ()), "torch TB/s", "compile TB/s", "ORT µs", "ORT/ours", "round trip ms",
             "ORT rt ms", "torch xfer ms", "max err")  # fmt: skip
    columns: dict[str, list[str | Text]] = {name: [] for name in names}
    for row in rows:
        if not timed(row):
            cells: tuple[str, ...] = (row["kernel"].split(".")[-1], row["case"], row["dtype"])
            for name, cell in zip(names, cells + ("",) * (len(names) - len(cells))):
                columns[name].append(cell)
            continue
        by_peer = row.get("peers", {})
        torch_peer, ort_peer = by_peer.get("torch", {}), by_peer.get("ort-webgpu", {})
        per_s = lambda s: None if not s else row["bytes"] / s / 1e12  # noqa: E731
        ort_s = ort_peer.get("device_s")
        err = _fmt(row.get("max_error"), ".1e") + ("" if row.get("error_ok") is not False else " WRONG")

        def checked(text: str, peer: dict[str, Any], figure: str) -> str:
            # A figure whose output failed the reference check says so in its own cell, and one
            # no reference could check is marked "?" (the line under the table says why).
            unchecked = text != "-" and peer.get("reference_unavailable")
            return text + (" WRONG" if peer.get(f"{figure}_ok") is False else " ?" if unchecked else "")

        tuned = row.get("tuned", {})
        cells = (
            row["kernel"].split(".")[-1], row["case"], row["dtype"], row["variant"], str(row["elements"]),
            f"{row['median_s'] * 1e6:.1f}", tbps_text(row), *((_fmt(row.get("tflops"), ".3f"),) if flops else ()),
            _fmt(row.get("peak_fraction") and row["peak_fraction"] * 100, ".1f"),
            f"{row['copy_fraction'] * 100:.1f}",
            "error" if "error" in tuned else _fmt(tuned.get("tbps"), ".3f") + ("" if tuned.get("error_ok") is not False else " WRONG"),
            *(("error" if "error" in tuned else _fmt(tuned.get("tflops"), ".3f"),) if flops else ()),
            checked(_fmt(per_s(torch_peer.get("eager_s")), ".3f"), torch_peer, "eager"),
            checked(_fmt(per_s(torch_peer.get("compile_s")), ".3f"), torch_peer, "compile"),
            checked(_fmt(ort_s and ort_s * 1e6, ".1f"), ort_peer, "device"),
            checked(_fmt(ort_s and ort_s / row["median_s"], ".2f"), ort_peer, "device"),
            _fmt(row.get("roundtrip_s") and row["roundtrip_s"] * 1e3, ".3f"),
            checked(_fmt(ort_peer.get("numpy_roundtrip_s") and ort_peer["numpy_roundtrip_s"] * 1e3, ".3f"),
                    ort_peer, "numpy"),
            _fmt(torch_peer.get("transfer_s") and torch_peer["transfer_s"] * 1e3, ".3f"), err,
        )  # fmt: skip
        for name, cell in zip(names, cells, strict=True):
            columns[name].append(cell)
    return columns


def _table(rows: list[dict[str, Any]], columns: dict[str, list[str | Text]], shown: list[str]) -> Table:
    table = Table(title=f"GPU time per call (timestamps around {span_text(rows)} back-to-back calls, median, sustained "
                        "load, random data)")  # fmt: skip
    for name in shown:
        # folded, not cut to "…", where even the essential columns do not fit
        table.add_column(name, justify="left" if name in ("kernel", "case", "dtype", "variant") else "right",
                         overflow="fold")  # fmt: skip
    for i, row in enumerate(rows):
        cells = [columns[name][i] for name in shown]
        if "error" in row and len(shown) > 3:
            cells[3] = Text("error", style="red")  # its message is printed in full under the table
        elif "skipped" in row and len(shown) > 3:  # why: its line, and the count under the table
            cells[3] = Text("skipped", style="yellow")
        table.add_row(*cells)
    return table


def _fitted(console: Any, rows: list[dict[str, Any]], columns: dict[str, list[str | Text]]) -> tuple[Table, list[str]]:
    """The table, less the columns a live terminal too narrow for it cannot show, and those left
    out. rich had cut every cell of the 18 or 19 columns to "…" on an 80-column terminal (so the
    figures were lost); columns with no figure ("-" in every row) go first, then _DROPPED_FIRST's."""
    shown = list(columns)
    table = _table(rows, columns, shown)
    if not is_live(console):  # a log (no terminal) gets them all: its width is set to hold them
        console.width = max(console.width, 250)
        return table, []

    def fits() -> bool:  # unwrapped: rich meets a narrower width by cutting the widest cells, not by wrapping
        return Measurement.get(console, console.options.update_width(10_000), table).maximum <= console.width

    empty = [name for name in shown if name not in ("kernel", "case", "dtype") and rows
             and all(str(cell) in ("-", "") for cell, row in zip(columns[name], rows) if timed(row))]  # fmt: skip
    for name in [*empty, *(n for n in _DROPPED_FIRST if n not in empty)]:
        if name not in shown:  # TFLOP/s where no case counts FLOPs: nothing to measure for it
            continue
        if fits():
            break
        shown.remove(name)
        table = _table(rows, columns, shown)
    return table, [name for name in columns if name not in shown]


def print_rows(console: Any, rows: list[dict[str, Any]], host_rows: list[dict[str, Any]]) -> None:
    table, left_out = _fitted(console, rows, _columns(rows))
    console.print(table)
    if left_out:
        console.print(f"{len(left_out)} columns left out to fit {console.width} columns: {', '.join(left_out)} "
                      "(all of them: a wider terminal, `| cat`, or --json FILE)")  # fmt: skip
    if any(row.get("quick") and "skipped" not in row for row in rows):  # rough figures, where any were timed
        console.print(QUICK_NOTE)
    if any(row.get("beyond_memory") for row in rows):
        console.print("* faster than the device's memory allows for the bytes counted (each input read once, "
                      "each output written once, where the package's bench.json gives no `bytes`): the kernel "
                      "reads less than its inputs, as a gather does, or works from cache; its TB/s is not a "
                      "bandwidth (bench.json's `bytes` can count what it moves)")  # fmt: skip
    uncompared = [row for row in rows if row.get("reference_uncompared")]
    if uncompared:  # their "max err" read as a check of every output (as `run` says it)
        these = "; ".join(f"{row['kernel'].split('.')[-1]} {row['case']} {row['dtype']} "
                          f"({', '.join(row['reference_uncompared'])})" for row in uncompared)  # fmt: skip
        console.print(Text(f"{len(uncompared)} of {len(rows)} cases had outputs not compared, the reference computing "
                           f"no value for them ({UNCOMPUTED_OUTPUTS}): {these}", style="yellow"))  # fmt: skip
    unchecked = [row for row in rows if row.get("reference_unavailable")]
    if unchecked:  # their "max err" is "-": `run` says "not checked" and why, and so does this
        why = {row["kernel"]: "; ".join(f"{ref}: {reason}" for ref, reason in row["reference_unavailable"].items())
               for row in unchecked}  # fmt: skip
        # --onnx-op is no advice for a package already under an ONNX op's id: its reason says what is wrong
        onnx_op = "" if all(names_an_onnx_op(kernel) for kernel in why) else \
            ", or --onnx-op DOMAIN.NAME against the ONNX op it mirrors"  # fmt: skip
        console.print(Text(f"{len(unchecked)} of {len(rows)} cases not checked, no reference computing their outputs "
                           f"({'; '.join(f'{k}: {v}' for k, v in why.items())}): `webgpu-kernels test` checks a "
                           f"package's own op against its test.json{onnx_op}", style="yellow"))  # fmt: skip
    for row in rows:
        if "error" in row:  # in full: a table cell would cut a WebGPU validation message to its first words
            console.print(Text(f"{row['kernel'].split('.')[-1]} {row['case']} {row['dtype']}: error: {row['error']}", style="red"))
        if "error" in row.get("tuned", {}):  # in full too (its line had cut it at 100 characters)
            console.print(Text(f"{row['kernel'].split('.')[-1]} {row['case']} {row['dtype']}: the tuned choice: error: "
                               f"{row['tuned']['error']}", style="red"))  # fmt: skip
        for peer, result in row.get("peers", {}).items():
            if "error" in result:
                console.print(Text(f"{peer} on {row['case']} {row['dtype']}: {result['error'][:160]}", style="yellow"))
            elif result.get("reference_unavailable"):
                console.print(Text(f"{peer} on {row['case']} {row['dtype']} is not checked: no reference computing its "
                                   f"outputs ({result['reference_unavailable']})", style="yellow"))  # fmt: skip
            for key in ("eager", "compile"):
                if result.get(f"{key}_stable") is False:  # as our own unsettled figure's line says
                    console.print(Text(f"{peer} {key} on {row['case']} {row['dtype']} is unstable: batch medians did "
                                       f"not agree in {result[f'{key}_batches']} batches", style="yellow"))  # fmt: skip
            for key in ("eager", "compile", "device", "numpy"):
                if result.get(f"{key}_ok") is False:
                    console.print(Text(f"{peer} {key} on {row['case']} {row['dtype']} is WRONG: "
                                       f"max error {result[f'{key}_error']:.3g}", style="red"))  # fmt: skip
    for h in host_rows:
        if "error" in h:
            console.print(Text(f"host per call, {h['kernel']}: {h['error']}", style="red"))
        else:
            console.print(f"host per call, {h['kernel']} {assignments(h['shapes'])} (GPU in/out, cached plan, {h['calls']} calls): "
                          f"median {h['median_s'] * 1e6:.1f} µs, p90 {h['p90_s'] * 1e6:.1f} µs"
                          + (f" (after the GPU timing: {h['after_gpu_timing_median_s'] * 1e6:.1f} µs)"
                             if "after_gpu_timing_median_s" in h else ""))  # fmt: skip


def plot(rows: list[dict[str, Any]], peak: float | None, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig = plot_figure(rows, peak)
    try:
        fig.savefig(path, dpi=120)
    finally:
        plt.close(fig)


#: Points the plot marks over its lines, as the table and the lines do: (label, test, style).
_PLOT_MARKS: tuple[tuple[str, Callable[[dict[str, Any]], Any], dict[str, Any]], ...] = (
    ("WRONG output", lambda row: row.get("error_ok") is False, {"marker": "x", "color": "red", "s": 90}),
    ("past memory (* in the table)", lambda row: row.get("beyond_memory"),
     {"marker": "*", "color": "gold", "edgecolors": "black", "s": 120}),
    ("unsettled or in the slow state",
     lambda row: (not row.get("stable", True) and not row.get("quick")) or row.get("slow_state", {}).get("persists"),
     {"marker": "s", "facecolors": "none", "edgecolors": "gray", "s": 110}),
)  # fmt: skip


def plot_figure(rows: list[dict[str, Any]], peak: float | None) -> Any:
    """Bandwidth against bytes moved: a line per kernel and dtype, the copy kernel and the datasheet
    peak, and marks on the points whose figure is WRONG, past memory, or not settled."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 5.5))
    series: dict[tuple[str, str], list[tuple[int, float]]] = {}
    copies: dict[int, float] = {}
    marked: dict[str, list[tuple[int, float]]] = {label: [] for label, _, _ in _PLOT_MARKS}
    for row in rows:
        if not timed(row):
            continue
        point = (row["bytes"], row["tbps"])
        series.setdefault((row["kernel"].split(".")[-1], row["dtype"]), []).append(point)
        copies[row["bytes"]] = row["copy_tbps"]  # one copy per size, however many rows share it
        for label, applies, _ in _PLOT_MARKS:
            if applies(row):
                marked[label].append(point)
    for (kernel, dtype), points in sorted(series.items()):
        points.sort()
        ax.plot([p[0] for p in points], [p[1] for p in points], marker="o", label=f"{kernel} {dtype}")
    if copies:
        sizes = sorted(copies)
        ax.plot(sizes, [copies[n] for n in sizes], "k--", label="copy kernel (same timing)")
    for label, _, style in _PLOT_MARKS:
        if marked[label]:
            ax.scatter([p[0] for p in marked[label]], [p[1] for p in marked[label]], label=label, zorder=5, **style)
    if peak:
        ax.axhline(peak / 1e12, color="red", linestyle=":", label=f"datasheet peak {peak / 1e12:.1f} TB/s")
    ax.set_xscale("log")
    ax.set_xlabel("bytes moved per call (read + written)")
    ax.set_ylabel("effective bandwidth (TB/s)")
    ax.set_title("webgpu-kernels: bandwidth against size")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig
