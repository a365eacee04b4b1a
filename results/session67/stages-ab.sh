#!/usr/bin/env bash
# Session 67 (issue 37): the per-token Mega-MoE kernel on a 3-stage ring against the shipped 4
# stages (build option XSTAGE_MEGA_TOK_STAGES), the measurement the tails fold waits on
# (docs/megamoe.md, Next steps 4: the fold's 32-row token piece needs the 41 KiB of a stage). Both
# binaries from db285aa + the option, built on the development machine (.ab-s3: xstage-base.xz
# = 4 stages, xstage-new.xz and gpu-tests-new.xz = 3 stages). The 3-stage build's per-token GPU
# tests first (P = 1 and virtual ranks), then DiT-MoE-G at 2048 / 8192 tokens and Qwen3.5 at 8192,
# INT4 and MXFP4 per-token, interleaved, 2 alternating repetitions per build, every cell checked.
# Carry .run-bin (env) and .ab-s3 (rebuilt by results/session67/prepare-s3.sh).
set -u
source .run-bin/env.sh
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv | tee $OUT/card.txt
timeout ${LIMIT:-500} scripts/ab-run --bin .ab-s3 --reps 2 --alternate --tar \
  --tests 'MegaMoe.OneGpuW4A8PerToken*:P/MegaMoeW4A8TokRanks.*' --test-timeout 150 $OUT \
  'moe --gpus 1 --models DiT-MoE-G --tokens 2048,8192 --routings balanced --weights w4a8-int4-lut-rs-tok,w4a8-mxfp4-rs-tok --variants interleaved' \
  'moe --gpus 1 --models Qwen3.5-397B-A17B --tokens 8192 --routings balanced --weights w4a8-int4-lut-rs-tok,w4a8-mxfp4-rs-tok --variants interleaved' \
  > $OUT/ab.log 2>&1
echo "ab-run rc=$?"; grep -E '^#|geomean|tests|PASSED|FAILED' $OUT/ab.log | tail -n 20
