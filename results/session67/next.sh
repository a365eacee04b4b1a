#!/usr/bin/env bash
# Session 67's ready call for the next device time (one call, ~6 min; carry .run-bin and .ab-s3):
# 1. issue 38's motivating causal shapes off the acceptance grid (S 8191 with 16 heads at d 64 and
#    S 16383 with 24 heads at d 128, bf16 and fp16; python/compare_attention_causal.py's table via
#    scripts/attention-causal-ab, cuDNN in the same call, every cell checked), ~1.5 min;
# 2. results/session67/stages-ab.sh: the per-token Mega-MoE kernel on 3 stages against 4 (issue 37).
set -u
source .run-bin/env.sh
t0=$SECONDS
for dt in bf16 fp16; do
  timeout 120 scripts/attention-causal-ab --no-tests --dtype $dt -S 8191 -H 16 -d 64 $OUT/odd-d64-$dt >> $OUT/odd.log 2>&1
  timeout 120 scripts/attention-causal-ab --no-tests --dtype $dt -S 16383 -H 24 -d 128 $OUT/odd-d128-$dt >> $OUT/odd.log 2>&1
done
for f in $OUT/odd-*/ab.txt; do echo "== $f"; grep -E '^ *(64|128) |acceptance|correctness' $f; done | tee $OUT/odd.txt
echo "odd causal shapes: $((SECONDS - t0)) s"
LIMIT=$((540 - (SECONDS - t0))) bash results/session67/stages-ab.sh
tar czf $OUT/odd.tgz -C $OUT $(cd $OUT && ls -d odd-*) && rm -rf $OUT/odd-*/
