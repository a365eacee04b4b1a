#!/usr/bin/env bash
# Session 59 call A (any card; carry .ab-stream and .run-bin; timeout 560): the stream fill's short
# A/B (session58/stream-mini.sh: its GPU tests, S 1024 / 1100 x 10-14 heads x d 64 / 128, both builds
# alternating) and then issue 37's tails study (megamoe-session57/call6.sh) for the seconds left.
# Everything is packed into one tarball at the end (the device tool returns at most 8 files).
set -u
mkdir -p $OUT/stream $OUT/tails
OUT=$OUT/stream bash results/session58/stream-mini.sh 2>&1 | tee $OUT/stream-console.txt
OUT=$OUT/tails BUDGET=${TAILS_BUDGET:-240} timeout $(( ${TAILS_BUDGET:-240} + 30 )) \
  bash results/megamoe-session57/call6.sh > $OUT/tails-console.txt 2>&1
echo "call6 rc=$?"; tail -n 12 $OUT/tails-console.txt
tar czf $OUT/all.tgz -C $OUT stream tails && rm -rf $OUT/stream $OUT/tails
