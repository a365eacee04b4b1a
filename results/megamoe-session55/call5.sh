#!/usr/bin/env bash
# session 55 call 5 (.run-bin of f0e50b5, .ab-long as call2.sh, .ab-qk: base and
# -DXSTAGE_MEGA_TOK_QUANT_K=ON of the commit adding this script). On an H200: call2.sh (issue 38's
# acceptance, the long non-causal A/B; LIMIT bounds it). Otherwise: the channel-chunk quantisation
# against the default per-token kernel, same call: the variant's per-token GPU tests (P = 1,
# virtual P = 2, 4, 8), then DiT-MoE-G and DSv4-Flash at 2048 / 8192 tokens, INT4 and MXFP4,
# interleaved with the spans, two alternating runs per build, every cell checked.
set -u
nvidia-smi --query-gpu=name --format=csv,noheader | tee $OUT/card.txt
if grep -q H200 $OUT/card.txt; then
  LIMIT=${LIMIT:-440} bash results/megamoe-session55/call2.sh
  exit
fi
source .run-bin/env.sh
scripts/ab-run --bin .ab-qk --variants base,qk --alternate --reps 2 --test-timeout 150 \
  --tests 'MegaMoe.OneGpuW4A8PerToken*:P/MegaMoeW4A8TokRanks.*' $OUT/qk \
  'moe --gpus 1 --models DiT-MoE-G,DSv4-Flash --tokens 2048,8192 --routings balanced --weights w4a8-int4-lut-rs-tok,w4a8-mxfp4-rs-tok --variants interleaved --spans' \
  > $OUT/qk.log 2>&1
echo "ab-run rc=$?"; grep -E 'tests|PASSED|FAILED|correctness|geomean|^#' $OUT/qk.log | tail -n 30
