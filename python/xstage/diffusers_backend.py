"""xstage as a diffusers attention backend, and xstage Ulysses under diffusers' context parallelism.

    import xstage.diffusers_backend as xsd
    xsd.enable(pipe.transformer)                       # = xsd.register(); model.set_attention_backend("xstage")

    # sequence parallel (torchrun, one process per GPU): diffusers' own CP hooks shard the
    # sequence; the "xstage" backend then runs xstage.UlyssesAttention over the Ulysses group
    xsd.enable(pipe.transformer)
    pipe.transformer.enable_parallelism(config=ContextParallelConfig(ulysses_degree=P, ulysses_anything=True))

``register()`` adds the member ``XSTAGE = "xstage"`` to diffusers' ``AttentionBackendName`` (an Enum,
extended at run time, idempotently) and registers ``xstage_attention`` for it in diffusers'
``_AttentionBackendRegistry`` with ``supports_context_parallel=True``. After that every diffusers
way of choosing a backend takes "xstage": ``model.set_attention_backend("xstage")``, the
``diffusers.attention_backend("xstage")`` context manager, ``DIFFUSERS_ATTN_BACKEND`` is not
supported (diffusers reads it at import, before the member exists). Written against diffusers
0.42.1; other versions work if the registry internals are the same, else ``register`` raises one
line naming the version.

What a call does (``dispatch_attention_fn`` hands q, k, v as [B, S, H, D]):
  * no parallel config: ``xstage.attention(q, k, v)`` (Sq and Skv independent: self- and
    cross-attention, MM-DiT joint text tokens as the model concatenated them). A boolean
    key-padding mask (HunyuanVideo's [B, 1, 1, N] text-padding mask) is honoured exactly: keys
    after each batch row's valid prefix are dropped (all-True masks are dropped, rows with
    different lengths run one call each). The mask's prefix lengths are read to the host once
    per mask tensor (one synchronisation per model forward, cached on the tensor's identity and
    version).
  * diffusers context parallelism with ``ulysses_degree > 1, ring_degree == 1`` (with or without
    ``ulysses_anything``): ``xstage.UlyssesAttention`` over the Ulysses process group (the
    ``_ulysses_mesh`` diffusers built), which handles uneven sequence shards and head counts not
    divisible by P. diffusers' CP plans shard the concatenated text+image sequence (Flux) or the
    video tokens only (Wan; its cross-attention runs locally); either way each rank's local
    sequence is what Ulysses shards, and the output is each rank's shard, all heads.
  * ``ring_degree > 1``: diffusers' own ring / unified templates with the xstage kernel as the
    per-block forward op (it returns the LSE the ring merge needs).

Calls the kernel does not take fall back to diffusers' ``native`` backend, counted: attn_mask other
than a boolean key-padding prefix mask (or any mask under CP), dropout_p > 0, grouped-query
attention, head dims other than 64/128, dtypes other than bf16/fp16, tensors not on CUDA, causal
attention under CP. Each reason is warned once and counted in ``fallbacks()``; ``set_strict(True)``
(or ``XSTAGE_DIFFUSERS_STRICT=1``) raises ``NotImplementedError`` instead — the DiT bench runs strict.
Forward only: the xstage kernel has no backward (a backward through it raises).
"""
from __future__ import annotations

import collections
import contextlib
import logging
import os
import threading
import weakref
from typing import Callable, Optional

import torch

__all__ = ["register", "enable", "xstage_attention", "fallbacks", "reset_fallbacks", "set_strict", "BACKEND",
           "key_padding_lengths", "TESTED_DIFFUSERS"]

BACKEND = "xstage"
TESTED_DIFFUSERS = "0.42.1"
_log = logging.getLogger("xstage.diffusers_backend")

_lock = threading.Lock()
_fallbacks: collections.Counter = collections.Counter()
_warned: set = set()
_strict = os.environ.get("XSTAGE_DIFFUSERS_STRICT", "0") not in ("", "0")
_calls = collections.Counter()   # "local", "ulysses", "ring": calls the xstage kernel served
_ulysses: dict = {}              # id(process group) -> (group, UlyssesAttention)
_ulysses_variant = os.environ.get("XSTAGE_DIFFUSERS_ULYSSES_VARIANT", "auto")
_ulysses_tile = os.environ.get("XSTAGE_DIFFUSERS_ULYSSES_TILE", "staged")


class _Kernel:
    """The attention the backend runs: xstage.attention by default. Tests of the plumbing on a
    machine without a GPU swap in a float32 reference (``_kernel_override``); nothing else does."""
    fn: Optional[Callable] = None       # fn(q, k, v, causal, softmax_scale, return_lse) -> o | (o, lse[B,H,S])
    require_cuda: bool = True


def _xstage_kernel(q, k, v, causal, scale, return_lse):
    from .attention_op import attention

    return attention(q, k, v, causal=causal, softmax_scale=scale, return_lse=return_lse)


def _kernel(q, k, v, causal, scale, return_lse=False):
    fn = _Kernel.fn or _xstage_kernel
    return fn(q, k, v, causal, scale, return_lse)


@contextlib.contextmanager
def _kernel_override(fn: Callable, require_cuda: bool = False):
    """Tests only: run `fn` where the xstage kernel would run (and, with require_cuda=False,
    accept CPU tensors), so the routing, masking and sharding logic is checked without a GPU."""
    old = (_Kernel.fn, _Kernel.require_cuda)
    _Kernel.fn, _Kernel.require_cuda = fn, require_cuda
    try:
        yield
    finally:
        _Kernel.fn, _Kernel.require_cuda = old
        _ulysses.clear()


# ---- fallback accounting -------------------------------------------------------------------
def fallbacks() -> dict:
    """{reason: calls} the backend handed to diffusers' native backend since the last reset."""
    with _lock:
        return dict(_fallbacks)


def calls() -> dict:
    """{"local" | "ulysses" | "ring": calls} the xstage kernel served since the last reset."""
    with _lock:
        return dict(_calls)


def reset_fallbacks() -> None:
    with _lock:
        _fallbacks.clear()
        _calls.clear()


def set_strict(strict: bool) -> None:
    """strict: unsupported calls raise NotImplementedError instead of falling back."""
    global _strict
    _strict = bool(strict)


def set_ulysses_variant(variant: str) -> None:
    """The xstage.UlyssesAttention variant CP calls use ("auto", "torch-a2a", "fused-shaped", ...)."""
    global _ulysses_variant
    from .ulysses import VARIANTS

    if variant not in VARIANTS:
        raise ValueError(f"xstage.diffusers_backend: unknown Ulysses variant '{variant}' ({', '.join(VARIANTS)})")
    _ulysses_variant = variant
    _ulysses.clear()


def set_ulysses_tile(tile: str) -> None:
    """The attention tile of the fused Ulysses calls: "staged" (default) or "long_kv" (head dim 128;
    xstage.UlyssesAttention's tile)."""
    global _ulysses_tile
    from .ulysses import TILES

    if tile not in TILES:
        raise ValueError(f"xstage.diffusers_backend: unknown Ulysses tile '{tile}' ({', '.join(TILES)})")
    _ulysses_tile = tile
    _ulysses.clear()


def _fallback(reason: str, kwargs: dict):
    if _strict:
        raise NotImplementedError(f"xstage.diffusers_backend: {reason} (strict mode: no fallback to 'native')")
    with _lock:
        _fallbacks[reason] += 1
        first = reason not in _warned
        _warned.add(reason)
    if first:
        _log.warning("xstage diffusers backend: %s -> diffusers 'native' backend (warned once; counted in "
                     "xstage.diffusers_backend.fallbacks())", reason)
    ad = _dispatch_module()
    native = ad._AttentionBackendRegistry._backends[ad.AttentionBackendName.NATIVE]
    names = ad._AttentionBackendRegistry._supported_arg_names[ad.AttentionBackendName.NATIVE]
    return native(**{k: v for k, v in kwargs.items() if k in names})


# ---- what the kernel takes -----------------------------------------------------------------
_mask_cache: dict = {}   # "last": (weakref(mask), version, shape, lengths)


def key_padding_lengths(mask: torch.Tensor, batch: int, skv: int):
    """For a boolean mask that only masks keys ([B or 1, 1, 1, Skv], [B or 1, 1, Skv] or [B, Skv])
    and keeps a prefix of them in every batch row: the per-row prefix lengths (list of B ints).
    None when the mask is anything else (float/additive, query-dependent, not a prefix)."""
    if mask.dtype != torch.bool:
        return None
    m = mask
    if m.dim() == 2:
        if tuple(m.shape) != (batch, skv):
            return None
    else:
        if m.dim() not in (3, 4) or m.shape[-1] != skv or any(s != 1 for s in m.shape[1:-1]):
            return None
        if m.shape[0] not in (1, batch):
            return None
        m = m.reshape(m.shape[0], skv)
    ent = _mask_cache.get("last")
    if ent is not None and ent[0]() is mask and ent[1] == mask._version and ent[2] == (tuple(mask.shape), batch):
        return ent[3]
    lens = m.sum(dim=1)
    prefix = torch.arange(skv, device=m.device)[None, :] < lens[:, None]
    ok = bool(torch.equal(prefix, m))
    lengths = None
    if ok:
        lengths = [int(x) for x in lens.tolist()]
        if len(lengths) == 1 and batch > 1:
            lengths = lengths * batch
    try:
        _mask_cache["last"] = (weakref.ref(mask), mask._version, (tuple(mask.shape), batch), lengths)
    except TypeError:
        pass
    return lengths


def _unsupported(query, key, value, dropout_p, enable_gqa) -> Optional[str]:
    if _Kernel.require_cuda and not (query.is_cuda and key.is_cuda and value.is_cuda):
        return f"tensors on {query.device.type} (the kernel runs on CUDA)"
    if query.dtype not in (torch.bfloat16, torch.float16) or key.dtype != query.dtype or value.dtype != query.dtype:
        return f"dtype {query.dtype}/{key.dtype}/{value.dtype} (bf16 or fp16 only)"
    if query.dim() != 4 or key.dim() != 4 or key.shape != value.shape:
        return "q/k/v not [B, S, H, D] with k and v of one shape"
    if query.shape[3] not in (64, 128) or key.shape[3] != query.shape[3]:
        return f"head dim {query.shape[3]} (64 or 128 only)"
    if enable_gqa or key.shape[2] != query.shape[2]:
        return "grouped-query attention (k/v heads differ from q heads)"
    if dropout_p and dropout_p > 0:
        return "dropout_p > 0"
    if key.shape[0] != query.shape[0]:
        return "batch of q differs from k/v"
    return None


def _lse_bsh(lse):
    return lse.permute(0, 2, 1)   # xstage's [B, H, S] -> diffusers' model layout [B, S, H]


def _local(query, key, value, lengths, is_causal, scale, return_lse):
    Skv = key.shape[1]
    if lengths is None or all(n == Skv for n in lengths):
        return _kernel(query, key, value, is_causal, scale, return_lse)
    if len(set(lengths)) == 1:
        n = lengths[0]
        return _kernel(query, key[:, :n], value[:, :n], is_causal, scale, return_lse)
    outs = [_kernel(query[b:b + 1], key[b:b + 1, :n], value[b:b + 1, :n], is_causal, scale, return_lse)
            for b, n in enumerate(lengths)]
    if return_lse:
        return torch.cat([o for o, _ in outs], 0), torch.cat([l for _, l in outs], 0)
    return torch.cat(outs, 0)


def _ulysses_module(group):
    from .ulysses import UlyssesAttention

    ent = _ulysses.get(id(group))
    if ent is None or ent[0] is not group:
        mod = UlyssesAttention(group, variant=_ulysses_variant if _Kernel.fn is None else "torch-a2a",
                               attention_fn=lambda q, k, v, causal, scale: _kernel(q, k, v, causal, scale, False),
                               tile=_ulysses_tile)
        ent = (group, mod)
        _ulysses[id(group)] = ent
    return ent[1]


def ulysses_seq_lens(local: int, cp, group) -> list:
    """Every rank's local sequence length. Plain Ulysses: diffusers requires equal shards, so
    [local] * P without communication. ulysses_anything: gathered on every call (diffusers'
    gather_size_by_comm, as its own anything path does): a cache keyed on the local length could
    hit on one rank and miss on another and leave one rank alone in the collective."""
    if not cp.ulysses_anything:
        return [int(local)] * int(cp.ulysses_degree)
    from diffusers.models._modeling_parallel import gather_size_by_comm

    return [int(x) for x in gather_size_by_comm(int(local), group)]


def _forward_op(ctx, query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa, return_lse,
                _save_ctx=True, _parallel_config=None):
    """The per-block op diffusers' ring templates call (forward only)."""
    if attn_mask is not None or dropout_p or enable_gqa:
        raise NotImplementedError("xstage.diffusers_backend: ring attention with a mask, dropout or GQA")
    out = _kernel(query, key, value, is_causal, scale, return_lse)
    if return_lse:
        o, lse = out
        return o, _lse_bsh(lse)
    return out


def _backward_op(ctx, grad_out, *args, **kwargs):
    raise NotImplementedError("xstage.diffusers_backend: forward only (the xstage kernel has no backward)")


def xstage_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                     attn_mask: Optional[torch.Tensor] = None, dropout_p: float = 0.0, is_causal: bool = False,
                     scale: Optional[float] = None, enable_gqa: bool = False, return_lse: bool = False,
                     _parallel_config=None):
    """The registered backend function; [B, S, H, D] in and out (see the module docstring)."""
    kwargs = dict(query=query, key=key, value=value, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal,
                  scale=scale, enable_gqa=enable_gqa, return_lse=return_lse, _parallel_config=_parallel_config)
    why = _unsupported(query, key, value, dropout_p, enable_gqa)
    if why is not None:
        return _fallback(why, kwargs)
    if _parallel_config is None:
        lengths = None
        if attn_mask is not None:
            lengths = key_padding_lengths(attn_mask, key.shape[0], key.shape[1])
            if lengths is None:
                return _fallback("attn_mask that is not a boolean key-padding prefix mask", kwargs)
            if is_causal:
                return _fallback("attn_mask together with is_causal", kwargs)
            if min(lengths) == 0:
                return _fallback("key-padding mask with a row of no keys", kwargs)
        with _lock:
            _calls["local"] += 1
        out = _local(query, key, value, lengths, is_causal, scale, return_lse)
        if return_lse:
            o, lse = out
            return o, _lse_bsh(lse)
        return out
    cp = _parallel_config.context_parallel_config
    if cp is None:
        return _fallback("a parallel config without a context-parallel config", kwargs)
    if attn_mask is not None:
        return _fallback("attn_mask under context parallelism", kwargs)
    if is_causal:
        return _fallback("causal attention under context parallelism", kwargs)
    if cp.ring_degree == 1 and cp.ulysses_degree > 1:
        if return_lse:
            return _fallback("return_lse under Ulysses", kwargs)
        if key.shape != query.shape:
            return _fallback("Ulysses with q and k/v of different shapes", kwargs)
        group = cp._ulysses_mesh.get_group()
        with _lock:
            _calls["ulysses"] += 1
        return _ulysses_module(group)(query, key, value, softmax_scale=scale,
                                      seq_lens=ulysses_seq_lens(query.shape[1], cp, group))
    ad = _dispatch_module()
    with _lock:
        _calls["ring"] += 1
    return ad._templated_context_parallel_attention(query, key, value, None, 0.0, False, scale, False, return_lse,
                                                    forward_op=_forward_op, backward_op=_backward_op,
                                                    _parallel_config=_parallel_config)


# ---- registration --------------------------------------------------------------------------
def _dispatch_module():
    from diffusers.models import attention_dispatch as ad

    return ad


def _version() -> str:
    try:
        import diffusers

        return diffusers.__version__
    except Exception:  # pragma: no cover
        return "unknown"


def _extend_enum(enum_cls, name: str, value: str):
    """Adds member `name` = `value` to the str Enum `enum_cls` (idempotent); returns the member."""
    existing = enum_cls._value2member_map_.get(value)
    if existing is not None:
        return existing
    if name in enum_cls._member_map_:
        raise RuntimeError(f"{enum_cls.__name__} already has a member {name} with another value")
    member = str.__new__(enum_cls, value)
    member._name_ = name
    member._value_ = value
    member.__objclass__ = enum_cls
    if hasattr(next(iter(enum_cls)), "_sort_order_"):
        member._sort_order_ = len(enum_cls._member_names_)
    enum_cls._member_map_[name] = member
    enum_cls._value2member_map_[value] = member
    enum_cls._member_names_.append(name)
    type.__setattr__(enum_cls, name, member)
    return member


def register() -> str:
    """Registers the "xstage" attention backend with diffusers (idempotent); returns its name."""
    try:
        ad = _dispatch_module()
    except ImportError as e:
        raise ImportError(f"xstage.diffusers_backend needs diffusers (tested with {TESTED_DIFFUSERS}): {e}") from None
    reg = getattr(ad, "_AttentionBackendRegistry", None)
    enum_cls = getattr(ad, "AttentionBackendName", None)
    needed = ("register", "_backends", "_supported_arg_names", "_supports_context_parallel", "_constraints")
    if reg is None or enum_cls is None or any(not hasattr(reg, n) for n in needed) or \
            not hasattr(enum_cls, "NATIVE") or not hasattr(ad, "_templated_context_parallel_attention"):
        raise RuntimeError(f"xstage.diffusers_backend: diffusers {_version()} has different attention-dispatch "
                           f"internals than the {TESTED_DIFFUSERS} this backend was written for "
                           "(AttentionBackendName / _AttentionBackendRegistry)")
    with _lock:
        try:
            member = _extend_enum(enum_cls, "XSTAGE", BACKEND)
        except (AttributeError, TypeError, RuntimeError) as e:
            raise RuntimeError(f"xstage.diffusers_backend: cannot add 'xstage' to diffusers {_version()}'s "
                               f"AttentionBackendName ({e})") from None
        if enum_cls(BACKEND) is not member or enum_cls["XSTAGE"] is not member or \
                BACKEND not in {m.value for m in enum_cls.__members__.values()}:
            raise RuntimeError(f"xstage.diffusers_backend: diffusers {_version()}'s AttentionBackendName did not "
                               "take the new member")
        if reg._backends.get(member) is not xstage_attention:
            reg.register(member, constraints=[], supports_context_parallel=True)(xstage_attention)
    return BACKEND


def enable(model, *, strict: Optional[bool] = None) -> None:
    """register() and ``model.set_attention_backend("xstage")`` (every attention processor of the
    model; diffusers also makes it the process-wide active backend). strict: see set_strict."""
    register()
    if strict is not None:
        set_strict(strict)
    model.set_attention_backend(BACKEND)
