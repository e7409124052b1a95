"""Shared helpers for the red-team scripts: build a hostile kernel package in a temporary folder,
run one step of an attack and print how it ended.

Each script imports this module from its own folder. The packages go into one fresh folder per run,
``tempfile.mkdtemp(prefix="wk-redteam-")``, whose path is printed first; nothing is written into
the repository, and the folder is left in place so that a CLI follow-up can open the package.

A step's line reads ``[label] ... OK (0.01s): result``, ``[label] ... PROJECT SomeError (0.01s):
message`` (a KernelError: the engine refused the package) or ``[label] ... RAW SomeError``
(any other exception: a bug, with a short traceback). The label is printed and flushed before the
step runs, so a crash or a hang shows which step it was in. ``exit_status()`` gives the script's
exit status: 0 if every step succeeded, 1 if one was refused with a KernelError, 2 after a raw
exception.
"""
import copy
import json
import tempfile
import time
import traceback
from pathlib import Path

import webgpu_kernels as wk

# A plain elementwise kernel, Y = 2 * A, that each attack changes.
BASE: dict = {
    "domain": "com.evil",
    "name": "Op",
    "sinceVersion": 1,
    "inputs": [{"role": "A", "dtype": "T"}],
    "outputs": [{"role": "Y", "dtype": "T", "rank": "ranks.A", "shape": "shapes.A"}],
    "attributes": {"alpha": 1.0, "s": "x"},
    "typeConstraints": {"T": ["float32"]},
    "tunables": {"WG": 64},
    "derive": {"n": "numel(shapes.A)"},
    "constants": {"scalar": "dtypes.T"},
    "variants": [{
        "id": "v",
        "passes": [{
            "id": "main",
            "shader": "k.wgsl.jinja",
            "bindings": [
                {"name": "a", "arg": "A", "buffer": {"type": "read-only-storage"}, "elementType": "$scalar"},
                {"name": "y", "arg": "Y", "buffer": {"type": "storage"}, "elementType": "$scalar"},
                {"name": "params", "semantic": "kernel.params", "buffer": {"type": "uniform"},
                 "struct": {"name": "Params", "fields": [{"name": "count", "type": "u32", "value": "n"}]}},
            ],
            "dispatch": {"threads": "n", "workgroupSize": "tunables.WG"},
        }],
    }],
}

# BASE's template. Attacks replace BODY (or "@compute") with their own text.
GOOD = """{{ enables }}
{{ declarations }}
@compute @workgroup_size({{ workgroupSize }})
fn {{ entryPoint }}({{ entryParams }}) {
  let i = {{ globalIndex }};
  if (i >= params.count) { return; }
  y[i] = a[i] * 2.0;
}
"""
BODY = "  y[i] = a[i] * 2.0;"

# The input shapes that render() and explain() are given: one float32 vector of 8.
SHAPES = {"A": ((8,), "float32")}

_root: Path | None = None
_worst = 0  # 0: every step succeeded; 1: a KernelError; 2: another exception


def package_root() -> Path:
    """The folder this run writes its packages into, made (and printed) on first use."""
    global _root
    if _root is None:
        _root = Path(tempfile.mkdtemp(prefix="wk-redteam-"))
        print(f"packages in {_root}", flush=True)
    return _root


def make(name: str, template: str | None = GOOD, manifest: dict | None = None,
         extra: dict[str, str | bytes] | None = None) -> Path:
    """Write package folder NAME: manifest.json (BASE unless MANIFEST is given), k.wgsl.jinja, and
    EXTRA's files (relative path -> text or bytes). Returns the folder."""
    folder = package_root() / name
    folder.mkdir()
    (folder / "manifest.json").write_text(json.dumps(copy.deepcopy(manifest or BASE)))
    if template is not None:
        (folder / "k.wgsl.jinja").write_text(template)
    for rel, content in (extra or {}).items():
        path = folder / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content)
    return folder


def attempt(label: str, step):
    """Run STEP(), print how it ended and how long it took; return its result, or None if it raised."""
    global _worst
    print(f"[{label}] ...", end=" ", flush=True)
    start = time.monotonic()
    try:
        result = step()
    except Exception as e:
        kind = "PROJECT" if isinstance(e, wk.KernelError) else "RAW"
        print(f"{kind} {type(e).__name__} ({time.monotonic() - start:.2f}s): {str(e)[:400]}", flush=True)
        if kind == "RAW":
            traceback.print_exc(limit=6)
        _worst = max(_worst, 1 if kind == "PROJECT" else 2)
        return None
    print(f"OK ({time.monotonic() - start:.2f}s): {repr(result)[:400]}", flush=True)
    return result


def render(folder: Path) -> dict[str, str]:
    """Load the package in FOLDER and render its WGSL for SHAPES, pass id -> text."""
    return wk.load_kernel(folder).render(SHAPES)


def exit_status() -> int:
    """0 if every attempt succeeded, 1 if one raised a KernelError, 2 if one raised anything else."""
    return _worst
