"""Releasing an intermediate GpuTensor right after recording the call that reads it.

A chain ``h = gelu(x); y = bias_add(h); h.release()`` gives h's buffer back to the pool while
bias_add's read of it is only recorded, not yet submitted. The next allocation of that size then
gets the same buffer (the pool hands back the last buffer released first), and it must not
change what bias_add reads:

* a later call's output is written by a dispatch recorded after bias_add's, in the same compute
  pass, which WebGPU runs in order;
* an upload (``to_gpu``) or a call's NumPy input goes through ``queue.write_buffer``, which on the
  next submit would run before every recorded dispatch, so the engine submits the recorded work
  first (DeviceMemory.write).

Each case checks that the buffer really is reused (by identity) while the read is still
unsubmitted, and compares every result with a float64 reference. The reused buffer's new data
(500 to 1000) is far from h's (below 3), so a read that saw it would be off by hundreds.
"""

from __future__ import annotations

import numpy as np
import pytest

import webgpu_kernels as wk
from webgpu_kernels.buffers import DeviceMemory

import references as ref

N, S, C = 4, 77, 768  # 0.9 MB: on a GPU, dispatches long enough to overlap if nothing ordered them
f32 = np.float32
TOL = {"rtol": 2e-5, "atol": 2e-5}  # QuickGelu (1e-5 relative) then BiasAdd's two f32 roundings

#: Who holds the intermediate's buffer, and how it goes back to the pool.
HOLDERS = ("tensor", "view, released before its base", "view, released after its base", "tensor collected")
#: What takes the released buffer next.
REUSERS = ("a call's output", "an upload", "a call's NumPy input")


def data(seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        "a": rng.uniform(-3, 3, (N, S, C)).astype(f32),  # h = QuickGelu(a) lies in (-0.3, 3)
        "other": rng.uniform(500, 1000, (N, S, C)).astype(f32),  # what the reused buffer gets
        "bias": rng.standard_normal(C).astype(f32),
        "skip": rng.standard_normal((N, S, C)).astype(f32),
    }


def warm_plans(quick_gelu, bias_add, d: dict[str, np.ndarray]) -> None:
    """Run every call of the test once: a plan's first run is submitted on its own, which would
    submit the read before the buffer is reused and make the test pass whatever the order."""
    for x in (d["a"], d["a"].reshape(N * S, C)):
        quick_gelu({"X": x})
        quick_gelu({"X": wk.to_gpu(x)}, output="gpu")["Y"].release()
    bias_add({"X": d["a"], "bias": d["bias"], "skip": d["skip"]})
    gpu = [wk.to_gpu(d[k]) for k in ("a", "bias", "skip")]
    bias_add({"X": gpu[0], "bias": gpu[1], "skip": gpu[2]}, output="gpu")["Y"].release()
    for t in gpu:
        t.release()
    wk.synchronize()


def spy_on_writes(memory: DeviceMemory, monkeypatch) -> list:
    """The buffers the queue writes host data into, in order."""
    written: list = []
    real = memory.write
    monkeypatch.setattr(memory, "write", lambda buffer, host: (written.append(buffer), real(buffer, host))[1])
    return written


@pytest.mark.parametrize("reuser", REUSERS)
@pytest.mark.parametrize("holder", HOLDERS)
def test_a_buffer_released_before_its_read_is_submitted_is_reused_after_the_read(
        holder, reuser, device, quick_gelu, bias_add, monkeypatch):  # fmt: skip
    memory = device.memory
    d = data(HOLDERS.index(holder) * 10 + REUSERS.index(reuser))
    warm_plans(quick_gelu, bias_add, d)
    x = wk.to_gpu(d["a"].reshape(N * S, C) if holder.startswith("view") else d["a"])
    other, bias, skip = wk.to_gpu(d["other"]), wk.to_gpu(d["bias"]), wk.to_gpu(d["skip"])
    wk.synchronize()  # the uploads above submitted: from here on, only calls on GpuTensors are recorded

    batch = memory.batch
    h = quick_gelu({"X": x}, output="gpu")["Y"]
    h_buffer = h.buffer
    if holder.startswith("view"):
        view = h.reshape(N, S, C)
        y = bias_add({"X": view, "bias": bias, "skip": skip}, output="gpu")["Y"]
        first, second = (view, h) if holder == "view, released before its base" else (h, view)
        first.release()
        assert h_buffer.uid in memory._leased  # the other tensor over it still holds it
        second.release()
        del view
    else:
        y = bias_add({"X": h, "bias": bias, "skip": skip}, output="gpu")["Y"]
        if holder == "tensor collected":
            pass  # its finalizer queues the buffer; the next allocation pools it
        else:
            h.release()
    del h
    # Both calls are still only recorded: the buffer goes back while bias_add's read of it waits.
    assert memory.batch == batch and memory._pending >= 2

    written = spy_on_writes(memory, monkeypatch)
    if reuser == "a call's output":
        z = quick_gelu({"X": other}, output="gpu")["Y"]
        assert z.buffer is h_buffer
        submits = 0  # recorded into the same pass, after bias_add's read
        expected = ref.quick_gelu(d["other"])
    elif reuser == "an upload":
        z = wk.to_gpu(d["other"])
        assert z.buffer is h_buffer and written == [h_buffer]
        submits = 1  # the write submitted the recorded work first
        expected = d["other"]
    else:
        z = quick_gelu({"X": d["other"]}, output="gpu")["Y"]
        assert written == [h_buffer]  # the call's staging buffer for X
        submits = 1  # as for an upload
        expected = ref.quick_gelu(d["other"])
    submitted = memory.batch - batch

    np.testing.assert_allclose(y.numpy(), ref.bias_add(ref.quick_gelu(d["a"]), d["bias"], d["skip"]), **TOL)
    np.testing.assert_allclose(z.numpy(), expected, **TOL)
    assert submitted == submits
    for t in (x, other, bias, skip, y, z):
        t.release()


def test_an_upload_that_skipped_the_submit_would_fail_the_test(device, quick_gelu, bias_add, monkeypatch):
    """The control: with DeviceMemory.write's submit of recorded work taken out, the upload's data
    reaches the queue before the recorded calls and the test above sees wrong data."""
    memory = device.memory
    d = data(99)
    warm_plans(quick_gelu, bias_add, d)
    x, bias, skip = wk.to_gpu(d["a"]), wk.to_gpu(d["bias"]), wk.to_gpu(d["skip"])
    wk.synchronize()
    h = quick_gelu({"X": x}, output="gpu")["Y"]
    h_buffer = h.buffer
    y = bias_add({"X": h, "bias": bias, "skip": skip}, output="gpu")["Y"]
    h.release()
    monkeypatch.setattr(memory, "write", lambda buffer, host: memory.gpu.queue.write_buffer(buffer, 0, host))
    z = wk.to_gpu(d["other"])
    assert z.buffer is h_buffer
    monkeypatch.undo()
    y_right = np.allclose(y.numpy(), ref.bias_add(ref.quick_gelu(d["a"]), d["bias"], d["skip"]), **TOL)
    z_right = np.allclose(z.numpy(), d["other"], **TOL)
    # QuickGelu's recorded write of h ran after the upload: z holds QuickGelu(a), not its own data.
    assert y_right and not z_right
    np.testing.assert_allclose(z.numpy(), ref.quick_gelu(d["a"]), **TOL)
    for t in (x, bias, skip, y, z):
        t.release()
