#!/usr/bin/env bash
# session 55 call 6 (.ab-qk: base and -DXSTAGE_MEGA_TOK_QUANT_K=ON with the shuffle fix): the
# channel-chunk variant's per-token GPU tests at P = 1, then DiT-MoE-G 2048 / 8192 INT4 interleaved
# with the spans, one run per build (where its time goes; call 5 measured it slower).
set -u
nvidia-smi --query-gpu=name --format=csv,noheader | tee $OUT/card.txt
source .run-bin/env.sh
scripts/ab-run --bin .ab-qk --variants base,qk --reps 1 --test-timeout 120 --tar \
  --tests 'MegaMoe.OneGpuW4A8PerTokenMatchesTheHostReferenceOfTheLayer' $OUT/qk \
  'moe --gpus 1 --models DiT-MoE-G --tokens 2048,8192 --routings balanced --weights w4a8-int4-lut-rs-tok --variants interleaved --spans' \
  > $OUT/qk.log 2>&1
rc=$?; [ -s $OUT/qk/ab.tgz ] && rm -rf $OUT/qk/ab; echo "ab-run rc=$rc"; grep -E 'PASSED|FAILED|correctness|geomean|interleaved' $OUT/qk.log | cut -c1-420 | tail -n 16
