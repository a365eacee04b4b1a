#!/usr/bin/env bash
# session 55 call 1 (.run-bin of f0e50b5). On an H200: issue 38's acceptance
# (results/attention-session52/call1.sh). Otherwise: the session-54 defaults' per-token GPU tests
# and short bench (results/megamoe-session54/call6.sh, never run yet), then W4A8 / W8A8 fused at
# the layers that keep the 256-row per-token tile (DiT-MoE-G, DSv4-Flash at 2048 / 8192 tokens).
set -u
nvidia-smi --query-gpu=name --format=csv,noheader | tee $OUT/card.txt
if grep -q H200 $OUT/card.txt; then
  bash results/attention-session52/call1.sh
  exit
fi
bash results/megamoe-session54/call6.sh
MODELS="${MODELS:-DiT-MoE-G DSv4-Flash}" BUDGET=${BUDGET:-150} bash results/megamoe-session53/call3.sh
