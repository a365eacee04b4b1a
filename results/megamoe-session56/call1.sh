#!/usr/bin/env bash
# session 56 call 1 (issue 37; .run-bin of the quantisation-help commit). On any card: the
# per-token GPU tests with the new help cases, then quantisation help against the plain list and a
# lead-only control in the same call (interleaved, interleaved-lead3.5, interleaved-help2.75,
# interleaved-help3.5) for per-token INT4 / MXFP4 at DiT-MoE-G 2048 / 8192 and DSv4-Flash 8192
# (256-row blocks: the help's layers), with W8A8 interleaved for the W4A8 / W8A8 ratio, every cell
# checked; then the spans of DiT-MoE-G 8192 INT4 (plain vs help3.5). If H200: issue 38's acceptance
# first (results/attention-session52/call1.sh) when ACC=1.
set -u
source .run-bin/env.sh
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv | tee $OUT/gpu.txt
start=$SECONDS
if [ "${ACC:-0}" = 1 ] && grep -q H200 $OUT/gpu.txt; then
  bash results/attention-session52/call1.sh
  echo "attention acceptance done at $((SECONDS - start)) s"
fi
timeout 200 .run-bin/tests/xstage_gpu_tests --gtest_filter='MegaMoe.OneGpuW4A8PerToken*:P/MegaMoeW4A8TokRanks.*' \
  > $OUT/gpu-tests.log 2>&1
echo "gpu tests rc=$? at $((SECONDS - start)) s"; grep -E '^\[  (PASSED|FAILED) |FAILED  \]|tests ran' $OUT/gpu-tests.log | head
V=interleaved,interleaved-lead3.5,interleaved-help2.75,interleaved-help3.5
for mt in DiT-MoE-G:2048,8192 DSv4-Flash:8192; do
  [ $((SECONDS - start)) -lt ${BUDGET:-420} ] || { echo "left out: $mt (time)"; continue; }
  timeout $((560 - (SECONDS - start))) .run-bin/xstage bench moe --gpus 1 --models ${mt%%:*} --tokens ${mt##*:} \
    --routings balanced --weights w8a8,w4a8-int4-lut-rs-tok,w4a8-mxfp4-rs-tok --variants $V \
    --json $OUT/help-${mt%%:*}.json >> $OUT/help.txt 2>&1
  echo "$mt rc=$? at $((SECONDS - start)) s"
done
grep -h 'correctness' $OUT/help.txt
if [ $((SECONDS - start)) -lt ${SPANS_BEFORE:-470} ]; then
  timeout $((580 - (SECONDS - start))) .run-bin/xstage bench moe --gpus 1 --models DiT-MoE-G --tokens 8192 \
    --routings balanced --weights w4a8-int4-lut-rs-tok --variants interleaved,interleaved-help3.5 --spans \
    --json $OUT/spans.json > $OUT/spans.txt 2>&1
  echo "spans rc=$? at $((SECONDS - start)) s"
fi
gzip -f $OUT/*.json 2>/dev/null
