#!/usr/bin/env python3
"""Write test.json (and its .npy data files) for the embedded kernel packages, then refresh their metadata.json.

Expected values come from the float64 NumPy references in ``webgpu_kernels.references``, which are
independent of the WGSL templates: each case's inputs are drawn exactly as ``webgpu-kernels test``
will draw them (casefile.py), the reference runs in float64 on those typed inputs, and the result
is rounded once to the output dtype and stored. Small results are written inline, larger ones as
``<case>.<output>.npy`` files next to test.json, in the output dtype (at the top of the package: the
library's package data takes ``kernels/*/*``, not sub-folders). Data files no case uses any more are removed.

    python scripts/make_test_cases.py            # both embedded packages
    python scripts/make_test_cases.py --check    # exit 1 if the files on disk differ from what would be written
"""

from __future__ import annotations

import argparse
import io
import json
import sys
from typing import Any

import numpy as np

from webgpu_kernels import case_data, casefile, digests, references
from webgpu_kernels.manifest import parse_manifest
from webgpu_kernels.package import embedded_root

#: Results with at most this many elements are written inline in test.json.
INLINE_MAX = 64
#: Where data files go, relative to the package ("" = next to test.json).
DATA_DIR = ""
DTYPES = (("float32", "f32"), ("float16", "f16"))
NAN, INF = "nan", "inf"


def normal(seed: int, *, mean: float = 0.0, std: float = 1.0) -> dict[str, Any]:
    spec: dict[str, Any] = {"distribution": "normal", "seed": seed}
    if mean:
        spec["mean"] = mean
    if std != 1.0:
        spec["std"] = std
    return spec


def uniform(seed: int, low: float, high: float) -> dict[str, Any]:
    return {"distribution": "uniform", "seed": seed, "low": low, "high": high}


def gen(shape: list[int], spec: dict[str, Any], special: dict[str, Any] | None = None) -> dict[str, Any]:
    entry: dict[str, Any] = {"shape": shape, "generate": spec}
    if special:
        entry["special"] = special
    return entry


def inline(shape: list[int], values: Any) -> dict[str, Any]:
    return {"shape": shape, "values": values}


# --- QuickGelu ---------------------------------------------------------------------------------------

QG_SPECIALS = {
    "float32": [NAN, INF, "-inf", 0.0, -0.0, 1, -1, 3.4028234663852886e38, -3.4028234663852886e38, 1e-45,
                -1.1754943508222875e-38, 65504, -65504, 88, -88, 100, -100, 0.5, -0.5, 20],
    "float16": [NAN, INF, "-inf", 0.0, -0.0, 1, -1, 65504, -65504, 5.960464477539063e-08,
                -6.103515625e-05, 6.103515625e-05, 8, -8, 20, -20, 3.5, -3.5, 0.5, -0.5],
}  # fmt: skip
# Special values scattered over a larger random input: every vec4 lane, the tail, the ends.
QG_SCATTER = {
    "float32": {"at": [0, 5, 10, 15, 1000, 1001, 1002, 1003, 2046, 2047],
                "values": [NAN, INF, "-inf", -0.0, 3.4028234663852886e38, -3.4028234663852886e38, 1e-45, -100, NAN, INF]},
    "float16": {"at": [0, 5, 10, 15, 1000, 1001, 1002, 1003, 2046, 2047],
                "values": [NAN, INF, "-inf", -0.0, 65504, -65504, 5.960464477539063e-08, -20, NAN, 65504]},
}  # fmt: skip


def quick_gelu_cases(dtype: str) -> list[dict[str, Any]]:
    seed = 100 if dtype == "float32" else 200
    return [
        {"name": "vec4-2x64", "description": "128 elements: vec4, vec4_tail and scalar all apply.",
         "inputs": {"X": gen([2, 64], normal(seed + 1))}},
        {"name": "multi-workgroup-3x77x16", "description": "3696 elements, several workgroups of 256.",
         "inputs": {"X": gen([3, 77, 16], normal(seed + 2, std=3.0))}},
        {"name": "workgroup-64-3x77x16", "description": "The same data with the WORKGROUP_SIZE tunable at 64.",
         "tunables": {"WORKGROUP_SIZE": 64}, "inputs": {"X": gen([3, 77, 16], normal(seed + 2, std=3.0))}},
        {"name": "tail-5x77x13", "description": "5005 elements (not a multiple of 4): vec4_tail and scalar; "
                                                "uniform over [-12, 12] to reach both saturated ends.",
         "inputs": {"X": gen([5, 77, 13], uniform(seed + 3, -12.0, 12.0))}},
        {"name": "tail-3x5", "description": "15 elements: a partial last quad.",
         "inputs": {"X": gen([3, 5], normal(seed + 4))}},
        {"name": "one-element", "inputs": {"X": gen([1], normal(seed + 5))}},
        {"name": "rank0", "description": "A rank-0 (scalar) tensor.", "inputs": {"X": inline([], -1.25)}},
        {"name": "empty-0x3", "description": "No elements: only the scalar variant accepts it.",
         "inputs": {"X": inline([0, 3], [])}},
        {"name": "specials", "description": "NaN, infinities, signed zeros, subnormals and the dtype's extremes.",
         "inputs": {"X": inline([5, 4], QG_SPECIALS[dtype])}},
        {"name": "specials-scattered-2x1024", "description": "Special values at chosen indices of random data.",
         "inputs": {"X": gen([2, 1024], normal(seed + 6, std=4.0), QG_SCATTER[dtype])}},
        {"name": "alpha-1.0-4x33", "description": "A non-default alpha.", "attrs": {"alpha": 1.0},
         "inputs": {"X": gen([4, 33], normal(seed + 7, std=2.0))}},
        {"name": "alpha-0", "description": "alpha = 0: Y = X / 2. No infinities: 0 * inf inside the sigmoid is NaN "
                                           "in IEEE arithmetic, but WGSL's finite-math rules let a compiler fold "
                                           "0 * x to 0, so either answer is allowed there.",
         "attrs": {"alpha": 0.0}, "inputs": {"X": inline([8], [1, -2, 0.5, -0.0, 1000, -3.25, NAN, 3])}},
        {"name": "alpha-3e38", "description": "alpha near the f32 limit: alpha * log2(e) overflows f32, so a "
                                              "driver that folds it into exp2 must still give ±0 at x = ±0 "
                                              "(inf * 0 would be NaN).",
         "attrs": {"alpha": 3e38}, "inputs": {"X": inline([8], [0.0, -0.0, 1, -1, 0.5, -0.5, 3, -3])}},
    ]


# --- BiasAdd -----------------------------------------------------------------------------------------

BA_SPECIALS = {
    # X (1, 2, 8), bias (8), skip (1, 2, 8). Channel c of element e is e % 8.
    "float32": {
        "X": [NAN, 1, INF, "-inf", 3.4028234663852886e38, -3.4028234663852886e38, INF, 1e-45,
              -0.0, 2, 0.5, -1, -3.4028234663852886e38, 3.4028234663852886e38, 7, 1.1754943508222875e-38],
        "bias": [0, NAN, 1, 1, 3.4028234663852886e38, -3.4028234663852886e38, "-inf", 1e-45],
        "skip": [0, 0, 1, -1, 0, 0, 0, 0, -0.0, INF, "-inf", NAN, 0, 0, -7, -1.1754943508222875e-38],
    },
    "float16": {
        "X": [NAN, 1, INF, "-inf", 65504, 65504, INF, 5.960464477539063e-08,
              -0.0, 2, 0.5, -1, 65504, -65504, 60000, 6.103515625e-05],
        "bias": [0, NAN, 1, 1, 65504, 0, "-inf", 5.960464477539063e-08],
        "skip": [0, 0, 1, -1, -65504, 65504, 0, 0, -0.0, INF, "-inf", NAN, -65504, 65504, 60000, -6.103515625e-05],
    },
}  # fmt: skip
BA_SCATTER = {
    "float32": {"at": [0, 3, 6, 9, 1279, 1280, 2559], "values": [NAN, INF, "-inf", -0.0, 1e30, -1e30, NAN]},
    "float16": {"at": [0, 3, 6, 9, 1279, 1280, 2559], "values": [NAN, INF, "-inf", -0.0, 32768, -32768, NAN]},
}


def bias_add_cases(dtype: str) -> list[dict[str, Any]]:
    seed = 300 if dtype == "float32" else 400

    def xbs(shape: list[int], s: int, *, std: float = 1.0, special: dict[str, Any] | None = None) -> dict[str, Any]:
        return {"X": gen(shape, normal(s, std=std), special), "bias": gen([shape[2]], normal(s + 1, std=std)),
                "skip": gen(shape, normal(s + 2, std=std))}  # fmt: skip

    return [
        {"name": "vec4-2x5x320", "description": "The ONNX Runtime test shape: vec4 and scalar apply.",
         "inputs": xbs([2, 5, 320], seed + 10)},
        {"name": "sd-channels-1x3x1280", "description": "Stable Diffusion UNet channel count 1280.",
         "inputs": xbs([1, 3, 1280], seed + 20, std=2.0)},
        {"name": "workgroup-64-2x5x320", "description": "WORKGROUP_SIZE 64: more workgroups, a longer grid stride.",
         "tunables": {"WORKGROUP_SIZE": 64}, "inputs": xbs([2, 5, 320], seed + 10)},
        {"name": "scalar-multi-workgroup-2x77x13", "description": "2002 elements, C = 13: scalar only, "
                                                                "two workgroups striding over the data.",
         "inputs": xbs([2, 77, 13], seed + 30)},
        {"name": "c5-2x3x5", "description": "C = 5: vec4 does not apply.", "inputs": xbs([2, 3, 5], seed + 40)},
        {"name": "c6-numel12-2x1x6", "description": "12 elements (a multiple of 4) but C = 6: scalar only.",
         "inputs": xbs([2, 1, 6], seed + 50)},
        {"name": "tail-1x7x3", "description": "21 elements: a partial last item group.",
         "inputs": xbs([1, 7, 3], seed + 60)},
        {"name": "one-element", "inputs": xbs([1, 1, 1], seed + 70)},
        {"name": "empty-n0", "inputs": {"X": inline([0, 4, 8], []), "bias": gen([8], normal(seed + 80)),
                                        "skip": inline([0, 4, 8], [])}},
        {"name": "empty-s0", "inputs": {"X": inline([2, 0, 8], []), "bias": gen([8], normal(seed + 81)),
                                        "skip": inline([2, 0, 8], [])}},
        {"name": "empty-c0", "description": "No channels: bias is empty too.",
         "inputs": {"X": inline([2, 3, 0], []), "bias": inline([0], []), "skip": inline([2, 3, 0], [])}},
        {"name": "specials", "description": "NaN, infinities (inf + -inf = NaN), signed zeros, subnormals, "
                                            "overflow to infinity, and sums whose partial results leave the "
                                            "dtype's range but whose total does not.",
         "inputs": {role: inline([8] if role == "bias" else [1, 2, 8], values)
                    for role, values in BA_SPECIALS[dtype].items()}},
        {"name": "specials-scattered-2x4x320", "description": "Special values at chosen indices of random data.",
         "inputs": xbs([2, 4, 320], seed + 90, special=BA_SCATTER[dtype])},
    ]


# Calls the contract refuses, each with the error it must raise (a part of its message too, so
# that a call refused for another reason does not pass). Dtype-independent: written once.
def f32(shape: list[int], seed: int, dtype: str = "float32") -> dict[str, Any]:
    return {"dtype": dtype, **gen(shape, normal(seed))}


QUICK_GELU_REFUSALS = [
    {"name": "refused-int32-input", "description": "int32 is outside T's constraint.",
     "inputs": {"X": f32([4], 900, "int32")}, "refused": {"error": "DTypeError", "message": "argument 'X'"}},
    {"name": "refused-alpha-not-a-number", "attrs": {"alpha": "large"},
     "inputs": {"X": f32([4], 901)}, "refused": {"error": "AttributeValueError", "message": "argument 'alpha'"}},
    {"name": "refused-workgroup-size-0", "description": "workgroupOk guards every variant.",
     "tunables": {"WORKGROUP_SIZE": 0}, "inputs": {"X": f32([8], 902)},
     "refused": {"error": "SelectionError", "message": "workgroupOk=False"}},
    {"name": "refused-vec4-on-5-elements", "description": "vec4 needs a multiple of 4 elements.",
     "variants": ["vec4"], "inputs": {"X": f32([5], 903)},
     "refused": {"error": "VariantRejectedError", "message": "'vec4Ok' is false"}},
]  # fmt: skip
BIAS_ADD_REFUSALS = [
    {"name": "refused-rank-2", "inputs": {"X": f32([3, 8], 910), "bias": f32([8], 911), "skip": f32([3, 8], 912)},
     "refused": {"error": "RankError", "message": "argument 'X'"}},
    {"name": "refused-bias-length", "description": "bias must have X's last dimension.",
     "inputs": {"X": f32([2, 3, 8], 913), "bias": f32([4], 914), "skip": f32([2, 3, 8], 915)},
     "refused": {"error": "SelectionError", "message": "dim(shapes.bias, 0) == dim(shapes.X, 2)"}},
    {"name": "refused-skip-shape", "description": "skip must have X's shape (no broadcasting).",
     "inputs": {"X": f32([2, 3, 8], 916), "bias": f32([8], 917), "skip": f32([2, 4, 8], 918)},
     "refused": {"error": "SelectionError", "message": "sameShape(shapes.X, shapes.skip)"}},
    {"name": "refused-mixed-dtypes", "description": "X, bias and skip share type variable T.",
     "inputs": {"X": f32([2, 3, 8], 919), "bias": f32([8], 920, "float16"), "skip": f32([2, 3, 8], 921)},
     "refused": {"error": "DTypeError", "message": "argument 'bias'"}},
    {"name": "refused-vec4-on-c5", "description": "vec4 needs C to be a multiple of 4.", "variants": ["vec4"],
     "inputs": {"X": f32([2, 3, 5], 922), "bias": f32([5], 923), "skip": f32([2, 3, 5], 924)},
     "refused": {"error": "VariantRejectedError", "message": "variant 'vec4' cannot run this call"}},
]  # fmt: skip


# --- writing -----------------------------------------------------------------------------------------

PACKAGES = {
    "com.microsoft.QuickGelu": {
        "cases": quick_gelu_cases,
        "refusals": QUICK_GELU_REFUSALS,
        "description": "Correctness cases for com.microsoft.QuickGelu (Y = X * sigmoid(alpha * X)). Expected "
                       "values: the float64 reference on the typed inputs, rounded once to the output dtype.",
        # f32: the shader's exp() is not correctly rounded (WGSL allows 3 + 2|x| ULP), a few ULP
        # of relative error (1e-6 measured on lavapipe; 1e-5 leaves room for other GPUs); f16:
        # one f16 ULP is at most 2^-10 of the value, and WGSL does not fix the rounding mode,
        # so two ULP; atol covers f16 subnormal results (spacing 6e-8).
        "tolerances": {"float32": {"rtol": 1e-5, "atol": 1e-6}, "float16": {"rtol": 2e-3, "atol": 1e-5}},
    },
    "com.microsoft.BiasAdd": {
        "cases": bias_add_cases,
        "refusals": BIAS_ADD_REFUSALS,
        "description": "Correctness cases for com.microsoft.BiasAdd (Y = X + bias + skip). Expected values: the "
                       "float64 reference on the typed inputs, rounded once to the output dtype.",
        # f32: two f32 roundings of partial sums: up to an ULP of the largest partial sum (about
        # 2e-6 for inputs of standard deviation 2), which atol covers where the sum cancels;
        # f16: summed in f32 and rounded once, at most one f16 ULP (two with either rounding mode).
        "tolerances": {"float32": {"rtol": 1e-6, "atol": 4e-6}, "float16": {"rtol": 2e-3, "atol": 1e-5}},
    },
}


def npy_bytes(array: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, np.ascontiguousarray(array), allow_pickle=False)
    return buffer.getvalue()


def build_package(op_id: str) -> tuple[dict[str, Any], dict[str, bytes]]:
    """The test.json document of one package and its data files (name -> bytes)."""
    root = embedded_root() / op_id
    manifest = parse_manifest(json.loads((root / "manifest.json").read_text("utf-8")))
    spec = PACKAGES[op_id]
    reference = references.numpy_reference(op_id)
    assert reference is not None, op_id
    out_type_vars = {o.role: o.dtype for o in manifest.outputs}
    cases: list[dict[str, Any]] = []
    data_files: dict[str, bytes] = {}
    for dtype, short in DTYPES:
        for base in spec["cases"](dtype):
            case: dict[str, Any] = {"name": f"{base['name']}-{short}"}
            for key in ("description", "tags", "attrs", "tunables"):
                if key in base:
                    case[key] = base[key]
            case["types"] = {"T": dtype}
            case["inputs"] = base["inputs"]
            parsed = casefile.parse_test_file({"cases": [{**case, "expected": {"Y": {"file": "x.npy"}}}]}).cases[0]
            arrays = parsed.build_inputs(manifest, lambda name: b"")
            attrs = {**manifest.attributes, **base.get("attrs", {})}
            with np.errstate(invalid="ignore", over="ignore"):
                result = reference(arrays, attrs)
            binding = parsed.type_binding(manifest)
            expected = {}
            for role, values in result.items():
                out_dtype = binding[out_type_vars[role]]
                with np.errstate(over="ignore", invalid="ignore"):
                    stored = np.asarray(values, dtype=np.float64).astype(case_data.numpy_dtype(out_dtype))
                if out_dtype == "float16":
                    # WGSL lets an f32 -> f16 conversion of a value in (65504, 65536) give either 65504
                    # or inf: keep such results out of the package.
                    ambiguous = np.abs(values[np.isfinite(values)])
                    assert not ((ambiguous > 65504) & (ambiguous < 65536)).any(), (op_id, case["name"])
                if stored.size <= INLINE_MAX:
                    expected[role] = {"dtype": out_dtype, "shape": list(stored.shape),
                                      "values": case_data.encode_values(stored)}  # fmt: skip
                else:
                    content = npy_bytes(stored)
                    # A case that only changes how the kernel runs (a tunable) shares its data file.
                    name = next((n for n, c in data_files.items() if c == content), f"{DATA_DIR}{case['name']}.{role}.npy")
                    data_files[name] = content
                    expected[role] = {"file": name}
            case["expected"] = expected
            cases.append(case)
    cases += spec["refusals"]
    document = {"description": spec["description"], "tolerances": spec["tolerances"], "cases": cases}
    casefile.parse_test_file(document)  # schema and structure
    return document, data_files


def dump(document: dict[str, Any]) -> str:
    """JSON with short arrays of numbers on one line."""
    text = json.dumps(document, indent=1, ensure_ascii=False)
    # Collapse lists of scalars onto one line: "[\n  1,\n  2\n ]" -> "[1, 2]".
    import re

    pattern = re.compile(r"\[\s*((?:-?[0-9.eE+-]+|\"(?:nan|inf|-inf)\"|true|false)(?:,\s*(?:-?[0-9.eE+-]+|\"(?:nan|inf|-inf)\"|true|false))*)\s*\]")
    text = pattern.sub(lambda m: "[" + ", ".join(part.strip() for part in m.group(1).split(",")) + "]", text)
    return text + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="Only compare with the files on disk.")
    parser.add_argument("packages", nargs="*", default=sorted(PACKAGES), help="Op ids (default: all embedded).")
    args = parser.parse_args()
    stale = False
    for op_id in args.packages:
        root = embedded_root() / op_id
        document, data_files = build_package(op_id)
        files = {"test.json": dump(document).encode("utf-8"), **data_files}
        old_data = {p.relative_to(root).as_posix() for p in root.rglob("*.npy")}
        for name, content in files.items():
            path = root / name
            if not path.is_file() or path.read_bytes() != content:
                stale = True
                if not args.check:
                    path.parent.mkdir(parents=True, exist_ok=True)
                    path.write_bytes(content)
        for name in sorted(old_data - set(files)):
            stale = True
            if not args.check:
                (root / name).unlink()
                if not any((root / name).parent.iterdir()) and (root / name).parent != root:
                    (root / name).parent.rmdir()
        size = sum(len(c) for c in files.values())
        if not args.check:
            digests.write_metadata(root)
        total = sum(p.stat().st_size for p in root.rglob("*") if p.is_file())
        print(f"{op_id}: {len(document['cases'])} cases, test.json + {len(data_files)} data files = {size} bytes; "
              f"package {total} bytes")  # fmt: skip
    if args.check and stale:
        print("test.json or its data files are out of date: run scripts/make_test_cases.py", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
