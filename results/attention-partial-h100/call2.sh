#!/usr/bin/env bash
# session 50 call 2 (binaries as call 1): this build against the build before (.run-prev), runs
# alternating (old first): the short grid (d 64 and 128, auto) and the long non-causal shapes;
# the partial-tile probes at 1024 and 2048 keys; causal bf16 (d 64 and 128, auto order) with cuDNN.
set -u
source .run-bin/env.sh
X=.run-bin/xstage O=.run-prev/xstage
t0=$(date +%s)
mkdir -p $OUT/ab $OUT/probe
for r in 1 2; do
  for b in old new; do
    B=$X; [ $b = old ] && B=$O
    $B bench attention -S 1024,1100,2048,2500,4096,4608 -H 4,8,16,24,40 -d 64,128 --json $OUT/ab/short-$b-$r.json > $OUT/ab/short-$b-$r.log 2>&1
    $B bench attention -d 64,128 -S 8192,16384,32768 -H 16,40 --json $OUT/ab/long-$b-$r.json > $OUT/ab/long-$b-$r.log 2>&1
  done
done
python3 python/compare_attention_ab.py --base $OUT/ab/short-old-*.json --variant new $OUT/ab/short-new-*.json > $OUT/ab/short.txt 2>&1
python3 python/compare_attention_ab.py --base $OUT/ab/long-old-*.json --variant new $OUT/ab/long-new-*.json > $OUT/ab/long.txt 2>&1
echo "ab $(( $(date +%s) - t0 )) s" >> $OUT/ab/long.txt; st
probe() {  # S d tile q [np]
  local n=s$1-d$2-$3-q$4${5:+-np}
  $X bench attention -d $2 -S $1 -H 132 --q-len $4 --tile $3 ${5:+--no-partial-tiles} --json $OUT/probe/$n.json > $OUT/probe/$n.log 2>&1
}
for s in 1024 2048; do
  for q in 64 128 192; do probe $s 64 staged $q; done
  probe $s 64 staged 64 np
  for q in 64 128; do probe $s 64 rows128 $q; done
done
echo "probes $(( $(date +%s) - t0 )) s" >> $OUT/ab/long.txt; st
scripts/attention-causal-ab --orders auto --no-tests $OUT/causal-bf16 > $OUT/causal-bf16.log 2>&1
echo "rc=$? $(( $(date +%s) - t0 )) s" >> $OUT/causal-bf16.log; st
