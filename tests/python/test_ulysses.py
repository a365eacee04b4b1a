"""xstage.UlyssesAttention: the All-to-All plumbing on CPU (gloo, 3 processes, uneven sequence
shards and head groups, joint tokens) with an fp32 reference attention in place of the kernel,
P = 1, and on the GPU at P = 1 with the kernel."""
import os

import pytest

from conftest import HAVE_TORCH, needs_torch

if HAVE_TORCH:
    import torch
    import torch.nn.functional as F

    import xstage
    from xstage.ulysses import UlyssesAttention, head_split


def ref_attention(q, k, v, causal, scale):
    o = F.scaled_dot_product_attention(q.transpose(1, 2).float(), k.transpose(1, 2).float(),
                                       v.transpose(1, 2).float(), is_causal=causal, scale=scale)
    return o.transpose(1, 2).to(q.dtype)


def _inputs(B, S, H, D, T, seed=0):
    g = torch.Generator().manual_seed(seed)
    qkv = [torch.randn(B, S, H, D, generator=g) for _ in range(3)]
    joint = [torch.randn(B, T, H, D, generator=g) for _ in range(3)]
    return qkv, joint


def _worker(rank, world, init_file, B, S, H, D, T, position, result_file):
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    try:
        (q, k, v), (jq, jk, jv) = _inputs(B, S, H, D, T)
        lens = [S // world + (r < S % world) for r in range(world)]
        s0 = sum(lens[:rank])
        mine = [t[:, s0:s0 + lens[rank]] for t in (q, k, v)]
        attn = UlyssesAttention(variant="torch-a2a", attention_fn=ref_attention)
        o = attn(*mine)
        expect = ref_attention(q, k, v, False, None)[:, s0:s0 + lens[rank]]
        err = (o - expect).abs().max().item()
        o2, oj = attn(*mine, joint_q=jq, joint_k=jk, joint_v=jv, joint_position=position)
        cat = (lambda j, t: torch.cat((j, t), 1)) if position == "front" else (lambda j, t: torch.cat((t, j), 1))
        full = ref_attention(cat(jq, q), cat(jk, k), cat(jv, v), False, None)
        if position == "front":
            ej, es = full[:, :T], full[:, T:]
        else:
            ej, es = full[:, S:], full[:, :S]
        err2 = max((o2 - es[:, s0:s0 + lens[rank]]).abs().max().item(), (oj - ej).abs().max().item())
        with open(f"{result_file}.{rank}", "w") as f:
            f.write(f"{err} {err2} {tuple(o.shape)}")
    finally:
        dist.destroy_process_group()


@needs_torch
@pytest.mark.parametrize("S,H,position", [(100, 6, "front"), (101, 5, "back"), (7, 2, "front")])
def test_uneven_shards_heads_and_joint_tokens_over_gloo(tmp_path, S, H, position):
    import torch.distributed as dist
    import torch.multiprocessing as mp

    if not dist.is_available() or not dist.is_gloo_available():
        pytest.skip("torch.distributed with gloo is not available")
    world, B, D, T = 3, 2, 16, 9
    mp.spawn(_worker, args=(world, str(tmp_path / "init"), B, S, H, D, T, position, str(tmp_path / "res")),
             nprocs=world, join=True)
    lens = [S // world + (r < S % world) for r in range(world)]
    for r in range(world):
        err, err2, shape = open(tmp_path / f"res.{r}").read().split(" ", 2)
        assert float(err) < 1e-5 and float(err2) < 1e-5, (r, err, err2)
        assert shape == str((B, lens[r], H, D))


@needs_torch
def test_head_split():
    assert head_split(5, 3) == [2, 2, 1]
    assert head_split(2, 3) == [1, 1, 0]
    assert sum(head_split(40, 8)) == 40


@needs_torch
def test_single_rank_is_plain_attention_with_joint_tokens():
    (q, k, v), (jq, jk, jv) = _inputs(1, 33, 4, 16, 5)
    attn = UlyssesAttention(None, attention_fn=ref_attention)
    assert attn.world == 1
    torch.testing.assert_close(attn(q, k, v), ref_attention(q, k, v, False, None))
    o, oj = attn(q, k, v, joint_q=jq, joint_k=jk, joint_v=jv, joint_position="back")
    full = ref_attention(torch.cat((q, jq), 1), torch.cat((k, jk), 1), torch.cat((v, jv), 1), False, None)
    torch.testing.assert_close(o, full[:, :33])
    torch.testing.assert_close(oj, full[:, 33:])


@needs_torch
def test_bad_arguments():
    with pytest.raises(NotImplementedError):
        UlyssesAttention(None, scatter_idx=1, gather_idx=2)
    from conftest import ext_has

    if not ext_has("ulysses"):
        with pytest.raises(NotImplementedError):
            UlyssesAttention(None, variant="fused-shaped")
    with pytest.raises(ValueError):
        UlyssesAttention(None, variant="nope")
    with pytest.raises(ValueError, match="unknown tile"):
        UlyssesAttention(None, tile="wide")
    with pytest.raises(ValueError, match="staged tile only"):
        UlyssesAttention(None, variant="fused-shaped", tile="long_kv")
    assert "tile=long_kv" in repr(UlyssesAttention(None, attention_fn=ref_attention, tile="long_kv"))
    attn = UlyssesAttention(None, attention_fn=ref_attention)
    q = torch.zeros(1, 8, 2, 16)
    with pytest.raises(ValueError):
        attn(q, q[:, :4], q)
    with pytest.raises(ValueError):
        attn(q, q, q, joint_q=q)


@pytest.mark.gpu(feature="attention")
def test_p1_on_gpu_is_xstage_attention():
    q = torch.randn(1, 1000, 4, 128, device="cuda", dtype=torch.bfloat16)
    attn = xstage.UlyssesAttention(None)
    assert torch.equal(attn(q, q, q), xstage.attention(q, q, q))


def _gpu_worker(rank, world, init_file, variant, S, H, result_file, tile="staged"):
    import torch.distributed as dist

    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", init_method=f"file://{init_file}", rank=rank, world_size=world)
    try:
        g = torch.Generator(device="cuda").manual_seed(7)
        B, D = 1, 128
        q, k, v = (torch.randn(B, S, H, D, device="cuda", generator=g).to(torch.bfloat16) for _ in range(3))
        lens = [S // world + (r < S % world) for r in range(world)]
        s0 = sum(lens[:rank])
        attn = xstage.UlyssesAttention(variant=variant, tile=tile)
        o = attn(*(t[:, s0:s0 + lens[rank]].contiguous() for t in (q, k, v)))
        o = attn(*(t[:, s0:s0 + lens[rank]].contiguous() for t in (q, k, v)))   # second call: planned path
        expect = xstage.attention(q, k, v)[:, s0:s0 + lens[rank]]
        err = (o.float() - expect.float()).abs().max().item()
        with open(f"{result_file}.{rank}", "w") as f:
            f.write(f"{err} {attn.variant} {attn.fallbacks}")
        from xstage import team

        attn.close()
        team.release_all()
    finally:
        dist.destroy_process_group()


@pytest.mark.gpu(feature="attention")
@pytest.mark.parametrize("variant,S,H,tile", [("torch-a2a", 1001, 6, "staged"), ("fused-shaped", 4096, 8, "staged"),
                                              ("fused", 4096, 8, "staged"), ("serial", 2048, 8, "staged"),
                                              ("fused", 4096, 8, "long_kv"), ("comm-sm", 2048, 8, "long_kv")])
def test_two_gpus(tmp_path, variant, S, H, tile):
    import torch.multiprocessing as mp

    from conftest import ext_has

    if torch.cuda.device_count() < 2:
        pytest.skip("needs 2 GPUs (the 2-GPU run)")
    if variant != "torch-a2a" and not ext_has("ulysses"):
        pytest.skip("the extension has no Ulysses operator binding")
    mp.spawn(_gpu_worker, args=(2, str(tmp_path / "init"), variant, S, H, str(tmp_path / "res"), tile), nprocs=2,
             join=True)
    for r in range(2):
        err, var, fallbacks = open(tmp_path / f"res.{r}").read().split()
        assert float(err) < 2e-2 and var == variant and fallbacks == "0", (r, err, var, fallbacks)
