#!/usr/bin/env bash
# Session 59, CPU only (no GPU; routing counts, not timings): the per-token W4A8 tile's blocks and
# tails of <= 32 rows after a full block for the 42 per-token configurations (7 models x 512 / 2048
# / 8192 tokens x balanced / skewed; one rank, the default seed, 132 CTAs), from
# `xstage moe-routing --plan` (docs/megamoe.md Next steps 4). Usage: tails-count.sh [XSTAGE]
set -eu
x=${1:-build/xstage}
for m in DiT-MoE-G Qwen3.5-397B-A17B Hy3 MiMo-V2.5 GLM-5.2 DSv4-Flash DSv4-Pro; do
  for t in 512 2048 8192; do
    for r in balanced skewed; do
      line=$("$x" moe-routing -m $m -P 1 -t $t --routing $r --plan | grep 'per-token W4A8 tile')
      printf '%-18s %5s %-8s %s\n' $m $t $r "${line#*tile }"
    done
  done
done
