"""tests/packages/demo.Where: a third-party package written from the docs alone by a kernel author:
ONNX Where(condition, X, Y) with numpy-style broadcasting of all three inputs, run through
load_kernel() with no engine change. It stresses what the other packages do not: a bool
input (a storage-only type, bound as its bytes and read four to a 32-bit word), three inputs of
different ranks, and an output shape inferred by expressions (ranks up to 6, padded).

A select copies values, so results are judged bit for bit against np.where (which copies the
selected elements' bytes): NaN payloads, signed zeros and subnormals must pass unchanged.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import webgpu_kernels as wk
from webgpu_kernels import TensorMeta, errors
from webgpu_kernels.manifest import check_manifest

from conftest import (
    BITS,
    DTYPE_IDS,
    DTYPES,
    PACKAGES_DIR,
    assert_engine_has_no_code_for,
    assert_valid_and_passing,
    poison_outputs,
    stored_expectations,
)

PACKAGE = PACKAGES_DIR / "demo.Where"
VARIANTS = ("flat", "broadcast")


@pytest.fixture(scope="module")
def where():
    return wk.load_kernel(PACKAGE)


def inputs_of(c, x, y) -> dict:
    return {"condition": c, "X": x, "Y": y}


def assert_where(out: np.ndarray, c, x, y) -> None:
    """out is np.where(c, x, y), with the same shape and dtype and the same bits."""
    want = np.where(c, x, y)
    assert out.shape == want.shape and out.dtype == want.dtype == x.dtype
    bits = BITS[out.dtype]
    got_bits, want_bits = out.view(bits), np.ascontiguousarray(want).view(bits)
    bad = got_bits != want_bits
    assert not bad.any(), f"{int(bad.sum())} of {out.size} elements differ; first at {np.argwhere(bad)[0]}"


def run(where, c, x, y, **options) -> np.ndarray:
    inputs = inputs_of(c, x, y)
    poison_outputs(where, inputs, **{k: v for k, v in options.items() if k == "tunables"})
    before = {k: np.array(v, copy=True) for k, v in inputs.items()}
    out = where(inputs, **options)["output"]
    for name, value in inputs.items():
        assert np.array_equal(value, before[name], equal_nan=True), name
    return out


def accepted(where, c, x, y, tunables=None) -> list[str]:
    return [v.variant for v in where.explain(inputs_of(c, x, y), tunables=tunables).verdicts if v.accepted]


def draw(rng, cs, xs, ys, dtype, p=0.5):
    c = rng.random(cs) < p
    x = (rng.standard_normal(xs) * 3).astype(dtype)
    y = (rng.standard_normal(ys) * 3).astype(dtype)
    return np.asarray(c), np.asarray(x), np.asarray(y)


# --- the package ---------------------------------------------------------------------------------


def test_package_files():
    data = json.loads((PACKAGE / "manifest.json").read_text("utf-8"))
    assert check_manifest(data) == []
    assert [(v["id"], v["priority"]) for v in data["variants"]] == [("flat", 10), ("broadcast", 0)]
    assert data["typeConstraints"] == {"B": ["bool"], "T": ["float32", "float16"]}


def test_engine_has_no_code_for_it():
    # "Where" alone starts sentences in the engine's comments; the op id does not appear.
    assert_engine_has_no_code_for("demo.Where")


def test_validates_and_its_test_json_passes(where):
    assert_valid_and_passing(where, PACKAGE, VARIANTS)


def test_expected_outputs_are_the_reference(where):
    """test.json's expected outputs are np.where of the cases' inputs in the inputs' dtype
    (scripts/make_where_cases.py writes them), independent of the WGSL."""
    for case, ins, stored in stored_expectations(where, "output", lambda ins: ins["X"].dtype.name):
        assert ins["condition"].dtype == np.bool_, case.name
        want = np.where(ins["condition"], ins["X"], ins["Y"]).astype(np.float64)
        np.testing.assert_array_equal(stored, want, err_msg=case.name)


# --- results -------------------------------------------------------------------------------------

# Attention masks: CLIP's causal mask (1, 1, 77, 77) over 12 heads' scores with a rank-0 -inf
# fill; a key-padding mask (B, 1, 1, S) over SD 1.5 cross-attention-sized scores; a same-shape
# select on a CLIP MLP intermediate (model-shapes.md); and small broadcasts of three ranks.
MODEL_CALLS = [
    ((1, 1, 77, 77), (1, 12, 77, 77), ()),
    ((2, 1, 1, 77), (2, 8, 256, 77), ()),
    ((1, 77, 3072), (1, 77, 3072), (1, 77, 3072)),
    ((3, 1), (1, 4), (4,)),
]


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("shapes", MODEL_CALLS, ids=lambda s: "-".join("x".join(map(str, d)) or "r0" for d in s))
def test_model_shapes_on_every_variant_that_takes_them(where, rng, shapes, dtype):
    cs, xs, ys = shapes
    c, x, y = draw(rng, cs, xs, ys, dtype)
    if ys == ():
        y = np.array(-np.inf, dtype)
    variants = accepted(where, c, x, y)
    assert variants == (["flat", "broadcast"] if cs == xs == ys else ["broadcast"])
    for variant in variants:
        assert_where(run(where, c, x, y, variant=variant), c, x, y)


EDGE_CALLS = [
    ((), (), ()),                      # all rank 0: one element
    ((), (2, 3), (2, 3)),              # a rank-0 condition
    ((4, 5), (), ()),                  # rank-0 values
    ((1,), (), (7,)),                  # odd f16 count: the last word's upper half is not written
    ((0,), (0,), (0,)),                # empty, flat
    ((0, 3), (1, 3), (3,)),            # a zero dimension in one input, 1 in the others
    ((2, 0, 1), (1, 1, 4), (1,)),      # (2, 0, 4)
    ((5, 1, 0), (), (1, 1)),           # (5, 1, 0)
    ((2, 1, 3, 1, 2, 1), (1, 2, 1, 4, 1, 3), (3,)),  # rank 6, broadcasts on every axis
    ((1, 1, 1, 1, 1, 1), (1,), (5,)),
]


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("shapes", EDGE_CALLS, ids=lambda s: "-".join("x".join(map(str, d)) or "r0" for d in s))
def test_rank_0_and_empty_shapes(where, rng, shapes, dtype):
    c, x, y = draw(rng, *shapes, dtype)
    variants = accepted(where, c, x, y)
    assert "broadcast" in variants
    for variant in variants:
        out = run(where, c, x, y, variant=variant)
        assert out.shape == np.broadcast_shapes(*shapes)
        assert_where(out, c, x, y)


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_special_values_pass_bit_for_bit(where, variant, dtype):
    """NaNs with payloads and signs, infinities, signed zeros, subnormals, the extremes: copied."""
    bits = BITS[np.dtype(dtype)]
    if dtype == np.float16:
        raw = [0x7E00, 0xFE00, 0x7C01, 0x7D55, 0x7C00, 0xFC00, 0x0000, 0x8000, 0x0001, 0x83FF, 0x7BFF, 0xFBFF, 0x3C00]
    else:
        raw = [0x7FC00000, 0xFFC00000, 0x7F800001, 0x7FA55555, 0x7F800000, 0xFF800000, 0x00000000, 0x80000000,
               0x00000001, 0x807FFFFF, 0x7F7FFFFF, 0xFF7FFFFF, 0x3F800000]  # fmt: skip
    x = np.array(raw, bits).view(dtype)
    y = x[::-1].copy()
    c = np.arange(len(raw)) % 3 != 1
    assert_where(run(where, c, x, y, variant=variant), c, x, y)


@pytest.mark.parametrize("variant", VARIANTS)
def test_any_nonzero_condition_byte_is_true(where, variant):
    """A bool array viewing bytes other than 0 and 1 (np.uint8(...).view(bool)): the kernel reads
    bytes, and every non-zero byte selects X, as np.where does."""
    c = np.array([0, 1, 2, 255, 0, 128, 7, 0, 16], np.uint8).view(np.bool_)
    x = np.arange(1, 10, dtype=np.float32)
    y = -x
    out = run(where, c, x, y, variant=variant)
    assert out.tolist() == [-1, 2, 3, 4, -5, 6, 7, -8, 9]
    assert_where(out, c, x, y)


def test_gpu_tensors_in_and_out(where):
    """A bool GpuTensor (to_gpu) as the condition, and an output kept on the GPU fed on as Y."""
    c = wk.to_gpu(np.array([True, False, True]))
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    first = where({"condition": c, "X": x, "Y": np.float32(-1)}, output="gpu")["output"]
    assert isinstance(first, wk.GpuTensor) and first.shape == (2, 3)
    second = where({"condition": np.array(False), "X": x, "Y": first})["output"]
    assert second.tolist() == [[0, -1, 2], [3, -1, 5]]
    first.release()
    c.release()


@pytest.mark.parametrize("variant", VARIANTS)
def test_many_elements_spill_the_grid(where, plan_of, rng, variant):
    """70,001 words of output at WORKGROUP_SIZE 1: past 65,535 workgroups the grid spills into y,
    and each element is still written once."""
    c, x, y = draw(rng, (70_001 * 4,), (70_001 * 4,), (70_001 * 4,), np.float32)
    if variant == "broadcast":
        c, x, y = draw(rng, (70_001, 1), (70_001, 1), (1,), np.float32)
    tunables = {"WORKGROUP_SIZE": 1}
    grid = plan_of(where, inputs_of(c, x, y), variant=variant, tunables=tunables).passes[0].grid
    assert grid[1] > 1 and grid[0] * grid[1] * grid[2] >= 70_001
    assert_where(run(where, c, x, y, variant=variant, tunables=tunables), c, x, y)


# --- refusals ------------------------------------------------------------------------------------


def test_shapes_that_do_not_broadcast_leave_no_variant(where):
    c, x, y = np.ones((2, 3), bool), np.ones(4, np.float32), np.ones(3, np.float32)
    with pytest.raises(errors.SelectionError, match="broadcastOk"):
        where(inputs_of(c, x, y))


def test_a_rank_above_6_is_refused(where):
    with pytest.raises(errors.RankError) as info:
        where(inputs_of(np.ones((1,) * 7, bool), np.ones(1, np.float32), np.ones(1, np.float32)))
    assert info.value.argument == "condition"


@pytest.mark.parametrize("dtype", [np.uint8, np.int32, np.float32])
def test_the_condition_must_be_bool(where, dtype):
    with pytest.raises(errors.DTypeError) as info:
        where(inputs_of(np.ones(3, dtype), np.ones(3, np.float32), np.ones(3, np.float32)))
    assert info.value.argument == "condition"


def test_x_and_y_share_one_type(where):
    with pytest.raises(errors.DTypeError) as info:
        where(inputs_of(np.ones(3, bool), np.ones(3, np.float32), np.ones(3, np.float16)))
    assert info.value.argument == "Y"


# --- random broadcasts ---------------------------------------------------------------------------


@st.composite
def where_calls(draw_):
    rank = draw_(st.integers(0, 6))
    out = [draw_(st.sampled_from([0, 1, 2, 3, 4, 5, 7])) if draw_(st.integers(0, 9)) == 0
           else draw_(st.integers(1, 5)) for _ in range(rank)]  # fmt: skip
    while math.prod(out) > 3000:
        out[out.index(max(out))] = 1
    shapes = []
    for _ in range(3):
        r = draw_(st.integers(0, rank))
        tail = out[rank - r:]
        shapes.append(tuple(1 if draw_(st.booleans()) and draw_(st.booleans()) else d for d in tail))
    wg = draw_(st.sampled_from([1, 7, 64, 256]))
    return shapes, draw_(st.sampled_from(DTYPES)), wg, draw_(st.floats(0, 1)), draw_(st.integers(0, 2**32 - 1))


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(call=where_calls())
def test_property_random_broadcasts(where, call):
    """Random broadcast shapes (rank 0 to 6, zero dimensions included, each input of its own rank),
    dtypes, condition densities and workgroup sizes, on every variant that accepts them."""
    (cs, xs, ys), dtype, wg, p, seed = call
    c, x, y = draw(np.random.default_rng(seed), cs, xs, ys, dtype, p)
    tunables = {"WORKGROUP_SIZE": wg}
    variants = accepted(where, c, x, y, tunables)
    assert "broadcast" in variants, (cs, xs, ys)
    for variant in variants:
        out = run(where, c, x, y, variant=variant, tunables=tunables)
        assert out.shape == np.broadcast_shapes(cs, xs, ys)
        assert_where(out, c, x, y)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(call=where_calls(), other=st.lists(st.integers(0, 6), max_size=4))
def test_the_engines_broadcast_functions_agree_with_the_authors_expressions(where, call, other):
    """The author spelt broadcasting out axis by axis (derive o0..o5, broadcastOk); the engine's
    broadcastShape and broadcastable (docs/format.md) must give the same answers, and NumPy's."""
    (cs, xs, ys), *_ = call
    for shapes in ((cs, xs, ys), (cs, xs, tuple(other))):
        metas = {"condition": TensorMeta(shapes[0], "bool"), "X": TensorMeta(shapes[1], "float32"),
                 "Y": TensorMeta(shapes[2], "float32")}  # fmt: skip
        try:
            want = np.broadcast_shapes(*shapes)
        except ValueError:
            want = None
        assert where.evaluate("broadcastable(shapes.condition, shapes.X, shapes.Y)", metas) is (want is not None)
        assert where.evaluate("broadcastOk", metas) is (want is not None)
        if want is not None:
            assert where.evaluate("broadcastShape(shapes.condition, shapes.X, shapes.Y)", metas) == want
            assert tuple(where.evaluate("shapes.output", metas)) == want


def test_the_package_written_with_the_broadcast_functions(tmp_path):
    """demo.Where with its output shape and broadcastOk written with broadcastShape/broadcastable
    runs the same calls, and refuses shapes that do not broadcast with a ShapeError naming the
    inputs (the call's fault), before any GPU work; a derive that is never read stays silent."""
    import shutil

    from webgpu_kernels.digests import write_metadata

    package = shutil.copytree(PACKAGE, tmp_path / "where")
    data = json.loads((package / "manifest.json").read_text("utf-8"))
    data["outputs"][0]["shape"] = "broadcastShape(shapes.condition, shapes.X, shapes.Y)"
    data["derive"]["broadcastOk"] = "broadcastable(shapes.condition, shapes.X, shapes.Y)"
    data["derive"]["unusedShape"] = "broadcastShape(shapes.X, [9])"
    (package / "manifest.json").write_text(json.dumps(data), encoding="utf-8")
    write_metadata(package)
    kernel = wk.load_kernel(package)
    rng = np.random.default_rng(5)
    for shapes in (((3, 1), (1, 4), (4,)), ((), (2, 3), ()), ((2, 0, 1), (1, 1, 4), (1,))):
        c, x, y = draw(rng, *shapes, np.float32, 0.5)
        assert_where(kernel(inputs_of(c, x, y))["output"], c, x, y)
    c, x, y = np.ones((2, 3), bool), np.ones(4, np.float32), np.ones(3, np.float32)
    with pytest.raises(errors.ShapeError) as info:
        kernel(inputs_of(c, x, y))
    assert info.value.argument == "condition, X, Y"
    assert str(info.value).endswith("got [2, 3], [4], [3]: sizes 3 and 4 at axis -1 (counted from the last)")
    assert "outputs[0].shape: broadcastShape(" in str(info.value)
    with pytest.raises(errors.BroadcastError, match=r"\[1, 4\], \[9\] do not broadcast"):
        kernel.evaluate("unusedShape", inputs_of(np.ones((3, 1), bool), np.ones((1, 4), np.float32),
                                                 np.ones(4, np.float32)))  # fmt: skip
    # The same through a derive the output's shape reads.
    data["derive"]["outShape"] = data["outputs"][0]["shape"]
    data["outputs"][0]["shape"] = "outShape"
    (package / "manifest.json").write_text(json.dumps(data), encoding="utf-8")
    write_metadata(package)
    with pytest.raises(errors.ShapeError, match=r"^argument 'condition, X, Y': .*\(outputs\[0\]\.shape: outShape\)"):
        wk.load_kernel(package)(inputs_of(c, x, y))
    # Shapes padded by derive entries match no input's shape: the inputs those entries read are named.
    data["outputs"][0]["shape"] = "broadcastShape(c6, x6, y6)[6 - R:]"
    (package / "manifest.json").write_text(json.dumps(data), encoding="utf-8")
    write_metadata(package)
    with pytest.raises(errors.ShapeError, match=r"^argument 'condition, X, Y': .*got \[1, 1, 1, 1, 2, 3\], "):
        wk.load_kernel(package)(inputs_of(c, x, y))
