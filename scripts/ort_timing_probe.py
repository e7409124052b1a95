"""Is ONNX Runtime WebGPU's device-resident time trustworthy at 84M elements? Run K read its f32
BiasAdd at 189.5 us per run, which is 5.3 TB/s for the 1 GB each run moves, above the H200's
datasheet peak (4.8); run J read 247 us. This prints the raw batches behind peers._differential
(n and 4n back-to-back runs, each ended by one readback of the output) for BiasAdd and QuickGelu
f32, three rounds each, and the per-run time they give, in one process per op as bench runs them.
Needs the H200 machine (the plugin refuses lavapipe).

    python scripts/ort_timing_probe.py OP [X_SHAPE [N ...]]

X_SHAPE (like 8x577x4096) replaces the 84M shape (BiasAdd's bias and skip follow it); N are the
batch sizes (default 64 256 1024). Run M read QuickGelu f32 at 8x577x4096 at 638 us per run,
against 64-67 us in runs G-J, after the rule's batches grew: does ORT slow down in long batches?
"""

import statistics
import sys
import time

import numpy as np

from webgpu_kernels.references import one_node_model

SHAPES = {"com.microsoft.BiasAdd": {"X": (16, 4096, 1280), "bias": (1280,), "skip": (16, 4096, 1280)},
          "com.microsoft.QuickGelu": {"X": (16, 1280, 4096)}}  # fmt: skip


def main(op: str, x_shape: str | None = None, ns: tuple[int, ...] = (64, 256, 1024)) -> None:
    import onnxruntime as ort
    import onnxruntime_ep_webgpu as webgpu_ep

    ort.register_execution_provider_library("webgpu", webgpu_ep.get_library_path())
    device = next(d for d in ort.get_ep_devices() if d.ep_name == webgpu_ep.get_ep_name())
    rng = np.random.default_rng(0)
    shapes = dict(SHAPES[op])
    if x_shape:
        x = tuple(int(d) for d in x_shape.split("x"))
        shapes = {k: (x[-1:] if k == "bias" else x) for k in shapes}
    arrays = {k: rng.standard_normal(s, dtype=np.float32) for k, s in shapes.items()}
    nbytes = sum(a.nbytes for a in arrays.values()) + arrays["X"].nbytes
    options = ort.SessionOptions()
    options.add_provider_for_devices([device], {})
    model, feeds, _ = one_node_model(op, arrays, {})
    session = ort.InferenceSession(model, sess_options=options)
    binding = session.io_binding()
    for k, v in feeds.items():
        binding.bind_ortvalue_input(k, ort.OrtValue.ortvalue_from_numpy(v, "webgpu", 0))
    binding.bind_output("Y", "webgpu")
    session.run_with_iobinding(binding)  # the output exists from here on (reading it before crashes ORT)

    def batch(n: int) -> float:
        binding.copy_outputs_to_cpu()
        start = time.perf_counter()
        for _ in range(n):
            session.run_with_iobinding(binding)
        binding.copy_outputs_to_cpu()
        return time.perf_counter() - start

    readback = min(batch(0) for _ in range(3))
    print(f"{op} f32, {nbytes / 1e9:.3f} GB per run; a readback alone: {readback * 1e3:.1f} ms", flush=True)
    for n in ns:
        rounds = []
        for _ in range(3):
            small, large = batch(n), batch(4 * n)
            per_run = (large - small) / (3 * n)
            rounds.append(per_run)
            print(f"  n={n:5d}: batch(n) {small * 1e3:8.1f} ms, batch(4n) {large * 1e3:8.1f} ms -> "
                  f"{per_run * 1e6:6.1f} us per run, {nbytes / per_run / 1e12:.2f} TB/s; "
                  f"(batch(n) - readback) / n = {(small - readback) / n * 1e6:6.1f} us", flush=True)
        print(f"  n={n}: median {statistics.median(rounds) * 1e6:.1f} us", flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else None, tuple(int(n) for n in sys.argv[3:]) or (64, 256, 1024))
