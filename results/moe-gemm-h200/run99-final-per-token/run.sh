#!/usr/bin/env bash
# Session 22, final state (main da5e5f3 = code of 35bfc73): every MoE GPU test (tarred on its own
# first), then W8A8 and the four per-token W4A8 formats back to back per cell, all models and ops
# at 1024/8192 tokens per expert, with the W4A8 / W8A8 table.
set -u
out=${1:?}
cd "$(dirname "$0")/.."
nccl_root=$(python3 -c "import nvidia.nccl; print(list(nvidia.nccl.__path__)[0])" 2>/dev/null || true)
[ -n "$nccl_root" ] && export LD_LIBRARY_PATH="$nccl_root/lib:${LD_LIBRARY_PATH:-}"
export NCCL_NVLS_ENABLE=0
t0=$(date +%s)
mkdir -p "$out/tests" "$out/final"
nvidia-smi --query-gpu=name,clocks.sm,power.draw,temperature.gpu --format=csv,noheader | tee "$out/final/gpu-before.txt"
timeout 200 .ab-bin/fin/gpu-tests --gtest_filter='MoeGemmGpu.*:MegaMoe.*' > "$out/tests/gpu-tests.log" 2>&1
echo "== tests rc $? at $(( $(date +%s) - t0 )) s"
grep -E "^\[  (PASSED|FAILED) |^\[  FAILED  \]" "$out/tests/gpu-tests.log" | head -20
(cd "$out" && tar czf tests.tgz tests && rm -rf tests)
timeout 150 .ab-bin/fin/xstage bench moe-gemm --weights w8a8 w4a8-int4-lut-rs-tok w4a8-int4-lut-rs-tok-glu \
  w4a8-mxfp4-rs-tok w4a8-mxfp4-rs-tok-glu --tokens 1024,8192 --json "$out/final/moe-gemm.json" > "$out/final/moe-gemm.txt" 2>&1
echo "== bench rc $? at $(( $(date +%s) - t0 )) s"
python3 python/compare_moe_w4a8.py "$out/final/moe-gemm.json" > "$out/final/compare-w4a8.txt" 2>&1
grep "^# " "$out/final/compare-w4a8.txt" | tail -6
nvidia-smi --query-gpu=name,clocks.sm,power.draw,temperature.gpu --format=csv,noheader > "$out/final/gpu-after.txt"
(cd "$out" && tar czf final.tgz final && rm -rf final)
echo "== all done at $(( $(date +%s) - t0 )) s"
