#!/usr/bin/env bash
# session 49 call 1: the claimed causal order against grouped, and auto (claimed at d 128 from S 8192) (bf16 with the GPU tests, fp16), cuDNN
# in the same call; then ncu DRAM bytes of both orders at S 32768 H 24 d 128.
set -u
source .run-bin/env.sh
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv > $OUT/gpu.txt
R=clocks_event_reasons.active; nvidia-smi --query-gpu=$R --format=csv >/dev/null 2>&1 || R=clocks_throttle_reasons.active
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,$R --format=csv,noheader -lms 200 > $OUT/smi.csv &
smi=$!
t0=$(date +%s)
scripts/attention-causal-ab --orders auto,grouped,claimed $OUT/causal > $OUT/causal.log 2>&1
echo "rc=$? $(( $(date +%s) - t0 )) s" >> $OUT/causal.log; st
scripts/attention-causal-ab --orders auto,grouped,claimed -d 128 --dtype fp16 --no-tests $OUT/causal-fp16 > $OUT/causal-fp16.log 2>&1
echo "rc=$? $(( $(date +%s) - t0 )) s" >> $OUT/causal-fp16.log; st
kill $smi
X=.run-bin/xstage
M=dram__bytes_read.sum,lts__t_sector_hit_rate.pct,gpu__time_duration.sum,sm__cycles_elapsed.avg.per_second
for o in grouped claimed; do
  timeout 100 ncu --clock-control none --metrics $M -k regex:attention_fwd -c 1 --launch-skip 3 \
    $X bench attention -d 128 -S 32768 -H 24 --causal --causal-order $o --iters 20 --warmup 2 --check-rows 2 > $OUT/ncu-$o.txt 2>&1
done
st
