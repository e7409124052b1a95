"""What a GPU time per call means: timestamps around each pass, or around a run of calls.

Until this probe, `bench` timed each dispatch by timestamps written at the start and end of its
own pass, while torch's peer times 50 back-to-back launches between two CUDA events and divides.
This probe times the same bound kernel on the same data three ways, interleaved in rounds so
drift hits all alike:

  pass     the median of per-pass intervals, one pass per call (what `bench` reported before)
  span     50 passes back to back, a timestamp before the first and after the last, / 50
  onepass  50 dispatches in one compute pass, its two timestamps, / 50: how the engine records a
           chain of calls, and what `bench` reports now (benchmark.time_calls)

and, with --torch, torch eager and torch.compile on the same shapes in a child process, timed as
the peer does (peers._gpu_time). Large bench.json shapes, f32 and f16; microseconds and TB/s.

    python scripts/timing_probe.py [--torch] [--small] [--package=PATH ...]

(--package: also that package's kernel for the same op, f16 only, e.g. an experiment folder.)
"""

import json
import math
import statistics
import subprocess
import sys

import numpy as np
import wgpu

CASES = [  # op, inputs (name -> shape), the large bench.json shapes
    ("com.microsoft.QuickGelu", {"X": (16, 1280, 4096)}),
    ("com.microsoft.BiasAdd", {"X": (16, 4096, 1280), "bias": (1280,), "skip": (16, 4096, 1280)}),
]
DTYPES = ("float16", "float32")
SPAN = 50  # benchmark.CALLS_PER_SPAN, and the launches torch's peer times between two events
if "--small" in sys.argv:  # a smoke test on a CPU adapter
    CASES = [(op, {k: s[-1:] if len(s) == 1 else (1, 8, s[-1]) for k, s in shapes.items()}) for op, shapes in CASES]


def torch_child() -> None:
    import torch

    from webgpu_kernels.peers import TORCH_OPS, _gpu_time

    rng = np.random.default_rng(0)
    for op, shapes in CASES:
        attrs = {"alpha": 1.702} if op.endswith("QuickGelu") else {}
        for dtype in DTYPES:
            tensors = {k: torch.from_numpy(rng.standard_normal(s, dtype=np.float32).astype(dtype)).cuda()
                       for k, s in shapes.items()}  # fmt: skip
            nbytes = sum(t.nbytes for t in tensors.values()) + tensors["X"].nbytes
            fn = TORCH_OPS[op]
            compiled = torch.compile(lambda t, fn=fn: fn(t, attrs), dynamic=False)
            for label, impl in (("eager", lambda: fn(tensors, attrs)), ("compile", lambda: compiled(tensors))):
                impl()
                runs = [_gpu_time(impl, torch) for _ in range(3)]
                print(json.dumps({"op": op, "dtype": dtype, "label": label, "s": statistics.median(runs),
                                  "tbps": nbytes / statistics.median(runs) / 1e12}), flush=True)  # fmt: skip


def stamped(gpu, pairs: int, record) -> np.ndarray:
    """Seconds between the timestamps of each of ``pairs`` pairs that ``record(encoder, query_set)`` writes."""
    qs = gpu.create_query_set(type=wgpu.QueryType.timestamp, count=2 * pairs)
    resolve = gpu.create_buffer(size=16 * pairs, usage=wgpu.BufferUsage.QUERY_RESOLVE | wgpu.BufferUsage.COPY_SRC)
    enc = gpu.create_command_encoder()
    record(enc, qs)
    enc.resolve_query_set(qs, 0, 2 * pairs, resolve, 0)
    gpu.queue.submit([enc.finish()])
    stamps = np.frombuffer(gpu.queue.read_buffer(resolve), dtype=np.uint64).astype(np.float64)
    qs.destroy()
    resolve.destroy()
    return (stamps[1::2] - stamps[0::2]) * 1e-9


def one_call_pass(enc, p, writes) -> None:
    c = enc.begin_compute_pass(timestamp_writes=writes)
    c.set_pipeline(p.pipeline)
    c.set_bind_group(0, p.bind_group)
    c.dispatch_workgroups(*p.grid)
    c.end()


def span_of_passes(gpu, bound, n: int) -> list[float]:
    """Per-call seconds of ``n`` runs of SPAN calls, a pass each, a timestamp before the first and after the last."""
    (p,) = bound

    def record(enc, qs):
        for s in range(n):
            for k in range(SPAN):
                writes = {"query_set": qs}
                if k == 0:
                    writes["beginning_of_pass_write_index"] = 2 * s
                if k == SPAN - 1:
                    writes["end_of_pass_write_index"] = 2 * s + 1
                one_call_pass(enc, p, writes if len(writes) > 1 else None)

    return list(stamped(gpu, n, record) / SPAN)


def per_pass(gpu, bound, n: int) -> list[float]:
    """Seconds of each of ``n`` back-to-back calls, each in its own pass between its own timestamps."""
    (p,) = bound

    def record(enc, qs):
        for s in range(n):
            one_call_pass(enc, p, {"query_set": qs, "beginning_of_pass_write_index": 2 * s,
                                   "end_of_pass_write_index": 2 * s + 1})  # fmt: skip

    return list(stamped(gpu, n, record))


def main() -> None:
    import webgpu_kernels as wk
    from webgpu_kernels import benchmark
    from webgpu_kernels.benchmark import random_array, time_calls
    from webgpu_kernels.buffers import padded_size
    from webgpu_kernels.execution import bind, upload

    packages = [wk.load_kernel(a.split("=", 1)[1]) for a in sys.argv[1:] if a.startswith("--package=")]
    rng = np.random.default_rng(0)
    for kernel, op, shapes, dtypes in [(wk.get_kernel(op), op, shapes, DTYPES) for op, shapes in CASES] + [
        (k, op, shapes, ("float16",)) for k in packages for op, shapes in CASES if k.op_id == op
    ]:  # fmt: skip
        for dtype in dtypes:
            arrays = {k: random_array(s, dtype, rng) for k, s in shapes.items()}
            device, plan = kernel.plan(arrays)
            gpu = device.gpu
            buffers = {k: (upload(device, a), padded_size(a.nbytes)) for k, a in arrays.items()}
            (out,) = plan.outputs
            nbytes = math.prod(out.shape) * np.dtype(out.dtype).itemsize
            y = gpu.create_buffer(size=padded_size(nbytes), usage=wgpu.BufferUsage.STORAGE)
            buffers[out.role] = (y, padded_size(nbytes))
            bound = bind(device, plan, buffers)
            total = sum(a.nbytes for a in arrays.values()) + nbytes
            results = {"pass": [], "span": [], "onepass": []}
            time_calls(device, bound)  # sustained load first
            for _ in range(3):
                results["pass"].append(statistics.median(per_pass(gpu, bound, 2000)[200:]))
                results["span"].append(statistics.median(span_of_passes(gpu, bound, 40)))
                results["onepass"].append(statistics.median(benchmark._one_batch(gpu, bound, 40, SPAN)))
            line = "  ".join(f"{k} {statistics.median(v) * 1e6:7.2f} us {total / statistics.median(v) / 1e12:.3f} TB/s"
                             for k, v in results.items())  # fmt: skip
            print(f"{op.split('.')[-1]:9s} {dtype} {plan.variant:7s} {line}   (rounds: "
                  + "; ".join(f"{k} " + "/".join(f"{s * 1e6:.1f}" for s in v) for k, v in results.items()) + ")", flush=True)  # fmt: skip
            for b, _ in buffers.values():
                b.destroy()


if __name__ == "__main__":
    if sys.argv[1:] == ["torch-child"]:
        torch_child()
    else:
        main()
        if "--torch" in sys.argv:
            subprocess.run([sys.executable, __file__, "torch-child"], check=False, timeout=300)
