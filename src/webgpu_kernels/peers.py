"""Other implementations of the embedded ops, timed the same way, for ``bench --compare``.

Each peer runs in its own process (``python -m webgpu_kernels.peers PEER CASES.json``) because
Dawn (ONNX Runtime's WebGPU provider), CUDA and wgpu-native in one process are untested
together; PROCESS_GROUPS splits a peer's cases further where it needs that. A peer prints one
JSON object per case on stdout. Every peer output is checked against a float64 reference so that
a fast wrong answer is reported as wrong.

Per-op code lives here and in references.py, never in the engine.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from . import walltime
from .case_data import random_values
from .comparison import Tolerance, check_against
from .references import REFERENCES, one_node_model
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


def _random_inputs(case: dict[str, Any], seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {name: random_values(tuple(spec["shape"]), spec["dtype"], rng, spec.get("generate"))
            for name, spec in case["inputs"].items()}  # fmt: skip


def _check(result: dict[str, Any], label: str, outputs: dict[str, np.ndarray], inputs: dict[str, np.ndarray],
           case: dict[str, Any]) -> None:  # fmt: skip
    """``result[label_error]`` and ``result[label_ok]``: the peer's output against the reference,
    with the tolerance bench holds ours to (of the case's dtypes)."""
    agreement = check_against(outputs, REFERENCES[case["op"]](inputs, case.get("attrs", {})),
                              Tolerance.of(str(np.dtype(a.dtype)) for a in inputs.values()))  # fmt: skip
    result[f"{label}_error"], result[f"{label}_ok"] = agreement.max_error, agreement.ok


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


def run_torch(cases: list[dict[str, Any]], warm_up_s: float = 0.0) -> None:
    import torch

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
            tensors = {k: torch.from_numpy(v).to(dev) for k, v in arrays.items()}
            fn = TORCH_OPS[op]
            impls = [("eager", lambda: fn(tensors, attrs))]
            if case.get("compile", True):
                compiled = torch.compile(lambda t: fn(t, attrs), dynamic=False)
                impls.append(("compile", lambda: compiled(tensors)))
            for label, impl in impls:
                out = impl()
                _check(result, label, {k: v.cpu().numpy() for k, v in out.items()}, arrays, case)
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
    import onnxruntime as ort
    import onnxruntime_ep_webgpu as webgpu_ep

    ort.register_execution_provider_library("webgpu", webgpu_ep.get_library_path())
    device = next((d for d in ort.get_ep_devices() if d.ep_name == webgpu_ep.get_ep_name()), None)
    for case in cases:
        op, attrs = case["op"], case.get("attrs", {})
        result: dict[str, Any] = {"case": case["id"], "peer": "ort-webgpu"}
        try:
            if device is None:
                raise RuntimeError("no WebGPU EP device")
            arrays = _random_inputs(case)
            options = ort.SessionOptions()
            options.add_provider_for_devices([device], {})
            model, feeds, _ = one_node_model(op, arrays, attrs)
            session = ort.InferenceSession(model, sess_options=options)
            out = session.run(None, feeds)
            _check(result, "numpy", {"Y": out[0]}, arrays, case)
            result["numpy_roundtrip_s"] = back_to_back(lambda: session.run(None, feeds), lambda: None, min_s=0.15, batches=3)
            binding = session.io_binding()
            for k, v in feeds.items():
                binding.bind_ortvalue_input(k, ort.OrtValue.ortvalue_from_numpy(v, "webgpu", 0))
            binding.bind_output("Y", "webgpu")
            session.run_with_iobinding(binding)
            y = binding.copy_outputs_to_cpu()[0]
            _check(result, "device", {"Y": y}, arrays, case)
            # Device-resident runs may be asynchronous, and the only way to wait for them is a
            # readback of the output. Time n and 4n back-to-back runs, each ended by one readback:
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
