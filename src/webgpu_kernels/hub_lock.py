"""Reproducible pins for a project: ``webgpu-kernels lock`` and :func:`get_locked_kernel`.

A project names the Hub kernels it uses in its ``pyproject.toml``::

    [tool.webgpu-kernels.dependencies]
    "webgpu-kernels/com.microsoft.QuickGelu" = 1     # contract version: revision v1

:func:`lock_project` asks the Hub (``HF_ENDPOINT``) which commit each ``vN`` branch is now and
writes ``webgpu-kernels.lock`` beside the pyproject: per repository its contract version, that
commit and the sha256 of the commit's ``build/webgpu/metadata.json``. metadata.json lists the
sha256 of every package file, so its own digest pins the whole package. The lock changes only
when ``lock`` runs again: a branch that moves since does not move it.

:func:`get_locked_kernel` opens exactly the locked commit (from the cache offline) and refuses one
whose metadata.json is not the locked one. ``webgpu-kernels download --lock`` fetches every locked
commit into the cache (:func:`download_locked`), for an image that runs offline later.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import stat
import tempfile
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from . import hub, hub_cache, hub_errors
from .digests import MAX_FILE_BYTES, METADATA_FILE
from .errors import DigestError, HubCommitNotServedError, HubError, HubNotCachedError, PackageError, shorten
from .hub_cache import DEFAULT_ENDPOINT, REPO_TYPE, hub_endpoint, hub_offline
from .locations import OFFICIAL_ORG, Location, check_trust, checked_repo_id, is_repo_id
from .reading import decode_json, not_regular, read_bounded
from .replacing import replace_file, write_path

if TYPE_CHECKING:
    from .kernel import Kernel

#: The lock file's name, in the project folder (beside pyproject.toml).
LOCK_FILE = "webgpu-kernels.lock"
#: The project file and the table of it that lists the kernels.
PYPROJECT = "pyproject.toml"
TABLE = "tool.webgpu-kernels.dependencies"
#: The lock file's layout; a reader refuses another (a newer release's).
LOCK_FORMAT = 1
#: The most bytes of pyproject.toml or of a lock file read: far past any real one, and a FIFO or
#: /dev/zero in their place is refused rather than waited on or read forever.
MAX_PROJECT_FILE_BYTES = 16 * 1024 * 1024

_COMMIT = re.compile(r"[0-9a-f]{40}")
_SHA256 = re.compile(r"[0-9a-f]{64}")
_ENTRY_KEYS = ("commit", "metadataSha256", "repo", "version")


@dataclass(frozen=True)
class LockEntry:
    """One locked repository: contract version ``version`` was ``commit``, whose metadata.json has
    the sha256 ``metadata_sha256``."""

    repo: str
    version: int
    commit: str
    metadata_sha256: str

    def as_dict(self) -> dict[str, Any]:
        return {"repo": self.repo, "version": self.version, "commit": self.commit,
                "metadataSha256": self.metadata_sha256}  # fmt: skip


@dataclass(frozen=True)
class LockResult:
    """What :func:`lock_project` wrote: the lock file, its entries (sorted by repository) and
    whether its bytes changed (False: the file already said this)."""

    path: Path
    entries: tuple[LockEntry, ...]
    changed: bool


# --- pyproject.toml ---------------------------------------------------------------------------------


def read_dependencies(project_dir: str | os.PathLike[str] = ".") -> dict[str, int]:
    """``{repository: contract version}`` of the project's ``[tool.webgpu-kernels.dependencies]``,
    sorted by repository; every problem is a PackageError naming the pyproject and the entry."""
    folder = Path(project_dir)
    if not folder.is_dir():
        raise PackageError("no such folder (PROJECT_DIR is the folder that holds pyproject.toml)", path=str(folder))
    path = folder / PYPROJECT
    try:
        text = read_bounded(path, MAX_PROJECT_FILE_BYTES).decode("utf-8")
        data = tomllib.loads(text)
    except FileNotFoundError:
        raise PackageError(f"no such file: `lock` pins the kernels that its [{TABLE}] table lists, one "
                           '`"org/op" = N` line each (N: the contract version)', path=str(path)) from None  # fmt: skip
    except (OSError, UnicodeDecodeError) as exc:
        raise PackageError(f"cannot be read: {exc}", path=str(path)) from None
    except tomllib.TOMLDecodeError as exc:
        # Some Windows editors write one; tomllib's "Invalid statement (at line 1, column 1)" hides it
        bom = text.startswith("\ufeff")
        raise PackageError("starts with a byte order mark (U+FEFF), which TOML readers, pip's included, refuse: "
                           "save it as UTF-8 without one" if bom else f"not valid TOML: {exc}", path=str(path)) from None  # fmt: skip
    table: Any = data
    for part in ("tool", "webgpu-kernels", "dependencies"):
        if not isinstance(table, dict) or part not in table:
            raise PackageError(f"has no [{TABLE}] table: list the Hub kernels the project uses there, one "
                               f'`"org/op" = N` line each (N: the contract version), e.g. '
                               f'"{OFFICIAL_ORG}/com.microsoft.QuickGelu" = 1', path=str(path))  # fmt: skip
        table = table[part]
    if not isinstance(table, dict):
        raise PackageError(f"[{TABLE}] must be a table of `\"org/op\" = N` lines, got {_toml_kind(table)}",
                           path=str(path))  # fmt: skip
    found: dict[str, int] = {}
    spelt: dict[str, str] = {}  # lower case -> the key as written: the Hub reads ids without regard to case
    for repo, version in table.items():
        where = f"[{TABLE}] {repo!r}"
        try:
            checked_repo_id(repo)
        except PackageError as exc:
            raise PackageError(f"{where}: expected a Hub kernel repository id 'org/op' as the key ({exc.detail}); "
                               "the version goes on the right: \"org/op\" = 2", path=str(path)) from None  # fmt: skip
        if isinstance(version, bool) or not isinstance(version, int) or version < 1:
            raise PackageError(f"{where}: expected the contract version, an integer from 1 (\"{repo}\" = 1), got "
                               f"{shorten(repr(version), 60)} ({_toml_kind(version)})", path=str(path))  # fmt: skip
        earlier = spelt.setdefault(repo.lower(), repo)
        if earlier != repo:
            raise PackageError(f"[{TABLE}] {earlier!r} and {repo!r} are one repository (the Hub reads repository ids "
                               "without regard to case): expected one entry for it, keep one spelling",
                               path=str(path))  # fmt: skip
        found[repo] = version
    return dict(sorted(found.items()))


def _toml_kind(value: Any) -> str:
    return {bool: "a boolean", int: "an integer", float: "a float", str: "a string", list: "an array",
            dict: "a table"}.get(type(value), type(value).__name__)  # fmt: skip


# --- locking ------------------------------------------------------------------------------------------


def lock_project(project_dir: str | os.PathLike[str] = ".") -> LockResult:
    """Resolve every kernel of the project's pyproject.toml to the commit its ``vN`` branch is now
    on the Hub (``HF_ENDPOINT``) and write ``webgpu-kernels.lock`` beside it (only when its bytes
    change). Needs the Hub: offline or unreachable is a HubError, and nothing is written."""
    dependencies = read_dependencies(project_dir)
    if hub_offline():  # before any request: the lock records what the Hub says now, not what is cached
        raise HubError("`lock` asks the Hub which commit each vN branch is now, and offline mode is on "
                       "(HF_HUB_OFFLINE): unset it to lock; an existing lock file still loads offline")  # fmt: skip
    hub.require_kernel_repos()
    entries = tuple(resolve(repo, version) for repo, version in dependencies.items())
    path = Path(project_dir) / LOCK_FILE
    data = render_lock(entries).encode("utf-8")  # bytes: the same "\n" line ends on every system
    try:
        changed = read_bounded(path, MAX_PROJECT_FILE_BYTES) != data
    except (OSError, PackageError):  # none, or no lock file to keep: the new one replaces it
        changed = True
    if changed:
        _write_whole(path, data)
    return LockResult(path=path, entries=entries, changed=changed)


def render_lock(entries: tuple[LockEntry, ...] | list[LockEntry]) -> str:
    """The lock file's text: JSON, keys sorted, entries sorted by repository, one final newline,
    so that the same pins always give the same bytes."""
    kernels = [e.as_dict() for e in sorted(entries, key=lambda e: e.repo)]
    return json.dumps({"format": LOCK_FORMAT, "kernels": kernels}, indent=2, sort_keys=True) + "\n"


def _write_whole(path: Path, data: bytes) -> None:
    """Written beside, then renamed into place (replace_file): a reader never sees half a lock file,
    and the new one keeps the old one's permissions. A symbolic link of this user's is written
    through, as the tuning file's is (write_path): replaced, the file it named had gone stale."""
    try:
        replace_file(write_path(path), data)
    except OSError as exc:
        raise PackageError(f"cannot write the lock file: {exc.strerror or exc}", path=str(path)) from None


def resolve(repo_id: str, version: int) -> LockEntry:
    """The commit revision ``v{version}`` of ``repo_id`` is on the Hub now, and the sha256 of that
    commit's metadata.json (whose contract version must be ``version``)."""
    from huggingface_hub import HfApi

    api = HfApi(endpoint=hub_endpoint())
    commit = branch_commit(repo_id, version, api=api)
    rev = f"v{version}"
    data = _metadata_bytes(api, repo_id, commit, rev)
    try:
        metadata = decode_json(data)
    except ValueError as exc:
        raise DigestError(f"{METADATA_FILE} of {repo_id} at commit {commit} is not valid JSON ({exc}): tell the "
                          "repository's authors", file=METADATA_FILE, reason="metadata") from None  # fmt: skip
    declared = metadata.get("version") if isinstance(metadata, dict) else None
    if isinstance(declared, bool) or declared != version:
        raise DigestError(f"revision {rev!r} of {repo_id} (commit {commit}) holds contract version "
                          f"{shorten(repr(declared), 40)}, not {version}, in its {METADATA_FILE}: tell the "
                          "repository's authors", file=METADATA_FILE, reason="metadata")  # fmt: skip
    return LockEntry(repo=repo_id, version=version, commit=commit, metadata_sha256=hashlib.sha256(data).hexdigest())


def branch_commit(repo_id: str, version: int, *, api: Any = None) -> str:
    """The commit branch ``v{version}`` of ``repo_id`` is on the Hub (``HF_ENDPOINT``) now."""
    from huggingface_hub import HfApi

    rev = f"v{hub.check_version(version, repo_id)}"
    endpoint = hub_endpoint()
    api = api if api is not None else HfApi(endpoint=endpoint)
    try:
        commit = api.repo_info(repo_id, revision=rev, repo_type=REPO_TYPE, timeout=hub.metadata_timeout()).sha
    except Exception as exc:  # noqa: BLE001 - each answer is named below; anything else is the client's
        raise hub_errors.request_error(exc, repo_id, rev, endpoint=endpoint, token=None, version=version, lock=True) from None
    if not (isinstance(commit, str) and _COMMIT.fullmatch(commit)):
        raise HubError(f"{repo_id} revision {rev!r}: {endpoint or DEFAULT_ENDPOINT} named the commit "
                       f"{shorten(repr(commit), 60)}, not a 40-hex commit sha", repo_id=repo_id, revision=rev)  # fmt: skip
    return commit


def _metadata_bytes(api: Any, repo_id: str, commit: str, rev: str) -> bytes:
    """``build/webgpu/metadata.json`` at ``commit``, fetched into a temporary folder (a lone file in
    the Hub cache would read as an incomplete snapshot of the commit); its listed size is checked first."""
    from huggingface_hub import RepoFile, hf_hub_download

    name = f"{hub.PACKAGE_DIR}/{METADATA_FILE}"
    try:
        listed = api.get_paths_info(repo_id, [name], revision=commit, repo_type=REPO_TYPE)
        file = next((f for f in listed if isinstance(f, RepoFile) and f.path == name), None)
        if file is None:
            raise HubError(f"{repo_id} revision {rev!r} (commit {commit}) has no {name}: not a WebGPU kernel package "
                           "(a Hub package must carry metadata.json)", repo_id=repo_id, revision=rev)  # fmt: skip
        hub.check_listed(repo_id, rev, [(file.path, file.size)])  # download's rule: a count of bytes, at most MAX_FILE_BYTES
        with tempfile.TemporaryDirectory(prefix="webgpu-kernels-lock-") as tmp, hub_cache.cache_folder(Path(tmp)):
            undo = hub_cache.CacheUndo(api.endpoint, repo_id)  # the temporary folder's, for what leaves it
            # Bounded by the listed size as it is written: huggingface_hub had written whatever the
            # server sent into the temporary folder before the size check below read it
            said = f"{api.endpoint or DEFAULT_ENDPOINT} sent more than the {file.size} bytes its listing of {name} announced"
            path = hf_hub_download(repo_id, name, repo_type=REPO_TYPE, revision=commit, cache_dir=tmp,
                                   endpoint=api.endpoint, library_name="webgpu-kernels",
                                   library_version=hub.library_version(),
                                   tqdm_class=hub.bounded_progress(file.size, repo_id, rev, said))  # fmt: skip
            hub.refuse_escapes(undo, repo_id, rev, api.endpoint)
            with open(path, "rb") as handle:
                data = handle.read(MAX_FILE_BYTES + 1)
    except HubError:
        raise
    except Exception as exc:  # noqa: BLE001 - named below
        raise hub_errors.request_error(exc, repo_id, rev, endpoint=hub_endpoint(), token=None, version=None, lock=True) from None
    if len(data) > MAX_FILE_BYTES:
        raise HubError(f"{repo_id} revision {rev!r}: {name} is larger than a package file may be ({MAX_FILE_BYTES})",
                       repo_id=repo_id, revision=rev)  # fmt: skip
    return data


# --- checking ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LockDifference:
    """One way a lock file disagrees with its pyproject or the Hub. ``kind``: ``"added"`` (in the
    pyproject, not locked), ``"removed"`` (locked, not in the pyproject), ``"version"`` (another
    contract version in each) or ``"moved"`` (branch vN is another commit on the Hub now)."""

    kind: str
    repo: str
    lock_version: int | None
    pyproject_version: int | None
    lock_commit: str | None
    hub_commit: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "repo": self.repo, "lockVersion": self.lock_version,
                "pyprojectVersion": self.pyproject_version, "lockCommit": self.lock_commit,
                "hubCommit": self.hub_commit}  # fmt: skip

    def describe(self, endpoint: str) -> str:
        if self.kind == "added":
            return f"added: {self.repo} v{self.pyproject_version} (in {PYPROJECT}, not in the lock file)"
        if self.kind == "removed":
            return f"removed: {self.repo} v{self.lock_version} (in the lock file, not in {PYPROJECT})"
        if self.kind == "version":
            return f"version: {self.repo} v{self.lock_version} in the lock file, v{self.pyproject_version} in {PYPROJECT}"
        return (f"moved: {self.repo} v{self.lock_version}: branch v{self.lock_version} is commit {self.hub_commit} "
                f"on {endpoint}, the lock file has {self.lock_commit}")  # fmt: skip


@dataclass(frozen=True)
class LockCheck:
    """What :func:`check_lock` found: the lock file, whether it exists, its entries, whether the Hub
    was asked (not offline) and on which endpoint, and the differences, sorted by repository."""

    path: Path
    lock_found: bool
    entries: tuple[LockEntry, ...]
    hub_asked: bool
    endpoint: str | None
    differences: tuple[LockDifference, ...]

    @property
    def up_to_date(self) -> bool:
        return self.lock_found and not self.differences


def check_lock(project_dir: str | os.PathLike[str] = ".") -> LockCheck:
    """Compare ``webgpu-kernels.lock`` with the project's pyproject table (the same repositories and
    versions) and, unless offline (``HF_HUB_OFFLINE``), each locked commit with the one its ``vN``
    branch is on the Hub now. Writes nothing. A missing lock file is a difference (every kernel is
    "added"); an unreadable or malformed one, or a Hub that cannot answer, is an error."""
    dependencies = read_dependencies(project_dir)
    path = Path(project_dir) / LOCK_FILE
    found = os.path.lexists(path)
    entries = read_lockfile(path) if found else {}
    differences: list[LockDifference] = []
    asked: list[LockEntry] = []
    # Matched without regard to case, as the Hub reads ids: a respelt key is the same repository
    wanted_by = {repo.lower(): (repo, version) for repo, version in dependencies.items()}
    locked_by = {repo.lower(): entry for repo, entry in entries.items()}
    for key in sorted(wanted_by.keys() | locked_by.keys()):
        entry = locked_by.get(key)
        repo, wanted = wanted_by.get(key, (entry.repo if entry else key, None))
        if entry is None:
            differences.append(LockDifference("added", repo, None, wanted, None))
        elif wanted is None:
            differences.append(LockDifference("removed", repo, entry.version, None, entry.commit))
        elif wanted != entry.version:
            differences.append(LockDifference("version", repo, entry.version, wanted, entry.commit))
        else:
            asked.append(entry)
    offline = hub_offline()
    endpoint = None if offline else (hub_endpoint() or DEFAULT_ENDPOINT)
    if not offline and asked:  # only the entries the pyproject still wants at their version: a new vN means lock
        hub.require_kernel_repos()
        for entry in asked:
            commit = branch_commit(entry.repo, entry.version)
            if commit != entry.commit:
                differences.append(LockDifference("moved", entry.repo, entry.version, entry.version, entry.commit,
                                                  commit))  # fmt: skip
    differences.sort(key=lambda d: d.repo)
    return LockCheck(path=path, lock_found=found, entries=tuple(entries.values()), hub_asked=not offline, endpoint=endpoint,
                     differences=tuple(differences))  # fmt: skip


# --- reading the lock ---------------------------------------------------------------------------------


def find_lockfile(lockfile: str | os.PathLike[str] | None = None) -> Path:
    """``lockfile`` (a lock file, or a folder holding one), else the first ``webgpu-kernels.lock``
    in the current folder or a folder above it."""
    if lockfile is not None:
        path = Path(lockfile)
        if path.is_dir():
            path = path / LOCK_FILE
        kind = not_regular(path)  # is_file() is False for a FIFO or a folder too: none is "no such lock file"
        if kind is not None:
            raise PackageError(f"the lock file is not a regular file ({kind})", path=str(path))
        if not path.is_file():
            raise PackageError("no such lock file (write it with `webgpu-kernels lock PROJECT_DIR`)", path=str(path))
        return path
    here = Path.cwd()
    stopped = ""
    for folder in (here, *here.parents):
        # A folder any user may write (/tmp) ends the search unread: a lock file there could be
        # another user's, choosing which commit of an official repository this project loads.
        if _anyone_may_write(folder):
            stopped = f" (the search stopped at {folder}, which may be written by any user: pass lockfile= to use one there)"
            break
        candidate = folder / LOCK_FILE
        if os.path.lexists(candidate):  # a FIFO or a folder of that name had been passed over, the search going on above
            kind = not_regular(candidate)
            if kind is not None:
                raise PackageError(f"expected a regular file (the lock file `webgpu-kernels lock` writes), got {kind}: "
                                   f"the search for {LOCK_FILE} from {here} upwards stops at the first entry of that "
                                   "name; remove it, or pass lockfile=", path=str(candidate))  # fmt: skip
            return candidate
    raise PackageError(f"no {LOCK_FILE} in {here} or a folder above it: write one with `webgpu-kernels lock "
                       f"PROJECT_DIR`, or pass lockfile= its path{stopped}")  # fmt: skip


def _anyone_may_write(folder: Path) -> bool:
    try:
        return bool(folder.stat().st_mode & stat.S_IWOTH)
    except OSError:
        return False


def read_lockfile(path: str | os.PathLike[str]) -> dict[str, LockEntry]:
    """``{repository: entry}`` of a lock file; a malformed one is a PackageError naming it and the entry."""
    path = Path(path)
    try:
        data = decode_json(read_bounded(path, MAX_PROJECT_FILE_BYTES))
    except OSError as exc:
        raise PackageError(f"cannot read the lock file: {exc.strerror or exc}", path=str(path)) from None
    except ValueError as exc:
        raise PackageError(f"not a lock file: {exc}", path=str(path)) from None
    if not isinstance(data, dict) or data.get("format") != LOCK_FORMAT or not isinstance(data.get("kernels"), list):
        said = data.get("format") if isinstance(data, dict) else None
        raise PackageError(f"expected a lock file of format {LOCK_FORMAT} (an object with \"format\": {LOCK_FORMAT} "
                           f"and a \"kernels\" list), got format {shorten(repr(said), 40)}: write it again with "
                           "`webgpu-kernels lock` (a newer release's lock file needs that release)",
                           path=str(path))  # fmt: skip
    entries: dict[str, LockEntry] = {}
    spelt: dict[str, str] = {}  # lower case -> the repository as listed: one repository, whatever its case
    for i, item in enumerate(data["kernels"]):
        where = f"kernels[{i}]"
        if not isinstance(item, dict) or sorted(item) != sorted(_ENTRY_KEYS):
            got = sorted(item) if isinstance(item, dict) else type(item).__name__
            raise PackageError(f"{where}: expected an object with the keys {', '.join(_ENTRY_KEYS)}, got {got}",
                               path=str(path))  # fmt: skip
        repo, version, commit, digest = item["repo"], item["version"], item["commit"], item["metadataSha256"]
        problem = (
            "repo must be a Hub repository id 'org/op'" if not is_repo_id(repo) else
            "version must be an integer from 1" if isinstance(version, bool) or not isinstance(version, int)
            or version < 1 else
            "commit must be a 40-hex commit sha" if not isinstance(commit, str) or not _COMMIT.fullmatch(commit) else
            "metadataSha256 must be 64 lowercase hex" if not isinstance(digest, str) or not _SHA256.fullmatch(digest)
            else "the repository has an entry before" if repo.lower() in spelt else None
        )  # fmt: skip
        if problem is not None:
            if repo.lower() in spelt and spelt[repo.lower()] != repo:
                problem += f" (spelt {spelt[repo.lower()]!r}: the Hub reads repository ids without regard to case)"
            raise PackageError(f"{where}: {problem}, got {shorten(json.dumps(item), 160)}", path=str(path))
        spelt[repo.lower()] = repo
        entries[repo] = LockEntry(repo=repo, version=version, commit=commit, metadata_sha256=digest)
    return entries


# --- loading ------------------------------------------------------------------------------------------


def get_locked_kernel(
    repo_id: str,
    lockfile: str | os.PathLike[str] | None = None,
    *,
    trust_remote_code: bool = False,
    expected_op_id: str | None = None,
) -> Kernel:
    """The kernel of ``repo_id`` at the commit the project's lock file pins (see ``docs/hub.md``,
    "Locking versions").

    ``lockfile``: the lock file or the folder that holds it; by default the first
    ``webgpu-kernels.lock`` in the current folder or a folder above it. Opens exactly the locked
    commit (from the Hugging Face cache when it holds it, offline included), checked as
    ``get_kernel(repo_id, revision=commit)`` checks it, and refuses it with a DigestError when its
    metadata.json is not the one locked. A repository the lock file does not list is a HubError
    naming the file and what it lists. Trust as ``get_kernel``'s: a repository outside the
    ``webgpu-kernels`` organisation needs ``trust_remote_code=True``.
    """
    checked_repo_id(repo_id)
    check_trust(Location("hub", repo_id), trust_remote_code=trust_remote_code, shown=repo_id)  # before anything is read
    path = find_lockfile(lockfile)
    entries = read_lockfile(path)
    # The Hub reads repository ids without regard to case; the entry's own spelling is downloaded
    entry = next((e for repo, e in entries.items() if repo.lower() == repo_id.lower()), None)
    if entry is None:
        listed = ", ".join(entries) or "no repository"
        raise HubError(f"{repo_id} is not in the lock file {path} (it lists {listed}): add it to [{TABLE}] in "
                       f"{PYPROJECT}, then run `webgpu-kernels lock`", repo_id=repo_id)  # fmt: skip
    kernel = load_locked(entry, path, trust_remote_code=trust_remote_code)
    return hub.check_op_id(kernel, expected_op_id, repo_id)


def load_locked(entry: LockEntry, lockfile: Path, *, trust_remote_code: bool) -> Kernel:
    """The kernel of one lock entry: its commit, refused (and its download undone) unless its
    metadata.json has the locked sha256 and contract version."""

    def check(package: hub.HubPackage) -> None:
        check_pinned(package, entry, lockfile)

    try:
        kernel = hub.load(entry.repo, revision=entry.commit, trust_remote_code=trust_remote_code, accept=check)
    except HubError as exc:
        if exc.revision == entry.commit and hub_errors.revision_not_found(exc):  # the Hub no longer has the
            # commit, nor the cache (which it would have served): "has no revision '<sha>'" had said nothing of
            # the lock file or the way out
            where = hub_endpoint() or DEFAULT_ENDPOINT
            raise HubCommitNotServedError(
                f"{entry.repo} commit {entry.commit}, which {lockfile} pins for contract version {entry.version}, is "
                f"no longer served by {where} (the commit was removed, or branch v{entry.version} force-pushed past "
                f"it) and the Hugging Face cache ({hub_cache.cache_dir_for(hub_endpoint())}) does not hold it: run "
                f"`webgpu-kernels lock {lockfile.parent}` to lock the commit each branch vN is now (and review what "
                "changed), or set HF_HOME or HF_HUB_CACHE to a cache that holds it", repo_id=entry.repo,
                revision=entry.commit, lockfile=str(lockfile)) from exc  # fmt: skip
        if hub_offline() or isinstance(exc, HubNotCachedError):  # a Hub it cannot reach, too
            exc.add_note(f"every commit {lockfile} pins is fetched once online with `webgpu-kernels download "
                         f"--lock {lockfile.parent}`")  # fmt: skip
        raise
    check(kernel.package)  # type: ignore[arg-type]  # hub.load makes HubPackages; a shared kernel skips accept
    return kernel


def check_pinned(package: hub.HubPackage, entry: LockEntry, lockfile: Path) -> None:
    """Refuse (DigestError) a package whose metadata.json is not the locked one, or whose contract
    version is not the locked version. The bytes hashed must decode to the metadata the package's
    files were verified against, so what is compared is what was checked."""
    path = package.root / METADATA_FILE
    try:
        data = path.read_bytes()
        same = decode_json(data) == package.metadata
    except (OSError, ValueError):
        data, same = b"", False
    if not same:
        raise DigestError(f"{METADATA_FILE} of {entry.repo} at commit {entry.commit} changed after it was verified",
                          file=METADATA_FILE, reason="mismatch", path=str(path))  # fmt: skip
    digest = hashlib.sha256(data).hexdigest()
    if digest != entry.metadata_sha256:
        raise DigestError(f"sha256 {digest} of {entry.repo}'s {METADATA_FILE} at commit {entry.commit} is not "
                          f"{entry.metadata_sha256}, the one {lockfile} locked: this is not the package that was "
                          "locked (a lock file edited by hand, or a Hub that changed what the commit holds); run "
                          "`webgpu-kernels lock` again only if you trust what the Hub serves now", file=METADATA_FILE,
                          reason="mismatch", path=str(path))  # fmt: skip
    hub.check_contract_version(package, entry.version)


def download_locked(lockfile: str | os.PathLike[str] | None = None, *,
                    trust_remote_code: bool = False) -> tuple[Path, list[Kernel]]:  # fmt: skip
    """Fetch every commit a lock file pins into the Hugging Face cache, each checked as
    :func:`get_locked_kernel` checks it; returns the lock file and the kernels, in its order. Every
    repository's trust is checked before anything is fetched."""
    path = find_lockfile(lockfile)
    entries = read_lockfile(path)
    for entry in entries.values():
        check_trust(Location("hub", entry.repo), trust_remote_code=trust_remote_code, shown=entry.repo)
    return path, [load_locked(entry, path, trust_remote_code=trust_remote_code) for entry in entries.values()]
