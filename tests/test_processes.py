"""Kernels, tensors and errors across processes: multiprocessing's spawn, forkserver and fork workers."""

from __future__ import annotations

import multiprocessing
import os
import pickle
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np
import pytest

import webgpu_kernels as wk
from webgpu_kernels import api, errors

from forking import forking


def quick_gelu_ref(x: np.ndarray) -> np.ndarray:
    x64 = x.astype(np.float64)
    return x64 / (1.0 + np.exp(-1.702 * x64))


def run_kernel(kernel: wk.Kernel, x: np.ndarray) -> tuple[np.ndarray, str]:
    return kernel({"X": x})["Y"], str(kernel.package.root)


def run_embedded(x: np.ndarray) -> np.ndarray:
    return wk.get_kernel("com.microsoft.QuickGelu")({"X": x})["Y"]


def returns_one(anything: object) -> int:
    return 1


@pytest.fixture
def folder_kernel(tmp_path) -> wk.Kernel:
    shutil.copytree(wk.get_kernel("com.microsoft.QuickGelu").package.root, tmp_path / "pkg")
    return wk.load_kernel(tmp_path / "pkg")


def test_a_folder_kernel_reaches_spawn_workers_as_its_path(folder_kernel, rng):
    """Pickling a kernel loaded from a folder (a Pool task's argument) had been a TypeError: it
    pickles as its path and its files' digest, and each worker opens the folder again. One worker:
    a second (its own interpreter start and device, 2-3 s on lavapipe) was never sure to get a task,
    and what is checked is what each task gets back."""
    xs = [rng.standard_normal(n).astype(np.float32) * 4 for n in (5, 300)]
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        done = pool.starmap(run_kernel, [(folder_kernel, x) for x in xs])
        with pytest.raises(errors.DTypeError) as info:  # a worker's error comes back whole
            pool.apply(run_kernel, (folder_kernel, xs[0].astype(np.int32)))
    for x, (y, root) in zip(xs, done):
        assert root == str(folder_kernel.package.root)
        np.testing.assert_allclose(y, quick_gelu_ref(x), rtol=2e-6, atol=2e-6)
    assert info.value.argument == "X" and "int32" in info.value.received


def test_a_pickled_folder_kernel_opens_once_per_process_and_only_as_it_was(folder_kernel, monkeypatch):
    """A process opens a pickled kernel once, however many tasks carry it; a folder whose files
    changed (or went) since is a PackageError saying so, not other code run silently, raised where
    the kernel is first used (a call, an attribute), not while unpickling."""
    root = folder_kernel.package.root
    unverified = wk.load_kernel(root, verify_digests=False)
    pickled, pickled_verified = pickle.dumps(unverified), pickle.dumps(folder_kernel)
    first = pickle.loads(pickled)
    assert pickle.loads(pickled) is first and first is not unverified
    assert first.package.root == root and first.tuning_key == unverified.tuning_key
    assert not first.package.is_verified and pickle.loads(pickled_verified).package.is_verified
    template = next(root.glob("*.wgsl.jinja"))
    template.write_text(template.read_text(encoding="utf-8") + "\n// edited\n", encoding="utf-8")
    monkeypatch.setattr(api, "_reopened", {})  # as in a worker that has not opened it yet
    unopened = pickle.loads(pickled)
    assert isinstance(unopened, wk.Kernel) and "changed after the kernel" in repr(unopened)
    with pytest.raises(errors.PackageError, match=r"changed after the kernel \(com.microsoft.QuickGelu\) was pickled") as info:
        unopened({"X": np.ones(4, np.float32)})
    assert any("pickled in another process" in note for note in info.value.__notes__)
    with pytest.raises(errors.PackageError, match="changed after the kernel"):  # any attribute, the same
        _ = unopened.op_id
    assert pickle.loads(pickle.dumps(unopened)) is not unopened  # pickles as the kernel it stands for
    with pytest.raises(errors.DigestError, match="sha256"):  # verified when pickled: verified again
        _ = pickle.loads(pickled_verified).op_id
    shutil.rmtree(root)
    with pytest.raises(errors.PackageError, match="no such folder"):
        _ = pickle.loads(pickled).op_id


def test_a_verified_folder_kernel_is_not_reopened_unverified_once_its_metadata_went(folder_kernel, monkeypatch):
    """A kernel whose folder was checked against metadata.json pickles as such: with that file gone
    (its templates unchanged), the worker had opened the folder unverified, its data files unchecked."""
    assert folder_kernel.package.is_verified
    pickled = pickle.dumps(folder_kernel)
    (folder_kernel.package.root / "metadata.json").unlink()
    monkeypatch.setattr(api, "_reopened", {})
    with pytest.raises(errors.DigestError, match="no metadata.json") as info:
        pickle.loads(pickled)({"X": np.ones(4, np.float32)})
    assert any("pickled in another process" in note for note in info.value.__notes__)


def test_an_unverified_kernel_edited_after_its_first_call_is_not_reopened_as_the_edited_code(folder_kernel, monkeypatch):
    """A folder without metadata.json reads its templates when a call first renders them, and keeps
    them: one edited after that call and before pickling had been digested as edited, so a worker
    ran the edited template while its parent ran the one it had kept (a call that reads no stored
    tuning result, as with WEBGPU_KERNELS_NO_TUNING, had not digested the files yet)."""
    monkeypatch.setenv("WEBGPU_KERNELS_NO_TUNING", "1")
    root = folder_kernel.package.root
    (root / "metadata.json").unlink()
    unverified = wk.load_kernel(root)
    assert not unverified.package.is_verified
    x = np.linspace(-3, 3, 16, dtype=np.float32)
    np.testing.assert_allclose(unverified({"X": x})["Y"], quick_gelu_ref(x), rtol=2e-6, atol=2e-6)
    template = next(root.glob("*.wgsl.jinja"))
    template.write_text(template.read_text(encoding="utf-8") + "\n// edited\n", encoding="utf-8")
    pickled = pickle.dumps(unverified)
    monkeypatch.setattr(api, "_reopened", {})
    with pytest.raises(errors.PackageError, match="changed after the kernel"):
        pickle.loads(pickled)({"X": x})


def edit_template(root: Path) -> None:
    template = next(root.glob("*.wgsl.jinja"))
    template.write_text(template.read_text(encoding="utf-8") + "\n// edited\n", encoding="utf-8")


def test_a_changed_folder_reaches_a_process_pool_executor_caller_as_its_error(folder_kernel):
    """A folder edited after its kernel was pickled: the worker raised the DigestError while it
    unpickled the task, outside any task, so ProcessPoolExecutor said only BrokenProcessPool (the
    error on the worker's stderr) and refused every later task. The error is raised where the
    worker first uses the kernel: the future raises it, message and note intact, and the pool goes on."""
    x = np.linspace(-3, 3, 17, dtype=np.float32)
    edit_template(folder_kernel.package.root)
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        with pytest.raises(errors.DigestError, match=r"quick-gelu\.wgsl\.jinja: sha256 .* does not match") as info:
            pool.submit(run_kernel, folder_kernel, x).result(timeout=120)
        assert pool.submit(returns_one, None).result(timeout=120) == 1
    assert any("pickled in another process" in note for note in info.value.__notes__)


def test_a_changed_folder_reaches_a_multiprocessing_pool_caller_as_its_error(folder_kernel):
    """The same with multiprocessing.Pool, whose worker died unpickling the task: the pool started
    another and the task was lost, so its get() without a timeout waited for good."""
    x = np.linspace(-3, 3, 17, dtype=np.float32)
    unverified = wk.load_kernel(folder_kernel.package.root, verify_digests=False)
    edit_template(unverified.package.root)
    with multiprocessing.get_context("forkserver").Pool(1) as pool:
        with pytest.raises(errors.PackageError, match=r"changed after the kernel \(com.microsoft.QuickGelu\) was pickled") as info:
            pool.apply_async(run_kernel, (unverified, x)).get(timeout=60)
        assert pool.apply_async(returns_one, (None,)).get(timeout=60) == 1
    assert any("pickled in another process" in note for note in info.value.__notes__)


def test_forkserver_workers_after_the_parent_used_its_device(quick_gelu, rng):
    """The parent has run a kernel (its device is open): forkserver workers get a kernel pickled as
    its op id and run it; their errors come back with their context; a GpuTensor is refused in the
    parent, and the pool goes on."""
    x = rng.standard_normal(257).astype(np.float32) * 4
    np.testing.assert_allclose(quick_gelu({"X": x})["Y"], quick_gelu_ref(x), rtol=2e-6, atol=2e-6)
    t = wk.to_gpu(x)
    try:
        with ProcessPoolExecutor(2, mp_context=multiprocessing.get_context("forkserver")) as pool:
            y, _ = pool.submit(run_kernel, quick_gelu, x).result(timeout=120)
            with pytest.raises(errors.RankError) as info:
                pool.submit(run_kernel, wk.get_kernel("com.microsoft.BiasAdd"), x).result(timeout=120)
            with pytest.raises(errors.NotPicklableError, match=r"GpuTensor cannot be pickled.*numpy\(\)"):
                pool.submit(returns_one, t).result(timeout=120)
            assert pool.submit(returns_one, None).result(timeout=120) == 1
    finally:
        t.release()
    np.testing.assert_allclose(y, quick_gelu_ref(x), rtol=2e-6, atol=2e-6)
    assert (info.value.argument, info.value.expected, info.value.received) == ("X", "rank 3", "rank 1 (shape [257])")


FORK_BEFORE_ANY_DEVICE = textwrap.dedent("""
    import multiprocessing, sys
    import numpy as np
    import webgpu_kernels as wk
    sys.path.insert(0, sys.argv[1])
    from test_processes import quick_gelu_ref, run_kernel
    kernel = wk.get_kernel("com.microsoft.QuickGelu")  # loaded, no device opened yet
    x = np.linspace(-4, 4, 33, dtype=np.float32)
    with multiprocessing.get_context("fork").Pool(2) as pool:
        ys = [y for y, _ in pool.starmap(run_kernel, [(kernel, x), (kernel, 2 * x)])]
    ys.append(kernel({"X": x})["Y"])  # and the parent afterwards
    for y, ref in zip(ys, (quick_gelu_ref(x), quick_gelu_ref(2 * x), quick_gelu_ref(x))):
        np.testing.assert_allclose(y, ref, rtol=2e-6, atol=2e-6)
    print("ok")
""")


@forking
def test_fork_workers_of_a_parent_without_a_device_run_its_kernel(request):
    """DataLoader-style fork workers of a parent that loaded a kernel but opened no device yet."""
    done = subprocess.run([sys.executable, "-W", "ignore::DeprecationWarning", "-c", FORK_BEFORE_ANY_DEVICE,
                           str(request.path.parent)], capture_output=True, text=True, timeout=180)  # fmt: skip
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-2000:]


#: `python -m webgpu_kernels ARGS` with Ctrl-C delivered as a terminal delivers it: a suite started
#: in the background by a non-interactive shell hands its children SIGINT ignored.
_CTRL_C_ABLE = r"""
import runpy, signal, sys
signal.signal(signal.SIGINT, signal.default_int_handler)
sys.argv = ["webgpu-kernels", *sys.argv[1:]]
runpy.run_module("webgpu_kernels", run_name="__main__", alter_sys=True)
"""


def _spawned_children(pid: int) -> list[int]:
    """The multiprocessing spawn children of ``pid`` (not its resource tracker), from /proc."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            parent = int(stat.read_text().rsplit(")", 1)[1].split()[1])
            if parent == pid and b"spawn_main" in (stat.parent / "cmdline").read_bytes():
                found.append(int(stat.parent.name))
        except (OSError, IndexError, ValueError):  # a process that ended meanwhile
            continue
    return found


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="finds the spawned child through /proc")
def test_ctrl_c_during_an_isolated_test_is_one_line_and_leaves_no_child(tmp_path):
    """Ctrl-C signals the whole process group: the spawned child, still importing (jsonschema, wgpu),
    printed its own KeyboardInterrupt traceback under the parent's `interrupted` line. Interrupted
    at a few moments after the spawn, the command says `interrupted` alone, exits 130, and its
    child is gone with it (it ignores SIGINT now, so the parent must stop it)."""
    root = shutil.copytree(wk.get_kernel("com.microsoft.QuickGelu").package.root, tmp_path / "pkg")
    for delay in (0.0, 0.1, 0.2, 0.35, 0.5):
        proc = subprocess.Popen([sys.executable, "-c", _CTRL_C_ABLE, "test", str(root), "--timeout", "120"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                start_new_session=True)  # fmt: skip
        try:
            deadline = time.monotonic() + 120
            while not (children := _spawned_children(proc.pid)):
                assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()[1][-2000:]
                time.sleep(0.01)
            time.sleep(delay)
            os.killpg(proc.pid, signal.SIGINT)  # what a terminal's Ctrl-C does
            _, err = proc.communicate(timeout=120)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        assert (proc.returncode, err.strip()) == (130, "interrupted"), f"after {delay} s: {err[-3000:]}"
        deadline = time.monotonic() + 30  # reaped by the parent; an orphan would be init's to reap
        while any(Path(f"/proc/{child}").exists() for child in children) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not any(Path(f"/proc/{child}").exists() for child in children), f"after {delay} s"
