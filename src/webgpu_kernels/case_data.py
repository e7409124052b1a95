"""Tensor data in case files: dtype names, the seeded generator, inline JSON values, and data
files (``.npy``, ``.npz``, ``.safetensors`` through the safetensors library: read, and written again
with new arrays for ``expect``). No package or schema
knowledge: casefile.py gives these functions their context.

The generator (so that any implementation, in any language, draws the same inputs):

* uniform bits: element ``i`` (0-based, C order) of an input with seed ``s`` is the ``i + 1``-th
  output of SplitMix64 started at ``s``: ``z = s + (i + 1) * 0x9E3779B97F4A7C15 (mod 2^64)``,
  ``z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9``, ``z = (z ^ (z >> 27)) * 0x94D049BB133111EB``,
  ``z ^= z >> 31``; ``u = (z >> 11) * 2^-53`` in ``[0, 1)``.
* ``uniform``: ``low + (high - low) * u_i`` (defaults 0 and 1).
* ``normal``: Box-Muller on pairs: with ``u = u_{2k}``, ``v = u_{2k+1}``,
  ``r = sqrt(-2 ln(1 - u))``; element ``2k`` is ``r cos(2 pi v)``, element ``2k + 1`` is
  ``r sin(2 pi v)``; then ``mean + std * z`` (defaults 0 and 1).
* all in float64, then rounded to the input's dtype (round to nearest even; integers: rounded
  to nearest and clipped to the type's range), then ``special`` values written at their flat
  indices.
"""

from __future__ import annotations

import contextlib
import io
import json
import lzma
import math
import zipfile
import zlib
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np

from .errors import PackageError, short_repr, shorten

SPECIAL_STRINGS = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}
#: Largest tensor a case may build from inline values, a generator or a data file (elements).
MAX_CASE_ELEMENTS = 1 << 24
#: Most elements one test.json case may build in all, its inputs and expected outputs together: the
#: tensor bound alone let one case of 12 generated inputs of 2^24 elements take 2.8 GB. The largest
#: case in this repository's test.json files holds 2.4 million (a matrix product's, in tests/packages).
MAX_CASE_TOTAL_ELEMENTS = 1 << 26

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)


# --- dtypes ---------------------------------------------------------------------------------------


def numpy_dtype(name: str) -> np.dtype:
    if name == "bfloat16":
        try:
            import ml_dtypes
        except ImportError:
            raise PackageError("bfloat16 data needs the ml_dtypes package") from None
        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(name)


def dtype_name(dtype: np.dtype) -> str:
    return "bfloat16" if dtype.name == "bfloat16" else np.dtype(dtype).name


def cast(values: np.ndarray, dtype: str) -> np.ndarray:
    """float64 values to ``dtype``: floats rounded to nearest even, integers rounded and clipped,
    bool as the integers 0 and 1 (so a uniform draw in [0, 1) is half true, not all true)."""
    target = numpy_dtype(dtype)
    if dtype == "bfloat16":
        return _to_bfloat16(values, target)
    if target.kind == "f":
        with np.errstate(over="ignore", invalid="ignore"):
            return values.astype(target)
    if np.isnan(values).any():
        raise ValueError(f"NaN cannot be held by {dtype}")
    if target.kind == "b":
        return np.rint(values) >= 1
    info = np.iinfo(target)
    rounded = np.rint(values)
    with np.errstate(invalid="ignore"):
        out = np.asarray(np.clip(rounded, info.min, info.max).astype(target))
    # float64 has no 2**63 - 1 (nor 2**64 - 1): the clip bound rounds up to 2**63, which the cast
    # wraps to the minimum, so values at or past a bound get the bound exactly.
    out[rounded >= float(info.max)] = info.max
    out[rounded <= float(info.min)] = info.min
    return out


def _to_bfloat16(values: np.ndarray, target: np.dtype) -> np.ndarray:
    """float64 to bfloat16 rounded once, to nearest even. ml_dtypes before 0.7 converts float64
    through float32, rounding twice (81 of 10M normal draws an ulp off), so generated inputs would
    differ between machines. Rounding to float32 "to odd" first (truncate, then set the last bit
    where bits were lost) keeps the second rounding exact: float32 carries 16 bits more."""
    values = np.asarray(values, dtype=np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        near = values.astype(np.float32)
        truncated = np.where(np.abs(near) > np.abs(values), np.nextafter(near, np.float32(0)), near)
        odd = truncated.view(np.uint32) | (truncated != values).astype(np.uint32)  # NaN stays NaN
        return odd.view(np.float32).astype(target)


def random_values(shape: tuple[int, ...], dtype: str, rng: np.random.Generator,
                  generate: Mapping[str, Any] | None = None) -> np.ndarray:  # fmt: skip
    """Random inputs for ``bench``, ``tune`` and the peers, from ``rng`` (their ``--seed``).

    Standard normal by default (never zeros: zero pages read faster on some GPUs). ``generate``, a
    bench.json input's (test.json's object without its seed), draws its distribution instead, in
    float64 and rounded to ``dtype`` as test.json's generated values are: integer inputs such as
    a gather's indices need their range (the default gave them about 68% zeros). A bool input is a
    fair coin by default: normal draws are never zero, so they would all be true."""
    if generate is None:
        if numpy_dtype(dtype).kind == "b":
            return rng.random(size=shape) < 0.5
        return rng.standard_normal(size=shape, dtype=np.float32).astype(numpy_dtype(dtype), copy=False)
    return _distributed(generate, shape, dtype, rng.random, rng.standard_normal)


def _distributed(spec: Mapping[str, Any], shape: tuple[int, ...], dtype: str, uniform: Any, normal: Any) -> np.ndarray:
    """``spec``'s distribution over ``shape``, rounded to ``dtype``, from ``uniform(n)`` (n draws in
    [0, 1)) or ``normal(n)`` (n standard normal draws): test.json's and bench.json's generators."""
    count = math.prod(shape)
    if spec["distribution"] == "uniform":
        low, high = float(spec.get("low", 0.0)), float(spec.get("high", 1.0))
        values = low + (high - low) * uniform(count)
    else:
        values = float(spec.get("mean", 0.0)) + float(spec.get("std", 1.0)) * normal(count)
    return cast(values.reshape(shape), dtype)


# --- the generator --------------------------------------------------------------------------------


def uniform_bits(seed: int, count: int) -> np.ndarray:
    """``count`` uniform float64 values in [0, 1) from SplitMix64 seeded with ``seed``."""
    i = np.arange(1, count + 1, dtype=np.uint64)
    z = np.uint64(seed) + i * _GOLDEN
    z = (z ^ (z >> np.uint64(30))) * _MIX1
    z = (z ^ (z >> np.uint64(27))) * _MIX2
    z = z ^ (z >> np.uint64(31))
    return (z >> np.uint64(11)).astype(np.float64) * (2.0**-53)


def generate(spec: Mapping[str, Any], shape: tuple[int, ...], dtype: str) -> np.ndarray:
    """Draw an input as the module docstring specifies."""
    seed = int(spec["seed"])
    return _distributed(spec, shape, dtype, lambda count: uniform_bits(seed, count),
                        lambda count: _box_muller(seed, count))  # fmt: skip


def _box_muller(seed: int, count: int) -> np.ndarray:
    """``count`` standard normal values from pairs of ``uniform_bits(seed, ...)`` (module docstring)."""
    pairs = (count + 1) // 2
    u = uniform_bits(seed, 2 * pairs)
    r = np.sqrt(-2.0 * np.log1p(-u[0::2]))
    angle = 2.0 * np.pi * u[1::2]
    z = np.empty(2 * pairs, dtype=np.float64)
    z[0::2] = r * np.cos(angle)
    z[1::2] = r * np.sin(angle)
    return z[:count]


def decode_values(values: Any) -> Any:
    """JSON values with "nan"/"inf"/"-inf" strings turned into floats (nested lists kept)."""
    if isinstance(values, list):
        return [decode_values(v) for v in values]
    if isinstance(values, str):
        return SPECIAL_STRINGS[values]
    if isinstance(values, bool):
        return float(values)
    return float(values)


def inline_values(values: Any, dtype: str, *, clip: bool = True,
                  why: str = "an expected value must be one the output can hold") -> np.ndarray:
    """test.json's inline ``values`` (nested lists kept) as an array of ``dtype``. Float and boolean
    dtypes go through float64 (:func:`cast`); integer dtypes are converted value by value, so a
    JSON integer stays exact past 2^53 (float64 would turn 2^63 - 1 into 2^63) and is clipped to the
    type's range (``clip``; otherwise one outside it is a ValueError, its message ending in ``why``);
    other numbers go through :func:`cast` (rounded to nearest even, clipped)."""
    target = numpy_dtype(dtype)
    if target.kind not in "iu":
        return cast(np.asarray(decode_values(values), dtype=np.float64), dtype)
    low, high = int(np.iinfo(target).min), int(np.iinfo(target).max)

    def outside(value: float) -> ValueError:
        # An expected value: clipped, it had let a saturating kernel pass where the case wrote the
        # true (wider or wrapped) result.
        return ValueError(f"{value} is outside {dtype}'s range [{low}, {high}]: {why}")

    try:  # all JSON integers within int64 or uint64 (the usual case): NumPy converts them exactly, 3x faster
        whole = np.array(values)
    except (ValueError, OverflowError):  # ragged, or an integer past 64 bits
        whole = None
    if whole is not None and whole.dtype.kind in "iu":
        if not clip and whole.size and (int(whole.min()) < low or int(whole.max()) > high):
            raise outside(int(whole.min()) if int(whole.min()) < low else int(whole.max()))
        return np.clip(whole, max(low, int(np.iinfo(whole.dtype).min)), min(high, int(np.iinfo(whole.dtype).max))
                       ).astype(target)  # fmt: skip

    def exact(value: Any) -> Any:
        if isinstance(value, list):
            return [exact(v) for v in value]
        if isinstance(value, int):  # bool too
            if not clip and not low <= int(value) <= high:
                raise outside(int(value))
            return min(max(int(value), low), high)
        f = SPECIAL_STRINGS[value] if isinstance(value, str) else float(value)
        if not clip and not math.isnan(f) and not low - 0.5 <= f < high + 0.5:  # 300.0 as 300 (json.dumps writes so)
            raise outside(f)
        return int(cast(np.array([f]), dtype)[0])  # a float: cast's rounding, clipping and NaN refusal

    return np.array(exact(values), dtype=target)


def encode_values(array: np.ndarray) -> list[Any]:
    """A flat JSON list of ``array``'s values (C order): the shortest decimal that gives back the
    same value in the array's dtype, and "nan"/"inf"/"-inf" strings for non-finite ones."""
    flat = np.asarray(array).reshape(-1)
    out: list[Any] = []
    for v in flat:
        f = float(v)
        if math.isnan(f):
            out.append("nan")
        elif math.isinf(f):
            out.append("inf" if f > 0 else "-inf")
        elif flat.dtype.kind in "iub":
            out.append(int(v))
        else:
            try:
                text = np.format_float_scientific(v, unique=True, trim="-") if f != 0 else repr(f)
            except TypeError:  # a float type NumPy cannot print (bfloat16): float64's shortest repr
                text = repr(f)
            number = float(text)
            out.append(int(number) if number.is_integer() and abs(number) < 2**53 and f != 0 else number)
    return out


# --- data files -----------------------------------------------------------------------------------

_SAFETENSORS_DTYPES = {
    "F64": "float64", "F32": "float32", "F16": "float16", "BF16": "bfloat16", "I64": "int64", "I32": "int32",
    "I16": "int16", "I8": "int8", "U64": "uint64", "U32": "uint32", "U16": "uint16", "U8": "uint8", "BOOL": "bool",
}  # fmt: skip


def load_array(data: bytes, name: str, tensor: str | None) -> np.ndarray:
    """An array from the bytes of a ``.npy``, ``.npz`` (``tensor`` names the member) or ``.safetensors`` file,
    of at most MAX_CASE_ELEMENTS elements."""
    lower = name.lower()
    if lower.endswith(".npy"):
        if tensor is not None:
            raise ValueError("'tensor' applies to .npz and .safetensors files only")
        array = _npy_array(data)
    elif lower.endswith(".npz"):
        array = _npz_member(data, tensor)
    elif lower.endswith(".safetensors"):
        array = _safetensors_tensor(data, tensor)
    else:
        raise ValueError("data files are .npy, .npz or .safetensors")
    if array.dtype.kind not in "fiub" and dtype_name(array.dtype) != "bfloat16":  # ml_dtypes' kind is "V"
        raise ValueError(f"dtype {array.dtype} is not a numeric dtype")
    return array


def _npy_array(data: bytes) -> np.ndarray:
    """A .npy file's array, its header checked first: NumPy allocates what the header claims before
    it reads, so a 200-byte file claiming 10^12 elements would ask for terabytes."""
    stream = io.BytesIO(data)
    try:
        version = np.lib.format.read_magic(stream)
        read_header = {(1, 0): np.lib.format.read_array_header_1_0, (2, 0): np.lib.format.read_array_header_2_0}
        if version not in read_header:
            raise ValueError(f".npy format version {version[0]}.{version[1]} is not supported (1.0 and 2.0 are)")
        shape, _, dtype = read_header[version](stream)
    except Exception as exc:  # noqa: BLE001 - NumPy's header parser also raises tokenize.TokenError, SyntaxError
        raise ValueError(f"not a valid .npy file ({str(exc) or type(exc).__name__})") from None
    count = math.prod(shape)
    if count > MAX_CASE_ELEMENTS:
        raise ValueError(f"the file holds {count} elements, more than {MAX_CASE_ELEMENTS}")
    _check_shape(shape, dtype)
    if dtype.hasobject or count * dtype.itemsize > len(data) - stream.tell():
        raise ValueError(f"the header claims {count} {dtype} elements, more than the file's {len(data)} bytes hold"
                         if not dtype.hasobject else "object arrays are not data")  # fmt: skip
    try:
        return np.load(io.BytesIO(data), allow_pickle=False)
    except Exception as exc:  # noqa: BLE001 - a file the header check passed may still be malformed
        raise ValueError(f"not a valid .npy file ({str(exc) or type(exc).__name__})") from None


def _check_shape(shape: Any, dtype: np.dtype) -> None:
    """Refuse a shape NumPy cannot make an array of: a zero dimension makes no data to check against
    the file's size, and [0, 2**62]'s reshape had failed with NumPy's own 'array is too big'."""
    if math.prod(max(d, 1) for d in shape) * max(dtype.itemsize, 1) > np.iinfo(np.intp).max:
        raise ValueError(f"its shape {short_repr(list(shape))} is one no array has (its dimensions, zeros "
                         "counted as 1, multiply past NumPy's largest array)")  # fmt: skip


def _npz_member(data: bytes, tensor: str | None) -> np.ndarray:
    """A member of a .npz archive, read only if its unpacked size fits (a small archive can unpack to
    gigabytes), then checked as a .npy file."""
    with _npz_archive(data) as archive:
        members = _npz_members(archive)
        content = _npz_read(archive, members[_pick(members, tensor, "the archive", "member")])
    return _npy_array(content)


def _npz_archive(data: bytes) -> zipfile.ZipFile:
    with _npz_errors():
        return zipfile.ZipFile(io.BytesIO(data))


@contextlib.contextmanager
def _npz_errors() -> Iterator[None]:
    try:
        yield
    except (zipfile.BadZipFile, zlib.error, lzma.LZMAError, EOFError, OSError) as exc:
        raise ValueError(f"not a valid .npz file ({exc})") from None
    except (NotImplementedError, RuntimeError) as exc:  # another compression method; an encrypted member
        raise ValueError(f"a .npz member that cannot be read: {exc} (NumPy writes them stored or deflated)") from None


def _npz_members(archive: zipfile.ZipFile) -> dict[str, zipfile.ZipInfo]:
    """The archive's members by NumPy's key (the name without ``.npy``)."""
    members: dict[str, zipfile.ZipInfo] = {}
    for entry in archive.infolist():
        key = entry.filename.removesuffix(".npy")
        if key in members:  # NumPy's key for both: it reads whichever comes last, silently
            raise ValueError(f"members {members[key].filename!r} and {entry.filename!r} are both the array "
                             f"{key!r} (NumPy drops the .npy suffix): rename or remove one")  # fmt: skip
        members[key] = entry
    return members


def _npz_read(archive: zipfile.ZipFile, info: zipfile.ZipInfo) -> bytes:
    """A member's bytes, read only if its unpacked size fits."""
    limit = MAX_CASE_ELEMENTS * 16 + 65536  # the largest case tensor (complex128) and a header
    if info.file_size > limit:
        raise ValueError(f"member {info.filename!r} unpacks to {info.file_size} bytes, more than {limit}")
    with _npz_errors(), archive.open(info) as member:
        content = member.read(limit + 1)  # the stored size may lie; the read stops anyway
    if len(content) > limit:
        raise ValueError(f"member {info.filename!r} unpacks to more than {limit} bytes")
    return content


def _pick(names: Any, tensor: str | None, container: str, item: str) -> str:
    """The name ``tensor`` asks for among ``names``, or the only one when it asks for none."""
    names = sorted(names)
    if tensor is None:
        if len(names) != 1:
            raise ValueError(f"{container} holds {_some_names(names, item)}: name one with 'tensor'")
        return names[0]
    if tensor not in names:
        raise ValueError(f"no {item} {tensor!r} in {container} (it holds {_some_names(names, item)})")
    return tensor


def _some_names(names: list[str], item: str) -> str:
    """At most 12 of ``names``, each cut: an 8 MiB archive of 20,000 long member names had made a
    4 MB message."""
    shown = "[" + ", ".join(repr(shorten(name, 60)) for name in names[:12])
    return shown + "]" if len(names) <= 12 else f"{len(names)} {item}s, among them {shown}, ...]"


def _safetensors_entries(data: bytes) -> dict[str, Any]:
    import safetensors  # parses and checks the header and offsets; imported only when a case uses it

    try:
        return dict(safetensors.deserialize(data))
    except safetensors.SafetensorError as exc:
        raise ValueError(f"not a valid safetensors file ({exc})") from None


def _safetensors_tensor(data: bytes, tensor: str | None) -> np.ndarray:
    entries = _safetensors_entries(data)
    entry = entries[_pick(entries, tensor, "the file", "tensor")]
    dtype = _SAFETENSORS_DTYPES.get(entry["dtype"])
    if dtype is None:
        raise ValueError(f"unsupported safetensors dtype {entry['dtype']!r} (supported: {', '.join(_SAFETENSORS_DTYPES)})")
    np_dtype = numpy_dtype(dtype)
    _check_shape(entry["shape"], np_dtype)
    # safetensors stores little-endian; the copy detaches the array from the library's buffer.
    return np.frombuffer(entry["data"], dtype=np_dtype.newbyteorder("<")).reshape(entry["shape"]).astype(np_dtype)


#: The key of the one array of a new .npz whose entry names no ``tensor``: NumPy's name for the
#: array ``np.savez(file, array)`` is given, which :func:`load_array` reads as the archive's only member.
NPZ_DEFAULT_KEY = "arr_0"


def array_key(data: bytes | None, name: str, tensor: str | None) -> str | None:
    """The key of the array ``tensor`` names in data file ``name`` (None for a .npy file's one), as
    :func:`load_array` picks it, of a file :func:`with_arrays` can write again (every member of a
    .npz readable). ``data`` None: a file not yet written, which :func:`with_arrays` creates
    (a .npz without ``tensor`` gets NPZ_DEFAULT_KEY; a .safetensors one needs ``tensor``). Raises ValueError."""
    lower = name.lower()
    if lower.endswith(".npy"):
        if tensor is not None:
            raise ValueError("'tensor' applies to .npz and .safetensors files only")
        return None
    if lower.endswith(".npz"):
        if data is None:
            return NPZ_DEFAULT_KEY if tensor is None else tensor
        with _npz_archive(data) as archive:
            members = _npz_members(archive)
            key = _pick(members, tensor, "the archive", "member")
            for info in members.values():  # with_arrays copies them all: one it cannot read is refused here
                _npz_read(archive, info)
        return key
    if lower.endswith(".safetensors"):
        if data is None:
            if tensor is None or tensor == "__metadata__":  # the format has no default name; that one is its header's
                raise ValueError("a new .safetensors file needs 'tensor', the name to store the array under"
                                 + (" ('__metadata__' is the format's own key)" if tensor else ""))  # fmt: skip
            return tensor
        return _pick(_safetensors_entries(data), tensor, "the file", "tensor")  # checked by the library
    raise ValueError("data files are .npy, .npz or .safetensors")


def with_arrays(data: bytes | None, name: str, arrays: Mapping[str | None, np.ndarray]) -> bytes:
    """Data file ``name``'s bytes ``data`` with ``arrays`` (by :func:`array_key`'s key) in place of
    its old ones; its other arrays kept byte for byte, as stored (compressed or not), and a
    .safetensors file's ``__metadata__`` too. A key the file lacks is added after its arrays
    (``data`` None: a new file holding just ``arrays``). bfloat16 goes into .npy and .npz as
    float32 (exact): NumPy saves it as raw bytes that :func:`load_array` refuses."""
    if name.lower().endswith(".npy"):
        return _npy_bytes(arrays[None])
    if name.lower().endswith(".npz"):
        out = io.BytesIO()
        with zipfile.ZipFile(out, "w") as new:
            kept: set[str | None] = set()
            if data is not None:
                with zipfile.ZipFile(io.BytesIO(data)) as archive:
                    for info in archive.infolist():
                        key = info.filename.removesuffix(".npy")
                        member = zipfile.ZipInfo(info.filename, info.date_time)
                        member.compress_type, member.external_attr = info.compress_type, info.external_attr
                        new.writestr(member, _npy_bytes(arrays[key]) if key in arrays else archive.read(info))
                        kept.add(key)
            for added, array in arrays.items():  # stored, as np.savez writes them (a fixed date: the same bytes)
                if added not in kept:
                    new.writestr(zipfile.ZipInfo(f"{added}.npy"), _npy_bytes(array))
        return out.getvalue()
    # .safetensors, written here: the library's serialize() takes other arguments from one release
    # to the next (bytes, then pointers), and the format is a length, a JSON header and the data.
    header, body = _safetensors_header(data) if data is not None else ({}, b"")
    tensors: dict[str, Any] = {"__metadata__": header.pop("__metadata__")} if "__metadata__" in header else {}
    # the old layout, each array with new values in its place and a new one at the end
    stored = {key: ({"dtype": info["dtype"], "shape": info["shape"]}, body[slice(*info["data_offsets"])])
              for key, info in sorted(header.items(), key=lambda item: item[1]["data_offsets"][0])}  # fmt: skip
    for tensor, array in arrays.items():
        if tensor is not None:
            spec = {"dtype": _SAFETENSORS_CODES[dtype_name(array.dtype)], "shape": list(array.shape)}
            stored[tensor] = (spec, array.astype(array.dtype.newbyteorder("<")).tobytes())  # safetensors is little-endian
    blobs: list[bytes] = []
    offset = 0
    for key, (spec, blob) in stored.items():
        tensors[key] = {**spec, "data_offsets": [offset, offset + len(blob)]}
        offset += len(blob)
        blobs.append(blob)
    text = json.dumps(tensors, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)  # the data starts 8-byte aligned, as the library writes it
    return len(text).to_bytes(8, "little") + text + b"".join(blobs)


_SAFETENSORS_CODES = {name: code for code, name in _SAFETENSORS_DTYPES.items()}


def _npy_bytes(array: np.ndarray) -> bytes:
    if dtype_name(array.dtype) == "bfloat16":
        array = array.astype(np.float32)
    buffer = io.BytesIO()
    np.save(buffer, array, allow_pickle=False)
    return buffer.getvalue()


def _safetensors_header(data: bytes) -> tuple[dict[str, Any], bytes]:
    """A .safetensors file's header (its tensors and ``__metadata__``) and the bytes after it, of a
    file :func:`array_key` read (so the library has checked it)."""
    size = int.from_bytes(data[:8], "little")
    return json.loads(data[8 : 8 + size]), data[8 + size :]

