"""What ``webgpu-kernels validate`` reports: problems (severity, file, JSON path or template line,
variant, dtype), per variant x dtype coverage of the GPU stage, and the collector the stages fill."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from .manifest import Manifest

ERROR, WARNING = "error", "warning"
#: Progress events: ("total", n), ("start", {"variant", "dtype", "case"}), ("advance", 1).
Progress = Callable[[str, Any], None]


@dataclass
class Problem:
    severity: str  # "error" | "warning"
    file: str  # package-relative name
    json_path: str  # "" when the problem is about the file as a whole
    message: str
    variant: str | None = None
    dtype: str | None = None
    line: int | None = None  # template line
    case: str | None = None  # the case whose shapes showed the problem
    #: About this adapter, not the package (a case beyond its binding limit, no shader-f16): a larger
    #: GPU runs it, so `validate --strict` does not fail on it.
    adapter_only: bool = False
    #: The other variant x dtype pairs whose error this also is (reported once, under this pair): all of
    #: them, where the message names four, so that a report per pair (JUnit's) reads no message text.
    also: tuple[tuple[str, str], ...] = ()

    def location(self) -> str:
        where = self.file
        if self.line:
            where += f":{self.line}"
        if self.json_path:
            where += f" {self.json_path}"
        return where

    def place(self) -> str:
        """Where the text and JUnit reports say it is: its location, else what it is about, this
        adapter (no shader-f16: a larger GPU has it) or the package as a whole."""
        return self.location() or ("(adapter)" if self.adapter_only else "(package)")

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["jsonPath"] = data.pop("json_path")
        data["adapterOnly"] = data.pop("adapter_only")
        data["also"] = [list(pair) for pair in self.also]  # JSON has no tuples: [[variant, dtype], ...]
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Problem:
        return cls(severity=data["severity"], file=data["file"], json_path=data["jsonPath"], message=data["message"],
                   variant=data.get("variant"), dtype=data.get("dtype"), line=data.get("line"),
                   case=data.get("case"), adapter_only=data.get("adapterOnly", False),
                   also=tuple((v, d) for v, d in data.get("also", ())))  # fmt: skip


@dataclass
class Coverage:
    """What the GPU stage did for one variant x dtype."""

    variant: str
    dtype: str
    cases: int = 0  # cases (test and bench) whose shapes this variant accepts
    pipelines: int = 0  # distinct shaders compiled
    failed: int = 0  # render or compile failures
    refused: int = 0  # cases this adapter's limits refuse (workgroup size or memory, a binding's size)
    note: str = ""
    seconds: float = 0.0  # spent on its cases: resolving, rendering and compiling (JUnit's testcase time)
    #: No case exercises it, and this test.json case forces the variant on the dtype and expects
    #: the VariantRejectedError its `when` gives: the refusal is meant, not a gap in the cases.
    expected_refusal: str | None = None

    @property
    def status(self) -> str:
        if self.failed:
            return "failed"
        if self.note:
            return self.note
        if self.pipelines:
            return "compiled"
        if self.expected_refusal is not None:
            return f"refused, as test.json expects (case {self.expected_refusal})"
        # cases reached it, but the adapter refused every one: "not exercised" had sent authors to add cases
        return "refused by this adapter" if self.refused else "not exercised"

    def as_dict(self) -> dict[str, Any]:
        return {"variant": self.variant, "dtype": self.dtype, "cases": self.cases, "pipelines": self.pipelines,
                "failed": self.failed, "refused": self.refused, "status": self.status, "note": self.note,
                "expectedRefusal": self.expected_refusal, "seconds": self.seconds}  # fmt: skip

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Coverage:
        return cls(variant=data["variant"], dtype=data["dtype"], cases=data["cases"], pipelines=data["pipelines"],
                   failed=data["failed"], refused=data.get("refused", 0), note=data.get("note", ""),
                   seconds=data.get("seconds", 0.0), expected_refusal=data.get("expectedRefusal"))  # fmt: skip


@dataclass
class ValidationReport:
    path: str
    op_id: str | None = None
    adapter: str | None = None
    problems: list[Problem] = field(default_factory=list)
    coverage: list[Coverage] = field(default_factory=list)
    #: What was looked at: files digested, expressions, templates, test and bench cases.
    checked: dict[str, int] = field(default_factory=dict)
    isolated: bool = False
    #: Why the stages that need the compiled manifest did not run (None: they ran, or it did not load).
    skipped: str | None = None
    #: How long the validation took (isolated: from the child's spawn to its end).
    seconds: float = 0.0

    @property
    def errors(self) -> list[Problem]:
        return [p for p in self.problems if p.severity == ERROR]

    @property
    def warnings(self) -> list[Problem]:
        return [p for p in self.problems if p.severity == WARNING]

    @property
    def ok(self) -> bool:
        return not self.errors

    @property
    def package_warnings(self) -> list[Problem]:
        """The warnings about the package itself (what `validate --strict` fails on)."""
        return [p for p in self.warnings if not p.adapter_only]

    @property
    def uncompiled(self) -> int:
        """Variant x dtype pairs that compiled no pipeline and did not fail (no case reached them,
        or this adapter rejects them): a valid package not wholly checked on this adapter. A pair
        whose refusal test.json expects is not counted: no call of it ever compiles."""
        return sum(1 for c in self.coverage if not c.pipelines and not c.failed and c.expected_refusal is None)

    def as_dict(self) -> dict[str, Any]:
        return {
            "path": self.path, "op": self.op_id, "adapter": self.adapter, "isolated": self.isolated, "ok": self.ok,
            "errors": len(self.errors), "warnings": len(self.warnings), "uncompiled": self.uncompiled,
            "checked": dict(self.checked), "skipped": self.skipped, "problems": [p.as_dict() for p in self.problems],
            "coverage": [c.as_dict() for c in self.coverage], "seconds": self.seconds,
        }  # fmt: skip

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ValidationReport:
        return cls(path=data["path"], op_id=data["op"], adapter=data["adapter"], isolated=data["isolated"],
                   problems=[Problem.from_dict(p) for p in data["problems"]],
                   coverage=[Coverage.from_dict(c) for c in data["coverage"]],
                   checked=dict(data.get("checked", {})), skipped=data.get("skipped"),
                   seconds=data.get("seconds", 0.0))  # fmt: skip


class ProblemCollector:
    """Problems as the stages find them, each reported once."""

    def __init__(self) -> None:
        self.problems: list[Problem] = []
        self.counts: dict[str, int] = {}
        self._seen: dict[tuple[Any, ...], Problem] = {}

    def add(self, severity: str, file: str, json_path: str, message: str, **extra: Any) -> Problem | None:
        key = (severity, file, json_path, message, extra.get("variant"), extra.get("dtype"), extra.get("line"))
        if key in self._seen:
            return None
        problem = Problem(severity, file, json_path, message, **extra)
        self._seen[key] = problem
        self.problems.append(problem)
        return problem

    def error(self, file: str, json_path: str, message: str, **extra: Any) -> Problem | None:
        return self.add(ERROR, file, json_path, message, **extra)

    def warning(self, file: str, json_path: str, message: str, **extra: Any) -> Problem | None:
        return self.add(WARNING, file, json_path, message, **extra)


def shader_path(manifest: Manifest, variant_index: int, pass_index: int) -> str:
    """The JSON path of a pass's template name, in whichever of the two spellings the manifest used."""
    raw = manifest.raw["variants"][variant_index]["passes"][pass_index]
    base = f"variants[{variant_index}].passes[{pass_index}]"
    return f"{base}.shader" if "shader" in raw else f"{base}.source.shader"
