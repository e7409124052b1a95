"""Variant selection: highest priority whose `when` clauses all hold, ties by declaration order;
forcing; the trace (clause text, index and the values it read); explain() on the seed kernels."""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest

import webgpu_kernels as wk
from webgpu_kernels.contract import check_call
from webgpu_kernels.errors import SelectionError, VariantRejectedError
from webgpu_kernels.manifest import parse_manifest
from webgpu_kernels.program import DeviceInfo, compile_program
from webgpu_kernels.selection import ranked, require_choice, select_variant

from conftest import bind_outputs  # noqa: E402

LIMITS = {"maxComputeWorkgroupSizeX": 256, "maxComputeInvocationsPerWorkgroup": 256,
          "maxComputeWorkgroupsPerDimension": 65535}  # fmt: skip
F16_DEVICE = DeviceInfo(limits=LIMITS, features=frozenset({"shader-f16"}))
NO_F16_DEVICE = DeviceInfo(limits=LIMITS, features=frozenset())

PASS = {
    "id": "main", "shader": "s.wgsl.jinja",
    "bindings": [{"name": "x", "arg": "X", "buffer": {"type": "read-only-storage"}, "elementType": "f32"}],
    "dispatch": {"threads": 1},
}  # fmt: skip


def variant(vid, priority=None, when=None, constants=None):
    v = {"id": vid, "passes": [PASS]}
    if priority is not None:
        v["priority"] = priority
    if when is not None:
        v["when"] = when
    if constants is not None:
        v["constants"] = constants
    return v


def program_of(variants, derive=None, constants=None):
    data = {
        "domain": "test", "name": "Sel",
        "inputs": [{"role": "X", "dtype": "T"}],
        "outputs": [{"role": "Y", "dtype": "T", "rank": "ranks.X", "shape": "shapes.X"}],
        "typeConstraints": {"T": ["float32", "float16"]},
        "tunables": {"TILE": 4},
        "variants": variants,
    }  # fmt: skip
    if derive:
        data["derive"] = derive
    if constants:
        data["constants"] = constants
    manifest = parse_manifest(bind_outputs(data))
    return manifest, compile_program(manifest)


def select(variants, shape, dtype="float32", *, derive=None, constants=None, device=F16_DEVICE, **kwargs):
    manifest, program = program_of(variants, derive, constants)
    scope, _ = program.call_scope(check_call(manifest, {"X": (shape, dtype)}, None, None), device)
    return select_variant(program.variants, scope, **kwargs)


def chosen(selection):
    return selection.chosen.variant.id if selection.chosen else None


# --- the rule -----------------------------------------------------------------------------------

RULE = [
    variant("fallback", 0, ["true"]),
    variant("quad", 10, ["numel(shapes.X) > 0", "numel(shapes.X) % 4 == 0"]),
    variant("nonempty", 5, ["numel(shapes.X) > 0"]),
    variant("huge", 100, ["numel(shapes.X) > 1000000"]),
]


@pytest.mark.parametrize("shape, expected", [((8,), "quad"), ((2, 6), "quad"), ((5,), "nonempty"), ((), "nonempty"),
                                             ((0,), "fallback"), ((3, 0), "fallback")])  # fmt: skip
def test_highest_applicable_priority_wins(shape, expected):
    assert chosen(select(RULE, shape)) == expected


@pytest.mark.parametrize("order", list(itertools.permutations(range(4))))
def test_declaration_order_does_not_matter_between_priorities(order):
    variants = [RULE[i] for i in order]
    assert [chosen(select(variants, s)) for s in [(8,), (5,), (0,)]] == ["quad", "nonempty", "fallback"]


def test_ties_go_to_the_first_declared():
    a, b = variant("a", 5, ["true"]), variant("b", 5, ["true"])
    assert chosen(select([a, b], (4,))) == "a"
    assert chosen(select([b, a], (4,))) == "b"
    # 5 and 5.0 are the same priority
    c = variant("c", 5.0, [])
    assert chosen(select([c, a, b], (4,))) == "c"
    # a tie among applicable ones only: the first declared that applies
    blocked = variant("blocked", 5, ["false"])
    assert chosen(select([blocked, b, a], (4,))) == "b"


def test_fractional_negative_and_default_priorities():
    variants = [variant("neg", -1), variant("default"), variant("half", 0.5, ["numel(shapes.X) > 3"])]
    assert chosen(select(variants, (4,))) == "half"
    assert chosen(select(variants, (2,))) == "default"  # priority defaults to 0, above -1
    assert chosen(select([variant("neg", -1), variant("neg2", -2)], (2,))) == "neg"


def test_ranked_order():
    _, program = program_of([variant("a", 1), variant("b", 3), variant("c", 1), variant("d", 2)])
    assert [cv.variant.id for cv in ranked(program.variants)] == ["b", "d", "a", "c"]


def test_empty_when_always_holds_and_literal_false_never():
    assert chosen(select([variant("never", 9, [False]), variant("always", 0, [])], (1,))) == "always"
    assert chosen(select([variant("never", 9, ["0"]), variant("always", 0)], (1,))) == "always"  # truthiness


def test_no_applicable_variant():
    selection = select([variant("a", 1, ["false"]), variant("b", 0, ["ranks.X == 7"])], (3,))
    assert selection.chosen is None
    with pytest.raises(SelectionError) as info:
        require_choice(selection, "test.Sel")
    message = str(info.value)
    assert "test.Sel" in message and "'false'" in message and "'ranks.X == 7'" in message and "ranks.X=1" in message
    assert [v.variant for v in info.value.trace] == ["a", "b"]


# --- the trace ----------------------------------------------------------------------------------


def test_trace_names_the_first_failing_clause_and_its_values():
    selection = select(RULE, (5,), exhaustive=True)
    trace = {v.variant: v for v in selection.trace}
    assert [v.variant for v in selection.trace] == ["huge", "quad", "nonempty", "fallback"]  # priority order
    huge = trace["huge"]
    assert not huge.accepted and huge.clause == "numel(shapes.X) > 1000000" and huge.clause_index == 0
    assert huge.values == {"shapes.X": (5,)}
    quad = trace["quad"]
    assert (quad.clause, quad.clause_index, quad.error) == ("numel(shapes.X) % 4 == 0", 1, None)
    assert "when[1] 'numel(shapes.X) % 4 == 0' is false" in quad.reason() and "shapes.X=[5]" in quad.reason()
    assert trace["nonempty"].accepted and trace["fallback"].accepted
    assert trace["nonempty"].reason() == "accepted"


def test_non_exhaustive_stops_at_the_chosen_variant():
    selection = select(RULE, (8,))
    assert [v.variant for v in selection.trace] == ["huge", "quad"]


def test_a_clause_that_fails_to_evaluate_rejects_with_the_error():
    variants = [variant("deep", 10, ["dim(shapes.X, 3) > 0"]), variant("flat", 0)]
    selection = select(variants, (4,), exhaustive=True)
    assert chosen(selection) == "flat"
    deep = selection.trace[0]
    assert not deep.accepted and deep.clause == "dim(shapes.X, 3) > 0"
    assert "out of range" in deep.error and "failed:" in deep.reason()


@pytest.mark.parametrize("clause, shown", [
    ("'false'", "must be true or false, got str 'false'"), ("[1, 2]", "must be true or false, got list [1, 2]"),
    ("numel(shapes.X)", "must be true or false, got int 4"), ("dim", "a function is not a value"),
])  # fmt: skip
def test_a_clause_that_is_not_true_or_false_rejects_with_the_reason(clause, shown):
    """Truthiness would select a variant on "'false'"; a clause is true or false, or the variant is
    rejected with what it was (a function is refused when evaluated)."""
    selection = select([variant("odd", 10, [clause]), variant("flat", 0)], (4,), exhaustive=True)
    assert chosen(selection) == "flat"
    odd = selection.trace[0]
    assert not odd.accepted and shown in (odd.error or "")


def test_variant_constants_override_top_level_ones_in_their_own_scope_only():
    variants = [
        variant("wide", 10, ["width == 8"], constants={"width": 8}),
        variant("narrow", 5, ["width == 4"]),
    ]
    assert chosen(select(variants, (1,), constants={"width": 4}, exhaustive=True)) == "wide"
    selection = select(variants, (1,), constants={"width": 4}, exhaustive=True)
    assert all(v.accepted for v in selection.trace)  # narrow still sees the top-level 4
    assert selection.scope["width"] == 8


def test_derive_entries_see_earlier_ones():
    derive = {"n": "numel(shapes.X)", "quads": "n // 4", "ok": "quads > 1 and n % 4 == 0"}
    variants = [variant("v", 1, ["ok"]), variant("s")]
    assert chosen(select(variants, (12,), derive=derive)) == "v"
    assert chosen(select(variants, (4,), derive=derive)) == "s"
    selection = select(variants, (12,), derive=derive)
    assert (selection.scope["n"], selection.scope["quads"]) == (12, 3)


def test_a_failed_derive_rejects_only_the_variants_that_use_it():
    derive = {"last": "dim(shapes.X, 2)"}
    variants = [variant("uses", 10, ["last % 4 == 0"]), variant("plain")]
    selection = select(variants, (4,), derive=derive, exhaustive=True)
    assert chosen(selection) == "plain"
    assert "out of range" in selection.trace[0].error
    assert chosen(select(variants, (1, 1, 8), derive=derive)) == "uses"


def test_f16ok_depends_on_the_device():
    variants = [variant("gpu16", 1, ["f16Ok(dtypes.T)"]), variant("none", 0, ["false"])]
    assert chosen(select(variants, (4,), "float16", device=F16_DEVICE)) == "gpu16"
    assert chosen(select(variants, (4,), "float32", device=NO_F16_DEVICE)) == "gpu16"
    selection = select(variants, (4,), "float16", device=NO_F16_DEVICE, exhaustive=True)
    assert selection.chosen is None
    assert selection.trace[0].clause == "f16Ok(dtypes.T)" and selection.trace[0].values == {"dtypes.T": "f16"}


# --- forcing ------------------------------------------------------------------------------------


def test_forcing_a_lower_priority_variant():
    selection = select(RULE, (8,), forced="fallback")
    assert chosen(selection) == "fallback" and [v.variant for v in selection.trace] == ["fallback"]


def test_forcing_a_variant_whose_when_fails_names_the_clause():
    with pytest.raises(VariantRejectedError) as info:
        select(RULE, (6,), forced="quad")
    error = info.value
    assert error.variant == "quad" and error.clause == "numel(shapes.X) % 4 == 0"
    assert "'quad'" in str(error) and "numel(shapes.X) % 4 == 0" in str(error) and "shapes.X=[6]" in str(error)
    assert isinstance(error, SelectionError) and isinstance(error, wk.KernelError)


def test_forcing_an_unknown_variant_lists_the_variants():
    with pytest.raises(SelectionError) as info:
        select(RULE, (6,), forced="nope")
    assert not isinstance(info.value, VariantRejectedError)
    assert "'nope'" in str(info.value) and all(v["id"] in str(info.value) for v in RULE)


# --- explain() on the seed kernels --------------------------------------------------------------


@pytest.mark.parametrize(
    "shape, chosen_id, rejected",
    [
        ((8,), "vec4", {}),
        ((2, 6), "vec4", {}),
        # A derive name in a clause is traced with what it read (vec4Ok reads shapes.X).
        ((2, 3), "vec4_tail", {"vec4": ("vec4Ok", 1, {"vec4Ok": False, "shapes.X": (2, 3)})}),
        ((5,), "vec4_tail", {"vec4": ("vec4Ok", 1, {"vec4Ok": False, "shapes.X": (5,)})}),
        ((0,), "scalar", {"vec4": ("vec4Ok", 1, {"vec4Ok": False, "shapes.X": (0,)}),
                          "vec4_tail": ("numel(shapes.X) > 0", 1, {"shapes.X": (0,)})}),
    ],
)  # fmt: skip
def test_explain_quick_gelu(quick_gelu, shape, chosen_id, rejected):
    explanation = quick_gelu.explain({"X": np.zeros(shape, np.float32)})
    assert explanation.chosen == chosen_id
    assert [v.variant for v in explanation.verdicts] == ["vec4", "vec4_tail", "scalar"]
    for verdict in explanation.verdicts:
        if verdict.variant in rejected:
            clause, index, values = rejected[verdict.variant]
            assert not verdict.accepted
            assert (verdict.clause, verdict.clause_index) == (clause, index)
            assert {k: tuple(v) if isinstance(v, list) else v for k, v in verdict.values.items()} == values
        else:
            assert verdict.accepted
    assert explanation.outputs[0].shape == shape and explanation.outputs[0].dtype == "float32"
    text = str(explanation)
    assert chosen_id in text and all(clause in text for clause, _, _ in rejected.values())
    json.dumps(explanation.as_dict())  # JSON-ready


def test_explain_values_include_derive_entries(quick_gelu):
    explanation = quick_gelu.explain({"X": wk.TensorMeta((4, 4), "float16")}, tunables={"WORKGROUP_SIZE": 64})
    values = explanation.values
    assert values["workgroupOk"] is True and values["vec4Ok"] is True and values["baseOk"] is True
    assert values["deviceWorkgroupCap"] >= 64


def test_explain_workgroup_too_large_rejects_every_variant(quick_gelu):
    cap = wk.get_device().info.limits["maxComputeInvocationsPerWorkgroup"]
    explanation = quick_gelu.explain({"X": ((8,), "float32")}, tunables={"WORKGROUP_SIZE": cap * 2})
    assert explanation.chosen is None
    # The trace shows what baseOk was made of, down to the tunable and the device's cap.
    assert all(v.clause == "baseOk" and v.values["baseOk"] is False and v.values["workgroupOk"] is False
               and v.values["tunables.WORKGROUP_SIZE"] == cap * 2 and v.values["deviceWorkgroupCap"] <= cap
               for v in explanation.verdicts)  # fmt: skip
    assert "no variant applies" in str(explanation)


def test_explain_bias_add(bias_add):
    inputs = {"X": ((2, 2, 6), "float16"), "bias": ((6,), "float16"), "skip": ((2, 2, 6), "float16")}
    explanation = bias_add.explain(inputs)
    assert explanation.chosen == "scalar"
    vec4 = explanation.verdicts[0]
    assert vec4.variant == "vec4" and vec4.clause == "dim(shapes.X, 2) % 4 == 0" and vec4.clause_index == 10
    assert tuple(vec4.values["shapes.X"]) == (2, 2, 6)
    assert explanation.values["hidden"] == 6 and explanation.values["scalar"] == "f16"


def test_explain_bias_length_mismatch(bias_add):
    inputs = {"X": ((1, 2, 8), "float32"), "bias": ((4,), "float32"), "skip": ((1, 2, 8), "float32")}
    explanation = bias_add.explain(inputs)
    assert explanation.chosen is None
    assert {v.clause for v in explanation.verdicts} == {"dim(shapes.bias, 0) == dim(shapes.X, 2)"}


@pytest.mark.parametrize("shape", [(8,), (5,), (0,)])
def test_explain_of_a_forced_variant_says_what_the_call_does(quick_gelu, shape):
    """explain() took no variant=, while a call can force one: it now explains that call, agreeing
    with it variant by variant: the forced one chosen if its `when` holds (whatever its priority),
    else no variant chosen and `refused` the call's VariantRejectedError."""
    x = np.linspace(-1, 1, int(np.prod(shape)), dtype=np.float32).reshape(shape)
    unforced = quick_gelu.explain({"X": x})
    for variant in quick_gelu.variants:
        explanation = quick_gelu.explain({"X": wk.TensorMeta(shape, "float32")}, variant=variant)
        assert explanation.forced == variant and explanation.verdicts == unforced.verdicts  # every variant judged
        accepted = next(v for v in explanation.verdicts if v.variant == variant).accepted
        try:
            quick_gelu({"X": x}, variant=variant)
        except VariantRejectedError as exc:
            assert not accepted and explanation.chosen is None and explanation.refused == str(exc)
            assert str(explanation).startswith(f"com.microsoft.QuickGelu: forced variant '{variant}' rejected")
            assert f"the call fails: variant '{variant}' cannot run this call: when[" in str(explanation)
        else:
            assert accepted and explanation.chosen == variant and explanation.refused is None
            assert quick_gelu.plan({"X": x}, variant=variant)[1].variant == variant
            assert str(explanation).startswith(f"com.microsoft.QuickGelu: chosen variant '{variant}' (forced)")
            assert f"  * {variant} (priority" in str(explanation)
        assert json.loads(json.dumps(explanation.as_dict()))["forced"] == variant
    assert unforced.forced is None and unforced.as_dict()["forced"] is None


def test_explain_of_a_forced_variant_the_device_refuses_says_why(quick_gelu):
    """A forced variant whose `when` holds but whose call fails on the device's limits is chosen,
    with the call's error in `refused`, as explain says for the variant selection picks."""
    metas = {"X": wk.TensorMeta((2**30,), "float32")}  # 4 GiB: past any buffer lavapipe allows
    with pytest.raises(wk.DeviceLimitError) as info:
        quick_gelu.plan(metas, variant="scalar")
    explanation = quick_gelu.explain(metas, variant="scalar")
    assert explanation.chosen == "scalar" and explanation.refused == str(info.value)
    assert "but the call would fail" in str(explanation)


def test_explain_refuses_a_variant_argument_as_the_call_does(quick_gelu):
    metas = {"X": wk.TensorMeta((8,), "float32")}
    with pytest.raises(SelectionError) as called:
        quick_gelu({"X": np.zeros(8, np.float32)}, variant="vec8")
    with pytest.raises(SelectionError) as explained:
        quick_gelu.explain(metas, variant="vec8")
    assert str(explained.value) == str(called.value) == ("no variant 'vec8' (did you mean 'vec4'?); the variants are "
                                                         "vec4, vec4_tail, scalar")  # fmt: skip
    assert not isinstance(explained.value, VariantRejectedError)  # raised, not reported as the call's failure
    with pytest.raises(SelectionError, match=r"^no variant 'scalr' \(did you mean 'scalar'\?\); the variants are vec4"):
        quick_gelu.explain(metas, variant="scalr")  # a misspelt id names the one meant
    with pytest.raises(wk.InputError, match="argument 'variant': expected a variant id") as info:
        quick_gelu.explain(metas, variant=["vec4"])
    assert info.value.argument == "variant"


def test_the_trace_shows_a_variant_constant_that_shadows_a_top_level_one():
    """`ok` is top-level (`tunables.TILE > 0`) and the variant's own (`n % 3 == 0`): the trace showed
    the top-level definition's names (tunables.TILE=4), not what the clause read (n=8)."""
    manifest, program = program_of([variant("thirds", 10, ["ok"], {"ok": "n % 3 == 0"}), variant("flat", 0)],
                                   {"n": "numel(shapes.X)"}, {"ok": "tunables.TILE > 0"})  # fmt: skip
    scope, _ = program.call_scope(check_call(manifest, {"X": ((8,), "float32")}, None, None), F16_DEVICE)
    selection = select_variant(program.variants, scope, exhaustive=True, definitions=program.definitions)
    thirds = selection.trace[0]
    assert not thirds.accepted and thirds.values == {"ok": False, "n": 8, "shapes.X": (8,)}, thirds.values


def test_a_namespace_read_whole_is_traced_with_all_its_names():
    """`'beta' in shapes` showed shapes=['input', 'skip', 'gamma', ... cut at 60 characters, so
    the name the clause asks about could be cut off (an author's trial)."""
    from webgpu_kernels.expressions import ExpressionCompiler
    from webgpu_kernels.selection import Verdict

    names = ["input", "skip", "gamma", "output", "mean", "inv_std_var", "input_skip_bias_sum", "beta"]
    seen = ExpressionCompiler(()).compile("'beta' in shapes", "when[0]").peek({"shapes": dict.fromkeys(names)})
    verdict = Verdict("row", 0, False, clause="'beta' in shapes", clause_index=0, values=seen)
    assert "shapes=[input, skip, gamma, output, mean, inv_std_var, input_skip_bias_sum, beta])" in verdict.reason()
    # a list of strings that is a value, not a namespace's names, keeps its quotes
    value = Verdict("row", 0, False, clause="mode in ['', 'a, b']", clause_index=0, values={"modes": ["", "a, b"]})
    assert "modes=['', 'a, b']" in value.reason()


def test_a_heavy_value_is_traced_without_building_its_repr():
    """A clause's values were repr()'d whole and cut to 60 characters: a derive entry of 4095
    references to a 4096-character string (within every bound) built 16 MiB per verdict shown."""
    import tracemalloc

    from webgpu_kernels.selection import Verdict

    verdict = Verdict("v", 0, False, clause="d == 0", clause_index=0, values={"d": ["x" * 4096] * 4095})
    tracemalloc.start()
    try:
        reason = verdict.reason()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert "(with d=['xxx" in reason and len(reason) < 120, f"{len(reason)} characters"
    assert peak < 2**20, f"{peak / 2**20:.0f} MiB allocated for a 60-character quote"


# --- the variants an f16 device would run ---------------------------------------------------------


def test_accepted_with_f16_names_the_variants_a_device_with_shader_f16_would_accept():
    """On a device without shader-f16, an f16Ok guard's rejection is the adapter's, not the call's:
    `test` skips and `validate` passes over exactly the variants this names (lavapipe has f16, so
    no GPU test reaches it)."""
    from webgpu_kernels.selection import accepted_with_f16

    variants = [variant("gpu16", 10, ["f16Ok(dtypes.T)"]),
                variant("quad16", 5, ["f16Ok(dtypes.T)", "numel(shapes.X) % 4 == 0"]),
                variant("never", 1, ["false"])]  # fmt: skip
    manifest, program = program_of(variants)
    for shape, expected in [((4,), {"gpu16", "quad16"}), ((6,), {"gpu16"})]:
        signature = check_call(manifest, {"X": (shape, "float16")}, None, None)
        scope, _ = program.call_scope(signature, NO_F16_DEVICE)
        assert select_variant(program.variants, scope).chosen is None
        assert accepted_with_f16(program, signature, NO_F16_DEVICE) == expected
        assert accepted_with_f16(program, signature, F16_DEVICE) == expected
    signature = check_call(manifest, {"X": ((4,), "float32")}, None, None)
    assert accepted_with_f16(program, signature, NO_F16_DEVICE) == {"gpu16", "quad16"}  # f32 needs no f16


def test_accepted_with_f16_is_empty_where_the_call_fails_with_f16_too():
    from webgpu_kernels.selection import accepted_with_f16

    data = bind_outputs({
        "domain": "test", "name": "Sel", "inputs": [{"role": "X", "dtype": "T"}],
        "outputs": [{"role": "Y", "dtype": "T", "rank": 1, "shape": "[dim(shapes.X, 3)]"}],
        "typeConstraints": {"T": ["float32", "float16"]}, "variants": [variant("gpu16", 1, ["f16Ok(dtypes.T)"])],
    })  # fmt: skip
    manifest = parse_manifest(data)
    program = compile_program(manifest)
    signature = check_call(manifest, {"X": ((4,), "float16")}, None, None)
    with pytest.raises(wk.KernelError, match="out of range"):  # what the call itself raises
        program.call_scope(signature, F16_DEVICE)
    assert accepted_with_f16(program, signature, NO_F16_DEVICE) == frozenset()


# --- a call whose attributes alone leave no variant ------------------------------------------------

MODES = {"modeOk": "attrs.mode in ['a', 'b']"}


def attributed(variants, attrs, *, derive=None, constants=None, device=F16_DEVICE):
    """The SelectionError of a call of a manifest with attributes ``mode`` and ``k``."""
    data = {
        "domain": "test", "name": "Sel",
        "inputs": [{"role": "X", "dtype": "T"}],
        "outputs": [{"role": "Y", "dtype": "T", "rank": "ranks.X", "shape": "shapes.X"}],
        "typeConstraints": {"T": ["float32", "float16"]},
        "attributes": {"mode": "a", "k": 1},
        "tunables": {"TILE": 4},
        "derive": derive or {},
        "constants": constants or {},
        "variants": variants,
    }  # fmt: skip
    manifest = parse_manifest(bind_outputs(data))
    program = compile_program(manifest)
    scope, _ = program.call_scope(check_call(manifest, {"X": ((3,), "float32")}, attrs, None), device)
    selection = select_variant(program.variants, scope, definitions=program.definitions)
    with pytest.raises(SelectionError) as info:
        require_choice(selection, "test.Sel", defaults=manifest.attributes)
    return info.value


def test_a_call_its_attributes_alone_refuse_names_them_in_the_headline():
    # through a derive entry, a variant constant and a literal constant: each reads only attributes
    error = attributed([variant("fast", 5, ["modeOk", "numel(shapes.X) > 0"]),
                        variant("slow", 0, ["modeIsA or small"], constants={"modeIsA": "attrs.mode == 'a'"})],
                       {"mode": "exact"}, derive=MODES, constants={"small": False})  # fmt: skip
    headline, *lines = str(error).splitlines()
    assert headline == "test.Sel: no variant accepts attribute mode='exact':"
    assert lines == ["  fast: when[0] 'modeOk' is false (with modeOk=False, attrs.mode='exact')",
                     "  slow: when[0] 'modeIsA or small' is false (with modeIsA=False, small=False, attrs.mode='exact')"]
    assert type(error) is SelectionError and error.attributes == ("mode",)
    assert [v.variant for v in error.trace] == ["fast", "slow"]
    # two attributes, each variant refusing on its own: both named, in the order first read
    error = attributed([variant("fast", 5, ["modeOk"]), variant("slow", 0, ["attrs.k < 1"])],
                       {"mode": "c", "k": 7}, derive=MODES)  # fmt: skip
    assert str(error).splitlines()[0] == "test.Sel: no variant accepts attributes mode='c', k=7:"
    assert error.attributes == ("mode", "k")


def test_a_variant_refused_for_an_asked_output_keeps_the_plain_headline():
    """outputs=: a variant that writes no asked optional output is refused before its `when`, on no
    attribute; where another is refused by an attribute alone, the headline must not blame the
    attribute (changing it would not make the first variant write the output)."""
    def writing(*roles):  # bind_outputs would bind Z in every pass
        return {**PASS, "bindings": [*PASS["bindings"], *({"name": r.lower(), "arg": r, "buffer": {"type": "storage"},
                                                           "elementType": "f32"} for r in roles)]}  # fmt: skip
    data = {
        "domain": "test", "name": "Sel", "inputs": [{"role": "X", "dtype": "T"}],
        "outputs": [{"role": "Y", "dtype": "T", "rank": "ranks.X", "shape": "shapes.X"},
                    {"role": "Z", "dtype": "T", "rank": "ranks.X", "shape": "shapes.X", "optional": True}],
        "typeConstraints": {"T": ["float32"]}, "attributes": {"mode": "a"},
        "variants": [{"id": "lean", "priority": 5, "passes": [writing("Y")]},
                     {"id": "stats", "when": ["attrs.mode == 'a'"], "passes": [writing("Y", "Z")]}],
    }  # fmt: skip
    manifest = parse_manifest(data)
    program = compile_program(manifest)
    scope, _ = program.call_scope(check_call(manifest, {"X": ((3,), "float32")}, {"mode": "b"}, None), F16_DEVICE)
    selection = select_variant(program.variants, scope, definitions=program.definitions, asked=frozenset({"Y", "Z"}),
                               optional=("Z",))  # fmt: skip
    assert [(v.variant, v.lacks, v.attributes) for v in selection.trace] == [
        ("lean", ("Z",), {}), ("stats", (), {"mode": "b"})]
    with pytest.raises(SelectionError) as info:
        require_choice(selection, "test.Sel")
    assert str(info.value).splitlines()[0] == "test.Sel: no variant can run this call:" and info.value.attributes == ()
    assert "lean: does not write Z, which the call asks for (outputs=)" in str(info.value)


@pytest.mark.parametrize("when, derive, constants, device", [
    # a clause that reads a shape, directly or through derive entries deeper than the trace shows
    (["numel(shapes.X) > 5"], {}, {}, F16_DEVICE),
    (["ranks.X > 3"], {}, {}, F16_DEVICE),
    # a device function, a device limit, a tunable, a dtype (through a constant)
    (["f16Ok('f16' if attrs.mode == 'exact' else 'f32')"], {}, {}, NO_F16_DEVICE),
    (["device.limits.maxComputeWorkgroupSizeX > 1000 and attrs.mode == 'a'"], {}, {}, F16_DEVICE),
    (["tunables.TILE > 4 and attrs.k > 0"], {}, {}, F16_DEVICE),
    (["half and attrs.mode == 'a'"], {}, {"half": "dtypes.T == 'f16'"}, F16_DEVICE),
    # the attributes with the inputs' shapes, and a dtype or a tunable besides: not for any device
    (["attrs.k < ranks.X and dtypes.T == 'f16'"], {}, {}, F16_DEVICE),
    (["a"], {"a": "attrs.k > numel(shapes.X) or b", "b": "tunables.TILE > 4"}, {}, F16_DEVICE),
    (["kOk and tileOk"], {"kOk": "attrs.k < ranks.X"}, {"tileOk": "tunables.TILE == 3"}, F16_DEVICE),
    # the attributes read whole, with no name the engine can tell
    (["'zz' in attrs"], {}, {}, F16_DEVICE),
    # a clause that fails to evaluate (a manifest's bug as much as the call's), one that reads no attribute
    (["attrs.k / 0 > 1"], {}, {}, F16_DEVICE),
    (["never"], {}, {"never": False}, F16_DEVICE),
])  # fmt: skip
def test_the_headline_stays_where_not_only_attributes_refuse(when, derive, constants, device):
    """Only where every variant's first failing clause reads attributes and nothing else but the
    inputs' shapes and ranks (found through every derive entry and constant it reads, at any depth)
    is the headline the attributes'."""
    error = attributed([variant("fast", 5, ["modeOk"]), variant("slow", 0, when)], {"mode": "exact", "k": 2},
                       derive={**MODES, **derive}, constants=constants, device=device)  # fmt: skip
    assert str(error).splitlines()[0] == "test.Sel: no variant can run this call:", str(error)
    assert [v.accepted for v in error.trace] == [False, False]
    assert error.attributes == ()


def test_a_call_its_attributes_refuse_for_its_inputs_names_them_for_these_inputs():
    """A clause that reads attributes and otherwise only the inputs' shapes and ranks (an axis out of
    range for the input's rank) refuses the attribute for these inputs, on any device: the headline
    names it, "for these inputs", and the error's attributes hold the names."""
    # directly, and through derive entries deeper than the trace shows
    error = attributed([variant("fast", 5, ["attrs.k < ranks.X"]), variant("slow", 0, ["a"])], {"k": 2},
                       derive={"a": "attrs.k == 0 or b", "b": "c", "c": "d", "d": "numel(shapes.X) > 3"})  # fmt: skip
    headline, *lines = str(error).splitlines()
    assert headline == "test.Sel: no variant accepts attribute k=2 for these inputs:"
    assert lines[0] == "  fast: when[0] 'attrs.k < ranks.X' is false (with attrs.k=2, ranks.X=1)"
    assert type(error) is SelectionError and error.attributes == ("k",)
    assert [(v.attributes, v.for_inputs) for v in error.trace] == [({"k": 2}, True), ({"k": 2}, True)]
    # one variant refused by an attribute alone, another by two for the input's shape: all named,
    # and the names the call holds read whole (`'B' in shapes`) are the inputs' too
    error = attributed([variant("fast", 5, ["modeOk"]),
                        variant("slow", 0, ["attrs.k <= dim(shapes.X, 0) and 'B' in shapes or attrs.mode == 'c'"])],
                       {"mode": "exact", "k": 7}, derive=MODES)  # fmt: skip
    assert str(error).splitlines()[0] == "test.Sel: no variant accepts attributes mode='exact', k=7 for these inputs:"
    assert error.attributes == ("mode", "k")
    assert [(v.attributes, v.for_inputs) for v in error.trace] == [({"mode": "exact"}, False),
                                                                  ({"k": 7, "mode": "exact"}, True)]
    # the attributes alone keep their headline, with no "for these inputs"
    error = attributed([variant("fast", 5, ["modeOk"])], {"mode": "exact"}, derive=MODES)
    assert str(error).splitlines()[0] == "test.Sel: no variant accepts attribute mode='exact':"
    assert [v.for_inputs for v in error.trace] == [False]


def test_an_attribute_at_its_default_is_not_blamed_for_the_inputs():
    """A clause that reads an attribute the call left at its default together with the inputs'
    shapes (ONNX Gemm's K check reads transA and transB through derive entries) refuses the inputs,
    not the attribute: the headline stays plain. Given another value, the attribute is named."""
    derive = {"K": "dim(shapes.X, 0) if attrs.k == 1 else 0", "kOk": "K == 4"}
    error = attributed([variant("fast", 5, ["kOk"]), variant("slow", 0, ["kOk"])], {}, derive=derive)
    assert str(error).splitlines()[0] == "test.Sel: no variant can run this call:" and error.attributes == ()
    error = attributed([variant("fast", 5, ["kOk"]), variant("slow", 0, ["kOk"])], {"k": 1}, derive=derive)
    assert str(error).splitlines()[0] == "test.Sel: no variant can run this call:" and error.attributes == ()
    error = attributed([variant("fast", 5, ["kOk"]), variant("slow", 0, ["kOk"])], {"k": 2}, derive=derive)
    assert str(error).splitlines()[0] == "test.Sel: no variant accepts attribute k=2 for these inputs:"
    # refused by an attribute alone, a default is still named (the package refuses its own default)
    error = attributed([variant("fast", 5, ["attrs.k != 1"])], {})
    assert str(error).splitlines()[0] == "test.Sel: no variant accepts attribute k=1:"


def test_a_name_tested_for_in_a_namespace_and_absent_is_said_absent():
    """A forced twin refused on `'B' in shapes` showed `(with shapes=[X, Scale, Y, Mean, InvStdDev])`,
    leaving the reader to find that B is not among them (a kernel author's report). The names an
    `in`/`not in` tests for that the namespace lacks follow it, `(no B)`, a clause's own as well as
    a derive entry's; the JSON trace keeps the plain list of names."""
    rejected = select([variant("twin", 10, ["'B' in shapes"]), variant("plain", 0)], (4,), exhaustive=True).trace[0]
    assert rejected.reason() == "when[0] \"'B' in shapes\" is false (with shapes=[X, Y] (no B))", rejected.reason()
    manifest, program = program_of([variant("twin", 10, ["hasB"]), variant("plain", 0)],
                                   {"hasB": "'B' in shapes and 'C' not in shapes and 'X' in shapes"})  # fmt: skip
    scope, _ = program.call_scope(check_call(manifest, {"X": ((4,), "float32")}, None, None), F16_DEVICE)
    derived = select_variant(program.variants, scope, exhaustive=True, definitions=program.definitions).trace[0]
    assert derived.reason() == "when[0] 'hasB' is false (with hasB=False, shapes=[X, Y] (no B, C))", derived.reason()
    # the clause and a derive entry it reads both test the namespace: the names each lacks, together
    manifest, program = program_of([variant("twin", 10, ["'B' in shapes or hasC"]), variant("plain", 0)],
                                   {"hasC": "'C' in shapes"})  # fmt: skip
    scope, _ = program.call_scope(check_call(manifest, {"X": ((4,), "float32")}, None, None), F16_DEVICE)
    both = select_variant(program.variants, scope, exhaustive=True, definitions=program.definitions).trace[0]
    assert both.reason() == "when[0] \"'B' in shapes or hasC\" is false (with shapes=[X, Y] (no B, C), hasC=False)", \
        both.reason()
    # a present name is in the list already; `not in` of a present one adds nothing
    present = select([variant("twin", 10, ["'X' not in shapes"]), variant("plain", 0)], (4,), exhaustive=True).trace[0]
    assert present.reason() == "when[0] \"'X' not in shapes\" is false (with shapes=[X, Y])", present.reason()
    values = json.loads(json.dumps(derived.as_dict()))["values"]
    assert values == {"hasB": False, "shapes": ["X", "Y"]} and type(derived.as_dict()["values"]["shapes"]) is list
