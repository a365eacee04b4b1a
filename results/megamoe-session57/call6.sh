#!/usr/bin/env bash
# session 57 call 6, not run yet (issue 37, any card; carry .run-bin of b5e0bf0 or later, which has bench moe
# --routing-seed): what the per-token kernel's tail blocks cost (docs/megamoe.md Next steps 4, "The
# blocks' tails"). DiT-MoE-G, balanced routing, the same tokens under two seeds (found on the CPU
# with `xstage moe-routing -m DiT-MoE-G -P 1 --seed S`):
#   7936 tokens: seed 2073 -> 64 blocks of <= 256 rows, no tail; seed 2071 -> 70, tails of 3-30 rows
#   1920 tokens: seed 2039 -> 16 blocks, no tail;               seed 2130 -> 21, tails of 1-14 rows
# W8A8 (128-row blocks, cheap tails), INT4 and MXFP4 per-token, interleaved with the spans, every
# cell checked, twice (seed order reversed the second time). If the tails cost what the counts
# suggest, W4A8 / W8A8 fused is a few % better at the tail-free seed. Env BUDGET: seconds for the
# benches (default 540).
set -u
source .run-bin/env.sh
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv | tee $OUT/gpu.txt
start=$SECONDS
W=w8a8,w4a8-int4-lut-rs-tok,w4a8-mxfp4-rs-tok
for run in 1 2; do
  for ts in 7936:2073 7936:2071 1920:2039 1920:2130; do
    [ $run = 2 ] && case $ts in 7936:2073) ts=7936:2071 ;; 7936:2071) ts=7936:2073 ;; 1920:2039) ts=1920:2130 ;; 1920:2130) ts=1920:2039 ;; esac
    left=$(( ${BUDGET:-540} - (SECONDS - start) ))
    [ $left -gt 60 ] || { echo "run $run $ts left out (time)"; continue; }
    timeout $left .run-bin/xstage bench moe --gpus 1 --models DiT-MoE-G --tokens ${ts%%:*} \
      --routings balanced --routing-seed ${ts##*:} --weights $W --variants interleaved --spans \
      --json $OUT/tails-${ts%%:*}-${ts##*:}-$run.json >> $OUT/tails.txt 2>&1
    echo "run $run $ts rc=$? at $((SECONDS - start)) s"
  done
done
grep -h 'correctness' $OUT/tails.txt
tar czf $OUT/tails-json.tgz -C $OUT $(cd $OUT && ls tails-*.json) && rm -f $OUT/tails-*.json
