"""cli_inspect.py: `devices`, `list`, `info`, `explain` and `render`, through click's CliRunner."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

import webgpu_kernels as wk
from webgpu_kernels import tuning
from webgpu_kernels.cli import main

from cli_helpers import (
    BA_F16_VEC4,
    BA_F32,
    BIAS_ADD,
    CLI,
    QG_F16_VEC4,
    QG_F32,
    QUICK_GELU,
    assert_error,
    invoke,
    invoke_json,
    without_any_adapter,
)
from conftest import tuning_file

# --- devices, list ------------------------------------------------------------------------------------


def test_devices(runner: CliRunner) -> None:
    out = invoke(runner, "devices").stdout
    chosen = wk.choose_adapter()
    assert chosen.name in out and chosen.backend in out
    for limit in ("maxStorageBufferBindingSize", "maxBufferSize", "maxComputeWorkgroupsPerDimension",
                  "maxComputeInvocationsPerWorkgroup", "maxComputeWorkgroupSizeX"):  # fmt: skip
        assert limit in out
    # What format.md tells authors to bound var<workgroup> arrays with (an author missed it here).
    storage = wk.get_device().limits["max-compute-workgroup-storage-size"]
    assert f"maxComputeWorkgroupStorageSize: {storage}" in out
    assert "(chosen)" in out and "features" in out
    # What manifests see, by the names they use: wgpu-native lists WebGPU's "subgroups" as "subgroup".
    seen = {"shader-f16", "subgroups", "timestamp-query"} & set(wk.get_device().info.feature_names)
    assert f"device.features (what manifests see): {', '.join(sorted(seen))}" in out
    # Every adapter feature is listed, wrapped under its heading without padding lines with spaces.
    lines = out.splitlines()
    heading = next(i for i, line in enumerate(lines) if line.startswith("  adapter features"))
    listed = []
    for line in lines[heading + 1:]:
        if not line.startswith("    "):
            break
        assert line == line.rstrip(), f"trailing spaces: {line!r}"
        listed += [f.strip() for f in line.split(",") if f.strip()]
    assert listed == sorted(chosen.features)


def test_devices_json(runner: CliRunner) -> None:
    data = invoke_json(runner, "devices")
    assert len(data) == len(wk.list_adapters()) >= 1
    assert [d["chosen"] for d in data].count(True) == 1
    chosen = next(d for d in data if d["chosen"])
    assert chosen["index"] == wk.choose_adapter().index
    for d in data:
        assert set(d["limits"]) == {"maxStorageBufferBindingSize", "maxBufferSize", "maxComputeWorkgroupsPerDimension",
                                    "maxComputeInvocationsPerWorkgroup", "maxComputeWorkgroupSizeX",
                                    "maxComputeWorkgroupStorageSize"}  # fmt: skip
        assert all(isinstance(v, int) for v in d["limits"].values())
        assert isinstance(d["features"], list) and d["backend"] and d["type"]
    assert chosen["deviceFeatures"] == list(wk.get_device().info.feature_names)


def test_devices_adapter_option_and_env(runner: CliRunner, monkeypatch: pytest.MonkeyPatch) -> None:
    adapters = wk.list_adapters()
    last = adapters[-1]
    data = json.loads(invoke(runner, "--adapter", last.backend, "devices", "--json").stdout)
    assert next(d for d in data if d["chosen"])["backend"] == last.backend
    monkeypatch.setenv("WEBGPU_KERNELS_ADAPTER", last.backend)
    data = json.loads(invoke(runner, "devices", "--json").stdout)
    assert next(d for d in data if d["chosen"])["backend"] == last.backend


def test_unknown_adapter(runner: CliRunner) -> None:
    result = invoke(runner, "--adapter", "no-such-gpu", "devices", code=2)
    assert_error(result, "no adapter matches 'no-such-gpu'", "present:")


def test_list(runner: CliRunner) -> None:
    out = invoke(runner, "list").stdout
    assert BIAS_ADD in out and QUICK_GELU in out
    assert "vec4_tail" in out
    assert "Computes `x * sigmoid(alpha * x)` elementwise, a fast approximation of GELU activation." in out
    assert "The output has the same shape" not in out  # first sentence only


def test_list_json(runner: CliRunner) -> None:
    data = {row["op"]: row for row in invoke_json(runner, "list")}
    assert set(data) >= {BIAS_ADD, QUICK_GELU}
    assert data[BIAS_ADD]["variants"] == ["vec4", "scalar"]
    assert data[QUICK_GELU]["variants"] == ["vec4", "vec4_tail", "scalar"]
    assert data[BIAS_ADD]["description"].startswith("Adds a 1-D `bias`") and data[BIAS_ADD]["description"].endswith(".")


# --- info ---------------------------------------------------------------------------------------------


def test_info_quick_gelu(runner: CliRunner) -> None:
    out = invoke(runner, "info", QUICK_GELU).stdout
    for fragment in ("com.microsoft.QuickGelu", "T: float32, float16", "alpha", "1.702", "approximates GELU",
                     "WORKGROUP_SIZE = 256", "vec4Ok := numel(shapes.X) > 0 and numel(shapes.X) % 4 == 0",
                     "vec4_tail (priority 10)", "when[1]: vec4Ok", "shader quick-gelu.wgsl.jinja",
                     "threads ceilDiv(numel(shapes.X), 4)", "shapes.X"):  # fmt: skip
        assert fragment in out, fragment


def test_info_bias_add(runner: CliRunner) -> None:
    out = invoke(runner, "info", BIAS_ADD).stdout
    for fragment in ("bias", "skip", "Attributes: none", "hidden := dim(shapes.X, ranks.X - 1)",
                     "vec4 (priority 30)", "when[10]: dim(shapes.X, 2) % 4 == 0",
                     "template input itemsPerInvocation := 4",
                     "shader bias-add.wgsl.jinja"):  # fmt: skip
        assert fragment in out, fragment


def test_info_json(runner: CliRunner) -> None:
    data = invoke_json(runner, "info", BIAS_ADD)
    assert data["op"] == BIAS_ADD and data["origin"] == "embedded"
    assert [(i["role"], i["typeVar"], i["rank"]) for i in data["inputs"]] == [("X", "T", 3), ("bias", "T", 1),
                                                                            ("skip", "T", 3)]  # fmt: skip
    assert data["outputs"][0]["shape"] == "shapes.X"
    assert data["typeConstraints"] == {"T": ["float32", "float16"]}
    vec4 = data["variants"][0]
    assert vec4["id"] == "vec4" and vec4["priority"] == 30 and len(vec4["when"]) == 11
    dispatch = vec4["passes"][0]["dispatch"]
    assert dispatch == {"threads": "numel(shapes.X) / 4", "workgroupSize": ["tunables.WORKGROUP_SIZE"]}

    data = invoke_json(runner, "info", QUICK_GELU)
    assert data["attributes"]["alpha"]["default"] == 1.702
    assert "GELU" in data["attributes"]["alpha"]["description"]
    assert data["inputs"][0]["rank"] is None
    assert list(data["derive"]) == ["deviceWorkgroupCap", "workgroupOk", "baseOk", "vec4Ok"]
    assert data["variants"][2]["passes"][0]["shader"] == "quick-gelu.wgsl.jinja"


def test_info_package_folder(runner: CliRunner, package_folder) -> None:
    out = invoke(runner, "info", str(package_folder)).stdout
    assert "my.QuickGelu2" in out and "local package" in out and "pass 'again'" in out
    data = json.loads(invoke(runner, "info", str(package_folder), "--json").stdout)
    assert data["op"] == "my.QuickGelu2" and data["origin"] == "local"
    assert [p["id"] for p in data["variants"][2]["passes"]] == ["main", "again"]


def test_render_two_passes_from_folder(runner: CliRunner, package_folder) -> None:
    out = invoke(runner, "render", str(package_folder), "-i", "X=5:f32", "--variant", "scalar").stdout
    assert "// ---- pass main ----" in out and "// ---- pass again ----" in out
    assert out.count("@compute") == 2


# --- explain ------------------------------------------------------------------------------------------


def test_explain_bias_add(runner: CliRunner) -> None:
    out = invoke(runner, "explain", BIAS_ADD, *BA_F32).stdout
    assert "chosen variant 'scalar'" in out
    assert "- vec4 (priority 30): when[10] 'dim(shapes.X, 2) % 4 == 0' is false (with shapes.X=[2, 5, 6])" in out
    assert "output Y: shape [2, 5, 6] float32" in out


def test_explain_json(runner: CliRunner, has_f16: bool) -> None:
    data = invoke_json(runner, "explain", BIAS_ADD, *BA_F32)
    assert data["chosen"] == "scalar"
    assert data["variants"][0]["clause"] == "dim(shapes.X, 2) % 4 == 0"
    assert data["outputs"] == [{"name": "Y", "shape": [2, 5, 6], "dtype": "float32", "produced": True}]
    assert data["values"]["hidden"] == 6

    data = invoke_json(runner, "explain", QUICK_GELU, "-i", "X=:f32", "--attr", "alpha=1.0", "--tunable",
                       "WORKGROUP_SIZE=64")  # fmt: skip
    assert data["chosen"] == "vec4_tail"  # rank 0: one element
    assert data["outputs"][0]["shape"] == []
    if has_f16:
        assert invoke_json(runner, "explain", QUICK_GELU, *QG_F16_VEC4)["chosen"] == "vec4"


def test_explain_no_variant(runner: CliRunner) -> None:
    out = invoke(runner, "explain", QUICK_GELU, *QG_F32, "--tunable", "WORKGROUP_SIZE=100000").stdout
    assert "no variant applies" in out and "'baseOk' is false" in out


def test_explain_a_forced_variant(runner: CliRunner) -> None:
    """`explain --variant ID` explains the call `run --variant ID` makes (it had no --variant)."""
    out = invoke(runner, "explain", QUICK_GELU, *QG_F32, "--variant", "scalar").stdout
    assert "chosen variant 'scalar' (forced)" in out and "  * scalar (priority 0): accepted" in out
    rejected = invoke(runner, "explain", QUICK_GELU, *QG_F32, "--variant", "vec4").stdout  # explained: exit 0
    assert "forced variant 'vec4' rejected" in rejected
    assert "the call fails: variant 'vec4' cannot run this call: when[1] 'vec4Ok' is false" in rejected
    data = invoke_json(runner, "explain", QUICK_GELU, *QG_F32, "--variant", "vec4")
    assert data["forced"] == "vec4" and data["chosen"] is None and "cannot run this call" in data["refused"]
    assert_error(runner.invoke(main, ["explain", QUICK_GELU, *QG_F32, "--variant", "vec8"]), "no variant 'vec8'")


# --- render -------------------------------------------------------------------------------------------


def test_render(runner: CliRunner, has_f16: bool) -> None:
    out = invoke(runner, "render", BIAS_ADD, *BA_F32).stdout
    assert "@compute @workgroup_size(256)" in out and "array<f32>" in out
    assert "// ---- pass" not in out  # one pass: no header
    out = invoke(runner, "render", QUICK_GELU, *QG_F32, "--variant", "scalar", "--tunable", "WORKGROUP_SIZE=64").stdout
    assert "@workgroup_size(64)" in out
    out = invoke(runner, "render", QUICK_GELU, *QG_F32, "--attr", "alpha=0.5").stdout
    assert "0.5" in out
    if has_f16:
        assert "enable f16;" in invoke(runner, "render", BIAS_ADD, *BA_F16_VEC4).stdout


def _store_for_quick_gelu(folder, variant: str, tunables: dict) -> tuning.TuningCache:
    """A tuning file entry for QuickGelu's X=4096 float32 class, as `tune` saves one."""
    cache = tuning.TuningCache(tuning_file(folder))
    cache.record(wk.get_kernel(QUICK_GELU).tuning_key, {"T": "float32"}, {"X": (4096,)},
                 tuning.TunedChoice(variant, tunables, 1e-5))  # fmt: skip
    cache.save()
    return cache


def test_explain_says_which_stored_entry_it_passes_over_and_why(runner: CliRunner, tuning_dir) -> None:
    """An entry whose variant's `when` is false for the call (vec4 at 4097 elements, class 4096)
    was left out of explain's text and JSON alike."""
    cache = _store_for_quick_gelu(tuning_dir, "vec4", {"WORKGROUP_SIZE": 64})
    (key,) = cache.entries
    out = invoke(runner, "explain", QUICK_GELU, "-i", "X=4097:f32").stdout
    assert "a stored tuning result is not used: " in out and "'vec4Ok' is false" in out, out
    assert key in out and str(cache.path) in out
    data = invoke_json(runner, "explain", QUICK_GELU, "-i", "X=4097:f32")
    assert data["tuned"] is None and data["tuningEntry"]["key"] == key and data["tuningEntry"]["used"] is False
    assert data["tuningEntry"]["file"] == str(cache.path) and "'vec4Ok' is false" in data["tuningEntry"]["reason"]


@pytest.mark.parametrize(("variant", "tunables"), [("s" * 100_000, {"WORKGROUP_SIZE": "x" * 200_000}),
                                                 ("s" * 100_000, {"WORKGROUP_SIZE": 64}),
                                                 ("scalar", {"W" * 100_000: 64})],
                         ids=["huge-tunable-value", "huge-variant", "huge-tunable-name"])  # fmt: skip
def test_a_stored_entry_of_a_huge_value_is_said_in_a_bounded_line(runner: CliRunner, tuning_dir, variant,
                                                                   tunables) -> None:  # fmt: skip
    """An entry the call passes over may hold anything a hand edit put there (up to the file's 8 MiB):
    explain's text and render's note printed it whole, twice (in the reason, whose error quotes it,
    and after it), as the key is not (MAX_KEY_SHOWN). The JSON keeps the entry whole, as the key."""
    _store_for_quick_gelu(tuning_dir, variant, tunables)
    out = invoke(runner, "explain", QUICK_GELU, "-i", "X=4096:f32").stdout
    assert "a stored tuning result is not used: " in out and len(out) < 5_000, len(out)
    entry = invoke_json(runner, "explain", QUICK_GELU, "-i", "X=4096:f32")["tuningEntry"]
    assert (entry["variant"], entry["tunables"]) == (variant, tunables)
    note = invoke(runner, "render", QUICK_GELU, "-i", "X=4096:f32").stderr
    assert "a stored tuning result is not used" in note and len(note) < 5_000, len(note)


def test_render_says_on_stderr_that_a_stored_result_chose_the_wgsl(runner: CliRunner, tuning_dir) -> None:
    """render printed a stored result's WGSL (64-wide workgroups here) as if it were the manifest's
    choice. stdout stays the WGSL alone, byte for byte what the call compiles; the note is on stderr."""
    cache = _store_for_quick_gelu(tuning_dir, "scalar", {"WORKGROUP_SIZE": 64})
    result = invoke(runner, "render", QUICK_GELU, "-i", "X=4096:f32")
    expected = wk.load_kernel(wk.get_kernel(QUICK_GELU).package.root).render({"X": ((4096,), "float32")})["main"]
    assert result.stdout == expected.rstrip("\n") + "\n" and "@workgroup_size(64)" in result.stdout
    assert "stored tuning result" in result.stderr and str(cache.path) in result.stderr, result.stderr
    assert "'scalar'" in result.stderr and "WORKGROUP_SIZE" in result.stderr
    for other in (["--variant", "scalar"], ["--tunable", "WORKGROUP_SIZE=64"]):  # what the command line names
        assert invoke(runner, "render", QUICK_GELU, "-i", "X=4096:f32", *other).stderr == ""
    assert invoke(runner, "render", QUICK_GELU, "-i", "X=8192:f32").stderr == ""  # no entry for its class


def test_render_says_on_stderr_why_a_stored_result_is_not_used(runner: CliRunner, tuning_dir) -> None:
    cache = _store_for_quick_gelu(tuning_dir, "vec4", {"WORKGROUP_SIZE": 64})
    result = invoke(runner, "render", QUICK_GELU, "-i", "X=4097:f32")
    assert "@workgroup_size(256)" in result.stdout  # the manifest's vec4_tail
    assert "not used" in result.stderr and "'vec4Ok' is false" in result.stderr and str(cache.path) in result.stderr


def test_render_checks_the_call_once(runner: CliRunner, tuning_dir, monkeypatch) -> None:
    """render checked the call twice: once to render and again through explain, for its note on the
    stored tuning result (two contract checks and two selections a command)."""
    from webgpu_kernels import kernel as kernel_module

    counts = {"check_call": 0, "_select": 0}
    check_call, select = kernel_module.check_call, kernel_module.Kernel._select

    def counted_check_call(*args, **kwargs):
        counts["check_call"] += 1
        return check_call(*args, **kwargs)

    def counted_select(self, *args, **kwargs):
        counts["_select"] += 1
        return select(self, *args, **kwargs)

    monkeypatch.setattr(kernel_module, "check_call", counted_check_call)
    monkeypatch.setattr(kernel_module.Kernel, "_select", counted_select)
    _store_for_quick_gelu(tuning_dir, "scalar", {"WORKGROUP_SIZE": 64})
    invoke(runner, "render", QUICK_GELU, "-i", "X=8192:f32")  # no entry for its class
    assert counts == {"check_call": 1, "_select": 1}
    counts.update(check_call=0, _select=0)
    result = invoke(runner, "render", QUICK_GELU, "-i", "X=4096:f32")  # the stored entry chooses
    assert "@workgroup_size(64)" in result.stdout and "stored tuning result chose" in result.stderr
    assert counts == {"check_call": 1, "_select": 1}


def test_no_adapter_at_all_says_what_to_install(tmp_path):
    """With no Vulkan driver and no EGL vendor (a CI machine without Mesa), `devices` said only "no
    WebGPU adapter found", and the error of the other commands named one package of the two the
    CI step installs. Run in fresh processes: the drivers are read once per process."""
    import subprocess

    from webgpu_kernels.device import NO_ADAPTER

    env, devices = without_any_adapter(tmp_path)
    assert devices.returncode == 0 and NO_ADAPTER in devices.stdout
    assert "apt-get install mesa-vulkan-drivers libvulkan1" in NO_ADAPTER
    run = subprocess.run([*CLI, "run", "com.microsoft.QuickGelu", "-i", "X=4:f32"], env=env, capture_output=True,
                         text=True, timeout=120)  # fmt: skip
    assert run.returncode == 2 and NO_ADAPTER in run.stderr


def test_validate_without_any_adapter_is_the_machine_s_problem_not_the_package_s(tmp_path):
    """With no adapter at all, validate reported the embedded package INVALID (exit 1) where `test`
    exits 2 with what to install; --no-gpu still validates without one."""
    import subprocess

    from webgpu_kernels.device import NO_ADAPTER

    env, _ = without_any_adapter(tmp_path)
    gpu = subprocess.run([*CLI, "validate", "com.microsoft.QuickGelu"], env=env, capture_output=True, text=True,
                         timeout=120)  # fmt: skip
    assert gpu.returncode == 2 and NO_ADAPTER in gpu.stderr and "INVALID" not in gpu.stdout + gpu.stderr
    offline = subprocess.run([*CLI, "validate", "--no-gpu", "com.microsoft.QuickGelu"], env=env, capture_output=True,
                             text=True, timeout=120)  # fmt: skip
    assert offline.returncode == 0, offline.stdout + offline.stderr


def test_explain_json_bounds_a_heavy_value(runner: CliRunner, scale_shift_variant) -> None:
    """`values` (and a verdict's) had been each derive and constant value whole: a constant of
    `[['x' * 4096] * 4095]` (4,096 items, within the expression bounds) is 16 MB of JSON, and 20
    constants naming it printed 336 MB (1.1 GB resident) for one `explain --json`."""
    def change(manifest):
        manifest["constants"] = {"big": "[['x' * 4096] * 4095]", **{f"c{i}": "big" for i in range(3)},
                                 **manifest["constants"]}  # fmt: skip
        manifest["variants"][0]["when"].append("big == 1")
    kernel = scale_shift_variant(change)
    data = invoke_json(runner, "explain", str(kernel.package.root), "-i", "X=4:f32")
    assert data["chosen"] == "scalar" and data["values"]["n"] == 4 and data["values"]["vec4"] is False
    assert len(json.dumps(data)) < 10_000, f"{len(json.dumps(data))} characters"
    heavy = data["values"]["big"]
    assert isinstance(heavy, str) and heavy.startswith("[['xxx") and len(heavy) <= 80
    assert data["variants"][0]["values"]["big"] == heavy
