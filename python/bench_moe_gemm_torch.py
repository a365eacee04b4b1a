#!/usr/bin/env python3
"""cuBLASLt FP8 baselines (torch._scaled_mm) for `xstage bench moe-gemm`, measured the same way.

    python3 python/bench_moe_gemm_torch.py --json torch.json [--grouped-json grouped.json]
                                           [--tokens 16,128,1024,8192] [--scaling auto]

For every model of docs/MOE.md (shared) and every tokens-per-expert value, the dense GEMM of
one expert: Linear-1 (M = tokens, N = 2 x intermediate, K = hidden) and Linear-2 (M = tokens,
N = hidden, K = intermediate), FP8 e4m3 inputs, bf16 output, through torch._scaled_mm
(cuBLASLt). Scaling: `auto` tries DeepSeek-style blockwise scales first (A 1x128, B 128x128,
what xstage uses; cuBLASLt supports them on sm_90 from CUDA 12.9 and torch exposes them in
recent releases), then per-row/per-column scales, then one scale per tensor; the JSON records
which one ran. Timing: CUDA events around every launch, warm-up (a few launches, then --warmup-ms
of sustained launches so the clock is the power-capped one), median of >= 20 launches,
inputs rotating over enough buffer sets to exceed 2 x L2, a large memset and a GPU busy-wait
sized to 1.5x the measured host time per launch ("host_us") queued first so the GPU is busy
while the host enqueues. TFLOP/s = 2*M*N*K / t. Every cell is checked
(xsbench.verify): after the timed launches one more launch, on outputs poisoned with NaN, is
compared row by row against an fp32 reference (A and B dequantised with the same scales) on
--check-rows seeded rows (all rows if fewer), with a full finiteness scan; the cell's
"correctness" record is what python/compare_moe_gemm.py gates on. Writes schema
xstage.bench.moe_gemm.v1 (backend "cublaslt"), which python/compare_moe_gemm.py merges with
xstage's. The dense GEMM of one expert is a per-expert ceiling, not a like-for-like baseline: at
16-1024 tokens it cannot fill the GPU. With --grouped-json the like-for-like one is measured too:
torch._scaled_grouped_mm (CUTLASS on sm_90; per-token A scales and per-channel B scales, the
finest scaling it offers there) on the same expert count `xstage bench moe-gemm` runs
(bench_experts below mirrors src/cli/cmd_bench_moe_gemm.cpp) with the same tokens per expert,
checked the same way (backend "torch_scaled_grouped_mm"). Exit status: 0 ok, 1 a cell failed its correctness check, 2 bad input, 3 torch/CUDA
missing.
"""
import argparse
import math
import sys

from xsbench import moe_models, timing, verify
from xsbench.results import write_json

MODELS = moe_models.rows("name", "hidden", "intermediate", "experts")  # bench/moe-models.json


REL_TOL = 0.02  # per-row relative L2 error of the bf16 output against the fp32 reference


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


def check_cell(torch, mm, idx, a, b, sa, sb, rows, seed):
    """The correctness record of mm(idx) = a @ b with scales sa, sb: one launch on poisoned
    outputs, `rows` seeded rows against the fp32 reference, a finiteness scan of all."""
    m, n = a.shape[0], b.shape[1]
    verify.poison_free_blocks(torch, (m, n), torch.bfloat16, a.device)
    out = mm(idx)
    torch.cuda.synchronize()
    pick = torch.tensor(verify.sample_rows(m, rows, seed), device=a.device)
    sa_rows = sa.index_select(0, pick) if sa.dim() == 2 and sa.shape[0] == m else sa
    ref = verify.dequant(torch, a.float().index_select(0, pick), sa_rows) @ verify.dequant(torch, b, sb)
    return verify.check(torch, out.index_select(0, pick), ref, out, REL_TOL,
                        "fp32: A and B dequantised with the same scales, A rows seeded")


def timed(torch, mm, args, backlog, flops):
    """Warm-up (args.warmup launches, then args.warmup_ms of sustained launches, so the timed
    ones see the power-capped clock), a large memset and a GPU busy-wait of 1.5x the measured
    host time of the timed launches queued first (so no timed launch waits for the host), then
    the median of args.iters launches: the stats, TFLOP/s and host_us fields of a record."""
    for w in range(args.warmup):
        mm(w)
    timing.sustain(torch, mm, args.warmup_ms)
    host_us = timing.cover_launches(torch, mm, args.sleep_cycles, args.iters, backlog)
    st = timing.stats_us(timing.time_launches(torch, mm, args.iters))
    rec = {**st, "tflops": flops / (st["median_us"] * 1e-6) / 1e12,
           "tflops_best": flops / (st["min_us"] * 1e-6) / 1e12}
    if host_us is not None:
        rec["host_us"] = host_us
    return rec


def bench_experts(hidden, inter, experts, tokens, weight_bytes=256 * 2**20):
    """The experts `xstage bench moe-gemm` runs for a model and token count (its bench_experts,
    src/cli/cmd_bench_moe_gemm.cpp): enough that the weights exceed 256 MiB, at most the
    model's count, activations under 4 GiB. compare_moe_gemm.py checks the two agree."""
    e = max(1, min(math.ceil(weight_bytes / (3.0 * inter * hidden)), experts))
    act = tokens * (hidden + 2.0 * inter) * 2
    while e > 1 and e * act > 4.0 * 2**30:
        e -= 1
    return e


def check_grouped(torch, mm, idx, a, b, sa, sb, tokens, rows, seed):
    """The correctness record of the grouped mm(idx): one launch on poisoned outputs, `rows`
    seeded rows (expert = row // tokens) against fp32 A*sa @ B_e*sb_e, a finiteness scan."""
    m, n = a.shape[0], b.shape[2]
    verify.poison_free_blocks(torch, (m, n), torch.bfloat16, a.device)
    out = mm(idx)
    torch.cuda.synchronize()
    pick = verify.sample_rows(m, rows, seed)
    ref = torch.empty(len(pick), n, device=a.device)
    by_expert = {}
    for j, r in enumerate(pick):
        by_expert.setdefault(r // tokens, []).append(j)
    for e, js in by_expert.items():
        rr = torch.tensor([pick[j] for j in js], device=a.device)
        lhs = a.index_select(0, rr).float() * sa.index_select(0, rr)[:, None]
        ref[torch.tensor(js, device=a.device)] = lhs @ (b[e].float() * sb[e][None, :])
    got = out.index_select(0, torch.tensor(pick, device=a.device))
    return verify.check(torch, got, ref, out, REL_TOL,
                        "fp32: A per token and B per expert channel dequantised, A rows seeded")


def grouped_cell(torch, args, dev, rotate, backlog, name, hidden, inter, experts, op, n, k, tokens):
    """One grouped cell: its record, or a record with "error" if torch refuses the shapes."""
    fp8, f32 = torch.float8_e4m3fn, torch.float32
    E = bench_experts(hidden, inter, experts, tokens)
    m = E * tokens
    sets = timing.sets_for(rotate, m * k + E * n * k + 2 * m * n)
    rec = {"backend": "torch_scaled_grouped_mm", "model": name, "op": op, "hidden": hidden, "intermediate": inter,
           "experts": E, "tokens_per_expert": tokens, "m": m, "n": n, "k": k, "rotating_sets": sets,
           "iters": args.iters, "scaling": "rowwise (A per token, B per expert channel)"}
    a = [torch.empty(m, k, device=dev).uniform_(-448, 448).to(fp8) for _ in range(sets)]
    # B as CUTLASS wants it: [E, K, N] with K contiguous = the [E, N, K] weights transposed.
    b = [torch.empty(E, n, k, device=dev).uniform_(-448, 448).to(fp8).transpose(-2, -1) for _ in range(sets)]
    sa = torch.rand(m, device=dev, dtype=f32).add_(0.5).div_(448)
    sb = torch.rand(E, n, device=dev, dtype=f32).add_(0.5).div_(448)
    offs = torch.arange(tokens, m + 1, tokens, device=dev, dtype=torch.int32)

    def mm(i):
        return torch._scaled_grouped_mm(a[i % sets], b[i % sets], sa, sb, offs=offs, out_dtype=torch.bfloat16)
    try:
        mm(0)
        torch.cuda.synchronize()
    except (RuntimeError, ValueError, TypeError) as e:
        rec["error"] = str(e).splitlines()[0][:200]
        return rec
    rec.update(timed(torch, mm, args, backlog, 2.0 * m * n * k))
    rec["correctness"] = check_grouped(torch, mm, sets - 1, a[-1], b[-1], sa, sb, tokens, args.check_rows,
                                       seed=m * 131 + n * 7 + k)
    rec["nonfinite"] = rec["correctness"]["nonfinite"]
    return rec


def run_grouped(torch, args, models, dev, props, l2, rotate, backlog):
    """The grouped baseline over every model, Linear and token count; (doc, failed cells)."""
    print(f"# torch._scaled_grouped_mm (CUTLASS) on {props.name}: E experts x tokens, the expert count of "
          f"xstage bench moe-gemm")
    print(f"#{'model':>17} {'op':>8} {'tokens':>6} {'E':>4} {'n':>6} {'k':>6} {'time(us)':>10} "
          f"{'TFLOP/s':>9} {'best':>9}{verify.CHECK_HEADER}")
    results, failed = [], 0
    for name, hidden, inter, experts in models:
        for op, n, k in (("l1", 2 * inter, hidden), ("l2", hidden, inter)):
            for t in args.tokens:
                rec = grouped_cell(torch, args, dev, rotate, backlog, name, hidden, inter, experts, op, n, k, t)
                results.append(rec)
                if "error" in rec:
                    print(f" {name:>17} {op:>8} {t:>6} {rec['experts']:>4} {n:>6} {k:>6}   unsupported: "
                          f"{rec['error'][:100]}")
                else:
                    failed += not rec["correctness"]["passed"]
                    print(f" {name:>17} {op:>8} {t:>6} {rec['experts']:>4} {n:>6} {k:>6} {rec['median_us']:>10.1f} "
                          f"{rec['tflops']:>9.1f} {rec['tflops_best']:>9.1f}{verify.check_columns(rec['correctness'])}",
                          flush=True)
                torch.cuda.empty_cache()
    doc = {"schema": "xstage.bench.moe_gemm.v1", "tool": "torch._scaled_grouped_mm",
           **timing.run_fields(torch, props, l2),
           "config": {"warmup": args.warmup, "warmup_ms": args.warmup_ms, "iters": args.iters, "rotate_bytes": rotate,
                      "check_rows": args.check_rows, "rel_tol": REL_TOL,
                      "shapes": "grouped: E experts x tokens rows; l1 = (2*inter, hidden), l2 = (hidden, inter)",
                      "flops": "2*E*tokens*n*k"},
           "results": results}
    return doc, failed


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tokens", type=timing.ints, default=timing.ints("16,128,1024,8192"))
    ap.add_argument("--models", default="", help="comma list of model names (default: all seven)")
    ap.add_argument("--scaling", choices=["auto", "blockwise", "rowwise", "tensorwise"], default="auto")
    timing.add_timing_args(ap, warmup_ms_default=200.0,
                           warmup_ms_help="then untimed launches until this many ms have passed, so the timed runs "
                                          "see the sustained (power-capped) clock, as xstage bench moe-gemm does "
                                          "(0: off)")
    ap.add_argument("--check-rows", type=int, default=256, help="rows per cell checked against the fp32 reference")
    ap.add_argument("--json", help="write results here")
    ap.add_argument("--grouped-json", help="also measure torch._scaled_grouped_mm on xstage's expert counts; write here")
    ap.add_argument("--no-dense", action="store_true", help="skip the dense per-expert cells (with --grouped-json)")
    args = ap.parse_args(argv)
    if args.iters < timing.MIN_ITERS or args.warmup < 0 or not 0 <= args.warmup_ms <= 60000:
        print("bench_moe_gemm_torch: --iters must be >= 20, --warmup >= 0 and --warmup-ms in [0, 60000]",
              file=sys.stderr)
        return 2
    if args.no_dense and not args.grouped_json:
        print("bench_moe_gemm_torch: --no-dense needs --grouped-json (nothing to measure)", file=sys.stderr)
        return 2
    if args.check_rows < 2:
        print("bench_moe_gemm_torch: --check-rows must be >= 2", file=sys.stderr)
        return 2
    if not args.tokens or min(args.tokens) < 1:
        print("bench_moe_gemm_torch: --tokens needs values >= 1", file=sys.stderr)
        return 2
    models = [m for m in MODELS if not args.models or m[0] in args.models.split(",")]
    if not models:
        print("bench_moe_gemm_torch: --models matched none of the seven models", file=sys.stderr)
        return 2
    torch = timing.import_torch("bench_moe_gemm_torch")
    if torch is None:
        return 3

    dev = torch.device("cuda")
    props = torch.cuda.get_device_properties(dev)
    l2, rotate = timing.rotate_bytes(torch, dev, args.rotate_mib)
    torch.backends.cuda.matmul.allow_tf32 = False  # the fp32 reference stays fp32
    torch.manual_seed(20261130)
    free_b, _ = torch.cuda.mem_get_info()
    backlog = torch.empty(min(2 << 30, free_b // 16), dtype=torch.uint8, device=dev)
    args.sleep_cycles = timing.sleep_rate(torch)   # the GPU cover's calibration, read by timed()
    fp8 = torch.float8_e4m3fn

    print(f"# PyTorch {torch.__version__} torch._scaled_mm (cuBLASLt) on {props.name} "
          f"({props.multi_processor_count} SMs, L2 {l2 / 2**20:.0f} MiB), fp8 e4m3 -> bf16, median of {args.iters} "
          f"runs after {args.warmup} warm-up launches and {args.warmup_ms:.0f} ms of warm-up, inputs rotate over "
          f">= {rotate / 2**20:.0f} MiB")
    print(f"#{'model':>17} {'op':>8} {'tokens':>6} {'n':>6} {'k':>6} {'scaling':>24} {'time(us)':>10} "
          f"{'TFLOP/s':>9} {'best':>9}{verify.CHECK_HEADER}")
    results, failed = [], 0
    for name, hidden, inter, _experts in ([] if args.no_dense else models):
        for op, n, k in (("l1", 2 * inter, hidden), ("l2", hidden, inter)):
            for m in args.tokens:
                set_bytes = m * k + n * k + 2 * m * n
                sets = timing.sets_for(rotate, set_bytes)
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
                        torch._scaled_mm(a[0], b[0], scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16)
                        torch.cuda.synchronize()
                    except (RuntimeError, ValueError, TypeError) as e:
                        errors.append(f"{sname}: {str(e).splitlines()[0][:120]}")
                        continue
                    # A scale layout cuBLASLt accepts but reads differently (seen: a B scale whose
                    # leading dimension K/128 = 11 is not 16-byte aligned) gives wrong numbers, not
                    # an error: a variant must also pass the check before it is timed.
                    a0, b0 = a[0], b[0]
                    trial = check_cell(torch, lambda i, a0=a0, b0=b0, sa=sa, sb=sb: torch._scaled_mm(
                        a0, b0, scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16), 0, a0, b0, sa, sb,
                        min(args.check_rows, 64), seed=m + n + k)
                    if not trial["passed"]:
                        errors.append(f"{sname} (B scale strides {tuple(sb.stride())}): wrong result, "
                                      f"rel_err {trial['rel_err']}, {trial['nonfinite']} non-finite")
                        continue
                    chosen = (sname, sa, sb)
                    break
                if chosen is None:
                    rec["error"] = "; ".join(errors)
                    results.append(rec)
                    print(f" {name:>17} {op:>8} {m:>6} {n:>6} {k:>6}   unsupported: {rec['error'][:100]}")
                    continue
                sname, sa, sb = chosen

                def mm(i, a=a, b=b, sa=sa, sb=sb):
                    return torch._scaled_mm(a[i % len(a)], b[i % len(b)], scale_a=sa, scale_b=sb,
                                            out_dtype=torch.bfloat16)
                rec.update({"scaling": sname, **timed(torch, mm, args, backlog, 2.0 * m * n * k)})
                rec["correctness"] = check_cell(torch, mm, sets - 1, a[-1], b[-1], sa, sb, args.check_rows,
                                                seed=m * 131 + n * 7 + k)
                rec["nonfinite"] = rec["correctness"]["nonfinite"]
                failed += not rec["correctness"]["passed"]
                if errors:
                    rec["refused"] = errors
                results.append(rec)
                c = rec["correctness"]
                print(f" {name:>17} {op:>8} {m:>6} {n:>6} {k:>6} {sname:>24} {rec['median_us']:>10.1f} "
                      f"{rec['tflops']:>9.1f} {rec['tflops_best']:>9.1f}{verify.check_columns(c)}", flush=True)
                del a, b
                torch.cuda.empty_cache()

    if args.json:
        doc = {
            "schema": "xstage.bench.moe_gemm.v1",
            "tool": "torch._scaled_mm",
            **timing.run_fields(torch, props, l2),
            "config": {"warmup": args.warmup, "warmup_ms": args.warmup_ms, "iters": args.iters, "rotate_bytes": rotate,
                       "scaling": args.scaling, "check_rows": args.check_rows, "rel_tol": REL_TOL,
                       "shapes": "dense per expert: l1 = (tokens, 2*inter, hidden), l2 = (tokens, hidden, inter)",
                       "flops": "2*m*n*k"},
            "results": results,
        }
        write_json(args.json, doc)
    if args.grouped_json:
        gdoc, gfailed = run_grouped(torch, args, models, dev, props, l2, rotate, backlog)
        write_json(args.grouped_json, gdoc)
        failed += gfailed
    return verify.finish("bench_moe_gemm_torch", failed)


if __name__ == "__main__":
    sys.exit(main())
