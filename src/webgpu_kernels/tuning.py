"""Autotuning results: one JSON file per adapter, consulted when a call leaves the choice open.

An entry is keyed by the kernel's tuning key (its op id and a digest of its manifest and
templates, so that a copy being edited never answers for the shipped package), the dtypes of the
call and its shape class (the number of elements of its largest input, rounded down to a power of
two), and records the variant and tunables that ran fastest there. Calls that pass neither ``variant`` nor ``tunables`` use a matching entry; an
entry whose variant does not apply to the call is ignored.
"""

from __future__ import annotations

import json
import os
import re
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

CACHE_ENV = "WEBGPU_KERNELS_TUNING_DIR"
DISABLE_ENV = "WEBGPU_KERNELS_NO_TUNING"


#: 2: entries keyed by the package's tuning key, not the op id alone (version-1 files are ignored).
FILE_VERSION = 2


def tuning_dir() -> Path:
    base = os.environ.get(CACHE_ENV)
    if base:
        return Path(base)
    # An empty XDG_CACHE_HOME counts as unset (XDG base directory spec).
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "webgpu-kernels" / "tuning"


def adapter_slug(name: str, backend: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", f"{name}-{backend}").strip("-").lower()


def shape_class(elements: int) -> int:
    """Calls are tuned per power-of-two bucket of their output size."""
    return max(elements, 1).bit_length() - 1


def entry_key(op_id: str, dtypes: dict[str, str], elements: int, absent: tuple[str, ...] = (),
              attrs: Mapping[str, Any] | None = None) -> str:  # fmt: skip
    """``absent``: the optional inputs a call leaves out; ``attrs``: the attributes it sets to other
    than their defaults (a normalisation's axis). Either may change which variants apply and how
    fast they are, so each makes a key of its own; a call with neither has the key older files hold."""
    types = ",".join(f"{k}={v}" for k, v in sorted(dtypes.items()))
    without = f"|without={','.join(sorted(absent))}" if absent else ""
    settings = ",".join(f"{k}={json.dumps(v, sort_keys=True)}" for k, v in sorted((attrs or {}).items()))
    return f"{op_id}|{types}|2^{shape_class(elements)}{without}" + (f"|attrs={settings}" if settings else "")


@dataclass(frozen=True)
class TunedChoice:
    variant: str
    tunables: dict[str, Any]
    median_s: float


class TuningCache:
    """The tuning file of one adapter, loaded once; writes go through :meth:`record` + :meth:`save`."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self.entries: dict[str, dict[str, Any]] = {}
        if path.is_file():
            try:
                data = json.loads(path.read_text("utf-8"))
            except (OSError, ValueError):
                data = None  # a corrupt cache is ignored, never fatal
            if isinstance(data, dict) and data.get("version") == FILE_VERSION and isinstance(data.get("entries"), dict):
                self.entries = {k: e for k, e in data["entries"].items() if _valid_entry(e)}

    def lookup(self, op_id: str, dtypes: dict[str, str], elements: int, absent: tuple[str, ...] = (),
               attrs: Mapping[str, Any] | None = None) -> TunedChoice | None:  # fmt: skip
        if os.environ.get(DISABLE_ENV):
            return None
        entry = self.entries.get(entry_key(op_id, dtypes, elements, absent, attrs))
        if not entry:
            return None
        return TunedChoice(entry["variant"], dict(entry["tunables"]), float(entry["median_s"]))

    def record(self, op_id: str, dtypes: dict[str, str], elements: int, choice: TunedChoice,
               absent: tuple[str, ...] = (), attrs: Mapping[str, Any] | None = None) -> None:  # fmt: skip
        global generation
        with self._lock:
            generation += 1  # kernels drop the plans they chose before this result existed
            self.entries[entry_key(op_id, dtypes, elements, absent, attrs)] = {
                "variant": choice.variant, "tunables": choice.tunables, "median_s": choice.median_s,
            }  # fmt: skip

    def save(self) -> None:
        with self._lock:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            tmp = self.path.with_suffix(".tmp")
            tmp.write_text(json.dumps({"version": FILE_VERSION, "entries": self.entries}, indent=1, sort_keys=True), "utf-8")
            tmp.replace(self.path)


def _valid_entry(entry: Any) -> bool:
    """An entry as :meth:`TuningCache.record` writes it; anything else in a file is dropped."""
    return (
        isinstance(entry, dict)
        and isinstance(entry.get("variant"), str)
        and isinstance(entry.get("tunables"), dict)
        and all(isinstance(k, str) and isinstance(v, (bool, int, float, str)) for k, v in entry["tunables"].items())
        and isinstance(entry.get("median_s"), (int, float))
        and not isinstance(entry.get("median_s"), bool)
    )


#: Bumped by every recorded result; part of the key of a kernel's per-call plan cache.
generation = 0
_caches: dict[str, TuningCache] = {}
_lock = threading.Lock()


def cache_for(adapter_name: str, backend: str) -> TuningCache:
    path = tuning_dir() / f"{adapter_slug(adapter_name, backend)}.json"
    with _lock:
        cache = _caches.get(str(path))
        if cache is None:
            cache = _caches[str(path)] = TuningCache(path)
        return cache
