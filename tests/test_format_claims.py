"""docs/format.md as a contract: the checkable claims of its sections from "The expression
language" to "What makes a new pipeline" that no other test pinned. Organised by the doc's
headings; each test's docstring quotes the line it pins. Expressions are evaluated directly;
package claims render or explain (no pipeline is built) a copy of tests/packages/demo.ScaleShift."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable

import pytest

import webgpu_kernels as wk
from webgpu_kernels import errors
from webgpu_kernels.expressions import STATIC_FUNCTIONS, ExpressionCompiler

from conftest import PACKAGES_DIR

SCALE_SHIFT = json.loads((PACKAGES_DIR / "demo.ScaleShift" / "manifest.json").read_text())
SCALE_SHIFT_WGSL = (PACKAGES_DIR / "demo.ScaleShift" / "scale-shift.wgsl.jinja").read_text()
X8 = {"X": wk.TensorMeta((8,), "float32")}


def ev(source: str, **names):
    scope = dict(STATIC_FUNCTIONS, shapes={"X": (2, 3)}, ranks={"X": 2}, **names)
    return ExpressionCompiler(names).compile(source, "claim").evaluate(scope)


@pytest.fixture
def demo(write_package) -> Callable[..., wk.Kernel]:
    """``demo(change, template, **files)``: demo.ScaleShift with ``change(manifest)`` applied and
    its template replaced by ``template``."""

    def load(change: Callable[[dict], object] | None = None, template: str = SCALE_SHIFT_WGSL, **files: str):
        manifest = copy.deepcopy(SCALE_SHIFT)
        if change is not None:
            change(manifest)
        return wk.load_kernel(write_package(manifest, {"scale-shift.wgsl.jinja": template, **files}))

    return load


def scalar_pass(manifest: dict) -> dict:
    return manifest["variants"][1]["passes"][0]


# --- Evaluation order and deferred errors ---------------------------------------------------------


def test_pass_expressions_are_evaluated_source_inputs_then_bindings_then_dispatch(demo):
    """Doc: "the pass expressions in the manifest's reading order: `source.inputs`, then each binding
    in list order (its element type, `length` and struct fields), then `dispatch` ... The first
    expression that fails is the one the call's error names." (The engine had evaluated source.inputs
    last, after dispatch.)"""

    def failing(*places: str) -> Callable[[dict], None]:
        def change(m: dict) -> None:
            p = scalar_pass(m)
            p["bindings"] = copy.deepcopy(m["bindingSets"]["scalarIO"])
            if "source" in places:
                p["source"]["inputs"]["broken"] = "1 // 0"
            if "length" in places:
                p["bindings"][0]["length"] = "2 // 0"
            if "field" in places:
                p["bindings"][2]["struct"]["fields"][0]["value"] = "3 // 0"
            if "dispatch" in places:
                p["dispatch"]["threads"] = "4 // 0"

        return change

    cases = [(("source", "length", "field", "dispatch"), "source.inputs.broken"),
             (("length", "field", "dispatch"), "bindings[0].length"),
             (("field", "dispatch"), "bindings[2].struct.fields[0].value"), (("dispatch",), "dispatch.threads")]
    for places, where in cases:
        with pytest.raises(errors.ExpressionError) as info:
            demo(failing(*places)).render(X8, variant="scalar")
        assert info.value.where.endswith(where), (places, info.value.where)
