"""The kernel object: a loaded package you call with a dict of inputs.

It strings the stages together (contract -> program scope -> selection -> rendering ->
execution) and caches, per call signature, the finished plan: the variant, the pipelines, the
uniform buffers and the grid. A call whose signature was seen before evaluates no expression.
Beside it: the call's arguments made ready (call_arguments.py), the stored tuning result a call
runs instead (tuned_choice.py) and what explain returns (explanation.py).
"""

from __future__ import annotations

import functools
import threading
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import replace
from typing import Any, Literal, cast, overload

import numpy as np

from . import tuning
from .call_arguments import (
    asked_outputs,
    declared_present,
    frozen_options,
    gpu_input_names,
    in_manifest_order,
    keyed_by_value,
    prepare_inputs,
)
from .call_inputs import describe_inputs
from .contract import CallSignature, check_call
from .device import Device, get_device
from .errors import (
    DeviceLimitError,
    ExpressionError,
    InputError,
    KernelError,
    SelectionError,
    describe_value,
    no_variant,
    shorten,
    type_name,
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
from .explanation import Explanation, contract_doc
from .expressions import Expression, ExpressionCompiler
from .manifest import Manifest, parse_manifest
from .package import MANIFEST_FILE, KernelPackage
from .program import CompiledVariant, DeviceInfo, OutputSpec, compile_program, tensor_bytes
from .rendering import (
    TemplateRenderer,
    bound_roles,
    produced_outputs,
    resolve_scratch,
    resolve_variant,
    workgroup_memory_blame,
)
from .selection import Selection, require_choice, select_variant
from .tensor import GpuTensor
from .tuned_choice import Resolution, TuningClass, stored_entry, tuned_choice, tuned_plan, tuning_class_of

#: Plans hold their pipelines (about 300 KiB each on lavapipe), so this bounds pipeline memory too.
PLAN_CACHE_SIZE = 128
#: Expressions given to :meth:`Kernel.evaluate` kept compiled, per kernel.
EVALUATED_CACHE_SIZE = 256
_OUTPUT_KINDS = ("numpy", "gpu")


class _KernelDoc:
    """``Kernel.__doc__``: the class's docstring on the class, and on a kernel its op's contract, so
    that ``help(kernel)`` says what to pass (it had listed the class's methods, not the inputs,
    their dtypes or the attributes). Built when read: loading and calls pay nothing for it."""

    def __init__(self, doc: str) -> None:
        self.doc = doc

    def __get__(self, kernel: Kernel | None, owner: type | None = None) -> str:
        return self.doc if kernel is None else contract_doc(kernel)


class Kernel:
    __doc__ = _KernelDoc(  # a str on the class, the contract on a kernel
        """A kernel package ready to run. Call it: ``kernel({"X": x}, attrs={...}) -> {"Y": y}``.""")

    def __init__(self, package: KernelPackage, manifest: Manifest | None = None) -> None:
        self.package = package
        manifest_file = str(package.root / MANIFEST_FILE)
        self.manifest = manifest or parse_manifest(package.read_json(MANIFEST_FILE), file=manifest_file)
        package.check_id(self.manifest.op_id)  # the digests all matched, but metadata.json may name another op
        self.program = compile_program(self.manifest, file=manifest_file)
        # verified: the files it may read; the shaders: what a missing template's did-you-mean weighs
        self.renderer = TemplateRenderer(package.read_text, package.verified, self.manifest.shaders())
        self._plans: OrderedDict[Any, ExecutionPlan] = OrderedDict()
        self._fast_plans: dict[Any, ExecutionPlan] = {}
        self._evaluated: OrderedDict[tuple[str, str], Expression] = OrderedDict()
        self._lock = threading.Lock()

    @property
    def op_id(self) -> str:
        """The op's id, ``domain.Name`` (``com.microsoft.QuickGelu``): the manifest's domain and name."""
        return self.manifest.op_id

    @property
    def variants(self) -> list[str]:
        """The ids of the manifest's variants, in its order (what ``variant=`` may name)."""
        return [v.id for v in self.manifest.variants]

    @functools.cached_property
    def _output_roles(self) -> frozenset[str]:
        return frozenset(spec.role for spec in self.manifest.outputs)

    @functools.cached_property
    def _optional_outputs(self) -> tuple[str, ...]:
        return tuple(spec.role for spec in self.manifest.outputs if spec.optional)

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

    @functools.cached_property
    def _canonical_defaults(self) -> dict[str, Any]:
        """The attributes' defaults as the tuning key writes them (each new shape compared against them)."""
        return {k: tuning.canonical_attr(v) for k, v in self.manifest.attributes.items()}

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
        embedded one as its op id, a Hub one as its repository and commit, a folder's as its path,
        each with its files' digest, which the worker's copy must match (api.reopen_kernel)."""
        from . import api

        return api.reopen_kernel, (api.kernel_reference(self.package), self.tuning_key)

    # --- calls ------------------------------------------------------------------------------

    # The output kind decides the outputs' type, so that typed code can index a NumPy result or
    # release a GpuTensor without a cast (the union alone made the docs' own examples mypy errors).
    @overload
    def __call__(self, inputs: Mapping[str, Any], *, attrs: Mapping[str, Any] | None = None,
                 variant: str | None = None, tunables: Mapping[str, Any] | None = None,
                 output: Literal["numpy"] = "numpy", adapter: str | None = None, outputs: Iterable[str] | None = None) -> dict[str, np.ndarray]: ...  # fmt: skip

    @overload
    def __call__(self, inputs: Mapping[str, Any], *, attrs: Mapping[str, Any] | None = None,
                 variant: str | None = None, tunables: Mapping[str, Any] | None = None,
                 output: Literal["gpu"], adapter: str | None = None, outputs: Iterable[str] | None = None) -> dict[str, GpuTensor]: ...  # fmt: skip

    @overload
    def __call__(self, inputs: Mapping[str, Any], *, attrs: Mapping[str, Any] | None = None,
                 variant: str | None = None, tunables: Mapping[str, Any] | None = None,
                 output: str, adapter: str | None = None, outputs: Iterable[str] | None = None) -> dict[str, np.ndarray | GpuTensor]: ...  # fmt: skip

    def __call__(
        self,
        inputs: Mapping[str, Any],
        *,
        attrs: Mapping[str, Any] | None = None,
        variant: str | None = None,
        tunables: Mapping[str, Any] | None = None,
        output: str = "numpy",
        adapter: str | None = None,
        outputs: Iterable[str] | None = None,
    ) -> dict[str, np.ndarray] | dict[str, GpuTensor] | dict[str, np.ndarray | GpuTensor]:
        """Run the kernel. Inputs are NumPy arrays, GpuTensors, or lists and numbers (made arrays by
        NumPy's rules: Python floats become float64, which a float32 kernel refuses, so give
        ``np.asarray(values, np.float32)``); returns outputs by name.

        ``attrs`` and ``tunables`` override the manifest's defaults (stored tuning results apply
        when ``tunables`` is None or empty); ``variant`` forces one variant if its ``when`` holds;
        ``adapter`` picks the device (a backend or part of its name). ``output="gpu"`` returns
        GpuTensors that stay on the device (feed them to the next call). ``outputs`` names the
        outputs wanted (None: every output the chosen variant writes): the result holds those, a
        variant that writes no optional output left unasked is preferred, and what is computed
        unasked is dropped unread.
        """
        # checked before the fast path, whose key holds it (None tested here: no call on the hot path)
        asked = None if outputs is None else asked_outputs(self.manifest, outputs, self._output_roles)
        device = get_device(adapter)
        # The hot path: a call whose names, shapes, dtypes and options were seen before finds its
        # plan by one dict lookup, with no contract check or expression evaluation (the first call
        # with that key did both).
        try:
            key = (variant, output, asked, frozen_options(attrs), frozen_options(tunables), device.serial, tuning.generation,
                   *[(name, value.shape, value.dtype) for name, value in inputs.items()])  # fmt: skip
            plan = self._fast_plans.get(key)
        except (TypeError, AttributeError, ValueError):  # ValueError: a released memoryview's shape
            key, plan = None, None
        if key is not None and not all(type(v) is np.ndarray or type(v) is GpuTensor for v in inputs.values()):
            # An array-like's own .shape and .dtype need not describe what NumPy reads from it: it
            # takes the checked path, and a plan made from its data is never filed under its key.
            key, plan = None, None
        if plan is not None:
            return run_plan(device, plan, prepare_inputs(inputs, device, host_ready=True), to_numpy=output == "numpy")
        if output not in _OUTPUT_KINDS:
            raise InputError("output", f"one of {list(_OUTPUT_KINDS)}", repr(output))
        present = declared_present(self.manifest, inputs)
        if present is not inputs:  # an optional input given as None: the call that leaves it out
            return self(present, attrs=attrs, variant=variant, tunables=tunables, output=output, adapter=adapter,
                        outputs=asked)  # fmt: skip
        # Contract and device limits first, host copies after: a wrong or oversized input must
        # not cost a copy (a broadcast view of 2**33 elements would allocate tens of GB).
        arrays = prepare_inputs(inputs, device, host_ready=False)
        metas = {k: (v.shape, v.dtype.name) for k, v in arrays.items()}
        signature = check_call(self.manifest, metas, attrs, tunables, gpu_inputs=gpu_input_names(arrays),
                               names_checked=True)  # fmt: skip
        if variant is None and not tunables:  # {} is no override too (the fast-path key says the same)
            plan = tuned_plan(self, metas, attrs, signature, device, asked=asked)
        if plan is None:
            plan = self._plan(signature, variant, device, asked=asked)
        if key is not None and keyed_by_value(attrs) and keyed_by_value(tunables):
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
        outputs: Iterable[str] | None = None,
    ) -> Explanation:
        """Judge every variant for these inputs (arrays, GpuTensors, ``TensorMeta`` or ``(shape, dtype)``
        tuples) and say why.

        The chosen variant's passes are resolved, checked against the device's limits and rendered,
        as a call would: ``refused`` says why the call would still fail, for example a binding over
        the device's maxStorageBufferBindingSize or a template's TemplateError. With ``variant``, the chosen one is that variant if
        its ``when`` holds, as in a call that forces it; if not, ``chosen`` is None and ``refused``
        the message of the call's VariantRejectedError. An unknown variant id raises, as in a call.
        With ``outputs``, the call that asks for those outputs is explained (``asked``)."""
        asked = asked_outputs(self.manifest, outputs)
        self._check_variant_arg(variant)
        device, metas, signature = self._checked(inputs, attrs, tunables, adapter)
        scope, specs, selection = self._select(signature, device.info, exhaustive=True, asked=asked)
        stored, entry = stored_entry(self, metas, attrs, signature, device, overridden=_overridden(variant, tunables),
                                     asked=asked)  # fmt: skip
        names = [n for n, _ in self.program.derive] + [n for n, _ in self.program.constants]
        values = {n: scope[n] for n in names if not hasattr(scope[n], "_undefined_hint")}
        chosen, refused, resolved = None, None, None
        scratch: tuple[tuple[str, int], ...] | None = None
        if variant is not None:
            chosen = variant if next(v for v in selection.trace if v.variant == variant).accepted else None
            try:  # the call's own path (_plan's), so that explain says what the call raises: its
                # VariantRejectedError, the device limit the variant breaks, or its template's error
                _, resolved, forced_scope = self._resolve(signature, variant, device.info, asked=asked)
                _, scratch = self._checked_wgsl(signature, variant, specs, resolved, forced_scope, device)
            except KernelError as exc:
                refused = str(exc)
        elif selection.chosen is not None:
            chosen = selection.chosen.variant.id
            chosen_scope = cast(dict[str, Any], selection.scope)  # set together with chosen
            try:  # what the call would check after choosing
                check_input_sizes(device.info, tensor_bytes(self.manifest, signature, ()))
                with self._located():
                    resolved = resolve_variant(selection.chosen, chosen_scope)
                _, scratch = self._checked_wgsl(signature, chosen, specs, resolved, chosen_scope, device)
            except KernelError as exc:
                refused = str(exc)
        else:  # float16 on an adapter without shader-f16: the call's DeviceLimitError, which a
            try:  # `when` clause reading f16Ok through a derive (QuickGelu's baseOk) never shows
                self._explain_missing_f16(signature, device.info)
            except DeviceLimitError as exc:
                refused = str(exc)
        tuned = None if stored is None else {"variant": stored[1], "tunables": stored[0].tunable_map()}
        # the outputs it binds (bound_roles holds the inputs too: "produced" had named X and bias)
        produced = None if chosen is None or resolved is None else produced_outputs(resolved, specs)
        return Explanation(self.op_id, chosen, selection.trace, specs, values, refused, tuned, forced=variant,
                           produced=produced, tuning_entry=None if entry is None else entry.as_dict(),
                           asked=in_manifest_order(self.manifest, asked), scratch=scratch)  # fmt: skip

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
                             "a manifest)", f"{type_name(expression)} {shorten(repr(expression), 60)}")  # fmt: skip
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
        outputs: Iterable[str] | None = None,
    ) -> dict[str, str]:
        """The WGSL of each pass (by pass id) of the variant a call with these inputs would run (a
        stored tuning result included, when neither ``variant`` nor ``tunables`` is given;
        :meth:`explain`'s ``tuning_entry`` says which)."""
        return self._render(inputs, attrs, variant, tunables, adapter, outputs=outputs)[0]

    def _render(self, inputs: Mapping[str, Any], attrs: Mapping[str, Any] | None, variant: str | None,
                tunables: Mapping[str, Any] | None, adapter: str | None, *, entry: bool = False,
                outputs: Iterable[str] | None = None) -> tuple[dict[str, str], dict[str, Any] | None]:  # fmt: skip
        """:meth:`render`'s WGSL and, with ``entry``, the tuning file's entry for the call's class as
        :meth:`explain`'s ``tuning_entry`` gives it (None where the call names a variant or tunables).
        The command line's render prints both: asking explain for the entry checked the call twice."""
        asked = asked_outputs(self.manifest, outputs)
        self._check_variant_arg(variant)
        device, metas, signature = self._checked(inputs, attrs, tunables, adapter)
        resolution, found = None, None
        if variant is None and not tunables:
            if entry:  # the same judgement as tuned_choice's with ``check``, and the entry it judged
                stored, found = stored_entry(self, metas, attrs, signature, device, asked=asked)
            else:
                stored = tuned_choice(self, metas, attrs, signature, device, check=True, asked=asked)
            if stored:
                signature, variant, resolution = stored  # resolved there (``check``)
        if resolution is None:
            resolution = self._resolve(signature, variant, device.info, asked=asked)
        _, resolved, scope = resolution
        shaders = dict(zip((r.pass_id for r in resolved), self.renderer.render_passes(resolved, scope), strict=True))
        return shaders, None if found is None else found.as_dict()

    def work_key(
        self,
        inputs: Mapping[str, Any],
        *,
        attrs: Mapping[str, Any] | None = None,
        variant: str | None = None,
        tunables: Mapping[str, Any] | None = None,
        adapter: str | None = None,
        outputs: Iterable[str] | None = None,
    ) -> tuple[Any, ...]:
        """What the GPU is given for this call, pass by pass: the WGSL, the threads and workgroup
        size, the uniform bytes. Calls with equal keys do the same work: the tuner times one (a
        tunable the chosen variant never reads changes nothing). No pipeline is built."""
        asked = asked_outputs(self.manifest, outputs)
        self._check_variant_arg(variant)
        device, _, signature = self._checked(inputs, attrs, tunables, adapter)
        (chosen, _), resolved, scope = self._resolve(signature, variant, device.info, asked=asked)
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
        outputs: Iterable[str] | None = None,
    ) -> tuple[Device, ExecutionPlan]:
        """The device and the cached execution plan of the manifest's own selection for these inputs
        (``variant``/``tunables`` as given), built as a call builds it but not run: ``plan.variant``,
        ``plan.tunables``, ``plan.outputs``, ``plan.left_out`` and each pass's ``label`` and ``grid``
        (docs/python-api.md). Stored autotuning results apply only with ``tuned=True`` (what a call
        would run), so that ``bench`` can time the default against the tuned choice. ``outputs``:
        the call's (``plan.dropped`` names the outputs computed but not returned)."""
        asked = asked_outputs(self.manifest, outputs)
        device, metas, signature = self._checked(inputs, attrs, tunables, adapter)
        if tuned and variant is None and not tunables:
            plan = tuned_plan(self, metas, attrs, signature, device, asked=asked)
            if plan is not None:
                return device, plan
        return device, self._plan(signature, variant, device, asked=asked)

    def tuning_class(self, inputs: Mapping[str, Any], attrs: Mapping[str, Any] | None = None) -> TuningClass:
        """What a stored tuning result for these inputs is keyed by (after the kernel's tuning_key):
        the type variables' dtypes, the inputs' shapes (tuning.shape_class buckets them), the
        optional inputs left out and the attributes set to other than their defaults."""
        metas = describe_inputs(declared_present(self.manifest, inputs))
        return tuning_class_of(self, check_call(self.manifest, metas, attrs, None, names_checked=True))

    # --- plans ------------------------------------------------------------------------------

    def _checked(self, inputs: Mapping[str, Any], attrs: Mapping[str, Any] | None, tunables: Mapping[str, Any] | None,
                 adapter: str | None) -> tuple[Device, dict[str, Any], CallSignature]:  # fmt: skip
        """The device, the inputs' (shape, dtype) and the contract-checked signature of a call
        described by shapes/dtypes (an optional input given as None left out, as a call leaves it)."""
        present = declared_present(self.manifest, inputs)
        device = get_device(adapter)
        # A released GpuTensor or one of another adapter's device is the call's InputError here too:
        # explain had chosen a variant, and render given WGSL, for a call that raises.
        # prepare_inputs raises the call's own error; the arrays it would copy are not passed to it.
        prepare_inputs({k: v for k, v in present.items() if isinstance(v, GpuTensor)}, device, host_ready=False)
        metas = describe_inputs(present)
        return device, metas, check_call(self.manifest, metas, attrs, tunables,
                                         gpu_inputs=gpu_input_names(present), names_checked=True)  # fmt: skip

    def _check_variant_arg(self, forced: Any) -> None:
        """Refuse a ``variant=`` that is no variant id (SelectionError, as selection words it), before
        anything is evaluated: explain must raise it, not report it as the call's failure."""
        if forced is None:
            return
        if not isinstance(forced, str):
            raise InputError("variant", f"a variant id, one of {self.variants}", describe_value(forced))
        if forced not in self._variant_ids:
            raise SelectionError(no_variant(forced, self.variants))

    def _resolve(self, signature: CallSignature, forced: str | None, info: DeviceInfo, *,
                 asked: frozenset[str] | None = None) -> Resolution:  # fmt: skip
        """The chosen variant, its resolved passes and scope; ``forced`` was checked by the caller,
        ``asked`` (the call's outputs=) too."""
        check_input_sizes(info, tensor_bytes(self.manifest, signature, ()))  # before expressions overflow on it
        try:  # a forced variant is refused inside _select, any other call by require_choice
            _, outputs, selection = self._select(signature, info, forced=forced, asked=asked)
            chosen = require_choice(selection, self.op_id, defaults=self.manifest.attributes)
        except SelectionError:
            self._explain_missing_f16(signature, info, forced)
            raise
        chosen_scope = cast(dict[str, Any], selection.scope)  # set together with chosen
        with self._located():
            return (chosen, outputs), resolve_variant(chosen, chosen_scope), chosen_scope

    def _select(self, signature: CallSignature, info: DeviceInfo, *, forced: str | None = None,
                exhaustive: bool = False,
                asked: frozenset[str] | None = None) -> tuple[dict[str, Any], tuple[OutputSpec, ...], Selection]:  # fmt: skip
        """The call's scope, its outputs' specs and the variant selection (every variant judged with
        ``exhaustive``, for explain; ``asked``: the call's outputs=)."""
        with self._located():
            scope, outputs = self.program.call_scope(signature, info)
            selection = select_variant(self.program.variants, scope, forced=forced, exhaustive=exhaustive,
                                       definitions=self.program.definitions, asked=asked,
                                       optional=self._optional_outputs)  # fmt: skip
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
                      resolved: Any, device: Device, scope: Mapping[str, Any]) -> tuple[tuple[str, int], ...]:  # fmt: skip
        """Refuse, before anything is built, a binding with no tensor or one the device cannot hold;
        returns the variant's scratch sizes, evaluated in its ``scope`` (docs/format.md: after the
        passes' expressions, before the templates)."""
        sizes = tensor_bytes(self.manifest, signature, outputs)
        variant = cast(CompiledVariant, self.program.variant(variant_id))
        scratch: tuple[tuple[str, int], ...] = ()
        scratch_arguments = None
        if variant.scratch:
            with self._located():
                scratch = resolve_scratch(variant, scope)
            sizes.update(scratch)
            scratch_arguments = {name: self.program.arguments_read([expr], variant) for name, expr in variant.scratch}
        for r, compiled in zip(resolved, variant.passes, strict=True):
            check_bound(r, sizes, variant_id)
            check_limits(device, r, sizes, self.program.arguments_read(compiled.workgroup_size, variant),
                         scratch_arguments)  # fmt: skip
        return scratch

    def _checked_wgsl(self, signature: CallSignature, variant_id: str, outputs: tuple[OutputSpec, ...],
                      resolved: Any, scope: dict[str, Any],
                      device: Device) -> tuple[list[str], tuple[tuple[str, int], ...]]:  # fmt: skip
        """What a call does once its variant is resolved, before anything is built: the device's
        limits checked, then each pass's WGSL rendered (a template may refuse the call there).
        explain goes this far, so that it reports what the call would raise. Returns the WGSL and
        the scratch sizes."""
        scratch = self._check_device(signature, variant_id, outputs, resolved, device, scope)
        return self.renderer.render_passes(resolved, scope), scratch

    def _plan(self, signature: CallSignature, forced: str | None, device: Device, *,
              resolution: Resolution | None = None, asked: frozenset[str] | None = None) -> ExecutionPlan:  # fmt: skip
        """The call's plan (cached); ``resolution``: ``_resolve``'s for these arguments, if the caller
        has it; ``asked``: the call's outputs= (checked), the outputs the plan returns."""
        self._check_variant_arg(forced)  # before the key: a list is unhashable
        key = (signature, forced, device.serial, asked)
        with self._lock:
            plan = self._plans.get(key)
            if plan is not None:
                self._plans.move_to_end(key)
                return plan
        if resolution is None:
            resolution = self._resolve(signature, forced, device.info, asked=asked)
        (chosen, outputs), resolved, scope = resolution
        variant_id = chosen.variant.id
        wgsl, scratch = self._checked_wgsl(signature, variant_id, outputs, resolved, scope, device)
        passes = tuple(build_pass(device, r, text, kernel=self.op_id, variant=variant_id,
                                  blame=workgroup_memory_blame(self.program, chosen, cpass, self.renderer, text))
                       for r, text, cpass in zip(resolved, wgsl, chosen.passes, strict=True))  # fmt: skip
        # An optional output the chosen variant binds nowhere is not returned: its buffer would hold
        # a pooled buffer's old bytes. (Every other output is bound as storage: a load-time check.)
        bound = bound_roles(resolved)
        left_out = tuple(o.role for o in outputs if o.role not in bound)
        outputs = tuple(o for o in outputs if o.role in bound)
        # Computed but not asked for: bound, so given a buffer, which goes back to the pool unread.
        dropped = () if asked is None else tuple(o.role for o in outputs if o.role not in asked)
        plan = ExecutionPlan(variant=variant_id, passes=passes, outputs=outputs, tunables=signature.tunable_map(),
                             left_out=left_out, dropped=dropped, asked=asked, scratch=scratch)  # fmt: skip
        with self._lock:
            self._plans[key] = plan
            if len(self._plans) > PLAN_CACHE_SIZE:
                self._plans.popitem(last=False)
        return plan


def _overridden(variant: str | None, tunables: Mapping[str, Any] | None) -> str | None:
    """Why a call that forces ``variant`` or gives ``tunables`` runs no stored tuning result (None: it may)."""
    named = (f"variant={variant!r}" if variant is not None else
             f"tunables={shorten(repr(dict(tunables)), 200)}" if tunables else None)  # fmt: skip
    if named is None:
        return None
    return f"the call gives {named}: a stored result applies only to a call that names neither a variant nor tunables"
