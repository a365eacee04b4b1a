"""Median over repeated xstage-vs-cuDNN passes of compare_attention.py (its --json files).

Usage: attention_passes.py C1.json C2.json ...  Per cell (seqlen, heads, head_dim, dtype, causal):
each side's median time over the passes whose correctness checks both passed, and cuDNN / xstage.
A cell with a failed check in any pass is listed as FAILED and does not count as met."""
import json
import statistics
import sys


def main(paths):
    cells = {}
    for p in paths:
        try:
            rows = json.load(open(p))["rows"]
        except (OSError, ValueError, KeyError, TypeError) as e:
            sys.exit(f"attention_passes.py: {p}: not a compare_attention.py --json file ({e!r})")
        for row in rows:
            key = (row["seqlen"], row["heads"], row["head_dim"], row["dtype"], row["causal"])
            c = row.get("torch-cudnn") or {}
            ok = bool(row.get("correctness_ok")) and bool(c.get("correctness_ok"))
            cells.setdefault(key, []).append((ok, row.get("xstage_median_us"), c.get("median_us")))
    met = 0
    print(f"# median over {len(paths)} passes; ratio = cuDNN us / xstage us (>= 1: xstage at or above cuDNN)")
    print(f"# {'S':>6} {'H':>3} {'d':>4} dtype causal passes  xstage_us   cudnn_us  ratio")
    for key in sorted(cells):
        runs = cells[key]
        good = [(x, c) for ok, x, c in runs if ok and x is not None and c is not None]
        if len(good) < len(runs):
            print(f"  {key[0]:>6} {key[1]:>3} {key[2]:>4} {key[3]} {key[4]!s:>6} FAILED ({len(runs) - len(good)} of {len(runs)} passes)")
            continue
        x = statistics.median(g[0] for g in good)
        c = statistics.median(g[1] for g in good)
        met += c >= x
        print(f"  {key[0]:>6} {key[1]:>3} {key[2]:>4} {key[3]} {key[4]!s:>6} {len(good):>6} {x:>10.2f} {c:>10.2f} {c / x:>6.3f}")
    print(f"# xstage >= cuDNN (median over passes) at {met} of {len(cells)} cells")
    return 0 if met == len(cells) else 1


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    sys.exit(main(sys.argv[1:]))
