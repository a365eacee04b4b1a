#!/usr/bin/env bash
# Rebuilds, from a fresh checkout, the ignored folders that results/session62/h200.sh carries (a
# new session's checkout has none of them). Times on this project's 2-core CPU machine:
#   1. build         the release preset (what main ships, MoE included): everything        ~30 min
#      -> .run-bin (scripts/run-bin: xstage + GPU tests), .ab-long/xstage-new.xz (xstage, stripped)
#   2. /tmp/wt-base  52d10a6 (main before issue 38's attention work), attention only: xstage ~8 min
#      -> .ab-long/xstage-base.xz, .ab-long/BUILT_FROM
# Steps run in that order with -j2; pass a step number to start there (earlier outputs kept).
# Needs scripts/setup done (.deps). Logs: /tmp/prepare-N.log. Usage: prepare.sh [STEP 1-2 | --help]
set -euo pipefail
cd "$(dirname "$0")/../.."
from=${1:-1} root=$PWD
case $from in
  1|2) ;;
  -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
  *) echo "prepare.sh: the step to start at is 1-2, not '$from' (see --help)" >&2; exit 2 ;;
esac
pack() { strip -o "$2.stripped" "$1" && xz -9 -T2 -c "$2.stripped" > "$2" && rm -f "$2.stripped"; }
if [ "$from" -le 1 ]; then
  cmake --preset release > /tmp/prepare-1.log && cmake --build --preset release -j2 >> /tmp/prepare-1.log
  scripts/run-bin
  mkdir -p .ab-long && pack build/xstage .ab-long/xstage-new.xz
fi
if [ "$from" -le 2 ]; then
  [ -f .run-bin/BUILT_FROM ] || { echo "prepare.sh: no .run-bin (step 1 makes it; run without a step)" >&2; exit 2; }
  [ -d /tmp/wt-base ] || git worktree add /tmp/wt-base 52d10a6 > /dev/null
  (cd /tmp/wt-base && cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DXSTAGE_BUILD_MOE=OFF \
     -DXSTAGE_BUILD_TESTS=OFF -DXSTAGE_DEPS_DIR="$root/.deps" > /tmp/prepare-2.log &&
     cmake --build build --target xstage -j2 >> /tmp/prepare-2.log)
  mkdir -p .ab-long && pack /tmp/wt-base/build/xstage .ab-long/xstage-base.xz
  printf 'base: 52d10a6 (MOE OFF, tests OFF)\nnew: %s release preset\n' "$(cat .run-bin/BUILT_FROM)" > .ab-long/BUILT_FROM
fi
du -sh .run-bin .ab-long 2>/dev/null || true
