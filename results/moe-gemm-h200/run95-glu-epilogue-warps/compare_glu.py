#!/usr/bin/env python3
"""Per-sample ratios of run 95 (run from a folder holding the extracted ab/ of ab.tgz):
new/base time of the glu tile, and glu / W8A8 throughput per binary and sample."""
import json


def load(f):
    return {(x["model"], x["tokens_per_expert"], x["weights"]): x["median_us"] for x in json.load(open(f))["results"]}


runs = {(v, i): load(f"ab/b0-{v}-{i}.json") for v in ("base", "new") for i in (1, 2)}
keys = sorted({(m, t) for (m, t, w) in runs[("base", 1)]})
G = "w4a8_int4_lut_rs_tok_glu"
print(f"{'model':>18} {'tok':>5} | {'new/base time s1':>16} {'s2':>6} | {'glu/w8a8 base s1':>16} {'s2':>6} | {'glu/w8a8 new s1':>15} {'s2':>6}")
cnt = {"base": 0, "new": 0}
for m, t in keys:
    a = [runs[("new", i)][(m, t, G)] / runs[("base", i)][(m, t, G)] for i in (1, 2)]
    rb = [runs[("base", i)][(m, t, "w8a8")] / runs[("base", i)][(m, t, G)] for i in (1, 2)]
    rn = [runs[("new", i)][(m, t, "w8a8")] / runs[("new", i)][(m, t, G)] for i in (1, 2)]
    cnt["base"] += sum(r >= 0.85 for r in rb)
    cnt["new"] += sum(r >= 0.85 for r in rn)
    print(f"{m:>18} {t:>5} | {a[0]:16.3f} {a[1]:6.3f} | {rb[0]:16.3f} {rb[1]:6.3f} | {rn[0]:15.3f} {rn[1]:6.3f}")
print("cells >= 0.85x W8A8 (both samples, 14 cells each):", cnt)
