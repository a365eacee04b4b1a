#!/usr/bin/env python3
"""Side by side: `xstage bench moe-gemm --json` against python/bench_moe_gemm_torch.py.

    python3 python/compare_moe_gemm.py XSTAGE.json TORCH.json [--json OUT.json]

Matches (model, Linear, tokens per expert): xstage's l1_swiglu and l1_bf16 against cuBLASLt's
dense l1, xstage's l2_bf16 against l2. Prints the median TFLOP/s of each and xstage / cuBLASLt.
Exit status: 0 ok, 2 bad input.
"""
import argparse
import json
import sys

SCHEMA = "xstage.bench.moe_gemm.v1"


def load(path):
    try:
        with open(path) as f:
            doc = json.load(f)
    except (OSError, ValueError) as e:
        raise SystemExit(f"compare_moe_gemm: cannot read {path}: {e}")
    if doc.get("schema") != SCHEMA:
        raise SystemExit(f"compare_moe_gemm: {path} is not {SCHEMA} (schema {doc.get('schema')!r})")
    return doc


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("xstage_json")
    ap.add_argument("torch_json")
    ap.add_argument("--json", help="write the merged table here")
    args = ap.parse_args(argv)
    try:
        ours, theirs = load(args.xstage_json), load(args.torch_json)
    except SystemExit as e:
        print(e, file=sys.stderr)
        return 2
    base = {(r["model"], r["op"], r["tokens_per_expert"]): r for r in theirs["results"]}
    print(f"# xstage ({ours.get('device')}, commit {ours.get('commit')}) vs {theirs.get('tool')} "
          f"(torch {theirs.get('torch')}, CUDA {theirs.get('cuda')}, {theirs.get('device')})")
    print(f"#{'model':>17} {'op':>10} {'tokens':>6} {'E':>4} {'n':>6} {'k':>6} {'instantiation':>25} {'xstage':>8} {'cuBLASLt':>9} "
          f"{'scaling':>24} {'ratio':>6}   (TFLOP/s, medians; ratio = xstage / cuBLASLt)")
    rows = []
    for r in ours["results"]:
        linear = r["op"].split("_")[0]
        t = base.get((r["model"], linear, r["tokens_per_expert"]))
        row = {"model": r["model"], "op": r["op"], "weights": r.get("weights", "w8a8"),
               "tokens_per_expert": r["tokens_per_expert"], "experts": r["experts"],
               "n": r["n"], "k": r["k"], "xstage_tflops": r["tflops"], "xstage_median_us": r["median_us"],
               "instantiation": r.get("instantiation")}
        if t is None or "tflops" not in t:
            line_t, scaling, ratio = "-", "-", None
        else:
            ratio = r["tflops"] / t["tflops"] if t["tflops"] > 0 else float("nan")
            line_t, scaling = f"{t['tflops']:.1f}", t.get("scaling", "?")
            row.update({"cublaslt_tflops": t["tflops"], "cublaslt_median_us": t["median_us"], "scaling": scaling,
                        "ratio": ratio})
        print(f" {r['model']:>17} {r['op']:>10} {r['tokens_per_expert']:>6} {r['experts']:>4} {r['n']:>6} {r['k']:>6} "
              f"{r.get('instantiation', '?') + ('' if r.get('weights', 'w8a8') == 'w8a8' else ' ' + r['weights']):>25} "
              f"{r['tflops']:>8.1f} {line_t:>9} {scaling:>24} {('%.2f' % ratio) if ratio is not None else '-':>6}")
        rows.append(row)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"schema": "xstage.compare.moe_gemm.v1",
                       "xstage": {"device": ours.get("device"), "commit": ours.get("commit"), "date": ours.get("date")},
                       "baseline": {"tool": theirs.get("tool"), "torch": theirs.get("torch"), "date": theirs.get("date")},
                       "rows": rows}, f, indent=2)
            f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
