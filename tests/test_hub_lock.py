"""Locking a project's Hub kernels: ``webgpu-kernels lock``, ``get_locked_kernel`` and
``download --lock`` (hub_lock.py), against the local Hub of tests/hub_server.py.

Same repositories and server as test_hub.py (its ``hub_root`` and ``server`` fixtures): the
official QuickGelu at v1 (and a branch 'dev'), the same package in another organisation.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
import test_hub
from click.testing import CliRunner
from test_hub import OFFICIAL, OTHER_ORG, go_offline, quick_gelu_ref

import webgpu_kernels as wk
from webgpu_kernels import hub, hub_lock
from webgpu_kernels.digests import write_metadata
from webgpu_kernels.errors import DigestError, HubCommitNotServedError, HubError, PackageError, TrustError

hub_root = test_hub.hub_root
server = test_hub.server

REPO_FOLDER = "kernels--webgpu-kernels--com.microsoft.QuickGelu"


def _cli(*args: str) -> tuple[int, str]:
    """Exit status and output: stdout alone with --json (huggingface_hub's progress bar goes to stderr)."""
    from webgpu_kernels.cli import main

    result = CliRunner(env={"COLUMNS": "200"}).invoke(main, list(args))
    return result.exit_code, result.stdout if "--json" in args and result.exit_code == 0 else result.output


def make_project(tmp_path: Path, dependencies: str, *, name: str = "project") -> Path:
    project = tmp_path / name
    project.mkdir()
    (project / "pyproject.toml").write_text(f'[project]\nname = "demo"\n\n[tool.webgpu-kernels.dependencies]\n'
                                            f"{dependencies}", encoding="utf-8")  # fmt: skip
    return project


def metadata_sha256(hub_root: Path, repo_id: str, ref: str) -> str:
    return hashlib.sha256((hub_root / repo_id / ref / hub.PACKAGE_DIR / "metadata.json").read_bytes()).hexdigest()


def move_v1(hub_root: Path, server, *, keep_history: bool) -> None:
    """Commit a change to branch v1 (its bench.json description), as an author's fix would. With
    ``keep_history``, the old commit stays served (under a ref of its own), as a real Hub keeps it."""
    folder = hub_root / OFFICIAL / "v1"
    if keep_history:
        shutil.copytree(folder, hub_root / OFFICIAL / "v1-history")  # same files: the same commit sha
    bench = folder / hub.PACKAGE_DIR / "bench.json"
    bench.write_text(bench.read_text(encoding="utf-8").replace('"description": "', '"description": "v1.1: '),
                     encoding="utf-8")  # fmt: skip
    write_metadata(bench.parent)
    server.rescan()


@pytest.fixture
def project(tmp_path) -> Path:
    return make_project(tmp_path, f'"{OFFICIAL}" = 1\n"{OTHER_ORG}" = 1\n')


# --- lock -------------------------------------------------------------------------------------------


def test_lock_writes_one_sorted_entry_per_repository_and_the_same_bytes_again(server, hub_root, hub_env, project):
    status, output = _cli("lock", str(project))
    assert status == 0, output
    lockfile = project / "webgpu-kernels.lock"
    first = lockfile.read_bytes()
    assert json.loads(first) == {"format": 1, "kernels": [
        {"repo": OTHER_ORG, "version": 1, "commit": server.commit_of(OTHER_ORG, "v1"),
         "metadataSha256": metadata_sha256(hub_root, OTHER_ORG, "v1")},
        {"repo": OFFICIAL, "version": 1, "commit": server.commit_of(OFFICIAL, "v1"),
         "metadataSha256": metadata_sha256(hub_root, OFFICIAL, "v1")},
    ]}  # fmt: skip
    assert first.endswith(b"}\n") and first.index(b'"commit"') < first.index(b'"metadataSha256"') < first.index(b'"repo"')
    assert f"{OFFICIAL} v1 -> commit {server.commit_of(OFFICIAL, 'v1')}" in output and f"wrote {lockfile}" in output
    # Locking reads metadata.json alone and keeps nothing of it in the Hugging Face cache (a lone file
    # there would read as an incomplete snapshot of the commit).
    assert not (hub_env / "hub" / REPO_FOLDER / "snapshots").exists()

    # Nothing changed on the Hub: the same bytes, and the file is left alone.
    mtime = lockfile.stat().st_mtime_ns
    status, output = _cli("lock", str(project), "--json")
    assert status == 0, output
    assert lockfile.read_bytes() == first and lockfile.stat().st_mtime_ns == mtime
    assert json.loads(output)["changed"] is False
    # The Python function writes what the command writes; the order of pyproject's lines does not matter.
    other = make_project(project.parent, f'"{OTHER_ORG}" = 1\n"{OFFICIAL}" = 1\n', name="reordered")
    result = hub_lock.lock_project(other)
    assert result.changed and (other / "webgpu-kernels.lock").read_bytes() == first


def test_the_lock_moves_only_when_lock_runs_again(server, hub_root, project):
    assert _cli("lock", str(project))[0] == 0
    old = server.commit_of(OFFICIAL, "v1")
    assert wk.get_locked_kernel(OFFICIAL, project).package.commit == old

    move_v1(hub_root, server, keep_history=True)
    new = server.commit_of(OFFICIAL, "v1")
    assert new != old
    hub.clear_cache()
    assert wk.get_kernel(OFFICIAL, version=1).package.commit == new  # the branch moved
    locked = wk.get_locked_kernel(OFFICIAL, project)  # the lock did not
    assert locked.package.commit == old and not locked.package.from_cache
    assert "v1.1" not in locked.package.read_text("bench.json")

    assert _cli("lock", str(project))[0] == 0
    entries = hub_lock.read_lockfile(project / "webgpu-kernels.lock")
    assert entries[OFFICIAL].commit == new
    assert entries[OFFICIAL].metadata_sha256 == metadata_sha256(hub_root, OFFICIAL, "v1")
    moved = wk.get_locked_kernel(OFFICIAL, project)
    assert moved.package.commit == new and "v1.1" in moved.package.read_text("bench.json")


def test_a_locked_commit_the_hub_no_longer_serves_comes_from_the_cache(server, hub_root, project):
    assert _cli("lock", str(project))[0] == 0
    old = wk.get_locked_kernel(OFFICIAL, project).package.commit
    move_v1(hub_root, server, keep_history=False)
    hub.clear_cache()
    package = wk.get_locked_kernel(OFFICIAL, project).package
    assert package.commit == old and package.from_cache


def test_a_locked_commit_the_hub_no_longer_serves_nor_the_cache_holds_says_to_lock_again(server, hub_root, project):
    """A locked commit gone from the Hub (force-pushed away) and not cached had read "has no revision
    '<sha>'", saying nothing of the lock file or of what to do."""
    assert _cli("lock", str(project))[0] == 0
    old = server.commit_of(OFFICIAL, "v1")
    move_v1(hub_root, server, keep_history=False)  # nothing loaded it: the cache is cold
    new = server.commit_of(OFFICIAL, "v1")
    lockfile = project / "webgpu-kernels.lock"
    with pytest.raises(HubCommitNotServedError) as info:
        wk.get_locked_kernel(OFFICIAL, project)
    error = info.value
    assert isinstance(error, HubError) and error.repo_id == OFFICIAL and error.revision == old
    assert error.lockfile == str(lockfile)
    message = str(error)
    assert f"{OFFICIAL} commit {old}, which {lockfile} pins for contract version 1, is no longer served by {server.url}" in message
    assert f"run `webgpu-kernels lock {project}` to lock the commit each branch vN is now" in message, message
    # download --lock says the same, exit 2
    status, output = _cli("--trust-remote-code", "download", "--lock", str(project))
    assert status == 2 and f"`webgpu-kernels lock {project}`" in " ".join(output.split()), output
    # and the command it names is the way out: the lock moves to the branch's commit, which loads
    assert _cli("lock", str(project))[0] == 0
    assert wk.get_locked_kernel(OFFICIAL, project).package.commit == new


# --- refusals of get_locked_kernel ----------------------------------------------------------------------


def test_a_lock_file_with_another_sha256_is_refused_and_nothing_is_kept(server, hub_env, project):
    assert _cli("lock", str(project))[0] == 0
    lockfile = project / "webgpu-kernels.lock"
    good = lockfile.read_text(encoding="utf-8")
    right = hub_lock.read_lockfile(lockfile)[OFFICIAL].metadata_sha256
    lockfile.write_text(good.replace(right, "0" * 64), encoding="utf-8")
    with pytest.raises(DigestError, match=rf"sha256 {right} of {OFFICIAL}'s metadata.json at commit [0-9a-f]{{40}} "
                                          rf"is not 0{{64}}, the one {lockfile} locked") as info:  # fmt: skip
        wk.get_locked_kernel(OFFICIAL, lockfile)
    assert info.value.file == "metadata.json" and info.value.reason == "mismatch"
    # Refused while the download could be undone: the commit is not in the cache.
    assert not (hub_env / "hub" / REPO_FOLDER / "snapshots").exists()

    # A kernel this process already opened at that commit is refused by the wrong lock too.
    lockfile.write_text(good, encoding="utf-8")
    assert wk.get_locked_kernel(OFFICIAL, lockfile).package.commit == server.commit_of(OFFICIAL, "v1")
    lockfile.write_text(good.replace(right, "0" * 64), encoding="utf-8")
    with pytest.raises(DigestError, match="the one .* locked"):
        wk.get_locked_kernel(OFFICIAL, lockfile)


def test_a_commit_whose_files_changed_on_the_hub_is_refused(server, hub_root, hub_env, project):
    """A Hub that serves other files under the locked commit (the test server reads them at request
    time) with a metadata.json to match: the files verify, the lock's sha256 does not."""
    assert _cli("lock", str(project))[0] == 0
    locked = server.commit_of(OFFICIAL, "v1")
    bench = hub_root / OFFICIAL / "v1" / hub.PACKAGE_DIR / "bench.json"
    bench.write_text(bench.read_text(encoding="utf-8").replace('"description": "', '"description": "changed: '),
                     encoding="utf-8")  # fmt: skip
    write_metadata(bench.parent)  # no rescan: the server still names the locked commit for v1
    assert server.commit_of(OFFICIAL, "v1") == locked
    with pytest.raises(DigestError, match="this is not the package that was locked"):
        wk.get_locked_kernel(OFFICIAL, project)
    assert not (hub_env / "hub" / REPO_FOLDER / "snapshots").exists()


def test_a_repository_missing_from_the_lock_names_the_file_and_what_it_lists(server, tmp_path, monkeypatch):
    project = make_project(tmp_path, f'"{OFFICIAL}" = 1\n')
    assert _cli("lock", str(project))[0] == 0
    lockfile = project / "webgpu-kernels.lock"
    missing = "webgpu-kernels/com.microsoft.BiasAdd"
    with pytest.raises(HubError, match=rf"{missing} is not in the lock file {lockfile} \(it lists {OFFICIAL}\): add "
                                       r"it to \[tool.webgpu-kernels.dependencies\] in pyproject.toml, then run "
                                       "`webgpu-kernels lock`") as info:  # fmt: skip
        wk.get_locked_kernel(missing, lockfile)
    assert info.value.repo_id == missing

    # The default lock file is the first one from the current folder upwards.
    (project / "src" / "pkg").mkdir(parents=True)
    monkeypatch.chdir(project / "src" / "pkg")
    assert wk.get_locked_kernel(OFFICIAL).package.commit == server.commit_of(OFFICIAL, "v1")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(PackageError, match=rf"no webgpu-kernels.lock in {tmp_path} or a folder above it: write one "
                                           "with `webgpu-kernels lock PROJECT_DIR`"):  # fmt: skip
        wk.get_locked_kernel(OFFICIAL)
    with pytest.raises(PackageError, match="no such lock file"):
        wk.get_locked_kernel(OFFICIAL, tmp_path / "nope.lock")


def test_trust_is_get_kernels_and_comes_before_the_lock_file_is_read(server, project):
    assert _cli("lock", str(project))[0] == 0  # locking runs nothing: no trust asked
    with pytest.raises(TrustError, match="outside the 'webgpu-kernels' organisation"):
        wk.get_locked_kernel(OTHER_ORG, project / "missing.lock")
    kernel = wk.get_locked_kernel(OTHER_ORG, project, trust_remote_code=True, expected_op_id="com.microsoft.QuickGelu")
    assert kernel.package.needs_trust and kernel.package.commit == server.commit_of(OTHER_ORG, "v1")
    with pytest.raises(PackageError, match="expected_op_id"):
        wk.get_locked_kernel(OFFICIAL, project, expected_op_id="com.microsoft.BiasAdd")


@pytest.mark.parametrize(("text", "message"), [
    ('{"format": 2, "kernels": []}', "expected a lock file of format 1"),
    ('{"format": 1, "kernels": [{"repo": "a/b"}]}', r"kernels\[0\]: expected an object with the keys commit, "),
    ('{"format": 1, "kernels": [{"repo": "a/b", "version": 1, "commit": "abc", "metadataSha256": "' + "0" * 64 + '"}]}',
     r"kernels\[0\]: commit must be a 40-hex commit sha"),
    ("not json", "not a lock file: invalid JSON"),
])  # fmt: skip
def test_a_malformed_lock_file_is_named(tmp_path, text, message):
    lockfile = tmp_path / "webgpu-kernels.lock"
    lockfile.write_text(text, encoding="utf-8")
    with pytest.raises(PackageError, match=message) as info:
        wk.get_locked_kernel(OFFICIAL, tmp_path)
    assert info.value.path == str(lockfile)


# --- offline ------------------------------------------------------------------------------------------


def test_a_locked_cached_commit_loads_and_runs_offline(server, project, monkeypatch, rng):
    assert _cli("lock", str(project))[0] == 0
    commit = wk.get_locked_kernel(OFFICIAL, project).package.commit
    server.stop()
    go_offline(monkeypatch)
    kernel = wk.get_locked_kernel(OFFICIAL, project)
    assert kernel.package.commit == commit and kernel.package.from_cache
    x = rng.standard_normal((2, 130)).astype(np.float32) * 4
    np.testing.assert_allclose(kernel({"X": x})["Y"], quick_gelu_ref(x), rtol=2e-6, atol=2e-6)
    # Not cached: the error says how to fill the cache for the lock.
    with pytest.raises(HubError, match="not in the Hugging Face cache") as info:
        wk.get_locked_kernel(OTHER_ORG, project, trust_remote_code=True)
    assert f"`webgpu-kernels download --lock {project}`" in "\n".join(info.value.__notes__)


def test_a_locked_commit_not_cached_with_the_hub_unreachable_names_download_lock(server, project, monkeypatch):
    """Offline, a locked commit not cached named `download --lock`; with the Hub unreachable (a
    stopped server, a network gone) it had named no way out."""
    assert _cli("lock", str(project))[0] == 0
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # nothing listens there; the cache is cold
    with pytest.raises(HubError, match="cannot be reached") as info:
        wk.get_locked_kernel(OFFICIAL, project)
    assert f"`webgpu-kernels download --lock {project}`" in "\n".join(info.value.__notes__)


def test_download_lock_fills_the_cache_for_an_offline_get_locked_kernel(server, hub_env, project, monkeypatch, rng):
    assert _cli("lock", str(project))[0] == 0
    # Another organisation's repository needs trust, refused before anything is fetched.
    status, output = _cli("download", "--lock", str(project))
    assert status == 2 and "--trust-remote-code" in output
    assert not (hub_env / "hub" / REPO_FOLDER).exists()
    status, output = _cli("download", OFFICIAL, "--lock", str(project))
    assert status == 2 and "leave out REPO" in output

    status, output = _cli("--trust-remote-code", "download", "--lock", str(project), "--json")
    assert status == 0, output
    data = json.loads(output)
    assert data["lockfile"] == str(project / "webgpu-kernels.lock")
    assert [(k["repo"], k["commit"]) for k in data["kernels"]] == [
        (OTHER_ORG, server.commit_of(OTHER_ORG, "v1")), (OFFICIAL, server.commit_of(OFFICIAL, "v1"))]  # fmt: skip
    monkeypatch.chdir(project)  # --lock alone: the lock file of this folder (or one above)
    status, output = _cli("download", "--lock", "--trust-remote-code")
    assert status == 0, output
    assert "2 locked kernels of" in output and f"{OFFICIAL} v1 -> commit {server.commit_of(OFFICIAL, 'v1')}" in output

    server.stop()
    go_offline(monkeypatch)
    for repo in (OFFICIAL, OTHER_ORG):
        kernel = wk.get_locked_kernel(repo, trust_remote_code=True)
        assert kernel.package.from_cache and kernel.package.commit == data["kernels"][[OTHER_ORG, OFFICIAL].index(repo)]["commit"]
        x = rng.standard_normal((3, 33)).astype(np.float32)
        np.testing.assert_allclose(kernel({"X": x})["Y"], quick_gelu_ref(x), rtol=2e-6, atol=2e-6)


# --- lock's errors ------------------------------------------------------------------------------------


@pytest.mark.parametrize(("pyproject", "message"), [
    (None, "pyproject.toml: no such file: `lock` pins the kernels that its [tool.webgpu-kernels.dependencies] table "
           "lists"),
    ('[project]\nname = "x"\n', "has no [tool.webgpu-kernels.dependencies] table"),
    ('[tool.webgpu-kernels]\ndependencies = 3\n', "must be a table of `\"org/op\" = N` lines, got an integer"),
    ('[tool.webgpu-kernels.dependencies]\n"QuickGelu" = 1\n',
     "'QuickGelu': expected a Hub kernel repository id 'org/op' as the key"),
    ('[tool.webgpu-kernels.dependencies]\n"a/b@v2" = 2\n', "'a/b@v2': expected a Hub kernel repository id"),
    ('[tool.webgpu-kernels.dependencies]\n"a/b" = "1"\n',
     "'a/b': expected the contract version, an integer from 1 (\"a/b\" = 1), got '1' (a string)"),
    ('[tool.webgpu-kernels.dependencies]\n"a/b" = 0\n', "got 0 (an integer)"),
    ('[tool.webgpu-kernels.dependencies]\n"a/b" = true\n', "got True (a boolean)"),
    ('[tool.webgpu-kernels.dependencies]\n"a/b" = 1.5\n', "got 1.5 (a float)"),
    ('[tool.webgpu-kernels.dependencies]\n"a/b" = {version = 1}\n', "(a table)"),
    ('[tool.webgpu-kernels.dependencies\n', "not valid TOML"),
    ('\ufeff[tool.webgpu-kernels.dependencies]\r\n"a/b" = 1\r\n',
     "starts with a byte order mark (U+FEFF), which TOML readers, pip's included, refuse: save it as UTF-8 without"),
])  # fmt: skip
def test_bad_pyproject_entries_are_named_before_the_hub_is_asked(server, tmp_path, pyproject, message):
    project = tmp_path / "p"
    project.mkdir()
    if pyproject is not None:
        (project / "pyproject.toml").write_text(pyproject, encoding="utf-8")
    status, output = _cli("lock", str(project))
    assert status == 2 and message in " ".join(output.split()), output
    assert f"{project / 'pyproject.toml'}" in " ".join(output.split())
    with pytest.raises(PackageError):
        hub_lock.lock_project(project)
    assert not server.requests and not (project / "webgpu-kernels.lock").exists()


def test_lock_names_what_the_hub_lacks_and_writes_nothing(server, tmp_path, monkeypatch):
    project = make_project(tmp_path, f'"{OFFICIAL}" = 2\n')
    status, output = _cli("lock", str(project))
    assert status == 2 and f"{OFFICIAL} has no contract version 2 (revision 'v2')" in output
    assert "published versions: v1" in output
    (project / "pyproject.toml").write_text(
        '[tool.webgpu-kernels.dependencies]\n"webgpu-kernels/com.example.Nope" = 1\n', encoding="utf-8")
    with pytest.raises(HubError, match="no kernel repository 'webgpu-kernels/com.example.Nope'"):
        hub_lock.lock_project(project)
    (project / "pyproject.toml").write_text(
        '[tool.webgpu-kernels.dependencies]\n"webgpu-kernels/com.example.NoMetadata" = 1\n', encoding="utf-8")
    with pytest.raises(HubError, match="has no build/webgpu/metadata.json: not a WebGPU kernel package"):
        hub_lock.lock_project(project)
    assert not (project / "webgpu-kernels.lock").exists()


def test_lock_needs_the_hub(server, tmp_path, monkeypatch):
    project = make_project(tmp_path, f'"{OFFICIAL}" = 1\n')
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(HubError, match=r"offline mode is on \(HF_HUB_OFFLINE\): unset it to lock"):
        hub_lock.lock_project(project)
    monkeypatch.delenv("HF_HUB_OFFLINE")
    server.stop()  # no network: nothing answers on its port
    status, output = _cli("lock", str(project))
    assert status == 2 and "cannot be reached" in output and "so the lock cannot be made" in output
    assert not (project / "webgpu-kernels.lock").exists()


def test_lock_refuses_a_branch_whose_metadata_holds_another_version(server, hub_root, tmp_path):
    write_metadata(hub_root / OFFICIAL / "v1" / hub.PACKAGE_DIR, version=2)
    server.rescan()
    project = make_project(tmp_path, f'"{OFFICIAL}" = 1\n')
    with pytest.raises(DigestError, match=r"revision 'v1' of .* holds contract version 2, not 1"):
        hub_lock.lock_project(project)


# --- lock --check -------------------------------------------------------------------------------------


def test_lock_check_passes_on_a_current_lock_and_writes_nothing(server, project):
    assert _cli("lock", str(project))[0] == 0
    lockfile = project / "webgpu-kernels.lock"
    before, mtime = lockfile.read_bytes(), lockfile.stat().st_mtime_ns
    status, output = _cli("lock", "--check", str(project))
    assert status == 0, output
    assert f"{lockfile} matches pyproject.toml and {server.url} (2 kernels)" in " ".join(output.split())
    status, output = _cli("lock", str(project), "--check", "--json")
    assert status == 0, output
    assert json.loads(output) == {"path": str(lockfile), "upToDate": True, "lockFound": True, "hubAsked": True,
                                  "endpoint": server.url, "differences": []}  # fmt: skip
    assert lockfile.read_bytes() == before and lockfile.stat().st_mtime_ns == mtime
    result = hub_lock.check_lock(project)
    assert result.up_to_date and result.hub_asked and result.differences == ()


def test_lock_check_names_every_difference_and_writes_nothing(server, hub_root, project):
    assert _cli("lock", str(project))[0] == 0
    lockfile = project / "webgpu-kernels.lock"
    before = lockfile.read_bytes()
    old = server.commit_of(OFFICIAL, "v1")
    added = "webgpu-kernels/com.example.Added"  # not asked of the Hub: no such repository there
    (project / "pyproject.toml").write_text(f'[tool.webgpu-kernels.dependencies]\n"{OFFICIAL}" = 1\n"{added}" = 3\n',
                                            encoding="utf-8")  # fmt: skip
    move_v1(hub_root, server, keep_history=True)
    new = server.commit_of(OFFICIAL, "v1")
    status, output = _cli("lock", "--check", str(project))
    assert status == 1, output
    text = " ".join(output.split())
    assert f"{lockfile} does not match" in text
    assert f"added: {added} v3 (in pyproject.toml, not in the lock file)" in text
    assert f"removed: {OTHER_ORG} v1 (in the lock file, not in pyproject.toml)" in text
    assert f"moved: {OFFICIAL} v1: branch v1 is commit {new} on {server.url}, the lock file has {old}" in text
    assert f"run `webgpu-kernels lock {project}`" in text
    status, output = _cli("lock", "--check", "--json", str(project))
    assert status == 1
    data = json.loads(output)
    assert data["upToDate"] is False and data["hubAsked"] is True
    assert data["differences"] == [
        {"kind": "removed", "repo": OTHER_ORG, "lockVersion": 1, "pyprojectVersion": None,
         "lockCommit": server.commit_of(OTHER_ORG, "v1"), "hubCommit": None},
        {"kind": "added", "repo": added, "lockVersion": None, "pyprojectVersion": 3, "lockCommit": None,
         "hubCommit": None},
        {"kind": "moved", "repo": OFFICIAL, "lockVersion": 1, "pyprojectVersion": 1, "lockCommit": old,
         "hubCommit": new},
    ]  # sorted by repository  # fmt: skip
    assert lockfile.read_bytes() == before

    # A version changed in the pyproject: named, and its new branch is not asked for.
    (project / "pyproject.toml").write_text(f'[tool.webgpu-kernels.dependencies]\n"{OFFICIAL}" = 2\n'
                                            f'"{OTHER_ORG}" = 1\n', encoding="utf-8")  # fmt: skip
    server.requests.clear()
    status, output = _cli("lock", "--check", str(project))
    assert status == 1 and f"version: {OFFICIAL} v1 in the lock file, v2 in pyproject.toml" in " ".join(output.split())
    assert not any("v2" in path for _, path in server.requests), server.requests
    assert lockfile.read_bytes() == before


def test_lock_check_offline_compares_the_pyproject_alone_and_says_so(server, hub_root, project, monkeypatch):
    assert _cli("lock", str(project))[0] == 0
    move_v1(hub_root, server, keep_history=True)
    server.requests.clear()
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    status, output = _cli("lock", "--check", str(project))
    assert status == 0, output
    assert "the Hub was not asked (HF_HUB_OFFLINE is set)" in " ".join(output.split())
    status, output = _cli("lock", "--check", "--json", str(project))
    assert json.loads(output)["hubAsked"] is False and json.loads(output)["endpoint"] is None
    (project / "pyproject.toml").write_text(f'[tool.webgpu-kernels.dependencies]\n"{OFFICIAL}" = 1\n', encoding="utf-8")
    status, output = _cli("lock", "--check", str(project))
    assert status == 1 and f"removed: {OTHER_ORG} v1" in output
    assert "the Hub was not asked (HF_HUB_OFFLINE is set)" in " ".join(output.split())
    assert not server.requests


def test_lock_check_without_a_lock_file_lists_every_kernel(server, project):
    status, output = _cli("lock", "--check", str(project))
    assert status == 1, output
    text = " ".join(output.split())
    assert f"no lock file {project / 'webgpu-kernels.lock'}" in text and f"added: {OFFICIAL} v1" in text
    assert not server.requests and not (project / "webgpu-kernels.lock").exists()
    assert hub_lock.check_lock(project).lock_found is False


def test_lock_check_usage_errors_exit_2(server, tmp_path, project):
    status, output = _cli("lock", "--check", str(tmp_path))  # no pyproject.toml
    assert status == 2 and "pyproject.toml: no such file" in " ".join(output.split())
    lockfile = project / "webgpu-kernels.lock"
    lockfile.write_text('{"format": 7, "kernels": []}', encoding="utf-8")
    status, output = _cli("lock", "--check", "--json", str(project))
    assert status == 2 and "expected a lock file of format 1" in output
    lockfile.unlink()
    lockfile.mkdir()
    status, output = _cli("lock", "--check", str(project))
    assert status == 2 and "cannot read the lock file" in output
    lockfile.rmdir()
    assert _cli("lock", str(project))[0] == 0
    server.stop()
    status, output = _cli("lock", "--check", str(project))
    assert status == 2 and "cannot be reached" in output


# --- review --------------------------------------------------------------------------------


def test_an_enormous_lock_file_is_refused_unread(tmp_path):
    limit = hub_lock.MAX_PROJECT_FILE_BYTES
    lockfile = tmp_path / "webgpu-kernels.lock"
    with open(lockfile, "wb") as handle:  # sparse: a size, no bytes to write
        handle.truncate(limit + 1)
    with pytest.raises(PackageError, match=f"larger than {limit} bytes") as info:
        hub_lock.read_lockfile(lockfile)
    assert info.value.path == str(lockfile)


@pytest.mark.skipif(not hasattr(__import__("os"), "mkfifo"), reason="no FIFOs here")
def test_a_lock_file_that_is_a_fifo_is_refused_not_waited_on(server, project):
    import os

    lockfile = project / "webgpu-kernels.lock"
    os.mkfifo(lockfile)  # nothing writes to it: reading it would wait forever
    status, output = _cli("lock", "--check", str(project))
    assert status == 2 and "not a regular file" in output
    # `lock` puts a lock file in its place (the old one is only read to compare).
    assert _cli("lock", str(project))[0] == 0 and lockfile.is_file()


@pytest.mark.skipif(not hasattr(__import__("os"), "mkfifo"), reason="no FIFOs here")
def test_get_locked_kernel_names_a_lock_file_that_is_a_fifo_as_one(server, tmp_path):
    """lockfile= a FIFO (or a folder whose webgpu-kernels.lock is one) had said "no such lock file"."""
    import os

    fifo = tmp_path / "fifo.lock"
    os.mkfifo(fifo)
    with pytest.raises(PackageError, match=r"the lock file is not a regular file \(a FIFO\)") as info:
        wk.get_locked_kernel(OFFICIAL, fifo)
    assert info.value.path == str(fifo)
    os.mkfifo(tmp_path / "webgpu-kernels.lock")
    with pytest.raises(PackageError, match=r"the lock file is not a regular file \(a FIFO\)") as info:
        wk.get_locked_kernel(OFFICIAL, tmp_path)
    assert info.value.path == str(tmp_path / "webgpu-kernels.lock")
    with pytest.raises(PackageError, match="no such lock file"):  # still said of no file at all
        wk.get_locked_kernel(OFFICIAL, tmp_path / "nope.lock")


def test_lock_keeps_the_lock_files_permissions(server, project):
    lockfile = project / "webgpu-kernels.lock"
    lockfile.write_text('{"format": 1, "kernels": []}\n', encoding="utf-8")
    lockfile.chmod(0o640)
    assert _cli("lock", str(project))[0] == 0
    assert lockfile.stat().st_mode & 0o777 == 0o640 and len(hub_lock.read_lockfile(lockfile)) == 2


def test_the_upward_search_stops_at_a_folder_anyone_may_write(server, tmp_path, monkeypatch):
    """A /tmp-like folder (world-writable): a lock file there could be another user's, and would
    choose the commit a project below it loads."""
    shared = tmp_path / "shared"
    shared.mkdir()
    project = make_project(shared, f'"{OFFICIAL}" = 1\n', name="planted")
    assert _cli("lock", str(project))[0] == 0
    (project / "webgpu-kernels.lock").rename(shared / "webgpu-kernels.lock")
    shared.chmod(0o1777)
    (shared / "mine").mkdir()
    monkeypatch.chdir(shared / "mine")
    with pytest.raises(PackageError, match=rf"no webgpu-kernels.lock in {shared / 'mine'} or a folder above it:.*"
                                           rf"the search stopped at {shared}, which may be written by any user"):  # fmt: skip
        wk.get_locked_kernel(OFFICIAL)
    # Named explicitly, it is used: the user chose it.
    assert wk.get_locked_kernel(OFFICIAL, shared).package.commit == server.commit_of(OFFICIAL, "v1")


# --- review --------------------------------------------------------------------------------


def _lock_and_load_errors(project: Path) -> tuple[str, str]:
    """The HubError of `lock` and of get_kernel at the same revision, side by side."""
    with pytest.raises(HubError) as locking:
        hub_lock.lock_project(project)
    hub.clear_cache()
    with pytest.raises(HubError) as loading:
        wk.get_kernel(OFFICIAL, version=1)
    return str(locking.value), str(loading.value)


@pytest.mark.parametrize("case", ["private", "gated", "gated, another token", "refused token", "no such version"])
def test_lock_and_get_kernel_say_one_hub_refusal_in_the_same_words(server, tmp_path, monkeypatch, case):
    """hub_lock.py had its own copy of hub.py's translation of huggingface_hub's errors: one place
    (hub_errors.request_error) says each refusal now, and both paths give its words."""
    monkeypatch.setattr(test_hub.hf_constants, "HF_TOKEN_PATH", str(tmp_path / "no-token"))
    monkeypatch.setattr(test_hub.hf_constants, "HF_STORED_TOKENS_PATH", str(tmp_path / "no-stored-tokens"))
    project = make_project(tmp_path, f'"{OFFICIAL}" = 1\n')
    if case == "private":
        server.private[OFFICIAL] = "hf_reader"
        expected = rf"no kernel repository '{OFFICIAL}' on .* \(or it is private and no token was sent: set HF_TOKEN"
    elif case.startswith("gated"):
        server.gated[OFFICIAL] = "hf_granted"
        if case.endswith("token"):
            monkeypatch.setenv("HF_TOKEN", "hf_other")
        expected = rf"{OFFICIAL} on .* is gated: .*(no token was sent|has not been granted access)"
    elif case == "refused token":
        server.tokens = {"hf_valid"}
        monkeypatch.setenv("HF_TOKEN", "hf_revoked")
        expected = r"401 .*Invalid credentials in Authorization header .*renew it, or unset HF_TOKEN"
    else:
        project = make_project(tmp_path, f'"{OFFICIAL}" = 7\n', name="seven")
        with pytest.raises(HubError) as locking:
            hub_lock.lock_project(project)
        with pytest.raises(HubError) as loading:
            wk.get_kernel(OFFICIAL, version=7)
        assert str(locking.value) == str(loading.value) and "has no contract version 7 (revision 'v7')" in str(loading.value)
        return
    locking, loading = _lock_and_load_errors(project)
    assert locking == loading, (locking, loading)
    assert re.search(expected, locking), locking


def test_lock_says_an_unexpected_client_error_as_download_says_it(server, tmp_path, monkeypatch):
    """An error huggingface_hub raises that is none of its HTTP ones (here an OSError from the
    temporary download) is named with its type and first line, and with what the lock was doing."""
    import huggingface_hub

    def broken(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", broken)
    project = make_project(tmp_path, f'"{OFFICIAL}" = 1\n')
    with pytest.raises(HubError, match=rf"{OFFICIAL} revision 'v1': .* failed: OSError: \[Errno 28\] No space left") as info:
        hub_lock.lock_project(project)
    assert info.value.repo_id == OFFICIAL and info.value.revision == "v1"


def test_two_spellings_of_one_repository_are_refused_naming_both(server, tmp_path):
    """The Hub resolves repository ids case-insensitively: `Org/Op` and `org/op` had become two
    lock entries of one repository."""
    other = OFFICIAL.lower()
    project = make_project(tmp_path, f'"{OFFICIAL}" = 1\n"{other}" = 1\n')
    status, output = _cli("lock", str(project))
    said = " ".join(output.split())
    assert status == 2 and f"'{OFFICIAL}' and '{other}'" in said and "one repository" in said, output
    assert str(project / "pyproject.toml") in said
    assert not server.requests and not (project / "webgpu-kernels.lock").exists()


def test_a_lock_file_with_two_spellings_of_one_repository_is_refused(tmp_path):
    entry = {"commit": "a" * 40, "metadataSha256": "b" * 64, "repo": OFFICIAL, "version": 1}
    lockfile = tmp_path / "webgpu-kernels.lock"
    lockfile.write_text(json.dumps({"format": 1, "kernels": [entry, {**entry, "repo": OFFICIAL.upper()}]}), "utf-8")
    with pytest.raises(PackageError, match=r"kernels\[1\]: .*an entry before") as info:
        hub_lock.read_lockfile(lockfile)
    assert info.value.path == str(lockfile)


def test_get_locked_kernel_finds_the_entry_whatever_the_case_and_downloads_its_spelling(server, project):
    assert _cli("lock", str(project))[0] == 0
    other = OFFICIAL.replace("QuickGelu", "quickgelu")
    kernel = wk.get_locked_kernel(other, project)
    # The local Hub resolves ids case-sensitively: the download asked the lock entry's spelling.
    assert kernel.package.repo_id == OFFICIAL and kernel.package.commit == server.commit_of(OFFICIAL, "v1")


def test_lock_check_takes_another_spelling_in_the_pyproject_for_the_same_repository(server, project):
    assert _cli("lock", str(project))[0] == 0
    text = (project / "pyproject.toml").read_text("utf-8")
    (project / "pyproject.toml").write_text(text.replace("QuickGelu", "quickgelu"), "utf-8")
    check = hub_lock.check_lock(project)
    assert check.up_to_date, check.differences


@pytest.mark.skipif(not hasattr(__import__("os"), "mkfifo"), reason="no FIFOs here")
def test_the_upward_search_names_a_lock_file_that_is_no_regular_file(server, tmp_path, monkeypatch):
    """A FIFO named webgpu-kernels.lock had been skipped, the search going on to a lock file above it."""
    import os

    outer = make_project(tmp_path, f'"{OFFICIAL}" = 1\n', name="outer")
    assert _cli("lock", str(outer))[0] == 0
    inner = outer / "inner"
    inner.mkdir()
    os.mkfifo(inner / "webgpu-kernels.lock")
    monkeypatch.chdir(inner)
    with pytest.raises(PackageError, match=r"expected a regular file .*, got a FIFO") as info:
        wk.get_locked_kernel(OFFICIAL)
    assert info.value.path == str(inner / "webgpu-kernels.lock")
    (inner / "webgpu-kernels.lock").unlink()
    (inner / "webgpu-kernels.lock").mkdir()
    with pytest.raises(PackageError, match=r"expected a regular file .*, got a folder"):
        wk.get_locked_kernel(OFFICIAL)


@pytest.mark.skipif(not hasattr(__import__("os"), "mkfifo"), reason="no FIFOs here")
def test_a_pyproject_that_is_a_fifo_is_refused_not_waited_on(server, tmp_path):
    import os

    project = tmp_path / "p"
    project.mkdir()
    os.mkfifo(project / "pyproject.toml")  # nothing writes to it: reading it would wait forever
    with pytest.raises(PackageError, match=r"not a regular file \(a FIFO") as info:
        hub_lock.read_dependencies(project)
    assert info.value.path == str(project / "pyproject.toml")


def test_an_enormous_pyproject_is_refused_unread(server, tmp_path):
    project = tmp_path / "p"
    project.mkdir()
    with open(project / "pyproject.toml", "wb") as handle:  # sparse: a size, no bytes to write
        handle.truncate(hub_lock.MAX_PROJECT_FILE_BYTES + 1)
    with pytest.raises(PackageError, match=f"larger than {hub_lock.MAX_PROJECT_FILE_BYTES} bytes") as info:
        hub_lock.read_dependencies(project)
    assert info.value.path == str(project / "pyproject.toml")
    assert hub_lock.MAX_PROJECT_FILE_BYTES >= 16 * 1024 * 1024


def test_lock_writes_through_the_users_own_link(server, tmp_path, project):
    """A lock file kept elsewhere (a shared configuration repository) and linked into the project:
    `lock` had replaced the link by a file, leaving the linked one stale. As the tuning file's."""
    import os

    kept = tmp_path / "configs" / "project.lock"
    kept.parent.mkdir()
    kept.write_text('{"format": 1, "kernels": []}\n', encoding="utf-8")
    link = project / "webgpu-kernels.lock"
    link.symlink_to(os.path.relpath(kept, project))
    assert _cli("lock", str(project))[0] == 0
    assert link.is_symlink() and len(hub_lock.read_lockfile(kept)) == 2
    assert hub_lock.check_lock(project).up_to_date


def test_lock_stops_a_metadata_json_sent_larger_than_listed(server, hub_root, tmp_path, monkeypatch):
    """paths-info says build/webgpu/metadata.json is 100 bytes, then the server sends 2 MiB (it could
    send gigabytes): huggingface_hub had written it all to the temporary folder before lock's size
    check read it."""
    import huggingface_hub.constants

    import hub_server

    path = hub_root / OFFICIAL / "v1" / hub.PACKAGE_DIR / "metadata.json"
    path.write_bytes(path.read_bytes() + b" " * (2 << 20))  # the same JSON, padded
    server.rescan()
    original = hub_server._entry
    monkeypatch.setattr(hub_server, "_entry",
                        lambda folder, p: {**original(folder, p), "size": 100} if p.name == "metadata.json" else original(folder, p))
    monkeypatch.setattr(huggingface_hub.constants, "DOWNLOAD_CHUNK_SIZE", 64 << 10)
    project = make_project(tmp_path, f'"{OFFICIAL}" = 1\n')
    with pytest.raises(HubError, match=r"sent more than the 100 bytes its listing of build/webgpu/metadata\.json "
                                       r"announced, so the download was stopped after \d+ bytes") as info:
        hub_lock.lock_project(project)
    assert info.value.repo_id == OFFICIAL and info.value.revision == "v1"
    assert not (project / "webgpu-kernels.lock").exists()


@pytest.mark.parametrize("size", ["100", None, -1, True, 1.5])
def test_lock_refuses_a_metadata_json_listed_with_no_count_of_bytes(server, hub_root, tmp_path, monkeypatch, size):
    """paths-info's size for metadata.json, the server's JSON: a string had been 'asking ... failed:
    TypeError' (a note), as download's listing check now refuses such a size."""
    import hub_server

    original = hub_server._entry
    monkeypatch.setattr(hub_server, "_entry",
                        lambda folder, p: {**original(folder, p), "size": size} if p.name == "metadata.json" else original(folder, p))
    project = make_project(tmp_path, f'"{OFFICIAL}" = 1\n')
    with pytest.raises(HubError, match=r"lists build/webgpu/metadata\.json with the size .*, not a number of bytes") as info:
        hub_lock.lock_project(project)
    assert info.value.repo_id == OFFICIAL and "TypeError" not in str(info.value)
    assert not (project / "webgpu-kernels.lock").exists()


def test_lock_refuses_an_etag_that_is_a_path_out_of_its_folder(server, tmp_path, monkeypatch):
    """lock's metadata.json comes through hf_hub_download too, into a temporary folder: an ETag of
    '../../../x' wrote it beside that folder, where its removal did not reach."""
    import tempfile

    import hub_server

    original = hub_server._Handler.send_header

    def send_header(self, key, value):
        if key == "ETag" and "/resolve/" in self.path:
            value = '"../../../planted-197"'
        return original(self, key, value)

    monkeypatch.setattr(hub_server._Handler, "send_header", send_header)
    scratch = tmp_path / "tmp" / "a"
    scratch.mkdir(parents=True)
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    project = make_project(tmp_path, f'"{OFFICIAL}" = 1\n')
    with pytest.raises(HubError, match=r"named the ETag '\.\./\.\./\.\./planted-197' for build/webgpu/metadata\.json"):
        hub_lock.lock_project(project)
    assert not [p for p in tmp_path.rglob("*planted-197*")], "the file written outside the folder stayed"
    assert not (project / "webgpu-kernels.lock").exists()


# --- coverage audit -------------------------------------------------------------------------


def test_a_project_dir_that_is_no_folder_is_named_before_anything_is_read(tmp_path):
    for where in (tmp_path / "nope", tmp_path / "pyproject.toml"):
        if where.name == "pyproject.toml":
            where.write_text('[tool.webgpu-kernels.dependencies]\n"a/b" = 1\n', encoding="utf-8")
        with pytest.raises(PackageError, match=r"no such folder \(PROJECT_DIR is the folder that holds pyproject") as info:
            hub_lock.read_dependencies(where)
        assert info.value.path == str(where)


def test_a_pyproject_that_is_not_utf8_is_named_as_unreadable(tmp_path):
    project = tmp_path / "p"
    project.mkdir()
    (project / "pyproject.toml").write_bytes(b'[tool.webgpu-kernels.dependencies]\n"a/\xff" = 1\n')
    with pytest.raises(PackageError, match=r"cannot be read: 'utf-8' codec can't decode byte 0xff") as info:
        hub_lock.read_dependencies(project)
    assert info.value.path == str(project / "pyproject.toml")


def test_a_lock_file_that_cannot_be_written_is_a_package_error_naming_it(server, project):
    (project / "webgpu-kernels.lock").mkdir()  # a folder in its place: the rename over it fails
    with pytest.raises(PackageError, match=r"cannot write the lock file: Is a directory") as info:
        hub_lock.lock_project(project)
    assert info.value.path == str(project / "webgpu-kernels.lock")
    assert (project / "webgpu-kernels.lock").is_dir() and not list((project / "webgpu-kernels.lock").iterdir())
    assert sorted(p.name for p in project.iterdir()) == ["pyproject.toml", "webgpu-kernels.lock"]  # no temporary left


def test_lock_refuses_a_branch_whose_metadata_is_not_json(server, hub_root, tmp_path):
    (hub_root / OFFICIAL / "v1" / hub.PACKAGE_DIR / "metadata.json").write_text('{"version": 1,', encoding="utf-8")
    server.rescan()
    project = make_project(tmp_path, f'"{OFFICIAL}" = 1\n')
    with pytest.raises(DigestError, match=r"metadata\.json of .*QuickGelu at commit [0-9a-f]{40} is not valid "
                                          r"JSON \(.*\): tell the repository's authors"):  # fmt: skip
        hub_lock.lock_project(project)
    assert not (project / "webgpu-kernels.lock").exists()


def test_lock_refuses_a_hub_that_names_no_commit_sha(server, tmp_path, monkeypatch):
    from huggingface_hub import HfApi

    original = HfApi.repo_info

    def repo_info(self, *args, **kwargs):
        info = original(self, *args, **kwargs)
        info.sha = "main"  # a ref, not a commit: a lock must pin a commit
        return info

    monkeypatch.setattr(HfApi, "repo_info", repo_info)
    project = make_project(tmp_path, f'"{OFFICIAL}" = 1\n')
    with pytest.raises(HubError, match=r"revision 'v1': .* named the commit 'main', not a 40-hex commit sha") as info:
        hub_lock.lock_project(project)
    assert info.value.repo_id == OFFICIAL
    assert not (project / "webgpu-kernels.lock").exists()


@pytest.mark.parametrize("on_disk", [b'{"version": 2}', b"{not json", None])
def test_a_metadata_json_changed_after_it_was_verified_is_refused_naming_it(tmp_path, on_disk):
    """What is hashed must be what the package's files were verified against: a metadata.json
    rewritten (or removed) between the two is refused, whatever the lock file says."""
    from types import SimpleNamespace

    path = tmp_path / "metadata.json"
    if on_disk is not None:
        path.write_bytes(on_disk)
    package = SimpleNamespace(root=tmp_path, metadata={"version": 1})
    entry = hub_lock.LockEntry(OFFICIAL, 1, "a" * 40, hashlib.sha256(b'{"version": 1}').hexdigest())
    with pytest.raises(DigestError, match=f"metadata.json of {OFFICIAL} at commit a{{40}} changed after it was "
                                          "verified") as info:  # fmt: skip
        hub_lock.check_pinned(package, entry, tmp_path / "webgpu-kernels.lock")
    assert info.value.reason == "mismatch" and info.value.path == str(path)
    path.write_bytes(b'{"version": 1}')  # as verified, and as locked
    hub_lock.check_pinned(package, entry, tmp_path / "webgpu-kernels.lock")
