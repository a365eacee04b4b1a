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
