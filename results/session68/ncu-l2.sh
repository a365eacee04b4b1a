#!/usr/bin/env bash
# Session 68 (issue 37): what the L2 does in the fused Mega-MoE kernels (carry .run-bin; ~3 min).
# Session 67's profile (ncu-moe.sh) put the fused W8A8 call at DSv4-Flash 8192 at 88.7 % of the L2's
# peak throughput over the whole kernel with the tensor pipe at 46 %. This call splits that figure
# into its parts (the breakdown of lts__throughput: tag requests, sectors by source and operation,
# DRAM fills) and counts the L2 -> SM read bytes against the operand bytes the tiles need, for
# the fused W8A8 call, the unfused layer's Linear-1 GEMM of the same rows, and the per-token
# W4A8 fused call at DiT-MoE-G and Hy3 8192 (INT4). Clocks are left alone (--clock-control none).
set -u
source .run-bin/env.sh
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv | tee $OUT/card.txt
command -v ncu > /dev/null || { echo "ncu-l2.sh: no ncu on this machine"; exit 2; }
# Sections first (names every ncu of this generation knows); the breakdown and counters on top.
# If ncu refuses a metric name the cell is profiled again with the sections alone.
S="--section SpeedOfLight --section MemoryWorkloadAnalysis --section MemoryWorkloadAnalysis_Tables --section ComputeWorkloadAnalysis"
M="breakdown:lts__throughput.avg.pct_of_peak_sustained_elapsed"
M="$M,lts__t_sectors_op_read.sum,lts__t_sectors_op_write.sum,lts__t_sectors_op_atom.sum,lts__t_sectors_op_red.sum"
M="$M,lts__t_sector_hit_rate.pct,dram__bytes_read.sum,dram__bytes_write.sum,l1tex__m_xbar2l1tex_read_bytes.sum"
prof() {  # name, kernel regex, skip, count, bench args
  local name=$1 k=$2 skip=$3 c=$4; shift 4
  local B=(.run-bin/xstage bench moe --gpus 1 --routings balanced --warmup 2 --iters 20 "$@")
  timeout 200 ncu --clock-control none $S --metrics "$M" -k "regex:$k" -c "$c" --launch-skip "$skip" "${B[@]}" \
    > $OUT/ncu-$name.txt 2>&1
  local rc=$?
  if grep -q "==ERROR==" $OUT/ncu-$name.txt; then
    timeout 200 ncu --clock-control none $S -k "regex:$k" -c "$c" --launch-skip "$skip" "${B[@]}" > $OUT/ncu-$name.txt 2>&1
    rc=$?
  fi
  echo "$name rc=$rc"
}
prof fused-w8a8 mega_moe_kernel 2 1 --models DSv4-Flash --tokens 8192 --weights w8a8 --variants expert-wave
prof unfused-w8a8 moe_gemm_kernel 4 1 --models DSv4-Flash --tokens 8192 --weights w8a8 --variants unfused
prof fused-int4-dit mega_moe_w4a8_tok 2 1 --models DiT-MoE-G --tokens 8192 --weights w4a8-int4-lut-rs-tok --variants interleaved
prof fused-int4-hy3 mega_moe_w4a8_tok 2 1 --models Hy3 --tokens 8192 --weights w4a8-int4-lut-rs-tok --variants interleaved
for f in $OUT/ncu-*.txt; do echo "== $f"; grep -E 'ok$|lts__|dram__|l1tex__m|L2 Cache Throughput|Duration|SM Frequency|ERROR' $f | grep -v '^#' | cut -c1-150; done
