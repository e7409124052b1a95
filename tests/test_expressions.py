"""The manifest expression language: functions, strict undefined, the allow-list and the sandbox,
counts (integral floats accepted, 10.5 refused), caching."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from jinja2 import StrictUndefined, nodes
from jinja2.parser import Parser

from webgpu_kernels.errors import BroadcastError, ExpressionError, ExpressionSandboxError
from webgpu_kernels.expressions import _SANDBOX, STATIC_FUNCTIONS, ExpressionCompiler, as_count
from webgpu_kernels.sandbox import harden

KNOWN = ("hidden", "baseOk", "n")


def scope(**extra):
    base = dict(STATIC_FUNCTIONS)
    base["f16Ok"] = lambda dtype: dtype != "f16"
    base.update(
        shapes={"X": (2, 3, 8), "bias": (8,), "E": (2, 0, 4), "S": ()},
        ranks={"X": 3, "bias": 1, "E": 3, "S": 0},
        dtypes={"T": "f16"},
        attrs={"alpha": 1.702, "axes": [1, 2]},
        tunables={"WORKGROUP_SIZE": 256},
        device={"limits": {"maxComputeWorkgroupSizeX": 256, "maxComputeInvocationsPerWorkgroup": 128}},
        hidden=8,
        n=48,
    )
    base.update(extra)
    return base


def ev(source, **extra):
    return ExpressionCompiler(KNOWN).compile(source, "test").evaluate(scope(**extra))


# --- functions ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "source, expected",
    [
        ("min(3, 4)", 3), ("min(4, 3, 9)", 3), ("min(shapes.X)", 2), ("min([5, 1.5])", 1.5),
        ("max(3, 4)", 4), ("max(shapes.X)", 8), ("max(-1, -2)", -1),
        ("min(device.limits.maxComputeInvocationsPerWorkgroup, device.limits.maxComputeWorkgroupSizeX)", 128),
        ("dim(shapes.X, 0)", 2), ("dim(shapes.X, 2)", 8), ("dim(shapes.X, -1)", 8), ("dim(shapes.X, ranks.X - 1)", 8),
        ("numel(shapes.X)", 48), ("numel(shapes.E)", 0), ("numel(shapes.S)", 1), ("numel([2, 5])", 10),
        ("ceilDiv(10, 4)", 3), ("ceilDiv(12, 4)", 3), ("ceilDiv(0, 4)", 0), ("ceilDiv(1, 256)", 1),
        ("ceilDiv(numel(shapes.X), 5)", 10), ("ceilDiv(10.0, 4)", 3),
        ("sameShape(shapes.X, shapes.X)", True), ("sameShape(shapes.X, [2, 3, 8])", True),
        ("sameShape(shapes.X, shapes.bias)", False), ("sameShape(shapes.S, [])", True),
        ("f16Ok(dtypes.T)", False), ("f16Ok('f32')", True),
    ],
)  # fmt: skip
def test_functions(source, expected):
    result = ev(source)
    assert result == expected and type(result) is type(expected)


@pytest.mark.parametrize(
    "shapes",
    [((3, 1), (1, 4), (4,)), ((2, 0, 1), (4,)), ((), (5,)), ((), ()), ((1,), (0,)), ((7,),), ((2, 1, 3, 1, 2, 1), (3,)),
     ((8, 1, 6, 1), (7, 1, 5)), ((2, 3), (4,)), ((2, 1), (3, 1)), ((0,), (2,)), ((1, 0), (3, 1))],
)  # fmt: skip
def test_broadcast_functions_agree_with_numpy(shapes):
    """broadcastable/broadcastShape against np.broadcast_shapes; broadcastStrides against the
    strides NumPy gives a C-order array broadcast to the result (elements; 0 where broadcast)."""
    import numpy as np

    args = ", ".join(str(list(s)) for s in shapes)
    try:
        want = np.broadcast_shapes(*shapes)
    except ValueError:
        assert ev(f"broadcastable({args})") is False
        with pytest.raises(ExpressionError, match=r"broadcastShape\(\): .* do not broadcast: sizes \d+ and \d+ at axis -\d"):
            ev(f"broadcastShape({args})")
        return
    assert ev(f"broadcastable({args})") is True and ev(f"broadcastShape({args})") == want
    for shape in shapes:
        strides = ev(f"broadcastStrides({list(shape)}, {list(want)})")
        assert len(strides) == len(want)
        if 0 not in want:  # an empty tensor's strides are never read
            view = np.broadcast_to(np.empty(shape, np.float32), want)  # an axis of size 1 reads index 0 only
            assert strides == tuple(0 if size == 1 else st // 4 for st, size in zip(view.strides, want))


@pytest.mark.parametrize(
    "source, fragment",
    [("broadcastShape()", "one or more shapes"), ("broadcastable(3)", "expects a shape"),
     ("broadcastStrides([2, 3], [3])", "does not broadcast to [3]"), ("broadcastStrides([2], [3])", "does not broadcast"),
     ("broadcastShape([1] * 3000, [1] * 3000)", "dimensions in all"),
     ("broadcastShape([-1], [2])", "sizes of 0 or more, got [-1]"), ("broadcastable([2], [0 - 2])", "sizes of 0"),
     ("broadcastStrides([1], [-3])", "sizes of 0 or more")],
)  # fmt: skip
def test_broadcast_function_errors(source, fragment):
    with pytest.raises(ExpressionError, match=re.escape(fragment)) as info:
        ev(source)
    assert not isinstance(info.value, BroadcastError)  # the manifest's error, not the caller's shapes'




@pytest.mark.parametrize("source, expected", [
    ("itemSize(dtypes.T)", 2), ("itemSize('f32')", 4), ("itemSize('f16')", 2), ("itemSize('i64')", 8),
    ("itemSize('u8')", 1), ("itemSize('bool')", 1), ("itemSize('bf16')", 2), ("itemSize('f64')", 8),
    ("itemSize('float32')", 4), ("itemSize('float16')", 2), ("itemSize('int64')", 8), ("itemSize('uint16')", 2),
    ("itemSize('bool') * numel(shapes.X)", 48),
])  # fmt: skip
def test_item_size_is_the_bytes_of_one_element(source, expected):
    """itemSize() of a dtypes name (the WGSL-style name, as dtypes.T gives it) or an ONNX type name:
    a byte count an expression can build on (bench.json's ``bytes``)."""
    result = ev(source)
    assert result == expected and type(result) is int


@pytest.mark.parametrize("source, fragment", [
    ("itemSize('f8')", "itemSize(): unknown dtype 'f8' (known: "),
    ("itemSize('complex64')", "unknown dtype 'complex64'"),
    ("itemSize(4)", "itemSize() takes a dtype name (a string), got 4"),
    ("itemSize(shapes.X)", "itemSize() takes a dtype name (a string), got (2, 3, 8)"),
])  # fmt: skip
def test_item_size_refuses_what_is_no_dtype(source, fragment):
    with pytest.raises(ExpressionError, match=re.escape(fragment)) as info:
        ev(source)
    assert info.value.expression == source and info.value.where == "test"


@pytest.mark.parametrize(
    "source, fragment",
    [
        ("dim(shapes.X, 3)", "out of range"), ("dim(shapes.X, -4)", "out of range"), ("dim(shapes.X, 1.0)", "integer"),
        ("dim(5, 0)", "shape"), ("numel(3)", "shape"), ("numel(['a'])", "shape"), ("sameShape(1, shapes.X)", "shape"),
        ("ceilDiv(1, 0)", "zero"), ("ceilDiv('a', 2)", "numbers"), ("ceilDiv(true, 2)", "numbers"),
        ("ceilDiv(1e308, 1e-308)", "ceilDiv(): the result inf is not a finite number"),
        ("ceilDiv(-1e308, 1e-308)", "ceilDiv(): the result -inf is not a finite number"),
        ("min([])", "ValueError"), ("max()", ""),
    ],
)  # fmt: skip
def test_function_errors(source, fragment):
    with pytest.raises(ExpressionError) as info:
        ev(source)
    assert fragment in str(info.value)
    assert info.value.expression == source and info.value.where == "test"


@pytest.mark.parametrize(
    "source, expected",
    [
        ("8 / 4", 2.0), ("7 // 2", 3), ("-7 // 2", -4), ("-7 % 3", 2), ("2 ** 10", 1024),
        ("'vec4<' ~ dtypes.T ~ '>'", "vec4<f16>"), ("1 if hidden > 4 else 0", 1), ("not baseOk", False),
        ("0 < hidden < 10", True), ("'X' in shapes", True), ("'Z' in shapes", False), ("shapes.X[-1]", 8),
        ("shapes['X'][0]", 2), ("attrs.alpha * 2", 3.404), ("[1, hidden]", [1, 8]), ("(1, 2)", (1, 2)),
        ("numel(shapes.X) % 4 == 0 and dim(shapes.X, 2) % 4 == 0", True), ("true and 3", 3), ("none", None),
    ],
)  # fmt: skip
def test_syntax(source, expected):
    assert ev(source, baseOk=True) == expected


# --- strictness ---------------------------------------------------------------------------------


@pytest.mark.parametrize("source", ["nope", "hidden + nope", "min(nope, 1)", "_secret", "shapes.X if undefinedName else 1"])
def test_unknown_name_is_refused_when_compiled(source):
    with pytest.raises(ExpressionError, match="unknown name"):
        ExpressionCompiler(KNOWN).compile(source, "derive.x")


def test_a_dict_indexed_by_a_tuple_or_list_says_its_keys_are_strings_or_numbers():
    """A tuple had read Jinja's "'dict object' has no attribute '<tuple>'" (a list already read this way)."""
    from webgpu_kernels.errors import ExpressionSandboxError

    for source, kind in [("attrs[(1, 2)]", "tuple"), ("shapes[(1,)]", "tuple"), ("attrs[[1]]", "list")]:
        with pytest.raises(ExpressionSandboxError) as info:
            ev(source)
        assert str(info.value).endswith(f"refused by the sandbox: a dict cannot be indexed by a {kind} (its keys are "
                                        "strings or numbers)"), str(info.value)  # fmt: skip


@pytest.mark.parametrize("source", ["shapes.Z", "attrs.beta", "tunables.TILE", "device.limits.noSuchLimit",
                                    "numel(shapes.Z)", "ranks.Z + 1", "-attrs.beta", "dtypes.U ~ 'x'"])  # fmt: skip
def test_missing_value_is_an_error_not_none(source):
    with pytest.raises(ExpressionError) as info:
        ev(source)
    assert "undefined" in str(info.value).lower()
    assert info.value.expression == source


@pytest.mark.parametrize("source, missing", [("numel(shapes.Z)", "'Z'"), ("dim(shapes.Q, 0)", "'Q'"),
                                             ("sameShape(shapes.X, shapes.Z)", "'Z'")])  # fmt: skip
def test_a_function_given_a_missing_value_names_it(source, missing):
    """Not "got Undefined": the message says which name was missing."""
    with pytest.raises(ExpressionError) as info:
        ev(source)
    assert missing in str(info.value) and "got Undefined" not in str(info.value)


def test_known_name_without_value_is_an_error():
    """``baseOk`` compiles (a derive name) but has no value in this scope: strict, not None."""
    expression = ExpressionCompiler(KNOWN).compile("baseOk", "variants[0].when[0]")
    with pytest.raises(ExpressionError) as info:
        expression.evaluate(scope())
    assert "baseOk" in str(info.value) and "variants[0].when[0]" in str(info.value)


def test_syntax_error_names_the_expression_and_place():
    with pytest.raises(ExpressionError) as info:
        ExpressionCompiler(KNOWN).compile("numel(shapes.X) >", "variants[1].when[2]")
    assert info.value.where == "variants[1].when[2]" and "syntax error" in str(info.value)
    with pytest.raises(ExpressionError, match="unexpected text"):
        ExpressionCompiler(KNOWN).compile("1 2", "x")


@pytest.mark.parametrize("source, hinted", [("vec4<f32>", True), ("array<u32, 4>", True), ("vec4h", True),
                                            ("f16", True), ("numel(shapes.X) >", False), ("vec4Tial", False),
                                            ('vec4<" ~ dtypes.T ~ ">', False)])  # fmt: skip
def test_a_wgsl_type_meant_as_a_string_gets_the_quoting_hint(source, hinted):
    """``"elementType": "vec4<f32>"`` in constants is an expression, and fails; the message says how to quote it."""
    with pytest.raises(ExpressionError) as info:
        ExpressionCompiler(KNOWN).compile(source, "constants.elem")
    assert (f"quoted inside the JSON string: \"'{source}'\"" in str(info.value)) is hinted


@pytest.mark.parametrize("source, hinted", [("shapes.X[:-1] + [1]", True), ("[1] + shapes.X[:-1]", True),
                                            ('"n" + shapes.X[0]', False), ("shapes.X[:-1] + (1,)", None)])  # fmt: skip
def test_a_tuple_joined_to_a_list_gets_the_tuple_hint(source, hinted):
    """`shapes.X[:-1] + [1]` said only Python's "can only concatenate tuple (not "list") to tuple"
   ; other concatenation errors get no shape hint."""
    if hinted is None:
        assert ev(source) == (2, 3, 1)
        return
    with pytest.raises(ExpressionError) as info:
        ev(source)
    assert ("write `shapes.X[:-1] + (1,)`" in str(info.value)) is hinted


def test_reading_a_tensor_the_call_lacks_says_how_to_guard_it():
    """Jinja's own message, "'dict object' has no attribute 'C'", did not say that an optional
    input the call left out reads this way, nor what guards it."""
    scope = {"shapes": {"A": [2, 3]}, "ranks": {"A": 2}}
    for source in ("shapes.C[0] + 1", "shapes['C'] == shapes.A", "ranks.C > 1"):
        with pytest.raises(ExpressionError) as info:
            ExpressionCompiler(KNOWN).compile(source, "derive.cOk").evaluate(scope)
        assert "this call has no tensor 'C' (an optional input it left out" in str(info.value)
        assert "`'C' in shapes`" in str(info.value) and "dict object" not in str(info.value)
    with pytest.raises(ExpressionError, match="dict object"):  # not a tensor: Jinja's words stand
        ExpressionCompiler(KNOWN).compile("attrs.nope + 1", "derive.x").evaluate({"attrs": {}})


# --- the allow-list and the sandbox -------------------------------------------------------------


@pytest.mark.parametrize(
    "source",
    [
        "().__class__", "().__class__.__base__.__subclasses__()", "''.__class__", "shapes.__class__",
        "shapes.X.__len__", "attrs._private", "device.adapter", "device.limits.__class__", "device.features.count",
        "device.features.__class__",
        "lipsum", "range(10)", "cycler", "dict(a=1)", "shapes.X.count(2)", "min(a=1)", "min(*shapes.X)",
        "shapes.X | length", "shapes.X is defined", "{'a': 1}", "hidden.real",
        "[].append(1)", "(1).bit_length()", "self", "namespace()",
    ],
)  # fmt: skip
def test_allow_list_refuses(source):
    with pytest.raises(ExpressionError):
        ExpressionCompiler(KNOWN).compile(source, "test")


@pytest.mark.parametrize("source", ["shapes['__class__']", "attrs['__init__']", "'abc' * 100000", "[1] * 5000",
                                    "2 ** 1000", "10 ** 200 * 10 ** 200"])  # fmt: skip
def test_sandbox_refuses_at_evaluation(source):
    with pytest.raises(ExpressionError):
        ev(source)


@pytest.mark.parametrize(
    "source, expected",
    [
        ("shapes.X[:-1]", (2, 3)), ("shapes.X[1:]", (3, 8)), ("shapes.X[::-1]", (8, 3, 2)), ("shapes.S[:-1]", ()),
        ("shapes.X[:1] + shapes.X[2:]", (2, 8)), ("shapes.X[:1] + (1,) + shapes.X[2:]", (2, 1, 8)),
        ("shapes.X[:ranks.X - 1]", (2, 3)), ("shapes.X[-1:][0]", 8), ("shapes.X[10 ** 30:]", ()),
        ("numel(shapes.X[1:])", 24), ("attrs.axes[1:]", [2]), ("dtypes.T[1:]", "16"),
    ],
)  # fmt: skip
def test_slices(source, expected):
    """Slices let an output drop or insert a dimension at any rank (a reduction's shape)."""
    result = ev(source)
    assert result == expected and type(result) is type(expected)


@pytest.mark.parametrize("source, fragment", [("shapes.X[::0]", "slice step cannot be zero"),
                                              ("shapes.X[0.5:]", "integers or left out"),
                                              ("shapes.X[true:]", "integers or left out"),
                                              ("shapes.X['a':]", "integers or left out"),
                                              ("shapes[1:]", "only a list, tuple, string or range can be sliced")])  # fmt: skip
def test_slice_errors(source, fragment):
    with pytest.raises(ExpressionError, match=fragment):
        ev(source)


@pytest.mark.parametrize("source", ["shapes.X[:bad]", "shapes.X[bad:]", "shapes.X[::bad]", "shapes.X[bad]"])
def test_an_undefined_index_fails_with_its_own_reason(source):
    """A failed derive entry used as an index or slice bound reports why it failed."""
    from webgpu_kernels.expressions import failed_value

    reason = ExpressionError("dim(): axis 5 is out of range", expression="dim(shapes.X, 5)", where="derive.bad")
    compiled = ExpressionCompiler((*KNOWN, "bad")).compile(source, "test")
    with pytest.raises(ExpressionError, match="'bad' could not be evaluated: derive.bad.*axis 5 is out of range"):
        compiled.evaluate(scope(bad=failed_value("bad", reason)))


def test_a_failed_broadcast_derive_names_itself_and_stays_a_broadcast_error():
    """Read by another expression, a derive whose broadcastShape() failed says which derive failed,
    as any other failed derive does (it had said only "broadcastShape(): ... do not broadcast"), and
    keeps BroadcastError's class, shapes and reason (the caller's shapes are at fault)."""
    from webgpu_kernels.expressions import failed_value

    with pytest.raises(BroadcastError) as failed:
        ExpressionCompiler(KNOWN).compile("broadcastShape(shapes.X, [9])", "derive.s").evaluate(scope())
    compiled = ExpressionCompiler((*KNOWN, "s")).compile("numel(s) > 0", "variants[0].when[0]")
    with pytest.raises(BroadcastError) as info:
        compiled.evaluate(scope(s=failed_value("s", failed.value)))
    assert str(info.value).startswith("variants[0].when[0]: expression 'numel(s) > 0': 's' could not be evaluated: "
                                      "derive.s: expression 'broadcastShape(shapes.X, [9])': broadcastShape(): ")
    assert "do not broadcast" in str(info.value)
    assert (info.value.shapes, info.value.reason) == (failed.value.shapes, failed.value.reason)


@pytest.mark.parametrize("source, expected", [("shapes.X", (2, 3, 8)), ("attrs.axes", [1, 2]),
                                              ("device.limits.maxComputeWorkgroupSizeX", 256),
                                              ("tunables.WORKGROUP_SIZE", 256), ("ranks.S", 0)])  # fmt: skip
def test_attribute_walks_into_namespaces(source, expected):
    assert ev(source) == expected


def test_references_are_recorded():
    expression = ExpressionCompiler(KNOWN).compile("dim(shapes.X, ranks.X - 1) % 4 == 0 and baseOk", "w")
    assert expression.references == ("shapes.X", "ranks.X", "baseOk")
    assert expression.peek(scope(baseOk=False)) == {"shapes.X": (2, 3, 8), "ranks.X": 3, "baseOk": False}


def test_literals_are_values():
    compiler = ExpressionCompiler(KNOWN)
    assert compiler.compile(4, "x").evaluate({}) == 4
    assert compiler.compile(True, "x").evaluate({}) is True
    assert compiler.compile(2.5, "x").source == "2.5"


def test_compiled_once_per_source():
    compiler = ExpressionCompiler(KNOWN)
    a = compiler.compile("numel(shapes.X) // 4", "variants[0].passes[0].dispatch.threads")
    b = compiler.compile("numel(shapes.X) // 4", "variants[1].passes[0].dispatch.threads")
    assert a._compiled is b._compiled
    assert a.where != b.where
    assert a.evaluate(scope()) == b.evaluate(scope()) == 12


@pytest.mark.parametrize(
    "source", ["0 < 1 < 5", "0 < 1 > 5", "1 == 1 == 1", "n > hidden >= 8 != 9", "'a' in 'abc' not in 'xy'",
               "3 > 2 > 1 > 0 > -1", "3 > 2 > 5 > 0"],
)  # fmt: skip
def test_chained_comparisons_are_pythons(source):
    assert ev(source) is eval(source, {}, {"n": 48, "hidden": 8})


def test_a_chained_comparison_stops_at_its_first_false_link():
    """As in Python: a later operand is not evaluated (one call of the whole chain had evaluated
    every operand first, so dim()'s bad axis raised)."""
    assert ev("1 < 0 < dim(shapes.X, 9)") is False
    assert ev("0 < 1 < 2 < 3 < 2 < dim(shapes.X, 9)") is False
    with pytest.raises(ExpressionError, match="axis 9 is out of range"):
        ev("0 < 1 < dim(shapes.X, 9)")


def test_a_long_chained_comparison_compiles():
    """Its links are joined by `and` in a balanced tree: 400 links nested one per link had been
    too deep for Python's compiler."""
    assert ev(" < ".join(map(str, range(400)))) is True
    assert ev(" < ".join(map(str, range(399))) + " < 0") is False


def test_a_nested_chained_comparison_compiles_each_operand_once():
    """A chain's middle operand is compiled (and evaluated) once, as Python evaluates it: made a
    link of two calls joined by `and`, a chain nested 16 deep in 161 characters had compiled to
    2^16 copies of its innermost operand and taken 28 s to load."""
    source = "12345"
    for _ in range(10):
        source = f"0 < ({source}) < 99999"
    tree = Parser(_SANDBOX, source, state="variable").parse_expression()
    code = _SANDBOX.compile(nodes.Template([nodes.Output([harden(tree, template=False)])]), raw=True)
    assert code.count("12345") == 1
    assert ev(source) is eval(source)  # noqa: S307 - a literal comparison


# --- counts -------------------------------------------------------------------------------------


def count_of(source, **extra):
    expression = ExpressionCompiler(KNOWN).compile(source, "variants[0].passes[0].dispatch.threads")
    return as_count(expression.evaluate(scope(**extra)), expression, "dispatch.threads")


@pytest.mark.parametrize("source, expected", [("numel(shapes.X) / 4", 12), ("48.0", 48), ("0", 0), ("0.0", 0),
                                              ("ceilDiv(numel(shapes.X), 4)", 12), ("n // 4", 12)])  # fmt: skip
def test_integral_values_are_counts(source, expected):
    result = count_of(source)
    assert result == expected and type(result) is int


@pytest.mark.parametrize("source, value", [("42 / 4", "10.5"), ("-1", "-1"), ("-2.0", "-2.0"), ("true", "True"),
                                           ("'4'", "'4'"), ("[4]", "[4]"), ("none", "None"),
                                           # not finite: a count, a dispatch size, a length or an output
                                           # dimension of inf or NaN is refused here, never reaching the GPU
                                           ("1e300 * 1e300", "inf"), ("-1e300 * 1e300", "-inf"),
                                           ("1e300 * 1e300 - 1e300 * 1e300", "nan")])  # fmt: skip
def test_non_counts_are_refused_naming_the_expression(source, value):
    with pytest.raises(ExpressionError) as info:
        count_of(source)
    message = str(info.value)
    assert info.value.expression == source and repr(source) in message
    assert "non-negative integer" in message and value in message
    assert "variants[0].passes[0].dispatch.threads" in message


def test_a_namespace_read_whole_is_traced_by_its_names():
    """`'B' in shapes` reads the whole namespace: the trace listed every shape (cut at 80 characters,
    so often without the one that mattered); the names are what the clause looked at."""
    expression = ExpressionCompiler(KNOWN).compile("'S' in shapes and ranks.X > 1", "w")
    assert expression.peek(scope()) == {"shapes": ["X", "bias", "E", "S"], "ranks.X": 3}


@pytest.mark.parametrize("source", ["[dim, 1]", "[[1, [numel]]]", "(f16Ok,)"])
def test_a_function_inside_a_value_is_refused(source):
    """Only a bare function was refused: `[dim, f16Ok]` reached traces, JSON and templates as the
    repr of Python function objects."""
    from webgpu_kernels.errors import ExpressionSandboxError

    expr = ExpressionCompiler([]).compile(source, "constants.fns")
    with pytest.raises(ExpressionSandboxError, match="a function is not a value"):
        expr.evaluate({**STATIC_FUNCTIONS, "f16Ok": lambda dtype: True})


# --- bounds found in review (each ran unbounded or raised a raw Python error before) -------------


def test_numel_is_bounded_as_the_product_grows():
    """numel() multiplied every dimension before checking the 128-bit bound: 4096 dimensions of 127
    bits took 0.33-0.38 s per expression (math.prod alone, CPU machine), and a package may hold 2048.
    Checked as it grows, it stops at the second: 3**80 is 127 bits, two of them 254."""
    from webgpu_kernels.errors import ExpressionSandboxError
    from webgpu_kernels.sandbox import SandboxViolation

    with pytest.raises(ExpressionSandboxError, match="numel\\(\\): the product exceeds the limit of 128 bits"):
        ev("numel([3**80] * 4096)")
    multiplied = []

    class Dim(int):  # counts the products it takes part in (int * Dim asks Dim first)
        def __mul__(self, other):
            multiplied.append(1)
            return int(self) * int(other)

        __rmul__ = __mul__

    with pytest.raises(SandboxViolation, match="128 bits"):  # (evaluate makes it an ExpressionSandboxError)
        STATIC_FUNCTIONS["numel"]([Dim(3**80)] * 4096)
    assert len(multiplied) == 2
    assert ev("numel([3**80, 0] + [3**80] * 4000)") == 0  # a zero dimension: no elements, whatever the rest
    assert ev("numel([2**60, 2**60])") == 2**120


@settings(max_examples=30, deadline=None)
@given(n=st.integers(4090, 4100), fn=st.sampled_from(["min", "max"]), seed=st.integers(0, 2**32 - 1))
def test_min_and_max_of_one_list_take_a_list_as_long_as_a_value_may_be(n, fn, seed):
    """A value may hold 4096 items (an attribute list, a result); min() or max() of one such list
    had counted its own argument tuple as one more item and refused it as "more than 4096 items"
   . Past 4096 it is refused, naming the function."""
    from webgpu_kernels.errors import ExpressionSandboxError

    items = np.random.default_rng(seed).permutation(np.arange(-(n // 2), n - n // 2)).tolist()
    if n <= 4096:
        assert ev(f"{fn}(attrs.axes)", attrs={"axes": items}) == (min(items) if fn == "min" else max(items))
    else:
        with pytest.raises(ExpressionSandboxError, match=rf"{fn}\(\) of values of more than 4096 items in all"):
            ev(f"{fn}(attrs.axes)", attrs={"axes": items})
    # two lists are compared as values of a list literal [a, b] are counted: the pair and their items
    half = items[: n // 2]
    if 2 + 2 * len(half) <= 4096:
        assert ev(f"{fn}(attrs.axes, attrs.axes)", attrs={"axes": half}) == half
    else:
        with pytest.raises(ExpressionSandboxError, match=rf"{fn}\(\) of values of more than 4096 items in all"):
            ev(f"{fn}(attrs.axes, attrs.axes)", attrs={"axes": half})


@pytest.mark.parametrize("value, fragment", [
    (2**200, "an integer of 201 bits exceeds the limit of 128"),
    ([1, [2, 2**129]], "an integer of 130 bits"),
    (["x" * 5000], "a string of 5000 characters"),  # a bare string is an expression, bounded by its length
    ([0] * 5000, "more than 4096 items"),
], ids=["int", "nested-int", "string", "list"])  # fmt: skip
def test_a_json_literal_is_held_to_the_bounds_of_a_value(value, fragment):
    """`"derive": {"big": 2**200}` as a JSON number loaded, where the expression "2**200" is refused."""
    from webgpu_kernels.errors import ExpressionSandboxError

    with pytest.raises(ExpressionSandboxError, match=fragment) as info:
        ExpressionCompiler(KNOWN).compile(value, "derive.big")
    assert info.value.where == "derive.big"
    assert ExpressionCompiler(KNOWN).compile([1, [2, 2**100]], "ok").evaluate({}) == [1, [2, 2**100]]


def test_a_value_nested_deeper_than_an_expression_may_nest_is_refused():
    """Each derive entry wrapping the previous one 30 lists deeper gave a value 1,200 levels deep,
    and a raw RecursionError from repr() in the selection trace."""
    from webgpu_kernels.errors import ExpressionSandboxError

    deep: object = 1
    for _ in range(20):
        deep = [deep]
    with pytest.raises(ExpressionSandboxError, match="nested more than 32 levels deep"):
        ev("[[[[[[[[[[[[[[[hidden]]]]]]]]]]]]]]]", hidden=deep)
    assert ev("[[hidden]]", hidden=deep) == [[deep]]


def test_an_undefined_value_inside_a_list_fails_where_it_is_evaluated():
    """`[bad]` of a failed derive entry evaluated to a list holding a StrictUndefined, which broke
    explain's JSON (a raw TypeError) and `explain --json` (an UndefinedError traceback)."""
    from webgpu_kernels.expressions import failed_value

    bad = failed_value("bad", ExpressionError("dim(): axis 9 is out of range", expression="dim(shapes.X, 9)"))
    with pytest.raises(ExpressionError, match="'bad' could not be evaluated: .*axis 9 is out of range"):
        ev("[1, [hidden]]", hidden=bad)
    with pytest.raises(ExpressionError, match="undefined value"):
        ev("[shapes.Z]")


def test_a_package_holds_a_bounded_amount_of_expression_text():
    """Each expression is held to 4096 characters, but 100 list literals of about 2.3 kB took 12 s to
    compile (about 50 us a character, CPU machine): the package's total is bounded too."""
    from webgpu_kernels.errors import ExpressionSandboxError
    from webgpu_kernels.expressions import MAX_EXPRESSION_CHARS

    compiler = ExpressionCompiler(())
    chunk = "[" + ",".join(["1"] * 1500) + "]"  # 3001 characters
    compiled = 0
    with pytest.raises(ExpressionSandboxError, match=f"hold more than {MAX_EXPRESSION_CHARS} characters together"):
        for i in range(MAX_EXPRESSION_CHARS // len(chunk) + 2):
            compiler.compile(chunk[:-1] + f",{i}]", f"constants.c{i}")
            compiled += 1
    assert compiled == MAX_EXPRESSION_CHARS // (len(chunk) + 2)
    compiler.compile(chunk[:-1] + ",0]", "again")  # a source already compiled costs nothing more


@pytest.mark.parametrize("source", ["1e400 > 0", "-1e400", "[1, 2e308]"])
def test_a_float_literal_past_float64_is_refused_at_compile(source):
    """Jinja folds 1e400 to the name `inf`, which evaluated as Python's NameError: it escaped a
    call, explain and evaluate as no KernelError (an audit of errors.md)."""
    from webgpu_kernels.errors import ExpressionSandboxError

    with pytest.raises(ExpressionSandboxError, match="a float literal past the float64 range"):
        ExpressionCompiler([]).compile(source, "variants[0].when[0]")


#: A derive entry's value within every bound (4095 items, strings of 4096), 16 MiB as repr():
#: `d = "[s] * 4095"` of `s = "'x' * 4096"`.
HEAVY = ["x" * 4096] * 4095


def _peak_bytes(call):
    """Run ``call`` (which must raise ExpressionError); the error and the peak of memory allocated."""
    import tracemalloc

    tracemalloc.start()
    try:
        with pytest.raises(ExpressionError) as info:
            call()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    return info.value, peak


@pytest.mark.parametrize("source, fragment", [
    ("ceilDiv(hidden, 1)", "ceilDiv() takes numbers, got ['xxx"), ("dim(hidden, 0)", "dim() expects a shape"),
    ("dim([1], hidden)", "axis must be an integer, got ['xxx"), ("numel(hidden)", "numel() expects a shape"),
    ("sameShape([1], hidden)", "got ['xxx"), ("broadcastable([1], hidden)", "got ['xxx"),
    ("broadcastStrides([1], hidden)", "got ['xxx"),
])  # fmt: skip
def test_a_function_quotes_a_heavy_argument_without_building_its_repr(source, fragment):
    """The functions' messages repr()'d the whole argument, then kept 80 characters: a list literal
    of 200 such values in one `when` clause took 22 s and 2.5 GB for one explain (review, f3)."""
    error, peak = _peak_bytes(lambda: ev(source, hidden=HEAVY))
    assert fragment in str(error) and len(error.detail) < 200, f"{len(error.detail)} characters"
    assert peak < 4 * 2**20, f"{source}: {peak / 2**20:.0f} MiB allocated for an 80-character quote"


@pytest.mark.parametrize("source", ["[hidden, hidden][0][0]", "(hidden, 1, hidden)[1]", "([hidden] + [hidden])[0][0]",
                                    "ceilDiv([hidden, hidden], 1)", "[[hidden], [[hidden]]][0]"])  # fmt: skip
def test_a_list_literal_is_bounded_through_every_level_as_a_result_is(source):
    """Only an expression's result was bounded through every nesting level, so `[d, d, ...]` held
    800,000 items by reference for a function to walk or quote."""
    from webgpu_kernels.errors import ExpressionSandboxError

    with pytest.raises(ExpressionSandboxError, match="holds values of more than 4096 items in all"):
        ev(source, hidden=HEAVY)
    assert ev("[hidden][0][1]", hidden=HEAVY) == "x" * 4096 and ev("[1, [2]] + [3]") == [1, [2], 3]


def test_short_repr_is_repr_cut_and_built_only_as_far_as_it_is_shown():
    from webgpu_kernels.errors import short_repr, shorten

    for value in [1, -2.5, "a'b\n", None, True, (), (1,), [1, (2, "x")], {"a": [1, {}]}, range(3), 2**100, "x" * 90,
                  [list(range(50))] * 3]:  # fmt: skip
        assert short_repr(value) == shorten(repr(value)), value
    nested: tuple = (0,)
    for _ in range(60):  # 2^60 leaves by reference: repr() would never finish
        nested = (nested, nested)
    assert short_repr(nested, 40) == "(" * 37 + "..."
    # a function's repr() names its address; short_repr() its type only
    assert short_repr([STATIC_FUNCTIONS["dim"]]) == "[<function>]" and short_repr(2**5000) == "<int of 5001 bits>"
    # a NumPy scalar (an attribute a caller passed) by its value, an array by its type
    assert short_repr([np.float32(1.5), np.int64(3), np.array(2.0), np.arange(3)]) == "[1.5, 3, 2.0, <ndarray>]"


def test_a_call_with_the_wrong_arguments_names_the_function_as_the_language_does():
    """Python's message named its own functions: "_dim() missing 1 required positional argument",
    and "<lambda>()" for f16Ok."""
    import numpy as np

    import webgpu_kernels as wk

    kernel = wk.get_kernel("com.microsoft.QuickGelu")
    x = {"X": np.ones((2, 3), np.float32)}
    for source, said in (("dim(shapes.X)", "TypeError: dim() missing 1 required positional argument: 'axis'"),
                         ("numel(shapes.X, 2)", "TypeError: numel() takes 1 positional argument but 2 were given"),
                         ("f16Ok()", "TypeError: f16Ok() missing 1 required positional argument: 'dtype'")):  # fmt: skip
        with pytest.raises(wk.ExpressionError) as info:
            kernel.evaluate(source, x)
        assert str(info.value).endswith(said), str(info.value)


# --- chained comparisons against Python (hypothesis) --------------------------------------------

_operands = (st.integers(-3, 3).map(str) | st.sampled_from(["hidden", "n", "(1 + 2)", "-1"])
             | st.lists(st.integers(-2, 3), max_size=3).map(str))  # fmt: skip
_operators = st.sampled_from(["==", "!=", "<", "<=", ">", ">=", "in", "not in"])


@st.composite
def chains(draw: st.DrawFn) -> str:
    """A chain of 1 to 9 comparisons, at times negated or joined to another by `and`/`or`."""
    links = draw(st.integers(1, 9))
    text = draw(_operands) + "".join(f" {draw(_operators)} {draw(_operands)}" for _ in range(links))
    if draw(st.booleans()):
        text = f"not {text}"
    if draw(st.booleans()):
        text = f"{text} {draw(st.sampled_from(['and', 'or']))} {draw(chains())}"
    return text


@settings(max_examples=120, deadline=None)
@given(chains())
def test_a_chained_comparison_is_what_python_makes_of_it(source: str) -> None:
    """Each link holds as in Python and the chain stops at its first false one; where Python
    raises (an int compared with a list, `in` an int), the expression is refused."""
    names = {"hidden": 8, "n": 48}
    try:
        want = eval(source, {"__builtins__": {}}, dict(names))  # noqa: S307 - generated comparisons of literals
    except TypeError:
        with pytest.raises(ExpressionError):
            ev(source)
        return
    got = ev(source)
    assert got == want and type(got) is type(want), source


@pytest.mark.parametrize("source, shown", [("1e300 ** 2", "1e+300 ** 2"), ("attrs.alpha ** 100", "1e+30 ** 100"),
                                           ("(-1e300) ** 3", "-1e+300 ** 3")])  # fmt: skip
def test_a_power_past_float64_says_so_in_the_librarys_words(source, shown):
    """Python's float ** raises where * gives inf: the ExpressionError had read "OverflowError: (34,
    'Numerical result out of range')", naming neither the operation nor what was expected."""
    with pytest.raises(ExpressionError) as info:
        ev(source, attrs={"alpha": 1e30})
    message = str(info.value)
    assert f"{shown} is past float64's range" in message and "expected a result within float64's range" in message
    assert "Numerical result" not in message and "OverflowError" not in message
    assert ev("1e300 * 1e300") == float("inf")  # * and / give inf, as before (checked where the value is used)
    assert ev("attrs.alpha ** 10", attrs={"alpha": 1e30}) == pytest.approx(1e300)


@pytest.mark.parametrize(("source", "divides"), [
    ("shapes.X[-1] / 2", True), ("shapes.X[-1] // 2", False), ("(shapes.X[-1] / 2) | int", False),
    ("shapes.X[-1] / 2 | int", True),  # the filter binds to 2 alone: the division is still a float
    ("[dim(shapes.X, 0), (n / 2) | int]", False), ("[dim(shapes.X, 0), n / 2]", True),
    ("(n / 2 | int) / 1", True), ("((n / 2) | int) // 1", False), ("(n / 2) | float", True),
    ("n / 2 if n else 0", True), ("ceilDiv(n, 2) * 2", False), ("n /", False),
])  # fmt: skip
def test_divides_truly_finds_a_true_division_no_int_filter_takes_back(source, divides):
    """validate warns of an output shape sized with `/` (a float, refused at the call where it is not
    whole): only a division whose own result `| int` converts is exempt; one that does not parse is
    reported by its compile error, not here."""
    from webgpu_kernels.expressions import divides_truly

    assert divides_truly(source) is divides


# --- ** where Jinja and Python differ ----------------------------------------------------------


@pytest.mark.parametrize(("source", "said"), [
    ("-2 ** 30", "a unary minus before ** applies to the base here"),
    ("-2 ** 31.0", "a unary minus before ** applies to the base here"),  # odd integer literals only
    ("-2 ** (31)", "a unary minus before ** applies to the base here"),
    ("-2 ** 3[0]", "a unary minus before ** applies to the base here"),
    ("min(shapes.X) > -2 ** 30", "a unary minus before ** applies to the base here"),
    ("2 * -shapes.X[0] ** 2", "a unary minus before ** applies to the base here"),
    ("1 if true else -numel(shapes.X) ** 2", "a unary minus before ** applies to the base here"),
    ("-+2 ** 2", "a unary minus before ** applies to the base here"),
    ("1 - -+shapes.X[0] ** 2", "a unary minus before ** applies to the base here"),
    ("2 ** 3 ** 2", "a ** b ** c groups to the left here"),
    ("2 ** -ranks.X ** 2", "a ** b ** c groups to the left here"),
])  # fmt: skip
def test_a_power_jinja_reads_otherwise_than_python_is_refused_at_load(source, said):
    """Jinja reads -2 ** 30 as (-2) ** 30 (2^30; Python: -2^30) and 2 ** 3 ** 2 as (2 ** 3) ** 2 (64;
    Python: 512): a `when` clause `min(pads) > -2 ** 30` was false for every call without a word."""
    with pytest.raises(ExpressionError) as info:
        ExpressionCompiler(KNOWN).compile(source, "derive.x")
    assert said in str(info.value) and info.value.where == "derive.x", str(info.value)


@pytest.mark.parametrize(("source", "value"), [
    ("(-2) ** 2", 4), ("-(2 ** 2)", -4), ("-2**31", -2**31), ("-2 ** 3", -8), ("-2.5 ** 1", -2.5), ("3 - 2 ** 2", -1), ("2 ** -1", 0.5), ("(2 ** 3) ** 2", 64),
    ("2 ** (3 ** 2)", 512), ("-2 * 3 ** 2", -18), ("shapes.X[-1] ** 2", 16), ("[-1, 2 ** 2][1]", 4),
    ("1 -+2 ** 2", -3), ("+2 ** 2", 4),
])  # fmt: skip
def test_a_power_written_unambiguously_is_python_s_value(source, value):
    assert ev(source, shapes={"X": (3, 4)}) == value


# --- the functions against independent references (mutation testing found these contracts unasserted) ---------


@settings(max_examples=60, deadline=None)
@given(shape=st.lists(st.integers(0, 9), max_size=5), axis=st.integers(-7, 7))
def test_dim_is_python_indexing_within_the_rank_and_an_error_outside(shape, axis):
    source = f"dim({shape}, {axis})"
    if -len(shape) <= axis < len(shape):
        assert ev(source) == shape[axis]
    else:
        with pytest.raises(ExpressionError, match=re.escape(f"dim(): axis {axis} is out of range for a shape of rank "
                                                            f"{len(shape)}")):  # fmt: skip
            ev(source)


@settings(max_examples=60, deadline=None)
@given(shape=st.lists(st.integers(0, 6), max_size=6))
def test_numel_is_the_product_of_the_dimensions(shape):
    result = ev(f"numel({shape})")
    assert result == int(np.prod(shape, dtype=np.int64)) and type(result) is int  # np.prod(()) == 1, as numel([])


def test_numel_reaches_the_integer_bound_exactly():
    """2^127 (128 bits) is within the bound an integer value has, so numel() gives it; 2^128 is past it."""
    assert ev("numel(shapes.Big)", shapes={"Big": (2**64, 2**63)}) == 2**127
    with pytest.raises(ExpressionError, match="numel\\(\\): the product exceeds the limit of 128 bits"):
        ev("numel(shapes.Big)", shapes={"Big": (2**64, 2**64)})


@settings(max_examples=80, deadline=None)
@given(a=st.integers(-(10**6), 10**6), b=st.integers(-50, 50).filter(bool))
def test_ceil_div_is_the_exact_ceiling_over_signs_and_zero(a, b):
    from fractions import Fraction

    result = ev(f"ceilDiv({a}, {b})")
    assert result == math.ceil(Fraction(a, b)) and type(result) is int


@pytest.mark.parametrize("a, b", [(7.5, 2), (-7.5, 2), (7.5, -2), (0.0, -3), (9.0, 3), (1, 0.25), (-1, 0.3)])
def test_ceil_div_of_floats_is_the_ceiling_as_an_int(a, b):
    result = ev(f"ceilDiv({a}, {b})")
    assert result == math.ceil(a / b) and type(result) is int


@settings(max_examples=60, deadline=None)
@given(shapes=st.lists(st.lists(st.sampled_from([0, 1, 1, 2, 3]), max_size=4), min_size=1, max_size=3))
def test_broadcast_functions_are_numpys_rule(shapes):
    """broadcastable/broadcastShape against np.broadcast_shapes; broadcastStrides of each shape to the
    result against np.broadcast_to's strides in elements (0 on an axis of size 1, which reads index 0)."""
    args = ", ".join(str(s) for s in shapes)
    try:
        want = np.broadcast_shapes(*map(tuple, shapes))
    except ValueError:
        assert ev(f"broadcastable({args})") is False
        with pytest.raises(BroadcastError) as info:
            ev(f"broadcastShape({args})")
        assert info.value.shapes == tuple(map(tuple, shapes))
        return
    assert ev(f"broadcastable({args})") is True and ev(f"broadcastShape({args})") == want
    for shape in shapes:
        strides = ev(f"broadcastStrides({shape}, {list(want)})")
        sizes = [1] * (len(want) - len(shape)) + shape  # a missing leading axis reads as size 1
        if 0 in want:  # NumPy's strides of an empty array are arbitrary: the documented rule, the later sizes' product
            assert strides == tuple(0 if d == 1 else math.prod(sizes[i + 1:]) for i, d in enumerate(sizes))
        else:  # NumPy keeps a stride on an axis of size 1 in both, which is read at index 0 only
            view = np.broadcast_to(np.empty(shape, np.int64), want)
            assert strides == tuple(0 if d == 1 else s // 8 for s, d in zip(view.strides, sizes))
        for other in shapes:  # a shape broadcasts to another's shape exactly when they broadcast to that one
            if tuple(other) != want:
                try:
                    ok = np.broadcast_shapes(tuple(shape), tuple(other)) == tuple(other)
                except ValueError:
                    ok = False
                if not ok:
                    with pytest.raises(ExpressionError, match="does not broadcast to"):
                        ev(f"broadcastStrides({shape}, {other})")


def test_broadcast_counts_up_to_4096_dimensions_in_all():
    assert ev("broadcastShape([1] * 2048, [1] * 2048)") == (1,) * 2048


@pytest.mark.parametrize("source, message", [
    ("sameShape(1, shapes.X)", "sameShape() expects a shape (a list of integers), got 1"),
    ("sameShape(shapes.X, 'ab')", "sameShape() expects a shape (a list of integers), got 'ab'"),
    ("broadcastable(3)", "broadcastable() expects a shape (a list of integers), got 3"),
    ("broadcastShape([2], 3)", "broadcastShape() expects a shape (a list of integers), got 3"),
    ("broadcastStrides(5, [2])", "broadcastStrides() expects a shape (a list of integers), got 5"),
    ("broadcastStrides([2], 'x')", "broadcastStrides() expects a shape (a list of integers), got 'x'"),
    # as written (a list), not as the engine holds it (a tuple)
    ("broadcastStrides([-1], [2])", "broadcastStrides() expects sizes of 0 or more, got [-1]"),
    ("broadcastStrides([1], [-3])", "broadcastStrides() expects sizes of 0 or more, got [-3]"),
    ("broadcastStrides([2, 3], [3])", "broadcastStrides(): [2, 3] does not broadcast to [3]"),
    ("broadcastStrides(shapes.bias, shapes.E)", "broadcastStrides(): [8] does not broadcast to [2, 0, 4]"),
    ("broadcastShape(shapes.X, [4])", "broadcastShape(): [2, 3, 8], [4] do not broadcast: sizes 4 and 8 at axis -1 "
                                      "(counted from the last)"),
    ("broadcastShape([1] * 3000, [1] * 3000)", "broadcastShape() of shapes of more than 4096 dimensions in all"),
    ("broadcastStrides([1] * 3000, [1] * 3000)", "broadcastStrides() of shapes of more than 4096 dimensions in all"),
    ("ceilDiv('a', 2)", "ceilDiv() takes numbers, got 'a' and 2"),
    ("ceilDiv(3, none)", "ceilDiv() takes numbers, got 3 and None"),
    ("ceilDiv(3, 0)", "ceilDiv(): division by zero"), ("ceilDiv(0, 0.0)", "ceilDiv(): division by zero"),
    ("nope + 1", "unknown name 'nope'"),  # no quoting hint where the source is no WGSL type
    ("min([1] * 4000, [1] * 100)", "min() of values of more than 4096 items in all (nested lists count every item)"),
])  # fmt: skip
def test_a_function_refusal_says_what_and_where_in_full(source, message):
    """The docs quote these messages; each names the function as the language spells it."""
    with pytest.raises(ExpressionError) as info:
        ev(source)
    assert str(info.value).endswith(message), str(info.value)
    assert info.value.expression == source and info.value.where == "test"


def test_item_size_lists_the_known_dtypes():
    with pytest.raises(ExpressionError) as info:
        ev("itemSize('f8')")
    known = re.search(r"\(known: (.*)\)$", str(info.value)).group(1).split(", ")
    assert {"f32", "f16", "i64", "bool", "float32", "int64"} <= set(known) and known == sorted(known)


def test_a_call_lacking_a_tensor_names_the_tensor_also_read_further():
    with pytest.raises(ExpressionError, match="shapes.Z: this call has no tensor 'Z' "):
        ev("shapes.Z.real")


def test_peek_shows_what_resolves_and_what_a_membership_test_found_absent():
    expression = ExpressionCompiler(KNOWN).compile(
        "('B' in shapes and shapes.B[0] > 0 and 'X' in shapes) or ('Q' not in ranks and shapes.X.real) or hidden", "w")
    seen = expression.peek(scope(hidden=StrictUndefined(name="hidden")))
    assert seen == {"shapes": ["X", "bias", "E", "S"], "ranks": ["X", "bias", "E", "S"]}  # no B, X.real, hidden
    assert seen["shapes"].absent == ("B",) and seen["ranks"].absent == ("Q",)


def test_a_literal_stands_for_itself_where_it_sits():
    compiler = ExpressionCompiler(KNOWN)
    for value, source in [(True, "true"), (False, "false"), (0, "0"), ([1, 2.5], "[1, 2.5]")]:
        expression = compiler.compile(value, "derive.k")
        assert (expression.source, expression.where, expression.references) == (source, "derive.k", ())
        assert expression.evaluate({}) == value and expression.peek({}) == {}
    with pytest.raises(ExpressionSandboxError) as info:
        compiler.compile([0] * 5000, "derive.k")
    assert info.value.expression == "(a JSON literal)" and info.value.where == "derive.k"
    assert str(info.value).endswith("refused by the sandbox: a literal holds values of more than 4096 items in all "
                                    "(nested lists count every item)")  # fmt: skip


@pytest.mark.parametrize("value, least, said", [(0, 1, "must be an integer of at least 1, got 0"),
                                                (-2, 0, "must be a non-negative integer, got -2"),
                                                (2.5, 3, "must be an integer of at least 3, got 2.5")])  # fmt: skip
def test_a_count_refusal_says_its_bound(value, least, said):
    expression = ExpressionCompiler(KNOWN).compile("hidden", "dispatch.workgroupSize[0]")
    with pytest.raises(ExpressionError) as info:
        as_count(value, expression, "dispatch.workgroupSize", least=least)
    assert str(info.value).endswith(f"dispatch.workgroupSize {said}")


# --- found by mutation testing: evaluate's failures, the compiler's refusals and its bounds at their edges ----------


def test_dim_numel_and_same_shape_read_negative_integers_as_they_are():
    """Only broadcasting holds sizes to 0 or more: `dim(attrs.axes, 0)` of ONNX axes [-1, 2] is -1."""
    assert ev("dim(attrs.axes, 0)", attrs={"axes": [-1, 2]}) == [-1, 2][0]
    assert ev("dim([3, -4], -1)") == -4
    assert ev("numel([-2, 3, 5])") == math.prod([-2, 3, 5])
    assert ev("sameShape(attrs.axes, (-1, 2))", attrs={"axes": [-1, 2]}) is True


@pytest.mark.parametrize("name", ["range", "namespace", "lipsum", "dict", "cycler", "joiner"])
def test_a_known_name_without_a_value_is_undefined_not_a_jinja_global(name):
    """A constant named like one of Jinja's globals, read where it has no value (another variant's), is undefined as
    any other: sharing Jinja's globals would have made `range == 1` a silent False, and the variant taken."""
    expression = ExpressionCompiler([name]).compile(f"{name} == 1", "variants[1].when[0]")
    with pytest.raises(ExpressionError) as info:
        expression.evaluate(scope())
    assert str(info.value).endswith(f"undefined value: '{name}' is undefined"), str(info.value)
    assert expression.evaluate(scope(**{name: 1})) is True


@pytest.mark.parametrize("source, extra, message", [
    ("1e300 ** 2", {}, "1e+300 ** 2 is past float64's range: expected a result within float64's range (at most "
                       "about 1.8e308 in magnitude); test the operands before the operation"),
    ("hidden // 0", {}, "ZeroDivisionError: integer division or modulo by zero"),
    ("hidden % 0", {}, "ZeroDivisionError: integer modulo by zero"),  # docs/format.md quotes this one
    ("shapes.X[9]", {}, "undefined value: tuple object has no element 9"),
    ("hidden", {"hidden": [0] * 5000}, "refused by the sandbox: an expression's result holds values of more than "
                                       "4096 items in all (nested lists count every item)"),
])  # fmt: skip
def test_an_evaluation_failure_says_what_and_where_in_full(source, extra, message):
    with pytest.raises(ExpressionError) as info:
        ExpressionCompiler(KNOWN).compile(source, "derive.d").evaluate(scope(**extra))
    assert str(info.value) == f"derive.d: expression {source!r}: {message}"
    assert (info.value.expression, info.value.where) == (source, "derive.d")


def test_a_broadcast_failure_carries_the_shapes_and_the_reason():
    """A call reports a failed output broadcastShape as a ShapeError built from these (docs/format.md)."""
    with pytest.raises(BroadcastError) as info:
        ev("broadcastShape([2, 3], shapes.bias)")
    assert info.value.shapes == ((2, 3), (8,))
    assert info.value.reason == "sizes 3 and 8 at axis -1 (counted from the last)"


SORTED_FUNCTIONS = ("broadcastShape, broadcastStrides, broadcastable, ceilDiv, dim, f16Ok, itemSize, max, min, numel, "
                    "sameShape")  # fmt: skip


@pytest.mark.parametrize("source, message", [
    ("shapes.X | length", "filter is not allowed in manifest expressions"),
    ("shapes.X is defined", "test is not allowed in manifest expressions"),
    ("range(10)", f"only the functions {SORTED_FUNCTIONS} can be called"),
    ("min(a=1)", "functions take positional arguments only"),
    ("hidden.real", "attribute access is allowed only on shapes, ranks, dtypes, attrs, tunables, device"),
    ("device.adapter", "only device.limits.<name> and device.features can be read from device"),
    ("attrs._private", "names starting with an underscore are not allowed"),
    ("_secret", "unknown name '_secret': names starting with an underscore are not allowed"),
    ("-" * 40 + "1", "nested more than 32 levels deep"),  # each minus is a node
    ("(" * 600 + "1" + ")" * 600, "nested more than 32 levels deep"),  # no node: the parser's recursion
    ("shapes.X[1:2, 0]", "a slice is allowed only as the one subscript of an index (x[a:b], not x[a:b, c])"),
    ("2 ** 128 == 340282366920938463463374607431768211456", "an integer literal of more than 128 bits"),
    ("1e400 > 0", "a float literal past the float64 range"),
])  # fmt: skip
def test_a_refusal_at_compile_says_what_and_where_in_full(source, message):
    with pytest.raises(ExpressionSandboxError) as info:
        ExpressionCompiler(KNOWN).compile(source, "variants[0].when[1]")
    assert str(info.value) == f"variants[0].when[1]: expression {source!r}: {message}"
    assert (info.value.expression, info.value.where) == (source, "variants[0].when[1]")


def test_a_syntax_error_says_what_and_where_in_full():
    with pytest.raises(ExpressionError) as info:
        ExpressionCompiler(KNOWN).compile("1 2", "derive.s")
    assert str(info.value) == "derive.s: expression '1 2': syntax error: unexpected text after the expression"
    assert (info.value.expression, info.value.where) == ("1 2", "derive.s")


def test_an_integer_literal_of_128_bits_is_admitted():
    """'an integer at most 128 bits' (docs/format.md): 2**128 - 1 has 128."""
    assert ev("340282366920938463463374607431768211455") == 2**128 - 1


@pytest.mark.parametrize("source, expected", [
    ("'subgroups' in device.features", True), ("'shader-f16' in device.features", False),
    ("'maxBufferSize' in device.limits", False), ("'maxComputeWorkgroupSizeX' in device.limits", True),
])  # fmt: skip
def test_device_features_and_limits_read_whole(source, expected):
    """`'subgroups' in device.features` guards a subgroup variant (docs/format.md)."""
    assert ev(source, device={"limits": {"maxComputeWorkgroupSizeX": 256}, "features": ["subgroups"]}) is expected


def test_the_functions_called_are_recorded_once_each_in_order():
    """selection reads them: a clause calling f16Ok depends on the device."""
    expression = ExpressionCompiler(KNOWN).compile("f16Ok(dtypes.T) and dim(shapes.X, min(0, 1)) > 0 and f16Ok('f32')",
                                                   "w")  # fmt: skip
    assert expression.calls == ("f16Ok", "dim", "min")
    assert ExpressionCompiler(KNOWN).compile("hidden + 1", "w").calls == ()


def test_a_membership_test_in_a_later_link_of_a_chain_is_recorded():
    """`'A' <= 'B' in shapes` is ('A' <= 'B') and ('B' in shapes): the second link tests B."""
    expression = ExpressionCompiler(KNOWN).compile("'A' <= 'B' in shapes", "w")
    assert expression.membership == (("shapes", "B"),)
    assert expression.evaluate(scope()) is False and expression.peek(scope())["shapes"].absent == ("B",)


@pytest.mark.parametrize("value, message", [
    ({"a": [1, 2**200]}, "an integer of 201 bits exceeds the limit of 128"),
    ({"a": {"b": "x" * 5000}}, "a string of 5000 characters exceeds the limit of 4096"),
])  # fmt: skip
def test_a_mapping_value_is_bounded_through_its_values(value, message):
    """A dict's values are checked as a list's items are, not its keys alone."""
    with pytest.raises(ExpressionSandboxError) as info:
        ExpressionCompiler(KNOWN).compile(value, "derive.m")
    assert str(info.value).endswith(f"refused by the sandbox: {message}")
    with pytest.raises(ExpressionSandboxError, match=re.escape(message)):
        ev("attrs", attrs=value)


def test_a_function_inside_a_value_is_refused_in_full():
    with pytest.raises(ExpressionSandboxError) as info:
        ev("[1, [numel]]")
    assert str(info.value).endswith("refused by the sandbox: a function is not a value (call it)")


def test_a_package_holds_at_most_max_expressions_distinct_sources(monkeypatch):
    """The loader counts them first (test_manifest); the compiler holds the same bound itself."""
    from webgpu_kernels import expressions

    monkeypatch.setattr(expressions, "MAX_EXPRESSIONS", 3)
    compiler = ExpressionCompiler(KNOWN)
    for i in range(3):
        compiler.compile(f"hidden + {i}", f"constants.c{i}")
    source = "hidden * " + " + ".join(["1"] * 30)  # over 80 characters: the error keeps the first 80
    with pytest.raises(ExpressionSandboxError) as info:
        compiler.compile(source, "constants.c3")
    assert str(info.value) == f"constants.c3: expression {source[:80]!r}: the package has more than 3 distinct expressions"
    assert (info.value.expression, info.value.where) == (source[:80], "constants.c3")
    assert compiler.compile("hidden + 2", "again").evaluate(scope()) == 10  # a source compiled already costs nothing


def test_the_expression_text_bound_is_reached_exactly():
    """MAX_EXPRESSION_CHARS in all (16 sources of 4096 characters, the most one may hold) loads; one character more
    is refused, a source of 4096 characters too, with the total's error rather than compiled."""
    from webgpu_kernels.expressions import MAX_EXPRESSION_CHARS

    assert MAX_EXPRESSION_CHARS == 16 * 4096
    compiler = ExpressionCompiler(())
    sources = [f"'{i:04d}" + "a" * 4090 + "'" for i in range(17)]
    for i, source in enumerate(sources[:16]):
        assert len(source) == 4096 and compiler.compile(source, f"constants.c{i}").evaluate({}) == source[1:-1]
    for extra in ("1", sources[16]):
        with pytest.raises(ExpressionSandboxError) as info:
            compiler.compile(extra, "constants.c16")
        assert str(info.value) == (f"constants.c16: expression {extra[:80]!r}: the package's expressions hold more "
                                   f"than {MAX_EXPRESSION_CHARS} characters together")  # fmt: skip
        assert (info.value.expression, info.value.where) == (extra[:80], "constants.c16")


def test_a_source_longer_than_4096_characters_is_refused_in_full():
    source = "'" + "a" * 4095 + "'"
    with pytest.raises(ExpressionSandboxError) as info:
        ExpressionCompiler(()).compile(source, "derive.long")
    assert str(info.value) == f"derive.long: expression {source[:80] + '...'!r}: expression is longer than 4096 characters"
    assert (info.value.expression, info.value.where) == (source[:80] + "...", "derive.long")


def test_values_nested_past_python_s_recursion_limit_are_refused_when_compared():
    """Comparing two lists 3000 levels deep recurses past Python's limit: a sandbox refusal naming the expression."""
    a: object = 1
    b: object = 1
    for _ in range(3000):
        a, b = [a], [b]
    expression = ExpressionCompiler(KNOWN).compile("attrs.a == attrs.b", "variants[0].when[0]")
    with pytest.raises(ExpressionSandboxError) as info:
        expression.evaluate(scope(attrs={"a": a, "b": b}))
    assert str(info.value) == "variants[0].when[0]: expression 'attrs.a == attrs.b': refused by the sandbox: nested too deeply"
    assert (info.value.expression, info.value.where) == ("attrs.a == attrs.b", "variants[0].when[0]")


def test_a_name_with_a_double_underscore_inside_is_read_as_any_other():
    """An attribute `a__b` is an identifier the manifest schema admits, and starts with no underscore: `attrs.a__b`
    had been refused at load as a name "starting with an underscore", though `attrs['a__b']` read it."""
    assert ev("attrs.a__b + attrs['a__b']", attrs={"a__b": 3}) == 6
    assert ev("shapes.in__put", shapes={"in__put": (2, 5)}) == (2, 5)
    with pytest.raises(ExpressionSandboxError, match="names starting with an underscore are not allowed"):
        ExpressionCompiler(KNOWN).compile("attrs.__class__", "w")
