"""Buffer lags the run cannot tell apart from the fitted one, and what they move (pure functions).

The power buffer's lag (how long before its stamp a sample's window ends) is refined per run
by Gauss-Newton from its prior, so it settles in the nearest minimum of the residual. Where
every step is alike, that minimum can be one of several: on an H100 inference loop (60 s,
2,987 steps of 20 ms, an fp32 loss then a 2 ms host-side logging phase) the fit settled at
5.9 ms, while 3.0 ms fitted the buffer's rows as well (residual RMS 23.5 W against 23.6 W).
At 5.9 ms the logging came out at 1.4 J, at 3.0 ms at 0.39 J: its references were
0.26–0.40 J. The linear sensor-model spread (σ ≥ 0.8 ms of lag, `regression_sensitivity`)
cannot reach a second minimum 2.9 ms away.

So the fit is repeated at fixed lags across the prior's range, at the buffer window it chose
and at the other windows its search tries (on a fixed schedule a longer window and a shorter
lag stand in for each other: a third plain run of that loop chose 32 ms and 6.2 ms, and every
other lag fitted clearly worse at 32 ms, but 3.8 ms fitted as well at 40-75 ms). Each is
compared with the fit by a paired test over the bootstrap's blocks of the run (the residuals
are correlated within them): one whose weighted squared residuals exceed the fit's by less
than z standard errors of that difference (one-sided, at the intervals' confidence) is one
the run cannot rule out. The farthest such lag on each side, beyond what the linear spread
already carries, adds one row to the sensor-model spread: the powers' move to it, ÷ z, so
that each interval reaches the energy the fit gives there. Estimates do not change.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.stats import norm

from jouleprof.attribution.placement import PARAMS, Placement
from jouleprof.attribution.regression_config import BUFFER_WINDOW_S, RegressionConfig
from jouleprof.attribution.rows import BUFFER

LAG = PARAMS.index("buffer_shift_s")
GRID_STEP_S = 0.0005
"""The spacing of the lags tried."""
PRIOR_SPAN_SD = 2.0
"""The lags tried span the prior's mean ± this many of its σ (never below 0 s)."""


@dataclass(frozen=True)
class LagProfile:
    """The fit repeated at fixed buffer lags (s, window end before the stamp)."""

    fitted_lag_s: float
    lags_s: np.ndarray
    """The lags tried, ascending."""
    excess_w2: np.ndarray
    """Each lag's weighted squared residuals less the fitted lag's (summed over the rows)."""
    excess_se_w2: np.ndarray
    """The standard error of that excess, from its spread over the run's blocks."""
    compatible: np.ndarray
    """Whether the run cannot rule the lag out: excess < z × its standard error (z one-sided:
    the question is only whether the other lag fits worse)."""
    powers_w: np.ndarray
    """The phases' powers fitted at each lag, (lags, columns)."""
    windows_s: np.ndarray | None = None
    """The buffer window each lag was fitted at (None: all at the fitted window)."""
    fitted_window_s: float | None = None
    """The window the fit chose."""

    def compatible_range_s(self) -> tuple[float, float]:
        """The lowest and highest lag the run cannot rule out (the fitted one included)."""
        ok = np.append(self.lags_s[self.compatible], self.fitted_lag_s)
        return float(ok.min()), float(ok.max())

    def compatible_text(self) -> str:
        """The lags the run cannot rule out, as runs of the grid ("2.9-3.9 ms, 6.4 ms"), and
        the other buffer windows they fit at ("at a 60-75 ms window")."""
        ok = np.flatnonzero(self.compatible)
        if not len(ok):
            return "no other lag"
        lags = np.unique(np.round(self.lags_s[ok] / GRID_STEP_S * 2) / 2 * GRID_STEP_S)
        runs, start = [], lags[0]
        for a, b in zip(lags[:-1], lags[1:], strict=True):
            if b - a > 1.5 * GRID_STEP_S:
                runs.append((start, a))
                start = b
        runs.append((start, lags[-1]))
        text = ", ".join(
            f"{1e3 * a:.1f} ms" if a == b else f"{1e3 * a:.1f}-{1e3 * b:.1f} ms" for a, b in runs
        )
        if self.windows_s is not None and self.fitted_window_s is not None:
            other = np.unique(self.windows_s[ok])
            other = other[~np.isclose(other, self.fitted_window_s)]
            if len(other):
                span = f"{1e3 * other.min():.0f}" + (
                    f"-{1e3 * other.max():.0f}" if len(other) > 1 else ""
                )
                text += f" (also at a {span} ms buffer window)"
        return text

    def to_json(self) -> dict:
        lo, hi = self.compatible_range_s()
        return {
            "fitted_lag_s": self.fitted_lag_s,
            "fitted_window_s": self.fitted_window_s,
            "lags_s": [float(v) for v in self.lags_s],
            "windows_s": None if self.windows_s is None else [float(v) for v in self.windows_s],
            "excess_w2": [float(v) for v in self.excess_w2],
            "excess_se_w2": [float(v) for v in self.excess_se_w2],
            "compatible": [bool(v) for v in self.compatible],
            "compatible_range_s": [lo, hi],
        }


def lags_to_try(prior_lag_s: float, prior_sd_s: float, fitted_lag_s: float) -> np.ndarray:
    """Lags on a GRID_STEP_S grid through the fitted one, spanning the prior's mean ±
    PRIOR_SPAN_SD σ (≥ 0 s), the fitted lag itself left out."""
    lo = max(prior_lag_s - PRIOR_SPAN_SD * prior_sd_s, 0.0)
    hi = prior_lag_s + PRIOR_SPAN_SD * prior_sd_s
    k_lo = int(np.ceil((lo - fitted_lag_s) / GRID_STEP_S - 1e-9))
    k_hi = int(np.floor((hi - fitted_lag_s) / GRID_STEP_S + 1e-9))
    ks = [k for k in range(k_lo, k_hi + 1) if k != 0]
    return np.array([fitted_lag_s + k * GRID_STEP_S for k in ks], dtype=float)


def block_index(mid_s: np.ndarray, block_s: float) -> np.ndarray:
    """Each row's block of `block_s` seconds, counted from the first row."""
    t = np.asarray(mid_s, dtype=float)
    if not block_s > 0 or len(t) == 0:
        return np.zeros(len(t), dtype=int)
    return np.floor((t - t[0]) / block_s).astype(int)


def paired_excess(r_alt: np.ndarray, r_fit: np.ndarray, block: np.ndarray) -> tuple[float, float]:
    """Σ (r_alt² − r_fit²) over the rows, and its standard error from the blocks' sums (the
    blocks taken as independent): √n_blocks × their standard deviation."""
    d = np.bincount(block, weights=r_alt**2 - r_fit**2)
    d = d[np.bincount(block) > 0]
    if len(d) < 2:
        return float(d.sum()), float("inf")
    return float(d.sum()), float(np.sqrt(len(d)) * np.std(d, ddof=1))


def lag_profile(
    pl: Placement,
    x: np.ndarray,
    w: np.ndarray,
    theta: np.ndarray,
    power: np.ndarray,
    prior_lag_s: float,
    prior_sd_s: float,
    block_s: float,
    z: float,
    window_s: float | None = None,
    other_windows_s: tuple[float, ...] = (),
) -> LagProfile | None:
    """The fit at each lag of `lags_to_try` against the fitted one (`theta`, design `x`,
    powers `power`, row weights `w`), each compared by the paired test over blocks of
    `block_s` at `z` (one-sided). With `window_s` (the buffer window fitted) and
    `other_windows_s`, also every lag of the grid, the fitted one included, at each of those
    windows: on a fixed schedule a longer window and a shorter lag stand in for each other.
    None where the run has no buffer rows or no prior spread (a lag held fixed)."""
    buffer = pl.rows.kind == BUFFER
    if not buffer.any() or not prior_sd_s > 0:
        return None
    fitted = float(prior_lag_s - theta[LAG])
    lags = lags_to_try(prior_lag_s, prior_sd_s, fitted)
    points = [(1.0, lag) for lag in lags]
    if window_s is not None:
        every = np.sort(np.append(lags, fitted))
        points += [
            (win / window_s, lag)
            for win in other_windows_s
            if not np.isclose(win, window_s)
            for lag in every
        ]
    block = block_index(pl.rows.mid_s, block_s)
    y = pl.target(theta)
    r_fit = (y - x @ power) * w
    excess, se, powers = [], [], []
    for stretch, lag in points:
        th = np.array(theta, dtype=float)
        th[LAG] = prior_lag_s - lag
        xs = x.copy()
        xs[buffer] = pl.design(th, buffer_stretch=stretch, only=buffer)
        p = pl.fit_powers(xs, y, w)
        e, s = paired_excess((y - xs @ p) * w, r_fit, block)
        excess.append(e)
        se.append(s)
        powers.append(p)
    excess_a, se_a = np.array(excess), np.array(se)
    return LagProfile(
        fitted,
        np.array([lag for _, lag in points]),
        excess_a,
        se_a,
        excess_a < z * se_a,
        np.array(powers).reshape(len(points), len(power)),
        None if window_s is None else np.array([st * window_s for st, _ in points]),
        window_s,
    )


def spread_rows(
    prof: LagProfile, power: np.ndarray, carried_sd_s: float, z: float
) -> tuple[list[np.ndarray], list[float]]:
    """Rows for the sensor-model spread: on each side of the fitted lag, the powers' move to
    the farthest lag the run cannot rule out, ÷ z (an interval's half-width then reaches it),
    where that lag lies beyond z × `carried_sd_s` (the lag's σ the linear spread carries
    already). Returns (rows, the lags they move to)."""
    rows, to = [], []
    for side in (-1.0, 1.0):
        off = side * (prof.lags_s - prof.fitted_lag_s)
        pick = prof.compatible & (off > z * carried_sd_s)
        if not pick.any():
            continue
        i = int(np.argmax(np.where(pick, off, -np.inf)))
        rows.append((prof.powers_w[i] - np.asarray(power, dtype=float)) / z)
        to.append(float(prof.lags_s[i]))
    return rows, to


def lag_spread(
    pl: Placement,
    x: np.ndarray,
    w: np.ndarray,
    theta: np.ndarray,
    theta_cov: np.ndarray,
    power: np.ndarray,
    cfg: RegressionConfig,
    block_s: float,
) -> tuple[LagProfile | None, list[np.ndarray], str | None]:
    """The fit's lag profile (`lag_profile`, tested one-sided at cfg.confidence), the rows it
    adds to the sensor-model spread (`spread_rows`, beyond the σ the linear spread carries:
    the posterior's, at least cfg.buffer_lag_floor_sd_s) and the note that says so (None
    where it adds none)."""
    prof = lag_profile(
        pl,
        x,
        w,
        theta,
        power,
        cfg.buffer_lag_s,
        cfg.buffer_lag_sd_s,
        block_s,
        float(norm.ppf(cfg.confidence)),
        cfg.buffer_window_s,
        tuple(sc * BUFFER_WINDOW_S for sc in cfg.buffer_window_scales),
    )
    if prof is None:
        return None, [], None
    carried = max(float(np.sqrt(theta_cov[LAG, LAG])), cfg.buffer_lag_floor_sd_s)
    rows, to = spread_rows(prof, power, carried, float(norm.ppf(0.5 + 0.5 * cfg.confidence)))
    if not rows:
        return prof, [], None
    note = (
        f"buffer lag: the fitted {1e3 * prof.fitted_lag_s:.1f} ms fits the rows no better than "
        f"{prof.compatible_text()} (a paired test over {block_s:.2g} s blocks of the run); "
        "each interval reaches the energies fitted at "
        + " and ".join(f"{1e3 * v:.1f} ms" for v in to)
        + "; "
        + remedy_text(cfg)
    )
    return prof, rows, note


def remedy_text(cfg: RegressionConfig) -> str:
    """What pins the lag where the run cannot: with the default prior, a lag measured on this
    machine (a sensor file); with any prior, steps that vary (excitation)."""
    excite = "steps that vary (excitation, docs/excitation.md)"
    if cfg.buffer_lag_sd_s < RegressionConfig.buffer_lag_sd_s:
        return "to pin it: " + excite
    return (
        "to pin it: a lag measured on this machine (jouleprof sensors --lag-out FILE, then "
        "attribute --sensor FILE), or " + excite
    )
