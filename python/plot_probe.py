#!/usr/bin/env python3
"""Measured vs predicted X-Stage behaviour.

    python3 python/plot_probe.py DATA.json PARAMS.json OUT.png

DATA.json is a probe run ("xstage.probe.v1"), PARAMS.json fitted Burst-Gap parameters
("xstage.params.v2", from `xstage fit DATA.json --out PARAMS.json`).
Left:  steady issue span over the gap G for several burst volumes V, at the largest K in
       the data (dest=peer, store=v4, addr=fresh, gap_kind=idle): points measured, lines model.
Right: cold-burst and warm isolated (largest gap) issue span over V at the same K, with the
       base model (warm capacity Q) and the extension (cold capacity Q_cold).
Exit status: 0 ok, 2 bad input, 3 matplotlib missing.
"""
import sys

from xsbench import plots
from xsbench.results import load_or_exit

# --- Burst-Gap model -------------------------------------------------------------------
# Re-implements the equations of src/model/burst_gap.cpp (docs/model.md); keep in sync.
# Units: us, bytes, GB/s (1 GB/s = 1e3 bytes/us).


def _table(p, name, key, value):
    return sorted((e[key], e[value]) for e in p[name])


def _interp(table, x, extend):
    """Piecewise linear; constant below; above: clamped or the last slope (>= 0) continued."""
    if x <= table[0][0]:
        return table[0][1]
    for (x0, y0), (x1, y1) in zip(table, table[1:]):
        if x <= x1:
            return y0 + (x - x0) / (x1 - x0) * (y1 - y0)
    if not extend or len(table) < 2:
        return table[-1][1]
    (x0, y0), (x1, y1) = table[-2], table[-1]
    return y1 + max(0.0, (y1 - y0) / (x1 - x0)) * (x - x1)


def t0_us(p, b):
    return _interp(_table(p, "t0", "burst_bytes", "t0_us"), b, True)


def by_k(p, name, value, k):
    return _interp(_table(p, name, "producers", value), k, False)


def q_lower_bound(p, k):
    table = sorted((e["producers"], e.get("lower_bound", False)) for e in p["q"])
    lo = [b for kk, b in table if kk <= k]
    hi = [b for kk, b in table if kk >= k]
    return bool((lo and lo[-1]) or (hi and hi[0]))


def predict(p, k, b, g):
    """Steady issue span and period, recovery gap, cold span (extended and base)."""
    v, t0 = k * b, t0_us(p, b)
    r, r_agg = by_k(p, "r", "r_gbps", k) * 1e3, p["r_agg_gbps"] * 1e3
    delta = by_k(p, "delta", "delta_us", k)
    drain = v / r - g - delta                          # D
    fill = (v - by_k(p, "q", "q_bytes", k)) / r_agg    # F
    issue = max(t0, drain, fill)
    tol = 1e-9 * max(1.0, t0)
    drain_bound = not (drain <= t0 + tol and fill <= t0 + tol) and drain > fill + tol
    isolated = max(t0, fill)
    return {"issue": issue, "period": issue + g + (delta if drain_bound else 0.0),
            "recovery_gap": max(0.0, v / r - delta - isolated),
            "cold_base": isolated,
            "cold": max(t0, (v - by_k(p, "q_cold", "q_bytes", k)) / r_agg)}


def knee_bytes(p, k, vgrid, which):
    """First V on the grid where the fill term of `which` ("cold" or "cold_base") exceeds T0."""
    for v in vgrid:
        pr = predict(p, k, v / k, 1e12)
        if pr[which] > t0_us(p, v / k) * (1 + 1e-9):
            return v
    return None

# ----------------------------------------------------------------------------------------


def fail(msg, code=2):
    print(f"plot_probe.py: error: {msg}", file=sys.stderr)
    sys.exit(code)


def load(path, schema):
    return load_or_exit("plot_probe.py: error", path, schema, results=False)


def main(argv):
    if len(argv) != 4:
        fail("usage: plot_probe.py DATA.json PARAMS.json OUT.png")
    run = load(argv[1], "xstage.probe.v1")
    params = load(argv[2], "xstage.params.v2")
    plt = plots.pyplot("plot_probe.py")

    pts = [q for q in run.get("points", [])
           if q.get("dest") == "peer" and q.get("store") == "v4" and q.get("addr") == "fresh"
           and q.get("gap_kind") == "idle" and q.get("steady_issue_us", 0) > 0
           and not q.get("warmup_bytes", 0) and not q.get("pre_wait_us", 0)]  # no cold-study runs
    if not pts:
        fail(f"{argv[1]}: no points with dest=peer store=v4 addr=fresh gap_kind=idle")
    k = max(q["producers"] for q in pts)
    pts = [q for q in pts if q["producers"] == k]

    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 5))
    fig.suptitle(f"X-Stage: measured vs Burst-Gap model, K = {k} ({run.get('device', '')})")

    # Left: steady span over G for the (up to five) burst sizes measured at the most gaps.
    sizes = sorted({q["burst_bytes"] for q in pts})
    gaps = {b: len({q["gap_us"] for q in pts if q["burst_bytes"] == b}) for b in sizes}
    pick = sorted(sorted(sizes, key=lambda b: (-gaps[b], b))[:5])
    gmax = max(q["gap_us"] for q in pts) or 1.0
    grid = [gmax * i / 400 for i in range(401)]
    for idx, b in enumerate(pick):
        color = f"C{idx}"
        label = f"V = {k * b / 2**20:.2f} MiB"
        for role, face in (("fit", color), ("validate", "none")):  # held-out points hollow
            meas = sorted((q["gap_us"], q["steady_issue_us"]) for q in pts
                          if q["burst_bytes"] == b and q.get("role") == role)
            if meas:
                left.plot([m[0] for m in meas], [m[1] for m in meas], "o", color=color, mfc=face,
                          label=label)
                label = None
        left.plot(grid, [predict(params, k, b, g)["issue"] for g in grid], "-", color=color, lw=1)
    left.set_xscale("symlog", linthresh=1.0)
    left.set_yscale("log")
    left.set_xlabel("gap G (us)")
    left.set_ylabel("steady issue span (us)")
    left.set_title("steady bursts: points measured (hollow: held out), lines model")
    left.legend(fontsize=8)

    # Right: cold and warm isolated span over V.
    largest = {}
    for q in pts:
        largest[q["burst_bytes"]] = max(largest.get(q["burst_bytes"], 0.0), q["gap_us"])
    warm = sorted((k * q["burst_bytes"], q["steady_issue_us"]) for q in pts
                  if q["gap_us"] == largest[q["burst_bytes"]] and q["gap_us"] > 0)
    cold = sorted((k * q["burst_bytes"], q["cold_issue_us"]) for q in pts if q.get("cold_issue_us", 0) > 0)
    if warm:
        right.plot(*zip(*warm), "o", color="C0", label="warm isolated (largest gap), measured")
    if cold:
        right.plot(*zip(*cold), "x", color="C3", label="cold (first burst), measured")
    vs = sorted({k * b for b in sizes})
    lo, hi = vs[0], vs[-1]
    vgrid = [lo * (hi / lo) ** (i / 300) for i in range(301)] if hi > lo else [lo]
    bgrid = [v / k for v in vgrid]
    lb = " (Q is a lower bound)" if q_lower_bound(params, k) else ""
    right.plot(vgrid, [predict(params, k, b, 1e12)["cold_base"] for b in bgrid], "-", color="C0",
               label=f"base: max(T0, (V - Q)/R_agg){lb}")
    right.plot(vgrid, [predict(params, k, b, 1e12)["cold"] for b in bgrid], "--", color="C3",
               label="extended (cold): max(T0, (V - Q_cold)/R_agg)")
    for which, color, name in (("cold_base", "C0", "warm knee"), ("cold", "C3", "cold knee")):
        knee = knee_bytes(params, k, vgrid, which)
        if knee is not None:
            right.axvline(knee, color=color, ls=":", label=f"{name} V = {knee / 2**20:.2f} MiB")
    right.set_xscale("log")
    right.set_yscale("log")
    right.set_xlabel("burst volume V = K*B (bytes)")
    right.set_ylabel("issue span (us)")
    right.set_title("isolated and cold bursts")
    right.legend(fontsize=8)

    plots.save(fig, argv[3], "plot_probe.py")


if __name__ == "__main__":
    main(sys.argv)
