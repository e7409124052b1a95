"""An ML engineer's first hour with the library, from README.md and docs/python-api.md alone:
CLIP's QuickGelu after a UNet's BiasAdd on GPU-resident tensors, the inputs real code passes, and
what explain and help say. Results are checked against NumPy float64."""

from __future__ import annotations

import numpy as np
import pytest

import webgpu_kernels as wk
from webgpu_kernels import errors

f32, f16 = np.float32, np.float16


def quick_gelu_ref(x, alpha: float = 1.702) -> np.ndarray:
    x = np.asarray(x, np.float64)
    return x / (1.0 + np.exp(-alpha * x))


def assert_close(got, want, dtype) -> None:
    tol = 2e-3 if np.dtype(dtype) == f16 else 2e-6
    np.testing.assert_allclose(np.asarray(got, np.float64), want, rtol=tol, atol=tol)


@pytest.mark.parametrize("dtype", [f32, f16])
def test_bias_add_then_quick_gelu_chained_on_the_gpu(bias_add, quick_gelu, need_dtype, rng, dtype):
    """The README's chain the other way round: BiasAdd's GpuTensor feeds QuickGelu, read once."""
    need_dtype(dtype)
    x, skip = (rng.standard_normal((2, 5, 320)).astype(dtype) for _ in range(2))
    bias = rng.standard_normal(320).astype(dtype)
    tensors = [wk.to_gpu(a) for a in (x, bias, skip)]
    h = bias_add(dict(zip(("X", "bias", "skip"), tensors)), output="gpu")["Y"]
    y = quick_gelu({"X": h}, attrs={"alpha": 1.702}, output="gpu")["Y"]
    try:
        want = quick_gelu_ref(x.astype(np.float64) + bias.astype(np.float64) + skip.astype(np.float64))
        assert_close(y.numpy(), want, dtype)
    finally:
        for t in (*tensors, h, y):
            t.release()


def _strided_inputs(base: np.ndarray) -> dict[str, np.ndarray]:
    read_only = base.copy()
    read_only.flags.writeable = False
    return {"transposed": base.transpose(2, 0, 1), "stepped": base[::2, 1::3, ::-1],
            "fortran": np.asfortranarray(base), "big-endian": base.astype(base.dtype.newbyteorder(">")),
            "read-only": read_only, "0-d": base[1, 2, 3].copy().reshape(()), "empty": base[:0]}  # fmt: skip


@pytest.mark.parametrize("dtype", [f32, f16])
def test_the_inputs_real_code_passes(quick_gelu, need_dtype, rng, dtype, tmp_path):
    """Strided, Fortran-order, big-endian, read-only, 0-d, empty and memory-mapped arrays and NumPy
    scalars, given directly or through to_gpu, give the float64 reference; none is modified."""
    need_dtype(dtype)
    base = rng.standard_normal((6, 8, 12)).astype(dtype)
    mapped = np.memmap(tmp_path / "x.bin", dtype=dtype, mode="w+", shape=(4, 33))
    mapped[:] = rng.standard_normal((4, 33))
    mapped.flush()
    cases = {**_strided_inputs(base), "scalar": dtype(-1.5),
             "memmap": np.memmap(tmp_path / "x.bin", dtype=dtype, mode="r", shape=(4, 33))}  # fmt: skip
    for name, x in cases.items():
        before = np.array(x, copy=True)
        for given in (x, wk.to_gpu(x)):
            y = quick_gelu({"X": given})["Y"]
            assert y.shape == np.shape(x) and y.dtype == dtype, name
            assert_close(y, quick_gelu_ref(before), dtype)
        np.testing.assert_array_equal(np.asarray(x), before)


def test_a_list_is_refused_with_the_conversion_to_make(quick_gelu):
    with pytest.raises(errors.DTypeError, match=r"astype\(np.float32\)") as caught:
        quick_gelu({"X": [[1.0, 2.0]]})
    assert caught.value.argument == "X" and caught.value.received == "float64"
    assert_close(quick_gelu({"X": np.asarray([[1.0, 2.0]], f32)})["Y"], quick_gelu_ref([[1.0, 2.0]]), f32)


def _refusals(kernel, inputs) -> dict[str, Exception]:
    """What a call and each way of asking about it raise for these inputs."""
    raised = {}
    for name, ask in {"call": lambda: kernel(inputs), "explain": lambda: kernel.explain(inputs),
                      "render": lambda: kernel.render(inputs), "plan": lambda: kernel.plan(inputs),
                      "evaluate": lambda: kernel.evaluate("numel(shapes.X)", inputs)}.items():  # fmt: skip
        with pytest.raises(errors.InputError) as caught:
            ask()
        raised[name] = caught.value
    return raised


def test_explain_refuses_a_tensor_on_another_adapter_as_the_call_does(quick_gelu, device, gl_device):
    """explain chose a variant (and render gave WGSL) for a GpuTensor of the OpenGL adapter, which
    the call on the default adapter refuses: they now raise the call's InputError."""
    if gl_device is device:
        pytest.skip("the default adapter is the OpenGL one")
    t = wk.to_gpu(np.ones((2, 3), f32), adapter="gl")
    try:
        raised = _refusals(quick_gelu, {"X": t})
        assert {str(e) for e in raised.values()} == {str(raised["call"])}
        assert raised["explain"].argument == "X" and "adapter=" in str(raised["explain"])
        assert quick_gelu.explain({"X": t}, adapter="gl").chosen is not None  # where the tensor lives
    finally:
        t.release()


def test_explain_refuses_a_released_tensor_as_the_call_does(quick_gelu):
    t = wk.to_gpu(np.ones((2, 3), f32))
    t.release()
    raised = _refusals(quick_gelu, {"X": t})
    assert {str(e) for e in raised.values()} == {str(raised["call"])}
    assert "released" in str(raised["explain"])


def test_help_of_a_kernel_says_what_to_pass(quick_gelu, bias_add):
    """help(kernel) showed the Kernel class's methods only: not the op's inputs, their dtypes, the
    attributes and their defaults, or the outputs, which a user reads it for."""
    import pydoc

    text = pydoc.render_doc(quick_gelu, renderer=pydoc.plaintext)
    assert "com.microsoft.QuickGelu" in text and "alpha = 1.702" in text and "float32, float16" in text
    assert 'kernel({"X": x}, attrs={"alpha": 1.702})' in text and "Y: T, rank ranks.X, shape shapes.X" in text
    assert "help(webgpu_kernels.Kernel)" in text  # where the methods are now
    text = pydoc.render_doc(bias_add, renderer=pydoc.plaintext)
    assert 'kernel({"X": x, "bias": bias, "skip": skip})' in text and "bias: T, rank 1" in text
    # the class keeps its own docstring, for help(Kernel) and tools that read it
    assert wk.Kernel.__doc__.startswith("A kernel package ready to run.")
    assert "Methods defined here" in pydoc.render_doc(wk.Kernel, renderer=pydoc.plaintext)


def test_help_shows_no_escape_sequence_from_a_package(tmp_path):
    """help(kernel) prints the package's descriptions on the user's terminal: an ESC sequence in
    one (a Hub package's) must not move the cursor or retitle the terminal, as on the command line."""
    import json

    from conftest import copy_package

    root = copy_package("com.microsoft.QuickGelu", tmp_path / "pkg")
    (root / "metadata.json").unlink()
    manifest = json.loads((root / "manifest.json").read_text())
    manifest["description"] = "fine\x1b]0;owned\x07 text\x1b[2J"
    (root / "manifest.json").write_text(json.dumps(manifest))
    text = wk.load_kernel(root).__doc__
    assert "fine\ufffd]0;owned\ufffd text\ufffd[2J" in text
    assert not any(c in text for c in "\x1b\x07")


def test_help_of_a_kernel_is_bounded_whatever_the_package_s_text(tmp_path):
    """help(kernel) (and every IDE reading __doc__, again at each hover) built the package's text
    whole: a 7 MB description made a 7 MB docstring in 0.3 s. Each description is cut, a value
    shown by at most a line, and the whole text bounded, ending where the rest is."""
    import json

    from conftest import copy_package

    root = copy_package("com.microsoft.QuickGelu", tmp_path / "pkg")
    (root / "metadata.json").unlink()
    manifest = json.loads((root / "manifest.json").read_text())
    manifest["description"] = "D" * 1_000_000
    manifest["inputs"][0]["description"] = "I" * 100_000
    manifest["attributes"] |= {"big": [1.5] * 4096, "s": "S" * 4000}
    manifest["attributes"] |= {f"a{i}": i for i in range(100)}
    manifest["attributeDescriptions"] = {f"a{i}": "A" * 5000 for i in range(100)}
    (root / "manifest.json").write_text(json.dumps(manifest))
    kernel = wk.load_kernel(root)
    text = kernel.__doc__
    assert len(text) < 70_000 and "webgpu-kernels info" in text, len(text)
    assert text.startswith("com.microsoft.QuickGelu (local kernel") and "D" * 1000 in text and "D" * 3000 not in text
    assert "S" * 4000 not in text and "[1.5, 1.5" in text
    assert kernel.manifest.description == "D" * 1_000_000  # the package itself keeps it all
