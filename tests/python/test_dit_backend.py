"""xstage.diffusers_backend and xstage.dit_bench without a GPU: registration in diffusers'
dispatcher, tiny Wan / Flux / HunyuanVideo models built from the real classes, the routing of
every attention call, the key-padding-mask and fallback logic, diffusers' context parallelism
running xstage.UlyssesAttention over gloo (2 processes), from_pretrained on a saved tiny model,
and the bench's cell arithmetic.

On a machine without a GPU the xstage kernel cannot run. Where a test needs the backend to take
a call (not fall back), it swaps in a float32 reference attention for the kernel with
xstage.diffusers_backend._kernel_override and says so: those tests check the plumbing around
the kernel (layouts, masks, sharding, dispatch), not the kernel; tests/python/test_dit_gpu.py
checks the kernel inside the same models on the GPU."""
import importlib.util
import json
import os
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not importable")
pytest.importorskip("diffusers", reason="diffusers is not importable (pip install diffusers)")

import torch.nn.functional as F  # noqa: E402

import xstage.diffusers_backend as xsd  # noqa: E402
from xstage import dit_bench  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SMALL = {"wan": dict(frames=9, height=48, width=80, text=7),       # 3 x 3 x 5 = 45 video tokens
         "flux": dict(frames=1, height=64, width=112, text=5),     # 4 x 7 = 28 image tokens
         "hunyuan": dict(frames=9, height=64, width=64, text=6)}   # 3 x 4 x 4 = 48 video tokens


def ref_kernel(q, k, v, causal, scale, return_lse):
    """float32 reference in the kernel's place (o [B, S, H, D] in q's dtype, lse [B, H, S])."""
    qf, kf, vf = (t.float().transpose(1, 2) for t in (q, k, v))
    o = F.scaled_dot_product_attention(qf, kf, vf, is_causal=causal, scale=scale).transpose(1, 2).to(q.dtype)
    if not return_lse:
        return o
    s = (qf @ kf.transpose(-1, -2)) * (scale if scale is not None else q.shape[-1] ** -0.5)
    if causal:
        s = s.masked_fill(~torch.ones(s.shape[-2:], dtype=torch.bool).tril(), float("-inf"))
    return o, torch.logsumexp(s, dim=-1)


def tiny(family, dtype=torch.bfloat16, seed=0, **over):
    cls, cfg = dit_bench.TINY[family]
    torch.manual_seed(seed)
    model = dit_bench.build_model(cls, {**cfg, **over}, "cpu", dtype)
    return model, {**cfg, **over}


def inputs(family, cfg, dtype=torch.bfloat16, **over):
    shp = {**SMALL[family], **over}
    return dit_bench.make_inputs(family, cfg, shp.pop("frames"), shp.pop("height"), shp.pop("width"), shp.pop("text"),
                                 "cpu", dtype, **shp)


def forward(model, kw, backend):
    model.set_attention_backend(backend)
    with torch.no_grad():
        return model(**kw)[0]


def rel(a, b):
    return ((a.float() - b.float()).norm() / b.float().norm()).item()


@pytest.fixture(autouse=True)
def _fresh():
    xsd.register()
    xsd.set_strict(False)
    xsd.reset_fallbacks()
    yield
    xsd.set_strict(False)


# ---- registration --------------------------------------------------------------------------
def test_register_is_idempotent_and_extends_the_enum():
    from diffusers import attention_backend
    from diffusers.models.attention_dispatch import AttentionBackendName, _AttentionBackendRegistry

    n = len(AttentionBackendName)
    assert xsd.register() == "xstage" and xsd.register() == "xstage"
    assert len(AttentionBackendName) == n
    m = AttentionBackendName("xstage")
    assert m is AttentionBackendName.XSTAGE is AttentionBackendName["XSTAGE"] and m == "xstage"
    assert m in list(AttentionBackendName) and "xstage" in {x.value for x in AttentionBackendName.__members__.values()}
    assert _AttentionBackendRegistry._backends[m] is xsd.xstage_attention
    assert _AttentionBackendRegistry._is_context_parallel_available(m)
    assert {"query", "key", "value", "attn_mask", "_parallel_config"} <= _AttentionBackendRegistry._supported_arg_names[m]
    with attention_backend("xstage"):
        assert _AttentionBackendRegistry.get_active_backend()[0] is m


def test_set_attention_backend_reaches_every_processor():
    model, _ = tiny("flux")
    xsd.enable(model)
    backends = {getattr(mod.processor, "_attention_backend", None) for mod in model.modules() if hasattr(mod, "processor")}
    assert backends == {"xstage"}
    model.set_attention_backend("native")


def test_unknown_backend_name_still_rejected():
    model, _ = tiny("flux")
    with pytest.raises(ValueError):
        model.set_attention_backend("xstage-not-a-backend")


# ---- tiny models: construction, shapes, routing ---------------------------------------------
@pytest.mark.parametrize("family", ["wan", "flux", "hunyuan"])
def test_tiny_model_shapes_and_cpu_fallback_is_counted(family):
    model, cfg = tiny(family)
    kw = inputs(family, cfg)
    ref = forward(model, kw, "native")
    shp = SMALL[family]
    lat = dit_bench.latent_shape(family, cfg, shp["frames"], shp["height"], shp["width"])
    assert tuple(ref.shape) == ((1,) + tuple(lat) if family != "flux" else (1,) + tuple(lat))
    out = forward(model, kw, "xstage")       # CPU tensors: every call falls back to native, counted
    assert torch.equal(out, ref)
    fb = xsd.fallbacks()
    assert list(fb) == ["tensors on cpu (the kernel runs on CUDA)"]
    ntok = dit_bench.tokens(family, cfg, shp["frames"], shp["height"], shp["width"])
    plan = dit_bench.attention_plan(family, cfg, ntok, shp["text"])
    dispatched = sum(p[0] for p in plan)
    assert fb["tensors on cpu (the kernel runs on CUDA)"] == dispatched
    xsd.set_strict(True)
    with pytest.raises(NotImplementedError, match="strict"):
        forward(model, kw, "xstage")


@pytest.mark.parametrize("family", ["wan", "flux", "hunyuan"])
def test_tiny_model_through_the_backend_plumbing(family):
    """The backend takes every call (reference attention in the kernel's place): the model output
    matches the stock native backend at bf16 level, nothing falls back."""
    model, cfg = tiny(family)
    kw = inputs(family, cfg)
    ref = forward(model, kw, "native")
    with xsd._kernel_override(ref_kernel):
        out = forward(model, kw, "xstage")
    assert xsd.fallbacks() == {}
    assert xsd.calls().get("local", 0) > 0
    assert rel(out, ref) < 2e-2, rel(out, ref)


def test_hunyuan_text_padding_mask_is_exact():
    """HunyuanVideo masks padded text keys: rows of different valid lengths (batch 2), one call
    per row with the keys cut to the valid prefix; equals native (which applies the mask)."""
    model, cfg = tiny("hunyuan", dtype=torch.float32)
    kw = inputs("hunyuan", cfg, dtype=torch.float32, batch=2, text_valid=[4, 2])
    ref = forward(model, kw, "native")
    model.to(torch.bfloat16)
    kwb = {k: (v.to(torch.bfloat16) if torch.is_tensor(v) and v.is_floating_point() else v) for k, v in kw.items()}
    refb = forward(model, kwb, "native")
    with xsd._kernel_override(ref_kernel):
        out = forward(model, kwb, "xstage")
    assert xsd.fallbacks() == {}
    assert rel(out, refb) < 2e-2 and rel(out, ref) < 2 * rel(refb, ref) + 1e-2


# ---- the backend function on its own --------------------------------------------------------
def _qkv(B=2, Sq=20, Skv=24, H=3, D=64, Hk=None, dtype=torch.bfloat16):
    g = torch.Generator().manual_seed(1)
    q = torch.randn(B, Sq, H, D, generator=g).to(dtype)
    k = torch.randn(B, Skv, Hk or H, D, generator=g).to(dtype)
    v = torch.randn(B, Skv, Hk or H, D, generator=g).to(dtype)
    return q, k, v


def _sdpa(q, k, v, mask=None, causal=False):
    o = F.scaled_dot_product_attention(q.transpose(1, 2).float(), k.transpose(1, 2).float(), v.transpose(1, 2).float(),
                                       attn_mask=mask, is_causal=causal)
    return o.transpose(1, 2)


def test_key_padding_lengths():
    m = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], dtype=torch.bool)
    assert xsd.key_padding_lengths(m, 2, 5) == [3, 5]
    assert xsd.key_padding_lengths(m.view(2, 1, 1, 5), 2, 5) == [3, 5]
    assert xsd.key_padding_lengths(m[:1].view(1, 1, 1, 5), 4, 5) == [3, 3, 3, 3]
    assert xsd.key_padding_lengths(torch.tensor([[1, 0, 1, 1, 1]], dtype=torch.bool), 1, 5) is None   # not a prefix
    assert xsd.key_padding_lengths(m.float(), 2, 5) is None                                         # additive mask
    assert xsd.key_padding_lengths(torch.ones(2, 1, 4, 5, dtype=torch.bool), 2, 5) is None          # per query
    m2 = m.view(2, 1, 1, 5).clone()
    assert xsd.key_padding_lengths(m2, 2, 5) == [3, 5]
    m2[1, 0, 0, 4] = False                     # in-place edit: the cached lengths must not be reused
    assert xsd.key_padding_lengths(m2, 2, 5) == [3, 4]


@pytest.mark.parametrize("mask_kind", ["none", "all-true", "prefix-equal", "prefix-ragged"])
def test_backend_masks_exact(mask_kind):
    q, k, v = _qkv()
    mask = {"none": None, "all-true": torch.ones(2, 1, 1, 24, dtype=torch.bool),
            "prefix-equal": (torch.arange(24) < 17).view(1, 1, 1, 24).expand(2, 1, 1, 24),
            "prefix-ragged": (torch.arange(24)[None] < torch.tensor([[9], [24]])).view(2, 1, 1, 24)}[mask_kind]
    with xsd._kernel_override(ref_kernel):
        o = xsd.xstage_attention(q, k, v, attn_mask=mask)
    assert xsd.fallbacks() == {} and xsd.calls() == {"local": 1}
    torch.testing.assert_close(o.float(), _sdpa(q, k, v, mask), atol=2e-2, rtol=2e-2)


def test_backend_lse_layout_and_causal():
    q, k, v = _qkv(Sq=24)
    with xsd._kernel_override(ref_kernel):
        o, lse = xsd.xstage_attention(q, k, v, is_causal=True, return_lse=True)
    assert lse.shape == (2, 24, 3)                               # diffusers' [B, S, H]
    _, lse_ref = ref_kernel(q, k, v, True, None, True)
    torch.testing.assert_close(lse, lse_ref.permute(0, 2, 1))
    torch.testing.assert_close(o.float(), _sdpa(q, k, v, causal=True), atol=2e-2, rtol=2e-2)


@pytest.mark.parametrize("case,reason", [
    ("fp32", "dtype"), ("d96", "head dim 96"), ("gqa", "grouped-query"), ("dropout", "dropout_p"),
    ("nonprefix", "key-padding prefix"), ("float-mask", "key-padding prefix"), ("empty-row", "no keys")])
def test_fallbacks_are_counted_and_native(case, reason):
    kw = {}
    q, k, v = _qkv()
    if case == "fp32":
        q, k, v = _qkv(dtype=torch.float32)
    elif case == "d96":
        q, k, v = _qkv(D=96)
    elif case == "gqa":
        q, k, v = _qkv(H=4, Hk=2)
        kw["enable_gqa"] = True
    elif case == "dropout":
        kw["dropout_p"] = 0.1
    elif case == "nonprefix":
        kw["attn_mask"] = torch.rand(2, 1, 1, 24, generator=torch.Generator().manual_seed(0)) > 0.3
    elif case == "float-mask":
        kw["attn_mask"] = torch.zeros(2, 1, 1, 24)
    elif case == "empty-row":
        kw["attn_mask"] = (torch.arange(24)[None] < torch.tensor([[0], [5]])).view(2, 1, 1, 24)
    with xsd._kernel_override(ref_kernel):
        torch.manual_seed(0)
        o = xsd.xstage_attention(q, k, v, **kw)
    fb = xsd.fallbacks()
    assert len(fb) == 1 and reason in next(iter(fb)) and sum(fb.values()) == 1 and xsd.calls() == {}
    if case not in ("dropout", "empty-row"):
        torch.testing.assert_close(o.float(), _sdpa(q, k, v, kw.get("attn_mask"))
                                   if case != "gqa" else o.float(), atol=2e-2, rtol=2e-2)
    xsd.set_strict(True)
    with xsd._kernel_override(ref_kernel), pytest.raises(NotImplementedError, match=reason.split()[0]):
        xsd.xstage_attention(q, k, v, **kw)


def test_ulysses_seq_lens_plain_needs_no_communication():
    class CP:
        ulysses_anything = False
        ulysses_degree = 4
    assert xsd.ulysses_seq_lens(37, CP(), group=None) == [37] * 4


# ---- diffusers context parallelism over gloo -------------------------------------------------
CP_CASES = {  # name: (family, ContextParallelConfig kwargs, input overrides, expected route)
    "flux-anything": ("flux", dict(ulysses_degree=2, ulysses_anything=True), {}, "ulysses"),   # 28 + 5 tokens, 3 heads
    "wan-plain": ("wan", dict(ulysses_degree=2), dict(height=64), "ulysses"),                 # 3 x 4 x 5 = 60 tokens
    "flux-ring": ("flux", dict(ring_degree=2), dict(width=128), "ring"),                      # 32 + 6 tokens
}


def _cp_worker(rank, world, init_file, out_dir):
    import torch.distributed as dist
    from diffusers import ContextParallelConfig

    # "cpu:gloo": diffusers' size gathers then stay on the CPU (they pick the accelerator otherwise)
    dist.init_process_group("cpu:gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    # diffusers derives the rank's device as rank % torch.accelerator.device_count(), 0 on a CPU-only
    # machine; one "device" makes that cpu:0. Nothing else in torch is replaced.
    if torch.accelerator.device_count() == 0:
        torch.accelerator.device_count = lambda: 1
    # diffusers 0.42.1's CP hook warns through logger.warning_once, which only exists once
    # transformers is imported (it adds it to logging.Logger); Wan's 1-d timestep takes that path.
    import logging

    if not hasattr(logging.Logger, "warning_once"):
        logging.Logger.warning_once = logging.Logger.warning
    try:
        xsd.register()
        for case, (family, cp_kw, over, route) in CP_CASES.items():
            model, cfg = tiny(family)
            shp = dict(SMALL[family], **over)
            if family == "flux" and case == "flux-ring":
                shp["text"] = 6
            kw = inputs(family, cfg, **shp)
            with xsd._kernel_override(ref_kernel):
                xsd.enable(model)
                with torch.no_grad():
                    ref = model(**kw)[0]
                xsd.reset_fallbacks()
                model.enable_parallelism(config=ContextParallelConfig(**cp_kw))
                with torch.no_grad():
                    out = model(**kw)[0]
            calls, fb = xsd.calls(), xsd.fallbacks()
            with open(os.path.join(out_dir, f"{case}.{rank}"), "w") as f:
                f.write(f"{rel(out, ref)} {calls.get(route, 0)} {sum(fb.values())} {tuple(out.shape) == tuple(ref.shape)}")
    finally:
        dist.destroy_process_group()


def test_context_parallel_runs_xstage_ulysses_over_gloo(tmp_path):
    """2 processes on gloo: diffusers' enable_parallelism(ContextParallelConfig(...)) on tiny
    Flux (ulysses_anything: 28 + 5 joint tokens and 3 heads over 2 ranks; ring_degree=2) and Wan
    (plain Ulysses, even shards; its cross-attention stays local), with the "xstage" backend
    (reference attention in the kernel's place): every rank's output must equal the unsharded
    model's, and the CP calls must have gone through xstage.UlyssesAttention / the ring template
    with the xstage forward op, none falling back."""
    import torch.distributed as dist
    import torch.multiprocessing as mp

    if not dist.is_available() or not dist.is_gloo_available():
        pytest.skip("torch.distributed with gloo is not available")
    world = 2
    mp.spawn(_cp_worker, args=(world, str(tmp_path / "init"), str(tmp_path)), nprocs=world, join=True)
    for case in CP_CASES:
        for r in range(world):
            err, n, fb, same_shape = open(tmp_path / f"{case}.{r}").read().split()
            assert same_shape == "True", (case, r)
            assert float(err) < 1e-2, (case, r, err)
            assert int(n) > 0 and fb == "0", (case, r, n, fb)


# ---- real weights from a local directory ----------------------------------------------------
@pytest.mark.parametrize("family", ["wan", "flux"])
def test_from_pretrained_local_directory(tmp_path, family):
    import importlib.util

    if family == "wan" and importlib.util.find_spec("accelerate") is None:
        pytest.skip("diffusers loads models with _keep_in_fp32_modules (Wan) only with accelerate installed")
    model, cfg = tiny(family, dtype=torch.float32)
    model.save_pretrained(tmp_path / "transformer")
    loaded = dit_bench.load_model(str(tmp_path), "cpu", torch.bfloat16)     # pipeline layout: transformer/
    assert type(loaded) is type(model)
    sd, sl = model.state_dict(), loaded.state_dict()
    assert sd.keys() == sl.keys()
    for name, t in sd.items():
        expect = t if dit_bench.keep_fp32(loaded, name) else t.to(torch.bfloat16)
        assert sl[name].dtype == expect.dtype and torch.equal(sl[name], expect), name
    direct = dit_bench.load_model(str(tmp_path / "transformer"), "cpu", torch.bfloat16)   # a model folder
    kw = inputs(family, cfg)
    torch.testing.assert_close(forward(direct, kw, "native"), forward(loaded, kw, "native"), atol=0, rtol=0)


# ---- the bench's arithmetic and CLI ----------------------------------------------------------
def test_cells_tokens_from_the_published_configs():
    tok = {n: dit_bench.tokens(dit_bench.FAMILY[dit_bench.CONFIGS[c["model"]][0]], dit_bench.CONFIGS[c["model"]][1],
                               c["frames"], c["height"], c["width"]) for n, c in dit_bench.CELLS.items()}
    assert tok["wan-480p"] == 21 * 30 * 52 and tok["wan-720p"] == 21 * 45 * 80
    assert tok["flux-1024"] == 64 * 64 and tok["flux-2048"] == 128 * 128
    assert tok["hunyuan-720p"] == 33 * 45 * 80
    for _, cfg in dit_bench.CONFIGS.values():
        assert cfg["attention_head_dim"] in (64, 128)


def test_published_config_builds_on_meta():
    """The published configurations are accepted by the installed diffusers classes (built on
    the meta device: no memory, no weights) and have the published sizes."""
    sizes = {"wan2.1-t2v-14b": (13.5e9, 14.6e9), "flux.1-dev": (11.5e9, 12.2e9), "hunyuanvideo": (12.5e9, 13.2e9)}
    for name, (lo, hi) in sizes.items():
        cls, cfg = dit_bench.CONFIGS[name]
        with torch.device("meta"):
            m = dit_bench.model_class(cls)(**cfg)
        n = sum(p.numel() for p in m.parameters())
        assert lo < n < hi, (name, n)


def _bench(*args):
    env = {**os.environ, "PYTHONPATH": os.path.join(REPO, "python") + os.pathsep + os.environ.get("PYTHONPATH", "")}
    return subprocess.run([sys.executable, "-m", "xstage.bench", "dit", *args], env=env, capture_output=True,
                          text=True, timeout=300)


def test_bench_cli_plan_and_bad_input():
    r = _bench("--plan")
    assert r.returncode == 0 and "wan-720p" in r.stdout and "75600" in r.stdout
    assert _bench("--models", "nope").returncode == 2
    assert _bench("--iters", "0", "--models", "flux-1024").returncode == 2
    if not torch.cuda.is_available():
        r = _bench("--models", "flux-1024")
        assert r.returncode == 3 and "no CUDA device" in r.stderr
    # --ulysses: bad P, a variant diffusers' CP does not take, real weights: one line, exit 2
    for bad, says in ((("--ulysses", "9"), "2..8"), (("--ulysses", "2", "--variants", "flash3"), "flash3"),
                      (("--ulysses", "2", "--weights", "/x"), "one GPU"),
                      (("--ulysses", "2", "--cp-timeout-s", "0"), "must be > 0"),
                      (("--variants", "native,xstage-lkv"), "--ulysses variant")):
        r = _bench("--models", "flux-1024", *bad)
        assert r.returncode == 2 and says in r.stderr, (bad, r.stderr)
    if torch.cuda.device_count() < 2:
        r = _bench("--models", "tiny-flux", "--ulysses", "2")
        assert r.returncode == 3 and ("GPUs" in r.stderr or "no CUDA device" in r.stderr), r.stderr


# ---- the bench's context-parallel mode (dit_cp_bench) over gloo -------------------------------
def _cp_bench_worker(rank, world, init_file, out_dir):
    import logging

    import torch.distributed as dist

    from xstage import dit_cp_bench

    dist.init_process_group("cpu:gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    if torch.accelerator.device_count() == 0:   # as in _cp_worker: diffusers' rank device is then cpu:0
        torch.accelerator.device_count = lambda: 1
    if not hasattr(logging.Logger, "warning_once"):
        logging.Logger.warning_once = logging.Logger.warning
    try:
        cfg = {"cells": ["tiny-wan", "tiny-flux"], "variants": ["native", "xstage", "xstage-lkv"], "iters": 2, "warmup": 1,
               "anything": False, "strict": True, "dtype": "bfloat16"}
        with xsd._kernel_override(ref_kernel):
            dit_cp_bench.run_rank(rank, world, cfg, torch.device("cpu"), out_dir)
    finally:
        dist.destroy_process_group()


def test_cp_bench_ranks_over_gloo(tmp_path):
    """`python -m xstage.bench dit --ulysses P`'s per-rank run on 2 CPU processes (gloo; the xstage
    kernel replaced by the fp32 reference, the only stand-in): tiny Wan and tiny
    Flux (3 heads, 5 text tokens: ulysses_anything chosen by itself for both), native (diffusers' own Ulysses) and
    xstage (xstage.UlyssesAttention); the merged cells carry every variant, timed, matching the
    unsharded output, the xstage rows served by the Ulysses path without a fallback."""
    import torch.distributed as dist
    import torch.multiprocessing as mp

    from xstage import dit_cp_bench

    if not dist.is_available() or not dist.is_gloo_available():
        pytest.skip("torch.distributed with gloo is not available")
    world = 2
    mp.spawn(_cp_bench_worker, args=(world, str(tmp_path / "init"), str(tmp_path)), nprocs=world, join=True)
    per_rank = [json.load(open(tmp_path / f"rank{r}.json")) for r in range(world)]
    cells = dit_cp_bench.merge_ranks(per_rank, world, 2e-2)
    assert [c["cell"] for c in cells] == ["tiny-wan@u2", "tiny-flux@u2"]
    assert [c["cp"]["ulysses_anything"] for c in cells] == [True, True]   # 3 heads over 2 ranks
    for c in cells:
        rows = {r["variant"]: r for r in c["results"]}
        assert set(rows) == {"native", "xstage", "xstage-lkv"}, c
        for r in rows.values():
            assert "error" not in r, r
            assert r["median_ms"] > 0 and len(r["rank_median_ms"]) == world and r["iters"] == 2
            assert r["rel_err_vs_native"] < 2e-2 and not r["nonfinite_output"], r
        for v in ("xstage", "xstage-lkv"):
            assert rows[v]["xstage_calls_per_forward"].get("ulysses", 0) > 0
            assert rows[v]["xstage_fallbacks"] == {}


def test_cp_bench_refuses_bad_input():
    from xstage import dit_cp_bench

    assert "2..8" in dit_cp_bench.check_args(1, ["native"])
    assert "2..8" in dit_cp_bench.check_args(9, ["native"])
    assert "flash3" in dit_cp_bench.check_args(2, ["native", "flash3"])
    assert dit_cp_bench.check_args(8, ["native", "cudnn", "xstage"]) is None
    assert dit_cp_bench.use_anything("wan", 180, 7, 4, 2, False) is False      # Wan's text stays whole
    assert dit_cp_bench.use_anything("wan", 180, 7, 3, 2, False) is True       # 3 heads over 2
    assert dit_cp_bench.use_anything("flux", 384, 5, 24, 2, False) is True     # joint text of 5 over 2
    assert dit_cp_bench.use_anything("flux", 4096, 512, 24, 8, False) is False  # FLUX 1024 at P = 8
    assert dit_cp_bench.use_anything("flux", 384, 512, 24, 2, True) is True    # forced
    assert dit_cp_bench.cp_cell_name("wan-480p", 8) == "wan-480p@u8"


# ---- the xdit variant's model (dit_xdit) -------------------------------------------------------
@pytest.mark.parametrize("family", ["wan", "flux", "hunyuan"])
def test_xdit_wrapper_shares_the_models_weights(family):
    """xfuser's subclass of each model class takes the bench model's parameters and buffers as
    they are (the same tensors: no second copy of a 14B model), nothing left on the meta device."""
    pytest.importorskip("xfuser", reason="xfuser is not installed (pip install xfuser)")
    from xstage import dit_xdit

    cls, cfg = dit_bench.TINY[family]
    model = dit_bench.build_model(cls, cfg, "cpu", torch.bfloat16)
    xm = dit_xdit.wrap(model, family, cfg)
    assert type(xm).__mro__[1] is type(model)
    ours, theirs = model.state_dict(), xm.state_dict()
    assert ours.keys() == theirs.keys()
    assert all(ours[k].data_ptr() == theirs[k].data_ptr() for k in ours)
    assert not any(t.is_meta for t in list(xm.parameters()) + list(xm.buffers()))


@pytest.mark.parametrize("family", ["wan", "flux", "hunyuan"])
def test_xdit_runtime_state_carries_the_cell(family, monkeypatch):
    """set_cell gives xfuser a DiT runtime state (not the bare external one, which lacks the step
    counter and the text length its transformers read) with the cell's text length. xfuser's
    process groups need CUDA, so this CPU test stands in for them; the GPU test runs the real ones."""
    pytest.importorskip("xfuser", reason="xfuser is not installed (pip install xfuser)")
    import types

    import torch.distributed as dist
    from xfuser.core.distributed import runtime_state as rs

    from xstage import dit_cp_bench, dit_xdit

    made_group = not dist.is_initialized()
    if made_group:   # xfuser's config reads the world size from torch.distributed
        monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
        monkeypatch.setenv("MASTER_PORT", str(dit_cp_bench._free_port()))
        dist.init_process_group("gloo", rank=0, world_size=1)
    monkeypatch.setattr(rs, "model_parallel_is_initialized", lambda: True)
    monkeypatch.setattr(rs, "get_sequence_parallel_world_size", lambda: 1)
    monkeypatch.setattr(rs, "get_sequence_parallel_rank", lambda: 0)
    monkeypatch.setattr(rs, "get_pp_group", lambda: types.SimpleNamespace(reset_buffer=lambda: None,
                                                                          set_config=lambda **k: None))
    cls, cfg = dit_bench.TINY[family]
    model = dit_bench.build_model(cls, cfg, "cpu", torch.float32)
    cell = {"frames": 5 if family != "flux" else 1, "height": 128, "width": 160}
    inputs = dit_bench.make_inputs(family, cfg, cell["frames"], cell["height"], cell["width"], 7, "cpu",
                                   torch.float32, text_valid=[4] if family == "hunyuan" else None)
    try:
        dit_xdit.set_cell(model, family, cell, inputs)
        state = rs.get_runtime_state()
        assert type(state).__name__ == "DiTRuntimeState"
        assert state.max_condition_sequence_length == (4 if family == "hunyuan" else 7)
        state.increment_step_counter()   # what the external state could not do
    finally:
        if made_group:   # later tests may make their own group in this process
            dist.destroy_process_group()


def test_xdit_says_why_it_cannot_run():
    from xstage import dit_xdit

    why = dit_xdit.unavailable()
    if importlib.util.find_spec("xfuser") is None:
        assert "xfuser" in why
    elif not torch.cuda.is_available():
        assert "CUDA" in why
