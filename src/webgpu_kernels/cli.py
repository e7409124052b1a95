"""The ``webgpu-kernels`` command line: the command group and what its commands share (the console,
``--input`` specs, kernel names, output files, options).

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
import shlex
import shutil
import subprocess
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit, urlunsplit

import click

from . import __version__
from .errors import AttributeValueError, DTypeError, KernelError, MissingInputError, PackageError, printable

# numpy, rich and the engine are imported where they are used, not here: the top-level --help, the
# version and a command's help load this module alone (tests/test_cli_start.py).
if TYPE_CHECKING:
    from rich.console import Console

    from .call_inputs import TensorMeta
    from .kernel import Kernel

#: device.ADAPTER_ENV, spelled here because device.py imports wgpu (test_cli_start.py holds the two equal).
ADAPTER_ENV = "WEBGPU_KERNELS_ADAPTER"

#: ``--input`` dtype spellings -> ONNX element type names. Types the kernels cannot take are
#: accepted here on purpose: the engine's contract check reports them.
DTYPE_ALIASES: dict[str, str] = {
    "f32": "float32", "float32": "float32", "float": "float32",
    "f16": "float16", "float16": "float16", "half": "float16",
    "f64": "float64", "float64": "float64", "double": "float64",
    "bf16": "bfloat16", "bfloat16": "bfloat16",
    "i8": "int8", "int8": "int8", "i16": "int16", "int16": "int16",
    "i32": "int32", "int32": "int32", "int": "int32", "i64": "int64", "int64": "int64",
    "u8": "uint8", "uint8": "uint8", "u16": "uint16", "uint16": "uint16",
    "u32": "uint32", "uint32": "uint32", "u64": "uint64", "uint64": "uint64",
    "bool": "bool",
}  # fmt: skip

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.\-]*\Z")


# --- output helpers ---------------------------------------------------------------------------------


def _drop_the_rest(stream: Any) -> None:
    """What is still written to ``stream``, whose reader has closed the pipe, goes to os.devnull."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, stream.fileno())
    os.close(devnull)


def _echo(text: str = "") -> None:
    """click.echo to stdout, whose reader may stop early (`--json | head -1`) as for the console's
    text: click exits 1 on the broken pipe, which says a case failed."""
    try:
        click.echo(text)
    except BrokenPipeError:
        _drop_the_rest(sys.stdout)


@cache
def package_text_console() -> type[Console]:
    """The console class for text that may come from a package: every string and Text it prints
    goes through :func:`printable` (one for one, so a Text's styled spans still fit). Built on first
    use, as rich is imported then."""
    from rich.console import Console
    from rich.text import Text

    class PackageTextConsole(Console):
        def render_str(self, text: str, **options: Any) -> Text:
            return super().render_str(printable(text), **options)

        def on_broken_pipe(self) -> None:
            # A reader that stopped early (`| head -1`): the rest is dropped and the command ends with
            # its own verdict. rich exits 1 here, which says "a case failed", so a passing `test | head`
            # failed a CI step run with pipefail; click.echo's output is _echo's.
            self.quiet = True
            _drop_the_rest(self.file)

        def render(self, renderable: Any, options: Any = None) -> Any:
            if isinstance(renderable, Text):
                plain = printable(renderable.plain)
                if plain != renderable.plain:
                    renderable = renderable.copy()
                    renderable.plain = plain
            return super().render(renderable, options)

    return PackageTextConsole


def _console(*, stderr: bool = False) -> Console:
    """A console that never reads markup from manifest text, nor prints its control characters;
    wide when not writing to a terminal."""
    stream = sys.stderr if stderr else sys.stdout
    width = None
    columns = os.environ.get("COLUMNS")
    # rich reads COLUMNS=0 (a terminal of unknown size, as some CI runners report it) as a width of
    # 0 and then prints nothing at all: tables, verdicts and error messages were lost. Unset, then.
    zero = columns is not None and columns.isdigit() and int(columns) == 0
    if not (hasattr(stream, "isatty") and stream.isatty()):
        if columns is None or zero:
            width = 160
    elif zero:
        width = shutil.get_terminal_size().columns  # the terminal's own (it ignores a COLUMNS of 0)
    return package_text_console()(stderr=stderr, markup=False, highlight=False, emoji=False, width=width)


def is_live(console: Console) -> bool:
    """Whether progress may redraw in place: rich's terminal, on a stream that is one. FORCE_COLOR
    (set by many CI configurations for coloured logs) makes rich take any stream for a terminal,
    and its live frames then filled the log where a line per case belongs."""
    isatty = getattr(console.file, "isatty", None)
    # Nor on a dumb terminal (TERM=dumb: an editor's shell, some CI ptys): rich draws no live frames
    # there, so a tune search of minutes showed nothing, neither progress nor the lines a log gets.
    return console.is_terminal and not console.is_dumb_terminal and bool(isatty and isatty())


def _echo_json(data: Any) -> None:
    _echo(json.dumps(_jsonable(data), indent=2, allow_nan=False))


def _jsonable(value: Any) -> Any:
    """Plain JSON values: tuples to lists, NumPy scalars to Python, non-finite floats to strings."""
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        items = sorted(value) if isinstance(value, (set, frozenset)) else value
        return [_jsonable(v) for v in items]
    numpy = sys.modules.get("numpy")  # a NumPy scalar exists only once numpy is imported; not imported for it
    if numpy is not None and isinstance(value, numpy.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)  # "nan", "inf", "-inf": JSON has no such numbers
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return str(value)


def _fmt(value: Any) -> str:
    """A manifest value as the manifest writes it (JSON), strings bare."""
    return value if isinstance(value, str) else json.dumps(_jsonable(value))


#: Every command: the module defining it (in its COMMANDS; it imports helpers from this module) and the
#: first sentence of its help, which the top-level --help and shell completion show without importing
#: the module. A command's module is imported when the command runs, completes or shows its own help.
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
            if isinstance(exc, MissingInputError) and exc.received == "nothing" and not exc.hint_replaced:  # no -i for it
                shorts = _spellings(exc.expected)
                dtype = shorts[0] + (f" (or {', '.join(shorts[1:])})" if len(shorts) > 1 else "") if shorts else "DTYPE"
                exc.add_note(f"on the command line: -i {exc.argument}=DIMS:{dtype}")
            _report_error(exc)
            ctx.exit(2)
        except KeyboardInterrupt as exc:  # click would say "Aborted!" with status 1, which means "a check failed"
            from rich.text import Text

            _console(stderr=True).print(Text("interrupted", style="red"))
            for note in getattr(exc, "__notes__", ()):  # what an interrupted upload left on the Hub
                _console(stderr=True).print(Text(note), soft_wrap=True)
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

    console = _console(stderr=True)
    first, _, rest = str(exc).partition("\n")
    console.print(Text(f"error: {first}", style="bold red"), soft_wrap=True)
    if rest.strip():
        console.print(Text(rest.rstrip()), soft_wrap=True)
    for note in getattr(exc, "__notes__", ()):  # added on the way up (resolve_kernel)
        console.print(Text(note), soft_wrap=True)


# --- argument parsing ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class InputSpec:
    name: str
    shape: tuple[int, ...]
    dtype: str  # ONNX element type name
    #: How random data for it is drawn (--generate): bench.json's ``generate`` object; None: the default.
    generate: Mapping[str, Any] | None = None

    def meta(self) -> TensorMeta:
        from .call_inputs import TensorMeta

        return TensorMeta(self.shape, self.dtype)

    def text(self) -> str:
        return f"{self.name}={'x'.join(map(str, self.shape)) or 'scalar'}:{self.dtype}"


def parse_input_spec(spec: str) -> InputSpec:
    """``NAME=DIMS:DTYPE``: ``X=2x64x320:f16``; rank 0 as ``X=:f32`` or ``X=scalar:f32``."""
    name, eq, rest = spec.partition("=")
    name = name.strip()
    if not eq or not name:
        raise ValueError(f"{spec!r} is not NAME=DIMS:DTYPE (e.g. X=2x64x320:f16)")
    if not _NAME.match(name):
        raise ValueError(f"{name!r} is not an input name")
    dims, colon, dtype = rest.rpartition(":")
    if not colon:
        raise ValueError(f"{spec!r} has no dtype: write NAME=DIMS:DTYPE (e.g. {name}=2x64x320:f16)")
    _check_dtype_alias(dtype, f" in {spec!r}")
    dims = dims.strip().lower()
    shape: list[int] = []
    if dims not in ("", "scalar"):
        for part in dims.split("x"):
            part = part.strip()
            if not (part.isascii() and part.isdigit()):  # "²".isdigit() is true, and int() refuses it
                raise ValueError(f"bad dimension {part!r} in {spec!r}: dims are non-negative integers joined by 'x'")
            shape.append(int(part))
    return InputSpec(name, tuple(shape), DTYPE_ALIASES[dtype.strip().lower()])


#: --generate's distributions: the names of their two parameters, as bench.json's ``generate`` has them.
_DISTRIBUTIONS = {"uniform": ("low", "high"), "normal": ("mean", "std")}


def parse_generate_spec(spec: str) -> tuple[str, dict[str, Any]]:
    """``NAME=uniform:LOW:HIGH`` or ``NAME=normal:MEAN:STD``: the input's name and bench.json's
    ``generate`` object for it (``{"distribution": "uniform", "low": 0.0, "high": 49407.0}``)."""
    name, eq, rest = spec.partition("=")
    name = name.strip()
    if not eq or not name:
        raise ValueError(f"{spec!r} is not NAME=uniform:LOW:HIGH or NAME=normal:MEAN:STD")
    distribution, *numbers = (part.strip() for part in rest.split(":"))
    params = _DISTRIBUTIONS.get(distribution.lower())
    if params is None or len(numbers) != 2:
        raise ValueError(f"{spec!r}: write {name}=uniform:LOW:HIGH or {name}=normal:MEAN:STD")
    values = []
    for param, text in zip(params, numbers, strict=True):
        try:
            value = float(text)
        except ValueError:
            value = math.nan
        if not math.isfinite(value):
            raise ValueError(f"{param} in {spec!r} must be a finite number, got {text!r}")
        values.append(value)
    if distribution.lower() == "normal" and values[1] < 0:
        raise ValueError(f"std in {spec!r} must be at least 0, got {numbers[1]!r}")
    generate = {"distribution": distribution.lower(), **dict(zip(params, values, strict=True))}
    from .casefile import generate_errors

    problems = generate_errors(generate, "--generate", name)  # as bench.json's `generate` is checked
    if problems:
        raise ValueError(f"{spec!r}: {problems[0].detail}")
    return name, generate


def _generate_callback(ctx: click.Context, param: click.Parameter, values: tuple[str, ...]) -> dict[str, dict[str, Any]]:
    return _by_name(ctx, param, values, parse_generate_spec, "input {!r} given twice")


GENERATE_OPTION = click.option(
    "--generate", "generators", multiple=True, metavar="NAME=DIST:A:B", callback=_generate_callback,
    help="Draw -i input NAME from uniform:LOW:HIGH or normal:MEAN:STD (rounded to its dtype) instead of the "
         "standard normal: integer inputs that index something need their range. Repeatable.")  # fmt: skip


def with_generators(inputs: Mapping[str, InputSpec], generators: Mapping[str, dict[str, Any]]) -> dict[str, InputSpec]:
    """``inputs`` with --generate's distributions attached; one for an input no -i gives is refused."""
    unknown = sorted(set(generators) - set(inputs))
    if unknown:
        given = ", ".join(inputs) or "none"
        raise click.UsageError(f"--generate names {', '.join(map(repr, unknown))}, which no -i/--input gives "
                               f"(-i inputs: {given})")  # fmt: skip
    return {name: replace(spec, generate=generators.get(name)) for name, spec in inputs.items()}


def parse_value(text: str) -> Any:
    """A JSON value (``1.0``, ``3``, ``true``, ``"s"``, ``[1, 2]``), ``nan``/``inf``/``-inf`` (the
    case files' spellings, as JSON's NaN and Infinity), else the text as a string."""
    from .case_data import SPECIAL_STRINGS

    if text.lower() in SPECIAL_STRINGS:
        return SPECIAL_STRINGS[text.lower()]
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def parse_assignment(text: str) -> tuple[str, Any]:
    name, eq, value = text.partition("=")
    name = name.strip()
    if not eq or not name:
        raise ValueError(f"{text!r} is not NAME=VALUE")
    return name, parse_value(value.strip())


def _by_name(ctx: click.Context, param: click.Parameter, values: tuple[str, ...],
             parse: Callable[[str], tuple[str, Any]], twice: str) -> dict[str, Any]:  # fmt: skip
    """A repeatable NAME=... option's values parsed by name, each ValueError as the option's usage
    error; a name given twice is refused (``twice`` formats it)."""
    items: dict[str, Any] = {}
    for value in values:
        try:
            name, item = parse(value)
        except ValueError as exc:
            raise click.BadParameter(str(exc), ctx=ctx, param=param) from None
        if name in items:
            raise click.BadParameter(twice.format(name), ctx=ctx, param=param)
        items[name] = item
    return items


def _inputs_callback(ctx: click.Context, param: click.Parameter, values: tuple[str, ...]) -> dict[str, InputSpec]:
    def parse(value: str) -> tuple[str, InputSpec]:
        spec = parse_input_spec(value)
        return spec.name, spec

    return _by_name(ctx, param, values, parse, "input {!r} given twice")


def _assignments_callback(ctx: click.Context, param: click.Parameter, values: tuple[str, ...]) -> dict[str, Any]:
    return _by_name(ctx, param, values, parse_assignment, "{!r} given twice")


@dataclass(frozen=True)
class KernelRef:
    """What a KERNEL argument names: an embedded op id, a package folder, or a Hub repository
    (``pin`` is what followed ``@``: ``v2``, a revision, or ``""``)."""

    kind: str  # "embedded" | "folder" | "hub" | "unknown"
    path: Path  # the argument read as a path (the package folder when kind is "folder")
    repo: str = ""
    pin: str = ""


def classify_kernel_ref(ref: str) -> KernelRef:
    """The one rule every command uses to read a KERNEL argument. An embedded id that is also a
    package folder in the working directory is refused as ambiguous (``./id`` names the folder):
    either reading substitutes one package for the other without a word, a copy being edited for
    the shipped kernel, or the shipped kernel for the package a CI script checks (it had passed a
    broken copy). Anything that exists, or starts like a path, is a folder; else
    ``org/op[@pin]`` is a Hub repository."""
    try:
        path = Path(ref).expanduser()
    except RuntimeError:  # ~nosuchuser: no home to expand, so no such folder (it had been a traceback)
        path = Path(ref)
    from .package import embedded_ids, embedded_root

    if ref in embedded_ids():
        if (path / "manifest.json").exists() and path.resolve() != (embedded_root() / ref).resolve():
            raise click.UsageError(f"{ref!r} names both the embedded kernel and the package folder ./{ref} here: "
                                   f"write ./{ref} for the folder, or run from another directory for the "
                                   "embedded kernel")  # fmt: skip
        return KernelRef("embedded", path)
    if _exists(path) or ref.startswith((".", "/", "~")) or os.sep in ref and os.sep != "/":
        return KernelRef("folder", path)
    if "/" in ref:
        repo, pin = split_pin(ref)
        if repo.count("/") >= 2 and not re.match(r"[A-Za-z][A-Za-z0-9+.\-]+:", repo):
            return KernelRef("folder", path)  # a repository id has one slash: `a/b/c` is a path (locations.classify)
        return KernelRef("hub", path, repo=repo, pin=pin)
    return KernelRef("unknown", path)


def _exists(path: Path, *, denied: bool = True) -> bool:
    """Whether something is at ``path``; not where no file can be: a name too long, a NUL byte
    (their OSError and ValueError had been tracebacks). Where a folder on the way is one this user
    may not search, ``denied``: by default taken as there, so that opening it says so (a local
    ``org/op`` had been read as a Hub repository)."""
    try:
        return path.exists()
    except PermissionError:
        return denied
    except (OSError, ValueError):
        return False


class FolderPath(click.ParamType):
    """A PATH argument that must name an existing folder: refused as a KERNEL argument is
    (``error: ./nope: no such folder``, exit 2), not in click's words. Converts to a Path."""

    name = "path"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Path:
        return kernel_folder(os.fspath(value))  # `org/op/` asks about the Hub id here too


FOLDER = FolderPath()


def shell_word(path: str) -> str:
    """``path`` as one word of the shell the user copies a suggested command into (new's next: line,
    digest --check's and test's advice): a folder name with a space or a quote had been printed
    bare, and the command run as written split it in two; one starting with "-" read as options."""
    if path.startswith("-"):
        path = f".{os.sep}{path}"
    if os.name == "nt":
        return subprocess.list2cmdline([path])
    home = "~" + os.sep
    if path.startswith(home) and len(path) > len(home):  # the shell expands an unquoted ~/ only
        return home + shlex.quote(path[len(home):])
    return shlex.quote(path)


def split_pin(ref: str) -> tuple[str, str]:
    """``org/op@pin`` as (``org/op``, ``pin``); ``""`` where no @ follows. In a URL only its path's @
    counts: the first @ of https://user:token@host/kernels/org/op had cut it into the repository
    'https://user:token', which every message then showed."""
    if "://" in ref:
        url = urlsplit(ref)
        if "@" not in url.path:
            return ref, ""
        path, _, pin = url.path.partition("@")
        return urlunsplit(url._replace(path=path)), pin
    repo, _, pin = ref.partition("@")
    return repo, pin


def _hub_repo(ref: str) -> bool:
    """Whether get_kernel reads ``ref`` as a Hub repository (``org/op``). A folder of that name here
    had silently stood in for it, unverified and without the trust another organisation needs
   ."""
    from .locations import classify

    try:
        return classify(ref).kind == "hub"
    except PackageError:
        return False


def kernel_folder(ref: str) -> Path:
    """:func:`check_folder` of a KERNEL argument read as a folder, for every command alike (validate
    too): ``org/op/`` (a browser's URL path) where nothing is asks whether the Hub repository was
    meant; it stays a path by the two-slash rule, so no disk state decides Hub vs folder."""
    from .locations import refuse_slashed_repo_id
    from .package import check_folder

    refuse_slashed_repo_id(ref)
    return check_folder(ref)


def resolve_kernel(ref: str) -> Kernel:
    """The kernel a KERNEL argument names (:func:`classify_kernel_ref`); a Hub repository is
    contract version 1 unless ``@vN`` or ``@REVISION`` follows."""
    from .api import get_kernel, load_kernel

    where = classify_kernel_ref(ref)
    # The repository part decides: `org/op@v1` as a folder's name had loaded that folder, unverified,
    # where the user asked for the Hub's (classify refuses the pinned string whole).
    if where.kind == "folder" and _exists(where.path / "manifest.json", denied=False) and _hub_repo(split_pin(ref)[0]):
        # as for an embedded id; commands that take only a folder (validate, digest) read it
        # "names a Hub repository" had read as if one had been found: the Hub is not asked
        raise click.UsageError(f"{ref!r} reads both as a Hub repository id (org/op) and as the package folder ./{ref} "
                               f"here: write ./{ref} for the folder, or run from another directory for the Hub "
                               "repository")  # fmt: skip
    if where.kind == "folder":
        kernel_folder(ref)
        return load_kernel(ref)  # the argument as typed: a refusal names ./x, which Path drops
    if where.kind == "hub":
        try:
            return _from_hub(where)
        except PackageError as exc:
            # `tests/demo.Gathr` (a typo) reads as a Hub repository because it does not exist here;
            # the trust refusal alone had advised --trust-remote-code, which fetches it from the Hub.
            first = where.repo.split("/")[0]
            if Path(first).expanduser().is_dir():  # the folder is the repository part: a ./ path takes no @pin
                exc.add_note(f"note: there is no folder {where.repo!r} here (a folder {first!r} is); "
                             f"to name a local package folder, write ./{where.repo}")  # fmt: skip
            raise
    return get_kernel(ref)  # embedded, or the library's "no embedded kernel" error


def hub_pin(pin: str) -> tuple[int | None, str | None]:
    """(version, revision) of the ``pin`` after a Hub KERNEL argument's @: ``vN`` is contract version N, another
    a revision, none version 1. (ASCII digits only: ``"v²"[1:].isdigit()`` is true, and int() of it
    raised a ValueError.)"""
    if not pin:
        return 1, None
    match = re.fullmatch(r"v([0-9]+)", pin)
    return (int(match[1]), None) if match else (None, pin)


def _from_hub(where: KernelRef) -> Kernel:
    from .api import get_kernel

    version, revision = hub_pin(where.pin)
    return get_kernel(where.repo, version=version, revision=revision, trust_remote_code=trusting())


def trusting() -> bool:
    """Whether the command line says --trust-remote-code (before the command)."""
    ctx = click.get_current_context(silent=True)
    return bool(ctx and ctx.find_root().params.get("trust_remote_code"))


def _trust_after_the_command(ctx: click.Context, param: click.Parameter, value: bool) -> bool:
    if value:
        ctx.find_root().params["trust_remote_code"] = True  # what trusting() reads
    return value


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


def dtypes_callback(ctx: Any, param: Any, values: tuple[str, ...]) -> tuple[str, ...]:
    """bench's and tune's --dtype, in -i's spellings: a typo (`fp16`) had matched no case, and the
    error blamed the filters as a whole."""
    for value in values:
        try:
            _check_dtype_alias(value)
        except ValueError as exc:
            raise click.BadParameter(str(exc), ctx, param) from None
    return values


def _check_dtype_alias(dtype: str, where: str = "") -> None:
    """Refuse a dtype the command line does not spell (-i's :f16, --dtype f16), naming the known ones."""
    if dtype.strip().lower() not in DTYPE_ALIASES:
        raise ValueError(f"unknown dtype {dtype.strip()!r}{where} (known: {', '.join(sorted(set(DTYPE_ALIASES)))})")


class FiniteFloatRange(click.FloatRange):
    """click's FloatRange, less NaN and infinity: NaN passes every bound (its comparisons are all
    false), so `--timeout nan` meant no timeout, and `--warm-up inf` warmed up for ever."""

    name = "finite float range"

    def convert(self, value: Any, param: Any, ctx: Any) -> Any:
        number = super().convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number", param, ctx)
        return number


def trust_option(fn: Any) -> Any:
    """``--trust-remote-code`` after a KERNEL command too, as ``download`` takes it: it had been
    "No such option" there, with nothing saying it goes before the command."""
    return click.option("--trust-remote-code", is_flag=True, expose_value=False, callback=_trust_after_the_command,
                        help="Allow a Hub repository outside the webgpu-kernels organisation (or given by URL) "
                             "as KERNEL (also accepted before the command).")(fn)  # fmt: skip


def _adapter(ctx: click.Context) -> str | None:
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
    root.params["adapter"] = value  # what _adapter() reads
    return value


def adapter_option(fn: Any) -> Any:
    """``--adapter`` after a command that opens an adapter too: ``tune KERNEL --adapter gl`` had been
    "No such option", with nothing saying it goes before the command."""
    return click.option("--adapter", metavar="NAME|BACKEND", expose_value=False, callback=_adapter_after_the_command,
                        help="The WebGPU adapter: a backend (vulkan, metal, d3d12, gl) or part of its name "
                             f"(also accepted before the command, or from ${ADAPTER_ENV}). "
                             "Default: the best one present.")(fn)  # fmt: skip


def _input_options(fn: Any) -> Any:
    fn = click.option("--tunable", "tunables", multiple=True, metavar="NAME=VALUE", callback=_assignments_callback,
                      help="Override a tunable (value parsed as JSON, else a string). Repeatable.")(fn)  # fmt: skip
    fn = click.option("--attr", "attrs", multiple=True, metavar="NAME=VALUE", callback=_assignments_callback,
                      help="Set an attribute (value parsed as JSON, else a string). Repeatable.")(fn)  # fmt: skip
    fn = click.option("--input", "-i", "inputs", multiple=True, metavar="NAME=DIMS:DTYPE", callback=_inputs_callback,
                      help="An input tensor: dims joined by 'x', dtype f32/f16/... "
                           "(X=2x64x320:f16; rank 0: X=:f32 or X=scalar:f32). Repeatable.")(fn)  # fmt: skip
    fn = click.argument("kernel")(fn)
    return fn


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
