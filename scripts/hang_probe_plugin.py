"""A pytest plugin for the H200 suite hang (a queue.submit that never returns):
logs each test's start, and every 50 tests the process's GPU-side state, to $HANG_LOG; a test
that runs past $HANG_S seconds dumps every thread's stack and ends the process.

    python3 -m pytest -p hang_probe_plugin ...   (with scripts/ on PYTHONPATH)

$HANG_COPY_THREADS sets buffers.COPY_THREADS (the H200 host's 16 cores give 8 copy threads; this
machine's 2 give 2), to tell whether the parallel write_buffer calls are what leads to the hang."""

from __future__ import annotations

import faulthandler
import gc
import os
import subprocess
import time

_log = open(os.environ.get("HANG_LOG", "hang.log"), "a", buffering=1)  # noqa: SIM115 - the session's log
_count = 0
_t0 = time.monotonic()


if os.environ.get("HANG_COPY_THREADS"):  # host copies on this many threads (buffers.parallel_copy)
    from webgpu_kernels import buffers

    buffers.COPY_THREADS = int(os.environ["HANG_COPY_THREADS"])
    _log.write(f"COPY_THREADS = {buffers.COPY_THREADS}\n")


def _state() -> str:
    from webgpu_kernels import device as dev

    parts = [f"rss {int(open('/proc/self/statm').read().split()[1]) * os.sysconf('SC_PAGE_SIZE') >> 20} MiB"]
    for index, d in list(dev._devices.items()):
        parts.append(f"device {index}: live {d.memory.live_buffers}, pooled {d.memory.pooled_bytes >> 20} MiB")
    wgpu_objects: dict[str, int] = {}
    for o in gc.get_objects():
        name = type(o).__name__
        if name.startswith("GPU"):
            wgpu_objects[name] = wgpu_objects.get(name, 0) + 1
    parts.append("objects " + ", ".join(f"{k} {v}" for k, v in sorted(wgpu_objects.items())))
    parts.append(f"threads {len(os.listdir('/proc/self/task'))}, fds {len(os.listdir('/proc/self/fd'))}")
    try:
        smi = subprocess.run(["nvidia-smi", "--query-gpu=memory.used,utilization.gpu", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=10).stdout.strip()
        parts.append(f"smi {smi}")
    except (OSError, subprocess.SubprocessError):
        pass
    return "; ".join(parts)


def pytest_runtest_logstart(nodeid, location):
    global _count
    _count += 1
    # To the log, not stderr: pytest captures fd 2 during a test, and the capture is lost at exit
    # (a first try that dumped to stderr ended with rc 1 and no stacks).
    faulthandler.dump_traceback_later(float(os.environ.get("HANG_S", "45")), exit=True, file=_log)
    if _count % 50 == 0:
        _log.write(f"-- {_count} state: {_state()}\n")
    _log.write(f"{_count} {time.monotonic() - _t0:.1f} {nodeid}\n")


def pytest_runtest_logfinish(nodeid, location):
    faulthandler.cancel_dump_traceback_later()
