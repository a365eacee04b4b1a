#!/usr/bin/env python3
"""Per-block and fixed cost of attention launches: a least-squares line through median time
against key blocks, from key-length sweeps at a fixed query length (docs/attention.md §Key groups,
"One round of tiles").

    xstage bench attention -d 64 --tile rows128 --q-len 1024 -H 12 -S 128,256,...,2048 --json xs.json
    python3 python/bench_attention_torch.py --backends cudnn --q-len 1024 --heads 12 --head-dims 64 \\
        --seqlens 128,256,...,2048 --json torch.json
    python3 python/fit_attention_steps.py xs.json torch.json [--block-n 128] [--json OUT]

A line is one launch configuration: the file, the backend, xstage's instantiation, dtype, head
dim, heads, q_len, batch and causal. Its points are the cells over the key length (`seqlen`),
counted in key blocks: xstage's own block_n (the result's `tile`), else --block-n (PyTorch's
backends do not report one). Per line: µs per block (the slope), µs at zero blocks (the
intercept), the largest residual, the points. A line needs 3 or more distinct block counts; with
fewer it is listed as too short. The correctness gate comes first (docs/checkers.md): a cell
without a passing correctness record is left out, with a `CORRECTNESS FAIL` line.
Exit status: 0 ok, 1 a correctness check failed, 2 bad input.
"""
import argparse
import math
import sys

from xsbench import checker
from xsbench.keys import ATTENTION
from xsbench.results import write_json

TOOL = "fit_attention_steps"
MIN_POINTS = 3


def line_key(r):
    """The launch configuration a cell belongs to (everything but the key length)."""
    return (r.get("backend", "xstage"), r.get("instantiation") or "", r.get("dtype", "bf16"), r["head_dim"],
            r["heads"], r.get("q_len") or r["seqlen"], r.get("batch", 1), bool(r.get("causal")))


def cell_key(r):
    return line_key(r) + (r["seqlen"],)


def label(k, _r=None):
    backend, inst, dtype, d, h, q, b, causal, *kv = k
    text = f"{inst or backend} {dtype} d={d} H={h} q={q}" + (f" B={b}" if b != 1 else "") + (" causal" if causal else "")
    return text + (f" kv={kv[0]}" if kv else "")


def fit(points):
    """(slope, intercept, largest |residual|) of y = slope * x + intercept over [(x, y), ...]."""
    n = len(points)
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    sxx = sum((x - mx) ** 2 for x, _ in points)
    slope = sum((x - mx) * (y - my) for x, y in points) / sxx
    icpt = my - slope * mx
    return slope, icpt, max(abs(slope * x + icpt - y) for x, y in points)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("bench_json", nargs="+", help="xstage.bench.attention.v1 files (xstage or PyTorch)")
    ap.add_argument("--block-n", type=int, default=128,
                    help="keys per block where a result names no tile (PyTorch's backends; default 128)")
    ap.add_argument("--json", help="write the lines here")
    args, docs = checker.parse_and_open(TOOL, ap, argv, lambda a: [(p, ATTENTION) for p in a.bench_json])
    if docs is None:
        return 2
    if args.block_n < 1:
        print(f"{TOOL}: --block-n must be >= 1", file=sys.stderr)
        return 2
    gate = checker.gate_files(TOOL, args, [(p, d, cell_key, label, lambda r: "median_us" in r)
                                           for p, d in zip(args.bench_json, docs)])
    lines = {}
    for path, doc in zip(args.bench_json, docs):
        for r in doc["results"]:
            if "median_us" not in r or not gate.cell_ok(path, cell_key(r)):
                continue
            bn = (r.get("tile") or {}).get("block_n") or args.block_n
            blocks = math.ceil(r["seqlen"] / bn)
            lines.setdefault((path, line_key(r)), []).append((blocks, r["median_us"], r["seqlen"]))
    if not lines:
        print(f"{TOOL}: no timed cell passed its check", file=sys.stderr)
        return max(1 if not gate.ok else 2, gate.summary())
    print(f"# {TOOL}: median µs = slope x key blocks + intercept, least squares over each line's key lengths")
    print(f"# {'launch':<52} {'points':>6} {'us/block':>9} {'us at 0':>8} {'max resid':>9}  file")
    out = []
    for (path, k), pts in sorted(lines.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        xs = sorted({b for b, _, _ in pts})
        rec = {"file": path, "launch": label(k), "points": len(pts), "key_lengths": sorted(s for _, _, s in pts)}
        if len(xs) < MIN_POINTS:
            print(f"  {label(k):<52} {len(pts):>6} {'too short (< 3 block counts)':>28}  {path}")
            rec["fit"] = None
        else:
            slope, icpt, resid = fit([(b, t) for b, t, _ in pts])
            print(f"  {label(k):<52} {len(pts):>6} {slope:9.3f} {icpt:8.2f} {resid:9.2f}  {path}")
            rec["fit"] = {"us_per_block": slope, "us_at_zero_blocks": icpt, "max_residual_us": resid}
        out.append(rec)
    rc = gate.summary()
    if args.json:
        rc = max(rc, checker.write_out(TOOL, args.json, lambda p: write_json(p, {"tool": TOOL, "lines": out})))
    return rc


if __name__ == "__main__":
    sys.exit(main())
