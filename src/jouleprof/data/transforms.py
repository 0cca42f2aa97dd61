"""Turning decoded frames into a training clip: temporal sampling, random resized crop, flip,
normalization. The frame-index and crop-box draws are pure numpy; the resize runs in torch."""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F

IMAGENET_MEAN: tuple[float, float, float] = (0.485, 0.456, 0.406)
IMAGENET_STD: tuple[float, float, float] = (0.229, 0.224, 0.225)
SHORT_CLIP_MODES: tuple[str, ...] = ("pad", "wrap")


def sample_frame_indices(
    clip_frames: int,
    num_frames: int,
    stride: int,
    rng: np.random.Generator,
    short_clip: str = "pad",
) -> np.ndarray:
    """Positions of `num_frames` frames `stride` apart, starting at a random frame.

    A clip shorter than the span gets its window from frame 0, and the positions past its end are
    either clamped to the last frame ('pad', as the reference loader does) or wrapped ('wrap').
    """
    if clip_frames < 1 or num_frames < 1 or stride < 1:
        raise ValueError(
            f"clip_frames, num_frames and stride must be >= 1, got "
            f"{clip_frames}, {num_frames}, {stride}"
        )
    if short_clip not in SHORT_CLIP_MODES:
        raise ValueError(f"short_clip must be one of {SHORT_CLIP_MODES}, got {short_clip!r}")
    span = (num_frames - 1) * stride + 1
    if clip_frames >= span:
        start = int(rng.integers(0, clip_frames - span + 1))
        return start + stride * np.arange(num_frames, dtype=np.int64)
    offsets = stride * np.arange(num_frames, dtype=np.int64)
    if short_clip == "wrap":
        return offsets % clip_frames
    return np.minimum(offsets, clip_frames - 1)


def random_resized_crop_box(
    height: int,
    width: int,
    scale: tuple[float, float],
    ratio: tuple[float, float],
    rng: np.random.Generator,
    tries: int = 10,
) -> tuple[int, int, int, int]:
    """A (top, left, h, w) box of random area fraction `scale` and width/height `ratio`.

    Falls back to the largest centred box of a ratio within range, like torchvision.
    """
    area = height * width
    log_lo, log_hi = math.log(ratio[0]), math.log(ratio[1])
    for _ in range(tries):
        target = area * rng.uniform(scale[0], scale[1])
        aspect = math.exp(rng.uniform(log_lo, log_hi))
        w = round(math.sqrt(target * aspect))
        h = round(math.sqrt(target / aspect))
        if 0 < w <= width and 0 < h <= height:
            top = int(rng.integers(0, height - h + 1))
            left = int(rng.integers(0, width - w + 1))
            return top, left, h, w
    aspect = width / height
    if aspect < ratio[0]:
        w, h = width, round(width / ratio[0])
    elif aspect > ratio[1]:
        h, w = height, round(height * ratio[1])
    else:
        h, w = height, width
    return (height - h) // 2, (width - w) // 2, h, w


def frames_to_clip(
    frames: np.ndarray,
    box: tuple[int, int, int, int],
    size_px: int,
    flip: bool,
    mean: tuple[float, float, float] = IMAGENET_MEAN,
    std: tuple[float, float, float] = IMAGENET_STD,
) -> torch.Tensor:
    """Crops `box` from uint8 (T, H, W, 3) frames, resizes to size_px², flips, normalizes.

    Returns:
        float32 (3, T, size_px, size_px), the layout the tubelet embedding takes.
    """
    top, left, h, w = box
    crop = torch.from_numpy(np.ascontiguousarray(frames[:, top : top + h, left : left + w]))
    x = crop.permute(0, 3, 1, 2).to(torch.float32)  # (T, 3, h, w)
    if (h, w) != (size_px, size_px):
        x = F.interpolate(x, size=(size_px, size_px), mode="bilinear", align_corners=False)
    if flip:
        x = x.flip(-1)
    m = torch.tensor(mean, dtype=torch.float32).view(1, 3, 1, 1) * 255.0
    s = torch.tensor(std, dtype=torch.float32).view(1, 3, 1, 1) * 255.0
    return ((x - m) / s).permute(1, 0, 2, 3).contiguous()
