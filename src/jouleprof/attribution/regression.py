"""Phase energy by regression on every sensor interval of the run (pure functions).

Every reading of the sensor is an equation. Between two consecutive counter values the device
used exactly ``E = Σ_phase P_phase × overlap(phase, interval)``; an instant-power reading is the
same sum over the short window it averages, divided by the window. Stacking the equations of
all analysed steps and solving for the phase powers ``P_phase`` (non-negative least squares)
measures phases far shorter than the sensor's 100 ms refresh, because refresh edges fall at a
different point of the step in every step. A phase's energy is its fitted power times its
exclusive time in the analysed steps.

Rows (one per sensor interval, normalized to mean power in W):

- counter rows: consecutive counter points (τ_{k-1}, τ_k] (``counter_points``, with each value
  placed on the refresh grid of ``detect_device_refresh``). Exact integrals, up to the jitter of
  the true refresh instants around the grid. Weight ∝ the interval's length in refresh periods
  (capped at 2), since the jitter error in joules does not grow with the interval.
- instant rows: the POWER_INSTANT reading that refresh τ_k produced is the mean power over
  [τ_k − w, τ_k], w = `instant_window_s` (25 ms, shared/FACTS.md). Each reading is labelled with
  the one grid instant inside its update bracket (reads where that is ambiguous are dropped).
  They depend on the assumed window, so they carry a lower weight (`instant_weight`).
- 1 s average rows (optional, off by default): the default power reading over [τ_k − 1 s, τ_k].

Confidence intervals come from a moving-block bootstrap over the rows in time order (blocks of
`block_s` seconds keep the correlation of neighbouring rows, which share refresh edges).

Assumptions, stated so a user can judge a result:

- each phase draws a power that is stationary across the analysed steps (warm-up steps are
  excluded; a phase whose power drifts gets its mean power, and a wider interval);
- the power of time outside any step (idle) and of untracked time is one constant each;
- every signal refreshes on one regular grid, whose instants jitter a little and without bias;
- the spans' times are on the samples' clock (small noise on the edges is tolerated);
- steps are not so strictly periodic against the refresh period that the edges always fall at
  the same points of the step (the bootstrap interval then widens and the phase is reported
  unresolved rather than guessed).

A phase is reported unresolved (energy None, with the reason) when fewer than `min_rows` sensor
intervals overlap it, when the fit pins its power at zero, or when its bootstrap interval is
wider than its estimate.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np
from scipy.linalg import cholesky, solve_triangular
from scipy.optimize import nnls
from scipy.stats import norm

from jouleprof.attribution.common import IDLE, WARMUP, Timeline
from jouleprof.attribution.grid import fit_jitter_grid
from jouleprof.attribution.result import DeviceAttribution, PhaseResult, unresolved
from jouleprof.errors import AttributionError
from jouleprof.sensors.refresh import RefreshEstimate, counter_points, detect_device_refresh

log = logging.getLogger(__name__)

METHOD = "regression"
COUNTER, INSTANT, AVERAGE = 0, 1, 2
KIND_NAMES = ("counter", "power_instant", "power_avg")


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
    """Weight of a one-period counter row (normalized to W)."""
    instant_weight: float = 0.5
    """Weight of an instant-power row, relative to a counter row (lower: the window is assumed)."""
    average_weight: float = 0.1
    """Weight of a 1 s average row."""
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


@dataclass
class SensorRows:
    """One row per sensor interval: [t0_s, t1_s] drew mean power `power_w`."""

    t0_s: np.ndarray
    t1_s: np.ndarray
    power_w: np.ndarray
    kind: np.ndarray
    weight: np.ndarray
    """Square-root weight multiplying the row in the least squares."""

    def select(self, keep: np.ndarray) -> SensorRows:
        return SensorRows(
            *(a[keep] for a in (self.t0_s, self.t1_s, self.power_w, self.kind, self.weight))
        )


def _counter_rows(t_s, energy_j, grid: RefreshEstimate, weight: float):
    tau, c = counter_points(t_s, energy_j, grid)
    # The first value was read at the run's edge, before any refresh was seen: its instant is
    # unknown, so it starts no interval.
    tau, c = tau[1:], c[1:]
    if len(tau) < 2:
        return None
    dt, de = np.diff(tau), np.diff(c)
    ok = (dt > 0) & (de >= 0)  # de < 0: the counter was reset
    t0, t1 = tau[:-1][ok], tau[1:][ok]
    w = weight * np.minimum(dt[ok] / grid.period_s, 2.0)
    return t0, t1, de[ok] / dt[ok], w


def _power_rows(t_s, power_w, grid: RefreshEstimate, window_s: float, weight: float):
    """Rows from a power signal: each new value labelled with the refresh inside its bracket."""
    ok = ~np.isnan(power_w)
    t, v = np.asarray(t_s, dtype=float)[ok], np.asarray(power_w, dtype=float)[ok]
    if len(t) < 2:
        return None
    i = np.flatnonzero(v[1:] != v[:-1]) + 1
    slack = 3.0 * max(grid.jitter_s if np.isfinite(grid.jitter_s) else 0.0, 0.5e-3)
    k_lo = np.ceil((t[i - 1] - slack - grid.offset_s) / grid.period_s)
    k_hi = np.floor((t[i] + slack - grid.offset_s) / grid.period_s)
    one = k_lo == k_hi  # exactly one grid instant can have produced this value
    tau = grid.offset_s + k_lo[one] * grid.period_s
    return tau - window_s, tau, v[i][one], np.full(int(one.sum()), weight)


def sensor_rows(dev_samples, grid: RefreshEstimate, cfg: RegressionConfig) -> SensorRows:
    """Every usable sensor interval of one device's samples (a DataFrame), sorted by time."""
    t = dev_samples["t_s"].to_numpy(dtype=float)
    parts = []
    specs = [
        (COUNTER, cfg.use_counter, "energy_j"),
        (INSTANT, cfg.use_instant, "power_instant_w"),
        (AVERAGE, cfg.use_average, "power_w"),
    ]
    for kind, wanted, col in specs:
        if not wanted or col not in dev_samples.columns or dev_samples[col].notna().sum() < 2:
            continue
        v = dev_samples[col].to_numpy(dtype=float)
        if kind == COUNTER:
            got = _counter_rows(t, v, grid, cfg.counter_weight)
        elif kind == INSTANT:
            got = _power_rows(t, v, grid, cfg.instant_window_s, cfg.instant_weight)
        else:
            got = _power_rows(t, v, grid, cfg.average_window_s, cfg.average_weight)
        if got is not None and len(got[0]):
            parts.append((*got, np.full(len(got[0]), kind)))
    if not parts:
        raise AttributionError(
            "no usable energy counter or power readings in samples.csv for regression: "
            "record energy_j or power_instant_w"
        )
    t0, t1, p, w, k = (np.concatenate(x) for x in zip(*parts, strict=True))
    order = np.argsort(0.5 * (t0 + t1), kind="stable")
    return SensorRows(t0[order], t1[order], p[order], k[order], w[order])


def _nnls_gram(gram: np.ndarray, rhs: np.ndarray) -> np.ndarray:
    """NNLS of min ‖Ax − b‖ given AᵀA and Aᵀb (equivalent through the Cholesky factor)."""
    p = len(rhs)
    ridge = 1e-12 * max(float(np.trace(gram)) / p, 1e-300)
    r = cholesky(gram + ridge * np.eye(p), lower=False)
    z = solve_triangular(r, rhs, trans="T", lower=False)
    return nnls(r, z, maxiter=50 * p)[0]


def _block_bootstrap(a: np.ndarray, b: np.ndarray, mid_s: np.ndarray, cfg: RegressionConfig):
    """Powers refitted on `n_boot` moving-block resamples of the rows: (n_boot, p)."""
    n, p = a.shape
    span_s = float(mid_s[-1] - mid_s[0]) if n > 1 else 0.0
    block = int(np.clip(round(cfg.block_s * n / span_s) if span_s > 0 else n, 1, n))
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


def _fit(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return nnls(a, b, maxiter=50 * a.shape[1])[0]


def attribute_regression(
    samples, timeline: Timeline, device: str, cfg: RegressionConfig | None = None
) -> DeviceAttribution:
    """Attribute one device's energy to the timeline's phases by regression (module docstring).

    Raises:
        AttributionError: no refresh grid can be found, or no sensor interval is usable.
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
    sigma = jg.jitter_s
    rows = sensor_rows(dev, jg.grid, cfg)

    def design(r: SensorRows, jitter_s: float, shift_s: float = 0.0) -> np.ndarray:
        ov = timeline.overlap_s(r.t0_s + shift_s, r.t1_s + shift_s, jitter_s)
        return ov / (r.t1_s - r.t0_s)[:, None]

    frac = design(rows, sigma)
    r0, r1 = timeline.region_s
    keep = (
        (frac[:, timeline.names.index(WARMUP)] <= 1e-6)
        & (rows.t0_s >= timeline.edges_s[0])
        & (rows.t1_s <= timeline.edges_s[-1])
        & (rows.t1_s > r0 - cfg.margin_s)
        & (rows.t0_s < r1 + cfg.margin_s)
    )
    rows, frac = rows.select(keep), frac[keep]
    cover = (design(rows, 0.0) > 1e-9).sum(axis=0)
    cols = [j for j, nm in enumerate(timeline.names) if nm != WARMUP and cover[j] > 0]
    if len(rows.t0_s) < 2 * len(cols) or not cols:
        raise AttributionError(
            f"only {len(rows.t0_s)} sensor intervals of {device} fall in the analysed steps: "
            "the run is too short for regression (record more steps)"
        )
    w = rows.weight[:, None]
    x = frac[:, cols]
    a, b = x * w, rows.power_w * rows.weight
    power = _fit(a, b)
    boot, block = _block_bootstrap(a, b, 0.5 * (rows.t0_s + rows.t1_s), cfg)
    # What the bootstrap cannot see: the grid's own uncertainty (position and jitter σ).
    sens = []
    for d_sigma, shift in ((jg.jitter_se_s, 0.0), (0.0, jg.offset_se_s)):
        plus = _fit(design(rows, sigma + d_sigma, shift)[:, cols] * w, b)
        minus = _fit(design(rows, max(sigma - d_sigma, 0.0), -shift)[:, cols] * w, b)
        sens.append(0.5 * (plus - minus))
    sys_sd_w = np.sqrt(np.sum(np.square(sens), axis=0))
    resid = rows.power_w - x @ power
    alpha = 1.0 - cfg.confidence
    z = float(norm.ppf(1 - alpha / 2))
    n_steps = timeline.n_steps

    col_of = {timeline.names[j]: i for i, j in enumerate(cols)}
    in_step = timeline.in_step_labels
    # Energy of the whole analysed steps: well determined even when its split is not.
    t_vec = np.array([timeline.time_s.get(timeline.names[j], 0.0) for j in cols])
    step_mask = np.array([timeline.names[j] in in_step for j in cols])
    step_e = float(power[step_mask] @ t_vec[step_mask])
    step_lo, step_hi = np.quantile(
        boot[:, step_mask] @ t_vec[step_mask], [alpha / 2, 1 - alpha / 2]
    )

    results: list[PhaseResult] = []
    for name in timeline.order:
        time_s = timeline.time_s[name]
        if name not in col_of:
            results.append(
                unresolved(name, time_s, n_steps, METHOD, "no sensor interval overlaps it", device)
            )
            continue
        i = col_of[name]
        n_cover = int(cover[cols[i]])
        e = float(power[i] * time_s)
        q_lo, q_hi = (
            float(q) * time_s for q in np.quantile(boot[:, i], [alpha / 2, 1 - alpha / 2])
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
        note = f"{n_cover} sensor intervals; ±{50 * (hi - lo) / e:.1f}%"
        results.append(
            PhaseResult(
                name,
                time_s,
                time_s / n_steps,
                e,
                max(lo, 0.0),
                hi,
                float(power[i]),
                100.0 * e / step_e if name != IDLE and step_e > 0 else None,
                METHOD,
                True,
                note,
                device,
                n_steps,
            )
        )
    kinds = {
        KIND_NAMES[k]: {
            "n_rows": int((rows.kind == k).sum()),
            "residual_rms_w": float(np.sqrt(np.mean(resid[rows.kind == k] ** 2))),
        }
        for k in np.unique(rows.kind)
    }
    diagnostics = {
        "n_rows": int(len(rows.t0_s)),
        "residual_rms_w": float(np.sqrt(np.mean(resid**2))),
        "weighted_residual_rms_w": float(np.sqrt(np.mean((b - a @ power) ** 2))),
        "rows": kinds,
        "fitted_power_w": {timeline.names[j]: float(power[i]) for i, j in enumerate(cols)},
        "grid_sd_w": {timeline.names[j]: float(sys_sd_w[i]) for i, j in enumerate(cols)},
        "rows_per_label": {timeline.names[j]: int(cover[j]) for j in cols},
        "n_boot": cfg.n_boot,
        "block_rows": block,
        "confidence": cfg.confidence,
        "instant_window_s": cfg.instant_window_s,
        "refresh": jg.to_json(),
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
        n_steps=n_steps,
        warmup_steps=len(timeline.warmup_steps),
        step_time_s=timeline.step_time_s / n_steps,
        step_energy_j=step_e,
        step_energy_lo_j=float(step_lo),
        step_energy_hi_j=float(step_hi),
        diagnostics=diagnostics,
        notes=notes,
    )


def _refresh_coverage(timeline: Timeline, grid: RefreshEstimate, bins: int = 20) -> float:
    """Fraction of the refresh cycle (in `bins` bins) at which analysed steps start.

    Steps that always start at the same point of the cycle put the refresh edges at the same
    points of every step: the equations then repeat and cannot separate neighbouring phases.
    """
    starts = np.array([timeline.step_extents_s[s][0] for s in timeline.analysed_steps])
    cycle = ((starts - grid.offset_s) / grid.period_s) % 1.0
    hit = np.unique(np.minimum((cycle * bins).astype(int), bins - 1))
    return len(hit) / bins
