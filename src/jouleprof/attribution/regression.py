"""Phase energy by regression on every sensor interval of the run (pure functions).

Every reading of the sensor is an equation (`rows`): between two consecutive counter values the
device used exactly ``Σ_phase P_phase × overlap(phase, interval)``; an instant-power reading is
the same sum over the short window it averages (25 ms by default, shared/FACTS.md), divided by
the window. Stacking the equations of all analysed steps and solving for the phase powers
``P_phase`` by non-negative least squares (rows in W) measures phases far shorter than the
sensor's 100 ms refresh, because the refresh edges fall at a different point of the step in
every step. A phase's energy is its fitted power times its exclusive time in the analysed steps.
Where the run recorded NVML's power-sample buffer (power_buffer.csv, a sample every ~20 ms) each
sample is one more row: the power weighed by the buffer's kernel over the window before its
stamp less a lag (BUFFER_KERNEL, BUFFER_WINDOW_S, BUFFER_LAG_S, measured on a kernel probe), its
scale first set against the counter's over the same intervals (the counter stays the anchor).

How the fit stays unbiased and its interval honest:

1. Counter rows sit on the counter's refresh grid and power rows on the power fields' (on an
   H200 they tick independently); each grid is refitted with the spread σ of its true refresh
   instants (`grid`). The attribution never sees the true instants; a reading placed on the
   grid was really taken σ earlier or later, which blurs short phases next to a large power
   step (a second-order bias that does not average out). Each row's overlaps are therefore
   the *expected* overlaps under that jitter (`Timeline.overlap_s(..., jitter_s=σ)`). A
   counter read too rarely to place its refreshes is left out, with a note.
2. Rows are weighed by their modelled variance (feasible generalized least squares): the
   jitter of a row's edges matters only where they sit on a power step (`jitter_variance_w2`),
   and a per-signal noise floor is estimated from the residuals. The configured weights
   (instant rows below counter rows: their window is an assumption) multiply these.
3. Where the rows sit in time is refined from the power data themselves (`placement`:
   Gauss-Newton, with the grid fits' uncertainty as the prior): a shift ``s0 + s1·u`` of each
   grid (position and drift), the power fields' gain relative to the counter, and the length
   of the instant field's window (25 ms is only what was published for A100/H100; a wrong
   window biases short phases by tens of percent, and the counter rows, which need no window,
   pin it). Sharp power steps in the readings time the sensor better than the update brackets
   do. A grid found further off than the margins its readings were labelled with is moved and
   the readings labelled again.
4. The confidence interval is a moving-block bootstrap over the rows in time order (`bootstrap`:
   blocks of at least `block_s` keep the correlation of neighbouring rows, which share refresh
   edges, and are lengthened to the residuals' own correlation time where the power drifts
   slowly), widened by what the bootstrap cannot see: the remaining uncertainty of σ and of
   the placement, and, where long phases are cut into bins, how far bins twice as long move
   each phase, or, where bins were tried and not kept, how far the bins move it
   (`regression_choice`). It is never narrower than ±`min_rel_halfwidth` (0.1 %), and
   is widened further when the steps run in lockstep with the sensor.

Assumptions, stated so a user can judge a result:

- each phase draws a power that is stationary across the analysed steps (warm-up steps are
  excluded; a phase whose power drifts gets its mean power, and a wider interval) — or, under
  the stall model (`attribution.stall`), its work does, and the time it takes beyond its
  shortest steps draws one power shared by all phases (a host-paced GPU waiting). Both models
  are fitted and the stall model kept where its residual is clearly lower (STALL_KEEP_RATIO);
- a phase draws one power through its length — or, where long phases are cut into bins
  (`attribution.bins`, kept where the residual per degree of freedom is clearly lower:
  BIN_KEEP_RATIO), each ~`bin_s` of it draws its own, the same in every step;
- idle time and untracked time each have one constant power;
- each signal refreshes on a regular grid whose instants jitter without bias (Gaussian);
- the counter books each interval's energy when it is drawn (`counter_tail_s`,
  `counter_lag_s`: a measured response otherwise; off by default);
- the power readings are the true power times a constant gain (fitted against the counter);
- the instant field averages a fixed window before its refresh (fitted, `instant_window_s`
  its prior); the power buffer weighs a fixed kernel before its stamp (its lag refined, its
  window's uncertainty carried into the intervals), the same under every load;
- span times are on the samples' clock (small noise on their edges is tolerated);
- steps are not in lockstep with the refresh period (if they are, the equations repeat, the
  interval widens and short phases are reported unresolved; a note says so).

A phase is reported unresolved (energy None, with the reason) when fewer than `min_rows` sensor
intervals overlap it, when the fit pins its power at zero, or when its interval is wider than
its estimate.

The settings are in `regression_config`, one pass of the fit (rows, placement, weights,
powers) in `regression_fit`, the sensor model's spread in `regression_sensitivity`, the choice
of model (stall, bins) in `regression_choice`, the per-phase results built from the fit in
`regression_results`; the names other code imports from here are re-exported.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field, replace

import numpy as np

from jouleprof.attribution.bins import expand, split_bins
from jouleprof.attribution.bootstrap import block_bootstrap, residual_block_s
from jouleprof.attribution.common import IDLE, Timeline
from jouleprof.attribution.counter_scan import (
    OffsetScan,
    is_ambiguous,
    scan_offsets,
    scan_window,
    shifted,
)
from jouleprof.attribution.grid import (
    JitterGrid,
    fit_pieces,
    pieces_possible,
    power_column,
    signal_grid,
    wanted_signals,
    with_power_pieces,
)
from jouleprof.attribution.lag_profile import lag_spread
from jouleprof.attribution.parallel import Beside, PrefetchingFit
from jouleprof.attribution.pinned import pinned_spread
from jouleprof.attribution.placement import (
    NO_DELAY,
    PARAMS,
)
from jouleprof.attribution.regression_choice import (  # noqa: F401  (re-exported)
    BIN_KEEP_RATIO,
    STALL_KEEP_RATIO,
    choose_model,
)
from jouleprof.attribution.regression_config import (  # noqa: F401  (re-exported)
    BUFFER_KERNEL,
    BUFFER_LAG_S,
    BUFFER_WINDOW_S,
    COUNTER_KERNEL_SHIFT_SD_S,
    RegressionConfig,
    check_kernel,
)
from jouleprof.attribution.regression_fit import fit_pass, fit_passes
from jouleprof.attribution.regression_results import (  # noqa: F401  (re-exported)
    CEILING_MARGIN,
    METHOD,
    _bounded_splits,
    _demote_partners,
    _energy_interval,
    _joint_results,
    _phase_results,
    _power_ceiling_w,
    _power_floor_w,
    _refresh_coverage,
    _terms,
)
from jouleprof.attribution.regression_sensitivity import perturbations, sensitivities
from jouleprof.attribution.result import DeviceAttribution
from jouleprof.attribution.rows import (
    BUFFER,
    INSTANT,
    KIND_NAMES,
)
from jouleprof.attribution.stages import stage
from jouleprof.attribution.stall import STALL, split_stalls
from jouleprof.errors import AttributionError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class _Grids:
    """One device's readings and their refresh grids, found once per attribution."""

    dev: object
    grids: dict[str, JitterGrid]
    notes: list[str]
    buffer: object = None
    """The device's power-buffer samples (power_buffer.csv rows), or None."""
    pieces: list | None = None
    """The power fields' grid fitted piece by piece over a long run (`grid.power_pieces`)."""
    passes: dict = field(default_factory=dict)
    """Config (intervals set) → its fit's passes (`passes`), each computed once."""
    counter_scan: OffsetScan | None = None
    """Where the counter grid was ambiguous: the scan that placed it (`counter_scan`)."""


def _device_grids(samples, dev, cfg: RegressionConfig):
    """The refresh grids (`grid.device_grids`), notes, and the power grid's pieces fitted ahead
    (`grid.fit_pieces`; False where not fitted). Where a worker pays (`parallel.Beside`), the
    counter's grid and the pieces are fitted in it while this process fits the power grid: the
    same fits as one after the other, the pieces before knowing whether they will be used."""
    signals = wanted_signals(dev, cfg.use_counter, cfg.use_instant or cfg.use_average)
    pieces_col = power_column(dev)
    ahead = bool(cfg.use_instant and cfg.power_piece_s and pieces_possible(dev, cfg.power_piece_s))

    def fit(name: str) -> list:
        return [signal_grid(samples, dev, n, c) for n, c in signals if n == name]

    def worker_part():
        return fit("counter"), (fit_pieces(dev, pieces_col, cfg.power_piece_s) if ahead else False)

    beside = Beside(worker_part, len(dev))
    if beside.runs:
        power = fit("power")
        counter, fitted = beside.get()
    else:
        counter, power, fitted = fit("counter"), fit("power"), False
    grids, notes = {}, []
    for (name, _), (grid, more) in zip(signals, [*counter, *power], strict=True):
        notes += more
        if grid is not None:
            grids[name] = grid
    if fitted is not False and grids.get("power") and grids["power"].grid.signal != pieces_col:
        fitted = False  # fitted on another column than the grid's own: fit again if needed
    return grids, notes, fitted


def attribute_regression(
    samples, timeline: Timeline, device: str, cfg: RegressionConfig | None = None, buffer=None
) -> DeviceAttribution:
    """Attribute one device's energy to the timeline's phases by regression (module docstring).

    Args:
        samples: samples.csv as a DataFrame.
        timeline: the run's partition (`build_timeline`).
        device: the device to attribute.
        cfg: the regression's settings.
        buffer: power_buffer.csv as a DataFrame (t_s, device, power_w), or None. Used as rows
            unless cfg.use_buffer is False.

    Raises:
        AttributionError: no refresh grid can be found, too few sensor intervals are usable,
            or cfg.use_buffer is True and `buffer` holds no sample of the device.
    """
    cfg = cfg or RegressionConfig()
    dev = samples[samples["device"] == device]
    buf = None
    if buffer is not None and cfg.use_buffer is not False:
        buf = buffer[buffer["device"].astype(str) == device]
        buf = buf if len(buf) else None
    if cfg.use_buffer and buf is None:
        raise AttributionError(
            f"use_buffer is set but the run has no power-buffer samples of {device} "
            "(power_buffer.csv: record with --power-buffer)"
        )
    # The refresh grids (most of the fit's time) serve both models of the auto stall choice.
    with stage(f"{device}: refresh grids"):
        grids, grid_notes, fitted_pieces = _device_grids(samples, dev, cfg)
    if "counter" not in grids and "power" in grids and cfg.use_counter:
        cfg = replace(cfg, use_counter=False)
    if not grids:
        raise AttributionError(
            f"cannot place {device}'s sensor refreshes: too few updates, or reads too sparse "
            "to see them; regression needs the counter read about once per refresh or the "
            "power fields read every ~20-50 ms (use --method proportional for this run)"
        )
    pieces = None
    if cfg.use_instant and cfg.power_piece_s:  # pieces place the instant rows only
        with stage(f"{device}: power-grid pieces"):
            grids, grid_notes, pieces = with_power_pieces(
                dev, grids, grid_notes, cfg.power_piece_s, fitted_pieces
            )
    scan = None
    if (
        cfg.use_counter
        and "counter" in grids
        and "power" in grids
        and is_ambiguous(grids["counter"])
    ):
        # Few read gaps place a short run's counter grid: several offsets can agree with all of
        # them. The rows' residual tells them apart (`counter_scan`).
        with stage(f"{device}: counter-offset scan"), _one_blas_thread():
            scan = _scan_counter(dev, timeline, grids, cfg, buf, pieces)
        jc = grids["counter"]
        grids = {**grids, "counter": shifted(jc, scan.shift_s, scan.offset_se_s)}
        grid_notes = [
            *grid_notes,
            f"the energy counter's refresh grid was ambiguous from its reads (position ±"
            f"{1e3 * jc.offset_se_s:.0f} ms): placed by the fit's residual over "
            f"{len(scan.shifts_s)} offsets, moved {1e3 * scan.shift_s:+.1f} ms "
            f"(±{1e3 * scan.offset_se_s:.1f} ms)",
        ]
    found = _Grids(dev, grids, grid_notes, buf, pieces, counter_scan=scan)
    with stage(f"{device}: regression"), _one_blas_thread():
        fit = PrefetchingFit(
            lambda c: _attribute(found, timeline, device, c), found.passes, len(dev)
        )
        return choose_model(fit, timeline, cfg)


def _scan_counter(dev, timeline: Timeline, grids, cfg: RegressionConfig, buf, pieces) -> OffsetScan:
    """The counter-offset scan (`counter_scan.scan_offsets`) with point fits of the plain
    model: rows as configured, neither reweighed nor refined."""
    quick = replace(cfg, reweight=False, refine_grid=False)
    jp = grids["power"]
    dev = dev[scan_window(dev["t_s"].to_numpy(float))]

    def rms_w(jc: JitterGrid) -> float:
        try:
            f = fit_pass(dev, timeline, jc, jp, quick, buf, pieces)
        except AttributionError as e:
            raise ValueError(str(e)) from e
        resid = f.pl.target(f.theta) - f.x @ f.power
        return float(np.sqrt(np.mean(resid**2)))

    return scan_offsets(grids["counter"], rms_w)


def _one_blas_thread():
    """BLAS on one thread for the fits: their products are tens of thousands of rows by a few
    dozen columns, where threads cost more than they give (on a 16-core host the default pool
    spent 3.6 × the CPU time of a 2-core machine on them)."""
    from threadpoolctl import threadpool_limits

    return threadpool_limits(limits=1, user_api="blas")


def _describe(cfg: RegressionConfig) -> str:
    """A fit's model in a few words, for its stage's name."""
    parts = ["stall model" if cfg.stall_model else "plain"]
    if cfg.bins:
        parts.append(f"bins of {1e3 * cfg.bin_s:g} ms")
    parts.append("intervals" if cfg.intervals else "point")
    return "fit: " + ", ".join(parts)


def _attribute(found: _Grids, timeline: Timeline, device: str, cfg: RegressionConfig):
    with stage(_describe(cfg)):
        return _attribute_model(found, timeline, device, cfg)


def _attribute_model(found: _Grids, timeline: Timeline, device: str, cfg: RegressionConfig):
    dev, grids, grid_notes = found.dev, found.grids, found.notes
    jc = grids.get("counter", grids.get("power"))
    jp = grids.get("power", grids.get("counter"))
    assert jc is not None and jp is not None
    # Long phases may be cut into bins of time, then the stall model splits every label into
    # work and stall; results are reported per phase of the original timeline.
    reported = timeline
    binned = split_bins(timeline, cfg.bin_s) if cfg.bins else None
    members = binned.members if binned is not None else {}
    timeline = binned.timeline if binned is not None else timeline
    split = split_stalls(timeline, cfg.stall_quantile) if cfg.stall_model else None
    labelled = timeline
    timeline = split.timeline if split is not None else timeline
    # The passes do not depend on whether intervals are wanted: the model finally chosen
    # reuses the passes of the point fit that chose it.
    key = replace(cfg, intervals=True)
    if key not in found.passes:
        found.passes[key] = fit_passes(found, timeline, jc, jp, cfg)
    f, jc, jp, moved = found.passes[key]
    pl, theta, theta_cov, w, x, power = f.pl, f.theta, f.theta_cov, f.w, f.x, f.power
    rows, cols, cover = pl.rows, pl.cols, f.cover
    y = pl.target(theta)
    w0 = cfg.instant_window_s
    a, b = x * w[:, None], y * w
    # The bootstrap's block, also recorded by a fit that only chooses a setting: the choices
    # count their residuals' evidence in independent blocks of this length, as the final fit.
    block_s = (
        residual_block_s(rows.mid_s, b - a @ power, cfg.block_s)
        if cfg.block_from_residuals
        else cfg.block_s
    )
    if cfg.intervals:
        with stage("bootstrap"):
            m = pl.power_map
            boot, block = block_bootstrap(
                a if m is None else a @ m, b, rows.mid_s, block_s, cfg.n_boot, cfg.seed
            )
            boot = boot if m is None else boot @ m.T
    else:  # a fit that only chooses a setting: point estimates (intervals at their floor)
        boot, block = power[None, :], 0

    # What the bootstrap cannot see: the uncertainty of σ and of where the rows sit in time.
    # A point-only fit (one that only chooses a setting) has none.
    if cfg.intervals:
        with stage("sensor-model spread"):
            sens = sensitivities(pl, x, w, theta, *perturbations(f, jc, jp, cfg))
    else:
        sens = [np.zeros_like(power)]
    # One row per perturbation: how every power moves together. Phases that trade energy
    # under a perturbation (a grid shift moves joules from one neighbour to the next) then
    # cancel in a joint row's or a stalled phase's sum instead of adding in quadrature.
    sens_w = np.array(sens)
    sys_sd_w = np.sqrt(np.sum(np.square(sens_w), axis=0))

    notes = list(grid_notes)
    # The fit's lag is the nearest minimum of the residual; another lag may fit as well.
    prof = None
    if cfg.intervals and cfg.lag_profile:
        with stage("buffer lag profile"):
            prof, lag_rows, lag_note = lag_spread(pl, x, w, theta, theta_cov, power, cfg, block_s)
        if lag_rows:
            sens_w = np.vstack([sens_w, *lag_rows])
            notes.append(lag_note)

    # Steps in lockstep with every grid the rows sit on repeat the same few equations: the fit
    # then leans on details of the sensor model that the interval does not capture. Widen it
    # (a heuristic: by 0.5 / coverage, so × 2.5 when steps start in 4 of 20 parts of the cycle).
    n_instant = int(np.sum(rows.kind == INSTANT))
    if cfg.use_instant and "power" in grids and n_instant < 0.1 * jp.grid.n_updates:
        # A grid whose instants jitter by a large part of its period leaves few readings that
        # only one refresh can have produced (on the H200's run6, 30 ms over 366 s: 8 of
        # 3,553; 6–10 ms on run7 and run8). The fit then rests on the counter.
        notes.append(
            f"the power fields' refresh grid fits with {1e3 * jp.jitter_s:.0f} ms of jitter: "
            f"only {n_instant} of their {jp.grid.n_updates} updates could be placed on it, so "
            "the fit rests on the counter's rows (their refresh may wander over a long run)"
        )
    coverage = max(_refresh_coverage(timeline, g.grid) for g in (jc, jp))
    widen = max(1.0, 0.5 / max(coverage, 0.05))
    if coverage < 0.5:
        notes.append(
            f"step starts fall in only {100 * coverage:.0f}% of the sensors' refresh cycles: the "
            "steps run nearly in lockstep with the sensor, so short phases may stay unresolved; "
            f"intervals widened ×{widen:.1f}"
        )
    ceiling_w = _power_ceiling_w(dev, timeline, found.buffer)
    floor_w = _power_floor_w(dev, timeline)
    col_of = {timeline.names[j]: i for i, j in enumerate(cols)}
    # A phase fitted at an impossible power leaves its neighbours leaning on a freedom the
    # bootstrap cannot see: their intervals carry the move of pinning it within physical bounds.
    pinned_names: list[str] = []
    if cfg.intervals:
        idle_col = col_of.get(IDLE)
        skip = {idle_col} if idle_col is not None else set()
        with stage("unphysical phases pinned"):
            pin_rows, pin_cols = pinned_spread(a, b, power, ceiling_w, floor_w, skip)
        if pin_rows:
            sens_w = np.vstack([sens_w, *pin_rows])
            pinned_names = [timeline.names[cols[c]] for c in pin_cols]
            notes.append(
                "fitted at an unphysical power: "
                + ", ".join(pinned_names)
                + f"; every interval carries how the fit moves with each of them pinned between "
                f"{floor_w:.0f} W and the {ceiling_w:.0f} W ceiling"
            )
    terms = _terms(labelled, split, col_of, members)
    results, step_e, step_lo, step_hi, unphysical = _phase_results(
        reported,
        cols,
        col_of,
        terms,
        power,
        boot,
        sens_w,
        cover,
        cfg,
        device,
        widen,
        ceiling_w,
        members,
    )
    joint = _joint_results(
        reported, col_of, terms, power, boot, sens_w, cfg, device, widen, results, step_e, members
    )
    results = _demote_partners(results, joint, unphysical, reported.n_steps, device) + joint
    if ceiling_w is not None and cfg.bounded_splits:
        results = _bounded_splits(results, floor_w, ceiling_w, device)
    # Asked-for groups last: a row the user asks for changes no other row.
    results += _asked_groups(
        reported, col_of, terms, power, boot, sens_w, cfg, device, widen, step_e, members, joint
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
        "pinned_unphysical": pinned_names,
        "rows_per_label": {timeline.names[j]: int(cover[j]) for j in cols},
        "n_boot": cfg.n_boot,
        "block_rows": block,
        "block_s": block_s,
        "confidence": cfg.confidence,
        "instant_window_s": cfg.instant_window_s,
        "instant_kernel": [list(b) for b in cfg.instant_kernel],
        "refresh": {name: g.to_json() for name, g in grids.items()},
        **({"counter_scan": found.counter_scan.to_json()} if found.counter_scan else {}),
        "power_pieces": [
            {"t0_s": a_s, "t1_s": b_s, **g.to_json()} for a_s, b_s, g in found.pieces or ()
        ],
        "placement": {
            name: {"value": float(theta[i]), "sd": float(np.sqrt(theta_cov[i, i]))}
            for i, name in enumerate(PARAMS)
        },
        "relabelled_after_shift_s": moved,
        "instant_window_fitted_s": float(w0 + theta[4]),
        "instant_window_sd_s": float(np.sqrt(theta_cov[4, 4])),
        "power_gain": float(theta[5]),
        "buffer": None,
    }
    if np.any(rows.kind == BUFFER):
        diagnostics["buffer"] = {
            "n_rows": int((rows.kind == BUFFER).sum()),
            "weight": cfg.buffer_weight,
            "kernel": [list(b) for b in cfg.buffer_kernel],
            "window_s": cfg.buffer_window_s,
            "lag_s": cfg.buffer_lag_s,
            "lag_fitted_s": float(cfg.buffer_lag_s - theta[6]),
            "lag_sd_s": float(np.sqrt(theta_cov[6, 6])),
            "window_rel_sd": cfg.buffer_window_rel_sd,
            "scale_vs_counter": None if f.buffer_scale is None else vars(f.buffer_scale),
            "lag_profile": None if prof is None else prof.to_json(),
        }
        sc = f.buffer_scale
        notes.append(
            f"power buffer: {int((rows.kind == BUFFER).sum())} rows of NVML's ~20 ms samples, "
            f"lag {1e3 * (cfg.buffer_lag_s - theta[6]):.1f} ms; "
            + (
                "no counter to set its scale"
                if sc is None
                else f"its energy {sc.scale:.4f} × the counter's over {sc.seconds:.0f} s (±"
                f"{100 * sc.sd:.2f}%), put on the counter's scale"
            )
        )
    if pl.counter_delays != NO_DELAY:
        diagnostics["counter_kernel"] = {
            "tail_s": cfg.counter_tail_s,
            "fraction": cfg.counter_tail_fraction,
            "lag_s": cfg.counter_lag_s,
            "tail_rel_sd": cfg.counter_tail_rel_sd,
            "shift_prior_sd_s": float(f.prior_sd[0]),
        }
        notes.append(
            f"counter kernel: the energy the counter books trails the power drawn ("
            f"{100 * cfg.counter_tail_fraction:.0f}% by an exponential of τ "
            f"{1e3 * cfg.counter_tail_s:g} ms, after a lag of {1e3 * cfg.counter_lag_s:g} ms); "
            f"its grid shifted {1e3 * theta[0]:+.2f} ms (prior σ {1e3 * f.prior_sd[0]:.2f} ms)"
        )
    if members:
        bin_j: dict[str, float] = {}
        for b in expand(members, members):
            if b in col_of:
                idx, t_s = terms([b])
                bin_j[b] = float(power[idx] @ t_s / reported.n_steps)
        diagnostics["bins"] = {"bin_s": cfg.bin_s, "members": members, "energy_per_step_j": bin_j}
        notes.append(
            "bins: "
            + ", ".join(f"{n} in {len(b)}" for n, b in members.items())
            + f" bins of ~{1e3 * cfg.bin_s:g} ms, each with its own power (its energy is their sum)"
        )
    diagnostics["step_start_refresh_coverage"] = coverage
    diagnostics["interval_widened_by"] = widen
    if split is not None:
        diagnostics["stall"] = {
            "power_w": float(power[col_of[STALL]]) if STALL in col_of else None,
            "quantile": cfg.stall_quantile,
            "work_per_step_s": split.work_per_step_s,
            "stall_s": split.stall_s,
        }
        notes.append(
            "stall model: each phase is its work (its time in its shortest steps) at its own "
            "power plus the rest of its time at one shared stall power"
            + (f" ({power[col_of[STALL]]:.0f} W)" if STALL in col_of else "")
        )
    return DeviceAttribution(
        device=device,
        method=METHOD,
        phases=results,
        n_steps=reported.n_steps,
        warmup_steps=len(reported.warmup_steps),
        step_time_s=reported.step_time_s / reported.n_steps,
        step_energy_j=step_e,
        step_energy_lo_j=step_lo,
        step_energy_hi_j=step_hi,
        diagnostics=diagnostics,
        notes=notes,
    )


def _asked_groups(
    timeline, col_of, terms, power, boot, sens_w, cfg, device, widen, step_e, members, joint
):
    """The rows of the groups `cfg.joint` asks for (`attribution.groups`), from this fit."""
    from jouleprof.attribution.groups import group_rows, parse_groups
    from jouleprof.attribution.regression_results import _fitted

    groups = parse_groups(cfg.joint)
    if not groups:
        return []

    def interval(names):
        idx, t = terms(names)
        return _energy_interval(power, boot, sens_w, idx, t, cfg, widen)

    return group_rows(
        groups,
        timeline.order,
        timeline.time_s,
        lambda p: _fitted(p, col_of, members),
        interval,
        timeline.n_steps,
        step_e,
        device,
        METHOD,
        have=[r.phase for r in joint],
        confidence=cfg.confidence,
    )


__all__ = ["METHOD", "RegressionConfig", "attribute_regression"]
