#!/usr/bin/env bash
# scripts/attention-short-ab without a GPU: bad usage (exit 2, one line) and, with a fake
# xstage and a fake torch bench, the table step (python/compare_attention_tiles.py) on synthetic
# JSON: tiles side by side, auto's verdict per point, and a failed cell failing the run.
set -u
cd "$(dirname "$0")/../.." || exit 2
# shellcheck source=tests/scripts/expect.sh
source tests/scripts/expect.sh
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
expect 2 "usage" -- scripts/attention-short-ab
expect 2 "unknown option" -- scripts/attention-short-ab --bogus "$tmp/o"
expect 2 "missing" -- scripts/attention-short-ab --bin "$tmp/none" "$tmp/o"
expect 2 "--test-timeout must be" -- scripts/attention-short-ab --test-timeout x "$tmp/o"
expect 0 "FlashAttention-4" -- scripts/attention-short-ab --help
row() {  # backend S d tflops tile_block_m
  printf '{"backend":"%s","batch":1,"seqlen":%s,"heads":4,"head_dim":%s,"dtype":"bf16","causal":false,"tflops":%s,"nonfinite":0,"tile":{"block_m":%s},"correctness":{"checked":true,"passed":true,"rows_checked":64,"rows_failed":0}}' "$@"
}
doc() {  # tile rows...
  local tile=$1; shift
  local IFS=,
  printf '{"schema":"xstage.bench.attention.v1","config":{"tile":"%s"},"results":[%s]}' "$tile" "$*"
}
doc auto "$(row xstage 1024 64 67.2 128)" "$(row xstage 4096 64 385.3 128)" > "$tmp/auto.json"
doc staged "$(row xstage 1024 64 56.6 192)" "$(row xstage 4096 64 318.5 192)" > "$tmp/staged.json"
doc x "$(row torch-cudnn 1024 64 36.0 0)" "$(row torch-cudnn 4096 64 411.2 0)" > "$tmp/torch.json"
expect 0 "auto >= cuDNN at 1 of 2 points" -- python3 python/compare_attention_tiles.py "$tmp/torch.json" "$tmp/auto.json" "$tmp/staged.json"
expect 0 "67.2(128)" -- python3 python/compare_attention_tiles.py "$tmp/torch.json" "$tmp/auto.json" "$tmp/staged.json"
sed 's/"tflops":67.2,/"tflops":67.2,"instantiation":"bf16_d64_noncausal_split",/' "$tmp/auto.json" > "$tmp/auto-split.json"
expect 0 "67.2(split)" -- python3 python/compare_attention_tiles.py "$tmp/torch.json" "$tmp/auto-split.json" "$tmp/staged.json"
sed 's/"tile":"staged"/"tile":"staged","key_split":false/' "$tmp/staged.json" > "$tmp/staged-nosplit.json"
expect 0 "staged-nokeysplit" -- python3 python/compare_attention_tiles.py "$tmp/torch.json" "$tmp/auto.json" "$tmp/staged.json" "$tmp/staged-nosplit.json"
expect 2 "same tile" -- python3 python/compare_attention_tiles.py "$tmp/torch.json" "$tmp/auto.json" "$tmp/auto.json"
# FlashAttention-4 rows in the torch file: a column and the judged tile over it; a failed fa4 cell fails
doc x "$(row torch-cudnn 1024 64 36.0 0)" "$(row torch-cudnn 4096 64 411.2 0)" "$(row fa4 1024 64 33.6 0)" "$(row fa4 4096 64 428.0 0)" > "$tmp/torch-fa4.json"
expect 0 "FA4" -- python3 python/compare_attention_tiles.py "$tmp/torch-fa4.json" "$tmp/auto.json"
expect 0 "428.0       0.90" -- python3 python/compare_attention_tiles.py "$tmp/torch-fa4.json" "$tmp/auto.json"
sed 's/"backend":"fa4","batch":1,"seqlen":4096,\(.*\)"passed":true/"backend":"fa4","batch":1,"seqlen":4096,\1"passed":false/' "$tmp/torch-fa4.json" > "$tmp/torch-fa4-bad.json"
expect 1 "CORRECTNESS FAIL" -- python3 python/compare_attention_tiles.py "$tmp/torch-fa4-bad.json" "$tmp/auto.json"
sed 's/"passed":true/"passed":false/' "$tmp/staged.json" > "$tmp/bad.json"
expect 1 "CORRECTNESS FAIL" -- python3 python/compare_attention_tiles.py "$tmp/torch.json" "$tmp/auto.json" "$tmp/bad.json"
[ "$fails" = 0 ] && echo "all passed" || echo "$fails failed"
[ "$fails" = 0 ]
