"""A command's KERNEL argument and what it is called with: the kernel the argument names (an embedded
op id, a package folder, a Hub repository; --trust-remote-code), a PATH that must be a package
folder, and the inputs typed on the command line (-i NAME=DIMS:DTYPE, --attr, --tunable,
--generate; the dtype spellings -i and --dtype take).

numpy and the engine are imported where they are used, not here (tests/test_cli_start.py).
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit, urlunsplit

import click

from .errors import PackageError

if TYPE_CHECKING:
    from .call_inputs import TensorMeta
    from .hub import HubPackage
    from .kernel import Kernel


#: ``--input`` dtype spellings -> ONNX element type names. Types the kernels cannot take are
#: accepted here on purpose: the engine's contract check reports them.
DTYPE_ALIASES: dict[str, str] = {
    "f32": "float32", "float32": "float32", "float": "float32",
    "f16": "float16", "float16": "float16", "half": "float16",
    "f64": "float64", "float64": "float64", "double": "float64",
    "bf16": "bfloat16", "bfloat16": "bfloat16",
    "i8": "int8", "int8": "int8", "i16": "int16", "int16": "int16",
    "i32": "int32", "int32": "int32", "int": "int32", "i64": "int64", "int64": "int64",
    "u8": "uint8", "uint8": "uint8", "u16": "uint16", "uint16": "uint16",
    "u32": "uint32", "uint32": "uint32", "u64": "uint64", "uint64": "uint64",
    "bool": "bool",
}  # fmt: skip

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.\-]*\Z")


@dataclass(frozen=True)
class InputSpec:
    name: str
    shape: tuple[int, ...]
    dtype: str  # ONNX element type name
    #: How random data for it is drawn (--generate): bench.json's ``generate`` object; None: the default.
    generate: Mapping[str, Any] | None = None

    def meta(self) -> TensorMeta:
        from .call_inputs import TensorMeta

        return TensorMeta(self.shape, self.dtype)

    def text(self) -> str:
        return f"{self.name}={'x'.join(map(str, self.shape)) or 'scalar'}:{self.dtype}"


def parse_input_spec(spec: str) -> InputSpec:
    """``NAME=DIMS:DTYPE``: ``X=2x64x320:f16``; rank 0 as ``X=:f32`` or ``X=scalar:f32``."""
    name, eq, rest = spec.partition("=")
    name = name.strip()
    if not eq or not name:
        raise ValueError(f"{spec!r} is not NAME=DIMS:DTYPE (e.g. X=2x64x320:f16)")
    if not _NAME.match(name):
        raise ValueError(f"{name!r} is not an input name")
    dims, colon, dtype = rest.rpartition(":")
    if not colon:
        raise ValueError(f"{spec!r} has no dtype: write NAME=DIMS:DTYPE (e.g. {name}=2x64x320:f16)")
    _check_dtype_alias(dtype, f" in {spec!r}")
    dims = dims.strip().lower()
    shape: list[int] = []
    if dims not in ("", "scalar"):
        for part in dims.split("x"):
            part = part.strip()
            if not (part.isascii() and part.isdigit()):  # "²".isdigit() is true, and int() refuses it
                raise ValueError(f"bad dimension {part!r} in {spec!r}: dims are non-negative integers joined by 'x'")
            shape.append(int(part))
    return InputSpec(name, tuple(shape), DTYPE_ALIASES[dtype.strip().lower()])


#: --generate's distributions: the names of their two parameters, as bench.json's ``generate`` has them.
_DISTRIBUTIONS = {"uniform": ("low", "high"), "normal": ("mean", "std")}


def parse_generate_spec(spec: str) -> tuple[str, dict[str, Any]]:
    """``NAME=uniform:LOW:HIGH`` or ``NAME=normal:MEAN:STD``: the input's name and bench.json's
    ``generate`` object for it (``{"distribution": "uniform", "low": 0.0, "high": 49407.0}``)."""
    name, eq, rest = spec.partition("=")
    name = name.strip()
    if not eq or not name:
        raise ValueError(f"{spec!r} is not NAME=uniform:LOW:HIGH or NAME=normal:MEAN:STD")
    distribution, *numbers = (part.strip() for part in rest.split(":"))
    params = _DISTRIBUTIONS.get(distribution.lower())
    if params is None or len(numbers) != 2:
        raise ValueError(f"{spec!r}: write {name}=uniform:LOW:HIGH or {name}=normal:MEAN:STD")
    values = []
    for param, text in zip(params, numbers, strict=True):
        try:
            value = float(text)
        except ValueError:
            value = math.nan
        if not math.isfinite(value):
            raise ValueError(f"{param} in {spec!r} must be a finite number, got {text!r}")
        values.append(value)
    if distribution.lower() == "normal" and values[1] < 0:
        raise ValueError(f"std in {spec!r} must be at least 0, got {numbers[1]!r}")
    generate = {"distribution": distribution.lower(), **dict(zip(params, values, strict=True))}
    from .case_format import generate_errors

    problems = generate_errors(generate, "--generate", name)  # as bench.json's `generate` is checked
    if problems:
        raise ValueError(f"{spec!r}: {problems[0].detail}")
    return name, generate


def _generate_callback(ctx: click.Context, param: click.Parameter, values: tuple[str, ...]) -> dict[str, dict[str, Any]]:
    return options_by_name(ctx, param, values, parse_generate_spec, "input {!r} given twice")


GENERATE_OPTION = click.option(
    "--generate", "generators", multiple=True, metavar="NAME=DIST:A:B", callback=_generate_callback,
    help="Draw -i input NAME from uniform:LOW:HIGH or normal:MEAN:STD (rounded to its dtype) instead of the "
         "standard normal: integer inputs that index something need their range. Repeatable.")  # fmt: skip


def with_generators(inputs: Mapping[str, InputSpec], generators: Mapping[str, dict[str, Any]]) -> dict[str, InputSpec]:
    """``inputs`` with --generate's distributions attached; one for an input no -i gives is refused."""
    unknown = sorted(set(generators) - set(inputs))
    if unknown:
        given = ", ".join(inputs) or "none"
        raise click.UsageError(f"--generate names {', '.join(map(repr, unknown))}, which no -i/--input gives "
                               f"(-i inputs: {given})")  # fmt: skip
    return {name: replace(spec, generate=generators.get(name)) for name, spec in inputs.items()}


def parse_value(text: str) -> Any:
    """A JSON value (``1.0``, ``3``, ``true``, ``"s"``, ``[1, 2]``), ``nan``/``inf``/``-inf`` (the
    case files' spellings, as JSON's NaN and Infinity), else the text as a string."""
    from .case_data import SPECIAL_STRINGS

    if text.lower() in SPECIAL_STRINGS:
        return SPECIAL_STRINGS[text.lower()]
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def parse_assignment(text: str) -> tuple[str, Any]:
    name, eq, value = text.partition("=")
    name = name.strip()
    if not eq or not name:
        raise ValueError(f"{text!r} is not NAME=VALUE")
    return name, parse_value(value.strip())


def options_by_name(ctx: click.Context, param: click.Parameter, values: tuple[str, ...],
             parse: Callable[[str], tuple[str, Any]], twice: str) -> dict[str, Any]:  # fmt: skip
    """A repeatable NAME=... option's values parsed by name, each ValueError as the option's usage
    error; a name given twice is refused (``twice`` formats it)."""
    items: dict[str, Any] = {}
    for value in values:
        try:
            name, item = parse(value)
        except ValueError as exc:
            raise click.BadParameter(str(exc), ctx=ctx, param=param) from None
        if name in items:
            raise click.BadParameter(twice.format(name), ctx=ctx, param=param)
        items[name] = item
    return items


def inputs_callback(ctx: click.Context, param: click.Parameter, values: tuple[str, ...]) -> dict[str, InputSpec]:
    def parse(value: str) -> tuple[str, InputSpec]:
        spec = parse_input_spec(value)
        return spec.name, spec

    return options_by_name(ctx, param, values, parse, "input {!r} given twice")


def assignments_callback(ctx: click.Context, param: click.Parameter, values: tuple[str, ...]) -> dict[str, Any]:
    return options_by_name(ctx, param, values, parse_assignment, "{!r} given twice")


@dataclass(frozen=True)
class KernelRef:
    """What a KERNEL argument names: an embedded op id, a package folder, or a Hub repository
    (``pin`` is what followed ``@``: ``v2``, a revision, or ``""``)."""

    kind: str  # "embedded" | "folder" | "hub" | "unknown"
    path: Path  # the argument read as a path (the package folder when kind is "folder")
    repo: str = ""
    pin: str = ""


def classify_kernel_ref(ref: str) -> KernelRef:
    """The one rule every command uses to read a KERNEL argument. An embedded id that is also a
    package folder in the working directory is refused as ambiguous (``./id`` names the folder):
    either reading substitutes one package for the other without a word, a copy being edited for
    the shipped kernel, or the shipped kernel for the package a CI script checks (it had passed a
    broken copy). Anything that exists, or starts like a path, is a folder; else
    ``org/op[@pin]`` is a Hub repository."""
    try:
        path = Path(ref).expanduser()
    except RuntimeError:  # ~nosuchuser: no home to expand, so no such folder (it had been a traceback)
        path = Path(ref)
    from .package import embedded_ids, embedded_root

    if ref in embedded_ids():
        if (path / "manifest.json").exists() and path.resolve() != (embedded_root() / ref).resolve():
            raise click.UsageError(f"{ref!r} names both the embedded kernel and the package folder ./{ref} here: "
                                   f"write ./{ref} for the folder, or run from another directory for the "
                                   "embedded kernel")  # fmt: skip
        return KernelRef("embedded", path)
    if _exists(path) or ref.startswith((".", "/", "~")) or os.sep in ref and os.sep != "/":
        return KernelRef("folder", path)
    if "/" in ref:
        repo, pin = split_pin(ref)
        if repo.count("/") >= 2 and not re.match(r"[A-Za-z][A-Za-z0-9+.\-]+:", repo):
            return KernelRef("folder", path)  # a repository id has one slash: `a/b/c` is a path (locations.classify)
        return KernelRef("hub", path, repo=repo, pin=pin)
    return KernelRef("unknown", path)


def _exists(path: Path, *, denied: bool = True) -> bool:
    """Whether something is at ``path``; not where no file can be: a name too long, a NUL byte
    (their OSError and ValueError had been tracebacks). Where a folder on the way is one this user
    may not search, ``denied``: by default taken as there, so that opening it says so (a local
    ``org/op`` had been read as a Hub repository)."""
    try:
        return path.exists()
    except PermissionError:
        return denied
    except (OSError, ValueError):
        return False


class FolderPath(click.ParamType):
    """A PATH argument that must name an existing folder: refused as a KERNEL argument is
    (``error: ./nope: no such folder``, exit 2), not in click's words. Converts to a Path."""

    name = "path"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Path:
        return kernel_folder(os.fspath(value))  # `org/op/` asks about the Hub id here too


FOLDER = FolderPath()


def split_pin(ref: str) -> tuple[str, str]:
    """``org/op@pin`` as (``org/op``, ``pin``); ``""`` where no @ follows. In a URL only its path's @
    counts: the first @ of https://user:token@host/kernels/org/op had cut it into the repository
    'https://user:token', which every message then showed."""
    if "://" in ref:
        url = urlsplit(ref)
        if "@" not in url.path:
            return ref, ""
        path, _, pin = url.path.partition("@")
        return urlunsplit(url._replace(path=path)), pin
    repo, _, pin = ref.partition("@")
    return repo, pin


def _hub_repo(ref: str) -> bool:
    """Whether get_kernel reads ``ref`` as a Hub repository (``org/op``). A folder of that name here
    had silently stood in for it, unverified and without the trust another organisation needs
   ."""
    from .locations import classify

    try:
        return classify(ref).kind == "hub"
    except PackageError:
        return False


def kernel_folder(ref: str) -> Path:
    """:func:`check_folder` of a KERNEL argument read as a folder, for every command alike (validate
    too): ``org/op/`` (a browser's URL path) where nothing is asks whether the Hub repository was
    meant; it stays a path by the two-slash rule, so no disk state decides Hub vs folder."""
    from .locations import refuse_slashed_repo_id
    from .package import check_folder

    refuse_slashed_repo_id(ref)
    return check_folder(ref)


def resolve_kernel(ref: str) -> Kernel:
    """The kernel a KERNEL argument names (:func:`classify_kernel_ref`); a Hub repository is
    contract version 1 unless ``@vN`` or ``@REVISION`` follows."""
    from .api import get_kernel, load_kernel

    where = classify_kernel_ref(ref)
    # The repository part decides: `org/op@v1` as a folder's name had loaded that folder, unverified,
    # where the user asked for the Hub's (classify refuses the pinned string whole).
    if where.kind == "folder" and _exists(where.path / "manifest.json", denied=False) and _hub_repo(split_pin(ref)[0]):
        # as for an embedded id; commands that take only a folder (validate, digest) read it
        # "names a Hub repository" had read as if one had been found: the Hub is not asked
        raise click.UsageError(f"{ref!r} reads both as a Hub repository id (org/op) and as the package folder ./{ref} "
                               f"here: write ./{ref} for the folder, or run from another directory for the Hub "
                               "repository")  # fmt: skip
    if where.kind == "folder":
        kernel_folder(ref)
        return load_kernel(ref)  # the argument as typed: a refusal names ./x, which Path drops
    if where.kind == "hub":
        try:
            return _from_hub(where)
        except PackageError as exc:
            # `tests/demo.Gathr` (a typo) reads as a Hub repository because it does not exist here;
            # the trust refusal alone had advised --trust-remote-code, which fetches it from the Hub.
            first = where.repo.split("/")[0]
            if Path(first).expanduser().is_dir():  # the folder is the repository part: a ./ path takes no @pin
                exc.add_note(f"note: there is no folder {where.repo!r} here (a folder {first!r} is); "
                             f"to name a local package folder, write ./{where.repo}")  # fmt: skip
            raise
    return get_kernel(ref)  # embedded, or the library's "no embedded kernel" error


def kernel_source(kernel: Kernel) -> dict[str, Any]:
    """Where a kernel came from, what reproducing its result needs: ``origin`` (``embedded``,
    ``local`` or ``hub``) and ``path``, as ``info`` names them, and for a Hub kernel
    :func:`hub_source`'s keys (its repository, revision and commit)."""
    from .hub import HubPackage

    package = kernel.package
    source: dict[str, Any] = {"origin": package.origin, "path": str(package.root)}
    if isinstance(package, HubPackage):
        source.update(hub_source(package))
    return source


def hub_source(package: HubPackage) -> dict[str, Any]:
    """A Hub package's repository, the revision asked, the commit it resolved to, the endpoint and
    whether (and why) the Hugging Face cache served it: ``download --json``'s keys."""
    from .hub_cache import DEFAULT_ENDPOINT

    return {"repo": package.repo_id, "revision": package.revision, "commit": package.commit,
            "endpoint": package.endpoint or DEFAULT_ENDPOINT, "fromCache": package.from_cache,
            "fromCacheReason": package.from_cache_reason}  # fmt: skip


def served_from(source: Mapping[str, Any]) -> str:
    """Where :func:`hub_source`'s package was served from: its endpoint, or ``the Hugging Face
    cache: WHY`` (a revoked token had read as "could not be reached")."""
    if not source["fromCache"]:
        return str(source["endpoint"])
    return f"the Hugging Face cache: {source['fromCacheReason'] or source['endpoint'] + ' was not used'}"


def source_text(source: Mapping[str, Any]) -> str:
    """:func:`kernel_source` in ``download``'s words: ``org/op @ v1 -> commit SHA (from ENDPOINT)``;
    else ``embedded``, or ``local package PATH``."""
    if "repo" in source:
        return f"{source['repo']} @ {source['revision']} -> commit {source['commit']} (from {served_from(source)})"
    return "embedded" if source["origin"] == "embedded" else f"{source['origin']} package {source['path']}"


def hub_pin(pin: str) -> tuple[int | None, str | None]:
    """(version, revision) of the ``pin`` after a Hub KERNEL argument's @: ``vN`` is contract version N, another
    a revision, none version 1. (ASCII digits only: ``"v²"[1:].isdigit()`` is true, and int() of it
    raised a ValueError.)"""
    if not pin:
        return 1, None
    match = re.fullmatch(r"v([0-9]+)", pin)
    return (int(match[1]), None) if match else (None, pin)


def _from_hub(where: KernelRef) -> Kernel:
    from .api import get_kernel

    version, revision = hub_pin(where.pin)
    return get_kernel(where.repo, version=version, revision=revision, trust_remote_code=trusting())


def trusting() -> bool:
    """Whether the command line says --trust-remote-code (before the command)."""
    ctx = click.get_current_context(silent=True)
    return bool(ctx and ctx.find_root().params.get("trust_remote_code"))


def _trust_after_the_command(ctx: click.Context, param: click.Parameter, value: bool) -> bool:
    if value:
        ctx.find_root().params["trust_remote_code"] = True  # what trusting() reads
    return value


def dtypes_callback(ctx: Any, param: Any, values: tuple[str, ...]) -> tuple[str, ...]:
    """bench's and tune's --dtype, in -i's spellings: a typo (`fp16`) had matched no case, and the
    error blamed the filters as a whole."""
    for value in values:
        try:
            _check_dtype_alias(value)
        except ValueError as exc:
            raise click.BadParameter(str(exc), ctx, param) from None
    return values


def _check_dtype_alias(dtype: str, where: str = "") -> None:
    """Refuse a dtype the command line does not spell (-i's :f16, --dtype f16), naming the known ones."""
    if dtype.strip().lower() not in DTYPE_ALIASES:
        raise ValueError(f"unknown dtype {dtype.strip()!r}{where} (known: {', '.join(sorted(set(DTYPE_ALIASES)))})")


def trust_option(fn: Any) -> Any:
    """``--trust-remote-code`` after a KERNEL command too, as ``download`` takes it: it had been
    "No such option" there, with nothing saying it goes before the command."""
    return click.option("--trust-remote-code", is_flag=True, expose_value=False, callback=_trust_after_the_command,
                        help="Allow a Hub repository outside the webgpu-kernels organisation (or given by URL) "
                             "as KERNEL (also accepted before the command).")(fn)  # fmt: skip


def input_options(fn: Any) -> Any:
    fn = click.option("--tunable", "tunables", multiple=True, metavar="NAME=VALUE", callback=assignments_callback,
                      help="Override a tunable (value parsed as JSON, else a string). Repeatable.")(fn)  # fmt: skip
    fn = click.option("--attr", "attrs", multiple=True, metavar="NAME=VALUE", callback=assignments_callback,
                      help="Set an attribute (value parsed as JSON, else a string). Repeatable.")(fn)  # fmt: skip
    fn = click.option("--input", "-i", "inputs", multiple=True, metavar="NAME=DIMS:DTYPE", callback=inputs_callback,
                      help="An input tensor: dims joined by 'x', dtype f32/f16/... "
                           "(X=2x64x320:f16; rank 0: X=:f32 or X=scalar:f32). Repeatable.")(fn)  # fmt: skip
    fn = click.argument("kernel")(fn)
    return fn
