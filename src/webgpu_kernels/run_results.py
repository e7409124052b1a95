"""What ``webgpu-kernels test`` reports: one case on one variant (:class:`RunResult`), every run of
a package (:class:`PackageReport`), their statuses, and the JSON both take (``--json``, and the
plain dicts an isolated child sends its parent)."""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .errors import DeviceLimitError

PASS, FAIL, ERROR, SKIP = "pass", "fail", "error", "skip"

#: Why a case is skipped on an adapter, in the words `test`, `bench` and `tune` all use.
NO_F16 = "this adapter has no shader-f16 feature"
#: How a skip for a device limit begins; the DeviceLimitError's limit and the case's need follow.
CANNOT_HOLD = "this adapter cannot hold it"


def cannot_hold(limit: DeviceLimitError) -> str:
    """A device-limit skip's reason: the error without its hint (split the tensor, another
    adapter), which is for a caller's own call, not for a package's case."""
    return f"{CANNOT_HOLD}: argument {limit.argument!r}: expected {limit.expected}, got {limit.received}"


@dataclass
class RunResult:
    """One case on one variant (``variant`` None when the case failed before any variant ran)."""

    kernel: str
    case: str
    variant: str | None
    dtype: str
    status: str  # pass | fail | error | skip
    max_abs_error: float | None = None
    max_rel_error: float | None = None
    message: str = ""
    outputs: list[dict[str, Any]] = field(default_factory=list)
    seconds: float = 0.0
    refused: bool = False  # a case that expects a refusal: passes when the call is refused so

    @property
    def failed(self) -> bool:
        return self.status in (FAIL, ERROR)

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        return {
            "kernel": data["kernel"], "case": data["case"], "variant": data["variant"], "dtype": data["dtype"],
            "status": data["status"], "maxAbsError": data["max_abs_error"], "maxRelError": data["max_rel_error"],
            "message": data["message"], "outputs": data["outputs"], "seconds": data["seconds"],
            "refused": data["refused"],
        }  # fmt: skip

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RunResult:
        return cls(
            kernel=data["kernel"], case=data["case"], variant=data["variant"], dtype=data["dtype"],
            status=data["status"], max_abs_error=data["maxAbsError"], max_rel_error=data["maxRelError"],
            message=data["message"], outputs=list(data["outputs"]), seconds=data["seconds"],
            refused=data["refused"],
        )  # fmt: skip


@dataclass
class PackageReport:
    """Every run of one package, and what went wrong with the package as a whole (``error``)."""

    kernel: str
    path: str
    origin: str
    isolated: bool
    results: list[RunResult] = field(default_factory=list)
    error: str | None = None  # no test.json, a broken one, or a crashed child process
    adapter: str | None = None  # the adapter the cases ran on (None when none was opened)
    # For the JUnit report, not in as_dict:
    started: float = field(default_factory=time.time)  # when the run began (epoch seconds)
    seconds: float = 0.0  # an isolated run's wall-clock time, spawn to the child's end (0: not measured)
    #: Runs a child that died had planned but never reached (errors; "notRun" in as_dict): without
    #: them a CI dashboard shows fewer tests than the package has, and nothing says so.
    not_run: list[RunResult] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.error is None and not any(r.failed for r in self.results)

    def counts(self) -> dict[str, int]:
        counts = {PASS: 0, FAIL: 0, ERROR: 0, SKIP: 0}
        for r in self.results:
            counts[r.status] += 1
        return counts

    def as_dict(self) -> dict[str, Any]:
        return {
            "kernel": self.kernel, "path": self.path, "origin": self.origin, "isolated": self.isolated,
            "adapter": self.adapter, "ok": self.ok, "error": self.error, "counts": self.counts(),
            "results": [r.as_dict() for r in self.results], "notRun": [r.as_dict() for r in self.not_run],
        }  # fmt: skip

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> PackageReport:
        # reports written by earlier versions have no "adapter"
        return cls(kernel=data["kernel"], path=data["path"], origin=data["origin"], isolated=data["isolated"],
                   results=[RunResult.from_dict(r) for r in data["results"]], error=data["error"],
                   adapter=data.get("adapter"), not_run=[RunResult.from_dict(r) for r in data.get("notRun", ())])  # fmt: skip
