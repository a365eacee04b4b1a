#!/usr/bin/env bash
# session 54 call 2 (issue 37): where the wide per-token tile stops paying. The `wide` build
# (.ab-wide) runs both per-token tiles by name in one process per run, interleaved order, at the
# layers of 64-256 mean routed rows per expert, twice (the tiles' order swapped); every cell
# checked. Carry .ab-wide.
set -u
source scripts/lib/gpu-env.sh && gpu_env_setup
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv | tee $OUT/card.txt
x=$(mktemp -d)/xstage && xz -dc .ab-wide/xstage-wide.xz > $x && chmod +x $x
start=$SECONDS
for rep in 1 2; do
  v='interleaved+m256n128_tok,interleaved+m128n256_tok'
  [ $rep = 2 ] && v='interleaved+m128n256_tok,interleaved+m256n128_tok'
  timeout 250 $x bench moe --gpus 1 --models Qwen3.5-397B-A17B,DSv4-Flash,DSv4-Pro --tokens 8192 --routings balanced \
    --weights w4a8-int4-lut-rs-tok,w4a8-mxfp4-rs-tok --variants $v --json $OUT/t8192-$rep.json > $OUT/t8192-$rep.log 2>&1
  echo "8192 rep $rep rc=$? at $((SECONDS - start)) s"
  timeout 150 $x bench moe --gpus 1 --models MiMo-V2.5,DiT-MoE-G --tokens 512,2048 --routings balanced \
    --weights w4a8-int4-lut-rs-tok,w4a8-mxfp4-rs-tok --variants $v --json $OUT/t2048-$rep.json > $OUT/t2048-$rep.log 2>&1
  echo "2048 rep $rep rc=$? at $((SECONDS - start)) s"
done
grep -h correctness $OUT/*.log | sort | uniq -c
