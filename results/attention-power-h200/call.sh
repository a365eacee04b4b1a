#!/usr/bin/env bash
# session 48 call 1: the stage-gate A/B, then attention power diagnostics
set -u
export XSTAGE_SOURCE_DIR=$PWD
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv > $OUT/gpu.txt
scripts/ab-run --bin .ab-gate --variants base,gate --alternate --reps 2 \
  --tests 'MegaMoe.OneGpuW4A8PerToken*:P/MegaMoeW4A8TokRanks.*' --test-timeout 150 --tar $OUT \
  'moe --gpus 1 --models Qwen3.5-397B-A17B,DSv4-Flash --tokens 512,2048 --routings balanced --weights w4a8-int4-lut-rs-tok,w4a8-mxfp4-rs-tok --variants interleaved,expert-wave' \
  > $OUT/ab-run.log 2>&1
echo "ab-run rc=$?" >> $OUT/ab-run.log
source .run-bin/env.sh
mkdir -p $OUT/pw
R=clocks_event_reasons.active; nvidia-smi --query-gpu=$R --format=csv >/dev/null 2>&1 || R=clocks_throttle_reasons.active
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu,$R --format=csv,noheader -lms 100 > $OUT/pw/smi.csv &
smi=$!
X=.run-bin/xstage
for dt in bf16 fp16; do
  date +%s.%N >> $OUT/pw/marks.txt; echo "causal $dt" >> $OUT/pw/marks.txt
  $X bench attention -d 128 -S 32768 -H 8,24,40 --causal --dtype $dt --json $OUT/pw/causal-$dt.json > $OUT/pw/causal-$dt.txt 2>&1
  for t in staged long-kv; do
    date +%s.%N >> $OUT/pw/marks.txt; echo "noncausal $t $dt" >> $OUT/pw/marks.txt
    $X bench attention -d 128 -S 32768 -H 24 --tile $t --dtype $dt > $OUT/pw/nc-$t-$dt.txt 2>&1
  done
done
date +%s.%N >> $OUT/pw/marks.txt
kill $smi
# DRAM bytes and L2 hit rate of the causal kernel's orders vs the non-causal tile (if ncu reads counters here)
if command -v ncu >/dev/null; then
  M=dram__bytes_read.sum,lts__t_sector_hit_rate.pct,gpu__time_duration.sum,sm__cycles_elapsed.avg.per_second
  for o in grouped longest-first head-major; do
    timeout 120 ncu --clock-control none --metrics $M -k regex:attention_fwd -c 1 --launch-skip 3 \
      $X bench attention -d 128 -S 32768 -H 24 --causal --causal-order $o --iters 20 --warmup 2 --check-rows 2 > $OUT/pw/ncu-causal-$o.txt 2>&1
  done
  timeout 120 ncu --clock-control none --metrics $M -k regex:attention_fwd -c 1 --launch-skip 3 \
    $X bench attention -d 128 -S 32768 -H 24 --iters 20 --warmup 2 --check-rows 2 > $OUT/pw/ncu-nc.txt 2>&1
fi
