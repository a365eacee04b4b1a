"""xstage.moe without a GPU: weight prepacking (host), activation quantisation, validation and
the fake implementation's shapes."""
import pytest

from conftest import HAVE_EXT, HAVE_TORCH, needs_torch

pytestmark = needs_torch

if HAVE_TORCH:
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode

    from xstage import moe

needs_ext = pytest.mark.skipif(not HAVE_EXT, reason="the extension xstage._C is not built")


@needs_ext
@pytest.mark.parametrize("fmt", ["w8a8", "int4_lut", "int4_lut_glu", "mxfp4", "mxfp4_glu"])
def test_prepack_formats(fmt):
    torch.manual_seed(0)
    w = torch.randn(3, 256, 256)
    p = moe.prepack(w, fmt, reference=True)
    assert p.format == fmt and (p.experts, p.n, p.k) == (3, 256, 256)
    assert p.b.dtype == torch.uint8 and p.b.shape[0] == 3
    assert p.b_scales.dtype == torch.float32 and p.b_scales.shape[0] == 3
    assert p.reference.shape == w.shape
    # the dequantised weights the kernel computes with are close to the originals
    rel = (p.reference - w).norm() / w.norm()
    assert rel < {"w8a8": 0.05, "int4_lut": 0.15, "int4_lut_glu": 0.15, "mxfp4": 0.2, "mxfp4_glu": 0.2}[fmt]
    if fmt == "w8a8":
        assert p.b.shape == (3, 256, 256) and p.b_scales.shape == (3, 2, 2)
    if fmt.startswith("int4"):
        assert p.b_scales.shape == (3, 256)
    if fmt.startswith("mxfp4"):
        assert p.b_scales.shape == (3, 2, 256)


def _nibbles(b):
    """Packed 4-bit codes [E, n, k/2] -> [E, n, k] (element 2i in the low nibble, as the kernels read)."""
    lo, hi = (b & 0x0F).to(torch.int32), (b >> 4).to(torch.int32)
    return torch.stack((lo, hi), dim=-1).flatten(-2)


@needs_ext
@pytest.mark.parametrize("fmt", ["w4a8_int4", "w4a8_mxfp4"])
def test_prepack_row_layout_w4a8(fmt):
    """The expert-parallel layer's W4A8 formats: shapes, and the reference (the weights the
    kernels compute with, ops::dequantize_*) equals decoding the packed bytes here in torch."""
    torch.manual_seed(1)
    E, n, k = 2, 256, 384
    # Rows of different magnitude, so the per-row scales matter.
    w = torch.randn(E, n, k) * torch.logspace(-2, 1, n).view(1, n, 1)
    p = moe.prepack(w, fmt, reference=True)
    assert p.format == fmt and (p.experts, p.n, p.k) == (E, n, k)
    assert p.b.dtype == torch.uint8 and tuple(p.b.shape) == (E, n, k // 2)
    codes = _nibbles(p.b)
    if fmt == "w4a8_int4":
        assert p.b_scales.dtype == torch.float32 and tuple(p.b_scales.shape) == (E, k // 128, n)
        q = torch.where(codes >= 8, codes - 16, codes).float()            # two's complement nibbles
        s = p.b_scales.transpose(1, 2).repeat_interleave(128, dim=2)      # [E, n, k]
        assert int(q.abs().max()) <= 7                                    # symmetric INT4
        dec = q * s
    else:
        assert p.b_scales.dtype == torch.uint8 and tuple(p.b_scales.shape) == (E, k // 32, n)
        e2m1 = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0])
        mag = e2m1[codes & 7]
        val = torch.where(codes >= 8, -mag, mag)
        s = torch.exp2(p.b_scales.float() - 127).transpose(1, 2).repeat_interleave(32, dim=2)
        dec = val * s
    # ops::dequantize_mxfp4_w4a8 flushes sub-blocks more than 14 binades below the row's largest:
    # none here (rows span 3 decades), so the decoding is exact.
    assert torch.equal(dec, p.reference), (dec - p.reference).abs().max()
    rel = (p.reference - w).norm() / w.norm()
    assert rel < {"w4a8_int4": 0.15, "w4a8_mxfp4": 0.2}[fmt], rel


@needs_ext
def test_prepack_bad_inputs():
    with pytest.raises(ValueError):
        moe.prepack(torch.randn(1, 100, 128), "w8a8")
    with pytest.raises(ValueError):
        moe.prepack(torch.randn(1, 128, 128), "int4_lut_glu")   # glu needs n % 256
    with pytest.raises(ValueError):
        moe.prepack(torch.randn(1, 128, 128), "fp6")
    with pytest.raises(ValueError):
        moe.prepack(torch.randn(128, 128), "w8a8")
    with pytest.raises(TypeError):
        moe.prepack(torch.ones(1, 128, 128, dtype=torch.int32), "w8a8")


@needs_ext
@pytest.mark.parametrize("granularity", ["per_128", "per_token"])
def test_quantize_activations_matches_the_host_reference(granularity):
    from xstage import _ext

    torch.manual_seed(1)
    x = torch.randn(37, 256) * 3
    q, s = moe.quantize_activations(x, granularity)
    hq, hs = _ext.load().moe_quantize_act_host(x.numpy(), granularity)
    hq, hs = torch.from_dlpack(hq), torch.from_dlpack(hs)
    torch.testing.assert_close(s, hs, rtol=1e-6, atol=0)
    # the same codes up to a rounding tie here and there
    assert (q.view(torch.uint8) != hq).float().mean() < 0.01


def test_fake_shapes():
    with FakeTensorMode():
        E, m, n, k = 4, 300, 512, 256
        a = torch.empty(m, k, dtype=torch.float8_e4m3fn, device="cuda")
        s = torch.empty(k // 128, m, device="cuda")
        b = torch.empty(E, n, k, dtype=torch.uint8, device="cuda")
        bs = torch.empty(E, n // 128, k // 128, device="cuda")
        c = torch.empty(E, dtype=torch.int32, device="cuda")
        w = moe.PackedWeights("w8a8", E, n, k, b, bs)
        out = moe.grouped_gemm(a, s, w, c, c)
        assert out.shape == (m, n) and out.dtype == torch.bfloat16
        rw = torch.empty(m, device="cuda")
        h, hs = moe.grouped_gemm(a, s, w, c, c, epilogue="swiglu", row_weights=rw)
        assert h.shape == (m, n // 2) and h.dtype == torch.float8_e4m3fn and hs.shape == (n // 2 // 128, m)
        with pytest.raises(ValueError):
            moe.grouped_gemm(a, s, w, c, c, epilogue="swiglu")          # no row weights
        with pytest.raises(TypeError):
            moe.grouped_gemm(a.to(torch.bfloat16), s, w, c, c)         # not fp8
        with pytest.raises(ValueError):
            moe.grouped_gemm(a, s[:, :10], w, c, c)                    # scales shape
        with pytest.raises(ValueError):
            moe.grouped_gemm(a, s, w, c[:2], c[:2])                     # experts


def test_cpu_tensors_are_rejected():
    E, m, n, k = 2, 8, 128, 128
    a = torch.zeros(m, k, dtype=torch.float8_e4m3fn)
    w = moe.PackedWeights("w8a8", E, n, k, torch.zeros(E, n, k, dtype=torch.uint8), torch.zeros(E, 1, 1))
    c = torch.zeros(E, dtype=torch.int32)
    with pytest.raises(ValueError) as e:
        moe.grouped_gemm(a, torch.zeros(1, m), w, c, c)
    assert "cuda" in str(e.value).lower() and "\n" not in str(e.value)


def test_expert_parallel_needs_a_group_or_the_binding():
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        pytest.skip("a process group is already initialised in this process")
    with pytest.raises((NotImplementedError, ValueError)) as e:
        moe.ExpertParallelMoE(None, hidden=256, intermediate=256, experts=8, top_k=2)
    assert "\n" not in str(e.value)


@needs_ext
def test_expert_parallel_refuses_an_unknown_weight_format():
    from xstage import _ext

    if not getattr(_ext.load(), "has_ep_moe", False):
        pytest.skip("the extension has no EP MoE binding")
    with pytest.raises(ValueError, match="weights 'int4_lut_glu'"):
        moe.ExpertParallelMoE(None, hidden=256, intermediate=256, experts=8, top_k=2, weights="int4_lut_glu")
    with pytest.raises(ValueError, match="weights 'mxfp4' run fused only"):
        moe.ExpertParallelMoE(None, hidden=256, intermediate=256, experts=8, top_k=2, kind="unfused", weights="mxfp4")


@needs_ext
@pytest.mark.parametrize("weights", ["int4_lut_tok", "mxfp4_tok"])
def test_fused_per_token_weights_need_the_per_token_kernel(weights, monkeypatch):
    """kind='mega' with per-token weights: refused naming XSTAGE_MEGA_W4A8_TOK where the extension
    leaves the kernel out, accepted (up to the missing process group) where it has it."""
    import torch.distributed as dist

    from xstage import _ext

    C = _ext.load()
    if not getattr(C, "has_ep_moe", False):
        pytest.skip("the extension has no EP MoE binding")
    if dist.is_available() and dist.is_initialized():
        pytest.skip("a process group is already initialised in this process")
    monkeypatch.setattr(C, "has_mega_w4a8_tok", False)
    with pytest.raises(NotImplementedError, match="XSTAGE_MEGA_W4A8_TOK") as e:
        moe.ExpertParallelMoE(None, hidden=256, intermediate=256, experts=8, top_k=2, kind="mega", weights=weights)
    assert "\n" not in str(e.value)
    monkeypatch.setattr(C, "has_mega_w4a8_tok", True)
    with pytest.raises(ValueError, match="torch.distributed is not initialised"):  # past the format checks
        moe.ExpertParallelMoE(None, hidden=256, intermediate=256, experts=8, top_k=2, kind="mega", weights=weights)
    with pytest.raises(ValueError, match="torch.distributed is not initialised"):  # the unfused layer in any build
        moe.ExpertParallelMoE(None, hidden=256, intermediate=256, experts=8, top_k=2, kind="unfused", weights=weights)
