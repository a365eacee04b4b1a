#!/usr/bin/env python3
"""Does the planner pick the fastest tile? For each (model, op, tokens, weights) cell of a planned
`xstage bench moe-gemm --json` run, the kernel it planned, and the rates of the same cell in
runs with tiles forced (--block-m / --block-n), all from one call. The planned kernel's rate is
taken from the forced run that ran the same kernel, so a planned-vs-forced difference between
two runs of the same kernel (noise) does not count. A cell whose planned kernel no forced run
measured is listed and left out of the count.

Usage: python3 python/compare_moe_plan.py --planned P.json --forced F1.json [F2.json ...]
       [--allow-missing-correctness]
The correctness gate comes first (docs/checkers.md): every record of every file must carry a
passing correctness record and no non-finite output; a failing record gets a `CORRECTNESS
FAIL` line and a forced rate that failed is left out (a wrong kernel is never "the fastest").
Prints a line per cell (planned kernel, each forced kernel's TFLOP/s, planned / fastest), then
'# planned the fastest forced kernel in X of Y cells; misses: ...'. Exit 1 when a correctness
check failed, 2 on unreadable input.
"""
import argparse
import sys

from xsbench import checker, correctness
from xsbench.keys import MOE_GEMM, moe_gemm_cell
from xsbench.results import best_rate, index

TOOL = "compare_moe_plan"


def kernel_cell(r):
    return moe_gemm_cell(r) + (r["instantiation"],)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--planned", required=True, help="bench JSON of the planned run")
    ap.add_argument("--forced", nargs="+", required=True, help="bench JSONs with tiles forced")
    correctness.add_flag(ap)
    a = ap.parse_args(argv)
    docs = checker.open_inputs(TOOL, [(p, MOE_GEMM) for p in [a.planned] + a.forced])
    if docs is None:
        return 2
    gate = checker.gate_records(TOOL, a, [(f"{role}:{path}", doc) for role, path, doc in
                                          zip(["planned"] + ["forced"] * len(a.forced), [a.planned] + a.forced, docs)])
    planned = {k: r["instantiation"] for k, r in index(docs[0]["results"], moe_gemm_cell, keep="last").items()}
    forced = {}  # cell -> {instantiation: best TFLOP/s over the forced runs}
    for (k0, k1, k2, k3, inst), v in best_rate(docs[1:], kernel_cell, where=gate.record_ok).items():
        forced.setdefault((k0, k1, k2, k3), {})[inst] = v
    hits, total, misses, unmeasured = 0, 0, [], []
    print(f"{'model':>18} {'op':>10} {'tok':>5} {'weights':>13} {'planned':>28}  forced (TFLOP/s)  planned/fastest")
    for k in sorted(planned):
        rates = forced.get(k, {})
        inst = planned[k]
        shown = "  ".join(f"{n} {v:.1f}" for n, v in sorted(rates.items()))
        if inst not in rates:
            unmeasured.append(k)
            print(f"{k[0]:>18} {k[1]:>10} {k[2]:>5} {k[3]:>13} {inst:>28}  {shown}  (planned kernel not forced)")
            continue
        fastest = max(rates.values())
        ratio = rates[inst] / fastest
        total += 1
        if ratio >= 1.0:
            hits += 1
        else:
            misses.append((k, ratio))
        print(f"{k[0]:>18} {k[1]:>10} {k[2]:>5} {k[3]:>13} {inst:>28}  {shown}  {ratio:.3f}")
    miss_text = ", ".join(f"{m[0]} {m[1]} {m[2]} {r:.3f}" for m, r in misses) or "none"
    print(f"# planned the fastest forced kernel in {hits} of {total} cells; misses: {miss_text}")
    if unmeasured:
        print(f"# {len(unmeasured)} cells left out: their planned kernel was not among the forced runs")
    return gate.summary()


if __name__ == "__main__":
    sys.exit(main())
