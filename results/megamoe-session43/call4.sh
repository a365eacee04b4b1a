#!/usr/bin/env bash
# Session 43 call 4: the Linear-1 counts of large blocks on a counter warp (.run-bin) against the
# default build of 6032092 (.run-col). carry [".run-bin", ".run-col"].
source .run-bin/env.sh
export XSTAGE_SOURCE_DIR=$PWD
L=$OUT/log.txt
nvidia-smi -L > $L; echo "counter $(cat .run-bin/BUILT_FROM) base $(cat .run-col/BUILT_FROM)" >> $L
timeout 150 .run-bin/tests/xstage_gpu_tests --gtest_filter='MegaMoe.*PerToken*:P/MegaMoeW4A8TokRanks.*:MegaMoe.RecordsOneSpanPerLinear2PieceAndRunsTheLocalControl' > $OUT/gpu-tests-counter.txt 2>&1
echo "counter per-token gpu tests rc $?" | tee -a $L; grep -E '^\[  (FAILED|PASSED) |Failure' $OUT/gpu-tests-counter.txt | head -5 | tee -a $L
for b in run-bin run-col run-bin run-col; do
  timeout 100 ./.$b/xstage bench moe --gpus 1 --models DiT-MoE-G,DSv4-Flash --tokens 512,2048,8192 --routings balanced \
    --weights w4a8-int4-lut-rs-tok,w4a8-mxfp4-rs-tok --variants interleaved --iters 20 --spans --json /tmp/ab.json > /tmp/ab.txt 2>&1
  echo "$b ab rc $?" | tee -a $L; tail -1 /tmp/ab.txt | tee -a $L
  python3 -c "
import json
for r in json.load(open('/tmp/ab.json'))['results']:
  t=r['tiles'][0]; print('$b', r['model'], r['weights'], r['tokens_per_rank'], round(r['median_us'],1), r['check'], 'L2 wait %.2f ml %.2f'%(t['l2']['input_wait_us'], t['l2']['mainloop_us']), 'L1 ml %.2f epi %.2f tail %.2f'%(t['l1']['mainloop_us'], t['l1']['epilogue_us'], t['l1']['store_tail_us']))" | tee -a $L
done
