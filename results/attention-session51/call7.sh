#!/usr/bin/env bash
# session 51 call 7: key groups at d = 64 non-causal — the attention GPU tests, then the d = 64
# tiles auto, rows64, rows128, split and staged back to back on few-head shapes, cuDNN in the call;
# on an H200 also issue 38's grids (attention-partial-h100/call5.sh).
set -u
source .run-bin/env.sh
X=.run-bin/xstage
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv > $OUT/gpu0.txt
t0=$(date +%s)
timeout 300 .run-bin/tests/xstage_gpu_tests --gtest_filter='*Attention*:SoftmaxPathsGpu.*' > $OUT/gpu-tests.log 2>&1
rc=$?; echo "tests rc=$rc $(( $(date +%s) - t0 )) s" >> $OUT/times0.txt; tail -3 $OUT/gpu-tests.log
[ $rc = 0 ] || { st; exit 1; }
S=1024,1100,2048,4096,8192 H=1,2,4,8
mkdir -p $OUT/d64
for t in auto rows64 rows128 split staged; do
  $X bench attention -S $S -H $H -d 64 --tile $t --json $OUT/d64/xs-$t.json > $OUT/d64/xs-$t.log 2>&1
done
python3 python/bench_attention_torch.py --backends cudnn --seqlens $S --heads $H --head-dims 64 \
  --json $OUT/d64/torch.json > $OUT/d64/torch.log 2>&1
python3 python/compare_attention_tiles.py $OUT/d64/torch.json $OUT/d64/xs-{auto,rows64,rows128,split,staged}.json > $OUT/d64.txt 2>&1
echo "d64 $(( $(date +%s) - t0 )) s" >> $OUT/times0.txt; st
if grep -q H200 $OUT/gpu0.txt; then bash results/attention-partial-h100/call5.sh; fi
