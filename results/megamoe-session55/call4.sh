#!/usr/bin/env bash
# session 55 call 4 (.run-bin of f0e50b5, .ab-long as call2.sh). On an H200: call2.sh's issue-38
# acceptance and long non-causal A/B. Otherwise (a short call): where the per-token W4A8 fused
# kernel loses against W8A8 fused at Qwen3.5-397B-A17B 8192 tokens (the phase breakdown, interleaved).
set -u
nvidia-smi --query-gpu=name --format=csv,noheader | tee $OUT/card.txt
if grep -q H200 $OUT/card.txt; then
  bash results/megamoe-session55/call2.sh
  exit
fi
source .run-bin/env.sh
timeout 150 .run-bin/xstage bench moe --gpus 1 --models Qwen3.5-397B-A17B --tokens 8192 --routings balanced \
  --weights w8a8,w4a8-int4-lut-rs-tok,w4a8-mxfp4-rs-tok --variants unfused,interleaved --spans \
  --json $OUT/spans.json > $OUT/spans.log 2>&1
echo "spans rc=$?"; grep -E 'phases|correctness' $OUT/spans.log
