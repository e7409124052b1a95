"""Where the time of a NumPy-in, NumPy-out call goes on a GPU machine, and what the alternatives
cost: write_buffer (one call, or chunks from threads), submit, waiting (wgpu-py's poll thread vs a
blocking poll on the calling thread), mapped reads (one copy, or chunks from threads)."""

import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
from wgpu import BufferUsage as U
from wgpu import MapMode

import webgpu_kernels as wk
from webgpu_kernels.device import get_device

dev = get_device()
gpu = dev.gpu
print("adapter:", dev.adapter.label(), flush=True)
pool = ThreadPoolExecutor(8)


def med(name, f, n=200, min_n=5, budget=2.0):
    f()
    s = []
    t0 = time.perf_counter()
    while len(s) < min_n or (len(s) < n and time.perf_counter() - t0 < budget):
        t = time.perf_counter()
        f()
        s.append(time.perf_counter() - t)
    m = statistics.median(s)
    print(f"  {name:52s} {m * 1e6:11.1f} us  (n={len(s)}, min {min(s) * 1e6:.1f})", flush=True)
    return m


def chunks(nbytes, parts):
    step = -(-nbytes // parts)
    step += -step % 4096
    return [(o, min(step, nbytes - o)) for o in range(0, nbytes, step)]


from webgpu_kernels.benchmark import host_per_call  # noqa: E402

qg = wk.get_kernel("com.microsoft.QuickGelu")
tiny = np.random.default_rng(1).standard_normal(4096).astype(np.float32)
print("host per call at start:", host_per_call(qg, {"X": tiny}), flush=True)
for nbytes in (16384, 946176, int(sys.argv[1]) if len(sys.argv) > 1 else 336 * (1 << 20)):
    print(f"== {nbytes} bytes", flush=True)
    x = np.random.default_rng(0).standard_normal(nbytes // 4).astype(np.float32)
    src = gpu.create_buffer(size=nbytes, usage=U.STORAGE | U.COPY_DST | U.COPY_SRC)
    stg = gpu.create_buffer(size=nbytes, usage=U.MAP_READ | U.COPY_DST)
    out = np.empty_like(x)
    xb = x.view(np.uint8)

    def write():
        gpu.queue.write_buffer(src, 0, x)

    def write_threads(parts=8):
        list(pool.map(lambda c: gpu.queue.write_buffer(src, c[0], xb[c[0]:c[0] + c[1]]), chunks(nbytes, parts)))

    # Each write is followed by a submit: repeated writes without one pile up staging buffers and
    # time that pile-up, not the write (lavapipe, 4 MiB: 12 ms median for writes alone in an earlier
    # version of this probe, 0.12 ms with a submit).

    def submit_copy():
        e = gpu.create_command_encoder()
        e.copy_buffer_to_buffer(src, 0, stg, 0, nbytes)
        gpu.queue.submit([e.finish()])

    def wait_thread():
        stg.map_sync(MapMode.READ, 0, nbytes)

    def wait_nosync():
        # wgpu-py submits an empty command buffer before every READ map (wgpu-native issue 305);
        # its own read_buffer skips that with "READ_NOSYNC" after submitting the copy, as we do.
        stg.map_sync("READ_NOSYNC", 0, nbytes)

    def wait_poll():
        p = stg.map_async(MapMode.READ, 0, nbytes)
        gpu._poll_wait()
        p.sync_wait()

    def copy_out(parts=1):
        m = stg.read_mapped(0, nbytes, copy=False)
        src_u8 = np.frombuffer(m, np.uint8)
        dst = out.view(np.uint8)
        if parts == 1:
            np.copyto(dst, src_u8)
        else:
            def copy_chunk(c, src=src_u8):  # bound now: ruff reads the lambda's name as used after `del`
                np.copyto(dst[c[0]:c[0] + c[1]], src[c[0]:c[0] + c[1]])

            list(pool.map(copy_chunk, chunks(nbytes, parts)))
        del m, src_u8

    def rt(waiter, parts=1, wparts=1):
        (write if wparts == 1 else write_threads)()
        submit_copy()
        waiter()
        copy_out(parts)
        stg.unmap()

    up = gpu.create_buffer(size=nbytes, usage=U.MAP_WRITE | U.COPY_SRC)

    def write_staged():
        # The alternative to write_buffer's per-call staging: a kept MAP_WRITE buffer, mapped
        # (waits while the GPU still copies from it), filled, unmapped, copied by the GPU.
        up.map_sync(MapMode.WRITE, 0, nbytes)
        up.write_mapped(x, 0)
        up.unmap()
        e = gpu.create_command_encoder()
        e.copy_buffer_to_buffer(up, 0, src, 0, nbytes)
        gpu.queue.submit([e.finish()])

    med("write_buffer + submit", lambda: (write(), gpu.queue.submit([])))
    med("write_buffer in 8 threads + submit", lambda: (write_threads(), gpu.queue.submit([])))
    med("kept MAP_WRITE staging: map + write_mapped + unmap + copy + submit", write_staged)
    med("write + submit copy + map_sync (poll thread) + unmap", lambda: (write(), submit_copy(), wait_thread(), stg.unmap()))
    med("write + submit copy + blocking poll + unmap", lambda: (write(), submit_copy(), wait_poll(), stg.unmap()))
    stg.map_sync(MapMode.READ, 0, nbytes)
    med("copy out of mapped memory, 1 thread", lambda: copy_out(1))
    med("copy out of mapped memory, 8 threads", lambda: copy_out(8))
    med("np.empty + copy out, 1 thread (fresh pages)", lambda: np.copyto(np.empty_like(x), out))

    def fresh_threads():
        dst = np.empty_like(x).view(np.uint8)
        list(pool.map(lambda c: np.copyto(dst[c[0]:c[0] + c[1]], xb[c[0]:c[0] + c[1]]), chunks(nbytes, 8)))

    med("np.empty + copy out, 8 threads (fresh pages)", fresh_threads)
    stg.unmap()
    med("round trip: poll thread, 1 thread copies", lambda: rt(wait_thread))
    med("round trip: blocking poll, 1 thread copies", lambda: rt(wait_poll))
    med("round trip: READ_NOSYNC map, 1 thread copies", lambda: rt(wait_nosync))
    med("round trip: blocking poll, 8 thread copies", lambda: rt(wait_poll, 8, 8))
    med("copy d2d via read_buffer (wgpu-py)", lambda: gpu.queue.read_buffer(src))
    k = wk.get_kernel("com.microsoft.QuickGelu")
    med("QuickGelu NumPy round trip (engine)", lambda: k({"X": x}))
    xg = wk.to_gpu(x)
    med("QuickGelu GPU in, NumPy out (engine)", lambda: k({"X": xg}))
    med("QuickGelu NumPy in, GPU out + flush (engine)", lambda: (k({"X": x}, output="gpu"), wk.synchronize()))
    src.destroy()
    stg.destroy()
    up.destroy()

print("host per call at end:", host_per_call(qg, {"X": tiny}), flush=True)
