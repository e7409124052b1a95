"""Rendering: the WGSL of each variant (declarations, enables, workgroup size, baked constants),
the template context, the filters, the sandbox, and the dispatch grid (spill into y and z)."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

import webgpu_kernels as wk
from webgpu_kernels import errors
from webgpu_kernels.rendering import workgroup_grid
from webgpu_kernels.sandbox import SandboxViolation
from webgpu_kernels.templates import (
    MAX_TEMPLATE_ITEMS,
    PackageLoader,
    TemplateSandbox,
    template_error,
    wgsl_float,
    wgsl_uint,
)

from conftest import PACKAGES_DIR

f32, f16 = np.float32, np.float16


def meta(shape, dtype):
    return wk.TensorMeta(tuple(shape), np.dtype(dtype).name)


def bias_metas(shape, dtype):
    return {"X": meta(shape, dtype), "bias": meta(shape[-1:], dtype), "skip": meta(shape, dtype)}


# --- the seed kernels' WGSL ---------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [f32, f16], ids=["f32", "f16"])
@pytest.mark.parametrize("variant, element", [("vec4", "vec4<{t}>"), ("vec4_tail", "{t}"), ("scalar", "{t}")])
def test_quick_gelu_wgsl(quick_gelu, need_dtype, dtype, variant, element):
    need_dtype(dtype)
    t = "f16" if dtype is f16 else "f32"
    wgsl = quick_gelu.render({"X": meta((8,), dtype)}, variant=variant)
    assert list(wgsl) == ["main"]
    text = wgsl["main"]
    assert text.lstrip().startswith("enable f16;") == (dtype is f16)
    assert ("enable f16;" in text) == (dtype is f16)
    # f16 vec4 views the same bytes as 16-byte units (8 halves), every other workgroup working
    wide = variant == "vec4" and dtype is f16
    el = "vec4<u32>" if wide else element.format(t=t)
    assert f"@group(0) @binding(0) var<storage, read> x: array<{el}>;" in text
    assert f"@group(0) @binding(1) var<storage, read_write> y: array<{el}>;" in text
    assert "@group(0) @binding(2) var<uniform> params: Params;" in text
    assert "struct Params {\n  count: u32,\n};" in text
    assert text.index("struct Params") < text.index("var<uniform> params")
    assert "@compute @workgroup_size(256)" in text
    assert "const ALPHA: f32 = 1.702;" in text
    if wide:
        assert "let wg = (wid.z * nwg.y + wid.y) * nwg.x + wid.x;" in text and "(wg / 2u) * 256u + lix" in text
    else:
        assert "((wid.z * nwg.y + wid.y) * nwg.x + wid.x) * 256u + lix" in text
    assert "{{" not in text and "{%" not in text


@pytest.mark.parametrize("alpha, literal", [(1.702, "1.702"), (1, "1.0"), (0.0, "0.0"), (-0.5, "-0.5"), (1e-5, "1e-05"),
                                            (2.5e10, "25000000000.0")])  # fmt: skip
def test_alpha_is_baked_as_a_wgsl_literal(quick_gelu, alpha, literal):
    text = quick_gelu.render({"X": meta((5,), f32)}, attrs={"alpha": alpha})["main"]
    assert f"const ALPHA: f32 = {literal};" in text


@pytest.mark.parametrize("size", [1, 32, 64, 100, 256])
def test_workgroup_size_tunable_is_rendered(quick_gelu, size):
    text = quick_gelu.render({"X": meta((16,), f32)}, tunables={"WORKGROUP_SIZE": size})["main"]
    assert f"@compute @workgroup_size({size})" in text and f"* {size}u + lix" in text


@pytest.mark.parametrize("dtype", [f32, f16], ids=["f32", "f16"])
@pytest.mark.parametrize("channels", [3, 4, 6, 320, 1280])
def test_bias_add_wgsl(bias_add, need_dtype, dtype, channels):
    need_dtype(dtype)
    t = "f16" if dtype is f16 else "f32"
    metas = bias_metas((2, 4, channels), dtype)
    chosen = bias_add.explain(metas).chosen
    text = bias_add.render(metas)["main"]
    assert f"const CHANNELS: u32 = {channels}u;" in text
    assert ("enable f16;" in text) == (dtype is f16)
    # binding order and access come from the manifest (the element type of X/bias/skip is the
    # template's business: the vec4 template views the scalar buffers as vec4 arrays, and f16 with
    # C % 8 == 0 views all four as 16-byte units)
    for index, name in enumerate(["x", "bias", "skip"]):
        assert re.search(rf"@group\(0\) @binding\({index}\) var<storage, read> {name}: array<", text), name
    units = chosen == "vec4" and dtype is f16 and channels % 8 == 0
    out = "vec4<u32>" if units else f"vec4<{t}>" if chosen == "vec4" else t
    assert f"@group(0) @binding(3) var<storage, read_write> y: array<{out}>;" in text
    assert "@group(0) @binding(4) var<uniform> params: Params;" in text
    assert "struct Params {\n  count: u32,\n};" in text
    if chosen == "scalar":
        assert "const ITEMS: u32 = 4u;" in text  # source.inputs.itemsPerInvocation
    assert chosen == ("vec4" if channels % 4 == 0 else "scalar")


def test_render_compiles_on_the_device(quick_gelu, bias_add, device, need_dtype):
    """Every variant's WGSL, as rendered, is accepted by the device's shader compiler."""
    for dtype in (f32, f16):
        if dtype is f16 and not device.has_f16:
            continue
        for variant in quick_gelu.variants:
            device.gpu.create_shader_module(code=quick_gelu.render({"X": meta((16,), dtype)}, variant=variant)["main"])
        for variant in bias_add.variants:
            device.gpu.create_shader_module(code=bias_add.render(bias_metas((2, 2, 8), dtype), variant=variant)["main"])


def test_render_for_zero_and_rank_zero(quick_gelu):
    assert "main" in quick_gelu.render({"X": meta((0,), f32)})
    assert "main" in quick_gelu.render({"X": meta((), f32)})
    assert "main" in quick_gelu.render({"X": ((), "float32")})


# --- filters ------------------------------------------------------------------------------------


@pytest.mark.parametrize("value, suffix, text", [(1.702, "", "1.702"), (1, "", "1.0"), (-0.0, "", "-0.0"),
                                                 (1e-5, "", "1e-05"), (3.0, "f", "3.0f"), (0.5, "h", "0.5h"),
                                                 (np.float64(0.25), "", "0.25"), (1000.0, "h", "1e+03h"),
                                                 (1e7, "f", "1e+07f"), (65504.0, "h", "65504.0h")])  # fmt: skip
def test_wgsl_float(value, suffix, text):
    """The same text whatever NumPy's version: 1.26's str() wrote "1000.0h", "10000000.0f" and
    "65500.0h"."""
    assert wgsl_float(value, suffix) == text


def _nearest(text: str, dtype) -> float:
    """The value of type ``dtype`` nearest the decimal ``text`` (ties to even), as a shader compiler
    that rounds the decimal straight to the type reads it."""
    from fractions import Fraction

    exact = Fraction(text)
    guess = np.array(float(exact), dtype)
    with np.errstate(over="ignore"):  # past the largest value: inf, dropped below
        candidates = [np.nextafter(guess, -np.inf, dtype=dtype), guess, np.nextafter(guess, np.inf, dtype=dtype)]
    finite = [c for c in candidates if np.isfinite(c)]
    return float(min(finite, key=lambda c: (abs(Fraction(float(c)) - exact), int(c.view(f"u{c.itemsize}")) & 1)))


@pytest.mark.parametrize("value, suffix", [
    (1 + 2**-24, "f"), (1 + 3 * 2**-24, "f"), (1.702, "f"), (0.1, "f"), (3.4028235e38, "f"), (-1e-40, "f"),
    (1 + 2**-11, "h"), (65519.0, "h"), (0.1, "h"), (6e-8, "h"),
])  # fmt: skip
def test_wgsl_float_with_a_suffix_reads_back_as_the_value_rounded_to_its_type(value, suffix):
    """The float64 shortest text of 1 + 2^-24 (halfway between two f32s) read back, rounded straight
    to f32, as the upper one; numpy's float32(1 + 2^-24) is 1.0. 3.4028235e38 (NumPy's print of
    the largest f32) and 65519 (rounds to f16's 65504) were refused."""
    dtype = np.float32 if suffix == "f" else np.float16
    text = wgsl_float(value, suffix)
    assert text.endswith(suffix) and _nearest(text[:-1], dtype) == float(dtype(value)), text


@pytest.mark.parametrize("value", [float("nan"), float("inf"), "1.0", True, None])
def test_wgsl_float_refuses(value):
    with pytest.raises(ValueError):
        wgsl_float(value)


@pytest.mark.parametrize("value, suffix, fragment", [
    (1.0, "x", "suffix is 'f', 'h' or none"), (1e300, "f", "beyond the range of f32"),
    (65520.0, "h", "beyond the range of f16"),
])  # fmt: skip
def test_wgsl_float_refuses_a_literal_its_suffix_cannot_hold(value, suffix, fragment):
    """`1e300` with "f" wrote `1e+300f` and a suffix "x" `1.0x`: the shader compiler refused them
    later, far from the template line."""
    with pytest.raises(ValueError, match=fragment):
        wgsl_float(value, suffix)
    assert wgsl_float(65504.0, "h") == "65504.0h" and wgsl_float(1e300) == "1e+300"


@pytest.mark.parametrize("value, text", [(0, "0u"), (256, "256u"), (2**32 - 1, "4294967295u")])
def test_wgsl_uint(value, text):
    assert wgsl_uint(value) == text


@pytest.mark.parametrize("value", [-1, 2**32, 64.0, True, "4"])
def test_wgsl_uint_refuses(value):
    with pytest.raises(ValueError):
        wgsl_uint(value)


# --- the dispatch grid --------------------------------------------------------------------------

M = 65535


@pytest.mark.parametrize(
    "threads, per_group, grid",
    [
        (0, 256, (0, 0, 0)), (1, 256, (1, 1, 1)), (256, 256, (1, 1, 1)), (257, 256, (2, 1, 1)),
        (M * 256, 256, (M, 1, 1)), (M * 256 + 1, 256, (32768, 2, 1)), (M + 1, 1, (32768, 2, 1)),
        (3 * M, 1, (M, 3, 1)), (M * M + 1, 1, (32768, M, 2)),
    ],
)  # fmt: skip
def test_workgroup_grid(threads, per_group, grid):
    assert workgroup_grid(threads, per_group, M) == grid


@pytest.mark.parametrize("limit", [1, 2, 7])
def test_workgroup_grid_properties(limit):
    """Small per-dimension limits: every grid covers the work, stays in bounds, wastes < y*z."""
    for total in range(0, limit**3 + 1):
        x, y, z = workgroup_grid(total, 1, limit)
        if total == 0:
            assert (x, y, z) == (0, 0, 0)
            continue
        assert 1 <= x <= limit and 1 <= y <= limit and 1 <= z <= limit
        assert total <= x * y * z < total + y * z
    with pytest.raises(errors.ExpressionError):
        workgroup_grid(limit**3 + 1, 1, limit)


# --- the template context and the sandbox ---------------------------------------------------------

DEMO_MANIFEST = json.loads((PACKAGES_DIR / "demo.ScaleShift" / "manifest.json").read_text())
DEMO_TEMPLATE = (PACKAGES_DIR / "demo.ScaleShift" / "scale-shift.wgsl.jinja").read_text()

CONTEXT_PROBE = """// scalar={{ scalar }} vec4={{ vec4 }} lanes={{ lanes }} n={{ n }} quads={{ quads }}
// constants.scalar={{ constants.scalar }} inputs={{ inputs | list | join(',') }}
// tunables={{ tunables.WORKGROUP_SIZE }} attrs={{ attrs.scale }},{{ attrs.shift }} dtypes={{ dtypes.T }}
// bindings={{ bindingList | length }} {{ bindingList[2].name }}
// x={{ bindings.x.addressSpace }},{{ bindings.x.accessMode }},{{ bindings.x.type }},{{ bindings.x.arg }},{{ bindings.x.binding }}
// params={{ bindings.params.type }},{{ bindings.params.accessMode }},{{ bindings.params.elementType }}
// wg={{ workgroupSize }},{{ workgroupSizeX }},{{ workgroupSizeY }},{{ workgroupSizeZ }},{{ workgroupInvocations }}
// entry={{ entryPoint }}
"""


def demo_with_template(write_package, template, **manifest_changes):
    manifest = json.loads(json.dumps(DEMO_MANIFEST))
    manifest.update(manifest_changes)
    return wk.load_kernel(write_package(manifest, {"scale-shift.wgsl.jinja": template}))


def test_template_context(write_package, need_dtype):
    need_dtype(f16)
    kernel = demo_with_template(write_package, DEMO_TEMPLATE + CONTEXT_PROBE)
    text = kernel.render({"X": meta((2, 6), f16)}, attrs={"scale": 2.5, "shift": -1.0},
                         tunables={"WORKGROUP_SIZE": 32})["main"]  # fmt: skip
    assert "// scalar=f16 vec4=True lanes=4 n=12 quads=3" in text
    assert "// constants.scalar=f16 inputs=lanes" in text
    assert "// tunables=32 attrs=2.5,-1.0 dtypes=f16" in text
    assert "// bindings=3 params" in text
    assert "// x=storage,read,array<vec4<f16>>,X,0" in text
    assert "// params=Params,None,None" in text
    assert "// wg=32,32,1,1,32" in text
    assert "// entry=main" in text
    assert "struct Params {\n  count: u32,\n  affine: vec2<f32>,\n};" in text
    # and it still runs
    x = np.arange(12, dtype=f16).reshape(2, 6)
    y = kernel({"X": x}, attrs={"scale": 2.5, "shift": -1.0}, tunables={"WORKGROUP_SIZE": 32})["Y"]
    np.testing.assert_array_equal(y, (x.astype(np.float64) * 2.5 - 1.0).astype(f16))


def test_template_context_names_are_documented_ones(write_package):
    """Every name docs/format.md promises a template is present (rendering fails on a missing one)."""
    from webgpu_kernels.rendering import TEMPLATE_NAMES

    names = sorted(TEMPLATE_NAMES)  # validate warns of constants named so: the set must be the contract
    probe = "".join(f"// {n}: {{{{ {n} is defined }}}}\n" for n in names) + DEMO_TEMPLATE
    text = demo_with_template(write_package, probe).render({"X": meta((3,), f32)})["main"]
    assert all(f"// {n}: True" in text for n in names)
    hidden = "".join(f"// {n}: {{{{ {n} is defined }}}}\n" for n in ["shapes", "ranks", "device", "numel"])
    text = demo_with_template(write_package, hidden + DEMO_TEMPLATE).render({"X": meta((3,), f32)})["main"]
    assert text.count(": False") == 4


@pytest.mark.parametrize(
    "template, fragment",
    [
        ("{{ nope }}\n", "nope"),
        ("{{ ''.__class__.__mro__[1].__subclasses__() }}\n", ""),
        ("{{ scalar.__class__ }}\n", ""),
        ("{{ scalar | pprint }}\n", "pprint"),
        ("{{ lipsum() }}\n", "lipsum"),
        ("{{ cycler(1, 2) }}\n", "cycler"),
        ("{% include '../demo.ScaleShift/manifest.json' %}\n", ""),
        ("{% include 'missing.wgsl.jinja' %}\n", "missing.wgsl.jinja"),
        ("{{ range(10**7) | list | length }}\n", ""),
        ("{% for %}\n", "syntax"),
    ],
)  # fmt: skip
def test_template_errors(write_package, template, fragment):
    kernel = demo_with_template(write_package, template + DEMO_TEMPLATE)
    with pytest.raises(errors.TemplateError) as info:
        kernel.render({"X": meta((3,), f32)})
    assert info.value.file == "scale-shift.wgsl.jinja"
    assert fragment in str(info.value)


def test_template_error_has_the_line(write_package):
    kernel = demo_with_template(write_package, "// one\n// two\n{{ undefinedThing }}\n" + DEMO_TEMPLATE)
    with pytest.raises(errors.TemplateError) as info:
        kernel.render({"X": meta((3,), f32)})
    assert info.value.line == 3 and "scale-shift.wgsl.jinja:3" in str(info.value)


@pytest.mark.parametrize(
    "expression, shown",
    [
        ("1e300 * 1e300", "inf"), ("-1e300 * 1e300", "-inf"), ("'nan' | float", "nan"),
        ("'inf' | float | round", "inf"), ("'x = ' ~ (1e300 * 1e300)", "inf"), ("(0 - 1e300 * 1e300) | string", "-inf"),
        ("['a', 1e300 * 1e300] | join(',')", "inf"), ("(1e300 * 1e300) | abs | lower", "inf"),
    ],
)  # fmt: skip
def test_a_template_printing_a_non_finite_number_is_a_template_error_at_its_line(write_package, expression, shown):
    """Pins docs/format.md's "A float that is not finite ... is never written as text: printing it with
    `{{ }}`, or making text of it with `~`, `string`, `join` or a printed list, is a `TemplateError`
    naming the template file ..., the line and the value". "inf"/"nan" text had reached the shader
    compiler, whose error named the rendered WGSL, far from the template line that printed it."""
    kernel = demo_with_template(write_package, f"// one\n// {{{{ {expression} }}}}\n" + DEMO_TEMPLATE)
    with pytest.raises(errors.TemplateError) as info:
        kernel.render({"X": meta((3,), f32)})
    assert info.value.file == "scale-shift.wgsl.jinja" and info.value.line == 2
    assert f"prints {shown}" in str(info.value) and "no WGSL literal" in str(info.value)
    assert not isinstance(info.value, errors.TemplateSandboxError)


@pytest.mark.parametrize("expression, shown", [("'nan' | float | int", "nan"), ("(1e300 * 1e300) | int", "inf"),
                                               ("(0 - 1e300 * 1e300) | int(7)", "-inf")])  # fmt: skip
def test_int_of_a_non_finite_number_is_a_template_error_not_a_silent_default(write_package, expression, shown):
    """Jinja's `int` filter gives NaN its default, 0: `const n = {{ x | int }};` wrote 0 into the
    WGSL with no word said (and inf raised a bare OverflowError)."""
    kernel = demo_with_template(write_package, f"// one\n// {{{{ {expression} }}}}\n" + DEMO_TEMPLATE)
    with pytest.raises(errors.TemplateError) as info:
        kernel.render({"X": meta((3,), f32)})
    assert info.value.line == 2 and f"| int of {shown}" in str(info.value)
    assert "// 3" in demo_with_template(write_package, "// {{ 3.7 | int }}\n" + DEMO_TEMPLATE).render(
        {"X": meta((3,), f32)})["main"]  # a finite float still truncates


@pytest.mark.parametrize("expression, shown", [("1e300 ** 2", "1e+300 ** 2"), ("(0 - 1e300) ** 3", "-1e+300 ** 3")])
def test_a_power_past_float64_is_a_template_error_in_the_librarys_words(write_package, expression, shown):
    """Python's float ** raises where * gives inf: the template error had read "OverflowError: (34,
    'Numerical result out of range')", the C library's words, naming no operation."""
    kernel = demo_with_template(write_package, f"// one\n// {{{{ {expression} }}}}\n" + DEMO_TEMPLATE)
    with pytest.raises(errors.TemplateError) as info:
        kernel.render({"X": meta((3,), f32)})
    message = str(info.value)
    assert info.value.line == 2 and f"{shown} is past float64's range" in message, message
    assert "expected a result within float64's range" in message
    assert "Numerical result" not in message and "OverflowError" not in message


def test_a_non_finite_number_printed_by_an_included_template_names_that_file(write_package):
    """Pins "naming the template file (an included one's)" """
    manifest = json.loads(json.dumps(DEMO_MANIFEST))
    kernel = wk.load_kernel(write_package(manifest, {
        "scale-shift.wgsl.jinja": "{% include 'part.wgsl' %}\n" + DEMO_TEMPLATE,
        "part.wgsl": "// a\n// b\nconst big = {{ 'nan' | float }};\n",
    }))  # fmt: skip
    with pytest.raises(errors.TemplateError) as info:
        kernel.render({"X": meta((3,), f32)})
    assert (info.value.file, info.value.line) == ("part.wgsl", 3) and "prints nan" in str(info.value)


def test_a_constant_that_overflows_for_some_attributes_is_refused_where_the_template_prints_it(write_package):
    """An expression's non-finite result (a constant or a source input, made from finite attributes)
    reaches the template as a float; the template line printing it is named, with the value."""
    constants = {**DEMO_MANIFEST["constants"], "big": "attrs.scale * 1e308"}
    kernel = demo_with_template(write_package, "// one\nconst BIG = {{ constants.big }};\n" + DEMO_TEMPLATE,
                                constants=constants)  # fmt: skip
    assert "const BIG = 1e+308;" in kernel.render({"X": meta((3,), f32)})["main"]
    with pytest.raises(errors.TemplateError, match=r"scale-shift\.wgsl\.jinja:2: prints inf: ") as info:
        kernel.render({"X": meta((3,), f32)}, attrs={"scale": 10.0})
    assert info.value.line == 2


def test_a_float_literal_beyond_a_float_is_refused_when_the_template_compiles(write_package):
    """Pins "A float literal beyond the largest float (`1e400`) is a `TemplateError` ("syntax error")
    when the template compiles": it had read "NameError: name 'inf' is not defined" (Jinja's code)."""
    kernel = demo_with_template(write_package, "// one\n// {{ 1e400 }}\n" + DEMO_TEMPLATE)
    with pytest.raises(errors.TemplateError, match=r"scale-shift\.wgsl\.jinja:2: syntax error: a float literal beyond the largest float") as info:
        kernel.render({"X": meta((3,), f32)})
    assert info.value.line == 2


def test_non_finite_numbers_that_are_not_printed_are_fine(write_package):
    """Pins "compared, tested or counted it is an ordinary value" """
    text = demo_with_template(write_package, "{% set inf = 1e300 * 1e300 %}// {{ 1e300 < inf }} "
                              "{{ (inf > 0) | string }} {{ [inf] | length }} {{ 1.5 }} {{ -0.0 }}\n"
                              + DEMO_TEMPLATE).render({"X": meta((3,), f32)})["main"]  # fmt: skip
    assert text.startswith("// True True 1 1.5 -0.0\n")


def test_a_misspelt_template_name_suggests_the_one_meant(write_package):
    """"'declarashuns' is undefined" alone left the author to find the name in docs/format.md."""
    kernel = demo_with_template(write_package, "{{ declarashuns }}\n" + DEMO_TEMPLATE)
    with pytest.raises(errors.TemplateError, match=r"'declarashuns' is undefined \(did you mean 'declarations'\?\)"):
        kernel.render({"X": meta((3,), f32)})
    kernel = demo_with_template(write_package, "{{ zzqqx }}\n" + DEMO_TEMPLATE)
    with pytest.raises(errors.TemplateError) as info:  # nothing close: no guess
        kernel.render({"X": meta((3,), f32)})
    assert "did you mean" not in str(info.value)


@pytest.mark.parametrize("use", [
    "workgroupSiz | abs", "workgroupSiz | round", "workgroupSiz | wgsl_uint", "workgroupSiz | wgsl_float",
    "1.5 | wgsl_float(workgroupSiz)", "1.5 | round(workgroupSiz)", "[1, 2] | join(workgroupSiz)",
    "workgroupSiz | default(workgroupSiz)", "workgroupSiz | int", "'a' | replace('a', workgroupSiz)",
])  # fmt: skip
def test_a_misspelt_name_given_to_a_filter_is_named(write_package, use):
    """abs, round and wgsl_float/wgsl_uint said "got <StrictUndefined> (StrictUndefined)" or "bad
    operand type for abs()" of a misspelt name, which the message then never named."""
    kernel = demo_with_template(write_package, f"// {{{{ {use} }}}}\n" + DEMO_TEMPLATE)
    with pytest.raises(errors.TemplateError, match=r"'workgroupSiz' is undefined \(did you mean 'workgroupSize'\?\)"):
        kernel.render({"X": meta((3,), f32)})


@pytest.mark.parametrize("use, namespace, key, meant", [
    ("tunables.WORKGROUP_SIZ", "tunables", "WORKGROUP_SIZ", "WORKGROUP_SIZE"),
    ("tunables['WORKGROUP_SIZ'] | wgsl_uint", "tunables", "WORKGROUP_SIZ", "WORKGROUP_SIZE"),
    ("attrs.scal", "attrs", "scal", "scale"),
    ("attrs.zzqqx", "attrs", "zzqqx", None),
])  # fmt: skip
def test_a_name_a_namespace_lacks_is_told_with_the_namespace_and_its_names(write_package, use, namespace, key, meant):
    """A tunable renamed in the manifest and not in the template read "UndefinedError: 'dict object'
    has no attribute 'ROW_UNROLL'": neither which namespace nor what it holds."""
    kernel = demo_with_template(write_package, f"// {{{{ {use} }}}}\n" + DEMO_TEMPLATE)
    with pytest.raises(errors.TemplateError) as info:
        kernel.render({"X": meta((3,), f32)})
    message = str(info.value)
    assert f"{namespace} has no {key!r}" in message and info.value.line == 1, message
    names = sorted(DEMO_MANIFEST[{"tunables": "tunables", "attrs": "attributes"}[namespace]])
    assert f"(the {namespace} are {', '.join(names)}" in message, message
    assert (f"did you mean {namespace}.{meant}?" in message) if meant else "did you mean" not in message, message


def test_default_still_takes_an_undefined_value(write_package):
    kernel = demo_with_template(write_package, "// {{ notAName | default(7) | wgsl_uint }}\n" + DEMO_TEMPLATE)
    assert "// 7u" in kernel.render({"X": meta((3,), f32)})["main"]


@pytest.mark.parametrize("name", ["shapes", "ranks", "device"])
def test_an_expression_namespace_in_a_template_says_templates_do_not_see_it(write_package, name):
    """It had read "'shapes' is undefined (did you mean 'same'?)"."""
    kernel = demo_with_template(write_package, f"// {{{{ {name}.X }}}}\n" + DEMO_TEMPLATE)
    with pytest.raises(errors.TemplateError, match=rf"'{name}' is undefined \(the expression namespace '{name}' is not "
                                                   r"in the template contract: .*source\.inputs or a constant"):  # fmt: skip
        kernel.render({"X": meta((3,), f32)})


def test_missing_template_file(write_package):
    manifest = json.loads(json.dumps(DEMO_MANIFEST))
    root = write_package(manifest, {})
    kernel = wk.load_kernel(root)
    with pytest.raises(errors.TemplateError, match="scale-shift.wgsl.jinja"):
        kernel.render({"X": meta((3,), f32)})


def test_wgsl_the_device_refuses_is_a_shader_compile_error(write_package):
    kernel = demo_with_template(write_package, DEMO_TEMPLATE.replace("return;", "return 1;"))
    with pytest.raises(errors.ShaderCompileError) as info:
        kernel({"X": np.ones(3, f32)})
    error = info.value
    assert (error.kernel, error.variant, error.pass_id) == ("demo.ScaleShift", "scalar", "main")
    assert "demo.ScaleShift" in str(error) and "'scalar'" in str(error)
    # The compiler's rendered line is mapped back to the template line that holds the mistake.
    template_line = 1 + DEMO_TEMPLATE[: DEMO_TEMPLATE.index("return;")].count("\n")
    assert (error.file, error.line) == ("scale-shift.wgsl.jinja", template_line)
    assert str(error).startswith(f"scale-shift.wgsl.jinja:{template_line}: ")


@pytest.mark.parametrize("wide", ["i64", "f64"])
def test_a_64_bit_type_in_wgsl_says_how_the_format_reads_such_tensors(write_package, wide):
    """The compiler's "requires the SHADER_INT64 flag" told an author of an int64 input nothing of
    the format's way: such a tensor is storage-only, read as vec2<u32> words."""
    template = DEMO_TEMPLATE.replace("return;", f"let wide: {wide} = {wide}(1); return;")
    kernel = demo_with_template(write_package, template)
    with pytest.raises(errors.ShaderCompileError) as info:
        kernel({"X": np.ones(3, f32)})
    assert "storage-only" in str(info.value) and "array<vec2<u32>>" in str(info.value)


def test_a_compile_error_on_a_line_that_says_lost_leaves_the_device_alone(write_package):
    """Any "lost" in a GPU error made it a lost device: naga quotes the failing WGSL line, so a
    mistake on `let lost_lanes = ...` (or a comment "device is lost") dropped the healthy device and
    every tensor on it."""
    held = wk.to_gpu(np.arange(4, dtype=f32))
    device = wk.get_device()
    for line in ("let lost_lanes = undefined_name;", "let x = undefined_name; // the device is lost here"):
        kernel = demo_with_template(write_package, DEMO_TEMPLATE.replace("return;", line + "\n  return;"))
        with pytest.raises(errors.ShaderCompileError, match="undefined_name"):
            kernel({"X": np.ones(3, f32)})
        assert not device.lost and wk.get_device() is device
    np.testing.assert_array_equal(held.numpy(), np.arange(4, dtype=f32))


def test_is_device_lost_reads_wgpus_phrases_not_the_word():
    from webgpu_kernels.buffers import is_device_lost

    lost = ["Validation Error\n\nCaused by:\n  In wgpuDeviceCreateBuffer\n    Parent device is lost",
            "The WGPU device was lost (destroyed):\nDevice lost",
            "ERROR_DEVICE_LOST: The logical device has been lost."]  # fmt: skip
    assert all(is_device_lost(Exception(text)) for text in lost)
    shader = ("Validation Error\n\nShader 'demo' parsing error: no definition in scope for identifier: `lost`\n"
              "   ┌─ wgsl:15:21\n   │\n15 │   let y = lost; // device is lost\n   │           ^^^^ unknown identifier")
    assert not is_device_lost(Exception(shader))


def test_an_ordinary_compile_error_gets_no_64_bit_advice(write_package):
    kernel = demo_with_template(write_package, DEMO_TEMPLATE.replace("return;", "return 1;"))
    with pytest.raises(errors.ShaderCompileError) as info:
        kernel({"X": np.ones(3, f32)})
    assert "storage-only" not in str(info.value)


def test_a_compile_error_after_a_multi_line_expression_and_an_include_names_the_template_line(write_package):
    """Rendered lines and template lines drift apart (a value of several lines, an included file,
    trimmed block tags); the error still names the template line with the mistake."""
    helper = "// helper, line 1\nfn helper() -> f32 { return 1.0; }\n"
    template = ("{% set three = '// a\\n// b\\n// c' %}\n{{ three }}\n{% include 'helper.wgsl.jinja' %}\n{% if true %}\n"
                "{% endif %}\n" + DEMO_TEMPLATE.replace("return;", "return 1;"))  # fmt: skip
    manifest = json.loads(json.dumps(DEMO_MANIFEST))
    kernel = wk.load_kernel(write_package(manifest, {"scale-shift.wgsl.jinja": template, "helper.wgsl.jinja": helper}))
    with pytest.raises(errors.ShaderCompileError) as info:
        kernel({"X": np.ones(3, f32)})
    assert (info.value.file, info.value.line) == ("scale-shift.wgsl.jinja", 1 + template[: template.index("return 1;")].count("\n"))
    wgsl = kernel.render({"X": meta((3,), f32)})["main"]
    helper_line = 1 + wgsl[: wgsl.index("fn helper")].count("\n")
    assert wgsl.template_line(helper_line, 1) == ("helper.wgsl.jinja", 2)
    assert wgsl.split("\n")[:3] == ["// a", "// b", "// c"]  # "{{ three }}", template line 2 ({% set %} writes nothing)
    assert wgsl.template_line(1, 1) == wgsl.template_line(3, 1) == ("scale-shift.wgsl.jinja", 2)


@pytest.mark.parametrize("statement", ["{% include 'helper.wgsl.jinja' %}", "{% import 'helper.wgsl.jinja' as h %}{{ h.f() }}"])
def test_a_misspelt_name_inside_an_included_file_names_that_file_and_line(write_package, statement):
    """It had named the include line of the top template (file and line), while a compile error in
    the same included file named the included file's line."""
    helper = "// helper, line 1\n{% macro f() %}// {{ scalr }}{% endmacro %}\n// {{ scalr }}\n"
    if "import" in statement:
        helper = "// helper, line 1\n{% macro f() %}\n// {{ scalr }}{% endmacro %}\n"
    template = "// top, line 1\n" + statement + "\n" + DEMO_TEMPLATE
    manifest = json.loads(json.dumps(DEMO_MANIFEST))
    kernel = wk.load_kernel(write_package(manifest, {"scale-shift.wgsl.jinja": template, "helper.wgsl.jinja": helper}))
    with pytest.raises(errors.TemplateError, match="'scalr' is undefined") as info:
        kernel.render({"X": meta((3,), f32)})
    assert (info.value.file, info.value.line) == ("helper.wgsl.jinja", 3)
    assert "did you mean 'scalar'" in str(info.value)


@pytest.mark.parametrize("statement", ["{% import 'helper.wgsl.jinja' as h %}", "{% from 'helper.wgsl.jinja' import f %}"])
def test_a_context_name_read_by_a_macro_imported_without_context_says_so(write_package, statement):
    """Jinja's import does not pass the context: a macro reading a constant had failed with
    "'scalar' is undefined (did you mean 'scalar'?)"."""
    helper = "{% macro f() %}// {{ scalar }}{% endmacro %}\n"
    call = "{{ h.f() }}" if "as h" in statement else "{{ f() }}"
    template = statement + "\n" + call + "\n" + DEMO_TEMPLATE
    manifest = json.loads(json.dumps(DEMO_MANIFEST))
    kernel = wk.load_kernel(write_package(manifest, {"scale-shift.wgsl.jinja": template, "helper.wgsl.jinja": helper}))
    with pytest.raises(errors.TemplateError, match="'scalar' is undefined") as info:
        kernel.render({"X": meta((3,), f32)})
    assert "did you mean" not in str(info.value)
    assert "with context" in str(info.value) and info.value.file == "helper.wgsl.jinja"
    fixed = template.replace(" %}", " with context %}", 1)
    kernel = wk.load_kernel(write_package(manifest, {"scale-shift.wgsl.jinja": fixed, "helper.wgsl.jinja": helper}))
    assert "// f32" in kernel.render({"X": meta((3,), f32)})["main"]


@pytest.mark.parametrize("name", ["extra.json", "notes.md", "test.json"])
def test_a_template_may_not_include_the_packages_documents_or_data(write_package, name):
    """Their edits do not change the tuning key (tuning._template_files leaves them out), so an
    included one could change the WGSL behind a stored result: such an include is refused."""
    template = "{% include '" + name + "' %}\n" + DEMO_TEMPLATE
    kernel = wk.load_kernel(write_package(json.loads(json.dumps(DEMO_MANIFEST)),
                                          {"scale-shift.wgsl.jinja": template, name: "// v1\n"}))  # fmt: skip
    with pytest.raises(errors.TemplateError, match=rf"{re.escape(name)}: not a template"):
        kernel.render({"X": meta((3,), f32)})
    key = kernel.tuning_key
    (kernel.package.root / name).write_text("// v2\n", "utf-8")
    assert wk.load_kernel(kernel.package.root).tuning_key == key


@pytest.mark.parametrize("name", ["MANIFEST.JSON", "Notes.Md", "test.json.", "x.NPY.."])
def test_a_documents_name_in_another_case_or_with_trailing_dots_is_no_template_either(write_package, name):
    """macOS and Windows open MANIFEST.JSON as manifest.json, and Windows opens test.json. as test.json:
    the suffix check had compared the name as written, so an unverified folder there could include
    them."""
    template = "{% include '" + name + "' %}\n" + DEMO_TEMPLATE
    kernel = wk.load_kernel(write_package(json.loads(json.dumps(DEMO_MANIFEST)), {"scale-shift.wgsl.jinja": template}))
    with pytest.raises(errors.TemplateError, match=rf"{re.escape(name)}: not a template"):
        kernel.render({"X": meta((3,), f32)})


@pytest.mark.parametrize("op", ["com.microsoft.QuickGelu", "com.microsoft.BiasAdd"])
def test_every_rendered_line_of_the_shipped_templates_maps_to_a_line_that_could_make_it(op):
    """The literal text of the template line a rendered line maps to appears in that rendered line."""
    from webgpu_kernels.package import embedded_root

    kernel = wk.get_kernel(op)
    shapes = {"X": (2, 3, 8), "bias": (8,), "skip": (2, 3, 8)} if op.endswith("BiasAdd") else {"X": (4095,)}
    checked = 0
    for dtype in ("float16", "float32"):
        for variant in kernel.variants:
            try:
                rendered = kernel.render({k: wk.TensorMeta(v, dtype) for k, v in shapes.items()}, variant=variant)
            except errors.SelectionError:
                continue
            for wgsl in rendered.values():
                for number, line in enumerate(wgsl.split("\n"), 1):
                    if not line.strip():
                        continue
                    file, at = wgsl.template_line(number, len(line) - len(line.lstrip()) + 1)
                    source = (embedded_root() / op / file).read_text().split("\n")[at - 1]
                    literal = [p.strip() for p in re.split(r"\{\{.*?\}\}|\{%.*?%\}", source) if p.strip()]
                    assert not literal or any(p in line for p in literal), (number, line, file, at, source)
                    checked += 1
    assert checked > 100


def test_threads_no_grid_can_hold_are_refused_naming_the_expression(write_package):
    """The refusal came from the grid builder at the first call, naming the expression
    'dispatch.threads' with no place, and explain() said the call would run."""
    manifest = json.loads(json.dumps(DEMO_MANIFEST))
    for variant in manifest["variants"]:
        for pass_ in variant["passes"]:
            pass_["dispatch"]["threads"] = "device.limits.maxComputeWorkgroupsPerDimension ** 3 * 1024"
    kernel = wk.load_kernel(write_package(manifest, {"scale-shift.wgsl.jinja": DEMO_TEMPLATE}))
    x = np.ones(4, np.float32)
    refused = kernel.explain({"X": meta((4,), np.float32)}).refused
    assert refused is not None and "workgroups" in str(refused)
    with pytest.raises(errors.ExpressionError, match="threads need more than") as info:
        kernel({"X": x})
    assert info.value.where.endswith("dispatch.threads") and "maxComputeWorkgroupsPerDimension" in info.value.expression


def _huge_dispatch(write_package, threads, template=DEMO_TEMPLATE):
    """demo.ScaleShift whose every pass dispatches ``threads`` (an expression) at 256 per workgroup."""
    manifest = json.loads(json.dumps(DEMO_MANIFEST))
    for variant in manifest["variants"]:
        for pass_ in variant["passes"]:
            pass_["dispatch"]["threads"] = threads
    return wk.load_kernel(write_package(manifest, {"scale-shift.wgsl.jinja": template}))


def test_threads_past_2_32_workgroups_are_refused_before_anything_is_submitted(write_package, device):
    """2**40 threads at 64 per workgroup are 2^34 workgroups: the grid held them (within 65535^3),
    but workgroupIndex, the widest index templates get, is a u32 and wraps past 2^32 workgroups (as
    globalIndex wraps past 2^32 invocations: threads then write the wrong elements). The call is
    refused naming the pass, the count and the limit, before any buffer or dispatch."""
    kernel = _huge_dispatch(write_package, "2 ** 40")
    x = np.ones(4, np.float32)
    memory = device.memory
    before = (memory.live_buffers, memory.pooled_bytes, memory._pending, memory.batch)
    with pytest.raises(errors.ExpressionError) as info:
        kernel({"X": x}, tunables={"WORKGROUP_SIZE": 64})
    said = str(info.value)
    assert info.value.where.endswith("dispatch.threads") and info.value.expression == "2 ** 40", said
    assert f"{2**40} threads" in said and f"{2**34} workgroups" in said and "pass 'main'" in said, said
    assert "2^32" in said and "workgroupIndex" in said, said
    assert (memory.live_buffers, memory.pooled_bytes, memory._pending, memory.batch) == before
    refused = kernel.explain({"X": meta((4,), np.float32)}, tunables={"WORKGROUP_SIZE": 64}).refused
    assert refused is not None and f"{2**34} workgroups" in refused
    # 2^32 workgroups in the grid is what workgroupIndex counts: not refused for it
    x, y, z = workgroup_grid(M * M * 64, 64, M)
    assert x * y * z == M * M
    with pytest.raises(errors.ExpressionError, match="workgroupIndex"):
        workgroup_grid(2**32 * 64 + 1, 64, M)


@pytest.mark.parametrize("total", [M * M, M * M + 1, 2**32 - 2**16])
def test_a_grid_within_2_32_workgroups_runs_whole(total):
    """Spilled into z, the grid still covers the work, within the per-dimension limit and 2^32."""
    x, y, z = workgroup_grid(total, 1, M)
    assert total <= x * y * z <= 2**32 and max(x, y, z) <= M


@pytest.mark.parametrize("total", [2**32 - 2**16 + 1, 2**32 - 1, 2**32])
def test_a_grid_past_2_32_workgroups_is_refused_even_where_the_work_is_not(total):
    """workgroupIndex counts the grid's workgroups, and the spill rounds the grid up: 2^32
    workgroups of work are a grid of 32769 x 65535 x 2 = 2^32 + 65534, whose last workgroups' u32
    index wraps to 0..5533, passes a `workgroupIndex >= count` guard and does those rows' work again
    (twice the sum for a kernel that accumulates). Such a grid is refused naming it."""
    with pytest.raises(errors.ExpressionError) as info:
        workgroup_grid(total, 1, M)
    said = str(info.value)
    assert f"{total} workgroups of 1" in said and "a grid of 32769 x 65535 x 2" in said, said
    assert "workgroupIndex" in said and "2^32" in said, said


def test_a_template_reading_global_index_past_2_32_invocations_is_refused_at_its_line(write_package, device):
    """2**32 + 1 threads at 256 per workgroup fit workgroupIndex, but the grid's 2^32 + 256
    invocations do not fit globalIndex, a u32: the invocations past 2^32 wrapped to small indices,
    passed the `i >= count` guard and wrote the first elements. A template reading globalIndex
    there is a TemplateError at its line naming the pass, the count and the limit; one indexing by
    workgroupIndex renders (docs/format.md, template contract)."""
    threads = 2**32 + 1
    kernel = _huge_dispatch(write_package, str(threads))
    memory = device.memory
    before = (memory.live_buffers, memory.pooled_bytes, memory._pending, memory.batch)
    with pytest.raises(errors.TemplateError) as info:
        kernel({"X": np.ones(4, np.float32)}, tunables={"WORKGROUP_SIZE": 256})
    said = str(info.value)
    assert info.value.file == "scale-shift.wgsl.jinja" and info.value.line == 13, said
    assert "globalIndex" in said and "pass 'main'" in said and f"{(2**24 + 1) * 256} invocations" in said, said
    assert "2^32" in said and "workgroupIndex" in said, said
    assert (memory.live_buffers, memory.pooled_bytes, memory._pending, memory.batch) == before
    # explain says the call would fail, with the call's words (it had said nothing: explain did not render)
    for forced in (None, "scalar"):
        explained = kernel.explain({"X": meta((4,), np.float32)}, tunables={"WORKGROUP_SIZE": 256}, variant=forced)
        assert explained.chosen is not None and explained.refused is not None, (forced, explained)
        assert "globalIndex" in explained.refused and "scale-shift.wgsl.jinja" in explained.refused, explained.refused
    # past them, a template indexing by workgroupIndex renders, and sees globalIndex undefined
    by_group = DEMO_TEMPLATE.replace("let i = {{ globalIndex }};",
                                     "let i = {{ workgroupIndex }} * {{ workgroupInvocations }}u + lix;")
    assert by_group != DEMO_TEMPLATE
    text = _huge_dispatch(write_package, str(threads), by_group).render(
        {"X": meta((4,), np.float32)}, tunables={"WORKGROUP_SIZE": 256})["main"]  # fmt: skip
    assert "let i = ((wid.z * nwg.y + wid.y) * nwg.x + wid.x) * 256u + lix;" in text
    probe = "// defined={{ globalIndex is defined }}\n" + by_group
    text = _huge_dispatch(write_package, str(threads), probe).render(
        {"X": meta((4,), np.float32)}, tunables={"WORKGROUP_SIZE": 256})["main"]  # fmt: skip
    assert "// defined=False" in text
    text = _huge_dispatch(write_package, str(2**31), probe).render(
        {"X": meta((4,), np.float32)}, tunables={"WORKGROUP_SIZE": 256})["main"]  # fmt: skip
    assert "// defined=True" in text  # a grid within 2^32 invocations


@pytest.mark.parametrize("where", ["elementType", "fieldType", "fieldValue"])
def test_a_type_or_field_value_that_is_no_type_is_quoted_by_a_bounded_text(scale_shift_variant, where):
    """An element type, a struct field type or a field value of the wrong kind was repr()'d whole
    into the call's error: `[['x' * 4096] * 4095]`, within the expression bounds, made a 16 MB
    message on every call (docs/security.md: a value is quoted by at most 80 characters)."""
    def change(manifest):
        manifest["constants"]["big"] = "[['x' * 4096] * 4095]"
        manifest["variants"] = manifest["variants"][1:]
        io = manifest["bindingSets"]["scalarIO"]
        if where == "elementType":
            io[0]["elementType"] = "$big"
        else:
            io[2]["struct"]["fields"][0]["type" if where == "fieldType" else "value"] = "$big" if where == "fieldType" else "big"

    kernel = scale_shift_variant(change)
    with pytest.raises((wk.ExpressionError, wk.LayoutError)) as info:
        kernel({"X": np.ones(4, np.float32)})
    assert "xxx" in str(info.value) and len(str(info.value)) < 600, f"{len(str(info.value))} characters"


def test_a_missing_template_at_run_time_lists_those_there_and_the_one_meant(tmp_path) -> None:
    """A call reaching a pass whose template the package lacks said only "template not found in the
    package", where validate and digest name the package's templates and the one meant;
    an include of a missing file says them too."""
    from webgpu_kernels import digests

    from conftest import copy_package

    qg = copy_package("com.microsoft.QuickGelu", tmp_path / "qg")
    manifest = qg / "manifest.json"
    manifest.write_text(manifest.read_text("utf-8").replace('"quick-gelu.wgsl.jinja"', '"quick-glu.wgsl.jinja"'), "utf-8")
    digests.write_metadata(qg)
    with pytest.raises(errors.TemplateError) as info:
        wk.load_kernel(qg)({"X": np.ones(8, np.float32)})
    assert str(info.value) == ("quick-glu.wgsl.jinja: template not found in the package (its templates: "
                               "quick-gelu.wgsl.jinja; did you mean 'quick-gelu.wgsl.jinja'?)"), str(info.value)
    manifest.write_text(manifest.read_text("utf-8").replace('"quick-glu.wgsl.jinja"', '"quick-gelu.wgsl.jinja"'), "utf-8")
    shader = qg / "quick-gelu.wgsl.jinja"
    shader.write_text("{% include 'Quick-gelu.wgsl.jinja' %}\n" + shader.read_text("utf-8"), "utf-8")
    digests.write_metadata(qg)
    with pytest.raises(errors.TemplateError) as info:
        wk.load_kernel(qg)({"X": np.ones(8, np.float32)})
    assert ("includes 'Quick-gelu.wgsl.jinja', which is not in the package (its templates: quick-gelu.wgsl.jinja; "
            "did you mean 'quick-gelu.wgsl.jinja'?)") in str(info.value), str(info.value)


# --- coverage audit: the template environment's own refusals, rendered directly ----------


def render_template(source: str, files: dict[str, str] | None = None) -> str:
    """``source`` rendered as a package's template ``main.wgsl.jinja`` (``files``: its other
    templates); what it raises comes back as the library's error, as rendering.py turns it."""
    package = {**(files or {}), "main.wgsl.jinja": source}

    def read(name: str) -> str:
        if name not in package:
            raise errors.PackageError("file not found in the package", path=name)
        return package[name]

    context = {"bindings": {"x": {"name": "x"}}, "bindingList": [{"name": "x"}]}
    try:
        return TemplateSandbox(PackageLoader(read)).get_template("main.wgsl.jinja").render(context)
    except Exception as exc:
        raise template_error(exc, "main.wgsl.jinja", context) from None


def refusal_of(
    source: str, files: dict[str, str] | None = None, kind: type[errors.TemplateError] = errors.TemplateError
) -> str:
    """The message of the ``kind`` error that rendering ``source`` (as in render_template) raises."""
    with pytest.raises(kind) as info:
        render_template(source, files)
    return str(info.value)


@pytest.mark.parametrize(("source", "said"), [
    ("{% with a = nosuch.x %}{% endwith %}", "UndefinedError: 'nosuch' is undefined"),
    ("{% with b = 1, a = nosuch.x %}\n{{ a }}{% endwith %}", "UndefinedError: 'nosuch' is undefined"),
    ("{% with a = 1 %}{% with b = nosuch.x %}{% endwith %}{% endwith %}", "UndefinedError: 'nosuch' is undefined"),
    ("{% set a = nosuch.x %}", "UndefinedError: 'nosuch' is undefined"),
    ("{% set a, b = 1 %}", "TypeError: cannot unpack non-iterable int object"),
    ("{% for x in nosuch.x %}{% endfor %}", "UndefinedError: 'nosuch' is undefined"),
])  # fmt: skip
def test_an_error_in_a_with_set_or_for_value_is_told_at_that_statements_line(source, said):
    """Jinja's compiler marks no template line for a {% with %}'s values: their errors had been told at
    the statement before (line 1 here, the text's), or after. {% set %} and {% for %} mark their own."""
    message = refusal_of("// one\n// two\n" + source)
    assert message == f"main.wgsl.jinja:3: {said}", message


def test_a_with_inside_a_loop_that_unpacks_the_loop_variable_is_told_at_its_own_line():
    with pytest.raises(errors.TemplateError, match="the loop variable cannot be iterated") as info:
        render_template("// one\n{% for i in range(4) %}\n{% with a, b = loop %}{% endwith %}\n{% endfor %}")
    assert info.value.line == 3


_BOUND = st.one_of(st.integers(-300_000, 300_000), st.integers(-(2**100), 2**100))


@given(start=_BOUND, stop=_BOUND, step=_BOUND.filter(lambda n: n != 0))
@settings(max_examples=60, deadline=None)
def test_a_templates_range_is_pythons_up_to_max_template_items_and_refused_past_it(start, stop, step):
    source = f"{{{{ range({start}, {stop}, {step})|length }}}}"  # literals: Jinja reads -5 as -(5)
    source = source.replace("(-", "(0 - ").replace(", -", ", 0 - ")  # never (-2)**n
    try:
        expected = len(range(start, stop, step))
    except OverflowError:  # past ssize_t: past any bound
        expected = MAX_TEMPLATE_ITEMS + 1
    if expected <= MAX_TEMPLATE_ITEMS:
        assert render_template(source) == str(expected)
    else:
        with pytest.raises(errors.TemplateSandboxError, match=f"a range of more than {MAX_TEMPLATE_ITEMS} items"):
            render_template(source)


@pytest.mark.parametrize(("argument", "kind"), [("1.5", "a float"), ("true", "a bool"), ("'3'", "a str"), ("none", "none")])
def test_a_templates_range_takes_integers_only(argument, kind):
    with pytest.raises(errors.TemplateSandboxError, match=rf"range\(\) takes integers, got {kind}") as info:
        render_template(f"// one\n{{{{ range(2, {argument}) }}}}")
    assert info.value.file == "main.wgsl.jinja" and info.value.line == 2


@pytest.mark.parametrize("call", ["keys(1)", "items(x=1)", "values(none)"])
def test_a_dicts_methods_take_no_arguments(call):
    with pytest.raises(errors.TemplateError, match=rf"{call.split('(')[0]}\(\) takes no arguments"):
        render_template(f"{{{{ bindings.{call} }}}}")
    assert render_template("{{ bindings.keys()|list }} {{ bindings.values()|length }}") == "['x'] 1"


def test_a_slice_that_is_not_an_indexs_one_subscript_is_refused_at_its_line():
    """Jinja would compile bindingList[0:1, 0] into Python that does not parse."""
    with pytest.raises(errors.TemplateSandboxError, match=r"a slice is allowed only as the one subscript of an "
                                                          r"index \(x\[a:b\], not x\[a:b, c\]\)") as info:  # fmt: skip
        render_template("// one\n// two\n{{ bindingList[0:1, 0] }}")
    assert info.value.line == 3
    assert render_template("{{ bindingList[0:1][0].name }}") == "x"


def test_a_name_an_imported_template_does_not_define_is_undefined_there():
    files = {"lib.wgsl.jinja": "{% set width = 4 %}{% macro f() %}f{% endmacro %}"}
    assert render_template("{% import 'lib.wgsl.jinja' as m %}{{ m.width }}{{ m.f() }}", files) == "4f"
    with pytest.raises(errors.TemplateError, match=r"the imported template 'lib.wgsl.jinja' has no macro or "
                       r"variable 'height' \(it has: f, width\)") as info:  # fmt: skip
        render_template("{% import 'lib.wgsl.jinja' as m %}\n{{ m.height }}", files)
    assert info.value.line == 2


@given(digits=st.text("0123456789", min_size=1, max_size=80))
@example(digits="1" * 65)  # each branch at least once, whatever hypothesis draws
@example(digits="9" * 64)
@example(digits="0" * 63 + "7")
@settings(max_examples=60, deadline=None)
def test_int_of_a_string_is_pythons_within_64_characters_and_128_bits(digits):
    source = f"{{{{ '{digits}'|int }}}}"
    if len(digits) > 64:
        with pytest.raises(errors.TemplateSandboxError, match=r"int\(\) of a string longer than 64 characters"):
            render_template(source)
    elif int(digits).bit_length() > 128:
        with pytest.raises(errors.TemplateSandboxError, match=rf"an integer of {int(digits).bit_length()} bits "
                                                              r"exceeds the limit of 128"):  # fmt: skip
            render_template(source)
    else:
        assert render_template(source) == str(int(digits))


@pytest.mark.parametrize(("length", "refused"), [(64, False), (65, True)])
def test_float_of_a_string_is_bounded_at_64_characters(length, refused):
    source = f"{{{{ ('1' * {length})|float }}}}"
    if refused:
        with pytest.raises(errors.TemplateSandboxError, match=r"float\(\) of a string longer than 64 characters"):
            render_template(source)
    else:
        assert float(render_template(source)) == float("1" * length)


@given(lines=st.integers(1, 2000), width=st.integers(0, 2000), first=st.booleans())
@settings(max_examples=40, deadline=None)
def test_indent_by_a_string_is_jinjas_within_the_text_bound_and_refused_past_it(lines, width, first):
    from webgpu_kernels.templates import MAX_RENDERED_BYTES

    text = "a\n" * (lines - 1) + "a"
    source = f"{{{{ ('a\\n' * {lines - 1} ~ 'a')|indent('-' * {width}, {str(first).lower()}) }}}}"
    if len(text) + lines * width > MAX_RENDERED_BYTES:
        with pytest.raises(errors.TemplateSandboxError, match=f"indent would build more than {MAX_RENDERED_BYTES}"):
            render_template(source)
    else:
        pad = "-" * width
        expected = ("\n" + pad).join(text.split("\n"))
        assert render_template(source) == (pad + expected if first else expected)


def test_replace_count_and_join_attribute_and_last():
    assert render_template("{{ 'aXa'|replace('a', 'b', 1) }} {{ 'aXa'|replace('a', 'b', -1) }}") == "bXa bXb"
    for count in ("1.5", "true", "'1'"):
        with pytest.raises(errors.TemplateSandboxError, match=r"replace\(\): count must be an integer"):
            render_template(f"{{{{ 'aXa'|replace('a', 'b', {count}) }}}}")
    with pytest.raises(errors.TemplateSandboxError, match=r"join\(attribute=\.\.\.\) is not supported in templates"):
        render_template("{{ bindingList|join(', ', attribute='name') }}")
    assert render_template("{{ [1, 2, 3]|last }} {{ bindings|last }} {{ 'abc'|last }}") == "3 x c"


@pytest.mark.parametrize(("size", "shape", "said"), [
    ("n - 3", (3,), "dispatch.workgroupSize must be an integer of at least 1, got 0"),
    ("0", (8,), "dispatch.workgroupSize must be an integer of at least 1, got 0"),
    ("n - 9", (4,), "dispatch.workgroupSize must be an integer of at least 1, got -5"),
    ("n / 8", (4,), "dispatch.workgroupSize must be an integer of at least 1, got 0.5"),
])  # fmt: skip
def test_a_workgroup_size_the_package_makes_below_1_is_its_expression_error(scale_shift_variant, size, shape, said):
    """No tunable in the expression: the package's mistake, named at the expression (a size read
    from a tunable is the caller's AttributeValueError, tests/test_bad_input.py). Doc (format.md,
    Counts): "a workgroup size says its own bound: `dispatch.workgroupSize must be an integer of at
    least 1, got 0`". One rule for 0
    and -5 alike: -5 had been told "must be a non-negative integer", which 0 is, and 0 "a workgroup
    size must be at least 1", without the value."""

    def change(manifest):
        for v in manifest["variants"]:
            for p in v["passes"]:
                p["dispatch"]["workgroupSize"] = size

    kernel = scale_shift_variant(change)
    with pytest.raises(errors.ExpressionError) as info:
        kernel.render({"X": meta(shape, f32)})
    assert not isinstance(info.value, errors.AttributeValueError)
    assert re.fullmatch(rf"variants\[\d\]\.passes\[0\]\.dispatch\.workgroupSize: expression '{re.escape(size)}': "
                        + re.escape(said), str(info.value)), str(info.value)  # fmt: skip


@pytest.mark.parametrize("included", [False, True])
def test_a_template_that_is_not_utf8_is_said_to_be_so_not_missing(write_package, included):
    """It had read 'template not found in the package (its templates: scale-shift.wgsl.jinja; did
    you mean 'scale-shift.wgsl.jinja'?)' of a file that is there."""
    broken = "part.wgsl.jinja" if included else "scale-shift.wgsl.jinja"
    template = "{% include 'part.wgsl.jinja' %}\n" + DEMO_TEMPLATE if included else DEMO_TEMPLATE
    root = write_package(json.loads(json.dumps(DEMO_MANIFEST)), {"scale-shift.wgsl.jinja": template,
                                                                 "part.wgsl.jinja": "// part\n"})  # fmt: skip
    (root / broken).write_bytes((root / broken).read_bytes() + b"// \xff\xfe\n")
    with pytest.raises(errors.TemplateError) as info:
        wk.load_kernel(root).render({"X": meta((3,), f32)})
    assert info.value.file == broken and str(info.value) == f"{broken}: not UTF-8 text", str(info.value)


@pytest.mark.parametrize(("made", "said"), [
    ("mat2x2<f32>", "unsupported uniform field type 'mat2x2<f32>'"),
    ("f64", "unsupported uniform field type 'f64'"),
    ("array<f32, 4>", "'array<f32, 4>' cannot live in a uniform buffer"),
    ("array<vec4<f32>, 0>", ""),
])  # fmt: skip
def test_a_uniform_field_type_the_layout_refuses_names_the_field(scale_shift_variant, made, said):
    """The type comes from a "$name" constant (the schema admits it): the error had named the binding
    alone, not which of its fields."""

    def change(manifest):
        manifest["constants"]["extraType"] = json.dumps(made)
        fields = manifest["bindingSets"]["scalarIO"][2]["struct"]["fields"]
        fields.append({"name": "extra", "type": "$extraType", "value": "0"})

    with pytest.raises(errors.LayoutError) as info:
        scale_shift_variant(change).render({"X": meta((3,), f32)})
    if said:
        assert str(info.value).startswith(f"bindingSets.scalarIO[2]: field 'extra': {said}"), str(info.value)
    else:  # the layout's own words name the field
        assert str(info.value) == ("bindingSets.scalarIO[2]: field 'extra' (array<vec4<f32>, 0>) is an array of 0 "
                                   "elements; WGSL requires a uniform array's element count to be at least 1")
    assert info.value.field == "extra"


# --- error-message polish ----------------------------------------------------------------


@pytest.mark.parametrize(("source", "said"), [
    ("{{ range }}", "the function range cannot be converted to text (call it, as in range(n))"),
    ("{{ bindings.items }}", "the method items cannot be converted to text (call it, as in d.items())"),
    ("{{ 'a' ~ bindings.keys }}", "the method keys cannot be converted to text (call it, as in d.keys())"),
    ("{{ range.x }}", "attribute 'x' of the function range is not accessible here"),
    ("{{ bindings.values[0] }}", "the method values cannot be indexed here"),
    ("{{ range[1:2] }}", "only a list, tuple, string or range can be sliced, not the function range"),
    ("{{ [1][range] }}", "a list cannot be indexed by the function range"),
    ("{{ range is odd }}", "the test 'odd' takes numbers, got the function range"),
    ("{{ bindings.items is even }}", "the test 'even' takes numbers, got the method items"),
])  # fmt: skip
def test_the_sandbox_names_range_and_a_dicts_methods_as_the_template_wrote_them(source, said):
    """They had been named by the library's private classes: "a _Range cannot be converted to text",
    "a _DictMethod"."""
    _assert_refused_saying(source, said)


def _assert_refused_saying(source: str, said: str, files=None) -> None:
    message = refusal_of(source, files, kind=errors.TemplateSandboxError)
    assert message == f"main.wgsl.jinja:1: refused by the sandbox: {said}", message


@pytest.mark.parametrize("source", ["{{ range|length }}", "{{ bindings.items|list }}", "{{ range + 1 }}",
                                    "{{ 1 in bindings.keys }}", "{{ 1 < range }}", "{{ range|wgsl_float }}"])
def test_no_message_about_range_or_a_dicts_methods_shows_a_private_class(source):
    """Python's own messages (not iterable, unsupported operand) name a type by its class name."""
    message = refusal_of(source)
    assert "_Range" not in message and "_DictMethod" not in message, message
    assert re.search(r"\b(function|method)\b", message), message


_IMPORTED = {"lib.wgsl.jinja": "{% macro load(i) %}x[{{ i }}]{% endmacro %}{% set width = 4 %}{% set blank = none %}"}


@pytest.mark.parametrize(("read", "said"), [
    ("nope", "the imported template 'lib.wgsl.jinja' has no macro or variable 'nope' (it has: blank, load, width)"),
    ("loads", "the imported template 'lib.wgsl.jinja' has no macro or variable 'loads' (it has: blank, load, "
              "width; did you mean 'load'?)"),
])  # fmt: skip
def test_a_name_an_imported_template_lacks_is_said_with_the_names_it_has(read, said):
    """Doc (format.md): "A name the imported template does not define (`c.nope`) is a `TemplateError` at
    the line that reads it, naming what it defines". Jinja's words had been
    "'jinja2.environment.TemplateModule object' has no attribute 'nope'"."""
    with pytest.raises(errors.TemplateError) as info:
        render_template(f"// one\n{{% import 'lib.wgsl.jinja' as m %}}{{{{ m.{read} }}}}", _IMPORTED)
    assert info.value.line == 2 and said in str(info.value), str(info.value)
    assert "TemplateModule" not in str(info.value)


def test_a_variable_an_imported_template_sets_to_none_is_there():
    """An exported variable holding none had been told apart from a missing one by its value."""
    source = "{% import 'lib.wgsl.jinja' as m %}{{ m.width }} {{ m.blank is none }} {{ m.load(2) }}"
    assert render_template(source, _IMPORTED) == "4 True x[2]"


@pytest.mark.parametrize(("source", "expected"), [
    ("{{ ('ab' * 100000)|first }}", "a"),
    ("{{ ('ab' * 100000)|last }}", "b"),
    ("{{ (('ab' * 100000) ~ 'c')|last }}", "c"),
])  # fmt: skip
def test_first_and_last_of_a_string_past_the_item_limit_but_within_the_text_limit(source, expected):
    """A string is bounded by the text limit (MAX_RENDERED_BYTES) where it is built; taking one
    character of it is cheap. It had been refused as "a sequence of 200000 items exceeds the limit
    of 100000"."""
    assert len("ab" * 100000) > MAX_TEMPLATE_ITEMS
    assert render_template(source) == expected


def test_a_string_past_the_item_limit_is_still_refused_where_it_becomes_items():
    """|list of it would be a list past the item limit; join and max walk it item by item."""
    for f in ("list", "join(',')", "max"):
        with pytest.raises(errors.TemplateSandboxError, match=f"exceeds the limit of {MAX_TEMPLATE_ITEMS}"):
            render_template(f"{{{{ ('ab' * 100000)|{f} }}}}")


@pytest.mark.parametrize(("source", "said"), [
    ("{{ range(2, none) }}", "refused by the sandbox: range() takes integers, got none"),
    ("{{ [1][none] }}", "refused by the sandbox: a list cannot be indexed by none"),
    ("{{ nope is odd }}", "UndefinedError: 'nope' is undefined"),
    ("{{ 3 is divisibleby(nope) }}", "UndefinedError: 'nope' is undefined"),
])  # fmt: skip
def test_none_and_an_undefined_name_are_named_as_the_template_has_them(source, said):
    """They had read "got a NoneType" and, for a misspelt name, "the test 'odd' takes numbers, got
    a StrictUndefined"."""
    message = refusal_of(source)
    assert message.startswith(f"main.wgsl.jinja:1: {said}"), message


# --- error-message polish ----------------------------------------------------------------


@pytest.mark.parametrize(("source", "said"), [
    ("{% for i in [1] %}{{ loop }}{% endfor %}", "the loop variable cannot be converted to text (read its attributes, as in loop.index)"),
    ("{% for i in [1] %}{{ loop.cycle }}{% endfor %}", "attribute 'cycle' of the loop variable is not accessible here"),
    ("{% for i in [1] %}{{ loop[0] }}{% endfor %}", "the loop variable cannot be indexed here"),
    ("{% macro tile() %}{% endmacro %}{{ tile }}",
     "the macro tile cannot be converted to text (call it, as in tile(), for the text it renders)"),
    ("{% macro tile() %}{% endmacro %}{{ tile.name }}", "attribute 'name' of the macro tile is not accessible here"),
    ("{% macro w() %}{{ caller }}{% endmacro %}{% call w() %}{% endcall %}",
     "the macro caller cannot be converted to text (call it, as in caller(), for the text it renders)"),
    ("{% import 'lib.wgsl.jinja' as m %}{{ m._x }}",
     "attribute '_x' of the imported template 'lib.wgsl.jinja' is not accessible here"),
    ("{% import 'lib.wgsl.jinja' as m %}{{ m }}",
     "the imported template 'lib.wgsl.jinja' cannot be converted to text (call its macros, as in name.macro())"),
    ("{% import 'lib.wgsl.jinja' as m %}{{ m[1] }}", "the imported template 'lib.wgsl.jinja' cannot be indexed here"),
    ("{% import 'lib.wgsl.jinja' as m %}{{ m.load.x }}", "attribute 'x' of the macro load is not accessible here"),
    ("{% from 'lib.wgsl.jinja' import load %}{{ load is odd }}", "the test 'odd' takes numbers, got the macro load"),
])  # fmt: skip
def test_the_sandbox_names_loop_macros_and_imported_templates_as_the_template_wrote_them(source, said):
    """They had been named by Jinja's classes: "a LoopContext cannot be converted to text", "a Macro",
    "a TemplateModule"."""
    _assert_refused_saying(source, said, _IMPORTED)


_MACRO = "Macro is a macro: call it, as in name(), for the text it renders"
_MODULE = "TemplateModule is a template brought in by {% import %}: call its macros, as in name.macro()"
_LOOP = "LoopContext is the loop variable: read its attributes, as in loop.index"


@pytest.mark.parametrize(("source", "said"), [
    ("{% macro m() %}{% endmacro %}{{ m + 1 }}", f"unsupported operand type(s) for +: 'Macro' and 'int' ({_MACRO})"),
    ("{% macro m() %}{% endmacro %}{{ m|list }}", f"'Macro' object is not iterable ({_MACRO})"),
    ("{% macro m() %}{% endmacro %}{{ m|round }}", f"type Macro doesn't define __round__ method ({_MACRO})"),
    ("{% macro m() %}{{ 1 - caller }}{% endmacro %}{% call m() %}{% endcall %}", f"'int' and 'Macro' ({_MACRO})"),
    ("{% from 'lib.wgsl.jinja' import load %}{{ -load }}", f"bad operand type for unary -: 'Macro' ({_MACRO})"),
    ("{% import 'lib.wgsl.jinja' as t %}{{ t|list }}", f"'TemplateModule' object is not iterable ({_MODULE})"),
    ("{% import 'lib.wgsl.jinja' as t %}{{ t < 1 }}", f"instances of 'TemplateModule' and 'int' ({_MODULE})"),
    ("{% for i in [1] %}{{ loop + 1 }}{% endfor %}", f"for +: 'LoopContext' and 'int' ({_LOOP})"),
    ("{% for i in [1] %}{% macro m() %}{% endmacro %}{{ loop * m }}{% endfor %}",
     f"for *: 'LoopContext' and 'Macro' ({_LOOP}; {_MACRO})"),
    ("{% for i in [1] %}{{ loop * loop }}{% endfor %}", f"'LoopContext' and 'LoopContext' ({_LOOP})"),
])  # fmt: skip
def test_pythons_type_errors_about_jinjas_objects_say_what_the_template_wrote(source, said):
    """Python's TypeError had named Jinja's classes alone: "unsupported operand type(s) for +: 'Macro' and 'int'"."""
    message = refusal_of(source, _IMPORTED)
    assert message.endswith(said), message
    assert message.startswith("main.wgsl.jinja:1: TypeError: "), message


@pytest.mark.parametrize(("source", "said"), [
    ("{{ range|length }}", "'function' object is not iterable (range is a function: call it, as in range(n))"),
    ("{% for i in range %}{% endfor %}",
     "'function' object is not iterable (range is a function: call it, as in range(n))"),
    ("{{ range + 1 }}", "(range is a function: call it, as in range(n))"),
    ("{{ bindings.items|list }}", "'method' object is not iterable (a dict's items, keys and values are methods: "
                                  "call them, as in d.items())"),
    ("{% for k in bindings.keys %}{% endfor %}", "(a dict's items, keys and values are methods: call them, as in "
                                                 "d.items())"),
])  # fmt: skip
def test_range_or_a_dict_method_used_uncalled_says_to_call_it(source, said):
    """`{{ range|length }}` had said only "'function' object is not iterable"."""
    message = refusal_of(source)
    assert said in message, message
    assert message.startswith("main.wgsl.jinja:1: TypeError: "), message


def test_a_string_past_the_item_limit_is_said_to_be_a_string_of_characters():
    """It had read "a sequence of 200000 items exceeds the limit of 100000"."""
    for f in ("list", "join(',')", "max", "min"):
        message = refusal_of(f"{{{{ ('ab' * 100000)|{f} }}}}", kind=errors.TemplateSandboxError)
        assert message.endswith(f"a string of 200000 characters exceeds the limit of {MAX_TEMPLATE_ITEMS} items"), message
    with pytest.raises(SandboxViolation, match=f"^a sequence of 100001 items exceeds the limit of {MAX_TEMPLATE_ITEMS}$"):
        TemplateSandbox().take([0] * 100001)  # (a template cannot build one: a list is bounded where it is built)


@pytest.mark.parametrize(("source", "said"), [
    ("{{ {}[[1]] }}", "a dict cannot be indexed by a list (its keys are strings or numbers)"),
    ("{{ bindings[{}] }}", "a dict cannot be indexed by a dict (its keys are strings or numbers)"),
    ("{{ {}[[1]] is defined }}{{ {}[[1]] }}", "a dict cannot be indexed by a list (its keys are strings or numbers)"),
    ("{{ {}[(1, 2)] }}", "a dict cannot be indexed by a tuple (its keys are strings or numbers)"),
    ("{{ bindings[(1,)] }}", "a dict cannot be indexed by a tuple (its keys are strings or numbers)"),
    ("{{ {'a': 1}[()] is defined }}{{ {'a': 1}[()] }}", "a dict cannot be indexed by a tuple (its keys are strings or numbers)"),
])  # fmt: skip
def test_a_dict_indexed_by_a_list_is_refused_in_the_sandboxs_words(source, said):
    """Jinja's words had been "'dict object' has no attribute '<list>'"."""
    message = refusal_of(source, kind=errors.TemplateSandboxError)
    assert message == f"main.wgsl.jinja:1: refused by the sandbox: {said}", message


def test_a_dict_is_still_indexed_by_strings_numbers_and_tuples_it_holds():
    assert render_template("{{ {'a': 1, 2: 3}['a'] }} {{ {'a': 1, 2: 3}[2] }} {{ {'a': 1, 2: 3}[2.0] }} "
                           "{{ {(1, 2): 4}[(1, 2)] }} {{ {}[[1]] is defined }}") == "1 3 3 4 False"  # fmt: skip
    with pytest.raises(errors.TemplateError, match="has no element 3"):
        render_template("{{ {'a': 1, 2: 3}[3] }}")
    with pytest.raises(errors.TemplateError) as info:  # a dict the template keyed by tuples: no "strings or numbers"
        render_template("{{ {(1, 2): 4}[(1, 3)] }}")
    assert "strings or numbers" not in str(info.value) and "refused" not in str(info.value), str(info.value)
