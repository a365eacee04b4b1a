#!/usr/bin/env bash
# Session 68's ready device work for issue 37, in order of need (carry .run-bin and .ab-fold;
# .ab-fold from results/session68/prepare-fold.sh). ~9 min for the first, ~3 min for the second:
# with less device time run them in separate calls, or fold-ab.sh with SHORT=1 (~4 min).
#   1. fold-ab.sh: the tails fold's per-token GPU tests (P = 1, virtual P = 2, 4, 8) and its
#      same-call A/B against the default build (DiT-MoE-G 2048 / 8192, MiMo-V2.5, GLM-5.2 8192,
#      W8A8 in the same lines; Qwen3.5 8192 as the no-tails control).
#   2. ncu-l2.sh: the fused W8A8 call's L2 throughput split into its parts.
set -u
LIMIT=${LIMIT:-520} bash results/session68/fold-ab.sh
[ "${WITH_NCU:-0}" = 1 ] && bash results/session68/ncu-l2.sh
exit 0
