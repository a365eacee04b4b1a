#!/usr/bin/env python3
"""A latency model of the attention softmax region in SASS (docs/attention.md §Softmax
instruction budget): for each step loop of a kernel, the instructions between the "S ready" wait
(`WARPGROUP.DEPBAR.LE gsb0, 0x1`) and the "P V done" wait (`... 0x0`), issued in order by one
warp at one instruction per cycle, each waiting for its source registers (latency per opcode
below), exponentials also for the SFU (one per `--mufu-cycles`). The cycle count says how long
the chain would take with nothing else on the sub-partition; it is a model to compare builds
with, never a measurement of one.

    cuobjdump -sass -fun KERNEL BINARY > k.sass
    python3 tools/sass_step_model.py k.sass [--mufu-latency 18] [--mufu-cycles 4]

Prints one line per step loop found (region size, modelled cycles, instruction mix).
Exit: 0 done, 1 no step loop in the file, 2 bad input.
"""
import argparse
import collections
import re
import sys

_INSN = re.compile(r"\s*/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;")
_BRA = re.compile(r"BRA\s.*?0x([0-9a-f]+)")
_REG = re.compile(r"\bR(\d+)\b")
# Not timed: tensor-core and synchronisation instructions (the waits bound the region).
_SKIP = {"HGMMA", "WARPGROUP", "BRA", "BAR", "SYNCS", "NOP"}
# No register result: their first register operand is a source.
_NO_DEST = {"STS", "ST", "STG", "ISETP", "FSETP", "VOTE", "RED", "ATOM"}


def parse(text):
    """[(address, instruction text without predicate-free changes)] of a cuobjdump -sass listing."""
    return [(int(m.group(1), 16), m.group(2)) for m in map(_INSN.match, text.splitlines()) if m]


def opcode(insn):
    body = re.sub(r"^@!?U?P\w+\s+", "", insn)
    op = body.split()[0]
    return op.split(".")[0], body[len(op):]


def model(region, latency, mufu_cycles):
    """Cycles for one warp to issue `region` in order (see the module docstring)."""
    ready, t, sfu_free = {}, 0, 0
    for _, insn in region:
        base, operands = opcode(insn)
        if base in _SKIP:
            continue
        parts = operands.split(",")
        regs = [r for p in parts for r in _REG.findall(p)]
        dest = [] if base in _NO_DEST or not regs else _REG.findall(parts[0])
        srcs = regs[len(dest):]
        start = max([t] + [ready.get(r, 0) for r in srcs])
        if base == "MUFU":
            start = max(start, sfu_free)
            sfu_free = start + mufu_cycles
        t = start + 1
        for r in dest:
            ready[r] = start + latency.get(base, latency["default"])
    return t


def step_regions(insns):
    """[(first, last) index] of each "S ready" .. "P V done" region inside a backward-branch loop."""
    out = []
    for i, (_, insn) in enumerate(insns):
        if "WARPGROUP.DEPBAR.LE gsb0, 0x1" not in insn:
            continue
        j = next((k for k in range(i + 1, len(insns)) if "WARPGROUP.DEPBAR.LE gsb0, 0x0" in insns[k][1]), None)
        if j is None:
            continue
        loop_end = next((k for k in range(j, len(insns)) if (m := _BRA.search(insns[k][1]))
                         and int(m.group(1), 16) < insns[k][0]), None)
        if loop_end is not None and int(_BRA.search(insns[loop_end][1]).group(1), 16) <= insns[i][0]:
            out.append((i, j))
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("sass")
    ap.add_argument("--latency", type=int, default=5, help="cycles of an arithmetic result (default 5)")
    ap.add_argument("--mufu-latency", type=int, default=18)
    ap.add_argument("--shfl-latency", type=int, default=24)
    ap.add_argument("--mufu-cycles", type=int, default=4, help="SFU cycles per warp exponential (default 4)")
    a = ap.parse_args(argv)
    if min(a.latency, a.mufu_latency, a.shfl_latency, a.mufu_cycles) < 1:
        print("sass_step_model: latencies and --mufu-cycles must be >= 1", file=sys.stderr)
        return 2
    try:
        with open(a.sass) as f:
            insns = parse(f.read())
    except OSError as e:
        print(f"sass_step_model: {e}", file=sys.stderr)
        return 2
    latency = {"default": a.latency, "MUFU": a.mufu_latency, "SHFL": a.shfl_latency}
    regions = step_regions(insns)
    if not regions:
        print("sass_step_model: no step loop (S-ready wait, P-V-done wait, backward branch) in the file", file=sys.stderr)
        return 1
    for i, j in regions:
        region = insns[i + 1:j + 1]
        mix = collections.Counter(opcode(x)[0] for _, x in region)
        print(f"step at {insns[i][0]:#x}: {len(region)} instructions, modelled {model(region, latency, a.mufu_cycles)} "
              f"cycles; " + ", ".join(f"{k} {v}" for k, v in mix.most_common(8)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
