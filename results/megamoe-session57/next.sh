#!/usr/bin/env bash
# session 57's ready call for the next session (carry .run-bin of b5e0bf0 or later; timeout 600): on an
# H200 issue 38's last point (call5.sh, ~2-3 min) and then issue 37's tails study (call6.sh);
# on any other card the tails study only. Each part writes under its own folder of $OUT.
set -u
nvidia-smi --query-gpu=name --format=csv,noheader | tee $OUT/card.txt
mkdir -p $OUT/attn $OUT/tails
if grep -q H200 $OUT/card.txt; then
  OUT=$OUT/attn timeout 200 bash results/megamoe-session57/call5.sh > $OUT/attn/console.log 2>&1
  echo "call5 rc=$?"; grep -E '^#|^ *64 +1[024] +1(024|100)' $OUT/attn/console.log | tail -n 30
fi
OUT=$OUT/tails BUDGET=300 timeout 340 bash results/megamoe-session57/call6.sh > $OUT/tails/console.log 2>&1
echo "call6 rc=$?"; tail -n 12 $OUT/tails/console.log
