#!/usr/bin/env bash
# Session 68 (issue 37): the per-token Mega-MoE kernel's tails fold (XSTAGE_MEGA_TOK_FOLD=32 on
# the 3-stage ring; docs/megamoe.md "Tails fold") against the default build, both from the same
# tree (.ab-fold, rebuilt by results/session68/prepare-fold.sh; carry .run-bin for the env and
# .ab-fold). The fold build's per-token GPU tests first (P = 1 with the fold's row counts, virtual
# P = 2, 4, 8), then, 2 alternating repetitions per build, every cell checked, interleaved: the
# layers with tails (DiT-MoE-G 2048 / 8192, MiMo-V2.5 and GLM-5.2 8192; W8A8 in the same lines for
# the W4A8 / W8A8 ratio) and Qwen3.5 8192 (no tails: the fold must be neutral there).
set -u
source .run-bin/env.sh
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv | tee $OUT/card.txt
W=w8a8,w4a8-int4-lut-rs-tok,w4a8-mxfp4-rs-tok
tests='MegaMoe.OneGpuW4A8PerToken*:P/MegaMoeW4A8TokRanks.*'
lines=("moe --gpus 1 --models DiT-MoE-G --tokens 2048,8192 --routings balanced --weights $W --variants interleaved"
       "moe --gpus 1 --models MiMo-V2.5 --tokens 8192 --routings balanced --weights $W --variants interleaved"
       "moe --gpus 1 --models GLM-5.2 --tokens 8192 --routings balanced --weights $W --variants interleaved"
       'moe --gpus 1 --models Qwen3.5-397B-A17B --tokens 8192 --routings balanced --weights w4a8-int4-lut-rs-tok,w4a8-mxfp4-rs-tok --variants interleaved')
# SHORT=1 (little device time): the P = 1 tests and virtual P = 2 only, DiT-MoE-G only.
if [ "${SHORT:-0}" = 1 ]; then
  tests='MegaMoe.OneGpuW4A8PerToken*:P/MegaMoeW4A8TokRanks.MatchesTheHostReferenceOfTheLayer/2'
  lines=("${lines[0]}")
fi
timeout ${LIMIT:-540} scripts/ab-run --bin .ab-fold --variants base,fold --reps 2 --alternate --tar \
  --tests "$tests" --test-timeout 200 $OUT "${lines[@]}" > $OUT/ab.log 2>&1
echo "ab-run rc=$?"
# Cut by the limit: pack what there is (the device tool returns few files).
[ -d $OUT/ab ] && (cd $OUT && tar czf ab.tgz ab && rm -rf ab)
grep -E 'tests of|PASSED|FAILED|done' $OUT/ab.log | tail -n 12
tar xzf $OUT/ab.tgz -O --wildcards '*compare*' 2>/dev/null | grep -v '^$'
