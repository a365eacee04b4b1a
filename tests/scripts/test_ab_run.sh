#!/usr/bin/env bash
# scripts/ab-run without a GPU (XSTAGE_VISIBLE_GPUS=1, stand-in binaries that write a bench JSON):
# its refusals (exit 2), several --variants with --alternate (every build runs, every second
# repetition in the reverse order), the GPU tests of each variant that has them, and the attention
# table (python/compare_attention_ab.py), which fails the run on a cell whose check failed.
set -u
cd "$(dirname "$0")/../.." || exit 2
# shellcheck source=tests/scripts/expect.sh
source tests/scripts/expect.sh
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fake() {  # NAME TFLOPS [PASSED]: bin/xstage-NAME writes one attention cell and logs its call
  cat > "$tmp/bin/xstage-$1" <<F
#!/bin/sh
echo "$1" >> "$tmp/calls"
while [ \$# -gt 0 ]; do [ "\$1" = --json ] && out=\$2; shift; done
cat > "\$out" <<J
{"schema": "xstage.bench.attention.v1", "results": [{"backend": "xstage", "head_dim": 64, "heads": 16,
 "seqlen": 2048, "q_len": 2048, "dtype": "bf16", "causal": false, "median_us": 10.0, "tflops": $2, "nonfinite": 0,
 "correctness": {"checked": true, "passed": ${3:-true}, "rows_checked": 64, "rel_err": 0.003, "max_abs_err": 0.0002,
 "rel_tol": 0.01, "nonfinite": 0}}]}
J
F
  chmod +x "$tmp/bin/xstage-$1"
}
mkdir -p "$tmp/bin"
fake base 400.0; fake w4 440.0; fake w2 380.0
printf '#!/bin/sh\necho "[  PASSED  ] 1 test."\n' > "$tmp/bin/gpu-tests-w4" && chmod +x "$tmp/bin/gpu-tests-w4"
export XSTAGE_VISIBLE_GPUS=1
expect 2 "--variants needs --bin" -- scripts/ab-run --base HEAD --variants base,w4 "$tmp/o" 'attention'
expect 2 "one build 'base'" -- scripts/ab-run --bin "$tmp/bin" --variants w4,w2 "$tmp/o" 'attention'
expect 2 "twice" -- scripts/ab-run --bin "$tmp/bin" --variants base,w4,w4 "$tmp/o" 'attention'
expect 2 "two or more names" -- scripts/ab-run --bin "$tmp/bin" --variants base "$tmp/o" 'attention'
expect 2 "xstage-w8 (or .xz) missing" -- scripts/ab-run --bin "$tmp/bin" --variants base,w8 "$tmp/o" 'attention'
expect 0 "# w4/base: geomean 1.100" -- scripts/ab-run --bin "$tmp/bin" --variants base,w4,w2 --alternate --reps 2 \
  --tests 'Attention*' "$tmp/o" 'attention -d 64 -S 2048 -H 16'
expect 0 "# w2/base: geomean 0.950" -- cat "$tmp/o/ab/b0-compare.txt"
expect 0 "PASSED" -- cat "$tmp/o/ab/gpu-tests-w4.log"
# Repetition 1 base w4 w2, repetition 2 the reverse.
expect 0 "base w4 w2 w2 w4 base" -- sh -c "tr '\n' ' ' < '$tmp/calls'"
# A variant carried as xstage-<name>.xz (and its tests as gpu-tests-<name>.xz) is unpacked there.
if command -v xz >/dev/null; then
  fake xz1 480.0
  xz -c "$tmp/bin/xstage-xz1" > "$tmp/bin/xstage-xz1.xz" && rm "$tmp/bin/xstage-xz1"
  xz -c "$tmp/bin/gpu-tests-w4" > "$tmp/bin/gpu-tests-xz1.xz"
  expect 0 "# xz1/base: geomean 1.200" -- scripts/ab-run --bin "$tmp/bin" --variants base,xz1 --reps 1 --tests 'A*' "$tmp/o5" 'attention -d 64'
  expect 0 "PASSED" -- cat "$tmp/o5/ab/gpu-tests-xz1.log"
else
  echo "skipped: the .xz builds (no xz on this machine)"
fi
# Without --variants: the two builds base and new, as before. The header names the builds' commit
# (DIR/BUILT_FROM, as pack-variants writes it) apart from the running tree's.
fake new 420.0
printf 'abc1234\n' > "$tmp/bin/BUILT_FROM"
expect 0 "# new/base: geomean 1.050" -- env XSTAGE_COMMIT=fff0000 scripts/ab-run --bin "$tmp/bin" --reps 1 --tests none "$tmp/o3" 'attention -d 64'
expect 0 "tree_commit=fff0000 built_from=abc1234" -- cat "$tmp/o3/ab-console.log"
expect 2 "gpu-tests-<variant> for any variant but base" -- scripts/ab-run --bin "$tmp/bin" --reps 1 "$tmp/o4" 'attention -d 64'
fake w2 999.0 false
expect 1 "CORRECTNESS FAIL" -- scripts/ab-run --bin "$tmp/bin" --variants base,w2 --reps 1 --tests none "$tmp/o2" 'attention -d 64'
[ "$fails" = 0 ] && echo "all passed" || echo "$fails failed"
[ "$fails" = 0 ]
