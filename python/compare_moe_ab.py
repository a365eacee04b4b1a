#!/usr/bin/env python3
"""Per-cell A/B of two `xstage bench moe-gemm --json` sets (scripts/moe-w4a8-ab-run): the best
TFLOP/s median of each (model, op, tokens, weights) cell over a set's repetitions (best over
schedules too), new / base per cell, and the range per weight format.

Usage: python3 python/compare_moe_ab.py --base A1.json [A2.json ...] --new B1.json [B2.json ...]
"""
import argparse
import json
import sys


SCHEMA = "xstage.bench.moe_gemm.v1"


def best(files):
    out = {}
    for f in files:
        try:
            with open(f) as fh:
                doc = json.load(fh)
        except (OSError, ValueError) as e:
            sys.exit(f"compare_moe_ab: cannot read {f}: {e}")
        if doc.get("schema") != SCHEMA:
            sys.exit(f"compare_moe_ab: {f} is not {SCHEMA}")
        for r in doc["results"]:
            key = (r["model"], r["op"], r["tokens_per_expert"], r.get("weights", "w8a8"))
            out[key] = max(out.get(key, 0.0), r["tflops"])
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base", nargs="+", required=True)
    ap.add_argument("--new", nargs="+", required=True)
    a = ap.parse_args(argv)
    b, n = best(a.base), best(a.new)
    keys = sorted(set(b) & set(n))
    if not keys:
        sys.exit("compare_moe_ab: no common cells")
    print(f"{'model':>12} {'op':>10} {'tok':>5} {'weights':>11} {'base':>8} {'new':>8} {'new/base':>8}")
    ratios = {}
    for k in keys:
        r = n[k] / b[k]
        ratios.setdefault(k[3], []).append(r)
        print(f"{k[0]:>12} {k[1]:>10} {k[2]:>5} {k[3]:>11} {b[k]:8.1f} {n[k]:8.1f} {r:8.3f}")
    for w, rs in sorted(ratios.items()):
        print(f"# {w}: new/base {min(rs):.3f} .. {max(rs):.3f} over {len(rs)} cells")


if __name__ == "__main__":
    main()
