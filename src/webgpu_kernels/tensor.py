"""GPU-resident tensors: the outputs of ``output="gpu"`` calls, which later calls accept as inputs."""

from __future__ import annotations

import math
import operator
import sys
import threading
from collections.abc import Callable, Sequence
from operator import attrgetter
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from .buffers import FORKED, padded_size, translate_gpu_errors
from .contract import MAX_RANK, check_array_shape, shape_text
from .conversion import astype_target, record_conversion
from .errors import (
    DeviceError,
    DeviceLimitError,
    DeviceLostError,
    NotPicklableError,
    RankError,
    ShapeError,
    TensorReleasedError,
    UncomputedTensorError,
    describe_value,
)

if TYPE_CHECKING:
    from .device import Device


_READ_ONLY = ("GpuTensor.{} is read-only: calls trust a GPU tensor's shape, dtype, sizes and device to describe "
              "its buffer (t.reshape(...) gives a view of another shape over the same buffer; t.astype(...) a copy "
              "converted between float32 and float16)")


EXITING = "(the interpreter is exiting, and it finalizes objects in any order)"
# to_gpu(t) is t on t's own device: a user who took it for a copy released "the other" tensor.
#: What to do about a released tensor, for every error that meets one (its own, a call's, to_gpu's).
RELEASED_ADVICE = ("release() gave its buffer back to the pool (also when called on the same tensor under another "
                   "name: to_gpu(t) on t's device returns t itself; use copy.copy(t) for a separate tensor); release "
                   "a tensor after its last use")
RELEASED_TENSOR = f"this GPU tensor was released: {RELEASED_ADVICE}"
LOST_TENSOR = "a GpuTensor whose device was lost (driver reset, destroyed): its data is gone; make it again"
UNCOMPUTED_TENSOR = ("a GpuTensor whose computing work never reached the GPU (the submission that carried it "
                     "failed or was cut short by Ctrl-C): its data was never computed; make it again")

# Tensors sharing one buffer (reshape's views) share one list, made by the first view: _LAST first,
# then one _SHARED per holder beyond the first. Each holder's release or finalizer pops once (atomic
# under the GIL, no lock: a finalizer may not wait for one) and only the one popping _LAST lets go
# of the buffer, so it is pooled once, after the last holder, in whatever order they go.
_LAST, _SHARED = object(), object()
# Only makes the list (two threads viewing one unshared tensor at once had made two): never taken
# by release() nor __del__. Reentrant: a collection inside it may run a finalizer that reshapes.
_SHARING = threading.RLock()


def _reshaped(asked: tuple[Any, ...], old: tuple[int, ...], itemsize: int) -> tuple[int, ...]:
    """``asked`` (reshape's arguments: ints, or one sequence of them; one -1 inferred, as NumPy
    does) checked against a tensor of shape ``old``: the same element count, in a shape NumPy can
    make for elements of ``itemsize`` bytes."""
    given: Any = asked
    first = asked[0] if len(asked) == 1 else None
    if (isinstance(first, Sequence) and not isinstance(first, (str, bytes))) or (
            isinstance(first, np.ndarray) and first.ndim == 1):  # fmt: skip
        given = first  # reshape((2, 3)) as reshape(2, 3), as NumPy's
    if len(given) > MAX_RANK:  # before reading it: range(10**12) is a sequence too
        raise RankError("shape", f"rank at most {MAX_RANK}", f"rank {len(given)}")
    dims: list[int] = []
    for i, d in enumerate(given):
        try:
            if isinstance(d, (bool, np.bool_)):  # an int to Python, but never meant as a dimension
                raise TypeError
            dims.append(operator.index(d))  # ints and NumPy integers; never a float
        except TypeError:
            raise ShapeError("shape", "integer dimensions (one may be -1, inferred)",
                             f"{describe_value(d)} as dimension {i} of {describe_value(given)}") from None  # fmt: skip
    size = math.prod(old)
    expected = f"a shape of {size} elements, as the tensor's shape {shape_text(old)} (one dimension may be -1, inferred)"
    if dims.count(-1) > 1:
        raise ShapeError("shape", expected, f"shape {shape_text(dims)}, with {dims.count(-1)} dimensions of -1")
    if any(d < -1 for d in dims):
        raise ShapeError("shape", expected, f"shape {shape_text(dims)}, with a negative dimension other than -1")
    if -1 in dims:
        known = math.prod(d for d in dims if d != -1)
        if known == 0 or size % known:  # NumPy refuses both: no size, or a size that does not divide
            raise ShapeError("shape", expected, f"shape {shape_text(dims)}, which no size for its -1 fits")
        dims[dims.index(-1)] = size // known
    elif math.prod(dims) != size:
        raise ShapeError("shape", expected, f"shape {shape_text(dims)} of {math.prod(dims)} elements")
    check_array_shape("shape", dims, itemsize)  # an empty tensor's huge dimensions ([2**62, 0])
    return tuple(dims)


def _read_only(slot: str, doc: str) -> property:
    """A property over ``slot`` that refuses assignment, naming the attribute."""
    name = slot.lstrip("_")

    def refuse(self: GpuTensor, value: Any) -> None:
        raise AttributeError(_READ_ONLY.format(name))

    return property(attrgetter(slot), refuse, doc=doc)  # attrgetter: no Python frame per read


class GpuTensor:
    """A tensor in a WebGPU buffer. ``numpy()`` reads it back; ``release()`` frees the buffer;
    ``reshape()`` gives a view over the same buffer; ``copy.copy`` and ``copy.deepcopy`` make a
    device-side copy in a buffer of its own."""

    __slots__ = ("_buffer", "_shape", "_dtype", "_device", "_nbytes", "_bound_bytes", "_work", "_borrowed",
                 "_shares", "__weakref__")  # fmt: skip

    def __init__(self, buffer: Any, shape: tuple[int, ...], dtype: np.dtype, device: Device,
                 nbytes: int | None = None, *, borrowed: bool = False) -> None:  # fmt: skip
        # A borrowed buffer is the user's (from_wgpu_buffer): never pooled, never destroyed here. Set
        # before the buffer, so that a finalizer never finds a buffer without knowing whose it is;
        # read only by release() and __del__, not by a call.
        self._borrowed = borrowed
        self._shares: list[object] | None = None  # set by reshape: tensors sharing the buffer (_LAST above)
        self._buffer = buffer
        self._work: tuple[int, int] | None = None  # the batches recording its computation (run_plan sets it)
        self._shape = tuple(shape)
        self._dtype = np.dtype(dtype)
        self._device = device
        self._nbytes = math.prod(self._shape) * self._dtype.itemsize if nbytes is None else nbytes
        self._bound_bytes = padded_size(self._nbytes)

    # Calls trust these to describe the buffer: `t.shape = ...` or `t.bound_bytes = 16` would let a
    # kernel read past the data or bind less of it. Read-only properties over slots (a __setattr__
    # hook cost 0.4 us per call on the H200).
    shape = _read_only("_shape", "The tensor's shape (a tuple of ints).")
    dtype = _read_only("_dtype", "The tensor's NumPy dtype.")
    device = _read_only("_device", "The Device whose buffer holds the tensor.")
    nbytes = _read_only("_nbytes", "Bytes of data (the buffer may be larger).")
    bound_bytes = _read_only("_bound_bytes", "Bytes a bind group binds of the buffer (nbytes padded to 16).")

    @property
    def uncomputed(self) -> bool:
        """Whether the work that computes this tensor never reached the GPU (its submission failed
        or was cut short by Ctrl-C): reading or using it raises instead of giving stale data."""
        return self._device.memory.lost(self._work)

    @property
    def size(self) -> int:
        """The number of elements (the product of ``shape``; 1 for a 0-d tensor), as NumPy's ``size``."""
        return math.prod(self.shape)

    @property
    def ndim(self) -> int:
        """The number of dimensions (``len(shape)``), as NumPy's ``ndim``."""
        return len(self.shape)

    @property
    def released(self) -> bool:
        """Whether ``release()`` was called on this tensor: using it then raises TensorReleasedError."""
        return self._buffer is None

    @property
    def buffer(self) -> Any:
        """The wgpu buffer (may be larger than ``nbytes``: pooled buffers come in size classes,
        at least ``bound_bytes``). Destroying it by hand is not supported."""
        if self._buffer is None:
            # At exit, Python finalizes module globals in any order: a finalizer reading a tensor
            # may come after the tensor's own, which the user never called release() for.
            if sys.is_finalizing():
                raise TensorReleasedError(f"this GPU tensor was released {EXITING}")
            raise TensorReleasedError(RELEASED_TENSOR)
        return self._buffer

    def numpy(self) -> np.ndarray:
        """Copy the tensor to a new NumPy array (submits any recorded work first)."""
        self._check_usable("read")
        out = np.empty(self.shape, dtype=self.dtype)
        memory = self.device.memory
        with memory.lock:  # checked under the lock: another thread's failing flush may lose it until then
            # Taken again under the lock: another thread's release() before it had pooled the buffer
            # for the next call, and this read returned that call's data.
            buffer = self._computed_buffer("read")
            if out.nbytes:
                with translate_gpu_errors("reading a GPU tensor", memory):
                    memory.read_into(buffer, out)
        return out

    def _check_usable(self, verb: str) -> None:
        """What numpy(), copies and astype refuse before taking the lock: a released tensor (said
        first), a forked process, a lost device. ``verb`` completes "cannot ... a GpuTensor"."""
        self.buffer  # noqa: B018 - a released tensor says so first (its buffer is taken under the lock after)
        if self._device.memory.forked:  # a tensor the parent made (calls refuse in get_device instead)
            raise DeviceError(FORKED)
        if self._device.lost:  # wgpu would say "the next call opens a new one", which never helps this tensor
            raise DeviceLostError(f"cannot {verb} {LOST_TENSOR}")

    def _computed_buffer(self, verb: str) -> Any:
        """The buffer, under the device's lock, of a tensor whose computing work reached the GPU."""
        if self.uncomputed:
            raise UncomputedTensorError(f"cannot {verb} {UNCOMPUTED_TENSOR}")
        return self.buffer

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        if copy is False:  # NumPy 2's protocol: the data is on the GPU, so there is no copy-free view
            raise ValueError("a GpuTensor lives on the GPU: np.asarray(t, copy=False) cannot avoid a copy; "
                             "use t.numpy() or np.asarray(t)")  # fmt: skip
        array = self.numpy()
        return array if dtype is None else array.astype(dtype)

    def reshape(self, *shape: int | Sequence[int]) -> GpuTensor:
        """A view of this tensor in another shape of as many elements (``t.reshape(2, -1)`` or
        ``t.reshape((2, -1))``, one -1 inferred as NumPy does): a new GpuTensor over the same
        buffer, with no copy and no GPU work. The buffer goes back to the pool when the last
        tensor over it is released or collected; releasing one leaves the others usable."""
        buffer = self.buffer  # a released tensor says so first
        dims = _reshaped(shape, self._shape, self._dtype.itemsize)
        view = GpuTensor.__new__(GpuTensor)
        view._borrowed = self._borrowed  # a view of the user's buffer is never pooled either
        view._shape, view._dtype, view._device = dims, self._dtype, self._device
        view._nbytes, view._bound_bytes, view._work = self._nbytes, self._bound_bytes, self._work
        with _SHARING:
            shares = self._shares
            if shares is None:
                shares = self._shares = [_LAST]
            view._shares = shares
            # The share first, then the buffer: a view with the buffer always has its share to pop
            # (cut short between the two, the buffer stays leased: never pooled while in use).
            shares.append(_SHARED)
            view._buffer = buffer
        if self._buffer is None:
            # Another thread released this tensor after the read above: its share may have gone
            # (the buffer pooled, for the next call's data). The view's own release pops the share
            # it took, pooling the buffer only where no other holder is left.
            view.release()
            self.buffer  # noqa: B018 - raises TensorReleasedError
        return view

    def release(self) -> None:
        """Free the GPU buffer now (back to the device's bounded pool, for reuse by later calls);
        using the tensor afterwards raises TensorReleasedError. Where other tensors share the
        buffer (``reshape``), it goes back with the last of them. A tensor over the user's own
        buffer (``from_wgpu_buffer``) only lets go of it: the buffer stays theirs, untouched."""
        buffer, self._buffer = self._buffer, None
        if buffer is not None:
            if self._shares is not None and self._shares.pop() is not _LAST:
                return  # a view over the same buffer still uses it
            if self._borrowed:  # pooled, it would be handed to later calls while the user still uses it
                self._device.memory.forget_bind_groups(buffer)
            else:
                self._device.memory.release(buffer)

    def __copy__(self) -> GpuTensor:
        """A new tensor with this one's data in a buffer of its own, copied on the device, recorded
        into the open batch as a call is. (A copy sharing the buffer would give it back to the pool
        while this tensor still used it.)"""
        self._check_usable("copy")
        size = self._bound_bytes
        return self._derived("copying", "copy", self._dtype, self._nbytes,
                             lambda memory, source, target: memory.record_copy(source, target, size))

    def astype(self, dtype: npt.DTypeLike) -> GpuTensor:
        """This tensor converted on the device between float32 and float16 (either way): a new
        tensor of the same shape in a buffer of its own, with no host round trip. To its own dtype,
        a device-side copy (as ``copy.copy``); any other dtype is a DTypeError. Rounding to float16
        is the GPU's (NumPy's is to nearest even), and values past float16's range give what the
        GPU's ``pack2x16float`` gives (the infinity on lavapipe and NVIDIA): docs/python-api.md."""
        wanted = astype_target(dtype, self._dtype)
        if wanted == self._dtype:
            return self.__copy__()
        self._check_usable("convert")
        device, count = self._device, self.size
        limit = device.limits["max-buffer-size"]
        if padded_size(count * wanted.itemsize) > limit:  # float16 to float32 doubles the bytes
            # as to_gpu refuses such an array (WebGPU's own refusal had been a DeviceError)
            raise DeviceLimitError("dtype", f"a result of at most {limit} bytes (the device's maxBufferSize)",
                                   f"{wanted.name}, {count * wanted.itemsize} bytes for this tensor's {count} "
                                   "elements", hint="convert the tensor in pieces no larger than that")  # fmt: skip
        return self._derived("converting", "convert", wanted, count * wanted.itemsize,
                             lambda memory, source, target: record_conversion(device, source, target, count,
                                                                              (self._dtype, wanted)))  # fmt: skip

    def _derived(self, doing: str, verb: str, dtype: np.dtype, nbytes: int,
                 record: Callable[[Any, Any, Any], tuple[int, int]]) -> GpuTensor:  # fmt: skip
        """A new tensor of this shape and ``dtype`` (``nbytes``) in a buffer of its own, filled from
        this one by ``record(memory, source, target)``, which records into the open batch, as a
        call's dispatches are: after the work that writes the source, before later reads. It returns
        the batches it went into (first, last)."""
        memory = self._device.memory
        with translate_gpu_errors(f"{doing} a GPU tensor", memory), self._device.lock:
            source = self._computed_buffer(verb)  # under the lock, as numpy() takes it
            target = memory.acquire(nbytes)
            work = None
            try:
                if nbytes:
                    work = record(memory, source, target)
                    self._submit_if_lent()
            except BaseException:
                memory.release(target)  # anything recorded into it runs before later work that reuses it
                raise
            result = GpuTensor(target, self._shape, dtype, self._device, nbytes)
            result._work = work  # a lost batch makes it refuse to be read, as a call's output
        return result

    def _submit_if_lent(self) -> None:
        """Submit a copy or conversion just recorded from the user's own buffer (from_wgpu_buffer):
        the user may write it through the queue at any time, and a copy left recorded until the
        next submission held data written after it was made. Under the lock."""
        if self._borrowed:
            self._device.memory.flush()

    def __deepcopy__(self, memo: dict[int, Any]) -> GpuTensor:
        return self.__copy__()

    def __reduce__(self) -> Any:
        # Typed, so that a Pool's caller catching KernelError catches it; still a TypeError, as pickle's own.
        raise NotPicklableError("a GpuTensor cannot be pickled: its data lives on one process's GPU device; "
                                "pickle t.numpy() and upload it again with to_gpu()")  # fmt: skip

    def __del__(self) -> None:
        # Never release() here: a collection can start inside the pool's own code or in a thread
        # the lock holder waits for (buffers.DeviceMemory.release_collected).
        buffer = getattr(self, "_buffer", None)  # None too for an instance __init__ never filled
        self._buffer = None
        if buffer is not None:
            if self._shares is not None and self._shares.pop() is not _LAST:
                return  # a view over the same buffer still uses it
            if self._borrowed:  # the user's own buffer is theirs to free
                return
            try:
                self._device.memory.release_collected(buffer)
            except Exception:  # interpreter shutdown: the device may already be gone
                pass

    def __repr__(self) -> str:
        state = "released" if self.released else "device lost" if self._device.lost else self._device.adapter.label()
        return f"GpuTensor(shape={self.shape}, dtype={self.dtype.name}, {state})"
