#!/usr/bin/env bash
# One call on the H200 machine (device tool, carry [".whl", ".gl"]), bounded to fit its 10 minutes.
#   bash scripts/h200-run.sh probe   transfer breakdown and host cost per call
#   bash scripts/h200-run.sh experiments [wide|interleave|f32]   experiment packages against the embedded kernels
#   bash scripts/h200-run.sh bench [TUNING.json]   the full comparison (tuning first, or the file given, so the tuned column is real)
#   bash scripts/h200-run.sh roundtrip   the comparison on the small, model and large cases only
#   bash scripts/h200-run.sh peers   the comparison on the small and large cases, each peer's verdict
#   bash scripts/h200-run.sh tiny   small round trips against ORT next to wgpu-native's submit-and-map floor
#   bash scripts/h200-run.sh hostab [DIR]   host cost per call, this tree against DIR/src (default ab-old), interleaved
#   bash scripts/h200-run.sh tunecheck   the tuner alone on the large cases
#   bash scripts/h200-run.sh tests   the test suite on the H200
#   bash scripts/h200-run.sh testsjunit   every package through `test --junit`, then the suite
#   bash scripts/h200-run.sh wgmem   what the driver does with a shader over its workgroup memory limit
#   bash scripts/h200-run.sh bisect   which earlier test files make test 825 hang (session 25)
#   bash scripts/h200-run.sh forkfix   the fork test then test 825, old engine (.ab-old) and this one, then the suite
#   bash scripts/h200-run.sh forkab   bisect's set on the old engine (with and without the fork test) and this one
#   bash scripts/h200-run.sh warmup   the first small cases in fresh processes, with and without bench's warm-up
#   bash scripts/h200-run.sh ortcheck   ORT WebGPU's raw timing batches at 84M (scripts/ort_timing_probe.py)
#   bash scripts/h200-run.sh ortlong   the same at 8x577x4096 and 8x257x4096 with batches up to 16384 runs
#   bash scripts/h200-run.sh wait   how the host waits for a readback (scripts/wait_probe.py), then the suite
#   bash scripts/h200-run.sh packages   the third-party test packages through bench, validate and test
#   bash scripts/h200-run.sh verify   host cost per call, the packages, then the suite (after an engine change)
#   bash scripts/h200-run.sh groupnorm   demo.GroupNorm: validate, test, torch's GroupNorm, bench at SPLIT 1 and 4, tune, bench tuned
#   bash scripts/h200-run.sh groupnorm2   the same on the new defaults (1024, SPLIT 2); tunes only the cases groupnorm's did not reach
#   bash scripts/h200-run.sh layernorm   demo.LayerNorm tuned (all three tunables), then benched default against tuned
#   bash scripts/h200-run.sh hostpackages   host cost per call and the packages: verify's first half (verify can pass 600 s)
#   bash scripts/h200-run.sh matmul   demo.MatMul tuned, then benched (TFLOP/s), default, tuned and its naive variant
#   bash scripts/h200-run.sh tunematmul   tunecheck, then matmul
#   bash scripts/h200-run.sh testsmatmultune   the suite, then demo.MatMul's tuner alone
#   bash scripts/h200-run.sh headcheck   host cost per call, bench on the large cases, then the suite
#   bash scripts/h200-run.sh session64   the suite in 8 processes, then peerslarge in what is left of the call
#   bash scripts/h200-run.sh testsn [N [SECONDS]]   the suite in N processes (pytest-xdist; default 8)
#   bash scripts/h200-run.sh plancost [DIR]   a new plan's host cost and the cached call's, this tree against DIR/src (default ab-old)
#   bash scripts/h200-run.sh largetestsn   large, then testsn
#   bash scripts/h200-run.sh runaway   test --timeout against a shader that runs on, the GPU after the kill, then testsn
#   bash scripts/h200-run.sh large   host cost per call and bench on the large cases (headcheck less the suite)
#   bash scripts/h200-run.sh largepackages   large, then demo.Where and demo.Transpose through bench
#   bash scripts/h200-run.sh throttle [SECONDS] [IDLE_EVERY]   the large cases and copies round after round, beside nvidia-smi
#   bash scripts/h200-run.sh copyalloc   is a slow copy its buffers' or the moment's? then the large cases
#   bash scripts/h200-run.sh forkexit   a forked child's sys.exit, with wgpu's instance on all backends and on Vulkan alone
#   bash scripts/h200-run.sh forkfixed   a forked child's normal exit on this engine, the fork tests, then the suite
#   bash scripts/h200-run.sh forkwhere   where a forked child crashes at a normal exit, and which exits leave the parent working
#   bash scripts/h200-run.sh softmax   demo.Softmax: validate, test, one long row (wrong on lavapipe), bench; then the suite
#   bash scripts/h200-run.sh attention   com.example.Attention: validate, test, bench
#   bash scripts/h200-run.sh largeattentiontestsn   large, attention, then testsn
#   bash scripts/h200-run.sh peerslarge   host cost, then the large cases against torch and ORT WebGPU, each peer's verdict
#   bash scripts/h200-run.sh torchab   torch's peer figures from three codes of peers.py (ab-old, ab-mid, this), then testsn
#   bash scripts/h200-run.sh qgab   f16 QuickGelu's large case alone, this tree against ab-mid, alternated; then all large
#   bash scripts/h200-run.sh qgretime   f16 QuickGelu's large case alone in eight fresh processes (the under-copy re-time)
#   bash scripts/h200-run.sh kernelalloc   run Z's kernel-only slow state: the buffers' or the process's? then all large
#   bash scripts/h200-run.sh oom   buffers past the card's memory: OutOfMemoryError, the pool's trim-and-retry, a call after it
#   bash scripts/h200-run.sh newpackages   demo.CumSum and com.example.SkipLayerNormalization: validate --strict, test, bench
#   bash scripts/h200-run.sh conv   demo.Conv: validate --strict, test, torch's conv2d (scripts/torch_conv.py), bench of the defaults
#   bash scripts/h200-run.sh onnxpeers   one SD case of each shipped op, then MatMulNBits, DequantizeLinear, RotaryEmbedding and Pad beside ORT WebGPU (--compare)
#   bash scripts/h200-run.sh nbitslevel0   MatMulNBits' accuracy_level 0 cases beside ORT WebGPU, then the suite
#   bash scripts/h200-run.sh onnxpeerssuite   onnxpeers, then the suite in 8 processes
#   bash scripts/h200-run.sh packagesuite NAME [ONNX_OP]   tests/packages/NAME validated, tested and benched (checked against ONNX_OP in onnxruntime), then the suite
#   bash scripts/h200-run.sh concatsuite   packagesuite demo.Concat ai.onnx.Concat (run AH)
#   bash scripts/h200-run.sh convsuite   demo.Conv's defaults beside cuDNN (torch_conv.py), bench, then the suite in 8 processes
#   bash scripts/h200-run.sh convtune [CASE ...]   demo.Conv tuned on SD cases (default four), then benched default against tuned
#   bash scripts/h200-run.sh skiplayernorm   com.example.SkipLayerNormalization's SD cases tuned, then benched default against tuned
#   bash scripts/h200-run.sh uploads [DIR]   host memory and time of back-to-back to_gpu, this tree then DIR/src (default ab-old)
#   bash scripts/h200-run.sh bsgvariants   demo.BiasSplitGelu float16: its default (vec8) and vec4 benched alternately, validate, test, then the suite
#   bash scripts/h200-run.sh astypesuite   GpuTensor.astype against the host round trip (scripts/astype_cost.py), its and copy.copy's host time in a recorded chain (--chain), then the suite
#   bash scripts/h200-run.sh clipmlp [DIR]   examples/clip_mlp.py (f32, f16; batch 1 and 8), hostab DIR, then the suite in 8 processes
#   bash scripts/h200-run.sh chainab [DIR]   astype/copy in a chain (--chain) against DIR/src (default ab-old), hostab DIR, then the suite in 8 processes
#   bash scripts/h200-run.sh sdff   examples/sd_feed_forward.py (f32, f16; B 2 at T 4096 C 320 and T 1024 C 640), then testsn
#   bash scripts/h200-run.sh newpackages59 [DEADLINE]   the suite, then ai.onnx.Less, com.microsoft.MultiHeadAttention, Add, Cast and Gemm beside ORT WebGPU until DEADLINE s
#   bash scripts/h200-run.sh session60 [DEADLINE]   the suite, then ai.onnx.ReduceMean (its scratch-buffer variants) beside ORT WebGPU, then its one-workgroup mean_all on the same cases
#   bash scripts/h200-run.sh prefetch   the blocked GEMM's PREFETCH on and off, alternately, on Gemm's and MatMul's large cases, then their tests
#   bash scripts/h200-run.sh tuneblocked   the register-blocked GEMM's block shape searched by tune on Gemm's and MatMul's large f32 cases (dry run)
#   bash scripts/h200-run.sh session62 [DEADLINE]   the old variants where Softmax rows, Gemm rows_c/blocked_splitk_c and MatMul rows now run, then the new defaults beside ORT WebGPU, the suite, Softmax rows' VALUES_PER_LANE tuned
#   bash scripts/h200-run.sh session61 [DEADLINE]   the old variants of ai.onnx.Softmax, MatMul, Gemm on their cases, then their new defaults and ReduceMean beside ORT WebGPU, then the suite
#   bash scripts/h200-run.sh newonnxsuite   the suite, then ai.onnx.Softmax, Gemm, MatMul, Split, Gelu, LayerNormalization, ReduceMean, Add and Cast: validate --strict, test, bench --compare
# Results land in $OUT (at most 8 files come back). The wheels it needs, prepared once on the CPU machine:
#   bash ../shared/gpu/prepare.sh jsonschema jsonschema-specifications referencing rpds-py attrs typing-extensions \
#     click tqdm rich markdown-it-py mdurl pygments pytest pluggy iniconfig packaging hypothesis sortedcontainers safetensors filelock \
#     pytest-xdist execnet httpx2 httpcore2 truststore h11 anyio idna fsspec hf-xet pyyaml sniffio certifi huggingface_hub
#   (huggingface_hub and its dependencies, the eleven before it: the machine has 1.33, and `upload` needs 2.3 (run BK skipped its 47 tests); without the dependencies run AG's Hub tests failed)
set -uo pipefail
source scripts/gpu-preamble.sh
export COLUMNS=250 WEBGPU_KERNELS_TUNING_DIR=/tmp/tuning WEBGPU_KERNELS_PEER_TIMEOUT=220
# Tuning covers the large cases only: 120 s reached just the ten BiasAdd cases of the wider set (run C).
# ONNX Runtime's peer needs about 200 s for all 40 cases (170 s reached 38 in run E).
# Run I: bench took about 440 s of its limit (ORT 196 s in two processes); hence tune 60, bench 485.
# Run J (call-span timing): the whole call 402 s, ORT 192 s.
# Every peer's verdict (each *_ok) per case, read back from bench --json's peers.json
verdicts() {
  python3 -c "
import json, sys
rows = json.load(open(sys.argv[1]))['cases']
for r in rows:
    verdicts = {f'{p}.{k}': v for p, res in r.get('peers', {}).items() for k, v in res.items() if k.endswith('_ok')}
    print(r['kernel'].split('.')[-1], r['case'], r['dtype'], 'ours', r.get('error_ok'), r.get('max_error'), verdicts)
" "$OUT/peers.json" 2>&1 | tee "$OUT/peers-verdicts.log"
}
tune() { timeout "$1" python3 -m webgpu_kernels tune --tag large 2>&1 | tee "$OUT/tune.log"
         cp /tmp/tuning/*.json "$OUT/tuning.json" 2>/dev/null; }
# Each package: validate --strict, test, bench --compare beside ORT WebGPU, while SECONDS stays below DEADLINE
# (the first argument); the log in $OUT/newonnx.log, the JSON of all in one $OUT/peers.tgz (at most 8 files come back).
peer_packages() {
  local deadline=$1 log=$OUT/newonnx.log; shift
  : > "$log"; mkdir -p "$OUT/peers"
  for p in "$@"; do
    (( SECONDS > deadline - 30 )) && { echo "== $p: no time left" | tee -a "$log"; continue; }
    echo "== $p" | tee -a "$log"
    timeout 40 python3 -m webgpu_kernels validate "tests/packages/$p" --strict 2>&1 | tail -3 | tee -a "$log"
    timeout 60 python3 -m webgpu_kernels test "tests/packages/$p" 2>&1 | tail -3 | tee -a "$log"
    WEBGPU_KERNELS_PEER_TIMEOUT=50 timeout $(( deadline - SECONDS )) python3 -m webgpu_kernels bench "tests/packages/$p" \
      --compare --no-host --json "$OUT/peers/$p.json" 2>&1 | tee -a "$log"
  done
  tar czf "$OUT/peers.tgz" -C "$OUT" peers && rm -r "$OUT/peers"
}

case "${1:-bench}" in
  probe)  # transfer breakdown (READ vs READ_NOSYNC, staging vs write_buffer), host cost per call
    python3 scripts/host_cost.py 2>&1 | tee "$OUT/host.log"
    timeout 150 python3 scripts/transfer_probe.py 2>&1 | tee "$OUT/transfer.log"
    timeout 90 python3 scripts/submit_probe.py 2>&1 | tee "$OUT/submit.log"
    python3 scripts/host_cost.py 2>&1 | tee -a "$OUT/host.log" ;;
  experiments)  # experiment packages (scripts/experiments) against the embedded kernels; round: wide | interleave | f32
    timeout 200 python3 scripts/gpu_experiments.py "${2:-wide}" 2>&1 | tee "$OUT/exp.log" ;;
  bench)  # host_cost.py (a fresh process) is in `probe` since run L: bench's own host rows stay
    # [TUNING.json]: a tuning file from an earlier call (`tunecheck` returns it as tuning.json; keep
    # it in a git-ignored folder such as .tuning/ and carry that), so that all the call's time is
    # bench's: run P's tuner took 88 s and bench ran out inside ORT's peer (torch 136 s, 101 in O).
    if [ -n "${2:-}" ] && [ -f "$2" ]; then
      mkdir -p /tmp/tuning && cp "$2" /tmp/tuning/ && echo "tuning file: $2" | tee "$OUT/tune.log"
    else
      tune 90  # done 32-39 s into runs F-I, 43-50 s into K and L, 36 in N, 73 in O, 88 in P
    fi
    echo "tuning done after ${SECONDS} s" | tee -a "$OUT/tune.log"
    # Whatever tuning left of the call's 600 s, less 15 for the files (run O: bench 467 s of 490).
    timeout $(( 585 - SECONDS )) python3 -m webgpu_kernels bench --compare --json "$OUT/bench.json" --plot "$OUT/bench.png" \
      2>&1 | tee "$OUT/bench.log" ;;
  hostab)  # host cost per call of this tree against another one (an untracked copy: git archive REV src | tar -x -C DIR),
           # fresh processes, interleaved, three rounds
    for round in 1 2 3; do for side in new old; do
      src=$PWD/src; [ "$side" = old ] && src=$PWD/${2:-ab-old}/src
      echo "== $side (round $round)" | tee -a "$OUT/host-ab.log"
      PYTHONPATH=/tmp/site:$src timeout 60 python3 -c "import webgpu_kernels; print(webgpu_kernels.__file__)" 2>&1 | tee -a "$OUT/host-ab.log"
      PYTHONPATH=/tmp/site:$src timeout 60 python3 scripts/host_cost.py 2>&1 | tee -a "$OUT/host-ab.log"
    done; done ;;
  tunecheck)  # the tuner alone on the large cases (since it checks candidates' outputs and keys by package)
    tune 120; echo "tuning done after ${SECONDS} s" | tee -a "$OUT/tune.log" ;;
  tests)  # the whole suite on the real GPU (first run, before commit ddb2cbd: 1552 passed, 4 skipped, 2 errors,
          # docs/perf/h200-pytest.log; 1560 passed, 6 skipped, -3.log from `wait`; -4.log: two rendering
          # assertions behind the BiasAdd f16 template, fixed; 1635 passed, 6 skipped, -5.log; -6.log: a timing
          # test's lavapipe-only bound, fixed; 1639 passed, 6 skipped, -7.log; 1662 passed, 6 skipped, -8.log; 1673 passed, 6 skipped, -9.log; 1725 passed, 7 skipped, -10.log; 1731 passed, 7 skipped, -11.log; now 1783 passed, 7 skipped, -12.log)
    export XDG_RUNTIME_DIR=$(mktemp -d)
    # 580 s: session 27 took 358.5 s of 400 for 2657 tests; session 31 reached test 3016 of about 3120 at 499 s.
    # Session 24: the suite hung for good at test 825 on H100 and H200 (a queue.submit that never
    # returns); the plugin logs each test's start and, on a test past HANG_S, every thread's stack.
    HANG_LOG=$OUT/hang.log HANG_S=60 PYTHONPATH=scripts:$PYTHONPATH timeout 580 python3 -m pytest -q -p no:cacheprovider \
      -p hang_probe_plugin -rfEs --durations=10 2>&1 | tee "$OUT/pytest.log" ;;
  wgmem)  # session 30: a shader over maxComputeWorkgroupStorageSize, straight through wgpu (the engine refuses it)
    export XDG_RUNTIME_DIR=$(mktemp -d)
    timeout 120 python3 scripts/workgroup_memory_probe.py 2>&1 | tee "$OUT/wgmem.log" ;;
  testsjunit)  # session 30: every package's test.json through `test --junit` (the report CI systems read), then the suite
    export XDG_RUNTIME_DIR=$(mktemp -d)
    pkgs=(com.microsoft.BiasAdd com.microsoft.QuickGelu)
    for d in tests/packages/demo.*; do [ -f "$d/test.json" ] && pkgs+=("$d"); done  # ReduceSum, ScaleShift have none
    # The whole table goes to the log with the exit status (a pipe through tail had hidden the status).
    timeout 90 python3 -m webgpu_kernels test "${pkgs[@]}" --junit "$OUT/h200-junit.xml" > "$OUT/test-cli.log" 2>&1
    echo "webgpu-kernels test exit status: $?" | tee -a "$OUT/test-cli.log"; tail -n 40 "$OUT/test-cli.log"
    HANG_LOG=$OUT/hang.log HANG_S=60 PYTHONPATH=scripts:$PYTHONPATH timeout 480 python3 -m pytest -q -p no:cacheprovider \
      -p hang_probe_plugin -rfEs --durations=10 2>&1 | tee "$OUT/pytest.log" ;;
  bisect)  # session 25: which earlier test files make test 825 hang (scripts/hang_bisect.py), in the
           # suite's order; test_concurrency.py (wgpu#4877's lead) alone first; then the set found
           # again with one copy thread
    export XDG_RUNTIME_DIR=$(mktemp -d)
    files=(api bad_input benchmark bias_add buffers case_data casefile cli_bench cli cli_tune concurrency contract
           device digests docs_examples)
    files=("${files[@]/#/tests/test_}")
    timeout $(( 590 - SECONDS )) python3 scripts/hang_bisect.py --tail tests/test_execution.py --deadline $(( 575 - SECONDS )) \
      --expand --guess tests/test_concurrency.py --recheck HANG_COPY_THREADS=1 --log "$OUT/bisect.log" \
      "${files[@]/%/.py}" 2>&1 | tee "$OUT/bisect-stdout.log" ;;
  forkfix)  # session 25: bisect found test 825 hangs after test_device.py. The fork test then test 825,
            # on the old engine (carry .ab-old: src before the fork fix) and this one, then the suite
    export XDG_RUNTIME_DIR=$(mktemp -d)
    pair=(tests/test_device.py::test_a_forked_child_is_refused_instead_of_hanging
          tests/test_execution.py::test_a_dispatch_webgpu_rejects_fails_its_own_call_and_nothing_else)
    for src in "$PWD/.ab-old/src" "$PWD/src"; do
      echo "== $src" | tee -a "$OUT/pair.log"
      HANG_LOG=$OUT/hang-pair.log HANG_S=20 PYTHONPATH=scripts:/tmp/site:$src timeout 60 python3 -m pytest -q \
        -p no:cacheprovider -p hang_probe_plugin "${pair[@]}" 2>&1 | tail -3 | tee -a "$OUT/pair.log"
    done
    HANG_LOG=$OUT/hang.log HANG_S=30 PYTHONPATH=scripts:$PYTHONPATH timeout $(( 585 - SECONDS )) python3 -m pytest -q \
      -p no:cacheprovider -p hang_probe_plugin -rfEs --durations=5 2>&1 | tail -25 | tee "$OUT/pytest.log" ;;
  forkab)  # forkfix's pair passed on the old engine too: the set bisect found (run 1 of session 25),
           # old engine with and without the fork test, then this one; then test_cli.py (a test fixed for the H200)
    export XDG_RUNTIME_DIR=$(mktemp -d)
    set4=(tests/test_contract.py tests/test_device.py tests/test_digests.py tests/test_docs_examples.py tests/test_execution.py)
    fork=tests/test_device.py::test_a_forked_child_is_refused_instead_of_hanging
    for trial in "old:" "old:--deselect=$fork" "new:"; do
      src=$PWD/src; [ "${trial%%:*}" = old ] && src=$PWD/.ab-old/src
      echo "== $trial" | tee -a "$OUT/ab.log"
      HANG_LOG=$OUT/hang-ab.log HANG_S=20 PYTHONPATH=scripts:/tmp/site:$src timeout 90 python3 -m pytest -q \
        -p no:cacheprovider -p hang_probe_plugin ${trial#*:} "${set4[@]}" 2>&1 | tail -2 | tee -a "$OUT/ab.log"
      grep -h "^[0-9]" "$OUT/hang-ab.log" | tail -1 | tee -a "$OUT/ab.log"
    done
    timeout 120 python3 -m pytest -q -p no:cacheprovider tests/test_cli.py tests/test_device.py 2>&1 | tail -3 | tee -a "$OUT/ab.log" ;;
  wait)  # where a small round trip's time goes, host cost per call, then the suite
    timeout 120 python3 scripts/wait_probe.py 2>&1 | tee "$OUT/wait.log"
    timeout 120 python3 scripts/wait_probe.py 30 --map-modes 2>&1 | tee -a "$OUT/wait.log"
    timeout 30 python3 scripts/host_cost.py 2>&1 | tee "$OUT/host.log"
    export XDG_RUNTIME_DIR=$(mktemp -d)
    timeout 330 python3 -m pytest -q -p no:cacheprovider -rfEs --durations=10 2>&1 | tee "$OUT/pytest.log" ;;
  warmup)  # does bench's --warm-up fix a first case timed on a GPU that is still ramping up? (run J: 42% of copy)
    for round in 1 2; do for w in 0 2; do
      echo "=== round $round, --warm-up $w" | tee -a "$OUT/warmup.log"
      timeout 100 python3 -m webgpu_kernels bench com.microsoft.BiasAdd --case ort-test --calls 10000 --warm-up $w 2>&1 \
        | grep -v "^ *$" | tee -a "$OUT/warmup.log"
    done; done ;;
  ortcheck)  # run K read ORT's f32 BiasAdd above the datasheet peak: the raw batches of its timing
    for op in com.microsoft.BiasAdd com.microsoft.QuickGelu; do
      timeout 150 python3 scripts/ort_timing_probe.py $op 2>&1 | tee -a "$OUT/ort-timing.log"
    done ;;
  ortlong)  # run M read ORT's QuickGelu f32 at 8x577x4096 at 638 us (64-67 in runs G-J): longer batches?
    timeout 150 python3 scripts/ort_timing_probe.py com.microsoft.QuickGelu 8x577x4096 64 256 1024 4096 2>&1 | tee -a "$OUT/ort-long.log"
    timeout 150 python3 scripts/ort_timing_probe.py com.microsoft.QuickGelu 8x257x4096 64 256 1024 4096 2>&1 | tee -a "$OUT/ort-long.log"
    timeout 150 python3 scripts/ort_timing_probe.py com.microsoft.BiasAdd 16x4096x1280 64 256 1024 2>&1 | tee -a "$OUT/ort-long.log" ;;
  tiny)  # the small round trips against ORT and the submit-and-map floor, measured on one lend
    timeout 150 python3 scripts/wait_probe.py 30 2>&1 | tee "$OUT/wait.log"
    timeout 300 python3 -m webgpu_kernels bench com.microsoft.QuickGelu --case tiny --case clip-text --compare \
      --json "$OUT/bench.json" 2>&1 | tee "$OUT/bench.log" ;;
  packages)  # the third-party test packages through the same tools: demo.ReduceSum's bench.json, then 84M elements
    for dt in f32 f16; do
      timeout 60 python3 -m webgpu_kernels bench tests/packages/demo.ReduceSum -i X=16x4096x1280:$dt --no-host \
        --json "$OUT/reduce-large-$dt.json" 2>&1 | tee -a "$OUT/packages.log"
    done
    timeout 90 python3 -m webgpu_kernels bench tests/packages/demo.ReduceSum --no-host --json "$OUT/reduce.json" 2>&1 \
      | tee -a "$OUT/packages.log"
    timeout 60 python3 -m webgpu_kernels validate tests/packages/demo.Gather 2>&1 | tee -a "$OUT/packages.log"
    timeout 60 python3 -m webgpu_kernels test tests/packages/demo.Gather 2>&1 | tee -a "$OUT/packages.log"
    timeout 90 python3 -m webgpu_kernels bench tests/packages/demo.Gather --no-host --json "$OUT/gather.json" 2>&1 \
      | tee -a "$OUT/packages.log"
    timeout 60 python3 -m webgpu_kernels validate tests/packages/demo.LayerNorm 2>&1 | tee -a "$OUT/packages.log"
    timeout 60 python3 -m webgpu_kernels test tests/packages/demo.LayerNorm 2>&1 | tee -a "$OUT/packages.log"
    timeout 120 python3 -m webgpu_kernels bench tests/packages/demo.LayerNorm --no-host --json "$OUT/layer-norm.json" 2>&1 \
      | tee -a "$OUT/packages.log" ;;
  groupnorm)  # session 31: demo.GroupNorm: validate, test, torch's GroupNorm (scripts/torch_group_norm.py), bench of a
              # copy at SPLIT 1 (one workgroup per group, its first design) and of the package (SPLIT 4), tune, bench tuned
    export XDG_RUNTIME_DIR=$(mktemp -d)
    gn=tests/packages/demo.GroupNorm one=/tmp/split1/demo.GroupNorm log=$OUT/group-norm.log
    timeout 60 python3 -m webgpu_kernels validate $gn 2>&1 | tail -n 2 | tee "$log"
    timeout 90 python3 -m webgpu_kernels test $gn > /tmp/gn-test.log 2>&1
    echo "webgpu-kernels test exit status: $?" | tee -a "$log"; tail -n 3 /tmp/gn-test.log | tee -a "$log"
    timeout 90 python3 scripts/torch_group_norm.py --json "$OUT/gn-torch.json" 2>&1 | tee -a "$log"
    mkdir -p /tmp/split1 && cp -r $gn $one && sed -i 's/"SPLIT": 4 }/"SPLIT": 1 }/' $one/manifest.json \
      && python3 -m webgpu_kernels digest $one >/dev/null && grep -o '"SPLIT": [0-9]*' $one/manifest.json | tee -a "$log"
    timeout 90 python3 -m webgpu_kernels bench $one --no-host --json "$OUT/gn-split1.json" 2>&1 | tee -a "$log"
    timeout 90 python3 -m webgpu_kernels bench $gn --no-host --json "$OUT/gn-default.json" 2>&1 | tee -a "$log"
    timeout 150 python3 -m webgpu_kernels tune $gn 2>&1 | tee -a "$log"
    cp /tmp/tuning/*.json "$OUT/gn-tuning.json" 2>/dev/null
    timeout 90 python3 -m webgpu_kernels bench $gn --no-host --json "$OUT/gn-tuned.json" 2>&1 | tee -a "$log" ;;
  groupnorm2)  # session 31, after the defaults became WORKGROUP_SIZE 1024 and SPLIT 2: validate, test, bench the
               # defaults, tune the cases groupnorm's tuner did not reach in its 150 s, bench default against tuned
    export XDG_RUNTIME_DIR=$(mktemp -d)
    gn=tests/packages/demo.GroupNorm log=$OUT/group-norm-2.log
    timeout 60 python3 -m webgpu_kernels validate $gn 2>&1 | tail -n 1 | tee "$log"
    timeout 90 python3 -m webgpu_kernels test $gn > /tmp/gn-test.log 2>&1
    echo "webgpu-kernels test exit status: $?" | tee -a "$log"; tail -n 2 /tmp/gn-test.log | tee -a "$log"
    timeout 90 python3 -m webgpu_kernels bench $gn --no-host --json "$OUT/gn-default-2.json" 2>&1 | tee -a "$log"
    timeout 150 python3 -m webgpu_kernels tune $gn --case 'turbo*' --case 'vae*' --case '*8x8' 2>&1 | tee -a "$log"
    cp /tmp/tuning/*.json "$OUT/gn-tuning-2.json" 2>/dev/null
    timeout 90 python3 -m webgpu_kernels bench $gn --no-host --case 'turbo*' --case 'vae*' --case '*8x8' \
      --json "$OUT/gn-tuned-2.json" 2>&1 | tee -a "$log" ;;
  layernorm)  # demo.LayerNorm: the tuner over its three tunables (coordinate search), then bench, default against tuned
    timeout 240 python3 -m webgpu_kernels tune tests/packages/demo.LayerNorm 2>&1 | tee "$OUT/layer-norm-tune.log"
    cp /tmp/tuning/*.json "$OUT/layer-norm-tuning.json" 2>/dev/null
    timeout 120 python3 -m webgpu_kernels bench tests/packages/demo.LayerNorm --no-host --json "$OUT/layer-norm-tuned.json" 2>&1 \
      | tee "$OUT/layer-norm-bench.log" ;;
  matmul)  # demo.MatMul (compute-bound): tuned (TILE, WORKGROUP_SIZE), then benched with TFLOP/s from bench.json's
           # flops, default against tuned, then the naive variant on every case (bench --variant)
    timeout 200 python3 -m webgpu_kernels tune tests/packages/demo.MatMul 2>&1 | tee "$OUT/matmul-tune.log"
    cp /tmp/tuning/*.json "$OUT/matmul-tuning.json" 2>/dev/null
    timeout 120 python3 -m webgpu_kernels bench tests/packages/demo.MatMul --no-host --json "$OUT/matmul.json" 2>&1 \
      | tee "$OUT/matmul-bench.log"
    timeout 90 python3 -m webgpu_kernels bench tests/packages/demo.MatMul --variant naive --no-host --warm-up 0.5 \
      --json "$OUT/matmul-naive.json" 2>&1 | tee "$OUT/matmul-naive.log" ;;
  testsmatmultune)  # the suite, then demo.MatMul's tuner alone (how long its search takes, not its figures)
    bash "$0" tests
    timeout 150 python3 -m webgpu_kernels tune tests/packages/demo.MatMul 2>&1 | tee "$OUT/matmul-tune.log"
    echo "done after ${SECONDS} s" | tee -a "$OUT/matmul-tune.log"
    cp /tmp/tuning/*.json "$OUT/matmul-tuning.json" 2>/dev/null ;;
  tunematmul)  # the tuner on the shipped kernels' large cases (tunecheck), then demo.MatMul (matmul)
    bash "$0" tunecheck; bash "$0" matmul ;;
  hostpackages)  # verify less the suite, for a call of its own
    timeout 60 python3 scripts/host_cost.py 2>&1 | tee "$OUT/host.log"
    bash "$0" packages ;;
  verify)  # after a change to the engine: host cost per call (a fresh process), the third-party packages, the suite
    timeout 60 python3 scripts/host_cost.py 2>&1 | tee "$OUT/host.log"
    bash "$0" packages
    bash "$0" tests ;;
  throttle)  # the 84M slow state (runs O, P): the large cases and their copies round after round, beside nvidia-smi
    F="timestamp,temperature.gpu,temperature.memory,clocks.sm,clocks.mem,power.draw,utilization.gpu,utilization.memory"
    for extra in clocks_event_reasons.active clocks_throttle_reasons.active ""; do
      nvidia-smi --query-gpu="$F${extra:+,$extra}" --format=csv,noheader >/dev/null 2>&1 && { F="$F${extra:+,$extra}"; break; }
    done
    nvidia-smi -q -d PERFORMANCE,CLOCK,TEMPERATURE,POWER > "$OUT/smi-before.txt" 2>&1
    nvidia-smi --query-gpu="$F" --format=csv -lms 250 > "$OUT/smi.csv" 2>&1 & smi=$!
    sleep 5  # idle baseline: is anything else using the GPU?
    timeout "${2:-300}" python3 scripts/throttle_probe.py "$(( ${2:-300} - 20 ))" "${3:-0}" 2>&1 | tee "$OUT/throttle.log"
    nvidia-smi -q -d PERFORMANCE,CLOCK,TEMPERATURE,POWER > "$OUT/smi-after.txt" 2>&1
    kill $smi ;;
  copyalloc)  # the slow copy (1.66-1.70 TB/s): fresh buffers or the moment? (scripts/copy_alloc_probe.py), then the large cases
    timeout 260 python3 scripts/copy_alloc_probe.py 60 240 2>&1 | tee "$OUT/copy-alloc.log"
    timeout 150 python3 -m webgpu_kernels bench --tag large --no-host --json "$OUT/large.json" 2>&1 | tee "$OUT/large.log" ;;
  uploads)  # back-to-back uploads with no dispatch between them (scripts/upload_memory_probe.py), this tree against DIR
    for src in "$PWD/src" "$PWD/${2:-ab-old}/src"; do
      echo "== $src" | tee -a "$OUT/uploads.log"
      PYTHONPATH=/tmp/site:$src timeout 100 python3 scripts/upload_memory_probe.py 100 16 2>&1 | tee -a "$OUT/uploads.log"
    done ;;
  forkexit)  # session 26: a child's sys.exit broke the parent's device; is it the OpenGL driver's exit
             # handlers (listing adapters loads it)? The same child with wgpu's instance on Vulkan alone
    for backends in "" Vulkan Vulkan ""; do
      echo "== backends ${backends:-all}" | tee -a "$OUT/fork-exit.log"
      FORK_PROBE_BACKENDS=$backends timeout 70 python3 scripts/fork_probe.py sysexit 2 2>&1 | tee -a "$OUT/fork-exit.log"
    done ;;
  forkwhere)  # session 27: forkexit found Vulkan alone crashes the same. Where does the child crash (its
              # interpreter's teardown or the C exit handlers after it), and which exit leaves the parent working?
    for work in sysexit-fh closefds atexit-exit closefds; do
      echo "== child $work" | tee -a "$OUT/fork-where.log"
      FORK_PROBE_WAIT_S=30 timeout 45 python3 scripts/fork_probe.py $work 2 2>&1 | grep -v '^  File\|^Thread\|^$' | tee -a "$OUT/fork-where.log"
    done ;;
  forkfixed)  # session 27: the child now skips its inherited C exit handlers (device._skip_inherited_exit_handlers);
              # its normal exit, then the fork tests and the suite
    for round in 1 2; do
      echo "== child sysexit, round $round" | tee -a "$OUT/fork-fixed.log"
      FORK_PROBE_WAIT_S=30 timeout 45 python3 scripts/fork_probe.py sysexit 2 2>&1 | grep -v '^  File\|^Thread\|^$' | tee -a "$OUT/fork-fixed.log"
    done
    export XDG_RUNTIME_DIR=$(mktemp -d)
    timeout 60 python3 -m pytest -q -p no:cacheprovider -k "fork" tests/test_device.py tests/test_forks.py 2>&1 | tail -3 | tee -a "$OUT/fork-fixed.log"
    bash "$0" tests ;;
  large)  # host cost per call and the large cases alone (headcheck's first half: with the suite it can pass 600 s)
    timeout 60 python3 scripts/host_cost.py 2>&1 | tee "$OUT/host.log"
    timeout 150 python3 -m webgpu_kernels bench --tag large --no-host --json "$OUT/large.json" 2>&1 | tee "$OUT/large.log" ;;
  peerslarge)  # session 43: host cost, then the large cases against torch (eager, compile; now warmed up as ours
              # and each span behind queued launches) and ORT WebGPU, every peer's verdict
    timeout 60 python3 scripts/host_cost.py 2>&1 | tee "$OUT/host.log"
    WEBGPU_KERNELS_PEER_TIMEOUT=200 timeout "${PEERS_LIMIT:-420}" python3 -m webgpu_kernels bench --compare --tag large --json "$OUT/peers.json" \
      --plot "$OUT/peers.png" 2>&1 | tee "$OUT/peers.log"
    verdicts ;;
  torchab)  # session 43: torch's peer figures from three codes of peers.py, alternated, two rounds, on two large
            # cases: ab-old (before session 42's queued launches), ab-mid (before session 43's warm-up) and this tree;
            # then the suite in 8 processes (untracked ab-old, ab-mid: git archive REV src | tar -x -C DIR)
    printf '%s' '[{"id": 0, "op": "com.microsoft.QuickGelu", "attrs": {}, "compile": true,
      "inputs": {"X": {"shape": [16, 1280, 4096], "dtype": "float16"}}},
     {"id": 1, "op": "com.microsoft.BiasAdd", "attrs": {}, "compile": true,
      "inputs": {"X": {"shape": [16, 4096, 1280], "dtype": "float32"}, "bias": {"shape": [1280], "dtype": "float32"},
                 "skip": {"shape": [16, 4096, 1280], "dtype": "float32"}}}]' > /tmp/torch-cases.json
    for round in 1 2; do for side in old mid new; do
      case $side in old) src=$PWD/ab-old/src; warm=();; mid) src=$PWD/ab-mid/src; warm=();; new) src=$PWD/src; warm=(2.0);; esac
      echo "== $side (round $round)" | tee -a "$OUT/torch-ab.log"
      PYTHONPATH=/tmp/site:$src timeout 120 python3 -m webgpu_kernels.peers torch "${warm[@]}" /tmp/torch-cases.json \
        2>&1 | tee -a "$OUT/torch-ab.log"
    done; done
    bash "$0" testsn ;;
  qgab)  # session 43: run Z's f16 QuickGelu at 84M read 186 us (44% of copy, stable) where every run before read 83:
         # that case alone in fresh processes, this tree against ab-mid (9802525), alternated, three rounds; then all large
    for round in 1 2 3; do for side in new mid; do
      src=$PWD/src; [ "$side" = mid ] && src=$PWD/ab-mid/src
      echo "== $side (round $round)" | tee -a "$OUT/qg-ab.log"
      PYTHONPATH=/tmp/site:$src timeout 60 python3 -m webgpu_kernels bench com.microsoft.QuickGelu --tag large --dtype f16 \
        --no-host 2>&1 | grep -E "TB/s \(|re-timed|Error" | tee -a "$OUT/qg-ab.log"
    done; done
    timeout 150 python3 -m webgpu_kernels bench --tag large --no-host --json "$OUT/large.json" 2>&1 | tee "$OUT/large.log" ;;
  qgretime)  # session 43: f16 QuickGelu's large case alone in eight fresh processes, on the rule that times a kernel
            # under 60% of its copy once more (slow_states.under_its_copy): does a second timing on fresh buffers recover?
    for round in 1 2 3 4 5 6 7 8; do
      echo "== round $round" | tee -a "$OUT/qg-retime.log"
      timeout 60 python3 -m webgpu_kernels bench com.microsoft.QuickGelu --tag large --dtype f16 --no-host 2>&1 \
        | grep -E "TB/s \(|re-timed|Error" | tee -a "$OUT/qg-retime.log"
    done ;;
  oom)  # session 44: out of GPU memory on a real GPU: OutOfMemoryError, the pool's trim-and-retry, the device after it.
        # Held at most the card's memory plus 16 GiB and at most 100 GiB: should the driver spill to host memory, the
        # probe stops before the host's 128 GiB run out.
    total=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1)
    cap=$(( total / 1024 + 16 )); [ "$cap" -gt 100 ] && cap=100
    timeout 200 python3 scripts/oom_probe.py 1024 "$cap" 90 2>&1 | tee "$OUT/oom.log" ;;
  newpackages)  # session 45: demo.CumSum and com.example.SkipLayerNormalization on a real GPU: validate, test, bench
    for p in demo.CumSum com.example.SkipLayerNormalization; do
      echo "== $p" | tee -a "$OUT/new-packages.log"
      timeout 60 python3 -m webgpu_kernels validate "tests/packages/$p" --strict 2>&1 | tail -3 | tee -a "$OUT/new-packages.log"
      timeout 90 python3 -m webgpu_kernels test "tests/packages/$p" 2>&1 | tail -4 | tee -a "$OUT/new-packages.log"
      timeout 150 python3 -m webgpu_kernels bench "tests/packages/$p" --no-host --json "$OUT/bench-$p.json" 2>&1 \
        | tee -a "$OUT/new-packages.log"
    done ;;
  onnxpeers)  # session 55: packages mirroring an ONNX op beside ORT WebGPU (bench --compare with the op each mirrors)
    # first the shipped ops on one SD case each (the peers' new node building, on the ops they had run before)
    WEBGPU_KERNELS_PEER_TIMEOUT=60 timeout 100 python3 -m webgpu_kernels bench --case sd15-2x4096x320 \
      --case clip-text-2x77x3072 --compare --no-host --json "$OUT/peers-shipped.json" 2>&1 | tee "$OUT/onnx-peers.log"
    for spec in com.example.MatMulNBits:com.microsoft.MatMulNBits ai.onnx.DequantizeLinear: \
                com.example.RotaryEmbedding:com.microsoft.RotaryEmbedding ai.onnx.Pad:; do
      p=${spec%%:*} op=${spec#*:}
      echo "== $p ${op:-(its own id)}" | tee -a "$OUT/onnx-peers.log"
      WEBGPU_KERNELS_PEER_TIMEOUT=80 timeout 115 python3 -m webgpu_kernels bench "tests/packages/$p" ${op:+--onnx-op $op} \
        --compare --no-host --json "$OUT/peers-$p.json" 2>&1 | tee -a "$OUT/onnx-peers.log"
    done ;;
  newonnxsuite)  # session 57: the packages sessions 56 and 57 wrote from the docs (ai.onnx.Gelu, LayerNormalization, Add,
                 # ReduceMean, Cast) on a real GPU. Session 58: the suite first (the check that matters most), then
                 # each package: validate --strict, test, bench --compare beside ORT WebGPU
    export XDG_RUNTIME_DIR=$(mktemp -d)
    timeout 300 python3 -m pytest -q -p no:cacheprovider -n 8 -rfEs --durations=15 2>&1 | tee "$OUT/pytest.log"
    peer_packages 590 ai.onnx.Softmax ai.onnx.Gemm ai.onnx.MatMul ai.onnx.Split ai.onnx.Gelu ai.onnx.LayerNormalization \
      ai.onnx.ReduceMean ai.onnx.Add ai.onnx.Cast ;;
  prefetch)  # session 62: the blocked GEMM's PREFETCH (register-pipelined K steps) on and off, alternately (scripts/tunable_ab.py),
             # on Gemm's and MatMul's large cases, then both packages' tests and test.json on the GPU
    timeout 200 python3 scripts/tunable_ab.py tests/packages/ai.onnx.Gemm PREFETCH true false --case clip-text-fc1-77 \
      --case clip-text-fc2-77 --case clip-text-fc2-154 --case vit-l14-fc1-514 --case vit-l14-fc2 2>&1 | tee "$OUT/prefetch-gemm.log"
    timeout 120 python3 scripts/tunable_ab.py tests/packages/ai.onnx.MatMul PREFETCH true false --case clip-fc1 \
      --case sd15-cross 2>&1 | tee "$OUT/prefetch-matmul.log"
    export XDG_RUNTIME_DIR=$(mktemp -d)
    for p in ai.onnx.Gemm ai.onnx.MatMul; do timeout 60 python3 -m webgpu_kernels test "tests/packages/$p" 2>&1 | tail -2; done \
      | tee "$OUT/packages.log"
    timeout 120 python3 -m pytest -q -p no:cacheprovider -n 8 -rfEs tests/test_gemm_package.py tests/test_matmul_onnx_package.py \
      2>&1 | tee "$OUT/pytest.log" ;;
  tuneblocked)  # session 62: the register-blocked GEMM's block shape (BM, BN, TM, TN, BK) searched by tune on Gemm's and
                # MatMul's large float32 cases, every other tunable pinned; a dry run: nothing stored
    pin=(--tunable BM=64,128 --tunable BN=64,128 --tunable TM=4,8 --tunable TN=4,8 --tunable BK=16,8,32 --tunable TILE=16
         --tunable WORKGROUP_SIZE=64 --tunable MAX_ROWS=8 --tunable ROWS_WORKGROUP=256 --tunable ROWS_UNROLL=4 --dtype f32
         --dry-run)
    timeout 200 python3 -m webgpu_kernels tune tests/packages/ai.onnx.Gemm --case clip-text-fc1-77 --case vit-l14-fc1-514 \
      --case clip-text-fc2-77 --tunable SPLITK_GROUPS=256 --tunable SPLITK_STEPS=8 --tunable ROWS_COLS_K=8 \
      --tunable ROWS_COLS_N=16 "${pin[@]}" 2>&1 | tee "$OUT/tune-gemm.log"
    timeout 150 python3 -m webgpu_kernels tune tests/packages/ai.onnx.MatMul --case clip-fc1 --case sd15-cross-scores \
      --tunable ROWS_COLS=16 "${pin[@]}" 2>&1 | tee "$OUT/tune-matmul.log" ;;
  session62)  # session 62: the variants that Softmax rows, Gemm rows_c / blocked_splitk_c and MatMul rows replace, forced on
              # the cases that change (no peers), then the new defaults there beside ORT WebGPU, then the suite if 150 s
              # are left before DEADLINE seconds (default 560), then Softmax rows' VALUES_PER_LANE swept by tune
    deadline=${2:-560} sel=("ai.onnx.Softmax --tag variant:rows" "ai.onnx.Gemm --tag variant:rows_c" "ai.onnx.Gemm --case fc2"
                            "ai.onnx.MatMul --tag variant:rows")
    old=(workgroup blocked_c blocked_c blocked)
    for i in "${!sel[@]}"; do
      set -- ${sel[$i]}; pkg=$1; shift
      timeout 60 python3 -m webgpu_kernels bench "tests/packages/$pkg" --variant "${old[$i]}" "$@" --no-host 2>&1 \
        | tee -a "$OUT/old-variants.log"
    done
    mkdir -p "$OUT/peers"
    for i in "${!sel[@]}"; do
      set -- ${sel[$i]}; pkg=$1; shift
      (( SECONDS > deadline - 60 )) && break
      WEBGPU_KERNELS_PEER_TIMEOUT=50 timeout 120 python3 -m webgpu_kernels bench "tests/packages/$pkg" "$@" --compare \
        --no-host --json "$OUT/peers/$pkg-$i.json" 2>&1 | tee -a "$OUT/newonnx.log"
    done
    tar czf "$OUT/peers.tgz" -C "$OUT" peers && rm -r "$OUT/peers"
    export XDG_RUNTIME_DIR=$(mktemp -d)
    (( SECONDS < deadline - 150 )) && timeout $(( deadline - SECONDS - 10 )) python3 -m pytest -q -p no:cacheprovider -n 8 -rfEs \
      --durations=15 2>&1 | tee "$OUT/pytest.log"
    (( SECONDS < deadline - 40 )) && timeout $(( deadline - SECONDS )) python3 -m webgpu_kernels tune tests/packages/ai.onnx.Softmax \
      --tag variant:rows --tunable VALUES_PER_LANE=2,4,8,16,32 --dry-run 2>&1 | tee "$OUT/tune-softmax.log" ;;
  session61)  # session 61: the variants that Softmax split and MatMul/Gemm blocked replace, on the same cases (the
              # before figures, no peers: quick); then the new defaults and ReduceMean's scratch variants beside ORT
              # WebGPU; then the suite if 100 s are left before DEADLINE seconds (default 560)
    deadline=${2:-560}
    for old in "ai.onnx.Softmax strided --tag variant:split" "ai.onnx.MatMul tiled" "ai.onnx.Gemm tiled" "ai.onnx.Gemm tiled_c"; do
      set -- $old; pkg=$1 variant=$2; shift 2
      timeout 40 python3 -m webgpu_kernels bench "tests/packages/$pkg" --variant "$variant" "$@" --no-host 2>&1 \
        | tee -a "$OUT/old-variants.log"
    done
    peer_packages $(( deadline - 10 )) ai.onnx.Softmax ai.onnx.MatMul ai.onnx.Gemm ai.onnx.ReduceMean
    export XDG_RUNTIME_DIR=$(mktemp -d)
    (( SECONDS < deadline - 100 )) && timeout $(( deadline - SECONDS )) python3 -m pytest -q -p no:cacheprovider -n 8 -rfEs \
      --durations=15 2>&1 | tee "$OUT/pytest.log" ;;
  session60)  # session 60: the suite (bfloat16 inputs rounded once, scratch buffers), then ai.onnx.ReduceMean's new
              # multi-workgroup variants (scratch buffers) beside ORT WebGPU, then its old one-workgroup mean_all on the
              # same cases (the before figure), until DEADLINE seconds (default 450)
    export XDG_RUNTIME_DIR=$(mktemp -d)
    timeout 200 python3 -m pytest -q -p no:cacheprovider -n 8 -rfEs --durations=15 2>&1 | tee "$OUT/pytest.log"
    peer_packages "${2:-450}" ai.onnx.ReduceMean
    (( SECONDS < ${2:-450} - 40 )) && timeout $(( ${2:-450} - SECONDS )) python3 -m webgpu_kernels bench \
      tests/packages/ai.onnx.ReduceMean --variant mean_all --no-host --json "$OUT/mean_all.json" 2>&1 | tee "$OUT/mean_all.log" ;;
  newpackages59)  # session 59: the suite (ONNX packages' tests now pass on onnxruntime 1.30), then ai.onnx.Less,
                  # com.microsoft.MultiHeadAttention, ai.onnx.Add, ai.onnx.Cast and ai.onnx.Gemm (its new bench tolerances),
                  # beside ORT WebGPU, until DEADLINE seconds (default 450: the lend's device time is short)
    export XDG_RUNTIME_DIR=$(mktemp -d)
    timeout 200 python3 -m pytest -q -p no:cacheprovider -n 8 -rfEs --durations=15 2>&1 | tee "$OUT/pytest.log"
    peer_packages "${2:-450}" ai.onnx.Less com.microsoft.MultiHeadAttention ai.onnx.Add ai.onnx.Cast ai.onnx.Gemm ;;
  nbitslevel0)  # session 55: MatMulNBits' accuracy_level 0 cases (bench.json's -level0) beside ORT WebGPU (at level 4
                # its outputs were 0.21-0.38 off onnxruntime's CPU kernel: int8 A), then the suite in 8 processes
    WEBGPU_KERNELS_PEER_TIMEOUT=70 timeout 110 python3 -m webgpu_kernels bench tests/packages/com.example.MatMulNBits \
      --onnx-op com.microsoft.MatMulNBits --compare --no-host --tag accuracy-level-0 --json "$OUT/nbits-level0.json" 2>&1 \
      | tee "$OUT/nbits-level0.log"
    export XDG_RUNTIME_DIR=$(mktemp -d)
    timeout $(( 590 - SECONDS )) python3 -m pytest -q -p no:cacheprovider -n 8 -rfEs --durations=15 2>&1 | tee "$OUT/pytest.log" ;;
  onnxpeerssuite)  # session 55: onnxpeers, then the suite in 8 processes with what time is left
    bash "$0" onnxpeers
    export XDG_RUNTIME_DIR=$(mktemp -d)
    timeout $(( 590 - SECONDS )) python3 -m pytest -q -p no:cacheprovider -n 8 -rfEs --durations=15 2>&1 | tee "$OUT/pytest.log" ;;
  packagesuite)  # session 49: a test package on a real GPU (validate, test, bench; checked against onnxruntime's
                 # op where ONNX_OP is given), then the suite in 8 processes: packagesuite demo.Concat ai.onnx.Concat
    c=tests/packages/$2 log=$OUT/package.log
    timeout 60 python3 -m webgpu_kernels validate $c --strict 2>&1 | tail -3 | tee "$log"
    timeout 90 python3 -m webgpu_kernels test $c 2>&1 | tail -3 | tee -a "$log"
    timeout 150 python3 -m webgpu_kernels bench $c ${3:+--onnx-op $3} --no-host --json "$OUT/package.json" 2>&1 | tee -a "$log"
    export XDG_RUNTIME_DIR=$(mktemp -d)
    timeout $(( 590 - SECONDS )) python3 -m pytest -q -p no:cacheprovider -n 8 -rfEs --durations=15 2>&1 | tee "$OUT/pytest.log" ;;
  concatsuite)  # session 49 (run AH): packagesuite demo.Concat ai.onnx.Concat, its files named concat.*
    bash "$0" packagesuite demo.Concat ai.onnx.Concat
    mv "$OUT/package.log" "$OUT/concat.log"; mv "$OUT/package.json" "$OUT/concat.json" ;;
  conv)  # session 46: demo.Conv (a compute-bound package written from the docs) on a real GPU, beside cuDNN
    c=tests/packages/demo.Conv log=$OUT/conv.log
    timeout 60 python3 -m webgpu_kernels validate $c --strict 2>&1 | tail -3 | tee "$log"
    timeout 120 python3 -m webgpu_kernels test $c --strict 2>&1 | tail -4 | tee -a "$log"
    timeout 120 python3 scripts/torch_conv.py --json "$OUT/conv-torch.json" 2>&1 | tee -a "$log"
    timeout 240 python3 -m webgpu_kernels bench $c --no-host --json "$OUT/conv-default.json" 2>&1 | tee -a "$log" ;;
  convsuite)  # session 47: demo.Conv's defaults (gemm chosen for seven cases) beside cuDNN, then the suite in 8 processes
    c=tests/packages/demo.Conv log=$OUT/conv.log
    timeout 100 python3 scripts/torch_conv.py --json "$OUT/conv-torch.json" 2>&1 | tee "$log"
    timeout 180 python3 -m webgpu_kernels bench $c --no-host --json "$OUT/conv-default.json" 2>&1 | tee -a "$log"
    export XDG_RUNTIME_DIR=$(mktemp -d)
    timeout $(( 590 - SECONDS )) python3 -m pytest -q -p no:cacheprovider -n 8 -rfEs --durations=15 2>&1 | tee "$OUT/pytest.log" ;;
  convtune)  # session 46: demo.Conv's tuner (every variant and tile tunable) on the SD cases named (default: four),
             # then bench of those cases, default against tuned; with gemm's five tunables, name fewer cases if 360 s runs out
    c=tests/packages/demo.Conv log=$OUT/conv-tune.log
    shift; cases=("${@:-sd15-resnet-2x320x64x64 sd15-resnet-2x640x32x32 sd15-shortcut-1x1-2x640x32x32 sd15-mid-2x1280x8x8}")
    timeout 360 python3 -m webgpu_kernels tune $c $(for k in ${cases[@]}; do echo --case "$k"; done) 2>&1 | tee "$log"
    cp /tmp/tuning/*.json "$OUT/conv-tuning.json" 2>/dev/null
    timeout 200 python3 -m webgpu_kernels bench $c --no-host $(for k in ${cases[@]}; do echo --case "$k"; done) \
      --json "$OUT/conv-tuned.json" 2>&1 | tee -a "$log" ;;
  skiplayernorm)  # session 45: com.example.SkipLayerNormalization's SD cases tuned (its vec4 default trailed row at
                  # H=320 on an H100), then benched default against tuned
    timeout 330 python3 -m webgpu_kernels tune tests/packages/com.example.SkipLayerNormalization --case sd15-2x4096x320 --case sd15-2x1024x640 --case sd15-2x256x1280 \
      --case sdxl-2x4096x640 2>&1 | tee "$OUT/skip-layer-norm-tune.log"
    cp /tmp/tuning/*.json "$OUT/skip-layer-norm-tuning.json" 2>/dev/null
    timeout 120 python3 -m webgpu_kernels bench tests/packages/com.example.SkipLayerNormalization --no-host \
      --json "$OUT/skip-layer-norm-tuned.json" 2>&1 | tee "$OUT/skip-layer-norm-bench.log" ;;
  kernelalloc)  # session 43 (for the next lend): run Z's kernel-only slow state, the buffers' or the process's?
               # scripts/kernel_alloc_probe.py in six fresh processes (fresh pairs timed twice, a kept pair), then all large
    for p in 1 2 3 4 5 6; do
      echo "== process $p" | tee -a "$OUT/kernel-alloc.log"
      timeout 60 python3 scripts/kernel_alloc_probe.py 20 40 2>&1 | tee -a "$OUT/kernel-alloc.log"
    done
    timeout 150 python3 -m webgpu_kernels bench --tag large --no-host --json "$OUT/large.json" 2>&1 | tee "$OUT/large.log" ;;
  largepackages)  # session 29: large (calls_per_span on calls over 1 ms), then demo.Where and demo.Transpose benched
    bash "$0" large
    timeout 120 python3 -m webgpu_kernels bench tests/packages/demo.Where tests/packages/demo.Transpose --no-host \
      --json "$OUT/packages.json" 2>&1 | tee "$OUT/packages.log" ;;
  plancost)  # session 35: host time of a call with a new shape (a plan built) and of one cached, this tree
             # against DIR/src, fresh processes, interleaved, three rounds
    for round in 1 2 3; do for side in new old; do
      src=$PWD/src; [ "$side" = old ] && src=$PWD/${2:-ab-old}/src
      echo "== $side (round $round)" | tee -a "$OUT/plan-cost.log"
      PYTHONPATH=/tmp/site:$src timeout 90 python3 scripts/new_shape_cost.py 2>&1 | tee -a "$OUT/plan-cost.log"
      PYTHONPATH=/tmp/site:$src timeout 60 python3 scripts/host_cost.py 2>&1 | tee -a "$OUT/plan-cost.log"
    done; done ;;
  bsgvariants)  # session 50: demo.BiasSplitGelu's float16 vec8 (16-byte loads) against its vec4 (8-byte), alternated,
                # each bench run warmed up as bench does; then validate, test and the suite with the time left
    c=tests/packages/demo.BiasSplitGelu log=$OUT/bsg-variants.log
    for round in 1 2; do for v in default vec4; do
      echo "== $v (round $round)" | tee -a "$log"
      timeout 90 python3 -m webgpu_kernels bench $c --dtype float16 --no-host $([ $v = vec4 ] && echo --variant vec4) \
        --json "$OUT/bsg-$v-$round.json" 2>&1 | grep -v "^BiasSplitGelu .* T=" | tee -a "$log"
    done; done
    timeout 60 python3 -m webgpu_kernels validate $c --strict 2>&1 | tail -12 | tee -a "$log"
    timeout 90 python3 -m webgpu_kernels test $c 2>&1 | tail -3 | tee -a "$log"
    export XDG_RUNTIME_DIR=$(mktemp -d)
    timeout $(( 590 - SECONDS )) python3 -m pytest -q -p no:cacheprovider -n 8 -rfEs --durations=15 2>&1 | tee "$OUT/pytest.log" ;;
  astypesuite)  # session 50: float32 -> float16 on the device (GpuTensor.astype) against numpy(), astype, to_gpu;
                # then the suite in 8 processes with the time left
    timeout 120 python3 scripts/astype_cost.py 2>&1 | tee "$OUT/astype.log"
    # helper-177: astype and copy.copy recorded into a chain's batch, host time per call
    timeout 120 python3 scripts/astype_cost.py --chain 2>&1 | tee -a "$OUT/astype.log"
    export XDG_RUNTIME_DIR=$(mktemp -d)
    timeout $(( 590 - SECONDS )) python3 -m pytest -q -p no:cacheprovider -n 8 -rfEs --durations=15 2>&1 | tee "$OUT/pytest.log" ;;
  chainab)  # session 51: astype and copy.copy recorded into the batch (helper-177) against DIR/src (default ab-old,
            # afd229d), scripts/astype_cost.py --chain alternated in fresh processes, two rounds; hostab DIR; then the
            # suite in 8 processes with the time left
    for round in 1 2; do for side in new old; do
      src=$PWD/src; [ "$side" = old ] && src=$PWD/${2:-ab-old}/src
      echo "== $side (round $round)" | tee -a "$OUT/chain-ab.log"
      PYTHONPATH=/tmp/site:$src timeout 100 python3 scripts/astype_cost.py --chain 2>&1 | tee -a "$OUT/chain-ab.log"
    done; done
    bash "$0" hostab "${2:-ab-old}"
    export XDG_RUNTIME_DIR=$(mktemp -d)
    timeout $(( 590 - SECONDS )) python3 -m pytest -q -p no:cacheprovider -n 8 -rfEs --durations=15 2>&1 | tee "$OUT/pytest.log" ;;
  clipmlp)  # session 50: the CLIP MLP example chained on the GPU (demo.MatMul, BiasAdd, QuickGelu) on NVIDIA, host
            # cost per call against the session's first code (hostab), then the suite with the time left
    for dt in float32 float16; do for b in 1 8; do
      timeout 120 python3 examples/clip_mlp.py --batch $b --dtype $dt --repeat 20 2>&1 | tee -a "$OUT/clip-mlp.log"
    done; done
    bash "$0" hostab "${2:-ab-old}"
    export XDG_RUNTIME_DIR=$(mktemp -d)
    timeout $(( 590 - SECONDS )) python3 -m pytest -q -p no:cacheprovider -n 8 -rfEs --durations=15 2>&1 | tee "$OUT/pytest.log" ;;
  sdff)  # the SD 1.5 UNet feed-forward example (demo.MatMul, demo.BiasSplitGelu, BiasAdd) at the real shapes
          # of the first two levels on NVIDIA (the float64 reference of (2, 4096, 320) took 2.3 s on the 2-core CPU machine), then the suite
    export XDG_RUNTIME_DIR=$(mktemp -d)
    for dt in float32 float16; do for tc in "4096 320" "1024 640"; do read -r t c <<< "$tc"
      timeout 120 python3 examples/sd_feed_forward.py --batch 2 --tokens "$t" --channels "$c" --dtype $dt --repeat 20 \
        2>&1 | tee -a "$OUT/sd-feed-forward.log"; echo "exit status ${PIPESTATUS[0]}" | tee -a "$OUT/sd-feed-forward.log"
    done; done
    bash "$0" testsn ;;
  session64)  # session 64: the suite in 8 processes (its first GPU run since session 62's run BJ), then peerslarge in
              # what is left of the call's 600 s
    bash "$0" testsn 8 240
    PEERS_LIMIT=$(( 585 - SECONDS )) bash "$0" peerslarge ;;
  testsn)  # session 32: the suite in N processes (pytest-xdist, default 8 of the 16 cores), each with its own device
    export XDG_RUNTIME_DIR=$(mktemp -d)
    timeout "${3:-400}" python3 -m pytest -q -p no:cacheprovider -n "${2:-8}" -rfEs --durations=15 2>&1 | tee "$OUT/pytest.log" ;;
  runaway)  # session 33: test --timeout against a shader that runs on (1e8 iterations a loop: minutes if not stopped),
    # the GPU's utilization before and after the kill, then the suite in 8 processes
    export XDG_RUNTIME_DIR=$(mktemp -d)
    { nvidia-smi --query-gpu=utilization.gpu,memory.used --format=csv
      timeout 120 python3 scripts/runaway_shader.py 100000000 20
      for i in 1 2 3; do nvidia-smi --query-gpu=utilization.gpu,memory.used --format=csv,noheader; sleep 2; done
      nvidia-smi --query-compute-apps=pid,used_memory --format=csv; } 2>&1 | tee "$OUT/runaway.log"
    bash "$0" testsn ;;
  largetestsn)  # session 32: large, then the suite in 8 processes (headcheck's pair, which in one process passed 600 s)
    bash "$0" large
    bash "$0" testsn ;;
  attention)  # session 41: com.example.Attention (session 40, lavapipe only so far) on NVIDIA: validate, test, bench
    export XDG_RUNTIME_DIR=$(mktemp -d)
    { timeout 30 python3 -m webgpu_kernels validate tests/packages/com.example.Attention
      timeout 60 python3 -m webgpu_kernels test tests/packages/com.example.Attention
      timeout 90 python3 -m webgpu_kernels bench tests/packages/com.example.Attention --no-host --json "$OUT/attention.json"
    } 2>&1 | tee "$OUT/attention.log" ;;
  largeattentiontestsn)  # session 41, after two sessions without a lend: large, attention, then the suite in 8 processes
    bash "$0" large
    bash "$0" attention
    bash "$0" testsn ;;
  headcheck)  # after a change to the engine or bench, in one call: host cost per call, the large cases, the suite
    bash "$0" large
    bash "$0" tests ;;
  softmax)  # session 28: demo.Softmax (session 27, lavapipe only so far) on NVIDIA, then the suite
    { timeout 20 python3 -m webgpu_kernels validate tests/packages/demo.Softmax
      timeout 20 python3 -m webgpu_kernels test tests/packages/demo.Softmax
      timeout 20 python3 scripts/softmax_long_row.py
      timeout 30 python3 -m webgpu_kernels bench tests/packages/demo.Softmax --no-host --json "$OUT/softmax.json"
    } 2>&1 | tee "$OUT/softmax.log"
    bash "$0" tests ;;
  peers)  # session 36: bench's check moved to references.Tolerance (each verdict a *_ok beside its *_error); the
          # comparison on the small and large cases, every peer's verdict read back from the JSON. Session 37:
          # 300 s stopped bench while ORT's peer ran (torch's verdicts came back, ORT's did not), so 540 s and
          # no suite after it (testsn alone: 168 s on that lend)
    timeout 540 python3 -m webgpu_kernels bench --compare --tag small --tag large --json "$OUT/peers.json" 2>&1 \
      | tee "$OUT/peers.log"
    verdicts ;;
  roundtrip)  # the comparison on the small, model and large cases (round trips, ORT on the large ones)
    timeout 390 python3 -m webgpu_kernels bench --compare --tag small --tag large --tag model:clip-text --tag model:sd1.5 \
      --json "$OUT/bench.json" 2>&1 | tee "$OUT/bench.log" ;;
esac
