"""What a wheel carries: every file of the library's package folder that is no Python module is
declared as package data in pyproject.toml, the way setuptools reads the declaration (each pattern
a recursive glob from the package folder, files only, plus py.typed). An editable install reads
src/ directly and so never notices an undeclared file; the wheel would lack it, and an embedded
kernel whose metadata.json lists it would not load ("the installed library's copy has changed").

Reads pyproject.toml and src/ of a checkout or of the sdist (which carries both), not the
installed library: building a wheel in every test run would be slow (`.ci/run` builds one once and
runs the embedded kernels' tests from it).
"""

from __future__ import annotations

import glob
import os
import re
import shutil
import tomllib
from pathlib import Path

import pytest

from webgpu_kernels.digests import METADATA_FILE, package_files

REPO_ROOT = Path(__file__).resolve().parents[1]
PACKAGE_DIR = REPO_ROOT / "src" / "webgpu_kernels"
# setuptools' build_py adds these to every package's patterns (_IMPLICIT_DATA_FILES)
IMPLICIT_PATTERNS = ("*.pyi", "py.typed")


def declared_patterns() -> list[str]:
    if not (REPO_ROOT / "pyproject.toml").is_file() or not PACKAGE_DIR.is_dir():
        pytest.skip("needs a checkout or an sdist: pyproject.toml and src/webgpu_kernels")
    config = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text("utf-8"))
    package_data = config["tool"]["setuptools"]["package-data"]
    return [*IMPLICIT_PATTERNS, *package_data.get("", []), *package_data.get("webgpu_kernels", [])]


def shipped(package_dir: Path, patterns: list[str]) -> set[str]:
    """The package-relative names the patterns select, as setuptools' build_py selects them."""
    names = set()
    for pattern in patterns:
        for match in glob.glob(os.path.join(package_dir, pattern), recursive=True):
            if os.path.isfile(match):
                names.add(Path(match).relative_to(package_dir).as_posix())
    return names


def data_files(package_dir: Path) -> set[str]:
    """Every file but Python sources and caches (hidden files too: a build would drop them)."""
    return {
        p.relative_to(package_dir).as_posix()
        for p in package_dir.rglob("*")
        if p.is_file() and p.suffix not in (".py", ".pyc") and "__pycache__" not in p.parts
    }


def test_every_data_file_of_the_package_is_declared() -> None:
    missing = data_files(PACKAGE_DIR) - shipped(PACKAGE_DIR, declared_patterns())
    assert not missing, f"not in [tool.setuptools.package-data] of pyproject.toml, so not in the wheel: {missing}"
    names = shipped(PACKAGE_DIR, declared_patterns())
    assert "py.typed" in names and any(n.startswith("schemas/") for n in names)


def test_a_kernel_file_in_a_subfolder_would_ship(tmp_path: Path) -> None:
    """A package's files may lie in subfolders (digest lists them at any depth), so an embedded
    package's would have to ship at any depth too; ``kernels/*/*`` took only the first level."""
    package_dir = tmp_path / "webgpu_kernels"
    kernel = package_dir / "kernels" / "com.example.Op"
    shutil.copytree(PACKAGE_DIR / "kernels" / "com.microsoft.QuickGelu", kernel)
    (kernel / "data").mkdir()
    (kernel / "data" / "case-f32.Y.npy").write_bytes(b"\x93NUMPY")
    (kernel / "templates" / "common").mkdir(parents=True)
    (kernel / "templates" / "common" / "helpers.wgsl.jinja").write_text("// helpers\n", "utf-8")

    names = shipped(package_dir, declared_patterns())
    package = {f"kernels/com.example.Op/{name}" for name in [*package_files(kernel), METADATA_FILE]}
    assert package - names == set()


def test_every_dependency_has_a_lower_bound() -> None:
    """Each requirement names the oldest release it works with (CI installs only the newest): the
    suite, run at every lower bound, failed with rich 13.0, huggingface_hub 1.10 and filelock 3.13,
    then allowed. A new dependency says its oldest release too."""
    if not (REPO_ROOT / "pyproject.toml").is_file():
        pytest.skip("needs a checkout or an sdist: pyproject.toml")
    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text("utf-8"))["project"]
    requirements = [*project["dependencies"], *(r for extra in project["optional-dependencies"].values() for r in extra)]
    unbounded = [r for r in requirements if not re.search(r"(>=|==|~=)\s*\d", r.split(";")[0])]
    assert requirements and not unbounded, unbounded


def test_the_build_backend_release_reads_the_license_field() -> None:
    """``license = "Apache-2.0"`` (a PEP 639 SPDX expression) is read by setuptools 77 and later;
    68 to 76 refuse the whole pyproject.toml ("`project.license` must be valid exactly by one
    definition"), so a build with the oldest setuptools `[build-system]` allowed failed
    (76.1.0 failed, 77.0.3 built; 77.0.0 is not on PyPI)."""
    if not (REPO_ROOT / "pyproject.toml").is_file():
        pytest.skip("needs a checkout or an sdist: pyproject.toml")
    config = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text("utf-8"))
    (spec,) = [r for r in config["build-system"]["requires"] if re.match(r"setuptools\b", r)]
    found = re.search(r">=\s*(\d+(?:\.\d+)*)", spec)
    assert found, f"{spec!r} names no oldest release"
    oldest = tuple(int(part) for part in found.group(1).split("."))
    if isinstance(config["project"].get("license"), str):
        assert oldest >= (77, 0, 3), f"{spec!r}: a license given as an SPDX string needs setuptools>=77.0.3"


def test_the_licence_text_ships_with_the_package() -> None:
    """pyproject.toml's ``license-files`` name the text of the licence ``license`` names, so the sdist
    and the wheel (``.dist-info/licenses/``) carry it; the packaging check in .ci/run looks in the wheel."""
    if not (REPO_ROOT / "pyproject.toml").is_file():
        pytest.skip("needs a checkout or an sdist: pyproject.toml")
    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text("utf-8"))["project"]
    assert project["license"] == "Apache-2.0"
    assert project["license-files"] == ["LICENSE"]
    text = (REPO_ROOT / "LICENSE").read_text("utf-8")
    assert "Apache License" in text and "Version 2.0, January 2004" in text
    assert "END OF TERMS AND CONDITIONS" in text  # the whole text, not a pointer to it
