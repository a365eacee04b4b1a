#!/usr/bin/env bash
# session 52 call 3: half blocks (XSTAGE_MEGA_HALF_SPLIT 2 against 0; s2's GPU tests passed in call 2)
# at 2048 tokens: the layers whose automatic tile is 128 x 256 (GLM-5.2, MiMo-V2.5, Hy3; with the
# unfused layer as control), and both tiles forced where the rule takes 64 x 256 (DSv4-Flash,
# Qwen3.5-397B-A17B, DSv4-Pro: 32-48 mean rows per expert, nearly every 128-row block a half block).
set -u
export XSTAGE_SOURCE_DIR=$PWD
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv
scripts/ab-run --bin .ab-half --variants base,s2 --alternate --reps 2 --tar --tests none $OUT \
  'moe --gpus 1 --models GLM-5.2,MiMo-V2.5,Hy3 --tokens 2048 --routings balanced,skewed --weights w8a8 --variants unfused,interleaved,expert-wave' \
  'moe --gpus 1 --models DSv4-Flash,Qwen3.5-397B-A17B,DSv4-Pro --tokens 2048 --routings balanced,skewed --weights w8a8 --variants interleaved+m64n256,interleaved+m128n256' \
  > $OUT/ab-run.log 2>&1
echo "ab-run rc=$?"
tail -n 8 $OUT/ab-run.log
tar xzf $OUT/ab.tgz -O --wildcards '*compare*' 2>/dev/null | grep -v '^#' | head -n 60
