"""Timing of the xstage PyTorch ops against the C++ bench and torch SDPA (cuDNN), one process.

    python -m xstage.bench attention --json out.json [--cli build/xstage] [-S 1024,4096] [-H 12,24] [-d 64,128]
    python -m xstage.bench moe-gemm --cli build/xstage --json moe.json [--models DSv4-Flash] [-t 1024,8192]

The method of `xstage bench attention` (src/cli/cmd_bench_attention.cpp) and
python/bench_attention_torch.py: B = 1, BSHD tensors, warm-up, CUDA events around every launch,
median of >= 20 launches, inputs rotating over enough sets to exceed 2 x L2, and the GPU kept
busy (a spin kernel queued first) while the host enqueues the timed launches, so host overhead
does not enter a timing. Rows: the extension's launch called directly into preallocated
outputs ("xstage-ext", attention_op.launch_into / moe.launch_into), xstage.attention through the
torch op ("xstage-torch-op"), the same call captured in a CUDA graph replayed per launch
("xstage-torch-graph"), and torch SDPA with the cuDNN backend ("torch-cudnn").

With --cli each shape (moe-gemm: each cell) runs in --rounds R rounds (default 2): the C++ bench
on that shape alone, then every Python row, in forward order in even rounds and reversed in odd
ones (each row with its own sustained warm-up); after the last round the C++ bench once more. A
row's time is the median of all its timed launches of all rounds (each round's median kept in
the JSON); the C++ reference is the mean of the R + 1 C++ medians (cli_medians_us). The separate
C++ process and the Python rows otherwise see different points of the power-capped clock
(results/python-h200/README.md); the alternating order gives every row the same mean position,
and the C++ runs that bracket the rounds have that mean position too, so a steady drift cancels.
--cli-once: one C++ run up front for all shapes; the rounds then only alternate the Python rows.
Each row gets time / C++ reference.

Every timed cell is checked (xstage/_verify.py): one more call on NaN-poisoned output, seeded
rows against an fp32 reference, a full finiteness scan; the record goes into the cell's
"correctness". With --cli the run ends with the acceptance lines of docs/python.md (attention:
the op within 2 % of the C++ bench, faster than cuDNN where the C++ kernel is; moe-gemm: within
3 % of the C++ bench's TFLOP/s). Exit status: 0 ok, 1 a cell failed its check, 2 bad input,
3 no torch/CUDA/extension, 4 checked but an acceptance criterion missed.
"""
from __future__ import annotations

import argparse
import importlib
import json
import os
import statistics
import subprocess
import sys
import tempfile

from . import _verify as verify
from ._bench_util import MIN_ITERS, add_timing_args, cli_reference, ints as _ints, paired_ratio, pool_rounds, \
    record_error, rotate_bytes, run_rounds, sets_for, stamp, sustain, time_launches, time_paired, visible_pairs

ATTENTION_REL_TOL = 0.02   # per-row relative L2 error of the bf16/fp16 output vs fp32 (as the C++ bench)
MOE_BF16_REL_TOL = 0.02    # grouped GEMM, bf16 rows vs the fp32 product of the dequantised operands
MOE_SWIGLU_REL_TOL = 0.05  # SwiGLU rows requantised to fp8 (e4m3: 3 mantissa bits) vs fp32
TORCH_OP_VS_CLI = 1.02     # acceptance (issue 35): the torch op within 2 % of the C++ bench
MOE_VS_CLI = 0.97          # acceptance: the MoE torch op's TFLOP/s within 3 % of the C++ bench


def _bad_counts(args, warmup=True):
    """Exit status 2 after saying why for a count out of range (--iters < MIN_ITERS; with warmup,
    --warmup < 0; --rounds < 1; --check-rows < 2; --warmup-ms outside [0, 60000]); else None."""
    why = None
    if args.iters < MIN_ITERS:
        why = f"--iters must be >= {MIN_ITERS}"
    elif warmup and args.warmup < 0:
        why = "--warmup must be >= 0"
    elif args.rounds < 1:
        why = "--rounds must be >= 1"
    elif getattr(args, "check_rows", 2) < 2:
        why = "--check-rows must be >= 2"
    elif not 0 <= getattr(args, "warmup_ms", 0) <= 60000:
        why = "--warmup-ms must be in [0, 60000]"
    if why is None:
        return None
    print(f"xstage.bench: {why}", file=sys.stderr)
    return 2


def _import(*names):
    """The modules `names`, imported in order, or None after printing the ImportError (exit 3)."""
    try:
        return [importlib.import_module(n) for n in names]
    except ImportError as e:
        print(f"xstage.bench: {e}", file=sys.stderr)
        return None


def _add_rounds_args(ap, cli_once_help):
    ap.add_argument("--rounds", type=int, default=2,
                    help="rounds per shape/cell: the C++ bench, then the Python rows, in reversed order in odd "
                         "rounds; the C++ bench once more after the last; rows: median of all rounds' launches, "
                         "C++: mean of its runs' medians")
    ap.add_argument("--cli-once", action="store_true", help=cli_once_help)


def _cli_how(args):
    """How the C++ reference was taken, for the headers and the acceptance lines."""
    if args.cli_once:
        return f"one C++ run up front, {args.rounds} round(s) of rows in alternating order"
    return f"mean of {args.rounds + 1} C++ runs around {args.rounds} round(s) of rows in alternating order"


def _timed(torch, fn, sets, args):
    """(us of args.iters launches fn(i % sets), each between CUDA events; host_us). First
    args.warmup_ms of sustained untimed launches, then args.warmup more whose host enqueue time
    (host_us: what an eager call costs the host) is measured while they queue behind a spin
    kernel. The GPU is then kept busy (another spin kernel) for longer than the host needs to
    enqueue the timed launches, so host overhead does not enter a timing."""
    import time

    torch.cuda.synchronize()
    sustain(torch, lambda i: fn(i % sets), args.warmup_ms)
    torch.cuda._sleep(int(max(args.warmup, 1) * 400 * 1.9e3))   # ~400 us per warm-up launch
    t0 = time.perf_counter()
    for w in range(max(args.warmup, 1)):
        fn(w % sets)
    host_us = (time.perf_counter() - t0) * 1e6 / max(args.warmup, 1)
    torch.cuda.synchronize()
    torch.cuda._sleep(int(args.iters * max(60.0, 2.0 * host_us + 20.0) * 1.9e3))
    return time_launches(torch, lambda i: fn(i % sets), args.iters), host_us


def _timed_paired(torch, fns, sets, args, host_us):
    """{name: us per launch} of the rows in `fns` interleaved launch by launch (time_paired), after
    the sustained warm-up and the warm-up launches of _timed, alternating the rows; a spin kernel
    covers the host's enqueue of the timed launches (host_us: the slowest row's eager host cost)."""
    names = list(fns)
    calls = [(lambda i, f=fns[n]: f(i % sets)) for n in names]
    torch.cuda.synchronize()
    sustain(torch, lambda i: calls[i % len(calls)](i), args.warmup_ms)
    for w in range(max(args.warmup, 1) * len(calls)):
        calls[w % len(calls)](w)
    torch.cuda.synchronize()
    torch.cuda._sleep(int(args.iters * len(calls) * max(60.0, 2.0 * host_us + 20.0) * 1.9e3))
    return dict(zip(names, time_paired(torch, calls, args.iters)))


def _op_vs_ext_paired(torch, fns, timed, errors, sets, args):
    """The torch op's time over the extension's direct call with the two interleaved launch by
    launch (median of per-launch-pair ratios): the op's own cost, with clock drift cancelled.
    None when either row is missing or failed."""
    pair = ("xstage-torch-op", "xstage-ext")
    if any(n not in fns or n in errors or not timed.get(n) for n in pair):
        return None
    host = max(statistics.median(h for _, h in timed[n]) for n in pair)
    us = _timed_paired(torch, {n: fns[n] for n in pair}, sets, args, host)
    return paired_ratio(us[pair[0]], us[pair[1]])


def _write_json(path, doc):
    with open(path, "w") as f:
        json.dump(doc, f, indent=2)
        f.write("\n")


def _run_cli(cli, args, path, seqlens=None, heads=None, head_dims=None, quiet=False):
    """`xstage bench attention` on the given shapes (default: all of args'); {shape: its row}."""
    cmd = [cli, "bench", "attention", "--json", path, "--seqlens", ",".join(map(str, seqlens or args.seqlens)),
           "--heads", ",".join(map(str, heads or args.heads)),
           "--head-dims", ",".join(map(str, head_dims or args.head_dims)),
           "--dtype", args.dtype, "--warmup", str(args.warmup), "--iters", str(args.iters)]
    if args.warmup_ms > 0:
        cmd += ["--warmup-ms", str(args.warmup_ms)]
    if args.causal:
        cmd.append("--causal")
    if not quiet:
        print("# " + " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL if quiet else None)
    with open(path) as f:
        return {(r["seqlen"], r["heads"], r["head_dim"]): r for r in json.load(f)["results"] if "median_us" in r}


def bench_attention(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m xstage.bench attention", description=__doc__.split("\n")[0])
    ap.add_argument("--seqlens", "-S", type=_ints, default=_ints("1024,4096,4608,8192,16384,32768,65536"))
    ap.add_argument("--heads", "-H", type=_ints, default=_ints("12,24"))
    ap.add_argument("--head-dims", "-d", type=_ints, default=_ints("64,128"))
    ap.add_argument("--dtype", choices=["bf16", "fp16"], default="bf16")
    ap.add_argument("--causal", action="store_true")
    add_timing_args(ap, warmup_ms_default=0.0,
                    warmup_ms_help="then untimed launches for this long before every row (and the C++ bench's): the "
                                   "timed launches see the sustained, power-capped clock (0: off, as the C++ bench's "
                                   "default)")
    ap.add_argument("--no-graph", action="store_true", help="skip the CUDA-graph rows")
    ap.add_argument("--no-sdpa", action="store_true", help="skip torch cuDNN SDPA")
    ap.add_argument("--cli", help="the xstage binary: its attention bench on the same shapes, in this run")
    _add_rounds_args(ap, "run the C++ bench once for all shapes up front (default: on each shape before each round of its "
                         "rows and after the last)")
    ap.add_argument("--no-ext", action="store_true",
                    help="skip the xstage-ext row (the extension's launch called directly, no torch op dispatch)")
    ap.add_argument("--check-rows", type=int, default=64, help="seeded query rows checked per cell (>= 2)")
    ap.add_argument("--json", help="write results here (schema xstage.bench.attention.v1)")
    args = ap.parse_args(argv)
    bad = _bad_counts(args)
    if bad is not None:
        return bad
    mods = _import("torch", "torch.nn.functional", "torch.nn.attention", "xstage", "xstage.attention_op")
    if mods is None:
        return 3
    torch, F, attn, xstage, attention_op = mods
    launch_into = attention_op.launch_into
    if not torch.cuda.is_available():
        print("xstage.bench: no CUDA device", file=sys.stderr)
        return 3
    st = xstage.extension_status()
    if not st["available"] or not st["attention"]:
        print(f"xstage.bench: extension without attention ({st['reason']})", file=sys.stderr)
        return 3

    cli_rows, once_rows = {}, {}   # {shape: C++ reference (cli_reference)}, the --cli-once run's rows
    cli_dir = tempfile.TemporaryDirectory() if args.cli else None
    cli_path = os.path.join(cli_dir.name, "cli.json") if args.cli else None
    if args.cli and args.cli_once:
        once_rows = _run_cli(args.cli, args, cli_path)
    elif args.cli:
        print(f"# C++ bench per shape before each of {args.rounds} round(s) and after the last: {args.cli} bench attention "
              f"-S s -H h -d d", flush=True)

    dev = torch.device("cuda")
    props = torch.cuda.get_device_properties(dev)
    l2, rotate = rotate_bytes(torch, dev, args.rotate_mib)
    dtype = torch.bfloat16 if args.dtype == "bf16" else torch.float16
    torch.manual_seed(20261203)
    print(f"# xstage.bench attention on {props.name} ({props.multi_processor_count} SMs), torch {torch.__version__}, "
          f"{args.dtype}, BSHD, {'causal' if args.causal else 'non-causal'}, batch 1, median of {args.iters} after "
          f"{args.warmup} warm-up, inputs rotate over >= {rotate / 2**20:.0f} MiB"
          + (f"; vs C++: {_cli_how(args)}" if args.cli else f"; {args.rounds} round(s), rows in alternating order"))
    print(f"#{'backend':>19} {'seqlen':>7} {'heads':>5} {'d':>4} {'sets':>5} {'time(us)':>10} {'min(us)':>10} "
          f"{'TFLOP/s':>9} {'vs C++':>7}{verify.CHECK_HEADER}")

    results = []
    failed = 0
    gouts, outs = [], []
    for d in args.head_dims:
        for h in args.heads:
            for s in args.seqlens:
                elems = s * h * d
                sets = sets_for(rotate, 4 * elems * 2)
                qkv = [[torch.empty(1, s, h, d, device=dev, dtype=dtype).uniform_(-1, 1) for _ in range(3)]
                       for _ in range(sets)]
                flops = 4.0 * h * d * visible_pairs(s, s, args.causal)
                rows = []
                if not args.no_ext:
                    outs = [torch.empty_like(t[0]) for t in qkv]

                    def ext(i):
                        launch_into(outs[i], *qkv[i], args.causal, 0.0)
                        return outs[i]
                    rows.append(("xstage-ext", ext))

                def op(i):
                    q, k, v = qkv[i]
                    return xstage.attention(q, k, v, causal=args.causal)
                rows.append(("xstage-torch-op", op))
                if not args.no_graph:
                    graphs, gouts = [], []
                    side = torch.cuda.Stream()
                    side.wait_stream(torch.cuda.current_stream())
                    with torch.cuda.stream(side):
                        for i in range(sets):
                            op(i)
                    torch.cuda.current_stream().wait_stream(side)
                    for i in range(sets):
                        g = torch.cuda.CUDAGraph()
                        with torch.cuda.graph(g):
                            gouts.append(op(i))
                        graphs.append(g)
                    rows.append(("xstage-torch-graph", lambda i: graphs[i].replay()))
                if not args.no_sdpa:
                    def sdpa(i):
                        q, k, v = qkv[i]
                        with attn.sdpa_kernel([attn.SDPBackend.CUDNN_ATTENTION]):
                            return F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2),
                                                                  v.transpose(1, 2), is_causal=args.causal)
                    rows.append(("torch-cudnn", sdpa))
                fns = dict(rows)

                def shape_cli():   # the C++ bench on this shape alone, quiet; None if it wrote no timed row
                    return _run_cli(args.cli, args, cli_path, [s], [h], [d], quiet=True).get((s, h, d))
                timed, errors, cli_runs = run_rounds(args.rounds, list(fns),
                                                     lambda name: _timed(torch, fns[name], sets, args),
                                                     shape_cli if args.cli and not args.cli_once else None)
                paired = _op_vs_ext_paired(torch, fns, timed, errors, sets, args)
                if (s, h, d) in once_rows:
                    cli_runs = [once_rows[(s, h, d)]]
                cli = cli_reference(cli_runs) if cli_runs else None
                if cli:
                    cli_rows[(s, h, d)] = cli
                for name, fn in rows:   # results and checks in the forward order, after all rounds
                    rec = {"backend": name, "batch": 1, "seqlen": s, "heads": h, "head_dim": d, "dtype": args.dtype,
                           "causal": args.causal, "rotating_sets": sets, "iters": args.iters, "rounds": args.rounds}
                    if name in errors:
                        err = record_error(results, rec, errors[name])
                        print(f" {name:>19} {s:>7} {h:>5} {d:>4} {sets:>5}   error: {err[:80]}")
                        continue
                    rec.update(pool_rounds([us for us, _ in timed[name]]))
                    rec["host_us"] = statistics.median(host for _, host in timed[name])
                    if name == "xstage-torch-op" and paired is not None:
                        rec["op_vs_ext_paired"] = paired
                    rec["correctness"] = _check_attention(torch, verify, name, fn, qkv, gouts if name ==
                                                          "xstage-torch-graph" else (outs if name == "xstage-ext"
                                                                                     else None), args, s * h + d)
                    failed += not rec["correctness"]["passed"]
                    med = rec["median_us"]
                    rec["tflops"] = flops / (med * 1e-6) / 1e12
                    ratio = ""
                    if cli:
                        rec["cli_median_us"] = cli["median_us"]
                        rec["cli_medians_us"] = cli["cli_medians_us"]
                        rec["vs_cli"] = med / cli["median_us"]
                        ratio = f"{rec['vs_cli']:.3f}"
                    results.append(rec)
                    print(f" {name:>19} {s:>7} {h:>5} {d:>4} {sets:>5} {med:>10.1f} {rec['min_us']:>10.1f} "
                          f"{rec['tflops']:>9.1f} {ratio:>7}{verify.check_columns(rec['correctness'])}", flush=True)
                if cli:
                    print(f" {'xstage (C++ bench)':>19} {s:>7} {h:>5} {d:>4} {cli['rotating_sets']:>5} "
                          f"{cli['median_us']:>10.1f} {cli['min_us']:>10.1f} {cli['tflops']:>9.1f}   1.000", flush=True)
                if paired is not None:
                    print(f" {'op/ext (paired)':>19} {s:>7} {h:>5} {d:>4} {paired:>10.3f}", flush=True)
                del qkv, rows, gouts
                gouts, outs = [], []
                torch.cuda.empty_cache()

    accept = _attention_acceptance(results, cli_rows, _cli_how(args))
    for line in accept["lines"]:
        print(line)
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
                       "warmup": args.warmup, "warmup_ms": args.warmup_ms, "iters": args.iters, "rotate_bytes": rotate,
                       "rounds": args.rounds, "cli": args.cli, "cli_once": args.cli_once, "cli_reference": _cli_how(args)
                       if args.cli else None, "flops": "4*B*H*Sq*Skv*d (visible pairs if causal)"},
            "cli_results": list(cli_rows.values()),   # per shape: median_us = the mean of cli_medians_us
            "results": results,
            "acceptance": {k: v for k, v in accept.items() if k != "lines"},
        })
    if failed:
        return verify.finish("xstage.bench attention", failed)
    return 0 if accept["passed"] in (True, None) else 4


def _check_attention(torch, verify, name, fn, qkv, gouts, args, seed):
    """The correctness record of backend `name` on input set 0: one more call on NaN-poisoned
    output (rows with their own outputs, the graph's captured ones or xstage-ext's preallocated
    ones: those filled with NaN, then the call), checked on --check-rows seeded query rows
    against fp32 (xstage._verify.attention_rows)."""
    q, k, v = qkv[0]
    try:
        if gouts is not None:
            gouts[0].fill_(float("nan"))
            fn(0)
            out = gouts[0]
        else:
            verify.poison_free_blocks(torch, q.shape, q.dtype, q.device)
            out = fn(0)
            if name == "torch-cudnn":
                out = out.transpose(1, 2)        # SDPA returns [B, H, S, D] (a view of BSHD memory or not)
        torch.cuda.synchronize()
        return verify.attention_rows(torch, out.transpose(1, 2), q.transpose(1, 2), k.transpose(1, 2),
                                     v.transpose(1, 2), args.causal, args.check_rows, seed, ATTENTION_REL_TOL)
    except RuntimeError as e:
        return verify.failed_record(f"{type(e).__name__}: {e}", ATTENTION_REL_TOL, "fp32 attention rows")


def attention_shape_passed(op_us, cli_us, op_checked, cudnn_us=None, cudnn_checked=True):
    """Issue 35's attention criteria on one shape, from plain numbers (medians, us): the op's and
    cuDNN's cells checked, the op within 2 % of the C++ reference (op_us <= 1.02 cli_us), and
    faster than cuDNN wherever the C++ kernel is (cudnn_us None: no cuDNN row)."""
    within = op_us <= TORCH_OP_VS_CLI * cli_us
    beats = cudnn_us is None or cli_us >= cudnn_us or op_us < cudnn_us
    return bool(op_checked and cudnn_checked and within and beats)


def moe_cell_passed(vs_cli_tflops, op_checked, ext_checked, cli_checked):
    """The moe-gemm criterion on one cell: the op's, xstage-ext's and the C++ bench's outputs
    checked, and the op's TFLOP/s at least 0.97 x the C++ reference's."""
    return bool(op_checked and ext_checked and cli_checked and vs_cli_tflops >= MOE_VS_CLI)


def _attention_acceptance(results, cli_rows, how="mean of the C++ runs"):
    """Issue 35's attention criteria per shape (attention_shape_passed) on the rows of this run
    and cli_rows, {shape: the C++ reference} (its median_us: the mean over the rounds' C++ runs;
    `how` says so in the lines). passed: None without --cli."""
    by = {}
    for r in results:
        if "median_us" in r:
            by.setdefault((r["seqlen"], r["heads"], r["head_dim"]), {})[r["backend"]] = r
    lines, shapes, ok_all = [f"# acceptance: torch op within 2 % of the C++ bench ({how}); faster than cuDNN "
                             f"where C++ is"], [], True
    if not cli_rows:
        return {"passed": None, "shapes": [], "lines": ["# acceptance: needs --cli (the C++ bench in the same run)"]}
    for key, rows in sorted(by.items()):
        op, cudnn, cli, ext = rows.get("xstage-torch-op"), rows.get("torch-cudnn"), cli_rows.get(key), rows.get("xstage-ext")
        if op is None or cli is None:
            ok_all = False
            lines.append(f"  S={key[0]} H={key[1]} d={key[2]}: missing the torch op or the C++ row: FAIL")
            continue
        ok = attention_shape_passed(op["median_us"], cli["median_us"], op["correctness"]["passed"],
                                    cudnn["median_us"] if cudnn else None,
                                    cudnn is None or cudnn["correctness"]["passed"])
        ok_all &= ok
        shapes.append({"seqlen": key[0], "heads": key[1], "head_dim": key[2], "vs_cli": op["median_us"] / cli["median_us"],
                       "cli_medians_us": cli.get("cli_medians_us"),
                       "cli_vs_cudnn": cli["median_us"] / cudnn["median_us"] if cudnn else None,
                       "op_vs_cudnn": op["median_us"] / cudnn["median_us"] if cudnn else None,
                       "op_vs_ext": op["median_us"] / ext["median_us"] if ext else None,
                       "op_vs_ext_paired": op.get("op_vs_ext_paired"), "passed": ok})
        lines.append(f"  S={key[0]:>6} H={key[1]:>3} d={key[2]:>4}: op/C++ {shapes[-1]['vs_cli']:.3f}"
                     + (f", op/ext {shapes[-1]['op_vs_ext']:.3f}" if ext else "")
                     + (f" (paired {op['op_vs_ext_paired']:.3f})" if op.get("op_vs_ext_paired") else "")
                     + (f", C++/cuDNN {shapes[-1]['cli_vs_cudnn']:.3f}, op/cuDNN {shapes[-1]['op_vs_cudnn']:.3f}"
                        if cudnn else "") + ("  ok" if ok else "  FAIL"))
    lines.append(f"# acceptance: {sum(x['passed'] for x in shapes)}/{len(by)} shapes pass")
    return {"passed": ok_all, "shapes": shapes, "lines": lines}


# Weight recipes of the moe-gemm bench: per op kind (bf16 output / SwiGLU), the package's format,
# the activation scales and the C++ bench's --weights name (its JSON "weights" is the same with
# '_' for '-').
MOE_RECIPES = {
    "w8a8": {"bf16": ("w8a8", "per_128", "w8a8"), "swiglu": ("w8a8", "per_128", "w8a8")},
    "int4_tok": {"bf16": ("int4_lut", "per_token", "w4a8-int4-lut-rs-tok"),
                 "swiglu": ("int4_lut_glu", "per_token", "w4a8-int4-lut-rs-tok-glu")},
    "mxfp4_tok": {"bf16": ("mxfp4", "per_token", "w4a8-mxfp4-rs-tok"),
                  "swiglu": ("mxfp4_glu", "per_token", "w4a8-mxfp4-rs-tok-glu")},
}


def bench_moe_gemm(argv=None) -> int:
    """Grouped GEMMs through torch.ops.xstage.moe_grouped_gemm on the shapes of
    `xstage bench moe-gemm` (which runs first, --cli required), timed the same way: W8A8 and the
    per-token W4A8 recipes (INT4 two-level, MXFP4; gate/up-interleaved rows for SwiGLU)."""
    ap = argparse.ArgumentParser(prog="python -m xstage.bench moe-gemm",
                                 description="xstage.moe.grouped_gemm vs `xstage bench moe-gemm`")
    ap.add_argument("--cli", required=True, help="the xstage binary (its bench defines the shapes)")
    ap.add_argument("--models", default="", help="comma list (default: the C++ bench's seven)")
    ap.add_argument("--tokens", "-t", default="1024,8192", help="tokens per expert")
    ap.add_argument("--ops", default="l1_swiglu,l1_bf16,l2_bf16")
    ap.add_argument("--recipes", default="w8a8",
                    help=f"comma list of {', '.join(MOE_RECIPES)} (int4_tok / mxfp4_tok: per-token W4A8)")
    add_timing_args(ap, warmup_ms_default=200.0, rotate=False,   # the C++ bench always rotates over 2 x L2
                    warmup_ms_help="then untimed launches for this long (the C++ bench's default: the sustained clock)")
    ap.add_argument("--check-rows", type=int, default=64, help="seeded rows checked per cell (>= 2)")
    _add_rounds_args(ap, "compare with the first C++ run only (default: the C++ bench runs again on each cell at "
                         "the start of each round of its rows and after the last)")
    ap.add_argument("--json", help="write results here")
    args = ap.parse_args(argv)
    bad = _bad_counts(args, warmup=False)
    if bad is not None:
        return bad
    recipes = [x for x in args.recipes.split(",") if x]
    bad_recipe = [x for x in recipes if x not in MOE_RECIPES]
    if not recipes or bad_recipe:
        print(f"xstage.bench: --recipes takes {', '.join(MOE_RECIPES)}, got '{args.recipes}'", file=sys.stderr)
        return 2
    mods = _import("torch", "xstage", "xstage.moe")
    if mods is None:
        return 3
    torch, xstage, moe = mods
    if not torch.cuda.is_available() or not xstage.extension_status()["moe"]:
        print("xstage.bench: needs a CUDA device and the extension with the MoE kernels", file=sys.stderr)
        return 3
    tmp = tempfile.TemporaryDirectory()

    cli_weights = sorted({MOE_RECIPES[x][kind][2] for x in recipes for kind in ("bf16", "swiglu")})
    wanted = {(MOE_RECIPES[x][kind][2].replace("-", "_"), kind): (x, MOE_RECIPES[x][kind]) for x in recipes
              for kind in ("bf16", "swiglu")}

    def run_cli(models, tokens, ops, quiet, weights=None):
        path = os.path.join(tmp.name, "moe.json")
        cmd = [args.cli, "bench", "moe-gemm", "--json", path, "--tokens", tokens, "--ops", ops, "--weights",
               *(weights or cli_weights),
               "--warmup", str(args.warmup), "--warmup-ms", str(args.warmup_ms), "--iters", str(args.iters)]
        if models:
            cmd += ["--models", models]
        if not quiet:
            print("# " + " ".join(cmd), flush=True)
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL if quiet else None)
        with open(path) as f:
            return json.load(f)

    cli_doc = run_cli(args.models, args.tokens, args.ops, quiet=False)
    def recipe_of(r):
        kind = "swiglu" if r["op"] == "l1_swiglu" else "bf16"
        return wanted.get((r.get("weights", "w8a8"), kind))
    rows = [r for r in cli_doc["results"] if "median_us" in r and recipe_of(r) is not None]
    dev = torch.device("cuda")
    props = torch.cuda.get_device_properties(dev)
    rotate = rotate_bytes(torch, dev, 0)[1]
    print(f"# xstage.bench moe-gemm on {props.name}: torch op and the direct extension call (xstage-ext) vs the C++ "
          f"bench ({_cli_how(args)}), the C++ bench's data "
          f"(uniform fp8 codes, scales in [0.5, 1.5] / 448), median of {args.iters} x {args.rounds} after "
          f"{args.warmup} launches and {args.warmup_ms:.0f} ms of warm-up per row and round")
    print(f"#{'model':>18} {'op':>10} {'recipe':>9} {'tokens':>6} {'E':>4} {'n':>6} {'k':>6} {'sets':>4} "
          f"{'time(us)':>10} {'TFLOP/s':>9} {'C++ TFLOP/s':>11} {'ratio':>6} {'op/ext':>6} {'paired':>6}{verify.CHECK_HEADER}")
    results = []
    failed = 0
    packed_one = {}
    rows.sort(key=lambda x: (recipe_of(x)[1][0], x["n"], x["k"]))   # cells sharing packed weights in a row
    for r in rows:
        E, tokens, n, k, m = r["experts"], r["tokens_per_expert"], r["n"], r["k"], r["m"]
        epilogue = "swiglu" if r["op"] == "l1_swiglu" else "bf16"
        recipe, (fmt, act, cli_w) = recipe_of(r)
        set_bytes = E * n * k // (1 if fmt == "w8a8" else 2) + m * k
        sets = sets_for(rotate, set_bytes)
        data = []
        fp8 = torch.float8_e4m3fn
        w_ref = None   # W4A8: one expert's fp32 weights as the kernel reads them (every expert the same)
        if fmt != "w8a8":
            if (fmt, n, k) not in packed_one:   # rows 1-8x apart in magnitude; prepacked on the host once
                one = (torch.rand(1, n, k) * 2 - 1) * torch.pow(2.0, -(torch.arange(n) % 4).float())[None, :, None]
                packed_one.clear()
                packed_one[(fmt, n, k)] = moe.prepack(one, fmt, reference=True, device=dev)
            pw1 = packed_one[(fmt, n, k)]
            w_ref = pw1.reference[0]
            pw = moe.PackedWeights(fmt, E, n, k, pw1.b.expand(E, *pw1.b.shape[1:]).contiguous(),
                                   pw1.b_scales.expand(E, *pw1.b_scales.shape[1:]).contiguous())
        for _ in range(sets):   # the C++ bench's patterns: fp8 codes of 448 * U(-1, 1), scales U(0.5, 1.5) / 448
            a = ((torch.rand(m, k, device=dev) * 2 - 1) * 448).to(fp8)
            if act == "per_128":
                a_s = ((torch.rand(k // 128, m, device=dev) + 0.5) / 448).contiguous()
            else:
                a_s = ((torch.rand(m, device=dev) + 0.5) / 448).contiguous()
            if fmt == "w8a8":
                b = ((torch.rand(E, n, k, device=dev) * 2 - 1) * 448).to(fp8).view(torch.uint8)
                bs = (torch.rand(E, n // 128, k // 128, device=dev) + 0.5) / 448
                data.append((a, a_s, moe.PackedWeights("w8a8", E, n, k, b, bs)))
            else:
                data.append((a, a_s, pw))
        counts = torch.full((E,), tokens, dtype=torch.int32, device=dev)
        offsets = (torch.arange(E, dtype=torch.int32, device=dev) * tokens).contiguous()
        rw = torch.rand(m, device=dev)

        def call(i):
            a, a_s, w = data[i]
            return moe.grouped_gemm(a, a_s, w, counts, offsets, epilogue=epilogue,
                                    row_weights=rw if epilogue == "swiglu" else None, tokens_per_expert_hint=tokens)
        outs = [(torch.empty((m, n if epilogue == "bf16" else n // 2), device=dev,
                             dtype=torch.bfloat16 if epilogue == "bf16" else fp8),
                 torch.empty((n // 2 // 128, m) if epilogue != "bf16" else (0,), device=dev, dtype=torch.float32))
                for _ in range(sets)]

        def ext(i):
            a, a_s, w = data[i]
            o, os_ = outs[i]
            moe.launch_into(o, os_, a, a_s, w.b, w.b_scales, counts, offsets, rw if epilogue != "bf16" else None,
                            fmt, epilogue, n, k, tokens)
            return o if epilogue == "bf16" else (o, os_)

        def cell_cli():   # the C++ bench on this cell alone, at the start of a round; None if it is not there
            again = [x for x in run_cli(r["model"], str(tokens), r["op"], quiet=True, weights=[cli_w])["results"]
                     if "median_us" in x and recipe_of(x) == recipe_of(r) and x["n"] == n and x["k"] == k]
            return again[0] if len(again) == 1 else None
        fns = {"xstage-torch-op": call, "xstage-ext": ext}
        timed, errors, cli_runs = run_rounds(args.rounds, list(fns), lambda name: _timed(torch, fns[name], sets, args),
                                             None if args.cli_once else cell_cli)
        paired = _op_vs_ext_paired(torch, fns, timed, errors, sets, args)
        cli = cli_reference(cli_runs or [r])   # the first run's row where no per-cell run found the cell
        rec = {"backend": "xstage-torch-op", "model": r["model"], "op": r["op"], "recipe": recipe, "format": fmt,
               "activation_scales": act, "weights": r.get("weights", "w8a8"), "experts": E,
               "tokens_per_expert": tokens, "m": m, "n": n, "k": k, "rotating_sets": sets, "rounds": args.rounds,
               "cli_median_us": cli["median_us"], "cli_medians_us": cli["cli_medians_us"],
               "cli_first_median_us": r["median_us"], "cli_tflops": cli["tflops"],
               "cli_instantiation": cli.get("instantiation"), "cli_correctness": cli.get("correctness")}
        if errors:
            rec.update(error="; ".join(f"{row}: {e}" for row, e in errors.items()), passed=False)
            failed += 1
            results.append(rec)
            print(f" {r['model']:>18} {r['op']:>10} {recipe:>9} {tokens:>6} {E:>4} {n:>6} {k:>6} {sets:>4}   "
                  f"error: {rec['error'][:80]}", flush=True)
            del data, outs
            torch.cuda.empty_cache()
            continue
        corr = _check_moe(torch, moe, call, data[0], counts, rw, epilogue, tokens, args.check_rows,
                          E * 131 + tokens + n, w_ref)
        failed += not corr["passed"]
        ext_poison = outs[0][0].view(torch.uint8) if epilogue != "bf16" else outs[0][0]
        ext_poison.fill_(0x7F if epilogue != "bf16" else float("nan"))
        corr_ext = _check_moe(torch, moe, ext, data[0], counts, rw, epilogue, tokens, args.check_rows,
                              E * 131 + tokens + n, w_ref)
        failed += not corr_ext["passed"]
        op_st = pool_rounds([us for us, _ in timed["xstage-torch-op"]])
        ext_st = pool_rounds([us for us, _ in timed["xstage-ext"]])
        med, med_ext = op_st["median_us"], ext_st["median_us"]
        tflops = 2.0 * E * tokens * n * k / (med * 1e-6) / 1e12
        rec.update({"median_us": med, "min_us": op_st["min_us"], "max_us": op_st["max_us"],
                    "round_medians_us": op_st["round_medians_us"], "tflops": tflops,
                    "vs_cli_tflops": tflops / cli["tflops"], "correctness": corr,
                    "host_us": statistics.median(host for _, host in timed["xstage-torch-op"]),
                    "ext_median_us": med_ext, "ext_round_medians_us": ext_st["round_medians_us"],
                    "op_vs_ext": med / med_ext, "op_vs_ext_paired": paired, "ext_correctness": corr_ext})
        rec["passed"] = moe_cell_passed(rec["vs_cli_tflops"], corr["passed"], corr_ext["passed"],
                                        (cli.get("correctness") or {}).get("passed", False))
        results.append(rec)
        print(f" {r['model']:>18} {r['op']:>10} {recipe:>9} {tokens:>6} {E:>4} {n:>6} {k:>6} {sets:>4} {med:>10.1f} "
              f"{tflops:>9.1f} "
              f"{cli['tflops']:>11.1f} {rec['vs_cli_tflops']:>6.3f} {rec['op_vs_ext']:>6.3f} "
              f"{'-' if paired is None else format(paired, '.3f'):>6}{verify.check_columns(corr)}",
              flush=True)
        del data, outs
        torch.cuda.empty_cache()
    n_ok = sum(r["passed"] for r in results)
    print(f"# acceptance: {n_ok}/{len(results)} cells checked (torch op, xstage-ext and C++ bench) and within 3 % of "
          f"the C++ bench's TFLOP/s ({_cli_how(args)})" + ("" if results else " (no cells)"))
    if args.json:
        _write_json(args.json, {"schema": "xstage.bench.moe_gemm.v1", "tool": "xstage.bench (python)",
                                "torch": torch.__version__, "device": props.name, **stamp(),
                                "config": {"warmup": args.warmup, "warmup_ms": args.warmup_ms, "iters": args.iters,
                                           "rounds": args.rounds, "cli_once": args.cli_once,
                                           "cli_reference": _cli_how(args), "tokens": args.tokens,
                                           "ops": args.ops, "recipes": recipes, "flops": "2*experts*tokens*n*k",
                                           "check_rows": args.check_rows, "acceptance_vs_cli_tflops": MOE_VS_CLI},
                                "cli_results": cli_doc["results"], "results": results,
                                "acceptance": {"passed": bool(results) and n_ok == len(results), "cells": len(results),
                                               "cells_passed": n_ok}})
    if failed:
        return verify.finish("xstage.bench moe-gemm", failed)
    return 0 if results and n_ok == len(results) else 4


def _check_moe(torch, moe, call, data0, counts, rw, epilogue, tokens, rows, seed, w_ref=None):
    """The correctness record of call(0) (uniform routing: `tokens` rows per expert): one call on
    NaN-poisoned outputs, seeded rows against the fp32 product of the dequantised operands
    (A per 128 columns or per token; B per 128 x 128 block, or `w_ref`, the fp32 weights every
    expert shares, for W4A8); the SwiGLU epilogue against silu(gate) * up * row weight, its fp8
    output dequantised with its per-128 scales."""
    import torch.nn.functional as F

    a, a_s, w = data0
    m, n = a.shape[0], w.n
    tol = MOE_BF16_REL_TOL if epilogue == "bf16" else MOE_SWIGLU_REL_TOL
    what = "fp32: A and B dequantised with their scales" + (", SwiGLU x row weight" if epilogue != "bf16" else "")
    try:
        width = n if epilogue == "bf16" else n // 2
        verify.poison_free_blocks(torch, (m, width), torch.bfloat16 if epilogue == "bf16" else torch.float8_e4m3fn,
                                  a.device)
        res = call(0)
        torch.cuda.synchronize()
        pick = verify.sample_rows(m, rows, seed)
        got, ref = [], []
        by_expert = {}
        for p in pick:
            by_expert.setdefault(p // tokens, []).append(p)
        b8 = w.b.view(torch.float8_e4m3fn) if w_ref is None else None
        for e, ps in by_expert.items():
            idx = torch.tensor(ps, device=a.device)
            if a_s.dim() == 1:   # per token
                xa = a.index_select(0, idx).float() * a_s.index_select(0, idx)[:, None]
            else:
                xa = verify.dequant(torch, a.index_select(0, idx).view(torch.float8_e4m3fn),
                                    a_s.index_select(1, idx).t())
            r = xa @ (w_ref if w_ref is not None else verify.dequant(torch, b8[e], w.b_scales[e])).t()
            if epilogue == "bf16":
                got.append(res.index_select(0, idx).float())
                ref.append(r)
            else:
                h, hs = res
                got.append(verify.dequant(torch, h.index_select(0, idx).view(torch.float8_e4m3fn),
                                          hs.index_select(1, idx).t()))
                ref.append(F.silu(r[:, : n // 2]) * r[:, n // 2:] * rw.index_select(0, idx)[:, None])
        full = res if epilogue == "bf16" else moe.dequantize_output(*res)
        return verify.check(torch, torch.cat(got), torch.cat(ref), full, tol, what)
    except RuntimeError as e:
        return verify.failed_record(f"{type(e).__name__}: {e}", tol, what)


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print("usage: python -m xstage.bench {attention,moe-gemm,dit} [options]   (NAME --help for the options)")
        return 0 if argv else 2
    if argv[0] == "attention":
        return bench_attention(argv[1:])
    if argv[0] == "moe-gemm":
        return bench_moe_gemm(argv[1:])
    if argv[0] == "dit":
        from .dit_bench import main as bench_dit  # diffusers DiT models end to end (docs/dit.md)
        return bench_dit(argv[1:])
    print(f"xstage.bench: unknown benchmark '{argv[0]}' (attention, moe-gemm, dit)", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
