"""contract_changes.py: which changes of a manifest break a call that worked (what ``upload``
refuses on a revision vN that holds the old manifest; tests/test_hub_upload.py has the Hub side)."""

from __future__ import annotations

import json
import re

import pytest

from webgpu_kernels.contract_changes import incompatible_changes
from webgpu_kernels.manifest import parse_manifest

from conftest import PACKAGES_DIR

BASE = json.loads((PACKAGES_DIR / "demo.ScaleShift" / "manifest.json").read_text(encoding="utf-8"))


def changed(edit) -> list[str]:
    new = json.loads(json.dumps(BASE))
    edit(new)
    return incompatible_changes(parse_manifest(BASE), parse_manifest(new))


def with_optional_bias(manifest: dict) -> None:
    manifest["inputs"].append({"role": "B", "dtype": "T", "optional": True})
    manifest["args"]["B"] = {"kind": "tensor", "semantic": "B", "role": "input"}


def test_the_same_contract_has_no_change():
    assert changed(lambda m: None) == []


@pytest.mark.parametrize(("edit", "said"), [
    (lambda m: m["typeConstraints"].update(T=["float16"]), ["input 'X': float32 is no longer accepted (type variable T: float16)"]),
    (lambda m: m["inputs"][0].update(rank=3), ["input 'X': any rank was accepted, now only rank 3"]),
    (lambda m: m["attributes"].update(scale=1), ["attribute 'scale': a number was accepted, now only an integer"]),
    (lambda m: m["attributes"].update(scale="1"), ["attribute 'scale': a number was accepted, now only a string"]),
    (lambda m: m["attributes"].update(shift=-0.5), ["attribute 'shift': its default changed from 0.0 to -0.5"]),
])  # fmt: skip
def test_each_incompatible_change_is_named(edit, said):
    assert changed(edit) == said


def test_an_optional_input_made_required():
    old = json.loads(json.dumps(BASE))
    with_optional_bias(old)
    new = json.loads(json.dumps(old))
    del new["inputs"][-1]["optional"]
    assert incompatible_changes(parse_manifest(old), parse_manifest(new)) == ["input 'B' was optional, now it is required"]
    # and the other way round, required made optional, is compatible
    assert incompatible_changes(parse_manifest(new), parse_manifest(old)) == []


def test_an_output_dtype_fixed_otherwise():
    def to_u(manifest: dict) -> None:
        manifest["typeConstraints"]["U"] = ["float32"]
        manifest["outputs"][0]["dtype"] = "U"

    assert changed(to_u) == ["output 'Y': its dtype was that of input 'X', now float32"]


def test_a_rank_rule_narrowed_between_two_numbers_and_expressions_left_alone():
    old = json.loads(json.dumps(BASE))
    old["inputs"][0]["rank"] = 2
    new = json.loads(json.dumps(old))
    new["inputs"][0]["rank"] = 3
    assert incompatible_changes(parse_manifest(old), parse_manifest(new)) == ["input 'X': rank 2 was accepted, now only rank 3"]
    new["inputs"][0]["rank"] = "2 + 1"  # an expression: not compared
    assert incompatible_changes(parse_manifest(old), parse_manifest(new)) == []


@pytest.mark.parametrize("edit", [
    lambda m: m["typeConstraints"].update(T=["float32", "float16", "int32"]),  # a dtype added
    lambda m: m["attributes"].update(scale=1.0, extra=True),  # an attribute added, 1.0 kept
    lambda m: m["tunables"].update(WORKGROUP_SIZE=128),  # tunables and variants are the implementation
    lambda m: m["variants"].pop(0),
    lambda m: m.update(json.loads(re.sub(r"\bT\b", "F", json.dumps(m)))),  # a type variable renamed
    with_optional_bias,  # a new optional input
    lambda m: m["outputs"][0].update(description="changed"),
])  # fmt: skip
def test_compatible_changes(edit):
    assert changed(edit) == []


def test_an_integer_attribute_taking_numbers_is_compatible():
    old = json.loads(json.dumps(BASE))
    old["attributes"]["scale"] = 1
    assert incompatible_changes(parse_manifest(old), parse_manifest(BASE)) == []


def test_a_rename_names_the_new_roles():
    new = json.loads(re.sub(r"\bX\b", "A", json.dumps(BASE)))
    assert incompatible_changes(parse_manifest(BASE), parse_manifest(new)) == [
        "input 'X' was removed or renamed (the new inputs: 'A')"]
