#!/usr/bin/env bash
# scripts/gpu-run refuses, with one FAIL line and a non-zero exit, a machine with fewer GPUs than
# expected, and classifies the skips of a `ctest -V` log (issue 33). Runs without a GPU:
# XSTAGE_VISIBLE_GPUS stands in for nvidia-smi, --dry-run and --check-log run nothing.
set -u
cd "$(dirname "$0")/../.." || exit 2
# shellcheck source=tests/scripts/expect.sh
source tests/scripts/expect.sh
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
expect 1 "FAIL: 2 GPU(s) expected, 1 visible" -- env XSTAGE_VISIBLE_GPUS=1 scripts/gpu-run --expect-gpus 2 --dry-run "$tmp/o"
expect 1 "FAIL: no GPU visible" -- env XSTAGE_VISIBLE_GPUS=0 scripts/gpu-run --dry-run "$tmp/o"
expect 2 "must be a whole number" -- env XSTAGE_VISIBLE_GPUS=1 scripts/gpu-run --expect-gpus two --dry-run "$tmp/o"
expect 1 "component ulysses needs 2 GPUs" -- env XSTAGE_VISIBLE_GPUS=1 scripts/gpu-run --dry-run "$tmp/o" ulysses
expect 2 "unknown component" -- env XSTAGE_VISIBLE_GPUS=1 scripts/gpu-run --dry-run "$tmp/o" nonsense
expect 0 "plan (1 GPU(s) expected, 1 visible" -- env XSTAGE_VISIBLE_GPUS=1 scripts/gpu-run --dry-run "$tmp/o" attention python
# Skips in a ctest -V log: one needing more GPUs than expected is fine, one for peer access or
# for a count the machine has is not.
cat > "$tmp/ok.log" <<'LOG'
12: [  SKIPPED ] needs 2 GPU(s), found 1 (CI has none: skipped)
12/40 Test #12: gpu.two_gpu_case ...***Skipped   0.00 sec
LOG
cat > "$tmp/bad.log" <<'LOG'
13: GPUs 0 and 1 have no peer access
13/40 Test #13: gpu.peer_case ...***Skipped   0.00 sec
LOG
expect 0 "skips ok for 1 GPU(s)" -- scripts/gpu-run --check-log "$tmp/ok.log" --expect-gpus 1
expect 1 "FAIL: gpu.two_gpu_case skipped with 2 GPU(s) expected" -- scripts/gpu-run --check-log "$tmp/ok.log" --expect-gpus 2
expect 1 "FAIL: gpu.peer_case skipped: GPUs 0 and 1 have no peer access" -- scripts/gpu-run --check-log "$tmp/bad.log" --expect-gpus 1
[ "$fails" = 0 ] && echo "all gpu-run checks passed" && exit 0
echo "$fails gpu-run check(s) failed"; exit 1
