"""``xstage.UlyssesAttention``: Ulysses sequence-parallel attention as an ``nn.Module``.

    attn = xstage.UlyssesAttention(group)                 # a torch.distributed process group
    o = attn(q, k, v)                                     # per rank [B, S_r, H, D] -> [B, S_r, H, D]
    o, o_joint = attn(q, k, v, joint_q=tq, joint_k=tk, joint_v=tv, joint_position="front")

Each rank holds a shard of the sequence with all heads. The pre-attention All-to-All gives each
rank the whole sequence for its group of heads, ``xstage.attention`` runs, and the
post-attention All-to-All returns the rank's sequence shard with all heads.

Handles what real models need:
  * S not divisible by P: shards may differ in length (rank r's length is read from its
    input; the lengths of the others are gathered once per distinct local length and cached,
    or given with ``seq_lens=``).
  * H not divisible by P: rank j takes heads ``[sum(h_0..h_{j-1}), ...)`` with
    ``h_j = H // P + (j < H % P)`` (diffusers' "ulysses anything"); a rank may get none.
  * Joint tokens (MM-DiT text): ``joint_q/k/v [B, T, H, D]``, the same on every rank, attended
    together with the sequence (``joint_position`` "front" or "back"); returned separately,
    ``[B, T, H, D]`` on every rank.

Variants: ``"torch-a2a"`` (the All-to-Alls through ``torch.distributed.all_to_all_single``, the
attention through the xstage kernel) works on any group and any shape above. The fused variants
(``"fused-shaped"``, the default; ``"fused"``, ``"comm-sm"``, ``"serial"``) run the C++ operator
``ops::UlyssesAttention`` over a team built from the process group (``xstage.team.team_for``):
the pre-attention All-to-All through torch, the post-attention one inside the attention
epilogue. They take even shards and head groups, no joint tokens, non-causal, bf16/fp16, D 64/128
and P <= 8; any other call runs torch-a2a and is counted in ``fallbacks``. ``variant="auto"``
picks fused-shaped when the extension has the operator, else torch-a2a. With P = 1 (or no group)
the module is plain attention.
"""
from __future__ import annotations

from typing import Callable, Optional, Sequence

import torch

from . import _ext

__all__ = ["UlyssesAttention", "head_split", "VARIANTS"]

VARIANTS = ("auto", "torch-a2a", "fused-shaped", "fused", "comm-sm", "serial")
_FUSED = ("fused-shaped", "fused", "comm-sm", "serial")
TILES = ("staged", "long_kv")


def head_split(heads: int, world: int) -> list[int]:
    """Heads per rank: H // P, the first H % P ranks one more."""
    return [heads // world + (r < heads % world) for r in range(world)]


def _fail(exc: type, msg: str):
    raise exc(f"xstage.UlyssesAttention: {msg}")


def _fused_available() -> bool:
    return _ext.available() and bool(getattr(_ext.load(), "has_ulysses", False))


_DTYPE_CODES = {torch.bfloat16: 0, torch.float16: 1}


def _default_attention(q, k, v, causal, softmax_scale):
    from .attention_op import attention

    return attention(q, k, v, causal=causal, softmax_scale=softmax_scale)


class UlyssesAttention(torch.nn.Module):
    def __init__(self, group=None, scatter_idx: int = 2, gather_idx: int = 1, *, variant: str = "auto",
                 attention_fn: Optional[Callable] = None, tile: str = "staged"):
        """group: a torch.distributed ProcessGroup (None: the default group if initialised,
        else a single rank). scatter_idx/gather_idx: the BSHD convention (scatter heads, gather
        the sequence), the only one supported. attention_fn(q, k, v, causal, softmax_scale):
        replaces xstage.attention (tests, or another kernel). tile: the fused variants' attention
        tile, "staged" or "long_kv" (head dim 128: the 128 x 192 long-key tile storing O from
        registers to each row's owner; fused, comm-sm and serial; docs/ulysses.md "Long-key tile")."""
        super().__init__()
        if tile not in TILES:
            _fail(ValueError, f"unknown tile '{tile}' ({', '.join(TILES)})")
        if tile == "long_kv" and variant == "fused-shaped":
            _fail(ValueError, "variant 'fused-shaped' runs the staged tile only (tile='long_kv' takes fused, comm-sm "
                  "or serial)")
        if (scatter_idx, gather_idx) != (2, 1):
            _fail(NotImplementedError, f"scatter_idx={scatter_idx}, gather_idx={gather_idx}: only the BSHD layout "
                  "(scatter_idx=2: heads, gather_idx=1: sequence) is supported")
        if variant not in VARIANTS:
            _fail(ValueError, f"unknown variant '{variant}' ({', '.join(VARIANTS)})")
        if variant in _FUSED and not _fused_available():
            _fail(NotImplementedError, f"variant '{variant}' needs the C++ Ulysses operator bound to a team built from "
                  "the process group, which this build of the extension does not have; use variant='torch-a2a'")
        if variant == "auto":
            variant = ("fused" if tile == "long_kv" else "fused-shaped") if _fused_available() else "torch-a2a"
        import torch.distributed as dist

        if group is None and dist.is_available() and dist.is_initialized():
            group = dist.group.WORLD
        self.group = group
        self.world = dist.get_world_size(group) if group is not None else 1
        self.rank = dist.get_rank(group) if group is not None else 0
        self.variant = variant if self.world > 1 else "local"
        self.attention_fn = attention_fn or _default_attention
        self.tile = tile
        self._seq_lens_cache: dict[int, list[int]] = {}
        self._ops: dict[tuple, object] = {}
        self.fallbacks = 0  # calls a fused variant handed to torch-a2a (shapes the C++ operator does not take)

    def close(self) -> None:
        """Release the C++ operators (collective: every rank calls it); the team stays cached."""
        self._ops.clear()

    def extra_repr(self) -> str:
        return f"world={self.world}, rank={self.rank}, variant={self.variant}, tile={self.tile}"

    # ---- helpers --------------------------------------------------------------------------
    def _gather_seq_lens(self, local: int, device) -> list[int]:
        if local not in self._seq_lens_cache:
            import torch.distributed as dist

            t = torch.tensor([local], dtype=torch.int64, device=device)
            out = [torch.empty_like(t) for _ in range(self.world)]
            dist.all_gather(out, t, group=self.group)
            self._seq_lens_cache[local] = [int(x.item()) for x in out]
        return self._seq_lens_cache[local]

    def _a2a(self, send_chunks: Sequence[torch.Tensor], recv_shapes: Sequence[tuple], like: torch.Tensor):
        """All-to-All of per-destination chunks of any shape; returns the received chunks."""
        import torch.distributed as dist

        send = torch.cat([c.reshape(-1) for c in send_chunks])
        in_splits = [c.numel() for c in send_chunks]
        out_splits = [int(torch.Size(s).numel()) for s in recv_shapes]
        recv = like.new_empty(sum(out_splits))
        dist.all_to_all_single(recv, send, output_split_sizes=out_splits, input_split_sizes=in_splits,
                               group=self.group)
        return [c.view(s) for c, s in zip(recv.split(out_splits), recv_shapes)]

    # ---- forward --------------------------------------------------------------------------
    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, causal: bool = False,
                softmax_scale: Optional[float] = None, seq_lens: Optional[Sequence[int]] = None,
                joint_q: Optional[torch.Tensor] = None, joint_k: Optional[torch.Tensor] = None,
                joint_v: Optional[torch.Tensor] = None, joint_position: str = "front"):
        joint = joint_q is not None or joint_k is not None or joint_v is not None
        for name, t in (("q", q), ("k", k), ("v", v)):
            if not isinstance(t, torch.Tensor) or t.dim() != 4:
                _fail(ValueError, f"{name} must be a 4-d tensor [B, S/P, H, D]")
        if k.shape != q.shape or v.shape != q.shape:
            _fail(ValueError, f"q {tuple(q.shape)}, k {tuple(k.shape)} and v {tuple(v.shape)} must have one shape "
                  "(each rank's shard of the same sequence)")
        B, S_r, H, D = q.shape
        if joint:
            if joint_q is None or joint_k is None or joint_v is None:
                _fail(ValueError, "joint tokens need all of joint_q, joint_k and joint_v")
            if joint_position not in ("front", "back"):
                _fail(ValueError, f"joint_position '{joint_position}' (front or back)")
            for name, t in (("joint_q", joint_q), ("joint_k", joint_k), ("joint_v", joint_v)):
                if t.dim() != 4 or t.shape[0] != B or t.shape[2] != H or t.shape[3] != D or \
                        t.shape[1] != joint_q.shape[1]:
                    _fail(ValueError, f"{name} must be [B, T, H, D] = [{B}, T, {H}, {D}], got {tuple(t.shape)}")
        if self.world == 1:
            return self._local(q, k, v, causal, softmax_scale, joint_q, joint_k, joint_v, joint_position, joint)
        if seq_lens is None:
            seq_lens = self._gather_seq_lens(S_r, q.device)
        seq_lens = [int(s) for s in seq_lens]
        if len(seq_lens) != self.world or seq_lens[self.rank] != S_r:
            _fail(ValueError, f"seq_lens {seq_lens} must list every rank's shard length (this rank's is {S_r})")
        if self.variant in _FUSED:
            if self._fused_takes(q, seq_lens, H, causal, joint):
                return self._fused(q, k, v, seq_lens, softmax_scale)
            self.fallbacks += 1
        heads = head_split(H, self.world)
        h0 = [sum(heads[:j]) for j in range(self.world)]
        r = self.rank
        h_r = heads[r]
        # pre-attention All-to-All: to rank j this shard's heads of group j; from rank i its shard of ours
        full = []
        for t in (q, k, v):
            parts = self._a2a([t[:, :, h0[j]:h0[j] + heads[j]] for j in range(self.world)],
                              [(B, seq_lens[i], h_r, D) for i in range(self.world)], t)
            full.append(torch.cat(parts, dim=1))                                        # [B, S, h_r, D]
        T = 0
        if joint:
            T = joint_q.shape[1]
            mine = [t[:, :, h0[r]:h0[r] + h_r] for t in (joint_q, joint_k, joint_v)]
            full = [torch.cat((j, f), dim=1) if joint_position == "front" else torch.cat((f, j), dim=1)
                    for j, f in zip(mine, full)]
        if h_r > 0:
            o = self.attention_fn(full[0], full[1], full[2], causal, softmax_scale)   # [B, T + S, h_r, D]
        else:
            o = q.new_empty((B, full[0].shape[1], 0, D))
        o_joint = None
        if joint:
            o_joint_mine = o[:, :T] if joint_position == "front" else o[:, o.shape[1] - T:]
            o = o[:, T:] if joint_position == "front" else o[:, :o.shape[1] - T]
            # every rank needs the joint output of all heads
            parts = self._a2a([o_joint_mine] * self.world, [(B, T, heads[i], D) for i in range(self.world)], q)
            o_joint = torch.cat(parts, dim=2)
        # post-attention All-to-All: to rank j its shard of the sequence for our heads
        s0 = [sum(seq_lens[:j]) for j in range(self.world)]
        parts = self._a2a([o[:, s0[j]:s0[j] + seq_lens[j]] for j in range(self.world)],
                          [(B, S_r, heads[i], D) for i in range(self.world)], q)
        out = torch.cat(parts, dim=2)                                                   # [B, S_r, H, D]
        return (out, o_joint) if joint else out

    # ---- the C++ operator (post-attention All-to-All fused into the attention epilogue) ------
    def _fused_takes(self, q, seq_lens, H, causal, joint) -> bool:
        """Whether ops::UlyssesAttention takes the call: even shards and head groups, no joint
        tokens, non-causal, bf16/fp16, D 64/128, at most 8 ranks. Otherwise the torch-a2a path
        runs (every rank decides alike: the inputs' shapes agree across ranks)."""
        dims = (128,) if self.tile == "long_kv" else (64, 128)
        return (len(set(seq_lens)) == 1 and H % self.world == 0 and not joint and not causal
                and q.dtype in _DTYPE_CODES and q.shape[3] in dims and self.world <= 8 and q.is_cuda)

    def _fused(self, q, k, v, seq_lens, softmax_scale):
        from . import model, team

        B, S_r, H, D = q.shape
        P, S = self.world, sum(seq_lens)
        key = (q.dtype, B, S, H, D, float(softmax_scale or 0.0), q.device.index)
        op = self._ops.get(key)
        if op is None:
            C = _ext.load()
            t = team.team_for(self.group)
            op = C.UlyssesOp(t, _DTYPE_CODES[q.dtype], B, S, H, D, float(softmax_scale or 0.0),
                             model.preset().to_json(indent=None), self.tile)
            self._ops[key] = op
        hp = H // P
        full = []
        for t_ in (q, k, v):   # pre-attention All-to-All: [B, S/P, H, D] -> [B, S, H/P, D], dense
            parts = self._a2a([t_[:, :, j * hp:(j + 1) * hp] for j in range(P)], [(B, S_r, hp, D)] * P, t_)
            full.append(torch.cat(parts, dim=1).contiguous())
        stream = torch.cuda.current_stream(q.device).cuda_stream
        op.forward(full[0].data_ptr(), full[1].data_ptr(), full[2].data_ptr(), self.variant, stream)
        # the output window is overwritten by the next call: hand out a copy
        return torch.from_dlpack(op.output()).clone()

    def _local(self, q, k, v, causal, softmax_scale, jq, jk, jv, position, joint):
        if not joint:
            return self.attention_fn(q, k, v, causal, softmax_scale)
        T = jq.shape[1]
        cat = (lambda j, t: torch.cat((j, t), dim=1)) if position == "front" else (lambda j, t: torch.cat((t, j), dim=1))
        o = self.attention_fn(cat(jq, q), cat(jk, k), cat(jv, v), causal, softmax_scale)
        if position == "front":
            return o[:, T:], o[:, :T]
        return o[:, :o.shape[1] - T], o[:, o.shape[1] - T:]
