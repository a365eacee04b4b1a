#!/usr/bin/env bash
# session 21, call B: branch tok-swiglu-glu (gate/up-interleaved SwiGLU tile, 256 tokens x 64 channels,
# 1 x 2 clusters). GPU tests first (a failure or hang stops before the bench), then l1_swiglu at
# 1024/8192 for all seven models: w8a8, tok (128 x 256 tile), tok-glu, twice.
out=$1; d=.ab-bin/glu; mkdir -p $out/g
nccl_root=$(python3 -c "import nvidia.nccl; print(list(nvidia.nccl.__path__)[0])" 2>/dev/null || true)
[ -n "$nccl_root" ] && export LD_LIBRARY_PATH="$nccl_root/lib:${LD_LIBRARY_PATH:-}"
timeout 150 $d/gpu-tests --gtest_filter='MoeGemmGpu.W4A8RegisterOperandLutPerToken*' > $out/g/tests.log 2>&1; rc=$?
echo "tests rc $rc"; grep -E '^\[ +(OK|FAILED|PASSED) |max_err|FAILED' $out/g/tests.log | head -30
if [ $rc = 0 ]; then
  for r in 1 2; do
    timeout 150 $d/xstage bench moe-gemm --ops l1_swiglu --tokens 1024,8192 \
      --weights w8a8 w4a8-int4-lut-rs-tok w4a8-int4-lut-rs-tok-glu --json $out/g/bench-$r.json > $out/g/bench-$r.log 2>&1
    echo "bench $r rc $?"
  done
  timeout 60 $d/xstage bench moe-gemm --ops l1_swiglu --tokens 16,128 --weights w4a8-int4-lut-rs-tok w4a8-int4-lut-rs-tok-glu \
    --json $out/g/bench-small.json > $out/g/bench-small.log 2>&1; echo "bench small rc $?"
fi
(cd $out && tar czf g.tgz g && rm -rf g)
