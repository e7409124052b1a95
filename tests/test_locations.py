"""locations.py: what a kernel name designates and what needs trust, decided before any Hub request."""

from __future__ import annotations

import inspect
import re

import pytest

import webgpu_kernels as wk
from webgpu_kernels import locations
from webgpu_kernels.errors import PackageError, TrustError


@pytest.mark.parametrize(
    ("name", "kind"),
    [("com.microsoft.BiasAdd", "embedded"), ("webgpu-kernels/com.microsoft.BiasAdd", "hub"), ("./x", "path"),
     ("a/b/c", "path"), ("/x", "path"), ("file:///x", "path"), ("https://h/kernels/o/n", "hub"),
     ("https://h/o/n", "url"), ("C:\\pkg", "path")],
)  # fmt: skip
def test_classify(name, kind):
    assert locations.classify(name).kind == kind


@pytest.mark.parametrize("name", ["https://h/kernels/webgpu-kernels/a--b", "https://h/kernels/webgpu-kernels/.."])
def test_urls_get_the_repository_id_checks_too(name):
    with pytest.raises(PackageError, match="not a valid Hub repository id"):
        locations.classify(name)


@pytest.mark.parametrize("name", ["https://user:s3cret@hub.example/kernels/webgpu-kernels/com.microsoft.QuickGelu",
                                  "https://s3cret@hub.example/kernels/webgpu-kernels/com.microsoft.QuickGelu"])
def test_credentials_in_a_url_are_refused_without_being_shown(name):
    """They had named the endpoint's cache folder and been printed in every message."""
    with pytest.raises(PackageError, match="credentials in the URL") as refused:
        locations.classify(name)
    assert "s3cret" not in str(refused.value) and "hub.example/kernels" in str(refused.value)


def test_the_credentials_refusal_advises_what_get_kernel_takes():
    """It said "give a token as token=", which get_kernel has no parameter for (a TypeError):
    the token goes in HF_TOKEN, which huggingface_hub reads."""
    with pytest.raises(PackageError) as refused:
        locations.classify("https://user:s3cret@hub.example/kernels/webgpu-kernels/com.microsoft.QuickGelu")
    taken = inspect.signature(wk.get_kernel).parameters
    assert all(m in taken for m in re.findall(r"\b(\w+)=", str(refused.value))), str(refused.value)
    assert "HF_TOKEN" in str(refused.value)


@pytest.mark.parametrize("name", ["webgpu-kernels/op.", "webgpu-kernels/-op", "webgpu-kernels/.op",
                                  "webgpu-kernels/op-", "webgpu-kernels/" + "a" * 97, "webgpu-kernels/op.git",
                                  "https://h/kernels/webgpu-kernels/op."])  # fmt: skip
def test_a_repository_id_huggingface_hub_refuses_is_a_package_error(hub_env, name):
    """Names this library took as repository ids but huggingface_hub's validate_repo_id refuses (a
    name starting or ending with '-' or '.', longer than 96, ending in '.git') raised its
    HFValidationError, no KernelError: the command line printed a traceback."""
    with pytest.raises(PackageError, match="not a valid Hub repository id"):
        wk.get_kernel(name, version=1, trust_remote_code=True)
    from huggingface_hub.utils import validate_repo_id

    for good in ("webgpu-kernels/_op_", "webgpu-kernels/" + "a" * 96, "a/b", "webgpu-kernels/com.microsoft.QuickGelu"):
        assert locations.classify(good).kind == "hub"
        validate_repo_id(good)


def test_the_command_lines_version_pin_in_python_says_how_to_write_it():
    """`org/op@v1` is what the command line takes; get_kernel refused it without saying what to write."""
    with pytest.raises(PackageError, match=r"in Python write get_kernel\('webgpu-kernels/com.microsoft.QuickGelu', "
                                           r"version=1\)"):  # fmt: skip
        wk.get_kernel("webgpu-kernels/com.microsoft.QuickGelu@v1")
    with pytest.raises(PackageError) as refused:  # no advice to write another invalid id
        wk.get_kernel("webgpu-kernels/a--b@v1")
    assert "in Python write" not in str(refused.value)
    sha = "0123456789abcdef0123456789abcdef01234567"
    for rev in (sha, "main"):  # `org/op@REVISION`, the command line's other pin, had no advice
        with pytest.raises(PackageError, match=r"in Python write get_kernel\('webgpu-kernels/com.microsoft.QuickGelu', "
                                               rf"revision='{rev}'\)"):  # fmt: skip
            wk.get_kernel(f"webgpu-kernels/com.microsoft.QuickGelu@{rev}")


# --- trust --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("org, hinted", [("webgpu-kernel", True), ("WebGPU-Kernels", True), ("webgpukernels", True),
                                         ("someone", False)])  # fmt: skip
def test_a_near_miss_of_the_official_organisation_asks_did_you_mean(hub_env, org, hinted):
    """A typo of the organisation was answered only with "pass trust_remote_code": on the real Hub
    that steers the user to whoever registered the typo (an author's trial)."""
    with pytest.raises(TrustError) as info:
        wk.get_kernel(f"{org}/com.microsoft.QuickGelu", version=1)
    assert ("did you mean webgpu-kernels/com.microsoft.QuickGelu?" in str(info.value)) is hinted


@pytest.mark.parametrize(
    "name",
    ["./pkg", "../pkg", "/abs/pkg", "~/pkg", "a/b/c", "file:///tmp/pkg", "https://example.com/kernels/webgpu-kernels/x",
     "http://127.0.0.1:9/whatever", "ftp://example.com/pkg"],
)  # fmt: skip
def test_paths_and_urls_need_trust(hub_env, name):
    with pytest.raises(TrustError, match="local path or URL-like location") as info:
        wk.get_kernel(name)
    # A local folder is told of load_kernel, and not of the CLI's flag: the CLI opens folders
    # without it. A URL is told of the flag.
    local = not name.startswith(("http", "ftp"))
    assert ("load_kernel(path)" in str(info.value)) == local
    assert ("--trust-remote-code" in str(info.value)) == (not local)
    assert "trust_remote_code=True" in str(info.value)


_REFERENCE = "def ref(inputs, attrs):\n    return {}\n"


@pytest.mark.parametrize("command", ["validate", "test", "bench", "tune", "info", "explain", "render", "run",
                                     "digest", "expect"])  # fmt: skip
@pytest.mark.parametrize("path", ["./nope", "nope/a/b", "~nosuchuser/nope"])
def test_every_command_says_no_such_folder_naming_the_path_as_typed(tmp_path, monkeypatch, command, path) -> None:
    """`test ./nope` had said `nope: not a folder` (the ./ dropped), digest the absolute path,
    expect click's `Directory './nope' does not exist`, while validate said `no such folder`;
    `info ~nosuchuser/nope` had been a traceback."""
    from click.testing import CliRunner

    from webgpu_kernels.cli import main

    monkeypatch.chdir(tmp_path)
    (tmp_path / "ref.py").write_text(_REFERENCE, "utf-8")
    extra = {"expect": ["--reference", "ref.py:ref"], "run": ["-i", "X=4:f32"], "explain": ["-i", "X=4:f32"],
             "render": ["-i", "X=4:f32"]}.get(command, [])  # fmt: skip
    result = CliRunner().invoke(main, [command, path, *extra])
    assert result.exit_code == 2 and "Traceback" not in result.output, result.output
    assert result.stderr.splitlines()[0] == f"error: {path}: no such folder", result.stderr
    assert result.stdout == "", result.stdout  # bench had printed its adapter line first


@pytest.mark.parametrize("command", ["validate", "test", "bench", "tune", "info", "explain", "render", "run",
                                     "digest", "expect"])  # fmt: skip
def test_every_command_says_a_file_is_no_package_folder(tmp_path, monkeypatch, command) -> None:
    """A file named as the package: validate said `a file, not a package folder`, the others
    `not a folder`, and `test` ran it as a package that does not load (exit 1, a results table)
    where a path to nothing is the caller's slip (2). bench printed its adapter line first."""
    from click.testing import CliRunner

    from webgpu_kernels.cli import main

    monkeypatch.chdir(tmp_path)
    (tmp_path / "ref.py").write_text(_REFERENCE, "utf-8")
    (tmp_path / "manifest.json").write_text("{}", "utf-8")
    extra = {"expect": ["--reference", "ref.py:ref"], "run": ["-i", "X=4:f32"], "explain": ["-i", "X=4:f32"],
             "render": ["-i", "X=4:f32"]}.get(command, [])  # fmt: skip
    result = CliRunner().invoke(main, [command, "./manifest.json", *extra])
    assert result.exit_code == 2 and "Traceback" not in result.output, result.output
    assert result.stderr.splitlines()[0] == ("error: ./manifest.json: a file, not a package folder (name the folder "
                                             "that holds manifest.json)"), result.stderr  # fmt: skip
    assert result.stdout == "", result.stdout


@pytest.mark.parametrize("target", ["loop", "gone"])
def test_a_link_to_no_folder_is_said_to_be_one(tmp_path, monkeypatch, target) -> None:
    """A symbolic link that loops (ELOOP) or whose target is gone had been 'no such folder', though
    the link is there for `ls` to show."""
    from click.testing import CliRunner

    from webgpu_kernels.cli import main

    monkeypatch.chdir(tmp_path)
    (tmp_path / "loop").symlink_to(target)
    result = CliRunner().invoke(main, ["test", "./loop"])
    assert result.exit_code == 2, result.output
    assert result.stderr.splitlines()[0] == ("error: ./loop: a symbolic link that leads to no folder (its target is "
                                             "missing, or it loops)"), result.stderr  # fmt: skip


def test_a_path_this_user_may_not_search_is_a_folder_not_a_hub_repository(tmp_path, monkeypatch) -> None:
    """`org/op` under a folder this user may not search raised PermissionError in Path.exists, read
    as nothing there: the argument went to the Hub as a repository id. Opening it now
    says the folder cannot be opened. (Root searches every folder, so the denial is injected.)"""
    import errno
    import pathlib

    from click.testing import CliRunner

    from webgpu_kernels.cli import main
    from webgpu_kernels.kernel_arguments import classify_kernel_ref

    monkeypatch.chdir(tmp_path)
    real_stat = pathlib.Path.stat

    def stat(self, *args, **kwargs):
        if self.parts[:1] == ("locked",) or self.name == "locked" or "locked" in self.parts:
            raise PermissionError(errno.EACCES, "Permission denied", str(self))
        return real_stat(self, *args, **kwargs)

    monkeypatch.setattr(pathlib.Path, "stat", stat)
    assert classify_kernel_ref("locked/op").kind == "folder"
    result = CliRunner().invoke(main, ["info", "locked/op"])
    assert result.exit_code == 2, result.output
    assert result.stderr.splitlines()[0] == "error: locked/op: cannot be opened: Permission denied", result.stderr


@pytest.mark.parametrize("trust", [False, True])
def test_a_hub_id_with_a_trailing_slash_and_no_such_folder_asks_did_you_mean(tmp_path, monkeypatch, trust) -> None:
    """`org/op/` (pasted from a browser's URL path) is a path by the documented rule (two slashes);
    with no folder of that name it had been refused as a trust question, or with trust as a local
    folder that takes no version=, the repository it means never named."""
    monkeypatch.chdir(tmp_path)
    name = "webgpu-kernels/com.microsoft.QuickGelu/"
    with pytest.raises(PackageError) as info:
        wk.get_kernel(name, version=1, trust_remote_code=trust)
    assert not isinstance(info.value, TrustError)
    assert str(info.value) == f"{name}: no such folder (did you mean the Hub repository webgpu-kernels/com.microsoft.QuickGelu?)"
    assert locations.classify(name).kind == "path"  # the rule itself stands: no disk decides it


def test_get_kernel_and_the_commands_refuse_a_trailing_slash_in_one_wording(tmp_path, monkeypatch) -> None:
    """locations' refusal (get_kernel) and the command line's (kernel_arguments.kernel_folder) had each
    built their own text, which read differently: the one cli.md documents is both's, as the command
    prints it."""
    from click.testing import CliRunner

    from webgpu_kernels.cli import main

    monkeypatch.chdir(tmp_path)
    name = "webgpu-kernels/com.microsoft.QuickGelu/"
    with pytest.raises(PackageError) as info:
        wk.get_kernel(name, version=1)
    result = CliRunner().invoke(main, ["info", name])
    assert result.exit_code == 2 and " ".join(result.output.split()) == f"error: {info.value}", result.output


def test_a_folder_named_like_a_hub_id_with_a_trailing_slash_stays_a_path(tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "webgpu-kernels" / "com.microsoft.QuickGelu").mkdir(parents=True)
    with pytest.raises(TrustError, match="local path or URL-like location") as info:
        wk.get_kernel("webgpu-kernels/com.microsoft.QuickGelu/")
    assert "did you mean" not in str(info.value)


@pytest.mark.parametrize("name", ["webgpu-kernels/com.microsoft.QuickGelu/", "webgpu-kernels/com.microsoft.QuickGelu/@v1"])
def test_download_of_a_hub_id_with_a_trailing_slash_asks_did_you_mean(tmp_path, monkeypatch, name) -> None:
    from click.testing import CliRunner

    from webgpu_kernels.cli import main

    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(main, ["download", name, *([] if "@" in name else ["--version", "1"])])
    assert result.exit_code == 2 and "did you mean webgpu-kernels/com.microsoft.QuickGelu?" in result.output, result.output


def test_load_kernel_of_an_embedded_id_says_get_kernel_opens_it(tmp_path, monkeypatch) -> None:
    """load_kernel("com.microsoft.QuickGelu") had said only "no such folder": the id is
    an embedded kernel's, which get_kernel opens. A folder of that name in the working directory is
    still what load_kernel opens."""
    monkeypatch.chdir(tmp_path)
    op_id = wk.list_kernels()[0]
    with pytest.raises(PackageError) as info:
        wk.load_kernel(op_id)
    assert str(info.value) == f"{op_id}: no such folder (an embedded kernel's id: get_kernel({op_id!r}) opens it)"
    with pytest.raises(PackageError, match=r"^nope: no such folder$"):
        wk.load_kernel("nope")


# --- each kind's value, endpoint and refusal (mutation testing found them untested) -------------------


@pytest.mark.parametrize(
    ("name", "expected"),
    [("com.microsoft.BiasAdd", locations.Location("embedded", "com.microsoft.BiasAdd")),
     ("./x", locations.Location("path", "./x", url_like=True)),
     (".", locations.Location("path", ".", url_like=True)), ("..", locations.Location("path", "..", url_like=True)),
     ("pkg\\sub", locations.Location("path", "pkg\\sub", url_like=True)),  # a Windows path, no drive
     ("C:/pkg", locations.Location("path", "C:/pkg", url_like=True)),
     ("c:/pkg", locations.Location("path", "c:/pkg", url_like=True)),
     ("file:///tmp/a%20b", locations.Location("path", "/tmp/a b", url_like=True)),
     ("file://localhost/tmp/pkg", locations.Location("path", "/tmp/pkg", url_like=True)),
     ("https://h/kernels/o/n", locations.Location("hub", "o/n", url_like=True, endpoint="https://h")),
     ("http://h:8080/kernels/o/n", locations.Location("hub", "o/n", url_like=True, endpoint="http://h:8080")),
     ("HTTPS://h/kernels/o/n", locations.Location("hub", "o/n", url_like=True, endpoint="https://h")),  # any case
     ("https://h/models/o/n", locations.Location("url", "https://h/models/o/n", url_like=True)),  # not /kernels/
     ("ftp://h/pkg", locations.Location("url", "ftp://h/pkg", url_like=True)),
     ("s3://bucket/pkg", locations.Location("url", "s3://bucket/pkg", url_like=True))],  # a 2-letter scheme: no drive
)  # fmt: skip
def test_classify_gives_the_value_and_endpoint(name, expected):
    """The rules in classify's docstring, kind and value both: a '.' alone, a backslash or a drive letter is
    a folder (never an embedded id or a Hub id), only /kernels/org/name at an http(s) URL is a repository."""
    assert locations.classify(name) == expected


def test_a_path_object_is_a_local_folder():
    import pathlib

    assert locations.classify(pathlib.Path("pkg")) == locations.Location("path", "pkg", url_like=True)


@pytest.mark.parametrize(("name", "message"), [(3, "a kernel name must be a string or a path, got int"),
                                               (" ", "empty kernel name")])  # fmt: skip
def test_classify_refuses_what_is_no_name(name, message):
    with pytest.raises(PackageError) as refused:
        locations.classify(name)
    assert str(refused.value) == message


def test_a_file_url_of_another_host_is_refused():
    with pytest.raises(PackageError, match=r"^'file://host/pkg': only local file:// URLs can be loaded$"):
        locations.classify("file://host/pkg")


def test_a_password_holding_an_at_sign_is_not_shown():
    """The host is what follows the last '@' (urlsplit's reading): split at the first, the rest of the
    password was shown."""
    with pytest.raises(PackageError) as refused:
        locations.classify("https://user:s3@cret@hub.example/kernels/webgpu-kernels/x")
    assert str(refused.value) == (
        "'https://hub.example/kernels/webgpu-kernels/x' with credentials in the URL: set HF_TOKEN (or log in with "
        "huggingface_hub) instead, so that the token is kept out of the cache folder's name and the messages; the "
        "token goes only to the Hub HF_ENDPOINT names, so set HF_ENDPOINT to this one if it is not the configured Hub")


@pytest.mark.parametrize("repo_id", ["webgpu-kernels/a..b", "a..b/op", None, 3])
def test_what_huggingface_hub_refuses_is_no_repository_id(repo_id):
    """'..' anywhere (validate_repo_id refuses it; the pattern alone admits 'a..b'); a non-string."""
    assert not locations.is_repo_id(repo_id)
    with pytest.raises(PackageError, match="not a valid Hub repository id"):
        locations.checked_repo_id(repo_id)


def test_an_invalid_repository_id_is_told_the_rule_and_nothing_more():
    with pytest.raises(PackageError) as refused:
        locations.checked_repo_id("webgpu-kernels/-op")
    assert str(refused.value) == (
        "'webgpu-kernels/-op' is not a valid Hub repository id (expected 'org/name' of letters, digits, '_', '-' and "
        "'.', each part at most 96 characters, the name starting and ending with a letter, digit or '_', no '--' or "
        "'..', not ending in '.git')")


def _trust(location, trust):
    return locations.check_trust(location, trust_remote_code=trust, shown=location.value)


@pytest.mark.parametrize("trust", [False, True])
def test_what_needs_no_trust_loads_without_it_and_says_so(trust):
    """An embedded kernel and a repository of the official organisation: no TrustError, and False (the
    package's needs_trust), trusted or not."""
    assert _trust(locations.Location("embedded", "com.microsoft.BiasAdd"), trust) is False
    assert _trust(locations.Location("hub", "webgpu-kernels/com.microsoft.BiasAdd"), trust) is False


@pytest.mark.parametrize("location", [
    locations.Location("hub", "someone/webgpu-kernels"),  # the official name as the repository's: no org of ours
    locations.Location("hub", "someone/op"),
    locations.Location("hub", "webgpu-kernels/op", url_like=True, endpoint="https://h"),  # another endpoint's org
    locations.Location("url", "ftp://h/pkg", url_like=True),
])  # fmt: skip
def test_what_needs_trust_is_refused_without_it_and_marked_with_it(location):
    with pytest.raises(TrustError) as refused:
        _trust(location, False)
    assert refused.value.location == location.value
    assert refused.value.reason in str(refused.value)
    assert _trust(location, True) is True


def test_a_near_miss_refusal_keeps_its_reason():
    """The 'did you mean' hint is added to the reason, which still says why trust is needed."""
    with pytest.raises(TrustError) as refused:
        _trust(locations.Location("hub", "webgpu-kernel/op"), False)
    assert refused.value.reason == ("repository 'webgpu-kernel/op' is outside the 'webgpu-kernels' organisation "
                                    "(did you mean webgpu-kernels/op?)")  # fmt: skip
    assert str(refused.value) == (
        f"refusing to load 'webgpu-kernel/op': {refused.value.reason}. Its templates become shaders that run on your "
        "GPU; pass trust_remote_code=True and expected_op_id=... (on the command line: webgpu-kernels "
        "--trust-remote-code COMMAND ..., and download's --expected-op-id), if you trust its author")


def test_a_folder_refusal_says_what_it_is_and_how_to_open_it():
    with pytest.raises(TrustError) as refused:
        _trust(locations.Location("path", "./pkg", url_like=True), False)
    assert str(refused.value) == (
        "refusing to load './pkg': it is a local path or URL-like location, not a repository of the official "
        "organisation. Its templates become shaders that run on your GPU; a folder of your own opens with "
        "load_kernel(path); else pass trust_remote_code=True and expected_op_id=..., if you trust its author")
