"""``xstage.moe``: the Hopper MoE grouped GEMM (W8A8 and the per-token W4A8 formats) from PyTorch.

Weights are quantised and prepacked once, on the host, by :func:`prepack`; activations are
quantised on the GPU by :func:`quantize_activations`; :func:`grouped_gemm` runs every expert's
rows times that expert's weights in one persistent launch (``torch.ops.xstage.moe_grouped_gemm``,
a custom op with a fake implementation, on the current stream, no host synchronisation).

Rows are sorted by expert: expert e owns rows ``[offsets[e], offsets[e] + counts[e])`` of the
activations and of the output (int32 CUDA tensors; rows between segments are not written).

Weight formats (``format=``):
  ``w8a8``          fp8 e4m3 weights, fp32 128 x 128 block scales. Activations per 128 channels
                    (``granularity="per_128"``). bf16 or SwiGLU epilogue.
  ``int4_lut``      INT4 with two-level scales in the register-operand layout; activations per
                    token (``"per_token"``, the fast recipe) or per 128. bf16 epilogue (and SwiGLU).
  ``int4_lut_glu``  the same on gate/up-interleaved rows: the Linear-1 SwiGLU, per-token only.
  ``mxfp4``         MXFP4 (E2M1 + E8M0 per 32) in the register-operand layout; bf16 epilogue,
                    per-token activations.
  ``mxfp4_glu``     the same on gate/up-interleaved rows: Linear-1 SwiGLU, per-token only.
  ``w4a8_int4``     INT4 (symmetric, fp32 scale per row per 128 K) in the row layout: packed
                    ``[E, n, k/2]``, scales ``[E, k/128, n]``; per-128 activations; bf16 or
                    SwiGLU. The expert-parallel layers' W4A8 format (:class:`ExpertParallelMoE`).
  ``w4a8_mxfp4``    MXFP4 in the row layout: packed ``[E, n, k/2]``, E8M0 exponents uint8
                    ``[E, k/32, n]`` (as ``b_scales``); per-128 activations; bf16 or SwiGLU.
The kernel (tile, cluster) is planned from the sizes and ``tokens_per_expert_hint``.

Epilogues: ``"bf16"`` -> out bf16 ``[m, n]`` (Linear-2); ``"swiglu"`` (weights = [gate; up],
n = 2 x intermediate) -> h = silu(A Wg^T) * (A Wu^T) * row_weights, fp8 ``[m, n/2]`` plus its
per-128 scales ``[n/2/128, m]`` (the next grouped GEMM's activations, as they are).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Tuple

import torch

from . import _ext

__all__ = ["FORMATS", "LAYER_FORMATS", "PackedWeights", "prepack", "quantize_activations", "grouped_gemm", "dequantize_output",
           "ExpertParallelMoE"]

FORMATS = ("w8a8", "int4_lut", "int4_lut_glu", "mxfp4", "mxfp4_glu", "w4a8_int4", "w4a8_mxfp4")
# The expert-parallel layer's weight formats (ExpertParallelMoE(weights=...)): the row-layout ones,
# the register-operand INT4 two-level / MXFP4 layouts (per-128 activations there too), and those
# with per-token activations ("_tok": W1 gate/up-interleaved; kind="unfused", or kind="mega" where
# xstage._C.has_mega_w4a8_tok).
LAYER_FORMATS = ("w8a8", "w4a8_int4", "w4a8_mxfp4", "int4_lut", "mxfp4", "int4_lut_tok", "mxfp4_tok")
# Per layer format: the prepack formats of W1 and W2.
_LAYER_PREPACK = {"int4_lut_tok": ("int4_lut_glu", "int4_lut"), "mxfp4_tok": ("mxfp4_glu", "mxfp4")}
_FP8 = torch.float8_e4m3fn
_FP8_MAX = 448.0
_AMAX_FLOOR = 1e-4


def _fail(exc: type, msg: str):
    raise exc(f"xstage.moe: {msg}")


@dataclass
class PackedWeights:
    """Quantised, prepacked expert weights for :func:`grouped_gemm` (from :func:`prepack`).
    ``b``/``b_scales`` are in the kernel's layout; ``reference`` (optional) the fp32 weights
    the kernel computes with, ``[E, n, k]`` (tests)."""

    format: str
    experts: int
    n: int
    k: int
    b: torch.Tensor
    b_scales: torch.Tensor
    zeroed_subblocks: int = 0
    reference: Optional[torch.Tensor] = None

    def to(self, device) -> "PackedWeights":
        return PackedWeights(self.format, self.experts, self.n, self.k, self.b.to(device), self.b_scales.to(device),
                             self.zeroed_subblocks, None if self.reference is None else self.reference.to(device))

    def cuda(self, device=None) -> "PackedWeights":
        return self.to(torch.device("cuda", torch.cuda.current_device()) if device is None else device)


def prepack(weights: torch.Tensor, format: str = "w8a8", *, reference: bool = False,
            device=None) -> PackedWeights:
    """Quantise ``weights`` ``[E, n, k]`` (any float dtype, any device: the work is done on the
    host, once, when weights are loaded) into ``format`` and prepack them for the kernel.
    n and k multiples of 128 (glu formats: n a multiple of 256, gate rows first, then up rows).
    ``device``: where the packed tensors go (default: ``weights``' device)."""
    if not isinstance(weights, torch.Tensor):
        _fail(TypeError, f"weights must be a torch.Tensor, got {type(weights).__name__}")
    if format not in FORMATS:
        _fail(ValueError, f"unknown weight format '{format}' ({', '.join(FORMATS)})")
    if weights.dim() != 3:
        _fail(ValueError, f"weights must be 3-d [experts, n, k], got shape {tuple(weights.shape)}")
    if not weights.is_floating_point():
        _fail(TypeError, f"weights must be floating point, got {weights.dtype}")
    E, n, k = weights.shape
    if n % 128 or k % 128:
        _fail(ValueError, f"n = {n} and k = {k} must be multiples of 128")
    if format.endswith("_glu") and n % 256:
        _fail(ValueError, f"format {format} needs n = 2 x intermediate a multiple of 256, got {n}")
    C = _ext.load()
    host = weights.detach().to("cpu", torch.float32).contiguous()
    b, s, zeroed, ref = C.moe_prepack(format, host, reference)
    dev = weights.device if device is None else torch.device(device)
    b, s = torch.from_dlpack(b).to(dev), torch.from_dlpack(s).to(dev)
    return PackedWeights(format, E, n, k, b, s, int(zeroed), torch.from_dlpack(ref).to(dev) if reference else None)


def quantize_activations(x: torch.Tensor, granularity: str = "per_128") -> Tuple[torch.Tensor, torch.Tensor]:
    """fp8 e4m3 activations for :func:`grouped_gemm`, on x's device, with the library's
    arithmetic: per group, scale = max(amax, 1e-4) / 448, q = fp8(x * 448 / max(amax, 1e-4)).
    ``"per_128"``: one scale per token per 128 channels, scales ``[k/128, m]``;
    ``"per_token"``: one scale per token, scales ``[m]``. x ``[m, k]``, k a multiple of 128."""
    if not isinstance(x, torch.Tensor) or x.dim() != 2:
        _fail(ValueError, "x must be a 2-d tensor [m, k]")
    m, k = x.shape
    if k % 128:
        _fail(ValueError, f"k = {k} must be a multiple of 128")
    xf = x.float()
    if granularity == "per_128":
        g = xf.view(m, k // 128, 128)
        amax = g.abs().amax(dim=2).clamp_min(_AMAX_FLOOR)                       # [m, k/128]
        q = (g * (_FP8_MAX / amax).unsqueeze(2)).clamp(-_FP8_MAX, _FP8_MAX).to(_FP8).view(m, k)
        return q, (amax / _FP8_MAX).t().contiguous()
    if granularity == "per_token":
        amax = xf.abs().amax(dim=1).clamp_min(_AMAX_FLOOR)                      # [m]
        q = (xf * (_FP8_MAX / amax).unsqueeze(1)).clamp(-_FP8_MAX, _FP8_MAX).to(_FP8)
        return q, (amax / _FP8_MAX).contiguous()
    _fail(ValueError, f"granularity '{granularity}' (per_128 or per_token)")


def _act_granularity(a_scales: torch.Tensor) -> str:
    return "per_token" if a_scales.dim() == 1 else "per_128"


def _check(a, a_scales, b, b_scales, counts, offsets, row_weights, format, epilogue, n, k) -> None:
    for name, t in (("a", a), ("a_scales", a_scales), ("b", b), ("b_scales", b_scales), ("counts", counts),
                    ("offsets", offsets)):
        if not isinstance(t, torch.Tensor):
            _fail(TypeError, f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if t.device.type != "cuda":
            _fail(ValueError, f"{name} is on {t.device}; the grouped GEMM runs on CUDA tensors")
        if t.device != a.device:
            _fail(ValueError, f"{name} is on {t.device} but a on {a.device}")
    if format not in FORMATS:
        _fail(ValueError, f"unknown weight format '{format}' ({', '.join(FORMATS)})")
    if epilogue not in ("bf16", "swiglu"):
        _fail(ValueError, f"epilogue '{epilogue}' (bf16 or swiglu)")
    if a.dtype != _FP8 or a.dim() != 2:
        _fail(TypeError, f"a must be float8_e4m3fn [m, k] (see quantize_activations), got {a.dtype} {tuple(a.shape)}")
    m = a.shape[0]
    if a.shape[1] != k:
        _fail(ValueError, f"a has k = {a.shape[1]} but the weights k = {k}")
    if a_scales.dtype != torch.float32:
        _fail(TypeError, f"a_scales must be float32, got {a_scales.dtype}")
    if a_scales.dim() == 1:
        if a_scales.shape[0] != m:
            _fail(ValueError, f"per-token a_scales must be [m] = [{m}], got {tuple(a_scales.shape)}")
    elif tuple(a_scales.shape) != (k // 128, m):
        _fail(ValueError, f"a_scales must be [k/128, m] = [{k // 128}, {m}] or [m], got {tuple(a_scales.shape)}")
    for name, t in (("counts", counts), ("offsets", offsets)):
        if t.dtype != torch.int32 or t.dim() != 1:
            _fail(TypeError, f"{name} must be a 1-d int32 tensor, got {t.dtype} {tuple(t.shape)}")
    if counts.shape != offsets.shape:
        _fail(ValueError, f"counts {tuple(counts.shape)} and offsets {tuple(offsets.shape)} must have one length")
    if b.shape[0] != counts.shape[0]:
        _fail(ValueError, f"the weights have {b.shape[0]} experts but counts {counts.shape[0]}")
    if epilogue == "swiglu":
        if row_weights is None:
            _fail(ValueError, "the swiglu epilogue needs row_weights (fp32 [m], the router weight per row)")
        if row_weights.dtype != torch.float32 or tuple(row_weights.shape) != (m,) or row_weights.device != a.device:
            _fail(ValueError, f"row_weights must be float32 [m] = [{m}] on {a.device}")
        if n % 256:
            _fail(ValueError, f"the swiglu epilogue needs n = 2 x intermediate a multiple of 256, got {n}")
    elif format.endswith("_glu"):
        _fail(ValueError, f"format {format} is for the swiglu epilogue (Linear-1) only")
    for name, t in (("a", a), ("a_scales", a_scales), ("b", b), ("b_scales", b_scales)):
        if not t.is_contiguous():
            _fail(ValueError, f"{name} must be contiguous")


def _outputs(a, n, epilogue):
    m = a.shape[0]
    if epilogue == "bf16":
        return a.new_empty((m, n), dtype=torch.bfloat16), a.new_empty((0,), dtype=torch.float32)
    return a.new_empty((m, n // 2), dtype=_FP8), a.new_empty((n // 2 // 128, m), dtype=torch.float32)


@torch.library.custom_op("xstage::moe_grouped_gemm", mutates_args=())
def moe_grouped_gemm(a: torch.Tensor, a_scales: torch.Tensor, b: torch.Tensor, b_scales: torch.Tensor,
                     counts: torch.Tensor, offsets: torch.Tensor, row_weights: Optional[torch.Tensor], format: str,
                     epilogue: str, n: int, k: int, tokens_per_expert_hint: int) -> Tuple[torch.Tensor, torch.Tensor]:
    """Returns (out, out_scales); out_scales is empty for the bf16 epilogue."""
    _check(a, a_scales, b, b_scales, counts, offsets, row_weights, format, epilogue, n, k)
    out, out_scales = _outputs(a, n, epilogue)
    C = _ext.load()
    if not C.has_moe:
        _fail(NotImplementedError, "the extension was built without the MoE kernels (XSTAGE_BUILD_MOE=OFF)")
    if a.shape[0] == 0:
        return out, out_scales
    launch_into(out, out_scales, a, a_scales, b, b_scales, counts, offsets, row_weights, format, epilogue, n, k,
                tokens_per_expert_hint)
    return out, out_scales


def launch_into(out, out_scales, a, a_scales, b, b_scales, counts, offsets, row_weights, format: str, epilogue: str,
                n: int, k: int, tokens_per_expert_hint: int) -> None:
    """The kernel launch alone, into preallocated outputs, on the current stream: no checks, no
    allocation, no dispatcher (the op's hot path; the bench's "xstage-ext" row times exactly this)."""
    stream = torch.cuda.current_stream(a.device).cuda_stream
    _ext.load().moe_gemm(format, epilogue, _act_granularity(a_scales), counts.shape[0], a.shape[0], n, k,
                         a.data_ptr(), a_scales.data_ptr(), b.data_ptr(), b_scales.data_ptr(), counts.data_ptr(),
                         offsets.data_ptr(), out.data_ptr(), out_scales.data_ptr() if epilogue == "swiglu" else 0,
                         row_weights.data_ptr() if row_weights is not None else 0, tokens_per_expert_hint,
                         a.device.index or 0, stream)


@moe_grouped_gemm.register_fake
def _(a, a_scales, b, b_scales, counts, offsets, row_weights, format, epilogue, n, k, tokens_per_expert_hint):
    _check(a, a_scales, b, b_scales, counts, offsets, row_weights, format, epilogue, n, k)
    return _outputs(a, n, epilogue)


def grouped_gemm(a: torch.Tensor, a_scales: torch.Tensor, weights: PackedWeights, counts: torch.Tensor,
                 offsets: torch.Tensor, *, epilogue: str = "bf16", row_weights: Optional[torch.Tensor] = None,
                 tokens_per_expert_hint: Optional[int] = None):
    """Every expert's rows of ``a`` (fp8 ``[m, k]``, scales from :func:`quantize_activations`)
    times that expert's prepacked weights. Returns bf16 ``[m, n]`` (``epilogue="bf16"``) or
    ``(h_fp8 [m, n/2], h_scales [n/2/128, m])`` (``"swiglu"``). ``tokens_per_expert_hint``:
    the expected rows per expert for planning the tile (default m / E; never read from the
    device, so the call needs no synchronisation)."""
    if not isinstance(weights, PackedWeights):
        _fail(TypeError, f"weights must come from xstage.moe.prepack, got {type(weights).__name__}")
    hint = tokens_per_expert_hint
    if hint is None:
        hint = a.shape[0] // max(weights.experts, 1) if isinstance(a, torch.Tensor) else 0
    out, out_scales = torch.ops.xstage.moe_grouped_gemm(a, a_scales, weights.b, weights.b_scales, counts, offsets,
                                                        row_weights, weights.format, epilogue, weights.n, weights.k,
                                                        int(hint))
    return out if epilogue == "bf16" else (out, out_scales)


def dequantize_output(h: torch.Tensor, h_scales: torch.Tensor) -> torch.Tensor:
    """fp32 values of a SwiGLU output: h fp8 ``[m, c]`` times its per-128 scales ``[c/128, m]``."""
    m, c = h.shape
    return (h.float().view(m, c // 128, 128) * h_scales.t().unsqueeze(2)).view(m, c)


class ExpertParallelMoE(torch.nn.Module):
    """The expert-parallel MoE layer over a torch.distributed group, W8A8 or W4A8 (docs/megamoe.md).

        layer = xstage.moe.ExpertParallelMoE(group, hidden=4096, intermediate=2048, experts=256,
                                             top_k=8, kind="mega", schedule="interleaved",
                                             weights="w8a8")   # or "w4a8_int4", "w4a8_mxfp4"
        layer.load_weights(w1_local, w2_local)   # this rank's experts: [E/P, 2I, H], [E/P, H, I]
        y = layer(x, topk_ids, topk_weights)     # x [T, H] (float) or (x_fp8, x_scales); ids int32 [T, k]

    Rank r owns experts ``[r E/P, (r + 1) E/P)``; every rank passes its own T tokens (the same T
    on every rank) with their top-k routing; the output ``[T, H]`` bf16 is, per token, the sum over
    its k choices of Linear-2(fp8(silu(gate) * up * weight)) (``ops::moe_layer_reference``).
    ``kind``: ``"mega"`` (one persistent kernel: dispatch, both GEMMs and the combine;
    ``schedule`` ``"interleaved"``, ``"expert-wave"`` or ``"auto"``, the order the model picks, docs/megamoe.md "Order choice") or ``"unfused"`` (transport kernels around
    the grouped GEMMs). The C++ layer is built per token count T on first use (collective: every
    rank calls forward with the same T, in the same order). P = 1 works (one rank holds every
    expert). ``weights``: the experts' format (``LAYER_FORMATS``): W8A8, or W4A8 with INT4 or MXFP4
    weights in the row layout, or in the register-operand layouts ``int4_lut`` (INT4 two-level;
    unfused: the per-128 register-operand grouped GEMMs) and ``mxfp4`` (``kind="mega"`` only); the
    fused layer runs these two with its register-operand kernel, in extensions built with
    ``XSTAGE_MEGA_W4A8_RS`` (``xstage._C.has_mega_w4a8_rs``). Activations are fp8 per 128
    channels, except with ``int4_lut_tok`` / ``mxfp4_tok``: one scale per token for x and h, W1
    prepacked gate/up-interleaved (``int4_lut_glu`` / ``mxfp4_glu``); ``kind="unfused"`` runs the
    per-token register-operand GEMMs, h requantised to one scale per token (docs/megamoe.md
    "Per-token activations in the unfused layer"), ``kind="mega"`` the fused per-token kernel, h
    rounded to bf16 and quantised once per token, in extensions built with
    ``XSTAGE_MEGA_W4A8_TOK`` (``xstage._C.has_mega_w4a8_tok``). Needs the team binding
    (``xstage._C.has_ep_moe``)."""

    def __init__(self, group=None, *, hidden: int, intermediate: int, experts: int, top_k: int,
                 kind: str = "mega", schedule: str = "interleaved", weights: str = "w8a8",
                 wait_timeout_s: float = 5.0):
        super().__init__()
        C = _ext.load()
        if not getattr(C, "has_ep_moe", False):
            _fail(NotImplementedError, "ExpertParallelMoE needs the extension's team binding with the MoE kernels "
                  "(team.hpp with Team::from_unique_id, XSTAGE_BUILD_MOE=ON)")
        if kind not in ("mega", "unfused"):
            _fail(ValueError, f"kind '{kind}' (mega or unfused)")
        if schedule not in ("interleaved", "expert-wave", "auto"):
            _fail(ValueError, f"schedule '{schedule}' (interleaved, expert-wave or auto: the model's pick)")
        if weights not in LAYER_FORMATS:
            _fail(ValueError, f"weights '{weights}' ({', '.join(LAYER_FORMATS)})")
        if weights in ("int4_lut", "mxfp4") and kind == "mega" and not getattr(C, "has_mega_w4a8_rs", False):
            _fail(NotImplementedError, f"weights '{weights}' with kind 'mega' need the fused register-operand W4A8 "
                  "kernel, which this extension leaves out (build with -DXSTAGE_MEGA_W4A8_RS=ON)")
        if weights in _LAYER_PREPACK and kind == "mega" and not getattr(C, "has_mega_w4a8_tok", False):
            _fail(NotImplementedError, f"weights '{weights}' with kind 'mega' need the fused per-token W4A8 kernel, "
                  "which this extension leaves out (build with -DXSTAGE_MEGA_W4A8_TOK=ON; kind='unfused' runs them)")
        if weights == "mxfp4" and kind == "unfused":
            _fail(ValueError, "weights 'mxfp4' run fused only (kind='mega'): no per-128 register-operand MXFP4 "
                  "grouped GEMM ships")
        import torch.distributed as dist

        if group is None:
            if not (dist.is_available() and dist.is_initialized()):
                _fail(ValueError, "torch.distributed is not initialised (init_process_group first)")
            group = dist.group.WORLD
        self.group = group
        self.world = dist.get_world_size(group)
        self.rank = dist.get_rank(group)
        if experts % self.world:
            _fail(ValueError, f"experts {experts} must be divisible by the group size {self.world}")
        if hidden % 128 or intermediate % 128:
            _fail(ValueError, f"hidden {hidden} and intermediate {intermediate} must be multiples of 128")
        self.hidden, self.intermediate, self.experts, self.top_k = hidden, intermediate, experts, top_k
        self.local_experts = experts // self.world
        self.kind, self.schedule, self.weights, self.wait_timeout_s = kind, schedule, weights, wait_timeout_s
        self.w1: Optional[PackedWeights] = None
        self.w2: Optional[PackedWeights] = None
        self._ops: dict = {}

    def extra_repr(self) -> str:
        return (f"hidden={self.hidden}, intermediate={self.intermediate}, experts={self.experts}, top_k={self.top_k}, "
                f"world={self.world}, kind={self.kind}, schedule={self.schedule}, weights={self.weights}")

    def load_weights(self, w1, w2, *, reference: bool = False) -> None:
        """This rank's experts: w1 ``[E/P, 2I, H]`` (gate rows, then up rows), w2 ``[E/P, H, I]``
        (any float dtype; quantised on the host to the layer's ``weights`` format), or
        PackedWeights from prepack(..., that format)."""
        E, H, I = self.local_experts, self.hidden, self.intermediate
        dev = torch.device("cuda", torch.cuda.current_device())
        pw = []
        formats = _LAYER_PREPACK.get(self.weights, (self.weights, self.weights))
        for name, w, shape, fmt in (("w1", w1, (E, 2 * I, H), formats[0]), ("w2", w2, (E, H, I), formats[1])):
            if not isinstance(w, PackedWeights):
                if not isinstance(w, torch.Tensor) or tuple(w.shape) != shape:
                    _fail(ValueError, f"{name} must be [{shape[0]}, {shape[1]}, {shape[2]}], got "
                          f"{tuple(w.shape) if isinstance(w, torch.Tensor) else type(w).__name__}")
                w = prepack(w, fmt, reference=reference, device=dev)
            if w.format != fmt or (w.experts, w.n, w.k) != shape:
                _fail(ValueError, f"{name}: packed weights must be {fmt} {shape}, got {w.format} "
                      f"({w.experts}, {w.n}, {w.k})")
            pw.append(w)
        self.w1, self.w2 = pw

    def close(self) -> None:
        """Release the C++ layers (collective: every rank calls it); the team stays cached."""
        self._ops.clear()

    def _op(self, tokens: int):
        op = self._ops.get(tokens)
        if op is None:
            from . import model, team

            t = team.team_for(self.group, wait_timeout_s=self.wait_timeout_s)
            # Per-token weights: the fused layer holds that kernel's scratch (allocated with it).
            op = _ext.load().EpMoeOp(t, self.hidden, self.intermediate, self.experts, self.top_k, tokens, self.kind,
                                     model.preset().to_json(indent=None), 0,
                                     self.kind == "mega" and self.weights in _LAYER_PREPACK)
            self._ops[tokens] = op
        return op

    def forward(self, x, topk_ids: torch.Tensor, topk_weights: torch.Tensor) -> torch.Tensor:
        if self.w1 is None:
            _fail(ValueError, "load_weights() first")
        if isinstance(x, tuple):
            xq, xs = x
        else:
            if not isinstance(x, torch.Tensor) or x.dim() != 2 or x.shape[1] != self.hidden:
                _fail(ValueError, f"x must be [T, {self.hidden}]")
            xq, xs = quantize_activations(x, "per_token" if self.weights in _LAYER_PREPACK else "per_128")
        T = xq.shape[0]
        if not isinstance(xs, torch.Tensor) or xs.dtype != torch.float32 or xs.device != xq.device:
            _fail(ValueError, "x scales must be a float32 tensor on x's device")
        if self.weights in _LAYER_PREPACK:
            if xq.dtype != _FP8 or tuple(xq.shape) != (T, self.hidden) or tuple(xs.shape) != (T,):
                _fail(ValueError, f"x must be fp8 [T, {self.hidden}] with per-token scales [T]")
        elif xq.dtype != _FP8 or tuple(xq.shape) != (T, self.hidden) or tuple(xs.shape) != (self.hidden // 128, T):
            _fail(ValueError, f"x must be fp8 [T, {self.hidden}] with scales [{self.hidden // 128}, T]")
        for name, t, dt in (("topk_ids", topk_ids, torch.int32), ("topk_weights", topk_weights, torch.float32)):
            if not isinstance(t, torch.Tensor) or t.dtype != dt or tuple(t.shape) != (T, self.top_k):
                _fail(ValueError, f"{name} must be {dt} [T, top_k] = [{T}, {self.top_k}]")
            if t.device != xq.device:
                _fail(ValueError, f"{name} is on {t.device} but x on {xq.device}")
        if xq.device.type != "cuda":
            _fail(ValueError, f"x is on {xq.device}; the layer runs on CUDA tensors")
        op = self._op(T)
        ids, wts = topk_ids.contiguous(), topk_weights.contiguous()
        xq, xs = xq.contiguous(), xs.contiguous()
        out = torch.empty((T, self.hidden), dtype=torch.bfloat16, device=xq.device)
        op.forward(ids.data_ptr(), wts.data_ptr(), xq.data_ptr(), xs.data_ptr(), self.w1.b.data_ptr(),
                   self.w1.b_scales.data_ptr(), self.w2.b.data_ptr(), self.w2.b_scales.data_ptr(), out.data_ptr(),
                   self.schedule, torch.cuda.current_stream(xq.device).cuda_stream, self.weights)
        return out
