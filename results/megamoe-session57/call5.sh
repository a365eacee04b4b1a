#!/usr/bin/env bash
# session 57 call 5, not run yet (issue 38, H200 only; carry .run-bin): the one acceptance point
# short of 1.0x cuDNN, long non-causal S 1024 with 12 heads at d 64 (0.998x in
# results/attention-issue38-h200/, 96 tiles of 128 rows on 132 SMs), with its neighbours: every
# d = 64 tile by name (auto, staged, rows128, rows64, split, partial) against cuDNN, three times
# back to back, every cell checked; then the same shape 3 x in the long grid's own form.
set -u
source .run-bin/env.sh
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv | tee $OUT/gpu.txt
grep -q H200 $OUT/gpu.txt || { echo "not an H200: nothing run"; exit 3; }
for rep in 1 2 3; do
  for t in auto staged rows128 rows64 split partial; do
    .run-bin/xstage bench attention -S 1024,1100 -H 10,12,14 -d 64 --tile $t --json $OUT/xs-$t-$rep.json > $OUT/xs-$t-$rep.log 2>&1 ||
      { echo "tile $t rep $rep failed"; tail -3 $OUT/xs-$t-$rep.log; }
  done
  python3 python/bench_attention_torch.py --backends cudnn --seqlens 1024,1100 --heads 10,12,14 --head-dims 64 \
    --json $OUT/torch-$rep.json > $OUT/torch-$rep.log 2>&1 || { echo "torch rep $rep failed"; tail -3 $OUT/torch-$rep.log; }
  python3 python/compare_attention_tiles.py $OUT/torch-$rep.json $OUT/xs-{auto,staged,rows128,rows64,split,partial}-$rep.json \
    > $OUT/d64-$rep.txt 2>&1; echo "rep $rep table rc=$?"; cat $OUT/d64-$rep.txt
done
tar czf $OUT/json.tgz -C $OUT $(cd $OUT && ls *.json) && rm -f $OUT/*.json
