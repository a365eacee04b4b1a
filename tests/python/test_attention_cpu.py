"""xstage.attention without a GPU: argument validation (one-line Python exceptions) and the
fake implementation's shapes (what torch.compile and FakeTensorMode see)."""
import pytest

from conftest import HAVE_TORCH, needs_torch

pytestmark = needs_torch

if HAVE_TORCH:
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode

    import xstage


def fake(*shape, dtype=None, device="cuda"):
    return torch.empty(*shape, dtype=dtype or torch.bfloat16, device=device)


@pytest.fixture
def mode():
    with FakeTensorMode() as m:
        yield m


@pytest.mark.parametrize("B,Sq,Skv,H,D", [(1, 1000, 1000, 8, 128), (2, 333, 4097, 3, 64), (1, 1, 17, 1, 128)])
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_fake_shapes(mode, B, Sq, Skv, H, D, dtype):
    dt = getattr(torch, dtype)
    q, k, v = fake(B, Sq, H, D, dtype=dt), fake(B, Skv, H, D, dtype=dt), fake(B, Skv, H, D, dtype=dt)
    o = xstage.attention(q, k, v)
    assert o.shape == (B, Sq, H, D) and o.dtype == dt and o.device.type == "cuda"
    o, lse = xstage.attention(q, k, v, causal=True, softmax_scale=0.1, return_lse=True)
    assert o.shape == (B, Sq, H, D) and lse.shape == (B, H, Sq) and lse.dtype == torch.float32


def test_fake_packed_qkv_slice(mode):
    qkv = fake(2, 300, 3, 4, 128)
    q, k, v = qkv.unbind(2)
    assert xstage.attention(q, k, v).shape == (2, 300, 4, 128)


def test_op_is_registered_with_a_schema():
    op = torch.ops.xstage.attention_fwd.default
    assert "causal" in str(op._schema) and "return_lse" in str(op._schema)


def _raises(exc, *args, **kw):
    with pytest.raises(exc) as e:
        xstage.attention(*args, **kw)
    msg = str(e.value)
    assert msg.startswith("xstage.attention: ") and "\n" not in msg, msg
    return msg


def test_cpu_tensors_are_rejected():
    q = torch.zeros(1, 128, 2, 64, dtype=torch.bfloat16)
    assert "cuda" in _raises(ValueError, q, q, q).lower()


def test_bad_arguments(mode):
    q = fake(1, 128, 2, 64)
    _raises(TypeError, q.float(), q.float(), q.float())                   # fp32
    _raises(TypeError, q, q.half(), q)                                    # mixed dtypes
    _raises(TypeError, q.to(torch.int16), q.to(torch.int16), q.to(torch.int16))
    _raises(ValueError, q[0], q[0], q[0])                                 # 3-d
    _raises(ValueError, q, fake(2, 128, 2, 64), fake(2, 128, 2, 64))      # batch
    _raises(ValueError, q, fake(1, 128, 2, 128), fake(1, 128, 2, 128))    # head dim
    _raises(ValueError, q, fake(1, 128, 2, 64), fake(1, 64, 2, 64))       # k vs v
    _raises(NotImplementedError, fake(1, 8, 2, 96), fake(1, 8, 2, 96), fake(1, 8, 2, 96))  # d 96
    _raises(NotImplementedError, q, fake(1, 128, 1, 64), fake(1, 128, 1, 64))             # GQA
    _raises(ValueError, q, q, q, softmax_scale=-1.0)
    _raises(ValueError, q, q, q, softmax_scale=float("inf"))
    _raises(TypeError, q, q, q, softmax_scale="0.1")
    _raises(TypeError, q, q, q, causal=1)
    _raises(TypeError, "q", q, q)
    _raises(ValueError, q, fake(1, 0, 2, 64), fake(1, 0, 2, 64))          # no keys


def test_mixed_devices(mode):
    q = fake(1, 128, 2, 64)
    k = fake(1, 128, 2, 64, device="cpu")
    _raises(ValueError, q, k, k)


def test_opcheck_fake_only(mode):
    # The fake implementation agrees with the schema (what opcheck's schema/fake tests check).
    q = fake(1, 64, 2, 64)
    out = torch.ops.xstage.attention_fwd(q, q, q, False, 0.0, False)
    assert isinstance(out, tuple) and len(out) == 2 and out[1].shape == (0,)
