#!/usr/bin/env bash
# session 57 call 3 (carry .run-bin, .ab-long, .ab-ring: base, -DXSTAGE_MEGA_TOK_QUANT_RING=ON (ring) and that with -DXSTAGE_MEGA_TOK_QUANT_ROWS=8 (ring8) of
# the commit adding this script). On an H200: issue 38's acceptance and long A/B
# (results/megamoe-session56/h200-only.sh, LIMIT 560). Otherwise (issue 37): the quantisation's loads
# through the stage ring (16- and 8-row chunks) against the default per-token kernel, same call: each
# variant's per-token GPU tests (P = 1, virtual P = 2); DiT-MoE-G and DSv4-Flash at 2048 / 8192
# tokens, INT4 and MXFP4, interleaved with the spans; two alternating runs per build, every cell
# checked.
set -u
nvidia-smi --query-gpu=name --format=csv,noheader | tee $OUT/card.txt
if grep -q H200 $OUT/card.txt; then
  LIMIT=${LIMIT:-560} bash results/megamoe-session56/h200-only.sh
  exit
fi
source .run-bin/env.sh
timeout 560 scripts/ab-run --bin .ab-ring --variants base,ring,ring8 --alternate --reps 2 --test-timeout 200 --tar \
  --tests 'MegaMoe.OneGpuW4A8PerToken*:P/MegaMoeW4A8TokRanks.*/2' $OUT/ring \
  "moe --gpus 1 --models DiT-MoE-G,DSv4-Flash --tokens 2048,8192 --routings balanced --weights w4a8-int4-lut-rs-tok,w4a8-mxfp4-rs-tok --variants interleaved --spans" \
  > $OUT/ring.log 2>&1
echo "ab-run rc=$?"; grep -E 'tests|PASSED|FAILED|correctness|geomean|^#|^==' $OUT/ring.log | tail -n 30
