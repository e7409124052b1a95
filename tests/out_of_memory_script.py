"""Run by tests/test_out_of_memory.py in a process of its own: the address-space limit (RLIMIT_AS)
that stands for the device's memory on lavapipe must not bind the test session. Prints one JSON
object: what each step saw."""

from __future__ import annotations

import json
import resource
import sys

import numpy as np

import webgpu_kernels as wk
from webgpu_kernels import buffers

MiB = 1 << 20
SIZE = 128 * MiB  # the tensors under test: lavapipe's largest storage binding


def address_space() -> int:
    """This process's VmSize in bytes: what RLIMIT_AS limits, lavapipe's buffers included."""
    with open("/proc/self/status", encoding="ascii") as status:
        return next(int(line.split()[1]) * 1024 for line in status if line.startswith("VmSize:"))


def limit(room: int) -> None:
    """Let the process grow by ``room`` bytes from here (the soft limit; the hard one stays unlimited)."""
    resource.setrlimit(resource.RLIMIT_AS, (address_space() + room, resource.RLIM_INFINITY))


def quick_gelu(x: np.ndarray) -> np.ndarray:
    x = x.astype(np.float64)
    return x / (1 + np.exp(-1.702 * x))


def max_error(got: np.ndarray, x: np.ndarray, chunk: int = 1 << 20) -> float:
    """The largest |got - quick_gelu(x)|, a chunk at a time: whole, the float64 temporaries were
    1.5 GB of fresh memory, slow on a VM whose host backs pages on first touch (the test's cold worker
    time went from 26.4 s to 12.3 s with this and the in-place input, sessions 60 and 61)."""
    return max(float(np.abs(got[i:i + chunk] - quick_gelu(x[i:i + chunk])).max()) for i in range(0, x.size, chunk))


def main() -> dict:
    device = wk.get_device()
    if device.adapter.adapter_type != "CPU":
        return {"skip": f"{device.adapter.label()} is no CPU adapter: RLIMIT_AS does not limit its memory"}
    memory = device.memory
    kernel = wk.get_kernel("com.microsoft.QuickGelu")
    kernel({"X": np.ones(64, np.float32)})  # LLVM compiles the shader before any limit
    host = np.arange(SIZE // 4, dtype=np.float32)  # -4 to 4 in place (linspace makes float64 temporaries)
    host *= np.float32(8 / host.size)
    host -= np.float32(4)
    x = wk.to_gpu(host)
    big_host = np.ones(SIZE // 4, np.float32)  # made before the limits: host memory counts in RLIMIT_AS
    small = np.linspace(-3, 3, 1000, dtype=np.float32)
    wk.synchronize()
    np.asarray(kernel({"X": small})["Y"])  # a readback waits for the GPU: the upload's staging copy is freed
    wk.empty_cache()
    seen: dict = {}

    # (a) The pool holds 448 MiB of free buffers (of another size class than the output's) and 96 MiB
    # are left, so the call's 128 MiB output fits only once the pool is trimmed. The limit is set
    # after the pool is filled: memory the process takes meanwhile (a thread's malloc arena reserves
    # 64 MiB) then only makes the first try fail more surely.
    filler = [memory.acquire(112 * MiB) for _ in range(4)]
    for buffer in filler:
        memory.release(buffer)
    limit(96 * MiB)
    seen["a_pooled_before"] = memory.pooled_bytes
    y = kernel({"X": x}, output="gpu")["Y"]
    seen["a_pooled_after"] = memory.pooled_bytes
    limit(2048 * MiB)  # room for the readback and the float64 reference
    seen["a_max_error"] = max_error(y.numpy(), host)

    # (b) 64 MiB left: a 128 MiB buffer never fits. The pool is emptied first (trimming it would give
    # its room back), and x and y stay live (a free storage buffer of 128 MiB would serve the calls).
    wk.empty_cache()
    leased = len(memory._leased)
    limit(64 * MiB)
    for step, call in (("call", lambda: kernel({"X": x}, output="gpu")),
                       ("staged", lambda: kernel({"X": big_host})),
                       ("upload", lambda: wk.to_gpu(big_host))):  # fmt: skip
        try:
            call()
            seen[f"b_{step}"] = "no error"
        except wk.DeviceError as exc:
            seen[f"b_{step}"] = {"type": type(exc).__name__, "device_error": isinstance(exc, wk.DeviceError),
                                 "message": str(exc), "nbytes": getattr(exc, "nbytes", None),
                                 "leased_change": len(memory._leased) - leased}  # fmt: skip
    seen["b_pooled_after"] = memory.pooled_bytes
    out = kernel({"X": small})["Y"]  # the device still works, under the same limit
    seen["b_small_max_error"] = float(np.abs(out - quick_gelu(small)).max())
    limit(2048 * MiB)
    seen["b_input_unchanged"] = bool(np.array_equal(x.numpy(), host))
    seen["b_big_host_unchanged"] = bool((big_host == 1).all())

    # (c) An upload into a pooled buffer whose staging copy does not fit: wgpu-native loses the device
    # (a failed allocation outside a buffer's creation is fatal to wgpu-core). Said as a lost device,
    # so that the next call opens a new one instead of failing on the dead one.
    # One write_buffer: split across copy threads, another piece's error ("Parent device is lost")
    # could be the one reported.
    buffers.COPY_THREADS = 1
    y.release()  # the 128 MiB storage buffer the upload gets from the pool
    limit(64 * MiB)
    try:
        wk.to_gpu(big_host)
        seen["c_upload"] = "no error"
    except wk.DeviceError as exc:
        seen["c_upload"] = {"type": type(exc).__name__, "message": str(exc)}
    limit(2048 * MiB)  # the new device compiles its shader again
    out = kernel({"X": small})["Y"]
    seen["c_small_max_error"] = float(np.abs(out - quick_gelu(small)).max())
    seen["c_new_device"] = wk.get_device() is not device
    return seen


if __name__ == "__main__":
    json.dump(main(), sys.stdout)
