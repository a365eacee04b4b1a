#!/usr/bin/env bash
# session 51 call 11 (binaries d2d703e, the final kernels and rules): issue 38's grids on whatever
# card comes (attention-partial-h100/call5.sh), the acceptance run if it is an H200.
set -u
bash results/attention-partial-h100/call5.sh
