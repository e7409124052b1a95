"""Publishing a kernel package to the Hugging Face Hub: ``webgpu-kernels upload PATH REPO``.

The layout is the one :mod:`webgpu_kernels.hub` reads (see ``docs/hub.md``): a kernel repository
(``repo_type="kernel"``), the package under ``build/webgpu/``, contract version N on revision
``vN``. :func:`upload_package` refuses, before any request, a folder that is no package, one that
``validate`` finds errors in, one whose metadata.json is missing or out of date, a version other
than ``--version`` asked, a repository id that is no ``org/name`` or whose name is not the op id,
and (unless ``--follow-outside-links``) a file that leads outside the folder: a symbolic link to a file
outside it, or a hard link with a name outside it.
Then it creates the repository and the branch where missing, makes one commit holding exactly the
files metadata.json lists (the bytes whose digests were checked) plus metadata.json, deleting what
else that revision held under ``build/webgpu/``, and downloads that commit through
:func:`webgpu_kernels.hub.download` into a temporary cache, so the author knows ``get_kernel``
loads it. Where ``vN`` holds a package already, its manifest is compared with the package's first
(:mod:`webgpu_kernels.contract_changes`): an incompatible contract is refused (it belongs on
``vN+1``) unless ``--allow-incompatible``.
"""

from __future__ import annotations

import os
import re
import shlex
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from . import __version__, hub, hub_cache
from .contract_changes import incompatible_changes
from .digests import MAX_FILE_BYTES, METADATA_FILE, UNLISTABLE, build_metadata, load_metadata, read_file
from .errors import HubError, KernelError, PackageError
from .hub import PACKAGE_DIR, HubPackage, check_contract_version, check_listed, require_kernel_repos
from .hub_cache import DEFAULT_ENDPOINT, REPO_TYPE, hub_endpoint, hub_offline
from .hub_errors import first_line, http_answer, http_status, token_kept_from, token_sent
from .kernel import Kernel
from .locations import OFFICIAL_ORG, checked_repo_id, classify, slashed_repo_id
from .manifest import parse_manifest
from .package import MANIFEST_FILE, KernelPackage, open_folder
from .reading import decode_json
from .validation import ERROR, validate_package

#: How many of validate's errors a refusal names (validate PATH lists them all).
SHOWN_PROBLEMS = 5

#: How many files that lead outside the folder a refusal, or an upload that followed them, names.
SHOWN_LINKS = 20

#: The first huggingface_hub whose upload calls take ``repo_type="kernel"``: 2.2 and earlier, down to
#: the 1.26 that loading needs, raise "Invalid repo type" in ``preupload_lfs_files`` after the
#: repository and branch were created (tests/test_hub_upload.py: 15 failed on 1.26.0 and 2.2.0, none
#: on 2.3.0). No attribute tells the releases apart, so the version does.
MIN_HUGGINGFACE_HUB_UPLOAD = (2, 3)


@dataclass(frozen=True)
class OutsideLink:
    """A file of the package whose bytes may come from outside its folder (:func:`_outside_links`)."""

    file: str  # package-relative name
    kind: str  # "symbolic": resolves outside the folder; "hard": a name of the file lies outside it
    target: str | None = None  # where a symbolic link resolves
    names: int = 0  # a hard link's link count (st_nlink)
    names_inside: int = 0  # how many of those names the folder holds

    def shown(self) -> str:
        """The line that names it: ``notes.txt -> /home/me/.ssh/id_rsa``."""
        if self.kind == "symbolic":
            return f"{self.file} -> {self.target}"
        outside = self.names - self.names_inside
        return f"{self.file} (a hard link: {outside} of its {self.names} names {'is' if outside == 1 else 'are'} outside the folder)"

    def as_dict(self) -> dict[str, Any]:
        if self.kind == "symbolic":
            return {"file": self.file, "kind": self.kind, "target": self.target}
        return {"file": self.file, "kind": self.kind, "names": self.names, "namesInFolder": self.names_inside}


def shown_links(links: list[OutsideLink], *, more: str = "") -> list[str]:
    """The first SHOWN_LINKS of ``links`` as indented lines, and how many more there are (``more``
    follows that count): a folder may hold up to MAX_PACKAGE_FILES of them."""
    lines = [f"  {link.shown()}" for link in links[:SHOWN_LINKS]]
    if len(links) > SHOWN_LINKS:
        lines.append(f"  ... and {len(links) - SHOWN_LINKS} more{more}")
    return lines


@dataclass(frozen=True)
class UploadResult:
    """What :func:`upload_package` published (or, with ``dry_run``, would publish)."""

    repo_id: str
    revision: str  # "vN"
    op_id: str
    version: int
    endpoint: str
    #: Repository paths of the package's files, metadata.json included, sorted.
    files: list[str]
    #: Repository paths under build/webgpu/ the commit deleted (files the package no longer has).
    deleted: list[str] = field(default_factory=list)
    commit: str | None = None  # None for a dry run
    new_commit: bool = False  # False where the revision held these bytes already (no commit made)
    created_repo: bool = False
    created_branch: bool = False
    private: bool = False  # asked for a new repository; an existing one keeps its visibility
    verified: bool = False  # the commit was downloaded and its digests checked
    dry_run: bool = False
    #: validate's warnings about the package (they do not stop an upload).
    warnings: list[str] = field(default_factory=list)
    #: Files whose bytes came from outside the folder (only with follow_outside_links: else refused).
    outside_links: list[OutsideLink] = field(default_factory=list)

    @property
    def load_call(self) -> str:
        """The one line of Python that loads what was published."""
        extra = ""
        if self.repo_id.split("/")[0] != OFFICIAL_ORG:  # what get_kernel asks of another organisation
            extra = f", trust_remote_code=True, expected_op_id={self.op_id!r}"
        return f"get_kernel({self.repo_id!r}, version={self.version}{extra})"

    def as_dict(self) -> dict[str, Any]:
        return {
            "repo": self.repo_id, "revision": self.revision, "commit": self.commit, "endpoint": self.endpoint,
            "op": self.op_id, "version": self.version, "fileCount": len(self.files), "files": self.files,
            "deleted": self.deleted, "newCommit": self.new_commit, "createdRepository": self.created_repo,
            "createdBranch": self.created_branch, "private": self.private, "verified": self.verified,
            "dryRun": self.dry_run, "warnings": self.warnings, "load": self.load_call,
            "outsideLinks": [link.as_dict() for link in self.outside_links],
        }  # fmt: skip


def upload_package(
    path: str | Path,
    repo_id: str,
    *,
    version: int | None = None,
    private: bool = False,
    message: str | None = None,
    any_name: bool = False,
    endpoint: str | None = None,
    token: str | None = None,
    dry_run: bool = False,
    gpu: bool = True,
    adapter: str | None = None,
    follow_outside_links: bool = False,
    allow_incompatible: bool = False,
) -> UploadResult:
    """Publish the package folder ``path`` as revision ``vN`` of the kernel repository ``repo_id``.

    N is metadata.json's contract version (``version``: refuse unless it is that). Refusals are
    :class:`~webgpu_kernels.errors.PackageError`s raised before any request; what the Hub refuses
    (a token, write access, no connection) is a :class:`~webgpu_kernels.errors.HubError`. ``token``:
    the Hugging Face token (None: HF_TOKEN or huggingface_hub's login, sent only to the Hub that
    HF_ENDPOINT names); ``gpu``/``adapter``: as ``validate``'s. ``follow_outside_links``: publish
    files that lead outside the folder, symbolic links to files outside it and hard links with a name
    outside it (refused by default, see :func:`_outside_links`); the result's ``outside_links`` names them.
    ``allow_incompatible``: replace a contract that ``vN`` holds with an incompatible one (a PackageError
    naming each change, before the commit, by default), with a warning in the result.
    """
    repo_id = _checked_target(repo_id)
    root, package, metadata = _checked_package(path, version)
    outside = _outside_links(root, [*package.verified, METADATA_FILE])
    if outside and not follow_outside_links:
        _refuse_outside_links(root, outside)
    op_id = str(metadata["id"])
    if not any_name and repo_id.split("/")[1] != op_id:
        org = repo_id.split("/")[0]
        raise PackageError(f"the repository's name {repo_id.split('/')[1]!r} is not the package's op id {op_id!r}: "
                           f"the collection names each repository after its op, as get_kernel's users look for it; "
                           f"upload to {org}/{op_id}, or pass --any-name (any_name=True) to publish it under this "
                           "name anyway")  # fmt: skip
    warnings = _validated(root, gpu=gpu, adapter=adapter)
    version = int(metadata["version"])
    rev = f"v{version}"
    files = {f"{PACKAGE_DIR}/{name}": package.verified[name] for name in sorted(package.verified)}
    files[f"{PACKAGE_DIR}/{METADATA_FILE}"] = read_file(root, METADATA_FILE)
    try:  # the download's own checks of a listing (its count includes metadata.json), before any request
        check_listed(repo_id, rev, [(name, len(data)) for name, data in files.items()], upload=True)
    except HubError as exc:
        raise PackageError(f"get_kernel would refuse this upload: {exc.detail}", path=str(root)) from None
    where = (endpoint or hub_endpoint() or DEFAULT_ENDPOINT).rstrip("/")
    result = UploadResult(repo_id=repo_id, revision=rev, op_id=op_id, version=version, endpoint=where,
                          files=sorted(files), private=private, warnings=warnings, dry_run=dry_run,
                          outside_links=outside)  # fmt: skip
    _require_upload_support()  # a dry run says it too: it stands for the upload
    if dry_run:
        return result
    if hub_offline():
        raise HubError(f"{repo_id}: offline mode is on (HF_HUB_OFFLINE): an upload needs the Hub; unset it",
                       repo_id=repo_id, revision=rev)  # fmt: skip
    if token is None and where != (hub_endpoint() or DEFAULT_ENDPOINT):
        sent_token: str | bool | None = False  # the Hugging Face token goes only to HF_ENDPOINT's Hub (as download's)
    else:
        sent_token = token
    message = message or f"Upload {op_id} contract version {version} ({rev}) with webgpu-kernels {__version__}"
    noted: list[str] = []

    def compare(held: bytes) -> None:  # the manifest vN holds, read before the commit
        noted.extend(_contract_check(held, package, repo_id, version, path=path, allow=allow_incompatible))

    published = _publish(repo_id, rev, files, endpoint=where, token=sent_token, private=private, message=message,
                         compare=compare)  # fmt: skip
    result = replace(result, **published, warnings=[*warnings, *noted])
    _verify(result, token=sent_token)
    return replace(result, verified=True)


def can_upload(huggingface_hub_version: str) -> bool:
    """Whether this huggingface_hub release uploads to kernel repositories (one whose version does not
    start with major.minor is given the benefit of the doubt)."""
    found = re.match(r"(\d+)\.(\d+)", huggingface_hub_version)
    return not found or (int(found[1]), int(found[2])) >= MIN_HUGGINGFACE_HUB_UPLOAD


def _require_upload_support() -> None:
    """Refuse, before any request, a huggingface_hub too old to upload to kernel repositories (the one
    check of the client an upload makes: loading's, that it has kernel repositories at all, first)."""
    import huggingface_hub

    require_kernel_repos()
    installed = huggingface_hub.__version__
    if not can_upload(installed):
        needed = ".".join(map(str, MIN_HUGGINGFACE_HUB_UPLOAD))
        raise HubError(f"uploading needs huggingface_hub {needed} or later, whose upload calls take kernel "
                       f"repositories (repo_type='kernel'); this is {installed}, enough to load packages but not to "
                       f"publish one: pip install -U 'huggingface_hub>={needed}'")  # fmt: skip


def _checked_target(repo_id: str) -> str:
    """``repo_id`` as an 'org/name' kernel repository id, else a PackageError saying what to write."""
    if not isinstance(repo_id, str) or not repo_id.strip():
        raise PackageError(f"expected a Hub repository 'org/name' to upload to, got {repo_id!r}")
    base, _, pin = repo_id.partition("@")
    if pin and "/" in base and "://" not in base:  # org/op@v2, as download takes it
        raise PackageError(f"{repo_id!r}: the revision comes from metadata.json's version (vN): give the repository "
                           f"as {base!r}, and --version N (version=N) to check the version")  # fmt: skip
    meant = slashed_repo_id(repo_id)
    if meant is not None:
        raise PackageError(f"{repo_id!r} is not a Hub repository id 'org/name' (did you mean {meant}?)")
    location = classify(repo_id) if "/" in repo_id else None
    if location is not None and location.kind == "hub" and location.endpoint is not None:
        # one Hub per upload, the one HF_ENDPOINT names, which the token goes to
        raise PackageError(f"{repo_id!r}: give the repository as 'org/name' ({location.value}) and the Hub as "
                           f"HF_ENDPOINT={location.endpoint}")  # fmt: skip
    if location is None or location.kind != "hub":
        raise PackageError(f"{repo_id!r} is not a Hub repository id: expected 'org/name', the name being the "
                           "package's op id (e.g. my-org/com.example.MyOp)")  # fmt: skip
    return checked_repo_id(location.value)


def _checked_package(path: str | Path, version: int | None) -> tuple[Path, KernelPackage, dict[str, Any]]:
    """The package folder, opened with its digests checked, and its metadata.json, or a PackageError
    with the command that mends it."""
    unchecked = open_folder(path, verify_digests=False)  # not a folder, no manifest.json: its own words
    root = unchecked.root
    shown = shlex.quote(str(path))  # the command is copied into a shell
    redigest = f"`webgpu-kernels digest {shown}`"
    metadata, problems = load_metadata(root)
    if problems:
        raise PackageError(f"{METADATA_FILE} cannot be used ({problems[0].text}): a Hub package must carry a "
                           f"valid one; run {redigest}", path=str(root / METADATA_FILE))  # fmt: skip
    if metadata is None:
        raise PackageError(f"the package has no {METADATA_FILE}, which a Hub package must carry (its id, contract "
                           f"version and the sha256 of every file): run {redigest} to write one"
                           + (f" (`--version {version}` to record contract version {version})" if version else ""),
                           path=str(root))  # fmt: skip
    current, changes = build_metadata(root, metadata)  # digest --check's comparison
    stale = [c for c in changes if c.status not in ("unchanged", UNLISTABLE)]
    if stale or current["id"] != metadata.get("id"):
        what = "; ".join(f"{c.status}: {c.file}" for c in stale[:8]) + (f"; and {len(stale) - 8} more" if len(stale) > 8 else "")
        if current["id"] != metadata.get("id"):
            what = "; ".join(x for x in (what, f"id {metadata.get('id')!r}, but the manifest is {current['id']!r}") if x)
        raise PackageError(f"{METADATA_FILE} is out of date ({what}): if these changes are yours, run {redigest} to "
                           "record them (remove instead any file listed as added that is no package file)",
                           path=str(root / METADATA_FILE))  # fmt: skip
    if version is not None and metadata.get("version") != version:
        raise PackageError(f"{METADATA_FILE} says contract version {metadata.get('version')!r}, not {version}: run "
                           f"`webgpu-kernels digest --version {version} {shown}` to publish it as v{version}",
                           path=str(root / METADATA_FILE))  # fmt: skip
    package = open_folder(root, require_metadata=True)  # the bytes checked now are the bytes uploaded
    return root, package, dict(package.metadata or metadata)


def _outside_links(root: Path, names: list[str]) -> list[OutsideLink]:
    """The package-relative ``names`` whose bytes may come from outside the folder ``root``, sorted
    by name: each whose path is or passes through a symbolic link that resolves outside the folder
    (resolved itself: a folder reached through a link is fine; a link to another file of the folder
    is fine), and each that is a hard link with more names than the folder holds.

    Loading follows links to files wherever they point (digests.through_folder_link: the Hugging
    Face cache is made of them), and the digest covers what they read; an upload publishes those
    bytes, so a folder from a stranger holding ``notes.txt -> ~/.ssh/id_rsa`` would publish the
    user's private file. A hard link (``ln ~/.ssh/id_rsa notes.txt``) is that file under a second
    name, and no name is the original, so its link count is what tells: a count above the names
    found in the folder means another name lies elsewhere. The cache's snapshot files are symbolic
    links into its blobs/, named as such, not counted as hard links."""
    base = Path(os.path.realpath(root))
    found = []
    linked: dict[tuple[int, int], list[tuple[str, int]]] = {}  # (device, inode): (name, link count)
    for name in sorted(names):
        target = Path(os.path.realpath(root / name))
        if not target.is_relative_to(base):
            found.append(OutsideLink(name, "symbolic", target=str(target)))
            continue
        try:
            info = os.stat(target)
        except OSError:  # gone since it was read: the digest check said what it had to
            continue
        if info.st_nlink > 1:  # some file systems say 0 or 1 for every file: nothing to tell then
            linked.setdefault((info.st_dev, info.st_ino), []).append((name, info.st_nlink))
    if linked:
        inside = _names_in_folder(base, set(linked))
        for key, entries in linked.items():
            for name, count in entries:
                if count > inside[key]:
                    found.append(OutsideLink(name, "hard", names=count, names_inside=inside[key]))
    return sorted(found, key=lambda link: link.file)


def _names_in_folder(base: Path, files: set[tuple[int, int]]) -> dict[tuple[int, int], int]:
    """How many names under ``base`` (hidden ones and caches included, links to folders not
    followed) each of the (device, inode) ``files`` has. A folder that cannot be read counts
    none, which refuses rather than publishes."""
    counts = dict.fromkeys(files, 0)
    for dirpath, _dirnames, filenames in os.walk(base):
        for filename in filenames:
            try:
                info = os.lstat(os.path.join(dirpath, filename))  # a symbolic link is a name of itself
            except OSError:
                continue
            key = (info.st_dev, info.st_ino)
            if key in counts:
                counts[key] += 1
    return counts


def _refuse_outside_links(root: Path, found: list[OutsideLink]) -> None:
    """A PackageError naming the files that lead outside the folder (the first SHOWN_LINKS), and the ways on."""
    many = len(found) != 1
    kinds = {link.kind for link in found}
    symbolic = ("symbolic links to files" if many else "a symbolic link to a file") + " outside its folder"
    hard = ("hard links" if many else "a hard link") + " with a name outside its folder"
    what = {frozenset({"symbolic"}): symbolic, frozenset({"hard"}): hard}.get(frozenset(kinds), f"{symbolic} or {hard}")
    listed = "\n".join(shown_links(found))
    breaking = (" (a copy breaks a hard link: `cp FILE FILE.new && mv FILE.new FILE`; a package a tool installed "
            "from its cache may be made of hard links)") if "hard" in kinds else ""
    raise PackageError(f"{len(found)} file{'s' if many else ''} of the package {'are' if many else 'is'} {what}, and "
                       f"an upload publishes what {'they read' if many else 'it reads'}:\n{listed}\n"
                       "if such a file belongs in the package, copy it into the folder in place of its link" + breaking +
                       "; if not (a folder from someone else may link to a private file of yours), remove the link "
                       f"and run `webgpu-kernels digest {shlex.quote(str(root))}`; or pass --follow-outside-links "
                       "(follow_outside_links=True) to publish what the links read. A Hugging Face cache snapshot "
                       "(what `download` gives) is made of symbolic links into its blobs/, so republishing one "
                       "needs --follow-outside-links", path=str(root))  # fmt: skip


def _validated(root: Path, *, gpu: bool, adapter: str | None) -> list[str]:
    """``validate PATH``'s checks: its errors refuse the upload (the first few named), its warnings are returned."""
    report = validate_package(root, adapter=adapter, gpu=gpu)
    errors = [p for p in report.problems if p.severity == ERROR]
    if errors:
        lines = ["  " + ": ".join(x for x in (p.place(), p.message.splitlines()[0] if p.message else "") if x)
                 for p in errors[:SHOWN_PROBLEMS]]
        more = f"\n  ... and {len(errors) - SHOWN_PROBLEMS} more" if len(errors) > SHOWN_PROBLEMS else ""
        if any(p.message.startswith("no WebGPU device") for p in errors):  # the machine's, not the package's
            more += "\n  (with no adapter here, --no-gpu (gpu=False) leaves out the GPU stage)"
        raise PackageError(f"`webgpu-kernels validate {root}` finds {len(errors)} error{'s' if len(errors) != 1 else ''} "
                           f"in the package: fix {'it' if len(errors) == 1 else 'them'} before publishing it\n" + "\n".join(lines) + more)  # fmt: skip
    return [": ".join(x for x in (p.place(), p.message) if x) for p in report.problems if p.severity != ERROR]


def _contract_check(held: bytes, package: KernelPackage, repo_id: str, version: int, *, path: str | Path,
                    allow: bool) -> list[str]:  # fmt: skip
    """The package's contract against the manifest revision vN holds: [] where every call that worked
    still does, a PackageError naming each incompatible change, or with ``allow`` a warning doing so."""
    try:
        old = parse_manifest(decode_json(held))
    except (KernelError, ValueError) as exc:  # written by another release or by hand: no reason to refuse
        return [f"{repo_id} v{version}'s {MANIFEST_FILE} does not parse here ({first_line(exc)}): the contract it "
                "holds and the package's were not compared"]  # fmt: skip
    changes = incompatible_changes(old, parse_manifest(package.read_json(MANIFEST_FILE)))
    if not changes:
        return []
    count = f"{len(changes)} incompatible change{'s' if len(changes) != 1 else ''}"
    said = (f"{repo_id} v{version} holds contract version {version}, and this package makes {count} to it: a call "
            f"that worked with get_kernel({repo_id!r}, version={version}) may now be refused or compute something "
            "else\n" + "\n".join(f"  {change}" for change in changes) + "\n")  # fmt: skip
    digest = f"`webgpu-kernels digest {shlex.quote(str(path))} --version {version + 1}`"
    if allow:
        return [said + f"published anyway (--allow-incompatible); a changed contract is contract version {version + 1}: "
                       f"{digest}, then upload it as v{version + 1}"]  # fmt: skip
    raise PackageError(said + f"publish it as contract version {version + 1} instead: {digest}, then upload it (it goes "
                              f"to v{version + 1}, and version={version} users keep v{version}); or pass "
                              f"--allow-incompatible (allow_incompatible=True) to replace v{version} anyway")  # fmt: skip


# --- the Hub ------------------------------------------------------------------------------------------


def _held_file(api: Any, repo_id: str, commit: str | None, name: str, *, rev: str, token: str | bool | None) -> bytes:
    """The bytes of ``name`` at ``commit``, downloaded into a temporary folder (the user's cache is not
    touched) and bounded as a package file is."""
    from huggingface_hub import hf_hub_download

    said = f"{api.endpoint} sent more than a package file may hold ({MAX_FILE_BYTES} bytes) for {name}"
    with tempfile.TemporaryDirectory(prefix="webgpu-kernels-upload-") as tmp:
        where = hf_hub_download(repo_id, name, repo_type=REPO_TYPE, revision=commit or rev, cache_dir=tmp,
                                endpoint=api.endpoint, token=token, library_name="webgpu-kernels",
                                library_version=hub.library_version(),
                                tqdm_class=hub.bounded_progress(MAX_FILE_BYTES, repo_id, rev, said))  # fmt: skip
        with open(where, "rb") as handle:
            data = handle.read(MAX_FILE_BYTES + 1)
    if len(data) > MAX_FILE_BYTES:
        raise HubError(f"{repo_id} {rev}: {name} is larger than a package file may be ({MAX_FILE_BYTES})",
                       repo_id=repo_id, revision=rev)  # fmt: skip
    return data


def _publish(repo_id: str, rev: str, files: dict[str, bytes], *, endpoint: str, token: str | bool | None,
             private: bool, message: str, compare: Callable[[bytes], None]) -> dict[str, Any]:  # fmt: skip
    """Create the repository and branch where missing, and commit ``files`` to ``rev`` with whatever
    else it held under build/webgpu/ deleted: {commit, new_commit, deleted, created_repo, created_branch}.
    ``compare`` is given the manifest.json an existing ``rev`` holds, before the commit (it may refuse)."""
    from huggingface_hub import CommitOperationAdd, CommitOperationDelete, HfApi
    from huggingface_hub.errors import HfHubHTTPError, RepositoryNotFoundError, RevisionNotFoundError

    api = HfApi(endpoint=endpoint, token=token)
    step = "reading the repository"
    created_repo = created_branch = False
    try:
        try:
            parent = api.repo_info(repo_id, repo_type=REPO_TYPE, revision=rev).sha
        except RevisionNotFoundError:
            parent = None
        except RepositoryNotFoundError:  # missing, or private to another account: creating it says which
            step = "creating the repository"
            try:  # not exist_ok=True: it takes the Hub's 409 for a repository it does not show for "created"
                api.create_repo(repo_id, repo_type=REPO_TYPE, private=private or None)
            except HfHubHTTPError as exc:
                if http_status(exc) != 409:
                    raise
                raise HubError(f"{repo_id} exists on {endpoint}, but the Hub does not show it to the token sent (a "
                               "private repository this account may not read, or one created meanwhile): use a token "
                               "with access to it, upload again, or upload to another repository", repo_id=repo_id,
                               revision=rev) from None  # fmt: skip
            created_repo, parent = True, None
        if parent is None:
            step = f"creating the branch {rev}"
            api.create_branch(repo_id, branch=rev, repo_type=REPO_TYPE, exist_ok=True)
            created_branch = True
            step = "reading the new branch"
            parent = api.repo_info(repo_id, repo_type=REPO_TYPE, revision=rev).sha
        step = f"listing {PACKAGE_DIR}/ at {rev}"
        # Listed at the parent commit, which the commit names: a push in between fails it rather than
        # keeping files that this listing did not see.
        held = [f for f in api.list_repo_files(repo_id, repo_type=REPO_TYPE, revision=parent)
                if f.startswith(f"{PACKAGE_DIR}/")]  # fmt: skip
        deleted = sorted(set(held) - set(files))
        held_manifest = f"{PACKAGE_DIR}/{MANIFEST_FILE}"
        if not created_branch and held_manifest in held:
            step = f"reading the {held_manifest} {rev} holds"
            compare(_held_file(api, repo_id, parent, held_manifest, rev=rev, token=token))
        additions = [CommitOperationAdd(path_in_repo=name, path_or_fileobj=data) for name, data in files.items()]
        step = f"uploading the files to {rev}"
        # What create_commit asks first (binary files go to LFS storage then), asked here: the Hub answers
        # for each file whether the repository's .gitignore ignores it, and create_commit leaves those out
        # without a word (a commit without them had been made, then refused by the check).
        api.preupload_lfs_files(repo_id, additions, repo_type=REPO_TYPE, revision=rev, free_memory=False)
        ignored = [op.path_in_repo for op in additions if getattr(op, "_should_ignore", False)]  # set by preupload
        if ignored:
            shown = ", ".join(ignored[:5]) + (f" and {len(ignored) - 5} more" if len(ignored) > 5 else "")
            raise HubError(f"{repo_id} {rev}: the repository's .gitignore (on {rev}) ignores {shown}, so the Hub would "
                           f"leave {'it' if len(ignored) == 1 else 'them'} out of the commit and get_kernel would "
                           f"refuse the package: nothing was committed; remove that rule from .gitignore on {rev} "
                           "(or upload to a repository of its own), then upload again", repo_id=repo_id,
                           revision=rev)  # fmt: skip
        operations: list[Any] = [CommitOperationDelete(path_in_repo=name) for name in deleted] + additions
        step = f"committing to {rev}"
        # create_commit, not upload_folder: with hf_xet installed, upload_folder may split the upload into
        # several commits, and it reads the folder again (files the digests did not check included).
        info = api.create_commit(repo_id, operations, commit_message=message, repo_type=REPO_TYPE, revision=rev,
                                 parent_commit=parent)  # fmt: skip
    except (Exception, KeyboardInterrupt) as exc:  # noqa: BLE001 - the client's HTTP errors, the HTTP library's
        # connection errors (in download's words), Ctrl-C: each with what this upload left on the Hub
        error = exc if isinstance(exc, (KernelError, KeyboardInterrupt)) else _hub_error(
            exc, repo_id, rev, step, endpoint=endpoint, token=token)  # fmt: skip
        made = _made(created_repo, created_branch, rev)
        if made:
            error.add_note(f"{made}: upload again to complete it")
        if isinstance(exc, KeyboardInterrupt) and step.startswith("committing"):
            error.add_note(f"interrupted while committing: {rev} may hold the commit or not; `webgpu-kernels download "
                           f"{repo_id} --revision {rev}` shows what it holds, and uploading again commits nothing "
                           "where it holds these files already")  # fmt: skip
        if error is exc:
            raise
        raise error from exc
    return {"commit": info.oid, "new_commit": info.oid != parent, "deleted": deleted, "created_repo": created_repo,
            "created_branch": created_branch}  # fmt: skip


def _verify(result: UploadResult, *, token: str | bool | None) -> None:
    """Download the commit just made through the loader's own path (listing checks, digests, the
    contract version, the manifest parsed) into a temporary cache: the user's cache is not touched."""
    def accept(package: HubPackage) -> None:
        check_contract_version(package, result.version)
        Kernel(package)  # the manifest loads and compiles, as get_kernel's does

    with tempfile.TemporaryDirectory(prefix="webgpu-kernels-upload-") as cache, hub_cache.cache_folder(Path(cache)):
        try:
            package = hub.download(result.repo_id, revision=result.commit, trust_remote_code=True,
                                   endpoint=result.endpoint, token=token, accept=accept)  # fmt: skip
        except (KernelError, KeyboardInterrupt) as exc:  # the commit is made: say so, whatever stopped its check
            done = "interrupted while checking it" if isinstance(exc, KeyboardInterrupt) else "checking it failed"
            exc.add_note(f"the commit {result.commit} was made on {result.revision} of {result.repo_id}, and is what "
                         f"{result.load_call} loads now, but {done}: `webgpu-kernels download {result.repo_id} "
                         f"--revision {result.commit}` checks it again; if the package is at fault, fix it and "
                         "upload again")  # fmt: skip
            raise
    if sorted(f"{PACKAGE_DIR}/{name}" for name in [*package.digests, METADATA_FILE]) != result.files:
        raise HubError(f"{result.repo_id} at commit {result.commit}: the Hub serves other files than were uploaded "
                       f"({len(package.digests) + 1} listed, {len(result.files)} uploaded)", repo_id=result.repo_id,
                       revision=result.revision)  # fmt: skip


def _made(created_repo: bool, created_branch: bool, rev: str) -> str:
    """What an upload that stopped before its commit left on the Hub, in words ("" for nothing)."""
    if created_repo:
        branch = f" and its branch {rev}" if created_branch else ""
        return f"this upload created the repository{branch} (which holds no package yet)"
    if created_branch:
        return f"this upload created the branch {rev} (which holds no package yet)"
    return ""


def _hub_error(exc: Exception, repo_id: str, rev: str, step: str, *, endpoint: str,
               token: str | bool | None) -> HubError:  # fmt: skip
    """A failed request of an upload, in download's words, with what to do about the token where the
    Hub refused it. The token itself is never part of the message."""
    org = repo_id.split("/")[0]
    status = http_status(exc)
    head = f"{repo_id} {rev}: {step} on {endpoint} failed"
    if status is None:
        names = {c.__name__ for c in type(exc).__mro__}
        if {"ConnectError", "TimeoutException"} & names:
            return HubError(f"{head}: {endpoint} cannot be reached ({type(exc).__name__}: {first_line(exc)})",
                            repo_id=repo_id, revision=rev)  # fmt: skip
        return HubError(f"{head}: {type(exc).__name__}: {first_line(exc)}", repo_id=repo_id, revision=rev)
    answer = http_answer(exc, token_advice=False)  # download's 401 advice is for reading
    if status == 401:
        advice = (_no_token_advice(token, endpoint, org) if not token_sent(token) else
                  "the Hub refused the token this process sent (HF_TOKEN or huggingface_hub's login): renew it, "
                  f"with write access to {org}, and set it in HF_TOKEN or log in with `hf auth login`")  # fmt: skip
    elif status == 403:
        advice = (f"the token sent (HF_TOKEN or huggingface_hub's login) may not write to {org}: use one with write "
                  "access there (HF_TOKEN, or `hf auth login`), or upload to an organisation of yours")  # fmt: skip
    elif status == 412:
        advice = f"{rev} moved while this upload ran (another push): upload again"
    else:
        advice = ""
    return HubError(f"{head}: the Hub answered {answer}" + (f": {advice}" if advice else ""), repo_id=repo_id,
                    revision=rev)  # fmt: skip


def _no_token_advice(token: str | bool | None, endpoint: str, org: str) -> str:
    if token is False:  # as download: the token goes only to the Hub HF_ENDPOINT names
        return token_kept_from(endpoint)
    return f"no token was sent: set HF_TOKEN, or log in with `hf auth login`, as an account that may write to {org}"


def describe(result: UploadResult) -> list[str]:
    """The lines ``upload`` prints for a result (its JSON is :meth:`UploadResult.as_dict`)."""
    target = f"{result.repo_id} @ {result.revision} ({PACKAGE_DIR}/ on {result.endpoint})"
    if result.dry_run:
        lines = [f"dry run: would upload {len(result.files)} files of {result.op_id} (contract version "
                 f"{result.version}) to {target}"]  # fmt: skip
        return lines + [f"  {name}" for name in result.files] + _outside_lines(result) + [
            "and delete whatever else that revision holds under build/webgpu/; nothing was sent"]
    made = "commit" if result.new_commit else "commit (unchanged: the revision held these files already)"
    lines = [f"uploaded {len(result.files)} files of {result.op_id} (contract version {result.version}) to {target}",
             f"{made} {result.commit}", *_outside_lines(result)]  # fmt: skip
    if result.created_repo:
        lines.append("created the repository" + (" (private)" if result.private else ""))
    elif result.private:
        lines.append("--private applies to a new repository: this one existed and keeps its visibility")
    if result.created_branch:
        lines.append(f"created the branch {result.revision}")
    if result.deleted:
        lines.append("deleted (no longer in the package): " + ", ".join(result.deleted))
    if result.verified:
        # "uploaded 18 files ... its 17 files match" had read as a file lost: the 18th is metadata.json itself
        lines.append(f"verified: the commit downloads and the {len(result.files) - 1} files metadata.json lists match it")
    lines.append(f"load it with: {result.load_call}")
    return lines


def _outside_lines(result: UploadResult) -> list[str]:
    """What came from outside the folder (``--follow-outside-links``), said wherever the upload is
    described: the flag had published such files without a word."""
    count = len(result.outside_links)
    if not count:
        return []
    head = (f"{count} file{'s' if count != 1 else ''} read through {'links' if count != 1 else 'a link'} outside the "
            "folder (--follow-outside-links):")  # fmt: skip
    return [head, *shown_links(result.outside_links, more=" (--json lists every one)")]
