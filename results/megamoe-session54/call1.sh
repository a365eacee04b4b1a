#!/usr/bin/env bash
# session 54 call 1. On an H200: issue 38's acceptance (results/attention-session52/call1.sh, .run-bin).
# Otherwise (issue 37) the wide per-token tile (XSTAGE_MEGA_TOK_WIDE): the per-token GPU tests of
# the `wide` build (both per-token tiles, P = 1 and virtual P = 2, 4, 8), then base (the 256 x 128
# tile) against wide (automatic: m128n256_tok below 128 mean rows) alternating, 2 runs each, every
# cell checked, W8A8 in the same lines for the W4A8 / W8A8 ratio. Carry .run-bin and .ab-wide.
set -u
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv | tee $OUT/card.txt
if grep -q H200 $OUT/card.txt && [ "${WIDE_ONLY:-0}" = 0 ]; then
  bash results/attention-session52/call1.sh
  exit
fi
filter='MegaMoe.OneGpuW4A8PerToken*:P/MegaMoeW4A8TokRanks.*:MegaMoe.W4A8WithThe128RowTileIsAClearError'
scripts/ab-run --bin .ab-wide --variants base,wide --alternate --reps 2 --tar --test-timeout 300 --tests "$filter" $OUT \
  'moe --gpus 1 --models Qwen3.5-397B-A17B,DSv4-Flash --tokens 512,2048 --routings balanced --weights w8a8,w4a8-int4-lut-rs-tok,w4a8-mxfp4-rs-tok --variants interleaved' \
  'moe --gpus 1 --models Hy3 --tokens 512,2048 --routings balanced --weights w4a8-int4-lut-rs-tok,w4a8-mxfp4-rs-tok --variants interleaved'
echo "ab-run rc=$?"
