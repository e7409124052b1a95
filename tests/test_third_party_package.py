"""A third kernel package, tests/packages/demo.ScaleShift, written from the format alone (manifest
in the seeds' format, its own template using the documented template context): it must load and
run through load_kernel() with no engine change."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

import webgpu_kernels as wk
from webgpu_kernels import errors
from webgpu_kernels.manifest import check_manifest

import references as ref
from conftest import DTYPE_IDS, DTYPES, PACKAGES_DIR, assert_engine_has_no_code_for

PACKAGE = PACKAGES_DIR / "demo.ScaleShift"
SHAPES = [(), (1,), (3,), (5,), (8,), (2, 3), (4, 4), (2, 3, 5), (1, 2, 2, 2, 4), (0,), (3, 0)]


@pytest.fixture(scope="module")
def scale_shift():
    return wk.load_kernel(PACKAGE)


def expected_default(shape) -> str:
    n = int(np.prod(shape, dtype=np.int64))
    return "vec4" if n > 0 and n % 4 == 0 else "scalar"


def check(y, x, scale, shift, dtype):
    ref.assert_matches(y, ref.scale_shift(x, scale, shift), dtype, **ref.scale_shift_tolerance(x, scale, shift, dtype))


def test_package_files():
    assert sorted(p.name for p in PACKAGE.iterdir()) == ["manifest.json", "scale-shift.wgsl.jinja"]
    data = json.loads((PACKAGE / "manifest.json").read_text("utf-8"))
    assert check_manifest(data) == []
    # it uses the parts of the format the brief asks for
    assert {"derive", "bindingSets", "tunables", "attributes"} <= set(data)
    assert [v["id"] for v in data["variants"]] == ["vec4", "scalar"]
    assert all(v.get("when") for v in data["variants"])


def test_engine_has_no_code_for_it():
    assert_engine_has_no_code_for("ScaleShift")


def test_loads(scale_shift):
    assert scale_shift.op_id == "demo.ScaleShift"
    assert scale_shift.variants == ["vec4", "scalar"]
    assert scale_shift.package.origin == "local"
    assert "demo.ScaleShift" in repr(scale_shift)


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_default_variant(scale_shift, plan_of, need_dtype, rng, shape, dtype):
    need_dtype(dtype)
    x = (rng.standard_normal(shape) * 5).astype(dtype)
    attrs = {"scale": -1.25, "shift": 0.75}
    assert scale_shift.explain({"X": x}, attrs=attrs).chosen == expected_default(shape)
    y = scale_shift({"X": x}, attrs=attrs)["Y"]
    assert plan_of(scale_shift, {"X": x}, attrs=attrs).variant == expected_default(shape)
    check(y, x, -1.25, 0.75, dtype)


@pytest.mark.parametrize("variant", ["vec4", "scalar"])
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("shape", [(8,), (4, 4), (2, 3, 5), (7,)], ids=str)
def test_forced_variant(scale_shift, need_dtype, rng, shape, dtype, variant):
    need_dtype(dtype)
    x = (rng.standard_normal(shape) * 5).astype(dtype)
    if variant == "vec4" and expected_default(shape) != "vec4":
        with pytest.raises(errors.VariantRejectedError) as info:
            scale_shift({"X": x}, variant=variant)
        assert info.value.clause == "vec4Ok"
        return
    y = scale_shift({"X": x}, attrs={"scale": 3.0, "shift": -2.0}, variant=variant)["Y"]
    check(y, x, 3.0, -2.0, dtype)


def test_attribute_defaults_are_identity(scale_shift, rng):
    x = rng.standard_normal((3, 4)).astype(np.float32)
    np.testing.assert_array_equal(scale_shift({"X": x})["Y"], x)


def test_new_attribute_values_reuse_the_pipeline(scale_shift, plan_of):
    """scale and shift travel in the uniform (a vec2<f32> field), not in the WGSL."""
    x = np.arange(16, dtype=np.float32)
    a = plan_of(scale_shift, {"X": x}, attrs={"scale": 2.0, "shift": 1.0})
    b = plan_of(scale_shift, {"X": x}, attrs={"scale": -3.0, "shift": 0.5})
    assert a is not b and a.passes[0].pipeline is b.passes[0].pipeline
    np.testing.assert_array_equal(scale_shift({"X": x}, attrs={"scale": -3.0, "shift": 0.5})["Y"], x * -3.0 + 0.5)


@pytest.mark.parametrize("first", [0.0, -0.0])
def test_a_zero_attribute_keeps_its_sign(first):
    """shift = -0.0 and 0.0 are equal as Python floats, yet -0.0 + -0.0 is -0.0 and -0.0 + 0.0 is
    0.0: the second value must not reuse the first one's plan (its uniform holds the first value),
    whichever comes first, on the fast path (no attrs object seen before) or not."""
    kernel = wk.load_kernel(PACKAGE)  # fresh: no plan of an earlier test answers
    x = np.full(8, -0.0, np.float32)
    for shift in (first, -first, first):
        y = kernel({"X": x}, attrs={"scale": 1.0, "shift": shift})["Y"]
        assert np.signbit(y).tolist() == np.signbit(x * 1.0 + np.float32(shift)).tolist(), shift


def test_explain_shows_derive_values(scale_shift):
    explanation = scale_shift.explain({"X": wk.TensorMeta((2, 7), "float32")}, tunables={"WORKGROUP_SIZE": 32})
    assert explanation.chosen == "scalar"
    assert {k: explanation.values[k] for k in ("n", "quads", "vec4Ok", "workgroupOk")} == {
        "n": 14, "quads": 3, "vec4Ok": False, "workgroupOk": True}  # fmt: skip
    vec4 = explanation.verdicts[0]
    assert (vec4.variant, vec4.clause, vec4.clause_index) == ("vec4", "vec4Ok", 2)
    assert vec4.values["vec4Ok"] is False and vec4.values["n"] == 14  # and what vec4Ok was made of


def test_render(scale_shift, need_dtype):
    need_dtype(np.float16)
    text = scale_shift.render({"X": wk.TensorMeta((4, 4), "float16")}, tunables={"WORKGROUP_SIZE": 16})["main"]
    assert text.lstrip().startswith("enable f16;")
    assert "struct Params {\n  count: u32,\n  affine: vec2<f32>,\n};" in text
    assert "@group(0) @binding(0) var<storage, read> x: array<vec4<f16>>;" in text
    assert "@group(0) @binding(1) var<storage, read_write> y: array<vec4<f16>>;" in text
    assert "@compute @workgroup_size(16)" in text
    scalar = scale_shift.render({"X": wk.TensorMeta((3,), "float32")})["main"]
    assert "var<storage, read> x: array<f32>;" in scalar and "// 1 element(s) of f32" in scalar


@pytest.mark.parametrize("variant", ["vec4", "scalar"])
def test_spill_into_y(scale_shift, plan_of, variant):
    n = 4 * 70001 if variant == "vec4" else 70001
    x = np.linspace(-1, 1, n, dtype=np.float32)
    tunables = {"WORKGROUP_SIZE": 1}
    y = scale_shift({"X": x}, attrs={"scale": 2.0, "shift": 1.0}, variant=variant, tunables=tunables)["Y"]
    assert plan_of(scale_shift, {"X": x}, attrs={"scale": 2.0, "shift": 1.0}, variant=variant,
                   tunables=tunables).passes[0].grid[1] > 1  # fmt: skip
    check(y, x, 2.0, 1.0, np.float32)


def test_chains_with_the_seed_kernels(scale_shift, quick_gelu, rng):
    x = rng.standard_normal((2, 8)).astype(np.float32)
    h = quick_gelu({"X": x}, output="gpu")["Y"]
    y = scale_shift({"X": h}, attrs={"scale": 2.0, "shift": -1.0}, output="gpu")["Y"]
    np.testing.assert_allclose(y.numpy(), ref.quick_gelu(x) * 2.0 - 1.0, rtol=1e-5, atol=1e-5)


def test_contract_errors(scale_shift):
    with pytest.raises(errors.DTypeError):
        scale_shift({"X": np.ones(4, np.float64)})
    with pytest.raises(errors.UnknownInputError):
        scale_shift({"X": np.ones(4, np.float32)}, attrs={"bias": 1.0})
    with pytest.raises(errors.AttributeValueError):
        scale_shift({"X": np.ones(4, np.float32)}, tunables={"WORKGROUP_SIZE": 2.5})
    with pytest.raises(errors.SelectionError) as info:
        scale_shift({"X": np.ones(4, np.float32)}, tunables={"WORKGROUP_SIZE": 100000})
    assert "workgroupOk" in str(info.value)


def test_a_copy_elsewhere_loads_too(tmp_path):
    shutil.copytree(PACKAGE, tmp_path / "somewhere" / "scale_shift_pkg")
    kernel = wk.load_kernel(tmp_path / "somewhere" / "scale_shift_pkg")
    np.testing.assert_array_equal(kernel({"X": np.ones(5, np.float32)}, attrs={"scale": 4.0})["Y"], np.full(5, 4.0))
