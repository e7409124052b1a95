"""GpuTensor.astype: float32 <-> float16 on the device (conversion.py), against NumPy's astype.

On lavapipe (Vulkan and OpenGL) the GPU's conversion agrees with NumPy's bit for bit: every
float16 pattern to float32, and float32 values of every kind to float16 (round to nearest even,
subnormals, signed zeros, the infinity past 65504). NaN stays NaN; its payload is not compared.
"""

from __future__ import annotations

import copy
import types

import numpy as np
import pytest
import wgpu

import webgpu_kernels as wk
from webgpu_kernels import GpuTensor, conversion
from webgpu_kernels.errors import DeviceLimitError, DTypeError, TensorReleasedError, UncomputedTensorError
from webgpu_kernels.rendering import workgroup_grid

import references as ref
from conftest import count_submits, interrupt_next_submit

F32, F16 = np.float32, np.float16
QUICK_GELU = "com.microsoft.QuickGelu"


def assert_same_floats(got: np.ndarray, expected: np.ndarray) -> None:
    """Bit for bit, NaN only as NaN (payloads are the GPU's); -0.0 and 0.0 differ."""
    assert got.dtype == expected.dtype and got.shape == expected.shape
    nan = np.isnan(expected)
    np.testing.assert_array_equal(np.isnan(got), nan)
    bits = {2: np.uint16, 4: np.uint32}[expected.dtype.itemsize]
    mismatch = np.flatnonzero(got[~nan].view(bits) != expected[~nan].view(bits))
    assert mismatch.size == 0, (f"{mismatch.size} of {nan.size} differ; first: {expected[~nan][mismatch[:5]]} "
                                f"gave {got[~nan][mismatch[:5]]}")  # fmt: skip


def to_half(x: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):  # past 65504 is the infinity, as NumPy warns
        return x.astype(F16)


def float32_values(rng: np.random.Generator) -> np.ndarray:
    """Every kind of float32 for a float16 target: specials, ties, float16's subnormal and normal
    ranges, past its range, float32's subnormals, and random bit patterns."""
    half_ulp_ties = (1 + np.arange(1, 64) * 2.0**-11).astype(F32)  # odd multiples of half an ulp at 1: ties
    specials = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, -np.nan, 65504, 65519, 65520, 1e5, -1e6, 3.4e38,
                         2.0**-24, 2.0**-25, 1.5 * 2.0**-25, 2.0**-26, -(2.0**-25), 2.0**-14, 2.0**-14 * (1 - 2.0**-11),
                         1e-40, -1e-40, 1e-45], F32)  # fmt: skip
    normal = (rng.standard_normal(4096) * 100).astype(F32)
    subnormal = (rng.uniform(-(2.0**-14), 2.0**-14, 4096)).astype(F32)
    tiny = rng.uniform(-1e-38, 1e-38, 256).astype(F32)  # float32 subnormals: to +-0 in float16
    patterns = rng.integers(0, 2**32, 1 << 16, dtype=np.uint64).astype(np.uint32).view(F32)
    return np.concatenate([specials, half_ulp_ties, -half_ulp_ties, normal, subnormal, tiny, patterns])


@pytest.fixture(params=["default", "gl"])
def adapter(request):
    """The default adapter, and the OpenGL one without shader-f16 (astype needs no shader-f16)."""
    if request.param == "gl":
        request.getfixturevalue("gl_device")
        return "gl"
    return None


def test_float32_to_float16_and_back_match_numpy_bit_for_bit(adapter):
    x = float32_values(np.random.default_rng(0))
    t = wk.to_gpu(x, adapter=adapter)
    h = t.astype(np.float16)
    assert (h.shape, h.dtype, h.nbytes) == (x.shape, np.dtype(F16), x.size * 2) and h.buffer is not t.buffer
    expected = to_half(x)
    assert_same_floats(h.numpy(), expected)
    back = h.astype("float32")
    assert_same_floats(back.numpy(), expected.astype(F32))
    assert_same_floats(t.numpy(), x)  # the source is untouched
    for tensor in (t, h, back):
        tensor.release()


def test_every_float16_becomes_its_float32(adapter):
    halves = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(F16).reshape(256, 256)
    h = wk.to_gpu(halves, adapter=adapter)
    f = h.astype(np.dtype(np.float32))
    assert f.shape == (256, 256)
    assert_same_floats(f.numpy(), halves.astype(F32))
    h.release()
    f.release()


@pytest.mark.parametrize("count", [0, 1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 17, 127, 129])
def test_odd_even_and_empty_counts_convert_and_the_padding_half_is_not_data(count, device):
    """An odd count's last word holds one half of padding: written by the float32 -> float16
    shader, it lies past nbytes, and the float16 -> float32 shader never writes a float for it."""
    rng = np.random.default_rng(count)
    x = (rng.standard_normal((count,)) * 10).astype(F32)
    t = wk.to_gpu(x)
    h = t.astype(np.float16)
    assert h.nbytes == 2 * count
    assert_same_floats(h.numpy(), x.astype(F16))
    # A float32 target over a pooled buffer full of another tensor's data: only count floats are written.
    wk.to_gpu(np.full(count + 8, 7.0, F32)).release()
    back = h.astype(np.float32)
    assert_same_floats(back.numpy(), x.astype(F16).astype(F32))
    shaped = wk.to_gpu(x.reshape(1, count, 1)).astype(np.float16)
    assert shaped.shape == (1, count, 1)
    assert_same_floats(shaped.numpy(), x.astype(F16).reshape(1, count, 1))
    for tensor in (t, h, back, shaped):
        tensor.release()


def test_a_grid_past_65535_workgroups_spills_into_y(device):
    """65,535 workgroups of 64 invocations convert 8,388,480 elements; a few more need a second row."""
    limit = device.limits["max-compute-workgroups-per-dimension"]
    count = 2 * conversion.WORKGROUP_SIZE * limit + 2 * 3 * conversion.WORKGROUP_SIZE + 1
    assert count <= conversion.chunk_elements(device)  # one dispatch, whose grid spills
    assert workgroup_grid(-(-count // 2), conversion.WORKGROUP_SIZE, limit)[1] > 1
    rng = np.random.default_rng(1)
    x = (rng.standard_normal(count) * 1000).astype(F32)
    t = wk.to_gpu(x)
    h = t.astype(np.float16)
    t.release()
    expected = to_half(x)
    assert_same_floats(h.numpy(), expected)
    back = h.astype(np.float32)
    h.release()
    got = back.numpy()
    back.release()
    assert_same_floats(got, expected.astype(F32))  # the tail, past the first row, included


@pytest.mark.parametrize("count", [1001, 129, 250])
def test_a_tensor_past_one_binding_converts_in_chunks(count, device, monkeypatch):
    """Past maxStorageBufferBindingSize the conversion binds the tensor a chunk at a time (offsets
    of 256 bytes' multiples); chunks of 128 elements here, the last one short (odd or even), bound
    to its own elements only: a whole chunk's binding runs past a small tensor's buffer."""
    monkeypatch.setattr(conversion, "chunk_elements", lambda device: 128)
    x = (np.random.default_rng(2).standard_normal(count) * 50).astype(F32)
    t = wk.to_gpu(x)
    h = t.astype(np.float16)
    assert_same_floats(h.numpy(), x.astype(F16))
    back = h.astype(np.float32)
    assert_same_floats(back.numpy(), x.astype(F16).astype(F32))
    for tensor in (t, h, back):
        tensor.release()


@pytest.mark.parametrize("binding", [128 << 20, (1 << 31) - 4, (1 << 32) - 1, 1000 * 1024 + 12])
def test_a_chunk_is_the_most_float32s_one_binding_holds_in_multiples_of_128(binding, device):
    """WebGPU's smallest maxStorageBufferBindingSize (128 MiB) and larger ones: the chunk fits one
    binding, is the largest multiple of 128 that does (fewest dispatches), and so every chunk's
    offset is a multiple of 256 bytes."""
    n = conversion.chunk_elements(types.SimpleNamespace(limits={"max-storage-buffer-binding-size": binding}))
    assert n % 128 == 0 and 4 * n <= binding < 4 * (n + 128)
    real = device.limits["max-storage-buffer-binding-size"]
    assert 4 * conversion.chunk_elements(device) <= real < 4 * (conversion.chunk_elements(device) + 128)


def test_a_failure_to_build_the_conversion_is_the_librarys_error_saying_so(device, monkeypatch):
    """wgpu's errors while the shaders are built are translated: a refusal is a DeviceError, an
    allocation failure an OutOfMemoryError that counts the live buffers (this tensor's among them);
    the target's buffer goes back."""
    t = wk.to_gpu(np.ones(1000, F32))
    leased = len(device.memory._leased)
    for error, expected in [(wgpu.GPUValidationError("a test's refusal"), wk.DeviceError),
                            (wgpu.GPUOutOfMemoryError("Out of memory (a test)"), wk.OutOfMemoryError)]:  # fmt: skip

        def fail(device, pair, error=error):
            raise error

        monkeypatch.setattr(conversion, "_pipeline", fail)
        with pytest.raises(expected, match=r"\(building the astype pipeline\).*a test") as caught:
            t.astype(F16)
        assert type(caught.value) is expected
        assert len(device.memory._leased) == leased
    assert caught.value.live_bytes >= t.nbytes  # type: ignore[attr-defined]
    monkeypatch.undo()
    h = t.astype(F16)
    np.testing.assert_array_equal(h.numpy(), np.ones(1000, F16))
    for tensor in (t, h):
        tensor.release()


@pytest.mark.parametrize("start", [F32, F16])
def test_each_chunk_binds_only_its_own_elements(start, device, monkeypatch):
    """Chunks exist because the whole tensor is past maxStorageBufferBindingSize: a chunk bound from
    its offset to the buffer's end would be refused there. 300 elements in chunks of 128: the later
    chunks (128 and 44 elements) bind 512 and 176 bytes of float32, 256 and 88 of halves."""
    monkeypatch.setattr(conversion, "chunk_elements", lambda device: 128)
    t = wk.to_gpu(np.arange(300, dtype=start))
    bound = []
    create = device.gpu.create_bind_group

    def spy(**kwargs):
        bound.append([(e["resource"]["offset"], e["resource"].get("size")) for e in kwargs["entries"]])
        return create(**kwargs)

    monkeypatch.setattr(device.gpu, "create_bind_group", spy)
    converted = t.astype(F16 if start == F32 else F32)
    monkeypatch.undo()
    f32 = [(512, 512), (1024, 176)]
    f16 = [(256, 256), (512, 88)]
    assert bound[-2:] == [list(pair) for pair in zip(*((f32, f16) if start == F32 else (f16, f32)))]
    np.testing.assert_array_equal(converted.numpy(), np.arange(300, dtype=converted.dtype))
    for tensor in (t, converted):
        tensor.release()


def test_the_float16_result_is_a_kernel_input(device, need_dtype):
    need_dtype(np.float16)
    kernel = wk.get_kernel(QUICK_GELU)
    x = (np.random.default_rng(3).standard_normal((2, 77, 64)) * 4).astype(F32)
    h = wk.to_gpu(x).astype(np.float16)
    y = kernel({"X": h})["Y"]
    assert y.dtype == np.float16
    ref.assert_matches(y, ref.quick_gelu(x.astype(F16), 1.702), np.float16, **ref.quick_gelu_tolerance(np.float16))
    h.release()


def test_astype_of_an_output_still_being_recorded_sees_its_data_and_later_calls_see_the_result(device):
    """The conversion goes after the recorded dispatch that writes its source, in its submission; a
    call recorded after it reads its output."""
    kernel = wk.get_kernel(QUICK_GELU)
    x = np.linspace(-4, 4, 4099, dtype=F32)
    kernel({"X": x}, output="gpu")["Y"].release()  # the plan is proven: the next run is only recorded
    y = kernel({"X": x}, output="gpu")["Y"]
    assert device.memory._pass is not None  # recorded, not yet submitted
    h = y.astype(np.float16)
    y.release()  # its buffer goes back to the pool: the next call may write it
    back = h.astype(np.float32)
    again = kernel({"X": back}, output="gpu")["Y"]
    expected = ref.quick_gelu(x, 1.702)
    np.testing.assert_allclose(h.numpy().astype(np.float64), expected, rtol=1e-3, atol=1e-3)
    np.testing.assert_allclose(again.numpy(), ref.quick_gelu(h.numpy().astype(F32), 1.702), rtol=1e-5, atol=1e-6)
    for tensor in (h, back, again):
        tensor.release()


@pytest.mark.parametrize("dtype", [np.int32, np.float32, np.uint8])
def test_astype_to_the_same_dtype_is_a_device_side_copy(dtype, device):
    x = np.arange(9, dtype=dtype).reshape(3, 3)
    t = wk.to_gpu(x)
    same = t.astype(dtype)
    assert same.buffer is not t.buffer and (same.shape, same.dtype) == (t.shape, t.dtype)
    t.release()
    np.testing.assert_array_equal(same.numpy(), x)
    same.release()


@pytest.mark.parametrize(("source", "dtype", "received"), [
    (F32, np.float64, "got float64 for this float32 tensor"),
    (F16, np.int32, "got int32 for this float16 tensor"),
    (F32, "bfloat17", "got str 'bfloat17'"),
    (F32, None, "got None"),
    (F32, ">f2", "got >f2 (a GpuTensor is little-endian) for this float32 tensor"),
], ids=["float64", "int32", "unknown name", "None", "big-endian"])  # fmt: skip
def test_another_dtype_is_a_dtype_error_naming_what_is_supported(source, dtype, received, device):
    t = wk.to_gpu(np.ones(3, source))
    with pytest.raises(DTypeError) as info:
        t.astype(dtype)
    message = str(info.value)
    assert info.value.argument == "dtype"
    assert "expected float16 or float32 (astype converts between the two on the GPU" in message
    assert received in message and "read the tensor back with numpy()" in message
    t.release()


@pytest.mark.parametrize(("source", "name", "wanted"), [(F32, "f16", F16), (F16, "f32", F32), (F32, "f32", F32)])
def test_astype_takes_the_manifests_short_names(source, name, wanted, device):
    """"f16" and "f32", as the manifests, the command line (-i X=2x3:f16), TensorMeta and
    from_wgpu_buffer name them: NumPy reads "f16" as float128, so astype("f16") had been refused as
    "got float128", a dtype the caller never wrote, and "f32" as "got str 'f32'"."""
    x = np.linspace(-3, 3, 24, dtype=np.float64).reshape(4, 6).astype(source)
    t = wk.to_gpu(x)
    converted = t.astype(name)
    assert converted.dtype == wanted and converted.shape == x.shape
    assert_same_floats(converted.numpy(), x.astype(wanted))
    for tensor in (t, converted):
        tensor.release()


def test_an_integer_tensor_converts_only_to_its_own_dtype(device):
    t = wk.to_gpu(np.ones(3, np.int32))
    with pytest.raises(DTypeError, match=r"expected int32, the tensor's own dtype \(a copy\).* got float16 for "
                                         r"this int32 tensor"):  # fmt: skip
        t.astype(np.float16)
    t.release()


def test_a_result_past_the_devices_buffer_limit_is_a_device_limit_error(device, monkeypatch):
    """float16 to float32 doubles the bytes: a result past maxBufferSize had reached WebGPU, whose
    refusal was a DeviceError; it is refused first, as to_gpu refuses such an array."""
    t = wk.to_gpu(np.arange(1000, dtype=np.float16))
    monkeypatch.setitem(device.limits, "max-buffer-size", 2048)  # the float16 data fits, 4000 bytes do not
    pooled = device.memory.pooled_bytes
    with pytest.raises(DeviceLimitError, match=r"argument 'dtype': expected a result of at most 2048 bytes .* got "
                                               r"float32, 4000 bytes for this tensor's 1000 elements"):  # fmt: skip
        t.astype(np.float32)
    assert device.memory.pooled_bytes == pooled  # nothing taken from the pool
    monkeypatch.undo()
    np.testing.assert_array_equal(t.astype(np.float32).numpy(), np.arange(1000, dtype=np.float32))
    t.release()


def test_a_released_tensor_cannot_be_converted(device):
    t = wk.to_gpu(np.ones(4, F32))
    view = t.reshape(2, 2)
    t.release()
    view.release()
    for dtype in (np.float16, np.float32):
        with pytest.raises(TensorReleasedError, match="this GPU tensor was released"):
            view.astype(dtype)


def test_an_uncomputed_tensor_cannot_be_converted(device, monkeypatch):
    kernel = wk.get_kernel(QUICK_GELU)
    x = np.linspace(-3, 3, 64, dtype=F32)
    kernel({"X": x}, output="gpu")["Y"].release()  # proven: the next run is recorded
    cut = kernel({"X": x}, output="gpu")["Y"]
    interrupt_next_submit(device, monkeypatch)
    with pytest.raises(KeyboardInterrupt):
        wk.synchronize()
    live = device.memory.live_buffers
    with pytest.raises(UncomputedTensorError, match="cannot convert a GpuTensor whose computing work never reached"):
        cut.astype(np.float16)
    assert device.memory.live_buffers == live  # no buffer was taken for it
    cut.release()


def test_a_conversion_cut_short_gives_its_buffer_back(device, monkeypatch):
    """Ctrl-C while the conversion is recorded (a record may submit: MAX_PENDING_DISPATCHES)."""
    t = wk.to_gpu(np.ones(64, F32))
    leased = len(device.memory._leased)

    def interrupted(*args):
        monkeypatch.undo()
        raise KeyboardInterrupt

    monkeypatch.setattr(device.memory, "record", interrupted)
    with pytest.raises(KeyboardInterrupt):
        t.astype(np.float16)
    assert len(device.memory._leased) == leased
    h = t.astype(np.float16)  # the next one runs
    np.testing.assert_array_equal(h.numpy(), np.ones(64, F16))
    for tensor in (t, h):
        tensor.release()


def test_copy_still_copies_after_the_shared_checks(device):
    x = np.arange(5, dtype=F16)
    t = wk.to_gpu(x)
    for duplicate in (copy.copy(t), t.astype(np.float16)):
        np.testing.assert_array_equal(duplicate.numpy(), x)
        duplicate.release()
    t.release()


@pytest.mark.parametrize("chunk", [None, 128], ids=["one dispatch", "chunks of 128"])
@pytest.mark.parametrize("start", [F32, F16])
def test_astype_between_recorded_calls_is_recorded_with_them(start, chunk, device, monkeypatch):
    """[astype ->] call -> astype -> astype -> call -> numpy(): the conversions join the calls' open
    batch (no submission until the read), and every result is NumPy's astype of the GPU's data, bit
    for bit."""
    if chunk is not None:
        monkeypatch.setattr(conversion, "chunk_elements", lambda device: chunk)
    kernel = wk.get_kernel(QUICK_GELU)
    x = (np.random.default_rng(4).standard_normal(1001) * 4).astype(start)
    t = wk.to_gpu(x)

    def chain() -> tuple[GpuTensor, ...]:
        first = t if start == F32 else t.astype(F32)
        y = kernel({"X": first}, output="gpu")["Y"]
        h = y.astype(F16)
        back = h.astype(F32)
        return first, y, h, back, kernel({"X": back}, output="gpu")["Y"]

    y_host = kernel({"X": x.astype(F32)})["Y"]  # the GPU's data the chain converts
    for tensor in {id(v): v for v in chain()[1:]}.values():  # the same calls once: their plans proven
        tensor.release()
    wk.synchronize()
    submits = count_submits(device, monkeypatch)
    first, y, h, back, z = chain()
    assert submits == [] and device.memory._pass is not None  # all recorded, nothing submitted
    got = z.numpy()
    assert len(submits) == 1  # the read submits the whole chain at once
    assert_same_floats(first.numpy(), x.astype(F32))
    assert_same_floats(y.numpy(), y_host)
    assert_same_floats(h.numpy(), to_half(y_host))
    assert_same_floats(back.numpy(), to_half(y_host).astype(F32))
    np.testing.assert_allclose(got, ref.quick_gelu(to_half(y_host).astype(F32)), **ref.quick_gelu_tolerance(F32))
    for tensor in {id(v): v for v in (t, first, y, h, back, z)}.values():
        tensor.release()


@pytest.mark.parametrize("chunk", [None, 128], ids=["one dispatch", "chunks of 128"])
def test_a_source_released_after_a_recorded_astype_is_reused_after_the_conversion(chunk, device, monkeypatch):
    """astype -> release the source -> a later call's output takes its buffer from the pool: that
    call is recorded after the conversion, which read the source's data first."""
    if chunk is not None:
        monkeypatch.setattr(conversion, "chunk_elements", lambda device: chunk)
    kernel = wk.get_kernel(QUICK_GELU)
    rng = np.random.default_rng(5)
    x, far = rng.uniform(-3, 3, 1001).astype(F32), rng.uniform(500, 1000, 1001).astype(F32)
    tx, tfar = wk.to_gpu(x), wk.to_gpu(far)
    y_host = kernel({"X": x})["Y"]
    kernel({"X": tx}, output="gpu")["Y"].astype(F16).release()
    wk.synchronize()
    submits = count_submits(device, monkeypatch)
    y = kernel({"X": tx}, output="gpu")["Y"]
    source = y.buffer
    h = y.astype(F16)
    y.release()
    w = kernel({"X": tfar}, output="gpu")["Y"]  # writes values near 500-1000 into y's old buffer
    assert w.buffer is source and submits == []
    assert_same_floats(h.numpy(), to_half(y_host))
    np.testing.assert_allclose(w.numpy(), ref.quick_gelu(far), **ref.quick_gelu_tolerance(F32))
    for tensor in (tx, tfar, h, w):
        tensor.release()


def test_a_recorded_conversion_whose_batch_is_lost_refuses_to_be_read(device, monkeypatch):
    """The conversion is recorded: a submission cut short (Ctrl-C) loses it with the calls of its
    batch, and its tensor says so instead of giving a pooled buffer's old data."""
    t = wk.to_gpu(np.ones(64, F32))
    t.astype(F16).release()  # the conversion's pipeline built
    h = t.astype(F16)
    interrupt_next_submit(device, monkeypatch)
    with pytest.raises(KeyboardInterrupt):
        wk.synchronize()
    assert h.uncomputed
    with pytest.raises(UncomputedTensorError, match="cannot read a GpuTensor whose computing work never reached"):
        h.numpy()
    with pytest.raises(UncomputedTensorError, match="cannot convert a GpuTensor whose computing work never reached"):
        h.astype(F32)
    h.release()
    again = t.astype(F16)  # the next one runs
    np.testing.assert_array_equal(again.numpy(), np.ones(64, F16))
    for tensor in (t, again):
        tensor.release()
