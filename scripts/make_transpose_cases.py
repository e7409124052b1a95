"""Write tests/packages/demo.Transpose/test.json (+ .npy expected outputs) from np.transpose; then
refresh metadata.json (webgpu_kernels.digests.write_metadata, as `webgpu-kernels digest
tests/packages/demo.Transpose` does).

Inputs are drawn by the test.json generator (webgpu_kernels.test_case_inputs builds them exactly
as `webgpu-kernels test` does), or written inline (special values, int64 extremes). The expected
output is np.transpose(data, perm) of those inputs (perm None: the axes reversed, ONNX's default),
in the input's dtype. A transpose copies values: the comparison is exact.

REFUSED lists the calls the contract must refuse (test.json `refused` cases: the error class and a
part of its message specific to the reason, so that a call refused for another reason fails).

    PYTHONPATH=src python3 scripts/make_transpose_cases.py
"""
import os

import numpy as np
from case_writer import expected_entry, open_package, write_test_file

import webgpu_kernels as wk

PKG = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "packages",
                                    "demo.Transpose"))
DTYPES = (("float32", "f32"), ("float16", "f16"), ("int32", "i32"), ("int64", "i64"))

# (name, description, data shape, perm or None (default: reversed), extra case fields)
SHAPES = [
    ("rank0", "rank 0, default perm []: one element", (), None, {}),
    ("rank0-perm-empty", "rank 0, perm [] given", (), [], {}),
    ("rank1-7", "rank 1, default perm: a copy", (7,), None, {}),
    ("rank2-3x5-default", "default perm: (3,5) -> (5,3); 15 elements (odd f16 count)", (3, 5), None, {}),
    ("rank2-3x5-identity", "identity perm: copy and general", (3, 5), [0, 1], {}),
    ("rank2-17x33-wg64", "a 2-D transpose over several workgroups of 64", (17, 33), [1, 0],
     {"tunables": {"WORKGROUP_SIZE": 64}}),
    ("rank3-2x3x4-201", "perm [2, 0, 1]", (2, 3, 4), [2, 0, 1], {}),
    ("rank3-2x3x4-102", "perm [1, 0, 2]", (2, 3, 4), [1, 0, 2], {}),
    ("split-heads-1x7x3x5", "attention head split (B,S,H,D) -> (B,H,S,D)", (1, 7, 3, 5), [0, 2, 1, 3], {}),
    ("merge-heads-2x3x7x5", "attention head merge (B,H,S,D) -> (B,S,H,D)", (2, 3, 7, 5), [0, 2, 1, 3], {}),
    ("keys-2x3x7x5", "keys for Q.K^T: (B,S,H,D) -> (B,H,D,S)", (2, 7, 3, 5), [0, 2, 3, 1], {}),
    ("unit-axes-1x5x1x3", "a perm that moves only size-1 axes keeps the memory order: copy and general",
     (1, 5, 1, 3), [2, 1, 0, 3], {}),
    ("empty-3x0x2", "a zero dimension: empty output (3,0,2) -> (0,2,3)", (3, 0, 2), [1, 2, 0], {}),
    ("empty-0", "an empty vector", (0,), None, {}),
    ("rank5-2x3x1x2x3", "rank 5, default perm", (2, 3, 1, 2, 3), None, {}),
    ("rank6-2x1x3x1x2x3", "rank 6, perm [5, 3, 1, 0, 2, 4]", (2, 1, 3, 1, 2, 3), [5, 3, 1, 0, 2, 4], {}),
    ("rank6-2x3x2x3x2x3-default", "rank 6, default perm (reversed)", (2, 3, 2, 3, 2, 3), None, {}),
]

# Calls a user gets wrong, each refused: (name, description, data shape, dtype, extra case fields,
# error class, message fragment). A perm the package refuses leaves no variant (every variant's
# when[0] is permOk); the trace names the derive entries permOk reads, in the order it reads them
# (lenOk, itemsOk, distinctOk, stopping at the first false one), which tells the reasons apart.
PERM_FALSE = "when[0] 'permOk' is false (with permOk=False, "
REFUSED = [
    ("refused-perm-too-short", "perm of length 2 for rank 3", (2, 3, 4), "float32", {"attrs": {"perm": [1, 0]}},
     "SelectionError", PERM_FALSE + "lenOk=False"),
    ("refused-perm-too-long", "perm of length 4 for rank 3 (a permutation of 0..3)", (2, 3, 4), "float32",
     {"attrs": {"perm": [0, 2, 1, 3]}}, "SelectionError", PERM_FALSE + "lenOk=False"),
    ("refused-perm-rank0-nonempty", "perm [0] for a rank-0 tensor: only [] is a permutation", (), "float32",
     {"attrs": {"perm": [0]}}, "SelectionError", PERM_FALSE + "lenOk=False"),
    ("refused-perm-repeated-axis", "perm [0, 0, 1]: axis 0 twice, axis 2 missing", (2, 3, 4), "float32",
     {"attrs": {"perm": [0, 0, 1]}}, "SelectionError", PERM_FALSE + "lenOk=True, itemsOk=True, distinctOk=False"),
    ("refused-perm-axis-out-of-range", "perm [0, 1, 3] for rank 3: axis 3 outside [0, 3)", (2, 3, 4), "float32",
     {"attrs": {"perm": [0, 1, 3]}}, "SelectionError", PERM_FALSE + "lenOk=True, itemsOk=False"),
    ("refused-perm-negative-axis", "perm [-1, 0, 1]: ONNX Transpose allows no negative axis", (2, 3, 4),
     "float32", {"attrs": {"perm": [-1, 0, 1]}}, "SelectionError", PERM_FALSE + "lenOk=True, itemsOk=False"),
    ("refused-perm-fractional-item", "perm [0.5, 1, 2]: an axis that is not an integer", (2, 3, 4), "float32",
     {"attrs": {"perm": [0.5, 1, 2]}}, "SelectionError", PERM_FALSE + "lenOk=True, itemsOk=False"),
    ("refused-perm-float-item", "perm [0.0, 1, 2]: 0.0 is not an integer axis (np.transpose refuses it too)",
     (2, 3, 4), "float32", {"attrs": {"perm": [0.0, 1, 2]}}, "SelectionError",
     PERM_FALSE + "lenOk=True, itemsOk=False"),
    ("refused-perm-string-items", "perm of strings: the contract wants a list of numbers", (2, 3, 4), "float32",
     {"attrs": {"perm": ["0", "1", "2"]}}, "AttributeValueError",
     "argument 'perm': expected a list of finite numbers (attribute), got str '0'"),
    ("refused-perm-bool-item", "perm [true, false, 2]: a boolean is not an axis", (2, 3, 4), "float32",
     {"attrs": {"perm": [True, False, 2]}}, "AttributeValueError",
     "argument 'perm': expected a list of finite numbers (attribute), got bool True"),
    ("refused-perm-not-a-list", "perm 1: an integer, not a list", (2, 3, 4), "float32", {"attrs": {"perm": 1}},
     "AttributeValueError", "argument 'perm': expected a list of finite numbers (attribute), got int 1"),
    ("refused-perm-nested-list", "perm [[0, 1, 2]]: a list inside the list", (2, 3, 4), "float32",
     {"attrs": {"perm": [[0, 1, 2]]}}, "AttributeValueError", "argument 'perm': expected a list of finite numbers"),
    ("refused-unknown-attribute", "axes instead of perm (an attribute the op does not have)", (2, 3, 4),
     "float32", {"attrs": {"axes": [2, 1, 0]}}, "UnknownInputError",
     "argument 'axes': expected one of the attributes ['perm'], got an unknown attribute"),
    ("refused-dtype-float64", "float64 data: outside T", (2, 3), "float64", {}, "DTypeError",
     "argument 'data': expected dtype in ['float32', 'float16', 'int32', 'int64'] (type variable T), got float64"),
    ("refused-dtype-uint8", "uint8 data: outside T", (2, 3), "uint8", {}, "DTypeError",
     "argument 'data': expected dtype in ['float32', 'float16', 'int32', 'int64'] (type variable T), got uint8"),
    ("refused-dtype-bool", "bool data: outside T", (2, 3), "bool", {}, "DTypeError",
     "argument 'data': expected dtype in ['float32', 'float16', 'int32', 'int64'] (type variable T), got bool"),
    ("refused-missing-input", "no data at all", (), "float32", {"inputs": {}}, "MissingInputError",
     "argument 'data': expected a T tensor"),
    ("refused-rank7", "rank 7: the package takes ranks 0 to 6", (1, 2, 1, 2, 1, 2, 1), "float32", {},
     "RankError", "argument 'data': expected rank 6 (min(ranks.data, 6)), got rank 7"),
    ("refused-workgroup-0", "WORKGROUP_SIZE 0: every variant's workgroupOk", (2, 3), "float32",
     {"tunables": {"WORKGROUP_SIZE": 0}}, "SelectionError",
     "when[2] 'workgroupOk' is false (with workgroupOk=False, tunables.WORKGROUP_SIZE=0"),
    ("refused-unknown-tunable", "a tunable the package does not have", (2, 3), "float32",
     {"tunables": {"TILE": 4}}, "UnknownInputError",
     "argument 'TILE': expected one of the tunables ['WORKGROUP_SIZE'], got an unknown tunable"),
    ("refused-copy-on-real-transpose", "copy forced on a transpose that moves data: its orderKept rejects it",
     (2, 3, 4), "float32", {"attrs": {"perm": [2, 0, 1]}, "variants": ["copy"]}, "VariantRejectedError",
     "variant 'copy' cannot run this call: when[3] 'orderKept' is false"),
    ("refused-copy-default-perm", "copy forced on the default perm (reversed) of a 3x5 matrix", (3, 5),
     "float32", {"variants": ["copy"]}, "VariantRejectedError",
     "variant 'copy' cannot run this call: when[3] 'orderKept' is false"),
    ("refused-forced-bad-perm", "both variants forced on a repeated axis: each rejects it at permOk", (2, 3, 4),
     "int64", {"attrs": {"perm": [1, 1, 0]}, "variants": ["copy", "general"]}, "VariantRejectedError",
     PERM_FALSE + "lenOk=True, itemsOk=True, distinctOk=False"),
    ("refused-perm-too-short-f16", "perm of length 1 for rank 2, float16", (2, 3), "float16",
     {"attrs": {"perm": [0]}}, "SelectionError", PERM_FALSE + "lenOk=False"),
]


def generator(dt, seed):
    if dt == "int32":
        return {"distribution": "uniform", "seed": seed, "low": -2.0 ** 31, "high": 2.0 ** 31 - 1}
    if dt == "int64":  # about 2^60 in magnitude: both words of each element carry bits
        return {"distribution": "uniform", "seed": seed, "low": -2.0 ** 60, "high": 2.0 ** 60}
    if dt == "float16":
        return {"distribution": "normal", "seed": seed, "std": 100.0}
    return {"distribution": "normal", "seed": seed, "std": 1000.0}


k = open_package(PKG)  # before any data file is written
cases = []
seed = 100
for dt, tag in DTYPES:
    for name, desc, shape, perm, extra in SHAPES:
        seed += 1
        case = {"name": f"{name}-{tag}", "description": desc, "types": {"T": dt}, **extra,
                "inputs": {"data": {"shape": list(shape), "generate": generator(dt, seed)}}}
        if perm is not None:
            case["attrs"] = {"perm": perm}
        cases.append((case, perm))
    # values that must pass unchanged: NaN, infinities, signed zeros, subnormals, extremes; int64
    # values past 2^53 and at both ends of the range (both 32-bit words matter)
    specials = {
        "float32": ["nan", "inf", "-inf", 0.0, -0.0, 1e-45, -1e-45, 3.4e38, -3.4e38, 1.0, -1.0, 0.5],
        "float16": ["nan", "inf", "-inf", 0.0, -0.0, 6e-8, -6e-8, 65504.0, -65504.0, 1.0, -1.0, 0.5],
        "int32": [-2 ** 31, 2 ** 31 - 1, 0, -1, 1, 2 ** 16, -2 ** 16, 12345678, -12345678, 7, -7, 65535],
        "int64": [-2 ** 63, 2 ** 63 - 1, 0, -1, 1, 2 ** 32, -2 ** 32, 2 ** 53 + 1, -(2 ** 53 + 1), 2 ** 32 - 1,
                  -(2 ** 31), 2 ** 62 + 12345],
    }[dt]
    cases.append(({"name": f"specials-3x4-{tag}", "description": "special values pass unchanged, perm [1, 0]",
                   "types": {"T": dt}, "attrs": {"perm": [1, 0]},
                   "inputs": {"data": {"shape": [3, 4], "values": specials}}}, [1, 0]))

out = []
for c, perm in cases:
    ins = wk.test_case_inputs(k, c)
    want = np.array(np.transpose(ins["data"], perm), order="C")  # (ascontiguousarray makes rank 0 rank 1)
    c["expected"] = {"transposed": expected_entry(PKG, c["name"], "transposed", want)}
    out.append(c)

for name, desc, shape, dt, extra, error, message in REFUSED:
    seed += 1
    gen = generator(dt, seed) if dt in dict(DTYPES) else {"distribution": "uniform", "seed": seed, "low": 0.0,
                                                          "high": 1.0}
    out.append({"name": name, "description": desc, "types": {"T": dt},
                "inputs": {"data": {"shape": list(shape), "generate": gen}}, **extra,  # extra may replace inputs
                "refused": {"error": error, "message": message}})

write_test_file(
    PKG,
    "Correctness cases for demo.Transpose; expected = np.transpose(data, perm) in the input's "
    "dtype (perm absent: the axes reversed) (scripts/make_transpose_cases.py). A transpose "
    "copies values: the comparison is exact.",
    {"float32": {"rtol": 0.0, "atol": 0.0}, "float16": {"rtol": 0.0, "atol": 0.0}},
    out,
)
