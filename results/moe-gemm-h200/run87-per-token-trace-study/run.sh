#!/usr/bin/env bash
# session 20 trace study of the per-token bf16 256-token tile (branch tok-study)
out=$1; x=.ab-bin/tokstudy/xstage; mkdir -p $out/t
nccl_root=$(python3 -c "import nvidia.nccl; print(list(nvidia.nccl.__path__)[0])" 2>/dev/null || true)
[ -n "$nccl_root" ] && export LD_LIBRARY_PATH="$nccl_root/lib:${LD_LIBRARY_PATH:-}"
for s in 0 4 8 16 1; do
  XSTAGE_W4RS_STUDY=$s XSTAGE_W4A8_TRACE_FILE=$out/t/tok$s.txt timeout 60 $x bench moe-gemm --models DSv4-Flash --ops l2_bf16 --tokens 8192 --weights w4a8-int4-lut-rs-tok --warmup 1 --iters 20 > $out/t/tok$s.log 2>&1
  python3 python/w4a8_trace.py $out/t/tok$s.txt > $out/t/tok$s-summary.txt 2>&1
  echo "study $s: $(grep -E 'period\[0\]' $out/t/tok$s-summary.txt | head -1)"
done
XSTAGE_W4A8_TRACE_FILE=$out/t/lut0.txt timeout 60 $x bench moe-gemm --models DSv4-Flash --ops l2_bf16 --tokens 8192 --weights w4a8-int4-lut-rs --warmup 1 --iters 20 > $out/t/lut0.log 2>&1
python3 python/w4a8_trace.py $out/t/lut0.txt > $out/t/lut0-summary.txt 2>&1
(cd $out && tar czf t.tgz t && rm -rf t)
