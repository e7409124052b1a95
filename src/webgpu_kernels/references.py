"""Reference implementations of the embedded ops, for checking what a kernel computes.

Two kinds:

* NumPy references, computed in float64 from the kernel's (typed) inputs: :data:`REFERENCES`,
  ``op id -> fn(inputs, attrs) -> outputs``. Look one up with :func:`numpy_reference`.
* ONNX Runtime on its CPU provider (:func:`onnxruntime_reference`): a one-node ONNX model of the
  op, where onnxruntime has a CPU kernel for it (it has ``com.microsoft.QuickGelu`` but no
  ``com.microsoft.BiasAdd``).

Per-op knowledge lives here and only here; the engine never knows what an op computes.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

Reference = Callable[[Mapping[str, np.ndarray], Mapping[str, Any]], dict[str, np.ndarray]]

REFERENCES: dict[str, Reference] = {}


def register(op_id: str) -> Callable[[Reference], Reference]:
    """Register ``fn`` as the float64 NumPy reference of ``op_id`` (a decorator)."""

    def decorate(fn: Reference) -> Reference:
        REFERENCES[op_id] = fn
        return fn

    return decorate


def numpy_reference(op_id: str) -> Reference | None:
    """The registered NumPy reference of ``op_id``, or None."""
    return REFERENCES.get(op_id)


def _f64(array: Any) -> np.ndarray:
    return np.asarray(array).astype(np.float64)


@register("com.microsoft.BiasAdd")
def bias_add(inputs: Mapping[str, np.ndarray], attrs: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """``Y = X + bias + skip`` (bias broadcast over the last, channel, dimension), in float64."""
    return {"Y": (_f64(inputs["X"]) + _f64(inputs["bias"])) + _f64(inputs["skip"])}


QUICK_GELU_ALPHA = 1.702


@register("com.microsoft.QuickGelu")
def quick_gelu(inputs: Mapping[str, np.ndarray], attrs: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """``Y = x * sigmoid(alpha * x)`` in float64, without overflow warnings.

    With ``z = alpha * x``: ``x / (1 + exp(-z))`` where ``z >= 0`` (``exp(-z) <= 1``), and
    ``x * exp(z) / (1 + exp(z))`` where ``z < 0`` (``exp(z) < 1``). NaN ``z`` falls in the second
    branch and gives NaN. IEEE semantics are kept, so the values match the plain formula
    ``x / (1 + exp(-alpha * x))``: ``x = -inf`` gives ``-inf * 0 = NaN``, ``x = +inf`` gives ``inf``,
    a large negative ``x`` gives ``-0``, and ``alpha = 0`` with ``x = ±inf`` gives NaN (``0 * inf``).
    ``alpha`` is rounded to float32 first, as ONNX holds a float attribute (so 1e-50 is 0).
    """
    alpha = float(np.float32(attrs.get("alpha", QUICK_GELU_ALPHA)))
    x = _f64(inputs["X"])
    with np.errstate(over="ignore", invalid="ignore", divide="ignore", under="ignore"):
        z = alpha * x
        positive = z >= 0
        e_neg = np.exp(-np.where(positive, z, 0.0))  # exp(-z) for z >= 0, in (0, 1]
        e_pos = np.exp(np.where(positive, 0.0, z))  # exp(z) for z < 0 (and NaN), in [0, 1)
        y = np.where(positive, x / (1.0 + e_neg), x * (e_pos / (1.0 + e_pos)))
    return {"Y": np.asarray(y, dtype=np.float64)}


# --- ONNX Runtime ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class OnnxOp:
    """How to write an op as an ONNX node: input order, output names, attribute types."""

    inputs: tuple[str, ...]
    outputs: tuple[str, ...] = ("Y",)
    float_attrs: frozenset[str] = field(default_factory=frozenset)  # attributes ONNX declares as FLOAT


ONNX_OPS: dict[str, OnnxOp] = {
    "com.microsoft.BiasAdd": OnnxOp(inputs=("X", "bias", "skip")),
    "com.microsoft.QuickGelu": OnnxOp(inputs=("X",), float_attrs=frozenset({"alpha"})),
}

#: The ai.onnx opset the one-node models import (onnxruntime releases since 1.13 run it).
AI_ONNX_OPSET = 17
#: Models are written with this IR version: new ``onnx`` releases default to versions older
#: onnxruntime builds refuse.
IR_VERSION = 10


def one_node_model(
    op_id: str,
    inputs: Mapping[str, np.ndarray],
    attrs: Mapping[str, Any] | None = None,
    *,
    input_names: Sequence[str] | None = None,
    output_names: Sequence[str] | None = None,
    opset: int | None = None,
) -> tuple[bytes, dict[str, np.ndarray], list[str]]:
    """A serialized one-node ONNX model of ``op_id`` for these inputs, the inputs in the node's
    order, and the output names. ``input_names``/``output_names`` are the node's, by position
    (ONNX reads them so), ``""`` for an optional one left out. ``opset``: the version of the op's
    domain the model imports (a package's ``sinceVersion``, which selects that version of the op),
    else :data:`AI_ONNX_OPSET` for ai.onnx and 1 for another domain. Needs the ``onnx`` package."""
    import onnx
    from onnx import helper

    spec = ONNX_OPS.get(op_id)
    order = list(input_names) if input_names is not None else list(spec.inputs) if spec else list(inputs)
    node_outputs = list(output_names or (spec.outputs if spec else ("Y",)))
    outputs = [o for o in node_outputs if o]
    domain, _, name = op_id.rpartition(".")
    onnx_domain = "" if domain in ("ai.onnx", "") else domain
    node_attrs: dict[str, Any] = {}
    for key, value in (attrs or {}).items():
        node_attrs[key] = float(value) if spec and key in spec.float_attrs else value
    # np.asarray keeps rank 0; np.ascontiguousarray would make it shape (1,).
    arrays = {k: np.asarray(inputs[k], order="C") for k in order if k}
    node = helper.make_node(name, order, node_outputs, domain=onnx_domain, **node_attrs)
    graph = helper.make_graph(
        [node], f"{name}_reference",
        [helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(a.dtype), list(a.shape))
         for k, a in arrays.items()],
        [onnx.ValueInfoProto(name=o) for o in outputs],  # types inferred by onnxruntime
    )  # fmt: skip
    opsets = [helper.make_opsetid("", opset if opset is not None and not onnx_domain else AI_ONNX_OPSET)]
    if onnx_domain:
        opsets.append(helper.make_opsetid(onnx_domain, opset if opset is not None else 1))
    model = helper.make_model(graph, opset_imports=opsets)
    model.ir_version = IR_VERSION
    return model.SerializeToString(), arrays, outputs


@functools.lru_cache(maxsize=64)
def formal_names(op_id: str) -> tuple[tuple[str, ...], tuple[str, ...]] | None:
    """``op_id``'s formal input and output names in their ONNX positions, from onnxruntime's
    operator schemas (its contrib ops included; the newest version), or None where onnxruntime is
    not installed or has no schema for the op."""
    try:
        from onnxruntime.capi import onnxruntime_pybind11_state as ort_state
    except ImportError:
        return None
    domain, _, name = op_id.rpartition(".")
    domain = "" if domain in ("ai.onnx", "") else domain
    schemas = [s for s in ort_state.get_all_operator_schema() if s.name == name and s.domain == domain]
    if not schemas:
        return None
    newest = max(schemas, key=lambda s: s.since_version)
    return tuple(i.name for i in newest.inputs), tuple(o.name for o in newest.outputs)


def onnx_op_version(op_id: str) -> tuple[int, str] | None:
    """The newest version of ``op_id`` in onnx's operator schemas (its ``since_version``), and
    onnx's release; None where onnx is not installed or has no schema for the op (com.microsoft's
    contrib ops are onnxruntime's, not onnx's)."""
    try:
        import onnx
    except ImportError:
        return None
    domain, _, name = op_id.rpartition(".")
    try:
        schema = onnx.defs.get_schema(name, domain="" if domain == "ai.onnx" else domain)
    except Exception:  # noqa: BLE001 - onnx's SchemaError: no such op in that domain
        return None
    return int(schema.since_version), str(onnx.__version__)


def names_an_onnx_op(op_id: str) -> bool:
    """Whether ``op_id`` is already an ONNX op's id: of the ai.onnx domain, or an op of any domain
    onnxruntime has a schema for. `run --onnx-op` names the op a package mirrors under an id of its
    own, which such a package has not."""
    return op_id.rpartition(".")[0] in ("ai.onnx", "") or formal_names(op_id) is not None


def node_positions(op_id: str, input_roles: Sequence[str], output_roles: Sequence[str], given: Collection[str],
                   produced: Collection[str]) -> tuple[list[str], list[str], bool]:  # fmt: skip
    """The node's input and output names by position for a call that gives ``given`` and produces
    ``produced`` (``""`` for one left out), and whether they were placed by name: where every role
    is one of the op's formal names (``formal_names``), each goes to its formal position, so a
    manifest listing them in another order is still compared output for output; otherwise in the
    manifest's order (ONNX reads a node's inputs and outputs by position only)."""
    formal = formal_names(op_id)
    by_name = False
    if formal is not None and set(input_roles) <= set(formal[0]) and set(output_roles) <= set(formal[1]):
        (input_roles, output_roles), by_name = formal, True
    inputs = [role if role in given else "" for role in input_roles]
    outputs = [role if role in produced else "" for role in output_roles]
    while inputs and not inputs[-1]:  # trailing optional ones left out are simply absent
        inputs.pop()
    while outputs and not outputs[-1]:
        outputs.pop()
    return inputs, outputs, by_name


class ReferenceUnavailable(Exception):
    """Why a reference gives no outputs for a call (``run`` says so and compares nothing):
    onnxruntime missing, without a CPU kernel for the op, or refusing this call's model or data."""


class ReferenceShapeMismatch(ReferenceUnavailable):
    """ONNX infers an output of another shape than the kernel's: not run, and the kernel's output
    is WRONG by that reference (the op's contract, as ONNX knows it, gives another shape)."""

    def __init__(self, output: str, inferred: list[int], kernel: list[int]) -> None:
        super().__init__(f"onnxruntime would make output {output} of shape {inferred}, not the kernel's {kernel}: not run")
        self.output, self.inferred, self.kernel = output, inferred, kernel


def _ort_refusal(error: Exception) -> str:
    """What onnxruntime's error means for the comparison, in one line without its code prefix."""
    message = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    message = re.sub(r"^\[ONNXRuntimeError\] : \d+ : [A-Z_]+ : ", "", message)
    if type(error).__name__ == "NotImplemented":
        return "onnxruntime has no CPU kernel for this op and dtype"
    if "is not a registered function/op" in message:
        return "onnxruntime does not know this op"
    return f"onnxruntime refused this call: {message}"


#: ORT's words for a node attribute the op's schema lacks ("Unrecognized attribute: largest for operator TopK").
_UNKNOWN_ATTRIBUTE = re.compile(r"Unrecognized attribute: (\w+) for operator")


def _opset_hint(op_id: str, opset: int | None, refusal: str = "") -> str:
    """Where the opset the model imports selects an older version of the op than its newest, or none
    at all, the text that says so: `new` writes sinceVersion 1, and ORT registers many ai.onnx ops
    from a later version only (HardSigmoid from 6), which it reported as "no CPU kernel". Where ORT
    ``refusal`` names an attribute the selected version lacks, that attribute instead: every
    attribute of a package goes on the node, one of its own too, and another opset may not help. A
    sinceVersion above 1 that is a version of the op is the package's choice: the fact, no advice."""
    domain, _, name = op_id.rpartition(".")
    onnx_domain = "" if domain in ("ai.onnx", "") else domain
    used = opset if opset is not None else AI_ONNX_OPSET if not onnx_domain else 1
    try:
        from onnxruntime.capi import onnxruntime_pybind11_state as ort_state

        schemas = {s.since_version: s for s in ort_state.get_all_operator_schema()
                   if s.name == name and s.domain == onnx_domain}  # fmt: skip
    except Exception:  # noqa: BLE001 - no schemas to read: ORT's reason stands alone
        return ""
    versions = sorted(schemas)
    selected = [v for v in versions if v <= used]
    unknown = _UNKNOWN_ATTRIBUTE.search(refusal)
    if unknown and selected:
        own = ", ".join(sorted(schemas[selected[-1]].attributes)) or "none"
        later = [v for v in versions if v > selected[-1] and unknown[1] in schemas[v].attributes]
        since = f"; {name}-{later[0]} and later have it" if later else ""
        return (f" (the package's attribute {unknown[1]!r} is no attribute of {name}-{selected[-1]} (its attributes: "
                f"{own}){since}: every attribute of the package, its defaults too, goes on the node, so onnxruntime "
                f"checks only a package whose attributes are the ONNX op's)")  # fmt: skip
    if not versions or (selected and selected[-1] == versions[-1]):
        return ""
    listed = ", ".join(map(str, versions))
    domain_name = domain or "ai.onnx"
    fix = "set the manifest's sinceVersion, the opset the model imports, to the version the package mirrors"
    if not selected:
        return f"; {domain_name} opset {used} has no {name} (its versions {listed}): {fix}"
    # A sinceVersion above 1 that is a version of the op was chosen (`new` writes 1): the fact alone
    chosen = opset is not None and used > 1 and selected[-1] == used
    return (f" (the model imports {domain_name} opset {used}, which selects {name}-{selected[-1]} of its versions "
            f"{listed}{'' if chosen else ': ' + fix})")  # fmt: skip


#: Why an output has no ONNX Runtime reference value (onnxruntime_reference leaves it out), as `run` and
#: `bench` say it.
UNCOMPUTED_OUTPUTS = "optional outputs its release leaves out"


def no_numpy_reference(op_id: str) -> str:
    """Why no NumPy reference checked ``op_id``'s outputs, as `run` and `bench` say it."""
    return f"none registered for {op_id}; only the shipped ops have one"


def onnxruntime_reference(
    op_id: str,
    inputs: Mapping[str, np.ndarray],
    attrs: Mapping[str, Any] | None = None,
    *,
    input_names: Sequence[str] | None = None,
    output_names: Sequence[str] | None = None,
    output_shapes: Mapping[str, Sequence[int]] | None = None,
    opset: int | None = None,
) -> dict[str, np.ndarray]:
    """Run ``op_id`` as a one-node ONNX model on onnxruntime's CPU provider (``input_names``,
    ``output_names`` and ``opset`` as for :func:`one_node_model`). With ``output_shapes`` (the kernel's), a model
    that ONNX's shape inference says makes outputs of other shapes is not run: its op id and
    attributes come from the package, and `ai.onnx.RandomNormal` with ``shape=[65536, 65536]``
    would have ORT allocate 16 GiB.

    Inputs keep their dtype (f16 inputs run ORT's f16 kernel where it has one). Returns the
    outputs by name, less any it returned None for (not computed). Raises
    :class:`ReferenceUnavailable` saying why when onnx/onnxruntime is not installed, onnxruntime
    has no CPU kernel for the op or dtype (as for ``com.microsoft.BiasAdd``), or it refuses the
    call (an attribute of another type than the op declares, an index out of range).
    """
    try:
        import onnx  # noqa: F401
        import onnxruntime as ort
    except ImportError as error:
        raise ReferenceUnavailable(f"{error.name or 'onnxruntime'} is not installed") from None
    try:
        model, arrays, outputs = one_node_model(op_id, inputs, attrs, input_names=input_names,
                                                output_names=output_names, opset=opset)  # fmt: skip
        if output_shapes is not None:
            _check_inferred_shapes(model, output_shapes)
        options = ort.SessionOptions()
        options.log_severity_level = 4  # fatal only: its errors come back as exceptions, which say why
        session = ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])
        results = session.run(outputs, arrays)
    except ReferenceUnavailable:
        raise
    except Exception as error:  # noqa: BLE001 - ORT raises its own exception types (NOT_IMPLEMENTED, ...)
        refusal = _ort_refusal(error)
        raise ReferenceUnavailable(refusal + _opset_hint(op_id, opset, refusal)) from None
    # An optional output its CPU kernel does not compute comes back None (a contrib normalisation's
    # statistics, in releases before 1.30): no reference for it. np.asarray(None) had been one of shape (),
    # which `run` and `bench` called a WRONG shape in a correct kernel's output (tests/test_cli_run.py).
    return {name: np.asarray(r) for name, r in zip(outputs, results, strict=True) if r is not None}


def manifest_positions(manifest: Any, given: Collection[str], produced: Collection[str], *,
                       op_id: str | None = None) -> tuple[list[str], list[str], bool]:  # fmt: skip
    """:func:`node_positions` for a package's call: its manifest's roles, and its op id unless
    ``op_id`` names the ONNX op the package mirrors under an id of its own."""
    return node_positions(op_id or manifest.op_id, [s.role for s in manifest.inputs],
                          [s.role for s in manifest.outputs], given, produced)  # fmt: skip


def onnxruntime_for(manifest: Any, inputs: Mapping[str, np.ndarray], attrs: Mapping[str, Any],
                    outputs: Mapping[str, Any], *, positions: tuple[list[str], list[str], bool] | None = None,
                    op_id: str | None = None) -> dict[str, np.ndarray]:  # fmt: skip
    """:func:`onnxruntime_reference` for a package's call, as `run` and `bench` compare it: the node's
    inputs and outputs placed by :func:`manifest_positions` (or ``positions``), the op (the
    manifest's, or ``op_id``) at the manifest's ``sinceVersion``, the kernel's ``outputs``' shapes
    checked before ORT runs."""
    node_inputs, node_outputs, _ = positions or manifest_positions(manifest, inputs, outputs, op_id=op_id)
    return onnxruntime_reference(op_id or manifest.op_id, inputs, attrs, input_names=node_inputs,
                                 output_names=node_outputs, output_shapes={n: np.shape(a) for n, a in outputs.items()},
                                 opset=manifest.since_version)  # fmt: skip


def _check_inferred_shapes(model: bytes, output_shapes: Mapping[str, Sequence[int]]) -> None:
    """Refuse a model whose outputs ONNX infers to other shapes than the kernel's (dims it cannot
    infer, as for contrib ops, pass: ORT would size those from the call's inputs)."""
    import onnx
    from onnx import shape_inference

    try:
        inferred = shape_inference.infer_shapes(onnx.load_from_string(model), data_prop=True)
    except Exception:  # noqa: BLE001 - a model inference cannot read: ORT says what is wrong with it
        return
    for value in inferred.graph.output:
        tensor = value.type.tensor_type
        want = output_shapes.get(value.name)
        if want is None or not tensor.HasField("shape"):
            continue
        dims = [d.dim_value if d.HasField("dim_value") else None for d in tensor.shape.dim]
        if None not in dims and dims != list(want):
            raise ReferenceShapeMismatch(value.name, [int(d) for d in dims if d is not None], list(want))
