#!/usr/bin/env python3
"""Issue 37's bars, read from python/compare_moe.py's --json output (xstage.compare.moe.v1) of a
one-GPU run (scripts/moe-acceptance):

    python3 python/moe_acceptance.py COMPARE_JSON [--gpu-tests-log LOG] [--models-json bench/moe-models.json]

One line per bar, each `met` or `NOT met` with its count:
  1. the better fused order >= the unfused layer in every configuration, per weight format;
  2. >= 900 TFLOP/s of expert work (6 x tokens x top_k x hidden x intermediate at one rank) for
     DSv4-Flash at 8192 tokens with W8A8 weights, per routing (the better fused order), and there
     >= 85 % of the grouped GEMMs' own rate on the same rows (the unfused layer's Linear-1 +
     Linear-2 µs over the fused µs; bench --spans, which scripts/moe-acceptance passes for
     DSv4-Flash);
  3. per W4A8 format, fused >= 0.9 x the same configuration's W8A8 fused;
  4. the better fused order faster than the PyTorch path in every configuration;
  5. with --gpu-tests-log (scripts/moe-acceptance --part tests): the correctness tests passed,
     none failed or skipped (gtest's summary lines of that log);
and how many configurations each bar saw against the study's 7 models x 3 token counts x 2
routings per weight format (a missing configuration leaves its bar NOT met). A configuration
whose cells failed their checks never counts as meeting a bar (compare_moe.py's rule).
Exit status: 0 every bar met, 1 some bar not met, 2 bad input."""
import argparse
import json
import sys

from xsbench import moe_models

TOOL = "moe_acceptance"
SCHEMA = "xstage.compare.moe.v1"
STUDY_CONFIGS = 7 * 3 * 2  # per weight format
TFLOPS_BAR = 900.0
GEMM_SHARE_BAR = 0.85  # the fused call's rate over the grouped GEMMs' own on the same rows


def best_fused(r):
    f = [x for x in (r.get("expert_wave_us"), r.get("interleaved_us")) if isinstance(x, (int, float)) and x > 0]
    return min(f) if f else None


def gtest_counts(text):
    """(passed, failed, skipped) from gtest's summary lines ('[  PASSED  ] 12 tests.'); a log
    without a PASSED line (a crash or a hang) counts as one failure."""
    import re
    got = {}
    for kind in ("PASSED", "FAILED", "SKIPPED"):
        m = re.search(r"^\[\s+" + kind + r"\s+\]\s+(\d+) tests?", text, re.M)
        got[kind] = int(m.group(1)) if m else 0
    if not re.search(r"^\[\s+PASSED\s+\]", text, re.M):
        got["FAILED"] = max(got["FAILED"], 1)
    return got["PASSED"], got["FAILED"], got["SKIPPED"]


def report(doc, shapes, tests_log=None):
    """(lines, all_met). tests_log: the text of the GPU tests' log, or None (not in this run)."""
    rows, s = doc.get("rows", []), doc.get("summary", {})
    lines, met = [], True

    def bar(ok, text):
        nonlocal met
        met &= ok
        lines.append(f"{'met    ' if ok else 'NOT met'}  {text}")

    fu = s.get("fused_vs_unfused", {}).get("by_weights", {})
    if not fu:
        bar(False, "fused >= unfused: no configuration with both")
    for w, d in sorted(fu.items()):
        n, k = d.get("compared", 0), d.get("fused_at_least_unfused", 0)
        bar(k == n and n >= STUDY_CONFIGS, f"fused >= unfused, {w}: {k}/{n} (study: {STUDY_CONFIGS})")

    flash = shapes.get("DSv4-Flash")
    seen = False
    for r in rows:
        if r.get("model") != "DSv4-Flash" or r.get("weights") != "w8a8" or r.get("tokens_per_rank") != 8192:
            continue
        us = best_fused(r)
        if us is None or flash is None:
            continue
        seen = True
        flops = 6.0 * 8192 * flash["top_k"] * flash["hidden"] * flash["intermediate"]
        tf = flops / (us * 1e-6) / 1e12
        bar(tf >= TFLOPS_BAR and r.get("correctness_ok", False),
            f"DSv4-Flash 8192 w8a8 {r.get('routing')}: {tf:.0f} TFLOP/s of expert work (bar {TFLOPS_BAR:.0f}; {us:.1f} us)")
        g = r.get("unfused_gemm_us")
        if isinstance(g, (int, float)) and g > 0:
            share = g / us
            bar(share >= GEMM_SHARE_BAR and r.get("correctness_ok", False),
                f"DSv4-Flash 8192 w8a8 {r.get('routing')}: {share:.2f} of the grouped GEMMs' rate on the same rows "
                f"(bar {GEMM_SHARE_BAR:g}; grouped GEMMs {g:.1f} us)")
        else:
            bar(False, f"DSv4-Flash 8192 w8a8 {r.get('routing')}: the grouped GEMMs' rate is not in this run (bench --spans)")
    if not seen:
        bar(False, "DSv4-Flash 8192 w8a8: not in this run")

    fr = s.get("w4a8_vs_w8a8", {})
    if not fr:
        bar(False, "W4A8 fused / W8A8 fused: no configuration with both")
    for w, d in sorted(fr.items()):
        n, k = d.get("compared", 0), d.get("at_least_bar", 0)
        bar(k == n and n >= STUDY_CONFIGS,
            f"{w} fused >= {d.get('bar', 0.9):g} x W8A8 fused: {k}/{n} (geomean {d.get('geomean', 0):.2f}, "
            f"worst {d.get('worst', 0):.2f})")

    t = s.get("torch")
    if t is None:
        bar(False, "faster than the PyTorch path: no torch file in this comparison")
    else:
        n, k = t.get("compared_best", 0), t.get("best_faster", 0)
        want = STUDY_CONFIGS * max(1, len(fu))
        bar(k == n and n >= want, f"faster than the PyTorch path: {k}/{n} (configurations: {want})")

    if tests_log is None:
        bar(False, "correctness tests (P = 1, virtual P = 2, 4, 8): no GPU tests log in this run")
    else:
        p, f, sk = gtest_counts(tests_log)
        bar(p > 0 and f == 0 and sk == 0,
            f"correctness tests (P = 1, virtual P = 2, 4, 8): {p} passed, {f} failed, {sk} skipped")
    return lines, met


def main(argv=None):
    ap = argparse.ArgumentParser(prog="moe_acceptance.py", description=__doc__.split("\n")[0])
    ap.add_argument("compare_json")
    ap.add_argument("--models-json", default=moe_models.PATH)
    ap.add_argument("--gpu-tests-log", help="the log of the Mega-MoE / EP layer GPU tests (moe-acceptance --part tests)")
    args = ap.parse_args(argv)
    try:
        with open(args.compare_json, encoding="utf-8") as f:
            doc = json.load(f)
        shapes = {r["name"]: r for r in moe_models.shapes(args.models_json)}
        tests_log = None
        if args.gpu_tests_log:
            with open(args.gpu_tests_log, encoding="utf-8", errors="replace") as f:
                tests_log = f.read()
    except (OSError, ValueError) as e:
        print(f"{TOOL}: {e}", file=sys.stderr)
        return 2
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA:
        print(f"{TOOL}: {args.compare_json}: not a {SCHEMA} file", file=sys.stderr)
        return 2
    lines, met = report(doc, shapes, tests_log)
    print(f"# issue 37 acceptance (one GPU, world {doc.get('world')}, commit {doc.get('xstage_commit')})")
    for line in lines:
        print(line)
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
