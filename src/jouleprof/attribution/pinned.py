"""How far the other phases lean on a phase whose fitted power is unphysical.

A phase fitted above any power the sensor read (or pinned at 0 W) has traded energy with its
neighbours: the fit had no information to place its power, so it put it where the rows' noise
led, and its neighbours moved with it. The bootstrap does not see this (every resample leans on
the same freedom), so a neighbour can come out "resolved" with a narrow interval, far from the
truth: on simulated 60-step CPU runs a micro-phase of 20 µs a step fitted at 5–8 kW beside
phases fitted 10–30 % off, truth outside their intervals.

The true power of such a phase is somewhere between the least and the most power the sensor
read. So the fit is repeated with it pinned at each end, and two rows join the sensor model's
spread (`sens_w`), each as one standard deviation: how the other powers move from the free fit
to the nearer end (the powers reported stay the free fit's, but the interval reaches the
physical one), and how they move between the two ends, as a value uniform over that range
(÷ √12). A neighbour that depends on the pinned phase widens by that much; a joint row with it
stays as it was (their sum does not move); a phase that shares no rows with it barely moves.
"""

from __future__ import annotations

import numpy as np

from jouleprof.attribution.nnls import nnls_rows

UNIFORM_SD = 1.0 / np.sqrt(12.0)
"""The standard deviation of a value uniform over a range of width 1."""


def unphysical_side(power_w: float, ceiling_w: float | None) -> str | None:
    """Where a fitted power leaves the physical range: "floor" at or below 0 W, "ceiling"
    above `ceiling_w` (the most the sensor read; None: unknown), None inside it. The one test
    of "unphysical" for the spread here and the phase rows' notes (`regression_results`)."""
    if power_w <= 0.0:
        return "floor"
    if ceiling_w is not None and power_w > ceiling_w:
        return "ceiling"
    return None


def unphysical_columns(
    power_w: np.ndarray, ceiling_w: float | None, skip: set[int] | frozenset[int] = frozenset()
) -> list[int]:
    """Columns (indices into `power_w`) whose power is unphysical (`unphysical_side`), except
    those in `skip` (the idle column, whose power is a floor and not a phase's)."""
    return [
        i
        for i, p in enumerate(np.asarray(power_w, dtype=float))
        if i not in skip and unphysical_side(float(p), ceiling_w) is not None
    ]


def pinned_fit(a: np.ndarray, b: np.ndarray, col: int, power_w: float) -> np.ndarray:
    """The non-negative least-squares powers of weighted rows `a`, `b` with column `col`'s
    power fixed at `power_w` (its share taken off the target, the rest refitted)."""
    keep = np.arange(a.shape[1]) != col
    out = np.empty(a.shape[1])
    out[keep] = nnls_rows(a[:, keep], b - a[:, col] * power_w)
    out[col] = power_w
    return out


def pinned_spread(
    a: np.ndarray,
    b: np.ndarray,
    power_w: np.ndarray,
    ceiling_w: float | None,
    floor_w: float,
    skip: set[int] | frozenset[int] = frozenset(),
) -> tuple[list[np.ndarray], list[int]]:
    """Two spread rows per unphysical column (`unphysical_columns`): the powers' move from
    `power_w` to the fit with that column pinned at the nearer of `floor_w` and `ceiling_w`,
    and their move between the two pinned fits × 1/√12 (1 σ of a value uniform between them).
    Returns (rows, the columns they belong to, once each); none where `ceiling_w` is unknown
    (no power field to bound the fit) or not above `floor_w`."""
    if ceiling_w is None or not ceiling_w > floor_w:
        return [], []
    cols = unphysical_columns(power_w, ceiling_w, skip)
    rows = []
    for c in cols:
        lo = pinned_fit(a, b, c, floor_w)
        hi = pinned_fit(a, b, c, ceiling_w)
        nearest = hi if power_w[c] > ceiling_w else lo
        rows.append(nearest - np.asarray(power_w, dtype=float))
        rows.append(UNIFORM_SD * (hi - lo))
    return rows, cols
