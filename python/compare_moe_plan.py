#!/usr/bin/env python3
"""Does the planner pick the fastest tile? For each (model, op, tokens, weights) cell of a planned
`xstage bench moe-gemm --json` run, the kernel it planned, and the rates of the same cell in
runs with tiles forced (--block-m / --block-n), all from one call. The planned kernel's rate is
taken from the forced run that ran the same kernel, so a planned-vs-forced difference between
two runs of the same kernel (noise) does not count. A cell whose planned kernel no forced run
measured is listed and left out of the count.

Usage: python3 python/compare_moe_plan.py --planned P.json --forced F1.json [F2.json ...]
Prints a line per cell (planned kernel, each forced kernel's TFLOP/s, planned / fastest), then
'# planned the fastest forced kernel in X of Y cells; misses: ...'. Exit 2 on unreadable input.
"""
import argparse
import json
import sys

SCHEMA = "xstage.bench.moe_gemm.v1"


def load(path):
    try:
        with open(path) as fh:
            doc = json.load(fh)
    except (OSError, ValueError) as e:
        print(f"compare_moe_plan: cannot read {path}: {e}", file=sys.stderr)
        sys.exit(2)
    if doc.get("schema") != SCHEMA:
        print(f"compare_moe_plan: {path} is not {SCHEMA}", file=sys.stderr)
        sys.exit(2)
    return doc.get("results", [])


def cell(r):
    return (r["model"], r["op"], r["tokens_per_expert"], r.get("weights", "w8a8"))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--planned", required=True, help="bench JSON of the planned run")
    ap.add_argument("--forced", nargs="+", required=True, help="bench JSONs with tiles forced")
    a = ap.parse_args(argv)
    planned = {cell(r): r["instantiation"] for r in load(a.planned)}
    forced = {}  # cell -> {instantiation: best TFLOP/s over the forced runs}
    for f in a.forced:
        for r in load(f):
            rates = forced.setdefault(cell(r), {})
            rates[r["instantiation"]] = max(rates.get(r["instantiation"], 0.0), r["tflops"])
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


if __name__ == "__main__":
    main()
