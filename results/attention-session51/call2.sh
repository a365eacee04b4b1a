#!/usr/bin/env bash
# session 51 call 2: the key-group tile (rows64) — GPU tests of the causal paths incl. rows64_*,
# then the causal d 64 tile A/B (auto, rows64, rows128, staged) with cuDNN, bf16 (fp16 at S 2048 /
# 4096); on an H200 also issue 38's grids (attention-partial-h100/call5.sh).
set -u
source .run-bin/env.sh
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv > $OUT/gpu.txt
t0=$(date +%s)
scripts/attention-causal-ab --tiles auto,rows64,rows128,staged -d 64 -S 2048,4096,8192,16384 $OUT/bf16 > $OUT/bf16.log 2>&1
echo "bf16 rc=$? $(( $(date +%s) - t0 )) s" >> $OUT/times.txt; st
scripts/attention-causal-ab --no-tests --dtype fp16 --tiles auto,rows64,rows128 -d 64 -S 2048,4096 $OUT/fp16 > $OUT/fp16.log 2>&1
echo "fp16 rc=$? $(( $(date +%s) - t0 )) s" >> $OUT/times.txt; st
if grep -q H200 $OUT/gpu.txt; then bash results/attention-partial-h100/call5.sh; echo "call5 $(( $(date +%s) - t0 )) s" >> $OUT/times.txt; st; fi
