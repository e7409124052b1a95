"""forks.py: a forked child gets fresh module locks, whatever another thread of its parent held."""

from __future__ import annotations

import math
import subprocess
import sys
import textwrap
import threading

import pytest

from webgpu_kernels import api, buffers, casefile, hub, rendering, tuning

from forking import forking, in_forked_child

MODULE_LOCKS = [(api, "_lock"), (hub, "_lock"), (casefile, "_parsed_lock"), (tuning, "_lock"),
                (buffers, "_copy_pool_lock"), (rendering, "_checked_lock")]  # fmt: skip


@forking
@pytest.mark.parametrize(("module", "name"), MODULE_LOCKS, ids=lambda v: getattr(v, "__name__", v))
def test_a_lock_another_thread_held_at_the_fork_is_fresh_in_the_child(module, name):
    """Only the forking thread lives on in a child: a lock another thread held at the fork had
    stayed held there for good, and the child's first get_kernel (api's lock) waited forever."""
    held, done = threading.Event(), threading.Event()
    lock = getattr(module, name)
    holder = threading.Thread(target=lambda: (lock.acquire(), held.set(), done.wait(), lock.release()))
    holder.start()
    held.wait()
    try:
        got_it = in_forked_child(lambda: getattr(module, name).acquire(timeout=5), timeout_s=30)
    finally:
        done.set()
        holder.join()
    assert got_it is True


@forking
def test_a_tuning_cache_saving_on_another_thread_at_the_fork_is_usable_in_the_child(tuning_dir):
    """save() holds its cache's own lock while it waits for the folder lock: a fork then left the
    child's cache locked for good, and its first record() waited forever."""
    cache = tuning.cache_for("some adapter", "vulkan")
    held, done = threading.Event(), threading.Event()
    holder = threading.Thread(target=lambda: (cache._lock.acquire(), held.set(), done.wait(), cache._lock.release()))
    holder.start()
    held.wait()
    try:
        got_it = in_forked_child(lambda: tuning.cache_for("some adapter", "vulkan")._lock.acquire(timeout=5),
                                 timeout_s=30)  # fmt: skip
    finally:
        done.set()
        holder.join()
    assert got_it is True


@forking
def test_the_copy_pool_is_not_inherited():
    """The parent's copy threads do not exist in the child: its pool would never run a copy."""
    buffers.parallel_copy(2 * buffers.PARALLEL_COPY_MIN_CHUNK, lambda offset, size: None)  # the pool exists
    assert buffers._copy_pool is not None
    assert in_forked_child(lambda: buffers._copy_pool is None) is True


OPENING_AT_THE_FORK = textwrap.dedent("""
    import os, sys, threading, time
    import numpy as np
    import webgpu_kernels as wk
    from webgpu_kernels import device
    held, done = threading.Event(), threading.Event()
    # Another thread inside get_device's lock, as while it opens the process's first device.
    holder = threading.Thread(target=lambda: (device._lock.acquire(), held.set(), done.wait(), device._lock.release()))
    holder.start()
    held.wait()
    pid = os.fork()
    if pid == 0:
        try:
            wk.get_device()
            os.write(1, b"opened")
        except wk.errors.DeviceError as exc:
            os.write(1, b"refused" if "'spawn'" in str(exc) else str(exc).encode())
        os._exit(0)
    done.set()
    deadline = time.monotonic() + 30
    while os.waitpid(pid, os.WNOHANG) == (0, 0):
        if time.monotonic() > deadline:
            os.kill(pid, 9)
            sys.exit("the forked child hung")
        time.sleep(0.05)
    print("; parent", float(wk.get_kernel("com.microsoft.QuickGelu")({"X": np.ones(4, np.float32)})["Y"][0]))
""")


@forking
def test_a_child_forked_while_a_device_was_opening_is_refused():
    """A thread opening the first device holds get_device's lock: the child had waited for it
    forever. It is refused as a child of a parent with a device (that device is half open in the
    child's copy of wgpu), and the parent goes on."""
    done = subprocess.run([sys.executable, "-c", OPENING_AT_THE_FORK], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    outcome, parent = done.stdout.split("; parent ")
    assert outcome == "refused"
    assert float(parent) == pytest.approx(1 / (1 + math.exp(-1.702)), rel=1e-5)
