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
        n_brackets: update brackets used.
        method: "mle", or "midpoint" when the likelihood fit failed (σ is then the midpoint fit's).
    """

    grid: RefreshEstimate
    jitter_s: float
    jitter_se_s: float
    offset_se_s: float
    n_brackets: int
    method: str

    def to_json(self) -> dict[str, object]:
        return {
            **self.grid.to_json(),
            "jitter_s": self.jitter_s,
            "jitter_se_s": self.jitter_se_s,
            "offset_se_s": self.offset_se_s,
            "n_brackets": self.n_brackets,
            "method": self.method,
        }


def _fallback(grid: RefreshEstimate, n: int) -> JitterGrid:
    j = grid.jitter_s if np.isfinite(grid.jitter_s) else 0.0
    return JitterGrid(grid, j, 0.5 * j, grid.period_s / 20, n, "midpoint")


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
    try:
        cov = np.linalg.inv(hess)
        se = np.sqrt(np.clip(np.diag(cov), 0.0, None)) * scale
    except np.linalg.LinAlgError:
        se = np.array([np.nan, np.nan, np.nan])
    if not (0.5 * p0 < p < 1.5 * p0) or not np.all(np.isfinite(se)):
        return _fallback(grid, len(lo))
    refit = RefreshEstimate(
        grid.signal, p, float(a % p), s, len(lo), grid.median_read_gap_s, "grid"
    )
    return JitterGrid(refit, s, float(s * se[2]), float(se[0]), len(lo), "mle")
