#!/usr/bin/env bash
# session 58's trimmed call (carry .run-bin; timeout 450): on an H200 issue 38's last point
# (session 57's call5.sh) and a short tails study (call6.sh, BUDGET 150); on any other card the
# tails study only (BUDGET 330). Each part writes under its own folder of $OUT.
set -u
nvidia-smi --query-gpu=name --format=csv,noheader | tee $OUT/card.txt
mkdir -p $OUT/attn $OUT/tails
budget=${TAILS_BUDGET:-330}
if grep -q H200 $OUT/card.txt; then  # env TAILS_BUDGET(_H200): call6's seconds
  OUT=$OUT/attn timeout 200 bash results/megamoe-session57/call5.sh > $OUT/attn/console.log 2>&1
  echo "call5 rc=$?"; grep -E '^#|^ *64 +1[024] +1(024|100)' $OUT/attn/console.log | tail -n 30
  budget=${TAILS_BUDGET_H200:-150}
fi
OUT=$OUT/tails BUDGET=$budget timeout $((budget + 40)) bash results/megamoe-session57/call6.sh > $OUT/tails/console.log 2>&1
echo "call6 rc=$?"; tail -n 12 $OUT/tails/console.log
