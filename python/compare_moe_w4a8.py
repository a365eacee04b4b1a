#!/usr/bin/env python3
"""W4A8 against W8A8 from one `xstage bench moe-gemm --weights w8a8,w4a8-int4,w4a8-mxfp4` run.

    python3 python/compare_moe_w4a8.py XSTAGE.json [--json OUT.json] [--min-tokens 1024] [--target 0.85]
        [--allow-missing-correctness]

For every (model, op, tokens per expert) cell: the median TFLOP/s of W8A8 and of each W4A8
format, and W4A8 / W8A8. The acceptance line counts the cells with tokens >= --min-tokens whose
ratio is >= --target (issue 7: W4A8 >= 0.85x our W8A8 at >= 1024 tokens per expert).
The per-token recipe line counts each cell with the layout a deployment would prepack for that
GEMM: int4_rs_lut for the bf16 GEMMs, int4_rs_lut_glu (gate/up-interleaved) for Linear-1 with
SwiGLU, where the run measured it (w4a8_int4_lut_rs_tok otherwise). The MXFP4 per-token recipe
line does the same with w4a8_mxfp4_rs_tok (bf16) and w4a8_mxfp4_rs_tok_glu (Linear-1).
The correctness gate comes first (docs/checkers.md): every record must carry a passing
correctness record and no non-finite output; a failing one gets a `CORRECTNESS FAIL` line, its
row is marked FAILED, and its ratio (and every ratio against a failed W8A8 record) counts as a
miss. Exit status: 0 ok, 1 a correctness check failed, 2 bad input.
"""
import argparse
import sys

from xsbench import checker
from xsbench.keys import MOE_GEMM, moe_gemm_cell, moe_gemm_problem
from xsbench.results import group, write_json
from xsbench.tables import mark, pair_header

TOOL = "compare_moe_w4a8"
FORMATS = ["w4a8_int4", "w4a8_int4_rs", "w4a8_int4_lut_rs", "w4a8_int4_lut_rs_tok", "w4a8_int4_lut_rs_tok_glu",
           "w4a8_mxfp4", "w4a8_mxfp4_rs", "w4a8_mxfp4_rs_tok", "w4a8_mxfp4_rs_tok_glu"]
# Recipes: name -> (bf16 format, Linear-1 format preferred where measured, Linear-1 fallback or None)
RECIPES = {
    "per_token_recipe": ("w4a8_int4_lut_rs_tok", "w4a8_int4_lut_rs_tok_glu", "w4a8_int4_lut_rs_tok"),
    "mxfp4_per_token_recipe": ("w4a8_mxfp4_rs_tok", "w4a8_mxfp4_rs_tok_glu", None),
}


def recipe_format(recipe, op, cell):
    bf16, glu, fallback = RECIPES[recipe]
    if op != "l1_swiglu":
        return bf16
    return glu if glu in cell else fallback


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("xstage_json")
    ap.add_argument("--json", help="write the table here")
    ap.add_argument("--min-tokens", type=int, default=1024)
    ap.add_argument("--target", type=float, default=0.85)
    args, docs = checker.parse_and_open(TOOL, ap, argv, lambda a: [(a.xstage_json, MOE_GEMM)])
    if docs is None:
        return 2
    doc = docs[0]
    gate = checker.gate_files(TOOL, args, [("xstage", doc, moe_gemm_cell, lambda k, r: " ".join(map(str, k)), None)])
    cells = {k: {r.get("weights", "w8a8"): r for r in rs} for k, rs in group(doc["results"], moe_gemm_problem).items()}
    order = list(cells)
    ok = lambda key, w: gate.cell_ok("xstage", key + (w,))  # noqa: E731
    print(f"# W4A8 / W8A8, xstage {doc.get('device')} commit {doc.get('commit')} {doc.get('date')} "
          f"(TFLOP/s medians, same problem: 2*E*tokens*n*k)")
    print(pair_header(f"#{'model':>17} {'op':>10} {'tokens':>6} {'w8a8':>8}", FORMATS, 11,
                      "   instantiations (w8a8 / w4a8)"))
    rows, acc = [], {fmt: [0, 0] for fmt in FORMATS + list(RECIPES)}
    for key in order:
        c = cells[key]
        base = c.get("w8a8")
        cell_ok = all(ok(key, w) for w in c)
        line = f" {key[0]:>17} {key[1]:>10} {key[2]:>6} {base['tflops'] if base else float('nan'):>8.1f}"
        row = {"model": key[0], "op": key[1], "tokens_per_expert": key[2],
               "w8a8_tflops": base["tflops"] if base else None}
        for fmt in FORMATS:
            r = c.get(fmt)
            if r is None:
                line += f" {'-':>11} {'-':>6}"
                continue
            ratio = r["tflops"] / base["tflops"] if base and base["tflops"] > 0 else None
            line += f" {r['tflops']:>11.1f} {('%.2f' % ratio) if ratio is not None else '-':>6}"
            row[fmt + "_tflops"] = r["tflops"]
            row[fmt + "_ratio"] = ratio
            row[fmt + "_nonfinite"] = r.get("nonfinite")
            if ratio is not None and key[2] >= args.min_tokens:
                acc[fmt][1] += 1
                acc[fmt][0] += ratio >= args.target and ok(key, fmt) and ok(key, "w8a8")
        for recipe in RECIPES:
            rf = recipe_format(recipe, key[1], c)
            if rf in c and base and base["tflops"] > 0 and key[2] >= args.min_tokens:
                acc[recipe][1] += 1
                acc[recipe][0] += c[rf]["tflops"] / base["tflops"] >= args.target and ok(key, rf) and ok(key, "w8a8")
        insts = [c[w].get("instantiation", "?") for w in ["w8a8"] + FORMATS if w in c]
        row["correctness_ok"] = cell_ok
        print(mark(line + "   " + " / ".join(dict.fromkeys(insts)), cell_ok))
        rows.append(row)
    for fmt in FORMATS:
        ok, n = acc[fmt]
        if n:
            print(f"# {fmt}: {ok}/{n} cells with >= {args.min_tokens} tokens/expert at >= {args.target:.2f}x W8A8")
    for recipe, (bf16, glu, fallback) in RECIPES.items():
        ok, n = acc[recipe]
        if n:
            print(f"# {recipe} ({bf16} for bf16, {glu} for SwiGLU"
                  f"{' where measured' if fallback else ''}): "
                  f"{ok}/{n} cells with >= {args.min_tokens} tokens/expert at >= {args.target:.2f}x W8A8")
    status = gate.summary()
    if args.json:
        out = {"schema": "xstage.compare.moe_w4a8.v1", "device": doc.get("device"), "commit": doc.get("commit"),
               "date": doc.get("date"), "target": args.target, "min_tokens": args.min_tokens,
               "correctness": {"passed": gate.ok, "verdict": gate.verdict()}, "rows": rows,
               "acceptance": {fmt: {"passed": acc[fmt][0], "cells": acc[fmt][1]} for fmt in FORMATS + list(RECIPES)}}
        if checker.write_out(TOOL, args.json, lambda p: write_json(p, out)):
            return 2
    return status


if __name__ == "__main__":
    sys.exit(main())
