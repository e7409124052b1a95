"""Run a function on a thread with a large stack: where wgpu-native compiles a package's WGSL.

Its compiler (naga) recurses once per level of the text's structure, and a stack overflow kills
the process. rendering.check_nesting refuses deep brackets, operators and else-if chains before
the compiler sees them, but flat text can be as deep to naga: 40,000 functions each calling the
next, or 45,000 constants each naming the next, in 1 MB, crashed it on the usual 8 MiB stack and
compile on this thread's (`python3 scripts/deep_stack_probe.py`). A text scanner cannot know
every such construct; room on the stack covers what it misses (deep brackets still need the
scanner: 500,000 parentheses crashed even a 1 GiB stack).
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from .forks import fresh_in_child

#: The compile thread's stack: virtual memory, touched only as deep as a compile goes.
STACK_BYTES = 512 << 20

T = TypeVar("T")
_NAME = "webgpu-kernels-deep-stack"

_lock = threading.Lock()
_jobs: queue.SimpleQueue[Any] | None = None
fresh_in_child(globals(), _lock=threading.Lock, _jobs=lambda: None)  # the worker does not survive a fork


def on_deep_stack(fn: Callable[[], T]) -> T:
    """``fn()``, run on the deep-stack thread; its exception is raised here. Where the thread cannot
    be started (a process limit on virtual memory), ``fn()`` runs on the caller's thread."""
    jobs = _worker()
    if jobs is None or threading.current_thread().name == _NAME:  # (on it already: waiting on itself would hang)
        return fn()
    done = threading.Event()
    box: list[tuple[bool, Any]] = []
    jobs.put((fn, done, box))
    done.wait()
    ok, value = box[0]
    if ok:
        return value
    raise value


def _worker() -> queue.SimpleQueue[Any] | None:
    global _jobs
    with _lock:
        if _jobs is None:
            jobs: queue.SimpleQueue[Any] = queue.SimpleQueue()
            previous = threading.stack_size(STACK_BYTES)
            try:
                threading.Thread(target=_serve, args=(jobs,), name=_NAME, daemon=True).start()
            except (RuntimeError, MemoryError):
                return None
            finally:
                threading.stack_size(previous)
            _jobs = jobs
        return _jobs


def _serve(jobs: queue.SimpleQueue[Any]) -> None:
    while True:
        fn, done, box = jobs.get()
        try:
            box.append((True, fn()))
        except BaseException as exc:  # noqa: BLE001 - handed to the caller, whatever it is
            box.append((False, exc))
        done.set()
