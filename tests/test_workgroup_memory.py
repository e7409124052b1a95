"""Workgroup memory against maxComputeWorkgroupStorageSize, which wgpu-native does not check:
lavapipe runs a shader past it, an NVIDIA H200 hung on one (docs/perf/h200-wgmem-30.log)."""

from __future__ import annotations

import numpy as np
import pytest
from test_execution import one_pass_manifest  # noqa: E402

import webgpu_kernels as wk
from webgpu_kernels.validation import validate_package
from webgpu_kernels.workgroup_memory import workgroup_storage

ENTRY = "@compute @workgroup_size(64)\nfn main() {{ {body} }}\n"


def usage(declarations: str, body: str, entry: str = "main") -> dict | None:
    return workgroup_storage(declarations + "\n" + ENTRY.format(body=body), entry)


# --- sizes, per the WGSL specification's memory layout and WebGPU's roundUp(16, SizeOf(T)) -------------


@pytest.mark.parametrize(("declaration", "size"), [
    ("var<workgroup> a: array<f32, 256>;", 1024),
    ("var<workgroup> a: array<f32, 3>;", 16),  # 12 rounds up to 16
    ("var<workgroup> a: array<f16, 3>;", 16),
    ("var<workgroup> a: array<vec3<f32>, 5>;", 80),  # vec3f: size 12, align 16, stride 16
    ("var<workgroup> a: array<vec3h, 4>;", 32),  # vec3h: size 6, align 8, stride 8
    ("var<workgroup> a: array<vec2u, 7u>;", 64),  # 56 -> 64
    ("var<workgroup> a: mat2x3<f32>;", 32),  # two vec3f columns of stride 16
    ("var<workgroup> a: mat4x4f;", 64),
    ("var<workgroup> a: atomic<u32>;", 16),
    ("var<workgroup> a: array<atomic<i32>, 64>;", 256),
    ("var<workgroup> a: array<array<f32, 4>, 8>;", 128),
    ("const N = 64u;\nvar<workgroup> a: array<u32, N>;", 256),
    ("alias Row = array<f32, 32>;\nvar<workgroup> a: array<Row, 2>;", 256),
    # the CTS's S1: a at 0, b (align 16) at 16, c at 32; size rounds 36 up to 48
    ("struct S1 { a: f32, b: vec4f, c: u32, }\nvar<workgroup> a: array<S1, 2>;", 96),
    ("struct P { @size(32) a: f32, @align(16) b: f32 }\nvar<workgroup> a: P;", 48),
])  # fmt: skip
def test_sizes(declaration: str, size: int) -> None:
    assert usage(declaration, "_ = &a;") == {"a": size}


def test_only_the_variables_the_entry_point_reaches_count() -> None:
    wgsl = """
var<workgroup> mine: array<f32, 64>;
var<workgroup> helper_only: array<f32, 128>;
var<workgroup> other_entry: array<f32, 4096>;
var<workgroup> unused: array<f32, 8192>;
// var<workgroup> commented: array<f32, 99999>;
fn helper() { helper_only[0] = 1.0; }
@compute @workgroup_size(64) fn main() { mine[0] = 1.0; helper(); }
@compute @workgroup_size(64) fn other() { other_entry[0] = 1.0; }
"""
    assert workgroup_storage(wgsl, "main") == {"mine": 256, "helper_only": 512}
    assert workgroup_storage(wgsl, "other") == {"other_entry": 16384}
    assert workgroup_storage("@compute @workgroup_size(1) fn main() {}", "main") == {}


@pytest.mark.parametrize("declaration", [
    "override N: u32 = 64u;\nvar<workgroup> a: array<f32, N>;",  # sized at pipeline creation
    "var<workgroup> a: array<f32, 2 * 32>;",  # an expression as the count
    "var<workgroup> a: Mystery;",
])  # fmt: skip
def test_what_it_cannot_size_is_not_guessed(declaration: str) -> None:
    assert usage(declaration, "_ = &a;") is None


# --- the engine refuses a pass past the device's limit -----------------------------------------------

SCRATCH_WGSL = """{{ declarations }}
var<workgroup> scratch: array<f32, {{ tunables.FLOATS }}>;
@compute @workgroup_size({{ workgroupSize }})
fn {{ entryPoint }}({{ entryParams }}) {
  let i = {{ globalIndex }};
  scratch[lix] = 2.0;
  workgroupBarrier();
  if (i < arrayLength(&y)) {
    y[i] = x[i] + scratch[lix];
  }
}
"""


@pytest.fixture
def scratch_kernel(write_package) -> wk.Kernel:
    manifest = one_pass_manifest("Scratch", "scratch.wgsl.jinja", tunables={"FLOATS": 64})
    return wk.load_kernel(write_package(manifest, {"scratch.wgsl.jinja": SCRATCH_WGSL}))


def test_a_pass_past_the_limit_is_refused_before_any_gpu_work(scratch_kernel: wk.Kernel) -> None:
    limit = wk.get_device().limits["max-compute-workgroup-storage-size"]
    x = np.arange(100, dtype=np.float32)
    before = x.copy()
    at_limit = limit // 4
    np.testing.assert_array_equal(scratch_kernel({"X": x}, tunables={"FLOATS": at_limit})["Y"], x + 2)
    with pytest.raises(wk.DeviceLimitError) as refused:
        scratch_kernel({"X": x}, tunables={"FLOATS": at_limit + 4})
    assert refused.value.argument == "tunables"
    assert f"maxComputeWorkgroupStorageSize = {limit} bytes" in str(refused.value)
    assert f"scratch {limit + 16} bytes in pass 'main' of variant 'main'" in str(refused.value)
    np.testing.assert_array_equal(x, before)
    np.testing.assert_array_equal(scratch_kernel({"X": x})["Y"], x + 2)  # the kernel still runs


def test_validate_warns_of_a_refusal_here_and_of_more_than_every_device_offers(scratch_kernel: wk.Kernel,
                                                                               tmp_path) -> None:  # fmt: skip
    import json

    from webgpu_kernels import digests

    limit = wk.get_device().limits["max-compute-workgroup-storage-size"]
    root = scratch_kernel.package.root
    cases = [{"name": name, "inputs": {"X": {"shape": [8]}}, "tunables": {"FLOATS": floats}}
             for name, floats in (("small", 64), ("past-portable", 5000), ("past-limit", limit // 4 + 4))]
    (root / "bench.json").write_text(json.dumps({"cases": cases}), encoding="utf-8")
    digests.write_metadata(root)
    report = validate_package(root)
    messages = [p.message for p in report.warnings]
    assert not report.errors, report.errors
    refused = [m for m in messages if "refused on this adapter" in m]
    assert len(refused) == 1 and "past-limit" in refused[0] and f"= {limit} bytes" in refused[0]
    portable = [m for m in messages if "more than the 16384 every WebGPU device offers" in m]
    assert len(portable) == 1 and "scratch 20000 bytes" in portable[0]
