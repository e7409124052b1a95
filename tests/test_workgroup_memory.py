"""Workgroup memory against maxComputeWorkgroupStorageSize, which wgpu-native does not check:
lavapipe runs a shader past it, an NVIDIA H200 hung on one (docs/perf/h200-wgmem-30.log)."""

from __future__ import annotations

import numpy as np
import pytest
from test_execution import one_pass_manifest  # noqa: E402

import webgpu_kernels as wk
from webgpu_kernels.validation import validate_package
from webgpu_kernels.workgroup_memory import describe, workgroup_declarations, workgroup_storage

ENTRY = "@compute @workgroup_size(64)\nfn main() {{ {body} }}\n"


def usage(declarations: str, body: str, entry: str = "main") -> dict | None:
    return workgroup_storage(declarations + "\n" + ENTRY.format(body=body), entry)


# --- sizes, per the WGSL specification's memory layout and WebGPU's roundUp(16, SizeOf(T)) -------------


@pytest.mark.parametrize(("declaration", "size"), [
    ("var<workgroup> a: array<f32, 256>;", 1024),
    ("var<workgroup> a: array<f32, 3>;", 16),  # 12 rounds up to 16
    ("var<workgroup> a: array<f16, 3>;", 16),
    ("var<workgroup> a: array<vec3<f32>, 5>;", 80),  # vec3f: size 12, align 16, stride 16
    ("var<workgroup> a: array<vec3h, 4>;", 32),  # vec3h: size 6, align 8, stride 8
    ("var<workgroup> a: array<vec2u, 7u>;", 64),  # 56 -> 64
    ("var<workgroup> a: mat2x3<f32>;", 32),  # two vec3f columns of stride 16
    ("var<workgroup> a: mat4x4f;", 64),
    ("var<workgroup> a: atomic<u32>;", 16),
    ("var<workgroup> a: array<atomic<i32>, 64>;", 256),
    ("var<workgroup> a: array<array<f32, 4>, 8>;", 128),
    ("const N = 64u;\nvar<workgroup> a: array<u32, N>;", 256),
    ("alias Row = array<f32, 32>;\nvar<workgroup> a: array<Row, 2>;", 256),
    # the CTS's S1: a at 0, b (align 16) at 16, c at 32; size rounds 36 up to 48
    ("struct S1 { a: f32, b: vec4f, c: u32, }\nvar<workgroup> a: array<S1, 2>;", 96),
    ("struct P { @size(32) a: f32, @align(16) b: f32 }\nvar<workgroup> a: P;", 48),
    # @align alone: b at 16, so Q is 20 -> 32 bytes (without it 8), a stride of 32
    ("struct Q { a: f32, @align(16) b: f32 }\nvar<workgroup> a: array<Q, 4>;", 128),
])  # fmt: skip
def test_sizes(declaration: str, size: int) -> None:
    assert usage(declaration, "_ = &a;") == {"a": size}


def test_a_struct_used_by_two_variables_counts_for_each() -> None:
    """The second use of a struct reads its size from the module's cache."""
    wgsl = "struct S { a: vec4f, b: f32 }\nvar<workgroup> one: S;\nvar<workgroup> two: array<S, 3>;"
    assert usage(wgsl, "_ = &one; _ = &two;") == {"one": 32, "two": 96}


@pytest.mark.parametrize("wgsl", ["struct A { x: A }\nvar<workgroup> a: A;",
                                  "struct A { b: B }\nstruct B { x: f32, a: array<A, 2> }\nvar<workgroup> a: array<A, 4>;"])
def test_a_struct_that_contains_itself_has_no_size(wgsl: str) -> None:
    """WGSL refuses a recursive type; the reader gives None (its compiler says why), not a RecursionError."""
    assert usage(wgsl, "_ = &a;") is None


def test_an_array_of_atomics_is_sized_by_its_type_alone() -> None:
    """atomic is WGSL's own: nothing else in the module decides the size (a refusal blames the package)."""
    found = workgroup_declarations("var<workgroup> a: array<atomic<u32>, 64>;\nstruct atomic2 { x: u32 }")
    assert found is not None and found["a"].predeclared


def test_describe_sums_two_or_more_variables() -> None:
    assert describe({"partial": 1024, "tile": 4096}) == "partial 1024 + tile 4096 = 5120 bytes"
    assert describe({"a": 16, "b": 32, "c": 48}) == "a 16 + b 32 + c 48 = 96 bytes"
    assert describe({"tile": 4096}) == "tile 4096 bytes"


def test_only_the_variables_the_entry_point_reaches_count() -> None:
    wgsl = """
var<workgroup> mine: array<f32, 64>;
var<workgroup> helper_only: array<f32, 128>;
var<workgroup> other_entry: array<f32, 4096>;
var<workgroup> unused: array<f32, 8192>;
// var<workgroup> commented: array<f32, 99999>;
fn helper() { helper_only[0] = 1.0; }
@compute @workgroup_size(64) fn main() { mine[0] = 1.0; helper(); }
@compute @workgroup_size(64) fn other() { other_entry[0] = 1.0; }
"""
    assert workgroup_storage(wgsl, "main") == {"mine": 256, "helper_only": 512}
    assert workgroup_storage(wgsl, "other") == {"other_entry": 16384}
    assert workgroup_storage("@compute @workgroup_size(1) fn main() {}", "main") == {}


@pytest.mark.parametrize(("wgsl", "want"), [
    # a function's own const does not size a module-scope array
    ("const N = 4096u;\nvar<workgroup> tile: array<f32, N>;\nfn helper() { const N = 1u; }\n"
     "@compute @workgroup_size(64) fn main() { tile[0] = 1.0; helper(); }", {"tile": 16384}),
    # nested block comments, and a // inside one
    ("var<workgroup> tile: array<f32, 8192>;\n"
     "@compute @workgroup_size(64) fn main() { /* if (d) { /* t */ } */ /* a /* b */ // c */ tile[0] = 1.0; }",
     {"tile": 32768}),
    # WGSL identifiers are Unicode
    ("var<workgroup> données: array<f32, 8192>;\nfn réduire() { données[0] = 1.0; }\n"
     "@compute @workgroup_size(64) fn main() { réduire(); }", {"données": 32768}),
    # a trailing comma in the template list
    ("var<workgroup,> tile: array<f32, 8192,>;\n@compute @workgroup_size(64) fn main() { tile[0] = 1.0; }",
     {"tile": 32768}),
    # a struct named like a predeclared type shadows it
    ("struct bool { x: vec4f }\nvar<workgroup> a: array<bool, 1024>;\n"
     "@compute @workgroup_size(64) fn main() { _ = &a; }", {"a": 16384}),
    # a struct member of a templated type: a (16 bytes, align 4) then b at 16, size 20, stride 20; 200 -> 208
    ("struct T { a: array<f32, 4>, b: f32 }\nvar<workgroup> t: array<T, 10>;\n"
     "@compute @workgroup_size(64) fn main() { _ = &t; }", {"t": 208}),
    # a swizzle, a member and a literal suffix named like a workgroup variable are no use of it
    ("var<workgroup> x: array<f32, 8192>;\nvar<workgroup> sum: array<f32, 8192>;\n"
     "var<workgroup> u: array<f32, 8192>;\nstruct P { sum: f32 }\n"
     "@compute @workgroup_size(64) fn main() { let v = vec2f(1.0); let p = P(1.0); _ = v.x + p.sum + f32(1u); }", {}),
])  # fmt: skip
def test_what_reviewers_tried(wgsl: str, want: dict) -> None:
    """the reproductions: each had given a wrong number (most too low, which lets a hang through)."""
    assert workgroup_storage(wgsl, "main") == want


@pytest.mark.parametrize("declaration", [
    "struct S { @size(0x400) a: f32 }\nvar<workgroup> a: array<S, 32>;",  # a hex attribute argument
    "const A = 256;\nstruct S { a: f32, @align(A) b: f32 }\nvar<workgroup> a: array<S, 64>;",
    "struct S { @size(256 * 4) a: f32 }\nvar<workgroup> a: S;",
    "override N: u32;\nvar<workgroup> a: array<f32, N>;",  # no default: the pipeline could not be built anyway
    "var<workgroup> a: array<f32, 2 * 32>;",  # an expression as the count
    "var<workgroup> a: Mystery;",
])  # fmt: skip
def test_what_it_cannot_size_is_not_guessed(declaration: str) -> None:
    assert usage(declaration, "_ = &a;") is None


@pytest.mark.parametrize(("declaration", "want"), [
    ("override N: u32 = 64u;\nvar<workgroup> a: array<f32, N>;", 256),
    ("@id(3) override N = 100;\nvar<workgroup> a: array<vec2f, N>;", 800),
    # the module-scope override, not the function's const of the same name
    ("override N: u32 = 4096u;\nvar<workgroup> a: array<f32, N>;\nfn f() { const N = 1u; }", 16384),
])  # fmt: skip
def test_an_override_counts_as_its_default(declaration: str, want: int) -> None:
    """The engine builds its pipelines without pipeline constants, so an override has its default."""
    assert usage(declaration, "_ = &a;") == {"a": want}


def test_unbalanced_braces_are_not_guessed() -> None:
    assert workgroup_storage("var<workgroup> a: array<f32, 4>;\nfn main() { a[0] = 1.0;", "main") is None


def test_a_declaration_is_found_where_the_compiler_reads_it() -> None:
    """Its offsets are the text's own through every kind of comment (a "\\r" ends a line comment,
    block comments nest), and its type is WGSL's only where no module name shadows or sizes it."""
    wgsl = ("// var<workgroup> a: array<f32, 1>;\r/* /* */ var<workgroup> b: f32; */\n"
            "var<workgroup>\u200ea: array<vec4f, N>;\nconst N = 4u;\nalias f32 = u32;\n"
            "var<workgroup> b: array<f32, 2> ;\nvar<workgroup> c: mat2x2h")  # fmt: skip
    found = workgroup_declarations(wgsl)
    assert found is not None and list(found) == ["a", "b", "c"]
    spans = {name: wgsl[d.start:d.end] for name, d in found.items()}
    assert spans == {"a": "var<workgroup>\u200ea: array<vec4f, N>", "b": "var<workgroup> b: array<f32, 2> ",
                     "c": "var<workgroup> c: mat2x2h"}  # fmt: skip
    assert {name: d.predeclared for name, d in found.items()} == {"a": False, "b": False, "c": True}
    assert workgroup_declarations("var<workgroup> a: f32;\nfn main() {") is None


# --- the engine refuses a pass past the device's limit -----------------------------------------------

SCRATCH_WGSL = """{{ declarations }}
var<workgroup> scratch: array<f32, {{ tunables.FLOATS }}>;
@compute @workgroup_size({{ workgroupSize }})
fn {{ entryPoint }}({{ entryParams }}) {
  let i = {{ globalIndex }};
  scratch[lix] = 2.0;
  workgroupBarrier();
  if (i < arrayLength(&y)) {
    y[i] = x[i] + scratch[lix];
  }
}
"""


@pytest.fixture
def scratch_kernel(write_package) -> wk.Kernel:
    manifest = one_pass_manifest("Scratch", "scratch.wgsl.jinja", tunables={"FLOATS": 64})
    return wk.load_kernel(write_package(manifest, {"scratch.wgsl.jinja": SCRATCH_WGSL}))


def test_a_pass_past_the_limit_is_refused_before_any_gpu_work(scratch_kernel: wk.Kernel) -> None:
    limit = wk.get_device().limits["max-compute-workgroup-storage-size"]
    x = np.arange(100, dtype=np.float32)
    before = x.copy()
    at_limit = limit // 4
    np.testing.assert_array_equal(scratch_kernel({"X": x}, tunables={"FLOATS": at_limit})["Y"], x + 2)
    with pytest.raises(wk.DeviceLimitError) as refused:
        scratch_kernel({"X": x}, tunables={"FLOATS": at_limit + 4})
    assert refused.value.argument == "FLOATS"
    assert f"maxComputeWorkgroupStorageSize = {limit} bytes" in str(refused.value)
    assert f"scratch {limit + 16} bytes in pass 'main' of variant 'main'" in str(refused.value)
    np.testing.assert_array_equal(x, before)
    np.testing.assert_array_equal(scratch_kernel({"X": x})["Y"], x + 2)  # the kernel still runs


def test_an_array_sized_by_an_override_is_refused_past_the_limit(write_package) -> None:
    """The override's default is the count the GPU sees: at the limit the pass runs, past it it is refused."""
    wgsl = SCRATCH_WGSL.replace("{{ declarations }}", "{{ declarations }}\noverride FLOATS: u32 = {{ tunables.FLOATS }}u;"
                                ).replace("array<f32, {{ tunables.FLOATS }}>", "array<f32, FLOATS>")  # fmt: skip
    manifest = one_pass_manifest("OverrideScratch", "scratch.wgsl.jinja", tunables={"FLOATS": 64})
    kernel = wk.load_kernel(write_package(manifest, {"scratch.wgsl.jinja": wgsl}))
    limit = wk.get_device().limits["max-compute-workgroup-storage-size"]
    x = np.arange(100, dtype=np.float32)
    np.testing.assert_array_equal(kernel({"X": x}, tunables={"FLOATS": limit // 4})["Y"], x + 2)
    with pytest.raises(wk.DeviceLimitError, match=f"scratch {limit + 16} bytes"):
        kernel({"X": x}, tunables={"FLOATS": limit // 4 + 4})


def test_validate_warns_of_a_refusal_here_and_of_more_than_every_device_offers(scratch_kernel: wk.Kernel,
                                                                               tmp_path) -> None:  # fmt: skip
    import json

    from webgpu_kernels import digests

    limit = wk.get_device().limits["max-compute-workgroup-storage-size"]
    root = scratch_kernel.package.root
    cases = [{"name": name, "inputs": {"X": {"shape": [8]}}, "tunables": {"FLOATS": floats}}
             for name, floats in (("small", 64), ("past-portable", 5000), ("past-limit", limit // 4 + 4),
                                  ("past-limit-again", limit // 4 + 4))]  # fmt: skip
    (root / "bench.json").write_text(json.dumps({"cases": cases}), encoding="utf-8")
    digests.write_metadata(root)
    report = validate_package(root)
    messages = [p.message for p in report.warnings]
    assert not report.errors, report.errors
    refused = [m for m in messages if "refused on this adapter" in m]
    assert len(refused) == 2 and f"= {limit} bytes" in refused[0]  # one per case, the same WGSL or not
    assert "'past-limit'" in refused[0] and "'past-limit-again'" in refused[1]
    portable = [m for m in messages if "more than the 16384 every WebGPU device offers" in m]
    assert len(portable) == 1 and "scratch 20000 bytes" in portable[0]


def test_a_pair_whose_every_case_the_adapter_refuses_says_so(scratch_kernel: wk.Kernel) -> None:
    """Its status had read "not exercised" (as if no case reached it: add a case) while 17 to 22
    cases did and `test` failed them all on the same adapter (an author's trial)."""
    import json

    from webgpu_kernels import digests

    limit = wk.get_device().limits["max-compute-workgroup-storage-size"]
    root = scratch_kernel.package.root
    cases = [{"name": f"past-limit-{n}", "inputs": {"X": {"shape": [n]}}, "tunables": {"FLOATS": limit // 4 + 4}}
             for n in (8, 9)]  # fmt: skip
    (root / "bench.json").write_text(json.dumps({"cases": cases}), encoding="utf-8")
    digests.write_metadata(root)
    (coverage,) = validate_package(root).coverage
    assert (coverage.cases, coverage.pipelines, coverage.refused) == (2, 0, 2)
    assert coverage.status == "refused by this adapter" and coverage.as_dict()["refused"] == 2


def test_validate_says_when_it_cannot_size_the_workgroup_memory(write_package) -> None:
    """A count it cannot read (an expression) skips the check, and validate says so."""
    import json

    from webgpu_kernels import digests

    manifest = one_pass_manifest("Unsized", "unsized.wgsl.jinja")
    wgsl = SCRATCH_WGSL.replace("array<f32, {{ tunables.FLOATS }}>", "array<f32, 16 * 4>")
    root = write_package(manifest, {"unsized.wgsl.jinja": wgsl})
    (root / "bench.json").write_text(json.dumps({"cases": [{"name": "c", "inputs": {"X": {"shape": [8]}}}]}),
                                     encoding="utf-8")  # fmt: skip
    digests.write_metadata(root)
    report = validate_package(root)
    unsized = [p.message for p in report.warnings if "cannot be sized" in p.message]
    assert len(unsized) == 1 and "pass 'main' of variant 'main'" in unsized[0], report.problems


@pytest.mark.parametrize(("count", "extra", "call", "blamed"), [
    ("{{ attrs.FLOATS }}", {"attributes": {"FLOATS": 64}}, "attrs", "FLOATS"),
    ("{{ floats }}", {"attributes": {"FLOATS": 64}, "constants": {"floats": "attrs.FLOATS"}}, "attrs", "FLOATS"),
    ("{{ tunables.FLOATS }}", {"tunables": {"FLOATS": 64}}, "tunables", "FLOATS"),
    ("{{ inputs.n }}", {}, "shape", "X"),  # a pass input that reads the input's shape
])  # fmt: skip
def test_a_refusal_names_what_the_workgroup_memory_follows(write_package, count: str, extra: dict, call: str,
                                                           blamed: str) -> None:  # fmt: skip
    """The argument had been 'tunables' whatever the array's size came from: an attribute or the
    input's shape too, which the caller changes, not a tunable."""
    manifest = one_pass_manifest("Follows", "scratch.wgsl.jinja", **extra)
    manifest["variants"][0]["passes"][0]["source"] = {"inputs": {"n": "shapes.X[0]"}}
    kernel = wk.load_kernel(write_package(manifest, {"scratch.wgsl.jinja": SCRATCH_WGSL.replace(
        "{{ tunables.FLOATS }}", count)}))  # fmt: skip
    past = wk.get_device().limits["max-compute-workgroup-storage-size"] // 4 + 4
    x = np.arange(past if call == "shape" else 8, dtype=np.float32)
    arguments = {"attrs": {"attrs": {"FLOATS": past}}, "tunables": {"tunables": {"FLOATS": past}}, "shape": {}}[call]
    with pytest.raises(wk.DeviceLimitError) as refused:
        kernel({"X": x}, **arguments)
    assert refused.value.argument == blamed
    assert "the package fixes" not in str(refused.value)


def test_a_size_the_package_fixes_is_the_variants(write_package) -> None:
    limit = wk.get_device().limits["max-compute-workgroup-storage-size"]
    wgsl = SCRATCH_WGSL.replace("{{ tunables.FLOATS }}", str(limit // 4 + 4))
    kernel = wk.load_kernel(write_package(one_pass_manifest("Fixed", "scratch.wgsl.jinja"), {"scratch.wgsl.jinja": wgsl}))
    with pytest.raises(wk.DeviceLimitError, match="variant 'main', a size the package fixes") as refused:
        kernel({"X": np.arange(8, dtype=np.float32)})
    assert refused.value.argument == "variant"


@pytest.mark.parametrize(("declaration", "blamed"), [
    # the type over two lines: the second line's tunable sizes it
    ("var<workgroup> scratch: array<f32,\n  {{ tunables.FLOATS }}>;", "FLOATS"),
    # a WGSL const (or a struct) sizes it: another line decides, not traced, so not 'the package fixes'
    ("const FLOATS = {{ tunables.FLOATS }}u;\nvar<workgroup> scratch: array<f32, FLOATS>;", "tunables"),
    ("struct Scratch { a: array<f32, {{ tunables.FLOATS }}> }\nalias S = Scratch;\nvar<workgroup> scratch: S;",
     "tunables"),
])  # fmt: skip
def test_a_size_written_elsewhere_is_not_the_packages(write_package, declaration: str, blamed: str) -> None:
    """Only the declaration's first line had been read: a tunable on its second line, or in the
    const or struct it names, had been blamed on the variant as 'a size the package fixes'."""
    wgsl = SCRATCH_WGSL.replace("var<workgroup> scratch: array<f32, {{ tunables.FLOATS }}>;", declaration)
    if "Scratch" in declaration:
        wgsl = wgsl.replace("scratch[lix]", "scratch.a[lix]")
    manifest = one_pass_manifest("Elsewhere", "scratch.wgsl.jinja", tunables={"FLOATS": 64})
    kernel = wk.load_kernel(write_package(manifest, {"scratch.wgsl.jinja": wgsl}))
    past = wk.get_device().limits["max-compute-workgroup-storage-size"] // 4 + 4
    with pytest.raises(wk.DeviceLimitError) as refused:
        kernel({"X": np.arange(8, dtype=np.float32)}, tunables={"FLOATS": past})
    assert refused.value.argument == blamed
    assert "the package fixes" not in str(refused.value)


@pytest.mark.parametrize(("declaration", "blamed"), [
    # a commented-out fixed size before the real one, which follows the tunable
    ("// var<workgroup> scratch: array<f32, 64>;\nvar<workgroup> scratch: array<f32, {{ tunables.FLOATS }}>;", "FLOATS"),
    ("/* var<workgroup> scratch: array<f32, 64>; /* nested */ */\n"
     "var<workgroup> scratch: array<f32, {{ tunables.FLOATS }}>;", "FLOATS"),
    # a commented-out tunable before the real one, whose size the package fixes
    ("// var<workgroup> scratch: array<f32, {{ tunables.FLOATS }}>;\nvar<workgroup> scratch: array<f32, FIXED>;",
     "variant"),
    # a ";" in a comment inside the type is no end of the declaration: its second line sizes it
    ("var<workgroup> scratch: array<f32, // the count;\n  {{ tunables.FLOATS }}>;", "FLOATS"),
])  # fmt: skip
def test_a_commented_out_declaration_is_not_the_one_blamed(write_package, declaration: str, blamed: str) -> None:
    """The declaration's template lines had been found by a regular expression over the rendered WGSL
    that read comments as code: a commented-out declaration before the real one was the one blamed."""
    past = wk.get_device().limits["max-compute-workgroup-storage-size"] // 4 + 4
    wgsl = SCRATCH_WGSL.replace("var<workgroup> scratch: array<f32, {{ tunables.FLOATS }}>;",
                                declaration.replace("FIXED", str(past)))  # fmt: skip
    manifest = one_pass_manifest("Commented", "scratch.wgsl.jinja", tunables={"FLOATS": 64})
    kernel = wk.load_kernel(write_package(manifest, {"scratch.wgsl.jinja": wgsl}))
    with pytest.raises(wk.DeviceLimitError) as refused:
        kernel({"X": np.arange(8, dtype=np.float32)}, tunables={"FLOATS": past if blamed == "FLOATS" else 64})
    assert refused.value.argument == blamed
    assert ("a size the package fixes" in str(refused.value)) == (blamed == "variant")
