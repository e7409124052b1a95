"""``metadata.json``: a package's identity, provenance and the sha256 digest of each of its files.

Reading and checking happens when a package is opened (:func:`verify_package`, called by
``package.open_folder`` / ``open_embedded``): every listed file must exist and match, and no
*content file* (templates, JSON, data arrays; see :data:`CONTENT_SUFFIXES`) may be present without
being listed. Other files (a README, a LICENSE) may sit in the folder unlisted. Writing happens in
:func:`write_metadata`, behind ``webgpu-kernels digest PATH``.

The bytes that were hashed are kept and handed to the package, so what the engine later reads
is exactly what was verified (no second read of a file that could have changed in between).
"""

from __future__ import annotations

import contextlib
import difflib
import hashlib
import json
import os
import re
import unicodedata
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path, PurePosixPath
from typing import Any, cast

from .errors import DigestError, PackageError
from .json_schema import validator as schema_validator
from .reading import decode_json, not_regular, read_bounded
from .replacing import replace_file

METADATA_FILE = "metadata.json"
MANIFEST_FILE = "manifest.json"
ALGORITHM = "sha256"
#: Files that must be listed in ``digest.files`` when present: what the engine and the tools read.
CONTENT_SUFFIXES = (".jinja", ".json", ".npy", ".npz", ".safetensors", ".wgsl")
#: Largest file a package may hold; manifests and templates are a few kilobytes.
MAX_FILE_BYTES = 8 * 1024 * 1024
#: A package is a handful of files; a folder with more is not a package (or not this one).
MAX_PACKAGE_FILES = 1000
#: Bytes the listed files may hold together, all read (and kept) when a package is opened:
#: hard links to one 8 MiB file let a folder of a few MB cost gigabytes of memory to open.
MAX_PACKAGE_BYTES = 512 * 1024 * 1024
#: Longest package-relative name (and segment): longer ones exist on no common file system, and
#: asking for one raised a raw OSError (ENAMETOOLONG) from Path.is_file on Python 3.11.
MAX_NAME_LENGTH, MAX_SEGMENT_LENGTH = 1024, 255
#: Folder names never scanned (caches, VCS data).
SKIPPED_DIRS = frozenset({"__pycache__", "node_modules"})

#: (\Z, not $: "$" matches before a final newline, and a file "notes\n" was listed, then refused by the
#: metadata schema: digest failed on its own output)
_NAME_SEGMENT = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.+-]*\Z")


# Every digest problem an author causes by editing a package has the same fix; the messages say so
# (a file changed by someone else is the case digests exist for, hence "if you ...").
_REDIGEST = "run `webgpu-kernels digest PATH` to record the package's files again"


@dataclass(frozen=True)
class DigestProblem:
    """One way a package disagrees with its metadata.json."""

    file: str  # package-relative name (metadata.json for a malformed metadata file)
    reason: str  # "mismatch" | "missing" | "unlisted" | "metadata"
    message: str
    json_path: str  # where in metadata.json ("" for the root)
    #: What the package's author does about it (re-run digest), appended to the message as worded.
    #: Not said of a downloaded package: recording digests for bytes that changed in transit or in
    #: a cache would make them load.
    fix: str = ""

    @property
    def text(self) -> str:
        return self.message + self.fix

    def error(self, root: Path, more: int = 0, *, author: bool = True) -> DigestError:
        message = self.text if author else self.message
        if more:  # validate lists them all; a downloaded copy is not the user's to validate
            message += f" (and {more} more digest problem{'s' if more > 1 else ''}"
            message += ": run `webgpu-kernels validate`)" if author else ")"
        return DigestError(message, file=self.file, reason=self.reason, path=str(root / self.file))


@cache
def metadata_schema() -> dict[str, Any]:
    text = resources.files(__package__).joinpath("schemas/metadata.schema.json").read_text("utf-8")
    return json.loads(text)


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def is_content_file(name: str) -> bool:
    """Whether a file of this name must be listed in ``digest.files`` when present."""
    return name != METADATA_FILE and name.lower().endswith(CONTENT_SUFFIXES)


def valid_file_name(name: str) -> bool:
    """A package-relative POSIX name with no hidden, empty, ``.`` or ``..`` segment."""
    if not name or "\\" in name or name.startswith("/") or len(name) > MAX_NAME_LENGTH:
        return False
    return all(_NAME_SEGMENT.match(part) and len(part.encode()) <= MAX_SEGMENT_LENGTH for part in name.split("/"))


def package_files(root: Path) -> list[str]:
    """Every regular file of the package except metadata.json, as sorted POSIX relative names.

    Hidden files and folders (``.git``, ``.DS_Store``) and caches are skipped. Symbolic links
    to files count as the files they point to (the Hugging Face cache is made of them); links
    to folders are not followed, and what lies behind one is no part of the package
    (:func:`through_folder_link`, which every reader applies).
    """
    names: list[str] = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith(".") and d not in SKIPPED_DIRS)
        rel_dir = PurePosixPath(Path(dirpath).relative_to(root).as_posix())
        for filename in filenames:
            if filename.startswith(".") or _editor_backup(filename):
                continue
            rel = (rel_dir / filename).as_posix()
            rel = rel.removeprefix("./")
            if rel == METADATA_FILE or not os.path.isfile(os.path.join(dirpath, filename)):
                continue
            names.append(rel)
            if len(names) > MAX_PACKAGE_FILES:
                raise PackageError(f"more than {MAX_PACKAGE_FILES} files: not a kernel package", path=str(root))
    return sorted(names)


def never_listed(name: str) -> str | None:
    """Why ``digest`` would never list this package-relative name (so a verified package can never
    read it), or None. An unverified read of such a file works until the package is digested."""
    parts = name.split("/")
    skipped = [d for d in parts[:-1] if d in SKIPPED_DIRS]
    if skipped:
        return f"files under {skipped[0]}/ are never listed in metadata.json (move the file out of that folder)"
    if _editor_backup(parts[-1]):
        return "editor backup files (x~, #x#) are never listed in metadata.json"
    if not valid_file_name(name):
        return f"this name can never be listed in metadata.json, whose {_NAME_RULE}"
    return None


#: metadata.schema.json's propertyNames pattern in words (a '..' segment fails its first character rule).
_NAME_RULE = ("names are package-relative paths of letters, digits, '_', '-', '+' and '.' (not first in a "
              "segment, so no '..' or hidden names), separated by '/', and not metadata.json itself")


def _editor_backup(filename: str) -> bool:
    """Emacs/vim backup and autosave files (``x.jinja~``, ``#x.jinja#``): never part of a package."""
    return filename.endswith("~") or (filename.startswith("#") and filename.endswith("#"))


def through_folder_link(root: Path, name: str) -> str | None:
    """Why the package-relative ``name`` is no file of the package because its path passes through
    a symbolic link (to a folder: only a name's last segment may be a link), else None.

    One rule for every reader: :func:`package_files` (os.walk) does not follow links to folders, so
    ``digest`` never lists what lies behind one, and no read may reach it either (the digest check
    had read a listed ``linked/x.json`` wherever the link pointed). Links to files are followed:
    the Hugging Face cache makes every file of a snapshot a link into its blob store.
    """
    parts = name.split("/")
    folder = root
    for depth, part in enumerate(parts[:-1], start=1):
        folder = folder / part
        if os.path.islink(folder):
            link = "/".join(parts[:depth])
            return (f"{link}/ is a symbolic link to a folder, and files through a linked folder are not part of the "
                    f"package (links to files are followed; make {link}/ a real folder)")  # fmt: skip
    return None


def check_manifest_file(root: Path) -> None:
    """Refuse a folder without a regular manifest.json, saying which way it lacks one."""
    kind = not_regular(root / MANIFEST_FILE)
    if kind is not None:
        raise PackageError(f"{MANIFEST_FILE} is not a regular file ({kind})", path=str(root))
    if not (root / MANIFEST_FILE).is_file():
        raise PackageError(f"no {MANIFEST_FILE} in the folder", path=str(root))


#: What a read of a package file that is not there says (a template include tells it from a file
#: that is there but cannot be read).
FILE_NOT_FOUND = "file not found in the package"


def read_file(root: Path, name: str) -> bytes:
    """A package file's bytes: a regular file (after symlinks) of at most MAX_FILE_BYTES. A FIFO
    would block forever and /dev/zero never end, and both report a size of 0, so the kind is
    checked on the open file and the read stops past the limit whatever the size said. A name
    through a link to a folder is refused (:func:`through_folder_link`)."""
    path = root / name
    outside = through_folder_link(root, name)
    if outside is not None:
        raise PackageError(outside, path=str(path))
    try:
        return read_bounded(path, MAX_FILE_BYTES)
    except FileNotFoundError:
        raise PackageError(FILE_NOT_FOUND, path=str(path)) from None
    except OSError as exc:
        raise PackageError(f"cannot read: {exc.strerror}", path=str(path)) from None


class ReadBudget:
    """What a package's files may hold together (MAX_PACKAGE_BYTES), charged before each read:
    the bytes are kept for the package's life. One budget per opening, shared by every reader."""

    def __init__(self, used: int = 0) -> None:
        self.used = used

    def admits(self, path: Path) -> bool:
        """Charge ``path``'s size (capped: read_file refuses a file past MAX_FILE_BYTES itself);
        False once the package holds more than the bound."""
        try:
            self.used += charged_size(path)
        except OSError:
            pass  # read_file says what is wrong with it
        return self.used <= MAX_PACKAGE_BYTES


def charged_size(path: Path) -> int:
    """What a file costs a :class:`ReadBudget`: its size, capped one past MAX_FILE_BYTES (read_file
    refuses a larger file itself). Raises OSError where it cannot be stat'ed."""
    return min(os.stat(path).st_size, MAX_FILE_BYTES + 1)


def listed_sizes(root: Path, names: Iterable[str]) -> dict[str, int]:
    """What each of ``names`` (:func:`package_files` of ``root``) that ``digest`` lists will cost
    the package's opening (:func:`charged_size`); a file gone since costs nothing."""
    sizes = {}
    for name in names:
        if valid_file_name(name):
            with contextlib.suppress(OSError):
                sizes[name] = charged_size(root / name)
    return sizes


def past_package_bytes(sizes: Mapping[str, int]) -> str | None:
    """Files of these sizes (:func:`listed_sizes`), said to be more than a package's opening reads
    (MAX_PACKAGE_BYTES) where they are, else None: checked before `digest` or `expect` writes, as
    a package written past it no longer loads."""
    total = sum(sizes.values())
    if total <= MAX_PACKAGE_BYTES:
        return None
    return f"{total} bytes together, more than the loader opens ({MAX_PACKAGE_BYTES})"


def read_json(root: Path, name: str, data: bytes | None = None) -> Any:
    """A package JSON file, decoded (PackageError naming the file when it cannot be); ``data``: its
    bytes, where already read."""
    try:
        return decode_json(read_file(root, name) if data is None else data)
    except ValueError as exc:
        raise PackageError(str(exc), path=str(root / name)) from None


# --- reading and checking ---------------------------------------------------------------------------


def load_metadata(root: Path) -> tuple[dict[str, Any] | None, list[DigestProblem]]:
    """metadata.json decoded (None when absent) and its format problems (JSON, schema; a folder or
    a FIFO of that name is a problem, not an absent file: the package is not simply unsigned)."""
    path = root / METADATA_FILE
    kind = not_regular(path)
    if kind is not None:
        return None, [DigestProblem(METADATA_FILE, "metadata", f"{METADATA_FILE} is not a regular file ({kind}), so "
                                    "the package's files cannot be verified", "", f": remove it, then {_REDIGEST}")]  # fmt: skip
    if not path.is_file():
        return None, []
    try:
        data = decode_json(read_file(root, METADATA_FILE))
    except ValueError as exc:
        return None, [DigestProblem(METADATA_FILE, "metadata", str(exc), "")]
    except PackageError as exc:  # unreadable, larger than a package file may be
        return None, [DigestProblem(METADATA_FILE, "metadata", exc.detail, "")]
    try:
        problems = schema_problems(data)
    except RecursionError:  # JSON that Python parses (3.12 allows deeper nesting) but jsonschema cannot walk
        return None, [DigestProblem(METADATA_FILE, "metadata", "JSON nested too deeply", "")]
    return (data if not problems else None), problems


@cache
def _metadata_validator() -> Any:
    return schema_validator(metadata_schema())


def schema_problems(data: Any) -> list[DigestProblem]:
    files = data.get("digest", {}).get("files") if isinstance(data, dict) and isinstance(data.get("digest"), dict) else None
    if isinstance(files, dict) and len(files) > MAX_PACKAGE_FILES:  # before the schema walks (and reports) every entry
        return [DigestProblem(METADATA_FILE, "metadata", f"invalid metadata.json: it lists {len(files)} files, "
                              f"more than a package may hold ({MAX_PACKAGE_FILES})", "digest.files")]  # fmt: skip
    validator = _metadata_validator()
    problems = []
    for error in sorted(validator.iter_errors(data), key=lambda e: (list(map(str, e.absolute_path)), e.message)):
        message = error.message
        if "propertyNames" in error.absolute_schema_path:  # a file name: say the rule, not the regular expression
            message = f"{error.instance!r} is no package file name: {_NAME_RULE}"
        problems.append(DigestProblem(METADATA_FILE, "metadata", f"invalid metadata.json: {message}",
                                      json_path(error.absolute_path)))  # fmt: skip
    return problems



def json_path(parts: Any) -> str:
    """``digest.files["a.json"]`` style: dotted names, brackets for indices and odd keys."""
    path = ""
    for part in parts:
        if isinstance(part, int):
            path += f"[{part}]"
        elif re.match(r"^[A-Za-z_$][A-Za-z0-9_$]*$", str(part)):
            path += f".{part}" if path else str(part)
        else:
            path += f"[{json.dumps(part)}]"
    return path


def check_digests(root: Path, metadata: dict[str, Any], files: list[str] | None = None
                  ) -> tuple[list[DigestProblem], dict[str, bytes]]:  # fmt: skip
    """Compare the folder with ``metadata`` (already schema-valid): problems, and the bytes that
    matched. ``files``: :func:`package_files` of ``root``, where the caller listed it already."""
    listed: dict[str, str] = metadata["digest"]["files"]
    problems: list[DigestProblem] = []
    verified: dict[str, bytes] = {}
    budget = ReadBudget()
    for name, want in listed.items():
        where = json_path(["digest", "files", name])
        if not valid_file_name(name):
            problems.append(DigestProblem(name, "metadata", "not a valid package file name", where))
            continue
        path = root / name
        outside = through_folder_link(root, name)
        if outside is not None:  # before anything is read through the link
            problems.append(DigestProblem(name, "missing", outside, where))
            continue
        kind = not_regular(path)
        if kind is not None or not os.path.isfile(path):  # os.path's swallows ENAMETOOLONG, Path's raised it
            if kind is not None:
                problems.append(DigestProblem(name, "missing", f"not a regular file ({kind}), so it is not read", where))
            else:
                problems.append(DigestProblem(name, "missing", "listed in metadata.json but not in the package", where,
                                              f" ({_REDIGEST} if you removed it)"))  # fmt: skip
            continue
        if not budget.admits(path):
            problems.append(DigestProblem(name, "metadata", f"the listed files hold more than {MAX_PACKAGE_BYTES >> 20} "
                                          "MiB together: not a kernel package", where))  # fmt: skip
            break
        try:
            data = read_file(root, name)
        except PackageError as exc:  # larger than MAX_FILE_BYTES, unreadable: validate had crashed on it
            problems.append(DigestProblem(name, "missing", exc.detail, where))
            continue
        got = sha256_hex(data)
        if got != want:
            problems.append(DigestProblem(name, "mismatch",
                                          f"sha256 {got[:16]}... does not match metadata.json ({want[:16]}...): "
                                          "the file changed after its digest was taken", where,
                                          f" ({_REDIGEST} if you changed it){_json_syntax_note(name, data)}"))  # fmt: skip
            continue
        verified[name] = data
    for name in package_files(root) if files is None else files:
        if name not in listed and is_content_file(name):
            # `digest` refuses a content file whose name metadata.json cannot hold: rerunning it is no advice
            hint = (f" ({_REDIGEST} if the file belongs to the package)" if valid_file_name(name) else
                    f" (its name can never be listed: metadata.json's {_NAME_RULE}; rename or remove it)")  # fmt: skip
            problems.append(DigestProblem(name, "unlisted",
                                          "present in the package but not listed in metadata.json's digest.files",
                                          json_path(["digest", "files"]), hint))  # fmt: skip
    return problems, verified


def _json_syntax_note(name: str, data: bytes) -> str:
    """For a changed .json file that no longer parses, what is wrong with it (decode_json's words):
    fixed first, since `digest` refuses it, which had cost the author a second round trip to learn."""
    if not name.endswith(".json"):
        return ""
    try:
        decode_json(data)
    except ValueError as exc:
        return f"; it is not valid JSON either ({exc}): fix that first"
    return ""


def inspect_package(root: Path, files: list[str] | None = None
                    ) -> tuple[dict[str, Any] | None, list[DigestProblem], dict[str, bytes]]:  # fmt: skip
    """Everything :func:`verify_package` checks, returned instead of raised (for ``validate``, which
    passes the ``files`` it listed: :func:`package_files` of ``root``)."""
    metadata, problems = load_metadata(root)
    if metadata is None:
        return None, problems, {}
    more, verified = check_digests(root, metadata, files)
    return metadata, problems + more, verified


def verify_package(root: Path, *, author: bool = True) -> tuple[dict[str, Any] | None, dict[str, bytes]]:
    """Check a package folder against its metadata.json; raise :class:`DigestError` on any problem
    (saying how an author fixes it, unless ``author`` is false: a downloaded package).

    Returns the metadata (None for a package without metadata.json, which loads unverified:
    that is how an author starts) and the verified bytes of every listed file.
    """
    metadata, problems, verified = inspect_package(root)
    if problems:
        raise problems[0].error(root, more=len(problems) - 1, author=author)
    return metadata, verified


# --- writing ----------------------------------------------------------------------------------------


#: A DigestChange status: a file that is no content file and whose name metadata.json cannot hold,
#: left unlisted (a verified package can never read it, and needs not).
UNLISTABLE = "not listed (name)"


@dataclass(frozen=True)
class DigestChange:
    file: str
    status: str  # "added" | "changed" | "unchanged" | "removed" | UNLISTABLE
    sha256: str | None


class ManifestFile:
    """A folder's manifest.json for one ``digest`` run, read and decoded at most once: its digest,
    the op id, the templates it names and the kept version's note had each read the file again."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._data: bytes | None = None
        self._value: dict[str, Any] | None = None
        self._error: PackageError | None = None  # raised again to each asker, as a new read raised it

    def data(self) -> bytes:
        if self._data is None:
            self._data = read_file(self.root, MANIFEST_FILE)
        return self._data

    def value(self) -> dict[str, Any]:
        """The manifest as a JSON object (PackageError where it cannot be read or is no object)."""
        if self._value is None and self._error is None:
            try:
                value = read_json(self.root, MANIFEST_FILE, self.data())
                if not isinstance(value, dict):
                    raise PackageError("the manifest is not a JSON object", path=str(self.root / MANIFEST_FILE))
                self._value = value
            except PackageError as exc:
                self._error = exc
        if self._error is not None:
            raise self._error
        return cast(dict[str, Any], self._value)


class MetadataFile:
    """A folder's metadata.json for one ``digest`` run, read and decoded at most once: the run had
    read it for the id and version it held, then again for --check's comparison or the refresh."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._read = False
        self._value: Any = None
        self._error: PackageError | ValueError | None = None  # raised again to each asker, as a new read raised it

    def value(self) -> Any:
        """metadata.json decoded, any JSON value: PackageError where it cannot be read, ValueError
        (decode_json's words) where it is no JSON."""
        if not self._read:
            self._read = True
            try:
                self._value = decode_json(read_file(self.root, METADATA_FILE))
            except (PackageError, ValueError) as exc:
                self._error = exc
        if self._error is not None:
            raise self._error
        return self._value


def build_metadata(root: Path, existing: dict[str, Any] | None = None, *, version: int | None = None,
                   manifest_file: ManifestFile | None = None) -> tuple[dict[str, Any], list[DigestChange]]:  # fmt: skip
    """metadata.json for the folder as it is now: the id from the manifest (domain.name, which
    metadata.json must match), ``existing``'s version (unless ``version`` is given: the contract
    version a Hub revision vN must hold) and provenance kept."""
    from . import __version__

    manifest_file = manifest_file or ManifestFile(root)
    manifest = manifest_file.value()
    existing = dict(existing or {})
    # a copy renamed to a new op takes its new id (the old one would be refused)
    op_id = _op_id(manifest) or (existing["id"] if isinstance(existing.get("id"), str) else None)
    if op_id is None:
        raise PackageError("the manifest has no domain and name to take the package id from",
                           path=str(root / MANIFEST_FILE))  # fmt: skip
    if version is None:
        version = existing.get("version")
    if not _is_version(version):  # the schema's: an integer from 1
        version = manifest.get("sinceVersion", 1)
        if not _is_version(version):
            version = 1
    provenance = existing.get("provenance")
    if not isinstance(provenance, dict):
        provenance = {"generator": f"webgpu-kernels {__version__} digest"}
    old_files = {}
    old_digest = existing.get("digest")
    if isinstance(old_digest, dict) and isinstance(old_digest.get("files"), dict):
        old_files = old_digest["files"]
    files: dict[str, str] = {}
    changes: list[DigestChange] = []
    names = package_files(root)
    for name in names:
        if not valid_file_name(name) and is_content_file(name):
            raise PackageError(f"cannot be listed in metadata.json, whose {_NAME_RULE}: rename it",
                               path=str(root / name))  # fmt: skip
    _check_package_bytes(root, names)
    for name in names:
        if not valid_file_name(name):  # a "design notes.txt" may sit unlisted (docs/package-files.md)
            changes.append(DigestChange(name, UNLISTABLE, None))
            continue
        digest = sha256_hex(manifest_file.data() if name == MANIFEST_FILE else read_file(root, name))
        files[name] = digest
        if name not in old_files:
            status = "added"
        else:
            status = "unchanged" if old_files[name] == digest else "changed"
        changes.append(DigestChange(name, status, digest))
    for name in sorted(set(old_files) - set(files)):
        changes.append(DigestChange(name, "removed", None))
    metadata: dict[str, Any] = {"id": op_id, "version": version}
    if isinstance(existing.get("description"), str):
        metadata["description"] = existing["description"]
    metadata["provenance"] = provenance
    metadata["digest"] = {"algorithm": ALGORITHM, "files": files}
    return metadata, changes


def templates_there(name: str, files: Iterable[str], named: Iterable[str] = ()) -> str:
    """What follows "template NAME is not in the package": the templates (``*.jinja``) among the
    package's ``files``, and the one ``name`` may have meant, or "" where there is none. ``named``:
    the templates the manifest's passes name. A file renamed on disk is one no pass names any more,
    so a close one among those is meant before a closer one another variant still runs."""
    templates = sorted(f for f in files if f.endswith(".jinja"))
    if not templates:
        return ""
    named = set(named)
    same = [t for t in templates if t.lower() == name.lower()]
    closest = difflib.get_close_matches(name, templates, n=1)
    renamed = [] if same else difflib.get_close_matches(name, [t for t in templates if t not in named], n=1)
    close = same or renamed or closest
    shown = ", ".join(templates[:20]) + (f", ... ({len(templates)} in all)" if len(templates) > 20 else "")
    why = " (which no pass names)" if renamed and renamed != closest else ""  # said where it overrode the closest
    guess = f"; did you mean {close[0]!r}{why}?)" if close else ")"
    return f" (its templates: {shown}" + guess


def missing_templates(root: Path, manifest_file: ManifestFile | None = None) -> list[tuple[str, str]]:
    """(file, where the manifest names it) for each template a pass names (``variants[0].passes[1].shader``)
    that is not in the folder: digest records such a file as removed, and every call that reaches it
    then fails, so the author hears of it when the digest is taken. Only the manifest is read: a
    template's own includes are validate's to check (parsing templates here, outside the sandbox's
    budgets, had cost 20 s for one 8 MiB template and a RecursionError for a deep one).
    A manifest that cannot be read names none."""
    files = set(package_files(root))
    return [(name, where) for name, where in pass_templates(root, manifest_file) if name not in files]


def pass_templates(root: Path, manifest_file: ManifestFile | None = None) -> list[tuple[str, str]]:
    """(file, where the manifest names it) for each template a pass of the manifest names, there or
    not; none for a manifest that cannot be read."""
    try:
        manifest = (manifest_file or ManifestFile(root)).value()
    except PackageError:
        return []
    found: list[tuple[str, str]] = []
    variants = manifest.get("variants")
    for v, variant in enumerate(variants if isinstance(variants, list) else []):
        passes = variant.get("passes") if isinstance(variant, dict) else None
        for p, pass_ in enumerate(passes if isinstance(passes, list) else []):
            if not isinstance(pass_, dict):
                continue
            source = pass_.get("source")
            for where, name in ((f"{MANIFEST_FILE} variants[{v}].passes[{p}].shader", pass_.get("shader")),
                                (f"{MANIFEST_FILE} variants[{v}].passes[{p}].source.shader",
                                 source.get("shader") if isinstance(source, dict) else None)):  # fmt: skip
                if isinstance(name, str):
                    found.append((name, where))
    return list(dict.fromkeys(found))


def _check_package_bytes(root: Path, names: list[str]) -> None:
    """Refuse, before any file is read, files that would hold more together than a package's
    opening reads: digested, the package no longer loaded ('the listed files hold more than 512 MiB
    together'). Names the largest file."""
    sizes = listed_sizes(root, names)
    past = past_package_bytes(sizes)
    if past is not None:
        largest = max(sizes, key=lambda name: sizes[name])
        raise PackageError(f"the files metadata.json would list hold {past}: not a kernel package (the largest is "
                           f"{largest!r}, {sizes[largest]} bytes)", path=str(root))  # fmt: skip


def _is_version(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def write_metadata(root: str | Path, *, version: int | None = None, manifest_file: ManifestFile | None = None,
                   metadata_file: MetadataFile | None = None) -> tuple[dict[str, Any], list[DigestChange]]:  # fmt: skip
    """Write or refresh ``root/metadata.json`` (its contract version set to ``version`` if given);
    returns it and what changed per file.

    An existing metadata.json that is not valid JSON is refused (fix or delete it); one that
    is JSON but breaks the schema is refreshed, keeping what can be kept. ``manifest_file`` and
    ``metadata_file``: what a digest run read already, not read again.
    """
    root = Path(root).expanduser().resolve()
    if not root.is_dir():
        raise PackageError("not a folder", path=str(root))
    check_manifest_file(root)
    existing = None
    if (root / METADATA_FILE).is_file():
        try:
            existing = (metadata_file or MetadataFile(root)).value()
        except ValueError as exc:
            raise PackageError(f"the existing metadata.json cannot be read ({exc}); fix or delete it",
                               path=str(root / METADATA_FILE)) from None  # fmt: skip
        if not isinstance(existing, dict):
            existing = None
    metadata, changes = build_metadata(root, existing, version=version, manifest_file=manifest_file)
    problems = schema_problems(metadata)
    if problems:
        raise PackageError(f"{problems[0].json_path or '(root)'}: {problems[0].message}", path=str(root / METADATA_FILE))
    text = json.dumps(metadata, indent=2, ensure_ascii=False) + "\n"
    try:
        replace_file(root / METADATA_FILE, text)
    except OSError as exc:
        raise PackageError(f"cannot be written: {exc.strerror or exc}", path=str(root / METADATA_FILE)) from None
    return metadata, changes


def _op_id(manifest: dict[str, Any]) -> str | None:
    domain, name = manifest.get("domain"), manifest.get("name")
    return f"{domain}.{name}" if isinstance(domain, str) and isinstance(name, str) else None


def id_problem(metadata: Mapping[str, Any] | None, op_id: str) -> DigestProblem | None:
    """metadata.json's ``id`` where it is not the manifest's ``op_id`` (domain.name): every digest may
    match while the two name different ops, so this is checked once the manifest is parsed."""
    if metadata is None or metadata.get("id") == op_id:
        return None
    return DigestProblem(METADATA_FILE, "metadata", f"{METADATA_FILE} names op {metadata.get('id')!r} but the "
                         f"manifest is {op_id!r}", "id",  # fmt: skip
                         fix=" (run `webgpu-kernels digest PATH`: it takes the id from the manifest's domain and name)")


def manifest_op_id(root: Path) -> str | None:
    """``domain.name`` from a folder's manifest.json read as plain JSON, for a package that may not
    load (a stale digest, a schema error); None if it has none or cannot be read."""
    try:
        return _op_id(ManifestFile(root).value())
    except PackageError:
        return None


def kept_version_note(root: Path, kept: Any, manifest_file: ManifestFile | None = None) -> str | None:
    """What digest says where it kept metadata.json's contract version ``kept`` and the manifest's
    sinceVersion is another number: the two are independent (the opset the op dates from; the
    package's contract, Hub revision vN), and only a new metadata.json starts at sinceVersion, so
    an author who raised sinceVersion after `new` wrote version 1 learns why 1 stayed. None where
    they agree or either is not a version."""
    try:
        since = (manifest_file or ManifestFile(root)).value().get("sinceVersion", 1)
    except PackageError:
        return None
    if not _is_version(kept) or not _is_version(since) or kept == since:
        return None
    # "--version N sets it" had read as "run digest --version <sinceVersion>": say that the kept
    # number is right, and what --version is for.
    keep = "Keep it: a first contract is version 1, whatever sinceVersion" if kept == 1 else "Keep it for this contract"
    return (f"contract version {kept} kept from metadata.json, not the manifest's sinceVersion {since}: the two are "
            "independent (sinceVersion is the opset the op dates from; "
            "the contract version numbers this package's contracts, and a package published as Hub revision vN "
            f"must say N). {keep}; --version N is for a later, changed contract (published as vN), not for "
            "matching sinceVersion")


def folded(name: str) -> str:
    """``name`` as a case-insensitive file system compares it (NFC, as macOS also ignores the
    Unicode normal form; lower case, as Windows compares upper-cased names)."""
    return unicodedata.normalize("NFC", name).lower()


def case_twin(name: str, files: Iterable[str]) -> str | None:
    """The file of ``files`` whose name is ``name`` but for case, when ``name`` is none of them
    (the first in sorted order where several are)."""
    return case_twins(files)(name)


def case_twins(files: Iterable[str]) -> Callable[[str], str | None]:
    """:func:`case_twin` over ``files`` for many names: the list folded once (validate asks it of
    every data file of every case, and each call had sorted and folded the whole list again)."""
    present = set(files)
    by_fold: dict[str, str] = {}
    for f in sorted(present):
        by_fold.setdefault(folded(f), f)  # the first in sorted order

    def twin(name: str) -> str | None:
        return None if name in present else by_fold.get(folded(name))

    return twin
