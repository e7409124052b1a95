"""peers.py's pure-Python parts: inputs and the output check, and _differential against a
simulated asynchronous device on a virtual clock (calls queue GPU work and return at once, and the
only wait is a readback whose own time jitters). The peer processes are run in test_cli_bench.py."""

from __future__ import annotations

import importlib.util
import json
import math
import statistics
import sys

import numpy as np
import pytest

import webgpu_kernels as wk
from webgpu_kernels import peers, walltime
from webgpu_kernels.package import embedded_ids

from conftest import PACKAGES_DIR

HAS_ORT = importlib.util.find_spec("onnxruntime") is not None and importlib.util.find_spec("onnx") is not None


def test_peer_inputs_and_error():
    """Peers draw the case's shapes and dtypes and check outputs against the float64 references."""
    case = {"inputs": {"X": {"shape": [2, 5, 8], "dtype": "float16"}, "bias": {"shape": [8], "dtype": "float16"},
                       "skip": {"shape": [2, 5, 8], "dtype": "float16"}}}  # fmt: skip
    arrays = peers._random_inputs(case)
    assert {k: (a.shape, a.dtype) for k, a in arrays.items()} == {
        "X": ((2, 5, 8), np.float16), "bias": ((8,), np.float16), "skip": ((2, 5, 8), np.float16)}  # fmt: skip
    assert all(np.count_nonzero(a) > 0 for a in arrays.values())
    exact = arrays["X"].astype(np.float64) + arrays["bias"] + arrays["skip"]
    case["op"] = "com.microsoft.BiasAdd"
    expected = peers.expected_outputs(case, arrays)

    def checked(y: np.ndarray) -> tuple[float, bool]:
        result: dict = {}
        peers._check(result, "eager", {"Y": y}, expected)
        return result["eager_error"], result["eager_ok"]

    assert checked(exact) == (0.0, True)
    assert checked(exact + 0.25) == (pytest.approx(0.25), False)  # beyond float16's 1e-2 + 1e-3 |y|
    error, ok = checked(exact + (1e-2 + 5e-4 * np.abs(exact)) * np.sign(exact))  # within 1e-2 + 1e-3 |y| everywhere
    assert ok and error > 1e-2
    assert checked(exact[:1]) == (math.inf, False)
    assert set(peers.TORCH_OPS) == set(embedded_ids()) and set(peers.PEERS) == {"torch", "ort-webgpu"}



class AsyncDevice:
    """Each call costs ``host_s`` of host time and queues ``gpu_s`` of GPU work; ``sync`` waits for
    the queue, then reads back for ``readback_s`` give or take ``jitter`` (uniform, seeded)."""

    def __init__(self, gpu_s: float, host_s: float, readback_s: float, jitter: float, seed: int) -> None:
        self.now = 0.0
        self.gpu_done_at = 0.0
        self.gpu_s, self.host_s, self.readback_s, self.jitter = gpu_s, host_s, readback_s, jitter
        self.rng = np.random.default_rng(seed)

    def clock(self) -> float:
        return self.now

    def call(self) -> None:
        self.gpu_done_at = max(self.gpu_done_at, self.now) + self.gpu_s
        self.now += self.host_s

    def sync(self) -> None:
        self.now = max(self.now, self.gpu_done_at)
        self.now += self.readback_s * (1 + self.rng.uniform(-self.jitter, self.jitter))


@pytest.mark.parametrize("seed", range(10))
def test_a_jittery_readback_does_not_skew_the_per_call_time(seed):
    """ORT WebGPU at 84M elements: 245 us per run, a 190 ms readback jittering by +-15%
    (docs/perf/h200-ort-timing.log). The result stays within 3% of the true time per call."""
    device = AsyncDevice(gpu_s=245e-6, host_s=20e-6, readback_s=0.19, jitter=0.15, seed=seed)
    per_call = statistics.median(peers._differential(device.call, device.sync, clock=device.clock))
    assert per_call == pytest.approx(245e-6, rel=0.03)


def test_host_bound_calls_are_timed_at_the_host_rate():
    """Small cases: when a call's host cost exceeds its GPU work, back-to-back runs go at the host's rate."""
    device = AsyncDevice(gpu_s=2e-6, host_s=16e-6, readback_s=1e-3, jitter=0.3, seed=0)
    assert peers._differential(device.call, device.sync, clock=device.clock) == pytest.approx([16e-6] * 3, rel=0.03)


@pytest.mark.parametrize("seed", range(4))
def test_calls_that_never_outweigh_the_readback_give_no_time(seed):
    """Differences smaller than the readback's jitter have either sign and say nothing: an error,
    never a figure (a negative one was clamped to 0, a device time of 0 us)."""
    device = AsyncDevice(gpu_s=1e-8, host_s=0.0, readback_s=1.0, jitter=0.15, seed=seed)
    with pytest.raises(RuntimeError, match="did not outweigh one readback"):
        peers._differential(device.call, device.sync, clock=device.clock)


def test_differences_are_retaken_with_longer_batches(monkeypatch):
    """One spiked readback makes a difference negative: the three are taken again at twice n."""
    device = AsyncDevice(gpu_s=245e-6, host_s=20e-6, readback_s=0.19, jitter=0.0, seed=0)
    syncs = {"count": 0}
    real_sync = device.sync

    def sync():
        real_sync()
        syncs["count"] += 1
        if syncs["count"] == 30:  # a readback in the first round of differences takes 5 s
            device.now += 5.0

    samples = peers._differential(device.call, sync, clock=device.clock)
    assert syncs["count"] > 30 and all(s == pytest.approx(245e-6, rel=0.01) for s in samples)


# --- torch's peer, against a stand-in torch module ---------------------------------------------------


class FakeTensor:
    def __init__(self, a):
        self.a = np.asarray(a)

    def to(self, device):
        return self

    def cpu(self):
        return self

    def numpy(self):
        return self.a

    def __add__(self, other):
        return FakeTensor(self.a + other.a)

    def __mul__(self, other):
        return FakeTensor(self.a * (other.a if isinstance(other, FakeTensor) else other))

    def sigmoid(self):
        return FakeTensor(1 / (1 + np.exp(-self.a)))


class FakeCuda:
    """A GPU on a virtual clock: each launch costs the host ``launch_s`` and queues ``cost(gpu time
    so far)`` seconds of work, which starts once the GPU is free and the launch was made; an event
    reads the time at which the work queued before it is done (or at which it was recorded, on an
    idle GPU); a synchronize makes the host wait for the GPU."""

    def __init__(self, available=True, cost=lambda now: 1e-4, launch_s=0.0):
        self.available, self.cost, self.launch_s = available, cost, launch_s
        self.now = 0.0  # when the GPU's queued work is done
        self.host = 0.0

    def is_available(self):
        return self.available

    def synchronize(self):
        self.host = max(self.host, self.now)

    def launch(self):
        self.host += self.launch_s
        start = max(self.now, self.host)
        self.now = start + self.cost(start)

    def Event(self, enable_timing=False):  # noqa: N802 - torch's name
        cuda = self

        class Event:
            def record(self):
                self.t = max(cuda.now, cuda.host)

            def synchronize(self):
                cuda.synchronize()

            def elapsed_time(self, end):
                return (end.t - self.t) * 1e3  # ms, as torch's

        return Event()


def fake_torch(cuda):
    from types import SimpleNamespace

    return SimpleNamespace(__version__="0-fake", cuda=cuda, device=str, from_numpy=FakeTensor)


def test_torch_without_cuda_is_reported_not_timed_on_the_cpu(monkeypatch, capsys):
    """Without CUDA the peer timed torch on the CPU and bench showed that as "torch TB/s" next to a
    GPU kernel's; it now says there is no CUDA device."""
    import json
    import sys

    monkeypatch.setitem(sys.modules, "torch", fake_torch(FakeCuda(available=False)))
    case = {"id": 0, "op": "com.microsoft.QuickGelu", "attrs": {}, "compile": False,
            "inputs": {"X": {"shape": [64], "dtype": "float32"}}}  # fmt: skip
    peers.run_torch([case])
    (result,) = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert "no CUDA device" in result.get("error", "") and "eager_s" not in result, result


def per_call(settled) -> float:
    """A torch figure as run_torch takes it from _gpu_time: the median of the settled samples."""
    return statistics.median(settled.samples)


def test_a_torch_figure_whose_batches_never_agree_says_so(monkeypatch, capsys):
    """_gpu_time had returned the median alone, dropping settle's verdict: a torch figure whose batch
    medians never agreed stood in the table as a settled one, while ours says "unstable". The peer
    now records ``<label>_stable: false`` and the batches (bench_report prints a line for it)."""
    import json
    import sys

    cuda = FakeCuda(cost=lambda now: 1e-4 if int(now / 0.04) % 2 else 1.3e-4)  # a clock that swings 30%
    torch = fake_torch(cuda)
    monkeypatch.setitem(sys.modules, "torch", torch)
    monkeypatch.setitem(peers.TORCH_OPS, "com.microsoft.QuickGelu", lambda t, a: (cuda.launch(), {"Y": t["X"]})[1])
    case = {"id": 0, "op": "com.microsoft.QuickGelu", "attrs": {}, "compile": False,
            "inputs": {"X": {"shape": [64], "dtype": "float32"}}}  # fmt: skip
    peers.run_torch([case])
    (result,) = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert result["eager_stable"] is False and result["eager_batches"] == walltime.MAX_BATCHES, result
    assert result["eager_s"] > 0


def test_torch_s_spans_start_on_a_busy_gpu_as_ours_do():
    """Each span had started on a GPU left idle by the previous span's wait: the start event was
    taken at once, and the first launch's host time (50 us here) fell inside the span, 1% of a span
    of 50 calls of 100 us. Ours time 50 calls recorded in one submission, with no such gap; torch's
    span now starts behind launches already queued."""
    cuda = FakeCuda(cost=lambda now: 1e-4, launch_s=5e-5)

    def impl():
        cuda.launch()

    assert per_call(peers._gpu_time(impl, fake_torch(cuda))) == pytest.approx(1e-4, rel=1e-3)


def test_torch_is_timed_under_sustained_load_as_ours_is():
    """A GPU that runs at half speed for its first 0.1 s (clocks still low after the peer process's
    start and torch.compile's CPU seconds): ten warm-up launches and five spans of 50 read twice the
    steady time; batches until two medians agree after 0.3 s, as benchmark.time_calls, read it."""
    cuda = FakeCuda(cost=lambda now: 2e-4 if now < 0.1 else 1e-4)

    def impl():
        cuda.launch()

    settled = peers._gpu_time(impl, fake_torch(cuda))
    assert per_call(settled) == pytest.approx(1e-4, rel=0.03) and settled.stable
    assert cuda.now >= peers.MIN_TOTAL_S


def test_sustain_keeps_the_gpu_busy_for_about_the_seconds_asked(monkeypatch):
    cuda = FakeCuda(cost=lambda now: 1e-4)
    monkeypatch.setattr(peers, "clock", lambda: cuda.host)
    launches = peers.sustain(cuda.launch, cuda.synchronize, 0.5)
    assert 0.5 <= cuda.now <= 0.55 and launches == pytest.approx(cuda.now / 1e-4, rel=1e-6)


def test_torch_is_warmed_up_before_its_first_timing_as_ours_is(monkeypatch, capsys):
    """bench warms the GPU up for --warm-up seconds before its first case; torch's peer had only its
    batch rule, which a clock slow for longer than its 0.3 s also satisfies (two batches agree at
    half speed). A GPU at half speed for its first second: the peer now times the steady speed."""
    import json
    import sys

    cuda = FakeCuda(cost=lambda now: 2e-4 if now < 1.0 else 1e-4)

    class Buffer:
        def copy_(self, other):
            cuda.launch()

    torch = fake_torch(cuda)
    torch.empty = lambda n, device=None: Buffer()
    torch.empty_like = lambda t: Buffer()
    monkeypatch.setitem(sys.modules, "torch", torch)
    monkeypatch.setattr(peers, "clock", lambda: cuda.host)
    monkeypatch.setitem(peers.TORCH_OPS, "com.microsoft.QuickGelu", lambda t, a: (cuda.launch(), {"Y": t["X"]})[1])
    monkeypatch.setattr(peers, "_check", lambda *args: None)
    monkeypatch.setattr(peers, "back_to_back", lambda *args, **kwargs: 0.0)
    case = {"id": 0, "op": "com.microsoft.QuickGelu", "attrs": {}, "compile": False,
            "inputs": {"X": {"shape": [64], "dtype": "float32"}}}  # fmt: skip
    peers.run_torch([case], warm_up_s=2.0)
    (result,) = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert result["eager_s"] == pytest.approx(1e-4, rel=0.01), result


def test_bench_passes_its_warm_up_to_the_peers(monkeypatch, tmp_path):
    """The peer process's command line carries bench's --warm-up seconds; main hands them over."""
    import json

    seen = []
    monkeypatch.setitem(peers.PEERS, "torch", lambda cases, warm_up_s: seen.append((len(cases), warm_up_s)))
    path = tmp_path / "cases.json"
    path.write_text(json.dumps([{"id": 0}]))
    assert peers.main(["torch", repr(2.5), str(path)]) == 0 and seen == [(1, 2.5)]


# --- packages that mirror an ONNX op under an id of their own ---------------------------------------


def _row(kernel: wk.Kernel, shapes: dict, dtypes: dict, attrs: dict, **extra) -> dict:
    """A timed bench row (as _bench_case makes it) of ``kernel``'s call, for peer_cases."""
    return {"kernel": kernel.op_id, "tags": [], "attrs": attrs, "shapes": shapes, "dtypes": dtypes, **extra}


MATMUL_NBITS_ATTRS = {"K": 64, "N": 16, "bits": 4, "block_size": 32, "accuracy_level": 4}


def matmul_nbits_row(kernel: wk.Kernel, **extra) -> dict:
    shapes = {"A": [1, 3, 64], "B": [16, 2, 16], "scales": [32]}
    uniform = {"distribution": "uniform", "low": -0.5, "high": 255.5}
    return _row(kernel, shapes, {"A": "float32", "B": "uint8", "scales": "float32"}, MATMUL_NBITS_ATTRS,
                generate={"B": uniform}, **extra)  # fmt: skip


def skip_layer_norm_row(kernel: wk.Kernel) -> dict:
    shapes = {"input": [2, 7, 64], "skip": [2, 7, 64], "gamma": [64], "beta": [64], "bias": [64]}
    return _row(kernel, shapes, dict.fromkeys(shapes, "float32"), {})


def test_a_peer_case_carries_the_onnx_node_of_the_op_the_package_mirrors():
    """The peers had only the package's op id: ORT WebGPU built a node of com.example.MatMulNBits,
    which no ONNX runtime knows, in the order of its inputs, read out[0] as "Y" and looked its
    reference up in the NumPy ones. A case now carries the node `run --onnx-op` builds: the op
    named, its inputs and outputs by position (the op's formal positions here, as the roles are
    its formal names), the opset (sinceVersion), every attribute and our outputs' shapes."""
    kernel = wk.load_kernel(PACKAGES_DIR / "com.example.MatMulNBits")
    row = matmul_nbits_row(kernel)
    (case,) = peers.peer_cases([(3, row)], [kernel], "large", "com.microsoft.MatMulNBits")
    assert case["id"] == 3 and case["op"] == "com.example.MatMulNBits" and case["compile"] is False
    assert case["inputs"]["B"] == {"shape": [16, 2, 16], "dtype": "uint8", "generate": row["generate"]["B"]}
    assert case["onnx"] == {"op": "com.microsoft.MatMulNBits", "inputs": ["A", "B", "scales"], "outputs": ["Y"],
                            "opset": 1, "attrs": MATMUL_NBITS_ATTRS, "output_shapes": {"Y": [1, 3, 16]}}  # fmt: skip
    (plain,) = peers.peer_cases([(0, row)], [kernel], "large")  # without --onnx-op: its own id
    assert plain["onnx"]["op"] == "com.example.MatMulNBits"


def test_a_peer_is_held_to_the_bench_json_tolerances_its_row_carries():
    """bench.json's `tolerances` judge ours; the peers had the default of the case's dtypes, so one
    figure could be WRONG by a rule the others were not held to. The row carries them (where the
    file gives them) to its peer case, and the peer's check uses them for outputs of that dtype."""
    kernel = wk.load_kernel(PACKAGES_DIR / "com.example.MatMulNBits")
    given = {"float32": {"rtol": 0.0, "atol": 0.5}}
    (case,) = peers.peer_cases([(0, matmul_nbits_row(kernel, tolerances=given))], [kernel], "large")
    assert case["tolerances"] == given
    (plain,) = peers.peer_cases([(0, matmul_nbits_row(kernel))], [kernel], "large")
    assert "tolerances" not in plain
    bias_add = {"op": "com.microsoft.BiasAdd", "inputs": {
        "X": {"shape": [2, 8], "dtype": "float32"}, "bias": {"shape": [8], "dtype": "float32"},
        "skip": {"shape": [2, 8], "dtype": "float32"}}}  # fmt: skip
    arrays = peers._random_inputs(bias_add)
    exact = arrays["X"].astype(np.float64) + arrays["bias"] + arrays["skip"]

    def ok(case: dict, y: np.ndarray) -> bool:
        result: dict = {}
        peers._check(result, "eager", {"Y": y.astype(np.float32)}, peers.expected_outputs(case, arrays))  # the output's dtype
        return result["eager_ok"]

    assert not ok(bias_add, exact + 0.25)  # float32's default: 1e-4 + 1e-5 |y|
    assert ok({**bias_add, "tolerances": given}, exact + 0.25)
    assert not ok({**bias_add, "tolerances": given}, exact + 0.75)
    assert not ok({**bias_add, "tolerances": {"float16": {"atol": 1}}}, exact + 0.25)  # another dtype's: the default


def test_a_two_output_op_s_case_names_each_node_output_as_ours():
    """demo.TopK mirrors ai.onnx.TopK (outputs Values and Indices): both are the node's, in the
    op's positions, named as our outputs; its attributes' defaults are filled in."""
    kernel = wk.load_kernel(PACKAGES_DIR / "demo.TopK")
    row = _row(kernel, {"X": [4, 40]}, {"X": "float32"}, {"k": 5})
    (case,) = peers.peer_cases([(0, row)], [kernel], "all", "ai.onnx.TopK")
    assert case["compile"] is True
    assert {k: case["onnx"][k] for k in ("op", "inputs", "outputs", "opset", "attrs", "output_shapes")} == {
        "op": "ai.onnx.TopK", "inputs": ["X"], "outputs": ["Values", "Indices"], "opset": 1,
        "attrs": {"k": 5, "axis": -1, "largest": 1, "sorted": 1},
        "output_shapes": {"Values": [4, 5], "Indices": [4, 5]}}  # fmt: skip


def test_a_row_whose_plan_cannot_be_made_again_names_every_output_of_the_manifest():
    kernel = wk.load_kernel(PACKAGES_DIR / "demo.TopK")
    row = _row(kernel, {"X": [4, 40]}, {"X": "float32"}, {"k": 5}, variant="no-such-variant")
    (case,) = peers.peer_cases([(0, row)], [kernel], "large", "ai.onnx.TopK")
    assert case["onnx"]["outputs"] == ["Values", "Indices"] and case["onnx"]["output_shapes"] is None


@pytest.mark.skipif(not HAS_ORT, reason="onnxruntime not installed")
def test_a_peer_of_an_op_without_numpy_reference_is_checked_against_onnxruntime_output_by_output():
    """A peer's outputs had been checked against REFERENCES[op] (a KeyError for any op but the
    shipped ones), and only out[0]. Now against onnxruntime's CPU provider running the case's node,
    with ours' tolerance, every output by name: our own kernel's outputs (lavapipe) pass, and one
    output of the four made wrong, or left out, fails."""
    kernel = wk.load_kernel(PACKAGES_DIR / "com.example.SkipLayerNormalization")
    (case,) = peers.peer_cases([(0, skip_layer_norm_row(kernel))], [kernel], "large",
                               "com.microsoft.SkipLayerNormalization")  # fmt: skip
    assert case["onnx"]["outputs"] == ["output", "mean", "inv_std_var", "input_skip_bias_sum"]
    arrays = peers._random_inputs(case)
    expected = peers.expected_outputs(case, arrays)
    assert expected.why is None and set(expected.outputs) == {"output", "mean", "inv_std_var", "input_skip_bias_sum"}
    ours = {name: np.asarray(v) for name, v in kernel(arrays).items()}
    assert set(ours) == set(expected.outputs)

    def checked(outputs: dict) -> dict:
        result: dict = {}
        peers._check(result, "device", outputs, expected)
        return result

    right = checked(ours)
    assert right["device_ok"] is True and right["device_error"] < 1e-4 and "reference_unavailable" not in right
    for name in ours:
        wrong = checked({**ours, name: ours[name] + np.float32(0.01)})
        assert wrong["device_ok"] is False and wrong["device_error"] == pytest.approx(0.01, rel=1e-2), name
    missing = checked({k: v for k, v in ours.items() if k != "input_skip_bias_sum"})
    assert missing["device_ok"] is False and missing["device_error"] == math.inf


@pytest.mark.skipif(not HAS_ORT, reason="onnxruntime not installed")
def test_a_peer_output_no_reference_checks_says_so_and_is_never_ok():
    """demo.Softmax (no --onnx-op): no NumPy reference and onnxruntime does not know the op. demo.TopK
    as ai.onnx.TopK at its sinceVersion 1: the node's `largest` is no attribute of TopK-1. Each peer
    row says why it was not checked, as ours says it, and has no verdict."""
    softmax = wk.load_kernel(PACKAGES_DIR / "demo.Softmax")
    topk = wk.load_kernel(PACKAGES_DIR / "demo.TopK")
    rows = [(0, _row(softmax, {"X": [4, 16]}, {"X": "float32"}, {})),
            (1, _row(topk, {"X": [4, 40]}, {"X": "float32"}, {"k": 5}))]  # fmt: skip
    unknown, refused = [peers.peer_cases([r], [softmax, topk], "large", None if r[0] == 0 else "ai.onnx.TopK")[0]
                        for r in rows]  # fmt: skip
    for case, why in ((unknown, "onnxruntime: onnxruntime does not know this op"),
                      (refused, "onnxruntime: onnxruntime refused this call: ")):  # fmt: skip
        arrays = peers._random_inputs(case)
        result: dict = {}
        peers._check(result, "numpy", dict(kernel_outputs(case, arrays)), peers.expected_outputs(case, arrays))
        assert result["reference_unavailable"].startswith(why), result
        assert "numpy_ok" not in result and "numpy_error" not in result
    assert "'largest' is no attribute of TopK-1" in result["reference_unavailable"]


def kernel_outputs(case: dict, arrays: dict) -> dict:
    return wk.load_kernel(PACKAGES_DIR / case["op"])(arrays, attrs=case["attrs"] or None)


def test_torch_says_it_has_no_implementation_of_an_op_and_starts_nothing(monkeypatch, capsys):
    """torch looked the op up in TORCH_OPS after starting CUDA and drawing the inputs: a KeyError
    for any op but the shipped ones. Now one clear row, and torch is not imported for it (here it
    cannot be: an import would have made the row torch's ImportError). A case torch has an
    implementation of still gets torch's own failure."""
    monkeypatch.setitem(sys.modules, "torch", None)  # `import torch` raises ImportError
    inputs = {"X": {"shape": [64], "dtype": "float32"}}
    cases = [{"id": 0, "op": "com.example.MatMulNBits", "attrs": {}, "compile": False, "inputs": inputs},
             {"id": 1, "op": "com.microsoft.QuickGelu", "attrs": {}, "compile": False, "inputs": inputs}]  # fmt: skip
    peers.run_torch(cases[:1])
    (alone,) = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert alone == {"case": 0, "peer": "torch", "error": "torch: no implementation of com.example.MatMulNBits "
                     "(peers.TORCH_OPS has com.microsoft.BiasAdd, com.microsoft.QuickGelu)"}  # fmt: skip
    peers.run_torch(cases)
    results = {r["case"]: r for r in map(json.loads, capsys.readouterr().out.splitlines())}
    assert results[0] == alone and results[1]["error"].startswith("ModuleNotFoundError: import of torch halted"), results
