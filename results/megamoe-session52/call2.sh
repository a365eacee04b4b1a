#!/usr/bin/env bash
# session 52 call 2: half blocks of the 128 x 256 Mega-MoE tile (XSTAGE_MEGA_HALF_SPLIT 1 / 2 against
# the shipped build 0), A/B in one call, alternating, the variants' Mega-MoE GPU tests first (P = 1
# and virtual P = 2, 4, 8, both tiles, both orders); W8A8 layers where the 128 x 256 tile has half
# blocks (docs/megamoe.md §Half blocks): the 8192-token layers of DSv4-Flash, Qwen3.5-397B-A17B and
# DSv4-Pro, balanced and skewed.
set -u
export XSTAGE_SOURCE_DIR=$PWD
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv
scripts/ab-run --bin .ab-half --variants base,s1,s2 --alternate --reps 2 --tar \
  --tests 'MegaMoe.OneGpuFewCtas:MegaMoe.OneGpuMatchesTheHostReferenceOfTheLayer:MegaMoe.RecordsOneSpan*:P/MegaMoeRanks.MatchesTheHostReferenceOfTheLayer/*m128n256' \
  --test-timeout 300 $OUT \
  'moe --gpus 1 --models DSv4-Flash,Qwen3.5-397B-A17B --tokens 8192 --routings balanced,skewed --weights w8a8 --variants interleaved,expert-wave' \
  > $OUT/ab-run.log 2>&1
echo "ab-run rc=$?"
tail -n 30 $OUT/ab-run.log
tar xzf $OUT/ab.tgz -O --wildcards '*compare*' 2>/dev/null | head -n 90
