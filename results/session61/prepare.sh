#!/usr/bin/env bash
# Rebuilds, from a fresh checkout, the ignored folders that results/session61/first.sh carries
# (a new session's checkout has none of them). Times on this project's 2-core CPU machine:
#   1. build-s    XSTAGE_ATTN_STREAM_FILL=ON, XSTAGE_BUILD_MOE=OFF: xstage + GPU tests  ~14 min
#      -> .run-bin (scripts/run-bin --build build-s), .ab-longs/xstage-new.xz
#   2. /tmp/wt-base  52d10a6 (main before issue 38's attention work), attention only: xstage ~8 min
#      -> .ab-longs/xstage-base.xz                         (first.sh's H200 branch can run now)
#   3. build-off  defaults, XSTAGE_BUILD_MOE=OFF, no tests: xstage                         ~14 min
#      -> .ab-stream/xstage-base.xz (+ xstage-stream.xz, gpu-tests-stream.xz from build-s)
#   4. build      the release preset (what main ships, MoE included): everything          ~29 min
#      -> .ab-runbin-moe (scripts/run-bin, renamed: first.sh's non-H200 branch, the tails study)
# Steps run in that order with -j2; pass a step number to start there (earlier outputs kept).
# Needs scripts/setup done (.deps). Logs: /tmp/prepare-N.log. Usage: prepare.sh [STEP 1-4 | --help]
set -euo pipefail
cd "$(dirname "$0")/../.."
from=${1:-1} root=$PWD
case $from in
  1|2|3|4) ;;
  -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
  *) echo "prepare.sh: the step to start at is 1-4, not '$from' (see --help)" >&2; exit 2 ;;
esac
pack() { strip -o "$2.stripped" "$1" && xz -9 -T2 -c "$2.stripped" > "$2" && rm -f "$2.stripped"; }
head=$(git rev-parse --short HEAD)
if [ "$from" -le 1 ]; then
  cmake --preset release -B build-s -DXSTAGE_ATTN_STREAM_FILL=ON -DXSTAGE_BUILD_MOE=OFF > /tmp/prepare-1.log
  cmake --build build-s --target xstage xstage_gpu_tests -j2 >> /tmp/prepare-1.log
  scripts/run-bin --build build-s
  mkdir -p .ab-longs && pack build-s/xstage .ab-longs/xstage-new.xz
fi
if [ "$from" -le 2 ]; then
  [ -d /tmp/wt-base ] || git worktree add /tmp/wt-base 52d10a6 > /dev/null
  (cd /tmp/wt-base && cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DXSTAGE_BUILD_MOE=OFF \
     -DXSTAGE_BUILD_TESTS=OFF -DXSTAGE_DEPS_DIR="$root/.deps" > /tmp/prepare-2.log &&
     cmake --build build --target xstage -j2 >> /tmp/prepare-2.log)
  pack /tmp/wt-base/build/xstage .ab-longs/xstage-base.xz
  printf 'base: 52d10a6 (MOE OFF, tests OFF)\nnew: %s XSTAGE_ATTN_STREAM_FILL=ON (MOE OFF)\n' "$head" > .ab-longs/BUILT_FROM
fi
if [ "$from" -le 3 ]; then
  cmake --preset release -B build-off -DXSTAGE_BUILD_MOE=OFF -DXSTAGE_BUILD_TESTS=OFF > /tmp/prepare-3.log
  cmake --build build-off --target xstage -j2 >> /tmp/prepare-3.log
  mkdir -p .ab-stream && pack build-off/xstage .ab-stream/xstage-base.xz
  cp .ab-longs/xstage-new.xz .ab-stream/xstage-stream.xz   # step 1 packed build-s/xstage already
  pack build-s/tests/xstage_gpu_tests .ab-stream/gpu-tests-stream.xz
  printf 'base: %s defaults (MOE OFF, tests OFF)\nstream: %s XSTAGE_ATTN_STREAM_FILL=ON (MOE OFF)\n' "$head" "$head" \
    > .ab-stream/BUILT_FROM
fi
if [ "$from" -le 4 ]; then
  cmake --preset release > /tmp/prepare-4.log && cmake --build --preset release -j2 >> /tmp/prepare-4.log
  # scripts/run-bin writes .run-bin only: set step 1's .run-bin aside while it runs
  [ ! -d .run-bin ] || mv .run-bin .run-bin.keep
  scripts/run-bin && rm -rf .ab-runbin-moe && mv .run-bin .ab-runbin-moe
  [ ! -d .run-bin.keep ] || mv .run-bin.keep .run-bin
fi
du -sh .run-bin .ab-longs .ab-stream .ab-runbin-moe 2>/dev/null || true
