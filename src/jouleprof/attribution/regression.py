"""Phase energy by regression on every sensor interval of the run (pure functions).

Every reading of the sensor is an equation (`rows`): between two consecutive counter values the
device used exactly ``Σ_phase P_phase × overlap(phase, interval)``; an instant-power reading is
the same sum over the short window it averages (25 ms by default, shared/FACTS.md), divided by
the window. Stacking the equations of all analysed steps and solving for the phase powers
``P_phase`` by non-negative least squares (rows in W) measures phases far shorter than the
sensor's 100 ms refresh, because the refresh edges fall at a different point of the step in
every step. A phase's energy is its fitted power times its exclusive time in the analysed steps.

How the fit stays unbiased and its interval honest:

1. The refresh grid is refitted with the spread σ of the true refresh instants (`grid`). The
   attribution never sees the true instants; a reading placed on the grid was really taken
   σ earlier or later, which blurs short phases next to a large power step (a second-order
   bias that does not average out). Each row's overlaps are therefore the *expected* overlaps
   under that jitter (`Timeline.overlap_s(..., jitter_s=σ)`).
2. Rows are weighed by their modelled variance (feasible generalized least squares): the
   jitter of a row's edges matters only where they sit on a power step (`jitter_variance_w2`),
   and a per-signal noise floor is estimated from the residuals. The configured weights
   (instant rows below counter rows: their window is an assumption) multiply these.
3. The grid's position and drift are refined from the power data themselves (Gauss-Newton on
   a shift ``s0 + s1·u`` of every row, with the bracket fit's uncertainty as the prior): sharp
   power steps in the readings pin the timing better than the update brackets do.
4. The confidence interval is a moving-block bootstrap over the rows in time order (blocks of
   `block_s` keep the correlation of neighbouring rows, which share refresh edges), widened
   by what the bootstrap cannot see: the remaining uncertainty of σ and of the shift.

Assumptions, stated so a user can judge a result:

- each phase draws a power that is stationary across the analysed steps (warm-up steps are
  excluded; a phase whose power drifts gets its mean power, and a wider interval);
- idle time and untracked time each have one constant power;
- every signal refreshes on one regular grid whose instants jitter without bias (Gaussian);
- the instant field averages `instant_window_s` before its refresh;
- span times are on the samples' clock (small noise on their edges is tolerated);
- steps are not in lockstep with the refresh period (if they are, the equations repeat, the
  interval widens and short phases are reported unresolved; a note says so).

A phase is reported unresolved (energy None, with the reason) when fewer than `min_rows` sensor
intervals overlap it, when the fit pins its power at zero, or when its interval is wider than
its estimate.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np
from scipy.linalg import cholesky, solve_triangular
from scipy.optimize import nnls
from scipy.stats import norm

from jouleprof.attribution.common import IDLE, WARMUP, Timeline
from jouleprof.attribution.grid import JitterGrid, fit_jitter_grid
from jouleprof.attribution.result import DeviceAttribution, PhaseResult, pct_text, unresolved
from jouleprof.attribution.rows import (
    KIND_NAMES,
    SensorRows,
    jitter_variance_w2,
    sensor_rows,
)
from jouleprof.errors import AttributionError
from jouleprof.sensors.refresh import RefreshEstimate, detect_device_refresh

log = logging.getLogger(__name__)

METHOD = "regression"
_MIN_ROW_VAR_W2 = 0.01  # floor on a row's noise variance: no row is trusted beyond 0.1 W
_MIN_BLOCKS = 10  # resample at least this many blocks, or the bootstrap has nothing to vary


@dataclass(frozen=True)
class RegressionConfig:
    """How the regression reads the sensor and how sure it must be."""

    instant_window_s: float = 0.025
    """The instant power field is the mean power over this long before its refresh."""
    use_counter: bool = True
    """Use the cumulative energy counter's intervals."""
    use_instant: bool = True
    """Use the instant power readings."""
    use_average: bool = False
    """Use the default (1 s running average) power readings; coarse, off by default."""
    average_window_s: float = 1.0
    """The window the default power reading averages."""
    counter_weight: float = 1.0
    """Weight of a counter row."""
    instant_weight: float = 0.5
    """Weight of an instant-power row, relative to a counter row (lower: the window is assumed)."""
    average_weight: float = 0.1
    """Weight of a 1 s average row."""
    reweight: bool = True
    """Also weigh each row by its modelled variance (jitter at its edges, signal noise)."""
    refine_grid: bool = True
    """Refine the refresh grid's position and drift from the power data."""
    n_boot: int = 300
    """Bootstrap resamples for the confidence interval (≥ 200)."""
    block_s: float = 1.5
    """Length of the bootstrap's blocks of consecutive rows, in seconds."""
    confidence: float = 0.95
    """Coverage of the reported interval."""
    min_rows: int = 20
    """A phase overlapped by fewer sensor intervals than this is unresolved."""
    margin_s: float = 1.0
    """Rows up to this far outside the analysed steps still inform the idle power."""
    seed: int = 0
    """Seeds the bootstrap."""

    def __post_init__(self) -> None:
        for name in ("instant_window_s", "average_window_s", "block_s"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be > 0 seconds, got {getattr(self, name)}")
        for name in ("counter_weight", "instant_weight", "average_weight", "margin_s"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be ≥ 0, got {getattr(self, name)}")
        if self.n_boot < 200:
            raise ValueError(f"n_boot must be ≥ 200, got {self.n_boot}")
        if not 0.5 < self.confidence < 1:
            raise ValueError(f"confidence must be in (0.5, 1), got {self.confidence}")
        if self.min_rows < 1:
            raise ValueError(f"min_rows must be ≥ 1, got {self.min_rows}")
        if not (self.use_counter or self.use_instant or self.use_average):
            raise ValueError("use_counter, use_instant and use_average cannot all be False")


def _fit(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return nnls(a, b, maxiter=50 * a.shape[1])[0]


def _nnls_gram(gram: np.ndarray, rhs: np.ndarray) -> np.ndarray:
    """NNLS of min ‖Ax − b‖ given AᵀA and Aᵀb (equivalent through the Cholesky factor)."""
    p = len(rhs)
    ridge = 1e-12 * max(float(np.trace(gram)) / p, 1e-300)
    r = cholesky(gram + ridge * np.eye(p), lower=False)
    z = solve_triangular(r, rhs, trans="T", lower=False)
    return nnls(r, z, maxiter=50 * p)[0]


def _block_bootstrap(a: np.ndarray, b: np.ndarray, mid_s: np.ndarray, cfg: RegressionConfig):
    """Powers refitted on `n_boot` moving-block resamples of the rows: (n_boot, p), block rows."""
    n, p = a.shape
    span_s = float(mid_s[-1] - mid_s[0]) if n > 1 else 0.0
    block = round(cfg.block_s * n / span_s) if span_s > 0 else n
    block = int(np.clip(block, 1, max(n // _MIN_BLOCKS, 1)))  # a short run: shorter blocks
    n_blocks = int(np.ceil(n / block))
    gram_cum = np.zeros((n + 1, p, p))
    gram_cum[1:] = np.cumsum(a[:, :, None] * a[:, None, :], axis=0)
    rhs_cum = np.zeros((n + 1, p))
    rhs_cum[1:] = np.cumsum(a * b[:, None], axis=0)
    rng = np.random.default_rng(cfg.seed)
    out = np.empty((cfg.n_boot, p))
    for i in range(cfg.n_boot):
        s = rng.integers(0, n - block + 1, size=n_blocks)
        gram = gram_cum[s + block].sum(0) - gram_cum[s].sum(0)
        rhs = rhs_cum[s + block].sum(0) - rhs_cum[s].sum(0)
        out[i] = _nnls_gram(gram, rhs)
    return out, block


@dataclass
class _Problem:
    """The rows kept for the fit, the labels fitted, and the grid's jitter and shift."""

    timeline: Timeline
    rows: SensorRows
    cols: list[int]
    sigma_s: float
    u: np.ndarray
    """Each row's position in the run, -1 … 1 (the drift term of the shift multiplies it)."""

    def design(self, sigma_s: float | None = None, shift_s: np.ndarray | float = 0.0):
        """Expected fraction of each row's interval that each fitted label covers."""
        sig = self.sigma_s if sigma_s is None else max(sigma_s, 0.0)
        r = self.rows
        ov = self.timeline.overlap_s(r.t0_s + shift_s, r.t1_s + shift_s, sig)
        return ov[:, self.cols] / r.duration_s[:, None]

    def full(self, power: np.ndarray) -> np.ndarray:
        out = np.zeros(len(self.timeline.names))
        out[self.cols] = power
        return out


def _fgls_weights(prob: _Problem, x, power, kind_w, shift_s) -> np.ndarray:
    """Row weights ∝ configured weight / √(noise floor of its signal + its jitter variance)."""
    rows = prob.rows
    var_w2 = jitter_variance_w2(prob.timeline, rows, prob.full(power), prob.sigma_s, shift_s)
    base = np.zeros(len(rows))
    for k in np.unique(rows.kind):
        m = rows.kind == k
        r = rows.power_w[m] - x[m] @ power
        base[m] = max(float(np.mean(r**2) - np.mean(var_w2[m])), _MIN_ROW_VAR_W2)
    w = kind_w[rows.kind] / np.sqrt(base + var_w2)
    return w / np.sqrt(np.mean(w**2))


def _refine_shift(prob: _Problem, w: np.ndarray, prior_sd: np.ndarray):
    """Gauss-Newton on the grid's shift s0 + s1·u, with a Gaussian prior: (θ, covariance)."""
    y = prob.rows.power_w
    lam = 1.0 / prior_sd**2
    theta = np.zeros(2)
    h = 20e-6
    a = np.diag(lam)
    for _ in range(6):
        shift = theta[0] + theta[1] * prob.u
        x = prob.design(shift_s=shift)
        d = (prob.design(shift_s=shift + h) - prob.design(shift_s=shift - h)) / (2 * h)
        power = _fit(x * w[:, None], y * w)
        r = (y - x @ power) * w
        g = (d @ power) * w
        jac = np.column_stack([g, g * prob.u])
        v = max(float(np.mean(r**2)), 1e-12)
        a = jac.T @ jac / v + np.diag(lam)
        step = np.linalg.solve(a, jac.T @ r / v - lam * theta)
        theta = np.clip(theta + step, -5 * prior_sd, 5 * prior_sd)
        if np.max(np.abs(step)) < 1e-7:
            break
    return theta, np.linalg.inv(a)


def attribute_regression(
    samples, timeline: Timeline, device: str, cfg: RegressionConfig | None = None
) -> DeviceAttribution:
    """Attribute one device's energy to the timeline's phases by regression (module docstring).

    Raises:
        AttributionError: no refresh grid can be found, or too few sensor intervals are usable.
    """
    cfg = cfg or RegressionConfig()
    dev = samples[samples["device"] == device]
    grid0 = detect_device_refresh(samples, device)
    if grid0 is None:
        raise AttributionError(
            f"cannot place {device}'s sensor refreshes: too few updates, or reads sparser than "
            "half the refresh period; regression needs reads at least every ~50 ms "
            "(use --method proportional for this run)"
        )
    jg = fit_jitter_grid(dev["t_s"].to_numpy(float), dev[grid0.signal].to_numpy(float), grid0)
    rows = sensor_rows(
        dev,
        jg.grid,
        counter_weight=cfg.counter_weight if cfg.use_counter else None,
        instant=(cfg.instant_window_s, cfg.instant_weight) if cfg.use_instant else None,
        average=(cfg.average_window_s, cfg.average_weight) if cfg.use_average else None,
    )
    frac = timeline.overlap_s(rows.t0_s, rows.t1_s, jg.jitter_s) / rows.duration_s[:, None]
    r0, r1 = timeline.region_s
    keep = (
        (frac[:, timeline.names.index(WARMUP)] <= 1e-6)
        & (rows.t0_s >= timeline.edges_s[0])
        & (rows.t1_s <= timeline.edges_s[-1])
        & (rows.t1_s > r0 - cfg.margin_s)
        & (rows.t0_s < r1 + cfg.margin_s)
    )
    rows = rows.select(keep)
    cover = (timeline.overlap_s(rows.t0_s, rows.t1_s) > 1e-9).sum(axis=0)
    cols = [j for j, nm in enumerate(timeline.names) if nm != WARMUP and cover[j] > 0]
    if len(rows) < 2 * len(cols) or not cols:
        raise AttributionError(
            f"only {len(rows)} sensor intervals of {device} fall in the analysed steps: "
            "the run is too short for regression (record more steps)"
        )
    mid = rows.mid_s
    half = max(0.5 * float(mid[-1] - mid[0]), 1e-9)
    center = jg.center_s if np.isfinite(jg.center_s) else 0.5 * float(mid[-1] + mid[0])
    prob = _Problem(timeline, rows, cols, jg.jitter_s, np.clip((mid - center) / half, -1, 1))
    y = rows.power_w
    kind_w = np.array([cfg.counter_weight, cfg.instant_weight, cfg.average_weight])

    # Fit, reweigh, refine the grid's shift, reweigh at the refined shift, fit again.
    shift: np.ndarray | float = 0.0
    w = rows.weight
    x = prob.design()
    power = _fit(x * w[:, None], y * w)
    prior_sd = np.array([jg.offset_se_s, jg.period_se_s * half / jg.grid.period_s])
    theta, theta_cov = np.zeros(2), np.diag(prior_sd**2)
    if cfg.reweight:
        w = _fgls_weights(prob, x, power, kind_w, shift)
    if cfg.refine_grid:
        theta, theta_cov = _refine_shift(prob, w, np.maximum(prior_sd, 1e-7))
        shift = theta[0] + theta[1] * prob.u
        x = prob.design(shift_s=shift)
        power = _fit(x * w[:, None], y * w)
        if cfg.reweight:
            w = _fgls_weights(prob, x, power, kind_w, shift)
    a, b = x * w[:, None], y * w
    power = _fit(a, b)
    boot, block = _block_bootstrap(a, b, mid, cfg)

    # What the bootstrap cannot see: the uncertainty of σ and of the grid's shift.
    sens = []
    evals, evecs = np.linalg.eigh(theta_cov)
    perturb = [(jg.jitter_se_s, np.zeros(2))]
    perturb += [(0.0, np.sqrt(max(ev, 0.0)) * evecs[:, i]) for i, ev in enumerate(evals)]
    for d_sigma, d_theta in perturb:
        fits = []
        for sign in (1.0, -1.0):
            th = theta + sign * d_theta
            xs = prob.design(jg.jitter_s + sign * d_sigma, th[0] + th[1] * prob.u)
            fits.append(_fit(xs * w[:, None], b))
        sens.append(0.5 * (fits[0] - fits[1]))
    sys_sd_w = np.sqrt(np.sum(np.square(sens), axis=0))

    results, step_e, step_lo, step_hi = _phase_results(
        timeline, cols, power, boot, sys_sd_w, cover, cfg, device
    )
    resid = y - x @ power
    diagnostics = {
        "n_rows": len(rows),
        "residual_rms_w": float(np.sqrt(np.mean(resid**2))),
        "rows": {
            KIND_NAMES[k]: {
                "n_rows": int((rows.kind == k).sum()),
                "residual_rms_w": float(np.sqrt(np.mean(resid[rows.kind == k] ** 2))),
            }
            for k in np.unique(rows.kind)
        },
        "fitted_power_w": {timeline.names[j]: float(power[i]) for i, j in enumerate(cols)},
        "grid_sd_w": {timeline.names[j]: float(sys_sd_w[i]) for i, j in enumerate(cols)},
        "rows_per_label": {timeline.names[j]: int(cover[j]) for j in cols},
        "n_boot": cfg.n_boot,
        "block_rows": block,
        "confidence": cfg.confidence,
        "instant_window_s": cfg.instant_window_s,
        "refresh": jg.to_json(),
        "grid_shift_s": float(theta[0]),
        "grid_shift_sd_s": float(np.sqrt(theta_cov[0, 0])),
        "grid_drift_s": float(theta[1]),
    }
    notes = []
    coverage = _refresh_coverage(timeline, jg.grid)
    diagnostics["step_start_refresh_coverage"] = coverage
    if coverage < 0.5:
        notes.append(
            f"step starts fall in only {100 * coverage:.0f}% of the sensor's refresh cycle: the "
            "steps run nearly in lockstep with the sensor, so short phases may stay unresolved"
        )
    return DeviceAttribution(
        device=device,
        method=METHOD,
        phases=results,
        n_steps=timeline.n_steps,
        warmup_steps=len(timeline.warmup_steps),
        step_time_s=timeline.step_time_s / timeline.n_steps,
        step_energy_j=step_e,
        step_energy_lo_j=step_lo,
        step_energy_hi_j=step_hi,
        diagnostics=diagnostics,
        notes=notes,
    )


def _phase_results(timeline, cols, power, boot, sys_sd_w, cover, cfg, device):
    """One PhaseResult per label, resolved or not; and the analysed steps' energy with bounds."""
    alpha = 1.0 - cfg.confidence
    z = float(norm.ppf(1 - alpha / 2))
    n_steps = timeline.n_steps
    col_of = {timeline.names[j]: i for i, j in enumerate(cols)}
    in_step = set(timeline.in_step_labels)
    # Energy of the whole analysed steps: well determined even where its split is not.
    t_vec = np.array([timeline.time_s.get(timeline.names[j], 0.0) for j in cols])
    mask = np.array([timeline.names[j] in in_step for j in cols])
    step_e = float(power[mask] @ t_vec[mask])
    q = np.quantile(boot[:, mask] @ t_vec[mask], [alpha / 2, 1 - alpha / 2])
    step_sys = z * float(np.sqrt(np.sum((sys_sd_w[mask] * t_vec[mask]) ** 2)))
    step_lo = step_e - float(np.hypot(max(step_e - q[0], 0.0), step_sys))
    step_hi = step_e + float(np.hypot(max(q[1] - step_e, 0.0), step_sys))

    results: list[PhaseResult] = []
    for name in timeline.order:
        time_s = timeline.time_s[name]
        if name not in col_of:
            why = "no sensor interval overlaps it"
            results.append(unresolved(name, time_s, n_steps, METHOD, why, device))
            continue
        i = col_of[name]
        n_cover = int(cover[cols[i]])
        e = float(power[i] * time_s)
        q_lo, q_hi = (
            float(v) * time_s for v in np.quantile(boot[:, i], [alpha / 2, 1 - alpha / 2])
        )
        s_j = z * float(sys_sd_w[i]) * time_s
        lo = e - float(np.hypot(max(e - q_lo, 0.0), s_j))
        hi = e + float(np.hypot(max(q_hi - e, 0.0), s_j))
        why = None
        if n_cover < cfg.min_rows:
            why = f"only {n_cover} sensor intervals overlap it (need {cfg.min_rows})"
        elif power[i] <= 0:
            why = "the fit pins its power at 0 W: the data cannot separate it from its neighbours"
        elif hi - lo > e:
            why = (
                f"its {100 * cfg.confidence:.0f}% interval [{lo:.4g}, {hi:.4g}] J is wider than "
                f"the estimate {e:.4g} J"
            )
        if why is not None:
            results.append(unresolved(name, time_s, n_steps, METHOD, why, device))
            continue
        share = 100.0 * e / step_e if name != IDLE and step_e > 0 else None
        note = f"{n_cover} sensor intervals; ±{pct_text(50 * (hi - lo) / e)}%"
        results.append(
            PhaseResult(
                name,
                time_s,
                time_s / n_steps,
                e,
                max(lo, 0.0),
                hi,
                float(power[i]),
                share,
                METHOD,
                True,
                note,
                device,
                n_steps,
            )
        )
    return results, step_e, step_lo, step_hi


def _refresh_coverage(timeline: Timeline, grid: RefreshEstimate, bins: int = 20) -> float:
    """Fraction of the refresh cycle (in `bins` bins) at which analysed steps start.

    Steps that always start at the same point of the cycle put the refresh edges at the same
    points of every step: the equations then repeat and cannot separate neighbouring phases.
    """
    starts = np.array([timeline.step_extents_s[s][0] for s in timeline.analysed_steps])
    cycle = ((starts - grid.offset_s) / grid.period_s) % 1.0
    hit = np.unique(np.minimum((cycle * bins).astype(int), bins - 1))
    return len(hit) / bins


__all__ = ["METHOD", "JitterGrid", "RegressionConfig", "attribute_regression"]
