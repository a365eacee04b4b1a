#!/usr/bin/env bash
# Session 58's short stream-fill check (carry .ab-stream; timeout 240), for a call with little device
# time: the stream build's split / fill / stream GPU tests, then S 1024 / 1100 with 10-14 heads at
# d 64 and 128, both builds alternating twice, every cell checked. stream-ab.sh is the full A/B.
# Env TMO, TESTS, DIMS narrow it (session59/stream-micro.sh).
set -u
nvidia-smi --query-gpu=name --format=csv,noheader | tee $OUT/card.txt
timeout ${TMO:-220} scripts/ab-run --bin .ab-stream --variants base,stream --alternate --reps 2 --tar \
  --tests "${TESTS:-AttentionGpu.StreamFill*:AttentionGpu.TailSplit*:Shapes/AttentionGpu.*split*:Shapes/AttentionGpu.*fill*}" \
  $OUT/ab "attention -S 1024,1100 -H 10,12,14 -d ${DIMS:-64,128}" > $OUT/ab.log 2>&1
echo "ab-run rc=$?"; grep -E '^#|geomean|FAIL|PASSED|OK \]|passed|failed|stream' $OUT/ab.log | tail -n 40
