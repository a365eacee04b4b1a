#!/usr/bin/env bash
# GPU check of the diffusers DiT integration (docs/dit.md), run from the repository root on the
# GPU machine after `python/xstage/gpu_check.sh OUT build` built the extension in this tree.
# diffusers (and importlib_metadata) come as carried wheels in .whl/ (no network there).
#
#   python/xstage/dit_gpu_check.sh OUT [test] [smoke] [bench[=CELLS]] [report] ...   (default: test bench report)
#
#   test          pytest tests/python/test_dit_backend.py tests/python/test_dit_gpu.py
#                 -> OUT/dit-pytest.log, OUT/dit-pytest.xml
#   smoke         python -m xstage.bench dit on the tiny cells (seconds) -> OUT/dit-smoke.json
#   bench         python -m xstage.bench dit, one process per cell, each -> OUT/dit-<cell>.json/.txt/.log;
#   bench=CELLS   only these cells (comma list; `python -m xstage.bench dit --plan` lists them)
#   report        one table, JSON and plot from every OUT/dit-<cell>*.json so far
#                 -> OUT/dit-report.txt/.json/.png (rows of a cell from several calls merged)
#
# Environment: DIT_BUDGET_S (default 540) is the wall-clock budget of all bench cells of this
# call together: a cell is not started when less than DIT_MIN_CELL_S (default 120) is left, and
# each cell runs under `timeout` with what is left. DIT_CELL_BUDGET_S (default 60) is passed as
# --cell-budget-s (a variant's timed forwards are cut to about that, never below 3 iterations,
# recorded in the JSON); DIT_ITERS (default 20), DIT_WARMUP (default 2), DIT_VARIANTS (default
# auto) are passed through; with DIT_VARIANTS set the files are dit-<cell>-<v1>-<v2>.json, so a
# huge cell can be split over calls by variant (the native reference output is recomputed in
# each call from the same seed; `report` merges the rows). DIT_ULYSSES=P (default 1) runs the
# cells under diffusers' context parallelism on P GPUs (--ulysses P; files dit-<cell>...-u<P>.json).
# Cells that did not fit are listed at the end; call again with
# bench=THOSE to run them (each cell's JSON is its own file, so calls accumulate).
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${1:?usage: python/xstage/dit_gpu_check.sh OUT [test] [smoke] [bench[=CELLS]]}
shift
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
steps=("$@")
[ ${#steps[@]} -eq 0 ] && steps=(test bench report)
PY=${PYTHON:-python3}
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export XSTAGE_COMMIT=${XSTAGE_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}
export HF_HUB_OFFLINE=1 DIFFUSERS_OFFLINE=1 TRANSFORMERS_OFFLINE=1

# the carried wheels, installed outside the system site-packages
SITE=${DIT_SITE:-/tmp/site}
if ls .whl/*.whl >/dev/null 2>&1; then
  $PY -m pip install -q --upgrade --no-index --no-deps --no-compile --target "$SITE" .whl/*.whl 2>&1 | grep -v "already exists" | tail -3
else
  echo "[dit_gpu_check] no .whl/*.whl here: using the diffusers the Python already has"
fi
export PYTHONPATH="$PWD/python:$SITE${PYTHONPATH:+:$PYTHONPATH}"

# the extension gpu_check.sh built: build-py/<wheel tag>/python/xstage (same logic as gpu_check.sh)
tag=$($PY -c "import sys, sysconfig; v=f'cp{sys.version_info[0]}{sys.version_info[1]}'; print(f\"{v}-{v}-{sysconfig.get_platform().replace('-', '_').replace('.', '_')}\")")
BUILD=build-py/$tag
if [ -z "${XSTAGE_EXT_DIR:-}" ]; then
  export XSTAGE_EXT_DIR="$PWD/$BUILD/python/xstage"
fi
[ -d "$XSTAGE_EXT_DIR" ] || echo "[dit_gpu_check] warning: $XSTAGE_EXT_DIR does not exist (run python/xstage/gpu_check.sh OUT build first)"
$PY - <<'EOF' 2>&1 | tee "$OUT/dit-env.txt"
import torch, diffusers, xstage
print("[dit_gpu_check] torch", torch.__version__, "diffusers", diffusers.__version__, "from", diffusers.__file__)
print("[dit_gpu_check] GPUs:", [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())])
print("[dit_gpu_check] xstage extension:", xstage.extension_status())
EOF
rc=0
START=$(date +%s)
BUDGET=${DIT_BUDGET_S:-540}
MIN_CELL=${DIT_MIN_CELL_S:-120}
skipped=()

step_test() {
  $PY -m pytest tests/python/test_dit_backend.py tests/python/test_dit_gpu.py -v -rs \
    --junitxml="$OUT/dit-pytest.xml" 2>&1 | tee "$OUT/dit-pytest.log" | tail -60
  return "${PIPESTATUS[0]}"
}

bench_cell() {   # bench_cell NAME TIMEOUT_S
  local cell=$1 limit=$2
  local tag=$cell
  # variants joined by '-': the device tool does not bring back file names with '+'
  [ -n "${DIT_VARIANTS:-}" ] && tag="$cell-${DIT_VARIANTS//,/-}"
  [ "${DIT_ULYSSES:-1}" != 1 ] && tag="$tag-u${DIT_ULYSSES}"
  echo "[dit_gpu_check] bench $cell (at most ${limit}s)"
  timeout --signal=INT --kill-after=30 "$limit" \
    $PY -m xstage.bench dit --models "$cell" --iters "${DIT_ITERS:-20}" --warmup "${DIT_WARMUP:-2}" \
      --cell-budget-s "${DIT_CELL_BUDGET_S:-60}" --variants "${DIT_VARIANTS:-auto}" --ulysses "${DIT_ULYSSES:-1}" \
      --json "$OUT/dit-$tag.json" >"$OUT/dit-$tag.txt" 2>"$OUT/dit-$tag.log"
  local r=$?
  cat "$OUT/dit-$tag.txt"
  [ $r -eq 0 ] || { echo "[dit_gpu_check] $cell: exit $r (tail of $OUT/dit-$tag.log below)"; tail -5 "$OUT/dit-$tag.log"; }
  return $r
}

step_bench() {   # step_bench CELLS
  local cells=${1:-wan-480p,flux-1024,flux-2048,wan-720p,hunyuan-720p}
  local IFS=,
  for cell in $cells; do
    local now left
    now=$(date +%s)
    left=$((BUDGET - (now - START)))
    if [ "$left" -lt "$MIN_CELL" ]; then
      skipped+=("$cell")
      continue
    fi
    bench_cell "$cell" "$left" || rc=1
  done
}

for s in "${steps[@]}"; do
  case "$s" in
    test) step_test || rc=1 ;;
    smoke)
      $PY -m xstage.bench dit --models tiny-wan,tiny-flux,tiny-hunyuan --iters 5 --warmup 1 \
        --json "$OUT/dit-smoke.json" --plot "$OUT/dit-smoke.png" 2>&1 | tee "$OUT/dit-smoke.txt"
      [ "${PIPESTATUS[0]}" = 0 ] || rc=1 ;;
    bench) step_bench ;;
    bench=*) step_bench "${s#bench=}" ;;
    report)
      files=$(ls "$OUT"/dit-*.json 2>/dev/null | grep -v -e '/dit-smoke.json$' -e '/dit-report.json$')
      if [ -z "$files" ]; then echo "[dit_gpu_check] report: no OUT/dit-<cell>.json yet"; rc=1; else
        # shellcheck disable=SC2086
        $PY -m xstage.bench dit --report $files --json "$OUT/dit-report.json" --plot "$OUT/dit-report.png" |
          tee "$OUT/dit-report.txt"
        [ "${PIPESTATUS[0]}" = 0 ] || rc=1
      fi ;;
    *) echo "[dit_gpu_check] unknown step $s (test, smoke, bench, bench=CELLS, report)"; exit 2 ;;
  esac
done
if [ ${#skipped[@]} -gt 0 ]; then
  (IFS=,; echo "[dit_gpu_check] not started (budget DIT_BUDGET_S=$BUDGET): bench=${skipped[*]}")
fi
echo "[dit_gpu_check] done, exit $rc; results in $OUT"
exit $rc
