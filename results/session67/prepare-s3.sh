#!/usr/bin/env bash
# Rebuilds .ab-s3 for results/session67/stages-ab.sh on the development machine (a fresh checkout
# first builds everything: ~40 min on 2 cores; with a current build/ only the two per-token
# translation units recompile, ~3 min): xstage-new.xz and gpu-tests-new.xz with
# XSTAGE_MEGA_TOK_STAGES=3, xstage-base.xz with 4, all from the working tree, stripped. Leaves
# build/ configured with the default (4).
set -eu
cd "$(git rev-parse --show-toplevel)"
[ -f build/CMakeCache.txt ] || cmake --preset release > /dev/null
mkdir -p .ab-s3
pack() { strip -o /tmp/prep-s3 "$1" && xz -T2 -6 -c /tmp/prep-s3 > "$2" && rm -f /tmp/prep-s3; }
cmake -S . -B build -DXSTAGE_MEGA_TOK_STAGES=3 > /dev/null
cmake --build build -j2 --target xstage xstage_gpu_tests
pack build/xstage .ab-s3/xstage-new.xz
pack build/tests/xstage_gpu_tests .ab-s3/gpu-tests-new.xz
cmake -S . -B build -DXSTAGE_MEGA_TOK_STAGES=4 > /dev/null
cmake --build build -j2 --target xstage
pack build/xstage .ab-s3/xstage-base.xz
echo "$(git rev-parse --short HEAD)+XSTAGE_MEGA_TOK_STAGES (base 4, new 3)" > .ab-s3/BUILT_FROM
ls -la .ab-s3
