"""program.py: the per-call scope, in the order docs/format.md gives ("Evaluation order")."""

from __future__ import annotations

import pytest
from test_selection import F16_DEVICE, variant

from webgpu_kernels.contract import check_call
from webgpu_kernels.errors import ExpressionError
from webgpu_kernels.manifest import parse_manifest
from webgpu_kernels.program import compile_program


def manifest_with_output_shape(shape: str, rank: str):
    return parse_manifest({
        "domain": "test", "name": "Rows",
        "inputs": [{"role": "X", "dtype": "T"}],
        "outputs": [{"role": "S", "dtype": "T", "rank": rank, "shape": shape}],
        "typeConstraints": {"T": ["float32"]},
        "derive": {"rows": "numel(shapes.X) // dim(shapes.X, ranks.X - 1)"},
        "variants": [variant("main", 0, ["true"])],
    })  # fmt: skip


def test_an_output_shape_sees_the_inputs():
    manifest = manifest_with_output_shape("[numel(shapes.X) // dim(shapes.X, ranks.X - 1)]", "1")
    _, outputs = compile_program(manifest).call_scope(check_call(manifest, {"X": ((3, 4, 5), "float32")}, None, None),
                                                      F16_DEVICE)  # fmt: skip
    assert [(o.role, o.shape) for o in outputs] == [("S", (12,))]


def test_a_derive_entry_in_an_output_shape_is_named():
    """Outputs are evaluated before derive: the error says which name and why (it said 'got Undefined')."""
    manifest = manifest_with_output_shape("[rows]", "1")
    with pytest.raises(ExpressionError) as info:
        compile_program(manifest).call_scope(check_call(manifest, {"X": ((3, 4), "float32")}, None, None), F16_DEVICE)
    message = str(info.value)
    assert "'rows' is not defined when output shapes are evaluated" in message and "not derive" in message
    assert "outputs[0].shape" in message
