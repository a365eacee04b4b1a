#!/usr/bin/env bash
# session 52 call 6: where W8A8 stands with the half blocks and the 32-row tile rule (binaries of
# fd9b471, MoE build): every model at 2048 and 8192 tokens, balanced and skewed, the unfused layer
# and both fused orders (automatic tile), one run, every cell checked.
set -u
source .run-bin/env.sh
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv | tee $OUT/gpu.txt
timeout 480 .run-bin/xstage bench moe --gpus 1 --tokens 2048,8192 --routings balanced,skewed --weights w8a8 \
  --variants unfused,interleaved,expert-wave --json $OUT/w8a8.json > $OUT/w8a8.txt 2>&1
echo "bench rc=$?"; gzip -f $OUT/w8a8.json; tail -n 5 $OUT/w8a8.txt
