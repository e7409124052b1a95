"""Kernel packages on disk: the embedded ones shipped with the library and local folders.

A package is a folder holding ``manifest.json``, its ``*.wgsl.jinja`` templates and optionally
``metadata.json``, ``test.json`` and ``bench.json``. This module only finds and reads files;
what the manifest means is the next stage's business.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from .errors import PackageError

MANIFEST_FILE = "manifest.json"
#: Largest file a package may hold; manifests and templates are a few kilobytes.
MAX_FILE_BYTES = 8 * 1024 * 1024


@dataclass(frozen=True)
class KernelPackage:
    """A package folder and where it came from (``embedded``, ``local`` or ``hub``)."""

    root: Path
    origin: str
    #: True for packages that could only be loaded with trust_remote_code (outside the official
    #: organisation, or a URL-like location): tools run their GPU work in a child process.
    needs_trust: bool = False

    def path_of(self, name: str) -> Path:
        """The path of a file in the package; names that would leave the folder are refused."""
        candidate = (self.root / name).resolve()
        if not name or Path(name).is_absolute() or self.root.resolve() not in candidate.parents:
            raise PackageError(f"file name {name!r} leaves the package folder", path=str(self.root))
        return candidate

    def read_bytes(self, name: str) -> bytes:
        path = self.path_of(name)
        try:
            if path.stat().st_size > MAX_FILE_BYTES:
                raise PackageError(f"larger than {MAX_FILE_BYTES} bytes", path=str(path))
            return path.read_bytes()
        except FileNotFoundError:
            raise PackageError("file not found in the package", path=str(path)) from None
        except OSError as exc:
            raise PackageError(f"cannot read: {exc.strerror}", path=str(path)) from None

    def read_text(self, name: str) -> str:
        data = self.read_bytes(name)
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            raise PackageError("not UTF-8 text", path=str(self.path_of(name))) from None

    def read_json(self, name: str) -> Any:
        try:
            return json.loads(self.read_text(name))
        except json.JSONDecodeError as exc:
            raise PackageError(f"invalid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}",
                               path=str(self.path_of(name))) from None  # fmt: skip

    def has(self, name: str) -> bool:
        try:
            return self.path_of(name).is_file()
        except PackageError:
            return False


def embedded_root() -> Path:
    return Path(str(resources.files(__package__).joinpath("kernels")))


def embedded_ids() -> list[str]:
    """The op ids of the packages shipped inside the library."""
    root = embedded_root()
    return sorted(p.name for p in root.iterdir() if (p / MANIFEST_FILE).is_file())


def open_embedded(op_id: str) -> KernelPackage:
    if op_id not in embedded_ids():
        known = ", ".join(embedded_ids())
        raise PackageError(f"no embedded kernel {op_id!r}; embedded kernels: {known}")
    return KernelPackage(root=embedded_root() / op_id, origin="embedded")


def open_folder(path: str | Path, *, origin: str = "local") -> KernelPackage:
    root = Path(path).expanduser()
    if not root.is_dir():
        raise PackageError("not a folder", path=str(root))
    if not (root / MANIFEST_FILE).is_file():
        raise PackageError(f"no {MANIFEST_FILE} in the folder", path=str(root))
    return KernelPackage(root=root.resolve(), origin=origin)
