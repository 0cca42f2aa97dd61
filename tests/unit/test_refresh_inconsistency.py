"""`refresh._inconsistency` (the grid offset scan's count of disagreeing read gaps, from the
offsets where each gap's verdict changes) gives the same integers as the dense table of grid
indices, on random reads and on reads that sit exactly on the scanned offsets (ties)."""

from __future__ import annotations

import numpy as np
import pytest

from jouleprof.sensors.refresh import _inconsistency, _inconsistency_dense


@pytest.mark.parametrize("seed", range(6))
def test_the_bisected_counts_equal_the_dense_table(seed):
    rng = np.random.default_rng(seed)
    for trial in range(40):
        n = int(rng.integers(1, 2000))
        period = float(rng.uniform(0.01, 0.2))
        t = np.sort(rng.uniform(0.0, float(rng.choice([1.0, 100.0, 1e4])), n + 1))
        if trial % 2:  # reads on the offsets' own grid: every boundary a tie
            t = np.round(t / (period / 100)) * (period / 100)
        changed = rng.random(n) < 0.5
        offsets = np.arange(0.0, period, period / int(rng.choice([37, 100, 200])))
        fast = _inconsistency(t[:-1], t[1:], changed, period, offsets)
        dense = _inconsistency_dense(t[:-1], t[1:], changed, period, offsets)
        assert fast.dtype == dense.dtype and fast.shape == dense.shape
        np.testing.assert_array_equal(fast, dense)
    assert dense.max() > 0  # not a comparison of zeros
