#!/usr/bin/env bash
# session 51 call 12: on an H200, issue 38's acceptance (call 11's grids); on an H100, the S 1024
# cluster (12-40 heads, d 64 and 128) three times, xstage and cuDNN alternating, 100 timed launches
# each, to see whether its misses are noise.
set -u
source .run-bin/env.sh
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv > $OUT/gpu0.txt
if grep -q H200 $OUT/gpu0.txt; then bash results/attention-partial-h100/call5.sh; exit; fi
for r in 1 2 3; do
  .run-bin/xstage bench attention -S 1024 -H 12,24,40 -d 64,128 --iters 100 --json $OUT/xs-$r.json > $OUT/xs-$r.log 2>&1
  python3 python/bench_attention_torch.py --backends cudnn --seqlens 1024 --heads 12,24,40 --head-dims 64,128 \
    --iters 100 --json $OUT/torch-$r.json > $OUT/torch-$r.log 2>&1 || \
  python3 python/bench_attention_torch.py --backends cudnn --seqlens 1024 --heads 12,24,40 --head-dims 64,128 \
    --json $OUT/torch-$r.json > $OUT/torch-$r.log 2>&1
  python3 python/compare_attention.py $OUT/xs-$r.json $OUT/torch-$r.json > $OUT/cmp-$r.txt 2>&1
done
st
