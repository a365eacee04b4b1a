#!/usr/bin/env bash
# scripts/pack-variants without building (--dry-run): its refusals (exit 2) and the commands it
# would run: each variant configured with every variant's options reset first, its binaries
# stripped and packed (the GPU tests only for --tests), and the build folder reset at the end.
set -u
cd "$(dirname "$0")/../.." || exit 2
# shellcheck source=tests/scripts/expect.sh
source tests/scripts/expect.sh
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
P=scripts/pack-variants
expect 2 "DIR missing" -- $P
expect 2 "no variants" -- $P "$tmp/o"
expect 2 "one variant must be 'base'" -- $P "$tmp/o" rw:-DA=1
expect 2 "'base' is the defaults" -- $P "$tmp/o" base:-DA=1
expect 2 "named twice" -- $P "$tmp/o" base base
expect 2 "not a -DNAME=VALUE option" -- $P "$tmp/o" base x:-DA
expect 2 "--tests names 'y'" -- $P --tests y "$tmp/o" base x:-DA=1
expect 2 "unknown option" -- $P --frob "$tmp/o" base
out=$($P --dry-run --build bx --tests x "$tmp/o" base x:-DA=1,-DB=2 y:-DA=3 2>&1); rc=$?
expect 0 "+ cmake -S . -B bx -UA -UB -DA=1 -DB=2" -- echo "$out"
expect 0 "+ cmake -S . -B bx -UA -UB -DA=3" -- echo "$out"
expect 0 "gpu-tests-x'" -- echo "$out"
[ "$rc" = 0 ] || { echo "FAILED: dry run exit $rc"; fails=$((fails + 1)); }
# base is configured with the resets only, and so is the folder at the end (twice in all).
n=$(grep -c -- "^+ cmake -S . -B bx -UA -UB$" <<< "$out")
[ "$n" = 2 ] || { echo "FAILED: $n reset-only configures (want 2): $out"; fails=$((fails + 1)); }
grep -q "gpu-tests-y\|gpu-tests-base" <<< "$out" && { echo "FAILED: tests packed for a variant not named"; fails=$((fails + 1)); }
[ "$fails" = 0 ] && echo "all passed" || echo "$fails failed"
[ "$fails" = 0 ]
