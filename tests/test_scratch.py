"""Per-variant scratch buffers (docs/format.md, "Several passes"): engine-allocated device memory a
variant's passes bind by name, never returned, never part of the op's contract. A two-pass sum
(per-workgroup partial sums in scratch, a second pass adding them) is checked against NumPy's
float64 sum; the load-time checks against their JSON paths."""

from __future__ import annotations

import copy

import numpy as np
import pytest

import webgpu_kernels as wk
from webgpu_kernels import errors
from webgpu_kernels.benchmark import bench_kernel
from webgpu_kernels.comparison import Tolerance, check_against
from webgpu_kernels.manifest import check_manifest

#: Elements each invocation of pass 'parts' adds: a workgroup sums ITEMS x WORKGROUP_SIZE of them.
ITEMS = 4


def _params(*fields: str) -> dict:
    return {"name": "params", "semantic": "kernel.params", "buffer": {"type": "uniform"},
            "struct": {"name": "Params", "fields": [{"name": f, "type": "u32", "value": f} for f in fields]}}  # fmt: skip


PARTS = [
    {"name": "x", "arg": "X", "buffer": {"type": "read-only-storage"}, "elementType": "f32"},
    {"name": "partials", "arg": "partials", "buffer": {"type": "storage"}, "elementType": "f32"},
    _params("n", "chunks"),
]
TOTAL = [
    {"name": "partials", "arg": "partials", "buffer": {"type": "read-only-storage"}, "elementType": "f32"},
    {"name": "y", "arg": "Y", "buffer": {"type": "storage"}, "elementType": "f32"},
    _params("n", "chunks"),
]

#: demo.ScratchSum: Y (rank 0) = the sum of every element of X, in two passes: 'parts' writes one
#: float32 partial sum per workgroup into the scratch buffer 'partials', 'total' adds them up.
MANIFEST = {
    "domain": "demo", "name": "ScratchSum",
    "inputs": [{"role": "X", "dtype": "T"}],
    "outputs": [{"role": "Y", "dtype": "T", "rank": 0, "shape": "[]"}],
    "typeConstraints": {"T": ["float32"]},
    "tunables": {"WORKGROUP_SIZE": 64},
    "derive": {"n": "numel(shapes.X)"},
    "constants": {"items": ITEMS, "chunks": "ceilDiv(n, items * tunables.WORKGROUP_SIZE)"},
    "variants": [{
        "id": "two_pass",
        "scratch": [{"name": "partials", "bytes": "4 * chunks", "description": "one float32 sum per workgroup"}],
        "passes": [
            {"id": "parts", "shader": "parts.wgsl.jinja", "bindings": PARTS,
             "dispatch": {"threads": "chunks * tunables.WORKGROUP_SIZE", "workgroupSize": "tunables.WORKGROUP_SIZE"}},
            {"id": "total", "shader": "total.wgsl.jinja", "bindings": TOTAL,
             "dispatch": {"threads": "tunables.WORKGROUP_SIZE", "workgroupSize": "tunables.WORKGROUP_SIZE"}},
        ],
    }],
}  # fmt: skip

_REDUCE = """
  sums[lix] = acc;
  workgroupBarrier();
  for (var s = {{ workgroupSizeX // 2 }}u; s > 0u; s = s >> 1u) {
    if (lix < s) { sums[lix] += sums[lix + s]; }
    workgroupBarrier();
  }
"""
TEMPLATES = {
    "parts.wgsl.jinja": (
        "{{ declarations }}\nvar<workgroup> sums: array<f32, {{ workgroupSizeX }}>;\n"
        "@compute @workgroup_size({{ workgroupSize }})\nfn {{ entryPoint }}({{ entryParams }}) {\n"
        "  let g = {{ workgroupIndex }};\n  if (g >= params.chunks) { return; }\n  var acc = 0.0;\n"
        "  for (var k = 0u; k < {{ items }}u; k++) {\n"
        "    let i = (g * {{ items }}u + k) * {{ workgroupSizeX }}u + lix;\n"
        "    if (i < params.n) { acc += x[i]; }\n  }\n" + _REDUCE +
        "  if (lix == 0u) { partials[g] = sums[0]; }\n}\n"),
    "total.wgsl.jinja": (
        "{{ declarations }}\nvar<workgroup> sums: array<f32, {{ workgroupSizeX }}>;\n"
        "@compute @workgroup_size({{ workgroupSize }})\nfn {{ entryPoint }}({{ entryParams }}) {\n"
        "  var acc = 0.0;\n"
        "  for (var g = lix; g < params.chunks; g += {{ workgroupSizeX }}u) { acc += partials[g]; }\n" + _REDUCE +
        "  if (lix == 0u) { y[0] = sums[0]; }\n}\n"),
}  # fmt: skip


def manifest(change=None) -> dict:
    data = copy.deepcopy(MANIFEST)
    if change is not None:
        change(data)
    return data


@pytest.fixture
def scratch_sum(write_package) -> wk.Kernel:
    return wk.load_kernel(write_package(manifest(), TEMPLATES))


def _expected_sum(x: np.ndarray) -> float:
    return float(np.sum(x.astype(np.float64)))


def _assert_sum(y: np.ndarray, x: np.ndarray) -> None:
    assert y.shape == () and y.dtype == np.float32
    tolerance = 1e-6 * float(np.sum(np.abs(x.astype(np.float64)))) + 1e-6
    assert abs(float(y) - _expected_sum(x)) <= tolerance, (float(y), _expected_sum(x))


# --- running ------------------------------------------------------------------------------------


@pytest.mark.parametrize("n", [0, 1, 255, 256, 257, 10_000, 70_001])
def test_a_two_pass_sum_hands_its_partials_over_in_scratch(scratch_sum, n):
    """Pass 'parts' writes one partial sum per workgroup of 256 elements into scratch, pass 'total'
    reads them read-only: the sum is NumPy's float64 one within float32's rounding, and the
    scratch buffer is no output (the result holds Y alone)."""
    x = np.random.default_rng(n).standard_normal(n).astype(np.float32)
    result = scratch_sum({"X": x})
    assert list(result) == ["Y"]
    _assert_sum(result["Y"], x)
    with pytest.raises(errors.MissingOutputError):
        result["partials"]


def test_scratch_is_no_part_of_the_contract(scratch_sum):
    """The outputs a call returns, explain lists and a one-node ONNX model would have: Y alone."""
    assert [o.role for o in scratch_sum.manifest.outputs] == ["Y"]
    explanation = scratch_sum.explain({"X": ((1000,), "float32")})
    assert [o.role for o in explanation.outputs] == ["Y"] and explanation.refused is None
    assert explanation.produced == frozenset({"Y"})


def test_explain_shows_the_chosen_variants_scratch_sizes(scratch_sum):
    """explain says what scratch the call would take (what `info` cannot: sizes read the call's
    shapes), in its text and --json; None where no variant is chosen."""
    explanation = scratch_sum.explain({"X": ((10_000,), "float32")})
    want = 4 * -(-10_000 // (ITEMS * 64))
    assert explanation.scratch == (("partials", want),)
    assert f"scratch partials: {want} bytes (never returned)" in str(explanation)
    assert explanation.as_dict()["scratch"] == [{"name": "partials", "bytes": want}]
    wide = scratch_sum.explain({"X": ((10_000,), "float32")}, tunables={"WORKGROUP_SIZE": 128})
    assert wide.scratch == (("partials", 4 * -(-10_000 // (ITEMS * 128))),)
    plain = wk.get_kernel("com.microsoft.QuickGelu").explain({"X": ((4096,), "float32")})
    assert plain.scratch == () and "scratch" not in str(plain) and plain.as_dict()["scratch"] == []


def test_the_plan_sizes_each_scratch_buffer_once_per_shape(scratch_sum, plan_of):
    """bytes is evaluated when the plan is built: 4 x ceil(n / 256) bytes here."""
    x = np.zeros(10_000, np.float32)
    plan = plan_of(scratch_sum, {"X": x})
    assert plan.scratch == (("partials", 4 * -(-10_000 // (ITEMS * 64))),)
    assert [o.role for o in plan.outputs] == ["Y"]
    wide = plan_of(scratch_sum, {"X": x}, tunables={"WORKGROUP_SIZE": 128})
    assert wide.scratch == (("partials", 4 * -(-10_000 // (ITEMS * 128))),)


def test_scratch_buffers_go_back_to_the_pool(scratch_sum):
    """Acquired from the device's pool for the call, released once its passes are recorded: many
    calls own no more buffers than the first, and none stays leased."""
    memory = wk.get_device().memory
    x = np.random.default_rng(1).standard_normal(5000).astype(np.float32)
    scratch_sum({"X": x})
    wk.synchronize()
    leased, live = len(memory._leased), memory.live_buffers
    for _ in range(20):
        _assert_sum(scratch_sum({"X": x})["Y"], x)
    gpu = [scratch_sum({"X": x}, output="gpu") for _ in range(5)]
    for result in gpu:
        _assert_sum(result["Y"].numpy(), x)
        result["Y"].release()
    wk.synchronize()
    assert len(memory._leased) == leased and memory.live_buffers <= live + 5  # the 5 held outputs at most


def test_a_gpu_chain_keeps_each_calls_scratch_its_own(scratch_sum):
    """Recorded back to back without a readback: a later call reuses the pooled scratch buffer of
    an earlier one, which runs first on the one queue."""
    rng = np.random.default_rng(2)
    xs = [rng.standard_normal(size).astype(np.float32) for size in (3000, 4000, 3000, 9000)]
    outs = [scratch_sum({"X": wk.to_gpu(x)}, output="gpu")["Y"] for x in xs]
    for x, y in zip(xs, outs, strict=True):
        _assert_sum(y.numpy(), x)


def test_a_call_that_fails_returns_its_scratch_buffer(scratch_sum, monkeypatch):
    """An error while the passes are recorded still gives the scratch buffer back."""
    from webgpu_kernels import execution

    memory = wk.get_device().memory
    x = np.ones(3000, np.float32)
    scratch_sum({"X": x})
    wk.synchronize()
    leased = len(memory._leased)

    def broken(*args, **kwargs):
        raise RuntimeError("recording failed")

    monkeypatch.setattr(execution, "bind_groups", broken)
    with pytest.raises(RuntimeError, match="recording failed"):
        scratch_sum({"X": x})
    monkeypatch.undo()
    assert len(memory._leased) == leased
    _assert_sum(scratch_sum({"X": x})["Y"], x)


def test_bench_times_a_variant_with_scratch(scratch_sum):
    """bench builds its own buffers: the scratch buffer is one of them, and the checked output is right."""
    x = np.random.default_rng(3).standard_normal(20_000).astype(np.float32)
    fast = {"target_batch_s": 0.005, "min_batches": 2, "max_batches": 4, "min_total_s": 0.0}
    expected = {"Y": np.array(_expected_sum(x))}
    r = bench_kernel(scratch_sum, {"X": x}, check=lambda out: check_against(out, expected, Tolerance.of(["float32"])),
                     **fast)  # fmt: skip
    assert r.variant == "two_pass" and r.median_s > 0 and r.error_ok is True
    assert r.bytes == x.nbytes + 4  # the tensors read and written: scratch is not counted


def test_a_scratch_binding_renders_as_a_storage_declaration(scratch_sum):
    wgsl = scratch_sum.render({"X": ((1000,), "float32")})
    assert "@group(0) @binding(1) var<storage, read_write> partials: array<f32>;" in wgsl["parts"]
    assert "@group(0) @binding(0) var<storage, read> partials: array<f32>;" in wgsl["total"]


def test_a_scratch_buffer_past_the_binding_limit_is_refused_by_name(write_package):
    """A scratch buffer past maxStorageBufferBindingSize: the DeviceLimitError names it and what its size reads."""
    kernel = wk.load_kernel(write_package(manifest(lambda d: d["variants"][0]["scratch"][0].update(
        bytes="4 * chunks + device.limits.maxStorageBufferBindingSize")), TEMPLATES))  # fmt: skip
    with pytest.raises(errors.DeviceLimitError, match="scratch buffer 'partials'"):
        kernel({"X": np.ones(100, np.float32)})
    assert "scratch buffer 'partials'" in (kernel.explain({"X": ((100,), "float32")}).refused or "")


@pytest.mark.parametrize("bytes_, fragment", [
    ("0 - chunks - 1", "must be a non-negative integer, got -"),
    ("chunks / 3.5", "must be a non-negative integer"),
    ("'many'", "must be a non-negative integer, got 'many'"),
    ("dim(shapes.X, 3)", "dim()"),
])  # fmt: skip
def test_a_bytes_expression_that_fails_is_named_by_variant(write_package, bytes_, fragment):
    kernel = wk.load_kernel(write_package(manifest(lambda d: d["variants"][0]["scratch"][0].update(bytes=bytes_)),
                                          TEMPLATES))  # fmt: skip
    with pytest.raises(errors.ExpressionError) as info:
        kernel({"X": np.ones(1000, np.float32)})
    assert info.value.where == "variants[0].scratch[0].bytes"
    assert fragment in str(info.value) and "scratch buffer 'partials' of variant 'two_pass'" in str(info.value)


def test_a_bytes_expression_is_compiled_at_load(write_package):
    with pytest.raises(errors.ExpressionError) as info:
        wk.load_kernel(write_package(manifest(lambda d: d["variants"][0]["scratch"][0].update(bytes="4 * chunkz")),
                                     TEMPLATES))  # fmt: skip
    assert info.value.where == "variants[0].scratch[0].bytes" and "chunkz" in str(info.value)


def test_a_literal_size_is_taken_as_it_is(write_package):
    kernel = wk.load_kernel(write_package(manifest(lambda d: d["variants"][0]["scratch"][0].update(bytes=4096)),
                                          TEMPLATES))  # fmt: skip
    x = np.random.default_rng(4).standard_normal(50_000).astype(np.float32)  # 196 partial sums: 784 bytes
    _assert_sum(kernel({"X": x})["Y"], x)


# --- load-time checks ---------------------------------------------------------------------------


def _scratch(**fields):
    return lambda d: d["variants"][0]["scratch"].append({"name": "extra", "bytes": 16, **fields})


def _bind_extra(pass_index: int, kind: str):
    def change(d):
        d["variants"][0]["scratch"].append({"name": "extra", "bytes": 16})
        d["variants"][0]["passes"][pass_index]["bindings"].insert(0, {
            "name": "extra", "arg": "extra", "buffer": {"type": kind}, "elementType": "u32"})
    return change


def _other_variant_in_a_shared_set(d):
    """A second variant with scratch 'partials' shares the bindingSet its own pass names with the first,
    which has none."""
    d["bindingSets"] = {"total": d["variants"][0]["passes"][1]["bindings"]}
    two = copy.deepcopy(d["variants"][0])
    two["id"] = "other"
    two["passes"][1]["bindings"] = "total"
    one = d["variants"][0]
    del one["scratch"]
    one["passes"] = [{"id": "only", "shader": "total.wgsl.jinja", "bindings": "total",
                      "dispatch": {"threads": 1, "workgroupSize": 64}}]
    d["variants"].append(two)


def _rename(path, value):
    def change(d):
        node = d
        for key in path[:-1]:
            node = node[key]
        node[path[-1]] = value
    return change


@pytest.mark.parametrize("change, json_path, fragment", [
    (_rename(["variants", 0, "passes", 1, "bindings", 0, "arg"], "partial"), "variants[0].passes[1].bindings[0].arg",
     "arg 'partial' is not an input, output or scratch buffer of this variant"),
    (_scratch(name="partials"), "variants[0].scratch[1].name", "scratch buffer 'partials' is declared twice"),
    (_scratch(name="X"), "variants[0].scratch[1].name", "'X' is an input of the op"),
    (_scratch(name="Y"), "variants[0].scratch[1].name", "'Y' is an output of the op"),
    (_scratch(), "variants[0].scratch[1]", "scratch buffer 'extra' is bound by none of this variant's passes"),
    (_bind_extra(1, "read-only-storage"), "variants[0].passes[1].bindings[0].buffer.type",
     "scratch buffer 'extra' is bound as 'read-only-storage' here, and as 'storage' by none of this variant's passes"),
    (lambda d: d["variants"][0]["passes"][0]["bindings"][1].pop("elementType"),
     "variants[0].passes[0].bindings[1]", "a scratch buffer has no dtype: its binding needs an elementType"),
    (_other_variant_in_a_shared_set, "bindingSets.total[0].arg",
     "arg 'partials' is not an input, output or scratch buffer of this variant (as used by variants[0].passes[0]): "
     "it is a scratch buffer of variant 'other'"),
    (_rename(["variants", 0, "scratch", 0, "bytes"], -4), "variants[0].scratch[0].bytes", "-4"),
    (_rename(["variants", 0, "scratch", 0, "name"], "1st"), "variants[0].scratch[0].name", "1st"),
])  # fmt: skip
def test_a_broken_scratch_declaration_is_refused_at_load(write_package, change, json_path, fragment):
    data = manifest(change)
    problems = check_manifest(data)
    assert any(p.json_path == json_path and fragment in p.detail for p in problems), [str(p) for p in problems]
    with pytest.raises(errors.ManifestError):
        wk.load_kernel(write_package(data, TEMPLATES))


def test_variants_sharing_a_binding_set_each_declare_the_scratch_it_names(write_package):
    """Two variants may name one bindingSets entry over a scratch buffer: each declares its own."""
    def change(d):
        d["bindingSets"] = {"parts": d["variants"][0]["passes"][0]["bindings"],
                            "total": d["variants"][0]["passes"][1]["bindings"]}  # fmt: skip
        for p, name in zip(d["variants"][0]["passes"], ("parts", "total"), strict=True):
            p["bindings"] = name
        wide = copy.deepcopy(d["variants"][0])
        wide.update(id="wide", priority=1, constants={"items": 8, "chunks": "ceilDiv(n, items * tunables.WORKGROUP_SIZE)"})
        d["variants"].append(wide)

    data = manifest(change)
    assert check_manifest(data) == []
    kernel = wk.load_kernel(write_package(data, TEMPLATES))
    x = np.random.default_rng(5).standard_normal(30_000).astype(np.float32)
    for variant in ("two_pass", "wide"):
        _assert_sum(kernel({"X": x}, variant=variant)["Y"], x)


# --- validate -----------------------------------------------------------------------------------


def test_validate_knows_scratch_buffers(write_package):
    """A derive entry read only by a scratch size is read (no unused-entry warning), and the GPU stage
    resolves, checks and compiles a variant with scratch as a call would."""
    import json

    from webgpu_kernels import digests
    from webgpu_kernels.validation import validate_package

    def change(d):
        d["derive"]["partialBytes"] = "4 * n"  # more than the 4 x chunks needed: any size at least that works
        d["variants"][0]["scratch"][0]["bytes"] = "partialBytes"

    root = write_package(manifest(change), TEMPLATES)
    bench = {"cases": [{"name": "small", "inputs": {"X": {"shape": [3000]}}, "types": {"T": ["float32"]}}]}
    (root / "bench.json").write_text(json.dumps(bench), encoding="utf-8")
    digests.write_metadata(root)
    report = validate_package(root, gpu=True)
    assert report.ok, report.problems
    assert not [p for p in report.warnings if "partialBytes" in p.message], report.problems


def test_validate_reports_a_bad_bytes_expression_at_its_path(write_package):
    from webgpu_kernels import digests
    from webgpu_kernels.validation import validate_package

    root = write_package(manifest(lambda d: d["variants"][0]["scratch"][0].update(bytes="4 * chunkz")), TEMPLATES)
    digests.write_metadata(root)
    report = validate_package(root, gpu=False)
    assert any(p.json_path == "variants[0].scratch[0].bytes" and "chunkz" in p.message for p in report.errors), \
        report.problems


def test_info_shows_a_variants_scratch_buffers(write_package, runner):
    import json

    from webgpu_kernels.cli import main

    root = write_package(manifest(), TEMPLATES)
    result = runner.invoke(main, ["info", str(root), "--json"])
    assert result.exit_code == 0, result.output
    variant = json.loads(result.output)["variants"][0]
    assert variant["scratch"] == [{"name": "partials", "bytes": "4 * chunks", "description": "one float32 sum per workgroup"}]
    text = runner.invoke(main, ["info", str(root)])
    assert text.exit_code == 0 and "scratch partials: 4 * chunks bytes" in text.output, text.output


def _with_test_json(root, n: int):
    import json

    from webgpu_kernels import digests

    values = [float(i % 7 - 3) for i in range(n)]  # small integers: the float32 sum is exact
    case = {"name": f"sum-{n}", "types": {"T": "float32"}, "inputs": {"X": {"shape": [n], "values": values}},
            "expected": {"Y": {"shape": [], "values": [sum(values)]}}}  # fmt: skip
    (root / "test.json").write_text(json.dumps({"tolerances": {"float32": {"rtol": 0, "atol": 0}}, "cases": [case]}),
                                    encoding="utf-8")  # fmt: skip
    digests.write_metadata(root)
    return root


def test_the_test_runner_poisons_scratch_as_it_does_outputs(write_package):
    """`test` fills the pooled buffers before a run, the scratch buffer's among them: a pass that
    reads a scratch element no pass wrote (one past the partial sums, inside the binding) reads
    NaN there and fails the case, where the right kernel passes."""
    from webgpu_kernels.package_tests import run_package_tests

    good = _with_test_json(write_package(manifest(), TEMPLATES), 3000)
    assert [r.status for r in run_package_tests(wk.load_kernel(good)).results] == ["pass"]
    over = dict(TEMPLATES, **{"total.wgsl.jinja": TEMPLATES["total.wgsl.jinja"].replace("g < params.chunks",
                                                                                         "g <= params.chunks")})
    bad = _with_test_json(write_package(manifest(lambda d: d["variants"][0]["scratch"][0].update(
        bytes="4 * chunks + 4")), over), 3000)  # fmt: skip
    results = run_package_tests(wk.load_kernel(bad)).results
    assert [r.status for r in results] == ["fail"], [(r.status, r.message) for r in results]
