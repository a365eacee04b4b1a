#!/usr/bin/env python3
"""Causal A/B table of scripts/attention-causal-ab: xstage's two causal tile orders (same run,
back to back per shape) against cuDNN SDPA (same machine call), with issue 38's causal acceptance.

    python3 python/compare_attention_causal.py XSTAGE.json TORCH.json [--json OUT.json] [--allow-missing-correctness]

XSTAGE.json: `xstage bench attention --causal --causal-order head-major,longest-first --json`;
TORCH.json: `python3 python/bench_attention_torch.py --causal --backends cudnn --json`.
First the correctness gate (docs/checkers.md) over every causal xstage cell and every cuDNN cell
that ran; then per (d, H, S): TFLOP/s of head-major and longest-first, their ratio, cuDNN, both
ratios to cuDNN, and whether longest-first meets the acceptance: >= 1.0x cuDNN at every point,
>= 600 TFLOP/s (causal FLOP count) at S >= 8192, d = 128. Exit status: 0 ok (whatever the
numbers), 1 a correctness check failed, 2 bad input.
"""
import sys

from xsbench import checker
from xsbench.results import geomean, index, ratio, write_json
from xsbench.tables import fmt, mark

SCHEMA = "xstage.bench.attention.v1"
TOOL = "compare_attention_causal"
ORDERS = ("head-major", "longest-first")
MIN_RATIO = 1.0
MIN_TFLOPS_D128 = 600.0  # at S >= 8192


def _shape(r):
    return (r["seqlen"], r["heads"], r["head_dim"], r["dtype"])


def _ours_key(r):
    return (r.get("causal_order") or "head-major",) + _shape(r)


def _torch_key(r):
    return ("cudnn",) + _shape(r)


def _label(k, _rec=None):
    return f"{k[0]} S={k[1]} H={k[2]} d={k[3]} {k[4]}"


def _ours(r):
    return r.get("backend", "xstage") == "xstage" and bool(r.get("causal"))


def _cudnn(r):
    return r.get("backend") == "torch-cudnn" and bool(r.get("causal")) and "error" not in r


def accepted(s, d, lf, cu):
    """Issue 38's causal acceptance at one point (None without both numbers)."""
    q = ratio(lf, cu)
    if q is None:
        return None
    return q >= MIN_RATIO and not (d == 128 and s >= 8192 and lf < MIN_TFLOPS_D128)


def main(argv=None):
    opened = checker.parse_and_open_pair(TOOL, __doc__.split("\n")[0], argv, SCHEMA, "write the rows here")
    if opened is None:
        return 2
    args, ours, theirs = opened
    gate = checker.gate_files(TOOL, args, [("xstage", ours, _ours_key, _label, _ours),
                                           ("torch", theirs, _torch_key, _label, _cudnn)])
    mine = index(ours["results"], _ours_key, keep="last", where=_ours)
    base = index(theirs["results"], _shape, keep="last", where=_cudnn)
    shapes = sorted({k[1:] for k in mine}, key=lambda k: (k[2], k[1], k[0]))
    if not shapes:
        print(f"{TOOL}: no causal xstage results in {args.xstage_json}", file=sys.stderr)
        return 2

    print(f"# causal: xstage ({ours.get('device')}, commit {ours.get('commit')}) vs cuDNN SDPA (torch "
          f"{theirs.get('torch')}, cuDNN {theirs.get('cudnn')}); TFLOP/s medians by the causal FLOP count")
    print(f"# acceptance (issue 38): longest-first >= {MIN_RATIO:.1f}x cuDNN at every point and >= "
          f"{MIN_TFLOPS_D128:.0f} TFLOP/s at S >= 8192, d = 128")
    print(f"#{'d':>3} {'H':>3} {'S':>6} {'dtype':>5} {'head-major':>10} {'longest-first':>13} {'lf/hm':>6} "
          f"{'cuDNN':>7} {'hm/cuDNN':>8} {'lf/cuDNN':>8} {'accept':>6}")
    rows, gains, met, points = [], [], 0, 0
    for k in shapes:
        s, h, d, dt = k
        hm, lf = (mine.get((o,) + k, {}).get("tflops") for o in ORDERS)
        cu = base.get(k, {}).get("tflops")
        ok = all(gate.cell_ok("xstage", (o,) + k) for o in ORDERS if (o,) + k in mine)
        if k in base:
            ok = ok and gate.cell_ok("torch", ("cudnn",) + k)
        gain = ratio(lf, hm)
        acc = accepted(s, d, lf, cu)
        if gain is not None:
            gains.append(gain)
        if acc is not None:
            points += 1
            met += acc
        line = (f" {d:>3} {h:>3} {s:>6} {dt:>5} {fmt(hm, '.1f', 10)} {fmt(lf, '.1f', 13)} {fmt(gain, '.3f', 6)} "
                f"{fmt(cu, '.1f', 7)} {fmt(ratio(hm, cu), '.2f', 8)} {fmt(ratio(lf, cu), '.2f', 8)} "
                f"{'-' if acc is None else 'yes' if acc else 'NO':>6}")
        print(mark(line, ok))
        rows.append({"seqlen": s, "heads": h, "head_dim": d, "dtype": dt, "head_major_tflops": hm,
                     "longest_first_tflops": lf, "cudnn_tflops": cu, "longest_first_over_head_major": gain,
                     "accept": acc, "correctness_ok": ok})
    g = geomean(gains)
    print(f"# longest-first / head-major: geomean {fmt(g, '.3f')} over {len(gains)} shapes; acceptance met at "
          f"{met} of {points} points")
    status = gate.summary()
    if args.json:
        doc = {"schema": "xstage.compare.attention-causal.v1",
               "xstage": {"device": ours.get("device"), "commit": ours.get("commit"), "date": ours.get("date")},
               "baseline": {"tool": theirs.get("tool"), "torch": theirs.get("torch"), "cudnn": theirs.get("cudnn")},
               "acceptance": {"min_ratio": MIN_RATIO, "min_tflops_d128_s8192": MIN_TFLOPS_D128, "met": met,
                              "points": points},
               "geomean_longest_first_over_head_major": g,
               "correctness": {"passed": gate.ok, "verdict": gate.verdict()}, "rows": rows}
        if checker.write_out(TOOL, args.json, lambda p: write_json(p, doc)):
            return 2
    return status


if __name__ == "__main__":
    sys.exit(main())
