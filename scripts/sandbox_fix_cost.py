"""What two sandbox and rendering fixes bought, on the CPU machine (no GPU work):

- blanking WGSL comments before the depth checks: the regular expression the engine used
  (``//[^\\n]*|/\\*.*?\\*/``) against ``rendering._blank_comments``, on text of unclosed ``/*a``;
- ``([s] * 100000) | max`` of a 1 MiB ``s`` in a template, rendered by the ``src`` folder given
  (default: this tree's); give the old tree's to see what it cost before the fix
  (``git worktree add /tmp/ab-old 5028337``, then ``--src /tmp/ab-old/src``).

    python3 scripts/sandbox_fix_cost.py [--src DIR]
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from pathlib import Path

OLD_COMMENTS = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--src", default=str(Path(__file__).resolve().parent.parent / "src"))
    args = parser.parse_args()
    sys.path.insert(0, args.src)
    from webgpu_kernels.templates import TemplateSandbox

    try:
        from webgpu_kernels.rendering import _blank_comments
    except ImportError:  # a tree from before the fix
        _blank_comments = None
    for repeats in (20000, 30000, 40000):
        text = "/*a" * repeats
        start = time.perf_counter()
        OLD_COMMENTS.sub(lambda m: "\n" * m.group().count("\n"), text)
        line = f"{len(text)} bytes of '/*a': the old regular expression {time.perf_counter() - start:.2f} s"
        if _blank_comments is not None:
            start = time.perf_counter()
            _blank_comments(text)
            line += f", _blank_comments {time.perf_counter() - start:.4f} s"
        print(line)
    if _blank_comments is not None:
        start = time.perf_counter()
        _blank_comments("/*a" * 349525)
        print(f"1 MiB of '/*a': _blank_comments {time.perf_counter() - start:.3f} s")
    source = "{% set s = 'x' * 1000000 %}{{ ([s] * 100000)|max }}"
    start = time.perf_counter()
    try:
        outcome = f"rendered {len(TemplateSandbox().from_string(source).render())} characters"
    except Exception as exc:  # the fixed sandbox refuses it
        outcome = f"{type(exc).__name__}: {str(exc)[:90]}"
    print(f"{source!r} ({args.src}): {outcome} in {time.perf_counter() - start:.3f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
