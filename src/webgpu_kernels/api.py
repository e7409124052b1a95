"""The public entry points: ``get_kernel`` (embedded packages) and ``load_kernel`` (a folder)."""

from __future__ import annotations

import functools
import inspect
import os
import threading
import weakref
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import wgpu

from . import __version__, execution, locations
from .buffers import is_device_lost, padded_size, translate_gpu_errors
from .call_inputs import as_array, checked_shape_and_dtype
from .case_data import numpy_dtype
from .casefile import parse_draft_case, read_test_file
from .contract import check_array_shape
from .device import Device, adapter_request, binding_adapter_advice, get_device, opened_device
from .errors import DeviceLimitError, DTypeError, InputError, KernelError, PackageError, describe_value, type_name
from .forks import fresh_in_child
from .kernel import Kernel
from .package import KernelPackage, embedded_ids, open_embedded, open_folder
from .tensor import LOST_TENSOR, RELEASED_ADVICE, GpuTensor

_embedded: dict[str, Kernel] = {}
#: op id -> set once the thread opening that embedded kernel is done: the package is read and
#: validated outside _lock, so that opening one kernel does not hold up another, and a thread
#: asking for one being opened waits for it rather than open it a second time.
_opening: dict[str, threading.Event] = {}
_lock = threading.Lock()
# A fork while another thread opens a kernel leaves an event no child thread would ever set.
fresh_in_child(globals(), _lock=threading.Lock, _opening=dict)
#: Kernels opened again from a pickled reference (Kernel.__reduce__), so that a worker opens each
#: once however many tasks carry it: a Pool pickles every task's arguments anew.
_reopened: dict[tuple[Any, ...], Kernel] = {}


def get_kernel(
    name: str | Path,
    *,
    version: int | None = None,
    revision: str | None = None,
    trust_remote_code: bool = False,
    expected_op_id: str | None = None,
) -> Kernel:
    """A kernel by op id (embedded package) or by Hugging Face Hub kernel repository.

    * ``get_kernel("com.microsoft.BiasAdd")``: the package embedded in the library. ``version=``,
      if given, must be its contract version (``metadata.json``'s ``version``, as on the Hub).
    * ``get_kernel("webgpu-kernels/com.microsoft.BiasAdd", version=1)``: the kernel repository on
      the Hub (``HF_ENDPOINT``), contract version N = revision ``vN``; ``revision=`` pins a branch,
      tag or commit instead. Files come from ``build/webgpu/`` into the Hugging Face cache (reused
      with ``HF_HUB_OFFLINE=1``) and are checked against the sha256 digests of ``metadata.json``.
    * A repository outside the ``webgpu-kernels`` organisation, a local path (``"./pkg"``,
      ``"/abs/pkg"``, a ``Path``) or a URL (``"file:///..."``, ``"https://host/kernels/org/op"``)
      needs ``trust_remote_code=True`` (else :class:`~webgpu_kernels.errors.TrustError`); such a
      kernel's package has ``needs_trust=True``.
    * ``expected_op_id=`` refuses a package whose manifest is another op.

    Embedded kernels are shared per op id, Hub kernels per (repository, resolved commit), so their
    plans and pipelines are too. See ``docs/hub.md``.
    """
    from . import hub

    location = locations.classify(name)
    shown = name if isinstance(name, str) else str(name)
    locations.check_trust(location, trust_remote_code=trust_remote_code, shown=shown)  # before anything is read
    if location.kind == "hub":
        kernel = hub.load(location.value, version=version, revision=revision, trust_remote_code=trust_remote_code,
                          endpoint=location.endpoint, url_like=location.url_like)  # fmt: skip
        return hub.check_op_id(kernel, expected_op_id, shown)
    if location.kind == "path":
        if version is not None or revision is not None:
            raise PackageError(f"{shown!r} is a local folder: version= and revision= apply to Hub repositories")
        kernel = hub.load_path(location.value, trust_remote_code=trust_remote_code, shown=shown)
        return hub.check_op_id(kernel, expected_op_id, shown)
    if location.kind != "embedded":  # an unsupported URL, trusted
        raise PackageError(f"cannot load {shown!r}: supported locations are an embedded op id, a Hub repository "
                           "'org/name' or https://<hub>/kernels/org/name, a local folder or a file:// URL")  # fmt: skip
    if revision is not None:
        raise PackageError(f"{shown!r} is an embedded kernel: revision= applies to Hub repositories "
                           f"('{locations.OFFICIAL_ORG}/{shown}')")  # fmt: skip
    kernel = _shared_embedded(shown)
    if version is not None:
        hub.check_version(version, shown)
        embedded_version = kernel.contract_version  # as a Hub revision's is read
        if version != embedded_version:
            raise PackageError(f"the embedded {shown} package is contract version {embedded_version}, not {version}; "
                               f"for another version load it from the Hub: get_kernel('{locations.OFFICIAL_ORG}/{shown}', "
                               f"version={version})")  # fmt: skip
    return hub.check_op_id(kernel, expected_op_id, shown)


def _shared_embedded(op_id: str) -> Kernel:
    """The process's one kernel of an embedded package, opened by the first thread that asks."""
    done: threading.Event | None = None
    # The registration is inside the try: a KeyboardInterrupt just after it, before the opening
    # began, had left it registered, and every later get_kernel of the op id waited for good.
    try:
        while done is None:
            with _lock:
                kernel = _embedded.get(op_id)
                if kernel is not None:
                    return kernel
                pending = _opening.get(op_id)
                if pending is None:
                    done = _opening[op_id] = threading.Event()  # `done` is bound first, then the entry
            if pending is not None:
                # Then look again: an opening that failed left nothing, and this thread tries it itself
                # (with an error of its own, not one exception object raised in several threads).
                pending.wait()
        kernel = Kernel(open_embedded(op_id))
        with _lock:
            _embedded[op_id] = kernel
        return kernel
    finally:
        if done is not None:
            with _lock:
                if _opening.get(op_id) is done:
                    del _opening[op_id]
            done.set()


def load_kernel(path: str | Path, *, verify_digests: bool = True) -> Kernel:
    """A kernel from a package folder on disk (``manifest.json`` and its templates).

    With a ``metadata.json``, every file is checked against its sha256 digest first.
    ``verify_digests=False`` opens the folder unchecked: for an author's script that regenerates
    the package's data files (test.json, .npy) while metadata.json is stale, and then refreshes it
    (``webgpu_kernels.digests.write_metadata``, as ``webgpu-kernels digest`` does)."""
    if isinstance(path, str) and path in embedded_ids() and not os.path.lexists(path):  # get_kernel's name for it
        raise PackageError(f"no such folder (an embedded kernel's id: get_kernel({path!r}) opens it)", path=path)
    return folder_kernel(open_folder(path, verify_digests=verify_digests))


def folder_kernel(package: KernelPackage) -> Kernel:
    """The kernel of a package folder. An unverified one's files are digested now (its tuning_key),
    as they are at load: its templates are read when a call first renders them, and kept, so one
    edited after that call and digested only when the kernel was pickled had let a worker run the
    edited template while its parent ran the kept one (reopen_kernel compares this digest)."""
    kernel = Kernel(package)
    if not package.is_verified:  # a verified package's bytes were all read, and kept, at open
        _ = kernel.tuning_key
    return kernel


def kernel_reference(package: KernelPackage) -> tuple[Any, ...]:
    """How another process opens ``package`` again (an embedded op id, a Hub repository at its
    commit, or a folder)."""
    from .hub import HubPackage

    if package.origin == "embedded":
        return ("embedded", package.root.name)  # embedded packages lie in folders named by op id
    if isinstance(package, HubPackage):
        return ("hub", package.repo_id, package.commit, package.endpoint, package.needs_trust)
    return ("folder", str(package.root), package.needs_trust, package.is_verified)


#: What Kernel.__init__ sets on a kernel (tests/test_api.py keeps this in step with it): with the
#: class's own names, the names an UnopenedKernel answers with its error.
KERNEL_INSTANCE_ATTRIBUTES = frozenset({"package", "manifest", "program", "renderer", "_plans", "_fast_plans",
                                        "_evaluated", "_lock"})  # fmt: skip


class UnopenedKernel(Kernel):
    """What unpickling gives for a kernel this process could not open again: the error, raised
    where the kernel is first used (called, or any of a Kernel's attributes read), not while
    unpickling. A name no Kernel has is an AttributeError, as on an opened kernel, so that probes
    (``hasattr``, ``getattr`` with a default, IPython's ``_repr_html_``) answer "absent" rather
    than raise; ``hasattr(kernel, "op_id")`` raises the error, which is not an AttributeError, so
    that no ``getattr(kernel, "op_id", None)`` takes a kernel that failed to open for one that
    has no such attribute. A worker
    of a process pool unpickles a task outside the task: raised there, the error had broken a
    ProcessPoolExecutor (BrokenProcessPool, the error only on the worker's stderr) and lost a
    multiprocessing.Pool task (its ``get()`` waited for good); raised in the task, it reaches the
    caller through the future or result, message and notes intact. Pickled, it is the kernel it
    stands for again (its reference and digest), opened where it is unpickled."""

    def __init__(self, reference: tuple[Any, ...], tuning_key: str, error: KernelError) -> None:
        # Kernel.__init__ is not run: every attribute of a kernel is missing, so reading one raises the error.
        self._unopened = (reference, tuning_key, error)

    def __getattr__(self, name: str) -> Any:
        # Reached for a name missing from the instance: a Kernel's own (Kernel's methods read them
        # too, so those raise the error), or one no Kernel has. A name of the class object alone
        # (__name__, __mro__: type's) is none of a kernel's: pydoc and inspect probe it.
        if name in KERNEL_INSTANCE_ATTRIBUTES or any(name in vars(cls) for cls in Kernel.__mro__):
            raise self._unopened[2].with_traceback(None)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}", name=name, obj=self)

    def __dir__(self) -> list[str]:
        # inspect.getmembers (IPython's completion, pydoc) reads every name listed here and catches
        # AttributeError only: a Kernel's properties, which would raise the error, are left out.
        return [name for name in super().__dir__()
                if not isinstance(inspect.getattr_static(self, name, None), (property, functools.cached_property))]

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise self._unopened[2].with_traceback(None)

    # help() and IPython show a Kernel's parameters, not (*args, **kwargs)
    __call__.__signature__ = inspect.signature(Kernel.__call__)  # type: ignore[attr-defined]

    def __repr__(self) -> str:
        reference, _, error = self._unopened
        return f"UnopenedKernel({reference[1]!r}, {type(error).__name__}: {error})"

    def __reduce__(self) -> Any:
        return reopen_kernel, self._unopened[:2]


def reopen_kernel(reference: tuple[Any, ...], tuning_key: str) -> Kernel:
    """A pickled kernel, opened again in this process from ``kernel_reference``'s tuple, as its
    pickling process had opened it (the trust it was given included). ``tuning_key`` digests its
    manifest and templates: a folder whose files changed in between is a PackageError. A kernel
    that does not open is an UnopenedKernel, which raises the error at first use."""
    memo = (reference, tuning_key)
    with _lock:
        kernel = _reopened.get(memo)
    if kernel is not None:
        return kernel
    where = f"{reference[1]} at commit {reference[2]}" if reference[0] == "hub" else reference[1]
    try:
        if reference[0] == "embedded":
            # Another release of this library may embed another version of the op: the digest tells.
            kernel = get_kernel(reference[1])
            if kernel.tuning_key != tuning_key:
                raise PackageError(f"this process's webgpu-kernels ({__version__}) embeds another {kernel.op_id} than "
                                   "the pickling process's: install the same release in both", path=where)  # fmt: skip
        elif reference[0] == "hub":
            from . import hub

            _, repo_id, commit, endpoint, trusted = reference
            kernel = hub.load(repo_id, revision=commit, trust_remote_code=trusted, endpoint=endpoint, url_like=trusted)
        else:
            _, root, trusted, verified = reference
            # verified when pickled: verified again, metadata.json required (gone, the folder had
            # opened unverified, its data files unchecked)
            kernel = folder_kernel(open_folder(root, verify_digests=verified, needs_trust=trusted,
                                               require_metadata=verified))  # fmt: skip
        if kernel.tuning_key != tuning_key:
            raise PackageError(f"the package's manifest or templates changed after the kernel ({kernel.op_id}) was "
                               "pickled: this process would run other code than the pickling one", path=where)  # fmt: skip
    except KernelError as exc:
        exc.add_note(f"opening again a kernel pickled in another process (a Kernel pickles as where it was "
                     f"loaded from: {where})")  # fmt: skip
        return UnopenedKernel(reference, tuning_key, exc)
    with _lock:
        return _reopened.setdefault(memo, kernel)


def test_case_inputs(kernel: Kernel, case: str | Mapping[str, Any]) -> dict[str, np.ndarray]:
    """The input arrays of the package's test.json case named ``case``, built exactly as
    ``webgpu-kernels test`` builds them (generated values, ``special`` entries, data files), for
    authors computing the expected outputs with their own reference. The case's ``attrs`` and
    ``types`` are in test.json as written. ``case`` may also be the case itself, as a dict in
    test.json's form whose ``expected`` may be missing: the inputs of a case not yet written."""
    if not isinstance(kernel, Kernel):
        raise InputError("kernel", "a Kernel (from load_kernel or get_kernel)", type_name(kernel))
    if isinstance(case, Mapping):
        return parse_draft_case(case).build_inputs(kernel.manifest, kernel.package.read_bytes)
    if not isinstance(case, str):
        raise InputError("case", "a case name, or a case as a dict", type_name(case))
    cases = read_test_file(kernel.package).cases
    found = next((c for c in cases if c.name == case), None)
    if found is None:
        raise InputError("case", f"a case name of its test.json, one of {[c.name for c in cases]}", repr(case))
    return found.build_inputs(kernel.manifest, kernel.package.read_bytes)


test_case_inputs.__test__ = False  # type: ignore[attr-defined]  # not a pytest test


def to_gpu(array: Any, *, adapter: str | None = None) -> GpuTensor:
    """Upload a NumPy array once, to pass as a GPU-resident input to many calls. A GpuTensor comes
    back as it is, or copied when ``adapter`` names another device."""
    device = get_device(adapter)
    if isinstance(array, GpuTensor):
        if array.released:
            raise InputError("array", "a live GpuTensor or an array", "a released GpuTensor", hint=RELEASED_ADVICE)
        if array.device.lost:
            raise InputError("array", "a live GpuTensor or an array", LOST_TENSOR)
        if array.device is device or adapter is None:
            return array
        array = array.numpy()
    array = as_array("array", array)
    # V: raw bytes (np.void) and structured records, no numbers; but ml_dtypes' bfloat16, a type
    # the engine binds (storage-only) and a call takes, is of kind V too
    if array.dtype.kind in "OUSVMm" and array.dtype.name != "bfloat16":
        raise DTypeError("array", "numbers (a numeric NumPy dtype)", f"dtype {array.dtype}")
    # Refused before the host copy: a broadcast view of 2**33 elements would allocate tens of GB.
    limit = device.limits["max-buffer-size"]
    if padded_size(array.nbytes) > limit:
        # Pieces sized for a call's binding, not just for a buffer: a piece of maxBufferSize bytes
        # uploads but no call takes it where bindings hold less.
        piece = min(limit, device.limits["max-storage-buffer-binding-size"])
        other = binding_adapter_advice(array.nbytes)  # named only where one present binds it whole
        whole = (f", or upload it whole with to_gpu(array, {other.python}) {other.words}" if other else
                 "; no adapter present binds it whole")  # fmt: skip
        raise DeviceLimitError("array", f"at most {limit} bytes (the device's maxBufferSize)", f"{array.nbytes} bytes",
                               hint=f"no buffer of this device holds it: split the array into at least "
                                    f"{-(-padded_size(array.nbytes) // piece)} pieces of at most {piece} bytes (what "
                                    f"a call binds) and upload each{whole}")  # fmt: skip
    return execution.to_gpu(device, execution.host_array(array))


#: The flags a lent buffer needs: STORAGE to be bound, COPY_SRC for numpy() and device copies.
_LENT_USAGE = {"STORAGE": wgpu.BufferUsage.STORAGE, "COPY_SRC": wgpu.BufferUsage.COPY_SRC}
_MAKE_ONE = ("make it with wk.get_device().gpu.create_buffer(size=..., usage=wgpu.BufferUsage.STORAGE | "
             "wgpu.BufferUsage.COPY_SRC | wgpu.BufferUsage.COPY_DST), COPY_DST to write it with queue.write_buffer")
_LOST_DEVICE_BUFFER = "one of a device that was lost (driver reset, destroyed): its data is gone"
#: Per device, the one-binding layout from_wgpu_buffer's bind-group probe uses.
_probe_layouts: weakref.WeakKeyDictionary[Device, Any] = weakref.WeakKeyDictionary()


def from_wgpu_buffer(buffer: Any, shape: Sequence[int], dtype: Any, *, adapter: str | None = None) -> GpuTensor:
    """A GpuTensor over the caller's own wgpu buffer, to pass to calls as an input with no host
    round trip. The data is the buffer's first bytes (C order, little-endian); the buffer must be
    of the library's device (``get_device(adapter).gpu``), with STORAGE and COPY_SRC usage, and at
    least ``bound_bytes`` long (nbytes rounded up to 16, at least 16). The tensor does not own it:
    ``release()`` and collection let go of it, never pool or destroy it. Work the caller submitted
    to the queue before a call runs before the call's kernel; see docs/python-api.md for the order
    of the caller's later work."""
    if not isinstance(buffer, wgpu.GPUBuffer):
        raise InputError("buffer", "a wgpu GPUBuffer of the library's device", describe_value(buffer), hint=_MAKE_ONE)
    device = get_device(adapter)
    if device.lost:  # as to_gpu refuses a tensor of a lost device: its data is gone
        raise InputError("buffer", "a GPUBuffer of a live device", _LOST_DEVICE_BUFFER, hint=f"make it again: {_MAKE_ONE}")
    # wgpu-py 0.32 keeps an object's device in the private _device; if it goes, wgpu refuses a
    # foreign buffer when the call binds it instead (a DeviceError, not this InputError).
    owner = getattr(buffer, "_device", None)
    if owner is not None and owner is not device.gpu:
        raise _foreign_buffer_error(owner, device)
    usage = int(buffer.usage)
    missing = [name for name, flag in _LENT_USAGE.items() if not usage & flag]
    if missing:
        present = [name for name in dir(wgpu.BufferUsage) if not name.startswith("_")
                   and usage & int(getattr(wgpu.BufferUsage, name))] or ["none"]  # fmt: skip
        raise InputError("buffer", "a GPUBuffer whose usage includes STORAGE and COPY_SRC (COPY_SRC: numpy() and "
                         "device copies read it)", f"usage {' | '.join(present)}, without {' and '.join(missing)}",
                         hint=_MAKE_ONE)  # fmt: skip
    if buffer.map_state != "unmapped":  # a mapped buffer cannot be bound
        raise InputError("buffer", "an unmapped GPUBuffer", f"one whose map_state is {buffer.map_state!r}",
                         hint="unmap() it first")  # fmt: skip
    dims, dtype_name = checked_shape_and_dtype(shape, dtype)
    try:
        numpy_type = numpy_dtype(dtype_name)
    except PackageError as exc:  # bfloat16 without ml_dtypes
        raise DTypeError("dtype", "a dtype NumPy can hold", dtype_name, hint=str(exc)) from None
    check_array_shape("shape", dims, numpy_type.itemsize)  # an empty tensor's huge dimensions ([2**61, 0])
    nbytes = int(np.prod(dims, dtype=np.int64)) * numpy_type.itemsize
    needed = padded_size(nbytes)  # kernels may read the binding's padding (whole vec4s at the tail)
    if buffer.size < needed:
        raise InputError("buffer", f"a buffer of at least {needed} bytes (the tensor's {nbytes} bytes rounded up to "
                         "a multiple of 16, at least 16: a call binds that much)", f"one of {buffer.size} bytes",
                         hint=f"create it with size={needed}: max(16, -(-nbytes // 16) * 16)")  # fmt: skip
    _refuse_destroyed(buffer, device)
    return GpuTensor(buffer, dims, numpy_type, device, nbytes, borrowed=True)


def _foreign_buffer_error(owner: Any, device: Device) -> InputError:
    """The error for a buffer of another wgpu device than ``device``'s: a lost one of this
    library's, another adapter's, or one the user opened."""
    expected = f"a GPUBuffer of the library's device on {device.adapter.label()}"
    theirs = opened_device(owner)
    if theirs is not None and theirs.lost:
        return InputError("buffer", expected, _LOST_DEVICE_BUFFER, hint=f"make it again: {_MAKE_ONE}")
    if theirs is not None:
        return InputError("buffer", expected, f"one of the library's device on {theirs.adapter.label()}",
                          hint=f"pass adapter={adapter_request(theirs.adapter)}, the buffer's device")  # fmt: skip
    return InputError("buffer", expected, "a buffer of another wgpu device (one this library did not open)",
                      hint=f"calls run on the library's device: {_MAKE_ONE}")  # fmt: skip


def _refuse_destroyed(buffer: Any, device: Device) -> None:
    """wgpu-py 0.32 tells no destroyed buffer from a live one, but refuses to bind it: a bind group
    over its first 16 bytes tells (at from_wgpu_buffer, not at a later call's submission, where
    the failure would drop the other calls recorded with it)."""
    with translate_gpu_errors("checking a wgpu buffer", device.memory), device.lock:
        layout = _probe_layouts.get(device)
        if layout is None:
            layout = _probe_layouts[device] = device.gpu.create_bind_group_layout(entries=[
                {"binding": 0, "visibility": wgpu.ShaderStage.COMPUTE, "buffer": {"type": "read-only-storage"}}])  # fmt: skip
        try:
            device.gpu.create_bind_group(layout=layout, entries=[
                {"binding": 0, "resource": {"buffer": buffer, "offset": 0, "size": 16}}])  # fmt: skip
        except wgpu.GPUValidationError as exc:
            if is_device_lost(exc):
                raise  # translate_gpu_errors: DeviceLostError, and the next call opens a new device
            raise InputError("buffer", "a live (not destroyed) GPUBuffer", "one wgpu refuses to bind: "
                             f"{' '.join(str(exc).split())}", hint=f"a destroyed buffer is gone for good: {_MAKE_ONE}") from None  # fmt: skip


def synchronize(*, adapter: str | None = None) -> None:
    """Submit all recorded GPU work now (reads do this on their own). It does not wait for the work
    to finish, as torch.cuda.synchronize() does: reading a result back does."""
    execution.flush(get_device(adapter))


def empty_cache(*, adapter: str | None = None) -> None:
    """Free the GPU buffers kept for reuse (the pool; live GpuTensors are untouched)."""
    device = get_device(adapter)
    with translate_gpu_errors("empty_cache", device.memory):
        device.memory.flush()
        device.memory.trim()


def list_kernels() -> list[str]:
    """The op ids of the embedded kernel packages."""
    return embedded_ids()
