"""docs/format.md as a contract: the checkable claims of its sections before "The expression
language" (package layout, the manifest, inputs/outputs/args and the call, types, attributes and
tunables) that no other test pinned. Organised by the doc's headings; each test's docstring quotes
the line it pins. Package claims load, evaluate, explain or render a copy of
tests/packages/demo.ScaleShift; calls run on the test adapter."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable

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
