"""The embedded seed manifests (byte for byte, by sha256), the shipped JSON Schema, the typed
model, and malformed manifests refused with the JSON path of the offending value."""

from __future__ import annotations

import copy
import hashlib
import json
from importlib import resources
from pathlib import Path

import jsonschema
import numpy as np
import pytest

import webgpu_kernels as wk
from webgpu_kernels import errors
from webgpu_kernels.manifest import check_manifest, manifest_schema, parse_manifest
from webgpu_kernels.program import compile_program

from conftest import SHARED_SEEDS

#: sha256 of ../shared/seeds/<op id>.manifest.json, recorded so that a clean clone without
#: ../shared still checks that the shipped manifests are the seeds, unchanged.
SEED_SHA256 = {
    "com.microsoft.BiasAdd": "7c05a12fea6d7a9e0f218264e0948779fab1afeb65dba57803db83a83b8c73ca",
    "com.microsoft.QuickGelu": "5b80ae07ef3dceb02443040eca8e5cf670039b45909a169208649791e7df05b9",
}


def embedded_manifest_path(op_id: str) -> Path:
    return Path(str(resources.files("webgpu_kernels").joinpath("kernels", op_id, "manifest.json")))


def seed(op_id: str) -> dict:
    return json.loads(embedded_manifest_path(op_id).read_text("utf-8"))


# --- the seeds ----------------------------------------------------------------------------------


@pytest.mark.parametrize("op_id", sorted(SEED_SHA256))
def test_embedded_manifest_is_the_seed(op_id):
    digest = hashlib.sha256(embedded_manifest_path(op_id).read_bytes()).hexdigest()
    assert digest == SEED_SHA256[op_id]


@pytest.mark.parametrize("op_id", sorted(SEED_SHA256))
def test_embedded_manifest_matches_shared_seeds(op_id):
    seed_file = SHARED_SEEDS / f"{op_id}.manifest.json"
    if not seed_file.is_file():
        pytest.skip(f"{SHARED_SEEDS} is not present (a clean clone); the recorded sha256 was checked")
    assert hashlib.sha256(seed_file.read_bytes()).hexdigest() == SEED_SHA256[op_id]
    assert embedded_manifest_path(op_id).read_bytes() == seed_file.read_bytes()


def test_embedded_kernels_are_listed():
    assert {"com.microsoft.BiasAdd", "com.microsoft.QuickGelu"} <= set(wk.list_kernels())


def test_unknown_embedded_kernel():
    with pytest.raises(errors.PackageError) as info:
        wk.get_kernel("com.microsoft.Nope")
    assert "com.microsoft.Nope" in str(info.value) and "com.microsoft.BiasAdd" in str(info.value)


@pytest.mark.parametrize("op_id", sorted(SEED_SHA256))
def test_shipped_schema_accepts_the_seeds(op_id):
    schema = manifest_schema()
    jsonschema.validators.validator_for(schema).check_schema(schema)
    jsonschema.validate(seed(op_id), schema)
    assert check_manifest(seed(op_id)) == []


def test_typed_model_of_quick_gelu():
    m = parse_manifest(seed("com.microsoft.QuickGelu"))
    assert m.op_id == "com.microsoft.QuickGelu" and m.since_version == 1
    assert [(v.id, v.priority) for v in m.variants] == [("vec4", 20), ("vec4_tail", 10), ("scalar", 0)]
    assert m.attributes == {"alpha": 1.702} and m.tunables == {"WORKGROUP_SIZE": 256}
    assert m.type_constraints == {"T": ("float32", "float16")}
    assert [n for n in m.derive] == ["deviceWorkgroupCap", "workgroupOk", "baseOk", "vec4Ok"]
    tail = m.variant("vec4_tail")
    assert tail.passes[0].shader == "quick-gelu.wgsl.jinja"  # from source.shader
    assert [b.name for b in tail.passes[0].bindings] == ["x", "y", "params"]  # from bindingSets.scalarTail
    assert tail.passes[0].bindings[2].struct_name == "Params"
    assert tail.passes[0].bindings[0].json_path == "bindingSets.scalarTail[0]"
    assert m.inputs[0].rank is None and m.outputs[0].rank == "ranks.X"
    assert m.variant("vec4_tial") is None  # the callers name such an id in a warning instead of failing


def test_a_kernels_manifest_is_read_only():
    """get_kernel shares one Kernel per op id: `k.manifest.attributes["alpha"] = 5.0` had changed
    the default for every caller in the process, and only for shapes no plan was cached for yet, so
    a call of a shape seen before kept 1.702."""
    import numpy as np

    kernel = wk.get_kernel("com.microsoft.QuickGelu")
    m = kernel.manifest
    for mapping in (m.attributes, m.tunables, m.type_constraints, m.constants, m.derive,
                    m.variants[0].constants, m.variants[0].passes[0].source_inputs):  # fmt: skip
        with pytest.raises(TypeError):
            mapping["alpha"] = 5.0  # type: ignore[index]
    x = np.linspace(-3, 3, 8, dtype=np.float32)
    want = x / (1 + np.exp(-1.702 * x.astype(np.float64)))
    np.testing.assert_allclose(kernel({"X": x})["Y"], want, rtol=1e-5, atol=1e-6)
    assert json.loads(json.dumps({**m.attributes})) == {"alpha": 1.702}


def test_a_manifests_raw_json_and_list_defaults_are_read_only_too():
    """manifest.raw was the decoded JSON itself, and a list default the very list in it: setting
    `k.manifest.raw["attributes"]["strides"][0] = 2` changed demo.Conv's default for every caller,
    and only for shapes no plan was cached for (6x6 stayed 6x6 while 8x8 gave 4x8). Both are
    read-only now; a copy (copy.deepcopy, dict(), list(), JSON) is plain and the caller's to edit."""
    import pickle

    import numpy as np

    from conftest import PACKAGES_DIR

    kernel = wk.load_kernel(PACKAGES_DIR / "demo.Conv")
    m, w = kernel.manifest, np.ones((1, 1, 1, 1), np.float32)
    shapes = [kernel({"X": np.ones((1, 1, n, n), np.float32), "W": w})["Y"].shape for n in (6, 8)]
    strides, raw_strides = m.attributes["strides"], m.raw["attributes"]["strides"]
    mutations = [lambda: raw_strides.__setitem__(0, 2), lambda: raw_strides.append(2), lambda: raw_strides.pop(),
                 lambda: raw_strides.sort(reverse=True), lambda: raw_strides.__delitem__(0), lambda: strides.clear(),
                 lambda: strides.extend([3]), lambda: strides.__iadd__([3]), lambda: strides.insert(0, 2),
                 lambda: strides.remove(1), lambda: strides.reverse(), lambda: strides.__imul__(2),
                 lambda: m.raw.__setitem__("name", "Other"), lambda: m.raw.__delitem__("name"),
                 lambda: m.raw["attributes"].update(strides=[2, 2]), lambda: m.raw.setdefault("x", 1),
                 lambda: m.raw.pop("name"), lambda: m.raw.popitem(), lambda: m.raw.clear(),
                 lambda: m.raw["attributes"].__ior__({"strides": [2, 2]})]  # fmt: skip
    for mutation in mutations:
        with pytest.raises(TypeError, match="read-only"):
            mutation()
    assert strides == [1, 1] and isinstance(strides, list) and repr(strides) == "[1, 1]"
    assert m.raw["name"] == "Conv" and raw_strides == [1, 1] and m.attributes["pads"] == [0, 0, 0, 0]
    assert [kernel({"X": np.ones((1, 1, n, n), np.float32), "W": w})["Y"].shape for n in (6, 8, 10)] == [
        *shapes, (1, 1, 10, 10)]  # fmt: skip
    on_disk = json.loads((PACKAGES_DIR / "demo.Conv" / "manifest.json").read_text("utf-8"))
    assert json.loads(json.dumps(m.raw)) == on_disk == m.raw
    for plain in (copy.deepcopy(m.raw), pickle.loads(pickle.dumps(m.raw))):
        assert plain == on_disk
        plain["attributes"]["strides"][0] = 2  # a copy is the caller's own
    assert m.raw == on_disk
    edited = copy.copy(m.raw)
    edited["name"] = "Edited"
    assert m.raw["name"] == "Conv" and list(strides) + [5] == [1, 1, 5] and strides + [5] == [1, 1, 5]
    # the defaults passed back as attrs find the plan filed for them, as plain lists did
    kernel({"X": np.ones((1, 1, 6, 6), np.float32), "W": w}, attrs={**m.attributes})
    filed = len(kernel._fast_plans)
    assert kernel({"X": np.ones((1, 1, 6, 6), np.float32), "W": w}, attrs={**m.attributes})["Y"].shape == (1, 1, 6, 6)
    kernel({"X": np.ones((1, 1, 6, 6), np.float32), "W": w}, attrs=json.loads(json.dumps({**m.attributes})))
    assert len(kernel._fast_plans) == filed and any(key[3] for key in kernel._fast_plans)  # key[3]: the attrs
    data = seed("com.microsoft.QuickGelu")
    parsed = parse_manifest(data)
    data["attributes"]["alpha"] = 2.0  # the caller's dict stays the caller's, apart from the manifest
    assert parsed.attributes["alpha"] == parsed.raw["attributes"]["alpha"] == 1.702


def test_typed_model_of_bias_add():
    m = parse_manifest(seed("com.microsoft.BiasAdd"))
    assert [s.role for s in m.inputs] == ["X", "bias", "skip"] and [s.rank for s in m.inputs] == [3, 1, 3]
    vec4 = m.variant("vec4")
    assert len(vec4.when) == 11 and vec4.passes[0].shader == "bias-add.wgsl.jinja"
    assert vec4.passes[0].bindings[1].length == "$hidden"
    assert m.variant("scalar").passes[0].source_inputs == {"itemsPerInvocation": 4}


# --- malformed manifests ------------------------------------------------------------------------


def mutate(op_id: str, change) -> dict:
    data = copy.deepcopy(seed(op_id))
    change(data)
    return data


def set_path(path, value):
    def change(data):
        node = data
        for key in path[:-1]:
            node = node[key]
        if value is KeyError:
            del node[path[-1]]
        else:
            node[path[-1]] = value

    return change


QG, BA = "com.microsoft.QuickGelu", "com.microsoft.BiasAdd"
THREADS = ["variants", 0, "passes", 0, "dispatch", "threads"]


@pytest.mark.parametrize(
    "op_id, change, json_path",
    [
        (QG, set_path(THREADS, -1), "variants[0].passes[0].dispatch.threads"),
        (QG, set_path(THREADS, ""), "variants[0].passes[0].dispatch.threads"),
        (QG, set_path(THREADS, 2.5), "variants[0].passes[0].dispatch.threads"),
        (QG, set_path(THREADS, None), "variants[0].passes[0].dispatch.threads"),
        (QG, set_path(["variants", 1, "passes", 0, "dispatch", "workgroupSize"], 0),
         "variants[1].passes[0].dispatch.workgroupSize"),
        (QG, set_path(["variants", 2, "passes", 0, "dispatch", "threads"], KeyError), "variants[2].passes[0].dispatch"),
        (QG, set_path(["variants", 1, "id"], "vec4 tail"), "variants[1].id"),
        (QG, set_path(["variants", 1, "priority"], "high"), "variants[1].priority"),
        (QG, set_path(["variants", 0, "when"], "baseOk"), "variants[0].when"),
        (QG, set_path(["variants", 0, "passes", 0, "source", "shader"], "../evil.wgsl.jinja"),
         "variants[0].passes[0].source.shader"),
        (QG, set_path(["variants"], []), "variants"),
        (QG, set_path(["variants"], KeyError), ""),
        (QG, set_path(["surprise"], 1), ""),
        (QG, set_path(["name"], "Quick Gelu"), "name"),
        (QG, set_path(["typeConstraints", "T"], ["float128"]), "typeConstraints.T[0]"),
        (QG, set_path(["bindingSets", "scalarTail", 1, "buffer", "type"], "writeonly"),
         "bindingSets.scalarTail[1].buffer.type"),
        (QG, set_path(["outputs", 0, "shape"], KeyError), "outputs[0]"),
        (BA, set_path(["variants", 0, "passes", 0, "bindings", 4, "struct", "fields", 0, "type"], "float"),
         "variants[0].passes[0].bindings[4].struct.fields[0].type"),
        (BA, set_path(["variants", 0, "passes", 0, "bindings", 0, "arg"], KeyError), "variants[0].passes[0].bindings[0]"),
        (BA, set_path(["inputs", 1, "rank"], -1), "inputs[1].rank"),
        (BA, set_path(["args", "X", "kind"], "scalar"), "args.X.kind"),
    ],
)  # fmt: skip
def test_schema_errors_carry_the_json_path(op_id, change, json_path):
    data = mutate(op_id, change)
    with pytest.raises(errors.ManifestError) as info:
        parse_manifest(data, file="manifest.json")
    assert info.value.json_path == json_path
    assert str(info.value).startswith(f"manifest.json: {json_path or '(root)'}: ")


@pytest.mark.parametrize(
    "op_id, change, json_path, fragment",
    [
        (QG, set_path(["variants", 1, "passes", 0, "bindings"], "noSuchSet"), "variants[1].passes[0].bindings",
         "noSuchSet"),
        (QG, set_path(["bindingSets", "scalarTail", 0, "elementType"], "$nope"),
         "bindingSets.scalarTail[0].elementType", "'$nope' names no constant of this variant (as used by variants[1]"),
        (QG, set_path(["bindingSets", "scalarTail", 1, "arg"], "Z"), "bindingSets.scalarTail[1].arg",
         "'Z' is not an input, output or scratch buffer of this variant (as used by variants[1].passes[0])"),
        (QG, set_path(["inputs", 0, "dtype"], "U"), "inputs[0].dtype", "'U'"),
        (QG, set_path(["variants", 2, "id"], "vec4"), "variants[2].id", "duplicate"),
        (BA, lambda d: d["variants"][0]["passes"][0]["bindings"][4]["struct"]["fields"].append(
            copy.deepcopy(d["variants"][0]["passes"][0]["bindings"][4]["struct"]["fields"][0])),
         "variants[0].passes[0].bindings[4].struct.fields", "struct field names must be unique"),
        # render() returns WGSL by pass id: a second 'main' hid the first
        (QG, lambda d: d["variants"][0]["passes"].append(copy.deepcopy(d["variants"][0]["passes"][0])),
         "variants[0].passes[1].id", "duplicate pass id 'main' in variant 'vec4'"),
        (QG, set_path(["args", "X", "role"], "output"), "args.X", "'X'"),
        (BA, set_path(["variants", 1, "passes", 0, "bindings", 0, "arg"], "Z"), "variants[1].passes[0].bindings[0].arg",
         "'Z'"),
        (BA, set_path(["variants", 0, "passes", 0, "bindings", 1, "name"], "x"), "variants[0].passes[0].bindings",
         "unique"),
        # a GpuTensor input is bound as it is: read-write, the kernel could write the caller's tensor
        (QG, set_path(["bindingSets", "scalarTail", 0, "buffer", "type"], "storage"),
         "bindingSets.scalarTail[0].buffer.type", "input 'X' must be bound as 'read-only-storage', not 'storage'"),
    ],
)  # fmt: skip
def test_reference_errors_carry_the_json_path(op_id, change, json_path, fragment):
    data = mutate(op_id, change)
    with pytest.raises(errors.ManifestError) as info:
        parse_manifest(data)
    assert info.value.json_path == json_path and fragment in str(info.value)


@pytest.mark.parametrize("buffer_type, binding, fragment", [
    ("uniform", 0, "'struct' is a required property: a 'uniform' binding is the params binding, which takes 'struct'"),
    ("storage", 2, "'arg' is a required property: a 'storage' or 'read-only-storage' binding is a tensor binding"),
], ids=["tensor-as-uniform", "params-as-storage"])  # fmt: skip
def test_a_wrong_buffer_type_says_which_kind_of_binding_it_makes(buffer_type, binding, fragment):
    """A tensor binding typed 'uniform' was told only "'struct' is a required property", which
    sends an author to add a field instead of fixing the type."""
    data = mutate(QG, set_path(["bindingSets", "scalarTail", binding, "buffer", "type"], buffer_type))
    with pytest.raises(errors.ManifestError) as info:
        parse_manifest(data)
    assert info.value.json_path == f"bindingSets.scalarTail[{binding}]" and fragment in str(info.value)


def test_an_optional_output_bound_only_read_only_is_refused():
    """An optional output a variant binds, but only read-only, was returned unwritten (the pooled
    buffer's bytes) while validate said valid. Left unbound, it is simply not returned."""
    def optional_y(read_only: bool):
        def change(d):
            d["outputs"][0]["optional"] = True
            if read_only:
                d["bindingSets"]["scalarTail"][1]["buffer"]["type"] = "read-only-storage"
        return change

    problems = check_manifest(mutate(QG, optional_y(read_only=True)))
    assert [p.json_path for p in problems] == ["variants[1]", "variants[2]"]
    assert "optional output 'Y' is bound, but as 'storage' by none of this variant's passes" in problems[0].detail
    assert check_manifest(mutate(QG, optional_y(read_only=False))) == []


def test_an_output_no_pass_binds_read_write_is_refused():
    """An output bound read-only everywhere is never written (the call would return what the pooled
    buffer held); before, only the WGSL compiler complained, about the template."""
    data = mutate(QG, set_path(["bindingSets", "scalarTail", 1, "buffer", "type"], "read-only-storage"))
    with pytest.raises(errors.ManifestError) as info:
        parse_manifest(data)
    # At the binding to fix (it had been the variant), naming the variant that uses the set.
    assert info.value.json_path == "bindingSets.scalarTail[1].buffer.type"
    assert ("output 'Y' is bound as 'read-only-storage' here (as used by variants[1].passes[0]), and as 'storage' "
            "by none of this variant's passes") in str(info.value)  # fmt: skip
    problems = check_manifest(data)
    assert [p.json_path for p in problems] == ["bindingSets.scalarTail[1].buffer.type"] * 2  # the two variants using the set
    assert ["variants[1].passes[0]" in problems[0].detail, "variants[2].passes[0]" in problems[1].detail] == [True, True]
    no_binding = mutate(QG, lambda d: d["bindingSets"]["scalarTail"].pop(1))  # Y bound nowhere: the variant
    assert "variants[1]" in [p.json_path for p in check_manifest(no_binding)]
    misspelt = mutate(QG, set_path(["bindingSets", "scalarTail", 1, "arg"], "Z"))
    assert [p.json_path for p in check_manifest(misspelt)] == ["bindingSets.scalarTail[1].arg"] * 2  # no echo


def test_reserved_names_are_refused():
    data = mutate(QG, lambda d: d["derive"].update({"numel": "1"}))
    with pytest.raises(errors.ManifestError) as info:
        parse_manifest(data)
    assert info.value.json_path.startswith("derive")


def test_schema_refuses_every_reserved_name():
    """The shipped JSON Schema (which an editor checks a manifest against) refuses every name the
    engine reserves for derive and constants: it had left out broadcastable, broadcastShape and
    broadcastStrides, which a load then refused with a ManifestError the editor had not flagged."""
    from webgpu_kernels.expressions import RESERVED_NAMES

    validator = jsonschema.Draft202012Validator(manifest_schema())
    for name in sorted(RESERVED_NAMES):
        for key in ("derive", "constants"):
            data = mutate(QG, lambda d, key=key, name=name: d.setdefault(key, {}).update({name: "1"}))
            assert not validator.is_valid(data), f"the schema accepts {key} named {name!r}"


def test_check_manifest_lists_every_problem():
    def change(data):
        data["variants"][0]["passes"][0]["dispatch"]["threads"] = -1
        data["variants"][2]["id"] = "bad id"

    paths = {e.json_path for e in check_manifest(mutate(QG, change))}
    assert {"variants[0].passes[0].dispatch.threads", "variants[2].id"} <= paths


def test_without_unknown_fields_drops_only_those_and_leaves_the_manifest_alone():
    """validate goes on with this copy when unknown fields are the only schema errors: the copy is
    the manifest without them (at any depth), the caller's data unchanged; else None."""
    from webgpu_kernels.manifest import without_unknown_fields

    def stray(data):
        data["bogus"] = 1
        data["variants"][1]["passes"][0]["bogusToo"] = {"x": 1}
        data["variants"][2]["passes"][0]["dispatch"]["bogusThree"] = []

    data = mutate(QG, stray)
    before = copy.deepcopy(data)
    assert without_unknown_fields(data) == seed(QG)
    assert data == before
    assert without_unknown_fields(seed(QG)) is None  # nothing to drop: validate did not need a copy
    # any other violation: the model cannot be trusted, nothing is returned (not a crash at a scalar)
    for other in (set_path(["variants", 1, "priority"], "high"), set_path(["sinceVersion"], 1.5)):
        assert without_unknown_fields(mutate(QG, lambda d, other=other: (stray(d), other(d)))) is None


@pytest.mark.parametrize(
    "change, where, fragment",
    [
        (set_path(["variants", 0, "when", 1], "vec4Ok and"), "variants[0].when[1]", "syntax"),
        (set_path(["derive", "vec4Ok"], "numel(shapes.X) % four == 0"), "derive.vec4Ok", "unknown name 'four'"),
        (set_path(["variants", 2, "passes", 0, "dispatch", "threads"], "numel(shapes.X) | int"),
         "variants[2].passes[0].dispatch.threads", "filter"),
        (set_path(["outputs", 0, "shape"], "shapes.X.__class__"), "outputs[0].shape", "underscore"),
    ],
)  # fmt: skip
def test_expression_errors_at_load_name_the_place(change, where, fragment):
    with pytest.raises(errors.ExpressionError) as info:
        compile_program(parse_manifest(mutate(QG, change)))
    assert info.value.where == where and fragment in str(info.value)


# --- package folders ----------------------------------------------------------------------------


def test_load_kernel_reports_the_file_and_path(write_package):
    data = mutate(QG, set_path(THREADS, -1))
    root = write_package(data, {"quick-gelu.wgsl.jinja": "// unused"})
    with pytest.raises(errors.ManifestError) as info:
        wk.load_kernel(root)
    assert info.value.json_path == "variants[0].passes[0].dispatch.threads"
    assert info.value.file and info.value.file.endswith("manifest.json")


def test_package_errors(tmp_path):
    with pytest.raises(errors.PackageError):
        wk.load_kernel(tmp_path / "missing")
    with pytest.raises(errors.PackageError, match="a path .* got NoneType None"):
        wk.load_kernel(None)
    (tmp_path / "empty").mkdir()
    with pytest.raises(errors.PackageError, match="manifest.json"):
        wk.load_kernel(tmp_path / "empty")
    (tmp_path / "file.json").write_text("{}")
    with pytest.raises(errors.PackageError):
        wk.load_kernel(tmp_path / "file.json")
    (tmp_path / "badjson").mkdir()
    (tmp_path / "badjson" / "manifest.json").write_text('{"domain": "x",\n  "name": }')
    with pytest.raises(errors.PackageError) as info:
        wk.load_kernel(tmp_path / "badjson")
    assert "line 2" in str(info.value)


def test_a_manifest_past_the_value_bound_is_refused_before_the_schema(write_package, monkeypatch):
    """6,000 copies of the seed's variants (190,000 JSON values, 7 MB) took 17 s in the schema
    validator; past MAX_MANIFEST_VALUES it is one error, at once, from load_kernel and validate."""
    from webgpu_kernels.manifest import MAX_MANIFEST_VALUES, without_unknown_fields

    data = seed(QG)
    data["variants"] = [{**data["variants"][i % 3], "id": f"v{i}"} for i in range(6000)]
    data["stray"] = 1  # would send validate to the unknown-fields pass too
    problems = check_manifest(data)
    assert [p.detail for p in problems] == [
        f"the manifest holds more than {MAX_MANIFEST_VALUES} JSON values (objects, arrays, strings, numbers); "
        "the format's limit keeps loading and validating it fast"
    ]
    assert without_unknown_fields(data) is None
    # "before the schema": the validator never sees it (it would take seconds, then fail the same)
    monkeypatch.setattr("webgpu_kernels.manifest._validator", lambda: pytest.fail("the schema validator ran"))
    assert without_unknown_fields(data) is None and len(check_manifest(data)) == 1
    monkeypatch.undo()
    root = write_package(data, {"quick-gelu.wgsl.jinja": "// unused"})
    with pytest.raises(errors.ManifestError, match="more than 20000 JSON values"):
        wk.load_kernel(root)
    # at the bound it is validated as usual (the seed holds 166 values)
    del data["stray"]
    data["variants"] = data["variants"][:600]
    assert check_manifest(data) == []


def test_a_binding_set_named_by_many_passes_is_counted_per_pass(write_package):
    """A binding set is compiled for every pass that names it: 1,400 bindings named by 1,300
    passes (252 KB, within the value bound) took 104 s and 1.3 GB to load (a review).
    Past MAX_EXPANDED_BINDINGS it is one error, at once, from load_kernel and validate."""
    from webgpu_kernels.manifest import MAX_EXPANDED_BINDINGS, expanded_bindings
    from webgpu_kernels.validation import validate_package

    data = seed(QG)
    assert expanded_bindings(data) == (12, "bindingSets.scalarTail holds 4, named by 2 passes")  # 3 + 3 + 3, 3 fields
    # scalarTail's uniform struct gets 60 more fields (each is compiled per pass too): 64 per pass
    fields = data["bindingSets"]["scalarTail"][2]["struct"]["fields"]
    fields += [{"name": f"pad{i}", "type": "u32", "value": "0"} for i in range(60)]
    tail = data["variants"][1]["passes"][0]
    passes = (MAX_EXPANDED_BINDINGS - 4 - 64) // 64  # besides vec4's own 4 and the scalar variant's 64
    data["variants"][1]["passes"] = [{**tail, "id": f"p{i}"} for i in range(passes)]
    at_bound = expanded_bindings(data)[0]
    assert MAX_EXPANDED_BINDINGS - 64 < at_bound <= MAX_EXPANDED_BINDINGS
    assert check_manifest(data) == []  # up to the bound it loads as usual
    data["variants"][1]["passes"].append({**tail, "id": "one-more"})
    count = at_bound + 64
    message = (f"the passes hold {count} bindings and struct fields together, each bindingSets entry counted once "
               f"for every pass that names it; the format allows at most {MAX_EXPANDED_BINDINGS} (the largest share: "
               f"bindingSets.scalarTail holds 64, named by {passes + 2} passes)")
    assert [(p.json_path, p.detail) for p in check_manifest(data)] == [("variants", message)]
    root = write_package(data, {"quick-gelu.wgsl.jinja": "// unused"})
    with pytest.raises(errors.ManifestError, match=f"the passes hold {count} bindings and struct fields"):
        wk.load_kernel(root)
    problems = validate_package(root, gpu=False).problems
    assert [p.message for p in problems if p.file == "manifest.json"] == [message]


def test_every_type_has_a_dtypes_name_and_a_size():
    """The tables the engine sizes and names tensors by cover the schema's types, with NumPy's sizes."""
    import numpy as np

    from webgpu_kernels.manifest import ITEMSIZE, ONNX_TO_WGSL

    ml_dtypes = pytest.importorskip("ml_dtypes")

    assert set(ITEMSIZE) == set(ONNX_TO_WGSL) and all(ONNX_TO_WGSL.values())
    for name, size in ITEMSIZE.items():
        assert (np.dtype(ml_dtypes.bfloat16) if name == "bfloat16" else np.dtype(name)).itemsize == size, name


def test_self_is_a_reserved_name():
    """Jinja compiles the name `self` to a reference to the template: a derive entry named so read
    as <TemplateReference None> wherever it was used, and selection went wrong."""
    with pytest.raises(errors.ManifestError) as info:
        parse_manifest(mutate(QG, lambda d: d["derive"].update({"self": "4"})))
    assert info.value.json_path.startswith("derive")


@pytest.mark.parametrize("change, where", [
    (lambda d: d["variants"][0]["passes"][0].update(id="main\n"), "variants[0].passes[0].id"),
    (lambda d: d["variants"][0].update(id="vec4\n"), "variants[0].id"),
    (lambda d: d["attributes"].update({"alpha\n": 1.0}), "attributes"),
], ids=["pass-id", "variant-id", "attribute-name"])  # fmt: skip
def test_an_identifier_ending_in_a_newline_is_refused(change, where):
    """jsonschema reads `pattern` with Python's re.search, where `$` also matches before a final
    newline: "main\\n" passed as an identifier and failed at the first call, as a missing entry point."""
    problems = check_manifest(mutate(QG, change))
    assert any(p.json_path.startswith(where) and ("does not match" in p.detail or "is not what this field takes" in p.detail)
               for p in problems), problems  # fmt: skip
    assert not check_manifest(seed(QG))


def test_a_pattern_error_says_what_the_field_takes_not_its_regex():
    """A bad literal elementType printed the schema's 400-character regex (truncated)."""
    problems = check_manifest(mutate(QG, lambda d: d["variants"][0]["passes"][0]["bindings"][0].update(elementType="f33")))
    detail = next(p.detail for p in problems if p.json_path.endswith("elementType"))
    assert detail.startswith("'f33' is not what this field takes: WGSL element type (f32, vec4<f16>, ...) or a "
                             "\"$constant\" reference.")
    # An int64 tensor's elementType written as i64 is told how the format reads it.
    problems = check_manifest(mutate(QG, lambda d: d["variants"][0]["passes"][0]["bindings"][0].update(elementType="i64")))
    detail = next(p.detail for p in problems if p.json_path.endswith("elementType"))
    assert "storage-only" in detail and "vec2<u32> per int64 element" in detail


@pytest.mark.parametrize("section, name, value, fragment", [
    ("attributes", "alpha", 1e39, "rounds to a finite float32"),
    ("tunables", "WORKGROUP_SIZE", 2**70, r"below 2\^63"),
    ("attributes", "alpha", "x", None),  # a string default is a string attribute: fine
], ids=["f32-range", "int-range", "string-ok"])  # fmt: skip
def test_a_default_no_caller_could_pass_is_refused_at_load(section, name, value, fragment):
    """A default the contract refuses from a caller loaded, then every call leaving it alone failed
    with an AttributeValueError naming an argument the caller never passed."""
    data = mutate(QG, lambda d: d[section].update({name: value}))
    if fragment is None:
        compile_program(parse_manifest(data))
        return
    with pytest.raises(errors.ManifestError, match=fragment) as info:
        compile_program(parse_manifest(data))
    assert info.value.json_path == f"{section}.{name}"


@pytest.mark.parametrize("change, where, fragment", [
    (set_path(["derive", "vec4Ok"], "numel(shapes.Xx) % 4 == 0"), "derive.vec4Ok", "'Xx' is not an input or output"),
    (set_path(["variants", 0, "when", 1], "attrs.alhpa > 0"), "variants[0].when[1]", "no attribute 'alhpa'"),
    (set_path(["derive", "workgroupOk"], "tunables.WG > 0"), "derive.workgroupOk", "no tunable 'WG'"),
    (set_path(["variants", 0, "constants", "scalar"], "dtypes.U"), "variants[0].constants.scalar", "'U' is not a type variable"),
    (set_path(["inputs", 0, "rank"], "ranks.Xx"), "inputs[0].rank", r"'Xx' is not an input \(input ranks see only inputs\)"),
    (set_path(["inputs", 0, "rank"], "ranks.Y"), "inputs[0].rank", r"'Y' is not an input \(input ranks see only inputs\)"),
    (set_path(["inputs", 0, "rank"], "attrs.alhpa"), "inputs[0].rank", "no attribute 'alhpa'"),
    (set_path(["inputs", 0, "rank"], "vec4Ok"), "inputs[0].rank", r"unknown name 'vec4Ok' \(input ranks see only the namespaces\)"),
    (set_path(["inputs", 0, "rank"], "vec4Okk"), "inputs[0].rank", r"unknown name 'vec4Okk' \(input ranks see only the namespaces\)"),
    (lambda d: d.update(constants={"k": "attrs.alhpa"}), "constants.k", "no attribute 'alhpa'"),
], ids=["shapes", "attrs", "tunables", "dtypes", "input-rank-role", "input-rank-output", "input-rank-attrs",
        "input-rank-derive", "input-rank-unknown", "top-level-constant"])  # fmt: skip
def test_a_misspelt_name_under_a_namespace_is_refused_at_load(change, where, fragment):
    """`shapes.Xx` loaded and failed only where it was evaluated, perhaps in a variant no test
    reached; validate reported it, a load did not. An input's rank expression was not checked at
    all (an audit): it is evaluated before outputs, derive entries and constants exist.
    Nor was a top-level constant, compiled after the check (a review)."""
    with pytest.raises(errors.ExpressionError, match=fragment) as info:
        compile_program(parse_manifest(mutate(QG, change)))
    assert info.value.where == where


@pytest.mark.parametrize("name", ["nope", "vec4Ok"], ids=["unknown", "a-derive-entry"])
def test_a_dollar_name_in_a_struct_field_type_must_name_a_constant(name):
    """elementType and length were held to "$name names a constant"; a field's type was not: a derive
    entry ran and an unknown name failed each call as an expression (an audit)."""
    def change(d):
        d["variants"][2]["passes"][0]["bindings"] = [dict(b) for b in d["bindingSets"]["scalarTail"]]
        params = d["variants"][2]["passes"][0]["bindings"][2]
        params["struct"] = {"name": "Params", "fields": [{"name": "count", "type": f"${name}", "value": "1"}]}
    with pytest.raises(errors.ManifestError, match=rf"'\${name}' names no constant of this variant") as info:
        compile_program(parse_manifest(mutate(QG, change)))
    assert info.value.json_path == "variants[2].passes[0].bindings[2].struct.fields[0].type"


def test_input_ranks_count_in_the_packages_expression_budget():
    """Input ranks were compiled apart from the package's other expressions (a review):
    past the 64 KiB budget, they loaded."""
    from webgpu_kernels.errors import ExpressionSandboxError

    def change(d):
        for i in range(16):  # 16 x 3,998 characters: within 64 KiB
            d["derive"][f"filler{i}"] = f"'{i:04d}{'a' * 3988}' != ''"
        d["inputs"][0]["rank"] = f"ranks.X if '{'b' * 1600}' else 0"
    with pytest.raises(ExpressionSandboxError, match="characters together") as info:
        compile_program(parse_manifest(mutate(QG, change)))
    assert info.value.where == "inputs[0].rank"


def test_too_many_expressions_are_refused_before_any_is_compiled(monkeypatch):
    """Compiling 2,048 expressions to find the 2,049th took about 3 s (a test allowing 5 s failed
    under load); counting the manifest's distinct strings first takes no compile."""
    from webgpu_kernels.errors import ExpressionSandboxError
    from webgpu_kernels.expressions import ExpressionCompiler

    manifest = parse_manifest(mutate(QG, lambda d: d.update(constants={f"c{i}": f"{i} + 1" for i in range(3000)})))
    compiled = []
    real_compile = ExpressionCompiler.compile
    monkeypatch.setattr(ExpressionCompiler, "compile", lambda self, *a, **k: compiled.append(a) or real_compile(self, *a, **k))
    with pytest.raises(ExpressionSandboxError, match="more than 2048 distinct expressions") as info:
        compile_program(manifest)
    assert info.value.expression == "2044 + 1"  # after the 4 derive entries: the 2,049th distinct string
    assert info.value.where == "constants.c2044"  # validate reports it there, not at the manifest's root
    assert compiled == []



def test_a_rank_written_as_a_whole_float_is_that_rank():
    """JSON Schema's integer takes `"rank": 2.0`; kept as a float it matched neither the contract's
    int check nor the expression one, and a call of any rank passed."""
    from webgpu_kernels.contract import check_call

    manifest = parse_manifest(mutate(BA, set_path(["inputs", 1, "rank"], 1.0)))
    assert manifest.inputs[1].rank == 1 and type(manifest.inputs[1].rank) is int
    metas = {"X": ((2, 3, 4), "float32"), "bias": ((1, 4), "float32"), "skip": ((2, 3, 4), "float32")}
    with pytest.raises(errors.RankError, match="argument 'bias': expected rank 1, got rank 2"):
        check_call(manifest, metas, None, None)


def test_misspelt_field_names_the_field_meant() -> None:
    """A misspelt manifest key had read "Additional properties are not allowed ('atributes' was
    unexpected)", and the attributes it held then read as undeclared; the schema error names the
    field meant."""
    data = seed("com.microsoft.QuickGelu")
    data["atributes"] = data.pop("attributes")
    data["variants"][0]["passes"][0]["bindings"][0]["elementtype"] = "f32"
    problems = {p.json_path: p.detail for p in check_manifest(data)}
    assert "did you mean 'attributes'?" in problems[""]
    assert "did you mean 'elementType'?" in problems["variants[0].passes[0].bindings[0]"]
    data.pop("atributes")
    data["zzz"] = 1  # nothing near it: no guess
    assert "did you mean" not in {p.json_path: p.detail for p in check_manifest(data)}[""]


def test_output_bound_read_only_names_the_binding() -> None:
    """An output bound as 'read-only-storage' (a copy of an input's binding) had read "bound as
    'storage' by none of this variant's passes" at the variant, naming no binding; the error points
    at the binding's buffer type and says what it was."""
    data = seed("com.microsoft.BiasAdd")
    v = next(i for i, var in enumerate(data["variants"]) if isinstance(var["passes"][0]["bindings"], list))
    bindings = data["variants"][v]["passes"][0]["bindings"]
    b = next(i for i, binding in enumerate(bindings) if binding.get("arg") == "Y")
    bindings[b]["buffer"]["type"] = "read-only-storage"
    (problem,) = check_manifest(data)
    assert problem.json_path == f"variants[{v}].passes[0].bindings[{b}].buffer.type"
    assert "output 'Y' is bound as 'read-only-storage' here" in problem.detail and "'storage'" in problem.detail


def test_messages_call_a_manifests_list_and_dict_by_the_names_their_writer_knows():
    """A parsed manifest's arrays and objects are ReadOnlyList and ReadOnlyDict: a value taken from
    `kernel.manifest` and passed back where a number or an array was expected had been described as
    "got ReadOnlyList [1, 1]", a class the user never wrote; messages say list and dict."""
    import numpy as np

    from conftest import PACKAGES_DIR

    kernel = wk.load_kernel(PACKAGES_DIR / "demo.Conv")
    m = kernel.manifest
    inputs = {"X": np.ones((1, 1, 4, 4), np.float32), "W": np.ones((1, 1, 1, 1), np.float32)}
    cases = [
        (lambda: kernel(inputs, attrs={"group": m.attributes["strides"]}), errors.AttributeValueError,
         "argument 'group': expected an integer (attribute), got list [1, 1]"),
        (lambda: kernel(inputs, tunables={"WORKGROUP_SIZE": m.raw["attributes"]}), errors.AttributeValueError,
         "got dict {'strides': [1, 1]"),
        (lambda: kernel(inputs, attrs=m.attributes["pads"]), errors.InputError, "got list [0, 0, 0, 0]"),
        (lambda: kernel({**inputs, "X": m.raw["attributes"]}), errors.InputError,
         "argument 'X': expected a NumPy array or a GpuTensor, got dict"),
        (lambda: kernel(m.raw["inputs"]), errors.InputError, "expected a dict of input name -> array, got list"),
        (lambda: kernel.evaluate(m.attributes["dilations"], inputs), errors.InputError, "got list [1, 1]"),
        (lambda: wk.load_kernel(m.raw["inputs"]), errors.PackageError, "got list"),
    ]  # fmt: skip
    for call, error, message in cases:
        with pytest.raises(error) as caught:
            call()
        assert message in str(caught.value)
        assert "ReadOnly" not in str(caught.value)


def test_type_name_reads_the_manifests_read_only_containers_as_plain_ones():
    from webgpu_kernels.manifest import read_only

    value = read_only({"a": [1, {"b": 2}]})
    assert [errors.type_name(v) for v in (value, value["a"], value["a"][1], 1.5, np.float32(1), "x")] == [
        "dict", "list", "dict", "float", "float32", "str"]
    assert errors.describe_value(value["a"]) == "list [1, {'b': 2}]"


# --- coverage audit -------------------------------------------------------------------------


@pytest.mark.parametrize("data", [[1], 3, "x", None, True])
def test_a_manifest_that_is_no_object_is_one_schema_error_at_the_root(data):
    with pytest.raises(errors.ManifestError, match=r"is not of type 'object'") as info:
        parse_manifest(data)
    assert str(info.value).startswith("(root): ")


def test_expanded_bindings_counts_what_is_not_shaped_as_the_schema_wants_as_nothing():
    """Counted before the schema (which then names the problem): a set that is no list, a binding
    that is no object, a struct whose fields are no list, a pass or variant that is no object."""
    from webgpu_kernels.manifest import expanded_bindings

    data = {"bindingSets": {"s": "no list", "t": [{"struct": {"fields": "no list"}}, 5]},
            "variants": [{"passes": [{"bindings": "s"}, {"bindings": "t"}, {"bindings": 7}, 3]}, "v"]}  # fmt: skip
    assert expanded_bindings(data) == (2, "bindingSets.t holds 2, named by 1 passes")
    assert expanded_bindings([data]) == (0, "")
    assert expanded_bindings({"bindingSets": [], "variants": {}}) == (0, "")
