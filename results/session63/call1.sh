#!/usr/bin/env bash
# Session 63 call 1, a record: the tile it studies was removed at e11053f, so it runs only from a
# checkout of c05a3dc (carry .run-kg: xstage and the GPU tests of 6b6d63a, attention only, with the
# 128-row key-group tile; and, for the H200 part, .run-bin and .ab-long of session62/prepare.sh;
# timeout 590).
# Any card: the rows128-kg study (docs/attention.md §Key groups "Four warp groups"): the GPU tests
# of the key-group tiles (a failure or a hang stops the run), then `xstage bench attention -d 64`
# with tiles auto, rows128-kg, rows128 and rows64, twice in alternating order, and PyTorch's cuDNN
# SDPA, on S {1024, 1100, 2048, 4096} x H {4, 8, 12, 16, 24, 40}; one table per pass
# (python/compare_attention_tiles.py). On an H200, with the time left (env LIMIT, default 560 s for
# the whole call): issue 38's acceptance (results/session62/h200.sh).
set -u
t0=$SECONDS
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv | tee $OUT/gpu.txt
source .run-kg/env.sh
timeout 150 .run-kg/tests/xstage_gpu_tests --gtest_filter='*rows128kg*:*rows64*' > $OUT/gpu-tests-kg.log 2>&1
rc=$?; echo "kg tests rc=$rc"; grep -E '^\[  (PASSED|FAILED) |tests ran' $OUT/gpu-tests-kg.log | head -n 20
[ $rc = 0 ] || { st; exit 1; }
S=1024,1100,2048,4096 H=4,8,12,16,24,40
for pass in 1 2; do
  tiles="auto rows128-kg rows128 rows64"; [ $pass = 2 ] && tiles="rows128-kg auto rows64 rows128"
  mkdir -p $OUT/p$pass
  for t in $tiles; do
    .run-kg/xstage bench attention -S $S -H $H -d 64 --tile $t --json $OUT/p$pass/xs-$t.json > $OUT/p$pass/xs-$t.log 2>&1 \
      || { echo "bench $t pass $pass failed"; tail -3 $OUT/p$pass/xs-$t.log; }
  done
done
python3 python/bench_attention_torch.py --backends cudnn --seqlens $S --heads $H --head-dims 64 --json $OUT/torch.json \
  > $OUT/torch.log 2>&1 || { echo "torch bench failed"; tail -3 $OUT/torch.log; }
for pass in 1 2; do
  python3 python/compare_attention_tiles.py $OUT/torch.json $OUT/p$pass/xs-{auto,rows128-kg,rows128,rows64}.json \
    > $OUT/p$pass/table.txt 2>&1; cat $OUT/p$pass/table.txt
done
echo "study part: $((SECONDS - t0)) s"
st
if grep -q H200 $OUT/gpu.txt && [ $((SECONDS - t0)) -lt $(( ${LIMIT:-560} - 300 )) ]; then
  mkdir -p $OUT/h200 && OUT=$OUT/h200 LIMIT=$(( ${LIMIT:-560} - (SECONDS - t0) )) bash results/session62/h200.sh
fi
st
