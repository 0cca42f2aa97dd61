"""Multi-block 3-D masks: block structure, disjoint context/target, equalized batches."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jouleprof.errors import ConfigError
from jouleprof.workloads.vjepa2.masks import (
    REFERENCE_MASKS,
    MaskSpec,
    MultiBlock3dMasks,
    blocks_to_indices,
)

GRIDS = [(8, 14, 14), (2, 4, 4), (4, 7, 7), (8, 16, 16)]


def test_reference_masks_are_the_v_jepa2_ones():
    assert [(m.num_blocks, m.spatial_scale) for m in REFERENCE_MASKS] == [(8, 0.15), (2, 0.7)]
    assert all(m.aspect_ratio == (0.75, 1.5) and m.temporal_scale == 1.0 for m in REFERENCE_MASKS)


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    batch_size=st.integers(1, 8),
    grid=st.sampled_from(GRIDS),
)
def test_mask_sets_have_the_requested_structure(seed, batch_size, grid):
    t_grid, h_grid, w_grid = grid
    n_tokens = t_grid * h_grid * w_grid
    sets = MultiBlock3dMasks(grid, REFERENCE_MASKS)(batch_size, np.random.default_rng(seed))
    assert len(sets) == len(REFERENCE_MASKS)
    for spec, mask_set in zip(REFERENCE_MASKS, sets, strict=True):
        assert mask_set.context.shape[0] == mask_set.target.shape[0] == batch_size
        assert mask_set.context.dtype == mask_set.target.dtype == np.int64
        assert len(mask_set.blocks) == batch_size
        sizes = {b.size for blocks in mask_set.blocks for b in blocks}
        assert len(sizes) == 1, "one block size per batch and mask set, as in the reference"
        (size,) = sizes
        lo, hi = spec.aspect_ratio
        assert lo <= size.aspect_ratio <= hi
        area = int(h_grid * w_grid * spec.spatial_scale)
        assert size.h == min(max(1, round(math.sqrt(area * size.aspect_ratio))), h_grid)
        assert size.w == min(max(1, round(math.sqrt(area / size.aspect_ratio))), w_grid)
        assert size.t == t_grid  # full temporal extent
        full_context, full_target = [], []
        for blocks, ctx_row, tgt_row in zip(
            mask_set.blocks, mask_set.context, mask_set.target, strict=True
        ):
            assert len(blocks) == spec.num_blocks
            for b in blocks:
                assert b.t0 == 0
                assert 0 <= b.top <= h_grid - size.h and 0 <= b.left <= w_grid - size.w
            context, target = blocks_to_indices(blocks, grid)
            # Context and target split the clip, and the target is exactly the blocks' union.
            assert context.size + target.size == n_tokens
            assert not set(context) & set(target)
            assert context.size > 0
            union = np.zeros(grid, dtype=bool)
            for b in blocks:
                union[:, b.top : b.top + size.h, b.left : b.left + size.w] = True
            assert target.size == union.sum()
            # Every masked position is masked in every token frame.
            masked = np.zeros(n_tokens, dtype=bool)
            masked[target] = True
            masked = masked.reshape(grid)
            assert (masked == masked[:1]).all()
            # Equalized rows are the first indices of each sample's own sets.
            np.testing.assert_array_equal(ctx_row, context[: ctx_row.size])
            np.testing.assert_array_equal(tgt_row, target[: tgt_row.size])
            assert not set(ctx_row) & set(tgt_row)
            full_context.append(context.size)
            full_target.append(target.size)
        assert mask_set.context.shape[1] == min(full_context)
        assert mask_set.target.shape[1] == min(full_target)
        assert (np.diff(mask_set.context, axis=1) > 0).all()
        assert (np.diff(mask_set.target, axis=1) > 0).all()


def test_same_seed_same_masks():
    gen = MultiBlock3dMasks((8, 14, 14), REFERENCE_MASKS)
    a = gen(4, np.random.default_rng(3))
    b = gen(4, np.random.default_rng(3))
    for x, y in zip(a, b, strict=True):
        np.testing.assert_array_equal(x.context, y.context)
        np.testing.assert_array_equal(x.target, y.target)


def test_masks_that_cover_everything_raise():
    spec = MaskSpec(num_blocks=4, spatial_scale=1.0)
    with pytest.raises(ConfigError, match="no context token"):
        MultiBlock3dMasks((2, 2, 2), [spec], max_tries=5)(2, np.random.default_rng(0))


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"num_blocks": 0, "spatial_scale": 0.1}, "num_blocks"),
        ({"num_blocks": 1, "spatial_scale": 1.5}, "spatial_scale"),
        ({"num_blocks": 1, "spatial_scale": 0.1, "aspect_ratio": (2.0, 1.0)}, "aspect_ratio"),
        ({"num_blocks": 1, "spatial_scale": 0.1, "temporal_scale": 0.0}, "temporal_scale"),
    ],
)
def test_bad_mask_spec_names_the_field(kwargs, field):
    with pytest.raises(ValueError, match=field):
        MaskSpec(**kwargs)
