# shellcheck shell=bash
# Sourced by scripts/gpu-run, scripts/ab-run and the one-call scripts: the GPU machine's
# environment, its GPU count, and the compressed xstage binary's unpacking.

# NVLink multicast stays off on this workplace's machines; NCCL from PyTorch's nvidia-nccl package.
gpu_env_setup() {
  export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
  local nccl_root
  nccl_root=$(python3 -c "import nvidia.nccl; print(list(nvidia.nccl.__path__)[0])" 2>/dev/null || true)
  if [ -n "$nccl_root" ]; then
    export NCCL_ROOT="$nccl_root" LD_LIBRARY_PATH="$nccl_root/lib:${LD_LIBRARY_PATH:-}"
  fi
}

# gpu_count_check SCRIPT [EXPECTED]: sets gpu_visible (nvidia-smi -L, or XSTAGE_VISIBLE_GPUS for
# testing without a GPU), gpu_visible_how and gpu_expected (EXPECTED, else XSTAGE_EXPECT_GPUS,
# else the visible count); prints one FAIL line and returns 1 when no GPU is expected or fewer
# are visible than expected, 2 when the expected count is not a number.
gpu_count_check() {
  local script=$1
  gpu_expected=${2:-${XSTAGE_EXPECT_GPUS:-}}
  if [ -n "$gpu_expected" ] && ! [[ "$gpu_expected" =~ ^[0-9]+$ ]]; then
    echo "$script: --expect-gpus / XSTAGE_EXPECT_GPUS must be a whole number, got '$gpu_expected'" >&2
    return 2
  fi
  if [ -n "${XSTAGE_VISIBLE_GPUS:-}" ]; then
    gpu_visible=$XSTAGE_VISIBLE_GPUS gpu_visible_how=XSTAGE_VISIBLE_GPUS
  elif command -v nvidia-smi >/dev/null 2>&1; then
    gpu_visible=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ') gpu_visible_how="nvidia-smi -L"
  else
    gpu_visible=0 gpu_visible_how="no nvidia-smi on this machine"
  fi
  [ -n "$gpu_expected" ] || gpu_expected=$gpu_visible
  if [ "$gpu_expected" -lt 1 ]; then
    echo "$script: FAIL: no GPU visible ($gpu_visible_how); this script is for the GPU machine"; return 1
  fi
  if [ "$gpu_visible" -lt "$gpu_expected" ]; then
    echo "$script: FAIL: $gpu_expected GPU(s) expected, $gpu_visible visible ($gpu_visible_how)"; return 1
  fi
}

# unpack_run_xz: the xstage binary carried compressed (scripts/run-bin --xz: .run-xz/xstage.xz and
# BUILT_FROM, for calls that also carry a large bundle) back into .run-bin, where the one-call
# scripts look for it. Run from the repository root; returns 2 with one line when it cannot.
unpack_run_xz() {
  [ -f .run-xz/xstage.xz ] || { echo "unpack_run_xz: .run-xz/xstage.xz missing (scripts/run-bin --xz here, carry .run-xz)" >&2; return 2; }
  mkdir -p .run-bin || return 2
  xz -dc .run-xz/xstage.xz > .run-bin/xstage.part || { echo "unpack_run_xz: .run-xz/xstage.xz does not decompress" >&2; rm -f .run-bin/xstage.part; return 2; }
  mv .run-bin/xstage.part .run-bin/xstage && chmod +x .run-bin/xstage
  cp .run-xz/BUILT_FROM .run-bin/BUILT_FROM 2>/dev/null || echo unknown > .run-bin/BUILT_FROM
}
