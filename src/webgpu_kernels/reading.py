"""Reading a file safely and decoding JSON strictly, for every reader of a user's files (a
package's, a project's lock file, a tuning cache): :func:`read_bounded` reads a regular file of at
most a given size and nothing else (a FIFO would block forever, /dev/zero never end), and
:func:`decode_json` refuses every way JSON can mislead (NaN, a repeated key, a lone surrogate,
numbers past float64, deep nesting) with a ValueError saying which. Imports nothing of the engine
but its errors; ``digests.read_file`` adds a package's own rules (names, links to folders).
"""

from __future__ import annotations

import json
import math
import os
import re
import stat
import sys
from pathlib import Path
from typing import Any

from .errors import PackageError, shorten


def _kind(mode: int) -> str:
    """What a file system entry that is no regular file is, in words."""
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "a special file"


def not_regular(path: Path) -> str | None:
    """What ``path`` is when it exists but is no regular file after symbolic links ("a folder",
    "a FIFO", "a device", "a socket", "a symbolic link to nothing"); None for a regular file and
    for no entry at all. ``Path.is_file`` says False for both kinds, which had made a folder named
    metadata.json read as "no metadata.json"."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return "a symbolic link to nothing" if os.path.islink(path) else None
    except OSError as exc:  # a link loop, a name too long
        return f"unreadable: {exc.strerror}"
    return None if stat.S_ISREG(mode) else _kind(mode)


def read_bounded(path: Path, limit: int) -> bytes:
    """The bytes of ``path``, a regular file (after symlinks) of at most ``limit`` bytes: the kind is
    checked on the open file and the read stops past the limit whatever the size said (a FIFO would
    block forever, /dev/zero never end). Raises OSError, or PackageError naming ``path``."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    with os.fdopen(fd, "rb") as file:
        info = os.fstat(file.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise PackageError(f"not a regular file ({_kind(info.st_mode)}, perhaps through a symlink)", path=str(path))
        data = file.read(limit + 1)
    if len(data) > limit:
        raise PackageError(f"larger than {limit} bytes", path=str(path))
    return data


_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


class _RefusedValue(ValueError):
    """Valid JSON this reader refuses (a number past float64, a repeated key): said as it is, not
    called invalid JSON."""


def _refuse_constant(name: str) -> Any:
    # Python's reader takes NaN, Infinity and -Infinity, which JSON has not: an infinite test.json
    # tolerance would pass any output (test.json spells special values "nan", "inf", "-inf").
    raise ValueError(f"{name} is not JSON (test.json values spell it as a string: \"nan\", \"inf\", \"-inf\")")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):  # 1e400: valid JSON, but float64 makes it infinite
        raise _RefusedValue(f"the number {text[:40]} is beyond float64's range")
    return value


#: The most digits of an integer float64 holds (its largest finite value is about 1.8e308): longer
#: ones are refused before int() reads them, whose refusal past 4,300 digits gives Python's advice
#: ("use sys.set_int_max_str_digits()"), which an author cannot follow.
_FLOAT64_INT_DIGITS = len(str(int(sys.float_info.max)))


def _float_sized_int(text: str) -> int:
    digits = len(text.lstrip("-"))
    if digits > _FLOAT64_INT_DIGITS:
        raise _RefusedValue(f"the number {text[:40]}...: an integer of {digits} digits is beyond float64's range ("
                         f"expected a number of at most {_FLOAT64_INT_DIGITS} digits)")
    value = int(text)
    try:
        float(value)  # 400 digits: valid JSON, but every reader turns numbers into float64 somewhere
    except OverflowError:
        raise _RefusedValue(f"the number {text[:40]}... is beyond float64's range") from None
    return value


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """An object whose keys are all distinct: JSON readers disagree about a repeated key (Python's
    keeps the last), so a second "domain" would change the op id where a reviewer sees the first."""
    value = dict(pairs)
    if len(value) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise _RefusedValue(f"the key {shorten(key, 60)!r} appears more than once in one object")
            seen.add(key)
    return value


def decode_json(data: bytes) -> Any:
    """A package JSON file's bytes decoded; every way it can be malformed is a ValueError whose
    message says which (deep nesting and 5,000-digit numbers included, not only bad syntax)."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise ValueError("not UTF-8 text") from None
    try:
        value = json.loads(text, parse_constant=_refuse_constant, parse_float=_finite_float,
                           parse_int=_float_sized_int, object_pairs_hook=_unique_keys)
        # "\ud800" is valid JSON for a lone surrogate, which is no text: it would fail later,
        # when a template's output or the console encodes it.
        if _SURROGATE_ESCAPE.search(text):
            json.dumps(value, ensure_ascii=False).encode("utf-8")
        return value
    except UnicodeEncodeError:
        raise ValueError("a string holds a lone surrogate (a \\ud800-\\udfff escape not part of a pair)") from None
    except json.JSONDecodeError as exc:
        raise ValueError(f"invalid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}") from None
    except RecursionError:
        raise ValueError("JSON nested too deeply") from None
    except _RefusedValue as exc:
        raise ValueError(str(exc)) from None
    except ValueError as exc:  # e.g. an integer literal beyond Python's digit limit
        raise ValueError(f"invalid JSON: {str(exc)[:200]}") from None
