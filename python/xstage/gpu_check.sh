#!/usr/bin/env bash
# GPU check of the xstage Python package (docs/python.md), run from the repository root on the
# GPU machine (.deps/ present; nvcc 13, CMake, Ninja, Python with torch, nanobind,
# scikit-build-core, pytest; no network).
#
#   python/xstage/gpu_check.sh OUT [build] [test] [bench] [quick-bench] [moe-bench[=RECIPES]]
#                                                   (default: build test bench moe-bench)
#
#   build        the wheel (pip wheel --no-build-isolation: what `pip install .` builds) in
#                build-py/<tag>/, plus the xstage CLI in the same build folder (for the bench);
#                incremental: run it again if a time limit cut it short
#   test         pytest tests/python (CPU and GPU tests) -> OUT/pytest.log, OUT/pytest.xml
#   bench        python -m xstage.bench attention --cli <build>/xstage --warmup-ms 200 --rounds 2
#                -> OUT/attention-torch-op.json (per shape 2 rounds: the C++ bench, then the Python
#                rows, reversed in the second; compared with the mean of the 2 C++ runs)
#   quick-bench  the same on S 4096,16384 only
#   moe-bench    python -m xstage.bench moe-gemm --cli <build>/xstage --rounds 2 (W8A8 and the per-token
#                W4A8 recipes, 7 models x 1024/8192 tokens x 3 GEMMs; 2 rounds per cell as in bench)
#                -> OUT/moe-gemm-torch-op-<recipes>.json;
#                moe-bench=RECIPES: only those (e.g. moe-bench=w8a8, then moe-bench=int4_tok,mxfp4_tok:
#                all three take more than one 10-minute call; 2 rounds take about twice one round)
# Nothing is installed: the tests and the bench import python/xstage with the extension from
# the build folder (xstage/_ext.py finds it there).
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${1:?usage: python/xstage/gpu_check.sh OUT [build] [test] [bench] [quick-bench] [moe-bench]}
shift
mkdir -p "$OUT"
steps=("$@")
[ ${#steps[@]} -eq 0 ] && steps=(build test bench moe-bench)
PY=${PYTHON:-python3}
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)}
export PYTHONPATH="$PWD/python${PYTHONPATH:+:$PYTHONPATH}"
export XSTAGE_COMMIT=${XSTAGE_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}
tag=$($PY -c "import sys, sysconfig; v=f'cp{sys.version_info[0]}{sys.version_info[1]}'; print(f\"{v}-{v}-{sysconfig.get_platform().replace('-', '_').replace('.', '_')}\")")
BUILD=build-py/$tag
export XSTAGE_EXT_DIR="$PWD/$BUILD/python/xstage"   # this build's extension, nothing else
rc=0

step_build() {
  echo "[gpu_check] build in $BUILD ($CMAKE_BUILD_PARALLEL_LEVEL jobs), log $OUT/build.log"
  if ! $PY -m pip wheel --no-build-isolation --no-deps -v . -w "$OUT/wheel" >"$OUT/build.log" 2>&1; then
    echo "[gpu_check] pip wheel failed (tail of $OUT/build.log below); plain CMake instead"
    tail -20 "$OUT/build.log"
    cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DXSTAGE_BUILD_PYTHON=ON -DXSTAGE_BUILD_TESTS=OFF \
      -DPython_EXECUTABLE="$(command -v $PY)" >>"$OUT/build.log" 2>&1 &&
      cmake --build "$BUILD" --target _C >>"$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; return 1; }
  fi
  cmake --build "$BUILD" --target xstage >>"$OUT/build.log" 2>&1 || { echo "[gpu_check] xstage CLI build failed"; tail -30 "$OUT/build.log"; return 1; }
  ls -la "$BUILD"/python/xstage/ "$OUT/wheel" 2>/dev/null
  $PY -c "import xstage; print('[gpu_check]', xstage.extension_status())"
}

step_test() {
  $PY -c "import torch; print('[gpu_check] torch', torch.__version__, torch.cuda.get_device_name())"
  $PY -m pytest tests/python -v -rs --junitxml="$OUT/pytest.xml" 2>&1 | tee "$OUT/pytest.log" | tail -80
  return "${PIPESTATUS[0]}"
}

step_bench() {
  local extra=("$@")
  $PY -m xstage.bench attention --cli "$BUILD/xstage" --warmup-ms 200 --rounds 2 \
    --json "$OUT/attention-torch-op.json" "${extra[@]}" 2>&1 |
    tee "$OUT/attention-torch-op.txt"
  return "${PIPESTATUS[0]}"
}

for s in "${steps[@]}"; do
  case "$s" in
    build) step_build || { rc=1; break; } ;;
    test) step_test || rc=1 ;;
    bench) step_bench || rc=1 ;;
    quick-bench) step_bench -S 4096,16384 || rc=1 ;;
    moe-bench | moe-bench=*)
      recipes=w8a8,int4_tok,mxfp4_tok
      [ "$s" = moe-bench ] || recipes=${s#moe-bench=}
      tag=${recipes//,/-}
      $PY -m xstage.bench moe-gemm --cli "$BUILD/xstage" --rounds 2 --recipes "$recipes" \
        --json "$OUT/moe-gemm-torch-op-$tag.json" 2>&1 |
        tee "$OUT/moe-gemm-torch-op-$tag.txt"
      [ "${PIPESTATUS[0]}" = 0 ] || rc=1 ;;
    *) echo "[gpu_check] unknown step $s (build, test, bench, quick-bench, moe-bench[=RECIPES])"; exit 2 ;;
  esac
done
echo "[gpu_check] done, exit $rc; results in $OUT"
exit $rc
