"""``new PATH --op DOMAIN.NAME``: a kernel author's first package, in one command; ``expect PATH
--reference FILE.py:FUNCTION``: its test.json's expected values written again (registered by cli.py).

The package is written from the files under ``scaffold/`` (package data): an elementwise op
``Y = 2 * X`` for float32 and float16, one variant, a WORKGROUP_SIZE tunable, a uniform struct
holding the element count; test.json's cases get their expected values here, from the inputs
``webgpu-kernels test`` builds; metadata.json is written by ``digest``'s own code. The result
passes ``validate`` and ``test`` as it is, and the author grows it from there.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import re
import shutil
import sys
import traceback
from importlib import resources
from pathlib import Path
from typing import Any

import click
import numpy as np

from .api import list_kernels, load_kernel
from .case_format import TEST_FILE
from .casefile import parse_test_file
from .command_output import shell_word
from .digests import METADATA_FILE, write_metadata
from .errors import KernelError, PackageError
from .expected import (
    INLINE_HINT_VALUES,
    ReferenceFailed,
    check_package_size,
    check_test_file_size,
    dumps,
    indent_of,
    largest_inline_entry,
    write_expected,
)
from .json_schema import validator
from .kernel_arguments import FOLDER
from .locations import classify
from .manifest import manifest_schema
from .portability import windows_problem
from .reading import decode_json
from .references import onnx_op_version
from .replacing import replace_files

#: The scaffold's template, written to the package as ``<the op's name, kebab-case>.wgsl.jinja``.
SCAFFOLD_TEMPLATE = "kernel.wgsl.jinja"
#: The scaffold's files copied as they are, and those the command fills in.
_COPIED = ("bench.json",)


def _reference(inputs: dict[str, np.ndarray], attrs: dict[str, Any]) -> dict[str, np.ndarray]:
    """What scaffold/kernel.wgsl.jinja computes, in float64 (change the two together)."""
    return {"Y": 2.0 * inputs["X"]}


def split_op_id(op_id: str) -> tuple[str, str]:
    """``DOMAIN.NAME`` -> (domain, name), each as the manifest schema takes it; ValueError says why not."""
    domain, dot, name = op_id.rpartition(".")
    if not dot or not domain:
        raise ValueError(f"an op id DOMAIN.NAME (com.example.MyOp), not {op_id!r}: it has no domain")
    properties = manifest_schema()["properties"]
    for part, key in ((domain, "domain"), (name, "name")):
        if not validator(properties[key]).is_valid(part):
            raise ValueError(f"an op id DOMAIN.NAME (com.example.MyOp), not {op_id!r}: its {key} {part!r} is not "
                             f"one the manifest takes (pattern {properties[key]['pattern']!r})")  # fmt: skip
    return domain, name


def template_name(name: str) -> str:
    """The template's file name: ``MyOp`` -> ``my-op.wgsl.jinja``, as the shipped packages name theirs;
    an acronym is a word (``RMSNorm`` -> ``rms-norm``), a digit and a capital after it one (``Conv2D``
    -> ``conv2d``, ``Conv2DTranspose`` -> ``conv2d-transpose``); ``Con`` -> ``con-op.wgsl.jinja``:
    ``con.wgsl.jinja`` is the device CON to Windows, which validate refuses."""
    # a hyphen before a capital that follows a small letter, or that starts a capitalised word
    # after a capital or a digit (the N of RMSNorm, the T of Conv2DTranspose)
    stem = re.sub(r"(?<=[a-z])(?=[A-Z])|(?<=[A-Z0-9])(?=[A-Z][a-z])", "-", name).lower()
    if windows_problem(stem):
        stem += "-op"
    return stem + ".wgsl.jinja"


def _scaffold(name: str) -> bytes:
    return resources.files(__package__).joinpath("scaffold", name).read_bytes()


def write_package(root: Path, op_id: str) -> list[str]:
    """Write the scaffold package for ``op_id`` into the folder ``root`` (made if missing, else
    empty); returns the names written. ``op_id`` must pass :func:`split_op_id`. An op onnx's
    operator schemas know gets its newest version as sinceVersion, the opset `run` compares it at
    in onnxruntime (1 had been an opset without ai.onnx's Gelu); metadata.json's contract version is 1."""
    domain, name = split_op_id(op_id)
    template = template_name(name)
    manifest = json.loads(_scaffold("manifest.json"))
    manifest["domain"], manifest["name"] = domain, name
    known = onnx_op_version(op_id)
    if known is not None:
        manifest["sinceVersion"] = known[0]
    for variant in manifest["variants"]:
        for pass_ in variant["passes"]:
            pass_["name"] = f"{name}.{variant['id']}"
            pass_["shader"] = template
    root.mkdir(parents=True, exist_ok=True)
    (root / "manifest.json").write_text(dumps(manifest) + "\n", "utf-8")
    (root / template).write_bytes(_scaffold(SCAFFOLD_TEMPLATE))
    for file in _COPIED:
        (root / file).write_bytes(_scaffold(file))
    # The expected outputs from the inputs exactly as `test` builds them (the generator's draws,
    # rounded to the case's dtype), through the package just written: its manifest binds T.
    tests = json.loads(_scaffold("test.json"))
    # (no device is needed here: the shapes are the inputs', as the reference computes them)
    write_expected(load_kernel(root, verify_digests=False), tests["cases"], _reference, check_shapes=False)
    (root / "test.json").write_text(dumps(tests) + "\n", "utf-8")
    write_metadata(root, version=1)  # a first contract, whatever sinceVersion (package-files.md)
    return ["manifest.json", template, "test.json", *_COPIED, METADATA_FILE]


def wrote_line(root: Path, op_id: str, written: list[str]) -> str:
    """What ``new`` says it wrote: the folder (with a trailing separator, so it reads as one) and its
    files; the op id only where the folder is not named after it ("wrote X in X" had said it twice)."""
    folder = str(root) + ("" if str(root).endswith(os.sep) else os.sep)
    files = f"({', '.join(written)})"
    if root.resolve().name == op_id:
        return f"wrote {folder} {files}"
    return f"wrote {op_id} in {folder} {files}"


def _op_option(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    if value is not None:
        try:
            split_op_id(value)
        except ValueError as exc:
            raise click.BadParameter(f"expected {exc}", ctx=ctx, param=param) from None
    return value


def _folder_argument(path: Path) -> str:
    """PATH as a KERNEL argument that names the folder: a bare embedded op id or ``org/op`` there
    names the embedded kernel or Hub repository too, which the commands refuse as ambiguous."""
    shown = str(path)
    if not path.is_absolute() and not shown.startswith((".", "~")):
        try:
            kind = classify(shown).kind
        except PackageError:  # no Hub repository id: a folder name
            kind = "path"
        if kind == "hub" or (kind == "embedded" and shown in list_kernels()):
            shown = f".{os.sep}{shown}"
    return shell_word(shown)



@click.command("new")
@click.argument("path", type=click.Path(file_okay=False, path_type=Path))
@click.option("--op", "op_id", metavar="DOMAIN.NAME", callback=_op_option,
              help="The op id (com.example.MyOp). Default: PATH's folder name, when it is one.")  # fmt: skip
def new_cmd(path: Path, op_id: str | None) -> None:
    """Write a new kernel package in PATH (a new or empty folder) to start from.

    An elementwise op Y = 2 * X for float32 and float16: manifest.json (one variant, a
    WORKGROUP_SIZE tunable, a uniform struct with the element count), its WGSL template,
    test.json (cases with their expected values), bench.json and metadata.json. It passes
    `validate` and `test` as written; change the template and the manifest, write the expected
    values again from your own reference with `expect`, then `validate` and `test` it.
    """
    ctx = click.get_current_context()
    param = next(p for p in ctx.command.params if p.name == "path")
    root = path.expanduser()
    # click checked PATH as written: a quoted '~' reaches another path, and a link to nothing is no folder
    if root.is_symlink() and not root.exists():
        raise click.BadParameter(f"expected a new or empty folder, got {str(path)!r}, a symbolic link to nothing "
                                 f"({os.readlink(root)!r})", ctx=ctx, param=param)  # fmt: skip
    if root.exists() and not root.is_dir():
        raise click.BadParameter(f"expected a new or empty folder, got {str(path)!r}, which is a file",
                                 ctx=ctx, param=param)  # fmt: skip
    if root.exists():
        entries = sorted(p.name for p in root.iterdir())
        if entries:
            shown = ", ".join(entries[:3]) + (", ..." if len(entries) > 3 else "")
            raise click.BadParameter(f"expected a new or empty folder, got {str(path)!r}, which holds "
                                     f"{len(entries)} entr{'y' if len(entries) == 1 else 'ies'} ({shown})",
                                     ctx=ctx, param=param)  # fmt: skip
    if op_id is None:
        folder = root.resolve().name
        try:
            split_op_id(folder)
        except ValueError:
            raise click.UsageError(f"--op DOMAIN.NAME is needed: the folder name {folder!r} is not an op id "
                                   "to take it from", ctx=ctx) from None  # fmt: skip
        op_id = folder
    # The outermost folder this command makes (PATH or a missing parent), which a failure removes
    made = next((p for p in reversed([root.absolute(), *root.absolute().parents]) if not p.exists()), None)
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as exc:  # below a file, or in a folder this user cannot write to
        raise click.BadParameter(f"expected a new or empty folder, got {str(path)!r}, which cannot be made "
                                 f"({exc.strerror})", ctx=ctx, param=param) from None  # fmt: skip
    try:
        written = write_package(root, op_id)
    except BaseException:
        # Nothing half-written is left behind: a second try then finds the folder as it was.
        if made is not None:  # with the parents it made, which had been left behind
            shutil.rmtree(made, ignore_errors=True)
        else:
            for child in root.iterdir():
                if child.is_dir():
                    shutil.rmtree(child)
                else:
                    child.unlink()
        raise
    shown = _folder_argument(path)
    if op_id in list_kernels():
        # Not refused: the op id is the op a package implements, and a reimplementation of a shipped
        # op (tested beside the original) is one an author may mean to write.
        click.echo(f"note: {op_id} is also the op id of an embedded kernel: a bare {op_id} still names that "
                   f"kernel (get_kernel, the commands), refused as ambiguous where a folder of that name is "
                   f"in the working directory; name this package by its path ({shown}, load_kernel), or pick "
                   "another op id with --op if you did not mean to implement that op", err=True)  # fmt: skip
    click.echo(wrote_line(root, op_id, written))
    known = onnx_op_version(op_id)
    if known is not None:
        domain, name = split_op_id(op_id)
        click.echo(f"sinceVersion {known[0]}: the newest version of {domain} {name} in onnx {known[1]}'s operator "
                   "schemas, the opset `run` compares it at in onnxruntime (set the version the package mirrors; "
                   "metadata.json's contract version is 1, a first contract)")  # fmt: skip
    click.echo(f"next: webgpu-kernels validate {shown} && webgpu-kernels test {shown}")



# --- expect -----------------------------------------------------------------------------------------


def _import_reference(ctx: click.Context, param: click.Parameter, value: str) -> tuple[str, Any]:
    """``FILE.py:FUNCTION`` -> (its label, the function), importing FILE (the author's own code)."""
    file, colon, function = value.rpartition(":")
    if not colon or not file or not function.isidentifier():
        raise click.BadParameter(f"expected FILE.py:FUNCTION (ref.py:swish), got {value!r}", ctx=ctx, param=param)
    path = Path(file).expanduser()
    if not path.is_file():
        raise click.BadParameter(f"expected FILE.py:FUNCTION, got {value!r}: no file {file!r}", ctx=ctx, param=param)
    spec = importlib.util.spec_from_file_location(f"_webgpu_kernels_reference_{path.stem}", path)
    if spec is None or spec.loader is None:
        raise click.BadParameter(f"expected FILE.py:FUNCTION, got {value!r}: {file!r} is no Python file",
                                 ctx=ctx, param=param)  # fmt: skip
    module = importlib.util.module_from_spec(spec)
    # As `python FILE` runs it: FILE's folder first on sys.path, so that the modules beside it (a
    # tests folder's helpers) import. Kept there while the command runs (the function may import
    # more when it is called), then taken off: a process running commands in turn (tests) keeps none.
    folder = str(path.resolve().parent)
    if folder not in sys.path:
        sys.path.insert(0, folder)
        ctx.call_on_close(lambda: sys.path.remove(folder) if folder in sys.path else None)
    try:
        spec.loader.exec_module(module)
    except Exception as exc:  # the author's code: their traceback, then exit 1
        traceback.print_exc()
        click.echo(f"error: importing {file} raised {type(exc).__name__}: {exc}", err=True)
        ctx.exit(1)
    found = getattr(module, function, None)
    if not callable(found):
        names = sorted(n for n, v in vars(module).items() if callable(v) and not n.startswith("_")
                       and getattr(v, "__module__", None) == module.__name__)  # fmt: skip
        raise click.BadParameter(f"expected FILE.py:FUNCTION, got {value!r}: {file} has no function {function!r}"
                                 + (f" (its functions: {', '.join(names)})" if names else ""),
                                 ctx=ctx, param=param)  # fmt: skip
    return value, found


def _make_folders(root: Path, names: list[str]) -> list[Path]:
    """The folders of the package-relative ``names`` that are missing, made, outermost first
    (write_expected checked that none of their names' folders is a link or a file)."""
    made: list[Path] = []
    try:
        for name in names:
            folder = root
            for part in name.split("/")[:-1]:
                folder = folder / part
                if not folder.is_dir():
                    folder.mkdir()
                    made.append(folder)
    except BaseException:
        _remove_folders(made)
        raise
    return made


def _remove_folders(made: list[Path]) -> None:
    """Undo :func:`_make_folders` (innermost first; one something else wrote into stays)."""
    for folder in reversed(made):
        with contextlib.suppress(OSError):
            folder.rmdir()


@click.command("expect")
@click.argument("path", type=FOLDER)
@click.option("--reference", "reference", required=True, metavar="FILE.py:FUNCTION", callback=_import_reference,
              help="Your float64 reference: FILE is imported (its code runs) and FUNCTION(inputs, attrs) "
                   "must return a dict of output arrays.")  # fmt: skip
@click.pass_context
def expect_cmd(ctx: click.Context, path: Path, reference: tuple[str, Any]) -> None:
    """Write the expected values of PATH's test.json again, from your own reference.

    FILE.py is imported, running its code, as python would. For each case, FUNCTION(inputs, attrs)
    gets the case's inputs exactly as `test` builds them (float ones as float64, others as they
    are) and its attributes over the manifest's defaults, and returns {output: array}: every
    required output, any optional one (one the case lists too). Each output the case lists,
    rounded once to its dtype, is written as its `expected` entry: inline, or into the data file
    the entry names (other arrays of the file kept; one not yet there is created, its folders too).
    Cases expecting a refusal are left alone.
    Nothing is written until every case succeeded; metadata.json is then refreshed as `digest`
    does (a missing one written at contract version 1, as `new` writes it). Exit 1 if FUNCTION raises, 2 if it returns anything but the outputs in their shapes.
    """
    label, function = reference
    root = path.expanduser().resolve()
    # The manifest or a template changed since metadata.json was written: that is why one runs this.
    kernel = load_kernel(root, verify_digests=False)
    try:
        original = kernel.package.read_bytes(TEST_FILE)
        doc = decode_json(original)
    except (KernelError, ValueError) as exc:
        raise PackageError(f"{TEST_FILE} cannot be read: {exc}", path=str(root / TEST_FILE)) from None
    # Refuses a test.json that `test` would refuse, naming where, but for cases with neither
    # expected nor refused: those this command is for (a case the author added, its inputs only).
    parse_test_file(doc, file=str(root / TEST_FILE), drafts=True, manifest=kernel.manifest)
    try:
        written = write_expected(kernel, doc["cases"], function, name=label, file=str(root / TEST_FILE))
    except ReferenceFailed as exc:
        traceback.print_exception(exc.__cause__)
        click.echo(f"error: {exc}: {type(exc.__cause__).__name__}: {exc.__cause__}; nothing was written", err=True)
        ctx.exit(1)
    target = root / TEST_FILE
    text = dumps(doc, step=indent_of(original.decode("utf-8", "replace"))) + "\n"  # the author's indent kept
    check_test_file_size(doc["cases"], text)  # before any file is written
    check_package_size(kernel, written, text)
    made: list[Path] = []
    try:
        made = _make_folders(root, written.created)
        # The data files and test.json are all written before any replaces its old one.
        replace_files({**{kernel.package.path_of(name): data for name, data in written.files.items()},
                       target: text})  # fmt: skip
    except BaseException as exc:
        _remove_folders(made)  # a new file's folders go with it: the package as it was
        if isinstance(exc, OSError):  # a folder that cannot be made
            where = f" {exc.filename}" if exc.filename else ""
            raise click.ClickException(f"cannot write{where}: {exc.strerror or exc}; nothing was written") from None
        if isinstance(exc, PackageError) and isinstance(exc.__cause__, OSError):  # a full disk, a folder in the way
            raise click.ClickException(str(exc)) from None  # replace_files put back what it had replaced
        raise
    # A first metadata.json is a first contract, version 1, as `new` writes it: digest's fallback,
    # sinceVersion (17 for an opset-17 op), had been taken silently.
    first = not (root / METADATA_FILE).is_file()
    write_metadata(root, version=1 if first else None)
    refused = sum(1 for case in doc["cases"] if "refused" in case)
    count, files = written.count, len(written.files)
    new = f" ({len(written.created)} new: {', '.join(written.created)})" if written.created else ""
    click.echo(f"{count} case{'' if count == 1 else 's'} written, {refused} refusal case{'' if refused == 1 else 's'} "
               f"left: {target}" + (f", {files} data file{'' if files == 1 else 's'} written{new}" if files else "")
               + ("; metadata.json written (contract version 1, a first contract, whatever sinceVersion)"
                  if first else "; metadata.json refreshed"))  # fmt: skip
    largest = largest_inline_entry(doc["cases"])
    if largest and largest.count > INLINE_HINT_VALUES:  # written, but test.json is no longer for reading
        click.echo(f"note: {TEST_FILE} {largest.json_path}: {largest.advice()}")
    click.echo(f"next: webgpu-kernels validate {_folder_argument(path)} && webgpu-kernels test {_folder_argument(path)}")


COMMANDS = [new_cmd, expect_cmd]
