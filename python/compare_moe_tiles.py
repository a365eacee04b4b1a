#!/usr/bin/env python3
"""The Mega-MoE kernel's two W8A8 tiles side by side (docs/megamoe.md "Tile configurations"): per
configuration of one `xstage bench moe` JSON file that ran the +m64n256 and +m128n256 variants of
both orders and the unfused layer, the mean routed rows per expert, each tile's better order, their
ratio, and what the automatic rule (128 x 256 from --min-rows mean rows) gives against the unfused
layer. Model shapes come from `xstage moe-routing --list` of the given binary.

  python/compare_moe_tiles.py --xstage build/xstage tiles.json [--min-rows 64]
"""
import argparse
import gzip
import json
import subprocess
import sys
from collections import defaultdict

TOOL = "compare_moe_tiles.py"
TILES = ("m64n256", "m128n256")
ORDERS = ("interleaved", "expert-wave")


def parse_shapes(listing):
    """{model: (experts, top_k)} from `xstage moe-routing --list` (header line first)."""
    shapes = {}
    for line in listing.splitlines()[1:]:
        f = line.split()
        if len(f) >= 5:
            shapes[f[0]] = (int(f[3]), int(f[4]))
    return shapes


def table(doc, shapes):
    """Rows (mean_rows, model, routing, tokens, best m64 us, best m128 us, unfused us) and the
    problems (missing cells, failed checks, unknown models)."""
    cells, probs = defaultdict(dict), []
    world = doc.get("world", 1)
    for r in doc.get("results", []):
        key = (r["model"], r["routing"], r["tokens_per_rank"])
        if r.get("check") != "ok":
            probs.append(f"{key}: {r['variant']} check {r.get('check')}")
        cells[key][r["variant"]] = r["median_us"]
    rows = []
    for (model, routing, tokens), v in cells.items():
        if model not in shapes:
            probs.append(f"{model}: not a model of the binary's --list")
            continue
        need = ["unfused"] + [f"{o}+{t}" for o in ORDERS for t in TILES]
        missing = [n for n in need if n not in v]
        if missing:
            probs.append(f"{(model, routing, tokens)}: no {', '.join(missing)}")
            continue
        experts, top_k = shapes[model]
        mean = tokens * world * top_k / experts
        best = {t: min(v[f"{o}+{t}"] for o in ORDERS) for t in TILES}
        rows.append((mean, model, routing, tokens, best["m64n256"], best["m128n256"], v["unfused"]))
    rows.sort()
    return rows, probs


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("json", help="xstage bench moe --json file (.gz too)")
    ap.add_argument("--xstage", required=True, help="the xstage binary (for moe-routing --list)")
    ap.add_argument("--min-rows", type=float, default=32,
                    help="the automatic rule's threshold (mean rows per expert; xstage/mega_tile.hpp kMega128MinMeanRows)")
    a = ap.parse_args(argv)
    try:
        doc = json.load(gzip.open(a.json, "rt") if a.json.endswith(".gz") else open(a.json))
        listing = subprocess.run([a.xstage, "moe-routing", "--list"], capture_output=True, text=True,
                                 check=True, timeout=60).stdout
    except (OSError, ValueError, subprocess.SubprocessError) as e:
        print(f"{TOOL}: {e}", file=sys.stderr)
        return 2
    rows, probs = table(doc, parse_shapes(listing))
    for p in probs:
        print(f"{TOOL}: {p}", file=sys.stderr)
    if probs:
        return 1
    print(f"# {a.json}: commit {doc.get('commit')}, world {doc.get('world')}, {doc.get('date')}; "
          f"best = the better order's median us; auto = 128 x 256 from {a.min_rows:g} mean rows")
    print(f"{'mean_rows':>9} {'model':18} {'routing':8} {'tokens':>6} {'m64 us':>9} {'m128 us':>9} "
          f"{'m64/m128':>8} {'unfused/auto':>12}")
    ok = 0
    for mean, model, routing, tokens, b64, b128, unf in rows:
        auto = b128 if mean >= a.min_rows else b64
        ok += unf >= auto
        print(f"{mean:9.1f} {model:18} {routing:8} {tokens:6d} {b64:9.1f} {b128:9.1f} {b64 / b128:8.3f} {unf / auto:12.3f}")
    print(f"# auto >= unfused: {ok} of {len(rows)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
