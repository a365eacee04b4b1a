#!/usr/bin/env python3
"""W4A8 against W8A8 from one `xstage bench moe-gemm --weights w8a8,w4a8-int4,w4a8-mxfp4` run.

    python3 python/compare_moe_w4a8.py XSTAGE.json [--json OUT.json] [--min-tokens 1024] [--target 0.85]

For every (model, op, tokens per expert) cell: the median TFLOP/s of W8A8 and of each W4A8
format, and W4A8 / W8A8. The acceptance line counts the cells with tokens >= --min-tokens whose
ratio is >= --target (issue 7: W4A8 >= 0.85x our W8A8 at >= 1024 tokens per expert).
The per-token recipe line counts each cell with the layout a deployment would prepack for that
GEMM: int4_rs_lut for the bf16 GEMMs, int4_rs_lut_glu (gate/up-interleaved) for Linear-1 with
SwiGLU, where the run measured it (w4a8_int4_lut_rs_tok otherwise). The MXFP4 per-token recipe
line does the same with w4a8_mxfp4_rs_tok (bf16) and w4a8_mxfp4_rs_tok_glu (Linear-1).
Exit status: 0 ok, 2 bad input.
"""
import argparse
import json
import sys

SCHEMA = "xstage.bench.moe_gemm.v1"
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
    args = ap.parse_args(argv)
    try:
        with open(args.xstage_json) as f:
            doc = json.load(f)
    except (OSError, ValueError) as e:
        print(f"compare_moe_w4a8: cannot read {args.xstage_json}: {e}", file=sys.stderr)
        return 2
    if doc.get("schema") != SCHEMA:
        print(f"compare_moe_w4a8: {args.xstage_json} is not {SCHEMA}", file=sys.stderr)
        return 2
    cells = {}
    order = []
    for r in doc["results"]:
        key = (r["model"], r["op"], r["tokens_per_expert"])
        if key not in cells:
            cells[key] = {}
            order.append(key)
        cells[key][r.get("weights", "w8a8")] = r
    print(f"# W4A8 / W8A8, xstage {doc.get('device')} commit {doc.get('commit')} {doc.get('date')} "
          f"(TFLOP/s medians, same problem: 2*E*tokens*n*k)")
    head = f"#{'model':>17} {'op':>10} {'tokens':>6} {'w8a8':>8}"
    for fmt in FORMATS:
        head += f" {fmt:>11} {'ratio':>6}"
    print(head + "   instantiations (w8a8 / w4a8)")
    rows, acc = [], {fmt: [0, 0] for fmt in FORMATS + list(RECIPES)}
    for key in order:
        c = cells[key]
        base = c.get("w8a8")
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
                acc[fmt][0] += ratio >= args.target
        for recipe in RECIPES:
            rf = recipe_format(recipe, key[1], c)
            if rf in c and base and base["tflops"] > 0 and key[2] >= args.min_tokens:
                acc[recipe][1] += 1
                acc[recipe][0] += c[rf]["tflops"] / base["tflops"] >= args.target
        insts = [c[w].get("instantiation", "?") for w in ["w8a8"] + FORMATS if w in c]
        print(line + "   " + " / ".join(dict.fromkeys(insts)))
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
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"schema": "xstage.compare.moe_w4a8.v1", "device": doc.get("device"),
                       "commit": doc.get("commit"), "date": doc.get("date"), "target": args.target,
                       "min_tokens": args.min_tokens, "rows": rows,
                       "acceptance": {fmt: {"passed": acc[fmt][0], "cells": acc[fmt][1]}
                                      for fmt in FORMATS + list(RECIPES)}},
                      f, indent=2)
            f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
