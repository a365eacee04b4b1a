#!/usr/bin/env bash
# session 54 call 6 (.run-bin of ef01539; its four per-token kernels are SASS-identical to those of the commit that adds this script):
# the session's final defaults (wide per-token tile, two-piece store warps, the review's fixes): the
# per-token Mega-MoE GPU tests (both per-token tiles, P = 1 and virtual P = 2, 4, 8), the span test,
# the tile refusals and the list-end test; then one short run with W8A8 beside the per-token layers.
set -u
source .run-bin/env.sh
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv | tee $OUT/card.txt
timeout 200 .run-bin/tests/xstage_gpu_tests --gtest_filter='MegaMoe.OneGpuW4A8PerToken*:P/MegaMoeW4A8TokRanks.*:MegaMoe.RecordsOneSpanPerLinear2PieceAndRunsTheLocalControl:MegaMoe.W4A8WithThe128RowTileIsAClearError:MegaMoe.OneGpuListEndingInLinear2TilesMatchesTheHostReference' > $OUT/gpu-tests.log 2>&1
echo "tests rc=$?"; grep -E '^\[ +(OK|PASSED|FAILED) ' $OUT/gpu-tests.log
timeout 60 .run-bin/xstage bench moe --gpus 1 --models Qwen3.5-397B-A17B,DSv4-Flash --tokens 2048 --routings balanced \
  --weights w8a8,w4a8-int4-lut-rs-tok,w4a8-mxfp4-rs-tok --variants interleaved --json $OUT/final.json > $OUT/final.log 2>&1
echo "bench rc=$?"; grep -h correctness $OUT/final.log
