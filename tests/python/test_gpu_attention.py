"""xstage.attention on an H200: against torch SDPA in fp32 on awkward shapes, strided inputs,
LSE, torch.compile without graph breaks, CUDA-graph capture and replay, the DLPack path."""
import math

import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not importable")

pytestmark = pytest.mark.gpu(feature="attention")

import torch.nn.functional as F  # noqa: E402

import xstage  # noqa: E402
from xstage import attention_op  # noqa: E402


def reference(q, k, v, causal, scale):
    """fp32 SDPA (math) on [B, S, H, D] inputs; returns o [B, Sq, H, D] and lse [B, H, Sq]."""
    qf, kf, vf = (t.float().transpose(1, 2) for t in (q, k, v))
    s = (qf @ kf.transpose(-1, -2)) * scale
    if causal:
        Sq, Skv = s.shape[-2:]
        mask = torch.ones(Sq, Skv, dtype=torch.bool, device=q.device).tril()
        s = s.masked_fill(~mask, float("-inf"))
    lse = torch.logsumexp(s, dim=-1)
    o = F.scaled_dot_product_attention(qf, kf, vf, is_causal=causal, scale=scale)
    return o.transpose(1, 2), lse


def tol(dtype):
    return dict(atol=2e-2, rtol=2e-2) if dtype == torch.bfloat16 else dict(atol=4e-3, rtol=4e-3)


def rand(*shape, dtype=torch.bfloat16):
    return torch.randn(*shape, device="cuda", dtype=torch.float32).to(dtype)


SHAPES = [  # B, Sq, Skv, H, D
    (1, 1000, 1000, 4, 128),    # S not a multiple of 128
    (2, 333, 4097, 3, 64),      # q_len != kv_len, odd sizes
    (1, 4097, 333, 2, 128),     # more queries than keys
    (1, 77, 9000, 2, 128),      # long-key tile (>= 8192 keys), fewer tiles than SMs
    (1, 4480, 9000, 4, 128),    # long-key tile, 140 tiles on 132 SMs: the last wave is split
    (3, 1, 129, 5, 64),         # one query
]


@pytest.mark.parametrize("B,Sq,Skv,H,D", SHAPES)
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_matches_sdpa_fp32(B, Sq, Skv, H, D, causal, dtype):
    dt = getattr(torch, dtype)
    torch.manual_seed(B * 1000 + Sq + Skv)
    q, k, v = rand(B, Sq, H, D, dtype=dt), rand(B, Skv, H, D, dtype=dt), rand(B, Skv, H, D, dtype=dt)
    o, lse = xstage.attention(q, k, v, causal=causal, return_lse=True)
    ro, rlse = reference(q, k, v, causal, 1 / math.sqrt(D))
    torch.testing.assert_close(o.float(), ro, **tol(dt))
    torch.testing.assert_close(lse, rlse, atol=2e-3, rtol=2e-3)


def test_softmax_scale():
    q, k, v = rand(1, 200, 2, 64), rand(1, 300, 2, 64), rand(1, 300, 2, 64)
    o = xstage.attention(q, k, v, softmax_scale=0.05)
    torch.testing.assert_close(o.float(), reference(q, k, v, False, 0.05)[0], **tol(torch.bfloat16))


def test_packed_qkv_slice_is_read_in_place():
    B, S, H, D = 2, 1000, 4, 128
    qkv = rand(B, S, 3, H, D)
    q, k, v = qkv.unbind(2)                       # strides (S*3*H*D, 3*H*D, D, 1)
    assert attention_op._tma_ready(q) is q        # no copy
    o = xstage.attention(q, k, v, causal=True)
    torch.testing.assert_close(o.float(), reference(q, k, v, True, 1 / math.sqrt(D))[0], **tol(torch.bfloat16))


@pytest.mark.parametrize("layout", ["bhsd", "misaligned", "expanded"])
def test_other_strides(layout):
    B, S, H, D = 2, 300, 4, 64
    if layout == "bhsd":                           # (B, H, S, D) memory viewed as BSHD: strides fine
        q, k, v = (rand(B, H, S, D).transpose(1, 2) for _ in range(3))
    elif layout == "misaligned":                   # 2-byte offset: copied first
        buf = rand(3 * B * S * H * D + 1)
        q, k, v = (buf[1 + i * B * S * H * D: 1 + (i + 1) * B * S * H * D].view(B, S, H, D) for i in range(3))
        assert attention_op._tma_ready(q) is not q
    else:                                          # broadcast batch (stride 0): copied first
        q = rand(B, S, H, D)
        k, v = rand(1, S, H, D).expand(B, S, H, D), rand(1, S, H, D).expand(B, S, H, D)
    o = xstage.attention(q, k, v)
    torch.testing.assert_close(o.float(), reference(q, k, v, False, 1 / math.sqrt(D))[0], **tol(torch.bfloat16))


def test_dlpack_path_is_bitwise_the_same(monkeypatch):
    q, k, v = rand(2, 500, 3, 128), rand(2, 700, 3, 128), rand(2, 700, 3, 128)
    o1, l1 = xstage.attention(q, k, v, causal=True, return_lse=True)
    monkeypatch.setattr(attention_op, "_USE_DLPACK", True)
    o2, l2 = xstage.attention(q, k, v, causal=True, return_lse=True)
    assert torch.equal(o1, o2) and torch.equal(l1, l2)


def test_on_a_side_stream():
    q = rand(1, 1024, 4, 128)
    ref = xstage.attention(q, q, q)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        o = xstage.attention(q, q, q)
    torch.cuda.current_stream().wait_stream(s)
    assert torch.equal(o, ref)


def test_empty_query():
    q = rand(1, 0, 2, 64)
    k = rand(1, 10, 2, 64)
    assert xstage.attention(q, k, k).shape == (1, 0, 2, 64)


def test_backward_raises():
    q = rand(1, 128, 2, 64).requires_grad_()
    o = xstage.attention(q, q, q)
    with pytest.raises(NotImplementedError):
        o.sum().backward()


def test_opcheck():
    q, k, v = rand(1, 256, 2, 64), rand(1, 384, 2, 64), rand(1, 384, 2, 64)
    torch.library.opcheck(torch.ops.xstage.attention_fwd.default, (q, k, v, True, 0.0, True),
                          test_utils=("test_schema", "test_faketensor", "test_aot_dispatch_static"))


class Block(torch.nn.Module):
    def __init__(self, dim=512, heads=4):
        super().__init__()
        self.heads = heads
        self.qkv = torch.nn.Linear(dim, 3 * dim, device="cuda", dtype=torch.bfloat16)
        self.proj = torch.nn.Linear(dim, dim, device="cuda", dtype=torch.bfloat16)

    def forward(self, x):
        B, S, C = x.shape
        qkv = self.qkv(x).view(B, S, 3, self.heads, C // self.heads)
        q, k, v = qkv.unbind(2)
        o = xstage.attention(q, k, v)
        return self.proj(o.reshape(B, S, C))


@torch.no_grad()
def test_torch_compile_has_no_graph_breaks():
    torch._dynamo.reset()
    m = Block()
    x = rand(2, 1000, 512)
    explanation = torch._dynamo.explain(m)(x)
    assert explanation.graph_break_count == 0, explanation.break_reasons
    assert explanation.graph_count == 1
    torch._dynamo.reset()
    compiled = torch.compile(m, fullgraph=True)
    torch.testing.assert_close(compiled(x), m(x), atol=2e-2, rtol=2e-2)


@torch.no_grad()
@pytest.mark.parametrize("Sq,Skv", [(1000, 1000), (4480, 9000)])   # long-key tile, split tail: workspace under capture
def test_cuda_graph_of_10_calls_replays_identically(Sq, Skv):
    q, k, v = rand(1, Sq, 4, 128), rand(1, Skv, 4, 128), rand(1, Skv, 4, 128)
    eager = [xstage.attention(q * (i + 1), k, v) for i in range(10)]
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):                      # first calls on the capture stream happen here
        outs = [xstage.attention(q * (i + 1), k, v) for i in range(10)]
    for _ in range(2):
        g.replay()
        torch.cuda.synchronize()
        for a, b in zip(outs, eager):
            assert torch.equal(a, b)
    q.copy_(rand(1, Sq, 4, 128))                   # new inputs, same graph
    g.replay()
    torch.cuda.synchronize()
    assert torch.equal(outs[3], xstage.attention(q * 4, k, v))
