"""A signal's refresh grid and the jitter of its instants, fitted by maximum likelihood.

`sensors.refresh.detect_refresh` and `detect_counter_grid` place a regular grid (offset + k ×
period) for each signal; on an H200 the energy counter and the power fields tick on grids of
their own (100.0 ms and ~101–103 ms; benchmarks/results/measure_core). Regression needs more
than the grid: the spread σ of the true refresh instants around it. A reading placed on the grid
was really taken σ earlier or later, which blurs short phases next to a large power step (a
second-order bias that does not average out) unless the design matrix is blurred the same way.

Every pair of consecutive reads of a signal says whether a refresh fell between them (the value
changed) or not. With true instants g_k + δ_k, δ_k ~ N(0, σ²), a gap (t0, t1] holds refresh k
with probability p_k = Φ((t1 − g_k)/σ) − Φ((t0 − g_k)/σ), and holds none with probability Π_k (1
− p_k). Maximizing the likelihood of all gaps, changed or not, fits the offset, period and σ
together, with standard errors from its curvature. It works for dense reads (the power fields,
read every ~20 ms) and for sparse ones (the counter, read about once per refresh, where only the
gaps that missed a refresh, or caught two, carry the timing).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np
from scipy.optimize import minimize
from scipy.special import ndtr

from jouleprof.sensors.refresh import RefreshEstimate

log = logging.getLogger(__name__)

_OUTLIER = 1e-3  # probability of a gap the grid cannot explain (a missed or repeated value)
_MIN_JITTER_S = 20e-6
_JITTER_START_S = (0.2e-3, 10e-3)  # a grid's own jitter figure is clipped to this to start from


@dataclass(frozen=True)
class JitterGrid:
    """A refresh grid with the spread of the true instants around it.

    Attributes:
        grid: the grid (a RefreshEstimate whose offset and period were refitted).
        jitter_s: standard deviation σ of the true refresh instants around the grid.
        jitter_se_s, offset_se_s: standard errors of σ and of the grid's position at center_s.
        period_se_s: standard error of the period.
        center_s: a grid instant in the middle of the reads (where offset_se_s holds).
        n_gaps: read gaps the fit used.
        method: "mle", or "detected" when the likelihood fit failed (σ is then a guess).
    """

    grid: RefreshEstimate
    jitter_s: float
    jitter_se_s: float
    offset_se_s: float
    period_se_s: float
    center_s: float
    n_gaps: int
    method: str

    def to_json(self) -> dict[str, object]:
        return {
            **self.grid.to_json(),
            "jitter_s": self.jitter_s,
            "jitter_se_s": self.jitter_se_s,
            "offset_se_s": self.offset_se_s,
            "period_se_s": self.period_se_s,
            "n_gaps": self.n_gaps,
            "method": self.method,
        }


def _fallback(grid: RefreshEstimate, n: int, center_s: float) -> JitterGrid:
    j = grid.jitter_s if np.isfinite(grid.jitter_s) else 2e-3
    j = float(np.clip(j, *_JITTER_START_S))
    offset_se = max(grid.median_read_gap_s / np.sqrt(12.0 * max(n, 1)), 0.5e-3)
    period_se = offset_se * np.sqrt(12.0) / max(n, 1)
    return JitterGrid(grid, j, j, offset_se, period_se, center_s, n, "detected")


def fit_jitter_grid(t_s: np.ndarray, values: np.ndarray, grid: RefreshEstimate) -> JitterGrid:
    """Refit `grid` from the reads (`t_s`, `values`) of its signal and estimate its jitter."""
    t_s = np.asarray(t_s, dtype=float)
    v = np.asarray(values, dtype=float)
    ok = ~np.isnan(v)
    t, v = t_s[ok], v[ok]
    p0 = grid.period_s
    center = float(np.median(t)) if len(t) else np.nan
    if len(t) < 30:
        return _fallback(grid, max(len(t) - 1, 0), center)
    t0, t1, changed = t[:-1], t[1:], v[1:] != v[:-1]
    usable = (t1 - t0) < 1.5 * p0  # a longer gap surely holds a refresh: it says nothing
    t0, t1, changed = t0[usable], t1[usable], changed[usable]
    kc = float(np.round((center - grid.offset_s) / p0))
    a0 = grid.offset_s + kc * p0  # a grid instant mid-run: the offset's reference
    # Grid instants that can fall in or near each gap: the nearest to its start, and two more.
    s0 = float(np.clip(grid.jitter_s if np.isfinite(grid.jitter_s) else 2e-3, *_JITTER_START_S))
    # Only gaps with an edge near a grid instant say anything (elsewhere the probability of
    # the observed outcome is 1 whatever the parameters): keep those, for speed.
    near = 8 * s0 + 2e-3
    ph0 = (t0 - a0) % p0
    ph1 = (t1 - a0) % p0
    keep = (np.minimum(ph0, p0 - ph0) < near) | (np.minimum(ph1, p0 - ph1) < near)
    t0, t1, changed = t0[keep], t1[keep], changed[keep]
    if len(t0) < 20:
        return _fallback(grid, len(t0), center)
    k_first = np.floor((t0 - a0) / p0)  # relative to a0
    ks = k_first[:, None] + np.arange(-1, 3)[None, :]
    scale = np.array([1e-4, 1e-7, 1.0])  # position in 0.1 ms, period in 0.1 µs, log σ

    def unpack(x: np.ndarray) -> tuple[float, float, float]:
        a, p, ls = x * scale
        return a0 + a, p0 + p, max(float(np.exp(np.log(s0) + ls)), _MIN_JITTER_S)

    def nll(x: np.ndarray) -> float:
        a, p, s = unpack(x)
        g = a + ks * p
        pk = ndtr((t1[:, None] - g) / s) - ndtr((t0[:, None] - g) / s)
        none = np.prod(1.0 - np.clip(pk, 0.0, 1.0), axis=1)
        pr = np.where(changed, 1.0 - none, none)
        return -float(np.sum(np.log((1 - _OUTLIER) * pr + _OUTLIER)))

    res = minimize(nll, np.zeros(3), method="Nelder-Mead", options={"xatol": 1e-3, "fatol": 1e-4})
    x = res.x
    a, p, s = unpack(x)
    if not np.isfinite(res.fun) or not (0.9 * p0 < p < 1.1 * p0):
        log.warning("refresh grid likelihood fit failed (%s); using the detected grid", res.message)
        return _fallback(grid, len(t0), center)
    h = np.array([0.05, 0.05, 0.02])
    hess = np.zeros((3, 3))
    for i in range(3):
        for j in range(3):
            ei, ej = np.eye(3)[i] * h[i], np.eye(3)[j] * h[j]
            hess[i, j] = (
                nll(x + ei + ej) - nll(x + ei - ej) - nll(x - ei + ej) + nll(x - ei - ej)
            ) / (4 * h[i] * h[j])
    se = _standard_errors(hess) * scale
    offset_se = float(se[0]) if np.isfinite(se[0]) and se[0] > 0 else np.inf
    jitter_se = float(s * se[2]) if np.isfinite(se[2]) and se[2] > 0 else s
    period_se = float(se[1]) if np.isfinite(se[1]) and se[1] > 0 else np.inf
    # The curvature holds where the likelihood is smooth. At the jitter floor it is flat
    # across the offsets that explain every gap and steep at their ends, and the finite
    # differences read that as anything from 0 to 10^2 s (0.86 s and 168 s on the H200's
    # run4/run5 counters, benchmarks/results/attr_vith_b8): there, and wherever the curvature
    # says more than 3 × what the profile does, the profile's half-width is the error.
    at_floor = s < 5 * _MIN_JITTER_S
    half_span_s = max(float(t1.max() - t0.min()) / 2, p)

    def profile(i: int, span_s: float) -> float:
        return _profile_half_width(lambda d: nll(x + np.eye(3)[i] * d / scale[i]), span_s)

    offset_prof = profile(0, _PROFILE_SPAN_S)
    if at_floor or not offset_se <= 3 * offset_prof:
        offset_se = offset_prof
    period_prof = profile(1, _PROFILE_SPAN_S * p / half_span_s)
    if at_floor or not period_se <= 3 * period_prof:
        period_se = period_prof
    # σ's own error, the same way (in log σ; the floor clamps the lower side, so the scan
    # reaches its end there and reports the span). The curvature near the floor gave 19 s for
    # a 27 µs σ on the H200's 240 s run6 counter (attr_vith_b8/run6), and the regression's
    # σ perturbation then blurred every row by seconds: intervals ±90 % on every phase.
    jitter_prof = s * profile(2, _PROFILE_LOG_SPAN)
    if at_floor or not jitter_se <= 3 * jitter_prof:
        jitter_se = jitter_prof
    if at_floor:
        # σ is only known to be small, not to be zero: the profile at the floor holds the grid
        # to the reads' contradictions alone (0.1–0.3 ms on 150–200 sparse counter reads),
        # which true instants jittering by a few ms would move (the simulator's 2 ms jitter
        # then fits at the floor too). The grid is placed no better than _FLOOR_OFFSET_SE_S.
        offset_se = max(offset_se, _FLOOR_OFFSET_SE_S)
        jitter_se = max(jitter_se, s, 0.1e-3)
    refit = RefreshEstimate(
        grid.signal,
        float(p),
        float(a % p),
        float(s),
        int(changed.sum()),
        grid.median_read_gap_s,
        f"{grid.method} + mle",
    )
    return JitterGrid(refit, s, jitter_se, offset_se, period_se, a, len(t0), "mle")


_FLOOR_OFFSET_SE_S = 1e-3
_PROFILE_LOG_SPAN = 1.0
"""How far the profile scan of σ moves log σ (× e either way)."""
_PROFILE_SPAN_S = 5e-3
"""How far the profile scans move the grid (offset, or the period's shift at the reads' ends):
an error that reaches it is reported as a uniform one over the whole period."""


def _profile_half_width(nll_at, span: float, n_steps: int = 100) -> float:
    """Half the width of {d : nll_at(d) ≤ nll_at(0) + ½} around d = 0 (a ±1 σ interval),
    scanned in n_steps steps each way up to ±span; span × √3 where the set reaches the scan's
    end (the reads pin the parameter no better than that: a uniform error over ±span·√3)."""
    ds = np.linspace(-span, span, 2 * n_steps + 1)
    level = nll_at(0.0) + 0.5
    # Walk out from the centre each way until the set ends: the likelihood is evaluated only
    # up to the first point outside (the same points a full scan would read there).
    i = j = n_steps
    while i > 0 and nll_at(ds[i - 1]) <= level:
        i -= 1
    while j < len(ds) - 1 and nll_at(ds[j + 1]) <= level:
        j += 1
    if i == 0 or j == len(ds) - 1:
        return float(span * np.sqrt(3.0))
    return float((ds[j] - ds[i]) / 2 + (ds[1] - ds[0]) / 2)


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
