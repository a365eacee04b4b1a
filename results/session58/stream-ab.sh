#!/usr/bin/env bash
# Session 58, not run yet (issue 38; carry .ab-stream; timeout 600; any card, an H200 preferred since
# the point it aims at was measured there): the stream fill (docs/attention.md §Stream fill) against
# main in one call. .ab-stream (ignored; ~6 min on 2 cores after a default build; packed at 67fba51):
#   scripts/pack-variants --tests stream .ab-stream base stream:-DXSTAGE_ATTN_STREAM_FILL=ON
# First the stream build's attention GPU tests (StreamFillRepeatsAndMatchesTheUnsplitKernel and
# every split / fill case; a hang stops the call), then alternating runs of both builds, every cell
# checked:
#   1. the launches it cuts and their neighbours: S 1024 / 1100 with 8-16 heads, d 64 and 128;
#   2. the long grid (the long-key tile shares the scheduler and epilogue): no regression.
set -u
nvidia-smi --query-gpu=name --format=csv,noheader | tee $OUT/card.txt
scripts/ab-run --bin .ab-stream --variants base,stream --alternate --reps 2 --tar --tests '*Attention*' $OUT/ab \
  'attention -S 1024,1100 -H 8,10,12,14,16 -d 64,128' \
  'attention -S 4096,8192,16384,32768 -H 12,24 -d 64,128' > $OUT/ab.log 2>&1
echo "ab-run rc=$?"; grep -E '^#|geomean|FAIL|PASSED|passed|failed' $OUT/ab.log | tail -n 20
