"""FLOPs of one training sample of the V-JEPA2 step, counted without allocating the model.

The counter (torch.utils.flop_counter.FlopCounterMode) runs the trainer's own forward and
backward on the meta device: shapes only, no memory, so vit_huge counts in about a second. The
mask token counts come from the real mask generator (one batch, the config's seed and batch
size). If the counter cannot run, an analytic count of the same matmuls is used and labelled.

Counted: matmuls, the tubelet convolution and attention, 2 FLOPs per multiply-add. Not counted:
elementwise ops, norms, softmax, the optimizer and EMA, and activation recomputation.
"""

from __future__ import annotations

import dataclasses
import logging

import numpy as np
import torch
from torch.utils.flop_counter import FlopCounterMode

from jouleprof.workloads.vjepa2.collate import VJepa2Batch
from jouleprof.workloads.vjepa2.config import VJepa2Config
from jouleprof.workloads.vjepa2.masks import MultiBlock3dMasks

logger = logging.getLogger(__name__)

METHODS: tuple[str, ...] = ("auto", "counter", "analytic")


def mask_token_counts(config: VJepa2Config) -> tuple[list[int], list[int]]:
    """(context, target) token counts per mask set of one representative batch."""
    sets = MultiBlock3dMasks(config.grid, config.masks)(
        config.batch_size, np.random.default_rng(config.seed)
    )
    return [s.context.shape[1] for s in sets], [s.target.shape[1] for s in sets]


def _trunk_flops(tokens: int, width: int, depth: int, mlp_ratio: float) -> int:
    hidden = int(width * mlp_ratio)
    linear = 2 * tokens * width * (3 * width + width + 2 * hidden)  # qkv, proj, fc1, fc2
    attention = 2 * 2 * tokens * tokens * width  # q·kᵀ and attn·v over all heads
    return depth * (linear + attention)


def analytic_flops(config: VJepa2Config, context: list[int], target: list[int]) -> dict:
    """Per-sample FLOPs of the step from the layer shapes alone."""
    c = config
    n = c.num_tokens
    patch = 2 * n * (3 * c.tubelet_frames * c.patch_px**2) * c.encoder_width
    target_fwd = patch + _trunk_flops(n, c.encoder_width, c.encoder_depth, c.mlp_ratio)
    context_fwd = 0
    for kc, kt in zip(context, target, strict=True):
        encoder = _trunk_flops(kc, c.encoder_width, c.encoder_depth, c.mlp_ratio)
        predictor = _trunk_flops(kc + kt, c.predictor_width, c.predictor_depth, c.mlp_ratio)
        io = 2 * (kc + kt) * c.encoder_width * c.predictor_width  # embed and proj
        context_fwd += patch + encoder + predictor + io
    # Backward is 2× forward, except the patch embedding, whose input needs no gradient.
    context_bwd = 2 * (context_fwd - len(context) * patch) + len(context) * patch
    return {
        "target_forward_flops": target_fwd,
        "context_forward_flops": context_fwd,
        "context_backward_flops": context_bwd,
    }


def counted_flops(config: VJepa2Config) -> dict:
    """Per-sample FLOPs counted by FlopCounterMode on the meta device (no memory allocated)."""
    from jouleprof.workloads.vjepa2.step import VJepa2Trainer

    # fp32 (autocast has no meta backend; FLOPs do not depend on dtype), no compile, no recompute.
    cfg = dataclasses.replace(
        config,
        dtype="fp32",
        compile=False,
        activation_checkpointing=False,
        optimizer_impl="default",
    )
    trainer = VJepa2Trainer(cfg, "meta")
    sets = MultiBlock3dMasks(cfg.grid, cfg.masks)(cfg.batch_size, np.random.default_rng(cfg.seed))
    t, h, w = cfg.num_frames, cfg.crop_px, cfg.crop_px
    batch = VJepa2Batch(
        clips=torch.empty(cfg.batch_size, 3, t, h, w, device="meta"),
        context=[torch.from_numpy(s.context).to("meta") for s in sets],
        target=[torch.from_numpy(s.target).to("meta") for s in sets],
    )
    with FlopCounterMode(display=False) as target_counter:
        features = trainer._forward_target(batch)
    with FlopCounterMode(display=False) as context_counter:
        loss = trainer._forward_context(batch, features)
    with FlopCounterMode(display=False) as backward_counter:
        loss.backward()
    b = cfg.batch_size
    return {
        "target_forward_flops": target_counter.get_total_flops() // b,
        "context_forward_flops": context_counter.get_total_flops() // b,
        "context_backward_flops": backward_counter.get_total_flops() // b,
    }


def flops_per_sample(config: VJepa2Config, method: str = "auto", cache: bool = True) -> dict:
    """FLOPs of one training sample.

    The count depends only on the config (shapes, masks, seed), so it is cached on disk
    (`jouleprof.cache`, kind "flops"): a study's cells, each a fresh process, count it once.

    Args:
        config: The step; its batch size and seed fix the representative mask token counts.
        method: 'counter' (FlopCounterMode on meta), 'analytic', or 'auto' (counter, else
            analytic with a logged warning).

    Returns:
        forward_flops (target + context forward), forward_backward_flops (plus the context
        backward; the target encoder has none), the three parts, method, and the token counts.
    """
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    from jouleprof import cache as disk

    key = disk.key_of({"config": dataclasses.asdict(config), "method": method, "v": 1})
    if cache and (hit := disk.read_json("flops", key)) is not None:
        return hit
    result = _flops_per_sample(config, method)
    if cache and (result["method"] != "analytic" or method == "analytic"):  # no fallbacks
        disk.write_json("flops", key, result)
    return result


def _flops_per_sample(config: VJepa2Config, method: str) -> dict:
    context, target = mask_token_counts(config)
    parts, used = None, "analytic"
    if method in ("auto", "counter"):
        try:
            parts, used = counted_flops(config), "flop_counter_meta"
        except Exception as e:  # any failure of the tracer falls back, loudly
            if method == "counter":
                raise
            logger.warning("FLOP counter failed (%s); using the analytic count", e)
    if parts is None:
        parts = analytic_flops(config, context, target)
    forward = parts["target_forward_flops"] + parts["context_forward_flops"]
    return {
        **parts,
        "forward_flops": forward,
        "forward_backward_flops": forward + parts["context_backward_flops"],
        "method": used,
        "clip_tokens": config.num_tokens,
        "context_tokens": context,
        "target_tokens": target,
        "batch_size": config.batch_size,
    }
