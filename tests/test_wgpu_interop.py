"""api.from_wgpu_buffer: a user's own wgpu buffer as a call's input, with no host round trip.

Real GPU work on the library's device (lavapipe in CI): the user's buffers are written and read
with wgpu-py's own queue and encoders, as a user's code does, and results are checked against the
float64 NumPy reference. The tensor never owns the user's buffer: release(), collection and
empty_cache() leave it alone, and the pool's counts do not move.
"""

from __future__ import annotations

import copy
import gc

import numpy as np
import pytest
import wgpu

import webgpu_kernels as wk
from webgpu_kernels.errors import InputError, TensorReleasedError

from references import assert_matches, quick_gelu_tolerance
from references import quick_gelu as quick_gelu_reference

QUICK_GELU = "com.microsoft.QuickGelu"
U = wgpu.BufferUsage
USER_USAGE = U.STORAGE | U.COPY_SRC | U.COPY_DST


def padded(nbytes: int) -> int:
    """What the library binds of a tensor of ``nbytes``: rounded up to 16, at least 16."""
    return max(16, -(-nbytes // 16) * 16)


def user_buffer(device, data: np.ndarray, *, usage: int = USER_USAGE, size: int | None = None):
    """A buffer of the user's own, written through the queue as user code writes one."""
    buffer = device.gpu.create_buffer(size=size or padded(data.nbytes), usage=usage)
    write(device, buffer, data)
    return buffer


def write(device, buffer, data: np.ndarray) -> None:
    raw = np.zeros(-(-data.nbytes // 4) * 4, np.uint8)  # queue writes take whole 4-byte words
    raw[: data.nbytes] = np.ascontiguousarray(data).reshape(-1).view(np.uint8)
    device.gpu.queue.write_buffer(buffer, 0, raw)


def read(device, buffer, shape, dtype) -> np.ndarray:
    """The user's own readback (wgpu-py's queue.read_buffer: a copy into a mappable buffer)."""
    dtype = np.dtype(dtype)
    nbytes = int(np.prod(shape)) * dtype.itemsize
    raw = np.frombuffer(device.gpu.queue.read_buffer(buffer, 0, -(-nbytes // 4) * 4), np.uint8)
    return raw[:nbytes].view(dtype).reshape(shape).copy()


def pool_state(device) -> tuple[int, int, int]:
    memory = device.memory
    return memory.live_buffers, memory.pooled_bytes, len(memory._leased)


def sample(shape, dtype, seed: int = 0) -> np.ndarray:
    return (np.random.default_rng(seed).standard_normal(shape) * 4).astype(dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float16], ids=["f32", "f16"])
def test_a_kernel_reads_a_buffer_the_user_wrote_through_the_queue(device, need_dtype, dtype):
    need_dtype(dtype)
    shape = (3, 77, 5)  # 1,155 elements: not a multiple of 4, so the vec4 variants' tail runs too
    x = sample(shape, dtype)
    buffer = user_buffer(device, x)
    tensor = wk.from_wgpu_buffer(buffer, shape, dtype)
    assert (tensor.shape, tensor.dtype, tensor.device, tensor.buffer) == (shape, np.dtype(dtype), device, buffer)
    np.testing.assert_array_equal(tensor.numpy(), x)
    y = wk.get_kernel(QUICK_GELU)({"X": tensor})["Y"]
    assert_matches(y, quick_gelu_reference(x), dtype, **quick_gelu_tolerance(dtype), what="QuickGelu of a user buffer")
    np.testing.assert_array_equal(read(device, buffer, shape, dtype), x)  # the input buffer is unchanged
    tensor.release()


def test_dtype_and_shape_are_read_as_numpy_reads_them(device):
    x = np.arange(8, dtype=np.float32)
    buffer = user_buffer(device, x)
    for dtype in (np.float32, "float32", "f4", np.dtype("float32")):
        tensor = wk.from_wgpu_buffer(buffer, [np.int64(2), 4], dtype)
        assert (tensor.shape, tensor.dtype, tensor.nbytes, tensor.bound_bytes) == ((2, 4), np.float32, 32, 32)
        tensor.release()


def test_work_the_user_submitted_before_a_call_reaches_the_kernel(device):
    """Order one: the user's own commands, submitted before the call, run before its kernel (one
    queue); to change the input after a call, the user synchronizes first (the call is only recorded)."""
    kernel = wk.get_kernel(QUICK_GELU)
    shape = (4, 64)
    first, second = sample(shape, np.float32, 1), sample(shape, np.float32, 2)
    staging = user_buffer(device, first, usage=U.COPY_SRC | U.COPY_DST)
    buffer = device.gpu.create_buffer(size=first.nbytes, usage=USER_USAGE)
    encoder = device.gpu.create_command_encoder()  # the user's copy, submitted before the call
    encoder.copy_buffer_to_buffer(staging, 0, buffer, 0, first.nbytes)
    device.gpu.queue.submit([encoder.finish()])
    tensor = wk.from_wgpu_buffer(buffer, shape, np.float32)
    y1 = kernel({"X": tensor}, output="gpu")["Y"]
    wk.synchronize()  # the call's work is submitted: a later write cannot overtake it
    write(device, buffer, second)
    y2 = kernel({"X": tensor}, output="gpu")["Y"]
    tolerance = quick_gelu_tolerance(np.float32)
    assert_matches(y1.numpy(), quick_gelu_reference(first), np.float32, **tolerance, what="before the write")
    assert_matches(y2.numpy(), quick_gelu_reference(second), np.float32, **tolerance, what="after the write")
    for t in (y1, y2, tensor):
        t.release()


def test_a_kernel_output_copied_by_the_users_encoder_after_synchronize(device):
    """Order two: a chain of calls on a user buffer, its output copied into another user buffer by
    the user's own encoder once synchronize() has submitted the library's recorded work."""
    kernel = wk.get_kernel(QUICK_GELU)
    shape = (2, 3, 40)  # 240 float32: t.nbytes is a whole number of the 4-byte words copies take
    x = sample(shape, np.float32, 3)
    tensor = wk.from_wgpu_buffer(user_buffer(device, x), shape, np.float32)
    kernel({"X": tensor})  # the first call of the shape is submitted at once: the chain below is only recorded
    h = kernel({"X": tensor}, output="gpu")["Y"]
    y = kernel({"X": h}, output="gpu")["Y"]
    wk.synchronize()
    target = device.gpu.create_buffer(size=y.nbytes, usage=U.COPY_SRC | U.COPY_DST)
    encoder = device.gpu.create_command_encoder()
    encoder.copy_buffer_to_buffer(y.buffer, 0, target, 0, y.nbytes)
    device.gpu.queue.submit([encoder.finish()])
    got = read(device, target, shape, np.float32)
    assert_matches(got, quick_gelu_reference(quick_gelu_reference(x)), np.float32, rtol=3e-5, atol=3e-6,
                   what="two QuickGelus, copied out by the user")  # fmt: skip
    for t in (h, y, tensor):
        t.release()


def test_release_collection_and_empty_cache_leave_the_users_buffer_alone(device):
    x = sample((16,), np.float32, 4)
    buffer = user_buffer(device, x)
    # An earlier test's tensor left in a reference cycle would be collected (and pooled) below, in
    # the middle of the comparison: collected first (seen in a fresh clone's CI run, once)
    gc.collect()
    before = pool_state(device)
    tensor = wk.from_wgpu_buffer(buffer, x.shape, np.float32)
    tensor.release()
    tensor.release()  # again: nothing
    assert tensor.released
    assert pool_state(device) == before
    with pytest.raises(TensorReleasedError):
        tensor.numpy()
    with pytest.raises(InputError, match="released"):
        wk.get_kernel(QUICK_GELU)({"X": tensor})
    collected = wk.from_wgpu_buffer(buffer, x.shape, np.float32)
    del collected
    gc.collect()
    assert pool_state(device) == before  # live_buffers pools what finalizers queued: nothing of the user's
    wk.empty_cache()  # destroys the pooled buffers, never the user's
    assert all(b is not buffer for b in device.memory._collected)
    # still the user's, and usable: written and read by the user, and by a call again
    again = sample((16,), np.float32, 5)
    write(device, buffer, again)
    np.testing.assert_array_equal(read(device, buffer, x.shape, np.float32), again)
    fresh = wk.from_wgpu_buffer(buffer, x.shape, np.float32)
    assert_matches(wk.get_kernel(QUICK_GELU)({"X": fresh})["Y"], quick_gelu_reference(again), np.float32,
                   **quick_gelu_tolerance(np.float32))  # fmt: skip
    fresh.release()
    # nor does the bind-group cache keep it alive once its tensors are released
    assert not any(entry[1] is buffer for key in device.memory._bind_groups for entry in key[1])
    wk.synchronize()
    buffer.destroy()  # the user's to destroy, once no call uses it


@pytest.mark.parametrize("copier", [copy.copy, copy.deepcopy], ids=["copy", "deepcopy"])
def test_a_copy_is_the_librarys_own_pooled_tensor(device, copier):
    x = sample((5, 7), np.float32, 6)
    buffer = user_buffer(device, x)
    tensor = wk.from_wgpu_buffer(buffer, x.shape, np.float32)
    duplicate = copier(tensor)
    assert duplicate.buffer is not buffer
    assert duplicate.buffer.uid in device.memory._leased  # leased from the pool, given back on release
    np.testing.assert_array_equal(duplicate.numpy(), x)
    pooled = device.memory.pooled_bytes
    duplicate.release()
    assert device.memory.pooled_bytes > pooled
    tensor.release()
    np.testing.assert_array_equal(read(device, buffer, x.shape, np.float32), x)


@pytest.mark.parametrize("make", [copy.copy, copy.deepcopy, lambda t: t.astype(np.float16),
                                  lambda t: t.reshape(-1).astype(np.float32)], ids=["copy", "deepcopy", "astype", "view"])
def test_a_copy_of_the_users_buffer_holds_its_data_when_copied(device, make, quick_gelu):
    """copy.deepcopy(t) of a lent tensor is a snapshot in the library's own buffer: since copies and
    astype were recorded into the batch it ran only at the next submission, after a
    write the user made to their buffer in between, and held the new data. A chain recorded before
    it stays recorded (the copy's submission carries it)."""
    x = sample((5, 7), np.float32, 8)
    buffer = user_buffer(device, x)
    tensor = wk.from_wgpu_buffer(buffer, x.shape, np.float32)
    quick_gelu({"X": tensor}, output="gpu")["Y"].release()  # the plan proven: the next run is recorded
    pending = quick_gelu({"X": tensor}, output="gpu")["Y"]
    snapshot = make(tensor)
    write(device, buffer, np.full_like(x, 5.0))  # the user's next data, through the queue
    expected = x.astype(snapshot.dtype).reshape(snapshot.shape)
    assert snapshot.numpy().view(np.uint8).tobytes() == expected.view(np.uint8).tobytes()
    assert_matches(pending, quick_gelu_reference(x), np.float32, **quick_gelu_tolerance(np.float32))
    for t in (tensor, pending, snapshot):
        t.release()


def _another_wgpu_device():
    return wgpu.gpu.request_adapter_sync(power_preference="high-performance").request_device_sync()


def _destroyed(device):
    buffer = device.gpu.create_buffer(size=64, usage=USER_USAGE)
    buffer.destroy()
    return buffer


#: (id, buffer maker, shape, dtype, argument, what the message says)
BAD = [
    ("not-a-buffer", lambda d: np.zeros(16, np.float32), (16,), np.float32, "buffer", ("wgpu GPUBuffer", "ndarray")),
    ("none", lambda d: None, (16,), np.float32, "buffer", ("wgpu GPUBuffer", "NoneType")),
    ("destroyed", _destroyed, (16,), np.float32, "buffer", ("destroyed",)),
    ("mapped", lambda d: d.gpu.create_buffer(size=64, usage=USER_USAGE, mapped_at_creation=True), (16,), np.float32,
     "buffer", ("unmapped", "mapped")),
    ("no-storage", lambda d: d.gpu.create_buffer(size=64, usage=U.COPY_SRC | U.COPY_DST), (16,), np.float32,
     "buffer", ("STORAGE",)),
    ("no-copy-src", lambda d: d.gpu.create_buffer(size=64, usage=U.STORAGE | U.COPY_DST), (16,), np.float32,
     "buffer", ("COPY_SRC",)),
    ("too-small", lambda d: d.gpu.create_buffer(size=64, usage=USER_USAGE), (17,), np.float32, "buffer",
     ("at least 80 bytes", "64 bytes", "16")),
    ("too-small-for-the-padding", lambda d: d.gpu.create_buffer(size=4, usage=USER_USAGE), (1,), np.float32,
     "buffer", ("at least 16 bytes", "4 bytes")),
    ("negative-dimension", lambda d: d.gpu.create_buffer(size=64, usage=USER_USAGE), (4, -1), np.float32, "shape",
     ("non-negative",)),
    ("float-dimension", lambda d: d.gpu.create_buffer(size=64, usage=USER_USAGE), (4.0,), np.float32, "shape",
     ("integer",)),
    ("string-shape", lambda d: d.gpu.create_buffer(size=64, usage=USER_USAGE), "4x4", np.float32, "shape",
     ("sequence",)),
    # an empty tensor NumPy cannot make (2^61 float32s, zeros counted as 1, are 2^63 bytes): its numpy()
    # had failed with NumPy's bare ValueError ("array is too big"), as GpuTensor.reshape refuses it
    ("huge-empty-shape", lambda d: d.gpu.create_buffer(size=64, usage=USER_USAGE), (2**61, 0), np.float32, "shape",
     ("NumPy can make", "2^63 bytes", "[2305843009213693952, 0]")),
    ("unknown-dtype", lambda d: d.gpu.create_buffer(size=64, usage=USER_USAGE), (4,), "nonsense", "dtype",
     ("float32", "nonsense")),
    ("complex-dtype", lambda d: d.gpu.create_buffer(size=64, usage=USER_USAGE), (4,), np.complex64, "dtype",
     ("float32", "complex64")),
    # the buffer holds little-endian data: a big-endian dtype would be read as another value
    ("big-endian-dtype", lambda d: d.gpu.create_buffer(size=64, usage=USER_USAGE), (4,), ">f4", "dtype",
     ("little-endian", ">f4")),
    ("another-device", lambda d: _another_wgpu_device().create_buffer(size=64, usage=USER_USAGE), (16,),
     np.float32, "buffer", ("another wgpu device", "get_device().gpu.create_buffer")),
]  # fmt: skip


@pytest.mark.parametrize(("make", "shape", "dtype", "argument", "mentions"), [b[1:] for b in BAD],
                         ids=[b[0] for b in BAD])  # fmt: skip
def test_bad_arguments_are_input_errors_naming_the_argument(device, make, shape, dtype, argument, mentions):
    buffer = make(device)
    before = pool_state(device)
    with pytest.raises(InputError) as caught:
        wk.from_wgpu_buffer(buffer, shape, dtype)
    assert caught.value.argument == argument
    assert caught.value.expected and caught.value.received
    for text in mentions:
        assert text in str(caught.value)
    assert pool_state(device) == before  # nothing changes on failure


def test_a_buffer_of_a_lost_device_is_refused(device, monkeypatch):
    buffer = device.gpu.create_buffer(size=64, usage=USER_USAGE)
    monkeypatch.setattr(device, "lost", True)  # as Device._forget marks it; get_device() still returns it here
    with pytest.raises(InputError, match="lost") as caught:
        wk.from_wgpu_buffer(buffer, (16,), np.float32)
    assert caught.value.argument == "buffer"
