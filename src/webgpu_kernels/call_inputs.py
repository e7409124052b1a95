"""What a call is given, before any stage sees it: arrays and GpuTensors, or tensors described
by shape and dtype alone (``TensorMeta``, ``(shape, dtype)``) for explain, render, evaluate and
plan. Names of dtypes are read here, NumPy's and the manifests' short ones alike."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .contract import MAX_RANK, checked_tensor_meta
from .contract import is_buffer as _is_buffer
from .errors import DTypeError, InputError, RankError, ShapeError, shorten, type_name
from .manifest import ONNX_TO_WGSL


@dataclass(frozen=True)
class TensorMeta:
    """A shape and dtype standing for a tensor, for ``explain`` and ``render`` without data. The
    shape may be any sequence of integers (a list, a range, a 1-D NumPy array, NumPy integers) and
    is kept as a tuple of ints; the dtype is kept by its NumPy name where it has one reading
    (``"f16"``, ``np.float16`` and ``"float16"`` make equal metas). Anything else is kept as
    given, for the call to refuse with the input's name."""

    shape: tuple[int, ...]
    dtype: str

    def __post_init__(self) -> None:
        object.__setattr__(self, "shape", _shape_tuple(self.shape))
        if not (isinstance(self.dtype, str) and self.dtype in _AMBIGUOUS_DTYPE_NAMES):
            name = _dtype_name(self.dtype)
            if name in ONNX_TO_WGSL:
                object.__setattr__(self, "dtype", name)


def describe_inputs(inputs: Mapping[str, Any]) -> dict[str, tuple[tuple[int, ...], str]]:
    """Each input's (shape, dtype name), from an array, a GpuTensor, a TensorMeta or a (shape, dtype)
    tuple: what the contract checks a call against, data or not."""
    metas = {}
    for name, value in checked_mapping(inputs).items():
        shape: Any
        dtype: Any  # a name, a NumPy dtype, or what the caller's tensor calls its dtype
        if isinstance(value, TensorMeta):
            shape, dtype = value.shape, value.dtype
        elif isinstance(value, tuple) and len(value) == 2 and not hasattr(value, "shape"):
            shape, dtype = value
        elif hasattr(value, "shape") and hasattr(value, "dtype") and (_numpy_dtype(value.dtype) or not _array_like(value)):
            shape, dtype = value.shape, value.dtype
        elif _array_like(value):
            # What a call reads from it, as the call reads it: a list, a buffer, a tensor whose dtype
            # NumPy does not know (torch.float32). explain had refused what the call ran.
            array = as_array(name, value)
            shape, dtype = array.shape, array.dtype
        else:
            raise InputError(name, "an array, a GpuTensor or a TensorMeta", type_name(value))
        metas[name] = _read_shape_and_dtype(shape, dtype, name, name)
    return metas


def _read_shape_and_dtype(shape: Any, dtype: Any, shape_arg: str, dtype_arg: str) -> tuple[tuple[Any, ...], str]:
    """``shape`` as a tuple and ``dtype``'s name, errors naming ``shape_arg`` or ``dtype_arg``: a
    shape that is no sequence (or longer than any rank), and a dtype name with two readings."""
    dims = _shape_tuple(shape)
    if not isinstance(dims, tuple):
        if _is_sequence(dims):  # too long to be made a tuple
            raise RankError(shape_arg, f"rank at most {MAX_RANK}", f"rank {len(dims)}")
        raise ShapeError(shape_arg, "a shape (a sequence of dimensions)", f"{type_name(dims)} {dims!r:.60}")
    if isinstance(dtype, str) and dtype in _AMBIGUOUS_DTYPE_NAMES:
        numpy_reading, short_reading = _AMBIGUOUS_DTYPE_NAMES[dtype]
        raise DTypeError(dtype_arg, f"a dtype name with one reading: {numpy_reading!r} (NumPy's {dtype!r}) or "
                                    f"{short_reading!r} (the CLI's and dtypes' {dtype!r})", repr(dtype))  # fmt: skip
    return dims, _dtype_name(dtype)


def checked_shape_and_dtype(shape: Any, dtype: Any) -> tuple[tuple[int, ...], str]:
    """A tensor's shape and dtype given as separate arguments (``from_wgpu_buffer``'s), read as a
    TensorMeta reads them and checked as a call checks an input's: a sequence of non-negative ints,
    and a dtype some kernel may bind (NumPy's and the manifests' names). Returns the shape as a
    tuple and the dtype's ONNX name; errors name the argument ``shape`` or ``dtype``."""
    dims, name = _read_shape_and_dtype(shape, dtype, "shape", "dtype")
    checked, _ = checked_tensor_meta("shape", (dims, "float32"))  # ints, non-negative, rank, element count
    if name not in ONNX_TO_WGSL:
        raise DTypeError("dtype", f"a dtype kernels bind, one of {list(ONNX_TO_WGSL)}", name)
    if _numpy_dtype(dtype) and np.dtype(dtype) != np.dtype(dtype).newbyteorder("<"):
        # the name drops the byte order, and the buffer is read as little-endian data
        raise DTypeError("dtype", f"a little-endian dtype (the buffer's data is read as little-endian {name})",
                         f"{np.dtype(dtype).str} (big-endian {name})")  # fmt: skip
    return checked, name


def _numpy_dtype(dtype: Any) -> bool:
    """Whether NumPy reads ``dtype`` as a dtype (np.float32, "float32"; not torch.float32)."""
    if dtype is None:  # np.dtype(None) is float64
        return False
    try:
        np.dtype(dtype)
    except TypeError:
        return False
    return True


def _array_like(value: Any) -> bool:
    """Data a call reads through NumPy (as_array): a list, a Python number (a 0-d array), a typed
    buffer, an object with __array__."""
    return isinstance(value, (list, int, float)) or hasattr(value, "__array__") or _is_buffer(value)


def _shape_tuple(shape: Any) -> Any:
    """A shape given as a sequence (a list, a range, torch.Size, a 1-D NumPy array) as a tuple,
    NumPy integers made ints (equal and hashed as the same shape of ints); anything else as given,
    for the call to refuse with the input's name: dimensions that are bools, floats or negative,
    a set (no order), a string, a generator (used up by reading it), and a sequence longer than
    any rank that a list or tuple is not (range(10**12) is not copied to say so)."""
    if not _is_sequence(shape) or (len(shape) > MAX_RANK and not isinstance(shape, (list, tuple))):
        return shape
    items = shape.tolist() if isinstance(shape, np.ndarray) else shape  # the contract refuses floats, bools
    return tuple(int(d) if isinstance(d, np.integer) else d for d in items)


def _is_sequence(shape: Any) -> bool:
    if isinstance(shape, np.ndarray):
        return shape.ndim == 1
    return isinstance(shape, Sequence) and not isinstance(shape, (str, bytes, bytearray))


#: The manifests' short names ("f16", as in ``dtypes.T`` and the CLI's X=2x64:f16) -> ONNX names.
_SHORT_DTYPE_NAMES = {short: name for name, short in ONNX_TO_WGSL.items() if short}


def _numpy_reading(name: str) -> str | None:
    try:
        return np.dtype(name).name
    except TypeError:
        return None


#: Short names NumPy reads as another type the engine knows ("i8": int64 to NumPy, int8 to the CLI
#: and dtypes.T): refused rather than guessed.
_AMBIGUOUS_DTYPE_NAMES = {
    short: (_numpy_reading(short), name) for short, name in _SHORT_DTYPE_NAMES.items()
    if _numpy_reading(short) in ONNX_TO_WGSL and _numpy_reading(short) != name
}  # fmt: skip


def _dtype_name(dtype: Any) -> str:
    """The NumPy name of a dtype given any way NumPy reads one ("f4", np.float32), else by its short
    name ("f16", "bf16", "i32"): NumPy reads "f16" as float128, which no kernel takes, and knows no
    "f32". Any other name stays as it is, for the contract to refuse."""
    if dtype is None:  # np.dtype(None) is float64, which the caller never said
        return "None"
    try:
        name = np.dtype(dtype).name
    except TypeError:
        name = None
    if isinstance(dtype, str) and name not in ONNX_TO_WGSL and dtype in _SHORT_DTYPE_NAMES:
        return _SHORT_DTYPE_NAMES[dtype]
    return name or str(dtype)


def checked_mapping(inputs: Any) -> Mapping[str, Any]:
    if not isinstance(inputs, Mapping):
        raise InputError("inputs", "a dict of input name -> array", type_name(inputs))
    for name in inputs:
        if not isinstance(name, str):
            raise InputError("inputs", "string keys (input names)", repr(name))
    return inputs


def as_array(name: str, value: Any) -> np.ndarray:
    """An array-like input as a NumPy array (lists, scalars, objects with ``__array__`` and buffers
    such as memoryview and array.array, whose format gives the dtype)."""
    if isinstance(value, np.ma.MaskedArray):  # a kernel would read the masked values too
        raise InputError(name, "a NumPy array or a GpuTensor", "a masked array (pass .filled(...) or .data)")
    if isinstance(value, np.ndarray):
        return value
    if isinstance(value, memoryview) and _is_released(value):
        raise InputError(name, "a live buffer", "a released memoryview")
    if isinstance(value, (TensorMeta, tuple)):
        _refuse_description(name, value)
    if not (hasattr(value, "__array__") or hasattr(value, "__array_interface__") or hasattr(value, "__array_struct__")
            or isinstance(value, (list, tuple, int, float)) or _is_buffer(value)):  # fmt: skip
        raise InputError(name, "a NumPy array or a GpuTensor", type_name(value))
    try:
        return np.asarray(value)
    except ValueError as exc:  # a ragged nested list, or a buffer format NumPy does not read
        if isinstance(value, (list, tuple)):
            raise InputError(name, "a rectangular array", f"{type_name(value)} NumPy cannot make one of ({exc})") from None
        raise InputError(name, "an array NumPy can read", f"{type_name(value)} ({exc})") from None
    except (TypeError, RuntimeError) as exc:  # an __array__ that refuses: a CUDA or requires-grad torch tensor
        # torch's own words say what failed but not what to do, and torch is what most such inputs are
        hint = ("for a torch tensor, x.detach().cpu().numpy(); bfloat16 has no NumPy dtype: "
                "x.float() or x.half() first") if type(value).__module__.startswith("torch") else ""  # fmt: skip
        raise InputError(name, "an array NumPy can read", f"{type_name(value)} whose conversion raised "
                         f"{type(exc).__name__}: {exc}", hint=hint) from None  # fmt: skip


def _refuse_description(name: str, value: TensorMeta | tuple[Any, ...]) -> None:
    """Refuse a tensor described without data, the form explain and render take, saying so: NumPy
    reads ((2, 3), "float32") as a ragged list, and (4, "float32") as an array of two strings."""
    if isinstance(value, TensorMeta):
        shape, dtype, what = value.shape, value.dtype, "a TensorMeta"
    elif (len(value) == 2 and isinstance(value[0], (tuple, list, range, np.ndarray, int))
          and isinstance(value[1], (str, np.dtype, type))):  # fmt: skip
        shape, dtype = value
        what = f"a (shape, dtype) tuple {shorten(repr(value), 60)}"
    else:
        return
    example = f"np.zeros({shorten(repr(_shape_tuple(shape)), 60)}, {shorten(repr(_dtype_name(dtype)), 30)})"
    raise InputError(name, "a NumPy array or a GpuTensor (a call needs the data)", what,
                     hint=f"a shape and dtype stand for a tensor only in explain, render, evaluate and plan; "
                          f"to run, pass an array, e.g. {example}")  # fmt: skip


def _is_released(view: memoryview) -> bool:
    try:
        return view.nbytes < 0  # never: a released view refuses to say
    except ValueError:
        return True
