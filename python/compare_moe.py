#!/usr/bin/env python3
"""Mega-MoE schedules side by side: `xstage bench moe --json` (xstage.bench.moe.v1) with its
three variants (unfused, expert-wave, interleaved) per configuration (model, weights, routing,
tokens per rank), optionally against python/bench_moe_torch.py (xstage.bench.moe_torch.v1).

    python3 python/compare_moe.py XSTAGE_JSON [TORCH_JSON] [--also XSTAGE_JSON ...] [--png OUT.png]
        [--json OUT.json] [--order-check PICKS.tsv [--order-tol 0.01]] [--allow-missing-correctness]

Per configuration: medians in us ('-' where missing or skipped), il/ew = expert-wave /
interleaved (> 1: interleaved faster), torch/ew, torch/il, and where the bench recorded spans,
the median remote combine-store span, the local control span and the predicted span of each
fused schedule. Summary: il/ew over configurations with both fused schedules (count, geomean,
median, max, worst), the better fused order against the unfused layer (issue 37: in how many
configurations it is at least as fast; a configuration that failed a check never counts), and
how often each fused schedule and the better of the two beat torch, and per W4A8 format the better fused order against
the same configuration's W8A8 one (issue 37's 0.9 bar). xstage's W4A8 formats (w4a8-int4,
w4a8-mxfp4) are compared with torch's `w4a8` row (the same layer on FP8 pre-converted weights);
torch configurations with no xstage counterpart are counted, not compared.
--json writes the rows and the summary (xstage.compare.moe.v1; a row's `unfused_gemm_us` is the
unfused layer's grouped GEMMs alone where the bench ran with --spans); --png a 2-panel figure if
matplotlib imports (otherwise a note on stderr).
--order-check PICKS: the order rule's picks (docs/megamoe.md "Order choice") against the measured
orders: a tab-separated file of `model tokens routing schedule why` lines (scripts/moe-order-check
writes it from `xstage moe-routing --plan`, so the picks are those of the binary, not the
`order_choice` the bench recorded). Per configuration with both fused orders, a pick is right
when its order is the faster one or within --order-tol (default 1 %) of it; the summary gives
that count, the strict count and the same two for expert-wave everywhere, then the misses.
The correctness gate comes first (docs/checkers.md): every row that is not skipped, in both
files, must carry a passing correctness record and no non-finite output, and the torch file's
own checks must pass; a failing row gets a `CORRECTNESS FAIL` line and its configuration is
marked FAILED. Exit status: 0 ok, 1 a correctness check failed, 2 bad arguments or input."""
import argparse
import statistics
import sys

from xsbench import checker, correctness
from xsbench.results import InputError, geomean, num, ratio, safe_key, write_json
from xsbench.tables import fmt, mark

XSTAGE_SCHEMA = "xstage.bench.moe.v1"
TORCH_SCHEMA = "xstage.bench.moe_torch.v1"
OUT_SCHEMA = "xstage.compare.moe.v1"
DEFAULT_ROUTING_SEED = 2026  # xstage moe-routing --seed, which python/bench_moe_torch.py uses
VARIANTS = ["unfused", "expert-wave", "interleaved"]
FUSED = {"expert-wave": "ew", "interleaved": "il"}
TOOL = "compare_moe"


def key(r):
    """(model, weights, routing, tokens) or None when a field is missing."""
    return safe_key(lambda r: (str(r["model"]), str(r.get("weights", "w8a8")), str(r["routing"]),
                               int(r["tokens_per_rank"])), r)


def xkey(r):
    return key(r) + (r["variant"],) if key(r) is not None and r.get("variant") in VARIANTS else None


def label(k, _rec):
    return " ".join(str(x) for x in k)


def ran(r):
    return not r.get("skipped")


def span(r, which):
    s = r.get("spans") if isinstance(r, dict) else None
    if not isinstance(s, dict):
        return None
    if which == "predicted":
        return num(s.get("predicted_us"))
    part = s.get(which)
    return num(part.get("median_us")) if isinstance(part, dict) else None


def grouped_gemm_us(r):
    """The unfused layer's Linear-1 + Linear-2 µs of rank 0 (its grouped GEMMs alone, bench
    --spans), or None where the record has no phases."""
    ph = r.get("phases") if isinstance(r, dict) else None
    p = ph[0] if isinstance(ph, list) and ph and isinstance(ph[0], dict) else None
    l1, l2 = (num(p.get("l1_us")), num(p.get("l2_us"))) if p else (None, None)
    return l1 + l2 if l1 is not None and l2 is not None and l1 + l2 > 0 else None


def build_rows(xs, th, gate):
    cfg = {}   # key -> {variant: result}
    bad = 0
    for r in xs["results"]:
        k = key(r)
        if k is None:
            bad += 1
            continue
        per = cfg.setdefault(k, {})
        v = r.get("variant")
        if v in VARIANTS and not r.get("skipped") and v not in per:
            per[v] = r
    torch = {}
    if th is not None:
        for r in th["results"]:
            k = key(r)
            if k is not None and not r.get("skipped") and num(r.get("median_us")) is not None:
                torch.setdefault(k, r)
    rows = []
    used = set()
    for k in sorted(cfg):
        per = cfg[k]
        t = lambda v: num(per[v].get("median_us")) if v in per else None  # noqa: E731
        un, ew, il = t("unfused"), t("expert-wave"), t("interleaved")
        tk = torch_key(k, torch)
        used.add(tk)
        tt = num(torch[tk].get("median_us")) if tk in torch else None
        ok = all(gate.cell_ok("xstage", k + (v,)) for v in per) and (tk not in torch or gate.cell_ok("torch", tk))
        fused = [x for x in (ew, il) if x is not None and x > 0]
        row = {"model": k[0], "weights": k[1], "routing": k[2], "tokens_per_rank": k[3], "correctness_ok": ok,
               "unfused_us": un, "expert_wave_us": ew, "interleaved_us": il, "torch_us": tt,
               "il_over_ew": ratio(ew, il), "torch_over_ew": ratio(tt, ew), "torch_over_il": ratio(tt, il),
               "unfused_over_fused": ratio(un, min(fused)) if fused else None,
               "unfused_gemm_us": grouped_gemm_us(per.get("unfused"))}
        for v, s in FUSED.items():
            r = per.get(v, {})
            row[f"remote_span_{s}_us"] = span(r, "remote")
            row[f"local_span_{s}_us"] = span(r, "local")
            row[f"predicted_span_{s}_us"] = span(r, "predicted")
        rows.append(row)
    torch_only = sorted(set(torch) - used)
    return rows, torch_only, bad


def torch_key(k, torch):
    """The torch configuration an xstage one is compared with: the same key, or for a W4A8
    format (w4a8-int4, w4a8-mxfp4) torch's `w4a8` row, which runs the same layer with the
    weights pre-converted to FP8 (PyTorch has no 4-bit MMA): the PyTorch path of every W4A8
    configuration (issue 37: fused faster than the PyTorch path on all of them)."""
    if k in torch or not k[1].startswith("w4a8-"):
        return k
    return (k[0], "w4a8", k[2], k[3])


def summarise(rows, have_torch, torch_only):
    sp = [r["il_over_ew"] for r in rows if r["il_over_ew"] is not None]
    s = {"il_over_ew": {"count": len(sp), "geomean": geomean(sp),
                        "median": statistics.median(sp) if sp else None,
                        "max": max(sp) if sp else None, "worst": min(sp) if sp else None}}
    # Issue 37: the better fused order against the unfused layer; a configuration whose cells did
    # not pass their checks is compared but never counts as meeting the bar.
    uf = [r for r in rows if r["unfused_over_fused"] is not None]
    worst = min(uf, key=lambda r: r["unfused_over_fused"]) if uf else None
    s["fused_vs_unfused"] = {
        "compared": len(uf), "fused_at_least_unfused": sum(r["unfused_over_fused"] >= 1.0 and r["correctness_ok"] for r in uf),
        "geomean_unfused_over_fused": geomean([r["unfused_over_fused"] for r in uf]),
        "worst": worst["unfused_over_fused"] if worst else None,
        "worst_config": " ".join(str(worst[c]) for c in ("model", "weights", "routing", "tokens_per_rank")) if worst else None,
        "by_weights": {w: {"compared": sum(r["weights"] == w for r in uf),
                           "fused_at_least_unfused": sum(r["weights"] == w and r["unfused_over_fused"] >= 1.0
                                                         and r["correctness_ok"] for r in uf)}
                       for w in sorted({r["weights"] for r in uf})}}
    s["w4a8_vs_w8a8"] = format_ratios(rows)
    if have_torch:
        te = [r["torch_over_ew"] for r in rows if r["torch_over_ew"] is not None]
        ti = [r["torch_over_il"] for r in rows if r["torch_over_il"] is not None]
        # The better fused order against torch, checked configurations only (issue 37's bar).
        tb = [(r["torch_us"] / min(f), r["correctness_ok"]) for r in rows if r["torch_us"] is not None
              for f in [[x for x in (r["expert_wave_us"], r["interleaved_us"]) if x is not None and x > 0]] if f]
        s["torch"] = {"compared_ew": len(te), "ew_faster": sum(x > 1 for x in te),
                      "compared_il": len(ti), "il_faster": sum(x > 1 for x in ti),
                      "compared_best": len(tb), "best_faster": sum(x > 1 and ok for x, ok in tb),
                      "geomean_torch_over_ew": geomean(te), "geomean_torch_over_il": geomean(ti)}
        s["torch_only"] = len(torch_only)
    return s


def format_ratios(rows, bar=0.9):
    """Issue 37's W4A8 bar: per W4A8 format, the better fused order's time with W8A8 weights over
    its time with the format's, for every (model, routing, tokens) that has both (>= bar: met; a
    configuration whose checks failed never counts). {} when the file holds one format only."""
    best = {}
    for r in rows:
        f = [x for x in (r["expert_wave_us"], r["interleaved_us"]) if x is not None and x > 0]
        if f:
            best[(r["weights"], r["model"], r["routing"], r["tokens_per_rank"])] = (min(f), r["correctness_ok"])
    out = {}
    for (w, m, ro, t), (us, ok) in sorted(best.items()):
        ref = best.get(("w8a8", m, ro, t))
        if w == "w8a8" or ref is None:
            continue
        d = out.setdefault(w, {"compared": 0, "at_least_bar": 0, "bar": bar, "ratios": []})
        x = ref[0] / us
        d["compared"] += 1
        d["at_least_bar"] += x >= bar and ok and ref[1]
        d["ratios"].append(x)
    for d in out.values():
        rs = d.pop("ratios")
        d.update({"geomean": geomean(rs), "worst": min(rs), "best": max(rs)})
    return out


SPAN_COLS = [("rem.ew", "remote_span_ew_us"), ("rem.il", "remote_span_il_us"),
             ("loc.ew", "local_span_ew_us"), ("loc.il", "local_span_il_us"),
             ("pred.ew", "predicted_span_ew_us"), ("pred.il", "predicted_span_il_us")]


ORDERS = ("expert-wave", "interleaved")


def read_picks(path):
    """{(model, routing, tokens): (schedule, why)} from a `model tokens routing schedule why`
    tab-separated file ('#' lines and blank lines skipped); InputError on a malformed line."""
    picks = {}
    try:
        with open(path) as f:
            lines = f.read().splitlines()
    except OSError as e:
        raise InputError(f"cannot read {path}: {e}")
    for n, line in enumerate(lines, 1):
        if not line.strip() or line.startswith("#"):
            continue
        f = line.split("\t")
        if len(f) < 4 or f[3] not in ORDERS or not f[1].isdigit():
            raise InputError(f"{path}:{n}: want 'model<TAB>tokens<TAB>routing<TAB>expert-wave|interleaved[<TAB>why]'")
        key = (f[0], f[2], int(f[1]))
        if key in picks:
            raise InputError(f"{path}:{n}: a second pick for {f[0]} {f[2]} {f[1]}")
        picks[key] = (f[3], f[4] if len(f) > 4 else "")
    return picks


def order_check(rows, picks, tol=0.01):
    """The picks against the measured orders. A configuration counts when it has both fused
    orders and a pick; the pick is `right` when its order is at most (1 + tol) x the faster
    order's time, `faster` when it is the faster one (a tie counts for both orders). The same
    two counts for expert-wave everywhere (the rule before the reuse term), the misses (with
    how much slower the picked order ran) and the configurations without a pick. The picks are
    the W8A8 rule's (`xstage moe-routing --plan`): rows of other weight formats are left out
    (`other_weights`)."""
    if not (tol >= 0 and tol < 1):
        raise InputError(f"--order-tol must be in [0, 1) (got {tol})")
    out = {"tol": tol, "compared": 0, "right": 0, "faster": 0, "expert_wave_right": 0,
           "expert_wave_faster": 0, "misses": [], "no_pick": [], "other_weights": 0}
    for r in rows:
        if r.get("weights", "w8a8") != "w8a8":
            out["other_weights"] += 1
            continue
        ew, il = r["expert_wave_us"], r["interleaved_us"]
        if ew is None or il is None or ew <= 0 or il <= 0:
            continue
        name = f"{r['model']} {r['routing']} {r['tokens_per_rank']}"
        pick = picks.get((r["model"], r["routing"], r["tokens_per_rank"]))
        if pick is None:
            out["no_pick"].append(name)
            continue
        us = {"expert-wave": ew, "interleaved": il}
        best = min(ew, il)
        out["compared"] += 1
        got = us[pick[0]]
        out["right"] += got <= best * (1 + tol)
        out["faster"] += got == best
        out["expert_wave_right"] += ew <= best * (1 + tol)
        out["expert_wave_faster"] += ew == best
        if got > best * (1 + tol):
            other = ORDERS[1 - ORDERS.index(pick[0])]
            out["misses"].append({"config": name, "picked": pick[0], "slower_pct": 100 * (got / best - 1),
                                  "faster": other, "why": pick[1]})
    return out


def print_order_check(c, path):
    n = c["compared"]
    print(f"# order check ({path}, within {100 * c['tol']:g} %): the picks are right at {c['right']}/{n} "
          f"(the faster order at {c['faster']}/{n}); expert-wave everywhere: {c['expert_wave_right']}/{n} "
          f"({c['expert_wave_faster']}/{n})")
    for m in c["misses"]:
        print(f"#   miss: {m['config']}: picked {m['picked']}, {m['slower_pct']:.1f} % slower than {m['faster']}"
              + (f" ({m['why']})" if m["why"] else ""))
    if c["no_pick"]:
        print(f"#   no pick for {len(c['no_pick'])}: {', '.join(c['no_pick'])}")


def print_table(xs, th, rows, summary, torch_only, bad):
    tdesc = "none"
    if th is not None:
        tdesc = f"commit {th.get('commit')} (torch {th.get('torch')} {th.get('gemm_path')})"
    print(f"# xstage bench moe commit {xs.get('commit')} (world {xs.get('world')}, {xs.get('date')}) "
          f"vs torch {tdesc}; medians in us, max over ranks")
    if th is not None and xs.get("world") is not None and th.get("world") is not None \
            and xs.get("world") != th.get("world"):
        print(f"# warning: world differs (xstage {xs.get('world')}, torch {th.get('world')})")
    spans = any(r[c] is not None for r in rows for _, c in SPAN_COLS)
    head = (f"#{'model':>18} {'weights':>7} {'routing':>8} {'tokens':>6} {'unfused':>9} {'exp-wave':>9} "
            f"{'interlv':>9} {'torch':>9} {'il/ew':>6} {'torch/ew':>8} {'torch/il':>8}")
    if spans:
        head += "".join(f" {h:>8}" for h, _ in SPAN_COLS)
    print(head)
    for r in rows:
        line = (f" {r['model']:>18} {r['weights']:>7} {r['routing']:>8} {r['tokens_per_rank']:>6}"
                f" {fmt(r['unfused_us'], '.1f', 9)} {fmt(r['expert_wave_us'], '.1f', 9)}"
                f" {fmt(r['interleaved_us'], '.1f', 9)} {fmt(r['torch_us'], '.1f', 9)}"
                f" {fmt(r['il_over_ew'], '.2f', 6)} {fmt(r['torch_over_ew'], '.2f', 8)}"
                f" {fmt(r['torch_over_il'], '.2f', 8)}")
        if spans:
            line += "".join(f" {fmt(r[c], '.1f', 8)}" for _, c in SPAN_COLS)
        print(mark(line, r["correctness_ok"]))
    if spans:
        print("# spans (us, medians): rem = remote combine-store span, loc = local control span, "
              "pred = predicted span")
    if bad:
        print(f"# {bad} xstage results without model/routing/tokens_per_rank ignored")
    s = summary["il_over_ew"]
    if s["count"]:
        print(f"# il/ew (expert-wave / interleaved, > 1: interleaved faster) over {s['count']} configurations: "
              f"geomean {s['geomean']:.2f}, median {s['median']:.2f}, max {s['max']:.2f}, worst {s['worst']:.2f}")
    else:
        print("# il/ew: no configuration has both expert-wave and interleaved")
    f = summary["fused_vs_unfused"]
    if f["compared"]:
        print(f"# fused (the better order) >= unfused in {f['fused_at_least_unfused']}/{f['compared']} configurations "
              f"(issue 37; checked cells only); geomean unfused/fused {f['geomean_unfused_over_fused']:.2f}, "
              f"worst {f['worst']:.2f} ({f['worst_config']})")
        if len(f["by_weights"]) > 1:
            print("#   per weights: " + ", ".join(f"{w} {d['fused_at_least_unfused']}/{d['compared']}"
                                                   for w, d in f["by_weights"].items()))
    for w, d in summary.get("w4a8_vs_w8a8", {}).items():
        print(f"# {w} fused >= {d['bar']:g} x W8A8 fused (better orders, W8A8 us / {w} us) in {d['at_least_bar']}/"
              f"{d['compared']} configurations; geomean {d['geomean']:.2f}, worst {d['worst']:.2f}, best {d['best']:.2f}")
    if "torch" in summary:
        t = summary["torch"]
        g = lambda x: "-" if x is None else f"{x:.2f}"  # noqa: E731
        print(f"# vs torch: expert-wave faster in {t['ew_faster']}/{t['compared_ew']}, interleaved faster in "
              f"{t['il_faster']}/{t['compared_il']}; geomean torch/ew {g(t['geomean_torch_over_ew'])}, "
              f"torch/il {g(t['geomean_torch_over_il'])}")
        print(f"# vs torch: the better fused order faster in {t['best_faster']}/{t['compared_best']} configurations "
              "(issue 37; checked cells only; W4A8 formats against torch's w4a8 row)")
        weights = sorted({k[1] for k in torch_only})
        print(f"# torch-only configurations: {len(torch_only)} (not compared"
              + (f"; weights {', '.join(weights)})" if weights else ")"))


def write_png(path, rows):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except Exception as e:  # ImportError, or a broken backend
        print(f"compare_moe: matplotlib unavailable ({e}); {path} not written", file=sys.stderr)
        return
    label = lambda r: f"{r['model']} {r['weights']} {r['routing'][:4]} {r['tokens_per_rank']}"  # noqa: E731
    sp = sorted((r for r in rows if r["il_over_ew"] is not None), key=lambda r: r["il_over_ew"])
    withspan = [r for r in rows if any(r[c] is not None for _, c in SPAN_COLS)]
    n = max(len(sp), len(withspan), 1)
    fig, (a, b) = plt.subplots(1, 2, figsize=(max(10.0, 0.5 * n + 6.0), 5.5))
    if sp:
        a.bar(range(len(sp)), [r["il_over_ew"] for r in sp],
              color=["tab:green" if r["il_over_ew"] >= 1 else "tab:red" for r in sp])
        a.set_xticks(range(len(sp)))
        a.set_xticklabels([label(r) for r in sp], rotation=70, ha="right", fontsize=7)
    else:
        a.text(0.5, 0.5, "no configuration with both fused schedules", ha="center", transform=a.transAxes)
    a.axhline(1.0, color="k", lw=1)
    a.set_ylabel("expert-wave / interleaved (>1: interleaved faster)")
    a.set_title("interleaved speedup over expert-wave")
    if withspan:
        x = range(len(withspan))
        for j, (col, name, m, c) in enumerate([("remote_span_ew_us", "remote, expert-wave", "o", "tab:blue"),
                                ("remote_span_il_us", "remote, interleaved", "s", "tab:orange"),
                                ("local_span_ew_us", "local control, expert-wave", "v", "tab:cyan"),
                                ("local_span_il_us", "local control, interleaved", "^", "tab:olive"),
                                ("predicted_span_ew_us", "predicted, expert-wave", "x", "tab:gray"),
                                ("predicted_span_il_us", "predicted, interleaved", "+", "k")]):
            pts = [(i + 0.08 * (j - 2.5), r[col]) for i, r in zip(x, withspan) if r[col] is not None]
            if pts:
                b.plot([p[0] for p in pts], [p[1] for p in pts], m, color=c, label=name, linestyle="none")
        b.set_xticks(list(x))
        b.set_xlim(-0.5, len(withspan) - 0.5)
        b.set_xticklabels([label(r) for r in withspan], rotation=70, ha="right", fontsize=7)
        b.set_ylabel("combine-store span median (us)")
        b.legend(fontsize=7)
    else:
        b.text(0.5, 0.5, "no spans recorded", ha="center", transform=b.transAxes)
    b.set_title("combine-store span: remote, local control, predicted")
    fig.tight_layout()
    try:
        fig.savefig(path, dpi=120)
    except OSError as e:
        print(f"compare_moe: cannot write {path}: {e}", file=sys.stderr)
    plt.close(fig)


def main(argv=None):
    ap = argparse.ArgumentParser(prog="compare_moe.py", description=__doc__.split("\n")[0])
    ap.add_argument("xstage_json")
    ap.add_argument("torch_json", nargs="?")
    ap.add_argument("--png", help="write a 2-panel figure here (needs matplotlib)")
    ap.add_argument("--json", help="write rows and summary here (xstage.compare.moe.v1)")
    ap.add_argument("--order-check", metavar="PICKS", help="the order rule's picks (model tokens routing schedule "
                    "why, tab-separated; scripts/moe-order-check) against the measured orders")
    ap.add_argument("--order-tol", type=float, default=0.01, help="--order-check: a pick within this share of "
                    "the faster order counts as right (default 0.01)")
    ap.add_argument("--also", action="append", default=[], metavar="XSTAGE_JSON",
                    help="more `xstage bench moe` files of the same build (e.g. one per model or weight format), "
                    "their results added to the first's")
    correctness.add_flag(ap)
    args = ap.parse_args(argv)  # no argument: usage on stderr, exit 2
    docs = checker.open_inputs(TOOL, [(args.xstage_json, XSTAGE_SCHEMA), (args.torch_json, TORCH_SCHEMA)]
                               + [(p, XSTAGE_SCHEMA) for p in args.also])
    if docs is None:
        return 2
    xs, th = docs[0], docs[1]
    # The PyTorch path routes with `xstage moe-routing`'s default seed; a bench run with another
    # (`--routing-seed`) computed other rows, so its cells are not the same configurations.
    seed = (xs.get("config") or {}).get("routing_seed", DEFAULT_ROUTING_SEED)
    if th is not None and seed != DEFAULT_ROUTING_SEED:
        print(f"{TOOL}: {args.xstage_json} ran routing seed {seed}, the PyTorch path seed {DEFAULT_ROUTING_SEED}: "
              "compare runs of the same routing", file=sys.stderr)
        return 2
    for p, more in zip(args.also, docs[2:]):
        if more.get("commit") != xs.get("commit") or more.get("world") != xs.get("world"):
            print(f"{TOOL}: {p}: commit / world differ from {args.xstage_json}'s", file=sys.stderr)
            return 2
        probs = correctness.file_problems(more)
        for q in probs:
            print(f"CORRECTNESS FAIL xstage file {p}: {q}")
        if probs:
            return 1
        xs = dict(xs, results=list(xs["results"]) + list(more["results"]))
    gate = checker.gate_files(TOOL, args, [("xstage", xs, xkey, label, ran), ("torch", th, key, label, ran)])
    rows, torch_only, bad = build_rows(xs, th, gate)
    summary = summarise(rows, th is not None, torch_only)
    picks = None
    if args.order_check:
        try:
            picks = read_picks(args.order_check)
        except InputError as e:
            print(f"{TOOL}: {e}", file=sys.stderr)
            return 2
    print_table(xs, th, rows, summary, torch_only, bad)
    if picks is not None:
        try:
            summary["order_check"] = order_check(rows, picks, args.order_tol)
        except InputError as e:
            print(f"{TOOL}: {e}", file=sys.stderr)
            return 2
        print_order_check(summary["order_check"], args.order_check)
    status = gate.summary()
    if args.json:
        doc = {"schema": OUT_SCHEMA, "xstage_commit": xs.get("commit"), "xstage_date": xs.get("date"),
               "world": xs.get("world"), "torch_commit": th.get("commit") if th else None,
               "correctness": {"passed": gate.ok, "verdict": gate.verdict()},
               "torch_only": [dict(zip(("model", "weights", "routing", "tokens_per_rank"), k)) for k in torch_only],
               "rows": rows, "summary": summary}
        if checker.write_out(TOOL, args.json, lambda p: write_json(p, doc, indent=1)):
            return 2
    if args.png:
        write_png(args.png, rows)
    return status


if __name__ == "__main__":
    sys.exit(main())
