"""A package's cases, read from ``test.json`` (correctness) and ``bench.json`` (benchmark and
tuning) as typed objects, once case_format.py found no problem in the decoded file.

They need nothing but the package to be judged: inputs are inline values, data files of the
package (``.npy``, ``.npz``, ``.safetensors``) or generated from a seed and a distribution by the
fully specified generator of case_data.py; expected outputs are inline values or data files. No per-op
Python code is involved. The formats are documented in docs/package-files.md.
"""

from __future__ import annotations

import fnmatch
import hashlib
import itertools
import json
import math
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from . import errors as error_classes
from .case_data import MAX_CASE_ELEMENTS, MAX_CASE_TOTAL_ELEMENTS, dtype_name, generate, inline_values, load_array
from .case_format import (
    BENCH_FILE,
    TEST_FILE,
    check_bench_data,
    check_test_data,
    not_an_input,
    too_many_case_elements,
)
from .comparison import Tolerance
from .digests import json_path
from .errors import (
    AttributeValueError,
    CaseFileError,
    DTypeError,
    InputError,
    KernelError,
    MissingInputError,
    PackageError,
    shorten,
)
from .forks import fresh_in_child
from .manifest import parse_manifest
from .reading import decode_json


def case_name_matches(name: str, patterns: Any) -> bool:
    """Whether a case named ``name`` is selected by ``--case`` patterns: each is a part of the name or
    a glob (``tail``, ``sd*-f16``); no patterns select every case. `test`, `bench` and `tune` agree."""
    return not patterns or any(p in name or fnmatch.fnmatchcase(name, p) for p in patterns)


#: Most runs one bench.json case may expand to (the product of its types lists' lengths).
MAX_TYPE_COMBINATIONS = 64


# --- test.json ------------------------------------------------------------------------------------


def _merge_tolerances(base: Mapping[str, Tolerance], override: Mapping[str, Any]) -> dict[str, Tolerance]:
    merged = dict(base)
    for dtype, values in override.items():
        old = merged.get(dtype, Tolerance())
        merged[dtype] = Tolerance(rtol=float(values.get("rtol", old.rtol)), atol=float(values.get("atol", old.atol)))
    return merged


@dataclass(frozen=True)
class Refusal:
    """What a case that must be refused expects: an error of class ``error`` (a name in errors.py;
    a subclass counts, but for a sandbox refusal) whose message contains ``message``."""

    error: str
    message: str | None = None

    def matches(self, exc: BaseException) -> bool:
        # (the schema's enum limits ``error`` to the call's error classes.) An ExpressionSandboxError
        # is an ExpressionError, but it says the package's expression breaks the sandbox: a defect
        # to fix, which a refused case must not turn into a pass.
        return (isinstance(exc, getattr(error_classes, self.error)) and not isinstance(exc, error_classes.SandboxError)
                and (self.message is None or self.message in str(exc)))  # fmt: skip

    def describe(self) -> str:
        return self.error + (f" whose message contains {self.message!r}" if self.message else "")

    def mismatch(self, exc: BaseException) -> str:
        """Why ``exc``, which does not match, fails the case (test and validate say it alike)."""
        why = " (a sandbox refusal is the package's defect, never a refusal a case expects)"
        return (f"refused with {type(exc).__name__}: {exc}; the case expects {self.describe()}"
                f"{why if isinstance(exc, error_classes.SandboxError) else ''}")  # fmt: skip


@dataclass(frozen=True)
class TestCase:
    """One test.json case, as written (data is built on demand: :meth:`build_inputs`, :meth:`build_expected`)."""

    __test__ = False  # not a pytest class

    name: str
    index: int
    json_path: str
    description: str
    tags: tuple[str, ...]
    types: dict[str, str]
    attrs: dict[str, Any]
    tunables: dict[str, Any]
    inputs: dict[str, dict[str, Any]]
    expected: dict[str, dict[str, Any]]
    tolerances: dict[str, Tolerance]
    variants: tuple[str, ...] | None
    refused: Refusal | None = None  # set: the call must raise this, and ``expected`` is empty
    file: str = TEST_FILE

    def tolerance(self, dtype: str) -> Tolerance:
        """The tolerance for outputs of ``dtype`` (exact comparison when the file sets none)."""
        return self.tolerances.get(dtype, Tolerance())

    def input_dtype(self, role: str, type_var: str | None, manifest: Any) -> str | None:
        spec = self.inputs[role]
        if "dtype" in spec:
            return spec["dtype"]
        if type_var is not None and type_var in self.types:
            return self.types[type_var]
        return sole_type(manifest, type_var)

    def build_inputs(self, manifest: Any, read_bytes: Any) -> dict[str, np.ndarray]:
        """The case's input arrays. ``read_bytes(name)`` reads a package file (``KernelPackage.read_bytes``)."""
        type_vars = {spec.role: spec.dtype for spec in manifest.inputs}
        arrays: dict[str, np.ndarray] = {}
        for role, spec in self.inputs.items():
            self._check_total(arrays.values(), "inputs", role)
            where = json_path(["cases", self.index, "inputs", role])
            if role not in type_vars and not (self.refused is not None and "dtype" in spec):
                # (a refused case may pass an unknown input, to test its refusal: with a dtype of its own)
                raise CaseFileError(not_an_input(manifest, role, given=self.inputs, refused=self.refused is not None),
                                    file=self.file, json_path=where)  # fmt: skip
            dtype = self.input_dtype(role, type_vars.get(role), manifest)
            arrays[role] = build_tensor(spec, dtype=dtype, read_bytes=read_bytes, file=self.file, where=where)
        self._check_total(arrays.values(), "inputs")
        return arrays

    def build_expected(self, read_bytes: Any, output_dtypes: Mapping[str, str], *,
                       inputs: Mapping[str, np.ndarray] | None = None) -> dict[str, np.ndarray]:  # fmt: skip
        """The expected outputs in float64, integer and boolean ones as they are (compared exactly).
        Inline values are rounded to their ``dtype`` first (default: the output's dtype,
        ``output_dtypes[role]``). ``inputs``: the case's built inputs, which count toward its
        MAX_CASE_TOTAL_ELEMENTS."""
        expected: dict[str, np.ndarray] = {}
        built = list((inputs or {}).values())
        for role, spec in self.expected.items():
            self._check_total([*built, *expected.values()], "expected", role)
            where = json_path(["cases", self.index, "expected", role])
            dtype = spec.get("dtype") or output_dtypes.get(role) or "float64"
            array = build_tensor(spec, dtype=dtype, read_bytes=read_bytes, file=self.file, where=where,
                                 expected=True)  # fmt: skip
            if array.dtype.kind in "iub":
                expected[role] = array
                continue
            with np.errstate(invalid="ignore"):
                expected[role] = array.astype(np.float64)
        self._check_total([*built, *expected.values()], "expected")
        return expected

    def _check_total(self, arrays: Iterable[np.ndarray], section: str, next_role: str | None = None) -> None:
        """Refuse the case once what it built holds more than MAX_CASE_TOTAL_ELEMENTS, and before it
        builds ``next_role`` if its shape would take it past (check_test_data refused the shapes
        the file gives; a data file's is known once read)."""
        count = sum(a.size for a in arrays)
        if next_role is not None:
            shape = (self.inputs if section == "inputs" else self.expected)[next_role].get("shape")
            count += math.prod(shape) if shape is not None else 0
        if count > MAX_CASE_TOTAL_ELEMENTS:
            raise CaseFileError(too_many_case_elements(self.name, count), file=self.file,
                                json_path=json_path(["cases", self.index, section] + ([next_role] if next_role else [])))  # fmt: skip

    def type_label(self, manifest: Any, arrays: Mapping[str, np.ndarray] | None = None) -> str:
        """The case's dtypes for tables: ``float16``, or ``T=float16, U=int32`` for several type variables
        (every one it binds, in the format of validate's coverage). ``arrays``: its built inputs, whose
        dtypes a data file gives (the file alone says it)."""
        return binding_label(self.type_binding(manifest, arrays))

    def type_binding(self, manifest: Any, arrays: Mapping[str, np.ndarray] | None = None) -> dict[str, str]:
        binding: dict[str, str] = {}
        for spec in manifest.inputs:
            if spec.role in self.inputs:
                if arrays is not None and spec.role in arrays:
                    dtype: str | None = dtype_name(arrays[spec.role].dtype)
                else:
                    dtype = self.input_dtype(spec.role, spec.dtype, manifest)
                if dtype is not None:
                    binding.setdefault(spec.dtype, dtype)
        # An output's type variable that no input binds and a one-type constraint fixes (an int64
        # index output's, ONNX's stash type U) is bound as check_call binds it, so that `test`
        # labels a run as `validate` labels the call.
        outputs = {spec.dtype for spec in manifest.outputs}
        for tv, allowed in manifest.type_constraints.items():
            if tv not in binding and tv in outputs and len(allowed) == 1:
                binding[tv] = allowed[0]
        for tv, dtype in self.types.items():
            binding.setdefault(tv, dtype)
        return binding



def sole_type(manifest: Any, type_var: str | None) -> str | None:
    """The one dtype a one-type constraint allows: it binds its inputs as it binds an output,
    with no case saying so (``"B": ["bool"]``)."""
    allowed: tuple[str, ...] = manifest.type_constraints.get(type_var, ()) if type_var is not None else ()
    return allowed[0] if len(allowed) == 1 else None


def build_tensor(
    spec: Mapping[str, Any],
    *,
    dtype: str | None,
    read_bytes: Any,
    file: str,
    where: str,
    expected: bool = False,
) -> np.ndarray:
    """An array from an input or (``expected``) an expected entry (inline ``values``, ``generate`` or
    ``file``). An expected entry's data file may hold any dtype, and its inline integers are never
    clipped to ``dtype``'s range."""
    kinds = [k for k in ("values", "generate", "file") if k in spec]
    if len(kinds) != 1:
        raise CaseFileError("give exactly one of 'values', 'generate' or 'file'" + (f" (found {kinds})" if kinds else ""),
                            file=file, json_path=where)  # fmt: skip
    kind = kinds[0]
    shape = tuple(spec["shape"]) if "shape" in spec else None
    if shape is not None and math.prod(shape) > MAX_CASE_ELEMENTS:
        raise CaseFileError(f"{list(shape)} holds {math.prod(shape)} elements, more than the {MAX_CASE_ELEMENTS} (2^24) "
                            "one tensor of a case may hold (bench.json's shapes have no such bound)",
                            file=file, json_path=f"{where}.shape")  # fmt: skip
    try:
        if kind == "file":
            name = spec["file"]
            array = load_array(read_bytes(name), name, spec.get("tensor"))
            if shape is not None and array.shape != shape:
                raise CaseFileError(f"{name} holds shape {list(array.shape)}, the entry says {list(shape)}",
                                    file=file, json_path=f"{where}.shape")  # fmt: skip
            if not expected and dtype is not None and dtype_name(array.dtype) != dtype:
                raise CaseFileError(f"{name} holds {dtype_name(array.dtype)} data, the input is {dtype}",
                                    file=file, json_path=f"{where}.file")  # fmt: skip
            array = np.array(array, copy=True, order="C")  # C order: `special` writes through reshape(-1)
        else:
            if dtype is None:
                raise CaseFileError("no dtype: give 'dtype' here or the case's 'types' for its type variable",
                                    file=file, json_path=where)  # fmt: skip
            if shape is None:  # the schema requires one beside 'values' and 'generate'
                raise CaseFileError(f"no shape: give 'shape' with '{kind}'", file=file, json_path=where)
            if kind == "generate":
                array = generate(spec["generate"], shape, dtype)
            else:
                try:  # an expected entry is the true result: never clipped
                    values = inline_values(spec["values"], dtype, clip=not expected)
                except ValueError as exc:
                    raise CaseFileError(str(exc), file=file, json_path=f"{where}.values") from None
                if values.shape != shape:
                    if values.ndim == 1 and values.size == math.prod(shape):
                        values = values.reshape(shape)
                    elif values.ndim == 0 and math.prod(shape) == 1:
                        values = values.reshape(shape)
                    elif 0 in values.shape and values.shape == shape[:values.ndim]:
                        values = values.reshape(shape)  # JSON cannot nest inside []: [[], []] is [2, 0, 1] too
                    else:
                        raise CaseFileError(f"{values.size} values (shape {list(values.shape)}) for shape {list(shape)}",
                                            file=file, json_path=f"{where}.values")  # fmt: skip
                array = values
        special = spec.get("special")
        if special is not None:
            at, values = special["at"], special["values"]
            if len(at) != len(values):
                raise CaseFileError(f"{len(at)} indices in 'at' but {len(values)} values",
                                    file=file, json_path=f"{where}.special")  # fmt: skip
            flat = array.reshape(-1)
            for index in at:
                if index >= flat.size:
                    raise CaseFileError(f"index {index} is out of range for {flat.size} elements",
                                        file=file, json_path=f"{where}.special.at")  # fmt: skip
            flat[list(at)] = inline_values(values, dtype_name(array.dtype))
        return array
    except CaseFileError:
        raise
    except PackageError as exc:
        raise CaseFileError(str(exc), file=file, json_path=where) from None
    except (ValueError, KeyError, TypeError, OSError, UnicodeDecodeError, MemoryError, OverflowError) as exc:
        raise CaseFileError(f"{spec.get('file', kind)}: {str(exc) or type(exc).__name__}", file=file, json_path=where) from None


@dataclass(frozen=True)
class TestFile:
    __test__ = False  # not a pytest class

    description: str
    tolerances: dict[str, Tolerance]
    cases: tuple[TestCase, ...]
    file: str = TEST_FILE


def parse_test_file(data: Any, *, file: str = TEST_FILE, drafts: bool = False, manifest: Any = None) -> TestFile:
    """A decoded test.json as a :class:`TestFile`; raises the first :class:`CaseFileError`.
    ``drafts``, ``manifest``: as :func:`check_test_data` takes them."""
    errors = check_test_data(data, file=file, drafts=drafts, manifest=manifest)
    if errors:
        raise errors[0]
    return checked_test_file(data, file=file)


def checked_test_file(data: Any, *, file: str = TEST_FILE) -> TestFile:
    """:func:`parse_test_file` of ``data`` that :func:`check_test_data` found no problem in, not
    checked again (validate reports every problem first; the schema check is most of the cost)."""
    base = _merge_tolerances({}, data.get("tolerances", {}))
    cases = []
    for i, case in enumerate(data["cases"]):
        variants = case.get("variants")
        cases.append(TestCase(
            name=case["name"], index=i, json_path=json_path(["cases", i]), description=case.get("description", ""),
            tags=tuple(case.get("tags", [])), types=dict(case.get("types", {})), attrs=dict(case.get("attrs", {})),
            tunables=dict(case.get("tunables", {})), inputs={k: dict(v) for k, v in case["inputs"].items()},
            expected={k: dict(v) for k, v in case.get("expected", {}).items()},
            tolerances=_merge_tolerances(base, case.get("tolerances", {})),
            variants=tuple(variants) if variants is not None else None,
            refused=Refusal(**case["refused"]) if "refused" in case else None, file=file,
        ))  # fmt: skip
    return TestFile(description=data.get("description", ""), tolerances=base, cases=tuple(cases), file=file)


def parse_draft_case(case: Mapping[str, Any]) -> TestCase:
    """One case as test.json would hold it, its ``expected`` optional: authors build its inputs to
    compute the expected outputs before the case can go into the file."""
    draft = dict(case)
    if not draft.get("expected"):  # an empty one too: the schema wants one entry at least
        draft.pop("expected", None)
    # Errors name the case and say why their paths read cases[0]: it had read "file: case".
    name = case.get("name") if isinstance(case.get("name"), str) else None
    where = f"case {shorten(name)!r} given as a dict (read as cases[0])" if name else "a case given as a dict (read as cases[0])"
    return parse_test_file({"cases": [draft]}, file=where, drafts=True).cases[0]


def read_test_file(package: Any) -> TestFile:
    """The package's test.json (raises PackageError when absent or unreadable). Parsed once per
    content: its schema check costs about 0.1 s for a 40-case file, and authors' scripts ask for one
    case at a time (api.test_case_inputs). A refusal names an entry of no input of the op as such
    (the package's manifest read for it)."""
    file = str(package.path_of(TEST_FILE))
    data = package.read_bytes(TEST_FILE)
    key = (hashlib.sha256(data).digest(), file)  # the content, not its bytes: nothing large stays alive
    parsed = _parsed_test_files.get(key)
    if parsed is None:
        try:
            document = decode_json(data)
        except ValueError as exc:
            raise PackageError(str(exc), path=file) from None
        try:
            parsed = parse_test_file(document, file=file)
        except CaseFileError:  # again, knowing the op's inputs: that refusal, where it says more
            parse_test_file(document, file=file, manifest=_manifest_of(package))
            raise
        with _parsed_lock:  # calls from several threads may fill it at once
            if len(_parsed_test_files) >= 16:
                _parsed_test_files.pop(next(iter(_parsed_test_files)))  # the oldest
            _parsed_test_files[key] = parsed
    return parsed


def _manifest_of(package: Any) -> Any:
    """The package's manifest, None where it cannot be read (the refusal it would refine is given as it is)."""
    try:
        return parse_manifest(package.read_json("manifest.json"))
    except KernelError:
        return None


_parsed_test_files: dict[tuple[bytes, str], TestFile] = {}
_parsed_lock = threading.Lock()
fresh_in_child(globals(), _parsed_lock=threading.Lock)


# --- bench.json -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class BenchCase:
    """One bench.json case as written: shapes, the dtypes per type variable, attributes, tunables."""

    name: str
    index: int
    json_path: str
    description: str
    tags: tuple[str, ...]
    types: dict[str, tuple[str, ...]]
    attrs: dict[str, Any]
    tunables: dict[str, Any]
    inputs: dict[str, dict[str, Any]]  # role -> {"shape": tuple, "dtype": str | None}
    file: str = BENCH_FILE
    #: the file's tolerances with the case's own merged over them, key by key (as test.json's)
    tolerances: dict[str, Tolerance] = field(default_factory=dict)

    def expand(self, manifest: Any) -> list[BenchInstance]:
        """One instance per combination of the ``types`` lists (as benchmark.expand_cases does)."""
        type_vars = {spec.role: spec.dtype for spec in manifest.inputs}
        names = list(self.types)
        unknown = [n for n in names if n not in manifest.type_constraints]
        if unknown:
            raise CaseFileError(f"{', '.join(map(repr, unknown))}: not a type variable of {manifest.op_id} (its type "
                                f"variables: {sorted(manifest.type_constraints)})", file=self.file,
                                json_path=json_path(["cases", self.index, "types"]))  # fmt: skip
        combinations = math.prod(len(self.types[n]) for n in names)
        if combinations > MAX_TYPE_COMBINATIONS:  # refused before any is built: 13 dtypes ** 8 is 8e8
            raise CaseFileError(f"the types lists make {combinations} combinations, more than "
                                f"{MAX_TYPE_COMBINATIONS}: split the case", file=self.file,
                                json_path=json_path(["cases", self.index, "types"]))  # fmt: skip
        instances = []
        for combo in itertools.product(*(self.types[n] for n in names)):
            binding = dict(zip(names, combo))
            metas = {}
            for role, spec in self.inputs.items():
                where = json_path(["cases", self.index, "inputs", role])
                if role not in type_vars:
                    raise CaseFileError(not_an_input(manifest, role, given=self.inputs), file=self.file, json_path=where)
                dtype = spec.get("dtype") or binding.get(type_vars[role]) or sole_type(manifest, type_vars[role])
                if dtype is None:
                    raise CaseFileError(f"no dtype: give 'dtype' here or the case's 'types' for {type_vars[role]!r}",
                                        file=self.file, json_path=where)  # fmt: skip
                metas[role] = (tuple(spec["shape"]), dtype)
            full = dict(binding)
            for role, (_, dtype) in metas.items():
                full.setdefault(type_vars[role], dtype)
            instances.append(BenchInstance(self, full, metas))
        return instances


@dataclass(frozen=True)
class BenchInstance:
    case: BenchCase
    types: dict[str, str]
    inputs: dict[str, tuple[tuple[int, ...], str]]  # role -> (shape, dtype)

    def type_label(self) -> str:
        return binding_label(self.types)


def binding_label(binding: Mapping[str, str]) -> str:
    """A type binding as tables show it, one format for test, bench and validate's coverage:
    ``float16`` where every type variable has that dtype, else ``T=float16, U=int32``; ``-`` for none."""
    if len(set(binding.values())) == 1:
        return next(iter(binding.values()))
    return ", ".join(f"{k}={v}" for k, v in binding.items()) or "-"


#: bench.json's per-call counts, what their errors call them, and the rate bench reports from each.
BENCH_COUNTS = {"flops": ("a FLOP count", "TFLOP/s"), "bytes": ("a byte count", "TB/s")}


@dataclass(frozen=True)
class BenchFile:
    description: str
    cases: tuple[BenchCase, ...]
    file: str = BENCH_FILE
    #: FLOPs of one call: an expression (evaluated per case with Kernel.evaluate) or a number; None: not given
    flops: str | int | None = None
    #: Bytes one call moves, where the package counts them (a kernel reading part of an input): as ``flops``
    bytes: str | int | None = None
    #: How closely bench holds outputs of a dtype named (test.json's file-level form); others: the engine's default
    tolerances: dict[str, Tolerance] = field(default_factory=dict)


def parse_bench_file(data: Any, *, file: str = BENCH_FILE, manifest: Any = None) -> BenchFile:
    """A decoded bench.json as a :class:`BenchFile`; raises the first :class:`CaseFileError`.
    ``manifest``: the op's, where known (:func:`schema_errors`)."""
    errors = check_bench_data(data, file=file, manifest=manifest)
    if errors:
        raise errors[0]
    return checked_bench_file(data, file=file)


def checked_bench_file(data: Any, *, file: str = BENCH_FILE) -> BenchFile:
    """:func:`parse_bench_file` of ``data`` that :func:`check_bench_data` found no problem in, not
    checked again (as :func:`checked_test_file`)."""
    base = _merge_tolerances({}, data.get("tolerances", {}))
    cases = tuple(
        BenchCase(
            name=case["name"], index=i, json_path=json_path(["cases", i]), description=case.get("description", ""),
            tags=tuple(case.get("tags", [])), types={k: tuple(v) for k, v in case.get("types", {}).items()},
            attrs=dict(case.get("attrs", {})), tunables=dict(case.get("tunables", {})),
            inputs={k: {"shape": tuple(v["shape"]), "dtype": v.get("dtype"), "generate": v.get("generate")}
                    for k, v in case["inputs"].items()},  # fmt: skip
            file=file, tolerances=_merge_tolerances(base, case.get("tolerances", {})),
        )
        for i, case in enumerate(data["cases"])
    )  # fmt: skip
    return BenchFile(description=data.get("description", ""), cases=cases, file=file, flops=data.get("flops"),
                     bytes=data.get("bytes"), tolerances=base)  # fmt: skip


def advise_case(exc: BaseException, file: str = TEST_FILE) -> None:
    """The contract's Python advice (.astype, "pass 0") in terms of a case of ``file`` (test.json,
    bench.json): a dtype its type constraint lacks is fixed in the package, or expected as a refusal
    (test.json) or taken out (bench.json); two dtypes for one type variable are made one; a boolean
    is written as the number meant; a missing input is given in the case."""
    if not isinstance(exc, InputError) or exc.hint_replaced:
        return
    refuse = ', or make the case refused: "refused": {"error": "DTypeError"}, docs/package-files.md'
    if isinstance(exc, DTypeError) and exc.allowed:
        instead = (refuse if file == TEST_FILE
                   else f", or take {exc.received} out of the case's dtypes (its \"types\", an input's \"dtype\")")  # fmt: skip
        exc.replace_hint(f"add {exc.received} to typeConstraints.{exc.type_variable} in manifest.json{instead}")
    elif isinstance(exc, DTypeError) and exc.bound_by:
        inputs = " and ".join(map(repr, (*exc.bound_by, exc.argument)))
        exc.replace_hint(f"make the case's dtypes agree: one dtype for {inputs} (the case's \"types\", or an input's "
                         f"\"dtype\"){refuse if file == TEST_FILE else ''}")
    elif isinstance(exc, AttributeValueError) and exc.number_meant is not None:
        meant = exc.number_meant if exc.list_meant is None else json.dumps(exc.list_meant)
        exc.replace_hint(f"write {meant} in the case's {exc.kind}s: a boolean is not a number here")
    elif isinstance(exc, MissingInputError) and exc.received == "nothing":  # the command line's -i would not do
        exc.replace_hint(f"give {exc.argument!r} in the case's \"inputs\"")
