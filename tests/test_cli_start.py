"""The command line's start: the top-level help, the version and a command's help load no engine and no
command module they do not show; the help lists exactly the commands the group runs, each with its own
short help, as shell completion offers them."""

from __future__ import annotations

import importlib
import json
import pkgutil
import subprocess
import sys

import click
import pytest
from click.shell_completion import ShellComplete
from click.testing import CliRunner

import webgpu_kernels
from webgpu_kernels.cli import main

#: What no help or version needs: the engine's GPU binding and the libraries behind its commands.
HEAVY = ("wgpu", "numpy", "jinja2", "jsonschema", "huggingface_hub", "rich")

#: The modules holding commands, found on disk, not through the group under test.
COMMAND_MODULES = sorted(info.name for info in pkgutil.iter_modules(webgpu_kernels.__path__)
                         if info.name.startswith("cli_"))  # fmt: skip


def _real_commands() -> dict[str, click.Command]:
    """Every command the command modules define (their COMMANDS lists), by name."""
    found: dict[str, click.Command] = {}
    for name in COMMAND_MODULES:
        for command in importlib.import_module(f"webgpu_kernels.{name}").COMMANDS:
            assert command.name not in found, f"{command.name} defined twice"
            found[str(command.name)] = command
    return found


def _loaded_after(args: list[str], watched: tuple[str, ...]) -> tuple[int, str, list[str]]:
    """Run the console script's entry with ``args`` in a fresh interpreter: its exit status, its
    stdout, and which of the ``watched`` modules it imported."""
    code = (
        "import sys\n"
        "from webgpu_kernels.__main__ import main\n"
        f"sys.argv = ['webgpu-kernels', *{args!r}]\n"
        "status = 0\n"
        "try:\n"
        "    main()\n"
        "except SystemExit as exc:\n"
        "    status = exc.code or 0\n"
        f"print('LOADED', sorted(m for m in {watched!r} if m in sys.modules))\n"
        "sys.exit(status)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    out, _, loaded = result.stdout.rpartition("LOADED ")
    return result.returncode, out, eval(loaded)  # a list of strings printed by the child


OTHER_MODULES = tuple(f"webgpu_kernels.{name}" for name in COMMAND_MODULES)


@pytest.mark.parametrize(
    ("args", "shown"),
    [
        (["--help"], "Commands:"),
        (["-h"], "Commands:"),
        (["--version"], webgpu_kernels.__version__),
        (["list", "--help"], "Usage: webgpu-kernels list"),
    ],
)
def test_help_and_version_import_no_engine(args: list[str], shown: str) -> None:
    """`webgpu-kernels --help` had imported numpy, jsonschema, jinja2, wgpu and every command module
    (0.6 s on a 2-core machine); a command's help imports its own module alone."""
    own = "webgpu_kernels.cli_inspect" if args[0] == "list" else None
    status, out, loaded = _loaded_after(args, HEAVY + OTHER_MODULES)
    assert status == 0 and shown in out, (status, out)
    if own is not None:
        loaded = [m for m in loaded if m not in (own, "rich")]  # cli_inspect's own imports: rich, not the engine
    assert loaded == [], f"{' '.join(args)} imported {loaded}"


@pytest.mark.parametrize("args", [["list"], ["list", "--json"], ["info", "--help"], ["explain", "--help"]])
def test_list_and_the_inspect_commands_help_import_no_gpu_stack(args: list[str]) -> None:
    """`list` reads the embedded manifests alone: it had imported wgpu and the execution stack
    (about 0.27 s of its 0.37 s), as had every cli_inspect command's --help."""
    from webgpu_kernels.package import embedded_ids

    gpu_stack = ("wgpu", "webgpu_kernels.api", "webgpu_kernels.device", "webgpu_kernels.execution",
                 "webgpu_kernels.kernel")  # fmt: skip
    status, out, loaded = _loaded_after(args, gpu_stack)
    assert status == 0 and loaded == [], (status, loaded, out)
    if args == ["list", "--json"]:
        assert [row["op"] for row in json.loads(out)] == embedded_ids()


def _commands_section(group: click.Group, width: int) -> str:
    ctx = click.Context(group, info_name="webgpu-kernels", terminal_width=width, max_content_width=width)
    formatter = ctx.make_formatter()
    group.format_commands(ctx, formatter)
    return formatter.getvalue()


def test_help_lists_exactly_the_commands_the_group_runs(runner: CliRunner) -> None:
    real = _real_commands()
    help_text = runner.invoke(main, ["--help"], terminal_width=200).stdout
    listed = [line.split()[0] for line in help_text.partition("Commands:\n")[2].splitlines() if line.strip()]
    assert listed == sorted(real)
    ctx = click.Context(main)
    assert main.list_commands(ctx) == sorted(real)
    for name, command in real.items():
        found = main.get_command(ctx, name)
        assert found is not None and found.callback is command.callback, name
        result = runner.invoke(main, [name, "--help"])
        assert result.exit_code == 0 and result.stdout.startswith(f"Usage: main {name} "), (name, result.output)


@pytest.mark.parametrize("width", [50, 80, 120, 240])
def test_the_short_help_listed_is_the_commands_own(width: int) -> None:
    """The top-level help shows each command's short help as the command itself gives it, cut to
    the width alike, though the group lists commands it has not imported."""
    reference = click.Group("main", commands=list(_real_commands().values()))
    assert _commands_section(main, width) == _commands_section(reference, width)


@pytest.mark.parametrize("incomplete", ["", "d", "te", "nope"])
def test_shell_completion_offers_the_commands(incomplete: str) -> None:
    reference = click.Group("main", commands=list(_real_commands().values()))

    def offered(group: click.Group) -> list[tuple[str, str | None]]:
        items = ShellComplete(group, {}, "webgpu-kernels", "_WEBGPU_KERNELS_COMPLETE").get_completions([], incomplete)
        return [(item.value, item.help) for item in items]

    assert offered(main) == offered(reference)
    assert [value for value, _ in offered(main)] == sorted(
        name for name in _real_commands() if name.startswith(incomplete)
    )


def test_a_command_completes_its_options() -> None:
    """Completion inside a command reaches the command itself (its module is imported then)."""
    items = ShellComplete(main, {}, "webgpu-kernels", "_WEBGPU_KERNELS_COMPLETE").get_completions(["run"], "--ad")
    assert [item.value for item in items] == ["--adapter"]


def test_the_adapter_variable_is_the_engines() -> None:
    """cli.py spells the variable itself, to leave device.py (and wgpu) unimported."""
    from webgpu_kernels.device import ADAPTER_ENV

    option = next(p for p in main.params if p.name == "adapter")
    assert option.envvar == ADAPTER_ENV


def test_an_unknown_command_is_a_usage_error(runner: CliRunner) -> None:
    result = runner.invoke(main, ["nope"])
    assert result.exit_code == 2 and "No such command 'nope'." in result.output, result.output


@pytest.mark.parametrize("args", [["run", "--help"], ["run", "com.microsoft.QuickGelu", "-i", "X=4:f32"]])
def test_ctrl_c_while_a_command_module_loads_is_an_interrupt(args: list[str]) -> None:
    """The engine now loads with the command's module, inside the group's invoke: Ctrl-C there is the
    commands' one `interrupted` line and status 130, as during cli.py's import (`__main__.py`), not
    click's "Aborted!" and status 1."""
    code = (
        "import sys\n"
        "class Interrupting:\n"  # Ctrl-C, as the import of the command's module starts
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'webgpu_kernels.cli_run':\n"
        "            raise KeyboardInterrupt\n"
        "sys.meta_path.insert(0, Interrupting())\n"
        "from webgpu_kernels.__main__ import main\n"
        f"sys.argv = ['webgpu-kernels', *{args!r}]\n"
        "main()\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert (result.returncode, result.stderr.strip()) == (130, "interrupted"), (result.returncode, result.stderr)


@pytest.mark.parametrize(("typed", "meant"), [("tset", "test"), ("lst", "list"), ("valdate", "validate")])
def test_a_mistyped_command_is_told_the_command_meant(typed: str, meant: str) -> None:
    """click suggests from the commands the group holds, and a fresh group holds none until one is
    looked up: `webgpu-kernels tset` had lost its "Did you mean 'test'?" (run in a fresh interpreter,
    where no other test has loaded a command)."""
    code = f"import sys\nfrom webgpu_kernels.__main__ import main\nsys.argv = ['webgpu-kernels', {typed!r}]\nmain()\n"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 2, result.stderr
    assert f"No such command {typed!r}. Did you mean {meant!r}?" in result.stderr, result.stderr
