"""Adapter choice and the per-process devices (webgpu_kernels.device)."""

from __future__ import annotations

import copy
import gc
import signal
import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest
import wgpu

import webgpu_kernels as wk
from webgpu_kernels import device as device_module
from webgpu_kernels import errors

from forking import forking, in_forked_child


def test_a_request_string_chooses_its_adapter_once(device, monkeypatch):
    """``adapter="vulkan"`` on every call must not list every adapter's info, features and limits
    every time (about 15 us a call)."""
    request = f" {device.adapter.name.upper()} "  # a string no other test asks for, same adapter
    listed = []
    real = device_module.list_adapters
    monkeypatch.setattr(device_module, "list_adapters", lambda: listed.append(1) or real())
    assert wk.get_device(request) is device
    assert wk.get_device(request) is device
    assert len(listed) == 1


def test_an_unknown_or_mistyped_request_is_refused_every_time():
    for _ in range(2):
        with pytest.raises(errors.AdapterNotFoundError, match="no-such-gpu"):
            wk.get_device("no-such-gpu")
        with pytest.raises(errors.InputError, match="adapter"):
            wk.get_device(["vulkan"])  # type: ignore[arg-type]
        for blank in ("", "  "):  # "" is in every name: it had chosen the first adapter silently
            with pytest.raises(errors.InputError, match=rf"argument 'adapter': expected a backend .* got str '{blank}'"):
                wk.get_device(blank)


@forking
def test_a_forked_child_is_refused_instead_of_hanging(device):
    """multiprocessing's default 'fork' start method (DataLoader-style workers) after the parent
    had opened a device: the child's first call waited for good on a device wgpu cannot serve
    there, and a new device hung the same way. Now every use is a DeviceError naming the cure,
    and the parent is unaffected."""
    kernel = wk.get_kernel("com.microsoft.QuickGelu")
    x = np.linspace(-3, 3, 64, dtype=np.float32)
    kept, dropped = wk.to_gpu(x), wk.to_gpu(x)
    kernel({"X": x})  # the plan is cached in the parent too

    def attempts() -> list[str]:
        outcomes = []
        for attempt in (lambda: kernel({"X": x}), kept.numpy, lambda: wk.to_gpu(x), wk.get_device,
                        lambda: wk.get_device("vulkan"), lambda: copy.copy(kept),
                        lambda: dropped.release() or wk.empty_cache()):  # fmt: skip
            try:
                attempt()
                outcomes.append("ran")
            except errors.DeviceError as exc:
                outcomes.append("forked" if "'spawn'" in str(exc) else f"other DeviceError: {exc}")
            except Exception as exc:
                outcomes.append(f"{type(exc).__name__}: {exc}")
        return outcomes

    # Another of the parent's threads holds the device's lock as the process forks: the child's
    # copy of that lock stays held for good, so nothing there may wait for it.
    held, done = threading.Event(), threading.Event()
    holder = threading.Thread(target=lambda: (device.lock.acquire(), held.set(), done.wait(), device.lock.release()))
    holder.start()
    held.wait()
    try:
        outcomes = in_forked_child(attempts)
    finally:
        done.set()
        holder.join()
    assert outcomes == ["forked"] * 7  # release() returns; empty_cache() refuses
    expected = x / (1 + np.exp(-1.702 * x.astype(np.float64)))
    np.testing.assert_allclose(kernel({"X": kept})["Y"], expected, rtol=1e-5, atol=1e-6)  # the parent still works
    kept.release()
    dropped.release()


@forking
def test_a_forked_child_never_releases_its_parents_wgpu_objects(device):
    """A child shares its parent's driver objects (on NVIDIA, one set of kernel handles): a wgpu
    object the child released, dropped by its code, its garbage collector or its exit, freed what
    the parent still used, and the parent's next release or submit waited for good (the suite
    stopped after the fork test on the H100 and the H200)."""
    data = np.arange(64, dtype=np.float32)
    buffers = [device.gpu.create_buffer_with_data(data=data, usage=wgpu.BufferUsage.STORAGE | wgpu.BufferUsage.COPY_SRC)]
    kind = type(buffers[0])

    def drop_it() -> int:
        released = []
        kind._release_function = released.append  # what wgpu calls with the native handle, in the child only
        buffers.clear()
        gc.collect()
        return len(released)

    assert in_forked_child(drop_it) == 0
    buffer = buffers[0]
    assert np.array_equal(np.frombuffer(device.gpu.queue.read_buffer(buffer), np.float32), data)


FORKED_CHILD_EXITS = textwrap.dedent("""
    import os, sys, time
    import numpy as np
    import webgpu_kernels as wk
    kernel = wk.get_kernel("com.microsoft.QuickGelu")
    x = np.linspace(-3, 3, 64, dtype=np.float32)
    kept = wk.to_gpu(x)
    kernel({"X": x})
    pid = os.fork()
    if pid == 0:
        sys.exit(0)  # a normal exit: the interpreter's teardown finalizes the parent's objects
    deadline = time.monotonic() + 30
    while (status := os.waitpid(pid, os.WNOHANG)) == (0, 0):
        if time.monotonic() > deadline:
            os.kill(pid, 9)
            sys.exit("the forked child hung at its exit")
        time.sleep(0.05)
    print(os.WIFEXITED(status[1]) or os.WTERMSIG(status[1]), float(kernel({"X": kept})["Y"][-1]))
""")


@forking
def test_a_forked_child_that_exits_normally_ends_and_its_parent_goes_on(device):
    """A child that exited normally (not through os._exit, as multiprocessing's workers do) hung
    for good in its teardown's wgpu finalizers, on lavapipe too. It ends now: with status 0, or
    killed by Mesa's OpenGL driver's exit handlers (SIGSEGV on the CPU machine, README), which
    no Python code runs after; the parent is unaffected either way, on that machine."""
    if "nvidia" in f"{device.adapter.vendor} {device.adapter.name}".lower():
        # Session 26 on the H200: the child died (SIGSEGV) in 0.1 s, then the parent's next readback
        # waited for good (scripts/fork_probe.py sysexit, docs/perf/h200-fork-exit-26.log). No
        # Python code runs in those exit handlers; the README says to end such a child with os._exit.
        pytest.skip("on NVIDIA a forked child's normal exit breaks its parent's device (README)")
    done = subprocess.run([sys.executable, "-c", FORKED_CHILD_EXITS], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    ended, parent = done.stdout.split()
    assert ended in ("True", str(int(signal.SIGSEGV)))
    assert float(parent) == pytest.approx(3 / (1 + np.exp(-1.702 * 3)), rel=1e-5)
