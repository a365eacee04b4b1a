#!/usr/bin/env bash
# Session 67's ready call for the next device time (one call, ~6 min; carry .run-bin and .ab-s3):
# 1. issue 38's motivating causal shapes off the acceptance grid (S 8191 with 16 heads at d 64 and
#    S 16383 with 24 heads at d 128, bf16 and fp16; python/compare_attention_causal.py's table via
#    scripts/attention-causal-ab, cuDNN in the same call, every cell checked), ~1.5 min;
# 2. results/session67/stages-ab.sh: the per-token Mega-MoE kernel on 3 stages against 4 (issue 37).
set -u
source .run-bin/env.sh
t0=$SECONDS
bash results/session67/odd.sh
echo "odd causal shapes: $((SECONDS - t0)) s"
LIMIT=$((540 - (SECONDS - t0))) bash results/session67/stages-ab.sh
