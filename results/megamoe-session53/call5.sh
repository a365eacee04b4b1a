#!/usr/bin/env bash
# session 53 call 5 (the session's last ~270 s of device time): on an H200 issue 38's grids
# (results/attention-partial-h100/call5.sh, the tests left for a later call); on any other card the
# per-token W4A8 state of call3.sh for Qwen3.5-397B-A17B.
set -u
nvidia-smi --query-gpu=name --format=csv,noheader | tee $OUT/card.txt
if grep -q H200 $OUT/card.txt; then
  bash results/attention-partial-h100/call5.sh
  for f in short/d64.txt short/d128.txt causal-bf16/ab.txt causal-fp16/ab.txt long/long-compare.txt; do
    echo "== $f"; grep '^#' $OUT/$f | tail -n 3
  done
  echo "long rows below 1.0x cuDNN:"; awk '$1 ~ /^[0-9]+$/ && $8+0 < 1.0' $OUT/long/long-compare.txt
else
  MODELS="Qwen3.5-397B-A17B" BUDGET=20 bash results/megamoe-session53/call3.sh
fi
