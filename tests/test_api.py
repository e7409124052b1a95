"""api.py beyond calls (tested with the kernels themselves): test_case_inputs, the stand-in for a
kernel that did not open again, get_kernel's sharing between threads."""

from __future__ import annotations

import numpy as np
import pytest

import webgpu_kernels as wk
from webgpu_kernels import errors

from references import quick_gelu as quick_gelu_reference


def splitmix64_unit(seed: int, i: int) -> float:
    """Element i's uniform draw, as docs/package-files.md specifies the generator (Python ints)."""
    mask = 2**64 - 1
    z = (seed + (i + 1) * 0x9E3779B97F4A7C15) & mask
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & mask
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & mask
    return ((z ^ (z >> 31)) >> 11) * 2.0**-53


def test_test_case_inputs_are_the_documented_draws_and_match_the_stored_expectation(quick_gelu):
    inputs = wk.test_case_inputs(quick_gelu, "tail-5x77x13-f32")  # uniform over [-12, 12), seed 103
    x = inputs["X"]
    assert list(inputs) == ["X"] and x.shape == (5, 77, 13) and x.dtype == np.float32
    flat = x.reshape(-1)
    for i in (0, 1, 2, 4096, flat.size - 1):
        assert flat[i] == np.float32(-12.0 + 24.0 * splitmix64_unit(103, i))
    # the package's stored expected output is the reference on exactly these inputs
    stored = np.load(quick_gelu.package.root / "tail-5x77x13-f32.Y.npy")
    np.testing.assert_allclose(stored, quick_gelu_reference(x.astype(np.float64), 1.702), rtol=1e-6, atol=1e-7)


def test_test_case_inputs_of_a_case_not_yet_in_test_json(quick_gelu):
    """Authors compute a case's expected outputs from its inputs: a case had to be in test.json,
    with an `expected` entry, before its inputs could be built (placeholder zeros first)."""
    draft = {"name": "new-case", "types": {"T": "float32"}, "inputs": {"X": {"shape": [5, 77, 13], "generate": {
        "distribution": "uniform", "seed": 103, "low": -12.0, "high": 12.0}}}}  # tail-5x77x13-f32 less `expected`
    np.testing.assert_array_equal(wk.test_case_inputs(quick_gelu, draft)["X"],
                                  wk.test_case_inputs(quick_gelu, "tail-5x77x13-f32")["X"])
    with pytest.raises(wk.CaseFileError, match="cases\\[0\\].inputs.X") as info:
        wk.test_case_inputs(quick_gelu, {**draft, "inputs": {"X": {"shape": [2], "values": [1, 2, 3]}}})
    assert info.value.file == "case 'new-case' given as a dict (read as cases[0])"  # it had read "case"
    with pytest.raises(errors.InputError, match="a case name, or a case as a dict, got list"):
        wk.test_case_inputs(quick_gelu, ["new-case"])


def test_test_case_inputs_refuses_an_unknown_case_or_a_non_kernel(quick_gelu):
    with pytest.raises(errors.InputError, match="one of .*'tail-5x77x13-f32'") as info:
        wk.test_case_inputs(quick_gelu, "no-such-case")
    assert info.value.argument == "case"
    with pytest.raises(errors.InputError, match="a Kernel") as info:
        wk.test_case_inputs("com.microsoft.QuickGelu", "tail-5x77x13-f32")
    assert info.value.argument == "kernel"


def test_test_case_inputs_parses_test_json_once_per_content(tmp_path, monkeypatch):
    """An author's script asks for one case at a time: test.json was re-read and schema-checked on
    every call (0.1 s each for a 40-case file). Now once per content, and an edit is seen at once."""
    import json
    import shutil

    from webgpu_kernels import casefile

    from conftest import PACKAGES_DIR

    def case(name: str) -> dict:
        return {"name": name, "types": {"T": "float32"}, "inputs": {"X": {"shape": [2], "values": [1.0, 2.0]}},
                "expected": {"Y": {"shape": [2], "values": [0.0, 0.0]}}}  # fmt: skip

    root = shutil.copytree(PACKAGES_DIR / "demo.ScaleShift", tmp_path / "demo.ScaleShift")  # no metadata.json
    (root / "test.json").write_text(json.dumps({"cases": [case("a"), case("b")]}), encoding="utf-8")
    kernel = wk.load_kernel(root)
    parses = []
    real = casefile.parse_test_file
    monkeypatch.setattr(casefile, "parse_test_file", lambda *a, **k: parses.append(1) or real(*a, **k))
    for name in ("a", "b", "a"):
        np.testing.assert_array_equal(wk.test_case_inputs(kernel, name)["X"], np.array([1.0, 2.0], np.float32))
    assert len(parses) == 1
    (root / "test.json").write_text(json.dumps({"cases": [case("c")]}), encoding="utf-8")  # an unverified folder
    assert list(wk.test_case_inputs(kernel, "c")) == ["X"] and len(parses) == 2


def test_dir_of_the_package_is_its_public_api_lazy_exports_included():
    """dir(webgpu_kernels) listed the names that build the module (TYPE_CHECKING, Any, _LAZY) and
    the submodules imports had left on it. It lists __all__ and the dunders, the lazily exported
    names before their first use too, and reading it imports nothing."""
    from conftest import run_script_for_result

    script = ("import json, sys, webgpu_kernels as wk\n"
              "listed = dir(wk)\n"
              "print('RESULT ' + json.dumps({'dir': listed, 'all': wk.__all__, 'numpy': 'numpy' in sys.modules}))\n")  # fmt: skip
    fresh = run_script_for_result(script)
    assert not fresh["numpy"]  # dir() loads no lazy export
    for listed in (fresh["dir"], dir(wk)):  # before the first use, and in this process after many
        public = [name for name in listed if not (name.startswith("__") and name.endswith("__"))]
        assert sorted(public) == sorted(name for name in fresh["all"] if name != "__version__")
        assert {"get_kernel", "Kernel", "GpuTensor", "TensorMeta", "__version__", "__doc__"} <= set(listed)
        assert all(hasattr(wk, name) for name in listed)


def unopened_kernel(monkeypatch) -> wk.Kernel:
    """What a worker unpickles for an embedded kernel whose digest its release does not match."""
    from webgpu_kernels import api

    monkeypatch.setattr(api, "_reopened", {})
    kernel = api.reopen_kernel(("embedded", "com.microsoft.QuickGelu"), "another release's digest")
    assert isinstance(kernel, api.UnopenedKernel)
    return kernel


def test_probing_an_unopened_kernel_for_a_name_no_kernel_has_is_an_attribute_error(monkeypatch):
    """hasattr(kernel, "x") raised the stored PackageError: probes (hasattr, getattr with a default,
    IPython's _repr_*_ lookups) expect AttributeError for a missing name. A name no Kernel has is
    missing here too; one a Kernel has still raises the error, from a property or method too."""
    import copy

    kernel = unopened_kernel(monkeypatch)
    for name in ("x", "_repr_html_", "_ipython_canary_method_should_not_exist_", "__array__", "__wrapped__"):
        assert not hasattr(kernel, name)
        assert getattr(kernel, name, None) is None
    with pytest.raises(AttributeError, match="'UnopenedKernel' object has no attribute 'x'") as info:
        _ = kernel.x  # type: ignore[attr-defined]
    assert info.value.name == "x" and info.value.obj is kernel
    for use in (lambda: kernel.op_id, lambda: kernel.manifest, lambda: kernel.package, lambda: kernel._plans,
                lambda: getattr(kernel, "variants", None), lambda: hasattr(kernel, "tuning_key"),
                lambda: kernel.explain({"X": np.ones(4, np.float32)}), lambda: kernel({"X": np.ones(4, np.float32)})):
        with pytest.raises(errors.PackageError, match="embeds another com.microsoft.QuickGelu") as failed:
            use()
        assert not isinstance(failed.value, AttributeError)
        assert any("pickled in another process" in note for note in failed.value.__notes__)
    assert copy.copy(kernel) is kernel and copy.deepcopy(kernel) is kernel
    assert "PackageError" in repr(kernel) and "x" not in dir(kernel)


def test_introspecting_an_unopened_kernel_does_not_raise(monkeypatch, quick_gelu):
    """inspect.getmembers, pydoc and inspect.signature read every name dir() lists, or a class's
    own (__name__), catching AttributeError only: they raised the stored error, so IPython's
    completion or help() on a kernel a worker could not open failed. dir() lists what reading
    leaves unopened (a Kernel's methods, not its properties); using the kernel still raises."""
    import inspect
    import pydoc

    kernel = unopened_kernel(monkeypatch)
    listed = dir(kernel)
    members = dict(inspect.getmembers(kernel))
    assert set(members) == set(listed)
    methods = {n for n in dir(quick_gelu) if not n.startswith("_") and inspect.ismethod(getattr(quick_gelu, n))}
    assert methods and methods <= set(listed) and {"__call__", "__reduce__"} <= set(listed)
    assert not {"op_id", "variants", "tuning_key", "contract_version"} & set(listed)
    assert {"op_id", "variants"} <= set(dir(quick_gelu))
    for name in ("__name__", "__qualname__", "__mro__", "__bases__"):  # the class's, not a kernel's
        assert not hasattr(kernel, name) and not hasattr(quick_gelu, name)
    assert "UnopenedKernel" in pydoc.render_doc(kernel)
    assert str(inspect.signature(kernel)) == str(inspect.signature(quick_gelu))
    for use in (lambda: kernel.op_id, lambda: members["explain"]({"X": np.ones(4, np.float32)}),
                lambda: kernel({"X": np.ones(4, np.float32)})):  # fmt: skip
        with pytest.raises(errors.PackageError, match="embeds another com.microsoft.QuickGelu"):
            use()


def test_an_unopened_kernel_raises_its_error_for_every_name_a_kernel_sets_on_itself(quick_gelu):
    """UnopenedKernel tells a Kernel's own names from others by a list of what Kernel.__init__ sets:
    it must keep up with Kernel (a name it missed would be an AttributeError inside Kernel's methods)."""
    from webgpu_kernels import api

    assert set(vars(wk.Kernel(quick_gelu.package))) == api.KERNEL_INSTANCE_ATTRIBUTES


def test_get_kernel_opens_each_embedded_kernel_once_and_two_at_once(monkeypatch):
    """get_kernel held its module lock while it read and validated a package, so a thread opening
    one kernel waited for another's. Two kernels open at once now (each opener waits here until the
    other has started: one lock held through both had never let the second start), and a thread
    asking for a kernel another thread is opening waits for that one instead of opening it again."""
    import sys
    import threading
    import time

    from webgpu_kernels import api

    def in_get_kernel(thread: threading.Thread) -> bool:
        frame = sys._current_frames().get(thread.ident or -1)
        while frame is not None and frame.f_code is not api.get_kernel.__code__:
            frame = frame.f_back
        return frame is not None

    ids = ("com.microsoft.QuickGelu", "com.microsoft.BiasAdd")
    monkeypatch.setattr(api, "_embedded", {})
    started = {op_id: threading.Event() for op_id in ids}
    go = threading.Event()
    opened: list[str] = []
    real_open = api.open_embedded

    def open_embedded(op_id: str):
        opened.append(op_id)
        started[op_id].set()
        go.wait(timeout=60)  # a deadlock guard only: the main thread sets it once both have started
        return real_open(op_id)

    monkeypatch.setattr(api, "open_embedded", open_embedded)
    got: dict[int, wk.Kernel] = {}

    def get(i: int, op_id: str) -> None:
        got[i] = wk.get_kernel(op_id)

    first = [threading.Thread(target=get, args=(i, op_id)) for i, op_id in enumerate(ids)]
    second = [threading.Thread(target=get, args=(i + 2, op_id)) for i, op_id in enumerate(ids)]
    try:
        for thread in first:
            thread.start()
        both = all(started[op_id].wait(timeout=60) for op_id in ids)
        seen = list(opened)
        for thread in second:  # each asks while its kernel is being opened
            thread.start()
        for thread in second:  # and is inside get_kernel (waiting, or opening it again: `opened` tells)
            deadline = time.monotonic() + 60  # a guard only
            while thread.is_alive() and not in_get_kernel(thread) and time.monotonic() < deadline:
                time.sleep(0.01)
    finally:
        go.set()
        for thread in first + second:
            thread.join(timeout=120)
    assert both, f"only {seen} started opening: one opening waited for the other"
    assert sorted(opened) == sorted(ids)  # each once, the threads that asked meanwhile included
    assert [got[i].op_id for i in range(4)] == [*ids, *ids]
    assert got[0] is got[2] is wk.get_kernel(ids[0]) and got[1] is got[3] is wk.get_kernel(ids[1])


def test_an_interrupt_as_get_kernel_registers_an_opening_leaves_no_thread_waiting(monkeypatch):
    """A KeyboardInterrupt landing between get_kernel's registering that it opens an op id and the
    `try` whose `finally` takes the registration back had left it registered: every later
    get_kernel of that op id, in any thread, waited for good. Raised here just after the
    registration itself, it leaves nothing registered."""
    import threading

    from webgpu_kernels import api

    class InterruptedOnce(dict):
        armed = True

        def __setitem__(self, key, value):
            super().__setitem__(key, value)
            if self.armed:
                self.armed = False
                raise KeyboardInterrupt

    opening = InterruptedOnce()
    monkeypatch.setattr(api, "_embedded", {})
    monkeypatch.setattr(api, "_opening", opening)
    with pytest.raises(KeyboardInterrupt):
        wk.get_kernel("com.microsoft.QuickGelu")
    got: list[wk.Kernel] = []
    thread = threading.Thread(target=lambda: got.append(wk.get_kernel("com.microsoft.QuickGelu")), daemon=True)
    thread.start()
    thread.join(timeout=30)  # opening it takes well under a second: a guard only
    waiting = thread.is_alive()
    for event in list(opening.values()):  # lets a thread left waiting end, whatever the verdict
        event.set()
    assert not waiting, "a second get_kernel waited for an opening an interrupt had cut short"
    assert opening == {} and got[0] is wk.get_kernel("com.microsoft.QuickGelu")
    x = np.linspace(-4, 4, 12, dtype=np.float32)
    want = x / (1 + np.exp(-1.702 * x.astype(np.float64)))
    np.testing.assert_allclose(got[0]({"X": x})["Y"], want, rtol=1e-5, atol=1e-6)


def test_a_failed_opening_leaves_nothing_behind_and_the_next_get_kernel_tries_again(monkeypatch):
    from webgpu_kernels import api

    monkeypatch.setattr(api, "_embedded", {})
    real_open, calls = api.open_embedded, []

    def open_embedded(op_id: str):
        calls.append(op_id)
        if len(calls) == 1:
            raise errors.PackageError("unreadable for now", path=op_id)
        return real_open(op_id)

    monkeypatch.setattr(api, "open_embedded", open_embedded)
    with pytest.raises(errors.PackageError, match="unreadable for now"):
        wk.get_kernel("com.microsoft.QuickGelu")
    assert api._opening == {} and api._embedded == {}
    kernel = wk.get_kernel("com.microsoft.QuickGelu")
    assert kernel.op_id == "com.microsoft.QuickGelu" and wk.get_kernel("com.microsoft.QuickGelu") is kernel
    assert len(calls) == 2 and api._opening == {}


def test_an_explanation_shows_its_text_in_ipython_and_jupyter():
    """A notebook cell ending in ``kernel.explain(...)`` showed the dataclass repr, a line of
    thousands of characters (every verdict's values), where print() shows the verdicts one a line
   : IPython's pretty printer now shows the text, as ``webgpu-kernels explain`` does."""
    pretty = pytest.importorskip("IPython.lib.pretty")
    gelu = wk.get_kernel("com.microsoft.QuickGelu")
    explanation = gelu.explain({"X": ((2, 77, 3072), "f16")})
    shown = pretty.pretty(explanation)
    assert shown == str(explanation)
    assert shown.splitlines()[0] == "com.microsoft.QuickGelu: chosen variant 'vec4'"
    assert repr(explanation).startswith("Explanation(op_id='com.microsoft.QuickGelu', chosen='vec4'")  # repr stays
    assert pretty.pretty([explanation]).startswith("[com.microsoft.QuickGelu: chosen variant 'vec4'\n")
