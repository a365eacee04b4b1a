#!/usr/bin/env bash
# session 56 call 3, not run yet (issue 37; .run-bin of the commit adding this script, the working tree's
# interleaved-mixR bench variant): does the list's mix (Linear-1 tiles between Linear-2 tiles)
# set the per-token Linear-2 gate's wait? DiT-MoE-G 2048 / 8192 and DSv4-Flash 8192, W8A8 and
# per-token INT4 / MXFP4, the plan's mix against 1, 2 and 4, every cell checked, twice (variant
# order reversed the second time); then the spans of DiT-MoE-G 8192 INT4 for the plan's mix and 1, 2.
set -u
source .run-bin/env.sh
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv | tee $OUT/gpu.txt
start=$SECONDS
W=w8a8,w4a8-int4-lut-rs-tok,w4a8-mxfp4-rs-tok
for run in 1 2; do
  V=interleaved,interleaved-mix1,interleaved-mix2,interleaved-mix4
  [ $run = 2 ] && V=interleaved-mix4,interleaved-mix2,interleaved-mix1,interleaved
  for mt in DiT-MoE-G:2048,8192 DSv4-Flash:8192; do
    timeout $((330 - (SECONDS - start))) .run-bin/xstage bench moe --gpus 1 --models ${mt%%:*} --tokens ${mt##*:} \
      --routings balanced --weights $W --variants $V --json $OUT/mix-${mt%%:*}-$run.json >> $OUT/mix.txt 2>&1
    echo "run $run $mt rc=$? at $((SECONDS - start)) s"
  done
done
grep -h 'correctness' $OUT/mix.txt
timeout $((340 - (SECONDS - start))) .run-bin/xstage bench moe --gpus 1 --models DiT-MoE-G --tokens 8192 --routings balanced \
  --weights w4a8-int4-lut-rs-tok --variants interleaved,interleaved-mix1,interleaved-mix2 --spans --json $OUT/spans.json > $OUT/spans.txt 2>&1
echo "spans rc=$? at $((SECONDS - start)) s"
gzip -f $OUT/*.json 2>/dev/null
