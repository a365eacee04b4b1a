#!/usr/bin/env bash
# Rebuilds .ab-fold for results/session68/fold-ab.sh on the development machine, all from the
# working tree, stripped: xstage-fold.xz and gpu-tests-fold.xz with the tails fold
# (XSTAGE_MEGA_TOK_STAGES=3, XSTAGE_MEGA_TOK_FOLD=32), xstage-base.xz with the defaults (4 stages,
# no fold). A fresh checkout first builds everything (~40 min on 2 cores); with a current build/
# only the per-token translation units recompile between the two (~4 min). Leaves build/
# configured with the defaults.
set -eu
cd "$(git rev-parse --show-toplevel)"
[ -f build/CMakeCache.txt ] || cmake --preset release > /dev/null
mkdir -p .ab-fold
pack() { strip -o /tmp/prep-fold "$1" && xz -T2 -6 -c /tmp/prep-fold > "$2" && rm -f /tmp/prep-fold; }
cmake -S . -B build -DXSTAGE_MEGA_TOK_STAGES=3 -DXSTAGE_MEGA_TOK_FOLD=32 > /dev/null
cmake --build build -j2 --target xstage xstage_gpu_tests
pack build/xstage .ab-fold/xstage-fold.xz
pack build/tests/xstage_gpu_tests .ab-fold/gpu-tests-fold.xz
cmake -S . -B build -DXSTAGE_MEGA_TOK_STAGES=4 -DXSTAGE_MEGA_TOK_FOLD=0 > /dev/null
cmake --build build -j2 --target xstage
pack build/xstage .ab-fold/xstage-base.xz
echo "$(git rev-parse --short HEAD) (base: defaults; fold: XSTAGE_MEGA_TOK_STAGES=3 XSTAGE_MEGA_TOK_FOLD=32)" > .ab-fold/BUILT_FROM
ls -la .ab-fold
