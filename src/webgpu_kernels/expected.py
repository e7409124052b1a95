"""test.json's expected outputs written from an author's float64 reference: ``new`` for its starter
and ``expect`` for a package whose kernel changed share this loop (cli_new.py).

A reference is ``reference(inputs, attrs) -> {output role: array}``: ``inputs`` the case's input
arrays exactly as ``webgpu-kernels test`` builds them, float ones widened to float64 (integer and
boolean ones as they are), ``attrs`` the case's attributes over the manifest's defaults. Each
output is rounded once to the output's dtype and written inline, as the docs say to store it.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, MutableMapping, Sequence
from typing import Any

import numpy as np

from .call_inputs import TensorMeta
from .case_data import cast, dtype_name, encode_values, numpy_dtype
from .casefile import parse_draft_case
from .errors import InputError, KernelError
from .kernel import Kernel

Reference = Callable[[dict[str, np.ndarray], dict[str, Any]], Any]


class ReferenceFailed(Exception):
    """The reference itself raised for a case (the author's code: ``__cause__`` holds its error)."""

    def __init__(self, case: str, name: str) -> None:
        self.case = case
        super().__init__(f"{name} raised for case {case!r}")


def dumps(value: Any, indent: str = "") -> str:
    """JSON with two-space indents, lists of plain values and small objects of them on one line, as
    the shipped files are written (a case's 130 expected values one per line would bury the rest)."""
    inner = indent + "  "
    flat = json.dumps(value, ensure_ascii=False, separators=(", ", ": "))
    if isinstance(value, dict) and value and all(not isinstance(v, (dict, list)) for v in value.values()):
        if len(indent) + len(flat) <= 100:  # a small object of plain values: one line
            return flat
    if isinstance(value, dict) and value:
        items = [f"{inner}{json.dumps(k)}: {dumps(v, inner)}" for k, v in value.items()]
        return "{\n" + ",\n".join(items) + "\n" + indent + "}"
    if isinstance(value, list) and any(isinstance(v, (dict, list)) for v in value):
        return "[\n" + ",\n".join(inner + dumps(v, inner) for v in value) + "\n" + indent + "]"
    return flat


def _received(value: Any) -> str:
    if isinstance(value, np.ndarray):
        return f"an array of shape {list(value.shape)} and dtype {value.dtype}"
    return f"{type(value).__name__} {value!r}"[:200]


def _rounded(value: Any, dtype: str, argument: str) -> np.ndarray:
    """A reference's output rounded once to the output's ``dtype`` (integers taken exactly)."""
    array = np.asarray(value) if isinstance(value, (np.ndarray, np.generic, int, float, bool, list)) else None
    if array is None or array.dtype.kind not in "fiub":
        raise InputError(argument, f"an array of numbers (rounded to the output's {dtype})", _received(value))
    if array.dtype.kind in "iub" and numpy_dtype(dtype).kind in "iub":
        return array.astype(numpy_dtype(dtype))
    try:
        return cast(array.astype(np.float64), dtype)
    except ValueError as exc:  # NaN for an integer output
        raise InputError(argument, f"values a {dtype} output holds", str(exc)) from None


def write_expected(kernel: Kernel, cases: Sequence[MutableMapping[str, Any]], reference: Reference, *,
                   name: str = "the reference", check_shapes: bool = True) -> int:  # fmt: skip
    """Set ``expected`` of every case of ``cases`` (test.json's form) that expects no refusal, from
    ``reference``; returns how many. Nothing is changed unless every case succeeded. Outputs are
    checked against the manifest's outputs and their dtypes; with ``check_shapes`` their shapes
    too, as a call on the device computes them (``kernel.explain``). A reference that raises
    gives :class:`ReferenceFailed`; one that returns the wrong thing, an :class:`InputError` naming
    the case."""
    manifest = kernel.manifest
    written: list[tuple[MutableMapping[str, Any], dict[str, Any]]] = []
    for raw in cases:
        if "refused" in raw:
            continue
        case = parse_draft_case(raw)
        try:
            arrays = case.build_inputs(manifest, kernel.package.read_bytes)
            binding = case.type_binding(manifest, arrays)
            dtypes = {o.role: binding.get(o.dtype, "float64") for o in manifest.outputs}
            shapes: dict[str, tuple[int, ...]] = {}
            if check_shapes:
                metas = {k: TensorMeta(a.shape, dtype_name(a.dtype)) for k, a in arrays.items()}
                explanation = kernel.explain(metas, attrs=case.attrs or None, tunables=case.tunables or None)
                shapes = {o.role: tuple(o.shape) for o in explanation.outputs}
                dtypes.update({o.role: o.dtype for o in explanation.outputs})
        except KernelError as exc:  # the case's own inputs or attrs: say which case
            exc.add_note(f"building the inputs and outputs of case {case.name!r}")
            raise
        inputs = {k: a.astype(np.float64) if a.dtype.kind == "f" or dtype_name(a.dtype) == "bfloat16" else a
                  for k, a in arrays.items()}  # fmt: skip
        attrs = {**manifest.attributes, **case.attrs}
        try:
            got = reference(inputs, attrs)
        except Exception as exc:
            raise ReferenceFailed(case.name, name) from exc
        where = f"{name}'s return value for case {case.name!r}"
        if not isinstance(got, Mapping):
            raise InputError(where, f"a dict of output arrays ({', '.join(dtypes)})", _received(got))
        if set(got) != set(dtypes):
            raise InputError(where, f"a dict of the outputs {sorted(dtypes)}", f"the keys {sorted(map(str, got))}")
        entries: dict[str, Any] = {}
        for role, dtype in dtypes.items():
            y = _rounded(got[role], dtype, f"{where}[{role!r}]")
            if role in shapes and y.shape != shapes[role]:
                raise InputError(f"{where}[{role!r}]", f"shape {list(shapes[role])} (the kernel's output for "
                                 "the case's inputs)", f"shape {list(y.shape)}")  # fmt: skip
            entries[role] = {"dtype": dtype, "shape": list(y.shape), "values": encode_values(y)}
        written.append((raw, entries))
    for raw, entries in written:  # every case succeeded: only now is anything changed
        raw["expected"] = entries
    return len(written)
