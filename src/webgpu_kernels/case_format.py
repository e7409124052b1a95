"""The format of a package's case files, ``test.json`` and ``bench.json``: their names, their JSON
Schemas (``schemas/test.schema.json``, ``bench.schema.json``) and every problem a decoded file can
have that needs no GPU: schema, structure, ``generate`` objects, shapes no array can have. validate
lists them all; casefile.py's parsers raise the first, then read the cases as typed objects. The
formats are documented in docs/package-files.md.
"""

from __future__ import annotations

import copy
import json
import math
from collections.abc import Iterable, Iterator, Mapping
from functools import cache
from importlib import resources
from typing import Any

import jsonschema
from jsonschema.exceptions import ValidationError

from .case_data import MAX_CASE_TOTAL_ELEMENTS
from .contract import MAX_ELEMENTS, shape_text, too_many_elements
from .digests import json_path
from .errors import CaseFileError, name_meant, shorten
from .json_schema import validator as schema_validator

TEST_FILE = "test.json"
BENCH_FILE = "bench.json"


# --- schemas --------------------------------------------------------------------------------------


@cache
def case_schema(kind: str) -> dict[str, Any]:
    """The JSON Schema of ``test`` or ``bench`` files."""
    text = resources.files(__package__).joinpath(f"schemas/{kind}.schema.json").read_text("utf-8")
    return json.loads(text)


@cache
def _validator(kind: str) -> Any:
    return schema_validator(_bulk_checked(case_schema(kind)), _BULK_KEYWORDS)


# Inline data is checked by one walk of its own, not by the schema's per-item rules: jsonschema
# descends a oneOf and a $ref for each value (about 0.1 ms each), and 2 x 10^6 zeros in a 4 MB
# test.json took `validate` 213 s (3.8 s now). The schema files keep the rules (for other tools);
# the errors are the ones jsonschema gives, at the same places, one per array as its oneOf gave.

_NON_FINITE = ("nan", "inf", "-inf")


def _first_not_scalar(value: Any, nested: bool) -> tuple[list[int], Any] | None:
    """The place (indexes) and value of the first item of the list ``value`` that is no scalar of
    the schema's (a number, a boolean, "nan", "inf" or "-inf"; ``nested``: lists of them nested to
    any depth are fine too), walked in document order; None if none. Holds one iterator per level
    (the depth is bounded before) and makes no call per item."""
    stack: list[tuple[list[int], Iterator[tuple[int, Any]]]] = [([], enumerate(value))]
    while stack:
        path, items = stack[-1]
        for i, item in items:
            if isinstance(item, (int, float)) or (isinstance(item, str) and item in _NON_FINITE):
                continue
            if nested and isinstance(item, list):
                stack.append(([*path, i], enumerate(item)))
                break
            return [*path, i], item
        else:
            stack.pop()
    return None


def _scalar_tree(validator: Any, nested: Any, instance: Any, schema: Any) -> Iterator[ValidationError]:
    """The schema's ``values`` (``nested``: a scalar or lists of them to any depth) or an array of
    scalars (a special's ``values``, whose ``type`` is said by the schema)."""
    if isinstance(instance, list):
        found = _first_not_scalar(instance, bool(nested))
    elif nested and not (isinstance(instance, (int, float)) or (isinstance(instance, str) and instance in _NON_FINITE)):
        found = [], instance
    else:
        found = None
    if found is not None:
        path, value = found
        yield ValidationError(f"{value!r} is not valid under any of the given schemas", path=path, instance=value)


def _natural_items(validator: Any, value: Any, instance: Any, schema: Any) -> Iterator[ValidationError]:
    """The items of a special's ``at``: integers (1.0 is one, to JSON Schema) of at least 0."""
    if not isinstance(instance, list):
        return  # the schema's "type" says so
    for i, item in enumerate(instance):  # the first bad one: a million of them would be a million errors
        if type(item) is int or (type(item) is float and item.is_integer()):
            if item >= 0:
                continue
            message = f"{item!r} is less than the minimum of 0"
        else:
            message = f"{item!r} is not of type 'integer'"
        yield ValidationError(message, path=[i], instance=item)
        return


_BULK_KEYWORDS = {"scalarTree": _scalar_tree, "naturalItems": _natural_items}


def _bulk_checked(schema: dict[str, Any]) -> dict[str, Any]:
    """``schema`` with its per-item rules for inline data (``values``, a special's ``at`` and
    ``values``) replaced by the keywords above, which say the same in one walk."""
    schema = copy.deepcopy(schema)
    defs = schema.get("$defs", {})
    if "values" in defs:
        defs["values"] = {"scalarTree": True}
        special = defs["special"]["properties"]
        special["values"] = {**special["values"], "scalarTree": False}
        del special["values"]["items"]
        special["at"] = {**special["at"], "naturalItems": True}
        del special["at"]["items"]
    return schema


#: Deepest nesting a case file may have: values of rank 64 need 64, and jsonschema (like NumPy)
#: recurses once per level.
MAX_CASE_FILE_DEPTH = 80


#: Most cases a test.json or bench.json may hold (the schemas' maxItems too; the shipped packages have
#: at most 96): validate calls, selects and renders each case per type combination, and 10,000 small
#: bench.json cases (0.8 MB) took it 19.7 s, so the 8 MiB a case file may be would have taken minutes.
MAX_CASES = 1024


def _too_deep(data: Any) -> list[str | int] | None:
    """The JSON path of the first value nested deeper than MAX_CASE_FILE_DEPTH, else None. Holds
    one iterator per level, nothing per item (a path per item had taken seconds for 10^6 values)."""
    if not isinstance(data, (dict, list)):
        return None
    stack: list[tuple[Any, Iterator[tuple[Any, Any]]]] = [(None, iter(data.items()) if isinstance(data, dict)
                                                           else enumerate(data))]  # fmt: skip
    while stack:
        for key, child in stack[-1][1]:
            if len(stack) > MAX_CASE_FILE_DEPTH:
                return [k for k, _ in stack[1:]] + [key]
            if isinstance(child, (dict, list)):
                stack.append((key, iter(child.items()) if isinstance(child, dict) else enumerate(child)))
                break
        else:
            stack.pop()
    return None


def schema_errors(data: Any, kind: str, *, file: str, manifest: Any = None) -> list[CaseFileError]:
    """Every schema violation of a test.json (``kind="test"``) or bench.json (``"bench"``).
    ``manifest`` (the op's, where known): an entry under a case's ``inputs`` whose name is no input
    of the op is said to be so, once, instead of its schema errors."""
    cases = data.get("cases") if isinstance(data, dict) else None
    if isinstance(cases, list) and len(cases) > MAX_CASES:  # before the schema walks each of them
        return [CaseFileError(f"holds {len(cases)} cases, more than {MAX_CASES}", file=file, json_path="cases")]
    deep = _too_deep(data)
    if deep is not None:
        return [CaseFileError(f"nested more than {MAX_CASE_FILE_DEPTH} levels deep", file=file,
                              json_path=json_path(deep[:8]) + "...")]  # fmt: skip
    errors = []
    named: set[tuple[Any, ...]] = set()  # the entries already said to be no input
    for error in sorted(_validator(kind).iter_errors(data), key=lambda e: (list(map(str, e.absolute_path)), e.message)):
        best = jsonschema.exceptions.best_match([error])
        where = list(best.absolute_path)
        if manifest is not None and _no_input(manifest, where):
            case = data["cases"][where[1]]  # (the schema error lies inside a case and its inputs object)
            refused = kind == "test" and "refused" in case
            entry = case["inputs"][where[3]]
            if not (refused and isinstance(entry, dict) and "dtype" in entry):  # else: a refused case's own input,
                if tuple(where[:4]) not in named:                              # whose schema error says what is wrong
                    named.add(tuple(where[:4]))
                    errors.append(CaseFileError(not_an_input(manifest, where[3], given=case["inputs"], refused=refused),
                                                file=file, json_path=json_path(where[:4])))  # fmt: skip
                continue
        message = best.message
        if len(message) > 300:
            message = message[:297] + "..."
        if isinstance(best.instance, str) and best.instance.strip().lower().lstrip("+-") in ("nan", "inf", "infinity"):
            message += ' (non-finite values are spelt "nan", "inf" and "-inf")'  # "NaN", "Infinity": JSON has none
        errors.append(CaseFileError(message, file=file, json_path=json_path(best.absolute_path)))
    return errors


#: The keys of an input's entry: one of them named as an input was meant inside one.
_ENTRY_KEYS = ("shape", "dtype", "generate", "values", "file", "tensor", "special")


def _no_input(manifest: Any, where: list[Any]) -> bool:
    """Whether the JSON path ``where`` lies in a case's ``inputs`` entry of a name the op has no input of."""
    return (len(where) >= 4 and where[0] == "cases" and where[2] == "inputs" and isinstance(where[3], str)
            and where[3] not in {spec.role for spec in manifest.inputs})  # fmt: skip


def not_an_input(manifest: Any, name: str, *, given: Iterable[str] = (), refused: bool = False) -> str:
    """Why a case's ``inputs`` entry ``name`` is wrong: no input of the op has that name (with what
    the author likely meant: an input's key written beside the inputs, or an input's other spelling).
    Its schema errors (``'shape' is a required property``) had said nothing of the kind. ``given``:
    the case's other inputs' names; ``refused``: a case expecting a refusal, which may name one."""
    roles = [spec.role for spec in manifest.inputs]
    message = f"{name!r} is not an input of {manifest.op_id} " + (f"(its inputs: {', '.join(roles)})" if roles
                                                                   else "(it has no inputs)")  # fmt: skip
    if name in _ENTRY_KEYS and roles:
        role = next((r for r in roles if r in set(given)), roles[0])
        message += f"; did you mean it inside an input's entry, as in \"{role}\": {{\"shape\": [...], \"{name}\": ...}}?"
    else:
        close = name_meant(name, roles)
        if close:
            message += f"; did you mean {close!r}?"
    if refused:
        message += "; a refused case may name one, with its own 'dtype'"
    return message


# --- test.json ------------------------------------------------------------------------------------


def too_many_case_elements(case: str, count: int) -> str:
    return (f"case {shorten(case)!r} holds {count} elements in its inputs and expected outputs together, more than "
            f"the {MAX_CASE_TOTAL_ELEMENTS} (2^{MAX_CASE_TOTAL_ELEMENTS.bit_length() - 1}) a case may hold: split it")



def check_test_data(data: Any, *, file: str = TEST_FILE, drafts: bool = False, manifest: Any = None) -> list[CaseFileError]:
    """Every problem with a decoded test.json that needs no manifest: schema, then structure.
    ``drafts``: a case with neither ``expected`` nor ``refused`` is taken (``expect`` writes its
    expected values); elsewhere it is refused, since it would compare nothing and pass. ``manifest``:
    the op's, where known (:func:`schema_errors`)."""
    errors = schema_errors(data, "test", file=file, manifest=manifest)
    if errors:
        return errors
    errors.extend(_duplicate_names(data["cases"], file))
    errors += tolerance_errors(data, file)
    for i, case in enumerate(data["cases"]):
        # Summed before anything is built; a data file without a shape counts when it is read
        # (TestCase._check_total).
        count = sum(math.prod(spec["shape"]) for section in ("inputs", "expected")
                    for spec in case.get(section, {}).values() if "shape" in spec)  # fmt: skip
        if count > MAX_CASE_TOTAL_ELEMENTS:
            errors.append(CaseFileError(too_many_case_elements(case["name"], count), file=file,
                                        json_path=json_path(["cases", i])))  # fmt: skip
        if "expected" in case and "refused" in case:
            errors.append(CaseFileError("give exactly one of 'expected' (the outputs to compare) and 'refused' (the "
                                        "error the call must raise), not both", file=file,
                                        json_path=json_path(["cases", i])))  # fmt: skip
        elif "expected" not in case and "refused" not in case and not drafts:
            errors.append(CaseFileError("give exactly one of 'expected' (the outputs to compare) and 'refused' (the "
                                        "error the call must raise): the case has neither, and would compare nothing; "
                                        "write its expected values from your reference with `webgpu-kernels expect "
                                        "PATH --reference FILE.py:FUNCTION`", file=file,
                                        json_path=json_path(["cases", i])))  # fmt: skip
        for section in ("inputs", "expected"):
            for role, spec in case.get(section, {}).items():
                kinds = [k for k in ("values", "generate", "file") if k in spec]
                entry = json_path(["cases", i, section, role])
                if len(kinds) != 1:
                    errors.append(CaseFileError("give exactly one of 'values', 'generate' or 'file'"
                                                + (f" (found {kinds})" if kinds else ""), file=file, json_path=entry))  # fmt: skip
                if "tensor" in spec and "file" not in spec:
                    errors.append(CaseFileError("'tensor' names a member of a data 'file'", file=file,
                                                json_path=f"{entry}.tensor"))  # fmt: skip
                special = spec.get("special")
                if special is not None and len(special["at"]) != len(special["values"]):
                    errors.append(CaseFileError(f"{len(special['at'])} indices in 'at' but "
                                                f"{len(special['values'])} values", file=file,
                                                json_path=f"{entry}.special"))  # fmt: skip
                if spec.get("generate") is not None:
                    errors += generate_errors(spec["generate"], file, f"{entry}.generate")
                if "shape" in spec:
                    errors += impossible_shape_errors(spec["shape"], file, ["cases", i, section, role, "shape"])
    return errors


def tolerance_errors(data: Mapping[str, Any], file: str) -> list[CaseFileError]:
    """What the schema cannot say of a case file's ``tolerances`` (test.json's and bench.json's, the
    file's and each case's), each at its JSON path: Python's JSON reader takes 1e400 and the
    non-standard Infinity and NaN as numbers, and the schema's minimum lets them through: an
    infinite atol would pass any finite output."""
    sets: list[tuple[list[str | int], Any]] = [(["tolerances"], data.get("tolerances", {}))]
    sets += [(["cases", i, "tolerances"], c.get("tolerances", {})) for i, c in enumerate(data["cases"])]
    return [CaseFileError(f"{key} must be a finite number, not {value!r}", file=file,
                          json_path=json_path([*where, dtype, key]))
            for where, tolerances in sets for dtype, values in tolerances.items()
            for key, value in values.items() if not math.isfinite(value)]  # fmt: skip


def generate_errors(gen: Mapping[str, Any], file: str, where: str) -> list[CaseFileError]:
    """What the schema cannot say of a ``generate`` object (test.json's and bench.json's)."""
    errors = []
    allowed = {"normal": {"mean", "std"}, "uniform": {"low", "high"}}[gen["distribution"]]
    extra = sorted(set(gen) - allowed - {"distribution", "seed"})
    if extra:
        errors.append(CaseFileError(f"{extra} do not apply to the {gen['distribution']} distribution", file=file,
                                    json_path=where))  # fmt: skip
    # as floats, as they are drawn: a JSON integer's 10**308 - -10**308 is an int past float (OverflowError)
    low, high, mean, std = (_as_float(gen.get(k, d)) for k, d in (("low", 0.0), ("high", 1.0), ("mean", 0.0), ("std", 1.0)))
    if gen["distribution"] == "uniform" and low > high:
        errors.append(CaseFileError("low is above high", file=file, json_path=where))
    elif gen["distribution"] == "uniform" and not math.isfinite(high - low):
        # values are drawn as low + (high - low) * u: every one would be infinite
        errors.append(CaseFileError("high - low is past float64's range: every value drawn would be infinite",
                                    file=file, json_path=where))  # fmt: skip
    elif gen["distribution"] == "normal" and not math.isfinite(abs(mean) + 9 * std):
        # mean + std * z: test.json's draws stay within 8.6 sigma (53-bit Box-Muller); std 1e308 had
        # made most of them infinite, with NumPy's overflow warning on the console
        errors.append(CaseFileError("mean + 9 std (further than any draw) is past float64's range: values drawn "
                                    "would be infinite", file=file, json_path=where))  # fmt: skip
    return errors



# --- bench.json -----------------------------------------------------------------------------------


def check_bench_data(data: Any, *, file: str = BENCH_FILE, manifest: Any = None) -> list[CaseFileError]:
    """Every problem with a decoded bench.json that needs no manifest: schema, duplicate names.
    ``manifest``: the op's, where known (:func:`schema_errors`)."""
    errors = schema_errors(data, "bench", file=file, manifest=manifest)
    if errors:
        return errors
    for i, case in enumerate(data["cases"]):
        for role, spec in case["inputs"].items():
            if "generate" in spec:
                errors += generate_errors(spec["generate"], file, json_path(["cases", i, "inputs", role, "generate"]))
            errors += impossible_shape_errors(spec["shape"], file, ["cases", i, "inputs", role, "shape"])
    errors += tolerance_errors(data, file)
    return errors + _duplicate_names(data["cases"], file)


def _as_float(number: float) -> float:
    """A JSON number as the draws read it, a JSON integer past float64 as the infinity it is."""
    try:
        return float(number)
    except OverflowError:  # float(10**400)
        return math.inf if number > 0 else -math.inf


def impossible_shape_errors(shape: list[int], file: str, where: list[str | int]) -> list[CaseFileError]:
    """A shape no array can have, whatever the device: `bench` draws its inputs before any call
    checks them, and NumPy raised a raw ValueError for [0, 2**70] (0 bytes: past the maxBufferSize
    check and test.json's element count). The contract refuses the same shapes for a call."""
    if not too_many_elements(shape):
        return []
    return [CaseFileError(f"shape {shape_text(shape)} has 2^{MAX_ELEMENTS.bit_length() - 1} elements or more (a zero "
                          "dimension counted as 1), or a dimension that large: no array has it", file=file,
                          json_path=json_path(where))]  # fmt: skip


def _duplicate_names(cases: list[dict[str, Any]], file: str) -> list[CaseFileError]:
    """Case names must be unique within a file (they name results and filters)."""
    errors: list[CaseFileError] = []
    seen: dict[str, int] = {}
    for i, case in enumerate(cases):
        if case["name"] in seen:
            errors.append(CaseFileError(f"duplicate case name {case['name']!r} (also cases[{seen[case['name']]}])",
                                        file=file, json_path=json_path(["cases", i, "name"])))  # fmt: skip
        seen.setdefault(case["name"], i)
    return errors
