#!/usr/bin/env python3
"""A list-scheduling model of the end of one rank's Mega-MoE call (docs/megamoe.md §Tile claiming,
"The end of the list"): K CTAs claim the tile list in order (dynamic claiming), each tile takes a
fixed time of its kind, a Linear-2 tile starts no earlier than its block's last Linear-1 tile
ended plus a quantisation time. It orders the tiles as include/xstage/moe_tile_order.hpp does
(interleaved with a lead, optionally with the last blocks' Linear-2 tiles after every Linear-1
tile; expert-wave over experts of equal blocks) and prints the makespan and the CTAs' mean idle
time at the end. A model to compare orders with, never a measurement: tile times come from a
bench's --spans (mainloop + epilogue per tile kind).

    python3 tools/moe_tail_model.py --blocks 32 --n1 44 --n2 6 --t1 12.4 --t2 38 [--q 0]
        [--ctas 132] [--l1-per-l2 7] [--blocks-per-expert 2]

Exit: 0 done, 2 bad input.
"""
import argparse
import heapq
import math
import sys


def interleaved(blocks, n1, n2, r, lead, tail_blocks=0):
    """[(kind, block)] in list order: moe_tile_order.hpp's closed form, the tail blocks' Linear-2
    tiles anchored at the Linear-1 count."""
    l1_total = blocks * n1
    d = n1 - n2 * r
    tail_from = (max(0, blocks - tail_blocks) * n2) if tail_blocks > 0 else blocks * n2
    at = {}
    for q in range(blocks * n2):
        a = l1_total if q >= tail_from else n1 + lead + q * r + ((q // n2) * d if d > 0 else 0)
        at[min(a, l1_total) + q] = q
    out, j = [], 0
    for p in range(blocks * (n1 + n2)):
        if p in at:
            out.append((2, at[p] // n2))
        else:
            out.append((1, j // n1))
            j += 1
    return out


def expert_wave(blocks, n1, n2, ctas, per_expert):
    """Waves of the experts whose Linear-1 tiles start in one round of `ctas` tiles."""
    waves = {}
    for e in range(blocks // per_expert):
        waves.setdefault(e * per_expert * n1 // ctas, []).extend(range(e * per_expert, (e + 1) * per_expert))
    out = []
    for w in sorted(waves):
        out += [(1, b) for b in waves[w] for _ in range(n1)]
        out += [(2, b) for b in waves[w] for _ in range(n2)]
    return out


def simulate(order, ctas, t1, t2, q, blocks, n1):
    """(makespan, mean idle at the end) of greedy in-order claiming by `ctas` CTAs."""
    free = [(0.0, c) for c in range(ctas)]
    heapq.heapify(free)
    left, last, ready = [n1] * blocks, [0.0] * blocks, [None] * blocks
    ends = [0.0] * ctas
    for kind, b in order:
        t, c = heapq.heappop(free)
        if kind == 1:
            e = t + t1
            left[b] -= 1
            last[b] = max(last[b], e)
            if left[b] == 0:
                ready[b] = last[b] + q
        else:
            if ready[b] is None:
                raise ValueError("a Linear-2 tile before its block's Linear-1 tiles")
            e = max(t, ready[b]) + t2
        ends[c] = e
        heapq.heappush(free, (e, c))
    mk = max(ends)
    return mk, sum(mk - x for x in ends) / ctas


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--blocks", type=int, required=True, help="m-blocks of the rank")
    ap.add_argument("--n1", type=int, required=True, help="Linear-1 tiles per block")
    ap.add_argument("--n2", type=int, required=True, help="Linear-2 tiles per block")
    ap.add_argument("--t1", type=float, required=True, help="Linear-1 tile time, us")
    ap.add_argument("--t2", type=float, required=True, help="Linear-2 tile time, us")
    ap.add_argument("--q", type=float, default=0.0, help="block ready after its last Linear-1 tile + q us (per-token quantisation)")
    ap.add_argument("--ctas", type=int, default=132)
    ap.add_argument("--l1-per-l2", type=int, default=0, help="interleaved mix r (default n1 / n2)")
    ap.add_argument("--blocks-per-expert", type=int, default=1, help="expert-wave: equal experts of this many blocks")
    a = ap.parse_args(argv)
    if min(a.blocks, a.n1, a.n2, a.ctas, a.blocks_per_expert) < 1 or a.t1 <= 0 or a.t2 <= 0 or a.q < 0 or \
            a.blocks % a.blocks_per_expert:
        print("moe_tail_model: counts must be >= 1, times > 0, --q >= 0, blocks a multiple of --blocks-per-expert",
              file=sys.stderr)
        return 2
    r = a.l1_per_l2 or max(1, a.n1 // a.n2)
    tail = math.ceil(a.ctas / a.n2)
    rows = [("interleaved, lead 1 round", interleaved(a.blocks, a.n1, a.n2, r, a.ctas)),
            ("interleaved, lead 2 rounds", interleaved(a.blocks, a.n1, a.n2, r, 2 * a.ctas)),
            (f"interleaved, tail of {tail} blocks", interleaved(a.blocks, a.n1, a.n2, r, a.ctas, tail)),
            ("expert-wave", expert_wave(a.blocks, a.n1, a.n2, a.ctas, a.blocks_per_expert))]
    print(f"# model (not a measurement): {a.blocks} blocks x ({a.n1} Linear-1 of {a.t1} us + {a.n2} Linear-2 of "
          f"{a.t2} us), q {a.q} us, {a.ctas} CTAs")
    for name, order in rows:
        mk, idle = simulate(order, a.ctas, a.t1, a.t2, a.q, a.blocks, a.n1)
        print(f"{name:32s} makespan {mk:8.1f} us   mean idle at the end {idle:6.1f} us")
    return 0


if __name__ == "__main__":
    sys.exit(main())
