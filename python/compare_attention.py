#!/usr/bin/env python3
"""Side by side: `xstage bench attention --json` against python/bench_attention_torch.py.

    python3 python/compare_attention.py XSTAGE.json TORCH.json [--json OUT.json]

Matches results on (batch, seqlen, heads, head_dim, dtype, causal) and prints, per shape,
the median TFLOP/s of xstage and of every torch backend, and xstage's ratio to each.
Exit status: 0 ok, 2 bad input.
"""
import argparse
import json
import sys

SCHEMA = "xstage.bench.attention.v1"


def _key(r):
    return (r["batch"], r["seqlen"], r["heads"], r["head_dim"], r["dtype"], bool(r["causal"]))


def load(path):
    try:
        with open(path) as f:
            doc = json.load(f)
    except (OSError, ValueError) as e:
        raise SystemExit(f"compare_attention: cannot read {path}: {e}")
    if doc.get("schema") != SCHEMA:
        raise SystemExit(f"compare_attention: {path} is not {SCHEMA} (schema {doc.get('schema')!r})")
    return doc


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("xstage_json")
    ap.add_argument("torch_json")
    ap.add_argument("--json", help="write the merged table here")
    args = ap.parse_args(argv)
    try:
        ours, theirs = load(args.xstage_json), load(args.torch_json)
    except SystemExit as e:
        print(e, file=sys.stderr)
        return 2

    mine = {_key(r): r for r in ours["results"] if r.get("backend", "xstage") == "xstage"}
    backends = sorted({r["backend"] for r in theirs["results"]})
    base = {(r["backend"],) + _key(r): r for r in theirs["results"]}

    print(f"# xstage ({ours.get('device')}, commit {ours.get('commit')}) vs {theirs.get('tool')} "
          f"(torch {theirs.get('torch')}, cuDNN {theirs.get('cudnn')}, {theirs.get('device')})")
    head = f"#{'seqlen':>7} {'heads':>5} {'d':>4} {'dtype':>5} {'causal':>6} {'xstage':>9}"
    for b in backends:
        head += f" {b:>12} {'ratio':>6}"
    print(head + "   (TFLOP/s, medians; ratio = xstage / backend)")
    rows = []
    for k in sorted(mine, key=lambda k: (k[3], k[2], k[1])):
        r = mine[k]
        line = f" {k[1]:>7} {k[2]:>5} {k[3]:>4} {k[4]:>5} {str(k[5]):>6} {r['tflops']:>9.1f}"
        row = {"batch": k[0], "seqlen": k[1], "heads": k[2], "head_dim": k[3], "dtype": k[4], "causal": k[5],
               "xstage_tflops": r["tflops"], "xstage_median_us": r["median_us"]}
        for b in backends:
            t = base.get((b,) + k)
            if t is None or "tflops" not in t:
                line += f" {'-':>12} {'-':>6}"
                row[b] = None
                continue
            ratio = r["tflops"] / t["tflops"] if t["tflops"] > 0 else float("nan")
            line += f" {t['tflops']:>12.1f} {ratio:>6.2f}"
            row[b] = {"tflops": t["tflops"], "median_us": t["median_us"], "ratio": ratio}
        print(line)
        rows.append(row)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"schema": "xstage.compare.attention.v1", "xstage": {"device": ours.get("device"),
                       "commit": ours.get("commit"), "date": ours.get("date")},
                       "baseline": {"tool": theirs.get("tool"), "torch": theirs.get("torch"),
                                    "cudnn": theirs.get("cudnn"), "date": theirs.get("date")},
                       "rows": rows}, f, indent=2)
            f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
