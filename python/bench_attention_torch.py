#!/usr/bin/env python3
"""PyTorch SDPA baselines for `xstage bench attention`, measured the same way.

    python3 python/bench_attention_torch.py --json torch.json [--backends cudnn,flash,fa4] [--causal]

Same shapes (B=1, S in {1024 .. 65536}, heads {12, 24}, d {64, 128}), same layout (BSHD
memory, handed to SDPA as the (B, H, S, D) view it expects), same timing: CUDA events
around every launch, warm-up first, median of >= 20 launches, inputs rotating over enough
buffer sets to exceed 2 x L2, a 4 GiB memset and a GPU busy-wait of 1.5x the backend's measured
host enqueue time per launch ("host_us" in the result) queued before the timed launches, so the
GPU is busy while the host enqueues them (flash-attn-4's Python call path costs more per call
than SDPA's). TFLOP/s = 4*B*H*S^2*d / t (visible pairs only when causal; causal is top-left
aligned in both); with --q-len Q the queries are Q and the keys S (4*B*H*Q*S*d), as with xstage's
--q-len. Writes JSON in the shape `xstage bench attention --json` writes (schema
xstage.bench.attention.v1, one result per backend and shape), so python/compare_attention.py can
merge them. A backend that refuses a shape is recorded with
its error instead of a time. Every timed cell is checked (xsbench.verify): one more call, on
outputs poisoned with NaN, is compared on --check-rows seeded query rows (over batch, heads
and sequence) against an fp32 softmax(q k^T / sqrt(d)) v reference, with a full finiteness
scan; the cell's "correctness" record is what python/compare_attention.py gates on.
Backend fa4 is FlashAttention-4's own kernel (flash-attn-4 from PyPI: flash_attn.cute.flash_attn_func
on the BSHD tensors, its sm90 forward on Hopper; xsbench.fa4 finds the folder scripts/fa4-install
unpacks), timed and checked like the SDPA backends; one untimed call before the warm-up compiles
its kernel (CuTe DSL JIT). Where it cannot be imported it is skipped with a one-line reason (a
"# fa4 skipped: ..." line, "skipped" in the JSON config, the "fa4" object of the document); the
document's "fa4" object records its version where it ran.
Exit status: 0 ok, 1 a cell failed its correctness check, 2 bad input, 3 torch/CUDA missing.
"""
import argparse
import contextlib
import sys

from xsbench import fa4 as fa4_pkg
from xsbench import timing, verify
from xsbench.results import write_json

REL_TOL = 0.02  # per-row relative L2 error of the bf16/fp16 output against the fp32 reference
SDPA_BACKENDS = ("cudnn", "flash", "efficient", "math")
BACKENDS = SDPA_BACKENDS + ("fa4",)


def fa4_backend(backends, site=None):
    """(flash_attn_func or None, the document's "fa4" object or None, {backend: skip reason}):
    flash-attn-4 loaded when `backends` names fa4 (xsbench.fa4.load), else nothing."""
    if "fa4" not in backends:
        return None, None, {}
    func, info, reason = fa4_pkg.load(site)
    return func, info, ({"fa4": reason} if func is None else {})


def result_name(b):
    """The "backend" field of a result: torch-<b> for SDPA, fa4 for flash-attn-4."""
    return b if b == "fa4" else f"torch-{b}"


def check_cell(torch, call, idx, q, k, v, causal, rows, seed):
    """The correctness record of call(idx) = SDPA(q, k, v) ([B, H, S, D] views): one call on
    poisoned outputs, `rows` seeded query rows against the fp32 reference, a finiteness scan."""
    B, H, S, D = q.shape
    verify.poison_free_blocks(torch, (B, H, S, D), q.dtype, q.device)
    out = call(idx)
    torch.cuda.synchronize()
    return verify.attention_rows(torch, out, q, k, v, causal, rows, seed, REL_TOL)


def document(args, machine, rotate, backends, skipped, fa4_info, results):
    """The JSON document (schema xstage.bench.attention.v1): `machine` holds the fields of where
    and when it ran (torch, cudnn, device, ...); config.skipped {backend: one-line reason} names
    the backends that did not run, and "fa4" (when fa4 was asked for) is xsbench.fa4.load()'s
    record: available, version, cutlass_dsl, site, entry, reason."""
    doc = {
        "schema": "xstage.bench.attention.v1",
        "tool": "torch-sdpa",
        **machine,
        "config": {"batch": args.batch, "dtype": args.dtype, "causal": args.causal, "layout": args.layout.upper(),
                   "warmup": args.warmup, "iters": args.iters, "rotate_bytes": rotate,
                   "check_rows": args.check_rows, "rel_tol": REL_TOL, "q_len": args.q_len,
                   "backends": backends, "skipped": skipped,
                   "flops": "4*B*H*Sq*Skv*d (visible pairs if causal)"},
        "results": results,
    }
    if fa4_info is not None:
        doc["fa4"] = fa4_info
    return doc


def parser():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seqlens", type=timing.ints, default=timing.ints("1024,4096,4608,8192,16384,32768,65536"))
    ap.add_argument("--heads", type=timing.ints, default=timing.ints("12,24"))
    ap.add_argument("--head-dims", type=timing.ints, default=timing.ints("64,128"))
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--q-len", type=int, default=0, help="queries per cell (kv_len = S); 0: q_len = S")
    ap.add_argument("--dtype", choices=["bf16", "fp16"], default="bf16")
    ap.add_argument("--causal", action="store_true")
    ap.add_argument("--backends", default="cudnn,flash",
                    help="comma list of cudnn, flash, efficient, math (PyTorch SDPA) and fa4 (flash-attn-4)")
    ap.add_argument("--fa4-site", help=f"unpacked flash-attn-4 bundle (default ${fa4_pkg.SITE_ENV}, else "
                    f"{fa4_pkg.DEFAULT_SITE}: scripts/fa4-install)")
    timing.add_timing_args(ap)   # --warmup, --iters, --rotate-mib (no --warmup-ms here)
    ap.add_argument("--layout", choices=["bshd", "bhsd"], default="bshd",
                    help="memory layout of q, k, v (bshd = xstage's; bhsd = contiguous (B, H, S, D))")
    ap.add_argument("--check-rows", type=int, default=256, help="query rows per cell checked against fp32")
    ap.add_argument("--json", help="write results here")
    return ap


def main(argv=None):
    args = parser().parse_args(argv)
    if args.iters < timing.MIN_ITERS:
        print(f"bench_attention_torch: --iters must be >= {timing.MIN_ITERS}", file=sys.stderr)
        return 2
    if args.check_rows < 2:
        print("bench_attention_torch: --check-rows must be >= 2", file=sys.stderr)
        return 2
    if args.batch < 1 or args.warmup < 0 or args.q_len < 0:
        print("bench_attention_torch: --batch must be >= 1, --warmup >= 0 and --q-len >= 0", file=sys.stderr)
        return 2
    backends = [b for b in args.backends.split(",") if b]
    for b in backends:
        if b not in BACKENDS:
            print(f"bench_attention_torch: unknown backend {b!r} ({', '.join(BACKENDS)})", file=sys.stderr)
            return 2

    torch = timing.import_torch("bench_attention_torch")
    if torch is None:
        return 3
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    names = {
        "cudnn": SDPBackend.CUDNN_ATTENTION,
        "flash": SDPBackend.FLASH_ATTENTION,
        "efficient": SDPBackend.EFFICIENT_ATTENTION,
        "math": SDPBackend.MATH,
    }
    fa4_func, fa4_info, skipped = fa4_backend(backends, args.fa4_site)
    for b, why in skipped.items():
        print(f"# {b} skipped: {why}", flush=True)
    run_backends = [b for b in backends if b not in skipped]

    dev = torch.device("cuda")
    props = torch.cuda.get_device_properties(dev)
    l2, rotate = timing.rotate_bytes(torch, dev, args.rotate_mib)
    torch.backends.cuda.matmul.allow_tf32 = False  # the fp32 reference stays fp32
    dtype = torch.bfloat16 if args.dtype == "bf16" else torch.float16
    torch.manual_seed(20261130)
    free_b, _ = torch.cuda.mem_get_info()
    backlog = torch.empty(min(4 << 30, free_b // 8), dtype=torch.uint8, device=dev)
    sleep_cycles = timing.sleep_rate(torch)   # GPU cover sized to a backend's host cost (below)

    print(f"# PyTorch {torch.__version__} SDPA on {props.name} ({props.multi_processor_count} SMs, "
          f"L2 {l2 / 2**20:.0f} MiB), {args.dtype}, {args.layout.upper()}, "
          f"{'causal' if args.causal else 'non-causal'}, batch {args.batch}, "
          f"median of {args.iters} runs after {args.warmup} warm-up, inputs rotate over >= {rotate / 2**20:.0f} MiB")
    if fa4_func is not None:
        print(f"# fa4: flash-attn-4 {fa4_info['version']} (nvidia-cutlass-dsl {fa4_info['cutlass_dsl']}), "
              f"{fa4_pkg.ENTRY} on BSHD tensors, from {fa4_info['module']}")
    print(f"#{'backend':>8} {'seqlen':>7} {'heads':>5} {'d':>4} {'sets':>5} {'time(us)':>10} {'min(us)':>10} "
          f"{'max(us)':>10} {'TFLOP/s':>9} {'best':>9}{verify.CHECK_HEADER}")
    results, failed = [], 0
    for d in args.head_dims:
        for h in args.heads:
            for s in args.seqlens:
                sq = args.q_len or s
                set_bytes = 2 * args.batch * h * d * (2 * sq + 2 * s)  # q and o, k and v, 16-bit
                sets = timing.sets_for(rotate, set_bytes)
                # BSHD memory, (B, H, S, D) views: the layout xstage reads.
                def make(n):
                    if args.layout == "bshd":
                        return torch.empty(args.batch, n, h, d, device=dev, dtype=dtype).uniform_(-1, 1).transpose(1, 2)
                    return torch.empty(args.batch, h, n, d, device=dev, dtype=dtype).uniform_(-1, 1)
                qkv = [[make(sq), make(s), make(s)] for _ in range(sets)]
                flops = 4.0 * args.batch * h * d * timing.visible_pairs(sq, s, args.causal)
                for b in run_backends:
                    rec = {"backend": result_name(b), "batch": args.batch, "seqlen": s, "q_len": sq, "heads": h,
                           "head_dim": d, "dtype": args.dtype, "causal": args.causal, "rotating_sets": sets, "iters": args.iters}
                    def call(i, qkv=qkv):
                        q, k, v = qkv[i % len(qkv)]
                        return F.scaled_dot_product_attention(q, k, v, is_causal=args.causal)

                    def call_fa4(i, qkv=qkv):  # BSHD in, BSHD out, returned as the (B, H, S, D) view
                        q, k, v = qkv[i % len(qkv)]
                        out = fa4_func(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), causal=args.causal)
                        return (out[0] if isinstance(out, tuple) else out).transpose(1, 2)
                    if b == "fa4":
                        call = call_fa4
                    try:
                        with (sdpa_kernel([names[b]]) if b in names else contextlib.nullcontext()):
                            if b == "fa4":
                                call(0)  # JIT compile (CuTe DSL) outside the warm-up and the timing
                            # GPU busy while the host enqueues: no launch overhead inside a timing
                            # (flash-attn-4's Python call path, and SDPA's at short shapes, cost the host
                            # more than the kernel takes).
                            host_us = timing.cover_launches(torch, call, sleep_cycles, args.warmup + args.iters, backlog)
                            if host_us is not None:
                                rec["host_us"] = host_us
                            us = timing.time_launches(torch, call, args.iters, warmup=args.warmup)
                            try:
                                idx = (args.warmup + args.iters - 1) % sets
                                rec["correctness"] = check_cell(torch, call, idx, *qkv[idx], args.causal,
                                                                args.check_rows, seed=s * 31 + h * 7 + d)
                            except RuntimeError as e:  # the reference ran out of memory: a failed check
                                rec["correctness"] = verify.failed_record(str(e).split("\n")[0], REL_TOL, "")
                    except (Exception if b == "fa4" else RuntimeError) as e:  # noqa: BLE001 - fa4 refuses with asserts
                        err = timing.record_error(results, rec, e)
                        print(f" {b:>8} {s:>7} {h:>5} {d:>4} {sets:>5}   unsupported: {err[:80]}")
                        continue
                    st = timing.stats_us(us)
                    c = rec["correctness"]
                    rec.update({**st, "tflops": flops / (st["median_us"] * 1e-6) / 1e12,
                                "tflops_best": flops / (st["min_us"] * 1e-6) / 1e12, "nonfinite": c["nonfinite"]})
                    failed += not c["passed"]
                    results.append(rec)
                    print(f" {b:>8} {s:>7} {h:>5} {d:>4} {sets:>5} {st['median_us']:>10.1f} {st['min_us']:>10.1f} "
                          f"{st['max_us']:>10.1f} {rec['tflops']:>9.1f} {rec['tflops_best']:>9.1f}{verify.check_columns(c)}",
                          flush=True)
                del qkv
                torch.cuda.empty_cache()

    if args.json:
        machine = {"cudnn": torch.backends.cudnn.version(), **timing.run_fields(torch, props, l2)}
        write_json(args.json, document(args, machine, rotate, backends, skipped, fa4_info, results))
    return verify.finish("bench_attention_torch", failed)


if __name__ == "__main__":
    sys.exit(main())
