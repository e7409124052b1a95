"""case_data.py: the seeded generator, casting, inline JSON values and data files."""

from __future__ import annotations

import io
import json
import math
import re
import struct
import zipfile

import numpy as np
import pytest
import safetensors.numpy
from hypothesis import example, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from webgpu_kernels import case_data

# --- the generator ----------------------------------------------------------------------------------


def test_uniform_bits_are_splitmix64() -> None:
    # SplitMix64 seeded with 0: 0xE220A8397B1DCDAF, 0x6E789E6AA1B965F4, 0x06C45D188009454F.
    expected = [0xE220A8397B1DCDAF >> 11, 0x6E789E6AA1B965F4 >> 11, 0x06C45D188009454F >> 11]
    assert list(case_data.uniform_bits(0, 3)) == [v * 2.0**-53 for v in expected]
    # Element i does not depend on how many are drawn.
    assert case_data.uniform_bits(7, 10)[:4].tolist() == case_data.uniform_bits(7, 4).tolist()


def test_generated_values() -> None:
    u = case_data.generate({"distribution": "uniform", "seed": 3, "low": -2.0, "high": 5.0}, (1000,), "float64")
    assert u.min() >= -2.0 and u.max() < 5.0 and abs(u.mean() - 1.5) < 0.3
    n = case_data.generate({"distribution": "normal", "seed": 4, "mean": 1.0, "std": 3.0}, (20001,), "float64")
    assert abs(n.mean() - 1.0) < 0.1 and abs(n.std() - 3.0) < 0.1
    odd = case_data.generate({"distribution": "normal", "seed": 4, "mean": 1.0, "std": 3.0}, (5,), "float64")
    assert odd.tolist() == n[:5].tolist()
    # The pairs are Box-Muller's (cos, sin) of the same radius.
    z = case_data.generate({"distribution": "normal", "seed": 9}, (2,), "float64")
    u = case_data.uniform_bits(9, 2)
    r = math.sqrt(-2.0 * math.log1p(-u[0]))
    assert z[0] == pytest.approx(r * math.cos(2 * math.pi * u[1]), rel=1e-15)
    assert z[1] == pytest.approx(r * math.sin(2 * math.pi * u[1]), rel=1e-15)
    f16 = case_data.generate({"distribution": "normal", "seed": 4, "mean": 1.0, "std": 3.0}, (4, 5), "float16")
    assert f16.dtype == np.float16 and f16.shape == (4, 5)
    assert f16.reshape(-1).tolist() == n[:20].astype(np.float16).tolist()
    assert case_data.generate({"distribution": "normal", "seed": 1}, (0, 3), "float32").shape == (0, 3)
    assert case_data.generate({"distribution": "normal", "seed": 1}, (), "float32").shape == ()


def test_random_values_default_and_generated() -> None:
    """bench's inputs: standard normal by default, as before; a bench.json `generate` draws its
    distribution rounded to the dtype, so integer indices span their range (not 68% zeros)."""
    shape = (4, 1000)
    default = case_data.random_values(shape, "float16", np.random.default_rng(5))
    want = np.random.default_rng(5).standard_normal(size=shape, dtype=np.float32).astype(np.float16)
    np.testing.assert_array_equal(default, want)
    assert np.mean(case_data.random_values(shape, "int64", np.random.default_rng(5)) == 0) > 0.6  # why it exists
    ids = case_data.random_values(shape, "int64", np.random.default_rng(5), {"distribution": "uniform", "low": 0,
                                                                            "high": 49407})  # fmt: skip
    assert ids.dtype == np.int64 and ids.shape == shape and ids.min() >= 0 and ids.max() <= 49407
    assert len(np.unique(ids)) > 3700 and ids.max() > 45000  # spread over the range (4,000 draws of 49,408)
    scaled = case_data.random_values((100_000,), "float32", np.random.default_rng(1), {"distribution": "normal",
                                                                                       "mean": 3.0, "std": 0.5})  # fmt: skip
    assert scaled.dtype == np.float32 and abs(scaled.mean() - 3.0) < 0.01 and abs(scaled.std() - 0.5) < 0.01


def test_cast_rules() -> None:
    values = np.array([1.5, 2.5, -0.5, 70000.0, -1e9, 3e9])
    assert case_data.cast(values, "int32").tolist() == [2, 2, 0, 70000, -1000000000, 2**31 - 1]
    assert case_data.cast(values, "uint8").tolist() == [2, 2, 0, 255, 0, 255]
    f16 = case_data.cast(np.array([65504.0, 65520.0, 131008.0, 1e-8]), "float16")
    assert f16.tolist() == [65504.0, math.inf, math.inf, 0.0]
    with pytest.raises(ValueError, match="NaN"):
        case_data.cast(np.array([math.nan]), "int32")


def _bfloat16_by_significand(x: float) -> float:
    """x rounded once to bfloat16's 8 significant bits, nearest even (normal range): the reference."""
    mantissa, exponent = math.frexp(x)
    return math.ldexp(float(np.rint(mantissa * 256.0)), exponent - 8)


def test_bfloat16_is_rounded_once_from_float64() -> None:
    """float64 to bfloat16 is one rounding to nearest even, as the generator's spec says. ml_dtypes
    before 0.7 (0.4.1 and 0.5.1 measured) converts through float32, rounding twice: 81 of 10M normal
    draws came out an ulp off, so test.json's generated bfloat16 inputs differed between machines
    and a stored output computed from them missed by up to 3.7 ulp on the GPU machine (run BE)."""
    ml_dtypes = pytest.importorskip("ml_dtypes")
    tiny = 2.0**-133  # bfloat16's smallest subnormal
    bf16_max = float(np.array([0x7F7F0000], np.uint32).view(np.float32)[0])
    cases = {
        1 + 2.0**-8 + 2.0**-30: 1 + 2.0**-7,  # just past a tie: up (through float32 the tie, then even: 1.0)
        -(1 + 2.0**-8 + 2.0**-30): -(1 + 2.0**-7),
        1 + 2.0**-8: 1.0,  # an exact tie: to even
        1 + 3 * 2.0**-8: 1 + 2.0**-6,
        2.5 * tiny + 2.0**-160: 3 * tiny,  # a subnormal just past a tie (through float32: 2 * tiny)
        bf16_max + 2.0**119 - 2.0**100: bf16_max,  # below the tie with infinity
        bf16_max + 2.0**119: math.inf,
        1e39: math.inf, -1e39: -math.inf, 0.0: 0.0, math.inf: math.inf,
    }
    got = case_data.cast(np.array(list(cases)), "bfloat16")
    assert got.dtype == np.dtype(ml_dtypes.bfloat16)
    assert got.astype(np.float64).tolist() == list(cases.values())
    assert math.copysign(1.0, float(case_data.cast(np.array([-0.0]), "bfloat16")[0])) == -1.0
    assert np.isnan(case_data.cast(np.array([math.nan]), "bfloat16").astype(np.float64)).all()
    draws = case_data.uniform_bits(3, 100_000) * 8 - 4  # every draw's rounding against the reference
    np.testing.assert_array_equal(case_data.cast(draws, "bfloat16").astype(np.float64),
                                  [_bfloat16_by_significand(float(x)) for x in draws])


def test_bool_is_the_integers_0_and_1() -> None:
    """Values for a bool input are rounded and clipped as integers of {0, 1}, and NaN is refused as
    for any integer type. They had been `!= 0`: 0.4 and "nan" were true, and a generated mask
    (uniform in [0, 1), or normal) was all true."""
    inline = case_data.inline_values([0.4, 0.6, -1, 2, True, False, 0.5, 1.5], "bool")
    assert inline.dtype == np.bool_ and inline.tolist() == [False, True, False, True, True, False, False, True]
    with pytest.raises(ValueError, match="NaN cannot be held by bool"):
        case_data.inline_values(["nan", 0], "bool")
    spec = {"distribution": "uniform", "seed": 1, "low": 0.0, "high": 1.0}
    mask = case_data.generate(spec, (10_000,), "bool")
    np.testing.assert_array_equal(mask, case_data.uniform_bits(1, 10_000) > 0.5)
    assert 0.45 < mask.mean() < 0.55


def test_a_bool_input_drawn_for_bench_and_run_is_a_fair_coin() -> None:
    """bench, tune, the peers and `run` draw a bool input half true by default (normal draws are
    never 0, so casting them made every mask all true)."""
    from webgpu_kernels.cli_run import random_inputs
    from webgpu_kernels.kernel_arguments import InputSpec

    mask = case_data.random_values((4, 1000), "bool", np.random.default_rng(5))
    np.testing.assert_array_equal(mask, np.random.default_rng(5).random(size=(4, 1000)) < 0.5)
    assert mask.dtype == np.bool_ and 0.45 < mask.mean() < 0.55
    drawn = random_inputs({"c": InputSpec("c", (4, 1000), "bool"), "x": InputSpec("x", (3,), "float16")}, seed=5)
    np.testing.assert_array_equal(drawn["c"], mask)
    assert drawn["x"].dtype == np.float16


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_encode_decode_round_trip(dtype: str) -> None:
    rng = np.random.default_rng(0)
    values = np.concatenate([rng.standard_normal(200) * 10.0**rng.integers(-6, 4, 200),
                             [math.nan, math.inf, -math.inf, 0.0, -0.0, 65504.0, 6e-8, 1.0, -3.0]])  # fmt: skip
    array = values.astype(dtype)
    encoded = case_data.encode_values(array)
    text = json.dumps(encoded, allow_nan=False)  # plain JSON
    back = case_data.cast(np.asarray(case_data.decode_values(json.loads(text)), dtype=np.float64), dtype)
    assert back.tobytes() == array.tobytes()  # bit for bit, signed zero and NaN included
    assert "-0.0" in text and '"nan"' in text and '"-inf"' in text


@settings(max_examples=150, deadline=None)
@given(st.sampled_from(["int8", "uint8", "int32", "uint32", "int64", "uint64"]),
       st.lists(st.integers(-300, 300) | st.integers(-(2**70), 2**70), max_size=6), st.booleans(), st.booleans())
def test_inline_integers_are_exact_and_clipped_or_refused(dtype, values, clip, nested) -> None:
    """JSON integers for an integer dtype: exact past 2^53 (int64's 2^63 - 1 stays itself), clipped
    to the type's range, or with clip=False refused naming the value and the range; one past 64
    bits (which NumPy cannot hold) takes the value-by-value path, with the same result."""
    low, high = int(np.iinfo(dtype).min), int(np.iinfo(dtype).max)
    given_values: list = [values, values] if nested else values  # a rectangular nesting keeps its shape
    outside = [v for v in values if not low <= v <= high]
    if not clip and outside:
        with pytest.raises(ValueError, match=rf"is outside {dtype}'s range \[{low}, {high}\]: why") as info:
            case_data.inline_values(given_values, dtype, clip=False, why="why")
        assert int(str(info.value).split(" ")[0]) in outside
        return
    array = case_data.inline_values(given_values, dtype, clip=clip)
    expected = [min(max(v, low), high) for v in values]
    assert array.dtype == np.dtype(dtype) and array.shape == ((2, len(values)) if nested else (len(values),))
    assert array.reshape(-1).tolist() == (expected * 2 if nested else expected)
    # and back: test.json's integers are written as JSON integers, exactly
    encoded = case_data.encode_values(array)
    assert encoded == array.reshape(-1).tolist() and all(type(v) is int for v in encoded)


# --- data files ---------------------------------------------------------------------------------------


def test_safetensors_files_written_by_the_safetensors_library_load_bit_for_bit() -> None:
    rng = np.random.default_rng(1)
    tensors = {"f32": rng.standard_normal((3, 4)).astype(np.float32), "f16": rng.standard_normal(5).astype(np.float16),
               "i8": np.arange(-4, 4, dtype=np.int8), "flag": np.array([True, False]),
               "scalar": np.array(2.5, dtype=np.float64)}  # fmt: skip
    data = safetensors.numpy.save(tensors)
    for name, array in tensors.items():
        loaded = case_data.load_array(data, "t.safetensors", name)
        assert loaded.dtype == array.dtype and loaded.shape == array.shape
        assert loaded.tobytes() == array.tobytes(), name
    loaded.flags.writeable = True  # a copy of its own, not a view of the library's buffer


def one_tensor_file(name: str, dtype: str, shape: list[int], data: bytes) -> bytes:
    """A safetensors file of one tensor of a dtype safetensors.numpy cannot write (its layout: an
    8-byte little-endian header length, the JSON header, the data)."""
    header = json.dumps({name: {"dtype": dtype, "shape": shape, "data_offsets": [0, len(data)]}}).encode()
    return struct.pack("<Q", len(header)) + header + data


def test_bfloat16_safetensors_need_ml_dtypes() -> None:
    ml_dtypes = pytest.importorskip("ml_dtypes")  # the test extra has it; the H200 machine may not
    values = np.array([1.0, -2.5, 3.140625], dtype=ml_dtypes.bfloat16)
    data = one_tensor_file("b", "BF16", [3], values.tobytes())
    loaded = case_data.load_array(data, "b.safetensors", None)
    assert case_data.dtype_name(loaded.dtype) == "bfloat16" and loaded.astype(np.float64).tolist() == [1.0, -2.5, 3.140625]


def test_bad_safetensors_files_say_what_is_wrong() -> None:
    good = safetensors.numpy.save({"x": np.zeros(4, np.float32)})
    with pytest.raises(ValueError, match="not a valid safetensors file"):
        case_data.load_array(good[:6], "x.safetensors", None)
    with pytest.raises(ValueError, match="not a valid safetensors file"):
        case_data.load_array(good[:-4], "x.safetensors", None)
    fp8 = one_tensor_file("q", "F8_E4M3", [2], b"\x01\x02")
    with pytest.raises(ValueError, match="unsupported safetensors dtype 'F8_E4M3'"):
        case_data.load_array(fp8, "q.safetensors", None)
    with pytest.raises(ValueError, match=r"the file holds \['a', 'b'\]: name one with 'tensor'"):
        case_data.load_array(safetensors.numpy.save({"a": np.zeros(1), "b": np.ones(1)}), "ab.safetensors", None)



@pytest.mark.parametrize("shape", [[0, 2**62], [2**40, 2**40, 0]])
def test_a_data_file_of_an_empty_shape_no_array_can_have_says_so(shape) -> None:
    """A zero dimension makes 0 bytes of data, so the file's own checks pass: a .safetensors tensor of
    [0, 2**62] reached the reshape, and NumPy's 'array is too big; `arr.size * arr.dtype.itemsize`
    is larger than the maximum possible size' was the case's error (red team)."""
    files = {"x.npy": npy_claiming(tuple(shape), payload=b"")}
    if shape[0] == 0:  # safetensors refuses the other itself ('overflow computing buffer size')
        files["x.safetensors"] = one_tensor_file("x", "F32", shape, b"")
    for name, data in files.items():
        with pytest.raises(ValueError, match=r"shape \[.*\] is one no array has \(its dimensions, zeros counted as 1"):
            case_data.load_array(data, name, None)

def test_npy_and_npz_files() -> None:
    x = np.arange(6, dtype=np.int32).reshape(2, 3)
    buffer = io.BytesIO()
    np.save(buffer, x)
    assert case_data.load_array(buffer.getvalue(), "X.NPY", None).tolist() == x.tolist()
    with pytest.raises(ValueError, match="'tensor' applies to .npz and .safetensors files only"):
        case_data.load_array(buffer.getvalue(), "x.npy", "x")
    with pytest.raises(ValueError, match="data files are .npy, .npz or .safetensors"):
        case_data.load_array(b"", "x.json", None)
    strings = io.BytesIO()
    np.save(strings, np.array(["a", "b"]))
    with pytest.raises(ValueError, match="not a numeric dtype"):
        case_data.load_array(strings.getvalue(), "s.npy", None)
    archive = io.BytesIO()
    np.savez(archive, a=x, b=x * 2)
    assert case_data.load_array(archive.getvalue(), "x.npz", "b").tolist() == (x * 2).tolist()
    with pytest.raises(ValueError, match=r"no member 'c' in the archive \(it holds \['a', 'b'\]\)"):
        case_data.load_array(archive.getvalue(), "x.npz", "c")



def test_a_container_of_many_names_is_quoted_by_a_few() -> None:
    """A missing member's error listed every name the archive holds: 20,000 members of 200-character
    names (an 8 MiB .npz) made a 4 MB message, for `test` to print and JUnit to store.
    It names 12, each cut, and the count."""
    archive = io.BytesIO()
    with zipfile.ZipFile(archive, "w") as zf:
        for i in range(2000):
            zf.writestr(f"{'m' * 300}{i:04}.npy", b"")
    for tensor, start in (("A", "no member 'A' in the archive (it holds 2000 members, among them ['mmm"),
                          (None, "the archive holds 2000 members, among them ['mmm")):
        with pytest.raises(ValueError) as info:
            case_data.load_array(archive.getvalue(), "x.npz", tensor)
        assert str(info.value).startswith(start), str(info.value)[:200]
        assert len(str(info.value)) < 1500 and str(info.value).count("'m") == 12, str(info.value)

def npy_claiming(shape: tuple[int, ...], dtype: str = "<f4", payload: bytes = b"\0" * 64) -> bytes:
    """A .npy file whose header claims ``shape`` over a few bytes of data."""
    buffer = io.BytesIO()
    np.lib.format.write_array_header_1_0(buffer, {"descr": dtype, "fortran_order": False, "shape": shape})
    return buffer.getvalue() + payload


def test_a_header_claiming_more_than_the_file_holds_is_refused_before_any_allocation() -> None:
    """NumPy allocates what a .npy header claims before reading: a 200-byte file claiming 10^12
    elements asked for 3.6 TiB (MemoryError), and a member of a small .npz the same."""
    with pytest.raises(ValueError, match=f"holds 1000000000000 elements, more than {case_data.MAX_CASE_ELEMENTS}"):
        case_data.load_array(npy_claiming((10**12,)), "huge.npy", None)
    with pytest.raises(ValueError, match="the header claims 1000 float32 elements, more than the file's"):
        case_data.load_array(npy_claiming((1000,)), "short.npy", None)
    assert case_data.load_array(npy_claiming((16,)), "exact.npy", None).tolist() == [0.0] * 16
    archive = io.BytesIO()
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("x.npy", npy_claiming((10**12,)))
    with pytest.raises(ValueError, match="more than"):
        case_data.load_array(archive.getvalue(), "bomb.npz", None)
    with pytest.raises(ValueError, match="not a valid .npz file"):
        case_data.load_array(b"PK\x03\x04 not a zip", "x.npz", None)


@pytest.mark.parametrize("damage", ["method", "encrypted", "deflate"])
def test_an_npz_member_that_cannot_be_read_is_a_value_error(damage) -> None:
    """zipfile raises NotImplementedError (a compression method it lacks), RuntimeError (an
    encrypted member) and zlib.error (a corrupt stream), none of them BadZipFile: a traceback in
    `webgpu-kernels test` where the package's data file is at fault."""
    buffer = io.BytesIO()
    np.save(buffer, np.arange(4, dtype=np.float32))
    archive = io.BytesIO()
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("x.npy", buffer.getvalue())
    data = bytearray(archive.getvalue())
    central = data.rindex(b"PK\x01\x02")
    if damage == "method":  # method 99 in the local header and the central directory
        struct.pack_into("<H", data, 8, 99)
        struct.pack_into("<H", data, central + 10, 99)
    elif damage == "encrypted":  # flag bit 0 in both headers
        struct.pack_into("<H", data, 6, 1)
        struct.pack_into("<H", data, central + 8, 1)
    else:  # the deflate stream's first byte: an invalid block type
        data[30 + len("x.npy")] = 0xFF
    with pytest.raises(ValueError, match=r"\.npz"):
        case_data.load_array(bytes(data), "x.npz", None)


def test_cast_to_64_bit_integers_clips_instead_of_wrapping() -> None:
    """float64 has no 2**63 - 1: the clip bound rounded up to 2**63, which the cast wrapped, so
    1e19 became int64's minimum and 1e20 became uint64's 0 (an inline expected value too)."""
    values = np.array([1e19, 2.0**63, -1e19, 2.0**63 - 1024, math.inf, -math.inf, 2.5])
    assert case_data.cast(values, "int64").tolist() == [2**63 - 1, 2**63 - 1, -(2**63), 2**63 - 1024, 2**63 - 1,
                                                        -(2**63), 2]  # fmt: skip
    assert case_data.cast(np.array([1e20, 2.0**64, -5.0, 2.0**64 - 2048]), "uint64").tolist() == [
        2**64 - 1, 2**64 - 1, 0, 2**64 - 2048]  # fmt: skip
    assert case_data.cast(np.array(1e30), "int64").shape == ()


def test_a_malformed_npy_header_is_a_value_error_naming_the_file_kind() -> None:
    """A header NumPy's Python-2 fallback reads raised tokenize.TokenError, which no caller caught:
    `webgpu-kernels test` stopped with a traceback, its other packages untested and its JUnit
    report unwritten."""
    buffer = io.BytesIO()
    np.save(buffer, np.zeros((2, 64), np.float32))
    broken = buffer.getvalue().replace(b"'shape': (2, 64), }", b"'shape': (2, 64 , }")
    assert broken != buffer.getvalue()
    with pytest.raises(ValueError, match=r"^not a valid \.npy file \("):
        case_data.load_array(broken, "y.npy", None)
    archive = io.BytesIO()
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("y.npy", broken)
    with pytest.raises(ValueError, match=r"not a valid \.npy file"):
        case_data.load_array(archive.getvalue(), "y.npz", "y")


# --- properties of with_arrays / array_key (hypothesis) ---------------------------------------------

try:
    import ml_dtypes as _ml_dtypes
except ImportError:  # pragma: no cover - the test extra has it
    _ml_dtypes = None

_DTYPES = [d for d in case_data._SAFETENSORS_DTYPES.values() if d != "bfloat16" or _ml_dtypes is not None]


@st.composite
def data_arrays(draw: st.DrawFn) -> np.ndarray:
    """An array of a dtype safetensors holds, any shape of up to 3 axes (0-d and empty ones too),
    big-endian at times, every bit pattern (NaN payloads, -0.0) possible."""
    dtype = case_data.numpy_dtype(draw(st.sampled_from(_DTYPES)))
    shape = draw(hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=3))
    raw = draw(st.binary(min_size=math.prod(shape) * dtype.itemsize, max_size=math.prod(shape) * dtype.itemsize))
    if dtype.kind == "b":
        raw = bytes(b & 1 for b in raw)
    array = np.frombuffer(raw, dtype=dtype).reshape(shape).copy()
    if dtype.itemsize > 1 and dtype.kind in "fiu" and draw(st.booleans()):
        array = array.astype(dtype.newbyteorder(">"))
    return array


def _le_bytes(a: np.ndarray) -> bytes:
    return a.astype(a.dtype.newbyteorder("<")).tobytes() if a.dtype.kind in "fiu" else a.tobytes()


def _same_array(got: np.ndarray, want: np.ndarray) -> bool:
    """Equal dtype (byte order aside), shape and bits."""
    return (case_data.dtype_name(got.dtype) == case_data.dtype_name(want.dtype) and got.shape == want.shape
            and _le_bytes(got) == _le_bytes(want))  # fmt: skip


def _as_npy_expects(new: np.ndarray) -> np.ndarray:
    """What .npy and .npz give back for ``new``: bfloat16 as float32 (exact)."""
    return new.astype(np.float32) if case_data.dtype_name(new.dtype) == "bfloat16" else new


def _npy(array: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, array)
    return buffer.getvalue()


_member_names = st.lists(st.from_regex(r"[A-Za-z_][A-Za-z0-9_.\-]{0,8}", fullmatch=True), min_size=1, max_size=4,
                         unique_by=lambda n: n.removesuffix(".npy"))  # fmt: skip


def _safetensors_file(tensors: dict[str, np.ndarray], metadata: dict[str, str] | None, order: list[str]) -> bytes:
    """A .safetensors file written by hand (the library's numpy writer has no bfloat16): the tensors'
    data in ``order``, the header in dict order."""
    header: dict[str, object] = {} if metadata is None else {"__metadata__": metadata}
    blobs, offset = [], 0
    offsets = {}
    for name in order:
        blob = _le_bytes(tensors[name])
        offsets[name] = [offset, offset + len(blob)]
        offset += len(blob)
        blobs.append(blob)
    for name, array in tensors.items():
        code = case_data._SAFETENSORS_CODES[case_data.dtype_name(array.dtype)]
        header[name] = {"dtype": code, "shape": list(array.shape), "data_offsets": offsets[name]}
    text = json.dumps(header).encode()
    return struct.pack("<Q", len(text)) + text + b"".join(blobs)


@st.composite
def data_files(draw: st.DrawFn) -> tuple[str, bytes, dict[str | None, np.ndarray]]:
    """(name, bytes, the arrays as load_array gives them by key) of a .npy, .npz or .safetensors file."""
    kind = draw(st.sampled_from(["npy", "npz", "safetensors"]))
    if kind == "npy":
        array = _as_npy_expects(draw(data_arrays()))
        return "d.npy", _npy(array), {None: array}
    names = draw(_member_names)
    arrays = {name: draw(data_arrays()) for name in names}
    if kind == "npz":
        buffer = io.BytesIO()
        with zipfile.ZipFile(buffer, "w") as archive:
            for name, array in arrays.items():
                method = draw(st.sampled_from([zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED]))
                archive.writestr(zipfile.ZipInfo(name, (2020, 1, 2, 3, 4, 6)), _npy(_as_npy_expects(array)),
                                 compress_type=method)  # fmt: skip
        return "d.npz", buffer.getvalue(), {n.removesuffix(".npy"): _as_npy_expects(a) for n, a in arrays.items()}
    metadata = draw(st.none() | st.dictionaries(st.text(max_size=5), st.text(max_size=5), max_size=3))
    order = draw(st.permutations(names))
    return "d.safetensors", _safetensors_file(arrays, metadata, order), dict(arrays)


@settings(max_examples=150, deadline=None)
@given(data_files(), st.data())
def test_with_arrays_replaces_one_array_and_keeps_the_others_bit_for_bit(file, data) -> None:
    name, content, arrays = file
    key = data.draw(st.sampled_from(sorted(arrays, key=str)))
    assert case_data.array_key(content, name, key) == key
    new = data.draw(data_arrays())
    out = case_data.with_arrays(content, name, {key: new})
    want = new if name.endswith(".safetensors") else _as_npy_expects(new)
    assert _same_array(case_data.load_array(out, name, key), want)
    for other, array in arrays.items():
        if other != key:
            assert _same_array(case_data.load_array(out, name, other), array), other
    if name.endswith(".safetensors"):
        import safetensors

        assert sorted(k for k, _ in safetensors.deserialize(out)) == sorted(arrays)  # the library reads it
        old_header, new_header = case_data._safetensors_header(content)[0], case_data._safetensors_header(out)[0]
        assert old_header.get("__metadata__", "absent") == new_header.get("__metadata__", "absent")
    elif name.endswith(".npz"):
        with np.load(io.BytesIO(out), allow_pickle=False) as npz:  # NumPy reads it
            assert sorted(npz.files) == sorted(arrays)
            for k in arrays:
                assert _same_array(npz[k], want if k == key else arrays[k])
        with zipfile.ZipFile(io.BytesIO(content)) as old, zipfile.ZipFile(io.BytesIO(out)) as written:
            assert [i.filename for i in old.infolist()] == [i.filename for i in written.infolist()]
            for before, after in zip(old.infolist(), written.infolist()):
                assert before.compress_type == after.compress_type
                if before.filename.removesuffix(".npy") != key:
                    assert old.read(before) == written.read(after)
    else:
        assert _same_array(np.load(io.BytesIO(out), allow_pickle=False), want)


def _damaged(content: bytes, edits: list[tuple[int, int]], cut: int) -> bytes:
    data = bytearray(content[: max(0, len(content) - cut)])
    for at, value in edits:
        if data:
            data[at % len(data)] = value
    return bytes(data)


def _npz_of_two() -> tuple[str, bytes, dict[str | None, np.ndarray]]:
    arrays = {"A": np.zeros((), np.float64), "B": np.ones(3, np.int8)}
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for key, array in arrays.items():
            archive.writestr(f"{key}.npy", _npy(array))
    return "d.npz", buffer.getvalue(), dict(arrays)


@settings(max_examples=200, deadline=None)
@given(data_files(), st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 255)), max_size=4),
       st.integers(0, 40), st.integers(0, 3))  # fmt: skip
# array_key read only the zip's directory; with_arrays copies the other members and raised
# zipfile.BadZipFile (member A's local header damaged, B written): `expect` stopped with a traceback.
@example(file=_npz_of_two(), edits=[(0, 0)], cut=0, pick=1)
def test_a_malformed_data_file_is_a_value_error(file, edits, cut, pick) -> None:
    """array_key refuses, as a ValueError, a damaged file with_arrays could not write again."""
    name, content, arrays = file
    damaged = _damaged(content, edits, cut)
    key = sorted(arrays, key=str)[pick % len(arrays)]
    try:
        assert case_data.array_key(damaged, name, key) == key
    except ValueError:
        return
    out = case_data.with_arrays(damaged, name, {key: np.zeros(2, np.float32)})  # as `expect` writes it
    assert case_data.load_array(out, name, key).tolist() == [0.0, 0.0]


@settings(max_examples=100, deadline=None)
@given(st.sampled_from(["npy", "npz", "safetensors"]), _member_names, st.data())
def test_with_arrays_creates_a_new_file_holding_just_its_arrays(kind, names, data) -> None:
    """``expect`` creating a data file an expected entry names: array_key(None, ...) picks each
    entry's key, with_arrays(None, ...) writes a file of those arrays, which the readers take."""
    name = f"d.{kind}"
    tensors: list[str | None] = [None] if kind == "npy" else [*names]
    if kind == "npz" and len(names) == 1 and data.draw(st.booleans()):
        tensors = [None]  # an entry without tensor: the archive's one member, NumPy's key for it
    keys = [case_data.array_key(None, name, tensor) for tensor in tensors]
    assert keys == ([None] if kind == "npy" else ["arr_0"] if tensors == [None] else tensors)
    arrays = {key: data.draw(data_arrays()) for key in keys}
    out = case_data.with_arrays(None, name, arrays)
    for tensor, key in zip(tensors, keys):
        want = arrays[key] if kind == "safetensors" else _as_npy_expects(arrays[key])
        assert _same_array(case_data.load_array(out, name, tensor), want)
    if kind == "npz":
        with np.load(io.BytesIO(out), allow_pickle=False) as npz:  # NumPy reads it
            assert sorted(npz.files) == sorted(map(str, keys))
    elif kind == "safetensors":
        import safetensors

        assert sorted(k for k, _ in safetensors.deserialize(out)) == sorted(map(str, keys))  # the library reads it


@pytest.mark.parametrize(("name", "tensor", "fragment"), [
    ("d.safetensors", None, "a new .safetensors file needs 'tensor'"),
    ("d.safetensors", "__metadata__", "'__metadata__' is the format's own key"),
])  # fmt: skip
def test_a_new_file_s_key_that_cannot_be_written_is_a_value_error(name, tensor, fragment) -> None:
    with pytest.raises(ValueError, match=re.escape(fragment)):
        case_data.array_key(None, name, tensor)
