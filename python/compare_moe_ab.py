#!/usr/bin/env python3
"""Per-cell A/B of two `xstage bench moe-gemm --json` sets (scripts/ab-run): the best
TFLOP/s median of each (model, op, tokens, weights) cell over a set's repetitions (best over
schedules too), new / base per cell, and the range per weight format.

Usage: python3 python/compare_moe_ab.py --base A1.json [A2.json ...] --new B1.json [B2.json ...]
       [--allow-missing-correctness]

The correctness gate comes first (docs/checkers.md): every record of every file must carry a
passing correctness record and no non-finite output; a failing record gets a `CORRECTNESS
FAIL` line and its rate is left out. Exit status: 0 ok, 1 a correctness check failed or no
common cells, 2 bad input.
"""
import argparse
import sys

from xsbench import checker, correctness
from xsbench.keys import MOE_GEMM, moe_gemm_cell
from xsbench.results import best_rate

TOOL = "compare_moe_ab"


def open_sets(args, sets):
    """{set name: [docs]} and the gate over all their records; None on bad input."""
    docs = {}
    for name, paths in sets:
        docs[name] = checker.open_inputs(TOOL, [(p, MOE_GEMM) for p in paths])
        if docs[name] is None:
            return None, None
    return docs, checker.gate_records(TOOL, args, [(f"{name}:{p}", doc) for name, paths in sets
                                                   for p, doc in zip(paths, docs[name])])


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base", nargs="+", required=True)
    ap.add_argument("--new", nargs="+", required=True)
    correctness.add_flag(ap)
    a = ap.parse_args(argv)
    docs, gate = open_sets(a, [("base", a.base), ("new", a.new)])
    if docs is None:
        return 2
    b, n = (best_rate(docs[s], moe_gemm_cell, where=gate.record_ok) for s in ("base", "new"))
    keys = sorted(set(b) & set(n))
    if not keys:
        gate.summary()
        print("compare_moe_ab: no common cells (that passed their correctness check)", file=sys.stderr)
        return 1
    print(f"{'model':>12} {'op':>10} {'tok':>5} {'weights':>11} {'base':>8} {'new':>8} {'new/base':>8}")
    ratios = {}
    for k in keys:
        r = n[k] / b[k]
        ratios.setdefault(k[3], []).append(r)
        print(f"{k[0]:>12} {k[1]:>10} {k[2]:>5} {k[3]:>11} {b[k]:8.1f} {n[k]:8.1f} {r:8.3f}")
    for w, rs in sorted(ratios.items()):
        print(f"# {w}: new/base {min(rs):.3f} .. {max(rs):.3f} over {len(rs)} cells")
    return gate.summary()


if __name__ == "__main__":
    sys.exit(main())
