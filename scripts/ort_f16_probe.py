"""Is ONNX Runtime WebGPU's f16 BiasAdd wrong on its own, or only after an f32 BiasAdd session ran
in the same process (DEVELOPERS.md)? Every bench run reports its f16 BiasAdd as inf, in every case.
Runs, in one fresh process: f16, f32, f16 again, QuickGelu f16 (a control), each a new session as
bench's peer makes them; prints the max abs error against the float64 reference and how many
outputs are not finite. Needs the H200 machine (the plugin refuses lavapipe).

    python scripts/ort_f16_probe.py
"""

import numpy as np

from webgpu_kernels.comparison import max_abs_error
from webgpu_kernels.references import REFERENCES, one_node_model

BA, QG = "com.microsoft.BiasAdd", "com.microsoft.QuickGelu"


def inputs(op: str, dtype: str, rng: np.random.Generator) -> dict[str, np.ndarray]:
    if op == QG:
        return {"X": rng.standard_normal((2, 77, 3072), np.float32).astype(dtype)}
    shape = (2, 64, 1280)
    return {"X": rng.standard_normal(shape, np.float32).astype(dtype),
            "bias": rng.standard_normal(shape[-1:], np.float32).astype(dtype),
            "skip": rng.standard_normal(shape, np.float32).astype(dtype)}  # fmt: skip


def main() -> None:
    import onnxruntime as ort
    import onnxruntime_ep_webgpu as webgpu_ep

    ort.register_execution_provider_library("webgpu", webgpu_ep.get_library_path())
    device = next(d for d in ort.get_ep_devices() if d.ep_name == webgpu_ep.get_ep_name())
    rng = np.random.default_rng(0)
    for step, (op, dtype) in enumerate([(BA, "float16"), (BA, "float16"), (BA, "float32"), (BA, "float16"),
                                        (QG, "float16")]):  # fmt: skip
        arrays = inputs(op, dtype, rng)
        options = ort.SessionOptions()
        options.add_provider_for_devices([device], {})
        model, feeds, _ = one_node_model(op, arrays, {})
        session = ort.InferenceSession(model, sess_options=options)
        y = session.run(None, feeds)[0]
        error = max_abs_error({"Y": y}, REFERENCES[op](arrays, {}))
        bad = int(np.count_nonzero(~np.isfinite(y)))
        print(f"{step}: {op.split('.')[-1]} {dtype}: max abs error {error:.3g}, {bad} of {y.size} not finite, "
              f"y[0,0,:4] {y.reshape(-1)[:4].tolist()}", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
