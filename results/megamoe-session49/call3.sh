#!/usr/bin/env bash
# session 49 call 3: the claimed attention order in CUDA graphs (GPU tests of .run-bin), then where
# the per-token kernel's gaps come from. The measurement build
# (XSTAGE_MEGA_PRODUCER_TRACE=ON, .run-ptrace/xstage) stamps the producer's claim, hand-over and
# last load per tile; bench moe --spans summarises them per tile kind (rank 0).
set -u
source .run-bin/env.sh
P=.run-ptrace/xstage
t0=$(date +%s)
# The claimed order under CUDA graph capture (the attention fix of this session), and the causal
# reference cases again with the shipped binaries.
timeout 200 .run-bin/tests/xstage_gpu_tests \
  --gtest_filter='AttentionGpu.ClaimedOrderReplaysFromCudaGraphs:AttentionGpu.CausalOrdersAgreeBitwise:Shapes/AttentionGpu.MatchesReference/auto_*:Shapes/AttentionGpu.MatchesReference/cl_*' \
  > $OUT/gpu-tests-attention.log 2>&1
echo "rc=$? $(( $(date +%s) - t0 )) s" >> $OUT/gpu-tests-attention.log
$P bench moe --gpus 1 --models Qwen3.5-397B-A17B,DSv4-Flash --tokens 512,2048 --routings balanced \
  --weights w8a8,w4a8-int4-lut-rs-tok,w4a8-mxfp4-rs-tok --variants interleaved,expert-wave --spans \
  --json $OUT/ptrace.json > $OUT/ptrace.txt 2>&1
echo "rc=$? $(( $(date +%s) - t0 )) s" >> $OUT/ptrace.txt
st
