"""A stateful hypothesis test of the runtime: GPU tensors, calls recorded into one command buffer
and submitted later, pooled buffers handed from tensor to tensor, plans cached per signature,
tensors released, copied, aliased (``to_gpu(t)`` is ``t``) or collected, and calls that break
their contract in the middle of a recorded chain.

A float64 NumPy model runs beside the real engine. Each tensor's model is its expected value and
a bound on each element's error, which grows along a chain of calls (QuickGelu's slope is at most
1.1; BiasAdd adds its inputs' errors) and is zero for uploads and copies, and after a tensor was
read back (the read is then its exact contents). Every read must be within the bound; no input
array may change; a failing call must record, submit and lease nothing. The runs also shrink the
recorder's batch (``MAX_PENDING_DISPATCHES``) and the pool, so that submissions fall between and
inside chains and pooled buffers are destroyed while recorded work still uses them.

CI runs 25 programs of up to 30 steps (``derandomize``: the same each run): 2.9 s on the project's
2-core machine (no full collection per program: in the whole suite's large heap that is slow). A longer
hunt (200 programs of up to 80 steps, 42 s there; ``python scripts/fuzz_long.py`` runs it with test_fuzz.py
at its own scale): ``WK_FUZZ_SCALE=8 WK_FUZZ_RANDOM=1 WK_STATE_STEPS=80 python -m pytest tests/test_runtime_state_machine.py``
(``WK_FUZZ_SCALE`` multiplies the programs, as in tests/test_fuzz.py; ``WK_STATE_STEPS`` sets their length).
"""

from __future__ import annotations

import copy
import gc
import os
import threading
import weakref
from dataclasses import dataclass

import numpy as np
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

import webgpu_kernels as wk
from webgpu_kernels import buffers
from webgpu_kernels.errors import (
    AttributeValueError,
    DTypeError,
    InputError,
    MissingInputError,
    RankError,
    SelectionError,
    TensorReleasedError,
    VariantRejectedError,
)
from webgpu_kernels.tensor import GpuTensor

from references import assert_matches, bias_add, bias_add_tolerance, quick_gelu, quick_gelu_tolerance

SCALE = float(os.environ.get("WK_FUZZ_SCALE", "1"))
RANDOM = os.environ.get("WK_FUZZ_RANDOM") == "1"
STEPS = int(os.environ.get("WK_STATE_STEPS", "30"))

#: BiasAdd's (N, S, C) shapes, few enough that chains find tensors to combine; (1, 0, 4) is empty,
#: (1, 40, 8) takes a pooled buffer of another size class than the rest.
RANK3 = [(1, 1, 4), (1, 3, 4), (2, 3, 4), (1, 2, 5), (2, 1, 8), (1, 1, 1), (1, 0, 4), (1, 40, 8)]
CHANNELS = sorted({s[2] for s in RANK3})
#: QuickGelu takes any shape; BiasAdd's biases are (C,).
SHAPES = RANK3 + [(c,) for c in CHANNELS] + [(), (6,), (2, 2, 2, 2), (0,)]
LAYOUTS = ["c", "transposed", "strided", "big-endian"]
ALPHAS = [1.702, 1.0, -0.5, 0.0]
#: Largest |value| (plus error) of a BiasAdd input: sums stay far from float16's overflow.
BIAS_ADD_INPUT_MAX = 1000.0
#: QuickGelu's slope x -> x * sigmoid(alpha * x) is s(u) + u s(u) (1 - s(u)) with u = alpha * x: within [-0.1, 1.1].
QUICK_GELU_SLOPE = 1.1
#: Released tensors kept to be used again (each must refuse).
RELEASED_KEPT = 8


@dataclass(eq=False)
class Entry:
    """One GPU tensor and its model: ``value`` (float64) and the bound ``err`` on |contents - value|."""

    tensor: GpuTensor
    value: np.ndarray
    err: np.ndarray

    @property
    def dtype(self) -> np.dtype:
        return self.tensor.dtype

    def bound(self) -> float:
        return float(np.max(np.abs(self.value) + self.err, initial=0.0))


def host_array(seed: int, shape: tuple[int, ...], dtype: np.dtype, layout: str, scale: float) -> np.ndarray:
    """Random values of ``dtype`` in one of NumPy's layouts the engine must copy, never change."""
    values = np.random.default_rng(seed).standard_normal(shape) * scale
    if layout == "transposed" and len(shape) >= 2:
        return np.ascontiguousarray(values.T).astype(dtype).T
    if layout == "strided" and len(shape) >= 1:
        wide = np.zeros((*shape[:-1], shape[-1] * 2), dtype)
        wide[..., ::2] = values
        return wide[..., ::2]
    if layout == "big-endian":
        return values.astype(np.dtype(dtype).newbyteorder(">"))
    return values.astype(dtype)


class Cycle:
    """A tensor held by a reference cycle: only the collector frees it."""

    def __init__(self, tensor: GpuTensor) -> None:
        self.tensor, self.me = tensor, self


class RuntimeMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.device = wk.get_device()
        self.memory = self.device.memory
        self.gelu = wk.get_kernel("com.microsoft.QuickGelu")
        self.bias_add = wk.get_kernel("com.microsoft.BiasAdd")
        self.dtypes = [np.dtype(np.float32)] + ([np.dtype(np.float16)] if self.device.has_f16 else [])
        self.names: dict[int, Entry] = {}  # several names may hold one entry: to_gpu(t) is t
        self.next_name = 0
        self.released: list[GpuTensor] = []
        self.arrays: list[tuple[np.ndarray, np.ndarray]] = []  # every array given to the engine, and a copy
        self.saved = (buffers.MAX_PENDING_DISPATCHES, buffers.MAX_POOLED_BUFFERS, buffers.MAX_UNSUBMITTED_WRITE_BYTES,
                      self.memory.pool_bytes)  # fmt: skip
        # The buffers this program's tensors took, all given back by its end. (Not a count of the
        # device's leased buffers: an earlier test's tensor in a reference cycle may be collected
        # meanwhile, and a full collection per program took seconds in the suite's large heap.)
        self.taken: set[int] = set()
        self.cycles: list[weakref.ref[Cycle]] = []

    # --- set-up ---------------------------------------------------------------------------------

    @initialize(batch=st.sampled_from([256, 1, 2, 3]), tiny_pool=st.booleans(), write_bytes=st.sampled_from([64 << 20, 0]))
    def limits(self, batch: int, tiny_pool: bool, write_bytes: int) -> None:
        """A short batch submits between and inside chains (a record may submit the batch it joins);
        a tiny pool destroys released buffers while recorded work may still use them; with
        ``write_bytes`` 0 every upload is submitted at once."""
        buffers.MAX_PENDING_DISPATCHES, buffers.MAX_UNSUBMITTED_WRITE_BYTES = batch, write_bytes
        if tiny_pool:
            buffers.MAX_POOLED_BUFFERS = 2
            self.memory.pool_bytes = 0

    def teardown(self) -> None:
        try:
            for entry in self.entries():
                self.check_read(entry)
        finally:  # also after a failure: the next program counts the buffers leased from its start
            for entry in self.entries():
                entry.tensor.release()
            self.names.clear()
            if any(cycle() is not None for cycle in self.cycles):  # tensors dropped in cycles not yet collected
                gc.collect()
            wk.synchronize()  # pools the buffers of collected tensors
            (buffers.MAX_PENDING_DISPATCHES, buffers.MAX_POOLED_BUFFERS, buffers.MAX_UNSUBMITTED_WRITE_BYTES,
             self.memory.pool_bytes) = self.saved
        assert not self.taken & self.memory._leased.keys(), "a buffer was never given back"

    # --- the model --------------------------------------------------------------------------------

    def entries(self) -> list[Entry]:
        return list({id(e): e for e in self.names.values()}.values())

    def add(self, entry: Entry) -> None:
        self.taken.add(entry.tensor.buffer.uid)
        self.names[self.next_name] = entry
        self.next_name += 1

    def picked(self, pick: int, usable=lambda e: True) -> Entry | None:
        found = [e for _, e in sorted(self.names.items()) if usable(e)]
        return found[pick % len(found)] if found else None

    def given(self, array: np.ndarray) -> np.ndarray:
        self.arrays.append((array, array.copy()))
        return array

    def check_read(self, entry: Entry, how: str = "numpy") -> None:
        got = entry.tensor.numpy() if how == "numpy" else np.asarray(entry.tensor)
        assert_matches(got, entry.value, entry.dtype, rtol=0.0, atol=entry.err, what=f"tensor {entry.tensor}")
        entry.value, entry.err = got.astype(np.float64), np.zeros(got.shape)  # now known exactly

    def forget(self, entry: Entry) -> None:
        for name in [n for n, e in self.names.items() if e is entry]:
            del self.names[name]

    def engine_state(self) -> tuple[int, int, int]:
        return len(self.memory._leased), self.memory._pending, self.memory.batch

    @staticmethod
    def operand(entry: Entry | None, array: np.ndarray | None) -> tuple[object, np.ndarray, np.ndarray]:
        """(what the call is given, its model value, its model error)."""
        if entry is not None:
            return entry.tensor, entry.value, entry.err
        assert array is not None
        return array, array.astype(np.float64), np.zeros(array.shape)

    # --- rules ----------------------------------------------------------------------------------

    @rule(shape=st.sampled_from(SHAPES), dtype=st.integers(0, 1), layout=st.sampled_from(LAYOUTS),
          scale=st.sampled_from([1.0, 8.0]), seed=st.integers(0, 2**32 - 1))  # fmt: skip
    def upload(self, shape, dtype, layout, scale, seed) -> None:
        array = self.given(host_array(seed, shape, self.dtypes[dtype % len(self.dtypes)], layout, scale))
        tensor = wk.to_gpu(array)
        assert (tensor.shape, tensor.dtype) == (array.shape, array.dtype.newbyteorder("="))
        self.add(Entry(tensor, array.astype(np.float64), np.zeros(array.shape)))

    @rule(pick=st.integers(0, 255), on_gpu=st.booleans(), shape=st.sampled_from(SHAPES), dtype=st.integers(0, 1),
          layout=st.sampled_from(LAYOUTS), seed=st.integers(0, 2**32 - 1), alpha=st.sampled_from(ALPHAS),
          scalar=st.booleans(), workgroup=st.sampled_from([None, 64]),
          output=st.sampled_from(["gpu", "gpu", "numpy"]))  # fmt: skip
    def call_quick_gelu(self, pick, on_gpu, shape, dtype, layout, seed, alpha, scalar, workgroup, output) -> None:
        entry = self.picked(pick, lambda e: e.dtype in self.dtypes) if on_gpu else None
        array = None if entry else self.given(host_array(seed, shape, self.dtypes[dtype % len(self.dtypes)], layout, 4.0))
        given, value, err = self.operand(entry, array)
        dtype_ = entry.dtype if entry else np.dtype(array.dtype.newbyteorder("="))
        result = self.gelu({"X": given}, attrs={"alpha": alpha}, variant="scalar" if scalar else None,
                           tunables=workgroup and {"WORKGROUP_SIZE": workgroup}, output=output)["Y"]  # fmt: skip
        tol = quick_gelu_tolerance(dtype_)
        want = quick_gelu(value, alpha)
        bound = QUICK_GELU_SLOPE * err + tol["atol"] + tol["rtol"] * (np.abs(want) + QUICK_GELU_SLOPE * err)
        self.keep(result, want, bound, dtype_)

    @rule(pick=st.integers(0, 255), x_on_gpu=st.booleans(), skip=st.sampled_from(["same", "gpu", "numpy"]),
          bias_on_gpu=st.booleans(), shape=st.sampled_from(RANK3), dtype=st.integers(0, 1),
          layout=st.sampled_from(LAYOUTS), seed=st.integers(0, 2**32 - 1), scalar=st.booleans(),
          output=st.sampled_from(["gpu", "gpu", "numpy"]))  # fmt: skip
    def call_bias_add(self, pick, x_on_gpu, skip, bias_on_gpu, shape, dtype, layout, seed, scalar, output) -> None:
        def fits(e: Entry, shape: tuple[int, ...], dtype: np.dtype) -> bool:
            return e.tensor.shape == shape and e.dtype == dtype and e.bound() <= BIAS_ADD_INPUT_MAX

        x_entry = self.picked(pick, lambda e: e.tensor.ndim == 3 and fits(e, e.tensor.shape, e.dtype)
                              and e.dtype in self.dtypes) if x_on_gpu else None  # fmt: skip
        if x_entry is not None:
            shape, dtype_ = x_entry.tensor.shape, x_entry.dtype
            x_array = None
        else:
            dtype_ = self.dtypes[dtype % len(self.dtypes)]
            x_array = self.given(host_array(seed, shape, dtype_, layout, 4.0))
        channels = shape[2]
        skip_entry = skip_array = None
        if skip == "same":  # one tensor (or array) read twice by the dispatch
            skip_entry, skip_array = x_entry, x_array
        elif skip == "gpu":
            skip_entry = self.picked(pick // 3, lambda e: fits(e, shape, dtype_))
        if skip_entry is None and skip_array is None:
            skip_array = self.given(host_array(seed + 1, shape, dtype_, "c", 4.0))
        bias_entry = self.picked(pick // 5, lambda e: fits(e, (channels,), dtype_)) if bias_on_gpu else None
        bias_array = None if bias_entry else self.given(host_array(seed + 2, (channels,), dtype_, layout, 4.0))
        x, x_value, x_err = self.operand(x_entry, x_array)
        s, s_value, s_err = self.operand(skip_entry, skip_array)
        b, b_value, b_err = self.operand(bias_entry, bias_array)
        result = self.bias_add({"X": x, "bias": b, "skip": s}, variant="scalar" if scalar else None,
                               output=output)["Y"]  # fmt: skip
        want = bias_add(x_value, b_value, s_value)
        tol = bias_add_tolerance(np.abs(x_value) + x_err, np.abs(b_value) + b_err, np.abs(s_value) + s_err, dtype_)
        bound = x_err + b_err + s_err + tol["atol"] + tol["rtol"] * (np.abs(want) + x_err + b_err + s_err)
        self.keep(result, want, bound, dtype_)

    def keep(self, result, want: np.ndarray, bound: np.ndarray, dtype: np.dtype) -> None:
        if isinstance(result, GpuTensor):
            assert (result.shape, result.dtype) == (want.shape, dtype)
            self.add(Entry(result, want, bound))
        else:  # a NumPy result: read now
            assert_matches(result, want, dtype, rtol=0.0, atol=bound, what="a NumPy result")

    @rule(pick=st.integers(0, 255), kind=st.sampled_from(["bias length", "skip shape", "mixed dtypes", "float64",
                                                          "rank", "released", "forced vec4", "attribute",
                                                          "missing"]))  # fmt: skip
    def failing_call(self, pick, kind) -> None:
        """A call that breaks its contract, between recorded calls: it records, submits and leases nothing."""
        entry = self.picked(pick, lambda e: e.tensor.ndim == 3 and e.dtype in self.dtypes and e.tensor.size > 0)
        if entry is not None:
            x, (n, s, c), dtype = entry.tensor, entry.tensor.shape, entry.dtype
        else:
            x, (n, s, c), dtype = self.given(np.ones((1, 2, 4), np.float32)), (1, 2, 4), np.dtype(np.float32)
        good = {"X": x, "bias": self.given(np.ones(c, dtype)), "skip": self.given(np.ones((n, s, c), dtype))}
        other = np.dtype(np.float16) if dtype == np.float32 else np.dtype(np.float32)
        kernel, inputs, options, expected = self.bias_add, good, {}, InputError
        if kind == "bias length":
            inputs, expected = {**good, "bias": self.given(np.ones(c + 1, dtype))}, SelectionError
        elif kind == "skip shape":
            inputs, expected = {**good, "skip": self.given(np.ones((n, s + 1, c), dtype))}, SelectionError
        elif kind == "mixed dtypes":
            inputs, expected = {**good, "bias": self.given(np.ones(c, other))}, DTypeError
        elif kind == "float64":
            kernel, inputs, expected = self.gelu, {"X": self.given(np.ones(5))}, DTypeError
        elif kind == "rank":
            inputs, expected = {**good, "X": self.given(np.ones((n, c), dtype))}, RankError
        elif kind == "released":
            if not self.released:
                return
            kernel, inputs = self.gelu, {"X": self.released[pick % len(self.released)]}
        elif kind == "forced vec4":  # 3 elements: not a multiple of 4
            kernel, inputs, options, expected = self.gelu, {"X": self.given(np.ones(3, dtype))}, {"variant": "vec4"}, VariantRejectedError
        elif kind == "attribute":
            kernel, inputs, options, expected = self.gelu, {"X": x}, {"attrs": {"alpha": "big"}}, AttributeValueError
        elif kind == "missing":
            inputs, expected = {"X": x, "bias": good["bias"]}, MissingInputError
        before = self.engine_state()
        for output in ("gpu", "numpy"):
            try:
                kernel(inputs, output=output, **options)
            except expected:
                pass
            else:
                raise AssertionError(f"a call with {kind} ran")
        assert self.engine_state() == before, "a failing call recorded, submitted or leased something"

    @rule(pick=st.integers(0, 255), how=st.sampled_from(["numpy", "asarray"]))
    @precondition(lambda self: self.names)
    def read(self, pick, how) -> None:
        self.check_read(self.picked(pick), how)

    @rule(read=st.integers(0, 255), pick=st.integers(0, 255), then=st.sampled_from(["call", "copy", "release"]))
    @precondition(lambda self: self.names)
    def read_on_another_thread(self, read, pick, then) -> None:
        """One thread reads a tensor back while this one records a call, copies a tensor or
        releases the one being read (tensors may be shared between threads): the read gives the
        tensor's contents, or, where the release came first, TensorReleasedError."""
        entry = self.picked(read)
        got: list[object] = []

        def read_back() -> None:
            try:
                got.append(entry.tensor.numpy())
            except TensorReleasedError as exc:
                got.append(exc)

        reader = threading.Thread(target=read_back)
        reader.start()
        try:
            if then == "call" and self.picked(pick, lambda e: e.dtype in self.dtypes) is not None:
                self.call_quick_gelu(pick, True, (), 0, "c", 0, 1.702, False, None, "gpu")
            elif then == "copy":
                self.copy(pick, False)
            elif then == "release":
                self.release(read)
        finally:
            reader.join()
        if isinstance(got[0], TensorReleasedError):
            assert then == "release", got[0]
        else:
            assert_matches(got[0], entry.value, entry.dtype, rtol=0.0, atol=entry.err, what=f"tensor {entry.tensor}")

    @rule(how=st.sampled_from(["synchronize", "kernel flush", "empty cache"]))
    def flush(self, how) -> None:
        if how == "synchronize":
            wk.synchronize()
        elif how == "kernel flush":
            self.gelu.flush()
        else:
            wk.empty_cache()

    @rule(pick=st.integers(0, 255))
    @precondition(lambda self: self.names)
    def release(self, pick) -> None:
        entry = self.picked(pick)
        entry.tensor.release()
        self.forget(entry)
        self.released = [*self.released[-(RELEASED_KEPT - 1):], entry.tensor]

    @rule(pick=st.integers(0, 255), use=st.sampled_from(["numpy", "asarray", "copy", "call", "to_gpu", "release"]))
    @precondition(lambda self: self.released)
    def use_released(self, pick, use) -> None:
        tensor = self.released[pick % len(self.released)]
        before = self.engine_state()
        if use == "release":
            tensor.release()  # again: nothing
        else:
            uses = {"numpy": (tensor.numpy, TensorReleasedError), "asarray": (lambda: np.asarray(tensor), TensorReleasedError),
                    "copy": (lambda: copy.copy(tensor), TensorReleasedError),
                    "call": (lambda: self.gelu({"X": tensor}, output="gpu"), InputError),
                    "to_gpu": (lambda: wk.to_gpu(tensor), InputError)}  # fmt: skip
            call, expected = uses[use]
            try:
                call()
            except expected as exc:
                assert "release" in str(exc)
            else:
                raise AssertionError(f"{use} of a released tensor did not raise")
        assert tensor.released and self.engine_state() == before

    @rule(pick=st.integers(0, 255), deep=st.booleans())
    @precondition(lambda self: self.names)
    def copy(self, pick, deep) -> None:
        entry = self.picked(pick)
        duplicate = copy.deepcopy(entry.tensor) if deep else copy.copy(entry.tensor)
        assert duplicate is not entry.tensor and duplicate.buffer is not entry.tensor.buffer
        self.add(Entry(duplicate, entry.value.copy(), entry.err.copy()))

    @rule(pick=st.integers(0, 255))
    @precondition(lambda self: self.names)
    def alias(self, pick) -> None:
        """to_gpu(t) on t's device is t: another name for one tensor (releasing either releases both)."""
        entry = self.picked(pick)
        assert wk.to_gpu(entry.tensor) is entry.tensor
        self.add(entry)

    @rule(pick=st.integers(0, 255), how=st.sampled_from(["del", "cycle", "cycle + gc"]))
    @precondition(lambda self: self.names)
    def drop(self, pick, how) -> None:
        """A name goes out of scope; with the last one the tensor's finalizer gives its buffer back,
        at once, or (held by a reference cycle) whenever the collector next runs, which may be
        inside a call, a flush or a read, or (``cycle + gc``) now."""
        name = sorted(self.names)[pick % len(self.names)]
        entry = self.names.pop(name)
        if how != "del":
            self.cycles.append(weakref.ref(Cycle(entry.tensor)))
        del entry
        if how == "cycle + gc":
            gc.collect(0)  # the young generation: a full collection of the suite's heap takes long

    # --- invariants -----------------------------------------------------------------------------

    @invariant()
    def inputs_unchanged(self) -> None:
        for array, original in self.arrays:
            np.testing.assert_array_equal(array, original, strict=True)

    @invariant()
    def tensors_live(self) -> None:
        for entry in self.names.values():
            assert not entry.tensor.released and entry.tensor.shape == entry.value.shape
        assert all(t.released for t in self.released)


TestRuntimeStateMachine = RuntimeMachine.TestCase
TestRuntimeStateMachine.settings = settings(
    max_examples=max(1, int(25 * SCALE)), stateful_step_count=STEPS, deadline=None, derandomize=not RANDOM,
    database=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)  # fmt: skip
