#!/usr/bin/env python3
"""cuBLASLt FP8 baselines (torch._scaled_mm) for `xstage bench moe-gemm`, measured the same way.

    python3 python/bench_moe_gemm_torch.py --json torch.json [--tokens 16,128,1024,8192] [--scaling auto]

For every model of docs/MOE.md (shared) and every tokens-per-expert value, the dense GEMM of
one expert: Linear-1 (M = tokens, N = 2 x intermediate, K = hidden) and Linear-2 (M = tokens,
N = hidden, K = intermediate), FP8 e4m3 inputs, bf16 output, through torch._scaled_mm
(cuBLASLt). Scaling: `auto` tries DeepSeek-style blockwise scales first (A 1x128, B 128x128,
what xstage uses; cuBLASLt supports them on sm_90 from CUDA 12.9 and torch exposes them in
recent releases), then per-row/per-column scales, then one scale per tensor; the JSON records
which one ran. Timing: CUDA events around every launch, warm-up (a few launches, then --warmup-ms
of sustained launches so the clock is the power-capped one), median of >= 20 launches,
inputs rotating over enough buffer sets to exceed 2 x L2, a large memset queued first so the
GPU is busy while the host enqueues. TFLOP/s = 2*M*N*K / t. Writes schema
xstage.bench.moe_gemm.v1 (backend "cublaslt"), which python/compare_moe_gemm.py merges with
xstage's. Exit status: 0 ok, 2 bad input, 3 torch/CUDA missing.
"""
import argparse
import datetime
import json
import math
import os
import statistics
import sys
import time

MODELS = [  # name, hidden, intermediate, experts (docs/MOE.md)
    ("DiT-MoE-G", 1408, 5632, 16),
    ("Qwen3.5-397B-A17B", 4096, 1024, 512),
    ("Hy3", 4096, 1536, 192),
    ("MiMo-V2.5", 4096, 2048, 256),
    ("GLM-5.2", 6144, 2048, 256),
    ("DSv4-Flash", 4096, 2048, 256),
    ("DSv4-Pro", 7168, 3072, 384),
]


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


def scale_variants(torch, m, n, k, dev):
    """(name, scale_a, scale_b) candidates, most xstage-like first."""
    f32 = torch.float32
    out = []
    # Blockwise: A one scale per row per 128 K (outer-dim-major, i.e. (M, K/128) with M
    # contiguous), B one per 128x128 block. Two layouts of the B scale are tried.
    sa = torch.rand(k // 128, m, device=dev, dtype=f32).add_(0.5).div_(448).t()
    out.append(("blockwise_1x128_128x128", sa, torch.rand(n // 128, k // 128, device=dev, dtype=f32).add_(0.5).div_(448).t()))
    out.append(("blockwise_1x128_128x128", sa, torch.rand(k // 128, n // 128, device=dev, dtype=f32).add_(0.5).div_(448)))
    out.append(("rowwise", torch.rand(m, 1, device=dev, dtype=f32).add_(0.5).div_(448),
                torch.rand(1, n, device=dev, dtype=f32).add_(0.5).div_(448)))
    out.append(("tensorwise", torch.tensor(1.0 / 448, device=dev), torch.tensor(1.0 / 448, device=dev)))
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tokens", type=_ints, default=_ints("16,128,1024,8192"))
    ap.add_argument("--models", default="", help="comma list of model names (default: all seven)")
    ap.add_argument("--scaling", choices=["auto", "blockwise", "rowwise", "tensorwise"], default="auto")
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--warmup-ms", type=float, default=200.0,
                    help="then untimed launches until this many ms have passed, so the timed runs see the "
                         "sustained (power-capped) clock, as xstage bench moe-gemm does (0: off)")
    ap.add_argument("--iters", type=int, default=30)
    ap.add_argument("--rotate-mib", type=float, default=0.0, help="0: 2 x the device's L2")
    ap.add_argument("--json", help="write results here")
    args = ap.parse_args(argv)
    if args.iters < 20 or args.warmup < 0 or not 0 <= args.warmup_ms <= 60000:
        print("bench_moe_gemm_torch: --iters must be >= 20, --warmup >= 0 and --warmup-ms in [0, 60000]",
              file=sys.stderr)
        return 2
    if not args.tokens or min(args.tokens) < 1:
        print("bench_moe_gemm_torch: --tokens needs values >= 1", file=sys.stderr)
        return 2
    models = [m for m in MODELS if not args.models or m[0] in args.models.split(",")]
    if not models:
        print("bench_moe_gemm_torch: --models matched none of the seven models", file=sys.stderr)
        return 2
    try:
        import torch
    except ImportError as e:
        print(f"bench_moe_gemm_torch: PyTorch not available ({e})", file=sys.stderr)
        return 3
    if not torch.cuda.is_available():
        print("bench_moe_gemm_torch: no CUDA device", file=sys.stderr)
        return 3

    dev = torch.device("cuda")
    props = torch.cuda.get_device_properties(dev)
    l2 = getattr(props, "L2_cache_size", 50 << 20)
    rotate = int(args.rotate_mib * (1 << 20)) if args.rotate_mib > 0 else 2 * l2
    torch.manual_seed(20261130)
    free_b, _ = torch.cuda.mem_get_info()
    backlog = torch.empty(min(2 << 30, free_b // 16), dtype=torch.uint8, device=dev)
    fp8 = torch.float8_e4m3fn

    print(f"# PyTorch {torch.__version__} torch._scaled_mm (cuBLASLt) on {props.name} "
          f"({props.multi_processor_count} SMs, L2 {l2 / 2**20:.0f} MiB), fp8 e4m3 -> bf16, median of {args.iters} "
          f"runs after {args.warmup} warm-up launches and {args.warmup_ms:.0f} ms of warm-up, inputs rotate over "
          f">= {rotate / 2**20:.0f} MiB")
    print(f"#{'model':>17} {'op':>8} {'tokens':>6} {'n':>6} {'k':>6} {'scaling':>24} {'time(us)':>10} "
          f"{'TFLOP/s':>9} {'best':>9} {'#wrong':>6}")
    results = []
    for name, hidden, inter, _experts in models:
        for op, n, k in (("l1", 2 * inter, hidden), ("l2", hidden, inter)):
            for m in args.tokens:
                set_bytes = m * k + n * k + 2 * m * n
                sets = max(1, -(-rotate // set_bytes))
                a = [torch.empty(m, k, device=dev).uniform_(-448, 448).to(fp8) for _ in range(sets)]
                # B as cuBLASLt wants it: (K, N) column-major = the [N, K] weight transposed.
                b = [torch.empty(n, k, device=dev).uniform_(-448, 448).to(fp8).t() for _ in range(sets)]
                rec = {"backend": "cublaslt", "model": name, "op": op, "hidden": hidden, "intermediate": inter,
                       "experts": 1, "tokens_per_expert": m, "m": m, "n": n, "k": k, "rotating_sets": sets,
                       "iters": args.iters}
                chosen, errors = None, []
                for sname, sa, sb in scale_variants(torch, m, n, k, dev):
                    if args.scaling != "auto" and not sname.startswith(args.scaling):
                        continue
                    try:
                        o = torch._scaled_mm(a[0], b[0], scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16)
                        torch.cuda.synchronize()
                        chosen = (sname, sa, sb)
                        break
                    except (RuntimeError, ValueError, TypeError) as e:
                        errors.append(f"{sname}: {str(e).splitlines()[0][:120]}")
                if chosen is None:
                    rec["error"] = "; ".join(errors)
                    results.append(rec)
                    print(f" {name:>17} {op:>8} {m:>6} {n:>6} {k:>6}   unsupported: {rec['error'][:100]}")
                    continue
                sname, sa, sb = chosen
                for w in range(args.warmup):
                    torch._scaled_mm(a[w % sets], b[w % sets], scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16)
                t_warm, w = time.monotonic(), 0
                while (time.monotonic() - t_warm) * 1e3 < args.warmup_ms:
                    for _ in range(16):
                        torch._scaled_mm(a[w % sets], b[w % sets], scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16)
                        w += 1
                    torch.cuda.synchronize()
                ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
                      for _ in range(args.iters)]
                backlog.zero_()
                out = None
                for it in range(args.iters):
                    ev[it][0].record()
                    out = torch._scaled_mm(a[it % sets], b[it % sets], scale_a=sa, scale_b=sb,
                                           out_dtype=torch.bfloat16)
                    ev[it][1].record()
                torch.cuda.synchronize()
                us = [x.elapsed_time(z) * 1e3 for x, z in ev]
                med = statistics.median(us)
                flops = 2.0 * m * n * k
                wrong = int((~torch.isfinite(out.float())).sum().item())
                rec.update({"scaling": sname, "median_us": med, "min_us": min(us), "max_us": max(us),
                            "p10_us": _quantile(us, 0.1), "p90_us": _quantile(us, 0.9),
                            "tflops": flops / (med * 1e-6) / 1e12, "tflops_best": flops / (min(us) * 1e-6) / 1e12,
                            "nonfinite": wrong})
                if errors:
                    rec["refused"] = errors
                results.append(rec)
                print(f" {name:>17} {op:>8} {m:>6} {n:>6} {k:>6} {sname:>24} {med:>10.1f} {rec['tflops']:>9.1f} "
                      f"{rec['tflops_best']:>9.1f} {wrong:>6}", flush=True)
                del a, b
                torch.cuda.empty_cache()

    if args.json:
        doc = {
            "schema": "xstage.bench.moe_gemm.v1",
            "tool": "torch._scaled_mm",
            "torch": torch.__version__,
            "cuda": torch.version.cuda,
            "device": props.name,
            "sm_count": props.multi_processor_count,
            "l2_bytes": l2,
            "commit": os.environ.get("XSTAGE_COMMIT", "unknown"),
            "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "config": {"warmup": args.warmup, "warmup_ms": args.warmup_ms, "iters": args.iters, "rotate_bytes": rotate, "scaling": args.scaling,
                       "shapes": "dense per expert: l1 = (tokens, 2*inter, hidden), l2 = (tokens, hidden, inter)",
                       "flops": "2*m*n*k"},
            "results": results,
        }
        with open(args.json, "w") as f:
            json.dump(doc, f, indent=2)
            f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
