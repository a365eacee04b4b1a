#!/usr/bin/env bash
# session 20: one cell, base/new alternately, with the SM clock and power sampled every 100 ms
out=$1; mkdir -p $out/c
nccl_root=$(python3 -c "import nvidia.nccl; print(list(nvidia.nccl.__path__)[0])" 2>/dev/null || true)
[ -n "$nccl_root" ] && export LD_LIBRARY_PATH="$nccl_root/lib:${LD_LIBRARY_PATH:-}"
for r in 1 2; do for v in base new; do for w in w4a8-int4-lut-rs-tok w8a8; do
  f=$out/c/$v-$w-$r
  nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw --format=csv,noheader -lms 100 > $f.smi 2>&1 &
  sp=$!
  timeout 60 .ab-bin/chunk2/xstage-$v bench moe-gemm --models DSv4-Flash,DSv4-Pro --ops l2_bf16,l1_bf16 --tokens 8192 --weights $w --iters 200 > $f.log 2>&1
  kill $sp; wait $sp 2>/dev/null
  echo "$v $w $r: $(grep -E '^ +DSv4' $f.log | awk '{print $2, $(NF-2)}' | tr '\n' ' ') clock $(awk -F', ' '{gsub(/ MHz/,"",$2); if ($2+0>1000) {s+=$2; n++}} END {if (n) printf "%.0f MHz (n %d)", s/n, n}' $f.smi)"
done; done; done
(cd $out && tar czf c.tgz c && rm -rf c)
