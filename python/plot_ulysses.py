#!/usr/bin/env python3
"""Fused Ulysses against the PyTorch SDPA + NCCL baseline, plotted.

    python3 python/plot_ulysses.py OURS.json TORCH.json OUT.png

OURS.json: `xstage bench ulysses --json` (schema xstage.bench.ulysses.v1); TORCH.json:
python/bench_ulysses_torch.py (xstage.bench.ulysses_torch.v1). One subplot per (heads,
head_dim) config: median time (us, log-log) over S for attention, serial, comm-sm, fused,
fused-shaped and torch SDPA+NCCL (torch SDPA alone dotted for reference), p10..p90 as a band
where recorded. One more subplot, when spans are recorded: measured per-tile store span
(median, p90 as the bar's top) against the predicted span, for fused and fused-shaped, over S.
Missing variants or points are left out. Exit status: 0 ok, 2 bad input, 3 matplotlib missing.
"""
import math
import sys

from xsbench import plots
from xsbench.results import load_or_exit

OURS_SCHEMA = "xstage.bench.ulysses.v1"
TORCH_SCHEMA = "xstage.bench.ulysses_torch.v1"
VARIANTS = [("attention", "attention alone", "C0", "o"), ("serial", "serial", "C1", "v"),
            ("comm_sm", "comm-sm", "C2", "^"), ("fused", "fused", "C3", "s"),
            ("fused_shaped", "fused-shaped", "C4", "D")]


def fail(msg, code=2):
    print(f"plot_ulysses.py: {msg}", file=sys.stderr)
    sys.exit(code)


def load(path, schema):
    return load_or_exit("plot_ulysses.py", path, schema)


def _num(x):
    return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) and x == x and x > 0 else None


def _points(results):
    out = {}
    for r in results if isinstance(results, list) else []:
        try:
            out[(int(r["seq_len"]), int(r["heads"]), int(r["head_dim"]))] = r
        except (KeyError, TypeError, ValueError):
            continue
    return out


def main(argv):
    if len(argv) != 4:
        fail("usage: plot_ulysses.py OURS.json TORCH.json OUT.png")
    ours = load(argv[1], OURS_SCHEMA)
    theirs = load(argv[2], TORCH_SCHEMA)
    plt = plots.pyplot("plot_ulysses.py")
    from matplotlib.ticker import NullFormatter

    mine, base = _points(ours.get("results")), _points(theirs.get("results"))
    configs = []  # in the order OURS.json (then TORCH.json) lists them
    for k in list(mine) + list(base):
        if k[1:] not in configs:
            configs.append(k[1:])
    if not configs:
        fail("no results in either file")
    has_spans = any(isinstance((r.get("spans") or {}).get(v), dict)
                    for r in mine.values() for v in ("fused", "fused_shaped"))
    n = len(configs) + (1 if has_spans else 0)
    cols = min(n, 3)
    rows = math.ceil(n / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(6.2 * cols, 4.8 * rows), squeeze=False)
    axes = [a for row in axes for a in row]
    for a in axes[n:]:
        a.set_visible(False)
    fig.suptitle(f"Ulysses attention + post-attention all-to-all: {ours.get('device', '?')}, "
                 f"world {ours.get('world', '?')}, batch {ours.get('batch', '?')}, {ours.get('dtype', '')}, "
                 f"commit {ours.get('commit', '?')}\n"
                 f"torch {theirs.get('torch', '?')} SDPA ({theirs.get('backend', '?')}) + NCCL {theirs.get('nccl', '?')}, "
                 f"world {theirs.get('world', '?')}")

    def xticks(ax, ss):
        ax.set_xscale("log", base=2)
        ax.set_xticks(ss)
        ax.set_xticklabels([f"{s / 1024:g}K" if s % 512 == 0 else str(s) for s in ss], fontsize=8, rotation=45)
        ax.xaxis.set_minor_formatter(NullFormatter())

    for ax, (h, d) in zip(axes, configs):
        ss = sorted({k[0] for k in list(mine) + list(base) if k[1:] == (h, d)})
        for variant, label, color, marker in VARIANTS:
            pts = []
            for s in ss:
                t = ((mine.get((s, h, d)) or {}).get("times_us") or {}).get(variant)
                if isinstance(t, dict) and _num(t.get("median")) is not None:
                    pts.append((s, _num(t["median"]), _num(t.get("p10")), _num(t.get("p90"))))
            if not pts:
                continue
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker=marker, color=color, ms=4, lw=1.3, label=label)
            band = [p for p in pts if p[2] is not None and p[3] is not None]
            if len(band) > 1:
                ax.fill_between([p[0] for p in band], [p[2] for p in band], [p[3] for p in band],
                                color=color, alpha=0.12, lw=0)
        for field, label, style in (("sdpa_nccl_us", "torch SDPA+NCCL", "-"), ("sdpa_us", "torch SDPA alone", ":")):
            pts = [(s, _num((base.get((s, h, d)) or {}).get(field))) for s in ss]
            pts = [p for p in pts if p[1] is not None]
            if pts:
                ax.plot([p[0] for p in pts], [p[1] for p in pts], style, marker="x", color="k", ms=5,
                        lw=1.3 if style == "-" else 1.0, label=label)
        ax.set_yscale("log")
        xticks(ax, ss)
        ax.set_xlabel("sequence length S")
        ax.set_ylabel("time (us, median)")
        ax.set_title(f"heads {h}, head_dim {d}")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)

    if has_spans:
        ax = axes[len(configs)]
        allss = set()
        for ci, (h, d) in enumerate(configs):
            for vi, (variant, label, marker) in enumerate((("fused", "fused", "s"), ("fused_shaped", "fused-shaped", "D"))):
                meas, pred = [], []
                for k in sorted(k for k in mine if k[1:] == (h, d)):
                    e = (mine[k].get("spans") or {}).get(variant)
                    if not isinstance(e, dict):
                        continue
                    med, p90, pr = _num(e.get("median_us")), _num(e.get("p90_us")), _num(e.get("predicted_us"))
                    if med is not None:
                        meas.append((k[0], med, p90))
                    if pr is not None:
                        pred.append((k[0], pr))
                color = f"C{(2 * ci + vi) % 10}"
                if meas:
                    allss.update(m[0] for m in meas)
                    err = [[0.0 for _ in meas], [max(0.0, (m[2] or m[1]) - m[1]) for m in meas]]
                    ax.errorbar([m[0] for m in meas], [m[1] for m in meas], yerr=err, fmt=marker, color=color,
                                ms=5, capsize=2, label=f"{h}x{d} {label} measured")
                if pred:
                    allss.update(p[0] for p in pred)
                    ax.plot([p[0] for p in pred], [p[1] for p in pred], "--", color=color, lw=1.2,
                            label=f"{h}x{d} {label} predicted")
        ax.set_yscale("log")
        if allss:
            xticks(ax, sorted(allss))
        ax.set_xlabel("sequence length S")
        ax.set_ylabel("per-tile store span (us)")
        ax.set_title("store spans: measured median (bar to p90) vs predicted")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=6)

    plots.save(fig, argv[3], "plot_ulysses.py")


if __name__ == "__main__":
    main(sys.argv)
