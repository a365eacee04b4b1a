#!/usr/bin/env bash
# session 52 call 4: the new defaults (half blocks split, XSTAGE_MEGA_HALF_SPLIT=2; automatic tile
# 128 x 256 from 32 mean rows per expert) against HEAD's build (1aba357: no split, 64 x 256 below
# 64 mean rows), same call, alternating, with the unfused layer in every run: the 2048-token layers
# whose automatic tile changes (DSv4-Flash, Qwen3.5-397B-A17B, DSv4-Pro) and DSv4-Pro at 8192.
set -u
export XSTAGE_SOURCE_DIR=$PWD
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv
scripts/ab-run --bin .ab-final --alternate --reps 2 --tar \
  --tests 'MegaMoe.OneGpuMatchesTheHostReferenceOfTheLayer:MegaMoe.OneGpuFewCtas' --test-timeout 200 $OUT \
  'moe --gpus 1 --models DSv4-Flash,Qwen3.5-397B-A17B,DSv4-Pro --tokens 2048 --routings balanced,skewed --weights w8a8 --variants unfused,interleaved,expert-wave' \
  'moe --gpus 1 --models DSv4-Pro --tokens 8192 --routings balanced,skewed --weights w8a8 --variants unfused,interleaved,expert-wave' \
  > $OUT/ab-run.log 2>&1
echo "ab-run rc=$?"
tail -n 8 $OUT/ab-run.log
tar xzf $OUT/ab.tgz -O --wildcards '*compare*' 2>/dev/null | grep -v '^#' | head -n 60
