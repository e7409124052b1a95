"""What a command prints: click.echo and JSON on a stdout whose reader may stop early, the rich
console for text that may come from a package (no markup read, no control characters printed), the
values as a manifest writes them, a path as one shell word.

No rich at import: the console class is built on first use, so a help or the version loads none.
"""

from __future__ import annotations

import json
import math
import os
import shlex
import shutil
import subprocess
import sys
from collections.abc import Mapping
from functools import cache
from typing import TYPE_CHECKING, Any

import click

from .errors import printable

if TYPE_CHECKING:
    from rich.console import Console


def _drop_the_rest(stream: Any) -> None:
    """What is still written to ``stream``, whose reader has closed the pipe, goes to os.devnull."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, stream.fileno())
    os.close(devnull)


def echo_stdout(text: str = "") -> None:
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
            # failed a CI step run with pipefail; click.echo's output is echo_stdout's.
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


def safe_console(*, stderr: bool = False) -> Console:
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


def echo_json(data: Any) -> None:
    echo_stdout(json.dumps(jsonable(data), indent=2, allow_nan=False))


def jsonable(value: Any) -> Any:
    """Plain JSON values: tuples to lists, NumPy scalars to Python, non-finite floats to strings."""
    if isinstance(value, Mapping):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        items = sorted(value) if isinstance(value, (set, frozenset)) else value
        return [jsonable(v) for v in items]
    numpy = sys.modules.get("numpy")  # a NumPy scalar exists only once numpy is imported; not imported for it
    if numpy is not None and isinstance(value, numpy.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)  # "nan", "inf", "-inf": JSON has no such numbers
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return str(value)


def as_manifest_text(value: Any) -> str:
    """A manifest value as the manifest writes it (JSON), strings bare."""
    return value if isinstance(value, str) else json.dumps(jsonable(value))


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
