#!/usr/bin/env bash
# session 57 call 2 (carry .run-bin, .ab-long, .ab-qa: base and -DXSTAGE_MEGA_TOK_QUANT_AHEAD=ON of
# the commit adding this script). On an H200: issue 38's acceptance and long A/B
# (results/megamoe-session56/h200-only.sh, LIMIT 560). Otherwise (issue 37): quantisation chunks
# claimed ahead against the default per-token kernel, same call: the variant's per-token GPU tests
# (P = 1, virtual P = 2, 4, 8) and the never-run mix test; line 0 DiT-MoE-G and DSv4-Flash at 2048 /
# 8192 tokens, INT4 and MXFP4, interleaved; line 1 the list's mix (the plan's, 1, 2) at DiT-MoE-G
# 8192 with the spans; two alternating runs per build, every cell checked.
set -u
nvidia-smi --query-gpu=name --format=csv,noheader | tee $OUT/card.txt
if grep -q H200 $OUT/card.txt; then
  LIMIT=${LIMIT:-560} bash results/megamoe-session56/h200-only.sh
  exit
fi
source .run-bin/env.sh
W=w4a8-int4-lut-rs-tok,w4a8-mxfp4-rs-tok
timeout 560 scripts/ab-run --bin .ab-qa --variants base,qa --alternate --reps 2 --test-timeout 200 --tar \
  --tests 'MegaMoe.OneGpuW4A8PerToken*:P/MegaMoeW4A8TokRanks.*:MegaMoe.OneGpuAnyMixOfTheListMatchesTheHostReference' $OUT/qa \
  "moe --gpus 1 --models DiT-MoE-G,DSv4-Flash --tokens 2048,8192 --routings balanced --weights $W --variants interleaved" \
  "moe --gpus 1 --models DiT-MoE-G --tokens 8192 --routings balanced --weights $W --variants interleaved,interleaved-mix1,interleaved-mix2 --spans" \
  > $OUT/qa.log 2>&1
echo "ab-run rc=$?"; grep -E 'tests|PASSED|FAILED|correctness|geomean|^#|^==' $OUT/qa.log | tail -n 40
