#!/usr/bin/env bash
# session 52 call 8: the register-operand Mega-MoE kernels' producer claiming ahead
# (XSTAGE_MEGA_CLAIM_AHEAD, `ahead`) against the default build (`base`), same call, alternating;
# the variant's per-token GPU tests first (P = 1, virtual P = 2, 4, 8) and the per-128 kernel's P = 1 test;
# per-token INT4 and MXFP4 at few rows per expert, where the gaps between tiles are largest.
set -u
export XSTAGE_SOURCE_DIR=$PWD
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv
scripts/ab-run --bin .ab-ahead --variants base,ahead --alternate --reps 2 --tar \
  --tests 'MegaMoe.OneGpuW4A8PerToken*:MegaMoe.OneGpuW4A8RegisterOperand*:P/MegaMoeW4A8TokRanks.*' --test-timeout 170 $OUT \
  'moe --gpus 1 --models Qwen3.5-397B-A17B,DSv4-Flash --tokens 512,2048 --routings balanced --weights w4a8-int4-lut-rs-tok,w4a8-mxfp4-rs-tok --variants interleaved' \
  > $OUT/ab-run.log 2>&1
echo "ab-run rc=$?"
tail -n 12 $OUT/ab-run.log
tar xzf $OUT/ab.tgz -O --wildcards '*compare*' 2>/dev/null | grep -v '^#' | head -n 30
