"""f5: the trim filter with characters took quadratic time in one uninterruptible step.

Attack: ``{{ s|trim(c)|length }}`` where s is N copies of U+1F600 and c is N-1 copies of U+1F601
followed by one U+1F600. Python's ``str.strip(chars)`` scans all of chars for every character it
strips, so this is N * N steps inside one filter call, where the render deadline cannot stop it.

Before: N 131072 took 45 s to render; at the allowed 1 MiB of text it extrapolates
to about 48 minutes.

Now (lavapipe, 2 shared cores): trim deduplicates the characters and, past 64 distinct ones, strips
through a set: the render takes about 2 s (3.6 s and 134 MB for the whole script), at N 1048576 as
at 131072; exit 0.

    python3 scripts/redteam/f5_trim_quadratic.py 131072
"""
import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from hostile_package import GOOD, attempt, exit_status, make, render  # noqa: E402

parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
parser.add_argument("n", type=int, nargs="?", default=131072, help="characters in s and in c (default 131072)")
args = parser.parse_args()

trim = ("{%% set s = '\U0001F600' * %d %%}{%% set c = '\U0001F601' * %d ~ '\U0001F600' %%}"
        "// {{ s|trim(c)|length }}\n" % (args.n, args.n - 1))
folder = make("trim_quadratic", template=trim + GOOD)
attempt(f"trim_quadratic n={args.n}", lambda: render(folder)["main"][:40])
sys.exit(exit_status())
