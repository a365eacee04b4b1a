#!/usr/bin/env python3
"""Tile A/B of scripts/attention-short-ab: several `xstage bench attention --tile T` runs of the
same shapes (same machine call) against cuDNN SDPA, with issue 38's non-causal acceptance.

    python3 python/compare_attention_tiles.py TORCH.json XS_AUTO.json [XS_TILE.json ...]
        [--json OUT.json] [--allow-missing-correctness]

TORCH.json: `python3 python/bench_attention_torch.py --backends cudnn[,fa4] --json` (with fa4 rows:
a FlashAttention-4 column and the judged tile / FA4, its cells gated like cuDNN's); each XS file one
`xstage bench attention --tile T --json` (its config.tile names the column; the first is the
judged one, normally auto). First the correctness gate (docs/checkers.md) over every xstage and
cuDNN cell; then per (d, H, S): each tile's TFLOP/s (auto with what it ran: split, lkv or the block_m), cuDNN, each
tile / cuDNN, the best tile, and whether the judged tile is >= cuDNN (issue 38: >= 1.0x at every
point). Exit status: 0 ok (whatever the numbers), 1 a correctness check failed, 2 bad input.
"""
import argparse
import sys

from xsbench import checker
from xsbench.results import index, ratio, write_json
from xsbench.tables import fmt, mark

SCHEMA = "xstage.bench.attention.v1"
TOOL = "compare_attention_tiles"


def _shape(r):
    return (r["seqlen"], r["heads"], r["head_dim"], r["dtype"], bool(r.get("causal")))


def _label(k, _rec=None):
    return f"S={k[0]} H={k[1]} d={k[2]} {k[3]} causal={k[4]}"


def _auto_tag(r):
    """What the automatic tile ran: split, lkv (long-key), part (partial tiles) or the block_m of the
    staged / 128-row tile."""
    name = (r or {}).get("instantiation") or ""
    if "_split" in name:
        return "split"
    if "_partial" in name:
        return "part"
    if "longkv" in name:
        return "lkv"
    return ((r or {}).get("tile") or {}).get("block_m")


def _ours(r):
    return r.get("backend", "xstage") == "xstage"


def _cudnn(r):
    return r.get("backend") == "torch-cudnn" and "error" not in r


def _fa4(r):
    return r.get("backend") == "fa4" and "error" not in r


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("torch_json")
    ap.add_argument("xstage_json", nargs="+")
    ap.add_argument("--json", help="write the rows here")
    opened = checker.parse_and_open(TOOL, ap, argv,
                                    lambda a: [(a.torch_json, SCHEMA)] + [(p, SCHEMA) for p in a.xstage_json])
    args, docs = opened
    if docs is None:
        return 2
    theirs, ours = docs[0], docs[1:]
    # A run with --no-key-split or --no-partial-tiles is its own column (e.g. auto and
    # auto-nopartial side by side).
    tiles = [str((d.get("config") or {}).get("tile", "?")) +
             ("-nokeysplit" if (d.get("config") or {}).get("key_split") is False else "") +
             ("-nopartial" if (d.get("config") or {}).get("partial_tiles") is False else "") for d in ours]
    if len(set(tiles)) != len(tiles):
        print(f"{TOOL}: two xstage files of the same tile ({', '.join(tiles)})", file=sys.stderr)
        return 2
    fa4 = index(theirs["results"], _shape, keep="last", where=_fa4)
    gate = checker.gate_files(TOOL, args, [("torch", theirs, _shape, _label, _cudnn)] +
                              ([("fa4", theirs, _shape, _label, _fa4)] if fa4 else []) +
                              [(t, d, _shape, _label, _ours) for t, d in zip(tiles, ours)])
    base = index(theirs["results"], _shape, keep="last", where=_cudnn)
    mine = [index(d["results"], _shape, keep="last", where=_ours) for d in ours]
    shapes = sorted(set().union(*[set(m) for m in mine]), key=lambda k: (k[2], k[1], k[0]))
    if not shapes:
        print(f"{TOOL}: no xstage results", file=sys.stderr)
        return 2
    fa4_note = f"; FlashAttention-4 {(theirs.get('fa4') or {}).get('version', '?')}" if fa4 else ""
    print(f"# tiles {', '.join(tiles)} (judged: {tiles[0]}) vs cuDNN SDPA (torch {theirs.get('torch')}, cuDNN "
          f"{theirs.get('cudnn')}){fa4_note}; TFLOP/s medians; ratio = tile / cuDNN")
    print(f"#{'d':>3} {'H':>3} {'S':>6} " + " ".join(f"{t:>12}" for t in tiles) + f" {'cuDNN':>7} " +
          " ".join(f"{t + '/cu':>10}" for t in tiles) + f" {'best':>8} {'>=cuDNN':>7}" +
          (f" {'FA4':>7} {tiles[0] + '/FA4':>10}" if fa4 else ""))
    rows, met, points = [], 0, 0
    for k in shapes:
        s, h, d = k[:3]
        recs = [m.get(k) for m in mine]
        tf = [r.get("tflops") if r else None for r in recs]
        cu = base.get(k, {}).get("tflops")
        ok = all(gate.cell_ok(t, k) for t, r in zip(tiles, recs) if r) and (k not in base or gate.cell_ok("torch", k)) \
            and (k not in fa4 or gate.cell_ok("fa4", k))
        f4 = fa4.get(k, {}).get("tflops")
        cells = []
        for t, r, x in zip(tiles, recs, tf):
            tag = _auto_tag(r)
            cells.append(f"{fmt(x, '.1f') + (f'({tag})' if t == 'auto' and tag else ''):>12}")
        have = [(x, t) for x, t in zip(tf, tiles) if x is not None]
        best = max(have)[1] if have else None
        q = ratio(tf[0], cu)
        if q is not None:
            points += 1
            met += q >= 1.0
        line = (f" {d:>3} {h:>3} {s:>6} " + " ".join(cells) + f" {fmt(cu, '.1f', 7)} " +
                " ".join(f"{fmt(ratio(x, cu), '.2f', 10)}" for x in tf) + f" {best or '-':>8} "
                f"{'-' if q is None else 'yes' if q >= 1.0 else 'NO':>7}" +
                (f" {fmt(f4, '.1f', 7)} {fmt(ratio(tf[0], f4), '.2f', 10)}" if fa4 else ""))
        print(mark(line, ok))
        rows.append({"seqlen": s, "heads": h, "head_dim": d, "dtype": k[3], "causal": k[4], "cudnn_tflops": cu,
                     "tflops": dict(zip(tiles, tf)), "best": best, "judged_ge_cudnn": None if q is None else q >= 1.0,
                     "fa4_tflops": f4, "correctness_ok": ok})
    print(f"# {tiles[0]} >= cuDNN at {met} of {points} points")
    status = gate.summary()
    if args.json:
        doc = {"schema": "xstage.compare.attention-tiles.v1", "tiles": tiles, "judged": tiles[0],
               "baseline": {"tool": theirs.get("tool"), "torch": theirs.get("torch"), "cudnn": theirs.get("cudnn"),
                            "fa4": theirs.get("fa4")},
               "met": met, "points": points, "correctness": {"passed": gate.ok, "verdict": gate.verdict()},
               "rows": rows}
        if checker.write_out(TOOL, args.json, lambda p: write_json(p, doc)):
            return 2
    return status


if __name__ == "__main__":
    sys.exit(main())
