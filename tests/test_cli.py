"""cli.py, kernel_arguments.py and command_output.py: the options every command shares (-i, --attr,
--generate, seconds, dtypes), kernel arguments, error reports and the console's output, through
click's CliRunner on real shaders (lavapipe in CI)."""

from __future__ import annotations

import json
import math
import os

import click
import numpy as np
import pytest
from click.testing import CliRunner

import webgpu_kernels as wk
from webgpu_kernels.cli import main
from webgpu_kernels.kernel_arguments import InputSpec, parse_input_spec, parse_value
from webgpu_kernels.package import embedded_root

from cli_helpers import BIAS_ADD, QG_F32, QUICK_GELU, assert_error, invoke, invoke_json

# --- parsing ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("X=2x64x320:f16", InputSpec("X", (2, 64, 320), "float16")),
        ("bias=320:float32", InputSpec("bias", (320,), "float32")),
        ("X=:f32", InputSpec("X", (), "float32")),
        ("X=scalar:F32", InputSpec("X", (), "float32")),
        ("X=0x3:f64", InputSpec("X", (0, 3), "float64")),
        ("X=4:int32", InputSpec("X", (4,), "int32")),
        ("X=4:bf16", InputSpec("X", (4,), "bfloat16")),
    ],
)
def test_parse_input_spec(text: str, expected: InputSpec) -> None:
    assert parse_input_spec(text) == expected


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("X2x3:f32", "is not NAME=DIMS:DTYPE"),
        ("X=2x3", "has no dtype"),
        ("X=2x3:f17", "unknown dtype 'f17'"),
        ("X=2xax3:f32", "bad dimension 'a'"),
        ("X=2x-1:f32", "bad dimension '-1'"),
        ("X=2x:f32", "bad dimension ''"),
        ("X=2x²:f32", "bad dimension '²'"),  # str.isdigit() takes it; int() had raised
        ("=2:f32", "is not NAME=DIMS:DTYPE"),
    ],
)
def test_parse_input_spec_rejects(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_input_spec(text)


def test_parse_value() -> None:
    assert parse_value("1.0") == 1.0 and isinstance(parse_value("1.0"), float)
    assert parse_value("3") == 3 and isinstance(parse_value("3"), int)
    assert parse_value("true") is True
    assert parse_value('"s"') == "s"
    assert parse_value("[1, 2]") == [1, 2]
    assert parse_value("vec4") == "vec4"  # not JSON: the string itself
    # the case files' spellings are numbers, as JSON's NaN and Infinity are (they had stayed strings,
    # so alpha=nan was "expected a number, got str 'nan'" where NaN got "expected a finite number")
    assert math.isnan(parse_value("nan")) and parse_value("inf") == math.inf and parse_value("-INF") == -math.inf
    assert math.isnan(parse_value("NaN")) and parse_value("-Infinity") == -math.inf


def test_version(runner: CliRunner) -> None:
    assert wk.__version__ in invoke(runner, "--version").stdout


# --- kernel arguments ---------------------------------------------------------------------------------


@pytest.mark.parametrize("command", [["info"], ["validate", "--no-gpu"], ["test", "--case", "rank0-f32"],
                                     ["explain", "-i", "X=4:f32"]])  # fmt: skip
def test_an_embedded_id_that_is_also_a_package_folder_here_is_refused(runner: CliRunner, tmp_path, monkeypatch,
                                                                        command) -> None:  # fmt: skip
    """Neither reading may stand in for the other silently: the embedded id had won, so a CI
    script testing its package folder named by the op id passed a broken copy (an author's trial);
    the other way round, a copy being edited would stand in for the shipped kernel. ``./<id>``
    names the folder; a same-named folder that holds no package does not clash."""
    from conftest import copy_package

    copy = copy_package(QUICK_GELU, tmp_path / QUICK_GELU)
    manifest = json.loads((copy / "manifest.json").read_text())
    manifest["description"] = "THE LOCAL COPY"
    (copy / "manifest.json").write_text(json.dumps(manifest))
    (copy / "metadata.json").unlink()  # an author's work in progress
    monkeypatch.chdir(tmp_path)
    name, *options = command
    result = runner.invoke(main, [name, QUICK_GELU, *options])
    assert result.exit_code == 2, result.output
    assert f"names both the embedded kernel and the package folder ./{QUICK_GELU} here" in result.output
    assert "Traceback" not in result.output
    if name == "info":
        assert "THE LOCAL COPY" in invoke(runner, "info", f"./{QUICK_GELU}").stdout
        assert "has no metadata.json" in runner.invoke(main, ["validate", f"./{QUICK_GELU}", "--no-gpu"]).output
        (copy / "manifest.json").rename(copy / "manifest.json.away")  # no package there now: the embedded one
        assert invoke_json(runner, "info", QUICK_GELU)["origin"] == "embedded"
        monkeypatch.chdir(embedded_root())  # the folder is the embedded package itself: nothing to tell apart
        assert invoke_json(runner, "info", QUICK_GELU)["origin"] == "embedded"


def test_a_folder_named_like_a_hub_repository_is_ambiguous(runner: CliRunner, tmp_path, monkeypatch) -> None:
    """`someone-else/com.microsoft.QuickGelu` read the folder of that name here, unverified, where
    Python's get_kernel reads the Hub repository, which another organisation's needs trust
   . `./org/op` and a path of two slashes name the folder."""
    from conftest import copy_package

    monkeypatch.chdir(tmp_path)
    copy_package(QUICK_GELU, tmp_path / "someone-else" / QUICK_GELU)
    ref = f"someone-else/{QUICK_GELU}"
    result = runner.invoke(main, ["info", ref])
    assert result.exit_code == 2 and f"{ref!r} reads both as a Hub repository id (org/op) and as the package folder ./{ref}" in result.output
    assert invoke_json(runner, "info", f"./{ref}")["origin"] == "local"
    assert invoke_json(runner, "info", str(tmp_path / ref))["origin"] == "local"
    for command in (["validate", ref, "--no-gpu"], ["digest", "--check", ref]):  # these read only folders
        assert runner.invoke(main, command).exit_code == 0, command


@pytest.mark.parametrize("ref, kind, repo, pin", [
    (QUICK_GELU, "embedded", "", ""), ("./pkg", "folder", "", ""), ("/no/such/pkg", "folder", "", ""),
    ("~/pkg", "folder", "", ""), ("webgpu-kernels/com.x.Op", "hub", "webgpu-kernels/com.x.Op", ""),
    ("org/op@v3", "hub", "org/op", "v3"), ("org/op@main", "hub", "org/op", "main"), ("com.x.Op", "unknown", "", ""),
])  # fmt: skip
def test_one_rule_reads_every_kernel_argument(ref, kind, repo, pin) -> None:
    from webgpu_kernels.kernel_arguments import classify_kernel_ref

    where = classify_kernel_ref(ref)
    assert (where.kind, where.repo, where.pin) == (kind, repo, pin)


@pytest.mark.parametrize("command", ["info", "test"])
def test_a_mistyped_folder_that_reads_as_a_hub_repository_says_so(runner, tmp_path, monkeypatch, command) -> None:
    """`tests/demo.Gathr` (no such folder; `tests` is one) got only the trust refusal, whose advice,
    --trust-remote-code, fetches `tests/demo.Gathr` from the Hub."""
    (tmp_path / "tests").mkdir()
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(main, [command, "tests/demo.Gathr"])
    assert result.exit_code == 2, result.output
    text = " ".join(result.output.split())
    assert "refusing to load 'tests/demo.Gathr'" in text
    assert "there is no folder 'tests/demo.Gathr' here (a folder 'tests' is)" in text and "./tests/demo.Gathr" in text
    plain = runner.invoke(main, [command, "someorg/demo.Gathr"])  # no folder of that name: no note
    assert plain.exit_code == 2 and "no folder" not in plain.output
    pinned = " ".join(runner.invoke(main, [command, "tests/demo.Gathr@v2"]).output.split())
    assert "write ./tests/demo.Gathr " in pinned + " " and "@v2 here" not in pinned  # a ./ path takes no pin
    # three parts are no repository id (one slash): a missing folder, trusted or not, exit 2 in `test` as in `info`
    deep = runner.invoke(main, ["--trust-remote-code", command, "tests/packages/demo.Gathr"])
    assert deep.exit_code == 2 and "tests/packages/demo.Gathr: no such folder" in deep.output, deep.output


@pytest.mark.parametrize("args", [["--trust-remote-code", "info", "nodir/x/pkg"], ["info", "nodir/x/pkg"]])
def test_a_missing_path_of_three_parts_is_a_missing_folder_not_a_hub_repository(runner: CliRunner, args) -> None:
    """A repository id has one slash: `nodir/x/pkg` with --trust-remote-code got "version= and
    revision= apply to Hub repositories", without it the Python trust advice."""
    result = runner.invoke(main, args)
    assert result.exit_code == 2, result.output
    assert "nodir/x/pkg: no such folder" in result.output and "version=" not in result.output


# --- options and errors -------------------------------------------------------------------------------


@pytest.mark.parametrize("spec, fragment", [
    ("Z=uniform:0:1", "--generate names 'Z', which no -i/--input gives (-i inputs: X)"),
    ("X=uniform:1:0", "'X=uniform:1:0': low is above high"),
    ("X=uniform:-1e308:1e308", "high - low is past float64's range"),  # every value inf
    ("X=normal:0:-1", "std in 'X=normal:0:-1' must be at least 0"),
    ("X=uniform:0:inf", "high in 'X=uniform:0:inf' must be a finite number, got 'inf'"),
    ("X=uniform:a:1", "low in 'X=uniform:a:1' must be a finite number, got 'a'"),
    ("X=poisson:3", "write X=uniform:LOW:HIGH or X=normal:MEAN:STD"),
    ("X", "is not NAME=uniform:LOW:HIGH"),
])  # fmt: skip
def test_run_generate_refuses_what_it_cannot_draw(runner: CliRunner, spec: str, fragment: str) -> None:
    result = runner.invoke(main, ["run", QUICK_GELU, "-i", "X=4:f32", "--generate", spec])
    assert result.exit_code == 2 and fragment in result.output and "Traceback" not in result.output, result.output


@pytest.mark.parametrize("command", [["test", "com.microsoft.QuickGelu", "--case", "vec4-2x64-f32"],
                                     ["run", "com.microsoft.QuickGelu", "-i", "X=4:f32"]])
def test_a_bad_no_tuning_setting_is_the_callers_error_in_every_command(runner: CliRunner, monkeypatch,
                                                                        command: list[str]) -> None:
    """`test` had reported each case as an ERROR of the package (exit 1, a JUnit error per case) where
    run, explain and bench refuse the setting (exit 2)."""
    monkeypatch.setenv(wk.tuning.DISABLE_ENV, "maybe")
    result = runner.invoke(main, command)
    assert result.exit_code == 2, result.output
    assert "WEBGPU_KERNELS_NO_TUNING" in result.output and "ERROR" not in result.output


def test_unknown_kernel(runner: CliRunner) -> None:
    for command in (["info", "com.microsoft.Nope"], ["run", "com.microsoft.Nope", "-i", "X=2:f32"]):
        assert_error(runner.invoke(main, command), "no embedded kernel 'com.microsoft.Nope'", QUICK_GELU)


def test_missing_folder(runner: CliRunner, tmp_path) -> None:
    assert_error(runner.invoke(main, ["info", str(tmp_path / "nope")]), f"{tmp_path / 'nope'}: no such folder")
    assert_error(runner.invoke(main, ["info", str(tmp_path)]), "no manifest.json")


def test_float64_input(runner: CliRunner) -> None:
    """The command line says how to write the dtype there; a Python caller's message no longer
    does (it had named `-i NAME=DIMS:f32` to Python users)."""
    for command in ("explain", "render", "run"):
        result = runner.invoke(main, [command, QUICK_GELU, "-i", "X=2x3:f64"])
        assert_error(result, "argument 'X'", "float64", "['float32', 'float16']",
                     "on the command line, a dtype T allows: -i X=DIMS:f32 or -i X=DIMS:f16")  # fmt: skip
        assert ".astype" not in result.stderr
    with pytest.raises(wk.errors.DTypeError) as info:
        wk.get_kernel(QUICK_GELU)({"X": np.zeros(3)})
    assert ".astype(np.float32)" in str(info.value) and "command line" not in str(info.value)


@pytest.mark.parametrize("dtype", ["bf16", "i32"])
def test_a_dtype_outside_the_constraint_on_the_command_line_says_which_to_type(runner: CliRunner, dtype: str) -> None:
    """`-i X=2x3:bf16` ended in "(convert with .astype(np.float32))", Python's advice."""
    for command in ("explain", "run", "bench"):
        result = runner.invoke(main, [command, QUICK_GELU, "-i", f"X=2x3:{dtype}", *(["--warm-up", "0"] if command == "bench" else [])])
        assert_error(result, "argument 'X'", "['float32', 'float16']",
                     "on the command line, a dtype T allows: -i X=DIMS:f32 or -i X=DIMS:f16")  # fmt: skip
        assert ".astype" not in result.stderr


@pytest.mark.parametrize(("option", "text", "says"), [
    ("--attr", "alpha=true", "(on the command line: --attr alpha=1, a boolean is not a number here)"),
    ("--attr", "alpha=false", "(on the command line: --attr alpha=0, a boolean is not a number here)"),
    ("--tunable", "WORKGROUP_SIZE=true", "(on the command line: --tunable WORKGROUP_SIZE=1, a boolean is not a number here)"),
])  # fmt: skip
def test_a_boolean_for_a_number_on_the_command_line_says_what_to_type(runner: CliRunner, option, text, says) -> None:
    """`--attr keepdims=false` said "(pass 0: a boolean is not a number here)", the Python call's
    advice, which reads oddly after an option (a review)."""
    for command in ("explain", "run"):
        result = runner.invoke(main, [command, QUICK_GELU, "-i", "X=2x3:f32", option, text])
        assert_error(result, f"argument '{text.partition('=')[0]}'", says)
        assert "pass " not in result.stderr
    with pytest.raises(wk.errors.AttributeValueError) as info:  # Python's advice stays Python's
        wk.get_kernel(QUICK_GELU)({"X": np.zeros(3, np.float32)}, attrs={"alpha": True})
    assert str(info.value).endswith("(pass 1: a boolean is not a number here)")


def test_a_boolean_inside_a_list_attribute_is_told_the_list_to_write(runner: CliRunner, tmp_path) -> None:
    """`--attr perm=[1,true]` was told "--attr perm=1", and Python "pass 1", and a case "write 1 in
    the case's attributes": each would replace the list with a number (a review)."""
    from conftest import PACKAGES_DIR

    transpose = str(PACKAGES_DIR / "demo.Transpose")
    for command in ("explain", "run"):
        result = runner.invoke(main, [command, transpose, "-i", "data=2x3:f32", "--attr", "perm=[1,true]"])
        assert_error(result, "argument 'perm'", "(on the command line: --attr perm=[1,1], a boolean is not a number here)")
    with pytest.raises(wk.errors.AttributeValueError) as info:
        wk.load_kernel(transpose)({"data": np.zeros((2, 3), np.float32)}, attrs={"perm": [True, 0]})
    assert str(info.value).endswith("(pass [1, 0]: a boolean is not a number here)"), str(info.value)
    assert (info.value.number_meant, info.value.list_meant) == (1, [1, 0])


def test_two_dtypes_for_one_type_variable_on_the_command_line_say_the_i_that_makes_them_one(runner: CliRunner) -> None:
    """`-i X=...:f16 -i bias=...:f32` ended in "convert 'bias' with .astype(np.float16)", Python's
    advice, which -i cannot follow (a review)."""
    for command in ("explain", "run"):
        result = runner.invoke(main, [command, BIAS_ADD, "-i", "X=2x3x8:f16", "-i", "bias=8:f32", "-i", "skip=2x3x8:f16"])
        assert_error(result, "argument 'bias': expected float16 like 'X'",
                     "(on the command line, type variable T takes one dtype: -i bias=DIMS:f16 like 'X')")  # fmt: skip
        assert ".astype" not in result.stderr
        result = runner.invoke(main, [command, BIAS_ADD, "-i", "X=2x3x8:f32", "-i", "bias=8:f32", "-i", "skip=2x3x8:f16"])
        assert_error(result, "(on the command line, type variable T takes one dtype: -i skip=DIMS:f32 like 'X' and 'bias')")
    with pytest.raises(wk.errors.DTypeError) as info:  # Python's advice stays Python's
        x = np.zeros((1, 2, 8), np.float16)
        wk.get_kernel(BIAS_ADD)({"X": x, "bias": np.zeros(8, np.float32), "skip": x})
    assert "convert 'bias' with .astype(np.float16)" in str(info.value)
    assert (info.value.type_variable, info.value.bound_by, info.value.bound_dtype) == ("T", ("X",), "float16")


def test_a_missing_input_on_the_command_line_says_how_to_give_it(runner: CliRunner) -> None:
    """`run com.microsoft.BiasAdd -i X=...` said only "argument 'bias': expected a T tensor (float32
    or float16), got nothing", never how the command line gives one (an author's friction)."""
    for command in ("explain", "render", "run"):
        result = runner.invoke(main, [command, BIAS_ADD, "-i", "X=2x3x8:f16"])
        assert_error(result, "argument 'bias'", "got nothing", "on the command line: -i bias=DIMS:f32 (or f16)")
    result = runner.invoke(main, ["run", QUICK_GELU])
    assert_error(result, "argument 'X'", "on the command line: -i X=DIMS:f32 (or f16)")


def test_contract_errors(runner: CliRunner) -> None:
    assert_error(runner.invoke(main, ["run", BIAS_ADD, "-i", "X=2x3x4:f32", "-i", "bias=4:f32"]),
                 "argument 'skip'", "got nothing")  # fmt: skip
    assert_error(runner.invoke(main, ["explain", BIAS_ADD, "-i", "X=2x3x4:f32", "-i", "bias=4:f16", "-i",
                                      "skip=2x3x4:f32"]), "argument 'bias'", "float16")  # fmt: skip
    assert_error(runner.invoke(main, ["run", BIAS_ADD, "-i", "X=3x4:f32", "-i", "bias=4:f32", "-i", "skip=3x4:f32"]),
                 "argument 'X'", "rank 3")  # fmt: skip
    assert_error(runner.invoke(main, ["run", QUICK_GELU, "-i", "X=3:f32", "--attr", "beta=1"]), "'beta'")
    assert_error(runner.invoke(main, ["run", QUICK_GELU, "-i", "X=3:f32", "--attr", "alpha=fast"]),
                 "argument 'alpha'", "a number")  # fmt: skip


def test_selection_errors(runner: CliRunner) -> None:
    result = runner.invoke(main, ["run", QUICK_GELU, *QG_F32, "--variant", "vec4"])
    assert_error(result, "variant 'vec4' cannot run this call", "vec4Ok")
    assert_error(runner.invoke(main, ["render", QUICK_GELU, *QG_F32, "--variant", "nope"]), "no variant 'nope'")
    for command in ("run", "explain", "render"):  # a misspelt id names the one meant
        result = runner.invoke(main, [command, QUICK_GELU, *QG_F32, "--variant", "scalr"])
        assert_error(result, "no variant 'scalr' (did you mean 'scalar'?)")
        # an empty id is an unknown one too, not "no variant forced" (bench's slip)
        assert_error(runner.invoke(main, [command, QUICK_GELU, *QG_F32, "--variant", ""]), "no variant ''")
    result = runner.invoke(main, ["run", BIAS_ADD, "-i", "X=2x3x4:f32", "-i", "bias=5:f32", "-i", "skip=2x3x4:f32"])
    assert_error(result, "no variant can run this call", "dim(shapes.bias, 0) == dim(shapes.X, 2)")


@pytest.mark.parametrize(
    ("spec", "message"),
    [("X2x3", "is not NAME=DIMS:DTYPE"), ("X=2x3:f17", "unknown dtype 'f17'"), ("X=2xa:f32", "bad dimension 'a'")],
)
def test_bad_input_spec(runner: CliRunner, spec: str, message: str) -> None:
    result = runner.invoke(main, ["run", QUICK_GELU, "--input", spec])
    assert result.exit_code == 2
    assert "Invalid value for '--input'" in result.stderr and message in result.stderr
    assert "Traceback" not in result.stderr


def test_usage_errors(runner: CliRunner) -> None:
    result = runner.invoke(main, ["run", QUICK_GELU, "-i", "X=2:f32", "-i", "X=3:f32"])
    assert result.exit_code == 2 and "given twice" in result.stderr
    result = runner.invoke(main, ["explain", QUICK_GELU, "-i", "X=2:f32", "--attr", "alpha"])
    assert result.exit_code == 2 and "is not NAME=VALUE" in result.stderr
    result = runner.invoke(main, ["frobnicate"])
    assert result.exit_code == 2 and "No such command" in result.stderr
    result = runner.invoke(main, ["run", QUICK_GELU, "--repeat", "-1"])
    assert result.exit_code == 2


@pytest.mark.parametrize(("command", "option"), [("bench", "--warm-up"), ("tune", "--warm-up"), ("test", "--timeout"),
                                                 ("validate", "--timeout")])  # fmt: skip
@pytest.mark.parametrize("value", ["nan", "inf"])
def test_a_seconds_option_refuses_nan_and_infinity(runner: CliRunner, command, option, value) -> None:
    """click's FloatRange passes NaN (every comparison is false) and infinity: `--warm-up inf` warmed up
    for ever, `--timeout nan` meant no timeout."""
    result = runner.invoke(main, [command, QUICK_GELU, option, value])
    assert result.exit_code == 2, result.output
    assert f"Invalid value for '{option}'" in result.output and "not a finite number" in result.output


@pytest.mark.parametrize("command", ["bench", "tune"])
def test_an_unknown_dtype_filter_is_named(runner: CliRunner, command) -> None:
    """`--dtype fp16` matched no case and the error blamed --case/--tag/--dtype together."""
    result = runner.invoke(main, [command, QUICK_GELU, "--dtype", "fp16"])
    assert result.exit_code == 2, result.output
    assert "unknown dtype 'fp16'" in result.output and "f16" in result.output


# --- --adapter after the command ----------------------------------------------------------------------

QG_FOLDER = str(embedded_root() / QUICK_GELU)

#: The commands that open an adapter, with arguments that reach its choice quickly.
ADAPTER_COMMANDS = {
    "devices": [],
    "explain": [QUICK_GELU, *QG_F32],
    "render": [QUICK_GELU, *QG_F32],
    "run": [QUICK_GELU, *QG_F32],
    "bench": [QUICK_GELU, "--case", "tiny-4096", "--warm-up", "0", "--no-host"],
    "tune": [QUICK_GELU, "--case", "tiny-4096"],
    "test": [QUICK_GELU],
    "validate": [QG_FOLDER],
    "upload": [QG_FOLDER, f"webgpu-kernels/{QUICK_GELU}", "--dry-run"],
}


def test_adapter_is_an_option_of_exactly_the_commands_that_open_one(runner: CliRunner) -> None:
    """`tune KERNEL --adapter gl` had been "No such option": users put options after the command.
    Commands that never open an adapter do not take it."""
    ctx = click.Context(main)
    taking = set()
    for name in main.list_commands(ctx):
        command = main.get_command(ctx, name)
        assert command is not None
        if any(isinstance(p, click.Option) and "--adapter" in p.opts for p in command.params):
            taking.add(name)
    assert taking == set(ADAPTER_COMMANDS)
    for name in ADAPTER_COMMANDS:
        assert "--adapter NAME|BACKEND" in invoke(runner, name, "--help").stdout, name


@pytest.mark.parametrize("command", sorted(ADAPTER_COMMANDS))
def test_adapter_after_the_command_reaches_the_adapter_choice(runner: CliRunner, monkeypatch, command: str) -> None:
    """A name that matches no adapter, after the command, is the no-such-adapter error naming it, as
    before the command."""
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # upload: nothing is sent before its checks
    result = runner.invoke(main, [command, *ADAPTER_COMMANDS[command], "--adapter", "no-such-adapter"])
    assert_error(result, "no adapter matches 'no-such-adapter'")


def test_adapter_after_run_picks_that_adapter(runner: CliRunner, gl_device) -> None:
    for request, backend in (("vulkan", "Vulkan"), ("gl", "OpenGL")):
        data = invoke_json(runner, "run", QUICK_GELU, *QG_F32, "--adapter", request)
        assert f"({backend}, " in data["adapter"] and data["ok"] is True, (request, data["adapter"])


def test_adapter_after_the_command_overrides_the_environment(runner: CliRunner, monkeypatch, gl_device) -> None:
    monkeypatch.setenv("WEBGPU_KERNELS_ADAPTER", "gl")
    assert "(OpenGL, " in invoke_json(runner, "run", QUICK_GELU, *QG_F32)["adapter"]
    assert "(Vulkan, " in invoke_json(runner, "run", QUICK_GELU, *QG_F32, "--adapter", "vulkan")["adapter"]


def test_adapter_before_and_after_the_command(runner: CliRunner, gl_device) -> None:
    """The same adapter in both places is taken; two different ones are refused, naming both."""
    data = invoke_json(runner, "--adapter", "gl", "run", QUICK_GELU, *QG_F32, "--adapter", "GL")
    assert "(OpenGL, " in data["adapter"]
    result = runner.invoke(main, ["--adapter", "vulkan", "run", QUICK_GELU, *QG_F32, "--adapter", "gl"])
    assert result.exit_code == 2 and result.stdout == "", result.output
    assert "--adapter" in result.stderr and "'vulkan'" in result.stderr and "'gl'" in result.stderr, result.stderr
    assert "Traceback" not in result.stderr


# --- output -------------------------------------------------------------------------------------------


def test_package_text_reaches_the_terminal_without_control_characters(runner: CliRunner, package_folder) -> None:
    """A description with ESC sequences (retitle the window, clear the screen) was printed as it
    was by `info`; each control character is now one U+FFFD. JSON escapes them by itself."""
    manifest = json.loads((package_folder / "manifest.json").read_text())
    manifest["description"] = "before \x1b]0;owned\x07 \x1b[2J after"
    (package_folder / "manifest.json").write_text(json.dumps(manifest))
    out = invoke(runner, "info", str(package_folder)).stdout
    assert "\x1b" not in out and "\x07" not in out and "before \ufffd]0;owned\ufffd \ufffd[2J after" in out
    assert json.loads(invoke(runner, "info", str(package_folder), "--json").stdout)["description"] == (
        manifest["description"])


def test_columns_zero_does_not_silence_the_output() -> None:
    """rich took COLUMNS=0 (a terminal of unknown size) for a width of 0: every table, verdict and
    error message came out empty, with only the exit status left."""
    runner = CliRunner(env={"COLUMNS": "0"})
    result = runner.invoke(main, ["list"])
    assert result.exit_code == 0 and "com.microsoft.QuickGelu" in result.output, result.output
    result = runner.invoke(main, ["run", "no.such.Op", "-i", "X=4:f32"])
    assert result.exit_code == 2 and "no embedded kernel 'no.such.Op'" in result.output, result.output


@pytest.mark.parametrize("term, live", [("xterm-256color", True), ("dumb", False)])
def test_progress_is_live_only_on_a_terminal_that_redraws(monkeypatch, term: str, live: bool) -> None:
    """On TERM=dumb rich draws no live progress, and the lines written where progress cannot redraw
    were not written either: a tune search of minutes printed nothing until its case ended."""
    import io

    from rich.console import Console

    from webgpu_kernels.command_output import is_live

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    monkeypatch.setenv("TERM", term)
    monkeypatch.delenv("FORCE_COLOR", raising=False)
    monkeypatch.delenv("TTY_COMPATIBLE", raising=False)
    console = Console(file=Terminal())
    assert console.is_terminal and is_live(console) is live


def test_a_reader_that_stops_early_leaves_the_commands_own_exit_status() -> None:
    """`test PKG | head -1`: rich exited 1 on the broken pipe, which says "a case failed", so a
    passing command failed a CI step run with pipefail. The rest is dropped now and the
    command goes on to its own verdict."""
    from webgpu_kernels.command_output import package_text_console

    read_end, write_end = os.pipe()
    os.close(read_end)  # as head does after its line
    with os.fdopen(write_end, "w") as stream:
        console = package_text_console()(file=stream, width=80)
        console.print("a line nobody reads")  # rich raised SystemExit(1) here
        console.print("and the next one")
        assert console.quiet


@pytest.mark.parametrize("command", [["info", "com.microsoft.QuickGelu", "--json"],
                                     ["render", "com.microsoft.QuickGelu", "-i", "X=8:f32"]])
def test_a_reader_that_stops_early_leaves_the_status_of_click_echos_output(command: list[str]) -> None:
    """`test --json | head -1`, `render ... | head`: click.echo met the closed pipe and click exited 1,
    "a case failed", the status 34cb5c0 had fixed for the console's text only."""
    import subprocess
    import sys

    read_end, write_end = os.pipe()
    os.close(read_end)  # a reader that has stopped already: the first write meets the closed pipe
    try:
        proc = subprocess.run([sys.executable, "-m", "webgpu_kernels", *command], stdout=write_end,
                              stderr=subprocess.PIPE, text=True, timeout=120)  # fmt: skip
    finally:
        os.close(write_end)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr[-2000:]


#: A child that starts the command line as the console script or `python -m` does, holding the
#: import of numpy (which only the command line's heavy import brings in) until a SIGINT comes:
#: the signal then provably lands while the command line is still being imported.
_HELD_START = r"""
import importlib, importlib.abc, runpy, signal, sys, time

# Ctrl-C as a terminal delivers it: a suite started in the background by a non-interactive shell
# (a CI runner's `cmd &`) hands its children SIGINT ignored, and the signal then never came.
signal.signal(signal.SIGINT, signal.default_int_handler)

class HoldNumpy(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "numpy":
            sys.meta_path.remove(self)
            print("importing numpy", flush=True)
            # Short sleeps, not one long one: a SIGINT landing after the print but before the sleep's
            # system call is only acted on between bytecodes, so one time.sleep(120) slept it out (the
            # parent then gave up at 120 s: a rare flake under load). Bounded: a signal that never
            # comes does not hang the suite.
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:
                time.sleep(0.05)
        return None

sys.meta_path.insert(0, HoldNumpy())
how, target = sys.argv[1:3]
sys.argv = ["webgpu-kernels", "run", "com.microsoft.QuickGelu", "-i", "X=4:f32"]  # cli_run imports numpy (list no longer does)
if how == "script":  # what the console script pip writes does: `from MODULE import FUNCTION`, then call it
    module, _, function = target.partition(":")
    sys.exit(getattr(importlib.import_module(module), function)())
runpy.run_module(target, run_name="__main__", alter_sys=True)  # python -m PACKAGE
"""


@pytest.mark.skipif(os.name == "nt", reason="sends SIGINT, which Windows has no way to send to a child")
@pytest.mark.parametrize("how", ["script", "-m"])
def test_ctrl_c_while_the_command_line_is_imported_is_one_line_and_status_130(how: str) -> None:
    """The console script imported the whole package (numpy, jsonschema, the engine: most of the
    start-up) before click ran, so Ctrl-C then printed a KeyboardInterrupt traceback, where a
    running command prints "interrupted" and exits 130."""
    import signal
    import subprocess
    import sys
    import tomllib
    from pathlib import Path

    pyproject = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text(encoding="utf-8"))
    target = pyproject["project"]["scripts"]["webgpu-kernels"] if how == "script" else "webgpu_kernels"
    child = subprocess.Popen([sys.executable, "-c", _HELD_START, how, target], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        assert child.stdout is not None and child.stdout.readline() == "importing numpy\n"
        child.send_signal(signal.SIGINT)
        out, err = child.communicate(timeout=120)
    finally:
        child.kill()
        child.wait()
    assert (child.returncode, err.strip(), out) == (130, "interrupted", ""), err[-2000:]


def test_a_hub_id_with_a_trailing_slash_asks_whether_the_repository_was_meant(tmp_path, monkeypatch):
    """`info webgpu-kernels/com.microsoft.QuickGelu/` (a browser's URL path) said only "no such
    folder"; it stays a folder by the two-slash rule, and now asks whether the Hub id was meant."""
    from click.testing import CliRunner

    from webgpu_kernels.cli import main

    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(main, ["info", "webgpu-kernels/com.microsoft.QuickGelu/"])
    assert result.exit_code == 2
    assert "did you mean the Hub repository webgpu-kernels/com.microsoft.QuickGelu?" in result.output


def test_a_hub_id_with_a_trailing_slash_is_refused_alike_by_every_command(tmp_path, monkeypatch):
    """validate said only "no such folder" of `webgpu-kernels/com.microsoft.QuickGelu/`, and info and
    test asked about the Hub id in click's usage form ("Usage: ... Error: ..."), digest not at all: every command now
    gives the one red `error: PATH: no such folder` line cli.md documents, with the question."""
    from click.testing import CliRunner

    from webgpu_kernels.cli import main

    monkeypatch.chdir(tmp_path)
    ref = "webgpu-kernels/com.microsoft.QuickGelu/"
    for command in (["info", ref], ["test", ref], ["validate", ref], ["explain", ref, "-i", "X=4:f32"], ["digest", ref]):
        result = CliRunner().invoke(main, command)
        text = " ".join(result.output.split())
        assert result.exit_code == 2, (command, result.output)
        assert text.startswith(f"error: {ref}: no such folder (did you mean the Hub repository "
                               "webgpu-kernels/com.microsoft.QuickGelu?)"), (command, text)  # fmt: skip


@pytest.mark.parametrize("pin", ["", "@v1", "@main"])
def test_a_folder_named_as_a_pinned_hub_id_is_refused_as_ambiguous(tmp_path, monkeypatch, pin):
    """`info webgpu-kernels/com.microsoft.QuickGelu@v1` in a directory holding a folder of exactly
    that name loaded the folder, unverified and without trust, where the user asked for the Hub's
    package: only the form without @ was refused as naming both."""
    import shutil

    from click.testing import CliRunner

    from webgpu_kernels.cli import main

    from conftest import embedded_root

    ref = f"webgpu-kernels/com.microsoft.QuickGelu{pin}"
    shutil.copytree(embedded_root() / "com.microsoft.QuickGelu", tmp_path / ref)
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(main, ["info", ref])
    assert result.exit_code == 2 and "reads both as a Hub repository id (org/op) and as the package folder" in result.output, result.output


def test_python_m_of_the_cli_module_runs_the_command_line() -> None:
    """`python -m webgpu_kernels.cli --version` printed nothing and exited 0 (the module defined the
    commands and ran none), so a command typed that way seemed to pass."""
    import subprocess
    import sys

    import webgpu_kernels as wk

    proc = subprocess.run([sys.executable, "-m", "webgpu_kernels.cli", "--version"], capture_output=True,
                          text=True, timeout=120)  # fmt: skip
    assert (proc.returncode, proc.stdout.strip()) == (0, f"webgpu-kernels, version {wk.__version__}"), proc.stderr
    proc = subprocess.run([sys.executable, "-m", "webgpu_kernels.cli", "tset"], capture_output=True, text=True,
                          timeout=120)  # fmt: skip
    assert proc.returncode == 2 and "Did you mean 'test'?" in proc.stderr, proc.stderr
