#!/usr/bin/env bash
# session 49 call 2: issue 38's remaining acceptance grids with the auto causal order in the same
# binaries as call 1: the short non-causal grid (tiles vs cuDNN), causal fp16 d = 64, the long
# non-causal grid with cuDNN and flash SDPA.
set -u
source .run-bin/env.sh
t0=$(date +%s)
scripts/attention-short-ab $OUT/short > $OUT/short.log 2>&1
echo "rc=$? $(( $(date +%s) - t0 )) s" >> $OUT/short.log; st
scripts/attention-causal-ab --orders auto -d 64 --dtype fp16 --no-tests $OUT/causal-fp16-d64 > $OUT/causal-fp16-d64.log 2>&1
echo "rc=$? $(( $(date +%s) - t0 )) s" >> $OUT/causal-fp16-d64.log; st
mkdir -p $OUT/long
.run-bin/xstage bench attention --json $OUT/long/attention.json > $OUT/long/xstage.log 2>&1
python3 python/bench_attention_torch.py --backends cudnn,flash --json $OUT/long/attention-torch.json > $OUT/long/torch.log 2>&1
python3 python/compare_attention.py $OUT/long/attention.json $OUT/long/attention-torch.json > $OUT/long/long-compare.txt 2>&1
echo "long $(( $(date +%s) - t0 )) s" >> $OUT/long/xstage.log; st
