#!/usr/bin/env bash
# Mutation testing of src modules with mutmut (`pip install mutmut`, 3.8 used; not a project dependency), each module
# against the test files given, in a throwaway clone of this checkout's HEAD, so the tree is never touched:
#   bash scripts/mutants.sh MODULE[:TEST_FILE,...] ...      e.g.  bash scripts/mutants.sh selection comparison:tests/test_comparison.py
# TEST_FILE defaults to tests/test_MODULE.py; any pytest argument may stand in the list (--deselect=...). Per module it
# prints the counts and writes $MUTANTS_OUT (default /tmp/mutants)/MODULE.txt (every mutant not killed) and .diff.
# process_isolation = forkserver: with mutmut's default each mutant runs in a child forked from a process that already
# opened the WebGPU device, which the engine refuses, so every mutant a GPU test reached counted as killed (session 64).
# mutmut renames functions (x_NAME__mutmut_orig): a test asserting a TypeError's text that names one needs --deselect
# (tests/test_expressions.py::test_a_call_with_the_wrong_arguments_names_the_function_as_the_language_does).
# So do tests comparing a warning's filename with __file__ (mutmut's trampoline moves it: tests/test_tuning.py's
# damaged-file and file-as-tuning-dir tests). A baseline failure prints only "failed to collect stats": add
# `debug = true` to the [mutmut] section to see it. `mutmut apply` of a mutant of an @overload-ed method (Kernel.__call__)
# writes it over the first stub, leaving the method as it was: apply those by hand (session 65).
set -uo pipefail
out=${MUTANTS_OUT:-/tmp/mutants}
work=$(mktemp -d)
mkdir -p "$out" && git clone -q "$(git rev-parse --show-toplevel)" "$work/repo" && cd "$work/repo" || exit 2
export XDG_RUNTIME_DIR=$(mktemp -d)
for spec in "$@"; do
  module=${spec%%:*}; tests=${spec#*:}; [ "$tests" = "$spec" ] && tests=tests/test_$module.py
  { echo "[mutmut]"; echo "process_isolation = forkserver"; echo "source_paths = src/webgpu_kernels/$module.py"
    echo "pytest_add_cli_args_test_selection ="; tr ',' '\n' <<< "$tests" | sed 's/^/    /'
    echo "also_copy ="; printf '    %s\n' tests/ src/ docs/ examples/ scripts/ README.md .ci/; } > setup.cfg
  rm -rf mutants
  nice mutmut run --max-children "$(nproc)" > "$out/$module.log" 2>&1
  mutmut results 2>/dev/null | grep -v '^$' > "$out/$module.txt"
  for name in $(awk -F: '{print $1}' "$out/$module.txt"); do mutmut show "$name" 2>/dev/null; done > "$out/$module.diff"
  echo "$module: $(tr '\r' '\n' < "$out/$module.log" | grep -a '🎉' | tail -1 | sed 's/^[^0-9]*//')  (not killed: $out/$module.txt)"
done
rm -rf "$work"
