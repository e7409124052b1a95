"""errors.py: every error survives pickling (a worker process's error reaches its parent)."""

from __future__ import annotations

import inspect
import multiprocessing
import pickle

import numpy as np
import pytest

from webgpu_kernels import errors


def every_error_class(base: type = errors.KernelError) -> list[type]:
    found = [base]
    for sub in base.__subclasses__():
        found += [c for c in every_error_class(sub) if c not in found]
    return found


def an_instance(cls: type) -> errors.KernelError:
    """``cls`` built with a made-up value for each argument its constructor takes."""
    kwargs = {}
    for name, param in inspect.signature(cls.__init__).parameters.items():
        if name == "self" or param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            continue
        kwargs[name] = 7 if name == "line" else f"{name}-value"
    return cls(**kwargs) if kwargs else cls("a message")


@pytest.mark.parametrize("cls", every_error_class(), ids=lambda c: c.__name__)
def test_every_error_round_trips_through_pickle(cls):
    """Subclasses take other arguments than the message they pass on: unpickling had called
    cls(message) and failed (InputError and its subclasses, DigestError, TemplateError, ...), or
    rebuilt another message (ManifestError) and lost attributes (PackageError's path)."""
    error = an_instance(cls)
    error.add_note("a note")
    again = pickle.loads(pickle.dumps(error))
    assert type(again) is cls
    assert str(again) == str(error) and again.args == error.args
    assert again.__dict__ == error.__dict__  # the structured context, and the note


def quick_gelu_in_a_worker(dtype: str):
    import webgpu_kernels as wk

    return wk.get_kernel("com.microsoft.QuickGelu")({"X": np.ones(4, dtype)})["Y"]


def test_a_spawned_workers_error_reaches_the_parent():
    """A DTypeError in a spawn Pool's worker had killed the pool's result
    thread in the parent, and Pool.map waited for good."""
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        with pytest.raises(errors.DTypeError, match="argument 'X'"):
            pool.map_async(quick_gelu_in_a_worker, ["int32"]).get(timeout=120)


def test_printable_replaces_bidirectional_controls_too():
    """A description with U+202E (right-to-left override) shows its characters in another order
    than they are, in help(kernel) and on the command line: "Trojan Source". Replaced
    one for one, as control characters are; other text (accents, CJK, emoji) is left alone."""
    from webgpu_kernels.errors import printable

    for c in ("\u202e", "\u202a", "\u2066", "\u2069", "\u200f", "\u200e", "\u061c", "\x1b", "\x85"):
        assert printable(f"a{c}b") == "a\ufffdb", repr(c)
    assert printable("café 漢字 🙂\tx\ny") == "café 漢字 🙂\tx\ny"


# --- error-message polish ----------------------------------------------------------------


@pytest.mark.parametrize(("value", "said"), [
    (1, "an int"), (1.5, "a float"), ((1,), "a tuple"), (range(2), "a range"), ([], "a list"),
    (np.uint32(7), "a uint32"), (np.uint8(7), "a uint8"), (np.uint16(7), "a uint16"), (np.add, "a ufunc"),
    (np.int64(7), "an int64"), (Ellipsis, "an ellipsis"), (None, "none"),
])  # fmt: skip
def test_a_type_name_takes_the_article_its_name_is_read_with(value, said):
    """"an" went before any name starting with a vowel letter: NumPy's unsigned types read "an uint32"."""
    assert errors.a_type_name(value) == said


def test_an_undefined_value_is_named_undefined():
    """jinja2's Undefined reads "an Undefined" (un-), not "a"."""
    from jinja2 import Undefined

    assert errors.a_type_name(Undefined()) == "an Undefined"
