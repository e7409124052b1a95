"""Execution: GpuTensor outputs, chaining without readback, a dispatch that spills into y, zero
sizes, caller arrays left untouched (strided, big-endian), f32/f16/f32 in one process, caches."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import webgpu_kernels as wk
from webgpu_kernels import errors
from webgpu_kernels.execution import _pipeline_cache

import references as ref
from conftest import DTYPE_IDS, DTYPES, PACKAGES_DIR, optional_output_package


def qg_check(y, x, dtype, alpha=1.702):
    ref.assert_matches(y, ref.quick_gelu(x, alpha), dtype, **ref.quick_gelu_tolerance(dtype))


def ba_check(y, x, bias, skip, dtype):
    ref.assert_matches(y, ref.bias_add(x, bias, skip), dtype, **ref.bias_add_tolerance(x, bias, skip, dtype))


# --- GpuTensor ----------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_gpu_output(quick_gelu, need_dtype, rng, dtype):
    need_dtype(dtype)
    x = rng.standard_normal((3, 5, 2)).astype(dtype)
    out = quick_gelu({"X": x}, output="gpu")
    assert set(out) == {"Y"}
    t = out["Y"]
    assert isinstance(t, wk.GpuTensor)
    assert t.shape == (3, 5, 2) and t.dtype == np.dtype(dtype) and t.ndim == 3 and t.size == 30
    assert t.nbytes == 30 * np.dtype(dtype).itemsize
    y = t.numpy()
    assert isinstance(y, np.ndarray) and y.flags.c_contiguous and y.flags.writeable
    qg_check(y, x, dtype)
    np.testing.assert_array_equal(t.numpy(), y)  # reading twice gives the same
    np.testing.assert_array_equal(np.asarray(t), y)  # __array__
    y[...] = 0  # the copy is the caller's
    qg_check(t.numpy(), x, dtype)
    assert "GpuTensor" in repr(t)
    t.release()
    assert t.released and "released" in repr(t)
    t.release()  # twice is harmless
    with pytest.raises(errors.TensorReleasedError):
        t.numpy()


def test_released_tensor_as_input(quick_gelu):
    t = quick_gelu({"X": np.ones(8, np.float32)}, output="gpu")["Y"]
    t.release()
    with pytest.raises(errors.InputError) as info:
        quick_gelu({"X": t})
    assert "'X'" in str(info.value) and "released" in str(info.value)


@pytest.mark.parametrize("output", ["numpy", "gpu"])
def test_an_input_released_while_the_call_runs_is_the_input_error(bias_add, device, output):
    """Another thread's release() between the call's check of its GpuTensor inputs and its use of
    them (here: the next input's __array__, in the same window) raised a bare TensorReleasedError,
    naming no argument (seen once in 300 threaded tries), where a released input is an InputError."""
    rng = np.random.default_rng(0)
    x, bias = rng.standard_normal((2, 3, 4)).astype(np.float32), rng.standard_normal(4).astype(np.float32)
    t = wk.to_gpu(x)

    class ReleasesX:
        def __array__(self, dtype=None, copy=None):
            t.release()
            return bias

    live = device.memory.live_buffers
    with pytest.raises(errors.InputError) as info:
        bias_add({"X": t, "bias": ReleasesX(), "skip": x}, output=output)
    assert info.value.argument == "X" and "a released GpuTensor" in str(info.value)
    assert device.memory.live_buffers <= live  # the call's staged inputs and outputs went back
    y = bias_add({"X": x, "bias": bias, "skip": x})["Y"]  # the device goes on
    ba_check(y, x, bias, x, np.float32)


@pytest.mark.parametrize("shape", [(0,), (2, 0, 3), (0, 0)], ids=str)
@pytest.mark.parametrize("output", ["numpy", "gpu"])
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_zero_size_quick_gelu(quick_gelu, need_dtype, shape, output, dtype):
    need_dtype(dtype)
    y = quick_gelu({"X": np.zeros(shape, dtype)}, output=output)["Y"]
    if output == "gpu":
        assert isinstance(y, wk.GpuTensor) and y.size == 0
        y = y.numpy()
    assert y.shape == shape and y.dtype == np.dtype(dtype) and y.size == 0


def test_zero_size_chain(quick_gelu, bias_add):
    t = quick_gelu({"X": np.zeros((2, 0, 4), np.float32)}, output="gpu")["Y"]
    y = bias_add({"X": t, "bias": np.ones(4, np.float32), "skip": np.zeros((2, 0, 4), np.float32)})["Y"]
    assert y.shape == (2, 0, 4)


# --- chaining -----------------------------------------------------------------------------------


@pytest.fixture
def count_reads(monkeypatch, device):
    """Counts every way a GPU buffer can come back to the host: GpuTensor.numpy(),
    queue.read_buffer() and mapping a buffer (map_sync / map_async of wgpu-native's GPUBuffer)."""
    from wgpu.backends.wgpu_native import _api

    counts = {"numpy": 0, "queue.read_buffer": 0, "map": 0}

    def counting(key, original):
        def wrapper(*args, **kwargs):
            counts[key] += 1
            return original(*args, **kwargs)

        return wrapper

    monkeypatch.setattr(wk.GpuTensor, "numpy", counting("numpy", wk.GpuTensor.numpy))
    monkeypatch.setattr(_api.GPUQueue, "read_buffer", counting("queue.read_buffer", _api.GPUQueue.read_buffer))
    monkeypatch.setattr(_api.GPUBuffer, "map_sync", counting("map", _api.GPUBuffer.map_sync))
    monkeypatch.setattr(_api.GPUBuffer, "map_async", counting("map", _api.GPUBuffer.map_async))
    return counts


def test_count_reads_sees_a_readback(quick_gelu, count_reads):
    """The counter itself works: a NumPy output is a readback."""
    quick_gelu({"X": np.ones(8, np.float32)})
    assert sum(count_reads.values()) > 0


@pytest.mark.parametrize("variant", [None, "vec4", "scalar"])
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_chain_quick_gelu_into_bias_add_without_readback(quick_gelu, bias_add, need_dtype, count_reads, rng,
                                                         dtype, variant):  # fmt: skip
    need_dtype(dtype)
    shape = (2, 5, 8)
    x = rng.standard_normal(shape).astype(dtype)
    bias = rng.standard_normal(8).astype(dtype)
    skip = rng.standard_normal(shape).astype(dtype)
    h = quick_gelu({"X": x}, output="gpu")["Y"]
    y = bias_add({"X": h, "bias": bias, "skip": skip}, variant=variant, output="gpu")["Y"]
    assert count_reads == {"numpy": 0, "queue.read_buffer": 0, "map": 0}, "the chain read a tensor back"
    assert isinstance(y, wk.GpuTensor) and y.shape == shape and y.dtype == np.dtype(dtype)
    result = y.numpy()
    # the intermediate is rounded to dtype on the GPU; the reference takes the same path
    h_ref = ref.quick_gelu(x).astype(dtype)
    tol = ref.bias_add_tolerance(h_ref, bias, skip, dtype)
    tol["atol"] = tol["atol"] + ref.quick_gelu_tolerance(dtype)["atol"] + ref.quick_gelu_tolerance(dtype)["rtol"] * np.abs(h_ref)
    ref.assert_matches(result, ref.bias_add(ref.quick_gelu(x), bias, skip), dtype, **tol)
    # the consumer did not touch its input
    qg_check(h.numpy(), x, dtype)
    h.release()
    y.release()


def test_gpu_tensors_for_every_input(quick_gelu, bias_add, rng):
    shape = (1, 3, 4)
    x, skip = rng.standard_normal(shape).astype(np.float32), rng.standard_normal(shape).astype(np.float32)
    bias = rng.standard_normal(4).astype(np.float32)
    gx = quick_gelu({"X": x}, output="gpu")["Y"]
    gs = quick_gelu({"X": skip}, output="gpu")["Y"]
    gb = quick_gelu({"X": bias}, output="gpu")["Y"]
    y = bias_add({"X": gx, "bias": gb, "skip": gs})["Y"]
    expected = ref.quick_gelu(x) + ref.quick_gelu(bias) + ref.quick_gelu(skip)
    np.testing.assert_allclose(y, expected, rtol=1e-5, atol=1e-5)


def test_same_gpu_tensor_twice(bias_add, rng):
    x = rng.standard_normal((2, 2, 4)).astype(np.float32)
    bias = np.zeros(4, np.float32)
    g = bias_add({"X": x, "bias": bias, "skip": np.zeros_like(x)}, output="gpu")["Y"]
    y = bias_add({"X": g, "bias": bias, "skip": g})["Y"]
    np.testing.assert_array_equal(y, 2 * x)


def test_gpu_tensor_of_the_wrong_dtype_is_refused(quick_gelu, bias_add, need_dtype):
    need_dtype(np.float16)
    h = quick_gelu({"X": np.ones((1, 2, 4), np.float16)}, output="gpu")["Y"]
    with pytest.raises(errors.DTypeError) as info:
        bias_add({"X": h, "bias": np.ones(4, np.float32), "skip": np.ones((1, 2, 4), np.float32)})
    assert info.value.argument == "bias"


def test_long_chain(quick_gelu):
    """Ten dependent calls on the GPU, read once: each one sees the previous result."""
    x = np.linspace(-3, 3, 64, dtype=np.float32)
    t = quick_gelu({"X": x}, output="gpu")["Y"]
    expected = ref.quick_gelu(x).astype(np.float32)
    for _ in range(9):
        t_next = quick_gelu({"X": t}, output="gpu")["Y"]
        t.release()
        t = t_next
        expected = ref.quick_gelu(expected).astype(np.float32)
    np.testing.assert_allclose(t.numpy(), expected, rtol=1e-4, atol=1e-6)


def test_dropping_intermediates_keeps_results_right(quick_gelu, bias_add, rng):
    """Intermediate GpuTensors that go out of scope right after use must not corrupt later work."""
    results = []
    inputs = [rng.standard_normal((1, 4, 8)).astype(np.float32) for _ in range(6)]
    bias = rng.standard_normal(8).astype(np.float32)
    for x in inputs:
        y = bias_add({"X": quick_gelu({"X": x}, output="gpu")["Y"], "bias": bias, "skip": x}, output="gpu")["Y"]
        results.append(y)
    for x, y in zip(inputs, results):
        np.testing.assert_allclose(y.numpy(), ref.quick_gelu(x) + bias + x, rtol=1e-5, atol=1e-5)


# --- a dispatch that needs a second grid dimension ----------------------------------------------

SPILL = 65535 + 4466  # threads beyond maxComputeWorkgroupsPerDimension at workgroup size 1


@pytest.mark.parametrize("variant, numel", [("scalar", SPILL), ("vec4_tail", 4 * SPILL - 1), ("vec4", 4 * SPILL)])
def test_spill_into_y_quick_gelu(quick_gelu, plan_of, device, variant, numel):
    max_x = device.info.limits["maxComputeWorkgroupsPerDimension"]
    x = np.linspace(-8, 8, numel, dtype=np.float32)
    tunables = {"WORKGROUP_SIZE": 1}
    y = quick_gelu({"X": x}, variant=variant, tunables=tunables)["Y"]
    grid = plan_of(quick_gelu, {"X": x}, variant=variant, tunables=tunables).passes[0].grid
    assert grid[1] > 1 and grid[0] <= max_x, grid
    assert grid[0] * grid[1] * grid[2] >= SPILL
    assert "wid.y" in quick_gelu.render({"X": x}, variant=variant, tunables=tunables)["main"]
    qg_check(y, x, np.float32)  # every element, including the ones of workgroups with wid.y = 1


@pytest.mark.parametrize("variant", ["vec4", "scalar"])
def test_spill_into_y_bias_add(bias_add, plan_of, rng, variant):
    shape = (1, SPILL, 4)
    inputs = {"X": rng.standard_normal(shape).astype(np.float32), "bias": np.arange(4, dtype=np.float32),
              "skip": rng.standard_normal(shape).astype(np.float32)}  # fmt: skip
    tunables = {"WORKGROUP_SIZE": 1}
    y = bias_add(inputs, variant=variant, tunables=tunables)["Y"]
    grid = plan_of(bias_add, inputs, variant=variant, tunables=tunables).passes[0].grid
    assert grid[1] > 1, grid
    ba_check(y, inputs["X"], inputs["bias"], inputs["skip"], np.float32)


def test_spill_f16(quick_gelu, need_dtype, plan_of):
    need_dtype(np.float16)
    x = np.linspace(-8, 8, SPILL, dtype=np.float16)
    y = quick_gelu({"X": x}, variant="scalar", tunables={"WORKGROUP_SIZE": 1})["Y"]
    assert plan_of(quick_gelu, {"X": x}, variant="scalar", tunables={"WORKGROUP_SIZE": 1}).passes[0].grid[1] > 1
    qg_check(y, x, np.float16)


# --- caller's arrays ----------------------------------------------------------------------------


def layouts(rng, dtype):
    base = rng.standard_normal((6, 10)).astype(dtype)
    yield "contiguous", base
    yield "transposed", base.T
    yield "strided", base[::2, 1::3]
    yield "negative stride", base[::-1]
    yield "big-endian", base.astype(np.dtype(dtype).newbyteorder(">"))
    yield "big-endian strided", base.astype(np.dtype(dtype).newbyteorder(">"))[:, ::2]
    yield "fortran", np.asfortranarray(base)
    readonly = base.copy()
    readonly.setflags(write=False)
    yield "read-only", readonly


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_inputs_are_never_modified_quick_gelu(quick_gelu, need_dtype, rng, dtype):
    need_dtype(dtype)
    for name, x in layouts(rng, dtype):
        before = x.copy()
        flags = (x.dtype, x.strides, x.flags.writeable)
        y = quick_gelu({"X": x})["Y"]
        np.testing.assert_array_equal(x, before, err_msg=name)
        assert (x.dtype, x.strides, x.flags.writeable) == flags, name
        assert y.shape == x.shape and y.dtype == np.dtype(dtype), name
        assert y.dtype.byteorder in "=|<", name  # native order out
        qg_check(y, before.astype(dtype), dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_inputs_are_never_modified_bias_add(bias_add, need_dtype, rng, dtype):
    need_dtype(dtype)
    full = rng.standard_normal((2, 6, 16)).astype(dtype)
    cases = {
        "strided X": {"X": full[:, ::2, ::2], "bias": np.ones(8, dtype), "skip": full[:, 1::2, 1::2]},
        "big-endian all": {"X": full[:, :3, :8].astype(np.dtype(dtype).newbyteorder(">")),
                           "bias": np.arange(8, dtype=np.dtype(dtype).newbyteorder(">")),
                           "skip": full[:, 3:, 8:].astype(np.dtype(dtype).newbyteorder(">"))},
        "transposed skip": {"X": full[:, :4, :6], "bias": full[0, 0, :6], "skip": full.transpose(0, 2, 1)[:, :4, :6]},
        "bias from a column": {"X": full[:, :3, :6], "bias": full[0, :6, 3], "skip": full[:, 3:, 10:]},
    }  # fmt: skip
    for name, inputs in cases.items():
        before = {k: v.copy() for k, v in inputs.items()}
        y = bias_add(inputs)["Y"]
        for k in inputs:
            np.testing.assert_array_equal(inputs[k], before[k], err_msg=f"{name}: {k} changed")
        x, bias, skip = (before[k].astype(dtype) for k in ("X", "bias", "skip"))
        ba_check(y, x, bias, skip, dtype)


def test_big_endian_values_are_read_as_values(quick_gelu):
    x = np.array([1.0, -2.0, 3.5, 0.25], dtype=">f4")
    y = quick_gelu({"X": x}, attrs={"alpha": 0.0})["Y"]
    np.testing.assert_array_equal(y, np.array([0.5, -1.0, 1.75, 0.125], np.float32))


# --- f32, f16, f32 in one process ---------------------------------------------------------------


@pytest.mark.parametrize("variant", [None, "vec4", "vec4_tail", "scalar"])
def test_f32_f16_f32_quick_gelu(quick_gelu, need_dtype, rng, variant):
    need_dtype(np.float16)
    x32 = rng.standard_normal((4, 16)).astype(np.float32) * 3
    x16 = x32.astype(np.float16)
    first = quick_gelu({"X": x32}, variant=variant)["Y"]
    middle = quick_gelu({"X": x16}, variant=variant)["Y"]
    last = quick_gelu({"X": x32}, variant=variant)["Y"]
    qg_check(first, x32, np.float32)
    qg_check(middle, x16, np.float16)
    assert not np.isnan(middle).any()
    np.testing.assert_array_equal(first, last)
    # and once more with the f16 call after the f32 one
    qg_check(quick_gelu({"X": x16}, variant=variant)["Y"], x16, np.float16)


@pytest.mark.parametrize("variant", [None, "vec4", "scalar"])
def test_f32_f16_f32_bias_add(bias_add, need_dtype, rng, variant):
    """ONNX Runtime's WebGPU EP gave NaN for f16 BiasAdd after an f32 BiasAdd in one process."""
    need_dtype(np.float16)
    shape = (2, 5, 320)
    x, skip = rng.standard_normal(shape).astype(np.float32), rng.standard_normal(shape).astype(np.float32)
    bias = rng.standard_normal(320).astype(np.float32)
    first = bias_add({"X": x, "bias": bias, "skip": skip}, variant=variant)["Y"]
    h = {k: v.astype(np.float16) for k, v in {"X": x, "bias": bias, "skip": skip}.items()}
    middle = bias_add(h, variant=variant)["Y"]
    last = bias_add({"X": x, "bias": bias, "skip": skip}, variant=variant)["Y"]
    ba_check(first, x, bias, skip, np.float32)
    assert not np.isnan(middle).any()
    ba_check(middle, h["X"], h["bias"], h["skip"], np.float16)
    np.testing.assert_array_equal(first, last)


# --- caches -------------------------------------------------------------------------------------


def test_device_and_kernels_are_shared():
    assert wk.get_device() is wk.get_device()
    assert wk.get_kernel("com.microsoft.QuickGelu") is wk.get_kernel("com.microsoft.QuickGelu")


def test_repeated_call_reuses_plan_and_pipeline(quick_gelu, plan_of, device, rng):
    x = rng.standard_normal(44).astype(np.float32)
    attrs = {"alpha": 0.8125}
    quick_gelu({"X": x}, attrs=attrs)
    plan = plan_of(quick_gelu, {"X": x}, attrs=attrs)
    pipelines = len(_pipeline_cache(device))
    for _ in range(3):
        qg_check(quick_gelu({"X": x}, attrs=attrs)["Y"], x, np.float32, 0.8125)
    assert plan_of(quick_gelu, {"X": x}, attrs=attrs) is plan
    assert len(_pipeline_cache(device)) == pipelines


def test_new_shape_same_wgsl_shares_the_pipeline(quick_gelu, plan_of, device):
    attrs = {"alpha": 0.6875}
    a, b = np.ones(16, np.float32), np.ones((3, 12), np.float32)
    plan_a = plan_of(quick_gelu, {"X": a}, attrs=attrs)
    plan_b = plan_of(quick_gelu, {"X": b}, attrs=attrs)
    assert plan_a is not plan_b and plan_a.variant == plan_b.variant == "vec4"
    assert quick_gelu.render({"X": a}, attrs=attrs) == quick_gelu.render({"X": b}, attrs=attrs)
    assert plan_a.passes[0].pipeline is plan_b.passes[0].pipeline


def test_f32_and_f16_never_share_a_pipeline(quick_gelu, bias_add, plan_of, need_dtype):
    need_dtype(np.float16)
    for variant in quick_gelu.variants:
        p32 = plan_of(quick_gelu, {"X": np.ones(8, np.float32)}, variant=variant)
        p16 = plan_of(quick_gelu, {"X": np.ones(8, np.float16)}, variant=variant)
        assert p32.passes[0].pipeline is not p16.passes[0].pipeline
    shape = (1, 2, 8)
    for variant in bias_add.variants:
        p32 = plan_of(bias_add, {"X": np.ones(shape, np.float32), "bias": np.ones(8, np.float32),
                                 "skip": np.ones(shape, np.float32)}, variant=variant)  # fmt: skip
        p16 = plan_of(bias_add, {"X": np.ones(shape, np.float16), "bias": np.ones(8, np.float16),
                                 "skip": np.ones(shape, np.float16)}, variant=variant)  # fmt: skip
        assert p32.passes[0].pipeline is not p16.passes[0].pipeline


def test_different_alpha_values_give_different_results(quick_gelu):
    """Plans are keyed by attribute values: a cached plan for one alpha is not reused for another."""
    x = np.linspace(-4, 4, 12, dtype=np.float32)
    for alpha in (1.702, 0.5, 1.702, -2.0, 0.5):
        qg_check(quick_gelu({"X": x}, attrs={"alpha": alpha})["Y"], x, np.float32, alpha)


# A template that writes attribute values into the WGSL as they are: a float attribute given an int
# keeps it an int (docs/format.md), so `{{ attrs.scale }} / 2` is 1 / 2 == 0 (WGSL integer division)
# for scale=1 and 0.5 for scale=1.0; likewise the items of the list attribute.
def one_pass_manifest(name: str, shader: str, x_type: str = "f32", variant: str = "main", **extra) -> dict:
    """A float32 op Y = f(X) with one variant of one pass binding X (as ``x_type``) and Y."""
    return {
        "domain": "test", "name": name,
        "inputs": [{"role": "X", "dtype": "T"}],
        "outputs": [{"role": "Y", "dtype": "T", "rank": "ranks.X", "shape": "shapes.X"}],
        "typeConstraints": {"T": ["float32"]}, **extra,
        "variants": [{
            "id": variant, "priority": 0,
            "passes": [{
                "id": "main", "shader": shader,
                "bindings": [
                    {"name": "x", "arg": "X", "buffer": {"type": "read-only-storage"}, "elementType": x_type},
                    {"name": "y", "arg": "Y", "buffer": {"type": "storage"}, "elementType": "f32"},
                ],
                "dispatch": {"threads": "numel(shapes.X)", "workgroupSize": 64},
            }],
        }],
    }  # fmt: skip


RAW_ATTRS_MANIFEST = one_pass_manifest("RawAttrs", "raw.wgsl.jinja", attributes={"scale": 1.0, "coef": [1.0, 1.0]})
RAW_ATTRS_WGSL = """{{ declarations }}
@compute @workgroup_size({{ workgroupSize }})
fn {{ entryPoint }}({{ entryParams }}) {
  let i = {{ globalIndex }};
  if (i < arrayLength(&y)) {
    y[i] = x[i] * f32({{ attrs.scale }} / 2) + f32({{ attrs.coef[0] }} / 2);
  }
}
"""


ROW_PER_WORKGROUP_WGSL = """{{ declarations }}
@compute @workgroup_size({{ workgroupSize }})
fn {{ entryPoint }}({{ entryParams }}) {
  let row = {{ workgroupIndex }};
  if (lix == 0u && row < arrayLength(&y)) {
    y[row] = x[row] + f32(row);
  }
}
"""


def test_workgroup_index_numbers_each_workgroup_of_a_spilled_grid_once(write_package, plan_of):
    """One workgroup per element, 70,001 of them: past 65,535 the grid spills into y, and
    workgroupIndex still gives each workgroup its own row (a kernel author wrote it by hand)."""
    manifest = one_pass_manifest("RowPerWorkgroup", "row.wgsl.jinja")
    manifest["variants"][0]["passes"][0]["dispatch"] = {"threads": "numel(shapes.X) * 64", "workgroupSize": 64}
    kernel = wk.load_kernel(write_package(manifest, {"row.wgsl.jinja": ROW_PER_WORKGROUP_WGSL}))
    x = np.random.default_rng(5).standard_normal(70_001).astype(np.float32)
    grid = plan_of(kernel, {"X": x}).passes[0].grid
    assert grid[1] > 1 and grid[0] * grid[1] * grid[2] >= 70_001
    np.testing.assert_array_equal(kernel({"X": x})["Y"], (x.astype(np.float64) + np.arange(70_001)).astype(np.float32))


def test_an_int_and_an_equal_float_attribute_share_no_plan(write_package):
    """1 == 1.0 and (1, 1) == (1.0, 1.0) == (True, 1), but the WGSL differs (or the value is refused):
    each call runs its own values, in either order, on the checked path and the fast path alike."""
    x = np.ones(4, np.float32)
    for order in ((1.0, 1), (1, 1.0)):
        kernel = wk.load_kernel(write_package(RAW_ATTRS_MANIFEST, {"raw.wgsl.jinja": RAW_ATTRS_WGSL}))
        for scale in (*order, *order):  # the second round: the fast path
            want = 0.5 * isinstance(scale, float) + 0.5  # coef[0] 1.0: 0.5
            np.testing.assert_array_equal(kernel({"X": x}, attrs={"scale": scale})["Y"], want)
    for order in (((1.0, 1.0), (1, 1)), ((1, 1), (1.0, 1.0))):
        kernel = wk.load_kernel(write_package(RAW_ATTRS_MANIFEST, {"raw.wgsl.jinja": RAW_ATTRS_WGSL}))
        for coef in (*order, *order):
            want = 0.5 + 0.5 * isinstance(coef[0], float)  # scale 1.0: 0.5
            np.testing.assert_array_equal(kernel({"X": x}, attrs={"coef": coef})["Y"], want)
        with pytest.raises(errors.AttributeValueError):  # the fast path must not take it for (1, 1)
            kernel({"X": x}, attrs={"coef": (True, 1)})


def test_a_list_attribute_takes_the_fast_path(write_package):
    """A list (what JSON and a list attribute's default are) keys a plan like a tuple: the second
    call with equal items finds it by one lookup; other item values or types get their own."""
    x = np.ones(4, np.float32)
    kernel = wk.load_kernel(write_package(RAW_ATTRS_MANIFEST, {"raw.wgsl.jinja": RAW_ATTRS_WGSL}))
    for coef, want in (([1.0, 1.0], 1.0), ([1, 1], 0.5), ([3.0, 1.0], 2.0), ([1.0, 1.0], 1.0), ([1, 1], 0.5)):
        np.testing.assert_array_equal(kernel({"X": x}, attrs={"coef": coef})["Y"], want)  # scale 1.0: 0.5
    assert len(kernel._fast_plans) == 3
    with pytest.raises(errors.AttributeValueError):
        kernel({"X": x}, attrs={"coef": [True, 1]})
    assert len(kernel._fast_plans) == 3


SIGNS_MANIFEST = one_pass_manifest("Signs", "signs.wgsl.jinja", attributes={"coef": [1.0, 1.0]})
SIGNS_MANIFEST["variants"][0]["passes"][0]["bindings"].append(
    {"name": "params", "semantic": "kernel.params", "buffer": {"type": "uniform"},
     "struct": {"name": "Params", "fields": [{"name": "c0", "type": "f32", "value": "attrs.coef[0]"},
                                             {"name": "c1", "type": "f32", "value": "attrs.coef[1]"}]}})  # fmt: skip
#: Y = 2 * (coef[0]'s sign bit) + (coef[1]'s sign bit): which of the two zeros is the negative one
SIGNS_WGSL = """{{ declarations }}
@compute @workgroup_size({{ workgroupSize }})
fn {{ entryPoint }}({{ entryParams }}) {
  let i = {{ globalIndex }};
  if (i < arrayLength(&y)) {
    y[i] = x[i] * 0.0 + f32(bitcast<u32>(params.c0) >> 31u) * 2.0 + f32(bitcast<u32>(params.c1) >> 31u);
  }
}
"""


@pytest.mark.parametrize("kind", [list, tuple])
def test_list_attributes_with_a_negative_zero_at_other_places_share_no_plan(write_package, kind):
    """[-0.0, 0.0] == [0.0, -0.0], and both hold a negative zero: the plan key had said only that the
    list held one, so the second call ran the first's uniform bytes (on either path)."""
    x = np.ones(4, np.float32)
    kernel = wk.load_kernel(write_package(SIGNS_MANIFEST, {"signs.wgsl.jinja": SIGNS_WGSL}))
    for coef, want in [([-0.0, 0.0], 2.0), ([0.0, -0.0], 1.0), ([-0.0, -0.0], 3.0), ([0.0, 0.0], 0.0)] * 2:
        np.testing.assert_array_equal(kernel({"X": x}, attrs={"coef": kind(coef)})["Y"], want, err_msg=str(coef))


def test_a_named_tuple_attribute_keys_its_items_like_a_tuple(write_package):
    """A tuple subclass (a namedtuple) is a list attribute's value as a tuple is; the fast-plan key
    had looked into a plain tuple only, so Pair(1, 1) found the plan of Pair(1.0, 1.0), and
    Pair(0.0, -0.0) that of Pair(0.0, 0.0)."""
    import collections

    pair = collections.namedtuple("pair", "a b")
    x = np.ones(4, np.float32)
    kernel = wk.load_kernel(write_package(RAW_ATTRS_MANIFEST, {"raw.wgsl.jinja": RAW_ATTRS_WGSL}))
    for coef, want in ((pair(1.0, 1.0), 1.0), (pair(1, 1), 0.5)) * 2:  # scale 1.0: 0.5; coef[0] 1.0: 0.5, 1: 0
        np.testing.assert_array_equal(kernel({"X": x}, attrs={"coef": coef})["Y"], want, err_msg=repr(coef))
    kernel = wk.load_kernel(write_package(SIGNS_MANIFEST, {"signs.wgsl.jinja": SIGNS_WGSL}))
    for coef, want in ((pair(0.0, 0.0), 0.0), (pair(0.0, -0.0), 1.0)) * 2:
        np.testing.assert_array_equal(kernel({"X": x}, attrs={"coef": coef})["Y"], want, err_msg=repr(coef))


class _Mislabelled:
    """An array-like whose own .shape and .dtype do not describe what NumPy reads from it (a padded
    ring buffer, a wrapper with a stale dtype)."""

    def __init__(self, data, shape, dtype):
        self.data, self.shape, self.dtype = data, shape, np.dtype(dtype)

    def __array__(self, dtype=None, copy=None):
        return self.data


def test_an_array_like_files_no_plan_under_its_own_shape_and_dtype(quick_gelu):
    """The fast-plan key read the array-like's .shape and .dtype while the call ran on its data: a
    later plain array of that shape got the array-like's plan (8 outputs for 4 inputs, read past the
    binding), and a float64 array ran a float32 plan on its bytes instead of being refused."""
    stored = np.linspace(-2, 2, 8, dtype=np.float32)
    assert quick_gelu({"X": _Mislabelled(stored, (4,), np.float32)})["Y"].shape == (8,)  # what NumPy reads
    x = np.array([1.0, -2.0, 3.0, 0.5], np.float32)
    for _ in range(2):  # the checked path, then the fast path
        y = quick_gelu({"X": x})["Y"]
        assert y.shape == (4,)
        qg_check(y, x, np.float32)

    scale_shift = wk.load_kernel(PACKAGES_DIR / "demo.ScaleShift")
    scale_shift({"X": _Mislabelled(np.ones(4, np.float32), (4,), np.float64)}, attrs={"scale": 2.0})
    with pytest.raises(errors.DTypeError):
        scale_shift({"X": np.ones(4, np.float64)}, attrs={"scale": 2.0})


def test_many_distinct_evaluated_expressions_keep_evaluate_working(quick_gelu, monkeypatch):
    """Kernel.evaluate's expressions do not fill the package's compiler, which refuses one past
    MAX_EXPRESSIONS distinct ones: a tool evaluating many made every later evaluate fail."""
    from webgpu_kernels import expressions, kernel

    monkeypatch.setattr(expressions, "MAX_EXPRESSIONS", 64)  # the package itself has about 20
    meta = {"X": wk.TensorMeta((8,), "float32")}
    for i in range(100):
        assert quick_gelu.evaluate(f"numel(shapes.X) * {i}", meta) == 8 * i
    assert quick_gelu.evaluate("numel(shapes.X) * 3", meta) == 24  # kept, and right
    assert len(quick_gelu._evaluated) <= kernel.EVALUATED_CACHE_SIZE
    with pytest.raises(errors.ExpressionError):
        quick_gelu.evaluate("nosuch + 1", meta)


def test_load_kernel_twice_gives_independent_working_kernels(tmp_path):
    import shutil

    from conftest import PACKAGES_DIR

    shutil.copytree(PACKAGES_DIR / "demo.ScaleShift", tmp_path / "pkg")
    a, b = wk.load_kernel(tmp_path / "pkg"), wk.load_kernel(str(tmp_path / "pkg"))
    assert a is not b and a.op_id == b.op_id == "demo.ScaleShift"
    x = np.arange(8, dtype=np.float32)
    np.testing.assert_array_equal(a({"X": x}, attrs={"scale": 2.0})["Y"], b({"X": x}, attrs={"scale": 2.0})["Y"])


# --- dispatch_calls: back-to-back calls in one compute pass (how bench times calls) -------------

_STEP_WGSL = """
@group(0) @binding(0) var<storage, read_write> y: array<f32>;
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) g: vec3<u32>) {
  if (g.x < arrayLength(&y)) { y[g.x] = STEP; }
}
"""


def test_dispatch_calls_runs_every_pass_of_every_call_in_order(device):
    """n calls of (y += 1, then y *= 2) in one pass leave 2^(n+1) - 2: each dispatch ran once, in order."""
    import wgpu

    from webgpu_kernels.execution import BoundPass, dispatch_calls

    gpu = device.gpu
    n, calls = 1000, 9
    y = gpu.create_buffer_with_data(data=np.zeros(n, np.float32), usage=wgpu.BufferUsage.STORAGE | wgpu.BufferUsage.COPY_SRC)
    bound = []
    for step in ("y[g.x] + 1.0", "y[g.x] * 2.0"):
        pipeline = gpu.create_compute_pipeline(layout="auto", compute={
            "module": gpu.create_shader_module(code=_STEP_WGSL.replace("STEP", step)), "entry_point": "main"})  # fmt: skip
        group = gpu.create_bind_group(layout=pipeline.get_bind_group_layout(0), entries=[{"binding": 0, "resource": {"buffer": y}}])
        bound.append(BoundPass(step, pipeline, group, ((n + 63) // 64, 1, 1)))
    encoder = gpu.create_command_encoder()
    compute = encoder.begin_compute_pass()
    dispatch_calls(compute, bound, calls)
    compute.end()
    gpu.queue.submit([encoder.finish()])
    out = np.frombuffer(gpu.queue.read_buffer(y), np.float32)
    np.testing.assert_array_equal(out, np.full(n, 2.0 ** (calls + 1) - 2))
    y.destroy()


# --- storage-only element types -------------------------------------------------------------------

WORD_COPY_MANIFEST = {
    "domain": "test", "name": "WordCopy",
    "description": "Copies X to Y as 32-bit words, whatever the element type: the engine binds bytes.",
    "inputs": [{"role": "X", "dtype": "T"}],
    "outputs": [{"role": "Y", "dtype": "T", "rank": "ranks.X", "shape": "shapes.X"}],
    "typeConstraints": {"T": ["float32", "float16", "int32", "uint32", "int64", "uint64", "int16", "uint16",
                              "int8", "uint8", "bool", "bfloat16", "float64"]},
    "derive": {
        "name": "dtypes.T",
        "itemBytes": "8 if dtypes.T in ('i64', 'u64', 'f64') else 2 if dtypes.T in ('f16', 'bf16', 'i16', 'u16') "
                     "else 1 if dtypes.T in ('i8', 'u8', 'bool') else 4",
        "words": "ceilDiv(numel(shapes.X) * itemBytes, 4)",
    },
    "variants": [{
        "id": "words", "priority": 0, "when": ["f16Ok(dtypes.T)"],
        "passes": [{
            "id": "main", "shader": "copy.wgsl.jinja",
            "bindings": [
                {"name": "x", "arg": "X", "buffer": {"type": "read-only-storage"}, "elementType": "u32"},
                {"name": "y", "arg": "Y", "buffer": {"type": "storage"}, "elementType": "u32"},
                {"name": "params", "semantic": "kernel.params", "buffer": {"type": "uniform"},
                 "struct": {"name": "Params", "fields": [{"name": "count", "type": "u32", "value": "words"}]}},
            ],
            "dispatch": {"threads": "words", "workgroupSize": 64},
        }],
    }],
}  # fmt: skip
WORD_COPY_WGSL = """{{ enables }}
{{ declarations }}
@compute @workgroup_size({{ workgroupSize }})
fn {{ entryPoint }}({{ entryParams }}) {
  let i = {{ globalIndex }};
  if (i >= params.count) {
    return;
  }
  y[i] = x[i];  // a whole word: the last one may hold bytes past the tensor, inside the 16-byte padding
}
"""
STORAGE_NAMES = {"int64": "i64", "uint64": "u64", "int16": "i16", "uint16": "u16", "int8": "i8", "uint8": "u8",
                 "bool": "bool", "bfloat16": "bf16", "float64": "f64"}  # fmt: skip


def storage_array(onnx: str, shape, rng) -> np.ndarray:
    if onnx == "bfloat16":
        ml_dtypes = pytest.importorskip("ml_dtypes")
        return rng.standard_normal(shape).astype(ml_dtypes.bfloat16)
    if onnx == "bool":
        return rng.random(shape) < 0.5
    dtype = np.dtype(onnx)
    if dtype.kind == "f":
        return rng.standard_normal(shape).astype(dtype)
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max, size=shape, dtype=dtype, endpoint=True)


@pytest.mark.parametrize("onnx", list(STORAGE_NAMES))
@pytest.mark.parametrize("shape", [(7,), (3, 5), (1,), (0,)])
def test_storage_only_types_are_bound_as_bytes(write_package, rng, onnx, shape):
    """Types WGSL cannot compute with reach the shader as their bytes, under a storage-only name in
    dtypes, and come back bit for bit (odd sizes: the last word holds padding)."""
    kernel = wk.load_kernel(write_package(WORD_COPY_MANIFEST, {"copy.wgsl.jinja": WORD_COPY_WGSL}))
    x = storage_array(onnx, shape, rng)
    before = x.copy()
    explanation = kernel.explain({"X": x})
    assert explanation.chosen == "words" and explanation.values["name"] == STORAGE_NAMES[onnx]
    y = kernel({"X": x})["Y"]
    assert y.dtype == x.dtype and y.shape == x.shape
    assert y.tobytes() == x.tobytes() and x.tobytes() == before.tobytes()
    t = kernel({"X": x}, output="gpu")["Y"]
    assert t.dtype == x.dtype and kernel({"X": t})["Y"].tobytes() == x.tobytes()  # fed on as a GpuTensor
    t.release()
    u = wk.to_gpu(x)  # uploaded once, as for many calls: bfloat16 (ml_dtypes' kind "V") had been refused
    assert u.dtype == x.dtype and u.numpy().tobytes() == x.tobytes() and kernel({"X": u})["Y"].tobytes() == x.tobytes()
    u.release()


# A package whose shader reads X as mat2x4<f32> (32 bytes an element): a 4-float X is a 16-byte
# binding, which WebGPU rejects only when the command buffer holding the dispatch is finished.
TOO_SMALL_BINDING_MANIFEST = one_pass_manifest("TooSmallBinding", "wide.wgsl.jinja", "mat2x4<f32>", variant="wide")
TOO_SMALL_BINDING_WGSL = """{{ declarations }}
@compute @workgroup_size({{ workgroupSize }})
fn {{ entryPoint }}({{ entryParams }}) {
  let i = {{ globalIndex }};
  if (i < arrayLength(&y)) {
    y[i] = x[0][0][0];
  }
}
"""


def test_a_dispatch_webgpu_rejects_fails_its_own_call_and_nothing_else(write_package, quick_gelu, rng):
    """The rejected dispatch fails the call that made it (output="gpu" too: a plan's first run is
    submitted on its own), every time; a QuickGelu call recorded before it keeps its result, and the
    device goes on working (the recorder used to keep the dead encoder: every later call failed)."""
    bad = wk.load_kernel(write_package(TOO_SMALL_BINDING_MANIFEST, {"wide.wgsl.jinja": TOO_SMALL_BINDING_WGSL}))
    x = rng.standard_normal(64).astype(np.float32)
    pending = quick_gelu({"X": x}, output="gpu")["Y"]  # recorded, not yet submitted
    for output in ("gpu", "gpu", "numpy"):
        with pytest.raises(errors.DeviceError, match="'wide'"):
            bad({"X": np.ones(4, np.float32)}, output=output)
    np.testing.assert_allclose(pending.numpy(), ref.quick_gelu(x), rtol=1e-5, atol=1e-6)
    pending.release()
    wk.synchronize()
    wk.empty_cache()
    t = wk.to_gpu(x)
    np.testing.assert_allclose(quick_gelu({"X": t})["Y"], ref.quick_gelu(x), rtol=1e-5, atol=1e-6)
    t.release()


def test_a_call_webgpu_rejects_again_and_again_leaves_no_lost_batch_behind(write_package, quick_gelu, device, rng):
    """Each rejected first run added its batch to the device's lost batches, never emptied: a process
    retrying such a call grew the set without bound, and every later call with a GpuTensor input
    scanned it all. The batch held that call's work alone, whose tensors are released: nothing asks."""
    bad = wk.load_kernel(write_package(TOO_SMALL_BINDING_MANIFEST, {"wide.wgsl.jinja": TOO_SMALL_BINDING_WGSL}))
    x = rng.standard_normal(64).astype(np.float32)
    pending = quick_gelu({"X": x}, output="gpu")["Y"]  # recorded, not yet submitted
    before = set(device.memory.lost_batches)  # another test's Ctrl-C may have left some
    for _ in range(20):
        with pytest.raises(errors.DeviceError, match="'wide'"):
            bad({"X": np.ones(4, np.float32)}, output="gpu")
    assert device.memory.lost_batches == before
    assert not pending.uncomputed
    np.testing.assert_allclose(quick_gelu({"X": pending})["Y"], ref.quick_gelu(ref.quick_gelu(x)), rtol=1e-4,
                               atol=1e-5)  # fmt: skip
    pending.release()


OWN_BINDING_WGSL = """@group(0) @binding(7) var<storage, read> x: array<f32>;
@group({{ bindings.y.group }}) @binding({{ bindings.y.binding }}) var<storage, read_write> y: array<f32>;
@compute @workgroup_size({{ workgroupSize }})
fn {{ entryPoint }}({{ entryParams }}) {
  let i = {{ globalIndex }};
  if (i < arrayLength(&y)) {
    y[i] = x[i];
  }
}
"""


def test_a_template_declaring_a_binding_the_pass_lacks_is_told_the_passs_bindings(write_package):
    """A template's own declaration at @binding(7) got only wgpu's "ResourceBinding { group: 0,
    binding: 7 } is not available in the pipeline layout", not which places the manifest gives."""
    kernel = wk.load_kernel(write_package(one_pass_manifest("OwnBinding", "own.wgsl.jinja"), {"own.wgsl.jinja": OWN_BINDING_WGSL}))
    with pytest.raises(errors.ShaderCompileError, match="binding: 7") as info:
        kernel({"X": np.ones(4, np.float32)})
    assert "this pass's bindings are @group(0) @binding(0) x, @group(0) @binding(1) y" in str(info.value)
    assert "{{ bindings.NAME.binding }}" in str(info.value)


def test_an_optional_output_no_pass_binds_is_not_returned(write_package, device):
    """It was returned holding whatever its pooled buffer held last: another call's Y, silently
    (seen in a SkipLayerNormalization package)."""
    x = np.arange(4, dtype=np.float32)
    without = wk.load_kernel(optional_output_package(write_package, [("main", 0, False)]))
    stale = wk.to_gpu(np.full(4, 7.0, np.float32))
    stale.release()  # a pooled buffer of Z's size holding 7s
    for output in ("numpy", "gpu"):
        got = without({"X": x}, output=output)
        assert set(got) == {"Y"}, output
        np.testing.assert_array_equal(np.asarray(got["Y"].numpy() if output == "gpu" else got["Y"]), x)
    with_z = wk.load_kernel(optional_output_package(write_package, [("main", 0, True)]))({"X": x})
    np.testing.assert_array_equal(with_z["Z"], 2 * x)
    # explain lists every output's shape and says which the chosen variant leaves out
    explained = without.explain({"X": x})
    assert "output Z: shape [4] float32 (optional: variant 'main' does not produce it)" in str(explained)
    assert [(o["name"], o["produced"]) for o in explained.as_dict()["outputs"]] == [("Y", True), ("Z", False)]
    assert explained.produced == frozenset({"Y"})  # outputs only: it had held the input X too


@pytest.mark.parametrize("workgroup_size, extra, n, tunables, attrs, blamed", [
    ("4096", {}, 8, {}, None, "variant"),  # a literal: the package's, which the caller cannot change
    ("tunables.WG", {"tunables": {"WG": 64}}, 8, {"WG": 4096}, None, "WG"),
    ("WIDE", {"tunables": {"WG": 64}, "derive": {"WIDE": "tunables.WG * 2"}}, 8, {"WG": 2048}, None, "WG"),
    ("WIDE", {"tunables": {"WG": 64}, "constants": {"WIDE": "tunables.WG * 2"}}, 8, {"WG": 2048}, None, "WG"),
    # the size of an input's dimension or an attribute: not "fixed by the package"
    ("shapes.X[0]", {}, 4096, {}, None, "X"),
    ("attrs.wg", {"attributes": {"wg": 64}}, 8, {}, {"wg": 4096}, "wg"),
])  # fmt: skip
def test_a_workgroup_past_the_device_blames_the_tunables_it_reads(write_package, workgroup_size, extra, n, tunables,
                                                                  attrs, blamed):  # fmt: skip
    """Every too-large workgroup had been blamed on 'tunables', also one fixed by the package; one the
    size of an input's dimension or an attribute was then said to be fixed by the package."""
    manifest = one_pass_manifest("Wide", "raw.wgsl.jinja", **extra)
    manifest["variants"][0]["passes"][0]["dispatch"]["workgroupSize"] = workgroup_size
    kernel = wk.load_kernel(write_package(manifest, {"raw.wgsl.jinja": RAW_ATTRS_WGSL.replace(
        "f32({{ attrs.scale }} / 2) + f32({{ attrs.coef[0] }} / 2)", "2.0")}))  # fmt: skip
    assert wk.get_device().info.limits["maxComputeWorkgroupSizeX"] < 4096
    with pytest.raises(wk.DeviceLimitError, match="maxComputeWorkgroupSizeX") as refused:
        kernel({"X": np.ones(n, np.float32)}, tunables=tunables, attrs=attrs)
    assert refused.value.argument == blamed
    assert ("a workgroupSize the package fixes" in str(refused.value)) == (blamed == "variant")
    if blamed != "variant":  # the same kernel runs with a workgroup the device holds
        np.testing.assert_array_equal(kernel({"X": np.ones(8, np.float32)})["Y"], np.full(8, 2, np.float32))


# --- device limits: what to do ------------------------------------------------------------------


def test_a_tensor_past_the_device_limits_is_refused_with_what_to_do(quick_gelu, bias_add, device):
    """A CLIP ViT-L/14@336 MLP batch past the binding limit (15x577x4096 float32 on lavapipe's
    128 MiB) had said only what the limit was: the refusal says the engine does not split a call,
    and into how many calls on smaller pieces it would fit, and names an adapter present that binds
    it, or says that none does."""
    binding = min(device.limits["max-storage-buffer-binding-size"], device.limits["max-buffer-size"])
    n = binding // (577 * 4096 * 4) + 1  # the smallest batch past the limit
    x = wk.TensorMeta((n, 577, 4096), "float32")
    pieces = -(-n * 577 * 4096 * 4 // binding)
    with pytest.raises(errors.DeviceLimitError) as info:
        quick_gelu.plan({"X": x})
    assert info.value.argument == "X" and "per binding" in str(info.value)
    assert f"at least {pieces} calls on smaller pieces" in str(info.value), str(info.value)
    assert _adapter_advice(n * 577 * 4096 * 4) in str(info.value), str(info.value)
    assert f"at least {pieces} calls on smaller pieces" in quick_gelu.explain({"X": x}).refused
    # an output past the limit names the output and says the same
    c = binding // (4 * 4) + 4
    metas = {"X": wk.TensorMeta((1, 4, c), "float32"), "bias": wk.TensorMeta((c,), "float32"),
             "skip": wk.TensorMeta((1, 4, c), "float32")}  # fmt: skip
    with pytest.raises(errors.DeviceLimitError, match="at least 2 calls on smaller pieces"):
        bias_add.plan(metas)
    # past every buffer of the device: the call and to_gpu say so too
    huge = device.limits["max-buffer-size"] // 4 + 2**20
    calls = -(-huge * 4 // binding)  # each call's tensors must fit a binding, not just a buffer
    with pytest.raises(errors.DeviceLimitError, match=rf"maxBufferSize.*at least {calls} calls on smaller pieces"):
        quick_gelu.plan({"X": wk.TensorMeta((huge,), "float32")})
    with pytest.raises(errors.DeviceLimitError, match=rf"argument 'array'.*maxBufferSize.*split the array into at least "
                       rf"{calls} pieces of at most {binding} bytes \(what a call binds\)"):  # fmt: skip
        wk.to_gpu(np.broadcast_to(np.float32(1), (huge,)))


def test_a_weight_table_past_the_binding_limit_is_not_told_to_split_its_batch(device):
    """demo.Gather's CLIP token-embedding table (49408x768 float32, 152 MB) past lavapipe's 128 MiB
    binding: the hint said to split the call along the batch, which a (vocab, hidden) table has not.
    It says to make smaller calls where the op allows it, or names an adapter present that binds it."""
    binding = min(device.limits["max-storage-buffer-binding-size"], device.limits["max-buffer-size"])
    if binding >= 49408 * 768 * 4:
        pytest.skip("the device binds the 152 MB table")
    gather = wk.load_kernel(PACKAGES_DIR / "demo.Gather")
    metas = {"data": wk.TensorMeta((49408, 768), "float32"), "indices": wk.TensorMeta((1, 77), "int64")}
    with pytest.raises(errors.DeviceLimitError) as info:
        gather.plan(metas)
    said = str(info.value)
    assert info.value.argument == "data" and f"at most {binding} bytes per binding" in said, said
    assert f"got {49408 * 768 * 4} bytes" in said, said
    assert "batch, say" not in said and "keeps apart" not in said, said
    assert "where the op allows it" in said and _adapter_advice(49408 * 768 * 4) in said, said


def _binding(adapter) -> int:
    return min(adapter.limits["max-storage-buffer-binding-size"], adapter.limits["max-buffer-size"])


def _adapter_advice(nbytes: int) -> str:
    """What a refusal of a tensor of ``nbytes`` says of other adapters, from wk.list_adapters():
    the best one whose device binds it, else that none present does."""
    holding = [a for a in wk.list_adapters() if _binding(a) >= nbytes]
    if not holding:
        return "no adapter present binds it whole"
    return f"adapter={holding[0].backend.lower()!r} ({holding[0].label()} binds up to {_binding(holding[0])} bytes)"


def test_past_every_buffer_to_gpu_names_an_adapter_that_binds_the_array_only_where_one_is_present(device, monkeypatch):
    """to_gpu of an array past maxBufferSize said only to split it, though another adapter may bind
    it whole; and a call's refusal said "or use an adapter with a larger limit" on lavapipe, where
    no adapter present has one. Each names the adapter present that binds it, or says none does:
    true on this machine (wk.list_adapters), and with a larger adapter listed."""
    import tracemalloc

    from webgpu_kernels import device as device_module

    huge = device.limits["max-buffer-size"] // 4 + 2**20  # float32 elements, a view: no host memory
    nbytes = huge * 4
    view = np.broadcast_to(np.float32(1), (huge,))
    tracemalloc.start()
    try:
        with pytest.raises(errors.DeviceLimitError) as info:
            wk.to_gpu(view)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 2**20, f"{peak} bytes allocated for a refused upload"
    said = str(info.value)
    assert info.value.argument == "array" and _adapter_advice(nbytes) in said, said
    assert "larger limit" not in said, said
    # an adapter that binds it, listed beside this machine's: named, with the call that uses it
    real = device_module.list_adapters()
    big = dataclasses.replace(real[0], index=len(real), name="Big GPU", backend="Metal", adapter_type="DiscreteGPU",
                              limits={**real[0].limits, "max-buffer-size": 2**40,
                                      "max-storage-buffer-binding-size": 2**40})  # fmt: skip
    monkeypatch.setattr(device_module, "list_adapters", lambda: [big, *real])
    with pytest.raises(errors.DeviceLimitError) as info:
        wk.to_gpu(view)
    said = str(info.value)
    assert f"to_gpu(array, adapter='metal') (Big GPU (Metal, DiscreteGPU) binds up to {2**40} bytes)" in said, said
    assert "split the array into at least" in said, said
    binding = _binding(device.adapter)
    with pytest.raises(errors.DeviceLimitError) as info:
        wk.get_kernel("com.microsoft.QuickGelu").plan({"X": wk.TensorMeta((binding // 4 + 4,), "float32")})
    assert f"or run it with adapter='metal' (Big GPU (Metal, DiscreteGPU) binds up to {2**40} bytes)" in str(info.value)
