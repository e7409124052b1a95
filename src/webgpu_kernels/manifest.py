"""The manifest: validated against the shipped JSON Schema, then parsed into typed objects.

Checks the schema cannot express (references between parts) are done here too, each failure a
:class:`ManifestError` carrying the JSON path of the offending value.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from types import MappingProxyType
from typing import Any, NoReturn

import jsonschema

from .errors import ManifestError, shorten
from .json_schema import validator as schema_validator

#: Most JSON values (objects, arrays, strings, numbers...) a manifest may hold. JSON Schema
#: validation costs about 35-90 us per value: the shipped manifests hold under 200 (6 ms), and a
#: 7 MB manifest of 192,000 values took 17 s. This bound keeps a hostile one near a second.
MAX_MANIFEST_VALUES = 20_000
#: Most bindings the passes may hold together, each ``bindingSets`` name expanded to its list and a
#: uniform struct's fields counted too. A set is written once but checked, built and compiled for
#: every pass that names it: one of 1,400 bindings named by 1,300 passes (252 KB, within the value
#: bound) took 104 s and 1.3 GB to load, about 60 us per expanded binding. The packages in this
#: repository hold at most 135 (a convolution's in tests/packages; the shipped ones 12); inline bindings cost 4 or
#: more values each, so the value bound alone allows about as many as this.
MAX_EXPANDED_BINDINGS = 4096

#: ONNX tensor element types and their name in ``dtypes.<T>``: the WGSL scalar where WGSL has one,
#: else a storage-only name (:data:`STORAGE_ONLY`). A type missing here (complex64, ...) is refused.
ONNX_TO_WGSL: dict[str, str | None] = {
    "float32": "f32", "float16": "f16", "int32": "i32", "uint32": "u32",
    "bfloat16": "bf16", "float64": "f64", "int8": "i8", "int16": "i16", "int64": "i64",
    "uint8": "u8", "uint16": "u16", "uint64": "u64", "bool": "bool",
}  # fmt: skip
#: Bytes per element of each ONNX type (NumPy's layout; bfloat16 without needing ml_dtypes).
ITEMSIZE: dict[str, int] = {
    "float32": 4, "float16": 2, "int32": 4, "uint32": 4, "bfloat16": 2, "float64": 8, "int8": 1,
    "int16": 2, "int64": 8, "uint8": 1, "uint16": 2, "uint64": 8, "bool": 1,
}  # fmt: skip
#: ``dtypes`` names of types WGSL cannot compute with: such a tensor is bound as its bytes, and the
#: shader views it through an element type of its own (``u32``, ``vec2<u32>``) and converts.
STORAGE_ONLY = frozenset({"bf16", "f64", "i8", "i16", "i64", "u8", "u16", "u64", "bool"})


def _refuse_change(self: Any, *args: Any, **kwargs: Any) -> NoReturn:
    raise TypeError(f"a parsed manifest's {type(self).__mro__[1].__name__} is read-only: a kernel is shared "
                    "(get_kernel keeps one per op id), so a change would reach every caller; change a copy "
                    "(copy.deepcopy, dict(...), list(...)) and parse that")  # fmt: skip


class ReadOnlyDict(dict[str, Any]):
    """A JSON object of a parsed manifest: a dict to read (``isinstance``, ``==``, ``json.dumps``)
    that refuses changes with a TypeError, as the model's MappingProxyType mappings do. A copy
    (``copy.copy``, ``copy.deepcopy``, ``dict(...)``, pickling) is a plain dict, the caller's own."""

    __slots__ = ()
    __setitem__ = __delitem__ = __ior__ = clear = pop = popitem = setdefault = update = _refuse_change

    def __reduce__(self) -> Any:  # what copy and pickle use: plain data, nested values included
        return dict, (dict(self),)


class ReadOnlyList(list[Any]):
    """A JSON array of a parsed manifest (a list default among them): a list to read that refuses
    changes; ``list(...)``, ``+``, slicing and copies give plain lists."""

    __slots__ = ()
    __setitem__ = __delitem__ = __iadd__ = __imul__ = _refuse_change
    append = extend = insert = pop = remove = clear = sort = reverse = _refuse_change

    def __reduce__(self) -> Any:
        return list, (list(self),)


def read_only(value: Any) -> Any:
    """``value`` (decoded JSON) with every object and array read-only, a new tree: the caller's stays its own."""
    if isinstance(value, dict):
        return ReadOnlyDict({key: read_only(item) for key, item in value.items()})
    if isinstance(value, list):
        return ReadOnlyList([read_only(item) for item in value])
    return value


@dataclass(frozen=True)
class TensorSpec:
    role: str
    dtype: str  # the type variable, e.g. "T"
    rank: int | str | None  # an int, an expression, or None (any rank)
    shape: str | None  # outputs: expression for the shape
    optional: bool
    description: str
    json_path: str


@dataclass(frozen=True)
class StructField:
    name: str
    type: str
    value: Any  # expression source or literal
    json_path: str


@dataclass(frozen=True)
class Binding:
    name: str
    buffer_type: str  # "read-only-storage" | "storage" | "uniform"
    arg: str | None
    semantic: str | None
    element_type: str | None  # WGSL type or "$constant"
    length: Any
    struct_name: str | None
    fields: tuple[StructField, ...]
    json_path: str


@dataclass(frozen=True)
class Dispatch:
    threads: Any
    workgroup_size: tuple[Any, ...]
    json_path: str


@dataclass(frozen=True)
class Pass:
    id: str
    name: str
    shader: str
    source_inputs: Mapping[str, Any]
    bindings: tuple[Binding, ...]
    dispatch: Dispatch
    entry_point: str
    json_path: str


@dataclass(frozen=True)
class Scratch:
    """A variant's scratch buffer: device memory its passes bind by ``name`` (a binding's ``arg``),
    ``bytes`` long (an integer or an expression), never returned."""

    name: str
    bytes: Any
    description: str
    json_path: str


@dataclass(frozen=True)
class Variant:
    id: str
    priority: float
    when: tuple[Any, ...]
    constants: Mapping[str, Any]
    passes: tuple[Pass, ...]
    index: int
    json_path: str
    scratch: tuple[Scratch, ...] = ()


@dataclass(frozen=True)
class Manifest:
    domain: str
    name: str
    since_version: int
    description: str
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    # Read-only, each list and dict in them too (ReadOnlyList, ReadOnlyDict): get_kernel shares one
    # Kernel per op id, and a default changed in place had reached every caller, and only the calls
    # of shapes no plan was cached for yet.
    attributes: Mapping[str, Any]
    type_constraints: Mapping[str, tuple[str, ...]]
    tunables: Mapping[str, Any]
    constants: Mapping[str, Any]
    derive: Mapping[str, Any]
    variants: tuple[Variant, ...]
    raw: dict[str, Any] = field(repr=False)  # the decoded JSON, read-only (a ReadOnlyDict)

    @property
    def op_id(self) -> str:
        return f"{self.domain}.{self.name}"

    def variant(self, variant_id: str) -> Variant | None:
        return next((v for v in self.variants if v.id == variant_id), None)

    def shaders(self) -> frozenset[str]:
        """The templates the variants' passes name (each pass's shader)."""
        return frozenset(p.shader for v in self.variants for p in v.passes)

    def constant_names(self) -> set[str]:
        names = set(self.constants)
        for variant in self.variants:
            names.update(variant.constants)
        return names


@cache
def manifest_schema() -> dict[str, Any]:
    """The JSON Schema shipped with the package (``schemas/manifest.schema.json``)."""
    text = resources.files(__package__).joinpath("schemas/manifest.schema.json").read_text("utf-8")
    return json.loads(text)


@cache
def _validator() -> jsonschema.protocols.Validator:
    return schema_validator(manifest_schema())


def _too_large(data: Any) -> ManifestError | None:
    """The error for a manifest of more than :data:`MAX_MANIFEST_VALUES` values (counted without
    recursion, stopping at the bound) or :data:`MAX_EXPANDED_BINDINGS` bindings, before the schema
    spends seconds on it."""
    pending, count = [data], 0
    while pending:
        value = pending.pop()
        count += 1
        if count > MAX_MANIFEST_VALUES:
            return ManifestError(f"the manifest holds more than {MAX_MANIFEST_VALUES} JSON values (objects, arrays, "
                                 "strings, numbers); the format's limit keeps loading and validating it fast")  # fmt: skip
        if isinstance(value, dict):
            pending.extend(value.values())
        elif isinstance(value, list):
            pending.extend(value)
    bindings, heaviest = expanded_bindings(data)
    if bindings > MAX_EXPANDED_BINDINGS:
        return ManifestError(f"the passes hold {bindings} bindings and struct fields together, each bindingSets "
                             f"entry counted once for every pass that names it; the format allows at most "
                             f"{MAX_EXPANDED_BINDINGS}" + (f" (the largest share: {heaviest})" if heaviest else ""),
                             json_path="variants")  # fmt: skip
    return None


def expanded_bindings(data: Any) -> tuple[int, str]:
    """The bindings of every pass, ``bindingSets`` names expanded, plus their uniform structs'
    fields; and which shared set adds the most, in words ("" for none). Counted on the data as
    decoded, before the schema: what is not shaped as the schema wants counts as nothing (the
    schema reports it)."""
    if not isinstance(data, dict):
        return 0, ""
    sets = data.get("bindingSets")
    sizes = {name: _list_size(b) for name, b in sets.items()} if isinstance(sets, dict) else {}
    uses: dict[str, int] = {}
    total = 0
    variants = data.get("variants")
    for variant in variants if isinstance(variants, list) else ():
        passes = variant.get("passes") if isinstance(variant, dict) else None
        for pass_ in passes if isinstance(passes, list) else ():
            bindings = pass_.get("bindings") if isinstance(pass_, dict) else None
            if isinstance(bindings, str):
                uses[bindings] = uses.get(bindings, 0) + 1
                total += sizes.get(bindings, 0)
            else:
                total += _list_size(bindings)
    named = [(sizes[name] * count, name) for name, count in uses.items() if name in sizes]
    if not named:
        return total, ""
    _, name = max(named)
    return total, f"bindingSets.{shorten(name)} holds {sizes[name]}, named by {uses[name]} passes"


def _list_size(bindings: Any) -> int:
    """A binding list's bindings and their structs' fields."""
    if not isinstance(bindings, list):
        return 0
    size = len(bindings)
    for binding in bindings:
        struct = binding.get("struct") if isinstance(binding, dict) else None
        fields = struct.get("fields") if isinstance(struct, dict) else None
        size += len(fields) if isinstance(fields, list) else 0
    return size


def schema_errors(data: Any) -> list[ManifestError]:
    """Every schema violation, each with its JSON path, most specific first."""
    too_large = _too_large(data)
    if too_large is not None:
        return [too_large]
    errors = []
    try:
        found = sorted(_validator().iter_errors(data), key=lambda e: (list(e.absolute_path), e.message))
    except RecursionError:
        return [ManifestError("nested too deeply to validate")]
    for error in found:
        best = jsonschema.exceptions.best_match([error])
        # jsonschema quotes the whole offending value; a megabyte string makes a megabyte message.
        message = best.message if len(best.message) <= 300 else best.message[:300] + "..."
        # A field required by an if/then rule says why: "'struct' is a required property" alone
        # sends an author who mistyped the buffer type to add a field instead.
        if best.validator == "required" and "then" in best.relative_schema_path:
            why = best.schema.get("description") if isinstance(best.schema, dict) else None
            if why:
                message = f"{message}: {why}"
        errors.append(ManifestError(message, json_path=_json_path(best.absolute_path)))
    return errors


def without_unknown_fields(data: Any) -> Any | None:
    """A copy of ``data`` without the fields the schema does not know, when those are its only
    schema violations (else None): ``validate`` then checks everything else too, instead of one
    stray field hiding every expression and template problem behind it."""
    if _too_large(data) is not None:
        return None
    try:
        found = list(_validator().iter_errors(data))
    except RecursionError:
        return None
    if not found or any(e.validator != "additionalProperties" or "patternProperties" in e.schema for e in found):
        return None
    cleaned = copy.deepcopy(data)
    for error in found:
        node = cleaned
        for part in error.absolute_path:
            node = node[part]
        for key in set(node) - set(error.schema.get("properties", {})):
            del node[key]
    return cleaned if not schema_errors(cleaned) else None


def _json_path(parts: Any) -> str:
    path = ""
    for part in parts:
        path += f"[{part}]" if isinstance(part, int) else (f".{part}" if path else str(part))
    return path


_DOLLAR_REF = re.compile(r"^\$([A-Za-z_][A-Za-z0-9_]*)\Z")


def parse_manifest(data: Any, *, file: str | None = None) -> Manifest:
    """Validate ``data`` (the decoded manifest.json) and build the typed model.

    Raises the first :class:`ManifestError` found; :func:`check_manifest` returns all of them.
    """
    problems = check_manifest(data)
    if problems:
        first = problems[0]
        raise ManifestError(first.detail, json_path=first.json_path, file=file)
    return build_manifest(data)


def check_manifest(data: Any) -> list[ManifestError]:
    """Every problem with a manifest: schema violations, then broken references."""
    errors = schema_errors(data)
    if errors:
        return errors
    return reference_errors(data)


def reference_errors(data: dict[str, Any]) -> list[ManifestError]:
    """Broken references between the parts of a manifest that passes the schema."""
    errors: list[ManifestError] = []
    constraints = data.get("typeConstraints", {})
    args = data.get("args", {})
    roles = {"input": [t["role"] for t in data.get("inputs", [])], "output": [t["role"] for t in data.get("outputs", [])]}
    for kind in ("inputs", "outputs"):
        for i, spec in enumerate(data.get(kind, [])):
            if spec["dtype"] not in constraints:
                errors.append(ManifestError(f"type variable {spec['dtype']!r} has no entry in typeConstraints",
                                            json_path=f"{kind}[{i}].dtype"))  # fmt: skip
    bound_by_inputs = {spec["dtype"] for spec in data.get("inputs", []) if not spec.get("optional")}
    for i, spec in enumerate(data.get("outputs", [])):
        allowed = constraints.get(spec["dtype"])
        if allowed is not None and spec["dtype"] not in bound_by_inputs and len(allowed) != 1:
            errors.append(ManifestError(f"output {spec['role']!r} has type variable {spec['dtype']!r}, which no required "
                                        f"input binds: its typeConstraints entry must then list exactly one type, not "
                                        f"{list(allowed)}", json_path=f"outputs[{i}].dtype"))  # fmt: skip
    all_roles = roles["input"] + roles["output"]
    if len(set(all_roles)) != len(all_roles):
        errors.append(ManifestError("input and output roles must be unique", json_path="inputs"))
    for name, arg in args.items():
        if name not in roles[arg["role"]]:
            errors.append(ManifestError(f"arg {name!r} has role {arg['role']!r} but no such entry in {arg['role']}s",
                                        json_path=f"args.{name}"))  # fmt: skip
    binding_sets = data.get("bindingSets", {})
    top_constants = set(data.get("constants", {}))
    # An output no pass binds read-write is never written: the call would return whatever the
    # pooled buffer held. An optional one a variant leaves unbound is not returned; one it binds
    # only read-only would be returned unwritten.
    must_write = [t["role"] for t in data.get("outputs", []) if not t.get("optional")]
    optional_outputs = [t["role"] for t in data.get("outputs", []) if t.get("optional")]
    # Which variant declares each scratch name: a shared bindingSets entry naming another's is told so.
    scratch_owner: dict[str, str] = {}
    for variant in data["variants"]:
        for buffer in variant.get("scratch", []):
            scratch_owner.setdefault(buffer["name"], variant["id"])
    for v, variant in enumerate(data["variants"]):
        constants = top_constants | set(variant.get("constants", {}))
        scratch = [buffer["name"] for buffer in variant.get("scratch", [])]
        errors.extend(_scratch_name_errors(scratch, roles, f"variants[{v}]"))
        written: set[str] = set()
        bound: set[str] = set()
        read_only_at: dict[str, tuple[str, str]] = {}  # an output's first binding that is not 'storage', for the error below
        for p, pass_ in enumerate(variant["passes"]):
            where = f"variants[{v}].passes[{p}]"
            bindings = pass_.get("bindings", [])
            list_path, used_by = f"{where}.bindings", ""
            if isinstance(bindings, str):
                if bindings not in binding_sets:
                    errors.append(ManifestError(f"names bindingSets entry {bindings!r}, which does not exist",
                                                json_path=f"{where}.bindings"))  # fmt: skip
                    written.update(must_write)  # unknown bindings: the error above is the one to fix
                    continue
                # Errors point into the shared list, where the fix goes, and say which pass used it.
                list_path, used_by = f"bindingSets.{bindings}", f" (as used by {where})"
                bindings = binding_sets[bindings]
            names = [b["name"] for b in bindings]
            if len(set(names)) != len(names):
                errors.append(ManifestError(f"binding names must be unique{used_by}", json_path=list_path))
            for b, binding in enumerate(bindings):
                bpath = f"{list_path}[{b}]"
                bound.add(binding.get("arg"))
                if binding["buffer"]["type"] == "storage":
                    written.add(binding.get("arg"))
                else:
                    read_only_at.setdefault(binding.get("arg"), (bpath, f"{binding['buffer']['type']!r} here{used_by}"))
                if binding.get("arg") in scratch and binding["arg"] not in all_roles:
                    if binding.get("elementType") is None:  # no dtype to fall back on
                        errors.append(ManifestError(f"binding {binding['name']!r} binds scratch buffer "
                                                    f"{binding['arg']!r}, and a scratch buffer has no dtype: its "
                                                    f"binding needs an elementType (f32, u32, vec4<f32>, ...)"
                                                    f"{used_by}", json_path=bpath))  # fmt: skip
                elif binding.get("arg") is not None and binding["arg"] not in all_roles:
                    owner = scratch_owner.get(binding["arg"])
                    elsewhere = (f": it is a scratch buffer of variant {owner!r}, and a variant binds only the "
                                 f"scratch buffers it declares" if owner is not None else "")  # fmt: skip
                    errors.append(ManifestError(f"arg {binding['arg']!r} is not an input, output or scratch buffer "
                                                f"of this variant{used_by}{elsewhere}",
                                                json_path=f"{bpath}.arg"))  # fmt: skip
                    written.update(must_write)  # perhaps a misspelt output: this error says what to fix
                elif binding.get("arg") in roles["input"] and binding["buffer"]["type"] != "read-only-storage":
                    # A GpuTensor input is bound as it is: a read-write binding would let the kernel
                    # write into the caller's tensor.
                    errors.append(ManifestError(f"input {binding['arg']!r} must be bound as 'read-only-storage', not "
                                                f"{binding['buffer']['type']!r}{used_by}",
                                                json_path=f"{bpath}.buffer.type"))  # fmt: skip
                struct = binding.get("struct")
                fields = struct.get("fields", []) if isinstance(struct, dict) else []
                field_names = [field.get("name") for field in fields if isinstance(field, dict)]
                twice = next((n for i, n in enumerate(field_names) if field_names.index(n) != i), None)
                if twice is not None:  # the shader compiler's "redefinition" came only at the first call
                    errors.append(ManifestError(f"struct field names must be unique: {twice!r} is there twice"
                                                f"{used_by}", json_path=f"{bpath}.struct.fields"))  # fmt: skip
                refs = [(key, binding.get(key)) for key in ("elementType", "length")]
                refs += [(f"struct.fields[{f}].type", field.get("type")) for f, field in enumerate(fields)
                         if isinstance(field, dict)]  # fmt: skip
                for key, ref in refs:
                    match = _DOLLAR_REF.match(ref) if isinstance(ref, str) else None
                    if match and match.group(1) not in constants:
                        errors.append(ManifestError(f"{ref!r} names no constant of this variant{used_by}",
                                                    json_path=f"{bpath}.{key}"))  # fmt: skip
        for role in must_write:
            if role in read_only_at and role not in written:
                at, kind = read_only_at[role]
                errors.append(ManifestError(f"output {role!r} is bound as {kind}, and as 'storage' by none of "
                                            "this variant's passes, so nothing writes it: bind it as 'storage'",
                                            json_path=f"{at}.buffer.type"))  # fmt: skip
            elif role not in written:
                errors.append(ManifestError(f"output {role!r} is bound as 'storage' by none of this variant's passes, "
                                            "so nothing writes it", json_path=f"variants[{v}]"))  # fmt: skip
        for i, name in enumerate(scratch):
            # Nothing writing it, a pass would read what an earlier call left in the pooled buffer.
            if name in all_roles or scratch.index(name) != i:
                continue  # its name's error is the one to fix
            if name in read_only_at and name not in written:
                at, kind = read_only_at[name]
                errors.append(ManifestError(f"scratch buffer {name!r} is bound as {kind}, and as 'storage' by none "
                                            "of this variant's passes, so nothing writes it: bind it as 'storage' "
                                            "in the pass that fills it", json_path=f"{at}.buffer.type"))  # fmt: skip
            elif name not in bound:
                errors.append(ManifestError(f"scratch buffer {name!r} is bound by none of this variant's passes: "
                                            "bind it (\"arg\": its name) where it is used, or remove it",
                                            json_path=f"variants[{v}].scratch[{i}]"))  # fmt: skip
        for role in optional_outputs:
            if role in bound and role not in written:
                errors.append(ManifestError(f"optional output {role!r} is bound, but as 'storage' by none of this "
                                            "variant's passes: it would be returned unwritten. Bind it as 'storage' "
                                            "to produce it, or not at all to leave it out", json_path=f"variants[{v}]"))  # fmt: skip
    ids = [v["id"] for v in data["variants"]]
    for v, vid in enumerate(ids):
        if ids.index(vid) != v:
            errors.append(ManifestError(f"duplicate variant id {vid!r}", json_path=f"variants[{v}].id"))
    for v, variant in enumerate(data["variants"]):  # render() returns WGSL by pass id: one would hide another
        pass_ids = [p["id"] for p in variant["passes"]]
        for p, pid in enumerate(pass_ids):
            if pass_ids.index(pid) != p:
                errors.append(ManifestError(f"duplicate pass id {pid!r} in variant {variant['id']!r}",
                                            json_path=f"variants[{v}].passes[{p}].id"))  # fmt: skip
    return errors


def _scratch_name_errors(names: list[str], roles: Mapping[str, list[str]], path: str) -> list[ManifestError]:
    """A scratch name that another scratch buffer of the variant, or an input or output, also has:
    a binding's ``arg`` would not say which it binds."""
    errors = []
    for i, name in enumerate(names):
        where = f"{path}.scratch[{i}].name"
        for kind in ("input", "output"):
            if name in roles[kind]:
                errors.append(ManifestError(f"scratch buffer {name!r}: {name!r} is an {kind} of the op, and a "
                                            "binding's arg would not say which it binds: name it otherwise",
                                            json_path=where))  # fmt: skip
        if names.index(name) != i:
            errors.append(ManifestError(f"scratch buffer {name!r} is declared twice in this variant", json_path=where))
    return errors


def _integral(value: Any) -> Any:
    """A float the schema took as an integer (``2.0``), as the int; anything else as it is."""
    return int(value) if isinstance(value, float) and value.is_integer() else value


def build_manifest(data: dict[str, Any]) -> Manifest:
    # Everything below is built from a read-only copy: raw and the model share its lists (a list
    # default is raw's), and the caller's data stays its own.
    data = read_only(data)

    def tensor(spec: dict[str, Any], path: str) -> TensorSpec:
        return TensorSpec(
            # JSON Schema's integer takes 2.0: as a float it matched no rank check, and any rank passed
            role=spec["role"], dtype=spec["dtype"], rank=_integral(spec.get("rank")), shape=spec.get("shape"),
            optional=bool(spec.get("optional", False)), description=spec.get("description", ""), json_path=path,
        )  # fmt: skip

    binding_sets = data.get("bindingSets", {})
    variants = []
    for v, vdata in enumerate(data["variants"]):
        passes = []
        for p, pdata in enumerate(vdata["passes"]):
            ppath = f"variants[{v}].passes[{p}]"
            raw_bindings = pdata.get("bindings", [])
            bpath = ppath
            if isinstance(raw_bindings, str):
                bpath = f"bindingSets.{raw_bindings}"
                raw_bindings = binding_sets[raw_bindings]
            else:
                bpath = f"{ppath}.bindings"
            source = pdata.get("source", {})
            dispatch = pdata["dispatch"]
            wg = dispatch.get("workgroupSize", 64)
            passes.append(Pass(
                id=pdata["id"], name=pdata.get("name", pdata["id"]),
                shader=pdata.get("shader") or source["shader"],
                source_inputs=MappingProxyType(dict(source.get("inputs", {}))),
                bindings=tuple(_binding(b, f"{bpath}[{i}]") for i, b in enumerate(raw_bindings)),
                dispatch=Dispatch(threads=dispatch["threads"], workgroup_size=tuple(wg) if isinstance(wg, list) else (wg,),
                                  json_path=f"{ppath}.dispatch"),
                entry_point=pdata.get("entryPoint", "main"), json_path=ppath,
            ))  # fmt: skip
        variants.append(Variant(
            id=vdata["id"], priority=vdata.get("priority", 0), when=tuple(vdata.get("when", [])),
            constants=MappingProxyType(dict(vdata.get("constants", {}))), passes=tuple(passes), index=v, json_path=f"variants[{v}]",
            scratch=tuple(Scratch(name=b["name"], bytes=_integral(b["bytes"]), description=b.get("description", ""),
                                  json_path=f"variants[{v}].scratch[{i}]") for i, b in enumerate(vdata.get("scratch", []))),
        ))  # fmt: skip
    return Manifest(
        domain=data["domain"], name=data["name"], since_version=data.get("sinceVersion", 1),
        description=data.get("description", ""),
        inputs=tuple(tensor(t, f"inputs[{i}]") for i, t in enumerate(data.get("inputs", []))),
        outputs=tuple(tensor(t, f"outputs[{i}]") for i, t in enumerate(data.get("outputs", []))),
        attributes=MappingProxyType(dict(data.get("attributes", {}))),
        type_constraints=MappingProxyType({k: tuple(v) for k, v in data.get("typeConstraints", {}).items()}),
        tunables=MappingProxyType(dict(data.get("tunables", {}))),
        constants=MappingProxyType(dict(data.get("constants", {}))),
        derive=MappingProxyType(dict(data.get("derive", {}))), variants=tuple(variants), raw=data,
    )  # fmt: skip


def _binding(data: dict[str, Any], path: str) -> Binding:
    struct = data.get("struct")
    fields: tuple[StructField, ...] = ()
    if struct:
        fields = tuple(
            StructField(name=f["name"], type=f["type"], value=f["value"], json_path=f"{path}.struct.fields[{i}]")
            for i, f in enumerate(struct["fields"])
        )
    return Binding(
        name=data["name"], buffer_type=data["buffer"]["type"], arg=data.get("arg"), semantic=data.get("semantic"),
        element_type=data.get("elementType"), length=data.get("length"),
        struct_name=struct["name"] if struct else None, fields=fields, json_path=path,
    )  # fmt: skip
