#!/usr/bin/env bash
# session 51 call 3: key groups at d = 128 non-causal — the GPU tests of every rows64 path, then the
# short d = 128 grid with tiles auto, rows64, staged and split back to back, cuDNN in the same call;
# on an H200 also issue 38's grids (attention-partial-h100/call5.sh).
set -u
source .run-bin/env.sh
X=.run-bin/xstage
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv > $OUT/gpu.txt
t0=$(date +%s)
timeout 200 .run-bin/tests/xstage_gpu_tests --gtest_filter='*rows64*:AttentionGpuReference.*' > $OUT/gpu-tests.log 2>&1
rc=$?; echo "tests rc=$rc $(( $(date +%s) - t0 )) s" >> $OUT/times.txt; tail -3 $OUT/gpu-tests.log
[ $rc = 0 ] || { st; exit 1; }
S=1024,1100,2048,2500,4096,4608 H=4,8,16,24,40
mkdir -p $OUT/d128
for t in auto rows64 staged split; do
  $X bench attention -S $S -H $H -d 128 --tile $t --json $OUT/d128/xs-$t.json > $OUT/d128/xs-$t.log 2>&1
done
python3 python/bench_attention_torch.py --backends cudnn --seqlens $S --heads $H --head-dims 128 \
  --json $OUT/d128/torch.json > $OUT/d128/torch.log 2>&1
python3 python/compare_attention_tiles.py $OUT/d128/torch.json $OUT/d128/xs-{auto,rows64,staged,split}.json > $OUT/d128.txt 2>&1
echo "d128 $(( $(date +%s) - t0 )) s" >> $OUT/times.txt; st
if grep -q H200 $OUT/gpu.txt; then bash results/attention-partial-h100/call5.sh; echo "call5 $(( $(date +%s) - t0 )) s" >> $OUT/times.txt; st; fi
