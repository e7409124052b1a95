"""buffers.py: host copies split across threads, and the pool that keeps a large call's buffers.

Real lavapipe buffers throughout; the copy threshold is lowered so that small arrays take the
threaded path.
"""

from __future__ import annotations

import gc
import warnings

import numpy as np
import pytest

import webgpu_kernels as wk
from webgpu_kernels import buffers
from webgpu_kernels.buffers import LARGE_BUFFERS_KEPT, copy_chunks, parallel_copy

import references as ref
from conftest import collect_while_locked, collecting_only_new_objects

f32 = np.float32


@pytest.fixture
def threaded_copies(monkeypatch):
    """Copies of 16 KiB and more are split into up to 4 threads."""
    monkeypatch.setattr(buffers, "PARALLEL_COPY_MIN_CHUNK", 16 << 10)
    monkeypatch.setattr(buffers, "COPY_THREADS", 4)


@pytest.mark.parametrize("nbytes", [0, 4, 4096, 16 << 10, (64 << 10) + 12, (1 << 20) + 4])
def test_copy_chunks_cover_the_range_in_page_aligned_pieces(threaded_copies, nbytes):
    chunks = copy_chunks(nbytes)
    assert 1 <= len(chunks) <= 4
    assert chunks[0][0] == 0
    for (offset, size), (next_offset, _) in zip(chunks, chunks[1:]):
        assert offset + size == next_offset
        assert next_offset % 4096 == 0
    assert sum(size for _, size in chunks) == nbytes


def test_small_copies_stay_on_the_calling_thread():
    assert copy_chunks(buffers.PARALLEL_COPY_MIN_CHUNK * 2 - 4) == [(0, buffers.PARALLEL_COPY_MIN_CHUNK * 2 - 4)]


def test_a_failing_chunk_fails_the_copy_after_every_chunk_finished(threaded_copies):
    """The failure surfaces only once the other pieces are done (the caller may unmap next)."""
    import threading
    import time

    finished = []
    lock = threading.Lock()

    def copy(offset, size):
        if offset == 0:
            raise RuntimeError(f"chunk at {offset} failed")
        time.sleep(0.05)
        with lock:
            finished.append(offset)

    chunks = copy_chunks(1 << 20)
    with pytest.raises(RuntimeError, match="chunk at 0 failed"):
        parallel_copy(1 << 20, copy)
    assert sorted(finished) == [offset for offset, _ in chunks[1:]]


def test_a_ctrl_c_in_the_copy_wait_raises_once_every_running_chunk_is_done(threaded_copies, monkeypatch):
    """A KeyboardInterrupt in the wait had been raised at once, with copy threads still writing
    into memory the caller then unmaps or pools. Chunks not started by then never run."""
    import threading
    import time

    started, finished, lock, real_wait = [], [], threading.Lock(), buffers.wait
    running = threading.Event()

    def copy(offset, size):
        with lock:
            started.append(offset)
        running.set()
        time.sleep(0.05)
        with lock:
            finished.append(offset)

    def interrupted_wait(futures):
        # Some chunk is running (a fixed 10 ms sleep had found none started on a loaded machine).
        assert running.wait(30)
        monkeypatch.setattr(buffers, "wait", real_wait)
        raise KeyboardInterrupt

    monkeypatch.setattr(buffers, "wait", interrupted_wait)
    with pytest.raises(KeyboardInterrupt):
        parallel_copy(1 << 20, copy)
    with lock:
        at_raise = sorted(started), sorted(finished)
    assert at_raise[0] and at_raise[0] == at_raise[1]
    time.sleep(0.15)
    assert sorted(started) == at_raise[0]  # the cancelled chunks did not run later


def test_an_upload_cut_short_leaks_no_buffer(device, monkeypatch):
    """A Ctrl-C (or any failure) inside to_gpu's write had kept its buffer leased for good."""
    # Tensors an earlier test left to the garbage collector are pooled first: to_gpu's acquire would
    # pool them and the count would drop (the test failed after tests/test_execution.py).
    gc.collect()
    with device.memory.lock:
        device.memory._pool_collected()
    leased = len(device.memory._leased)

    def interrupted_write(buffer, data):
        raise KeyboardInterrupt

    monkeypatch.setattr(device.memory, "write", interrupted_write)
    with pytest.raises(KeyboardInterrupt):
        wk.to_gpu(np.ones(1024, f32))
    assert len(device.memory._leased) == leased



def test_a_release_interrupted_while_it_waits_for_the_lock_leaks_no_buffer(device, monkeypatch):
    """A Ctrl-C while release() waited for the device lock (another thread reading back, say) had
    taken the buffer from the tensor and never given it to the pool: leased for good."""
    gc.collect()
    with device.memory.lock:
        device.memory._pool_collected()
    tensor = wk.to_gpu(np.ones(1024, f32))
    leased = len(device.memory._leased)

    class Interrupted:  # what a lock acquire does when a Ctrl-C comes while it waits
        def __enter__(self):
            raise KeyboardInterrupt

        def __exit__(self, *exc):
            return False

    monkeypatch.setattr(device.memory, "lock", Interrupted())
    with pytest.raises(KeyboardInterrupt):
        tensor.release()
    monkeypatch.undo()
    assert tensor.released
    assert device.memory.live_buffers  # pools what waits to be pooled
    assert len(device.memory._leased) == leased - 1


READBACK_CUT_SHORT = """
import numpy as np
import webgpu_kernels as wk
from webgpu_kernels.buffers import READBACK_MAP_MODE
kernel = wk.get_kernel("com.microsoft.QuickGelu")
memory = wk.get_device().memory
x = np.linspace(-3, 3, 4096, dtype=np.float32)
y = kernel({"X": x}, output="gpu")["Y"]

def interrupted(staging, size):  # Ctrl-C while the map is pending
    staging.map_async(READBACK_MAP_MODE, 0, size)
    raise KeyboardInterrupt

memory._map_for_read = interrupted
try:
    y.numpy()
except KeyboardInterrupt:
    pass
del memory._map_for_read
print(float(kernel({"X": x})["Y"][-1]), float(y.numpy()[-1]))
"""


def test_a_readback_cut_short_leaves_the_next_one_working():
    """A Ctrl-C while a readback waited for its map had put the still-mapping staging buffer back
    in the pool, and the next readback's copy into it aborted the process (wgpu-native panics).
    In a child process: the old failure takes the whole interpreter down."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", READBACK_CUT_SHORT], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    expected = 3 / (1 + np.exp(-1.702 * 3))
    assert [float(v) for v in done.stdout.split()] == pytest.approx([expected, expected], rel=1e-5)


@pytest.mark.parametrize("numel", [8196, 65536 * 3 + 4, 1 << 20])
def test_threaded_upload_and_readback_are_exact(threaded_copies, quick_gelu, numel):
    """Both directions split (up to 4 MiB here); every element lands where it belongs."""
    assert len(copy_chunks(numel * 4)) > 1
    x = np.random.default_rng(numel).standard_normal(numel).astype(f32) * 4
    original = x.copy()
    np.testing.assert_array_equal(wk.to_gpu(x).numpy(), x)  # bit-exact round trip
    y = quick_gelu({"X": x})["Y"]
    np.testing.assert_allclose(y, ref.quick_gelu(x), rtol=2e-6, atol=2e-6)
    np.testing.assert_array_equal(x, original)


def test_threaded_bias_add_matches_the_reference(threaded_copies, bias_add):
    rng = np.random.default_rng(5)
    x, skip = rng.standard_normal((2, 256, 640)).astype(f32), rng.standard_normal((2, 256, 640)).astype(f32)
    bias = rng.standard_normal(640).astype(f32)
    y = bias_add({"X": x, "bias": bias, "skip": skip})["Y"]
    np.testing.assert_allclose(y, ref.bias_add(x, bias, skip), rtol=1e-6, atol=1e-6)


def test_a_call_larger_than_the_pool_reuses_its_buffers(device, quick_gelu, monkeypatch):
    """Inputs, output and staging of a 2 MiB call stay pooled under a 1 MiB budget, so repeating
    the call creates no buffer; 300 small calls later the large ones are freed again."""
    monkeypatch.setattr(device.memory, "pool_bytes", 1 << 20)
    device.memory.trim()
    x = np.linspace(-3, 3, 1 << 19, dtype=f32)
    quick_gelu({"X": x})
    live = device.memory.live_buffers
    for _ in range(5):
        np.testing.assert_allclose(quick_gelu({"X": x})["Y"], ref.quick_gelu(x), rtol=2e-6, atol=2e-6)
        assert device.memory.live_buffers == live
    small = np.ones(64, f32)
    for _ in range(buffers.LARGE_BUFFER_WINDOW + 50):
        quick_gelu({"X": small})
    assert device.memory.pool_budget < 1 << 21
    assert device.memory.pooled_bytes <= device.memory.pool_budget
    device.memory.trim()


def test_empty_cache_frees_the_pool_but_not_live_tensors(device, quick_gelu):
    x = np.linspace(-1, 1, 4096, dtype=f32)
    kept = quick_gelu({"X": x}, output="gpu")["Y"]
    quick_gelu({"X": x})
    assert device.memory.pooled_bytes > 0
    wk.empty_cache()
    assert device.memory.pooled_bytes == 0
    np.testing.assert_allclose(kept.numpy(), ref.quick_gelu(x), rtol=2e-6, atol=2e-6)
    kept.release()


def test_empty_cache_forgets_the_largest_recent_size(device, monkeypatch):
    """The pool keeps room for LARGE_BUFFERS_KEPT buffers the size of the largest recent release
    beyond its budget; after empty_cache() that room stayed for the next LARGE_BUFFER_WINDOW
    releases, so small buffers could fill 4 x the large size again right after the user asked
    for the memory back (a finding)."""
    monkeypatch.setattr(device.memory, "pool_bytes", 1 << 20)
    big = device.memory.acquire(16 << 20)
    device.memory.release(big)
    assert device.memory.pool_budget >= (1 << 20) + LARGE_BUFFERS_KEPT * (16 << 20)
    wk.empty_cache()
    assert device.memory.pool_budget == 1 << 20
    smalls = [device.memory.acquire(256 << 10) for _ in range(12)]  # 3 MiB, over the 1 MiB budget
    for buffer in smalls:
        device.memory.release(buffer)
    assert device.memory.pooled_bytes <= (1 << 20) + LARGE_BUFFERS_KEPT * (256 << 10)  # the new largest: 256 KiB


def test_empty_cache_cut_short_leaves_no_destroyed_buffer_in_the_pool(device, monkeypatch):
    """A Ctrl-C inside trim() (empty_cache, the out-of-memory retry: one bind-group scan and destroy
    per pooled buffer) had left the buffers already destroyed in the pool, handed to later calls,
    which WebGPU then refused for using a destroyed buffer."""
    wk.empty_cache()
    pooled = [device.memory.acquire(4096 + 4096 * n) for n in range(4)]  # four size classes
    for buffer in pooled:
        device.memory.release(buffer)
    real_destroy, destroyed = device.memory._destroy, []

    def interrupted_destroy(buffer):
        if destroyed:
            raise KeyboardInterrupt
        destroyed.append(buffer)
        real_destroy(buffer)

    monkeypatch.setattr(device.memory, "_destroy", interrupted_destroy)
    with pytest.raises(KeyboardInterrupt):
        wk.empty_cache()
    monkeypatch.undo()
    with device.memory.lock:
        free = [b for _, b in device.memory._free_order.values()]
    assert not any(b is destroyed[0] for b in free)
    assert device.memory.pooled_bytes == sum(b.size for b in free)
    for n in range(4):  # each size class again: a live buffer, pooled or new
        buffer = device.memory.acquire(4096 + 4096 * n)
        assert buffer is not destroyed[0]
        device.memory.release(buffer)
    wk.empty_cache()


def test_empty_cache_turns_wgpu_errors_into_the_library_s(device, monkeypatch):
    """empty_cache submits recorded work; a refusal there came out as wgpu's GPUValidationError."""
    import wgpu

    def refuse(then=None):
        raise wgpu.GPUValidationError("refused for the test")

    monkeypatch.setattr(device.memory, "flush", refuse)
    with pytest.raises(wk.errors.DeviceError, match=r"\(empty_cache\).*refused for the test"):
        wk.empty_cache()


def test_one_pass_with_repeated_and_alternating_pipelines_and_bind_groups(device, quick_gelu, bias_add):
    """Recorded dispatches skip re-setting an unchanged pipeline or bind group; each must still see
    its own: the same call twice, a new input under the same pipeline, another kernel, then back."""
    rng = np.random.default_rng(9)
    a, b = (wk.to_gpu(rng.standard_normal((2, 3, 8)).astype(f32)) for _ in range(2))
    bias, skip = rng.standard_normal(8).astype(f32), rng.standard_normal((2, 3, 8)).astype(f32)
    wk.synchronize()
    bias_gpu, skip_gpu = wk.to_gpu(bias), wk.to_gpu(skip)
    quick_gelu({"X": a})  # each plan's first run is submitted on its own: these are recorded
    bias_add({"X": a, "bias": bias_gpu, "skip": skip_gpu})
    outs = [quick_gelu({"X": a}, output="gpu")["Y"], quick_gelu({"X": a}, output="gpu")["Y"],
            quick_gelu({"X": b}, output="gpu")["Y"]]
    outs.append(bias_add({"X": outs[2], "bias": bias_gpu, "skip": skip_gpu}, output="gpu")["Y"])
    outs.append(quick_gelu({"X": outs[3]}, output="gpu")["Y"])
    assert device.memory._pending >= 5  # all recorded into one pass, nothing submitted yet
    qa, qb = ref.quick_gelu(a.numpy()), ref.quick_gelu(b.numpy())
    expected = [qa, qa, qb, ref.bias_add(qb, bias, skip), ref.quick_gelu(ref.bias_add(qb, bias, skip))]
    for got, want in zip(outs, expected):
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-5, atol=1e-5)


def test_a_dispatch_cut_short_leaves_the_next_call_its_own_bindings(device, quick_gelu, monkeypatch):
    """A Ctrl-C between a call's set_bind_group and its dispatch left the open pass bound to that
    call's group while the recorder still held the group before it: the next call with that
    group skipped set_bind_group and ran on the interrupted call's input (gelu(x2), silently)."""
    x1, x2 = np.linspace(-3, 3, 4096, dtype=f32), np.full(4096, 2.0, f32)
    t1, t2 = wk.to_gpu(x1), wk.to_gpu(x2)
    quick_gelu({"X": t1})  # the plan's first run, submitted on its own
    gc.collect()
    with device.memory.lock:
        device.memory._pool_collected()  # nothing pooled later comes between the buffers below
    wk.synchronize()
    a = quick_gelu({"X": t1}, output="gpu")["Y"]  # the pass now holds (QuickGelu, t1 -> a's buffer)
    out = a.buffer
    a.release()
    compute = type(device.memory._pass)

    def interrupted(self, *grid):  # what a Ctrl-C right before the dispatch does
        monkeypatch.undo()
        raise KeyboardInterrupt

    monkeypatch.setattr(compute, "dispatch_workgroups", interrupted)
    with pytest.raises(KeyboardInterrupt):
        quick_gelu({"X": t2}, output="gpu")  # binds t2 -> a's old buffer, then is cut short
    y = quick_gelu({"X": t1}, output="gpu")["Y"]
    assert y.buffer is out  # the group the recorder last set: (t1, this buffer)
    np.testing.assert_allclose(y.numpy(), ref.quick_gelu(x1), rtol=2e-6, atol=2e-6)
    for t in (t1, t2, y):
        t.release()


def test_destroying_a_buffer_drops_the_bind_groups_that_use_it(device, quick_gelu):
    """A cached bind group over a destroyed buffer must never be found again."""
    x = wk.to_gpu(np.linspace(-1, 1, 4096, dtype=f32))
    y = quick_gelu({"X": x}, output="gpu")["Y"]
    used = {x.buffer.uid, y.buffer.uid}

    def cached_uids():
        return {entry[1].uid for _, entries in device.memory._bind_groups for entry in entries}

    assert used <= cached_uids()
    x.release()
    y.release()
    wk.empty_cache()  # destroys the pooled buffers
    assert not used & cached_uids()
    z = np.linspace(-2, 2, 4096, dtype=f32)
    np.testing.assert_allclose(quick_gelu({"X": z})["Y"], ref.quick_gelu(z), rtol=2e-6, atol=2e-6)


@pytest.mark.parametrize("made_by", ["to_gpu", "a call"])
def test_a_tensor_collected_in_a_reference_cycle_returns_a_live_buffer(device, quick_gelu, made_by):
    """The cyclic GC runs finalizers in any order: a GpuTensor and its wgpu buffer object collected
    together once put a released buffer into the pool, and the next call of that size crashed.
    An uploaded tensor's buffer is reachable only through the tensor (and the pool's lease), so the
    cycle takes the buffer object with it: without the lease's strong reference this fails (a
    released buffer reused); a call's output is also held by its cached bind group, so that case
    alone could not fail."""
    import gc

    x = np.linspace(-3, 3, 4096, dtype=f32)
    for _ in range(20):
        with collecting_only_new_objects():
            tensor = wk.to_gpu(x) if made_by == "to_gpu" else quick_gelu({"X": x}, output="gpu")["Y"]
            holder = {"tensor": tensor}
            holder["self"] = holder  # only the cyclic GC frees this
            del tensor, holder
            assert gc.collect() > 0
        np.testing.assert_allclose(quick_gelu({"X": x})["Y"], ref.quick_gelu(x), rtol=2e-6, atol=2e-6)


def test_a_failed_readback_map_is_a_device_error_and_leaks_nothing(device, quick_gelu, monkeypatch):
    """wgpu-py reports a failed map as a bare RuntimeError: it must reach the caller as the library's
    DeviceError (naming what failed), with the staging buffer back in the pool."""
    from wgpu.backends.wgpu_native import GPUBuffer

    y = quick_gelu({"X": np.linspace(-1, 1, 4096, dtype=f32)}, output="gpu")["Y"]
    leased = len(device.memory._leased)

    def failing_map(self, mode, offset=0, size=None):
        return rejected_promise("Could not map buffer (2 : Buffer is invalid).")

    monkeypatch.setattr(GPUBuffer, "map_async", failing_map)
    monkeypatch.setattr(device.memory, "spin_s", 0.001)  # the GPU adapters' spin sees the rejection too
    with pytest.raises(wk.errors.DeviceError) as info:
        y.numpy()
    assert not isinstance(info.value, wk.errors.DeviceLostError)
    assert "reading a GPU tensor" in str(info.value) and "Could not map buffer" in str(info.value)
    assert len(device.memory._leased) == leased  # the staging buffer went back
    monkeypatch.undo()
    np.testing.assert_allclose(y.numpy(), ref.quick_gelu(np.linspace(-1, 1, 4096, dtype=f32)), rtol=2e-6, atol=2e-6)
    y.release()


def test_a_refused_device_request_is_a_device_error(monkeypatch):
    """Seen on the H200 machine, whose OpenGL adapter refuses a device: wgpu-py rejects the request
    with a bare RuntimeError, which must become a DeviceError naming the adapter."""
    from wgpu.backends.wgpu_native import GPUAdapter

    from webgpu_kernels.device import Device, _enumerate, choose_adapter

    summary = choose_adapter(None)

    def refuse(self, **kwargs):
        return rejected("Request device failed (3): Validation Error\n\nCaused by:\n  Parent device is lost")

    monkeypatch.setattr(GPUAdapter, "request_device_sync", refuse)
    with pytest.raises(wk.errors.DeviceError) as info:
        Device(_enumerate()[summary.index], summary)
    assert str(info.value) == (f"cannot open a device on {summary.label()}: Request device failed (3): "
                               "Validation Error Caused by: Parent device is lost")  # fmt: skip


def rejected_promise(message):
    """A wgpu-py promise rejected with ``message``, as wgpu-py's own for a failed map."""
    from wgpu.backends.wgpu_native import GPUPromise

    promise = GPUPromise("test", None)
    promise._wgpu_set_error(RuntimeError(message))
    return promise


def rejected(message):
    """Wait on a wgpu-py promise rejected with ``message``: raises the bare RuntimeError exactly as
    wgpu-py does for a failed map or device request."""
    return rejected_promise(message).sync_wait()


@pytest.mark.parametrize("spin_s", [1e-9, 0.001, 10.0])
def test_readbacks_are_right_however_long_they_spin(device, quick_gelu, monkeypatch, spin_s):
    """On GPU adapters a readback polls without sleeping for up to READBACK_SPIN_S, then waits for
    wgpu-py's poll thread: a spin that ends before the GPU (1 ns), around it (1 ms) or only when the
    map is done (10 s) all read the right values, small and large."""
    monkeypatch.setattr(device.memory, "spin_s", spin_s)
    for n in (4096, 1 << 21):
        x = np.random.default_rng(n).standard_normal(n).astype(f32)
        y = quick_gelu({"X": x})["Y"]
        np.testing.assert_allclose(y, ref.quick_gelu(x), rtol=2e-6, atol=2e-6)


def test_a_readback_that_waits_long_says_so_and_still_reads_right(device, quick_gelu, monkeypatch):
    """A readback still waiting for the GPU after wait_warn_s warns once (GpuWaitWarning, naming
    the setting and the forked-child cause) and goes on waiting: a wedged driver (the H200 after a
    forked child's normal exit) had hung the process without a word."""
    monkeypatch.setattr(device.memory, "spin_s", 0.0)
    monkeypatch.setattr(device.memory, "wait_warn_s", 1e-6)  # far less than 8M elements take here
    x = np.random.default_rng(5).standard_normal(1 << 23, dtype=f32)
    # Ten calls recorded into the read's submission: one 8M-element call could finish on lavapipe's
    # threads before a descheduled main thread reached its wait (seen under pytest -n 2), and a map
    # already done never warns.
    source = wk.to_gpu(x)
    calls = [quick_gelu({"X": source}, output="gpu")["Y"] for _ in range(10)]
    with pytest.warns(wk.GpuWaitWarning) as caught:
        y = calls[-1].numpy()
    assert len(caught) == 1
    assert caught[0].filename == __file__, caught[0].filename  # the user's line, not the library's
    message = str(caught[0].message)
    assert "still waits" in message and "$WEBGPU_KERNELS_WAIT_WARN_S" in message and "os._exit" in message
    # A chunk at a time: the whole float64 reference's temporaries are slow to touch first on a VM whose
    # host backs pages on first touch (with the float32 draw, 7.5 s -> 2.5 s of a cold suite's worker time).
    for i in range(0, x.size, 1 << 20):
        np.testing.assert_allclose(y[i : i + (1 << 20)], ref.quick_gelu(x[i : i + (1 << 20)]), rtol=2e-6, atol=2e-6)


@pytest.mark.parametrize("setting, wait_warn_s", [(None, 60.0), ("0", 0.0), (" 5 ", 5.0)])
def test_the_wait_warning_is_set_by_the_environment(monkeypatch, setting, wait_warn_s):
    """$WEBGPU_KERNELS_WAIT_WARN_S: whole seconds (60 when unset), read when a device opens."""
    from webgpu_kernels.device import Device, _enumerate, choose_adapter

    summary = choose_adapter(None)
    monkeypatch.delenv("WEBGPU_KERNELS_WAIT_WARN_S", raising=False)
    if setting is not None:
        monkeypatch.setenv("WEBGPU_KERNELS_WAIT_WARN_S", setting)
    assert Device(_enumerate()[summary.index], summary).memory.wait_warn_s == wait_warn_s


def test_a_wait_warning_past_the_longest_wait_reads_right(device, quick_gelu, monkeypatch):
    """A wait warning of more seconds than threading can wait (99999999999, meant as "never") made
    every readback that had to wait raise OverflowError from Event.wait."""
    monkeypatch.setattr(device.memory, "spin_s", 0.0)
    monkeypatch.setattr(device.memory, "wait_warn_s", 99999999999)  # $WEBGPU_KERNELS_WAIT_WARN_S takes it
    x = np.random.default_rng(7).standard_normal(1 << 22).astype(f32)
    source = wk.to_gpu(x)
    calls = [quick_gelu({"X": source}, output="gpu")["Y"] for _ in range(4)]  # the read waits for them
    with warnings.catch_warnings():
        warnings.simplefilter("error", wk.GpuWaitWarning)
        np.testing.assert_allclose(calls[-1].numpy(), ref.quick_gelu(x), rtol=2e-6, atol=2e-6)
    for t in (source, *calls):
        t.release()


def test_a_wait_warning_of_0_never_warns(device, quick_gelu, monkeypatch):
    monkeypatch.setattr(device.memory, "spin_s", 0.0)
    monkeypatch.setattr(device.memory, "wait_warn_s", 0.0)
    x = np.random.default_rng(6).standard_normal(1 << 22).astype(f32)
    with warnings.catch_warnings():
        warnings.simplefilter("error", wk.GpuWaitWarning)
        np.testing.assert_allclose(quick_gelu({"X": x})["Y"], ref.quick_gelu(x), rtol=2e-6, atol=2e-6)


@pytest.mark.parametrize("setting, spin_s", [("250", 250e-6), ("0", 0.0), (" 1000 ", 1e-3)])
def test_the_spin_is_set_by_the_environment(monkeypatch, setting, spin_s):
    """$WEBGPU_KERNELS_SPIN_US sets the readback spin on any adapter (0: never spin)."""
    from webgpu_kernels.device import SPIN_ENV, Device, _enumerate, choose_adapter

    summary = choose_adapter(None)
    monkeypatch.setenv(SPIN_ENV, setting)
    opened = Device(_enumerate()[summary.index], summary)
    assert opened.memory.spin_s == pytest.approx(spin_s)
    x = np.linspace(-3, 3, 4096, dtype=f32)  # and reads back through it
    memory = opened.memory
    buffer = memory.acquire(x.nbytes)
    memory.write(buffer, x)
    out = np.empty_like(x)
    memory.read_into(buffer, out)
    memory.release(buffer)
    np.testing.assert_array_equal(out, x)


@pytest.mark.parametrize("name", ["WEBGPU_KERNELS_SPIN_US", "WEBGPU_KERNELS_POOL_MB", "WEBGPU_KERNELS_WAIT_WARN_S"])
@pytest.mark.parametrize("setting", ["-1", "1.5", "lots", "1e3", "²"])
def test_bad_device_settings_are_refused_by_name(monkeypatch, name, setting):
    """A bad setting names the variable, what it must be and what it was, before any device opens."""
    from wgpu.backends.wgpu_native import GPUAdapter

    from webgpu_kernels.device import Device, _enumerate, choose_adapter

    summary = choose_adapter(None)
    monkeypatch.setenv(name, setting)
    monkeypatch.setattr(GPUAdapter, "request_device_sync", lambda self, **kw: pytest.fail("a device was requested"))
    with pytest.raises(wk.errors.InputError) as info:
        Device(_enumerate()[summary.index], summary)
    assert info.value.argument == f"${name}" and info.value.expected == "a non-negative integer"
    assert info.value.received == repr(setting)


def test_only_gpu_adapters_spin_on_readbacks(device):
    """On a CPU adapter (lavapipe) the spin would take a core from the driver's own threads."""
    expected = 0.0 if device.adapter.adapter_type == "CPU" else buffers.READBACK_SPIN_S
    assert device.memory.spin_s == expected
    assert 0 < buffers.READBACK_SPIN_S <= 0.01  # bounded: a long readback sleeps rather than burn a core


def test_only_wgpu_runtime_errors_are_translated(device):
    """A RuntimeError raised outside wgpu is not the GPU's: it passes through untouched."""
    with pytest.raises(wk.errors.DeviceError):
        with buffers.translate_gpu_errors("test", device.memory):
            rejected("Could not map buffer")
    with pytest.raises(RuntimeError, match="ours") as info:
        with buffers.translate_gpu_errors("test", device.memory):
            raise RuntimeError("ours")
    assert type(info.value) is RuntimeError


# --- finalizers and pending writes (found in review) -------------------------------------------

_COLLECTED_INSIDE_FLUSH = """
import gc, numpy as np, webgpu_kernels as wk
from webgpu_kernels import buffers
buffers.LARGE_BUFFERS_KEPT = 0
memory, gelu = wk.get_device().memory, wk.get_kernel("com.microsoft.QuickGelu")
x = np.ones(1024, np.float32)
gelu({"X": x})  # the plan's first run, submitted on its own
memory.pool_bytes = 0  # every buffer released now is destroyed at once, unless work may still use it
y = gelu({"X": x}, output="gpu")["Y"]  # recorded into the open pass, not submitted
holder = {"y": y}; holder["self"] = holder
del y, holder
memory.flush(then=lambda encoder: gc.collect())  # a collection after the recorder was emptied
print("survived", float(gelu({"X": x})["Y"][0]))
"""


def test_a_tensor_collected_inside_flush_is_not_destroyed_under_the_submission():
    """A GpuTensor's finalizer ran release() wherever a collection started: inside flush(), after
    the open pass was taken and before the submit, it destroyed the buffer the submission wrote,
    and wgpu-native aborted the process (default GC settings: between 3,000 and 4,000 calls)."""
    import subprocess
    import sys

    result = subprocess.run([sys.executable, "-c", _COLLECTED_INSIDE_FLUSH], capture_output=True, text=True,
                            timeout=120)  # fmt: skip
    assert result.returncode == 0 and "survived" in result.stdout, (result.returncode, result.stderr[-2000:])


def test_a_finalizer_never_waits_for_the_device_lock(device, quick_gelu):
    """A copy thread (or wgpu-py's poll thread) that collected a GpuTensor blocked on the lock held
    by the thread waiting for it: a hang. Collection now queues the buffer, pooled by the next user."""

    x = np.ones(4096, f32)
    tensor = quick_gelu({"X": x}, output="gpu")["Y"]
    tensor.numpy()
    holder = {"tensor": tensor}
    holder["self"] = holder
    live = device.memory.live_buffers
    del tensor, holder
    assert collect_while_locked(device.memory), "gc.collect() waited for the device lock"
    assert device.memory.live_buffers == live  # the collected buffer is pooled, not lost
    np.testing.assert_allclose(quick_gelu({"X": x})["Y"], ref.quick_gelu(x), rtol=2e-6, atol=2e-6)


class _CountingQueue:
    def __init__(self, queue):
        self.queue, self.empty_submits = queue, 0

    def submit(self, command_buffers):
        self.empty_submits += not command_buffers
        return self.queue.submit(command_buffers)

    def __getattr__(self, name):
        return getattr(self.queue, name)


class _WithQueue:
    def __init__(self, gpu, queue):
        self._gpu, self.queue = gpu, queue

    def __getattr__(self, name):
        return getattr(self._gpu, name)


def test_uploads_with_no_dispatch_between_them_are_submitted(device, monkeypatch):
    """wgpu-native keeps a staging copy of every write_buffer until a submission carries it: 100
    to_gpu() of 16 MiB grew the host's memory by 1.6 GB, and synchronize() submitted nothing."""
    device.memory.flush()
    queue = _CountingQueue(device.memory.gpu.queue)
    monkeypatch.setattr(device.memory, "gpu", _WithQueue(device.memory.gpu, queue))
    monkeypatch.setattr(buffers, "MAX_UNSUBMITTED_WRITE_BYTES", 1 << 20)
    x = np.arange(96 << 10, dtype=f32)  # 384 KiB
    tensors = [wk.to_gpu(x + i) for i in range(3)]
    assert queue.empty_submits == 1  # the third write passed 1 MiB
    wk.synchronize()
    assert queue.empty_submits == 1  # nothing written since
    tensors.append(wk.to_gpu(x))
    wk.synchronize()
    assert queue.empty_submits == 2  # synchronize() carries pending writes too
    for i, tensor in enumerate(tensors[:3]):
        np.testing.assert_array_equal(tensor.numpy(), x + i)
        tensor.release()
