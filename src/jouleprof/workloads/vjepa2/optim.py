"""AdamW with the reference parameter groups, and the learning-rate and EMA schedules."""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable

import torch
from torch import nn

from jouleprof.workloads.vjepa2.config import VJepa2Config

logger = logging.getLogger(__name__)

BETAS = (0.9, 0.999)


def param_groups(modules: Iterable[nn.Module], weight_decay: float) -> list[dict]:
    """Two AdamW groups: decay on weights, none on biases and 1-D parameters (norms).

    Same rule as the reference: a parameter is exempt if 'bias' is in its name or it is 1-D.
    """
    decay, no_decay = [], []
    for module in modules:
        for name, p in module.named_parameters():
            if not p.requires_grad:
                continue
            (no_decay if "bias" in name or p.ndim == 1 else decay).append(p)
    return [
        {"params": decay, "weight_decay": weight_decay},
        {"params": no_decay, "weight_decay": 0.0},
    ]


def build_optimizer(
    config: VJepa2Config, modules: Iterable[nn.Module], device: torch.device
) -> torch.optim.AdamW:
    """AdamW with the kernel `config.optimizer_impl` asks for.

    'fused' runs on CUDA only here; on another device it falls back to 'foreach' with a warning
    rather than failing, so one config serves a CPU smoke test and a GPU run.
    """
    impl = config.optimizer_impl
    if impl == "fused" and device.type != "cuda":
        logger.warning("optimizer_impl='fused' needs CUDA; using 'foreach' on %s", device)
        impl = "foreach"
    kwargs = {"fused": True} if impl == "fused" else {"foreach": impl == "foreach"}
    return torch.optim.AdamW(
        param_groups(modules, config.weight_decay),
        lr=lr_at(0, config),
        betas=BETAS,
        **kwargs,
    )


def lr_at(step: int, config: VJepa2Config) -> float:
    """Learning rate of optimizer step `step` (0-based): linear warm-up, then half cosine."""
    c = config
    if step < c.warmup_steps:
        return c.lr_start + (c.lr_peak - c.lr_start) * step / c.warmup_steps
    span = max(1, c.total_steps - c.warmup_steps)
    progress = min(1.0, (step - c.warmup_steps) / span)
    return c.lr_final + (c.lr_peak - c.lr_final) * 0.5 * (1.0 + math.cos(math.pi * progress))


def momentum_at(step: int, config: VJepa2Config) -> float:
    """EMA momentum of optimizer step `step`: linear from ema_start to ema_end over total_steps."""
    progress = min(1.0, step / config.total_steps)
    return config.ema_start + (config.ema_end - config.ema_start) * progress
