"""The command line's entry: ``python -m webgpu_kernels`` and the ``webgpu-kernels`` console script.

Imported here, inside the entry, Ctrl-C during the command line's import ends as Ctrl-C in a
command does (one line, status 130); imported by the console script itself, it printed a
KeyboardInterrupt traceback. The heavy part of the start-up (numpy, jsonschema, the engine) comes
later, with the command's module, inside the group's own Ctrl-C handler (``cli.KernelGroup``). The
package's own import is light (``__init__.py``), so nothing heavy runs before this function.
"""

from __future__ import annotations

import sys


def main() -> None:
    """Import the command line and run it."""
    try:
        from .cli import main as cli
    except KeyboardInterrupt:
        sys.stderr.write("interrupted\n")  # what the commands print (rich may not be imported yet)
        raise SystemExit(130) from None
    cli()


if __name__ == "__main__":
    main()
