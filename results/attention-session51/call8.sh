#!/usr/bin/env bash
# session 51 call 8 (binaries of .run-bin/BUILT_FROM, the final rules): issue 38's grids
# (attention-partial-h100/call5.sh: short d 64 / d 128 with cuDNN, causal bf16 and fp16 with cuDNN,
# the long non-causal grid with cuDNN and flash SDPA). The kernels are those call 7 tested.
set -u
bash results/attention-partial-h100/call5.sh
