"""The documentation's examples run, so that they cannot rot unnoticed.

* Every ```python block of README.md and docs/*.md is executed (test ids are ``FILE:LINE`` of the
  block's first line, and tracebacks point at the doc's own lines). A block that is not
  self-contained has an entry in :func:`python_block_kind`; any other block runs as written, and
  one guarded by ``if __name__ == "__main__":`` runs again as a script, in a process of its own.
* docs/format.md's worked example: the package is built from the doc's own ``manifest.json`` and
  ``axpby.wgsl.jinja`` blocks, and its "Using it" block, the CLI commands quoted beside it, the
  explain trace and the rendered WGSL it shows are checked against what the library does.
* The ``webgpu-kernels`` commands quoted in README.md (its "Command line" block and the set-up
  block) parse with ``--help`` appended, and the cheap ones run for real through click's
  CliRunner with exit status 0.
* Names: every ``webgpu_kernels.<name>`` the docs mention resolves, and docs/errors.md's class
  table (hierarchy by indentation, attribute columns) matches the classes, and the example messages
  listed under it that a cheap call reproduces are the library's.

docs/errors.md's "Bad input, case by case" list is checked row by row in tests/test_bad_input.py,
and the CLI's behaviour beyond the quoted commands in tests/test_cli*.py: not repeated here.
"""

from __future__ import annotations

import ast
import contextlib
import importlib
import inspect
import io
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import traceback
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

import webgpu_kernels as wk
from webgpu_kernels import errors
from webgpu_kernels.cli import main
from webgpu_kernels.package import embedded_root

REPO_ROOT = Path(__file__).resolve().parents[1]
DOC_FILES = [REPO_ROOT / "README.md", *sorted((REPO_ROOT / "docs").glob("*.md"))]


# --- reading the docs ---------------------------------------------------------------------------

@dataclass(frozen=True)
class Block:
    """A fenced code block: ``line`` is the 1-based line of its first content line."""

    file: str  # relative to the repository root, e.g. "docs/format.md"
    line: int
    lang: str
    text: str
    caption: str  # the last non-empty line before the fence (e.g. "`manifest.json`:")

    @property
    def where(self) -> str:
        return f"{self.file}:{self.line}"


_FENCE = re.compile(r"^(?P<indent>\s*)(?P<fence>`{3,})(?P<lang>[\w+-]*)\s*$")


def code_blocks(path: Path) -> list[Block]:
    lines = path.read_text(encoding="utf-8").splitlines()
    rel = path.relative_to(REPO_ROOT).as_posix()
    blocks, i = [], 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        indent, fence = m["indent"], m["fence"]
        j = i + 1
        while j < len(lines) and not (lines[j].strip().startswith(fence) and set(lines[j].strip()) == {"`"}):
            j += 1
        body = [ln[len(indent):] if ln.startswith(indent) else ln.lstrip() for ln in lines[i + 1:j]]
        caption = next((ln.strip() for ln in reversed(lines[:i]) if ln.strip()), "")
        blocks.append(Block(rel, i + 2, m["lang"], "\n".join(body) + "\n", caption))
        i = j + 1
    return blocks


def doc_blocks(file: str, lang: str | None = None) -> list[Block]:
    return [b for b in code_blocks(REPO_ROOT / file) if lang is None or b.lang == lang]


def one_block(file: str, lang: str, startswith: str) -> Block:
    found = [b for b in doc_blocks(file, lang) if b.text.lstrip().startswith(startswith)]
    assert len(found) == 1, f"{file}: expected one ```{lang} block starting with {startswith!r}, found {len(found)}"
    return found[0]


def run_block(block: Block, namespace: dict | None = None) -> tuple[dict, str]:
    """Execute a python block (its line numbers kept in tracebacks); returns its namespace and stdout."""
    namespace = {"__name__": "__doc_example__"} if namespace is None else namespace
    code = compile("\n" * (block.line - 1) + block.text, block.file, "exec")
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out):
            exec(code, namespace)
    except Exception as e:  # name the doc and the line, not this helper
        tb = "".join(traceback.format_exception(e))
        pytest.fail(f"{block.where}: the documented example raised {type(e).__name__}: {e}\n{tb}", pytrace=False)
    return namespace, out.getvalue()


# --- ```python blocks ---------------------------------------------------------------------------

def python_block_kind(block: Block) -> str:
    """How a python block is checked: ``run`` (as written) unless it needs something around it."""
    if block.file == "docs/hub.md":
        return "skip: needs the Hugging Face Hub (and a commit sha); tests/test_hub.py runs get_kernel against tests/hub_server.py"
    if block.text.startswith("kernel(inputs"):
        return "signature"
    if block.file == "docs/format.md" and 'load_kernel("com.example.Axpby")' in block.text:
        return "axpby"
    if block.file == "docs/errors.md" and "except wk.InputError" in block.text:
        return "errors"
    return "run"


PYTHON_BLOCKS = [b for f in DOC_FILES for b in code_blocks(f) if b.lang == "python"]


@pytest.mark.parametrize("block", PYTHON_BLOCKS, ids=[b.where for b in PYTHON_BLOCKS])
def test_python_block(block: Block, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    kind = python_block_kind(block)
    if kind.startswith("skip:"):
        pytest.skip(f"{block.where}: {kind[5:].strip()}")
    monkeypatch.chdir(tmp_path)  # an example that writes files leaves nothing in the checkout
    {"run": _check_runs, "signature": _check_signature, "axpby": _check_axpby, "errors": _check_errors}[kind](
        block, tmp_path)


def test_python_blocks_type_check(tmp_path: Path) -> None:
    """The package ships its type hints (py.typed): the docs' examples, as a user copies them into
    typed code, pass mypy. Kernel calls returned ``ndarray | GpuTensor`` whatever ``output`` said,
    so README's ``y[0, 0, :4]`` and ``h.release()`` were mypy errors. mypy is in the
    ``lint`` extra, which .ci/run installs."""
    pytest.importorskip("mypy")
    files = []
    for n, block in enumerate(b for b in PYTHON_BLOCKS if python_block_kind(b) in ("run", "errors", "axpby")):
        path = tmp_path / f"block_{n}.py"
        path.write_text(f"# {block.where}\n{block.text}", encoding="utf-8")
        files.append(str(path))
    assert len(files) >= 3, files
    # In a process of its own: mypy.api in this one left a million objects alive (mypy's trees), and
    # every later full collection of this pytest worker scanned them (0.4 to 0.6 s each, 28 to 42 s a run).
    done = subprocess.run([sys.executable, "-m", "mypy", "--no-incremental", "--cache-dir", os.devnull,
                           "--follow-imports=silent", "--ignore-missing-imports", *files],
                          capture_output=True, text=True, timeout=600)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr


def _check_runs(block: Block, tmp_path: Path) -> None:
    namespace, out = run_block(block)
    if 'if __name__ == "__main__":' in block.text:
        _run_as_script(block, tmp_path)
    if block.file == "README.md" and 'output="gpu"' in block.text:  # what its comments say
        h, y, x = namespace["h"], namespace["y"], namespace["x"]
        assert isinstance(h, wk.GpuTensor) and h.released, f"{block.where}: h should be a released GpuTensor"
        assert isinstance(y, np.ndarray) and y.shape == x.shape and y.dtype == x.dtype, f"{block.where}: y"
        x64 = x.astype(np.float64)
        want = x64 / (1 + np.exp(-1.702 * x64)) + x64
        np.testing.assert_allclose(y.astype(np.float64), want, rtol=4e-3, atol=4e-3, err_msg=block.where)
        assert "chosen variant" in out and "fn main(" in out, f"{block.where}: explain and render output\n{out}"


def _run_as_script(block: Block, tmp_path: Path) -> None:
    """A block guarded by ``if __name__ == "__main__":`` (python-api.md's process pool) runs as
    ``python3 FILE``, as a user runs it: under run_block its guarded part never ran, and its worker
    function, defined in no importable module, could not reach a spawned worker anyway. The file's
    lines are the doc's, so a traceback names the doc's line."""
    script = tmp_path / "doc_example.py"
    script.write_text("\n" * (block.line - 1) + block.text, encoding="utf-8")
    done = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"{block.where}: run as a script, it exited {done.returncode}:\n{done.stderr}"


def _check_signature(block: Block, tmp_path: Path) -> None:
    """``kernel(inputs: dict, *, ...) -> dict`` is the real signature of ``Kernel.__call__``."""
    doc = ast.parse("def " + block.text.strip() + ": ...").body[0].args
    real = inspect.signature(wk.Kernel.__call__).parameters
    doc_params = [(a.arg, "positional") for a in doc.args] + [(a.arg, "keyword") for a in doc.kwonlyargs]
    real_params = [(n, "keyword" if p.kind is p.KEYWORD_ONLY else "positional") for n, p in real.items() if n != "self"]
    assert doc_params == real_params, f"{block.where}: documented {doc_params}, real {real_params}"
    doc_defaults = {a.arg: ast.literal_eval(d) for a, d in zip(doc.kwonlyargs, doc.kw_defaults) if d is not None}
    real_defaults = {n: p.default for n, p in real.items() if p.kind is p.KEYWORD_ONLY}
    assert doc_defaults == real_defaults, f"{block.where}: documented defaults {doc_defaults}, real {real_defaults}"


def _build_axpby(tmp_path: Path) -> Path:
    """docs/format.md's package, from its own blocks, named by the captions above them."""
    folder = tmp_path / "com.example.Axpby"
    folder.mkdir()
    for block in doc_blocks("docs/format.md"):
        m = re.fullmatch(r"`([\w.-]+)`:", block.caption)
        if m and block.lang in ("json", "jinja"):
            (folder / m[1]).write_text(block.text, encoding="utf-8")
    assert sorted(p.name for p in folder.iterdir()) == ["axpby.wgsl.jinja", "manifest.json"]
    return folder


def _check_axpby(block: Block, tmp_path: Path) -> None:
    _build_axpby(tmp_path)
    namespace, out = run_block(block)
    lines = out.splitlines()
    # print(axpby(...)["Y"])  # [-1. 1. 3. ... 13.]: 2 * arange(8) - 1
    got = np.array(lines[0].strip("[]").split(), dtype=np.float64)
    np.testing.assert_array_equal(got, 2 * np.arange(8) - 1, err_msg=f"{block.where}: Y")
    explain_doc = one_block("docs/format.md", "", "com.example.Axpby: chosen variant")
    wgsl_doc = one_block("docs/format.md", "wgsl", "enable f16;")
    assert explain_doc.text in out, f"{explain_doc.where}: the explain trace shown is not what explain() prints:\n{out}"
    # print() adds a newline to the WGSL's own last one
    assert out.endswith(wgsl_doc.text + "\n"), f"{wgsl_doc.where}: the WGSL shown is not what render() returns:\n{out}"

    # The CLI commands quoted with the example (and in the package layout section).
    text = (REPO_ROOT / "docs/format.md").read_text(encoding="utf-8")
    commands = sorted(set(re.findall(r"`webgpu-kernels ([^`]*\./com\.example\.Axpby[^`]*)`", text)))
    assert {c.split()[0] for c in commands} >= {"explain", "render", "run", "info"}, commands
    runner = CliRunner(env={"COLUMNS": "200"})
    for command in commands:
        result = runner.invoke(main, shlex.split(command))
        assert result.exit_code == 0, (f"docs/format.md: `webgpu-kernels {command}` exited {result.exit_code}",
                                       result.output, result.exception)
        if command.startswith("explain"):
            assert result.output == explain_doc.text, f"{explain_doc.where}: `webgpu-kernels {command}`"
        if command.startswith("render") and "A=8:f16" in command:
            assert result.output.rstrip("\n").endswith(wgsl_doc.text.rstrip("\n")), (
                f"{wgsl_doc.where}: `webgpu-kernels {command}`", result.output)


def _check_errors(block: Block, tmp_path: Path) -> None:
    """docs/errors.md's try/except: its call is refused (alpha as a str), an except clause takes it, and
    the attributes its comment names exist on the InputError."""
    namespace, _ = run_block(block)
    assert "y" not in namespace, f"{block.where}: the call was meant to be refused"
    with pytest.raises(wk.InputError) as caught:
        namespace["kernel"]({"X": namespace["x"]}, attrs={"alpha": namespace["a"]})
    assert caught.value.argument == "alpha", f"{block.where}: {caught.value}"
    comment = next(ln for ln in block.text.splitlines() if "except wk.InputError" in ln)
    for attr in re.findall(r"\be\.(\w+)", comment):
        assert hasattr(caught.value, attr), f"{block.where}: InputError has no attribute {attr!r}"


def test_errors_md_selection_message() -> None:
    """The SelectionError message docs/errors.md shows for X (2, 3, 8) and skip (2, 4, 8)."""
    shown = one_block("docs/errors.md", "", "com.microsoft.BiasAdd: no variant can run this call:")
    f32 = np.float32
    with pytest.raises(wk.SelectionError) as caught:
        wk.get_kernel("com.microsoft.BiasAdd")({"X": np.ones((2, 3, 8), f32), "bias": np.ones(8, f32),
                                                 "skip": np.ones((2, 4, 8), f32)})
    assert str(caught.value) == shown.text.strip(), f"{shown.where}: the message shown is not the real one"


def test_errors_md_attribute_selection_message() -> None:
    """The SelectionError message docs/errors.md shows for ONNX Gelu's approximate='exact': the
    headline names the attribute, which alone refuses the call."""
    shown = one_block("docs/errors.md", "", "ai.onnx.Gelu: no variant accepts attribute")
    kernel = wk.load_kernel(REPO_ROOT / "tests/packages/ai.onnx.Gelu")
    with pytest.raises(wk.SelectionError) as caught:
        kernel({"X": np.ones((2, 3), np.float32)}, attrs={"approximate": "exact"})
    assert str(caught.value) == shown.text.strip(), f"{shown.where}: the message shown is not the real one"
    assert caught.value.attributes == ("approximate",)


def test_errors_md_attribute_for_these_inputs_selection_message() -> None:
    """The SelectionError message docs/errors.md shows for ONNX Softmax's axis=3 on a rank-3 input:
    the clause reads the input's rank too, so the headline names the attribute "for these inputs"."""
    shown = one_block("docs/errors.md", "", "ai.onnx.Softmax: no variant accepts attribute")
    kernel = wk.load_kernel(REPO_ROOT / "tests/packages/ai.onnx.Softmax")
    with pytest.raises(wk.SelectionError) as caught:
        kernel({"input": np.zeros((2, 3, 4), np.float32)}, attrs={"axis": 3})
    assert str(caught.value) == shown.text.strip(), f"{shown.where}: the message shown is not the real one"
    assert caught.value.attributes == ("axis",)


# --- the command line ---------------------------------------------------------------------------

#: Commands checked with --help only: the work itself needs the network, a real GPU or a file of the author's.
HELP_ONLY = {
    "download": "fetches from the Hugging Face Hub",
    "lock": "asks the Hugging Face Hub (tests/test_hub_lock.py runs it against a local one)",
    "upload": "publishes to the Hugging Face Hub (tests/test_hub_upload.py runs it against a local one)",
    "bench": "timings need a real GPU (README: lavapipe says nothing about kernels)",
    "tune": "timings need a real GPU",
    "expect": "imports the author's reference file (tests/test_cli_expect.py runs it)",
}


@dataclass(frozen=True)
class Command:
    where: str
    args: tuple[str, ...]  # after "webgpu-kernels", optional [...] parts kept, placeholders as written

    @property
    def name(self) -> str:
        return next(a for a in self.args if not a.startswith("-"))


def readme_commands() -> list[Command]:
    """``webgpu-kernels ...`` lines of README.md's sh blocks (``&&`` chains split, comments dropped)."""
    commands: dict[tuple[str, ...], Command] = {}
    for block in doc_blocks("README.md", "sh"):
        for offset, line in enumerate(block.text.splitlines()):
            for part in line.split("&&"):
                part = re.sub(r"\s+#.*$", "", part).strip()
                if not part.startswith("webgpu-kernels "):
                    continue
                part = re.sub(r"\[([^\]]*)\]", r"\1", part)  # keep optional parts: they must parse too
                args = tuple(shlex.split(part)[1:])
                commands.setdefault(args, Command(f"README.md:{block.line + offset}", args))
    return list(commands.values())


COMMANDS = readme_commands()


def _substitute(args: tuple[str, ...], package: Path) -> list[str]:
    """The README's placeholders, made concrete: a package folder, and a kernel where one is open."""
    out: list[str] = []
    for a in args:
        if a == "path/to/package":
            out.append(str(package))
        elif a in ("KERNEL|PATH", "KERNEL"):
            out.append("com.microsoft.QuickGelu")
        elif a != "...":
            out.append(a)
    return out


@pytest.fixture
def package_copy(tmp_path: Path) -> Path:
    """A copy of an embedded package, with its metadata.json, to stand for ``path/to/package``."""
    dest = tmp_path / "bias-add-copy"  # not the op id: a folder of that name here makes the id ambiguous (exit 2)
    shutil.copytree(embedded_root() / "com.microsoft.BiasAdd", dest, ignore=shutil.ignore_patterns("__pycache__"))
    return dest


def test_readme_quotes_every_command() -> None:
    """The "Command line" block names every subcommand the CLI has."""
    quoted = {c.name for c in COMMANDS}
    real = set(main.list_commands(None))  # type: ignore[arg-type]
    assert quoted == real, f"README.md: commands not quoted {sorted(real - quoted)}, unknown {sorted(quoted - real)}"


@pytest.mark.parametrize("command", COMMANDS, ids=[f"{c.where} {' '.join(c.args[:2])}" for c in COMMANDS])
def test_readme_command_parses(command: Command, runner: CliRunner, package_copy: Path) -> None:
    """Every option the README quotes exists (click refuses an unknown option before --help)."""
    args = _substitute(command.args, package_copy)
    result = runner.invoke(main, [*args, "--help"])
    assert result.exit_code == 0 and "Usage:" in result.output, (
        f"{command.where}: `webgpu-kernels {' '.join(command.args)}` does not parse", result.output)


REAL_COMMANDS = [c for c in COMMANDS if c.name not in HELP_ONLY]


@pytest.mark.parametrize("command", REAL_COMMANDS, ids=[f"{c.where} {' '.join(c.args[:2])}" for c in REAL_COMMANDS])
def test_readme_command_runs(command: Command, runner: CliRunner, package_copy: Path, tmp_path: Path,
                             monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    monkeypatch.chdir(tmp_path)  # what a command writes (test --junit report.xml) stays out of the checkout
    args = _substitute(command.args, package_copy)
    result = runner.invoke(main, args)
    assert result.exit_code == 0, (f"{command.where}: `webgpu-kernels {' '.join(args)}` exited {result.exit_code}",
                                   result.output, result.exception)


# --- names the docs mention ---------------------------------------------------------------------

def _resolve(dotted: str) -> object:
    """``webgpu_kernels.a.b``: attributes, importing submodules on the way (``webgpu_kernels.hub``)."""
    parts = dotted.split(".")
    obj: object = importlib.import_module(parts[0])
    for i, part in enumerate(parts[1:], start=1):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            obj = importlib.import_module(".".join(parts[: i + 1]))
    return obj


def test_documented_dotted_names_exist() -> None:
    missing = []
    for path in DOC_FILES:
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
            for m in re.finditer(r"\b(?:webgpu_kernels|wk)((?:\.[A-Za-z_]\w*)+)", line):
                dotted = "webgpu_kernels" + m[1]
                try:
                    _resolve(dotted)
                except (AttributeError, ImportError):
                    missing.append(f"{path.relative_to(REPO_ROOT)}:{n}: {m[0]}")
    assert not missing, "documented names that do not exist:\n" + "\n".join(missing)


def _error_rows() -> list[tuple[int, int, str, str]]:
    """docs/errors.md "The classes": (line, depth, class name, attributes cell) per row."""
    lines = (REPO_ROOT / "docs/errors.md").read_text(encoding="utf-8").splitlines()
    start = lines.index("## The classes")
    rows = []
    for n, line in enumerate(lines[start:], start=start + 1):
        if line.startswith("## ") and n > start + 1:
            break
        cells = [c.strip() for c in line.strip().strip("|").split("|")] if line.startswith("| ") else []
        m = re.fullmatch(r"((?:&nbsp;)*)`(\w+)`", cells[0]) if cells else None
        if m:
            rows.append((n, len(m[1]) // len("&nbsp;&nbsp;"), m[2], cells[2]))
    return rows


def _instance(cls: type) -> BaseException:
    """An instance built from the constructor's own parameters (a placeholder for each required one)."""
    params = list(inspect.signature(cls.__init__).parameters.values())[1:]
    if any(p.kind is p.VAR_POSITIONAL for p in params):  # Exception's own (*args, **kwargs)
        return cls("message")
    args = [p.name for p in params if p.kind is p.POSITIONAL_OR_KEYWORD and p.default is p.empty]
    kwargs = {p.name: p.name for p in params if p.kind is p.KEYWORD_ONLY and p.default is p.empty}
    return cls(*args, **kwargs)


def test_errors_md_class_table() -> None:
    """Indentation is the hierarchy; the attribute column names attributes the instances have."""
    rows = _error_rows()
    assert len(rows) >= 20, "docs/errors.md: the class table was not found"
    stack: list[str] = []
    attrs_of: dict[str, list[str]] = {}
    problems = []
    for line, depth, name, attr_cell in rows:
        cls = getattr(wk, name, None)
        if not (isinstance(cls, type) and issubclass(cls, wk.KernelError)):
            problems.append(f"docs/errors.md:{line}: {name} is not a webgpu_kernels.KernelError class")
            continue
        del stack[depth:]
        if stack and not issubclass(cls, getattr(wk, stack[-1])):
            problems.append(f"docs/errors.md:{line}: {name} is indented under {stack[-1]} but is not a subclass")
        stack.append(name)
        like = re.match(r"as `(\w+)`", attr_cell)
        attrs = attrs_of.get(like[1], []) if like else re.findall(r"`(\w+)`", attr_cell)
        attrs_of[name] = attrs
        instance = _instance(cls)
        problems += [f"docs/errors.md:{line}: {name} has no attribute {a!r}" for a in attrs if not hasattr(instance, a)]
    for also in re.finditer(r"`(\w+)`[^\n]*\(also a `(\w+)`\)", (REPO_ROOT / "docs/errors.md").read_text()):
        if not issubclass(getattr(wk, also[1]), getattr(wk, also[2])):
            problems.append(f"docs/errors.md: {also[1]} is said to be also a {also[2]}")
    assert not problems, "\n".join(problems)
    assert {n for _, _, n, _ in rows} == {n for n in dir(errors) if isinstance(getattr(errors, n), type)
                                          and issubclass(getattr(errors, n), errors.KernelError)}


# --- digests the docs show --------------------------------------------------------------------------

def _embedded_digests(op_id: str) -> dict[str, str]:
    return json.loads((embedded_root() / op_id / "metadata.json").read_text(encoding="utf-8"))["digest"]["files"]


def test_shown_digests_are_the_embedded_ones() -> None:
    """hub.md's download transcript (QuickGelu) and package-files.md's metadata.json (BiasAdd, abridged
    to 8 hex digits) show the digests the embedded packages carry: a template edit left them stale."""
    stale, checked = [], 0
    transcript = one_block("docs/hub.md", "", "$ export HF_ENDPOINT")
    real = _embedded_digests("com.microsoft.QuickGelu")
    for m in re.finditer(r"^\s+([0-9a-f]{64})  (\S+)$", transcript.text, re.M):
        checked += 1
        if real.get(m[2]) != m[1]:
            stale.append(f"{transcript.where}: {m[2]} shown as {m[1][:8]}, is {real.get(m[2], 'absent')[:8]}")
    example = one_block("docs/package-files.md", "json", '{\n  "id": "com.microsoft.BiasAdd"')
    real = _embedded_digests("com.microsoft.BiasAdd")
    for m in re.finditer(r'"([\w.-]+)": "([0-9a-f]{8})\.\.\."', example.text):
        checked += 1
        if not real.get(m[1], "").startswith(m[2]):
            stale.append(f"{example.where}: {m[1]} shown as {m[2]}, is {real.get(m[1], 'absent')[:8]}")
    assert not stale, "\n".join(stale)
    assert checked == 10, f"expected 5 digests in docs/hub.md and 5 in docs/package-files.md, read {checked}"


# --- docs/errors.md's example messages ---------------------------------------------------------------

_CODE_SPAN = re.compile(r"`([^`]+)`|`` (.+?) ``")  # `text`, or `` text with `backticks` ``


def _class_examples() -> dict[str, str]:
    """docs/errors.md "The classes": class name -> its example message, from the list under the
    table (``- `Name`: `message```, a message holding backticks in a double-backtick span)."""
    text = (REPO_ROOT / "docs/errors.md").read_text(encoding="utf-8")
    section = text[text.index("## The classes"):text.index("## Bad input")]
    examples = {}
    for m in re.finditer(r"^- `(\w+)`: (.*)$", section, re.M):
        span = _CODE_SPAN.fullmatch(m[2])
        if span:
            examples[m[1]] = span[1] or span[2]
    return examples


def _scale_shift(tmp_path: Path, change=None, template: str | None = None) -> Path:
    """A copy of tests/packages/demo.ScaleShift (no metadata.json), its manifest changed by ``change``."""
    folder = tmp_path / "demo.ScaleShift"
    shutil.rmtree(folder, ignore_errors=True)
    shutil.copytree(REPO_ROOT / "tests/packages/demo.ScaleShift", folder)
    data = json.loads((folder / "manifest.json").read_text(encoding="utf-8"))
    if change is not None:
        change(data)
    (folder / "manifest.json").write_text(json.dumps(data), encoding="utf-8")
    if template is not None:
        (folder / "scale-shift.wgsl.jinja").write_text(template, encoding="utf-8")
    return folder


def test_errors_md_class_examples_are_real(tmp_path: Path) -> None:
    """The class table's example messages are real ones: those a cheap call reproduces are
    what the library says (a leading ``...`` stands for a path that differs)."""
    examples = _class_examples()
    assert {n for _, _, n, _ in _error_rows()} - set(examples) <= {
        "KernelError", "SandboxError", "GPUError", "SelectionError", "MissingOutputError"}, sorted(examples)
    x = {"X": np.ones((1, 4), np.float32)}

    def threads(variant: int, expression: str):
        return lambda d: d["variants"][variant]["passes"][0]["dispatch"].update(threads=expression)

    def priority(d: dict) -> None:
        d["variants"][0]["priority"] = "high"

    def released() -> None:
        t = wk.to_gpu(np.ones(2, np.float32))
        t.release()
        t.numpy()

    cases = {
        "PackageError": lambda: wk.load_kernel("/nonexistent"),
        "ManifestError": lambda: wk.load_kernel(_scale_shift(tmp_path, priority)),
        "ExpressionError": lambda: wk.load_kernel(_scale_shift(tmp_path, lambda d: d["derive"].update(
            n="numel(shapes.X) +"))),
        "ExpressionSandboxError": lambda: wk.load_kernel(_scale_shift(tmp_path, threads(1, "'x' * 10**8")))(
            x, variant="scalar"),
        "BroadcastError": lambda: wk.load_kernel(_scale_shift(tmp_path, threads(0, "numel(broadcastShape(shapes.X, [9]))")))(
            x, variant="vec4"),
        "TemplateError": lambda: wk.load_kernel(_scale_shift(tmp_path, template="{{ nope }}\n")).render(x),
        "TemplateSandboxError": lambda: wk.load_kernel(_scale_shift(tmp_path, template="{{ 'a'.format(1) }}\n")).render(x),
        "TensorReleasedError": released,
        "NotPicklableError": lambda: __import__("pickle").dumps(wk.to_gpu(np.ones(2, np.float32))),
    }  # fmt: skip
    wrong = []
    for name, cause in cases.items():
        shown = examples[name]
        with pytest.raises(getattr(wk, name)) as caught:
            cause()
        said = str(caught.value)
        if not (said == shown or (shown.startswith("...") and said.endswith(shown[3:]))):
            wrong.append(f"docs/errors.md: {name}'s example is {shown!r}, the library says {said!r}")
    assert not wrong, "\n".join(wrong)


def _bad_input_messages() -> dict[str, str]:
    """docs/errors.md "Bad input, case by case": each entry's bad input (``- CASE → `Error` ``) ->
    the first message quoted in the line under it (``  - `message` ...``)."""
    text = (REPO_ROOT / "docs/errors.md").read_text(encoding="utf-8")
    section = text[text.index("## Bad input, case by case"):]
    rows = {}
    for m in re.finditer(r"^- (.*) → `\w+`.*\n  - (.*)$", section, re.M):
        quoted = re.search(r"`([^`]+)`", m[2])
        if quoted:
            rows[m[1].strip()] = quoted[1]
    return rows


def test_errors_md_bad_input_attribute_rows_are_real() -> None:
    """The attribute, tunable and option rows of the bad-input table quote what a QuickGelu or
    BiasAdd call says (a trailing ``...`` stands for the rest): the row for ``alpha=10**400`` had
    kept ``got int 1000...`` after such an integer came to be shown by its size."""
    rows = _bad_input_messages()
    gelu, bias_add = wk.get_kernel("com.microsoft.QuickGelu"), wk.get_kernel("com.microsoft.BiasAdd")
    x = {"X": np.ones(8, np.float32)}
    xbs = {"X": np.ones((2, 3, 8), np.float32), "bias": np.ones(8, np.float32), "skip": np.ones((2, 3, 8), np.float32)}
    calls = {
        "float attribute given an integer past the f32 range": lambda: gelu(x, attrs={"alpha": 10**400}),
        "integer tunable of 2^63 or more": lambda: gelu(x, tunables={"WORKGROUP_SIZE": 2**63}),
        "non-finite attribute": lambda: gelu(x, attrs={"alpha": float("nan")}),
        "attribute of the wrong kind": lambda: gelu(x, attrs={"alpha": "1.7"}),
        "unknown attribute": lambda: gelu(x, attrs={"beta": 1.0}),
        "an attribute for a kernel without attributes": lambda: bias_add(xbs, attrs={"alpha": 1.0}),
        "attributes not a dict": lambda: gelu(x, attrs=[("alpha", 1.0)]),
        "unknown tunable": lambda: gelu(x, tunables={"TILE": 1}),
        "fractional / string tunable": lambda: gelu(x, tunables={"WORKGROUP_SIZE": 1.5}),
        "bad `output=`": lambda: gelu(x, output="torch"),
        "`variant=` or `adapter=` not a string": lambda: gelu(x, variant=["scalar"]),
    }  # fmt: skip
    wrong = []
    for start, call in calls.items():
        shown = next(message for row, message in rows.items() if row.startswith(start))
        with pytest.raises(wk.KernelError) as caught:
            call()
        said = str(caught.value)
        if not (said == shown or (shown.endswith("...") and said.startswith(shown[:-3]))):
            wrong.append(f"docs/errors.md: the row {start!r} quotes {shown!r}, the library says {said!r}")
    assert not wrong, "\n".join(wrong)


def test_the_binding_counts_the_docs_quote_are_the_packages() -> None:
    """format.md and security.md set the 4,096-binding bound beside what this repository's packages
    hold: they had said at most 50 (demo.LayerNorm) after demo.Conv came with 135."""
    from webgpu_kernels.manifest import expanded_bindings
    from webgpu_kernels.reading import decode_json

    def counts(folders: list[Path]) -> dict[str, int]:
        return {f.name: expanded_bindings(decode_json((f / "manifest.json").read_bytes()))[0] for f in folders}

    shipped = counts(sorted(embedded_root().iterdir()))
    tests = counts(sorted(p for p in (REPO_ROOT / "tests/packages").iterdir() if (p / "manifest.json").is_file()))
    largest = max(tests, key=tests.__getitem__)
    claim = (f"the shipped manifests hold {max(shipped.values())}, the test packages' at most "
             f"{tests[largest]}, {largest}'s")
    for doc in ("docs/format.md", "docs/security.md"):
        text = " ".join((REPO_ROOT / doc).read_text(encoding="utf-8").split())
        assert claim in text, f"{doc} should say {claim!r}"


def test_readme_names_every_example_package() -> None:
    """README's list of tests/packages had said nine while eleven were there (ArgMax and Attention
    left out): each package folder is named there, and the count in words is the folders'."""
    readme = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    folders = sorted(p.name for p in (REPO_ROOT / "tests" / "packages").iterdir() if (p / "manifest.json").is_file())
    assert [name for name in folders if f"`{name}`" not in readme] == []
    assert f"[`tests/packages/`](tests/packages): {_in_words(len(folders))} packages" in readme


def _in_words(n: int) -> str:
    """0 to 99 as English writes them: "twenty-one" (a list ending at twenty had failed with an
    IndexError once a twenty-first package came)."""
    ones = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven", "twelve",
            "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen"]  # fmt: skip
    tens = ["", "", "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety"]
    if n < 20:
        return ones[n]
    return tens[n // 10] + ("" if n % 10 == 0 else f"-{ones[n % 10]}")


def _heading_anchors(markdown: str) -> set[str]:
    """The anchors GitHub gives ``markdown``'s headings: lower case, punctuation but ``-`` and ``_``
    dropped, spaces as ``-``, and ``-1``, ``-2`` ... after a repeated one."""
    anchors: set[str] = set()
    seen: dict[str, int] = {}
    for line in re.sub(r"```.*?```", "", markdown, flags=re.S).splitlines():
        heading = re.match(r"#{1,6}\s+(.*)", line)
        if heading:
            slug = re.sub(r"[^\w\- ]", "", heading[1].strip().lower()).replace(" ", "-")
            count = seen.get(slug, 0)
            seen[slug] = count + 1
            anchors.add(slug if count == 0 else f"{slug}-{count}")
    return anchors


def _broken_links(doc: Path) -> list[str]:
    """``doc``'s relative links whose file is missing, or whose ``#anchor`` names no heading of the
    Markdown file it points into (code blocks left out)."""
    broken = []
    text = re.sub(r"```.*?```", "", doc.read_text(encoding="utf-8"), flags=re.S)
    for link in re.findall(r"\]\(([^)\s]+)\)", text):
        if link.startswith(("http://", "https://", "mailto:")):
            continue
        path, _, anchor = link.partition("#")
        target = doc.parent / path if path else doc
        if not target.exists():
            broken.append(f"{link} (no such file)")
        elif anchor and target.suffix == ".md" and anchor not in _heading_anchors(target.read_text(encoding="utf-8")):
            broken.append(f"{link} (no such heading)")
    return broken


def test_a_broken_link_or_anchor_is_found(tmp_path: Path) -> None:
    (tmp_path / "other.md").write_text("# Run AG (session 48): the suite, on an H100\n## Notes\n## Notes\n", encoding="utf-8")
    (tmp_path / "raw.log").write_text("", encoding="utf-8")
    doc = tmp_path / "doc.md"
    doc.write_text("[a](other.md#run-ag-session-48-the-suite-on-an-h100) [b](other.md#notes-1) [c](raw.log) "
                   "[d](other.md#notes-2) [e](missing.log) [f](https://example.com/x) [g](#here)\n# Here\n"
                   "```\n[h](inside-a-code-block.md)\n```\n", encoding="utf-8")  # fmt: skip
    assert _broken_links(doc) == ["other.md#notes-2 (no such heading)", "missing.log (no such file)"]


def test_every_relative_link_in_the_docs_resolves() -> None:
    """README.md's, docs/', examples/ and scripts/redteam/'s links to files (docs/perf's raw logs, the
    packages) and to headings: the performance docs link over a hundred raw files, and headings are
    renamed as runs are added."""
    docs = [REPO_ROOT / "README.md", *sorted((REPO_ROOT / "docs").rglob("*.md")),
            *[doc for doc in (REPO_ROOT / "examples" / "README.md", REPO_ROOT / "scripts" / "redteam" / "README.md")
              if doc.is_file()]]  # the sdist leaves scripts/redteam out
    broken = {str(doc.relative_to(REPO_ROOT)): links for doc in docs if (links := _broken_links(doc))}
    if not (REPO_ROOT / "docs" / "perf").is_dir():  # the sdist leaves the run logs out (MANIFEST.in)
        broken = {doc: kept for doc, links in broken.items() if (kept := [x for x in links if "perf/" not in x])}
    assert broken == {}
