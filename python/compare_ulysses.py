#!/usr/bin/env python3
"""Fused Ulysses (`xstage bench ulysses --json`) against the PyTorch SDPA + NCCL baseline.

    python3 python/compare_ulysses.py OURS.json TORCH.json [--out table.txt] [--strict]
        [--allow-missing-correctness]

OURS.json: schema xstage.bench.ulysses.v1; TORCH.json: xstage.bench.ulysses_torch.v1 (from
python/bench_ulysses_torch.py). Points match on (seq_len, heads, head_dim). Prints one
markdown table per (heads, head_dim) config, rows = S, columns the median us of attention,
serial, comm-sm, fused, fused-shaped and torch SDPA+NCCL, then the ratios fused-shaped /
attention, fused / attention, serial / fused, serial / fused-shaped, torch / fused-shaped.
A variant or point that is missing prints "-".

First the correctness gate (xsbench.correctness, docs/checkers.md): every point of both files
must carry a passing correctness record, no mismatch_vs_serial count, no failed variant, and
the torch file's own checks must pass; each failing point gets a `CORRECTNESS FAIL` line.
Then the acceptance checks, each PASS or FAIL with its numbers:
  (0) every point passes the correctness gate (xstage and torch)
  (a) fused-shaped <= 1.03 x attention alone at every S >= 16384
  (b) best speedup over serial (max over points and over fused / fused-shaped) >= 1.4
  (c) fused and fused-shaped never slower than serial, at every point
  (d) fused-shaped faster than torch SDPA+NCCL at every S
A point of a check's domain that lacks a number the check needs fails an "every point" check
(it is listed); a check with no comparable point fails. Last, the per-tile store spans of
fused and fused-shaped: measured median / p90 against the predicted span, with the plan.
--out also writes everything printed to a file. Exit status: 0 ok; 1 when the correctness
gate fails (always), or when another check fails under --strict; 2 bad input.
"""
import argparse
import io
import sys

from xsbench import checker, correctness
from xsbench.results import index, pos, ratio
from xsbench.tables import fmt, md_table

OURS_SCHEMA = "xstage.bench.ulysses.v1"
TORCH_SCHEMA = "xstage.bench.ulysses_torch.v1"
VARIANTS = ["attention", "serial", "comm_sm", "fused", "fused_shaped"]
LABEL = {"attention": "attention", "serial": "serial", "comm_sm": "comm-sm", "fused": "fused",
         "fused_shaped": "fused-shaped"}
LONG_S = 16384        # (a) applies at S >= this
ATTN_SLACK = 1.03     # (a) fused-shaped <= ATTN_SLACK x attention
MIN_SPEEDUP = 1.4     # (b)
MAX_LISTED = 20       # violations printed per check


def ours_time(r, variant, stat="median"):
    t = (r.get("times_us") or {}).get(variant)
    return pos(t.get(stat)) if isinstance(t, dict) else None


def torch_time(r):
    return pos(r.get("sdpa_nccl_us")) if r else None


def key(r):
    return (int(r["seq_len"]), int(r["heads"]), int(r["head_dim"]))


def name(k):
    return f"S={k[0]} {k[1]}x{k[2]}"


def label(k, _rec):
    return name(k)


def build(ours, theirs, gate):
    """Lines of the report and the list of (name, passed)."""
    lines = []
    mine = index(ours["results"], key, keep="last")
    base = index(theirs["results"], key, keep="last")

    lines.append(f"# Ulysses: xstage ({ours.get('device')}, world {ours.get('world')}, batch {ours.get('batch')}, "
                 f"{ours.get('dtype')}, commit {ours.get('commit')}) vs torch SDPA+NCCL "
                 f"(torch {theirs.get('torch')}, {theirs.get('backend')} {theirs.get('cudnn')}, "
                 f"NCCL {theirs.get('nccl')}, {theirs.get('device')}, world {theirs.get('world')})")
    for field in ("world", "batch", "dtype", "device"):
        if ours.get(field) != theirs.get(field):
            lines.append(f"# WARNING: {field} differs: ours {ours.get(field)!r}, torch {theirs.get(field)!r}")
    lines.append("")

    configs = []
    for k in list(mine) + list(base):
        if k[1:] not in configs:
            configs.append(k[1:])
    for h, d in configs:
        lines.append(f"## heads {h}, head_dim {d}: median us (ratios of medians)")
        lines.append("")
        header = ["S"] + [LABEL[v] for v in VARIANTS] + ["torch SDPA+NCCL", "fused-shaped/attention",
                                                          "fused/attention", "serial/fused", "serial/fused-shaped",
                                                          "torch/fused-shaped"]
        rows = []
        for s in sorted({k[0] for k in list(mine) + list(base) if k[1:] == (h, d)}):
            r = mine.get((s, h, d), {})
            t = {v: ours_time(r, v) for v in VARIANTS}
            tt = torch_time(base.get((s, h, d)))
            rows.append([str(s)] + [fmt(t[v]) for v in VARIANTS] + [
                fmt(tt),
                fmt(ratio(t["fused_shaped"], t["attention"]), ".3f"),
                fmt(ratio(t["fused"], t["attention"]), ".3f"),
                fmt(ratio(t["serial"], t["fused"]), ".2f"),
                fmt(ratio(t["serial"], t["fused_shaped"]), ".2f"),
                fmt(ratio(tt, t["fused_shaped"]), ".2f")])
        lines += md_table(header, rows)
        lines.append("")

    checks = []
    order = {c: i for i, c in enumerate(configs)}
    pts = sorted(mine, key=lambda k: (order[k[1:]], k[0]))

    def report(label, passed, detail, bad=(), missing=()):
        checks.append((label, passed))
        lines.append(f"{'PASS' if passed else 'FAIL'} {label}: {detail}")
        for b in bad[:MAX_LISTED]:
            lines.append(f"    violates: {b}")
        if len(bad) > MAX_LISTED:
            lines.append(f"    ... and {len(bad) - MAX_LISTED} more violations")
        if missing:
            lines.append(f"    no data: {', '.join(missing)}")

    lines.append("## Acceptance checks")
    lines.append("")
    # (0)
    bad = [f"{name(k)}: {role} correctness failed" for k in pts for role in ("xstage", "torch")
           if not gate.cell_ok(role, k)]
    bad += [f"torch file: {p}" for p in gate.file_failed.get("torch", [])]
    report("(0) every point passes its correctness check (xstage and torch)", gate.ok, gate.verdict(), bad)
    # (a)
    bad, missing, worst = [], [], None
    for k in (k for k in pts if k[0] >= LONG_S):
        fs, at = ours_time(mine[k], "fused_shaped"), ours_time(mine[k], "attention")
        if fs is None or at is None:
            missing.append(name(k))
            continue
        q = fs / at
        if worst is None or q > worst[0]:
            worst = (q, k)
        if q > ATTN_SLACK:
            bad.append(f"{name(k)}: fused-shaped {fs:.1f} us = {q:.3f} x attention {at:.1f} us")
    detail = (f"worst fused-shaped/attention {worst[0]:.3f} at {name(worst[1])} (limit {ATTN_SLACK:.2f}, S >= {LONG_S})"
              if worst else f"no point with S >= {LONG_S} has both fused-shaped and attention")
    report(f"(a) fused-shaped <= {ATTN_SLACK:.2f} x attention at every S >= {LONG_S}",
           worst is not None and not bad and not missing, detail, bad, missing)
    # (b)
    best = None
    for k in pts:
        se = ours_time(mine[k], "serial")
        for v in ("fused", "fused_shaped"):
            q = ratio(se, ours_time(mine[k], v))
            if q is not None and (best is None or q > best[0]):
                best = (q, k, v)
    detail = (f"best serial/{LABEL[best[2]]} {best[0]:.2f} at {name(best[1])} (need >= {MIN_SPEEDUP:.2f})"
              if best else "no point has serial and fused or fused-shaped")
    report(f"(b) best speedup over serial >= {MIN_SPEEDUP:.2f}", best is not None and best[0] >= MIN_SPEEDUP, detail)
    # (c)
    bad, missing, worst = [], [], None
    for k in pts:
        se = ours_time(mine[k], "serial")
        for v in ("fused", "fused_shaped"):
            t = ours_time(mine[k], v)
            if se is None or t is None:
                missing.append(f"{name(k)} {LABEL[v]}")
                continue
            q = t / se
            if worst is None or q > worst[0]:
                worst = (q, k, v)
            if t > se:
                bad.append(f"{name(k)}: {LABEL[v]} {t:.1f} us > serial {se:.1f} us ({q:.3f} x)")
    detail = (f"worst {LABEL[worst[2]]}/serial {worst[0]:.3f} at {name(worst[1])} (limit 1.000)"
              if worst else "no point has serial and fused or fused-shaped")
    report("(c) fused and fused-shaped never slower than serial", worst is not None and not bad and not missing,
           detail, bad, missing)
    # (d)
    bad, missing, worst = [], [], None
    for k in pts:
        fs, tt = ours_time(mine[k], "fused_shaped"), torch_time(base.get(k))
        if fs is None or tt is None:
            missing.append(name(k))
            continue
        q = tt / fs
        if worst is None or q < worst[0]:
            worst = (q, k)
        if fs >= tt:
            bad.append(f"{name(k)}: fused-shaped {fs:.1f} us >= torch SDPA+NCCL {tt:.1f} us")
    detail = (f"smallest torch/fused-shaped {worst[0]:.2f} at {name(worst[1])} (need > 1)"
              if worst else "no point has both fused-shaped and torch SDPA+NCCL")
    report("(d) fused-shaped faster than torch SDPA+NCCL at every S", worst is not None and not bad and not missing,
           detail, bad, missing)
    lines.append("")
    lines.append(f"{sum(p for _, p in checks)}/{len(checks)} acceptance checks pass")
    lines.append("")

    # Spans.
    lines.append("## Per-tile store spans: measured (median, p90) vs predicted, us")
    lines.append("")
    header = ["heads x d", "S", "fused med", "fused p90", "fused pred", "fused med/pred", "fused n",
              "shaped med", "shaped p90", "shaped pred", "shaped med/pred", "shaped n", "plan"]
    rows = []
    for k in pts:
        sp = mine[k].get("spans") or {}
        if not any(isinstance(sp.get(v), dict) for v in ("fused", "fused_shaped")):
            continue
        row = [f"{k[1]}x{k[2]}", str(k[0])]
        for v in ("fused", "fused_shaped"):
            e = sp.get(v) if isinstance(sp.get(v), dict) else {}
            med, p90, pred = pos(e.get("median_us")), pos(e.get("p90_us")), pos(e.get("predicted_us"))
            n = e.get("count")
            row += [fmt(med, ".2f"), fmt(p90, ".2f"), fmt(pred, ".2f"), fmt(ratio(med, pred), ".2f"),
                    "-" if n is None else str(n)]
        plan = mine[k].get("plan") or {}
        bits = [f"{lbl}={plan[f]}" for f, lbl in (("chunk_vecs", "vecs"), ("chunks_per_slice", "chunks"),
                                                   ("comm_ctas", "ctas")) if f in plan]
        if pos(plan.get("step_us")) is not None:
            bits.append(f"step={plan['step_us']:.2f}us")
        row.append(" ".join(bits) if bits else "-")
        rows.append(row)
    if rows:
        lines += md_table(header, rows)
    else:
        lines.append("(no spans recorded)")
    return lines, checks


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("ours_json", help="xstage bench ulysses --json output (xstage.bench.ulysses.v1)")
    ap.add_argument("torch_json", help="python/bench_ulysses_torch.py --json output (xstage.bench.ulysses_torch.v1)")
    ap.add_argument("--out", help="also write the tables and checks here")
    ap.add_argument("--strict", action="store_true", help="exit 1 when an acceptance check fails")
    correctness.add_flag(ap)
    args = ap.parse_args(argv)
    docs = checker.open_inputs("compare_ulysses", [(args.ours_json, OURS_SCHEMA), (args.torch_json, TORCH_SCHEMA)])
    if docs is None:
        return 2
    ours, theirs = docs
    buf = io.StringIO()
    gate = checker.gate_files("compare_ulysses", args, [
        ("xstage", ours, key, label, None), ("torch", theirs, key, label, None)], out=buf)
    head = buf.getvalue()
    lines, checks = build(ours, theirs, gate)
    buf = io.StringIO()
    gate.out = buf
    status = gate.summary()
    text = head + "\n".join(lines) + "\n" + buf.getvalue()
    sys.stdout.write(text)
    if args.out:
        try:
            with open(args.out, "w", encoding="utf-8") as f:
                f.write(text)
        except OSError as e:
            print(f"compare_ulysses: cannot write {args.out}: {e}", file=sys.stderr)
            return 2
    return 1 if status or (args.strict and not all(p for _, p in checks)) else 0


if __name__ == "__main__":
    sys.exit(main())
