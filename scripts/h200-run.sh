#!/usr/bin/env bash
# One call on the H200 machine (device tool, carry [".whl", ".gl"]): template experiments, tuning,
# then the full benchmark with peers, each bounded so the whole stays under the 10-minute limit.
# Results land in $OUT (at most 8 files come back): exp.log tune.log tuning.json bench.json
# bench.png bench.log.
#   run: bash scripts/h200-run.sh
set -uo pipefail
source scripts/gpu-preamble.sh
export COLUMNS=250 WEBGPU_KERNELS_TUNING_DIR=/tmp/tuning WEBGPU_KERNELS_PEER_TIMEOUT=150
timeout 90 python3 scripts/gpu_experiments.py 2>&1 | tee "$OUT/exp.log"
timeout 150 python3 -m webgpu_kernels tune --tag large --tag model:clip-text --tag model:sd1.5 2>&1 | tee "$OUT/tune.log"
cp /tmp/tuning/*.json "$OUT/tuning.json" 2>/dev/null
timeout 330 python3 -m webgpu_kernels bench --compare --json "$OUT/bench.json" --plot "$OUT/bench.png" 2>&1 | tee "$OUT/bench.log"
