"""The xDiT variant of the DiT bench (``--variants ...,xdit``): the same model and weights run by
xfuser's own subclasses of the diffusers classes (``xFuserWanTransformer3DWrapper``,
``xFuserFlux1Transformer2DWrapper``, ``xFuserHunyuanVideoTransformer3DWrapper``), which shard the
sequence over xfuser's Ulysses group themselves and gather the output (yunchang's Ulysses; the
attention backend xfuser picks: FlashAttention-4/3 where installed, else cuDNN). One GPU:
ulysses degree 1 (xfuser's attention path alone); ``--ulysses P``: degree P.

xfuser needs CUDA and torch.distributed: ``init`` sets up its world and model-parallel groups on
top of the process group the bench made (a one-process group on one GPU); ``set_cell`` gives
xfuser's runtime state what its pipelines give it before a denoising loop (the model, the
resolution, the text length), which its transformer classes read in every forward. ``wrap`` builds the xfuser subclass on the meta device and hands it the stock model's parameters
and buffers (``load_state_dict(assign=True)``: the same tensors, no second copy of the weights).
Written against xfuser 0.7.0 (docs/dit.md "The bench").
"""
from __future__ import annotations

import importlib
import importlib.util

WRAPPERS = {
    "wan": ("xfuser.model_executor.models.transformers.transformer_wan", "xFuserWanTransformer3DWrapper"),
    "flux": ("xfuser.model_executor.models.transformers.transformer_flux", "xFuserFlux1Transformer2DWrapper"),
    "hunyuan": ("xfuser.model_executor.models.transformers.transformer_hunyuan_video",
                "xFuserHunyuanVideoTransformer3DWrapper"),
}


def unavailable() -> str | None:
    """Why the xdit variant cannot run here (None: it can)."""
    for mod in ("xfuser", "yunchang"):
        if importlib.util.find_spec(mod) is None:
            return f"{mod} is not installed (pip install xfuser)"
    import torch

    if not torch.cuda.is_available():
        return "xfuser needs CUDA"
    return None


def init(world: int, rank: int, device_index: int) -> None:
    """xfuser's world group and Ulysses group of `world` ranks, on the existing
    torch.distributed process group."""
    from xfuser.core.distributed import init_distributed_environment, initialize_model_parallel
    from xfuser.core.distributed.parallel_state import model_parallel_is_initialized

    if model_parallel_is_initialized():   # once per process (every cell of a run shares it)
        return
    _log_to_stderr()
    init_distributed_environment(world_size=world, rank=rank, local_rank=device_index)
    initialize_model_parallel(sequence_parallel_degree=world, ulysses_degree=world, ring_degree=1)


def _log_to_stderr() -> None:
    """xfuser logs to stdout; the bench's stdout is its result table."""
    import logging
    import sys

    for h in logging.getLogger("xfuser").handlers:
        if isinstance(h, logging.StreamHandler) and getattr(h, "stream", None) is sys.stdout:
            h.setStream(sys.stderr)
            h.flush = sys.stderr.flush


# The pipeline class xfuser's DiT runtime state keys its set-up on (it reads the class name, the
# transformer's config and the VAE's scale factors: 8x space, 4x time for the video models).
PIPELINES = {"wan": "WanPipeline", "flux": "FluxPipeline", "hunyuan": "HunyuanVideoPipeline"}


def set_cell(model, family: str, cell: dict, inputs: dict, world: int = 1) -> None:
    """xfuser's DiT runtime state for one bench cell, as its pipelines set it before denoising.
    The stand-in pipeline carries only what the state reads (no VAE or text encoder is built)."""
    from xfuser.config import xFuserArgs
    from xfuser.core.distributed import runtime_state

    engine_config, _ = xFuserArgs(model="", ulysses_degree=world).create_config()
    pipeline = type(PIPELINES[family], (), {})()
    pipeline.transformer = model
    pipeline.vae_scale_factor = pipeline.vae_scale_factor_spatial = 8
    pipeline.vae_scale_factor_temporal = 4
    runtime_state.initialize_runtime_state(pipeline, engine_config)
    state = runtime_state.get_runtime_state()
    text = inputs["encoder_hidden_states"].shape[1]
    if family == "flux":
        state.set_input_parameters(height=cell["height"], width=cell["width"], batch_size=1, num_inference_steps=1,
                                   max_condition_sequence_length=text, split_text_embed_in_sp=True)
        return
    state.set_video_input_parameters(height=cell["height"], width=cell["width"], num_frames=cell["frames"],
                                     batch_size=1, num_inference_steps=1, split_text_embed_in_sp=True)
    if family == "hunyuan":   # the single-stream blocks' text length: the tokens any row keeps
        text = int(inputs["encoder_attention_mask"].bool().any(dim=0).sum())
    state.max_condition_sequence_length = text   # the video setter leaves it unset


def wrap(model, family: str, config: dict):
    """The xfuser subclass of `model`'s class sharing its parameters and buffers."""
    import torch

    mod_name, cls_name = WRAPPERS[family]
    cls = getattr(importlib.import_module(mod_name), cls_name)
    with torch.device("meta"):
        xm = cls(**config)
    missing, unexpected = xm.load_state_dict(model.state_dict(), strict=False, assign=True)
    if missing or unexpected:
        raise RuntimeError(f"xdit: {cls_name} does not take the model's weights (missing {missing[:3]}, "
                           f"unexpected {unexpected[:3]})")
    # Buffers outside the state dict (rotary tables; xfuser's per-layer head permutation).
    stock = dict(model.named_buffers())
    dev = next(model.parameters()).device
    for name, buf in list(xm.named_buffers()):
        if not buf.is_meta:
            continue
        owner_name, _, attr = name.rpartition(".")
        owner = xm.get_submodule(owner_name) if owner_name else xm
        if name in stock:
            owner._buffers[attr] = stock[name]
        elif attr == "head_perm":   # identity: no head balancing
            owner._buffers[attr] = torch.arange(buf.numel(), dtype=buf.dtype, device=dev)
        else:
            raise RuntimeError(f"xdit: buffer {name} of {cls_name} has no value")
    return xm.eval().requires_grad_(False)
