#!/usr/bin/env bash
# Session 62's H200 call (carry .run-bin and .ab-long, which results/session62/prepare.sh builds;
# timeout 590): issue 38's acceptance on main's default build (results/megamoe-session55/call2.sh:
# the attention GPU tests, the short / causal / long grids with cuDNN and flash in the same call,
# then the long grid as a same-machine A/B of .ab-long's 52d10a6 against main). On any other card it
# stops at once: nothing there is acceptance. Env LIMIT: seconds for the whole part (default 560).
set -u
nvidia-smi --query-gpu=name --format=csv,noheader | tee $OUT/card.txt
grep -q H200 $OUT/card.txt || { echo "not an H200: nothing run"; exit 0; }
for f in .run-bin/xstage .run-bin/tests/xstage_gpu_tests .ab-long/xstage-base.xz .ab-long/xstage-new.xz; do
  [ -e "$f" ] || { echo "h200.sh: $f was not carried (results/session62/prepare.sh builds it)"; exit 2; }
done
LIMIT=${LIMIT:-560} bash results/megamoe-session55/call2.sh
