#!/usr/bin/env python3
"""Side-by-side table of `xstage bench moe-layer` (xstage.bench.moe_layer.v1) and
python/bench_moe_torch.py (xstage.bench.moe_torch.v1) on the same configurations
(model, weights, routing, tokens per rank): medians in us and torch / xstage.

    python3 python/compare_moe_layer.py xstage.json torch.json
Exits 2 on unreadable or wrong-schema files; configurations present in only one file are
listed, not compared."""
import json
import math
import sys


def load(path, schema):
    try:
        with open(path) as f:
            d = json.load(f)
    except (OSError, ValueError) as e:
        sys.exit(f"compare_moe_layer: cannot read {path}: {e}")
    if d.get("schema") != schema:
        print(f"compare_moe_layer: {path} has schema {d.get('schema')!r}, expected {schema!r}", file=sys.stderr)
        sys.exit(2)
    return d


def key(r):
    return (r["model"], r["weights"], r["routing"], int(r["tokens_per_rank"]))


def main(argv):
    if len(argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    xs = load(argv[1], "xstage.bench.moe_layer.v1")
    th = load(argv[2], "xstage.bench.moe_torch.v1")
    a = {key(r): r for r in xs["results"] if not r.get("skipped")}
    b = {key(r): r for r in th["results"] if not r.get("skipped")}
    both = sorted(set(a) & set(b))
    print(f"# xstage {xs.get('variant', '')} (commit {xs.get('commit')}) vs torch "
          f"{th.get('torch')} {th.get('gemm_path')} (commit {th.get('commit')}); us, max over ranks of medians")
    print(f"{'model':>19} {'weights':>7} {'routing':>8} {'tokens':>6} {'xstage':>10} {'torch':>10} {'torch/xs':>8}")
    ratios = []
    for k in both:
        x, t = a[k]["median_us"], b[k]["median_us"]
        ratios.append(t / x)
        print(f"{k[0]:>19} {k[1]:>7} {k[2]:>8} {k[3]:>6} {x:>10.1f} {t:>10.1f} {t / x:>8.2f}")
    if ratios:
        geo = math.exp(sum(math.log(r) for r in ratios) / len(ratios))
        print(f"# {len(ratios)} configurations: torch/xstage geomean {geo:.2f}, min {min(ratios):.2f}, "
              f"max {max(ratios):.2f}; xstage faster in {sum(r > 1 for r in ratios)}")
    only = sorted(set(a) ^ set(b))
    if only:
        print(f"# {len(only)} configurations in one file only, e.g. {only[0]}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
