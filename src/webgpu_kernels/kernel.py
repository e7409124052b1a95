"""The kernel object: a loaded package you call with a dict of inputs.

It strings the stages together (contract -> program scope -> selection -> rendering ->
execution) and caches, per call signature, the finished plan: the variant, the pipelines, the
uniform buffers and the grid. A call whose signature was seen before evaluates no expression.
"""

from __future__ import annotations

import functools
import threading
from collections import OrderedDict
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any, Literal, cast, overload

import numpy as np

from . import tuning
from .call_inputs import as_array, checked_mapping, describe_inputs, foreign_tensor_error
from .contract import CallSignature, check_call, check_input_names, has_negative_zero
from .device import Device, get_device
from .errors import (
    DeviceLimitError,
    ExpressionError,
    InputError,
    KernelError,
    SelectionError,
    shorten,
)
from .execution import (
    ExecutionPlan,
    build_pass,
    check_bound,
    check_input_sizes,
    check_limits,
    flush,
    host_array,
    run_plan,
)
from .expressions import Expression, ExpressionCompiler
from .manifest import Manifest, parse_manifest
from .package import MANIFEST_FILE, KernelPackage
from .program import CompiledVariant, DeviceInfo, OutputSpec, compile_program, tensor_bytes
from .rendering import TemplateRenderer, bound_roles, produced_outputs, resolve_variant, workgroup_memory_blame
from .selection import Selection, Verdict, require_choice, select_variant
from .tensor import LOST_TENSOR, RELEASED_ADVICE, GpuTensor

#: Plans hold their pipelines (about 300 KiB each on lavapipe), so this bounds pipeline memory too.
PLAN_CACHE_SIZE = 128
#: Expressions given to :meth:`Kernel.evaluate` kept compiled, per kernel.
EVALUATED_CACHE_SIZE = 256
_OUTPUT_KINDS = ("numpy", "gpu")


@dataclass(frozen=True)
class Explanation:
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
            lines.append(f"  output {out.role}: shape {list(out.shape)} {out.dtype}"
                         + (f" (optional: variant {self.chosen!r} does not produce it)" if left_out else ""))  # fmt: skip
        if self.refused and self.tuned:  # the call runs the stored result, which passed the call's checks
            lines.append(f"  the manifest's selection would fail, so without the stored result below the call "
                         f"would: {self.refused}")  # fmt: skip
        elif self.refused:
            lines.append(f"  {'but the call would fail' if self.chosen else 'the call fails'}: {self.refused}")
        if self.tuned:
            lines.append(f"  a stored tuning result applies: the call runs {self.tuned['variant']!r} with "
                         f"tunables {self.tuned['tunables']}")  # fmt: skip
        return "\n".join(lines)

    def as_dict(self) -> dict[str, Any]:
        return {
            "op": self.op_id, "chosen": self.chosen, "variants": [v.as_dict() for v in self.verdicts],
            "outputs": [{"name": o.role, "shape": list(o.shape), "dtype": o.dtype,
                         "produced": None if self.produced is None else o.role in self.produced} for o in self.outputs],
            "values": {k: list(v) if isinstance(v, tuple) else v for k, v in self.values.items()},
            "refused": self.refused, "tuned": self.tuned, "forced": self.forced,
        }  # fmt: skip


#: (dtypes, input shapes, absent optional inputs, attributes off their defaults): tuning.entry_key's terms
TuningClass = tuple[dict[str, str], dict[str, tuple[int, ...]], tuple[str, ...], dict[str, Any]]
#: What Kernel._resolve gives for (signature, forced variant, device info): ((the chosen variant, the
#: outputs' specs), its resolved passes, its scope). Handed on so that a plan does not resolve again.
Resolution = tuple[Any, Any, Any]


class Kernel:
    """A kernel package ready to run. Call it: ``kernel({"X": x}, attrs={...}) -> {"Y": y}``."""

    def __init__(self, package: KernelPackage, manifest: Manifest | None = None) -> None:
        self.package = package
        manifest_file = str(package.root / MANIFEST_FILE)
        self.manifest = manifest or parse_manifest(package.read_json(MANIFEST_FILE), file=manifest_file)
        self.program = compile_program(self.manifest, file=manifest_file)
        self.renderer = TemplateRenderer(package.read_text)
        self._plans: OrderedDict[Any, ExecutionPlan] = OrderedDict()
        self._fast_plans: dict[Any, ExecutionPlan] = {}
        self._evaluated: OrderedDict[tuple[str, str], Expression] = OrderedDict()
        self._lock = threading.Lock()

    @property
    def op_id(self) -> str:
        return self.manifest.op_id

    @property
    def variants(self) -> list[str]:
        return [v.id for v in self.manifest.variants]

    @functools.cached_property
    def _variant_ids(self) -> frozenset[str]:
        return frozenset(self.variants)

    @property
    def contract_version(self) -> int:
        """The package's contract version: metadata.json's ``version`` (what a Hub revision vN
        must hold), else the manifest's ``sinceVersion``."""
        return (self.package.metadata or {}).get("version", self.manifest.since_version)

    @functools.cached_property
    def tuning_key(self) -> str:
        """The op id and a digest of the manifest and every file a template could read: autotuning
        results belong to this package's code (tuning.package_key)."""
        return tuning.package_key(self.package, self.op_id)

    def __repr__(self) -> str:
        return f"Kernel({self.op_id!r}, variants={self.variants}, origin={self.package.origin!r})"

    # A kernel is its package, loaded and compiled once, and its caches: copies share it, as
    # get_kernel shares one per op id, so a structure holding one (a model, a dataclass through
    # dataclasses.asdict) copies. deepcopy had failed deep in the templates with "Template.__new__()
    # missing 1 required positional argument: 'source'".
    def __copy__(self) -> Kernel:
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> Kernel:
        return self

    def __reduce__(self) -> Any:
        """A kernel pickles as where it came from, so a worker process opens it again there: an
        embedded one as its op id, a Hub one as its repository and commit, a folder's as its path
        and its files' digest, which the worker's copy must match (api.reopen_kernel)."""
        from . import api

        if self.package.origin == "embedded":
            return api.get_kernel, (self.op_id,)
        return api.reopen_kernel, (api.kernel_reference(self.package), self.tuning_key)

    # --- calls ------------------------------------------------------------------------------

    # The output kind decides the outputs' type, so that typed code can index a NumPy result or
    # release a GpuTensor without a cast (the union alone made the docs' own examples mypy errors).
    @overload
    def __call__(self, inputs: Mapping[str, Any], *, attrs: Mapping[str, Any] | None = None,
                 variant: str | None = None, tunables: Mapping[str, Any] | None = None,
                 output: Literal["numpy"] = "numpy", adapter: str | None = None) -> dict[str, np.ndarray]: ...  # fmt: skip

    @overload
    def __call__(self, inputs: Mapping[str, Any], *, attrs: Mapping[str, Any] | None = None,
                 variant: str | None = None, tunables: Mapping[str, Any] | None = None,
                 output: Literal["gpu"], adapter: str | None = None) -> dict[str, GpuTensor]: ...  # fmt: skip

    @overload
    def __call__(self, inputs: Mapping[str, Any], *, attrs: Mapping[str, Any] | None = None,
                 variant: str | None = None, tunables: Mapping[str, Any] | None = None,
                 output: str, adapter: str | None = None) -> dict[str, np.ndarray | GpuTensor]: ...  # fmt: skip

    def __call__(
        self,
        inputs: Mapping[str, Any],
        *,
        attrs: Mapping[str, Any] | None = None,
        variant: str | None = None,
        tunables: Mapping[str, Any] | None = None,
        output: str = "numpy",
        adapter: str | None = None,
    ) -> dict[str, np.ndarray] | dict[str, GpuTensor] | dict[str, np.ndarray | GpuTensor]:
        """Run the kernel. Inputs are NumPy arrays, GpuTensors, or lists and numbers (made arrays by
        NumPy's rules: Python floats become float64, which a float32 kernel refuses, so give
        ``np.asarray(values, np.float32)``); returns outputs by name.

        ``attrs`` and ``tunables`` override the manifest's defaults (stored tuning results apply
        when ``tunables`` is None or empty); ``variant`` forces one variant if its ``when`` holds;
        ``adapter`` picks the device (a backend or part of its name). ``output="gpu"`` returns
        GpuTensors that stay on the device (feed them to the next call).
        """
        device = get_device(adapter)
        # The hot path: a call whose names, shapes, dtypes and options were seen before finds its
        # plan by one dict lookup, with no contract check or expression evaluation (the first call
        # with that key did both).
        try:
            key = (variant, output, _frozen(attrs), _frozen(tunables), device.serial, tuning.generation,
                   *[(name, value.shape, value.dtype) for name, value in inputs.items()])  # fmt: skip
            plan = self._fast_plans.get(key)
        except (TypeError, AttributeError, ValueError):  # ValueError: a released memoryview's shape
            key, plan = None, None
        if key is not None and not all(type(v) is np.ndarray or type(v) is GpuTensor for v in inputs.values()):
            # An array-like's own .shape and .dtype need not describe what NumPy reads from it: it
            # takes the checked path, and a plan made from its data is never filed under its key.
            key, plan = None, None
        if plan is not None:
            return run_plan(device, plan, _prepare_inputs(inputs, device, host_ready=True), to_numpy=output == "numpy")
        if output not in _OUTPUT_KINDS:
            raise InputError("output", f"one of {list(_OUTPUT_KINDS)}", repr(output))
        present = _declared_present(self.manifest, inputs)
        if present is not inputs:  # an optional input given as None: the call that leaves it out
            return self(present, attrs=attrs, variant=variant, tunables=tunables, output=output, adapter=adapter)
        # Contract and device limits first, host copies after: a wrong or oversized input must
        # not cost a copy (a broadcast view of 2**33 elements would allocate tens of GB).
        arrays = _prepare_inputs(inputs, device, host_ready=False)
        metas = {k: (v.shape, v.dtype.name) for k, v in arrays.items()}
        signature = check_call(self.manifest, metas, attrs, tunables, gpu_inputs=_on_gpu(arrays), names_checked=True)
        if variant is None and not tunables:  # {} is no override too (the fast-path key says the same)
            plan = self._tuned_plan(metas, attrs, signature, device)
        if plan is None:
            plan = self._plan(signature, variant, device)
        if key is not None and _by_value(attrs) and _by_value(tunables):
            with self._lock:
                self._fast_plans[key] = plan
                if len(self._fast_plans) > PLAN_CACHE_SIZE:
                    self._fast_plans.pop(next(iter(self._fast_plans)))
        arrays = {k: host_array(v) if isinstance(v, np.ndarray) else v for k, v in arrays.items()}
        return run_plan(device, plan, arrays, to_numpy=output == "numpy")

    def flush(self, *, adapter: str | None = None) -> None:
        """Submit the work recorded on ``adapter``'s device (the default one unless given, as for a
        call) now; like :func:`webgpu_kernels.synchronize` it does not wait for the GPU to finish."""
        flush(get_device(adapter))

    def explain(
        self,
        inputs: Mapping[str, Any],
        *,
        attrs: Mapping[str, Any] | None = None,
        variant: str | None = None,
        tunables: Mapping[str, Any] | None = None,
        adapter: str | None = None,
    ) -> Explanation:
        """Judge every variant for these inputs (arrays, GpuTensors, ``TensorMeta`` or ``(shape, dtype)``
        tuples) and say why.

        The chosen variant's passes are resolved and checked against the device's limits, as a call
        would: ``refused`` says why the call would still fail, for example a binding over the
        device's maxStorageBufferBindingSize. With ``variant``, the chosen one is that variant if
        its ``when`` holds, as in a call that forces it; if not, ``chosen`` is None and ``refused``
        the message of the call's VariantRejectedError. An unknown variant id raises, as in a call."""
        self._check_variant_arg(variant)
        device, metas, signature = self._checked(inputs, attrs, tunables, adapter)
        scope, outputs, selection = self._select(signature, device.info, exhaustive=True)
        # A forced variant, like tunables, is a call that no stored tuning result applies to.
        stored = None if tunables or variant is not None else self._tuned_choice(metas, attrs, signature, device,
                                                                                 check=True)  # fmt: skip
        names = [n for n, _ in self.program.derive] + [n for n, _ in self.program.constants]
        values = {n: scope[n] for n in names if not hasattr(scope[n], "_undefined_hint")}
        chosen, refused, resolved = None, None, None
        if variant is not None:
            chosen = variant if next(v for v in selection.trace if v.variant == variant).accepted else None
            try:  # the call's own path (_plan's), so that explain says what the call raises: its
                # VariantRejectedError, or the device limit the variant breaks
                _, resolved, _ = self._resolve(signature, variant, device.info)
                self._check_device(signature, variant, outputs, resolved, device)
            except KernelError as exc:
                refused = str(exc)
        elif selection.chosen is not None:
            chosen = selection.chosen.variant.id
            chosen_scope = cast(dict[str, Any], selection.scope)  # set together with chosen
            try:  # what the call would check after choosing
                check_input_sizes(device.info, tensor_bytes(self.manifest, signature, ()))
                with self._located():
                    resolved = resolve_variant(selection.chosen, chosen_scope)
                self._check_device(signature, chosen, outputs, resolved, device)
            except KernelError as exc:
                refused = str(exc)
        else:  # float16 on an adapter without shader-f16: the call's DeviceLimitError, which a
            try:  # `when` clause reading f16Ok through a derive (QuickGelu's baseOk) never shows
                self._explain_missing_f16(signature, device.info)
            except DeviceLimitError as exc:
                refused = str(exc)
        tuned = None if stored is None else {"variant": stored[1], "tunables": stored[0].tunable_map()}
        # the outputs it binds (bound_roles holds the inputs too: "produced" had named X and bias)
        produced = None if chosen is None or resolved is None else produced_outputs(resolved, outputs)
        return Explanation(self.op_id, chosen, selection.trace, outputs, values, refused, tuned, forced=variant,
                           produced=produced)  # fmt: skip

    def evaluate(
        self,
        expression: str | float | bool,
        inputs: Mapping[str, Any],
        *,
        attrs: Mapping[str, Any] | None = None,
        tunables: Mapping[str, Any] | None = None,
        adapter: str | None = None,
        where: str = "evaluate",  # the error's place: "expression: expression ..." had repeated itself
    ) -> Any:
        """The value of ``expression`` (the manifest's expression language, docs/format.md) in the
        scope a call with these inputs sees at the top level: the namespaces, the outputs' shapes,
        ``derive`` and the top-level constants; a variant's own constants are not in it. Inputs are
        described as for :meth:`explain`. Tools use it for bench.json's ``flops``; authors, to
        see what their expressions give.

        As in a manifest, a string is an expression and a number or boolean a literal value, given
        back as it is (within the bounds a manifest's literal is held to); anything else is refused."""
        # The manifest's "expression or literal" (manifest.schema.json's `value`): what JSON reads as a
        # number or boolean. A list, None or a NumPy scalar had come back unchanged, as if evaluated.
        if not (isinstance(expression, str) or type(expression) in (int, float, bool)):
            raise InputError("expression", "an expression string, or a number or boolean (a literal value, as in "
                             "a manifest)", f"{type(expression).__name__} {shorten(repr(expression), 60)}")  # fmt: skip
        device, _, signature = self._checked(inputs, attrs, tunables, adapter)
        compiled = self._compiled(expression, where)  # cached by source: cheap when repeated
        scope, _ = self.program.call_scope(signature, device.info)
        return compiled.evaluate(scope)

    def _compiled(self, expression: Any, where: str) -> Expression:
        # Not in the package's compiler: it refuses a 2049th distinct expression (a sandbox
        # bound), so a tool's ad-hoc expressions would fill it and every later evaluate fail.
        if not isinstance(expression, str):
            return ExpressionCompiler(()).compile(expression, where)  # a literal
        key = (expression, where)
        with self._lock:
            compiled = self._evaluated.get(key)
            if compiled is not None:
                self._evaluated.move_to_end(key)
                return compiled
        compiled = ExpressionCompiler(self.program.compiler.known_names).compile(expression, where)
        with self._lock:
            self._evaluated[key] = compiled
            if len(self._evaluated) > EVALUATED_CACHE_SIZE:
                self._evaluated.popitem(last=False)
        return compiled

    def render(
        self,
        inputs: Mapping[str, Any],
        *,
        attrs: Mapping[str, Any] | None = None,
        variant: str | None = None,
        tunables: Mapping[str, Any] | None = None,
        adapter: str | None = None,
    ) -> dict[str, str]:
        """The WGSL of each pass (by pass id) of the variant a call with these inputs would run (a
        stored tuning result included, when neither ``variant`` nor ``tunables`` is given)."""
        self._check_variant_arg(variant)
        device, metas, signature = self._checked(inputs, attrs, tunables, adapter)
        resolution = None
        if variant is None and not tunables and (stored := self._tuned_choice(metas, attrs, signature, device, check=True)):
            signature, variant, resolution = stored  # resolved there (``check``)
        if resolution is None:
            resolution = self._resolve(signature, variant, device.info)
        _, resolved, scope = resolution
        return dict(zip((r.pass_id for r in resolved), self.renderer.render_passes(resolved, scope), strict=True))

    def work_key(
        self,
        inputs: Mapping[str, Any],
        *,
        attrs: Mapping[str, Any] | None = None,
        variant: str | None = None,
        tunables: Mapping[str, Any] | None = None,
        adapter: str | None = None,
    ) -> tuple[Any, ...]:
        """What the GPU is given for this call, pass by pass: the WGSL, the threads and workgroup
        size, the uniform bytes. Calls with equal keys do the same work: the tuner times one (a
        tunable the chosen variant never reads changes nothing). No pipeline is built."""
        self._check_variant_arg(variant)
        device, _, signature = self._checked(inputs, attrs, tunables, adapter)
        (chosen, _), resolved, scope = self._resolve(signature, variant, device.info)
        wgsl = self.renderer.render_passes(resolved, scope)
        return (chosen.variant.id, *((text, r.threads, r.workgroup_size, tuple(b.uniform_bytes for b in r.bindings))
                                     for r, text in zip(resolved, wgsl, strict=True)))  # fmt: skip

    def plan(
        self,
        inputs: Mapping[str, Any],
        *,
        attrs: Mapping[str, Any] | None = None,
        variant: str | None = None,
        tunables: Mapping[str, Any] | None = None,
        adapter: str | None = None,
        tuned: bool = False,
    ) -> tuple[Device, ExecutionPlan]:
        """The device and the cached execution plan of the manifest's own selection for these inputs
        (``variant``/``tunables`` as given). Stored autotuning results apply only with ``tuned=True``
        (what a call would run), so that ``bench`` can time the default against the tuned choice."""
        device, metas, signature = self._checked(inputs, attrs, tunables, adapter)
        if tuned and variant is None and not tunables:
            plan = self._tuned_plan(metas, attrs, signature, device)
            if plan is not None:
                return device, plan
        return device, self._plan(signature, variant, device)

    # --- plans ------------------------------------------------------------------------------

    def _checked(self, inputs: Mapping[str, Any], attrs: Mapping[str, Any] | None, tunables: Mapping[str, Any] | None,
                 adapter: str | None) -> tuple[Device, dict[str, Any], CallSignature]:  # fmt: skip
        """The device, the inputs' (shape, dtype) and the contract-checked signature of a call
        described by shapes/dtypes (an optional input given as None left out, as a call leaves it)."""
        present = _declared_present(self.manifest, inputs)
        metas = describe_inputs(present)
        return get_device(adapter), metas, check_call(self.manifest, metas, attrs, tunables, gpu_inputs=_on_gpu(present),
                                                      names_checked=True)  # fmt: skip

    def _check_variant_arg(self, forced: Any) -> None:
        """Refuse a ``variant=`` that is no variant id (SelectionError, as selection words it), before
        anything is evaluated: explain must raise it, not report it as the call's failure."""
        if forced is None:
            return
        if not isinstance(forced, str):
            raise InputError("variant", f"a variant id, one of {self.variants}", f"{type(forced).__name__} {forced!r}")
        if forced not in self._variant_ids:
            raise SelectionError(f"no variant {forced!r}; the variants are {', '.join(self.variants)}")

    def _resolve(self, signature: CallSignature, forced: str | None, info: DeviceInfo) -> Resolution:
        """The chosen variant, its resolved passes and scope; ``forced`` was checked by the caller."""
        check_input_sizes(info, tensor_bytes(self.manifest, signature, ()))  # before expressions overflow on it
        try:  # a forced variant is refused inside _select, any other call by require_choice
            _, outputs, selection = self._select(signature, info, forced=forced)
            chosen = require_choice(selection, self.op_id)
        except SelectionError:
            self._explain_missing_f16(signature, info, forced)
            raise
        chosen_scope = cast(dict[str, Any], selection.scope)  # set together with chosen
        with self._located():
            return (chosen, outputs), resolve_variant(chosen, chosen_scope), chosen_scope

    def _select(self, signature: CallSignature, info: DeviceInfo, *, forced: str | None = None,
                exhaustive: bool = False) -> tuple[dict[str, Any], tuple[OutputSpec, ...], Selection]:  # fmt: skip
        """The call's scope, its outputs' specs and the variant selection (every variant judged with
        ``exhaustive``, for explain)."""
        with self._located():
            scope, outputs = self.program.call_scope(signature, info)
            selection = select_variant(self.program.variants, scope, forced=forced, exhaustive=exhaustive,
                                       definitions=self.program.definitions)  # fmt: skip
        return scope, outputs, selection

    @contextmanager
    def _located(self) -> Iterator[None]:
        """An expression that fails for a call names its place in the manifest (``where``); the
        note says which manifest, as a ManifestError's file does."""
        try:
            yield
        except ExpressionError as exc:
            exc.add_note(f"in {self.package.path_of(MANIFEST_FILE)}")
            raise

    def _explain_missing_f16(self, signature: CallSignature, info: DeviceInfo, forced: str | None = None) -> None:
        """A float16 call no variant accepts (or the ``forced`` one refuses) is the adapter's
        DeviceLimitError where that variant would accept it with shader-f16; else the
        SelectionError stands (a bad attribute, say)."""
        if info.has_f16 or all(dtype != "float16" for _, dtype in signature.dtypes):
            return
        try:
            _, _, with_f16 = self._select(signature, replace(info, features=info.features | {"shader-f16"}),
                                          forced=forced)  # fmt: skip
        except KernelError:  # the call fails with shader-f16 too: its own error stands
            return
        if with_f16.chosen is not None:
            for type_var, dtype in signature.dtypes:
                if dtype == "float16":  # the argument of that type: an input, else an output (a one-type constraint)
                    arg = next((s.role for s in (*self.manifest.inputs, *self.manifest.outputs) if s.dtype == type_var),
                               f"dtypes.{type_var}")  # fmt: skip
                    raise DeviceLimitError(arg, "float32 (this adapter has no shader-f16 feature)", "float16")

    def _check_device(self, signature: CallSignature, variant_id: str, outputs: tuple[OutputSpec, ...],
                      resolved: Any, device: Device) -> None:  # fmt: skip
        """Refuse, before anything is built, a binding with no tensor or one the device cannot hold."""
        sizes = tensor_bytes(self.manifest, signature, outputs)
        variant = cast(CompiledVariant, self.program.variant(variant_id))
        for r, compiled in zip(resolved, variant.passes, strict=True):
            check_bound(r, sizes, variant_id)
            check_limits(device, r, sizes, self.program.arguments_read(compiled.workgroup_size, variant))

    def tuning_class(self, inputs: Mapping[str, Any], attrs: Mapping[str, Any] | None = None) -> TuningClass:
        """What a stored tuning result for these inputs is keyed by (after the kernel's tuning_key):
        the type variables' dtypes, the inputs' shapes (tuning.shape_class buckets them), the
        optional inputs left out and the attributes set to other than their defaults."""
        metas = describe_inputs(_declared_present(self.manifest, inputs))
        return self._tuning_class(check_call(self.manifest, metas, attrs, None, names_checked=True))

    @functools.cached_property
    def _canonical_defaults(self) -> dict[str, Any]:
        """The attributes' defaults as the tuning key writes them (each new shape compared against them)."""
        return {k: tuning.canonical_attr(v) for k, v in self.manifest.attributes.items()}

    def _tuning_class(self, signature: CallSignature) -> TuningClass:
        shapes = signature.shape_map()  # checked: Python ints, whatever the caller's shapes held
        absent = tuple(spec.role for spec in self.manifest.inputs if spec.optional and spec.role not in shapes)
        defaults = self._canonical_defaults
        changed = {k: value for k, v in signature.attr_map().items()  # as the key writes them: 1.702 in float32 is 1.702
                   if (value := tuning.canonical_attr(v)) != defaults[k]}
        return signature.type_bindings(), shapes, absent, changed

    def _tuned_choice(self, metas: Mapping[str, Any], attrs: Mapping[str, Any] | None, signature: CallSignature,
                      device: Device, *, check: bool = False) -> tuple[CallSignature, str, Resolution | None] | None:  # fmt: skip
        """The signature (with its tunables) and variant `webgpu-kernels tune` found fastest for
        this call, if one is stored and its tunables fit the contract; with ``check``, only if its
        variant's `when` also holds for the call (a call finds that out by building the plan); and
        its resolution for the call where it was resolved here (with ``check`` or optional outputs)."""
        if tuning.disabled():  # before the file is read: a damaged one no call uses is not warned of
            return None
        cache = tuning.cache_for(device.adapter.name, device.adapter.backend)
        choice = cache.lookup(self.tuning_key, *self._tuning_class(signature))
        if choice is None:
            return None
        optional_outputs = any(spec.optional for spec in self.manifest.outputs)
        resolution = None
        try:
            tuned = check_call(self.manifest, metas, attrs, choice.tunables, names_checked=True)  # the call's names
            if check or optional_outputs:  # its `when` (without ``check``, building the plan checks it)
                resolution = self._resolve(tuned, choice.variant, device.info)
                if check:  # as a call would build it: `when`, then the device's limits
                    (chosen, outputs), resolved, _ = resolution
                    self._check_device(tuned, chosen.variant.id, outputs, resolved, device)
                if optional_outputs and not self._keeps_outputs(signature, resolution, device):
                    return None  # the call's result would lack an output its own selection returns
        except KernelError:
            return None  # stale or foreign entry: the default selection still applies
        return tuned, choice.variant, resolution

    def _keeps_outputs(self, signature: CallSignature, tuned: Resolution, device: Device) -> bool:
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
            (_, outputs), resolved, _ = self._resolve(signature, None, device.info)
        except KernelError:  # the manifest's selection cannot run the call: nothing to keep the same
            return True
        return produced_outputs(resolved, outputs) <= kept

    def _tuned_plan(self, metas: Mapping[str, Any], attrs: Mapping[str, Any] | None, signature: CallSignature,
                    device: Device) -> ExecutionPlan | None:  # fmt: skip
        """The plan of the stored tuning result for this call, if one applies (:meth:`_tuned_choice`)."""
        choice = self._tuned_choice(metas, attrs, signature, device)
        if choice is None:
            return None
        try:
            return self._plan(*choice[:2], device, resolution=choice[2])
        except KernelError:
            return None  # stale, foreign or refused by the device: the default selection still applies

    def _plan(self, signature: CallSignature, forced: str | None, device: Device, *,
              resolution: Resolution | None = None) -> ExecutionPlan:  # fmt: skip
        """The call's plan (cached); ``resolution``: ``_resolve``'s for these arguments, if the caller has it."""
        self._check_variant_arg(forced)  # before the key: a list is unhashable
        key = (signature, forced, device.serial)
        with self._lock:
            plan = self._plans.get(key)
            if plan is not None:
                self._plans.move_to_end(key)
                return plan
        if resolution is None:
            resolution = self._resolve(signature, forced, device.info)
        (chosen, outputs), resolved, scope = resolution
        variant_id = chosen.variant.id
        self._check_device(signature, variant_id, outputs, resolved, device)
        wgsl = self.renderer.render_passes(resolved, scope)
        passes = tuple(build_pass(device, r, text, kernel=self.op_id, variant=variant_id,
                                  blame=workgroup_memory_blame(self.program, chosen, cpass, self.renderer, text))
                       for r, text, cpass in zip(resolved, wgsl, chosen.passes, strict=True))  # fmt: skip
        # An optional output the chosen variant binds nowhere is not returned: its buffer would hold
        # a pooled buffer's old bytes. (Every other output is bound as storage: a load-time check.)
        bound = bound_roles(resolved)
        outputs = tuple(o for o in outputs if o.role in bound)
        plan = ExecutionPlan(variant=variant_id, passes=passes, outputs=outputs, tunables=signature.tunable_map())
        with self._lock:
            self._plans[key] = plan
            if len(self._plans) > PLAN_CACHE_SIZE:
                self._plans.popitem(last=False)
        return plan


def _frozen(options: Mapping[str, Any] | None) -> Any:
    # The value's type is part of the key: True == 1 must not share a plan with a checked True;
    # and so is a zero's sign: -0.0 == 0.0 must not either (CallSignature.negative_zeros). Only a
    # float zero or a tuple is looked into: a call with attributes pays no function call for it.
    # A tuple's items' types too: (1, 2) == (1.0, 2.0) == (True, 2), which render differently
    # or are refused (CallSignature.value_types).
    # A list (JSON's arrays: what a list attribute's default is) is keyed as its tuple of items.
    return None if not options else tuple(
        (k, v.__class__, v, (v == 0.0 and has_negative_zero(v)) if isinstance(v, _FLOATS) else
         v.__class__ is tuple and _tuple_terms(v)) if v.__class__ is not list else
        (k, list, tuple(v), _tuple_terms(v))
        for k, v in options.items()
    )  # fmt: skip


_FLOATS = (float, np.floating)
# Values a fast-plan key holds by value. Another hashable (a torch tensor hashes by identity) could
# change in place after its plan was stored, so a call with one always takes the checked path.
_SCALAR_TYPES = (bool, int, float, str, np.generic)


def _by_value(options: Mapping[str, Any] | None) -> bool:
    return not options or all(
        isinstance(v, _SCALAR_TYPES) or isinstance(v, (tuple, list)) and all(isinstance(i, _SCALAR_TYPES) for i in v)
        for v in options.values()
    )  # fmt: skip


def _tuple_terms(value: Sequence[Any]) -> tuple[bool, tuple[type, ...]]:
    return has_negative_zero(value), tuple(map(type, value))


def _on_gpu(inputs: Mapping[str, Any]) -> list[str]:
    """The names of the inputs given as GpuTensors (a dtype's conversion hint differs for them)."""
    return [name for name, value in inputs.items() if isinstance(value, GpuTensor)]


class _Present(dict[str, Any]):
    """Inputs :func:`_declared_present` checked and left the optional Nones out of: the call that
    re-enters with them does not check their names again."""


def _declared_present(manifest: Manifest, inputs: Any) -> Any:
    """``inputs`` checked to be a mapping of declared input names, before any value is read (an
    unknown name given None had been refused as a value that is no array), less the optional
    inputs given as None (:func:`_without_absent`)."""
    if type(inputs) is _Present:
        return inputs
    check_input_names(manifest, checked_mapping(inputs))
    return _without_absent(manifest, inputs)


def _without_absent(manifest: Manifest, inputs: Any) -> Any:
    """``inputs`` less the optional inputs given as None (ONNX's and PyTorch's way of leaving one
    out), or ``inputs`` itself where there are none: a required input given as None stays, for the
    call to refuse by name."""
    if not isinstance(inputs, Mapping) or not any(v is None for v in inputs.values()):
        return inputs
    optional = {spec.role for spec in manifest.inputs if spec.optional}
    present = _Present((name, value) for name, value in inputs.items() if value is not None or name not in optional)
    return present if len(present) < len(inputs) else inputs


def _prepare_inputs(inputs: Mapping[str, Any], device: Device, *, host_ready: bool) -> dict[str, np.ndarray | GpuTensor]:
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
                raise foreign_tensor_error(name, value.device.adapter, device.adapter)
            prepared[name] = value
            continue
        if type(value) is not np.ndarray:  # plain arrays (the per-call path) skip as_array's checks
            value = as_array(name, value)
        prepared[name] = host_array(value) if host_ready else value
    return prepared
