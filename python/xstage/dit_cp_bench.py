"""``python -m xstage.bench dit --ulysses P``: the DiT cells under diffusers' own context parallelism
(``enable_parallelism(ContextParallelConfig(ulysses_degree=P))``) on P GPUs, one process per GPU
over NCCL, per variant:

  native   diffusers' Ulysses (its All-to-All) around its default backend (torch SDPA)
  cudnn    the same around ``_native_cudnn``
  xstage   the "xstage" backend, whose CP path is ``xstage.UlyssesAttention`` (the All-to-All fused
           into the attention epilogue; docs/dit.md "What each mode does"), strict
  xstage-lkv  the same on the long-key Ulysses tile (head dim 128; docs/ulysses.md "Long-key tile")
  xdit     xDiT: xfuser's subclasses of the model classes (same weights) over xfuser's Ulysses
           group of P ranks (dit_xdit.py), where xfuser is importable

Every rank builds the same model (same seed) and inputs; first one unsharded forward with the
native backend gives the reference output, then CP is switched on and each variant runs
``--warmup`` forwards and ``--iters`` timed ones, each after a process-group barrier, between CUDA
events. A variant's time is the largest of the ranks' medians; its output (diffusers gathers
the full output on every rank) is checked on every rank against the unsharded reference
(relative Frobenius error <= --tol). ``ulysses_anything`` is used when the image tokens do not
split evenly over P (use_anything; or with --anything). The attention share is not measured here (the stock
path's All-to-All sits outside the backend function). Rows go into the same JSON schema, as cell
``<cell>@u<P>``, so ``--report`` merges them with the one-GPU rows.
"""
from __future__ import annotations

import json
import os
import socket
import statistics
import sys
import tempfile
import time

CP_VARIANTS = ("native", "cudnn", "xstage", "xstage-lkv", "xdit")   # auto: native, cudnn, xstage (+ xdit)


def cp_cell_name(cell: str, world: int) -> str:
    return f"{cell}@u{world}"


def use_anything(family: str, n_tokens: int, text: int, heads: int, world: int, forced: bool) -> bool:
    """diffusers' plain Ulysses needs the heads and every sequence it shards to split evenly over
    the ranks: the image tokens, and for the joint-attention models (Flux, HunyuanVideo) the text
    tokens too (Wan's text only feeds cross-attention keys, which stay whole)."""
    uneven = n_tokens % world != 0 or heads % world != 0 or (family in ("flux", "hunyuan") and text % world != 0)
    return forced or uneven


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class _Clock:
    """Elapsed ms of one forward: CUDA events on a GPU, perf_counter on the CPU (tests)."""

    def __init__(self, torch, device):
        self.torch, self.cuda = torch, device.type == "cuda"

    def time(self, fn):
        if self.cuda:
            s, e = self.torch.cuda.Event(enable_timing=True), self.torch.cuda.Event(enable_timing=True)
            s.record()
            out = fn()
            e.record()
            e.synchronize()
            return s.elapsed_time(e), out
        t0 = time.perf_counter()
        out = fn()
        return (time.perf_counter() - t0) * 1e3, out


def run_rank(rank, world, cfg, device, out_dir, log=None):
    """One rank's whole run (the process group is up): every cell of cfg["cells"], each variant.
    Writes out_dir/rank<r>.json: {cell: {"tokens", "anything", "results": [per-variant record]}}."""
    import torch
    import torch.distributed as dist
    from diffusers import ContextParallelConfig

    from . import dit_bench as db
    import xstage.diffusers_backend as xsd

    xsd.register()
    xsd.set_strict(cfg.get("strict", True))
    clock = _Clock(torch, device)
    dtype = getattr(torch, cfg.get("dtype", "bfloat16"))
    mine = {}
    for name in cfg["cells"]:
        c = db.CELLS[name]
        cls_name, mcfg = db.CONFIGS[c["model"]]
        fam = db.FAMILY[cls_name]
        ntok = db.tokens(fam, mcfg, c["frames"], c["height"], c["width"])
        anything = use_anything(fam, ntok, c["text"], mcfg["num_attention_heads"], world, cfg.get("anything", False))
        cell = mine[name] = {"tokens": ntok, "anything": anything, "results": []}
        torch.manual_seed(0)
        model = db.build_model(cls_name, mcfg, device, dtype)
        inputs = db.make_inputs(fam, mcfg, c["frames"], c["height"], c["width"], c["text"], device, dtype)
        with torch.no_grad():
            model.set_attention_backend("native")
            ref = model(**inputs)[0].float()
            # xDiT's subclass shares the weights; built before diffusers' CP hooks go on the model
            xm = None
            if "xdit" in cfg["variants"]:
                from . import dit_xdit

                xm = dit_xdit.wrap(model, fam, mcfg)
                dit_xdit.set_cell(xm, fam, c, inputs, world)
            model.enable_parallelism(config=ContextParallelConfig(ulysses_degree=world, ulysses_anything=anything))
            for v in cfg["variants"]:
                rec = {"variant": v, "backend": db.BACKENDS[v] or "xfuser"}
                try:
                    run = (lambda: xm(**inputs)[0]) if v == "xdit" else (lambda: model(**inputs)[0])
                    if v != "xdit":
                        model.set_attention_backend(db.BACKENDS[v])
                    xsd.set_ulysses_tile("long_kv" if v == "xstage-lkv" else "staged")
                    xsd.reset_fallbacks()
                    for _ in range(cfg["warmup"]):
                        dist.barrier()
                        run()
                    ms = []
                    before = xsd.calls()
                    for _ in range(cfg["iters"]):
                        dist.barrier()
                        t, out = clock.time(run)
                        ms.append(t)
                    outf = out.float()
                    rec.update(median_ms=statistics.median(ms), min_ms=min(ms), max_ms=max(ms), iters=len(ms),
                               rel_err_vs_unsharded=db.rel_err(outf, ref),
                               nonfinite_output=bool(not torch.isfinite(outf).all()))
                    if v in ("xstage", "xstage-lkv"):
                        rec["xstage_calls_per_forward"] = {k: (n - before.get(k, 0)) / len(ms)
                                                           for k, n in xsd.calls().items() if n - before.get(k, 0)}
                        rec["xstage_fallbacks"] = xsd.fallbacks()
                    del out, outf
                except Exception as e:   # a variant that cannot run here: recorded, the others go on
                    rec["error"] = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
                cell["results"].append(rec)
                if log and rank == 0:
                    log(f"{name} @u{world}: {v} " + (f"{rec['median_ms']:.1f} ms (rank 0), rel.err "
                                                     f"{rec['rel_err_vs_unsharded']:.2e}" if "error" not in rec
                                                     else rec["error"]))
        del model, inputs, ref, xm
        if device.type == "cuda":
            torch.cuda.empty_cache()
    with open(os.path.join(out_dir, f"rank{rank}.json"), "w") as f:
        json.dump(mine, f)


def merge_ranks(per_rank: list, world: int, tol: float) -> list:
    """Cells of the JSON document from the ranks' records: a variant's time is the largest of
    the ranks' medians, its error the largest; it passes when every rank ran it within tol."""
    cells = []
    for name in per_rank[0]:
        first = per_rank[0][name]
        cell = {"cell": cp_cell_name(name, world), "base_cell": name, "world": world, "tokens": first["tokens"],
                "cp": {"ulysses_degree": world, "ulysses_anything": first["anything"]}, "results": []}
        for j, r0 in enumerate(first["results"]):
            recs = [pr[name]["results"][j] for pr in per_rank]
            errors = [r["error"] for r in recs if "error" in r]
            rec = {"variant": r0["variant"], "backend": r0["backend"]}
            if errors:
                rec["error"] = errors[0]
            else:
                rec.update(median_ms=max(r["median_ms"] for r in recs), rank_median_ms=[r["median_ms"] for r in recs],
                           iters=min(r["iters"] for r in recs),
                           rel_err_vs_native=max(r["rel_err_vs_unsharded"] for r in recs),
                           nonfinite_output=any(r["nonfinite_output"] for r in recs),
                           attention_ms=float("nan"), attention_share=float("nan"), attention_tflops=None)
                for k in ("xstage_calls_per_forward", "xstage_fallbacks"):
                    if k in r0:
                        rec[k] = r0[k]
            cell["results"].append(rec)
        cell["check"] = (f"rel. Frobenius error vs the unsharded native output, largest over the ranks, <= "
                         f"max({tol}, 2 x cudnn's)")
        cells.append(cell)
    return cells


def _worker(rank, world, port, cfg, out_dir):
    import torch
    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.cuda.set_device(rank)
    dev = torch.device("cuda", rank)
    # no device_id: xfuser's sub-groups need the host-side rendezvous (its parallel_state.py says so).
    # Every collective is bounded: a rank that fails or stalls ends the others' waits with an error.
    import datetime

    dist.init_process_group("nccl", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=cfg.get("timeout_s", 600)))
    try:
        if "xdit" in cfg["variants"]:
            from . import dit_xdit

            dit_xdit.init(world, rank, rank)
        run_rank(rank, world, cfg, dev, out_dir, log=lambda m: print(f"[dit] {m}", file=sys.stderr, flush=True))
    finally:
        dist.destroy_process_group()


def run_cp(names, variants, world, args, doc, save) -> int:
    """Spawns `world` workers on as many GPUs, merges their records into doc["cells"]."""
    import torch
    import torch.multiprocessing as mp

    have = torch.cuda.device_count()
    if have < world:
        print(f"xstage.bench dit: --ulysses {world} needs {world} GPUs, this machine has {have}", file=sys.stderr)
        return 3
    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
    cfg = {"cells": names, "variants": variants, "iters": args.iters, "warmup": args.warmup,
           "anything": args.anything, "strict": True, "timeout_s": args.cp_timeout_s}
    with tempfile.TemporaryDirectory() as tmp:
        try:
            mp.spawn(_worker, args=(world, _free_port(), cfg, tmp), nprocs=world, join=True)
        except mp.ProcessRaisedException as e:   # a rank's error (or its collective's timeout)
            print(f"xstage.bench dit: --ulysses {world}: a rank failed: {str(e).strip().splitlines()[-1]}",
                  file=sys.stderr)
            return 1
        per_rank = [json.load(open(os.path.join(tmp, f"rank{r}.json"))) for r in range(world)]
    doc["cells"] = merge_ranks(per_rank, world, args.tol)
    save()
    return 0


def check_args(world: int, variants: list) -> str | None:
    """One line for bad --ulysses input, else None."""
    if world < 2 or world > 8:
        return f"--ulysses {world}: P must be 2..8 (diffusers' ulysses_degree)"
    bad = [v for v in variants if v not in CP_VARIANTS]
    if bad:
        return f"--ulysses runs {', '.join(CP_VARIANTS)}; not {', '.join(bad)}"
    return None

