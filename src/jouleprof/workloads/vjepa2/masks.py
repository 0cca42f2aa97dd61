"""Multi-block 3-D masks, the reference V-JEPA "multiblock3d" collator's masks.

For each mask set, a clip's token grid (T, H, W) gets several blocks of one spatial scale; each
block spans the whole clip in time. The union of the blocks is the target (what the predictor must
predict); its complement is the context (the only tokens the context encoder sees). As in the
reference, one block size (scale and aspect ratio) is drawn per batch and mask set, and each block
gets its own position; the counts of a batch are then cut to the smallest sample's so the index
tensors are rectangular.

Pure numpy so that it runs in DataLoader workers and a config can import `MaskSpec` without torch.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from jouleprof.errors import ConfigError


@dataclass(frozen=True)
class MaskSpec:
    """One mask set: how many blocks, and how big."""

    num_blocks: int
    """Blocks whose union is the target region."""
    spatial_scale: float
    """Area of one block as a fraction of the spatial token grid (H × W)."""
    aspect_ratio: tuple[float, float] = (0.75, 1.5)
    """Range of a block's height / width, sampled uniformly."""
    temporal_scale: float = 1.0
    """Temporal extent of a block as a fraction of the clip's token frames (1.0: all of it)."""

    def __post_init__(self) -> None:
        if self.num_blocks < 1:
            raise ConfigError(f"num_blocks must be >= 1, got {self.num_blocks!r}")
        if not 0.0 < self.spatial_scale <= 1.0:
            raise ConfigError(f"spatial_scale must be in (0, 1], got {self.spatial_scale!r}")
        lo, hi = self.aspect_ratio
        if not 0.0 < lo <= hi:
            raise ConfigError(f"aspect_ratio must be (lo, hi) with 0 < lo <= hi, got {(lo, hi)!r}")
        if not 0.0 < self.temporal_scale <= 1.0:
            raise ConfigError(f"temporal_scale must be in (0, 1], got {self.temporal_scale!r}")


# The V-JEPA 2 pretraining masks: 8 short-range blocks of 15% and 2 long-range blocks of 70%.
REFERENCE_MASKS: tuple[MaskSpec, ...] = (MaskSpec(8, 0.15), MaskSpec(2, 0.7))


@dataclass(frozen=True)
class BlockSize:
    """The size shared by the blocks of one mask set in one batch, in tokens."""

    t: int
    h: int
    w: int
    aspect_ratio: float
    """The sampled height / width before rounding to whole tokens."""


@dataclass(frozen=True)
class Block:
    """One block: start and size along (time, height, width), in tokens."""

    t0: int
    top: int
    left: int
    size: BlockSize


@dataclass(frozen=True)
class MaskSet:
    """One mask set for a whole batch, equalized so the index arrays are rectangular."""

    context: np.ndarray
    """(B, K_context) int64 flat token indices the context encoder keeps, ascending per row."""
    target: np.ndarray
    """(B, K_target) int64 flat token indices the predictor predicts, ascending per row."""
    blocks: tuple[tuple[Block, ...], ...]
    """The blocks of each sample, before equalization (for inspection and tests)."""


def sample_block_size(
    spec: MaskSpec, grid: tuple[int, int, int], rng: np.random.Generator
) -> BlockSize:
    """Draw one block size: area from the scale, shape from a uniform aspect ratio."""
    t_grid, h_grid, w_grid = grid
    area = int(h_grid * w_grid * spec.spatial_scale)
    lo, hi = spec.aspect_ratio
    ratio = float(lo + rng.random() * (hi - lo))
    # Tiny grids would round a block to zero tokens, which masks nothing: keep at least one.
    h = min(max(1, round(math.sqrt(area * ratio))), h_grid)
    w = min(max(1, round(math.sqrt(area / ratio))), w_grid)
    t = min(max(1, int(t_grid * spec.temporal_scale)), t_grid)
    return BlockSize(t=t, h=h, w=w, aspect_ratio=ratio)


def sample_blocks(
    spec: MaskSpec, size: BlockSize, grid: tuple[int, int, int], rng: np.random.Generator
) -> tuple[Block, ...]:
    """Place `spec.num_blocks` blocks of `size` uniformly inside the grid."""
    t_grid, h_grid, w_grid = grid
    return tuple(
        Block(
            t0=int(rng.integers(0, t_grid - size.t + 1)),
            top=int(rng.integers(0, h_grid - size.h + 1)),
            left=int(rng.integers(0, w_grid - size.w + 1)),
            size=size,
        )
        for _ in range(spec.num_blocks)
    )


def blocks_to_indices(
    blocks: Sequence[Block], grid: tuple[int, int, int]
) -> tuple[np.ndarray, np.ndarray]:
    """Flat (context, target) token indices of one clip; the order is time, row, column."""
    masked = np.zeros(grid, dtype=bool)
    for b in blocks:
        s = b.size
        masked[b.t0 : b.t0 + s.t, b.top : b.top + s.h, b.left : b.left + s.w] = True
    flat = masked.reshape(-1)
    return np.flatnonzero(~flat).astype(np.int64), np.flatnonzero(flat).astype(np.int64)


class MultiBlock3dMasks:
    """Generates the mask sets of a batch.

    Args:
        grid: Token grid (T, H, W) of a clip.
        specs: One spec per mask set.
        max_tries: Redraws of a sample whose blocks leave no context before giving up.
    """

    def __init__(
        self,
        grid: tuple[int, int, int],
        specs: Sequence[MaskSpec],
        max_tries: int = 100,
    ) -> None:
        if any(g < 1 for g in grid):
            raise ConfigError(f"grid must be positive in every dimension, got {grid!r}")
        self.grid = tuple(int(g) for g in grid)
        self.specs = tuple(specs)
        self.max_tries = max_tries

    def __call__(self, batch_size: int, rng: np.random.Generator) -> list[MaskSet]:
        """Draw one `MaskSet` per spec for `batch_size` clips."""
        return [self._mask_set(spec, batch_size, rng) for spec in self.specs]

    def _mask_set(self, spec: MaskSpec, batch_size: int, rng: np.random.Generator) -> MaskSet:
        size = sample_block_size(spec, self.grid, rng)
        contexts, targets, all_blocks = [], [], []
        for _ in range(batch_size):
            for _ in range(self.max_tries):
                blocks = sample_blocks(spec, size, self.grid, rng)
                context, target = blocks_to_indices(blocks, self.grid)
                # Blocks can cover the whole grid (large scale, small grid); the reference redraws.
                if context.size:
                    break
            else:
                raise ConfigError(
                    f"mask set {spec} left no context token in {self.max_tries} draws on a "
                    f"{self.grid} token grid; use a larger crop_px or a smaller spatial_scale"
                )
            contexts.append(context)
            targets.append(target)
            all_blocks.append(blocks)
        # The reference collator keeps the first min-count indices of every sample.
        k_context = min(c.size for c in contexts)
        k_target = min(t.size for t in targets)
        return MaskSet(
            context=np.stack([c[:k_context] for c in contexts]),
            target=np.stack([t[:k_target] for t in targets]),
            blocks=tuple(all_blocks),
        )
