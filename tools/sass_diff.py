#!/usr/bin/env python3
"""Which kernels two builds compiled differently: `cuobjdump -sass` of both binaries, per kernel
the instruction count and whether the instruction sequence (opcodes and operands, addresses
stripped) is identical. Used to show that a shared-header change leaves other kernels alone.

    python3 tools/sass_diff.py OLD_BINARY NEW_BINARY [--match REGEX] [--params-moved] [--json OUT]

--params-moved compares with the kernel parameters' constant-bank offsets masked (c[0x0][...]):
a parameter struct that grew in front of the fields a kernel reads moves only those offsets, so
"same" there means the same instruction schedule with the parameters elsewhere.

Needs cuobjdump: on PATH, or in .sass-tools/bin (scripts/sass-tools fetches it from PyPI; no GPU
needed). Exit: 0 done, 2 bad input or cuobjdump failed.
"""
import argparse
import hashlib
import json
import pathlib
import re
import shutil
import subprocess
import sys

_FUNC = re.compile(r"^\s*Function : (\S+)")
_INSN = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;")


def cuobjdump():
    """cuobjdump on PATH, else the one scripts/sass-tools unpacked."""
    local = pathlib.Path(__file__).resolve().parents[1] / ".sass-tools" / "bin" / "cuobjdump"
    return shutil.which("cuobjdump") or (str(local) if local.exists() else "cuobjdump")


_PARAM = re.compile(r"c\[0x0\]\[0x[0-9a-f]+\]")
_ANON = re.compile(r"_GLOBAL__N__[0-9a-f]+_")


def kernels(binary, match, params_moved=False):
    try:
        text = subprocess.run([cuobjdump(), "-sass", binary], check=True, capture_output=True, text=True).stdout
    except (OSError, subprocess.CalledProcessError) as e:
        sys.exit(f"sass_diff: cuobjdump -sass {binary} failed: {e}")
    return parse_sass(text, match, params_moved)


def functions(text):
    """`cuobjdump -sass` text -> [(kernel name, [(address, instruction)])] in listing order
    (instructions without their encodings; tools/sass_loops.py reads the addresses)."""
    out, name, body = [], None, []
    for line in text.splitlines():
        m = _FUNC.match(line)
        if m:
            if name is not None:
                out.append((name, body))
            name, body = m.group(1), []
            continue
        i = _INSN.search(line)
        if i and name is not None:
            body.append((int(i.group(1), 16), i.group(2)))
    if name is not None:
        out.append((name, body))
    return out


def parse_sass(text, match=".", params_moved=False):
    """`cuobjdump -sass` text -> {kernel name: [instruction text]} (addresses and encodings
    stripped; anonymous-namespace hashes removed from names; with params_moved the parameters'
    constant-bank offsets masked)."""
    out = {}
    for name, body in functions(text):
        # An anonymous namespace's mangled name carries a hash of the source path: two
        # checkouts of one file compile to different names for the same kernel.
        name = _ANON.sub("_GLOBAL__N__", name)
        if re.search(match, name):
            out[name] = [_PARAM.sub("c[0x0][param]", t) if params_moved else t for _, t in body]
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("old")
    ap.add_argument("new")
    ap.add_argument("--match", default=".", help="regex on the mangled kernel name")
    ap.add_argument("--params-moved", action="store_true", help="mask the parameters' constant-bank offsets")
    ap.add_argument("--json")
    a = ap.parse_args(argv)
    old, new = kernels(a.old, a.match, a.params_moved), kernels(a.new, a.match, a.params_moved)
    rows = []
    for name in sorted(set(old) | set(new)):
        o, n = old.get(name), new.get(name)
        h = lambda b: hashlib.sha1("\n".join(b).encode()).hexdigest()[:12] if b is not None else None
        rows.append({"kernel": name, "old": len(o) if o is not None else None, "new": len(n) if n is not None else None,
                     "same": o is not None and n is not None and h(o) == h(n)})
    for r in rows:
        state = "same" if r["same"] else ("new only" if r["old"] is None else "old only" if r["new"] is None else "DIFFERS")
        print(f"{state:9s} {r['old'] or '-':>6} {r['new'] or '-':>6}  {r['kernel'][:150]}")
    print(f"# {sum(r['same'] for r in rows)} of {len(rows)} kernels identical")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
