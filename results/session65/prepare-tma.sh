#!/usr/bin/env bash
# Builds what results/session65/call.sh carries in .ab-tma: the attention-only build with the TMA-store
# epilogue (build-tma: -DXSTAGE_ATTN_TMA_STORE=ON, MoE off, tests on; ~15 min on 2 cores), its xstage and
# xstage_gpu_tests stripped and xz-packed. .run-bin (main's build) comes from results/session62/prepare.sh.
set -euo pipefail
cd "$(dirname "$0")/../.."
[ -d .deps ] || { echo "prepare-tma.sh: no .deps (run scripts/setup first)" >&2; exit 2; }
cmake -S . -B build-tma -G Ninja -DCMAKE_BUILD_TYPE=Release -DXSTAGE_BUILD_MOE=OFF -DXSTAGE_BUILD_TESTS=ON \
  -DXSTAGE_BUILD_PYTHON=OFF -DXSTAGE_ATTN_TMA_STORE=ON -DXSTAGE_DEPS_DIR="$PWD/.deps" > /tmp/prepare-tma.log
cmake --build build-tma --target xstage xstage_gpu_tests -j2 >> /tmp/prepare-tma.log
pack() { strip -o "$2.stripped" "$1" && xz -9 -T2 -c "$2.stripped" > "$2" && rm -f "$2.stripped"; }
mkdir -p .ab-tma
pack build-tma/xstage .ab-tma/xstage.xz
pack build-tma/tests/xstage_gpu_tests .ab-tma/gpu-tests.xz
printf 'tma: %s%s (attention only, XSTAGE_ATTN_TMA_STORE=ON)\n' "$(git rev-parse --short HEAD)" \
  "$(git diff --quiet HEAD -- src CMakeLists.txt || echo ' + uncommitted changes')" > .ab-tma/BUILT_FROM
du -sh .ab-tma
