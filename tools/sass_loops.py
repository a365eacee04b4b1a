#!/usr/bin/env python3
"""The tensor-core loops of each kernel in a binary: every backward branch whose body holds a
wgmma (HGMMA / QGMMA ...), with its size in instructions, its wgmmas and their shapes, and its
local-memory instructions (LDL / STL: spills inside a K loop). The docs' "instructions per K
block" figures are these sizes divided by the K blocks one pass of the loop runs.

    python3 tools/sass_loops.py BINARY [--match REGEX] [--all] [--json OUT]

A loop is the range from a backward branch's target to the last backward branch to that target
(a `continue` edge does not split it). By default only the innermost loops are listed (those
containing no other listed loop); --all lists the outer ones too (a tile loop around them, the
persistent loop). Ranges that overlap without nesting (a block placed after a loop that branches
back into it) are all listed: read the addresses before dividing a size by K blocks. Needs cuobjdump as
tools/sass_diff.py does (no GPU). Exit: 0 done, 1 no kernel matched, 2 bad input or cuobjdump
failed.
"""
import argparse
import json
import pathlib
import re
import subprocess
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from sass_diff import cuobjdump, functions  # noqa: E402

_BRA = re.compile(r"\bBRA\b[^;]*?0x([0-9a-f]+)")
_GMMA = re.compile(r"\b[A-Z]*GMMA\.(\d+x\d+x\d+)")
_LOCAL = re.compile(r"\b(LDL|STL)\b")


def parse(text, match="."):
    """`cuobjdump -sass` text -> {kernel: [(address, instruction)]} of the kernels `match` finds."""
    return {name: body for name, body in functions(text) if re.search(match, name)}


def loops(insns, innermost=True):
    """Backward branches whose body [target .. branch] holds a wgmma, in address order."""
    at = {a: k for k, (a, _) in enumerate(insns)}
    last = {}  # branch target -> index of the last backward branch to it
    for k, (a, text) in enumerate(insns):
        m = _BRA.search(text)
        if m and int(m.group(1), 16) < a and int(m.group(1), 16) in at:
            last[int(m.group(1), 16)] = k
    found = []
    for target, k in last.items():
        a = insns[k][0]
        body = [t for _, t in insns[at[target]:k + 1]]
        shapes = [g.group(1) for g in map(_GMMA.search, body) if g]
        if not shapes:
            continue
        found.append({"first": target, "last": a, "instructions": len(body), "wgmmas": len(shapes),
                      "shapes": sorted(set(shapes)), "local": sum(1 for t in body if _LOCAL.search(t))})
    if innermost:
        found = [l for l in found
                 if not any(o is not l and l["first"] <= o["first"] and o["last"] <= l["last"] for o in found)]
    return sorted(found, key=lambda l: l["first"])


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("binary")
    ap.add_argument("--match", default=".", help="regex on the mangled kernel name")
    ap.add_argument("--all", action="store_true", help="outer loops too")
    ap.add_argument("--json", help="write the table as JSON")
    args = ap.parse_args(argv)
    try:
        re.compile(args.match)
    except re.error as e:
        print(f"sass_loops: --match: {e}", file=sys.stderr)
        return 2
    try:
        text = subprocess.run([cuobjdump(), "-sass", args.binary], check=True, capture_output=True, text=True).stdout
    except (OSError, subprocess.CalledProcessError) as e:
        print(f"sass_loops: cuobjdump -sass {args.binary} failed: {e}", file=sys.stderr)
        return 2
    table = {k: loops(v, innermost=not args.all) for k, v in parse(text, args.match).items()}
    if not table:
        print(f"sass_loops: no kernel matches '{args.match}'", file=sys.stderr)
        return 1
    for name, ls in table.items():
        print(name)
        for l in ls:
            print(f"  [{l['first']:#x}..{l['last']:#x}] {l['instructions']} instructions, {l['wgmmas']} wgmmas "
                  f"({','.join(l['shapes'])}), {l['local']} local-memory")
        if not ls:
            print("  (no loop with a wgmma)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(table, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
