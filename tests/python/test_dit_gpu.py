"""The "xstage" diffusers backend on the GPU: tiny Wan / Flux / HunyuanVideo configurations of the
real diffusers classes in bf16, the model output with xstage attention against the stock native
backend (and both against an fp32 run of the same weights), strict mode (no call may fall back),
HunyuanVideo's ragged text-padding mask, the bench's own smoke cells, and, with two GPUs,
diffusers' context parallelism running xstage.UlyssesAttention over NCCL."""
import json
import os
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not importable")
pytest.importorskip("diffusers", reason="diffusers is not importable (pip install diffusers)")

pytestmark = pytest.mark.gpu(feature="attention")

import xstage.diffusers_backend as xsd  # noqa: E402
from xstage import dit_bench  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# sizes with token counts that are not multiples of the kernel's tiles
SIZES = {"wan": dict(frames=13, height=112, width=176, text=19),    # 4 x 7 x 11 = 308 video tokens
         "flux": dict(frames=1, height=400, width=336, text=77),    # 25 x 21 = 525 image tokens
         "hunyuan": dict(frames=9, height=144, width=112, text=23)}  # 3 x 9 x 7 = 189 video tokens


def rel(a, b):
    return ((a.float() - b.float()).norm() / b.float().norm()).item()


def build(family, head_dim, seed=0):
    cls, cfg = dit_bench.TINY[family]
    cfg = dict(cfg, attention_head_dim=head_dim)
    rope = "rope_axes_dim" if family == "hunyuan" else "axes_dims_rope"
    if rope in cfg:
        cfg[rope] = [16, 24, 24] if head_dim == 64 else [16, 56, 56]
    torch.manual_seed(seed)
    return dit_bench.build_model(cls, cfg, "cuda", torch.float32), cfg


def run(model, kw, backend):
    model.set_attention_backend(backend)
    with torch.no_grad():
        return model(**kw)[0].float()


@pytest.fixture(autouse=True)
def _strict():
    xsd.register()
    xsd.set_strict(True)
    xsd.reset_fallbacks()
    yield
    xsd.set_strict(False)


def _to_bf16(model, kw):
    for name, p in model.named_parameters():
        if not dit_bench.keep_fp32(model, name):
            p.data = p.data.to(torch.bfloat16)
    return {k: (v.to(torch.bfloat16) if torch.is_tensor(v) and v.is_floating_point() else v) for k, v in kw.items()}


@pytest.mark.parametrize("head_dim", [64, 128])
@pytest.mark.parametrize("family", ["wan", "flux", "hunyuan"])
def test_model_output_xstage_vs_native(family, head_dim):
    model, cfg = build(family, head_dim)
    s = SIZES[family]
    kw32 = dit_bench.make_inputs(family, cfg, s["frames"], s["height"], s["width"], s["text"], "cuda", torch.float32,
                                 text_valid=[s["text"] - 5] if family == "hunyuan" else None)
    truth = run(model, kw32, "native")                     # fp32 weights and activations
    kw = _to_bf16(model, kw32)
    native = run(model, kw, "native")
    out = run(model, kw, "xstage")
    calls = xsd.calls()
    plan = dit_bench.attention_plan(family, cfg, dit_bench.tokens(family, cfg, s["frames"], s["height"], s["width"]),
                                    s["text"])
    assert xsd.fallbacks() == {} and calls.get("local") == sum(p[0] for p in plan), calls
    assert torch.isfinite(out).all()
    e_x, e_n = rel(out, native), rel(native, truth)
    assert e_x < 2e-2, (e_x, e_n)
    assert rel(out, truth) < 2 * e_n + 5e-3, (rel(out, truth), e_n)


def test_hunyuan_ragged_text_mask_batch2():
    model, cfg = build("hunyuan", 128)
    s = SIZES["hunyuan"]
    kw32 = dit_bench.make_inputs("hunyuan", cfg, s["frames"], s["height"], s["width"], s["text"], "cuda",
                                 torch.float32, batch=2, text_valid=[s["text"], 4])
    truth = run(model, kw32, "native")
    kw = _to_bf16(model, kw32)
    native = run(model, kw, "native")
    out = run(model, kw, "xstage")
    assert xsd.fallbacks() == {}
    assert rel(out, native) < 2e-2 and rel(out, truth) < 2 * rel(native, truth) + 5e-3
    for b in range(2):   # each row on its own (its own valid length) gives the same answer
        kb = {k: (v[b:b + 1] if torch.is_tensor(v) and v.dim() > 0 and v.shape[0] == 2 else v) for k, v in kw.items()}
        torch.testing.assert_close(run(model, kb, "xstage"), out[b:b + 1], atol=2e-2, rtol=2e-2)


def test_bench_smoke_cells(tmp_path):
    """python -m xstage.bench dit on the tiny cells: every variant runs, the xstage rows pass the
    output check with every dispatched call served by the kernel, the JSON is complete."""
    path = tmp_path / "dit.json"
    env = {**os.environ, "PYTHONPATH": os.path.join(REPO, "python") + os.pathsep + os.environ.get("PYTHONPATH", "")}
    r = subprocess.run([sys.executable, "-m", "xstage.bench", "dit", "--models", "tiny-wan,tiny-flux,tiny-hunyuan",
                        "--iters", "3", "--warmup", "1", "--json", str(path), "--plot", str(tmp_path / "dit.png")],
                       env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    doc = json.loads(path.read_text())
    assert doc["schema"] == "xstage.bench.dit.v1" and len(doc["cells"]) == 3
    for cell in doc["cells"]:
        rows = {x["variant"]: x for x in cell["results"]}
        assert {"native", "cudnn", "xstage"} <= set(rows), cell
        x = rows["xstage"]
        assert x["check_ok"] and x["xstage_fallbacks"] == {} and x["iters"] == 3 and x["iters_below_default"]
        fam = dit_bench.FAMILY[cell["class"]]
        plan = dit_bench.attention_plan(fam, cell["config"], cell["tokens"], cell["text"])
        assert x["attention_calls"] == sum(p[0] for p in plan) == x["xstage_calls"]["local"]
        assert 0 < x["attention_share"] < 1


def _cp_worker(rank, world, port, out_dir):
    import torch.distributed as dist
    from diffusers import ContextParallelConfig

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", rank=rank, world_size=world, device_id=torch.device("cuda", rank))
    try:
        xsd.register()
        xsd.set_strict(True)
        res = []
        for family, cp_kw in (("flux", dict(ulysses_degree=2, ulysses_anything=True)), ("wan", dict(ulysses_degree=2))):
            model, cfg = build(family, 128)
            s = dict(SIZES[family])
            if family == "wan":
                s.update(height=128, width=176)     # 4 x 8 x 11 = 352 tokens: even shards for plain Ulysses
            kw = _to_bf16(model, dit_bench.make_inputs(family, cfg, s["frames"], s["height"], s["width"], s["text"],
                                                        "cuda", torch.float32))
            ref = run(model, kw, "xstage")
            xsd.reset_fallbacks()
            model.enable_parallelism(config=ContextParallelConfig(**cp_kw))
            out = run(model, kw, "xstage")
            res.append(f"{family} {rel(out, ref)} {xsd.calls().get('ulysses', 0)} {sum(xsd.fallbacks().values())}")
            del model
        with open(os.path.join(out_dir, f"cp.{rank}"), "w") as f:
            f.write("\n".join(res))
    finally:
        dist.destroy_process_group()


def test_context_parallel_two_gpus(tmp_path):
    """diffusers CP (Flux ulysses_anything: uneven joint-token shards; Wan plain Ulysses) with the
    xstage backend over NCCL on 2 GPUs, against the same model unsharded on one GPU."""
    if torch.cuda.device_count() < 2:
        pytest.skip("needs 2 GPUs (diffusers' ContextParallelConfig needs ulysses_degree >= 2)")
    import socket

    import torch.multiprocessing as mp

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    mp.spawn(_cp_worker, args=(2, port, str(tmp_path)), nprocs=2, join=True)
    for r in range(2):
        for line in open(tmp_path / f"cp.{r}").read().splitlines():
            family, err, n, fb = line.split()
            assert float(err) < 2e-2 and int(n) > 0 and fb == "0", (r, line)


def test_xdit_variant_on_one_gpu(tmp_path):
    """The xdit variant (xfuser's model classes, Ulysses degree 1, the bench model's weights) on
    the tiny cells: it runs, and its output matches the stock model's at bf16 level."""
    pytest.importorskip("xfuser", reason="xfuser is not installed (scripts/dit-wheels --xdit, carried)")
    path = tmp_path / "xdit.json"
    env = {**os.environ, "PYTHONPATH": os.path.join(REPO, "python") + os.pathsep + os.environ.get("PYTHONPATH", "")}
    r = subprocess.run([sys.executable, "-m", "xstage.bench", "dit", "--models", "tiny-wan,tiny-flux,tiny-hunyuan",
                        "--variants", "native,cudnn,xdit", "--iters", "3", "--warmup", "1", "--json", str(path)],
                       env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    for cell in json.loads(path.read_text())["cells"]:
        x = {row["variant"]: row for row in cell["results"]}["xdit"]
        assert "error" not in x and x["check_ok"] and x["median_ms"] > 0, x
