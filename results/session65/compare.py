#!/usr/bin/env python3
"""Session 65's A/B table: main's build (base) against the TMA-store epilogue (tma).

Reads DIR/{base,tma}-pN-{group}.json (xstage bench attention; N = 1-9, at least two passes per
binary) and DIR/cudnn-short.json (PyTorch SDPA, optional). Per cell: each binary's median of its
passes' medians, base / tma (> 1: the TMA store is faster), and against cuDNN where it ran. A cell
whose output check failed in any run, or whose record has no correctness entry, is marked x and
left out of the geomeans. Exit 1 if any cell failed its check or is missing a run.

python/compare_attention_ab.py is the project's per-cell build A/B (best rate per set, no cuDNN
column); this script made session 65's ab.txt files and stays as their record.
"""
import json
import math
import os
import re
import statistics
import sys


def key(r, group):
    return (group, r.get("dtype", "bf16"), r["head_dim"], r["seqlen"], r["heads"], r.get("q_len", r["seqlen"]))


def load(path):
    try:
        with open(path) as f:
            return json.load(f)["results"]
    except (OSError, ValueError, KeyError) as e:
        sys.exit(f"compare.py: cannot read {path}: {e}")


def main():
    if len(sys.argv) != 2 or not os.path.isdir(sys.argv[1]):
        sys.exit("usage: compare.py DIR  (DIR holds {base,tma}-pN-{group}.json, N = 1-9)")
    d = sys.argv[1]
    runs = {}  # key -> {binary: [(median, ok)]}
    pat = re.compile(r"^(base|tma)-p([1-9])-(\w+)\.json$")
    files = sorted(f for f in os.listdir(d) if pat.match(f))
    if not files:
        sys.exit(f"compare.py: no {{base,tma}}-pN-*.json in {d}")
    for f in files:
        b, _, g = pat.match(f).groups()
        for r in load(os.path.join(d, f)):
            ok = bool(r.get("correctness", {}).get("passed", False))
            runs.setdefault(key(r, g), {}).setdefault(b, []).append((r["median_us"], ok))
    cudnn = {}
    cp = os.path.join(d, "cudnn-short.json")
    if os.path.exists(cp):
        for r in load(cp):
            if r.get("causal"):
                continue
            ok = bool(r.get("correctness", {}).get("passed", False))  # no record: not verified
            cudnn[key(r, "short")] = (r["median_us"], ok)
    bad = 0
    groups = {}
    print("# base = main (staged epilogue), tma = XSTAGE_ATTN_TMA_STORE; us = median of the passes' medians")
    print("# group dtype d S H q_len | base us (runs) | tma us (runs) | base/tma | cudnn us | cudnn/tma")
    for k in sorted(runs):
        v = runs[k]
        line = f"{k[0]:6s} {k[1]:4s} {k[2]:3d} {k[3]:5d} {k[4]:3d} {k[5]:5d} |"
        meds = {}
        okall = True
        for b in ("base", "tma"):
            rs = v.get(b, [])
            okall &= len(rs) >= 2 and all(ok for _, ok in rs)
            meds[b] = statistics.median(m for m, _ in rs) if rs else float("nan")
            line += f" {meds[b]:8.2f} ({' '.join(f'{m:.2f}' for m, _ in rs)}) |"
        ratio = meds["base"] / meds["tma"]
        line += f" {ratio:6.3f}"
        if k in cudnn:
            cu, cok = cudnn[k]
            okall &= cok
            line += f" | {cu:8.2f} | {cu / meds['tma']:6.3f} (base {cu / meds['base']:6.3f})"
        if not okall:
            line += "  x"
            bad += 1
        else:
            groups.setdefault(k[0], []).append(ratio)
        print(line)
    print()
    allr = []
    for g, rs in sorted(groups.items()):
        allr += rs
        gm = math.exp(sum(math.log(r) for r in rs) / len(rs))
        print(f"geomean base/tma {g:6s}: {gm:.4f} over {len(rs)} cells (min {min(rs):.3f}, max {max(rs):.3f})")
    if allr:
        gm = math.exp(sum(math.log(r) for r in allr) / len(allr))
        print(f"geomean base/tma all   : {gm:.4f} over {len(allr)} cells")
    print(f"cells failing a check or missing a run: {bad}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
