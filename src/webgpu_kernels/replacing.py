"""Files written whole: a new file renamed over the old one, and several files all or nothing
(``expect`` writes data files and test.json, then metadata.json's digests of them, which a package
half-written would not match). :func:`replace_file` and :func:`replace_files` (begun in ``digests``, which
no longer re-exports them), and :func:`write_path`, where a write through the user's own link goes."""

from __future__ import annotations

import contextlib
import os
import secrets
import stat
from collections.abc import Mapping
from pathlib import Path

from .errors import PackageError

#: How a failed write's note begins where a file it had replaced could not be put back.
_NOT_PUT_BACK = "could not put back"


def replace_file(path: Path, content: str | bytes) -> None:
    """Write ``path`` (text as UTF-8) as a new file renamed over the old one, so that no reader
    sees half a file and a symbolic link at ``path`` is replaced, never followed (writing through a
    metadata.json that links elsewhere would create or overwrite its target, outside the package).
    The new file takes the old one's permissions, or the umask's; in a folder that only lets the
    existing file be written, that regular file is written in place. Raises OSError, its
    ``filename`` the file that failed (not its temporary file)."""
    _replace_all({path: content})


def replace_files(files: Mapping[Path, str | bytes]) -> None:
    """:func:`replace_file` for several files, all or nothing as far as the OS allows: all are
    written before any is renamed over its old one (a full disk while writing leaves every file as
    it was), and each old file is kept (a hard link, or its bytes) until every rename succeeded, so
    that one failing (a folder in its place, no permission) puts back those already replaced and
    removes the new ones. Raises PackageError naming the file that failed (its OSError the cause)."""
    try:
        _replace_all(files)
    except OSError as exc:
        lost = [note for note in getattr(exc, "__notes__", []) if note.startswith(_NOT_PUT_BACK)]
        undone = lost[0] if lost else "nothing was written (every file of the write is as it was)"
        raise PackageError(f"cannot write it ({exc.strerror or exc}); {undone}", path=exc.filename) from exc


def write_path(path: Path) -> Path:
    """Where a write of ``path`` (the tuning file, a project's lock file) goes: the file a symbolic
    link at ``path`` points to (through every link this user made), as an editor writes through
    one; else ``path`` (another user's link in a shared folder is replaced, as before: followed, it
    could have had a damaged tuning file's save move aside and overwrite any file this user may
    write). A chain stops at another user's link, which is replaced: realpath() had followed it too
   ."""
    current = path
    for _ in range(40):  # the OS's own bound on a chain; past it (a loop) the user's link is replaced
        if not (os.path.islink(current) and _link_is_own(current)):
            # that link itself where it is another user's: only the folders above it are resolved
            return current if current == path else Path(os.path.realpath(current.parent)) / current.name
        current = current.parent / os.readlink(current)  # relative to the link's own folder
    return path


def _link_is_own(path: Path) -> bool:
    """Whether this user owns the symbolic link ``path`` (always, where the OS has no user ids)."""
    getuid = getattr(os, "getuid", None)
    try:
        return getuid is None or os.lstat(path).st_uid == getuid()
    except OSError:
        return False


def _replace_all(files: Mapping[Path, str | bytes]) -> None:
    data = {path: content.encode() if isinstance(content, str) else content for path, content in files.items()}
    staged: dict[Path, Path] = {}  # each file's new one (itself: written in place, with the renames)
    done: list[tuple[Path, _Old]] = []  # the files replaced so far, each with what puts its old one back
    target: Path | None = None
    try:
        for target, content in data.items():
            staged[target] = _stage(target, content)
        for target, new in staged.items():
            # Listed in done (by _Old itself, before it makes a backup) before the write: a write in
            # place can fail half-way, and a Ctrl-C raised as os.replace returns comes after the
            # rename. Putting back an old entry that was never replaced changes nothing; only an
            # OSError says the rename did not happen.
            old = _Old(target, in_place=new == target, done=done)
            if new == target:
                target.write_bytes(data[target])
            else:
                try:
                    os.replace(new, target)
                except OSError:
                    done.pop()
                    old.discard()
                    raise
        target = None
    except BaseException as exc:
        lost = [str(path) for path, old in reversed(done) if not old.put_back()]
        if lost:
            exc.add_note(f"{_NOT_PUT_BACK} {', '.join(lost)}, which hold the new content (the others are as they were)")
        if isinstance(exc, OSError) and target is not None and exc.errno is not None:  # the file, not its temporary one
            error = OSError(exc.errno, exc.strerror, str(target))
            for note in getattr(exc, "__notes__", []):
                error.add_note(note)
            raise error from exc
        raise
    finally:  # a folder named like the file, a full disk, Ctrl-C: no temporary file left
        for path, new in staged.items():
            if new != path:
                new.unlink(missing_ok=True)
        for _, old in done:
            old.discard()


def _hidden(path: Path, kind: str) -> Path:
    return path.with_name(f".{path.name}.{secrets.token_hex(8)}.{kind}")  # hidden: never a package file


def _stage(path: Path, content: bytes) -> Path:
    """``content`` written to a new file beside ``path`` with its permissions (or the umask's); ``path``
    itself where its folder lets no file be created but ``path`` is a regular file (written in place)."""
    try:
        old_mode = stat.S_IMODE(os.lstat(path).st_mode) if path.is_file() and not path.is_symlink() else None
    except OSError:
        old_mode = None
    tmp = _hidden(path, "tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)  # the umask applies
    except OSError:
        if old_mode is None:  # a read-only folder and no regular file to write into
            raise
        return path
    except BaseException:  # a Ctrl-C raised as the file was made: not left behind
        tmp.unlink(missing_ok=True)
        raise
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(content)
        if old_mode is not None:
            os.chmod(tmp, old_mode)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return tmp


class _Old:
    """What was at ``path`` before it is replaced, kept until :meth:`discard`: nothing, a symbolic
    link's target, a hard link to the old file (its inode: bytes, permissions, owner), or, where no
    link can be made (a file system without them, a folder that takes no new file), its bytes.

    It appends itself to ``done`` before it makes anything, and its backup's name is recorded before
    the link is made: a Ctrl-C landing anywhere in here, or as it returns, leaves no hidden backup
    behind (``done``'s entries are discarded). Until it is complete it is "pending": nothing to put
    back, as the rename comes after."""

    def __init__(self, path: Path, *, in_place: bool, done: list[tuple[Path, _Old]]) -> None:
        self.path = path
        self.link: str | None = None
        self.backup: Path | None = None
        self.content: bytes | None = None
        self.mode = 0
        self.kind = "pending"
        done.append((path, self))
        try:
            info = os.lstat(path)
        except FileNotFoundError:
            self.kind = "absent"
            return
        kind = "other"  # a folder, a FIFO: a rename over it fails, and nothing can put it back
        if stat.S_ISLNK(info.st_mode):
            self.link = os.readlink(path)
            kind = "symlink"
        elif stat.S_ISREG(info.st_mode):
            self.mode = stat.S_IMODE(info.st_mode)
            if not in_place:
                self.backup = _hidden(path, "old")
                try:
                    os.link(path, self.backup)
                except OSError:
                    self.backup = None  # no link: kept as its bytes
                else:
                    self.kind = "backup"
                    return
            with contextlib.suppress(OSError):
                self.content = path.read_bytes()
                kind = "bytes"
        self.kind = kind

    def put_back(self) -> bool:
        """Put the old entry back at ``path``; False where it could not be."""
        try:
            if self.kind == "pending":
                pass
            elif self.kind == "absent":
                self.path.unlink(missing_ok=True)
            elif self.kind == "backup" and self.backup is not None:
                # (backup kept for discard: a rename between two links to one file, the old one never
                # replaced, succeeds and removes neither)
                os.replace(self.backup, self.path)
            elif self.kind == "symlink" and self.link is not None:
                tmp = _hidden(self.path, "tmp")
                os.symlink(self.link, tmp)
                try:
                    os.replace(tmp, self.path)
                finally:
                    tmp.unlink(missing_ok=True)
            elif self.kind == "bytes" and self.content is not None:
                try:
                    tmp = _stage(self.path, self.content)
                except OSError:
                    tmp = self.path
                if tmp == self.path:
                    self.path.write_bytes(self.content)
                else:
                    os.replace(tmp, self.path)
            else:
                return False
        except OSError:
            return False
        return True

    def discard(self) -> None:
        if self.backup is not None:
            self.backup.unlink(missing_ok=True)
            self.backup = None
