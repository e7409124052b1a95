"""comparison.py: the one Tolerance, the element rule and the reports of test, bench/tune/peers and run."""

from __future__ import annotations

import math

import numpy as np
import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from webgpu_kernels import comparison
from webgpu_kernels.comparison import FLOAT_TOLERANCE, OTHER_TOLERANCE, Agreement, Tolerance, check_against, compare

from cli_helpers import BIAS_ADD, invoke_json

# --- test: against test.json's expected values ----------------------------------------------------


def test_compare_rules() -> None:
    want = np.array([1.0, np.nan, np.inf, -np.inf, 0.0, 100.0])
    ok = compare("Y", np.array([1.0, np.nan, np.inf, -np.inf, -0.0, 100.0009]), want, Tolerance(rtol=1e-5, atol=0))
    assert ok.ok and ok.mismatches == 0
    assert ok.max_abs_error == pytest.approx(0.0009) and ok.max_rel_error == pytest.approx(9e-6)
    bad = compare("Y", np.array([1.0, 0.0, np.inf, np.inf, 0.0, 100.0]), want, Tolerance(rtol=1e-5))
    assert not bad.ok and bad.mismatches == 2
    assert "1 NaN position mismatch" in bad.message and "first at [1]" in bad.message
    assert not compare("Y", np.array([np.nan]), np.array([1.0]), Tolerance(atol=1.0)).ok
    assert not compare("Y", np.array([np.inf]), np.array([1e300]), Tolerance(rtol=1.0)).ok
    edge = compare("Y", np.array([1.5]), np.array([1.0]), Tolerance(rtol=0.25, atol=0.25))
    assert edge.ok  # |1.5 - 1| <= 0.25 + 0.25 * 1
    assert not compare("Y", np.array([1.51]), np.array([1.0]), Tolerance(rtol=0.25, atol=0.25)).ok
    shape = compare("Y", np.zeros((2, 2)), np.zeros(4), Tolerance())
    assert not shape.ok and "shape [2, 2], expected [4]" in shape.message
    empty = compare("Y", np.zeros((0, 3), np.float16), np.zeros((0, 3)), Tolerance())
    assert empty.ok and empty.max_abs_error is None
    scalar = compare("Y", np.float32(2.0), np.array(1.0), Tolerance())
    assert not scalar.ok and "first at []" in scalar.message


@pytest.mark.parametrize(("got", "want"), [(np.inf, -np.inf), (-np.inf, np.inf), (np.inf, 2.0), (2.0, -np.inf)])
def test_an_infinity_mismatch_says_the_infinities_do_not_match(got, want) -> None:
    """An infinity where the expected value is the other infinity or a number (or the reverse) had
    been reported as "outside rtol=0 atol=1e-06", a tolerance no infinity is judged by."""
    judged = compare("Y", np.array([1.0, got, 3.0]), np.array([1.0, want, 3.0]), Tolerance(atol=1e-6))
    assert not judged.ok and judged.mismatches == 1 and judged.max_abs_error == 0.0  # the fields as they were
    assert "outside" not in judged.message
    assert judged.message == (f"1 of 3 elements do not match: 1 where the infinities do not match; "
                              f"first at [1]: got {got!r} where the expected value is {want!r}")  # fmt: skip


def test_a_mixed_mismatch_counts_each_kind() -> None:
    want = np.array([1.0, np.inf, np.nan, 4.0])
    judged = compare("Y", np.array([9.0, -np.inf, 0.0, 4.0]), want, Tolerance(rtol=1e-5, atol=1e-6))
    assert judged.mismatches == 3
    assert judged.message == ("3 of 4 elements do not match: 1 where the infinities do not match, 1 outside "
                              "rtol=1e-05 atol=1e-06, 1 NaN position mismatch; first at [0]: got 9.0, expected 1.0")


def test_a_shape_mismatch_reports_its_output_size_and_tolerance() -> None:
    """`test`'s JSON row of an output of the wrong shape: named, failed, the expected size and the
    tolerance it was held to, no errors (nothing was compared)."""
    judged = compare("Y", np.zeros((2, 3)), np.zeros(4), Tolerance(atol=1e-6, rtol=1e-5))
    assert judged.as_dict() == {"output": "Y", "ok": False, "maxAbsError": None, "maxRelError": None, "mismatches": 0,
                                "size": 4, "message": "shape [2, 3], expected [4]",
                                "tolerance": {"rtol": 1e-5, "atol": 1e-6}}  # fmt: skip


@pytest.mark.parametrize(("got", "want", "row"), [
    ([1.0, 2.0, 5.0], [1.0, 2.0, 4.0], {"ok": False, "maxAbsError": 1.0, "maxRelError": 0.25, "mismatches": 1,
                                        "message": "1 of 3 elements outside rtol=0 atol=0.5; first at [2]: got 5.0, "
                                                   "expected 4.0"}),
    ([1.0, 2.25, 4.0], [1.0, 2.0, 4.0], {"ok": True, "maxAbsError": 0.25, "maxRelError": 0.125, "mismatches": 0,
                                         "message": ""}),
    ([np.nan, 1.0, 1.0], [1.0, 1.0, 2.0], {"ok": False, "maxAbsError": 1.0, "maxRelError": 0.5, "mismatches": 2,
                                           "message": "2 of 3 elements outside rtol=0 atol=0.5, 1 NaN position "
                                                      "mismatch; first at [0]: got nan, expected 1.0"}),
    ([np.nan, 1.0, 2.0], [1.0, np.nan, 2.0], {"ok": False, "maxAbsError": 0.0, "maxRelError": 0.0, "mismatches": 2,
                                              "message": "2 of 3 elements outside rtol=0 atol=0.5, 2 NaN position "
                                                         "mismatches; first at [0]: got nan, expected 1.0"}),
])  # fmt: skip
def test_compare_s_row_has_every_field_of_test_s_json(got, want, row) -> None:
    """The row `test --json` prints for an output: its name, size and tolerance (test.json's
    spelling) with the verdict, errors and message; a NaN position mismatch added to the count (one,
    or several) only where there is one."""
    judged = compare("Z", np.array(got), np.array(want), Tolerance(atol=0.5))
    assert judged.as_dict() == {"output": "Z", **row, "size": 3, "tolerance": {"rtol": 0.0, "atol": 0.5}}


@pytest.mark.parametrize(("got", "want", "first"), [
    (np.array([2, 7], np.int32), np.array([1.5, 7.0]), "got 2.0, expected 1.5"),
    (np.array([2, 7], np.int32), np.array([np.nan, 7.0]), "got 2.0, expected nan"),
    (np.array([np.nan, 7.0]), np.array([2, 7], np.int32), "got nan, expected 2.0"),
])  # fmt: skip
def test_an_integer_output_against_float_expected_values_is_reported_as_floats(got, want, first) -> None:
    """An expected entry may name a float dtype for an integer output (or the reverse): its first
    mismatch is printed as the values are, not truncated to integers (1.5 as 1), nor a crash on
    NaN ("cannot convert float NaN to integer")."""
    judged = compare("Y", got, want, Tolerance())
    assert not judged.ok and judged.mismatches == 1 and judged.message.endswith(f"first at [0]: {first}")


@pytest.mark.parametrize("tolerance", [Tolerance(rtol=10.0), Tolerance(atol=math.inf)])
def test_an_infinity_is_never_within_a_finite_expected_values_tolerance(tolerance) -> None:
    """Not even where atol + rtol x |expected| is past float64's range (inf - 1e308 <= inf)."""
    got, want = np.array([np.inf, -np.inf, np.nan, 1.0]), np.array([1e308, 1e308, 1e308, 1e308])
    assert comparison.elements_ok(got, want, tolerance).tolist() == [False, False, False, True]


@pytest.mark.parametrize(("got", "want", "equal"), [
    (np.array([2**64 - 1, 5], np.uint64), np.array([-1, 5], np.int64), [False, True]),  # unsigned got, signed want
    (np.array([0, 2**62 + 1], np.int64), np.array([0, 2**62], np.uint64), [True, False]),  # float64 equates the latter
    (np.array([2**62, 0], np.uint64), np.array([2**62 + 1, 0], np.int64), [False, True]),
])  # fmt: skip
def test_int64_and_uint64_compare_by_value_either_way_round(got, want, equal) -> None:
    """NumPy before 2.0 compared int64 with uint64 through float64 (2^62 + 1 equal to 2^62); a
    negative value is no unsigned one whatever its bits (-1 is not 2^64 - 1)."""
    assert comparison.elements_ok(got, want, Tolerance()).tolist() == equal
    assert compare("Y", got, want, Tolerance()).mismatches == equal.count(False)


@pytest.mark.parametrize(("values", "tolerance"), [
    ({}, Tolerance(0.0, 0.0)),
    ({"rtol": 1e-3}, Tolerance(atol=0.0, rtol=1e-3)),
    ({"atol": 2}, Tolerance(atol=2.0, rtol=0.0)),
    ({"rtol": 1e-3, "atol": 1e-2}, Tolerance(1e-2, 1e-3)),
])  # fmt: skip
def test_a_tolerance_reads_test_json_s_spelling(values, tolerance) -> None:
    """bench.json's ``tolerances`` (test.json's spelling): a missing key is 0, integers as floats."""
    read = Tolerance.from_dict(values)
    assert read == tolerance and type(read.atol) is type(read.rtol) is float
    assert Tolerance.from_dict(read.as_dict()) == read and read.as_dict() == {"rtol": read.rtol, "atol": read.atol}


def test_bench_holds_each_output_to_its_own_dtype_s_tolerance() -> None:
    """held_to: the case's least precise float dtype's tolerance (float16's: 1e-2 + 1e-3 x |ref|) for
    float outputs, OTHER_TOLERANCE for integers, unless bench.json's ``tolerances`` name the dtype."""
    ref = {"Y": np.array([1.0, 100.0]), "I": np.array([7, 300], np.int64)}
    held = comparison.held_to(["float32", "float16"])
    within = {"Y": np.array([1.0078125, 100.09375], np.float32), "I": ref["I"].copy()}
    assert held(within, ref) == Agreement(0.09375, True)
    assert not held({**within, "Y": np.array([1.0, 100.125], np.float32)}, ref).ok
    off_by_one = {"Y": ref["Y"].astype(np.float32), "I": np.array([8, 300], np.int64)}
    assert held(off_by_one, ref) == Agreement(1.0, False)
    own = comparison.held_to(["float16"], {"int64": {"atol": 1}, "float32": {"rtol": 0.5}})
    assert own(off_by_one, ref) == Agreement(1.0, True)
    assert own({"Y": np.array([1.4, 149.0], np.float32), "I": ref["I"]}, ref) == Agreement(49.0, True)
    assert not own({"Y": np.array([1.6, 100.0], np.float32), "I": ref["I"]}, ref).ok


def test_integer_outputs_without_a_tolerance_compare_exactly_as_integers():
    """Expected values and outputs went through float64, where 2^53 + 1 equals 2^53: an int64
    output off by one there passed. int64 against uint64 compares by value too."""
    from webgpu_kernels.comparison import Tolerance, compare, elements_ok

    want = np.array([2**53, -1, 7], np.int64)
    assert not compare("Y", np.array([2**53 + 1, -1, 7], np.int64), want, Tolerance()).ok
    assert compare("Y", want.copy(), want, Tolerance()).ok
    unsigned = np.array([2**64 - 1, 2**63, 7], np.uint64)
    assert elements_ok(np.array([-1, -2**63, 7], np.int64), unsigned, Tolerance()).tolist() == [False, False, True]
    assert elements_ok(np.array([3], np.int32), np.array([4], np.int32), Tolerance(atol=1.0)).tolist() == [True]


def test_a_bool_output_is_compared_as_its_bytes():
    """NumPy reads any nonzero byte as True: a kernel writing byte 2 for true passed against true,
    while the format's bool is one byte of 0 or 1."""
    want = np.array([True, False, True])
    twos = np.array([2, 0, 2], np.uint8).view(np.bool_)
    assert not compare("Y", twos, want, Tolerance()).ok and not compare("Y", twos, want, Tolerance(atol=0.5)).ok
    assert compare("Y", np.array([1, 0, 1], np.uint8).view(np.bool_), want, Tolerance()).ok


def test_integer_outputs_against_a_tolerance_compare_exactly_past_2_to_the_53():
    """With a tolerance both sides went through float64: 2^62 + 300 passed against 2^62 at atol=1
   ."""
    from webgpu_kernels.comparison import elements_ok

    want = np.array([2**62, 5], np.int64)
    assert elements_ok(np.array([2**62 + 300, 5], np.int64), want, Tolerance(atol=1.0)).tolist() == [False, True]
    assert elements_ok(np.array([2**62 + 1, 6], np.int64), want, Tolerance(atol=1.0)).tolist() == [True, True]
    assert not compare("Y", np.array([2**64 - 1], np.uint64), np.array([2**64 - 400], np.uint64), Tolerance(atol=2.0)).ok
    judged = compare("Y", np.array([2**62 + 300, 5], np.int64), want, Tolerance(atol=1.0))  # its figures exact too
    assert judged.max_abs_error == 300.0 and judged.message.endswith(f"got {2**62 + 300}, expected {2**62}")


def test_signalling_nans_are_compared_without_a_warning():
    """Their cast to float64 is an "invalid" operation: `test` printed NumPy's RuntimeWarning from
    casefile.py on a kernel that outputs NaN bit patterns (the verdict was right)."""
    import warnings

    got = np.array([0x7F800001, 0x7FA00000, 0x3F800000, 0xFF800001], dtype=np.uint32).view(np.float32)
    want = np.array([np.nan, np.nan, 1.0, 2.0])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        result = comparison.compare("Y", got, want, comparison.Tolerance(rtol=1e-5))
    assert not result.ok and result.mismatches == 1  # the NaN against 2.0


def test_a_signalling_nan_against_integer_expected_values_is_compared_without_a_warning():
    """A float output whose expected entry names an integer dtype goes the float way too (as float64,
    warnings silenced): NumPy's own == casts the signalling NaN with an "invalid" RuntimeWarning."""
    import warnings

    got = np.array([0x7FA00000, 0x3F800000], dtype=np.uint32).view(np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        result = comparison.compare("Y", got, np.array([1, 1], np.int64), comparison.Tolerance())
    assert not result.ok and result.mismatches == 1


# --- bench, tune, peers, run: against a reference -------------------------------------------------


def test_the_tolerance_is_judged_element_by_element() -> None:
    """bench and tune's check (comparison.Tolerance): each element against absolute + relative x
    its own |reference|, so a large element's allowance does not cover a small one's error."""
    tol = comparison.Tolerance.of(["float32"])
    ref = np.array([1000.0, 1.0, np.nan, np.inf])
    ok = np.array([1000.0 + 0.009, 1.0 + 1e-4, np.nan, np.inf])  # 0.009 <= 1e-4 + 1e-5 * 1000
    assert tol.agrees({"Y": ok}, {"Y": ref}) and comparison.max_abs_error({"Y": ok}, {"Y": ref}) > tol.absolute
    for i, bad in ((1, 1.0 + 0.009), (0, 1000.0 + 0.02), (2, 0.0), (3, -np.inf), (0, np.nan)):
        got = ok.copy()
        got[i] = bad
        assert not tol.agrees({"Y": got}, {"Y": ref}), (i, bad)
    assert not tol.agrees({}, {"Y": ref}) and not tol.agrees({"Y": ok[:2]}, {"Y": ref})
    assert comparison.Tolerance.of(["int64"]).agrees({"Y": np.array([5])}, {"Y": np.array([5.0])})
    assert not comparison.Tolerance.of(["int64"]).agrees({"Y": np.array([50040])}, {"Y": np.array([50000.0])})


def test_the_tolerance_judges_a_rank_0_output() -> None:
    """A rank-0 output (QuickGelu of X=:f32) crashed bench's and tune's check with "'numpy.float64'
    object does not support item assignment": np.abs of a 0-d array is a scalar."""
    tol = comparison.Tolerance.of(["float32"])
    assert tol.agrees({"Y": np.array(1.00001, np.float32)}, {"Y": np.array(1.0)})
    assert not tol.agrees({"Y": np.array(1.5, np.float32)}, {"Y": np.array(1.0)})
    assert tol.agrees({"Y": np.array(np.inf, np.float32)}, {"Y": np.array(np.inf)})
    assert tol.allowance(np.array(np.nan)).shape == ()


def test_the_tolerance_judges_an_integer_reference() -> None:
    """onnxruntime's reference for an int output (bench checks with it since 004cbc2) is an integer
    array: the allowance scaled |ref| in place in its dtype, and NumPy's casting error escaped bench."""
    tol = comparison.Tolerance.of(["int32"])
    assert tol.agrees({"Y": np.array([3, -4], np.int32)}, {"Y": np.array([3, -4], np.int32)})
    assert not tol.agrees({"Y": np.array([3, -5], np.int32)}, {"Y": np.array([3, -4], np.int32)})
    assert comparison.Tolerance.of(["float32"]).agrees({"Y": np.array(7, np.int64)}, {"Y": np.array(7, np.int64)})
    assert comparison.Tolerance.of(["int32"]).allowance(np.array([np.iinfo(np.int32).min], np.int32))[0] > 0


def test_a_reference_past_the_outputs_range_is_its_infinity(runner: CliRunner, has_f16: bool) -> None:
    """A correct float16 BiasAdd of 50000 + 50000 is inf; against the finite float64 reference it
    was WRONG in bench, tune's check, the peers' and run. What the output's dtype rounds
    to an infinity is that infinity; 65504 (the largest finite float16) is still wrong there."""
    tol = comparison.Tolerance.of(["float16"])
    ref = np.array([1e5, -1e5, 65504.0, 1.0])
    assert tol.agrees({"Y": np.array([np.inf, -np.inf, 65504, 1], np.float16)}, {"Y": ref})
    assert not tol.agrees({"Y": np.array([65504, -np.inf, 65504, 1], np.float16)}, {"Y": ref})
    assert not comparison.Tolerance.of(["float32"]).agrees({"Y": np.array([np.inf], np.float32)}, {"Y": ref[:1]})
    if has_f16:
        large = [a for role in ("X", "skip") for a in ("--generate", f"{role}=uniform:40000:60000")]
        data = invoke_json(runner, "run", BIAS_ADD, "-i", "X=1x4x8:f16", "-i", "bias=8:f16", "-i", "skip=1x4x8:f16",
                           *large, "--generate", "bias=uniform:0:1")  # fmt: skip
        assert data["ok"] is True and data["reference"]["numpy"]["Y"]["nonFiniteMismatches"] == 0, data


def test_the_error_tolerance_of_a_case_is_its_least_precise_float_dtype():
    assert Tolerance.of(["float32", "int64"]) == Tolerance(*FLOAT_TOLERANCE["float32"])  # was 1e-2 ("float32,int64")
    assert Tolerance.of(["float16", "float32"]) == Tolerance(*FLOAT_TOLERANCE["float16"])
    assert Tolerance.of(["int32"]) == Tolerance(*OTHER_TOLERANCE) and OTHER_TOLERANCE[1] == 0.0


def test_an_integer_output_is_checked_exactly_whatever_the_cases_float_tolerance():
    """ArgMax's int64 indices against onnxruntime's int64 reference: allowance() multiplied the int64
    array in place by the float relative part, a NumPy casting traceback that ended `bench`; and
    under the case's float32 tolerance (1e-4 + 1e-5 x 200000 = 2) an index off by one agreed, in
    tune's check too, where `run` holds an int64 output to 1e-2."""
    ref = np.array([3, 200000], np.int64)
    f32 = Tolerance.of(["float32"])
    assert check_against({"reduced": ref.copy()}, {"reduced": ref}, f32) == Agreement(0.0, True)
    assert check_against({"reduced": np.array([3, 200001], np.int64)}, {"reduced": ref}, f32) == Agreement(1.0, False)
    assert not f32.agrees({"reduced": np.array([3, 200001], np.int64)}, {"reduced": ref.astype(np.float64)})
    # a float output keeps the case's tolerance: 200001 against 200000 in float32 is within 2
    assert f32.agrees({"Y": np.array([200001.0], np.float32)}, {"Y": np.array([200000.0])})


def test_a_bool_output_is_judged_as_its_bytes_against_a_reference_too():
    """`test` fails a kernel writing byte 2 (or 0xFF) for true, but bench, tune, the peers
    and `run` cast the output to float64, where any nonzero byte is 1.0: the same output agreed."""
    twos = np.array([2, 0, 0xFF], np.uint8).view(np.bool_)
    ref = np.array([1.0, 0.0, 1.0])
    assert check_against({"Y": twos}, {"Y": ref}, Tolerance.of(["float32"])) == Agreement(254.0, False)
    assert comparison.max_abs_error({"Y": twos}, {"Y": ref}) == 254.0
    report = comparison.reference_report(twos, ref)
    assert report["beyondTolerance"] == 2 and report["maxAbsError"] == 254.0
    ones = np.array([1, 0, 1], np.uint8).view(np.bool_)
    assert check_against({"Y": ones}, {"Y": ref}, Tolerance.of(["float32"])) == Agreement(0.0, True)
    assert comparison.reference_report(ones, ref)["beyondTolerance"] == 0


# --- the reference checks a chunk at a time -----------------------------------------------------


def _whole_array_check(got, ref, tolerance):
    """check_against, max_abs_error and reference_report of one output as they were before they went
    a chunk at a time (the formulas of 3b846cf), for integers within 2^53 and any other dtype."""
    got = comparison._as_bytes_if_bool(np.asarray(got))
    ref_inf = comparison.overflow_as_inf(ref, got.dtype)
    diff = comparison._errors(got.astype(np.float64, copy=False), ref_inf)
    allowed = (Tolerance(*OTHER_TOLERANCE) if got.dtype.kind in "iub" else tolerance).allowance(ref_inf)
    agreement = Agreement(float(diff.max()) if diff.size else 0.0, bool((diff <= allowed).all()))
    as_f64 = got.astype(np.float64)
    want = comparison.overflow_as_inf(ref.astype(np.float64), got.dtype)
    both = np.isfinite(as_f64) & np.isfinite(want)
    d = np.abs(as_f64[both] - want[both])
    tiny = float(np.finfo(got.dtype).tiny) if np.issubdtype(got.dtype, np.floating) else 1.0
    max_abs, max_rel = comparison._largest_errors(d, np.abs(want[both]), tiny)
    own = Tolerance.of([got.dtype.name])
    report = {"maxAbsError": max_abs, "maxRelError": max_rel,
              "nonFiniteMismatches": int((~(both | comparison._nonfinite_agree(as_f64, want))).sum()),
              "beyondTolerance": int((d > own.allowance(want[both])).sum()),
              "tolerance": {"absolute": own.absolute, "relative": own.relative}}  # fmt: skip
    return agreement, agreement.max_error, report


def _random_pair(rng, shape, dtype):
    """A reference (float64, or int64 for integer outputs half the time; sometimes not contiguous)
    and an output near it: exact, slightly off or far off, with NaN, infinities and, in float16,
    values past its range."""
    size = int(np.prod(shape))
    ref = rng.standard_normal(size) * rng.choice([1.0, 1e3, 1e5])
    if np.dtype(dtype).kind in "iub":
        ref = np.rint(ref if dtype != "bool" else rng.integers(0, 2, size))
        if rng.random() < 0.5:
            ref = ref.astype(np.int64)
    else:
        for value in (np.nan, np.inf, -np.inf, 7e4):
            ref[rng.random(size) < 0.05] = value
    got = ref.astype(np.float64) + rng.choice([0.0, 1e-6, 1e-3, 1.0]) * rng.standard_normal(size)
    with np.errstate(invalid="ignore", over="ignore"):
        got = got.astype(dtype) if dtype != "bool" else got != 0
    if dtype == "bool" and rng.random() < 0.5:  # byte 2 for true
        got = (got.view(np.uint8) * 2).view(np.bool_)
    elif np.dtype(dtype).kind == "f":
        for value in (np.nan, np.inf, -np.inf):
            got[rng.random(size) < 0.02] = value
    ref = ref.reshape(shape)
    if ref.ndim == 2 and rng.random() < 0.5:
        ref = np.ascontiguousarray(ref.T).T  # same values and shape, Fortran order
    return got.reshape(shape), ref


@pytest.mark.parametrize("dtype", ["float32", "float16", "float64", "int32", "int64", "uint8", "bool"])
def test_the_reference_checks_a_chunk_at_a_time_judge_as_the_whole_arrays_did(monkeypatch, dtype):
    """check_against, max_abs_error and reference_report take CHUNK_ELEMENTS at a time (whole arrays
    took 3-6x the output in float64: 2-4 GB of host memory at bench.json's 84M elements): their
    figures and verdicts are those of the whole-array formulas, chunk sizes not dividing the size."""
    monkeypatch.setattr(comparison, "CHUNK_ELEMENTS", 8)
    rng = np.random.default_rng(sum(map(ord, dtype)))
    verdicts = set()
    for shape in [(), (0,), (0, 3), (1,), (8,), (37,), (5, 21), (13, 7), (3, 4, 9)] * 6:
        got, ref = _random_pair(rng, shape, dtype)
        for tolerance in (Tolerance.of(["float32"]), Tolerance.of(["float16"]), Tolerance(0.5, 0.1)):
            agreement, worst, report = _whole_array_check(got, ref, tolerance)
            assert check_against({"Y": got}, {"Y": ref}, tolerance) == agreement, (shape, got, ref)
            verdicts.add(agreement.ok)
        assert comparison.max_abs_error({"Y": got}, {"Y": ref}) == worst
        assert comparison.reference_report(got, ref) == report, (shape, got, ref)
    assert verdicts == {True, False}  # both were judged
    # several outputs: the largest error over them, ok only if each is
    got, ref = _random_pair(rng, (37,), dtype)
    good, bad = ({"Y": ref}, {"Y": ref.copy()}), ({"Z": got}, {"Z": ref})
    both = check_against({**good[0], **bad[0]}, {**good[1], **bad[1]}, Tolerance(0.5, 0.1))
    assert both == _whole_array_check(got, ref, Tolerance(0.5, 0.1))[0]


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_the_reference_checks_memory_does_not_grow_with_the_output(monkeypatch, dtype):
    """Their float64 temporaries were 3-4 whole outputs (tracemalloc: 477 MiB for 20M float32
    elements; 2 GB for bench.json's 84M): now a few chunks, under half of one output in float64."""
    import tracemalloc

    monkeypatch.setattr(comparison, "CHUNK_ELEMENTS", 1 << 14)
    ref = np.random.default_rng(0).standard_normal(1 << 20)
    ref[::1000], ref[1::1000], ref[2::1000] = np.nan, np.inf, 1e5  # 1e5: float16's inf
    with np.errstate(over="ignore"):
        got = ref.astype(dtype)
    for check in (lambda: check_against({"Y": got}, {"Y": ref}, Tolerance.of([dtype])),
                  lambda: comparison.max_abs_error({"Y": got}, {"Y": ref}),
                  lambda: comparison.reference_report(got, ref)):  # fmt: skip
        tracemalloc.start()
        try:
            check()
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert peak < ref.nbytes // 2, (check, peak)


def test_the_reference_checks_judge_integers_past_2_to_the_53_exactly(monkeypatch):
    """`test` compares int64 exactly, but bench, tune, the peers and `run` went through
    float64, where 2^62 + 300 is 2^62: that output agreed with its reference, error 0.0."""
    monkeypatch.setattr(comparison, "CHUNK_ELEMENTS", 2)  # the large values in one chunk, small in others
    ref = np.array([3, 5, 2**62, -(2**62), 7], np.int64)
    off = ref.copy()
    off[2] += 300
    f32 = Tolerance.of(["float32"])
    assert check_against({"Y": off}, {"Y": ref}, f32) == Agreement(300.0, False)
    assert comparison.max_abs_error({"Y": off}, {"Y": ref}) == 300.0
    report = comparison.reference_report(off, ref)
    assert report["maxAbsError"] == 300.0 and report["beyondTolerance"] == 1 and report["nonFiniteMismatches"] == 0
    assert check_against({"Y": ref.copy()}, {"Y": ref}, f32) == Agreement(0.0, True)
    assert comparison.reference_report(ref.copy(), ref)["beyondTolerance"] == 0
    # uint64 against an int64 reference, by value
    big = np.array([2**63 + 1], np.uint64)
    assert check_against({"Y": big}, {"Y": np.array([2**63 - 1], np.int64)}, f32) == Agreement(2.0, False)
    assert check_against({"Y": big}, {"Y": big.copy()}, f32) == Agreement(0.0, True)


# --- properties against a float64 / Python-int model (hypothesis) -----------------------------------

_FLOATS = ["float16", "float32", "float64"]
_INTS = ["int8", "uint8", "int16", "int32", "uint32", "int64", "uint64"]


def _values(dtype: str) -> st.SearchStrategy:
    if dtype == "bool":
        return st.integers(0, 2)  # a byte: 2 is no format bool
    if dtype in _INTS:
        info = np.iinfo(dtype)
        near = [int(info.max), int(info.min)] + [v for b in (53, 62, 63) for v in (2**b - 1, 2**b, 2**b + 1, -(2**b)) if info.min <= v <= info.max]
        return st.integers(int(info.min), int(info.max)) | st.sampled_from(near) | st.integers(-3, 3).filter(
            lambda v: v >= info.min)  # fmt: skip
    return st.floats(width=np.finfo(dtype).bits, allow_subnormal=True) | st.sampled_from([0.0, 1.0, -1.0])


def _array(dtype: str, values: list) -> np.ndarray:
    if dtype == "bool":
        return np.array(values, np.uint8).view(np.bool_)
    return np.array(values, dtype=dtype)


@st.composite
def pairs(draw: st.DrawFn) -> tuple[np.ndarray, np.ndarray, list, list]:
    """(got, want, got's values, want's values): one shape, dtypes of one kind; got near want at times."""
    kind = draw(st.sampled_from(["float", "int", "bool"]))
    got_dtype = draw(st.sampled_from({"float": _FLOATS, "int": _INTS, "bool": ["bool"]}[kind]))
    want_dtype = got_dtype if kind == "bool" else draw(st.sampled_from({"float": _FLOATS, "int": _INTS}[kind]))
    want = [draw(_values(want_dtype)) for _ in range(draw(st.integers(0, 9)))]
    if kind == "bool":
        want = [min(w, 1) for w in want]  # expected bools are 0 or 1
    got = []
    for w in want:
        choice = draw(st.sampled_from(["same", "near", "any"]))
        if kind == "float" and choice != "any":
            scale = 1.0 if choice == "same" else 1.0 + draw(st.sampled_from([1e-6, -1e-4, 1e-2]))
            with np.errstate(over="ignore", invalid="ignore"):
                got.append(float(np.array(w * scale).astype(got_dtype)))
        elif kind != "float" and choice != "any" and _fits(v := w + (0 if choice == "same" else draw(st.integers(-2, 2))),
                                                            got_dtype):  # fmt: skip
            got.append(v)
        else:
            got.append(draw(_values(got_dtype)))
    return _array(got_dtype, got), _array(want_dtype, want), got, want


def _fits(v: int, dtype: str) -> bool:
    if dtype == "bool":
        return 0 <= v <= 2
    info = np.iinfo(dtype)
    return info.min <= v <= info.max


tolerances = st.builds(Tolerance, st.sampled_from([0.0, 0.5, 1.0, 1e-4, 1e-2, 3.0]),
                       st.sampled_from([0.0, 1e-5, 1e-3, 0.25]))  # fmt: skip


def _model_ok(g, w, tol: Tolerance) -> bool:
    """One element by the documented rule, in Python: integers' difference exact, against the
    bound in float64 (Python compares an int with a float exactly); floats in float64."""
    if isinstance(g, int) and isinstance(w, int):
        return abs(g - w) <= tol.atol + tol.rtol * float(abs(w))
    g, w = float(g), float(w)
    if math.isnan(w):
        return math.isnan(g)
    if math.isinf(w):
        return g == w
    if not math.isfinite(g):
        return False
    return abs(g - w) <= tol.atol + tol.rtol * abs(w)


@settings(max_examples=250, deadline=None)
@given(pairs(), tolerances)
def test_elements_ok_and_compare_follow_the_documented_rule(pair, tol: Tolerance) -> None:
    got, want, g, w = pair
    model = [_model_ok(a, b, tol) for a, b in zip(g, w)]
    assert comparison.elements_ok(got, want, tol).tolist() == model
    judged = compare("Y", got, want, tol)
    assert judged.ok == all(model) and judged.mismatches == model.count(False)
    if not all(model):
        assert f"first at [{model.index(False)}]" in judged.message


def _model_error(g, r, dtype: np.dtype) -> tuple[float, float]:
    """check_against's error of one element and the reference it is taken against: the reference
    as ``dtype`` rounds it to an infinity; 0 for equal infinities and NaN against NaN, inf for any
    other NaN."""
    if isinstance(g, int) and isinstance(r, int):
        return abs(g - r), r
    g, r = float(g), float(r)
    if dtype.kind == "f" and dtype.itemsize < 8 and math.isfinite(r):
        with np.errstate(over="ignore"):
            rounded = float(np.array(r).astype(dtype))
        r = rounded if math.isinf(rounded) else r
    if (math.isnan(g) and math.isnan(r)) or (math.isinf(r) and g == r):
        return 0.0, r
    if math.isnan(g) or math.isnan(r) or math.isinf(r) and math.isinf(g):
        return math.inf, r
    return abs(g - r), r


@settings(max_examples=200, deadline=None)
@given(pairs(), tolerances, st.integers(1, 4), st.booleans())
def test_check_against_agrees_with_the_element_model_in_chunks(pair, tol: Tolerance, chunk: int, as_float64) -> None:
    """The largest error and the verdict, a chunk of 1 to 4 elements at a time, as one pass of the
    model over all elements gives them (a float64 reference, or one of the output's dtype)."""
    got, ref, g, r = pair
    if as_float64:
        ref = ref.astype(np.float64)
        r = ref.tolist()
    allowed = Tolerance(*comparison.OTHER_TOLERANCE) if got.dtype.kind in "iub" else tol
    errors, oks = [], []
    for a, b in zip(g, r):
        error, reference = _model_error(a, b, got.dtype)
        errors.append(error)
        if isinstance(error, int):
            oks.append(_model_ok(a, b, allowed))
        else:  # nothing allowed against an infinite or NaN reference but itself
            oks.append(error <= (allowed.atol + allowed.rtol * abs(reference) if math.isfinite(reference) else 0.0))
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(comparison, "CHUNK_ELEMENTS", chunk)
        agreement = check_against({"Y": got}, {"Y": ref}, tol)
    assert (agreement.max_error, agreement.ok) == (float(max(errors, default=0.0)), all(oks))


def test_test_reports_relative_error_only_where_the_output_dtype_holds_a_normal_value() -> None:
    """`test`'s max rel error as `run` reports it: over expected values at least the output dtype's
    smallest normal number. A float16 subnormal is a few ulps of 6e-8 apart, so a correct 1.19e-7
    for an expected 1e-7 read as a 19% relative error in the table of a passing case."""
    got = np.array([1.19209e-7, 1.0, 2.0], np.float16)
    want = np.array([1e-7, 1.0, 2.001])
    judged = compare("Y", got, want, Tolerance(rtol=1e-2, atol=1e-3))
    assert judged.ok and judged.max_rel_error == pytest.approx(0.001 / 2.001)
    assert judged.max_abs_error == pytest.approx(0.001)  # every finite element still counts here
    agreement = comparison.reference_report(got, want)
    assert agreement["maxRelError"] == pytest.approx(judged.max_rel_error)


def test_a_bfloat16_output_reports_its_relative_error_over_its_normal_values() -> None:
    """bfloat16 is a float dtype too (ml_dtypes'; NumPy does not count it as np.floating): its
    relative error is reported over expected values from its smallest normal number, not from 1 as
    for integers, where a one-ulp error at 0.0123 read as a max rel error of 0."""
    ml_dtypes = pytest.importorskip("ml_dtypes")
    got = np.array([0.0123291015625 + 2.0**-14, 1.0], ml_dtypes.bfloat16)
    want = np.array([0.0123291015625, 1.0])
    judged = compare("Y", got, want, Tolerance(rtol=1e-2, atol=1e-4))
    assert judged.ok and judged.max_rel_error == pytest.approx(float(got[0]) / 0.0123291015625 - 1)
    assert comparison.reference_report(got, want)["maxRelError"] == pytest.approx(judged.max_rel_error)


def test_a_bfloat16_output_is_judged_where_numpy_finfo_refuses_it(monkeypatch) -> None:
    """np.finfo(bfloat16) raised "data type dtype(bfloat16) not compatible with finfo" on the GPU
    machine's NumPy and ml_dtypes (run BD): comparing any bfloat16 output failed there. Its smallest
    normal number is float32's, taken without np.finfo."""
    ml_dtypes = pytest.importorskip("ml_dtypes")
    finfo = np.finfo

    def refusing(dtype):
        if np.dtype(dtype).name == "bfloat16":
            raise ValueError("data type dtype(bfloat16) not compatible with finfo")
        return finfo(dtype)

    monkeypatch.setattr(np, "finfo", refusing)
    got = np.array([0.0123291015625 + 2.0**-14, 1.0], ml_dtypes.bfloat16)
    judged = compare("Y", got, np.array([0.0123291015625, 1.0]), Tolerance(rtol=1e-2, atol=1e-4))
    assert judged.ok and judged.max_rel_error == pytest.approx(float(got[0]) / 0.0123291015625 - 1)


def test_a_relative_error_past_float64_is_infinite_without_a_warning() -> None:
    """An error of 1e300 against an expected 1e-300 overflowed the division: NumPy's RuntimeWarning
    (hypothesis met it on Python 3.13) in the middle of `test`'s output."""
    import warnings

    got, want = np.array([1e300, 1.0]), np.array([1e-300, 1.0])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        judged = compare("Y", got, want, Tolerance(0.0, 1e-3))
    assert not judged.ok and judged.mismatches == 1 and judged.max_rel_error == math.inf


# --- the reference checks' edges (mutants that survived these tests, GPU test deselected) ----------


def test_the_reference_checks_of_a_missing_output_or_another_shape() -> None:
    """bench's verdict on a missing output or one of another shape is an infinite error, not agreeing;
    `run`'s report names both shapes and no figures."""
    ref = {"Y": np.zeros(4)}
    assert check_against({}, ref, Tolerance()) == Agreement(math.inf, False)
    assert check_against({"Y": np.zeros((2, 2))}, ref, Tolerance()) == Agreement(math.inf, False)
    assert comparison.reference_report(np.zeros((2, 3), np.float32), np.zeros(4)) == {
        "shapeMismatch": [[2, 3], [4]], "maxAbsError": None, "maxRelError": None, "nonFiniteMismatches": None,
        "beyondTolerance": None}  # fmt: skip


def test_run_counts_an_error_at_the_allowance_as_within_it() -> None:
    """``|got - want| <= atol + rtol x |want|``: float64's own tolerance is OTHER_TOLERANCE (0.01, exact in
    float64 here), so 0.01 off is within and 0.011 is not."""
    assert comparison.reference_report(np.array([0.01, 1.0]), np.array([0.0, 1.0]))["beyondTolerance"] == 0
    assert comparison.reference_report(np.array([0.011, 1.0]), np.array([0.0, 1.0]))["beyondTolerance"] == 1


def test_the_relative_error_counts_an_expected_value_at_the_floor() -> None:
    """The floor is inclusive: an integer output's relative error is taken over |expected| >= 1, so 2
    against 1 is a relative error of 1 (it had been none)."""
    got, want = np.array([2, 5], np.int32), np.array([1, 5], np.int32)
    assert compare("Y", got, want, Tolerance(atol=1.0)).max_rel_error == 1.0
    assert comparison.reference_report(got, want)["maxRelError"] == 1.0


def test_a_bfloat16_subnormal_expected_value_gives_no_relative_error() -> None:
    """bfloat16's smallest normal number is float32's (1.2e-38), not float64's: 2e-39 against 1e-39 is
    a few ulps of a subnormal, not a 100% relative error."""
    ml_dtypes = pytest.importorskip("ml_dtypes")
    got = np.array([2e-39, 1.0], ml_dtypes.bfloat16)
    judged = compare("Y", got, np.array([1e-39, 1.0]), Tolerance(atol=1e-3))
    assert judged.ok and judged.max_rel_error == 0.0


@pytest.mark.parametrize("check", [
    lambda: check_against({"Y": np.array([np.inf, 1.0], np.float16)}, {"Y": np.array([1e5, 1.0])},
                          Tolerance.of(["float16"])),  # 1e5 as float16 overflows; inf - inf next
    lambda: check_against({"Y": np.array([np.inf, -np.inf])}, {"Y": np.array([np.inf, -np.inf])}, Tolerance()),
    lambda: Tolerance(atol=1.0).allowance(np.array([np.inf, 2.0])),  # 0 x inf
    lambda: comparison.reference_report(np.array([np.inf, 1.0], np.float16), np.array([1e5, 1.0])),
])  # fmt: skip
def test_the_reference_checks_of_infinities_print_no_numpy_warning(check) -> None:
    """An infinity (or a reference past the output's range) is an ordinary case: NumPy's overflow
    and invalid-value RuntimeWarnings had been printed in the middle of bench's table."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check()


def test_integers_between_2_to_the_53_and_2_to_the_54_are_compared_exactly() -> None:
    """float64 holds every integer up to 2^53 only: 2^53 + 1 is 2^53 there."""
    got, want = np.array([2**53 + 1, 3], np.int64), np.array([2**53, 3], np.int64)
    assert comparison.elements_ok(got, want, Tolerance(atol=0.5)).tolist() == [False, True]
    assert check_against({"Y": got}, {"Y": want}, Tolerance()) == Agreement(1.0, False)
    assert comparison.reference_report(got, want)["beyondTolerance"] == 1


def test_run_counts_integers_beyond_the_tolerance_over_every_chunk(monkeypatch) -> None:
    monkeypatch.setattr(comparison, "CHUNK_ELEMENTS", 2)  # the error in the first chunk, none in the second
    want = np.full(4, 2**62, np.int64)
    got = want.copy()
    got[0] += 5
    report = comparison.reference_report(got, want)
    assert report["beyondTolerance"] == 1 and report["maxAbsError"] == 5.0


def test_the_reference_checks_copy_a_chunk_of_a_non_contiguous_output_not_all_of_it(monkeypatch) -> None:
    """A transposed (Fortran-order) output and reference: reshape(-1) would copy each whole."""
    import tracemalloc

    monkeypatch.setattr(comparison, "CHUNK_ELEMENTS", 1 << 14)
    ref = np.random.default_rng(0).standard_normal((1024, 1024)).T
    got = ref.astype(np.float32)  # Fortran order too
    assert not ref.flags.c_contiguous and not got.flags.c_contiguous
    tracemalloc.start()
    try:
        assert check_against({"Y": got}, {"Y": ref}, Tolerance.of(["float32"])).ok
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < ref.nbytes // 4, peak


@pytest.mark.parametrize("tolerance", [Tolerance(rtol=10.0), Tolerance(atol=math.inf)])
def test_bench_s_check_never_lets_an_infinity_or_nan_agree_with_a_finite_reference(tolerance) -> None:
    """As compare() (above): where atol + rtol x |reference| is past float64's range, an infinite or NaN
    output had agreed with a finite reference (inf <= inf) in bench's, tune's and the peers' check."""
    ref = {"Y": np.array([1e308, 1e308, 1e308])}
    for bad in (np.inf, -np.inf, np.nan):
        assert not check_against({"Y": np.array([1e308, bad, 1e308])}, ref, tolerance).ok, bad
    assert check_against({"Y": np.array([1e308, 1e307, 1e308])}, ref, tolerance).ok
