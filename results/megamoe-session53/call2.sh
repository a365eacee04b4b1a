#!/usr/bin/env bash
# session 53 call 2 (issue 37, H200 only): where W8A8 stands on the acceptance hardware with the
# half blocks, the 32-row tile rule and the per-token kernel's new defaults (.run-bin of dcc7210):
# every model at 512 / 2048 / 8192 tokens, balanced and skewed, the unfused layer and both fused
# orders, every cell checked; the table with the bars (W8A8 part).
set -u
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv > $OUT/gpu.txt
grep -q H200 $OUT/gpu.txt || { cat $OUT/gpu.txt; echo "not an H200: nothing run"; exit 3; }
scripts/moe-acceptance --part xstage --weights w8a8 --budget 470 $OUT/acc
echo "xstage part rc=$?"
scripts/moe-acceptance --part table $OUT/acc
tar czf $OUT/acc.tgz -C $OUT acc
