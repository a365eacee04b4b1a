#!/usr/bin/env bash
# Session 59 call B (carry .run-bin, .ab-longs and .ab-stream; timeout 600): on an H200, issue 38's
# acceptance with the stream fill built in (docs/attention.md §Stream fill); on any other card,
# call A (h100-a.sh: the stream fill's short A/B and issue 37's tails study) instead.
# .run-bin: scripts/run-bin after `cmake -S . -B build -DXSTAGE_ATTN_STREAM_FILL=ON`; .ab-longs:
# .ab-long's base (52d10a6) and that build's stripped xstage as "new", so the long A/B is stream-on
# main against the pre-issue base. The H200 part is results/megamoe-session56/h200-only.sh (GPU
# tests, short / causal / long grids with cuDNN, long A/B); then, where the call has 170 s left
# (SECONDS < 400 of a 590 s timeout), stream-micro.sh into $OUT/stream (the builds A/B at S 1024 /
# 1100, d 64), packed into r.tgz with the rest. Short call (timeout 340):
# LIMIT=300 MIN_AB=70 MICRO_BY=0 TAILS_BUDGET=0.
set -u
if ! nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  TAILS_BUDGET=${TAILS_BUDGET:-240} bash results/session59/h100-a.sh
  exit
fi
rm -rf .ab-long && mv .ab-longs .ab-long
LIMIT=${LIMIT:-560} bash results/megamoe-session56/h200-only.sh
if [ $SECONDS -lt ${MICRO_BY:-400} ]; then  # env MICRO_BY: start the micro A/B only before this second
  mkdir -p $OUT/stream && OUT=$OUT/stream bash results/session59/stream-micro.sh
fi
source .run-bin/env.sh && st
