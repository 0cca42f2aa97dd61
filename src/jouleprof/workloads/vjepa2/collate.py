"""Batches for the V-JEPA2 step: stacked clips plus the mask indices, built on the CPU.

Mask generation happens here, in the DataLoader workers, as in the reference collator, so the
GPU step receives ready index tensors and spends no time on it.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, Sampler, get_worker_info

from jouleprof.workloads.vjepa2.config import VJepa2Config
from jouleprof.workloads.vjepa2.masks import MultiBlock3dMasks

logger = logging.getLogger(__name__)


@dataclass
class VJepa2Batch:
    """One micro-batch: clips and, per mask set, the context and target token indices."""

    clips: torch.Tensor
    """float32 (B, 3, T, H, W), normalized."""
    context: list[torch.Tensor]
    """Per mask set, int64 (B, K_context) token indices the context encoder keeps."""
    target: list[torch.Tensor]
    """Per mask set, int64 (B, K_target) token indices the predictor predicts."""

    @property
    def batch_size(self) -> int:
        return int(self.clips.shape[0])

    def pin_memory(self) -> VJepa2Batch:
        """Page-locked copy, called by the DataLoader's pin-memory thread."""
        return VJepa2Batch(
            self.clips.pin_memory(),
            [c.pin_memory() for c in self.context],
            [t.pin_memory() for t in self.target],
        )

    def to(self, device: torch.device | str, non_blocking: bool = False) -> VJepa2Batch:
        """The batch on `device`; asynchronous from pinned memory when `non_blocking`."""
        return VJepa2Batch(
            self.clips.to(device, non_blocking=non_blocking),
            [c.to(device, non_blocking=non_blocking) for c in self.context],
            [t.to(device, non_blocking=non_blocking) for t in self.target],
        )


class VJepa2Collator:
    """Stacks clips (items may be `clip` or `(clip, label)`) and draws the masks of the batch.

    Args:
        config: Gives the token grid and the mask specs.
        seed: Mixed with the worker id, so each worker draws its own masks reproducibly.
    """

    def __init__(self, config: VJepa2Config, seed: int | None = None) -> None:
        self.masks = MultiBlock3dMasks(config.grid, config.masks)
        self.seed = config.seed if seed is None else seed
        self._rng: np.random.Generator | None = None
        self._worker = -2

    def _generator(self) -> np.random.Generator:
        info = get_worker_info()
        worker = -1 if info is None else info.id
        if self._rng is None or worker != self._worker:
            self._rng = np.random.default_rng([self.seed, worker + 1])
            self._worker = worker
        return self._rng

    def __call__(self, items: Sequence[torch.Tensor | tuple]) -> VJepa2Batch:
        clips = torch.stack([i[0] if isinstance(i, tuple | list) else i for i in items])
        sets = self.masks(len(items), self._generator())
        return VJepa2Batch(
            clips,
            [torch.from_numpy(s.context) for s in sets],
            [torch.from_numpy(s.target) for s in sets],
        )


class InfiniteSampler(Sampler[int]):
    """Shuffled indices, epoch after epoch, forever: one DataLoader iterator serves a whole run,
    so persistent workers never restart mid-run."""

    def __init__(self, size: int, seed: int = 0) -> None:
        if size < 1:
            raise ValueError(f"size must be >= 1, got {size}")
        self.size, self.seed = size, seed

    def __iter__(self) -> Iterator[int]:
        rng = np.random.default_rng(self.seed)
        while True:
            yield from rng.permutation(self.size).tolist()


def build_dataset(
    config: VJepa2Config, source: object, *, cache_dir: str | Path | None = None
) -> Dataset:
    """A clip Dataset from `source`: a Dataset (used as is), 'fake' (FakeVideo with default
    synthesis), a folder or .csv list, or a sequence of video paths."""
    if isinstance(source, Dataset):
        return source
    from jouleprof.data.clipdataset import VideoClipDataset  # PyAV only when video is used

    common = dict(
        num_frames=config.num_frames,
        frame_stride=config.frame_stride,
        crop_px=config.crop_px,
        seed=config.seed,
    )
    if source == "fake":
        from jouleprof.data.fakevideo import FakeVideo, FakeVideoSpec

        # Frames a bit larger than the crop and a bit longer than the sampled span, so the
        # random crop and the random start both have room, as with real clips.
        side = 2 * ((config.crop_px * 8 // 7 + 1) // 2)
        span = (config.num_frames - 1) * config.frame_stride + 1
        spec = FakeVideoSpec(
            frames_per_clip=span + 16, height_px=side, width_px=side, seed=config.seed
        )
        return FakeVideo(spec, cache_dir=cache_dir, **common)
    if isinstance(source, str | Path):
        from jouleprof.data.clips import find_clips

        entries = find_clips(source)
        labels = [e.label for e in entries]
        return VideoClipDataset(
            [e.path for e in entries],
            labels=labels if any(label is not None for label in labels) else None,
            **common,
        )
    if isinstance(source, Sequence):
        return VideoClipDataset(list(source), **common)
    raise TypeError(
        f"source must be a Dataset, 'fake', a folder, a .csv list or a list of paths; "
        f"got {type(source).__name__}"
    )


def make_loader(
    config: VJepa2Config,
    source: object,
    *,
    device: torch.device | str | None = None,
    cache_dir: str | Path | None = None,
    infinite: bool = True,
    num_workers: int | None = None,
) -> DataLoader:
    """A DataLoader of `VJepa2Batch` for training.

    Args:
        config: Batch size, workers, seed, clip shape and masks.
        source: See `build_dataset`.
        device: Where batches go; memory is pinned when it is a CUDA device.
        cache_dir: FakeVideo's cache folder.
        infinite: Iterate forever (training) rather than one pass.
        num_workers: Overrides `config.num_workers`.
    """
    dataset = build_dataset(config, source, cache_dir=cache_dir)
    workers = config.num_workers if num_workers is None else num_workers
    pin = device is not None and torch.device(device).type == "cuda"
    if len(dataset) < config.batch_size:
        logger.warning(
            "dataset has %d clips, fewer than batch_size %d", len(dataset), config.batch_size
        )
    generator = torch.Generator().manual_seed(config.seed)
    return DataLoader(
        dataset,
        batch_size=config.batch_size,
        sampler=InfiniteSampler(len(dataset), config.seed) if infinite else None,
        shuffle=None if infinite else True,
        drop_last=True,
        num_workers=workers,
        collate_fn=VJepa2Collator(config),
        pin_memory=pin,
        persistent_workers=workers > 0,
        generator=generator,
    )
