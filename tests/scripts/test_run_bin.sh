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
[ "$fails" = 0 ] && echo "all passed" || echo "$fails failed"
[ "$fails" = 0 ]
