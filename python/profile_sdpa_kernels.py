#!/usr/bin/env python3
"""Which GPU kernels PyTorch SDPA runs for given attention shapes, and how they are launched:
kernel name, grid, block, registers per thread, shared memory, median duration (torch.profiler's
CUDA activity records). For reading what a baseline does where it beats xstage (its tile from the
grid, its CTAs per SM from registers and shared memory), not for timing.

    python3 python/profile_sdpa_kernels.py --shapes 64:16:2048,64:8:2048:causal [--backends cudnn,flash]
        [--dtype bf16] [--json OUT.json]

A shape is D:H:S[:causal] (batch 1, BHSD tensors). Exit status: 0 done, 1 no CUDA device or a
backend failed on a shape (the line says which), 2 bad input.
"""
import argparse
import json
import os
import sys
import tempfile

BACKENDS = {"cudnn": "CUDNN_ATTENTION", "flash": "FLASH_ATTENTION", "efficient": "EFFICIENT_ATTENTION",
            "math": "MATH"}


def parse_shape(text):
    """D:H:S[:causal] -> (d, heads, seqlen, causal); ValueError with the reason."""
    parts = text.split(":")
    if len(parts) not in (3, 4) or (len(parts) == 4 and parts[3] != "causal"):
        raise ValueError(f"shape '{text}' is not D:H:S or D:H:S:causal")
    try:
        d, h, s = (int(p) for p in parts[:3])
    except ValueError:
        raise ValueError(f"shape '{text}': D, H and S must be whole numbers") from None
    if d not in (64, 128) or h < 1 or s < 1:
        raise ValueError(f"shape '{text}': head dim 64 or 128, heads and S >= 1")
    return d, h, s, len(parts) == 4


def kernel_records(trace_path):
    """[(name, args, dur_us)] of the CUDA kernels in a chrome trace torch.profiler exported."""
    with open(trace_path) as f:
        events = json.load(f).get("traceEvents", [])
    return [(e["name"], e.get("args", {}), float(e.get("dur", 0.0))) for e in events if e.get("cat") == "kernel"]


def summarize(records):
    """One dict per distinct kernel name: launch facts of its first record, median duration."""
    out = {}
    for name, args, dur in records:
        rec = out.setdefault(name, {"name": name, "grid": args.get("grid"), "block": args.get("block"),
                                    "registers_per_thread": args.get("registers per thread"),
                                    "shared_memory": args.get("shared memory"), "durations_us": []})
        rec["durations_us"].append(dur)
    for rec in out.values():
        d = sorted(rec.pop("durations_us"))
        rec["launches"], rec["median_us"] = len(d), d[len(d) // 2]
    return list(out.values())


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shapes", required=True, help="comma list of D:H:S[:causal]")
    ap.add_argument("--backends", default="cudnn,flash", help=f"comma list of {', '.join(BACKENDS)}")
    ap.add_argument("--dtype", choices=("bf16", "fp16"), default="bf16")
    ap.add_argument("--launches", type=int, default=5, help="profiled calls per shape and backend")
    ap.add_argument("--json", help="write the records here")
    a = ap.parse_args(argv)
    try:
        shapes = [parse_shape(t) for t in a.shapes.split(",") if t]
    except ValueError as e:
        print(f"profile_sdpa_kernels: {e}", file=sys.stderr)
        return 2
    backends = [b for b in a.backends.split(",") if b]
    bad = [b for b in backends if b not in BACKENDS]
    if bad or not backends or not shapes or a.launches < 1:
        print(f"profile_sdpa_kernels: backends from {', '.join(BACKENDS)}, at least one shape, --launches >= 1",
              file=sys.stderr)
        return 2
    import torch
    if not torch.cuda.is_available():
        print("profile_sdpa_kernels: no CUDA device (nothing to profile)", file=sys.stderr)
        return 1
    from torch.nn.attention import SDPBackend, sdpa_kernel
    import torch.nn.functional as F
    dtype = torch.bfloat16 if a.dtype == "bf16" else torch.float16
    out, rc = [], 0
    with tempfile.TemporaryDirectory() as tmp:
        for d, h, s, causal in shapes:
            q, k, v = (torch.randn(1, h, s, d, device="cuda", dtype=dtype) for _ in range(3))
            for b in backends:
                where = {"head_dim": d, "heads": h, "seqlen": s, "causal": causal, "backend": b, "dtype": a.dtype}
                try:
                    with sdpa_kernel(getattr(SDPBackend, BACKENDS[b])):
                        for _ in range(2):
                            F.scaled_dot_product_attention(q, k, v, is_causal=causal)
                        torch.cuda.synchronize()
                        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
                            for _ in range(a.launches):
                                F.scaled_dot_product_attention(q, k, v, is_causal=causal)
                            torch.cuda.synchronize()
                except RuntimeError as e:
                    print(f"profile_sdpa_kernels: {b} on d={d} H={h} S={s} causal={causal}: {str(e).splitlines()[0]}")
                    rc = 1
                    continue
                path = os.path.join(tmp, "trace.json")
                prof.export_chrome_trace(path)
                for rec in summarize(kernel_records(path)):
                    rec = {**where, **rec}
                    out.append(rec)
                    print(f"d={d} H={h} S={s}{' causal' if causal else ''} {b}: grid {rec['grid']} block {rec['block']} "
                          f"regs {rec['registers_per_thread']} smem {rec['shared_memory']} "
                          f"{rec['median_us']:.1f} us x{rec['launches']}  {rec['name'][:140]}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"tool": "profile_sdpa_kernels", "torch": torch.__version__, "records": out}, f, indent=1)
    return rc


if __name__ == "__main__":
    sys.exit(main())
