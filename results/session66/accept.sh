#!/usr/bin/env bash
# Session 66: issue 38's acceptance grids on whatever single card the call gets (the device tool
# lends kind nvidia-h200 and runs it on an H100 or an H200; the card is named in card.txt and every
# figure is that card's). Same parts as results/attention-issue38-h200/ (session 57): the attention
# GPU tests, short / causal / long grids with cuDNN (and flash on the long grid) in the same call
# (results/attention-partial-h100/call5.sh), then the long non-causal grid as a same-machine A/B of
# .ab-long's 52d10a6 (main before issue 38's attention work) against main; before the A/B, the
# thinnest point of the last H200 run (S 1024, 12 heads, d 64) in 4 alternating passes with
# cuDNN (thin.txt). Carry .run-bin and
# .ab-long (results/session62/prepare.sh). Env LIMIT: seconds for the whole script (default 560).
# Everything is written under /tmp/w and packed into at most 8 files (the tool's limit).
set -u
W=/tmp/w; rm -rf $W; mkdir -p $W
for f in .run-bin/xstage .run-bin/tests/xstage_gpu_tests .ab-long/xstage-base.xz .ab-long/xstage-new.xz; do
  [ -e "$f" ] || { echo "accept.sh: $f was not carried (results/session62/prepare.sh builds it)"; exit 2; }
done
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv | tee $OUT/card.txt
t0=$SECONDS
source .run-bin/env.sh
timeout 300 .run-bin/tests/xstage_gpu_tests --gtest_filter='*Attention*:SoftmaxPathsGpu.*' > $W/gpu-tests.log 2>&1
echo "tests rc=$?"; tail -n 3 $W/gpu-tests.log
OUT=$W bash results/attention-partial-h100/call5.sh
echo "acceptance part: $((SECONDS - t0)) s"
for f in short/d64.txt short/d128.txt causal-bf16/ab.txt causal-fp16/ab.txt long/long-compare.txt; do
  echo "== $f"; grep '^#' $W/$f | tail -n 3
done
echo "long rows below 1.0x cuDNN (TFLOP/s columns):"; awk '$1 ~ /^[0-9]+$/ && $6 + 0 < $7 + 0' $W/long/long-compare.txt
grep -h 'below\|miss' $W/causal-*/ab.txt | head
# The thinnest point of the last H200 run (S 1024, 12 heads, d 64: 0.998x there), again in 4
# alternating passes of xstage and cuDNN, each pass gated by compare_attention.py's correctness
# check; thin.txt: each side's median over the passes and their ratio (python/attention_passes.py).
mkdir -p $W/thin
for r in 1 2 3 4; do
  .run-bin/xstage bench attention -S 1024 -H 12 -d 64 --json $W/thin/xs-$r.json > $W/thin/xs-$r.log 2>&1
  python3 python/bench_attention_torch.py --backends cudnn --seqlens 1024 --heads 12 --head-dims 64 \
    --json $W/thin/t-$r.json > $W/thin/t-$r.log 2>&1
  python3 python/compare_attention.py $W/thin/xs-$r.json $W/thin/t-$r.json --json $W/thin/c-$r.json > $W/thin/c-$r.txt 2>&1
  echo "thin pass $r rc=$?"
done
python3 python/attention_passes.py $W/thin/c-1.json $W/thin/c-2.json $W/thin/c-3.json $W/thin/c-4.json > $W/thin.txt
cat $W/thin.txt
limit=${LIMIT:-560}
if [ $((SECONDS - t0)) -lt $((limit - ${MIN_AB:-160})) ]; then
  timeout $((limit - (SECONDS - t0))) scripts/ab-run --bin .ab-long --variants base,new --alternate --reps ${REPS:-2} --tests none \
    $W/long-ab 'attention -S 1024,4096,4608,8192,16384,32768,65536 -H 12,24 -d 64,128' > $W/long-ab.log 2>&1
  echo "long A/B rc=$? at $((SECONDS - t0)) s"; grep -E '^#|geomean' $W/long-ab.log | tail -n 8
else
  echo "long A/B left out (time)"
fi
# The bench CLI's shared timing code (src/cli/bench_timing.hpp), if .run-new carries a build of it:
# one attention and one moe-gemm cell from each binary; smoke.txt lists both JSONs' keys and values.
if [ -e .run-new/xstage.xz ]; then
  xz -dc .run-new/xstage.xz > /tmp/xstage-new && chmod +x /tmp/xstage-new
  for b in .run-bin/xstage /tmp/xstage-new; do
    n=$(basename $b)
    $b bench attention -S 1100 -H 12 -d 64 --json $W/smoke-att-$n.json > $W/smoke-att-$n.log 2>&1; echo "$b attention rc=$?"
    $b bench moe-gemm --models DSv4-Flash --tokens 128 --ops l1_swiglu --json $W/smoke-moe-$n.json > $W/smoke-moe-$n.log 2>&1; echo "$b moe-gemm rc=$?"
  done 2>&1 | tee $W/smoke.txt
  python3 - "$W" >> $W/smoke.txt <<'PY'
import json, sys
w = sys.argv[1]
for kind in ("att", "moe"):
    recs = [json.load(open(f"{w}/smoke-{kind}-{n}.json"))["results"][0] for n in ("xstage", "xstage-new")]
    print(kind, "same keys" if set(recs[0]) == set(recs[1]) else f"KEYS DIFFER {set(recs[0]) ^ set(recs[1])}")
    for k in ("median_us", "min_us", "max_us", "p10_us", "p90_us", "tflops", "tflops_best", "check"):
        print(f"  {k}: {recs[0][k]} / {recs[1][k]}")
PY
  cat $W/smoke.txt
fi
cp $W/short/d64.txt $OUT/short-d64.txt; cp $W/short/d128.txt $OUT/short-d128.txt
cp $W/causal-bf16/ab.txt $OUT/causal-bf16.txt; cp $W/causal-fp16/ab.txt $OUT/causal-fp16.txt
cp $W/long/long-compare.txt $OUT/long-compare.txt; cp $W/thin.txt $OUT/thin.txt
gzip -c $W/gpu-tests.log > $W/gpu-tests.log.gz
tar czf $OUT/all.tgz -C $W . 2>/dev/null
ls $OUT
