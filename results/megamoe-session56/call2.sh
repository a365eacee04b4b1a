#!/usr/bin/env bash
# session 56 call 2 (.run-bin for env.sh; .ab-hg: base and -DXSTAGE_MEGA_TOK_H_GROUPS=ON of the
# commit adding this script; .ab-long as results/megamoe-session55/call2.sh). On an H200: that
# script (issue 38's acceptance and the long non-causal A/B; LIMIT bounds it). Otherwise:
# group-scaled h against the default per-token kernel, same call: the variant's per-token GPU tests
# (P = 1, virtual P = 2, 4, 8), then DiT-MoE-G and DSv4-Flash at 2048 / 8192 tokens, W8A8 (the
# ratio's denominator; its kernel is the same in both builds), INT4 and MXFP4, interleaved with the
# spans, two alternating runs per build, every cell checked.
set -u
nvidia-smi --query-gpu=name --format=csv,noheader | tee $OUT/card.txt
if grep -q H200 $OUT/card.txt && [ -d .ab-long ]; then
  LIMIT=${LIMIT:-560} bash results/megamoe-session55/call2.sh
  exit
fi
source .run-bin/env.sh
scripts/ab-run --bin .ab-hg --variants base,grp --alternate --reps 2 --test-timeout 200 --tar \
  --tests 'MegaMoe.OneGpuW4A8PerToken*:P/MegaMoeW4A8TokRanks.*' $OUT/hg \
  'moe --gpus 1 --models DiT-MoE-G,DSv4-Flash --tokens 2048,8192 --routings balanced --weights w8a8,w4a8-int4-lut-rs-tok,w4a8-mxfp4-rs-tok --variants interleaved --spans' \
  > $OUT/hg.log 2>&1
echo "ab-run rc=$?"; grep -E 'tests|PASSED|FAILED|correctness|geomean|^#' $OUT/hg.log | tail -n 40
