"""The workgroup memory sizing of this tree against its first version (commit cfbdc8c, read with
`git show`): a function's own const, and the time on shaders of many functions with nested
comments, which the first version scanned in time quadratic in their length.

    python3 scripts/workgroup_sizing_cost.py      # from the repository root
"""
import importlib.util
import subprocess
import sys
import tempfile
import time
from pathlib import Path

FIRST = "cfbdc8c"


def module(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    loaded = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(loaded)
    return loaded


source = subprocess.run(["git", "show", f"{FIRST}:src/webgpu_kernels/workgroup_memory.py"], capture_output=True,
                        text=True, check=True).stdout
with tempfile.TemporaryDirectory() as folder:
    path = Path(folder) / "first_workgroup_memory.py"
    path.write_text(source, encoding="utf-8")
    first = module(path, "first_workgroup_memory")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
from webgpu_kernels import workgroup_memory as current  # noqa: E402

shadowed = ("const N = 4096u;\nvar<workgroup> tile: array<f32, N>;\nfn helper() { const N = 1u; }\n"
            "@compute @workgroup_size(64) fn main() { tile[0] = 1.0; helper(); }")
print(f"a function's const N: {FIRST} {first.workgroup_storage(shadowed, 'main')}, "
      f"now {current.workgroup_storage(shadowed, 'main')} (correct: tile 16384)")
for n in (1000, 2000, 8000):
    wgsl = ("var<workgroup> t: array<f32, 4>;\n" + "".join(f"fn g{i}() {{ /* /* */ {{ */ }}\n" for i in range(n))
            + "@compute @workgroup_size(1) fn main() { t[0] = 1.0; }")
    for label, version in (("now", current), (FIRST, first)):
        if version is first and n > 2000:
            continue  # quadratic: minutes
        start = time.perf_counter()
        version.workgroup_storage(wgsl, "main")
        print(f"{n} functions with nested comments ({len(wgsl) // 1000} KB): {label} {time.perf_counter() - start:.3f} s")
