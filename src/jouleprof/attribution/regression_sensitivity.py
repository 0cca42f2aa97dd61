"""The sensor model's part of the regression's interval: how the fitted powers move when
each assumption of the sensor model moves by its own uncertainty (pure functions).

`perturbations` lists them (σ of each refresh grid, the placement's posterior along its
eigenvectors, the power buffer's window and scale, the counter tail's length); `sensitivities`
refits the powers at + and − each one and returns half the difference. The regression adds
these, per phase, to the bootstrap's spread.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from jouleprof.attribution.grid import JitterGrid
from jouleprof.attribution.placement import PARAMS, Placement
from jouleprof.attribution.regression_config import RegressionConfig
from jouleprof.attribution.regression_fit import Fit, counter_delays_of
from jouleprof.attribution.rows import BUFFER, COUNTER


def perturbations(f: Fit, jc: JitterGrid, jp: JitterGrid, cfg: RegressionConfig):
    """The sensor model's perturbations whose effect on the powers the intervals carry: each
    (d_sigma, d_theta, d_stretch, d_scale) with the pair of placements (+, −) it is fitted on.
    σ of each grid, the placement's posterior (along its eigenvectors), the buffer window's
    length and scale, and the counter tail's length where one is set."""
    pl, theta_cov, rows = f.pl, f.theta_cov, f.pl.rows
    evals, evecs = np.linalg.eigh(theta_cov)
    d_sig_c = np.array([jc.jitter_se_s, 0.0, 0.0, 0.0])
    d_sig_p = np.array([0.0, jp.jitter_se_s, jp.jitter_se_s, 0.0])
    no_theta = np.zeros(len(PARAMS))
    perturb = [(d_sig_c, no_theta, 0.0, 0.0), (d_sig_p, no_theta, 0.0, 0.0)]
    perturb += [
        (np.zeros(4), np.sqrt(max(ev, 0.0)) * evecs[:, i], 0.0, 0.0) for i, ev in enumerate(evals)
    ]
    lag = PARAMS.index("buffer_shift_s")
    lag_extra_var = cfg.buffer_lag_floor_sd_s**2 - theta_cov[lag, lag]
    if np.any(rows.kind == BUFFER) and lag_extra_var > 0:
        # The lag's posterior understates what the lag is worth (it absorbs the loop's misfit):
        # carry it at least at the floor's σ, beyond what the posterior's eigenvectors carry.
        d_lag = np.zeros(len(PARAMS))
        d_lag[lag] = np.sqrt(lag_extra_var)
        perturb.append((np.zeros(4), d_lag, 0.0, 0.0))
    if np.any(rows.kind == BUFFER) and cfg.buffer_window_rel_sd > 0:
        # The buffer's window was measured on another load (its shape and length trade off
        # there within a few percent of residual): what would a longer or shorter one change?
        perturb.append((np.zeros(4), no_theta, cfg.buffer_window_rel_sd, 0.0))
    if f.buffer_scale is not None and f.buffer_scale.sd > 0:
        # And its scale, set against the counter block by block.
        perturb.append((np.zeros(4), no_theta, 0.0, f.buffer_scale.sd / f.buffer_scale.scale))
    pls = [(pl, pl)] * len(perturb)
    if cfg.counter_tail_s > 0 and cfg.counter_tail_fraction > 0 and cfg.counter_tail_rel_sd > 0:
        # The tail was measured on another load: what would a longer or shorter one change?
        taus = cfg.counter_tail_s * (1.0 + np.array([1.0, -1.0]) * cfg.counter_tail_rel_sd)
        pls.append(
            tuple(
                replace(pl, counter_delays=counter_delays_of(replace(cfg, counter_tail_s=tau)))
                for tau in taus
            )
        )
        perturb.append((np.zeros(4), no_theta, 0.0, 0.0))
    return perturb, pls


def sensitivities(pl: Placement, x, w, theta, perturb, pls) -> list[np.ndarray]:
    """How the powers move under each perturbation of the sensor model (`perturbations`):
    half the difference of the fits at + and −. Only the rows a perturbation moves are designed
    again; `x` (the design at `theta`) holds the rest."""
    rows, sigma = pl.rows, pl.sigma_s
    sens = []
    for (d_sigma, d_theta, d_stretch, d_scale), pl_pm in zip(perturb, pls, strict=True):
        fits = []
        for sign, pl_s in zip((1.0, -1.0), pl_pm, strict=True):
            th = theta + sign * d_theta
            m = pl.moved_rows(sign * d_theta, sign * d_sigma, 1.0 + sign * d_stretch)
            if pl_s is not pl:
                m |= rows.kind == COUNTER  # another counter kernel
            xs = x.copy()
            if m.any():
                xs[m] = pl_s.design(th, sigma + sign * d_sigma, 1.0 + sign * d_stretch, only=m)
            fits.append(pl.fit_powers(xs, pl.target(th, 1.0 + sign * d_scale), w))
        sens.append(0.5 * (fits[0] - fits[1]))
    return sens
