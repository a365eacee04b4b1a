#!/usr/bin/env bash
# Session 59's smallest stream-fill check (carry .ab-stream; timeout 170), for the last device
# seconds: session58/stream-mini.sh at d 64 only with the StreamFill / TailSplit GPU tests.
set -u
TMO=150 DIMS=64 TESTS='AttentionGpu.StreamFill*:AttentionGpu.TailSplit*' bash results/session58/stream-mini.sh
