"""Judging an output against its expected values: one :class:`Tolerance`, the element rule
(:func:`elements_ok`) and the reports of `test` (:func:`compare`, against test.json's expected
values), of `bench`, `tune` and the peers (:func:`check_against`, against a reference) and of `run`
(:func:`reference_report`).

The rule is one: an element is ok when ``|got - want| <= atol + rtol * |want|`` for finite
values, NaN only where NaN is expected, the same infinity where one is. Where they differ is
deliberate: test.json's integer and bool outputs are compared exactly, as integers (bools as their
bytes); a reference computed in float64 has what the output's dtype rounds to an infinity as that
infinity (:func:`overflow_as_inf`); bench holds integer outputs to :data:`OTHER_TOLERANCE`.

Imports nothing of the engine: casefile, references and the commands import it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

#: The error a float output may have against the float64 reference: (absolute, relative), an
#: element agreeing when |output - reference| <= absolute + relative * |reference|. The relative
#: part is about two roundings of a float16 result; without it a correct normalization's mean of 1000,
#: off by 5e-7 relative, was WRONG, as was a correct activation of inputs near 3000 in
#: float32 (an ulp there is 2.4e-4).
FLOAT_TOLERANCE = {"float32": (1e-4, 1e-5), "float16": (1e-2, 1e-3)}
#: Other dtypes (bfloat16, integers): no relative part, or an index of 50000 off by 40 would pass
#:.
OTHER_TOLERANCE = (1e-2, 0.0)
#: Elements the reference checks (:func:`check_against`, :func:`max_abs_error`,
#: :func:`reference_report`) take at a time, so that their float64 temporaries are a few chunks'
#: worth (8 MiB each) whatever the output's size: whole arrays took 3-6x the output in float64, 2 to
#: 4 GB of host memory for an 84M-element output. Read at each call (a test makes it small).
CHUNK_ELEMENTS = 1 << 20


@dataclass(frozen=True)
class Tolerance:
    """How far an output may be from its expected values, element by element: ``|actual -
    expected| <= atol + rtol * |expected|`` for finite elements (test.json's ``atol`` and ``rtol``,
    `test`'s JSON; `run`'s JSON calls them ``absolute`` and ``relative``). Positionally absolute
    first, as :data:`FLOAT_TOLERANCE` lists them."""

    atol: float = 0.0
    rtol: float = 0.0

    @property
    def absolute(self) -> float:
        return self.atol

    @property
    def relative(self) -> float:
        return self.rtol

    def as_dict(self) -> dict[str, float]:
        """test.json's spelling, which `test`'s reports use."""
        return {"rtol": self.rtol, "atol": self.atol}

    @classmethod
    def from_dict(cls, values: Mapping[str, Any]) -> Tolerance:
        """From test.json's spelling (:meth:`as_dict`); a missing ``rtol`` or ``atol`` is 0."""
        return cls(rtol=float(values.get("rtol", 0.0)), atol=float(values.get("atol", 0.0)))

    @classmethod
    def of(cls, dtypes: Iterable[str]) -> Tolerance:
        """That of the least precise floating-point dtype among ``dtypes`` (a gather's int64
        indices do not make its float32 rows less exact); no float dtype: :data:`OTHER_TOLERANCE`."""
        floats = [FLOAT_TOLERANCE[d] for d in dtypes if d in FLOAT_TOLERANCE]
        return cls(*max(floats) if floats else OTHER_TOLERANCE)

    def allowance(self, ref: np.ndarray) -> np.ndarray:
        """Each element's allowed |output - reference|: absolute + relative x |reference|, and 0
        where the reference is infinite or NaN (it allows nothing but itself). Built in place: one
        float64 array the reference's size (the reference checks pass it a chunk at a time)."""
        # In float64 whatever the reference's dtype: |ref| x relative in place in an integer one
        # (onnxruntime's for an int output) was NumPy's casting error; asarray, since NumPy gives a
        # rank-0 reference's |ref| as a scalar, which cannot be indexed.
        allowed = np.asarray(np.abs(ref, dtype=np.float64))
        with np.errstate(invalid="ignore", over="ignore"):  # 0 x inf, where the last line puts 0 anyway; an
            allowed *= self.rtol                              # overflow to inf allows any finite output
        allowed += self.atol
        allowed[~np.isfinite(ref)] = 0.0
        return allowed

    def agrees(self, outputs: Mapping[str, Any], expected: Mapping[str, np.ndarray]) -> bool:
        """Every expected output is there, of its shape, with every element within the tolerance
        (NaN where the reference has NaN and equal infinities agree; see :func:`max_abs_error`)."""
        return check_against(outputs, expected, self).ok


# --- the element rule ---------------------------------------------------------------------------


def _as_bytes_if_bool(a: np.ndarray) -> np.ndarray:
    """A bool array as its bytes: NumPy reads any nonzero byte as True, so a kernel writing 2 (or
    0xFF) for true had passed against true; the format's bool is one byte of 0 or 1."""
    return a.view(np.uint8) if a.dtype.kind == "b" else a


def elements_ok(got: np.ndarray, want: np.ndarray, tolerance: Tolerance) -> np.ndarray:
    """Which elements of ``got`` pass against ``want`` (equal shapes): integers (bools as their bytes)
    exactly, as integers (float64 would equate int64s past 2^53), also against a tolerance; others
    in float64, NaN where NaN is expected, the same infinity where one is, elsewhere ``|got - want|
    <= atol + rtol * |want|``."""
    got, want = _as_bytes_if_bool(np.asarray(got)), _as_bytes_if_bool(np.asarray(want))
    if got.dtype.kind in "iu" and want.dtype.kind in "iu":
        if not (tolerance.atol or tolerance.rtol):
            return _equal_integers(got, want)
        exact = _exact_integer_diff(got, want)
        if exact is not None:
            return _exact_within(exact, want, tolerance)
    with np.errstate(invalid="ignore", over="ignore"):  # a signalling NaN's cast is "invalid"
        got, want = got.astype(np.float64), want.astype(np.float64)
        finite = np.isfinite(got) & np.isfinite(want)
        within = finite & (np.abs(got - want) <= tolerance.allowance(want))
        return within | _nonfinite_agree(got, want)


def _exact_integer_diff(got: np.ndarray, want: np.ndarray) -> np.ndarray | None:
    """``|got - want|`` as Python ints when both are integers past 2^53, where float64 differences
    are not exact (2^62 + 300 passed against 2^62 at atol=1); None where float64 is
    exact, the fast way."""
    if not (got.dtype.kind in "iu" and want.dtype.kind in "iu"):
        return None
    if max(_magnitude(got), _magnitude(want)) < 2**53:
        return None
    return np.abs(got.astype(object) - want.astype(object))


def _exact_within(exact: np.ndarray, want: np.ndarray, tolerance: Tolerance) -> np.ndarray:
    """Where the exact integer differences (:func:`_exact_integer_diff`) are within ``tolerance``
    of the integers ``want``: Python compares an int with the float bound exactly."""
    bound = tolerance.atol + tolerance.rtol * np.abs(want.astype(object))
    return np.asarray(exact <= bound, dtype=bool)


def _magnitude(a: np.ndarray) -> int:
    """The largest |value| of an integer array (0 when empty), as a Python int."""
    return max(abs(int(a.min())), abs(int(a.max()))) if a.size else 0


def _equal_integers(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    # NumPy before 2.0 compared int64 with uint64 through float64.
    if {a.dtype.kind, b.dtype.kind} == {"i", "u"}:
        signed, unsigned = (a, b) if a.dtype.kind == "i" else (b, a)
        return (signed >= 0) & (signed.astype(np.uint64) == unsigned.astype(np.uint64))
    return a == b


def _nonfinite_agree(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    """Where ``got`` holds what a non-finite ``want`` does: NaN where NaN is expected, the same
    infinity where one is (float64 arrays of one shape)."""
    return (np.isinf(want) & (got == want)) | (np.isnan(got) & np.isnan(want))


def _relative_floor(dtype: np.dtype) -> float:
    """The smallest expected magnitude a relative error is reported over: the smallest normal number
    of a float ``dtype`` (its subnormals are a few ulps apart, so a correct value reads as a large
    relative error), bfloat16's too, float32's exponent range (NumPy does not count ml_dtypes'
    bfloat16 as np.floating, and np.finfo refuses it where ml_dtypes does not register it, as on
    the GPU machine in run BD), 1 for integers and bytes."""
    if dtype.name == "bfloat16":
        return float(np.finfo(np.float32).tiny)
    return float(np.finfo(dtype).tiny) if np.issubdtype(dtype, np.floating) else 1.0


def _largest_errors(diff: np.ndarray, scale: np.ndarray, floor: float = 0.0) -> tuple[float | None, float | None]:
    """The largest of ``diff`` and of ``diff / scale`` (``scale``: |expected|, of the same elements)
    where ``scale`` is positive and at least ``floor``; None where there is none."""
    relative = (scale > 0) & (scale >= floor)
    with np.errstate(over="ignore"):  # a huge error over a tiny expected value is an infinite relative one, no warning
        largest_relative = float((diff[relative] / scale[relative]).max()) if relative.any() else None
    return (float(diff.max()) if diff.size else None), largest_relative


# --- test: against test.json's expected values --------------------------------------------------


@dataclass
class Comparison:
    """How one output compares with its expected values."""

    output: str
    ok: bool
    max_abs_error: float | None = None
    max_rel_error: float | None = None
    mismatches: int = 0
    size: int = 0
    message: str = ""
    tolerance: dict[str, float] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {
            "output": self.output, "ok": self.ok, "maxAbsError": self.max_abs_error, "maxRelError": self.max_rel_error,
            "mismatches": self.mismatches, "size": self.size, "message": self.message, "tolerance": self.tolerance,
        }  # fmt: skip


def compare(output: str, actual: Any, expected: np.ndarray, tolerance: Tolerance) -> Comparison:
    """Judge ``actual`` against ``expected`` (float64, or integers: :func:`elements_ok`): shapes
    equal, NaN where and only where expected, infinities equal, finite values within ``atol + rtol *
    |expected|``.

    Errors are reported over the elements finite in both; the relative one where |``expected``| is at
    least :func:`_relative_floor` of ``actual``'s dtype, as ``run`` reports it.
    """
    got, expected = _as_bytes_if_bool(np.asarray(actual)), _as_bytes_if_bool(np.asarray(expected))
    tol = tolerance.as_dict()
    if got.shape != expected.shape:
        return Comparison(output, False, size=int(expected.size), tolerance=tol,
                          message=f"shape {list(got.shape)}, expected {list(expected.shape)}")  # fmt: skip
    bad = ~elements_ok(got, expected, tolerance)
    integers = got.dtype.kind in "iu" and expected.dtype.kind in "iu"
    as_ints = got, expected  # for the message: float64 printed 2^62 + 300 and 2^62 alike
    exact = _exact_integer_diff(got, expected)  # as elements_ok judges them
    with np.errstate(invalid="ignore", over="ignore"):  # as in elements_ok
        got, want = got.astype(np.float64), expected.astype(np.float64)  # the reported errors
        diff = np.abs(got - want) if exact is None else exact.astype(np.float64)
    nan_got, nan_want = np.isnan(got), np.isnan(want)
    finite = np.isfinite(got) & np.isfinite(want)
    mismatches = int(bad.sum())
    max_abs, max_rel = _largest_errors(diff[finite], np.abs(want[finite]), _relative_floor(as_ints[0].dtype))
    result = Comparison(output, mismatches == 0, max_abs_error=max_abs, max_rel_error=max_rel, mismatches=mismatches,
                        size=int(want.size), tolerance=tol)  # fmt: skip
    if mismatches:
        index = tuple(int(i) for i in np.unravel_index(int(np.argmax(bad)), want.shape)) if want.ndim else ()
        g, w = float(got[index]), float(want[index])
        if integers:
            g, w = int(as_ints[0][index]), int(as_ints[1][index])
        nan_bad = int((nan_got != nan_want).sum())
        nan_text = f"{nan_bad} NaN position mismatch{'es' if nan_bad != 1 else ''}"
        outside = f"rtol={tolerance.rtol:g} atol={tolerance.atol:g}"
        # An infinity against the other one or a number is judged by no tolerance: saying "outside
        # rtol=0 atol=1e-06" of it sent the reader looking at the tolerance.
        inf_wrong = (np.isinf(got) | np.isinf(want)) & ~nan_got & ~nan_want & (got != want)
        inf_bad = int(inf_wrong.sum())
        if not inf_bad:
            extra = f", {nan_text}" if nan_bad else ""
            head = f"{mismatches} of {want.size} elements outside {outside}{extra}"
        else:
            finite_bad = mismatches - inf_bad - nan_bad
            kinds = [f"{inf_bad} where the infinities do not match"]
            kinds += [f"{finite_bad} outside {outside}"] if finite_bad else []
            kinds += [nan_text] if nan_bad else []
            head = f"{mismatches} of {want.size} elements do not match: {', '.join(kinds)}"
        first = f"got {g!r} where the expected value is {w!r}" if inf_wrong[index] else f"got {g!r}, expected {w!r}"
        result.message = f"{head}; first at {list(index)}: {first}"
    return result


# --- bench, tune, peers: against a reference ------------------------------------------------------


def overflow_as_inf(ref: np.ndarray, dtype: Any) -> np.ndarray:
    """``ref`` with each value that ``dtype`` rounds to an infinity as that infinity: a correct
    float16 sum of 50000 + 50000 is inf, which the finite float64 reference had made WRONG
   ."""
    dtype = np.dtype(dtype)
    if dtype.kind != "f" or dtype.itemsize >= 8:
        return ref
    with np.errstate(over="ignore", invalid="ignore"):
        rounded = ref.astype(dtype)
    over = np.isinf(rounded) & np.isfinite(ref)
    return np.where(over, rounded.astype(np.float64), ref) if over.any() else ref


def _errors(got: np.ndarray, ref: np.ndarray) -> np.ndarray:
    """|got - ref| per element: 0 where equal (equal infinities) or both NaN, inf for any other NaN."""
    with np.errstate(invalid="ignore"):
        diff = np.abs(got - ref)
    diff = np.where(_nonfinite_agree(got, ref), 0.0, diff)  # inf - inf is NaN
    return np.where(np.isnan(diff), np.inf, diff)


def _chunks(*arrays: np.ndarray) -> Iterator[tuple[np.ndarray, ...]]:
    """Arrays of one size, :data:`CHUNK_ELEMENTS` of each at a time in C order, flat: views of a
    contiguous array, copies of that chunk of another (ravel would copy the whole of it)."""
    flat = [a.reshape(-1) if a.flags.c_contiguous else a.flat for a in arrays]
    step = CHUNK_ELEMENTS
    for start in range(0, arrays[0].size, step):
        yield tuple(np.asarray(f[start : start + step]) for f in flat)


def _reference_errors(got: np.ndarray, ref: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """|got - ref| per element as :func:`_errors` takes it against ``ref`` as ``got``'s dtype
    rounds it (:func:`overflow_as_inf`), and that reference; integers past 2^53 exactly, as Python
    ints (float64 equated an int64 2^62 + 300 with 2^62), as `test` compares them."""
    exact = _exact_integer_diff(got, ref)
    if exact is not None:
        return exact, ref
    ref = overflow_as_inf(ref, got.dtype)
    return _errors(got.astype(np.float64, copy=False), ref), ref


@dataclass(frozen=True)
class Agreement:
    """An output checked against the reference: its largest error, and whether every element
    was within ``Tolerance`` (``ok``; a large-magnitude output may err by more than the absolute
    part and agree)."""

    max_error: float
    ok: bool


def check_against(outputs: Mapping[str, Any], expected: Mapping[str, np.ndarray], tolerance: Tolerance,
                  by_dtype: Mapping[str, Tolerance] | None = None) -> Agreement:  # fmt: skip
    """Each expected output against ``outputs``, :data:`CHUNK_ELEMENTS` at a time (an 84M-element
    output is 670 MB in float64): the largest error (:func:`max_abs_error`) and whether every
    element is within ``tolerance``. A missing output or another shape is infinitely wrong.

    An integer or boolean output (int64 indices, say) is held to :data:`OTHER_TOLERANCE`
    whatever ``tolerance`` the case's float dtypes give, as `run` holds it: with float32's relative
    part an index of 200000 off by one agreed. ``by_dtype`` (bench.json's ``tolerances``): an
    output of a dtype it names is held to that instead, each output to its own dtype's, as `test`
    holds test.json's."""
    worst = 0.0
    ok = True
    for name, ref in expected.items():
        if name not in outputs or np.shape(outputs[name]) != ref.shape:  # an optional output not produced
            return Agreement(float("inf"), False)
        got = np.asarray(outputs[name])
        allowed = (by_dtype[got.dtype.name] if by_dtype and got.dtype.name in by_dtype
                   else Tolerance(*OTHER_TOLERANCE) if got.dtype.kind in "iub" else tolerance)  # fmt: skip
        got = _as_bytes_if_bool(got)  # as `test` judges it: byte 2 is not true
        for got_part, ref_part in _chunks(got, np.asarray(ref)):
            diff, ref_part = _reference_errors(got_part, ref_part)
            worst = max(worst, float(diff.max()))
            if ok and diff.dtype == object:  # exact integers
                ok = bool(_exact_within(diff, ref_part, allowed).all())
            elif ok:  # diff is 0 for agreeing infinities or NaNs, inf for any other: never within an
                # allowance that overflowed to inf (rtol x 1e308), as in elements_ok
                ok = bool((np.isfinite(diff) & (diff <= allowed.allowance(ref_part))).all())
    return Agreement(worst, ok)


def held_to(dtypes: Iterable[str], tolerances: Mapping[str, Mapping[str, Any]] | None = None,
            ) -> Callable[[Mapping[str, Any], Mapping[str, np.ndarray]], Agreement]:  # fmt: skip
    """bench's check of outputs against the reference, one rule for ours, the tuned choice's and
    every peer's: :func:`check_against` with the tolerance of the case's least precise float
    ``dtypes`` (:meth:`Tolerance.of`), an output of a dtype that ``tolerances`` (bench.json's, in
    test.json's spelling) name held to that one instead."""
    tolerance, by_dtype = Tolerance.of(dtypes), {d: Tolerance.from_dict(t) for d, t in (tolerances or {}).items()}
    return lambda outputs, expected: check_against(outputs, expected, tolerance, by_dtype)


def max_abs_error(outputs: Mapping[str, Any], expected: Mapping[str, np.ndarray]) -> float:
    """Largest |output - reference| over all outputs, :data:`CHUNK_ELEMENTS` at a time. NaN where
    the reference has NaN counts as equal; a NaN anywhere else, an infinity mismatch or a shape
    mismatch is infinitely wrong. check_against's largest error, whatever the tolerance."""
    return check_against(outputs, expected, Tolerance()).max_error


# --- run: against a reference, reported -----------------------------------------------------------


def reference_report(actual: Any, expected: Any) -> dict[str, Any]:
    """Max abs and rel error of ``actual`` against ``expected``, both taken in float64 (integers
    past 2^53 exactly, as `test` takes them), :data:`CHUNK_ELEMENTS` at a time.

    Errors are over elements where both are finite; the relative one where ``|expected|`` is at
    least the smallest normal number of ``actual``'s dtype. ``nonFiniteMismatches`` counts the
    elements where one is NaN or infinite and the other does not hold the same value;
    ``beyondTolerance`` the finite ones past ``Tolerance.of`` actual's dtype, which it names.
    """
    a = _as_bytes_if_bool(np.asarray(actual))  # as `test` judges it: byte 2 is not true
    e = np.asarray(expected)
    tolerance = Tolerance.of([a.dtype.name])
    if a.shape != e.shape:
        return {"shapeMismatch": [list(a.shape), list(e.shape)], "maxAbsError": None, "maxRelError": None,
                "nonFiniteMismatches": None, "beyondTolerance": None}  # fmt: skip
    tiny = _relative_floor(a.dtype)
    mismatches = beyond = 0
    largest: list[list[float]] = [[], []]  # each chunk's max abs and rel error, where it has one
    for a_part, e_part in _chunks(a, e):
        exact = _exact_integer_diff(a_part, e_part)
        got = a_part.astype(np.float64)
        want = overflow_as_inf(e_part.astype(np.float64), a.dtype)  # as the output's dtype rounds it
        both = np.isfinite(got) & np.isfinite(want)
        mismatches += int((~(both | _nonfinite_agree(got, want))).sum())
        finite_want = want[both]
        if exact is None:
            diff = np.abs(got[both] - finite_want)
            beyond += int((diff > tolerance.allowance(finite_want)).sum())
        else:  # integers, every one finite
            beyond += int((~_exact_within(exact, e_part, tolerance)).sum())
            diff = exact.astype(np.float64)
        for found, error in zip(largest, _largest_errors(diff, np.abs(finite_want), tiny)):
            if error is not None:
                found.append(error)
    return {
        "maxAbsError": max(largest[0], default=None),
        "maxRelError": max(largest[1], default=None),
        "nonFiniteMismatches": mismatches,
        "beyondTolerance": beyond,
        "tolerance": {"absolute": tolerance.absolute, "relative": tolerance.relative},
    }
