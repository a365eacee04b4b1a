#!/usr/bin/env bash
# session 50 call 5 (binaries of bea4a07 or later docs-only commits): issue 38's grids with the
# final rule: the short grid d 64 / d 128 (auto) with cuDNN, causal bf16 and fp16 (auto order) with
# cuDNN, the long non-causal grid with cuDNN and flash SDPA.
set -u
source .run-bin/env.sh
X=.run-bin/xstage
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv > $OUT/gpu.txt
t0=$(date +%s)
S=1024,1100,2048,2500,4096,4608 H=4,8,16,24,40
mkdir -p $OUT/short $OUT/long
for d in 64 128; do $X bench attention -S $S -H $H -d $d --json $OUT/short/d$d.json > $OUT/short/d$d.log 2>&1; done
python3 python/bench_attention_torch.py --backends cudnn --seqlens $S --heads $H --head-dims 64,128 \
  --json $OUT/short/torch.json > $OUT/short/torch.log 2>&1
for d in 64 128; do
  python3 python/compare_attention_tiles.py $OUT/short/torch.json $OUT/short/d$d.json > $OUT/short/d$d.txt 2>&1
done
echo "short $(( $(date +%s) - t0 )) s" >> $OUT/times.txt; st
for dt in bf16 fp16; do
  scripts/attention-causal-ab --orders auto --dtype $dt --no-tests $OUT/causal-$dt > $OUT/causal-$dt.log 2>&1
  echo "causal $dt rc=$? $(( $(date +%s) - t0 )) s" >> $OUT/times.txt; st
done
$X bench attention --json $OUT/long/attention.json > $OUT/long/xstage.log 2>&1
python3 python/bench_attention_torch.py --backends cudnn,flash --json $OUT/long/attention-torch.json > $OUT/long/torch.log 2>&1
python3 python/compare_attention.py $OUT/long/attention.json $OUT/long/attention-torch.json > $OUT/long/long-compare.txt 2>&1
echo "long $(( $(date +%s) - t0 )) s" >> $OUT/times.txt; st
