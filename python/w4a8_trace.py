#!/usr/bin/env python3
"""Summarise a W4A8 stage trace (src/kernels/moe/w4a8_trace.cuh, written by a build with
-DXSTAGE_W4A8_TRACE and XSTAGE_W4A8_TRACE_FILE set; `scripts/gpu-run OUT moe-trace`).

Per stage of every CTA (clock cycles of the SM, steady stages only: the first 4 of a CTA are
left out) it prints the median and p10/p90 over all CTAs and stages of:
  period        consumer WG 0 ready(s+1) - ready(s): the time per K block
  tma           producer issue of stage s -> converter warp sees full[s]
  conv          converter warp: cempty[s] passed -> cfull arrived (its own units)
  conv_wait_full  converter warp: cfull arrived (s-1) -> full[s] seen (waiting for packed B,
                or the code between two stages when the data is long there)
  conv_wait_empty converter warp: full[s] seen -> cempty[s] passed (waiting for a free buffer)
  cfull_wait    last converter / consumer conversion of s done -> consumer WG w ready at s
  issue         WG w ready -> wgmmas committed
  own_conv      WG w: committed -> own conversion of stage s+1 done
  wgmma_rest    WG w: own conversion done -> wgmmas complete
  promote       WG w: wgmmas complete -> released
  gap           WG w: released(s) -> ready(s+1)
Register-operand kernels (header "register-operand pieces P ..."; w4a8_rs.cuh), per consumer
WG w and K block, with two pieces (P = 2):
  mma0 / mma1        piece issued -> its wgmmas complete
  promote0 / promote1  wgmmas complete -> piece promoted (promote1 includes the release)
  issue1             piece 0 promoted -> piece 1 issued
  full_wait          released -> next K block's full barrier seen
  convert            full seen -> next K block converted
  gap                converted -> next K block's piece 0 issued
  lead               producer issue of the next K block -> its full seen by WG w (load to use)
and with one piece: full_wait (issued -> next block's full seen), convert, mma_rest (converted ->
wgmmas complete), promote (-> released), gap (released -> next block issued); period as above.
  issue_wait_other   (two pieces) a piece's issue end minus the other group's latest wgmma
                     completion before it, when that was at most 64 cycles earlier: how many
                     issues end right after the other group's wgmmas (n of the median) and by
                     how much. A register-operand issue does not complete while the other
                     group's wgmmas run (docs/perf-log.md §MoE grouped GEMM, W4A8).
--timeline CTA:K0:K1 prints, for one CTA and K blocks K0..K1, both groups' stamps in time order
(two-piece kernels), the view that showed it.
Usage: python3 python/w4a8_trace.py TRACE.txt [--ghz 1.98] [--timeline CTA:K0:K1]
"""
import argparse
import statistics as st
import sys

NONE = 0xFFFFFFFF


def d(a, b):
    """b - a in cycles modulo 2^32, None if either is missing."""
    if a == NONE or b == NONE:
        return None
    return (b - a) & 0xFFFFFFFF


def adder(stats):
    """add(name, x): collect x under name unless it is missing or a wrapped negative."""

    def add(name, x):
        if x is not None and x < 1 << 30:
            stats.setdefault(name, []).append(x)

    return add


def stages(a, rows):
    """(previous, this, next stage's slot row; None where absent) of every traced stage from
    --skip on."""
    for (c, s), r in rows.items():
        if s >= a.skip:
            yield rows.get((c, s - 1)), r, rows.get((c, s + 1))


def pct(xs, q):
    xs = sorted(xs)
    if not xs:
        return float("nan")
    i = (len(xs) - 1) * q
    lo = int(i)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (i - lo)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("trace")
    ap.add_argument("--ghz", type=float, default=1.98, help="SM clock for the microsecond column")
    ap.add_argument("--skip", type=int, default=4, help="leading stages of each CTA left out")
    ap.add_argument("--timeline", help="CTA:K0:K1 - both groups' stamps of those K blocks in time order (rs, two pieces)")
    a = ap.parse_args(argv)
    header = ""
    rows = {}
    with open(a.trace) as f:
        for line in f:
            if line.startswith("#"):
                header = line.strip()
                continue
            v = [int(x) for x in line.split()]
            if len(v) < 3:
                continue
            rows[(v[0], v[1])] = v[2:]
    if not rows:
        sys.exit("w4a8_trace: no trace rows in " + a.trace)
    if a.timeline and ("register-operand" not in header or rs_pieces(header) != 2):
        sys.exit("w4a8_trace: --timeline reads register-operand traces with two pieces; this one is: " + header)
    if "register-operand" in header:
        if a.timeline:
            return timeline_rs(a, rows)
        return summarise_rs(a, header, rows)
    nslots = len(next(iter(rows.values())))
    wgs = (nslots - 4) // 5
    # Which consumer groups ran (a 2-WG kernel leaves group 2 unreached).
    wgs = max(w + 1 for w in range(wgs) for r in rows.values() if r[4 + 5 * w] != NONE) if rows else 0
    stats = {}
    add = adder(stats)

    for prev, r, nxt in stages(a, rows):
        add("tma", d(r[0], r[1]))
        add("conv", d(r[2], r[3]))
        add("conv_wait_empty", d(r[1], r[2]))
        if prev is not None:
            add("conv_wait_full", d(prev[3], r[1]))
        for w in range(wgs):
            b = 4 + 5 * w
            add(f"issue[{w}]", d(r[b], r[b + 1]))
            add(f"own_conv[{w}]", d(r[b + 1], r[b + 2]))
            add(f"wgmma_rest[{w}]", d(r[b + 2], r[b + 3]))
            add(f"promote[{w}]", d(r[b + 3], r[b + 4]))
            if nxt is not None:
                add(f"gap[{w}]", d(r[b + 4], nxt[b]))
                add(f"period[{w}]", d(r[b], nxt[b]))
            # Stage s was converted during stage s - 1 (consumers record that conversion in
            # their stage s - 1 row) and by the converter warp in its stage s row.
            if prev is not None:
                done = [r[3]] + [prev[4 + 5 * v + 2] for v in range(wgs)]
                # ready(s) minus the last of those conversions (all precede it)
                lags = [d(t, r[b]) for t in done]
                if None not in lags and max(lags) < 1 << 30:
                    add(f"cfull_wait[{w}]", min(lags))
    report(a, header, stats)


def report(a, header, stats):
    print(header)
    print(f"{'quantity':>16} {'n':>6} {'median':>9} {'p10':>9} {'p90':>9}  cycles (median us at {a.ghz} GHz)")
    for k in sorted(stats):
        xs = stats[k]
        m = st.median(xs)
        print(f"{k:>16} {len(xs):6d} {m:9.0f} {pct(xs, 0.1):9.0f} {pct(xs, 0.9):9.0f}  {m / a.ghz / 1e3:.3f}")


def rs_pieces(header):
    """Token pieces per tile from a register-operand header ("... pieces P ..."; 1 if absent)."""
    words = header.split()
    return int(words[words.index("pieces") + 1]) if "pieces" in words else 1


def summarise_rs(a, header, rows):
    """The register-operand kernels' slots (w4a8_trace.cuh, W4RsTraceSlot)."""
    pieces = rs_pieces(header)
    stats = {}
    add = adder(stats)

    for _prev, r, nxt in stages(a, rows):
        for w in range(2):
            b = 4 + 8 * w
            if r[b] == NONE:
                continue
            if pieces == 2:
                for name, i, j in (("mma0", 0, 1), ("promote0", 1, 2), ("issue1", 2, 3), ("mma1", 3, 4),
                                   ("promote1", 4, 5), ("full_wait", 5, 6), ("convert", 6, 7)):
                    add(f"{name}[{w}]", d(r[b + i], r[b + j]))
                last, seen = b + 7, b + 6
            else:
                for name, i, j in (("full_wait", 0, 1), ("convert", 1, 2), ("mma_rest", 2, 3), ("promote", 3, 4)):
                    add(f"{name}[{w}]", d(r[b + i], r[b + j]))
                last, seen = b + 4, b + 1
            if nxt is not None:
                add(f"gap[{w}]", d(r[last], nxt[b]))
                add(f"period[{w}]", d(r[b], nxt[b]))
                add(f"lead[{w}]", d(nxt[0], r[seen]))
    if pieces == 2:
        issue_wait_other(rows, a.skip, add)
    report(a, header, stats)


RS2_NAMES = ("issued0", "done0", "promoted0", "issued1", "done1", "released", "next_full", "next_converted")


def issue_wait_other(rows, skip, add):
    """Two-piece rs kernels: for each piece issue of group w (slots 0 and 3), the gap to the other
    group's latest wgmma completion (slots 1 and 4 of K blocks s - 1 and s) before it, if <= 64."""
    for (c, s), r in rows.items():
        if s < skip:
            continue
        prev = rows.get((c, s - 1))
        for w in range(2):
            b, o = 4 + 8 * w, 4 + 8 * (1 - w)
            done = [x[o + i] for x in (prev, r) if x is not None for i in (1, 4) if x[o + i] != NONE]
            for i in (0, 3):
                if r[b + i] == NONE:
                    continue
                gaps = [g for g in (d(t, r[b + i]) for t in done) if g is not None and g < 1 << 30]
                if gaps and min(gaps) <= 64:
                    add(f"issue_wait_other[{w}]", min(gaps))


def timeline_rs(a, rows):
    """Both groups' stamps of K blocks K0..K1 of one CTA, in time order (two-piece kernels)."""
    try:
        cta, k0, k1 = (int(x) for x in a.timeline.split(":"))
    except ValueError:
        sys.exit("w4a8_trace: --timeline wants CTA:K0:K1")
    ev = []
    for s in range(k0, k1 + 1):
        r = rows.get((cta, s))
        if r is None:
            continue
        for w in range(2):
            for i, name in enumerate(RS2_NAMES):
                t = r[4 + 8 * w + i]
                if t != NONE:
                    ev.append((t, f"WG{w} kb{s} {name}"))
    if not ev:
        sys.exit(f"w4a8_trace: no stamps for CTA {cta}, K blocks {k0}..{k1}")
    # Clock values are 32 bits and may wrap inside the range: order by the signed distance
    # from the first K block's first stamp of group 0 (or of group 1).
    ref = ev[0][0]

    def rel(t):
        return ((t - ref + (1 << 31)) & 0xFFFFFFFF) - (1 << 31)

    ev = sorted((rel(t), name) for t, name in ev)
    t0 = prev = ev[0][0]
    print(f"{'cycle':>7} {'+delta':>7}  event")
    for t, name in ev:
        print(f"{t - t0:7d} {t - prev:+7d}  {name}")
        prev = t


if __name__ == "__main__":
    main()
