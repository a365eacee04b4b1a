#!/usr/bin/env bash
# session 55 call 2 (env REPS: the A/B repetitions, default 2; .run-bin of f0e50b5; .ab-long: xstage of 52d10a6, main before issue 38's
# attention work, and of f0e50b5). On an H200: issue 38's acceptance (results/attention-session52/
# call1.sh: attention GPU tests, short / causal / long grids with cuDNN and flash in the same call),
# then the long non-causal grid as a same-call A/B against 52d10a6 (the issue's "long non-causal
# stays where it is"). Otherwise: the Mega-MoE fallback of call1.sh.
# .ab-long (ignored; rebuild it here): git worktree add /tmp/wt-base 52d10a6; in it
#   cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DXSTAGE_BUILD_MOE=OFF -DXSTAGE_BUILD_TESTS=OFF \
#     -DXSTAGE_DEPS_DIR=<main checkout>/.deps && cmake --build build --target xstage   (~8 min on 2 cores)
# then strip + xz -9 into .ab-long/xstage-base.xz, and build/xstage of main into .ab-long/xstage-new.xz.
set -u
nvidia-smi --query-gpu=name --format=csv,noheader | tee $OUT/card.txt
if ! grep -q H200 $OUT/card.txt; then
  bash results/megamoe-session55/call1.sh
  exit
fi
t0=$SECONDS
bash results/attention-session52/call1.sh
echo "acceptance part: $((SECONDS - t0)) s"
limit=${LIMIT:-560}  # seconds this part may run in all (the call's timeout less a margin)
if [ $((SECONDS - t0)) -lt $((limit - ${MIN_AB:-160})) ]; then  # env MIN_AB: seconds the A/B needs at least
  timeout $((limit - (SECONDS - t0))) scripts/ab-run --bin .ab-long --variants base,new --alternate --reps ${REPS:-2} --tests none \
    $OUT/long-ab 'attention -S 1024,4096,4608,8192,16384,32768,65536 -H 12,24 -d 64,128' > $OUT/long-ab.log 2>&1
  echo "long A/B rc=$? at $((SECONDS - t0)) s"; grep -E '^#|geomean' $OUT/long-ab.log | tail -n 8
else
  echo "long A/B left out (time)"
fi
