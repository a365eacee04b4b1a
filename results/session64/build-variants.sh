#!/usr/bin/env bash
# Local helper (no GPU; the switches existed from fef4d94 to 4172a66): xstage binaries that differ
# from build-s's only in the bf16 d = 64 128-row tile's translation unit, compiled with
# -DXSTAGE_ATTN_FB_PROBE=V (mainloop.cuh's measurement switches) for each V given; the object
# replaces its member of a copy of libxstage_attention.a and xstage is linked again.
# Output: .ab-fb/xstage-v<V>.xz and xstage-v0.xz (build-s's own).
# Usage: results/session64/build-variants.sh 1 2 3   (after `ninja -C build-s xstage`)
set -eu
root=$(cd "$(dirname "$0")/../.." && pwd)
b=$root/build-s
out=$root/.ab-fb
mkdir -p "$out"
cd "$b"
cc=$(ninja -t commands xstage | grep -- '-o CMakeFiles/xstage_attention.dir/src/kernels/attention/launch_bf16_d64_rows128.cu.o')
link=$(ninja -t commands xstage | tail -1)
xz -T2 -c xstage > "$out/xstage-v0.xz"
for v in "$@"; do
  w=/tmp/fb-build/v$v
  rm -rf "$w"; mkdir -p "$w"
  c=${cc/-o CMakeFiles\/xstage_attention.dir\/src\/kernels\/attention\/launch_bf16_d64_rows128.cu.o/-o $w\/launch_bf16_d64_rows128.cu.o}
  c=$(echo "$c" | sed -E 's/ -MD -MT [^ ]+ -MF [^ ]+//')
  (eval "$c -DXSTAGE_ATTN_FB_PROBE=$v") > "$w/ptxas.log" 2>&1 || { cat "$w/ptxas.log"; exit 1; }
  cp libxstage_attention.a "$w/"
  ar r "$w/libxstage_attention.a" "$w/launch_bf16_d64_rows128.cu.o"
  l=${link// libxstage_attention.a / $w\/libxstage_attention.a }
  l=${l/-o xstage /-o $w\/xstage }
  (eval "$l")
  xz -T2 -c "$w/xstage" > "$out/xstage-v$v.xz"
  grep -A2 "noncausal\|Lb0ELi2ELi2ELi1EEENS1_18LocalStoreEpilogueELb0ELb0" "$w/ptxas.log" | grep -E "registers|spill" | head -4
done
ls -la "$out"
