#!/usr/bin/env bash
# session 54 call 4. On an H200: issue 38's acceptance (results/attention-session52/call1.sh, .run-bin).
# Otherwise (issue 37): two-piece Linear-2 tiles of the per-token kernel through the store warps
# (XSTAGE_MEGA_TOK_STORE_WARPS_TWO): the `two` build's per-token GPU tests (P = 1, virtual 2, 4, 8)
# and the span test, then base against two alternating, 2 runs each, at the layers whose blocks
# hold two pieces (8192 tokens, DiT-MoE-G), every cell checked. Carry .run-bin and .ab-two.
set -u
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv | tee $OUT/card.txt
if grep -q H200 $OUT/card.txt && [ "${TWO_ONLY:-0}" = 0 ]; then
  bash results/attention-session52/call1.sh
  exit
fi
filter='MegaMoe.OneGpuW4A8PerToken*:P/MegaMoeW4A8TokRanks.*:MegaMoe.RecordsOneSpanPerLinear2PieceAndRunsTheLocalControl'
scripts/ab-run --bin .ab-two --variants base,two --alternate --reps 2 --tar --test-timeout 240 --tests "$filter" $OUT \
  'moe --gpus 1 --models DiT-MoE-G,Qwen3.5-397B-A17B,DSv4-Flash --tokens 8192 --routings balanced --weights w4a8-int4-lut-rs-tok,w4a8-mxfp4-rs-tok --variants interleaved' \
  'moe --gpus 1 --models DiT-MoE-G --tokens 2048 --routings balanced --weights w4a8-int4-lut-rs-tok,w4a8-mxfp4-rs-tok --variants interleaved'
echo "ab-run rc=$?"
