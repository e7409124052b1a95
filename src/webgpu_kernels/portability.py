"""Package file names that work on Linux and break on macOS or Windows, for ``validate``.

Packages are published to the Hub and loaded on every OS (wgpu-native runs on Metal and D3D12),
but their authors check them on Linux, whose file systems are case-sensitive and take almost any
name. Elsewhere two names that differ only in case are one file (on macOS and Windows; names that
differ in their Unicode normal form are one file on macOS only): one overwrites the other when the
package is downloaded, and its digest then fails. Windows refuses device names (``CON``,
``nul.txt``) and some characters, and a reference spelt in another case than its file finds it
on macOS and Windows but not on Linux. The metadata.json name rule already keeps most characters
out of listed names; these checks cover every file of the folder, since the Hub loader downloads
them all.

Loading a folder does not refuse any of this: on the machine it runs on, such a package works.
``validate`` reports it (as errors), so the author fixes it before publishing, and the Hub loader
refuses a repository that lists such names (:func:`name_problems`), on every system, before it
downloads anything.
"""

from __future__ import annotations

import os
import unicodedata
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, NamedTuple

from jinja2 import nodes

from .digests import METADATA_FILE, folded, package_files
from .errors import PackageError
from .templates import include_targets
from .validation_report import ProblemCollector

#: Device names Windows reserves in every folder, whatever the extension (``con.wgsl.jinja``).
WINDOWS_RESERVED = frozenset({"CON", "PRN", "AUX", "NUL", "CONIN$", "CONOUT$"}
                             | {f"{port}{n}" for port in ("COM", "LPT") for n in "123456789\u00b9\u00b2\u00b3"})  # fmt: skip
#: Characters no Windows file name may hold (besides the separators).
WINDOWS_CHARACTERS = frozenset('<>:"\\|?*') | frozenset(map(chr, range(32)))

#: Windows refuses a path longer than this (MAX_PATH: 260 UTF-16 units with the terminating NUL)
#: unless long paths are enabled on the machine.
WINDOWS_MAX_PATH = 259
#: The length of the Hub cache's path to a package folder on Windows, for a 12-character user name
#: and the repository webgpu-kernels/<an op id of 24 characters> (docs/package-files.md):
#: C:\Users\<user>\.cache\huggingface\hub\kernels--<org>--<op>\snapshots\<commit>\build\webgpu\
HUB_CACHE_PREFIX = 159
#: A package-relative name longer than this passes WINDOWS_MAX_PATH in that folder: validate warns.
LONG_NAME = WINDOWS_MAX_PATH - HUB_CACHE_PREFIX

_OVERWRITES = "one overwrites the other when the package is downloaded, and its digest check fails there"


class NameProblem(NamedTuple):
    """A package file name that breaks the package on macOS or Windows: ``names`` are the names
    concerned (several when they are one file there), ``file`` the one to report it at, ``why``
    what is wrong and where (not what to do about it)."""

    file: str
    names: tuple[str, ...]
    why: str


def one_file_message(group: tuple[str, ...]) -> str:
    """What the names of ``group`` (one of :func:`case_collisions`) have in common and on which
    systems they are one file: macOS ignores case and the Unicode normal form, Windows case only."""
    paths = [name.rstrip("/") for name in group]
    windows = [g for g in _grouped(paths, str.lower) if len(g) > 1]  # Windows compares case-folded names
    if len(windows) == 1 and len(windows[0]) == len(paths):
        shown = " and ".join(map(repr, group))
        return (f"{shown} differ only in case: on macOS and Windows, whose file systems ignore case by default, "
                f"they are one file: {_OVERWRITES} (on Linux it works)")  # fmt: skip
    shown = " and ".join(map(ascii, group))  # the normal forms print alike: escaped, the difference shows
    if len({unicodedata.normalize("NFC", path) for path in paths}) == 1:
        return (f"{shown} differ only in their Unicode normal form (an accented letter as one character or as a "
                "letter and a combining accent): on macOS, whose file systems ignore the normal form, they are one "
                f"file: {_OVERWRITES} (on Linux and Windows it works)")  # fmt: skip
    if windows:
        also = "; on Windows, which ignores case but not the normal form, " + "; ".join(
            " and ".join(map(ascii, g)) + " are one file too" for g in windows)  # fmt: skip
    else:
        also = " (on Linux and Windows it works: Windows ignores case but not the normal form)"
    return (f"{shown} differ only in case and Unicode normal form: on macOS, whose file systems ignore both by "
            f"default, they are one file: {_OVERWRITES}{also}")  # fmt: skip


def _grouped(names: list[str], key: Callable[[str], str]) -> list[list[str]]:
    groups: dict[str, list[str]] = {}
    for name in names:
        groups.setdefault(key(name), []).append(name)
    return list(groups.values())


def name_problems(names: Iterable[str]) -> list[NameProblem]:
    """The problems of a package's file ``names`` (package-relative, metadata.json included) on
    macOS or Windows: each group of names that are one file there, each name Windows refuses."""
    names = list(names)
    found = [NameProblem(group[0].rstrip("/"), group, one_file_message(group)) for group in case_collisions(names)]
    for name in names:
        if not_utf8(name):
            found.append(NameProblem(name, (name,), f"{_as_bytes(name)} is not UTF-8 text: Linux takes any bytes in "
                                                    "a file name, but the Hub and other systems name files in Unicode, "
                                                    "so no other machine has this file"))  # fmt: skip
            continue
        why = windows_problem(name)
        if why:
            found.append(NameProblem(name, (name,), f"{why}: the package cannot be downloaded or loaded on Windows "
                                                    "(it works on Linux and macOS)"))  # fmt: skip
    return found


def not_utf8(name: str) -> bool:
    """Whether the file name ``name`` was bytes that are not UTF-8 (os.fsdecode made each such byte a
    lone surrogate, which no other text operation takes: encoding it for Windows' length had made
    validate's name checks fail with a UnicodeEncodeError)."""
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def _as_bytes(name: str) -> str:
    """A name that is not UTF-8 as the bytes the file system holds (b'\\xff.txt'), else escaped (a
    lone surrogate that no byte decodes to: a Hub listing's JSON can hold one)."""
    try:
        return repr(os.fsencode(name))
    except UnicodeEncodeError:
        return ascii(name)


def long_name_problem(name: str) -> str | None:
    """Why the package-relative ``name`` may be too long for the Hub cache on Windows, else None."""
    if not_utf8(name):  # an error of its own (name_problems)
        return None
    length = len(name.encode("utf-16-le")) // 2  # what Windows counts
    if length <= LONG_NAME:
        return None
    return (f"{name!r} is {length} characters long: in the Hub cache on Windows, whose package folder is about "
            f"{HUB_CACHE_PREFIX} characters (C:\\Users\\<user>\\.cache\\huggingface\\hub\\kernels--<org>--<op>\\"
            f"snapshots\\<commit>\\build\\webgpu\\), its path passes Windows' {WINDOWS_MAX_PATH + 1}-character limit, "
            "and the package does not load on a machine without long paths enabled: keep names to "
            f"{LONG_NAME} characters")  # fmt: skip


def windows_problem(name: str) -> str | None:
    """Why Windows cannot hold the package-relative ``name`` (a segment that is a device name,
    holds a forbidden character, or ends in a dot or space, which Windows strips), else None."""
    for segment in name.split("/"):
        bad = sorted(set(segment) & WINDOWS_CHARACTERS)
        if bad:
            return f"{segment!r} holds {', '.join(map(repr, bad))}, which Windows does not allow in a file name"
        if segment.endswith((".", " ")):
            end = "a dot" if segment.endswith(".") else "a space"
            return f"{segment!r} ends in {end}, which Windows drops from a file name (it then names another file)"
        stem = segment.split(".", 1)[0].rstrip(" ").upper()
        if stem in WINDOWS_RESERVED:
            return f"{segment!r} is the device {stem} to Windows, whatever follows the first dot"
    return None


def case_collisions(names: Iterable[str]) -> list[tuple[str, ...]]:
    """Groups of paths (the files ``names`` and the folders above them) that differ only in case,
    folders shown with a trailing ``/``, shallowest first. Only paths in one folder, spelt alike,
    are grouped: ``Sub/a`` and ``sub/a`` is the folders' collision, not repeated, while ``Sub/A``
    and ``Sub/a`` are one file whatever the folders are renamed to."""
    spellings: dict[tuple[str, str], set[str]] = {}
    folders: set[str] = set()
    for name in names:
        parts = name.split("/")
        for depth in range(1, len(parts) + 1):
            path = "/".join(parts[:depth])
            spellings.setdefault(("/".join(parts[: depth - 1]), folded(path)), set()).add(path)
            if depth < len(parts):
                folders.add(path)
    found: list[tuple[str, ...]] = []
    for key in sorted(spellings, key=lambda k: (k[1].count("/"), k[1], k[0])):
        group = spellings[key]
        if len(group) > 1:
            found.append(tuple(sorted(p + "/" if p in folders else p for p in group)))
    return found


def check_file_names(root: Path, out: ProblemCollector) -> list[str] | None:
    """Report the package's file names that break on macOS or Windows; return the names found
    (None when the folder cannot be listed: the metadata checks say why)."""
    try:
        files = package_files(root)
    except PackageError:
        return None
    names = files + ([METADATA_FILE] if os.path.lexists(root / METADATA_FILE) else [])
    for problem in name_problems(names):
        rename = "rename one" if len(problem.names) > 1 else "rename it"
        out.error(problem.file, "", f"{problem.why}: {rename} (and what names it), then run "
                                    "`webgpu-kernels digest PATH`")  # fmt: skip
    for name in names:
        why = long_name_problem(name)
        if why:
            out.warning(name, "", why)
    return files


def twin_message(lead: str, name: str, twin: str) -> str:
    """The error for a reference to ``name`` whose file is spelt ``twin``."""
    return (f"{lead} {name!r}, which is not in the package, but {twin!r} is: a name that differs from its file only in "
            "case finds it on macOS and Windows, whose file systems ignore case, and not on Linux (nor in a "
            f"verified package): spell it {twin!r}")  # fmt: skip


class IncludeWalk(NamedTuple):
    """What :func:`walk_includes` found: the case problems of include statements, and every
    template reached (those it started from, then each included one that exists, in walk order)."""

    problems: list[tuple[str, int, str]]  # (template, line, message)
    templates: tuple[str, ...]


def walk_includes(env: Any, shaders: Iterable[str], files: Iterable[str],
                  twin_of: Callable[[str], str | None]) -> IncludeWalk:  # fmt: skip
    """Follow each ``{% include %}``/``{% import %}`` by name from the templates ``shaders``,
    reporting each that names a template in another case than its file.
    ``env`` is the package's TemplateSandbox (its loader applies the loader's rules and bounds);
    ``twin_of``: digests.case_twins(files), which validate folds once for all its checks."""
    files = set(files)
    queue = list(dict.fromkeys(shaders))
    seen = dict.fromkeys(queue)
    found: list[tuple[str, int, str]] = []
    while queue:
        name = queue.pop(0)
        try:
            tree = env.parse_named(name)
        except Exception:  # noqa: BLE001 - a template that does not load or parse is reported by the template checks
            continue
        for node in tree.find_all((nodes.Include, nodes.Import, nodes.FromImport)):
            for target in filter(None, include_targets(node.template)):  # those computed at render time are not known
                twin = twin_of(target)
                if twin is not None:
                    statement = "{% include %}" if isinstance(node, nodes.Include) else "{% import %}"
                    found.append((name, node.lineno, twin_message(f"{statement} names", target, twin)))
                elif target in files and target not in seen:
                    seen[target] = None
                    queue.append(target)
    return IncludeWalk(found, tuple(seen))
