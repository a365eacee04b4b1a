#!/usr/bin/env bash
# Session 62's H200 call (carry .run-bin and .ab-long, which results/session62/prepare.sh builds;
# timeout 590): issue 38's acceptance on main's default build (results/megamoe-session55/call2.sh:
# the attention GPU tests, the short / causal / long grids with cuDNN and flash in the same call,
# then the long grid as a same-machine A/B of .ab-long's 52d10a6 against main). On any other card
# only the attention GPU tests run (two minutes at most; nothing there is acceptance). Env LIMIT:
# seconds for the whole H200 part (default 560).
set -u
nvidia-smi --query-gpu=name --format=csv,noheader | tee $OUT/card.txt
for f in .run-bin/xstage .run-bin/tests/xstage_gpu_tests .ab-long/xstage-base.xz .ab-long/xstage-new.xz; do
  [ -e "$f" ] || { echo "h200.sh: $f was not carried (results/session62/prepare.sh builds it)"; exit 2; }
done
if ! grep -q H200 $OUT/card.txt; then
  echo "not an H200: the attention GPU tests only"
  source .run-bin/env.sh
  timeout 120 .run-bin/tests/xstage_gpu_tests --gtest_filter='*Attention*' > $OUT/gpu-tests-attention.log 2>&1
  echo "gpu tests rc=$?"; grep -E '^\[  (PASSED|FAILED|SKIPPED) |tests ran' $OUT/gpu-tests-attention.log | head -n 20
  exit 0
fi
LIMIT=${LIMIT:-560} bash results/megamoe-session55/call2.sh
