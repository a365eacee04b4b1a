#!/usr/bin/env bash
# session 56: issue 38's acceptance and long A/B on an H200 (results/megamoe-session55/call2.sh;
# carry .run-bin and .ab-long); on any other card it stops at once (nothing there is acceptance).
set -u
nvidia-smi --query-gpu=name --format=csv,noheader | tee $OUT/card.txt
grep -q H200 $OUT/card.txt || { echo "not an H200: nothing run"; exit 0; }
bash results/megamoe-session55/call2.sh
