"""Timing of the xstage PyTorch ops against the C++ bench and torch SDPA (cuDNN), one process.

    python -m xstage.bench attention --json out.json [--cli build/xstage] [-S 1024,4096] [-H 12,24] [-d 64,128]
    python -m xstage.bench moe-gemm --cli build/xstage --json moe.json [--models DSv4-Flash] [-t 1024,8192]

The method of `xstage bench attention` (src/cli/cmd_bench_attention.cpp) and
python/bench_attention_torch.py: B = 1, BSHD tensors, warm-up, CUDA events around every launch,
median of >= 20 launches, inputs rotating over enough sets to exceed 2 x L2, and the GPU kept
busy (a spin kernel queued first) while the host enqueues the timed launches, so host overhead
does not enter a timing. Rows: xstage.attention through the torch op ("xstage-torch-op"), the
same call captured in a CUDA graph replayed per launch ("xstage-torch-graph"), and torch SDPA
with the cuDNN backend ("torch-cudnn"). With --cli, `xstage bench attention --json` runs first
with the same shapes and each row gets time / C++ time. Exit status: 0 ok, 2 bad input, 3 no
torch/CUDA/extension.
"""
from __future__ import annotations

import argparse
import importlib
import json
import os
import subprocess
import sys
import tempfile

from ._bench_util import MIN_ITERS, ints as _ints, record_error, rotate_bytes, sets_for, stamp, stats_us, \
    time_launches, visible_pairs


def _bad_counts(args, warmup=True):
    """Exit status 2 after saying why for --iters < MIN_ITERS (and, with warmup, --warmup < 0); else None."""
    if args.iters < MIN_ITERS:
        print(f"xstage.bench: --iters must be >= {MIN_ITERS}", file=sys.stderr)
        return 2
    if warmup and args.warmup < 0:
        print("xstage.bench: --warmup must be >= 0", file=sys.stderr)
        return 2
    return None


def _import(*names):
    """The modules `names`, imported in order, or None after printing the ImportError (exit 3)."""
    try:
        return [importlib.import_module(n) for n in names]
    except ImportError as e:
        print(f"xstage.bench: {e}", file=sys.stderr)
        return None


def _timed(torch, fn, sets, args):
    """us of args.iters launches fn(i % sets), each between CUDA events, after args.warmup untimed
    ones; the GPU is kept busy (a spin kernel, <= ~60 us of host time per launch at ~1.9 GHz)
    while the host enqueues them, so host overhead does not enter a timing."""
    for w in range(args.warmup):
        fn(w % sets)
    torch.cuda.synchronize()
    torch.cuda._sleep(int(args.iters * 60 * 1.9e3))
    return time_launches(torch, lambda i: fn(i % sets), args.iters)


def _write_json(path, doc):
    with open(path, "w") as f:
        json.dump(doc, f, indent=2)
        f.write("\n")


def _run_cli(cli, args, path):
    cmd = [cli, "bench", "attention", "--json", path, "--seqlens", ",".join(map(str, args.seqlens)),
           "--heads", ",".join(map(str, args.heads)), "--head-dims", ",".join(map(str, args.head_dims)),
           "--dtype", args.dtype, "--warmup", str(args.warmup), "--iters", str(args.iters)]
    if args.causal:
        cmd.append("--causal")
    print("# " + " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True)
    with open(path) as f:
        return {(r["seqlen"], r["heads"], r["head_dim"]): r for r in json.load(f)["results"] if "median_us" in r}


def bench_attention(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m xstage.bench attention", description=__doc__.split("\n")[0])
    ap.add_argument("--seqlens", "-S", type=_ints, default=_ints("1024,4096,4608,8192,16384,32768,65536"))
    ap.add_argument("--heads", "-H", type=_ints, default=_ints("12,24"))
    ap.add_argument("--head-dims", "-d", type=_ints, default=_ints("64,128"))
    ap.add_argument("--dtype", choices=["bf16", "fp16"], default="bf16")
    ap.add_argument("--causal", action="store_true")
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--iters", type=int, default=30)
    ap.add_argument("--rotate-mib", type=float, default=0.0, help="0: 2 x the device's L2")
    ap.add_argument("--no-graph", action="store_true", help="skip the CUDA-graph rows")
    ap.add_argument("--no-sdpa", action="store_true", help="skip torch cuDNN SDPA")
    ap.add_argument("--cli", help="the xstage binary: run its attention bench on the same shapes first")
    ap.add_argument("--json", help="write results here (schema xstage.bench.attention.v1)")
    args = ap.parse_args(argv)
    bad = _bad_counts(args)
    if bad is not None:
        return bad
    mods = _import("torch", "torch.nn.functional", "torch.nn.attention", "xstage")
    if mods is None:
        return 3
    torch, F, attn, xstage = mods
    if not torch.cuda.is_available():
        print("xstage.bench: no CUDA device", file=sys.stderr)
        return 3
    st = xstage.extension_status()
    if not st["available"] or not st["attention"]:
        print(f"xstage.bench: extension without attention ({st['reason']})", file=sys.stderr)
        return 3

    cli_rows = {}
    if args.cli:
        with tempfile.TemporaryDirectory() as d:
            cli_rows = _run_cli(args.cli, args, os.path.join(d, "cli.json"))

    dev = torch.device("cuda")
    props = torch.cuda.get_device_properties(dev)
    l2, rotate = rotate_bytes(torch, dev, args.rotate_mib)
    dtype = torch.bfloat16 if args.dtype == "bf16" else torch.float16
    torch.manual_seed(20261203)
    print(f"# xstage.bench attention on {props.name} ({props.multi_processor_count} SMs), torch {torch.__version__}, "
          f"{args.dtype}, BSHD, {'causal' if args.causal else 'non-causal'}, batch 1, median of {args.iters} after "
          f"{args.warmup} warm-up, inputs rotate over >= {rotate / 2**20:.0f} MiB")
    print(f"#{'backend':>19} {'seqlen':>7} {'heads':>5} {'d':>4} {'sets':>5} {'time(us)':>10} {'min(us)':>10} "
          f"{'TFLOP/s':>9} {'vs C++':>7}")

    results = []
    for d in args.head_dims:
        for h in args.heads:
            for s in args.seqlens:
                elems = s * h * d
                sets = sets_for(rotate, 4 * elems * 2)
                qkv = [[torch.empty(1, s, h, d, device=dev, dtype=dtype).uniform_(-1, 1) for _ in range(3)]
                       for _ in range(sets)]
                flops = 4.0 * h * d * visible_pairs(s, s, args.causal)
                cli = cli_rows.get((s, h, d))
                rows = []

                def op(i):
                    q, k, v = qkv[i]
                    return xstage.attention(q, k, v, causal=args.causal)
                rows.append(("xstage-torch-op", op))
                if not args.no_graph:
                    graphs = []
                    side = torch.cuda.Stream()
                    side.wait_stream(torch.cuda.current_stream())
                    with torch.cuda.stream(side):
                        for i in range(sets):
                            op(i)
                    torch.cuda.current_stream().wait_stream(side)
                    for i in range(sets):
                        g = torch.cuda.CUDAGraph()
                        with torch.cuda.graph(g):
                            op(i)
                        graphs.append(g)
                    rows.append(("xstage-torch-graph", lambda i: graphs[i].replay()))
                if not args.no_sdpa:
                    def sdpa(i):
                        q, k, v = qkv[i]
                        with attn.sdpa_kernel([attn.SDPBackend.CUDNN_ATTENTION]):
                            return F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2),
                                                                  v.transpose(1, 2), is_causal=args.causal)
                    rows.append(("torch-cudnn", sdpa))
                for name, fn in rows:
                    rec = {"backend": name, "batch": 1, "seqlen": s, "heads": h, "head_dim": d, "dtype": args.dtype,
                           "causal": args.causal, "rotating_sets": sets, "iters": args.iters}
                    try:
                        us = _timed(torch, fn, sets, args)
                    except RuntimeError as e:
                        err = record_error(results, rec, e)
                        print(f" {name:>19} {s:>7} {h:>5} {d:>4} {sets:>5}   error: {err[:80]}")
                        continue
                    rec.update(stats_us(us))
                    med = rec["median_us"]
                    rec["tflops"] = flops / (med * 1e-6) / 1e12
                    ratio = ""
                    if cli:
                        rec["cli_median_us"] = cli["median_us"]
                        rec["vs_cli"] = med / cli["median_us"]
                        ratio = f"{rec['vs_cli']:.3f}"
                    results.append(rec)
                    print(f" {name:>19} {s:>7} {h:>5} {d:>4} {sets:>5} {med:>10.1f} {min(us):>10.1f} "
                          f"{rec['tflops']:>9.1f} {ratio:>7}", flush=True)
                if cli:
                    print(f" {'xstage (C++ bench)':>19} {s:>7} {h:>5} {d:>4} {cli['rotating_sets']:>5} "
                          f"{cli['median_us']:>10.1f} {cli['min_us']:>10.1f} {cli['tflops']:>9.1f}   1.000", flush=True)
                del qkv, rows
                torch.cuda.empty_cache()

    if args.json:
        _write_json(args.json, {
            "schema": "xstage.bench.attention.v1",
            "tool": "xstage.bench (python)",
            "torch": torch.__version__,
            "device": props.name,
            "sm_count": props.multi_processor_count,
            "l2_bytes": l2,
            **stamp(),
            "config": {"batch": 1, "dtype": args.dtype, "causal": args.causal, "layout": "BSHD",
                       "warmup": args.warmup, "iters": args.iters, "rotate_bytes": rotate,
                       "cli": args.cli, "flops": "4*B*H*Sq*Skv*d (visible pairs if causal)"},
            "cli_results": list(cli_rows.values()),
            "results": results,
        })
    return 0


def bench_moe_gemm(argv=None) -> int:
    """W8A8 grouped GEMMs through torch.ops.xstage.moe_grouped_gemm on the shapes of
    `xstage bench moe-gemm` (which runs first, --cli required), timed the same way."""
    ap = argparse.ArgumentParser(prog="python -m xstage.bench moe-gemm",
                                 description="xstage.moe.grouped_gemm vs `xstage bench moe-gemm` (W8A8)")
    ap.add_argument("--cli", required=True, help="the xstage binary (its bench defines the shapes)")
    ap.add_argument("--models", default="", help="comma list (default: the C++ bench's seven)")
    ap.add_argument("--tokens", "-t", default="1024,8192", help="tokens per expert")
    ap.add_argument("--ops", default="l1_swiglu,l1_bf16,l2_bf16")
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--iters", type=int, default=30)
    ap.add_argument("--json", help="write results here")
    args = ap.parse_args(argv)
    bad = _bad_counts(args, warmup=False)
    if bad is not None:
        return bad
    mods = _import("torch", "xstage", "xstage.moe")
    if mods is None:
        return 3
    torch, xstage, moe = mods
    if not torch.cuda.is_available() or not xstage.extension_status()["moe"]:
        print("xstage.bench: needs a CUDA device and the extension with the MoE kernels", file=sys.stderr)
        return 3
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "moe.json")
        cmd = [args.cli, "bench", "moe-gemm", "--json", path, "--tokens", args.tokens, "--ops", args.ops,
               "--weights", "w8a8", "--warmup", str(args.warmup), "--iters", str(args.iters)]
        if args.models:
            cmd += ["--models", args.models]
        print("# " + " ".join(cmd), flush=True)
        subprocess.run(cmd, check=True)
        with open(path) as f:
            cli_doc = json.load(f)
    rows = [r for r in cli_doc["results"] if "median_us" in r and r.get("weights", "w8a8") == "w8a8"]
    dev = torch.device("cuda")
    props = torch.cuda.get_device_properties(dev)
    rotate = rotate_bytes(torch, dev, 0)[1]
    print(f"# xstage.bench moe-gemm on {props.name}: torch op vs the C++ bench, median of {args.iters}")
    print(f"#{'model':>18} {'op':>10} {'tokens':>6} {'E':>4} {'n':>6} {'k':>6} {'sets':>4} {'time(us)':>10} "
          f"{'TFLOP/s':>9} {'C++ TFLOP/s':>11} {'ratio':>6}")
    results = []
    for r in rows:
        E, tokens, n, k, m = r["experts"], r["tokens_per_expert"], r["n"], r["k"], r["m"]
        epilogue = "swiglu" if r["op"] == "l1_swiglu" else "bf16"
        set_bytes = E * n * k + m * k
        sets = sets_for(rotate, set_bytes)
        data = []
        for _ in range(sets):
            b = (torch.randn(E, n, k, device=dev) * 0.05).to(torch.float8_e4m3fn).view(torch.uint8)
            bs = torch.rand(E, n // 128, k // 128, device=dev) * 0.01 + 1e-3
            a, a_s = moe.quantize_activations(torch.randn(m, k, device=dev))
            data.append((a, a_s, moe.PackedWeights("w8a8", E, n, k, b, bs)))
        counts = torch.full((E,), tokens, dtype=torch.int32, device=dev)
        offsets = (torch.arange(E, dtype=torch.int32, device=dev) * tokens).contiguous()
        rw = torch.rand(m, device=dev)

        def call(i):
            a, a_s, w = data[i]
            return moe.grouped_gemm(a, a_s, w, counts, offsets, epilogue=epilogue,
                                    row_weights=rw if epilogue == "swiglu" else None, tokens_per_expert_hint=tokens)
        us = _timed(torch, call, sets, args)
        med = stats_us(us)["median_us"]
        tflops = 2.0 * E * tokens * n * k / (med * 1e-6) / 1e12
        rec = {"backend": "xstage-torch-op", "model": r["model"], "op": r["op"], "weights": "w8a8", "experts": E,
               "tokens_per_expert": tokens, "m": m, "n": n, "k": k, "rotating_sets": sets, "median_us": med,
               "min_us": min(us), "max_us": max(us), "tflops": tflops, "cli_median_us": r["median_us"],
               "cli_tflops": r["tflops"], "vs_cli_tflops": tflops / r["tflops"], "cli_instantiation": r.get("instantiation")}
        results.append(rec)
        print(f" {r['model']:>18} {r['op']:>10} {tokens:>6} {E:>4} {n:>6} {k:>6} {sets:>4} {med:>10.1f} {tflops:>9.1f} "
              f"{r['tflops']:>11.1f} {rec['vs_cli_tflops']:>6.3f}", flush=True)
        del data
        torch.cuda.empty_cache()
    if args.json:
        _write_json(args.json, {"schema": "xstage.bench.moe_gemm.v1", "tool": "xstage.bench (python)",
                                "torch": torch.__version__, "device": props.name, **stamp(),
                                "config": {"warmup": args.warmup, "iters": args.iters, "tokens": args.tokens,
                                           "ops": args.ops, "flops": "2*experts*tokens*n*k"},
                                "cli_results": cli_doc["results"], "results": results})
    return 0


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print("usage: python -m xstage.bench {attention,moe-gemm} [options]   (NAME --help for the options)")
        return 0 if argv else 2
    if argv[0] == "attention":
        return bench_attention(argv[1:])
    if argv[0] == "moe-gemm":
        return bench_moe_gemm(argv[1:])
    print(f"xstage.bench: unknown benchmark '{argv[0]}' (attention, moe-gemm)", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
