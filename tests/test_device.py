"""Adapter choice and the per-process devices (webgpu_kernels.device)."""

from __future__ import annotations

import copy
import gc
import subprocess
import sys
import textwrap
import threading
import weakref

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
                        lambda: wk.get_device("vulkan"), lambda: copy.copy(kept), lambda: kept.astype(np.float16),
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
    assert outcomes == ["forked"] * 8  # release() returns; empty_cache() refuses
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


#: The forking scripts' wait for their child: a child that hangs fails the script, not the suite.
WAIT_FOR = textwrap.dedent("""
    import os, sys, time
    def wait_for(pid, hung):
        deadline = time.monotonic() + 30
        while (status := os.waitpid(pid, os.WNOHANG)) == (0, 0):
            if time.monotonic() > deadline:
                os.kill(pid, 9)
                sys.exit(hung)
            time.sleep(0.05)
        return status
""")


FORKED_CHILD_EXITS = WAIT_FOR + textwrap.dedent("""
    import atexit, ctypes, os, sys, time
    import numpy as np
    import webgpu_kernels as wk
    kernel = wk.get_kernel("com.microsoft.QuickGelu")
    x = np.linspace(-3, 3, 64, dtype=np.float32)
    kept = wk.to_gpu(x)
    kernel({"X": x})
    pid = os.fork()
    if pid == 0:
        atexit.register(print, "the child's atexit handler ran")
        libc = ctypes.CDLL(None)
        libc.fopen.restype = ctypes.c_void_p
        libc.fputs.argtypes = [ctypes.c_char_p, ctypes.c_void_p]
        libc.fputs(b"buffered by C stdio", libc.fopen(sys.argv[1].encode(), b"w"))  # never closed by the child
        sys.exit(3)  # a normal exit, with a status to keep
    status = wait_for(pid, "the forked child hung at its exit")
    ended = os.WEXITSTATUS(status[1]) if os.WIFEXITED(status[1]) else f"signal{os.WTERMSIG(status[1])}"
    print(ended, float(kernel({"X": kept})["Y"][-1]))
""")


FORKED_AFTER_A_LOSS = textwrap.dedent("""
    import os, sys
    import numpy as np
    import webgpu_kernels as wk
    kernel = wk.get_kernel("com.microsoft.QuickGelu")
    x = np.ones(64, np.float32)
    kernel({"X": x})
    wk.get_device().gpu.destroy()
    try:
        kernel({"X": x})
    except wk.errors.DeviceLostError:
        pass  # the device is forgotten; its driver state stays
    pid = os.fork()
    if pid == 0:
        try:
            wk.get_device()
        except wk.errors.DeviceError as exc:
            print("child refused:", "fork" in str(exc), flush=True)
        sys.exit(3)
    print(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
""")


@forking
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the child's exit handlers are skipped through glibc's on_exit")
def test_a_child_forked_after_its_parents_device_was_lost_is_a_forked_child_too(device):
    """A lost device is forgotten, and a child forked after that had counted as forked before any
    device: it was let open one, and its normal exit ran the drivers' exit handlers (SIGSEGV here)."""
    done = subprocess.run([sys.executable, "-c", FORKED_AFTER_A_LOSS], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split("\n")[:2] == ["child refused: True", "3"], done.stdout



FORKED_AFTER_A_LOSS_WITH_ITS_LOCK_HELD = WAIT_FOR + textwrap.dedent("""
    import os, sys, threading, time
    import numpy as np
    import webgpu_kernels as wk
    kernel = wk.get_kernel("com.microsoft.QuickGelu")
    x = np.ones(64, np.float32)
    kernel({"X": x})
    lost = wk.get_device()
    old = wk.to_gpu(x)  # a tensor of the device about to be lost
    lost.gpu.destroy()
    try:
        kernel({"X": x})
    except wk.errors.DeviceLostError:
        pass  # the device is forgotten: no longer one of the devices get_device() knows
    held, done = threading.Event(), threading.Event()
    holder = threading.Thread(target=lambda: (lost.lock.acquire(), held.set(), done.wait(), lost.lock.release()))
    holder.start()
    held.wait()
    pid = os.fork()
    if pid == 0:
        old.release()  # the lock copied into the child is held by a thread that is not there
        print("child released", flush=True)
        os._exit(3)
    done.set()
    holder.join()
    status = wait_for(pid, "the forked child hung releasing a tensor of the lost device")
    print(os.waitstatus_to_exitcode(status[1]))
""")


@forking
def test_a_forked_child_releases_a_tensor_of_a_lost_device_without_touching_its_pool(device):
    """Only the devices get_device() still knew were marked forked in a child: a lost one's tensor,
    released there, took its parent's lock (held by another of the parent's threads at the fork: the
    child waited for good) and its pool, whose trimming destroys the parent's buffers."""
    done = subprocess.run([sys.executable, "-c", FORKED_AFTER_A_LOSS_WITH_ITS_LOCK_HELD], capture_output=True,
                          text=True, timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split("\n")[:2] == ["child released", "3"], done.stdout


@forking
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the child's exit handlers are skipped through glibc's on_exit")
def test_a_forked_child_that_exits_normally_keeps_its_status_and_its_parent_goes_on(device, tmp_path):
    """A normal exit ran the C exit handlers the child inherited, the GPU drivers' among them: on
    lavapipe Mesa's OpenGL driver killed the child (SIGSEGV), and on the H200 the child died the
    same way and its parent's next readback waited for good (scripts/fork_probe.py sysexit,
    docs/perf/h200-fork-exit-26.log). Now the child ends after Python's teardown, with its own
    status, its atexit handlers run and its C streams flushed; the parent goes on."""
    stream = tmp_path / "c-stdio.txt"
    done = subprocess.run([sys.executable, "-c", FORKED_CHILD_EXITS, str(stream)], capture_output=True, text=True,
                          timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    child_said, ended, parent = done.stdout.split("\n")[0], *done.stdout.split("\n")[1].split()
    assert child_said == "the child's atexit handler ran"
    assert ended == "3"
    assert stream.read_text() == "buffered by C stdio"
    assert float(parent) == pytest.approx(3 / (1 + np.exp(-1.702 * 3)), rel=1e-5)


class _FakeAdapter:
    """An adapter as wgpu lists it: info, features and limits (no device is opened on it)."""

    def __init__(self, name: str) -> None:
        self.info = {"device": name, "vendor": "v", "backend_type": "Vulkan", "adapter_type": "DiscreteGPU",
                     "description": name}  # fmt: skip
        self.features: set[str] = set()
        self.limits = {"max-buffer-size": 1 << 20}


def _fake_adapters(monkeypatch) -> list[list[_FakeAdapter]]:
    """Devices of fake adapters: wgpu's listing is what the returned list's last entry holds
    (each enumeration reads it anew), and a device remembers the adapter object it was opened on."""
    listing: list[list[_FakeAdapter]] = [[]]

    class FakeDevice(device_module.Device):
        def __init__(self, adapter, summary) -> None:
            self.on, self.adapter, self.lost = adapter, summary, False

    monkeypatch.setattr(device_module.wgpu.gpu, "enumerate_adapters_sync", lambda: list(listing[-1]))
    monkeypatch.setattr(device_module, "Device", FakeDevice)
    for name, value in (("_adapters", None), ("_devices", {}), ("_requested", {}), ("_default", None),
                        ("_opened", weakref.WeakSet()), ("_opened_any", device_module._opened_any)):
        monkeypatch.setattr(device_module, name, value)
    monkeypatch.setattr(device_module, "_listed", [])
    return listing


def test_a_device_on_another_adapter_is_never_returned_after_a_loss_reorders_the_adapters(monkeypatch):
    """Devices were filed by their adapter's position in wgpu's list, and a loss lists the adapters
    again: a lost adapter gone from the list (fallen off the bus), or the list in another order,
    had a request for one adapter get the surviving device of another."""
    listing = _fake_adapters(monkeypatch)
    a, b, c = _FakeAdapter("GPU A"), _FakeAdapter("GPU B"), _FakeAdapter("GPU C")
    listing.append([a, b, c])
    on_a, on_b = wk.get_device("GPU A"), wk.get_device("GPU B")
    assert (on_a.on, on_b.on) == (a, b)
    on_a._forget()
    b2, c2 = _FakeAdapter("GPU B"), _FakeAdapter("GPU C")
    listing.append([b2, c2])  # A is gone: B and C moved up one place
    on_c = wk.get_device("GPU C")
    assert on_c is not on_b and on_c.on is c2
    assert wk.get_device(" gpu b") is on_b  # the survivor, found by a new request string too
    assert on_b.adapter.index == 0 and on_c.adapter.index == 1  # its summary names its place now
    on_c._forget()
    listing.append([_FakeAdapter("GPU C"), b2])  # another order
    assert wk.get_device("gpu B ") is on_b and wk.get_device("GPU C").on is listing[-1][0]


def test_alike_adapters_keep_their_devices_apart_after_a_loss(monkeypatch):
    """Two identical GPUs (same name, vendor, backend): after another adapter's loss, the device of
    the first is still the first's, as wgpu lists alike adapters in the driver's order; where one of
    them is gone, which one is left cannot be told, so no request is given its device by position."""
    listing = _fake_adapters(monkeypatch)
    cpu, g1, g2 = _FakeAdapter("cpu"), _FakeAdapter("GPU"), _FakeAdapter("GPU")
    listing.append([cpu, g1, g2])
    on_cpu, on_g1 = wk.get_device("cpu"), wk.get_device("GPU")
    assert on_g1.on is g1
    on_cpu._forget()
    listing.append([_FakeAdapter("GPU"), _FakeAdapter("GPU"), _FakeAdapter("cpu")])
    assert wk.get_device("gpu") is on_g1 and wk.get_device("cpu").on is listing[-1][2]
    assert on_g1.adapter.index == 0
    wk.get_device("cpu")._forget()
    listing.append([_FakeAdapter("cpu"), _FakeAdapter("GPU")])  # one GPU gone: g1's, or the other?
    fresh = wk.get_device("GPU ")
    assert fresh is not on_g1 and fresh.on is listing[-1][1]


def test_an_adapter_argument_of_another_type_is_named_briefly() -> None:
    """adapter= of no string is an InputError whose 'got' part is type and at most 60 characters of
    its repr, as every InputError's: a list of 100,000 numbers had been quoted whole."""
    from webgpu_kernels import errors
    from webgpu_kernels.device import choose_adapter

    with pytest.raises(errors.InputError) as info:
        choose_adapter(list(range(100_000)))  # type: ignore[arg-type]
    assert "got list [0, 1, 2" in str(info.value) and len(str(info.value)) < 300, len(str(info.value))
