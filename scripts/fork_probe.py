"""Does forking a process that has an open device break the parent's device? (H200 hang hunt)

    python3 scripts/fork_probe.py [child-work] [uploads]

child-work: none (the child exits at once) | call (the child makes a call, refused as FORKED) |
sysexit (the child exits normally, through the interpreter's teardown, not os._exit: the
suite's test of that hung on the H200; the parent kills a child not ended in 30 s, after printing its
threads' kernel wait channels) | sysexit-fh (the same with faulthandler on in the child: a crash in
the interpreter's own teardown prints its Python stack, one in the C library's exit handlers, after
it, prints nothing) | closefds (the child closes its copies of the /dev/nvidia* and /dev/dri files,
then exits normally: do the drivers' exit handlers reach the parent through those?) | atexit-exit
(a Python atexit handler in the child ends it with os._exit: is skipping the C exit handlers enough?)
The parent then uploads `uploads` 152 MB tables (CLIP's f32 embedding) and makes a call after each;
each step prints as it ends, so a hang shows where it stuck."""

from __future__ import annotations

import faulthandler
import os
import sys
import time
from pathlib import Path

import numpy as np

import webgpu_kernels as wk

if os.environ.get("FORK_PROBE_BACKENDS"):  # e.g. Vulkan: is the OpenGL backend's driver what breaks it?
    from wgpu.backends.wgpu_native.extras import set_instance_extras

    set_instance_extras(backends=os.environ["FORK_PROBE_BACKENDS"].split(","))
child_work = sys.argv[1] if len(sys.argv) > 1 else "none"
uploads = int(sys.argv[2]) if len(sys.argv) > 2 else 3
kernel = wk.get_kernel("com.microsoft.QuickGelu")
x = np.linspace(-3, 3, 4096, dtype=np.float32)
print("before fork:", float(kernel({"X": x})["Y"][-1]), flush=True)
pid = os.fork()
if pid == 0:
    if child_work == "call":
        try:
            kernel({"X": x})
        except wk.errors.DeviceError as exc:
            os.write(1, f"child refused: {str(exc)[:60]}\n".encode())
    if child_work == "closefds":
        for fd in os.listdir("/proc/self/fd"):
            try:
                target = os.readlink(f"/proc/self/fd/{fd}")
            except OSError:
                continue
            if target.startswith(("/dev/nvidia", "/dev/dri")):
                os.write(1, f"child closes fd {fd}: {target}\n".encode())
                os.close(int(fd))
    if child_work == "atexit-exit":
        import atexit

        atexit.register(os._exit, 0)
    if child_work == "sysexit-fh":
        faulthandler.enable()
    if child_work.startswith(("sysexit", "closefds", "atexit")):
        faulthandler.dump_traceback_later(10)  # fires only while the interpreter still runs
        sys.exit(0)
    os._exit(0)
faulthandler.dump_traceback_later(float(os.environ.get("FORK_PROBE_WAIT_S", 60)), exit=True)  # a parent stuck later shows where
start = time.monotonic()
while (status := os.waitpid(pid, os.WNOHANG)) == (0, 0):
    if time.monotonic() - start > 30:
        for task in sorted(Path(f"/proc/{pid}/task").iterdir()):
            state = (task / "stat").read_text().split(") ")[1].split()[0]
            print(f"child thread {task.name}: state {state}, wchan {(task / 'wchan').read_text()!r}", flush=True)
        os.kill(pid, 9)
        status = os.waitpid(pid, 0)
        print("child killed after 30 s", flush=True)
        break
    time.sleep(0.05)
code = status[1]
print(f"child done after {time.monotonic() - start:.2f} s:",
      f"exit {os.WEXITSTATUS(code)}" if os.WIFEXITED(code) else f"signal {os.WTERMSIG(code)}", flush=True)
table = np.random.default_rng(1).standard_normal((49408, 768), dtype=np.float32)
limit = wk.get_device().limits["max-storage-buffer-binding-size"]
if table.nbytes > limit:
    table = np.ascontiguousarray(table[:, :512])
for i in range(uploads):
    t0 = time.perf_counter()
    t = wk.to_gpu(table)
    y = kernel({"X": x})["Y"]
    back = t.numpy()
    print(f"upload {i}: {time.perf_counter() - t0:.2f} s, round trip equal {np.array_equal(back, table)}, call {float(y[-1]):.4f}", flush=True)
    t.release()
print("parent fine", flush=True)
