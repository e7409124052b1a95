"""What a child process gets from its parent.

Only the forking thread exists in a child of ``os.fork``: a lock another thread of the parent held
at that moment stays held in the child for good, and the child's first ``get_kernel`` or load
waited for it forever. Modules name such globals here; the child gets new ones.

A spawned child (``package_tests.run_in_child``) gets Ctrl-C too, since a terminal signals the
whole process group; the parent reports it and stops the child, so the child must stay quiet.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any


def fresh_in_child(namespace: dict[str, Any], **factories: Callable[[], Any]) -> None:
    """After a fork, in the child, set ``namespace[name] = factory()`` for each name given."""
    if hasattr(os, "register_at_fork"):  # POSIX
        os.register_at_fork(after_in_child=lambda: namespace.update({n: f() for n, f in factories.items()}))


@contextmanager
def sigint_held_for_spawn() -> Iterator[None]:
    """SIGINT blocked in this thread while a child is spawned, so that the child starts with it
    blocked (its interpreter start and imports included) until :func:`quiet_child` ignores it. A
    SIGINT meanwhile reaches this process once the block ends, raised as usual."""
    if not hasattr(signal, "pthread_sigmask"):  # no signal masks (Windows)
        yield
        return
    from multiprocessing import resource_tracker

    # A spawn starts multiprocessing's resource tracker if it is not running, and that start
    # unblocks SIGINT (rather than restoring the mask), leaving the child open to it.
    resource_tracker.ensure_running()
    # Another thread of this process may take the signal; its handler, run in the main thread,
    # must not raise inside the spawn (the child started but not yet known, so never stopped).
    came: list[int] = []
    main = threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGINT) is not None
    previous = signal.signal(signal.SIGINT, lambda signum, frame: came.append(signum)) if main else None
    before = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, before)
        if main:
            signal.signal(signal.SIGINT, previous)  # runs a pending handler first: `came` is complete
            if came:
                signal.raise_signal(signal.SIGINT)  # as the previous handler would have had it


def quiet_child(target: Callable[..., None], *args: Any) -> None:
    """A spawned child's entry: SIGINT ignored (which also drops one that came while it was
    blocked), then ``target(*args)``."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if hasattr(signal, "pthread_sigmask"):
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    target(*args)
