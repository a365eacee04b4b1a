"""xstage.moe.grouped_gemm on an H200 against an fp32 reference built from the dequantised
weights the kernel computes with (prepack(..., reference=True)) and the dequantised activations."""
import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not importable")

pytestmark = pytest.mark.gpu(feature="moe")

import torch.nn.functional as F  # noqa: E402

from xstage import moe  # noqa: E402

CASES = [  # format, activation scales, epilogue
    ("w8a8", "per_128", "bf16"),
    ("w8a8", "per_128", "swiglu"),
    ("int4_lut", "per_token", "bf16"),
    ("int4_lut", "per_128", "bf16"),
    ("int4_lut_glu", "per_token", "swiglu"),
    ("mxfp4", "per_token", "bf16"),
    ("mxfp4_glu", "per_token", "swiglu"),
]


def dequant_act(q, s):
    m, k = q.shape
    if s.dim() == 1:
        return q.float() * s[:, None]
    return (q.float().view(m, k // 128, 128) * s.t()[:, :, None]).view(m, k)


@pytest.mark.parametrize("fmt,act,epilogue", CASES)
@pytest.mark.parametrize("counts", [[0, 200, 513, 64], [300, 300, 300, 300]])
def test_grouped_gemm_matches_reference(fmt, act, epilogue, counts):
    torch.manual_seed(len(fmt) * 7 + sum(counts))
    E, n, k = len(counts), 512, 256
    w = torch.randn(E, n, k) * 0.05
    pw = moe.prepack(w, fmt, reference=True, device="cuda")
    m = sum(counts)
    x = torch.randn(m, k, device="cuda")
    a, a_s = moe.quantize_activations(x, act)
    c = torch.tensor(counts, dtype=torch.int32, device="cuda")
    off = torch.cumsum(torch.tensor([0] + counts[:-1]), 0).to(torch.int32).cuda()
    xa = dequant_act(a, a_s)
    ref = torch.empty(m, n, device="cuda")
    start = 0
    for e, cnt in enumerate(counts):
        ref[start:start + cnt] = xa[start:start + cnt] @ pw.reference[e].t()
        start += cnt
    if epilogue == "bf16":
        out = moe.grouped_gemm(a, a_s, pw, c, off)
        assert out.shape == (m, n) and out.dtype == torch.bfloat16
        torch.testing.assert_close(out.float(), ref, atol=1e-2 * ref.abs().max().item(), rtol=1e-2)
    else:
        rw = torch.rand(m, device="cuda")
        h, hs = moe.grouped_gemm(a, a_s, pw, c, off, epilogue="swiglu", row_weights=rw)
        assert h.shape == (m, n // 2) and hs.shape == (n // 2 // 128, m)
        expect = F.silu(ref[:, : n // 2]) * ref[:, n // 2:] * rw[:, None]
        got = moe.dequantize_output(h, hs)
        rel = ((got - expect).norm() / expect.norm()).item()
        assert rel < 0.05, rel


def test_grouped_gemm_in_a_cuda_graph():
    counts = [128, 0, 256]
    E, n, k = 3, 256, 256
    pw = moe.prepack(torch.randn(E, n, k) * 0.05, "w8a8", device="cuda")
    a, a_s = moe.quantize_activations(torch.randn(sum(counts), k, device="cuda"))
    c = torch.tensor(counts, dtype=torch.int32, device="cuda")
    off = torch.tensor([0, 128, 128], dtype=torch.int32, device="cuda")
    eager = moe.grouped_gemm(a, a_s, pw, c, off)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        out = moe.grouped_gemm(a, a_s, pw, c, off)
    g.replay()
    torch.cuda.synchronize()
    assert torch.equal(out, eager)


def test_bad_routing_is_an_error_not_a_crash():
    pw = moe.prepack(torch.randn(2, 128, 128), "w8a8", device="cuda")
    a, a_s = moe.quantize_activations(torch.randn(64, 128, device="cuda"))
    c = torch.tensor([32, 32], dtype=torch.int32, device="cuda")
    with pytest.raises(ValueError):
        moe.grouped_gemm(a, a_s, pw, c, c, epilogue="nope")


def _ep_reference(x, ids, wts, w1_ref, w2_ref, I, per_token=False, fused=False):
    """ops::moe_layer_reference's math in torch: per token, the sum over its k choices of
    bf16(Linear-2(fp8(silu(gate) * up * weight))). per_token: x with one scale per token, and h's
    per-128 codes requantised to the row's largest scale (the unfused layer's per-token recipe);
    with fused, h rounded to bf16 and quantised once with one scale per token (the fused kernel's,
    MoeLayerWeights::per_token_h_from_bf16)."""
    if per_token:
        xq, xs = moe.quantize_activations(x, "per_token")
        xd = xq.float() * xs[:, None]
    else:
        xq, xs = moe.quantize_activations(x)
        xd = dequant_act(xq, xs)
    T, H = x.shape
    out = torch.zeros(T, H, device=x.device)
    for e in range(w1_ref.shape[0]):
        t, j = (ids == e).nonzero(as_tuple=True)
        if t.numel() == 0:
            continue
        gu = xd[t] @ w1_ref[e].t()
        h = F.silu(gu[:, :I]) * gu[:, I:] * wts[t, j][:, None]
        if per_token and fused:  # bf16 h, one scale per token from the bf16 row's |h| maximum
            hq, hs = moe.quantize_activations(h.to(torch.bfloat16).float(), "per_token")
            hd = hq.float() * hs[:, None]
        elif per_token:  # codes of each 128-channel block rescaled by s / S, S = the row's largest s
            hq, hs = moe.quantize_activations(h)
            S = hs.amax(dim=0)                                               # [m]
            f = (hs / S).t().unsqueeze(2)                                    # [m, I/128, 1]
            q2 = (hq.float().view(-1, I // 128, 128) * f).to(torch.float8_e4m3fn).view(-1, I)
            hd = q2.float() * S[:, None]
        else:
            hd = dequant_act(*moe.quantize_activations(h))
        y = (hd @ w2_ref[e].t()).to(torch.bfloat16).float()
        out.index_add_(0, t, y)
    return out


@pytest.mark.parametrize("kind,schedule,weights", [
    ("unfused", "interleaved", "w8a8"), ("mega", "interleaved", "w8a8"), ("mega", "expert-wave", "w8a8"),
    ("mega", "auto", "w8a8"), ("unfused", "interleaved", "w4a8_int4"), ("mega", "interleaved", "w4a8_int4"),
    ("unfused", "interleaved", "w4a8_mxfp4"), ("mega", "expert-wave", "w4a8_mxfp4"),
    ("unfused", "interleaved", "int4_lut"), ("mega", "interleaved", "int4_lut"), ("mega", "expert-wave", "mxfp4"),
    ("unfused", "interleaved", "int4_lut_tok"), ("unfused", "interleaved", "mxfp4_tok"),
    ("mega", "interleaved", "int4_lut_tok"), ("mega", "expert-wave", "mxfp4_tok")])
def test_expert_parallel_layer_on_one_rank(tmp_path, kind, schedule, weights):
    import torch.distributed as dist

    from xstage import _ext, team

    if not getattr(_ext.load(), "has_ep_moe", False):
        pytest.skip("the extension has no EP MoE binding (team.hpp without Team::from_unique_id)")
    if kind == "mega" and weights in ("int4_lut", "mxfp4") and not getattr(_ext.load(), "has_mega_w4a8_rs", False):
        pytest.skip("the extension leaves out the fused register-operand W4A8 kernel (XSTAGE_MEGA_W4A8_RS)")
    if kind == "mega" and weights.endswith("_tok") and not getattr(_ext.load(), "has_mega_w4a8_tok", False):
        pytest.skip("the extension leaves out the fused per-token W4A8 kernel (XSTAGE_MEGA_W4A8_TOK)")
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'init'}", rank=0, world_size=1)
    try:
        torch.manual_seed(3)
        E, H, I, k, T = 8, 256, 256, 2, 96
        layer = moe.ExpertParallelMoE(hidden=H, intermediate=I, experts=E, top_k=k, kind=kind, schedule=schedule,
                                      weights=weights)
        layer.load_weights(torch.randn(E, 2 * I, H) * 0.05, torch.randn(E, H, I) * 0.05, reference=True)
        x = torch.randn(T, H, device="cuda")
        ids = torch.stack([torch.randperm(E, device="cuda")[:k] for _ in range(T)]).to(torch.int32)
        wts = torch.rand(T, k, device="cuda")
        y = layer(x, ids, wts)
        torch.cuda.synchronize()
        team.team_for().check_device_status()
        ref = _ep_reference(x, ids, wts, layer.w1.reference, layer.w2.reference, I, per_token=weights.endswith("_tok"),
                            fused=kind == "mega")
        rel = ((y.float() - ref).norm() / ref.norm()).item()
        assert y.shape == (T, H) and y.dtype == torch.bfloat16 and rel < 0.03, rel
        assert torch.equal(layer(x, ids, wts), y)          # a second call (the layer is cached per T)
        with pytest.raises(ValueError):
            team.release()                                  # the layer still uses the team
        layer.close()
        team.release()
    finally:
        dist.destroy_process_group()
