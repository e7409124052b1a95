"""f4: the wgsl_float and wgsl_uint filters hung a render by repr()-ing a huge nested tuple.

Attack: the template builds ``t`` by ``{% set t = (t, t) %}`` repeated DOUBLINGS times at top
level: only references, so it is cheap, but it has 2^DOUBLINGS leaves. It then passes ``t`` where a
number or string belongs. The filters' error messages used ``{value!r}``, which walked every leaf
outside any budget charge. The other NAMES try the same tuple against other filters, tests and
operators (the helper-12 review found them bounded); with no NAMES the script runs them all.

Before: ``t|wgsl_float`` with 20 doublings took 7 s, 22 took 14 s, and 40 was still
rendering when killed at 90 s, past the 10 s render deadline.

Now (lavapipe, 2 shared cores): the filters quote a bad argument by its type and at most 40
characters: TemplateError ('wgsl_float needs a number, got (((((... (tuple)') after 2 to 3 s, and the
script exits 1; all 29 uses together end within 7 s, each with a project error or a small result.

    python3 scripts/redteam/f4_filter_repr_hang.py 40 wgsl_float_repr
"""
import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from hostile_package import attempt, exit_status, make, render  # noqa: E402

# name -> what the template does with t
USES = {
    "wgsl_float_repr": "{{ t|wgsl_float }}",
    "wgsl_uint_repr": "{{ t|wgsl_uint }}",
    "wgsl_float_suffix": "{{ 1.0|wgsl_float(t) }}",
    "round_repr": "{{ 1.0|round(t) }}",
    "include_list": "{% include [t] %}",
    "emit": "{{ t }}",
    "eq": "{{ t == u }}",  # u: a second tuple built like t
    "abs": "{{ t|abs }}",
    "int": "{{ t|int }}",
    "float": "{{ t|float }}",
    "first": "{{ t|first|length }}",
    "default": "{{ t|default(1)|length }}",
    "trim": "{{ 'x'|trim(t) }}",
    "range": "{{ range(t) }}",
    "dictkey": "{{ {t: 1}|length }}",
    "macro_kw": "{% macro m(a) %}{% endmacro %}{{ m(t, t) }}",
    "idx": "{{ [1][t] }}",
    "dict_idx": "{{ {}[t] }}",
    "dict_items_arg": "{{ {}.items(t) }}",
    "join": "{{ t|join }}",
    "list": "{{ t|list|length }}",
    "in_str": "{{ t in 'abc' }}",
    "replace_count": "{{ 'x'|replace('x','y',t) }}",
    "indent_first": "{{ 'x'|indent(2, t) }}",
    "test_number": "{{ t is number }}",
    "test_odd": "{{ t is odd }}",
    "mul": "{{ t * 2 }}",
    "add": "{{ (t + t)|length }}",
    "neg": "{{ -t }}",
}

parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
parser.add_argument("doublings", type=int, nargs="?", default=40, help="t has 2^DOUBLINGS leaves (default 40)")
parser.add_argument("names", nargs="*", metavar="NAME", help=f"the uses to try (default all): {', '.join(USES)}")
args = parser.parse_args()
if set(args.names) - set(USES):
    parser.error(f"unknown NAME: {', '.join(sorted(set(args.names) - set(USES)))}")


def doubled(name: str) -> str:
    """Jinja that sets NAME to a tuple of 2^DOUBLINGS zeros, built by reference."""
    return "{%% set %s = (0,) %%}" % name + "{%% set %s = (%s, %s) %%}" % (name, name, name) * args.doublings


for name, use in USES.items():
    if args.names and name not in args.names:
        continue
    template = doubled("t") + (doubled("u") if name == "eq" else "") + use
    folder = make(name, template=template)
    attempt(name, lambda: render(folder)["main"][:200])
sys.exit(exit_status())
