"""Write tests/packages/demo.Where/test.json (+ .npy condition inputs and expected outputs) from
np.where; then refreshes metadata.json
(webgpu_kernels.digests.write_metadata, as `webgpu-kernels digest tests/packages/demo.Where` does).

Inputs are drawn by the test.json generator (webgpu_kernels.test_case_inputs builds them exactly
as `webgpu-kernels test` does): a bool condition from a uniform draw in [0, 1), which rounds to a
mask about half true. A causal mask is written inline or as `<case>.condition.npy`.
"""
import os

import numpy as np
from case_writer import expected_entry, open_package, write_test_file

import webgpu_kernels as wk

PKG = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "packages", "demo.Where"))
F32, F16 = "float32", "float16"


def gen(dist, seed, **kw):
    return {"distribution": dist, "seed": seed, **kw}


def cond_entry(name, shape, seed, causal=False):
    """A bool condition: drawn, or a causal mask inline up to 64 elements, else a .npy file."""
    if not causal:
        return values(shape, seed, "uniform"), None
    c = np.broadcast_to(np.tril(np.ones(shape[-2:], bool)), shape).copy()  # over the last two axes
    if c.size <= 64:
        return {"shape": list(shape), "values": c.ravel().tolist() if c.ndim else bool(c)}, c
    fn = f"{name}.condition.npy"
    np.save(os.path.join(PKG, fn), c)
    return {"file": fn}, c


def values(shape, seed, dist="normal", **kw):
    return {"shape": list(shape), "generate": gen(dist, seed, **kw)}


# (name, description, condition shape, X shape, Y shape, extra case fields)
SHAPES = [
    ("same-2x3x5", "one shape for all three: flat and broadcast", (2, 3, 5), (2, 3, 5), (2, 3, 5), {}),
    ("same-7", "7 elements: flat's last unit is partial, f16's last word half", (7,), (7,), (7,), {}),
    ("same-1000-wg64", "1000 elements over several workgroups of 64", (1000,), (1000,), (1000,),
     {"tunables": {"WORKGROUP_SIZE": 64}}),
    ("bcast-3x1-1x4-4", "condition (3,1), X (1,4), Y (4,): every input broadcast", (3, 1), (1, 4), (4,), {}),
    ("bcast-ranks-2x1x5-3x1-5", "three different ranks", (2, 1, 5), (3, 1), (5,), {}),
    ("rank0-all", "all three rank 0", (), (), (), {}),
    ("rank0-cond-2x3", "a rank-0 condition over (2,3) X and Y", (), (2, 3), (2, 3), {}),
    ("rank0-xy-4x5", "rank-0 X and Y selected by a (4,5) condition", (4, 5), (), (), {}),
    ("empty-0x3", "a zero dimension in condition, 1 in X: empty output", (0, 3), (1, 3), (3,), {}),
    ("empty-2x0x4", "zero dimension broadcast against 1s: (2,0,4)", (2, 0, 1), (1, 1, 4), (1,), {}),
    ("empty-flat-0", "three empty vectors (flat)", (0,), (0,), (0,), {}),
    ("rank6-mixed", "rank 6 with broadcasts on every axis", (2, 1, 3, 1, 2, 1), (1, 2, 1, 4, 1, 3), (3,), {}),
    ("rank6-1s", "rank 6 of ones against rank 1", (1, 1, 1, 1, 1, 1), (1,), (5,), {}),
    ("mask-2x3x9x9", "causal attention mask (1,1,9,9) over scores (2,3,9,9), Y a rank-0 fill",
     "causal:1,1,9,9", (2, 3, 9, 9), (), {}),
]

k = open_package(PKG)  # before any data file is written
cases = []
seed = 100
for dt, tag in ((F32, "f32"), (F16, "f16")):
    for name, desc, cs, xs, ys, extra in SHAPES:
        seed += 1
        full = f"{name}-{tag}"
        if isinstance(cs, str):
            cs = tuple(int(d) for d in cs.split(":")[1].split(","))
            centry, _ = cond_entry(full, cs, seed, causal=True)
        else:
            centry, _ = cond_entry(full, cs, seed)
        case = {"name": full, "description": desc, "types": {"B": "bool", "T": dt}, **extra,
                "inputs": {"condition": centry, "X": values(xs, 2 * seed, std=3.0),
                           "Y": values(ys, 2 * seed + 1, "uniform", low=-100.0, high=100.0)}}
        if name == "mask-2x3x9x9":  # a masked score is -inf
            case["inputs"]["Y"] = {"shape": [], "values": "-inf"}
        cases.append(case)
    # special values pass bit for bit: NaN, infinities, signed zeros, subnormals, the largest values
    big, tiny = (65504.0, 6e-8) if dt == F16 else (3.4e38, 1e-45)
    specials = ["nan", "inf", "-inf", 0.0, -0.0, tiny, -tiny, big, -big, 1.0, -1.0]
    cases.append({"name": f"specials-{tag}", "description": "special values pass unchanged, through flat and broadcast",
                  "types": {"B": "bool", "T": dt},
                  "inputs": {"condition": {"shape": [11], "values": [True, False] * 5 + [True]},
                             "X": {"shape": [11], "values": specials},
                             "Y": {"shape": [11], "values": specials[::-1]}}})
    cases.append({"name": f"specials-bcast-{tag}", "description": "special values, X broadcast over rows",
                  "types": {"B": "bool", "T": dt},
                  "inputs": {"condition": {"shape": [2, 1], "values": [[True], [False]]},
                             "X": {"shape": [11], "values": specials},
                             "Y": {"shape": [2, 11], "values": specials[::-1] + specials}}})

for c in cases:
    ins = wk.test_case_inputs(k, c)
    want = np.where(ins["condition"], ins["X"], ins["Y"]).astype(ins["X"].dtype)
    c["expected"] = {"output": expected_entry(PKG, c["name"], "output", want)}

write_test_file(
    PKG,
    "Correctness cases for demo.Where; expected = np.where(condition, X, Y) in the inputs' dtype "
    "(scripts/make_where_cases.py). A select copies values: the comparison is exact.",
    {"float32": {"rtol": 0.0, "atol": 0.0}, "float16": {"rtol": 0.0, "atol": 0.0}},
    cases,
)
