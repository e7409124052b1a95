"""validate's checks for package file names that work on Linux and break on macOS or Windows."""

from __future__ import annotations

import unicodedata
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import example, given, settings
from hypothesis import strategies as st

from webgpu_kernels import digests
from webgpu_kernels.cli import main
from webgpu_kernels.portability import LONG_NAME, case_collisions, name_problems, windows_problem
from webgpu_kernels.validation import validate_package

from conftest import copy_package  # noqa: E402

TEMPLATE = "quick-gelu.wgsl.jinja"


@pytest.fixture
def qg(tmp_path: Path) -> Path:
    return copy_package("com.microsoft.QuickGelu", tmp_path / "qg")


def errors_of(root: Path) -> list:
    digests.write_metadata(root)  # the package is otherwise sound: only the names are wrong
    return validate_package(root, gpu=False).errors


def test_two_files_that_differ_only_in_case_are_an_error(qg: Path, runner: CliRunner) -> None:
    (qg / "Quick-Gelu.wgsl.jinja").write_text((qg / TEMPLATE).read_text("utf-8"), encoding="utf-8")
    [error] = errors_of(qg)
    assert error.file == "Quick-Gelu.wgsl.jinja"
    assert "'Quick-Gelu.wgsl.jinja' and 'quick-gelu.wgsl.jinja' differ only in case" in error.message
    assert "macOS and Windows" in error.message and "rename one" in error.message
    result = runner.invoke(main, ["validate", str(qg), "--no-gpu"])
    assert result.exit_code == 1 and "differ only in case" in result.output


def test_folders_that_differ_only_in_case_are_one_error_naming_the_folders(qg: Path) -> None:
    for folder, name in (("Data", "a.txt"), ("data", "a.txt"), ("data", "b.txt")):
        (qg / folder).mkdir(exist_ok=True)
        (qg / folder / name).write_text("notes\n", encoding="utf-8")
    (qg / "Manifest.json").write_text("{}", encoding="utf-8")  # beside manifest.json
    found = {(e.file, e.message.split(" differ")[0]) for e in errors_of(qg)}
    assert found == {("Data", "'Data/' and 'data/'"), ("Manifest.json", "'Manifest.json' and 'manifest.json'")}


def test_names_that_differ_only_in_unicode_normal_form_are_one_file_on_macos_only(qg: Path) -> None:
    """The message had said "differ only in case: on macOS and Windows": Windows (NTFS) keeps the
    normal forms apart; macOS's file systems do not. The names are shown escaped: printed, they
    look the same."""
    nfc = unicodedata.normalize("NFC", "caf\u00e9.txt")
    for name in (nfc, unicodedata.normalize("NFD", nfc)):
        (qg / name).write_text("notes\n", encoding="utf-8")
    [error] = errors_of(qg)
    assert "'cafe\\u0301.txt' and 'caf\\xe9.txt' differ only in their Unicode normal form" in error.message
    assert "on macOS, whose file systems ignore the normal form, they are one file" in error.message
    assert "(on Linux and Windows it works)" in error.message and "on macOS and Windows" not in error.message


def test_names_differing_in_case_and_normal_form_say_which_are_one_file_on_windows() -> None:
    nfc = unicodedata.normalize("NFC", "caf\u00e9.txt")
    nfd = unicodedata.normalize("NFD", nfc)
    [two] = name_problems(["Caf\u00e9.txt", nfd])
    assert "differ only in case and Unicode normal form: on macOS" in two.why
    assert "(on Linux and Windows it works: Windows ignores case but not the normal form)" in two.why
    [three] = name_problems(["Caf\u00e9.txt", nfc, nfd])
    assert len(three.names) == 3 and three.why.endswith("'Caf\\xe9.txt' and 'caf\\xe9.txt' are one file too")


def test_a_name_too_long_for_the_hub_cache_on_windows_is_a_warning(qg: Path) -> None:
    """The Hub cache's package folder on Windows is about 159 characters: a longer name passes the
    260-character path limit there (docs/package-files.md says how the threshold is counted)."""
    ok, long = "n" * (LONG_NAME - 4) + ".txt", "data/" + "n" * (LONG_NAME - 8) + ".txt"
    for name in (ok, long):
        (qg / name).parent.mkdir(exist_ok=True)
        (qg / name).write_text("notes\n", encoding="utf-8")
    assert errors_of(qg) == []
    [warning] = [w for w in validate_package(qg, gpu=False).warnings if w.file in (ok, long)]
    assert warning.file == long and f"is {LONG_NAME + 1} characters long" in warning.message
    assert "Windows' 260-character limit" in warning.message and f"keep names to {LONG_NAME}" in warning.message


def test_a_file_and_a_folder_that_differ_only_in_case_collide() -> None:
    assert case_collisions(["a.txt", "A.txt/x.npy", "b/c", "b/d"]) == [("A.txt/", "a.txt")]
    assert case_collisions(["manifest.json", "metadata.json", "x/y.npy"]) == []


@pytest.mark.parametrize("name, fragment", [
    ("con.npy", "the device CON"),
    ("NUL", "the device NUL"),
    ("lpt1.wgsl.jinja", "the device LPT1"),
    ("Com9.tar.gz", "the device COM9"),
    ("sub/aux/notes.txt", "'aux' is the device AUX"),
    ("notes.", "ends in a dot"),
    ("notes ", "ends in a space"),
    ("a:b.txt", "holds ':'"),
    ("what?.md", "holds '?'"),
    ("tab\there.txt", "holds '\\t'"),
])  # fmt: skip
def test_a_name_windows_refuses_is_an_error(qg: Path, name: str, fragment: str) -> None:
    path = qg / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"x")
    [error] = errors_of(qg)
    assert error.file == name and fragment in error.message, error.message
    assert "cannot be downloaded or loaded on Windows" in error.message


@pytest.mark.parametrize("name", ["console.txt", "com10.npy", "nul-handling.md", "auxiliary", "LPT.txt", "a.b.c"])
def test_names_that_only_look_reserved_are_fine(name: str) -> None:
    assert windows_problem(name) is None


def test_a_pass_naming_its_template_in_another_case_says_which_file_it_meant(qg: Path) -> None:
    (qg / TEMPLATE).rename(qg / "Quick-Gelu.wgsl.jinja")
    errors = errors_of(qg)
    assert errors and all(e.file == "manifest.json" and e.json_path.endswith(".source.shader") for e in errors)
    assert all("'quick-gelu.wgsl.jinja', which is not in the package, but 'Quick-Gelu.wgsl.jinja' is" in e.message
               and "not on Linux" in e.message for e in errors)  # fmt: skip


@pytest.mark.parametrize("statement", ['{% include "Common.wgsl.jinja" %}',
                                       '{% include ["nothere.jinja", "Common.wgsl.jinja"] %}',
                                       '{% import "Common.wgsl.jinja" as c %}',
                                       '{% from "Common.wgsl.jinja" import m %}'])  # fmt: skip
def test_an_include_naming_a_template_in_another_case_is_an_error_at_its_line(qg: Path, statement: str) -> None:
    (qg / "common.wgsl.jinja").write_text("{% macro m() %}{% endmacro %}// common\n", encoding="utf-8")
    template = qg / TEMPLATE
    template.write_text("// first line\n" + statement + "\n" + template.read_text("utf-8"), encoding="utf-8")
    [error] = errors_of(qg)
    assert (error.file, error.line) == (TEMPLATE, 2)
    assert "'Common.wgsl.jinja', which is not in the package, but 'common.wgsl.jinja' is" in error.message


def test_an_include_in_an_included_template_is_checked_too(qg: Path) -> None:
    (qg / "outer.wgsl.jinja").write_text('{% include "Inner.wgsl.jinja" %}\n', encoding="utf-8")
    (qg / "inner.wgsl.jinja").write_text("// inner\n", encoding="utf-8")
    template = qg / TEMPLATE
    template.write_text('{% include "outer.wgsl.jinja" %}\n' + template.read_text("utf-8"), encoding="utf-8")
    [error] = errors_of(qg)
    assert (error.file, error.line) == ("outer.wgsl.jinja", 1) and "'Inner.wgsl.jinja'" in error.message


@pytest.mark.parametrize("data", ["Vec4-2x64-f32.Y.npy", "data/Vec4-2x64-f32.Y.npy"])
def test_a_data_file_named_in_another_case_says_which_file_it_meant(qg: Path, data: str) -> None:
    """test.json's `"file"` had got only 'file not found' where the templates say which file was meant."""
    import json

    (qg / "data").mkdir()
    (qg / "vec4-2x64-f32.Y.npy").rename(qg / data)
    tests = json.loads((qg / "test.json").read_text("utf-8"))
    assert tests["cases"][0]["expected"]["Y"] == {"file": "vec4-2x64-f32.Y.npy"}
    tests["cases"][0]["expected"]["Y"]["file"] = data.lower()
    (qg / "test.json").write_text(json.dumps(tests), encoding="utf-8")
    [error] = errors_of(qg)
    assert (error.file, error.json_path, error.case) == ("test.json", "cases[0].expected.Y.file", "vec4-2x64-f32")
    assert f"{data.lower()!r}, which is not in the package, but {data!r} is" in error.message, error.message


# --- properties against an independent model (hypothesis) ---------------------------------------

_RESERVED = {"CON", "PRN", "AUX", "NUL", "CONIN$", "CONOUT$"} | {p + n for p in ("COM", "LPT") for n in "123456789¹²³"}
_letters = ["a", "A", "\u00e9", "\u00c9", "e\u0301", "E\u0301"]  # collide often: case, normal form, both
_segments = (st.sampled_from(_letters)
             | st.lists(st.sampled_from([*_letters, "b", ".", " ", "?", "-"]), min_size=1, max_size=3).map("".join)
             | st.sampled_from(["con", "Nul.txt", "com1 .x", "lpt", "CONOUT$"]))  # fmt: skip


def _mac(path: str) -> str:  # macOS: case and the Unicode normal form ignored
    return unicodedata.normalize("NFC", path).lower()


def _model_windows_refuses(name: str) -> bool:
    for segment in name.split("/"):
        if any(c in '<>:"\\|?*' or ord(c) < 32 for c in segment) or segment[-1] in ". ":
            return True
        if segment.split(".")[0].rstrip(" ").upper() in _RESERVED:
            return True
    return False


@st.composite
def package_names(draw: st.DrawFn) -> list[str]:
    names = draw(st.lists(st.lists(_segments, min_size=1, max_size=3).map("/".join), min_size=1, max_size=6,
                          unique=True))  # fmt: skip
    # no file may be a folder of another (Linux cannot hold both)
    return [n for n in names if not any(other.startswith(n + "/") for other in names)]


@settings(max_examples=250, deadline=None)
@given(package_names())
# Sub/A and Sub/a (in one folder) were not reported because Sub and sub collide: renaming sub left them.
@example(["Sub/A", "Sub/a", "sub/x"])
def test_name_problems_report_each_colliding_group_once_and_say_on_which_systems(names: list[str]) -> None:
    problems = name_problems(names)
    groups = [p for p in problems if len(p.names) > 1]
    # model: names (files and the folders above them) in one folder (spelt exactly alike) that one
    # system takes as one file; names in folders spelt apart are those folders' collision
    paths = {"/".join(n.split("/")[:d]) for n in names for d in range(1, n.count("/") + 2)}
    by_folder: dict[tuple[str, str], set[str]] = {}
    for path in paths:
        folder = path.rpartition("/")[0]
        by_folder.setdefault((folder, _mac(path)), set()).add(path)
    want = sorted(sorted(g) for g in by_folder.values() if len(g) > 1)
    assert sorted(sorted(n.rstrip("/") for n in g.names) for g in groups) == want
    for problem in groups:
        paths_of = [n.rstrip("/") for n in problem.names]
        assert problem.file == paths_of[0] and "on macOS" in problem.why
        windows = [g for g in _grouped_by(paths_of, str.lower) if len(g) > 1]
        if windows == [paths_of]:
            assert "on macOS and Windows" in problem.why
        elif not windows:
            assert "on Linux and Windows it works" in problem.why and "on macOS and Windows" not in problem.why
        else:
            assert "on macOS and Windows" not in problem.why and "Windows it works" not in problem.why
            for g in windows:
                assert " and ".join(map(ascii, sorted(g))) + " are one file too" in problem.why
    refused = [p.names[0] for p in problems if len(p.names) == 1]
    assert refused == [n for n in names if _model_windows_refuses(n)]
    assert all("cannot be downloaded or loaded on Windows" in p.why for p in problems if len(p.names) == 1)


def _grouped_by(paths: list[str], key) -> list[list[str]]:
    out: dict[str, list[str]] = {}
    for p in sorted(paths):
        out.setdefault(key(p), []).append(p)
    return list(out.values())


def test_a_file_name_that_is_not_utf8_is_an_error_not_a_crash(qg: Path) -> None:
    """A name of bytes that are not UTF-8 (Linux takes any; Python reads them as lone surrogates)
    made validate's file name checks fail "unexpectedly" with a UnicodeEncodeError traceback, where
    Windows' length of it was counted in UTF-16."""
    (qg / "notes.txt").write_text("notes\n", encoding="utf-8")
    digests.write_metadata(qg)
    with open(bytes(qg) + b"/\xff\xfe.wgsl.jinja", "w", encoding="utf-8") as file:
        file.write("{{ x }}")
    errors = validate_package(qg, gpu=False).errors
    assert not [e for e in errors if "unexpectedly" in e.message], [e.message for e in errors]
    [error] = [e for e in errors if e.file == "\udcff\udcfe.wgsl.jinja" and "not UTF-8" in e.message]
    assert "b'\\xff\\xfe.wgsl.jinja'" in error.message and "rename it" in error.message
