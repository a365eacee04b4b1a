#!/usr/bin/env bash
# Session 63 probe (carry .run-bin and .ab-long of session62/prepare.sh; timeout 590). On an H200:
# issue 38's acceptance (results/session62/h200.sh; env LIMIT as there). On any other card, ~1 min:
# where one round of d = 64 128-row tiles spends its time (docs/attention.md §Not done yet, S 1024
# with 12 heads): `xstage bench attention --tile rows128 -d 64 --q-len Q -S KV` (kv_len = S) over
# key lengths 128..2048, for 96 tiles (q 1024, 12 heads) and for one tile on one CTA (q 128, 1 head),
# inputs rotating over 2 x L2 (from DRAM) and over 1 MiB (from L2); 100 timed launches per cell; a
# table of median µs per key block count (python below); then, if ncu reads counters, Nsight Compute
# sections (speed of light, launch, occupancy, warp states) of that launch (S 1024, 12 heads, d 64)
# for xstage's kernel and for cuDNN's (PyTorch SDPA).
set -u
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv | tee $OUT/gpu.txt
if grep -q H200 $OUT/gpu.txt; then bash results/session62/h200.sh; exit; fi
source .run-bin/env.sh
KV=128,256,384,512,768,1024,1536,2048
run() {  # name q heads extra...
  local n=$1 q=$2 h=$3; shift 3
  .run-bin/xstage bench attention -d 64 --tile rows128 --q-len $q -H $h -S $KV --iters 100 --json $OUT/$n.json "$@" \
    > $OUT/$n.log 2>&1 || { echo "bench $n failed"; tail -3 $OUT/$n.log; }
}
run t96-dram 1024 12
run t1-dram 128 1
run t96-l2 1024 12 --rotate-mib 1
run t1-l2 128 1 --rotate-mib 1
run t96-dram-b 1024 12
python3 - $OUT <<'P' | tee $OUT/table.txt
import json, sys, os
out = sys.argv[1]
names = ["t96-dram", "t96-dram-b", "t96-l2", "t1-dram", "t1-l2"]
data = {}
for n in names:
    p = os.path.join(out, n + ".json")
    if not os.path.exists(p): continue
    d = json.load(open(p))
    for r in d["results"]:
        ok = r["correctness"]["passed"]
        data.setdefault(r["seqlen"], {})[n] = (r["median_us"], r["p10_us"], r["p90_us"], ok)
print("# median us (p10-p90) of the rows128 d=64 tile by key length; FAILED = output check failed")
print("#   kv blocks " + " ".join(f"{n:>22}" for n in names))
for kv in sorted(data):
    row = data[kv]
    cells = []
    for n in names:
        if n in row:
            m, a, b, ok = row[n]
            cells.append(f"{m:7.2f} ({a:5.1f}-{b:5.1f}){'' if ok else ' FAILED'}")
        else:
            cells.append(f"{'-':>22}")
    print(f"{kv:5d} {(kv + 127) // 128:5d} " + " ".join(f"{c:>22}" for c in cells))
P
st
if command -v ncu >/dev/null; then
  SEC="--section SpeedOfLight --section LaunchStats --section Occupancy --section WarpStateStats --section SchedulerStats"
  timeout 120 ncu --clock-control none $SEC -k regex:attention_fwd -c 1 --launch-skip 5 \
    .run-bin/xstage bench attention -d 64 -S 1024 -H 12 --iters 20 --warmup 5 --check-rows 2 > $OUT/ncu-xstage.txt 2>&1
  echo "ncu xstage rc=$?"
  cat > $OUT/cudnn_sdpa.py <<'P'
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
q, k, v = (torch.randn(1, 12, 1024, 64, device="cuda", dtype=torch.bfloat16) for _ in range(3))
torch.cuda.synchronize()
torch.cuda.profiler.start()
with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
    for _ in range(8):
        o = torch.nn.functional.scaled_dot_product_attention(q, k, v)
torch.cuda.synchronize()
torch.cuda.profiler.stop()
print("sdpa done", o.shape)
P
  timeout 150 ncu --clock-control none --profile-from-start off $SEC --launch-skip 5 -c 2 python3 $OUT/cudnn_sdpa.py \
    > $OUT/ncu-cudnn.txt 2>&1
  echo "ncu cudnn rc=$?"
  grep -hE '^  [a-zA-Z_].*\(|Duration|Grid Size|Block Size|Cluster Size|Registers Per|Dynamic Shared|Compute \(SM\) Throughput|Memory Throughput|L2 Cache Throughput|Achieved Occupancy|Warp Cycles Per Issued|Issued Warp Per|No Eligible' \
    $OUT/ncu-xstage.txt $OUT/ncu-cudnn.txt | cut -c1-160
else
  echo "no ncu on this machine"
fi
st
