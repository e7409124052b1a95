"""Write tests/packages/com.example.Attention/test.json: its cases (inputs drawn by the test.json
generator, the causal mask one .npz of a member per dtype that every causal case names), then the
expected values from the float64 reference tests/attention_reference.py through
`webgpu-kernels expect`, which also refreshes metadata.json and writes the data files the expected
entries name.

Model shapes (CLIP text: 12 heads of 64 over 77 tokens, causal; SD 1.5 cross-attention: heads of
40/80/160 against 77 text tokens) with the SD cases cut to 2 heads of S = 70 queries, one full
64-row tile and a partial one (the kernels treat every query row and head alike, so more change no
code path; the files stay small): tests/test_attention_package.py checks the real head counts and
longer S against the reference from generated inputs, and bench.json holds the real sizes. P, a
float32 output in both dtypes, is checked in the float32 cases only: a float16 case's Y covers the
same three passes.
"""
import io
import json
import os
import subprocess
import sys
import zipfile

import numpy as np
from case_writer import INLINE_LIMIT, open_package

HERE = os.path.dirname(os.path.abspath(__file__))
PKG = os.path.normpath(os.path.join(HERE, "..", "tests", "packages", "com.example.Attention"))
DTYPES = {"f32": "float32", "f16": "float16"}
NEG_INF = float("-inf")


def gen(seed, dist="normal", **kw):
    return {"distribution": dist, "seed": seed, **kw}


def qkv(b, h, s, t, d, dv, seed, dist="normal", **kw):
    return {
        "Q": {"shape": [b, h, s, d], "generate": gen(seed, dist, **kw)},
        "K": {"shape": [b, h, t, d], "generate": gen(seed + 1, dist, **kw)},
        "V": {"shape": [b, h, t, dv], "generate": gen(seed + 2, dist, **kw)},
    }


def causal(s, t):
    """0 on and below the diagonal, -inf above it (CLIP's text encoder mask)."""
    return np.where(np.tril(np.ones((s, t), bool)), 0.0, NEG_INF)


CAUSAL_FILE = "causal-77x77.npz"


def write_causal_file() -> None:
    """The 77 x 77 causal mask once per dtype, members named by dtype, in a deflated .npz written
    byte for byte alike on every run (np.savez stamps the time, which would dirty git)."""
    with zipfile.ZipFile(os.path.join(PKG, CAUSAL_FILE), "w") as archive:
        for dtype in DTYPES.values():
            member = io.BytesIO()
            np.lib.format.write_array(member, causal(77, 77).astype(dtype), allow_pickle=False)
            archive.writestr(zipfile.ZipInfo(f"{dtype}.npy"), member.getvalue(), zipfile.ZIP_DEFLATED)


def mask_entry(dtype, values):
    if values.size <= INLINE_LIMIT:
        flat = ["-inf" if v == NEG_INF else float(v) for v in values.ravel().tolist()]
        return {"shape": list(values.shape), "values": flat if values.ndim else flat[0]}
    if not np.array_equal(values, causal(77, 77)):
        raise ValueError("a large mask other than the 77 x 77 causal one needs a file of its own")
    return {"file": CAUSAL_FILE, "tensor": dtype}


# (name, description, inputs(seed) without the mask, mask: None | shape (drawn) | array, extra
# fields; "P": P checked, float32 only)
CASES = [
    ("clip-text-causal-1x12x77x64", "CLIP text encoder self-attention: 12 heads of 64 over 77 tokens, causal mask [77, 77]",
     lambda: qkv(1, 12, 77, 77, 64, 64, 11), causal(77, 77), {}),
    ("sd15-cross-1x2x70x40-77", "SD 1.5 cross-attention, first level (heads of 40 against 77 text tokens; 8 heads and S 4096 cut to 2 and 70: a full 64-row tile and a partial one)",
     lambda: qkv(1, 2, 70, 77, 40, 40, 21), None, {}),
    ("sd15-cross-1x2x70x80-77", "SD 1.5 cross-attention, second level (heads of 80; 8 heads and S 1024 cut to 2 and 70)",
     lambda: qkv(1, 2, 70, 77, 80, 80, 31), None, {}),
    ("sd15-mid-1x2x70x160-77", "SD 1.5 cross-attention in the mid block (heads of 160; 8 heads and S 64 made 2 and 70); "
     "float32 only: a float16 shader differs only in its loads and stores, which sd15-cross runs at heads of 40 and 80",
     lambda: qkv(1, 2, 70, 77, 160, 160, 41), None, {"f32_only": True}),
    ("odd-2x3x37x19-29x23-keypad", "S, T, D, Dv all odd, Dv != D; a per-head key mask [1, 3, 1, 29]; tiles of 16 rows and 5 keys (neither divides)",
     lambda: qkv(2, 3, 37, 29, 19, 23, 51), (1, 3, 1, 29), {"tunables": {"TILE_WORKGROUP": 16, "KV_TILE": 5}}),
    ("odd-2x3x37x19-29x23-scale0.3", "the odd shape without a mask, scale 0.3, default tiles",
     lambda: qkv(2, 3, 37, 29, 19, 23, 61), None, {"attrs": {"scale": 0.3}}),
    ("mask-full-2x2x17x9x8", "a full [B, H, S, T] mask", lambda: qkv(2, 2, 17, 9, 8, 8, 71), (2, 2, 17, 9), {}),
    ("mask-rank1-1x2x20x13x8", "a rank-1 mask [T]", lambda: qkv(1, 2, 20, 13, 8, 8, 81), (13,), {}),
    ("mask-rank0-1x2x20x13x8", "a rank-0 mask (a constant shift: no effect)", lambda: qkv(1, 2, 20, 13, 8, 8, 91), (), {}),
    ("decode-2x4x1x33x16", "one query row per head (decoding): rows, not tiled", lambda: qkv(2, 4, 1, 33, 16, 16, 101), None, {}),
    ("t1-1x2x18x1x4", "one key: Y is V's row", lambda: qkv(1, 2, 18, 1, 4, 4, 111), None, {}),
    ("d0-1x2x3x5x0x4", "D = 0: every score 0, Y the mean of V (scale 0 means 1 here)", lambda: qkv(1, 2, 3, 5, 0, 4, 121), None, {}),
    ("empty-s0", "S = 0: an empty Y, nothing dispatched", lambda: qkv(1, 2, 0, 5, 4, 4, 131), None, {}),
    ("empty-dv0", "Dv = 0: an empty Y", lambda: qkv(1, 2, 3, 5, 4, 0, 141), None, {}),
    ("large-scores-1x2x24x20x16", "scores up to about 1000 (uniform in [-4, 4], scale 4): exp must see score - max. "
     "A score's rounding (a few ulp of 1000, about 1e-4) moves its weight as much, so float32 is held to 1e-4: "
     "the H100's order of rounding missed 2e-5 by 1.3x (session 41)",
     lambda: qkv(1, 2, 24, 20, 16, 16, 151, "uniform", low=-4.0, high=4.0), None,
     {"attrs": {"scale": 4.0}, "tolerances": {"float32": {"rtol": 1e-4, "atol": 1e-4}}}),
    ("masked-row-1x1x2x3x2", "the second query's every key masked with -inf: its row is NaN; the first drops one key",
     lambda: qkv(1, 1, 2, 3, 2, 2, 161), np.array([[0.0, NEG_INF, 0.0], [NEG_INF, NEG_INF, NEG_INF]]), {}),
    ("bighead-1x2x9x11x320", "a head of 320 (over the fused variants' 256): only `passes` takes it",
     lambda: qkv(1, 2, 9, 11, 320, 320, 171), None, {}),
    ("passes-P-2x3x37x19-29x23", "the three passes, with P (the softmax) checked too in float32; key mask [2, 1, 1, 29]",
     lambda: qkv(2, 3, 37, 29, 19, 23, 181), (2, 1, 1, 29), {"variants": ["passes_mask"], "P": True}),
    ("passes-P-clip-causal-1x2x77x64", "CLIP's causal attention (2 of its 12 heads) through the three passes, P checked (zeros above the diagonal); float32 only, clip-text-causal covers float16",
     lambda: qkv(1, 2, 77, 77, 64, 64, 191), causal(77, 77), {"variants": ["passes_mask"], "P": True, "f32_only": True}),
]

REFUSED = [
    ("refused-k-head-size", {**qkv(1, 2, 4, 5, 8, 8, 1), "K": {"shape": [1, 2, 5, 7], "generate": gen(2)}},
     {"error": "SelectionError", "message": "kOk=False"}),
    ("refused-v-keys", {**qkv(1, 2, 4, 5, 8, 8, 1), "V": {"shape": [1, 2, 6, 8], "generate": gen(3)}},
     {"error": "SelectionError", "message": "vOk=False"}),
    ("refused-mask-shape", {**qkv(1, 2, 4, 5, 8, 8, 1), "mask": {"shape": [4, 4], "generate": gen(4)}},
     {"error": "SelectionError", "message": "maskOk=False"}),
    ("refused-mask-wider", {**qkv(1, 2, 4, 5, 8, 8, 1), "mask": {"shape": [2, 2, 4, 5], "generate": gen(4)}},
     {"error": "SelectionError", "message": "maskOk=False"}),
    ("refused-no-keys", qkv(1, 2, 4, 0, 8, 8, 1), {"error": "SelectionError", "message": "tOk=False"}),
    ("refused-rank3-q", {**qkv(1, 2, 4, 5, 8, 8, 1), "Q": {"shape": [2, 4, 8], "generate": gen(5)}},
     {"error": "RankError", "message": "Q"}),
    ("refused-mask-dtype", {**qkv(1, 2, 4, 5, 8, 8, 1), "mask": {"shape": [4, 5], "dtype": "float16", "generate": gen(4)}},
     {"error": "DTypeError", "message": "mask"}),
]
REFUSED_FORCED = [
    ("refused-tiled-few-queries", qkv(1, 2, 5, 7, 8, 8, 1), "tiled", "manyQueries=False"),
    ("refused-rows-big-head", qkv(1, 2, 3, 4, 320, 8, 1), "rows", "headOk=False"),
]


def expected_entry(shape, name):
    """Inline zeros up to INLINE_LIMIT elements, else a data file's name: `expect` writes both."""
    if int(np.prod(shape)) <= INLINE_LIMIT:
        return {"shape": list(shape), "values": [0.0] * int(np.prod(shape))}
    return {"file": name}


def main() -> None:
    open_package(PKG)  # removes the old .npy files
    write_causal_file()
    cases = []
    slot = 0  # of the case in the full case x dtype grid: a drawn mask's seed, kept when a dtype is left out
    for name, description, make_inputs, mask, extra in CASES:
        extra = dict(extra)
        with_p = extra.pop("P", False)
        f32_only = extra.pop("f32_only", False)
        for tag, dtype in DTYPES.items():
            slot += 1
            if f32_only and tag != "f32":
                continue
            case_name = f"{name}-{tag}"
            inputs = make_inputs()
            if isinstance(mask, np.ndarray):
                inputs["mask"] = mask_entry(dtype, mask)
            elif mask is not None:  # a shape: drawn
                inputs["mask"] = {"shape": list(mask), "generate": gen(1000 + slot - 1)}
            q, v, k = inputs["Q"]["shape"], inputs["V"]["shape"], inputs["K"]["shape"]
            expected = {"Y": expected_entry(q[:3] + v[3:], f"{case_name}.Y.npy")}
            if with_p and dtype == "float32":
                expected["P"] = expected_entry(q[:3] + k[2:3], f"{case_name}.P.npy")
            mine = dict(extra)
            if "tolerances" in mine:  # a case's override of its own output dtype only
                mine["tolerances"] = {k: v for k, v in mine["tolerances"].items() if k == dtype}
                if not mine["tolerances"]:
                    del mine["tolerances"]
            cases.append({"name": case_name, "description": description, "types": {"T": dtype}, **mine,
                          "inputs": inputs, "expected": expected})
    for name, inputs, refused in REFUSED:
        cases.append({"name": name, "types": {"T": "float32"}, "inputs": inputs, "refused": refused})
    cases.append({"name": "refused-int32", "types": {"T": "int32"}, "inputs": qkv(1, 2, 4, 5, 8, 8, 1),
                  "refused": {"error": "DTypeError", "message": "int32"}})
    for name, inputs, variant, clause in REFUSED_FORCED:
        cases.append({"name": name, "types": {"T": "float32"}, "inputs": inputs, "variants": [variant],
                      "refused": {"error": "VariantRejectedError", "message": clause}})
    doc = {
        "description": "Correctness cases for com.example.Attention, expected values from "
                       "tests/attention_reference.py (float64) by scripts/make_attention_cases.py.",
        "tolerances": {"float32": {"rtol": 2e-5, "atol": 2e-6}, "float16": {"rtol": 2e-3, "atol": 2e-4}},
        "cases": cases,
    }
    with open(os.path.join(PKG, "test.json"), "w") as f:
        json.dump(doc, f, indent=2)  # expect keeps the indent
        f.write("\n")
    subprocess.run([sys.executable, "-m", "webgpu_kernels", "expect", PKG, "--reference",
                    os.path.join(HERE, "..", "tests", "attention_reference.py") + ":attention"], check=True)


if __name__ == "__main__":
    main()
