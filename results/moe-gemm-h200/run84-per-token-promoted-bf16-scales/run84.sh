#!/usr/bin/env bash
# one-off (session 20): tokscale tests+bench, then bf16scales A/B
set -u
out=$1; t0=$(date +%s)
nccl_root=$(python3 -c "import nvidia.nccl; print(list(nvidia.nccl.__path__)[0])" 2>/dev/null || true)
[ -n "$nccl_root" ] && export LD_LIBRARY_PATH="$nccl_root/lib:${LD_LIBRARY_PATH:-}"
export NCCL_NVLS_ENABLE=0
mkdir -p $out/tok
nvidia-smi --query-gpu=name,clocks.sm,power.draw --format=csv,noheader > $out/tok/gpu.txt
timeout 170 .ab-bin/tokscale/gpu-tests-new --gtest_filter='MoeGemmGpu.W4A8*' > $out/tok/gpu-tests.log 2>&1; echo "tok tests rc $? at $(( $(date +%s) - t0 ))"
grep -E "^\[  (PASSED|FAILED) |^\[  FAILED  \]" $out/tok/gpu-tests.log
timeout 150 .ab-bin/tokscale/xstage-new bench moe-gemm --weights w8a8 w4a8-int4-lut-rs w4a8-int4-lut-rs-tok --tokens 1024,8192 --json $out/tok/bench.json > $out/tok/bench.txt 2>&1; echo "tok bench rc $? at $(( $(date +%s) - t0 ))"
(cd $out && tar czf tok.tgz tok && rm -rf tok)
BIN=.ab-bin/bf16scales TEST_FILTER='MoeGemmGpu.W4A8*' REPS=1 BENCHES="--weights w8a8 w4a8-int4-lut-rs --tokens 1024,8192" scripts/moe-ab-prebuilt-run $out/bf16
echo "all done at $(( $(date +%s) - t0 ))"
