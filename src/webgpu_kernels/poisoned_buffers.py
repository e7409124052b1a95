"""The buffers of a test run (``webgpu-kernels test``), filled before the call so that what a
kernel leaves unwritten or reads past its data shows: the pooled buffers its call will take, and
its inputs uploaded with their binding padding poisoned."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from .buffers import translate_gpu_errors
from .case_data import numpy_dtype
from .execution import host_array, to_gpu
from .program import OutputSpec
from .tensor import GpuTensor

if TYPE_CHECKING:
    from .device import Device


#: What each input's binding padding (its bytes up to ``buffers.padded_size``) holds in a test run: NaN in floats.
PADDING_POISON = 0xFF


def padding_poisoned_inputs(device: Device, arrays: Mapping[str, np.ndarray]) -> dict[str, GpuTensor]:
    """``arrays`` as GpuTensors of ``device``, their binding padding :data:`PADDING_POISON`: a call's own
    upload zero-pads a byte count not a multiple of 4 (3 float16 read as u32 words end in a zero
    half), so a kernel that summed that half unmasked had passed `test`."""
    made: dict[str, GpuTensor] = {}
    try:
        for role, array in arrays.items():
            made[role] = to_gpu(device, host_array(np.asarray(array)), padding=PADDING_POISON)
    except BaseException:
        for tensor in made.values():
            tensor.release()
        raise
    return made


def fill_pooled_buffers(device: Device, inputs: Mapping[str, Any], outputs: Sequence[OutputSpec], byte: int, *,
                        scratch: Sequence[int] = ()) -> None:  # fmt: skip
    """Put one buffer per tensor of a call (its ``inputs``, the ``outputs`` it will make, the bytes
    of each of its variant's ``scratch`` buffers) in
    ``device``'s pool, each filled whole with ``byte``: the call's requests of those sizes get
    them, so an output element the kernel never writes holds the fill, not what an earlier call
    left there. All are held at once so that they are distinct, and filled whole since a buffer
    serves any tensor of its size class."""
    sizes = [np.asarray(a).nbytes for a in inputs.values()]
    sizes += [math.prod(o.shape) * numpy_dtype(o.dtype).itemsize for o in outputs]
    sizes += scratch
    memory = device.memory
    with device.lock, translate_gpu_errors("filling the buffers of a test run", memory):
        filled = []
        try:
            for n in sizes:
                if n:
                    filled.append(memory.acquire(n))
                    memory.write(filled[-1], np.full(filled[-1].size, byte, dtype=np.uint8))
        finally:
            for buffer in filled:
                memory.release(buffer)
