"""Sensor readings as equations: one row per interval of time whose mean power is known.

- counter rows: between two consecutive counter values the device drew exactly their
  difference. Each value is placed on the counter's own refresh grid (`counter_points`): the
  value read at time r belongs to the last refresh before r.
- buffer rows: NVML's power-sample buffer (power_buffer.csv, one sample every ~20 ms, each
  stamped by the driver) weighs the power over a short window before its stamp, less a lag
  (`buffer_rows`; the window, lag and shape measured by benchmarks/buffer_window.py). Its
  stamps need no refresh grid: each sample is one row where the stamp puts it.
- power rows: a power reading is the mean power over the window before the refresh that
  produced it (the instant field ~25 ms, the default field 1 s). A reading is labelled with
  the one instant of the power fields' grid inside its update bracket (the two reads between
  which the value changed, widened by 3σ of the grid's jitter); readings whose bracket holds
  no single grid instant (a gap in the reads) are dropped rather than guessed. The refresh is
  then placed at the mean of the grid's N(instant, jitter²) cut to the bracket, with that cut
  distribution's σ as the row's own uncertainty (`bracket_posterior`): on the H200 the power
  fields' grid jitters by 3–15 ms, and 20 ms reads bracket each refresh more tightly.

The true refresh instants jitter around the grid. `jitter_variance_w2` gives, for each row, how
much that jitter can move its mean power given the phases' powers: rows whose edges sit on a
large power step are noisy, rows inside one phase are not.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.special import ndtr

from jouleprof.attribution.common import Timeline
from jouleprof.errors import AttributionError
from jouleprof.sensors.refresh import RefreshEstimate, counter_points

COUNTER, INSTANT, AVERAGE, BUFFER = 0, 1, 2, 3
KIND_NAMES = ("counter", "power_instant", "power_avg", "power_buffer")


@dataclass
class SensorRows:
    """One row per sensor interval: [t0_s, t1_s] drew mean power `power_w`."""

    t0_s: np.ndarray
    t1_s: np.ndarray
    power_w: np.ndarray
    kind: np.ndarray
    """COUNTER, INSTANT, AVERAGE or BUFFER."""
    weight: np.ndarray
    """Square-root weight of the row in the least squares."""
    sigma_s: np.ndarray | None = None
    """Each row's own uncertainty (σ, s) of where its refresh fell, where the readings say
    more than its grid's jitter (NaN: the grid's jitter applies)."""

    def __len__(self) -> int:
        return len(self.t0_s)

    @property
    def duration_s(self) -> np.ndarray:
        return self.t1_s - self.t0_s

    @property
    def mid_s(self) -> np.ndarray:
        return 0.5 * (self.t0_s + self.t1_s)

    def select(self, keep: np.ndarray) -> SensorRows:
        return SensorRows(
            *(a[keep] for a in (self.t0_s, self.t1_s, self.power_w, self.kind, self.weight)),
            None if self.sigma_s is None else self.sigma_s[keep],
        )

    def row_sigma_s(self, kind_sigma_s: np.ndarray) -> np.ndarray:
        """Each row's σ: its own where known, else its kind's (`kind_sigma_s[kind]`), and
        never more than its kind's."""
        by_kind = np.asarray(kind_sigma_s, dtype=float)[self.kind]
        if self.sigma_s is None:
            return by_kind
        own = np.where(np.isnan(self.sigma_s), by_kind, self.sigma_s)
        return np.minimum(own, by_kind)


def _counter_rows(t_s, energy_j, grid: RefreshEstimate, weight: float):
    tau, c = counter_points(t_s, energy_j, grid)
    # The first value was read at the run's edge, before any refresh was seen: its instant is
    # not on the grid, so it starts no interval.
    tau, c = tau[1:], c[1:]
    if len(tau) < 2:
        return None
    dt, de = np.diff(tau), np.diff(c)
    ok = (dt > 0) & (de >= 0)  # de < 0: the counter was reset
    t0, t1 = tau[:-1][ok], tau[1:][ok]
    # The jitter's error in joules does not grow with the interval: in watts it shrinks.
    w = weight * np.minimum(dt[ok] / grid.period_s, 2.0)
    return t0, t1, de[ok] / dt[ok], w


def _power_rows(t_s, power_w, grid: RefreshEstimate, window_s: float, weight: float):
    ok = ~np.isnan(power_w)
    t, v = np.asarray(t_s, dtype=float)[ok], np.asarray(power_w, dtype=float)[ok]
    if len(t) < 2:
        return None
    i = np.flatnonzero(v[1:] != v[:-1]) + 1
    jitter = grid.jitter_s if np.isfinite(grid.jitter_s) else 0.0
    slack = 3.0 * max(jitter, 0.5e-3)
    k_lo = np.ceil((t[i - 1] - slack - grid.offset_s) / grid.period_s)
    k_hi = np.floor((t[i] + slack - grid.offset_s) / grid.period_s)
    one = k_lo == k_hi  # exactly one grid instant can have produced this value
    g = grid.offset_s + k_lo[one] * grid.period_s
    tau, sd = bracket_posterior(g, jitter, t[i - 1][one], t[i][one])
    return tau - window_s, tau, v[i][one], np.full(int(one.sum()), weight), sd


def bracket_posterior(g_s, jitter_s: float, a_s, b_s) -> tuple[np.ndarray, np.ndarray]:
    """Where a refresh fell, given its grid instant g ± jitter and the reads a < b between which
    its value appeared: the mean and σ of N(g, jitter²) cut to [a, b].

    On an H200 the power fields' refresh instants scatter by ~3–15 ms around a grid (their
    period moves with the load), while 20 ms reads bracket each one within 20 ms (σ ≤ 5.8 ms)
    and 5 ms reads within 5 ms: the bracket says more than the grid. With a tight grid (the
    counter's, 1.6 ms) the grid says more. A bracket the grid's ±8σ does not reach (a read
    far off) keeps the grid's own mean and σ.
    """
    g, a, b = (np.asarray(x, dtype=float) for x in (g_s, a_s, b_s))
    if jitter_s <= 0:
        return g, np.zeros_like(g)
    za, zb = (a - g) / jitter_s, (b - g) / jitter_s
    mass = ndtr(zb) - ndtr(za)
    pa, pb = _pdf(za), _pdf(zb)
    safe = mass > 1e-12
    m = np.where(safe, (pa - pb) / np.where(safe, mass, 1.0), 0.0)
    second = np.where(safe, (za * pa - zb * pb) / np.where(safe, mass, 1.0), 0.0)
    var = np.maximum(1.0 + second - m**2, 0.0)
    mean = np.where(safe, g + jitter_s * m, g)
    sd = np.where(safe, jitter_s * np.sqrt(var), jitter_s)
    return mean, sd


def _pdf(z: np.ndarray) -> np.ndarray:
    return np.exp(-0.5 * z * z) / np.sqrt(2.0 * np.pi)


def sensor_rows(
    dev_samples,
    grids: dict[int, RefreshEstimate],
    *,
    counter_weight: float | None = 1.0,
    instant: tuple[float, float] | None = (0.025, 0.5),
    average: tuple[float, float] | None = None,
) -> SensorRows:
    """Every usable sensor interval of one device's samples (a DataFrame), sorted by time.

    Args:
        dev_samples: one device's rows of samples.csv.
        grids: the refresh grid each kind of row is placed on (COUNTER, INSTANT, AVERAGE); the
            counter and the power fields refresh on grids of their own.
        counter_weight: weight of a one-period counter row; None: no counter rows.
        instant: (window_s, weight) of the instant power rows; None: none.
        average: (window_s, weight) of the default (running average) power rows; None: none.

    Raises:
        AttributionError: no signal gives a single row.
    """
    t = dev_samples["t_s"].to_numpy(dtype=float)
    parts = []
    specs = [
        (COUNTER, "energy_j", counter_weight),
        (INSTANT, "power_instant_w", instant),
        (AVERAGE, "power_w", average),
    ]
    for kind, col, spec in specs:
        if spec is None or kind not in grids or col not in dev_samples.columns:
            continue
        if dev_samples[col].notna().sum() < 2:
            continue
        v = dev_samples[col].to_numpy(dtype=float)
        if kind == COUNTER:
            got = _counter_rows(t, v, grids[kind], float(spec))  # type: ignore[arg-type]
            if got is not None:
                got = (*got, np.full(len(got[0]), np.nan))  # edges on the grid's jitter
        else:
            window_s, weight = spec  # type: ignore[misc]
            got = _power_rows(t, v, grids[kind], window_s, weight)
        if got is not None and len(got[0]):
            parts.append((*got, np.full(len(got[0]), kind)))
    if not parts:
        raise AttributionError(
            "no usable energy counter or power readings in samples.csv for regression: "
            "record energy_j or power_instant_w"
        )
    t0, t1, p, w, sd, k = (np.concatenate(x) for x in zip(*parts, strict=True))
    order = np.argsort(0.5 * (t0 + t1), kind="stable")
    return SensorRows(t0[order], t1[order], p[order], k[order], w[order], sd[order])


def buffer_rows(
    buffer, window_s: float, lag_s: float, weight: float, t_range_s: tuple[float, float]
) -> SensorRows | None:
    """One row per sample of one device's power buffer (a DataFrame with t_s and power_w):
    the sample stamped t is the power over [t − lag − window, t − lag] (its kernel's span;
    `Placement` applies the kernel's shape). Samples outside `t_range_s` (the samples' time
    range) are left out; None if none is left."""
    if not window_s > 0:
        raise ValueError(f"buffer window must be > 0 s, got {window_s}")
    t = buffer["t_s"].to_numpy(dtype=float)
    p = buffer["power_w"].to_numpy(dtype=float)
    t1 = t - lag_s
    t0 = t1 - window_s
    ok = np.isfinite(t) & np.isfinite(p) & (t0 >= t_range_s[0]) & (t1 <= t_range_s[1])
    if not ok.any():
        return None
    n = int(ok.sum())
    order = np.argsort(t1[ok], kind="stable")
    return SensorRows(
        t0[ok][order],
        t1[ok][order],
        p[ok][order],
        np.full(n, BUFFER),
        np.full(n, float(weight)),
        np.full(n, np.nan),
    )


@dataclass(frozen=True)
class BufferScale:
    """The power buffer's scale against the counter over the same stretches of time."""

    scale: float
    """Buffer energy / counter energy (1: the same scale)."""
    sd: float
    """Its standard error, from the spread between blocks of `block_s`."""
    n_blocks: int
    seconds: float
    """Time the comparison covers."""


def buffer_scale(
    rows: SensorRows, buffer_t_s, buffer_w, lag_s: float, block_s: float = 5.0
) -> BufferScale | None:
    """Compare the buffer's energy with the counter's over the counter rows' intervals.

    The counter rows hold the exact energy between refreshes. Over the same intervals the
    buffer's energy is its samples held from one stamp to the next (each the power before its
    stamp, so moved back by `lag_s`): over seconds the kernel's smoothing cancels, and the ratio
    is the buffer's scale. Blocks of about `block_s` seconds give its spread. None without
    counter rows or buffer samples around them.
    """
    t = np.asarray(buffer_t_s, dtype=float) - lag_s
    p = np.asarray(buffer_w, dtype=float)
    ok = np.isfinite(t) & np.isfinite(p)
    t, p = t[ok], p[ok]
    m = rows.kind == COUNTER
    if len(t) < 2 or not m.any():
        return None
    cum = np.concatenate([[0.0], np.cumsum(p[1:] * np.diff(t))])
    a, b = rows.t0_s[m], rows.t1_s[m]
    inside = (a >= t[0]) & (b <= t[-1])
    if not inside.any():
        return None
    a, b = a[inside], b[inside]
    e_counter = rows.power_w[m][inside] * (b - a)
    e_buffer = np.interp(b, t, cum) - np.interp(a, t, cum)
    seconds = float(np.sum(b - a))
    n_blocks = max(1, int(round((b[-1] - a[0]) / block_s)))
    block = np.minimum(((a - a[0]) / (b[-1] - a[0] + 1e-12) * n_blocks).astype(int), n_blocks - 1)
    ratios = np.array(
        [e_buffer[block == k].sum() / e_counter[block == k].sum() for k in np.unique(block)]
    )
    scale = float(e_buffer.sum() / e_counter.sum())
    sd = float(np.std(ratios, ddof=1) / np.sqrt(len(ratios))) if len(ratios) > 1 else 0.0
    return BufferScale(scale, sd, len(ratios), seconds)


def merge_rows(a: SensorRows, b: SensorRows | None) -> SensorRows:
    """`a` and `b` together, sorted by their rows' midpoints (the bootstrap's time order)."""
    if b is None or len(b) == 0:
        return a
    sd = [x.sigma_s if x.sigma_s is not None else np.full(len(x), np.nan) for x in (a, b)]
    parts = [
        np.concatenate([getattr(a, f), getattr(b, f)])
        for f in ("t0_s", "t1_s", "power_w", "kind", "weight")
    ]
    rows = SensorRows(*parts, np.concatenate(sd))
    return rows.select(np.argsort(rows.mid_s, kind="stable"))


def jitter_variance_w2(
    timeline: Timeline, rows: SensorRows, power_w: np.ndarray, sigma_s: np.ndarray
) -> np.ndarray:
    """Variance (W²) of each row's mean power caused by the jitter of its refresh instants.

    The energy drawn up to t is G(t) = Σ_label P_label × cumulative time (`power_w` per label of
    `timeline.names`); `sigma_s` is each row's jitter. Power rows move both edges together (one
    refresh); counter rows have independent edges (two refreshes).
    """
    z, wq = np.polynomial.hermite_e.hermegauss(9)
    wq = wq / wq.sum()
    sig = np.broadcast_to(np.asarray(sigma_s, dtype=float), rows.t0_s.shape)
    # The energy at every segment edge once; each point then one interpolation (as
    # `Timeline.energy_until_j`, which forms the same table per call).
    edges = timeline.edges_s
    at_edges = timeline.energy_until_j(edges, power_w)
    g0 = np.stack([np.interp(rows.t0_s + sig * zi, edges, at_edges) for zi in z])
    g1 = np.stack([np.interp(rows.t1_s + sig * zi, edges, at_edges) for zi in z])
    g0 -= g0[len(z) // 2]  # centre before squaring: G itself is large
    g1 -= g1[len(z) // 2]

    def var(g: np.ndarray) -> np.ndarray:
        return np.maximum(wq @ g**2 - (wq @ g) ** 2, 0.0)

    v = np.where(rows.kind == COUNTER, var(g1) + var(g0), var(g1 - g0))
    return v / rows.duration_s**2
