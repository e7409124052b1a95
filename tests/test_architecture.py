"""docs/architecture.md, the contributors' map, held to the code: every module and data folder of
src/webgpu_kernels/ has one row in its table, each row names a stage, the rows run in the stages'
order, and no module imports a module of a later stage (its imports read with ``ast``: no GPU, no
import of the engine)."""

from __future__ import annotations

import ast
import re
import sys
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "src" / "webgpu_kernels"
DOC = ROOT / "docs" / "architecture.md"

#: Beneath the data flow's stages: imported by every stage, importing nothing of a later one.
SHARED = "shared"
#: Above them: the loaders, the command line and the tools, which may import anything.
OUTER = "outer"

#: (importer, imported) -> why the import reaches back to a later stage. Each must still be in the
#: code (a stale entry fails) and is named in docs/architecture.md.
REACHING_BACK = {
    # Pickling a kernel names the function another process opens it again with, api.reopen_kernel,
    # and what it opens (api.kernel_reference: an embedded op id, a Hub commit or a folder, with its
    # trust, checked against the pickled digest; api.get_kernel opens the first). Those
    # loaders sit above the kernel (they import hub.py, which builds Kernels); moving them under
    # kernel.py would bring the Hub and the folder loaders down with them, and a hook api.py set
    # on Kernel would leave a kernel built without api.py imported unpicklable. The import runs
    # only when a kernel is pickled.
    ("kernel", "api"): "Kernel.__reduce__ names the loaders that open a pickled kernel again",
}


def _doc() -> str:
    return DOC.read_text(encoding="utf-8")


@cache
def stage_order() -> tuple[str, ...]:
    """shared, the data flow's stages as the doc's first paragraph lists them, outer."""
    found = re.search(r"Data flows one way through the stages:\s*(.+?);\s*no stage reaches back", _doc(), re.S)
    assert found, "docs/architecture.md no longer says 'Data flows one way through the stages: a -> b -> ...; no stage reaches back'"
    flow = [name.strip() for name in " ".join(found.group(1).split()).split("->")]
    return (SHARED, *flow, OUTER)


@cache
def table() -> tuple[tuple[str, tuple[str, ...]], ...]:
    """The module table's rows: (stage, the modules and folders its module column names, as
    ``x.py`` and ``x/``)."""
    rows = []
    for line in _doc().splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split(" | ")]
        if not line.startswith("| ") or len(cells) != 3 or cells[0] in ("stage", "---"):
            continue
        names = []
        for item in re.findall(r"`([^`]+)`", cells[1]):
            if item.endswith(".py") and "/" not in item:
                names.append(item)
            elif "/" in item:  # a data folder, or a file in one: schemas/manifest.schema.json
                names.append(item.split("/")[0] + "/")
        rows.append((cells[0], tuple(names)))
    assert len(rows) > 10, "docs/architecture.md's module table was not found (| stage | module | what it is |)"
    return tuple(rows)


@cache
def stage_of() -> dict[str, str]:
    """Module name (without .py; a folder as ``x/``) -> its stage, from the table."""
    stages: dict[str, str] = {}
    for stage, names in table():
        for name in names:
            stages[name.removesuffix(".py")] = stage
    return stages


def module_files() -> list[Path]:
    return sorted(PACKAGE.glob("*.py"))


def data_folders() -> list[str]:
    return sorted(p.name + "/" for p in PACKAGE.iterdir() if p.is_dir() and p.name != "__pycache__")


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")  # fmt: skip


def _resolve(name: str) -> str:
    """What ``from . import name`` imports: the module ``name`` where there is one, else a name
    that ``__init__.py`` defines (``__version__``)."""
    return name if (PACKAGE / f"{name}.py").is_file() or (PACKAGE / name).is_dir() else "__init__"


@cache
def engine_imports(module: str) -> tuple[tuple[str, int], ...]:
    """(imported engine module, line) for each import of ``module`` that runs: at module level or
    in a function, not under ``if TYPE_CHECKING:`` (annotations only; its ``else:`` runs)."""
    return imports_in((PACKAGE / f"{module}.py").read_text(encoding="utf-8"), module)


def imports_in(source: str, module: str) -> tuple[tuple[str, int], ...]:
    tree = ast.parse(source)
    found: list[tuple[str, int]] = []

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.ImportFrom):
            parts = (node.module or "").split(".")
            if node.level == 1 or (node.level == 0 and parts[0] == "webgpu_kernels"):
                assert node.level <= 1, f"{module}.py line {node.lineno}: a relative import of level {node.level}"
                inner = parts if node.level == 1 else parts[1:]
                if inner and inner[0]:
                    found.append((inner[0], node.lineno))
                else:  # from . import x, y
                    found.extend((_resolve(alias.name), node.lineno) for alias in node.names)
            elif node.level > 1:
                raise AssertionError(f"{module}.py line {node.lineno}: a relative import of level {node.level}")
        elif isinstance(node, ast.Import):
            for alias in node.names:
                parts = alias.name.split(".")
                if parts[0] == "webgpu_kernels":
                    found.append((parts[1] if len(parts) > 1 else "__init__", node.lineno))
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return tuple(found)


# --- the table names every module, and only modules that exist ------------------------------------


def test_every_module_and_data_folder_has_a_row():
    named = {name for _, names in table() for name in names}
    missing = [p.name for p in module_files() if p.name not in named]
    missing += [folder for folder in data_folders() if folder not in named]
    assert not missing, (f"docs/architecture.md's module table does not name {', '.join(missing)}: add each to the "
                         "row of its stage (or a new row), saying what it is")  # fmt: skip


def test_every_module_the_table_names_exists():
    absent = [name for _, names in table() for name in names
              if not (PACKAGE / name).is_file() and not (name.endswith("/") and (PACKAGE / name).is_dir())]  # fmt: skip
    assert not absent, f"docs/architecture.md's module table names {', '.join(absent)}, not in src/webgpu_kernels/"


def test_each_module_has_one_row():
    seen: dict[str, str] = {}
    twice = []
    for stage, names in table():
        for name in names:
            if name in seen:
                twice.append(f"{name} (stages {seen[name]} and {stage})")
            seen[name] = stage
    assert not twice, f"docs/architecture.md's module table names {', '.join(twice)} twice"


def test_rows_name_a_stage_and_run_in_stage_order():
    order = stage_order()
    unknown = [f"{stage!r} (row of {', '.join(names)})" for stage, names in table() if stage not in order]
    assert not unknown, f"docs/architecture.md's table names stages its data flow does not ({' -> '.join(order)}): {unknown}"
    ranks = [order.index(stage) for stage, _ in table()]
    for (stage, names), rank, before in zip(table()[1:], ranks[1:], ranks):
        assert rank >= before, (f"docs/architecture.md's row of {', '.join(names)} (stage {stage}) comes after a row "
                                f"of stage {order[before]}: the rows run in the stages' order, {' -> '.join(order)}")  # fmt: skip


def test_the_stages_are_the_documented_ones():
    # the flow the paragraph states, so that a reworded paragraph that parses into other stages is seen
    assert stage_order() == ("shared", "package", "manifest", "sandbox", "contract", "expressions", "selection",
                             "rendering", "execution", "kernel", "outer")  # fmt: skip
    stages = stage_of()
    assert {m for m, s in stages.items() if s == SHARED} == {"errors", "forks", "__init__"}
    assert stages["kernel"] == "kernel" and stages["api"] == OUTER and stages["program"] == "expressions"


# --- no stage reaches back ----------------------------------------------------------------------


def later_stage_imports(module: str) -> list[str]:
    """Each import of ``module`` of a module of a later stage than its own, in words."""
    order, stages = stage_order(), stage_of()
    own = stages[module]
    if own == OUTER:
        return []
    found = []
    for imported, line in engine_imports(module):
        theirs = stages[imported]
        if order.index(theirs) > order.index(own) and (module, imported) not in REACHING_BACK:
            found.append(f"{module}.py (stage {own}) imports {imported} (stage {theirs}, later) at line {line}")
    return found


@pytest.mark.parametrize("module", [p.stem for p in module_files()])
def test_no_import_of_a_later_stage(module):
    if module not in stage_of():
        pytest.skip(f"{module}.py has no row (test_every_module_and_data_folder_has_a_row fails)")
    unknown = [f"{name} (line {line})" for name, line in engine_imports(module) if name not in stage_of()]
    assert not unknown, f"{module}.py imports modules docs/architecture.md's table does not name: {unknown}"
    assert not later_stage_imports(module), (
        "\n".join(later_stage_imports(module)) + f"\n(stages: {' -> '.join(stage_order())}; an import under "
        "'if TYPE_CHECKING:' does not count)")  # fmt: skip


@pytest.mark.parametrize(("importer", "imported"), sorted(REACHING_BACK))
def test_each_import_reaching_back_is_still_there_and_documented(importer, imported):
    order, stages = stage_order(), stage_of()
    assert imported in {name for name, _ in engine_imports(importer)}, (
        f"{importer}.py no longer imports {imported}: remove the pair from REACHING_BACK and docs/architecture.md")
    assert order.index(stages[imported]) > order.index(stages[importer]), (
        f"{importer}.py importing {imported} no longer reaches back: remove it from REACHING_BACK")
    assert re.search(rf"`{importer}\.py`.{{0,200}}imports `{imported}\.py`", " ".join(_doc().split())), (
        f"docs/architecture.md does not name the import of {imported} by {importer}.py that reaches back")


def test_the_reader_sees_imports_in_functions_and_skips_type_checking_ones():
    source = """
from __future__ import annotations
import typing
from typing import TYPE_CHECKING
from .errors import KernelError
from . import tuning, __version__
import webgpu_kernels.device
if TYPE_CHECKING:
    from .kernel import Kernel
else:
    from .manifest import Manifest
if typing.TYPE_CHECKING:
    from . import api
def f():
    from .execution import run
    class C:
        def g(self):
            from webgpu_kernels import buffers
"""
    assert imports_in(source, "m") == (("errors", 5), ("tuning", 6), ("__init__", 6), ("device", 7), ("manifest", 11),
                                       ("execution", 15), ("buffers", 18))  # fmt: skip
    with pytest.raises(AssertionError, match="level 2"):
        imports_in("from ..x import y", "m")


# --- what the rows claim --------------------------------------------------------------------------


def test_comparison_imports_nothing_of_the_engine():
    row = next(line for line in _doc().splitlines() if line.startswith("| ") and "`comparison.py`" in line.split(" | ")[1])
    assert "imports nothing of the engine" in row
    assert not engine_imports("comparison"), f"comparison.py imports {engine_imports('comparison')} of the engine"


def test_hub_errors_imports_none_of_the_modules_that_use_it():
    """hub_errors.py words the Hub's answers for download, lock and upload: the one translation
    those modules share sits beneath them, so it reaches back into none of them."""
    row = next(line for line in _doc().splitlines() if line.startswith("| ") and "`hub_errors.py`" in line.split(" | ")[1])
    assert "imports no `hub.py`" in row
    users = {"hub", "hub_lock", "hub_upload", "cli_hub", "api"}
    assert not [m for m in engine_imports("hub_errors") if m[0] in users], engine_imports("hub_errors")


def private_imports(module: str) -> list[str]:
    """``from .other import _name`` in ``module``: a private name of another module, which that
    module may rename or drop without a thought for its importers."""
    tree = ast.parse((PACKAGE / f"{module}.py").read_text(encoding="utf-8"))
    return [f"{node.module}.{alias.name} (line {node.lineno})" for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom) and node.level == 1
            for alias in node.names if alias.name.startswith("_") and not alias.name.startswith("__")]  # fmt: skip


@pytest.mark.parametrize("module", [p.stem for p in module_files()])
def test_no_module_imports_another_s_private_name(module):
    assert not private_imports(module), f"{module}.py imports private names (make them public): {private_imports(module)}"


def test_the_private_import_reader_sees_one(tmp_path, monkeypatch):
    (tmp_path / "m.py").write_text("from .other import _hidden, shown\nfrom . import __version__\n", encoding="utf-8")
    monkeypatch.setattr(sys.modules[__name__], "PACKAGE", tmp_path)
    assert private_imports("m") == ["other._hidden (line 1)"]
