"""How long the manifest checks take at the 20,000-value bound, for manifests of different shapes,
and how long opening an embedded package takes (its digests checked; tests time nothing).

    python3 scripts/manifest_load_cost.py

Each manifest is the shipped QuickGelu's with its variants replaced by N copies of its scalar
variant (each pass naming the shipped binding set), of one pass or of 16, as many as stay within
MAX_MANIFEST_VALUES and MAX_EXPANDED_BINDINGS: the schema's cost grows with the values, and how
they nest.
"""

from __future__ import annotations

import copy
import json
import time

from webgpu_kernels.manifest import MAX_EXPANDED_BINDINGS, MAX_MANIFEST_VALUES, expanded_bindings, schema_errors
from webgpu_kernels.package import embedded_ids, embedded_root, open_embedded


def values(data: object) -> int:
    if isinstance(data, dict):
        return 1 + sum(values(v) for v in data.values())
    if isinstance(data, list):
        return 1 + sum(values(v) for v in data)
    return 1


def timed(label: str, manifest: dict) -> None:
    start = time.perf_counter()
    errors = schema_errors(manifest)
    took = time.perf_counter() - start
    print(f"{label}: {values(manifest)} values, {len(errors)} errors, {took:.2f} s")


def opening() -> None:
    for op_id in embedded_ids():
        best = min(_open_time(op_id) for _ in range(5))
        print(f"open_embedded({op_id!r}), digests checked: {best * 1e3:.2f} ms (best of 5 x 10)")


def _open_time(op_id: str) -> float:
    start = time.perf_counter()
    for _ in range(10):
        open_embedded(op_id)
    return (time.perf_counter() - start) / 10


def main() -> None:
    opening()
    base = json.loads((embedded_root() / "com.microsoft.QuickGelu" / "manifest.json").read_text("utf-8"))
    scalar = next(v for v in base["variants"] if v["id"] == "scalar")
    for passes_per_variant in (1, 16):
        manifest = copy.deepcopy(base)
        variant = copy.deepcopy(scalar)
        variant["passes"] = [dict(variant["passes"][0], id=f"p{i}") for i in range(passes_per_variant)]
        per_variant = values(variant)
        room = MAX_MANIFEST_VALUES - values(base) + sum(values(v) for v in base["variants"])
        bindings = MAX_EXPANDED_BINDINGS // expanded_bindings({**base, "variants": [variant]})[0]
        count = min(room // per_variant, bindings)
        manifest["variants"] = [dict(copy.deepcopy(variant), id=f"v{i}") for i in range(count)]
        timed(f"{len(manifest['variants'])} variants of {passes_per_variant} pass(es)", manifest)


if __name__ == "__main__":
    main()
