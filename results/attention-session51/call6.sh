#!/usr/bin/env bash
# session 51 call 6: the tail key-group tile (d = 128 non-causal) — its GPU tests (a named-barrier
# hang would be cut by the timeout), then the d = 128 tiles staged, tail-groups and auto back to back
# on shapes with sparse last rounds, cuDNN in the same call.
set -u
source .run-bin/env.sh
X=.run-bin/xstage
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv > $OUT/gpu.txt
t0=$(date +%s)
timeout 120 .run-bin/tests/xstage_gpu_tests --gtest_filter='*tailgroups*:*rows64*' > $OUT/gpu-tests.log 2>&1
rc=$?; echo "tests rc=$rc $(( $(date +%s) - t0 )) s" >> $OUT/times.txt; tail -3 $OUT/gpu-tests.log
[ $rc = 0 ] || { st; exit 1; }
S=1024,1100,2048,3000 H=12,16,24,28,40,48
mkdir -p $OUT/d128
for rep in 1 2; do for t in staged tail-groups; do
  $X bench attention -S $S -H $H -d 128 --tile $t --json $OUT/d128/xs-$t-$rep.json > $OUT/d128/xs-$t-$rep.log 2>&1
done; done
$X bench attention -S $S -H $H -d 128 --json $OUT/d128/xs-auto.json > $OUT/d128/xs-auto.log 2>&1
python3 python/bench_attention_torch.py --backends cudnn --seqlens $S --heads $H --head-dims 128 \
  --json $OUT/d128/torch.json > $OUT/d128/torch.log 2>&1
python3 python/compare_attention_tiles.py $OUT/d128/torch.json $OUT/d128/xs-auto.json $OUT/d128/xs-{staged,tail-groups}-1.json > $OUT/d128.txt 2>&1
echo "d128 $(( $(date +%s) - t0 )) s" >> $OUT/times.txt; st
