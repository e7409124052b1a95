"""The Hugging Face cache as this library uses it: where it is (read from the environment at each
call, as huggingface_hub reads it only at import), one folder per other endpoint, and a repository's
folder in it: the lock that loads of one repository hold between processes, the record that puts
the folder back after a failed download, and the refs written there.
"""

from __future__ import annotations

import errno
import hashlib
import os
import re
import secrets
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from contextvars import ContextVar
from pathlib import Path
from urllib.parse import urlsplit

from filelock import FileLock, Timeout

from .device import TRUE_VALUES, env_count
from .errors import HubError

#: huggingface_hub's repository type for kernel repositories (URL prefix ``kernels/``).
REPO_TYPE = "kernel"
#: huggingface_hub's endpoint when HF_ENDPOINT is not set.
DEFAULT_ENDPOINT = "https://huggingface.co"
#: Below the Hub cache: one folder per other endpoint (a repository given by its URL on another Hub).
OTHER_ENDPOINTS_DIR = "webgpu-kernels-endpoints"
#: Seconds a load waits for another process's download or check of the same repository (600).
LOCK_TIMEOUT_ENV = "WEBGPU_KERNELS_HUB_LOCK_TIMEOUT"
LOCK_TIMEOUT_S = 600
#: The lock file of a repository, in huggingface_hub's folder of lock files for it.
LOCK_NAME = "webgpu-kernels.lock"


# --- the environment, read at call time ---------------------------------------------------------------


def hub_endpoint() -> str | None:
    """``HF_ENDPOINT`` as it is now (None: huggingface_hub's default, https://huggingface.co)."""
    value = os.environ.get("HF_ENDPOINT", "").strip()
    return value.rstrip("/") or None


#: A cache folder that replaces the environment's in this thread (or task) only: upload's check of what
#: it published downloads into a temporary one, so the user's cache is not touched, and setting
#: HF_HUB_CACHE for it would have redirected every other thread's load too.
_cache_override: ContextVar[Path | None] = ContextVar("webgpu_kernels_hub_cache", default=None)


@contextmanager
def cache_folder(folder: Path) -> Iterator[None]:
    """Use ``folder`` as the Hub cache (for every endpoint) in this context only."""
    token = _cache_override.set(folder)
    try:
        yield
    finally:
        _cache_override.reset(token)


def hub_cache_dir() -> Path:
    """The Hub cache folder as huggingface_hub would compute it from the environment now (or the one
    :func:`cache_folder` set in this context)."""
    override = _cache_override.get()
    if override is not None:
        return override

    def expand(value: str) -> Path:
        return Path(os.path.expandvars(os.path.expanduser(value)))

    for var in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
        if os.environ.get(var):
            return expand(os.environ[var])
    if os.environ.get("HF_HOME"):
        return expand(os.environ["HF_HOME"]) / "hub"
    xdg = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return expand(os.path.join(xdg, "huggingface")) / "hub"


def cache_dir_for(endpoint: str | None) -> Path:
    """The Hub cache for the configured endpoint (HF_ENDPOINT, else huggingface.co); a folder of its
    own below it for any other endpoint. huggingface_hub's cache is not keyed by endpoint: without
    this, a repository fetched (with trust) from another Hub by its URL would later be read back,
    offline or under the same commit sha, as the official repository of that name."""
    base = hub_cache_dir()
    home = hub_endpoint() or DEFAULT_ENDPOINT
    endpoint = (endpoint or home).rstrip("/")
    if endpoint == home:
        return base
    host = re.sub(r"[^A-Za-z0-9.\-]", "_", urlsplit(endpoint).netloc)[:64] or "endpoint"
    return base / OTHER_ENDPOINTS_DIR / f"{host}-{hashlib.sha256(endpoint.encode()).hexdigest()[:16]}"


def hub_offline() -> bool:
    """``HF_HUB_OFFLINE`` (or the legacy ``TRANSFORMERS_OFFLINE``) as it is now."""
    value = os.environ.get("HF_HUB_OFFLINE") or os.environ.get("TRANSFORMERS_OFFLINE") or ""
    if value.strip().upper() in TRUE_VALUES:
        return True
    try:  # set at import time (e.g. the process was started offline): huggingface_hub blocks requests then
        from huggingface_hub import constants

        return bool(constants.HF_HUB_OFFLINE) and "HF_HUB_OFFLINE" not in os.environ
    except ImportError:  # pragma: no cover - a dependency of the project
        return False


# --- the repository's folder of the cache: its lock, its undo, its refs ------------------------------


class CacheUndo:
    """A repository's folder of the Hub cache as it was before a download, so that a download that
    fails, or whose package is refused when opened, leaves the cache as it was. Without it a refused
    repository stayed cached: the files fetched before huggingface_hub refused a '..' name (a
    partial snapshot), refs/<revision> moved to the refused commit (offline use then found that
    instead of the copy cached before), its tree listing, and a refused copy that no later
    download replaced.

    Put back: entries that were not there are removed, refs that changed get their old content.
    huggingface_hub's lock files (``.locks/``, empty) stay, as it leaves them itself. Recorded and
    put back under the repository's lock (:func:`repo_lock`), so that only this download's entries
    are removed.
    """

    def __init__(self, endpoint: str | None, repo_id: str) -> None:
        self.folder = repo_cache_folder(endpoint, repo_id)
        with suppress(OSError, RuntimeError):  # as snapshot_download resolves the cache folder: the paths
            # it returns are then compared with these (an HF_HOME through a link had read every cached
            # file as one the server had just sent, and its change was blamed on the server)
            self.folder = self.folder.resolve()
        self.entries = set(_entries_below(self.folder))
        self.started_ns = time.time_ns()
        self.refs: dict[Path, bytes] = {}
        for path in _entries_below(self.folder / "refs"):
            with suppress(OSError):
                if path.is_file() and not path.is_symlink():
                    self.refs[path] = path.read_bytes()

    def restore(self) -> None:
        """Best effort: a file that cannot be removed stays, and the error being raised is kept."""
        added = set(_entries_below(self.folder)) - self.entries
        for path in sorted(added, key=lambda p: len(p.parts), reverse=True):  # what a folder holds first
            with suppress(OSError):
                if path.is_dir() and not path.is_symlink():
                    path.rmdir()
                else:
                    path.unlink()
        for path, data in self.refs.items():
            with suppress(OSError):
                if path.is_symlink() or not path.is_file() or path.read_bytes() != data:
                    # renamed into place, as huggingface_hub writes refs: no reader sees an empty one
                    tmp = path.with_name(f".{path.name}.{secrets.token_hex(8)}.tmp")
                    try:
                        tmp.write_bytes(data)
                        os.replace(tmp, path)
                    finally:
                        tmp.unlink(missing_ok=True)

    def escaped(self) -> list[tuple[str, str, str]]:
        """(file, ETag, where) for each snapshot link the download added that leads out of the
        repository's ``blobs/``: huggingface_hub names a blob by the ETag the server answers, unchecked,
        so an ETag '../../x' had written the file's bytes at x, outside the cache. Such a file is
        removed when it was written since this record was taken (huggingface_hub writes no blob that
        exists: an older file there is someone's own, and stays); ``where`` says which."""
        blobs = self.folder / "blobs"
        found = []
        for link in sorted(set(_entries_below(self.folder / "snapshots")) - self.entries):
            with suppress(OSError):
                target = Path(os.path.normpath(link.parent / os.readlink(link))) if link.is_symlink() else None
                if target is None or target.parent == blobs:
                    continue
                etag = os.path.relpath(target, blobs)
                file = link.relative_to(self.folder / "snapshots").as_posix().split("/", 1)[-1]
                # and its lock file, which huggingface_hub names after the ETag too
                lock = Path(os.path.normpath(self.folder.parent / ".locks" / self.folder.name / f"{etag}.lock"))
                removed = [path for path in (target, lock) if self._written_since(path) and _unlinked(path)]
                found.append((file, etag, f"{target} ({'removed' if target in removed else 'left: it was there before'})"))
        return found

    def beside(self, commit: str) -> list[tuple[str, str]]:
        """(other commit, file) for each file the download added to the cache's copy of a commit other
        than ``commit``, the one it returns: huggingface_hub files each file under the commit the
        server's answer for it names (X-Repo-Commit), unchecked, so naming another cached commit (one a
        lock pins) had added a file to that copy, which then failed offline ("present but not listed")."""
        snapshots = self.folder / "snapshots"
        found = []
        for path in sorted(set(_entries_below(snapshots)) - self.entries):
            parts = path.relative_to(snapshots).parts
            if len(parts) > 1 and parts[0] != commit and (path.is_symlink() or not path.is_dir()):
                found.append((parts[0], "/".join(parts[1:])))
        return found

    def _written_since(self, path: Path) -> bool:
        with suppress(OSError):
            return path.is_file() and not path.is_symlink() and path.stat().st_ctime_ns >= self.started_ns
        return False


def _unlinked(path: Path) -> bool:
    try:
        path.unlink()
    except OSError:
        return False
    return True


def lock_timeout() -> int:
    """``$WEBGPU_KERNELS_HUB_LOCK_TIMEOUT`` as it is now (LOCK_TIMEOUT_S when unset), else an
    InputError naming it. Read by a load before its first request (a malformed value had been
    refused only at the lock, after the listing went to the Hub)."""
    return env_count(LOCK_TIMEOUT_ENV, LOCK_TIMEOUT_S)


@contextmanager
def repo_lock(endpoint: str | None, repo_id: str, rev: str, *, timeout: int | None = None) -> Iterator[None]:
    """Hold the repository's lock between processes (and threads) while its cache folder is read,
    written or put back: workers started together (torchrun, a DataLoader, pytest-xdist) load the
    same repository at once, and a download that failed in one had removed, as its undo, what
    another downloaded meanwhile. Per repository, not per revision: revisions share blobs.
    A cache this process cannot write (a read-only copy) is read without the lock. ``timeout``:
    seconds to wait (None: :func:`lock_timeout` now)."""
    if timeout is None:
        timeout = lock_timeout()
    path = cache_dir_for(endpoint) / ".locks" / repo_cache_folder(endpoint, repo_id).name / LOCK_NAME
    # One lock object per path (is_singleton): reentrant in the thread that holds it, so a load nested
    # in another of the same repository (an accept callback) does not wait for itself; group-writable,
    # as huggingface_hub's lock files are, for a cache shared by a group.
    lock = FileLock(path, mode=0o664, is_singleton=True)
    held = False
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        lock.acquire(timeout=timeout)
        held = True
    except Timeout:  # before OSError: filelock's Timeout is a TimeoutError
        raise HubError(f"{repo_id} revision {rev!r}: waited {timeout} s for the lock {path}, held by another process "
                       f"downloading or checking this repository; retry when it is done, or set ${LOCK_TIMEOUT_ENV} "
                       "to wait longer", repo_id=repo_id, revision=rev) from None  # fmt: skip
    except OSError:
        pass
    try:
        yield
    finally:
        if held:
            lock.release()


def _entries_below(folder: Path) -> list[Path]:
    """``folder`` and everything below it (links listed, never followed); empty if it does not exist."""
    if not os.path.isdir(folder):
        return []
    found = [folder]
    for dirpath, dirnames, filenames in os.walk(folder):
        found.extend(Path(dirpath, name) for name in [*dirnames, *filenames])
    return found


def point_ref(endpoint: str | None, repo_id: str, rev: str, commit: str) -> None:
    """refs/<rev> of the repository's cache folder names ``commit`` (written whole, then renamed
    into place, as huggingface_hub writes its refs), unless it already does."""
    ref = repo_cache_folder(endpoint, repo_id) / "refs" / rev
    with suppress(OSError):  # a cache it cannot write is read-only: offline use then finds the older ref
        if ref.is_file() and ref.read_text(encoding="utf-8") == commit:
            return
        ref.parent.mkdir(parents=True, exist_ok=True)
        tmp = ref.with_name(f".{ref.name}.{secrets.token_hex(8)}.tmp")
        try:
            tmp.write_text(commit, encoding="utf-8")
            os.replace(tmp, ref)
        finally:
            tmp.unlink(missing_ok=True)


def repo_cache_folder(endpoint: str | None, repo_id: str) -> Path:
    """The Hub cache's folder of one repository (refs, snapshots, blobs)."""
    from huggingface_hub.file_download import repo_folder_name

    return cache_dir_for(endpoint) / repo_folder_name(repo_id=repo_id, repo_type=REPO_TYPE)


def refused_write(exc: BaseException | None, cache_dir: Path) -> str | None:
    """"<reason>: <path>" when ``exc`` (or its cause) is the system refusing this process a write into
    the Hub cache or a folder above it (a read-only copy, another user's cache), else None."""
    cache = os.path.abspath(cache_dir)
    for _ in range(8):
        if isinstance(exc, OSError) and exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS) and exc.filename:
            path = os.path.abspath(os.fsdecode(exc.filename))
            if os.path.commonpath([path, cache]) in (path, cache):  # the cache, below it or above it
                return f"{exc.strerror or 'refused'}: {path}"
        exc = None if exc is None else exc.__cause__ or exc.__context__
    return None
