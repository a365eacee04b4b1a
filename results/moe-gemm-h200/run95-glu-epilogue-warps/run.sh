#!/usr/bin/env bash
# Session 22, first device call: (1) every MoE GPU test on main 722ee83 (base binaries);
# (2) glu-epi-warps (new): its glu + per-token tests, then an A/B of l1_swiglu against main,
# W8A8 in the same bench line for the ratio, all 7 models at 1024/8192, twice per binary.
set -u
out=${1:?}
cd "$(dirname "$0")/.."
mkdir -p "$out/main"
nccl_root=$(python3 -c "import nvidia.nccl; print(list(nvidia.nccl.__path__)[0])" 2>/dev/null || true)
[ -n "$nccl_root" ] && export LD_LIBRARY_PATH="$nccl_root/lib:${LD_LIBRARY_PATH:-}"
export NCCL_NVLS_ENABLE=0
t0=$(date +%s)
nvidia-smi --query-gpu=name,clocks.sm,power.draw,temperature.gpu --format=csv,noheader
timeout 300 .ab-bin/ab/gpu-tests-base --gtest_filter='MoeGemmGpu.*:MegaMoe.*' > "$out/main/gpu-tests.log" 2>&1
echo "== main tests rc $? at $(( $(date +%s) - t0 )) s"
grep -E "^\[  (PASSED|FAILED) |^\[  FAILED  \]" "$out/main/gpu-tests.log" | head -20
(cd "$out" && tar czf main.tgz main && rm -rf main)
BIN=.ab-bin/ab TEST_FILTER='MoeGemmGpu.W4A8RegisterOperandLutPerToken*' TEST_TIMEOUT=150 REPS=2 \
  BENCHES="--weights w8a8 w4a8-int4-lut-rs-tok-glu --ops l1_swiglu --tokens 1024,8192" \
  scripts/moe-ab-prebuilt-run "$out"
echo "== all done at $(( $(date +%s) - t0 )) s"
