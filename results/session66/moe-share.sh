#!/usr/bin/env bash
# Session 66: issue 37's bar 2 in one run on whichever single card the call gets (carry .run-bin;
# ~2 minutes): DSv4-Flash at 8192 tokens, W8A8, both routings, the unfused layer with its phases
# and both fused orders (scripts/moe-acceptance's xstage part, which runs DSv4-Flash with --spans),
# then its table. Only the DSv4-Flash lines of acceptance.txt are this call's point: the expert-work
# TFLOP/s (bar 900) and the share of the grouped GEMMs' rate on the same rows (bar 0.85); the
# other bars are NOT met for want of the other configurations.
set -u
[ -x .run-bin/xstage ] || { echo "moe-share.sh: .run-bin was not carried (results/session62/prepare.sh)"; exit 2; }
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv | tee $OUT/card.txt
source .run-bin/env.sh
scripts/moe-acceptance --part xstage --models DSv4-Flash --tokens 8192 --weights w8a8 --budget ${BUDGET:-240} $OUT/acc
echo "xstage part rc=$?"
scripts/moe-acceptance --part table $OUT/acc > /dev/null 2>&1
grep 'DSv4-Flash' $OUT/acc/acceptance.txt
grep '^#' $OUT/acc/compare.txt | tail -n 6
tar czf $OUT/acc.tgz -C $OUT acc && rm -rf $OUT/acc
