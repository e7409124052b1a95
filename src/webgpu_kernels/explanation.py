"""What :meth:`Kernel.explain <webgpu_kernels.kernel.Kernel.explain>` returns: the variant
selection of one call, judged variant by variant, and its text and JSON forms. It holds the
finished answer only; working it out is the kernel's (kernel.py). And what ``help(kernel)`` shows:
the op's contract as text (:func:`contract_doc`)."""

from __future__ import annotations

import keyword
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .errors import printable, short_repr, shorten
from .program import OutputSpec
from .selection import Verdict, json_value

if TYPE_CHECKING:
    from .kernel import Kernel


@dataclass(frozen=True)
class Explanation:
    """What :meth:`Kernel.explain` found for a call: every variant's verdict, the one chosen, the
    outputs' shapes and why the call would still fail, if it would. ``str()`` is the
    `webgpu-kernels explain` text; :meth:`as_dict` its ``--json``.

    Fields (the comments on each in explanation.py say more):

    - ``op_id``: the kernel's op id (``com.microsoft.QuickGelu``).
    - ``chosen``: the variant the manifest's selection picks; None where no variant applies.
    - ``verdicts``: each variant's Verdict (accepted or not, and why), in the order selection tries them.
    - ``outputs``: every output's role, shape and dtype for this call.
    - ``values``: the call's derive and constant values (top level).
    - ``refused``: why the call would still fail with ``chosen`` (a device limit, say); None if it would not.
    - ``tuned``: the stored tuning result the call runs instead, ``{"variant", "tunables"}``; None if none.
    - ``forced``: the variant the call forces with ``variant=``; None if it forces none.
    - ``produced``: the outputs ``chosen`` returns (an optional one it binds nowhere left out); None if none chosen.
    - ``tuning_entry``: the tuning file's entry for the call's tuning class, used or not and why; None if none.
    - ``asked``: the outputs the call asks for (``outputs=``), in the manifest's order; None if it names none.
    - ``scratch``: (name, bytes) of each scratch buffer the chosen variant would bind; None if none chosen.
    """

    op_id: str
    chosen: str | None
    verdicts: tuple[Verdict, ...]
    outputs: tuple[OutputSpec, ...]
    values: dict[str, Any]  # derive and constant values of the call (top level)
    #: Why a call would still fail with the chosen variant (a binding over the device's limits, a
    #: grid expression that fails), if it would; with no variant chosen, the device's reason if it
    #: has one (float16 on an adapter without shader-f16, which a variant would accept with it).
    #: Where ``tuned`` is set the call runs that instead, and does not fail for this reason.
    refused: str | None = None
    #: The stored tuning result a call would run instead, {"variant": ..., "tunables": {...}}, if any
    #: (`webgpu-kernels tune`); ``chosen`` stays the manifest's own selection.
    tuned: dict[str, Any] | None = None
    #: The variant the call forces (``variant=``), if it does: ``chosen`` is it if its ``when``
    #: holds, else None with the call's VariantRejectedError in ``refused``.
    forced: str | None = None
    #: The outputs the chosen variant returns (an optional output it binds nowhere is left out of
    #: the call's result); None when no variant was chosen. ``outputs`` lists every output's shape.
    produced: frozenset[str] | None = None
    #: The tuning file's entry for the call's tuning class, if it has one: {"file", "key",
    #: "variant", "tunables", "used", "reason"}, ``reason`` saying why the call does not run it
    #: (None where it does: ``tuned``). Also an entry tuned for another version of the package,
    #: which the call cannot find; None where the file has neither.
    tuning_entry: dict[str, Any] | None = None
    #: The outputs the call asks for (``outputs=``), in the manifest's order: the result holds
    #: these; ``produced`` may hold more (computed, then dropped). None: the call names none.
    asked: tuple[str, ...] | None = None
    #: (name, bytes) of each scratch buffer the chosen variant's passes would bind for this call
    #: (docs/format.md), () where it has none; None where no variant is chosen or the call fails first.
    scratch: tuple[tuple[str, int], ...] | None = None

    def __str__(self) -> str:
        if self.forced is not None:
            head = (f"chosen variant {self.chosen!r} (forced)" if self.chosen else
                    f"forced variant {self.forced!r} rejected")  # fmt: skip
        else:
            head = f"chosen variant {self.chosen!r}" if self.chosen else "no variant applies"
        lines = [f"{self.op_id}: {head}"]
        for v in self.verdicts:
            mark = "*" if v.variant == self.chosen else ("+" if v.accepted else "-")
            lines.append(f"  {mark} {v.variant} (priority {v.priority:g}): {v.reason()}")
        for out in self.outputs:
            left_out = self.produced is not None and out.role not in self.produced
            note = f" (optional: variant {self.chosen!r} does not produce it)" if left_out else ""
            if self.asked is not None and out.role not in self.asked:
                note = " (not asked for: computed, then dropped)" if self.produced and not left_out else " (not asked for)"
            lines.append(f"  output {out.role}: shape {list(out.shape)} {out.dtype}{note}")
        lines += [f"  scratch {name}: {nbytes} bytes (never returned)" for name, nbytes in self.scratch or ()]
        if self.refused and self.tuned:  # the call runs the stored result, which passed the call's checks
            lines.append(f"  the manifest's selection would fail, so without the stored result below the call "
                         f"would: {self.refused}")  # fmt: skip
        elif self.refused:
            lines.append(f"  {'but the call would fail' if self.chosen else 'the call fails'}: {self.refused}")
        entry = self.tuning_entry
        where = "" if entry is None else tuning_entry_place(entry)
        if self.tuned:
            lines.append(f"  a stored tuning result applies: the call runs {self.tuned['variant']!r} with "
                         f"tunables {self.tuned['tunables']}" + (f" ({where})" if where else ""))  # fmt: skip
        elif entry is not None and not entry["used"]:
            lines.append(f"  a stored tuning result is not used: {entry['reason']}")
            lines.append(f"    ({where}: {tuning_entry_choice(entry)})")
        return "\n".join(lines)

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        # IPython and Jupyter show a cell's value through this: the text, one verdict a line, where
        # the dataclass repr (kept for repr()) is one line of every verdict's values.
        printer.text("Explanation(...)" if cycle else str(self))

    def as_dict(self) -> dict[str, Any]:
        return {
            "op": self.op_id, "chosen": self.chosen, "variants": [v.as_dict() for v in self.verdicts],
            "outputs": [{"name": o.role, "shape": list(o.shape), "dtype": o.dtype,
                         "produced": None if self.produced is None else o.role in self.produced} for o in self.outputs],
            "values": {k: json_value(v) for k, v in self.values.items()},
            "refused": self.refused, "tuned": self.tuned, "forced": self.forced, "tuningEntry": self.tuning_entry,
            "asked": None if self.asked is None else list(self.asked),
            "scratch": None if self.scratch is None else [{"name": n, "bytes": b} for n, b in self.scratch],
        }  # fmt: skip


#: The most of an entry's key the text shows (an attribute off its default is in the key: a list
#: of 4,096 numbers would make a line of 40,000 characters); ``as_dict`` has it whole.
MAX_KEY_SHOWN = 300


def tuning_entry_place(entry: Mapping[str, Any]) -> str:
    """``tuning file F, entry 'K'``: where a tuning entry (:attr:`Explanation.tuning_entry`) is."""
    return f"tuning file {entry['file']}, entry {shorten(entry['key'], MAX_KEY_SHOWN)!r}"


def tuning_entry_choice(entry: Mapping[str, Any]) -> str:
    """``variant 'V', tunables {...}``: what a tuning entry holds, cut as its key is (an entry the
    call passes over may hold whatever a hand edit put in the file, up to its 8 MiB)."""
    return f"variant {short_repr(entry['variant'])}, tunables {short_repr(entry['tunables'], MAX_KEY_SHOWN)}"


#: The most of one description help(kernel) shows, in characters; the whole text is bounded by
#: MAX_DOC. The package's text is of any length up to its manifest's 8 MiB, and IDEs read
#: __doc__ again at each hover: a 7 MB description had made a 7 MB docstring.
MAX_DOC_DESCRIPTION = 2000
MAX_DOC = 64 * 1024
#: The most of a default value shown (a list of 4096 numbers had been shown whole, twice).
MAX_DOC_VALUE = 120


def contract_doc(kernel: Kernel) -> str:
    """What ``help(kernel)`` shows: a call of this op, its inputs, outputs, types, attributes and
    tunables (``webgpu-kernels info`` without the variants' internals), control characters replaced."""
    m = kernel.manifest
    names: dict[str, str] = {}  # each input's variable in the example call: X -> x, a clash or keyword -> input1
    for i, s in enumerate(m.inputs):
        name = s.role.lower()
        ok = name.isidentifier() and not keyword.iskeyword(name) and name not in names.values()
        names[s.role] = name if ok else f"input{i}"
    args = ", ".join(f'"{s.role}": {names[s.role]}' for s in m.inputs if not s.optional)
    attrs = ", ".join(f'"{k}": {short_repr(v, MAX_DOC_VALUE)}' for k, v in m.attributes.items())
    outs = ", ".join(f'"{s.role}": ...' for s in m.outputs)
    lines = [f"{kernel.op_id} ({kernel.package.origin} kernel, contract version {kernel.contract_version})"]
    if m.description:
        lines += [_cut(m.description)]
    lines += ["", f"Call: kernel({{{args}}}{f', attrs={{{attrs}}}' if attrs else ''}) -> {{{outs}}}",
              "(NumPy arrays or GpuTensors in; output=\"gpu\" for GpuTensors out)", "", "Inputs:"]  # fmt: skip

    def rank(spec: Any) -> str:
        return "any rank" if spec.rank is None else f"rank {spec.rank}"

    for s in m.inputs:
        optional = " (optional: leave it out or pass None)" if s.optional else ""
        lines.append(_sentence(f"  {s.role}: {s.dtype}, {rank(s)}{optional}", s.description))
    lines.append("Outputs:")
    for s in m.outputs:
        shape = f", shape {s.shape}" if s.shape else ""
        lines.append(_sentence(f"  {s.role}: {s.dtype}, {rank(s)}{shape}", s.description))
    lines.append("Types: " + "; ".join(f"{t} in {', '.join(ds)}" for t, ds in m.type_constraints.items()))
    if m.attributes:
        described = m.raw.get("attributeDescriptions")
        described = described if isinstance(described, dict) else {}
        lines.append("Attributes (attrs=):")
        lines += [_sentence(f"  {k} = {short_repr(v, MAX_DOC_VALUE)}", described.get(k)) for k, v in m.attributes.items()]
    if m.tunables:
        lines.append("Tunables (tunables=): " + ", ".join(f"{k} = {short_repr(v, MAX_DOC_VALUE)}"
                                                          for k, v in m.tunables.items()))  # fmt: skip
    lines.append(f"Variants: {', '.join(kernel.variants)} (kernel.explain(inputs) says which a call runs, and why)")
    tail = "\n\nThe methods (explain, render, evaluate, flush, ...): help(webgpu_kernels.Kernel)."
    text = "\n".join(lines)
    if len(text) > MAX_DOC:
        text = text[:MAX_DOC] + "\n... (cut: `webgpu-kernels info` or kernel.manifest shows all of it)"
    # Descriptions are the package's text, shown on a terminal: no escape sequence gets through.
    return printable(text + tail)


def _sentence(head: str, description: Any) -> str:
    """``head``, then the manifest's description of it if any, ending in one full stop."""
    text = f"{head}. {_cut(description.strip())}" if isinstance(description, str) and description.strip() else head
    return text if text.endswith((".", ".)", "!", "?")) else text + "."


def _cut(description: str) -> str:
    """A description as help(kernel) shows it: at most MAX_DOC_DESCRIPTION characters."""
    if len(description) <= MAX_DOC_DESCRIPTION:
        return description
    return shorten(description, MAX_DOC_DESCRIPTION) + " (cut: `webgpu-kernels info` shows all of it)"
