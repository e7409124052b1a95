"""The command line's entry: ``python -m webgpu_kernels`` and the ``webgpu-kernels`` console script.

Importing the command line is most of its start-up (numpy, jsonschema, the engine). Imported
here, inside the entry, Ctrl-C during it ends as Ctrl-C in a command does (one line, status 130);
imported by the console script itself, it printed a KeyboardInterrupt traceback. The package's
own import is light (``__init__.py``), so nothing heavy runs before this function.
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
