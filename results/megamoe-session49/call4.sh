#!/usr/bin/env bash
# session 49 call 4: the register-operand Mega-MoE kernels' producer at 32 registers instead of 24
# (XSTAGE_RS_PRODUCER_REGS32; the 24-register producer spills its claim / decode to local memory),
# A/B against the shipped build in one call, alternating, with the variant's GPU tests first (the
# per-token W4A8 fused suite, P = 1 and virtual P = 2, 4, 8 (the row-layout kernels compile as before); and the claimed
# attention order's CUDA-graph test, unaffected by the switch).
set -u
export XSTAGE_SOURCE_DIR=$PWD
scripts/ab-run --bin .ab-regs --variants base,regs --alternate --reps 2 --tar \
  --tests 'MegaMoe.OneGpuW4A8PerToken*:P/MegaMoeW4A8TokRanks.*:AttentionGpu.ClaimedOrderReplaysFromCudaGraphs' \
  --test-timeout 200 $OUT \
  'moe --gpus 1 --models Qwen3.5-397B-A17B,DSv4-Flash --tokens 512,2048 --routings balanced --weights w4a8-int4-lut-rs-tok,w4a8-mxfp4-rs-tok --variants interleaved' \
  > $OUT/ab-run.log 2>&1
echo "ab-run rc=$?" >> $OUT/ab-run.log
