"""Placing an ambiguous energy-counter grid by the fit's own residual (pure functions).

Read about once per refresh, the counter's refresh grid is located by the read gaps that saw
no refresh (`sensors.refresh.detect_counter_grid`). A run of a few seconds has only a handful
of them, and offsets tens of milliseconds apart can agree with every one: on a 7 s run of the
simulated GPU, three separate stretches of the 100 ms period did. Counter rows placed on the
wrong stretch misplace every refresh by that much; the fit then pulls the power fields' gain
by percents to reconcile them, and the bootstrap, which resamples rows that are all misplaced
alike, does not see it (a +5 % error inside a ±0.1 % interval).

The counter's energies do see it: at a wrong offset each counter row books joules from the
wrong part of the step, and its residual against the other rows is several times that at the
right one (157 W against 11 W on that run). So where the grid's position is uncertain beyond
`AMBIGUOUS_OFFSET_SE_S`, `scan_offsets` fits the rows with the grid shifted to offsets across
the whole period, keeps the middle of the stretch of shifts whose residual is within
`NEAR_BEST` of the lowest (a flat bottom: the rows cannot tell those offsets apart), and
gives the grid a position uncertainty of half that stretch, so that the placement's
refinement and the interval's sensor-model spread carry it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from jouleprof.sensors.refresh_fit import JitterGrid

AMBIGUOUS_OFFSET_SE_S = 0.003
"""A counter grid whose position's standard error exceeds this is placed by the scan (the
H200 runs' counter grids were placed to ≤ 1.8 ms: none of them is scanned)."""
SCAN_STEP_S = 0.0025
"""Spacing of the offsets the scan tries."""
NEAR_BEST = 1.1
"""Shifts whose residual RMS is within this factor of the lowest count as equally good."""
SCAN_WINDOW_S = 60.0
"""The scan fits the readings of at most this long a stretch of the run (its middle): a grid
this uncertain comes from a short run, and on a long one 40 fits of every row would cost
minutes."""


def scan_window(t_s: np.ndarray, window_s: float = SCAN_WINDOW_S) -> np.ndarray:
    """Which readings (stamped `t_s`) the scan fits: all of a run up to `window_s` long, else
    the `window_s` around the middle of its readings."""
    t = np.asarray(t_s, dtype=float)
    if len(t) == 0 or float(t.max() - t.min()) <= window_s:
        return np.ones(len(t), dtype=bool)
    mid = 0.5 * float(t.max() + t.min())
    return (t >= mid - 0.5 * window_s) & (t <= mid + 0.5 * window_s)


def is_ambiguous(jc: JitterGrid | None) -> bool:
    """Whether `jc`'s position is too uncertain for its rows to be trusted where they fall."""
    if jc is None:
        return False
    se = jc.offset_se_s
    return not np.isfinite(se) or se > AMBIGUOUS_OFFSET_SE_S


def shifted(jc: JitterGrid, shift_s: float, offset_se_s: float | None = None) -> JitterGrid:
    """`jc` with its grid moved later by `shift_s` (and its position's standard error set)."""
    g = jc.grid
    grid = dataclasses.replace(g, offset_s=float((g.offset_s + shift_s) % g.period_s))
    se = jc.offset_se_s if offset_se_s is None else float(offset_se_s)
    return dataclasses.replace(jc, grid=grid, offset_se_s=se)


@dataclass(frozen=True)
class OffsetScan:
    """What `scan_offsets` tried and chose."""

    shifts_s: np.ndarray
    """The shifts tried, from the detected grid, in [0, period)."""
    rms_w: np.ndarray
    """The fit's residual RMS at each shift (inf where the fit failed)."""
    shift_s: float
    """The shift chosen: the middle of the near-best stretch, in (-period/2, period/2]."""
    offset_se_s: float
    """The position uncertainty given to the moved grid: half the near-best stretch (at
    least the scan's step)."""

    def to_json(self) -> dict[str, object]:
        return {
            "shift_s": self.shift_s,
            "offset_se_s": self.offset_se_s,
            "step_s": float(self.shifts_s[1] - self.shifts_s[0]) if len(self.shifts_s) > 1 else 0,
            "best_rms_w": float(np.min(self.rms_w)),
            "rms_at_detected_w": float(self.rms_w[0]),
        }


def near_best_stretch(rms_w: np.ndarray, near: float = NEAR_BEST) -> tuple[int, int]:
    """(start, length) of the circular run of indices around the lowest `rms_w` whose values
    are within `near` × the lowest (indices wrap: the shifts cover one whole period)."""
    rms = np.asarray(rms_w, dtype=float)
    n = len(rms)
    if n == 0 or not np.any(np.isfinite(rms)):
        raise ValueError("no finite residual to choose from")
    best = int(np.nanargmin(np.where(np.isfinite(rms), rms, np.nan)))
    ok = np.isfinite(rms) & (rms <= near * rms[best])
    if ok.all():
        return 0, n
    lo = best
    while ok[(lo - 1) % n] and (best - lo + 1) < n:
        lo -= 1
    hi = best
    while ok[(hi + 1) % n] and (hi - lo + 1) < n:
        hi += 1
    return lo % n, hi - lo + 1


def scan_offsets(
    jc: JitterGrid,
    residual_rms_w: Callable[[JitterGrid], float],
    step_s: float = SCAN_STEP_S,
    near: float = NEAR_BEST,
) -> OffsetScan:
    """Fit at the grid shifted across one period; choose as the module docstring says.

    `residual_rms_w(grid)`: the fit's residual RMS (W) with the counter rows on `grid`; it may
    raise ValueError or ArithmeticError for a shift where no fit is possible (taken as inf).
    """
    period = jc.grid.period_s
    shifts = np.arange(0.0, period - 0.5 * step_s, step_s)
    rms = np.empty(len(shifts))
    for i, s in enumerate(shifts):
        try:
            rms[i] = float(residual_rms_w(shifted(jc, float(s))))
        except (ValueError, ArithmeticError):
            rms[i] = np.inf
    if not np.any(np.isfinite(rms)):
        return OffsetScan(shifts, rms, 0.0, jc.offset_se_s)
    start, length = near_best_stretch(rms, near)
    if length >= len(shifts):  # every offset fits alike: the scan tells nothing
        return OffsetScan(shifts, rms, 0.0, jc.offset_se_s)
    middle = shifts[start] + 0.5 * (length - 1) * step_s
    shift = float((middle + 0.5 * period) % period - 0.5 * period)
    se = max(0.5 * length * step_s, step_s)
    return OffsetScan(shifts, rms, shift, float(se))
