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

from conftest import run_script_for_result

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
    KernelError around a Pool's work missed (helper-54)."""
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
    queue = device.gpu.queue
    real_submit = queue.submit

    def interrupted(command_buffers):
        monkeypatch.setattr(queue, "submit", real_submit)
        raise KeyboardInterrupt

    monkeypatch.setattr(queue, "submit", interrupted)
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
for name, copier in (("copy", copy.copy), ("deepcopy", copy.deepcopy)):
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
    assert result == {"copy": expected, "deepcopy": expected}, result


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
