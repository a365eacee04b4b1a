"""``xstage.attention``: the Hopper attention forward kernel as a PyTorch custom op.

    o = xstage.attention(q, k, v, causal=False, softmax_scale=None)
    o, lse = xstage.attention(q, k, v, return_lse=True)

q ``[B, Sq, H, D]``, k and v ``[B, Skv, H, D]`` (Sq and Skv independent), bfloat16 or float16,
D 64 or 128, any strides the kernel's TMA loads accept: head-dim stride 1, the other strides
positive multiples of 8 elements, 16-byte aligned data (a slice of a packed ``[B, S, 3, H, D]``
QKV tensor qualifies). Anything else is copied to a dense tensor first (inside the op).
Returns o ``[B, Sq, H, D]`` (dense) and, with ``return_lse``, the natural-log log-sum-exp of
the scaled scores, float32 ``[B, H, Sq]``. ``causal``: top-left aligned (query i sees keys
j <= i), as ``torch.nn.functional.scaled_dot_product_attention(is_causal=True)``.

Registered as ``torch.ops.xstage.attention_fwd`` (``torch.library.custom_op`` with a fake
implementation): torch.compile traces it without graph breaks, and it launches on the current
CUDA stream without synchronising or allocating beyond its outputs (CUDA-graph capturable).
Forward only: backward raises NotImplementedError.
"""
from __future__ import annotations

import math
import os
from typing import Optional, Tuple

import torch

from . import _ext

__all__ = ["attention"]

_DTYPES = {torch.bfloat16: 0, torch.float16: 1}
_HEAD_DIMS = (64, 128)
_USE_DLPACK = os.environ.get("XSTAGE_ATTENTION_DLPACK", "0") not in ("", "0")


def _fail(exc: type, msg: str):
    raise exc(f"xstage.attention: {msg}")


def _check(q, k, v, causal, softmax_scale, return_lse) -> None:
    """Every check that needs only metadata (shapes, dtypes, devices): runs in eager calls, in
    the fake implementation (torch.compile, FakeTensorMode) and in the real one."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor):
            _fail(TypeError, f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if t.dim() != 4:
            _fail(ValueError, f"{name} must be 4-d [B, S, H, D], got shape {tuple(t.shape)}")
    if not isinstance(causal, bool):
        _fail(TypeError, f"causal must be a bool, got {causal!r}")
    if not isinstance(return_lse, bool):
        _fail(TypeError, f"return_lse must be a bool, got {return_lse!r}")
    if softmax_scale is not None:
        if isinstance(softmax_scale, bool) or not isinstance(softmax_scale, (int, float)):
            _fail(TypeError, f"softmax_scale must be a float or None, got {softmax_scale!r}")
        if not (math.isfinite(softmax_scale) and softmax_scale > 0):
            _fail(ValueError, f"softmax_scale {softmax_scale} must be finite and > 0")
    if q.device.type != "cuda":
        _fail(ValueError, f"q is on {q.device}; xstage runs on CUDA tensors")
    for name, t in (("k", k), ("v", v)):
        if t.device != q.device:
            _fail(ValueError, f"{name} is on {t.device} but q on {q.device}")
    if q.dtype not in _DTYPES:
        _fail(TypeError, f"q has dtype {q.dtype}; supported: torch.bfloat16, torch.float16")
    for name, t in (("k", k), ("v", v)):
        if t.dtype != q.dtype:
            _fail(TypeError, f"{name} has dtype {t.dtype} but q {q.dtype} (one dtype for q, k, v)")
    B, Sq, H, D = q.shape
    if k.shape != v.shape:
        _fail(ValueError, f"k {tuple(k.shape)} and v {tuple(v.shape)} must have one shape [B, Skv, H, D]")
    if k.shape[0] != B:
        _fail(ValueError, f"batch: q has {B}, k and v {k.shape[0]}")
    if k.shape[3] != D:
        _fail(ValueError, f"head dim: q has {D}, k and v {k.shape[3]}")
    if k.shape[2] != H:
        _fail(NotImplementedError,
              f"q has {H} heads and k/v {k.shape[2]}; grouped-query attention is not supported (repeat k/v heads)")
    if D not in _HEAD_DIMS:
        _fail(NotImplementedError, f"head dim {D} is not supported (64 or 128)")
    if k.shape[1] == 0 and Sq > 0 and B > 0 and H > 0:
        _fail(ValueError, "k and v have no keys (Skv = 0) for a non-empty q")


def _tma_ready(t: torch.Tensor) -> torch.Tensor:
    """t itself when the kernel can read it in place, else a dense copy (the minimal fix-up:
    head-dim stride 1, other strides positive multiples of 8 elements, 16-byte aligned)."""
    ok = t.stride(3) == 1 and t.data_ptr() % 16 == 0
    if ok:
        for dim in range(3):
            if t.shape[dim] > 1 and (t.stride(dim) <= 0 or t.stride(dim) % 8 != 0):
                ok = False
                break
    return t if ok else t.clone(memory_format=torch.contiguous_format)


@torch.library.custom_op("xstage::attention_fwd", mutates_args=())
def attention_fwd(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool, softmax_scale: float,
                  return_lse: bool) -> Tuple[torch.Tensor, torch.Tensor]:
    """softmax_scale 0: 1/sqrt(D). Returns (o, lse); lse is empty (shape [0]) unless return_lse."""
    _check(q, k, v, causal, softmax_scale if softmax_scale != 0.0 else None, return_lse)
    B, Sq, H, D = q.shape
    o = torch.empty((B, Sq, H, D), dtype=q.dtype, device=q.device)
    lse = torch.empty((B, H, Sq) if return_lse else (0,), dtype=torch.float32, device=q.device)
    if o.numel() == 0:
        return o, lse
    C = _ext.load()
    if not C.has_attention:
        _fail(NotImplementedError, "the extension was built without the attention kernels (XSTAGE_BUILD_ATTENTION=OFF)")
    q, k, v = _tma_ready(q), _tma_ready(k), _tma_ready(v)
    stream = torch.cuda.current_stream(q.device).cuda_stream
    if _USE_DLPACK:
        C.attention_fwd_dlpack(q, k, v, o, lse if return_lse else None, float(softmax_scale), causal, stream)
        return o, lse
    launch_into(o, q, k, v, causal, softmax_scale, lse if return_lse else None, stream)
    return o, lse


def launch_into(o, q, k, v, causal: bool, softmax_scale: float, lse=None, stream=None) -> None:
    """The kernel launch alone, into preallocated o (and lse): no checks, no allocation, no
    dispatcher (the op's hot path; the bench's "xstage-ext" row times exactly this). Tensors must
    already be what the op's checks and _tma_ready make of them; softmax_scale 0: 1/sqrt(D)."""
    B, Sq, H, D = q.shape
    if stream is None:
        stream = torch.cuda.current_stream(q.device).cuda_stream
    qs, ks, vs, os_ = q.stride(), k.stride(), v.stride(), o.stride()
    _ext.load().attention_fwd(_DTYPES[q.dtype], B, H, Sq, k.shape[1], D,
                              q.data_ptr(), qs[0], qs[1], qs[2],
                              k.data_ptr(), ks[0], ks[1], ks[2],
                              v.data_ptr(), vs[0], vs[1], vs[2],
                              o.data_ptr(), os_[0], os_[1], os_[2],
                              lse.data_ptr() if lse is not None else 0, float(softmax_scale), causal,
                              q.device.index or 0, stream)


@attention_fwd.register_fake
def _(q, k, v, causal, softmax_scale, return_lse):
    _check(q, k, v, causal, softmax_scale if softmax_scale != 0.0 else None, return_lse)
    B, Sq, H, D = q.shape
    o = q.new_empty((B, Sq, H, D))
    lse = q.new_empty((B, H, Sq) if return_lse else (0,), dtype=torch.float32)
    return o, lse


def _setup_context(ctx, inputs, output):
    pass


def _backward(ctx, grad_o, grad_lse):
    raise NotImplementedError("xstage.attention: no backward pass (forward-only kernel); "
                              "use torch.nn.functional.scaled_dot_product_attention for training")


attention_fwd.register_autograd(_backward, setup_context=_setup_context)


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, causal: bool = False,
              softmax_scale: Optional[float] = None, return_lse: bool = False):
    """O = softmax(softmax_scale * Q K^T) V on [B, S, H, D] tensors; see the module docstring.
    Returns o, or (o, lse) with ``return_lse=True``."""
    _check(q, k, v, causal, softmax_scale, return_lse)
    o, lse = torch.ops.xstage.attention_fwd(q, k, v, causal, float(softmax_scale or 0.0), return_lse)
    return (o, lse) if return_lse else o
