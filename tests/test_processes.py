"""Kernels, tensors and errors across processes: multiprocessing's spawn, forkserver and fork workers."""

from __future__ import annotations

import multiprocessing
import pickle
import shutil
import subprocess
import sys
import textwrap
from concurrent.futures import ProcessPoolExecutor

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
    pickles as its path and its files' digest, and each worker opens the folder again."""
    xs = [rng.standard_normal(n).astype(np.float32) * 4 for n in (5, 300)]
    with multiprocessing.get_context("spawn").Pool(2) as pool:
        done = pool.starmap(run_kernel, [(folder_kernel, x) for x in xs])
        with pytest.raises(errors.DTypeError) as info:  # a worker's error comes back whole
            pool.apply(run_kernel, (folder_kernel, xs[0].astype(np.int32)))
    for x, (y, root) in zip(xs, done):
        assert root == str(folder_kernel.package.root)
        np.testing.assert_allclose(y, quick_gelu_ref(x), rtol=2e-6, atol=2e-6)
    assert info.value.argument == "X" and "int32" in info.value.received


def test_a_pickled_folder_kernel_opens_once_per_process_and_only_as_it_was(folder_kernel, monkeypatch):
    """A process opens a pickled kernel once, however many tasks carry it; a folder whose files
    changed (or went) since is a PackageError saying so, not other code run silently."""
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
    with pytest.raises(errors.PackageError, match=r"changed after the kernel \(com.microsoft.QuickGelu\) was pickled") as info:
        pickle.loads(pickled)
    assert any("pickled in another process" in note for note in info.value.__notes__)
    with pytest.raises(errors.DigestError, match="sha256"):  # verified when pickled: verified again
        pickle.loads(pickled_verified)
    shutil.rmtree(root)
    with pytest.raises(errors.PackageError, match="not a folder"):
        pickle.loads(pickled)


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
