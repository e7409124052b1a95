"""The test suite's own set-up (tests/conftest.py) cleans up after itself."""

from __future__ import annotations

import os
import subprocess
import sys

from conftest import REPO_ROOT


def test_a_run_leaves_no_temporary_folders(tmp_path):
    # Every process of a run (each xdist worker too) makes a tuning folder, and an XDG_RUNTIME_DIR
    # where none is set: both must go when it exits, or every run leaves them in /tmp.
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    env = {key: value for key, value in os.environ.items() if key != "XDG_RUNTIME_DIR"}
    env["TMPDIR"] = str(scratch)
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/test_errors.py"],
        cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert sorted(path.name for path in scratch.iterdir()) == []



def test_a_forked_child_leaves_its_parents_folders():
    # A forked child that leaves through sys.exit runs the atexit handlers it inherited; in a fresh
    # process that opened no device, so that the child may run them all.
    script = """if True:
        import os, sys
        sys.path.insert(0, "tests")
        import conftest
        tuning_dir = os.environ["WEBGPU_KERNELS_TUNING_DIR"]
        pid = os.fork()
        if pid == 0:
            sys.exit(0)
        os.waitpid(pid, 0)
        print("RESULT", os.path.isdir(tuning_dir))
    """
    proc = subprocess.run([sys.executable, "-c", script], cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)
    assert "RESULT True" in proc.stdout, proc.stdout[-2000:] + proc.stderr[-2000:]
