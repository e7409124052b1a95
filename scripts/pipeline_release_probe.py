"""When wgpu-native frees a compute pipeline the program dropped: creates N pipelines of distinct
WGSL straight through wgpu-py (no engine), keeps the last 256 as the engine's pipeline cache does,
and prints the process's RSS; with --poll, a tiny submission and buffer map every 50 pipelines
polls the device, as a call's readback does.

    python3 scripts/pipeline_release_probe.py [N] [--poll] [--backend Vulkan|OpenGL]
"""

from __future__ import annotations

import argparse
import gc

import wgpu

SOURCE = """@group(0) @binding(0) var<storage, read_write> y: array<f32>;
@compute @workgroup_size(64) fn main(@builtin(global_invocation_id) g: vec3<u32>) {
  if (g.x < arrayLength(&y)) { y[g.x] = y[g.x] * ALPHA; }
}"""


def rss_mib() -> float:
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmRSS")) / 1024


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("count", nargs="?", type=int, default=1500)
    parser.add_argument("--poll", action="store_true")
    parser.add_argument("--backend", default="Vulkan")
    args = parser.parse_args()
    adapter = next(a for a in wgpu.gpu.enumerate_adapters_sync() if args.backend in a.info["backend_type"])
    device = adapter.request_device_sync()
    kept: list[object] = []
    start = None
    for i in range(args.count):
        module = device.create_shader_module(code=SOURCE.replace("ALPHA", f"{1.0 + i * 1e-6:.9f}"))
        kept.append(device.create_compute_pipeline(layout="auto", compute={"module": module, "entry_point": "main"}))
        del module
        if len(kept) > 256:
            kept.pop(0)
        if args.poll and i % 50 == 0:
            buffer = device.create_buffer(size=16, usage=wgpu.BufferUsage.COPY_DST | wgpu.BufferUsage.MAP_READ)
            device.queue.submit([device.create_command_encoder().finish()])
            buffer.map_sync(wgpu.MapMode.READ)
            buffer.unmap()
            buffer.destroy()
        if i == 500:  # past the kept 256: what grows from here is memory no longer held
            gc.collect()
            start = rss_mib()
    gc.collect()
    end = rss_mib()
    grown = (end - start) * 1024 / (args.count - 501) if start is not None else float("nan")
    print(f"{adapter.info['device']} ({adapter.info['backend_type']}), poll={args.poll}: RSS {end:.1f} MiB after "
          f"{args.count} pipelines; {grown:.1f} KiB per pipeline created and dropped after the 500th")


if __name__ == "__main__":
    main()
