"""docs/format.md as a contract: the checkable claims of its sections before "The expression
language" (package layout, the manifest, inputs/outputs/args and the call, types, attributes and
tunables) that no other test pinned. Organised by the doc's headings; each test's docstring quotes
the line it pins. Package claims load, evaluate, explain or render a copy of
tests/packages/demo.ScaleShift; calls run on the test adapter."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

import webgpu_kernels as wk
from webgpu_kernels import errors

from conftest import PACKAGES_DIR

SCALE_SHIFT_WGSL = (PACKAGES_DIR / "demo.ScaleShift" / "scale-shift.wgsl.jinja").read_text()
X8 = {"X": wk.TensorMeta((8,), "float32")}


@pytest.fixture
def demo(scale_shift_variant) -> Callable[..., wk.Kernel]:
    """``demo(change, template, **files)``: conftest's scale_shift_variant."""
    return scale_shift_variant


def vec4_pass(manifest: dict) -> dict:
    return manifest["variants"][0]["passes"][0]


# --- Package layout -------------------------------------------------------------------------------


@pytest.mark.parametrize("name", [".hidden.wgsl.jinja", "..wgsl.jinja", "two words.wgsl.jinja", "-x.wgsl.jinja"])
def test_a_shader_name_the_loader_cannot_read_is_refused_at_load(demo, name):
    """Doc: "Every `*.wgsl.jinja` that a pass names must sit in the folder itself (no sub-folders:
    shader names may not contain `/` or `\\` or start with `.`)" -- with the other checks, "done when
    the package is loaded". A leading '.' (or a space) had loaded and failed the first call as a
    TemplateSandboxError; a dot-file is not even among the files the digest lists."""
    with pytest.raises(errors.ManifestError) as info:
        demo(lambda m: vec4_pass(m).update(shader=name), **{name: SCALE_SHIFT_WGSL})
    assert info.value.json_path == "variants[0].passes[0].shader"


def test_a_shader_name_of_letters_digits_dots_dashes_and_underscores_loads_and_renders(demo):
    """Doc: "Every `*.wgsl.jinja` that a pass names must sit in the folder itself" """
    name = "Scale_shift-2.v1.wgsl.jinja"
    kernel = demo(lambda m: vec4_pass(m).update(shader=name), **{name: SCALE_SHIFT_WGSL})
    assert "fn main" in kernel.render(X8)["main"]


# --- The manifest ---------------------------------------------------------------------------------


def test_a_schema_key_is_allowed_and_since_version_defaults_to_1_and_starts_there(demo):
    """Doc: "Point your editor at it with `"$schema": "..."` if you like; the key is allowed" and
    "`sinceVersion` | no (1) | integer >= 1" """
    demo(lambda m: (m.update({"$schema": "./manifest.schema.json"}), m.pop("sinceVersion")))
    with pytest.raises(errors.ManifestError) as info:
        demo(lambda m: m.update(sinceVersion=0))
    assert info.value.json_path == "sinceVersion"


@pytest.mark.parametrize("extra", [{"role": "X", "dtype": "T"}, {"role": "Y", "dtype": "T", "optional": True}],
                         ids=["two-inputs", "an-input-named-as-an-output"])  # fmt: skip
def test_input_and_output_roles_are_unique_together(demo, extra):
    """Doc: "input and output roles are unique" """
    with pytest.raises(errors.ManifestError, match="roles must be unique"):
        demo(lambda m: m["inputs"].append(extra))


def test_an_args_key_must_be_a_role_of_its_kind(demo):
    """Doc: "every `args` entry names an existing input (role `input`) or output (role `output`)": the
    entry's key is the name; one that is no role is refused though its role field is right."""
    with pytest.raises(errors.ManifestError) as info:
        demo(lambda m: m["args"].update(Q=m["args"].pop("X")))
    assert info.value.json_path == "args.Q" and "no such entry in inputs" in str(info.value)


@pytest.mark.parametrize("both", [True, False])
def test_the_shader_goes_in_exactly_one_place(demo, both):
    """Doc: "The shader goes **either** in `pass.shader` **or** in `source.shader`, never both." """

    def change(m: dict) -> None:
        if both:
            vec4_pass(m)["source"]["shader"] = "scale-shift.wgsl.jinja"
        else:
            del vec4_pass(m)["shader"]

    with pytest.raises(errors.ManifestError) as info:
        demo(change)
    assert info.value.json_path.startswith("variants[0].passes[0]")


def test_when_takes_literal_booleans(demo):
    """Doc: "`when` | no (`[]`) | list of conditions (expressions, or literal `true`/`false`)" """
    kernel = demo(lambda m: m["variants"][0].update(when=[True, False]))
    assert kernel.explain(X8).chosen == "scalar"
    assert demo(lambda m: m["variants"][0].update(when=[True])).explain(X8).chosen == "vec4"


# --- Inputs, outputs, args and the call -----------------------------------------------------------


def test_a_python_number_is_an_input_to_explain_render_and_evaluate_as_to_the_call():
    """Doc: "Inputs are NumPy arrays (...), lists and Python numbers (through `np.asarray`, so a Python
    float is float64 and refused by a float32/float16 constraint)". explain, render and evaluate had
    refused a Python int the call ran (demo.Gather's int64 indices) as "expected an array, a
    GpuTensor or a TensorMeta, got int"."""
    gather = wk.load_kernel(PACKAGES_DIR / "demo.Gather")
    inputs = {"data": np.arange(12, dtype=np.float32).reshape(4, 3), "indices": 2}
    assert gather(inputs)["Y"].tolist() == [6.0, 7.0, 8.0]
    explained = gather.explain(inputs)
    assert explained.chosen is not None and explained.outputs[0].shape == (3,)
    assert set(gather.render(inputs)) and gather.evaluate("shapes.indices", inputs) == ()
    for judge in (gather, gather.explain):  # a float is float64, refused the same way by both
        with pytest.raises(errors.DTypeError, match="float64") as info:
            judge({**inputs, "indices": 2.0})
        assert info.value.argument == "indices"


def test_an_expression_rank_gives_an_at_least_form(demo):
    """Doc: "`"rank": "ranks.X if ranks.X >= 1 else 1"` takes any rank from 1 up and refuses a 0-d `X`
    with a `RankError` (expected rank 1)" """
    kernel = demo(lambda m: m["inputs"][0].update(rank="ranks.X if ranks.X >= 1 else 1"))
    assert kernel.evaluate("ranks.X", {"X": wk.TensorMeta((2, 3, 4), "float32")}) == 3
    with pytest.raises(errors.RankError, match="expected rank 1") as info:
        kernel.evaluate("1", {"X": wk.TensorMeta((), "float32")})
    assert info.value.argument == "X"


def test_an_absent_optional_input_has_no_shape_or_rank(demo):
    """Doc: "An absent input has no entry in `shapes`/`ranks`; test for it with `"B" in shapes`." """
    kernel = demo(lambda m: m["inputs"].append({"role": "B", "dtype": "T", "optional": True}))
    assert kernel.evaluate("'B' in shapes or 'B' in ranks", X8) is False
    assert kernel.evaluate("'B' in shapes and 'B' in ranks", {**X8, "B": wk.TensorMeta((2,), "float32")}) is True


def test_an_output_shape_takes_integral_floats_as_ints_and_refuses_others(demo):
    """Doc: "`shape` is an expression giving a list of non-negative integers (integral floats are
    accepted and made ints)" """
    halved = demo(lambda m: m["outputs"][0].update(shape="[numel(shapes.X) / 2]"))
    shape = halved.evaluate("shapes.Y", X8)
    assert shape == (4,) and type(shape[0]) is int
    for source in ["[numel(shapes.X) / 3]", "[-1]", "[true]"]:
        with pytest.raises(errors.ExpressionError, match="non-negative integer"):
            demo(lambda m, source=source: m["outputs"][0].update(shape=source)).evaluate("shapes.Y", X8)


def test_a_type_variable_no_tensor_has_is_never_bound_and_enables_nothing(demo):
    """Doc: "A type variable that no input or output has is never bound (`dtypes.H` is undefined): a
    `"H": ["float16"]` of that kind would otherwise make every call's WGSL enable f16." """
    kernel = demo(lambda m: m["typeConstraints"].update(H=["float16"]))
    with pytest.raises(errors.ExpressionError, match="undefined"):
        kernel.evaluate("dtypes.H", X8)
    assert "enable f16" not in kernel.render(X8)["main"]


def test_enables_says_nothing_of_the_variant_so_a_shared_template_tests_a_constant(demo):
    """Doc: "`enables` is a string, `"enable f16;"` in every variant of a call whose type variable is
    bound to float16 (and `""` otherwise ...), so it says nothing of the variant. Test a constant the
    variants set instead: `{% if enables and not vec4 %}`" """
    def words_only(m: dict) -> None:  # vec4 views X and Y as u32 words, as a words-only variant does
        for b in vec4_pass(m)["bindings"][:2]:
            b["elementType"] = "vec2<u32>"

    kernel = demo(words_only, template="[{{ enables }}]{% if enables and not vec4 %}{{ enables }}{% endif %}")
    x16, x32 = {"X": wk.TensorMeta((8,), "float16")}, X8
    assert kernel.render(x16, variant="vec4")["main"] == "[enable f16;]"  # bound to float16: enables is set
    assert kernel.render(x16, variant="scalar")["main"] == "[enable f16;]enable f16;"
    assert kernel.render(x32, variant="vec4")["main"] == kernel.render(x32, variant="scalar")["main"] == "[]"


# --- Attributes and tunables ----------------------------------------------------------------------

DEFAULTS = {"count": 1, "ratio": 0.5, "flag": True, "mode": "a", "axes": [0, 1], "anything": [], "weights": [0.5]}


@pytest.fixture
def attributed(demo) -> wk.Kernel:
    return demo(lambda m: m["attributes"].update(DEFAULTS))


@pytest.mark.parametrize("name, given, kept", [
    ("count", 2.0, 2), ("count", np.int64(3), 3), ("count", np.float32(2.0), 2), ("ratio", 2, 2),
    ("ratio", np.float32(1.5), 1.5), ("flag", False, False), ("flag", np.bool_(False), False),
    ("mode", "b", "b"), ("mode", np.str_("c"), "c"), ("axes", [1.0], [1]), ("axes", (2, 3), [2, 3]),
    ("axes", np.array([4, 5]), [4, 5]), ("anything", [1.5, 2], [1.5, 2]), ("weights", [1], [1]),
])  # fmt: skip
def test_a_value_of_the_defaults_kind_replaces_it(attributed, name, given, kept):
    """Doc: "an `int` default accepts `2.0` and makes it `2` (...); a `float` default accepts ints and keeps
    them ints); a string for a string; a list of finite numbers for a list (a list, tuple or 1-D array),
    whose items are integers when the default's are (`[0, 1]`: `[1.0]` becomes `[1]` (...)) and otherwise
    stay as given (an empty default `[]` says nothing of its items (...)). NumPy scalars are accepted." """
    value = attributed.evaluate(f"attrs.{name}", X8, attrs={name: given})
    assert value == kept and type(value) is type(kept)
    if isinstance(kept, list):
        assert [type(v) for v in value] == [type(v) for v in kept]


@pytest.mark.parametrize("name, given", [
    ("count", 2.5), ("count", True), ("count", "2"), ("ratio", float("nan")), ("ratio", float("inf")),
    ("flag", 1), ("flag", "true"), ("mode", 1), ("axes", [1.5]), ("axes", np.array([[1]])), ("axes", [True]),
    ("axes", "ab"), ("anything", ["a"]), ("weights", [float("inf")]),
])  # fmt: skip
def test_a_value_of_another_kind_is_an_attribute_value_error(attributed, name, given):
    """Doc: "must be of the default's kind: a boolean for a boolean default; a finite number for a number
    default (an `int` default (...) refuses `2.5` (...)); a list of finite numbers for a list (...)
    (`[1.5]` is refused)" """
    with pytest.raises(errors.AttributeValueError) as info:
        attributed.evaluate(f"attrs.{name}", X8, attrs={name: given})
    assert info.value.argument == name


def test_tunables_follow_the_same_rules(demo):
    """Doc: "A caller's value (`attrs={...}`, `tunables={...}`) replaces the default and must be of the
    default's kind" and "Unknown names are an `UnknownInputError`." """
    kernel = demo()
    assert kernel.evaluate("tunables.WORKGROUP_SIZE", X8, tunables={"WORKGROUP_SIZE": 128.0}) == 128
    with pytest.raises(errors.AttributeValueError):
        kernel.evaluate("1", X8, tunables={"WORKGROUP_SIZE": True})
    for kwargs in ({"tunables": {"NOPE": 1}}, {"attrs": {"nope": 1}}):
        with pytest.raises(errors.UnknownInputError):
            kernel.evaluate("1", X8, **kwargs)


def test_a_string_outside_the_set_a_when_clause_allows_is_a_selection_error(demo):
    """Doc: "Restrict it with a `derive` entry that every variant's `when` reads, first ... A call with
    another string then gets a `SelectionError` listing each variant's failing clause and the values it
    read ..., or, with a forced variant, a `VariantRejectedError` naming it. `AttributeValueError` is
    only for a value of the wrong kind" """
    def modes(m: dict) -> None:
        m["attributes"]["mode"] = "a"
        m["derive"]["modeOk"] = "attrs.mode in ['a', 'b']"
        for v in m["variants"]:
            v["when"].insert(0, "modeOk")

    kernel = demo(modes)
    assert kernel.explain(X8, attrs={"mode": "b"}).chosen == "vec4"
    with pytest.raises(errors.SelectionError) as info:
        kernel.plan(X8, attrs={"mode": "c"})
    message = str(info.value)
    assert not isinstance(info.value, errors.VariantRejectedError)
    for variant in ("vec4", "scalar"):
        assert f"{variant}: when[0] 'modeOk' is false (with modeOk=False, attrs.mode='c')" in message, message
    with pytest.raises(errors.VariantRejectedError, match="modeOk"):
        kernel.plan(X8, attrs={"mode": "c"}, variant="scalar")
    with pytest.raises(errors.AttributeValueError, match="expected a string"):
        kernel.plan(X8, attrs={"mode": 3})

