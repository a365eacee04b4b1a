#!/usr/bin/env python3
"""Measured vs predicted X-Stage behaviour.

    python3 python/plot_probe.py DATA.json PARAMS.json OUT.png

DATA.json is a probe run ("xstage.probe.v1"), PARAMS.json fitted Burst-Gap parameters
("xstage.params.v1", from `xstage fit DATA.json --out PARAMS.json`).
Left:  steady issue span over the gap G for several burst volumes V, at the largest K in
       the data (dest=peer, store=v4, addr=fresh, gap_kind=idle): points measured, lines model.
Right: cold-burst and warm isolated (largest gap) issue span over V at the same K, with the
       model's isolated span, its cold extension, and the knee where (V - Q)/R overtakes T0.
Exit status: 0 ok, 2 bad input, 3 matplotlib missing.
"""
import json
import sys

# --- Burst-Gap model -------------------------------------------------------------------
# Re-implements the equations of src/model/burst_gap.cpp (docs/model.md); keep in sync.
# Units: us, bytes, GB/s (1 GB/s = 1e3 bytes/us).


def t0_us(p, b):
    return p["t0_fixed_us"] + b / (p["issue_gbps_per_producer"] * 1e3)


def q_bytes(p, k):
    table = sorted((e["producers"], e["q_bytes"]) for e in p["q_bytes_by_k"])
    if k <= table[0][0]:
        return table[0][1]
    for (k0, q0), (k1, q1) in zip(table, table[1:]):
        if k <= k1:
            return q0 + (k - k0) / (k1 - k0) * (q1 - q0)
    return table[-1][1]


def predict(p, k, b, g):
    """Steady issue span, isolated (cold, base) span and cold span with the extension."""
    v, r, t0 = k * b, p["r_gbps"] * 1e3, t0_us(p, b)
    fill = (v - q_bytes(p, k)) / r
    cold = p.get("cold", {"c0_us": 0.0, "c1_us_per_mib": 0.0})
    isolated = max(t0, fill)
    return {"issue": max(t0, v / r - g, fill), "isolated": isolated,
            "cold_ext": isolated + cold["c0_us"] + cold["c1_us_per_mib"] * v / 2**20}


def knee_bytes(p, k):
    """V where (V - Q)/R = T0(V/K); None when K producers cannot outrun the drain."""
    r, ir = p["r_gbps"] * 1e3, k * p["issue_gbps_per_producer"] * 1e3
    if ir <= r:
        return None
    return (q_bytes(p, k) + r * p["t0_fixed_us"]) / (1 - r / ir)

# ----------------------------------------------------------------------------------------


def fail(msg, code=2):
    print(f"plot_probe.py: error: {msg}", file=sys.stderr)
    sys.exit(code)


def load(path, schema):
    try:
        with open(path) as f:
            data = json.load(f)
    except (OSError, ValueError) as e:
        fail(f"{path}: {e}")
    if not isinstance(data, dict) or data.get("schema") != schema:
        fail(f"{path}: expected schema \"{schema}\"")
    return data


def main(argv):
    if len(argv) != 4:
        fail("usage: plot_probe.py DATA.json PARAMS.json OUT.png")
    run = load(argv[1], "xstage.probe.v1")
    params = load(argv[2], "xstage.params.v1")
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        fail("matplotlib is not installed (pip install matplotlib); no plot written", 3)

    pts = [q for q in run.get("points", [])
           if q.get("dest") == "peer" and q.get("store") == "v4" and q.get("addr") == "fresh"
           and q.get("gap_kind") == "idle" and q.get("steady_issue_us", 0) > 0]
    if not pts:
        fail(f"{argv[1]}: no points with dest=peer store=v4 addr=fresh gap_kind=idle")
    k = max(q["producers"] for q in pts)
    pts = [q for q in pts if q["producers"] == k]

    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 5))
    fig.suptitle(f"X-Stage: measured vs Burst-Gap model, K = {k} ({run.get('device', '')})")

    # Left: steady span over G for up to five burst sizes spread over the measured range.
    sizes = sorted({q["burst_bytes"] for q in pts})
    pick = sorted({sizes[round(i * (len(sizes) - 1) / 4)] for i in range(5)}) if len(sizes) > 5 else sizes
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
    right.plot(vgrid, [predict(params, k, b, 1e12)["isolated"] for b in bgrid], "-", color="C0",
               label="model: max(T0, (V - Q)/R)")
    right.plot(vgrid, [predict(params, k, b, 1e12)["cold_ext"] for b in bgrid], "--", color="C3",
               label="model + cold extension")
    knee = knee_bytes(params, k)
    if knee is not None and lo <= knee <= hi:
        right.axvline(knee, color="gray", ls=":", label=f"knee V = {knee / 2**20:.2f} MiB")
    right.set_xscale("log")
    right.set_yscale("log")
    right.set_xlabel("burst volume V = K*B (bytes)")
    right.set_ylabel("issue span (us)")
    right.set_title("isolated and cold bursts")
    right.legend(fontsize=8)

    fig.tight_layout()
    try:
        fig.savefig(argv[3], dpi=120)
    except OSError as e:
        fail(f"{argv[3]}: {e}")
    print(f"plot_probe.py: wrote {argv[3]}")


if __name__ == "__main__":
    main(sys.argv)
