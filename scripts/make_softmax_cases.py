"""Write tests/packages/demo.Softmax/test.json (+ .npy expected outputs) from a NumPy float64 reference;
then refreshes metadata.json (as `webgpu-kernels digest tests/packages/demo.Softmax` does).

The inputs are built by webgpu_kernels.test_case_inputs exactly as `webgpu-kernels test` builds them.
"""
import os

import numpy as np
from case_writer import expected_entry, open_package, write_test_file

import webgpu_kernels as wk

PKG = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "packages", "demo.Softmax")
PKG = os.path.normpath(PKG)


def ref(x):
    x = x.astype(np.float64)
    if x.size == 0:
        return x.copy()
    with np.errstate(invalid="ignore"):
        m = x.max(axis=-1, keepdims=True)
        e = np.exp(x - m)
        return e / e.sum(axis=-1, keepdims=True)


def gen(dist, seed, **kw):
    return {"distribution": dist, "seed": seed, **kw}


F32, F16 = "float32", "float16"
cases = []
for dt, tag in ((F32, "f32"), (F16, "f16")):
    cases += [
        {"name": f"rank1-7-{tag}", "description": "rank 1, one row of 7: row and workgroup",
         "types": {"T": dt}, "inputs": {"X": {"shape": [7], "generate": gen("normal", 11, std=3.0)}}},
        {"name": f"rank1-1-{tag}", "description": "a row of one element gives 1",
         "types": {"T": dt}, "inputs": {"X": {"shape": [1], "values": [-5.0]}}},
        {"name": f"rank3-2x3x33-{tag}", "description": "rank 3, 6 rows of 33: row and workgroup",
         "types": {"T": dt}, "inputs": {"X": {"shape": [2, 3, 33], "generate": gen("normal", 12, std=4.0)}}},
        {"name": f"rank3-3x5x100-{tag}", "description": "rank 3, rows of 100: not a multiple of the workgroup size (128)",
         "types": {"T": dt}, "variants": ["workgroup"],
         "inputs": {"X": {"shape": [3, 5, 100], "generate": gen("uniform", 13, low=-20.0, high=20.0)}}},
        {"name": f"rank3-3x5x100-wg64-{tag}", "description": "rows of 100 with WORKGROUP_SIZE 64: 36 invocations get a second element",
         "types": {"T": dt}, "tunables": {"WORKGROUP_SIZE": 64}, "variants": ["workgroup"],
         "inputs": {"X": {"shape": [3, 5, 100], "generate": gen("uniform", 13, low=-20.0, high=20.0)}}},
        {"name": f"rank2-3x1000-wg32-{tag}", "description": "long rows, WORKGROUP_SIZE 32: 31.25 elements per invocation",
         "types": {"T": dt}, "tunables": {"WORKGROUP_SIZE": 32}, "variants": ["workgroup"],
         "inputs": {"X": {"shape": [3, 1000], "generate": gen("normal", 14, std=2.0)}}},
        {"name": f"rank4-2x2x70x64-{tag}", "description": "rank 4, 280 rows of 64 (the longest row the row variant takes)",
         "types": {"T": dt},
         "inputs": {"X": {"shape": [2, 2, 70, 64], "generate": gen("normal", 15, std=1.0)}}},
        {"name": f"empty-3x0-{tag}", "description": "rows of length 0", "types": {"T": dt},
         "inputs": {"X": {"shape": [3, 0], "values": []}}},
        {"name": f"empty-0x5-{tag}", "description": "no rows", "types": {"T": dt},
         "inputs": {"X": {"shape": [0, 5], "values": []}}},
        {"name": f"masked-{tag}", "description": "-inf entries (masked) are 0; an all -inf row is NaN, as the float64 reference gives",
         "types": {"T": dt},
         "inputs": {"X": {"shape": [3, 4], "values": [1, "-inf", 2, "-inf", "-inf", "-inf", "-inf", 0, "-inf", "-inf", "-inf", "-inf"]}}},
    ]
# large magnitudes: a naive exp(x) overflows (f32 past 88.7, f16 past 11.1) or underflows everywhere
cases += [
    {"name": "extremes-f32", "description": "huge positive/negative values: subtracting the max is what keeps them finite",
     "types": {"T": F32},
     "inputs": {"X": {"shape": [4, 4], "values": [
         -3e38, 3e38, 0, 1,
         1e30, 1e30, -1e30, 5,
         -1e4, -10001, -10002, -10003,
         100, 101, 102, 103]}}},
    {"name": "extremes-f16", "description": "f16 at its limits: x - max leaves the f16 range (computed in f32)",
     "types": {"T": F16},
     "inputs": {"X": {"shape": [4, 4], "values": [
         -65504, 65504, 0, 1,
         60000, 60000, -60000, 5,
         -11000, -11008, -11016, -11024,
         20, 21, 22, 23]}}},
    {"name": "extremes-wide-f32", "description": "one huge value in a long row of random data, positions over every invocation",
     "types": {"T": F32}, "variants": ["workgroup"],
     "inputs": {"X": {"shape": [4, 300], "generate": gen("uniform", 16, low=-1e4, high=1e4),
                      "special": {"at": [0, 299, 400, 1199], "values": [3e38, -3e38, 1e38, "-inf"]}}}},
    {"name": "extremes-wide-f16", "types": {"T": F16}, "variants": ["workgroup"],
     "inputs": {"X": {"shape": [4, 300], "generate": gen("uniform", 16, low=-60000.0, high=60000.0),
                      "special": {"at": [0, 299, 400, 1199], "values": [65504, -65504, 65504, "-inf"]}}}},
]

k = open_package(PKG)
for c in cases:
    x = wk.test_case_inputs(k, c)["X"]
    want = ref(x).astype(x.dtype)  # the float64 reference rounded once to the output dtype
    c["expected"] = {"Y": expected_entry(PKG, c["name"], "Y", want)}

write_test_file(
    PKG,
    "Correctness cases for demo.Softmax; expected = NumPy float64 softmax rounded to the output dtype "
    "(scripts/make_softmax_cases.py).",
    {"float32": {"rtol": 1e-5, "atol": 1e-10}, "float16": {"rtol": 2e-3, "atol": 1e-5}},
    cases,
)
