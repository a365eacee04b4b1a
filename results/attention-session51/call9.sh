#!/usr/bin/env bash
# session 51 call 9: issue 38's acceptance on an H200 — the grids of call 8 (same binaries), run only
# when the card is an H200 (the H100 figures are call 8's).
set -u
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv > $OUT/gpu.txt
grep -q H200 $OUT/gpu.txt || { echo "not an H200: nothing run"; exit 3; }
source .run-bin/env.sh
timeout 300 .run-bin/tests/xstage_gpu_tests --gtest_filter='*Attention*:SoftmaxPathsGpu.*' > $OUT/gpu-tests.log 2>&1
echo "tests rc=$?" >> $OUT/times0.txt; tail -3 $OUT/gpu-tests.log
bash results/attention-partial-h100/call5.sh
