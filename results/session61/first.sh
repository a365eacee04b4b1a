#!/usr/bin/env bash
# Session 61's first call (carry .run-bin, .ab-longs, .ab-stream, .ab-runbin-moe; timeout 590).
# .run-bin: xstage + GPU tests with XSTAGE_ATTN_STREAM_FILL=ON and XSTAGE_BUILD_MOE=OFF (attention
# only, 14 MB); .ab-runbin-moe: scripts/run-bin of the default build (MoE included), renamed so it
# stays ignored. On an H200: session59/h200-accept.sh (issue 38's acceptance with the stream fill,
# then the micro A/B). Elsewhere: the default build becomes .run-bin and session59/h100-a.sh runs
# (the stream fill's short A/B from .ab-stream, then issue 37's tails study, which needs MoE).
set -u
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  exec bash results/session59/h200-accept.sh
fi
if [ -d .ab-runbin-moe ]; then rm -rf .run-bin && mv .ab-runbin-moe .run-bin
else echo "first.sh: .ab-runbin-moe not carried: the tails study has no MoE binary and will fail"; fi
TAILS_BUDGET=${TAILS_BUDGET:-240} bash results/session59/h100-a.sh
