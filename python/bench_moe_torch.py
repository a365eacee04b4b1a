#!/usr/bin/env python3
"""PyTorch baseline for `xstage bench moe` (issue 8): one expert-parallel MoE layer over NCCL.

    torchrun --standalone --nproc-per-node=2 python/bench_moe_torch.py --json OUT.json \
        [--xstage ./build-gpu/xstage] [--models A,B] [--tokens 512,2048,8192] \
        [--routings balanced,skewed] [--weights w4a8,w8a8] [--warmup 3] [--iters 30]
    python3 python/bench_moe_torch.py --self-test-cpu      # no GPU: pipeline math vs fp32 reference
    python3 python/bench_moe_torch.py --list                # the configurations, nothing run

What a PyTorch user runs today for one MoE layer across P ranks (one process per GPU,
experts split evenly: expert e lives on rank e // (experts / P)). Per rank and iteration
(the timed region, CUDA events on the rank's stream):

  1. count exchange: rows per (destination rank, its local expert), all_to_all_single; the
     counts go to the host (all_to_all_single needs split sizes as Python lists: the one
     host sync of this path);
  2. dispatch: (token, k) rows ordered by destination (stable argsort of the expert id),
     FP8 row + its fp32 scales packed per token into one uint8 row, gathered (all queued
     before the host sync) and sent with one all_to_all_single; expert id + router weight
     per row with a second one;
  3. received rows sorted by local expert (stable argsort), group offsets from the counts;
  4. Linear-1 grouped GEMM (FP8 -> bf16) -> silu(gate) * up * router weight (fp32) ->
     requantised to FP8 (the router weight is applied here, and only here);
  5. Linear-2 grouped GEMM -> bf16;
  6. rows back to receive order, all_to_all_single back to the token owners;
  7. rows back to (token, k) order and summed over k into out [T, hidden] bf16.

GEMM path (--gemm auto picks the first that passes a numeric probe on every rank):
  grouped_rowwise  torch._scaled_grouped_mm, 2D A [rows, K] x 3D B [E_local, K, N] with
                   int32 group end offsets; Hopper supports only rowwise scales here (one
                   per activation row, one per weight output channel), so the baseline's
                   scale granularity differs from xstage's 1x128 / 128x128 blocks: x is
                   re-quantised from 1x128 blocks to per-row scales once, outside timing;
  loop_blockwise   torch._scaled_mm per expert with 1x128 / 128x128 block scales (cuBLASLt);
  loop_rowwise     torch._scaled_mm per expert with rowwise scales.
W4A8 configurations run the same FP8 path with the weights pre-converted to FP8 (PyTorch
has no 4-bit MMA; see the notes in the JSON). Routed experts only: no shared expert.

Routing: per configuration rank 0 runs `<xstage> moe-routing --model NAME --tokens T --ranks P
--routing KIND --out FILE.json` (schema xstage.moe.routing.v1, the same routing the xstage
kernel uses) and every rank reads FILE.json. Timing: warm-up, then --iters runs, each after
dist.barrier() + synchronize, a calibrated GPU busy-wait (--cover-us) and a 4-byte
all-reduce so the GPUs start together; per rank median / p10 / p90, reported as the max
over ranks (medians kept per rank). Before the sweep a correctness check (--check-model,
default DiT-MoE-G at 64 tokens/rank) compares the layer with an fp32 computation of the
same quantised math on dequantised inputs (expert by expert, all experts' weights gathered;
the Linear-1 output rounded to bf16 as the GEMM writes it, the SwiGLU output fake-quantised
like the pipeline); relative L2 error above 3e-2 or a non-finite output fails the run.
And every measured configuration is checked (xsbench.verify): one more layer run, on outputs
poisoned with NaN, compared on --check-rows seeded token rows per rank against the same fp32
math, each expert's contribution computed on the rank that owns it and summed over ranks
(per-row relative L2 error < 5e-2), with a full finiteness scan: the row's "correctness"
record, which python/compare_moe.py gates on.
NCCL_NVLS_ENABLE=0 is forced (never NVLink multicast). --time-budget-s (default 270 s)
skips whatever is left of the sweep once it has run that long, so a run stays bounded.

Output: rank 0 writes --json (schema xstage.bench.moe_torch.v1) and a table on stdout;
progress on stderr. Exit status: 0 ok, 1 correctness check failed or non-finite output,
2 bad input (arguments, routing CLI missing), 3 torch/CUDA/NCCL missing.
"""
import argparse
import itertools
import json
import math
import os
import shlex
import statistics
import subprocess
import sys
import threading
import time

try:
    import torch
    import torch.nn.functional as F
except ImportError:  # --help, --list and py_compile work without torch
    torch = None
    F = None

from xsbench import moe_models, timing, verify

SCHEMA = "xstage.bench.moe_torch.v1"
ROUTING_SCHEMA = "xstage.moe.routing.v1"
REL_ERR_LIMIT = 3e-2     # the run's check: relative L2 error over the whole output
ROW_REL_TOL = 5e-2       # the per-configuration check: relative L2 error of the worst checked row
FP8_MAX = 448.0          # largest finite float8_e4m3fn; larger values become NaN on conversion
BLOCK = 128              # scale block (1x128 activations, 128x128 weights)

MODELS = moe_models.rows("name", "hidden", "intermediate", "experts", "top_k")  # routed experts; bench/moe-models.json
WEIGHTS = ("w4a8", "w8a8")
ROUTINGS = ("balanced", "skewed")
TOKENS = (512, 2048, 8192)
GEMM_PATHS = ("grouped_rowwise", "loop_blockwise", "loop_rowwise")

NOTES = [
    "W4A8: PyTorch has no 4-bit MMA, so W4A8 configurations run the same FP8 path as W8A8 with the "
    "weights pre-converted to FP8 outside the timed region. This favours the baseline (no 4-bit -> FP8 "
    "conversion in the GEMM), though it also reads twice the weight bytes of a 4-bit layout.",
    "grouped_rowwise: torch._scaled_grouped_mm on Hopper takes only rowwise scales (one per activation row, "
    "one per weight output channel), not xstage's 1x128 activation / 128x128 weight blocks; x is "
    "re-quantised from 1x128 blocks to per-row scales once, outside the timed region, and the Linear-1 "
    "output is requantised per row.",
    "Routed experts only; shared experts are not part of this baseline.",
    "The router weight is applied once, in fp32 after SwiGLU and before the requantisation to FP8.",
    "The count exchange copies the counts to the host (all_to_all_single takes Python split sizes): the "
    "timed region contains one host sync, and the Python launch time of the steps after it.",
    "Dispatch sends FP8 rows with their fp32 scales packed in one uint8 row (one all_to_all_single) plus "
    "expert id and router weight per row (a second one); combine sends bf16 rows.",
]


# ----------------------------------------------------------------------------------------
# Arguments and configurations (no torch needed)
# ----------------------------------------------------------------------------------------
def _names(text):
    return [x.strip() for x in text.split(",") if x.strip()]


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--xstage", default="./build-gpu/xstage", help="the xstage CLI (runs `moe-routing`)")
    ap.add_argument("--models", type=_names, default=[], help="comma list of model names (default: all seven)")
    ap.add_argument("--tokens", type=timing.ints, default=list(TOKENS), help="tokens per rank, comma list")
    ap.add_argument("--routings", type=_names, default=list(ROUTINGS), help="balanced,skewed")
    ap.add_argument("--weights", type=_names, default=list(WEIGHTS), help="w4a8,w8a8")
    ap.add_argument("--warmup", type=int, default=3, help=">= 3")
    ap.add_argument("--iters", type=int, default=30, help="timed iterations, >= 20")
    ap.add_argument("--json", help="rank 0 writes results here")
    ap.add_argument("--gemm", choices=("auto",) + GEMM_PATHS, default="auto")
    ap.add_argument("--fast-accum", action="store_true",
                    help="use_fast_accum=True in the FP8 GEMMs (faster on Hopper, less accurate; default off)")
    ap.add_argument("--cover-us", type=float, default=500.0,
                    help="GPU busy-wait queued before each timed run so the host enqueues ahead (0: none)")
    ap.add_argument("--max-weight-gib", type=float, default=60.0,
                    help="skip a model whose local expert weights exceed this (GiB per rank)")
    ap.add_argument("--time-budget-s", type=float, default=270.0,
                    help="skip the remaining configurations once the sweep has run this long (0: no limit)")
    ap.add_argument("--routing-dir", default="/tmp/xstage-moe-routing", help="where routing JSON files go")
    ap.add_argument("--routing-args", default="", help="extra arguments appended to `xstage moe-routing`")
    ap.add_argument("--check-model", default="DiT-MoE-G")
    ap.add_argument("--check-tokens", type=int, default=64)
    ap.add_argument("--check-routing", default="balanced", choices=ROUTINGS)
    ap.add_argument("--no-check", action="store_true",
                    help="skip the correctness checks (the compare then fails: rows without a record)")
    ap.add_argument("--check-rows", type=int, default=16, help="token rows per rank checked in every configuration")
    ap.add_argument("--list", action="store_true", help="print the configurations and exit")
    ap.add_argument("--self-test-cpu", action="store_true",
                    help="CPU only: routing parsing, config enumeration and the pipeline math (emulated GEMMs, "
                         "threads as ranks) against the fp32 reference; exit 0/1")
    # Test aid only: uniform / Zipf routing made here instead of by the C++ CLI. Results made
    # with it are marked and must never be reported.
    ap.add_argument("--fake-routing", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    return args


def validate_args(args):
    """Error message, or None."""
    if args.iters < timing.MIN_ITERS:
        return f"--iters must be >= {timing.MIN_ITERS}"
    if args.check_rows < 2:
        return "--check-rows must be >= 2"
    if args.warmup < 3:
        return "--warmup must be >= 3"
    if args.cover_us < 0 or args.max_weight_gib <= 0 or args.time_budget_s < 0:
        return "--cover-us and --time-budget-s must be >= 0, --max-weight-gib > 0"
    known = {m[0] for m in MODELS}
    bad = [m for m in args.models if m not in known]
    if bad:
        return f"unknown model(s) {bad}; known: {sorted(known)}"
    if args.check_model not in known:
        return f"unknown --check-model {args.check_model!r}"
    if [r for r in args.routings if r not in ROUTINGS] or [w for w in args.weights if w not in WEIGHTS]:
        return f"--routings must be from {ROUTINGS}, --weights from {WEIGHTS}"
    if not args.tokens or min(args.tokens) < 1 or args.check_tokens < 1:
        return "--tokens and --check-tokens must be positive"
    if not args.routings or not args.weights:
        return "--routings and --weights must not be empty"
    return None


def model_row(name):
    for m in MODELS:
        if m[0] == name:
            return m
    raise KeyError(name)


def enumerate_configs(args):
    """Model-major (weights are built once per model), in MOE.md's order otherwise."""
    models = [m for m in MODELS if not args.models or m[0] in args.models]
    out = []
    for m in models:
        for w in WEIGHTS:
            if w not in args.weights:
                continue
            for r in ROUTINGS:
                if r not in args.routings:
                    continue
                for t in sorted(set(args.tokens)):
                    out.append({"model": m[0], "weights": w, "routing": r, "tokens_per_rank": t})
    return out


def local_weight_bytes(model, world):
    """FP8 bytes of one rank's W1 + W2 (scales are < 1% and left out)."""
    _, H, I, E, _ = model
    return (E // world) * (2 * I * H + H * I)


# ----------------------------------------------------------------------------------------
# Routing: the C++ CLI's JSON (or, as a test aid, a fake made here)
# ----------------------------------------------------------------------------------------
def routing_path(args, model, tokens, world, routing):
    return os.path.join(args.routing_dir, f"{model}_{routing}_T{tokens}_P{world}.json")


def run_routing_cli(xstage, model, tokens, world, routing, out, extra=""):
    """Runs the C++ generator; returns None or an error message."""
    cmd = [xstage, "moe-routing", "--model", model, "--tokens", str(tokens), "--ranks", str(world),
           "--routing", routing, "--out", out] + shlex.split(extra)
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"{' '.join(cmd)}: {e}"
    if p.returncode != 0:
        tail = (p.stderr or p.stdout).strip().splitlines()[-3:]
        return f"{' '.join(cmd)}: exit {p.returncode}: {' | '.join(tail)}"
    return None


def fake_routing(model, tokens, world, routing, seed=2026, zipf_s=1.0):
    """TEST AID ONLY (hidden --fake-routing, --self-test-cpu): the routing schema filled by a
    generator here, not the C++ one the xstage kernel uses. Balanced: uniform; skewed: Zipf
    over a seeded permutation of the experts. Distinct experts per token, weights sum to 1."""
    name, H, I, E, k = model
    g = torch.Generator().manual_seed(seed)
    if routing == "balanced":
        p = torch.ones(E, dtype=torch.float64)
    else:
        p = torch.empty(E, dtype=torch.float64)
        p[torch.randperm(E, generator=g)] = 1.0 / torch.arange(1, E + 1, dtype=torch.float64) ** zipf_s
    per_rank = []
    for _ in range(world):
        ids = torch.multinomial(p.repeat(tokens, 1), k, replacement=False, generator=g)
        w = torch.softmax(torch.randn(tokens, k, generator=g, dtype=torch.float64), dim=-1)
        per_rank.append({"experts": ids.reshape(-1).tolist(), "weights": w.reshape(-1).tolist()})
    return {"schema": ROUTING_SCHEMA, "model": name, "hidden": H, "intermediate": I, "experts": E,
            "top_k": k, "shared": 0, "ranks": world, "tokens_per_rank": tokens, "routing": routing,
            "zipf_s": zipf_s, "seed": seed, "experts_per_rank": E // world, "per_rank": per_rank,
            "stats": {}, "generator": "FAKE (python test aid; never report results made with it)"}


def validate_routing(doc, model, tokens, world, routing):
    """Raises ValueError when the document is not the routing asked for."""
    name, H, I, E, k = model

    def need(cond, msg):
        if not cond:
            raise ValueError(f"routing JSON: {msg}")

    need(doc.get("schema") == ROUTING_SCHEMA, f"schema {doc.get('schema')!r}, expected {ROUTING_SCHEMA!r}")
    got = tuple(doc.get(f) for f in ("hidden", "intermediate", "experts", "top_k"))
    need(got == (H, I, E, k), f"shape (hidden, intermediate, experts, top_k) {got} != {name}'s {(H, I, E, k)}")
    need(doc.get("ranks") == world, f"ranks {doc.get('ranks')} != world {world}")
    need(doc.get("tokens_per_rank") == tokens, f"tokens_per_rank {doc.get('tokens_per_rank')} != {tokens}")
    need(doc.get("routing") == routing, f"routing {doc.get('routing')!r} != {routing!r}")
    need(doc.get("experts_per_rank") == E // world and E % world == 0,
         f"experts_per_rank {doc.get('experts_per_rank')} != {E} / {world}")
    need(H % BLOCK == 0 and I % BLOCK == 0, f"hidden and intermediate must be multiples of {BLOCK}")
    per_rank = doc.get("per_rank")
    need(isinstance(per_rank, list) and len(per_rank) == world, f"per_rank must list {world} ranks")
    for r, pr in enumerate(per_rank):
        ids = torch.tensor(pr.get("experts", []), dtype=torch.int64)
        w = torch.tensor(pr.get("weights", []), dtype=torch.float64)
        need(ids.numel() == tokens * k and w.numel() == tokens * k,
             f"rank {r}: experts/weights must hold tokens_per_rank * top_k = {tokens * k} entries")
        need(bool(((ids >= 0) & (ids < E)).all()), f"rank {r}: expert id out of [0, {E})")
        srt = ids.view(tokens, k).sort(dim=1).values
        need(k == 1 or bool((srt[:, 1:] != srt[:, :-1]).all()), f"rank {r}: a token repeats an expert")
        need(bool(torch.isfinite(w).all() and (w >= 0).all()), f"rank {r}: weights must be finite and >= 0")
        need(bool(((w.view(tokens, k).sum(1) - 1).abs() < 1e-3).all()), f"rank {r}: a token's weights do not sum to 1")


def load_routing(path, model, tokens, world, routing):
    with open(path) as f:
        doc = json.load(f)
    validate_routing(doc, model, tokens, world, routing)
    return doc


def routing_tensors(doc, rank):
    """(expert ids int64 [T, k], weights fp32 [T, k]) of one rank, on the CPU."""
    T, k = doc["tokens_per_rank"], doc["top_k"]
    pr = doc["per_rank"][rank]
    return (torch.tensor(pr["experts"], dtype=torch.int64).view(T, k),
            torch.tensor(pr["weights"], dtype=torch.float32).view(T, k))


def rows_received(doc):
    """Rows each rank's experts compute (over all source ranks)."""
    P, epr = doc["ranks"], doc["experts_per_rank"]
    total = torch.zeros(P, dtype=torch.int64)
    for pr in doc["per_rank"]:
        total += torch.bincount(torch.tensor(pr["experts"], dtype=torch.int64) // epr, minlength=P)
    return total.tolist()


def routing_summary(doc):
    """The CLI's stats without the per-expert arrays (informational)."""
    st = doc.get("stats") or {}
    out = {k: v for k, v in st.items() if k != "expert_rows"}
    out.update({"zipf_s": doc.get("zipf_s"), "seed": doc.get("seed")})
    if "generator" in doc:
        out["generator"] = doc["generator"]
    return out


# ----------------------------------------------------------------------------------------
# FP8 quantisation (CPU or GPU)
# ----------------------------------------------------------------------------------------
def _fp8():
    return torch.float8_e4m3fn


def quant_act(x, fmt):
    """fp32 [M, K] -> (fp8 [M, K], fp32 scales: rowwise [M], blockwise [M, K/128])."""
    M, K = x.shape
    if fmt == "rowwise":
        s = x.abs().amax(dim=1, keepdim=True).clamp_min(1e-12) / FP8_MAX
        return (x / s).clamp_(-FP8_MAX, FP8_MAX).to(_fp8()), s.view(M)
    xb = x.view(M, K // BLOCK, BLOCK)
    s = xb.abs().amax(dim=2, keepdim=True).clamp_min(1e-12) / FP8_MAX
    q = (xb / s).clamp_(-FP8_MAX, FP8_MAX).to(_fp8()).view(M, K)
    return q, s.view(M, K // BLOCK)


def dequant_act(q, s, fmt):
    M, K = q.shape
    if fmt == "rowwise":
        return q.float() * s.view(M, 1)
    return (q.float().view(M, K // BLOCK, BLOCK) * s.view(M, K // BLOCK, 1)).view(M, K)


def fake_quant_act(x, fmt):
    return dequant_act(*quant_act(x, fmt), fmt)


def dequant_weight(w, s, fmt):
    """One expert: fp8 [N, K] with scales rowwise [N] or blockwise [N/128, K/128] -> fp32."""
    N, K = w.shape
    if fmt == "rowwise":
        return w.float() * s.view(N, 1)
    wb = w.float().view(N // BLOCK, BLOCK, K // BLOCK, BLOCK)
    return (wb * s.view(N // BLOCK, 1, K // BLOCK, 1)).view(N, K)


def make_weights(E, N, K, fmt, device, seed):
    """Random FP8 expert weights [E, N, K] and their scales (rowwise [E, N] or blockwise
    [E, N/128, K/128]); dequantised entries have std ~ 1/sqrt(K) so activations stay O(1).
    Built a few experts at a time to bound the fp32 temporary."""
    g = torch.Generator(device=device).manual_seed(seed)
    w = torch.empty(E, N, K, dtype=_fp8(), device=device)
    step = max(1, (256 << 20) // (N * K))
    for e0 in range(0, E, step):
        e1 = min(E, e0 + step)
        w[e0:e1] = torch.randn(e1 - e0, N, K, generator=g, device=device).mul_(64).clamp_(-FP8_MAX, FP8_MAX).to(_fp8())
    shape = (E, N) if fmt == "rowwise" else (E, N // BLOCK, K // BLOCK)
    s = torch.rand(shape, generator=g, device=device).mul_(0.5).add_(0.75).mul_(1.0 / (64 * math.sqrt(K)))
    return w, s


# ----------------------------------------------------------------------------------------
# Grouped GEMM backends: mm(a fp8 [M, K], sa, w fp8 [G, N, K], sw, offs int32 [G] group
# ends on the device, rows: host list of rows per group) -> bf16 [M, N]
# ----------------------------------------------------------------------------------------
class GroupedRowwise:
    key, fmt = "grouped_rowwise", "rowwise"
    host_rows = False   # group sizes come from the device offsets

    def __init__(self, fast_accum=False):
        self.fast_accum = fast_accum
        self.desc = ("torch._scaled_grouped_mm, rowwise scales (A per row, B per output channel), offs = group "
                     f"ends, use_fast_accum={fast_accum}")

    def mm(self, a, sa, w, sw, offs, rows):
        if a.shape[0] == 0:
            return torch.empty(0, w.shape[1], dtype=torch.bfloat16, device=a.device)
        # B as [G, K, N] column-major: the [G, N, K] weights transposed (no copy).
        return torch._scaled_grouped_mm(a, w.transpose(-2, -1), sa, sw, offs=offs, out_dtype=torch.bfloat16,
                                        use_fast_accum=self.fast_accum)


class LoopScaled:
    """One torch._scaled_mm (cuBLASLt) per expert with rows; zero-row experts are skipped."""
    host_rows = True

    def __init__(self, fmt, fast_accum=False):
        self.fmt, self.fast_accum = fmt, fast_accum
        self.key = f"loop_{fmt}"
        self.desc = (f"torch._scaled_mm per expert, {fmt} scales"
                     + (" (A 1x128 M-major, B 128x128)" if fmt == "blockwise" else " (A [m,1], B [1,N])")
                     + f", use_fast_accum={fast_accum}")

    def _scale_a(self, sa, s0, m):
        if self.fmt == "rowwise":
            return sa[s0:s0 + m].reshape(m, 1)
        # (m, K/128) with strides (1, m), as cuBLASLt wants; built explicitly because for m = 1
        # .t().contiguous().t() keeps the row-major strides.
        out = torch.empty_strided((m, sa.shape[1]), (1, m), dtype=sa.dtype, device=sa.device)
        return out.copy_(sa[s0:s0 + m])

    def _scale_b(self, sw, g):
        if self.fmt == "rowwise":
            return sw[g].reshape(1, -1)
        return sw[g].t()                             # (K/128, N/128) view of [N/128, K/128]

    def mm(self, a, sa, w, sw, offs, rows):
        out = torch.empty(a.shape[0], w.shape[1], dtype=torch.bfloat16, device=a.device)
        s0 = 0
        for g, m in enumerate(rows):
            if m:
                torch._scaled_mm(a[s0:s0 + m], w[g].t(), scale_a=self._scale_a(sa, s0, m),
                                 scale_b=self._scale_b(sw, g), out_dtype=torch.bfloat16,
                                 use_fast_accum=self.fast_accum, out=out[s0:s0 + m])
            s0 += m
        return out


class Emulated:
    """fp32 matmul of the dequantised operands, rounded to bf16 like the FP8 GEMMs' output.
    For the CPU self-test and the GPU probe's reference; also checks that the device offsets
    agree with the host row counts."""
    host_rows = True

    def __init__(self, fmt):
        self.fmt = fmt
        self.key = f"emulated_{fmt}"
        self.desc = f"fp32 emulation ({fmt} scales)"

    def mm(self, a, sa, w, sw, offs, rows):
        ends = list(itertools.accumulate(rows))
        if offs.tolist() != ends:
            raise AssertionError(f"group offsets {offs.tolist()} != cumulative rows {ends}")
        out = torch.empty(a.shape[0], w.shape[1], dtype=torch.bfloat16, device=a.device)
        s0 = 0
        for g, m in enumerate(rows):
            if m:
                A = dequant_act(a[s0:s0 + m], sa[s0:s0 + m], self.fmt)
                out[s0:s0 + m] = (A @ dequant_weight(w[g], sw[g], self.fmt).t()).to(torch.bfloat16)
            s0 += m
        return out


def make_backend(key, fast_accum=False):
    if key == "grouped_rowwise":
        return GroupedRowwise(fast_accum)
    return LoopScaled(key[len("loop_"):], fast_accum)


def rel_l2(got, ref):
    return ((got.float() - ref.float()).norm() / ref.float().norm().clamp_min(1e-30)).item()


def probe_backend(backend, device):
    """(ok, message): runs the backend on uneven groups (5, 0, 1, 19 rows, an empty one
    included) and compares with the fp32 emulation."""
    rows = [5, 0, 1, 19]
    K, N = 256, 384
    try:
        g = torch.Generator(device=device).manual_seed(11)
        a, sa = quant_act(torch.randn(sum(rows), K, generator=g, device=device), backend.fmt)
        w, sw = make_weights(len(rows), N, K, backend.fmt, device, 12)
        offs = torch.tensor(list(itertools.accumulate(rows)), dtype=torch.int32, device=device)
        got = backend.mm(a, sa, w, sw, offs, rows)
        ref = Emulated(backend.fmt).mm(a, sa, w, sw, offs, rows)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        err = rel_l2(got, ref)
        if not math.isfinite(err) or err > 2e-2:
            return False, f"wrong result: rel err {err:.3g} vs fp32 emulation"
        return True, f"rel err {err:.2e} vs fp32 emulation"
    except Exception as e:  # noqa: BLE001 - any failure rejects the path
        return False, f"{type(e).__name__}: {str(e).strip().splitlines()[0][:200] if str(e).strip() else ''}"


# ----------------------------------------------------------------------------------------
# Communication: NCCL, or threads standing in for ranks (CPU self-test)
# ----------------------------------------------------------------------------------------
class NcclComm:
    def __init__(self, dist):
        self.dist = dist
        self.rank, self.world = dist.get_rank(), dist.get_world_size()

    def a2a(self, out, inp, out_splits=None, in_splits=None):
        self.dist.all_to_all_single(out, inp, output_split_sizes=out_splits, input_split_sizes=in_splits)

    def all_gather(self, t):
        t = t.contiguous()
        u = t.view(torch.uint8) if t.element_size() == 1 else t   # fp8 travels as bytes
        parts = [torch.empty_like(u) for _ in range(self.world)]
        self.dist.all_gather(parts, u)
        return [p.view(t.dtype) for p in parts]


class ThreadWorld:
    def __init__(self, world):
        self.world = world
        self.barrier = threading.Barrier(world, timeout=120)
        self.slots = [None] * world


class ThreadComm:
    """all_to_all_single / all_gather between threads of one process (same semantics)."""

    def __init__(self, tw, rank):
        self.tw, self.rank, self.world = tw, rank, tw.world

    def a2a(self, out, inp, out_splits=None, in_splits=None):
        P = self.world
        in_splits = in_splits or [inp.shape[0] // P] * P
        out_splits = out_splits or [out.shape[0] // P] * P
        self.tw.slots[self.rank] = list(torch.split(inp, in_splits))
        self.tw.barrier.wait()
        chunks = [self.tw.slots[src][self.rank] for src in range(P)]
        got = [c.shape[0] for c in chunks]
        if got != list(out_splits):
            raise AssertionError(f"rank {self.rank}: received {got} rows, expected {out_splits}")
        if out.shape[0]:
            out.copy_(torch.cat(chunks))
        self.tw.barrier.wait()   # nobody overwrites its slot before all have read

    def all_gather(self, t):
        self.tw.slots[self.rank] = t.clone()
        self.tw.barrier.wait()
        parts = list(self.tw.slots)
        self.tw.barrier.wait()
        return parts


# ----------------------------------------------------------------------------------------
# The layer
# ----------------------------------------------------------------------------------------
class Layer:
    """One rank's inputs: activations (FP8 + scales in the GEMM path's format), routing, and
    the local experts' weights."""

    def __init__(self, hidden, inter, experts, xq, xs, topk_ids, topk_w, w1, s1, w2, s2):
        self.hidden, self.inter, self.experts = hidden, inter, experts
        self.xq, self.xs = xq, xs
        self.topk_ids, self.topk_w = topk_ids, topk_w
        self.w1, self.s1, self.w2, self.s2 = w1, s1, w2, s2


def row_bytes(hidden, scale_cols):
    """Packed dispatch row: FP8 activations, then fp32 scales, padded to 16 bytes."""
    return -(-(hidden + 4 * scale_cols) // 16) * 16


def moe_layer(comm, gemm, L):
    """Steps 1-7 of the module docstring on one rank. Returns (out bf16 [T, H], rows received)."""
    T, k = L.topk_ids.shape
    H, I, E, P = L.hidden, L.inter, L.experts, comm.world
    El = E // P
    dev = L.xq.device
    S = 1 if gemm.fmt == "rowwise" else H // BLOCK
    RB = row_bytes(H, S)

    # (1) rows per (destination, local expert); expert e = dest * El + local, so counts over
    # global ids are already [P, El] (scatter_add_, not bincount: bincount syncs on CUDA).
    flat_e = L.topk_ids.reshape(-1)
    send_counts = torch.zeros(E, dtype=torch.int64, device=dev).scatter_add_(0, flat_e, torch.ones_like(flat_e))
    recv_counts = torch.empty_like(send_counts)
    comm.a2a(recv_counts, send_counts)

    # (2) dispatch rows: stable sort by global expert id = by destination, then local expert.
    # Queued before the host sync below, so the GPU has work while the host waits.
    order = torch.argsort(flat_e, stable=True)
    packed = torch.empty(T, RB, dtype=torch.uint8, device=dev)
    packed[:, :H] = L.xq.view(torch.uint8)
    packed[:, H:H + 4 * S] = L.xs.reshape(T, S).view(torch.uint8)
    send_rows = packed.index_select(0, order // k)
    meta = torch.stack([(flat_e % El).to(torch.int32), L.topk_w.reshape(-1).view(torch.int32)], dim=1)
    send_meta = meta.index_select(0, order)

    # The one host sync: all_to_all_single takes its split sizes as Python ints.
    host = torch.cat([send_counts, recv_counts]).tolist()
    in_splits = [sum(host[r * El:(r + 1) * El]) for r in range(P)]
    out_splits = [sum(host[E + r * El:E + (r + 1) * El]) for r in range(P)]
    n_recv = sum(out_splits)
    expert_rows = None   # host rows per local expert: only the per-expert loops need them
    if gemm.host_rows:
        expert_rows = [sum(host[E + r * El + e] for r in range(P)) for e in range(El)]
    recv_rows = torch.empty(n_recv, RB, dtype=torch.uint8, device=dev)
    recv_meta = torch.empty(n_recv, 2, dtype=torch.int32, device=dev)
    comm.a2a(recv_rows, send_rows, out_splits, in_splits)
    comm.a2a(recv_meta, send_meta, out_splits, in_splits)

    # (3) group the received rows by local expert (sources arrive one after the other).
    perm = torch.argsort(recv_meta[:, 0], stable=True)
    a = recv_rows[:, :H].index_select(0, perm).view(_fp8())                        # [N, H] contiguous
    sa = recv_rows[:, H:H + 4 * S].index_select(0, perm).view(torch.float32)       # [N, S]
    if gemm.fmt == "rowwise":
        sa = sa.reshape(-1)
    w_rows = recv_meta[:, 1].index_select(0, perm).view(torch.float32)             # router weights
    offs = torch.cumsum(recv_counts.view(P, El).sum(0), 0).to(torch.int32)          # group ends

    # (4) Linear-1, SwiGLU, router weight, requantisation.
    h = gemm.mm(a, sa, L.w1, L.s1, offs, expert_rows).float()                       # [N, 2I]
    act = F.silu(h[:, :I]).mul_(h[:, I:]).mul_(w_rows.unsqueeze(1))
    q, sq = quant_act(act, gemm.fmt)
    del h, act

    # (5) Linear-2.
    y = gemm.mm(q, sq, L.w2, L.s2, offs, expert_rows)                               # [N, H] bf16

    # (6) back to receive order, then to the token owners.
    y_recv = torch.empty_like(y).index_copy_(0, perm, y)
    y_back = torch.empty(T * k, H, dtype=torch.bfloat16, device=dev)
    comm.a2a(y_back, y_recv, in_splits, out_splits)

    # (7) back to (token, k) order; the sum over k accumulates in fp32 inside torch.
    y_tok = torch.empty_like(y_back).index_copy_(0, order, y_back)
    out = y_tok.view(T, k, H).sum(dim=1)
    return out, n_recv


def reference_layer(x, topk_ids, topk_w, w1, s1, w2, s2, fmt):
    """fp32 result of the same quantised math for one rank's tokens, expert by expert over
    ALL experts' weights (w1 [E, 2I, H] ... gathered from every rank): h = x W1[e]^T
    (rounded to bf16, as the FP8 GEMM writes it), a = silu(gate) * up * weight,
    fake-quantised to FP8 like the pipeline, y = a W2[e]^T, out[t] = sum over k of y.
    x: dequantised activations [T, H] fp32. Without the bf16 rounding of h, the FP8
    requantisation alone puts ~1% between two correct results (rounding-boundary flips)."""
    T, k = topk_ids.shape
    I = w2.shape[2]
    out = torch.zeros(T, x.shape[1], dtype=torch.float32, device=x.device)
    ids, ws = topk_ids.tolist(), topk_w.tolist()
    uses = {}
    for t in range(T):
        for j in range(k):
            if ids[t][j] >= 0:  # a negative id: an expert left out (another rank's)
                uses.setdefault(ids[t][j], []).append((t, ws[t][j]))
    for e, tw in sorted(uses.items()):
        ts = torch.tensor([t for t, _ in tw], dtype=torch.int64, device=x.device)
        wt = torch.tensor([w for _, w in tw], dtype=torch.float32, device=x.device)
        h = (x.index_select(0, ts) @ dequant_weight(w1[e], s1[e], fmt).t()).to(torch.bfloat16).float()
        a = F.silu(h[:, :I]) * h[:, I:] * wt.unsqueeze(1)
        y = fake_quant_act(a, fmt) @ dequant_weight(w2[e], s2[e], fmt).t()
        out.index_add_(0, ts, y)
    return out


def make_layer(model, doc, rank, world, fmt, device, weights=None, seed=2026):
    """Inputs of one rank. x: random bf16, quantised with 1x128 block scales (the layer's
    input format), re-quantised per row for a rowwise GEMM path (outside timing)."""
    name, H, I, E, k = model
    T = doc["tokens_per_rank"]
    g = torch.Generator(device=device).manual_seed(seed + 7919 * rank + T)
    x = torch.randn(T, H, generator=g, device=device).to(torch.bfloat16).float()
    xq, xs = quant_act(x, "blockwise")
    if fmt == "rowwise":
        xq, xs = quant_act(dequant_act(xq, xs, "blockwise"), "rowwise")
    ids, w = routing_tensors(doc, rank)
    if weights is None:
        weights = make_expert_weights(model, world, rank, fmt, device, seed)
    w1, s1, w2, s2 = weights
    return Layer(H, I, E, xq, xs, ids.to(device), w.to(device), w1, s1, w2, s2)


def make_expert_weights(model, world, rank, fmt, device, seed=2026):
    """This rank's experts: W1 [El, 2I, H] (gate rows, then up rows), W2 [El, H, I]."""
    name, H, I, E, k = model
    El = E // world
    w1, s1 = make_weights(El, 2 * I, H, fmt, device, seed + 104729 * rank + 1)
    w2, s2 = make_weights(El, H, I, fmt, device, seed + 104729 * rank + 2)
    return w1, s1, w2, s2


def check_rank(comm, gemm, L):
    """(rel err, max abs err, finite) of this rank's layer output vs the fp32 reference."""
    out, _ = moe_layer(comm, gemm, L)
    w1 = torch.cat(comm.all_gather(L.w1))
    s1 = torch.cat(comm.all_gather(L.s1))
    w2 = torch.cat(comm.all_gather(L.w2))
    s2 = torch.cat(comm.all_gather(L.s2))
    ref = reference_layer(dequant_act(L.xq, L.xs, gemm.fmt), L.topk_ids, L.topk_w, w1, s1, w2, s2, gemm.fmt)
    finite = bool(torch.isfinite(out).all())
    return rel_l2(out, ref), (out.float() - ref).abs().max().item(), finite


# ----------------------------------------------------------------------------------------
# CPU self-test: threads as ranks, emulated GEMMs, the same moe_layer
# ----------------------------------------------------------------------------------------
def run_threads(world, fn):
    """fn(comm) on `world` threads; returns their results, re-raising the first error."""
    tw = ThreadWorld(world)
    results, errors = [None] * world, []

    def body(r):
        try:
            results[r] = fn(ThreadComm(tw, r))
        except BaseException as e:  # noqa: BLE001 - reported below, other threads released
            errors.append((r, e))
            tw.barrier.abort()

    threads = [threading.Thread(target=body, args=(r,)) for r in range(world)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    real = [(r, e) for r, e in errors if not isinstance(e, threading.BrokenBarrierError)]
    if real or errors:
        r, e = (real or errors)[0]
        raise RuntimeError(f"rank {r}: {type(e).__name__}: {e}") from e
    return results


def self_test_cpu():
    ok = True

    def report(name, passed, detail=""):
        nonlocal ok
        ok &= passed
        print(f"  {'PASS' if passed else 'FAIL'}  {name}" + (f": {detail}" if detail else ""))

    print("bench_moe_torch --self-test-cpu (torch %s, CPU)" % torch.__version__)
    torch.manual_seed(0)

    # Arguments and configurations.
    a = parse_args([])
    cfgs = enumerate_configs(a)
    report("default configurations", validate_args(a) is None and len(cfgs) == 84
           and len({(c["model"], c["weights"], c["routing"], c["tokens_per_rank"]) for c in cfgs}) == 84,
           f"{len(cfgs)} configurations")
    a = parse_args(["--models", "DSv4-Pro,Hy3", "--tokens", "512", "--routings", "skewed", "--weights", "w8a8"])
    report("restricted configurations", len(enumerate_configs(a)) == 2 and validate_args(a) is None)
    report("bad arguments refused", validate_args(parse_args(["--iters", "10"])) is not None
           and validate_args(parse_args(["--models", "nope"])) is not None
           and validate_args(parse_args(["--warmup", "1"])) is not None)
    big = [(m[0], local_weight_bytes(m, 2) / 2**30) for m in MODELS]
    report("local weights fit (P=2)", all(b < 60 for _, b in big),
           ", ".join(f"{n} {b:.1f} GiB" for n, b in big))

    # Routing JSON: fake generator -> JSON text -> parse -> validate -> tensors.
    tiny = ("tiny", 256, 128, 16, 2)
    doc = json.loads(json.dumps(fake_routing(tiny, 16, 2, "skewed", seed=3, zipf_s=1.5)))
    try:
        validate_routing(doc, tiny, 16, 2, "skewed")
        report("routing JSON validates", True)
    except ValueError as e:
        report("routing JSON validates", False, str(e))
    bad = json.loads(json.dumps(doc))
    bad["per_rank"][1]["experts"][1] = bad["per_rank"][1]["experts"][0]   # a repeated expert
    try:
        validate_routing(bad, tiny, 16, 2, "skewed")
        report("bad routing refused", False)
    except ValueError as e:
        report("bad routing refused", True, str(e))
    rows = rows_received(doc)
    report("rows received add up", sum(rows) == 2 * 16 * 2, f"{rows}")

    # Quantisation round trips.
    x = torch.randn(8, 256)
    for fmt in ("rowwise", "blockwise"):
        report(f"{fmt} fp8 round trip", rel_l2(fake_quant_act(x, fmt), x) < 0.05)

    # The pipeline (threads as ranks, emulated GEMMs) against the fp32 reference, with
    # routing that leaves some experts without rows, for both scale formats and P = 1, 2, 4.
    for world, fmt, seed in ((2, "rowwise", 3), (2, "blockwise", 3), (1, "blockwise", 5), (4, "rowwise", 7)):
        doc = json.loads(json.dumps(fake_routing(tiny, 16, world, "skewed", seed=seed, zipf_s=1.5)))
        validate_routing(doc, tiny, 16, world, "skewed")
        used = set()
        for pr in doc["per_rank"]:
            used |= set(pr["experts"])
        empty = tiny[3] - len(used)

        def one_rank(comm):
            L = make_layer(tiny, doc, comm.rank, world, fmt, torch.device("cpu"))
            err, max_abs, finite = check_rank(comm, Emulated(fmt), L)
            return err, max_abs, finite, moe_layer(comm, Emulated(fmt), L)[1]

        try:
            res = run_threads(world, one_rank)
        except RuntimeError as e:
            report(f"pipeline P={world} {fmt}", False, str(e))
            continue
        worst = max(r[0] for r in res)
        recv = [r[3] for r in res]
        report(f"pipeline P={world} {fmt} vs fp32 reference",
               all(r[2] for r in res) and worst < 1e-2 and recv == rows_received(doc),
               f"rel err {worst:.2e} (limit 1e-2 here), rows {recv}, {empty} expert(s) without rows")
    print("self-test:", "PASS" if ok else "FAIL")
    return 0 if ok else 1


# ----------------------------------------------------------------------------------------
# GPU benchmark
# ----------------------------------------------------------------------------------------
def activation_bytes(H, I, T, k, n_recv, S):
    """Rough peak of one iteration's temporaries (bytes), for the skip decision."""
    rb = row_bytes(H, S) + 8
    return (T * k * rb + 2 * n_recv * rb                 # send / recv rows + meta, sorted copies
            + n_recv * 2 * I * (2 + 4)                   # Linear-1 out (bf16) and its fp32 copy
            + n_recv * I * (4 * 2 + 1)                   # SwiGLU temporaries, FP8 rows
            + n_recv * H * 2 * 2 + T * k * H * 2 * 2     # Linear-2 out, y_recv, y_back, y_tok
            + T * H * 2)


def log(msg):
    print(msg, file=sys.stderr, flush=True)


class Bench:
    """One rank of the GPU benchmark: the process group, the chosen GEMM path, timing."""

    def __init__(self, args, dist, dev):
        self.args, self.dist, self.dev = args, dist, dev
        self.comm = NcclComm(dist)
        self.rank, self.world = self.comm.rank, self.comm.world
        self.props = torch.cuda.get_device_properties(dev)
        self.gemm, self.probes = None, {}
        self.cycles_per_us = None
        self.align = torch.zeros(1, dtype=torch.float32, device=dev)
        self.routing_cache = {}
        self.weights, self.weights_model = None, None

    # -- agreement between ranks --------------------------------------------------------
    def say(self, msg):
        if self.rank == 0:
            log(msg)

    def agree(self, ok):
        return timing.agree(torch, self.dist, self.dev, ok)

    def from_rank0(self, obj):
        box = [obj]
        self.dist.broadcast_object_list(box, src=0)
        return box[0]

    def gather_floats(self, vals):
        return timing.gather_floats(torch, self.dist, self.dev, vals)

    # -- setup ---------------------------------------------------------------------------
    def pick_gemm(self):
        """The first GEMM path that passes the numeric probe on every rank (or None)."""
        keys = GEMM_PATHS if self.args.gemm == "auto" else (self.args.gemm,)
        for key in keys:
            cand = make_backend(key, self.args.fast_accum)
            ok, msg = probe_backend(cand, self.dev)
            self.probes[key] = {"ok": ok, "detail": msg}
            if not ok:
                log(f"bench_moe_torch: rank {self.rank}: GEMM path {key} rejected: {msg}")
            if self.agree(ok):
                self.gemm = cand
                return cand
        return None

    def calibrate_cover(self):
        """Cycles of torch.cuda._sleep per microsecond, measured per rank so every rank's
        busy-wait lasts the same time."""
        if self.args.cover_us > 0:
            self.cycles_per_us = timing.sleep_rate(torch)

    # -- timing --------------------------------------------------------------------------
    def cover(self, _i=None):
        """dist.barrier() and synchronize, GPU busy while the host enqueues the run's first
        steps, then a 4-byte all-reduce so the GPUs (not only the hosts) start together."""
        self.dist.barrier()
        torch.cuda.synchronize()
        timing.busy_wait(torch, self.cycles_per_us, self.args.cover_us)
        if self.world > 1:
            self.dist.all_reduce(self.align)

    def timed(self, run):
        return timing.time_launches(torch, lambda _i: run(), self.args.iters, warmup=self.args.warmup,
                                    before=self.cover)

    # -- routing -------------------------------------------------------------------------
    def get_routing(self, model, tokens, routing):
        """(doc, None) or (None, reason); rank 0 makes the file, every rank reads it."""
        args = self.args
        path = routing_path(args, model[0], tokens, self.world, routing)
        err = None
        if self.rank == 0:
            os.makedirs(args.routing_dir, exist_ok=True)
            if args.fake_routing:
                with open(path, "w") as f:
                    json.dump(fake_routing(model, tokens, self.world, routing), f)
            else:
                err = run_routing_cli(args.xstage, model[0], tokens, self.world, routing, path, args.routing_args)
        err = self.from_rank0(err)
        if err:
            return None, f"routing CLI failed: {err}"
        try:
            doc, ok = load_routing(path, model, tokens, self.world, routing), True
        except (OSError, ValueError, KeyError, TypeError) as e:
            doc, ok, err = None, False, f"{type(e).__name__}: {e}"
        if not self.agree(ok):
            return None, err or "routing JSON unreadable on another rank"
        return doc, None

    def cached_routing(self, model, tokens, routing):
        """w4a8 and w8a8 share a routing; only the current model's are kept."""
        key = (model[0], routing, tokens)
        if key not in self.routing_cache:
            self.routing_cache = {k: v for k, v in self.routing_cache.items() if k[0] == model[0]}
            self.routing_cache[key] = self.get_routing(model, tokens, routing)
        return self.routing_cache[key]

    # -- correctness check ---------------------------------------------------------------
    def run_check(self):
        """The check record; rel err over ranks must stay below REL_ERR_LIMIT, all finite."""
        args = self.args
        model = model_row(args.check_model)
        doc, why = self.get_routing(model, args.check_tokens, args.check_routing)
        if doc is None:
            return {"pass": False, "error": why}
        L = make_layer(model, doc, self.rank, self.world, self.gemm.fmt, self.dev)
        try:
            e, max_abs, finite = check_rank(self.comm, self.gemm, L)
        except RuntimeError as ex:   # recorded as a failed check (a hang is the other risk)
            log(f"bench_moe_torch: rank {self.rank}: check: {str(ex).splitlines()[0][:200]}")
            e, max_abs, finite = float("nan"), float("nan"), False
        del L
        torch.cuda.empty_cache()
        errs = self.gather_floats([e, max_abs, 1.0 if finite else 0.0])
        worst = max(x[0] for x in errs) if all(x[0] == x[0] for x in errs) else float("nan")
        all_finite = all(x[2] == 1.0 for x in errs)
        passed = worst < REL_ERR_LIMIT and all_finite   # NaN compares False
        fin = lambda v: v if math.isfinite(v) else None  # noqa: E731 - JSON has no NaN
        rec = {"model": args.check_model, "tokens_per_rank": args.check_tokens, "routing": args.check_routing,
               "world": self.world, "gemm_path": self.gemm.key, "rel_err": fin(worst),
               "rel_err_per_rank": [fin(x[0]) for x in errs], "max_abs_err": fin(max(x[1] for x in errs)),
               "finite": all_finite, "limit": REL_ERR_LIMIT, "pass": passed,
               "reference": "fp32 on the token owner: same FP8 inputs dequantised, Linear-1 output rounded to "
                            "bf16 and the SwiGLU output fake-quantised like the pipeline, expert by expert "
                            "over all experts' weights (gathered)"}
        self.say(f"  check {args.check_model} T={args.check_tokens} {args.check_routing}: rel L2 err {worst:.2e} "
                 f"(max abs {max(x[1] for x in errs):.2e}, finite {all_finite}) -> "
                 f"{'PASS' if passed else 'FAIL'} (< {REL_ERR_LIMIT:g})")
        return rec

    # -- one configuration ---------------------------------------------------------------
    def prepare(self, model, doc):
        """(layer, None) or (None, reason), agreed by all ranks. Weights are built once per
        model: w4a8 and w8a8 run the same FP8 weights here."""
        name, H, I, E, k = model
        ok, why, layer = True, "", None
        if self.weights_model != name:
            self.weights, self.weights_model = None, None
            torch.cuda.empty_cache()
            try:
                self.weights = make_expert_weights(model, self.world, self.rank, self.gemm.fmt, self.dev)
                self.weights_model = name
            except torch.cuda.OutOfMemoryError:
                ok, why = False, "out of memory allocating the expert weights"
        if ok:
            S = 1 if self.gemm.fmt == "rowwise" else H // BLOCK
            need = activation_bytes(H, I, doc["tokens_per_rank"], k, max(rows_received(doc)), S)
            free_b, _ = torch.cuda.mem_get_info()
            if need > 0.85 * free_b:
                ok, why = False, f"activations need ~{need / 2**30:.1f} GiB, {free_b / 2**30:.1f} GiB free"
            else:
                try:
                    layer = make_layer(model, doc, self.rank, self.world, self.gemm.fmt, self.dev, self.weights)
                except torch.cuda.OutOfMemoryError:
                    ok, why = False, "out of memory allocating the inputs"
        if not self.agree(ok):
            return None, why or "another rank could not allocate"
        return layer, None

    def measure(self, layer):
        """Timings of the layer, reduced over ranks."""
        last = {}

        def run():
            last["out"], last["rows"] = moe_layer(self.comm, self.gemm, layer)

        us = self.timed(run)
        nonfinite, rows = verify.nonfinite(torch, last["out"]), float(last["rows"])
        last.clear()  # the output's memory goes back before the checked run poisons it
        mine = [statistics.median(us), timing.quantile(us, 0.1), timing.quantile(us, 0.9), rows, float(nonfinite)]
        per_rank = self.gather_floats(mine)
        col = lambda j: [r[j] for r in per_rank]  # noqa: E731
        return {"median_us": max(col(0)), "p10_us": max(col(1)), "p90_us": max(col(2)),
                "rank_median_us": col(0), "rank_p10_us": col(1), "rank_p90_us": col(2),
                "rows_received": [int(v) for v in col(3)], "nonfinite": int(sum(col(4))),
                "iters": self.args.iters, "warmup": self.args.warmup}

    def check_config(self, L, cfg):
        """The configuration's correctness record: the layer once more on poisoned outputs,
        --check-rows seeded token rows of every rank against the fp32 math of reference_layer,
        each expert's contribution computed on its owner rank and summed over the ranks."""
        desc = ("fp32 on seeded token rows: dequantised inputs, Linear-1 output rounded to bf16, SwiGLU output "
                "fake-quantised, each expert on its owner rank, summed over ranks")
        T, H, fmt = L.topk_ids.shape[0], L.hidden, self.gemm.fmt
        verify.poison_free_blocks(torch, (T, H), torch.bfloat16, self.dev)
        out, _ = moe_layer(self.comm, self.gemm, L)
        torch.cuda.synchronize()
        pick = torch.tensor(verify.sample_rows(T, self.args.check_rows, seed=T * 31 + H), device=self.dev)
        xq = L.xq.view(torch.uint8).index_select(0, pick).view(L.xq.dtype)  # fp8 rows travel as bytes
        x_all = torch.cat(self.comm.all_gather(dequant_act(xq, L.xs.index_select(0, pick), fmt).contiguous()))
        ids_all = torch.cat(self.comm.all_gather(L.topk_ids.index_select(0, pick).contiguous()))
        w_all = torch.cat(self.comm.all_gather(L.topk_w.index_select(0, pick).contiguous()))
        El = L.experts // self.world
        local = ids_all - self.rank * El
        local = torch.where((local >= 0) & (local < El), local, torch.full_like(local, -1))
        try:
            part = reference_layer(x_all, local, w_all, L.w1, L.s1, L.w2, L.s2, fmt)
        except RuntimeError as e:  # out of memory: NaN, a failed check (the ranks stay in step)
            log(f"bench_moe_torch: rank {self.rank}: check {cfg}: {str(e).splitlines()[0][:200]}")
            part = torch.full((x_all.shape[0], H), float("nan"), device=self.dev)
        ref = torch.stack(self.comm.all_gather(part.contiguous())).sum(dim=0)
        n = pick.numel()
        rec = verify.check(torch, out.index_select(0, pick), ref[self.rank * n:(self.rank + 1) * n], out,
                           ROW_REL_TOL, desc)
        return verify.merge_floats(self.gather_floats(verify.as_floats(rec)), ROW_REL_TOL, desc)

    def run_config(self, cfg, t_start):
        """The result record of one configuration (measured or skipped with a reason)."""
        args = self.args
        model = model_row(cfg["model"])
        name, H, I, E, k = model
        rec = dict(cfg, hidden=H, intermediate=I, experts=E, top_k=k, world=self.world,
                   gemm_path=self.gemm.key, skipped=False,
                   weights_as=("fp8 e4m3 (pre-converted; no 4-bit MMA in PyTorch)" if cfg["weights"] == "w4a8"
                               else "fp8 e4m3"))

        def skipped(reason):
            return dict(rec, skipped=True, reason=reason)

        over = args.time_budget_s > 0 and time.monotonic() - t_start > args.time_budget_s
        if self.from_rank0(over):
            return skipped(f"time budget of {args.time_budget_s:.0f} s spent")
        wbytes = local_weight_bytes(model, self.world)
        if wbytes > args.max_weight_gib * 2**30:
            return skipped(f"local expert weights {wbytes / 2**30:.1f} GiB per rank exceed {args.max_weight_gib:g} GiB")
        if E % self.world:
            return skipped(f"{E} experts not divisible by {self.world} ranks")
        doc, why = self.cached_routing(model, cfg["tokens_per_rank"], cfg["routing"])
        if doc is None:
            return skipped(why)
        layer, why = self.prepare(model, doc)
        if layer is None:
            return skipped(why)
        rec.update(self.measure(layer))
        if not args.no_check:
            rec["correctness"] = self.check_config(layer, cfg)
        rec["routing_info"] = routing_summary(doc)
        return rec

    # -- output --------------------------------------------------------------------------
    def document(self, checks, results, sweep_s):
        args = self.args
        return {
            "schema": SCHEMA,
            "tool": "torch-nccl-a2a-grouped-fp8",
            "torch": torch.__version__,
            "cuda": torch.version.cuda,
            "nccl": timing.nccl_version(torch),
            "device": self.props.name,
            "sm_count": self.props.multi_processor_count,
            "world": self.world,
            **timing.stamp(),
            "routing_source": ("FAKE python test aid (do not report)" if args.fake_routing
                               else f"{args.xstage} moe-routing {args.routing_args}".strip()),
            "gemm_path": self.gemm.key,
            "gemm_desc": self.gemm.desc,
            "gemm_probes": self.probes,
            "config": {"warmup": args.warmup, "iters": args.iters, "fast_accum": args.fast_accum,
                       "cover_us": args.cover_us if self.cycles_per_us else 0.0,
                       "nccl_nvls_enable": os.environ.get("NCCL_NVLS_ENABLE"),
                       "reduce": "max over ranks of per-rank median (p10, p90: max over ranks of each)",
                       "timed": "count exchange, dispatch, sort, Linear-1 + SwiGLU + requant, Linear-2, "
                                "combine, weighted sum (steps 1-7)",
                       "sweep_seconds": round(sweep_s, 1)},
            "notes": NOTES,
            "checks": checks,
            "results": results,
        }


def print_table(results, path):
    print(f"# PyTorch MoE baseline ({path}); us = max over ranks of per-rank medians")
    print(f"{'model':>18} {'weights':>7} {'routing':>8} {'tokens':>6} {'median_us':>10} {'p10_us':>9} "
          f"{'p90_us':>9} {'max_rows':>8}")
    for r in results:
        head = f"{r['model']:>18} {r['weights']:>7} {r['routing']:>8} {r['tokens_per_rank']:>6}"
        if r["skipped"]:
            print(f"{head}   skipped: {r['reason']}")
        else:
            print(f"{head} {r['median_us']:>10.1f} {r['p10_us']:>9.1f} {r['p90_us']:>9.1f} "
                  f"{max(r['rows_received']):>8}")
    sys.stdout.flush()


def progress(i, n, r):
    head = f"[{i}/{n}] {r['model']} {r['weights']} {r['routing']} T={r['tokens_per_rank']}"
    if r["skipped"]:
        return f"{head}: skipped: {r['reason']}"
    return (f"{head}: {r['median_us']:.1f} us (p10 {r['p10_us']:.1f}, p90 {r['p90_us']:.1f}), "
            f"rows/rank {r['rows_received']}" + (f", {r['nonfinite']} NON-FINITE" if r["nonfinite"] else ""))


def init_distributed():
    """(dist, device) or None; a plain `python3` run is a world of one."""
    return timing.init_nccl(torch, 29533)


def main(argv=None):
    args = parse_args(argv)
    err = validate_args(args)
    if err:
        log(f"bench_moe_torch: {err}")
        return 2
    if args.list:
        for i, c in enumerate(enumerate_configs(args)):
            print(f"{i + 1:3d} {c['model']:>18} {c['weights']} {c['routing']:>8} {c['tokens_per_rank']:>6}")
        return 0
    if torch is None:
        log("bench_moe_torch: PyTorch not available")
        return 3
    if args.self_test_cpu:
        return self_test_cpu()

    # Never NVLink multicast (NVLS): set before NCCL initialises.
    if os.environ.get("NCCL_NVLS_ENABLE", "0") != "0":
        log(f"bench_moe_torch: overriding NCCL_NVLS_ENABLE={os.environ['NCCL_NVLS_ENABLE']} with 0")
    os.environ["NCCL_NVLS_ENABLE"] = "0"
    os.environ.setdefault("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1")
    if not args.fake_routing and not (os.path.isfile(args.xstage) and os.access(args.xstage, os.X_OK)):
        log(f"bench_moe_torch: routing CLI {args.xstage!r} not found or not executable (build it, or pass --xstage)")
        return 2
    got = init_distributed()
    if got is None:
        log("bench_moe_torch: needs CUDA and torch.distributed with NCCL")
        return 3
    dist, dev = got
    torch.backends.cuda.matmul.allow_tf32 = False  # the fp32 reference stays fp32
    b = Bench(args, dist, dev)
    if args.fake_routing:
        b.say("bench_moe_torch: WARNING --fake-routing: routing made by a Python test aid, NOT the C++ "
              "generator; do not report these numbers")
    if b.pick_gemm() is None:
        b.say("bench_moe_torch: no FP8 GEMM path passed its probe here")
        dist.destroy_process_group()
        return 3
    b.calibrate_cover()
    b.say(f"# PyTorch {torch.__version__} (CUDA {torch.version.cuda}, NCCL {timing.nccl_version(torch)}) MoE layer "
          f"baseline, world {b.world}, {b.props.name}; GEMM path {b.gemm.key}: {b.gemm.desc}; median of "
          f"{args.iters} runs after {args.warmup} warm-up, cover {args.cover_us if b.cycles_per_us else 0:.0f} us, "
          f"NCCL_NVLS_ENABLE=0")

    checks = [] if args.no_check else [b.run_check()]
    failed = not all(c["pass"] for c in checks)
    if failed:
        b.say("bench_moe_torch: correctness check failed; no benchmark")

    configs = [] if failed else enumerate_configs(args)
    results = []
    t_start = time.monotonic()
    for i, cfg in enumerate(configs):
        rec = b.run_config(cfg, t_start)
        results.append(rec)
        b.say(progress(i + 1, len(configs), rec))
    b.weights = None
    nonfinite = any(not r["skipped"] and r["nonfinite"] for r in results)
    cells_failed = [r for r in results if not r["skipped"] and not r.get("correctness", {"passed": True})["passed"]]
    if cells_failed:
        b.say(f"bench_moe_torch: {len(cells_failed)} configurations FAILED their correctness check")

    if b.rank == 0:
        print_table(results, b.gemm.key)
        if args.json:
            with open(args.json, "w") as f:
                json.dump(b.document(checks, results, time.monotonic() - t_start), f, indent=2)
                f.write("\n")
            log(f"bench_moe_torch: wrote {args.json} ({sum(not r['skipped'] for r in results)} measured, "
                f"{sum(r['skipped'] for r in results)} skipped)")
    dist.barrier()
    dist.destroy_process_group()
    return 1 if failed or nonfinite or cells_failed else 0


if __name__ == "__main__":
    sys.exit(main())
