"""How many loop iterations one shader invocation runs on this adapter: a loop of N0 iterations, then
a nested N1 x N1 loop, counted in a storage buffer (lavapipe ends an invocation's loops after 65,535
iterations in all; a GPU counts them all). Straight through wgpu-py.

    python3 scripts/loop_cap_probe.py
"""

import numpy as np
import wgpu

adapter = wgpu.gpu.request_adapter_sync(power_preference="high-performance")
print(adapter.info["device"], adapter.info["backend_type"])
device = adapter.request_device_sync()
source = """@group(0) @binding(0) var<storage, read> n: array<u32>;
@group(0) @binding(1) var<storage, read_write> y: array<u32>;
@compute @workgroup_size(1) fn main() {
  var c: u32 = 0u;
  for (var k = 0u; k < n[0]; k++) { c = c + 1u; }
  var d: u32 = 0u;
  for (var a = 0u; a < n[1]; a++) { for (var b = 0u; b < n[1]; b++) { d = d + 1u; } }
  y[0] = c; y[1] = d; }"""
pipeline = device.create_compute_pipeline(layout="auto", compute={"module": device.create_shader_module(code=source),
                                                                   "entry_point": "main"})  # fmt: skip
for n0, n1 in [(1000, 100), (65535, 300), (70000, 0), (0, 255), (0, 256), (60000, 100)]:
    counts = device.create_buffer_with_data(data=np.array([n0, n1], np.uint32).tobytes(), usage=wgpu.BufferUsage.STORAGE)
    out = device.create_buffer(size=8, usage=wgpu.BufferUsage.STORAGE | wgpu.BufferUsage.COPY_SRC)
    group = device.create_bind_group(layout=pipeline.get_bind_group_layout(0), entries=[
        {"binding": 0, "resource": {"buffer": counts}}, {"binding": 1, "resource": {"buffer": out}}])
    encoder = device.create_command_encoder()
    compute = encoder.begin_compute_pass()
    compute.set_pipeline(pipeline)
    compute.set_bind_group(0, group)
    compute.dispatch_workgroups(1)
    compute.end()
    device.queue.submit([encoder.finish()])
    got = np.frombuffer(device.queue.read_buffer(out), np.uint32)
    print(f"loop {n0}: {got[0]} (expected {n0}); nested {n1}x{n1}: {got[1]} (expected {n1 * n1})")
