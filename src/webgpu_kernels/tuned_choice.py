"""The stored tuning result a call runs instead of the manifest's own selection: the call's tuning
class (what an entry is keyed by), the lookup, and the checks that the entry still fits the call.

`webgpu-kernels tune` writes the entries and tuning.py stores them; the kernel (kernel.py) asks here
on a call, ``plan(tuned=True)``, ``explain`` and ``render``. A stored choice is judged and built by
the kernel's own steps (:class:`Planner`), as the call's own selection is, so that an entry that
no longer fits is dropped and the default selection applies. ``explain`` and ``render`` get that
judgement's reason too (:func:`stored_entry`), to say which entry a call passes over and why.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from . import tuning
from .contract import CallSignature, check_call
from .device import Device
from .errors import KernelError, short_repr, shorten
from .execution import ExecutionPlan
from .manifest import Manifest
from .program import DeviceInfo, OutputSpec
from .rendering import produced_outputs

#: (dtypes, input shapes, absent optional inputs, attributes off their defaults): tuning.entry_key's terms
TuningClass = tuple[dict[str, str], dict[str, tuple[int, ...]], tuple[str, ...], dict[str, Any]]
#: What Kernel._resolve gives for (signature, forced variant, device info): ((the chosen variant, the
#: outputs' specs), its resolved passes, its scope). Handed on so that a plan does not resolve again.
Resolution = tuple[Any, Any, Any]
#: The most of an error's text a reason for passing over a stored entry shows.
MAX_REASON = 1000
#: A stored choice that fits the call: the signature with its tunables, its variant, and its
#: resolution where the judgement resolved it.
Choice = tuple[CallSignature, str, Resolution | None]


@dataclass(frozen=True)
class StoredEntry:
    """The tuning file's entry for a call's tuning class, as ``explain`` and ``render`` report it:
    where it is, what it holds, and ``reason``, why the call does not run it (None: it does)."""

    file: Path
    key: str
    variant: str
    tunables: dict[str, Any]
    reason: str | None = None

    @property
    def used(self) -> bool:
        return self.reason is None

    def as_dict(self) -> dict[str, Any]:
        return {"file": str(self.file), "key": self.key, "variant": self.variant, "tunables": dict(self.tunables),
                "used": self.used, "reason": self.reason}  # fmt: skip


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

    def _resolve(self, signature: CallSignature, forced: str | None, info: DeviceInfo, *,
                 asked: frozenset[str] | None = None) -> Resolution: ...  # fmt: skip

    def _check_device(self, signature: CallSignature, variant_id: str, outputs: tuple[OutputSpec, ...],
                      resolved: Any, device: Device, scope: Mapping[str, Any]) -> tuple[tuple[str, int], ...]: ...  # fmt: skip

    def _plan(self, signature: CallSignature, forced: str | None, device: Device, *,
              resolution: Resolution | None = None, asked: frozenset[str] | None = None) -> ExecutionPlan: ...  # fmt: skip


def tuning_class_of(kernel: Planner, signature: CallSignature) -> TuningClass:
    """The tuning class of a checked call (what Kernel.tuning_class describes)."""
    shapes = signature.shape_map()  # checked: Python ints, whatever the caller's shapes held
    absent = tuple(spec.role for spec in kernel.manifest.inputs if spec.optional and spec.role not in shapes)
    defaults = kernel._canonical_defaults
    changed = {k: value for k, v in signature.attr_map().items()  # as the key writes them: 1.702 in float32 is 1.702
               if (value := tuning.canonical_attr(v)) != defaults[k]}
    return signature.type_bindings(), shapes, absent, changed


def tuned_choice(kernel: Planner, metas: Mapping[str, Any], attrs: Mapping[str, Any] | None,
                 signature: CallSignature, device: Device, *, check: bool = False,
                 asked: frozenset[str] | None = None) -> Choice | None:  # fmt: skip
    """The signature (with its tunables) and variant `webgpu-kernels tune` found fastest for
    this call, if one is stored and its tunables fit the contract; with ``check``, only if its
    variant's `when` also holds for the call (a call finds that out by building the plan); and
    its resolution for the call where it was resolved here (with ``check`` or optional outputs).
    ``asked``: the call's outputs= (a stored variant must write the optional ones asked for, and
    no unasked one that the manifest's own choice for the call does not write)."""
    if tuning.disabled():  # before the file is read: a damaged one no call uses is not warned of
        return None
    cache = tuning.cache_for(device.adapter.name, device.adapter.backend)
    choice = cache.lookup(kernel.tuning_key, *tuning_class_of(kernel, signature))
    if choice is None:
        return None
    return _judge(kernel, choice, metas, attrs, signature, device, check, asked)[0]


def _judge(kernel: Planner, choice: tuning.TunedChoice, metas: Mapping[str, Any], attrs: Mapping[str, Any] | None,
           signature: CallSignature, device: Device, check: bool,
           asked: frozenset[str] | None = None) -> tuple[Choice | None, str | None]:  # fmt: skip
    """Whether the call runs a stored ``choice`` (see :func:`tuned_choice`): the choice made ready,
    else None and why not. The one judgement calls, ``explain`` and ``render`` share."""
    optional_outputs = any(spec.optional for spec in kernel.manifest.outputs)
    resolution, resolving = None, False
    try:
        tuned = check_call(kernel.manifest, metas, attrs, choice.tunables, names_checked=True)  # the call's names
        if check or optional_outputs:  # its `when` (without ``check``, building the plan checks it)
            resolving = True
            resolution = kernel._resolve(tuned, choice.variant, device.info, asked=asked)  # refused if it lacks one asked
            if check:  # as a call would build it: `when`, then the device's limits
                (chosen, outputs), resolved, scope = resolution
                kernel._check_device(tuned, chosen.variant.id, outputs, resolved, device, scope)
            if optional_outputs and asked is not None:
                if unasked := _unasked_outputs(kernel, signature, resolution, device, asked):
                    # the call asks not to compute them, and its own selection does not
                    return None, (f"its variant {choice.variant!r} writes {', '.join(sorted(unasked))}, which the call "
                                  f"does not ask for (outputs=) and the manifest's own selection does not compute")  # fmt: skip
            elif optional_outputs and (lost := _lost_outputs(kernel, signature, resolution, device)):
                # the call's result would lack an output its own selection returns
                return None, (f"its variant {choice.variant!r} does not return {', '.join(sorted(lost))}, which "
                              f"the manifest's own selection returns for this call")  # fmt: skip
    except KernelError as exc:  # stale or foreign entry: the default selection still applies
        # the error of resolving or checking names the variant (VariantRejectedError, SelectionError,
        # DeviceLimitError); the contract's names only the tunable
        # (cut: the entry may hold whatever a hand edit put in the file, and the errors quote it whole)
        problem = shorten(str(exc), MAX_REASON)
        return None, problem if resolving else f"its tunables {short_repr(choice.tunables, 300)} do not fit the manifest: {problem}"
    return (tuned, choice.variant, resolution), None


def stored_entry(kernel: Planner, metas: Mapping[str, Any], attrs: Mapping[str, Any] | None,
                 signature: CallSignature, device: Device, *, overridden: str | None = None,
                 asked: frozenset[str] | None = None) -> tuple[Choice | None, StoredEntry | None]:  # fmt: skip
    """``explain``'s and ``render``'s look at the tuning file: the choice the call runs (as
    :func:`tuned_choice` with ``check``) and the entry for its class, with why the call passes
    it over where it does; else an entry tuned for another version of the package (its manifest or
    a template changed since), which the call cannot find. ``overridden``: the call names a variant
    or tunables, which it runs instead (the reason said). Not for calls: it reads the file while
    tuning is off, and looks through every entry where the class has none."""
    off = tuning.disabled()
    if off:  # the file as it is (cache_for's path), loaded apart: no warning of its damage, none kept for calls
        slug = tuning.adapter_slug(device.adapter.name, device.adapter.backend)
        cache = tuning.TuningCache(tuning.tuning_dir() / f"{slug}.json", warn=False)
    else:
        cache = tuning.cache_for(device.adapter.name, device.adapter.backend)
    tuning_class = tuning_class_of(kernel, signature)
    key = tuning.entry_key(kernel.tuning_key, *tuning_class)
    choice = cache.lookup(kernel.tuning_key, *tuning_class)
    if choice is None:
        return None, _other_version(kernel, cache, key)
    if off:
        reason: str | None = f"${tuning.DISABLE_ENV} is set: calls run the manifest's own selection"
        found = None
    elif overridden is not None:
        reason, found = overridden, None
    else:
        found, reason = _judge(kernel, choice, metas, attrs, signature, device, True, asked)
    return found, StoredEntry(cache.path, key, choice.variant, choice.tunables, reason)


def _other_version(kernel: Planner, cache: tuning.TuningCache, key: str) -> StoredEntry | None:
    """An entry for the call's class tuned for another version of this op's package (same op id,
    another digest in its tuning key), if the file holds one: the first by key where several do."""
    others = tuning.other_versions(list(cache.entries), key, kernel.tuning_key)
    if not others:
        return None
    entry = cache.entries.get(others[0])
    if entry is None:  # forgotten meanwhile by another thread
        return None
    more = f" (and {len(others) - 1} more such entries)" if len(others) > 1 else ""
    reason = (f"it was tuned for another version of this op's package (its manifest or templates differ: "
              f"tuning key {others[0].split('|', 1)[0]!r}, this package's {kernel.tuning_key!r}), so calls of this one "
              f"never find it{more}; `webgpu-kernels tune` tunes this one")  # fmt: skip
    return StoredEntry(cache.path, others[0], entry["variant"], dict(entry["tunables"]), reason)


def _lost_outputs(kernel: Planner, signature: CallSignature, tuned: Resolution, device: Device) -> set[str]:
    """The outputs the manifest's own selection returns for this call that the stored variant,
    resolved for the call at its tunables (``tuned``), does not (none: it may run). `tune` keeps only a
    candidate with the outputs of the tuned shape's default, but another shape of its class may
    have another default: where some variants write an optional output and others do not, a
    call of that shape had come back without that output where a tuning file held an entry for
    its class."""
    (_, tuned_outputs), tuned_resolved, _ = tuned
    kept = produced_outputs(tuned_resolved, tuned_outputs)
    if len(kept) == len(tuned_outputs):  # it returns every output: the call's own selection needs no resolving
        return set()
    try:
        (_, outputs), resolved, _ = kernel._resolve(signature, None, device.info)
    except KernelError:  # the manifest's selection cannot run the call: nothing to keep the same
        return set()
    return set(produced_outputs(resolved, outputs) - kept)


def _unasked_outputs(kernel: Planner, signature: CallSignature, tuned: Resolution, device: Device,
                     asked: frozenset[str]) -> set[str]:  # fmt: skip
    """The outputs the stored variant (resolved for the call, ``tuned``) computes that the call
    does not ask for and the manifest's own selection for the call (with ``asked``) does not
    compute: the work the call declined. Tuning times calls that ask for no subset, so an entry
    may hold a variant that writes what such a call declines."""
    (_, tuned_outputs), tuned_resolved, _ = tuned
    extra = produced_outputs(tuned_resolved, tuned_outputs) - asked
    if not extra:
        return set()
    try:
        (_, outputs), resolved, _ = kernel._resolve(signature, None, device.info, asked=asked)
    except KernelError:  # the manifest's selection cannot run the call: the stored one may
        return set()
    return set(extra - produced_outputs(resolved, outputs))


def tuned_plan(kernel: Planner, metas: Mapping[str, Any], attrs: Mapping[str, Any] | None,
               signature: CallSignature, device: Device, *,
               asked: frozenset[str] | None = None) -> ExecutionPlan | None:  # fmt: skip
    """The plan of the stored tuning result for this call, if one applies (:func:`tuned_choice`)."""
    choice = tuned_choice(kernel, metas, attrs, signature, device, asked=asked)
    if choice is None:
        return None
    try:
        return kernel._plan(*choice[:2], device, resolution=choice[2], asked=asked)
    except KernelError:
        return None  # stale, foreign or refused by the device: the default selection still applies
