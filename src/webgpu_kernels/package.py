"""Kernel packages on disk: the embedded ones shipped with the library and local folders.

A package is a folder holding ``manifest.json``, its ``*.wgsl.jinja`` templates and optionally
``metadata.json``, ``test.json`` and ``bench.json``. This module finds and reads files, and
checks them against ``metadata.json`` when the package is opened (digests.py): a changed, missing
or unlisted file refuses the load with a :class:`~webgpu_kernels.errors.DigestError`. What the
manifest means is the next stage's business.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path, PurePosixPath
from typing import Any

from .digests import (
    FILE_NOT_FOUND,
    METADATA_FILE,
    case_twin,
    check_manifest_file,
    id_problem,
    never_listed,
    read_file,
    through_folder_link,
    verify_package,
)
from .errors import DigestError, PackageError, shorten, type_name
from .reading import decode_json

MANIFEST_FILE = "manifest.json"


@dataclass(frozen=True)
class KernelPackage:
    """A package folder and where it came from (``embedded``, ``local`` or ``hub``)."""

    root: Path
    origin: str
    #: True for packages that could only be loaded with trust_remote_code (outside the official
    #: organisation, or a URL-like location): tools run their GPU work in a child process.
    needs_trust: bool = False
    #: The decoded metadata.json when the package has one and it was verified at open, else None.
    metadata: Mapping[str, Any] | None = field(default=None, compare=False, repr=False)
    #: The verified bytes of every file metadata.json lists (read once, when the package was opened).
    verified: Mapping[str, bytes] = field(default_factory=dict, compare=False, repr=False)

    @property
    def is_verified(self) -> bool:
        return self.metadata is not None

    def check_id(self, op_id: str) -> None:
        """Refuse a verified package whose metadata.json names another op than its manifest's
        ``op_id`` (a DigestError on metadata.json, as the open's own checks raise)."""
        problem = id_problem(self.metadata, op_id)
        if problem is None:
            return
        error = problem.error(self.root, author=self.origin not in ("hub", "embedded"))
        if self.origin == "embedded":
            raise DigestError(f"{error.detail} ({_INSTALLED_COPY_CHANGED})", file=error.file, reason=error.reason,
                              path=error.path)  # fmt: skip
        raise error

    def relative_name(self, name: str) -> str:
        """``name`` as a clean package-relative POSIX name; names that would leave the folder are refused.

        The check is on the name, not on where links to files point: a package in the Hugging
        Face cache is a folder of links into its blob store. A name through a link to a folder
        is refused when it is read (digests.through_folder_link).
        """
        if not isinstance(name, str) or not name or "\\" in name or "\x00" in name:
            raise PackageError(f"file name {name!r} is not a package file name", path=str(self.root))
        pure = PurePosixPath(name)
        parts = [p for p in pure.parts if p != "."]
        if pure.is_absolute() or Path(name).is_absolute() or ".." in parts or not parts:
            raise PackageError(f"file name {name!r} leaves the package folder", path=str(self.root))
        return "/".join(parts)

    def path_of(self, name: str) -> Path:
        """The path of a file in the package; names that would leave the folder are refused."""
        return self.root / self.relative_name(name)

    def read_bytes(self, name: str) -> bytes:
        rel = self.relative_name(name)
        if rel in self.verified:
            return self.verified[rel]
        why_not = never_listed(rel) or through_folder_link(self.root, rel)
        if why_not:  # validate reads unverified: it would pass a file that a verified open refuses
            raise PackageError(why_not, path=str(self.path_of(rel)))
        if self.metadata is not None:  # a verified package reads only what it verified (a README may sit
            # unlisted in the folder, but a template that includes it would run unverified bytes)
            if not self.has(rel):  # "run digest" would not help a file that is not there
                twin = case_twin(rel, self.verified)  # a name spelt in another case: say which file is there
                hint = f" ({twin!r} is: names are case-sensitive)" if twin is not None else ""
                raise PackageError(f"{FILE_NOT_FOUND}{hint}", path=str(self.path_of(rel)))
            if rel in self.metadata["digest"]["files"]:  # validate's view of a package that does not open
                raise DigestError("listed in metadata.json but it failed the digest check (see that problem)",
                                  file=rel, reason="mismatch", path=str(self.path_of(rel)))  # fmt: skip
            fix = {"hub": "tell the repository's authors: it must be listed where the package is published",
                   "embedded": _INSTALLED_COPY_CHANGED}.get(self.origin, "run `webgpu-kernels digest` on the package to list it")  # fmt: skip
            raise DigestError("not listed in metadata.json's digest.files, so it was not verified when the package "
                              f"was opened ({fix})", file=rel, reason="unlisted", path=str(self.path_of(rel)))  # fmt: skip
        return read_file(self.root, rel)

    def read_text(self, name: str) -> str:
        data = self.read_bytes(name)
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            raise PackageError("not UTF-8 text", path=str(self.path_of(name))) from None

    def read_json(self, name: str) -> Any:
        try:
            return decode_json(self.read_bytes(name))
        except ValueError as exc:
            raise PackageError(str(exc), path=str(self.path_of(name))) from None

    def has(self, name: str) -> bool:
        try:
            rel = self.relative_name(name)
        except PackageError:
            return False
        try:
            return rel in self.verified or ((self.root / rel).is_file() and through_folder_link(self.root, rel) is None)
        except OSError:  # a name too long for the file system is no file of the package
            return False


def embedded_root() -> Path:
    return Path(str(resources.files(__package__).joinpath("kernels")))


def embedded_ids() -> list[str]:
    """The op ids of the packages shipped inside the library."""
    root = embedded_root()
    return sorted(p.name for p in root.iterdir() if (p / MANIFEST_FILE).is_file())


#: What a user does about an embedded package that fails its digests (not "run digest", which
#: would make a changed install load).
_INSTALLED_COPY_CHANGED = "the installed library's copy has changed: reinstall webgpu-kernels"


def open_embedded(op_id: str, *, verify_digests: bool = True) -> KernelPackage:
    """An embedded package, checked against its metadata.json (embedded packages ship one)."""
    if op_id not in embedded_ids():
        known = ", ".join(embedded_ids())
        raise PackageError(f"no embedded kernel {op_id!r}; embedded kernels: {known}")
    return open_folder(embedded_root() / op_id, origin="embedded", verify_digests=verify_digests,
                       require_metadata=verify_digests)  # fmt: skip


def check_folder(path: str | Path) -> Path:
    """``path`` (``~`` expanded) where it is a folder; else a PackageError naming it as given (a
    str keeps its ``./``, which ``Path`` drops): :func:`no_such_folder`'s where nothing is there.
    The commands had said ``nope: not a folder`` of ``./nope``, and validate ``no such folder``."""
    try:
        root = Path(path).expanduser()
    except RuntimeError:  # ~nosuchuser: no home to expand, so nothing there
        raise no_such_folder(path) from None
    try:
        exists, is_dir = root.exists(), root.is_dir()
    except (OSError, ValueError) as exc:  # a name too long, a NUL byte
        raise PackageError(f"cannot be opened: {getattr(exc, 'strerror', None) or exc}",
                           path=shorten(os.fspath(path), 300)) from None  # fmt: skip
    if not exists:
        if root.is_symlink():  # exists() follows it: a dangling link or a loop (ELOOP) reads as nothing there
            raise PackageError("a symbolic link that leads to no folder (its target is missing, or it loops)",
                               path=shorten(os.fspath(path), 300))  # fmt: skip
        raise no_such_folder(path)
    if not is_dir:  # validate had said this of a file, and the other commands only "not a folder"
        why = "a file, not a package folder (name the folder that holds manifest.json)" if root.is_file() else "not a folder"
        raise PackageError(why, path=shorten(os.fspath(path), 300))
    return root


def no_such_folder(path: str | os.PathLike[str]) -> PackageError:
    """The error every command gives for a path argument where nothing is, naming it as typed."""
    return PackageError("no such folder", path=shorten(os.fspath(path), 300))


def open_folder(
    path: str | Path,
    *,
    origin: str = "local",
    needs_trust: bool = False,
    verify_digests: bool = True,
    require_metadata: bool = False,
) -> KernelPackage:
    """A package folder. With a metadata.json, every file is checked against its digest now.

    A folder without metadata.json opens unverified (an author's work in progress) unless
    ``require_metadata`` is set (packages that come from elsewhere should carry one).
    ``verify_digests=False`` skips the check (``digest`` and ``validate``, which report instead).
    """
    if not isinstance(path, (str, Path)):
        raise PackageError(f"a package folder is a path (str or pathlib.Path), got {type_name(path)} {path!r}")
    try:
        root = check_folder(path)
        check_manifest_file(root)
        root = root.resolve()
    except (OSError, RuntimeError, ValueError) as exc:  # ~nosuchuser, a name too long, a NUL byte
        raise PackageError(f"cannot be opened: {getattr(exc, 'strerror', None) or exc}",
                           path=shorten(str(path))) from None  # fmt: skip
    metadata: dict[str, Any] | None = None
    verified: dict[str, bytes] = {}
    if verify_digests:
        # A downloaded or installed copy's user is not its author: no "run digest" advice there.
        try:
            metadata, verified = verify_package(root, author=origin not in ("hub", "embedded"))
        except DigestError as exc:
            if origin != "embedded":
                raise
            raise DigestError(f"{exc.detail} ({_INSTALLED_COPY_CHANGED})",
                              file=exc.file, reason=exc.reason, path=exc.path) from None  # fmt: skip
        if metadata is None and require_metadata:
            raise DigestError(f"no {METADATA_FILE}: the package's files cannot be verified", file=METADATA_FILE,
                              reason="missing", path=str(root / METADATA_FILE))  # fmt: skip
    return KernelPackage(root=root, origin=origin, needs_trust=needs_trust, metadata=metadata, verified=verified)
