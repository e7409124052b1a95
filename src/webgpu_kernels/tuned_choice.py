"""The stored tuning result a call runs instead of the manifest's own selection: the call's tuning
class (what an entry is keyed by), the lookup, and the checks that the entry still fits the call.

`webgpu-kernels tune` writes the entries and tuning.py stores them; the kernel (kernel.py) asks here
on a call, ``plan(tuned=True)``, ``explain`` and ``render``. A stored choice is judged and built by
the kernel's own steps (:class:`Planner`), as the call's own selection is, so that an entry that
no longer fits is dropped and the default selection applies.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from . import tuning
from .contract import CallSignature, check_call
from .device import Device
from .errors import KernelError
from .execution import ExecutionPlan
from .manifest import Manifest
from .program import DeviceInfo, OutputSpec
from .rendering import produced_outputs

#: (dtypes, input shapes, absent optional inputs, attributes off their defaults): tuning.entry_key's terms
TuningClass = tuple[dict[str, str], dict[str, tuple[int, ...]], tuple[str, ...], dict[str, Any]]
#: What Kernel._resolve gives for (signature, forced variant, device info): ((the chosen variant, the
#: outputs' specs), its resolved passes, its scope). Handed on so that a plan does not resolve again.
Resolution = tuple[Any, Any, Any]


class Planner(Protocol):
    """What a stored choice needs of its kernel (kernel.Kernel): the manifest, the tuning key and
    the attributes' defaults as the key writes them, and the call's own steps: resolve a variant,
    check it against the device, build (or find) its plan."""

    @property
    def manifest(self) -> Manifest: ...

    @property
    def tuning_key(self) -> str: ...

    @property
    def _canonical_defaults(self) -> dict[str, Any]: ...

    def _resolve(self, signature: CallSignature, forced: str | None, info: DeviceInfo) -> Resolution: ...

    def _check_device(self, signature: CallSignature, variant_id: str, outputs: tuple[OutputSpec, ...],
                      resolved: Any, device: Device) -> None: ...  # fmt: skip

    def _plan(self, signature: CallSignature, forced: str | None, device: Device, *,
              resolution: Resolution | None = None) -> ExecutionPlan: ...  # fmt: skip


def tuning_class_of(kernel: Planner, signature: CallSignature) -> TuningClass:
    """The tuning class of a checked call (what Kernel.tuning_class describes)."""
    shapes = signature.shape_map()  # checked: Python ints, whatever the caller's shapes held
    absent = tuple(spec.role for spec in kernel.manifest.inputs if spec.optional and spec.role not in shapes)
    defaults = kernel._canonical_defaults
    changed = {k: value for k, v in signature.attr_map().items()  # as the key writes them: 1.702 in float32 is 1.702
               if (value := tuning.canonical_attr(v)) != defaults[k]}
    return signature.type_bindings(), shapes, absent, changed


def tuned_choice(kernel: Planner, metas: Mapping[str, Any], attrs: Mapping[str, Any] | None,
                 signature: CallSignature, device: Device, *,
                 check: bool = False) -> tuple[CallSignature, str, Resolution | None] | None:  # fmt: skip
    """The signature (with its tunables) and variant `webgpu-kernels tune` found fastest for
    this call, if one is stored and its tunables fit the contract; with ``check``, only if its
    variant's `when` also holds for the call (a call finds that out by building the plan); and
    its resolution for the call where it was resolved here (with ``check`` or optional outputs)."""
    if tuning.disabled():  # before the file is read: a damaged one no call uses is not warned of
        return None
    cache = tuning.cache_for(device.adapter.name, device.adapter.backend)
    choice = cache.lookup(kernel.tuning_key, *tuning_class_of(kernel, signature))
    if choice is None:
        return None
    optional_outputs = any(spec.optional for spec in kernel.manifest.outputs)
    resolution = None
    try:
        tuned = check_call(kernel.manifest, metas, attrs, choice.tunables, names_checked=True)  # the call's names
        if check or optional_outputs:  # its `when` (without ``check``, building the plan checks it)
            resolution = kernel._resolve(tuned, choice.variant, device.info)
            if check:  # as a call would build it: `when`, then the device's limits
                (chosen, outputs), resolved, _ = resolution
                kernel._check_device(tuned, chosen.variant.id, outputs, resolved, device)
            if optional_outputs and not _keeps_outputs(kernel, signature, resolution, device):
                return None  # the call's result would lack an output its own selection returns
    except KernelError:
        return None  # stale or foreign entry: the default selection still applies
    return tuned, choice.variant, resolution


def _keeps_outputs(kernel: Planner, signature: CallSignature, tuned: Resolution, device: Device) -> bool:
    """Whether the stored variant, resolved for the call at its tunables (``tuned``), returns
    every output the manifest's own selection returns for this call. `tune` keeps only a
    candidate with the outputs of the tuned shape's default, but another shape of its class may
    have another default: where some variants write an optional output and others do not, a
    call of that shape had come back without that output where a tuning file held an entry for
    its class (helper-39)."""
    (_, tuned_outputs), tuned_resolved, _ = tuned
    kept = produced_outputs(tuned_resolved, tuned_outputs)
    if len(kept) == len(tuned_outputs):  # it returns every output: the call's own selection needs no resolving
        return True
    try:
        (_, outputs), resolved, _ = kernel._resolve(signature, None, device.info)
    except KernelError:  # the manifest's selection cannot run the call: nothing to keep the same
        return True
    return produced_outputs(resolved, outputs) <= kept


def tuned_plan(kernel: Planner, metas: Mapping[str, Any], attrs: Mapping[str, Any] | None,
               signature: CallSignature, device: Device) -> ExecutionPlan | None:  # fmt: skip
    """The plan of the stored tuning result for this call, if one applies (:func:`tuned_choice`)."""
    choice = tuned_choice(kernel, metas, attrs, signature, device)
    if choice is None:
        return None
    try:
        return kernel._plan(*choice[:2], device, resolution=choice[2])
    except KernelError:
        return None  # stale, foreign or refused by the device: the default selection still applies
