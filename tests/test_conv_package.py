"""tests/packages/demo.Conv: ONNX ``Conv`` (2-D, NCHW) as a package written from the docs alone
(README.md, docs/format.md, docs/package-files.md, docs/cli.md and the `webgpu-kernels new`
scaffold), run through load_kernel() with no engine change.

``Y[n, m, oy, ox] = B[m] + sum_{c, ky, kx} X[n, g*C/group + c, oy*sh + ky*dh - pt, ox*sw + kx*dw - pl]
* W[m, c, ky, kx]`` with g = m // (M / group) and taps outside X reading zero. Attributes ``strides``,
``pads`` (begin then end), ``dilations`` and ``group`` (ONNX's defaults); no ``auto_pad`` or
``kernel_shape`` (the kernel's size is W's). Two algorithms, each with a twin for the optional B (an
absent input cannot be bound): ``gemm`` (implicit GEMM per group, W_g[Mg x K] * im2col(X)[K x P] with
K = Cg*kH*kW and P = N*outH*outW, in GEMM_TILE_M x GEMM_TILE_N blocks staged through workgroup memory
GEMM_TILE_K deep, GEMM_MICRO_M x GEMM_MICRO_N outputs per invocation; chosen when a group's channels
and the output positions each fill a quarter of a tile), ``channels`` (CHANNELS_PER_INVOCATION
output channels of one group per invocation, each X tap read once for them; chosen when a group has
2 or more output channels) and ``direct`` (one invocation per output element). All three start from
the bias and add the products in k order, so they agree bit for bit.

Tolerances (``bound``) are worst-case bounds per element: an f32 sum of K = C/group*kH*kW products
(and the bias) in any order errs by at most gamma_{K+1} sum |x w| (+ |b|), gamma_k = 2 k u with
u = 2^-24 (doubled for fused multiply-adds); float16 adds one f16 ulp of the result (2^-10 relative:
WGSL lets an f32 -> f16 conversion round either way) and 2^-14 absolute (a flushed subnormal).

test.json's expected values come from this module's ``expect_reference`` (onnxruntime's CPU Conv in
float32 on the cases' inputs, which are exact in float32):
``webgpu-kernels expect tests/packages/demo.Conv --reference tests/test_conv_package.py:expect_reference``.
"""

from __future__ import annotations

import functools

import numpy as np
import pytest

import webgpu_kernels as wk
from webgpu_kernels import errors

from conftest import PACKAGES_DIR, assert_engine_has_no_code_for, assert_valid_and_passing, poison_outputs

PACKAGE_NAME = "demo.Conv"
PACKAGE = PACKAGES_DIR / PACKAGE_NAME
VARIANTS = ["gemm", "gemm_bias", "channels", "channels_bias", "direct", "direct_bias"]
GEMM_TUNABLES = ("GEMM_TILE_M", "GEMM_TILE_N", "GEMM_TILE_K", "GEMM_MICRO_M", "GEMM_MICRO_N")
GEMM_DEFAULTS = dict(zip(GEMM_TUNABLES, (64, 64, 16, 4, 4)))
DEFAULT_ATTRS = {"strides": [1, 1], "pads": [0, 0, 0, 0], "dilations": [1, 1], "group": 1}
U32 = 2.0**-24
F16_STEP = 2.0**-10
F16_FLUSH = 2.0**-14


# --- references -------------------------------------------------------------------------------------


def reference(x, w, b=None, *, strides=(1, 1), pads=(0, 0, 0, 0), dilations=(1, 1), group=1, absolute=False):
    """ONNX Conv in float64 (``absolute``: the same sum of |x| |w| + |b|, for the error bound)."""
    x, w = np.asarray(x, np.float64), np.asarray(w, np.float64)
    if absolute:
        x, w = np.abs(x), np.abs(w)
    n, c, h, wd = x.shape
    m, cg, kh, kw = w.shape
    (sh, sw), (dh, dw), (pt, pl, pb, pr) = strides, dilations, pads
    oh = (h + pt + pb - dh * (kh - 1) - 1) // sh + 1
    ow = (wd + pl + pr - dw * (kw - 1) - 1) // sw + 1
    xp = np.zeros((n, c, h + pt + pb, wd + pl + pr))
    xp[:, :, pt:pt + h, pl:pl + wd] = x
    mg = m // group
    y = np.zeros((n, m, oh, ow))
    for g in range(group):
        xs = xp[:, g * cg:(g + 1) * cg]
        ws = w[g * mg:(g + 1) * mg]
        for ky in range(kh):
            for kx in range(kw):
                patch = xs[:, :, ky * dh:ky * dh + sh * (oh - 1) + 1:sh, kx * dw:kx * dw + sw * (ow - 1) + 1:sw]
                y[:, g * mg:(g + 1) * mg] += np.einsum("nchw,mc->nmhw", patch, ws[:, :, ky, kx])
    if b is not None:
        bb = np.asarray(b, np.float64)
        y += (np.abs(bb) if absolute else bb)[None, :, None, None]
    return y


@functools.cache
def ort_session(dtype_name: str, bias: bool, strides: tuple, pads: tuple, dilations: tuple, group: int):
    ort = pytest.importorskip("onnxruntime")
    from onnx import TensorProto, helper

    tp = {"float32": TensorProto.FLOAT, "float16": TensorProto.FLOAT16}[dtype_name]
    names = ["X", "W", "B"] if bias else ["X", "W"]
    node = helper.make_node("Conv", names, ["Y"], strides=list(strides), pads=list(pads), dilations=list(dilations),
                            group=group)  # fmt: skip
    graph = helper.make_graph([node], "conv", [helper.make_tensor_value_info(k, tp, None) for k in names],
                              [helper.make_tensor_value_info("Y", tp, None)])  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])


def ort_run(inputs: dict, attrs: dict, dtype=np.float32) -> np.ndarray:
    a = {**DEFAULT_ATTRS, **attrs}
    session = ort_session(np.dtype(dtype).name, "B" in inputs, tuple(a["strides"]), tuple(a["pads"]),
                          tuple(a["dilations"]), int(a["group"]))  # fmt: skip
    return session.run(None, {k: np.asarray(v, dtype) for k, v in inputs.items()})[0]


def expect_reference(inputs: dict, attrs: dict) -> dict:
    """For `webgpu-kernels expect`: onnxruntime's CPU Conv in float32 (the inputs, float64 here,
    hold float32 or float16 values, so the cast is exact); checked against the float64 reference."""
    y = ort_run(inputs, attrs)
    want = ref_of(inputs, attrs)
    assert np.all(np.abs(y - want) <= bound(inputs, attrs, np.float32)), "onnxruntime and the float64 reference differ"
    return {"Y": y.astype(np.float64)}


def ref_of(inputs: dict, attrs: dict | None = None, *, absolute=False) -> np.ndarray:
    a = {**DEFAULT_ATTRS, **(attrs or {})}
    return reference(inputs["X"], inputs["W"], inputs.get("B"), strides=a["strides"], pads=a["pads"],
                     dilations=a["dilations"], group=a["group"], absolute=absolute)  # fmt: skip


def bound(inputs: dict, attrs: dict | None, dtype) -> np.ndarray:
    """Worst-case |got - float64 reference| per element for an f32-accumulating kernel."""
    w = np.asarray(inputs["W"])
    k = w.shape[1] * w.shape[2] * w.shape[3] + 1
    magnitude = ref_of(inputs, attrs, absolute=True)
    tol = 2 * k * U32 * magnitude + 1e-30
    if np.dtype(dtype) == np.float16:
        tol = tol + F16_STEP * (np.abs(ref_of(inputs, attrs)) + tol) + F16_FLUSH
    return tol


# --- helpers ------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def conv():
    return wk.load_kernel(PACKAGE)


def make_inputs(rng, x_shape, w_shape, dtype, *, bias=True) -> dict[str, np.ndarray]:
    inputs = {"X": rng.standard_normal(x_shape).astype(dtype),
              "W": (0.3 * rng.standard_normal(w_shape)).astype(dtype)}  # fmt: skip
    if bias:
        inputs["B"] = rng.standard_normal(w_shape[0]).astype(dtype)
    return inputs


def assert_close(got: np.ndarray, inputs: dict, attrs: dict | None, dtype, what: str) -> None:
    want = ref_of(inputs, attrs)
    assert got.shape == want.shape, (what, got.shape, want.shape)
    assert got.dtype == np.dtype(dtype), (what, got.dtype)
    err = np.abs(got.astype(np.float64) - want)
    tol = bound(inputs, attrs, dtype)
    bad = ~(err <= tol)
    assert not bad.any(), f"{what}: {int(bad.sum())} of {bad.size} beyond the bound, max error {np.nanmax(err):.3g}"


def accepted(kernel, inputs, attrs=None, tunables=None) -> list[str]:
    verdicts = kernel.explain(inputs, attrs=attrs, tunables=tunables).as_dict()["variants"]
    return [v["variant"] for v in verdicts if v["accepted"]]


def run_every_variant(kernel, inputs, attrs=None, *, tunables=None, dtype=np.float32) -> list[str]:
    """Each variant that accepts the call, forced, gives the reference within the bound, and all of
    them give the same result up to the bound (they sum in the same order, so in practice exactly)."""
    ids = accepted(kernel, inputs, attrs, tunables)
    assert ids
    results = {}
    for variant in ids:
        poison_outputs(kernel, inputs, attrs=attrs, tunables=tunables)
        y = kernel(inputs, attrs=attrs, tunables=tunables, variant=variant)["Y"]
        assert_close(y, inputs, attrs, dtype, variant)
        results[variant] = y
    first = results[ids[0]]
    for variant, y in results.items():
        np.testing.assert_array_equal(y, first, err_msg=f"{variant} differs from {ids[0]}")
    return ids


# --- the package ----------------------------------------------------------------------------------


def test_loads(conv):
    assert conv.op_id == PACKAGE_NAME
    assert conv.variants == VARIANTS


def test_package_is_valid_and_its_cases_pass(conv):
    assert_valid_and_passing(conv, PACKAGE, VARIANTS)


def test_engine_has_no_code_for_it():
    # not the bare "Conv": the engine's own words hold it ("Converts", the `new` naming example "Conv2D")
    for name in ("demo.Conv", "conv-direct", "conv-channels", "conv-gemm", "CHANNELS_PER_INVOCATION", "GEMM_TILE_M"):
        assert_engine_has_no_code_for(name)


def test_expected_outputs_are_the_reference(conv):
    """test.json's stored outputs are onnxruntime's Conv of the case's inputs, within the float64
    reference's bound, rounded once to the output dtype."""
    from webgpu_kernels.casefile import read_test_file

    checked = 0
    for case in read_test_file(conv.package).cases:
        if case.refused is not None:
            continue
        inputs = wk.test_case_inputs(conv, case.name)
        dtype = inputs["X"].dtype
        want = case.build_expected(conv.package.read_bytes, {"Y": dtype.name})["Y"]
        assert_close(np.asarray(want).astype(dtype), inputs, case.attrs, dtype, case.name)
        checked += 1
    assert checked >= 19


SHAPES = [
    # (X shape, W shape, attrs, bias)
    ((1, 4, 16, 16), (8, 4, 3, 3), {"pads": [1, 1, 1, 1]}, True),  # SD conv_in, scaled down
    ((2, 8, 9, 7), (8, 8, 3, 3), {"strides": [2, 2], "pads": [1, 1, 1, 1]}, True),  # downsample
    ((1, 8, 9, 9), (8, 8, 3, 3), {"strides": [2, 2], "pads": [0, 0, 1, 1]}, False),  # VAE's asymmetric pads
    ((2, 12, 6, 6), (10, 12, 1, 1), {}, False),  # 1x1 shortcut, partial channel block
    ((1, 12, 8, 8), (9, 4, 3, 3), {"group": 3, "pads": [1, 1, 1, 1]}, True),  # grouped, Mg = 3
    ((1, 5, 8, 8), (5, 1, 3, 3), {"group": 5, "pads": [1, 1, 1, 1]}, True),  # depthwise: direct only
    ((1, 4, 13, 11), (6, 4, 3, 3), {"dilations": [2, 3], "pads": [2, 3, 2, 3]}, False),  # dilated
    ((2, 3, 10, 9), (7, 3, 2, 4), {"strides": [3, 2], "dilations": [2, 1], "pads": [0, 2, 1, 0]}, True),  # all differ
    ((1, 3, 5, 5), (2, 3, 5, 5), {}, True),  # kernel = input: 1x1 output
    ((1, 2, 1, 1), (3, 2, 3, 3), {"pads": [1, 1, 1, 1]}, False),  # 1x1 input, every other tap in the padding
]


@pytest.mark.parametrize("dtype", [np.float32, np.float16], ids=["f32", "f16"])
@pytest.mark.parametrize("x_shape, w_shape, attrs, bias", SHAPES)
def test_shapes_and_attributes(conv, need_dtype, rng, dtype, x_shape, w_shape, attrs, bias):
    need_dtype(dtype)
    inputs = make_inputs(rng, x_shape, w_shape, dtype, bias=bias)
    ids = run_every_variant(conv, inputs, attrs, dtype=dtype)
    suffix = "_bias" if bias else ""
    mg = w_shape[0] // attrs.get("group", 1)
    # a group's channels (at most 10 here) fill less than a quarter of the default 64-row tile
    assert ids == ([f"channels{suffix}"] if mg >= 2 else []) + [f"direct{suffix}"]
    assert conv.explain(inputs, attrs=attrs).chosen == ids[0]


def gemm_fills(inputs, attrs, tunables) -> bool:
    """gemm's size condition: a group's output channels and the output positions each fill at least
    a quarter of a tile."""
    t = {**GEMM_DEFAULTS, **(tunables or {})}
    y_shape = ref_of(inputs, attrs).shape
    mg = inputs["W"].shape[0] // (attrs or {}).get("group", 1)
    return mg * 4 >= t["GEMM_TILE_M"] and y_shape[0] * y_shape[2] * y_shape[3] * 4 >= t["GEMM_TILE_N"]


SMALL_TILES = {"GEMM_TILE_M": 16, "GEMM_TILE_N": 16, "GEMM_TILE_K": 4, "GEMM_MICRO_M": 2, "GEMM_MICRO_N": 2}


@pytest.mark.parametrize("dtype", [np.float32, np.float16], ids=["f32", "f16"])
@pytest.mark.parametrize("x_shape, w_shape, attrs, bias", SHAPES)
def test_gemm_small_tiles_on_every_shape(conv, need_dtype, rng, dtype, x_shape, w_shape, attrs, bias):
    """With 16 x 16 x 4 tiles (micro-tile 2 x 2, 64 invocations) gemm takes the shapes above whose
    group has 4 or more channels and 4 or more output positions, every tile partial in M, P or K,
    and gives the reference within the bound and the other variants' result bit for bit."""
    need_dtype(dtype)
    inputs = make_inputs(rng, x_shape, w_shape, dtype, bias=bias)
    ids = run_every_variant(conv, inputs, attrs, tunables=SMALL_TILES, dtype=dtype)
    suffix = "_bias" if bias else ""
    assert (f"gemm{suffix}" in ids) == gemm_fills(inputs, attrs, SMALL_TILES)
    assert conv.explain(inputs, attrs=attrs, tunables=SMALL_TILES).chosen == ids[0]


GEMM_CONFIGS = [
    # (GEMM_TILE_M, GEMM_TILE_N, GEMM_TILE_K, GEMM_MICRO_M, GEMM_MICRO_N), dtype, bias: each
    # configuration in one dtype and bias form (the tile loads and the micro-tile are the same WGSL in
    # all four). test.json's gemm cases run the default tiles in both dtypes with and without the bias
    # (with it, partial in M, P and K) and 16 x 48 x 5, 1 x 3 (256 invocations, a partial load of
    # each tile; partial in M, P and K)
    ((32, 16, 8, 4, 1), np.float32, True),  # 128 invocations, two loads of W, one of the im2col tile
    ((16, 256, 4, 4, 16), np.float32, False),  # 64 invocations, 16 loads of the im2col tile, each with
    # its own columns (64 does not divide 256), 64 accumulators (the most gemmTilesOk allows)
    ((64, 32, 4, 4, 2), np.float16, False),  # 256 invocations, half of them idle in the im2col load
    ((8, 8, 1, 1, 1), np.float16, True),  # one product per step, partial loads of both tiles
]


@pytest.mark.parametrize(("config", "dtype", "bias"), GEMM_CONFIGS,
                         ids=["x".join(map(str, c)) + ("-f32" if d == np.float32 else "-f16") + ("-bias" if b else "")
                              for c, d, b in GEMM_CONFIGS])  # fmt: skip
def test_gemm_tiles_partial_in_m_p_and_k(conv, need_dtype, rng, config, dtype, bias):
    """Mg = 20 per group (2 groups), P = 2 * 6 * 11 = 132, K = 7 * 3 * 3 = 63: no tile size above
    divides any of them. gemm, forced, is within the float64 reference's bound and bit-identical to
    direct (same order of summation)."""
    need_dtype(dtype)
    tunables = dict(zip(GEMM_TUNABLES, config))
    attrs = {"group": 2, "strides": [2, 1], "pads": [1, 0, 1, 1]}
    inputs = make_inputs(rng, (2, 14, 11, 11), (40, 7, 3, 3), dtype, bias=bias)
    suffix = "_bias" if bias else ""
    ids = run_every_variant(conv, inputs, attrs, tunables=tunables, dtype=dtype)
    assert ids == [f"gemm{suffix}", f"channels{suffix}", f"direct{suffix}"]


@pytest.mark.parametrize("dtype", [np.float32, np.float16], ids=["f32", "f16"])
@pytest.mark.parametrize("bias", [False, True])
def test_matches_onnxruntime(conv, need_dtype, rng, dtype, bias):
    need_dtype(dtype)
    attrs = {"strides": [2, 1], "pads": [1, 0, 1, 2], "dilations": [1, 2], "group": 2}
    inputs = make_inputs(rng, (2, 6, 11, 10), (8, 3, 3, 3), dtype, bias=bias)
    got = conv(inputs, attrs=attrs)["Y"].astype(np.float64)
    want = ort_run(inputs, attrs).astype(np.float64)  # float32 arithmetic on the inputs' exact values
    tol = 2 * bound(inputs, attrs, dtype)  # both within the bound of the float64 reference
    assert np.all(np.abs(got - want) <= tol)


# (CHANNELS_PER_INVOCATION, WORKGROUP_SIZE) over Mg = 10: one channel, whole blocks of 2, a partial
# last block (3: 4 blocks, the last of 1; 8: 2 blocks, the last of 2), one block larger than the group
# (16, the most blockOk allows); each workgroup size with one or two of them (the size is only the
# @workgroup_size and the grid: no branch of the WGSL meets another value of the block)
CHANNEL_TUNABLES = [(1, 1), (2, 32), (3, 256), (8, 1), (16, 256)]


@pytest.mark.parametrize(("per", "workgroup"), CHANNEL_TUNABLES)
def test_tunables(conv, need_workgroup_size, rng, per, workgroup):
    need_workgroup_size(workgroup)
    tunables = {"CHANNELS_PER_INVOCATION": per, "WORKGROUP_SIZE": workgroup}
    inputs = make_inputs(rng, (2, 6, 7, 7), (10, 6, 3, 3), np.float32)
    ids = run_every_variant(conv, inputs, {"pads": [1, 1, 1, 1]}, tunables=tunables)
    assert ids == ["channels_bias", "direct_bias"]


def test_empty_batch(conv):
    inputs = {"X": np.zeros((0, 4, 6, 6), np.float32), "W": np.ones((5, 4, 3, 3), np.float32)}
    for variant in ("channels", "direct"):
        y = conv(inputs, attrs={"pads": [1, 1, 1, 1]}, variant=variant)["Y"]
        assert y.shape == (0, 5, 6, 6) and y.dtype == np.float32


def test_explain_and_outputs(conv):
    meta = {"X": wk.TensorMeta((2, 320, 64, 64), "float16"), "W": wk.TensorMeta((320, 320, 3, 3), "float16"),
            "B": wk.TensorMeta((320,), "float16")}  # fmt: skip
    e = conv.explain(meta, attrs={"strides": [2, 2], "pads": [1, 1, 1, 1]})
    assert e.chosen == "gemm_bias"
    assert conv.evaluate("shapes.Y", meta, attrs={"strides": [2, 2], "pads": [1, 1, 1, 1]}) == (2, 320, 32, 32)
    assert e.values["outH"] == 32 and e.values["Mg"] == 320 and e.values["blocks"] == 80
    del meta["B"]
    meta["W"] = wk.TensorMeta((320, 1, 3, 3), "float16")
    assert conv.explain(meta, attrs={"group": 320}).chosen == "direct"  # depthwise: Mg = 1


SD_SHAPES = [
    # (X shape, W shape, pads): Stable Diffusion 1.5's UNet and VAE at 512 x 512 (bench.json)
    ((2, 4, 64, 64), (320, 4, 3, 3), [1, 1, 1, 1]),  # conv_in
    ((2, 320, 64, 64), (320, 320, 3, 3), [1, 1, 1, 1]),  # resnet
    ((2, 640, 32, 32), (1280, 640, 1, 1), [0, 0, 0, 0]),  # 1x1 shortcut
    ((2, 1280, 8, 8), (1280, 1280, 3, 3), [1, 1, 1, 1]),  # mid block: P = 128
    ((1, 512, 64, 64), (512, 512, 3, 3), [1, 1, 1, 1]),  # VAE decoder
]


@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("x_shape, w_shape, pads", SD_SHAPES)
def test_gemm_is_chosen_for_stable_diffusion_shapes(conv, dtype, x_shape, w_shape, pads):
    """Selection only (no GPU run of the big shapes): gemm wins over channels on them, and its pass
    fits the device (workgroup size, workgroup storage, bindings)."""
    meta = {"X": wk.TensorMeta(x_shape, dtype), "W": wk.TensorMeta(w_shape, dtype)}
    e = conv.explain(meta, attrs={"pads": pads})
    assert e.chosen == "gemm" and e.refused is None, str(e)
    assert e.values["gemmWG"] == 256 and e.values["Kg"] == w_shape[1] * w_shape[2] * w_shape[3]
    meta["B"] = wk.TensorMeta((w_shape[0],), dtype)
    assert conv.explain(meta, attrs={"pads": pads}).chosen == "gemm_bias"
    # small cases keep their variants: VAE conv_out (3 channels), depthwise (Mg = 1)
    vae_out = {"X": wk.TensorMeta((1, 128, 64, 64), dtype), "W": wk.TensorMeta((3, 128, 3, 3), dtype)}
    assert conv.explain(vae_out, attrs={"pads": [1, 1, 1, 1]}).chosen == "channels"
    depthwise = {"X": wk.TensorMeta((1, 64, 32, 32), dtype), "W": wk.TensorMeta((64, 1, 3, 3), dtype)}
    assert conv.explain(depthwise, attrs={"group": 64, "pads": [1, 1, 1, 1]}).chosen == "direct"


def test_gemm_refusals(conv):
    """What gemm's `when` refuses goes to channels (or a forced gemm says which clause failed)."""
    f32 = "float32"
    meta = {"X": wk.TensorMeta((1, 64, 16, 16), f32), "W": wk.TensorMeta((64, 64, 3, 3), f32)}
    assert conv.explain(meta).chosen == "gemm"
    refusals = [
        ({"GEMM_TILE_M": 64, "GEMM_MICRO_M": 3}, "gemmWorkgroupOk"),  # 64 % 3 != 0
        ({"GEMM_MICRO_M": 16, "GEMM_MICRO_N": 8}, "gemmWorkgroupOk"),  # 128 accumulators
        ({"GEMM_TILE_M": 256, "GEMM_TILE_N": 256, "GEMM_MICRO_M": 4, "GEMM_MICRO_N": 4}, "gemmWorkgroupOk"),  # 4096
        ({"GEMM_TILE_K": 256}, "gemmStorageOk"),  # 4 * 256 * 129 bytes
        ({"GEMM_TILE_K": 48, "GEMM_MICRO_M": 8, "GEMM_MICRO_N": 8}, "gemmLoadsOk"),  # 48 loads per invocation
        ({"GEMM_TILE_K": 0}, "gemmWorkgroupOk"),  # gemmTilesOk
    ]
    for tunables, clause in refusals:
        e = conv.explain(meta, tunables=tunables)
        assert e.chosen == "channels", (tunables, str(e))
        forced = conv.explain(meta, tunables=tunables, variant="gemm")
        assert forced.chosen is None and f"'{clause}' is false" in forced.refused, (tunables, forced.refused)
    # lavapipe's loop cap: ceil(K / 16) * 17 iterations must stay within 65,535 (K = 8000 * 9)
    big_k = {"X": wk.TensorMeta((1, 8000, 3, 3), f32), "W": wk.TensorMeta((64, 8000, 3, 3), f32)}
    e = conv.explain(big_k, attrs={"pads": [1, 1, 1, 1]})
    assert e.chosen == "channels" and e.values["gemmLoopOk"] is False
    # too few channels per group, or output positions, for a quarter of a tile
    assert conv.explain({"X": wk.TensorMeta((1, 64, 16, 16), f32), "W": wk.TensorMeta((15, 64, 3, 3), f32)}).chosen == "channels"
    assert conv.explain({"X": wk.TensorMeta((1, 64, 4, 4), f32), "W": wk.TensorMeta((64, 64, 1, 1), f32)}).chosen == "gemm"
    assert conv.explain({"X": wk.TensorMeta((1, 64, 3, 5), f32), "W": wk.TensorMeta((64, 64, 1, 1), f32)}).chosen == "channels"


def test_refusals(conv):
    f32 = np.float32
    x, w = np.ones((1, 4, 6, 6), f32), np.ones((4, 4, 3, 3), f32)
    with pytest.raises(errors.SelectionError, match="channelsOk=False"):
        conv({"X": x, "W": np.ones((4, 3, 3, 3), f32)})
    with pytest.raises(errors.SelectionError, match="padsOk=False"):
        conv({"X": x, "W": w}, attrs={"pads": [1, 1]})
    with pytest.raises(errors.SelectionError, match="padsOk=False"):
        conv({"X": x, "W": w}, attrs={"pads": [0, 0, 0, -1]})
    with pytest.raises(errors.SelectionError, match="stridesOk=False"):
        conv({"X": x, "W": w}, attrs={"strides": [1, 0]})
    with pytest.raises(errors.SelectionError, match="dilationsOk=False"):
        conv({"X": x, "W": w}, attrs={"dilations": [2]})
    with pytest.raises(errors.SelectionError, match="groupOk=False"):
        conv({"X": np.ones((1, 8, 6, 6), f32), "W": np.ones((6, 2, 3, 3), f32)}, attrs={"group": 4})
    with pytest.raises(errors.SelectionError, match="biasOk=False"):
        conv({"X": x, "W": w, "B": np.ones(3, f32)})
    with pytest.raises(errors.SelectionError, match="kernelFitsOk=False"):
        conv({"X": np.ones((1, 4, 2, 2), f32), "W": w})
    with pytest.raises(errors.RankError):
        conv({"X": np.ones((4, 6, 6), f32), "W": w})
    with pytest.raises(errors.RankError):
        conv({"X": x, "W": w, "B": np.ones((1, 4), f32)})
    with pytest.raises(errors.DTypeError) as info:
        conv({"X": x, "W": w.astype(np.float16)})
    assert info.value.argument == "W"
    with pytest.raises(errors.AttributeValueError):
        conv({"X": x, "W": w}, attrs={"group": 1.5})
    with pytest.raises(errors.UnknownInputError):
        conv({"X": x, "W": w}, attrs={"auto_pad": "SAME_UPPER"})
    with pytest.raises(errors.MissingInputError):
        conv({"X": x})
    with pytest.raises(errors.VariantRejectedError, match="Mg >= 2"):
        conv({"X": np.ones((1, 4, 6, 6), f32), "W": np.ones((4, 1, 3, 3), f32)}, attrs={"group": 4}, variant="channels")
    with pytest.raises(errors.VariantRejectedError):
        conv({"X": x, "W": w, "B": np.ones(4, f32)}, variant="direct")  # the twin without B refuses it
    with pytest.raises(errors.SelectionError, match="blockOk=False"):
        conv({"X": x, "W": w}, tunables={"CHANNELS_PER_INVOCATION": 0}, variant="channels")
