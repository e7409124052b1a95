"""Concurrency: calls from 8 threads at once on shared kernel objects and the shared device all
return correct results (8 threads x 200 calls mixing both kernels, float32/float16, NumPy and GPU
outputs, GPU-resident chains); plans built concurrently for new shapes, and evicted from caches
shrunk to a few entries while other threads use them; the pool kept consistent under releases,
collections and trims from other threads; GpuTensor.uncomputed asked while other threads'
submissions fail; template renders in parallel each under their own budget. (The library has no
asyncio API; threaded Hub loads are in test_hub.py.)
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

import webgpu_kernels as wk
from webgpu_kernels.kernel import PLAN_CACHE_SIZE
from webgpu_kernels.package import embedded_root
from webgpu_kernels.sandbox import RenderBudget

THREADS = 8
CALLS = 200


def quick_gelu_ref(x, alpha=1.702):
    x64 = x.astype(np.float64)
    return x64 / (1 + np.exp(-alpha * x64))


def close(y, expected, dtype):
    tol = 2e-3 if np.dtype(dtype) == np.float16 else 1e-5
    np.testing.assert_allclose(y.astype(np.float64), expected.astype(dtype).astype(np.float64), rtol=tol, atol=tol)


def run_threads(work, count=THREADS):
    """Run ``work(thread_index)`` in ``count`` threads released together; re-raise the first failure."""
    barrier = threading.Barrier(count)

    def start(index):
        barrier.wait()
        return work(index)

    with ThreadPoolExecutor(count) as pool:
        return [f.result() for f in [pool.submit(start, i) for i in range(count)]]


def test_8_threads_x_200_calls_on_shared_kernels(quick_gelu, bias_add, device, has_f16):
    dtypes = [np.float32, np.float16] if has_f16 else [np.float32]
    shapes = [(4, 8), (3, 5), (1, 2, 16), (7,), (2, 3, 4)]

    def work(t):
        rng = np.random.default_rng(1000 + t)
        checked = 0
        for i in range(CALLS):
            dtype = dtypes[(t + i) % len(dtypes)]
            output = "gpu" if (t * CALLS + i) % 3 == 0 else "numpy"
            kind = (t + 2 * i) % 4
            if kind == 0:  # QuickGelu, its default alpha
                x = rng.standard_normal(shapes[i % len(shapes)]).astype(dtype)
                y = quick_gelu({"X": x}, output=output)["Y"]
                expected = quick_gelu_ref(x)
            elif kind == 1:  # QuickGelu with one of a few alphas
                alpha = (0.5, 1.0, 2.0)[i % 3]
                x = rng.standard_normal(shapes[(i + t) % len(shapes)]).astype(dtype)
                y = quick_gelu({"X": x}, attrs={"alpha": alpha}, output=output)["Y"]
                expected = quick_gelu_ref(x, alpha)
            elif kind == 2:  # BiasAdd, vec4 or scalar by shape
                c = (8, 3, 4)[i % 3]
                x = rng.standard_normal((2, i % 3 + 1, c)).astype(dtype)
                bias, skip = rng.standard_normal(c).astype(dtype), rng.standard_normal(x.shape).astype(dtype)
                y = bias_add({"X": x, "bias": bias, "skip": skip}, output=output)["Y"]
                expected = x.astype(np.float64) + bias.astype(np.float64) + skip.astype(np.float64)
            else:  # a chain kept on the GPU: QuickGelu -> BiasAdd
                x = rng.standard_normal((1, 4, 8)).astype(dtype)
                bias, skip = np.ones(8, dtype), np.zeros((1, 4, 8), dtype)
                g = quick_gelu({"X": x}, output="gpu")["Y"]
                y = bias_add({"X": g, "bias": bias, "skip": skip}, output=output)["Y"]
                g.release()
                expected = quick_gelu_ref(x).astype(dtype).astype(np.float64) + 1.0
            if isinstance(y, wk.GpuTensor):
                host = y.numpy()
                y.release()
                y = host
            assert y.dtype == dtype and y.shape == expected.shape
            close(y, expected, dtype)
            checked += 1
        return checked

    results = run_threads(work)
    assert sum(results) == THREADS * CALLS


def test_8_threads_building_plans_for_new_shapes_at_once(device):
    """A fresh kernel: 8 threads ask for the same new shapes at the same moment (each plan may be
    built twice; each result must be right, and the caches stay consistent)."""
    kernel = wk.load_kernel(embedded_root() / "com.microsoft.QuickGelu")

    def work(t):
        for n in range(1, 41):
            x = np.linspace(-2, 2, n * 4 + t % 2, dtype=np.float64).astype(np.float32)
            close(kernel({"X": x})["Y"], quick_gelu_ref(x), np.float32)
        return True

    assert all(run_threads(work))
    assert len(kernel._plans) <= PLAN_CACHE_SIZE and len(kernel._fast_plans) <= PLAN_CACHE_SIZE
    # every plan still works after the race
    x = np.ones(6, np.float32)
    close(kernel({"X": x})["Y"], quick_gelu_ref(x), np.float32)


def test_8_threads_release_tensors_made_by_other_threads(quick_gelu, device):
    """GPU tensors made in one thread, read and released (or dropped) in others."""
    x = np.linspace(-1, 1, 256, dtype=np.float64).astype(np.float32)
    tensors = [quick_gelu({"X": x}, output="gpu")["Y"] for _ in range(THREADS * 8)]
    live_before = device.memory.live_buffers

    def work(t):
        mine = tensors[t::THREADS]
        for j, tensor in enumerate(mine):
            close(tensor.numpy(), quick_gelu_ref(x), np.float32)
            if j % 2:
                tensor.release()
        return True

    assert all(run_threads(work))
    tensors.clear()  # the unreleased half goes back to the pool through GpuTensor.__del__
    assert device.memory.live_buffers <= live_before + 1  # + the pooled readback staging buffer
    assert device.memory.pooled_bytes <= device.memory.pool_bytes


def test_threads_calling_one_kernel_while_its_caches_evict_every_few_calls(monkeypatch, device):
    """4 threads call one fresh kernel on 24 shapes, two workgroup sizes and both output kinds, and
    evaluate expressions, with its plan caches, its compiled-expression cache and the device's
    pipeline cache shrunk to 2-3 entries: every entry is evicted while other threads look theirs up
    or run a plan they just took from it. Each result (GPU ones read back) matches the reference."""
    from webgpu_kernels import execution
    from webgpu_kernels import kernel as kernel_module

    monkeypatch.setattr(kernel_module, "PLAN_CACHE_SIZE", 3)
    monkeypatch.setattr(kernel_module, "EVALUATED_CACHE_SIZE", 2)
    monkeypatch.setattr(execution, "PIPELINE_CACHE_SIZE", 2)
    kernel = wk.load_kernel(embedded_root() / "com.microsoft.QuickGelu")

    def work(t: int) -> int:
        rng = np.random.default_rng(t)
        for i in range(100):
            size = 1 + (7 * i + 3 * t) % 24  # vec4 and scalar variants
            tunables = None if i % 4 == 0 else {"WORKGROUP_SIZE": (64, 256)[(i // 3 + t) % 2]}
            x = rng.standard_normal(size).astype(np.float32)
            output = "gpu" if (i + t) % 2 else "numpy"
            y = kernel({"X": x}, tunables=tunables, output=output)["Y"]
            if isinstance(y, wk.GpuTensor):
                host = y.numpy()
                y.release()
                y = host
            close(y, quick_gelu_ref(x), np.float32)
            assert kernel.evaluate(f"numel(shapes.X) * {i % 5}", {"X": x}) == size * (i % 5)
        return 100

    assert sum(run_threads(work, 4)) == 400
    assert len(kernel._plans) <= 3 and len(kernel._fast_plans) <= 3 and len(kernel._evaluated) <= 2


def test_pool_stays_consistent_under_cross_thread_releases_collections_and_trims(quick_gelu, device, monkeypatch):
    """3 threads make GPU tensors and hand a third to each other, read and release them, drop others
    unreleased (pooled from GpuTensor.__del__ through release_collected) and upload inputs, while a
    4th empties the pool over and over (empty_cache: trim and flush). A tiny pool budget makes every
    release shrink the pool, destroying buffers that unsubmitted work may use, and batches of 3
    dispatches make recording submit mid-call. Every read matches the reference, and afterwards no
    buffer is pooled twice or both pooled and leased."""
    import queue

    from webgpu_kernels import buffers

    memory = device.memory
    monkeypatch.setattr(buffers, "MAX_PENDING_DISPATCHES", 3)
    monkeypatch.setattr(memory, "pool_bytes", 4096)
    handed: queue.Queue = queue.Queue()
    finished: list[int] = []  # the callers done (list.append is atomic)

    def calls(t: int) -> int:
        rng = np.random.default_rng(t)
        for i in range(150):
            x = rng.standard_normal(1 + (5 * i + t) % 40).astype(np.float32)
            y = quick_gelu({"X": x}, output="gpu")["Y"]
            expected = quick_gelu_ref(x)
            if i % 3 == 0:
                handed.put((y, expected))  # read and released by whichever thread takes it
            elif i % 3 == 1:
                close(y.numpy(), expected, np.float32)
                del y  # never released: collected
            else:
                uploaded = wk.to_gpu(x)
                close(quick_gelu({"X": uploaded})["Y"], expected, np.float32)
                uploaded.release()
                y.release()
            try:
                other, other_expected = handed.get_nowait()
            except queue.Empty:
                continue
            close(other.numpy(), other_expected, np.float32)
            other.release()
        return 150

    def work(t: int) -> int:
        if t < 3:
            try:
                return calls(t)
            finally:
                finished.append(t)
        trims = 0
        while len(finished) < 3:
            wk.empty_cache()
            trims += 1
        return trims

    counts = run_threads(work, 4)
    assert counts[:3] == [150, 150, 150]
    while not handed.empty():
        other, other_expected = handed.get()
        close(other.numpy(), other_expected, np.float32)
        other.release()
    with memory.lock:
        memory._pool_collected()
        pooled = [b for stack in memory._free.values() for b in stack]
        uids = [b.uid for b in pooled]
        assert len(uids) == len(set(uids)), "a buffer pooled twice"
        assert set(uids) == set(memory._free_order) and not set(uids) & set(memory._leased)
        assert memory._free_total == sum(b.size for b in pooled)

@pytest.mark.parametrize("read", ["numpy", "copy"])
def test_a_read_waiting_for_the_device_sees_a_release_made_meanwhile(quick_gelu, device, read):
    """numpy() and copy.copy() took the tensor's buffer before waiting for the device lock: a
    release() on another thread in that wait pooled the buffer for the next call, and the read
    returned that call's data, with no error."""
    import copy
    import time

    from webgpu_kernels.errors import TensorReleasedError

    t = wk.to_gpu(np.ones(1024, np.float32))
    quick_gelu({"X": np.zeros(1024, np.float32)})  # the plan exists: the next call only takes buffers
    seen: dict = {}

    def reader() -> None:
        try:
            seen["value"] = t.numpy() if read == "numpy" else copy.copy(t).numpy()
        except TensorReleasedError as exc:
            seen["error"] = exc

    with device.lock:  # another thread busy on the device: the reader waits for it
        thread = threading.Thread(target=reader)
        thread.start()
        time.sleep(0.3)
        t.release()
        other = quick_gelu({"X": np.full(1024, 5.0, np.float32)}, output="gpu")["Y"]  # may take t's buffer
    thread.join(10)
    assert "error" in seen or np.array_equal(seen["value"], np.ones(1024, np.float32)), seen
    other.release()


def test_binding_outside_the_recorder_waits_for_the_device_lock(quick_gelu, device):
    """execution.bind (the benchmark's timing) uses the bind-group cache that calls on other
    threads change under the device lock: unlocked, a call destroying a pooled buffer met
    "OrderedDict mutated during iteration" while a timing thread added a group."""
    import wgpu

    from webgpu_kernels.execution import bind

    _, plan = quick_gelu.plan({"X": np.ones(64, np.float32)})
    buffers = {n: (device.gpu.create_buffer(size=256, usage=wgpu.BufferUsage.STORAGE), 256) for n in ("X", "Y")}
    thread = threading.Thread(target=bind, args=(device, plan, buffers))
    with device.lock:  # as run_plan holds it
        thread.start()
        thread.join(0.3)
        assert thread.is_alive()  # waiting for the lock, not changing the cache under a call
    thread.join(10)
    assert not thread.is_alive()
    for b, _ in buffers.values():
        b.destroy()


def test_parallel_renders_have_their_own_budgets(write_package):
    """A template that uses most of one render's work budget renders in 8 threads at once: budgets are
    per render (per thread), never shared."""
    import json

    from conftest import PACKAGES_DIR

    manifest = json.loads((PACKAGES_DIR / "demo.ScaleShift" / "manifest.json").read_text())
    template = (PACKAGES_DIR / "demo.ScaleShift" / "scale-shift.wgsl.jinja").read_text()
    loops = RenderBudget().work_limit * 6 // 10 // 3  # each iteration costs 3 units: 60% of the budget
    busy = f"{{% for i in range({loops}) %}}{{{{ '' }}}}{{% endfor %}}// busy\n"
    kernel = wk.load_kernel(write_package(manifest, {"scale-shift.wgsl.jinja": busy + template}))
    metas = {"X": wk.TensorMeta((8,), "float32")}

    def work(t):
        return kernel.render(metas)["main"]

    texts = run_threads(work)
    assert all("// busy" in text for text in texts)


@pytest.mark.parametrize("adapter", [None])
def test_threads_share_one_device(adapter):
    devices = run_threads(lambda t: wk.get_device(adapter))
    assert all(d is devices[0] for d in devices)


def test_uncomputed_is_asked_while_other_threads_submissions_fail(quick_gelu, device, monkeypatch):
    """GpuTensor.uncomputed read the device's lost batches without the lock while another thread's
    failing submission added to them: "RuntimeError: Set changed size during iteration"."""
    memory = device.memory
    # Earlier failures (no real batch is < 0): each ask iterates long enough to be cut by a thread switch.
    monkeypatch.setattr(memory, "lost_batches", set(range(-4000, 0)))
    x = np.linspace(-2, 2, 64, dtype=np.float32)
    y = quick_gelu({"X": x}, output="gpu")["Y"]
    wk.synchronize()
    failures, done = 2000, threading.Event()

    class Refused(Exception):
        pass

    def refuse(encoder: object) -> None:  # as WebGPU refusing the batch at submission
        raise Refused

    def work(t: int) -> int:
        if t == 0:
            try:
                for _ in range(failures):
                    with pytest.raises(Refused):
                        memory.flush(then=refuse)
            finally:
                done.set()
            return 0
        asked = 0
        while asked < 3000 and not done.is_set():  # bounded: asking may hold the lock the failures need
            assert not y.uncomputed
            asked += 1
        return asked

    run_threads(work, 2)
    close(y.numpy(), quick_gelu_ref(x), np.float32)
    y.release()
