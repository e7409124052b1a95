"""What the test.json generators of the packages under tests/packages share (make_*_cases.py).

A generator reads its cases' inputs back through the package (test_case_inputs), while it
rewrites the package's data files: the package is opened without the digest check, and
metadata.json is refreshed at the end, keeping its version and provenance.
"""
from __future__ import annotations

import json
import os
from typing import Any

import numpy as np

import webgpu_kernels as wk
from webgpu_kernels.digests import write_metadata

INLINE_LIMIT = 64  # elements; a larger expected output goes to a .npy file


def open_package(pkg: str) -> wk.Kernel:
    """The package, its .npy files removed (every one is rewritten), opened unverified."""
    for name in os.listdir(pkg):
        if name.endswith(".npy"):
            os.remove(os.path.join(pkg, name))
    return wk.load_kernel(pkg, verify_digests=False)


def json_values(values: np.ndarray) -> list[Any]:
    """Values as test.json writes them: integers as integers, floats with NaN and the infinities
    as strings."""
    flat = values.ravel()
    if flat.dtype.kind in "iub":
        return flat.tolist()
    return ["nan" if np.isnan(v) else "inf" if v == np.inf else "-inf" if v == -np.inf else v
            for v in flat.astype(np.float64).tolist()]


def expected_entry(pkg: str, case_name: str, output: str, want: np.ndarray) -> dict[str, Any]:
    """An expected output: inline up to INLINE_LIMIT elements, else `<case>.<output>.npy`."""
    if want.size <= INLINE_LIMIT:
        values = json_values(want)
        return {"shape": list(want.shape), "values": values if want.ndim else values[0]}
    file = f"{case_name}.{output}.npy"
    np.save(os.path.join(pkg, file), want)
    return {"file": file}


def write_test_file(pkg: str, description: str, tolerances: dict[str, Any], cases: list[dict[str, Any]]) -> None:
    """test.json from the cases, then metadata.json refreshed over every file."""
    doc = {"description": description, "tolerances": tolerances, "cases": cases}
    with open(os.path.join(pkg, "test.json"), "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    _, changes = write_metadata(pkg)
    print(len(cases), "cases;", sum(c.status != "unchanged" for c in changes), "files changed in metadata.json")
