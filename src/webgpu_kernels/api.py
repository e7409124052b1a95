"""The public entry points: ``get_kernel`` (embedded packages) and ``load_kernel`` (a folder)."""

from __future__ import annotations

import threading
from pathlib import Path

from .errors import PackageError
from .kernel import Kernel
from .package import embedded_ids, open_embedded, open_folder

_embedded: dict[str, Kernel] = {}
_lock = threading.Lock()


def get_kernel(name: str) -> Kernel:
    """A kernel by op id, from the packages embedded in the library (``"com.microsoft.BiasAdd"``).

    Kernels are loaded once per process and shared, so their plans and pipelines are too.
    """
    if not isinstance(name, str):
        raise PackageError(f"a kernel name must be a string, got {type(name).__name__}")
    with _lock:
        kernel = _embedded.get(name)
        if kernel is None:
            kernel = Kernel(open_embedded(name))
            _embedded[name] = kernel
        return kernel


def load_kernel(path: str | Path) -> Kernel:
    """A kernel from a package folder on disk (``manifest.json`` and its templates)."""
    return Kernel(open_folder(path))


def list_kernels() -> list[str]:
    """The op ids of the embedded kernel packages."""
    return embedded_ids()
