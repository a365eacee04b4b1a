"""Timing and shape helpers shared by ``python -m xstage.bench`` and the repository's PyTorch
baselines (python/bench_*_torch.py reach them through python/xsbench/timing.py, which
re-exports them): argument types, quantiles and the per-cell statistics, the input rotation
that exceeds L2, CUDA-event timing of individual launches, the causal pair count, and the
run stamp. Functions take the torch module as an argument: importing this module never
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
