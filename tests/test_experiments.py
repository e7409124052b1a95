"""The experiment packages under scripts/experiments (performance studies, not shipped) load and
compute the right thing on the real device, so that their H200 figures in docs/performance.md
measure correct kernels. The engine runs them as it runs any package: nothing knows their names."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import webgpu_kernels as wk

import references as ref

EXPERIMENTS = Path(__file__).resolve().parent.parent / "scripts" / "experiments"


@pytest.fixture(scope="module")
def load():
    return lambda name: wk.load_kernel(str(EXPERIMENTS / name))


def sample(rng, shape, dtype):
    return np.asarray(rng.standard_normal(shape) * 4).astype(dtype)


def check_gelu(y, x, dtype, what):
    ref.assert_matches(y, ref.quick_gelu(x), dtype, **ref.quick_gelu_tolerance(dtype), what=what)


@pytest.mark.parametrize("shape, variant", [((2, 77, 512), "wide16"), ((4, 33), "vec4"), ((5, 7), "vec4_tail")])
def test_qg_wide_f16(load, need_dtype, rng, shape, variant):
    """numel % 8 == 0 takes the numel/8 variant; other sizes fall back to the seed's variants."""
    need_dtype(np.float16)
    kernel = load("qg_wide")
    x = sample(rng, shape, np.float16)
    assert kernel.explain({"X": x}).chosen == variant
    check_gelu(kernel({"X": x})["Y"], x, np.float16, f"qg_wide {variant} on {shape}")


def test_qg_wide_copy_control_and_f32(load, need_dtype, rng):
    need_dtype(np.float16)
    kernel = load("qg_wide")
    x = sample(rng, (3, 64), np.float16)
    np.testing.assert_array_equal(kernel({"X": x}, tunables={"WORKGROUP_SIZE": 64, "MODE": 1})["Y"], x)
    x32 = sample(rng, (3, 64), np.float32)
    assert kernel.explain({"X": x32}).chosen == "vec4"  # wide16 is f16 only
    check_gelu(kernel({"X": x32})["Y"], x32, np.float32, "qg_wide f32")


@pytest.mark.parametrize("dtype", [np.float16, np.float32], ids=["f16", "f32"])
@pytest.mark.parametrize("channels", [1280, 324])  # 324: C % 8 != 0, so not wide16
def test_bias_wide(load, need_dtype, rng, dtype, channels):
    need_dtype(dtype)
    kernel = load("bias_wide")
    x, skip = sample(rng, (2, 9, channels), dtype), sample(rng, (2, 9, channels), dtype)
    bias = sample(rng, (channels,), dtype)
    inputs = {"X": x, "bias": bias, "skip": skip}
    wide = dtype == np.float16 and channels % 8 == 0
    assert kernel.explain(inputs).chosen == ("wide16" if wide else "vec4")
    ref.assert_matches(kernel(inputs)["Y"], ref.bias_add(x, bias, skip), dtype,
                       **ref.bias_add_tolerance(x, bias, skip, dtype), what=f"bias_wide C={channels}")  # fmt: skip


@pytest.mark.parametrize("shape", [(5, 96), (7, 1040)])
@pytest.mark.parametrize("tunables", [{"SPREAD": 1}, {"SPREAD": 2}, {"SPREAD": 4, "ACTIVE": 96}, {"SPREAD": 8},
                                      {"SPREAD": 2, "ACTIVE": -1}, {"SPREAD": 4, "ACTIVE": -1},
                                      {"SPREAD": 4, "ACTIVE": -1, "MODE": 2}, {"SPREAD": 2, "ACTIVE": -2},
                                      {"SPREAD": 2, "ACTIVE": -3, "THRESHOLD": 1},
                                      {"SPREAD": 2, "ACTIVE": -3, "THRESHOLD": 2**31},
                                      {"SPREAD": 2, "ACTIVE": -4, "THRESHOLD": 1},
                                      {"SPREAD": 2, "ACTIVE": -4, "THRESHOLD": 2**31}])  # fmt: skip
def test_qg_spread(load, need_dtype, rng, tunables, shape):
    """Every way of spreading the work over the seed's grid computes QuickGelu on every element (ACTIVE
    -1: every SPREAD-th workgroup works; -2: the first half of each workgroup; -3 and -4: either path
    by size; (7, 1040) needs many workgroups, some of them idle; MODE 2: exp2, constant folded)."""
    need_dtype(np.float16)
    kernel = load("qg_spread")
    x = sample(rng, shape, np.float16)
    check_gelu(kernel({"X": x}, tunables={"WORKGROUP_SIZE": 64, "MODE": 0, "ACTIVE": 0, **tunables})["Y"], x,
               np.float16, f"qg_spread {tunables}")  # fmt: skip


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("shape", [(3, 1028), (5, 77, 13)])
def test_qg_spread_other_variants(load, need_dtype, rng, dtype, shape):
    """Shapes the vec4 variant refuses (numel % 8 != 0) run vec4_tail or scalar, right on every element."""
    need_dtype(dtype)
    kernel = load("qg_spread")
    x = sample(rng, shape, dtype)
    assert kernel.explain({"X": x}).chosen in ("vec4_tail", "scalar")
    check_gelu(kernel({"X": x})["Y"], x, dtype, f"qg_spread {shape}")


def test_qg_f16math(load, need_dtype, rng):
    """Math in f16 loses more precision: checked against the reference with a wider tolerance."""
    need_dtype(np.float16)
    x = sample(rng, (4, 64), np.float16)
    y = load("qg_f16math")({"X": x})["Y"].astype(np.float64)
    np.testing.assert_allclose(y, ref.quick_gelu(x), rtol=1e-2, atol=1e-2)



@pytest.mark.parametrize("spread", [2, 4])
@pytest.mark.parametrize("shape", [(5, 96), (7, 1040), (3, 8)])
def test_qg_spread_f32_interleave(load, rng, spread, shape):
    """f32 vec4 with ACTIVE -1: every SPREAD-th workgroup covers SPREAD workgroups' units, every
    element gets QuickGelu (shapes leave the last working workgroup partly idle or alone)."""
    kernel = load("qg_spread")
    x = sample(rng, shape, np.float32)
    tunables = {"WORKGROUP_SIZE": 64, "MODE": 0, "ACTIVE": -1, "SPREAD": spread}
    assert f"wg % {spread}u" in kernel.render({"X": x}, tunables=tunables)["main"]
    check_gelu(kernel({"X": x}, tunables=tunables)["Y"], x, np.float32, f"qg_spread f32 S{spread} {shape}")


@pytest.mark.parametrize("spread", [2, 4])
@pytest.mark.parametrize("shape", [(2, 5, 320), (3, 77, 640), (1, 1, 4)])
def test_bias_wide_f32_spread(load, rng, spread, shape):
    """bias_wide's f32 interleave gives exactly the shipped kernel's bits (the same f32 sums)."""
    kernel, shipped = load("bias_wide"), wk.get_kernel("com.microsoft.BiasAdd")
    inputs = {"X": sample(rng, shape, np.float32), "bias": sample(rng, shape[-1:], np.float32),
              "skip": sample(rng, shape, np.float32)}  # fmt: skip
    tunables = {"WORKGROUP_SIZE": 64, "SPREAD": spread}
    assert f"wg % {spread}u" in kernel.render(inputs, tunables=tunables)["main"]
    got = kernel(inputs, tunables=tunables)["Y"]
    np.testing.assert_array_equal(got, shipped(inputs, tunables={"WORKGROUP_SIZE": 64})["Y"])
