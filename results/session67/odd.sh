#!/usr/bin/env bash
# Session 67 (issue 38): the causal shapes of the issue's own text that the acceptance grid leaves
# out (S 8191 with 16 heads at d 64; S 16383 with 24 heads at d 128), bf16 and fp16, each with
# cuDNN in the same call and the acceptance marks of python/compare_attention_causal.py
# (scripts/attention-causal-ab, every cell checked). Carry .run-bin; ~2 min. next.sh runs this, then
# the stages A/B.
set -u
source .run-bin/env.sh
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv | tee $OUT/card.txt
for dt in bf16 fp16; do
  timeout 120 scripts/attention-causal-ab --no-tests --dtype $dt -S 8191 -H 16 -d 64 $OUT/odd-d64-$dt >> $OUT/odd.log 2>&1
  timeout 120 scripts/attention-causal-ab --no-tests --dtype $dt -S 16383 -H 24 -d 128 $OUT/odd-d128-$dt >> $OUT/odd.log 2>&1
done
for f in $OUT/odd-*/ab.txt; do echo "== $f"; grep -E '^ *(64|128) |acceptance|correctness' $f; done | tee $OUT/odd.txt
tar czf $OUT/odd.tgz -C $OUT $(cd $OUT && ls -d odd-*) && rm -rf $OUT/odd-*/
