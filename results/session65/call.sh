#!/usr/bin/env bash
# Session 65's device call (carry .run-bin, .ab-long, .ab-tma; timeout 590).
# On an H200: issue 38's acceptance on main's default build (results/session62/h200.sh).
# On any other card: the TMA-store epilogue (XSTAGE_ATTN_TMA_STORE, .ab-tma/, built by
# results/session65/prepare-tma.sh) against main's build (.run-bin):
#   1. the attention GPU tests of the TMA build (a failure is reported; the timing runs anyway);
#   2. both binaries on the same cells, two passes in opposite orders (a third and fourth of the short,
#      long and longer groups while the time lasts), every cell checked:
#      non-causal d 64 / 128 x S {1024, 1100, 2048, 4096} x H {4, 12, 24, 40}; causal d 64 / 128 x
#      S {2048, 8192} x H {8, 24}; long d 64 S {8192, 16384} x H {12, 24}; d 64 / 128 S {32768, 65536} x
#      H {12, 24} (d 128 there: the long-key tile, a control); fp16 d 128 S {1024, 4096}
#      x H {12, 40}; the one-round sweep (128-row tile, q 1024 x 12 heads, keys 128-2048);
#   3. cuDNN (PyTorch SDPA) on the non-causal grid;
#   4. results/session65/compare.py -> ab.txt; fit_attention_steps.py on the sweep -> fit.txt.
# Files: card.txt, gpu-tests-tma.log.gz, ab.txt, fit.txt, r.tgz (JSONs and logs).
set -u
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv,noheader | tee $OUT/card.txt
if grep -q H200 $OUT/card.txt; then
  LIMIT=${LIMIT:-560} bash results/session62/h200.sh
  exit $?
fi
for f in .run-bin/xstage .ab-tma/xstage.xz .ab-tma/gpu-tests.xz; do
  [ -e "$f" ] || { echo "call.sh: $f was not carried"; exit 2; }
done
source .run-bin/env.sh
W=/tmp/s65; mkdir -p $W/json
xz -dc .ab-tma/xstage.xz > $W/xstage-tma && xz -dc .ab-tma/gpu-tests.xz > $W/gpu-tests-tma && chmod +x $W/xstage-tma $W/gpu-tests-tma
cp .run-bin/xstage $W/xstage-base
pack() { tar czf $OUT/r.tgz -C $W json; }
T0=$(date +%s)
timeout 240 $W/gpu-tests-tma --gtest_filter='*Attention*:SoftmaxPathsGpu.*' > $OUT/gpu-tests-tma.log 2>&1
echo "gpu tests rc=$? ($(( $(date +%s) - T0 )) s)"; grep -E '^\[  (PASSED|FAILED|SKIPPED) |tests ran' $OUT/gpu-tests-tma.log | head -n 20
gzip -f $OUT/gpu-tests-tma.log
run_group() {  # binary pass group
  local b=$W/xstage-$1 j=$W/json/$1-p$2-$3
  case $3 in
    short) args="-d 64,128 -S 1024,1100,2048,4096 -H 4,12,24,40 --iters 50" ;;
    causal) args="-d 64,128 -S 2048,8192 -H 8,24 --causal --iters 30" ;;
    long) args="-d 64 -S 8192,16384 -H 12,24 --iters 30" ;;
    longer) args="-d 64,128 -S 32768,65536 -H 12,24 --iters 20" ;;
    fp16) args="-d 128 --dtype fp16 -S 1024,4096 -H 12,40 --iters 50" ;;
    sweep) args="-d 64 --tile rows128 --q-len 1024 -H 12 -S 128,256,384,512,768,1024,1536,2048 --iters 100" ;;
  esac
  $b bench attention $args --json $j.json > $j.log 2>&1 || echo "$1 p$2 $3 failed"
}
cells() {  # binary pass [groups]
  for g in ${3:-short causal long longer fp16 sweep}; do run_group $1 $2 $g; done
  echo "$1 p$2 done ($(( $(date +%s) - T0 )) s)"
}
cells base 1; cells tma 1; pack
python3 python/bench_attention_torch.py --backends cudnn --heads 4,12,24,40 --head-dims 64,128 --seqlens 1024,1100,2048,4096 \
  --iters 50 --json $W/json/cudnn-short.json > $W/json/cudnn-short.log 2>&1 || echo "cudnn failed"
echo "cudnn done ($(( $(date +%s) - T0 )) s)"
cells tma 2; cells base 2; pack
# Passes 3 and 4 of the groups where the binaries are closest (while the time lasts).
if [ $(( $(date +%s) - T0 )) -lt 300 ]; then cells base 3 "short longer long"; cells tma 3 "short longer long"; fi
if [ $(( $(date +%s) - T0 )) -lt 380 ]; then cells tma 4 "short longer long"; cells base 4 "short longer long"; fi
pack
python3 results/session65/compare.py $W/json | tee $OUT/ab.txt
python3 python/fit_attention_steps.py $W/json/*-sweep.json --json $W/json/fit.json > $OUT/fit.txt 2>&1; cat $OUT/fit.txt
pack
