#!/usr/bin/env bash
# Session 59 call B (H200 only; carry .run-bin and .ab-longs; timeout 600): issue 38's acceptance
# with the stream fill built in (docs/attention.md §Stream fill). .run-bin: scripts/run-bin after
# `cmake -S . -B build -DXSTAGE_ATTN_STREAM_FILL=ON`; .ab-longs: .ab-long's base (52d10a6) and that
# build's stripped xstage as "new", so the long A/B is stream-on main against the pre-issue base.
# Runs results/megamoe-session56/h200-only.sh (GPU tests, short / causal / long grids with cuDNN,
# long A/B); on any other card it stops at once.
set -u
rm -rf .ab-long && mv .ab-longs .ab-long
LIMIT=${LIMIT:-560} bash results/megamoe-session56/h200-only.sh
