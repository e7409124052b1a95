"""docs/hub.md as a contract: one test per checkable claim that tests/test_hub.py does not pin,
organised by the document's headings; each docstring quotes the line it pins.

Same local Hub as test_hub.py (tests/hub_server.py, its ``hub_root`` and ``server`` fixtures).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
import test_hub
from click.testing import CliRunner
from test_hub import OFFICIAL, OP_ID, go_offline, put_package

import webgpu_kernels as wk
from webgpu_kernels import hub, hub_cache
from webgpu_kernels.errors import (
    DigestError,
    ExpressionError,
    HubError,
    InputError,
    KernelError,
    ManifestError,
    PackageError,
    TrustError,
)

# test_hub.py's local Hub (its repositories and the server), shared.
hub_root = test_hub.hub_root
server = test_hub.server

hf_constants = pytest.importorskip("huggingface_hub.constants")

REPO_FOLDER = "kernels--webgpu-kernels--com.microsoft.QuickGelu"


def _cli(*args: str) -> tuple[int, str, str]:
    """Exit status, stdout and stderr (errors and huggingface_hub's progress bar go to stderr)."""
    from webgpu_kernels.cli import main

    result = CliRunner().invoke(main, list(args))
    return result.exit_code, result.stdout, result.stderr


# --- use ------------------------------------------------------------------------------------------


def test_revision_overrides_version(server):
    """Pins "`revision=` | a branch, tag or 40-hex commit sha; **overrides** `version=`." """
    kernel = wk.get_kernel(OFFICIAL, version=7, revision="v1")
    assert kernel.package.revision == "v1" and kernel.package.commit == server.commit_of(OFFICIAL, "v1")


def test_a_shared_hub_kernel_keeps_the_revision_that_first_loaded_it(server):
    """Pins "`revision="main"` after `version=1` on the same commit returns the kernel whose `revision`
    is `"v1"`; `package.commit` is what every such call resolved to." """
    first = wk.get_kernel(OFFICIAL, version=1)
    main = wk.get_kernel(OFFICIAL, revision="main")
    assert main is first and main.package.revision == "v1"
    assert main.package.commit == server.commit_of(OFFICIAL, "main") == server.commit_of(OFFICIAL, "v1")


def test_clear_cache_forgets_kernels_and_resolved_revisions(server):
    """Pins "`webgpu_kernels.hub.clear_cache()` forgets both (the files on disk stay" """
    first = wk.get_kernel(OFFICIAL, version=1)
    hub.clear_cache()
    before = len(server.requests)
    again = wk.get_kernel(OFFICIAL, version=1)
    assert again is not first and again.package.root == first.package.root
    asked = server.requests[before:]
    assert any("/revision/v1" in path for _, path in asked)  # resolved again
    assert not any(m == "GET" and "/resolve/" in path for m, path in asked)  # the files stayed on disk


def test_a_revision_is_resolved_once_per_cache_folder(server, tmp_path, monkeypatch):
    """Pins "A revision name is resolved to its commit once per process (per endpoint and cache folder)" """
    first = wk.get_kernel(OFFICIAL, version=1)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "other-home"))
    other = wk.get_kernel(OFFICIAL, version=1)
    assert other.package.commit == first.package.commit
    assert (tmp_path / "other-home" / "hub" / REPO_FOLDER / "refs" / "v1").read_text() == first.package.commit


def test_expected_op_id_is_checked_on_cached_kernels_too(server):
    """Pins "`expected_op_id=` | refuses (`PackageError` naming both ids) ... Checked on every call,
    cached kernels included." """
    wk.get_kernel(OFFICIAL, version=1, expected_op_id=OP_ID)
    with pytest.raises(PackageError, match=rf"{OP_ID}.*com\.example\.Other"):
        wk.get_kernel(OFFICIAL, version=1, expected_op_id="com.example.Other")


@pytest.mark.parametrize("version", [1, 0, 99])
def test_version_on_a_local_folder_is_refused_whatever_n(hub_env, tmp_path, version):
    """Pins "For a local folder (a path, `file://`) it is refused with a `PackageError`, whatever N" """
    folder = put_package(tmp_path / "pkgs", "a/b", "c")
    for name in (str(folder), folder.as_uri()):
        with pytest.raises(PackageError, match="local folder"):
            wk.get_kernel(name, version=version, trust_remote_code=True)
        with pytest.raises(PackageError, match="local folder"):
            wk.get_kernel(name, revision="v1", trust_remote_code=True)


def test_an_embedded_version_mismatch_says_which_is_embedded_and_where_to_get_another(hub_env):
    """Pins "else a `PackageError` says which version is embedded and how to get another from the Hub" """
    embedded = wk.get_kernel(OP_ID).contract_version
    with pytest.raises(PackageError, match=rf"contract version {embedded}, not {embedded + 1}.*get_kernel\('webgpu-kernels/"):
        wk.get_kernel(OP_ID, version=embedded + 1)
    with pytest.raises(PackageError, match="revision= applies to Hub repositories"):
        wk.get_kernel(OP_ID, revision="v1")


@pytest.mark.parametrize("version", [0, -1, True, "1", 1.0])
def test_a_bad_version_is_a_package_error_naming_it(server, version):
    """Errors: "`PackageError` | ... a bad `version=`" """
    before = len(server.requests)
    with pytest.raises(PackageError, match="version must be a positive integer"):
        wk.get_kernel(OFFICIAL, version=version)
    assert len(server.requests) == before


# --- where a name points, and trust ---------------------------------------------------------------


@pytest.mark.parametrize("name", [
    "someone-else/com.microsoft.QuickGelu", "./pkg", "/abs/pkg", "~/pkg", "a/b/c", "file:///abs/pkg",
    "https://127.0.0.1:1/kernels/webgpu-kernels/com.microsoft.QuickGelu", "ftp://host/x",
])  # fmt: skip
def test_a_refused_name_costs_no_network_call(server, name):
    """Pins "The trust check comes first, before anything is read or fetched: a refused name costs no
    network call." """
    before = len(server.requests)
    with pytest.raises(TrustError):
        wk.get_kernel(name, version=1)
    assert len(server.requests) == before


def test_another_url_is_refused_as_unsupported_after_the_trust_check(hub_env):
    """Pins "any other URL (`https://host/x`, `ftp://…`) | refused as unsupported (after the trust check)" """
    with pytest.raises(PackageError, match="supported locations"):
        wk.get_kernel("https://host/x", trust_remote_code=True)


# --- the cache, offline use and the environment ---------------------------------------------------


def test_the_cache_is_laid_out_as_huggingface_hub_lays_it_out(server, hub_env):
    """Pins "refs/v1 -> the commit sha v1 resolved to; snapshots/<commit>/build/webgpu/… -> links into
    blobs/; blobs/<etag> the file contents; trees/<commit>.json the listing" """
    commit = wk.get_kernel(OFFICIAL, version=1).package.commit
    repo = hub_env / "hub" / REPO_FOLDER
    assert (repo / "refs" / "v1").read_text() == commit
    manifest = repo / "snapshots" / commit / "build" / "webgpu" / "manifest.json"
    assert manifest.is_symlink() and manifest.resolve().parent == (repo / "blobs").resolve()
    assert (repo / "trees" / f"{commit}.json").is_file()


@pytest.mark.parametrize("setting, expected", [
    ({"HF_HUB_CACHE": "{t}/c", "HF_HOME": "{t}/h"}, "{t}/c"),
    ({"HUGGINGFACE_HUB_CACHE": "{t}/legacy", "HF_HOME": "{t}/h"}, "{t}/legacy"),
    ({"HF_HOME": "{t}/h", "XDG_CACHE_HOME": "{t}/x"}, "{t}/h/hub"),
    ({"XDG_CACHE_HOME": "{t}/x"}, "{t}/x/huggingface/hub"),
])  # fmt: skip
def test_the_cache_folder_is_read_from_the_environment_at_each_call(monkeypatch, tmp_path, setting, expected):
    """Pins "`HF_HUB_CACHE`, else `HF_HOME/hub` (else `$XDG_CACHE_HOME/huggingface/hub`, ...) | the
    cache folder" (read at each call) """
    for var in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "HF_HOME", "XDG_CACHE_HOME"):
        monkeypatch.delenv(var, raising=False)
    for var, value in setting.items():
        monkeypatch.setenv(var, value.format(t=tmp_path))
    assert hub_cache.hub_cache_dir() == Path(expected.format(t=tmp_path))


def test_the_endpoint_is_read_at_each_call(monkeypatch):
    """Pins "`HF_ENDPOINT` | the Hub to ask (default `https://huggingface.co`)" (read at each call) """
    monkeypatch.delenv("HF_ENDPOINT", raising=False)
    assert hub_cache.hub_endpoint() is None
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9/")
    assert hub_cache.hub_endpoint() == "http://127.0.0.1:9"


def test_offline_a_commit_is_found_through_snapshots(server, monkeypatch):
    """Pins "`HF_HUB_OFFLINE=1` | cache only: `vN` is found through `refs/vN`, a commit through
    `snapshots/`; nothing cached is a `HubError` saying so" """
    commit = wk.get_kernel(OFFICIAL, version=1).package.commit
    go_offline(monkeypatch)
    before = len(server.requests)
    kernel = wk.get_kernel(OFFICIAL, revision=commit)
    assert kernel.package.from_cache and kernel.package.commit == commit
    with pytest.raises(HubError, match="offline"):
        wk.get_kernel(OFFICIAL, revision="dev")
    assert len(server.requests) == before


@pytest.mark.parametrize("var", ["HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"])
def test_offline_mode_is_read_at_each_call(monkeypatch, var):
    """Pins "`HF_HUB_OFFLINE=1` (or the legacy `TRANSFORMERS_OFFLINE=1`)" read at each call"""
    for name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(hf_constants, "HF_HUB_OFFLINE", False)
    assert not hub_cache.hub_offline()
    monkeypatch.setenv(var, "1")
    assert hub_cache.hub_offline()


def test_a_malformed_lock_timeout_is_an_input_error_naming_it(server, monkeypatch):
    """Pins "`WEBGPU_KERNELS_HUB_LOCK_TIMEOUT` | seconds ... (a value that is no non-negative integer
    is an `InputError` naming the variable, before any request)" """
    monkeypatch.setenv(hub_cache.LOCK_TIMEOUT_ENV, "ten")
    with pytest.raises(InputError, match=hub_cache.LOCK_TIMEOUT_ENV):
        wk.get_kernel(OFFICIAL, version=1)
    # refused before any request: it had been read at the lock, after the listing went to the Hub
    assert server.requests == []


def test_the_lock_file_is_where_the_doc_says(server, hub_env):
    """Pins "`<cache>/.locks/kernels--<org>--<name>/webgpu-kernels.lock`" """
    wk.get_kernel(OFFICIAL, version=1)
    assert (hub_env / "hub" / ".locks" / REPO_FOLDER / "webgpu-kernels.lock").exists()


def test_a_lock_timeout_of_0_does_not_wait(server, hub_env, monkeypatch):
    """Pins "(default 600 ...; `0`: do not wait), then raises a `HubError` naming the lock file" """
    from filelock import FileLock

    monkeypatch.setenv(hub_cache.LOCK_TIMEOUT_ENV, "0")
    path = hub_env / "hub" / ".locks" / REPO_FOLDER / "webgpu-kernels.lock"
    path.parent.mkdir(parents=True)
    import multiprocessing

    ctx = multiprocessing.get_context("spawn")
    held, release = ctx.Event(), ctx.Event()
    holder = ctx.Process(target=_hold_lock, args=(str(path), held, release))
    holder.start()
    try:
        assert held.wait(30)
        with pytest.raises(HubError, match=rf"waited 0 s for the lock {path}"):
            wk.get_kernel(OFFICIAL, version=1)
    finally:
        release.set()
        holder.join(30)
    assert FileLock(path).acquire(timeout=5)


def _hold_lock(path: str, held, release) -> None:
    from filelock import FileLock

    with FileLock(path):
        held.set()
        release.wait(30)


def test_another_hub_has_a_cache_folder_of_its_own(server, hub_env):
    """Pins "is cached in a folder of its own, `<cache>/webgpu-kernels-endpoints/<host>-<sha256 of the
    endpoint, 16 hex>/`" """
    other = server.url.replace("127.0.0.1", "localhost")
    kernel = wk.get_kernel(f"{other}/kernels/{OFFICIAL}", version=1, trust_remote_code=True)
    digest = hashlib.sha256(other.encode()).hexdigest()[:16]
    folder = hub_env / "hub" / "webgpu-kernels-endpoints"
    (named,) = folder.iterdir()
    assert named.name.endswith(f"-{digest}") and named.name.startswith("localhost")
    assert Path(kernel.package.root).resolve().is_relative_to((named / REPO_FOLDER).resolve())


def test_the_hugging_face_token_goes_to_the_configured_hub_only(server, monkeypatch):
    """Pins "(credentials in the URL ... are refused: set `HF_TOKEN` or log in with huggingface_hub)";
    the token is sent to the Hub that `HF_ENDPOINT` names, never to another one a kernel URL names
    (it had been sent to any host)."""
    import hub_server

    seen: list[tuple[str, str | None]] = []
    dispatch = hub_server._Handler._dispatch

    def spy(self, method: str) -> None:
        seen.append((self.headers.get("Host", "").partition(":")[0], self.headers.get("Authorization")))
        dispatch(self, method)

    monkeypatch.setattr(hub_server._Handler, "_dispatch", spy)
    monkeypatch.setenv("HF_TOKEN", "hf_claimstokenclaimstoken")
    other = server.url.replace("127.0.0.1", "localhost")
    wk.get_kernel(f"{other}/kernels/{OFFICIAL}", version=1, trust_remote_code=True)
    wk.get_kernel(OFFICIAL, version=1)
    hosts = {host for host, _ in seen}
    assert hosts == {"localhost", "127.0.0.1"}
    assert {auth for host, auth in seen if host == "localhost"} == {None}
    assert {auth for host, auth in seen if host == "127.0.0.1"} == {"Bearer hf_claimstokenclaimstoken"}


# --- errors ---------------------------------------------------------------------------------------


def test_the_error_classes_are_related_as_the_table_says():
    """Pins "all are `KernelError`s; all but `ManifestError` and `ExpressionError` are `PackageError`s" """
    for cls in (TrustError, HubError, DigestError):
        assert issubclass(cls, PackageError) and issubclass(cls, KernelError)
    for cls in (ManifestError, ExpressionError):
        assert issubclass(cls, KernelError) and not issubclass(cls, PackageError)


def test_an_unknown_repository_is_a_hub_error_naming_it(server):
    """Pins "`HubError` (`.repo_id`, `.revision`) | ... unknown repository" """
    with pytest.raises(HubError, match="no kernel repository") as caught:
        wk.get_kernel("webgpu-kernels/com.example.Missing", version=1)
    assert (caught.value.repo_id, caught.value.revision) == ("webgpu-kernels/com.example.Missing", "v1")


def test_a_repository_without_the_package_folder_is_a_hub_error(server, hub_root, hub_env):
    """Pins "`HubError` | ... a repository without `build/webgpu/`" (and the cache is left as it was)"""
    repo = hub_root / "webgpu-kernels/com.example.Empty/v1"
    repo.mkdir(parents=True)
    (repo / "README.md").write_text("# nothing here\n", encoding="utf-8")
    server.rescan()
    with pytest.raises(HubError, match="has no build/webgpu/ folder") as caught:
        wk.get_kernel("webgpu-kernels/com.example.Empty", version=1)
    assert caught.value.repo_id == "webgpu-kernels/com.example.Empty"
    folder = hub_env / "hub" / "kernels--webgpu-kernels--com.example.Empty"
    assert not (folder / "snapshots").exists() or not any((folder / "snapshots").iterdir())
    assert not (folder / "refs" / "v1").exists()


def test_a_manifest_error_notes_the_repository_revision_and_commit(server, hub_root):
    """Pins "a manifest that does not load ...; a note on the error (`__notes__`, printed by the command
    line) names the repository, revision and commit" """
    from webgpu_kernels.digests import write_metadata

    pkg = put_package(hub_root, "webgpu-kernels/com.example.Broken", "v1")
    manifest = json.loads((pkg / "manifest.json").read_text(encoding="utf-8"))
    manifest["variants"] = "not a list"
    (pkg / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    write_metadata(pkg)
    server.rescan()
    commit = server.commit_of("webgpu-kernels/com.example.Broken", "v1")
    with pytest.raises(ManifestError) as caught:
        wk.get_kernel("webgpu-kernels/com.example.Broken", version=1)
    notes = " ".join(getattr(caught.value, "__notes__", [])) or str(caught.value)
    assert "webgpu-kernels/com.example.Broken" in notes and "'v1'" in notes and commit in notes
    code, output, errors = _cli("download", "webgpu-kernels/com.example.Broken", "--version", "1")
    assert code == 2 and commit in errors


# --- webgpu-kernels download ----------------------------------------------------------------------


def test_download_json_says_from_cache(server):
    """Pins "`"fromCache": true` in its JSON" (and false when the Hub answered) """
    code, output, errors = _cli("download", OFFICIAL, "--version", "1", "--json")
    assert code == 0, errors
    info = json.loads(output)
    assert info["fromCache"] is False and info["commit"] == server.commit_of(OFFICIAL, "v1")
    server.stop()
    hub.clear_cache()
    code, output, errors = _cli("download", OFFICIAL, "--version", "1", "--json")
    assert code == 0, errors
    assert json.loads(output)["fromCache"] is True


def test_download_refuses_a_pin_and_version_together(server):
    """Pins "`org/op@vN` and `org/op@REV` ... pin it ..., in place of `--version`/`--revision`" """
    code, output, errors = _cli("download", f"{OFFICIAL}@v1", "--version", "1")
    assert code == 2 and "names its revision" in errors


def test_download_library_errors_are_one_error_line_and_status_2(server):
    """Pins "Library errors end it with one red `error:` line and exit status 2." """
    code, output, errors = _cli("download", OFFICIAL, "--version", "2")
    assert code == 2 and not output
    lines = [line for line in errors.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:") and "published versions: v1" in lines[0]


def test_download_needs_a_version_or_revision(server):
    """Pins "webgpu-kernels download REPO (--version N | --revision REV)" """
    code, output, errors = _cli("download", OFFICIAL)
    assert code == 2 and "--version" in errors


def test_download_of_a_path_is_refused(server, tmp_path):
    """Pins "REPO is `org/op` or `https://<hub>/kernels/org/op`" """
    code, output, errors = _cli("download", "./pkg", "--version", "1")
    assert code == 2 and "REPO" in errors


# --- huggingface_hub versions ---------------------------------------------------------------------


def test_the_routes_a_load_asks(server):
    """Pins the routes table: the revision, the listing of `build/webgpu/` that is checked before
    anything is downloaded, the whole tree (skipped when `trees/<commit>.json` is cached), then
    HEAD and GET of each package file under `resolve/<commit>/`."""
    from urllib.parse import unquote

    api_root = f"/api/kernels/{OFFICIAL}"
    commit = server.commit_of(OFFICIAL, "v1")

    def asked(since: int) -> tuple[list[tuple[str, str]], set[str]]:
        routes = [(m, unquote(p)) for m, p in server.requests[since:]]
        return [r for r in routes if r[1].startswith(api_root)], {m for m, p in routes if "/resolve/" in p}

    wk.get_kernel(OFFICIAL, version=1)
    api_routes, file_methods = asked(0)
    assert api_routes == [("GET", f"{api_root}/revision/v1"), ("GET", f"{api_root}/tree/{commit}/build/webgpu"),
                          ("GET", f"{api_root}/tree/{commit}")]  # fmt: skip
    assert file_methods == {"HEAD", "GET"}
    before = len(server.requests)
    hub.clear_cache()
    wk.get_kernel(OFFICIAL, version=1)
    api_routes, _ = asked(before)
    assert api_routes == [("GET", f"{api_root}/revision/v1"), ("GET", f"{api_root}/tree/{commit}/build/webgpu")]


def test_a_revision_the_hub_does_not_have_is_asked_for_once(server):
    """Pins "(`hub.py`; `snapshot_download` asks it again only when this named no commit; a revision
    the Hub answers it does not have is asked for once)" and the `refs` row ("only for the
    "published versions" hint"): snapshot_download had asked `/revision/v2` a second time, to be
    refused as the first request was."""
    from urllib.parse import unquote

    api_root = f"/api/kernels/{OFFICIAL}"
    with pytest.raises(HubError, match=r"has no contract version 2 \(revision 'v2'\) on .*; published versions: v1"):
        wk.get_kernel(OFFICIAL, version=2)
    assert [(m, unquote(p)) for m, p in server.requests] == [("GET", f"{api_root}/revision/v2"),
                                                             ("GET", f"{api_root}/refs")]  # fmt: skip
    before = len(server.requests)
    with pytest.raises(HubError, match=r"has no revision 'nothing' on .*; published versions: v1"):
        wk.get_kernel(OFFICIAL, revision="nothing")
    assert [unquote(p) for _, p in server.requests[before:]] == [f"{api_root}/revision/nothing", f"{api_root}/refs"]


def test_an_old_client_is_asked_to_upgrade(server, monkeypatch):
    """Pins "With an older client `get_kernel` raises a `HubError` asking for
    `pip install -U 'huggingface_hub>=1.26'`" (pyproject.toml's floor; the message had asked for 1.10,
    the first release with kernel repositories, below what loading needs)"""
    monkeypatch.delattr(hf_constants, "REPO_TYPE_KERNEL")
    with pytest.raises(HubError, match=r"pip install -U 'huggingface_hub>=1\.26'"):
        wk.get_kernel(OFFICIAL, version=1)

