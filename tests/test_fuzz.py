"""Fuzzing with hypothesis: generated expressions, templates, template contexts, mutated manifests
and call inputs. The library must raise only its own errors (KernelError subclasses: never a
TypeError, KeyError or RecursionError from inside), never hang, and never dispatch a shader for a
call that failed its contract (nor leave GPU state behind).

CI runs 1,900 cases (``derandomize``: the same ones each run). The four tests that dispatch
nothing run half the cases they had (1,400 of 2,800): the bugs put back into src/ that the old
budget found, the new one finds too (ceilDiv's division by zero raised as a RuntimeError, the
template renderer letting a Python exception through, manifests not checked against the schema).
The call inputs keep their 500: at 400 and 300 a dtype the contract no longer checked went unnoticed.
``python scripts/fuzz_long.py`` runs the same strategies with many more, randomly
(``WK_FUZZ_SCALE`` multiplies every ``max_examples``; ``WK_FUZZ_RANDOM=1`` drops ``derandomize``).
"""

from __future__ import annotations

import copy
import json
import math
import os
import time
from pathlib import Path
from unittest import mock

import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

import webgpu_kernels as wk
from webgpu_kernels import errors
from webgpu_kernels.api import to_gpu
from webgpu_kernels.contract import check_call
from webgpu_kernels.expressions import STATIC_FUNCTIONS, ExpressionCompiler
from webgpu_kernels.kernel import Kernel
from webgpu_kernels.manifest import parse_manifest
from webgpu_kernels.package import KernelPackage, embedded_root
from webgpu_kernels.rendering import TemplateRenderer
from webgpu_kernels.sandbox import MAX_INT_BITS, MAX_SEQUENCE_LENGTH, RenderBudget, SandboxViolation, render_budget

from conftest import PACKAGES_DIR

SCALE = float(os.environ.get("WK_FUZZ_SCALE", "1"))
RANDOM = os.environ.get("WK_FUZZ_RANDOM") == "1"


def fuzz_settings(examples: int) -> settings:
    return settings(
        max_examples=max(1, int(examples * SCALE)), deadline=None, derandomize=not RANDOM, database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much,
                               HealthCheck.function_scoped_fixture],
    )  # fmt: skip


#: Seconds one example may take in the long run (scripts/fuzz_long.py sets it: 3 there), which
#: hunts slow cases; the suite times nothing (a 3 s bound failed on a loaded machine).
SLOW_S = float(os.environ.get("WK_FUZZ_SLOW_S", "0"))
#: What the render deadline's error says: the wall-clock stop, for work no limit counts.
DEADLINE_TEXT = "took longer than"


def timed(call):
    """``call()``, failing when a render in it was stopped by the deadline (10 s of work that a limit
    counting work units, sizes or depth should have stopped) or, in the long run, took SLOW_S."""
    stops: list[str] = []
    real_charge = RenderBudget.charge

    def charge(budget: RenderBudget, units: int) -> None:
        try:
            real_charge(budget, units)
        except SandboxViolation as exc:
            if DEADLINE_TEXT in str(exc):
                stops.append(str(exc))
            raise

    started = time.perf_counter()
    with mock.patch.object(RenderBudget, "charge", charge):
        try:
            return call()
        finally:
            assert not stops, f"stopped by the render deadline, not by a limit that counts: {stops}"
            assert not SLOW_S or time.perf_counter() - started < SLOW_S, "a fuzz case took too long"


# --- expressions ---------------------------------------------------------------------------------

GOOD_NAMES = ["hidden", "n", "baseOk", "shapes.X", "shapes.bias", "shapes.E", "shapes.S", "ranks.X", "dtypes.T",
              "attrs.alpha", "attrs.axes", "attrs.name", "tunables.WORKGROUP_SIZE",
              "device.limits.maxComputeWorkgroupSizeX", "device.limits.maxStorageBufferBindingSize"]  # fmt: skip
BAD_NAMES = ["nope", "_secret", "self", "cycler", "lipsum", "joiner", "namespace", "range", "dict", "config",
             "__builtins__", "shapes.Z", "attrs.beta", "device.adapter", "shapes.__class__", "attrs.items",
             "shapes.X.__len__", "loop", "caller", "varargs"]  # fmt: skip
FUNCTIONS = sorted(STATIC_FUNCTIONS) + ["f16Ok", "range", "getattr", "lipsum", "dict", "cycler", "__import__"]
BINARY = ["+", "-", "*", "/", "//", "%", "**", "~", "and", "or", "==", "!=", "<", "<=", ">", ">=", "in", "not in"]
ATTRIBUTES = ["__class__", "__mro__", "__globals__", "__init__", "format", "format_map", "mro", "items", "upper",
              "real", "X", "T", "alpha", "_private", "__subclasses__"]  # fmt: skip
FILTERS = ["length", "center(5000000)", "format(1)", "attr('__class__')", "join", "list", "upper", "string"]

literals = st.one_of(
    st.integers(-(2**70), 2**70).map(str),
    st.sampled_from(["0", "1", "4", "-1", "4096", "10**8", "2**127", "9" * 60, "1" + "0" * 45]),
    st.floats(allow_nan=False, allow_infinity=False).map(repr),
    st.sampled_from(["1e308", "1e-308", "0.5", "-0.0", "1.702"]),
    st.text(alphabet="ab{}%0:>.~'\\ x_", max_size=12).map(lambda s: repr(s)),
    st.sampled_from(["true", "false", "none", "True", "None", "'{0.__class__}'", "'%s'", "'%0100000000d'", "''"]),
)
names = st.sampled_from(GOOD_NAMES + BAD_NAMES)


def _extend(children: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    return st.one_of(
        st.tuples(children, st.sampled_from(BINARY), children).map(lambda t: f"({t[0]} {t[1]} {t[2]})"),
        st.tuples(st.sampled_from(["-", "+", "not "]), children).map(lambda t: f"{t[0]}({t[1]})"),
        st.tuples(children, children, children).map(lambda t: f"({t[0]} if {t[1]} else {t[2]})"),
        st.tuples(st.sampled_from(FUNCTIONS), st.lists(children, max_size=3)).map(
            lambda t: f"{t[0]}({', '.join(t[1])})"),
        st.lists(children, max_size=4).map(lambda xs: "[" + ", ".join(xs) + "]"),
        st.lists(children, min_size=2, max_size=3).map(lambda xs: "(" + ", ".join(xs) + ")"),
        st.tuples(children, children).map(lambda t: f"{t[0]}[{t[1]}]"),
        st.tuples(children, st.sampled_from(ATTRIBUTES)).map(lambda t: f"({t[0]}).{t[1]}"),
        st.tuples(children, st.sampled_from(FILTERS)).map(lambda t: f"({t[0]}) | {t[1]}"),
        st.tuples(children, st.sampled_from(["defined", "odd", "string"])).map(lambda t: f"({t[0]}) is {t[1]}"),
        children.map(lambda c: f"{c}[1:]"),
        st.tuples(children, children, children).map(lambda t: f"{t[0]}[{t[1]}:{t[2]}]"),
        st.tuples(children, children, children).map(lambda t: f"{t[0]}[::{t[1]}][{t[2]}:]"),
        st.tuples(children, children, children).map(lambda t: f"{t[0]}[{t[1]}:, {t[2]}]"),
        children.map(lambda c: "{'a': " + c + "}"),
        children.map(lambda c: f"min(x={c})"),
        children.map(lambda c: f"max(*{c})"),
        st.tuples(children, st.integers(1, 9)).map(lambda t: "(" * t[1] + t[0] + ")" * t[1]),
    )


def _extend_valid(children: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    return st.one_of(
        st.tuples(children, st.sampled_from(BINARY), children).map(lambda t: f"({t[0]} {t[1]} {t[2]})"),
        st.tuples(st.sampled_from(["-", "not "]), children).map(lambda t: f"{t[0]}({t[1]})"),
        st.tuples(children, children, children).map(lambda t: f"({t[0]} if {t[1]} else {t[2]})"),
        st.tuples(st.sampled_from([*sorted(STATIC_FUNCTIONS), "f16Ok"]),
                  st.lists(children, min_size=1, max_size=2)).map(lambda t: f"{t[0]}({', '.join(t[1])})"),
        st.lists(children, max_size=3).map(lambda xs: "[" + ", ".join(xs) + "]"),
        st.tuples(children, st.sampled_from(["0", "-1", "1", "'X'"])).map(lambda t: f"{t[0]}[{t[1]}]"),
        st.tuples(children, st.sampled_from(["1:", ":-1", "::-1", "0:2"])).map(lambda t: f"{t[0]}[{t[1]}]"),
    )


valid_literals = st.one_of(st.integers(-100, 10**6).map(str), st.sampled_from(["0.5", "4", "'f16'", "'vec4<'", "true"]))
valid_expressions = st.recursive(st.one_of(valid_literals, st.sampled_from(GOOD_NAMES)), _extend_valid, max_leaves=8)
hostile_expressions = st.recursive(st.one_of(literals, names), _extend, max_leaves=12)
expressions = st.one_of(valid_expressions, hostile_expressions)
KNOWN = ("hidden", "n", "baseOk")


def expression_scope() -> dict:
    scope = dict(STATIC_FUNCTIONS)
    scope["f16Ok"] = lambda dtype: dtype != "f16"
    scope.update(
        shapes={"X": (2, 3, 8), "bias": (8,), "E": (2, 0, 4), "S": ()}, ranks={"X": 3, "bias": 1, "E": 3, "S": 0},
        dtypes={"T": "f16"}, attrs={"alpha": 1.702, "axes": [1, 2], "name": "x" * 4000},
        tunables={"WORKGROUP_SIZE": 256},
        device={"limits": {"maxComputeWorkgroupSizeX": 256, "maxStorageBufferBindingSize": 2**27}},
        hidden=8, n=48, baseOk=True,
    )  # fmt: skip
    return scope


def assert_bounded(value) -> None:
    if isinstance(value, str):
        assert len(value) <= MAX_SEQUENCE_LENGTH
    elif isinstance(value, (list, tuple)):
        assert len(value) <= MAX_SEQUENCE_LENGTH
    elif isinstance(value, int) and not isinstance(value, bool):
        assert value.bit_length() <= MAX_INT_BITS
    assert not callable(value)


@fuzz_settings(750)
@given(source=expressions)
def test_fuzz_expressions(source):
    def run():
        try:
            expression = ExpressionCompiler(KNOWN).compile(source, "fuzz")
            value = expression.evaluate(expression_scope())
        except errors.ExpressionError as exc:
            assert exc.where == "fuzz"
            event(type(exc).__name__)
            return
        event("value")
        assert_bounded(value)

    timed(run)


# --- templates -----------------------------------------------------------------------------------

TEMPLATE_NAMES = ["scalar", "vec4", "lanes", "n", "attrs.scale", "tunables.WORKGROUP_SIZE", "bindings.x.name",
                  "bindings.params.struct", "bindingList", "workgroupSize", "dtypes.T", "constants", "inputs",
                  "bindings.items()", "range(3)", "range(100000)", "loop.index", "self", "nope", "cycler",
                  "''.format", "bindings.__class__", "scalar.upper"]  # fmt: skip
TEMPLATE_FILTERS = ["length", "join(',')", "join('x' * 100000)", "upper", "list", "first", "last", "string",
                    "indent(4)", "indent(100000000)", "replace('a', 'bb')", "replace('', 'xxxx')", "default('d')",
                    "int", "float", "round", "abs", "max", "min", "trim", "wgsl_float", "wgsl_uint", "center(9)",
                    "format(1)", "attr('x')", "map(attribute='name')", "pprint"]  # fmt: skip

template_expressions = st.recursive(
    st.one_of(literals, st.sampled_from(TEMPLATE_NAMES)),
    lambda children: st.one_of(
        st.tuples(children, st.sampled_from(BINARY), children).map(lambda t: f"({t[0]} {t[1]} {t[2]})"),
        st.tuples(children, st.sampled_from(TEMPLATE_FILTERS)).map(lambda t: f"({t[0]})|{t[1]}"),
        st.tuples(children, children, children).map(lambda t: f"({t[0]} if {t[1]} else {t[2]})"),
        st.tuples(children, children).map(lambda t: f"{t[0]}[{t[1]}]"),
        st.tuples(children, children, children).map(lambda t: f"{t[0]}[{t[1]}:{t[2]}]"),
        st.tuples(children, st.sampled_from(ATTRIBUTES)).map(lambda t: f"({t[0]}).{t[1]}"),
        st.lists(children, max_size=3).map(lambda xs: "[" + ", ".join(xs) + "]"),
        st.tuples(children, st.sampled_from(["defined", "odd", "even", "divisibleby(3)", "string", "number"])).map(
            lambda t: f"({t[0]}) is {t[1]}"),
    ),
    max_leaves=8,
)


def _statements(children: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    return st.one_of(
        st.tuples(template_expressions, children, children).map(
            lambda t: f"{{% if {t[0]} %}}{t[1]}{{% else %}}{t[2]}{{% endif %}}"),
        st.tuples(template_expressions, children).map(lambda t: f"{{% for v in {t[0]} %}}{t[1]}{{% endfor %}}"),
        st.tuples(st.sampled_from(["s", "scalar", "t"]), template_expressions).map(
            lambda t: f"{{% set {t[0]} = {t[1]} %}}"),
        st.tuples(children, template_expressions).map(
            lambda t: f"{{% macro m(a) %}}{t[0]}{{% endmacro %}}{{{{ m({t[1]}) }}}}"),
        st.lists(children, min_size=2, max_size=3).map("".join),
        children.map(lambda c: f"{{% filter upper %}}{c}{{% endfilter %}}"),
        children.map(lambda c: f"{{% set b %}}{c}{{% endset %}}{{{{ b ~ b }}}}"),
        st.sampled_from(["{% include 'other.wgsl' %}", "{% include '../x' %}", "{% extends 'other.wgsl' %}",
                         "{% import 'other.wgsl' as o %}{{ o.m(1) }}", "{% block b %}x{% endblock %}",
                         "{% set s = s ~ s %}", "{% raw %}{{ x }}{% endraw %}", "{% for %}", "{{ }}", "{%"]),
    )


templates = st.recursive(
    st.one_of(template_expressions.map(lambda e: "{{ " + e + " }}"), st.sampled_from(["// text\n", "x", "\n", ""])),
    _statements,
    max_leaves=10,
)

DEMO_MANIFEST = json.loads((PACKAGES_DIR / "demo.ScaleShift" / "manifest.json").read_text())
DEMO_TEMPLATE = (PACKAGES_DIR / "demo.ScaleShift" / "scale-shift.wgsl.jinja").read_text()
OTHER = "{% macro m(a) %}[{{ a }}]{% endmacro %}// other {{ scalar }}\n"


@pytest.fixture(scope="module")
def demo_resolution():
    """A real resolved pass and scope of the demo package (for rendering fuzzed templates)."""
    package = KernelPackage(root=PACKAGES_DIR / "demo.ScaleShift", origin="local")
    kernel = Kernel(package)
    signature = check_call(kernel.manifest, {"X": ((2, 6), "float32")}, {"scale": 2.0}, None)
    _, resolved, scope = kernel._resolve(signature, None, wk.get_device().info)
    return resolved[0], scope


def render_text(template: str, resolved, scope, budget: RenderBudget | None = None) -> str:
    files = {resolved.shader: template, "other.wgsl": OTHER}

    def read(name: str) -> str:
        if name not in files:
            raise errors.PackageError("no such file", path=name)
        return files[name]

    # A smaller work budget than a real render's, so that fuzzed loops end fast (same mechanism).
    with render_budget(budget or RenderBudget(work_limit=40_000)):
        return TemplateRenderer(read).render(resolved, scope)


@fuzz_settings(300)
@given(template=templates)
def test_fuzz_templates(template, demo_resolution):
    resolved, scope = demo_resolution

    def run():
        try:
            text = render_text(template + "\n" + DEMO_TEMPLATE, resolved, scope)
        except errors.TemplateError as exc:
            assert exc.file
            event(type(exc).__name__)
            return
        event("rendered")
        assert isinstance(text, str)

    timed(run)


json_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-(2**200), 2**200), st.floats(), st.text(max_size=20),
              st.sampled_from(["{{ 7 * 7 }}", "{0.__class__}", "%s"]), st.just(100_000).map(lambda n: "x" * n)),
    lambda children: st.one_of(st.lists(children, max_size=4),
                               st.dictionaries(st.text(max_size=5), children, max_size=3)),
    max_leaves=10,
)  # fmt: skip
CONTEXT_NAMES = ["scalar", "vec4", "lanes", "n", "quads", "vec4Ok", "workgroupOk", "vectorType", "hidden", "alpha",
                 "usesF16", "vec4Tail", "itemsPerInvocation", "vectorScalar", "extra"]  # fmt: skip


@pytest.fixture(scope="module")
def seed_resolutions():
    """(renderer, resolved pass, scope) of each seed kernel and variant."""
    out = []
    device = wk.get_device()
    cases = [("com.microsoft.QuickGelu", {"X": ((4, 8), "float32")}),
             ("com.microsoft.BiasAdd", {"X": ((1, 2, 8), "float32"), "bias": ((8,), "float32"),
                                        "skip": ((1, 2, 8), "float32")})]  # fmt: skip
    for name, metas in cases:
        kernel = wk.get_kernel(name)
        for variant in kernel.variants:
            signature = check_call(kernel.manifest, metas, None, None)
            try:
                _, resolved, scope = kernel._resolve(signature, variant, device.info)
            except errors.KernelError:
                continue
            out.append((kernel.renderer, resolved[0], scope))
    return out


@fuzz_settings(150)
@given(data=st.data())
def test_fuzz_template_contexts(data, seed_resolutions):
    """The seed templates rendered with constants of every kind: a WGSL text or a TemplateError."""
    renderer, resolved, scope = data.draw(st.sampled_from(seed_resolutions))
    constants = data.draw(st.dictionaries(st.sampled_from(CONTEXT_NAMES), json_values, max_size=6))
    scope = {**scope, **constants}

    def run():
        try:
            text = renderer.render(resolved, scope)
        except errors.TemplateError as exc:
            event(type(exc).__name__)
            return
        event("rendered")
        assert isinstance(text, str)

    timed(run)


# --- manifests -----------------------------------------------------------------------------------

SEEDS = {
    "quick-gelu": json.loads((embedded_root() / "com.microsoft.QuickGelu" / "manifest.json").read_text()),
    "bias-add": json.loads((embedded_root() / "com.microsoft.BiasAdd" / "manifest.json").read_text()),
    "scale-shift": DEMO_MANIFEST,
}


@pytest.fixture(scope="module")
def seed_package(tmp_path_factory) -> KernelPackage:
    """A folder holding every seed's templates (and the include target), for mutated manifests."""
    root = tmp_path_factory.mktemp("fuzz-package")
    for folder in (embedded_root() / "com.microsoft.QuickGelu", embedded_root() / "com.microsoft.BiasAdd",
                   PACKAGES_DIR / "demo.ScaleShift"):  # fmt: skip
        for path in Path(folder).glob("*.wgsl.jinja"):
            (root / path.name).write_text(path.read_text())
    (root / "manifest.json").write_text("{}")
    return KernelPackage(root=root, origin="local")


def _paths(value, prefix=()):
    yield prefix
    if isinstance(value, dict):
        for key, child in value.items():
            yield from _paths(child, (*prefix, key))
    elif isinstance(value, list):
        for i, child in enumerate(value):
            yield from _paths(child, (*prefix, i))


def _parent(root, path):
    node = root
    for part in path[:-1]:
        node = node[part]
    return node


@st.composite
def mutated_manifests(draw):
    manifest = copy.deepcopy(SEEDS[draw(st.sampled_from(sorted(SEEDS)))])
    for _ in range(draw(st.integers(1, 3))):
        paths = [p for p in _paths(manifest) if p]
        strings = [p for p in paths if isinstance(_parent(manifest, p)[p[-1]], str)]
        path = draw(st.sampled_from(strings if strings and draw(st.booleans()) else paths))
        parent, key = _parent(manifest, path), path[-1]
        action = draw(st.sampled_from(["value", "expression", "expression", "delete", "duplicate", "type"]))
        if action == "value":
            parent[key] = draw(json_values)
        elif action == "expression":
            parent[key] = draw(expressions)
        elif action == "delete":
            del parent[key]
        elif action == "duplicate" and isinstance(parent, list):
            parent.append(copy.deepcopy(parent[key]))
        elif action == "type":
            parent[key] = draw(st.sampled_from([[], {}, 0, "", None, True, 1e308, -1, 2**70, "x" * 5000]))
    return manifest


def _metas(manifest):
    metas = {}
    for spec in manifest.inputs:
        rank = spec.rank if isinstance(spec.rank, int) and 0 <= spec.rank <= 6 else 3
        metas[spec.role] = wk.TensorMeta((4,) * rank, "float32")
    return metas


@fuzz_settings(200)
@given(data=mutated_manifests())
def test_fuzz_manifests(data, seed_package):
    """Mutated seed manifests load, explain and render, or fail with the library's error."""

    def run():
        try:
            manifest = parse_manifest(data)
            kernel = Kernel(seed_package, manifest)
        except errors.KernelError as exc:
            event(f"load: {type(exc).__name__}")
            return
        for what, attempt in (("explain", lambda: kernel.explain(_metas(manifest))),
                              ("render", lambda: kernel.render(_metas(manifest)))):  # fmt: skip
            try:
                attempt()
                event(f"{what}: ok")
            except errors.KernelError as exc:
                event(f"{what}: {type(exc).__name__}")

    timed(run)


# --- call inputs: real calls on the device ---------------------------------------------------------

ALPHAS = [1.702, 0.5]  # alpha is baked into QuickGelu's WGSL: few values, few pipelines
BAD_ALPHAS = [float("nan"), float("inf"), -float("inf"), 1e39, 2**70, "1.7", None, [1.0], True, np.float32(np.nan),
              np.array([1.0, 2.0]), {"a": 1}, object()]  # fmt: skip
DTYPES = ["float32", "float32", "float16", "float64", "int32", "bool", "complex64", "object", "<U2", "uint8"]
WORKGROUPS = [0, -1, 1.5, 2048, 2**40, 2**70, "64", True, None, float("nan")]


@st.composite
def calls(draw):
    """(kernel name, input metas, options, GPU-resident inputs?, seed): about half well formed, the rest
    with one to three things broken (shapes, ranks, dtypes, missing or extra inputs, attributes,
    tunables, variant, output kind)."""
    name = draw(st.sampled_from(["com.microsoft.QuickGelu", "com.microsoft.BiasAdd"]))
    dtype = draw(st.sampled_from(["float32", "float32", "float16"]))
    dims = st.integers(0, 5)
    if name == "com.microsoft.QuickGelu":
        inputs = {"X": (tuple(draw(st.lists(dims, max_size=4))), dtype)}
        attrs_ok = {"alpha": draw(st.sampled_from(ALPHAS))}
    else:
        n, s, c = draw(dims), draw(dims), draw(st.sampled_from([4, 8, 3]))
        inputs = {"X": ((n, s, c), dtype), "bias": ((c,), dtype), "skip": ((n, s, c), dtype)}
        attrs_ok = {}
    options = {"output": draw(st.sampled_from(["numpy", "gpu"]))}
    if attrs_ok and draw(st.booleans()):
        options["attrs"] = attrs_ok
    if draw(st.booleans()):
        options["tunables"] = {"WORKGROUP_SIZE": draw(st.sampled_from([64, 256]))}
    for _ in range(draw(st.sampled_from([0, 0, 1, 1, 2, 3]))):
        how = draw(st.sampled_from(["shape", "rank", "dtype", "missing", "extra", "attr", "unknown-attr", "tunable",
                                    "unknown-tunable", "variant", "output"]))  # fmt: skip
        role = draw(st.sampled_from(sorted(inputs))) if inputs else None
        if how == "shape" and role:
            shape_, dtype_ = inputs[role]
            inputs[role] = (tuple(d + draw(st.integers(1, 2)) for d in shape_), dtype_)
        elif how == "rank" and role:
            shape_, dtype_ = inputs[role]
            inputs[role] = ((*shape_, 1) if draw(st.booleans()) or not shape_ else shape_[1:], dtype_)
        elif how == "dtype" and role:
            inputs[role] = (inputs[role][0], draw(st.sampled_from(DTYPES)))
        elif how == "missing" and role:
            del inputs[role]
        elif how == "extra":
            inputs[draw(st.sampled_from(["extra", "Y", "x"]))] = ((2,), "float32")
        elif how == "attr":
            options["attrs"] = {"alpha": draw(st.sampled_from(BAD_ALPHAS))}
        elif how == "unknown-attr":
            options["attrs"] = {draw(st.sampled_from(["beta", "ALPHA", ""])): 1.0}
        elif how == "tunable":
            options["tunables"] = {"WORKGROUP_SIZE": draw(st.sampled_from(WORKGROUPS))}
        elif how == "unknown-tunable":
            options["tunables"] = {"TILE": 4}
        elif how == "variant":
            options["variant"] = draw(st.sampled_from(["vec4", "vec4_tail", "scalar", "nope"]))
        elif how == "output":
            options["output"] = draw(st.sampled_from(["torch", "", None, "GPU"]))
    return name, inputs, options, draw(st.booleans()), draw(st.integers(0, 2**32 - 1))


def _array(shape, dtype, rng):
    if dtype == "object":
        return np.array([object()] * math.prod(shape), dtype=object).reshape(shape)
    if dtype == "<U2":
        return np.full(shape, "ab")
    return (rng.standard_normal(shape) * 3).astype(dtype)


def _reference(name, arrays, attrs):
    if name == "com.microsoft.QuickGelu":
        x = arrays["X"].astype(np.float64)
        alpha = float((attrs or {}).get("alpha", 1.702))
        with np.errstate(over="ignore"):
            return x / (1 + np.exp(-alpha * x))
    return arrays["X"].astype(np.float64) + arrays["bias"].astype(np.float64) + arrays["skip"].astype(np.float64)


@pytest.fixture
def dispatch_spy(monkeypatch):
    """Counts run_plan calls (every dispatch goes through it)."""
    import webgpu_kernels.kernel as kernel_module

    real = kernel_module.run_plan
    calls = []

    def spy(*args, **kwargs):
        calls.append(args[1])
        return real(*args, **kwargs)

    monkeypatch.setattr(kernel_module, "run_plan", spy)
    return calls


def gpu_state(device):
    memory = device.memory
    return memory.live_buffers, memory.pooled_bytes, memory._pending


@fuzz_settings(500)
@given(case=calls())
def test_fuzz_call_inputs(case, dispatch_spy, device, has_f16):
    name, metas, options, gpu_inputs, seed = case
    kernel = wk.get_kernel(name)
    rng = np.random.default_rng(seed)
    arrays = {role: _array(shape, dtype, rng) for role, (shape, dtype) in metas.items()}
    originals = {role: a.copy() for role, a in arrays.items()}
    inputs = dict(arrays)
    if gpu_inputs:
        for role, a in arrays.items():
            if a.dtype in (np.float32, np.float16) and (a.dtype != np.float16 or has_f16):
                inputs[role] = to_gpu(a)
    dispatch_spy.clear()
    before, plans = gpu_state(device), len(kernel._plans)
    try:
        result = timed(lambda: kernel(inputs, **options))
    except errors.KernelError as exc:
        event(type(exc).__name__)
        assert not dispatch_spy, f"dispatched although the call failed: {exc}"
        assert gpu_state(device) == before, "a failed call left GPU state behind"
        if isinstance(exc, (errors.InputError, errors.SelectionError)) and not isinstance(exc, errors.DeviceLimitError):
            assert len(kernel._plans) == plans, "a plan was built for a call that failed its contract"
        for role, a in arrays.items():
            np.testing.assert_array_equal(a, originals[role])
        return
    finally:
        for value in inputs.values():
            if isinstance(value, wk.GpuTensor):
                value.release()
    event("ran")
    assert len(dispatch_spy) == 1
    y = result["Y"]
    if isinstance(y, wk.GpuTensor):
        y_host = y.numpy()
        y.release()
        y = y_host
    expected = _reference(name, arrays, options.get("attrs"))
    assert y.shape == expected.shape and y.dtype == arrays["X"].dtype
    tol = 2e-3 if y.dtype == np.float16 else 1e-5
    with np.errstate(over="ignore", invalid="ignore"):
        np.testing.assert_allclose(y.astype(np.float64), expected.astype(y.dtype).astype(np.float64),
                                   rtol=tol, atol=tol)  # fmt: skip
    for role, a in arrays.items():
        np.testing.assert_array_equal(a, originals[role])
