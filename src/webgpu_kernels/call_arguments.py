"""A call's arguments on their way to its plan: the options frozen into the fast-plan key (what
a repeated call is found by), and the inputs checked against the manifest's names and readied for
the device. What each input is (an array, a GpuTensor, a description) is read in call_inputs.py."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from .call_inputs import as_array, checked_mapping
from .contract import check_input_names, has_negative_zero, missing_input, negative_zero_indices
from .device import AdapterSummary, Device, adapter_request
from .errors import InputError, describe_value, name_meant, short_repr
from .execution import host_array
from .manifest import Manifest, ReadOnlyList
from .tensor import LOST_TENSOR, RELEASED_ADVICE, GpuTensor


def frozen_options(options: Mapping[str, Any] | None) -> Any:
    """``attrs`` or ``tunables`` as a hashable term of the fast-plan key, unequal wherever a
    checked call could tell the options apart."""
    # The value's type is part of the key: True == 1 must not share a plan with a checked True;
    # and so is a zero's sign: -0.0 == 0.0 must not either (CallSignature.negative_zeros). Only a
    # float zero or a tuple is looked into: a call with attributes pays no function call for it.
    # A tuple's items' types too: (1, 2) == (1.0, 2.0) == (True, 2), which render differently
    # or are refused (CallSignature.value_types); and which items are -0.0, not only whether one
    # is: (-0.0, 0.0) == (0.0, -0.0). A tuple subclass (a namedtuple) is a tuple to the contract,
    # so it is looked into too: `__class__ is tuple` had keyed pair(1, 1) as pair(1.0, 1.0).
    # A list (JSON's arrays: what a list attribute's default is) is keyed as its tuple of items, a
    # manifest's own read-only one too (attrs={**kernel.manifest.attributes}): unhashable, it had
    # sent every such call down the checked path.
    return None if not options else tuple(
        (k, v.__class__, v, (v == 0.0 and has_negative_zero(v)) if isinstance(v, _FLOATS) else
         isinstance(v, tuple) and _tuple_terms(v)) if v.__class__ is not list and v.__class__ is not ReadOnlyList else
        (k, list, tuple(v), _tuple_terms(v))
        for k, v in options.items()
    )  # fmt: skip


_FLOATS = (float, np.floating)
# Values a fast-plan key holds by value. Another hashable (a torch tensor hashes by identity) could
# change in place after its plan was stored, so a call with one always takes the checked path.
_SCALAR_TYPES = (bool, int, float, str, np.generic)


def keyed_by_value(options: Mapping[str, Any] | None) -> bool:
    """Whether a plan may be filed under ``options``' key: every value one the key holds by value."""
    return not options or all(
        isinstance(v, _SCALAR_TYPES) or isinstance(v, (tuple, list)) and all(isinstance(i, _SCALAR_TYPES) for i in v)
        for v in options.values()
    )  # fmt: skip


def _tuple_terms(value: Sequence[Any]) -> tuple[tuple[int, ...], tuple[type, ...]]:
    return negative_zero_indices(value), tuple(map(type, value))


def asked_outputs(manifest: Manifest, outputs: Iterable[str] | None,
                  roles: frozenset[str] = frozenset()) -> frozenset[str] | None:  # fmt: skip
    """A call's ``outputs=``, the names of the outputs it wants, checked to be declared outputs
    (None: it takes what the chosen variant writes; an empty one is refused). A frozenset, a term
    of the fast-plan key: the order and repeats of the names change nothing (the result keeps the
    manifest's order).
    ``roles``: the declared outputs' names, where the caller keeps them (the per-call path)."""
    if outputs is None:
        return None
    if outputs.__class__ in _NAME_COLLECTIONS:  # the per-call path: 0.28 us here, 2.2 through the checks below
        try:
            fast = frozenset(outputs)
        except TypeError:  # an unhashable item: the checks below name it
            fast = frozenset()
        if fast and fast <= roles:
            return fast
    declared = [spec.role for spec in manifest.outputs]
    expected = f"a list of output names, some of {declared}"
    if isinstance(outputs, (str, bytes, Mapping)) or not isinstance(outputs, Iterable):
        # a string is iterable too: outputs="Mean" would have asked for "M", "e", "a" and "n"
        hint = f"outputs=[{short_repr(outputs)}], not outputs={short_repr(outputs)}" if isinstance(outputs, str) else ""
        raise InputError("outputs", expected, describe_value(outputs), hint=hint)
    names = tuple(outputs)
    for name in names:
        if not isinstance(name, str):
            raise InputError("outputs", expected, describe_value(name))
        if name not in declared:
            meant = name_meant(name, declared)
            raise InputError("outputs", expected, f"{short_repr(name)}, not an output of the kernel",
                             hint=f"did you mean {meant!r}?" if meant else "")  # fmt: skip
    if not names:  # the call would compute every output and drop each one unread
        # an iterator's repr is its class and address ("tuple_iterator <... at 0x...>"): nothing to read
        given = "an empty iterator" if isinstance(outputs, Iterator) else describe_value(outputs)
        raise InputError("outputs", expected, f"{given}, which names no output",
                         hint="outputs=None takes every output the chosen variant writes")  # fmt: skip
    return frozenset(names)


def in_manifest_order(manifest: Manifest, asked: Iterable[str] | None) -> tuple[str, ...] | None:
    """The outputs ``asked`` for, in the order the manifest declares them (how every report lists
    them: explain's ``asked``, run's ``--json``); None where the call names none."""
    if asked is None:
        return None
    names = set(asked)
    return tuple(spec.role for spec in manifest.outputs if spec.role in names)


_NAME_COLLECTIONS = (list, tuple, set, frozenset)


def gpu_input_names(inputs: Mapping[str, Any]) -> list[str]:
    """The names of the inputs given as GpuTensors (a dtype's conversion hint differs for them)."""
    return [name for name, value in inputs.items() if isinstance(value, GpuTensor)]


class _Present(dict[str, Any]):
    """Inputs :func:`declared_present` checked and left the optional Nones out of: the call that
    re-enters with them does not check their names again."""


def declared_present(manifest: Manifest, inputs: Any) -> Any:
    """``inputs`` checked to be a mapping of declared input names, before any value is read (an
    unknown name given None had been refused as a value that is no array), less the optional
    inputs given as None (:func:`_without_absent`)."""
    if type(inputs) is _Present:
        return inputs
    check_input_names(manifest, checked_mapping(inputs))
    return _without_absent(manifest, inputs)


def _without_absent(manifest: Manifest, inputs: Any) -> Any:
    """``inputs`` less the optional inputs given as None (ONNX's and PyTorch's way of leaving one
    out), or ``inputs`` itself where there are none; a required input given as None is missing."""
    if not isinstance(inputs, Mapping) or not any(v is None for v in inputs.values()):
        return inputs
    optional = {spec.role for spec in manifest.inputs if spec.optional}
    for spec in manifest.inputs:
        if not spec.optional and spec.role in inputs and inputs[spec.role] is None:
            raise missing_input(manifest, spec.role, "None (a required input: None leaves out only an optional one)")
    present = _Present((name, value) for name, value in inputs.items() if value is not None or name not in optional)
    return present if len(present) < len(inputs) else inputs


def prepare_inputs(inputs: Mapping[str, Any], device: Device, *, host_ready: bool) -> dict[str, np.ndarray | GpuTensor]:
    """Inputs as NumPy arrays or live GpuTensors on ``device``; with ``host_ready`` the arrays are
    also made C-contiguous and little-endian (copies, never the caller's array)."""
    prepared: dict[str, np.ndarray | GpuTensor] = {}
    for name, value in checked_mapping(inputs).items():
        if isinstance(value, GpuTensor):
            if value.released:
                raise InputError(name, "a live GpuTensor", "a released GpuTensor", hint=RELEASED_ADVICE)
            if value._device is not device:  # the slot: the property costs 17 ns more a read (CPU machine)
                if value.device.lost:  # same adapter, so the labels alone would read alike
                    raise InputError(name, "a GpuTensor on a live device", LOST_TENSOR)
                raise foreign_tensor_error(name, value.device.adapter, device.adapter,
                                           split=_on_other_devices(inputs, value._device))  # fmt: skip
            prepared[name] = value
            continue
        if type(value) is not np.ndarray:  # plain arrays (the per-call path) skip as_array's checks
            value = as_array(name, value)
        prepared[name] = host_array(value) if host_ready else value
    return prepared


def _on_other_devices(inputs: Mapping[str, Any], tensor_device: Any) -> list[str]:
    """The GpuTensor inputs not on ``tensor_device``: where there are any, running the call on that
    device would only refuse them instead (only on the error path)."""
    return [k for k, v in inputs.items() if isinstance(v, GpuTensor) and v._device is not tensor_device]


def foreign_tensor_error(name: str, tensor_adapter: AdapterSummary, call_adapter: AdapterSummary,
                         split: list[str] | None = None) -> InputError:  # fmt: skip
    """The error for a GpuTensor on another adapter's device than the call's, saying the ways out:
    run the call where the tensor lives, or copy the tensor over (to_gpu without adapter= returns it
    as it is, so the hint names both adapters as ``adapter=`` values). Where other GpuTensor inputs
    (``split``) are not on the tensor's device, running there would refuse those: the hint says to copy."""
    there, here = adapter_request(tensor_adapter), adapter_request(call_adapter)
    copy = f"copy the tensor to the call's device with to_gpu(t, adapter={here})"
    if split:
        others = ", ".join(repr(k) for k in split)
        hint = f"a call runs on one device, and {others} {'is' if len(split) == 1 else 'are'} not on this tensor's: {copy}"
    else:
        hint = f"a call runs on one device: run it on the tensor's device with adapter={there}, or {copy}"
    return InputError(name, f"a GpuTensor on {call_adapter.label()}", f"one on {tensor_adapter.label()}", hint=hint)
