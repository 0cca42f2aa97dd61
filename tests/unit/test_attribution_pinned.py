"""The spread of pinning an unphysically fitted phase: its neighbour widens, their sum does not,
and a phase that shares no rows with it does not move."""

from __future__ import annotations

import numpy as np
import pytest

from jouleprof.attribution.pinned import (
    UNIFORM_SD,
    pinned_fit,
    pinned_spread,
    unphysical_columns,
)


def _rows(seed: int = 0):
    """Rows of seconds per column: idle (0), a phase A (1), a micro-phase M (2) that always
    sits beside A with 1 % of its time, and a phase B (3) in rows of its own. True powers
    80, 500, 450, 300 W; noise of 2 J per row."""
    rng = np.random.default_rng(seed)
    n = 60
    t_a = rng.uniform(0.02, 0.08, n)
    x = np.zeros((n, 4))
    x[:, 0] = rng.uniform(0.0, 0.02, n)
    x[:30, 1] = t_a[:30]
    x[:30, 2] = 0.01 * t_a[:30] * rng.uniform(0.9, 1.1, 30)
    x[30:, 3] = t_a[30:]
    true = np.array([80.0, 500.0, 450.0, 300.0])
    y = x @ true + rng.normal(0.0, 2.0, n)
    return x, y, true


def test_unphysical_columns_are_those_at_zero_or_above_the_ceiling():
    p = np.array([80.0, 0.0, 9000.0, 300.0, 400.0])
    assert unphysical_columns(p, 600.0) == [1, 2]
    assert unphysical_columns(p, 600.0, skip={1}) == [2]
    assert unphysical_columns(p, None) == [1]  # no ceiling: only the pinned-at-0 one


def test_a_pinned_fit_holds_the_pinned_power_and_refits_the_rest():
    x, y, _ = _rows()
    out = pinned_fit(x, y, 2, 450.0)
    assert out[2] == 450.0
    # the rest is the least-squares fit of what column 2 at 450 W leaves
    keep = [0, 1, 3]
    ref, *_ = np.linalg.lstsq(x[:, keep], y - 450.0 * x[:, 2], rcond=None)
    assert out[keep] == pytest.approx(ref, rel=1e-6)


def test_the_neighbour_widens_their_sum_does_not_and_a_stranger_stays():
    x, y, _ = _rows()
    free = np.array([80.0, 420.0, 9000.0, 300.0])
    rows, cols = pinned_spread(x, y, free, 600.0, 80.0, {0})
    assert cols == [2] and len(rows) == 2
    # the first row reaches the fit with M at the ceiling, its nearer bound
    assert free + rows[0] == pytest.approx(pinned_fit(x, y, 2, 600.0))
    s = rows[1]
    assert s[2] == pytest.approx(UNIFORM_SD * (600.0 - 80.0))
    # A's power moves against M's: A and M are never apart, so A pays for M's freedom.
    t_a, t_m = x[:, 1].sum(), x[:, 2].sum()
    assert abs(s[1] * t_a) > 0.5 * abs(s[2] * t_m)
    # ... and their joint energy barely moves
    assert abs(s[1] * t_a + s[2] * t_m) < 0.05 * abs(s[2] * t_m)
    # B shares no rows with M (only the idle column links them): it barely moves
    assert abs(s[3]) < 1e-3 * s[2] and abs(s[3]) < 0.05 * abs(s[1])


def test_nothing_to_pin_without_a_ceiling_or_an_unphysical_phase():
    x, y, _ = _rows()
    assert pinned_spread(x, y, np.array([80.0, 500.0, 450.0, 300.0]), 600.0, 80.0) == ([], [])
    assert pinned_spread(x, y, np.array([80.0, 500.0, 9e3, 300.0]), None, 80.0) == ([], [])
    assert pinned_spread(x, y, np.array([80.0, 500.0, 9e3, 300.0]), 50.0, 80.0) == ([], [])
