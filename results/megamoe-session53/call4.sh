#!/usr/bin/env bash
# session 53 call 4: on an H200 issue 38's acceptance (results/attention-session52/call1.sh); on any
# other card the per-token W4A8 state of call3.sh for four models (budget 150 s).
set -u
nvidia-smi --query-gpu=name --format=csv,noheader | tee $OUT/card.txt
if grep -q H200 $OUT/card.txt; then
  bash results/attention-session52/call1.sh
else
  MODELS="Qwen3.5-397B-A17B DSv4-Flash Hy3 DiT-MoE-G" BUDGET=150 bash results/megamoe-session53/call3.sh
fi
