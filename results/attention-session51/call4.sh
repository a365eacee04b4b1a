#!/usr/bin/env bash
# session 51 call 4: tools/attn_study (interleaved launches, checked against the fp64 reference and
# the shipped kernel) of the d = 128 key-group tile with 64 x 128 blocks and two K/V stages against
# 64 x 64 with four, and the staged tile; then the short d = 128 grid (auto) with cuDNN.
set -u
source .run-bin/env.sh
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv > $OUT/gpu.txt
t0=$(date +%s)
.run-bin/attn_study --seqlens 1024,1100,2048,4096 --heads 4,8,24,40 --iters 30 --json $OUT/study.json > $OUT/study.log 2>&1
echo "study rc=$? $(( $(date +%s) - t0 )) s" >> $OUT/times.txt; st
if grep -q H200 $OUT/gpu.txt; then bash results/attention-partial-h100/call5.sh; echo "call5 $(( $(date +%s) - t0 )) s" >> $OUT/times.txt; st; fi
