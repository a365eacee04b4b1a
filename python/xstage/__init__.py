"""xstage: Hopper attention, Ulysses and MoE kernels as PyTorch ops, and the Burst-Gap model.

    import xstage
    o = xstage.attention(q, k, v, causal=False)             # [B, S, H, D], bf16/fp16, d 64/128
    xstage.model.predict(132, 16384, 2.0)                    # no GPU, no torch needed
    w = xstage.moe.prepack(weights, "w8a8"); xstage.moe.grouped_gemm(a, a_scales, w, counts, offsets)

``xstage.model`` needs only the native extension; the ops need PyTorch (>= 2.9) and load it on
first use, so ``import xstage`` works without torch. See docs/python.md.
"""
from __future__ import annotations

import importlib
from typing import Any

from . import _ext, model

__version__ = "0.1.0"

_LAZY = {
    "attention": ("xstage.attention_op", "attention"),
    "UlyssesAttention": ("xstage.ulysses", "UlyssesAttention"),
    "moe": ("xstage.moe", None),
    "ulysses": ("xstage.ulysses", None),
    "bench": ("xstage.bench", None),
    "diffusers_backend": ("xstage.diffusers_backend", None),
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        mod_name, attr = _LAZY[name]
        try:
            mod = importlib.import_module(mod_name)
        except ModuleNotFoundError as e:
            if e.name != "torch":
                raise
            raise ImportError(f"xstage.{name} needs PyTorch (>= 2.9), which is not importable here; "
                              "xstage.model works without it") from None
        value = mod if attr is None else getattr(mod, attr)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'xstage' has no attribute '{name}'")


def extension_available() -> bool:
    """Whether the native extension xstage._C can be imported (see ``extension_status``)."""
    return _ext.available()


def extension_status() -> dict:
    """What the loaded extension contains: {'available', 'reason', 'attention', 'moe', 'path'}."""
    reason = _ext.unavailable_reason()
    if reason is not None:
        return {"available": False, "reason": reason, "attention": False, "moe": False, "path": None}
    C = _ext.load()
    return {"available": True, "reason": None, "attention": bool(C.has_attention), "moe": bool(C.has_moe),
            "path": getattr(C, "__file__", None)}


__all__ = ["attention", "UlyssesAttention", "model", "moe", "extension_available", "extension_status",
           "__version__"]
