#!/usr/bin/env python3
"""Side-by-side table of `xstage bench moe-layer` (xstage.bench.moe_layer.v1) and
python/bench_moe_torch.py (xstage.bench.moe_torch.v1) on the same configurations
(model, weights, routing, tokens per rank): medians in us and torch / xstage.

    python3 python/compare_moe_layer.py xstage.json torch.json [--allow-missing-correctness]
The correctness gate comes first (docs/checkers.md): every row that is not skipped, in both
files, must carry a passing correctness record and no non-finite output, and the torch file's
own checks must pass; a failing row gets a `CORRECTNESS FAIL` line and is marked FAILED.
Exits 1 when a correctness check failed, 2 on unreadable or wrong-schema files; configurations
present in only one file are listed, not compared."""
import argparse
import sys

from xsbench import checker, correctness
from xsbench.results import geomean, index
from xsbench.tables import mark

TOOL = "compare_moe_layer"


def key(r):
    return (r["model"], r["weights"], r["routing"], int(r["tokens_per_rank"]))


def label(k, _rec):
    return " ".join(str(x) for x in k)


def ran(r):
    return not r.get("skipped")


def main(argv=None):
    ap = argparse.ArgumentParser(prog="compare_moe_layer.py", description=__doc__.split("\n")[0])
    ap.add_argument("xstage_json")
    ap.add_argument("torch_json")
    correctness.add_flag(ap)
    args = ap.parse_args(argv)
    docs = checker.open_inputs(TOOL, [(args.xstage_json, "xstage.bench.moe_layer.v1"),
                                      (args.torch_json, "xstage.bench.moe_torch.v1")])
    if docs is None:
        return 2
    xs, th = docs
    gate = checker.gate_files(TOOL, args, [("xstage", xs, key, label, ran), ("torch", th, key, label, ran)])
    a = index(xs["results"], key, keep="last", where=ran)
    b = index(th["results"], key, keep="last", where=ran)
    both = sorted(set(a) & set(b))
    print(f"# xstage {xs.get('variant', '')} (commit {xs.get('commit')}) vs torch "
          f"{th.get('torch')} {th.get('gemm_path')} (commit {th.get('commit')}); us, max over ranks of medians")
    print(f"{'model':>19} {'weights':>7} {'routing':>8} {'tokens':>6} {'xstage':>10} {'torch':>10} {'torch/xs':>8}")
    ratios = []
    for k in both:
        x, t = a[k]["median_us"], b[k]["median_us"]
        ratios.append(t / x)
        ok = gate.cell_ok("xstage", k) and gate.cell_ok("torch", k)
        print(mark(f"{k[0]:>19} {k[1]:>7} {k[2]:>8} {k[3]:>6} {x:>10.1f} {t:>10.1f} {t / x:>8.2f}", ok))
    if ratios:
        print(f"# {len(ratios)} configurations: torch/xstage geomean {geomean(ratios):.2f}, min {min(ratios):.2f}, "
              f"max {max(ratios):.2f}; xstage faster in {sum(r > 1 for r in ratios)}")
    only = sorted(set(a) ^ set(b))
    if only:
        print(f"# {len(only)} configurations in one file only, e.g. {only[0]}")
    return gate.summary()


if __name__ == "__main__":
    sys.exit(main())
