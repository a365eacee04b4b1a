#!/usr/bin/env python3
"""Per-cell A/B of two builds' bench JSON sets (scripts/ab-run), one of two kinds:

  * `xstage bench moe-gemm --json`: the best TFLOP/s median of each (model, op, tokens, weights)
    cell over a set's repetitions (best over schedules too), new / base per cell (> 1: new
    faster), and the range per weight format;
  * `xstage bench moe --json` (the expert-parallel layer, fused and unfused): the median over a
    set's repetitions of each (model, weights, routing, tokens, variant) cell's median us,
    base us / new us per cell (> 1: new faster), and the range and geomean per variant.

Usage: python3 python/compare_moe_ab.py --base A1.json [A2.json ...] --new B1.json [B2.json ...]
       [--allow-missing-correctness]

All files are of one kind. The correctness gate comes first (docs/checkers.md): every record of
every file must carry a passing correctness record and no non-finite output; a failing record
gets a `CORRECTNESS FAIL` line and its time is left out. Exit status: 0 ok, 1 a correctness
check failed or no common cells, 2 bad input.
"""
import argparse
import statistics
import sys

from xsbench import checker, correctness
from xsbench.keys import MOE, MOE_GEMM, moe_gemm_cell, moe_layer_cell
from xsbench.results import InputError, best_rate, load, num, safe_key

TOOL = "compare_moe_ab"


def schema_of(paths):
    """The one kind (MOE_GEMM or MOE) of all `paths`; InputError when mixed or neither."""
    kinds = {load(p, (MOE_GEMM, MOE), results=False)["schema"] for p in paths}
    if len(kinds) != 1:
        raise InputError(f"the files mix {' and '.join(sorted(kinds))}: one kind per A/B")
    return kinds.pop()


def gemm_ab(a, docs):
    gate = checker.gate_records(TOOL, a, [(f"{name}:{p}", doc) for name, paths in (("base", a.base), ("new", a.new))
                                          for p, doc in zip(paths, docs[name])])
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


def layer_times(docs, gate, role_of):
    """{cell: median over the set's files of the cell's median us}, passing records only."""
    per = {}
    for i, doc in enumerate(docs):
        for r in doc["results"]:
            k, us = safe_key(moe_layer_cell, r), num(r.get("median_us"))
            if k is None or us is None or us <= 0 or r.get("skipped") or not gate.cell_ok(role_of(i), k):
                continue
            per.setdefault(k, []).append(us)
    return {k: statistics.median(v) for k, v in per.items()}


def layer_ab(a, docs):
    roles = {"base": [f"base:{p}" for p in a.base], "new": [f"new:{p}" for p in a.new]}
    gate = checker.gate_files(TOOL, a, [(role, doc, moe_layer_cell, lambda k, _r: " ".join(str(x) for x in k),
                                         lambda r: not r.get("skipped"))
                                        for name in ("base", "new") for role, doc in zip(roles[name], docs[name])])
    b, n = (layer_times(docs[s], gate, lambda i, s=s: roles[s][i]) for s in ("base", "new"))
    keys = sorted(set(b) & set(n))
    if not keys:
        gate.summary()
        print("compare_moe_ab: no common cells (that passed their correctness check)", file=sys.stderr)
        return 1
    print(f"# base: {len(a.base)} file(s), new: {len(a.new)}; us = median over a set's files of each cell's "
          "median; ratio = base us / new us (> 1: new faster)")
    print(f"{'model':>20} {'weights':>10} {'routing':>9} {'tokens':>6} {'variant':>22} {'base us':>9} "
          f"{'new us':>9} {'base/new':>8}")
    ratios = {}
    for k in keys:
        r = b[k] / n[k]
        ratios.setdefault(k[4], []).append(r)
        print(f"{k[0]:>20} {k[1]:>10} {k[2]:>9} {k[3]:>6} {k[4]:>22} {b[k]:9.1f} {n[k]:9.1f} {r:8.3f}")
    for v, rs in sorted(ratios.items()):
        print(f"# {v}: base/new {min(rs):.3f} .. {max(rs):.3f}, geomean {statistics.geometric_mean(rs):.3f} "
              f"over {len(rs)} cells")
    return gate.summary()


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base", nargs="+", required=True)
    ap.add_argument("--new", nargs="+", required=True)
    correctness.add_flag(ap)
    a = ap.parse_args(argv)
    try:
        kind = schema_of(a.base + a.new)
    except InputError as e:
        print(f"{TOOL}: {e}", file=sys.stderr)
        return 2
    docs = {}
    for name, paths in (("base", a.base), ("new", a.new)):
        docs[name] = checker.open_inputs(TOOL, [(p, kind) for p in paths])
        if docs[name] is None:
            return 2
    return gemm_ab(a, docs) if kind == MOE_GEMM else layer_ab(a, docs)


if __name__ == "__main__":
    sys.exit(main())
