"""``python -m xstage.bench dit``: real diffusers DiT transformers, one denoising step, stock vs xstage.

    python -m xstage.bench dit --json dit.json [--models wan-480p,flux-1024] [--variants auto]
                               [--iters 20] [--warmup 2] [--cell-budget-s 0] [--plot dit.png]
    python -m xstage.bench dit --plan          # the cells: tokens, attention calls, FLOPs (no GPU)

Each cell builds the real diffusers model class (WanTransformer3DModel, FluxTransformer2DModel,
HunyuanVideoTransformer3DModel) from its published configuration with random weights, directly
on the GPU (built in fp32 as diffusers' constructors do, then every parameter cast to bf16 except
the class's ``_keep_in_fp32_modules``, which is what ``from_pretrained(torch_dtype=bf16)`` does),
or from local weights with ``--weights DIR`` (``from_pretrained``, no network). Inputs are what the
pipeline hands the transformer at that resolution (latents, 512/256 text tokens, timestep,
guidance), random, seeded. Then per variant:

  native   diffusers' default backend ("native": torch SDPA, torch's own kernel choice)
  cudnn    diffusers' "_native_cudnn" (torch SDPA forced to cuDNN)
  flash3   diffusers' "_flash_3" (only when flash_attn_interface is importable)
  xstage   the "xstage" backend of xstage.diffusers_backend, strict (no fallback to native)
  xdit     xDiT: xfuser's subclasses of the same model classes with the same weights (dit_xdit.py;
           only when xfuser is importable; no attention share)

``model.set_attention_backend(name)``, ``--warmup`` untimed forwards, ``--iters`` forwards each
between CUDA events (``torch.no_grad``, bf16; median, min, p10, p90 reported). ``--cell-budget-s``
lowers the iterations of a cell whose step would not fit (never below 3; the JSON records the
count used and that it was lowered); fewer than 20 iterations is flagged in the JSON either way.

Correctness: each variant's output against the stock (native) output of the same weights and
inputs, relative Frobenius error in fp32. A variant passes when that error is at most
max(--tol, 2 x the error of the cudnn variant) — the second term is the spread two production
bf16 backends already show on this model; a failing variant marks the cell failed (exit 1).

Attention share: in the last timed forward of a variant every call of the backend's function
(the function diffusers' dispatcher calls) is bracketed by CUDA events on the current stream
(two event records per call, microseconds against a step of 0.1-10 s);
the sum of those intervals is the step's attention time (it includes the backend's own layout
copies; host gaps inside a call would count too, but the host runs ahead of these kernels).
share = attention time / that forward's step time. Nothing is removed from the model to get it.

Progress goes to stderr, the table to stdout, the JSON (schema xstage.bench.dit.v1) is rewritten
after every cell so a run cut short keeps what it measured. Exit status: 0 ok, 1 a cell failed
its check or errored, 2 bad input, 3 no torch / diffusers / CUDA / extension.
"""
from __future__ import annotations

import atexit

import argparse
import gc
import json
import math
import os
import statistics
import sys
import time

from ._bench_util import quantile, stamp

MIN_ITERS = 20

# Published transformer configurations (the diffusers repositories' transformer/config.json).
CONFIGS = {
    "wan2.1-t2v-14b": ("WanTransformer3DModel", dict(
        patch_size=[1, 2, 2], num_attention_heads=40, attention_head_dim=128, in_channels=16, out_channels=16,
        text_dim=4096, freq_dim=256, ffn_dim=13824, num_layers=40, cross_attn_norm=True,
        qk_norm="rms_norm_across_heads", eps=1e-6, image_dim=None, added_kv_proj_dim=None, rope_max_seq_len=1024)),
    "flux.1-dev": ("FluxTransformer2DModel", dict(
        patch_size=1, in_channels=64, num_layers=19, num_single_layers=38, attention_head_dim=128,
        num_attention_heads=24, joint_attention_dim=4096, pooled_projection_dim=768, guidance_embeds=True,
        axes_dims_rope=[16, 56, 56])),
    "hunyuanvideo": ("HunyuanVideoTransformer3DModel", dict(
        in_channels=16, out_channels=16, num_attention_heads=24, attention_head_dim=128, num_layers=20,
        num_single_layers=40, num_refiner_layers=2, mlp_ratio=4.0, patch_size=2, patch_size_t=1,
        qk_norm="rms_norm", guidance_embeds=True, text_embed_dim=4096, pooled_projection_dim=768,
        rope_theta=256.0, rope_axes_dim=[16, 56, 56])),
}

# Tiny configurations of the same classes (tests; head dims the kernel takes).
TINY = {
    "wan": ("WanTransformer3DModel", dict(
        patch_size=[1, 2, 2], num_attention_heads=3, attention_head_dim=64, in_channels=4, out_channels=4,
        text_dim=32, freq_dim=32, ffn_dim=96, num_layers=2, cross_attn_norm=True, qk_norm="rms_norm_across_heads",
        eps=1e-6, rope_max_seq_len=64)),
    "flux": ("FluxTransformer2DModel", dict(
        patch_size=1, in_channels=16, num_layers=1, num_single_layers=2, attention_head_dim=64,
        num_attention_heads=3, joint_attention_dim=32, pooled_projection_dim=16, guidance_embeds=True,
        axes_dims_rope=[16, 24, 24])),
    "hunyuan": ("HunyuanVideoTransformer3DModel", dict(
        in_channels=4, out_channels=4, num_attention_heads=2, attention_head_dim=64, num_layers=1,
        num_single_layers=1, num_refiner_layers=1, mlp_ratio=2.0, patch_size=2, patch_size_t=1,
        qk_norm="rms_norm", guidance_embeds=True, text_embed_dim=32, pooled_projection_dim=16,
        rope_axes_dim=[16, 24, 24])),
}

CONFIGS.update({f"tiny-{fam}": TINY[fam] for fam in TINY})

FAMILY = {"WanTransformer3DModel": "wan", "FluxTransformer2DModel": "flux", "HunyuanVideoTransformer3DModel": "hunyuan"}

# Bench cells: model, frames, height, width (pixels), text tokens.
CELLS = {
    "wan-480p": dict(model="wan2.1-t2v-14b", frames=81, height=480, width=832, text=512),
    "wan-720p": dict(model="wan2.1-t2v-14b", frames=81, height=720, width=1280, text=512),
    "flux-1024": dict(model="flux.1-dev", frames=1, height=1024, width=1024, text=512),
    "flux-2048": dict(model="flux.1-dev", frames=1, height=2048, width=2048, text=512),
    "hunyuan-720p": dict(model="hunyuanvideo", frames=129, height=720, width=1280, text=256),
    "hunyuan-720p-61f": dict(model="hunyuanvideo", frames=61, height=720, width=1280, text=256),
    # the tiny configurations at small sizes: a smoke test of the bench itself (GPU tests)
    "tiny-wan": dict(model="tiny-wan", frames=9, height=96, width=160, text=7),
    "tiny-flux": dict(model="tiny-flux", frames=1, height=256, width=384, text=5),
    "tiny-hunyuan": dict(model="tiny-hunyuan", frames=9, height=128, width=128, text=6),
}
DEFAULT_CELLS = ["wan-480p", "wan-720p", "flux-1024", "flux-2048", "hunyuan-720p"]
# variant -> diffusers attention backend ("xdit" is xfuser's own model classes instead: dit_xdit.py)
BACKENDS = {"native": "native", "cudnn": "_native_cudnn", "flash3": "_flash_3", "xstage": "xstage",
            "xstage-lkv": "xstage", "xdit": None}   # xstage-lkv: --ulysses only (the long-key Ulysses tile)


# ---- models and inputs (usable without a GPU: the tests build tiny ones on the CPU) ----------
def model_class(class_name):
    import diffusers

    return getattr(diffusers, class_name)


def keep_fp32(model, name):
    keep = getattr(model, "_keep_in_fp32_modules", None) or []
    return any(m in name.split(".") for m in keep)


def build_model(class_name, config, device, dtype):
    """The model with random weights on `device`: constructed there (fp32, diffusers' own init),
    then every parameter cast to `dtype` except the class's _keep_in_fp32_modules."""
    import torch

    cls = model_class(class_name)
    with torch.device(device):
        model = cls(**config)
    for name, p in model.named_parameters():
        if p.is_floating_point() and not keep_fp32(model, name):
            p.data = p.data.to(dtype)
    return model.eval().requires_grad_(False)


def load_model(path, device, dtype):
    """Real weights from a local diffusers directory (a model folder, or a pipeline folder with a
    transformer/ subfolder): ``from_pretrained(..., torch_dtype=dtype)``, no network."""
    import diffusers

    sub = "transformer" if os.path.isfile(os.path.join(path, "transformer", "config.json")) else None
    cfg_path = os.path.join(path, sub or "", "config.json")
    with open(cfg_path) as f:
        class_name = json.load(f)["_class_name"]
    cls = getattr(diffusers, class_name)
    model = cls.from_pretrained(path, subfolder=sub, torch_dtype=dtype, local_files_only=True)
    return model.to(device).eval().requires_grad_(False)


def latent_shape(family, config, frames, height, width):
    """The transformer's input latent shape for a pixel resolution (VAE: 4x time, 8x space for
    the video models; Flux: 8x space, then 2x2 patches packed into channels)."""
    if family == "flux":
        return (height // 16) * (width // 16), config["in_channels"]
    t = (frames - 1) // 4 + 1 if frames > 1 else 1
    return config["in_channels"], t, height // 8, width // 8


def tokens(family, config, frames, height, width):
    """Image/video tokens the transformer attends over (text tokens not counted)."""
    shp = latent_shape(family, config, frames, height, width)
    if family == "flux":
        return shp[0]
    if family == "wan":
        pt, ph, pw = config["patch_size"]
    else:
        pt, ph, pw = config["patch_size_t"], config["patch_size"], config["patch_size"]
    return (shp[1] // pt) * (shp[2] // ph) * (shp[3] // pw)


def make_inputs(family, config, frames, height, width, text, device, dtype, seed=0, batch=1, text_valid=None):
    """The transformer's forward kwargs as the pipeline builds them (random latents and text
    states; return_dict=False as the pipelines call it). text_valid: HunyuanVideo's valid text
    tokens per batch row (default all)."""
    import torch

    g = torch.Generator(device="cpu").manual_seed(seed)

    def rnd(*shape):
        return torch.randn(*shape, generator=g).to(device=device, dtype=dtype)

    shp = latent_shape(family, config, frames, height, width)
    if family == "wan":
        return dict(hidden_states=rnd(batch, *shp), timestep=torch.full((batch,), 999, device=device),
                    encoder_hidden_states=rnd(batch, text, config["text_dim"]), return_dict=False)
    if family == "flux":
        h, w = height // 16, width // 16
        ids = torch.zeros(h, w, 3)
        ids[..., 1] = torch.arange(h)[:, None]
        ids[..., 2] = torch.arange(w)[None, :]
        return dict(hidden_states=rnd(batch, *shp), encoder_hidden_states=rnd(batch, text, config["joint_attention_dim"]),
                    pooled_projections=rnd(batch, config["pooled_projection_dim"]),
                    timestep=torch.full((batch,), 1.0, device=device, dtype=dtype),
                    img_ids=ids.reshape(-1, 3).to(device), txt_ids=torch.zeros(text, 3, device=device),
                    guidance=torch.full((batch,), 3.5, device=device, dtype=dtype), return_dict=False)
    if family == "hunyuan":
        mask = torch.ones(batch, text, dtype=torch.int64)
        if text_valid is not None:
            for b, n in enumerate(text_valid):
                mask[b, n:] = 0
        return dict(hidden_states=rnd(batch, *shp), timestep=torch.full((batch,), 999, device=device),
                    encoder_hidden_states=rnd(batch, text, config["text_embed_dim"]), encoder_attention_mask=mask.to(device),
                    pooled_projections=rnd(batch, config["pooled_projection_dim"]),
                    guidance=torch.full((batch,), 6000.0, device=device, dtype=dtype), return_dict=False)
    raise ValueError(f"unknown model family {family}")


def attention_plan(family, config, n_img, text):
    """[(calls, Sq, Skv, heads, head_dim)]: the calls one forward at batch 1 makes through
    diffusers' attention dispatcher (what a backend serves); 4 * H * Sq * Skv * D FLOPs each."""
    H, D = config["num_attention_heads"], config["attention_head_dim"]
    if family == "wan":
        L = config["num_layers"]
        return [(L, n_img, n_img, H, D), (L, n_img, text, H, D)]
    if family == "flux":
        return [(config["num_layers"] + config["num_single_layers"], n_img + text, n_img + text, H, D)]
    if family == "hunyuan":   # (its text-token refiner calls torch SDPA itself, not the dispatcher)
        return [(config["num_layers"] + config["num_single_layers"], n_img + text, n_img + text, H, D)]
    raise ValueError(family)


def plan_flops(plan):
    return sum(4.0 * c * sq * skv * h * d for c, sq, skv, h, d in plan)


# ---- timing ------------------------------------------------------------------------------
class _CallTimer:
    """Brackets every call of one registered diffusers backend function with CUDA events."""

    def __init__(self, torch, backend):
        from diffusers.models import attention_dispatch as ad

        self.torch, self.ad = torch, ad
        self.member = ad.AttentionBackendName(backend)
        self.events, self.shapes = [], []

    def __enter__(self):
        reg = self.ad._AttentionBackendRegistry
        self.orig = reg._backends[self.member]
        torch, orig = self.torch, self.orig

        def timed(**kw):
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            out = orig(**kw)
            e.record()
            q, k = kw["query"], kw["key"]
            self.events.append((s, e))
            self.shapes.append((q.shape[0], q.shape[1], k.shape[1], q.shape[2], q.shape[3]))
            return out
        reg._backends[self.member] = timed
        return self

    def __exit__(self, *exc):
        self.ad._AttentionBackendRegistry._backends[self.member] = self.orig

    def total_ms(self):
        self.torch.cuda.synchronize()
        return sum(s.elapsed_time(e) for s, e in self.events)


def rel_err(out, ref) -> float:
    """Relative Frobenius error of an fp32 output against the reference (the bench's check)."""
    return float((out - ref).norm() / ref.norm().clamp_min(1e-30))


def _ms_stats(ms):
    return {"median_ms": statistics.median(ms), "min_ms": min(ms), "max_ms": max(ms),
            "p10_ms": quantile(ms, 0.1), "p90_ms": quantile(ms, 0.9)}


def _log(msg):
    print(f"[dit] {msg}", file=sys.stderr, flush=True)


def run_variant(torch, model, inputs, backend, args, ref):
    """One variant of one cell: returns (record, output fp32). backend: the diffusers attention
    backend to set on `model` (its calls are timed for the attention share), or None for a model
    that runs its own attention (xdit: no attention share)."""
    import xstage.diffusers_backend as xsd

    rec = {"backend": backend or "xfuser"}
    if backend is not None:
        model.set_attention_backend(backend)
    xsd.reset_fallbacks()

    def step():
        return model(**inputs)[0]

    with torch.no_grad():
        t0 = time.perf_counter()
        out = step()
        torch.cuda.synchronize()
        first_s = time.perf_counter() - t0
        for _ in range(max(0, args.warmup - 1)):
            step()
        torch.cuda.synchronize()
        # with a cell budget, one timed probe step after warm-up sets how many iterations fit;
        # without one (the acceptance runs) no forward is spent on it
        iters = args.iters
        if args.cell_budget_s > 0:
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            step()
            e.record()
            torch.cuda.synchronize()
            probe_ms = s.elapsed_time(e)
            fit = int(args.cell_budget_s * 1e3 / max(probe_ms, 1e-3))
            iters = max(3, min(iters, fit))
        rec.update({"first_call_s": first_s, "iters": iters, "iters_requested": args.iters,
                    "iters_lowered_by_budget": iters < args.iters, "iters_below_default": iters < MIN_ITERS})
        ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(iters)]
        for s, e in ev[:-1]:
            s.record()
            step()
            e.record()
        # the last timed forward also brackets the backend's calls (attention share)
        before = xsd.calls()
        if backend is None:
            ev[-1][0].record()
            step()
            ev[-1][1].record()
        else:
            with _CallTimer(torch, backend) as ct:
                ev[-1][0].record()
                step()
                ev[-1][1].record()
        torch.cuda.synchronize()
        rec.update(_ms_stats([s.elapsed_time(e) for s, e in ev]))
        if backend is None:
            rec.update({"attention_ms": float("nan"), "attention_share": float("nan"), "attention_tflops": None})
        else:
            attn_ms = ct.total_ms()
            step_ms = ev[-1][0].elapsed_time(ev[-1][1])
            flops = sum(4.0 * b * sq * skv * h * d for b, sq, skv, h, d in ct.shapes)
            rec.update({"attention_ms": attn_ms, "attention_step_ms": step_ms, "attention_share": attn_ms / step_ms,
                        "attention_calls": len(ct.shapes), "attention_flops": flops,
                        "attention_tflops": flops / (attn_ms * 1e-3) / 1e12 if attn_ms > 0 else None,
                        "attention_shapes": sorted({f"B{b} Sq{sq} Skv{skv} H{h} D{d}"
                                                    for b, sq, skv, h, d in ct.shapes})})
    outf = out.float()
    if not torch.isfinite(outf).all():
        rec["nonfinite_output"] = True
    if ref is not None:
        rec["rel_err_vs_native"] = rel_err(outf, ref)
    if backend == "xstage":   # kernel calls of one forward (the last), and fallbacks over all of them
        rec["xstage_calls"] = {k: n - before.get(k, 0) for k, n in xsd.calls().items() if n - before.get(k, 0)}
        rec["xstage_fallbacks"] = xsd.fallbacks()
    return rec, outf


def available_variants():
    from diffusers.models import attention_dispatch as ad

    from . import dit_xdit

    names = ["native", "cudnn"]
    if getattr(ad, "_CAN_USE_FLASH_ATTN_3", False):
        names.append("flash3")
    return names + ["xstage"] + (["xdit"] if dit_xdit.unavailable() is None else [])


def run_xdit_variant(torch, model, family, config, cell, inputs, args, ref):
    """The xdit variant on one GPU: xfuser's subclass of the model (Ulysses degree 1, a
    one-process group, the same weights) through run_variant, without the attention share."""
    import torch.distributed as dist

    from . import dit_xdit
    from .dit_cp_bench import _free_port

    if not dist.is_initialized():
        dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{_free_port()}", rank=0, world_size=1)
        atexit.register(dist.destroy_process_group)   # torch warns about a group left at exit
    dit_xdit.init(1, 0, torch.cuda.current_device())
    xm = dit_xdit.wrap(model, family, config)
    dit_xdit.set_cell(xm, family, cell, inputs)
    return run_variant(torch, xm, inputs, None, args, ref)


def _table_row(cell, r):
    if "error" in r:
        return f" {cell:>13} {r['variant']:>7}   error: {r['error'][:90]}"
    err = r.get("rel_err_vs_native")
    # --ulysses rows have no attention time (nan): '-'
    attn = f"{r['attention_ms']:>9.1f} {100 * r['attention_share']:>6.1f}% {(r['attention_tflops'] or 0):>7.0f}" \
        if math.isfinite(r["attention_ms"]) else f"{'-':>9} {'-':>7} {'-':>7}"
    return (f" {cell:>13} {r['variant']:>7} {r['median_ms']:>10.1f} {r.get('speedup_vs_native', float('nan')):>7.3f} "
            f"{r.get('speedup_vs_best_stock', float('nan')):>7.3f} {attn} {('-' if err is None else f'{err:.2e}'):>9} "
            f"{'ok' if r.get('check_ok', True) else 'FAIL':>5} {r['iters']:>5}")


TABLE_HEAD = (f"#{'cell':>13} {'variant':>7} {'step(ms)':>10} {'vs nat':>7} {'vs best':>7} {'attn(ms)':>9} "
              f"{'share':>7} {'TFLOP/s':>7} {'rel.err':>9} {'check':>5} {'iters':>5}")


def _plot(doc, path):
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        _log("matplotlib is not importable: no plot")
        return
    cells = [c for c in doc["cells"] if any("median_ms" in r for r in c["results"])]
    if not cells:
        return
    variants = sorted({r["variant"] for c in cells for r in c["results"] if "median_ms" in r},
                      key=lambda v: list(BACKENDS).index(v))
    fig, ax = plt.subplots(figsize=(1.8 * len(cells) + 2, 4))
    width = 0.8 / len(variants)
    for i, v in enumerate(variants):
        xs, ys, attn = [], [], []
        for j, c in enumerate(cells):
            r = next((r for r in c["results"] if r["variant"] == v and "median_ms" in r), None)
            if r is None:
                continue
            xs.append(j + i * width)
            ys.append(r["median_ms"] / 1e3)
            attn.append(r["attention_ms"] / 1e3)
        ax.bar(xs, ys, width, label=v)
        ax.bar(xs, attn, width, color="none", edgecolor="black", hatch="//", linewidth=0.5)
    ax.set_xticks([j + 0.4 - width / 2 for j in range(len(cells))])
    ax.set_xticklabels([c["cell"] for c in cells])
    ax.set_ylabel("one transformer forward (s); hatched: attention")
    ax.set_title(f"diffusers DiT step, bf16, {doc.get('device', '')}")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=130)
    _log(f"plot {path}")


def _print_plan(names):
    print(f"#{'cell':>13} {'model':>15} {'frames':>6} {'size':>10} {'tokens':>7} {'text':>5} {'attn calls':>10} "
          f"{'attn TFLOP':>10}")
    for n in names:
        c = CELLS[n]
        cls, cfg = CONFIGS[c["model"]]
        fam = FAMILY[cls]
        ntok = tokens(fam, cfg, c["frames"], c["height"], c["width"])
        plan = attention_plan(fam, cfg, ntok, c["text"])
        print(f" {n:>13} {c['model']:>15} {c['frames']:>6} {c['width']:>4}x{c['height']:<5} {ntok:>7} {c['text']:>5} "
              f"{sum(p[0] for p in plan):>10} {plan_flops(plan) / 1e12:>10.1f}")


def finish_cell(cell, tol, out=sys.stdout) -> bool:
    """Speed-ups, the output check and the table rows of one cell; True when every row ran and passed."""
    ok = "error" not in cell
    rows = [r for r in cell["results"] if "median_ms" in r]
    base = next((r for r in rows if r["variant"] == "native"), None)
    stock = [r for r in rows if r["variant"] in ("native", "cudnn", "flash3")]
    best = min(stock, key=lambda r: r["median_ms"]) if stock else None
    yard = next((r.get("rel_err_vs_native") for r in rows if r["variant"] == "cudnn"), None)
    limit = max(tol, 2 * yard) if yard is not None and math.isfinite(yard) else tol
    cell["check_limit"] = limit
    if best is not None:
        cell["best_stock"] = best["variant"]
    for r in cell["results"]:
        if "median_ms" not in r:
            ok = False
            continue
        if base is not None:
            r["speedup_vs_native"] = base["median_ms"] / r["median_ms"]
        if best is not None:
            r["speedup_vs_best_stock"] = best["median_ms"] / r["median_ms"]
        err = r.get("rel_err_vs_native")
        r["check_ok"] = err is not None and math.isfinite(err) and err <= limit and not r.get("nonfinite_output")
        ok = ok and r["check_ok"]
        print(_table_row(cell["cell"], r), file=out, flush=True)
    for r in cell["results"]:
        if "median_ms" not in r:
            print(_table_row(cell["cell"], r), file=out, flush=True)
    return ok


def report(paths, tol, json_out=None, plot=None) -> int:
    """One table (and JSON, plot) from several bench JSONs: rows of one cell from several runs
    (e.g. one variant per call) are merged, a later file's row replacing an earlier one's."""
    cells, doc = {}, None
    for path in paths:
        with open(path) as f:
            d = json.load(f)
        if d.get("schema") != "xstage.bench.dit.v1":
            print(f"xstage.bench dit: {path} is not an xstage.bench.dit.v1 document", file=sys.stderr)
            return 2
        doc = doc or {k: v for k, v in d.items() if k != "cells"}
        for c in d["cells"]:
            cur = cells.setdefault(c["cell"], {**{k: v for k, v in c.items() if k != "results"}, "results": []})
            for r in c["results"]:
                cur["results"] = [x for x in cur["results"] if x["variant"] != r["variant"]] + [r]
    if doc is None:
        print("xstage.bench dit: --report needs JSON files", file=sys.stderr)
        return 2
    order = list(BACKENDS)
    doc["cells"] = []
    print(TABLE_HEAD)
    rc = 0
    for name in sorted(cells, key=lambda n: list(CELLS).index(n) if n in CELLS else len(CELLS)):
        c = cells[name]
        c["results"].sort(key=lambda r: order.index(r["variant"]) if r["variant"] in order else len(order))
        if not finish_cell(c, tol):
            rc = 1
        doc["cells"].append(c)
    doc["merged_from"] = [os.path.basename(p) for p in paths]
    if json_out:
        with open(json_out, "w") as f:
            json.dump(doc, f, indent=2, default=str)
            f.write("\n")
    if plot:
        _plot(doc, plot)
    return rc


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m xstage.bench dit", description=__doc__.split("\n")[0])
    ap.add_argument("--models", default=",".join(DEFAULT_CELLS),
                    help=f"comma list of cells ({', '.join(CELLS)})")
    ap.add_argument("--variants", default="auto", help="comma list of native, cudnn, flash3, xstage, xdit; auto: "
                    "native, cudnn, flash3 if importable, xstage, xdit if xfuser is importable")
    ap.add_argument("--iters", type=int, default=MIN_ITERS, help=f"timed forwards per variant (default {MIN_ITERS}; "
                    "fewer is allowed and flagged in the JSON)")
    ap.add_argument("--warmup", type=int, default=2, help="untimed forwards first (>= 1)")
    ap.add_argument("--cell-budget-s", type=float, default=0.0,
                    help="lower a variant's iterations (>= 3) so its timed forwards take about this long; 0: off")
    ap.add_argument("--tol", type=float, default=2e-2, help="relative error allowed vs the stock output "
                    "(or 2x the cudnn variant's, if larger)")
    ap.add_argument("--weights", help="a local diffusers directory: real weights for a single --models cell")
    ap.add_argument("--json", help="write results here (rewritten after every cell)")
    ap.add_argument("--plot", help="a PNG of step and attention times per cell (needs matplotlib)")
    ap.add_argument("--ulysses", type=int, default=1, metavar="P",
                    help="P >= 2: diffusers' context parallelism (ulysses_degree=P) over P GPUs, one process each "
                    "(variants native, cudnn, xstage; dit_cp_bench.py); 1: one GPU")
    ap.add_argument("--cp-timeout-s", type=float, default=600.0,
                    help="--ulysses: bound of every collective wait (a failed or stalled rank ends the run)")
    ap.add_argument("--anything", action="store_true",
                    help="--ulysses: always ulysses_anything (default: only where the heads or tokens do not split evenly)")
    ap.add_argument("--plan", action="store_true", help="print the cells' token and attention counts; no GPU")
    ap.add_argument("--report", nargs="+", metavar="JSON", help="no run: one table (--json, --plot) from these "
                    "bench JSONs, rows of a cell from several runs merged")
    args = ap.parse_args(argv)
    if args.report:
        return report(args.report, args.tol, args.json, args.plot)
    names = [n for n in args.models.split(",") if n]
    bad = [n for n in names if n not in CELLS]
    if bad or not names:
        print(f"xstage.bench dit: unknown cells {bad} (known: {', '.join(CELLS)})", file=sys.stderr)
        return 2
    if args.plan:
        _print_plan(names)
        return 0
    if args.iters < 1 or args.warmup < 1 or args.cell_budget_s < 0 or args.tol <= 0:
        print("xstage.bench dit: --iters and --warmup must be >= 1, --cell-budget-s >= 0, --tol > 0", file=sys.stderr)
        return 2
    if args.weights and len(names) != 1:
        print("xstage.bench dit: --weights needs exactly one --models cell", file=sys.stderr)
        return 2
    if args.ulysses == 1 and "xstage-lkv" in args.variants.split(","):
        print("xstage.bench dit: xstage-lkv is a --ulysses variant (the long-key tile of the fused Ulysses)",
              file=sys.stderr)
        return 2
    if args.ulysses != 1:
        from .dit_cp_bench import CP_VARIANTS, check_args

        cp_variants = None if args.variants == "auto" else [v for v in args.variants.split(",") if v]
        why = check_args(args.ulysses, cp_variants or list(CP_VARIANTS))
        if why is None and args.weights:
            why = "--weights is for one GPU"
        if why is None and not args.cp_timeout_s > 0:
            why = f"--cp-timeout-s must be > 0, got {args.cp_timeout_s}"
        if why:
            print(f"xstage.bench dit: {why}", file=sys.stderr)
            return 2
    try:
        import torch
        import diffusers
        import xstage
        import xstage.diffusers_backend as xsd
    except ImportError as e:
        print(f"xstage.bench dit: {e}", file=sys.stderr)
        return 3
    if not torch.cuda.is_available():
        print("xstage.bench dit: no CUDA device", file=sys.stderr)
        return 3
    st = xstage.extension_status()
    xsd.register()
    from .dit_xdit import unavailable

    xdit_why = unavailable()
    if args.ulysses != 1:
        variants = cp_variants or ["native", "cudnn", "xstage"] + (["xdit"] if xdit_why is None else [])
    else:
        variants = available_variants() if args.variants == "auto" else [v for v in args.variants.split(",") if v]
    unknown = [v for v in variants if v not in BACKENDS]
    if unknown:
        print(f"xstage.bench dit: unknown variants {unknown} ({', '.join(BACKENDS)})", file=sys.stderr)
        return 2
    if "xstage" in variants and not (st["available"] and st["attention"]):
        print(f"xstage.bench dit: the xstage variant needs the extension with attention ({st['reason']})", file=sys.stderr)
        return 3
    if "xdit" in variants and xdit_why:
        print(f"xstage.bench dit: the xdit variant: {xdit_why}", file=sys.stderr)
        return 3
    xsd.set_strict(True)
    dev = torch.device("cuda")
    props = torch.cuda.get_device_properties(dev)
    dtype = torch.bfloat16
    doc = {"schema": "xstage.bench.dit.v1", "tool": "python -m xstage.bench dit", "torch": torch.__version__,
           "diffusers": diffusers.__version__, "device": props.name, "sm_count": props.multi_processor_count,
           **stamp(), "extension": st,
           "config": {"dtype": "bf16", "batch": 1, "warmup": args.warmup, "iters": args.iters,
                      "cell_budget_s": args.cell_budget_s, "tol": args.tol, "variants": variants,
                      "ulysses": args.ulysses,
                      "weights": args.weights or "random (published config)",
                      "step": "one transformer forward (one denoising step, no CFG batch), torch.no_grad",
                      "attention_time": "CUDA events around every call of the backend function in the last timed forward"
                      if args.ulysses == 1 else "not measured under --ulysses",
                      "check": "rel. Frobenius error vs the native output <= max(tol, 2 x cudnn's)" if args.ulysses == 1
                      else "rel. Frobenius error vs the unsharded native output, every rank, <= max(tol, 2 x cudnn's)"},
           "cells": []}
    print(f"# xstage.bench dit on {props.name}, torch {torch.__version__}, diffusers {diffusers.__version__}, bf16, "
          f"batch 1, median of {args.iters} forwards after {args.warmup} warm-up; variants {','.join(variants)}")
    print(TABLE_HEAD, flush=True)

    def save():
        if args.json:
            with open(args.json, "w") as f:
                json.dump(doc, f, indent=2, default=str)
                f.write("\n")

    try:
        if args.ulysses != 1:
            from .dit_cp_bench import run_cp

            rc = run_cp(names, variants, args.ulysses, args, doc, save)
            for c in doc["cells"]:
                if not finish_cell(c, args.tol):
                    rc = 1
            save()
        else:
            rc = _run_cells(torch, names, variants, args, dev, dtype, doc, save)
    except KeyboardInterrupt:   # `timeout --signal=INT`: keep what was measured
        doc["interrupted"] = True
        save()
        _log("interrupted; the JSON has the variants measured so far")
        return 1
    if args.plot:
        _plot(doc, args.plot)
    return rc


def _run_cells(torch, names, variants, args, dev, dtype, doc, save):
    rc = 0
    for name in names:
        c = CELLS[name]
        cls_name, cfg = CONFIGS[c["model"]]
        fam = FAMILY[cls_name]
        cell = {"cell": name, **c, "class": cls_name, "config": cfg,
                "tokens": tokens(fam, cfg, c["frames"], c["height"], c["width"]), "results": []}
        doc["cells"].append(cell)
        model = inputs = ref = None
        try:
            t0 = time.perf_counter()
            _log(f"{name}: building {cls_name} ({c['model']}) on the GPU")
            if args.weights:
                model = load_model(args.weights, dev, dtype)
                cfg = dict(model.config)
            else:
                torch.manual_seed(0)
                model = build_model(cls_name, cfg, dev, dtype)
            cell["params"] = sum(p.numel() for p in model.parameters())
            cell["build_s"] = time.perf_counter() - t0
            inputs = make_inputs(fam, cfg, c["frames"], c["height"], c["width"], c["text"], dev, dtype)
            _log(f"{name}: {cell['params'] / 1e9:.2f} B parameters in {cell['build_s']:.0f} s, {cell['tokens']} tokens "
                 f"+ {c['text']} text; {torch.cuda.memory_allocated() / 2**30:.1f} GiB allocated")
            order = ["native"] + [v for v in variants if v != "native"]
            for v in order:
                rec = {"variant": v}
                try:
                    if v not in variants:   # the stock output only: one untimed forward
                        _log(f"{name}: native reference output (one forward)")
                        model.set_attention_backend("native")
                        with torch.no_grad():
                            ref = model(**inputs)[0].float()
                        cell["reference"] = "one native forward (native not timed)"
                        continue
                    _log(f"{name}: {v} ...")
                    if v == "xdit":
                        r, out = run_xdit_variant(torch, model, fam, cfg, c, inputs, args, ref)
                    else:
                        r, out = run_variant(torch, model, inputs, BACKENDS[v], args, ref)
                    rec.update(r)
                    if v == "native":
                        ref = out
                        rec["rel_err_vs_native"] = 0.0
                    del out
                    _log(f"{name}: {v} {rec['median_ms']:.1f} ms/step, attention {rec['attention_ms']:.1f} ms "
                         f"({100 * rec['attention_share']:.0f}%), rel.err {rec.get('rel_err_vs_native', float('nan')):.2e}")
                except Exception as e:  # OOM, a backend that cannot run here, a strict-mode refusal
                    rec["error"] = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
                    _log(f"{name}: {v} error: {rec['error']}")
                    torch.cuda.empty_cache()
                if v == "native" and ref is None:
                    rec["note"] = "no stock output: the other variants are not checked"
                cell["results"].append(rec)
                save()
        except Exception as e:
            cell["error"] = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
            _log(f"{name}: error: {cell['error']}")
            rc = 1
        if not finish_cell(cell, args.tol):
            rc = 1
        del model, inputs, ref
        gc.collect()
        torch.cuda.empty_cache()
        save()
    return rc


if __name__ == "__main__":
    sys.exit(main())
