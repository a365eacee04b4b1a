#!/usr/bin/env bash
# Session 63 probe 2 (carry .run-bin; timeout 240; any card): cuDNN's side of probe.sh's
# decomposition. PyTorch SDPA with the cuDNN backend, q 1024 x 12 heads x d 64 against key lengths
# 128..2048 (kv_len = S), inputs rotating over >= 100 MiB, a queued torch.cuda._sleep keeping the GPU
# busy while the host enqueues, each call timed with its own CUDA events, median of 100; then Nsight
# Compute's speed-of-light section of xstage's and cuDNN's kernels at 1 and 8 key blocks.
set -u
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv | tee $OUT/gpu.txt
source .run-bin/env.sh
cat > $OUT/cudnn_kv.py <<'P'
import sys, torch
from torch.nn.attention import SDPBackend, sdpa_kernel
F = torch.nn.functional.scaled_dot_product_attention
kvs = [int(x) for x in sys.argv[1].split(",")]
reps = int(sys.argv[2]) if len(sys.argv) > 2 else 100
print("# cuDNN SDPA (torch %s, cuDNN %s), q 1024 x 12 heads x d 64 bf16, median us (p10-p90) of %d calls" %
      (torch.__version__, torch.backends.cudnn.version(), reps))
for kv in kvs:
    set_bytes = 2 * 12 * 64 * (1024 + 2 * kv)
    sets = max(1, (100 << 20) // set_bytes + 1)
    qs = [torch.randn(1, 12, 1024, 64, device="cuda", dtype=torch.bfloat16) for _ in range(sets)]
    ks = [torch.randn(1, 12, kv, 64, device="cuda", dtype=torch.bfloat16) for _ in range(sets)]
    vs = [torch.randn(1, 12, kv, 64, device="cuda", dtype=torch.bfloat16) for _ in range(sets)]
    ref = F(qs[0].float(), ks[0].float(), vs[0].float())
    with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
        for i in range(5): o = F(qs[i % sets], ks[i % sets], vs[i % sets])
        torch.cuda.synchronize()
        err = ((F(qs[0], ks[0], vs[0]).float() - ref).norm() / ref.norm()).item()
        ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(reps)]
        torch.cuda._sleep(50_000_000)
        for i, (a, b) in enumerate(ev):
            a.record(); o = F(qs[i % sets], ks[i % sets], vs[i % sets]); b.record()
        torch.cuda.synchronize()
    t = sorted(a.elapsed_time(b) * 1e3 for a, b in ev)
    print(f"{kv:5d} {(kv + 127) // 128:3d} {t[len(t) // 2]:7.2f} ({t[len(t) // 10]:5.1f}-{t[len(t) * 9 // 10]:5.1f})  rel err {err:.1e}")
P
timeout 100 python3 $OUT/cudnn_kv.py 128,256,384,512,768,1024,1536,2048 | tee $OUT/cudnn-kv.txt
if command -v ncu >/dev/null; then
  for kv in 128 1024; do
    timeout 60 ncu --clock-control none --section SpeedOfLight -k regex:attention_fwd -c 1 --launch-skip 5 \
      .run-bin/xstage bench attention -d 64 --q-len 1024 -S $kv -H 12 --iters 20 --warmup 5 --check-rows 2 > $OUT/ncu-xstage-kv$kv.txt 2>&1
    timeout 60 ncu --clock-control none --section SpeedOfLight -k regex:sdpa --launch-skip 5 -c 1 \
      python3 $OUT/cudnn_kv.py $kv 20 > $OUT/ncu-cudnn-kv$kv.txt 2>&1
  done
  grep -HE 'Elapsed Cycles|SM Active Cycles|Duration|SM Frequency' $OUT/ncu-*-kv*.txt | sed "s#$OUT/##"
fi
st
