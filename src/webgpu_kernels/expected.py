"""test.json's expected outputs written from an author's float64 reference: ``new`` for its starter
and ``expect`` for a package whose kernel changed share this loop (cli_new.py).

A reference is ``reference(inputs, attrs) -> {output role: array}``: ``inputs`` the case's input
arrays exactly as ``webgpu-kernels test`` builds them, float ones widened to float64 (integer and
boolean ones as they are), ``attrs`` the case's attributes over the manifest's defaults, and
returns every required output and any of the optional ones. Each output is rounded once to the
output's dtype and written inline, as the docs say to store it, unless the case's entry named a
data file: that file's new content is returned instead (:class:`Written`), for the caller to write
(a file not yet in the package too, once its name passed the rules of a listed file's).
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Callable, Mapping, MutableMapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from .call_inputs import TensorMeta
from .case_data import array_key, cast, dtype_name, encode_values, numpy_dtype, with_arrays
from .case_format import TEST_FILE
from .casefile import advise_case, parse_draft_case
from .digests import (
    MAX_FILE_BYTES,
    MAX_PACKAGE_FILES,
    case_twins,
    json_path,
    listed_sizes,
    never_listed,
    package_files,
    past_package_bytes,
    through_folder_link,
    valid_file_name,
)
from .errors import CaseFileError, InputError, KernelError, PackageError, names_meant, type_name
from .kernel import Kernel
from .portability import windows_problem

Reference = Callable[[dict[str, np.ndarray], dict[str, Any]], Any]


class ReferenceFailed(Exception):
    """The reference itself raised for a case (the author's code: ``__cause__`` holds its error)."""

    def __init__(self, case: str, name: str) -> None:
        self.case = case
        super().__init__(f"{name} raised for case {case!r}")


def dumps(value: Any, indent: str = "", step: str = "  ") -> str:
    """JSON indented by ``step`` (two spaces), lists of plain values and small objects of them on
    one line, as the shipped files are written (a case's 130 expected values one per line would
    bury the rest); non-ASCII text as itself, keys too, as metadata.json is written."""
    inner = indent + step
    flat = json.dumps(value, ensure_ascii=False, separators=(", ", ": "))
    if isinstance(value, dict) and value and all(not isinstance(v, (dict, list)) for v in value.values()):
        if len(indent) + len(flat) <= 100:  # a small object of plain values: one line
            return flat
    if isinstance(value, dict) and value:
        items = [f"{inner}{json.dumps(k, ensure_ascii=False)}: {dumps(v, inner, step)}" for k, v in value.items()]
        return "{\n" + ",\n".join(items) + "\n" + indent + "}"
    if isinstance(value, list) and any(isinstance(v, (dict, list)) for v in value):
        return "[\n" + ",\n".join(inner + dumps(v, inner, step) for v in value) + "\n" + indent + "]"
    return flat


def indent_of(text: str) -> str:
    """The indent step of a JSON document as its author wrote it: the whitespace before its first
    indented line (1 to 8 spaces, or one tab); two spaces for one on a single line or another."""
    found = re.search(r"\n([ \t]+)\S", text)
    step = found.group(1) if found else "  "
    return step if step == "\t" or (set(step) == {" "} and len(step) <= 8) else "  "


def _received(value: Any) -> str:
    if isinstance(value, np.ndarray):
        return f"an array of shape {list(value.shape)} and dtype {value.dtype}"
    return f"{type_name(value)} {value!r}"[:200]


def _rounded(value: Any, dtype: str, argument: str) -> np.ndarray:
    """A reference's output rounded once to the output's ``dtype`` (integers taken exactly)."""
    try:
        array = np.asarray(value) if isinstance(value, (np.ndarray, np.generic, int, float, bool, list)) else None
    except ValueError:  # a ragged list: refused below as no array, not NumPy's traceback
        array = None
    if array is None or array.dtype.kind not in "fiub":
        raise InputError(argument, f"an array of numbers (rounded to the output's {dtype})", _received(value))
    outside = _outside_range(array, dtype)
    if outside is not None:
        raise InputError(argument, f"values an output of dtype {dtype} holds (an expected value is the true result)", outside)
    if array.dtype.kind in "iub" and numpy_dtype(dtype).kind in "iub":
        return array.astype(numpy_dtype(dtype))
    if numpy_dtype(dtype).kind == "b" and not np.isnan(array).any():  # NaN: cast's refusal below
        return array != 0  # true where nonzero, as for integers (cast's rint >= 1 is its rule for random draws)
    try:
        return cast(array.astype(np.float64), dtype)
    except ValueError as exc:  # NaN for an integer output
        raise InputError(argument, f"values an output of dtype {dtype} holds", str(exc)) from None


def _outside_range(array: np.ndarray, dtype: str) -> str | None:
    """Why ``array`` cannot be an integer output of ``dtype``: a value past its range once rounded.
    It had been clipped (a float one) or wrapped (an integer one) and written, so that a saturating
    or wrapping kernel passed, where test.json's own inline value past the range is refused."""
    target = numpy_dtype(dtype)
    if target.kind not in "iu" or not array.size or array.dtype.kind == "b":
        return None
    if array.dtype.kind == "f":
        if np.isnan(array).any():
            return None  # cast's refusal says so
        with np.errstate(invalid="ignore", over="ignore"):
            ends = [float(np.rint(array.min())), float(np.rint(array.max()))]
        values: list[float | int] = [int(v) if math.isfinite(v) else v for v in ends]
    else:
        values = [int(array.min()), int(array.max())]
    low, high = int(np.iinfo(target).min), int(np.iinfo(target).max)
    bad = next((v for v in values if not low <= v <= high), None)
    return None if bad is None else f"{bad} is outside {dtype}'s range [{low}, {high}]"


@dataclass
class Written:
    """What :func:`write_expected` did: ``count`` cases written; ``files``: the new content of each
    data file an expected entry names (package-relative name -> bytes), which the caller writes;
    ``created``: those of them not yet in the package (their missing folders the caller makes);
    ``entries``: the first entry naming each file (its JSON path in test.json)."""

    count: int
    files: dict[str, bytes] = field(default_factory=dict)
    created: list[str] = field(default_factory=list)
    entries: dict[str, str] = field(default_factory=dict)


#: An array of a data file: the file's package-relative name and the array's key (None in a .npy file).
_Array = tuple[str, str | None]


def write_expected(kernel: Kernel, cases: Sequence[MutableMapping[str, Any]], reference: Reference, *,
                   name: str = "the reference", check_shapes: bool = True, file: str | None = None) -> Written:  # fmt: skip
    """Set ``expected`` of every case of ``cases`` (test.json's form) that expects no refusal, from
    ``reference``: the outputs a case lists (a case without ``expected``: every one returned).
    Nothing is changed unless every case succeeded. Outputs are checked against the
    manifest's outputs and their dtypes; with ``check_shapes`` their shapes too, as a call on the
    device computes them (``kernel.explain``). An entry that names a data file keeps naming it
    (its ``shape`` and ``dtype``, where given, updated) and the file's new content is returned.
    A reference that raises gives :class:`ReferenceFailed`; one that returns the wrong thing, an
    :class:`InputError` naming the case; an entry whose data file cannot take the values (an
    input's array, or one another entry gets other values for), a :class:`CaseFileError`.
    ``file``: the test.json ``cases`` were read from, so that an error names a case where the file
    holds it (``cases[i]``), not as a case given alone."""
    manifest = kernel.manifest
    required = [o.role for o in manifest.outputs if not o.optional]
    optional = [o.role for o in manifest.outputs if o.optional]
    wanted = f"the required outputs {required}" + (f", and any of the optional outputs {optional}" if optional else "")
    written: list[tuple[MutableMapping[str, Any], dict[str, Any]]] = []
    to_files: dict[_Array, tuple[np.ndarray, str]] = {}  # each array's new values, and the entry giving them
    created: dict[str, str | None] = {}  # each new file, and the entry naming it without a tensor (a .npz's)
    files = _Files(kernel)  # each data file read once, though the inputs, the entries and the rewrite all read it
    for index, raw in enumerate(cases):
        if "refused" in raw:
            continue
        case = parse_draft_case(raw)
        if file is not None:  # the case's own place: errors had said "given as a dict (read as cases[0])"
            case = replace(case, index=index, json_path=json_path(["cases", index]), file=file)
        try:
            arrays = case.build_inputs(manifest, files.read)
            binding = case.type_binding(manifest, arrays)
            dtypes = {o.role: binding.get(o.dtype, "float64") for o in manifest.outputs}
            shapes: dict[str, tuple[int, ...]] = {}
            if check_shapes:
                metas = {k: TensorMeta(a.shape, dtype_name(a.dtype)) for k, a in arrays.items()}
                explanation = kernel.explain(metas, attrs=case.attrs or None, tunables=case.tunables or None)
                shapes = {o.role: tuple(o.shape) for o in explanation.outputs}
                dtypes.update({o.role: o.dtype for o in explanation.outputs})
        except KernelError as exc:  # the case's own inputs or attrs: say which case
            advise_case(exc)
            exc.add_note(f"building the inputs and outputs of case {case.name!r}")
            raise
        inputs = {k: a.astype(np.float64) if a.dtype.kind == "f" or dtype_name(a.dtype) == "bfloat16" else a
                  for k, a in arrays.items()}  # fmt: skip
        attrs = {**manifest.attributes, **case.attrs}
        try:
            got = reference(inputs, attrs)
        except Exception as exc:
            raise ReferenceFailed(case.name, name) from exc
        where = f"{name}'s return value for case {case.name!r}"
        if not isinstance(got, Mapping):
            raise InputError(where, f"a dict of output arrays ({', '.join(dtypes)})", _received(got))
        keys = sorted(map(str, got))
        if set(got) - set(dtypes) or set(required) - set(got):
            meant = names_meant([k for k in keys if k not in dtypes], [o for o in dtypes if o not in got])
            raise InputError(where, wanted, f"the keys {keys}{meant}")
        old: Mapping[str, Any] = raw.get("expected") or {}
        # An optional output a reference may leave out, but not one the case compares: its old value
        # would be stale (the kernel changed), and dropping it would stop comparing it unasked.
        dropped = [role for role in old if role in optional and role not in got]
        if dropped:
            raise InputError(where, f"{dropped} too: the case has an expected value for the optional output"
                             f"{'s' if len(dropped) > 1 else ''} (return it, or delete the case's expected entry "
                             "to stop comparing it)", f"the keys {keys}")  # fmt: skip
        entries: dict[str, Any] = {}
        # The outputs the case lists, in their order (a role no longer an output left out): one it
        # does not list stays so, as the author chose (a large output of a many-row case had
        # gone into test.json inline, megabytes); a case yet without any (`new`'s) gets them all.
        roles = [r for r in old if r in got] if old else [o.role for o in manifest.outputs if o.role in got]
        for role in roles:
            dtype = dtypes[role]
            y = _rounded(got[role], dtype, f"{where}[{role!r}]")
            if role in shapes and y.shape != shapes[role]:
                raise InputError(f"{where}[{role!r}]", f"shape {list(shapes[role])} (the kernel's output for "
                                 "the case's inputs)", f"shape {list(y.shape)}")  # fmt: skip
            # the entry's own keys, in their order; a new one as `new` writes it
            entry = dict(old.get(role) or {"dtype": dtype, "shape": None, "values": None})
            if "file" in entry:  # a data file stays one: test.json would grow by the values
                path = json_path(["cases", index, "expected", role])
                array = _expected_array(kernel, files, entry, path, created)
                if array in to_files and not _same(to_files[array][0], y):
                    raise CaseFileError(f"{_shown(array)} is also {to_files[array][1]}'s, which gets other values "
                                        "from the reference: give each entry a file (or tensor) of its own",
                                        file=TEST_FILE, json_path=path)  # fmt: skip
                to_files[array] = (y, path)
            else:
                entry["values"] = encode_values(y)  # (an inline entry without a dtype has the output's)
            for key, value in (("dtype", dtype), ("shape", list(y.shape))):
                if key in entry:
                    entry[key] = value
            entries[role] = entry
        written.append((raw, entries))
    _check_new_files(to_files, created)
    _check_inputs(kernel, files, cases, to_files)
    entries_of: dict[str, str] = {}  # the first entry naming each file
    for (name, _), (_, path) in to_files.items():
        entries_of.setdefault(name, path)
    contents = _file_contents(files, to_files, created, entries_of)
    for raw, entries in written:  # every case succeeded: only now is anything changed
        raw["expected"] = entries
    return Written(len(written), contents, list(created), entries_of)


def check_test_file_size(cases: Sequence[Mapping[str, Any]], text: str) -> None:
    """Refuse test.json's new ``text`` where it is larger than a package file may be, naming the
    inline expected entry holding the most values: written, metadata.json's refresh had failed
    reading it, leaving the package stale and unloadable."""
    size = len(text.encode())
    if size <= MAX_FILE_BYTES:
        return
    largest = largest_inline_entry(cases)
    where = f": {largest.advice()}" if largest else ""
    raise CaseFileError(f"{TEST_FILE} would be {size} bytes, more than a package file may be ({MAX_FILE_BYTES}){where}",
                        file=TEST_FILE, json_path=largest.json_path if largest else "cases")  # fmt: skip


#: Past this many values an inline expected entry is worth a data file (test.json stays readable);
#: the embedded packages' case script writes those past 64 as .npy.
INLINE_HINT_VALUES = 1024


@dataclass(frozen=True)
class InlineEntry:
    """test.json's inline expected entry holding the most values, and the data file to name instead."""

    count: int
    index: int
    role: str
    suggested: str

    @property
    def json_path(self) -> str:
        return json_path(["cases", self.index, "expected", self.role])

    def advice(self) -> str:
        return (f"this entry holds {self.count} values inline; name a data file instead "
                f"({{\"file\": \"{self.suggested}\"}}), which expect creates")  # fmt: skip


def largest_inline_entry(cases: Sequence[Mapping[str, Any]]) -> InlineEntry | None:
    """The inline expected entry holding the most values (None where no entry is inline)."""
    inline = [(math.prod(entry["shape"]), index, role, case.get("name")) for index, case in enumerate(cases)
              for role, entry in (case.get("expected") or {}).items()
              if isinstance(entry, Mapping) and "values" in entry and isinstance(entry.get("shape"), list)]  # fmt: skip
    if not inline:
        return None
    count, index, role, case_name = max(inline, key=lambda item: item[0])
    suggested = f"{case_name}.{role}.npy"
    if not valid_file_name(suggested):
        suggested = f"data/case{index}.{role}.npy"
    return InlineEntry(count, index, role, suggested)


def check_package_size(kernel: Kernel, written: Written, text: str) -> None:
    """Refuse, before anything is written, data files and test.json's new ``text`` that would make
    the files metadata.json lists hold more together than the loader opens (digests.past_package_bytes,
    as `digest` checks it): written, and the digests refreshed, the package no longer loaded. Names
    the entry of the largest data file written."""
    root = kernel.package.root
    sizes = listed_sizes(root, package_files(root))
    sizes.update({name: len(content) for name, content in written.files.items()})
    sizes[TEST_FILE] = len(text.encode())
    past = past_package_bytes(sizes)
    if past is None:
        return
    largest = max(written.files, key=lambda name: len(written.files[name]), default=None)
    why = (f"; the largest file written is {largest!r} ({len(written.files[largest])} bytes): make cases smaller or "
           "fewer" if largest is not None else "")  # fmt: skip
    raise CaseFileError(f"the package's files would hold {past}{why}", file=TEST_FILE,
                        json_path=written.entries.get(largest or "", "cases"))  # fmt: skip


def _shown(array: _Array) -> str:
    return repr(array[0]) + (f" tensor {array[1]!r}" if array[1] is not None else "")


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


class _Files:
    """The package's files as one run reads them: each file's bytes read once and each array's key
    found once (the keys' cache keyed by name and tensor). A case's data file had been read up to
    four times: its inputs, its expected entry, the check that no input reads that array, and its
    rewrite. Kept for the run: at most what a verified open of the package keeps of it anyway."""

    def __init__(self, kernel: Kernel) -> None:
        self.package = kernel.package
        self.data: dict[str, bytes] = {}
        self.keys: dict[tuple[str, str | None], str | None] = {}
        self._listed: list[str] | None = None

    def listed(self) -> list[str]:
        """The package's files as write_metadata lists them, listed once (each new file's checks read it)."""
        if self._listed is None:
            self._listed = package_files(self.package.root)
        return self._listed

    def read(self, name: str) -> bytes:
        name = self.package.relative_name(name)
        if name not in self.data:
            self.data[name] = self.package.read_bytes(name)
        return self.data[name]

    def key(self, name: str, tensor: str | None) -> str | None:
        if (name, tensor) not in self.keys:
            self.keys[name, tensor] = array_key(self.read(name), name, tensor)
        return self.keys[name, tensor]


def _array_of(kernel: Kernel, files: _Files, spec: Mapping[str, Any], path: str) -> _Array:
    """The array a case entry's ``file`` and ``tensor`` name (the only one where it names none)."""
    try:
        name = kernel.package.relative_name(spec["file"])
        return name, files.key(name, spec.get("tensor"))
    except PackageError as exc:
        raise CaseFileError(str(exc), file=TEST_FILE, json_path=path) from None
    except ValueError as exc:
        raise CaseFileError(f"{spec.get('file')}: {exc}", file=TEST_FILE, json_path=path) from None


def _expected_array(kernel: Kernel, files: _Files, spec: Mapping[str, Any], path: str,
                    created: dict[str, str | None]) -> _Array:  # fmt: skip
    """:func:`_array_of` for an expected entry, whose file may not exist yet: ``created`` gets it
    (and ``path`` where the entry names no tensor), once its name passed :func:`_creatable`."""
    try:
        name = kernel.package.relative_name(spec["file"])
    except PackageError as exc:
        raise CaseFileError(str(exc), file=TEST_FILE, json_path=path) from None
    if name not in created and not _creatable(kernel, files, name, path, created):
        return _array_of(kernel, files, spec, path)  # a file of the package (or something else there, refused as today)
    try:
        key = array_key(None, name, spec.get("tensor"))
    except ValueError as exc:
        raise CaseFileError(f"{name!r} is not in the package and expect creates it, but {exc}",
                            file=TEST_FILE, json_path=path) from None  # fmt: skip
    created.setdefault(name, None)
    if spec.get("tensor") is None and created[name] is None:
        created[name] = path
    return name, key


def _creatable(kernel: Kernel, files: _Files, name: str, path: str, created: Mapping[str, Any]) -> bool:
    """Whether ``name`` (package-relative) is a data file to create: False where something is at its
    path already (the package's file, read as such). A name a listed file could not have, or whose
    file would not be the package's, is refused naming the entry at ``path``."""
    root = kernel.package.root
    if os.path.lexists(root / name):
        return False
    parts = name.split("/")
    why = never_listed(name) or through_folder_link(root, name) or windows_problem(name)
    for depth in range(1, len(parts)):
        folder = "/".join(parts[:depth])
        if not why and os.path.lexists(root / folder) and not os.path.isdir(root / folder):
            why = f"{folder!r} is a file, not a folder"
    if not why:  # one new name a folder of another: written, one failed on the other, leaving it behind
        why = _file_and_folder(name, created)
    listed = files.listed() if not why else []
    if not why and len(listed) + len(created) + 1 > MAX_PACKAGE_FILES:  # written, metadata.json's refresh had failed
        why = (f"{name!r} would make the package's files {len(listed) + len(created) + 1}, more than a package may "
               f"hold ({MAX_PACKAGE_FILES}): give cases a shared .npz or .safetensors file (a 'tensor' each)")  # fmt: skip
    if not why:  # a name that differs from a file's or a folder's only in case is that file on macOS and Windows
        known = {"/".join(p.split("/")[:d]) for p in [*listed, *created] for d in range(1, p.count("/") + 2)}
        for depth in range(len(parts)):  # and what is on disk along the way: a folder holding no listed file
            parent = "/".join(parts[:depth])
            if os.path.isdir(root / parent):
                known.update(f"{parent}/{entry}" if parent else entry for entry in os.listdir(root / parent))
        twin_of = case_twins(known)
        for depth in range(1, len(parts) + 1):
            prefix = "/".join(parts[:depth])
            twin = twin_of(prefix)
            if twin is not None:
                why = (f"{prefix!r} differs from the package's {twin!r} only in case, and the two are one file on macOS "
                       f"and Windows (spell it {twin!r}, or pick another name)")  # fmt: skip
                break
    if why:
        raise CaseFileError(f"{name!r} is not in the package, and expect does not create it: {why}",
                            file=TEST_FILE, json_path=path)  # fmt: skip
    return True


def _file_and_folder(name: str, created: Mapping[str, Any]) -> str | None:
    """Why new file ``name`` cannot be written beside the new files ``created``: one of its folders
    is one of them, or it is one of their folders."""
    parts = name.split("/")
    folder = next((f for f in ("/".join(parts[:d]) for d in range(1, len(parts))) if f in created), None)
    if folder is not None:
        return f"{folder!r} is a new file another entry names, not a folder"
    inside = next((other for other in created if other.startswith(f"{name}/")), None)
    return f"{name!r} is a folder of the new file {inside!r} another entry names" if inside else None


def _check_new_files(to_files: Mapping[_Array, Any], created: Mapping[str, str | None]) -> None:
    """Refuse a new .npz that an entry without ``tensor`` names but others give other arrays: that
    entry could not read its array back (an archive of several needs its ``tensor``)."""
    for name, bare in created.items():
        keys = sorted(str(key) for file, key in to_files if file == name)
        if bare is not None and len(keys) > 1:
            raise CaseFileError(f"{name!r}, a new .npz file, would hold the arrays {keys}, but this entry names no "
                                "'tensor' to read its own by: name one (or give the entry a file of its own)",
                                file=TEST_FILE, json_path=bare)  # fmt: skip


def _check_inputs(kernel: Kernel, files: _Files, cases: Sequence[Mapping[str, Any]],
                  to_files: Mapping[_Array, Any]) -> None:  # fmt: skip
    """Refuse to write expected values over an array some case reads as an input."""
    names = {name for name, _ in to_files}
    for index, raw in enumerate(cases):
        for role, spec in (raw.get("inputs") or {}).items():
            if not isinstance(spec, Mapping) or "file" not in spec:
                continue
            path = json_path(["cases", index, "inputs", role])
            try:
                if kernel.package.relative_name(spec["file"]) not in names:
                    continue
                array = _array_of(kernel, files, spec, path)
            except KernelError:  # an input that cannot be read is no array to protect (a refusal case's)
                continue
            if array in to_files:
                raise CaseFileError(f"{_shown(array)} is the array {path} reads: writing the expected values there "
                                    "would change that input; give them a file (or tensor) of their own",
                                    file=TEST_FILE, json_path=to_files[array][1])  # fmt: skip


def _file_contents(files: _Files, to_files: Mapping[_Array, tuple[np.ndarray, str]],
                   created: Mapping[str, Any], entries_of: Mapping[str, str]) -> dict[str, bytes]:  # fmt: skip
    """Each data file's new content: the arrays of ``to_files`` in place of the old ones, every
    other array of the file as it was (a file of ``created``: just those arrays); ``entries_of``:
    the first entry naming each file, which a refusal names."""
    by_file: dict[str, dict[str | None, np.ndarray]] = {}
    for (name, key), (array, _) in to_files.items():
        by_file.setdefault(name, {})[key] = array
    contents = {name: with_arrays(None if name in created else files.read(name), name, arrays)
                for name, arrays in by_file.items()}  # fmt: skip
    for name, content in contents.items():
        # no package reads a larger file: written, it had failed metadata.json's refresh after test.json was replaced
        if len(content) > MAX_FILE_BYTES:
            raise CaseFileError(f"{name!r} would be {len(content)} bytes, more than a package file may be "
                                f"({MAX_FILE_BYTES}): make the case smaller, or give the arrays of a shared file "
                                "files of their own", file=TEST_FILE, json_path=entries_of[name])  # fmt: skip
    return contents
