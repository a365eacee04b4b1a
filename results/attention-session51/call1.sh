#!/usr/bin/env bash
# session 51 call 1 (binaries of bfe0296): on an H200, issue 38's grids (call5.sh of
# attention-partial-h100); on any card, probes for the causal d 64 S 2048 H 8 point:
# the cost of one busy warp group against two and three (few CTAs, so not DRAM-bound), and the
# longest causal tile alone.
set -u
source .run-bin/env.sh
X=.run-bin/xstage
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv > $OUT/gpu.txt
if grep -q H200 $OUT/gpu.txt; then bash results/attention-partial-h100/call5.sh; fi
P=$OUT/probes; mkdir -p $P
for q in 64 128 192; do $X bench attention -S 8192 -H 16 -d 64 --q-len $q --tile partial --json $P/partial-q$q.json > $P/partial-q$q.log 2>&1; done
for q in 64 128; do $X bench attention -S 8192 -H 16 -d 64 --q-len $q --tile rows128 --json $P/rows128-q$q.json > $P/rows128-q$q.log 2>&1; done
$X bench attention -S 2048 -H 1,2,4,8,16 -d 64 --causal --json $P/causal-s2048.json > $P/causal-s2048.log 2>&1
$X bench attention -S 2048 -H 1,8 -d 64 --causal --causal-align bottom-right --q-len 128 --json $P/causal-longest.json > $P/causal-longest.log 2>&1
$X bench attention -S 2048 -H 8 -d 64 --causal --causal-align bottom-right --q-len 64 --json $P/causal-longest64.json > $P/causal-longest64.log 2>&1
grep -h "us\|TFLOP" $P/*.log > $P/summary.txt
st
