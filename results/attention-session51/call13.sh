#!/usr/bin/env bash
# session 51 call 13: tools/attn_study — the staged d = 128 tile with 64-key blocks in four stages
# against the shipped 128-key two-stage tile (interleaved, checked), on S 1024 (12 / 24 / 40 heads) and
# longer shapes: whether a last-round key-group variant could keep whole tiles at full speed.
set -u
source .run-bin/env.sh
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv > $OUT/gpu.txt
.run-bin/attn_study --seqlens 1024,2048,4096,8192 --heads 12,24,40 --iters 30 --json $OUT/study.json > $OUT/study.log 2>&1
echo "rc=$?" >> $OUT/study.log
