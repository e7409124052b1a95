"""Autotuning results: one JSON file per adapter, consulted when a call leaves the choice open.

An entry is keyed by the kernel's tuning key (its op id and a digest of its manifest and
templates, so that a copy being edited never answers for the shipped package), the dtypes of the
call and its shape class (every dimension of every input rounded down to a power of two: a
reduction over 100 and one over 768 elements per row are different classes even at one element
count), and records the variant and tunables that ran fastest there. Calls that pass neither
``variant`` nor ``tunables`` use a matching entry; an entry whose variant does not apply to the
call, or that would not return an output the call's own selection returns (an optional output
only some variants write), is ignored.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import re
import threading
import warnings
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from filelock import FileLock

from .device import env_flag
from .digests import MAX_PACKAGE_FILES, read_file
from .errors import PackageError, TuningFileWarning, user_stacklevel
from .forks import fresh_in_child
from .package import MANIFEST_FILE, KernelPackage
from .reading import decode_json, not_regular
from .replacing import replace_file, write_path
from .templates import MAX_TEMPLATE_BYTES, NOT_TEMPLATE_SUFFIXES, TEMPLATE_NAME

CACHE_ENV = "WEBGPU_KERNELS_TUNING_DIR"
DISABLE_ENV = "WEBGPU_KERNELS_NO_TUNING"
#: The lock file that concurrent saves take in the tuning folder (never read as a tuning file).
LOCK_NAME = ".lock"


#: 2: entries keyed by the package's tuning key, not the op id alone; 3: shape classes per
#: dimension, not per element count (files of other versions are ignored).
FILE_VERSION = 3
#: A tuning file of another version (or one that does not parse) is moved to its name plus this
#: before a save writes the adapter's file anew.
BACKUP_SUFFIX = ".bak"


def disabled() -> bool:
    """Whether WEBGPU_KERNELS_NO_TUNING turns stored results off. Read when a call's plan is
    chosen, not on the per-call fast path (an environment read is 0.3-0.7 µs of a ~10 µs call):
    a plan a kernel already chose for a shape stays."""
    return env_flag(DISABLE_ENV)  # "0", "false": not disabled


def tuning_dir() -> Path:
    base = os.environ.get(CACHE_ENV)
    if base and base.strip():  # blank counts as unset, as for the other settings (not a folder named '  ')
        # ~ as the home folder, as HF_HOME's is (hub.py): a quoted or Dockerfile '~/tuning' had made
        # a folder named '~' in the working directory, which calls from any other one never read
        return Path(base).expanduser()
    # An empty XDG_CACHE_HOME counts as unset (XDG base directory spec).
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "webgpu-kernels" / "tuning"


def package_key(package: KernelPackage, op_id: str) -> str:
    """The op id and a digest of the manifest and every file a template could read: autotuning
    results belong to this package's code (a local copy being edited, same op id, has its own;
    so does one whose `{% include %}`d helper changed). Read within bounds: at most
    MAX_PACKAGE_FILES files of at most TEMPLATE_FILE_BYTES each (250 MiB in all)."""
    digest = hashlib.sha256()
    digest.update(_key_part(package, MANIFEST_FILE))
    for i, (name, size) in enumerate(_template_files(package)):
        # Only a file a template can be is read, and at most a package's number of them: a
        # folder without metadata.json is not held to the package's limits when it opens, and
        # 1,000 links to one 8 MiB file had added 38 s to the first call. Any other file
        # counts by its size: none of its bytes can reach the WGSL.
        if i < MAX_PACKAGE_FILES and size <= TEMPLATE_FILE_BYTES:
            digest.update(_key_part(package, name))
        else:
            digest.update(f"{name}:{size}:unread".encode())
    return f"{op_id}@{digest.hexdigest()[:16]}"


#: Largest file a template can be: the loader takes at most MAX_TEMPLATE_BYTES characters, and
#: UTF-8 spends at most 4 bytes on one.
TEMPLATE_FILE_BYTES = 4 * MAX_TEMPLATE_BYTES


def _template_files(package: KernelPackage) -> list[tuple[str, int]]:
    """The files a template could load (templates.PackageLoader: a top-level file of a valid name),
    less the NOT_TEMPLATE_SUFFIXES files it refuses, with their sizes in bytes, by name; of a
    verified package, only what it verified (the rest cannot load)."""
    def candidate(name: str) -> bool:
        return bool(TEMPLATE_NAME.match(name)) and not name.endswith(NOT_TEMPLATE_SUFFIXES)

    if package.is_verified:
        return sorted((n, len(data)) for n, data in package.verified.items() if candidate(n))
    found = []
    with os.scandir(package.root) as entries:
        for entry in entries:
            try:
                if candidate(entry.name) and entry.is_file():  # is_file and stat follow links, as reads do
                    found.append((entry.name, entry.stat().st_size))
            except OSError:  # gone since the listing, or not ours to read: nothing can load it either
                continue
    return sorted(found)


def _key_part(package: KernelPackage, name: str) -> bytes:
    """A file's name, size and bytes, as the tuning key hashes them."""
    try:
        data = package.read_bytes(name)
    except PackageError:  # changed since the listing (grown past a package file's size, gone): no
        data = b"unreadable"  # template can load it either, and a call must not fail over it
    return f"{name}:{len(data)}:".encode() + data


def adapter_slug(name: str, backend: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", f"{name}-{backend}").strip("-").lower()


def shape_class(shapes: Mapping[str, Sequence[int]]) -> str:
    """The shape class of a call's inputs (role -> shape): each dimension rounded down to a power of
    two, ``X=2x64x512,bias=512`` for X 2x77x768 and bias 768 (``-`` for rank 0). What is fastest
    depends on more than the element count: a row of 100 and one of 768 reduce differently."""
    def dims(shape: Sequence[int]) -> str:
        return "x".join(str(1 << (d.bit_length() - 1)) if d > 0 else "0" for d in shape) or "-"

    return ",".join(f"{role}={dims(shape)}" for role, shape in sorted(shapes.items()))


def canonical_attr(value: Any) -> Any:
    """An attribute value as the key writes it: 2.0 and 2 are one value (calls treat them alike),
    and a float is the shortest decimal of the float32 it rounds to, what a kernel computes with
    (the contract bounds floats at float32's range): np.float32(1.702), 1.7020000219345093 once
    checked, is the default 1.702 to the GPU, and had missed the entry tuned for the default."""
    if isinstance(value, float):
        value = float(str(np.float32(value)))  # NumPy prints a float32 as its shortest round-trip decimal
        return int(value) if value.is_integer() else value
    if isinstance(value, (list, tuple)):
        return [canonical_attr(v) for v in value]
    return value


def entry_key(op_id: str, dtypes: Mapping[str, str], shapes: Mapping[str, Sequence[int]], absent: tuple[str, ...] = (),
              attrs: Mapping[str, Any] | None = None) -> str:  # fmt: skip
    """``shapes``: the call's inputs (role -> shape, see :func:`shape_class`); ``absent``: the optional
    inputs it leaves out; ``attrs``: the attributes it sets to other than their defaults (a
    normalisation's axis). Each may change which variants apply and how fast they are."""
    types = ",".join(f"{k}={v}" for k, v in sorted(dtypes.items()))
    without = f"|without={','.join(sorted(absent))}" if absent else ""
    settings = ",".join(f"{k}={json.dumps(canonical_attr(v), sort_keys=True)}" for k, v in sorted((attrs or {}).items()))
    return f"{op_id}|{types}|{shape_class(shapes)}{without}" + (f"|attrs={settings}" if settings else "")


def other_versions(entries: Iterable[str], key: str, package: str) -> list[str]:
    """The keys among ``entries`` for ``key``'s tuning class (an :func:`entry_key` of ``package``, a
    :func:`package_key`) made for another version of that op's package: the same op id and class,
    another digest; sorted. Calls never find them (``explain`` says so)."""
    rest = key[len(package):]  # from the first "|": the class
    op = package.rsplit("@", 1)[0] + "@"
    return sorted(k for k in entries if k != key and k.endswith(rest) and k[:-len(rest)].startswith(op)
                  and "|" not in k[len(op):-len(rest)])  # fmt: skip


@dataclass(frozen=True)
class TunedChoice:
    variant: str
    tunables: dict[str, Any]
    median_s: float


class TuningCache:
    """The tuning file of one adapter, loaded once; writes go through :meth:`record` + :meth:`save`."""

    def __init__(self, path: Path, *, warn: bool = True) -> None:
        """``warn``: warn of the file's problem now (once per file and problem); cache_for warns
        itself, after releasing its lock."""
        self.path = path
        self._lock = threading.Lock()
        entries, self.problem = _load(path)
        self.entries: dict[str, dict[str, Any]] = entries
        #: Where the last save moved a damaged or other-version file aside (None: it moved none).
        self.backup: Path | None = None
        if warn and self.problem is not None:
            _warn_once(path, self.problem)
        self._recorded: set[str] = set()  # keys this process found: what save() writes over the file
        self._forgotten: set[str] = set()  # keys this process dropped: what save() removes from it

    def lookup(self, op_id: str, dtypes: Mapping[str, str], shapes: Mapping[str, Sequence[int]],
               absent: tuple[str, ...] = (), attrs: Mapping[str, Any] | None = None) -> TunedChoice | None:  # fmt: skip
        """The stored entry of the class, if any. Whether tuning is off (:func:`disabled`) is the
        caller's to ask, before the file is loaded: asked here too, a new call shape read the
        environment twice."""
        entry = self.entries.get(entry_key(op_id, dtypes, shapes, absent, attrs))
        if not entry:
            return None
        return TunedChoice(entry["variant"], dict(entry["tunables"]), float(entry["median_s"]))

    def record(self, op_id: str, dtypes: Mapping[str, str], shapes: Mapping[str, Sequence[int]], choice: TunedChoice,
               absent: tuple[str, ...] = (), attrs: Mapping[str, Any] | None = None) -> None:  # fmt: skip
        global generation
        with self._lock:
            key = entry_key(op_id, dtypes, shapes, absent, attrs)
            self._recorded.add(key)
            self._forgotten.discard(key)
            self.entries[key] = {
                "variant": choice.variant, "tunables": choice.tunables, "median_s": choice.median_s,
            }  # fmt: skip
            # Bumped after the entry is stored: a call on another thread that saw the new
            # generation before the entry would cache the default plan under it for good.
            generation += 1  # kernels drop the plans they chose before this result existed

    def forget(self, op_id: str, dtypes: Mapping[str, str], shapes: Mapping[str, Sequence[int]],
               absent: tuple[str, ...] = (), attrs: Mapping[str, Any] | None = None) -> None:  # fmt: skip
        """Drop the class's entry, so that its calls run the manifest's own selection (the tuner
        kept it, or its cases disagree); :meth:`save` removes it from the file too."""
        global generation
        with self._lock:
            key = entry_key(op_id, dtypes, shapes, absent, attrs)
            self._recorded.discard(key)
            self._forgotten.add(key)
            self.entries.pop(key, None)
            generation += 1  # plans chosen under the dropped entry are chosen again

    def save(self) -> bool:
        """Write the file: what is on disk now (another process may have tuned meanwhile), with
        this cache's recorded entries over it, through a temporary file of this process's own.
        Where that changes no entry of the file, nothing is written (no file is created, none is
        touched). A file that is a symbolic link is written where it points (:func:`write_path`).
        Returns whether the file was written."""
        with self._lock:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with _folder_lock(self.path.parent):  # another process's read-merge-replace must not interleave
                return self._merge_and_replace()

    def _merge_and_replace(self) -> bool:  # under both locks
        if _is_regular_file(self.path) and not os.access(self.path, os.R_OK):
            # another user's file in a shared folder: unreadable is not corrupt, so it is not ours to
            # move aside and replace (it had been, and its entries left their calls)
            raise PermissionError(errno.EACCES, "this user cannot read the tuning file, so it is not replaced",
                                  str(self.path))  # fmt: skip
        on_disk, problem, as_written = _load_as_written(self.path)
        kept = {k: e for k, e in on_disk.items() if k not in self._forgotten}
        entries = {**kept, **{k: self.entries[k] for k in self._recorded}}
        self.entries = entries
        if entries == on_disk and as_written:
            # Nothing to change: a tune whose every class kept the manifest's selection had created
            # a file of no entries, and rewritten (or moved aside) one it added nothing to.
            self._on_disk()
            return False
        # A link is written through, to the file it points to (a dotfiles repository's): replacing
        # the link had left that file without the results. The backup goes beside that file too.
        target = write_path(self.path)
        if problem is not None and _is_regular_file(target):  # another version's results, or a hand
            self.backup = _free_backup_name(target)  # edit gone wrong: kept, not lost
            os.replace(target, self.backup)
        text = json.dumps({"version": FILE_VERSION, "entries": entries}, indent=1, sort_keys=True)
        replace_file(target, text)  # readable as the umask allows: a shared cache is read by others
        self.problem = None  # the file is one this release wrote: a later bench must not say it is damaged
        _forget_warnings(self.path)  # the same damage found again later is news
        self._on_disk()
        return True

    def _on_disk(self) -> None:
        """This process's results are in the file now: a later save must not write them over what
        another process saved since (a long tune had put back its old results over newer ones)."""
        self._recorded.clear()
        self._forgotten.clear()


def _folder_lock(folder: Path) -> FileLock:
    """An exclusive lock between processes on the tuning folder (filelock: flock on POSIX, msvcrt
    on Windows): four processes of 200 saves each, at once, without it kept 161-200 of their 200
    entries each."""
    return FileLock(folder / LOCK_NAME)


@dataclass(frozen=True)
class FileProblem:
    """What is wrong with a tuning file: ``what``, and whether it is the whole file (``whole``: no
    entry of it is used) or some entries (the others still apply); ``readable``: whether the file
    is a regular file this user can read (a save moves such a file aside, see :meth:`TuningCache.save`)."""

    what: str
    whole: bool = True
    readable: bool = True
    #: The tuning folder is the problem (no folder), not the file: said once for every file in it.
    folder: bool = False

    def message(self, path: Path) -> str:
        """The warning: the file, what is wrong, what calls do meanwhile and what to do."""
        used = ("calls run the manifests' own selection" if self.whole
                else "those calls run the manifests' own selection; the other entries apply")  # fmt: skip
        if self.folder:
            return (f"tuning folder {path.parent}: {self.what}; {used}. To use tuning results, set ${CACHE_ENV} to "
                    f"a folder (`webgpu-kernels tune` makes one that does not exist yet)")  # fmt: skip
        if not self.readable:
            todo = f"make it a regular file this user can read, or set ${CACHE_ENV} to a folder of your own"
        else:
            todo = (f"fix it, or run `webgpu-kernels tune` again: its first save moves this file aside to "
                    f"{backup_text(path)} (an earlier backup is kept) and writes a new one")  # fmt: skip
        return f"tuning file {path}: {self.what}; {used}. To use tuning results, {todo}"


def _folder_problem(folder: Path) -> FileProblem | None:
    """Why no tuning file can ever be in ``folder``: it, or the nearest part of its path that
    exists, is no folder (a regular file that ``$WEBGPU_KERNELS_TUNING_DIR`` names by mistake).
    Calls had ignored every stored result there without a word, while `tune` refused it."""
    existing = folder
    while not os.path.lexists(existing):  # False too for a path through a file (ENOTDIR)
        if existing.parent == existing:
            return None
        existing = existing.parent
    if os.path.isdir(existing):
        return None  # a folder, or one `tune` makes: no problem
    kind = "a regular file" if os.path.isfile(existing) else (not_regular(existing) or "no folder")
    value = os.environ.get(CACHE_ENV, "")
    named = f"${CACHE_ENV} ({value!r})" if value.strip() else "it"
    where = "is" if existing == folder else f"lies under {existing}, which is"
    return FileProblem(f"{named} {where} {kind}, but a folder is expected", readable=False, folder=True)


#: The tuning files and problems this process has warned of (each once).
_warned: set[tuple[str, str]] = set()
_warned_lock = threading.Lock()  # not _lock: a cache loads under that


def _warn_once(path: Path, problem: FileProblem) -> None:
    # a folder's problem once for all its files (each adapter has one)
    said = (str(path.parent) if problem.folder else str(path), problem.what)
    with _warned_lock:
        if said in _warned:
            return
        _warned.add(said)
    # A damaged file had been ignored without a word: calls ran the defaults, and whoever had tuned
    # for an hour never learnt why nothing got faster.
    warnings.warn(TuningFileWarning(problem.message(path)), stacklevel=user_stacklevel())


def _forget_warnings(path: Path) -> None:
    """Forget the problems warned of for ``path``, which now holds a good file."""
    with _warned_lock:
        _warned.difference_update({w for w in _warned if w[0] == str(path)})


def _load(path: Path) -> tuple[dict[str, dict[str, Any]], FileProblem | None]:
    """A tuning file's valid entries, and what is wrong with it (None for a good or missing file):
    unreadable, not a regular file (a FIFO would block every first call), oversized, not JSON,
    another version's, or with an entry edited wrong, or its folder no folder. A save must not
    overwrite a regular file that has a problem."""
    entries, problem, _ = _load_as_written(path)
    return entries, problem


def _load_as_written(path: Path) -> tuple[dict[str, dict[str, Any]], FileProblem | None, bool]:
    """:func:`_load`, and whether the file's valid entries are keyed as a save keys them (an older
    release's float attributes are not, see :func:`_canonical_key`: a save rewrites those)."""
    if not os.path.lexists(path):
        return {}, _folder_problem(path.parent), True  # never tuned: nothing to say, unless calls never can
    if os.path.islink(path) and not os.path.exists(path):  # read_file would call it a package's missing file
        return {}, FileProblem("a symbolic link to a missing file", readable=False), True
    if _is_regular_file(path) and not os.access(path, os.R_OK):  # another user's, in a shared folder
        return {}, FileProblem("this user cannot read it", readable=False), True
    try:
        data = decode_json(read_file(path.parent, path.name))
    except PackageError as exc:  # a corrupt cache is ignored, never fatal
        return {}, FileProblem(exc.detail, readable=_is_regular_file(path)), True  # a folder or FIFO: not ours to move
    except ValueError as exc:
        return {}, FileProblem(str(exc)), True
    if not isinstance(data, dict) or "version" not in data:
        return {}, FileProblem("not a JSON object with 'version' and 'entries', as `webgpu-kernels tune` writes"), True
    if data.get("version") != FILE_VERSION:
        return {}, FileProblem(f"written by another release (file version {json.dumps(data.get('version'))[:40]}; "
                               f"this one reads version {FILE_VERSION})"), True  # fmt: skip
    entries = data.get("entries")
    if not isinstance(entries, dict):
        return {}, FileProblem("its 'entries' is not a JSON object"), True
    valid = {k: e for k, e in entries.items() if _valid_entry(e)}
    wrong = [k for k in entries if k not in valid]
    canonical = _canonical_entries(valid)
    as_written = set(canonical) == set(valid)
    if not wrong:
        return canonical, None, as_written
    verb = "is" if len(wrong) == 1 else "are"
    return canonical, FileProblem(f"{len(wrong)} of its {len(entries)} entries {verb} malformed and ignored "
                                  f"(first: {wrong[0][:200]!r})", whole=False), as_written  # fmt: skip


_ATTR_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=")  # a manifest identifier (its JSON Schema's)
_JSON = json.JSONDecoder()


def _canonical_key(key: str) -> str:
    """``key`` with its attributes written as :func:`entry_key` writes them now (canonical_attr): an
    older release wrote ``alpha=0.3333333333333333`` where calls now look up ``alpha=0.33333334``.
    A key whose attributes do not parse is kept as it is."""
    head, sep, settings = key.partition("|attrs=")  # the last part; no earlier one holds a '|'
    if not sep:
        return key
    parts, i = [], 0
    while True:
        name = _ATTR_NAME.match(settings, i)
        if name is None:
            return key
        try:
            value, i = _JSON.raw_decode(settings, name.end())
        except ValueError:
            return key
        parts.append((name.group()[:-1], value))
        if i == len(settings):
            break
        if settings[i] != ",":
            return key
        i += 1
    return head + "|attrs=" + ",".join(f"{k}={json.dumps(canonical_attr(v), sort_keys=True)}" for k, v in parts)


def _canonical_entries(entries: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """``entries`` under their keys as written now (:func:`_canonical_key`). Where several read as one,
    the one already keyed so wins (written under the rules calls use), else the fastest."""
    found: dict[str, tuple[bool, float, dict[str, Any]]] = {}
    for key, entry in entries.items():
        canonical = _canonical_key(key)
        rank = (canonical != key, float(entry["median_s"]))
        if canonical not in found or rank < found[canonical][:2]:
            found[canonical] = (*rank, entry)
    return {key: entry for key, (*_, entry) in found.items()}


def _is_regular_file(path: Path) -> bool:
    try:
        return path.is_file()
    except OSError:
        return False


def backup_path(path: Path) -> Path:
    """Where a save would move the damaged tuning file ``path`` aside now (:func:`_free_backup_name`
    beside the file written, see :func:`write_path`)."""
    return _free_backup_name(write_path(path))


def backup_text(path: Path) -> str:
    """:func:`backup_path` as a message names it: its name where it lies beside ``path``, else in full."""
    backup = backup_path(path)
    return backup.name if backup.parent == path.parent else str(backup)


def _free_backup_name(path: Path) -> Path:
    """``<name>.bak``, else ``<name>.1.bak``, ``<name>.2.bak``...: an earlier backup (or a folder of
    that name) is never replaced."""
    for n in range(1000):
        candidate = path.with_name(f"{path.name}{'' if n == 0 else f'.{n}'}{BACKUP_SUFFIX}")
        if not os.path.lexists(candidate):
            return candidate
    return path.with_name(f"{path.name}.{os.getpid()}{BACKUP_SUFFIX}")  # a thousand backups: this process's own


def _valid_entry(entry: Any) -> bool:
    """An entry as :meth:`TuningCache.record` writes it; anything else in a file is dropped."""
    return (
        isinstance(entry, dict)
        and isinstance(entry.get("variant"), str)
        and isinstance(entry.get("tunables"), dict)
        and all(isinstance(k, str) and isinstance(v, (bool, int, float, str)) for k, v in entry["tunables"].items())
        and isinstance(entry.get("median_s"), (int, float))
        and not isinstance(entry.get("median_s"), bool)
    )


#: Bumped by every recorded result; part of the key of a kernel's per-call plan cache.
generation = 0
_caches: dict[str, TuningCache] = {}
_lock = threading.Lock()


def _caches_with_fresh_locks() -> dict[str, TuningCache]:
    """The caches, each with a new lock: a fork while another thread saved (and waited on the folder
    lock) had left the child's cache locked for good."""
    for cache in _caches.values():
        cache._lock = threading.Lock()
    return _caches


fresh_in_child(globals(), _lock=threading.Lock, _warned_lock=threading.Lock, _caches=_caches_with_fresh_locks)


def cache_for(adapter_name: str, backend: str) -> TuningCache:
    path = tuning_dir() / f"{adapter_slug(adapter_name, backend)}.json"
    with _lock:
        cache = _caches.get(str(path))
        if cache is not None:
            return cache
        cache = _caches[str(path)] = TuningCache(path, warn=False)
        problem = cache.problem
    # Warned after the lock: a warning handler (slow, or one reaching the library from another
    # thread) had held back every thread's first call of a shape. Only the thread that loaded the
    # file gets here, and _warn_once says each problem once whatever the threads.
    if problem is not None:
        _warn_once(path, problem)
    return cache
