#!/usr/bin/env bash
# session 51 call 5 (binaries of the commit in .run-bin/BUILT_FROM): the attention GPU tests, then
# issue 38's grids with the final rules (attention-partial-h100/call5.sh: short d 64 / d 128 with
# cuDNN, causal bf16 and fp16 with cuDNN, the long non-causal grid with cuDNN and flash SDPA).
set -u
source .run-bin/env.sh
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv > $OUT/gpu0.txt
t0=$(date +%s)
timeout 300 .run-bin/tests/xstage_gpu_tests --gtest_filter='*Attention*:SoftmaxPathsGpu.*' > $OUT/gpu-tests.log 2>&1
rc=$?; echo "tests rc=$rc $(( $(date +%s) - t0 )) s" >> $OUT/times0.txt; tail -3 $OUT/gpu-tests.log
[ $rc = 0 ] || { st; exit 1; }
bash results/attention-partial-h100/call5.sh
