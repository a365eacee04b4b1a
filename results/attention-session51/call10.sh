#!/usr/bin/env bash
# session 51 call 10: the key-group tiles with the empty position for odd tiles (.run-bin, d2d703e)
# against the build before it (.run-prev, 723dd03): the attention GPU tests of the new build, then
# the key-group shapes with both builds alternating (old first, two rounds), every cell checked.
set -u
source .run-bin/env.sh
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv > $OUT/gpu.txt
t0=$(date +%s)
timeout 300 .run-bin/tests/xstage_gpu_tests --gtest_filter='*Attention*:SoftmaxPathsGpu.*' > $OUT/gpu-tests.log 2>&1
rc=$?; echo "tests rc=$rc $(( $(date +%s) - t0 )) s" >> $OUT/times.txt; tail -3 $OUT/gpu-tests.log
[ $rc = 0 ] || { st; exit 1; }
for r in 1 2; do for b in prev bin; do
  X=.run-$b/xstage
  $X bench attention --causal -S 2048,4096 -H 8,16 -d 64 --tile rows64 --json $OUT/$b-causal-$r.json > $OUT/$b-causal-$r.log 2>&1
  $X bench attention -S 1024,1100,2048 -H 1,4,8 -d 64,128 --tile rows64 --json $OUT/$b-nc-$r.json > $OUT/$b-nc-$r.log 2>&1
done; done
echo "ab $(( $(date +%s) - t0 )) s" >> $OUT/times.txt; st
