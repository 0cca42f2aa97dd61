"""Named V-JEPA2 configurations: plain functions in a registry, looked up by `get_preset`."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from jouleprof.errors import ConfigError
from jouleprof.workloads.vjepa2.config import VJepa2Config

PRESETS: dict[str, Callable[[], VJepa2Config]] = {}


def register_preset(fn: Callable[[], VJepa2Config]) -> Callable[[], VJepa2Config]:
    """Adds a preset under its function's name."""
    PRESETS[fn.__name__] = fn
    return fn


@register_preset
def vit_huge() -> VJepa2Config:
    """The reference step studied: ViT-H/16, tubelet 2, 16 frames at 224² (1568 tokens)."""
    return VJepa2Config(encoder_width=1280, encoder_depth=32, encoder_heads=16)


@register_preset
def vit_large() -> VJepa2Config:
    """ViT-L/16 encoders with the same predictor and clips as `vit_huge`."""
    return VJepa2Config(encoder_width=1024, encoder_depth=24, encoder_heads=16)


@register_preset
def vit_base() -> VJepa2Config:
    """ViT-B/16 encoders with the same predictor and clips as `vit_huge`."""
    return VJepa2Config(encoder_width=768, encoder_depth=12, encoder_heads=12)


@register_preset
def tiny() -> VJepa2Config:
    """A toy that trains on a CPU in seconds: 4 frames at 64² (32 tokens), fp32, no workers.

    64² rather than 32² so the 15% blocks cover whole tokens of a 4 × 4 grid.
    """
    return VJepa2Config(
        encoder_width=64,
        encoder_depth=2,
        encoder_heads=4,
        num_frames=4,
        crop_px=64,
        frame_stride=2,
        predictor_depth=1,
        predictor_width=32,
        predictor_heads=4,
        batch_size=4,
        lr_start=1e-3,
        lr_peak=1e-3,
        lr_final=1e-4,
        warmup_steps=0,
        total_steps=1000,
        dtype="fp32",
        optimizer_impl="foreach",
        num_workers=0,
    )


def preset_names() -> tuple[str, ...]:
    """The registered preset names, sorted."""
    return tuple(sorted(PRESETS))


def get_preset(name: str, **overrides: Any) -> VJepa2Config:
    """The preset `name` with fields replaced by `overrides` (checked again).

    Raises:
        ConfigError: the name is unknown (the message lists the valid ones) or an override is not
            a config field.
    """
    if name not in PRESETS:
        raise ConfigError(
            f"unknown V-JEPA2 preset {name!r}; valid presets: {', '.join(preset_names())}"
        )
    fields = {f.name for f in dataclasses.fields(VJepa2Config)}
    unknown = sorted(set(overrides) - fields)
    if unknown:
        raise ConfigError(f"unknown VJepa2Config fields {unknown}; valid fields: {sorted(fields)}")
    return dataclasses.replace(PRESETS[name](), **overrides)
