"""program.py: the per-call scope, in the order docs/format.md gives ("Evaluation order")."""

from __future__ import annotations

import pytest
from jinja2.exceptions import UndefinedError
from test_selection import F16_DEVICE, variant

from webgpu_kernels.contract import check_call
from webgpu_kernels.errors import ExpressionError, ManifestError
from webgpu_kernels.manifest import parse_manifest
from webgpu_kernels.program import compile_program, evaluation_order

from conftest import bind_outputs  # noqa: E402


def manifest_with_output_shape(shape: str, rank: str, derive: dict | None = None, constants: dict | None = None):
    return parse_manifest(bind_outputs({
        "domain": "test", "name": "Rows",
        "inputs": [{"role": "X", "dtype": "T"}],
        "outputs": [{"role": "S", "dtype": "T", "rank": rank, "shape": shape}],
        "typeConstraints": {"T": ["float32"]},
        "derive": derive if derive is not None else {"rows": "numel(shapes.X) // dim(shapes.X, ranks.X - 1)"},
        "constants": constants or {},
        "variants": [variant("main", 0, ["true"])],
    }))  # fmt: skip


def scope_for(manifest, shape=(3, 4, 5)):
    return compile_program(manifest).call_scope(check_call(manifest, {"X": (shape, "float32")}, None, None), F16_DEVICE)


def test_an_output_shape_sees_the_inputs():
    manifest = manifest_with_output_shape("[numel(shapes.X) // dim(shapes.X, ranks.X - 1)]", "1")
    _, outputs = scope_for(manifest)
    assert [(o.role, o.shape) for o in outputs] == [("S", (12,))]


def test_an_output_shape_reads_derive_entries():
    """Each output and derive entry is evaluated after what it reads, whatever the manifest's order."""
    manifest = manifest_with_output_shape("[rows, cols]", "2", derive={
        "outRank": "ranks.S",  # reads the output, which reads the two below
        "rows": "numel(shapes.X) // cols",
        "cols": "dim(shapes.X, -1)",
    })  # fmt: skip
    scope, outputs = scope_for(manifest)
    assert [(o.role, o.shape) for o in outputs] == [("S", (12, 5))]
    assert (scope["rows"], scope["cols"], scope["outRank"]) == (12, 5, 2)


def test_a_constant_in_an_output_shape_is_named():
    """Constants come after the outputs: the error says which name and why (it said 'got Undefined')."""
    manifest = manifest_with_output_shape("[lanes]", "1", constants={"lanes": "4"})
    with pytest.raises(ExpressionError) as info:
        scope_for(manifest, (3, 4))
    message = str(info.value)
    assert "'lanes' is not defined when output shapes are evaluated" in message and "not constants" in message
    assert "outputs[0].shape" in message


def test_a_derive_cycle_fails_where_it_is_used():
    """a -> b -> a cannot be evaluated: both fail with the cycle named, the rest of the scope stands."""
    manifest = manifest_with_output_shape("shapes.X", "ranks.X", derive={
        "a": "b + 1", "b": "a * 2", "me": "me", "c": "a + 1", "fine": "numel(shapes.S)",
    })  # fmt: skip
    scope, outputs = scope_for(manifest)
    assert outputs[0].shape == (3, 4, 5) and scope["fine"] == 60
    for name, cycle in (("a", "a -> b -> a"), ("b", "a -> b -> a"), ("me", "me -> me"), ("c", "a -> b -> a")):
        with pytest.raises(UndefinedError, match=f"reads itself: {cycle}"):
            scope[name] + 1


def test_an_output_that_reads_itself_is_refused_at_load():
    manifest = manifest_with_output_shape("[n]", "1", derive={"n": "numel(shapes.S)"})
    with pytest.raises(ManifestError, match=r"reads itself: shapes.S -> n -> shapes.S") as info:
        compile_program(manifest)
    assert info.value.json_path == "outputs[0].shape"


def test_a_cycle_refused_at_load_names_the_manifest_file(write_package):
    from test_rendering import DEMO_MANIFEST, DEMO_TEMPLATE

    import webgpu_kernels as wk

    manifest = {**DEMO_MANIFEST, "outputs": [{**DEMO_MANIFEST["outputs"][0], "shape": "[m]", "rank": "1"}],
                "derive": {**DEMO_MANIFEST["derive"], "m": "numel(shapes.Y)"}}  # fmt: skip
    root = write_package(manifest, {"scale-shift.wgsl.jinja": DEMO_TEMPLATE})
    with pytest.raises(ManifestError, match="reads itself: shapes.Y -> m -> shapes.Y") as info:
        wk.load_kernel(root)
    assert info.value.file == str(root / "manifest.json") and str(root) in str(info.value)


@pytest.mark.parametrize("read_by", ["when", "dispatch"])
def test_a_failed_broadcast_derive_is_named_where_a_call_reads_it(write_package, read_by):
    """derive `s = broadcastShape(shapes.X, [9])` read by a `when` clause (the variants are rejected)
    or by the dispatch (a BroadcastError, the caller's shapes at fault): the reason names derive.s,
    as for any failed derive; it had said only "broadcastShape(): [1, 4], [9] do not broadcast"."""
    import json

    import numpy as np
    from test_rendering import DEMO_MANIFEST, DEMO_TEMPLATE

    import webgpu_kernels as wk
    from webgpu_kernels.errors import BroadcastError, SelectionError

    manifest = json.loads(json.dumps(DEMO_MANIFEST))
    manifest["derive"]["s"] = "broadcastShape(shapes.X, [9])"
    for v in manifest["variants"]:
        if read_by == "when":
            v["when"].append("numel(s) > 0")
        else:
            v["passes"][0]["dispatch"]["threads"] = "numel(s)"
    kernel = wk.load_kernel(write_package(manifest, {"scale-shift.wgsl.jinja": DEMO_TEMPLATE}))
    with pytest.raises(SelectionError if read_by == "when" else BroadcastError) as info:
        kernel({"X": np.ones((1, 4), np.float32)})
    assert ("'s' could not be evaluated: derive.s: expression 'broadcastShape(shapes.X, [9])': broadcastShape(): "
            "[1, 4], [9] do not broadcast: sizes 4 and 9") in str(info.value)


def test_an_output_shape_that_reads_its_own_shape_is_refused_at_load():
    with pytest.raises(ManifestError, match=r"reads itself: shapes.S -> shapes.S"):
        compile_program(manifest_with_output_shape("[ranks.S]", "1"))


def test_an_output_rank_may_read_its_own_shape():
    manifest = manifest_with_output_shape("shapes.X[1:]", "ranks.S")
    _, outputs = scope_for(manifest)
    assert outputs[0].shape == (4, 5)


@pytest.mark.parametrize(
    "outputs, derive, order, cycles",
    [
        # the manifest's order where nothing reads ahead (as before dependency order)
        ([("Y", ["shapes.X"])], [("a", ["ranks.Y"]), ("b", ["a"])], [("output", 0), ("derive", 0), ("derive", 1)], []),
        ([("Y", ["b"])], [("a", []), ("b", ["a"])], [("derive", 0), ("derive", 1), ("output", 0)], []),
        ([("Y", ["shapes.Z"]), ("Z", ["shapes.X"])], [], [("output", 1), ("output", 0)], []),
        ([], [("a", ["a"])], [("derive", 0)], [[("derive", 0)]]),
        ([], [("a", ["c"]), ("b", ["a"]), ("c", ["b"]), ("d", [])],
         None, [[("derive", 0), ("derive", 1), ("derive", 2)]]),
    ],
)  # fmt: skip
def test_evaluation_order(outputs, derive, order, cycles):
    got_order, got = evaluation_order(outputs, derive)
    got_cycles = [c.members for c in got]
    if order is not None:
        assert got_order == order
    assert sorted(got_order) == sorted([("output", i) for i in range(len(outputs))] +
                                       [("derive", j) for j in range(len(derive))])  # fmt: skip
    assert got_cycles == cycles


def test_evaluation_order_of_a_long_chain_has_no_recursion_limit():
    n = 20_000
    derive = [(f"d{j}", [f"d{j + 1}"] if j + 1 < n else []) for j in range(n)]
    order, cycles = evaluation_order([], derive)
    assert order == [("derive", j) for j in reversed(range(n))] and cycles == []
    derive[-1] = (f"d{n - 1}", ["d0"])
    (cycle,) = evaluation_order([], derive)[1]
    assert len(cycle.members) == n and cycle.path == [("derive", j) for j in range(n)]


def test_a_cycle_is_named_along_its_reads():
    """a reads c, c reads b, b reads a: the error follows the reads, not the manifest's order."""
    (cycle,) = evaluation_order([], [("a", ["c"]), ("b", ["a"]), ("c", ["b"])])[1]
    assert cycle.members == [("derive", 0), ("derive", 1), ("derive", 2)]
    assert cycle.path == [("derive", 0), ("derive", 2), ("derive", 1)]
    manifest = manifest_with_output_shape("shapes.X", "ranks.X", derive={"a": "c", "b": "a", "c": "b"})
    scope, _ = scope_for(manifest)
    with pytest.raises(UndefinedError, match="reads itself: a -> c -> b -> a"):
        scope["b"] + 1


def test_device_features_by_their_webgpu_names():
    """`device.features` lists the device's features as WebGPU names them: wgpu-native's "subgroup"
    is "subgroups", so `'subgroups' in device.features` guards a variant that uses subgroup builtins."""
    from webgpu_kernels.program import DeviceInfo

    manifest = manifest_with_output_shape("shapes.X", "ranks.X", derive={
        "sg": "'subgroups' in device.features", "f16": "'shader-f16' in device.features"})  # fmt: skip
    program = compile_program(manifest)
    signature = check_call(manifest, {"X": ((3,), "float32")}, None, None)
    for features, expected in (({"subgroup", "shader-f16"}, (True, True)), (set(), (False, False))):
        scope, _ = program.call_scope(signature, DeviceInfo(limits=F16_DEVICE.limits, features=frozenset(features)))
        assert (scope["sg"], scope["f16"]) == expected
        assert scope["device"]["features"] == tuple(sorted({"subgroup": "subgroups"}.get(f, f) for f in features))


@pytest.mark.parametrize(("features", "dtypes", "lacks"), [
    (frozenset(), ["float32", "float16"], True),  # the only case `test` skips and `validate` judges as skipped
    (frozenset(), ["float32", "int32"], False),
    (frozenset({"shader-f16"}), ["float16"], False),
    (frozenset({"shader-f16"}), ["float32"], False),
])  # fmt: skip
def test_a_call_lacks_f16_only_with_float16_data_on_a_device_without_it(features, dtypes, lacks):
    from webgpu_kernels.program import DeviceInfo

    assert DeviceInfo(limits=F16_DEVICE.limits, features=features).lacks_f16_for(iter(dtypes)) is lacks


def test_the_real_device_reports_subgroups(device):
    """lavapipe and the H200 both have subgroups; the engine requests the feature when offered."""
    if "subgroup" not in device.adapter.features:
        pytest.skip("this adapter has no subgroups")
    assert "subgroups" in device.info.feature_names


@pytest.mark.parametrize("shape", ["[2**62, 4]", "[2**40, 2**40, 0]"])
def test_an_output_shape_is_held_to_the_input_size_bound(shape):
    """Output shapes had no size bound: explain passed, and the call failed with a raw NumPy
    ValueError ("array is too big", "Maximum allowed dimension exceeded")."""
    manifest = manifest_with_output_shape(shape, "2" if shape.count(",") == 1 else "3")
    with pytest.raises(ExpressionError, match="elements or more") as info:
        scope_for(manifest)
    assert info.value.where == "outputs[0].shape"


def test_an_output_rank_past_64_is_refused_before_any_gpu_work():
    """Inputs are held to rank 64 but outputs were not: "[1]*65" ran the kernel, then NumPy raised
    a raw ValueError reading the result."""
    with pytest.raises(ExpressionError, match="an output of rank 65, more than 64") as info:
        scope_for(manifest_with_output_shape("[1]*65", "65"))
    assert info.value.where == "outputs[0].shape"
    _, outputs = scope_for(manifest_with_output_shape("[1]*64", "64"))
    assert outputs[0].shape == (1,) * 64


def test_an_output_shape_that_is_no_list_is_quoted_by_a_bounded_text():
    """A shape that is no list was repr()'d whole into the error: a 4,096-character string, or the
    `shapes` namespace, where docs/security.md quotes a value by at most 80 characters."""
    with pytest.raises(ExpressionError, match="an output shape must be a list of integers, got 'xxx") as info:
        scope_for(manifest_with_output_shape("'x' * 4096", "1"))
    assert len(info.value.detail) < 200, f"{len(info.value.detail)} characters"


# --- coverage audit -------------------------------------------------------------------------


def _broadcasting_manifest(shape: str, derive: dict):
    return parse_manifest(bind_outputs({
        "domain": "test", "name": "Add",
        "inputs": [{"role": r, "dtype": "T"} for r in ("X", "B", "C")],
        "outputs": [{"role": "S", "dtype": "T", "rank": "max(ranks.X, ranks.B)", "shape": shape}],
        "typeConstraints": {"T": ["float32"]},
        "derive": derive,
        "variants": [variant("main", 0, ["true"])],
    }))  # fmt: skip


@pytest.mark.parametrize(("shape", "derive"), [
    ("broadcastShape(shapes.X, shapes.B)", {"out": "broadcastShape(shapes.X, shapes.B)"}),
    ("out", {"ab": "broadcastShape(shapes.X, shapes.B)", "out": "ab"}),  # read through derive entries
])  # fmt: skip
def test_an_output_shape_that_does_not_broadcast_is_the_calls_shape_error_naming_its_inputs(shape, derive):
    from webgpu_kernels.errors import ShapeError

    manifest = _broadcasting_manifest(shape, derive)
    program = compile_program(manifest)
    shapes = {"X": (2, 3), "B": (4,), "C": (4,)}
    signature = check_call(manifest, {r: (s, "float32") for r, s in shapes.items()}, None, None)
    with pytest.raises(ShapeError) as info:
        program.call_scope(signature, F16_DEVICE)
    # X and B, whose shapes failed; not C, which has B's shape but the output's shape does not read it
    assert info.value.argument == "X, B"
    assert str(info.value) == (f"argument 'X, B': expected shapes that broadcast together (outputs[0].shape: {shape}), "
                               "got [2, 3], [4]: sizes 3 and 4 at axis -1 (counted from the last)")  # fmt: skip
    _, outputs = program.call_scope(check_call(manifest, {"X": ((2, 3), "float32"), "B": ((3,), "float32"),
                                                          "C": ((9,), "float32")}, None, None), F16_DEVICE)  # fmt: skip
    assert [(o.role, o.shape) for o in outputs] == [("S", (2, 3))]


def test_a_broadcast_of_shapes_built_from_ranks_names_the_inputs_it_reads():
    """Where no input has a shape that failed (the shape builds its own lists), the error names every
    input the shape reads, by shape or by rank."""
    from webgpu_kernels.errors import ShapeError

    manifest = _broadcasting_manifest("broadcastShape([ranks.X, 7], [ranks.B, 5])", {})
    signature = check_call(manifest, {r: (s, "float32") for r, s in {"X": (2, 3), "B": (4,), "C": (4,)}.items()},
                           None, None)  # fmt: skip
    with pytest.raises(ShapeError) as info:
        compile_program(manifest).call_scope(signature, F16_DEVICE)
    assert info.value.argument == "X, B" and "got [2, 7], [1, 5]" in str(info.value)
