#!/usr/bin/env bash
# session 56: one call, whichever card comes. H200: issue 38's acceptance and long A/B
# (results/megamoe-session55/call2.sh; carry .ab-long too); otherwise the quantisation-help
# measurement (call1.sh).
set -u
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200 && [ -d .ab-long ]; then
  bash results/megamoe-session55/call2.sh
else
  bash results/megamoe-session56/call1.sh
fi
