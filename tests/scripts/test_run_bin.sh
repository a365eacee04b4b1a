#!/usr/bin/env bash
# scripts/run-bin's refusals (exit 2, one line): an unknown argument, a build folder that is not
# configured. (Gathering itself runs the build; the GPU runs of each session exercise it.)
set -u
cd "$(dirname "$0")/../.." || exit 2
# shellcheck source=tests/scripts/expect.sh
source tests/scripts/expect.sh
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
expect 2 "unknown argument" -- scripts/run-bin --bogus
expect 2 "is not configured" -- scripts/run-bin --build "$tmp/none"
expect 0 "Gathers what the GPU machine" -- scripts/run-bin --help
expect 0 "--xz" -- scripts/run-bin --help
# unpack_run_xz: a missing archive is one line and status 2; a carried one comes back as
# .run-bin/xstage (executable) with its BUILT_FROM; a corrupt one is refused.
repo=$PWD
expect 2 ".run-xz/xstage.xz missing" -- bash -c "cd '$tmp' && source '$repo/scripts/lib/gpu-env.sh' && unpack_run_xz"
mkdir -p "$tmp/.run-xz" && printf '#!/bin/sh\necho unpacked-ok\n' | xz -c > "$tmp/.run-xz/xstage.xz" && echo abc1234 > "$tmp/.run-xz/BUILT_FROM"
expect 0 "unpacked-ok abc1234" -- bash -c "cd '$tmp' && source '$repo/scripts/lib/gpu-env.sh' && unpack_run_xz && .run-bin/xstage | tr '\n' ' ' && cat .run-bin/BUILT_FROM"
echo garbage > "$tmp/.run-xz/xstage.xz"
expect 2 "does not decompress" -- bash -c "cd '$tmp' && source '$repo/scripts/lib/gpu-env.sh' && unpack_run_xz"
[ "$fails" = 0 ] && echo "all passed" || echo "$fails failed"
[ "$fails" = 0 ]
