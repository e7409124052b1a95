"""The library's errors: one base class, subclasses that carry structured context.

Every error a user or a package author can cause is a :class:`KernelError`. Each subclass keeps
the facts that explain it as attributes (the JSON path, the argument, the expression, the file)
so that tools can report them without parsing messages.
"""

from __future__ import annotations

import difflib
import os
import sys
from collections.abc import Iterator, Mapping
from typing import Any


class KernelError(Exception):
    """Base class of every error raised by webgpu_kernels."""

    def __reduce__(self) -> tuple[Any, ...]:
        # Pickled as its message and attributes, restored without calling __init__: subclasses take
        # other arguments than the message they pass on, so the default (cls(*args)) failed, and a
        # worker's error never reached its parent (a spawn Pool.map hung for good).
        return _restore, (type(self), self.args), self.__dict__


def _restore(cls: type[KernelError], args: tuple[Any, ...]) -> KernelError:
    return cls.__new__(cls, *args)


#: This package's folder: a frame whose file lies in it is the library's, not the user's.
_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep


def user_stacklevel() -> int:
    """The ``stacklevel`` for a ``warnings.warn`` made by this function's caller that names the
    first frame outside this package: the user's line, however deep in the library the warning is
    raised (a fixed 2 named tuning.py or buffers.py; Python 3.11 has no ``skip_file_prefixes``)."""
    frame, level = sys._getframe(1), 1
    while frame.f_back is not None and frame.f_code.co_filename.startswith(_PACKAGE_DIR):
        frame, level = frame.f_back, level + 1
    return level


def shorten(text: str, limit: int = 80) -> str:
    """``text`` cut to ``limit`` characters (ending ``...``), for a value quoted in a message."""
    return text if len(text) <= limit else text[: limit - 3] + "..."


class _Text(str):
    """A piece of :func:`short_repr`'s output (a bracket or separator), not a value to show."""


#: C0 and C1 control characters but tab and newline, and the bidirectional controls, each shown as
#: U+FFFD: package text (a description, an id inside an error message) must not move the cursor or
#: retitle the terminal, nor show its characters in another order than they are (U+202E, "Trojan
#: Source": a description reading one thing and saying another).
_BIDI_CONTROLS = [0x061C, 0x200E, 0x200F, *range(0x202A, 0x202F), *range(0x2066, 0x206A)]
_CONTROL_CHARACTERS = dict.fromkeys([*range(0, 9), *range(11, 32), 127, *range(128, 160), *_BIDI_CONTROLS], "\ufffd")


def printable(text: str) -> str:
    """``text`` with its control characters (ESC included) replaced, one for one: for package text
    shown on a terminal (the command line's output, ``help(kernel)``)."""
    return text.translate(_CONTROL_CHARACTERS)


def one_line(text: str) -> str:
    """:func:`printable` ``text`` for a field of one line (a file or case name a package chose):
    a newline or tab shown as ``\\n`` / ``\\t``, so a name cannot start a line of its own in a log."""
    return printable(text).replace("\n", "\\n").replace("\t", "\\t")


def type_name(value: Any) -> str:
    """The name of ``value``'s type for a message, as its writer knows it: a parsed manifest's
    read-only dict or list (subclasses of the library's own) is a dict or a list, not its class."""
    kind = type(value)
    if kind.__module__.startswith("webgpu_kernels."):  # a TensorMeta (a named tuple) keeps its name
        for plain in (dict, list):
            if issubclass(kind, plain):
                return plain.__name__
    return kind.__name__


def a_type_name(value: Any) -> str:
    """:func:`type_name` after its article ("an int", "a float"): "a int" had read as a slip. None is
    "none", as a template or expression writes it ("a NoneType" named a class nobody wrote)."""
    if value is None:
        return "none"
    name = type_name(value)
    return f"{'an' if _vowel_sound(name) else 'a'} {name}"


def _vowel_sound(name: str) -> bool:
    """Whether ``name`` is read starting with a vowel sound: a vowel letter, but a "u" read "you"
    (NumPy's uint32, ushort, ufunc: "an uint32" had been written) unless it is "un-" (an Undefined)."""
    head = name[:2].lower()
    if head[:1] == "u":
        return head == "un"
    return head[:1] in ("a", "e", "i", "o")


def name_meant(name: str, known: list[str]) -> str | None:
    """The one of ``known`` that ``name`` most likely misspells: the same but for case first, then
    difflib's closest; None if none is close."""
    close = [k for k in known if k.lower() == name.lower()] or difflib.get_close_matches(name, known, n=1)
    return close[0] if close else None


def names_meant(extra: list[str], known: list[str]) -> str:
    """" (did you mean 'Y'?)" for the names in ``extra`` close to one of ``known`` (:func:`name_meant`),
    naming each unknown one where there are several; "" if none is."""
    guesses = []
    for name in extra:
        close = name_meant(name, known)
        if close is not None:
            guesses.append(repr(close) + (f" for {name!r}" if len(extra) > 1 else ""))
    return f" (did you mean {', '.join(guesses)}?)" if guesses else ""


def no_variant(vid: str, known: list[str], *, parenthesised: bool = False) -> str:
    """"no variant 'x' (did you mean 'y'?); the variants are a, b": a forced or listed variant id the
    manifest lacks (``parenthesised``: the list in parentheses, as a test result's message has it)."""
    listed = f"the variants are {', '.join(known)}"
    return f"no variant {vid!r}{names_meant([vid], known)}" + (f" ({listed})" if parenthesised else f"; {listed}")


def describe_value(value: Any) -> str:
    """The 'got' part of an InputError about a value (an attribute, a tunable, adapter=): its type
    and at most 60 characters of its repr (a 4096-character string tunable must not fill the message)."""
    if isinstance(value, int) and not isinstance(value, bool):  # past 4,300 digits repr() refuses
        return f"{type_name(value)} {short_repr(value, 60)}"
    try:
        text = repr(value)
    except Exception:  # a caller's object whose repr fails still gets a clear error
        text = "?"
    return f"{type_name(value)} {text[:60]}"


def short_repr(value: Any, limit: int = 80) -> str:
    """``shorten(repr(value), limit)`` of a plain value (string, number, list, tuple, dict), built
    from about ``limit`` characters of it only: ``shorten(repr(...))`` of a package's value (4096
    references to a 4096-character string, a tuple nesting 2^40 leaves by reference) had built all
    of it first. Any other object is shown by its type alone (no address, nothing it holds)."""
    parts: list[str] = []
    size = 0
    stack: list[Iterator[Any]] = [iter((value,))]
    while stack and size <= limit:  # a container is opened lazily, as far as its items are shown
        item = next(stack[-1], _END)
        if item is _END:
            stack.pop()
            continue
        if isinstance(item, _Text):
            text = str(item)
        elif isinstance(item, str):
            text = repr(item[: limit + 1])  # cut inside its quotes: shorten() cuts the rest
        elif item is None or isinstance(item, (bool, float, range)):
            text = repr(item)
        elif isinstance(item, int):  # int -> decimal is quadratic in the digits
            text = repr(item) if item.bit_length() <= 1024 else f"<int of {item.bit_length()} bits>"
        elif isinstance(item, (list, tuple, Mapping)):
            stack.append(_pieces(item))
            continue
        elif type(item).__module__ == "numpy" and not getattr(item, "ndim", 1):  # a NumPy scalar: its value
            text = repr(item.item())  # type: ignore[attr-defined]  # NumPy's scalars and 0-d arrays have it
        else:
            text = f"<{type_name(item)}>"
        parts.append(text)
        size += len(text)
    return shorten("".join(parts), limit)


_END = object()


def _pieces(value: list[Any] | tuple[Any, ...] | Mapping[Any, Any]) -> Iterator[Any]:
    """The brackets, separators and items of a container, in repr() order (items unexpanded)."""
    if isinstance(value, Mapping):
        yield _Text("{")
        for index, (key, item) in enumerate(value.items()):
            yield from (_Text(", "), key, _Text(": "), item) if index else (key, _Text(": "), item)
        yield _Text("}")
        return
    opening, closing = ("[", "]") if isinstance(value, list) else ("(", ",)" if len(value) == 1 else ")")
    yield _Text(opening)
    for index, item in enumerate(value):
        if index:
            yield _Text(", ")
        yield item
    yield _Text(closing)


# --- packages and manifests -------------------------------------------------------------------


class PackageError(KernelError):
    """A kernel package cannot be found or read (missing folder, unreadable file, bad JSON)."""

    def __init__(self, message: str, *, path: str | None = None) -> None:
        self.path = path
        self.detail = message  # without the path
        super().__init__(f"{path}: {message}" if path else message)


class CaseFileError(PackageError):
    """A test.json or bench.json entry that is malformed or cannot be built. ``json_path`` locates it."""

    def __init__(self, message: str, *, file: str, json_path: str = "") -> None:
        self.file = file
        self.json_path = json_path
        super().__init__(f"{json_path or '(root)'}: {message}", path=file)
        self.detail = message  # without the path and the JSON path (PackageError's keeps the JSON path)


class DigestError(PackageError):
    """A package file does not match ``metadata.json``: changed, missing, or present but not listed.

    ``file`` is the file's name inside the package (``metadata.json`` itself when that file is
    malformed); ``reason`` is one of ``mismatch``, ``missing``, ``unlisted``, ``metadata``.
    """

    def __init__(self, message: str, *, file: str, reason: str, path: str | None = None) -> None:
        self.file = file
        self.reason = reason
        super().__init__(message, path=path)


class HubError(PackageError):
    """A kernel package cannot be fetched from the Hugging Face Hub (unknown repository or revision,
    no connection and nothing cached, a repository without ``build/webgpu/``).

    ``repo_id`` and ``revision`` say what was asked for.
    """

    def __init__(self, message: str, *, repo_id: str | None = None, revision: str | None = None) -> None:
        self.repo_id = repo_id
        self.revision = revision
        super().__init__(message)


class HubNotCachedError(HubError):
    """A Hub package that is not in the Hugging Face cache cannot be fetched now: offline mode is on,
    or the Hub cannot be reached. The message says how to fetch it once (``webgpu-kernels download``)."""


class HubCommitNotServedError(HubError):
    """The commit a project's lock file pins is no longer served by the Hub (removed, or its branch
    force-pushed past it) and the Hugging Face cache does not hold it. The message names the
    ``webgpu-kernels lock PROJECT_DIR`` that locks each branch's commit now; ``lockfile`` is the
    lock file, ``revision`` the commit."""

    def __init__(self, message: str, *, repo_id: str, revision: str, lockfile: str) -> None:
        self.lockfile = lockfile
        super().__init__(message, repo_id=repo_id, revision=revision)


class TrustError(PackageError):
    """A package from outside the official organisation, or from a path or URL, was asked for without
    ``trust_remote_code=True``. ``location`` is what was asked for, ``reason`` why it needs trust."""

    def __init__(self, message: str, *, location: str, reason: str) -> None:
        self.location = location
        self.reason = reason
        super().__init__(message)


class ManifestError(KernelError):
    """A manifest breaks the format. ``json_path`` locates the offending value."""

    def __init__(self, message: str, *, json_path: str = "", file: str | None = None) -> None:
        self.json_path = json_path
        self.file = file
        self.detail = message
        where = json_path or "(root)"
        prefix = f"{file}: " if file else ""
        super().__init__(f"{prefix}{where}: {message}")


# --- expressions --------------------------------------------------------------------------------


class ExpressionError(KernelError):
    """A manifest expression does not parse, names something unknown, or fails to evaluate."""

    def __init__(self, message: str, *, expression: str, where: str = "") -> None:
        self.expression = expression
        self.where = where
        self.detail = message
        location = f"{where}: " if where else ""
        super().__init__(f"{location}expression {expression!r}: {message}")


class BroadcastError(ExpressionError):
    """``broadcastShape`` of shapes that do not broadcast. In an output's shape it is the call's
    fault, and a call reports it as a :class:`ShapeError` naming the inputs."""

    def __init__(self, message: str, *, expression: str, where: str = "", shapes: tuple = (), reason: str = "") -> None:
        super().__init__(message, expression=expression, where=where)
        self.shapes = shapes
        self.reason = reason


class SandboxError(KernelError):
    """An expression or template was refused by the sandbox: a construct outside the allow-list
    (attribute walks, calls, filters, names), or a resource bound (size, nesting, loop work, time).

    Raised as :class:`ExpressionSandboxError` or :class:`TemplateSandboxError`, so catching
    ``ExpressionError``/``TemplateError`` catches these too.
    """


class ExpressionSandboxError(ExpressionError, SandboxError):
    """A manifest expression refused by the sandbox (see :class:`SandboxError`)."""


# --- calls --------------------------------------------------------------------------------------


class InputError(KernelError):
    """A call's inputs, attributes or options break the kernel's contract.

    ``argument`` names the offending argument, ``expected`` and ``received`` say what the
    contract wanted and what came.
    """

    def __init__(self, argument: str, expected: str, received: str, *, hint: str = "") -> None:
        self.argument = argument
        self.expected = expected
        self.received = received
        self.hint = hint
        self.hint_replaced = False
        super().__init__(self._message())

    def _message(self) -> str:
        message = f"argument {self.argument!r}: expected {self.expected}, got {self.received}"
        return f"{message} ({self.hint})" if self.hint else message

    def replace_hint(self, hint: str) -> None:
        """Say ``hint`` instead of the library's: a caller that knows where the call came from (a
        test.json case, the command line) says what to change there, not in a Python call."""
        self.hint, self.hint_replaced = hint, True
        self.args = (self._message(),)


class UnknownInputError(InputError):
    """An input, attribute or tunable the contract does not declare."""


class MissingInputError(InputError):
    """A required input was not given."""


class MissingOutputError(InputError, KeyError):
    """A call's result indexed by a name it does not hold: an output the kernel does not declare,
    or an optional one the chosen variant does not produce. Also a KeyError, as a dict's missing
    key is, so ``except KeyError`` still catches it."""

    def __str__(self) -> str:  # KeyError's own __str__ shows the message as a quoted repr
        return str(self.args[0]) if self.args else ""


class RankError(InputError):
    """An input of the wrong rank."""


class DTypeError(InputError):
    """An input whose dtype is outside its type constraint, or a type variable bound twice.

    For a caller's own advice (:meth:`InputError.replace_hint`), ``type_variable`` names the type
    variable; outside its constraint, ``allowed`` is its dtypes; bound twice, ``bound_by`` names the
    inputs before this one and ``bound_dtype`` the dtype they gave it. Else "", () and "".
    """

    def __init__(self, argument: str, expected: str, received: str, *, hint: str = "", type_variable: str = "",
                 allowed: tuple[str, ...] = (), bound_by: tuple[str, ...] = (), bound_dtype: str = "") -> None:  # fmt: skip
        self.type_variable = type_variable
        self.allowed = allowed
        self.bound_by = bound_by
        self.bound_dtype = bound_dtype
        super().__init__(argument, expected, received, hint=hint)


class ShapeError(InputError):
    """Shapes that the contract relates do not agree."""


class AttributeValueError(InputError):
    """An attribute or tunable value of the wrong kind (non-finite, wrong type).

    Where a boolean came for a number, ``number_meant`` is the number it stands for (0 or 1) and
    ``kind`` says "attribute" or "tunable", for a caller's own advice (:meth:`InputError.replace_hint`:
    the command line's ``--attr``, a test.json case); ``list_meant``, where the boolean came inside a
    list, is that list with its booleans as numbers. Else None, "" and None.
    """

    def __init__(self, argument: str, expected: str, received: str, *, hint: str = "", kind: str = "",
                 number_meant: int | None = None, list_meant: list[Any] | None = None) -> None:  # fmt: skip
        self.kind = kind
        self.number_meant = number_meant
        self.list_meant = list_meant
        super().__init__(argument, expected, received, hint=hint)


class DeviceLimitError(InputError):
    """The call needs more than the device offers (binding size, workgroup size, features).

    Where the hint names another adapter as a Python call chooses it (``adapter='vulkan'``),
    ``command_line_hint`` is the same hint with the ``--adapter`` option instead, for the command
    line (:meth:`InputError.replace_hint`); else "".
    """

    def __init__(self, argument: str, expected: str, received: str, *, hint: str = "",
                 command_line_hint: str = "") -> None:  # fmt: skip
        self.command_line_hint = command_line_hint
        super().__init__(argument, expected, received, hint=hint)


class SelectionError(KernelError):
    """No variant can run this call, or the forced variant cannot.

    ``trace`` holds each variant's verdict. ``attributes`` names the call's attributes where they
    refuse it on any device: every variant's first failing clause reads them and nothing else (no
    input's shape or dtype, tunable or device limit), as in ``no variant accepts attribute
    mode='x'``, or nothing else but the inputs' shapes and ranks, as in ``no variant accepts
    attribute axis=3 for these inputs``; else it is empty.
    """

    def __init__(self, message: str, *, trace: Any = None, attributes: tuple[str, ...] = ()) -> None:
        self.trace = trace
        self.attributes = attributes
        super().__init__(message)


class VariantRejectedError(SelectionError):
    """The caller forced a variant whose ``when`` clause does not hold."""

    def __init__(self, message: str, *, variant: str, clause: str | None, trace: Any = None) -> None:
        self.variant = variant
        self.clause = clause
        super().__init__(message, trace=trace)


# --- rendering and the GPU ----------------------------------------------------------------------


class TemplateError(KernelError):
    """A shader template fails to load or render. ``file`` and ``line`` locate it."""

    def __init__(self, message: str, *, file: str, line: int | None = None) -> None:
        self.file = file
        self.line = line
        self.detail = message
        where = f"{file}:{line}" if line else file
        super().__init__(f"{where}: {message}")


class TemplateSandboxError(TemplateError, SandboxError):
    """A shader template refused by the sandbox (see :class:`SandboxError`)."""


class LayoutError(KernelError):
    """A uniform struct field has a type or value that cannot be packed."""

    field: str | None = None  # the struct field whose value could not be packed, where known


class GPUError(KernelError):
    """Base of errors reported by WebGPU."""


class AdapterNotFoundError(GPUError):
    """No WebGPU adapter matches the request (or none is present at all)."""


class ShaderCompileError(GPUError):
    """WGSL that the device refused to compile into a pipeline. ``file`` and ``line`` are the
    template and template line the compiler's first reported position was rendered from, when known."""

    def __init__(self, message: str, *, kernel: str, variant: str, pass_id: str, file: str | None = None,
                 line: int | None = None) -> None:  # fmt: skip
        self.kernel = kernel
        self.variant = variant
        self.pass_id = pass_id
        self.detail = message
        self.file = file
        self.line = line
        where = f"{file}:{line}: " if file and line else ""
        super().__init__(f"{where}{kernel} variant {variant!r} pass {pass_id!r}: shader does not compile:\n{message}")


class DeviceError(GPUError):
    """Any other error that WebGPU raised while running a kernel (validation, out of memory, lost)."""


class DeviceLostError(DeviceError):
    """The WebGPU device was lost (driver reset, destroyed); the next call opens a new one."""


class OutOfMemoryError(DeviceError):
    """The device could not allocate a buffer, even after the pool's free buffers were destroyed and
    the allocation retried once. ``nbytes`` is the buffer's size asked of wgpu (a pooled buffer's size
    class, up to 25% over the tensor's bytes; None where wgpu did not say),
    ``live_bytes`` what live buffers (GpuTensors, the failing call's own) held then, ``pooled_bytes``
    what the pool held before it was trimmed. An allocation other than a buffer's
    (translate_gpu_errors: ``nbytes`` None) is not retried, the pool left as it was."""

    def __init__(self, message: str, *, nbytes: int | None, live_bytes: int, pooled_bytes: int) -> None:
        self.nbytes = nbytes
        self.live_bytes = live_bytes
        self.pooled_bytes = pooled_bytes
        super().__init__(message)


class TensorReleasedError(KernelError):
    """A GPU tensor was used after ``release()``."""


class UncomputedTensorError(KernelError):
    """A GPU tensor whose computing work never reached the GPU: the submission that carried it
    failed or was cut short (Ctrl-C), so its buffer holds whatever it held before."""


class NotPicklableError(KernelError, TypeError):
    """An object that cannot go to another process (a GpuTensor: its data is in one process's GPU
    memory) was pickled. A TypeError too, as pickle's own refusals are."""


class GpuWaitWarning(RuntimeWarning):
    """A readback has waited long for the GPU and still waits (``$WEBGPU_KERNELS_WAIT_WARN_S``): the
    one sign a user gets of work that never ends, such as a driver wedged by a forked child's exit."""


class TuningFileWarning(UserWarning):
    """A tuning file (``webgpu-kernels tune``'s results) that cannot be read, or that holds what
    ``tune`` never writes: calls it would have sped up run the manifests' own selection. Said once
    per file and process, naming the file, what is wrong and what to do."""
