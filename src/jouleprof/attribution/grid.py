"""The sensor's refresh grid and the jitter of its instants, fitted by maximum likelihood.

`sensors.refresh.detect_device_refresh` places a regular grid (offset + k × period) through the
midpoints of the update brackets (the two reads between which a value changed). Regression needs
more: the spread σ of the true refresh instants around that grid. A reading's window is placed on
the grid, but the sensor took it σ earlier or later; short phases next to a large power step are
biased by that blur (a second-order effect, so it does not average out), unless the design
matrix is blurred the same way. Each bracket contains the true instant g_k + δ_k, δ_k ~ N(0, σ²),
so the likelihood of the brackets is Π [Φ((hi_k − g_k)/σ) − Φ((lo_k − g_k)/σ)]; maximizing it
gives the offset, period and σ together, with standard errors from its curvature. The midpoint
fit's own jitter figure over-states σ when reads are dithered (the bracket widths vary), which
is why it is refitted here.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np
from scipy.optimize import minimize
from scipy.special import ndtr

from jouleprof.sensors.refresh import RefreshEstimate, update_brackets

log = logging.getLogger(__name__)

_OUTLIER = 1e-3  # prior weight of a bracket the grid cannot explain (a missed or extra update)
_MIN_JITTER_S = 20e-6


@dataclass(frozen=True)
class JitterGrid:
    """A refresh grid with the spread of the true instants around it.

    Attributes:
        grid: the grid (a RefreshEstimate whose offset and period were refitted).
        jitter_s: standard deviation σ of the true refresh instants around the grid.
        jitter_se_s, offset_se_s: standard errors of σ and of the grid's position (mid-run).
        period_se_s: standard error of the period.
        center_s: a grid instant in the middle of the brackets (where offset_se_s holds).
        n_brackets: update brackets used.
        method: "mle", or "midpoint" when the likelihood fit failed (σ is then the midpoint fit's).
    """

    grid: RefreshEstimate
    jitter_s: float
    jitter_se_s: float
    offset_se_s: float
    period_se_s: float
    center_s: float
    n_brackets: int
    method: str

    def to_json(self) -> dict[str, object]:
        return {
            **self.grid.to_json(),
            "jitter_s": self.jitter_s,
            "jitter_se_s": self.jitter_se_s,
            "offset_se_s": self.offset_se_s,
            "period_se_s": self.period_se_s,
            "n_brackets": self.n_brackets,
            "method": self.method,
        }


def _fallback(grid: RefreshEstimate, n: int) -> JitterGrid:
    j = grid.jitter_s if np.isfinite(grid.jitter_s) else 0.0
    offset_se = 3.0 * grid.median_read_gap_s / np.sqrt(12.0 * max(n, 1))
    period_se = offset_se * np.sqrt(12.0) / max(n, 1)
    return JitterGrid(grid, j, max(0.5 * j, 0.1e-3), offset_se, period_se, np.nan, n, "midpoint")


def fit_jitter_grid(t_s: np.ndarray, values: np.ndarray, grid: RefreshEstimate) -> JitterGrid:
    """Refit `grid` (from the same signal's reads `t_s`, `values`) and estimate its jitter."""
    lo, hi = update_brackets(t_s, values)
    if grid.method != "grid" or len(lo) < 20:
        return _fallback(grid, len(lo))
    narrow = (hi - lo) < 0.5 * grid.period_s  # a wide bracket cannot say which refresh it saw
    lo, hi = lo[narrow], hi[narrow]
    k = np.round((0.5 * (lo + hi) - grid.offset_s) / grid.period_s)
    kc = float(np.round(np.mean(k)))  # an integer: a0 stays a grid instant
    kk = k - kc
    a0 = grid.offset_s + kc * grid.period_s
    p0 = grid.period_s
    s0 = max(grid.jitter_s if np.isfinite(grid.jitter_s) else 1e-3, 1e-4)
    # Scaled parameters: position in 0.1 ms, period in 0.1 µs, log σ.
    scale = np.array([1e-4, 1e-7, 1.0])
    floor = _OUTLIER * np.clip((hi - lo) / p0, 1e-3, 1.0)

    def unpack(x: np.ndarray) -> tuple[float, float, float]:
        a, p, ls = x * scale
        return a0 + a, p0 + p, max(float(np.exp(np.log(s0) + ls)), _MIN_JITTER_S)

    def nll(x: np.ndarray) -> float:
        a, p, s = unpack(x)
        g = a + kk * p
        pr = ndtr((hi - g) / s) - ndtr((lo - g) / s)
        return -float(np.sum(np.log(pr + floor)))

    res = minimize(nll, np.zeros(3), method="Nelder-Mead", options={"xatol": 1e-4, "fatol": 1e-6})
    if not res.success and not np.isfinite(res.fun):
        log.warning("refresh grid likelihood fit failed (%s); using the midpoint fit", res.message)
        return _fallback(grid, len(lo))
    x = res.x
    h = np.array([0.05, 0.05, 0.02])
    hess = np.zeros((3, 3))
    for i in range(3):
        for j in range(3):
            ei, ej = np.eye(3)[i] * h[i], np.eye(3)[j] * h[j]
            hess[i, j] = (
                nll(x + ei + ej) - nll(x + ei - ej) - nll(x - ei + ej) + nll(x - ei - ej)
            ) / (4 * h[i] * h[j])
    a, p, s = unpack(x)
    se = _standard_errors(hess) * scale
    # A bracket pins the grid to about its width / √12; without curvature (σ → 0, where the
    # likelihood is flat between the tightest brackets) fall back to that, conservatively.
    se_floor = float(np.median(hi - lo)) / np.sqrt(12.0 * len(lo))
    offset_se = float(se[0]) if np.isfinite(se[0]) and se[0] > 0 else 3.0 * se_floor
    jitter_se = float(s * se[2]) if np.isfinite(se[2]) and se[2] > 0 else s
    if s < 5 * _MIN_JITTER_S:  # at the floor: σ is only known to be small, curvature is moot
        jitter_se = max(jitter_se, s, 0.1e-3)
        offset_se = max(offset_se, se_floor)
    if not (0.5 * p0 < p < 1.5 * p0):
        return _fallback(grid, len(lo))
    refit = RefreshEstimate(
        grid.signal, p, float(a % p), s, len(lo), grid.median_read_gap_s, "grid"
    )
    period_se = float(se[1]) if np.isfinite(se[1]) and se[1] > 0 else offset_se * 3.5 / len(lo)
    return JitterGrid(refit, s, jitter_se, offset_se, period_se, a, len(lo), "mle")


def _standard_errors(hess: np.ndarray) -> np.ndarray:
    """Square roots of the diagonal of the inverse Hessian; NaN where it is not positive.

    Where the full inverse fails (a flat direction), each parameter's conditional standard
    error 1/√H_ii is used instead.
    """
    try:
        d = np.diag(np.linalg.inv(hess))
        if np.all(np.isfinite(d)) and np.all(d > 0):
            return np.sqrt(d)
    except np.linalg.LinAlgError:
        pass
    h = np.diag(hess)
    return np.where(h > 0, 1.0 / np.sqrt(np.where(h > 0, h, 1.0)), np.nan)
