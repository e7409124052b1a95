"""Other implementations of the embedded ops, timed the same way, for ``bench --compare``.

Each peer runs in its own process (``python -m webgpu_kernels.peers PEER CASES.json``) because
Dawn (ONNX Runtime's WebGPU provider), CUDA and wgpu-native in one process are untested
together; PROCESS_GROUPS splits a peer's cases further where it needs that. A peer prints one
JSON object per case on stdout. Every peer output is checked, so that a fast wrong answer is
reported as wrong: against the op's NumPy reference where it has one, else against onnxruntime's
CPU provider running the same ONNX node (:func:`peer_cases` places it as `run` does).

Per-op code lives here and in references.py, never in the engine.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from . import walltime
from .case_data import random_values
from .comparison import Agreement, held_to
from .errors import KernelError
from .references import (
    ReferenceUnavailable,
    manifest_positions,
    numpy_reference,
    one_node_model,
    onnxruntime_reference,
)
from .walltime import back_to_back


def case_dtypes(case: dict[str, Any]) -> tuple[str, ...]:
    return tuple(sorted({spec["dtype"] for spec in case["inputs"].values()}))


# Cases of one peer that must not share a process, by key. ONNX Runtime WebGPU (the 0.4.0 plugin)
# reuses within a process the program it compiled for an op's first dtype when the other dtype
# comes: BiasAdd f16 after f32 returns inf, f32 after f16 values off by 1e4, and each is right in a
# process of its own (scripts/ort_f16_probe.py, docs/perf/h200-ort-f16.log).
PROCESS_GROUPS: dict[str, Callable[[dict[str, Any]], Any]] = {"ort-webgpu": case_dtypes}

# Peers' implementations of each op, written against torch tensors.
TORCH_OPS: dict[str, Callable[..., Any]] = {
    "com.microsoft.BiasAdd": lambda t, a: {"Y": t["X"] + t["bias"] + t["skip"]},
    "com.microsoft.QuickGelu": lambda t, a: {"Y": t["X"] * (t["X"] * a.get("alpha", 1.702)).sigmoid()},
}


def peer_cases(rows: Iterable[tuple[int, dict[str, Any]]], kernels: Iterable[Any], compile_tag: str,
               onnx_op: str | None = None) -> list[dict[str, Any]]:  # fmt: skip
    """The cases the peers are handed, one per bench row (with its index, the case's ``id``): the
    op, the attributes given, whether torch compiles it (``compile_tag``, or "all"), the inputs'
    shapes, dtypes and distributions, ``onnx``, the ONNX node of the call (:func:`node_of`), and
    ``tolerances``, bench.json's that the row was held to, where it gives them.

    ``kernels``: the benched ones (each row's by its op id); ``onnx_op``: bench's --onnx-op."""
    by_id = {kernel.op_id: kernel for kernel in kernels}
    cases = []
    for i, row in rows:
        dtypes = {k: row["dtypes"][k] for k in row["shapes"]}
        generated = row.get("generate", {})
        cases.append({"id": i, "op": row["kernel"], "attrs": row["attrs"],
                      "compile": compile_tag == "all" or compile_tag in row["tags"],
                      "inputs": {k: {"shape": s, "dtype": dtypes[k], **({"generate": generated[k]} if k in generated else {})}
                                 for k, s in row["shapes"].items()},
                      "onnx": node_of(by_id[row["kernel"]], row, onnx_op),
                      **({"tolerances": row["tolerances"]} if row.get("tolerances") else {})})  # fmt: skip
    return cases


def node_of(kernel: Any, row: dict[str, Any], onnx_op: str | None) -> dict[str, Any]:
    """The one-node ONNX model of ``row``'s call, as `run` and bench's own check build it: ``op``
    (``onnx_op``, the op the package mirrors, else its own id), ``inputs`` and ``outputs``, the
    node's by position (``""`` for one left out), each named as our input or output it is,
    ``opset`` (the manifest's sinceVersion), ``attrs`` (the manifest's defaults, then the row's)
    and ``output_shapes``, ours (a model ONNX infers other shapes for is not run as a reference).
    The outputs are those the timed plan writes, so that a peer computes what ours did; where that
    plan cannot be made again, every output of the manifest, their shapes unknown."""
    metas = {k: (tuple(s), row["dtypes"][k]) for k, s in row["shapes"].items()}
    try:
        _, plan = kernel.plan(metas, attrs=row["attrs"] or None, variant=row.get("variant"),
                              tunables=row.get("tunables") or None)  # fmt: skip
        produced: dict[str, list[int]] | None = {o.role: list(o.shape) for o in plan.outputs}
    except KernelError:  # a row bench timed has a plan: this is for safety, not a path bench takes
        produced = None
    roles = produced if produced is not None else [spec.role for spec in kernel.manifest.outputs]
    inputs, outputs, _ = manifest_positions(kernel.manifest, metas, roles, op_id=onnx_op)
    return {"op": onnx_op or kernel.op_id, "inputs": inputs, "outputs": outputs, "opset": kernel.manifest.since_version,
            "attrs": {**kernel.manifest.attributes, **row["attrs"]}, "output_shapes": produced}  # fmt: skip


def _node(case: dict[str, Any]) -> dict[str, Any]:
    """The case's ONNX node; a case written without one (by hand) is its op's, in the order of
    references.ONNX_OPS or of its inputs."""
    return case.get("onnx") or {"op": case["op"], "inputs": None, "outputs": None, "opset": None,
                                "attrs": case.get("attrs", {}), "output_shapes": None}  # fmt: skip


def _random_inputs(case: dict[str, Any], seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {name: random_values(tuple(spec["shape"]), spec["dtype"], rng, spec.get("generate"))
            for name, spec in case["inputs"].items()}  # fmt: skip


@dataclass(frozen=True)
class Expected:
    """What a peer's outputs are checked against: the reference's outputs by name and ``held``, the
    rule bench holds ours to (:func:`comparison.held_to`: the tolerance of the case's dtypes, or
    bench.json's for an output of a dtype it names), or ``why`` there are none."""

    outputs: dict[str, np.ndarray] | None
    held: Callable[[Mapping[str, Any], Mapping[str, np.ndarray]], Agreement]
    why: str | None = None


def expected_outputs(case: dict[str, Any], inputs: dict[str, np.ndarray]) -> Expected:
    """The reference of ``case`` on ``inputs``, by ours' rule (cli_bench's checker): the op's NumPy
    reference where it has one and no other ONNX op is named, else onnxruntime's CPU provider on
    the case's ONNX node."""
    node = _node(case)
    held = held_to([str(np.dtype(a.dtype)) for a in inputs.values()], case.get("tolerances"))  # the row's rule
    reference = numpy_reference(case["op"]) if node["op"] == case["op"] else None
    if reference is not None:
        return Expected(reference(inputs, node["attrs"]), held)
    try:
        found = onnxruntime_reference(node["op"], inputs, node["attrs"], input_names=node["inputs"],
                                      output_names=node["outputs"], output_shapes=node["output_shapes"],
                                      opset=node["opset"])  # fmt: skip
    except ReferenceUnavailable as why:
        return Expected(None, held, f"onnxruntime: {why}")
    if not found:
        return Expected(None, held, "onnxruntime: it computed none of the outputs")
    return Expected(found, held)


def _check(result: dict[str, Any], label: str, outputs: dict[str, np.ndarray], expected: Expected) -> None:
    """``result[label_error]`` and ``result[label_ok]``: every output the reference has, by name,
    against it (one missing or of another shape is wrong); where there is no reference,
    ``result["reference_unavailable"]`` says why and there is no verdict. Outputs the reference
    computed no value for are named in ``result["reference_uncompared"]``."""
    if expected.outputs is None:
        result["reference_unavailable"] = expected.why
        return
    agreement = expected.held(outputs, expected.outputs)
    result[f"{label}_error"], result[f"{label}_ok"] = agreement.max_error, agreement.ok
    uncompared = [name for name in outputs if name not in expected.outputs]
    if uncompared:
        result["reference_uncompared"] = uncompared


def _once(fn: Callable[[], Any]) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


MAX_DIFFERENTIAL_CALLS = 100_000


def _differential(fn: Callable[[], Any], sync: Callable[[], Any], *, target_s: float = 0.1,
                  clock: Callable[[], float] = time.perf_counter) -> list[float]:  # fmt: skip
    """Three samples of the per-call time of asynchronous calls whose only wait is an expensive
    ``sync``: the difference of n and 4n back-to-back calls, each batch ended by one ``sync``, over 3n.
    The median is the figure; the three are kept so that a figure off its neighbours shows whether
    the peer was steadily slow or one batch was (run M: ORT's QuickGelu f32 at 8x577x4096 read
    638 us, 63 us in a fresh process, docs/perf/h200-ort-long.log).

    The readback's jitter does not cancel out, so the calls must outweigh it: at least
    ``target_s`` and 2x one readback per batch of n. ONNX Runtime WebGPU's readback of a 336 MB
    output takes about 190 ms, give or take tens of ms; batches of 16-60 ms read its f32 BiasAdd
    anywhere from 180 to 331 us per run (5.6 to 3.0 TB/s), batches of 0.25 s 239 to 252 us
    (scripts/ort_timing_probe.py, docs/perf/h200-ort-timing.log). tests/test_peers.py: with 1x,
    one seed in ten is off by more than 3%; with 2x none.
    """

    def batch(n: int) -> float:
        sync()
        start = clock()
        for _ in range(n):
            fn()
        sync()
        return clock() - start

    base = min(batch(1) for _ in range(2))  # one call and the readback
    n = 2
    while batch(n) - base < max(target_s, 2 * base):
        if n >= MAX_DIFFERENTIAL_CALLS:
            raise RuntimeError(f"no device time: {n} back-to-back calls did not outweigh one readback ({base * 1e3:.3g} ms)")
        n *= 2
    while True:
        samples = [(batch(4 * n) - batch(n)) / (3 * n) for _ in range(3)]
        # A difference that is not positive is the readback's jitter outweighing the calls, not
        # a time (it was once clamped to 0, a figure of 0 us): longer batches, or no figure.
        if min(samples) > 0:
            return samples
        if n >= MAX_DIFFERENTIAL_CALLS:
            raise RuntimeError(f"no device time: the readback's jitter outweighed {3 * n} back-to-back calls "
                               f"(differences per call {', '.join(f'{t * 1e6:.3g}' for t in samples)} us)")  # fmt: skip
        n *= 2


def _unimplemented(case: dict[str, Any]) -> str | None:
    """Why torch has no figure for ``case``'s op (it has no implementation of it), or None."""
    if case["op"] in TORCH_OPS:
        return None
    return f"torch: no implementation of {case['op']} (peers.TORCH_OPS has {', '.join(sorted(TORCH_OPS))})"


def _setup_failed(peer: str, cases: list[dict[str, Any]], exc: BaseException) -> None:
    """Each case's row where the peer could not start (its library not installed): the reason."""
    for case in cases:
        print(json.dumps({"case": case["id"], "peer": peer, "error": f"{type(exc).__name__}: {exc}"}), flush=True)


def run_torch(cases: list[dict[str, Any]], warm_up_s: float = 0.0) -> None:
    # An op torch has no implementation of is said first, and nothing of torch's (nor CUDA) starts
    # for it: with no case left, torch is not even imported.
    for case in cases:
        why = _unimplemented(case)
        if why is not None:
            print(json.dumps({"case": case["id"], "peer": "torch", "error": why}), flush=True)
    cases = [case for case in cases if _unimplemented(case) is None]
    if not cases:
        return
    try:
        import torch
    except ImportError as exc:
        _setup_failed("torch", cases, exc)
        return

    cuda = torch.cuda.is_available()
    dev = torch.device("cuda" if cuda else "cpu")
    sync = torch.cuda.synchronize
    # bench warms the GPU up with copies before its first timing (benchmark.warm_up); torch gets the
    # same before its first, after its process's start-up and first torch.compile on the CPU.
    warm_up_left = warm_up_s if cuda else 0.0
    for case in cases:
        op, attrs = case["op"], case.get("attrs", {})
        result: dict[str, Any] = {"case": case["id"], "peer": "torch", "device": str(dev)}
        try:
            if not cuda:  # CPU figures in the "torch TB/s" columns would flatter any GPU kernel
                raise RuntimeError(f"no CUDA device (torch {torch.__version__}: torch.cuda.is_available() is False)")
            arrays = _random_inputs(case)
            expected = expected_outputs(case, arrays)
            tensors = {k: torch.from_numpy(v).to(dev) for k, v in arrays.items()}
            fn = TORCH_OPS[op]
            impls = [("eager", lambda: fn(tensors, attrs))]
            if case.get("compile", True):
                compiled = torch.compile(lambda t: fn(t, attrs), dynamic=False)
                impls.append(("compile", lambda: compiled(tensors)))
            for label, impl in impls:
                out = impl()
                _check(result, label, {k: v.cpu().numpy() for k, v in out.items()}, expected)
                if warm_up_left > 0:
                    source = torch.empty(walltime.WARM_UP_BYTES // 4, device=dev)
                    target = torch.empty_like(source)
                    sustain(lambda: target.copy_(source), sync, warm_up_left)
                    warm_up_left = 0.0
                settled = _gpu_time(impl, torch)
                result[f"{label}_s"] = statistics.median(settled.samples)
                if not settled.stable:  # as ours: a figure whose batches never agreed says so
                    result[f"{label}_batches"] = settled.batches
                    result[f"{label}_stable"] = False
            outs = fn(tensors, attrs)

            def round_trip() -> None:
                # NumPy -> device -> NumPy of the same arrays: what any round trip must at least pay.
                for v in arrays.values():
                    torch.from_numpy(v).to(dev)
                for v in outs.values():
                    v.cpu().numpy()

            result["transfer_s"] = back_to_back(round_trip, sync, min_s=0.15, batches=3)
        except Exception as exc:  # a peer failure is reported, never fatal
            result["error"] = f"{type(exc).__name__}: {exc}"
        print(json.dumps(result), flush=True)


clock = time.perf_counter  # sustain's (a test's virtual GPU sets its own)


def sustain(launch: Callable[[], Any], sync: Callable[[], Any], seconds: float) -> int:
    """walltime.sustain (ours) with torch's launches: back-to-back ``launch``es, each batch ended by
    ``sync``; returns the launches made."""

    def batch(n: int) -> None:
        for _ in range(n):
            launch()
        sync()

    return walltime.sustain(batch, seconds, max_calls=1024, clock=clock)


#: Launches between torch's two CUDA events (benchmark.CALLS_PER_SPAN for ours); the batch rule
#: is walltime.settle's, the same as ours.
SPAN_CALLS = 50
MIN_TOTAL_S = walltime.MIN_TOTAL_S


def _gpu_time(impl: Callable[[], Any], torch: Any) -> walltime.Settled:
    """GPU time per call from CUDA events around spans of back-to-back launches: the median of the
    last two batches, once their medians agree. Ten warm-up launches and five spans (the old rule)
    could time a GPU idle since the process started or since torch.compile's seconds on the CPU,
    while ours is timed under sustained load: a comparison that could flatter us."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for _ in range(10):
        impl()

    def one_batch(spans: int) -> list[float]:
        samples = []
        for _ in range(spans):
            # Two launches queued first: the span's first launch then waits on the GPU, not the GPU
            # on its launch, as in ours (50 calls in one submission). After the previous span's
            # wait, the start event had been taken on an idle GPU, with the launch's host time inside.
            impl()
            impl()
            start.record()
            for _ in range(SPAN_CALLS):
                impl()
            end.record()
            end.synchronize()
            samples.append(start.elapsed_time(end) / 1e3 / SPAN_CALLS)
        return samples

    return walltime.settle(one_batch, calls_per_span=SPAN_CALLS)


def run_ort_webgpu(cases: list[dict[str, Any]], warm_up_s: float = 0.0) -> None:
    # No warm-up of its own (warm_up_s is taken for the common signature): torch's copies would
    # put CUDA beside Dawn in one process, and the differential below times batches of at least
    # 0.1 s each, three times, after doubling up to them.
    try:
        import onnxruntime as ort
        import onnxruntime_ep_webgpu as webgpu_ep
    except ImportError as exc:  # the plugin is a package of its own: said in each case's row
        _setup_failed("ort-webgpu", cases, exc)
        return

    ort.register_execution_provider_library("webgpu", webgpu_ep.get_library_path())
    device = next((d for d in ort.get_ep_devices() if d.ep_name == webgpu_ep.get_ep_name()), None)
    for case in cases:
        node = _node(case)
        result: dict[str, Any] = {"case": case["id"], "peer": "ort-webgpu"}
        try:
            if device is None:
                raise RuntimeError("no WebGPU EP device")
            arrays = _random_inputs(case)
            expected = expected_outputs(case, arrays)
            options = ort.SessionOptions()
            options.add_provider_for_devices([device], {})
            model, feeds, names = one_node_model(node["op"], arrays, node["attrs"], input_names=node["inputs"],
                                                 output_names=node["outputs"], opset=node["opset"])  # fmt: skip
            session = ort.InferenceSession(model, sess_options=options)

            def by_name(values: list[Any]) -> dict[str, np.ndarray]:  # None: an output it computed no value for
                return {n: np.asarray(v) for n, v in zip(names, values, strict=True) if v is not None}

            _check(result, "numpy", by_name(session.run(names, feeds)), expected)
            result["numpy_roundtrip_s"] = back_to_back(lambda: session.run(names, feeds), lambda: None, min_s=0.15, batches=3)
            binding = session.io_binding()
            for k, v in feeds.items():
                binding.bind_ortvalue_input(k, ort.OrtValue.ortvalue_from_numpy(v, "webgpu", 0))
            for name in names:
                binding.bind_output(name, "webgpu")
            session.run_with_iobinding(binding)
            _check(result, "device", by_name(binding.copy_outputs_to_cpu()), expected)
            # Device-resident runs may be asynchronous, and the only way to wait for them is a
            # readback of the outputs. Time n and 4n back-to-back runs, each ended by one readback:
            # the difference divided by 3n is the time per run, with the readback cancelled out.
            sync = binding.copy_outputs_to_cpu
            samples = _differential(lambda: session.run_with_iobinding(binding), sync)
            result["device_s"], result["device_samples_s"] = statistics.median(samples), samples
        except Exception as exc:  # a peer failure is reported, never fatal
            result["error"] = f"{type(exc).__name__}: {exc}"
        print(json.dumps(result), flush=True)


PEERS = {"torch": run_torch, "ort-webgpu": run_ort_webgpu}


def main(argv: list[str]) -> int:
    """``PEER [WARM_UP_SECONDS] CASES.json`` (bench's --warm-up)"""
    peer, *warm_up, path = argv
    with open(path, encoding="utf-8") as f:
        cases = json.load(f)
    PEERS[peer](cases, float(warm_up[0]) if warm_up else 0.0)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
