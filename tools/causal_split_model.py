#!/usr/bin/env python3
"""What a causal key split could gain, by the launch-length model of causal_rows128_wins
(docs/attention.md "Short sequences": a CTA's time ~ its visible key blocks + 1 per work item),
before anyone builds it (issue 38: causal d = 64 at S = 2048 with 8 heads is the shape where
every CTA holds one tile and the call lasts as long as the longest). A model, not a measurement.

    python3 tools/causal_split_model.py [--seqs 2048,4096,8192] [--heads 8,16,24,40]
        [--block-m 128] [--block-n 128] [--slots 132] [--min-part 4] [--max-parts 4]

Per shape: the busiest CTA's load with whole tiles (items handed out longest first to the least
loaded CTA, the best case of the shipped longest-first order) and with tiles cut along the keys
(a part costs its blocks + 1 + 1 for storing its partial O and its share of the merge): every tile
longer than a cap cut into ceil(blocks / cap) parts of at least --min-part blocks, at most
--max-parts per tile, the best cap; the predicted speed-up is the ratio of the two. Exit: 0, 2 on bad arguments.
"""
import argparse
import heapq
import sys


def key_blocks(m, block_m, block_n, seq):
    """Visible key blocks of q tile m (top-left causal, q_len = kv_len = seq)."""
    last_row = min((m + 1) * block_m, seq)
    return (last_row + block_n - 1) // block_n


def makespan(costs, slots):
    """Longest processing time first onto the least loaded of `slots` CTAs: the busiest load."""
    loads = [0.0] * min(slots, max(1, len(costs)))
    heapq.heapify(loads)
    for c in sorted(costs, reverse=True):
        heapq.heapreplace(loads, loads[0] + c)
    return max(loads)


def parts_cost(blocks, k):
    """Costs of a tile of `blocks` key blocks cut into k parts (k = 1: the whole tile)."""
    if k == 1:
        return [blocks + 1.0]
    return [(blocks * (i + 1) // k - blocks * i // k) + 2.0 for i in range(k)]


def plan(tiles, slots, min_part, max_parts):
    """(busiest load whole, busiest load split, parts per tile) for tiles = [key blocks]: every
    tile longer than a cap is cut into ceil(blocks / cap) parts (at most max_parts, parts of at
    least min_part blocks); the best cap over all caps."""
    whole = makespan([b + 1.0 for b in tiles], slots)
    best, best_k = whole, [1] * len(tiles)
    for cap in range(min_part, max(tiles) + 1):
        k = [min(max_parts, -(-b // cap)) if b > cap else 1 for b in tiles]
        k = [min(x, max(1, b // min_part)) for x, b in zip(k, tiles)]
        span = makespan([c for t, b in enumerate(tiles) for c in parts_cost(b, k[t])], slots)
        if span < best:
            best, best_k = span, k
    return whole, best, best_k


def ints(s):
    try:
        v = [int(x) for x in s.split(",") if x]
    except ValueError:
        raise argparse.ArgumentTypeError(f"want a comma list of integers, got '{s}'")
    if not v or min(v) <= 0:
        raise argparse.ArgumentTypeError(f"want positive integers, got '{s}'")
    return v


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seqs", type=ints, default=[2048, 4096, 8192, 16384, 32768])
    ap.add_argument("--heads", type=ints, default=[8, 16, 24, 40])
    ap.add_argument("--block-m", type=int, default=128)
    ap.add_argument("--block-n", type=int, default=128)
    ap.add_argument("--slots", type=int, default=132)
    ap.add_argument("--min-part", type=int, default=4)
    ap.add_argument("--max-parts", type=int, default=4)
    a = ap.parse_args(argv)
    if min(a.block_m, a.block_n, a.slots, a.min_part, a.max_parts) <= 0:
        print("causal_split_model: sizes must be positive", file=sys.stderr)
        return 2
    print(f"# model only: busiest CTA in key blocks (+1 per item, +1 per split part); "
          f"{a.block_m} x {a.block_n} tiles, {a.slots} CTAs")
    print(f"{'S':>6} {'H':>3} {'tiles':>6} {'whole':>7} {'split':>7} {'speed-up':>8} {'tiles cut':>9}")
    for s in a.seqs:
        for h in a.heads:
            mb = (s + a.block_m - 1) // a.block_m
            tiles = [key_blocks(m, a.block_m, a.block_n, s) for m in range(mb)] * h
            whole, split, k = plan(tiles, a.slots, a.min_part, a.max_parts)
            print(f"{s:>6} {h:>3} {len(tiles):>6} {whole:>7.0f} {split:>7.0f} {whole / split:>8.3f} "
                  f"{sum(x > 1 for x in k):>9}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
