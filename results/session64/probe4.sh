#!/usr/bin/env bash
# Session 64 probe 4 (carry .run-bin and .ab-fb of `results/session64/build-variants.sh 1 5 13 21`
# at fef4d94; timeout 590; any card; run inside probe5.sh): the measurement switches
# XSTAGE_ATTN_FB_PROBE of fef4d94's mainloop.cuh (the unmasked whole first block, the
# zero-initialising first P V, exponentials on the FMA pipe) against the shipped code
# (docs/attention.md §Key groups, "One round of tiles"). As probe3.sh (in the tree at fef4d94):
# every .ab-fb/xstage-v*.xz binary, the 128-row d = 64 tile, q 1024 x 12 heads, key lengths
# 128..2048, 100 launches per cell, every cell checked; two passes, the second in reverse order;
# cuDNN (PyTorch SDPA) over the same sweep between them; all lines fitted
# (python/fit_attention_steps.py). Then the issue-38 d = 64 short grid (v0 auto; every binary's
# 128-row tile; causal S 2048 / 4096 x 8 / 24 heads, checked), and Nsight Compute's source counters
# of v0 and v21 at 8 key blocks. Files: r.tgz (JSONs and logs), ncu.tgz, fit.txt, fit.json, grid.txt.
set -u
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv | tee $OUT/gpu.txt
source .run-bin/env.sh
W=/tmp/fb; mkdir -p $W/json $W/ncu
pack() { tar czf $OUT/r.tgz -C $W json; }  # $OUT keeps at most 8 files
for f in .ab-fb/xstage-v*.xz; do b=$(basename $f .xz); xz -dc $f > $W/$b && chmod +x $W/$b; done
ls $W
KV=128,256,384,512,768,1024,1536,2048
VS=$(cd $W && ls xstage-v* | sed 's/xstage-//' | sort)
sweep() {  # variant pass
  $W/xstage-$1 bench attention -d 64 --tile rows128 --q-len 1024 -H 12 -S $KV --iters 100 \
    --json $W/json/xs-$1-p$2.json > $W/json/xs-$1-p$2.log 2>&1 || { echo "bench $1 p$2 failed"; tail -3 $W/json/xs-$1-p$2.log; }
}
for v in $VS; do sweep $v 1; done
python3 python/bench_attention_torch.py --backends cudnn --q-len 1024 --heads 12 --head-dims 64 --seqlens $KV \
  --iters 100 --json $W/json/cudnn-kv.json > $W/json/cudnn-kv.log 2>&1 || { echo "torch bench failed"; tail -3 $W/json/cudnn-kv.log; }
for v in $(echo $VS | tr ' ' '\n' | sort -r); do sweep $v 2; done
python3 python/fit_attention_steps.py $W/json/xs-*.json $W/json/cudnn-kv.json --json $OUT/fit.json | tee $OUT/fit.txt
pack
# The issue-38 short grid at d = 64 (S 1024 / 1100 / 2048 x H 4 / 12 / 24): v0's automatic tile, the 128-row tile of
# v0 and every variant, cuDNN beside.
gridrun() {  # name binary tile
  $W/xstage-$2 bench attention -d 64 --tile $3 -S 1024,1100,2048 -H 4,12,24 --iters 50 --json $W/json/grid-$1.json \
    > $W/json/grid-$1.log 2>&1 || echo "grid $1 failed"
}
gridrun v0-auto v0 auto
for v in $VS; do gridrun $v-rows128 $v rows128; done
for v in $VS; do
  $W/xstage-$v bench attention -d 64 --causal --tile rows128 -S 2048,4096 -H 8,24 --iters 30 --json $W/json/causal-$v.json \
    > $W/json/causal-$v.log 2>&1 || echo "causal $v failed"
  grep -iE "fail|pass" $W/json/causal-$v.log | tail -2
done
python3 python/bench_attention_torch.py --backends cudnn --heads 4,12,24 --head-dims 64 --seqlens 1024,1100,2048 \
  --iters 50 --json $W/json/grid-cudnn.json > $W/json/grid-cudnn.log 2>&1 || echo "grid cudnn failed"
python3 - $W/json > $OUT/grid.txt <<'P'
import json, sys, glob, os
d = sys.argv[1]
rows = {}
for f in sorted(glob.glob(os.path.join(d, "grid-*.json")) + glob.glob(os.path.join(d, "causal-*.json"))):
    b = os.path.basename(f)[:-5]
    c = b.startswith("causal-")
    name = b.split("-", 1)[1] + ("-rows128" if c else "")
    for r in json.load(open(f))["results"]:
        ok = r.get("correctness", {}).get("passed", False)
        rows.setdefault((r["seqlen"], r["heads"], "causal" if c else ""), {})[name] = (r["median_us"], ok)
names = sorted({n for v in rows.values() for n in v})
print("# median us (x = output check failed); S H " + " ".join(names))
for k in sorted(rows):
    print(f"{k[0]:5d} {k[1]:3d} {k[2]:6s} " + " ".join(f"{rows[k][n][0]:8.2f}{'' if rows[k][n][1] else 'x'}" if n in rows[k] else f"{'-':>8}" for n in names))
P
cat $OUT/grid.txt; pack
if command -v ncu >/dev/null; then
  for v in v0 v21; do
    timeout 90 ncu --clock-control none --section SourceCounters --section WarpStateStats --section SpeedOfLight \
      -k regex:attention_fwd -c 1 --launch-skip 5 -o $W/ncu/xs-$v-kv1024 \
      $W/xstage-$v bench attention -d 64 --tile rows128 --q-len 1024 -S 1024 -H 12 --iters 20 --warmup 5 --check-rows 2 \
      > $W/ncu/xs-$v-kv1024.log 2>&1
  done
  for r in $W/ncu/*.ncu-rep; do
    n=$(basename $r .ncu-rep)
    ncu -i $r --page source --csv --print-source sass > $W/ncu/$n-sass.csv 2> $W/ncu/$n-sass.err
    ncu -i $r --page details > $W/ncu/$n-details.txt 2>&1
  done
  (cd $W/ncu && tar czf $OUT/ncu.tgz *.csv *.txt *.log *.err)
  grep -HE "Duration|SM Active" $W/ncu/*-details.txt
fi
pack
