#!/usr/bin/env bash
# Session 67's ready profiling call (issue 37, bar 2; carry .run-bin; ~3-5 min): Nsight Compute on
# one fused W8A8 call at DSv4-Flash 8192 tokens (expert-wave, balanced) and on the unfused layer's
# two grouped GEMMs of the same rows, with the clocks left alone (--clock-control none). Sections:
# speed of light, memory workload (L2 <-> SM and DRAM bytes), compute workload (tensor pipe),
# warp states. The question (docs/megamoe.md, Next steps 6): why a Linear-1 main loop keeps the
# tensor pipe 70 % busy, and whether L2 -> SM bytes bind it.
set -u
source .run-bin/env.sh
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv | tee $OUT/card.txt
command -v ncu > /dev/null || { echo "ncu-moe.sh: no ncu on this machine"; exit 2; }
S="--section SpeedOfLight --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis --section WarpStateStats"
B="bench moe --gpus 1 --models DSv4-Flash --tokens 8192 --routings balanced --weights w8a8 --warmup 2 --iters 20"
timeout 280 ncu --clock-control none $S -k regex:mega_moe_kernel -c 1 --launch-skip 2 \
  .run-bin/xstage $B --variants expert-wave > $OUT/ncu-fused.txt 2>&1
echo "fused rc=$?"
timeout 250 ncu --clock-control none $S -k regex:moe_gemm_kernel -c 2 --launch-skip 4 \
  .run-bin/xstage $B --variants unfused > $OUT/ncu-unfused.txt 2>&1
echo "unfused rc=$?"
grep -hE 'moe_gemm_kernel|mega_moe_kernel|Duration|Memory Throughput|L2 Cache Throughput|DRAM Throughput|Compute \(SM\) Throughput|SM Frequency' \
  $OUT/ncu-fused.txt $OUT/ncu-unfused.txt | cut -c1-160 | head -40
