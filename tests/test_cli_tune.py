"""`webgpu-kernels tune` through click's CliRunner and its search (cli_tune.py), on real shaders.

As in test_cli_bench.py: the smallest bench.json case (QuickGelu ``tiny-4096``, float32), the
kernel given as its package folder so that no plan or tuned choice leaks into the shared embedded
kernels, and a tuning folder per test. Where a search's answer must be known, timings are faked;
candidate outputs are still computed on the GPU and checked.
"""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pytest
from click.testing import CliRunner
from test_cli_bench import QG, QG_DIR, QUICK_WARM_UP, STEADY_TINY, TINY, TINY_KEY, invoke, small_warm_up

import webgpu_kernels as wk
from webgpu_kernels import cli_tune, replacing, tuning, walltime
from webgpu_kernels.cli import main
from webgpu_kernels.comparison import Tolerance, check_against, held_to
from webgpu_kernels.digests import write_metadata
from webgpu_kernels.kernel import Kernel

from conftest import PACKAGES_DIR, copy_package, optional_output_package, tuning_file


def stored_entries(folder):
    """The entries of the default adapter's tuning file in ``folder``; none where there is no file
    (a tune whose every class keeps the manifest's selection writes none)."""
    path = tuning_file(folder)
    return json.loads(path.read_text("utf-8"))["entries"] if path.exists() else {}


@pytest.fixture(autouse=True)
def _small_warm_up(monkeypatch):  # test_cli_bench.py's: a warm-up copying 1 MiB, not 64
    small_warm_up(monkeypatch)


@pytest.fixture
def runner(runner, tuning_dir):  # conftest's, with a tuning folder of this test's own
    return runner


def test_tune_then_bench(runner, tuning_dir, tmp_path, monkeypatch):
    """tune stores the fastest choice of the case in the adapter's file; a following bench times
    that choice and reports it under "tuned". The search runs for real; its answer is made a
    choice other than the manifest's selection (on a CPU adapter any may win, and a win of the
    selection stores nothing)."""
    real_search = cli_tune._search

    def search(*args, **kwargs):
        best, skipped = real_search(*args, **kwargs)
        return (best[0] / 2, "scalar", {"WORKGROUP_SIZE": 128}), skipped

    monkeypatch.setattr(cli_tune, "_search", search)
    monkeypatch.setattr(cli_tune, "_confirm", lambda kernel, arrays, attrs, default, best, defaults: (best, default.median_s))
    out = invoke(runner, "tune", QG_DIR, *TINY).output
    path = tuning_file(tuning_dir)
    assert f"saved: {path} (a choice for 1 of 1 tuning classes)" in out.replace("\n", "")
    assert "nothing saved" not in out, out  # said after "saved:" too, where a save had moved nothing aside
    assert "tiny-4096" in out and "speed-up" in out
    data = json.loads(path.read_text("utf-8"))
    assert data["version"] == tuning.FILE_VERSION and list(data["entries"]) == [TINY_KEY]
    entry = data["entries"][TINY_KEY]
    assert entry["variant"] == "scalar" and entry["tunables"] == {"WORKGROUP_SIZE": 128} and entry["median_s"] > 0
    assert sorted(p.name for p in tuning_dir.iterdir() if p.name != tuning.LOCK_NAME) == [path.name]  # no temporary file left

    bench_path = tmp_path / "bench.json"
    invoke(runner, "bench", QG_DIR, *TINY, "--no-host", "--json", str(bench_path))
    (row,) = json.loads(bench_path.read_text("utf-8"))["cases"]
    assert row["tuned"]["variant"] == entry["variant"] and row["tuned"]["tunables"] == entry["tunables"]
    assert row["tuned"]["tbps"] > 0 and row["tuned"]["median_s"] > 0

    # And a plain call of a fresh kernel follows the stored choice, with correct results.
    x = np.random.default_rng(0).standard_normal(4096).astype(np.float32)
    tuning._caches.clear()
    fresh = wk.load_kernel(QG_DIR)
    assert fresh.plan({"X": x}, tuned=True)[1].variant == "scalar"
    y = fresh({"X": x})["Y"]
    np.testing.assert_allclose(y, x / (1 + np.exp(-1.702 * x.astype(np.float64))), rtol=1e-5, atol=1e-6)


@pytest.fixture(scope="module")
def dry_run(tmp_path_factory):
    """One `tune --dry-run` of the tiny case in a tuning folder of its own: (result, folder, the
    choice the process's tuning cache holds afterwards)."""
    folder = tmp_path_factory.mktemp("dry") / "tuning"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(tuning.CACHE_ENV, str(folder))
        mp.delenv(tuning.DISABLE_ENV, raising=False)
        mp.delenv("WEBGPU_KERNELS_ADAPTER", raising=False)
        mp.setattr(tuning, "_caches", {})
        result = CliRunner(env={"COLUMNS": "200"}).invoke(main, ["tune", QG_DIR, *TINY, "--dry-run"])
        device = wk.get_device()
        held = tuning.cache_for(device.adapter.name, device.adapter.backend).lookup(wk.get_kernel(QG).tuning_key, {"T": "float32"}, {"X": (4096,)})
    return result, folder, held


def test_tune_dry_run_writes_nothing(dry_run):
    """--dry-run measures and prints the table but leaves no file behind."""
    result, folder, _ = dry_run
    assert result.exit_code == 0, (result.output, result.exception)
    assert "tiny-4096" in result.output and "speed-up" in result.output
    assert "saved:" not in result.output
    assert not folder.exists() or list(folder.iterdir()) == []
    # It says so: a dry run had ended on the table, with no word of what it wrote.
    assert f"dry run: nothing written to {folder}" in result.output, result.output


def test_tune_off_a_terminal_says_what_it_tries_on_stderr_as_it_starts(dry_run):
    """Off a terminal rich draws no progress line: a search of many minutes per case (a kernel
    author's softmax on lavapipe) had printed nothing until its case ended. Each case
    and candidate is now a stderr line as it starts; stdout keeps only the results."""
    result, _, _ = dry_run
    tried = [line for line in result.stderr.splitlines() if ": trying " in line]
    assert "QuickGelu tiny-4096 T=float32: trying vec4_tail WORKGROUP_SIZE=64" in tried
    assert len(tried) >= 3
    assert result.stderr.splitlines()[0].startswith("warming up the GPU")
    assert "trying" not in result.stdout and "speed-up" in result.stdout


def test_tune_dry_run_leaves_no_choice_in_memory(dry_run):
    """After a dry run, the process's tuning cache holds no choice for the case."""
    _, _, held = dry_run
    assert held is None


def test_tune_skips_a_candidate_that_computes_something_else(runner, tuning_dir, tmp_path):
    """A copy whose scalar variant writes nothing was timed fastest and stored, under the shipped
    op id, so plain calls of the shipped kernel would have run it. Candidates must now agree with
    the default's output, and results are keyed by the package's manifest and templates."""
    root = copy_package(QG, tmp_path / "qg")
    template = root / "quick-gelu.wgsl.jinja"
    text = template.read_text("utf-8")
    broken = "{% else %}\n  if (i >= params.count) {"
    assert text.count(broken) == 1
    template.write_text(text.replace(broken, "{% else %}\n  if (true) {"), "utf-8")
    write_metadata(root)
    copy = wk.load_kernel(root)
    assert copy.op_id == QG and copy.tuning_key != wk.get_kernel(QG).tuning_key
    out = invoke(runner, "tune", str(root), *TINY).output
    assert "skipped (output differs from the default's): scalar" in " ".join(out.split())
    entries = stored_entries(tuning_dir)
    # under the copy's own key, and never scalar (nothing at all when the manifest's selection won)
    assert all(key == f"{copy.tuning_key}|T=float32|X=4096" and e["variant"] != "scalar" for key, e in entries.items())


def test_tunable_axes_cover_every_tunable_a_manifest_declares(device):
    """Not only WORKGROUP_SIZE-like ones: demo.LayerNorm's ROW_ITEMS (registers per invocation) gets
    powers of two around its default, each workgroup size the usual sizes within the device's limit."""
    from conftest import PACKAGES_DIR

    limit = device.info.limits["maxComputeInvocationsPerWorkgroup"]
    sizes = [s for s in cli_tune.WORKGROUP_CANDIDATES if s <= limit]  # the default (256) included:
    axes = dict(cli_tune._tunable_axes(wk.load_kernel(PACKAGES_DIR / "demo.LayerNorm"), device))  # a second
    assert axes == {"WORKGROUP_SIZE": sizes, "ROW_ITEMS": [2, 4, 8, 16, 32], "APPLY_WORKGROUP_SIZE": sizes,  # sweep
                    "SUBGROUPS": [False, True]}  # may return to it  # fmt: skip
    assert dict(cli_tune._tunable_axes(wk.get_kernel(QG), device)) == {"WORKGROUP_SIZE": sizes}


F32 = held_to(["float32"])
REL_1E3 = held_to(["float32"], {"float32": {"rtol": 1e-3}})
CLIP_L = "B=512,Scale=512,X=1x64x512"  # LayerNorm's clip-l-1x77x768: its shape class
CLIP_L_NO_B = "Scale=512,X=1x64x512"


def test_tune_searches_each_tunable_in_turn(runner, tuning_dir, monkeypatch):
    """A coordinate search: the best WORKGROUP_SIZE first, then ROW_ITEMS with it (timings faked so the
    answer is known: 128 x 16 is fastest, and 768 elements do not fit 64 x 8 or 128 x 4 registers,
    which the variant's `when` refuses). Candidate outputs are still computed on the GPU and checked."""
    from types import SimpleNamespace

    from conftest import PACKAGES_DIR

    layer_norm = wk.load_kernel(PACKAGES_DIR / "demo.LayerNorm")
    timed = []

    def fake_bench(kernel, arrays, *, attrs=None, tunables=None, variant=None, **_):
        _, plan = kernel.plan(arrays, attrs=attrs, variant=variant, tunables=tunables)  # refusals as a real run
        t = dict(tunables)
        timed.append((plan.variant, t["WORKGROUP_SIZE"], t["ROW_ITEMS"]))
        cost = 50e-6 if plan.variant != "onepass" else {128: 20e-6}.get(t["WORKGROUP_SIZE"], 30e-6)
        if plan.variant == "onepass" and (t["WORKGROUP_SIZE"], t["ROW_ITEMS"]) == (128, 16):
            cost = 10e-6
        return SimpleNamespace(median_s=cost, variant=plan.variant)

    monkeypatch.setattr(cli_tune, "bench_kernel", fake_bench)
    out = invoke(runner, "tune", str(layer_norm.package.root), "--case", "clip-l-1x77x768", "--dtype", "f32",
                 *QUICK_WARM_UP).output  # fmt: skip
    assert ("onepass", 128, 16) in timed and ("onepass", 64, 8) not in timed and ("onepass", 128, 4) not in timed
    entries = json.loads(tuning_file(tuning_dir).read_text("utf-8"))["entries"]
    # The case and its no-B twin (clip-l-1x77x768-nobias) are kept apart; the twin's own selection
    # won (no onepass for it), so nothing is stored for its class: calls there run that selection.
    assert sorted(entries) == [f"{layer_norm.tuning_key}|T=float32,U=float32|{CLIP_L}"], entries
    assert "clip-l-1x77x768-nobias" in out
    entry = entries[f"{layer_norm.tuning_key}|T=float32,U=float32|{CLIP_L}"]
    assert entry["variant"] == "onepass" and entry["tunables"] == {
        "WORKGROUP_SIZE": 128, "ROW_ITEMS": 16, "APPLY_WORKGROUP_SIZE": 256, "SUBGROUPS": False}, (entry, out)  # fmt: skip
    # and a call finds it: the same key from the call's side
    x = np.ones((1, 77, 768), np.float32)
    _, plan = layer_norm.plan({"X": x, "Scale": x[0, 0], "B": x[0, 0]}, tuned=True)
    assert plan.variant == "onepass" and plan.passes[0].pipeline is layer_norm.plan(
        {"X": x, "Scale": x[0, 0], "B": x[0, 0]}, tunables=entry["tunables"])[1].passes[0].pipeline


def test_tune_sweeps_twice_when_the_first_sweep_moved(runner, tuning_dir, monkeypatch):
    """Costs (faked) where the best WORKGROUP_SIZE depends on ROW_ITEMS: from (256, 8) the first
    sweep finds ROW_ITEMS 4, and only then is WORKGROUP_SIZE 512 the better one (the H200 settled
    on clip-h at 256 / 4, 4.9 us, where another start found 512 / 2, 4.4). No candidate is timed twice."""
    from types import SimpleNamespace

    from conftest import PACKAGES_DIR

    layer_norm = wk.load_kernel(PACKAGES_DIR / "demo.LayerNorm")
    costs = {(256, 8): 30e-6, (512, 8): 35e-6, (256, 4): 25e-6, (512, 4): 20e-6}
    timed = []

    def fake_bench(kernel, arrays, *, attrs=None, tunables=None, variant=None, **timing):
        _, plan = kernel.plan(arrays, attrs=attrs, variant=variant, tunables=tunables)
        t = dict(tunables)
        if timing.get("min_total_s") == 0.1:  # a search candidate (not a full timing or a confirmation)
            timed.append((len(arrays), plan.variant, tuple(sorted(t.items()))))
        cost = costs.get((t["WORKGROUP_SIZE"], t["ROW_ITEMS"]), 40e-6) if plan.variant == "onepass" else 50e-6
        return SimpleNamespace(median_s=cost, variant=plan.variant)

    monkeypatch.setattr(cli_tune, "bench_kernel", fake_bench)
    invoke(runner, "tune", str(layer_norm.package.root), "--case", "clip-l-1x77x768", "--dtype", "f32", *QUICK_WARM_UP)
    entries = json.loads(tuning_file(tuning_dir).read_text("utf-8"))["entries"]
    entry = entries[f"{layer_norm.tuning_key}|T=float32,U=float32|{CLIP_L}"]
    assert (entry["tunables"]["WORKGROUP_SIZE"], entry["tunables"]["ROW_ITEMS"]) == (512, 4), entry
    assert timed and len(timed) == len(set(timed)), "a candidate was timed twice"  # (its twin without B: 2 inputs)


def test_tune_starts_from_the_case_tunables(runner, tuning_dir, monkeypatch, tmp_path):
    """A bench.json case that names tunables is tuned from them: its first (full) timing and the
    baseline a candidate must beat use them, and a value off the usual axis (ROW_ITEMS 3: 256 x 3
    holds a row of 768) stays reachable. Before, tune started from the manifest's and never ran it."""
    import shutil
    from types import SimpleNamespace

    from conftest import PACKAGES_DIR

    root = shutil.copytree(PACKAGES_DIR / "demo.LayerNorm", tmp_path / "demo.LayerNorm")
    bench = json.loads((root / "bench.json").read_text("utf-8"))
    (case,) = [c for c in bench["cases"] if c["name"] == "clip-l-1x77x768"]
    bench["cases"] = [{**case, "types": {"T": ["float32"]}, "tunables": {"ROW_ITEMS": 3}}]
    (root / "bench.json").write_text(json.dumps(bench), "utf-8")
    write_metadata(root)
    layer_norm = wk.load_kernel(root)
    full = []

    def fake_bench(kernel, arrays, *, attrs=None, tunables=None, variant=None, **timing):
        _, plan = kernel.plan(arrays, attrs=attrs, variant=variant, tunables=tunables)
        t = dict(tunables)
        if "min_total_s" not in timing:
            full.append(t)
        cost = 10e-6 if plan.variant == "onepass" and t["ROW_ITEMS"] == 3 and t["WORKGROUP_SIZE"] == 256 else 20e-6
        return SimpleNamespace(median_s=cost, variant=plan.variant)

    monkeypatch.setattr(cli_tune, "bench_kernel", fake_bench)
    out = invoke(runner, "tune", str(root), *QUICK_WARM_UP).output
    assert full[0] == {**layer_norm.manifest.tunables, "ROW_ITEMS": 3}, full
    (entry,) = json.loads(tuning_file(tuning_dir).read_text("utf-8"))["entries"].values()
    assert entry["variant"] == "onepass" and entry["tunables"] == full[0], (entry, out)
    start = {**layer_norm.manifest.tunables, "ROW_ITEMS": 3}
    assert 3 in dict(cli_tune._tunable_axes(layer_norm, wk.get_device(), start))["ROW_ITEMS"]


def _fake_layer_norm_timing(costs):
    """A bench_kernel stand-in for demo.LayerNorm's search: `when` refusals as a real call
    (kernel.plan), onepass costing costs[(WORKGROUP_SIZE, ROW_ITEMS)] µs (20 elsewhere), twopass 50."""

    def fake_bench(kernel, arrays, *, attrs=None, variant=None, tunables=None, **_):
        _, plan = kernel.plan(arrays, attrs=attrs, variant=variant, tunables=tunables)
        t = tunables or {}
        cost = costs.get((t.get("WORKGROUP_SIZE"), t.get("ROW_ITEMS")), 20.0) if plan.variant == "onepass" else 50.0
        cost += (1.0 if t.get("SUBGROUPS") else 0.0) + (0.0 if t.get("APPLY_WORKGROUP_SIZE", 256) == 256 else 0.5)
        return SimpleNamespace(median_s=cost * 1e-6, variant=plan.variant)

    return fake_bench


def _layer_norm_search(monkeypatch, costs, kernel=None, timed=None, on_candidate=None):
    from conftest import PACKAGES_DIR

    kernel = kernel or wk.load_kernel(PACKAGES_DIR / "demo.LayerNorm")
    rng = np.random.default_rng(0)
    arrays = {"X": rng.standard_normal((2, 4, 320)).astype(np.float32),
              "Scale": rng.standard_normal(320).astype(np.float32), "B": rng.standard_normal(320).astype(np.float32)}  # fmt: skip
    fake = _fake_layer_norm_timing(costs)
    default = fake(kernel, arrays, attrs={}, tunables=dict(kernel.manifest.tunables))

    def bench(kernel, arrays, *, variant=None, tunables=None, **kwargs):
        if timed is not None:
            timed.append((variant, dict(tunables)))
        return fake(kernel, arrays, variant=variant, tunables=tunables, **kwargs)

    monkeypatch.setattr(cli_tune, "bench_kernel", bench)
    return cli_tune._search(kernel, arrays, {}, default, cli_tune._tunable_axes(kernel, wk.get_device()), F32,
                            on_candidate=on_candidate)  # fmt: skip


def test_the_search_names_each_candidate_before_timing_it(monkeypatch):
    """tune's progress line shows the candidate being timed (a search took minutes per case on
    lavapipe with nothing to show which candidates it tried)."""
    timed, heard = [], []

    def hear(variant, tunables):
        heard.append((variant, dict(tunables)))
        timed.append("heard")

    _layer_norm_search(monkeypatch, {(256, 8): 10.0, (512, 8): 9.0}, timed=timed, on_candidate=hear)
    candidates = [t for t in timed if t != "heard"]
    assert heard and heard == candidates  # each candidate heard once, and every timed one
    assert all(timed[2 * i] == "heard" for i in range(len(candidates)))  # heard just before its timing


def test_the_second_sweep_can_return_a_tunable_to_its_default(monkeypatch):
    """WORKGROUP_SIZE 512 looks better while ROW_ITEMS is 8; with ROW_ITEMS 2 the default 256 is best.
    The default value was no candidate, so the second sweep could not go back to it (512 / 2 won)."""
    (_, variant, tunables), _ = _layer_norm_search(monkeypatch, {(256, 8): 10.0, (512, 8): 9.0, (512, 2): 8.0,
                                                                 (256, 2): 5.0})  # fmt: skip
    assert (variant, tunables["WORKGROUP_SIZE"], tunables["ROW_ITEMS"]) == ("onepass", 256, 2)


def test_the_search_does_not_move_to_a_candidate_whose_output_is_wrong(monkeypatch):
    """WORKGROUP_SIZE 512 is fastest but computes zeros: skipped, and ROW_ITEMS is then searched from
    where the search was (1024), not from 512, so 1024 / 2 is found (1024 / 8 before)."""
    from conftest import PACKAGES_DIR

    class Broken(Kernel):
        def __call__(self, inputs, *, tunables=None, **kwargs):
            out = super().__call__(inputs, tunables=tunables, **kwargs)
            wrong = tunables and tunables.get("WORKGROUP_SIZE") == 512
            return {n: np.zeros_like(v) for n, v in out.items()} if wrong else out

    broken = Broken(wk.load_kernel(PACKAGES_DIR / "demo.LayerNorm").package)
    (_, variant, tunables), skipped = _layer_norm_search(
        monkeypatch, {(256, 8): 10.0, (512, 8): 8.0, (1024, 8): 9.0, (1024, 2): 6.0}, broken)
    assert (variant, tunables["WORKGROUP_SIZE"], tunables["ROW_ITEMS"]) == ("onepass", 1024, 2)
    assert skipped and all("WORKGROUP_SIZE=512" in s for s in skipped)


def test_the_reference_output_is_the_default_selection_not_a_stored_choice(monkeypatch, tuning_dir):
    """A package without tunables: tunables={} is "no override", so the reference call followed a
    stored result. It must run the default variant (forced), whatever is stored."""
    from conftest import PACKAGES_DIR

    kernel = wk.load_kernel(PACKAGES_DIR / "demo.ScaleShift")
    arrays = {"X": np.linspace(-1, 1, 1024, dtype=np.float32)}
    device = wk.get_device()
    cache = tuning.cache_for(device.adapter.name, device.adapter.backend)
    dtypes, shapes, absent, attrs = kernel.tuning_class(arrays)
    cache.record(kernel.tuning_key, dtypes, shapes, tuning.TunedChoice("scalar", {}, 1e-6), absent, attrs)
    default_variant = kernel.explain(arrays).chosen
    assert default_variant != "scalar"
    calls = []
    real = Kernel.__call__

    def spy(self, inputs, **kwargs):
        calls.append(kwargs)
        return real(self, inputs, **kwargs)

    monkeypatch.setattr(Kernel, "__call__", spy)
    default = SimpleNamespace(median_s=10e-6, variant=default_variant)
    monkeypatch.setattr(cli_tune, "bench_kernel", lambda kernel, arrays, *, variant=None, **_: SimpleNamespace(
        median_s=5e-6 if variant == "scalar" else 10e-6, variant=variant))  # fmt: skip
    cli_tune._search(kernel, arrays, {}, default, [], F32)
    assert calls[0]["variant"] == default_variant  # the reference, then the candidate


def test_tune_skips_a_case_the_device_cannot_hold_and_tunes_the_others(runner, tuning_dir):
    """demo.Gather's CLIP token-embedding table (152 MB) is over lavapipe's 128 MiB binding limit: that
    case is skipped, naming the limit (the first refusal had ended the whole run; then it was an error,
    exit 1, where `validate` warns of it as the adapter's), and the others are still tuned, exit 0.
    `--dtype f32` selects Gather's (float32, int64) cases: a case matched only if all its dtypes were wanted."""
    from conftest import PACKAGES_DIR

    binding = wk.get_device().info.limits["maxStorageBufferBindingSize"]
    if binding >= 160 * 2**20:
        pytest.skip("the device can bind the 152 MB table")
    result = runner.invoke(main, ["tune", str(PACKAGES_DIR / "demo.Gather"), "--case", "clip-token-embedding-1x77",
                                  "--case", "small-64x13", "--dtype", "f32", *QUICK_WARM_UP])  # fmt: skip
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert f"skipped: this adapter cannot hold it: argument 'data': expected at most {binding} bytes per binding" in text
    assert "1 of 2 cases skipped (this adapter cannot hold it" in text and "not tuned" not in text
    assert "small-64x13" in text.split("skipped: this adapter")[1]  # tuned after the skip
    entries = stored_entries(tuning_dir)
    assert len(entries) <= 1 and all("indices=" in k for k in entries)  # small-64x13's, unless its default won


def test_tune_of_cases_that_are_all_skipped_says_it_saved_nothing(runner, tuning_dir):
    """Every case refused by the device: tune printed "saved: <file>", a file it never wrote."""
    from conftest import PACKAGES_DIR

    if wk.get_device().info.limits["maxStorageBufferBindingSize"] >= 160 * 2**20:
        pytest.skip("the device can bind the 152 MB table")
    result = runner.invoke(main, ["tune", str(PACKAGES_DIR / "demo.Gather"), "--case", "clip-token-embedding-1x77",
                                  "--dtype", "f32", *QUICK_WARM_UP])  # fmt: skip
    assert result.exit_code == 0, result.output  # a skip is the adapter's: it fails nothing
    lines = result.output.splitlines()
    assert not any(line.startswith("saved:") for line in lines), result.output
    assert any(line.startswith("nothing saved: no case was tuned") for line in lines), result.output
    assert not tuning_file(tuning_dir).exists()


def test_tune_without_shader_f16_skips_each_float16_case_as_test_does(runner, tuning_dir, gl_device):
    """On an adapter without shader-f16 tune counted each float16 bench.json case as one "the device
    could not run" and exited 1 (a CI job tuning there failed with nothing wrong): it is skipped, with
    its reason, counted apart, and the float32 case is still tuned (exit 0)."""
    result = runner.invoke(main, ["--adapter", "gl", "tune", QG_DIR, "--case", "tiny-4096", *QUICK_WARM_UP])
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert "QuickGelu tiny-4096 T=float16: skipped: this adapter has no shader-f16 feature" in lines, result.stdout
    assert "1 of 2 cases skipped (this adapter has no shader-f16 feature): QuickGelu tiny-4096 float16" in lines
    assert "could not run" not in result.stdout and "not tuned" not in result.stdout, result.stdout
    assert any(line.startswith("QuickGelu tiny-4096 T=float32: default") for line in lines), result.stdout


def test_a_case_tune_cannot_run_is_counted_as_not_tuned_with_its_name(runner, tuning_dir, tmp_path):
    """Since bench and tune skip a case past the device's limits, tune's remaining errors are other
    failures (here a dtype the contract refuses), yet its summary still said they "could not run on
    this device": it says they could not be tuned, names them and points at the lines above, exit 1."""
    root = copy_package(QG, tmp_path / "qg")
    cases = [{"name": "wide", "inputs": {"X": {"shape": [64]}}, "types": {"T": ["float64"]}},
             {"name": "fine", "inputs": {"X": {"shape": [64]}}, "types": {"T": ["float32"]}}]  # fmt: skip
    (root / "bench.json").write_text(json.dumps({"cases": cases}), "utf-8")
    write_metadata(root)
    result = runner.invoke(main, ["tune", str(root), "--dry-run", *QUICK_WARM_UP])
    assert result.exit_code == 1, result.output
    lines = [" ".join(line.split()) for line in result.output.splitlines()]
    assert "on this device" not in result.output, result.output
    assert "1 of 2 cases could not be tuned (see the errors above): QuickGelu wide float64" in lines, result.output
    assert any(line.startswith("QuickGelu fine T=float32: default") for line in lines), result.output


def _small_matmul() -> tuple[Kernel, dict[str, np.ndarray]]:
    """demo.MatMul and a small batch of random A and B, for the search tests."""
    from conftest import PACKAGES_DIR

    rng = np.random.default_rng(0)
    arrays = {"A": rng.standard_normal((2, 33, 20)).astype(np.float32),
              "B": rng.standard_normal((2, 20, 17)).astype(np.float32)}  # fmt: skip
    return wk.load_kernel(PACKAGES_DIR / "demo.MatMul"), arrays


def test_a_candidate_that_gives_the_gpu_the_same_work_is_not_timed(monkeypatch):
    """demo.MatMul's tiled variant never reads WORKGROUP_SIZE (naive's): on the H200 the tuner timed
    five identical tiled kernels per case and stored whichever noise made fastest (TILE 32 with
    WORKGROUP_SIZE 1024, 512, 256 or 64). Only candidates whose WGSL, grid or uniforms differ are timed."""
    kernel, arrays = _small_matmul()
    timed = []

    def fake_bench(kernel, arrays, *, attrs=None, variant=None, tunables=None, **_):
        _, plan = kernel.plan(arrays, attrs=attrs, variant=variant, tunables=tunables)
        timed.append((plan.variant, dict(tunables)))
        return SimpleNamespace(median_s=10e-6, variant=plan.variant)

    monkeypatch.setattr(cli_tune, "bench_kernel", fake_bench)
    default = fake_bench(kernel, arrays, tunables=dict(kernel.manifest.tunables))
    timed.clear()
    cli_tune._search(kernel, arrays, {}, default, cli_tune._tunable_axes(kernel, wk.get_device()), F32)
    tiled = [t for v, t in timed if v == "tiled"]
    naive = [t for v, t in timed if v == "naive"]
    assert tiled and all(t["WORKGROUP_SIZE"] == 64 for t in tiled), tiled  # only TILE varies
    assert {t["TILE"] for t in tiled} >= {4, 8}  # (16 is the default, timed in full; 32 and up need more invocations)
    assert {t["WORKGROUP_SIZE"] for t in naive} > {64}  # naive reads it
    assert all(t["TILE"] == 16 for t in naive)  # and not TILE


def test_a_start_that_differs_from_the_default_only_where_unread_is_the_default(monkeypatch):
    """demo.MatMul's tiled variant (the default's) never reads WORKGROUP_SIZE: a search starting at
    WORKGROUP_SIZE 128 (tune --tunable WORKGROUP_SIZE=128,256) starts at the default's own work, so
    a slower TILE is no lead. The start had been taken for an untimed point (no time to beat),
    and each slower tiled candidate read back and checked as the variant's new best."""
    kernel, arrays = _small_matmul()

    def fake_bench(kernel, arrays, *, attrs=None, variant=None, tunables=None, **_):
        _, plan = kernel.plan(arrays, attrs=attrs, variant=variant, tunables=tunables)
        fast = plan.variant == "tiled" and dict(tunables)["TILE"] == 16  # the default's work
        return SimpleNamespace(median_s=10e-6 if fast else 20e-6, variant=plan.variant)

    checked = []
    real_call = Kernel.__call__

    def call(self, inputs, *, variant=None, tunables=None, **kwargs):
        checked.append((variant, dict(tunables or {})))
        return real_call(self, inputs, variant=variant, tunables=tunables, **kwargs)

    monkeypatch.setattr(cli_tune, "bench_kernel", fake_bench)
    monkeypatch.setattr(Kernel, "__call__", call)
    defaults = dict(kernel.manifest.tunables)
    default = fake_bench(kernel, arrays, tunables=defaults)
    start = {**defaults, "WORKGROUP_SIZE": 128}
    axes = cli_tune._tunable_axes(kernel, wk.get_device(), start, only={"WORKGROUP_SIZE": [128, 256]})
    best, _ = cli_tune._search(kernel, arrays, {}, default, axes, F32, defaults, start=start)
    assert (best[1], best[2]) == ("tiled", defaults), best
    # (the default itself runs once, for the output naive's first candidate is checked against)
    assert not [c for c in checked if c[0] == "tiled" and c[1] != defaults], checked  # none of them was a lead


def test_each_variant_search_starts_at_the_start_given(monkeypatch):
    """demo.MatMul: tiled (searched first) finds TILE 8 faster; naive's search then started at
    TILE 8, where tiled's ended, not at the start given (the start was overwritten)."""
    kernel, arrays = _small_matmul()

    def fake_bench(kernel, arrays, *, attrs=None, variant=None, tunables=None, **_):
        _, plan = kernel.plan(arrays, attrs=attrs, variant=variant, tunables=tunables)
        fast = plan.variant == "tiled" and dict(tunables)["TILE"] == 8
        return SimpleNamespace(median_s=5e-6 if fast else 20e-6, variant=plan.variant)

    monkeypatch.setattr(cli_tune, "bench_kernel", fake_bench)
    defaults = dict(kernel.manifest.tunables)
    seen: list[tuple[str, dict]] = []
    best, _ = cli_tune._search(kernel, arrays, {}, fake_bench(kernel, arrays, tunables=defaults),
                               cli_tune._tunable_axes(kernel, wk.get_device()), F32, defaults,
                               on_candidate=lambda variant, tunables: seen.append((variant, dict(tunables))))  # fmt: skip
    assert best[1] == "tiled" and best[2]["TILE"] == 8, best
    assert next(t for v, t in seen if v == "naive") == defaults, seen


@pytest.mark.parametrize("command", ["tune", "bench"])
def test_adapter_reaches_every_timing(runner, tuning_dir, monkeypatch, command):
    """`--adapter gl tune` stored its results in the OpenGL adapter's file, but every timing and
    candidate call ran on the default (Vulkan) adapter; bench likewise timed on the default."""
    from webgpu_kernels import cli_bench
    from webgpu_kernels.device import get_device

    try:
        gl = get_device("gl")
    except wk.errors.GPUError as exc:
        pytest.skip(f"no usable OpenGL adapter: {exc}")
    if get_device() is gl:
        pytest.skip("the default adapter is the OpenGL one")
    timed_on = []
    module = cli_tune if command == "tune" else cli_bench
    real = module.bench_kernel

    def spy(kernel, arrays, **options):
        timed_on.append(get_device(options.get("adapter")))
        return real(kernel, arrays, **options)

    monkeypatch.setattr(module, "bench_kernel", spy)
    extra = ["--no-host"] if command == "bench" else []
    out = " ".join(invoke(runner, "--adapter", "gl", command, QG_DIR, *TINY, *extra).output.split())
    assert timed_on and all(device is gl for device in timed_on)
    assert get_device() is not gl  # the default is the default again after the command
    if command == "tune":
        gl_file = tuning_dir / f"{tuning.adapter_slug(gl.adapter.name, gl.adapter.backend)}.json"
        # none where the manifest's selection won on the GL adapter: a run that stores nothing writes nothing
        assert [p.name for p in tuning_dir.iterdir() if p.name != tuning.LOCK_NAME] in ([], [gl_file.name])
        assert f"saved: {gl_file}" in out or f"nothing stored in {gl_file}" in out, out


# --- what is stored for a shape class -------------------------------------------------------------


def _fake_search(choices):
    """cli_tune._search answering ``choices[case shape]`` ((variant, tunables), or None for the
    default's own run), with _confirm keeping it: the storing rules, not timings, are under test."""
    def search(kernel, arrays, attrs, default, axes, tolerance, defaults=None, on_candidate=None, start=None,
               never_took=None):
        choice = choices[next(iter(arrays.values())).shape]
        if choice is None:
            return (default.median_s, default.variant, dict(defaults)), []
        return (default.median_s / 2, *choice), []
    return search


def test_a_tuner_that_keeps_the_manifest_selection_stores_nothing_and_drops_an_old_entry(runner, tuning_dir, monkeypatch):
    """An entry stored when the selection won imposed this shape's default variant on every shape
    of its class (4097 tuned: its vec4_tail stored, so every 4096-8191 call left vec4); now nothing
    is stored, and an earlier result for the class is dropped."""
    monkeypatch.setattr(cli_tune, "_confirm", lambda kernel, arrays, attrs, default, best, defaults: (best, default.median_s))
    monkeypatch.setattr(cli_tune, "_search", _fake_search({(4096,): ("scalar", {"WORKGROUP_SIZE": 128})}))
    invoke(runner, "tune", QG_DIR, *TINY)
    assert list(json.loads(tuning_file(tuning_dir).read_text("utf-8"))["entries"]) == [TINY_KEY]
    monkeypatch.setattr(cli_tune, "_search", _fake_search({(4096,): None}))
    out = " ".join(invoke(runner, "tune", QG_DIR, *TINY).output.split())
    path = tuning_file(tuning_dir)
    assert json.loads(path.read_text("utf-8"))["entries"] == {}
    # "saved: FILE" had still ended the run, though the file held no entry:
    # it says that nothing was stored, and that the earlier result went.
    assert "saved:" not in out, out
    assert (f"nothing stored in {path}: its one tuning class keeps the manifest's own selection: nothing is "
            f"stored for it (the selection won, over all their cases where those disagreed, or nothing else ran them all); 1 earlier entry for it removed "
            f"from {path}") in out, out
    x = np.ones(6000, np.float32)  # same class as 4096
    assert wk.load_kernel(QG_DIR).explain({"X": x}).tuned is None


def test_a_tune_that_stores_what_the_file_already_held_does_not_say_saved(runner, tuning_dir, monkeypatch):
    """TuningCache.save() writes nothing where no entry changes, yet tune said "saved: FILE". With
    real timings each run stores a new median; here the search's time is fixed, so the second run
    of the same tune stores the very entry the first one wrote."""
    def search(kernel, arrays, attrs, default, axes, tolerance, defaults=None, on_candidate=None, start=None,
               never_took=None):
        return (1e-6, "scalar", {"WORKGROUP_SIZE": 128}), []

    monkeypatch.setattr(cli_tune, "_confirm", lambda kernel, arrays, attrs, default, best, defaults: (best, default.median_s))
    monkeypatch.setattr(cli_tune, "_search", search)
    path = tuning_file(tuning_dir)
    first = " ".join(invoke(runner, "tune", QG_DIR, *TINY).output.split())
    assert f"saved: {path} (a choice for 1 of 1 tuning classes)" in first, first
    written = path.read_bytes()
    path.touch()
    mtime = path.stat().st_mtime_ns
    second = " ".join(invoke(runner, "tune", QG_DIR, *TINY).output.split())
    assert "saved:" not in second, second
    assert f"{path} already held these choices (a choice for 1 of 1 tuning classes): nothing written" in second, second
    assert path.read_bytes() == written and path.stat().st_mtime_ns == mtime  # not rewritten
    assert stored_entries(tuning_dir)[TINY_KEY] == {"variant": "scalar", "tunables": {"WORKGROUP_SIZE": 128},
                                                    "median_s": 1e-6}  # fmt: skip


def _twice_package(write_package):
    """demo.Twice, Y = 2X, with two bench.json cases of one tuning class (X=4096): even-4096 and
    odd-4097. Its selection, `looped`, reads REPEAT elements of X per element (1000 by default: on
    lavapipe ~1000x the work of REPEAT=1, so which choice is faster does not depend on timing
    noise) and computes 2X all the same; `even_only` accepts only an even count, `wrong_on_odd`
    zeroes the last element of an odd count. None of them loops but `looped`."""
    params = {"name": "params", "semantic": "kernel.params", "buffer": {"type": "uniform"},
              "struct": {"name": "Params", "fields": [{"name": "n", "type": "u32", "value": "numel(shapes.X)"}]}}
    bindings = [{"name": "x", "arg": "X", "buffer": {"type": "read-only-storage"}, "elementType": "f32"},
                {"name": "y", "arg": "Y", "buffer": {"type": "storage"}, "elementType": "f32"}, params]
    variants = [("looped", 10, "true"), ("even_only", 1, "numel(shapes.X) % 2 == 0"), ("wrong_on_odd", 1, "true")]
    manifest = {
        "domain": "demo", "name": "Twice", "inputs": [{"role": "X", "dtype": "T"}],
        "outputs": [{"role": "Y", "dtype": "T", "rank": "ranks.X", "shape": "shapes.X"}],
        "typeConstraints": {"T": ["float32"]}, "tunables": {"WORKGROUP_SIZE": 64, "REPEAT": 1000},
        "constants": {"repeat": "tunables.REPEAT"},
        "variants": [{"id": vid, "priority": priority, "when": [when], "passes": [{
            "id": "main", "shader": f"{vid}.wgsl.jinja", "bindings": bindings,
            "dispatch": {"threads": "numel(shapes.X)", "workgroupSize": "tunables.WORKGROUP_SIZE"}}]}
            for vid, priority, when in variants],
    }  # fmt: skip
    head = ("{{ declarations }}\n@compute @workgroup_size({{ workgroupSize }})\n"
            "fn {{ entryPoint }}({{ entryParams }}) {\n  let i = {{ globalIndex }};\n  if (i >= params.n) { return; }\n")
    bodies = {
        # a maximum no input reaches (they are standard normal): loads the compiler cannot drop
        "looped": ("  var m = x[i];\n  for (var k = 0u; k < {{ repeat | wgsl_uint }}; k++) { m = max(m, x[(i + k) % params.n]); }\n"
                   "  y[i] = select(2.0 * x[i], 0.0, m > 1e30);\n"),
        "even_only": "  y[i] = 2.0 * x[i];\n",
        "wrong_on_odd": "  y[i] = select(2.0 * x[i], 0.0, params.n % 2u == 1u && i == params.n - 1u);\n",
    }  # fmt: skip
    root = write_package(manifest, {f"{vid}.wgsl.jinja": head + body + "}\n" for vid, body in bodies.items()})
    bench = {"cases": [{"name": "even-4096", "inputs": {"X": {"shape": [4096]}}, "types": {"T": ["float32"]}},
                       {"name": "odd-4097", "inputs": {"X": {"shape": [4097]}}, "types": {"T": ["float32"]}}]}  # fmt: skip
    (root / "bench.json").write_text(json.dumps(bench), "utf-8")
    return root


FAST = {"WORKGROUP_SIZE": 64, "REPEAT": 1}


def test_cases_of_one_class_that_disagree_keep_the_faster_choice_over_both(runner, tuning_dir, monkeypatch, write_package):
    """even-4096 finds `looped` at REPEAT=1, odd-4097 the selection (REPEAT=1000): the class had
    stored nothing, so its calls ran the selection although the other winner was faster for both
    (SkipLayerNormalization on the H100: 58.5 µs kept where either winner took ~17). Both
    candidates are now timed on both cases, and the faster over them is stored."""
    root = _twice_package(write_package)
    monkeypatch.setattr(cli_tune, "_confirm", lambda kernel, arrays, attrs, default, best, defaults: (best, default.median_s))
    monkeypatch.setattr(cli_tune, "_search", _fake_search({(4096,): ("looped", FAST), (4097,): None}))
    out = " ".join(invoke(runner, "tune", str(root), *QUICK_WARM_UP).output.split())
    kernel = wk.load_kernel(root)
    (key, entry), = json.loads(tuning_file(tuning_dir).read_text("utf-8"))["entries"].items()
    assert key == f"{kernel.tuning_key}|T=float32|X=4096"
    assert (entry["variant"], entry["tunables"]) == ("looped", FAST), (entry, out)
    assert ("Twice 'odd-4097' (float32): its tuning class's cases found different choices; timed on each of its 2 cases "
            "('even-4096' (float32), 'odd-4097' (float32)), the class keeps looped WORKGROUP_SIZE=64 REPEAT=1:") in out, out
    assert "against the manifest's selection" in out and "nothing is stored" not in out, out
    assert f"saved: {tuning_file(tuning_dir)} (a choice for 1 of 1 tuning classes)" in out, out
    # and a call of the class follows it, computing what the selection computes
    tuning._caches.clear()
    x = np.random.default_rng(1).standard_normal(5000).astype(np.float32)
    fresh = wk.load_kernel(root)
    assert fresh.plan({"X": x}, tuned=True)[1].passes[0].pipeline is fresh.plan({"X": x}, tunables=FAST)[1].passes[0].pipeline
    np.testing.assert_allclose(fresh({"X": x})["Y"], 2 * x)


@pytest.mark.parametrize("variant", ["even_only", "wrong_on_odd"])
def test_a_choice_that_fails_one_case_of_the_class_is_not_stored_for_it(runner, tuning_dir, monkeypatch, write_package,
                                                                         variant):  # fmt: skip
    """even-4096 finds a fast variant that odd-4097 (its class) refuses or gets wrong; odd-4097 finds
    the slow selection. The fast one is disqualified for the class, so the selection is kept:
    nothing is stored, and tune says why."""
    root = _twice_package(write_package)
    monkeypatch.setattr(cli_tune, "_confirm", lambda kernel, arrays, attrs, default, best, defaults: (best, default.median_s))
    monkeypatch.setattr(cli_tune, "_search", _fake_search({(4096,): (variant, FAST), (4097,): None}))
    out = " ".join(invoke(runner, "tune", str(root), *QUICK_WARM_UP).output.split())
    path = tuning_file(tuning_dir)
    assert json.loads(path.read_text("utf-8"))["entries"] == {}
    assert "the class keeps the manifest's selection (nothing is stored for it):" in out, out
    why = "refused or failed" if variant == "even_only" else "its output differs from the default's"
    assert f"{variant} WORKGROUP_SIZE=64 REPEAT=1 disqualified on 'odd-4097' (float32) ({why}" in out, out
    assert "saved:" not in out and f"nothing stored in {path}: its one tuning class keeps" in out, out
    assert "earlier entr" not in out  # the entry even-4096 stored in this run was no earlier result


def test_a_class_whose_cases_agree_times_nothing_more(runner, tuning_dir, monkeypatch, write_package):
    """No conflict, no resolution: the two cases' own searches are all that is timed."""
    root = _twice_package(write_package)
    monkeypatch.setattr(cli_tune, "_confirm", lambda kernel, arrays, attrs, default, best, defaults: (best, default.median_s))
    monkeypatch.setattr(cli_tune, "_search", _fake_search({(4096,): ("looped", FAST), (4097,): ("looped", FAST)}))
    timed = []
    real = cli_tune.bench_kernel
    monkeypatch.setattr(cli_tune, "bench_kernel", lambda *a, **k: timed.append(k) or real(*a, **k))
    out = " ".join(invoke(runner, "tune", str(root), *QUICK_WARM_UP).output.split())
    assert len(timed) == 2 and "different choices" not in out, out  # each case's default, nothing else
    (entry,) = json.loads(tuning_file(tuning_dir).read_text("utf-8"))["entries"].values()
    assert (entry["variant"], entry["tunables"]) == ("looped", FAST)


def test_a_third_case_of_a_class_that_disagrees_times_only_its_new_pairs(runner, tuning_dir, monkeypatch,
                                                                          write_package) -> None:  # fmt: skip
    """Each case of a class whose cases disagree re-timed every candidate on every case (its cost
    growing with the square of the class's cases): each (case, candidate) pair is timed once now.
    Three cases, three winners: 3 defaults, then 2 x 2 pairs, then the 5 new ones (the third
    candidate on the first two cases, every candidate on the third). --dry-run resolves alike and
    writes nothing."""
    root = _twice_package(write_package)
    bench = json.loads((root / "bench.json").read_text("utf-8"))
    bench["cases"].append({"name": "even-4098", "inputs": {"X": {"shape": [4098]}}, "types": {"T": ["float32"]}})
    (root / "bench.json").write_text(json.dumps(bench), "utf-8")
    wider = {"WORKGROUP_SIZE": 128, "REPEAT": 1}
    monkeypatch.setattr(cli_tune, "_confirm", lambda kernel, arrays, attrs, default, best, defaults: (best, default.median_s))
    monkeypatch.setattr(cli_tune, "_search", _fake_search({(4096,): ("looped", FAST), (4097,): None,
                                                           (4098,): ("looped", wider)}))  # fmt: skip
    timed = []
    real = cli_tune.bench_kernel
    monkeypatch.setattr(cli_tune, "bench_kernel", lambda *a, **k: timed.append(k) or real(*a, **k))
    out = " ".join(invoke(runner, "tune", str(root), "--dry-run", *QUICK_WARM_UP).output.split())
    assert len(timed) == 3 + 4 + 5, len(timed)
    assert "timed on each of its 3 cases" in out and "a run would store a choice for 1 of 1 tuning classes" in out, out
    assert not tuning_file(tuning_dir).exists()  # a dry run writes nothing


def test_the_search_tries_a_variant_the_manifest_tunables_refuse(monkeypatch, device):
    """demo.ReduceSum's workgroup variant refuses 128-element rows at WORKGROUP_SIZE 256 (the
    manifest's) and accepts them at 64 or 128: only variants accepting the defaults had been searched."""
    from conftest import PACKAGES_DIR

    kernel = wk.load_kernel(PACKAGES_DIR / "demo.ReduceSum")
    arrays = {"X": np.random.default_rng(0).standard_normal((64, 128)).astype(np.float32)}
    assert [v.variant for v in kernel.explain(arrays).verdicts if v.accepted] == ["strided"]
    timed = []

    def fake_bench(kernel, arrays, *, attrs=None, tunables=None, variant=None, **_):
        _, plan = kernel.plan(arrays, attrs=attrs, variant=variant, tunables=tunables)  # refusals as a real run
        timed.append((plan.variant, dict(tunables)["WORKGROUP_SIZE"]))
        return SimpleNamespace(median_s=1e-6 if plan.variant == "workgroup" else 1e-5, variant=plan.variant)

    monkeypatch.setattr(cli_tune, "bench_kernel", fake_bench)
    default = SimpleNamespace(median_s=1e-5, variant="strided")
    best, _ = cli_tune._search(kernel, arrays, {}, default, cli_tune._tunable_axes(kernel, device), REL_1E3)
    assert ("workgroup", 128) in timed and best[1] == "workgroup"


def test_an_unwritable_tuning_folder_is_a_usage_error_before_any_timing(runner, monkeypatch, tmp_path):
    """It had crashed with a raw OSError when the first case's result was saved."""
    blocker = tmp_path / "a-file"
    blocker.write_text("", "utf-8")
    monkeypatch.setenv(tuning.CACHE_ENV, str(blocker / "tuning"))
    monkeypatch.setattr(tuning, "_caches", {})
    monkeypatch.setattr(cli_tune, "bench_kernel", lambda *a, **k: pytest.fail("timed before refusing"))
    result = runner.invoke(main, ["tune", QG_DIR, *TINY])
    assert result.exit_code == 2 and "is not writable" in result.output and "--dry-run" in result.output, result.output


@pytest.mark.filterwarnings("ignore::webgpu_kernels.TuningFileWarning")
def test_a_folder_named_as_the_tuning_file_is_a_usage_error_before_any_timing(runner, tuning_dir, monkeypatch):
    """The first save failed on it (exit 1), after that case's whole search."""
    tuning_file(tuning_dir).mkdir(parents=True)
    monkeypatch.setattr(cli_tune, "bench_kernel", lambda *a, **k: pytest.fail("timed before refusing"))
    result = runner.invoke(main, ["tune", QG_DIR, *TINY])
    assert result.exit_code == 2, result.output
    assert "a folder has the tuning file's name" in result.output and "--dry-run" in result.output, result.output


@pytest.mark.filterwarnings("ignore::webgpu_kernels.TuningFileWarning")
@pytest.mark.parametrize("kind", ["fifo", "dangling link"])
def test_a_fifo_or_a_link_to_nothing_as_the_tuning_file_is_a_usage_error_before_any_timing(runner, tuning_dir, monkeypatch,
                                                                                            kind):  # fmt: skip
    """Calls said of either 'make it a regular file this user can read', and tune printed that too,
    then searched and saved over it (the link replaced by a file of its own), exit status 0."""
    import os

    path = tuning_file(tuning_dir)
    path.parent.mkdir(parents=True)
    if kind == "fifo":
        os.mkfifo(path)
    else:
        path.symlink_to(tuning_dir / "elsewhere.json")
    monkeypatch.setattr(cli_tune, "bench_kernel", lambda *a, **k: pytest.fail("timed before refusing"))
    result = runner.invoke(main, ["tune", QG_DIR, *TINY])
    assert result.exit_code == 2, result.output
    assert "not a regular file" in result.output and "--dry-run" in result.output, result.output
    assert os.path.lexists(path) and not path.is_file()  # left as it was


def test_tune_says_what_is_wrong_with_the_tuning_file_and_where_it_kept_it(runner, tuning_dir, monkeypatch):
    """A damaged tuning file (one typo of a hand edit) was moved aside by the first save without a
    word: the user never learnt why calls had ignored it, nor where it went. tune says both; bench
    says what is wrong as a line of its own, not as Python's warning text."""
    path = tuning_file(tuning_dir)
    path.parent.mkdir(parents=True)
    text = '{"version": 3, "entries": {"x": 1}'
    path.write_text(text, "utf-8")
    off = runner.invoke(main, ["bench", QG_DIR, *TINY, "--no-host"], env={tuning.DISABLE_ENV: "1"})
    assert off.exit_code == 0 and "tuning file" not in off.output, off.output  # no call reads it
    bench = runner.invoke(main, ["bench", QG_DIR, *TINY, "--no-host"])
    assert bench.exit_code == 0, bench.output
    said = f"tuning file {path}: invalid JSON at line 1 column 35"
    assert said in bench.output and "calls run the manifests' own selection" in bench.output, bench.output
    assert "TuningFileWarning" not in bench.output
    monkeypatch.setattr(cli_tune, "_search", lambda kernel, arrays, attrs, default, *a, **k: (
        (default.median_s / 2, "scalar", {"WORKGROUP_SIZE": 128}), []))  # fmt: skip
    monkeypatch.setattr(cli_tune, "_confirm", lambda kernel, arrays, attrs, default, best, defaults: (best, default.median_s))
    tuning._caches.clear()  # a new process's
    out = invoke(runner, "tune", QG_DIR, *TINY).output.replace("\n", "")
    backup = path.with_name(path.name + tuning.BACKUP_SUFFIX)
    assert f"{said}" in out and f"the first save moves it aside to {backup.name}" in out, out
    assert f"the tuning file as it was is kept as {backup}" in out, out
    assert backup.read_text("utf-8") == text
    assert list(json.loads(path.read_text("utf-8"))["entries"]) == [TINY_KEY]


def test_explain_says_no_stored_result_applies_when_the_device_refuses_it(tuning_dir):
    """A stored BiasAdd entry with a workgroup past the device's limit: explain and render said it
    applied while the call fell back to the selection."""
    bias_add = wk.get_kernel("com.microsoft.BiasAdd")
    metas = {"X": ((2, 64, 320), "float32"), "bias": ((320,), "float32"), "skip": ((2, 64, 320), "float32")}
    cache = tuning.cache_for(wk.get_device().adapter.name, wk.get_device().adapter.backend)
    cache.record(bias_add.tuning_key, *bias_add.tuning_class(metas)[:2],
                 tuning.TunedChoice("scalar", {"WORKGROUP_SIZE": 1 << 20}, 1e-6), *bias_add.tuning_class(metas)[2:])  # fmt: skip
    assert bias_add.explain(metas).tuned is None
    assert "@workgroup_size(1048576" not in "".join(bias_add.render(metas).values())


def test_explain_of_a_forced_variant_reports_no_stored_result(tuning_dir):
    """A call that forces a variant runs it, never a stored tuning result: explain(variant=) says so."""
    bias_add = wk.get_kernel("com.microsoft.BiasAdd")
    metas = {"X": ((2, 64, 320), "float32"), "bias": ((320,), "float32"), "skip": ((2, 64, 320), "float32")}
    cache = tuning.cache_for(wk.get_device().adapter.name, wk.get_device().adapter.backend)
    dtypes, shapes, absent, changed = bias_add.tuning_class(metas)
    cache.record(bias_add.tuning_key, dtypes, shapes, tuning.TunedChoice("scalar", {"WORKGROUP_SIZE": 128}, 1e-6),
                 absent, changed)  # fmt: skip
    assert bias_add.explain(metas).tuned == {"variant": "scalar", "tunables": {"WORKGROUP_SIZE": 128}}
    forced = bias_add.explain(metas, variant="vec4")
    assert forced.tuned is None and forced.chosen == "vec4" and "stored tuning result applies" not in str(forced)
    assert "the call gives variant='vec4'" in forced.tuning_entry["reason"]  # the entry it passes over, and why
    assert bias_add.plan(metas, variant="vec4", tuned=True)[1].variant == "vec4"  # what the call runs


def test_a_case_tunable_its_winner_never_reads_is_the_manifest_selection(runner, tuning_dir, monkeypatch, tmp_path):
    """demo.MatMul's tiled variant never reads WORKGROUP_SIZE: a case naming one, whose winner is
    tiled at it, gives the GPU the manifest selection's work, so nothing is stored (outcomes had
    been compared by tunable values)."""
    from conftest import PACKAGES_DIR

    root = tmp_path / "mm"
    import shutil

    shutil.copytree(PACKAGES_DIR / "demo.MatMul", root)
    case = {"inputs": {"A": {"shape": [2, 9, 16]}, "B": {"shape": [2, 16, 5]}}, "types": {"T": ["float32"]}}
    bench = {"cases": [{"name": "named", **case, "tunables": {"WORKGROUP_SIZE": 128}},
                       {"name": "plain", **{**case, "inputs": {"A": {"shape": [2, 10, 16]}, "B": {"shape": [2, 16, 5]}}}}]}  # fmt: skip
    (root / "bench.json").write_text(json.dumps(bench), "utf-8")
    write_metadata(root)
    monkeypatch.setattr(cli_tune, "_confirm", lambda kernel, arrays, attrs, default, best, defaults: (best, default.median_s))
    monkeypatch.setattr(cli_tune, "_search", _fake_search({(2, 9, 16): None, (2, 10, 16): None}))
    out = " ".join(invoke(runner, "tune", str(root), *QUICK_WARM_UP).output.split())
    assert "different choices" not in out  # the two cases (one class) agree
    assert stored_entries(tuning_dir) == {}


def test_a_refused_candidate_is_not_tried_again_by_the_second_sweep(monkeypatch, device):
    """demo.ReduceSum's workgroup variant cannot take (2, 64, 8) over axis 1 at any tunable: the
    second sweep had repeated every refusal of the first."""
    from conftest import PACKAGES_DIR

    kernel = wk.load_kernel(PACKAGES_DIR / "demo.ReduceSum")
    arrays = {"X": np.random.default_rng(0).standard_normal((2, 64, 8)).astype(np.float32)}
    attempts = []
    real = kernel.work_key

    def counted(*args, **kwargs):
        attempts.append((kwargs.get("variant"), tuple(sorted((kwargs.get("tunables") or {}).items()))))
        return real(*args, **kwargs)

    monkeypatch.setattr(kernel, "work_key", counted)
    monkeypatch.setattr(cli_tune, "bench_kernel", lambda k, a, *, variant=None, **_: SimpleNamespace(median_s=1e-5, variant=variant))
    cli_tune._search(kernel, arrays, {"axis": 1}, SimpleNamespace(median_s=1e-5, variant="strided"),
                     cli_tune._tunable_axes(kernel, device), REL_1E3)  # fmt: skip
    refused = [a for a in attempts if a[0] == "workgroup"]
    assert refused and len(refused) == len(set(refused))


def test_tune_given_shapes_stores_their_class(runner, tuning_dir, monkeypatch):
    """-i tunes a shape of the caller's (a model's) instead of bench.json's cases, as bench's -i
    times one; its dtype is the case's (the label, and the tolerance a candidate must meet)."""
    seen = []
    monkeypatch.setattr(cli_tune, "_search", lambda kernel, arrays, attrs, default, axes, tolerance, defaults,
                        on_candidate, start, never_took: seen.append(tolerance) or ((default.median_s / 2, "scalar",
                                                                  {"WORKGROUP_SIZE": 128}), []))  # fmt: skip
    monkeypatch.setattr(cli_tune, "_confirm", lambda kernel, arrays, attrs, default, best, defaults: (best, default.median_s))
    result = invoke(runner, "tune", QG_DIR, "-i", "X=3x1000:f16", *QUICK_WARM_UP)
    (check,) = seen  # float16's default: bench's rule (held_to) for the case's dtype
    want = {"Y": np.array([1.0, 100.0])}
    for off in (0.5e-3, 0.5e-2, 0.2):
        got = {"Y": np.array([1.0 + off, 100.0], np.float16)}
        assert check(got, want).ok == check_against(got, want, Tolerance.of(["float16"])).ok, off
    assert check({"Y": np.array([1.0, 100.0], np.float16)}, want).ok and not check({"Y": np.array([1.2, 100.0], np.float16)}, want).ok
    assert "custom" in result.stdout and "float16" in result.stdout
    stored = json.loads(tuning_file(tuning_dir).read_text())
    key = f"{wk.get_kernel(QG).tuning_key}|T=float16|X=2x512"  # dimensions rounded down to powers of two
    assert stored["entries"][key]["variant"] == "scalar"


@pytest.mark.parametrize(("args", "said"), [
    (["-i", "X=8:i32"], "argument 'X': expected dtype in ['float32', 'float16']"),
    (["com.microsoft.BiasAdd", "-i", "X=8:f32"], "name exactly one KERNEL"),
    (["-i", "X=8:f32", "--case", "tiny"], "--case, --tag and --dtype do not apply"),
])  # fmt: skip
def test_tune_given_shapes_it_cannot_tune_is_a_usage_error(runner, tuning_dir, args, said):
    result = runner.invoke(main, ["tune", QG_DIR, *args, "--dry-run"])
    assert result.exit_code == 2 and said in result.output, result.output
    assert not tuning_dir.exists() or not list(tuning_dir.glob("*.json"))


def test_the_speed_up_shown_is_the_one_the_choice_was_made_on(runner, tuning_dir, monkeypatch):
    """The winner is kept when it beats the default re-timed next to it; the table had divided the
    search's first timing of the default by the winner's, and showed a stored winner at 0.77x
    (lavapipe: default 2913.4 µs, best 3769.4 µs, saved). Timings scripted: a first default of
    2.9 ms, then two confirming rounds of default 4.0 ms against winner 3.7 ms."""
    winner = ("scalar", {"WORKGROUP_SIZE": 128})
    monkeypatch.setattr(cli_tune, "_search", lambda *args, **kwargs: ((1e-3, *winner), []))
    times = iter([2.9e-3, 4.0e-3, 3.7e-3, 4.0e-3, 3.7e-3])
    monkeypatch.setattr(cli_tune, "bench_kernel", lambda kernel, arrays, **kw: SimpleNamespace(
        median_s=next(times), variant=kw.get("variant") or "vec4"))  # fmt: skip
    out = invoke(runner, "tune", QG_DIR, *TINY).output
    assert "default vec4 4000.0 µs, best scalar WORKGROUP_SIZE=128 3700.0 µs" in out
    assert "1.08x" in out and "0.78x" not in out and "2900.0" not in out
    entry = json.loads(tuning_file(tuning_dir).read_text("utf-8"))["entries"][TINY_KEY]
    assert (entry["variant"], entry["tunables"], entry["median_s"]) == (*winner, 3.7e-3)


def test_a_candidate_with_other_outputs_is_skipped_not_a_crash(write_package, runner):
    """A variant that leaves an optional output out (no pass binds it) had crashed tune with a
    KeyError once such outputs were left out of results (a review): it computes other
    outputs than the default, so it is skipped, as a variant whose output differs is."""
    root = optional_output_package(write_package, [("withz", 10, True), ("noz", 1, False)])
    result = runner.invoke(main, ["tune", str(root), "--dry-run", *QUICK_WARM_UP])  # outputs checked as in a full run
    assert result.exit_code == 0, (result.output, result.exception)
    assert "skipped (output differs from the default's): noz" in " ".join(result.output.split())



def test_tune_refuses_a_tuning_file_it_cannot_read_before_any_search(runner, tuning_dir, monkeypatch):
    """Another user's tuning file (or lock) in a shared folder: tune searched a whole case, then
    crashed with a raw PermissionError when it saved."""
    tuning_dir.mkdir(exist_ok=True)
    cache = tuning.cache_for(wk.get_device().adapter.name, wk.get_device().adapter.backend)
    cache.path.write_text(json.dumps({"version": tuning.FILE_VERSION, "entries": {}}), "utf-8")
    monkeypatch.setattr(cli_tune.os, "access", lambda p, mode: str(p) != str(cache.path))
    monkeypatch.setattr(cli_tune, "bench_kernel", lambda *a, **k: pytest.fail("timed before refusing"))
    result = runner.invoke(main, ["tune", QG_DIR, *TINY])
    assert result.exit_code == 2 and "this user cannot read the tuning file" in result.output, result.output


def _scalar_wins(monkeypatch):
    """The search answering scalar WORKGROUP_SIZE=128 and _confirm keeping it: what tune stores is under test."""
    monkeypatch.setattr(cli_tune, "_search", _fake_search({(4096,): ("scalar", {"WORKGROUP_SIZE": 128})}))
    monkeypatch.setattr(cli_tune, "_confirm", lambda kernel, arrays, attrs, default, best, defaults: (best, default.median_s))



def _linked_tuning_file(tuning_dir, tmp_path):
    """The adapter's tuning file as a symbolic link to an empty tuning file the user keeps elsewhere
    (a dotfiles repository): (the link, the file)."""
    path = tuning_file(tuning_dir)
    path.parent.mkdir(parents=True)
    kept = tmp_path / "dotfiles" / "gpu.json"
    kept.parent.mkdir()
    kept.write_text(json.dumps({"version": tuning.FILE_VERSION, "entries": {}}), "utf-8")
    path.symlink_to(kept)
    return path, kept

def test_tune_writes_through_a_tuning_file_that_is_a_link_to_the_file_it_links_to(runner, tuning_dir, monkeypatch,
                                                                                    tmp_path):  # fmt: skip
    """A tuning file linked to one the user keeps elsewhere (a dotfiles repository): tune replaced the
    link by a file of its own, so the file linked to never got the results. It writes that file now
    (through a temporary file beside it), the link kept; a damaged one is moved aside beside it."""
    import os

    path, kept = _linked_tuning_file(tuning_dir, tmp_path)
    _scalar_wins(monkeypatch)
    out = " ".join(invoke(runner, "tune", QG_DIR, *TINY).output.split())
    assert path.is_symlink() and os.readlink(path) == str(kept)
    assert list(json.loads(kept.read_text("utf-8"))["entries"]) == [TINY_KEY]
    assert f"saved: {path}" in out, out
    assert sorted(p.name for p in kept.parent.iterdir()) == ["gpu.json"]  # no temporary file left

    kept.write_text("{not json", "utf-8")  # damaged: moved aside beside the file it is, not the link
    tuning._caches.clear()  # a new process's
    out = " ".join(invoke(runner, "tune", QG_DIR, *TINY).output.split())
    backup = kept.with_name(kept.name + tuning.BACKUP_SUFFIX)
    assert f"the first save moves it aside to {backup}" in out and f"is kept as {backup}" in out, out
    assert backup.read_text("utf-8") == "{not json"
    assert path.is_symlink() and list(json.loads(kept.read_text("utf-8"))["entries"]) == [TINY_KEY]
    assert sorted(p.name for p in tuning_dir.iterdir()) == sorted([path.name, tuning.LOCK_NAME])


def _read_only(path, undo):
    """``path`` made read-only for this user, for real: chmod, or, as root (whom modes do not stop),
    the immutable flag; ``undo`` gets what puts it back. Skips where neither can be done."""
    import os
    import shutil
    import subprocess

    if os.geteuid() != 0:
        mode = path.stat().st_mode
        path.chmod(0o555 if path.is_dir() else 0o444)
        undo.append(lambda: path.chmod(mode))
        return
    if shutil.which("chattr") is None or subprocess.run(["chattr", "+i", str(path)], capture_output=True).returncode:
        pytest.skip("running as root where the immutable flag cannot be set: no folder is read-only to this user")
    undo.append(lambda: subprocess.run(["chattr", "-i", str(path)], check=True))


def test_tune_refuses_a_link_to_a_file_it_cannot_write_before_any_search(runner, tuning_dir, monkeypatch, tmp_path):
    """A tuning file linked to a file in a folder this user cannot write (a read-only checkout): the
    folder check looked at the link's folder only, so tune searched the first case and then failed
    to save, the very thing the check is there to prevent."""
    path, kept = _linked_tuning_file(tuning_dir, tmp_path)
    monkeypatch.setattr(cli_tune, "bench_kernel", lambda *a, **k: pytest.fail("timed before refusing"))
    undo = []
    try:
        _read_only(kept, undo)
        _read_only(kept.parent, undo)
        result = runner.invoke(main, ["tune", QG_DIR, *TINY])
    finally:
        for step in reversed(undo):
            step()
    assert result.exit_code == 2 and str(kept) in result.output, result.output
    assert "cannot write" in " ".join(result.output.split()), result.output


def test_tune_replaces_another_users_link_as_the_tuning_file_and_leaves_its_target(runner, tuning_dir, monkeypatch,
                                                                                     tmp_path):  # fmt: skip
    """A link another user put in a shared tuning folder is not written through: one to a file that
    is no tuning file (a shell's rc file) would have been moved aside and overwritten. Emulated:
    the tests run as the link's owner."""
    import os

    path = tuning_file(tuning_dir)
    path.parent.mkdir(parents=True)
    theirs = tmp_path / "bashrc"
    theirs.write_text("export PATH=...\n", "utf-8")
    path.symlink_to(theirs)
    monkeypatch.setattr(replacing, "_link_is_own", lambda p: False)
    _scalar_wins(monkeypatch)
    out = " ".join(invoke(runner, "tune", QG_DIR, *TINY).output.split())
    assert theirs.read_text("utf-8") == "export PATH=...\n" and not theirs.with_name("bashrc.bak").exists()
    backup = path.with_name(path.name + tuning.BACKUP_SUFFIX)
    assert os.readlink(backup) == str(theirs) and f"is kept as {backup}" in out, out  # the link, moved aside
    assert not path.is_symlink() and list(json.loads(path.read_text("utf-8"))["entries"]) == [TINY_KEY]


def test_tune_names_the_backup_it_makes_where_an_earlier_backup_is_kept(runner, tuning_dir, monkeypatch):
    """Its first line named `<name>.bak` while the save, finding an earlier backup there, moved the
    file to `<name>.1.bak` (the last line named that): both name the file written."""
    path = tuning_file(tuning_dir)
    path.parent.mkdir(parents=True)
    path.write_text("{not json", "utf-8")
    earlier = path.with_name(path.name + tuning.BACKUP_SUFFIX)
    earlier.write_text("an earlier backup", "utf-8")
    _scalar_wins(monkeypatch)
    out = " ".join(invoke(runner, "tune", QG_DIR, *TINY).output.split())
    backup = path.with_name(f"{path.name}.1{tuning.BACKUP_SUFFIX}")
    assert f"the first save moves it aside to {backup.name} " in out, out
    assert "a run that stores nothing leaves it as it is" in out, out
    assert f"the tuning file as it was is kept as {backup}" in out, out
    assert backup.read_text("utf-8") == "{not json" and earlier.read_text("utf-8") == "an earlier backup"


def test_a_tune_that_stores_nothing_creates_no_file_and_leaves_one_as_it_was(runner, tuning_dir, monkeypatch):
    """A run whose every class keeps the manifest's selection wrote `{"entries": {}}`, creating the
    file; and rewrote one that existed though nothing in it changed. Neither now, and it says so."""
    import os

    monkeypatch.setattr(cli_tune, "_search", _fake_search({(4096,): None}))
    path = tuning_file(tuning_dir)
    out = " ".join(invoke(runner, "tune", QG_DIR, *TINY).output.split())
    assert not os.path.lexists(path), path.read_text("utf-8")
    assert f"nothing stored in {path}" in out and f"{path} was not created" in out, out
    assert "saved:" not in out, out

    other = f"{wk.get_kernel(QG).tuning_key}|T=float32|X=64"  # another class: not this run's to drop
    text = json.dumps({"version": tuning.FILE_VERSION, "entries": {other: {
        "variant": "scalar", "tunables": {"WORKGROUP_SIZE": 64}, "median_s": 1e-5}}})  # fmt: skip
    path.write_text(text, "utf-8")  # one line: a file tune rewrote would be indented
    os.utime(path, ns=(10**9, 10**9))
    tuning._caches.clear()  # a new process's
    out = " ".join(invoke(runner, "tune", QG_DIR, *TINY).output.split())
    assert path.read_text("utf-8") == text and path.stat().st_mtime_ns == 10**9
    assert f"nothing stored in {path}" in out and f"{path} is as it was" in out, out


def _record_search_candidates(monkeypatch, timed):
    """A bench_kernel stand-in for demo.LayerNorm: `when` refusals as a real call, onepass fastest at
    WORKGROUP_SIZE 512 x ROW_ITEMS 4 (outside the searches below), then at 128 x 16; each search
    candidate (a short timing) recorded as (variant, WORKGROUP_SIZE, ROW_ITEMS)."""

    def fake_bench(kernel, arrays, *, attrs=None, tunables=None, variant=None, **timing):
        _, plan = kernel.plan(arrays, attrs=attrs, variant=variant, tunables=tunables)
        t = dict(tunables)
        if timing.get("min_total_s") == 0.1:
            timed.append((plan.variant, t["WORKGROUP_SIZE"], t["ROW_ITEMS"]))
        costs = {(512, 4): 5e-6, (128, 16): 10e-6}
        cost = costs.get((t["WORKGROUP_SIZE"], t["ROW_ITEMS"]), 30e-6) if plan.variant == "onepass" else 50e-6
        return SimpleNamespace(median_s=cost, variant=plan.variant)

    monkeypatch.setattr(cli_tune, "bench_kernel", fake_bench)


@pytest.mark.parametrize(("given", "sizes"), [("WORKGROUP_SIZE=128", {128}), ("WORKGROUP_SIZE=128,256", {128, 256})])
def test_tunable_restricts_the_search_to_the_values_given(runner, tuning_dir, monkeypatch, given, sizes):
    """`tune --tunable NAME=V[,V...]`: only those values of NAME are tried (one value pins it) while
    the other tunables are searched; the fastest of them is stored. tune had no way to hold
    WORKGROUP_SIZE while searching ROW_ITEMS (a review)."""
    from conftest import PACKAGES_DIR

    layer_norm = wk.load_kernel(PACKAGES_DIR / "demo.LayerNorm")
    timed: list[tuple[str, int, int]] = []
    _record_search_candidates(monkeypatch, timed)
    invoke(runner, "tune", str(layer_norm.package.root), "--case", "clip-l-1x77x768", "--dtype", "f32",
           "--tunable", given, *QUICK_WARM_UP)  # fmt: skip
    assert timed and {size for _, size, _ in timed} == sizes, timed
    assert len({items for _, _, items in timed}) > 1, timed  # ROW_ITEMS still searched
    entry = stored_entries(tuning_dir)[f"{layer_norm.tuning_key}|T=float32,U=float32|{CLIP_L}"]
    assert entry["variant"] == "onepass", entry
    assert (entry["tunables"]["WORKGROUP_SIZE"], entry["tunables"]["ROW_ITEMS"]) == (128, 16), entry


def test_tunable_values_equal_as_the_contract_takes_them_are_one(runner, tuning_dir, monkeypatch):
    """`--tunable WORKGROUP_SIZE=128.0,128,256`: the contract takes 128.0 as the integer 128, so the
    two are one candidate, kept as the first given and searched (and stored) as the integer it is;
    128.0 had been a candidate of its own, shown and stored as a float."""
    from conftest import PACKAGES_DIR

    layer_norm = wk.load_kernel(PACKAGES_DIR / "demo.LayerNorm")
    timed: list[tuple[str, int, int]] = []
    _record_search_candidates(monkeypatch, timed)
    axes: list[list[tuple[str, list]]] = []
    real_axes = cli_tune._tunable_axes
    monkeypatch.setattr(cli_tune, "_tunable_axes", lambda *a, **k: axes.append(real_axes(*a, **k)) or axes[-1])
    result = invoke(runner, "tune", str(layer_norm.package.root), "--case", "clip-l-1x77x768", "--dtype", "f32",
                    "--tunable", "WORKGROUP_SIZE=128.0,128,256", *QUICK_WARM_UP)  # fmt: skip
    assert axes and all(dict(a)["WORKGROUP_SIZE"] == [128, 256] for a in axes), axes
    assert all(type(v) is int for a in axes for v in dict(a)["WORKGROUP_SIZE"]), axes
    assert {size for _, size, _ in timed} == {128, 256}, timed
    assert "WORKGROUP_SIZE=128.0" not in result.output, result.output
    entry = stored_entries(tuning_dir)[f"{layer_norm.tuning_key}|T=float32,U=float32|{CLIP_L}"]
    assert type(entry["tunables"]["WORKGROUP_SIZE"]) is int and entry["tunables"]["WORKGROUP_SIZE"] == 128, entry


@pytest.mark.parametrize(("given", "says"), [
    ("WORKGROUP_SIZ=64", "argument 'WORKGROUP_SIZ': expected one of the tunables"),
    ("WORKGROUP_SIZE=64,big", "argument 'WORKGROUP_SIZE': expected an integer (tunable), got str 'big'"),
    ("WORKGROUP_SIZE", "'WORKGROUP_SIZE' is not NAME=V[,V...]"),
])  # fmt: skip
def test_tunable_values_are_checked_before_any_timing(runner, monkeypatch, given, says):
    monkeypatch.setattr(cli_tune, "bench_kernel", lambda *a, **k: pytest.fail("timed"))
    result = runner.invoke(main, ["tune", QG_DIR, *TINY, "--tunable", given])
    assert result.exit_code == 2 and says in " ".join(result.stderr.split()), result.output


@pytest.mark.parametrize("given", ["WORKGROUP_SIZE=1,true", "WORKGROUP_SIZE=0,false", "WORKGROUP_SIZE=[64]", 'WORKGROUP_SIZE={"a":1}'])
def test_tunable_values_equal_in_python_but_of_another_kind_are_each_checked(runner, monkeypatch, given):
    """The values were made unique through a dict, where True is 1: `1,true` had
    tried 1 alone and never said that true is no integer; a list or an object was a traceback."""
    monkeypatch.setattr(cli_tune, "bench_kernel", lambda *a, **k: pytest.fail("timed"))
    result = runner.invoke(main, ["tune", QG_DIR, *TINY, "--tunable", given])
    assert result.exit_code == 2 and "argument 'WORKGROUP_SIZE': expected an integer" in result.stderr, result.output


def test_a_tunable_one_of_several_kernels_lacks_names_that_kernel(runner, monkeypatch):
    """With several KERNELs (or none: every embedded one), the refusal of a tunable one of them does
    not declare said which tunables exist but not whose: it names the kernel."""
    from conftest import PACKAGES_DIR

    monkeypatch.setattr(cli_tune, "bench_kernel", lambda *a, **k: pytest.fail("timed"))
    result = runner.invoke(main, ["tune", str(PACKAGES_DIR / "demo.LayerNorm"), QG_DIR, "--tunable", "ROW_ITEMS=4"])
    said = " ".join(result.stderr.split())
    assert result.exit_code == 2 and "argument 'ROW_ITEMS': expected one of the tunables" in said, result.output
    assert f"note: that is {QG}'s contract; --tunable applies to every KERNEL tuned" in said, result.output


def test_a_variant_whose_when_refuses_the_case_is_named_once_with_its_reason(runner):
    """tune prints a "trying" line per candidate and none for a variant whose `when` refuses the
    case at every candidate, so a user could not tell it had been considered. One line per case
    names such variants and the clause that refuses each (the selection trace's words); a case
    every variant takes gets no such line."""
    out = " ".join(invoke(runner, "tune", QG_DIR, "-i", "X=5x77x13:f32", "--dry-run", *QUICK_WARM_UP).output.split())
    # 5005 elements: not a multiple of 4, so vec4's vec4Ok is false; vec4_tail and scalar take it
    assert ("QuickGelu custom T=float32: not tried, as each refuses the case at every candidate: "
            "vec4 (when[1] 'vec4Ok' is false (with vec4Ok=False, shapes.X=[5, 77, 13]))") in out, out
    assert out.count("not tried") == 1, out
    quiet = invoke(runner, "tune", QG_DIR, *TINY, "--dry-run").output
    assert "not tried" not in quiet, quiet


def test_a_variant_refused_at_every_candidate_by_other_than_its_when_is_named_with_that_reason(runner, write_package):
    """A variant whose `when` takes the case but whose plan fails at every candidate (its dispatch
    here: a grid past what workgroupIndex counts) is also never tried; the line names the error
    that refused it, and does not say its `when` did (that clause holds)."""
    manifest = json.loads((PACKAGES_DIR / "demo.ScaleShift" / "manifest.json").read_text())
    manifest["variants"][1]["passes"][0]["dispatch"]["threads"] = "2 ** 40"
    template = (PACKAGES_DIR / "demo.ScaleShift" / "scale-shift.wgsl.jinja").read_text()
    root = write_package(manifest, {"scale-shift.wgsl.jinja": template})
    out = " ".join(invoke(runner, "tune", str(root), "-i", "X=8:f32", "--dry-run", *QUICK_WARM_UP).output.split())
    assert "not tried" in out and "scalar (" in out, out
    assert "`when` refuses" not in out and "workgroupIndex" in out, out


@pytest.mark.parametrize(("tolerances", "skipped"), [(None, True), ({"float32": {"atol": 0.05}}, False)])
def test_tune_holds_a_candidate_to_bench_json_s_tolerances(runner, tmp_path, tuning_dir, tolerances, skipped):
    """tune compared a candidate's output with the default's at the engine's default tolerance,
    whatever bench.json's `tolerances` (bench's own rule) said: a variant off by 0.01 was skipped as
    "computing something else" where the package allows 0.05."""
    root = copy_package(PACKAGES_DIR / "demo.ScaleShift", tmp_path / "ss")
    template = root / "scale-shift.wgsl.jinja"
    text = template.read_text("utf-8")
    assert "* params.affine.x + params.affine.y);" in text
    template.write_text(text.replace("* params.affine.x + params.affine.y);", "* params.affine.x + params.affine.y + 0.01);"),
                        "utf-8")  # the scalar variant is off by 0.01  # fmt: skip
    bench = {"cases": [{"name": "n256", "inputs": {"X": {"shape": [256]}}, "types": {"T": ["float32"]}}]}
    if tolerances:
        bench["tolerances"] = tolerances
    (root / "bench.json").write_text(json.dumps(bench), "utf-8")
    write_metadata(root)
    result = runner.invoke(main, ["tune", str(root), "--dry-run", *QUICK_WARM_UP])
    said = " ".join(result.output.split())
    assert result.exit_code == 0, result.output
    assert ("skipped (output differs from the default's): scalar" in said) is skipped, said


@pytest.mark.parametrize("command", ["bench", "tune"])
def test_quick_times_every_figure_with_two_short_batches(runner, tuning_dir, monkeypatch, command):
    """--quick is the smoke run of a CI job on a CPU adapter, where figures mean nothing and the
    batch rule's wait for two agreeing medians (up to 40 batches of 50 ms) was most of the time:
    every timing (the default, tune's candidates, the copy kernel) is two batches of the fewest
    spans, and the run still checks every output against its reference."""
    from webgpu_kernels import benchmark

    spans: list[int] = []
    real_one_batch = benchmark._one_batch
    monkeypatch.setattr(benchmark, "_one_batch", lambda gpu, bound, n, calls: spans.append(n) or real_one_batch(gpu, bound, n, calls))
    args = [command, QG_DIR, *STEADY_TINY, "--quick", "--json" if command == "bench" else "--dry-run"]
    # bench's host phase in 20 calls, not 10,000 (it is timed on the wall clock, without batches)
    result = invoke(runner, *args, *(["-", "--calls", "20"] if command == "bench" else []))
    # each timing's probe of two one-call spans (_span_for) aside, and --warm-up's one-span batches
    timings = [n for n in spans if n not in (1, 2)]
    assert timings and set(timings) == {walltime.MIN_SPANS}, spans
    assert len(timings) % 2 == 0, spans  # two batches a timing
    if command == "bench":
        (row,) = json.loads(result.stdout[result.stdout.index("{"):])["cases"]
        assert row["batches"] == 2 and row["quick"] is True and row["error_ok"] is True, row
        assert "unstable" not in result.output  # two batches that disagree are what was asked for
        assert "quick: two short batches a timing" in result.output
    else:
        assert "quick: two short batches a timing" in result.output
        assert len(timings) >= 2 * 3, spans  # the default, candidates and the confirmation, all quick


def test_quick_refuses_compare(runner):
    """A comparison of rough figures with the peers' steady ones would mislead: refused, exit 2."""
    result = runner.invoke(main, ["bench", QG_DIR, *STEADY_TINY, "--quick", "--compare"])
    assert result.exit_code == 2 and "--quick" in result.output and "--compare" in result.output, result.output
