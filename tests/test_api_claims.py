"""docs/python-api.md and docs/errors.md read as a contract: their prose claims that no other test pins.

Organised by the docs' headings; each test's docstring quotes the line it pins. The code blocks run
in tests/test_docs_examples.py (with the class table's hierarchy and attributes, docs -> code), the
bad-input table row by row in tests/test_bad_input.py, the settings in tests/test_buffers.py and
tests/test_tuning.py, processes in tests/test_processes.py: not repeated here.
"""

from __future__ import annotations

import array
import copy
import inspect
import math
import re
from pathlib import Path

import numpy as np
import pytest

import webgpu_kernels as wk
from webgpu_kernels import errors

REPO_ROOT = Path(__file__).resolve().parents[1]
PACKAGES_DIR = REPO_ROOT / "tests" / "packages"
PYTHON_API = (REPO_ROOT / "docs" / "python-api.md").read_text(encoding="utf-8")
ERRORS_MD = (REPO_ROOT / "docs" / "errors.md").read_text(encoding="utf-8")


class ArrayOwner:
    """An array-like other than NumPy's (as a torch tensor is): NumPy reads it through __array__."""

    def __init__(self, value) -> None:
        self.value = np.array(value)

    def __array__(self, dtype=None, copy=None):
        return self.value if dtype is None else self.value.astype(dtype)


# --- python-api.md: Getting a kernel -------------------------------------------------------------


def test_an_embedded_kernel_is_shared_and_its_version_must_be_its_contract_version(quick_gelu):
    """"`get_kernel("com.microsoft.QuickGelu")` | an embedded package"; "A `Kernel` names ... its
    contract version with `contract_version`"; get_kernel "shares one per op id"."""
    assert wk.get_kernel("com.microsoft.QuickGelu") is quick_gelu
    assert isinstance(quick_gelu, wk.Kernel) and quick_gelu.op_id == "com.microsoft.QuickGelu"
    assert wk.get_kernel("com.microsoft.QuickGelu", version=quick_gelu.contract_version) is quick_gelu
    with pytest.raises(wk.PackageError, match="contract version"):
        wk.get_kernel("com.microsoft.QuickGelu", version=quick_gelu.contract_version + 1)


def test_a_hub_kernel_needs_a_version_or_a_revision():
    """"a kernel repository on the Hugging Face Hub: `version=N` (revision `vN`) or `revision=` is
    required" (refused before anything is fetched)."""
    with pytest.raises(wk.PackageError, match=r"needs version=N .* or revision="):
        wk.get_kernel("webgpu-kernels/com.microsoft.BiasAdd")


def test_a_folder_needs_trust_from_get_kernel_not_from_load_kernel():
    """"`get_kernel` also takes a folder ... with `trust_remote_code=True` (without it, a
    `TrustError`); `load_kernel` is the call for your own folder. Both return a `Kernel`"."""
    folder = PACKAGES_DIR / "demo.ScaleShift"
    with pytest.raises(wk.TrustError) as info:
        wk.get_kernel(str(folder))
    assert info.value.location and info.value.reason
    trusted, loaded = wk.get_kernel(str(folder), trust_remote_code=True), wk.load_kernel(folder)
    assert isinstance(trusted, wk.Kernel) and isinstance(loaded, wk.Kernel)
    assert trusted.op_id == loaded.op_id == "demo.ScaleShift"


def test_every_exported_name_is_documented():
    """"Also in the package: ... every error class and the two warnings ... are exported too
    ([errors.md](errors.md))": each name of ``webgpu_kernels.__all__`` is named in python-api.md, or,
    an error or warning class, in errors.md (``Explanation`` had been named in neither)."""
    def named(name: str, text: str) -> bool:
        return re.search(rf"`(?:wk\.|webgpu_kernels\.)?{re.escape(name)}[`(]", text) is not None

    missing = [name for name in wk.__all__ if not named(name, PYTHON_API)
               and not (isinstance(getattr(wk, name), type) and issubclass(getattr(wk, name), (Exception, Warning))
                        and named(name, ERRORS_MD))]  # fmt: skip
    assert missing == []


def test_list_kernels_names_the_embedded_packages():
    """"`list_kernels()` (the embedded op ids)"."""
    assert {"com.microsoft.QuickGelu", "com.microsoft.BiasAdd"} <= set(wk.list_kernels())
    for op_id in wk.list_kernels():
        assert wk.get_kernel(op_id).op_id == op_id


def test_adapters_are_listed_best_first_and_chosen_by_request_then_environment(monkeypatch):
    """"`list_adapters()` (every adapter wgpu sees, best first, as `AdapterSummary`: `name`,
    `backend`, `adapter_type`, `features`, `limits`, ...), `choose_adapter(request=None)` (the
    adapter a call would use: `request`, else `$WEBGPU_KERNELS_ADAPTER`, else the best;
    `AdapterNotFoundError` when none matches)"; "An empty value counts as unset"."""
    adapters = wk.list_adapters()
    assert adapters and all(isinstance(a.name, str) and a.backend and a.adapter_type for a in adapters)
    assert all(isinstance(a.limits, dict) and "max-buffer-size" in a.limits for a in adapters)
    assert [a.rank for a in adapters] == sorted((a.rank for a in adapters), reverse=True)
    monkeypatch.delenv("WEBGPU_KERNELS_ADAPTER", raising=False)
    assert wk.choose_adapter() == adapters[0]
    monkeypatch.setenv("WEBGPU_KERNELS_ADAPTER", "")
    assert wk.choose_adapter() == adapters[0]
    last = adapters[-1]
    monkeypatch.setenv("WEBGPU_KERNELS_ADAPTER", last.backend)
    assert wk.choose_adapter().backend == last.backend
    assert wk.choose_adapter(adapters[0].backend).backend == adapters[0].backend  # the request wins
    monkeypatch.setenv("WEBGPU_KERNELS_ADAPTER", "no-such-adapter")
    with pytest.raises(wk.AdapterNotFoundError, match="no adapter matches 'no-such-adapter'"):
        wk.choose_adapter()
    with pytest.raises(wk.AdapterNotFoundError, match="no adapter matches 'no-such-gpu'"):
        wk.choose_adapter("no-such-gpu")


def test_get_device_opens_the_process_device_once(device):
    """"`get_device(adapter=None)` (the process's device on it, opened on first use)"."""
    assert wk.get_device() is device and wk.get_device(None) is device
    assert wk.get_device(device.adapter.backend) is device


def test_contract_version_falls_back_to_the_manifests_since_version(tmp_path):
    """"its contract version with `contract_version` (metadata.json's `version`, else the manifest's
    `sinceVersion`)": a folder without metadata.json reports sinceVersion."""
    import json
    import shutil

    folder = tmp_path / "demo.ScaleShift"
    shutil.copytree(PACKAGES_DIR / "demo.ScaleShift", folder)
    assert not (folder / "metadata.json").exists()
    manifest = json.loads((folder / "manifest.json").read_text(encoding="utf-8"))
    manifest["sinceVersion"] = 7
    (folder / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    assert wk.load_kernel(folder).contract_version == 7


def test_a_list_in_the_manifest_refuses_changes_and_a_copy_is_plain():
    """"its mappings (`attributes`, `tunables`, ...), the lists in them (a list attribute's default)
    and `raw` ... refuse changes with a `TypeError`"; "a copy (... `dict(...)`, `list(...)`) is plain
    and yours to edit"."""
    manifest = wk.load_kernel(PACKAGES_DIR / "demo.Transpose").manifest
    perm = manifest.attributes["perm"]
    assert isinstance(perm, list) and perm == []
    with pytest.raises(TypeError):
        perm.append(1)
    with pytest.raises(TypeError):
        manifest.raw["attributes"]["perm"] = [0]
    mine, raw = list(perm), dict(manifest.raw)
    mine.append(1)
    raw["attributes"] = {}
    assert type(mine) is list and type(raw) is dict and manifest.attributes["perm"] == []


def test_a_blank_adapter_variable_counts_as_unset(monkeypatch):
    """"An empty or blank value counts as unset" (Settings), for `WEBGPU_KERNELS_ADAPTER`."""
    monkeypatch.setenv("WEBGPU_KERNELS_ADAPTER", "  \t ")
    assert wk.choose_adapter() == wk.list_adapters()[0]


def test_the_adapter_label_is_what_the_device_and_tensor_reprs_show(device):
    """"`adapter.label()` reads `llvmpipe (LLVM 15.0.6, 256 bits) (Vulkan, CPU)` on lavapipe, as in
    `repr(device)` and a `GpuTensor`'s repr"; `lost` is False on a live device; lavapipe's
    `maxStorageBufferBindingSize` is "128 MiB"."""
    label = device.adapter.label()
    t = wk.to_gpu(np.ones(2, np.float32))
    assert label in repr(device) and label in repr(t) and device.lost is False
    t.release()
    if device.adapter.name.startswith("llvmpipe") and device.adapter.backend.lower() == "vulkan":
        assert re.fullmatch(r"llvmpipe \(LLVM [\d.]+, \d+ bits\) \(Vulkan, CPU\)", label), label
        assert device.limits["max-storage-buffer-binding-size"] == 128 * 2**20


# --- python-api.md: Calling it --------------------------------------------------------------------


def _documented_signature(line_start: str) -> list[tuple[str, str, str | None]]:
    """(name, kind, default) of each parameter of the signature the doc shows on a line of its own."""
    line = next(x for x in PYTHON_API.splitlines() if x.startswith(line_start))
    params, kind = [], "positional"
    for part in line[line.index("(") + 1:line.rindex(")")].split(","):
        part = part.strip()
        if part == "*":
            kind = "keyword"
            continue
        name, _, default = part.partition("=")
        params.append((name.split(":")[0].strip(), kind, default.strip() or None))
    return params


def test_a_call_has_the_documented_signature(quick_gelu):
    """"kernel(inputs: dict, *, attrs=None, variant=None, tunables=None, output="numpy", adapter=None, outputs=None) -> dict"."""
    actual = []
    for p in list(inspect.signature(type(quick_gelu).__call__).parameters.values())[1:]:
        kind = "keyword" if p.kind is p.KEYWORD_ONLY else "positional"
        actual.append((p.name, kind, None if p.default is p.empty else repr(p.default).replace("'", '"')))
    assert actual == _documented_signature("kernel(inputs")
    result = quick_gelu({"X": np.ones(4, np.float32)})
    assert isinstance(result, dict) and set(result) == {"Y"}


def test_plan_has_the_documented_signature(quick_gelu):
    """"`kernel.plan(inputs, *, attrs=None, variant=None, tunables=None, adapter=None, tuned=False, outputs=None)`"."""
    actual = []
    for p in inspect.signature(quick_gelu.plan).parameters.values():
        kind = "keyword" if p.kind is p.KEYWORD_ONLY else "positional"
        actual.append((p.name, kind, None if p.default is p.empty else repr(p.default)))
    assert actual == _documented_signature("- `kernel.plan(inputs")


def test_explain_render_evaluate_flush_and_synchronize_take_the_documented_options(quick_gelu):
    """explain "takes the call's `attrs=`, `tunables=`, `adapter=` and `variant=`"; render and evaluate
    take a call's scope; "`webgpu_kernels.synchronize()` (or `kernel.flush()`; both take `adapter=`
    as a call does)"."""
    for method in (quick_gelu.explain, quick_gelu.render):
        assert {"attrs", "tunables", "adapter", "variant"} <= set(inspect.signature(method).parameters)
    assert {"attrs", "tunables", "adapter"} <= set(inspect.signature(quick_gelu.evaluate).parameters)
    for function in (quick_gelu.flush, wk.synchronize, wk.empty_cache):
        assert inspect.signature(function).parameters["adapter"].kind is inspect.Parameter.KEYWORD_ONLY
    backend = wk.get_device().adapter.backend
    quick_gelu.flush(adapter=backend)
    wk.synchronize(adapter=backend)
    meta = {"X": ((2, 77, 3072), "float16")}
    passes = quick_gelu.render(meta, variant="scalar")
    assert passes and all("@compute" in text for text in passes.values())
    assert quick_gelu.evaluate("numel(shapes.X)", meta, adapter=backend) == 2 * 77 * 3072


def test_an_optional_input_left_out_or_given_as_none_is_the_same_call():
    """"an optional input is left out of the dict, or given as `None`"."""
    layer_norm = wk.load_kernel(PACKAGES_DIR / "demo.LayerNorm")
    x = np.random.default_rng(0).standard_normal((2, 8)).astype(np.float32)
    left_out = layer_norm({"X": x, "Scale": np.ones(8, np.float32)})
    as_none = layer_norm({"X": x, "Scale": np.ones(8, np.float32), "B": None})
    assert set(left_out) == set(as_none) == {"Y", "Mean", "InvStdDev"}
    for name in left_out:
        np.testing.assert_array_equal(left_out[name], as_none[name])


def test_an_optional_output_the_variant_does_not_produce_is_left_out():
    """"an optional output the chosen variant does not produce is left out"; explain's "`outputs`
    lists every output's shape and dtype; `produced` names those the chosen variant returns ...
    `"produced": false` in `as_dict()`"."""
    attention = wk.load_kernel(PACKAGES_DIR / "com.example.Attention")
    q = np.ones((1, 2, 4, 8), np.float32)
    inputs = {"Q": q, "K": q, "V": q}
    for variant, produced in (("rows", {"Y"}), ("passes", {"Y", "P"})):
        assert set(attention(inputs, variant=variant)) == produced
        explanation = attention.explain(inputs, variant=variant)
        assert explanation.produced == produced and [o.role for o in explanation.outputs] == ["Y", "P"]
        assert {o["name"]: o["produced"] for o in explanation.as_dict()["outputs"]} == {"Y": True, "P": "P" in produced}


def test_explain_of_a_forced_variant_that_cannot_run(quick_gelu):
    """"`chosen` is `None` with the message of the `VariantRejectedError` the call raises in
    `refused` (and `str(explanation)` starts `com.microsoft.QuickGelu: forced variant 'scalar'
    rejected`); `forced` says which variant was forced"."""
    meta = {"X": ((5,), "float32")}
    explanation = quick_gelu.explain(meta, variant="vec4")
    with pytest.raises(wk.VariantRejectedError) as info:
        quick_gelu({"X": np.ones(5, np.float32)}, variant="vec4")
    assert explanation.chosen is None and explanation.forced == "vec4"
    assert explanation.refused == str(info.value)
    assert str(explanation).startswith("com.microsoft.QuickGelu: forced variant 'vec4' rejected")
    accepted = quick_gelu.explain(meta, variant="scalar")
    assert accepted.chosen == "scalar" and accepted.forced == "scalar" and accepted.refused is None
    with pytest.raises(wk.SelectionError, match="no variant 'vec8'"):
        quick_gelu.explain(meta, variant="vec8")


def test_explain_names_the_stored_tuning_result_a_call_runs_instead(tuning_dir):
    """explain's paragraph names `tuned`, the stored result a call runs instead, and says that
    `chosen` stays the manifest's own selection: it had read "the variant a call would run", and a
    tuned call ran another."""
    from webgpu_kernels import tuning
    from webgpu_kernels.package import embedded_root

    paragraph = PYTHON_API.split("- `kernel.explain(...)`", 1)[1].split("\n- ", 1)[0]
    assert "`tuned`" in paragraph and "`chosen`" in paragraph, paragraph
    kernel = wk.load_kernel(embedded_root() / "com.microsoft.QuickGelu")
    device = wk.get_device()
    cache = tuning.TuningCache(tuning_dir / f"{tuning.adapter_slug(device.adapter.name, device.adapter.backend)}.json")
    cache.record(kernel.tuning_key, {"T": "float32"}, {"X": (4096,)},
                 tuning.TunedChoice("scalar", {"WORKGROUP_SIZE": 64}, 1e-5))  # fmt: skip
    cache.save()
    explanation = kernel.explain({"X": ((4096,), "float32")})
    assert explanation.chosen == "vec4"
    assert explanation.tuned == {"variant": "scalar", "tunables": {"WORKGROUP_SIZE": 64}}


def test_evaluate_returns_a_literal_as_it_is(quick_gelu):
    """"a number or boolean a literal value, returned as it is (`evaluate(5, ...)` is 5)"."""
    meta = {"X": ((2, 3), "float32")}
    for literal in (5, 2.5, True, False):
        value = quick_gelu.evaluate(literal, meta)
        assert value == literal and type(value) is type(literal)


def test_an_attribute_array_like_is_read_again_on_every_call(quick_gelu):
    """"A value is a Python value of the default's kind, a NumPy scalar or 0-d array, or another
    array-like that has `__array__` (`torch.tensor(1.702)` ...). An array-like other than NumPy's is
    read again on every call, since it may change in place"."""
    x = np.linspace(-2, 2, 8, dtype=np.float32)
    expected = {a: quick_gelu({"X": x}, attrs={"alpha": a})["Y"] for a in (1.0, 3.0)}
    for value in (np.float64(1.0), np.array(1.0)):
        np.testing.assert_array_equal(quick_gelu({"X": x}, attrs={"alpha": value})["Y"], expected[1.0])
    alpha = ArrayOwner(np.float32(1.0))
    np.testing.assert_array_equal(quick_gelu({"X": x}, attrs={"alpha": alpha})["Y"], expected[1.0])
    alpha.value[...] = 3.0  # changed in place: the next call reads 3
    np.testing.assert_array_equal(quick_gelu({"X": x}, attrs={"alpha": alpha})["Y"], expected[3.0])


def test_an_attribute_takes_a_1d_array_like_or_a_typed_buffer():
    """"(... a 1-d one for a list; a typed buffer such as `array.array` or `memoryview` is read
    as NumPy reads it, as an input is)". A typed buffer had been refused here ("expected a list of
    finite numbers, got array ...") while an input took it."""
    transpose = wk.load_kernel(PACKAGES_DIR / "demo.Transpose")
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    (want,) = transpose({"data": x}, attrs={"perm": [2, 0, 1]}).values()
    np.testing.assert_array_equal(want, x.transpose(2, 0, 1))
    for perm in ((2, 0, 1), np.array([2, 0, 1]), ArrayOwner([2, 0, 1]), array.array("q", [2, 0, 1]),
                 memoryview(np.array([2, 0, 1]))):  # fmt: skip
        (got,) = transpose({"data": x}, attrs={"perm": perm}).values()
        np.testing.assert_array_equal(got, want)
    with pytest.raises(wk.AttributeValueError) as info:  # read as a list, it is checked as one
        transpose({"data": x}, attrs={"perm": array.array("d", [2.0, math.inf, 1.0])})
    assert info.value.argument == "perm" and info.value.received == "float inf"


def test_a_scalar_attribute_reads_a_0d_buffer_and_refuses_a_1d_one(quick_gelu):
    """A buffer is read as NumPy reads it: a 0-d one is a number, a 1-d one a list, which a
    number attribute refuses."""
    x = np.linspace(-2, 2, 8, dtype=np.float32)
    want = quick_gelu({"X": x}, attrs={"alpha": 1.5})["Y"]
    np.testing.assert_array_equal(quick_gelu({"X": x}, attrs={"alpha": memoryview(np.array(1.5))})["Y"], want)
    with pytest.raises(wk.AttributeValueError) as info:
        quick_gelu({"X": x}, attrs={"alpha": array.array("f", [1.5])})
    assert info.value.argument == "alpha" and info.value.received.startswith("list")


def test_a_misspelt_keyword_is_pythons_own_type_error(quick_gelu):
    """"A misspelt keyword (`attributes=`) is Python's own `TypeError`"."""
    with pytest.raises(TypeError, match="attributes") as info:
        quick_gelu({"X": np.ones(4, np.float32)}, attributes={"alpha": 1.0})
    assert not isinstance(info.value, wk.KernelError)


def test_inputs_of_any_strides_or_byte_order_are_read_and_never_modified(quick_gelu):
    """"Inputs of any strides or byte order are copied to C-contiguous little-endian on the host
    first; the caller's array is never modified"."""
    base = np.linspace(-3, 3, 64, dtype=np.float32).reshape(8, 8)
    want = quick_gelu({"X": np.ascontiguousarray(base[::2, 1::3].T)})["Y"]
    for x in (base[::2, 1::3].T, base[::2, 1::3].T.astype(">f4")):
        before, dtype, strides = x.copy(), x.dtype, x.strides
        np.testing.assert_array_equal(quick_gelu({"X": x})["Y"], want)
        assert x.dtype == dtype and x.strides == strides
        np.testing.assert_array_equal(x, before)


def test_explanation_shows_its_text_in_ipython_and_repr_is_the_dataclass(quick_gelu):
    """"IPython and Jupyter show this text for a cell ending in `kernel.explain(...)`, and `repr()`
    the dataclass"; "`*` marks the chosen variant, `+` one that would also run"."""
    explanation = quick_gelu.explain({"X": ((8,), "float32")})

    class Printer:  # what IPython hands _repr_pretty_
        def __init__(self) -> None:
            self.parts: list[str] = []

        def text(self, part: str) -> None:
            self.parts.append(part)

    printer = Printer()
    explanation._repr_pretty_(printer, False)
    assert "".join(printer.parts) == str(explanation)
    assert repr(explanation).startswith("Explanation(op_id='com.microsoft.QuickGelu'")
    lines = str(explanation).splitlines()
    assert "  * vec4 (priority 20): accepted" in lines and "  + scalar (priority 0): accepted" in lines


def test_the_plan_example_prints_what_its_comments_say(quick_gelu):
    """The plan block's comments: `vec4 {'WORKGROUP_SIZE': 256}`, `[('QuickGelu.vec4', (462, 1, 1))]`,
    `(2, 77, 3072) 1892352` (the block runs in test_docs_examples.py; its printed values are checked here)."""
    _, plan = quick_gelu.plan({"X": wk.TensorMeta((2, 77, 3072), "float32")})
    assert (plan.variant, plan.tunables) == ("vec4", {"WORKGROUP_SIZE": 256})
    assert [(p.label, p.grid) for p in plan.passes] == [("QuickGelu.vec4", (462, 1, 1))]
    assert (plan.outputs[0].shape, plan.output_buffers[0][3]) == ((2, 77, 3072), 1892352)


def test_a_plan_is_frozen_cached_and_holds_every_tunable(quick_gelu):
    """"A plan is read-only (a frozen dataclass)"; "`tunables` (every tunable's value the passes were
    built with, the manifest's defaults overridden)"; "a later call of that shape and option set
    finds its plan in the kernel's cache"."""
    import dataclasses

    meta = {"X": ((4100,), "float32")}
    _, plan = quick_gelu.plan(meta, tunables={"WORKGROUP_SIZE": 64})
    assert plan.tunables == {"WORKGROUP_SIZE": 64} and plan.dropped == ()
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.variant = "scalar"  # type: ignore[misc]
    assert quick_gelu.plan(meta, tunables={"WORKGROUP_SIZE": 64})[1] is plan
    assert quick_gelu.plan(meta)[1].tunables == {"WORKGROUP_SIZE": 256}


def test_explain_verdicts_carry_each_variants_judgement():
    """Doc: "`verdicts`: a `Verdict` per variant, in the order selection tries them, with `variant`,
    `priority`, `accepted`, `clause` ..., `values` ..., `error` ... and `reason()`, the line
    `str(explanation)` prints for it" """
    concat = wk.load_kernel(PACKAGES_DIR / "demo.Concat")
    explanation = concat.explain({"A": ((2, 3), "float32"), "B": ((2, 5), "float32")}, attrs={"axis": 1})
    by_id = {v.variant: v for v in explanation.verdicts}
    assert [v.variant for v in explanation.verdicts] == sorted(by_id, key=lambda i: -by_id[i].priority)
    rejected = [v for v in explanation.verdicts if not v.accepted]
    assert rejected and explanation.chosen in [v.variant for v in explanation.verdicts if v.accepted]
    for verdict in rejected:
        assert verdict.clause and verdict.values and verdict.error is None
        assert verdict.reason() in str(explanation) and verdict.clause in verdict.reason()
    assert all(v.clause is None for v in explanation.verdicts if v.accepted)


# --- python-api.md: GPU-resident tensors -------------------------------------------------------------


def test_to_gpu_of_a_tensor_on_its_device_is_the_tensor_itself(device):
    """"Given a `GpuTensor` of the same device it returns that tensor itself, not a copy (releasing
    either releases both; `copy.deepcopy` copies)"; "`tensor.release()` returns its buffer to the
    pool (again: nothing)"; "`tensor.numpy()` or `np.asarray(tensor)` reads it back"."""
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    t = wk.to_gpu(x)
    same, copied = wk.to_gpu(t), copy.deepcopy(t)
    assert same is t and copied is not t
    np.testing.assert_array_equal(np.asarray(t), x)
    same.release()
    assert t.released and not copied.released
    t.release()  # again: nothing
    with pytest.raises(wk.TensorReleasedError):
        t.numpy()
    np.testing.assert_array_equal(copied.numpy(), x)
    copied.release()


def test_a_gpu_tensors_attributes_are_named_and_read_only(device):
    """"A `GpuTensor` has NumPy's `shape`, `dtype`, `ndim`, `size` and `nbytes`, and `device`,
    `released` and `uncomputed`, all read-only": each public name of the class is named on the page
    (`ndim`, `size`, `released` and `uncomputed` had been named nowhere in it)."""
    text = " ".join(PYTHON_API.split())
    public = [name for name in dir(wk.GpuTensor) if not name.startswith("_")]
    assert [name for name in public if not re.search(rf"`(?:\w+\.)?{name}\b", text)] == []
    x = np.arange(6, dtype=np.float16).reshape(2, 3)
    t = wk.to_gpu(x)
    said = (t.shape, t.dtype, t.ndim, t.size, t.nbytes, t.device, t.released, t.uncomputed)
    assert said == (x.shape, x.dtype, x.ndim, x.size, x.nbytes, device, False, False)
    for name in ("shape", "dtype", "ndim", "size", "nbytes", "device", "released", "uncomputed"):
        with pytest.raises(AttributeError):
            setattr(t, name, getattr(t, name))
    t.release()
    assert t.released and t.shape == x.shape


def test_to_gpu_takes_any_numeric_dtype_and_the_kernel_checks_it_when_used(quick_gelu):
    """"`to_gpu(array)` uploads an array once for many calls (any dtype NumPy has a number for; the
    kernel checks it when the tensor is used)"."""
    for x in (np.array([1 + 2j, 3j]), np.array([True, False]), np.arange(4, dtype=np.int8)):
        t = wk.to_gpu(x)
        assert t.dtype == x.dtype and t.shape == x.shape
        np.testing.assert_array_equal(t.numpy(), x)
        with pytest.raises(wk.DTypeError) as info:
            quick_gelu({"X": t})
        assert info.value.argument == "X"
        t.release()


def test_the_astype_example_prints_what_its_comment_says(quick_gelu, device):
    """The astype block's comment: `[-0.01806641 -0.01821899]` (a float16 call: needs shader-f16)."""
    if not device.has_f16:
        pytest.skip("the adapter has no shader-f16")
    x = wk.to_gpu(np.linspace(-3, 3, 1024, dtype=np.float32))
    h = x.astype(np.float16)
    y = quick_gelu({"X": h}, output="gpu")["Y"]
    got = y.astype(np.float32).numpy()[:2]
    np.testing.assert_array_equal(got, np.array([-0.01806641, -0.01821899], np.float16).astype(np.float32))
    for t in (x, h, y):
        t.release()


def test_when_recorded_work_is_submitted(quick_gelu, device):
    """"With `output="gpu"` a call records its dispatches and returns at once. The recorded work is
    submitted when a result is read, on `webgpu_kernels.synchronize()` (or `kernel.flush()` ...),
    every 256 recorded dispatches, or before an upload (a NumPy input of a call, `to_gpu`) ... The first
    call of each shape and option set is submitted at once"."""
    memory = device.memory
    x = wk.to_gpu(np.linspace(-1, 1, 4104, dtype=np.float32))  # a shape no other test of this file runs
    wk.synchronize()
    batch = memory.batch
    kept = [quick_gelu({"X": x}, output="gpu")["Y"]]  # a new plan: submitted on its own
    assert memory.batch > batch
    batch = memory.batch
    kept += [quick_gelu({"X": x}, output="gpu")["Y"] for _ in range(3)]
    assert memory.batch == batch  # recorded, not submitted
    wk.synchronize()
    assert memory.batch == batch + 1
    kept.append(quick_gelu({"X": x}, output="gpu")["Y"])
    quick_gelu.flush()
    assert memory.batch == batch + 2
    kept.append(quick_gelu({"X": x}, output="gpu")["Y"])
    quick_gelu({"X": np.ones(4104, np.float32)}, output="gpu")["Y"].release()  # its upload submits
    assert memory.batch == batch + 3
    kept.append(quick_gelu({"X": x}, output="gpu")["Y"])
    kept[-1].numpy()  # a read submits
    assert memory.batch == batch + 4
    for t in kept:
        t.release()
    for _ in range(255):
        quick_gelu({"X": x}, output="gpu")["Y"].release()
    assert memory.batch == batch + 4
    quick_gelu({"X": x}, output="gpu")["Y"].release()  # the 256th recorded call submits
    assert memory.batch == batch + 5
    x.release()


def test_the_256_count_dispatches_a_pass_or_a_copy_each(device):
    """"The 256 count dispatches, not calls: a call counts one per pass that dispatches work (a
    three-pass variant three ...)" and "(a copy counts one ...)" """
    quantize = wk.load_kernel(PACKAGES_DIR / "ai.onnx.DynamicQuantizeLinear")
    assert len(quantize.manifest.variant("atomic").passes) == 3
    memory = device.memory
    x = wk.to_gpu(np.linspace(-1, 1, 1000, dtype=np.float32))
    quantize({"x": x}, variant="atomic", output="gpu")  # a new plan: submitted on its own
    wk.synchronize()
    batch = memory.batch
    for _ in range(85):  # 255 dispatches
        for t in quantize({"x": x}, variant="atomic", output="gpu").values():
            t.release()
    assert memory.batch == batch
    copy.copy(x).release()  # the 256th
    assert memory.batch == batch + 1
    x.release()


# --- python-api.md: Threads and processes ---------------------------------------------------------------


def test_a_gpu_tensor_cannot_be_pickled(device):
    """"**A `GpuTensor` cannot be pickled** (`NotPicklableError`, also a `TypeError`)"."""
    import pickle

    t = wk.to_gpu(np.ones(3, np.float32))
    with pytest.raises(wk.NotPicklableError) as info:
        pickle.dumps(t)
    assert isinstance(info.value, TypeError)
    t.release()


# --- errors.md: The classes -----------------------------------------------------------------------------


def _class_rows() -> dict[str, tuple[int, str]]:
    """docs/errors.md "The classes": class name -> (depth, the row's text)."""
    lines = ERRORS_MD.splitlines()
    rows: dict[str, tuple[int, str]] = {}
    for line in lines[lines.index("## The classes"):]:
        m = re.match(r"\| ((?:&nbsp;)*)`(\w+)` \|", line)
        if m:
            rows[m[2]] = (len(m[1]) // len("&nbsp;&nbsp;"), line)
        elif line.startswith("## Bad input"):
            break
    return rows


def _public_classes() -> dict[str, type]:
    return {n: c for n, c in vars(errors).items() if isinstance(c, type) and not n.startswith("_")
            and c.__module__ == errors.__name__}  # fmt: skip


def _attribute_cell(row: str) -> str:
    return [c.strip() for c in row.strip().strip("|").split("|")][2]


def _instance(cls: type) -> BaseException:
    """An instance from the constructor's own parameters (a placeholder for each required one)."""
    params = list(inspect.signature(cls.__init__).parameters.values())[1:]
    if any(p.kind is p.VAR_POSITIONAL for p in params):
        return cls("message")
    args = [p.name for p in params if p.kind is p.POSITIONAL_OR_KEYWORD and p.default is p.empty]
    return cls(*args, **{p.name: p.name for p in params if p.kind is p.KEYWORD_ONLY and p.default is p.empty})


def test_every_public_class_of_errors_py_is_documented_and_exported():
    """"The classes" table names every error class, and the two warnings are described: "**`GpuWaitWarning`**
    (a `RuntimeWarning`)", "**`TuningFileWarning`** (a `UserWarning`)"; each is `webgpu_kernels.<name>`."""
    rows = _class_rows()
    for name, cls in _public_classes().items():
        assert getattr(wk, name) is cls and name in wk.__all__
        if issubclass(cls, errors.KernelError):
            assert name in rows, f"docs/errors.md does not document {name}"
        else:
            base = cls.__bases__[0].__name__
            assert f"**`{name}`** (a `{base}`)" in ERRORS_MD


def test_each_class_is_indented_under_its_nearest_documented_ancestor():
    """"Indentation shows the hierarchy": a class's row sits under the class it derives from, and any
    other error base is said in its row ("also a `SandboxError`", "Also a `TypeError`")."""
    rows = _class_rows()
    order = list(rows)
    for name, (depth, row) in rows.items():
        cls = getattr(errors, name)
        parents = [n for n in order[: order.index(name)] if rows[n][0] < depth]
        shown_parent = next((n for n in reversed(parents) if rows[n][0] == depth - 1), None)
        direct = [b for b in cls.__bases__ if b is not Exception]
        if depth == 0:
            assert direct == [], name
            continue
        assert direct[0].__name__ == shown_parent, f"{name} derives from {direct[0].__name__}, shown under {shown_parent}"
        for other in direct[1:]:
            assert re.search(rf"[Aa]lso a `{other.__name__}`", row), f"{name}'s row does not say it is a {other.__name__}"


def test_every_attribute_an_error_carries_is_documented():
    """"Each class keeps the facts that explain it as attributes": every public attribute an instance
    has is in the attributes column of its row or of an ancestor's row (the other direction, each
    documented attribute existing, is tests/test_docs_examples.py's)."""
    rows = _class_rows()
    missing = []
    for name in rows:
        cls = getattr(errors, name)
        documented = set()
        for ancestor in cls.__mro__:
            if ancestor.__name__ in rows:
                documented |= set(re.findall(r"`(\w+)`", _attribute_cell(rows[ancestor.__name__][1])))
        carried = {a for a in vars(_instance(cls)) if not a.startswith("_")}
        missing += [f"{name}.{a}" for a in sorted(carried - documented)]
    assert not missing, "attributes docs/errors.md does not name: " + ", ".join(missing)


def test_package_errors_keep_their_path_and_detail(tmp_path):
    """PackageError's attributes "`path`, `detail` (the message without the path)", example
    "`/nonexistent: no such folder`"."""
    with pytest.raises(wk.PackageError) as info:
        wk.load_kernel(tmp_path / "nonexistent")
    error = info.value
    assert error.path == str(tmp_path / "nonexistent") and error.detail == "no such folder"
    assert str(error) == f"{error.path}: {error.detail}"
