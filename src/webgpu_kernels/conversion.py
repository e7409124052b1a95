"""Dtype conversion on the device (GpuTensor.astype): float32 <-> float16 without a host round trip.

Engine code, not a kernel package: two small shaders, built once per device. They need no
shader-f16: halves move as u32 words through ``pack2x16float`` / ``unpack2x16float``, two elements
per invocation. Each binding is bound to exactly the words the elements fill, so ``arrayLength``
gives the count and no uniform is needed. An odd count's last word holds one half of data and one
of padding: the binding's padding (bound_bytes rounds to 16), never data of the tensor.

Rounding is the GPU's: WGSL leaves ``pack2x16float`` of a value outside float16's finite range
indeterminate (lavapipe and NVIDIA give the infinity), and does not fix the rounding of in-range
values (NumPy rounds to nearest even). tests/test_conversion.py measures lavapipe against NumPy.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import wgpu

from .buffers import translate_gpu_errors
from .errors import DTypeError, describe_value
from .rendering import workgroup_grid

if TYPE_CHECKING:
    from .device import Device

FLOAT32, FLOAT16 = np.dtype(np.float32), np.dtype(np.float16)
WORKGROUP_SIZE = 64

# A workgroup's linear index spills into y and z past maxComputeWorkgroupsPerDimension (65,535 on
# most adapters): with 64 invocations of two elements, past 8,388,480 elements.
_INDEX = f"""
@compute @workgroup_size({WORKGROUP_SIZE})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lix: u32) {{
  let i = ((wid.z * nwg.y + wid.y) * nwg.x + wid.x) * {WORKGROUP_SIZE}u + lix;
"""

# src: the tensor's n floats; dst: ceil(n / 2) words. An odd n packs a zero into the last word's
# high half, which lies in dst's padding.
_TO_HALF = """
@group(0) @binding(0) var<storage, read> src: array<f32>;
@group(0) @binding(1) var<storage, read_write> dst: array<u32>;
""" + _INDEX + """
  if (i >= arrayLength(&dst)) { return; }
  let n = arrayLength(&src);
  let high = select(0.0, src[min(2u * i + 1u, n - 1u)], 2u * i + 1u < n);
  dst[i] = pack2x16float(vec2<f32>(src[2u * i], high));
}
"""

# src: ceil(n / 2) words; dst: the n floats. An odd n's last high half (padding) is never written.
_FROM_HALF = """
@group(0) @binding(0) var<storage, read> src: array<u32>;
@group(0) @binding(1) var<storage, read_write> dst: array<f32>;
""" + _INDEX + """
  if (i >= arrayLength(&src)) { return; }
  let pair = unpack2x16float(src[i]);
  dst[2u * i] = pair.x;
  if (2u * i + 1u < arrayLength(&dst)) { dst[2u * i + 1u] = pair.y; }
}
"""

_SHADERS = {(FLOAT32, FLOAT16): _TO_HALF, (FLOAT16, FLOAT32): _FROM_HALF}
#: The pairs astype converts on the device (a dtype to itself is a copy).
CONVERSIONS = tuple(_SHADERS)


_SHORT_NAMES = {"f16": "float16", "f32": "float32"}


def astype_target(dtype: Any, current: np.dtype) -> np.dtype:
    """The dtype GpuTensor.astype(``dtype``) makes from a tensor of ``current``: the other of
    float32 and float16, or ``current`` itself (a copy); anything else is a DTypeError."""
    if current in (FLOAT32, FLOAT16):
        expected = f"float16 or float32 (astype converts between the two on the GPU; to {current.name} it copies)"
    else:
        expected = f"{current.name}, the tensor's own dtype (a copy): astype converts only float32 and float16 on the GPU"
    hint = "for another conversion, read the tensor back with numpy(), convert with astype there, and upload with to_gpu"
    if isinstance(dtype, str):  # the manifests' and the CLI's names: NumPy reads "f16" as float128
        dtype = _SHORT_NAMES.get(dtype, dtype)
    try:
        wanted = None if dtype is None else np.dtype(dtype)  # np.dtype(None) is float64: never what was meant
    except (TypeError, ValueError):
        wanted = None
    if wanted is None:
        raise DTypeError("dtype", expected, describe_value(dtype), hint=hint)
    if wanted == current or (current, wanted) in _SHADERS:
        return wanted
    # '>f2' is float16 by name: a GpuTensor is little-endian, so it is refused, saying why.
    name = wanted.name if wanted.isnative or wanted.itemsize == 1 else f"{wanted.str} (a GpuTensor is little-endian)"
    raise DTypeError("dtype", expected, f"{name} for this {current.name} tensor", hint=hint)


def _pipeline(device: Device, pair: tuple[np.dtype, np.dtype]) -> tuple[Any, Any]:
    """(pipeline, bind group layout) for ``pair``, built on first use and kept on the device (as
    execution's pipeline cache is: a replacement device after a loss builds its own)."""

    def build() -> tuple[Any, Any]:
        gpu = device.gpu
        layout = gpu.create_bind_group_layout(entries=[
            {"binding": 0, "visibility": wgpu.ShaderStage.COMPUTE, "buffer": {"type": "read-only-storage"}},
            {"binding": 1, "visibility": wgpu.ShaderStage.COMPUTE, "buffer": {"type": "storage"}},
        ])  # fmt: skip
        label = f"astype {pair[0].name} to {pair[1].name}"
        pipeline = gpu.create_compute_pipeline(
            label=label, layout=gpu.create_pipeline_layout(bind_group_layouts=[layout]),
            compute={"module": gpu.create_shader_module(label=label, code=_SHADERS[pair]), "entry_point": "main"},
        )  # fmt: skip
        return pipeline, layout

    return device.internal_pipeline(pair, build)


def chunk_elements(device: Device) -> int:
    """Elements one dispatch converts: as many as a float32 binding may hold, a multiple of 128 so
    that every chunk's offset (4 or 2 bytes an element) is a multiple of 256, WebGPU's largest
    storage offset alignment."""
    return max(128, device.limits["max-storage-buffer-binding-size"] // 4 // 128 * 128)


def _words(elements: int) -> int:
    """Bytes of ``elements`` halves, in whole u32 words."""
    return -(-elements // 2) * 4


def record_conversion(device: Device, source: Any, target: Any, count: int,
                      pair: tuple[np.dtype, np.dtype]) -> tuple[int, int]:  # fmt: skip
    """Record the conversion of ``count`` (> 0) elements of ``source`` into ``target`` (``pair``:
    their dtypes) into the device's open compute pass, after the recorded work that writes the
    source and before any recorded later, as a call's dispatches are; returns the batches it went
    into (first, last), the target's ``_work``. Under the device's lock."""
    memory = device.memory
    with translate_gpu_errors("building the astype pipeline", memory):
        pipeline, layout = _pipeline(device, pair)
    step, limit = chunk_elements(device), device.limits["max-compute-workgroups-per-dimension"]
    sizes = {FLOAT32: lambda n: 4 * n, FLOAT16: _words}
    first_batch = last_batch = memory.batch
    for first in range(0, count, step):
        n = min(step, count - first)
        # Offsets: a float32 element is 4 bytes, a half 2, so a chunk starts at 4 or 2 * first.
        spans = [(buffer, first * dtype.itemsize, sizes[dtype](n)) for buffer, dtype in zip((source, target), pair)]
        if first == 0:  # the common case, one chunk: cached with the buffers (dropped when they are destroyed)
            group = memory.bind_group(layout, tuple((i, b, size) for i, (b, _, size) in enumerate(spans)))
        else:  # past a binding's limit only: the recorded pass keeps the group alive (wgpu counts references)
            group = device.gpu.create_bind_group(layout=layout, entries=[
                {"binding": i, "resource": {"buffer": b, "offset": offset, "size": size}}
                for i, (b, offset, size) in enumerate(spans)
            ])  # fmt: skip
        last_batch = memory.batch  # a record may submit the batch it joins (MAX_PENDING_DISPATCHES)
        memory.record(pipeline, group, workgroup_grid(-(-n // 2), WORKGROUP_SIZE, limit))
    return first_batch, last_batch
