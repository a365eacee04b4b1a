#!/usr/bin/env bash
# session 54 call 3 (.run-bin of c5f2d18, the wide per-token tile on). On an H200: issue 38's
# acceptance (results/attention-session52/call1.sh). Otherwise: the Mega-MoE GPU tests of this
# build (every MegaMoe.* case and the per-token ranks), then where W4A8 fused stands against W8A8
# fused and the unfused layers at 2048 / 8192 tokens (results/megamoe-session53/call3.sh).
set -u
nvidia-smi --query-gpu=name --format=csv,noheader | tee $OUT/card.txt
if grep -q H200 $OUT/card.txt; then
  bash results/attention-session52/call1.sh
  exit
fi
source .run-bin/env.sh
timeout 240 .run-bin/tests/xstage_gpu_tests --gtest_filter='MegaMoe.*:P/MegaMoeW4A8TokRanks.*' > $OUT/gpu-tests.log 2>&1
echo "tests rc=$?"; grep -E '^\[  (PASSED|FAILED) |FAILED  \]' $OUT/gpu-tests.log | head
MODELS="${MODELS:-DiT-MoE-G Qwen3.5-397B-A17B DSv4-Flash}" BUDGET=${BUDGET:-200} bash results/megamoe-session53/call3.sh
