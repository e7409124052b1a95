"""tests/packages/ai.onnx.LayerNormalization: ONNX LayerNormalization (ai.onnx, since opset 17),
written from the format documents alone and run through load_kernel() with no engine change.

Semantics (the operator definition): X is split at ``axis`` into rows (X.shape[:axis]) of D =
numel(X.shape[axis:]) elements; ``Y = (X - mean) / sqrt(var + epsilon) * Scale + B`` per row, var the
population variance; the optional outputs Mean and InvStdDev (``1 / sqrt(var + epsilon)``) have
X.shape[:axis] followed by 1s, float32 for ``stash_type`` 1 (the only one the package takes).
Scale and B broadcast over X.shape[axis:]: the package takes the full shape, the last dimension and
one element (see the manifest's description), and refuses the others by name.

Judged against a float64 NumPy reference written from the definition and onnxruntime's CPU kernel
(a one-node opset-17 model with all three outputs), float32 and float16.

test.json's expected values come from ``expect_reference``: ``webgpu-kernels expect
tests/packages/ai.onnx.LayerNormalization --reference tests/test_layer_normalization_package.py:expect_reference``.
"""

from __future__ import annotations

import functools
import json

import numpy as np
import pytest

import webgpu_kernels as wk
from webgpu_kernels import errors

from conftest import (
    DTYPE_IDS,
    DTYPES,
    PACKAGES_DIR,
    assert_engine_has_no_code_for,
    assert_valid_and_passing,
    poison_outputs,
)

PACKAGE_NAME = "ai.onnx.LayerNormalization"
PACKAGE = PACKAGES_DIR / PACKAGE_NAME
VARIANTS = [
    f"{algo}{stats}{bias}" for algo in ("row", "workgroup") for stats in ("", "_nostats") for bias in ("", "_nobias")
]
STATS = ("Mean", "InvStdDev")
# Y: f32 arithmetic over rows of up to ~1000 (sums in another order than NumPy's); float16 Y: one
# float16 ulp of |Y| up to ~4 for the rounding of a value computed in f32. Mean and InvStdDev are
# float32 for both dtypes.
TOLERANCE = {np.dtype(np.float32): (2e-5, 2e-5), np.dtype(np.float16): (2e-3, 2e-3)}
STAT_TOLERANCE = (2e-5, 2e-6)


# --- reference (also `webgpu-kernels expect`'s) ------------------------------------------------------


def layer_norm(x, scale, bias=None, axis: int = -1, epsilon: float = 1e-5) -> dict[str, np.ndarray]:
    """LayerNormalization-17 in float64: Y, Mean, InvStdDev. IndexError for an axis out of range."""
    x = np.asarray(x, dtype=np.float64)
    if not -x.ndim <= axis < x.ndim:
        raise IndexError(f"axis {axis} for rank {x.ndim}")
    reduced = tuple(range(axis % x.ndim, x.ndim))
    mean = x.mean(axis=reduced, keepdims=True)
    inv = 1.0 / np.sqrt(((x - mean) ** 2).mean(axis=reduced, keepdims=True) + epsilon)
    y = (x - mean) * inv * np.asarray(scale, np.float64)
    if bias is not None:
        y = y + np.asarray(bias, np.float64)
    return {"Y": y, "Mean": mean, "InvStdDev": inv}


def expect_reference(inputs: dict, attrs: dict) -> dict:
    """For `webgpu-kernels expect`: inputs as `test` builds them, attributes over the defaults."""
    return layer_norm(inputs["X"], inputs["Scale"], inputs.get("B"), attrs["axis"], attrs["epsilon"])


@functools.lru_cache(maxsize=None)
def ort_session(rank: int, axis: int, epsilon: float, float16: bool, has_bias: bool, scale_rank: int):
    """A one-node LayerNormalization-17 model on onnxruntime's CPU provider, all three outputs."""
    pytest.importorskip("onnxruntime")
    pytest.importorskip("onnx")
    from onnx import TensorProto, helper

    from references import one_node_session

    kind = TensorProto.FLOAT16 if float16 else TensorProto.FLOAT
    vi = helper.make_tensor_value_info
    names = ["X", "Scale"] + (["B"] if has_bias else [])
    node = helper.make_node("LayerNormalization", names, ["Y", "Mean", "InvStdDev"], axis=axis, epsilon=epsilon)
    dims = [f"d{i}" for i in range(rank)]
    scale_dims = [f"s{i}" for i in range(scale_rank)]
    inputs = [vi("X", kind, dims), vi("Scale", kind, scale_dims)] + ([vi("B", kind, scale_dims)] if has_bias else [])
    stat_dims = [f"m{i}" for i in range(rank)]
    outputs = [
        vi("Y", kind, dims),
        vi("Mean", TensorProto.FLOAT, stat_dims),
        vi("InvStdDev", TensorProto.FLOAT, stat_dims),
    ]
    return one_node_session(node, inputs, outputs, 17)


def ort_layer_norm(x, scale, bias=None, axis=-1, epsilon=1e-5) -> dict[str, np.ndarray]:
    session = ort_session(x.ndim, axis, epsilon, x.dtype == np.float16, bias is not None, scale.ndim)
    feeds = {"X": x, "Scale": scale, **({"B": bias} if bias is not None else {})}
    return dict(zip(("Y", "Mean", "InvStdDev"), session.run(None, feeds)))


def assert_close(got: np.ndarray, want: np.ndarray, tolerance, what: str) -> None:
    rtol, atol = tolerance
    np.testing.assert_allclose(got.astype(np.float64), np.asarray(want, np.float64), rtol=rtol, atol=atol, err_msg=what)


def run(kernel: wk.Kernel, x, scale, bias=None, axis=-1, epsilon=1e-5, **options) -> dict[str, np.ndarray]:
    """One call, every output element written (poisoned first), inputs untouched, checked against the
    float64 reference (Y rounded to X's dtype; Mean and InvStdDev float32, where produced)."""
    inputs = {"X": x, "Scale": scale, **({"B": bias} if bias is not None else {})}
    attrs = {"axis": axis, "epsilon": epsilon}
    before = {k: v.copy() for k, v in inputs.items()}
    poison_outputs(kernel, inputs, attrs=attrs, tunables=options.get("tunables"))
    got = kernel(inputs, attrs=attrs, **options)
    assert all(inputs[k].tobytes() == before[k].tobytes() for k in inputs)
    want = layer_norm(x, scale, bias, axis, epsilon)
    what = f"X {x.shape} {x.dtype} Scale {scale.shape} axis {axis} {options}"
    assert got["Y"].dtype == x.dtype and got["Y"].shape == x.shape
    assert_close(got["Y"], want["Y"].astype(x.dtype), TOLERANCE[x.dtype], what)
    for name in STATS:
        if name in got:
            assert got[name].dtype == np.float32 and got[name].shape == want[name].shape, (name, got[name].shape)
            assert_close(got[name], want[name], STAT_TOLERANCE, f"{name}: {what}")
    return got


@pytest.fixture(scope="module")
def kernel() -> wk.Kernel:
    return wk.load_kernel(PACKAGE)


def draw(rng: np.random.Generator, shape, dtype, low=None, high=None) -> np.ndarray:
    if low is None:
        return rng.standard_normal(shape).astype(dtype)
    return rng.uniform(low, high, shape).astype(dtype)


# --- the package ----------------------------------------------------------------------------------


def test_package_files(kernel):
    data = json.loads((PACKAGE / "manifest.json").read_text("utf-8"))
    assert (data["domain"], data["name"], data["sinceVersion"]) == ("ai.onnx", "LayerNormalization", 17)
    assert data["attributes"] == {"axis": -1, "epsilon": 1e-5, "stash_type": 1}
    assert data["typeConstraints"] == {"T": ["float32", "float16"], "U": ["float32"]}
    assert [o["role"] for o in data["outputs"]] == ["Y", *STATS]
    assert kernel.op_id == PACKAGE_NAME and kernel.variants == VARIANTS


def test_engine_has_no_code_for_it():
    assert_engine_has_no_code_for(PACKAGE_NAME)


def test_validates_and_its_test_json_passes(kernel):
    assert_valid_and_passing(kernel, PACKAGE, VARIANTS)


@pytest.mark.parametrize("output", ["Y", *STATS])
def test_expected_outputs_are_the_reference(kernel, output):
    """test.json's stored outputs are this module's float64 reference of the case's inputs, rounded once
    (Y to X's dtype, Mean and InvStdDev to float32). A case that lists Mean and InvStdDev names the
    variants that write them; one that lists Y alone runs on every variant, the _nostats ones too."""
    from webgpu_kernels.casefile import read_test_file

    sizes, dtypes = set(), set()
    for case in read_test_file(kernel.package).cases:
        if case.refused is not None:
            continue
        if output not in case.expected:
            assert output != "Y" and case.variants is None, case.name
            continue
        if output != "Y":
            assert case.variants and not any("nostats" in v for v in case.variants), case.name
        inputs = wk.test_case_inputs(kernel, case.name)
        dtype = inputs["X"].dtype if output == "Y" else np.dtype(np.float32)
        stored = case.build_expected(kernel.package.read_bytes, {output: dtype.name})[output]
        want = expect_reference(inputs, {"axis": -1, "epsilon": 1e-5, **case.attrs})[output]
        np.testing.assert_array_equal(stored, want.astype(dtype).astype(np.float64), err_msg=case.name)
        sizes.add(inputs["X"].shape[-1])
        dtypes.add(inputs["X"].dtype.name)
    assert dtypes == {"float32", "float16"}
    assert {1, 7, 1023, 768} <= sizes


# --- results -------------------------------------------------------------------------------------

# (X shape, Scale shape, axis): odd row lengths, axis -1/-2/positive/0, and Scale's broadcast forms
CALLS = [
    ((5, 1), (1,), -1),
    ((3, 7), (7,), -1),
    ((4, 1023), (1023,), -1),
    ((2, 3, 5, 7), (5, 7), -2),
    ((2, 3, 5, 7), (7,), -2),
    ((2, 3, 5, 7), (1, 7), -2),
    ((2, 3, 40), (3, 40), 1),
    ((4, 6), (4, 6), 0),
    ((3, 33), (1,), -1),
    ((3, 33), (), -1),
    ((2, 0, 9), (9,), -1),
    ((1, 77, 768), (768,), 2),
]


@pytest.mark.parametrize("with_bias", [True, False], ids=["B", "noB"])
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("call", CALLS, ids=lambda c: "x".join(map(str, c[0])) + f"-s{len(c[1])}-a{c[2]}")
def test_every_variant_against_the_reference(kernel, rng, need_dtype, call, dtype, with_bias):
    """Every variant that accepts the call (short rows: row and workgroup), forced, and the call that
    declines the statistics (outputs=["Y"]), which runs a _nostats variant."""
    need_dtype(dtype)
    shape, scale_shape, axis = call
    x = draw(rng, shape, dtype)
    scale = draw(rng, scale_shape, dtype, 0.5, 1.5)
    bias = draw(rng, scale_shape, dtype) if with_bias else None
    inputs = {"X": x, "Scale": scale, **({"B": bias} if with_bias else {})}
    accepted = [v.variant for v in kernel.explain(inputs, attrs={"axis": axis}).verdicts if v.accepted]
    assert any("nostats" in v for v in accepted) and any("nostats" not in v for v in accepted), accepted
    for variant in accepted:
        got = run(kernel, x, scale, bias, axis, variant=variant)
        assert set(got) == ({"Y"} if "nostats" in variant else {"Y", *STATS}), (variant, set(got))
    assert any(v.startswith("workgroup") for v in accepted)
    assert set(run(kernel, x, scale, bias, axis)) == {"Y", *STATS}  # a plain call: the statistics too
    lean = kernel.explain(inputs, attrs={"axis": axis}, outputs=["Y"]).chosen
    assert lean is not None and "nostats" in lean, lean
    assert set(run(kernel, x, scale, bias, axis, outputs=["Y"])) == {"Y"}


# Hidden states of model-shapes.md, cut for lavapipe: CLIP's text encoder (77 tokens, width 768) and the
# SD 1.5 UNet's transformer blocks (tokens x 320/640/1280).
MODEL_SHAPES = {
    "clip-text-1x77x768": (1, 77, 768),
    "sd15-unet-1x256x640": (1, 256, 640),
    "sd15-unet-2x64x1280": (2, 64, 1280),
}


@pytest.mark.parametrize("with_bias", [True, False], ids=["B", "noB"])
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("model", MODEL_SHAPES)
def test_model_shapes_against_onnxruntime(kernel, rng, need_dtype, model, dtype, with_bias):
    """The float64 reference, and onnxruntime's LayerNormalization-17 (Y, Mean, InvStdDev) on the CPU."""
    need_dtype(dtype)
    shape = MODEL_SHAPES[model]
    x = (draw(rng, shape, np.float64) * 2.0 + 0.5).astype(dtype)
    scale = draw(rng, shape[-1:], dtype, 0.5, 1.5)
    bias = draw(rng, shape[-1:], dtype) if with_bias else None
    got = run(kernel, x, scale, bias)
    theirs = ort_layer_norm(x, scale, bias)
    rtol, atol = TOLERANCE[np.dtype(dtype)]
    assert_close(got["Y"], theirs["Y"], (2 * rtol, 2 * atol), f"Y vs onnxruntime {model}")
    for name in STATS:
        assert theirs[name].shape == got[name].shape, (name, theirs[name].shape)
        assert_close(got[name], theirs[name], (1e-4, 1e-5), f"{name} vs onnxruntime {model}")


@pytest.mark.parametrize("axis", [-2, 1, 0])
def test_other_axes_against_onnxruntime(kernel, rng, axis):
    x = draw(rng, (2, 6, 24), np.float32)
    scale_shape = x.shape[axis:]
    scale = draw(rng, scale_shape, np.float32, 0.5, 1.5)
    bias = draw(rng, scale_shape, np.float32)
    got = run(kernel, x, scale, bias, axis=axis, epsilon=1e-3)
    theirs = ort_layer_norm(x, scale, bias, axis=axis, epsilon=1e-3)
    for name in ("Y", *STATS):
        assert theirs[name].shape == got[name].shape, (name, theirs[name].shape, got[name].shape)
        assert_close(got[name], theirs[name], (1e-4, 1e-5), f"{name} axis {axis}")


def test_rows_far_from_zero_keep_their_digits(kernel, rng):
    """Rows of mean 1000 and spread 0.01 in float32: Y within 2e-5 of the float64 reference (a mean
    rounded to float32 before X - mean would be off by ~1e-3 there)."""
    x = (1000.0 + 0.01 * rng.standard_normal((8, 300))).astype(np.float32)
    ones = np.ones(300, np.float32)
    for variant in ("workgroup_nobias", "workgroup_nostats_nobias"):
        run(kernel, x, ones, axis=-1, epsilon=1e-3, variant=variant)
    run(kernel, x[:, :20], ones[:20], epsilon=1e-3, variant="row_nobias")


@pytest.mark.parametrize("wg", [32, 64, 256, 1024])
def test_workgroup_sizes(kernel, need_workgroup_size, rng, wg):
    need_workgroup_size(wg)
    x = draw(rng, (3, 1023), np.float32)
    run(kernel, x, draw(rng, (1023,), np.float32), draw(rng, (1023,), np.float32), tunables={"WORKGROUP_SIZE": wg})


# --- the optional outputs ------------------------------------------------------------------------


def test_optional_outputs_are_returned_by_default_and_left_out_when_declined(kernel, rng):
    """A plain call returns Mean and InvStdDev; outputs=["Y"] selects a variant that neither binds
    nor computes them: the result has no entry (MissingOutputError naming them), no buffer is
    planned, and its WGSL writes no statistics."""
    x = draw(rng, (4, 300), np.float32)
    scale = np.ones(300, np.float32)
    full = kernel({"X": x, "Scale": scale})
    assert set(full) == {"Y", *STATS} and full["Mean"].shape == (4, 1)
    lean = kernel({"X": x, "Scale": scale}, outputs=["Y"])
    assert set(lean) == {"Y"}
    np.testing.assert_array_equal(lean["Y"], full["Y"])
    with pytest.raises(errors.MissingOutputError, match="did not ask for"):
        lean["Mean"]
    assert lean.get("InvStdDev") is None
    _, plan = kernel.plan({"X": x, "Scale": scale}, outputs=["Y"])
    assert plan.variant == "workgroup_nostats_nobias" and set(plan.left_out) == set(STATS)
    assert [b[0] for b in plan.output_buffers] == ["Y"] and plan.dropped == ()
    text = kernel.render({"X": x, "Scale": scale}, outputs=["Y"])["main"]
    assert "var<storage, read_write> mean" not in text and "invStd" not in text
    assert "var<storage, read_write> mean" in kernel.render({"X": x, "Scale": scale})["main"]


# --- refusals ------------------------------------------------------------------------------------


@pytest.mark.parametrize("axis", [2, 5, -3, -9])
def test_an_axis_out_of_range_is_refused_naming_the_attribute(kernel, axis):
    """ONNX takes axis in [-rank, rank): any other is a SelectionError (a KernelError) whose trace names
    the clause and the attribute's value, on every variant, forced or not; onnxruntime refuses it too."""
    x = np.ones((2, 3), np.float32)
    inputs = {"X": x, "Scale": np.ones(3, np.float32)}
    with pytest.raises(errors.SelectionError) as info:
        kernel(inputs, attrs={"axis": axis})
    message = str(info.value)
    assert "axisOk=False" in message and f"attrs.axis={axis}" in message, message
    assert isinstance(info.value, wk.KernelError)
    for variant in VARIANTS:
        with pytest.raises(errors.VariantRejectedError, match="axisOk"):
            kernel(inputs, attrs={"axis": axis}, variant=variant)
    pytest.importorskip("onnxruntime")
    with pytest.raises(Exception, match="(?i)axis"):
        ort_layer_norm(x, np.ones(3, np.float32), axis=axis)


@pytest.mark.parametrize(
    "scale_shape, bias_shape, clause",
    [((3, 1), (4,), "scaleOk=False"), ((4,), (5,), "biasOk=False"), ((2, 3, 4), (4,), "scaleOk=False"),
     ((6,), (4,), "scaleOk=False")],
)  # fmt: skip
def test_unsupported_broadcasts_are_refused_by_name(kernel, scale_shape, bias_shape, clause):
    x = np.ones((2, 3, 4), np.float32)
    inputs = {"X": x, "Scale": np.ones(scale_shape, np.float32), "B": np.ones(bias_shape, np.float32)}
    with pytest.raises(errors.SelectionError, match=clause):
        kernel(inputs, attrs={"axis": -2})


def test_attributes_and_dtypes_the_package_refuses(kernel):
    x = np.ones((2, 4), np.float32)
    scale = np.ones(4, np.float32)
    with pytest.raises(errors.SelectionError, match="stashOk=False"):
        kernel({"X": x, "Scale": scale}, attrs={"stash_type": 0})
    with pytest.raises(errors.AttributeValueError) as info:
        kernel({"X": x, "Scale": scale}, attrs={"axis": 1.5})
    assert info.value.argument == "axis"
    with pytest.raises(errors.DTypeError):
        kernel({"X": x.astype(np.float64), "Scale": scale})
    with pytest.raises(errors.DTypeError, match="Scale"):
        kernel({"X": x, "Scale": scale.astype(np.float16)})
    with pytest.raises(errors.RankError):
        kernel({"X": np.float32(1.0), "Scale": scale})
    with pytest.raises(errors.VariantRejectedError, match="shortRow"):
        kernel({"X": np.ones((2, 100), np.float32), "Scale": np.ones(100, np.float32)}, variant="row_nobias")
