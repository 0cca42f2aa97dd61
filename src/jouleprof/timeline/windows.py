"""The energy of a window of time [t0, t1], from each signal, with honest bounds.

Three estimates, each labelled with its signal:

- counter: the cumulative counter interpolated at both edges. The counter only moves at refresh
  instants and never goes down, so C(t0) is bracketed by the values of the refreshes on either
  side of t0: those brackets give a bound that holds whatever the power did inside the edge
  refresh periods. The bound's width is about two refresh periods of energy, so it shrinks
  relative to the window as the window grows.
- power_instant / power_avg: the trapezoid of the power readings, each placed at the middle of the
  window it averages (the instant field averages ~25 ms before its refresh, the default reading a
  1 s running average). Their uncertainty combines the power's range over one refresh period at
  the edges and the spread of the readings over the window.

Windows shorter than `SHORT_WINDOW_PERIODS` refresh periods are flagged.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from jouleprof.sensors.refresh import RefreshEstimate, counter_points

SHORT_WINDOW_PERIODS = 5
DEFAULT_REFRESH_S = 0.1
INSTANT_WINDOW_S = 0.025  # shared/FACTS.md: the instant field averages ~25 ms of each 100 ms
AVERAGE_WINDOW_S = 1.0

SIGNAL_COLUMNS = {"counter": "energy_j", "power_instant": "power_instant_w", "power_avg": "power_w"}


@dataclass(frozen=True)
class WindowEnergy:
    """Energy of one window from one signal. energy_j None: unavailable, and `reason` says why."""

    signal: str
    t0_s: float
    t1_s: float
    energy_j: float | None
    lo_j: float | None = None
    hi_j: float | None = None
    short: bool = False
    """The window is shorter than SHORT_WINDOW_PERIODS refresh periods."""
    n_points: int = 0
    reason: str | None = None

    @property
    def duration_s(self) -> float:
        return self.t1_s - self.t0_s

    @property
    def mean_power_w(self) -> float | None:
        if self.energy_j is None or self.duration_s <= 0:
            return None
        return self.energy_j / self.duration_s

    @property
    def rel_halfwidth(self) -> float | None:
        if self.energy_j is None or self.lo_j is None or self.hi_j is None or self.energy_j == 0:
            return None
        return 0.5 * (self.hi_j - self.lo_j) / abs(self.energy_j)


def _unavailable(signal: str, t0: float, t1: float, reason: str) -> WindowEnergy:
    return WindowEnergy(signal, t0, t1, None, reason=reason)


def counter_window(
    t_s: np.ndarray,
    energy_j: np.ndarray,
    t0_s: float,
    t1_s: float,
    refresh: RefreshEstimate | None = None,
    nominal_refresh_s: float = DEFAULT_REFRESH_S,
) -> WindowEnergy:
    """Energy of [t0_s, t1_s] from cumulative counter reads (read at `t_s`, values `energy_j`)."""
    tau, c = counter_points(t_s, energy_j, refresh)
    period = refresh.period_s if refresh is not None else nominal_refresh_s
    short = (t1_s - t0_s) < SHORT_WINDOW_PERIODS * period
    if len(tau) < 2:
        return _unavailable("counter", t0_s, t1_s, "fewer than two counter readings")
    if np.any(np.diff(c) < 0):
        return _unavailable("counter", t0_s, t1_s, "the counter went backwards (reset?)")
    if refresh is None:
        # Each value may have been taken up to one period before it was read.
        tau_lo, tau_hi = tau - period, tau
    else:
        slack = 3 * refresh.jitter_s if np.isfinite(refresh.jitter_s) else 0.0
        tau_lo, tau_hi = tau - slack, tau + slack
    if t0_s < tau_hi[0] or t1_s > tau_lo[-1]:
        return _unavailable(
            "counter",
            t0_s,
            t1_s,
            f"window [{t0_s:.3f}, {t1_s:.3f}] s reaches outside the counter's readings "
            f"[{tau_hi[0]:.3f}, {tau_lo[-1]:.3f}] s",
        )
    tau_mid = 0.5 * (tau_lo + tau_hi)
    c0, c1 = np.interp([t0_s, t1_s], tau_mid, c)
    # C(t) ≥ C_j where refresh j surely came before t; C(t) ≤ C_j where it surely came after.
    lower_at = lambda t: c[np.searchsorted(tau_hi, t, side="right") - 1]  # noqa: E731
    upper_at = lambda t: c[min(np.searchsorted(tau_lo, t, side="left"), len(c) - 1)]  # noqa: E731
    lo = float(lower_at(t1_s) - upper_at(t0_s))
    hi = float(upper_at(t1_s) - lower_at(t0_s))
    n = int(np.sum((tau_mid >= t0_s) & (tau_mid <= t1_s)))
    return WindowEnergy(
        "counter", t0_s, t1_s, float(c1 - c0), max(lo, 0.0), hi, short=short, n_points=n
    )


def power_window(
    t_s: np.ndarray,
    power_w: np.ndarray,
    t0_s: float,
    t1_s: float,
    signal: str,
    averaging_s: float,
    refresh: RefreshEstimate | None = None,
    nominal_refresh_s: float = DEFAULT_REFRESH_S,
) -> WindowEnergy:
    """Energy of [t0_s, t1_s] as the trapezoid of power readings averaging `averaging_s` each."""
    t_s = np.asarray(t_s, dtype=float)
    p = np.asarray(power_w, dtype=float)
    ok = ~np.isnan(p)
    t, p = t_s[ok], p[ok]
    period = refresh.period_s if refresh is not None else nominal_refresh_s
    short = (t1_s - t0_s) < SHORT_WINDOW_PERIODS * max(period, averaging_s)
    if len(t) < 2:
        return _unavailable(signal, t0_s, t1_s, f"fewer than two {signal} readings")
    if refresh is not None:
        # One point per refresh: the value and the refresh instant it was computed at.
        first = np.concatenate([[True], p[1:] != p[:-1]])
        t, p = t[first], p[first]
        k = np.floor((t - refresh.offset_s) / refresh.period_s)
        t = refresh.offset_s + k * refresh.period_s
    else:
        t = t - 0.5 * period  # a read reflects a refresh some time in the last period
    t = t - 0.5 * averaging_s  # the reading is the mean over the window before its refresh
    reach = period + 0.5 * averaging_s  # how far past the readings the edges may be held flat
    if t0_s < t[0] - reach or t1_s > t[-1] + reach:
        return _unavailable(
            signal,
            t0_s,
            t1_s,
            f"window [{t0_s:.3f}, {t1_s:.3f}] s reaches outside the {signal} readings "
            f"[{t[0]:.3f}, {t[-1]:.3f}] s",
        )
    inside = (t > t0_s) & (t < t1_s)
    grid = np.concatenate([[t0_s], t[inside], [t1_s]])
    pw = np.interp(grid, t, p)
    energy = float(np.sum(0.5 * (pw[1:] + pw[:-1]) * np.diff(grid)))
    near = (t >= t0_s - period) & (t <= t1_s + period)
    pn = p[near] if near.sum() >= 2 else pw
    duration = t1_s - t0_s
    edge = float(np.ptp(pn)) * period  # a refresh period's worth of unknown power at each edge
    spread = 2.0 * float(np.std(pn)) * duration / np.sqrt(len(pn))  # ~95 % on the mean power
    # A reading sees only `averaging_s` of each period: inside a window shorter than a few
    # periods most of the time was never observed at all.
    # A running average longer than the window smears the window into its neighbourhood.
    if averaging_s >= duration:
        unseen = 0.5 * float(np.mean(pn)) * duration
    elif short:
        unseen = float(np.mean(pn)) * min(duration, period) * max(1 - averaging_s / period, 0.0)
    else:
        unseen = 0.0
    half = edge + spread + max(unseen, 0.0)
    return WindowEnergy(
        signal, t0_s, t1_s, energy, energy - half, energy + half, short=short, n_points=len(pn)
    )


def signal_grids(samples, device: str) -> dict[str, RefreshEstimate | None]:
    """The refresh grid of each energy signal of `device`, keyed by samples.csv column.

    Detect once and pass to `window_energies(..., grids=)` when measuring many windows.
    """
    from jouleprof.sensors.refresh import detect_device_refresh

    d = samples[samples["device"] == device]
    out: dict[str, RefreshEstimate | None] = {}
    for col in SIGNAL_COLUMNS.values():
        has = col in d.columns and d[col].notna().any()
        out[col] = detect_device_refresh(d, device, col) if has else None
    return out


def window_energies(
    samples,
    device: str,
    t0_s: float,
    t1_s: float,
    refresh: RefreshEstimate | None = None,
    grids: dict[str, RefreshEstimate | None] | None = None,
) -> dict[str, WindowEnergy]:
    """Energy of [t0_s, t1_s] on `device` from every signal recorded in `samples` (a DataFrame).

    Each signal is placed on its own refresh grid (the counter and the power fields do not tick
    together on an H200): `grids` from `signal_grids`, detected here when not given. `refresh`,
    if given, is the counter's grid and wins over grids["energy_j"]. A grid of another signal is
    never used for the counter.
    """
    if t1_s < t0_s:
        raise ValueError(f"window ends before it starts: [{t0_s}, {t1_s}]")
    if grids is None:
        grids = signal_grids(samples, device)
    d = samples[samples["device"] == device]
    t = d["t_s"].to_numpy(dtype=float)
    out: dict[str, WindowEnergy] = {}
    for name, col in SIGNAL_COLUMNS.items():
        if col not in d.columns or d[col].notna().sum() == 0:
            out[name] = _unavailable(name, t0_s, t1_s, f"no {col} readings for {device}")
            continue
        v = d[col].to_numpy(dtype=float)
        grid = refresh if name == "counter" and refresh is not None else grids.get(col)
        if name == "counter":
            grid = grid if grid is not None and grid.signal == "energy_j" else None
            out[name] = counter_window(t, v, t0_s, t1_s, grid)
        else:
            avg = INSTANT_WINDOW_S if name == "power_instant" else AVERAGE_WINDOW_S
            out[name] = power_window(t, v, t0_s, t1_s, name, avg, grid)
    return out
