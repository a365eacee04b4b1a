#!/usr/bin/env bash
# scripts/dit-wheels' refusals (no network needed): exit 2 and one line for bad usage.
set -u
cd "$(dirname "$0")/../.." || exit 2
# shellcheck source=tests/scripts/expect.sh
source tests/scripts/expect.sh
expect 2 "unknown argument" -- scripts/dit-wheels --bogus
expect 2 "must be a version" -- scripts/dit-wheels --diffusers x
expect 2 "needs a version" -- scripts/dit-wheels --diffusers
expect 2 "needs a folder" -- scripts/dit-wheels --dest
expect 0 "dit_gpu_check.sh" -- scripts/dit-wheels --help
[ "$fails" = 0 ] && echo "all passed" || echo "$fails failed"
[ "$fails" = 0 ]
