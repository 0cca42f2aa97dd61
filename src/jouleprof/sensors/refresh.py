"""Detect when a sensor's readings update, from recorded samples alone (pure functions).

NVML power fields and the energy counter update at refresh instants about 100 ms apart; a read
between two refreshes returns the older value. Knowing those instants matters: the counter value
read at time r belongs to the last refresh before r, not to r. Reads that see a value change
bracket a refresh instant; fitting a regular grid (offset + k × period) through the brackets of
a whole run places every refresh far more precisely than any one bracket.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

# Signals tried in order to locate refreshes: the ones that change at nearly every refresh.
REFRESH_SIGNALS: tuple[str, ...] = ("power_instant_w", "power_w", "energy_j")
AMBIGUITY_S = 0.004
"""Least margin around each refresh instant inside which a counter read is not placed: the H200
counter's refreshes jitter by ~1.7 ms, and a short run cannot estimate that jitter itself."""


@dataclass(frozen=True)
class RefreshEstimate:
    """A sensor's update grid: refresh k happens at offset_s + k × period_s (± jitter_s)."""

    signal: str
    period_s: float
    offset_s: float
    jitter_s: float
    """Residual standard deviation of the detected update brackets around the grid."""
    n_updates: int
    median_read_gap_s: float
    """Median time between reads of the signal: the resolution each bracket had."""
    method: str
    """"grid" (fitted through update brackets), "counter-gaps (...)" (fitted through which read
    gaps saw a change), or "median" (grid fit failed: period from median gaps)."""

    def grid_s(self, t0_s: float, t1_s: float) -> np.ndarray:
        """Grid instants inside [t0_s, t1_s]."""
        k0 = int(np.ceil((t0_s - self.offset_s) / self.period_s))
        k1 = int(np.floor((t1_s - self.offset_s) / self.period_s))
        return self.offset_s + self.period_s * np.arange(k0, k1 + 1)

    def to_json(self) -> dict[str, object]:
        return {
            "signal": self.signal,
            "period_s": self.period_s,
            "offset_s": self.offset_s,
            "jitter_s": self.jitter_s,
            "n_updates": self.n_updates,
            "median_read_gap_s": self.median_read_gap_s,
            "method": self.method,
        }


def update_brackets(t_s: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For each read that returned a new value: (time of the previous read, time of this read).

    NaN values (not read) are skipped. The update happened inside each bracket.
    """
    t_s = np.asarray(t_s, dtype=float)
    values = np.asarray(values, dtype=float)
    ok = ~np.isnan(values)
    t, v = t_s[ok], values[ok]
    if len(t) < 2:
        return np.empty(0), np.empty(0)
    changed = np.flatnonzero(v[1:] != v[:-1]) + 1
    return t[changed - 1], t[changed]


def detect_refresh(
    t_s: np.ndarray, values: np.ndarray, signal: str = "?", min_updates: int = 8
) -> RefreshEstimate | None:
    """Fit the update grid of one signal of one device; None if too few updates were seen.

    Needs reads at least twice per refresh period; coarser reads alias and are refused
    (returns None) because no grid can be placed from them.
    """
    lo, hi = update_brackets(t_s, values)
    if len(lo) < min_updates:
        return None
    t_valid = np.asarray(t_s, dtype=float)[~np.isnan(np.asarray(values, dtype=float))]
    read_gap_s = float(np.median(np.diff(t_valid)))
    mid = 0.5 * (lo + hi)
    gaps = np.diff(mid)
    # Most updates follow the previous one by one period, but a repeated value hides an update
    # (a gap of 2, 3, ... periods). Start from a low quantile, then count each gap's periods.
    period0 = float(np.quantile(gaps, 0.25))
    for _ in range(3):
        n = np.round(gaps / period0)
        ok = n >= 1
        if not ok.any():
            break
        period0 = float(gaps[ok].sum() / n[ok].sum())
    if period0 < 2 * read_gap_s:
        # Brackets as wide as the period: the signal was read too rarely to see its refreshes.
        return None
    period0 = _refine_period(mid, period0)
    k = np.round((mid - mid[0]) / period0)
    # Least squares of mid = offset + k * period, then one pass of outlier rejection.
    for _ in range(3):
        A = np.column_stack([np.ones_like(k), k])
        (offset, period), *_ = np.linalg.lstsq(A, mid, rcond=None)
        resid = mid - (offset + period * k)
        keep = np.abs(resid) < max(4 * np.std(resid), read_gap_s)
        if keep.all():
            break
        mid, k = mid[keep], k[keep]
    if not (0.5 * period0 < period < 1.5 * period0) or len(mid) < min_updates:
        return RefreshEstimate(
            signal, period0, float(mid[0] % period0), float("nan"), len(lo), read_gap_s, "median"
        )
    # Brackets are uniform over their width: the midpoint error alone has std gap/sqrt(12).
    jitter = float(np.sqrt(max(np.var(resid) - read_gap_s**2 / 12.0, 0.0)))
    return RefreshEstimate(
        signal, float(period), float(offset % period), jitter, len(lo), read_gap_s, "grid"
    )


def _refine_period(mid_s: np.ndarray, period0_s: float) -> float:
    """The period near `period0_s` at which the update times line up best (phase coherence).

    A period off by a tiny fraction drifts by whole periods over a long run, so rounding
    (t - t0) / period would mislabel refreshes; maximizing the resultant length of the phases
    exp(2πi t / T) over a fine grid of T finds the period that keeps every update in phase.
    """
    span_s = float(mid_s[-1] - mid_s[0])
    if span_s <= 0:
        return period0_s
    # Resolution of the peak is about T²/span; search ±2 % in steps a tenth of that, coarse to fine.
    center, half = period0_s, 0.02 * period0_s
    for _ in range(4):
        grid = np.linspace(center - half, center + half, 201)
        phase = np.exp(2j * np.pi * mid_s[None, :] / grid[:, None])
        coherence = np.abs(phase.mean(axis=1))
        center = float(grid[int(np.argmax(coherence))])
        half = max(half / 20.0, 0.1 * period0_s**2 / span_s)
        if half <= 0.1 * period0_s**2 / span_s:
            grid = np.linspace(center - half, center + half, 201)
            phase = np.exp(2j * np.pi * mid_s[None, :] / grid[:, None])
            return float(grid[int(np.argmax(np.abs(phase.mean(axis=1))))])
    return center


def _inconsistency(
    t0: np.ndarray, t1: np.ndarray, changed: np.ndarray, period: float, offsets: np.ndarray
) -> np.ndarray:
    """For each candidate offset: how many read gaps disagree with a grid at that offset.

    A gap (t0, t1] that saw the value change must hold a grid instant; one that did not, none.

    `offsets` ascending within [0, period): each read's grid index floor((t - offset) / period)
    is then, offset by offset, its value at the first offset or one less from some offset on
    (rounding keeps it non-increasing), so each gap's verdict changes at most twice along the
    offsets. Those offsets are found by bisection with the same floating-point expression, and
    the counts summed from them: the same integers as the dense (offsets × gaps) table
    (`_inconsistency_dense`, used where the premise does not hold) in O(gaps × log offsets).
    """
    offsets = np.asarray(offsets, dtype=float)
    m = len(offsets)
    if m < 2 or len(t0) == 0 or np.any(np.diff(offsets) <= 0):
        return _inconsistency_dense(t0, t1, changed, period, offsets)

    def index(t, i):
        return np.floor((t - offsets[i]) / period)

    def first_drop(t):
        """Each read's grid index at the first offset, and the first offset below it (m: none)."""
        k = index(t, 0)
        lo, hi = np.zeros(len(t), dtype=np.int64), np.full(len(t), m, dtype=np.int64)
        while np.any(hi - lo > 1):
            mid = (lo + hi) // 2
            same = index(t, np.minimum(mid, m - 1)) == k
            lo, hi = np.where(same, mid, lo), np.where(same, hi, mid)
        return k, hi, index(t, m - 1) >= k - 1

    ka, ja, ok_a = first_drop(t1)
    kb, jb, ok_b = first_drop(t0)
    if not (np.all(ok_a) and np.all(ok_b)):
        return _inconsistency_dense(t0, t1, changed, period, offsets)
    d = ka - kb  # instants in the gap at the first offsets
    outside = (d > 0) != changed  # before the first drop and after the second
    middle = (d + (jb < ja) - (ja < jb) > 0) != changed  # between the two drops
    lo, hi = np.minimum(ja, jb), np.maximum(ja, jb)
    step = middle.astype(np.int64) - outside.astype(np.int64)
    diff = np.bincount(lo, step, m + 1) - np.bincount(hi, step, m + 1)
    return int(np.sum(outside)) + np.cumsum(diff[:m]).round().astype(np.int64)


def _inconsistency_dense(t0, t1, changed, period: float, offsets: np.ndarray) -> np.ndarray:
    """`_inconsistency` from the whole (offsets × gaps) table of grid indices."""
    a = np.floor((t1[None, :] - offsets[:, None]) / period)
    b = np.floor((t0[None, :] - offsets[:, None]) / period)
    holds = (a - b) > 0
    return np.sum(holds != changed[None, :], axis=1)


def _best_offset(t0, t1, changed, period: float, resolution_s: float) -> tuple[float, int]:
    offsets = np.arange(0.0, period, resolution_s)
    bad = _inconsistency(t0, t1, changed, period, offsets)
    # Several neighbouring offsets can tie: take the middle of the best run (circularly).
    best = np.flatnonzero(bad == bad.min())
    ang = np.angle(np.mean(np.exp(2j * np.pi * offsets[best] / period)))
    return float((ang / (2 * np.pi) * period) % period), int(bad.min())


def _chunk_offsets(t0, t1, changed, period: float, chunk_s: float, min_gaps: int):
    """Offset of the grid (at `period`) in each chunk of the run that holds enough gaps."""
    edges = np.arange(t0[0], t1[-1] + chunk_s, chunk_s)
    mids, phis, weights = [], [], []
    for c0, c1 in zip(edges[:-1], edges[1:], strict=False):
        sel = (t0 >= c0) & (t1 < c1)
        if sel.sum() >= min_gaps:
            phi, _ = _best_offset(t0[sel], t1[sel], changed[sel], period, period / 200)
            mids.append(float(np.mean(t0[sel])))
            phis.append(phi)
            weights.append(float(sel.sum()))
    return np.asarray(mids), np.asarray(phis), np.asarray(weights)


def _joint_scan(t0, t1, changed, nominal_s: float, duration_s: float) -> float:
    """Period by a joint scan of period and offset, coarse to fine: ±500 ppm around nominal
    first (NVML's counter period was within 200 ppm of 100 ms on an H200), then ever closer,
    until a step slips by less than 0.25 ms over the run. Among equally good periods the one
    nearest nominal wins (few gaps cannot tell them apart)."""
    center, half = nominal_s, 5e-4 * nominal_s
    finest = 0.25e-3 * nominal_s / max(duration_s, nominal_s)
    while True:
        periods = center + np.linspace(-half, half, 41)
        scores = np.array([_best_offset(t0, t1, changed, p, p / 100)[1] for p in periods])
        best = np.flatnonzero(scores == scores.min())
        center = float(periods[best[np.argmin(np.abs(periods[best] - nominal_s))]])
        step = 2 * half / 40
        if step <= finest:
            return center
        half = 2 * step


def _counter_period(t0, t1, changed, nominal_s: float, chunk_s: float) -> float:
    """The counter's true period, near `nominal_s`, from the informative read gaps.

    Where several stretches of the run hold enough gaps (the sampler's dense start and its
    periodic bursts), the grid's offset is found in each at the nominal period, and its drift
    from stretch to stretch is the period's error. Otherwise: a joint scan.
    """
    duration = float(t1[-1] - t0[0])
    candidates = [_joint_scan(t0, t1, changed, nominal_s, duration)]
    period = nominal_s
    for _ in range(3):
        mids, phis, w = _chunk_offsets(t0, t1, changed, period, chunk_s, min_gaps=30)
        if len(phis) < 3:
            break
        unwrapped = np.unwrap(phis / period * 2 * np.pi) / (2 * np.pi) * period
        slope = float(np.polyfit(mids, unwrapped, 1, w=np.sqrt(w))[0])
        if abs(slope) > 5e-4:  # beyond any NVML counter seen: a bad unwrap, not a drift
            break
        period *= 1.0 + slope
        if abs(slope) < 1e-7:
            candidates.append(period)
            break
    # Keep whichever explains more gaps (the chunk drift fit can unwrap wrongly on noisy
    # stretches; the joint scan cannot see drift finer than its ties); ties: nearest nominal.
    scores = [_best_offset(t0, t1, changed, p, p / 200)[1] for p in candidates]
    best = [p for p, sc in zip(candidates, scores, strict=True) if sc == min(scores)]
    return min(best, key=lambda p: abs(p - nominal_s))


def detect_counter_grid(
    t_s: np.ndarray,
    energy_j: np.ndarray,
    nominal_period_s: float = 0.1,
    chunk_s: float = 10.0,
    min_gaps: int = 8,
) -> RefreshEstimate | None:
    """The counter's refresh grid from which consecutive reads saw it move and which did not.

    Works with reads about one period apart (what the sampler does to spare the ~5 ms counter
    read), where update brackets are as wide as the period and their midpoints say little:
    every pair of consecutive reads less than 1.5 periods apart says whether a refresh fell
    between them (longer gaps always hold one and say nothing). The offset is found per stretch
    of the run; its drift across stretches gives the true period (NVML's is 100 ms to within
    ~0.02 %, enough to slip by whole milliseconds over minutes).
    """
    t_s = np.asarray(t_s, dtype=float)
    e = np.asarray(energy_j, dtype=float)
    ok = ~np.isnan(e)
    t, e = t_s[ok], e[ok]
    if len(t) < 2:
        return None
    t0, t1, changed = t[:-1], t[1:], e[1:] != e[:-1]
    informative = (t1 - t0) < 1.5 * nominal_period_s
    t0, t1, changed = t0[informative], t1[informative], changed[informative]
    if len(t0) < min_gaps or changed.all():
        return None  # too few short gaps, or every one holds a refresh: no phase information
    period = _counter_period(t0, t1, changed, nominal_period_s, chunk_s)
    offset, n_bad = _best_offset(t0, t1, changed, period, period / 1000)
    return RefreshEstimate(
        "energy_j",
        float(period),
        float(offset),
        float("nan"),  # the gap scan cannot tell the jitter: `refresh_fit` estimates it
        int(changed.sum()),
        float(np.median(t1 - t0)),
        f"counter-gaps ({n_bad} of {len(changed)} gaps disagree)",
    )


def detect_device_refresh(samples, device: str, signal: str = "energy_j") -> RefreshEstimate | None:
    """The refresh grid of one signal of one device in a samples DataFrame.

    For the counter ("energy_j", the default) the grid comes from the counter's own reads: on
    an H200 its refreshes do not line up with the power fields' (benchmarks/results/measure_core).
    Dense reads (under half a period apart) are fitted through their update brackets, sparse ones
    through which gaps saw a change. Where the counter gives no grid, the power fields' grid is
    returned as an approximation (its `signal` says so). For a power signal, that signal's grid.
    """
    d = samples[samples["device"] == device]
    t = d["t_s"].to_numpy()
    order = [signal] if signal != "energy_j" else ["energy_j", *REFRESH_SIGNALS[:2]]
    for sig in order:
        if sig not in d.columns or d[sig].notna().sum() < 10:
            continue
        v = d[sig].to_numpy(dtype=float)
        est = detect_refresh(t, v, sig)
        if est is None and sig == "energy_j":
            est = detect_counter_grid(t, v)
            if est is not None:
                # The gap scan places the grid; the jitter (which sets how close to a refresh
                # a read can be placed) comes from the likelihood of every gap's outcome.
                from jouleprof.sensors.refresh_fit import fit_jitter_grid

                fit = fit_jitter_grid(t, v, est)
                if fit.method == "mle":
                    est = fit.grid
        if est is not None:
            return est
    return None


def counter_points(
    t_s: np.ndarray, energy_j: np.ndarray, grid: RefreshEstimate | None
) -> tuple[np.ndarray, np.ndarray]:
    """The counter as (refresh instant, cumulative joules) points, one per distinct value.

    Each value is placed at the last grid instant before the read that first returned it; with no
    grid, at that read's time (late by up to one refresh period: callers must widen their bounds).
    """
    t_s = np.asarray(t_s, dtype=float)
    e = np.asarray(energy_j, dtype=float)
    ok = ~np.isnan(e)
    t, e = t_s[ok], e[ok]
    if len(t) == 0:
        return t, e
    if grid is not None:
        # A read within the grid's jitter of a refresh instant may hold the value of either
        # side of it: such reads cannot be placed, so they are left out.
        margin = 3.0 * (grid.jitter_s if np.isfinite(grid.jitter_s) else 0.0) + AMBIGUITY_S
        phase = (t - grid.offset_s) % grid.period_s
        clear = (phase > margin) & (phase < grid.period_s - margin)
        clear[0] = clear[-1] = True  # keep the run's edges; their bound widens instead
        t, e = t[clear], e[clear]
    first = np.concatenate([[True], e[1:] != e[:-1]])
    t, e = t[first], e[first]
    if grid is None:
        return t, e
    k = np.floor((t - grid.offset_s) / grid.period_s)
    tau = grid.offset_s + k * grid.period_s
    # Two distinct values cannot share a refresh: if they do (a read right at a refresh
    # instant, within jitter), the earlier value belongs to the refresh before.
    for i in range(len(tau) - 1, 0, -1):
        if tau[i - 1] >= tau[i]:
            tau[i - 1] = tau[i] - grid.period_s
    return tau, e
