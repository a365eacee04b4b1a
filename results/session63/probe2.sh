#!/usr/bin/env bash
# Session 63 probe 2 (carry .run-bin; timeout 240; any card): cuDNN's side of probe.sh's
# decomposition (docs/attention.md §Key groups, "One round of tiles"). PyTorch SDPA with the cuDNN
# backend and xstage's 128-row d = 64 tile, q 1024 x 12 heads against key lengths 128..2048
# (python/bench_attention_torch.py --q-len and xstage bench attention --q-len: the same timing,
# every cell checked), 100 launches per cell; python/fit_attention_steps.py fits µs per key block
# and µs at zero blocks for both. Then Nsight Compute's speed-of-light section of both kernels at
# 1 and 8 key blocks (in-kernel time without the events).
set -u
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv | tee $OUT/gpu.txt
source .run-bin/env.sh
KV=128,256,384,512,768,1024,1536,2048
python3 python/bench_attention_torch.py --backends cudnn --q-len 1024 --heads 12 --head-dims 64 --seqlens $KV \
  --iters 100 --json $OUT/cudnn-kv.json > $OUT/cudnn-kv.log 2>&1 || { echo "torch bench failed"; tail -3 $OUT/cudnn-kv.log; }
.run-bin/xstage bench attention -d 64 --tile rows128 --q-len 1024 -H 12 -S $KV --iters 100 --json $OUT/xs-kv.json \
  > $OUT/xs-kv.log 2>&1 || { echo "xstage bench failed"; tail -3 $OUT/xs-kv.log; }
python3 python/fit_attention_steps.py $OUT/xs-kv.json $OUT/cudnn-kv.json --json $OUT/fit.json | tee $OUT/fit.txt
st
if command -v ncu >/dev/null; then
  for kv in 128 1024; do
    timeout 60 ncu --clock-control none --section SpeedOfLight -k regex:attention_fwd -c 1 --launch-skip 5 \
      .run-bin/xstage bench attention -d 64 --tile rows128 --q-len 1024 -S $kv -H 12 --iters 20 --warmup 5 \
      --check-rows 2 > $OUT/ncu-xstage-kv$kv.txt 2>&1
    timeout 90 ncu --clock-control none --section SpeedOfLight -k regex:sdpa -c 1 --launch-skip 5 \
      python3 python/bench_attention_torch.py --backends cudnn --q-len 1024 --heads 12 --head-dims 64 --seqlens $kv \
      --iters 20 --check-rows 2 > $OUT/ncu-cudnn-kv$kv.txt 2>&1
  done
  grep -HE 'Elapsed Cycles|SM Active Cycles|Duration|SM Frequency' $OUT/ncu-*-kv*.txt | sed "s#$OUT/##"
fi
st
