"""The public entry points: ``get_kernel`` (embedded packages) and ``load_kernel`` (a folder)."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import numpy as np

from . import execution
from .device import get_device
from .errors import PackageError
from .kernel import Kernel
from .package import embedded_ids, open_embedded, open_folder
from .tensor import GpuTensor

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


def to_gpu(array: Any, *, adapter: str | None = None) -> GpuTensor:
    """Upload a NumPy array once, to pass as a GPU-resident input to many calls."""
    if isinstance(array, GpuTensor):
        return array
    value = np.asarray(array)
    if value.dtype.byteorder == ">":
        value = value.astype(value.dtype.newbyteorder("<"))
    return execution.to_gpu(get_device(adapter), np.asarray(value, order="C"))


def synchronize(*, adapter: str | None = None) -> None:
    """Submit all recorded GPU work now (reads do this on their own)."""
    execution.flush(get_device(adapter))


def list_kernels() -> list[str]:
    """The op ids of the embedded kernel packages."""
    return embedded_ids()
