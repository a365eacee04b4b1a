#!/usr/bin/env bash
# session 57 call 1 (carry .run-bin of bd2c337 and .ab-long). On an H200: issue 38's acceptance and
# long A/B (results/megamoe-session56/h200-only.sh, LIMIT 560). On any other card: issue 37's mix
# study (results/megamoe-session56/call3.sh, ~6 min), then the mix GPU test never run before.
set -u
nvidia-smi --query-gpu=name --format=csv,noheader | tee $OUT/card.txt
if grep -q H200 $OUT/card.txt; then
  LIMIT=${LIMIT:-560} bash results/megamoe-session56/h200-only.sh
  exit
fi
source .run-bin/env.sh
t0=$SECONDS
timeout 120 .run-bin/tests/xstage_gpu_tests --gtest_filter='MegaMoe.OneGpuAnyMixOfTheListMatchesTheHostReference' > $OUT/mixtest.txt 2>&1
echo "mix GPU test rc=$? at $((SECONDS - t0)) s"; tail -n 4 $OUT/mixtest.txt
bash results/megamoe-session56/call3.sh
echo "all at $((SECONDS - t0)) s"
