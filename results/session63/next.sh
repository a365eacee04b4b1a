#!/usr/bin/env bash
# The next session's first call (carry .run-bin and .ab-long of results/session62/prepare.sh, or
# .run-bin of f8b715e or later with .ab-long as there; timeout 590): on an H200 issue 38's acceptance
# (results/session62/h200.sh; env LIMIT as there); on any other card cuDNN's side of the one-round
# decomposition (results/session63/probe2.sh, ~1 min).
set -u
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  bash results/session62/h200.sh
else
  bash results/session63/probe2.sh
fi
