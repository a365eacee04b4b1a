#!/usr/bin/env bash
# Session 22, MXFP4 with per-token activation scales (branch mx-tok): the register-operand MoE GPU
# tests (INT4 per-token and glu, MXFP4 per-128 and per-token), then W8A8 and the MXFP4 formats
# (per-128 rs, per-token bf16, per-token glu) back to back per cell, all models and ops at
# 1024/8192 tokens per expert, twice; compare_moe_w4a8.py tables. Everything in OUT/mx.tgz.
set -u
out=${1:?}
cd "$(dirname "$0")/.."
d="$out/mx"
mkdir -p "$d"
nccl_root=$(python3 -c "import nvidia.nccl; print(list(nvidia.nccl.__path__)[0])" 2>/dev/null || true)
[ -n "$nccl_root" ] && export LD_LIBRARY_PATH="$nccl_root/lib:${LD_LIBRARY_PATH:-}"
export NCCL_NVLS_ENABLE=0
t0=$(date +%s)
x=.ab-bin/mx/xstage-new
nvidia-smi --query-gpu=name,clocks.sm,power.draw,temperature.gpu --format=csv,noheader | tee "$d/gpu-before.txt"
timeout 200 .ab-bin/mx/gpu-tests-new --gtest_filter='MoeGemmGpu.W4A8RegisterOperand*:MoeGemmGpu.W4A8Mxfp4*' > "$d/gpu-tests.log" 2>&1
rc=$?
echo "== tests rc $rc at $(( $(date +%s) - t0 )) s"
grep -E "^\[  (PASSED|FAILED) |^\[  FAILED  \]" "$d/gpu-tests.log" | head -20
if [ "$rc" != 124 ]; then
  for i in 1 2; do
    timeout 200 "$x" bench moe-gemm --weights w8a8 w4a8-mxfp4-rs w4a8-mxfp4-rs-tok w4a8-mxfp4-rs-tok-glu \
      --tokens 1024,8192 --json "$d/moe-gemm-$i.json" > "$d/moe-gemm-$i.txt" 2>&1
    echo "== bench $i rc $? at $(( $(date +%s) - t0 )) s"
    python3 python/compare_moe_w4a8.py "$d/moe-gemm-$i.json" > "$d/compare-w4a8-$i.txt" 2>&1
    grep "^# w4a8_mxfp4\|^# mxfp4" "$d/compare-w4a8-$i.txt"
  done
fi
nvidia-smi --query-gpu=name,clocks.sm,power.draw,temperature.gpu --format=csv,noheader > "$d/gpu-after.txt"
(cd "$out" && tar czf mx.tgz mx && rm -rf mx)
echo "== all done at $(( $(date +%s) - t0 )) s"
