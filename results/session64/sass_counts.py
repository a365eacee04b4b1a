#!/usr/bin/env python3
"""Per-warp instruction counts and stall samples from Nsight Compute's SASS source page
(`ncu -i R --page source --csv --print-source sass`), as used in session 64's probes.

usage: sass_counts.py [--per N] CSV...
  For each CSV: warp instructions executed in all, divided by --per (e.g. 768 = 96 CTAs x 8 consumer
  warps), the opcodes executed exactly --per times (once per consumer warp: the tile's one-off path),
  and the stall samples by reason and by opcode.
"""
import argparse, collections, csv, sys


def num(x):
    try:
        return float(x.replace(",", ""))
    except ValueError:
        return 0.0


def opcode(src):
    t = src.split()
    if not t:
        return "?"
    return (t[1] if t[0].startswith("@") and len(t) > 1 else t[0]).split(".")[0]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--per", type=float, default=768.0, help="divide counts by this many warps (default 768)")
    ap.add_argument("csv", nargs="+")
    a = ap.parse_args()
    for f in a.csv:
        try:
            with open(f, newline="") as fh:
                rows = list(csv.reader(fh))
        except OSError as e:
            sys.exit(f"sass_counts: cannot read {f}: {e.strerror}")
        if len(rows) < 3 or "Instructions Executed" not in rows[1]:
            sys.exit(f"sass_counts: {f} is not an ncu source-page CSV (--page source --csv --print-source sass)")
        hdr = rows[1]
        d = [dict(zip(hdr, r)) for r in rows[2:] if len(r) == len(hdr)]
        stalls = [h for h in hdr if h.startswith("stall_") and "Not Issued" not in h]
        total = sum(num(r["Instructions Executed"]) for r in d)
        samples = sum(num(r["Warp Stall Sampling (All Samples)"]) for r in d)
        once = collections.Counter(opcode(r["Source"]) for r in d if num(r["Instructions Executed"]) == a.per)
        by_reason = collections.Counter()
        by_op = collections.Counter()
        for r in d:
            for s in stalls:
                by_reason[s[6:]] += num(r[s])
            by_op[opcode(r["Source"])] += num(r["Warp Stall Sampling (All Samples)"])
        print(f"== {f}")
        print(f"  SASS instructions {len(d)}, executed {total:.0f} ({total / a.per:.1f} per warp), samples {samples:.0f}")
        print(f"  executed once per warp: {sum(once.values())}: " + ", ".join(f"{k} {v}" for k, v in once.most_common(16)))
        print("  samples by reason: " + ", ".join(f"{k} {v:.0f}" for k, v in by_reason.most_common(8)))
        print("  samples by opcode: " + ", ".join(f"{k} {v:.0f}" for k, v in by_op.most_common(8)))


if __name__ == "__main__":
    main()
