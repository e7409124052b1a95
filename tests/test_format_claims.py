"""docs/format.md as a contract: the checkable claims of its sections from "The expression
language" to "What makes a new pipeline" that no other test pinned. Organised by the doc's
headings; each test's docstring quotes the line it pins. Expressions are evaluated directly;
package claims render or explain (no pipeline is built) a copy of tests/packages/demo.ScaleShift,
except those of what a binding's padding holds and of subnormals, which run calls on the test adapter."""

from __future__ import annotations

import copy
import re
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

import webgpu_kernels as wk
from webgpu_kernels import errors
from webgpu_kernels.expressions import STATIC_FUNCTIONS, ExpressionCompiler

from conftest import PACKAGES_DIR, poison_outputs, run_on_words

X8 = {"X": wk.TensorMeta((8,), "float32")}


def ev(source: str, **names):
    scope = dict(STATIC_FUNCTIONS, shapes={"X": (2, 3)}, ranks={"X": 2}, **names)
    return ExpressionCompiler(names).compile(source, "claim").evaluate(scope)


@pytest.fixture
def demo(scale_shift_variant) -> Callable[..., wk.Kernel]:
    """``demo(change, template, **files)``: conftest's scale_shift_variant."""
    return scale_shift_variant


def scalar_pass(manifest: dict) -> dict:
    return manifest["variants"][1]["passes"][0]


# --- The expression language: Syntax --------------------------------------------------------------


@pytest.mark.parametrize("source", ["7 // 0", "7 % 0", "7 / 0", "7.0 // 0", "1 % 0.0"])
def test_division_or_modulo_by_zero_is_an_expression_error(source):
    """Doc: "a division or modulo by zero is an `ExpressionError` (`ZeroDivisionError: integer modulo by zero`)" """
    with pytest.raises(errors.ExpressionError, match="ZeroDivisionError"):
        ev(source)


def test_none_is_jinjas_none_not_the_string_none():
    """Doc: "**`none` (also `None`) is Jinja's None, not a string**: `attrs.approximate in [none, 'tanh']`
    is false for the string `"none"`, silently ...; a string value is always quoted" """
    attrs = {"approximate": "none"}
    assert ev("none") is None and ev("None") is None
    assert ev("attrs.approximate in [none, 'tanh']", attrs=attrs) is False
    assert ev("attrs.approximate in ['none', 'tanh']", attrs=attrs) is True


def test_a_chained_comparison_stops_at_its_first_false_link():
    """Doc: "chained (`0 < x < 5`, which stops at its first false link as in Python)" """
    assert ev("0 < x < 5", x=3) is True and ev("0 < x < 5", x=5) is False
    assert ev("0 > 1 < (1 // 0)") is False  # the second link is never evaluated


def test_and_or_return_an_operand_and_skip_the_side_that_does_not_decide():
    """Doc: "`G >= 1 and C % G == 0` is false, not an error, for `G = 0` (the same holds for the branch
    `a if cond else b` does not take)" """
    assert ev("G >= 1 and C % G == 0", G=0, C=6) is False
    assert ev("0 and 5") == 0 and ev("0 or 5") == 5
    assert ev("1 if G == 0 else C // G", G=0, C=6) == 1


def test_an_if_without_else_is_falsy_and_an_error_where_its_value_is_used():
    """Doc: "without it a false condition yields Jinja's plain (not strict) undefined. Its truth value is
    false, so `not x` is true and `x or y` is `y`; as an expression's result (`x and y` returns it),
    in arithmetic and in `==`/`!=` it is an error" """
    assert ev("not (1 if false)") is True
    assert ev("(1 if false) or 5") == 5
    for source in ["1 if false", "true and (1 if false)", "(1 if false) + 1", "(1 if false) == 1",
                   "(1 if false) != 1"]:  # fmt: skip
        with pytest.raises(errors.ExpressionError, match="no else"):
            ev(source)


@pytest.mark.parametrize("source, value", [("true", True), ("True", True), ("False", False), ("none", None),
                                           ("'a' ~ 1 ~ 2.5", "a12.5"), ("(1, 2)", (1, 2))])  # fmt: skip
def test_literals_and_concatenation(source, value):
    """Doc: "`true`/`false` (also `True`/`False`), `none`" and "`~` | string concatenation (operands
    converted with `str`)" """
    assert ev(source) == value


def test_indices_and_slice_bounds_are_integers_not_booleans():
    """Doc: "indices and slice bounds are integers (not booleans), a bound may be left out, a step of 0
    is an error" """
    assert ev("shapes.X[:-1]") == (2,) and ev("shapes.X[::-1]") == (3, 2)
    for source in ["shapes.X[true]", "shapes.X[1:true]", "shapes.X[::0]"]:
        with pytest.raises(errors.ExpressionError):
            ev(source)


def test_an_index_out_of_range_is_an_error_where_slice_bounds_are_clipped():
    """Doc: "an index out of range is an error (`shapes.X[-3]` of a rank-2 X: `undefined value: tuple
    object has no element -3`), where slice bounds past either end are clipped as in Python:
    `shapes.A[:-2]` and `shapes.A[-2:-1]` of a 1-D A are `()`" """
    with pytest.raises(errors.ExpressionError, match="tuple object has no element -3"):
        ev("shapes.X[-3]")
    assert ev("shapes.X[:-2]") == () and ev("shapes.X[-5:-1]") == (2,) and ev("shapes.X[7:]") == ()
    one_d = {"A": ((5,), "float32"), "B": ((5, 3), "float32")}
    matmul = wk.load_kernel(PACKAGES_DIR / "ai.onnx.MatMul")
    assert matmul.evaluate("shapes.A[:-2]", one_d) == () and matmul.evaluate("shapes.A[-2:-1]", one_d) == ()
    assert [(o.role, o.shape) for o in matmul.explain(one_d).outputs] == [("Y", (3,))]


@pytest.mark.parametrize("source", ["x | length", "x is defined", "{'a': 1}", "foo(1)", "min(a=1)", "min(*x)"])
def test_what_is_refused_at_load_time(source):
    """Doc: "Refused at load time: filters (`x | length`), tests (`x is defined`), dict literals, calls of
    anything but the functions below, keyword arguments, `*args`." """
    with pytest.raises(errors.ExpressionError):
        ExpressionCompiler(["x"]).compile(source, "claim")


# --- The expression language: Names ---------------------------------------------------------------


def test_a_shape_is_a_tuple_that_never_equals_a_list():
    """Doc: "a **tuple** of ints (`shapes.X == [2, 3]` is false because a tuple never equals a list; use
    `sameShape` or `dim`)" """
    assert ev("shapes.X == [2, 3]") is False
    assert ev("sameShape(shapes.X, [2, 3])") is True and ev("shapes.X == (2, 3)") is True


def test_when_clauses_can_use_an_outputs_rank_and_shape(demo):
    """Doc: "Outputs appear in `shapes`/`ranks` once their shape is computed, so `when` clauses can use
    `ranks.Y`." """
    kernel = demo(lambda m: m["variants"][0]["when"].append("ranks.Y == 1 and shapes['Y'] == shapes.X"))
    assert kernel.explain(X8).chosen == "vec4"
    kernel = demo(lambda m: m["variants"][0]["when"].append("ranks.Y == 2"))
    assert kernel.explain(X8).chosen == "scalar"


# --- The expression language: Functions -----------------------------------------------------------


def test_min_and_max_compare_shapes_lexicographically_and_refuse_no_values():
    """Doc: "On shapes they compare lexicographically (`max([1, 9], [2, 1])` is `[2, 1]`)" and "empty is
    an error" """
    assert ev("max([1, 9], [2, 1])") == [2, 1] and ev("min([1, 9], [2, 1])") == [1, 9]
    for source in ["min([])", "max()"]:
        with pytest.raises(errors.ExpressionError):
            ev(source)


@pytest.mark.parametrize("source", ["ceilDiv(true, 2)", "ceilDiv(4, 0)", "numel('ab')", "dim(3, 0)",
                                    "sameShape([1.5], [1.5])", "dim(shapes.X, 2)", "dim(shapes.X, -3)"])  # fmt: skip
def test_functions_refuse_what_they_do_not_take(source):
    """Doc: "`ceilDiv(a, b)` ... numbers only (not booleans); `b == 0` is an error", "out of range is an
    error", "`dim`, `numel`, `sameShape` and the `broadcast` functions take shapes: lists or tuples
    of integers; anything else is an error" """
    with pytest.raises(errors.ExpressionError):
        ev(source)


def test_ceil_div_rounds_up_as_negated_floor_division():
    """Doc: "`ceil(a / b)` as an int (computed as `-(-a // b)`)" """
    assert [ev(f"ceilDiv({a}, 2)") for a in (-5, -4, 0, 5)] == [-2, -2, 0, 3]
    assert ev("ceilDiv(7.5, 2)") == 4 and isinstance(ev("ceilDiv(7.5, 2)"), int)


@pytest.mark.parametrize(("shape", "target"), [
    ([4], [2, 3, 4]), ([1], [2, 3]), ([], [5]), ([3, 1], [3, 4]), ([1, 4], [3, 4]), ([2, 3, 4], [3, 4]),
    ([3, 1], [1, 4]), ([5], [4]), ([3], [3, 1]), ([0], [2, 0]), ([2], [2, 0]), ([1, 1], [1]),
])  # fmt: skip
def test_one_way_broadcasting_is_broadcastable_and_same_shape_of_broadcast_shape(shape, target):
    """Doc: "`broadcastable` is two-way: `[3, 1]` and `[1, 4]` broadcast together (to `(3, 4)`),
    though neither broadcasts to the other. ONNX's one-way rule ... is `broadcastable(S, t) and
    sameShape(broadcastShape(S, t), t)`: true exactly when `S` has at most `t`'s rank and each of its
    sizes is 1 or `t`'s on that axis"; "`broadcastStrides(S, t)` holds `S` to the same rule, but
    fails rather than answering." Judged against NumPy's np.broadcast_to."""
    try:
        np.broadcast_to(np.empty(shape), target)
        to = True
    except ValueError:
        to = False
    assert ev(f"broadcastable({shape}, {target}) and sameShape(broadcastShape({shape}, {target}), {target})") is to
    assert ev("broadcastable([3, 1], [1, 4])") is True and ev("broadcastShape([3, 1], [1, 4])") == (3, 4)
    if to:
        ev(f"broadcastStrides({shape}, {target})")
    else:
        with pytest.raises(errors.ExpressionError):
            ev(f"broadcastStrides({shape}, {target})")
    if not ev(f"broadcastable({shape}, {target})"):
        with pytest.raises(errors.ExpressionError):  # why the first half is there
            ev(f"sameShape(broadcastShape({shape}, {target}), {target})")


# --- The expression language: Strictness ----------------------------------------------------------


def test_a_derive_that_uses_a_constant_fails_when_evaluated_not_at_load(demo):
    """Doc: "A known name with no value at this point (... a derive that uses a constant, a variant
    constant used outside its variant) is an error when evaluated" """
    kernel = demo(lambda m: (m["derive"].__setitem__("q", "scalar"), m["variants"][0]["when"].append("q != ''")))
    verdict = kernel.explain(X8).verdicts[0]
    assert not verdict.accepted and "'scalar' is undefined" in str(kernel.explain(X8))
    kernel = demo(lambda m: m["variants"][1]["when"].append("vectorType != ''"))
    assert "'vectorType' is undefined" in str(kernel.explain(X8))


@pytest.mark.parametrize("source", ["[1 if false]", "(1 if false,)", "max(1 if false, 2)"])
def test_undefined_inside_a_list_or_a_call_is_an_error_too(source):
    """Doc: "undefined is never silently `None` ..., inside a list or tuple literal (`[shapes.Z]`) too" """
    with pytest.raises(errors.ExpressionError, match="undefined"):
        ev(source)


# --- The expression language: Size bounds ---------------------------------------------------------


def test_an_expression_source_is_at_most_4096_characters():
    """Doc: "An expression's source is at most 4096 characters." """
    ExpressionCompiler([]).compile("1" + " " * 4095, "claim")
    with pytest.raises(errors.ExpressionSandboxError, match="4096"):
        ExpressionCompiler([]).compile("1" + " " * 4096, "claim")


@pytest.mark.parametrize("operator", [" and ", " + "])
def test_a_flat_chain_of_34_operands_is_refused_and_33_pass(operator):
    """Doc: "`a and b and c ...` or `1 + 1 + ...` of 34 operands or more is refused" """
    ExpressionCompiler(["a"]).compile(operator.join(["1"] * 33), "claim")
    with pytest.raises(errors.ExpressionSandboxError, match="32 levels"):
        ExpressionCompiler(["a"]).compile(operator.join(["1"] * 34), "claim")


def test_an_expression_nests_at_most_32_levels():
    """Doc: "An expression nests at most 32 levels deep" """
    ExpressionCompiler([]).compile("[" * 32 + "1" + "]" * 32, "claim")
    with pytest.raises(errors.ExpressionSandboxError):
        ExpressionCompiler([]).compile("[" * 33 + "1" + "]" * 33, "claim")


@pytest.mark.parametrize("source", ["'a' * 4096 ~ 'b'", "[1] * 4097", "'ab' * 2049", "numel([2**64, 2**64, 2])",
                                    "2 ** 129", "2 ** -129", "2**127 + 2**127"])  # fmt: skip
def test_values_past_the_bounds_are_sandbox_errors(source):
    """Doc: "a string, list or tuple ... is at most 4096 long, an integer at most 128 bits, an exponent of
    `**` at most 128 in magnitude; ... `~` concatenation is bounded the same way, and so is
    `numel()`'s product as it grows" """
    with pytest.raises(errors.ExpressionSandboxError):
        ev(source)


@pytest.mark.parametrize("source", ["'%d' % 5", "'a%sb' % 'c'"])
def test_percent_formats_no_string(source):
    """Doc: "(`%` formats no string: `"%d" % 5` is refused)"; `%` stays an integer modulo."""
    with pytest.raises(errors.ExpressionSandboxError, match="string formatting"):
        ev(source)
    assert ev("-7 % 3") == 2


def test_a_value_nests_at_most_32_levels_through_derive_entries(demo):
    """Doc: "and so does a value (a derive entry wrapping another in a list, `[[b]]`, counts the levels of
    both)" """

    def chain(m: dict, links: int) -> None:
        m["derive"]["d0"] = "1"
        for i in range(1, links + 1):
            m["derive"][f"d{i}"] = f"[[d{i - 1}]]"
        m["variants"][0]["when"].append(f"d{links} != 0")

    assert demo(lambda m: chain(m, 16)).explain(X8).chosen == "vec4"  # 32 levels
    text = str(demo(lambda m: chain(m, 17)).explain(X8))
    assert "nested more than 32 levels" in text


def test_a_json_literal_is_held_to_the_integer_bound_at_load(demo):
    """Doc: "A JSON literal in place of an expression (`"derive": {"n": 64}`) is held to the same integer,
    length and nesting bounds when the package loads." """
    with pytest.raises(errors.ExpressionSandboxError, match="128"):
        demo(lambda m: m["derive"].__setitem__("big", 2**200))


# --- Evaluation order and deferred errors ---------------------------------------------------------


@pytest.mark.parametrize("pads", [[1, 2, 3, 4], (1, 2, 3, 4), np.array([1, 2, 3, 4]), [1, 2, 3], [1, 2, 3, 4, 5], []])
def test_a_list_attribute_is_a_list_and_its_length_is_tested_with_slices(demo, pads):
    """Doc: "A list attribute is a list, whatever the caller passed (a tuple or a 1-D array becomes a
    list)", "`attrs.pads[3:] != [] and attrs.pads[4:] == []` being true exactly when `pads` has four items" """
    kernel = demo(lambda m: m["attributes"].update(pads=[0, 0, 0, 0]))
    four, as_list, joined = kernel.evaluate(
        "[attrs.pads[3:] != [] and attrs.pads[4:] == [], attrs.pads == [1, 2, 3, 4], attrs.pads + [9]]",
        X8, attrs={"pads": pads})  # fmt: skip
    assert four is (len(pads) == 4) and as_list is (list(pads) == [1, 2, 3, 4])
    assert joined == [*pads, 9] and type(joined) is list


def test_an_output_shape_on_a_checked_attribute_lets_when_refuse_with_its_clause(demo):
    """Doc: "Read such attributes through derive entries with a harmless fallback, and let `when`
    refuse" (an output shape reading the attribute itself fails the call with an ExpressionError)"""

    def change(m: dict, *, guarded: bool) -> None:
        m["attributes"]["stride"] = [1]
        m["derive"].update(strideOk="attrs.stride[1:] == [] and attrs.stride[0:] != [] and attrs.stride[0] >= 1",
                           s="attrs.stride[0] if strideOk else 1")  # fmt: skip
        m["outputs"][0].update(shape="(ceilDiv(dim(shapes.X, 0), s if strideOk else 1),)" if guarded
                               else "(ceilDiv(dim(shapes.X, 0), attrs.stride[0]),)")  # fmt: skip
        for variant in m["variants"]:
            variant["when"].append("strideOk")

    with pytest.raises(errors.SelectionError, match="strideOk"):
        demo(lambda m: change(m, guarded=True))({"X": np.ones(8, np.float32)}, attrs={"stride": [0]})
    with pytest.raises(errors.ExpressionError, match="ZeroDivisionError|division"):
        demo(lambda m: change(m, guarded=False))({"X": np.ones(8, np.float32)}, attrs={"stride": [0]})


def test_a_derive_entry_may_read_one_below_it(demo):
    """Doc: "a derive entry may read outputs (`ranks.Y`) and other derive entries, above or below it" """
    kernel = demo(lambda m: (m["derive"].__setitem__("up", "down + 1"), m["derive"].__setitem__("down", "ranks.Y"),
                             m["variants"][0]["when"].append("up == 2")))  # fmt: skip
    assert kernel.explain(X8).chosen == "vec4"


def test_top_level_constants_see_only_earlier_constants(demo):
    """Doc: "**Top-level `constants`**, in order; each sees all derive entries and earlier constants." """
    kernel = demo(lambda m: (m["constants"].update(a="b + 1", b="n"), m["variants"][0]["when"].append("a > 0")))
    assert "'b' is undefined" in str(kernel.explain(X8))
    kernel = demo(lambda m: (m["constants"].update(b="n", a="b + 1"), m["variants"][0]["when"].append("a == 9")))
    assert kernel.explain(X8).chosen == "vec4"


def test_a_constant_overrides_a_derive_entry_in_when_but_not_in_output_shapes(demo):
    """Doc: "A constant of the same name as a derive entry overrides it for the variant's expressions
    (its `when` clauses included) but not for the output shapes" """

    def change(m: dict) -> None:
        m["derive"]["k"], m["constants"]["k"] = "1", "2"
        m["outputs"][0].update(shape="shapes.X[:k] + (1,)", rank="2")
        m["variants"][0]["when"].append("k == 2")

    explanation = demo(change, template="// k={{ k }}\n").explain({"X": wk.TensorMeta((4, 8), "float32")})
    assert explanation.chosen == "vec4" and explanation.outputs[0].shape == (4, 1)


def test_a_failed_constant_is_missing_in_a_template(demo):
    """Doc: "In a template, a failed constant is simply missing (the template then fails with `'name' is
    undefined`, without the original reason)." """
    kernel = demo(lambda m: m["derive"].__setitem__("bad", "dim(shapes.X, 5)"), template="{{ bad }}\n")
    with pytest.raises(errors.TemplateError, match="'bad' is undefined") as info:
        kernel.render(X8)
    assert "out of range" not in str(info.value)


def test_a_failed_derive_fails_the_call_where_a_dispatch_reads_it(demo):
    """Doc: "in a binding or dispatch expression it fails the call with an `ExpressionError`" """
    kernel = demo(lambda m: (m["derive"].__setitem__("bad", "dim(shapes.X, 5)"),
                             scalar_pass(m)["dispatch"].__setitem__("threads", "bad")))  # fmt: skip
    with pytest.raises(errors.ExpressionError, match="'bad' could not be evaluated") as info:
        kernel.render(X8, variant="scalar")
    assert info.value.where == "variants[1].passes[0].dispatch.threads"


def test_pass_expressions_are_evaluated_source_inputs_then_bindings_then_dispatch(demo):
    """Doc: "the pass expressions in the manifest's reading order: `source.inputs`, then each binding
    in list order (its element type, `length` and struct fields), then `dispatch` ... The first
    expression that fails is the one the call's error names." (The engine had evaluated source.inputs
    last, after dispatch.)"""

    def failing(*places: str) -> Callable[[dict], None]:
        def change(m: dict) -> None:
            p = scalar_pass(m)
            p["bindings"] = copy.deepcopy(m["bindingSets"]["scalarIO"])
            if "source" in places:
                p["source"]["inputs"]["broken"] = "1 // 0"
            if "length" in places:
                p["bindings"][0]["length"] = "2 // 0"
            if "field" in places:
                p["bindings"][2]["struct"]["fields"][0]["value"] = "3 // 0"
            if "dispatch" in places:
                p["dispatch"]["threads"] = "4 // 0"

        return change

    cases = [(("source", "length", "field", "dispatch"), "source.inputs.broken"),
             (("length", "field", "dispatch"), "bindings[0].length"),
             (("field", "dispatch"), "bindings[2].struct.fields[0].value"), (("dispatch",), "dispatch.threads")]
    for places, where in cases:
        with pytest.raises(errors.ExpressionError) as info:
            demo(failing(*places)).render(X8, variant="scalar")
        assert info.value.where.endswith(where), (places, info.value.where)


# --- Variants and the selection rule --------------------------------------------------------------


@pytest.mark.parametrize("clause", ["1", "0", "''", "none", "[1]", "'false'"])
def test_a_when_clause_that_is_not_a_boolean_rejects_the_variant(demo, clause):
    """Doc: "the first one that is false, is not a boolean (`0`, `""`, `none` or `[1]`: the trace says "a
    when clause must be true or false", since a truthy `'false'` would otherwise choose the variant)" """
    explanation = demo(lambda m: m["variants"][0]["when"].append(clause)).explain(X8)
    assert explanation.chosen == "scalar" and "a when clause must be true or false" in str(explanation)


def test_an_empty_when_always_holds(demo):
    """Doc: "An empty `when` always holds." """
    assert demo(lambda m: m["variants"][0].__setitem__("when", [])).explain({"X": wk.TensorMeta((7,), "float32")}).chosen == "vec4"


def _layer_normalization() -> wk.Kernel:
    return wk.load_kernel(PACKAGES_DIR / "ai.onnx.LayerNormalization")


def test_the_values_a_trace_shows_come_clause_first_then_what_its_entries_read_three_levels_deep():
    """Doc: "the names the failing clause reads, in the order the expression names them (a conditional
    `a if c else b` names `c` first); then the names that each of those derive entries and constants
    reads, entry by entry; then the names those read: three levels in all. A name is listed once";
    the two LayerNormalization traces the paragraph quotes."""
    kernel = _layer_normalization()
    x, scale = wk.TensorMeta((2, 3, 4), "float32"), wk.TensorMeta((4,), "float32")
    first = kernel.explain({"X": x, "Scale": scale}, attrs={"axis": 3}).verdicts[0]
    assert first.reason() == "when[0] 'axisOk' is false (with axisOk=False, ranks.X=3, attrs.axis=3)"
    first = kernel.explain({"X": x, "Scale": wk.TensorMeta((3,), "float32")}).verdicts[0]
    assert first.reason() == ("when[3] 'scaleOk' is false (with scaleOk=False, shapes.Scale=[3], normShape=[4], "
                              "scaleN=3, D=4, ranks.Scale=1, lastD=4, shapes.X=[2, 3, 4], a=2)")  # fmt: skip
    assert "attrs.axis" not in first.values  # what `a` reads: a fourth level
    assert ExpressionCompiler({"a", "b", "c"}).compile("a if c else b", "claim").references == ("c", "a", "b")


def test_a_forced_twin_that_needs_an_absent_input_shows_the_names_the_call_holds():
    """Doc: "Forced on a call without `B`, a twin that needs it is refused with `when[4] "'B' in shapes"
    is false (with shapes=[X, Scale, Y, Mean, InvStdDev] (no B))`" and "eight variants over four binding
    sets"; "the `@binding` index of the params differs between sets"."""
    kernel = _layer_normalization()
    with pytest.raises(errors.VariantRejectedError) as info:
        kernel({"X": np.ones((2, 4), np.float32), "Scale": np.ones(4, np.float32)}, variant="row")
    assert str(info.value).endswith("""when[4] "'B' in shapes" is false (with shapes=[X, Scale, Y, Mean, InvStdDev] """
                                    """(no B))""")  # fmt: skip
    raw = kernel.manifest.raw
    assert len(raw["variants"]) == 8 and len({p["bindings"] for v in raw["variants"] for p in v["passes"]}) == 4
    params = {name: [b["name"] for b in bindings].index("params") for name, bindings in raw["bindingSets"].items()}
    assert len(set(params.values())) > 1, params


def test_explain_of_a_call_refused_lists_its_outputs_at_the_fallback_shape():
    """Doc: "ai.onnx.LayerNormalization's `axis=3` on a rank-3 `X` ... explains as `no variant applies`
    followed by `output Mean: shape [1, 1, 1] float32`, which no call returns (a call with a valid
    `axis` would give `[2, 3, 1]`, say, for `axis=2`)." """
    kernel = _layer_normalization()
    inputs = {"X": wk.TensorMeta((2, 3, 4), "float32"), "Scale": wk.TensorMeta((4,), "float32")}
    text = str(kernel.explain(inputs, attrs={"axis": 3}))
    assert "no variant applies" in text and "output Mean: shape [1, 1, 1] float32" in text
    with pytest.raises(errors.SelectionError):
        kernel({"X": np.ones((2, 3, 4), np.float32), "Scale": np.ones(4, np.float32)}, attrs={"axis": 3})
    assert "output Mean: shape [2, 3, 1] float32" in str(kernel.explain(inputs, attrs={"axis": 2}))


# --- Passes and bindings: `$name` references ------------------------------------------------------


def test_a_struct_named_through_a_constant_is_not_checked(demo):
    """Doc: "a struct the template declares is named through a constant (`"elementType": "$pair"` with
    `"pair": "'Pair'"`), which is not checked" """
    kernel = demo(lambda m: (m["constants"].__setitem__("pair", "'Pair'"),
                             m["bindingSets"]["scalarIO"][0].__setitem__("elementType", "$pair")),
                  template="// {{ bindings.x.declaration }}\n")  # fmt: skip
    assert kernel.render(X8, variant="scalar")["main"] == "// @group(0) @binding(0) var<storage, read> x: array<Pair>;\n"


def test_a_literal_element_type_must_be_a_wgsl_type_name(demo):
    """Doc: "any other string is taken literally (`"elementType": "f32"`), and must then be a WGSL scalar,
    vector, matrix, `atomic<...>` or `array<..., N>` type name (the schema's pattern)" """
    with pytest.raises(errors.ManifestError, match="elementType"):
        demo(lambda m: m["bindingSets"]["scalarIO"][0].__setitem__("elementType", "float"))


def test_length_takes_a_reference_an_expression_or_a_number(demo):
    """Doc: "`length` also takes `"$name"`, and any other string there is an expression" and "`"$name"`
    reads a constant, another string is an expression, a number is itself" """

    def change(m: dict) -> None:
        m["constants"]["L"] = "7"
        io = m["bindingSets"]["scalarIO"]
        io[0]["length"], io[1]["length"] = "$L", "numel(shapes.X) // 4"

    probe = "// {{ bindings.x.length }} {{ bindings.y.length }} {{ bindingList[2].length }}\n"
    assert demo(change, template=probe).render(X8, variant="scalar")["main"] == "// 7 2 None\n"
    kernel = demo(lambda m: m["bindingSets"]["scalarIO"][0].__setitem__("length", 5), template=probe)
    assert kernel.render(X8, variant="scalar")["main"] == "// 5 None None\n"


# --- Passes and bindings: the 16-byte padding ------------------------------------------------------

# Every invocation copies word 3 of X (past a 3-element tensor's data: its padding) into Y.
PADDING_PROBE = """{{ declarations }}
@compute @workgroup_size({{ workgroupSize }})
fn {{ entryPoint }}({{ entryParams }}) {
  let i = {{ globalIndex }};
  if (i >= arrayLength(&y)) {
    return;
  }
  y[i] = x[3u];
}
"""


def as_words(m: dict) -> None:
    for b in m["bindingSets"]["scalarIO"][:2]:
        b["elementType"] = "u32"


def test_an_inputs_padding_is_undefined_zeros_only_past_a_byte_count_not_a_multiple_of_4(demo, need_dtype):
    """Doc: "**An input's padding is undefined too**: a NumPy input is written into a pooled buffer, its
    padding left holding whatever an earlier call put there (zeros only where the tensor's byte count is
    not a multiple of 4, which the upload pads with zeros to the next 16)" and "`test` fills the pooled
    buffers with `0xFF` bytes (NaN) before a run" """
    kernel = demo(as_words, template=PADDING_PROBE)
    x = np.array([1, 2, 3], np.float32)  # 12 bytes: word 3 is padding
    poison_outputs(kernel, {"X": x})
    got = kernel({"X": x}, variant="scalar")["Y"]
    assert (got.view(np.uint32) == 0xFFFFFFFF).all()  # the fill left in the pooled buffer's padding
    need_dtype("float16")
    h = np.array([1, 2, 3], np.float16)  # 6 bytes: padded with zeros to 16
    poison_outputs(kernel, {"X": h})
    assert (kernel({"X": h}, variant="scalar")["Y"] == 0).all()


def test_test_uploads_each_input_with_its_padding_poisoned(demo, need_dtype):
    """Doc: "`test` fills the pooled buffers with `0xFF` bytes (NaN) before a run and uploads each input
    itself with its padding, up to the bound size, of `0xFF` bytes too (where a call's upload writes
    zeros)" """
    from webgpu_kernels.poisoned_buffers import padding_poisoned_inputs

    need_dtype("float16")
    kernel = demo(as_words, template=PADDING_PROBE)
    h = np.array([1, 2, 3], np.float16)
    tensors = padding_poisoned_inputs(wk.get_device(), {"X": h})
    try:
        poison_outputs(kernel, {"X": h})
        assert (kernel(dict(tensors), variant="scalar")["Y"].view(np.uint16) == 0xFFFF).all()  # word 3: padding
        assert tensors["X"].numpy().tolist() == [1, 2, 3]  # the data itself as given
    finally:
        tensors["X"].release()


def test_test_poisons_the_bound_bytes_of_an_empty_input_too() -> None:
    """The same claim for an input of no elements: its binding still binds 16 bytes, which a kernel
    that reads it unmasked reads (its upload through to_gpu had written nothing, leaving them zero)."""
    from webgpu_kernels.execution import flush
    from webgpu_kernels.poisoned_buffers import padding_poisoned_inputs

    device = wk.get_device()
    tensors = padding_poisoned_inputs(device, {"X": np.zeros((2, 0), np.float32)})
    try:
        flush(device)
        buffer = tensors["X"].buffer
        assert set(bytes(device.gpu.queue.read_buffer(buffer, 0, 16))) == {0xFF}
        assert tensors["X"].numpy().shape == (2, 0)
    finally:
        tensors["X"].release()


# --- Passes and bindings: NaN in WGSL ----------------------------------------------------------------

NAN_HEAD = ("@group(0) @binding(0) var<storage, read_write> y: array<u32>;\n"
            "@compute @workgroup_size(1) fn main() {\n")


@pytest.mark.parametrize(("body", "compiles"), [
    ("  let v = 0.0 / 0.0;\n  y[0] = bitcast<u32>(v);\n", False),
    ("  const v = bitcast<f32>(0x7fc00000u);\n  y[0] = bitcast<u32>(v);\n", False),
    ("  let v = bitcast<f32>(0x7fc00000u);\n  y[0] = bitcast<u32>(v);\n", True),  # naga's leniency
    ("  let bits = 0x7fc00000u;\n  y[0] = bitcast<u32>(bitcast<f32>(bits));\n", True),
])
def test_a_nan_const_expression_does_not_compile(body, compiles):
    """Doc: "`0.0 / 0.0` and `const nan = bitcast<f32>(0x7fc00000u);` do not compile ... (naga, wgpu's
    compiler, lets it through in a `let` ...): bitcast a runtime value, `let bits = 0x7fc00000u;` then
    `bitcast<f32>(bits)`" """
    import wgpu

    gpu = wk.get_device().gpu
    if compiles:
        gpu.create_shader_module(code=NAN_HEAD + body + "}\n")
    else:
        with pytest.raises(wgpu.GPUError):
            gpu.create_shader_module(code=NAN_HEAD + body + "}\n")


# A float bitcast of a hex literal: its bits decide whether the const-expression is NaN or infinity.
LITERAL_BITCAST = re.compile(r"bitcast<\s*(f32|f16)\s*>\(\s*0x([0-9a-fA-F]+)u?\s*\)")
NON_FINITE_MASK = {"f32": 0x7F800000, "f16": 0x7C00}


def test_no_package_bitcasts_a_literal_nan_or_infinity():
    """The same rule held over every template we ship or test: a float bitcast of a literal whose
    exponent bits are all ones (NaN, infinity) is a const-expression Tint refuses, though naga
    compiles it; such a template would fail in a browser (demo.Softmax's -inf did until session 58)."""
    from pathlib import Path

    roots = [PACKAGES_DIR, Path(wk.__file__).parent / "kernels", Path(wk.__file__).parent / "scaffold"]
    templates = [path for root in roots for path in root.rglob("*.jinja")]
    assert len(templates) > 40, templates
    found = [
        (path.name, match.group(0))
        for path in templates
        for match in LITERAL_BITCAST.finditer(path.read_text("utf-8"))
        if int(match.group(2), 16) & NON_FINITE_MASK[match.group(1)] == NON_FINITE_MASK[match.group(1)]
    ]
    assert not found, found
    assert LITERAL_BITCAST.search("var m = bitcast<f32>(0xff800000u);")  # what it would have found


def test_unpack2x16float_reads_the_low_half_as_the_even_element():
    """Doc: "the low half of a word is the element at the even index ... (`unpack2x16float` of such a
    word gives f32 NaNs, which lavapipe keeps" """
    assert np.array([0x7E003C00], np.uint32).view(np.float16)[0] == 1.0  # NumPy's order: low half first
    kernel_src = ("@group(0) @binding(0) var<storage, read_write> y: array<u32>;\n"
                  "@compute @workgroup_size(1) fn main() {\n  let w = y[0];\n  let h = unpack2x16float(w);\n"
                  "  y[1] = bitcast<u32>(h.x);\n  y[2] = bitcast<u32>(h.y);\n}\n")
    words = run_on_words(kernel_src, [0x7E003C00, 0, 0, 0])
    assert words[1].view(np.float32) == 1.0 and np.isnan(words[2].view(np.float32))


def test_float_comparisons_on_lavapipe_are_ieee_but_a_nan_is_unequal_to_nothing():
    """Doc: "On lavapipe, `<`, `==` and the others compare runtime floats as IEEE-754 does (`-0.0 == 0.0`,
    subnormals by value, infinities ordered) but for `!=`: a NaN operand makes every comparison false,
    `!=` too, so `x != x` is no NaN test" (the ai.onnx.Less author's question). Each pair's `<`, `==`
    and `!=` as bits 0, 1 and 2 of a word."""
    nan, neg_zero, tiny, inf = 0x7FC00000, 0x80000000, 0x00000001, 0x7F800000
    one = int(np.float32(1).view(np.uint32))
    pairs = [(nan, one), (one, nan), (nan, nan), (neg_zero, 0), (0, neg_zero), (0, tiny), (tiny, 0),
             (inf | 0x80000000, inf), (nan | 0x80000000, 0)]  # fmt: skip
    kernel_src = ("@group(0) @binding(0) var<storage, read_write> y: array<u32>;\n"
                  "@compute @workgroup_size(1) fn main() {\n"
                  f"  for (var i = 0u; i < {len(pairs)}u; i++) {{\n"
                  "    let a = bitcast<f32>(y[2u * i]);\n    let b = bitcast<f32>(y[2u * i + 1u]);\n"
                  f"    y[{2 * len(pairs)}u + i] = select(0u, 1u, a < b) | select(0u, 2u, a == b) | select(0u, 4u, a != b);\n"
                  "  }\n}\n")  # fmt: skip
    got = run_on_words(kernel_src, [w for pair in pairs for w in pair] + [0] * len(pairs))[2 * len(pairs):]
    values = np.array(pairs, np.uint32).view(np.float32)
    with np.errstate(invalid="ignore"):
        want = (np.less(values[:, 0], values[:, 1]) * 1 | np.equal(values[:, 0], values[:, 1]) * 2
                | np.not_equal(values[:, 0], values[:, 1]) * 4)  # fmt: skip
    if "llvmpipe" not in wk.get_device().adapter.name:
        pytest.skip("the claim is lavapipe's: WGSL's finite-math rule lets another device answer otherwise for NaN")
    unordered = np.isnan(values).any(axis=1)
    assert got[~unordered].tolist() == want[~unordered].tolist()  # -0 == +0, subnormals by value, infinities
    assert got[unordered].tolist() == [0] * int(unordered.sum())  # a NaN: `!=` false too, where IEEE says true  # NumPy as IEEE: what the doc says, spelt out


def test_lavapipe_flushes_a_subnormal_intermediate_to_zero(need_dtype):
    """Doc: "The same section lets any input or output of those operations that is subnormal be flushed
    to zero, and lavapipe does: Gelu's tanh form of float32 -10.05 is 0 there, where the value is
    -3.8e-38 (a normal float32; its intermediate `exp(-2|u|)`, 3.8e-39, is not)." """
    x = np.float64(np.float32(-10.05))
    u2 = 2 * np.sqrt(2 / np.pi) * (x + 0.044715 * x**3)
    exact = x / (1 + np.exp(-u2))
    assert -4e-38 < exact < -3.7e-38 and abs(exact) > np.finfo(np.float32).tiny > np.exp(u2)
    gelu = wk.load_kernel(PACKAGES_DIR / "ai.onnx.Gelu")
    got = float(gelu({"X": np.array([x], np.float32)}, attrs={"approximate": "tanh"})["Y"][0])
    if "llvmpipe" in wk.get_device().adapter.name:
        assert got == 0
    else:  # a device that keeps subnormals gives the value
        assert got == 0 or abs(got - exact) <= 1e-6 * abs(exact)


# --- The params uniform struct --------------------------------------------------------------------


def struct_fields(fields: list[dict]) -> Callable[[dict], None]:
    return lambda m: m["bindingSets"]["scalarIO"][2]["struct"].__setitem__("fields", fields)


@pytest.mark.parametrize("type_, value", [("u32", 2.5), ("u32", True), ("u32", "-1"), ("i32", "2**31"),
                                          ("f16", 65520), ("f32", 3.4028235677973366e38), ("mat2x2<f32>", "[[1, 2], [3, 4]]"),
                                          ("atomic<u32>", 1), ("array<vec4<f32>, 4097>", "[[0, 0, 0, 0]] * 4097")])  # fmt: skip
def test_uniform_values_and_types_refused_when_the_call_is_planned(demo, type_, value):
    """Doc: "u32 and i32 take integers in range (integral floats accepted, `2.5` and booleans refused ...);
    f32 and f16 take finite numbers that round to a finite value of the type (f16 below 65520, f32
    below 3.4028235677973366e38 ...)", "(The schema also admits matrix and atomic
    types; the layout code refuses them when the call is planned.)", "a struct of more than 65,536
    bytes ... is a `LayoutError`" """
    kernel = demo(struct_fields([{"name": "a", "type": type_, "value": value}]), template="// -\n")
    with pytest.raises(errors.LayoutError):
        kernel.render(X8, variant="scalar")


@pytest.mark.parametrize("type_, value", [("u32", "4.0"), ("f16", 65504), ("f16", -65504), ("f16", 65519.9), ("i32", "-2**31"),
                                          ("f32", 3.4028234663852886e38)])  # fmt: skip
def test_uniform_values_at_the_edges_are_accepted(demo, type_, value):
    """Doc: "integral floats accepted" and "(f16 below 65520, f32 below 3.4028235677973366e38 ...)" """
    kernel = demo(struct_fields([{"name": "a", "type": type_, "value": value}]), template="// -\n")
    assert kernel.render(X8, variant="scalar")["main"] == "// -\n"


# --- Dispatch -------------------------------------------------------------------------------------


def test_workgroup_size_defaults_to_64(demo):
    """Doc: "(`workgroupSize` defaults to `64`; missing y/z are 1)" """
    kernel = demo(lambda m: scalar_pass(m)["dispatch"].pop("workgroupSize"), template="// {{ workgroupSize }}\n")
    assert kernel.render(X8, variant="scalar")["main"] == "// 64\n"
    kernel = demo(lambda m: scalar_pass(m)["dispatch"].__setitem__("workgroupSize", [8]),
                  template="// {{ workgroupSizeX }} {{ workgroupSizeY }} {{ workgroupSizeZ }}\n")  # fmt: skip
    assert kernel.render(X8, variant="scalar")["main"] == "// 8 1 1\n"


@pytest.mark.parametrize("threads", ["10.5", "-1", "true", "'4'", "n / 3"])
def test_a_dispatch_count_must_be_a_non_negative_integer(demo, threads):
    """Doc: "the value must be a non-negative integer. An integral float is accepted ...; `10.5`, a
    negative number, a boolean or a string is an `ExpressionError` naming the expression" """
    kernel = demo(lambda m: scalar_pass(m)["dispatch"].__setitem__("threads", threads))
    with pytest.raises(errors.ExpressionError) as info:
        kernel.render(X8, variant="scalar")
    assert info.value.expression == threads
    demo(lambda m: scalar_pass(m)["dispatch"].__setitem__("threads", "n / 4")).render(X8, variant="scalar")


# --- The template contract ------------------------------------------------------------------------


def test_index_texts_for_a_two_dimensional_workgroup(demo):
    """Doc: "`workgroupSize` | text for `@workgroup_size(...)`: `"256"`, or `"8, 4, 1"` when y or z is not
    1", and the `entryParams`, `globalIndex` and `workgroupIndex` texts """
    kernel = demo(lambda m: scalar_pass(m)["dispatch"].__setitem__("workgroupSize", [8, 4]),
                  template="{{ workgroupSize }}|{{ workgroupInvocations }}|{{ globalIndex }}|{{ workgroupIndex }}|"
                           "{{ entryParams }}")  # fmt: skip
    assert kernel.render(X8, variant="scalar")["main"].split("|") == [
        "8, 4, 1", "32", "(((wid.z * nwg.y + wid.y) * nwg.x + wid.x) * 32u + lix)",
        "((wid.z * nwg.y + wid.y) * nwg.x + wid.x)",
        "@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, "
        "@builtin(local_invocation_index) lix: u32",
    ]  # fmt: skip


def test_enables_notices_f16_element_types_and_fields_but_not_vec4h(demo):
    """Doc: "`"enable f16;"` if a type variable is bound to f16, or an element type contains the text
    `f16` (`vec4h` alone is not noticed), or a uniform field is f16" """

    def element_type(name: str) -> Callable[[dict], None]:
        return lambda m: [b.__setitem__("elementType", name) for b in m["bindingSets"]["scalarIO"][:2]]

    probe = "{{ enables }}"
    assert demo(element_type("vec4h"), template=probe).render(X8, variant="scalar")["main"] == ""
    assert demo(element_type("vec4<f16>"), template=probe).render(X8, variant="scalar")["main"] == "enable f16;"
    field = struct_fields([{"name": "count", "type": "u32", "value": "n"}, {"name": "h", "type": "f16", "value": 1}])
    assert demo(field, template=probe).render(X8, variant="scalar")["main"] == "enable f16;"


def test_a_template_input_overrides_a_constant_which_constants_still_reaches(demo):
    """Doc: "a template input overrides a constant of the same name" and "`constants` | dict of the
    constants above (to reach one that a template input or a fixed name below shadows)" """
    kernel = demo(lambda m: m["constants"].update(lanes=99, entryPoint="'mine'"),
                  template="{{ lanes }} {{ constants.lanes }} {{ inputs.lanes }} {{ entryPoint }} "
                           "{{ constants.entryPoint }}")  # fmt: skip
    assert kernel.render(X8, variant="scalar")["main"] == "1 99 1 main mine"


def test_whitespace_options_of_the_template_environment(demo):
    """Doc: "`trim_blocks` and `lstrip_blocks` on (a block tag's line leaves no blank line or indentation
    behind), `keep_trailing_newline`" """
    kernel = demo(template="a\n  {% if true %}\nb\n  {% endif %}\nc\n")
    assert kernel.render(X8)["main"] == "a\nb\nc\n"


@pytest.mark.parametrize("template, error", [
    ("{{ range(100001) | length }}", errors.TemplateSandboxError), ("{{ 64.0 | wgsl_uint }}", errors.TemplateError),
    ("{{ 1 is callable }}", errors.TemplateError), ("{{ 'a' is lower }}", errors.TemplateError),
    ("{{ 'a' | capitalize }}", errors.TemplateError), ("{% extends 'x' %}", errors.TemplateSandboxError),
    ("{% for i in range(3) %}{% break %}{% endfor %}", errors.TemplateError),
    ("{% for i in range(3) %}{% do i %}{% endfor %}", errors.TemplateError),
])  # fmt: skip
def test_what_templates_refuse(demo, template, error):
    """Doc: "The only global is `range` (at most 100000 items...)", "**a float, even `64.0`, is
    refused**", "any other (`is callable`, `is lower`) is a `TemplateError`", "only these Jinja
    filters exist", "`{% extends %}` ... refused, and `{% break %}`, `{% continue %}` and `{% do %}`
    do not exist" """
    with pytest.raises(error):
        demo(template=template).render(X8)
    if "range" in template:
        assert demo(template="{{ range(100000) | length }}").render(X8)["main"] == "100000"


def test_an_included_file_sees_the_names_and_an_imported_one_only_with_context(demo):
    """Doc: "an included file sees the template's names, but an imported one ... sees them only when
    imported `with context`" """
    macro = {"c.wgsl.jinja": "{% macro m() %}{{ scalar }}{% endmacro %}{{ scalar }}"}
    assert demo(template="{% include 'c.wgsl.jinja' %}", **macro).render(X8)["main"] == "f32"
    with_context = "{% import 'c.wgsl.jinja' as c with context %}{{ c.m() }}"
    assert demo(template=with_context, **macro).render(X8)["main"] == "f32"
    with pytest.raises(errors.TemplateError, match="'scalar' is undefined"):
        demo(template="{% import 'c.wgsl.jinja' as c %}{{ c.m() }}", **macro).render(X8)


LOOPS_TEMPLATE = """{{ declarations }}

fn helperLoop(k: u32) -> f32 {
  var c = 0.0;
  for (var i = 0u; i < k; i++) {
    c += x[0];
  }
  return c;
}

@compute @workgroup_size(1)
fn main({{ entryParams }}) {
  var a = 0.0;
  for (var i = 0u; i < params.n; i++) {
    a += x[0];
  }
{% if inHelper %}
  let b = helperLoop(params.m);
{% else %}
  var b = 0.0;
  for (var j = 0u; j < params.m; j++) {
    b += x[0];
  }
{% endif %}
  y[0] = a;
  y[1] = b;
}
"""


@pytest.mark.parametrize("in_helper", [False, True], ids=["entry-point", "helper-function"])
def test_lavapipe_s_loop_cap_counts_the_loops_of_called_functions_and_each_loop_s_last_trip(write_package,
                                                                                             in_helper):  # fmt: skip
    """Doc ("Loops on lavapipe"): "The loops of the functions the entry point calls count toward the
    same cap, as if written in it, and each loop's last trip, whose test ends it, counts as an
    iteration: after a loop of 40,000, a second loop of 40,000 runs 25,534 times (65,535 - 40,001),
    and after a loop of 0 one of 65,536 runs 65,534 times". Each loop adds x[0] = 1 per iteration,
    so an output is its loop's trip count; off lavapipe no cap applies and each loop runs in full."""
    manifest = {
        "domain": "demo", "name": "Loops", "inputs": [{"role": "X", "dtype": "T"}],
        "outputs": [{"role": "Y", "dtype": "T", "rank": 1, "shape": "[2]"}],
        "attributes": {"n": 0, "m": 0}, "typeConstraints": {"T": ["float32"]},
        "constants": {"inHelper": in_helper},
        "variants": [{"id": "only", "passes": [{"id": "main", "shader": "loops.wgsl.jinja", "bindings": [
            {"name": "x", "arg": "X", "buffer": {"type": "read-only-storage"}, "elementType": "f32"},
            {"name": "y", "arg": "Y", "buffer": {"type": "storage"}, "elementType": "f32"},
            {"name": "params", "semantic": "kernel.params", "buffer": {"type": "uniform"}, "struct": {
                "name": "Params", "fields": [{"name": "n", "type": "u32", "value": "attrs.n"},
                                             {"name": "m", "type": "u32", "value": "attrs.m"}]}}],
            "dispatch": {"threads": 1, "workgroupSize": 1}}]}],
    }  # fmt: skip
    kernel = wk.load_kernel(write_package(manifest, {"loops.wgsl.jinja": LOOPS_TEMPLATE}))
    adapter = wk.get_device().adapter
    capped = "llvmpipe" in f"{adapter.name} {adapter.vendor}".lower()
    cap = 65_535
    for n, m in [(10, 10), (40_000, 40_000), (0, 65_536)]:
        second = min(m, cap - (n + 1)) if capped else m  # the first loop's n trips and its last test
        got = kernel({"X": np.ones(4, np.float32)}, attrs={"n": n, "m": m})["Y"]
        assert got.tolist() == [n, second], (n, m)


NESTED_LOOPS_TEMPLATE = """{{ declarations }}

const T: u32 = 16u;

@compute @workgroup_size(1)
fn main({{ entryParams }}) {
  var a = 0.0;
  for (var s = 0u; s < params.n; s++) {
    for (var k = 0u; k < T; k++) {
      a += x[0];
    }
  }
  y[0] = a;
}
"""


def test_lavapipe_s_loop_cap_leaves_out_an_unrolled_inner_loop_of_constant_count(write_package):
    """Doc ("Loops on lavapipe"): "a loop of a small constant count nested in a capped one,
    demo.MatMul's tiled `for (var k = 0u; k < T; k++)` with a `const T`, is unrolled, so 65,535
    outer trips of a 16-trip inner loop all run [...]; a lone loop runs 65,535 trips whole, and its
    65,536th is dropped". 5,000 x 16 = 80,000 additions pass the cap were the inner trips counted;
    off lavapipe every trip runs."""
    manifest = {
        "domain": "demo", "name": "NestedLoops", "inputs": [{"role": "X", "dtype": "T"}],
        "outputs": [{"role": "Y", "dtype": "T", "rank": 1, "shape": "[1]"}],
        "attributes": {"n": 0}, "typeConstraints": {"T": ["float32"]},
        "variants": [{"id": "only", "passes": [{"id": "main", "shader": "loops.wgsl.jinja", "bindings": [
            {"name": "x", "arg": "X", "buffer": {"type": "read-only-storage"}, "elementType": "f32"},
            {"name": "y", "arg": "Y", "buffer": {"type": "storage"}, "elementType": "f32"},
            {"name": "params", "semantic": "kernel.params", "buffer": {"type": "uniform"}, "struct": {
                "name": "Params", "fields": [{"name": "n", "type": "u32", "value": "attrs.n"}]}}],
            "dispatch": {"threads": 1, "workgroupSize": 1}}]}],
    }  # fmt: skip
    kernel = wk.load_kernel(write_package(manifest, {"loops.wgsl.jinja": NESTED_LOOPS_TEMPLATE}))
    adapter = wk.get_device().adapter
    capped = "llvmpipe" in f"{adapter.name} {adapter.vendor}".lower()
    for n in (5_000, 65_535, 65_536):
        want = 16 * (min(n, 65_535) if capped else n)
        assert kernel({"X": np.ones(4, np.float32)}, attrs={"n": n})["Y"].tolist() == [want], n


def constant_loop_trips(trips: int, statements: int, outer: int = 5_000) -> int:
    """How many trips of a constant loop of ``trips``, whose body counts them beside ``statements``
    copies of ``a = a * y[2] + (y[1] ^ (a >> 1u))``, run inside a uniform loop of ``outer`` trips."""
    body = "      a = a * y[2] + (y[1] ^ (a >> 1u));\n" * statements
    kernel_src = ("@group(0) @binding(0) var<storage, read_write> y: array<u32>;\n"
                  "@compute @workgroup_size(1) fn main() {\n  var a = 0u;\n  var n = 0u;\n"
                  "  for (var s = 0u; s < y[0]; s++) {\n"
                  f"    for (var k = 0u; k < {trips}u; k++) {{\n{body}      n += 1u;\n    }}\n  }}\n"
                  "  y[3] = n;\n  y[4] = a;\n}\n")  # fmt: skip
    return int(run_on_words(kernel_src, [outer, 1, 1, 0, 0])[3])


def test_lavapipe_unrolls_a_constant_loop_of_up_to_32_short_trips():
    """Doc ("Loops on lavapipe"): ""Small" depends on the trip count and the body: nested in a uniform
    loop of 5,000 trips, a constant loop whose body counts its trips (`n += 1u`) is unrolled up to 32
    trips and counted from 33 (61,791 of its 165,000 trips run); with 4 statements
    `a = a * y[2] + (y[1] ^ (a >> 1u))` beside the count up to 28 trips, with 16 up to 11." Were the
    inner trips counted, 5,000 outer trips of 12 or more would pass the cap; off lavapipe every trip
    runs."""
    adapter = wk.get_device().adapter
    capped = "llvmpipe" in f"{adapter.name} {adapter.vendor}".lower()
    for trips, statements, unrolled in [(32, 0, True), (33, 0, False), (28, 4, True), (29, 4, False),
                                        (11, 16, True), (12, 16, False)]:  # fmt: skip
        got = constant_loop_trips(trips, statements)
        if unrolled or not capped:
            assert got == 5_000 * trips, (trips, statements)
        else:
            assert got < 65_535, (trips, statements, got)
    if capped:
        assert constant_loop_trips(33, 0) == 61_791


# --- What makes a new pipeline --------------------------------------------------------------------


def test_each_workgroup_size_is_its_own_wgsl(demo):
    """Doc: "everything rendered into the WGSL makes one pipeline per distinct value: the dtype, the
    variant, the workgroup size" (pipelines are keyed by the rendered WGSL text) """
    kernel = demo()
    texts = {kernel.render(X8, variant="scalar", tunables={"WORKGROUP_SIZE": size})["main"] for size in (32, 64)}
    assert len(texts) == 2
    same = {kernel.render(X8, attrs={"scale": s}, variant="scalar")["main"] for s in (1.0, 2.0)}
    assert len(same) == 1  # a uniform value never changes the WGSL


def test_a_mode_baked_in_is_one_wgsl_per_mode_and_a_uniform_mode_one_for_all(demo):
    """Doc: "a constant the template branches on ... makes one pipeline per mode used ..., as each mode
    renders its own text; a uniform field (... a branch at run time) makes one pipeline for every mode" """
    def baked(m: dict) -> None:
        m["attributes"]["mode"] = "a"
        m["constants"]["modeB"] = "attrs.mode == 'b'"

    def uniform(m: dict) -> None:
        m["attributes"]["mode"] = "a"
        m["bindingSets"]["scalarIO"][2]["struct"]["fields"].append(
            {"name": "modeB", "type": "u32", "value": "1 if attrs.mode == 'b' else 0"})

    template = "{% if modeB %}b{% else %}a{% endif %}"
    texts = {demo(baked, template=template).render(X8, attrs={"mode": m}, variant="scalar")["main"] for m in "ab"}
    assert texts == {"a", "b"}
    kernel = demo(uniform)
    assert len({kernel.render(X8, attrs={"mode": m}, variant="scalar")["main"] for m in "ab"}) == 1



@pytest.mark.parametrize("size, holds", [(256, True), (1, True), (1024, True), (96, False), (2048, False)])
def test_a_power_of_two_workgroup_is_said_with_a_list(demo, size, holds):
    """Doc: "The expression language has no bitwise operators: a kernel whose tree reduction needs a
    power-of-two workgroup says so with a list, `"tunables.WORKGROUP_SIZE in [1, 2, 4, ..., 1024]"`" """
    rule = "tunables.WORKGROUP_SIZE in [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024]"
    kernel = demo()
    assert kernel.evaluate(rule, X8, tunables={"WORKGROUP_SIZE": size}) is holds
    with pytest.raises(errors.ExpressionError):
        kernel.evaluate("tunables.WORKGROUP_SIZE & 255", X8)  # no bitwise operator to say it otherwise


def test_inputs_that_do_not_broadcast_into_an_output_shape_are_the_calls_shape_error():
    """format.md's broadcastShape row: in an output's `shape` it is the call's ShapeError, in the
    words quoted there (a test.json refusal case had copied the BroadcastError text, and failed)."""
    add = wk.load_kernel(PACKAGES_DIR / "ai.onnx.Add")
    with pytest.raises(wk.ShapeError) as refused:
        add({"A": np.zeros((2, 3), np.float32), "B": np.zeros(4, np.float32)})
    assert not isinstance(refused.value, errors.BroadcastError)
    assert ("expected shapes that broadcast together (outputs[0].shape: broadcastShape(shapes.A, shapes.B)), "
            "got [2, 3], [4]: sizes 3 and 4 at axis -1 (counted from the last)") in str(refused.value)


def test_broadcast_strides_reach_the_uniform_struct_as_two_vec4_sliced_from_a_padded_tuple(write_package):
    """Doc: strides for the uniform struct, "a derive entry padded to a multiple of 4 ... given to a field
    of type `array<vec4<u32>, 2>` as `"value": "[sa8[0:4], sa8[4:8]]"` ... `array<u32, 8>` is refused ...
    a slice of a tuple is a tuple, which a vector takes as it takes a list" """
    from test_layout import layout_package, run_layout

    sa8 = "((0,) * 5 + broadcastStrides([3, 1], [2, 3, 4]))"  # rank 3 padded to 8: (0, 0, 0, 0, 0, 0, 1, 0)
    reads = [f"params.w[{i // 4}][{i % 4}]" for i in range(8)]
    fields = [{"name": "w", "type": "array<vec4<u32>, 2>", "value": f"[{sa8}[0:4], {sa8}[4:8]]"}]
    assert run_layout(layout_package(write_package, fields, reads)) == [0, 0, 0, 0, 0, 0, 1, 0]
    flat = [{"name": "w", "type": "array<u32, 8>", "value": sa8}]
    with pytest.raises(errors.LayoutError):
        run_layout(layout_package(write_package, flat, ["params.w[6]"]))


def test_bool_bytes_reach_the_shader_as_they_are():
    """Doc: "A `bool` tensor from NumPy may hold other bytes than 0 and 1 ...: the engine passes its bytes as
    they are, so a shader that reads one should take any nonzero byte as true" (ai.onnx.Cast does)."""
    from webgpu_kernels.execution import flush, to_gpu

    raw = np.array([0, 2, 255, 1, 0, 128], np.uint8)
    device = wk.get_device()
    tensor = to_gpu(device, raw.view(np.bool_))
    try:
        flush(device)
        assert bytes(device.gpu.queue.read_buffer(tensor.buffer, 0, 8))[:6] == raw.tobytes()
    finally:
        tensor.release()
    cast = wk.load_kernel(PACKAGES_DIR / "ai.onnx.Cast")
    got = cast({"input": raw.view(np.bool_)}, attrs={"to": 1})["output"]
    assert got.tolist() == [0.0, 1.0, 1.0, 1.0, 0.0, 1.0]


def test_a_variadic_onnx_output_is_one_role_per_position_matched_by_order():
    """Doc ("Name the roles after the ONNX op's formal names"): "A variadic input or output ... declare
    one role per position ... (`tests/packages/ai.onnx.Split`: `outputs_0` to `outputs_3` ...); those
    roles are no formal names, so `run` places them by the manifest's order" """
    pytest.importorskip("onnxruntime")
    from click.testing import CliRunner

    from webgpu_kernels.cli import main

    result = CliRunner().invoke(main, ["run", str(PACKAGES_DIR / "ai.onnx.Split"), "-i", "input=2x7x6:f32",
                                       "--attr", "axis=-1", "--attr", "num_outputs=3", "--json"])  # fmt: skip
    assert result.exit_code == 0, result.output
    report = __import__('json').loads(result.stdout)
    assert report["onnxruntimeMatchedBy"] == "position", report
    text = CliRunner().invoke(main, ["run", str(PACKAGES_DIR / "ai.onnx.Split"), "-i", "input=2x7x6:f32",
                                     "--attr", "axis=-1", "--attr", "num_outputs=3"]).output  # fmt: skip
    for role in ("outputs_0", "outputs_1", "outputs_2"):
        assert f"error vs ONNX Runtime CPU ({role}): max abs 0.000e+00" in text, text
    assert "not compared: outputs_3: not produced by variant split3" in text


def test_an_unbound_optional_outputs_shape_is_still_evaluated(tmp_path):
    """Doc: "Its `rank` and `shape` are still evaluated for every call, before selection ... an error
    in one is the call's `ExpressionError` (`outputs[3].shape: ...`), whichever variant would run" """
    import json as json_
    import shutil

    root = tmp_path / "split"
    shutil.copytree(PACKAGES_DIR / "ai.onnx.Split", root)
    (root / "metadata.json").unlink()
    manifest = json_.loads((root / "manifest.json").read_text("utf-8"))
    (last,) = [o for o in manifest["outputs"] if o["role"] == "outputs_3"]
    assert last["optional"]
    inputs, attrs = {"input": np.arange(12, dtype=np.float32).reshape(2, 6)}, {"axis": 1, "num_outputs": 2}
    assert sorted(wk.load_kernel(root)(inputs, attrs=attrs)) == ["outputs_0", "outputs_1"]
    last["shape"] = "[1 // 0]"
    (root / "manifest.json").write_text(json_.dumps(manifest), "utf-8")
    with pytest.raises(errors.ExpressionError, match=r"outputs\[3\]\.shape"):
        wk.load_kernel(root)(inputs, attrs=attrs)



def test_a_bool_output_byte_of_2_reaches_the_caller_as_written(tmp_path):
    """Doc: "the engine returns them as they are, so a byte of 2 reaches the caller in a `bool` array
    that NumPy's operations take as `True`, but whose bytes (`.tobytes()`, `.view(np.uint8)`) hold 2, as
    does the buffer a chained call reads" (ai.onnx.Less with a word's first true written as 2, its
    metadata.json dropped)."""
    import shutil

    folder = Path(shutil.copytree(PACKAGES_DIR / "ai.onnx.Less", tmp_path / "less"))
    template = folder / "less.wgsl.jinja"
    text = template.read_text("utf-8")
    assert "select(0u, 1u, r0)" in text
    template.write_text(text.replace("select(0u, 1u, r0)", "select(0u, 2u, r0)"), "utf-8")
    (folder / "metadata.json").unlink()
    less = wk.load_kernel(folder)
    got = less({"A": np.array([0, 5, 0, 5], np.int32), "B": np.array([1, 1, 1, 1], np.int32)})["C"]
    assert got.dtype == np.bool_ and got.view(np.uint8).tolist() == [2, 0, 1, 0]  # a word's first element: 2
    assert got.tolist() == [True, False, True, False] and (got == np.array([1, 0, 1, 0], bool)).all()
    assert got.sum() == 2 and (~got).tolist() == [False, True, False, True]  # NumPy takes 2 as True
    on_gpu = less({"A": np.array([0, 5, 0, 5], np.int32), "B": np.array([1, 1, 1, 1], np.int32)}, output="gpu")["C"]
    assert on_gpu.numpy().tobytes() == bytes([2, 0, 1, 0])
