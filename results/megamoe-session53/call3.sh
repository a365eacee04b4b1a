#!/usr/bin/env bash
# session 53 call 3 (issue 37): where the per-token W4A8 fused kernel stands against W8A8 fused and
# its own unfused layer with the session's defaults (.run-bin of dcc7210): every model, 2048 /
# 8192 tokens, balanced routing, the unfused layer and interleaved,
# every cell checked; the table of scripts/moe-acceptance (W4A8 / W8A8 fused per format).
set -u
source .run-bin/env.sh
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv | tee $OUT/gpu.txt
mkdir -p $OUT/acc
start=$SECONDS
for model in ${MODELS:-DiT-MoE-G Qwen3.5-397B-A17B Hy3 MiMo-V2.5 GLM-5.2 DSv4-Flash DSv4-Pro}; do
  [ $((SECONDS - start)) -lt ${BUDGET:-420} ] || { echo "left out: $model (time)"; continue; }
  timeout $((540 - (SECONDS - start))) .run-bin/xstage bench moe --gpus 1 --models $model --tokens 2048,8192 \
    --routings balanced --weights w8a8,w4a8-int4-lut-rs-tok,w4a8-mxfp4-rs-tok --variants unfused,interleaved \
    --json $OUT/acc/xs-$model.json >> $OUT/w4a8.txt 2>&1
  echo "$model rc=$? at $((SECONDS - start)) s"
done
grep -h 'correctness' $OUT/w4a8.txt
scripts/moe-acceptance --part table $OUT/acc > /dev/null 2>&1; echo "table rc=$?"
cat $OUT/acc/acceptance.txt; grep '^#' $OUT/acc/compare.txt | tail -n 8
gzip -f $OUT/acc/xs-*.json
