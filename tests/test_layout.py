"""WGSL uniform-address-space layout: offsets and sizes from the spec's tables, packed bytes, and
a round trip through a real shader (the device reads the fields back at the offsets WGSL gives
them, so a layout that disagrees with the compiler shows up as wrong numbers)."""

from __future__ import annotations

import struct

import numpy as np
import pytest

import webgpu_kernels as wk
from webgpu_kernels.errors import LayoutError
from webgpu_kernels.layout import parse_type, struct_layout

# --- alignment and size of single types (WGSL spec, "Alignment and Size") ---------------------


@pytest.mark.parametrize(
    "text, align, size",
    [
        ("u32", 4, 4), ("i32", 4, 4), ("f32", 4, 4), ("f16", 2, 2),
        ("vec2<f32>", 8, 8), ("vec3<f32>", 16, 12), ("vec4<f32>", 16, 16),
        ("vec2<u32>", 8, 8), ("vec3<i32>", 16, 12), ("vec4u", 16, 16), ("vec2f", 8, 8),
        ("vec2<f16>", 4, 4), ("vec3<f16>", 8, 6), ("vec4<f16>", 8, 8), ("vec3h", 8, 6),
        # arrays in the uniform address space: align roundUp(16, align(E)), stride 16 at least
        ("array<vec4<f32>, 2>", 16, 32), ("array<vec3<f32>, 3>", 16, 48), ("array<vec4<u32>, 1>", 16, 16),
    ],
)  # fmt: skip
def test_type_align_and_size(text, align, size):
    t = parse_type(text)
    assert (t.align, t.size) == (align, size)


@pytest.mark.parametrize("text", ["bool", "mat4x4<f32>", "array<array<u32, 2>, 2>", "vec5<f32>", "f64", "Params"])
def test_unsupported_types_are_refused(text):
    with pytest.raises(LayoutError):
        parse_type(text)


@pytest.mark.parametrize("text", ["array<array<u32, 2>, 2>", "array<array<vec4<u32>, 2>, 3>", "array< array<f32,4>,2u >"])
def test_a_nested_array_is_refused_as_nested_whatever_its_element(text):
    """The inner array of scalars had been refused for its stride, with advice to use an array of
    vec4: following it gave array<array<vec4<u32>, 2>, 2>, refused next as nested."""
    with pytest.raises(LayoutError, match="nested arrays are not supported in uniform structs") as info:
        parse_type(text)
    assert "array of vec4" not in str(info.value)


@pytest.mark.parametrize("text, count", [("array<u32, 4>", 4), ("array<f32, 2>", 2), ("array<vec2<f32>, 3>", 3),
                                         ("array<f16, 8>", 8), ("array<vec4<f16>, 2>", 2)])  # fmt: skip
def test_arrays_with_stride_below_16(text, count):
    """WGSL forbids them in uniforms; refused by the layout code, or laid out at a 16-byte stride."""
    try:
        t = parse_type(text)
    except LayoutError as exc:
        assert "16" in str(exc)
        return
    assert (t.align, t.stride, t.size) == (16, 16, 16 * count)


def offsets(fields):
    layout = struct_layout("P", fields)
    return [offset for _, _, offset in layout.fields], layout.size


@pytest.mark.parametrize(
    "fields, expected_offsets, size",
    [
        ([("count", "u32")], [0], 16),
        ([("count", "u32"), ("alpha", "f32"), ("beta", "f32")], [0, 4, 8], 16),
        ([("a", "u32"), ("b", "vec2<f32>")], [0, 8], 16),
        ([("a", "u32"), ("b", "vec3<f32>"), ("c", "f32")], [0, 16, 28], 32),  # c packs into vec3's tail
        ([("a", "u32"), ("b", "vec4<f32>")], [0, 16], 32),
        ([("a", "f32"), ("b", "array<vec4<u32>, 4>"), ("c", "u32")], [0, 16, 80], 96),
        ([("n", "u32"), ("v", "vec3<f32>"), ("w", "array<vec4<u32>, 2>"), ("h", "f16")], [0, 16, 32, 64], 80),
        ([("a", "vec2<f32>"), ("b", "vec2<f32>"), ("c", "vec3<f32>"), ("d", "vec2<u32>")], [0, 8, 16, 32], 48),
        ([("a", "f16"), ("b", "vec4<f32>"), ("c", "f16"), ("d", "vec2<f16>")], [0, 16, 32, 36], 48),
        ([("a", "f16"), ("b", "vec2<f16>"), ("c", "vec4<f16>")], [0, 4, 8], 16),
        ([("a", "f16"), ("b", "f16"), ("c", "f32"), ("d", "f16"), ("e", "vec3<f16>")], [0, 2, 4, 8, 16], 32),
        ([("a", "u32"), ("b", "vec3<f32>"), ("c", "f32"), ("d", "vec2<f32>"), ("e", "array<vec4<u32>, 4>"),
          ("f", "vec4<f32>"), ("g", "f16")], [0, 16, 28, 32, 48, 112, 128], 144),
        ([("a", "u32"), ("b", "u32"), ("c", "f32"), ("d", "i32")], [0, 4, 8, 12], 16),  # 16 bytes of 4-aligned fields
    ],
)  # fmt: skip
def test_struct_offsets(fields, expected_offsets, size):
    assert offsets(fields) == (expected_offsets, size)


def test_declaration_text():
    layout = struct_layout("Params", [("count", "u32"), ("affine", "vec2f"), ("w", "array<vec4u, 2>")])
    assert layout.declaration() == "struct Params {\n  count: u32,\n  affine: vec2<f32>,\n  w: array<vec4<u32>, 2>,\n};"


def test_pack_bytes():
    layout = struct_layout("P", [("a", "u32"), ("b", "vec3<f32>"), ("c", "f32"), ("d", "array<vec4<u32>, 2>"),
                                 ("e", "f16"), ("g", "i32")])  # fmt: skip
    data = layout.pack([7, [1.5, 2.5, 3.5], -4.25, [[10, 1, 2, 3], [11, 4, 5, 6]], 0.5, -9])
    assert len(data) == layout.size == 80
    assert struct.unpack_from("<I", data, 0) == (7,)
    assert data[4:16] == bytes(12)  # padding stays zero
    assert struct.unpack_from("<3f", data, 16) == (1.5, 2.5, 3.5)
    assert struct.unpack_from("<f", data, 28) == (-4.25,)
    assert struct.unpack_from("<4I", data, 32) == (10, 1, 2, 3) and struct.unpack_from("<4I", data, 48) == (11, 4, 5, 6)
    assert struct.unpack_from("<e", data, 64) == (0.5,)
    assert struct.unpack_from("<i", data, 68) == (-9,)


@pytest.mark.parametrize(
    "type_text, value",
    [("u32", 10.5), ("u32", -1), ("u32", 2**32), ("i32", 2**31), ("i32", -(2**31) - 1), ("u32", True), ("f32", float("nan")),
     ("f32", float("inf")), ("f16", 70000.0), ("f32", "x"), ("vec2<f32>", [1.0]), ("array<vec4<u32>, 2>", [[1, 2, 3, 4]]),
     ("array<vec4<u32>, 1>", [[1, 2, 3]])],
)  # fmt: skip
def test_pack_refuses_bad_values(type_text, value):
    layout = struct_layout("P", [("field", type_text)])
    with pytest.raises(LayoutError, match="field"):
        layout.pack([value])


@pytest.mark.parametrize("type_text, value", [("u32", [8, 99]), ("u32", [8]), ("f32", [1.0, 2.0]), ("i32", [1] * 20),
                                              ("f16", (0.5, 0.25))])  # fmt: skip
def test_a_scalar_field_given_a_list_is_refused_naming_what_came(type_text, value):
    """A scalar field took a list as its lanes: `[n, 99]` packed n and wrote 99 into the next field's
    bytes (overwritten by that field, so the call ran on n alone, silently), and a list longer than
    the struct failed with struct.pack_into's own message (red team)."""
    layout = struct_layout("P", [("count", type_text), ("other", "u32")])
    with pytest.raises(LayoutError, match=rf"field 'count' \({type_text}\) needs a number, got [\[(]"):
        layout.pack([value, 5])

#: A manifest value within the expression bounds (4,096 items counted through every level), whose
#: repr() is 16 MB: 4,095 references to one 4,096-character string.
HEAVY = [["x" * 4096] * 4095]


@pytest.mark.parametrize("type_text, value", [
    ("u32", HEAVY), ("f32", HEAVY), ("array<vec4<u32>, 2>", HEAVY[0]), ("vec2<f32>", HEAVY), ("array<vec4<u32>, 1>", HEAVY),
])  # fmt: skip
def test_pack_quotes_a_bad_value_by_a_bounded_text(type_text, value):
    """A field's error repr()'d the package's value whole: a struct field reading `[[s] * 4095]` of a
    4,096-character s gave each call a 16 MB LayoutError (docs/security.md: a value is quoted by at
    most 80 characters, built from no more of it)."""
    layout = struct_layout("P", [("field", type_text)])
    with pytest.raises(LayoutError, match="field 'field'") as info:
        layout.pack([value])
    assert len(str(info.value)) < 300, f"{len(str(info.value))} characters"


@pytest.mark.parametrize("type_text, value, fmt", [("u32", 0, "<I"), ("u32", 2**32 - 1, "<I"), ("u32", 4294967295.0, "<I"),
                                                   ("i32", -(2**31), "<i"), ("i32", 2**31 - 1, "<i"), ("i32", 0, "<i")])  # fmt: skip
def test_an_integer_field_takes_its_types_whole_range(type_text, value, fmt):
    """The ends of u32's and i32's ranges are values, packed as struct packs them (only past them is refused)."""
    layout = struct_layout("P", [("field", type_text), ("next", "u32")])
    assert layout.pack([value, 1]) == struct.pack(fmt, int(value)) + struct.pack("<I", 1) + bytes(8)


@pytest.mark.parametrize("make, quoted", [
    (lambda: parse_type("array<array<u32, 2>, 2>"), "supported in uniform structs: 'array<array<u32, 2>, 2>'"),
    (lambda: parse_type("array<u32, 4>"), "'array<u32, 4>' cannot live in a uniform buffer"),
    (lambda: parse_type("bool"), "unsupported uniform field type 'bool' (use u32"),
    (lambda: struct_layout("P", [("w", "array<vec4<u32>, 2>")]).pack([[[1, 2, 3, 4]]]), "values, got [[1, 2, 3, 4]]"),
    (lambda: struct_layout("P", [("v", "vec2<f32>")]).pack([[1.5]]), "needs vectors of 2 values, got [1.5]"),
    (lambda: struct_layout("P", [("x", "f32")]).pack([float("nan")]), "needs a finite number, got nan"),
    (lambda: struct_layout("P", [("x", "f32")]).pack([1e39]), "(f32) value 1e+39 overflows f32"),
], ids=["nested", "stride", "unsupported", "array length", "vector length", "nan", "f32 overflow"])  # fmt: skip
def test_a_layout_error_quotes_what_it_refused(make, quoted):
    """The message is all a package author sees of which type or value was wrong."""
    with pytest.raises(LayoutError) as info:
        make()
    assert quoted in str(info.value), str(info.value)


@pytest.mark.parametrize("fields", [[("n", "u32"), ("bad", "vec5<f32>")], [("n", "u32"), ("bad", "array<vec4<u32>, 0>")]])
def test_a_struct_layout_error_names_its_field_for_the_caller(fields):
    """rendering re-raises it with the binding's path and keeps ``field`` (docs/errors.md: callers read it)."""
    with pytest.raises(LayoutError) as info:
        struct_layout("P", fields)
    assert info.value.field == "bad"


def test_pack_accepts_integral_float_for_u32():
    layout = struct_layout("P", [("count", "u32")])
    assert struct.unpack_from("<I", layout.pack([16.0]), 0) == (16,)


# --- round trip through the device --------------------------------------------------------------

SHADER = """{{ enables }}
{{ declarations }}

@compute @workgroup_size(1)
fn {{ entryPoint }}({{ entryParams }}) {
  if (lix != 0u || wid.x != 0u) {
    return;
  }
  y[0] = f32(x[0]);
{% for line in inputs.reads %}
  y[{{ loop.index }}] = f32({{ line }});
{% endfor %}
}
"""


def layout_package(write_package, fields, reads, constants=None):
    """A package that copies each uniform field component named in ``reads`` into Y (as f32)."""
    manifest = {
        "domain": "test", "name": "Layout", **({"constants": constants} if constants else {}),
        "inputs": [{"role": "X", "dtype": "T", "rank": 1}],
        "outputs": [{"role": "Y", "dtype": "T", "rank": 1, "shape": f"[{len(reads) + 1}]"}],
        "typeConstraints": {"T": ["float32"]},
        "variants": [{
            "id": "only",
            "passes": [{
                "id": "main", "shader": "layout.wgsl.jinja",
                "source": {"inputs": {"reads": "[" + ", ".join(repr(r) for r in reads) + "]"}},
                "bindings": [
                    {"name": "x", "arg": "X", "buffer": {"type": "read-only-storage"}, "elementType": "f32"},
                    {"name": "y", "arg": "Y", "buffer": {"type": "storage"}, "elementType": "f32"},
                    {"name": "params", "semantic": "kernel.params", "buffer": {"type": "uniform"},
                     "struct": {"name": "Params", "fields": fields}},
                ],
                "dispatch": {"threads": 1, "workgroupSize": 1},
            }],
        }],
    }  # fmt: skip
    return wk.load_kernel(write_package(manifest, {"layout.wgsl.jinja": SHADER}))


def run_layout(kernel):
    y = kernel({"X": np.array([42.0], np.float32)})["Y"]
    assert y[0] == 42.0
    return y[1:].tolist()


def test_round_trip_f32_u32_i32_vectors(write_package):
    fields = [
        {"name": "a", "type": "u32", "value": 7},
        {"name": "b", "type": "vec3<f32>", "value": [1.5, 2.5, "1 + 2.5"]},
        {"name": "c", "type": "f32", "value": -4.25},
        {"name": "d", "type": "vec2<f32>", "value": [5, 6]},
        {"name": "e", "type": "i32", "value": -9},
        {"name": "f", "type": "vec4<f32>", "value": [7, 8, 9, 10]},
        {"name": "g", "type": "vec2<u32>", "value": ["numel(shapes.X) * 11", 12]},
        {"name": "h", "type": "array<vec4<f32>, 2>", "value": "[[1, 2, 3, 4], [5, 6, 7, 8.5]]"},
        {"name": "k", "type": "f32", "value": "8 / 4"},
    ]
    reads = ["params.a", "params.b.x", "params.b.y", "params.b.z", "params.c", "params.d.x", "params.d.y",
             "params.e", "params.f.x", "params.f.w", "params.g.x", "params.g.y", "params.h[0].x", "params.h[0].w",
             "params.h[1].x", "params.h[1].w", "params.k"]  # fmt: skip
    expected = [7, 1.5, 2.5, 3.5, -4.25, 5, 6, -9, 7, 10, 11, 12, 1, 4, 5, 8.5, 2]
    assert run_layout(layout_package(write_package, fields, reads)) == expected


def test_round_trip_f16_fields(write_package, need_dtype):
    need_dtype(np.float16)
    fields = [
        {"name": "a", "type": "f16", "value": 0.5},
        {"name": "b", "type": "f16", "value": -2.25},
        {"name": "c", "type": "f32", "value": 3.75},
        {"name": "d", "type": "vec2<f16>", "value": [1.5, -65504]},
        {"name": "e", "type": "vec3<f16>", "value": [4, 5, 6]},
        {"name": "f", "type": "u32", "value": 99},
        {"name": "g", "type": "vec4<f16>", "value": [0.25, 0.125, 60000, 7]},
    ]
    reads = ["params.a", "params.b", "params.c", "params.d.x", "params.d.y", "params.e.x", "params.e.z", "params.f",
             "params.g.x", "params.g.z", "params.g.w"]  # fmt: skip
    expected = [0.5, -2.25, 3.75, 1.5, -65504, 4, 6, 99, 0.25, 60000, 7]
    kernel = layout_package(write_package, fields, reads)
    assert "enable f16;" in kernel.render({"X": np.zeros(1, np.float32)})["main"]
    assert run_layout(kernel) == expected


@pytest.mark.parametrize(
    "type_text, values, reads, expected",
    [
        ("array<vec4<f32>, 2>", "[[1, 2, 3, 4], [5, 6, 7, 8]]", ["params.w[0].x", "params.w[1].w"], [1, 8]),
        ("array<vec4<u32>, 1>", "[[10, 11, 12, 13]]", ["params.w[0].x", "params.w[0].w"], [10, 13]),
        ("array<vec3<f32>, 2>", "[[1, 2, 3], [5, 6, 7]]", ["params.w[0].z", "params.w[1].x"], [3, 5]),
    ],
)  # fmt: skip
def test_round_trip_arrays(write_package, type_text, values, reads, expected):
    """Uniform arrays with a 16-byte element stride round-trip through the shader."""
    fields = [
        {"name": "n", "type": "u32", "value": 3},
        {"name": "w", "type": type_text, "value": values},
        {"name": "z", "type": "f32", "value": 0.5},
    ]
    kernel = layout_package(write_package, fields, ["params.n", *reads, "params.z"])
    assert run_layout(kernel) == [3, *expected, 0.5]


@pytest.mark.parametrize(
    "type_text, values, reads, expected",
    [
        ("array<u32, 4>", [10, 11, 12, 13], ["params.w[0]", "params.w[1]", "params.w[3]"], [10, 11, 13]),
        ("array<f32, 2>", [0.5, 1.5], ["params.w[0]", "params.w[1]"], [0.5, 1.5]),
        ("array<vec2<f32>, 2>", "[[1, 2], [3, 4]]", ["params.w[0].y", "params.w[1].x"], [2, 3]),
    ],
)  # fmt: skip
def test_arrays_with_short_stride_are_refused_or_right(write_package, type_text, values, reads, expected):
    """``array<u32, 4>``: WGSL requires a uniform array's stride to be a multiple of 16, so the
    declaration ``array<u32, 4>`` (stride 4) does not compile. The engine must refuse such a
    field with a LayoutError, or declare and pack it so that the shader reads the right values;
    never hand WGSL to the device that it rejects (it did, in commit 0e07664)."""
    fields = [
        {"name": "n", "type": "u32", "value": 3},
        {"name": "w", "type": type_text, "value": values},
        {"name": "z", "type": "f32", "value": 0.5},
    ]
    kernel = layout_package(write_package, fields, ["params.n", *reads, "params.z"])
    try:
        got = run_layout(kernel)
    except LayoutError as exc:
        assert "'w'" in str(exc) or type_text in str(exc)
        return
    assert got == [3, *expected, 0.5]


def test_u32_field_with_fractional_value_names_binding_and_field(write_package):
    """A u32 field whose expression gives 10.5: LayoutError with the binding's JSON path and the field."""
    fields = [{"name": "count", "type": "u32", "value": "numel(shapes.X) / 4"}]
    kernel = layout_package(write_package, fields, ["params.count"])
    with pytest.raises(LayoutError) as info:
        kernel({"X": np.zeros(42, np.float32)})
    message = str(info.value)
    assert "variants[0].passes[0].bindings[2]" in message and "'count'" in message and "10.5" in message
    assert info.value.field == "count"  # re-raised with the binding's path, it had lost the field (None)


@pytest.mark.parametrize("value", ["10.0 ** 39", "-3.4028235677973366e38"])
def test_an_f32_value_past_float32_is_refused_as_an_overflow_naming_its_field(write_package, value):
    """1e39 had passed the f32 field's finiteness check and failed in struct.pack ("OverflowError: float
    too large to pack with f format"); it overflows f32 as 65520 overflows f16, and the LayoutError
    names the field in its message and in ``field``."""
    fields = [{"name": "n", "type": "u32", "value": 1}, {"name": "big", "type": "f32", "value": value}]
    kernel = layout_package(write_package, fields, ["params.n", "params.big"])
    with pytest.raises(LayoutError, match=r"field 'big' \(f32\) value .* overflows f32") as info:
        kernel({"X": np.zeros(1, np.float32)})
    assert info.value.field == "big"


def test_an_f16_field_takes_what_rounds_to_a_finite_half_as_wgsl_float_does():
    """65519 rounds to f16's largest, 65504, as wgsl_float(65519, 'h') writes "65504.0h"; the field
    had refused anything past 65504. From 65520 rounding gives an infinity: an overflow, as before."""
    layout = struct_layout("P", [("a", "f16"), ("b", "f16")])
    assert np.frombuffer(layout.pack([65519.0, -65510.0]), np.float16)[:2].tolist() == [65504.0, -65504.0]
    with pytest.raises(LayoutError, match=r"field 'b' \(f16\) value 65520.0 overflows f16"):
        layout.pack([1.0, 65520.0])


def test_the_largest_values_that_round_to_a_finite_float32_are_packed_as_its_largest():
    """Below 2**128 - 2**103 a value rounds to float32's largest finite value, as struct packs it."""
    layout = struct_layout("P", [("a", "f32"), ("b", "f32")])
    packed = layout.pack([3.4028235677973362e38, -float(np.finfo(np.float32).max)])
    assert np.frombuffer(packed, np.float32)[:2].tolist() == [np.finfo(np.float32).max, -np.finfo(np.float32).max]


@pytest.mark.parametrize("count", [4097, 300_000_000, 100_000_000_000_000])
def test_a_uniform_struct_past_webgpus_binding_limit_is_refused_before_any_allocation(count):
    """array<vec4<u32>, 10^14> had raised a raw MemoryError in every call (bytearray(size) in pack),
    and smaller huge counts allocated gigabytes before their LayoutError."""
    with pytest.raises(LayoutError, match=r"needs \d+ bytes, more than WebGPU's maxUniformBufferBindingSize of 65536"):
        struct_layout("Params", [("count", "u32"), ("table", f"array<vec4<u32>, {count}>")])
    assert struct_layout("Params", [("table", "array<vec4<u32>, 4096>")]).size == 65536  # the limit itself fits


def test_a_uniform_array_of_length_0_is_refused_naming_the_field():
    """0 elements had been laid out as 0 bytes and refused only by the WGSL compiler (count must be >= 1)."""
    with pytest.raises(LayoutError, match=r"field 'table' \(array<vec4<u32>, 0>\) is an array of 0 elements"):
        struct_layout("Params", [("count", "u32"), ("table", "array<vec4<u32>, 0>")])


def test_a_uniform_array_whose_length_evaluates_to_0_is_a_layout_error(write_package):
    """A "$name" type whose constant gives array<..., 0> (the schema refuses only a literal 0):
    a LayoutError with the binding's path and the field, when the call is planned, not a ShaderCompileError."""
    fields = [{"name": "n", "type": "u32", "value": 3},
              {"name": "table", "type": "$table", "value": "[[1, 2, 3, 4]] * numel(shapes.X)"}]  # fmt: skip
    kernel = layout_package(write_package, fields, ["params.n", "params.table[0].w"],
                            constants={"table": "'array<vec4<u32>, ' ~ numel(shapes.X) ~ '>'"})  # fmt: skip
    assert run_layout(kernel) == [3, 4]  # X has one element: array<vec4<u32>, 1>
    with pytest.raises(LayoutError, match=r"bindings\[2\]: field 'table' \(array<vec4<u32>, 0>\) is an array of 0"):
        kernel.render({"X": np.zeros(0, np.float32)})
    with pytest.raises(LayoutError, match="at least 1"):
        kernel({"X": np.zeros(0, np.float32)})


@pytest.mark.parametrize("text", ["vec4<" + "f" * 4096 + ">", "array<array<f32, 4>, " + "9" * 4096 + ">",
                                  "array<f32, " + "9" * 4096 + ">"])
def test_an_unsupported_field_type_is_quoted_short(text):
    """security.md: a message quotes a package's value by at most 80 characters; a uniform field
    type of 4,096 characters had been quoted whole."""
    with pytest.raises(LayoutError) as info:
        parse_type(text)
    assert len(str(info.value)) < 300, str(info.value)
