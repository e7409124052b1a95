"""docs/format.md as a contract: the checkable claims of its sections before "The expression
language" (package layout, the manifest, inputs/outputs/args and the call, types, attributes and
tunables) that no other test pinned. Organised by the doc's headings; each test's docstring quotes
the line it pins. Package claims load, evaluate, explain or render a copy of
tests/packages/demo.ScaleShift; calls run on the test adapter."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable

import numpy as np
import pytest

import webgpu_kernels as wk
from webgpu_kernels import errors

from conftest import PACKAGES_DIR

SCALE_SHIFT = json.loads((PACKAGES_DIR / "demo.ScaleShift" / "manifest.json").read_text())
SCALE_SHIFT_WGSL = (PACKAGES_DIR / "demo.ScaleShift" / "scale-shift.wgsl.jinja").read_text()
X8 = {"X": wk.TensorMeta((8,), "float32")}


@pytest.fixture
def demo(write_package) -> Callable[..., wk.Kernel]:
    """``demo(change, **files)``: demo.ScaleShift with ``change(manifest)`` applied and ``files``
    (name -> text) added to the folder."""

    def load(change: Callable[[dict], object] | None = None, **files: str) -> wk.Kernel:
        manifest = copy.deepcopy(SCALE_SHIFT)
        if change is not None:
            change(manifest)
        return wk.load_kernel(write_package(manifest, {"scale-shift.wgsl.jinja": SCALE_SHIFT_WGSL, **files}))

    return load


def vec4_pass(manifest: dict) -> dict:
    return manifest["variants"][0]["passes"][0]


# --- Package layout -------------------------------------------------------------------------------


@pytest.mark.parametrize("name", [".hidden.wgsl.jinja", "..wgsl.jinja", "two words.wgsl.jinja", "-x.wgsl.jinja"])
def test_a_shader_name_the_loader_cannot_read_is_refused_at_load(demo, name):
    """Doc: "Every `*.wgsl.jinja` that a pass names must sit in the folder itself (no sub-folders:
    shader names may not contain `/` or `\\` or start with `.`)" -- with the other checks, "done when
    the package is loaded". A leading '.' (or a space) had loaded and failed the first call as a
    TemplateSandboxError; a dot-file is not even among the files the digest lists."""
    with pytest.raises(errors.ManifestError) as info:
        demo(lambda m: vec4_pass(m).update(shader=name), **{name: SCALE_SHIFT_WGSL})
    assert info.value.json_path == "variants[0].passes[0].shader"


def test_a_shader_name_of_letters_digits_dots_dashes_and_underscores_loads_and_renders(demo):
    """Doc: "Every `*.wgsl.jinja` that a pass names must sit in the folder itself" """
    name = "Scale_shift-2.v1.wgsl.jinja"
    kernel = demo(lambda m: vec4_pass(m).update(shader=name), **{name: SCALE_SHIFT_WGSL})
    assert "fn main" in kernel.render(X8)["main"]


# --- Inputs, outputs, args and the call -----------------------------------------------------------


def test_a_python_number_is_an_input_to_explain_render_and_evaluate_as_to_the_call():
    """Doc: "Inputs are NumPy arrays (...), lists and Python numbers (through `np.asarray`, so a Python
    float is float64 and refused by a float32/float16 constraint)". explain, render and evaluate had
    refused a Python int the call ran (demo.Gather's int64 indices) as "expected an array, a
    GpuTensor or a TensorMeta, got int"."""
    gather = wk.load_kernel(PACKAGES_DIR / "demo.Gather")
    inputs = {"data": np.arange(12, dtype=np.float32).reshape(4, 3), "indices": 2}
    assert gather(inputs)["Y"].tolist() == [6.0, 7.0, 8.0]
    explained = gather.explain(inputs)
    assert explained.chosen is not None and explained.outputs[0].shape == (3,)
    assert set(gather.render(inputs)) and gather.evaluate("shapes.indices", inputs) == ()
    for judge in (gather, gather.explain):  # a float is float64, refused the same way by both
        with pytest.raises(errors.DTypeError, match="float64") as info:
            judge({**inputs, "indices": 2.0})
        assert info.value.argument == "indices"
