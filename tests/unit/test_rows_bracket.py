"""Where a power reading's refresh fell: its grid instant and its update bracket combined."""

from __future__ import annotations

import numpy as np
import pytest

from jouleprof.attribution.rows import SensorRows, bracket_posterior


def test_a_jittery_grid_defers_to_the_bracket_and_a_tight_one_to_the_grid():
    # Grid σ 15 ms, reads 20 ms apart: nearly uniform over the bracket.
    m, sd = bracket_posterior([1.000], 0.015, [0.995], [1.015])
    assert m[0] == pytest.approx(1.005, abs=1e-3)
    assert sd[0] == pytest.approx(0.020 / np.sqrt(12), rel=0.1)
    # Grid σ 1 ms inside a 20 ms bracket: the grid's own mean and σ.
    m, sd = bracket_posterior([1.000], 0.001, [0.990], [1.010])
    assert m[0] == pytest.approx(1.000, abs=1e-6) and sd[0] == pytest.approx(0.001, rel=0.01)
    # A bracket beyond the grid's reach says nothing usable: the grid stands.
    m, sd = bracket_posterior([1.000], 0.001, [1.5], [1.6])
    assert m[0] == 1.0 and sd[0] == 0.001
    # No jitter: the grid instant exactly.
    m, sd = bracket_posterior([1.0], 0.0, [0.99], [1.01])
    assert m[0] == 1.0 and sd[0] == 0.0


def test_a_rows_own_sigma_never_exceeds_its_kinds():
    rows = SensorRows(
        np.zeros(3),
        np.ones(3),
        np.ones(3),
        np.array([0, 1, 1]),
        np.ones(3),
        np.array([np.nan, 0.004, 0.030]),
    )
    np.testing.assert_allclose(
        rows.row_sigma_s(np.array([0.002, 0.015, 0.015])), [0.002, 0.004, 0.015]
    )
    kept = rows.select(np.array([False, True, True]))
    np.testing.assert_allclose(kept.sigma_s, [0.004, 0.030])
