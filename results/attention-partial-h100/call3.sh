#!/usr/bin/env bash
# session 50 call 3: the partial-tiles kernel as its own instantiation (the shipped kernels compile
# as at 28f22df). GPU tests; this build against the build before (.run-prev), alternating, old
# first: short grid and long non-causal shapes (auto); the short grid per tile with cuDNN; causal
# bf16 and fp16 (auto order) with cuDNN; the long non-causal grid with cuDNN and flash SDPA.
set -u
source .run-bin/env.sh
X=.run-bin/xstage O=.run-prev/xstage
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv > $OUT/gpu.txt
t0=$(date +%s)
timeout 200 .run-bin/tests/xstage_gpu_tests --gtest_filter='*AttentionGpu*:SoftmaxPathsGpu*' > $OUT/gpu-tests.log 2>&1
echo "rc=$? $(( $(date +%s) - t0 )) s" >> $OUT/gpu-tests.log; st
S=1024,1100,2048,2500,4096,4608 H=4,8,16,24,40
mkdir -p $OUT/ab $OUT/short
for r in 1 2; do
  for b in old new; do
    B=$X; [ $b = old ] && B=$O
    $B bench attention -S $S -H $H -d 64,128 --json $OUT/ab/short-$b-$r.json > $OUT/ab/short-$b-$r.log 2>&1
    $B bench attention -d 64,128 -S 8192,16384,32768 -H 16,40 --json $OUT/ab/long-$b-$r.json > $OUT/ab/long-$b-$r.log 2>&1
  done
done
python3 python/compare_attention_ab.py --base $OUT/ab/short-old-*.json --variant new $OUT/ab/short-new-*.json > $OUT/ab/short.txt 2>&1
python3 python/compare_attention_ab.py --base $OUT/ab/long-old-*.json --variant new $OUT/ab/long-new-*.json > $OUT/ab/long.txt 2>&1
echo "ab $(( $(date +%s) - t0 )) s" >> $OUT/gpu-tests.log; st
sb() {  # d tile [np]
  local n=d$1-$2${3:+-np}
  $X bench attention -S $S -H $H -d $1 --tile $2 ${3:+--no-partial-tiles} --json $OUT/short/$n.json > $OUT/short/$n.log 2>&1
}
sb 64 auto; sb 64 auto np; sb 64 staged; sb 64 rows128; sb 64 partial; sb 128 auto
python3 python/bench_attention_torch.py --backends cudnn --seqlens $S --heads $H --head-dims 64,128 \
  --json $OUT/short/torch.json > $OUT/short/torch.log 2>&1
( cd $OUT/short && python3 $OLDPWD/python/compare_attention_tiles.py torch.json d64-auto.json d64-auto-np.json \
    d64-staged.json d64-rows128.json d64-partial.json > d64.txt 2>&1
  python3 $OLDPWD/python/compare_attention_tiles.py torch.json d128-auto.json > d128.txt 2>&1 )
echo "short $(( $(date +%s) - t0 )) s" >> $OUT/gpu-tests.log; st
scripts/attention-causal-ab --orders auto --no-tests $OUT/causal-bf16 > $OUT/causal-bf16.log 2>&1
echo "rc=$? $(( $(date +%s) - t0 )) s" >> $OUT/causal-bf16.log; st
scripts/attention-causal-ab --orders auto --dtype fp16 --no-tests $OUT/causal-fp16 > $OUT/causal-fp16.log 2>&1
echo "rc=$? $(( $(date +%s) - t0 )) s" >> $OUT/causal-fp16.log; st
mkdir -p $OUT/long
$X bench attention --json $OUT/long/attention.json > $OUT/long/xstage.log 2>&1
python3 python/bench_attention_torch.py --backends cudnn,flash --json $OUT/long/attention-torch.json > $OUT/long/torch.log 2>&1
python3 python/compare_attention.py $OUT/long/attention.json $OUT/long/attention-torch.json > $OUT/long/long-compare.txt 2>&1
echo "long $(( $(date +%s) - t0 )) s" >> $OUT/gpu-tests.log; st
