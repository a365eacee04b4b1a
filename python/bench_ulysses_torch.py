#!/usr/bin/env python3
"""PyTorch baseline for `xstage bench ulysses`: SDPA, then the post-attention All-to-All over NCCL.

    torchrun --standalone --nproc-per-node=P python/bench_ulysses_torch.py --json OUT.json \
        [--seqlens 1024,4096,...] [--configs 24x128,40x128,30x64] [--batch 1] [--iters 30] [--warmup 5]

What DiT stacks (xDiT / yunchang Ulysses) run today. Per rank (P = world size) q, k, v are
[B, S, H/P, D] bf16, random normal: the state after the pre-attention All-to-All (rank r
holds heads [r*H/P, (r+1)*H/P) for the whole sequence). The measured path:

    o = F.scaled_dot_product_attention(q.transpose(1,2), k.transpose(1,2), v.transpose(1,2))
        under sdpa_kernel(CUDNN_ATTENTION) (FLASH_ATTENTION if cuDNN is unavailable), non-causal
    x = o.transpose(1,2)                         [B, S, Hl, D]
      .reshape(B, P, S/P, Hl, D).permute(1,0,2,3,4).contiguous()   [P, B, S/P, Hl, D]
    dist.all_to_all_single(out, x)               out [P, B, S/P, Hl, D]
    y = out.permute(1,2,0,3,4).reshape(B, S/P, H, D).contiguous()

Three timings, each with CUDA events around one run: sdpa_us (attention alone), a2a_us (the
permutes + all-to-all on a ready o), sdpa_nccl_us (the whole path). Warm-up first, then
--iters individually timed runs, each preceded by dist.barrier() + torch.cuda.synchronize() so
the ranks start together, then a short calibrated GPU busy-wait (--cover-us, same duration on
every rank) so the host enqueues the run while the GPU is busy (the events time GPU work, not
Python launch overhead), then a 4-byte NCCL all-reduce queued just before the start event so
the GPUs, not only the hosts, start the run together. Inputs rotate over enough sets to exceed 2 x L2 per rank (memory
permitting). Reported: per rank median / p10 / p90; the result is the max over ranks (of the
medians, and separately of the p10s and p90s); per-rank medians are kept in the JSON.

Once per (heads, head_dim) config, at the smallest S, a correctness check: each rank's y must
equal rows [rank*S/P, (rank+1)*S/P) of full attention over all H heads (q, k, v gathered with
all_gather, reference in fp32), relative Frobenius error < 1e-2 (the file's "checks").
And every timed point is checked (xsbench.verify): one more run of the whole path, on outputs
poisoned with NaN, compared on --check-rows seeded token rows (all heads) against an fp32
reference that each head's owner computes for its heads and all_gathers, per-row relative
error < 2e-2, with a full finiteness scan of y on every rank: the point's "correctness"
record, which python/compare_ulysses.py gates on.

NCCL backend; NCCL_NVLS_ENABLE=0 is forced before init (never NVLink multicast). Progress on
stderr; rank 0 writes --json (schema xstage.bench.ulysses_torch.v1) for
python/compare_ulysses.py and python/plot_ulysses.py. Without torchrun it runs as world 1.
Exit status: 0 ok, 1 a correctness check failed, 2 bad input, 3 torch/CUDA/NCCL missing.
"""
import argparse
import json
import math
import os
import statistics
import sys

from xsbench import timing, verify

SCHEMA = "xstage.bench.ulysses_torch.v1"
REL_ERR_LIMIT = 1e-2   # the per-config check: relative Frobenius error over the whole output
ROW_REL_TOL = 2e-2     # the per-point check: relative L2 error of the worst checked row


def _configs(text):
    out = []
    for item in (x for x in text.split(",") if x):
        try:
            h, d = item.lower().split("x")
            out.append((int(h), int(d)))
        except ValueError:
            raise argparse.ArgumentTypeError(f"config {item!r} is not HEADSxHEAD_DIM (e.g. 24x128)")
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seqlens", type=timing.ints, default=timing.ints("1024,4096,4608,8192,16384,32768,65536"))
    ap.add_argument("--configs", type=_configs, default=_configs("24x128,40x128,30x64"),
                    help="comma list of HEADSxHEAD_DIM (total heads, before the Ulysses split)")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--iters", type=int, default=30)
    ap.add_argument("--rotate-mib", type=float, default=0.0, help="0: 2 x the device's L2")
    ap.add_argument("--cover-us", type=float, default=1000.0,
                    help="GPU busy-wait queued before each timed run so the host enqueues it ahead (0: none)")
    ap.add_argument("--no-check", action="store_true", help="skip the correctness checks (the compare then fails)")
    ap.add_argument("--check-rows", type=int, default=64, help="token rows per point checked against fp32")
    ap.add_argument("--json", help="rank 0 writes results here")
    args = ap.parse_args(argv)

    def log(msg):
        print(msg, file=sys.stderr, flush=True)

    if args.iters < timing.MIN_ITERS or args.batch < 1 or args.warmup < 0 or args.cover_us < 0 or args.check_rows < 2:
        log(f"bench_ulysses_torch: need --iters >= {timing.MIN_ITERS}, --batch >= 1, --warmup >= 0, --cover-us >= 0, "
            "--check-rows >= 2")
        return 2
    if not args.seqlens or not args.configs or min(args.seqlens) < 1 or min(min(c) for c in args.configs) < 1:
        log("bench_ulysses_torch: --seqlens and --configs must be non-empty and positive")
        return 2

    # Never NVLink multicast (NVLS): set before NCCL initialises.
    if os.environ.get("NCCL_NVLS_ENABLE", "0") != "0":
        log(f"bench_ulysses_torch: overriding NCCL_NVLS_ENABLE={os.environ['NCCL_NVLS_ENABLE']} with 0")
    os.environ["NCCL_NVLS_ENABLE"] = "0"
    try:
        import torch
        import torch.nn.functional as F
        from torch.nn.attention import SDPBackend, sdpa_kernel
    except ImportError as e:
        log(f"bench_ulysses_torch: PyTorch not available ({e})")
        return 3
    got = timing.init_nccl(torch, 29531)  # without torchrun: a world of one
    if got is None:
        log("bench_ulysses_torch: needs CUDA and torch.distributed with NCCL")
        return 3
    dist, dev = got
    rank, world = dist.get_rank(), dist.get_world_size()
    P = world

    def say(msg):  # rank 0 only
        if rank == 0:
            log(msg)

    def agree(ok):
        return timing.agree(torch, dist, dev, ok)

    def gather_floats(vals):
        return timing.gather_floats(torch, dist, dev, vals)

    props = torch.cuda.get_device_properties(dev)
    l2, rotate = timing.rotate_bytes(torch, dev, args.rotate_mib)
    dtype = torch.bfloat16
    torch.manual_seed(20261130 + 7919 * rank)  # different data on every rank
    torch.backends.cuda.matmul.allow_tf32 = False  # fp32 reference stays fp32

    # --- backend: cuDNN if every rank can run it, else flash ---------------------------
    names = {"cudnn": SDPBackend.CUDNN_ATTENTION, "flash": SDPBackend.FLASH_ATTENTION}

    def probe(name):
        try:
            t = torch.randn(1, 256, 2, 64, device=dev, dtype=dtype).transpose(1, 2)
            with sdpa_kernel([names[name]]):
                F.scaled_dot_product_attention(t, t, t)
            torch.cuda.synchronize()
            return True
        except RuntimeError as e:
            log(f"bench_ulysses_torch: rank {rank}: SDPA backend {name} unavailable: {str(e).splitlines()[0][:160]}")
            return False

    if agree(probe("cudnn")):
        backend = "cudnn"
    elif agree(probe("flash")):
        backend = "flash"
        say("bench_ulysses_torch: cuDNN attention unavailable, falling back to FLASH_ATTENTION")
    else:
        say("bench_ulysses_torch: neither cuDNN nor flash SDPA runs here")
        dist.destroy_process_group()
        return 3

    # --- GPU busy-wait calibrated per rank (so every rank waits the same microseconds) --
    cycles_per_us = timing.sleep_rate(torch) if args.cover_us > 0 else None
    if args.cover_us > 0 and cycles_per_us is None:
        say("bench_ulysses_torch: torch.cuda._sleep missing; timed runs start without a GPU cover (launch overhead included)")

    align = torch.zeros(1, dtype=torch.float32, device=dev)

    def cover():
        """GPU busy while the host enqueues the run, then a 4-byte all-reduce so the ranks'
        GPUs (not just their hosts, which leave the barrier some us apart) start together."""
        timing.busy_wait(torch, cycles_per_us, args.cover_us)
        if world > 1:
            dist.all_reduce(align)

    # --- the measured path ------------------------------------------------------------
    def sdpa(q, k, v):
        return F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2))

    def post_a2a(o, B, S, Hl, D):
        x = o.transpose(1, 2)                                                  # [B, S, Hl, D]
        x = x.reshape(B, P, S // P, Hl, D).permute(1, 0, 2, 3, 4).contiguous()  # [P, B, S/P, Hl, D]
        out = torch.empty_like(x)
        dist.all_to_all_single(out, x)                                         # [P, B, S/P, Hl, D]
        return out.permute(1, 2, 0, 3, 4).reshape(B, S // P, P * Hl, D).contiguous()  # [B, S/P, H, D]

    def before_run(_i):
        dist.barrier()
        torch.cuda.synchronize()
        cover()

    def timed(fn):
        us = timing.time_launches(torch, fn, args.iters, warmup=args.warmup, before=before_run)
        return [statistics.median(us), timing.quantile(us, 0.1), timing.quantile(us, 0.9)]

    def check_point(q, k, v, B, S, H, Hl, D):
        """The point's correctness record: the whole path once more on poisoned outputs, seeded
        token rows (all heads) against an fp32 reference that each head's owner computes for
        its heads (q, k, v: this rank's heads, the whole sequence) and all_gathers."""
        rows, ref_desc = S // P, "fp32 softmax(q k^T / sqrt(d)) v on seeded token rows, all heads"
        verify.poison_free_blocks(torch, (B, S, Hl, D), dtype, dev, count=6)  # o, x, out, y: all this size
        with sdpa_kernel([names[backend]]):
            y = post_a2a(sdpa(q, k, v), B, S, Hl, D)                           # [B, S/P, H, D]
        torch.cuda.synchronize()
        pick = verify.sample_rows(B * S, args.check_rows, seed=S * 31 + H * 7 + D)
        bs = torch.tensor([p // S for p in pick], device=dev)
        ts = torch.tensor([p % S for p in pick], device=dev)
        ref_local = torch.full((len(pick), Hl, D), float("nan"), device=dev)
        try:
            for bi in sorted({p // S for p in pick}):
                sel = (bs == bi).nonzero().flatten()
                for hl in range(Hl):
                    sc = (q[bi, ts[sel], hl].float() @ k[bi, :, hl].float().t()) / math.sqrt(D)
                    ref_local[sel, hl] = torch.softmax(sc, dim=-1) @ v[bi, :, hl].float()
        except RuntimeError as e:  # out of memory: NaN rows, a failed check (the ranks stay in step)
            log(f"bench_ulysses_torch: rank {rank}: point check S={S} {H}x{D}: {str(e).splitlines()[0][:200]}")
        parts = [torch.empty_like(ref_local) for _ in range(world)]
        dist.all_gather(parts, ref_local)
        ref = torch.cat(parts, dim=1)                                          # [n, H, D], heads in rank order
        mine = (ts // rows == rank).nonzero().flatten()
        rec = verify.check(torch, y[bs[mine], ts[mine] % rows], ref[mine], y, ROW_REL_TOL, ref_desc)
        del y, ref, parts, ref_local
        return verify.merge_floats(gather_floats(verify.as_floats(rec)), ROW_REL_TOL, ref_desc)

    def check(q, k, v, B, S, H, Hl, D):
        """Ulysses result vs rows of full attention over all heads (fp32 reference)."""
        with sdpa_kernel([names[backend]]):
            y = post_a2a(sdpa(q, k, v), B, S, Hl, D).float()
        full = []
        for t in (q, k, v):
            parts = [torch.empty_like(t) for _ in range(world)]
            dist.all_gather(parts, t.contiguous())
            full.append(torch.cat(parts, dim=2))                               # [B, S, H, D], heads in rank order
        qf, kf, vf = full
        rows = S // P
        r0 = rank * rows
        ref = torch.empty(B, rows, H, D, device=dev, dtype=torch.float32)
        chunk = max(1, min(rows, (256 << 20) // (S * 4)))                     # score block <= 256 MiB
        scale = 1.0 / math.sqrt(D)
        for bi in range(B):
            for h in range(H):
                kh, vh = kf[bi, :, h].float(), vf[bi, :, h].float()
                for c0 in range(0, rows, chunk):
                    c1 = min(rows, c0 + chunk)
                    s = (qf[bi, r0 + c0:r0 + c1, h].float() @ kh.t()) * scale
                    ref[bi, c0:c1, h] = torch.softmax(s, dim=-1) @ vh
        err = ((y - ref).norm() / ref.norm().clamp_min(1e-30)).item()
        max_abs = (y - ref).abs().max().item()
        finite = bool(torch.isfinite(y).all().item())
        del full, qf, kf, vf, ref, y
        return err if finite else float("inf"), max_abs

    free_b, _ = torch.cuda.mem_get_info()
    say(f"# PyTorch {torch.__version__} SDPA ({backend}) + NCCL {timing.nccl_version(torch)} all_to_all_single, "
        f"world {P}, {props.name} ({props.multi_processor_count} SMs, L2 {l2 / 2**20:.0f} MiB), bf16, "
        f"non-causal, batch {args.batch}, median of {args.iters} runs after {args.warmup} warm-up, "
        f"inputs rotate over >= {rotate / 2**20:.0f} MiB per rank, cover {args.cover_us:.0f} us, NCCL_NVLS_ENABLE=0")
    say(f"#{'seqlen':>7} {'heads':>5} {'d':>4} {'sets':>4} {'sdpa(us)':>10} {'a2a(us)':>10} "
        f"{'sdpa+nccl':>10} {'p10':>9} {'p90':>9}   (max over ranks of per-rank medians)")

    results, skipped, checks = [], [], []
    check_failed = False
    B = args.batch
    seqlens = sorted(set(args.seqlens))
    for H, D in args.configs:
        if H % P:
            msg = f"heads {H} not divisible by world {P}"
            say(f"  skip {H}x{D}: {msg}")
            skipped += [{"seq_len": S, "heads": H, "head_dim": D, "reason": msg} for S in seqlens]
            continue
        Hl = H // P
        checked = args.no_check
        for S in seqlens:
            if S % P:
                msg = f"seq_len {S} not divisible by world {P}"
                say(f"  skip S={S} {H}x{D}: {msg}")
                skipped.append({"seq_len": S, "heads": H, "head_dim": D, "reason": msg})
                continue
            elems = B * S * Hl * D
            set_bytes = 3 * elems * 2                     # q, k, v of one set
            o_bytes = elems * 2
            want_sets = timing.sets_for(rotate, set_bytes)
            want_osets = timing.sets_for(rotate, o_bytes)
            torch.cuda.empty_cache()
            free_b, _ = torch.cuda.mem_get_info()
            # Room for the working set: one o, x, out, y and the SDPA workspace, then the sets.
            budget = int(free_b * 0.7) - 8 * o_bytes
            sets = max(1, min(want_sets, budget // set_bytes))
            osets = max(1, min(want_osets, (budget - sets * set_bytes) // o_bytes))
            ok = True
            try:
                qkv = [[torch.randn(B, S, Hl, D, device=dev, dtype=dtype) for _ in range(3)] for _ in range(sets)]
            except torch.cuda.OutOfMemoryError:
                ok = False
            if not agree(ok):
                msg = "out of memory allocating q, k, v"
                say(f"  skip S={S} {H}x{D}: {msg}")
                skipped.append({"seq_len": S, "heads": H, "head_dim": D, "reason": msg})
                qkv = None
                continue

            if not checked:
                checked = True
                try:
                    err, max_abs = check(*qkv[0], B, S, H, Hl, D)
                except RuntimeError as e:  # OOM in the reference: recorded as a failed check
                    log(f"bench_ulysses_torch: rank {rank}: check {H}x{D} S={S}: {str(e).splitlines()[0][:200]}")
                    err, max_abs = float("nan"), float("nan")
                torch.cuda.empty_cache()
                errs = gather_floats([err, max_abs])
                worst = max(e[0] for e in errs) if all(e[0] == e[0] for e in errs) else float("nan")
                passed = worst < REL_ERR_LIMIT  # nan compares False
                check_failed |= not passed
                fin = lambda x: x if math.isfinite(x) else None  # noqa: E731 - JSON has no NaN
                checks.append({"seq_len": S, "heads": H, "head_dim": D, "world": P,
                               "rel_err": fin(worst), "rel_err_per_rank": [fin(e[0]) for e in errs],
                               "max_abs_err": fin(max(e[1] for e in errs)), "limit": REL_ERR_LIMIT, "pass": passed})
                say(f"  check {H}x{D} S={S}: Ulysses rows vs full attention (fp32 ref): rel err {worst:.2e} "
                    f"(max abs {max(e[1] for e in errs):.2e}) -> {'PASS' if passed else 'FAIL'} (< {REL_ERR_LIMIT:g})")

            # Stage 1, local only: the ready o's (a refused shape or OOM shows up here, before
            # any collective, so the ranks can agree to skip without a mismatched collective).
            o_sets = None
            try:
                with sdpa_kernel([names[backend]]):
                    o_sets = [sdpa(*qkv[i % sets]) for i in range(osets)]
                torch.cuda.synchronize()
                ok = True
            except RuntimeError as e:
                log(f"bench_ulysses_torch: rank {rank}: S={S} {H}x{D}: {str(e).splitlines()[0][:200]}")
                ok = False
            if not agree(ok):
                o_sets = qkv = None
                torch.cuda.empty_cache()
                msg = f"{backend} SDPA refused the shape or ran out of memory (see stderr)"
                say(f"  skip S={S} {H}x{D}: {msg}")
                skipped.append({"seq_len": S, "heads": H, "head_dim": D, "reason": msg})
                continue
            # Stage 2: the timings (all ranks in step).
            with sdpa_kernel([names[backend]]):
                t_sdpa = timed(lambda i: sdpa(*qkv[i % sets]))
                t_a2a = timed(lambda i: post_a2a(o_sets[i % osets], B, S, Hl, D))
                o_sets = None
                t_all = timed(lambda i: post_a2a(sdpa(*qkv[i % sets]), B, S, Hl, D))
            point_check = None if args.no_check else check_point(*qkv[0], B, S, H, Hl, D)
            qkv = None
            torch.cuda.empty_cache()

            per_rank = gather_floats(t_sdpa + t_a2a + t_all)   # [rank][9]
            col = lambda j: [r[j] for r in per_rank]           # noqa: E731
            rec = {"seq_len": S, "heads": H, "head_dim": D, "world": P, "batch": B, "backend": backend,
                   "sdpa_us": max(col(0)), "sdpa_p10_us": max(col(1)), "sdpa_p90_us": max(col(2)),
                   "a2a_us": max(col(3)), "a2a_p10_us": max(col(4)), "a2a_p90_us": max(col(5)),
                   "sdpa_nccl_us": max(col(6)), "sdpa_nccl_p10_us": max(col(7)), "sdpa_nccl_p90_us": max(col(8)),
                   "rank_medians_us": {"sdpa": col(0), "a2a": col(3), "sdpa_nccl": col(6)},
                   "a2a_bytes_per_rank": o_bytes, "a2a_wire_bytes_per_rank": o_bytes * (P - 1) // P,
                   "rotating_sets": sets, "rotating_o_sets": osets,
                   "rotated_bytes": sets * set_bytes, "rotation_short": sets < want_sets or osets < want_osets,
                   "iters": args.iters}
            if point_check is not None:
                rec["correctness"] = point_check
                check_failed |= not point_check["passed"]
                if not point_check["passed"]:
                    say(f"  point check S={S} {H}x{D}: FAIL (worst row rel err {point_check['rel_err']}, "
                        f"{point_check['nonfinite']} non-finite)")
            results.append(rec)
            say(f" {S:>7} {H:>5} {D:>4} {sets:>4} {rec['sdpa_us']:>10.1f} {rec['a2a_us']:>10.1f} "
                f"{rec['sdpa_nccl_us']:>10.1f} {rec['sdpa_nccl_p10_us']:>9.1f} {rec['sdpa_nccl_p90_us']:>9.1f}"
                + ("   (rotation short of 2 x L2: memory)" if rec["rotation_short"] else ""))
            if rec["sdpa_nccl_us"] > 1.3 * (rec["sdpa_us"] + rec["a2a_us"]) + 20.0:
                say(f"  warning: S={S} {H}x{D}: sdpa+nccl {rec['sdpa_nccl_us']:.1f} us >> sdpa {rec['sdpa_us']:.1f} + "
                    f"a2a {rec['a2a_us']:.1f} us: host enqueue may show in the timing (raise --cover-us)")

    if rank == 0 and args.json:
        cudnn = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
        doc = {
            "schema": SCHEMA,
            "tool": "torch-sdpa-nccl",
            "device": props.name,
            "torch": torch.__version__,
            "cuda": torch.version.cuda,
            "cudnn": cudnn,
            "nccl": timing.nccl_version(torch),
            "world": P,
            "batch": B,
            "dtype": "bf16",
            "backend": backend,
            "sm_count": props.multi_processor_count,
            "l2_bytes": l2,
            **timing.stamp(),
            "config": {"causal": False, "check_rows": args.check_rows, "row_rel_tol": ROW_REL_TOL, "layout": "BSHD per rank [B, S, H/P, D]", "warmup": args.warmup,
                       "iters": args.iters, "rotate_bytes": rotate, "cover_us": args.cover_us if cycles_per_us else 0.0,
                       "nccl_nvls_enable": os.environ["NCCL_NVLS_ENABLE"],
                       "reduce": "max over ranks of per-rank median (p10, p90: max over ranks of each)",
                       "a2a": "o.transpose(1,2).reshape(B,P,S/P,Hl,D).permute(1,0,2,3,4).contiguous(); "
                              "all_to_all_single; permute(1,2,0,3,4).reshape(B,S/P,H,D).contiguous()"},
            "checks": checks,
            "skipped": skipped,
            "results": results,
        }
        with open(args.json, "w") as f:
            json.dump(doc, f, indent=2)
            f.write("\n")
        log(f"bench_ulysses_torch: wrote {args.json} ({len(results)} points, {len(skipped)} skipped)")
    dist.barrier()
    dist.destroy_process_group()
    return 1 if check_failed else 0


if __name__ == "__main__":
    sys.exit(main())
