#!/usr/bin/env bash
# Session 67 (issue 37): where the Mega-MoE bars stand on whichever single card the call gets
# (carry .run-bin; env LIMIT, default 540 s). Part 1 is results/session66/moe-share.sh (bar 2:
# DSv4-Flash 8192 W8A8, both routings, TFLOP/s of expert work and the share of the grouped GEMMs'
# rate on the same rows). Part 2 is results/megamoe-session53/call3.sh's W4A8 status (W4A8 fused /
# W8A8 fused per format, balanced routing, 2048 / 8192 tokens) for as many models as the time left
# allows. Every cell is checked by the bench; a model left out for time is named in w4a8.txt.
set -u
[ -x .run-bin/xstage ] || { echo "moe-status.sh: .run-bin was not carried (results/session62/prepare.sh)"; exit 2; }
t0=$SECONDS; limit=${LIMIT:-540}
BUDGET=150 bash results/session66/moe-share.sh > $OUT/share.txt 2>&1
echo "share part rc=$? at $((SECONDS - t0)) s"; cat $OUT/share.txt
source .run-bin/env.sh
mkdir -p /tmp/acc37
for model in ${MODELS:-DiT-MoE-G DSv4-Flash Qwen3.5-397B-A17B Hy3}; do
  left=$((limit - (SECONDS - t0)))
  [ $left -gt 90 ] || { echo "left out: $model (time)" | tee -a $OUT/w4a8.txt; continue; }
  timeout $((left - 20)) .run-bin/xstage bench moe --gpus 1 --models $model --tokens 2048,8192 \
    --routings balanced --weights w8a8,w4a8-int4-lut-rs-tok,w4a8-mxfp4-rs-tok --variants unfused,interleaved \
    --json /tmp/acc37/xs-$model.json >> $OUT/w4a8.txt 2>&1
  echo "$model rc=$? at $((SECONDS - t0)) s" | tee -a $OUT/w4a8.txt
done
grep -h 'correctness' $OUT/w4a8.txt | sort | uniq -c
scripts/moe-acceptance --part table /tmp/acc37 > /dev/null 2>&1; echo "table rc=$?"
cp /tmp/acc37/acceptance.txt $OUT/w4a8-acceptance.txt 2>/dev/null; cat $OUT/w4a8-acceptance.txt
grep '^#' /tmp/acc37/compare.txt | tail -n 8
tar czf $OUT/w4a8-acc.tgz -C /tmp acc37
