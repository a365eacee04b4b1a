#!/usr/bin/env python3
"""Causal A/B table of scripts/attention-causal-ab: xstage's causal tile orders (same run, back
to back per shape) against cuDNN SDPA (same machine call), with issue 38's causal acceptance.

    python3 python/compare_attention_causal.py XSTAGE.json TORCH.json [--json OUT.json]
        [--accept-order ORDER] [--allow-missing-correctness]

XSTAGE.json: `xstage bench attention --causal --causal-order auto,grouped,claimed --json` (any subset of
auto, head-major, longest-first, grouped, claimed); TORCH.json: `python3 python/bench_attention_torch.py --causal
--backends cudnn[,fa4] --json`; with fa4 rows the table adds FlashAttention-4's TFLOP/s and the
accepted order / FA4, its cells gated like cuDNN's). First the correctness gate (docs/checkers.md) over every causal xstage
cell and every cuDNN cell that ran; then per (d, H, S): TFLOP/s of each order that ran (grouped,
claimed and auto with their heads per group, auto with the order it ran), each order / head-major,
cuDNN, each order / cuDNN, and whether the accepted order (default: auto, the kernel's default;
grouped in files without auto rows) meets the acceptance: >= 1.0x cuDNN
at every point, >= 600 TFLOP/s (causal FLOP count) at S >= 8192, d = 128. Exit status: 0 ok
(whatever the numbers), 1 a correctness check failed, 2 bad input.
"""
import sys

from xsbench import checker
from xsbench.results import geomean, index, ratio, write_json
from xsbench.tables import fmt, mark

SCHEMA = "xstage.bench.attention.v1"
TOOL = "compare_attention_causal"
ORDERS = ("head-major", "longest-first", "grouped", "claimed", "auto")
SHORT = {"head-major": "hm", "longest-first": "lf", "grouped": "grp", "claimed": "clm", "auto": "auto"}
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


def _fa4(r):
    return r.get("backend") == "fa4" and bool(r.get("causal")) and "error" not in r


def _fa4_key(r):
    return ("fa4",) + _shape(r)


def accepted(s, d, lf, cu):
    """Issue 38's causal acceptance at one point (None without both numbers)."""
    q = ratio(lf, cu)
    if q is None:
        return None
    return q >= MIN_RATIO and not (d == 128 and s >= 8192 and lf < MIN_TFLOPS_D128)


def main(argv=None):
    opened = checker.parse_and_open_pair(
        TOOL, __doc__.split("\n")[0], argv, SCHEMA, "write the rows here",
        add_args=lambda ap: ap.add_argument("--accept-order", default=None, choices=ORDERS,
                                            help="the order judged against the acceptance (default: auto, or grouped in files from before the auto order)"))
    if opened is None:
        return 2
    args, ours, theirs = opened
    fa4 = index(theirs["results"], _shape, keep="last", where=_fa4)
    gate = checker.gate_files(TOOL, args, [("xstage", ours, _ours_key, _label, _ours),
                                           ("torch", theirs, _torch_key, _label, _cudnn)] +
                              ([("fa4", theirs, _fa4_key, _label, _fa4)] if fa4 else []))
    mine = index(ours["results"], _ours_key, keep="last", where=_ours)
    base = index(theirs["results"], _shape, keep="last", where=_cudnn)
    shapes = sorted({k[1:] for k in mine}, key=lambda k: (k[2], k[1], k[0]))
    if not shapes:
        print(f"{TOOL}: no causal xstage results in {args.xstage_json}", file=sys.stderr)
        return 2
    orders = [o for o in ORDERS if any(k[0] == o for k in mine)]
    acc_order = args.accept_order or ("auto" if "auto" in orders or "grouped" not in orders else "grouped")
    if acc_order not in orders:
        print(f"{TOOL}: no '{acc_order}' rows in {args.xstage_json} (orders there: {', '.join(orders)})",
              file=sys.stderr)
        return 2
    gained = [o for o in orders if o != "head-major"] if "head-major" in orders else []

    fa4_note = f", FlashAttention-4 {(theirs.get('fa4') or {}).get('version', '?')}" if fa4 else ""
    print(f"# causal: xstage ({ours.get('device')}, commit {ours.get('commit')}) vs cuDNN SDPA (torch "
          f"{theirs.get('torch')}, cuDNN {theirs.get('cudnn')}){fa4_note}; TFLOP/s medians by the causal FLOP count")
    print(f"# acceptance (issue 38): {acc_order} >= {MIN_RATIO:.1f}x cuDNN at every point and >= "
          f"{MIN_TFLOPS_D128:.0f} TFLOP/s at S >= 8192, d = 128")
    head = f"#{'d':>3} {'H':>3} {'S':>6} {'dtype':>5} " + " ".join(f"{o:>15}" for o in orders)
    head += "".join(f" {SHORT[o] + '/hm':>7}" for o in gained)
    head += f" {'cuDNN':>7}" + "".join(f" {SHORT[o] + '/cuDNN':>9}" for o in orders) + f" {'accept':>6}"
    if fa4:
        head += f" {'FA4':>7} {SHORT[acc_order] + '/FA4':>9}"
    print(head)
    rows, gains, met, points = [], {o: [] for o in gained}, 0, 0
    for k in shapes:
        s, h, d, dt = k
        tf = {o: mine.get((o,) + k, {}).get("tflops") for o in orders}
        groups = {o: mine.get((o,) + k, {}).get("causal_group") for o in ("grouped", "claimed", "auto")}
        grp = groups["grouped"]
        run = mine.get(("auto",) + k, {}).get("causal_order_run")
        cu = base.get(k, {}).get("tflops")
        ok = all(gate.cell_ok("xstage", (o,) + k) for o in orders if (o,) + k in mine)
        if k in base:
            ok = ok and gate.cell_ok("torch", ("cudnn",) + k)
        f4 = fa4.get(k, {}).get("tflops")
        if k in fa4:
            ok = ok and gate.cell_ok("fa4", ("fa4",) + k)
        acc = accepted(s, d, tf[acc_order], cu)
        for o in gained:
            g = ratio(tf[o], tf["head-major"])
            if g is not None:
                gains[o].append(g)
        if acc is not None:
            points += 1
            met += acc
        cells = []
        for o in orders:
            label = fmt(tf[o], ".1f")
            if o == "auto" and run:
                label = f"{label} {SHORT.get(run, run)}"
            if groups.get(o):
                label = f"{label} G{groups[o]}"
            cells.append(f"{label:>15}")
        line = f" {d:>3} {h:>3} {s:>6} {dt:>5} " + " ".join(cells)
        line += "".join(f" {fmt(ratio(tf[o], tf['head-major']), '.3f', 7)}" for o in gained)
        line += f" {fmt(cu, '.1f', 7)}" + "".join(f" {fmt(ratio(tf[o], cu), '.2f', 9)}" for o in orders)
        line += f" {'-' if acc is None else 'yes' if acc else 'NO':>6}"
        if fa4:
            line += f" {fmt(f4, '.1f', 7)} {fmt(ratio(tf[acc_order], f4), '.2f', 9)}"
        print(mark(line, ok))
        row = {"seqlen": s, "heads": h, "head_dim": d, "dtype": dt, "cudnn_tflops": cu, "accept": acc,
               "fa4_tflops": f4, "correctness_ok": ok}
        for o in orders:
            row[o.replace("-", "_") + "_tflops"] = tf[o]
        for o in gained:
            row[o.replace("-", "_") + "_over_head_major"] = ratio(tf[o], tf["head-major"])
        if grp:
            row["grouped_heads_per_group"] = grp
        if run:
            row["auto_ran"] = run
        rows.append(row)
    geo = {o: geomean(v) for o, v in gains.items()}
    for o in gained:
        print(f"# {o} / head-major: geomean {fmt(geo[o], '.3f')} over {len(gains[o])} shapes")
    print(f"# acceptance ({acc_order}) met at {met} of {points} points")
    status = gate.summary()
    if args.json:
        doc = {"schema": "xstage.compare.attention-causal.v2",
               "xstage": {"device": ours.get("device"), "commit": ours.get("commit"), "date": ours.get("date")},
               "baseline": {"tool": theirs.get("tool"), "torch": theirs.get("torch"), "cudnn": theirs.get("cudnn"),
                            "fa4": theirs.get("fa4")},
               "acceptance": {"order": acc_order, "min_ratio": MIN_RATIO, "min_tflops_d128_s8192": MIN_TFLOPS_D128,
                              "met": met, "points": points},
               "geomean_over_head_major": geo,
               "correctness": {"passed": gate.ok, "verdict": gate.verdict()}, "rows": rows}
        if checker.write_out(TOOL, args.json, lambda p: write_json(p, doc)):
            return 2
    return status


if __name__ == "__main__":
    sys.exit(main())
