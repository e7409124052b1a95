"""kernel.py's Kernel beyond its calls (tested with the kernels): evaluate, errors naming the manifest, copies."""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pytest

import webgpu_kernels as wk
from webgpu_kernels import errors

from references import quick_gelu as quick_gelu_reference


def test_evaluate_gives_an_expression_value_in_the_call_scope():
    """Kernel.evaluate sees what the manifest's top-level expressions see: inputs' and outputs'
    shapes, dtypes as WGSL names, top-level constants (not a variant's own)."""
    bias_add = wk.get_kernel("com.microsoft.BiasAdd")
    inputs = {"X": ((2, 5, 8), "float16"), "bias": ((8,), "float16"), "skip": ((2, 5, 8), "float16")}
    assert bias_add.evaluate("numel(shapes.Y) * hidden", inputs) == 80 * 8
    assert bias_add.evaluate("[scalar, usesF16]", inputs) == ["f16", True]
    with pytest.raises(errors.ExpressionError, match="vectorScalar.* is undefined") as info:  # vec4's own constant
        bias_add.evaluate("vectorScalar", inputs)
    assert str(info.value).startswith("evaluate: expression 'vectorScalar'")  # had read "expression: expression"
    with pytest.raises(errors.MissingInputError, match="bias"):  # the contract is checked first
        bias_add.evaluate("1", {"X": ((2, 5, 8), "float16")})


def test_evaluate_takes_what_a_manifest_takes_in_an_expression_s_place():
    """A string is an expression and a JSON number or boolean a literal value, as in a manifest
    (manifest.schema.json's `value`; bench.json's `flops` may be a number); anything else had come
    back unchanged, a list or None as if it had been evaluated."""
    quick_gelu = wk.get_kernel("com.microsoft.QuickGelu")
    meta = {"X": wk.TensorMeta((2, 4), "float32")}
    assert quick_gelu.evaluate("numel(shapes.X)", meta) == 8
    for literal in (5, 2.5, True):
        value = quick_gelu.evaluate(literal, meta)
        assert value == literal and type(value) is type(literal)
    with pytest.raises(errors.ExpressionSandboxError, match="128"):  # held to a manifest literal's bounds
        quick_gelu.evaluate(2**200, meta)
    for given, got in (([1, 2], "list [1, 2]"), (None, "NoneType None"), ((8,), "tuple (8,)"),
                       ({"a": 1}, "dict {'a': 1}"), (np.int64(3), "int64"), (b"1", "bytes b'1'")):
        with pytest.raises(errors.InputError, match=re.escape(f"got {got}")) as info:
            quick_gelu.evaluate(given, meta)
        assert info.value.argument == "expression"
        assert "an expression string, or a number or boolean" in str(info.value)
    with pytest.raises(errors.InputError) as info:  # the argument is checked before the inputs
        quick_gelu.evaluate([1], {})
    assert info.value.argument == "expression"


def test_an_expression_that_fails_for_a_call_names_its_manifest(tmp_path):
    """The error said where in the manifest (bindingSets...value) but not which manifest."""
    import json
    import shutil

    from conftest import PACKAGES_DIR

    root = shutil.copytree(PACKAGES_DIR / "demo.ScaleShift", tmp_path / "broken")
    manifest = json.loads((root / "manifest.json").read_text("utf-8"))
    manifest["derive"]["quads"] = "n // (n - n)"  # fails for every call, not at load
    manifest["bindingSets"]["scalarIO"][2]["struct"]["fields"][0]["value"] = "quads"
    (root / "manifest.json").write_text(json.dumps(manifest), "utf-8")
    kernel = wk.load_kernel(root)
    with pytest.raises(errors.ExpressionError, match="ZeroDivisionError") as info:
        kernel({"X": np.ones(7, np.float32)})
    assert f"in {root / 'manifest.json'}" in info.value.__notes__


def test_a_kernel_copies_as_itself_and_pickles_as_where_it_came_from(tmp_path):
    """copy.deepcopy of a kernel (a model or dataclasses.asdict holding one) had raised TypeError
    "Template.__new__() missing 1 required positional argument: 'source'", and pickling it (a spawn
    worker's argument) a PicklingError about a local function."""
    import copy
    import dataclasses
    import pickle
    import shutil

    kernel = wk.get_kernel("com.microsoft.QuickGelu")
    assert copy.copy(kernel) is kernel and copy.deepcopy(kernel) is kernel

    @dataclasses.dataclass
    class Block:
        act: Any

    assert dataclasses.asdict(Block(kernel))["act"] is kernel
    assert pickle.loads(pickle.dumps(kernel)) is kernel  # the process's shared embedded kernel
    # With its digest: a process whose release embeds another QuickGelu (here: a pickle whose digest
    # differs) refuses it, at its first use, rather than run other code than the pickling process did.
    pickled = pickle.dumps(kernel)
    assert kernel.tuning_key.encode() in pickled
    other = pickled.replace(kernel.tuning_key.encode(), kernel.tuning_key[::-1].encode())
    with pytest.raises(wk.PackageError, match=r"embeds another com\.microsoft\.QuickGelu than the pickling process's"):
        pickle.loads(other)({"X": np.ones(4, np.float32)})
    shutil.copytree(kernel.package.root, tmp_path / "pkg")
    local = wk.load_kernel(tmp_path / "pkg")
    assert copy.deepcopy(local) is local
    assert pickle.loads(pickle.dumps(local)).package.root == local.package.root  # as its path (test_processes.py)


@pytest.fixture
def name_checks(monkeypatch):
    """The input names each check_input_names call was given, sorted, in order."""
    from webgpu_kernels import call_arguments, contract

    checks = []
    real = contract.check_input_names

    def counted(manifest, names):
        checks.append(sorted(names))
        return real(manifest, names)

    monkeypatch.setattr(contract, "check_input_names", counted)
    monkeypatch.setattr(call_arguments, "check_input_names", counted)
    return checks


def _own_copy(name: str, tmp_path) -> wk.Kernel:
    """A shipped package loaded from a copy of its folder: a kernel whose caches no other test shares."""
    import shutil

    return wk.load_kernel(shutil.copytree(wk.get_kernel(name).package.root, tmp_path / "pkg"))


def test_a_new_shape_checks_the_input_names_once(tmp_path, name_checks):
    """The names were checked before any value was read, then again by the contract check: twice on
    every call of a new shape (and for explain, plan and tuning_class). Once now."""
    kernel = _own_copy("com.microsoft.BiasAdd", tmp_path)
    inputs = {"X": np.ones((2, 3, 8), np.float32), "bias": np.ones(8, np.float32), "skip": np.ones((2, 3, 8), np.float32)}
    for use in (kernel, kernel.explain, kernel.plan, kernel.tuning_class):
        name_checks.clear()
        use(inputs)
        assert name_checks == [["X", "bias", "skip"]], use
    name_checks.clear()
    kernel(inputs)  # a shape planned before: no check at all
    assert name_checks == []
    with pytest.raises(errors.UnknownInputError, match="'nothing'"):  # refused as before, by that one check
        kernel({**inputs, "nothing": None})
    assert len(name_checks) == 1


def test_a_call_with_an_optional_input_given_as_none_checks_the_names_once(name_checks):
    """The call left the input out by calling itself again without it, which checked the names a
    second time: twice on every such call, of a new shape or not."""
    from conftest import PACKAGES_DIR

    kernel = wk.load_kernel(PACKAGES_DIR / "demo.LayerNorm")
    f32 = np.float32
    inputs = {"X": np.ones((2, 8), f32), "Scale": np.ones(8, f32), "B": None}
    for _ in range(2):  # a new shape, then one planned before
        name_checks.clear()
        out = kernel(inputs)
        assert name_checks == [["B", "Scale", "X"]] and np.allclose(out["Y"], 0), name_checks  # each row's X is its mean
    name_checks.clear()
    with pytest.raises(errors.UnknownInputError, match="'nothing'"):  # refused as before, by that one check
        kernel({**inputs, "nothing": None})
    assert len(name_checks) == 1


def test_a_variant_argument_of_another_type_is_named_briefly(quick_gelu):
    """variant= given a 100,000-item list quoted it whole in the error; it is named by type and at
    most 60 characters, as every attribute, tunable and adapter= error."""
    import numpy as np

    from webgpu_kernels import errors

    with pytest.raises(errors.InputError) as info:
        quick_gelu({"X": np.ones(4, np.float32)}, variant=list(range(100_000)))
    assert info.value.argument == "variant" and len(str(info.value)) < 400, len(str(info.value))
    assert "got list [0, 1, 2" in str(info.value)


# --- outputs=: the outputs a call asks for --------------------------------------------------------


def _layer_norm64(x, scale, bias=None, epsilon=1e-5):
    """LayerNormalization over the last axis in float64: Y, Mean, InvStdDev (an independent reference)."""
    x = np.asarray(x, np.float64)
    mean = x.mean(axis=-1, keepdims=True)
    inv = 1.0 / np.sqrt(((x - mean) ** 2).mean(axis=-1, keepdims=True) + epsilon)
    y = (x - mean) * inv * np.asarray(scale, np.float64) + (0.0 if bias is None else np.asarray(bias, np.float64))
    return {"Y": y, "Mean": mean, "InvStdDev": inv}


@pytest.fixture(scope="module")
def layer_norm():
    from conftest import PACKAGES_DIR

    return wk.load_kernel(PACKAGES_DIR / "ai.onnx.LayerNormalization")


@pytest.mark.parametrize("width", [16, 300])  # a short row (the row variants) and a long one (workgroup)
def test_outputs_declines_optional_outputs_and_picks_a_variant_that_skips_them(layer_norm, width):
    """outputs=["Y"]: the variants that write Mean and InvStdDev are passed over for one that writes
    neither; the result holds Y alone. outputs=None returns all three, as before; a subset of the
    statistics is computed by a variant that writes both, the other dropped."""
    rng = np.random.default_rng(width)
    x, scale, bias = (rng.standard_normal(s).astype(np.float32) for s in ((5, width), (width,), (width,)))
    kept = [a.copy() for a in (x, scale, bias)]
    ref = _layer_norm64(x, scale, bias)
    inputs = {"X": x, "Scale": scale, "B": bias}
    for _ in range(2):  # the second call takes the cached plan
        lean = layer_norm(inputs, outputs=["Y"])
        assert set(lean) == {"Y"}
        np.testing.assert_allclose(lean["Y"], ref["Y"], rtol=2e-5, atol=2e-5)
    assert "nostats" in layer_norm.plan(inputs, outputs=["Y"])[1].variant
    full = layer_norm(inputs)
    assert set(full) == {"Y", "Mean", "InvStdDev"}
    for name in full:
        np.testing.assert_allclose(full[name], ref[name], rtol=2e-5, atol=2e-5)
    assert "nostats" not in layer_norm.plan(inputs)[1].variant
    mean_only = layer_norm(inputs, outputs=("Mean", "Y"))
    assert list(mean_only) == ["Y", "Mean"]  # the manifest's order
    np.testing.assert_allclose(mean_only["Mean"], ref["Mean"], rtol=2e-5, atol=2e-5)
    with pytest.raises(errors.MissingOutputError, match="not ask for") as info:
        mean_only["InvStdDev"]
    assert "outputs=" in str(info.value)
    stats_only = layer_norm(inputs, outputs=["InvStdDev", "Mean"])  # Y is computed (not optional) and dropped
    assert list(stats_only) == ["Mean", "InvStdDev"]
    np.testing.assert_allclose(stats_only["InvStdDev"], ref["InvStdDev"], rtol=2e-5, atol=2e-6)
    for given, before in zip((x, scale, bias), kept, strict=True):
        np.testing.assert_array_equal(given, before)


def test_outputs_in_gpu_output_mode(layer_norm):
    rng = np.random.default_rng(7)
    x, scale = rng.standard_normal((3, 40)).astype(np.float32), rng.standard_normal(40).astype(np.float32)
    got = layer_norm({"X": x, "Scale": scale}, outputs=["Mean"], output="gpu")
    assert set(got) == {"Mean"} and isinstance(got["Mean"], wk.GpuTensor)
    np.testing.assert_allclose(got["Mean"].numpy(), _layer_norm64(x, scale)["Mean"], rtol=2e-5, atol=2e-6)
    got["Mean"].release()
    lean = layer_norm({"X": wk.to_gpu(x), "Scale": scale}, outputs=["Y"], output="gpu")
    assert set(lean) == {"Y"}
    np.testing.assert_allclose(lean["Y"].numpy(), _layer_norm64(x, scale)["Y"], rtol=2e-5, atol=2e-5)


def test_outputs_trace_says_why_a_variant_is_passed_over(layer_norm):
    """explain(outputs=...) rejects a variant that does not write an asked optional output, and
    says of one that writes an unasked one that another was preferred."""
    inputs = {"X": ((4, 16), "float32"), "Scale": ((16,), "float32")}
    lean = layer_norm.explain(inputs, outputs=["Y"])
    assert lean.chosen == "row_nostats_nobias" and lean.asked == ("Y",)
    verdicts = {v.variant: v for v in lean.verdicts}
    assert verdicts["row_nobias"].accepted and verdicts["row_nobias"].unasked == ("Mean", "InvStdDev")
    assert "writes Mean, InvStdDev, which the call does not ask for" in verdicts["row_nobias"].reason()
    text = str(lean)
    assert "output Mean:" in text and "not asked for" in text, text
    stats = layer_norm.explain(inputs, outputs=["Y", "Mean"])
    assert stats.chosen == "row_nobias"
    rejected = {v.variant: v for v in stats.verdicts}["row_nostats_nobias"]
    assert not rejected.accepted and rejected.lacks == ("Mean",)
    assert "does not write Mean, which the call asks for (outputs=)" in rejected.reason()
    assert stats.as_dict()["asked"] == ["Y", "Mean"]
    assert {v["variant"]: v for v in stats.as_dict()["variants"]}["row_nostats_nobias"]["lacks"] == ["Mean"]
    with pytest.raises(errors.VariantRejectedError, match="does not write Mean"):
        layer_norm({"X": np.ones((2, 16), np.float32), "Scale": np.ones(16, np.float32)}, outputs=["Mean"],
                   variant="row_nostats_nobias")
    forced = layer_norm({"X": np.ones((2, 16), np.float32), "Scale": np.ones(16, np.float32)}, outputs=["Y"],
                        variant="row_nobias")  # forced: it writes Mean too, which is dropped
    assert set(forced) == {"Y"}


def test_outputs_falls_back_to_a_variant_that_writes_unasked_outputs(write_package):
    """Where no variant that skips the unasked optional output accepts the call, the usual choice
    runs and the output it writes is dropped; where one does, it is chosen over a higher priority."""
    from conftest import optional_output_package

    k = wk.load_kernel(optional_output_package(write_package, [("withz", 10, True), ("noz", 1, False,
                                                                ["numel(shapes.X) >= 8"])]))  # fmt: skip
    small, large = np.arange(4, dtype=np.float32), np.arange(16, dtype=np.float32)
    got = k({"X": small}, outputs=["Y"])
    assert set(got) == {"Y"} and k.plan({"X": small}, outputs=["Y"])[1].variant == "withz"
    np.testing.assert_array_equal(got["Y"], small)
    explanation = k.explain({"X": small}, outputs=["Y"])
    assert explanation.chosen == "withz" and "which the call does not ask for" in str(explanation)
    assert set(k({"X": large}, outputs=["Y"])) == {"Y"} and k.plan({"X": large}, outputs=["Y"])[1].variant == "noz"
    assert set(k({"X": large})) == {"Y", "Z"}  # outputs=None: the usual choice
    np.testing.assert_array_equal(k({"X": large}, outputs=["Z"])["Z"], 2 * large)
    assert k.render({"X": large}, outputs=["Y"]) != k.render({"X": large})


def test_outputs_names_must_be_declared_outputs(layer_norm):
    inputs = {"X": np.ones((2, 8), np.float32), "Scale": np.ones(8, np.float32)}
    for given, got in ((["Y", "Q"], "'Q'"), ("Y", "str 'Y'"), ([3], "int 3"), (5, "int 5")):
        with pytest.raises(errors.InputError, match=re.escape(got)) as info:
            layer_norm(inputs, outputs=given)
        assert info.value.argument == "outputs"
        assert "['Y', 'Mean', 'InvStdDev']" in info.value.expected
    with pytest.raises(errors.InputError) as info:
        layer_norm.explain(inputs, outputs=["mean"])
    assert info.value.argument == "outputs"


def test_outputs_that_names_none_is_refused(layer_norm):
    """outputs=[] (a filtered list that came out empty, say) had run the kernel and returned {}:
    every output computed, then dropped unread. It asks for nothing a call can return: an InputError
    that says outputs=None takes them all, in the call, explain, render and plan alike."""
    inputs = {"X": np.ones((2, 8), np.float32), "Scale": np.ones(8, np.float32)}
    for empty in ([], (), set(), frozenset(), iter(())):
        with pytest.raises(errors.InputError, match="names no output") as info:
            layer_norm(inputs, outputs=empty)
        assert info.value.argument == "outputs" and "outputs=None" in info.value.hint
        if not isinstance(empty, (list, tuple, set, frozenset)):  # an iterator's class and address say nothing
            assert "an empty iterator" in info.value.received and "object at" not in str(info.value), info.value
    for method in (layer_norm.explain, layer_norm.render, layer_norm.plan):
        with pytest.raises(errors.InputError, match="names no output"):
            method(inputs, outputs=[])
    assert set(layer_norm(inputs, outputs=["Y"])) == {"Y"}  # a name still runs


def test_a_stored_tuning_result_that_writes_an_unasked_output_is_not_forced(tuning_dir, device, write_package):
    """A tuned variant writing an optional output the call does not ask for, where the manifest's
    own choice for the call writes none, is passed over (explain says why); one lacking an asked
    output too; where the call's own choice writes it as well, the stored one still runs."""
    from webgpu_kernels import tuning

    from conftest import optional_output_package

    k = wk.load_kernel(optional_output_package(write_package, [("noz", 10, False), ("withz", 1, True)]))
    x = np.ones(4096, np.float32)
    cache = tuning.cache_for(device.adapter.name, device.adapter.backend)
    cache.record(k.tuning_key, {"T": "float32"}, {"X": x.shape}, tuning.TunedChoice("withz", {"WORKGROUP_SIZE": 128}, 1e-5))
    assert k.plan({"X": x}, tuned=True)[1].variant == "withz"  # outputs=None: it returns more, and runs
    assert k.plan({"X": x}, tuned=True, outputs=["Y"])[1].variant == "noz"
    assert k.render({"X": x}, outputs=["Y"]) == k.render({"X": x}, variant="noz")  # render as the call
    assert set(k({"X": x}, outputs=["Y"])) == {"Y"}
    reason = k.explain({"X": x}, outputs=["Y"]).tuning_entry["reason"]
    assert "'withz' writes Z, which the call does not ask for" in reason, reason
    assert k.plan({"X": x}, tuned=True, outputs=["Z"])[1].variant == "withz"  # noz cannot: the stored one runs
    cache.record(k.tuning_key, {"T": "float32"}, {"X": x.shape}, tuning.TunedChoice("noz", {"WORKGROUP_SIZE": 128}, 1e-5))
    assert k.plan({"X": x}, tuned=True, outputs=["Z"])[1].variant == "withz"
    assert "does not write Z" in k.explain({"X": x}, outputs=["Z"]).tuning_entry["reason"]


# --- render and work_key: the WGSL a call with these arguments would run -----------------------------


def test_render_and_work_key_follow_the_call_s_arguments(quick_gelu):
    """render and work_key describe the call given: its attributes (QuickGelu's alpha is the WGSL's
    ALPHA), its tunables (WORKGROUP_SIZE is the entry point's @workgroup_size), a forced variant
    (scalar reads f32, not vec4<f32>) and its outputs=. Dropping any of them went unnoticed."""
    meta = {"X": ((64,), "float32")}
    default = quick_gelu.render(meta)["main"]
    assert "const ALPHA: f32 = 1.702;" in default and "@workgroup_size(256)" in default
    assert "array<vec4<f32>>" in default
    assert "const ALPHA: f32 = 2.0;" in quick_gelu.render(meta, attrs={"alpha": 2.0})["main"]
    assert "@workgroup_size(64)" in quick_gelu.render(meta, tunables={"WORKGROUP_SIZE": 64})["main"]
    scalar = quick_gelu.render(meta, variant="scalar")["main"]
    assert "array<vec4<f32>>" not in scalar and "array<f32>" in scalar
    with pytest.raises(errors.InputError, match="names no output"):
        quick_gelu.render(meta, outputs=[])
    # work_key: the variant, then per pass the WGSL, the threads, the workgroup size, the uniforms' bytes
    variant, (text, threads, size, uniforms) = quick_gelu.work_key(meta)
    assert (variant, text, threads, size) == ("vec4", default, 64 // 4, (256, 1, 1))
    assert np.frombuffer(uniforms[2], np.uint32)[0] == 64 // 4  # params.count: vec4 elements
    assert "const ALPHA: f32 = 2.0;" in quick_gelu.work_key(meta, attrs={"alpha": 2.0})[1][0]
    assert quick_gelu.work_key(meta, tunables={"WORKGROUP_SIZE": 64})[1][2] == (64, 1, 1)
    forced = quick_gelu.work_key(meta, variant="scalar")
    assert forced[0] == "scalar" and forced[1][:2] == (scalar, 64)
    for method in (quick_gelu.render, quick_gelu.work_key):
        with pytest.raises(errors.SelectionError, match="'nope'"):
            method(meta, variant="nope")
        with pytest.raises(errors.InputError, match="names no output"):
            method(meta, outputs=[])
        with pytest.raises(errors.MissingInputError, match="X"):
            method({})
        with pytest.raises(wk.AdapterNotFoundError, match="no-such-adapter"):  # adapter= is the call's
            method(meta, adapter="no-such-adapter")
    with pytest.raises(wk.AdapterNotFoundError, match="no-such-adapter"):
        quick_gelu.flush(adapter="no-such-adapter")


def test_render_and_work_key_follow_outputs(layer_norm):
    """outputs=["Y"] renders the variant that writes no statistics, as the call runs it."""
    meta = {"X": ((4, 16), "float32"), "Scale": ((16,), "float32")}
    assert layer_norm.work_key(meta, outputs=["Y"])[0] == "row_nostats_nobias"
    assert layer_norm.work_key(meta)[0] == "row_nobias"
    assert layer_norm.render(meta, outputs=["Y"]) == layer_norm.render(meta, variant="row_nostats_nobias")
    assert layer_norm.render(meta) == layer_norm.render(meta, variant="row_nobias")


def test_render_runs_a_stored_tuning_result_as_the_call_would(quick_gelu, tuning_dir, device):
    """Without variant= or tunables=, render gives the WGSL of the stored tuning result the call
    would run; not for a call whose attributes differ from the class it was stored for, nor for a
    shape its variant refuses (vec4 for 63 elements), where the manifest's own choice runs."""
    from webgpu_kernels import tuning

    cache = tuning.cache_for(device.adapter.name, device.adapter.backend)
    for n, stored in ((64, "scalar"), (63, "vec4")):
        cache.record(quick_gelu.tuning_key, {"T": "float32"}, {"X": (n,)},
                     tuning.TunedChoice(stored, {"WORKGROUP_SIZE": 128}, 1e-5))  # fmt: skip
    meta = {"X": ((64,), "float32")}
    tuned = quick_gelu.render(meta)["main"]
    assert "@workgroup_size(128)" in tuned and "array<vec4<f32>>" not in tuned  # scalar, tuned
    assert quick_gelu.work_key(meta)[0] == "vec4"  # work_key: the manifest's choice (what the tuner times)
    assert "@workgroup_size(64)" in quick_gelu.render(meta, tunables={"WORKGROUP_SIZE": 64})["main"]
    only = "a stored result applies only to a call that names neither a variant nor tunables"
    for given, named in (({"tunables": {"WORKGROUP_SIZE": 64}}, "tunables={'WORKGROUP_SIZE': 64}"),
                         ({"variant": "vec4"}, "variant='vec4'")):  # explain says why it does not run
        entry = quick_gelu.explain(meta, **given).tuning_entry
        assert (entry["variant"], entry["used"], entry["reason"]) == ("scalar", False, f"the call gives {named}: {only}")
    other = quick_gelu.render(meta, attrs={"alpha": 2.0})["main"]  # another class: nothing stored for it
    assert "@workgroup_size(256)" in other and "array<vec4<f32>>" in other
    refused = quick_gelu.render({"X": ((63,), "float32")})["main"]  # vec4 refuses 63: vec4_tail's own
    assert "@workgroup_size(256)" in refused, refused
    cache.record(quick_gelu.tuning_key, {"T": "float32"}, {"X": (64,)},
                 tuning.TunedChoice("scalar", {"WORKGROUP_SIZE": 32}, 1e-5), attrs={"alpha": 2.0})  # fmt: skip
    alpha2 = quick_gelu.render(meta, attrs={"alpha": 2.0})["main"]  # that class's result, with the call's alpha
    assert "@workgroup_size(32)" in alpha2 and "const ALPHA: f32 = 2.0;" in alpha2, alpha2
    shaders, entry = quick_gelu._render(meta, {"alpha": 2.0}, None, None, None, entry=True)  # the CLI's render
    assert shaders["main"] == alpha2 and entry is not None and entry["used"] and entry["variant"] == "scalar", entry


def test_evaluate_sees_the_call_s_attrs_and_tunables_and_names_its_place(quick_gelu):
    """evaluate's scope is the call's: attrs= and tunables= override the defaults there; adapter= is
    the call's too; a refused literal names ``where``; a refused argument's repr is cut to 60 characters."""
    meta = {"X": ((8,), "float32")}
    assert quick_gelu.evaluate("attrs.alpha", meta) == pytest.approx(1.702)
    assert quick_gelu.evaluate("attrs.alpha", meta, attrs={"alpha": 2.0}) == 2.0
    assert quick_gelu.evaluate("tunables.WORKGROUP_SIZE", meta, tunables={"WORKGROUP_SIZE": 64}) == 64
    with pytest.raises(wk.AdapterNotFoundError, match="no-such-adapter"):
        quick_gelu.evaluate("1", meta, adapter="no-such-adapter")
    with pytest.raises(errors.ExpressionSandboxError) as info:
        quick_gelu.evaluate(2**200, meta, where="bench.json flops")
    assert "bench.json flops" in str(info.value), info.value
    with pytest.raises(errors.InputError) as info:
        quick_gelu.evaluate(list(range(1000)), meta)
    assert info.value.expected == ("an expression string, or a number or boolean (a literal value, as in a "
                                   "manifest)")  # fmt: skip
    assert info.value.received == "list " + repr(list(range(1000)))[:57] + "...", info.value.received


def test_plan_and_the_call_run_a_stored_result_with_the_call_s_attributes(quick_gelu, tuning_dir, device):
    """A tuning result stored for calls with alpha=2.0 runs for such a call with alpha=2.0 (QuickGelu's
    x * sigmoid(alpha * x), float64 reference), in the call and in plan(tuned=True); plan's adapter= is the call's."""
    from webgpu_kernels import tuning

    cache = tuning.cache_for(device.adapter.name, device.adapter.backend)
    cache.record(quick_gelu.tuning_key, {"T": "float32"}, {"X": (64,)},
                 tuning.TunedChoice("scalar", {"WORKGROUP_SIZE": 32}, 1e-5), attrs={"alpha": 2.0})  # fmt: skip
    x = np.linspace(-4, 4, 64, dtype=np.float32)
    meta = {"X": x}
    _, tuned = quick_gelu.plan(meta, attrs={"alpha": 2.0}, tuned=True)
    assert (tuned.variant, tuned.tunables["WORKGROUP_SIZE"]) == ("scalar", 32)
    assert tuned is quick_gelu.plan(meta, attrs={"alpha": 2.0}, variant="scalar", tunables={"WORKGROUP_SIZE": 32})[1]
    assert quick_gelu.plan(meta, tuned=True)[1].variant == "vec4"  # alpha's default: nothing stored
    for alpha in (2.0, 1.702):
        got = quick_gelu({"X": x}, attrs={"alpha": alpha})["Y"]
        np.testing.assert_allclose(got, quick_gelu_reference(x, alpha), rtol=1e-5, atol=1e-6)
    with pytest.raises(wk.AdapterNotFoundError, match="no-such-adapter"):
        quick_gelu.plan(meta, adapter="no-such-adapter")


def test_explain_of_a_forced_variant_that_lacks_an_asked_output(layer_norm):
    """explain(variant=..., outputs=...) reports what that call raises: the forced variant writes no
    Mean, which the call asks for, so nothing is chosen and no scratch is reported (docs: None)."""
    meta = {"X": ((2, 16), "float32"), "Scale": ((16,), "float32")}
    refused = layer_norm.explain(meta, variant="row_nostats_nobias", outputs=["Mean"])
    assert refused.chosen is None and refused.scratch is None and refused.as_dict()["scratch"] is None
    assert "does not write Mean" in refused.refused, refused.refused
    with pytest.raises(errors.VariantRejectedError, match="does not write Mean"):  # what the call raises
        layer_norm({"X": np.ones((2, 16), np.float32), "Scale": np.ones(16, np.float32)}, variant="row_nostats_nobias",
                   outputs=["Mean"])  # fmt: skip
    accepted = layer_norm.explain(meta, variant="row_nobias", outputs=["Y"])
    assert (accepted.chosen, accepted.refused, accepted.scratch) == ("row_nobias", None, ())


def test_a_call_on_the_cached_plan_reads_strided_and_big_endian_arrays_as_numpy_does(quick_gelu):
    """The second call of a shape takes the cached plan; its arrays must still be uploaded as their
    values: a transposed view (strided) or big-endian data, after a call that planned that shape."""
    rng = np.random.default_rng(3)
    base = rng.standard_normal((8, 4)).astype(np.float32)
    for x in (np.ascontiguousarray(base.T), base.T, base.T.astype(">f4"), base.T.astype(">f4")):
        np.testing.assert_allclose(quick_gelu({"X": x})["Y"], quick_gelu_reference(x), rtol=1e-5, atol=1e-6)


def test_a_gpu_tensor_input_of_a_planned_shape_takes_the_cached_plan(tmp_path, name_checks):
    """A call whose inputs are GpuTensors of a shape seen before finds its plan by the key alone, as
    for NumPy arrays: no contract check (the names are checked once, by the first call)."""
    kernel = _own_copy("com.microsoft.QuickGelu", tmp_path)
    x = np.linspace(-2, 2, 16, dtype=np.float32)
    tensor = wk.to_gpu(x)
    for checks in ([["X"]], []):
        name_checks.clear()
        got = kernel({"X": tensor})["Y"]
        assert name_checks == checks
        np.testing.assert_allclose(got, quick_gelu_reference(x), rtol=1e-5, atol=1e-6)
    tensor.release()


def test_an_optional_input_given_as_none_keeps_every_other_argument_of_the_call():
    """B=None is the call that leaves B out, with the call's own attrs, variant, tunables, output,
    adapter and outputs (LayerNormalization in float64 as the reference)."""
    from conftest import PACKAGES_DIR

    kernel = wk.load_kernel(PACKAGES_DIR / "demo.LayerNorm")
    rng = np.random.default_rng(5)
    x, scale = rng.standard_normal((3, 8)).astype(np.float32), rng.standard_normal(8).astype(np.float32)
    for epsilon in (1e-5, 4.0):  # a large epsilon: dropping attrs= shows
        y = _layer_norm64(x, scale, epsilon=epsilon)["Y"]
        got = kernel({"X": x, "Scale": scale, "B": None}, attrs={"epsilon": epsilon}, outputs=["Y"], output="gpu")
        assert set(got) == {"Y"} and isinstance(got["Y"], wk.GpuTensor)
        np.testing.assert_allclose(got["Y"].numpy(), y, rtol=2e-5, atol=2e-5)
        got["Y"].release()
    inputs = {"X": x, "Scale": scale, "B": None}
    with pytest.raises(errors.VariantRejectedError, match="onepass"):  # a bias variant, B left out
        kernel(inputs, variant="onepass")
    with pytest.raises(errors.UnknownInputError, match="'NOPE'"):
        kernel(inputs, tunables={"NOPE": 1})
    with pytest.raises(wk.AdapterNotFoundError, match="no-such-adapter"):
        kernel(inputs, adapter="no-such-adapter")
    with pytest.raises(errors.InputError) as info:
        kernel(inputs, output="torch")
    assert (info.value.argument, info.value.received) == ("output", "'torch'")


def test_the_fast_plan_cache_keeps_the_newest_plans_within_its_bound(tmp_path, monkeypatch):
    """Past PLAN_CACHE_SIZE call keys the oldest is dropped: calls of new shapes go on running (an
    eviction that failed would refuse every call past the bound), and the bound holds (pipeline memory)."""
    from webgpu_kernels import kernel as kernel_module

    monkeypatch.setattr(kernel_module, "PLAN_CACHE_SIZE", 2)
    kernel = _own_copy("com.microsoft.QuickGelu", tmp_path)
    for n in (4, 8, 12, 16):
        x = np.linspace(-1, 1, n, dtype=np.float32)
        np.testing.assert_allclose(kernel({"X": x})["Y"], quick_gelu_reference(x), rtol=1e-5, atol=1e-6)
    assert [key[-1][1] for key in kernel._fast_plans] == [(12,), (16,)]  # the newest two, oldest first
