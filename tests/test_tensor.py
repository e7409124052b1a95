"""GpuTensor: copies, pickling, and what a finalizer may meet."""

from __future__ import annotations

import copy
import gc
import pickle

import numpy as np
import pytest

import webgpu_kernels as wk
from webgpu_kernels.errors import TensorReleasedError
from webgpu_kernels.tensor import GpuTensor

from conftest import collect_while_locked, count_submits, interrupt_next_submit, run_script_for_result

QUICK_GELU = "com.microsoft.QuickGelu"


def quick_gelu_reference(x: np.ndarray) -> np.ndarray:
    x64 = x.astype(np.float64)
    return x64 / (1 + np.exp(-1.702 * x64))


@pytest.mark.parametrize("copier", [copy.copy, copy.deepcopy], ids=["copy", "deepcopy"])
def test_a_copy_has_its_own_buffer(copier, device):
    """copy.copy shared the buffer: dropping the copy gave it back to the pool while the original
    still used it, and the next tensor of that size overwrote the original's data."""
    x = np.arange(8, dtype=np.float32).reshape(1, 2, 4)
    original = wk.to_gpu(x)
    duplicate = copier(original)
    assert duplicate.buffer is not original.buffer
    assert (duplicate.shape, duplicate.dtype, duplicate.device) == (original.shape, original.dtype, original.device)
    np.testing.assert_array_equal(duplicate.numpy(), x)
    del duplicate
    gc.collect()
    other = wk.to_gpu(np.full_like(x, 99.0))  # may take the dropped copy's pooled buffer
    np.testing.assert_array_equal(original.numpy(), x)
    np.testing.assert_array_equal(other.numpy(), np.full_like(x, 99.0))
    original.release()
    other.release()


def test_a_copy_of_an_output_still_being_recorded_holds_the_result(device):
    """The copy follows the recorded dispatch that writes its source, in the same submission."""
    kernel = wk.get_kernel(QUICK_GELU)
    x = np.linspace(-4, 4, 4096, dtype=np.float32)
    y = kernel({"X": x}, output="gpu")["Y"]  # recorded, not yet submitted
    duplicate = copy.copy(y)
    y.release()
    np.testing.assert_allclose(duplicate.numpy(), quick_gelu_reference(x), rtol=1e-5, atol=1e-6)
    duplicate.release()


def test_a_copy_between_recorded_calls_is_recorded_with_them(device, monkeypatch):
    """call -> copy -> call -> astype -> copy -> numpy(): the copies join the calls' batch (no
    submission until the read), each bit for bit its source; a source released after its copy was
    recorded gives its buffer to the next call's output, which the copy read before."""
    kernel = wk.get_kernel("com.microsoft.QuickGelu")
    rng = np.random.default_rng(7)
    x, far = rng.uniform(-3, 3, 1001).astype(np.float32), rng.uniform(500, 1000, 1001).astype(np.float32)
    tx, tfar = wk.to_gpu(x), wk.to_gpu(far)
    y_host = kernel({"X": x})["Y"]  # the GPU's data the chain copies
    z_host = kernel({"X": y_host})["Y"]
    kernel({"X": tx}, output="gpu")["Y"].astype(np.float16).release()  # the plan proven, the pipeline built
    wk.synchronize()
    submits = count_submits(device, monkeypatch)
    y = kernel({"X": tx}, output="gpu")["Y"]
    source = y.buffer
    duplicate = copy.copy(y)
    y.release()
    w = kernel({"X": tfar}, output="gpu")["Y"]  # writes values near 500-1000 into y's old buffer
    z = kernel({"X": duplicate}, output="gpu")["Y"]
    converted = z.astype(np.float16)
    half = copy.deepcopy(converted)
    assert w.buffer is source and submits == []  # all recorded, nothing submitted
    np.testing.assert_array_equal(half.numpy(), z_host.astype(np.float16))
    assert len(submits) == 1  # the read submits the whole chain at once
    np.testing.assert_array_equal(duplicate.numpy(), y_host)
    np.testing.assert_array_equal(z.numpy(), z_host)
    np.testing.assert_allclose(w.numpy(), quick_gelu_reference(far), rtol=1e-5, atol=1e-6)
    for t in (tx, tfar, duplicate, w, z, converted, half):
        t.release()


def test_a_recorded_copy_whose_batch_is_lost_refuses_to_be_read(device, monkeypatch):
    t = wk.to_gpu(np.arange(64, dtype=np.float32))
    duplicate = copy.copy(t)
    interrupt_next_submit(device, monkeypatch)
    with pytest.raises(KeyboardInterrupt):
        wk.synchronize()
    assert duplicate.uncomputed and not t.uncomputed
    with pytest.raises(wk.UncomputedTensorError, match="cannot read a GpuTensor whose computing work never reached"):
        duplicate.numpy()
    again = copy.copy(t)  # the next one runs
    np.testing.assert_array_equal(again.numpy(), np.arange(64, dtype=np.float32))
    for tensor in (t, duplicate, again):
        tensor.release()


def test_a_copy_cut_short_while_it_ends_the_open_pass_leaves_later_work_running(device, monkeypatch):
    """A Ctrl-C inside the compute pass's end() (record_copy ends the open pass before its copy) had
    left the pass open and the encoder locked: the next call, a clean one, failed with 'WebGPU
    refused the work ... Encoder is locked by a previously created render/compute pass', and every
    call recorded after the copy lost its data. The batch cut short is lost (as a Ctrl-C in flush
    makes it), and later calls run."""
    kernel = wk.get_kernel(QUICK_GELU)
    x = np.linspace(-3, 3, 4096, dtype=np.float32)
    before = kernel({"X": x}, output="gpu")["Y"]  # the plan is proven: later runs are recorded
    wk.synchronize()
    cut = kernel({"X": x}, output="gpu")["Y"]  # recorded into an open compute pass
    compute_pass = type(device.memory._pass)
    real_end = compute_pass.end

    def interrupted(self):
        monkeypatch.setattr(compute_pass, "end", real_end)
        raise KeyboardInterrupt

    monkeypatch.setattr(compute_pass, "end", interrupted)
    with pytest.raises(KeyboardInterrupt):
        copy.copy(cut)
    assert cut.uncomputed and not before.uncomputed
    later = kernel({"X": x}, output="gpu")["Y"]  # a NumPy input: its upload flushes the batch first
    duplicate = copy.copy(later)
    np.testing.assert_array_equal(duplicate.numpy(), kernel({"X": x})["Y"])
    np.testing.assert_allclose(later.numpy(), quick_gelu_reference(x), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(before.numpy(), quick_gelu_reference(x), rtol=1e-5, atol=1e-6)
    for t in (before, cut, later, duplicate):
        t.release()


def test_a_read_cut_short_before_anything_was_recorded_loses_no_later_work(device, monkeypatch):
    """A Ctrl-C in the command encoder a read makes when nothing is recorded marked the batch being
    recorded lost without moving on to the next: every call recorded after it went into that batch,
    ran, and its outputs still refused to be read (UncomputedTensorError) until some submission."""
    kernel = wk.get_kernel(QUICK_GELU)
    x = np.linspace(-3, 3, 4096, dtype=np.float32)
    kernel({"X": x}, output="gpu")["Y"].release()  # the plan is proven: later runs are recorded
    t = wk.to_gpu(x)
    wk.synchronize()
    gpu = device.gpu
    real_create = gpu.create_command_encoder

    def interrupted(*args, **kwargs):
        monkeypatch.setattr(gpu, "create_command_encoder", real_create)
        raise KeyboardInterrupt

    monkeypatch.setattr(gpu, "create_command_encoder", interrupted)
    with pytest.raises(KeyboardInterrupt):
        t.numpy()
    y = kernel({"X": t}, output="gpu")["Y"]
    duplicate = copy.copy(t)
    assert not y.uncomputed and not duplicate.uncomputed
    np.testing.assert_allclose(y.numpy(), quick_gelu_reference(x), rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(duplicate.numpy(), x)
    for tensor in (t, y, duplicate):
        tensor.release()


def test_deepcopy_copies_every_tensor_of_a_structure_and_keeps_shared_ones_shared(device):
    x = np.ones((4, 4), np.float32)
    t = wk.to_gpu(x)
    state = {"a": t, "b": [t, 3]}
    clone = copy.deepcopy(state)
    assert clone["a"] is clone["b"][0] and clone["a"] is not t
    t.release()
    np.testing.assert_array_equal(clone["a"].numpy(), x)
    clone["a"].release()


def test_an_empty_tensor_copies(device):
    empty = wk.to_gpu(np.zeros((0, 3), np.float32))
    duplicate = copy.copy(empty)
    assert duplicate.shape == (0, 3) and duplicate.numpy().shape == (0, 3)


def test_a_released_tensor_cannot_be_copied(device):
    t = wk.to_gpu(np.ones(4, np.float32))
    t.release()
    with pytest.raises(TensorReleasedError):
        copy.copy(t)


def test_pickling_is_a_clear_type_error(device):
    """pickle and deepcopy had walked into the device's internals: a cffi TypeError, then two
    finalizer tracebacks from half-built objects. It was a bare TypeError, which a caller catching
    KernelError around a Pool's work missed."""
    t = wk.to_gpu(np.ones(4, np.float32))
    with pytest.raises(wk.NotPicklableError, match=r"a GpuTensor cannot be pickled.*t\.numpy\(\)") as info:
        pickle.dumps({"weights": t})
    assert isinstance(info.value, TypeError)  # as pickle's own refusals; and a KernelError, so typed
    t.release()


def test_the_finalizer_of_an_instance_init_never_filled_is_silent(recwarn):
    shell = GpuTensor.__new__(GpuTensor)
    shell.__del__()  # raised AttributeError('_buffer'), printed as "Exception ignored in ..."


def test_reprs_name_the_adapter_with_its_backend(device):
    t = wk.to_gpu(np.ones((2, 3), np.float16 if device.has_f16 else np.float32))
    assert repr(t) == f"GpuTensor(shape=(2, 3), dtype={t.dtype.name}, {device.adapter.label()})"
    assert repr(device) == f"Device({device.adapter.label()})"
    t.release()
    assert repr(t) == f"GpuTensor(shape=(2, 3), dtype={t.dtype.name}, released)"


def test_a_tensor_whose_submission_was_cut_short_refuses_to_be_read(device, monkeypatch):
    """A Ctrl-C between flush() emptying the recorder and submit returning dropped the recorded
    work: its tensors then read whatever their pooled buffers held before, silently (a review saw
    another call's results). They say so now; earlier tensors and later calls are unaffected."""
    kernel = wk.get_kernel("com.microsoft.QuickGelu")
    x = np.linspace(-3, 3, 4096, dtype=np.float32)
    before = kernel({"X": x}, output="gpu")["Y"]  # its plan is proven: later runs are recorded
    wk.synchronize()
    cut = kernel({"X": x}, output="gpu")["Y"]
    interrupt_next_submit(device, monkeypatch)
    with pytest.raises(KeyboardInterrupt):
        wk.synchronize()
    assert cut.uncomputed and not before.uncomputed
    with pytest.raises(wk.UncomputedTensorError, match="never reached the GPU"):
        cut.numpy()
    with pytest.raises(wk.UncomputedTensorError):
        copy.copy(cut)
    with pytest.raises(wk.InputError, match="argument 'X': expected a GpuTensor holding computed data"):
        kernel({"X": cut})
    np.testing.assert_allclose(before.numpy(), quick_gelu_reference(x), rtol=1e-5, atol=1e-6)
    again = kernel({"X": before}, output="gpu")["Y"]
    assert not again.uncomputed
    np.testing.assert_allclose(again.numpy(), quick_gelu_reference(quick_gelu_reference(x)), rtol=1e-4, atol=1e-5)
    for t in (before, cut, again):
        t.release()


def test_a_tensor_read_while_its_batch_is_being_submitted_is_not_uncomputed(device, monkeypatch):
    """A review's race: the batch had counted as lost from the start of flush() until submit
    returned, so a read or an input check on another thread during a normal flush raised a false
    UncomputedTensorError. Seen from inside the submit, it is not lost."""
    kernel = wk.get_kernel("com.microsoft.QuickGelu")
    x = np.linspace(-3, 3, 4096, dtype=np.float32)
    kernel({"X": x}, output="gpu")["Y"].release()  # the plan is proven: later runs are recorded
    y = kernel({"X": x}, output="gpu")["Y"]
    queue, seen = device.gpu.queue, []
    real_submit = queue.submit

    def watching(command_buffers):
        seen.append(y.uncomputed)
        return real_submit(command_buffers)

    monkeypatch.setattr(queue, "submit", watching)
    wk.synchronize()
    monkeypatch.undo()
    assert seen == [False] and not y.uncomputed
    np.testing.assert_allclose(y.numpy(), quick_gelu_reference(x), rtol=1e-5, atol=1e-6)
    y.release()


AT_EXIT = """
import numpy as np
import webgpu_kernels as wk
T = wk.to_gpu(np.ones(8, np.float32))
class Holder:
    def __del__(self):
        try:
            T.numpy()
            print("read")
        except wk.TensorReleasedError as exc:
            print(exc)
h = Holder()
"""


def test_a_tensor_read_after_its_finalizer_at_exit_says_the_interpreter_is_exiting():
    """At exit Python finalizes module globals in order (T before h here), so h's finalizer reads
    a tensor its own finalizer released: the error had said only "released", though the user had
    released nothing. A tensor released by hand keeps the plain message."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", AT_EXIT], capture_output=True, text=True, timeout=120)
    assert done.stdout.strip().splitlines()[-1:] == [
        "this GPU tensor was released (the interpreter is exiting, and it finalizes objects in any order)"
    ], (done.stdout, done.stderr[-2000:])
    tensor = wk.to_gpu(np.ones(2, np.float32))
    tensor.release()
    with pytest.raises(TensorReleasedError, match=r"^this GPU tensor was released: release\(\) gave its buffer"):
        tensor.numpy()


def test_a_released_tensor_says_what_happened_and_what_to_do():
    """to_gpu(t) on t's own device is t itself: a user who took it for a copy released one name and
    read the other, and was told only "this GPU tensor was released". The message says how a tensor
    comes to be released under another name, and to release after the last use."""
    x = wk.to_gpu(np.ones(4, np.float32))
    y = wk.to_gpu(x)  # the same tensor
    x.release()
    for use in (y.numpy, lambda: np.asarray(y), lambda: copy.copy(y)):
        with pytest.raises(TensorReleasedError) as info:
            use()
        assert "to_gpu(t) on t's device returns t itself" in str(info.value)
        assert "release a tensor after its last use" in str(info.value)


LOST_COPY_SCRIPT = """
import copy, json, numpy as np
import webgpu_kernels as wk
k = wk.get_kernel("com.microsoft.QuickGelu")
x = np.linspace(-3, 3, 64, dtype=np.float32)
old = wk.to_gpu(x)
wk.get_device().gpu.destroy()  # what a driver reset does
try:
    k({"X": x})  # the call that finds the device lost
except wk.DeviceLostError:
    pass
out = {}
for name, copier in (("copy", copy.copy), ("deepcopy", copy.deepcopy), ("astype", lambda t: t.astype(np.float16))):
    try:
        copier(old)
        out[name] = "no error"
    except Exception as exc:
        out[name] = [type(exc).__name__, str(exc)]
print("RESULT " + json.dumps(out))
"""


def test_a_copy_of_a_tensor_whose_device_was_lost_says_its_data_is_gone():
    """copy.copy of such a tensor had said 'the WebGPU device was lost (copying a GPU tensor): ...
    the next call opens a new one', which never helps that tensor (numpy() said its data is gone).
    In a child process: the device is destroyed."""
    from webgpu_kernels.tensor import LOST_TENSOR

    result = run_script_for_result(LOST_COPY_SCRIPT)
    expected = ["DeviceLostError", f"cannot copy {LOST_TENSOR}"]
    assert result == {"copy": expected, "deepcopy": expected,
                      "astype": ["DeviceLostError", f"cannot convert {LOST_TENSOR}"]}, result


def test_kernel_flush_submits_the_device_its_calls_ran_on(gl_device, monkeypatch):
    """Kernel.flush(adapter=...) submits that adapter's recorded work; it had always flushed the
    default device, so work recorded on another one waited for a read."""
    kernel = wk.get_kernel("com.microsoft.QuickGelu")
    x = np.linspace(-3, 3, 4096, dtype=np.float32)
    kernel({"X": x}, output="gpu", adapter="gl")["Y"].release()  # the plan is proven: later runs are recorded
    y = kernel({"X": x}, output="gpu", adapter="gl")["Y"]
    queue, submitted = gl_device.gpu.queue, []
    real_submit = queue.submit
    monkeypatch.setattr(queue, "submit", lambda buffers: (submitted.append(len(buffers)), real_submit(buffers)))
    kernel.flush()  # the default device: nothing of the GL device's is submitted
    assert submitted == []
    kernel.flush(adapter="gl")
    assert submitted == [1]
    monkeypatch.undo()
    np.testing.assert_allclose(y.numpy(), quick_gelu_reference(x), rtol=1e-5, atol=1e-6)
    y.release()


# --- reshape: views over one buffer ----------------------------------------------------------


def times_pooled(memory, buffer) -> int:
    """How often ``buffer`` sits in the pool's free stacks: twice, two later calls would both get it."""
    memory.live_buffers  # noqa: B018 - pools the buffers finalizers queued
    return sum(b is buffer for stack in memory._free.values() for b in stack)


def test_reshape_gives_a_view_over_the_same_buffer(device):
    x = np.arange(2 * 3 * 4, dtype=np.float32).reshape(2, 3, 4)
    t = wk.to_gpu(x)
    live = device.memory.live_buffers
    for asked, expected in [((6, 4), (6, 4)), (((6, 4),), (6, 4)), (([4, 6],), (4, 6)), ((-1,), (24,)),
                            ((2, -1, 3), (2, 4, 3)), ((np.int64(3), -1), (3, 8)), ((np.array([12, 2]),), (12, 2))]:  # fmt: skip
        view = t.reshape(*asked)
        assert device.memory.live_buffers == live  # no copy
        assert view.shape == expected, asked
        assert view.buffer is t.buffer
        assert (view.dtype, view.device, view.nbytes, view.bound_bytes) == (t.dtype, t.device, t.nbytes, t.bound_bytes)
        np.testing.assert_array_equal(view.numpy(), x.reshape(expected))
        assert repr(view) == f"GpuTensor(shape={expected}, dtype=float32, {device.adapter.label()})"
        live = device.memory.live_buffers  # numpy()'s staging buffer, pooled
    empty = wk.to_gpu(np.zeros((0, 3), np.float32)).reshape(3, 0)
    assert empty.shape == (3, 0) and empty.numpy().shape == (3, 0)
    assert wk.to_gpu(np.ones(1, np.float32)).reshape().shape == ()


@pytest.mark.parametrize(
    ("asked", "got"),
    [((5, 5), "got shape [5, 5] of 25 elements"), ((-1, -1), "got shape [-1, -1], with 2 dimensions of -1"),
     ((5, -1), "got shape [5, -1], which no size for its -1 fits"),
     ((-2, -12), "got shape [-2, -12], with a negative dimension other than -1"),
     ((2.0, 12), "expected integer dimensions (one may be -1, inferred), got float 2.0 as dimension 0"),
     ((True, 24), "got bool True as dimension 0")],
)  # fmt: skip
def test_a_reshape_to_another_element_count_names_both_shapes(asked, got, device):
    t = wk.to_gpu(np.ones((4, 6), np.float32))
    with pytest.raises(wk.errors.ShapeError) as info:
        t.reshape(*asked)
    assert isinstance(info.value, wk.InputError) and info.value.argument == "shape"
    assert got in str(info.value)
    if "integer" not in got and "bool" not in got:
        assert "expected a shape of 24 elements, as the tensor's shape [4, 6]" in str(info.value)
    with pytest.raises(wk.errors.RankError, match="rank at most 64"):
        t.reshape(range(10**12))
    assert t._shares is None  # a refused reshape shares nothing
    np.testing.assert_array_equal(t.numpy(), np.ones((4, 6), np.float32))


def test_a_view_is_a_kernel_input_and_a_view_of_a_recorded_output_waits_for_it(device, quick_gelu):
    x = np.random.default_rng(7).standard_normal((2, 77, 768)).astype(np.float32)
    t = wk.to_gpu(x)
    flat = t.reshape(2 * 77, 768)
    y = quick_gelu({"X": flat}, output="gpu")["Y"]
    assert y.shape == (2 * 77, 768)
    np.testing.assert_allclose(y.numpy(), quick_gelu_reference(x.reshape(2 * 77, 768)), rtol=1e-5, atol=1e-6)
    # a view of an output still being recorded: the call reading it follows the dispatch that writes it
    z = quick_gelu({"X": y.reshape(2, 77, -1)}, output="gpu")["Y"]
    assert z.shape == (2, 77, 768)
    np.testing.assert_allclose(z.numpy(), quick_gelu_reference(quick_gelu_reference(x)), rtol=1e-4, atol=1e-5)
    for tensor in (t, flat, y, z):
        tensor.release()


ORDERS = {
    "base first": (0, 1, 2, 3),
    "view first": (1, 0, 2, 3),
    "views of views first": (2, 3, 1, 0),
    "interleaved": (3, 0, 2, 1),
}


@pytest.mark.parametrize("order", ORDERS.values(), ids=ORDERS.keys())
def test_the_buffer_goes_back_to_the_pool_once_after_the_last_tensor_over_it(order, device, quick_gelu):
    """Tensors: a base, a view of it, a view of that view, a second view of the base. Releasing one
    leaves the others working; the buffer is pooled once, on the last release."""
    memory = device.memory
    x = np.linspace(-3, 3, 4 * 256, dtype=np.float32).reshape(4, 256)
    base = wk.to_gpu(x)
    first = base.reshape(16, 64)
    tensors = [base, first, first.reshape(-1), base.reshape(2, 2, 256)]
    buffer, releases = base.buffer, memory._releases
    for step, index in enumerate(order):
        tensors[index].release()
        with pytest.raises(TensorReleasedError):
            tensors[index].numpy()
        with pytest.raises(TensorReleasedError):
            tensors[index].reshape(-1)
        alive = [tensors[i] for i in order[step + 1 :]]
        for tensor in alive:
            np.testing.assert_array_equal(tensor.numpy(), x.reshape(tensor.shape))
        if alive:  # still in use: not pooled, and it still works as a call's input
            assert times_pooled(memory, buffer) == 0 and buffer.uid in memory._leased
            y = quick_gelu({"X": alive[0]})["Y"]
            np.testing.assert_allclose(y, quick_gelu_reference(x).reshape(alive[0].shape), rtol=1e-5, atol=1e-6)
            releases = memory._releases  # the call's own buffers come and go
    assert times_pooled(memory, buffer) == 1 and buffer.uid not in memory._leased
    assert memory._releases == releases + 1
    # Pooled twice, the next two tensors of this size would share it: one would overwrite the other.
    a, b = wk.to_gpu(np.zeros_like(x)), wk.to_gpu(np.ones_like(x))
    assert a.buffer is not b.buffer
    np.testing.assert_array_equal(a.numpy(), np.zeros_like(x))
    a.release()
    b.release()


@pytest.mark.parametrize("released", [None, "base", "view"])
def test_collected_views_pool_the_buffer_once(released, device):
    memory = device.memory
    base = wk.to_gpu(np.arange(64, dtype=np.float32))
    views = [base.reshape(8, 8), base.reshape(4, -1)]
    views.append(views[0].reshape(2, 4, 8))
    buffer = base.buffer
    if released == "base":
        base.release()
    elif released == "view":
        views[1].release()
    cycle: dict = {"views": views}
    cycle["self"] = cycle  # collected by gc.collect(), not by the reference count
    del views
    gc.collect()
    assert times_pooled(memory, buffer) == 0
    if released != "base":
        np.testing.assert_array_equal(base.numpy(), np.arange(64, dtype=np.float32))
        view = base.reshape(64)
        del base
        gc.collect()
        assert times_pooled(memory, buffer) == 0
        np.testing.assert_array_equal(view.numpy(), np.arange(64, dtype=np.float32))
        del view
    else:
        del base
    cycle.clear()
    gc.collect()
    assert times_pooled(memory, buffer) == 1 and buffer.uid not in memory._leased


def test_collecting_a_view_never_waits_for_the_device_lock(device):
    """A finalizer may run in a thread the lock holder waits for: a view's, like any tensor's, only
    queues its buffer (or pops its share) and never takes the lock."""

    memory = device.memory
    base = wk.to_gpu(np.ones(256, np.float32))
    buffer = base.buffer
    holder = {"views": [base.reshape(16, 16), base.reshape(-1, 2)]}
    holder["self"] = holder
    base.release()
    del base, holder
    assert collect_while_locked(memory), "gc.collect() waited for the device lock"
    assert times_pooled(memory, buffer) == 1


def test_views_of_a_borrowed_buffer_never_pool_it(device, quick_gelu):
    import wgpu

    memory, gpu = device.memory, device.gpu
    x = np.linspace(-3, 3, 512, dtype=np.float32)
    usage = wgpu.BufferUsage.STORAGE | wgpu.BufferUsage.COPY_SRC | wgpu.BufferUsage.COPY_DST
    mine = gpu.create_buffer(size=x.nbytes, usage=usage)
    gpu.queue.write_buffer(mine, 0, x)
    base = wk.from_wgpu_buffer(mine, x.shape, np.float32)
    view = base.reshape(8, 64)
    deeper = view.reshape(2, -1)
    base.release()
    np.testing.assert_allclose(quick_gelu({"X": view})["Y"], quick_gelu_reference(x).reshape(8, 64), rtol=1e-5, atol=1e-6)
    view.release()
    np.testing.assert_array_equal(deeper.numpy(), x.reshape(2, 256))
    collected = deeper.reshape(512)
    del collected
    gc.collect()
    deeper.release()
    gc.collect()
    assert times_pooled(memory, mine) == 0 and mine.uid not in memory._leased
    np.testing.assert_array_equal(np.frombuffer(gpu.queue.read_buffer(mine), np.float32), x)  # still the user's
    again = wk.from_wgpu_buffer(mine, x.shape, np.float32)
    np.testing.assert_array_equal(again.numpy(), x)
    again.release()
    mine.destroy()


def test_a_copy_of_a_view_is_a_tensor_of_its_own(device):
    x = np.arange(12, dtype=np.float32)
    base = wk.to_gpu(x)
    view = base.reshape(3, 4)
    duplicate = copy.copy(view)
    assert duplicate.buffer is not view.buffer and duplicate.shape == (3, 4) and duplicate._shares is None
    base.release()
    view.release()
    np.testing.assert_array_equal(duplicate.numpy(), x.reshape(3, 4))
    buffer = duplicate.buffer
    duplicate.release()
    assert times_pooled(device.memory, buffer) == 1


def test_threads_releasing_views_of_one_buffer_pool_it_once(device):
    import threading

    memory, holders = device.memory, 8
    barrier = threading.Barrier(holders)
    for _ in range(25):
        base = wk.to_gpu(np.ones((8, 8), np.float32))
        tensors = [base] + [base.reshape(-1, 8 * (i % 2 + 1)) for i in range(holders - 1)]
        buffer, releases = base.buffer, memory._releases

        def release(tensor) -> None:
            barrier.wait(10)
            tensor.release()

        threads = [threading.Thread(target=release, args=(t,)) for t in tensors]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert times_pooled(memory, buffer) == 1 and memory._releases == releases + 1


@pytest.mark.parametrize("shared", [False, True], ids=["unshared", "already-viewed"])
def test_a_tensor_released_while_it_is_being_reshaped_gives_no_view(shared, device, monkeypatch):
    """Another thread's release() between reshape's read of the buffer and the view's link pooled
    the buffer, and the view then read the next tensor's data. Here the release runs
    inside reshape, at that point: the view is refused and the buffer pooled once."""
    from webgpu_kernels import tensor as tensor_module

    x = np.arange(24, dtype=np.float32)
    base = wk.to_gpu(x)
    other = base.reshape(4, 6) if shared else None
    buffer, real = base.buffer, tensor_module._reshaped

    def released_meanwhile(*args):
        base.release()
        return real(*args)

    monkeypatch.setattr(tensor_module, "_reshaped", released_meanwhile)
    with pytest.raises(TensorReleasedError):
        base.reshape(2, 12)
    monkeypatch.setattr(tensor_module, "_reshaped", real)
    if other is not None:  # still the buffer's holder: nothing pooled yet
        assert times_pooled(device.memory, buffer) == 0
        np.testing.assert_array_equal(other.numpy(), x.reshape(4, 6))
        other.release()
    assert times_pooled(device.memory, buffer) == 1


def test_a_view_of_an_empty_tensor_refuses_a_dimension_no_array_can_have(device):
    """reshape(2**62, 0) of an empty tensor made a view whose numpy() raised NumPy's bare ValueError
    ("array is too big"), which from_wgpu_buffer refuses for the same shape."""
    empty = wk.to_gpu(np.zeros((0, 4), np.float32))
    with pytest.raises(wk.errors.ShapeError) as info:
        empty.reshape(2**62, 0)
    assert info.value.argument == "shape" and "[4611686018427387904, 0]" in str(info.value)
    with pytest.raises(wk.errors.ShapeError):  # 2^61 elements of 4 bytes: too many bytes for NumPy
        empty.reshape(0, 2**61)
    assert empty.reshape(2**20, 0, 7).numpy().shape == (2**20, 0, 7)  # NumPy makes that one
