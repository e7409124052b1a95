"""docs/cli.md's claims that no other test pinned, organised by the page's headings.

Each test's docstring quotes the line it holds the command line to; the other claims of the page
are covered where the command's tests live (tests/test_cli*.py, test_locations.py,
test_package_tests.py, test_junit_report.py, test_tuning.py).
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from webgpu_kernels.cli import main
from webgpu_kernels.package import embedded_root
from webgpu_kernels.validation_report import Problem

from cli_helpers import QG_F32, QUICK_GELU
from conftest import PACKAGES_DIR, REPO_ROOT, copy_package

CLI_MD = (REPO_ROOT / "docs" / "cli.md").read_text(encoding="utf-8")


def _commands() -> dict[str, click.Command]:
    ctx = click.Context(main)
    found = {name: main.get_command(ctx, name) for name in main.list_commands(ctx)}
    return {name: command for name, command in found.items() if command is not None}


def _long_options(params: list[click.Parameter]) -> set[str]:
    return {opt for p in params if isinstance(p, click.Option) for opt in (*p.opts, *p.secondary_opts)
            if opt.startswith("--")}  # fmt: skip


# --- Naming a kernel and its inputs -------------------------------------------------------------


def test_every_option_the_page_names_is_an_option_of_the_command_line() -> None:
    """Pins "This page is what the help does not say": every `--option` it names must be one that
    `webgpu-kernels` or one of its commands takes (a renamed option leaves the page behind)."""
    named = set(re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", CLI_MD)) - {"--help"}
    taken = _long_options(main.params)
    for command in _commands().values():
        taken |= _long_options(command.params)
    assert named and named <= taken, sorted(named - taken)


def test_trust_remote_code_is_taken_after_every_command_that_takes_a_kernel_and_download() -> None:
    """Pins "`--trust-remote-code` allows a Hub repository outside the `webgpu-kernels` organisation
    ...; the commands that take a KERNEL and `download` also take it after the command"."""
    commands = _commands()
    takes_kernel = {name for name, command in commands.items()
                    if any(isinstance(p, click.Argument) and p.name in {"kernel", "kernels"} for p in command.params)}  # fmt: skip
    assert {"bench", "explain", "info", "render", "run", "test", "tune"} <= takes_kernel
    for name in sorted(takes_kernel | {"download"}):
        assert "--trust-remote-code" in _long_options(commands[name].params), name
    assert "--trust-remote-code" in _long_options(main.params)


def test_adapter_is_taken_after_exactly_the_commands_the_page_names() -> None:
    """Pins "the commands that open one (`devices`, `run`, ...) also take it after the command"
    (--adapter): the list is the commands' own, no more and no fewer."""
    listed = re.search(r"the commands that open one\s+\(([^)]*)\)", CLI_MD)
    assert listed, "the page no longer lists the commands that take --adapter after them"
    named = set(re.findall(r"`([a-z]+)`", listed[1]))
    taking = {name for name, command in _commands().items() if "--adapter" in _long_options(command.params)}
    assert named == taking, (sorted(named), sorted(taking))
    assert "--adapter" in _long_options(main.params)


def test_completion_shows_the_first_sentence_in_zsh_and_fish_and_names_alone_in_bash() -> None:
    """Pins "completes the commands (zsh and fish show each with its first sentence, cut short; bash
    shows the names) and a command's options": the page had said every shell shows the sentence."""
    from click.shell_completion import BashComplete, FishComplete, ZshComplete

    shown = {}
    for shell in (BashComplete, ZshComplete, FishComplete):
        complete = shell(main, {}, "webgpu-kernels", "_WEBGPU_KERNELS_COMPLETE")
        (item,) = complete.get_completions([], "tes")
        shown[shell.name] = complete.format_completion(item)
        (option,) = complete.get_completions(["run"], "--ad")
        assert option.value == "--adapter", shell.name
    assert shown["bash"] == "plain,test"
    for shell in ("zsh", "fish"):
        assert "Run each package's test.json" in shown[shell] and shown[shell].endswith("..."), shown


# --- JSON output --------------------------------------------------------------------------------

# The "main keys" column of the page's table, top level only (nested keys are the commands' own tests').
TABLE_KEYS = {
    "list": ["op", "variants", "description"],
    "devices": ["index", "name", "vendor", "backend", "type", "description", "chosen", "features", "deviceFeatures",
                "limits", "allLimits"],
    "info": ["op", "domain", "name", "sinceVersion", "origin", "path", "description", "inputs", "outputs",
             "typeConstraints", "attributes", "tunables", "derive", "constants", "variants"],
    "explain": ["op", "chosen", "variants", "outputs", "values", "refused", "tuned", "forced", "tuningEntry"],
    "run": ["op", "adapter", "variant", "forced", "tuned", "seed", "inputs", "attrs", "tunables", "outputs", "timing",
            "reference", "referenceUnavailable", "onnxruntimeMatchedBy", "ok", "checked"],
    "test": ["ok", "strict", "packages"],
    "validate": ["path", "op", "adapter", "isolated", "ok", "errors", "warnings", "uncompiled", "checked", "skipped",
                 "problems", "coverage", "seconds", "strict", "passed"],
    "digest": ["path", "written", "upToDate", "metadata", "changes", "warnings"],
    "bench": ["adapter", "peak_tbps", "cases", "host"],
}  # fmt: skip


def _json_args(command: str) -> list[str]:
    folder = str(embedded_root() / QUICK_GELU)
    return {
        "list": ["list", "--json"], "devices": ["devices", "--json"], "info": ["info", QUICK_GELU, "--json"],
        "explain": ["explain", QUICK_GELU, *QG_F32, "--json"], "run": ["run", QUICK_GELU, *QG_F32, "--json"],
        "test": ["test", QUICK_GELU, "--case", "rank0-f32", "--json"],
        "validate": ["validate", folder, "--no-gpu", "--json"], "digest": ["digest", folder, "--check", "--json"],
        "bench": ["bench", QUICK_GELU, *QG_F32, "--warm-up", "0", "--quick", "--no-host", "--json", "-"],
    }[command]  # fmt: skip


@pytest.mark.parametrize("command", sorted(TABLE_KEYS))
def test_each_commands_json_has_the_tables_top_level(runner: CliRunner, command: str) -> None:
    """Pins "| `list` | list | per kernel: `op`, `variants`, `description` |" and the table's other rows:
    the top level (a list of objects for `list` and `devices`, an object otherwise) and its keys,
    in one JSON document that is all of stdout."""
    result = runner.invoke(main, _json_args(command))
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    if command in ("list", "devices"):
        assert isinstance(data, list) and data
        data = data[0]
    assert isinstance(data, dict)
    missing = [key for key in TABLE_KEYS[command] if key not in data]
    assert not missing, (command, missing, list(data))


def test_the_tables_rows_name_the_keys_pinned_here() -> None:
    """TABLE_KEYS is the page's table: a key added to a command's JSON and pinned here (digest's
    `warnings`) is in its row too, so that the page does not fall behind the test."""
    rows = {m.group(1): m.group(2) for m in re.finditer(r"^\| `(\w+)[^`]*` \| \w+ \|(.*)\|$", CLI_MD, re.M)}
    for command, keys in TABLE_KEYS.items():
        assert command in rows, (command, sorted(rows))
        missing = [key for key in keys if f"`{key}`" not in rows[command]]
        assert not missing, (command, missing)


def test_the_validate_row_names_each_problems_keys() -> None:
    """validate's row lists a problem's keys (`also` added for the pairs sharing an error): as
    Problem.as_dict writes them, no more and no fewer."""
    row = re.search(r"^\| `validate` \| \w+ \|.*?`problems` \(each ([^)]*)\)", CLI_MD, re.M)
    assert row, "validate's row names no problem keys"
    named = re.findall(r"`(\w+)`", row.group(1))
    assert sorted(named) == sorted(Problem("error", "f", "", "m").as_dict()), named


def test_json_figures_that_are_not_numbers_are_strings_and_shapes_lists_of_integers(runner: CliRunner) -> None:
    """Pins "NaN and infinities, which JSON has no numbers for, are the strings `"nan"`, `"inf"` and
    `"-inf"` (a max error, an output's min or max) ... Shapes are lists of integers, dtypes ONNX
    element type names (`float32`, `int64`)"."""
    # Drawn in float64 and rounded to float16, values past 65504 become infinities: QuickGelu(inf) is
    # inf, QuickGelu(-inf) is -inf x 0, NaN.
    result = runner.invoke(main, ["run", QUICK_GELU, "-i", "X=64:f16", "--generate", "X=normal:0:1e6", "--json"])
    assert result.exit_code == 0, result.output
    assert "NaN" not in result.stdout and "Infinity" not in result.stdout  # strict JSON
    y = json.loads(result.stdout)["outputs"]["Y"]
    assert y["nanCount"] > 0 and y["max"] == "inf" and y["mean"] in ("inf", "nan")
    assert y["shape"] == [64] and y["dtype"] == "float16"
    data = json.loads(runner.invoke(main, ["run", QUICK_GELU, *QG_F32, "--json"]).stdout)
    assert data["outputs"]["Y"]["shape"] == [3, 5] and data["outputs"]["Y"]["dtype"] == "float32"
    assert data["inputs"]["X"]["shape"] == [3, 5] and data["inputs"]["X"]["dtype"] == "float32"


def test_json_is_written_when_the_command_ran_and_found_a_problem(runner: CliRunner, tmp_path: Path) -> None:
    """Pins "It is written whenever the command ran, exit 1 included: a failed test, an invalid
    package, a WRONG output are in the document." (`validate` of an invalid package, `digest
    --check` of a stale metadata.json, `test --case` matching nothing.)"""
    package = copy_package(QUICK_GELU, tmp_path / "qg")
    manifest = json.loads((package / "manifest.json").read_text("utf-8"))
    manifest["sinceVersion"] = "one"
    (package / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    for args, verdict in ((["validate", str(package), "--no-gpu"], "ok"), (["digest", str(package), "--check"], "upToDate"),
                          (["test", QUICK_GELU, "--case", "no-such-case"], "ok")):  # fmt: skip
        result = runner.invoke(main, [*args, "--json"])
        assert result.exit_code == 1, (args, result.output)
        assert json.loads(result.stdout)[verdict] is False, args


@pytest.mark.parametrize("command", ["info", "explain", "run", "test", "validate", "digest"])
def test_json_leaves_stdout_empty_when_the_command_could_not_run(runner: CliRunner, command: str) -> None:
    """Pins "When the command could not run (exit 2: a bad option, an unknown kernel or adapter, ...)
    ..., stdout is empty and the error is on stderr"."""
    result = runner.invoke(main, [command, "./nope", "--json"])
    assert result.exit_code == 2 and result.stdout == "", result.output
    assert result.stderr.startswith("error: ./nope: no such folder"), result.stderr
    adapter = runner.invoke(main, ["--adapter", "no-such-adapter", "devices", "--json"])
    assert adapter.exit_code == 2 and adapter.stdout == "" and adapter.stderr, adapter.output


@pytest.mark.parametrize("command", ["tune", "render", "new", "expect"])
def test_the_commands_without_json_refuse_the_option(runner: CliRunner, command: str) -> None:
    """Pins "`tune`, `render`, `new` and `expect` have no JSON.\""""
    result = runner.invoke(main, [command, "x", "--json"])
    assert result.exit_code == 2 and "No such option '--json'" in result.stderr, result.output


# --- Exit status --------------------------------------------------------------------------------


def test_bench_without_shader_f16_skips_each_float16_case_as_test_does(runner: CliRunner, gl_device) -> None:
    """Pins "On an adapter without shader-f16, `bench` and `tune` skip a float16 bench.json case that
    no variant accepts there, as `test` does: a line each (`skipped: this adapter has no shader-f16
    feature`) and a count under the table, no failure ...; `-i` float16 shapes there exit 2"."""
    args = ["--adapter", "gl", "bench", QUICK_GELU, "--case", "tiny-4096", "--warm-up", "0", "--no-host"]
    result = runner.invoke(main, args)
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert "QuickGelu tiny-4096 float16: skipped: this adapter has no shader-f16 feature" in lines, result.stdout
    assert any(line.startswith("QuickGelu tiny-4096 float32: vec4") for line in lines), result.stdout
    assert ("1 of 2 cases skipped (this adapter has no shader-f16 feature): QuickGelu tiny-4096 float16" in lines
            and "failed" not in result.stdout and "error" not in result.stdout), result.stdout  # fmt: skip
    given = runner.invoke(
        main, ["--adapter", "gl", "bench", QUICK_GELU, "-i", "X=8:f16", "--warm-up", "0", "--no-host"]
    )
    assert given.exit_code == 2 and "shader-f16" in given.stderr, given.output


def test_bench_json_has_a_skipped_row_without_figures(runner: CliRunner, gl_device) -> None:
    """Pins "a case skipped on this adapter has `skipped`, the reason, and no figure" (bench --json)."""
    args = ["--adapter", "gl", "bench", QUICK_GELU, "--case", "tiny-4096", "--warm-up", "0", "--no-host"]
    result = runner.invoke(main, [*args, "--json", "-"])
    assert result.exit_code == 0, result.output
    rows = {row["dtype"]: row for row in json.loads(result.stdout)["cases"]}
    skipped, timed = rows["float16"], rows["float32"]
    assert skipped["skipped"] == "this adapter has no shader-f16 feature", skipped
    assert skipped["case"] == "tiny-4096" and skipped["shapes"] == {"X": [4096]}, skipped
    assert not {"error", "median_s", "tbps", "copy_fraction", "error_ok"} & set(skipped), skipped
    assert "skipped" not in timed and timed["median_s"] > 0 and timed["error_ok"] is True, timed


# --- Progress and output streams ----------------------------------------------------------------


def test_test_and_validate_write_nothing_on_stderr_off_a_terminal(runner: CliRunner, tmp_path: Path) -> None:
    """Pins "Where that stream is no terminal (a CI log, a pipe, ...) ... `test` and `validate` write
    nothing there. stdout keeps the results"."""
    folder = tmp_path / "qg"
    shutil.copytree(embedded_root() / QUICK_GELU, folder)
    for args in (["test", str(folder), "--case", "rank0-f32"], ["validate", str(folder)]):
        result = runner.invoke(main, args)
        assert result.exit_code == 0, (args, result.output)
        assert result.stderr == "" and result.stdout, (args, result.stderr)


# --- Tuning -------------------------------------------------------------------------------------


@pytest.mark.filterwarnings("ignore::webgpu_kernels.TuningFileWarning")
def test_a_folder_in_the_tuning_files_place_leaves_a_dry_run_running(runner: CliRunner, tuning_dir: Path) -> None:
    """Pins "A file this user cannot read, or a folder in its place (...), stops `tune` before any
    timing (exit 2; `--dry-run` runs)\": the dry run writes nothing, so nothing is in its way."""
    import webgpu_kernels as wk
    from webgpu_kernels import tuning

    device = wk.get_device()
    path = tuning.cache_for(device.adapter.name, device.adapter.backend).path
    path.mkdir(parents=True)
    args = ["tune", QUICK_GELU, "--case", "tiny-4096", "--dtype", "f32", "--warm-up", "0", "--quick"]
    result = runner.invoke(main, [*args, "--dry-run"])
    assert result.exit_code == 0 and f"dry run: nothing written to {path}" in " ".join(result.stdout.split()), (
        result.output
    )
    assert path.is_dir() and not any(path.iterdir())


def test_exit_status_2_names_what_to_install_with_no_adapter():
    """cli.md's exit status 2: "no WebGPU adapter at all (... names what to install: `apt-get install
    mesa-vulkan-drivers libvulkan1` ...)": the line device.NO_ADAPTER gives (validate exits 2 on it too,
    tests/test_cli_inspect.py)."""
    from webgpu_kernels.device import NO_ADAPTER

    install = re.search(r"`(apt-get install [^`]+)` on Linux without a GPU", CLI_MD)
    assert install is not None and install.group(1) in NO_ADAPTER


def test_onnxruntime_is_a_reference_not_ground_truth():
    """cli.md's `run`: "Its CPU provider's Gelu with `approximate="tanh"` (onnxruntime 1.32.0), on
    1,000,001 float32 points of [-12, -3], is off by up to 7.7e-7 absolute (...): `+6.0e-7` for x = -5.046519,
    whose value is -1.67e-7, and 0 below x = -5.155 ..., where `tests/packages/ai.onnx.Gelu` (on
    lavapipe) stays within 4.2e-9 of a float64 reference." (Figures of that version: others skip.)"""
    ort = pytest.importorskip("onnxruntime")
    if ort.__version__ != "1.32.0":
        pytest.skip(f"the page quotes onnxruntime 1.32.0, this is {ort.__version__}")
    pytest.importorskip("onnx")
    import numpy as np
    from onnx import TensorProto, helper

    import webgpu_kernels as wk

    from references import one_node_session

    vi = helper.make_tensor_value_info
    session = one_node_session(helper.make_node("Gelu", ["X"], ["Y"], approximate="tanh"),
                               [vi("X", TensorProto.FLOAT, ["n"])], [vi("Y", TensorProto.FLOAT, ["n"])], 20)

    def ort_gelu(x: np.ndarray) -> np.ndarray:
        return session.run(None, {"X": x})[0]

    x = np.linspace(-12, -3, 1_000_001, dtype=np.float32)
    xd = x.astype(np.float64)
    exact = xd / (1 + np.exp(-2 * np.sqrt(2 / np.pi) * (xd + 0.044715 * xd**3)))  # no 1 + tanh cancellation
    theirs = ort_gelu(x).astype(np.float64)
    assert np.abs(theirs - exact).max() == pytest.approx(7.7e-7, abs=0.05e-7)
    at = np.float32(-5.046519)
    assert float(ort_gelu(np.array([at]))[0]) == pytest.approx(6.0e-7, abs=0.05e-7)
    assert -5.156 < x[theirs != 0].min() < -5.154  # 0 below x = -5.155
    if "llvmpipe" in wk.get_device().adapter.name:
        ours = wk.load_kernel(PACKAGES_DIR / "ai.onnx.Gelu")({"X": x}, attrs={"approximate": "tanh"})["Y"]
        assert np.abs(ours.astype(np.float64) - exact).max() <= 4.2e-9


# --- new ----------------------------------------------------------------------------------------


def test_new_takes_only_the_version_from_onnxs_schemas(tmp_path) -> None:
    """The page: "only the version comes from onnx's schemas: the roles are `X` and `Y` and there are no
    attributes whatever the op, so for an ONNX op rename the roles to the op's formal names
    (...: Softmax's are `input` and `output`)" """
    onnx = pytest.importorskip("onnx")
    assert "only the version comes from onnx's schemas" in " ".join(CLI_MD.split())
    schema = onnx.defs.get_schema("Softmax", domain="")
    assert ([i.name for i in schema.inputs], [o.name for o in schema.outputs]) == (["input"], ["output"])
    assert "axis" in schema.attributes
    result = CliRunner().invoke(main, ["new", str(tmp_path / "ai.onnx.Softmax")])
    assert result.exit_code == 0, result.output
    manifest = json.loads((tmp_path / "ai.onnx.Softmax" / "manifest.json").read_text("utf-8"))
    assert manifest["sinceVersion"] == schema.since_version
    assert [i["role"] for i in manifest["inputs"]] == ["X"] and [o["role"] for o in manifest["outputs"]] == ["Y"]
    assert "attributes" not in manifest


def test_expect_takes_a_number_for_a_rank_0_output(tmp_path) -> None:
    """The page (`expect`): "values that are no arrays of numbers (a Python or NumPy number is taken
    as a 0-d array, for a rank-0 output)" """
    import numpy as np

    package = tmp_path / "ai.onnx.MatMul"
    shutil.copytree(PACKAGES_DIR / "ai.onnx.MatMul", package)
    cases = json.loads((package / "test.json").read_text("utf-8"))
    case = next(c for c in cases["cases"] if c["name"] == "both1d-9-9-f32")
    want = case["expected"]["Y"]["values"]
    del case["expected"]
    cases["cases"] = [case]
    (package / "test.json").write_text(json.dumps(cases), "utf-8")
    (tmp_path / "ref.py").write_text(
        "import numpy as np\n"
        "def python_float(inputs, attrs):\n"
        "    return {'Y': float(np.dot(inputs['A'].astype(np.float64), inputs['B'].astype(np.float64)))}\n"
        "def numpy_scalar(inputs, attrs):\n"
        "    return {'Y': np.float32(np.dot(inputs['A'], inputs['B']))}\n", "utf-8")  # fmt: skip
    for function in ("python_float", "numpy_scalar"):
        result = CliRunner().invoke(main, ["expect", str(package), "--reference", f"{tmp_path / 'ref.py'}:{function}"])
        assert result.exit_code == 0, result.output
        written = json.loads((package / "test.json").read_text("utf-8"))["cases"][0]["expected"]["Y"]
        got, expected = float(np.reshape(written["values"], ())), float(np.reshape(want, ()))
        assert written["shape"] == [] and abs(got - expected) <= 1e-5 * max(1.0, abs(expected)), written
        tested = CliRunner().invoke(main, ["test", str(package)])
        assert tested.exit_code == 0, tested.output
