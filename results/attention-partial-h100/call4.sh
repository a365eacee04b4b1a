#!/usr/bin/env bash
# session 50 call 4 (binaries of the partial rule with c = 0.64 and up to 8 rounds): the partial-tile
# GPU tests; the shapes around the rule (S 1000 / 1024 / 2500 x H 24 / 40 / 48, and S 1024 H 24
# batch 2), d 64, tiles auto, auto --no-partial-tiles, partial, rows128, staged, twice in turn;
# the short d 64 grid (auto) with cuDNN.
set -u
source .run-bin/env.sh
X=.run-bin/xstage
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv > $OUT/gpu.txt
t0=$(date +%s)
timeout 120 .run-bin/tests/xstage_gpu_tests --gtest_filter='*partial*' > $OUT/gpu-tests.log 2>&1
echo "rc=$? $(( $(date +%s) - t0 )) s" >> $OUT/gpu-tests.log; st
mkdir -p $OUT/rule $OUT/short
for r in 1 2; do
  for t in auto auto-np partial rows128 staged; do
    f=""; tt=$t; [ $t = auto-np ] && { f=--no-partial-tiles; tt=auto; }
    $X bench attention -d 64 -S 1000,1024,2500 -H 24,40,48 --tile $tt $f --json $OUT/rule/$t-$r.json > $OUT/rule/$t-$r.log 2>&1
    $X bench attention -d 64 -S 1024 -H 24 -B 2 --tile $tt $f --json $OUT/rule/b2-$t-$r.json > $OUT/rule/b2-$t-$r.log 2>&1
  done
done
echo "rule $(( $(date +%s) - t0 )) s" >> $OUT/gpu-tests.log; st
S=1024,1100,2048,2500,4096,4608 H=4,8,16,24,40
$X bench attention -S $S -H $H -d 64 --json $OUT/short/d64-auto.json > $OUT/short/d64-auto.log 2>&1
python3 python/bench_attention_torch.py --backends cudnn --seqlens $S --heads $H --head-dims 64 \
  --json $OUT/short/torch.json > $OUT/short/torch.log 2>&1
python3 python/compare_attention_tiles.py $OUT/short/torch.json $OUT/short/d64-auto.json > $OUT/short/d64.txt 2>&1
echo "short $(( $(date +%s) - t0 )) s" >> $OUT/gpu-tests.log; st
