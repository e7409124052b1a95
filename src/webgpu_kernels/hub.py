"""Kernel packages from the Hugging Face Hub, fetched with huggingface_hub into its cache.

Layout of the ``webgpu-kernels`` collection (see ``docs/hub.md``):

* one **kernel repository** per op (``repo_type="kernel"``, URLs under ``kernels/<org>/<op>``),
  e.g. ``webgpu-kernels/com.microsoft.BiasAdd``;
* contract version N is the revision ``vN``; ``revision=`` pins a branch, tag or commit instead;
* the package files live under ``build/webgpu/`` in the repository; only that folder is fetched.

Files land in the Hugging Face cache (``HF_HUB_CACHE``, else ``HF_HOME/hub``) and are reused
offline (``HF_HUB_OFFLINE=1``). A Hub package must carry ``metadata.json``: the package is opened
by :func:`~webgpu_kernels.package.open_folder`, which checks every file against its sha256 there
and keeps the verified bytes (what runs is what was checked).

huggingface_hub reads ``HF_ENDPOINT``, ``HF_HOME``/``HF_HUB_CACHE`` and ``HF_HUB_OFFLINE`` once,
when it is imported. This module reads them from the environment **at each call** and passes them
to the client explicitly (``endpoint=``, ``cache_dir=``, ``local_files_only=``), so setting them
after import (as tests do) takes effect.
"""

from __future__ import annotations

import math
import os
import re
import threading
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple, cast

from . import hub_cache, hub_errors
from .digests import (
    MAX_FILE_BYTES,
    MAX_NAME_LENGTH,
    MAX_PACKAGE_BYTES,
    MAX_PACKAGE_FILES,
    MAX_SEGMENT_LENGTH,
    METADATA_FILE,
    is_content_file,
    package_files,
)
from .errors import DigestError, HubError, HubNotCachedError, KernelError, PackageError, printable, shorten
from .forks import fresh_in_child
from .hub_cache import (
    DEFAULT_ENDPOINT,
    REPO_TYPE,
    cache_dir_for,
    hub_endpoint,
    hub_offline,
)
from .locations import Location, check_trust, checked_repo_id
from .package import KernelPackage, open_folder
from .portability import name_problems

if TYPE_CHECKING:
    from .kernel import Kernel

#: Where a repository keeps the WebGPU package.
PACKAGE_DIR = "build/webgpu"

_COMMIT = re.compile(r"^[0-9a-f]{40}\Z")


# --- packages in the cache ----------------------------------------------------------------------------


@dataclass(frozen=True)
class HubPackage(KernelPackage):
    """A package folder inside a Hub cache snapshot, opened (and digest-verified) by
    :func:`~webgpu_kernels.package.open_folder`, plus where it came from.

    The snapshot's files are symbolic links into the repository's ``blobs/`` folder (its folders
    are real ones): links to files are followed, as in any package, and the package reads the
    bytes it verified when it was opened.
    """

    repo_id: str = ""
    revision: str = ""  # as the call that first loaded it asked: "v1", a branch, a commit
    commit: str = ""  # what it resolved to
    endpoint: str | None = None  # None: huggingface_hub's default (https://huggingface.co)
    #: True when the endpoint was not asked (offline), could not be reached, or did not list the
    #: revision (a pinned commit it no longer has, still cached), so the files are
    #: the cache's copy from an earlier download.
    from_cache: bool = False
    #: Why the cache's copy was used, in words (None when the endpoint served it): "offline mode is
    #: on", "<endpoint> cannot be reached (...)", "<endpoint> refused the token ... (401 ...)": a
    #: revoked HF_TOKEN had read as "could not be reached or did not list it".
    from_cache_reason: str | None = None

    @property
    def digests(self) -> dict[str, str]:
        """{file: sha256} of every file metadata.json lists (all verified at open)."""
        files = (self.metadata or {}).get("digest", {}).get("files", {})
        return dict(sorted(files.items()))


def _hub_package(base: KernelPackage, **extra: Any) -> HubPackage:
    return HubPackage(**{f.name: getattr(base, f.name) for f in fields(base)}, **extra)


# --- fetching -----------------------------------------------------------------------------------------


def revision_for(version: int | None, revision: str | None, repo_id: str) -> str:
    """The revision of ``repo_id`` to fetch: ``revision`` if given (it wins), else ``v{version}``."""
    if revision is not None:
        if not isinstance(revision, str) or not revision.strip():
            raise PackageError(f"{repo_id}: revision must be a non-empty string (a branch, tag or commit), "
                               f"got {revision!r}")  # fmt: skip
        return revision.strip()
    if version is None:
        raise PackageError(f"{repo_id}: a Hub kernel needs version=N (the contract version; revision 'vN') "
                           "or revision=...")  # fmt: skip
    return f"v{check_version(version, repo_id)}"


def check_version(version: Any, repo_id: str) -> int:
    """``version`` as a contract version (a positive int), else an error naming ``repo_id``."""
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise PackageError(f"{repo_id}: version must be a positive integer (contract version N), got {version!r}")
    return version


def download(
    repo_id: str,
    *,
    version: int | None = None,
    revision: str | None = None,
    trust_remote_code: bool = False,
    endpoint: str | None = None,
    url_like: bool = False,
    token: str | bool | None = None,
    accept: Callable[[HubPackage], object] | None = None,
) -> HubPackage:
    """Fetch ``build/webgpu/`` of a kernel repository into the Hub cache and open it, verified.

    Online, this asks the endpoint which commit the revision is and downloads what the cache lacks;
    offline (``HF_HUB_OFFLINE=1``) it uses the cache only. The package must carry metadata.json:
    every file is checked against its sha256 (:class:`~webgpu_kernels.errors.DigestError`).
    ``accept`` checks the opened package further (its manifest): a KernelError it raises refuses
    the download as a digest problem does, leaving the cache as it was.
    """
    checked_repo_id(repo_id)
    location = Location("hub", repo_id, url_like=url_like, endpoint=endpoint)
    trusted = check_trust(location, trust_remote_code=trust_remote_code, shown=repo_id)
    rev = revision_for(version, revision, repo_id)
    endpoint = endpoint or hub_endpoint()
    if token is None and (endpoint or DEFAULT_ENDPOINT) != (hub_endpoint() or DEFAULT_ENDPOINT):
        # The Hugging Face token (HF_TOKEN, a login) is for the configured Hub: huggingface_hub had sent
        # it to any host a kernel URL named
        token = False
    offline = hub_offline()
    lock_timeout = hub_cache.lock_timeout()  # a malformed value is refused before any request
    require_kernel_repos()
    # Asked before the lock: it writes nothing, and a refused listing leaves no trace in the cache.
    listed, unreached, unlisted = (None, None, None) if offline else _listing(
        repo_id, rev, endpoint=endpoint, token=token, version=version if revision is None else None)  # fmt: skip
    with hub_cache.repo_lock(endpoint, repo_id, rev, timeout=lock_timeout):
        return _download_locked(repo_id, rev, trusted=trusted, endpoint=endpoint, token=token, version=version,
                                revision=revision, accept=accept, listed=listed, unreached=unreached,
                                unlisted=unlisted, offline=offline)  # fmt: skip


def _download_locked(repo_id: str, rev: str, *, trusted: bool, endpoint: str | None, token: Any,
                     version: int | None, revision: str | None, accept: Callable[[HubPackage], object] | None,
                     listed: Listed | None, unreached: Exception | None, unlisted: Exception | None,
                     offline: bool) -> HubPackage:  # fmt: skip
    """:func:`download`'s fetch, open and undo, under the repository's lock: nothing another process
    of this library writes to the repository's cache folder can come between its CacheUndo's
    record and its restore (a restore had removed what another process downloaded meanwhile)."""
    # Offline nothing is written, so there is nothing to put back.
    undo = None if offline else hub_cache.CacheUndo(endpoint, repo_id)
    try:
        path, cache_reason = _snapshot(repo_id, rev, endpoint=endpoint, token=token, listed=listed, unreached=unreached,
                                       unlisted=unlisted, version=version if revision is None else None,
                                       offline=offline)  # fmt: skip
        from_cache = cache_reason is not None
    except BaseException as exc:  # a HubError, and Ctrl-C or any other exception midway: what the download
        # wrote had stayed (a partial snapshot, its tree listing, a half-written blob)
        if undo is not None:
            for file, etag, where in undo.escaped():
                exc.add_note(f"{where}: {file}, written there by its ETag {printable(shorten(repr(etag), 120))}")
            undo.restore()
        raise
    snapshot = Path(path)
    commit = snapshot.name
    if undo is not None:
        refuse_escapes(undo, repo_id, rev, endpoint)
        if _COMMIT.match(commit):  # else refused below: the cache names no commit for it
            refuse_other_commits(undo, repo_id, rev, endpoint, commit)
    root = snapshot / PACKAGE_DIR
    try:
        if not _COMMIT.match(commit):  # snapshot_download read an empty or garbled refs/<rev> and served
            # snapshots/ itself: this had read "(commit snapshots) has no build/webgpu/ folder"
            raise HubError(f"{repo_id} revision {rev!r}: the Hugging Face cache names no commit for it (an empty or "
                           f"damaged refs/{rev}): delete {hub_cache.repo_cache_folder(endpoint, repo_id)} to download it again",
                           repo_id=repo_id, revision=rev)  # fmt: skip
        if not root.is_dir():
            raise HubError(f"{repo_id} at revision {rev!r} (commit {commit}) has no {PACKAGE_DIR}/ folder: "
                           "not a WebGPU kernel package", repo_id=repo_id, revision=rev)  # fmt: skip
        if from_cache:  # no listing of this commit was checked (offline, unreachable, or the listing
            # failed): a copy that huggingface_hub or an older release put in the cache had loaded on Linux
            _check_portable(repo_id, rev, _snapshot_names(root), cached=commit)
        try:
            base = open_folder(root, origin="hub", needs_trust=trusted, require_metadata=True)
        except DigestError as exc:
            # The failing file was the cache's if its snapshot entry was there before this call, else
            # the server sent it now: a file re-fetched into a cached snapshot had been blamed on the
            # cache, whose advice (delete it, download again) fetched the same bytes.
            failing = root / exc.file if exc.file else snapshot
            cached = undo is None or failing in undo.entries
            if undo is not None:
                undo.restore()
                undo = None
            raise _hub_digest_error(exc, repo_id, commit, endpoint, cached=cached) from None
        except PackageError as exc:  # no manifest.json, too many files: its path named the snapshot, removed
            # below, and not the repository
            raise HubError(f"{repo_id} at revision {rev!r} (commit {commit}): {PACKAGE_DIR}/ is not a WebGPU kernel "
                           f"package: {exc.detail}", repo_id=repo_id, revision=rev) from None  # fmt: skip
        package = _hub_package(base, repo_id=repo_id, revision=rev, commit=commit, endpoint=endpoint,
                               from_cache=from_cache, from_cache_reason=cache_reason)  # fmt: skip
        if revision is None:
            check_contract_version(package, version)
        if accept is not None:
            accept(package)
    except BaseException as exc:
        # Refused after the download as well (its digests, its contract version, its manifest), or
        # Ctrl-C while the package opens: the cache is put back, or refs/<rev> stayed on the refused
        # commit and offline use lost the copy cached before.
        if undo is not None:
            undo.restore()
        if isinstance(exc, KernelError) and repo_id not in str(exc):  # a manifest's error names the
            exc.add_note(f"in {repo_id} at revision {rev!r} (commit {commit})")  # snapshot's file, perhaps removed
        raise
    return package


def refuse_escapes(undo: hub_cache.CacheUndo, repo_id: str, rev: str, endpoint: str | None) -> None:
    """Refuse a download whose server named a file's ETag so that huggingface_hub wrote it outside
    the cache (removed again, :meth:`~hub_cache.CacheUndo.escaped`), putting the cache back."""
    escaped = undo.escaped()
    if escaped:
        undo.restore()
        file, etag, where = escaped[0]
        more = f" (and {len(escaped) - 1} more such files)" if len(escaped) > 1 else ""
        raise HubError(f"{repo_id} revision {rev!r}: {endpoint or DEFAULT_ENDPOINT} named the ETag {printable(shorten(repr(etag), 120))} "
                       f"for {file}, a path out of the Hugging Face cache, and huggingface_hub wrote the file there: "
                       f"{where}{more}; refused: tell the repository's host", repo_id=repo_id, revision=rev)  # fmt: skip


def refuse_other_commits(undo: hub_cache.CacheUndo, repo_id: str, rev: str, endpoint: str | None, commit: str) -> None:
    """Refuse a download whose server named another commit for one of its files, so that huggingface_hub
    filed it in the cache's copy of that commit (:meth:`~hub_cache.CacheUndo.beside`), putting the cache
    back. Refused, not only tidied: the server contradicted the listing it gave, so nothing it sent is kept."""
    beside = undo.beside(commit)
    if beside:
        undo.restore()
        other, file = beside[0]
        more = f" (and {len(beside) - 1} more such files)" if len(beside) > 1 else ""
        raise HubError(f"{repo_id} revision {rev!r}: {endpoint or DEFAULT_ENDPOINT} named the commit {printable(shorten(other, 60))} "
                       f"for {printable(shorten(file, 120))}{more}, not {commit}, the commit downloaded, and huggingface_hub filed the file in the "
                       "cache's copy of that commit: removed, the cache is as it was; refused: tell the repository's host",
                       repo_id=repo_id, revision=rev)  # fmt: skip


def _hub_digest_error(exc: DigestError, repo_id: str, commit: str, endpoint: str | None, *, cached: bool) -> DigestError:
    """A downloaded package's digest problem, with what its user (not its author) can do about it."""
    if cached:  # huggingface_hub reuses a cached blob, so deleting the snapshot alone fetched nothing new
        advice = (f"this copy of {repo_id} changed in the Hugging Face cache after it was downloaded: delete "
                  f"{hub_cache.repo_cache_folder(endpoint, repo_id)} to download it again")  # fmt: skip
    else:
        advice = (f"as {repo_id} serves it at commit {commit}; nothing of it was kept in the cache: tell the "
                  "repository's authors")  # fmt: skip
    return DigestError(f"{exc.detail} ({advice})", file=exc.file, reason=exc.reason, path=exc.path)


def check_contract_version(package: HubPackage, version: int | None) -> None:
    """Refuse a package asked for as contract version N (revision vN) whose metadata.json says another."""
    declared = (package.metadata or {}).get("version")
    if version is not None and declared is not None and (isinstance(declared, bool) or declared != version):
        raise DigestError(f"revision {package.revision!r} of {package.repo_id} holds contract version {declared!r}, "
                          f"not {version} (its authors record the version of revision v{version} with "
                          f"`webgpu-kernels digest --version {version} FOLDER`)", file=METADATA_FILE, reason="metadata",
                          path=str(package.root / METADATA_FILE))  # fmt: skip


#: The first huggingface_hub with kernel repositories (``repo_type="kernel"``, ``kernels/`` URLs).
MIN_HUGGINGFACE_HUB = "1.10"
#: What an upgrade asks for: pyproject.toml's floor (a cached copy of a pinned commit the Hub answers
#: 404 for is served from 1.26), not the first release with kernel repositories.
SUPPORTED_HUGGINGFACE_HUB = "1.26"


def require_kernel_repos() -> None:
    import huggingface_hub
    from huggingface_hub import constants

    if getattr(constants, "REPO_TYPE_KERNEL", None) != REPO_TYPE:
        raise HubError(f"huggingface_hub {huggingface_hub.__version__} has no kernel repositories "
                       f"(repo_type='kernel', added in {MIN_HUGGINGFACE_HUB}); upgrade it: "
                       f"pip install -U 'huggingface_hub>={SUPPORTED_HUGGINGFACE_HUB}'")  # fmt: skip


def _listing(repo_id: str, rev: str, *, endpoint: str | None, token: Any,
             version: int | None) -> tuple[Listed | None, Exception | None, Exception | None]:  # fmt: skip
    """The commit the endpoint names for ``rev`` once its listing is checked (:func:`_check_listing`);
    when the endpoint could not be reached, why (the cache then answers); when it answered but named
    no commit (a 401, 403, 429, 5xx, a pinned commit it no longer has), its answer (snapshot_download
    asks again and reports it, or serves the cache). A branch or tag the endpoint says it does not
    have is a HubError here (``version``: as asked, for its message)."""
    try:
        return _check_listing(repo_id, rev, endpoint=endpoint, token=token), None, None
    except _Unreachable as exc:  # the cache answers, as huggingface_hub's own fallback would, but
        # without asking again: its request has no time limit, and a stalled Hub had hung the load
        return None, exc.error, None
    except _NotListed as exc:
        return None, None, exc.error
    except _NoSuchRevision:  # snapshot_download raises RevisionNotFoundError for it too, cached or not,
        # after asking the same request again
        raise hub_errors.no_revision(repo_id, rev, endpoint=endpoint, token=token, version=version) from None


def _snapshot(repo_id: str, rev: str, *, endpoint: str | None, token: Any, listed: Listed | None,
              unreached: Exception | None, unlisted: Exception | None, version: int | None,
              offline: bool) -> tuple[str, str | None]:  # fmt: skip
    """The snapshot folder of ``rev`` (``listed``: the commit :func:`_listing` checked), and, when it
    is the cache's copy, why (the endpoint was not asked, could not be reached, or did not list the
    revision: ``unlisted``, its answer; ``offline``: download's one reading of HF_HUB_OFFLINE), else
    None. Every failure is a HubError naming the repository."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import LocalEntryNotFoundError

    where = endpoint or DEFAULT_ENDPOINT
    what = f"contract version {version} (revision {rev!r})" if version is not None else f"revision {rev!r}"
    cache_dir = cache_dir_for(endpoint)
    commit = listed.commit if listed is not None else None
    bound = listed.size if listed is not None and listed.size is not None else MAX_PACKAGE_BYTES
    try:
        # The commit the listing checked, not `rev` again: a branch moved between the two requests
        # had downloaded a commit no listing checked, reported as the cache's.
        path = snapshot_download(
            repo_id, repo_type=REPO_TYPE, revision=commit or rev, allow_patterns=[f"{PACKAGE_DIR}/*"],
            cache_dir=str(cache_dir), endpoint=endpoint, local_files_only=offline or unreached is not None, token=token,
            library_name="webgpu-kernels", library_version=library_version(),
            tqdm_class=bounded_progress(bound, repo_id, rev, f"{where} sent more than the {bound} bytes " + (
                f"its listing of {PACKAGE_DIR}/ announced" if listed is not None else "a package may hold")),
        )  # fmt: skip
        if commit is not None and Path(path).name == commit != rev:
            hub_cache.point_ref(endpoint, repo_id, rev, commit)  # as a download of `rev` records it, for offline use
        # From the Hub only if it is the commit the Hub named: snapshot_download serves the cache
        # on its own when its requests fail (a 4xx included), and then the listing cannot tell.
        if commit is not None and Path(path).name == commit:
            return path, None
        return path, hub_errors.cache_reason(where, offline=offline, unreached=unreached, unlisted=unlisted)
    except LocalEntryNotFoundError as exc:
        from huggingface_hub import constants

        why = ("offline mode is on (HF_HUB_OFFLINE)" if offline else
               # huggingface_hub reads the variable once, when imported, and then blocks every request
               "huggingface_hub read HF_HUB_OFFLINE=1 when it was imported and does not see it change"
               if constants.HF_HUB_OFFLINE else
               f"{where} cannot be reached ({type(unreached).__name__}: {unreached})" if unreached is not None else
               hub_errors.fallback_reason(exc, where))  # fmt: skip
        if type(exc).__name__ == "IncompleteSnapshotError":  # huggingface_hub >= 2: names the missing files
            first = hub_errors.first_line(exc)
            raise HubError(f"{repo_id} {what}: the Hugging Face cache holds an incomplete copy and {why}: {first}",
                           repo_id=repo_id, revision=rev) from exc  # fmt: skip
        said = f"{repo_id} {what} is not in the Hugging Face cache ({cache_dir}) and {why}"
        if not (offline or constants.HF_HUB_OFFLINE or unreached is not None):
            raise HubError(said, repo_id=repo_id, revision=rev) from exc
        # A worker started offline, or against a Hub it cannot reach, on a cold cache had read no way out
        pin = f"--version {version}" if version is not None else f"--revision {rev}"
        how = (f"`webgpu-kernels download {repo_id} {pin}` " if cache_dir == hub_cache.hub_cache_dir() else "")
        when = "without HF_HUB_OFFLINE" if offline or constants.HF_HUB_OFFLINE else f"once {where} can be reached"
        raise HubNotCachedError(f"{said}: fetch it once online ({how}{when}), or set HF_HOME or HF_HUB_CACHE to the "
                                "cache that holds it", repo_id=repo_id, revision=rev) from exc  # fmt: skip
    except HubError:
        raise
    except Exception as exc:  # noqa: BLE001 - the Hub's refusals, OSError, and the HTTP client's own errors (httpx's
        # RemoteProtocolError when a connection dies mid-file): the caller gets one error type, naming what failed
        refused = hub_cache.refused_write(exc, cache_dir)
        if refused is not None:  # it had read "download from <endpoint> failed", as if the Hub had failed
            raise HubError(f"{repo_id} {what}: the Hugging Face cache {cache_dir} is not writable by this process "
                           f"({refused}), so the download cannot be stored there: set HF_HOME or HF_HUB_CACHE to a "
                           "folder of your own", repo_id=repo_id, revision=rev) from exc  # fmt: skip
        raise hub_errors.request_error(exc, repo_id, rev, endpoint=endpoint, token=token, version=version) from exc


def bounded_progress(bound: int, repo_id: str, rev: str, said: str) -> type:
    """A progress bar class for huggingface_hub's downloads (``tqdm_class=``) whose byte bars refuse
    to count past ``bound``, with a HubError "<said>, so the download was stopped after N bytes".
    huggingface_hub writes every byte a file's answer carries and only then compares their count
    with the HEAD's, the server's word too; its bars are updated with each chunk before the chunk
    is written, so raising there stops a server sending more than it listed (gigabytes, or no end)
    within one chunk (10 MB). The caller removes what was written."""
    from huggingface_hub.utils import tqdm as hf_tqdm

    class BoundedProgress(hf_tqdm):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            self.counted = 0
            self.of_bytes = kwargs.get("unit") == "B"  # read here: a disabled tqdm keeps no unit
            super().__init__(*args, **kwargs)

        def update(self, n: float | None = 1) -> bool | None:
            if self.of_bytes:  # a bar of bytes; snapshot_download's other one counts files
                self.counted += int(n or 0)
                if self.counted > bound:
                    raise HubError(f"{repo_id} revision {rev!r}: {said}, so the download was stopped after "
                                   f"{self.counted} bytes: tell the repository's authors, or its host",
                                   repo_id=repo_id, revision=rev)  # fmt: skip
            return super().update(n)

    return BoundedProgress


class _NoSuchRevision(Exception):
    """The endpoint answered that the repository has no such branch or tag (RevisionNotFoundError)."""


class _NotListed(Exception):
    """The endpoint answered hub.py's first request with an error other than no such branch or tag."""

    def __init__(self, error: Exception) -> None:
        super().__init__(str(error))
        self.error = error


class _Unreachable(Exception):
    """The endpoint did not answer hub.py's first request (no connection, or no answer in time)."""

    def __init__(self, error: Exception) -> None:
        super().__init__(str(error))
        self.error = error


def metadata_timeout() -> float:
    """Seconds to wait for the Hub's answer about a revision: huggingface_hub's own time limit for
    metadata requests (HF_HUB_ETAG_TIMEOUT, 10 s by default). Its repo_info has none by default, so
    a Hub that took the connection and never answered hung get_kernel, cached copy or not."""
    from huggingface_hub import constants

    # Read as huggingface_hub reads it (`int(...) or 10`): 0 is its default, not a limit of no time,
    # which had timed the first request out at once, every load then the cache's (or refused).
    for value in (os.environ.get("HF_HUB_ETAG_TIMEOUT"), constants.HF_HUB_ETAG_TIMEOUT):
        with suppress(TypeError, ValueError):
            seconds = float(value)  # type: ignore[arg-type]  # None: TypeError, skipped
            if 0 < seconds < math.inf:
                return seconds
    return float(getattr(constants, "DEFAULT_ETAG_TIMEOUT", 10))


class Listed(NamedTuple):
    """What :func:`_check_listing` checked: the commit the endpoint named, and the bytes its listing
    of PACKAGE_DIR/ announced (None when the folder could not be listed)."""

    commit: str
    size: int | None


def _check_listing(repo_id: str, rev: str, *, endpoint: str | None, token: Any) -> Listed:
    """Refuse, before anything is downloaded, a package the Hub lists as larger than a package may
    be (MAX_PACKAGE_FILES files of MAX_FILE_BYTES each, content files of MAX_PACKAGE_BYTES together):
    they would be refused after the download, once they had filled the disk. (The listing is the
    server's word: a server sending more bytes than it listed is stopped at the listing's total,
    :func:`bounded_progress`.) Returns the commit the endpoint named for the revision and the
    bytes listed; raises _NotListed with its answer when
    it named none (it does not list the revision, perhaps a pinned commit it no longer has, still
    cached; or it answered an error: snapshot_download says which), _Unreachable when the endpoint
    could not be reached or did not answer in time."""
    from huggingface_hub import HfApi, RepoFile
    from huggingface_hub.errors import RevisionNotFoundError

    api = HfApi(endpoint=endpoint, token=token)
    files: list[RepoFile] = []
    try:
        # repo_info fails at once when the Hub cannot be reached; the tree listing would retry for
        # 23 s first (five times, with backoff), delaying the fallback to the cache.
        named = api.repo_info(repo_id, revision=rev, repo_type=REPO_TYPE, timeout=metadata_timeout()).sha
    except Exception as exc:  # noqa: BLE001 - unreachable, no such repository or revision: snapshot_download
        if {"ConnectError", "TimeoutException"} & {c.__name__ for c in type(exc).__mro__}:  # httpx's (httpx2's)
            raise _Unreachable(exc) from exc  # what snapshot_download counts as no connection: the cache answers
        if isinstance(exc, RevisionNotFoundError) and not _COMMIT.match(rev):  # snapshot_download would ask
            # again and raise it, cached or not (a commit sha it does not ask about: a cached one is served)
            raise _NoSuchRevision() from exc
        # reports it, or serves the cache (a pinned commit the Hub no longer has, still cached)
        raise _NotListed(exc) from exc
    if not (isinstance(named, str) and _COMMIT.match(named)):
        # huggingface_hub makes the commit a path of the cache (trees/<commit>.json, snapshots/<commit>/)
        # without checking it: a sha of '../../x' had written x.json and a ref outside the cache
        raise HubError(f"{repo_id} revision {rev!r}: {endpoint or DEFAULT_ENDPOINT} named the commit {named!r} for it, "
                       "not a 40-hex commit sha: refused before anything was downloaded", repo_id=repo_id,
                       revision=rev)  # fmt: skip
    commit = named
    try:
        for entry in api.list_repo_tree(repo_id, path_in_repo=PACKAGE_DIR, recursive=True, revision=commit,
                                        repo_type=REPO_TYPE):  # fmt: skip
            if isinstance(entry, RepoFile):  # not a folder; its size is checked below, whatever it is
                files.append(entry)
                if len(files) > MAX_PACKAGE_FILES:
                    break
    except Exception:  # noqa: BLE001 - no such folder, a refusal: snapshot_download reports it (or
        # serves the cache, which the commit it returns then tells)
        return Listed(commit, None)
    check_listed(repo_id, rev, [(e.path, e.size) for e in files])
    return Listed(commit, sum(e.size for e in files if e.size is not None))


def check_listed(repo_id: str, rev: str, files: list[tuple[str, int]], *, upload: bool = False) -> None:
    """Refuse (HubError) a ``build/webgpu/`` of these (repository path, size) files that :func:`download`
    refuses before it downloads anything: more than MAX_PACKAGE_FILES files, a name that is no plain
    one below it or that breaks on macOS or Windows, a file past MAX_FILE_BYTES, content files past
    MAX_PACKAGE_BYTES together. ``upload``: the files an upload would commit (hub_upload.py), checked
    by the same rule before it sends anything, so that nothing is published that get_kernel refuses."""
    done = "uploaded" if upload else "downloaded"
    if len(files) > MAX_PACKAGE_FILES:
        raise HubError(f"{repo_id} revision {rev!r}: {PACKAGE_DIR}/ holds more than {MAX_PACKAGE_FILES} files, "
                       "more than a kernel package may", repo_id=repo_id, revision=rev)  # fmt: skip
    for path, size in files:
        # The server's JSON: a string had raised a raw TypeError below, and a file listed without a
        # size (or a negative one) passed the bounds uncounted
        if isinstance(size, bool) or not isinstance(size, int) or size < 0:
            raise HubError(f"{repo_id} revision {rev!r}: the {'package' if upload else 'repository'} lists {path} with "
                           f"the size {shorten(repr(size), 40)}, not a number of bytes: refused before anything "
                           f"was {done}", repo_id=repo_id, revision=rev)  # fmt: skip
    for path, _ in files:
        why = _name_problem(path)
        if why:  # huggingface_hub refuses a '..' name only when it comes to it, after fetching the others
            raise HubError(f"{repo_id} revision {rev!r}: the {'package' if upload else 'repository'} lists the file "
                           f"{path!r}, whose name {why}: refused before anything was {done}", repo_id=repo_id,
                           revision=rev)  # fmt: skip
    _check_portable(repo_id, rev, [path.removeprefix(f"{PACKAGE_DIR}/") for path, _ in files], upload=upload)
    for path, size in files:
        if size > MAX_FILE_BYTES:
            raise HubError(f"{repo_id} revision {rev!r}: {path} is {size} bytes, more than a package "
                           f"file may be ({MAX_FILE_BYTES})", repo_id=repo_id, revision=rev)  # fmt: skip
    # Every content file is read when the package opens (an unlisted one is refused), and what it
    # reads is bounded in all: 64 files under the per-file bound had been fetched, 512 MiB and more,
    # then refused. Other files (a README) are not read, so they do not count.
    content = sum(size for path, size in files if is_content_file(path[len(PACKAGE_DIR) + 1 :]))
    if content > MAX_PACKAGE_BYTES:
        raise HubError(f"{repo_id} revision {rev!r}: the package files of {PACKAGE_DIR}/ hold {content} bytes, more "
                       f"than a package may ({MAX_PACKAGE_BYTES})", repo_id=repo_id, revision=rev)  # fmt: skip


def _name_problem(path: str) -> str | None:
    """Why a repository file name that snapshot_download would fetch (one under PACKAGE_DIR/) is no
    plain name below that folder, else None. Other names are not fetched, so not checked."""
    if not path.startswith(f"{PACKAGE_DIR}/"):
        return None
    rel = path[len(PACKAGE_DIR) + 1 :]
    segments = rel.replace("\\", "/").split("/")  # a backslash separates on Windows
    if ".." in segments:
        return f"leaves {PACKAGE_DIR}/ (a '..' segment)"
    if "\\" in rel or "\x00" in rel or "" in segments or "." in segments:
        return f"is no plain name below {PACKAGE_DIR}/ (a backslash, NUL, empty or '.' segment)"
    # What no common file system holds (and a package may not name): the other files were fetched,
    # then huggingface_hub's write of this one failed (ENAMETOOLONG), a bare 'OSError'
    if len(rel) > MAX_NAME_LENGTH:
        return f"is {len(rel)} characters long, more than a package file name may be ({MAX_NAME_LENGTH})"
    longest = max(len(segment.encode()) for segment in segments)
    if longest > MAX_SEGMENT_LENGTH:
        return f"has a segment of {longest} bytes, more than a file system holds ({MAX_SEGMENT_LENGTH})"
    return None


def _check_portable(repo_id: str, rev: str, names: list[str], *, cached: str | None = None,
                    upload: bool = False) -> None:  # fmt: skip
    """Refuse a package whose file names break it on macOS or Windows (two names that are one file
    there, a name Windows refuses), on every system: on a case-insensitive cache one file had
    overwritten the other, met later as a digest mismatch, and a package that loads on Linux CI
    failed only for its users elsewhere. ``validate`` reports the same names to the authors.
    ``cached``: the commit of the cache's snapshot the names are from (no listing was checked);
    ``upload``: the names an upload would commit."""
    problems = name_problems(names)
    if problems:
        more = f" (and {len(problems) - 1} more such name problems)" if len(problems) > 1 else ""
        when = (f"the Hugging Face cache's copy (commit {cached}) is refused on every system" if cached is not None
                else f"refused on every system before anything was {'uploaded' if upload else 'downloaded'}")  # fmt: skip
        raise HubError(f"{repo_id} revision {rev!r}: in {PACKAGE_DIR}/, {problems[0].why}{more}: {when}, so that the package loads everywhere or nowhere "
                       "(`webgpu-kernels validate` reports these names to its authors): "
                       + ("rename them, then run `webgpu-kernels digest`" if upload else "tell the repository's authors"),
                       repo_id=repo_id, revision=rev)  # fmt: skip


def _snapshot_names(root: Path) -> list[str]:
    """The names of a cached snapshot's package files, as validate reads them (none where the folder
    cannot be listed: opening it says why)."""
    try:
        return [*package_files(root), METADATA_FILE]
    except PackageError:
        return []


def library_version() -> str:
    from . import __version__

    return __version__


# --- kernels, cached per (endpoint, repository, commit) -----------------------------------------------

#: (endpoint, repository, commit, given by URL) -> kernel. A repository given by its URL is kept
#: apart: its package is marked needs_trust.
_kernels: dict[tuple[str | None, str, str, bool], Kernel] = {}
#: (endpoint, cache folder, repository, revision) -> commit, so that a second get_kernel in the
#: process asks the network nothing.
_resolved: dict[tuple[str | None, str, str, str], str] = {}
_lock = threading.RLock()
#: memo -> the lock one load of it holds through its download: a second thread asking the same
#: repository and revision waits for it and then finds the kernel, and loads of other ones go on
#: (one process-wide lock through the download had held up every Hub load in the process).
#: Each entry also counts the loads holding or waiting for it, and goes with the last of them: every
#: repository id and revision ever asked (failed loads too) had kept one.
_loading: dict[tuple[str | None, str, str, str], tuple[threading.RLock, int]] = {}
fresh_in_child(globals(), _lock=threading.RLock, _loading=dict)


def load(
    repo_id: str,
    *,
    version: int | None = None,
    revision: str | None = None,
    trust_remote_code: bool = False,
    endpoint: str | None = None,
    url_like: bool = False,
    accept: Callable[[HubPackage], object] | None = None,
) -> Kernel:
    """The kernel of a Hub repository (see :func:`download`), shared per (repository, commit).
    ``accept`` checks a package this call downloads and opens (as download's does); a kernel
    shared from an earlier load is returned unchecked by it."""

    location = Location("hub", repo_id, url_like=url_like, endpoint=endpoint)
    check_trust(location, trust_remote_code=trust_remote_code, shown=repo_id)
    rev = revision_for(version, revision, repo_id)
    endpoint = endpoint or hub_endpoint()
    memo = (endpoint, str(cache_dir_for(endpoint)), repo_id, rev)

    def shared() -> Kernel | None:
        with _lock:
            commit = rev if _COMMIT.match(rev) else _resolved.get(memo)
            cached = None if commit is None else _kernels.get((endpoint, repo_id, commit, url_like))
        if cached is not None and revision is None:  # revision="v2" may have loaded it first, unchecked
            check_contract_version(cast(HubPackage, cached.package), version)  # _kernels holds Hub packages
        return cached

    found = shared()
    if found is not None:
        return found
    with _lock:
        loading, users = _loading.get(memo, (threading.RLock(), 0))
        _loading[memo] = (loading, users + 1)
    try:
        return _load_once(memo, loading, shared, repo_id, version=version, revision=revision,
                          trust_remote_code=trust_remote_code, endpoint=endpoint, url_like=url_like,
                          check=accept)  # fmt: skip
    finally:
        with _lock:
            entry = _loading.get(memo)
            if entry is not None and entry[0] is loading:  # not one clear_cache() replaced meanwhile
                if entry[1] <= 1:
                    del _loading[memo]
                else:
                    _loading[memo] = (loading, entry[1] - 1)


def _load_once(memo: tuple[str | None, str, str, str], loading: threading.RLock, shared: Callable[[], Kernel | None],
               repo_id: str, *, version: int | None, revision: str | None, trust_remote_code: bool,
               endpoint: str | None, url_like: bool, check: Callable[[HubPackage], object] | None) -> Kernel:  # fmt: skip
    """:func:`load`'s download and open under ``memo``'s lock, unless another thread's load of it
    finished while this one waited."""
    from .kernel import Kernel

    with loading:  # reentrant: a load nested in this one (an accept callback) does not wait for itself
        found = shared()  # another thread's load of it, done while this one waited
        if found is not None:
            return found
        opened: list[Kernel] = []

        def accept(package: HubPackage) -> None:  # while the download can still be undone
            with _lock:
                kernel = _kernels.get((endpoint, repo_id, package.commit, url_like))
            if kernel is None:
                kernel = Kernel(package)  # which refuses a metadata.json naming another op (KernelPackage.check_id)
            if check is not None:  # the caller's own check (a lock's pin), while the download can be undone
                check(package)
            opened.append(kernel)

        package = download(repo_id, version=version, revision=revision, trust_remote_code=trust_remote_code,
                           endpoint=endpoint, url_like=url_like, accept=accept)  # fmt: skip
        with _lock:  # another memo (revision="main" beside version=1) may have loaded the commit meanwhile
            kernel = _kernels.setdefault((endpoint, repo_id, package.commit, url_like), opened[0])
            _resolved[memo] = package.commit
        return kernel


def load_path(path: str, *, trust_remote_code: bool, shown: str | None = None) -> Kernel:
    """A package folder named by a path or file:// URL (needs trust; its package gets needs_trust)."""
    from .api import folder_kernel

    location = Location("path", path, url_like=True)
    check_trust(location, trust_remote_code=trust_remote_code, shown=shown or path)
    return folder_kernel(open_folder(path, needs_trust=True))


def clear_cache() -> None:
    """Forget the Hub kernels and resolved revisions of this process (the disk cache stays)."""
    with _lock:
        _kernels.clear()
        _resolved.clear()
        _loading.clear()


def check_op_id(kernel: Kernel, expected_op_id: str | None, shown: str) -> Kernel:
    """Refuse a kernel whose manifest is another op than ``expected_op_id``."""
    if expected_op_id is not None and kernel.op_id != expected_op_id:
        raise PackageError(f"{shown!r} holds op {kernel.op_id!r}, but expected_op_id is {expected_op_id!r}")
    return kernel
