#!/usr/bin/env python3
"""Side by side: `xstage bench attention --json` against python/bench_attention_torch.py.

    python3 python/compare_attention.py XSTAGE.json TORCH.json [--json OUT.json] [--allow-missing-correctness]

First the correctness gate (docs/checkers.md): every xstage cell and every torch cell that ran
(a backend that refused a shape records an error and is not compared) must carry a passing
correctness record and no non-finite output; each failing cell gets a `CORRECTNESS FAIL` line
and is marked FAILED in the table. Then, matching results on (batch, seqlen, heads, head_dim,
dtype, causal), per shape the median TFLOP/s of xstage and of every torch backend, and xstage's
ratio to each. The baseline's backends are its columns: torch-cudnn, torch-flash, ... and fa4
(flash-attn-4's own kernel, with its version in the header) where the baseline ran it; fa4
cells pass the same gate (a failed fa4 check fails the comparison), and a baseline that skipped
fa4 says why in one line. Exit status: 0 ok, 1 a correctness check failed, 2 bad input.
"""
import sys

from xsbench import checker
from xsbench.results import index, write_json
from xsbench.tables import fmt, mark, pair_header

SCHEMA = "xstage.bench.attention.v1"
TOOL = "compare_attention"


def _key(r):
    return (r["batch"], r["seqlen"], r["heads"], r["head_dim"], r["dtype"], bool(r["causal"]))


def _bkey(r):
    return (r["backend"],) + _key(r)


def _label(k, _rec=None):
    return " ".join([str(x) for x in k[:-6]] + [f"B={k[-6]} S={k[-5]} H={k[-4]} d={k[-3]} {k[-2]} causal={k[-1]}"])


def _ours(r):
    return r.get("backend", "xstage") == "xstage"


def _ran(r):
    return "error" not in r


def main(argv=None):
    opened = checker.parse_and_open_pair(TOOL, __doc__.split("\n")[0], argv, SCHEMA, "write the merged table here")
    if opened is None:
        return 2
    args, ours, theirs = opened
    gate = checker.gate_files(TOOL, args, [("xstage", ours, _key, _label, _ours), ("torch", theirs, _bkey, _label, _ran)])

    mine = index(ours["results"], _key, keep="last", where=_ours)
    backends = sorted({r["backend"] for r in theirs["results"] if "backend" in r})
    base = index(theirs["results"], _bkey, keep="last")

    fa4 = theirs.get("fa4") if isinstance(theirs.get("fa4"), dict) else None
    fa4_text = f", flash-attn-4 {fa4.get('version')}" if fa4 and fa4.get("available") else ""
    print(f"# xstage ({ours.get('device')}, commit {ours.get('commit')}) vs {theirs.get('tool')} "
          f"(torch {theirs.get('torch')}, cuDNN {theirs.get('cudnn')}{fa4_text}, {theirs.get('device')})")
    skipped = (theirs.get("config") or {}).get("skipped") or {}
    for b, why in sorted(skipped.items()) if isinstance(skipped, dict) else []:
        print(f"# {b} skipped by the baseline: {why}")
    print(pair_header(f"#{'seqlen':>7} {'heads':>5} {'d':>4} {'dtype':>5} {'causal':>6} {'xstage':>9}", backends, 12,
                      "   (TFLOP/s, medians; ratio = xstage / backend)"))
    rows = []
    for k in sorted(mine, key=lambda k: (k[3], k[2], k[1])):
        r = mine[k]
        ok = gate.cell_ok("xstage", k)
        line = f" {k[1]:>7} {k[2]:>5} {k[3]:>4} {k[4]:>5} {str(k[5]):>6} {fmt(r.get('tflops'), '.1f', 9)}"
        row = {"batch": k[0], "seqlen": k[1], "heads": k[2], "head_dim": k[3], "dtype": k[4], "causal": k[5],
               "xstage_tflops": r.get("tflops"), "xstage_median_us": r.get("median_us"), "correctness_ok": ok}
        for b in backends:
            t = base.get((b,) + k)
            if t is None or "tflops" not in t:
                line += f" {'-':>12} {'-':>6}"
                row[b] = None
                continue
            ratio = r["tflops"] / t["tflops"] if t["tflops"] > 0 else float("nan")
            bok = gate.cell_ok("torch", (b,) + k)
            ok = ok and bok
            line += f" {t['tflops']:>12.1f} {ratio:>6.2f}"
            row[b] = {"tflops": t["tflops"], "median_us": t["median_us"], "ratio": ratio, "correctness_ok": bok}
        print(mark(line, ok))
        rows.append(row)
    status = gate.summary()
    if args.json:
        doc = {"schema": "xstage.compare.attention.v1",
               "xstage": {"device": ours.get("device"), "commit": ours.get("commit"), "date": ours.get("date")},
               "baseline": {"tool": theirs.get("tool"), "torch": theirs.get("torch"), "cudnn": theirs.get("cudnn"),
                            "fa4": fa4, "skipped": skipped if isinstance(skipped, dict) else {},
                            "date": theirs.get("date")},
               "correctness": {"passed": gate.ok, "verdict": gate.verdict()}, "rows": rows}
        if checker.write_out(TOOL, args.json, lambda p: write_json(p, doc)):
            return 2
    return status


if __name__ == "__main__":
    sys.exit(main())
