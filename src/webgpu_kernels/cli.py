"""The ``webgpu-kernels`` command line: the command group and the options its commands share
(``--adapter`` and ``--trust-remote-code`` before or after the command, output files, ``--onnx-op``,
finite ranges). A KERNEL argument and the inputs typed with it are read in kernel_arguments.py;
what a command prints goes through command_output.py.

Commands: ``devices``, ``list``, ``info``, ``explain``, ``render`` (cli_inspect.py); ``run``
(cli_run.py), ``bench`` (cli_bench.py, its output in bench_report.py), ``tune`` (cli_tune.py),
``download`` (cli_hub.py), ``test``/``validate``/``digest`` (cli_package.py), ``new``/``expect`` (cli_new.py). Every library error
(:class:`~webgpu_kernels.errors.KernelError`) ends the command with one red ``error: ...`` line on
stderr and exit status 2, like click's own usage errors.
"""

from __future__ import annotations

import importlib
import json
import math
import os
import re
from pathlib import Path
from typing import Any

import click

from . import __version__
from .command_output import safe_console
from .errors import AttributeValueError, DeviceLimitError, DTypeError, KernelError, MissingInputError
from .kernel_arguments import DTYPE_ALIASES

# numpy, rich and the engine are imported where they are used, not here: the top-level --help, the
# version and a command's help load this module alone (tests/test_cli_start.py).

#: device.ADAPTER_ENV, spelled here because device.py imports wgpu (test_cli_start.py holds the two equal).
ADAPTER_ENV = "WEBGPU_KERNELS_ADAPTER"

#: Every command: the module defining it (in its COMMANDS; it imports helpers from this module,
#: kernel_arguments.py and command_output.py) and the first sentence of its help, which the top-level
#: --help and shell completion show without importing the module. A command's module is imported when the command runs, completes or shows its own help.
#: tests/test_cli_start.py holds this to the modules' commands and their help.
COMMAND_INDEX: dict[str, tuple[str, str]] = {
    "bench": ("cli_bench", "Time kernels on the GPU: effective TB/s, share of the device's peak and of a copy "
                           "kernel, and TFLOP/s where the package's bench.json gives a `flops` count."),
    "devices": ("cli_inspect", "The WebGPU adapters present: features and key limits; the chosen one marked."),
    "digest": ("cli_package", "Write or refresh PATH/metadata.json: the sha256 of every file of the package."),
    "download": ("cli_hub", "Download kernel repository REPO ('org/op', 'org/op@vN' or "
                            "https://<hub>/kernels/org/op) from the Hub."),
    "expect": ("cli_new", "Write the expected values of PATH's test.json again, from your own reference."),
    "explain": ("cli_inspect", "Which variant KERNEL would run for these inputs, and why each other one would not."),
    "info": ("cli_inspect", "The contract of KERNEL: inputs, outputs, types, attributes, tunables and variants."),
    "list": ("cli_inspect", "The kernels embedded in the library."),
    "lock": ("cli_hub", "Pin the Hub kernels of PROJECT_DIR's pyproject.toml in PROJECT_DIR/webgpu-kernels.lock."),
    "new": ("cli_new", "Write a new kernel package in PATH (a new or empty folder) to start from."),
    "render": ("cli_inspect", "The WGSL that KERNEL would run for these inputs, pass by pass (a stored tuning "
                              "result's choice included: a note on stderr says so, and names the tuning file)."),
    "run": ("cli_run", "Run KERNEL on seeded random inputs (standard normal unless --generate; bool half true): "
                       "output summary, time and error against the references."),
    "test": ("cli_package", "Run each package's test.json: every case on every variant whose `when` holds for it."),
    "tune": ("cli_tune", "Search variants and tunables per case; keep the fastest per adapter."),
    "upload": ("cli_hub", "Publish the package folder PATH as revision vN of the Hub kernel repository REPO "
                          "('org/op')."),
    "validate": ("cli_package", "Check the package folder PATH and report every problem at once."),
}  # fmt: skip


class KernelGroup(click.Group):
    """A click group that turns library errors into one red line and exit status 2, and imports a
    command's module only when that command is looked up (:data:`COMMAND_INDEX`)."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(set(COMMAND_INDEX) | set(self.commands))

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands and cmd_name in COMMAND_INDEX:
            for command in importlib.import_module(f"{__package__}.{COMMAND_INDEX[cmd_name][0]}").COMMANDS:
                self.commands.setdefault(str(command.name), command)
        return super().get_command(ctx, cmd_name)

    def resolve_command(self, ctx: click.Context, args: list[str]) -> tuple[str | None, click.Command | None, list[str]]:
        try:
            return super().resolve_command(ctx, args)
        except click.exceptions.NoSuchCommand as exc:
            # click suggests among self.commands, which holds only the commands looked up so far:
            # `tset` had lost its "Did you mean 'test'?"
            raise click.exceptions.NoSuchCommand(exc.command_name, possibilities=self.list_commands(ctx), ctx=ctx) from None

    def _listed(self) -> dict[str, click.Command]:
        """Each command as the listings show it: one not imported yet by a stand-in carrying its first
        sentence, which click cuts to the width as it cuts the command's own help."""
        listed = {name: click.Command(name, help=short) for name, (_, short) in COMMAND_INDEX.items()}
        listed.update((name, command) for name, command in self.commands.items() if name not in COMMAND_INDEX)
        return {name: listed[name] for name in sorted(listed)}

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        click.Group(self.name, commands=self._listed()).format_commands(ctx, formatter)

    def shell_complete(self, ctx: click.Context, incomplete: str) -> list[Any]:
        from click.shell_completion import CompletionItem

        items = [CompletionItem(name, help=command.get_short_help_str())
                 for name, command in self._listed().items() if name.startswith(incomplete) and not command.hidden]  # fmt: skip
        return items + click.Command.shell_complete(self, ctx, incomplete)  # the group's options, as click's own

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except KernelError as exc:
            if isinstance(exc, DTypeError) and exc.allowed and not exc.hint_replaced:  # -i's (a case's says so)
                # The contract's hint is a Python call's (.astype); here the dtype is typed after -i.
                spellings = " or ".join(f"-i {exc.argument}=DIMS:{short}" for short in _spellings(" ".join(exc.allowed)))
                if spellings:
                    exc.replace_hint(f"on the command line, a dtype {exc.type_variable} allows: {spellings}")
            if isinstance(exc, DTypeError) and exc.bound_by and not exc.hint_replaced:  # -i X=..:f16 -i bias=..:f32
                short = (_spellings(exc.bound_dtype) or [exc.bound_dtype])[0]
                exc.replace_hint(f"on the command line, type variable {exc.type_variable} takes one dtype: "
                                 f"-i {exc.argument}=DIMS:{short} like {' and '.join(map(repr, exc.bound_by))}")
            if isinstance(exc, AttributeValueError) and exc.number_meant is not None and not exc.hint_replaced:
                option = "--tunable" if exc.kind == "tunable" else "--attr"  # --attr x=true, --attr x=[1,true]
                meant = exc.number_meant if exc.list_meant is None else json.dumps(exc.list_meant, separators=(",", ":"))
                exc.replace_hint(f"on the command line: {option} {exc.argument}={meant}, a boolean is not a number here")
            if isinstance(exc, DeviceLimitError) and exc.command_line_hint and not exc.hint_replaced:
                exc.replace_hint(exc.command_line_hint)  # another adapter, as --adapter chooses it: not adapter='...'
            if isinstance(exc, MissingInputError) and exc.received == "nothing" and not exc.hint_replaced:  # no -i for it
                shorts = _spellings(exc.expected)
                dtype = shorts[0] + (f" (or {', '.join(shorts[1:])})" if len(shorts) > 1 else "") if shorts else "DTYPE"
                exc.add_note(f"on the command line: -i {exc.argument}=DIMS:{dtype}")
            _report_error(exc)
            ctx.exit(2)
        except KeyboardInterrupt as exc:  # click would say "Aborted!" with status 1, which means "a check failed"
            from rich.text import Text

            safe_console(stderr=True).print(Text("interrupted", style="red"))
            for note in getattr(exc, "__notes__", ()):  # what an interrupted upload left on the Hub
                safe_console(stderr=True).print(Text(note), soft_wrap=True)
            ctx.exit(130)


def _spellings(expected: str) -> list[str]:
    """The command line's shortest spelling of each ONNX type name ``expected`` names, in its order."""
    shortest: dict[str, str] = {}
    for alias, name in DTYPE_ALIASES.items():
        if len(alias) < len(shortest.get(name, alias + "_")):
            shortest[name] = alias
    return [shortest[word] for word in re.findall(r"[a-z]+[0-9]*", expected) if word in shortest]


def _report_error(exc: BaseException) -> None:
    from rich.text import Text

    console = safe_console(stderr=True)
    first, _, rest = str(exc).partition("\n")
    console.print(Text(f"error: {first}", style="bold red"), soft_wrap=True)
    if rest.strip():
        console.print(Text(rest.rstrip()), soft_wrap=True)
    for note in getattr(exc, "__notes__", ()):  # added on the way up (resolve_kernel)
        console.print(Text(note), soft_wrap=True)



def onnx_op_option(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """--onnx-op (run, bench) as DOMAIN.NAME (ai.onnx.Relu, com.microsoft.FastGelu)."""
    if value is not None and not re.fullmatch(r"(?:[A-Za-z_][\w-]*\.)+[A-Za-z_]\w*", value):
        raise click.BadParameter(f"expected DOMAIN.NAME (com.microsoft.FastGelu, ai.onnx.Relu), "
                                 f"got {value!r}", ctx=ctx, param=param)  # fmt: skip
    return value


def output_file(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """An output file (``--json``, ``--plot``, ``--junit``) that can be written, checked now and not
    after a run of many minutes: a name, not a folder, in a writable folder that exists. Returned with
    ``~`` expanded, as it was checked (the write had taken ``~/out.json`` literally and crashed after
    the run, while --junit refused it). ``-`` (stdout) is the caller's to allow."""
    if value is None or value == "-":
        return value
    if not value:
        raise click.BadParameter("an empty file name", ctx=ctx, param=param)
    path = Path(value).expanduser()
    if path.is_dir() or value.endswith(("/", os.sep)):  # Path drops the slash: `out/` had written a file `out`
        raise click.BadParameter(f"{value!r} is a folder, not a file name", ctx=ctx, param=param)
    folder = path.resolve().parent
    if not folder.is_dir():
        raise click.BadParameter(f"{value!r}: {str(folder)!r} {'is not a folder' if folder.exists() else 'does not exist'}",
                                 ctx=ctx, param=param)  # fmt: skip
    if not os.access(folder, os.W_OK):
        raise click.BadParameter(f"cannot write {value!r}: {folder} is not a writable folder", ctx=ctx, param=param)
    return str(path)


class FiniteFloatRange(click.FloatRange):
    """click's FloatRange, less NaN and infinity: NaN passes every bound (its comparisons are all
    false), so `--timeout nan` meant no timeout, and `--warm-up inf` warmed up for ever."""

    name = "finite float range"

    def convert(self, value: Any, param: Any, ctx: Any) -> Any:
        number = super().convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number", param, ctx)
        return number


def adapter_request_of(ctx: click.Context) -> str | None:
    return ctx.find_root().params.get("adapter")


def _adapter_after_the_command(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    if value is None:
        return value
    root = ctx.find_root()
    before = root.params.get("adapter")
    # The environment's choice gives way to the command line's, as it does before the command; two
    # different ones on the command line would leave one silently unused.
    given_before = root.get_parameter_source("adapter") == click.core.ParameterSource.COMMANDLINE
    if given_before and before is not None and before.strip().lower() != value.strip().lower():
        raise click.BadParameter(f"{value!r} after the command, but --adapter {before!r} before it: give one of them",
                                 ctx=ctx, param=param)  # fmt: skip
    root.params["adapter"] = value  # what adapter_request_of() reads
    return value


def adapter_option(fn: Any) -> Any:
    """``--adapter`` after a command that opens an adapter too: ``tune KERNEL --adapter gl`` had been
    "No such option", with nothing saying it goes before the command."""
    return click.option("--adapter", metavar="NAME|BACKEND", expose_value=False, callback=_adapter_after_the_command,
                        help="The WebGPU adapter: a backend (vulkan, metal, d3d12, gl) or part of its name "
                             f"(also accepted before the command, or from ${ADAPTER_ENV}). "
                             "Default: the best one present.")(fn)  # fmt: skip


# --- the commands ---------------------------------------------------------------------------------


@click.group(cls=KernelGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--adapter", metavar="NAME|BACKEND", envvar=ADAPTER_ENV, show_envvar=True, default=None,
              help="The WebGPU adapter: a backend (vulkan, metal, d3d12, gl) or part of its name (the commands "
                   "that open one also take it after the command). Default: the best one present.")  # fmt: skip
@click.option("--trust-remote-code", is_flag=True,
              help="Allow a Hub repository outside the webgpu-kernels organisation (or given by URL) as KERNEL.")
@click.version_option(__version__, "--version", "-V", prog_name="webgpu-kernels")
def main(adapter: str | None, trust_remote_code: bool) -> None:
    """Run manifest-driven WebGPU compute kernels natively (wgpu-py).

    KERNEL is an embedded op id (see `webgpu-kernels list`), the path of a kernel package
    folder holding a manifest.json and its templates, or a Hub kernel repository org/op[@vN]
    (contract version 1 unless @vN or @REVISION follows).
    """


if __name__ == "__main__":  # `python -m webgpu_kernels.cli` defined the commands and ran none, exiting 0
    from webgpu_kernels.__main__ import main as entry  # the entry's Ctrl-C handling, and one copy of this module

    entry()
