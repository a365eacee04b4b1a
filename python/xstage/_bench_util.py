"""Timing and shape helpers shared by ``python -m xstage.bench`` and the repository's PyTorch
baselines (python/bench_*_torch.py reach them through python/xsbench/timing.py, which
re-exports them): argument types and the shared timing options, quantiles and the per-cell
statistics, the input rotation that exceeds L2, CUDA-event timing of individual launches, the
causal pair count, the run stamp, and the rounds of a cell (C++ bench, then the Python rows in
alternating order) with their combination. Functions take the torch module as an argument: importing this module never
imports torch (nor the native extension)."""
from __future__ import annotations

import argparse
import datetime
import math
import os
import statistics

MIN_ITERS = 20  # a median of fewer launches is noise


def ints(text):
    """argparse type: '1,2,3' -> [1, 2, 3]."""
    try:
        return [int(x) for x in text.split(",") if x]
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a comma-separated list of integers: {text!r}")


def add_timing_args(ap, *, warmup_ms_default=None, warmup_ms_help=None, rotate=True):
    """The timing options the benches share: --warmup (untimed launches), --warmup-ms (sustained
    warm-up; only where warmup_ms_default is given), --iters (timed launches), --rotate-mib
    (where `rotate`: the benches whose C++ counterpart always rotates over 2 x L2 leave it out)."""
    ap.add_argument("--warmup", type=int, default=5, help="untimed launches before the timed ones")
    if warmup_ms_default is not None:
        ap.add_argument("--warmup-ms", type=float, default=warmup_ms_default, help=warmup_ms_help)
    ap.add_argument("--iters", type=int, default=30, help=f"timed launches per cell (>= {MIN_ITERS}; median)")
    if rotate:
        ap.add_argument("--rotate-mib", type=float, default=0.0, help="0: 2 x the device's L2")


def quantile(values, q):
    """The q-quantile of `values`, linearly interpolated."""
    v = sorted(values)
    pos = q * (len(v) - 1)
    lo = int(math.floor(pos))
    hi = min(lo + 1, len(v) - 1)
    return v[lo] + (pos - lo) * (v[hi] - v[lo])


def stats_us(us):
    """median / min / max / p10 / p90 (us) of one cell's timed launches."""
    return {"median_us": statistics.median(us), "min_us": min(us), "max_us": max(us),
            "p10_us": quantile(us, 0.1), "p90_us": quantile(us, 0.9)}


def visible_pairs(sq, skv, causal):
    """(query, key) pairs attention computes: all of them, or the top-left-aligned causal ones."""
    if not causal:
        return float(sq) * skv
    n = min(sq, skv)
    return n * (n + 1) / 2 + max(0, sq - skv) * float(skv)


def rotate_bytes(torch, dev, rotate_mib):
    """(L2 bytes, bytes the inputs rotate over): --rotate-mib, or 2 x the device's L2."""
    props = torch.cuda.get_device_properties(dev)
    l2 = getattr(props, "L2_cache_size", 0) or (50 << 20)
    return l2, int(rotate_mib * (1 << 20)) if rotate_mib > 0 else 2 * l2


def sets_for(rotate, set_bytes):
    """How many input sets make one rotation at least `rotate` bytes."""
    return max(1, -(-rotate // max(1, set_bytes)))


def time_launches(torch, call, iters, warmup=0, before=None):
    """us of `iters` individually timed calls call(i) (CUDA events around each), after
    `warmup` untimed calls; before(i), if given, runs ahead of each timed call, outside the
    events (a barrier, a GPU busy-wait)."""
    for w in range(warmup):
        call(w)
    ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(iters)]
    for it, (s, e) in enumerate(ev):
        if before is not None:
            before(it)
        s.record()
        call(warmup + it)
        e.record()
    torch.cuda.synchronize()
    return [s.elapsed_time(e) * 1e3 for s, e in ev]


def time_paired(torch, calls, iters):
    """us of `iters` rounds of several calls interleaved launch by launch (CUDA events around each
    launch): round `it` runs every call once, in an order rotated by one per round (call c goes
    at position (c - it) mod n), and the call at position j gets input index it * n + j, so
    consecutive launches never share an input (the callers take it modulo their sets). All calls
    thus see the same clock, power state and cache state over the loop, which separate blocks
    of launches do not. Returns one list of per-launch us per call, round by round. The caller
    warms up and queues a spin kernel first, as for time_launches."""
    n = len(calls)
    ev = [[(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(n)]
          for _ in range(iters)]
    for it in range(iters):
        for j in range(n):
            c = (j + it) % n
            s, e = ev[it][c]
            s.record()
            calls[c](it * n + j)
            e.record()
    torch.cuda.synchronize()
    return [[ev[it][c][0].elapsed_time(ev[it][c][1]) * 1e3 for it in range(iters)] for c in range(n)]


def paired_ratio(a_us, b_us):
    """The median of the per-round ratios a / b of time_paired's lists (same length)."""
    if len(a_us) != len(b_us) or not a_us:
        raise ValueError("paired_ratio: two non-empty lists of the same length")
    return statistics.median(a / b for a, b in zip(a_us, b_us))


def sustain(torch, call, ms):
    """Untimed calls call(i), i = 0, 1, ..., for about `ms` milliseconds, synchronising every
    16: the timed launches that follow see the sustained, power-capped clock, not a short
    burst's boost clock (the C++ benches' --warmup-ms, src/cli/bench_util.hpp sustain_clock)."""
    import time

    t0, i = time.monotonic(), 0
    while (time.monotonic() - t0) * 1e3 < ms:
        for _ in range(16):
            call(i)
            i += 1
        torch.cuda.synchronize()


def record_error(results, rec, e):
    """Marks the bench record `rec` as failed with the first line of exception `e`, appends it
    to `results`, and returns that line."""
    rec["error"] = str(e).split("\n")[0]
    results.append(rec)
    return rec["error"]


def stamp():
    """The run stamp of a bench document: commit (XSTAGE_COMMIT) and UTC date."""
    return {"commit": os.environ.get("XSTAGE_COMMIT", "unknown"),
            "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")}


def round_order(rows, r):
    """The rows of round r: forward in even rounds, reversed in odd ones. Over an even number of
    rounds every row then has the same mean position in the cell, so a clock drifting linearly
    in time shifts all rows alike (the first row after a C++ run is otherwise the fastest)."""
    return list(rows) if r % 2 == 0 else list(reversed(rows))


def run_rounds(rounds, names, time_row, run_cli=None):
    """One cell's schedule: for r in range(rounds), run_cli() (when given; a None result is not
    kept), then time_row(name) for each name in round_order(names, r); then run_cli() once more,
    so the C++ runs bracket the rounds and their mean position in time is the rows' (a steady
    clock drift cancels). A row whose time_row raises RuntimeError is left out of the later
    rounds. Returns ({name: [time_row result per round]}, {name: first line of its error},
    [run_cli results])."""
    timed, errors, cli = {n: [] for n in names}, {}, []

    def cli_run():
        if run_cli is not None:
            c = run_cli()
            if c is not None:
                cli.append(c)
    for r in range(rounds):
        cli_run()
        for n in round_order(names, r):
            if n in errors:
                continue
            try:
                timed[n].append(time_row(n))
            except RuntimeError as e:
                errors[n] = str(e).split("\n")[0]
    cli_run()
    return timed, errors, cli


def pool_rounds(rounds_us):
    """A row's statistics over its rounds (a list of per-round lists of launch times, us): those
    of all its timed launches pooled (no median of medians, no best round), plus each round's
    median (round_medians_us)."""
    return dict(stats_us([x for us in rounds_us for x in us]),
                round_medians_us=[statistics.median(us) for us in rounds_us])


def cli_reference(runs):
    """The C++ reference of one cell from its runs' rows (dicts with median_us, tflops, min_us,
    correctness where the bench writes them): the first run's fields with median_us = the mean
    of the runs' medians (each kept in cli_medians_us), so a clock drift between the runs
    averages out; tflops at that mean; min_us / tflops_best the best run's; correctness the
    first run's record that did not pass (a missing one counts as not passed), if any."""
    meds = [r["median_us"] for r in runs]
    ref = dict(runs[0], median_us=sum(meds) / len(meds), cli_medians_us=meds)
    if "tflops" in ref:
        ref["tflops"] = runs[0]["tflops"] * meds[0] / ref["median_us"]   # keeps the C++ bench's flop count
    for key, best in (("min_us", min), ("tflops_best", max)):
        if all(key in r for r in runs):
            ref[key] = best(r[key] for r in runs)
    failed = [r.get("correctness") for r in runs if not (r.get("correctness") or {}).get("passed", False)]
    if failed and "correctness" in ref:
        ref["correctness"] = failed[0]
    return ref
