"""replacing.replace_files: files written all or nothing, for `expect` and
`digest`; whatever step fails, with an OSError or a Ctrl-C, no file is left half-new and no hidden
temporary or backup file behind."""

from __future__ import annotations

import errno
import os
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from webgpu_kernels import replacing
from webgpu_kernels.errors import PackageError


def test_replace_files_writes_all_before_replacing_any(tmp_path):
    """expect rewrites data files and test.json together: one that cannot be written (here its
    folder is missing) leaves every other file as it was, and no temporary file behind."""
    first, second = tmp_path / "a.npy", tmp_path / "b.json"
    first.write_bytes(b"old")
    second.write_text("old")
    os.chmod(first, 0o640)
    with pytest.raises(PackageError, match="gone/c.json: cannot write it"):
        replacing.replace_files({first: b"new", second: "new", tmp_path / "gone" / "c.json": "new"})
    assert first.read_bytes() == b"old" and second.read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.npy", "b.json"]
    replacing.replace_files({first: b"\x00new", second: "n\u00e9w\n"})
    assert first.read_bytes() == b"\x00new" and second.read_bytes() == "n\u00e9w\n".encode()
    assert os.stat(first).st_mode & 0o777 == 0o640  # the old file's permissions kept


@pytest.mark.parametrize("fault", ["folder", "full disk"])
def test_replace_files_puts_back_what_it_replaced_when_a_rename_fails(tmp_path, monkeypatch, fault):
    """A rename that fails after others succeeded (a non-empty folder where the last file goes, or
    a full disk injected into the last rename) puts back every file already replaced (a regular
    file with its bytes and permissions, a symbolic link as a link, a new file removed) and leaves
    no temporary or backup file: the package had been left half-written, its digests stale."""
    kept, link, new, last = (tmp_path / n for n in ("a.npy", "b.json", "c.npy", "test.json"))
    kept.write_bytes(b"old a")
    os.chmod(kept, 0o640)
    (tmp_path / "elsewhere.json").write_text("old b")
    link.symlink_to("elsewhere.json")
    if fault == "folder":
        last.mkdir()
        (last / "inside").write_text("x")
    else:
        last.write_text("old test.json")

        def replace(src, dst):
            if dst == last:
                raise OSError(28, "No space left on device")  # as a full disk reports it
            return real_replace(src, dst)

        real_replace = os.replace
        monkeypatch.setattr(os, "replace", replace)

    def tree():
        return {p.name: (os.readlink(p) if p.is_symlink() else p.read_bytes() if p.is_file() else "folder",
                         os.lstat(p).st_mode) for p in tmp_path.rglob("*")}  # fmt: skip

    before = tree()
    with pytest.raises(PackageError) as caught:
        replacing.replace_files({kept: b"new a", link: "new b", new: b"new c", last: "new test.json"})
    assert caught.value.path == str(last) and "nothing was written" in str(caught.value), caught.value
    assert isinstance(caught.value.__cause__, OSError)
    assert tree() == before  # no hidden .tmp or .old file either


def test_replace_files_is_all_or_nothing_when_ctrl_c_lands_on_a_rename(tmp_path, monkeypatch):
    """A SIGINT that arrives while a rename runs is raised as the call returns, the rename done: the
    file it replaced was neither put back nor kept (its backup discarded), so expect left one file
    new beside the others old (and metadata.json stale), which replace_files exists to prevent."""
    files = {tmp_path / name: f"new {name}" for name in ("a.npy", "b.npy", "test.json")}
    for path in files:
        path.write_text(f"old {path.name}")
    real_replace = os.replace
    renamed = []

    def replace(src, dst):
        real_replace(src, dst)
        renamed.append(dst)
        if len(renamed) == 2:
            raise KeyboardInterrupt  # as Python raises a SIGINT that came during the rename

    monkeypatch.setattr(os, "replace", replace)
    with pytest.raises(KeyboardInterrupt):
        replacing.replace_files(files)
    monkeypatch.undo()
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(p.name for p in files)  # no .tmp or .old left
    states = {path.read_text().split()[0] for path in files}
    assert states in ({"old"}, {"new"}), {path.name: path.read_text() for path in files}


@pytest.mark.parametrize("call", ["open", "link"])
def test_replace_files_leaves_no_hidden_file_when_ctrl_c_lands_on_making_one(tmp_path, monkeypatch, call):
    """A SIGINT raised as os.open returns (the temporary file made) or as os.link does (the old
    file's backup made) left that hidden .tmp or .old file beside the package's files, for good:
    neither was yet listed for removal (hypothesis found both)."""
    path = tmp_path / "a.npy"
    path.write_bytes(b"old")
    real = getattr(os, call)

    def made_then_ctrl_c(*args, **kwargs):
        result = real(*args, **kwargs)
        if call == "open":
            os.close(result)
        raise KeyboardInterrupt  # as Python raises a SIGINT that came during the call

    monkeypatch.setattr(os, call, made_then_ctrl_c)
    with pytest.raises(KeyboardInterrupt):
        replacing.replace_files({path: b"new"})
    monkeypatch.undo()
    assert [p.name for p in tmp_path.iterdir()] == ["a.npy"] and path.read_bytes() == b"old"


# --- replace_files, all or nothing: a property (hypothesis) ----------------------------------------

_NAMES = ("a.npy", "b.json", "test.json", "metadata.json", "data/c d.npz", "\u00e9.npy")


def _entry(path: Path) -> tuple[str, bytes | str, int]:
    """What is at ``path``: a symbolic link (its target), a regular file (its bytes) or nothing."""
    if path.is_symlink():
        return "symlink", os.readlink(path), 0
    if path.exists():
        return "file", path.read_bytes(), os.lstat(path).st_mode & 0o777
    return "absent", b"", 0


def _folder(root: Path) -> dict[str, tuple[str, bytes | str, int]]:
    return {str(p.relative_to(root)): _entry(p) for p in root.rglob("*") if not p.is_dir() or p.is_symlink()}


_FAULTS = st.one_of(
    st.none(),
    # a rename that fails (a full disk, a folder in its place): the file stays as it was
    st.tuples(st.just("replace"), st.integers(1, 3), st.sampled_from([errno.ENOSPC, errno.EISDIR])),
    # a Ctrl-C raised as a rename returns, the rename done
    st.tuples(st.just("replace, then Ctrl-C"), st.integers(1, 3), st.none()),
    # staging: a temporary file that cannot be made (a full disk: written in place where a regular
    # file is there), its permissions not set, or a Ctrl-C as either returns
    st.tuples(st.sampled_from(["open", "open, then Ctrl-C", "chmod", "chmod, then Ctrl-C"]), st.integers(1, 3),
              st.sampled_from([errno.ENOSPC, errno.EACCES])),
    # an old file's backup: no link made (kept as its bytes), or a Ctrl-C as it is made
    st.tuples(st.sampled_from(["link", "link, then Ctrl-C"]), st.integers(1, 3), st.just(errno.EPERM)),
    # a Ctrl-C raised as what puts an old entry back (its backup made) is complete, before the rename
    st.tuples(st.just("old kept, then Ctrl-C"), st.integers(1, 3), st.none()),
)  # fmt: skip


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    names=st.lists(st.sampled_from(_NAMES), min_size=1, max_size=5, unique=True),
    data=st.data(),
    fault=_FAULTS,
    hard_links=st.booleans(),
)
def test_replace_files_leaves_every_file_old_or_every_file_new(tmp_path_factory, names, data, fault, hard_links):
    """Whatever step fails (a rename, a temporary file, a Ctrl-C as a call returns), every file holds
    its old entry (bytes and permissions, a link, or nothing) or, only where the failure came after
    the last rename, every file its new one; no hidden temporary or backup file is left. Without a
    failure, every file is new (a link replaced, never followed). ``hard_links`` off: old files are
    kept as their bytes (a file system without links)."""
    root = Path(tempfile.mkdtemp(dir=tmp_path_factory.getbasetemp()))
    (root / "data").mkdir()
    (root / "elsewhere.json").write_bytes(b"the link's target")
    umask_mode = os.lstat(root / "elsewhere.json").st_mode & 0o777
    files: dict[Path, str | bytes] = {}
    linked = False
    for name in names:
        path = root / name
        kind = data.draw(st.sampled_from(["file", "file", "absent"] + ([] if linked else ["symlink"])), label=name)
        if kind == "symlink":
            linked = True
            path.symlink_to(root / "elsewhere.json" if data.draw(st.booleans()) else "nowhere.json")
        elif kind == "file":
            path.write_bytes(data.draw(st.binary(max_size=64)))
            os.chmod(path, data.draw(st.sampled_from([0o600, 0o640, 0o644, 0o755])))
        files[path] = data.draw(st.one_of(st.binary(max_size=64), st.text(max_size=16)), label=f"new {name}")
    old = _folder(root)
    new = dict(old)
    for path, content in files.items():
        name = str(path.relative_to(root))
        mode = old[name][2] if name in old and old[name][0] == "file" else umask_mode  # a link: replaced
        new[name] = ("file", content.encode() if isinstance(content, str) else content, mode)

    calls = {"replace": 0, "open": 0, "chmod": 0, "link": 0, "old kept": 0}
    fired: list[Path] = []
    real = {"replace": os.replace, "open": os.open, "chmod": os.chmod, "link": os.link}
    real_old = replacing._Old.__init__

    def old_kept(self, path, *args, **kwargs):
        real_old(self, path, *args, **kwargs)
        calls["old kept"] += 1
        if fault is not None and not fired and fault[0].startswith("old kept") and calls["old kept"] == fault[1]:
            fired.append(path)
            raise KeyboardInterrupt  # as Python raises a SIGINT that came as the constructor returned

    def faulty(call: str):
        def step(*args, **kwargs):
            calls[call] += 1
            if call == "link" and not hard_links:  # a file system without them
                raise OSError(errno.EPERM, os.strerror(errno.EPERM))
            if fault is None or fired or not fault[0].startswith(call) or calls[call] != fault[1]:
                return real[call](*args, **kwargs)
            fired.append(Path(args[1] if call == "replace" else args[0]))
            if fault[0].endswith("Ctrl-C"):
                result = real[call](*args, **kwargs)
                if call == "open":
                    os.close(result)
                raise KeyboardInterrupt  # as Python raises a SIGINT that came during the call
            raise OSError(fault[2], os.strerror(fault[2]))
        return step

    with pytest.MonkeyPatch.context() as patch:
        for call in real:
            patch.setattr(os, call, faulty(call))
        patch.setattr(replacing._Old, "__init__", old_kept)
        try:
            replacing.replace_files(files)
            failed: BaseException | None = None
        except (PackageError, KeyboardInterrupt) as exc:
            failed = exc
    event(fault[0] if fired and fault is not None else "no failure")
    after = _folder(root)
    assert not [n for n in after if Path(n).name.startswith(".")], after  # no .NAME.*.tmp or .old left
    if failed is None:
        assert after == new
        return
    assert fired, f"{failed!r} with no failure injected"
    if isinstance(failed, PackageError):
        assert failed.path in {str(p) for p in files} and "nothing was written" in str(failed), failed
    renamed_last = fault is not None and fault[0] == "replace, then Ctrl-C" and fired[-1] == list(files)[-1]
    assert after == old or (renamed_last and after == new), (fault, after, old)
