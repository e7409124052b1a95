"""Autotuning results (tuning.py) and their use by kernel calls (tuned_choice.py): where the
per-adapter file lives, the record/save/lookup round trip, shape classes, damaged files, and that
a call leaving variant and tunables open follows a stored choice while explicit options win.

Every test gets its own empty tuning folder, an empty module-level cache table and fresh Kernel
objects (``load_kernel`` on the embedded folder), so no tuned choice leaks into other tests.
"""

from __future__ import annotations

import json
import os
import stat
import warnings

import numpy as np
import pytest

import webgpu_kernels as wk
from webgpu_kernels import kernel as kernel_module
from webgpu_kernels import replacing, tuning
from webgpu_kernels.package import embedded_root

QG = "com.microsoft.QuickGelu"
QG_F32 = {"T": "float32"}
N = 4096  # QuickGelu's default selection there is vec4 with WORKGROUP_SIZE 256
X_N = {"X": (N,)}  # its shape class: X=4096
SCALAR_64 = tuning.TunedChoice("scalar", {"WORKGROUP_SIZE": 64}, 1e-5)
#: What calls look entries up by: the op id and a digest of the package's manifest and templates.
QG_KEY = wk.get_kernel(QG).tuning_key
#: For tests of a damaged file's other effects (test_a_damaged_tuning_file_is_said_once... checks the warning).
DAMAGED_FILE_WARNS = pytest.mark.filterwarnings("ignore::webgpu_kernels.TuningFileWarning")


@pytest.fixture
def adapter_file(tuning_dir, device):
    """The tuning file of the test device's adapter."""
    return tuning_dir / f"{tuning.adapter_slug(device.adapter.name, device.adapter.backend)}.json"


@pytest.fixture
def fresh_kernel():
    """A QuickGelu Kernel of its own (empty plan caches), not the shared embedded one."""
    return lambda: wk.load_kernel(embedded_root() / QG)


@pytest.fixture
def plans_run(monkeypatch):
    """Records the execution plan of every kernel call (a spy around the real run_plan)."""
    seen = []
    real = kernel_module.run_plan

    def spy(device, plan, arrays, **kwargs):
        seen.append(plan)
        return real(device, plan, arrays, **kwargs)

    monkeypatch.setattr(kernel_module, "run_plan", spy)
    return seen


def store(path, choice, elements=N, dtypes=QG_F32):
    """Write a tuning file holding one QuickGelu entry, the way `tune` does (record + save)."""
    cache = tuning.TuningCache(path)
    cache.record(QG_KEY, dtypes, {"X": (elements,)}, choice)
    cache.save()


def quick_gelu64(x):
    x = x.astype(np.float64)
    return x / (1.0 + np.exp(-1.702 * x))


def assert_quick_gelu(y, x):
    assert y.shape == x.shape and y.dtype == x.dtype
    np.testing.assert_allclose(y.astype(np.float64), quick_gelu64(x), rtol=1e-5, atol=1e-6)


def grid_of(plan):
    return [p.grid for p in plan.passes]


# --- where the file lives -------------------------------------------------------------------------


def test_tuning_dir_from_env(tmp_path, monkeypatch):
    """WEBGPU_KERNELS_TUNING_DIR wins; else $XDG_CACHE_HOME/webgpu-kernels/tuning; else ~/.cache."""
    monkeypatch.setenv(tuning.CACHE_ENV, str(tmp_path / "mine"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert tuning.tuning_dir() == tmp_path / "mine"
    monkeypatch.delenv(tuning.CACHE_ENV)
    assert tuning.tuning_dir() == tmp_path / "xdg" / "webgpu-kernels" / "tuning"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert tuning.tuning_dir() == tmp_path / "home" / ".cache" / "webgpu-kernels" / "tuning"
    for blank in ("", "  ", "\t\n"):  # empty or blank counts as unset (blank had been a relative folder)
        monkeypatch.setenv(tuning.CACHE_ENV, blank)
        assert tuning.tuning_dir() == tmp_path / "home" / ".cache" / "webgpu-kernels" / "tuning", repr(blank)
    monkeypatch.setenv("XDG_CACHE_HOME", "")  # so does an empty XDG_CACHE_HOME (not a relative path)
    assert tuning.tuning_dir() == tmp_path / "home" / ".cache" / "webgpu-kernels" / "tuning"
    monkeypatch.setenv(tuning.CACHE_ENV, "~/tuning")  # the home folder's, not ./~/tuning
    assert tuning.tuning_dir() == tmp_path / "home" / "tuning"


def test_adapter_slug():
    """One file per adapter and backend, with a file-name-safe lowercase name."""
    assert tuning.adapter_slug("NVIDIA H200", "Vulkan") == "nvidia-h200-vulkan"
    assert tuning.adapter_slug("NVIDIA H200", "D3D12") != tuning.adapter_slug("NVIDIA H200", "Vulkan")
    slug = tuning.adapter_slug("llvmpipe (LLVM 15.0.6, 256 bits)", "Vulkan")
    assert slug.startswith("llvmpipe-llvm-15.0.6-256-bits") and slug.endswith("vulkan")
    assert all(c.isalnum() or c in "._-" for c in slug) and slug == slug.lower()
    assert "/" not in tuning.adapter_slug("a/../b", "x")


def test_cache_for_path_and_sharing(tuning_dir, tmp_path, monkeypatch):
    """cache_for loads each adapter file once; another folder or adapter is another cache."""
    a = tuning.cache_for("GPU A", "Vulkan")
    assert a.path == tuning_dir / "gpu-a-vulkan.json" and a.entries == {}
    assert tuning.cache_for("GPU A", "Vulkan") is a
    assert tuning.cache_for("GPU B", "Vulkan") is not a
    monkeypatch.setenv(tuning.CACHE_ENV, str(tmp_path / "other"))
    b = tuning.cache_for("GPU A", "Vulkan")
    assert b is not a and b.path == tmp_path / "other" / "gpu-a-vulkan.json"


# --- keys and shape classes -------------------------------------------------------------------------


def test_shape_class():
    """Every dimension of every input rounded down to a power of two: [2^k, 2^(k+1)) share a class."""
    assert tuning.shape_class({"X": (4096,)}) == tuning.shape_class({"X": (8191,)}) == "X=4096"
    assert tuning.shape_class({"X": (4095,)}) == "X=2048" and tuning.shape_class({"X": (8192,)}) == "X=8192"
    assert tuning.shape_class({"X": (2, 77, 768), "bias": (768,)}) == "X=2x64x512,bias=512"
    assert tuning.shape_class({"bias": (768,), "X": (3, 127, 1023)}) == "X=2x64x512,bias=512"  # roles sorted
    assert tuning.shape_class({"X": (0, 1)}) == "X=0x1" and tuning.shape_class({"X": ()}) == "X=-"
    # one element count, different rows: a reduction over 100 and over 768 elements are different classes
    assert tuning.shape_class({"X": (1000, 100)}) != tuning.shape_class({"X": (130, 768)})
    assert tuning.shape_class({"X": (100_000,)}) != tuning.shape_class({"X": (100, 1000)})  # rank too


def test_entry_key():
    """Keys name the op, the dtype of every type variable (sorted) and the shape class."""
    assert tuning.entry_key(QG, QG_F32, X_N) == "com.microsoft.QuickGelu|T=float32|X=4096"
    assert tuning.entry_key("op", {"U": "float16", "T": "float32"}, {"X": (5000,)}) == "op|T=float32,U=float16|X=4096"
    assert tuning.entry_key("op", {"T": "float32", "U": "float16"}, {"X": (5000,)}) == tuning.entry_key(
        "op", {"U": "float16", "T": "float32"}, {"X": (8000,)}
    )
    # a call that leaves optional inputs out may take other variants: a key of its own
    assert tuning.entry_key("op", QG_F32, X_N, ("C", "B")) == "op|T=float32|X=4096|without=B,C"
    assert tuning.entry_key("op", QG_F32, X_N, ()) == tuning.entry_key("op", QG_F32, X_N)
    # so may attributes off their defaults (LayerNorm's axis -2 ran twopass, 3.4x slower tuned for it
    # than for axis -1, in the same shape class)
    assert tuning.entry_key("op", QG_F32, X_N, (), {"axis": -2, "eps": [1, 2.5]}) == 'op|T=float32|X=4096|attrs=axis=-2,eps=[1, 2.5]'
    # an attribute given as 2.0 or 2 is one value to a call, so one key
    assert tuning.entry_key("op", QG_F32, X_N, (), {"alpha": 2.0, "v": [1.0]}) == tuning.entry_key(
        "op", QG_F32, X_N, (), {"alpha": 2, "v": [1]})


# --- record, save, lookup ---------------------------------------------------------------------------


def test_record_save_lookup_round_trip(tuning_dir):
    """A recorded choice is found at once, survives save + reload, and is found for nearby sizes
    only (same op, same dtypes, same power-of-two class)."""
    path = tuning_dir / "gpu.json"
    cache = tuning.TuningCache(path)
    assert cache.lookup(QG, QG_F32, X_N) is None
    cache.record(QG, QG_F32, X_N, SCALAR_64)
    assert cache.lookup(QG, QG_F32, X_N) == SCALAR_64
    assert not path.exists()  # record alone writes nothing
    cache.save()
    data = json.loads(path.read_text("utf-8"))
    assert data == {"version": 3, "entries": {
        "com.microsoft.QuickGelu|T=float32|X=4096": {"variant": "scalar", "tunables": {"WORKGROUP_SIZE": 64},
                                                   "median_s": 1e-5}}}  # fmt: skip
    # no temporary file left (the lock file may stay: filelock leaves it on POSIX)
    assert sorted(p.name for p in tuning_dir.iterdir() if p.name != tuning.LOCK_NAME) == ["gpu.json"]

    again = tuning.TuningCache(path)
    for elements in (4096, 4097, 6000, 8191):  # the same class
        assert again.lookup(QG, QG_F32, {"X": (elements,)}) == SCALAR_64
    for elements in (4095, 2048, 8192, 1 << 20):  # other classes
        assert again.lookup(QG, QG_F32, {"X": (elements,)}) is None
    assert again.lookup(QG, QG_F32, {"X": (64, 64)}) is None  # 4096 elements, another shape
    assert again.lookup(QG, {"T": "float16"}, X_N) is None
    assert again.lookup("com.microsoft.BiasAdd", QG_F32, X_N) is None


@pytest.mark.skipif(os.name != "posix", reason="POSIX permissions")
def test_a_saved_tuning_file_has_the_umasks_permissions_or_keeps_its_own(tuning_dir):
    """A tuning folder shared by a team or a CI cache is read by other users: the file had been
    created 0600 by its temporary file, whatever the umask. An existing file keeps its mode."""
    path = tuning_dir / "gpu.json"
    old_umask = os.umask(0o022)
    try:
        cache = tuning.TuningCache(path)
        cache.record(QG, QG_F32, X_N, SCALAR_64)
        cache.save()
        assert stat.S_IMODE(path.stat().st_mode) == 0o644
        path.chmod(0o640)
        cache.record(QG, QG_F32, {"X": (1 << 20,)}, SCALAR_64)
        cache.save()
        assert stat.S_IMODE(path.stat().st_mode) == 0o640
        assert len(json.loads(path.read_text("utf-8"))["entries"]) == 2
    finally:
        os.umask(old_umask)


def test_record_overwrites_and_lookup_copies(tuning_dir):
    """A later record for the same key replaces the entry; a looked-up choice is the caller's copy."""
    cache = tuning.TuningCache(tuning_dir / "gpu.json")
    cache.record(QG, QG_F32, X_N, SCALAR_64)
    cache.record(QG, QG_F32, {"X": (5000,)}, tuning.TunedChoice("vec4_tail", {"WORKGROUP_SIZE": 128}, 2e-5))
    found = cache.lookup(QG, QG_F32, X_N)
    assert found == tuning.TunedChoice("vec4_tail", {"WORKGROUP_SIZE": 128}, 2e-5)
    found.tunables["WORKGROUP_SIZE"] = 1
    assert cache.lookup(QG, QG_F32, X_N).tunables == {"WORKGROUP_SIZE": 128}
    cache.save()
    assert len(json.loads(cache.path.read_text("utf-8"))["entries"]) == 1


def test_no_tuning_env(tuning_dir, monkeypatch):
    """WEBGPU_KERNELS_NO_TUNING's values: on turns stored results off, off and unset leave them on."""
    monkeypatch.setenv(tuning.DISABLE_ENV, "1")
    assert tuning.disabled()
    monkeypatch.delenv(tuning.DISABLE_ENV)
    assert not tuning.disabled()
    for off in ("0", "false", "no", "", " Off "):  # any non-empty value used to turn tuning off
        monkeypatch.setenv(tuning.DISABLE_ENV, off)
        assert not tuning.disabled(), off
    monkeypatch.setenv(tuning.DISABLE_ENV, "maybe")  # had silently meant "off", as $..._POOL_MB=lots is refused
    with pytest.raises(wk.InputError, match=r"argument '\$WEBGPU_KERNELS_NO_TUNING': expected 1, on, yes or true, "
                                            r"or 0, off, no or false, got 'maybe'"):  # fmt: skip
        tuning.disabled()


@DAMAGED_FILE_WARNS
@pytest.mark.parametrize(
    "content",
    [b"{not json", b"", b"[1, 2]", b'"entries"', b"\xff\xfe{}", b'{"entries": "abc"}', b"null",
     b"[" * 200_000 + b"]" * 200_000, b'{"pad": "' + b"x" * (9 << 20) + b'"}'],
    ids=["syntax", "empty", "list", "string", "not-utf8", "entries-string", "null", "deep (a RecursionError)",
         "past 8 MiB"],
)
def test_corrupt_file_is_ignored(adapter_file, fresh_kernel, plans_run, content):
    """A damaged tuning file loads as empty: calls use the default selection, and the next save
    replaces it with a valid file."""
    adapter_file.parent.mkdir(parents=True)
    adapter_file.write_bytes(content)
    cache = tuning.TuningCache(adapter_file)
    assert cache.entries == {} and cache.lookup(QG, QG_F32, X_N) is None
    x = np.random.default_rng(0).standard_normal(N).astype(np.float32)
    assert_quick_gelu(fresh_kernel()({"X": x})["Y"], x)
    assert plans_run[-1].variant == "vec4"
    cache.record(QG, QG_F32, X_N, SCALAR_64)
    cache.save()
    assert tuning.TuningCache(adapter_file).lookup(QG, QG_F32, X_N) == SCALAR_64


@DAMAGED_FILE_WARNS
@pytest.mark.parametrize(
    "entries",
    [[1], {"com.microsoft.QuickGelu|T=float32|X=4096": "scalar"},
     {"com.microsoft.QuickGelu|T=float32|X=4096": {"tunables": {"WORKGROUP_SIZE": 64}}},
     {"com.microsoft.QuickGelu|T=float32|X=4096": {"variant": "scalar", "tunables": [["WORKGROUP_SIZE"]]}}],
    ids=["entries-list", "entry-string", "entry-without-variant", "tunables-list"],
)  # fmt: skip
def test_malformed_entries_are_ignored(adapter_file, fresh_kernel, entries):
    """A hand-edited or foreign file with well-formed JSON but malformed entries must not break calls."""
    adapter_file.parent.mkdir(parents=True)
    adapter_file.write_text(json.dumps({"version": tuning.FILE_VERSION, "entries": entries}), "utf-8")
    x = np.linspace(-4, 4, N, dtype=np.float32)
    assert_quick_gelu(fresh_kernel()({"X": x})["Y"], x)


@DAMAGED_FILE_WARNS
def test_other_version_file_is_ignored(adapter_file, fresh_kernel, plans_run):
    """A tuning file of another format version is not trusted."""
    adapter_file.parent.mkdir(parents=True)
    adapter_file.write_text(json.dumps({"version": 1, "entries": {tuning.entry_key(QG_KEY, QG_F32, X_N): {
        "variant": "scalar", "tunables": {"WORKGROUP_SIZE": 64}, "median_s": 1e-5}}}), "utf-8")  # fmt: skip
    x = np.linspace(-4, 4, N, dtype=np.float32)
    assert_quick_gelu(fresh_kernel()({"X": x})["Y"], x)
    assert plans_run[-1].variant == "vec4"


GOOD_ENTRY = {"variant": "scalar", "tunables": {"WORKGROUP_SIZE": 64}, "median_s": 1e-5}
DAMAGED = {  # what the file holds -> what the warning says is wrong with it
    "syntax": (b"{not json", "invalid JSON at line 1 column 2"),
    "not-utf8": (b"\xff\xfe{}", "not UTF-8 text"),
    "list": (b"[1, 2]", "not a JSON object with 'version' and 'entries'"),
    "other-version": (json.dumps({"version": 2, "entries": {}}).encode(), "written by another release (file version 2"),
    "entries-list": (json.dumps({"version": 3, "entries": [1]}).encode(), "its 'entries' is not a JSON object"),
}


@pytest.mark.parametrize("content, said", DAMAGED.values(), ids=DAMAGED.keys())
def test_a_damaged_tuning_file_is_said_once_not_ignored_silently(adapter_file, fresh_kernel, plans_run, content, said):
    """A tuning file that does not parse, or that another release wrote, was ignored without a word:
    calls ran the defaults, and whoever had tuned for an hour never learnt why nothing got faster.
    The first call that reads it warns, naming the file, what is wrong and what to do; once per file
    and process (a cache loaded again for the same file says nothing more)."""
    adapter_file.parent.mkdir(parents=True)
    adapter_file.write_bytes(content)
    x = np.linspace(-4, 4, N, dtype=np.float32)
    with pytest.warns(wk.TuningFileWarning) as caught:
        assert_quick_gelu(fresh_kernel()({"X": x})["Y"], x)
    (warning,) = [w for w in caught if issubclass(w.category, wk.TuningFileWarning)]
    assert warning.filename == __file__, warning.filename  # the user's call, not tuning.py
    text = str(warning.message)
    assert str(adapter_file) in text and said in text, text
    assert "webgpu-kernels tune" in text and tuning.BACKUP_SUFFIX in text, text  # what to do
    assert plans_run[-1].variant == "vec4"
    tuning._caches.clear()  # read again, as after $WEBGPU_KERNELS_TUNING_DIR went elsewhere and back
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fresh_kernel()({"X": x})


def test_a_save_over_a_damaged_file_clears_its_problem(adapter_file):
    """A save moves the damaged file aside and writes a good one: the cache no longer holds the
    problem, which a later bench in the same process had printed again about the new file."""
    adapter_file.parent.mkdir(parents=True)
    adapter_file.write_bytes(b"{not json")
    with pytest.warns(wk.TuningFileWarning):
        cache = tuning.TuningCache(adapter_file)
    assert cache.problem is not None
    cache.record(QG_KEY, QG_F32, X_N, tuning.TunedChoice(**GOOD_ENTRY))
    cache.save()
    assert cache.backup is not None and cache.backup.read_bytes() == b"{not json"
    assert cache.problem is None
    assert tuning.TuningCache(adapter_file).problem is None  # and the file on disk is a good one


def test_a_file_damaged_again_after_a_save_is_said_again(adapter_file):
    """A save writes a good file; the same damage found again later in the process is news, which
    the (file, problem) remembered from the first warning had kept quiet."""
    adapter_file.parent.mkdir(parents=True)
    adapter_file.write_bytes(b"{not json")
    with pytest.warns(wk.TuningFileWarning, match="invalid JSON"):
        cache = tuning.TuningCache(adapter_file)
    cache.record(QG_KEY, QG_F32, X_N, tuning.TunedChoice(**GOOD_ENTRY))
    cache.save()
    adapter_file.write_bytes(b"{not json")  # damaged the same way again
    with pytest.warns(wk.TuningFileWarning, match="invalid JSON"):
        tuning.TuningCache(adapter_file)
    with warnings.catch_warnings():  # and said once again, not at every load
        warnings.simplefilter("error")
        tuning.TuningCache(adapter_file)


def test_the_good_entries_of_a_file_with_a_malformed_one_apply_and_the_rest_is_said(adapter_file, fresh_kernel,
                                                                                     plans_run):  # fmt: skip
    """One hand-edited entry gone wrong ("median_s": "1e-5") dropped that entry without a word."""
    adapter_file.parent.mkdir(parents=True)
    bad = "com.microsoft.QuickGelu@0|T=float32|X=64"
    adapter_file.write_text(json.dumps({"version": 3, "entries": {
        tuning.entry_key(QG_KEY, QG_F32, X_N): GOOD_ENTRY, bad: {**GOOD_ENTRY, "median_s": "1e-5"}}}), "utf-8")  # fmt: skip
    x = np.linspace(-4, 4, N, dtype=np.float32)
    with pytest.warns(wk.TuningFileWarning, match=r"1 of its 2 entries is malformed and ignored") as caught:
        assert_quick_gelu(fresh_kernel()({"X": x})["Y"], x)
    text = str(next(w.message for w in caught if issubclass(w.category, wk.TuningFileWarning)))
    assert str(adapter_file) in text and repr(bad) in text, text
    assert plans_run[-1].variant == "scalar"  # the good entry still applies


def test_a_tuning_file_that_cannot_be_read_is_said(adapter_file, fresh_kernel, monkeypatch):
    """A folder in the file's place, or a file this user may not read (emulated as root, whom
    os.access never refuses), was ignored without a word."""
    adapter_file.mkdir(parents=True)
    x = np.linspace(-4, 4, N, dtype=np.float32)
    with pytest.warns(wk.TuningFileWarning, match="cannot read: Is a directory") as caught:
        fresh_kernel()({"X": x})
    assert str(adapter_file) in str(caught[0].message) and tuning.CACHE_ENV in str(caught[0].message)

    adapter_file.rmdir()
    adapter_file.write_text(json.dumps({"version": 3, "entries": {}}), "utf-8")
    monkeypatch.setattr(tuning.os, "access", lambda p, mode: str(p) != str(adapter_file))  # as a user it is not
    tuning._caches.clear()
    with pytest.warns(wk.TuningFileWarning, match="this user cannot read it") as caught:
        fresh_kernel()({"X": x})
    assert tuning.CACHE_ENV in str(caught[0].message)


def test_a_tuning_file_linked_to_nothing_is_said_as_such(adapter_file, fresh_kernel):
    """A symlink to a missing file was said to be a 'file not found in the package': the words of
    a package's file, about a tuning file."""
    adapter_file.parent.mkdir(parents=True)
    adapter_file.symlink_to(adapter_file.parent / "elsewhere.json")
    x = np.linspace(-4, 4, N, dtype=np.float32)
    with pytest.warns(wk.TuningFileWarning, match="a symbolic link to a missing file") as caught:
        fresh_kernel()({"X": x})
    text = str(caught[0].message)
    assert "package" not in text and tuning.CACHE_ENV in text, text


@pytest.mark.parametrize("under", ["", "tuning"], ids=["the-file", "a-folder-under-it"])
def test_a_tuning_dir_that_is_a_regular_file_is_said_once_and_calls_run(tmp_path, monkeypatch, fresh_kernel, plans_run,
                                                                        under):  # fmt: skip
    """$WEBGPU_KERNELS_TUNING_DIR naming a regular file (or a path under one): tune refused it, but
    calls ignored every stored result without a word. The first call warns, naming the variable,
    its value and that a folder is expected; the call still runs, and the warning is said once."""
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("", "utf-8")
    value = str(blocker / under) if under else str(blocker)
    monkeypatch.setenv(tuning.CACHE_ENV, value)
    monkeypatch.delenv(tuning.DISABLE_ENV, raising=False)
    monkeypatch.setattr(tuning, "_caches", {})
    x = np.linspace(-4, 4, N, dtype=np.float32)
    with pytest.warns(wk.TuningFileWarning) as caught:
        assert_quick_gelu(fresh_kernel()({"X": x})["Y"], x)
    (warning,) = [w for w in caught if issubclass(w.category, wk.TuningFileWarning)]
    assert warning.filename == __file__, warning.filename  # the user's call
    text = str(warning.message)
    assert f"${tuning.CACHE_ENV} ({value!r})" in text and "a regular file" in text, text
    assert "a folder is expected" in text and "calls run the manifests' own selection" in text, text
    assert plans_run[-1].variant == "vec4"  # the manifest's own selection
    tuning._caches.clear()  # read again, and another adapter's file in the same folder: no second word
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert_quick_gelu(fresh_kernel()({"X": x})["Y"], x)
        assert tuning.cache_for("Another GPU", "vulkan").entries == {}


def test_no_tuning_file_or_a_good_one_is_no_warning(adapter_file, fresh_kernel):
    """Never having tuned is no problem to warn of, nor is a file `tune` wrote."""
    x = np.linspace(-4, 4, N, dtype=np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fresh_kernel()({"X": x})
        store(adapter_file, SCALAR_64)
        tuning._caches.clear()
        fresh_kernel()({"X": x})


def test_the_tuning_warning_is_raised_outside_the_cache_table_lock(adapter_file, device):
    """The warning of a damaged file was raised while cache_for held the lock every first call of a
    shape takes: a warning handler that was slow, or that reached the library from another thread,
    held every other thread's first call back (one calling it on its own thread deadlocked)."""
    import threading

    adapter_file.parent.mkdir(parents=True)
    adapter_file.write_bytes(b"{not json")
    waited: list[bool] = []  # whether another thread's cache_for was still waiting after 20 s

    def handler(message, category, filename, lineno, file=None, line=None):
        other = threading.Thread(target=lambda: tuning.cache_for("another adapter", "vulkan"), daemon=True)
        other.start()
        other.join(20)
        waited.append(other.is_alive())

    with warnings.catch_warnings():
        warnings.simplefilter("always")
        warnings.showwarning = handler  # restored by catch_warnings
        cache = tuning.cache_for(device.adapter.name, device.adapter.backend)
    assert cache.problem is not None and waited == [False]


def test_a_damaged_tuning_file_is_said_once_by_threads_loading_it_at_once(adapter_file, device):
    """Threads whose first calls load the file together say its problem once between them."""
    import threading
    from concurrent.futures import ThreadPoolExecutor

    adapter_file.parent.mkdir(parents=True)
    adapter_file.write_bytes(b"{not json")
    barrier = threading.Barrier(8)

    def load(_):
        barrier.wait()
        return tuning.cache_for(device.adapter.name, device.adapter.backend)

    with warnings.catch_warnings(record=True) as caught, ThreadPoolExecutor(8) as pool:
        warnings.simplefilter("always")
        caches = list(pool.map(load, range(8)))
    assert len({id(c) for c in caches}) == 1
    assert len([w for w in caught if issubclass(w.category, wk.TuningFileWarning)]) == 1


def test_a_damaged_tuning_file_is_not_said_while_tuning_is_off(adapter_file, fresh_kernel, plans_run, monkeypatch):
    """$WEBGPU_KERNELS_NO_TUNING turns stored results off: a damaged file no call would read had
    still warned, and failed the first call of a suite run with warnings as errors (the switch
    that keeps a user's tuning file out of it). Once tuning is on again, the first call says it."""
    adapter_file.parent.mkdir(parents=True)
    adapter_file.write_bytes(b"{not json")
    monkeypatch.setenv(tuning.DISABLE_ENV, "1")
    x = np.linspace(-4, 4, N, dtype=np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert_quick_gelu(fresh_kernel()({"X": x})["Y"], x)
    assert plans_run[-1].variant == "vec4"
    monkeypatch.delenv(tuning.DISABLE_ENV)
    with pytest.warns(wk.TuningFileWarning, match="invalid JSON"):
        fresh_kernel()({"X": x})


# --- kernel calls follow the stored choice -------------------------------------------------------------


def test_call_uses_tuned_choice(adapter_file, fresh_kernel, plans_run):
    """A call without variant/tunables runs the stored variant and tunables (scalar, 64-wide
    workgroups: 64 workgroups for 4096 elements), nearby sizes too, and still computes QuickGelu."""
    store(adapter_file, SCALAR_64)
    k = fresh_kernel()
    rng = np.random.default_rng(1)
    x = rng.standard_normal(4096).astype(np.float32) * 4
    assert_quick_gelu(k({"X": x})["Y"], x)
    tuned = plans_run[-1]
    assert tuned.variant == "scalar" and grid_of(tuned) == [(64, 1, 1)]
    # The very plan an explicit request for that choice gets.
    assert k.plan({"X": x}, variant="scalar", tunables={"WORKGROUP_SIZE": 64})[1] is tuned
    # Again (the cached fast path) and as GPU output.
    assert_quick_gelu(k({"X": x})["Y"], x)
    y = k({"X": x}, output="gpu")["Y"]
    assert_quick_gelu(y.numpy(), x)
    y.release()
    assert [p.variant for p in plans_run[-2:]] == ["scalar", "scalar"]
    # 6000 elements: same shape class, so the same choice (ceil(6000 / 64) = 94 workgroups).
    x2 = rng.standard_normal(6000).astype(np.float32)
    assert_quick_gelu(k({"X": x2})["Y"], x2)
    assert plans_run[-1].variant == "scalar" and grid_of(plans_run[-1]) == [(94, 1, 1)]
    # 8192 elements: another class, no entry: the manifest's own selection (vec4, 256 wide).
    x3 = rng.standard_normal(8192).astype(np.float32)
    assert_quick_gelu(k({"X": x3})["Y"], x3)
    assert plans_run[-1].variant == "vec4" and grid_of(plans_run[-1]) == [(8, 1, 1)]
    # 64x64, 4096 elements too, but another shape: not what was tuned
    x4 = rng.standard_normal((64, 64)).astype(np.float32)
    assert_quick_gelu(k({"X": x4})["Y"], x4)
    assert plans_run[-1].variant == "vec4"


def test_a_float32_attribute_finds_the_result_tuned_for_the_same_number(adapter_file, fresh_kernel, plans_run):
    """np.float32(1.702) is QuickGelu's default alpha to the GPU, but checked it is 1.7020000219345093,
    which had been an attribute off its default: such a call missed the result tuned for the default,
    and a result tuned for it (from a bench.json that wrote that float) missed the default's calls."""
    store(adapter_file, SCALAR_64)
    k = fresh_kernel()
    x = np.random.default_rng(2).standard_normal(4096).astype(np.float32)
    for alpha in (np.float32(1.702), float(np.float32(1.702)), np.float64(1.702)):
        assert k.tuning_class({"X": x}, {"alpha": alpha}) == k.tuning_class({"X": x}), alpha
        assert_quick_gelu(k({"X": x}, attrs={"alpha": alpha})["Y"], x)
        assert plans_run[-1].variant == "scalar", alpha
    other = k.tuning_class({"X": x}, {"alpha": np.float32(1.5)})
    assert other[3] == {"alpha": 1.5}  # another number is still off the default
    # a key written from the float32's float64 value is the default's key
    assert tuning.entry_key(QG, QG_F32, X_N, (), {"alpha": 1.7020000219345093, "v": [np.float32(0.1).item()]}) == (
        tuning.entry_key(QG, QG_F32, X_N, (), {"alpha": 1.702, "v": [0.1]}))


def test_an_entry_keyed_by_an_older_releases_float_is_found(adapter_file, fresh_kernel, plans_run):
    """Keys write a float attribute as the shortest decimal of its float32 (canonical_attr); an entry
    an older release wrote as alpha=0.3333333333333333 was found by no call once keys became
    alpha=0.33333334. Keys are read as the current rules write them, and a save writes them so."""
    old_key = f"{tuning.entry_key(QG_KEY, QG_F32, X_N)}|attrs=alpha=0.3333333333333333"
    assert tuning.entry_key(QG_KEY, QG_F32, X_N, (), {"alpha": 1 / 3}) != old_key  # what calls look up now
    adapter_file.parent.mkdir(parents=True)
    adapter_file.write_text(json.dumps({"version": 3, "entries": {old_key: GOOD_ENTRY}}), "utf-8")
    x = np.linspace(-4, 4, N, dtype=np.float32)
    y = fresh_kernel()({"X": x}, attrs={"alpha": 1 / 3})["Y"]
    np.testing.assert_allclose(y, x / (1 + np.exp(-x.astype(np.float64) / 3)), rtol=1e-5, atol=1e-6)
    assert plans_run[-1].variant == "scalar" and grid_of(plans_run[-1]) == [(64, 1, 1)]
    cache = tuning.cache_for(wk.get_device().adapter.name, wk.get_device().adapter.backend)
    cache.save()
    assert list(json.loads(adapter_file.read_text("utf-8"))["entries"]) == [
        tuning.entry_key(QG_KEY, QG_F32, X_N, (), {"alpha": 1 / 3})]


def test_old_keys_that_read_as_one_keep_one_entry():
    """Two keys that read as one (an old float and the current key, or two old floats of one
    float32): the current key's entry wins (written under the rules calls use), else the fastest.
    A key whose attributes do not parse is kept as it was."""
    head = "op@1|T=float32|X=4096|attrs="
    now, old, older = head + "alpha=0.33333334", head + "alpha=0.3333333333333333", head + "alpha=0.333333333"
    fast, slow = {**GOOD_ENTRY, "median_s": 1e-6}, {**GOOD_ENTRY, "variant": "vec4", "median_s": 2e-6}
    assert tuning._canonical_entries({old: fast, now: slow}) == {now: slow}
    assert tuning._canonical_entries({now: slow, old: fast}) == {now: slow}
    assert tuning._canonical_entries({old: slow, older: fast}) == {now: fast}
    assert tuning._canonical_entries({older: fast, old: slow}) == {now: fast}
    many = head + 'eps=[1.0, 0.1],mode="a,b=c",n=2.0'  # lists, a string holding the separators, 2.0 as 2
    assert tuning._canonical_entries({many: fast}) == {head + 'eps=[1, 0.1],mode="a,b=c",n=2': fast}
    for odd in (head + "alpha=", head + "alpha=0.5,", head + "=1", head + "alpha=0.5 beta=1", "op@1|T=float32|X=4096"):
        assert tuning._canonical_entries({odd: fast}) == {odd: fast}


def test_a_result_recorded_later_applies_to_shapes_already_run(adapter_file, fresh_kernel, plans_run, device):
    """A kernel that already ran a shape follows a tuning result recorded afterwards in the same
    process (the per-call plan cache is keyed by the tuning generation)."""
    k = fresh_kernel()
    x = np.random.default_rng(3).standard_normal(N).astype(np.float32)
    assert_quick_gelu(k({"X": x})["Y"], x)
    assert plans_run[-1].variant == "vec4"
    cache = tuning.cache_for(device.adapter.name, device.adapter.backend)
    cache.record(QG_KEY, QG_F32, X_N, SCALAR_64)
    assert_quick_gelu(k({"X": x})["Y"], x)
    assert plans_run[-1].variant == "scalar" and grid_of(plans_run[-1]) == [(64, 1, 1)]


def test_explicit_options_override_tuned_choice(adapter_file, fresh_kernel, plans_run):
    """variant= or tunables= given by the caller beat the stored choice."""
    store(adapter_file, SCALAR_64)
    k = fresh_kernel()
    x = np.linspace(-6, 6, N, dtype=np.float32)
    assert_quick_gelu(k({"X": x}, variant="vec4")["Y"], x)
    assert plans_run[-1].variant == "vec4" and grid_of(plans_run[-1]) == [(4, 1, 1)]  # 1024 vec4s / 256
    assert_quick_gelu(k({"X": x}, tunables={"WORKGROUP_SIZE": 128})["Y"], x)
    assert plans_run[-1].variant == "vec4" and grid_of(plans_run[-1]) == [(8, 1, 1)]  # default variant, 128 wide
    assert_quick_gelu(k({"X": x}, variant="vec4_tail", tunables={"WORKGROUP_SIZE": 256})["Y"], x)
    assert plans_run[-1].variant == "vec4_tail"
    # The open call still follows the stored choice afterwards.
    assert_quick_gelu(k({"X": x})["Y"], x)
    assert plans_run[-1].variant == "scalar"


def test_plan_reports_default_selection(adapter_file, fresh_kernel):
    """Kernel.plan without options gives the manifest's default selection even when a tuned
    choice exists: `bench` times that as its main figure and the tuned choice separately."""
    store(adapter_file, SCALAR_64)
    _, plan = fresh_kernel().plan({"X": np.zeros(N, np.float32)})
    assert plan.variant == "vec4"


def test_tuned_choice_is_per_dtype(adapter_file, fresh_kernel, plans_run, need_dtype):
    """A float32 entry does not steer float16 calls of the same size."""
    need_dtype(np.float16)
    store(adapter_file, SCALAR_64)
    x = np.linspace(-3, 3, N).astype(np.float16)
    y = fresh_kernel()({"X": x})["Y"]
    assert y.dtype == np.float16
    np.testing.assert_allclose(y.astype(np.float64), quick_gelu64(x), rtol=2e-3, atol=1e-3)
    assert plans_run[-1].variant == "vec4"


def test_no_tuning_env_restores_default(adapter_file, fresh_kernel, plans_run, monkeypatch):
    """With WEBGPU_KERNELS_NO_TUNING set, a fresh kernel ignores the stored choice, which applies
    again once it is unset (nothing forgotten)."""
    store(adapter_file, SCALAR_64)
    monkeypatch.setenv(tuning.DISABLE_ENV, "1")
    x = np.linspace(-3, 3, N, dtype=np.float32)
    assert_quick_gelu(fresh_kernel()({"X": x})["Y"], x)
    assert plans_run[-1].variant == "vec4"
    monkeypatch.delenv(tuning.DISABLE_ENV)
    assert_quick_gelu(fresh_kernel()({"X": x})["Y"], x)
    assert plans_run[-1].variant == "scalar"


@pytest.mark.parametrize(
    "entry",
    [{"variant": "no-such-variant", "tunables": {}, "median_s": 1e-5},
     {"variant": "vec4", "tunables": {"WORKGROUP_SIZE": 1 << 20}, "median_s": 1e-5},
     {"variant": "scalar", "tunables": {"NO_SUCH_TUNABLE": 3}, "median_s": 1e-5}],
    ids=["unknown-variant", "workgroup-too-large", "unknown-tunable"],
)  # fmt: skip
def test_stale_entry_falls_back(adapter_file, fresh_kernel, plans_run, entry):
    """An entry the kernel cannot honour (a variant it lacks, tunables it refuses) is skipped."""
    adapter_file.parent.mkdir(parents=True)
    adapter_file.write_text(json.dumps({"version": tuning.FILE_VERSION, "entries": {tuning.entry_key(QG_KEY, QG_F32, X_N): entry}}), "utf-8")
    x = np.linspace(-5, 5, N, dtype=np.float32)
    assert_quick_gelu(fresh_kernel()({"X": x})["Y"], x)
    assert plans_run[-1].variant == "vec4" and grid_of(plans_run[-1]) == [(4, 1, 1)]


def test_variant_inapplicable_to_call_falls_back(adapter_file, fresh_kernel, plans_run):
    """An entry naming vec4 is ignored for a size vec4 cannot handle (4097 is not a multiple of 4)."""
    store(adapter_file, tuning.TunedChoice("vec4", {"WORKGROUP_SIZE": 64}, 1e-5))
    x = np.linspace(-5, 5, N + 1, dtype=np.float32)
    assert_quick_gelu(fresh_kernel()({"X": x})["Y"], x)
    assert plans_run[-1].variant == "vec4_tail"


def test_empty_tunables_follow_the_stored_choice_like_none(adapter_file, fresh_kernel, plans_run):
    """tunables={} (no override, as the CLI passes) shared a plan key with None but skipped the
    tuning lookup, so whichever came first decided for both."""
    store(adapter_file, SCALAR_64)
    x = np.linspace(-4, 4, N, dtype=np.float32)
    k = fresh_kernel()
    for tunables in ({}, None):
        assert_quick_gelu(k({"X": x}, tunables=tunables)["Y"], x)
        assert plans_run[-1].variant == "scalar", tunables
    assert k.plan({"X": x}, tuned=True)[1].variant == "scalar" and k.plan({"X": x})[1].variant == "vec4"


def test_tuning_class_of_a_call():
    """What calls, `bench` and `tune` all key results by: bound dtypes (a one-type U included), the
    inputs' shapes, optional inputs left out, attributes off their defaults (axis=-1 is the default)."""
    from conftest import PACKAGES_DIR

    layer_norm = wk.load_kernel(PACKAGES_DIR / "demo.LayerNorm")
    x, s = wk.TensorMeta((2, 1024, 256), "float16"), wk.TensorMeta((256,), "float16")
    f16 = {"T": "float16", "U": "float32"}
    shapes = {"X": (2, 1024, 256), "Scale": (256,)}
    assert layer_norm.tuning_class({"X": x, "Scale": s, "B": s}) == (f16, {**shapes, "B": (256,)}, (), {})
    assert layer_norm.tuning_class({"X": x, "Scale": s}, {"axis": -1}) == (f16, shapes, ("B",), {})
    whole = wk.TensorMeta((1024, 256), "float16")
    assert layer_norm.tuning_class({"X": x, "Scale": whole}, {"axis": -2}) == (
        f16, {"X": (2, 1024, 256), "Scale": (1024, 256)}, ("B",), {"axis": -2})


def test_shapes_of_numpy_integers_give_the_same_answers():
    """Shape-only inputs whose dimensions are NumPy integers (a shape read from an array) pass the
    contract; tuning_class, explain and render reached tuning.shape_class with them unconverted and
    raised a raw AttributeError (int.bit_length)."""
    qg = wk.get_kernel("com.microsoft.QuickGelu")
    shape = tuple(np.array([2, 3, 8]))
    assert qg.tuning_class({"X": (shape, "float32")}) == qg.tuning_class({"X": ((2, 3, 8), "float32")})
    assert all(type(d) is int for d in qg.tuning_class({"X": (shape, "float32")})[1]["X"])
    assert qg.explain({"X": wk.TensorMeta(shape, "float32")}).chosen == qg.explain({"X": ((2, 3, 8), "float32")}).chosen
    assert qg.render({"X": (shape, "float32")}) == qg.render({"X": ((2, 3, 8), "float32")})


def test_the_tuning_key_covers_included_templates(tmp_path):
    """demo.Gather's template includes gather-row.wgsl.jinja: editing only that file is other code,
    so results tuned for the old one must not apply; editing test.json is not."""
    import shutil

    from webgpu_kernels.digests import write_metadata

    from conftest import PACKAGES_DIR

    package = tmp_path / "gather"
    shutil.copytree(PACKAGES_DIR / "demo.Gather", package)
    before = wk.load_kernel(package).tuning_key
    helper = package / "gather-row.wgsl.jinja"
    helper.write_text(helper.read_text("utf-8") + "\n// edited\n", "utf-8")
    write_metadata(package)
    edited = wk.load_kernel(package).tuning_key
    assert edited != before
    test_json = package / "test.json"
    test_json.write_text(test_json.read_text("utf-8").replace('"description": "', '"description": "edited. ', 1), "utf-8")
    write_metadata(package)
    assert wk.load_kernel(package).tuning_key == edited


def test_a_file_too_large_to_read_fails_no_call(tmp_path, rng):
    """A 9 MiB file beside an unsigned package's templates: no template can load it, but the tuning
    key read every top-level file, so the first call failed with a PackageError (an audit)."""
    import shutil

    from webgpu_kernels.digests import MAX_FILE_BYTES

    package = tmp_path / "qg"
    shutil.copytree(wk.get_kernel(QG).package.root, package)
    (package / "metadata.json").unlink()
    (package / "weights.bin").write_bytes(b"\0" * (MAX_FILE_BYTES + 1))
    x = rng.standard_normal(64).astype(np.float32)
    y = wk.load_kernel(package)({"X": x})["Y"]
    np.testing.assert_allclose(y, x / (1 + np.exp(-1.702 * x.astype(np.float64))), rtol=1e-5, atol=1e-6)


def test_the_tuning_key_reads_only_what_a_template_can_be(tmp_path, monkeypatch):
    """A folder without metadata.json is held to no package limit when it opens, and the tuning key
    read every top-level file: 1,000 links to one 8 MiB file added 38 s to the first call
    (a review). It reads a file only if a template can be one (at most 4 bytes for each
    of MAX_TEMPLATE_BYTES characters), and at most MAX_PACKAGE_FILES of them; the others count
    by their size."""
    import shutil

    from webgpu_kernels.digests import MAX_PACKAGE_FILES
    from webgpu_kernels.package import KernelPackage, open_folder
    from webgpu_kernels.tuning import TEMPLATE_FILE_BYTES

    package = tmp_path / "qg"
    shutil.copytree(wk.get_kernel(QG).package.root, package)
    (package / "metadata.json").unlink()
    big = tmp_path / "big.bin"
    big.write_bytes(b"\0" * (TEMPLATE_FILE_BYTES + 1))
    for i in range(20):
        (package / f"link{i}.txt").symlink_to(big)
    for i in range(MAX_PACKAGE_FILES):  # with quick-gelu.wgsl.jinja, one more than a package holds
        (package / f"small{i:04}.txt").write_text("// small\n", "utf-8")
    kernel = wk.Kernel(open_folder(package))  # load_kernel digests it at once (api.folder_kernel)
    read: list[str] = []
    read_bytes = KernelPackage.read_bytes
    monkeypatch.setattr(KernelPackage, "read_bytes", lambda self, name: read.append(name) or read_bytes(self, name))
    key = kernel.tuning_key
    # by name: the 20 links (too large to be a template), the template, then the small files up
    # to the MAX_PACKAGE_FILES-th file
    assert read == ["manifest.json", "quick-gelu.wgsl.jinja"] + [f"small{i:04}.txt" for i in range(MAX_PACKAGE_FILES - 21)]
    # what was not read still changes the key when its size does
    big.write_bytes(b"\0" * (TEMPLATE_FILE_BYTES + 2))
    assert wk.load_kernel(package).tuning_key != key


def test_two_processes_saving_keep_each_others_results(tuning_dir):
    """Two caches of one file (two `tune` processes): each save merges with what is on disk, so
    neither loses the other's entries, and no temporary file is left."""
    path = tuning_dir / "gpu.json"
    a, b = tuning.TuningCache(path), tuning.TuningCache(path)
    a.record("opA", QG_F32, X_N, SCALAR_64)
    b.record("opB", QG_F32, X_N, SCALAR_64)
    a.save()
    b.save()
    again = tuning.TuningCache(path)
    assert again.lookup("opA", QG_F32, X_N) == again.lookup("opB", QG_F32, X_N) == SCALAR_64
    a.record("opA", QG_F32, {"X": (64,)}, SCALAR_64)
    a.save()  # a learns b's entry too
    assert a.lookup("opB", QG_F32, X_N) == SCALAR_64
    assert sorted(p.name for p in tuning_dir.iterdir() if p.name != tuning.LOCK_NAME) == ["gpu.json"]


def test_a_later_save_does_not_put_back_what_another_process_saved_over(tuning_dir):
    """Every save re-applied all this process's records and removals since it started: a long
    `tune` put its old result back over a newer one, and re-deleted an entry another process had
    saved again since."""
    path = tuning_dir / "gpu.json"
    newer = tuning.TunedChoice("vec4", {"WORKGROUP_SIZE": 128}, 5e-6)
    for old_change in (lambda cache: cache.record(QG, QG_F32, X_N, SCALAR_64), lambda cache: cache.forget(QG, QG_F32, X_N)):
        slow, fast = tuning.TuningCache(path), tuning.TuningCache(path)
        old_change(slow)
        slow.save()
        fast.record(QG, QG_F32, X_N, newer)  # another process, after the slow one's save
        fast.save()
        slow.record("opOther", QG_F32, X_N, SCALAR_64)  # the slow one's next case
        slow.save()
        assert tuning.TuningCache(path).lookup(QG, QG_F32, X_N) == newer


@DAMAGED_FILE_WARNS
def test_a_file_with_an_entry_edited_wrong_is_backed_up_before_a_save(tuning_dir):
    """A version-3 file whose entry was hand-edited wrong ("median_s": "1e-5") lost it silently at
    the next save; entries that are no dict were overwritten without a backup."""
    path = tuning_dir / "gpu.json"
    tuning_dir.mkdir()
    for entries in ({"k": {"variant": "scalar", "tunables": {}, "median_s": "1e-5"}}, [["k"]]):
        text = json.dumps({"version": 3, "entries": entries})
        path.write_text(text, "utf-8")
        cache = tuning.TuningCache(path)
        cache.record(QG, QG_F32, X_N, SCALAR_64)
        cache.save()
        backups = list(tuning_dir.glob("gpu.json*" + tuning.BACKUP_SUFFIX))
        assert [b.read_text("utf-8") for b in backups] == [text], backups
        backups[0].unlink()


@DAMAGED_FILE_WARNS
def test_a_tuning_file_this_user_cannot_read_is_not_replaced(tuning_dir, monkeypatch):
    """Another user's 0600 file in a shared folder read as corrupt: save moved it aside and wrote
    its own, and the other user's calls lost their entries."""
    path = tuning_dir / "gpu.json"
    tuning_dir.mkdir()
    text = json.dumps({"version": 3, "entries": {}})
    path.write_text(text, "utf-8")
    monkeypatch.setattr(tuning.os, "access", lambda p, mode: str(p) != str(path))  # as a user it is not
    cache = tuning.TuningCache(path)
    cache.record(QG, QG_F32, X_N, SCALAR_64)
    with pytest.raises(PermissionError, match="cannot read the tuning file"):
        cache.save()
    assert path.read_text("utf-8") == text and not list(tuning_dir.glob("*" + tuning.BACKUP_SUFFIX))


def test_explain_and_render_say_what_a_tuned_call_runs(adapter_file, fresh_kernel):
    """explain keeps the manifest's choice and says that a stored result applies; render shows the
    WGSL the call runs (64-wide workgroups), and the manifest's when a variant or tunables are given."""
    store(adapter_file, SCALAR_64)
    k = fresh_kernel()
    x = np.zeros(N, np.float32)
    explanation = k.explain({"X": x})
    assert explanation.chosen == "vec4"
    assert explanation.tuned == {"variant": "scalar", "tunables": {"WORKGROUP_SIZE": 64}}
    assert "a stored tuning result applies: the call runs 'scalar' with tunables {'WORKGROUP_SIZE': 64}" in str(explanation)
    assert explanation.as_dict()["tuned"] == explanation.tuned
    assert "@workgroup_size(64)" in k.render({"X": x})["main"]
    assert "@workgroup_size(256)" in k.render({"X": x}, variant="vec4")["main"]
    assert k.explain({"X": x}, tunables={"WORKGROUP_SIZE": 128}).tuned is None
    assert k.explain({"X": np.zeros(2 * N, np.float32)}).tuned is None  # another shape class


def test_run_json_reports_the_tunables_the_call_ran(adapter_file, monkeypatch):
    from click.testing import CliRunner

    from webgpu_kernels.cli import main

    store(adapter_file, SCALAR_64)
    result = CliRunner().invoke(main, ["run", str(embedded_root() / QG), "-i", "X=4096:f32", "--json"])
    data = json.loads(result.stdout)
    assert data["variant"] == "scalar" and data["tuned"] is True and data["tunables"] == {"WORKGROUP_SIZE": 64}


def test_a_stored_result_never_drops_an_output_the_call_returns(tuning_dir, device, write_package):
    """Z is an optional output only vz writes; v8 takes multiples of 8. Tuned at 4104 (class 4096),
    where the default is v8, vs has v8's outputs and may be kept. At 4100 (class 4096 too) the
    manifest picks vz, so the call returns Y and Z: with the stored vs it had returned Y alone."""
    def bindings(writes_z):
        found = [{"name": "x", "arg": "X", "buffer": {"type": "read-only-storage"}, "elementType": "f32"},
                 {"name": "y", "arg": "Y", "buffer": {"type": "storage"}, "elementType": "f32"},
                 {"name": "params", "semantic": "kernel.params", "buffer": {"type": "uniform"},
                  "struct": {"name": "Params", "fields": [{"name": "n", "type": "u32", "value": "numel(shapes.X)"}]}}]
        return found[:2] + [{"name": "z", "arg": "Z", "buffer": {"type": "storage"}, "elementType": "f32"}] + found[2:] \
            if writes_z else found

    variants = [("v8", 30, False, ["numel(shapes.X) % 8 == 0"]), ("vz", 20, True, ["true"]), ("vs", 10, False, ["true"])]
    manifest = {
        "domain": "demo", "name": "OptOut", "inputs": [{"role": "X", "dtype": "T"}],
        "outputs": [{"role": "Y", "dtype": "T", "rank": "ranks.X", "shape": "shapes.X"},
                    {"role": "Z", "dtype": "T", "rank": "ranks.X", "shape": "shapes.X", "optional": True}],
        "typeConstraints": {"T": ["float32"]}, "tunables": {"WORKGROUP_SIZE": 64},
        "variants": [{"id": vid, "priority": priority, "when": when, "passes": [{
            "id": "main", "shader": f"{vid}.wgsl.jinja", "bindings": bindings(writes_z),
            "dispatch": {"threads": "numel(shapes.X)", "workgroupSize": "tunables.WORKGROUP_SIZE"}}]}
            for vid, priority, writes_z, when in variants],
    }  # fmt: skip
    templates = {f"{vid}.wgsl.jinja": (
        "{{ declarations }}\n@compute @workgroup_size({{ workgroupSize }})\n"
        "fn {{ entryPoint }}({{ entryParams }}) {\n  let i = {{ globalIndex }};\n"
        "  if (i >= params.n) { return; }\n  y[i] = x[i];\n" + ("  z[i] = 2.0 * x[i];\n" if writes_z else "") + "}\n")
        for vid, _, writes_z, _ in variants}  # fmt: skip
    k = wk.load_kernel(write_package(manifest, templates))
    tuned, x = np.ones(4104, np.float32), np.ones(4100, np.float32)
    assert set(k({"X": tuned})) == set(k({"X": tuned}, variant="vs")) == {"Y"}  # what tune compares
    cache = tuning.cache_for(device.adapter.name, device.adapter.backend)  # the one the call above read
    cache.record(k.tuning_key, {"T": "float32"}, {"X": tuned.shape}, tuning.TunedChoice("vs", {"WORKGROUP_SIZE": 128}, 1e-5))
    assert set(k({"X": x})) == {"Y", "Z"}  # the manifest's selection's outputs: the entry does not apply
    assert k.explain({"X": x}).tuned is None and k.plan({"X": x}, tuned=True)[1].variant == "vz"
    reason = k.explain({"X": x}).tuning_entry["reason"]
    assert "'vs' does not return Z, which the manifest's own selection returns" in reason, reason
    assert k.plan({"X": tuned}, tuned=True)[1].variant == "vs"  # where the outputs agree, it still does


def test_a_stored_result_writing_every_output_or_refused_by_its_when(tuning_dir, device, write_package):
    """Where an output is optional: a stored variant that writes every output is kept whatever the
    manifest's own selection returns (Z comes back too); one whose `when` fails for the call is
    ignored by the call, plan, explain and render alike, and applies where its `when` holds."""
    from conftest import optional_output_package

    k = wk.load_kernel(optional_output_package(write_package, [("v8", 30, False, ["numel(shapes.X) % 8 == 0"]),
                                                               ("vz", 20, True, ["true"])]))  # fmt: skip
    cache = tuning.cache_for(device.adapter.name, device.adapter.backend)
    at8, x = np.ones(4104, np.float32), np.ones(4100, np.float32)  # both of class 4096
    cache.record(k.tuning_key, QG_F32, {"X": at8.shape}, tuning.TunedChoice("vz", {"WORKGROUP_SIZE": 128}, 1e-5))
    assert k.plan({"X": at8})[1].variant == "v8" and k.plan({"X": at8}, tuned=True)[1].variant == "vz"
    assert set(k({"X": at8})) == {"Y", "Z"} and "z[i]" in k.render({"X": at8})["main"]
    assert k.explain({"X": at8}).tuned == {"variant": "vz", "tunables": {"WORKGROUP_SIZE": 128}}
    cache.record(k.tuning_key, QG_F32, {"X": at8.shape}, tuning.TunedChoice("v8", {"WORKGROUP_SIZE": 128}, 1e-5))
    plan = k.plan({"X": x}, tuned=True)[1]
    assert (plan.variant, plan.tunables) == ("vz", {"WORKGROUP_SIZE": 64}) and set(k({"X": x})) == {"Y", "Z"}
    assert k.explain({"X": x}).tuned is None and "z[i]" in k.render({"X": x})["main"]
    plan = k.plan({"X": at8}, tuned=True)[1]
    assert (plan.variant, plan.tunables) == ("v8", {"WORKGROUP_SIZE": 128}) and set(k({"X": at8})) == {"Y"}


def _tuned_past_the_device(tmp_path, adapter_file):
    """A QuickGelu copy whose default workgroup is past any device's limit (its `when` leaves that
    to the engine's device check), with SCALAR_64 stored for X_N: the stored result runs there."""
    import shutil

    folder = tmp_path / "big"
    shutil.copytree(embedded_root() / QG, folder)
    (folder / "metadata.json").unlink()
    manifest = json.loads((folder / "manifest.json").read_text())
    manifest["tunables"]["WORKGROUP_SIZE"] = 1 << 20
    manifest["derive"]["workgroupOk"] = "tunables.WORKGROUP_SIZE > 0"
    (folder / "manifest.json").write_text(json.dumps(manifest))
    cache = tuning.TuningCache(adapter_file)
    cache.record(wk.load_kernel(folder).tuning_key, QG_F32, X_N, SCALAR_64)
    cache.save()
    return folder


def test_explain_does_not_say_a_call_fails_that_runs_a_stored_result(adapter_file, tmp_path):
    """explain said "but the call would fail: ..." about the manifest's selection, then that a
    stored result applies; the call ran that result and did not fail."""
    k = wk.load_kernel(_tuned_past_the_device(tmp_path, adapter_file))
    x = np.random.default_rng(0).standard_normal(N).astype(np.float32)
    explanation = k.explain({"X": x})
    assert explanation.tuned == {"variant": "scalar", "tunables": {"WORKGROUP_SIZE": 64}}
    assert "WORKGROUP_SIZE" in explanation.refused  # the manifest's selection's reason, kept
    text = str(explanation)
    assert "but the call would fail" not in text and "the manifest's selection would fail" in text, text
    assert_quick_gelu(k({"X": x})["Y"], x)  # what explain says the call does


def test_run_reports_a_tuned_call_whose_default_the_device_cannot_run(adapter_file, runner, tmp_path):
    """A package whose default workgroup is past the device's limit runs with a stored choice (one a
    bench.json case's tunables gave the tuner); run ran it and then exited 2 with the default's
    DeviceLimitError, building the manifest's own plan to tell whether the call was tuned."""
    from webgpu_kernels.cli import main

    folder = _tuned_past_the_device(tmp_path, adapter_file)
    result = runner.invoke(main, ["run", str(folder), "-i", f"X={N}:f32", "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["variant"] == "scalar" and data["tuned"] is True and data["tunables"] == {"WORKGROUP_SIZE": 64}


@DAMAGED_FILE_WARNS
def test_a_fifo_in_place_of_the_tuning_file_is_ignored_not_waited_on(adapter_file, fresh_kernel):
    """The first call of every shape read the file with read_text(): a FIFO there blocked it for ever."""
    import os
    import threading

    adapter_file.parent.mkdir(parents=True)
    os.mkfifo(adapter_file)
    x = np.random.default_rng(0).standard_normal(N).astype(np.float32)
    done = []
    worker = threading.Thread(target=lambda: done.append(fresh_kernel()({"X": x})["Y"]), daemon=True)
    worker.start()
    worker.join(20)
    assert done, "the call waited on the FIFO"
    assert_quick_gelu(done[0], x)


def test_concurrent_saves_keep_every_entry(tuning_dir):
    """Four tune processes saving at once lost entries: each re-read the file and replaced it,
    overwriting what another had written between its read and its replace."""
    import subprocess
    import sys

    script = (
        "import sys; from webgpu_kernels import tuning\n"
        "cache = tuning.TuningCache(tuning.Path(sys.argv[1]))\n"
        "for i in range(60):\n"
        "    cache.record(f'op{sys.argv[2]}.{i}', {'T': 'float32'}, {'X': (4,)}, tuning.TunedChoice('v', {}, 1e-6))\n"
        "    cache.save()\n"
    )
    path = tuning_dir / "gpu.json"
    workers = [subprocess.Popen([sys.executable, "-c", script, str(path), str(w)]) for w in range(4)]
    assert all(w.wait(120) == 0 for w in workers)
    entries = json.loads(path.read_text("utf-8"))["entries"]
    assert len(entries) == 4 * 60


@DAMAGED_FILE_WARNS
@pytest.mark.parametrize("text", ['{"version": 4, "entries": {"future-key": {"variant": "v"}}}', '{"version": 3, "entr'])
def test_a_save_keeps_a_file_of_another_version_or_a_broken_one(tmp_path, text):
    """Ignored on reading, as before, but a save had overwritten it: a newer library's results, or
    a hand-edited file with one typo, were lost without a word."""
    path = tmp_path / "adapter.json"
    path.write_text(text, "utf-8")
    cache = tuning.TuningCache(path)
    assert cache.entries == {}
    cache.record("op@1", {"T": "float32"}, {"X": (4,)}, tuning.TunedChoice("v", {"W": 64}, 1e-6))
    cache.save()
    assert (tmp_path / ("adapter.json" + tuning.BACKUP_SUFFIX)).read_text("utf-8") == text
    assert len(json.loads(path.read_text("utf-8"))["entries"]) == 1
    cache.save()  # the file is its own version now: no second backup over the first
    assert (tmp_path / ("adapter.json" + tuning.BACKUP_SUFFIX)).read_text("utf-8") == text


@DAMAGED_FILE_WARNS
def test_a_second_foreign_file_and_a_folder_named_like_the_backup_keep_every_backup(tmp_path):
    """The backup had been replaced by the next foreign file, and a folder at its name crashed the save."""
    path = tmp_path / "adapter.json"
    (tmp_path / ("adapter.json" + tuning.BACKUP_SUFFIX)).mkdir()
    texts = ['{"version": 2, "entries": {"FIRST": 1}}', "{not json"]
    for text in texts:
        path.write_text(text, "utf-8")
        cache = tuning.TuningCache(path)
        cache.record("op@1", {"T": "float32"}, {"X": (4,)}, tuning.TunedChoice("v", {"W": 64}, 1e-6))
        cache.save()
    backups = sorted(p.read_text("utf-8") for p in tmp_path.glob("adapter.json.*" + tuning.BACKUP_SUFFIX))
    assert backups == sorted(texts)


@DAMAGED_FILE_WARNS
@pytest.mark.parametrize("own_last", [False, True], ids=["theirs-to-a-file", "theirs-to-a-link-of-mine"])
def test_a_link_chain_through_another_users_link_writes_no_further(tmp_path, monkeypatch, own_last):
    """The user's own link to another user's link in a shared folder: the whole chain was followed, so
    that other user, retargeting their link, chose which file of this user's a save moved aside
    and overwrote (a shell's rc file, not JSON, is "damaged"). Their link is the tuning file, as
    where it lies in the tuning folder itself: replaced, its target left alone. Emulated: the
    tests run as every link's owner."""
    victim = tmp_path / "home" / "bashrc"
    victim.parent.mkdir()
    victim.write_text("export PATH=...\n", "utf-8")
    shared = tmp_path / "shared"
    shared.mkdir()
    theirs = shared / "gpu.json"
    if own_last:  # theirs -> a link of mine -> the file: still not followed past theirs
        (tmp_path / "home" / "mine.json").symlink_to(victim)
        theirs.symlink_to(tmp_path / "home" / "mine.json")
    else:
        theirs.symlink_to(victim)
    path = tmp_path / "tuning" / "adapter.json"
    path.parent.mkdir()
    path.symlink_to(theirs)
    monkeypatch.setattr(replacing, "_link_is_own", lambda link: os.path.realpath(link.parent) != str(shared))
    assert tuning.write_path(path) == theirs
    cache = tuning.TuningCache(path)
    cache.record("op@1", {"T": "float32"}, {"X": (4,)}, tuning.TunedChoice("v", {"W": 64}, 1e-6))
    cache.save()
    assert victim.read_text("utf-8") == "export PATH=...\n" and not list(victim.parent.glob("*.bak"))
    assert path.is_symlink() and not theirs.is_symlink()  # mine written through, theirs replaced
    assert list(json.loads(theirs.read_text("utf-8"))["entries"]) == [tuning.entry_key("op@1", {"T": "float32"}, {"X": (4,)})]


# --- explain and render say which stored entry a call uses, or why not ---------------------------------


def _write_entry(path, key, entry):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"version": tuning.FILE_VERSION, "entries": {key: entry}}), "utf-8")


@pytest.mark.parametrize(
    ("entry", "elements", "reason"),
    [({"variant": "no-such-variant", "tunables": {}, "median_s": 1e-5}, N, "no variant 'no-such-variant'"),
     ({"variant": "vec4", "tunables": {"WORKGROUP_SIZE": 64}, "median_s": 1e-5}, N + 1, "'vec4Ok' is false"),
     ({"variant": "scalar", "tunables": {"NO_SUCH_TUNABLE": 3}, "median_s": 1e-5}, N, "NO_SUCH_TUNABLE"),
     ({"variant": "scalar", "tunables": {"WORKGROUP_SIZE": 1 << 20}, "median_s": 1e-5}, N, "WORKGROUP_SIZE")],
    ids=["variant-gone", "when-false", "unknown-tunable", "workgroup-too-large"],
)  # fmt: skip
def test_explain_says_why_a_stored_entry_is_not_used(adapter_file, fresh_kernel, plans_run, entry, elements, reason):
    """An entry for the call's class that the call does not run was passed over in silence: explain
    said nothing of it, as if the tuning file held none. It names the entry and the reason, the
    call's own judgement of it (the call runs the manifest's selection)."""
    key = tuning.entry_key(QG_KEY, QG_F32, {"X": (elements,)})
    _write_entry(adapter_file, key, entry)
    k = fresh_kernel()
    x = np.linspace(-5, 5, elements, dtype=np.float32)
    explanation = k.explain({"X": x})
    assert explanation.tuned is None
    found = explanation.tuning_entry
    assert found["file"] == str(adapter_file) and found["key"] == key and found["used"] is False
    assert (found["variant"], found["tunables"]) == (entry["variant"], entry["tunables"])
    assert reason in found["reason"], found
    text = str(explanation)
    assert "a stored tuning result is not used: " in text and reason in text and str(adapter_file) in text, text
    assert explanation.as_dict()["tuningEntry"] == found
    assert_quick_gelu(k({"X": x})["Y"], x)  # what explain says: the call runs the manifest's selection
    assert plans_run[-1].variant == explanation.chosen


def test_explain_names_the_stored_entry_a_call_uses(adapter_file, fresh_kernel):
    store(adapter_file, SCALAR_64)
    explanation = fresh_kernel().explain({"X": np.zeros(N, np.float32)})
    key = tuning.entry_key(QG_KEY, QG_F32, X_N)
    assert explanation.tuning_entry == {"file": str(adapter_file), "key": key, "variant": "scalar",
                                        "tunables": {"WORKGROUP_SIZE": 64}, "used": True, "reason": None}  # fmt: skip
    assert f"tuning file {adapter_file}" in str(explanation) and key in str(explanation)


def test_explain_says_an_entry_was_tuned_for_another_version_of_the_package(adapter_file, tmp_path):
    """An entry tuned before the package's manifest or a template changed has another tuning key:
    the call never finds it, and explain said nothing."""
    import shutil

    folder = tmp_path / "qg"
    shutil.copytree(embedded_root() / QG, folder)
    (folder / "metadata.json").unlink()
    old_key = wk.load_kernel(folder).tuning_key
    store_cache = tuning.TuningCache(adapter_file)
    store_cache.record(old_key, QG_F32, X_N, SCALAR_64)
    store_cache.save()
    manifest = json.loads((folder / "manifest.json").read_text())
    manifest["description"] += " Edited."
    (folder / "manifest.json").write_text(json.dumps(manifest))
    k = wk.load_kernel(folder)
    assert k.tuning_key != old_key
    explanation = k.explain({"X": np.zeros(N, np.float32)})
    assert explanation.tuned is None
    found = explanation.tuning_entry
    assert found["key"] == tuning.entry_key(old_key, QG_F32, X_N) and found["used"] is False
    assert "another version of this op's package" in found["reason"] and k.tuning_key in found["reason"], found


@pytest.mark.parametrize("options", [{"variant": "scalar"}, {"tunables": {"WORKGROUP_SIZE": 128}}], ids=["variant", "tunables"])
def test_explain_says_a_call_that_names_its_variant_or_tunables_runs_no_stored_entry(adapter_file, fresh_kernel, options):
    store(adapter_file, SCALAR_64)
    explanation = fresh_kernel().explain({"X": np.zeros(N, np.float32)}, **options)
    assert explanation.tuned is None and explanation.tuning_entry["used"] is False
    assert f"the call gives {next(iter(options))}=" in explanation.tuning_entry["reason"]


def test_explain_says_tuning_is_off(adapter_file, fresh_kernel, monkeypatch):
    store(adapter_file, SCALAR_64)
    monkeypatch.setenv(tuning.DISABLE_ENV, "1")
    explanation = fresh_kernel().explain({"X": np.zeros(N, np.float32)})
    assert explanation.tuned is None and tuning.DISABLE_ENV in explanation.tuning_entry["reason"]


def test_explain_with_no_entry_for_the_class_says_nothing_of_tuning(adapter_file, fresh_kernel):
    store(adapter_file, SCALAR_64)
    explanation = fresh_kernel().explain({"X": np.zeros(2 * N, np.float32)})  # another shape class
    assert explanation.tuning_entry is None and "tuning" not in str(explanation)


# --- coverage audit -------------------------------------------------------------------------


@DAMAGED_FILE_WARNS
def test_a_thousand_backups_are_all_kept_and_the_next_takes_this_processs_name(tmp_path):
    """<name>.bak, then <name>.1.bak ... <name>.999.bak: past those, the process id names the next,
    and no earlier backup is replaced."""
    path = tmp_path / "adapter.json"
    for n in range(1000):
        (tmp_path / f"adapter.json{'' if n == 0 else f'.{n}'}{tuning.BACKUP_SUFFIX}").write_text(str(n), "utf-8")
    mine = tmp_path / f"adapter.json.{os.getpid()}{tuning.BACKUP_SUFFIX}"
    assert tuning.backup_path(path) == mine
    path.write_text("{not json", "utf-8")
    cache = tuning.TuningCache(path)
    cache.record("op@1", {"T": "float32"}, {"X": (4,)}, tuning.TunedChoice("v", {"W": 64}, 1e-6))
    cache.save()
    assert mine.read_text("utf-8") == "{not json" and len(json.loads(path.read_text("utf-8"))["entries"]) == 1
    assert (tmp_path / f"adapter.json.999{tuning.BACKUP_SUFFIX}").read_text("utf-8") == "999"
    (tmp_path / f"adapter.json.500{tuning.BACKUP_SUFFIX}").unlink()  # a free number is taken first
    assert tuning.backup_path(path) == tmp_path / f"adapter.json.500{tuning.BACKUP_SUFFIX}"
