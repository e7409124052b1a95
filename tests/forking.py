"""Tests that fork: run work in a forked child and get its JSON-able result back."""

from __future__ import annotations

import json
import os
import signal
import time

import pytest


def in_forked_child(work, timeout_s: float = 60) -> object:
    """Fork, run ``work()`` in the child and return what it returned (JSON), never running
    pytest's teardown there; a child that does not end within ``timeout_s`` fails the test."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.write(write, json.dumps(work()).encode())
        finally:
            os._exit(0)
    os.close(write)
    deadline, ended = time.monotonic() + timeout_s, False
    while not ended and time.monotonic() < deadline:
        ended = os.waitpid(pid, os.WNOHANG) != (0, 0)
        time.sleep(0.05)
    if not ended:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        pytest.fail("the forked child hung")
    with os.fdopen(read) as pipe:
        return json.loads(pipe.read())


def forking(test):
    """A fork test: POSIX only, and Python 3.12's warning about forking a threaded process (these
    tests fork one on purpose) is not a finding."""
    test = pytest.mark.filterwarnings("ignore:This process .* is multi-threaded:DeprecationWarning")(test)
    return pytest.mark.skipif(not hasattr(os, "fork"), reason="os.fork is POSIX only")(test)
