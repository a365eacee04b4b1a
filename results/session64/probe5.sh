#!/usr/bin/env bash
# Session 64 call 5 (carry .run-bin and .ab-fb; timeout 590; any card): the attention GPU tests of the
# shipped mask skip (.ab-fb/gpu-tests-ship.xz, build-s's xstage_gpu_tests; a failure is reported,
# the timing runs anyway), then probe4.sh with every .ab-fb/xstage-v*.xz binary: v0 (fef4d94's code
# as shipped before), vship (this commit's build-s), v1 / v5 / v13 / v21 (fef4d94's switch bits).
set -u
source .run-bin/env.sh
xz -dc .ab-fb/gpu-tests-ship.xz > /tmp/gpu-tests-ship && chmod +x /tmp/gpu-tests-ship
timeout 240 /tmp/gpu-tests-ship --gtest_filter='*Attention*:*attention*' > $OUT/gpu-tests-ship.log 2>&1
echo "gpu tests rc=$?"; grep -E '^\[  (PASSED|FAILED|SKIPPED) |tests ran' $OUT/gpu-tests-ship.log | head -n 20
gzip -f $OUT/gpu-tests-ship.log
bash results/session64/probe4.sh
