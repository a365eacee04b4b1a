#!/usr/bin/env python3
"""Per-cell A/B of builds of the attention kernels (scripts/ab-run with `attention` bench lines):
several `xstage bench attention --json` sets of the same shapes, one set per build, each set one
or more repetitions from the same machine call.

    python3 python/compare_attention_ab.py --base A1.json [A2.json ...]
        --variant NAME B1.json [B2.json ...] [--variant NAME2 C1.json ...]
        [--allow-missing-correctness]

Per cell (head dim, heads, S, q_len, dtype, causal, causal order) each set's best TFLOP/s median
over its repetitions (best, as the repetitions see the same work and differ by clock and
neighbours), each variant / base (> 1: the variant is faster), and per variant the geomean,
range and the count of cells at or above base. The correctness gate comes first
(docs/checkers.md): every record must carry a passing correctness record; a failing record gets
a `CORRECTNESS FAIL` line and is left out. Exit status: 0 ok (whatever the numbers), 1 a
correctness check failed or a variant has no cell in common with base, 2 bad input.
"""
import argparse
import statistics
import sys

from xsbench import checker, correctness
from xsbench.keys import ATTENTION
from xsbench.results import best_rate

TOOL = "compare_attention_ab"


def cell(r):
    """One cell of `xstage bench attention`: (d, H, S, q_len, dtype, causal, causal order)."""
    causal = bool(r.get("causal"))
    return (r["head_dim"], r["heads"], r["seqlen"], r.get("q_len") or r["seqlen"], r.get("dtype", "bf16"), causal,
            (r.get("causal_order") or "") if causal else "")


def label(k, _r=None):
    d, h, s, q, dt, causal, order = k
    return f"d={d} H={h} S={s}" + (f" q={q}" if q != s else "") + f" {dt}" + (f" causal {order}".rstrip() if causal else "")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base", nargs="+", required=True, help="the reference build's bench files")
    ap.add_argument("--variant", nargs="+", action="append", required=True, metavar=("NAME", "FILE"),
                    help="a variant's name, then its bench files (repeat for more variants)")
    correctness.add_flag(ap)
    a = ap.parse_args(argv)
    sets = [("base", a.base)]
    for v in a.variant:
        if len(v) < 2:
            print(f"{TOOL}: --variant {v[0]} names no file", file=sys.stderr)
            return 2
        if v[0] in {n for n, _ in sets}:
            print(f"{TOOL}: variant name '{v[0]}' given twice", file=sys.stderr)
            return 2
        sets.append((v[0], v[1:]))
    docs = {}
    for name, paths in sets:
        docs[name] = checker.open_inputs(TOOL, [(p, ATTENTION) for p in paths])
        if docs[name] is None:
            return 2
    gate = checker.gate_files(TOOL, a, [(f"{name}:{p}", doc, cell, label, None)
                                        for name, paths in sets for p, doc in zip(paths, docs[name])])
    roles = {name: [f"{name}:{p}" for p in paths] for name, paths in sets}

    def rates(name):
        out = {}
        for role, doc in zip(roles[name], docs[name]):
            one = best_rate([doc], cell, where=lambda r, role=role: gate.cell_ok(role, cell(r)))
            for k, v in one.items():
                out[k] = max(out.get(k, v), v)
        return out

    rate = {name: rates(name) for name, _ in sets}
    names = [n for n, _ in sets[1:]]
    keys = sorted(rate["base"], key=lambda k: (k[0], k[5], k[6], k[4], k[1], k[2], k[3]))
    print(f"# {TOOL}: TFLOP/s = best median over a set's files; ratio = variant / base (> 1: faster); "
          f"base: {len(a.base)} file(s), " + ", ".join(f"{n}: {len(p)}" for n, p in sets[1:]))
    print(f"{'cell':>36} {'base':>8}" + "".join(f" {n:>9} {'ratio':>6}" for n in names))
    ratios = {n: [] for n in names}
    for k in keys:
        b = rate["base"][k]
        line = f"{label(k):>36} {b:8.1f}"
        for n in names:
            v = rate[n].get(k)
            if v is None:
                line += f" {'-':>9} {'-':>6}"
            else:
                ratios[n].append(v / b)
                line += f" {v:9.1f} {v / b:6.3f}"
        print(line)
    rc = 0
    for n in names:
        rs = ratios[n]
        if not rs:
            print(f"{TOOL}: variant {n} has no cell in common with base (that passed its check)", file=sys.stderr)
            rc = 1
            continue
        print(f"# {n}/base: geomean {statistics.geometric_mean(rs):.3f}, {min(rs):.3f} .. {max(rs):.3f}, "
              f">= base at {sum(r >= 1.0 for r in rs)} of {len(rs)} cells")
    return max(rc, gate.summary())


if __name__ == "__main__":
    sys.exit(main())
