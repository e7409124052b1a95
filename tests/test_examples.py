"""examples/ runs: the CLIP MLP block and the Stable Diffusion feed-forward examples, at small
shapes, within their own tolerance of a float64 NumPy reference (each example computes its
reference; these tests check the figures are real: the shape, the dtype, an error that is neither
NaN nor above the tolerance, an exit status that turns 1 when the reference disagrees, and the
reference itself against the block written out another way)."""

from __future__ import annotations

import importlib.util
import math
import os
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

import webgpu_kernels as wk

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def load_example(name: str) -> ModuleType:
    """An example script as a module, imported by path (examples/ is no package)."""
    spec = importlib.util.spec_from_file_location(f"example_{name}", EXAMPLES / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses and pickling look modules up by name
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(
    ("dtype", "input_dtype"),
    [("float32", "float32"), ("float16", "float32")],
    ids=["f32", "f16-from-f32"],
)
def test_clip_mlp_example(dtype: str, input_dtype: str, need_dtype, capsys: pytest.CaptureFixture[str]) -> None:
    """float16 from float32: X goes up in float32 and the block converts it with astype on the GPU,
    then runs as a float16 X would (a float16 X's own run, 15 s of the suite on lavapipe, only
    skipped that astype: `python3 examples/clip_mlp.py --batch 1 --dtype float16` runs it). No timed
    runs (--repeat 0): each is another whole block at CLIP's sizes (5 s in f32, 9.5 s in f16 on
    lavapipe) whose output nothing compares; test_clip_mlp_example_times_its_repeats times them."""
    need_dtype(dtype)
    clip_mlp = load_example("clip_mlp")
    result = clip_mlp.main(["--batch", "1", "--dtype", dtype, "--input-dtype", input_dtype, "--repeat", "0"])
    assert result["shape"] == (1, 77, 768) and result["dtype"] == dtype and result["input_dtype"] == input_dtype
    assert math.isfinite(result["max_error"]) and result["max_error"] <= clip_mlp.TOLERANCE[dtype]
    assert result["ok"] and result["seconds"] == []
    out = capsys.readouterr().out
    assert "max |Y - float64 reference|" in out and ": ok" in out and "host wall clock" not in out
    assert ("converted to float16 on the GPU" in out) == (input_dtype != dtype)


def test_clip_mlp_example_times_its_repeats(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """--repeat 2: two timed runs after the checked one, and the wall-clock line that says so. What
    is tested is the timing loop, not the sizes: a block of 17 tokens, 64 -> 256 -> 64
    (test_clip_mlp_example checks CLIP's own, untimed)."""
    clip_mlp = load_example("clip_mlp")
    monkeypatch.setattr(clip_mlp, "SEQUENCE", 17)
    monkeypatch.setattr(clip_mlp, "HIDDEN", 64)
    monkeypatch.setattr(clip_mlp, "INTERMEDIATE", 256)
    result = clip_mlp.main(["--batch", "1", "--repeat", "2"])
    assert result["shape"] == (1, 17, 64) and result["ok"] and result["max_error"] <= clip_mlp.TOLERANCE["float32"]
    assert len(result["seconds"]) == 2 and all(s > 0 for s in result["seconds"])
    out = capsys.readouterr().out
    assert ": ok" in out and "host wall clock per block on this adapter" in out and "(2 runs)" in out


def test_clip_mlp_reference_is_the_block() -> None:
    """The example's float64 reference, against the block written out another way (per token,
    with the sigmoid through tanh): a wrong reference would pass a wrong kernel."""
    clip_mlp = load_example("clip_mlp")
    arrays = clip_mlp.make_inputs(1, "float32", seed=3)
    want = clip_mlp.reference(arrays)
    x, w1, b1, w2, b2 = (arrays[k].astype(np.float64) for k in ("X", "W1", "b1", "W2", "b2"))
    token = x[0, 5]
    h = np.einsum("k,kn->n", token, w1) + b1
    a = h * 0.5 * (1.0 + np.tanh(0.5 * 1.702 * h))
    assert np.allclose(want[0, 5], np.einsum("k,kn->n", a, w2) + b2 + token, rtol=1e-12, atol=1e-12)


def test_clip_mlp_block_over_changing_batches(monkeypatch: pytest.MonkeyPatch) -> None:
    """Batches of 1, 2 and 1 recorded back to back and read only at the end: the block keeps one
    zeros tensor (BiasAdd's skip) and releases the last shape's while calls that read it are still
    recorded, so each result must still match its own reference. What is tested is the tensors'
    lifetimes, not the sizes: a block of 17 tokens, 64 -> 256 -> 64 (test_clip_mlp_example runs
    CLIP's own; at its sizes this test took 30 s of the suite on lavapipe)."""
    clip_mlp = load_example("clip_mlp")
    monkeypatch.setattr(clip_mlp, "SEQUENCE", 17)
    monkeypatch.setattr(clip_mlp, "HIDDEN", 64)
    monkeypatch.setattr(clip_mlp, "INTERMEDIATE", 256)
    arrays = [clip_mlp.make_inputs(batch, "float32", seed=batch + 10 * i) for i, batch in enumerate((1, 2, 1))]
    block = clip_mlp.ClipMlp(arrays[0])
    try:
        runs = []
        for a in arrays:
            x = wk.to_gpu(a["X"])
            y, made = block(x)
            runs.append((a, x, y, made))
        for a, x, y, made in runs:
            got = y.numpy()
            want = clip_mlp.reference({**a, **{k: arrays[0][k] for k in ("W1", "b1", "W2", "b2")}})
            assert got.shape == want.shape
            assert np.max(np.abs(got - want)) <= clip_mlp.TOLERANCE["float32"]
            for t in (x, y, *made):
                t.release()
    finally:
        block.release()


#: The line both examples print: "Y (shape) dtype: max |Y - float64 reference| = E (tolerance T): ok"
ERROR_LINE = re.compile(r"^Y (\(.*\)) (\w+): max \|Y - float64 reference\| = (\S+) \(tolerance (\S+)\): (ok|TOO LARGE)$", re.M)


@pytest.mark.parametrize(
    ("dtype", "input_dtype", "tokens", "channels", "repeats"),
    [("float32", "float32", 32, 320, 1), ("float16", "float16", 32, 320, 0), ("float16", "float32", 16, 640, 0)],
    ids=["f32", "f16", "f16-from-f32-c640"],
)
def test_sd_feed_forward_example(dtype: str, input_dtype: str, tokens: int, channels: int, repeats: int, need_dtype,
                                 capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    """The exit status the script would return, and the error it prints (read back from its output,
    not from its result), under the example's tolerance. One case times a run (the wall-clock line);
    the others run only the checked block: a timed run is another whole block (3.8 s of the c640
    case's float16 on lavapipe) whose output nothing compares."""
    need_dtype(dtype)
    sd_ff = load_example("sd_feed_forward")
    argv = ["--batch", "2", "--tokens", str(tokens), "--channels", str(channels), "--dtype", dtype,
            "--input-dtype", input_dtype, "--repeat", str(repeats)]  # fmt: skip
    assert sd_ff.cli(argv) == 0
    out = capsys.readouterr().out
    match = ERROR_LINE.search(out)
    assert match is not None, out
    assert match[1] == str((2, tokens, channels)) and match[2] == dtype and match[5] == "ok"
    error = float(match[3])
    assert math.isfinite(error) and error <= sd_ff.TOLERANCE[dtype] and float(match[4]) == sd_ff.TOLERANCE[dtype]
    assert ("host wall clock" in out) == (repeats > 0)
    assert ("converted to float16 on the GPU" in out) == (input_dtype != dtype)


def test_sd_feed_forward_example_as_a_script() -> None:
    """python3 examples/sd_feed_forward.py in a process of its own: exit status 0 and the ok line."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(wk.__file__).parents[1]), os.environ.get("PYTHONPATH", "")])}
    argv = ["--batch", "1", "--tokens", "8", "--channels", "64", "--repeat", "0"]
    done = subprocess.run([sys.executable, str(EXAMPLES / "sd_feed_forward.py"), *argv], env=env,
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert done.returncode == 0, (done.stdout, done.stderr)
    match = ERROR_LINE.search(done.stdout)
    assert match is not None and match[1] == "(1, 8, 64)" and match[5] == "ok", done.stdout


def test_sd_feed_forward_wrong_reference_fails(monkeypatch: pytest.MonkeyPatch,
                                               capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    """A reference that gates the other half (value and gate swapped in W1 and b1, the classic GEGLU
    slip) must make the example exit 1: the check can fail."""
    sd_ff = load_example("sd_feed_forward")
    right = sd_ff.reference

    def swapped(arrays: dict[str, np.ndarray]) -> np.ndarray:
        inner = arrays["b1"].shape[0] // 2
        swap = {name: np.concatenate([arrays[name][..., inner:], arrays[name][..., :inner]], axis=-1)
                for name in ("W1", "b1")}  # fmt: skip
        return right({**arrays, **swap})

    monkeypatch.setattr(sd_ff, "reference", swapped)
    assert sd_ff.cli(["--batch", "1", "--tokens", "16", "--channels", "64", "--repeat", "0"]) == 1
    match = ERROR_LINE.search(capsys.readouterr().out)
    assert match is not None and match[5] == "TOO LARGE" and float(match[3]) > sd_ff.TOLERANCE["float32"]


def test_sd_feed_forward_reference_is_the_block() -> None:
    """The example's float64 reference, against the block written out another way (per token, with
    the value and gate halves sliced from W1 apart, gelu through erfc): a wrong reference would pass
    a wrong kernel."""
    sd_ff = load_example("sd_feed_forward")
    arrays = sd_ff.make_inputs(1, 8, 64, "float32", seed=3)
    want = sd_ff.reference(arrays)
    assert want.shape == (1, 8, 64)
    x, w1, b1, w2, b2 = (arrays[k].astype(np.float64) for k in ("X", "W1", "b1", "W2", "b2"))
    token, inner = x[0, 5], 4 * 64
    value = np.einsum("k,kn->n", token, w1[:, :inner]) + b1[:inner]
    gate = np.einsum("k,kn->n", token, w1[:, inner:]) + b1[inner:]
    gelu = np.array([g * 0.5 * math.erfc(-g / math.sqrt(2.0)) for g in gate])
    assert np.allclose(want[0, 5], np.einsum("k,kn->n", value * gelu, w2) + b2 + token, rtol=1e-12, atol=1e-12)
