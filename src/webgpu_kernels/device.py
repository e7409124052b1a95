"""WebGPU adapters and devices through wgpu-py: choosing one, and one device per adapter.

The best adapter is chosen by default (discrete over integrated over CPU, native backends over
OpenGL, shader-f16 preferred). ``WEBGPU_KERNELS_ADAPTER`` or the ``adapter`` argument selects one
by backend (``vulkan``, ``metal``, ``d3d12``, ``gl``) or by a substring of its name (the variable
is read when the default device is first opened). wgpu-py never
frees devices, so each adapter's device is created once per process and reused.
"""

from __future__ import annotations

import ctypes
import dataclasses
import itertools
import os
import shlex
import threading
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import wgpu

from .buffers import (
    FORKED,
    READBACK_SPIN_S,
    WAIT_WARN_ENV,
    WAIT_WARN_S,
    DeviceMemory,
    padded_size,
    raised_by_wgpu_promise,
)
from .errors import AdapterNotFoundError, DeviceError, InputError, KernelError, describe_value
from .program import WEBGPU_FEATURE_NAMES, DeviceInfo

ADAPTER_ENV = "WEBGPU_KERNELS_ADAPTER"
POOL_ENV = "WEBGPU_KERNELS_POOL_MB"  # free GPU memory kept for reuse, per device
#: Microseconds a readback may poll without sleeping (default: buffers.READBACK_SPIN_S on GPU
#: adapters, 0 on CPU ones); 0 never spins, for hosts where a busy core costs more than latency.
SPIN_ENV = "WEBGPU_KERNELS_SPIN_US"
_TYPE_RANK = {"DiscreteGPU": 3, "IntegratedGPU": 2, "VirtualGPU": 1, "CPU": 0}
_BACKEND_ALIASES = {"gl": "opengl", "opengl": "opengl", "vulkan": "vulkan", "vk": "vulkan", "metal": "metal",
                    "d3d12": "d3d12", "dx12": "d3d12"}  # fmt: skip
_OPTIONAL_FEATURES = ("shader-f16", "timestamp-query", "subgroup")
_RAISED_LIMITS = ("max-storage-buffer-binding-size", "max-buffer-size", "max-compute-workgroup-storage-size",
                  "max-compute-invocations-per-workgroup", "max-compute-workgroup-size-x",
                  "max-storage-buffers-per-shader-stage")  # fmt: skip


@dataclass(frozen=True)
class AdapterSummary:
    """An adapter as wgpu lists it (list_adapters, choose_adapter, Device.adapter): its place in
    wgpu's list, names, backend, type, and every feature and integer limit it offers (a device the
    engine opens on it uses only a few of the features: Device.has_f16, Device.gpu.features)."""

    index: int
    name: str
    vendor: str
    backend: str
    adapter_type: str
    description: str
    features: frozenset[str]
    limits: dict[str, int] = field(repr=False)

    @property
    def rank(self) -> tuple[int, int, int]:
        native = 0 if self.backend.lower() == "opengl" else 1
        return (_TYPE_RANK.get(self.adapter_type, 0), native, int("shader-f16" in self.features))

    def label(self) -> str:
        """The adapter in words: ``name (backend, adapter_type)``."""
        return f"{self.name} ({self.backend}, {self.adapter_type})"

    @property
    def device_features(self) -> tuple[str, ...]:
        """What manifests see as ``device.features`` on a device opened on this adapter: the
        features the engine asks for, by their WebGPU names (not all the adapter offers)."""
        return tuple(sorted(WEBGPU_FEATURE_NAMES.get(f, f) for f in _OPTIONAL_FEATURES if f in self.features))


def _summary(index: int, adapter: Any) -> AdapterSummary:
    info = adapter.info
    return AdapterSummary(
        index=index, name=info.get("device", "") or info.get("description", ""), vendor=info.get("vendor", ""),
        backend=info.get("backend_type", ""), adapter_type=info.get("adapter_type", ""),
        description=info.get("description", ""), features=frozenset(adapter.features),
        limits={k: v for k, v in adapter.limits.items() if isinstance(v, int)},
    )  # fmt: skip


_lock = threading.RLock()
_serials = itertools.count(1)
_adapters: list[Any] | None = None
#: Each listed adapter's _identity, by its place in _adapters (kept when a loss drops _adapters).
_listed: list[tuple[str, ...]] = []
#: Devices by their adapter's place in _adapters (AdapterSummary.index).
_devices: dict[int, Device] = {}
#: The device each ``adapter`` request string chose: choosing again lists every adapter's info,
#: features and limits, which a call passing ``adapter=`` would pay every time (CPU machine,
#: `python scripts/list_attr_cost.py`: get_device("vulkan") 27-31 us before, 0.26-0.28 after).
_requested: dict[str, Device] = {}
#: Every device opened here and still referenced, lost ones included (a lost device is forgotten by
#: _devices, but its tensors live on): a forked child marks them all (_after_fork_in_child).
_opened: weakref.WeakSet[Device] = weakref.WeakSet()


_forked = False  # this process is a fork of one that had opened a device (FORKED)
#: A device was ever opened here: one lost since is forgotten (Device._forget), but its driver
#: state stays, shared with a forked child as a live one's is.
_opened_any = False


def _never_release(self: Any) -> None:
    """The finalizer of wgpu's objects in a forked child (see _after_fork_in_child)."""


def _libc_exit_handlers() -> tuple[Any, tuple[Any, ...]] | None:
    """glibc's ``on_exit`` and the addresses of ``_exit`` and ``fcloseall``; None where libc has
    no on_exit (musl, macOS) or there is no fork."""
    if not hasattr(os, "fork"):
        return None
    try:
        libc = ctypes.CDLL(None)
        on_exit = libc.on_exit
        handlers = tuple(ctypes.cast(f, ctypes.c_void_p) for f in (libc._exit, libc.fcloseall))
    except (OSError, AttributeError, TypeError):
        return None
    on_exit.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
    on_exit.restype = ctypes.c_int
    return on_exit, handlers


#: Resolved at import, not in the child: a dlopen there could wait for good on the loader's lock
#: when another thread of the parent held it at the fork.
_LIBC_EXIT_HANDLERS = _libc_exit_handlers()


def _skip_inherited_exit_handlers() -> None:
    """End this forked child's normal exit right after the interpreter's own teardown, with the
    exit status it had, before the C exit handlers registered before the fork run: the GPU
    drivers' among them tear down state the child shares with its parent. On the H200 the child
    then died (SIGSEGV) and its parent's next readback waited for good; lavapipe's OpenGL driver
    crashes the child there too (scripts/fork_probe.py sysexit). glibc runs ``on_exit`` handlers
    last-registered first with exit's status, so ``_exit`` registered now comes before every
    handler registered before the fork, and before the shared libraries' destructors, which glibc
    runs last (those of a library the child loads itself too); ``fcloseall``, registered after
    it, flushes C stdio first. Python's atexit handlers and its own flushing have run by then.
    Where libc has no on_exit, docs/python-api.md's advice, end such a child with os._exit, is the only
    cure."""
    if _LIBC_EXIT_HANDLERS is None:
        return
    on_exit, handlers = _LIBC_EXIT_HANDLERS
    # Both are called as f(status, arg): _exit takes the status; fcloseall takes no argument and,
    # in the System V calling conventions, ignores the ones it is passed.
    for handler in handlers:
        on_exit(handler, None)


def _after_fork_in_child() -> None:
    """In a forked child, refuse the parent's devices and new ones with a DeviceError instead of
    hanging at the first wait; the lock may have been held by another of the parent's threads."""
    global _forked, _default, _adapters, _lock
    # Held at the fork by another thread of the parent (only the forking thread lives on here), the
    # lock would stay held for good; and that thread was opening a device, half open in wgpu now.
    opening = not _lock.acquire(blocking=False)
    if not opening:
        _lock.release()
    _lock = threading.RLock()
    if not _opened_any and not opening:
        return  # wgpu works in a child forked before any device was opened
    _forked = True
    _skip_inherited_exit_handlers()
    # The child shares its parent's driver objects (on NVIDIA, the same device files and kernel
    # handles): a wgpu object finalized here, by the child's code, its garbage collector or its exit,
    # frees memory the parent still uses, whose next release or submit then waited for good (H100 and
    # H200: the suite stopped after the fork test). The child cannot use the device
    # anyway, so none of its wgpu objects is released.
    wgpu.GPUObjectBase.__del__ = wgpu.GPUAdapter.__del__ = _never_release
    # Every device, not just those _devices still holds: a lost one's tensor released in the child
    # had taken its parent's lock (held at the fork by another thread: the child waited for good)
    # and trimmed its pool, destroying the parent's buffers.
    for device in list(_opened):
        device.memory.forked = True
        device.lock = device.memory.lock = threading.RLock()  # another thread of the parent may have held it
    _devices.clear()
    _requested.clear()
    _default, _adapters = None, None


if hasattr(os, "register_at_fork"):  # POSIX
    os.register_at_fork(after_in_child=_after_fork_in_child)


def _enumerate() -> list[Any]:
    global _adapters, _listed
    adapters = _adapters
    if adapters is None:
        with _lock:
            if _adapters is None:
                fresh = list(wgpu.gpu.enumerate_adapters_sync())
                summaries = [_summary(i, a) for i, a in enumerate(fresh)]
                _refile(summaries)
                _adapters, _listed = fresh, [_identity(s) for s in summaries]
            adapters = _adapters
    return adapters


def _identity(summary: AdapterSummary) -> tuple[str, ...]:
    """What tells an adapter from others in wgpu's list (two identical GPUs share it)."""
    return (summary.name, summary.vendor, summary.backend, summary.adapter_type, summary.description)


def _refile(summaries: list[AdapterSummary]) -> None:
    """File the devices that survived a loss under their adapters' places in the new listing
    (``summaries``). Filed by the old places, a list whose order changed (an adapter gone, fallen
    off the bus, or listed elsewhere) had handed a request for one adapter the device of another.
    Alike adapters are matched in their order, as wgpu lists them in the driver's; where their
    number changed, which is which cannot be told, and the device is filed nowhere (whoever holds
    it keeps it; a request opens a new one)."""
    places: dict[tuple[str, ...], list[int]] = {}
    for summary in summaries:
        places.setdefault(_identity(summary), []).append(summary.index)
    refiled: dict[int, Device] = {}
    for index, device in _devices.items():
        identity = _listed[index] if index < len(_listed) else _identity(device.adapter)
        now = places.get(identity, [])
        if len(now) == _listed.count(identity):
            place = now[_listed[:index].count(identity)]
            device.adapter = dataclasses.replace(device.adapter, index=place)
            refiled[place] = device
    _devices.clear()
    _devices.update(refiled)


def list_adapters() -> list[AdapterSummary]:
    """Every adapter wgpu can see, best first."""
    return sorted((_summary(i, a) for i, a in enumerate(_enumerate())), key=lambda s: s.rank, reverse=True)


#: What to say where wgpu lists no adapter: the packages package-files.md's CI step installs.
NO_ADAPTER = ("no WebGPU adapter found (on Linux without a GPU, install Mesa's Vulkan driver and the loader: "
              "apt-get install mesa-vulkan-drivers libvulkan1)")


def choose_adapter(request: str | None = None) -> AdapterSummary:
    """The adapter for ``request`` (backend or name substring), else ``$WEBGPU_KERNELS_ADAPTER``, else the best."""
    if request is not None and (not isinstance(request, str) or not request.strip()):  # "" matched every name
        raise InputError("adapter", "a backend (vulkan, metal, d3d12, gl) or part of an adapter's name",
                         describe_value(request))  # fmt: skip
    request = request if request is not None else os.environ.get(ADAPTER_ENV) or None
    adapters = list_adapters()
    if not adapters:
        raise AdapterNotFoundError(NO_ADAPTER)
    if request is None:
        return adapters[0]
    wanted = request.strip().lower()
    backend = _BACKEND_ALIASES.get(wanted)
    for a in adapters:
        if backend is not None and a.backend.lower() == backend:
            return a
        if backend is None and wanted in f"{a.name} {a.vendor} {a.description}".lower():
            return a
    seen = "; ".join(a.label() for a in adapters)
    raise AdapterNotFoundError(f"no adapter matches {request!r} (from the adapter argument or ${ADAPTER_ENV}); "
                               f"present: {seen}")  # fmt: skip


#: What a hint says for an adapter that no request tells from one listed before it (two alike GPUs).
_NO_REQUEST = "<a backend or part of the name of that adapter>"


def _request_for(adapter: AdapterSummary) -> str | None:
    for request in (adapter.backend.lower(), adapter.name):
        try:
            if request and choose_adapter(request).index == adapter.index:
                return request
        except KernelError:  # AdapterNotFoundError: a backend name no alias knows
            continue
    return None


def adapter_request(adapter: AdapterSummary) -> str:
    """The ``adapter=`` value (quoted) that chooses ``adapter`` (choose_adapter's inverse): its
    backend where that does, else its name; else words, where no request tells it from an adapter
    listed before it (two alike GPUs)."""
    request = _request_for(adapter)
    return _NO_REQUEST if request is None else repr(request)


def binding_bytes(adapter: AdapterSummary) -> int:
    """The largest tensor a call binds on a device opened on ``adapter``: the engine opens it with
    the adapter's maxStorageBufferBindingSize and maxBufferSize (_RAISED_LIMITS)."""
    return min(adapter.limits.get("max-storage-buffer-binding-size", 0), adapter.limits.get("max-buffer-size", 0))


class AdapterAdvice(NamedTuple):
    """Another adapter for a refusal's advice: how a Python call chooses it (``adapter='vulkan'``),
    how the command line does (``--adapter vulkan``), and words on what it binds."""

    python: str
    command_line: str
    words: str


def binding_adapter_advice(nbytes: int) -> AdapterAdvice | None:
    """The best adapter present whose device binds a tensor of ``nbytes`` whole, for a refusal's
    advice; None where none does (a refusal must not send the caller to look for a larger limit
    this machine lacks). Not listed in a forked child, where listing could wait on driver state
    its parent holds."""
    if _forked:
        return None
    padded = padded_size(nbytes)
    adapter = next((a for a in list_adapters() if binding_bytes(a) >= padded), None)
    if adapter is None:
        return None
    request = _request_for(adapter)
    return AdapterAdvice(f"adapter={_NO_REQUEST if request is None else repr(request)}",
                         f"--adapter {_NO_REQUEST if request is None else shlex.quote(request)}",
                         f"({adapter.label()} binds up to {binding_bytes(adapter)} bytes)")  # fmt: skip


def _camel(name: str) -> str:
    head, *rest = name.split("-")
    return head + "".join(part.capitalize() for part in rest)


#: The values that turn an on/off setting on or off (case-insensitive); unset or empty is off, and
#: any other value is refused ("maybe" had silently meant off).
TRUE_VALUES = frozenset({"1", "ON", "YES", "TRUE"})
FALSE_VALUES = frozenset({"0", "OFF", "NO", "FALSE", ""})


def env_flag(name: str) -> bool:
    """Whether environment variable ``name`` turns its setting on (:data:`TRUE_VALUES`)."""
    text = os.environ.get(name, "").strip().upper()
    if text not in TRUE_VALUES and text not in FALSE_VALUES:
        raise InputError(f"${name}", "1, on, yes or true, or 0, off, no or false", repr(os.environ[name]))
    return text in TRUE_VALUES


def env_count(name: str, default: int) -> int:
    """A non-negative integer from environment variable ``name``; ``default`` when unset or empty."""
    text = os.environ.get(name, "").strip()
    if not text:
        return default
    if not (text.isascii() and text.isdigit()):  # also refuses "-1", "1.5", "1e3" and "²" (int() would raise)
        raise InputError(f"${name}", "a non-negative integer", repr(text))
    return int(text)


class Device:
    """A wgpu device with what expressions may know about it and its own pipeline cache lock.

    For users (docs/python-api.md): ``adapter`` (the AdapterSummary of its adapter), ``has_f16``,
    ``gpu`` (the wgpu GPUDevice; ``gpu.features``, the features it was opened with: shader-f16,
    subgroup and timestamp-query where the adapter has them), ``limits`` (the limits it was opened
    with, wgpu's hyphenated names to ints) and ``lost``. ``info``, ``lock``, ``memory``, ``internal_pipelines`` and
    ``serial`` are the engine's own.
    """

    def __init__(self, adapter: Any, summary: AdapterSummary) -> None:
        # Settings first: a bad value is refused before any device exists.
        pool_mb = env_count(POOL_ENV, 512)
        spin_us = env_count(SPIN_ENV, 0 if summary.adapter_type == "CPU" else round(READBACK_SPIN_S * 1e6))
        wait_warn_s = env_count(WAIT_WARN_ENV, WAIT_WARN_S)
        features = [f for f in _OPTIONAL_FEATURES if f in summary.features]
        limits = {k: summary.limits[k] for k in _RAISED_LIMITS if k in summary.limits}
        try:
            self.gpu = adapter.request_device_sync(label="webgpu-kernels", required_features=features,
                                                   required_limits=limits)  # fmt: skip
        except (wgpu.GPUError, RuntimeError) as exc:
            if not (isinstance(exc, wgpu.GPUError) or raised_by_wgpu_promise(exc)):
                raise
            raise DeviceError(f"cannot open a device on {summary.label()}: {' '.join(str(exc).split())}") from None
        self.adapter = summary
        self.limits = {k: v for k, v in self.gpu.limits.items() if isinstance(v, int)}
        self.info = DeviceInfo(limits={_camel(k): v for k, v in self.limits.items()},
                               features=frozenset(self.gpu.features))  # fmt: skip
        self.lock = threading.RLock()
        self.memory = DeviceMemory(self.gpu, self.lock, pool_mb * 2**20, self.limits["max-buffer-size"],
                                   spin_s=spin_us / 1e6, wait_warn_s=wait_warn_s)  # fmt: skip
        self.memory.on_lost = self._forget
        self.serial = next(_serials)  # plans are keyed by it: a replacement device never shares them
        self.lost = False  # set when wgpu reports it lost: its tensors' data is gone
        # The engine's own shaders' (pipeline, bind group layout): GpuTensor.astype's (conversion.py)
        # and bench's copy (benchmark.py), built on first use under the lock; a replacement device
        # after a loss builds its own, as for the call plans
        self.internal_pipelines: dict[Any, tuple[Any, Any]] = {}

    def internal_pipeline(self, key: Any, build: Callable[[], tuple[Any, Any]]) -> tuple[Any, Any]:
        """The (pipeline, bind group layout) of one of the engine's own shaders, ``build()`` on
        first use and kept (``internal_pipelines``), under the lock."""
        with self.lock:
            hit = self.internal_pipelines.get(key)
            if hit is None:
                hit = self.internal_pipelines[key] = build()
            return hit

    @property
    def has_f16(self) -> bool:
        """Whether the device was opened with the shader-f16 feature, which float16 inputs need
        (the adapter's ``features`` list what it offers, not what the device was opened with)."""
        return self.info.has_f16

    def __repr__(self) -> str:
        state = ", lost" if self.lost else ""
        return f"Device({self.adapter.label()}{state})"

    def _forget(self) -> None:
        """Called when wgpu reports this device lost: later get_device() calls open a new one."""
        global _default, _adapters
        self.lost = True
        with _lock:
            _adapters = None  # a consumed adapter may not give a second device: enumerate afresh
            for key, device in list(_devices.items()):
                if device is self:
                    del _devices[key]
            for request, device in list(_requested.items()):
                if device is self:
                    del _requested[request]
            if _default is self:
                _default = None


_default: Device | None = None


def get_device(adapter: str | None = None) -> Device:
    """The process-wide device of the chosen adapter (created on first use).

    Without ``adapter``, ``$WEBGPU_KERNELS_ADAPTER`` is read when the default device is first
    opened (and again after it is lost), like CUDA_VISIBLE_DEVICES: reading the environment on
    every call cost 0.6 us of a 6.6 us call.
    """
    global _default
    if adapter is None:
        device = _default
        if device is None:
            device = _default = _get_device(None)
        return device
    if type(adapter) is not str:
        return _get_device(adapter)  # which refuses it with the argument's name
    device = _requested.get(adapter)
    if device is None:
        device = _requested[adapter] = _get_device(adapter)
    return device


def opened_device(gpu: Any) -> Device | None:
    """The Device, live or lost, whose wgpu device is ``gpu``; None for one this library never
    opened (a user's own)."""
    return next((device for device in list(_opened) if device.gpu is gpu), None)


@contextmanager
def default_device(adapter: str | None) -> Iterator[Device]:
    """Inside the block, ``get_device()`` without an adapter returns ``adapter``'s device: a
    command's ``--adapter`` then reaches every call it makes (``tune`` had timed on the default
    adapter and stored the result under the one asked for). ``None`` changes nothing."""
    global _default
    device = get_device(adapter)
    if adapter is None:
        yield device
        return
    previous, _default = _default, device
    try:
        yield device
    finally:
        # a device lost meanwhile was forgotten (Device._forget): the next call opens a new default
        _default = previous if previous is None or any(d is previous for d in _devices.values()) else None


def _get_device(adapter: str | None) -> Device:
    global _opened_any
    if _forked:
        raise DeviceError(FORKED)
    with _lock:  # chosen under it too: a loss on another thread lists the adapters again, in another order
        summary = choose_adapter(adapter)
        device = _devices.get(summary.index)
        if device is None:
            _opened_any = True  # before: an open that fails halfway may leave driver state too
            device = Device(_enumerate()[summary.index], summary)
            _devices[summary.index] = device
            _opened.add(device)
        return device
