#!/usr/bin/env bash
# Column chunks (XSTAGE_MEGA_TOK_COLUMN_CHUNKS=ON, .run-col) against the default build (.run-bin):
# per-token GPU tests of the column build, then the per-token cells twice in turn with spans.
# carry [".run-bin", ".run-col"]; ~4 min.
source .run-bin/env.sh
export XSTAGE_SOURCE_DIR=$PWD
L=$OUT/log.txt
nvidia-smi -L > $L; echo "col $(cat .run-col/BUILT_FROM) base $(cat .run-bin/BUILT_FROM)" >> $L
timeout 150 .run-col/tests/xstage_gpu_tests --gtest_filter='MegaMoe.*PerToken*:P/MegaMoeW4A8TokRanks.*' > $OUT/gpu-tests-col.txt 2>&1
echo "col per-token gpu tests rc $?" | tee -a $L; grep -E '^\[  (FAILED|PASSED) ' $OUT/gpu-tests-col.txt | tee -a $L
for b in run-col run-bin run-col run-bin; do
  timeout 100 ./.$b/xstage bench moe --gpus 1 --models DiT-MoE-G,DSv4-Flash --tokens 512,2048,8192 --routings balanced \
    --weights w4a8-int4-lut-rs-tok,w4a8-mxfp4-rs-tok --variants interleaved --iters 20 --spans --json /tmp/ab.json > /tmp/ab.txt 2>&1
  echo "$b ab rc $?" | tee -a $L; tail -1 /tmp/ab.txt | tee -a $L
  python3 -c "
import json
for r in json.load(open('/tmp/ab.json'))['results']:
  t=r['tiles'][0]; print('$b', r['model'], r['weights'], r['tokens_per_rank'], round(r['median_us'],1), r['check'], 'L2 wait %.2f ml %.2f'%(t['l2']['input_wait_us'], t['l2']['mainloop_us']), 'L1 tail %.2f'%t['l1']['store_tail_us'])" | tee -a $L
done
# The H200 unfused per-token DSv4-Flash 8192 MXFP4 check failure (session 42) with the bench that offers requant codes.
timeout 120 ./.run-bin/xstage bench moe --gpus 1 --models DSv4-Flash --tokens 8192 --routings balanced \
  --weights w4a8-mxfp4-rs-tok,w4a8-int4-lut-rs-tok --variants unfused,interleaved --iters 20 --check-tokens 64 \
  --dump-rows $OUT/rows-dsv4-8192.json --json $OUT/check-dsv4-8192.json > $OUT/check-dsv4-8192.txt 2>&1
echo "dsv4 8192 check rc $?" | tee -a $L; tail -8 $OUT/check-dsv4-8192.txt | tee -a $L
