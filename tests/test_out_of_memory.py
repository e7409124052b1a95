"""Out of GPU memory: the pool is trimmed and the allocation retried, and only then a typed error.

On lavapipe the device's memory is the process's, so an address-space limit (RLIMIT_AS) set after
the first call (LLVM's JIT has what it needs by then) stands for a full GPU. The limit binds a whole
process, so the work runs in tests/out_of_memory_script.py, once for this module.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import wgpu

import webgpu_kernels as wk
from webgpu_kernels.buffers import is_device_lost, is_out_of_memory, translate_gpu_errors

SCRIPT = Path(__file__).resolve().parent / "out_of_memory_script.py"
MiB = 1 << 20


@pytest.fixture(scope="module")
def seen(device) -> dict:
    if not sys.platform.startswith("linux"):
        pytest.skip("the script reads its address space from /proc/self/status (Linux)")
    if device.adapter.adapter_type != "CPU":
        pytest.skip(f"{device.adapter.label()} is no CPU adapter: RLIMIT_AS does not limit its memory")
    # A pool budget that keeps every released buffer: what is trimmed is then the retry's doing.
    env = {**os.environ, "WEBGPU_KERNELS_POOL_MB": "4096"}
    done = subprocess.run([sys.executable, str(SCRIPT)], capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout)
    if "skip" in result:
        pytest.skip(result["skip"])
    return result


def test_a_full_pool_is_trimmed_and_the_allocation_retried(seen) -> None:
    """448 MiB of free pooled buffers, 96 MiB of room: the call's 128 MiB output fits only once the
    pool's buffers are destroyed. It succeeds, with the right values, and the pool was emptied."""
    assert seen["a_pooled_before"] == 4 * 112 * MiB
    assert seen["a_pooled_after"] == 0
    assert seen["a_max_error"] < 1e-5


@pytest.mark.parametrize("step", ["call", "staged", "upload"])
def test_an_allocation_that_never_fits_raises_out_of_memory(seen, step) -> None:
    """A call's output, a call's NumPy input and to_gpu, each 128 MiB with 64 MiB of room: an
    OutOfMemoryError (a DeviceError too) naming the size, nothing left leased."""
    error = seen[f"b_{step}"]
    assert error != "no error"
    assert error["type"] == "OutOfMemoryError" and error["device_error"], error
    assert "out of GPU memory for a buffer of 128 MiB (134217728 bytes)" in error["message"]
    assert "empty_cache()" in error["message"] and "live buffers" in error["message"]
    assert error["nbytes"] == 128 * MiB
    assert error["leased_change"] == 0


def test_the_device_stays_usable_and_inputs_unchanged_after_out_of_memory(seen) -> None:
    assert seen["b_small_max_error"] < 1e-5  # against NumPy float64, under the same limit
    assert seen["b_input_unchanged"] and seen["b_big_host_unchanged"]
    assert seen["b_pooled_after"] == 0


def test_out_of_memory_is_a_device_error_that_keeps_its_facts() -> None:
    error = wk.OutOfMemoryError("out of GPU memory", nbytes=16, live_bytes=32, pooled_bytes=0)
    assert isinstance(error, wk.DeviceError)
    assert (error.nbytes, error.live_bytes, error.pooled_bytes) == (16, 32, 0)


def test_an_upload_whose_staging_copy_does_not_fit_is_a_lost_device_and_the_next_call_opens_one(seen) -> None:
    """wgpu-native loses the device when write_buffer's staging copy cannot be allocated: said so (a
    DeviceLostError naming the out-of-memory), and the next call runs on a new device."""
    error = seen["c_upload"]
    assert error != "no error" and error["type"] == "DeviceLostError", error
    assert "when it ran out of memory" in error["message"] and "Not enough memory left" in error["message"]
    assert seen["c_new_device"] and seen["c_small_max_error"] < 1e-5


def test_out_of_memory_is_recognised_by_type_or_by_wgpu_natives_text() -> None:
    assert is_out_of_memory(wgpu.GPUOutOfMemoryError("any text"))
    assert is_out_of_memory(wgpu.GPUValidationError("Validation Error\n\nCaused by:\n  In wgpuDeviceCreateBuffer\n"
                                                    "    Not enough memory left."))  # fmt: skip
    assert not is_out_of_memory(wgpu.GPUValidationError("Validation Error: Buffer size 16 is too small"))
    # a shader's line quoted by naga is no allocation failure, whatever it names
    assert not is_out_of_memory(wgpu.GPUValidationError("error: bad\n  15 │ let out_of_memory = 1; // Out of memory"))
    assert not is_out_of_memory(RuntimeError("Not enough memory left"))  # not wgpu's


#: wgpu-core quotes user text in its errors' own lines, not only in the WGSL lines naga echoes: a
#: label (a manifest's pass name) as "label = 'X'", "Shader 'X' parsing error", "ComputePipeline
#: with 'X' label", and an identifier as `X`.
USER_TEXTS = ["OutOfMemory", "out of memory", "ERROR_OUT_OF_DEVICE_MEMORY", "DeviceLost", "Device lost"]
WGSL = ("@group(0) @binding(0) var<storage, read_write> x: array<f32>;\n"
        "@compute @workgroup_size(64) fn main(@builtin(global_invocation_id) i: vec3<u32>) { x[i.x] = 1.0; }")  # fmt: skip


@pytest.mark.parametrize("label", USER_TEXTS)
def test_a_refused_dispatch_whose_pipeline_label_names_out_of_memory_or_loss_is_neither(device, label) -> None:
    """A pipeline named like an out-of-memory or a lost device, refused at finish (no bind group): the
    work's refusal (a DeviceError), not an OutOfMemoryError or a DeviceLostError that drops a healthy
    device with every tensor on it."""
    gpu = device.gpu
    module = gpu.create_shader_module(label=label, code=WGSL)
    pipeline = gpu.create_compute_pipeline(label=label, layout="auto", compute={"module": module, "entry_point": "main"})
    encoder = gpu.create_command_encoder()
    compute = encoder.begin_compute_pass()
    compute.set_pipeline(pipeline)
    compute.dispatch_workgroups(1)
    compute.end()
    with pytest.raises(wk.DeviceError) as caught:
        with translate_gpu_errors("a test", device.memory):
            gpu.queue.submit([encoder.finish()])
    assert type(caught.value) is wk.DeviceError and "refused the work" in str(caught.value), str(caught.value)
    assert wk.get_device() is device


@pytest.mark.parametrize("label", USER_TEXTS)
def test_a_shader_error_quoting_a_label_or_identifier_is_no_allocation_failure_or_loss(device, label) -> None:
    identifier = "".join(c for c in label if c.isalnum() or c == "_")
    try:
        device.gpu.create_shader_module(label=label, code=f"@compute @workgroup_size(1) fn main() {{ let a = {identifier}; }}")
    except wgpu.GPUError as exc:
        assert not is_out_of_memory(exc) and not is_device_lost(exc), str(exc)
    else:
        pytest.fail("the shader compiled")


class _FullGpu:
    """The device, out of memory for buffers larger than ``room`` (wgpu's GPUOutOfMemoryError)."""

    def __init__(self, gpu: object, room: int) -> None:
        self.gpu, self.room = gpu, room

    def __getattr__(self, name: str) -> object:
        return getattr(self.gpu, name)

    def create_buffer(self, *, size: int, **kwargs: object) -> object:
        if size > self.room:
            raise wgpu.GPUOutOfMemoryError("Out of memory (a test)")
        return self.gpu.create_buffer(size=size, **kwargs)  # type: ignore[attr-defined]


def test_out_of_memory_names_the_data_a_size_class_buffer_was_for(device, monkeypatch) -> None:
    """A pooled buffer is its size class, up to 25% over the tensor: the message said only "a buffer
    of 112 MiB" for a 100 MiB tensor, a size the user never asked for."""
    device.memory.trim()  # a 112 MiB buffer an earlier test pooled would be handed out without a new one
    monkeypatch.setattr(device.memory, "gpu", _FullGpu(device.gpu, 1 * MiB))
    with pytest.raises(wk.OutOfMemoryError) as caught:
        device.memory.acquire(100 * MiB + 16)
    assert caught.value.nbytes == 112 * MiB  # what wgpu was asked for
    assert "a buffer of 112 MiB (117440512 bytes), the pool's size class for 100 MiB (104857616 bytes) of data" in str(caught.value)
