#!/usr/bin/env python3
"""PyTorch SDPA baselines for `xstage bench attention`, measured the same way.

    python3 python/bench_attention_torch.py --json torch.json [--backends cudnn,flash] [--causal]

Same shapes (B=1, S in {1024 .. 65536}, heads {12, 24}, d {64, 128}), same layout (BSHD
memory, handed to SDPA as the (B, H, S, D) view it expects), same timing: CUDA events
around every launch, warm-up first, median of >= 20 launches, inputs rotating over enough
buffer sets to exceed 2 x L2, a 4 GiB memset queued before the timed launches so the GPU is
busy while the host enqueues them. TFLOP/s = 4*B*H*S^2*d / t (visible pairs only when causal;
causal is top-left aligned in both). Writes JSON in the shape `xstage bench attention
--json` writes (schema xstage.bench.attention.v1, one result per backend and shape), so
python/compare_attention.py can merge them. A backend that refuses a shape is recorded with
its error instead of a time. Exit status: 0 ok, 2 bad input, 3 torch/CUDA missing.
"""
import argparse
import datetime
import json
import math
import os
import statistics
import sys


def _ints(text):
    try:
        return [int(x) for x in text.split(",") if x]
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a comma-separated list of integers: {text!r}")


def _quantile(values, q):
    v = sorted(values)
    pos = q * (len(v) - 1)
    lo = int(math.floor(pos))
    hi = min(lo + 1, len(v) - 1)
    return v[lo] + (pos - lo) * (v[hi] - v[lo])


def visible_pairs(sq, skv, causal):
    if not causal:
        return float(sq) * skv
    n = min(sq, skv)
    return n * (n + 1) / 2 + max(0, sq - skv) * float(skv)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seqlens", type=_ints, default=_ints("1024,4096,4608,8192,16384,32768,65536"))
    ap.add_argument("--heads", type=_ints, default=_ints("12,24"))
    ap.add_argument("--head-dims", type=_ints, default=_ints("64,128"))
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--dtype", choices=["bf16", "fp16"], default="bf16")
    ap.add_argument("--causal", action="store_true")
    ap.add_argument("--backends", default="cudnn,flash", help="comma list of cudnn, flash, efficient, math")
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--iters", type=int, default=30)
    ap.add_argument("--rotate-mib", type=float, default=0.0, help="0: 2 x the device's L2")
    ap.add_argument("--layout", choices=["bshd", "bhsd"], default="bshd",
                    help="memory layout of q, k, v (bshd = xstage's; bhsd = contiguous (B, H, S, D))")
    ap.add_argument("--json", help="write results here")
    args = ap.parse_args(argv)
    if args.iters < 20:
        print("bench_attention_torch: --iters must be >= 20", file=sys.stderr)
        return 2
    if args.batch < 1 or args.warmup < 0:
        print("bench_attention_torch: --batch must be >= 1 and --warmup >= 0", file=sys.stderr)
        return 2

    try:
        import torch
        import torch.nn.functional as F
        from torch.nn.attention import SDPBackend, sdpa_kernel
    except ImportError as e:
        print(f"bench_attention_torch: PyTorch not available ({e})", file=sys.stderr)
        return 3
    if not torch.cuda.is_available():
        print("bench_attention_torch: no CUDA device", file=sys.stderr)
        return 3

    names = {
        "cudnn": SDPBackend.CUDNN_ATTENTION,
        "flash": SDPBackend.FLASH_ATTENTION,
        "efficient": SDPBackend.EFFICIENT_ATTENTION,
        "math": SDPBackend.MATH,
    }
    backends = [b for b in args.backends.split(",") if b]
    for b in backends:
        if b not in names:
            print(f"bench_attention_torch: unknown backend {b!r} ({', '.join(names)})", file=sys.stderr)
            return 2

    dev = torch.device("cuda")
    props = torch.cuda.get_device_properties(dev)
    l2 = getattr(props, "L2_cache_size", 50 << 20)
    rotate = int(args.rotate_mib * (1 << 20)) if args.rotate_mib > 0 else 2 * l2
    dtype = torch.bfloat16 if args.dtype == "bf16" else torch.float16
    torch.manual_seed(20261130)
    free_b, _ = torch.cuda.mem_get_info()
    backlog = torch.empty(min(4 << 30, free_b // 8), dtype=torch.uint8, device=dev)

    print(f"# PyTorch {torch.__version__} SDPA on {props.name} ({props.multi_processor_count} SMs, "
          f"L2 {l2 / 2**20:.0f} MiB), {args.dtype}, {args.layout.upper()}, "
          f"{'causal' if args.causal else 'non-causal'}, batch {args.batch}, "
          f"median of {args.iters} runs after {args.warmup} warm-up, inputs rotate over >= {rotate / 2**20:.0f} MiB")
    print(f"#{'backend':>8} {'seqlen':>7} {'heads':>5} {'d':>4} {'sets':>5} {'time(us)':>10} {'min(us)':>10} "
          f"{'max(us)':>10} {'TFLOP/s':>9} {'best':>9} {'#wrong':>6}")
    results = []
    for d in args.head_dims:
        for h in args.heads:
            for s in args.seqlens:
                elems = args.batch * s * h * d
                set_bytes = 4 * elems * 2
                sets = max(1, -(-rotate // set_bytes))
                # BSHD memory, (B, H, S, D) views: the layout xstage reads.
                def make():
                    if args.layout == "bshd":
                        return torch.empty(args.batch, s, h, d, device=dev, dtype=dtype).uniform_(-1, 1).transpose(1, 2)
                    return torch.empty(args.batch, h, s, d, device=dev, dtype=dtype).uniform_(-1, 1)
                qkv = [[make() for _ in range(3)] for _ in range(sets)]
                flops = 4.0 * args.batch * h * d * visible_pairs(s, s, args.causal)
                for b in backends:
                    rec = {"backend": f"torch-{b}", "batch": args.batch, "seqlen": s, "heads": h, "head_dim": d,
                           "dtype": args.dtype, "causal": args.causal, "rotating_sets": sets, "iters": args.iters}
                    try:
                        with sdpa_kernel([names[b]]):
                            for w in range(args.warmup):
                                q, k, v = qkv[w % sets]
                                F.scaled_dot_product_attention(q, k, v, is_causal=args.causal)
                            ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
                                  for _ in range(args.iters)]
                            # GPU busy while the host enqueues: no launch overhead inside a timing.
                            backlog.zero_()
                            out = None
                            for it in range(args.iters):
                                q, k, v = qkv[it % sets]
                                ev[it][0].record()
                                out = F.scaled_dot_product_attention(q, k, v, is_causal=args.causal)
                                ev[it][1].record()
                            torch.cuda.synchronize()
                    except RuntimeError as e:
                        rec["error"] = str(e).split("\n")[0]
                        results.append(rec)
                        print(f" {b:>8} {s:>7} {h:>5} {d:>4} {sets:>5}   unsupported: {rec['error'][:80]}")
                        continue
                    us = [a.elapsed_time(z) * 1e3 for a, z in ev]
                    med = statistics.median(us)
                    wrong = int((~torch.isfinite(out)).sum().item())
                    rec.update({"median_us": med, "min_us": min(us), "max_us": max(us),
                                "p10_us": _quantile(us, 0.1), "p90_us": _quantile(us, 0.9),
                                "tflops": flops / (med * 1e-6) / 1e12, "tflops_best": flops / (min(us) * 1e-6) / 1e12,
                                "nonfinite": wrong})
                    results.append(rec)
                    print(f" {b:>8} {s:>7} {h:>5} {d:>4} {sets:>5} {med:>10.1f} {min(us):>10.1f} {max(us):>10.1f} "
                          f"{rec['tflops']:>9.1f} {rec['tflops_best']:>9.1f} {wrong:>6}", flush=True)
                del qkv
                torch.cuda.empty_cache()

    if args.json:
        doc = {
            "schema": "xstage.bench.attention.v1",
            "tool": "torch-sdpa",
            "torch": torch.__version__,
            "cuda": torch.version.cuda,
            "cudnn": torch.backends.cudnn.version(),
            "device": props.name,
            "sm_count": props.multi_processor_count,
            "l2_bytes": l2,
            "commit": os.environ.get("XSTAGE_COMMIT", "unknown"),
            "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "config": {"batch": args.batch, "dtype": args.dtype, "causal": args.causal, "layout": args.layout.upper(),
                       "warmup": args.warmup, "iters": args.iters, "rotate_bytes": rotate,
                       "backends": backends, "flops": "4*B*H*Sq*Skv*d (visible pairs if causal)"},
            "results": results,
        }
        with open(args.json, "w") as f:
            json.dump(doc, f, indent=2)
            f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
