#!/usr/bin/env bash
# session 53 call 1 (issue 37): the per-token Mega-MoE kernel's producer at 40 registers (r40) and
# its Linear-2 store warps for one-piece tiles (sw = r40 + XSTAGE_MEGA_TOK_STORE_WARPS) against
# base (32 registers, consumers' copy-out); .ab-tok packed by scripts/pack-variants; the variants'
# per-token GPU tests first, then alternating runs, every cell checked.
set -u
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv | tee $OUT/gpu.txt
scripts/ab-run --bin .ab-tok --variants base,r40,sw --alternate --reps 2 --tar \
  --tests 'MegaMoe.OneGpuW4A8PerToken*:P/MegaMoeW4A8TokRanks.*:MegaMoe.RecordsOneSpanPerLinear2PieceAndRunsTheLocalControl' \
  --test-timeout 200 $OUT \
  'moe --gpus 1 --models Qwen3.5-397B-A17B,DSv4-Flash --tokens 512,2048 --routings balanced --weights w4a8-int4-lut-rs-tok,w4a8-mxfp4-rs-tok --variants interleaved' \
  'moe --gpus 1 --models DiT-MoE-G,Hy3 --tokens 512,2048 --routings balanced --weights w4a8-int4-lut-rs-tok --variants interleaved'
echo "ab-run rc=$?"
grep -h 'PASSED\|FAILED' $OUT/ab/gpu-tests-*.txt 2>/dev/null | head
ls $OUT/ab | head -40; for f in $OUT/ab/*compare*.txt; do echo "== $f"; grep -v "^ *$" $f | tail -20; done 2>/dev/null
