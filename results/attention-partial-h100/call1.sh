#!/usr/bin/env bash
# session 50 call 1: partial tiles (idle warp groups, partial tiles dealt last). The attention GPU
# tests; the partial-tile cost probes (one tile per CTA: 132 heads, 4096 keys, q_len 64 / 128 /
# 192); the short non-causal grid: auto, auto --no-partial-tiles, staged, rows128 of this build,
# auto of the build before (.run-prev, HEAD 28f22df) and cuDNN.
set -u
source .run-bin/env.sh
X=.run-bin/xstage O=.run-prev/xstage
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv > $OUT/gpu.txt
t0=$(date +%s)
timeout 200 .run-bin/tests/xstage_gpu_tests --gtest_filter='*AttentionGpu*:SoftmaxPathsGpu*' > $OUT/gpu-tests.log 2>&1
echo "rc=$? $(( $(date +%s) - t0 )) s" >> $OUT/gpu-tests.log; st
mkdir -p $OUT/probe
probe() {  # d tile q [np]
  local n=d$1-$2-q$3${4:+-np}
  $X bench attention -d $1 -S 4096 -H 132 --q-len $3 --tile $2 ${4:+--no-partial-tiles} --json $OUT/probe/$n.json > $OUT/probe/$n.log 2>&1
}
for q in 64 128 192; do probe 64 staged $q; done
probe 64 staged 64 np; probe 64 staged 128 np
for q in 64 128; do probe 64 rows128 $q; done
probe 64 rows128 64 np
for q in 64 128; do probe 128 staged $q; done
probe 128 staged 64 np
echo "probes $(( $(date +%s) - t0 )) s" >> $OUT/gpu-tests.log; st
S=1024,1100,2048,2500,4096,4608 H=4,8,16,24,40
mkdir -p $OUT/short
sb() {  # binary name d tile [np]
  local n=$2-d$3-$4${5:+-np}
  $1 bench attention -S $S -H $H -d $3 --tile $4 ${5:+--no-partial-tiles} --json $OUT/short/$n.json > $OUT/short/$n.log 2>&1
}
sb $X new 64 auto; sb $O old 64 auto; sb $X new 64 auto np; sb $X new 64 staged; sb $X new 64 rows128
sb $X new 128 auto; sb $O old 128 auto
python3 python/bench_attention_torch.py --backends cudnn --seqlens $S --heads $H --head-dims 64,128 \
  --json $OUT/short/torch.json > $OUT/short/torch.log 2>&1
cd $OUT/short
python3 $OLDPWD/python/compare_attention_tiles.py torch.json new-d64-auto.json new-d64-auto-np.json new-d64-staged.json \
  new-d64-rows128.json > d64.txt 2>&1
python3 $OLDPWD/python/compare_attention_tiles.py torch.json new-d128-auto.json > d128.txt 2>&1
python3 $OLDPWD/python/compare_attention_ab.py --base old-d64-auto.json old-d128-auto.json \
  --variant new new-d64-auto.json new-d128-auto.json > new-vs-old.txt 2>&1
cd $OLDPWD
echo "short $(( $(date +%s) - t0 )) s" >> $OUT/gpu-tests.log; st
