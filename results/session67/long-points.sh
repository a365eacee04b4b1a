#!/usr/bin/env bash
# Session 67 (issue 38): the two long non-causal points under 1.0x cuDNN in accept.sh's long grid
# on one H100 (S 1024 x 12 heads d 64: 0.99; S 16384 x 12 heads d 128: 0.997), each in 4
# alternating passes of xstage and cuDNN, every pass gated by compare_attention.py's correctness
# check (pass lines: xstage us, cuDNN us, cuDNN / xstage). Carry .run-bin.
set -u
source .run-bin/env.sh
nvidia-smi --query-gpu=name --format=csv,noheader | tee $OUT/card.txt
W=/tmp/lp; mkdir -p $W
for pt in "1024 12 64" "16384 12 128"; do
  set -- $pt
  for r in 1 2 3 4; do
    n=S$1-H$2-d$3-$r
    .run-bin/xstage bench attention -S $1 -H $2 -d $3 --json $W/xs-$n.json > $W/xs-$n.log 2>&1
    python3 python/bench_attention_torch.py --backends cudnn --seqlens $1 --heads $2 --head-dims $3 --json $W/t-$n.json > $W/t-$n.log 2>&1
    python3 python/compare_attention.py $W/xs-$n.json $W/t-$n.json --json $W/c-$n.json > $W/c-$n.txt 2>&1
    python3 -c "
import json; r = json.load(open('$W/c-$n.json'))['rows'][0]; c = r['torch-cudnn']
ok = r['correctness_ok'] and c['correctness_ok']
print('$n', round(r['xstage_median_us'], 3), round(c['median_us'], 3), round(c['median_us'] / r['xstage_median_us'], 4), 'ok' if ok else 'FAILED')" | tee -a $OUT/points.txt
  done
done
tar czf $OUT/points.tgz -C /tmp lp
