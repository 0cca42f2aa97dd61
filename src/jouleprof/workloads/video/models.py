"""The video-classifier registry: one place to add a model, one (B, T, C, H, W) interface.

    from jouleprof.workloads.video.models import build_model, get_spec, normalize
    model = build_model("hiera-b", num_classes=20)            # random initialization
    model = build_model("videomae-b", 20, weights="/models/videomae-base-k400")  # local or hub id
    logits = model(normalize(clip_uint8, model.spec))         # clip: (B, T, C, H, W)

A model is a `ModelSpec` (normalization, default clip, LoRA targets, hub id) plus a builder in
`families.py`; add one by adding both to `_SPECS` / `families.BUILDERS`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
KINETICS_MEAN = (0.45, 0.45, 0.45)
KINETICS_STD = (0.225, 0.225, 0.225)


@dataclass(frozen=True)
class ModelSpec:
    """What the rest of jouleprof needs to know about one video classifier."""

    name: str
    """Registry name, e.g. "videomae-b"."""
    family: str
    """Builder in `families.BUILDERS`: videomae, timesformer, swin3d, hiera."""
    mean: tuple[float, float, float]
    """Per-channel mean the model was trained with (RGB, pixels in [0, 1])."""
    std: tuple[float, float, float]
    """Per-channel standard deviation (RGB, pixels in [0, 1])."""
    frames: int
    """Default clip length in frames."""
    size: int
    """Default frame side in pixels (square crops)."""
    lora_targets: tuple[str, ...]
    """Module-name suffixes LoRA adapts: a fused qkv projection adapts q, k and v together;
    separate projections adapt query and value."""
    hub_id: str | None
    """The usual pretrained weights (a Hugging Face id or the builder's checkpoint name), for
    `--weights`; never loaded unless asked."""
    description: str = ""

    def __post_init__(self) -> None:
        if len(self.mean) != 3 or len(self.std) != 3 or min(self.std) <= 0:
            raise ValueError(f"{self.name}: mean and std must have 3 entries, std > 0")
        if self.frames < 1 or self.size < 1:
            raise ValueError(f"{self.name}: frames and size must be ≥ 1")


_SPECS: dict[str, ModelSpec] = {
    s.name: s
    for s in (
        ModelSpec(
            "videomae-b",
            "videomae",
            IMAGENET_MEAN,
            IMAGENET_STD,
            16,
            224,
            ("query", "value"),
            "MCG-NJU/videomae-base-finetuned-kinetics",
            "VideoMAE ViT-B/16, tubelet 2 (transformers)",
        ),
        ModelSpec(
            "timesformer-b",
            "timesformer",
            KINETICS_MEAN,
            KINETICS_STD,
            16,
            224,
            ("qkv",),
            "facebook/timesformer-base-finetuned-k400",
            "TimeSformer-B divided space-time attention (transformers); natively 8 frames, "
            "fed 16 (time embeddings interpolated)",
        ),
        ModelSpec(
            "swin3d-b",
            "swin3d",
            IMAGENET_MEAN,
            IMAGENET_STD,
            16,
            224,
            ("qkv",),
            "KINETICS400_V1",
            "Video Swin-B (torchvision swin3d_b); attention patched to call its qkv/proj modules",
        ),
        ModelSpec(
            "hiera-b",
            "hiera",
            KINETICS_MEAN,
            KINETICS_STD,
            16,
            224,
            ("qkv",),
            "mae_k400_ft_k400",
            "Hiera-B video 16x224 (hiera-transformer)",
        ),
    )
}

MODEL_NAMES: tuple[str, ...] = tuple(_SPECS)


def model_names() -> list[str]:
    """Registered video models, in registry order."""
    return list(_SPECS)


def get_spec(name: str) -> ModelSpec:
    """The spec of `name`; ValueError listing the registered names."""
    try:
        return _SPECS[name]
    except KeyError:
        raise ValueError(
            f"unknown video model {name!r}: choose one of {', '.join(_SPECS)}"
        ) from None


def normalize(x: Any, spec: ModelSpec) -> Any:
    """Pixels (uint8 in [0, 255] or float in [0, 1]), (..., T, C, H, W) -> normalized float32."""
    import torch

    x = x.float().div_(255.0) if x.dtype == torch.uint8 else x.float()
    shape = (1,) * (x.dim() - 3) + (3, 1, 1)
    mean = torch.tensor(spec.mean, device=x.device).view(shape)
    std = torch.tensor(spec.std, device=x.device).view(shape)
    return (x - mean) / std


def build_model(
    name: str,
    num_classes: int,
    *,
    weights: str | None = None,
    tiny: bool = False,
    frames: int | None = None,
    size: int | None = None,
):
    """Build the classifier `name` with a `num_classes` head.

    Args:
        weights: None for random initialization; a local path (a Hugging Face model folder, or a
            .pth/.pt/.safetensors state dict) or a hub id / checkpoint name. Never downloaded in
            tests; `model.init` says which was used (put it in the run record).
        tiny: a few-layer, narrow config of the same family (CPU tests); its default clip is
            4 frames of 32×32.
        frames, size: the clip the model is fed (default: the spec's, or 4×32 when tiny).

    Returns:
        A `VideoClassifier`.
    """
    from jouleprof.workloads.video.families import BUILDERS

    spec = get_spec(name)
    if num_classes < 1:
        raise ValueError(f"num_classes must be ≥ 1, got {num_classes}")
    if tiny and weights is not None:
        raise ValueError("tiny configs are randomly initialized: leave weights out")
    frames = frames or (4 if tiny else spec.frames)
    size = size or (32 if tiny else spec.size)
    return BUILDERS[spec.family](
        spec, num_classes, weights=weights, tiny=tiny, frames=frames, size=size
    )
