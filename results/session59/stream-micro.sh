#!/usr/bin/env bash
# Session 59's smallest stream-fill check (carry .ab-stream; timeout 170), for the last device
# seconds: the stream build's StreamFill GPU test, then S 1024 / 1100 x 10-14 heads at d 64, both
# builds alternating twice, every cell checked. stream-mini.sh and stream-ab.sh are the longer forms.
set -u
nvidia-smi --query-gpu=name --format=csv,noheader | tee $OUT/card.txt
timeout 150 scripts/ab-run --bin .ab-stream --variants base,stream --alternate --reps 2 --tar \
  --tests 'AttentionGpu.StreamFill*:AttentionGpu.TailSplit*' \
  $OUT/ab 'attention -S 1024,1100 -H 10,12,14 -d 64' > $OUT/ab.log 2>&1
echo "ab-run rc=$?"; grep -E '^#|geomean|FAIL|OK \]|passed|failed|stream' $OUT/ab.log | tail -n 40
