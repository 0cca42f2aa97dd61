"""One pass of the regression's fit: its rows, where they sit in time, their weights and the
phase powers (pure functions; `regression` runs the passes and builds the results).

`fit_pass` builds the sensor rows on the refresh grids (counter, power fields, and the power
buffer's samples where given), keeps those clear of excluded time, sets the buffer's scale
against the counter, and fits: powers by non-negative least squares, the rows' weights from
their modelled variance, and where the rows sit in time (`placement.refine`) with the grids'
uncertainty as the prior. `fit_passes` runs it, and once more on moved grids where the rows were
found further off than the margins their readings were labelled with.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from jouleprof.attribution.common import EXCLUDED, IDLE, Timeline
from jouleprof.attribution.grid import JitterGrid
from jouleprof.attribution.kernels import counter_delays
from jouleprof.attribution.placement import (
    NO_DELAY,
    PARAMS,
    Placement,
    floor_map,
    refine,
    row_weights,
)
from jouleprof.attribution.regression_config import COUNTER_KERNEL_SHIFT_SD_S, RegressionConfig
from jouleprof.attribution.rows import (
    AVERAGE,
    BUFFER,
    COUNTER,
    INSTANT,
    BufferScale,
    buffer_rows,
    buffer_scale,
    merge_rows,
    sensor_rows,
)
from jouleprof.attribution.stages import stage
from jouleprof.errors import AttributionError

_GAIN_PRIOR_SD = 0.05  # the power fields' scale relative to the counter: ±5 % a priori


@dataclass
class Fit:
    """One pass of the fit: the rows, where they sit, their weights and the powers."""

    pl: Placement
    cover: np.ndarray
    theta: np.ndarray
    theta_cov: np.ndarray
    w: np.ndarray
    x: np.ndarray
    power: np.ndarray
    half_s: float
    center_s: float
    buffer_scale: BufferScale | None = None
    prior_sd: np.ndarray | None = None


def counter_delays_of(cfg: RegressionConfig):
    """The counter's response as point delays (`kernels.counter_delays`); NO_DELAY when the
    config sets neither a tail nor a lag."""
    if cfg.counter_tail_s == 0 and cfg.counter_lag_s == 0:
        return NO_DELAY
    return counter_delays(cfg.counter_tail_s, cfg.counter_tail_fraction, cfg.counter_lag_s)


def fit_pass(
    dev,
    timeline: Timeline,
    jc: JitterGrid,
    jp: JitterGrid,
    cfg: RegressionConfig,
    buffer=None,
    pieces=None,
):
    """Build the rows on the grids `jc` (counter) and `jp` (power fields), and the power
    buffer's rows where `buffer` (its samples of this device) is given, and fit them.
    `pieces` ([(t0_s, t1_s, grid)], `grid.power_pieces`): the instant rows of each stretch of
    the run come from its own grid instead of `jp`."""
    instant = (cfg.instant_window_s, cfg.instant_weight) if cfg.use_instant else None
    rows = sensor_rows(
        dev,
        {COUNTER: jc.grid, INSTANT: jp.grid, AVERAGE: jp.grid},
        counter_weight=cfg.counter_weight if cfg.use_counter else None,
        instant=None if pieces else instant,
        average=(cfg.average_window_s, cfg.average_weight) if cfg.use_average else None,
    )
    t = dev["t_s"].to_numpy(float)
    for a_s, b_s, g in pieces or ():
        try:
            part = sensor_rows(
                dev[(t >= a_s) & (t <= b_s)],
                {INSTANT: g.grid},
                counter_weight=None,
                instant=instant,
            )
        except AttributionError:
            continue  # a stretch with no usable instant reading
        rows = merge_rows(rows, part)
    if buffer is not None:
        rows = merge_rows(
            rows,
            buffer_rows(
                buffer,
                cfg.buffer_window_s,
                cfg.buffer_lag_s,
                cfg.buffer_weight,
                (float(t.min()), float(t.max())),
            ),
        )
    sigma = np.array([jc.jitter_s, jp.jitter_s, jp.jitter_s, cfg.buffer_jitter_s])
    delays = counter_delays_of(cfg)
    # A counter row whose energy trails the power reaches back (or, at a negative lag,
    # forward) by its delays: the time it weighs must be clear of excluded time too.
    counter = rows.kind == COUNTER
    d_lo, d_hi = min(d for d, _ in delays), max(d for d, _ in delays)
    a_s = np.where(counter, rows.t0_s - max(d_hi, 0.0), rows.t0_s)
    b_s = np.where(counter, rows.t1_s - min(d_lo, 0.0), rows.t1_s)
    # The share of each row's time that is excluded (from the edges near the row only).
    inv = 1.0 / (b_s - a_s)
    frac = timeline.knot_overlap(
        np.column_stack([a_s, b_s]),
        np.column_stack([-inv, inv]),
        float(sigma.max()),
        [timeline.names.index(nm) for nm in EXCLUDED],
    )
    r0, r1 = timeline.region_s
    keep = (
        (frac.max(axis=1) <= 1e-6)
        & (a_s >= timeline.edges_s[0])
        & (b_s <= timeline.edges_s[-1])
        & (rows.t1_s > r0 - cfg.margin_s)
        & (rows.t0_s < r1 + cfg.margin_s)
    )
    rows = rows.select(keep)
    scale = None
    if buffer is not None and np.any(rows.kind == BUFFER):
        # The counter sets the scale: the buffer's rows are put on it before the fit.
        scale = buffer_scale(
            rows, buffer["t_s"].to_numpy(float), buffer["power_w"].to_numpy(float), cfg.buffer_lag_s
        )
        if scale is not None:
            b = rows.kind == BUFFER
            rows.power_w = np.where(b, rows.power_w / scale.scale, rows.power_w)
    ones = np.ones(len(rows))
    seconds = timeline.knot_overlap(
        np.column_stack([rows.t0_s, rows.t1_s]), np.column_stack([-ones, ones]), 0.0
    )
    cover = (seconds > 1e-9).sum(axis=0)
    cols = [j for j, nm in enumerate(timeline.names) if nm not in EXCLUDED and cover[j] > 0]
    if len(rows) < 2 * len(cols) or not cols:
        raise AttributionError(
            f"only {len(rows)} sensor intervals fall in the analysed steps: the run is too "
            "short for regression (record more steps)"
        )
    mid = rows.mid_s
    half = max(0.5 * float(mid[-1] - mid[0]), 1e-9)
    center = 0.5 * float(mid[-1] + mid[0])
    idle = timeline.names.index(IDLE) if IDLE in timeline.names else None
    floor = (
        floor_map(len(cols), cols.index(idle))
        if cfg.floor_at_idle and idle in cols and len(cols) > 1
        else None
    )
    pl = Placement(
        timeline,
        rows,
        cols,
        sigma,
        np.clip((mid - center) / half, -1, 1),
        cfg.instant_kernel,
        cfg.buffer_kernel,
        delays,
        floor,
    )
    kind_w = np.array(
        [cfg.counter_weight, cfg.instant_weight, cfg.average_weight, cfg.buffer_weight]
    )

    # Fit, reweigh, refine where the rows sit in time, reweigh there, fit again.
    w = rows.weight
    theta = np.zeros(len(PARAMS))
    x, y = pl.design(theta), pl.target(theta)
    power = pl.fit_powers(x, y, w)
    w0 = cfg.instant_window_s
    fit_window = cfg.fit_instant_window and bool(np.any(rows.kind == INSTANT))
    has_counter = bool(np.any(rows.kind == COUNTER))
    has_fields = bool(np.any((rows.kind == INSTANT) | (rows.kind == AVERAGE)))
    has_buffer = bool(np.any(rows.kind == BUFFER))
    c_shift_sd, c_drift_sd = jc.offset_se_s, jc.period_se_s * half / jc.grid.period_s
    if cfg.counter_shift_sd_s is not None:
        c_shift_sd = c_drift_sd = cfg.counter_shift_sd_s
    elif delays != NO_DELAY:
        # The kernel was measured against the grid where the counter's reads put it; its lag
        # and this shift are one term, so the shift stays within the lag's uncertainty.
        c_shift_sd = min(c_shift_sd, COUNTER_KERNEL_SHIFT_SD_S)
        c_drift_sd = min(c_drift_sd, COUNTER_KERNEL_SHIFT_SD_S)
    prior_sd = np.maximum(
        [
            c_shift_sd,
            c_drift_sd,
            jp.offset_se_s,
            jp.period_se_s * half / jp.grid.period_s,
            0.4 * w0 if fit_window else 0.0,
            # A power signal's scale is free only where the counter can set it.
            _GAIN_PRIOR_SD if has_counter and has_fields else 0.0,
            cfg.buffer_lag_sd_s if has_buffer else 0.0,
        ],
        1e-9,
    )
    theta_cov = np.diag(prior_sd**2)
    if cfg.reweight:
        w = row_weights(pl, x, power, kind_w, theta)
    if cfg.refine_grid:
        # Bounds only against runaway steps: the prior does the regularizing.
        lo, hi = -5 * prior_sd - 2e-3, 5 * prior_sd + 2e-3
        lo[4] = max(lo[4], -0.8 * w0)
        hi[4] = min(hi[4], jp.grid.period_s - w0)
        lo[5], hi[5] = max(lo[5], -0.5), min(hi[5], 0.5)
        # Twice: the weights of the first round were taken where the rows sat before.
        for _ in range(2 if cfg.reweight else 1):
            theta, theta_cov = refine(pl, w, theta, prior_sd, (lo, hi))
            x, y = pl.design(theta), pl.target(theta)
            power = pl.fit_powers(x, y, w)
            if cfg.reweight:
                w = row_weights(pl, x, power, kind_w, theta)
    power = pl.fit_powers(x, y, w)
    return Fit(pl, cover, theta, theta_cov, w, x, power, half, center, scale, prior_sd)


def moved_grid(jg: JitterGrid, shift_s: float, drift_s: float, center_s: float, half_s: float):
    """`jg` with its grid moved by shift + drift·(t − center)/half (a new offset and period)."""
    g = jg.grid
    period = g.period_s * (1.0 + drift_s / half_s)
    k0 = np.round((center_s - g.offset_s) / g.period_s)
    anchor = g.offset_s + k0 * g.period_s
    anchor += shift_s + drift_s * (anchor - center_s) / half_s
    grid = replace(g, period_s=float(period), offset_s=float(anchor % period))
    return replace(jg, grid=grid)


def fit_passes(found, timeline: Timeline, jc: JitterGrid, jp: JitterGrid, cfg):
    """The fit's passes (`fit_pass`) on one device's readings, `found` (`regression._Grids`:
    its samples, power-buffer samples and power-grid pieces): (fit, counter grid, power grid,
    the grids' shifts)."""
    dev = found.dev
    with stage("rows and placement"):
        f = fit_pass(dev, timeline, jc, jp, cfg, found.buffer, found.pieces)
    # A grid found to sit further off than the margins its reads were labelled with may have
    # given some readings to the wrong refresh: label them again on the moved grids.
    moved = [0.0, 0.0]
    th = f.theta
    c_off, p_off = abs(th[0]) + abs(th[1]), abs(th[2]) + abs(th[3])
    if c_off > 0.5 * (3 * jc.jitter_s + 1e-3) or p_off > 1.5 * max(jp.jitter_s, 0.5e-3):
        moved = [float(th[0]), float(th[2])]
        jc = moved_grid(jc, th[0], th[1], f.center_s, f.half_s)
        jp = moved_grid(jp, th[2], th[3], f.center_s, f.half_s)
        with stage("rows and placement, relabelled"):
            f = fit_pass(dev, timeline, jc, jp, cfg, found.buffer, found.pieces)
    return f, jc, jp, moved
