#!/usr/bin/env bash
# session 57 call 4, sent inline on the warm H200 of call 3 (carry .run-bin, .ab-long, .ab-ring of
# 35d33c8): issue 38's long non-causal A/B again with 4 alternating runs per build, then issue 37's
# ring A/B (base; ring: -DXSTAGE_MEGA_TOK_QUANT_RING=ON; ring8: the same with
# -DXSTAGE_MEGA_TOK_QUANT_ROWS=8) with each variant's P = 1 per-token GPU test. The long A/B's raw
# files were not packed, so the device tool's file count left out ring/ab.tgz: only the summary
# lines of both came back (call4/ring.log, ../attention-issue38-h200/long-ab-reps4.log). Pass
# --tar to both next time.
source .run-bin/env.sh; nvidia-smi --query-gpu=name --format=csv,noheader > $OUT/card.txt
timeout 170 scripts/ab-run --bin .ab-long --variants base,new --alternate --reps 4 --tests none $OUT/long-ab \
  'attention -S 1024,4096,4608,8192,16384,32768,65536 -H 12,24 -d 64,128' > $OUT/long-ab.log 2>&1
echo "long rc=$?"; grep -E 'geomean|correctness' $OUT/long-ab.log | tail -3
timeout 320 scripts/ab-run --bin .ab-ring --variants base,ring,ring8 --alternate --reps 2 --test-timeout 150 --tar \
  --tests 'MegaMoe.OneGpuW4A8PerToken*' $OUT/ring "moe --gpus 1 --models DiT-MoE-G,DSv4-Flash --tokens 2048,8192 --routings balanced --weights w4a8-int4-lut-rs-tok,w4a8-mxfp4-rs-tok --variants interleaved --spans" \
  > $OUT/ring.log 2>&1
echo "ring rc=$?"; grep -E 'PASSED|FAILED|correctness|geomean|^==' $OUT/ring.log | tail -n 20
