#!/usr/bin/env bash
# Session 67 (issue 38): the long non-causal grid (bench attention's default grid) with cuDNN in
# 3 alternating passes (xstage, cuDNN, xstage, cuDNN, ...) in one call; each pass is compared and
# gated by compare_attention.py's correctness check, and passes.txt gives per cell the median over
# the passes of each side's median and their ratio (cuDNN / xstage time). Carry .run-bin.
set -u
source .run-bin/env.sh
nvidia-smi --query-gpu=name --format=csv,noheader | tee $OUT/card.txt
W=/tmp/lg; mkdir -p $W
for r in 1 2 3; do
  .run-bin/xstage bench attention --json $W/xs-$r.json > $W/xs-$r.log 2>&1
  python3 python/bench_attention_torch.py --backends cudnn --json $W/t-$r.json > $W/t-$r.log 2>&1
  python3 python/compare_attention.py $W/xs-$r.json $W/t-$r.json --json $W/c-$r.json > $W/c-$r.txt 2>&1
  echo "pass $r rc=$? at $SECONDS s"; grep correctness $W/c-$r.txt
done
python3 python/attention_passes.py $W/c-1.json $W/c-2.json $W/c-3.json | tee $OUT/passes.txt
tar czf $OUT/long-passes.tgz -C /tmp lg
