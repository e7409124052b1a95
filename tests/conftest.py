"""Shared fixtures: the real WebGPU device (lavapipe in CI), the two seed kernels, seeded RNGs.

``XDG_RUNTIME_DIR`` must exist before wgpu-native starts (Mesa's Vulkan loader complains without
it), so it is set here, before anything imports wgpu.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import zlib
from collections.abc import Iterator
from pathlib import Path


def _temporary_folder(prefix: str) -> str:
    """A new folder removed when this process exits (each xdist worker makes its own: a run had
    left four such folders per process in /tmp)."""
    path, owner = tempfile.mkdtemp(prefix=prefix), os.getpid()
    # Only by the process that made it: a forked child leaving through sys.exit runs the atexit
    # handlers it inherited, and would remove its parent's folders while the parent still runs.
    atexit.register(lambda: os.getpid() == owner and shutil.rmtree(path, ignore_errors=True))
    return path


if not os.environ.get("XDG_RUNTIME_DIR"):
    os.environ["XDG_RUNTIME_DIR"] = _temporary_folder("wk-xdg-")
# Hermetic selection: calls without `variant`/`tunables` may follow autotuning results stored per
# adapter (webgpu_kernels.tuning); the tests want the manifest's own selection, so point the
# tuning cache at an empty folder.
os.environ["WEBGPU_KERNELS_TUNING_DIR"] = _temporary_folder("wk-tuning-")

import numpy as np  # noqa: E402
import pytest  # noqa: E402
from click.testing import CliRunner  # noqa: E402

TESTS_DIR = Path(__file__).resolve().parent
if str(TESTS_DIR) not in sys.path:  # so that ``import references`` works from every test module
    sys.path.insert(0, str(TESTS_DIR))

import webgpu_kernels as wk  # noqa: E402
from webgpu_kernels import hub, sandbox, tuning  # noqa: E402
from webgpu_kernels.device import get_device  # noqa: E402
from webgpu_kernels.package import embedded_root  # noqa: E402
from webgpu_kernels.package_tests import CRASH_HOOK_ENV  # noqa: E402
from webgpu_kernels.poisoned_buffers import fill_pooled_buffers  # noqa: E402

# The tests check that a render is stopped by a limit that counts (work units, sizes, depth); the
# wall-clock deadline (10 s) is a backstop, which a loaded machine reached first: a self-including
# template took 4.6 s with six processes on two cores, and more in a full run beside them. A missing
# limit still fails those tests, after this long. tests/test_sandbox.py checks the deadline itself.
sandbox.MAX_RENDER_SECONDS = 120.0

REPO_ROOT = TESTS_DIR.parent
PACKAGES_DIR = TESTS_DIR / "packages"
SHARED_SEEDS = REPO_ROOT.parent / "shared" / "seeds"

DTYPES = (np.float32, np.float16)
DTYPE_IDS = ("f32", "f16")  # pytest ids of DTYPES
#: The unsigned integer of each float's width: float outputs compared bit for bit (copies keep NaN payloads, -0.0).
BITS = {np.dtype(np.float32): np.uint32, np.dtype(np.float16): np.uint16}


@pytest.fixture(scope="session")
def device():
    return wk.get_device()


def run_on_words(kernel_src: str, words: list[int]) -> np.ndarray:
    """One invocation of ``kernel_src`` (its binding 0 a read-write ``array<u32>``) on ``words``, as
    the device leaves them."""
    import wgpu

    gpu = wk.get_device().gpu  # the session fixture's device
    module = gpu.create_shader_module(code=kernel_src)
    pipeline = gpu.create_compute_pipeline(layout="auto", compute={"module": module, "entry_point": "main"})
    buffer = gpu.create_buffer_with_data(data=np.array(words, np.uint32),
                                         usage=wgpu.BufferUsage.STORAGE | wgpu.BufferUsage.COPY_SRC)  # fmt: skip
    group = gpu.create_bind_group(layout=pipeline.get_bind_group_layout(0),
                                  entries=[{"binding": 0, "resource": {"buffer": buffer}}])  # fmt: skip
    encoder = gpu.create_command_encoder()
    compute = encoder.begin_compute_pass()
    compute.set_pipeline(pipeline)
    compute.set_bind_group(0, group)
    compute.dispatch_workgroups(1)
    compute.end()
    gpu.queue.submit([encoder.finish()])
    return np.frombuffer(gpu.queue.read_buffer(buffer), np.uint32)


@pytest.fixture(scope="session")
def has_f16(device) -> bool:
    return device.has_f16


@pytest.fixture
def need_dtype(has_f16):
    """Call with a dtype: skips float16 cases on an adapter without shader-f16."""

    def check(dtype) -> None:
        if np.dtype(dtype) == np.float16 and not has_f16:
            pytest.skip("this adapter has no shader-f16 feature")

    return check


@pytest.fixture
def need_workgroup_size():
    """Call with a WORKGROUP_SIZE: skips it when above this adapter's invocations-per-workgroup limit."""

    def check(size: int) -> None:
        if size > wk.get_device().limits["max-compute-invocations-per-workgroup"]:
            pytest.skip("workgroup size above this adapter's limit")

    return check


def bind_outputs(data: dict) -> dict:
    """``data`` (a synthetic manifest) with every pass also binding each output read-write: the
    engine refuses a variant that writes no output, and fixtures about other rules bind only X."""
    outputs = [{"name": f"{o['role'].lower()}_out", "arg": o["role"], "buffer": {"type": "storage"}, "elementType": "f32"}
               for o in data.get("outputs", [])]  # fmt: skip
    for v in data.get("variants", []):
        v["passes"] = [{**p, "bindings": [*p["bindings"], *(o for o in outputs if o["arg"] not in
                                                           {b.get("arg") for b in p["bindings"]})]}
                       for p in v["passes"]]  # fmt: skip
    return data


def poison_outputs(kernel: wk.Kernel, inputs, *, attrs=None, tunables=None) -> None:
    """Before a call with NumPy ``inputs``: one pooled buffer of all-ones bytes (NaN as float16 and
    as float32) per tensor of the call, inputs and outputs, so that every output gets one and an
    element the kernel leaves unwritten shows NaN (the runner's own fill, package_tests)."""
    fill_pooled_buffers(get_device(), inputs, kernel.explain(inputs, attrs=attrs, tunables=tunables).outputs, 0xFF)


@pytest.fixture(scope="session")
def quick_gelu() -> wk.Kernel:
    return wk.get_kernel("com.microsoft.QuickGelu")


@pytest.fixture(scope="session")
def bias_add() -> wk.Kernel:
    return wk.get_kernel("com.microsoft.BiasAdd")


@pytest.fixture
def rng(request) -> np.random.Generator:
    """A generator seeded from the test's id: reproducible, but different per test case."""
    return np.random.default_rng(zlib.crc32(request.node.nodeid.encode()))


def plan_for(kernel: wk.Kernel, inputs, *, variant=None, attrs=None, tunables=None):
    """The execution plan the kernel runs for such a call (built if needed, else from its cache).

    Reaches into the kernel (``Kernel._plan``): the grid a pass is dispatched with is only kept
    in the plan.
    """
    from webgpu_kernels.contract import check_call

    metas = {name: (tuple(v.shape), np.dtype(v.dtype).name) for name, v in inputs.items()}
    signature = check_call(kernel.manifest, metas, attrs, tunables)
    return kernel._plan(signature, variant, wk.get_device())


@pytest.fixture
def plan_of():
    """``plan_of(kernel, inputs, variant=..., ...)``: see :func:`plan_for`."""
    return plan_for


@pytest.fixture
def write_package(tmp_path):
    """``write_package(manifest: dict, templates: dict[name, text]) -> Path``: a package folder."""
    import json

    counter = iter(range(1_000_000))

    def write(manifest: dict, templates: dict[str, str]) -> Path:
        root = tmp_path / f"pkg{next(counter)}"
        root.mkdir()
        (root / "manifest.json").write_text(json.dumps(manifest, indent=1), encoding="utf-8")
        for name, text in templates.items():
            (root / name).write_text(text, encoding="utf-8")
        return root

    return write


@pytest.fixture
def scale_shift_variant(write_package):
    """``scale_shift_variant(change, template, **files)``: a copy of demo.ScaleShift with
    ``change(manifest)`` applied (a function that edits the dict), its template replaced by
    ``template`` and ``files`` (name -> text) added: a kernel for the format's claims."""
    import copy
    import json

    folder = PACKAGES_DIR / "demo.ScaleShift"
    manifest_text = (folder / "manifest.json").read_text(encoding="utf-8")
    default_template = (folder / "scale-shift.wgsl.jinja").read_text(encoding="utf-8")

    def load(change=None, template: str = default_template, **files: str) -> wk.Kernel:
        manifest = copy.deepcopy(json.loads(manifest_text))
        if change is not None:
            change(manifest)
        return wk.load_kernel(write_package(manifest, {"scale-shift.wgsl.jinja": template, **files}))

    return load


def optional_output_package(write_package, variants: list[tuple]) -> Path:
    """demo.OptOut: Y = X always; Z = 2X, an optional output, from the variants (id, priority,
    writes Z[, when clauses]) that bind it. A bench.json with one 4,096-element case."""
    def bindings(writes_z: bool) -> list[dict]:
        found = [{"name": "x", "arg": "X", "buffer": {"type": "read-only-storage"}, "elementType": "f32"},
                 {"name": "y", "arg": "Y", "buffer": {"type": "storage"}, "elementType": "f32"},
                 {"name": "params", "semantic": "kernel.params", "buffer": {"type": "uniform"},
                  "struct": {"name": "Params", "fields": [{"name": "n", "type": "u32", "value": "numel(shapes.X)"}]}}]
        if writes_z:
            found.insert(2, {"name": "z", "arg": "Z", "buffer": {"type": "storage"}, "elementType": "f32"})
        return found

    manifest = {
        "domain": "demo", "name": "OptOut", "inputs": [{"role": "X", "dtype": "T"}],
        "outputs": [{"role": "Y", "dtype": "T", "rank": "ranks.X", "shape": "shapes.X"},
                    {"role": "Z", "dtype": "T", "rank": "ranks.X", "shape": "shapes.X", "optional": True}],
        "typeConstraints": {"T": ["float32"]}, "tunables": {"WORKGROUP_SIZE": 64},
        "variants": [{"id": vid, "priority": priority, **({"when": when[0]} if when else {}), "passes": [{
            "id": "main", "shader": f"{vid}.wgsl.jinja", "bindings": bindings(writes_z),
            "dispatch": {"threads": "numel(shapes.X)", "workgroupSize": "tunables.WORKGROUP_SIZE"}}]}
            for vid, priority, writes_z, *when in variants],
    }  # fmt: skip
    templates = {f"{vid}.wgsl.jinja": (
        "{{ declarations }}\n@compute @workgroup_size({{ workgroupSize }})\n"
        "fn {{ entryPoint }}({{ entryParams }}) {\n  let i = {{ globalIndex }};\n"
        "  if (i >= params.n) { return; }\n  y[i] = x[i];\n" + ("  z[i] = 2.0 * x[i];\n" if writes_z else "") + "}\n")
        for vid, _, writes_z, *_ in variants}  # fmt: skip
    root = write_package(manifest, templates)
    bench = {"cases": [{"name": "tiny-4096", "inputs": {"X": {"shape": [4096]}}, "types": {"T": ["float32"]}}]}
    (root / "bench.json").write_text(json.dumps(bench), encoding="utf-8")
    return root


def copy_package(op_id: str, dest: Path) -> Path:
    """A writable copy of an embedded package (its metadata.json included)."""
    shutil.copytree(embedded_root() / op_id, dest)
    for path in dest.rglob("*"):
        path.chmod(path.stat().st_mode | stat.S_IWUSR)
    return dest


@pytest.fixture(scope="session")
def gl_device():
    """The OpenGL adapter without shader-f16 (lavapipe's llvmpipe over GL)."""
    try:
        device = wk.get_device("gl")
    except wk.errors.GPUError as exc:
        pytest.skip(f"no usable OpenGL adapter: {exc}")
    if device.has_f16:
        pytest.skip("this OpenGL adapter has shader-f16")
    return device


@pytest.fixture
def runner(monkeypatch: pytest.MonkeyPatch) -> CliRunner:
    """The CLI as a user runs it: the default adapter, no crash hook, a wide terminal (tables and
    messages are not wrapped mid-word, so tests can look for whole phrases)."""
    monkeypatch.delenv("WEBGPU_KERNELS_ADAPTER", raising=False)
    monkeypatch.delenv(CRASH_HOOK_ENV, raising=False)
    return CliRunner(env={"COLUMNS": "200"})


@pytest.fixture
def package_folder(tmp_path):
    """A copy of the embedded QuickGelu package, renamed, with a second pass in its scalar variant."""
    folder = tmp_path / "my.QuickGelu2"
    # Without metadata.json: an author's working copy, whose digests have not been taken yet.
    shutil.copytree(embedded_root() / "com.microsoft.QuickGelu", folder, ignore=shutil.ignore_patterns("metadata.json"))
    manifest = json.loads((folder / "manifest.json").read_text())
    manifest["domain"], manifest["name"] = "my", "QuickGelu2"
    scalar = manifest["variants"][2]
    scalar["passes"].append({**scalar["passes"][0], "id": "again", "name": "QuickGelu.again"})
    (folder / "manifest.json").write_text(json.dumps(manifest))
    return folder


@pytest.fixture
def hub_env(tmp_path, monkeypatch):
    """A private Hugging Face home, online mode, no telemetry, no Hub kernels cached in the process."""
    hf_constants = pytest.importorskip("huggingface_hub.constants")
    for var in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "HF_TOKEN"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    monkeypatch.setattr(hf_constants, "HF_HUB_OFFLINE", False)
    # The client asks {ENDPOINT}/api/agent-harnesses (ENDPOINT as at import) for its user agent:
    # telemetry off keeps every request on the local server.
    monkeypatch.setattr(hf_constants, "HF_HUB_DISABLE_TELEMETRY", True)
    hub.clear_cache()
    yield tmp_path / "hf-home"
    hub.clear_cache()


@pytest.fixture
def tuning_dir(tmp_path, monkeypatch):
    """An empty tuning folder of this test's own, tuning enabled, no cache loaded yet."""
    folder = tmp_path / "tuning"
    monkeypatch.setenv(tuning.CACHE_ENV, str(folder))
    monkeypatch.delenv(tuning.DISABLE_ENV, raising=False)
    monkeypatch.setattr(tuning, "_caches", {})
    return folder


# --- third-party test packages (tests/packages) --------------------------------------------------


def assert_engine_has_no_code_for(name: str) -> None:
    """No engine module names the package: it runs from its manifest and templates alone."""
    for path in Path(wk.__file__).parent.rglob("*.py"):
        assert name not in path.read_text("utf-8"), path


def stored_expectations(kernel: wk.Kernel, output: str, dtype_of):
    """(case, inputs, stored expected output) for each test.json case with expected outputs (refused
    cases have none), built as `test` builds them; ``dtype_of(inputs)`` is the output's dtype name."""
    from webgpu_kernels.casefile import read_test_file

    for case in read_test_file(kernel.package).cases:
        if case.refused is None:
            inputs = wk.test_case_inputs(kernel, case.name)
            yield case, inputs, case.build_expected(kernel.package.read_bytes, {output: dtype_of(inputs)})[output]


def assert_valid_and_passing(kernel: wk.Kernel, package: Path, variants, *, warnings_ok: bool = False) -> None:
    """metadata.json is current (run `webgpu-kernels digest` after an edit), validate finds nothing
    wrong, and every test.json case passes on every variant that accepts it, each variant tested.
    ``warnings_ok`` allows warnings, but none of a derive entry or constant that nothing reads."""
    from webgpu_kernels.package_tests import run_package_tests
    from webgpu_kernels.validation import validate_package

    report = validate_package(package, gpu=False)
    unused = [p.message for p in report.warnings if p.message.startswith("nothing reads")]
    assert not unused, unused
    assert report.ok and (warnings_ok or not report.warnings), [p.message for p in report.problems]
    results = run_package_tests(kernel).results
    failed = [(r.case, r.variant, r.message) for r in results if r.status != "pass"]
    assert results and not failed, failed
    # a refused case refused before selection (no variant forced) has no variant
    assert {r.variant for r in results} - {None} == set(variants)


def tuning_file(folder):
    """The default adapter's tuning file in ``folder`` (tuning.py names one per adapter)."""
    device = wk.get_device()
    return folder / f"{tuning.adapter_slug(device.adapter.name, device.adapter.backend)}.json"


def run_script_for_result(script: str) -> dict:
    """Run ``script`` in a fresh Python process (to lose or destroy a device without touching this
    one's) and return the JSON of the last line it printed starting with ``RESULT ``."""
    env = dict(os.environ)
    env.setdefault("XDG_RUNTIME_DIR", "/tmp")
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, env=env)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    assert lines, f"the child process died (exit {proc.returncode}): {proc.stderr[-2000:]}"
    return json.loads(lines[-1][len("RESULT "):])


def interrupt_next_submit(device, monkeypatch) -> None:
    """The device's next queue.submit raises KeyboardInterrupt (Ctrl-C between emptying the
    recorder and submitting); the one after submits again."""
    queue = device.gpu.queue
    real_submit = queue.submit

    def interrupted(command_buffers):
        monkeypatch.setattr(queue, "submit", real_submit)
        raise KeyboardInterrupt

    monkeypatch.setattr(queue, "submit", interrupted)


def count_submits(device, monkeypatch) -> list[int]:
    """The device's queue.submit calls from here on, counted (one entry each), then run."""
    queue = device.gpu.queue
    real_submit = queue.submit
    submits: list[int] = []

    def counted(command_buffers):
        submits.append(len(command_buffers))
        return real_submit(command_buffers)

    monkeypatch.setattr(queue, "submit", counted)
    return submits


@contextlib.contextmanager
def collecting_only_new_objects() -> Iterator[None]:
    """gc.collect() inside scans only the objects made inside (gc.freeze sets the rest aside): a full
    collection scans a pytest worker's whole heap, some 400,000 objects late in the suite, and a test
    that collects twenty cycles paid it twenty times. Make the garbage to collect inside the block."""
    import gc

    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def collect_while_locked(memory) -> bool:
    """Run gc.collect() in a thread while another thread holds ``memory``'s lock; whether the
    collection finished without waiting for it (a finalizer may not take the lock)."""
    import gc
    import threading

    held, done = threading.Event(), threading.Event()

    def hold_the_lock() -> None:
        with memory.lock:
            held.set()
            done.wait(10)

    holder_thread = threading.Thread(target=hold_the_lock)
    holder_thread.start()
    held.wait(10)
    collector = threading.Thread(target=gc.collect)
    collector.start()
    collector.join(5)
    finished = not collector.is_alive()
    done.set()
    holder_thread.join()
    collector.join()
    return finished
