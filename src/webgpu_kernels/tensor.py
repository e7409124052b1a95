"""GPU-resident tensors: the outputs of ``output="gpu"`` calls, which later calls accept as inputs."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np

from .buffers import padded_size, translate_gpu_errors
from .errors import TensorReleasedError

if TYPE_CHECKING:
    from .device import Device


_READ_ONLY = ("GpuTensor.{} is read-only: a GPU tensor's shape and dtype are fixed (read it back with numpy(), "
              "reshape there, and upload with to_gpu)")


class GpuTensor:
    """A tensor in a WebGPU buffer. ``numpy()`` reads it back; ``release()`` frees the buffer."""

    __slots__ = ("_buffer", "_shape", "_dtype", "device", "nbytes", "bound_bytes", "__weakref__")

    def __init__(self, buffer: Any, shape: tuple[int, ...], dtype: np.dtype, device: Device,
                 nbytes: int | None = None) -> None:  # fmt: skip
        self._buffer = buffer
        self._shape = tuple(shape)
        self._dtype = np.dtype(dtype)
        self.device = device
        # Fixed for the tensor's life, and read by every call that takes it as an input.
        self.nbytes = math.prod(self._shape) * self._dtype.itemsize if nbytes is None else nbytes
        self.bound_bytes = padded_size(self.nbytes)  # what a bind group binds of the buffer

    # Calls trust shape and dtype to describe the buffer: `t.shape = ...` would let a kernel read past
    # the data. Read-only properties over slots (a __setattr__ hook cost 0.4 us per call on the H200).
    @property
    def shape(self) -> tuple[int, ...]:
        return self._shape

    @shape.setter
    def shape(self, value: Any) -> None:
        raise AttributeError(_READ_ONLY.format("shape"))

    @property
    def dtype(self) -> np.dtype:
        return self._dtype

    @dtype.setter
    def dtype(self, value: Any) -> None:
        raise AttributeError(_READ_ONLY.format("dtype"))

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def released(self) -> bool:
        return self._buffer is None

    @property
    def buffer(self) -> Any:
        """The wgpu buffer (may be larger than ``nbytes``: sizes round up to 4 bytes)."""
        if self._buffer is None:
            raise TensorReleasedError("this GPU tensor was released")
        return self._buffer

    def numpy(self) -> np.ndarray:
        """Copy the tensor to a new NumPy array (submits any recorded work first)."""
        buffer = self.buffer
        out = np.empty(self.shape, dtype=self.dtype)
        if out.nbytes:
            with translate_gpu_errors("reading a GPU tensor", self.device.memory):
                self.device.memory.read_into(buffer, out)
        return out

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        if copy is False:  # NumPy 2's protocol: the data is on the GPU, so there is no copy-free view
            raise ValueError("a GpuTensor lives on the GPU: np.asarray(t, copy=False) cannot avoid a copy; "
                             "use t.numpy() or np.asarray(t)")  # fmt: skip
        array = self.numpy()
        return array if dtype is None else array.astype(dtype)

    def release(self) -> None:
        """Free the GPU buffer now (back to the device's bounded pool, for reuse by later calls);
        using the tensor afterwards raises TensorReleasedError."""
        buffer, self._buffer = self._buffer, None
        if buffer is not None:
            self.device.memory.release(buffer)

    def __del__(self) -> None:
        # Never release() here: a collection can start inside the pool's own code or in a thread
        # the lock holder waits for (buffers.DeviceMemory.release_collected).
        buffer, self._buffer = self._buffer, None
        if buffer is not None:
            try:
                self.device.memory.release_collected(buffer)
            except Exception:  # interpreter shutdown: the device may already be gone
                pass

    def __repr__(self) -> str:
        state = "released" if self.released else self.device.adapter.name
        return f"GpuTensor(shape={self.shape}, dtype={self.dtype.name}, {state})"
