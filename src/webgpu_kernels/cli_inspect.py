"""The commands that describe without running: ``devices`` (the adapters), ``list`` (the embedded
kernels), ``info`` (a package's contract), ``explain`` (the variant a call would run, and why the
others would not) and ``render`` (its WGSL)."""

from __future__ import annotations

import re
import textwrap
from typing import TYPE_CHECKING, Any

import click
from rich.table import Table
from rich.text import Text

from .cli import adapter_option, adapter_request_of
from .command_output import as_manifest_text, echo_json, echo_stdout, safe_console
from .errors import printable
from .kernel_arguments import InputSpec, input_options, resolve_kernel, trust_option

# The engine (wgpu, the execution stack) is imported by the commands that use it: `list` reads the
# manifests alone, and no command's --help needs it.
if TYPE_CHECKING:
    from .device import AdapterSummary
    from .kernel import Kernel

#: Limits ``devices`` shows (WebGPU names, camelCase).
KEY_LIMITS = (
    "maxStorageBufferBindingSize", "maxBufferSize", "maxComputeWorkgroupsPerDimension",
    "maxComputeInvocationsPerWorkgroup", "maxComputeWorkgroupSizeX", "maxComputeWorkgroupStorageSize",
)  # fmt: skip

#: ``--output NAME`` (repeatable): the call's ``outputs=``, the outputs it asks for (run, explain, render).
OUTPUT_NAMES_OPTION = click.option(
    "--output", "output_names", metavar="NAME", multiple=True,
    help="Ask for this output only (repeatable): the call's outputs=. Optional outputs not named are "
         "not computed where a variant can skip them. Default: every output the chosen variant writes.")  # fmt: skip


def _first_sentence(text: str) -> str:
    text = " ".join(text.split())
    match = re.match(r"^(.+?[.!?])(?=\s+[A-Z`(]|$)", text)
    return match.group(1) if match else text


@click.command("devices")
@adapter_option
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_context
def devices_cmd(ctx: click.Context, as_json: bool) -> None:
    """The WebGPU adapters present: features and key limits; the chosen one marked."""
    from .device import NO_ADAPTER, choose_adapter, list_adapters

    adapters = list_adapters()
    chosen = choose_adapter(adapter_request_of(ctx)).index if adapters else None
    if as_json:
        echo_json([_adapter_dict(a, a.index == chosen) for a in adapters])
        return
    console = safe_console()
    if not adapters:
        console.print(NO_ADAPTER, soft_wrap=True)  # one line, as the error is: a CI log is searched for it
        return
    table = Table(title="WebGPU adapters", title_justify="left")
    for col in ("#", "name", "backend", "type", "chosen"):
        table.add_column(col)
    for a in adapters:
        table.add_row(str(a.index), a.name, a.backend, a.adapter_type, "yes" if a.index == chosen else "")
    console.print(table)
    for a in adapters:
        console.print()
        title = Text.assemble((f"[{a.index}] {a.label()}", "bold"), (" (chosen)" if a.index == chosen else "", "green"))
        console.print(title)
        if a.description and a.description != a.name:
            console.print(f"  driver: {a.description}")
        limits = _camel_limits(a)
        console.print("  shader-f16: " + ("yes" if "shader-f16" in a.features else "no"))
        for name in KEY_LIMITS:
            console.print(f"  {name}: {limits.get(name, '-')}")
        console.print("  device.features (what manifests see): " + (", ".join(a.device_features) or "none"))
        console.print(f"  adapter features, wgpu-native's names ({len(a.features)}):")
        # Wrapped here, not by a Rich Padding, which pads every line with spaces to the widest one.
        wrapped = textwrap.fill(", ".join(sorted(a.features)), width=max(console.width, 40), initial_indent="    ",
                                subsequent_indent="    ", break_on_hyphens=False)  # fmt: skip
        console.print(Text(wrapped), soft_wrap=True)


def _camel(name: str) -> str:
    head, *rest = name.split("-")
    return head + "".join(part.capitalize() for part in rest)


def _camel_limits(adapter: AdapterSummary) -> dict[str, int]:
    return {_camel(k): v for k, v in adapter.limits.items()}


def _adapter_dict(a: AdapterSummary, chosen: bool) -> dict[str, Any]:
    limits = _camel_limits(a)
    return {
        "index": a.index, "name": a.name, "vendor": a.vendor, "backend": a.backend, "type": a.adapter_type,
        "description": a.description, "chosen": chosen, "features": sorted(a.features),
        "deviceFeatures": list(a.device_features),
        "limits": {k: limits.get(k) for k in KEY_LIMITS}, "allLimits": dict(sorted(limits.items())),
    }  # fmt: skip


@click.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def list_cmd(as_json: bool) -> None:
    """The kernels embedded in the library."""
    from .manifest import parse_manifest
    from .package import MANIFEST_FILE, embedded_ids, open_embedded

    rows: list[dict[str, Any]] = []
    for op_id in embedded_ids():
        # the manifest alone, as a Kernel reads it (digests checked): a Kernel would import wgpu
        package = open_embedded(op_id)
        manifest = parse_manifest(package.read_json(MANIFEST_FILE), file=str(package.root / MANIFEST_FILE))
        description = _first_sentence(manifest.description)
        rows.append({"op": op_id, "variants": [v.id for v in manifest.variants], "description": description})
    if as_json:
        echo_json(rows)
        return
    table = Table(title="Embedded kernels", title_justify="left")
    table.add_column("op id", no_wrap=True)
    table.add_column("variants")
    table.add_column("description")
    for row in rows:
        table.add_row(row["op"], ", ".join(row["variants"]), row["description"])
    safe_console().print(table)


@click.command("info")
@trust_option
@click.argument("kernel")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def info_cmd(kernel: str, as_json: bool) -> None:
    """The contract of KERNEL: inputs, outputs, types, attributes, tunables and variants."""
    k = resolve_kernel(kernel)
    data = kernel_info(k)
    if as_json:
        echo_json(data)
        return
    _print_info(data)


def kernel_info(kernel: Kernel) -> dict[str, Any]:
    """The contract of a kernel as plain data (what ``info --json`` prints)."""
    m = kernel.manifest
    descriptions = m.raw.get("attributeDescriptions", {}) or {}
    return {
        "op": m.op_id, "domain": m.domain, "name": m.name, "sinceVersion": m.since_version,
        "origin": kernel.package.origin, "path": str(kernel.package.root), "description": m.description,
        "inputs": [{"role": s.role, "typeVar": s.dtype, "rank": s.rank, "optional": s.optional,
                    "description": s.description} for s in m.inputs],
        "outputs": [{"role": s.role, "typeVar": s.dtype, "rank": s.rank, "shape": s.shape,
                     "description": s.description} for s in m.outputs],
        "typeConstraints": {k: list(v) for k, v in m.type_constraints.items()},
        "attributes": {name: {"default": default, "description": descriptions.get(name, "")}
                       for name, default in m.attributes.items()},
        "tunables": dict(m.tunables), "derive": dict(m.derive), "constants": dict(m.constants),
        "variants": [{
            "id": v.id, "priority": v.priority, "when": list(v.when), "constants": dict(v.constants),
            "scratch": [{"name": b.name, "bytes": b.bytes, "description": b.description} for b in v.scratch],
            "passes": [{
                "id": p.id, "name": p.name, "shader": p.shader, "entryPoint": p.entry_point,
                "sourceInputs": dict(p.source_inputs),
                "dispatch": {"threads": p.dispatch.threads, "workgroupSize": list(p.dispatch.workgroup_size)},
                "bindings": [{"name": b.name, "buffer": b.buffer_type, "arg": b.arg, "semantic": b.semantic,
                              "elementType": b.element_type, "length": b.length, "struct": b.struct_name,
                              "fields": [{"name": f.name, "type": f.type, "value": f.value} for f in b.fields]}
                             for b in p.bindings],
            } for p in v.passes],
        } for v in m.variants],
    }  # fmt: skip


def _print_info(d: dict[str, Any]) -> None:
    console = safe_console()
    console.print(Text(f"{d['op']} (since version {d['sinceVersion']})", style="bold"))
    console.print(f"{d['origin']} package: {d['path']}")
    if d["description"]:
        console.print(d["description"])

    table = Table(title="Inputs", title_justify="left")
    for col in ("role", "type", "rank", "description"):
        table.add_column(col)
    for s in d["inputs"]:
        rank = "any" if s["rank"] is None else as_manifest_text(s["rank"])
        table.add_row(s["role"] + (" (optional)" if s["optional"] else ""), s["typeVar"], rank, s["description"])
    console.print(table)

    table = Table(title="Outputs", title_justify="left")
    for col in ("role", "type", "rank", "shape", "description"):
        table.add_column(col)
    for s in d["outputs"]:
        rank = "any" if s["rank"] is None else as_manifest_text(s["rank"])
        table.add_row(s["role"], s["typeVar"], rank, s["shape"] or "-", s["description"])
    console.print(table)

    console.print(Text("Type constraints", style="italic"))
    for name, types in d["typeConstraints"].items():
        console.print(f"  {name}: {', '.join(types)}")

    if d["attributes"]:
        table = Table(title="Attributes", title_justify="left")
        for col in ("name", "default", "description"):
            table.add_column(col)
        for name, attr in d["attributes"].items():
            table.add_row(name, as_manifest_text(attr["default"]), attr["description"])
        console.print(table)
    else:
        console.print(Text("Attributes: none", style="italic"))

    for title, key in (("Tunables", "tunables"), ("Derive", "derive"), ("Constants", "constants")):
        entries = d[key]
        console.print(Text(f"{title}" + ("" if entries else ": none"), style="italic"))
        sep = " = " if key == "tunables" else " := "
        for name, value in entries.items():
            console.print(f"  {name}{sep}{as_manifest_text(value)}")

    console.print(Text("Variants (selection: highest priority whose when clauses all hold)", style="italic"))
    for v in d["variants"]:
        console.print(Text(f"  {v['id']} (priority {v['priority']:g})", style="bold"))
        for i, clause in enumerate(v["when"]):
            console.print(f"    when[{i}]: {as_manifest_text(clause)}")
        for name, value in v["constants"].items():
            console.print(f"    constant {name} := {as_manifest_text(value)}")
        for b in v["scratch"]:  # memory the passes share, never returned: its size as the manifest writes it
            console.print(f"    scratch {b['name']}: {as_manifest_text(b['bytes'])} bytes")
        for p in v["passes"]:
            wg = ", ".join(as_manifest_text(w) for w in p["dispatch"]["workgroupSize"])
            console.print(f"    pass {p['id']!r}: shader {p['shader']}, threads {as_manifest_text(p['dispatch']['threads'])}, "
                          f"workgroupSize {wg}")  # fmt: skip
            for name, value in p["sourceInputs"].items():
                console.print(f"      template input {name} := {as_manifest_text(value)}")
            bindings = ", ".join(f"{b['name']} ({b['buffer']})" for b in p["bindings"])
            console.print(f"      bindings: {bindings}")


@click.command("explain")
@trust_option
@adapter_option
@input_options
@click.option("--variant", metavar="ID", default=None, help="Explain a call that forces this variant.")
@OUTPUT_NAMES_OPTION
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_context
def explain_cmd(ctx: click.Context, kernel: str, inputs: dict[str, InputSpec], attrs: dict[str, Any],
                tunables: dict[str, Any], variant: str | None, output_names: tuple[str, ...], as_json: bool) -> None:  # fmt: skip
    """Which variant KERNEL would run for these inputs, and why each other one would not."""
    k = resolve_kernel(kernel)
    metas = {name: spec.meta() for name, spec in inputs.items()}
    explanation = k.explain(metas, attrs=attrs, variant=variant, tunables=tunables, adapter=adapter_request_of(ctx),
                            outputs=list(output_names) or None)  # fmt: skip
    if as_json:
        echo_json(explanation.as_dict())
    else:
        safe_console().print(str(explanation), soft_wrap=True)


@click.command("render")
@trust_option
@adapter_option
@input_options
@click.option("--variant", metavar="ID", default=None, help="Force this variant instead of selecting one.")
@OUTPUT_NAMES_OPTION
@click.pass_context
def render_cmd(ctx: click.Context, kernel: str, inputs: dict[str, InputSpec], attrs: dict[str, Any],
               tunables: dict[str, Any], variant: str | None, output_names: tuple[str, ...]) -> None:  # fmt: skip
    """The WGSL that KERNEL would run for these inputs, pass by pass (a stored tuning result's
    choice included: a note on stderr says so, and names the tuning file)."""
    k = resolve_kernel(kernel)
    metas = {name: spec.meta() for name, spec in inputs.items()}
    # explain's tuning_entry, as a Python user learns it, from the one check of the call: a call
    # naming a variant or tunables runs what it names, so the note is left out there
    shaders, entry = k._render(metas, attrs, variant, tunables, adapter_request_of(ctx), entry=True,
                               outputs=list(output_names) or None)  # fmt: skip
    if entry is not None:
        # On stderr: stdout stays the WGSL the call compiles, byte for byte (`render > x.wgsl`, a
        # diff against another render), and the note still reaches the terminal where stdout is a file.
        safe_console(stderr=True).print(_tuning_note(entry), soft_wrap=True)
    many = len(shaders) > 1
    for i, (pass_id, wgsl) in enumerate(shaders.items()):
        if many:
            if i:
                echo_stdout()
            echo_stdout(f"// ---- pass {pass_id} ----")
        echo_stdout(printable(wgsl.rstrip("\n")))


def _tuning_note(entry: dict[str, Any]) -> str:
    """render's stderr line on the tuning file's entry for the call's class: its choice is the WGSL
    printed, or why it is not."""
    from .explanation import tuning_entry_choice, tuning_entry_place

    place = tuning_entry_place(entry)
    if entry["used"]:
        return (f"note: a stored tuning result chose this WGSL: variant {entry['variant']!r}, tunables "
                f"{entry['tunables']} ({place}); --variant or --tunable renders another choice")  # fmt: skip
    return (f"note: a stored tuning result is not used, so this is the manifest's own selection: {entry['reason']} "
            f"({place}: {tuning_entry_choice(entry)})")  # fmt: skip


COMMANDS = [devices_cmd, list_cmd, info_cmd, explain_cmd, render_cmd]
