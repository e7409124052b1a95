"""The Hugging Face Hub path, through the real huggingface_hub client and a local Hub (hub_server.py).

No network: each test starts tests/hub_server.py on a free port of 127.0.0.1, points
``HF_ENDPOINT`` at it and ``HF_HOME`` at a temporary folder. huggingface_hub reads those (and
``HF_HUB_OFFLINE``) once, at import; webgpu_kernels.hub reads them at each call and passes them
explicitly, so monkeypatching the environment is enough. The constants that the client itself
consults at request time (offline mode, telemetry) are monkeypatched on
``huggingface_hub.constants`` too.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
import types
import unicodedata
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

import webgpu_kernels as wk
from webgpu_kernels import api, errors, hub, hub_cache, hub_errors
from webgpu_kernels.digests import write_metadata
from webgpu_kernels.errors import DigestError, HubError, PackageError, TrustError
from webgpu_kernels.package import embedded_root

from hub_server import HubServer

hf_constants = pytest.importorskip("huggingface_hub.constants")

OFFICIAL = "webgpu-kernels/com.microsoft.QuickGelu"
OTHER_ORG = "someone-else/com.microsoft.QuickGelu"
OP_ID = "com.microsoft.QuickGelu"


def quick_gelu_ref(x: np.ndarray, alpha: float = 1.702) -> np.ndarray:
    x64 = x.astype(np.float64)
    return x64 / (1.0 + np.exp(-alpha * x64))


def put_package(root: Path, repo_id: str, ref: str, *, op: str = OP_ID, metadata: bool = True) -> Path:
    """Copy an embedded package into ``root/<repo_id>/<ref>/build/webgpu/`` (with a README beside it)."""
    repo = root / repo_id / ref
    pkg = repo / hub.PACKAGE_DIR
    shutil.copytree(embedded_root() / op, pkg, ignore=shutil.ignore_patterns("__pycache__"))
    (repo / "README.md").write_text(f"# {repo_id} at {ref}\n", encoding="utf-8")
    if metadata:
        write_metadata(pkg)  # refresh the digests of the copy (keeps id, version, provenance)
    else:
        (pkg / "metadata.json").unlink(missing_ok=True)
    return pkg


@pytest.fixture
def hub_root(tmp_path) -> Path:
    """Repositories: the official QuickGelu (v1, and a branch 'dev' whose bench.json differs), the
    same package in another organisation, and an official repository without metadata.json."""
    root = tmp_path / "hub-root"
    put_package(root, OFFICIAL, "v1")
    dev = put_package(root, OFFICIAL, "dev")
    bench = json.loads((dev / "bench.json").read_text(encoding="utf-8"))
    bench["description"] = "dev branch"
    (dev / "bench.json").write_text(json.dumps(bench, indent=2), encoding="utf-8")
    write_metadata(dev)
    put_package(root, OTHER_ORG, "v1")
    put_package(root, "webgpu-kernels/com.example.NoMetadata", "v1", metadata=False)
    return root


@pytest.fixture
def server(hub_root, hub_env, monkeypatch):
    srv = HubServer(hub_root).start()
    monkeypatch.setenv("HF_ENDPOINT", srv.url)
    yield srv
    srv.stop()


def go_offline(monkeypatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(hf_constants, "HF_HUB_OFFLINE", True)
    hub.clear_cache()


# --- download and run -----------------------------------------------------------------------------


def test_download_and_run(server, hub_env, rng):
    kernel = wk.get_kernel(OFFICIAL, version=1)
    package = kernel.package
    assert kernel.op_id == OP_ID
    assert package.origin == "hub" and not package.needs_trust
    commit = server.commit_of(OFFICIAL, "v1")
    assert package.commit == commit and package.revision == "v1"
    # In the Hugging Face cache, under the kernel repository's folder, at the resolved commit.
    expected_root = hub_env / "hub" / "kernels--webgpu-kernels--com.microsoft.QuickGelu" / "snapshots" / commit
    assert package.root == (expected_root / "build" / "webgpu").resolve()
    assert (hub_env / "hub" / "kernels--webgpu-kernels--com.microsoft.QuickGelu" / "refs" / "v1").read_text() == commit
    assert set(package.digests) >= {"manifest.json", "quick-gelu.wgsl.jinja"}

    # Only build/webgpu/ was fetched, through the kernel-repository routes.
    fetched = [path for method, path in server.requests if method == "GET" and "/resolve/" in path]
    assert fetched and all(p.startswith(f"/kernels/{OFFICIAL}/resolve/{commit}/build/webgpu/") for p in fetched)
    assert not (expected_root / "README.md").exists()
    assert not any(path.startswith(("/api/models", "/api/datasets")) for _, path in server.requests)

    x = rng.standard_normal((3, 257)).astype(np.float32) * 4
    y = kernel({"X": x})["Y"]
    assert y.shape == x.shape and y.dtype == np.float32
    np.testing.assert_allclose(y, quick_gelu_ref(x), rtol=2e-6, atol=2e-6)

    # Shared per (repository, commit): the second call asks the server nothing.
    before = len(server.requests)
    assert wk.get_kernel(OFFICIAL, version=1) is kernel
    assert wk.get_kernel(OFFICIAL, revision=commit) is kernel
    assert len(server.requests) == before


def test_a_hub_kernel_pickles_as_its_repository_and_commit(server, hub_env, monkeypatch, rng):
    """Pickling a Hub kernel (a worker process's argument) had been a TypeError: it pickles as its
    repository, commit, endpoint and trust, and opens again from the cache, offline too."""
    import pickle

    kernel = wk.get_kernel(OTHER_ORG, version=1, trust_remote_code=True)
    assert pickle.loads(pickle.dumps(kernel)).package.commit == kernel.package.commit
    pickled = pickle.dumps(kernel)
    go_offline(monkeypatch)  # a worker with the same Hugging Face cache, no kernel opened yet
    monkeypatch.setattr(api, "_reopened", {})
    again = pickle.loads(pickled)
    assert again is not kernel and again.package.from_cache
    assert (again.package.repo_id, again.package.commit, again.package.needs_trust) == (OTHER_ORG, kernel.package.commit, True)
    x = rng.standard_normal(99).astype(np.float32)
    np.testing.assert_allclose(again({"X": x})["Y"], quick_gelu_ref(x), rtol=2e-6, atol=2e-6)


def test_a_hub_kernel_a_worker_cannot_open_again_raises_at_its_first_use(server, hub_env, monkeypatch):
    """A worker whose Hugging Face cache lacks the commit, offline: the HubError had been raised while
    the worker unpickled its task (a ProcessPoolExecutor broke, a Pool lost the task); it is raised
    where the kernel is first used, with the note naming the pickled kernel."""
    import pickle

    pickled = pickle.dumps(wk.get_kernel(OFFICIAL, version=1))
    go_offline(monkeypatch)
    monkeypatch.setenv("HF_HOME", str(hub_env.parent / "another-hf-home"))  # the worker's own, empty
    monkeypatch.setattr(api, "_reopened", {})
    unopened = pickle.loads(pickled)
    with pytest.raises(HubError, match="is not in the Hugging Face cache") as info:
        unopened({"X": np.ones(4, np.float32)})
    assert any("pickled in another process" in note for note in info.value.__notes__)


@pytest.mark.parametrize("how", ["HF_HUB_OFFLINE", "server down"])
def test_second_load_uses_the_cache(server, hub_env, monkeypatch, rng, how):
    first = wk.get_kernel(OFFICIAL, version=1)
    server.stop()
    if how == "HF_HUB_OFFLINE":
        go_offline(monkeypatch)
    else:
        hub.clear_cache()
    requests = len(server.requests)
    kernel = wk.get_kernel(OFFICIAL, version=1)
    assert kernel is not first  # loaded again, from the disk cache
    assert kernel.package.root == first.package.root and kernel.package.commit == first.package.commit
    assert len(server.requests) == requests
    x = rng.standard_normal(1001).astype(np.float32)
    np.testing.assert_allclose(kernel({"X": x})["Y"], quick_gelu_ref(x), rtol=2e-6, atol=2e-6)

    # What was never downloaded is a clear error, not a hang.
    with pytest.raises(HubError, match="not in the Hugging Face cache"):
        wk.get_kernel(OFFICIAL, revision="dev")


def test_offline_with_nothing_cached_says_how_to_get_it(server, monkeypatch):
    """A worker started offline on a cold cache read "... is not in the Hugging Face cache (...) and
    offline mode is on", no way out named."""
    go_offline(monkeypatch)
    with pytest.raises(HubError, match=rf"offline mode is on \(HF_HUB_OFFLINE\): fetch it once online "
                                       rf"\(`webgpu-kernels download {OFFICIAL} --version 1` without HF_HUB_OFFLINE\), "
                                       "or set HF_HOME or HF_HUB_CACHE to the cache that holds it"):  # fmt: skip
        wk.get_kernel(OFFICIAL, version=1)
    with pytest.raises(HubError, match=r"--revision dev` without HF_HUB_OFFLINE"):
        wk.get_kernel(OFFICIAL, revision="dev")


def test_an_unreachable_hub_with_nothing_cached_says_how_to_get_it(server, monkeypatch):
    """An unreachable Hub on a cold cache named the cause ("cannot be reached") but no way out, where
    the same cold cache offline says to fetch it once with `webgpu-kernels download` (a maintainer's
    trial against a stopped local Hub)."""
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # nothing listens there; the cache is cold
    with pytest.raises(errors.HubNotCachedError) as info:
        wk.get_kernel(OFFICIAL, version=1)
    said = str(info.value)
    assert "http://127.0.0.1:9 cannot be reached" in said, said
    assert (f": fetch it once online (`webgpu-kernels download {OFFICIAL} --version 1` once http://127.0.0.1:9 can be "
            "reached), or set HF_HOME or HF_HUB_CACHE to the cache that holds it") in said, said  # fmt: skip
    go_offline(monkeypatch)
    with pytest.raises(errors.HubNotCachedError):  # offline too: one class for "not cached, not fetchable"
        wk.get_kernel(OFFICIAL, version=1)


def test_offline_cli_in_a_fresh_process(server, hub_env):
    """HF_HUB_OFFLINE set before huggingface_hub is imported (the usual way), server stopped."""
    CliRunner().invoke(_cli(), ["download", OFFICIAL, "--version", "1"], catch_exceptions=False)
    server.stop()
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HUB_DISABLE_TELEMETRY": "1", "HF_HUB_DISABLE_PROGRESS_BARS": "1"}
    code = "from webgpu_kernels.cli import main; main()"
    result = subprocess.run([sys.executable, "-c", code, "download", OFFICIAL, "--version", "1", "--json"],
                            check=False, env=env, capture_output=True, text=True, timeout=120)  # fmt: skip
    assert result.returncode == 0, result.stderr
    info = json.loads(result.stdout)
    assert info["offline"] is True and info["op"] == OP_ID
    assert info["commit"] == server.commit_of(OFFICIAL, "v1")
    assert Path(info["path"]).is_relative_to(hub_env / "hub")
    assert "manifest.json" in info["digests"]


# --- digests ----------------------------------------------------------------------------------------


def test_tampered_file_on_the_server_is_refused(server, hub_root):
    template = hub_root / OFFICIAL / "v1" / hub.PACKAGE_DIR / "quick-gelu.wgsl.jinja"
    template.write_text(template.read_text(encoding="utf-8") + "\n// one more line\n", encoding="utf-8")
    # Same commit (the server scanned before the change): only the digests can tell.
    with pytest.raises(DigestError, match="quick-gelu.wgsl.jinja") as info:
        wk.get_kernel(OFFICIAL, version=1)
    assert info.value.file == "quick-gelu.wgsl.jinja" and info.value.reason == "mismatch"
    # an author's advice (record the digests again) would make a user sign what the server changed
    assert "webgpu-kernels digest" not in str(info.value) and "tell the repository's authors" in str(info.value)
    bench = hub_root / OFFICIAL / "v1" / hub.PACKAGE_DIR / "bench.json"
    bench.write_text(bench.read_text(encoding="utf-8") + "\n", encoding="utf-8")  # a second problem
    with pytest.raises(DigestError, match=r"and 1 more digest problem\) \(as ") as info:
        wk.get_kernel(OFFICIAL, version=1)
    assert "webgpu-kernels validate" not in str(info.value)  # nothing of it was kept to validate


def test_tampered_cache_is_refused(server, monkeypatch):
    kernel = wk.get_kernel(OFFICIAL, version=1)
    manifest = kernel.package.root / "manifest.json"
    blob = manifest.resolve()  # the snapshot file links into blobs/
    os.chmod(blob, 0o644)
    blob.write_bytes(blob.read_bytes().replace(b"1.702", b"1.703"))
    go_offline(monkeypatch)
    with pytest.raises(DigestError, match="manifest.json"):
        wk.get_kernel(OFFICIAL, version=1)


def test_an_oversized_package_is_refused_before_it_is_downloaded(server, hub_root, hub_env):
    """The Hub's listing says a file is larger than a package file may be: nothing is fetched (it
    would have been refused after filling the disk)."""
    from webgpu_kernels.digests import MAX_FILE_BYTES

    big = hub_root / OFFICIAL / "v1" / hub.PACKAGE_DIR / "data" / "huge.npy"
    big.parent.mkdir()
    big.write_bytes(b"\0" * (MAX_FILE_BYTES + 1))
    server.rescan()
    with pytest.raises(HubError, match=f"huge.npy is {MAX_FILE_BYTES + 1} bytes, more than a package file may be"):
        wk.get_kernel(OFFICIAL, version=1)
    assert not any(p.name == "huge.npy" for p in hub_env.rglob("*")), "the file was downloaded"


def test_a_hub_package_needs_metadata(server):
    with pytest.raises(DigestError, match="metadata.json") as info:
        wk.get_kernel("webgpu-kernels/com.example.NoMetadata", version=1)
    assert info.value.reason == "missing"



# --- refused downloads leave the cache as it was ----------------------------------------------------

REPO_FOLDER = "kernels--webgpu-kernels--com.microsoft.QuickGelu"


def cache_state(hub_env: Path) -> dict[str, str]:
    """Every entry of the Hub cache: a link's target, a file's bytes, or "folder". The cache's own
    bookkeeping is left out: huggingface_hub's lock files (empty, under .locks/), which it leaves
    behind itself, and the CACHEDIR.TAG it writes once (a marker for backup tools)."""
    root = hub_env / "hub"
    state = {}
    for path in sorted(root.rglob("*")) if root.exists() else []:
        rel = path.relative_to(root).as_posix()
        if rel.split("/")[0] in (".locks", "CACHEDIR.TAG"):
            continue
        if path.is_symlink():
            state[rel] = "-> " + os.readlink(path)
        else:
            state[rel] = "folder" if path.is_dir() else path.read_bytes().decode("latin-1")
    return state


def list_also(monkeypatch, name: str, *, whole_repository_only: bool = False) -> None:
    """The server's recursive tree listings also name ``name`` (a file it does not have). With
    ``whole_repository_only``, only the listing snapshot_download asks for (of the whole
    repository), not the one of build/webgpu/ that hub.py checks before downloading."""
    import hub_server

    original = hub_server._entries

    def entries(folder, path, *, recursive):
        out = original(folder, path, recursive=recursive)
        if out is not None and recursive and (path == "" or not whole_repository_only):
            out.append({"type": "file", "oid": hub_server.git_blob_sha1(b"x"), "size": 1, "path": name})
        return out

    monkeypatch.setattr(hub_server, "_entries", entries)


@pytest.mark.parametrize("name", ["build/webgpu/../../evil.json", "build/webgpu/data/../../../x.json",
                                  "build/webgpu/..\\x.json"])  # fmt: skip
def test_a_listed_name_leaving_the_package_is_refused_before_anything_is_written(server, hub_env, monkeypatch, name):
    list_also(monkeypatch, name)
    with pytest.raises(HubError, match="leaves build/webgpu/") as info:
        wk.get_kernel(OFFICIAL, version=1)
    assert repr(name) in str(info.value) and info.value.repo_id == OFFICIAL
    assert not any("/resolve/" in path for _, path in server.requests), "a file was downloaded"
    assert not (hub_env / "hub").exists()  # not even huggingface_hub's bookkeeping


NFC_NAME = unicodedata.normalize("NFC", "caf\u00e9.txt")
NFD_NAME = unicodedata.normalize("NFD", NFC_NAME)


@pytest.mark.parametrize("names, message", [
    (["Notes.txt", "notes.txt"], "'Notes.txt' and 'notes.txt' differ only in case: on macOS and Windows"),
    (["data/Sub/a.txt", "data/sub/b.txt"], "'data/Sub/' and 'data/sub/' differ only in case"),
    ([NFC_NAME, NFD_NAME], "'cafe\\u0301.txt' and 'caf\\xe9.txt' differ only in their Unicode normal form"),
    (["con.npy"], "'con.npy' is the device CON to Windows"),
    (["notes.txt", "Notes.txt", "aux/x.txt"], "(and 1 more such name problems)"),
])  # fmt: skip
def test_file_names_that_are_one_file_on_macos_or_windows_are_refused_before_anything_is_written(
        server, hub_root, hub_env, names, message):  # fmt: skip
    """On a case-insensitive file system two such files of the repository had landed on one path of
    the cache, met later as a digest mismatch or a missing file; on Linux the package loaded. It is
    refused on every system, naming the files and the repository, as validate refuses it."""
    pkg = hub_root / OFFICIAL / "v1" / hub.PACKAGE_DIR
    for name in names:
        (pkg / name).parent.mkdir(parents=True, exist_ok=True)
        (pkg / name).write_text(f"{name}\n", encoding="utf-8")
    server.rescan()
    with pytest.raises(HubError, match="refused on every system before anything was downloaded") as info:
        wk.get_kernel(OFFICIAL, version=1)
    assert message in str(info.value) and "tell the repository's authors" in str(info.value)
    assert OFFICIAL in str(info.value) and info.value.repo_id == OFFICIAL and info.value.revision == "v1"
    assert not any("/resolve/" in path for _, path in server.requests), "a file was downloaded"
    assert not (hub_env / "hub").exists()
    for name in names:  # renamed, the package loads
        (pkg / name).unlink()
    server.rescan()
    assert wk.get_kernel(OFFICIAL, version=1).op_id == OP_ID


@pytest.mark.parametrize("how", ["HF_HUB_OFFLINE", "server down"])
def test_such_names_in_a_cached_copy_are_refused_too(server, hub_root, hub_env, monkeypatch, how):
    """A snapshot another program fetched into the cache (huggingface_hub itself, an older release)
    had loaded offline or with the Hub down on Linux, where it is refused online: the same
    repository and commit must load everywhere or nowhere, from the cache too."""
    from huggingface_hub import snapshot_download

    pkg = hub_root / OFFICIAL / "v1" / hub.PACKAGE_DIR
    for name in ("Notes.txt", "notes.txt"):
        (pkg / name).write_text(f"{name}\n", encoding="utf-8")
    server.rescan()
    snapshot_download(OFFICIAL, repo_type="kernel", revision="v1", allow_patterns=[f"{hub.PACKAGE_DIR}/*"],
                      cache_dir=str(hub_env / "hub"), endpoint=server.url)  # fmt: skip
    before = cache_state(hub_env)
    if how == "HF_HUB_OFFLINE":
        go_offline(monkeypatch)
    else:
        server.stop()
    with pytest.raises(HubError, match="'Notes.txt' and 'notes.txt' differ only in case") as info:
        wk.get_kernel(OFFICIAL, version=1)
    commit = server.commit_of(OFFICIAL, "v1")
    assert f"the Hugging Face cache's copy (commit {commit}) is refused on every system" in str(info.value)
    assert info.value.repo_id == OFFICIAL and cache_state(hub_env) == before


def test_a_download_refused_midway_leaves_the_cache_as_it_was(server, hub_env, monkeypatch):
    """huggingface_hub refuses a '..' name itself, but only when it comes to that file: the files
    fetched before it, refs/v1 and the commit's tree listing stayed in the cache (a partial
    snapshot). Here the listing hub.py checks first is clean, so that refusal is the one met."""
    dev = wk.get_kernel(OFFICIAL, revision="dev")  # a cached revision, sharing most blobs with v1
    before = cache_state(hub_env)
    assert f"{REPO_FOLDER}/refs/dev" in before
    list_also(monkeypatch, "build/webgpu/../../evil.json", whole_repository_only=True)
    hub.clear_cache()
    with pytest.raises(HubError, match=r"evil\.json"):
        wk.get_kernel(OFFICIAL, version=1)
    assert cache_state(hub_env) == before
    go_offline(monkeypatch)
    assert wk.get_kernel(OFFICIAL, revision="dev").package.commit == dev.package.commit


def test_a_package_refused_when_opened_leaves_the_cache_as_it_was(server, hub_root, hub_env, monkeypatch):
    """metadata.json naming ../x.json: the package is refused once downloaded; the new snapshot had
    stayed, and refs/v1 named the refused commit instead of the one cached before."""
    first = wk.get_kernel(OFFICIAL, version=1)
    before = cache_state(hub_env)
    path = hub_root / OFFICIAL / "v1" / hub.PACKAGE_DIR / "metadata.json"
    metadata = json.loads(path.read_text(encoding="utf-8"))
    metadata["digest"]["files"]["../x.json"] = "0" * 64
    path.write_text(json.dumps(metadata), encoding="utf-8")
    server.rescan()  # a new commit for v1
    hub.clear_cache()
    with pytest.raises(DigestError, match=r"invalid metadata\.json: '\.\./x\.json' is no package file name") as info:
        wk.get_kernel(OFFICIAL, version=1)
    assert info.value.file == "metadata.json" and "delete" not in str(info.value)  # nothing of it was kept
    assert cache_state(hub_env) == before
    go_offline(monkeypatch)
    assert wk.get_kernel(OFFICIAL, version=1).package.commit == first.package.commit


def test_a_file_refused_on_download_is_fetched_again_once_the_server_serves_it_right(server, hub_root, hub_env):
    """A download does not replace a cached file: the refused copy had stayed in the cache, so the
    repository stayed refused under that commit after the server was mended."""
    template = hub_root / OFFICIAL / "v1" / hub.PACKAGE_DIR / "quick-gelu.wgsl.jinja"
    good = template.read_bytes()
    template.write_bytes(good + b"\n// one more line\n")  # same commit: the server scanned before
    with pytest.raises(DigestError, match="quick-gelu.wgsl.jinja") as info:
        wk.get_kernel(OFFICIAL, version=1)
    assert "delete" not in str(info.value) and cache_state(hub_env) == {}
    template.write_bytes(good)
    assert wk.get_kernel(OFFICIAL, version=1).op_id == OP_ID


# --- trust and identity -----------------------------------------------------------------------------


def test_other_organisation_needs_trust(server):
    with pytest.raises(TrustError, match="outside the 'webgpu-kernels' organisation") as info:
        wk.get_kernel(OTHER_ORG, version=1)
    assert info.value.location == OTHER_ORG
    assert server.requests == []  # refused before asking the network anything

    kernel = wk.get_kernel(OTHER_ORG, version=1, trust_remote_code=True, expected_op_id=OP_ID)
    assert kernel.op_id == OP_ID and kernel.package.needs_trust
    # Trust is checked on every call, also when the kernel is already loaded.
    with pytest.raises(TrustError):
        wk.get_kernel(OTHER_ORG, version=1)


def test_trusted_path_and_url(server, tmp_path):
    folder = put_package(tmp_path / "local", "x/y", "v1")
    with pytest.raises(TrustError):
        wk.get_kernel(folder)  # a Path too
    for name in (folder, folder.as_uri()):
        kernel = wk.get_kernel(name, trust_remote_code=True, expected_op_id=OP_ID)
        assert kernel.package.origin == "local" and kernel.package.needs_trust

    # A Hub repository given by URL: fetched from that endpoint, URL-like so it needs trust.
    url = f"{server.url}/kernels/{OFFICIAL}"
    with pytest.raises(TrustError):
        wk.get_kernel(url, version=1)
    kernel = wk.get_kernel(url, version=1, trust_remote_code=True)
    assert kernel.package.origin == "hub" and kernel.package.needs_trust and kernel.op_id == OP_ID


def test_expected_op_id(server):
    with pytest.raises(
        PackageError, match=r"holds op 'com\.microsoft\.QuickGelu'.*expected_op_id is 'com\.microsoft\.BiasAdd'"
    ):
        wk.get_kernel(OFFICIAL, version=1, expected_op_id="com.microsoft.BiasAdd")
    assert wk.get_kernel(OFFICIAL, version=1, expected_op_id=OP_ID).op_id == OP_ID
    with pytest.raises(PackageError, match="com.microsoft.BiasAdd"):
        wk.get_kernel("com.microsoft.QuickGelu", expected_op_id="com.microsoft.BiasAdd")


# --- revisions and versions -------------------------------------------------------------------------


def test_revision_pins_a_commit(server):
    dev = server.commit_of(OFFICIAL, "dev")
    v1 = server.commit_of(OFFICIAL, "v1")
    assert dev != v1
    kernel = wk.get_kernel(OFFICIAL, revision=dev)
    assert kernel.package.commit == dev and kernel.package.root.parent.parent.name == dev
    assert "dev branch" in kernel.package.read_text("bench.json")
    # revision= wins over version=.
    assert wk.get_kernel(OFFICIAL, version=1, revision=dev) is kernel
    assert wk.get_kernel(OFFICIAL, version=1).package.commit == v1
    with pytest.raises(HubError, match="no revision '0{40}'"):
        wk.get_kernel(OFFICIAL, revision="0" * 40)


def test_an_abbreviated_commit_sha_says_the_full_one_is_needed(server):
    """revision='49209ed' (as `git log --oneline` prints it) read only "has no revision '49209ed'":
    the Hub resolves a commit by its full sha alone."""
    short = server.commit_of(OFFICIAL, "v1")[:7]
    with pytest.raises(HubError, match=rf"has no revision '{short}' .*full 40-hex sha"):
        wk.get_kernel(OFFICIAL, revision=short)
    with pytest.raises(HubError, match="has no revision 'nope'") as info:
        wk.get_kernel(OFFICIAL, revision="nope")  # a branch or tag name (not hex) gets no such hint
    assert "40-hex" not in str(info.value)


def test_a_tree_listing_refused_after_the_revision_was_listed_is_still_the_servers_answer(server, monkeypatch):
    """Nothing cached, and the tree listing refused (429) after repo_info named the commit: the
    files come from the server, so from_cache is False (a review of the change above)."""
    from huggingface_hub import HfApi
    from huggingface_hub.errors import HfHubHTTPError

    try:  # the HTTP client huggingface_hub is built on: httpx2 since 2.x, httpx before
        import httpx2
    except ImportError:
        import httpx as httpx2

    real, refusals = HfApi.list_repo_tree, []

    def refused(self, repo_id, *args, path_in_repo=None, **kwargs):
        if path_in_repo == hub.PACKAGE_DIR:
            refusals.append(repo_id)
            request = httpx2.Request("GET", f"{server.url}/api/kernels/{repo_id}/tree")
            raise HfHubHTTPError("429 Too Many Requests", response=httpx2.Response(429, request=request))
        return real(self, repo_id, *args, path_in_repo=path_in_repo, **kwargs)

    monkeypatch.setattr(HfApi, "list_repo_tree", refused)
    package = wk.get_kernel(OFFICIAL, version=1).package
    assert refusals and not package.from_cache  # the refusal happened, and the files came from the server


def test_a_pinned_commit_the_server_no_longer_has_comes_from_the_cache_and_says_so(server, hub_root):
    """The server answers 404 for the old commit, and the cached copy is served: it had said
    from_cache=False, "from <endpoint>" (an author's trial)."""
    old = wk.get_kernel(OFFICIAL, version=1).package.commit
    bench = hub_root / OFFICIAL / "v1" / hub.PACKAGE_DIR / "bench.json"
    bench.write_text(bench.read_text(encoding="utf-8").replace('"description": "', '"description": "v1.1: '),
                     encoding="utf-8")  # fmt: skip
    write_metadata(bench.parent)
    server.rescan()
    assert server.commit_of(OFFICIAL, "v1") != old
    hub.clear_cache()
    pinned = wk.get_kernel(OFFICIAL, revision=old).package
    assert pinned.commit == old and pinned.from_cache
    fresh = wk.get_kernel(OFFICIAL, version=1).package
    assert fresh.commit != old and not fresh.from_cache


def test_missing_version_is_a_clear_error(server):
    with pytest.raises(HubError, match=r"no contract version 2 \(revision 'v2'\).*published versions: v1") as info:
        wk.get_kernel(OFFICIAL, version=2)
    assert info.value.repo_id == OFFICIAL and info.value.revision == "v2"
    with pytest.raises(HubError, match="no kernel repository 'webgpu-kernels/com.example.Nothing'"):
        wk.get_kernel("webgpu-kernels/com.example.Nothing", version=1)
    with pytest.raises(PackageError, match=f"^{OFFICIAL}: .*version=N"):
        wk.get_kernel(OFFICIAL)
    with pytest.raises(PackageError, match=f"^{OFFICIAL}: version must be a positive integer"):
        wk.get_kernel(OFFICIAL, version=0)
    for revision in ("", "  "):  # the error names the repository it was given for
        with pytest.raises(PackageError, match=f"^{OFFICIAL}: revision must be a non-empty string"):
            wk.get_kernel(OFFICIAL, revision=revision)


def test_embedded_names_stay_embedded(hub_env):
    kernel = wk.get_kernel(OP_ID)
    assert kernel.package.origin == "embedded"
    assert wk.get_kernel(OP_ID, version=1) is kernel
    with pytest.raises(PackageError, match="contract version 1, not 2"):
        wk.get_kernel(OP_ID, version=2)
    with pytest.raises(PackageError, match="revision= applies to Hub repositories"):
        wk.get_kernel(OP_ID, revision="v1")


def test_an_embedded_packages_contract_version_is_its_metadata_version(tmp_path, monkeypatch):
    """As a Hub revision's is (check_contract_version): it was the manifest's sinceVersion, the
    op's opset version, which a package published as v2 keeps (a review)."""
    from webgpu_kernels import api
    from webgpu_kernels.package import open_folder

    root = shutil.copytree(embedded_root() / OP_ID, tmp_path / OP_ID)
    for path in root.iterdir():
        os.chmod(path, 0o644)
    write_metadata(root, version=2)
    monkeypatch.setitem(api._embedded, OP_ID, wk.Kernel(open_folder(root, origin="embedded")))
    assert wk.get_kernel(OP_ID, version=2).manifest.since_version == 1
    with pytest.raises(PackageError, match="contract version 2, not 1"):
        wk.get_kernel(OP_ID, version=1)


# --- the command ----------------------------------------------------------------------------------


def _cli():
    from webgpu_kernels.cli import main

    return main


def test_download_command(server, hub_env):
    result = CliRunner().invoke(_cli(), ["download", OFFICIAL, "--version", "1"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    commit = server.commit_of(OFFICIAL, "v1")
    assert f"commit {commit}" in result.output
    assert f"op: {OP_ID}" in result.output
    assert (
        str(hub_env / "hub" / "kernels--webgpu-kernels--com.microsoft.QuickGelu" / "snapshots" / commit)
        in result.output
    )
    kernel = wk.get_kernel(OFFICIAL, version=1)
    for name, digest in kernel.package.digests.items():
        assert f"{digest}  {name}" in result.output

    refused = CliRunner().invoke(_cli(), ["download", OTHER_ORG, "--version", "1"])
    assert refused.exit_code == 2 and "--trust-remote-code" in refused.output
    trusted = CliRunner().invoke(_cli(), ["download", OTHER_ORG, "--version", "1", "--trust-remote-code", "--json"])
    assert trusted.exit_code == 0 and json.loads(trusted.stdout)["needsTrust"] is True
    missing = CliRunner().invoke(_cli(), ["download", OFFICIAL, "--version", "2"])
    assert missing.exit_code == 2 and "no contract version 2" in missing.output
    # org/op@vN, as every KERNEL argument takes it (it had been refused with Python advice)
    pinned = CliRunner().invoke(_cli(), ["download", f"{OFFICIAL}@v1", "--json"])
    assert pinned.exit_code == 0, pinned.output
    assert json.loads(pinned.stdout)["commit"] == commit
    both = CliRunner().invoke(_cli(), ["download", f"{OFFICIAL}@v1", "--version", "1"])
    assert both.exit_code == 2 and "names its revision" in both.output
    untrusted = " ".join(refused.output.split())
    assert "--expected-op-id" in untrusted  # download's own option, next to the Python keyword


def test_run_names_the_repository_revision_and_commit_it_ran(server, hub_env, monkeypatch):
    """`run org/op` said which op and variant it ran, not which repository and commit: a user
    reproducing a result could not tell. It names them as `download` does."""
    runner = CliRunner(env={"COLUMNS": "200"})
    v1, dev = server.commit_of(OFFICIAL, "v1"), server.commit_of(OFFICIAL, "dev")
    assert v1 != dev
    result = runner.invoke(_cli(), ["run", OFFICIAL, "-i", "X=4:f32", "--repeat", "0"])
    assert result.exit_code == 0, result.output
    assert f"kernel: {OFFICIAL} @ v1 -> commit {v1} (from {server.url})" in result.stdout.splitlines(), result.stdout
    assert "error vs NumPy float64 reference (Y)" in result.stdout  # the rest as before

    result = runner.invoke(_cli(), ["run", f"{OFFICIAL}@dev", "-i", "X=4:f32", "--repeat", "0", "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    package = wk.get_kernel(OFFICIAL, revision="dev").package
    assert data["source"] == {"origin": "hub", "path": str(package.root), "repo": OFFICIAL, "revision": "dev",
                              "commit": dev, "endpoint": server.url, "fromCache": False, "fromCacheReason": None}
    assert data["ok"] and data["checked"]

    # from the cache, offline: said as download says it
    go_offline(monkeypatch)
    result = runner.invoke(_cli(), ["run", OFFICIAL, "-i", "X=4:f32", "--repeat", "0"])
    assert result.exit_code == 0, result.output
    assert (f"kernel: {OFFICIAL} @ v1 -> commit {v1} (from the Hugging Face cache: offline mode is on (HF_HUB_OFFLINE))"
            in result.stdout.splitlines()), result.stdout  # fmt: skip


# --- found by the Hub review (each failed on the code before it) ----------------------------------------


def test_another_hub_never_answers_for_the_configured_one(server, hub_env, tmp_path, monkeypatch):
    """huggingface_hub's cache is not keyed by endpoint: a repository fetched (with trust) from
    another Hub by its URL was later read back, offline, as the official repository of that name,
    without trust. Each other endpoint now has a cache folder of its own."""
    other_root = tmp_path / "other-hub"
    other = put_package(other_root, OFFICIAL, "v1")
    template = other / "quick-gelu.wgsl.jinja"
    template.write_text(template.read_text(encoding="utf-8") + "\n// from the other Hub\n", encoding="utf-8")
    write_metadata(other)
    other_server = HubServer(other_root).start()
    try:
        url = f"{other_server.url}/kernels/{OFFICIAL}"
        fetched = wk.get_kernel(url, version=1, trust_remote_code=True)
        assert "from the other Hub" in fetched.package.read_text("quick-gelu.wgsl.jinja")
        assert fetched.package.root.is_relative_to(hub_env / "hub" / hub_cache.OTHER_ENDPOINTS_DIR)
        assert hub_cache.cache_dir_for(other_server.url) != hub_cache.cache_dir_for(None) == hub_env / "hub"
    finally:
        other_server.stop()
    go_offline(monkeypatch)
    with pytest.raises(HubError, match="not in the Hugging Face cache"):
        wk.get_kernel(OFFICIAL, version=1)  # the official one was never downloaded


def test_offline_as_imported_is_named_when_the_variable_changed_since(server, monkeypatch):
    """A process started offline that then set HF_HUB_OFFLINE=0: huggingface_hub still blocks every
    request, and the error blamed the server ("cannot be reached"), which was up (an author's trial)."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    monkeypatch.setattr(hf_constants, "HF_HUB_OFFLINE", True)  # what it read when imported
    with pytest.raises(HubError, match="huggingface_hub read HF_HUB_OFFLINE=1 when it was imported"):
        wk.get_kernel(OFFICIAL, version=1)


def test_the_contract_version_is_checked_whatever_came_first(server, hub_root):
    """Branch v2 holding a package whose metadata says version 1: version=2 is refused, also after
    revision="v2" loaded it (a shared memo skipped the check), and also when it says 1.0."""
    put_package(hub_root, OFFICIAL, "v2")
    server.rescan()
    assert wk.get_kernel(OFFICIAL, revision="v2").op_id == OP_ID
    with pytest.raises(DigestError, match="holds contract version 1, not 2") as info:
        wk.get_kernel(OFFICIAL, version=2)
    assert "webgpu-kernels digest --version 2 FOLDER" in str(info.value)  # how its authors mend it
    pkg = hub_root / OFFICIAL / "v2" / hub.PACKAGE_DIR
    metadata = json.loads((pkg / "metadata.json").read_text(encoding="utf-8"))
    metadata["version"] = 1.0  # the schema's integer; isinstance(1.0, int) is not
    (pkg / "metadata.json").write_text(json.dumps(metadata), encoding="utf-8")
    server.rescan()
    hub.clear_cache()
    with pytest.raises(DigestError, match="holds contract version 1.0, not 2"):
        wk.get_kernel(OFFICIAL, version=2)


def test_a_download_cut_off_mid_file_is_a_hub_error(server, hub_env, monkeypatch):
    """The connection closes after 7 of 5000 announced bytes: httpx's RemoteProtocolError came
    through raw (and the CLI printed a traceback with exit status 1)."""
    import hub_server

    original = hub_server._Handler._resolve

    def cut_off(self, method, repo_id, rev_name, path):
        if method == "GET" and path.endswith("quick-gelu.wgsl.jinja"):
            self.send_response(200)
            self.send_header("Content-Length", "5000")
            self.end_headers()
            self.wfile.write(b"partial")
            return None
        return original(self, method, repo_id, rev_name, path)

    monkeypatch.setattr(hub_server._Handler, "_resolve", cut_off)
    monkeypatch.setenv("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    # huggingface_hub resumes a cut-off download 5 times, a second apart: 10 s of this test's 10.4
    import huggingface_hub.file_download

    monkeypatch.setattr(huggingface_hub.file_download, "time", types.SimpleNamespace(sleep=lambda seconds: None),
                        raising=False)
    with pytest.raises(HubError, match=r"webgpu-kernels/com\.microsoft\.QuickGelu revision 'v1': download from .* failed") as info:
        wk.get_kernel(OFFICIAL, version=1)
    assert info.value.repo_id == OFFICIAL and info.value.revision == "v1"
    assert cache_state(hub_env) == {}  # no partial snapshot, no half-written blob left behind
    result = CliRunner().invoke(_cli(), ["download", OFFICIAL, "--version", "1"])
    assert result.exit_code == 2 and "Traceback" not in result.output, result.output


def test_an_incomplete_cached_copy_says_so(server, monkeypatch):
    kernel = wk.get_kernel(OFFICIAL, version=1)
    (kernel.package.root / "test.json").unlink()
    go_offline(monkeypatch)
    with pytest.raises(HubError, match=r"incomplete copy .*build/webgpu/test\.json"):
        wk.get_kernel(OFFICIAL, version=1)


def test_a_tampered_cached_copy_names_the_cache_and_the_fix(server):
    kernel = wk.get_kernel(OFFICIAL, version=1)
    blob = (kernel.package.root / "manifest.json").resolve()
    os.chmod(blob, 0o644)
    blob.write_bytes(blob.read_bytes().replace(b"1.702", b"1.703"))
    hub.clear_cache()  # online: a download does not replace a cached file, so it stays refused
    with pytest.raises(DigestError, match="changed in the Hugging Face cache after it was downloaded") as info:
        wk.get_kernel(OFFICIAL, version=1)
    assert info.value.file == "manifest.json" and info.value.reason == "mismatch"
    # The advice had been to delete the snapshot, which fetched nothing new (huggingface_hub reuses
    # the changed blob), and to run digest, which would have made the changed copy load.
    assert "webgpu-kernels digest" not in str(info.value)
    folder = re.search(r"delete (\S+) to download it again", str(info.value))[1]
    shutil.rmtree(folder)
    assert wk.get_kernel(OFFICIAL, version=1).op_id == OP_ID


def test_the_download_fetches_the_commit_the_listing_checked(server, monkeypatch):
    """The listing checked one commit and snapshot_download resolved `v1` again: a push between the
    two downloaded a commit no listing had checked, reported as the cache's (in a trial, 9 MiB more).
    Here `v1` stops resolving right after the listing (this fake Hub keeps no old commits): only a
    download of the listed commit succeeds. refs/v1 names it for offline use."""
    import hub_server

    real_listing, real_lookup = hub._check_listing, hub_server.HubServer._lookup
    listed = {}

    def listing(repo_id, rev, **kwargs):
        listed["commit"] = real_listing(repo_id, rev, **kwargs).commit
        monkeypatch.setattr(hub_server.HubServer, "_lookup",
                            lambda self, repo, r: False if r == "v1" else real_lookup(self, repo, r))
        return hub.Listed(listed["commit"], None)

    monkeypatch.setattr(hub, "_check_listing", listing)
    package = wk.get_kernel(OFFICIAL, version=1).package
    assert package.commit == listed["commit"] == server.commit_of(OFFICIAL, "v1") and not package.from_cache
    go_offline(monkeypatch)
    hub.clear_cache()
    assert wk.get_kernel(OFFICIAL, version=1).package.commit == listed["commit"]


def test_a_file_the_server_sends_wrong_into_a_cached_snapshot_blames_the_server(server, hub_root):
    """One file gone from a cached snapshot is fetched again; when the server now sends it wrong,
    the error had blamed the cache (`snapshot.exists()`), whose advice to delete it and download
    again fetched the same bytes."""
    kernel = wk.get_kernel(OFFICIAL, version=1)
    link = kernel.package.root / "bench.json"
    blob = link.resolve()
    link.unlink()
    blob.unlink()
    served = hub_root / OFFICIAL / "v1" / hub.PACKAGE_DIR / "bench.json"
    served.write_text(served.read_text(encoding="utf-8").replace("{", "{ ", 1), encoding="utf-8")  # same commit
    hub.clear_cache()
    with pytest.raises(DigestError) as info:
        wk.get_kernel(OFFICIAL, version=1)
    assert info.value.file == "bench.json"
    assert f"serves it at commit {kernel.package.commit}" in str(info.value), str(info.value)
    assert "changed in the Hugging Face cache" not in str(info.value)


@pytest.mark.parametrize("change, fragment", [
    ("manifest", "ManifestError"),
    ("metadata id", "names op 'com.example.Other'"),
    ("contract version", "holds contract version 2, not 1"),
])  # fmt: skip
def test_a_package_refused_after_its_digests_leaves_the_cache_as_it_was(server, hub_root, hub_env, monkeypatch,
                                                                       change, fragment):  # fmt: skip
    """Refusals after the digest check (an invalid manifest, metadata naming another op or another
    contract version) had left refs/v1 on the refused commit: offline use then refused the repository
    instead of finding the copy cached before (an author's trial)."""
    first = wk.get_kernel(OFFICIAL, version=1)
    before = cache_state(hub_env)
    pkg = hub_root / OFFICIAL / "v1" / hub.PACKAGE_DIR
    if change == "manifest":
        manifest = json.loads((pkg / "manifest.json").read_text(encoding="utf-8"))
        manifest["variants"][0]["priority"] = "high"
        (pkg / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
        write_metadata(pkg)
    else:
        metadata = json.loads((pkg / "metadata.json").read_text(encoding="utf-8"))
        metadata.update({"id": "com.example.Other"} if change == "metadata id" else {"version": 2})
        (pkg / "metadata.json").write_text(json.dumps(metadata), encoding="utf-8")
    server.rescan()  # a new commit for v1
    hub.clear_cache()
    with pytest.raises(wk.KernelError) as info:
        wk.get_kernel(OFFICIAL, version=1)
    assert fragment in f"{type(info.value).__name__}: {info.value}"
    # each names the repository: the manifest's error had named only a snapshot path, then removed
    assert OFFICIAL in " ".join([str(info.value), *getattr(info.value, "__notes__", ())])
    assert cache_state(hub_env) == before
    go_offline(monkeypatch)
    assert wk.get_kernel(OFFICIAL, version=1).package.commit == first.package.commit


def test_the_cli_says_when_the_cache_answered_for_an_unreachable_hub(server, hub_env, monkeypatch):
    CliRunner().invoke(_cli(), ["download", OFFICIAL, "--version", "1"], catch_exceptions=False)
    hub.clear_cache()
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # nothing listens there
    # the same cache folder as the server's: HF_ENDPOINT names the configured Hub
    result = CliRunner().invoke(_cli(), ["download", OFFICIAL, "--version", "1"])
    assert result.exit_code == 0, result.output
    assert "(from the Hugging Face cache: http://127.0.0.1:9 cannot be reached (ConnectError" in result.output, result.output
    data = json.loads(CliRunner().invoke(_cli(), ["download", OFFICIAL, "--version", "1", "--json"]).stdout)
    assert data["fromCache"] is True and data["offline"] is False
    assert data["fromCacheReason"].startswith("http://127.0.0.1:9 cannot be reached")
    monkeypatch.setenv("HF_ENDPOINT", server.url)
    hub.clear_cache()
    data = json.loads(CliRunner().invoke(_cli(), ["download", OFFICIAL, "--version", "1", "--json"]).stdout)
    assert data["fromCache"] is False and data["fromCacheReason"] is None


def test_a_hub_answering_5xx_is_unreachable_and_the_cache_answers(server, hub_env, monkeypatch):
    """huggingface_hub serves the cached snapshot after a 503, but the check counted any HTTP answer
    as the Hub reached: `download` said "from <endpoint>" for the cache's copy."""
    import hub_server

    CliRunner().invoke(_cli(), ["download", OFFICIAL, "--version", "1"], catch_exceptions=False)
    answered = []

    def down(handler, method):
        answered.append(method)
        return handler._error(503, None, "Service Unavailable")

    monkeypatch.setattr(hub_server._Handler, "_dispatch", down)
    hub.clear_cache()
    data = json.loads(CliRunner().invoke(_cli(), ["download", OFFICIAL, "--version", "1", "--json"]).stdout)
    assert answered and data["fromCache"] is True
    assert re.search(r"answered .*503 Service Unavailable", data["fromCacheReason"]), data["fromCacheReason"]


@pytest.fixture
def no_login(monkeypatch, tmp_path) -> None:
    """No token from a huggingface_hub login on this machine: HF_TOKEN alone is what is sent."""
    monkeypatch.setattr(hf_constants, "HF_TOKEN_PATH", str(tmp_path / "no-token"))
    monkeypatch.setattr(hf_constants, "HF_STORED_TOKENS_PATH", str(tmp_path / "no-stored-tokens"))


def test_a_private_repository_says_whether_a_token_was_sent(server, monkeypatch, no_login):
    """It read "(or it is private/gated and no valid token was sent)" whether a token was sent or
    not, and said nothing of how to send one."""
    server.private[OFFICIAL] = "hf_reader"
    with pytest.raises(HubError, match=r"or it is private and no token was sent: set HF_TOKEN"):
        wk.get_kernel(OFFICIAL, version=1)
    monkeypatch.setenv("HF_TOKEN", "hf_another")
    with pytest.raises(HubError, match=r"or it is private and the token sent \(HF_TOKEN"):
        wk.get_kernel(OFFICIAL, version=1)
    monkeypatch.setenv("HF_TOKEN", "hf_reader")
    assert wk.get_kernel(OFFICIAL, version=1).package.commit == server.commit_of(OFFICIAL, "v1")


def test_a_gated_repository_is_named_gated_not_missing(server, monkeypatch, no_login):
    """A gated repository lists its files to anyone and serves them only to accounts granted access:
    huggingface_hub's GatedRepoError is a RepositoryNotFoundError, so a repository just listed
    read "no kernel repository"."""
    server.gated[OFFICIAL] = "hf_granted"
    with pytest.raises(HubError, match=r"is gated: .*no token was sent: set HF_TOKEN") as info:
        wk.get_kernel(OFFICIAL, version=1)
    assert "no kernel repository" not in str(info.value)
    monkeypatch.setenv("HF_TOKEN", "hf_other")
    with pytest.raises(HubError, match=r"is gated: .*the token sent .* has not been granted access"):
        wk.get_kernel(OFFICIAL, version=1)
    monkeypatch.setenv("HF_TOKEN", "hf_granted")
    assert wk.get_kernel(OFFICIAL, version=1).package.commit == server.commit_of(OFFICIAL, "v1")


def test_a_token_the_hub_refuses_is_named_with_what_to_do(server, monkeypatch):
    """A revoked or mistyped HF_TOKEN: the Hub answers 401 "Invalid credentials in Authorization
    header" on a line the error dropped, leaving a bare "401 Unauthorized"."""
    server.tokens = {"hf_valid"}
    monkeypatch.setenv("HF_TOKEN", "hf_revoked")
    with pytest.raises(HubError, match=r"401 .*: Invalid credentials in Authorization header .*renew it, or unset "
                                       r"HF_TOKEN"):  # fmt: skip
        wk.get_kernel(OFFICIAL, version=1)


def test_the_cache_answering_for_a_refused_token_says_the_token_was_refused(server, monkeypatch):
    """A 401 with a cached copy: the cache answers, and `download` had said "could not be reached or
    did not list it", a revoked HF_TOKEN hidden."""
    first = wk.get_kernel(OFFICIAL, version=1)
    assert first.package.from_cache_reason is None  # from the Hub
    hub.clear_cache()
    server.tokens = {"hf_valid"}
    monkeypatch.setenv("HF_TOKEN", "hf_revoked")
    package = wk.get_kernel(OFFICIAL, version=1).package
    assert package.from_cache and package.commit == first.package.commit
    assert re.search(r"refused the token .*\(401 Unauthorized: Invalid credentials in Authorization header\)", package.from_cache_reason)
    hub.clear_cache()
    result = CliRunner().invoke(_cli(), ["download", OFFICIAL, "--version", "1"])
    assert result.exit_code == 0, result.output
    assert "could not be reached" not in result.output, result.output
    assert re.search(r"from the Hugging Face cache: .*refused the token .*Invalid credentials in Authorization header"
                     r".*renew it", result.output), result.output  # fmt: skip
    hub.clear_cache()
    data = json.loads(CliRunner().invoke(_cli(), ["download", OFFICIAL, "--version", "1", "--json"]).stdout)
    assert data["fromCache"] is True and "Invalid credentials" in data["fromCacheReason"]


@pytest.mark.parametrize("command", [["info"], ["run", "-i", "X=4:f32"], ["download"], ["download", "--version", "1"]])
@pytest.mark.parametrize("pin", ["", "@v1"])
def test_credentials_in_a_kernel_url_are_refused_without_being_shown_by_every_command(hub_env, command, pin):
    """A KERNEL argument was cut at its first @, the user:token@host one: every command but download
    printed the repository 'https://user:s3cret', the token in its message."""
    url = "https://user:s3cret@hub.example/kernels/webgpu-kernels/com.microsoft.QuickGelu" + pin
    args = [command[0], url, *command[1:]]
    result = CliRunner().invoke(_cli(), ["--trust-remote-code", *args])
    assert result.exit_code == 2, result.output
    assert "credentials in the URL" in result.output and "s3cret" not in result.output, result.output


def test_the_global_trust_option_reaches_every_command(server):
    """The refusal tells the user to pass --trust-remote-code; only `download` took it, so every
    other command (info, run, test, bench...) could never load a repository of another organisation."""
    refused = CliRunner().invoke(_cli(), ["info", OTHER_ORG])
    assert refused.exit_code == 2 and "webgpu-kernels --trust-remote-code COMMAND" in refused.output
    result = CliRunner().invoke(_cli(), ["--trust-remote-code", "info", OTHER_ORG, "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["op"] == OP_ID
    assert CliRunner().invoke(_cli(), ["--trust-remote-code", "download", OTHER_ORG, "--version", "1"]).exit_code == 0
    # after the command too, as download takes it: it had been "No such option" (an author's trial)
    hub.clear_cache()
    result = CliRunner().invoke(_cli(), ["info", OTHER_ORG, "--trust-remote-code", "--json"])
    assert result.exit_code == 0 and json.loads(result.stdout)["op"] == OP_ID, result.output
    for command in ("run", "test", "bench", "tune", "explain", "render"):
        assert "--trust-remote-code" in CliRunner().invoke(_cli(), [command, "--help"]).output, command


@pytest.mark.parametrize("status, reason", [(429, "Too Many Requests"), (403, "Forbidden"),
                                            (500, "Internal Server Error")])  # fmt: skip
def test_an_http_refusal_with_nothing_cached_names_the_answer(server, monkeypatch, status, reason):
    """huggingface_hub falls back to the cache on a 403, a 429 or a 5xx; with nothing cached the
    error said the Hub "cannot be reached", hiding a rate limit or a refusal behind a network
    problem."""
    import hub_server

    monkeypatch.setattr(hub_server._Handler, "_dispatch", lambda handler, method: handler._error(status, None, reason))
    with pytest.raises(HubError, match="is not in the Hugging Face cache") as info:
        wk.get_kernel(OFFICIAL, version=1)
    assert f"answered {status} " in str(info.value) or f"'{status} {reason}'" in str(info.value), str(info.value)
    assert "cannot be reached" not in str(info.value)


def test_a_listed_file_the_server_then_lacks_is_named(server, monkeypatch):
    """A 404 for one listed file read "the Hub answered 404 Client Error.", naming no file."""
    import hub_server

    original = hub_server._Handler._resolve

    def lacking(self, method, repo_id, rev_name, path):
        if path.endswith("test.json"):
            return self._error(404, "EntryNotFound", "gone")
        return original(self, method, repo_id, rev_name, path)

    monkeypatch.setattr(hub_server._Handler, "_resolve", lacking)
    monkeypatch.setattr(huggingface_hub_file_download(), "time", types.SimpleNamespace(sleep=lambda seconds: None),
                        raising=False)  # fmt: skip
    with pytest.raises(HubError, match=r"answered 404 .*build/webgpu/test\.json"):
        wk.get_kernel(OFFICIAL, version=1)


def huggingface_hub_file_download():
    import huggingface_hub.file_download

    return huggingface_hub.file_download


def test_a_commit_sha_that_is_a_path_is_refused_before_anything_is_written(server, hub_env, tmp_path, monkeypatch):
    """huggingface_hub makes the commit the Hub names a path of the cache (trees/<commit>.json, the
    snapshot folder) without checking it: a repo info naming '../../../../escaped' wrote
    escaped.json and a file 'escaped' beside HF_HOME, outside the cache, left there."""
    import hub_server

    original_json, original_lookup = hub_server._Handler._json, hub_server.HubServer._lookup

    def json_(self, value, *, commit=None):
        if isinstance(value, dict) and "sha" in value:
            value = {**value, "sha": "../../../../escaped"}
        return original_json(self, value, commit=commit)

    monkeypatch.setattr(hub_server._Handler, "_json", json_)
    monkeypatch.setattr(hub_server.HubServer, "_lookup",
                        lambda self, repo, rev: original_lookup(self, repo, "v1" if "escaped" in rev else rev))
    with pytest.raises(HubError, match=r"named the commit '\.\./\.\./\.\./\.\./escaped' for it, not a 40-hex") as info:
        wk.get_kernel(OFFICIAL, version=1)
    assert info.value.repo_id == OFFICIAL and info.value.revision == "v1"
    assert not [p for p in tmp_path.rglob("escaped*")], "a file was written outside the cache"
    assert cache_state(hub_env) == {}


def test_download_takes_a_urls_version_pin_as_the_other_commands_do(server):
    """`info https://<hub>/kernels/org/op@v1` loads; `download` refused the same name, telling a
    command-line user how to write it in Python."""
    url = f"{server.url}/kernels/{OFFICIAL}"
    info = CliRunner().invoke(_cli(), ["--trust-remote-code", "info", f"{url}@v1", "--json"])
    assert info.exit_code == 0, info.output
    result = CliRunner().invoke(_cli(), ["--trust-remote-code", "download", f"{url}@v1", "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["commit"] == server.commit_of(OFFICIAL, "v1") and data["revision"] == "v1" and data["needsTrust"]
    both = CliRunner().invoke(_cli(), ["--trust-remote-code", "download", f"{url}@v1", "--version", "1"])
    assert both.exit_code == 2 and "names its revision" in both.output


def test_a_package_listed_larger_than_a_package_may_be_is_refused_before_it_is_downloaded(server, hub_root, hub_env,
                                                                                         monkeypatch):  # fmt: skip
    """Each file under the per-file bound but the package's content over the total a package may
    hold (MAX_PACKAGE_BYTES; shrunk here): every file was fetched, then refused when it opened
    (64 files of 8 MiB each: 512 MiB and more to disk)."""
    from webgpu_kernels import digests

    pkg = hub_root / OFFICIAL / "v1" / hub.PACKAGE_DIR
    for i in range(3):
        (pkg / f"blob{i}.npy").write_bytes(b"\1" * 600_000)
    write_metadata(pkg)  # before the bound is shrunk: digest refuses a package past it
    monkeypatch.setattr(digests, "MAX_PACKAGE_BYTES", 1 << 20)  # what the package's opening holds it to
    monkeypatch.setattr(hub, "MAX_PACKAGE_BYTES", 1 << 20, raising=False)
    server.rescan()
    with pytest.raises(HubError, match=r"hold \d+ bytes, more than a package may \(1048576\)") as info:
        wk.get_kernel(OFFICIAL, version=1)
    assert info.value.repo_id == OFFICIAL
    assert not any("/resolve/" in path for _, path in server.requests), "a file was downloaded"
    (pkg / "blob2.npy").unlink()
    (pkg / "blob1.npy").write_bytes(b"\1" * 300_000)
    write_metadata(pkg)
    (pkg / "notes.txt").write_bytes(b"n" * 600_000)  # unlisted and no content file: never read, not counted
    server.rescan()
    assert wk.get_kernel(OFFICIAL, version=1).op_id == OP_ID  # under the bound, the README beside it not counted


@pytest.mark.parametrize("cached", [True, False])
def test_a_hub_that_never_answers_is_unreachable_in_bounded_time(server, monkeypatch, cached):
    """A Hub that takes the connection and never answers (a stalled proxy): huggingface_hub's
    repo_info has no time limit, so get_kernel hung, a cached copy or not. Now the
    first request waits HF_HUB_ETAG_TIMEOUT seconds, then the cache answers as for a Hub down."""
    import threading
    import time

    import hub_server

    if cached:
        commit = wk.get_kernel(OFFICIAL, version=1).package.commit
        hub.clear_cache()
    release = threading.Event()
    monkeypatch.setattr(hub_server._Handler, "_dispatch", lambda handler, method: release.wait(60))
    monkeypatch.setenv("HF_HUB_ETAG_TIMEOUT", "1")
    start = time.monotonic()
    try:
        if cached:
            package = wk.get_kernel(OFFICIAL, version=1).package
            assert package.from_cache and package.commit == commit
        else:
            with pytest.raises(HubError, match=r"is not in the Hugging Face cache .* cannot be reached \(ReadTimeout"):
                wk.get_kernel(OFFICIAL, version=1)
    finally:
        release.set()
    assert time.monotonic() - start < 20


@pytest.mark.parametrize("setting", ["0", "-1", "nan"])
def test_a_metadata_time_limit_of_0_is_huggingface_hubs_default(server, monkeypatch, setting):
    """huggingface_hub reads HF_HUB_ETAG_TIMEOUT=0 as unset (`int(...) or 10`); hub.py's first
    request took it as a limit of no time: it timed out at once, and with nothing cached every load
    failed with "cannot be reached (ConnectError: ...)" while the Hub answered."""
    monkeypatch.setenv("HF_HUB_ETAG_TIMEOUT", setting)
    package = wk.get_kernel(OFFICIAL, version=1).package
    assert not package.from_cache and package.commit == server.commit_of(OFFICIAL, "v1")


def test_a_package_folder_without_a_manifest_names_the_repository(server, hub_root, hub_env):
    """build/webgpu/ without manifest.json: the PackageError named the snapshot's path, which the
    refused download then removed, and not the repository or revision asked for."""
    (hub_root / OFFICIAL / "v1" / hub.PACKAGE_DIR / "manifest.json").unlink()
    server.rescan()
    with pytest.raises(HubError, match=r"QuickGelu at revision 'v1' \(commit [0-9a-f]{40}\): build/webgpu/ is not a "
                                       r"WebGPU kernel package: no manifest\.json") as info:  # fmt: skip
        wk.get_kernel(OFFICIAL, version=1)
    assert info.value.repo_id == OFFICIAL and info.value.revision == "v1"
    assert cache_state(hub_env) == {}


@pytest.mark.parametrize("how", ["a link", "a relative path"])
def test_a_changed_cached_copy_is_the_caches_fault_whatever_the_path_to_the_cache(server, tmp_path, monkeypatch, how):
    """snapshot_download resolves the cache folder, hub.py listed it as given: with HF_HOME through a
    symbolic link (a home on a linked volume) or relative, no cached file was recognised as cached,
    and a copy changed in the cache was blamed on the server ("nothing of it was kept in the cache:
    tell the repository's authors") while it stayed, refused at every load."""
    real = tmp_path / "real-home"
    real.mkdir()
    if how == "a link":
        (tmp_path / "linked-home").symlink_to(real, target_is_directory=True)
        monkeypatch.setenv("HF_HOME", str(tmp_path / "linked-home"))
    else:
        monkeypatch.chdir(tmp_path)
        monkeypatch.setenv("HF_HOME", "real-home")
    kernel = wk.get_kernel(OFFICIAL, version=1)
    blob = (kernel.package.root / "manifest.json").resolve()
    os.chmod(blob, 0o644)
    blob.write_bytes(blob.read_bytes().replace(b"1.702", b"1.703"))
    hub.clear_cache()
    with pytest.raises(DigestError, match="changed in the Hugging Face cache after it was downloaded") as info:
        wk.get_kernel(OFFICIAL, version=1)
    assert "tell the repository's authors" not in str(info.value)


def test_an_empty_cached_ref_says_the_cache_is_damaged(server, hub_env, monkeypatch):
    """refs/v1 empty (a write cut short by an older client or a full disk): offline, huggingface_hub
    serves snapshots/ itself, and the error read "(commit snapshots) has no build/webgpu/ folder: not
    a WebGPU kernel package", blaming the package."""
    wk.get_kernel(OFFICIAL, version=1)
    (hub_env / "hub" / REPO_FOLDER / "refs" / "v1").write_text("")
    go_offline(monkeypatch)
    with pytest.raises(HubError, match=r"the Hugging Face cache names no commit for it .*refs/v1\): delete .*"
                                       + re.escape(REPO_FOLDER)) as info:  # fmt: skip
        wk.get_kernel(OFFICIAL, version=1)
    assert "not a WebGPU kernel package" not in str(info.value)


# --- several processes loading one repository at once --------------------------------------------------

_WORKER = """
import json, sys
import webgpu_kernels as wk
print("ready", flush=True)
sys.stdin.readline()
try:
    kernel = wk.get_kernel(sys.argv[1], **json.loads(sys.argv[2]))
    print(json.dumps({"commit": kernel.package.commit}))
except wk.KernelError as exc:
    print(json.dumps({"error": type(exc).__name__, "message": str(exc)}))
"""


def start_workers(server, *specs: tuple[dict, bool]) -> list[subprocess.Popen]:
    """One process per (get_kernel keywords, whether it is the failing one), each ready to load
    OFFICIAL once told to (:func:`go`): imported first, so that the loads start when the test says.
    The failing one reaches the server as 'localhost' (the same cache folder: the configured
    endpoint), which tells the server which process it is."""
    processes = []
    for kwargs, failing in specs:
        env = {**os.environ, "HF_HUB_DISABLE_TELEMETRY": "1", "HF_HUB_DISABLE_PROGRESS_BARS": "1",
               "PYTHONPATH": os.pathsep.join([str(Path(wk.__file__).parents[1]), os.environ.get("PYTHONPATH", "")])}
        if failing:
            env["HF_ENDPOINT"] = server.url.replace("127.0.0.1", "localhost")
        processes.append(subprocess.Popen([sys.executable, "-c", _WORKER, OFFICIAL, json.dumps(kwargs)], env=env,
                                          stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True))  # fmt: skip
    for process in processes:
        assert process.stdout is not None and process.stdout.readline().strip() == "ready"
    return processes


def go(process: subprocess.Popen) -> None:
    assert process.stdin is not None
    process.stdin.write("go\n")
    process.stdin.flush()


def worker_result(process: subprocess.Popen) -> dict:
    out, _ = process.communicate(timeout=60)
    assert process.returncode == 0, out  # a traceback out of get_kernel ends the process with 1
    return json.loads(out.strip().splitlines()[-1])


@pytest.mark.parametrize("failing_revision", ["v1", "dev"])
def test_a_download_failing_in_one_process_keeps_what_another_downloads(server, hub_env, monkeypatch,
                                                                          failing_revision):  # fmt: skip
    """Two processes load the repository on a cold cache; one's download fails midway (the server
    refuses it a file) while the other downloads v1. The failing one's undo had removed what the
    other had fetched meanwhile: the other then failed too ("has no build/webgpu/ folder: not a
    WebGPU kernel package", or a FileNotFoundError on a blob), and the cache kept nothing of v1."""
    import hub_server

    original = hub_server._Handler._resolve
    held, release, served = threading.Event(), threading.Event(), []

    def resolve(self, method, repo_id, rev_name, path):
        failing_one = self.headers.get("Host", "").startswith("localhost")
        if failing_one and path.endswith("test.json"):
            held.set()
            release.wait(2)  # until the other has fetched some files (never, while it waits for the lock)
            return self._error(403, None, "refused to this process")
        if method == "GET" and not failing_one:  # the other's files only: the failing one's own had released it early
            served.append(path)
            if len(served) >= 5:
                release.set()
            time.sleep(0.02)  # the other is still downloading when the failing one gives up
        return original(self, method, repo_id, rev_name, path)

    monkeypatch.setattr(hub_server._Handler, "_resolve", resolve)
    failing, other = start_workers(server, ({"revision": failing_revision}, True), ({"version": 1}, False))
    # The failing one first, until the server holds its request: had the other loaded v1 first, the
    # failing one would find test.json in the cache and never fail (a flaky ordering).
    go(failing)
    assert held.wait(60)
    go(other)
    assert worker_result(failing)["error"] == "HubError"
    assert worker_result(other) == {"commit": server.commit_of(OFFICIAL, "v1")}
    state = cache_state(hub_env)
    assert f"{REPO_FOLDER}/refs/v1" in state and f"{REPO_FOLDER}/refs/dev" not in state
    go_offline(monkeypatch)
    assert wk.get_kernel(OFFICIAL, version=1).package.commit == server.commit_of(OFFICIAL, "v1")


def test_a_load_waits_for_the_repositorys_lock_in_bounded_time(server, hub_env, monkeypatch):
    """Another process holds the repository's lock (downloading it): a load waits at most
    $WEBGPU_KERNELS_HUB_LOCK_TIMEOUT seconds, then names the lock file."""
    lock = hub_env / "hub" / ".locks" / REPO_FOLDER / "webgpu-kernels.lock"
    lock.parent.mkdir(parents=True)
    code = "import sys, filelock; lock = filelock.FileLock(sys.argv[1]); lock.acquire(); print('held', flush=True); input()"
    holder = subprocess.Popen([sys.executable, "-c", code, str(lock)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True)  # fmt: skip
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        monkeypatch.setenv("WEBGPU_KERNELS_HUB_LOCK_TIMEOUT", "0")
        with pytest.raises(HubError, match=rf"waited 0 s for the lock {re.escape(str(lock))}, held by another "
                                           r"process .*\$WEBGPU_KERNELS_HUB_LOCK_TIMEOUT") as info:  # fmt: skip
            wk.get_kernel(OFFICIAL, version=1)
        assert info.value.repo_id == OFFICIAL and cache_state(hub_env) == {}
    finally:
        holder.communicate("\n", timeout=30)
    assert wk.get_kernel(OFFICIAL, version=1).op_id == OP_ID


def test_a_load_nested_in_a_load_of_the_same_repository_does_not_wait_for_itself(server, hub_env, monkeypatch):
    """The repository's lock is reentrant in the thread that holds it: a load made while it is held
    (an `accept` callback of hub.download loading the same repository) had waited for itself for
    $WEBGPU_KERNELS_HUB_LOCK_TIMEOUT seconds, then blamed "another process"."""
    monkeypatch.setenv("WEBGPU_KERNELS_HUB_LOCK_TIMEOUT", "0")
    nested = []
    package = hub.download(OFFICIAL, version=1, accept=lambda _: nested.append(wk.get_kernel(OFFICIAL, version=1)))
    assert [kernel.package.commit for kernel in nested] == [package.commit]


# --- a cache this process cannot write (a Docker image's, a cluster's shared copy) --------------------


def test_a_slow_download_holds_up_no_other_repositorys_load_in_the_process(server, hub_root, monkeypatch):
    """hub.load held the process's one lock through the download: while one thread fetched a
    repository (or waited up to $WEBGPU_KERNELS_HUB_LOCK_TIMEOUT for another process's), every other
    thread's get_kernel of any Hub kernel waited too, an already loaded one included."""
    import hub_server

    slow = "webgpu-kernels/com.microsoft.BiasAdd"
    put_package(hub_root, slow, "v1", op="com.microsoft.BiasAdd")
    server.rescan()
    loaded = wk.get_kernel(OFFICIAL, version=1)
    fetching, release = threading.Event(), threading.Event()
    original = hub_server._Handler._resolve

    def held(self, method, repo_id, rev_name, path):
        if repo_id == slow:
            fetching.set()
            release.wait(60)
        return original(self, method, repo_id, rev_name, path)

    monkeypatch.setattr(hub_server._Handler, "_resolve", held)
    slow_load = threading.Thread(target=lambda: wk.get_kernel(slow, version=1))
    slow_load.start()
    try:
        assert fetching.wait(60)
        others: list[object] = []
        other = threading.Thread(target=lambda: others.extend([wk.get_kernel(OFFICIAL, version=1),
                                                               wk.get_kernel(OFFICIAL, revision="dev")]))  # fmt: skip
        other.start()
        other.join(60)  # a bound for a hang, not a timing: it returns at once unless it waits for the slow load
        assert not other.is_alive(), "get_kernel of another repository waited for a download in another thread"
        assert others[0] is loaded and others[1].package.revision == "dev"
    finally:
        release.set()
        slow_load.join(60)
    assert wk.get_kernel(slow, version=1).op_id == "com.microsoft.BiasAdd"


def refuse_writes_below(monkeypatch, folder: Path) -> None:
    """os.mkdir refuses every folder below ``folder`` as a read-only cache refuses a user who does not
    own it (tests run as root, whom permissions do not stop): huggingface_hub's and the lock's
    folders are all made through it."""
    real_mkdir = os.mkdir

    def mkdir(path, *args, **kwargs):
        if str(os.path.abspath(path)).startswith(f"{folder}{os.sep}"):
            raise PermissionError(13, "Permission denied", os.fspath(path))
        return real_mkdir(path, *args, **kwargs)

    monkeypatch.setattr(os, "mkdir", mkdir)


def test_a_download_into_a_cache_this_process_cannot_write_says_so(server, hub_env, monkeypatch):
    """A revision the read-only cache lacks: a HubError naming the cache and what to set, not
    "download from <endpoint> failed: PermissionError", which blamed the Hub."""
    refuse_writes_below(monkeypatch, hub_env)
    with pytest.raises(HubError, match=rf"contract version 1 \(revision 'v1'\): the Hugging Face cache "
                                       rf"{re.escape(str(hub_env / 'hub'))} is not writable by this process "
                                       r"\(Permission denied: .*\).*set HF_HOME or HF_HUB_CACHE") as info:  # fmt: skip
        wk.get_kernel(OFFICIAL, version=1)
    assert info.value.repo_id == OFFICIAL and "download from" not in str(info.value)


def test_a_cache_this_process_cannot_write_is_read_without_the_lock(server, hub_env, monkeypatch, rng):
    """Filled by another user (root building an image), then read: the lock file cannot be opened
    (filelock raises PermissionError), and the cached copy loads and runs, online and offline."""
    wk.get_kernel(OFFICIAL, version=1)
    hub.clear_cache()
    refuse_writes_below(monkeypatch, hub_env)

    def refused(self, *args, **kwargs):
        raise PermissionError(13, "Permission denied", str(self.lock_file))

    monkeypatch.setattr(hub_cache.FileLock, "acquire", refused)
    monkeypatch.setenv("WEBGPU_KERNELS_HUB_LOCK_TIMEOUT", "0")
    x = rng.standard_normal((3, 130)).astype(np.float32)
    assert np.allclose(wk.get_kernel(OFFICIAL, version=1)({"X": x})["Y"], quick_gelu_ref(x), atol=1e-5)
    go_offline(monkeypatch)
    assert wk.get_kernel(OFFICIAL, revision="v1")({"X": x})["Y"].shape == x.shape


#: A hostile endpoint's words: a terminal title and a clear-screen, 8-bit CSI, and 200,000 more characters.
HOSTILE_WORDS = "Invalid credentials\x1b]0;owned\x07\x9b2J" + "A" * 200_000


def _unprintable(text: str) -> list[str]:
    return [c for c in text if (ord(c) < 32 and c not in "\n\t") or 127 <= ord(c) < 160]


@pytest.mark.parametrize("status", [401, 503])
def test_an_endpoint_s_words_are_bounded_and_printable_wherever_they_are_echoed(server, monkeypatch, status):
    """The server's message (X-Error-Message, or the JSON body's "error") reached from_cache_reason,
    HubError's message and download's output as sent: escape sequences that retitle a terminal or
    clear it, and a body of any length."""
    import hub_server

    first = wk.get_kernel(OFFICIAL, version=1)
    monkeypatch.setenv("HF_TOKEN", "hf_revoked")

    def hostile(handler, method):
        body = json.dumps({"error": HOSTILE_WORDS}).encode()
        handler.send_response(status)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(len(body)))
        handler.end_headers()
        if handler.command != "HEAD":
            handler.wfile.write(body)

    monkeypatch.setattr(hub_server._Handler, "_dispatch", hostile)
    hub.clear_cache()
    package = wk.get_kernel(OFFICIAL, version=1).package
    assert package.from_cache and package.commit == first.package.commit
    reason = package.from_cache_reason or ""
    assert "Invalid credentials" in reason and not _unprintable(reason) and len(reason) < 2000, reason[:300]
    hub.clear_cache()
    for args in (["download", OFFICIAL, "--version", "1"], ["download", OFFICIAL, "--version", "1", "--json"]):
        result = CliRunner().invoke(_cli(), args)
        assert result.exit_code == 0 and len(result.output) < 8000, result.output[:300]
        hub.clear_cache()
    shutil.rmtree(hub_cache.repo_cache_folder(server.url, OFFICIAL))  # no cache: the answer is the error
    with pytest.raises(HubError) as info:
        wk.get_kernel(OFFICIAL, version=1)
    message = str(info.value)
    assert "Invalid credentials" in message and not _unprintable(message) and len(message) < 2000, message[:300]


def test_the_published_versions_an_error_lists_are_bounded(monkeypatch):
    """A revision the endpoint does not have lists its vN refs: an endpoint with a million of them had
    made a message of megabytes. The newest few are named, with the count."""
    monkeypatch.setattr(hub_errors, "_published_versions", lambda *a: [f"v{i}" for i in range(1, 100_001)])
    message = str(hub_errors.no_revision(OFFICIAL, "v0", endpoint=None, token=None, version=None))
    assert message.endswith("published versions: " + ", ".join(f"v{i}" for i in range(99_989, 100_001))
                            + " (100000 in all)") and len(message) < 400, message[:400]  # fmt: skip


def test_threads_loading_one_repository_at_once_share_one_kernel(server, rng):
    """8 threads' first get_kernel of one repository, released together, by its contract version,
    its revision name and its commit: one kernel between them, each file fetched once, every
    result right, and no per-repository load lock left behind (hub._loading's count)."""
    from concurrent.futures import ThreadPoolExecutor

    commit = server.commit_of(OFFICIAL, "v1")
    asked = [{"version": 1}, {"revision": "v1"}, {"revision": commit}]
    x = rng.standard_normal((3, 67)).astype(np.float32)
    for attempt in range(4):  # the first downloads; later ones (after clear_cache) open the cache's copy
        hub.clear_cache()
        barrier = threading.Barrier(8)

        def load(t: int) -> wk.Kernel:
            barrier.wait()
            kernel = wk.get_kernel(OFFICIAL, **asked[t % len(asked)])
            np.testing.assert_allclose(kernel({"X": x})["Y"], quick_gelu_ref(x), rtol=2e-6, atol=2e-6)
            return kernel

        with ThreadPoolExecutor(8) as pool:
            kernels = list(pool.map(load, range(8)))
        assert all(kernel is kernels[0] for kernel in kernels), attempt
        assert kernels[0].package.commit == commit and hub._loading == {}
    fetched = [path for method, path in server.requests if method == "GET" and "/resolve/" in path]
    assert fetched and len(fetched) == len(set(fetched)), fetched


def test_the_per_repository_load_locks_do_not_outlive_their_loads(server):
    """hub.load kept one lock per (endpoint, cache, repository, revision) ever asked, failed loads
    included: a service passing its users' repository ids grew the dict without bound."""
    for i in range(20):
        with pytest.raises(HubError):
            hub.load(f"webgpu-kernels/com.example.Missing{i}", version=1)
        with pytest.raises(HubError):
            hub.load(OFFICIAL, revision=f"no-such-branch-{i}")
    assert wk.get_kernel(OFFICIAL, version=1).op_id == OP_ID
    assert hub._loading == {}


# --- bytes past the listing, an interrupted download ----------------------------------------------


@pytest.mark.parametrize("name, words", [
    ("build/webgpu/" + "a" * 252 + ".txt", "a segment of 256 bytes"),
    ("build/webgpu/" + ("d" * 200 + "/") * 6 + "x.txt", "1211 characters long"),
])  # fmt: skip
def test_a_listed_name_too_long_for_a_file_system_is_refused_before_anything_is_written(server, hub_env, monkeypatch,
                                                                                       name, words):  # fmt: skip
    """A name no common file system holds (a segment past 255 bytes, a path past 1024 characters)
    passed the listing's check: every other file was fetched, then, on the Hub, huggingface_hub's write
    of that one failed (ENAMETOOLONG, 'download ... failed: OSError'; this stand-in cannot serve it)."""
    list_also(monkeypatch, name)
    with pytest.raises(HubError, match=f"{words}.*refused before anything was downloaded") as info:
        wk.get_kernel(OFFICIAL, version=1)
    assert info.value.repo_id == OFFICIAL
    assert not any("/resolve/" in path for _, path in server.requests), "a file was downloaded"
    assert not (hub_env / "hub").exists()


@pytest.mark.parametrize("size", ["10", [1], None, -1, True, 1.5])
def test_a_listed_size_that_is_no_count_of_bytes_is_refused_before_anything_is_written(server, hub_env, monkeypatch,
                                                                                       size):  # fmt: skip
    """The listing's size of a file is the server's JSON: a string or a list had raised a raw
    TypeError from the size check, and a file listed without a size (or a negative one) passed
    the count and size bounds uncounted."""
    import hub_server

    original = hub_server._entry
    monkeypatch.setattr(hub_server, "_entry", lambda folder, p: {**original(folder, p), "size": size}
                        if p.name == "bench.json" else original(folder, p))  # fmt: skip
    with pytest.raises(HubError, match=r"lists build/webgpu/bench\.json with the size .*, not a number of bytes: "
                                       "refused before anything was downloaded") as info:
        wk.get_kernel(OFFICIAL, version=1)
    assert info.value.repo_id == OFFICIAL
    assert not any("/resolve/" in path for _, path in server.requests), "a file was downloaded"
    assert not (hub_env / "hub").exists()


def test_a_file_served_larger_than_listed_stops_at_the_listings_bytes(server, hub_root, hub_env, monkeypatch):
    """The listing checked before the download says 10 bytes; the server then sends 2 MiB (it
    could send gigabytes: huggingface_hub writes every byte, then compares the size with the HEAD's,
    the server's word too). The download stops once it passes what the listing announced, and
    nothing of it stays."""
    import huggingface_hub.constants

    import hub_server

    pkg = hub_root / OFFICIAL / "v1" / hub.PACKAGE_DIR
    (pkg / "notes.txt").write_bytes(b"n" * (2 << 20))  # no content file: never read, so no digest catches it
    server.rescan()
    original = hub_server._entry

    def entry(folder, p):
        out = original(folder, p)
        return {**out, "size": 10} if p.name == "notes.txt" else out

    monkeypatch.setattr(hub_server, "_entry", entry)
    monkeypatch.setattr(huggingface_hub.constants, "DOWNLOAD_CHUNK_SIZE", 64 << 10)
    monkeypatch.setenv("HF_HUB_DISABLE_PROGRESS_BARS", "1")  # a disabled bar is still counted
    with pytest.raises(HubError, match=r"sent more than the \d+ bytes its listing of build/webgpu/ announced") as info:
        wk.get_kernel(OFFICIAL, version=1)
    assert info.value.repo_id == OFFICIAL and info.value.revision == "v1"
    assert cache_state(hub_env) == {}, "a partial download stayed"


def test_an_interrupted_download_leaves_the_cache_as_it_was(server, hub_env, monkeypatch):
    """Ctrl-C (or any exception that is no KernelError) in the middle of the files: the files fetched
    before it, the commit's tree listing and a partial snapshot had stayed in the cache."""
    import huggingface_hub.file_download

    dev = wk.get_kernel(OFFICIAL, revision="dev")
    before = cache_state(hub_env)
    original = huggingface_hub.file_download.http_get
    calls: list[str] = []

    def interrupted(url, temp_file, **kwargs):
        calls.append(url)
        if len(calls) == 2:
            temp_file.write(b"half")
            raise KeyboardInterrupt
        return original(url, temp_file, **kwargs)

    monkeypatch.setattr(huggingface_hub.file_download, "http_get", interrupted)
    monkeypatch.setenv("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    hub_root_v1 = server.commit_of(OFFICIAL, "v1")
    with pytest.raises(KeyboardInterrupt):
        wk.get_kernel(OFFICIAL, revision=hub_root_v1)
    assert len(calls) >= 2
    assert cache_state(hub_env) == before
    go_offline(monkeypatch)
    assert wk.get_kernel(OFFICIAL, revision="dev").package.commit == dev.package.commit


@pytest.mark.parametrize("header", ["ETag", "X-Linked-Etag"])
def test_an_etag_that_is_a_path_out_of_the_cache_is_refused_and_its_file_removed(server, hub_env, monkeypatch, tmp_path,
                                                                                header):  # fmt: skip
    """huggingface_hub makes a file's ETag (the HEAD's answer, the server's word) the name of its blob,
    unchecked: an ETag of '../../../../planted-197' wrote the file's bytes outside the Hugging Face
    cache (any path this user may write: a .pth file in site-packages runs at the next Python start),
    and the package loaded. The load is refused, naming the file and where it was written, and the
    file it wrote is removed."""
    import hub_server

    original = hub_server._Handler.send_header

    def send_header(self, key, value):
        if key == "ETag" and "/resolve/" in self.path and self.path.endswith("/bench.json"):
            key, value = header, '"../../../../planted-197"'
        return original(self, key, value)

    monkeypatch.setattr(hub_server._Handler, "send_header", send_header)
    with pytest.raises(HubError, match=r"named the ETag '\.\./\.\./\.\./\.\./planted-197' for build/webgpu/bench\.json") as info:
        wk.get_kernel(OFFICIAL, version=1)
    assert info.value.repo_id == OFFICIAL and "planted-197 (removed)" in str(info.value)
    assert not [p for p in tmp_path.rglob("*planted-197*")], "the file written outside the cache stayed"
    assert cache_state(hub_env) == {}


def test_a_file_the_server_files_under_another_cached_commit_is_refused_and_that_copy_kept(server, hub_root, hub_env,
                                                                                          monkeypatch):  # fmt: skip
    """huggingface_hub files each downloaded file under the commit the server's HEAD answer names
    (X-Repo-Commit), unchecked: naming another commit already cached (one a lock pins) had added a
    file to that copy while the listed commit loaded, and the pinned copy then failed offline
    ("present but not listed"). The load is refused and the cache left as it was."""
    import hub_server

    pinned = wk.get_kernel(OFFICIAL, version=1).package.commit
    # v1 moves to a commit whose listing holds a file its metadata.json does not list
    (hub_root / OFFICIAL / "v1" / hub.PACKAGE_DIR / "extra.json").write_text("{}", encoding="utf-8")
    server.rescan()
    assert server.commit_of(OFFICIAL, "v1") != pinned
    before = cache_state(hub_env)
    original = hub_server._Handler.send_header

    def send_header(self, key, value):
        if key == "X-Repo-Commit" and "/resolve/" in self.path and self.path.endswith("/extra.json"):
            value = pinned
        return original(self, key, value)

    monkeypatch.setattr(hub_server._Handler, "send_header", send_header)
    hub.clear_cache()
    with pytest.raises(HubError, match=rf"named the commit {pinned} for build/webgpu/extra\.json") as info:
        wk.get_kernel(OFFICIAL, version=1)
    assert info.value.repo_id == OFFICIAL and server.commit_of(OFFICIAL, "v1") in str(info.value)
    assert cache_state(hub_env) == before
    go_offline(monkeypatch)
    assert wk.get_kernel(OFFICIAL, revision=pinned).package.commit == pinned
