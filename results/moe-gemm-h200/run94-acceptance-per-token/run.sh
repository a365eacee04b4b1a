#!/usr/bin/env bash
# session 21, call C: issue 7's acceptance call on main 630b65f (binaries of d5e0d17: kernels and op
# unchanged since) with the per-token formats, then, if time is left, traces of the interleaved tile.
out=$1; d=.ab-bin/s21b
BIN=$d WEIGHTS="w8a8 w4a8-int4-lut-rs-tok w4a8-int4-lut-rs-tok-glu" scripts/moe-acceptance-prebuilt-run $out 2>&1 | tail -14
nccl_root=$(python3 -c "import nvidia.nccl; print(list(nvidia.nccl.__path__)[0])" 2>/dev/null || true)
[ -n "$nccl_root" ] && export LD_LIBRARY_PATH="$nccl_root/lib:${LD_LIBRARY_PATH:-}"
mkdir -p $out/t
for c in "glu-dit|DiT-MoE-G" "glu-flash|DSv4-Flash"; do
  IFS='|' read -r name model <<< "$c"
  XSTAGE_W4A8_TRACE_FILE=$out/t/$name.txt timeout 40 $d/xstage-trace bench moe-gemm --models $model --ops l1_swiglu --tokens 8192 --weights w4a8-int4-lut-rs-tok-glu --warmup 1 --iters 20 > $out/t/$name.log 2>&1
  python3 python/w4a8_trace.py $out/t/$name.txt > $out/t/$name-summary.txt 2>&1
  echo "trace $name: $(grep -E 'period\[0\]' $out/t/$name-summary.txt | head -1)"
  gzip -f $out/t/$name.txt
done
(cd $out && tar czf t.tgz t && rm -rf t)
