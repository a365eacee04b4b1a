#!/usr/bin/env bash
# scripts/megamoe-ab without a GPU: it refuses a machine without one (one FAIL line, exit 1),
# rejects bad usage (exit 2), and its table (--table, from a bench moe JSON) gives TFLOP/s of
# expert work and unfused / fused ratios and fails on a cell whose check did not pass.
set -u
cd "$(dirname "$0")/../.." || exit 2
# shellcheck source=tests/scripts/expect.sh
source tests/scripts/expect.sh
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/bin" && printf '#!/bin/sh\nexit 0\n' > "$tmp/bin/xstage" && chmod +x "$tmp/bin/xstage"
expect 1 "FAIL: 1 GPU(s) expected, 0 visible" -- env XSTAGE_VISIBLE_GPUS=0 scripts/megamoe-ab --bin "$tmp/bin" "$tmp/o"
expect 2 "usage" -- scripts/megamoe-ab
expect 2 "--iters must be" -- scripts/megamoe-ab --iters 5 "$tmp/o"
expect 2 "missing" -- env XSTAGE_VISIBLE_GPUS=1 scripts/megamoe-ab --bin "$tmp/none" "$tmp/o"
# DSv4-Flash, 8192 tokens: 6 x 8192 x top-k x hidden x intermediate = 2.47 TFLOP (issue 37:
# unfused 4251 us = ~580 TFLOP/s, expert-wave 5489 us = ~450).
cat > "$tmp/ok.json" <<'J'
{"world": 1, "results": [
 {"model": "DSv4-Flash", "tokens_per_rank": 8192, "variant": "unfused", "median_us": 4251, "check": "ok"},
 {"model": "DSv4-Flash", "tokens_per_rank": 8192, "variant": "expert-wave", "median_us": 5489, "check": "ok"},
 {"model": "DSv4-Flash", "tokens_per_rank": 8192, "variant": "interleaved+m128n256", "median_us": 2125.5, "check": "ok"}]}
J
expect 0 "4251us   582TF" -- scripts/megamoe-ab --table "$tmp/ok.json"
expect 0 "451TF 0.77x" -- scripts/megamoe-ab --table "$tmp/ok.json"
expect 0 "1164TF 2.00x" -- scripts/megamoe-ab --table "$tmp/ok.json"
sed 's/"median_us": 2125.5, "check": "ok"/"median_us": 2125.5, "check": "FAILED"/' "$tmp/ok.json" > "$tmp/bad.json"
expect 1 "2.00x !" -- scripts/megamoe-ab --table "$tmp/bad.json"
# The phase table (bench --spans): an unfused row's events and a fused row's trace phases.
cat > "$tmp/ph.json" <<'J'
{"world": 1, "results": [
 {"model": "DSv4-Flash", "tokens_per_rank": 8192, "variant": "unfused", "median_us": 4251, "check": "ok",
  "phases": [{"dispatch_us": 210, "l1_us": 2100, "l2_us": 1400, "combine_us": 300, "reduce_us": 240, "l1_tflops": 785, "l2_tflops": 589}]},
 {"model": "DSv4-Flash", "tokens_per_rank": 8192, "variant": "interleaved", "median_us": 4519, "check": "ok",
  "tiles": [{"phases": {"prologue_us": 330, "l1_us": 2400, "l2_us": 1500, "gaps_us": 120, "combine_us": 90, "reduce_us": 60, "l1_tflops": 687, "l2_tflops": 550}}]}]}
J
expect 0 "unfused       210     2100     1400       0      300     240     785     589     0.82" -- scripts/megamoe-ab --table "$tmp/ph.json"
expect 0 "interleaved       330     2400     1500     120       90      60     687     550     0.77" -- scripts/megamoe-ab --table "$tmp/ph.json"
# Several weight formats (--weights): one row per model, format and tokens.
cat > "$tmp/w.json" <<'J'
{"world": 1, "results": [
 {"model": "DSv4-Flash", "weights": "w8a8", "tokens_per_rank": 8192, "variant": "unfused", "median_us": 4251, "check": "ok"},
 {"model": "DSv4-Flash", "weights": "w4a8-int4-lut-rs", "tokens_per_rank": 8192, "variant": "unfused", "median_us": 4000, "check": "ok"},
 {"model": "DSv4-Flash", "weights": "w4a8-int4-lut-rs", "tokens_per_rank": 8192, "variant": "interleaved", "median_us": 2000, "check": "ok"}]}
J
expect 0 "DSv4-Flash w4a8-int4-lut-rs   8192" -- scripts/megamoe-ab --table "$tmp/w.json"
expect 0 "2000us  1237TF 2.00x" -- scripts/megamoe-ab --table "$tmp/w.json"
expect 2 "unknown option" -- scripts/megamoe-ab --bogus "$tmp/o"
[ "$fails" = 0 ] && echo "all passed" || echo "$fails failed"
[ "$fails" = 0 ]
