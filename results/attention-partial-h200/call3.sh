#!/usr/bin/env bash
# session 50 call 3 (same machine and binaries): causal fp16 (d 64 and 128, auto order) with cuDNN,
# then the long non-causal grid of the main bench with cuDNN and flash SDPA.
set -u
source .run-bin/env.sh
t0=$(date +%s)
scripts/attention-causal-ab --orders auto --dtype fp16 --no-tests $OUT/causal-fp16 > $OUT/causal-fp16.log 2>&1
echo "rc=$? $(( $(date +%s) - t0 )) s" >> $OUT/causal-fp16.log; st
mkdir -p $OUT/long
.run-bin/xstage bench attention --json $OUT/long/attention.json > $OUT/long/xstage.log 2>&1
python3 python/bench_attention_torch.py --backends cudnn,flash --json $OUT/long/attention-torch.json > $OUT/long/torch.log 2>&1
python3 python/compare_attention.py $OUT/long/attention.json $OUT/long/attention-torch.json > $OUT/long/long-compare.txt 2>&1
echo "long $(( $(date +%s) - t0 )) s" >> $OUT/long/xstage.log; st
