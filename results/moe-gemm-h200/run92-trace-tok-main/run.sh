#!/usr/bin/env bash
# session 21, call A: traces of the per-token tiles on main f9736e1 (trace build), then issue 7's acceptance call
out=$1; d=.ab-bin/s21; mkdir -p $out/t
nccl_root=$(python3 -c "import nvidia.nccl; print(list(nvidia.nccl.__path__)[0])" 2>/dev/null || true)
[ -n "$nccl_root" ] && export LD_LIBRARY_PATH="$nccl_root/lib:${LD_LIBRARY_PATH:-}"
for c in "tok-l2|DSv4-Flash|l2_bf16|w4a8-int4-lut-rs-tok" "tok-swiglu|DSv4-Flash|l1_swiglu|w4a8-int4-lut-rs-tok" \
         "tok-l1-dit|DiT-MoE-G|l1_bf16|w4a8-int4-lut-rs-tok" "lut-l2|DSv4-Flash|l2_bf16|w4a8-int4-lut-rs" "lut-swiglu|DSv4-Flash|l1_swiglu|w4a8-int4-lut-rs"; do
  IFS='|' read -r name model op w <<< "$c"
  XSTAGE_W4A8_TRACE_FILE=$out/t/$name.txt timeout 60 $d/xstage-trace bench moe-gemm --models $model --ops $op --tokens 8192 --weights $w --warmup 1 --iters 20 > $out/t/$name.log 2>&1
  python3 python/w4a8_trace.py $out/t/$name.txt > $out/t/$name-summary.txt 2>&1
  echo "trace $name: $(grep -E 'period\[0\]' $out/t/$name-summary.txt | head -1)"
  gzip -f $out/t/$name.txt
done
(cd $out && tar czf t.tgz t && rm -rf t)
BIN=$d WEIGHTS="w8a8 w4a8-int4-rs w4a8-int4-lut-rs w4a8-int4-lut-rs-tok w4a8-mxfp4-rs" scripts/moe-acceptance-prebuilt-run $out 2>&1 | tail -25
