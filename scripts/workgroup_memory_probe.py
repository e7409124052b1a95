"""What the adapter does with a compute shader that declares more workgroup memory than its
maxComputeWorkgroupStorageSize allows. wgpu-native 0.32 does not check this limit
(gfx-rs/wgpu#8946), so the pipeline reaches the driver; this probe builds one at 1x, 2x and 4x
the limit, straight through wgpu (not the engine, which refuses it), dispatches it and checks the
result: every workgroup fills the whole array and sums it back.

    python3 scripts/workgroup_memory_probe.py
"""
import numpy as np
import wgpu

WG = 64


def shader(floats: int) -> str:
    return f"""
var<workgroup> big: array<f32, {floats}>;
@group(0) @binding(0) var<storage, read_write> out: array<f32>;
@compute @workgroup_size({WG})
fn main(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wid: vec3<u32>) {{
  for (var i = lid; i < {floats}u; i += {WG}u) {{ big[i] = f32(i % 7u); }}
  workgroupBarrier();
  if (lid == 0u) {{
    var s = 0.0;
    for (var i = 0u; i < {floats}u; i++) {{ s += big[i]; }}
    out[wid.x] = s;
  }}
}}"""


adapter = wgpu.gpu.request_adapter_sync(power_preference="high-performance")
limit = adapter.limits["max-compute-workgroup-storage-size"]
device = adapter.request_device_sync(required_limits={"max-compute-workgroup-storage-size": limit})
print(f"{adapter.info['device']} ({adapter.info['backend_type']}): maxComputeWorkgroupStorageSize {limit}")
groups = 256
for factor in (1, 2, 4):
    floats = factor * limit // 4 - (4 if factor == 1 else 0)  # 1x: just inside, with room for rounding
    want = float(sum(i % 7 for i in range(floats)))
    try:
        module = device.create_shader_module(code=shader(floats))
        pipeline = device.create_compute_pipeline(layout="auto", compute={"module": module, "entry_point": "main"})
        buf = device.create_buffer(size=groups * 4, usage=wgpu.BufferUsage.STORAGE | wgpu.BufferUsage.COPY_SRC)
        bind = device.create_bind_group(layout=pipeline.get_bind_group_layout(0),
                                        entries=[{"binding": 0, "resource": {"buffer": buf}}])
        encoder = device.create_command_encoder()
        cpass = encoder.begin_compute_pass()
        cpass.set_pipeline(pipeline)
        cpass.set_bind_group(0, bind)
        cpass.dispatch_workgroups(groups)
        cpass.end()
        device.queue.submit([encoder.finish()])
        got = np.frombuffer(device.queue.read_buffer(buf), np.float32)
        wrong = int(np.sum(got != np.float32(want)))
        print(f"{factor}x ({floats * 4} bytes): built and ran; {wrong} of {groups} workgroups wrong "
              f"(want {want:g}, first {got[0]:g})")
    except Exception as exc:  # noqa: BLE001 - what the driver or wgpu says is the finding
        print(f"{factor}x ({floats * 4} bytes): {type(exc).__name__}: {' '.join(str(exc).split())[:300]}")
