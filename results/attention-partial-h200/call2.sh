#!/usr/bin/env bash
# session 50 call 2 (same machine and binaries as call 1): long non-causal, this build against the
# build before (A B A B, d 64 and 128), then causal bf16 (d 64 and 128, auto order) with cuDNN.
set -u
source .run-bin/env.sh
X=.run-bin/xstage O=.run-old/xstage
t0=$(date +%s)
mkdir -p $OUT/long
for r in 1 2; do
  $X bench attention -d 64,128 -S 8192,16384,32768 -H 16,40 --json $OUT/long/new-$r.json > $OUT/long/new-$r.log 2>&1
  $O bench attention -d 64,128 -S 8192,16384,32768 -H 16,40 --json $OUT/long/old-$r.json > $OUT/long/old-$r.log 2>&1
done
python3 python/compare_attention_ab.py --base $OUT/long/old-*.json --variant new $OUT/long/new-*.json > $OUT/long/ab.txt 2>&1
echo "long $(( $(date +%s) - t0 )) s" >> $OUT/long/ab.txt; st
scripts/attention-causal-ab --orders auto --no-tests $OUT/causal-bf16 > $OUT/causal-bf16.log 2>&1
echo "rc=$? $(( $(date +%s) - t0 )) s" >> $OUT/causal-bf16.log; st
