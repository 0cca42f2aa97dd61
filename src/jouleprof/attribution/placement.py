"""Where the sensor's rows sit in time, refined from the power data themselves.

Each row of the regression is an interval placed on a refresh grid: counter rows on the
counter's grid, power rows on the power fields' grid (on an H200 the two tick independently).
The grids come from update brackets and are uncertain by a fraction of a millisecond, drift
over minutes, and the instant field's window (~25 ms) is only what was published. Sharp power
steps in the readings pin all of that better: this module fits, by Gauss-Newton with the grid
fits' uncertainties as a Gaussian prior,

    θ = (counter shift, counter drift, power shift, power drift, instant window − its prior,
         power gain, buffer shift)

where a row at relative position u ∈ [-1, 1] of the run moves by shift + drift·u, the instant
rows' window is lengthened by the fifth term, and the power readings are taken as (1 + gain)
times the true power: the counter sets the scale (on an H200 the power fields read ~1 % low
at idle, and up to several percent off elsewhere; shared/FACTS.md). The power buffer's rows
(NVML's own ~20 ms samples, stamped by the driver: no grid) move by their own shift, around
the lag measured for them; their scale is set against the counter before the fit
(`rows.buffer_scale`), not here: the phase powers, refitted at every step, absorb a gain's
partial derivative, and the steps on a gain term go astray when a signal is as dense and
as precise as the buffer (on a simulated run the buffer's gain stopped 0.9 % short of the
truth, and every phase with it). A term whose rows are absent has a prior of zero width and
stays at 0.

It also gives each row its weight: the configured weight of its signal over √(the signal's
noise floor + the variance that the jitter of the row's edges causes, which is large only
where an edge sits on a power step).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from jouleprof.attribution.common import Timeline
from jouleprof.attribution.kernels import BOXCAR, Boxes, Delays
from jouleprof.attribution.knot_design import SegmentShares
from jouleprof.attribution.nnls import nnls_rows
from jouleprof.attribution.rows import BUFFER, COUNTER, INSTANT, SensorRows, jitter_variance_w2

PARAMS: tuple[str, ...] = (
    "counter_shift_s",
    "counter_drift_s",
    "power_shift_s",
    "power_drift_s",
    "instant_window_extra_s",
    "power_gain",
    "buffer_shift_s",
)
_MIN_ROW_VAR_W2 = 0.01  # floor on a row's noise variance: no row is trusted beyond 0.1 W
_STEP_S = 20e-6  # the step of the Jacobian's central differences
NO_DELAY: Delays = ((0.0, 1.0),)


def kernel_fractions(
    timeline: Timeline, t_ref_s: np.ndarray, window_s, kernel: Boxes, sigma_s
) -> np.ndarray:
    """For readings at refresh instants `t_ref_s` of a field that weighs its `window_s` by
    `kernel`: the share of each reading that each label of `timeline.names` makes up."""
    out = np.zeros((len(t_ref_s), len(timeline.names)))
    # Boxes side by side share their edges: each edge's cumulative time is taken once.
    cum: dict[float, np.ndarray] = {}

    def at(multiple: float) -> np.ndarray:
        if multiple not in cum:
            cum[multiple] = timeline.cumulative_s(t_ref_s - multiple * window_s, sigma_s)
        return cum[multiple]

    for start, end, weight in kernel:
        a, b = t_ref_s - start * window_s, t_ref_s - end * window_s
        out += weight * np.maximum(at(end) - at(start), 0.0) / (b - a)[:, None]
    return out


def delayed_fractions(
    timeline: Timeline, t0_s: np.ndarray, t1_s: np.ndarray, delays: Delays, sigma_s
) -> np.ndarray:
    """For counter rows [t0_s, t1_s] whose energy trails the power by `delays` (point delays
    (delay_s, weight)): the share of each row's energy that each label of `timeline.names`
    drew, Σ weight × overlap([t0 − delay, t1 − delay]) / (t1 − t0)."""
    out = np.zeros((len(t0_s), len(timeline.names)))
    for delay_s, weight in delays:
        out += weight * timeline.overlap_s(t0_s - delay_s, t1_s - delay_s, sigma_s)
    return out / (t1_s - t0_s)[:, None]


_BOX_MULTIPLES = np.array([0.0, 1.0])


def kernel_multiples(kernel: Boxes) -> tuple[np.ndarray, np.ndarray]:
    """A kernel of boxes as knots (`Timeline.kernel_overlap`): the distinct box edges in
    windows before the refresh (ascending), and each one's coefficient times the window (a
    box's weight / its length in windows at its later edge, minus that at its earlier one)."""
    mult = np.array(sorted({float(m) for box in kernel for m in box[:2]}))
    gamma = np.zeros(len(mult))
    for start, end, weight in kernel:
        c = weight / (start - end)
        gamma[np.searchsorted(mult, end)] += c
        gamma[np.searchsorted(mult, start)] -= c
    return mult, gamma


def delay_knots(t0_s: np.ndarray, t1_s: np.ndarray, delays: Delays):
    """Knots and coefficients of counter rows [t0_s, t1_s] whose energy trails the power by
    `delays` (as `delayed_fractions`)."""
    d = t1_s - t0_s
    knots = np.column_stack([x for delay_s, _ in delays for x in (t0_s - delay_s, t1_s - delay_s)])
    coefs = np.column_stack([x for _, w in delays for x in (-w / d, w / d)])
    return knots, coefs


def fit_powers(a: np.ndarray, b: np.ndarray, power_map: np.ndarray | None = None) -> np.ndarray:
    """Non-negative least squares: the phase powers (W) of weighted rows `a`, `b` (through
    the normal equations, `nnls.nnls_rows`). `power_map` (`floor_map`): the powers are
    `power_map @ e` for the non-negative `e` fitted, which floors them (None: powers ≥ 0)."""
    if power_map is None:
        return nnls_rows(a, b)
    return power_map @ nnls_rows(a @ power_map, b)


def floor_map(n_cols: int, floor_col: int) -> np.ndarray:
    """The `fit_powers` map that floors every power at column `floor_col`'s: power_j =
    e_floor + e_j for j ≠ floor_col (all e ≥ 0), so no phase is fitted below the idle power
    (`RegressionConfig.floor_at_idle`). The same rows and residuals, a smaller feasible set."""
    m = np.eye(n_cols)
    m[:, floor_col] = 1.0
    return m


@dataclass
class Placement:
    """The rows kept for the fit, the labels fitted, and the jitter of each kind of row."""

    timeline: Timeline
    rows: SensorRows
    cols: list[int]
    """Indices into timeline.names of the labels fitted."""
    sigma_s: np.ndarray
    """Jitter σ of the refresh instants, per kind of row (COUNTER, INSTANT, AVERAGE, BUFFER);
    a row whose own reads place it better uses its own (`SensorRows.row_sigma_s`)."""
    u: np.ndarray
    """Each row's position in the run, -1 … 1 (the drift terms multiply it)."""
    kernel: Boxes = BOXCAR
    """The instant field's weighting of its window (`RegressionConfig.instant_kernel`)."""
    buffer_kernel: Boxes = BOXCAR
    """The power buffer's weighting of its window (`RegressionConfig.buffer_kernel`)."""
    counter_delays: Delays = NO_DELAY
    """How the energy the counter books trails the power drawn, as point delays (delay_s,
    weight) (`RegressionConfig.counter_tail_s`): a counter row [t0, t1] holds Σ weight ×
    the energy of [t0 − delay, t1 − delay]. NO_DELAY: the energy of [t0, t1] itself."""
    power_map: np.ndarray | None = None
    """The powers' floor as a `fit_powers` map (`floor_map`), or None (powers ≥ 0 only)."""

    def fit_powers(self, x: np.ndarray, y: np.ndarray, w: np.ndarray) -> np.ndarray:
        """The phase powers (W) of design `x` and target `y` under row weights `w`, floored
        as `power_map` says (`fit_powers`)."""
        return fit_powers(x * w[:, None], y * w, self.power_map)

    def placed(self, theta: np.ndarray) -> SensorRows:
        r = self.rows
        counter = r.kind == COUNTER
        shift = np.where(counter, theta[0] + theta[1] * self.u, theta[2] + theta[3] * self.u)
        shift = np.where(r.kind == BUFFER, theta[6], shift)
        longer = np.where(r.kind == INSTANT, theta[4], 0.0)
        return SensorRows(
            r.t0_s + shift - longer, r.t1_s + shift, r.power_w, r.kind, r.weight, r.sigma_s
        )

    def moved_rows(
        self, d_theta: np.ndarray, d_sigma_s: np.ndarray | None = None, buffer_stretch=1.0
    ) -> np.ndarray:
        """Which rows' design a change of θ by `d_theta` (and of the kinds' σ by `d_sigma_s`,
        of the buffer's window by `buffer_stretch`) can move: the others' stay as they were."""
        d = np.asarray(d_theta, dtype=float)
        kind = self.rows.kind
        moved = np.zeros(len(kind), dtype=bool)
        moved |= (kind == COUNTER) & bool(d[0] != 0 or d[1] != 0)
        moved |= ((kind != COUNTER) & (kind != BUFFER)) & bool(d[2] != 0 or d[3] != 0)
        moved |= (kind == INSTANT) & bool(d[4] != 0)
        moved |= (kind == BUFFER) & bool(d[6] != 0 or buffer_stretch != 1.0)
        if d_sigma_s is not None:
            moved |= np.asarray(d_sigma_s)[kind] != 0
        return moved

    def design(
        self,
        theta: np.ndarray,
        sigma_s: np.ndarray | None = None,
        buffer_stretch: float = 1.0,
        only: np.ndarray | None = None,
        power_w: np.ndarray | None = None,
    ) -> np.ndarray:
        """Expected fraction of each row's interval that each fitted label covers.

        `buffer_stretch` scales the buffer rows' window (the systematic spread asks what a
        window measured a little longer or shorter would change). `only` (a mask of rows):
        those rows alone, as they would be in the whole design. `power_w` (one per fitted
        label): the design times those powers, each row's modelled mean power, (rows,).

        The whole design at a θ is kept until the next one is asked for (read-only): the fit
        asks for it again where a round of Gauss-Newton starts."""
        whole = sigma_s is None and buffer_stretch == 1.0 and only is None and power_w is None
        key = np.asarray(theta, dtype=float).tobytes()
        kept = self.__dict__.get("_whole")
        if whole and kept is not None and kept[0] == key:
            return kept[1]
        out = self._design(theta, sigma_s, buffer_stretch, only, power_w)
        if whole:
            out.flags.writeable = False
            self.__dict__["_whole"] = (key, out)
        return out

    def _design(self, theta, sigma_s, buffer_stretch, only, power_w) -> np.ndarray:
        sig = self.sigma_s if sigma_s is None else np.maximum(sigma_s, 0.0)
        r = self.placed(theta)
        if only is not None:
            r = r.select(only)
        if buffer_stretch != 1.0:
            m = r.kind == BUFFER
            r.t0_s = np.where(m, r.t1_s - buffer_stretch * r.duration_s, r.t0_s)
        row_sig = r.row_sigma_s(sig)
        out = np.zeros((len(r), len(self.cols)) if power_w is None else len(r))
        # Each row's weighing of time: a boxcar over its interval, the boxes of its kind's
        # kernel before its refresh, or the counter's delayed copies of its interval.
        plain = np.ones(len(r), dtype=bool)
        tl = self.timeline
        for kind, kernel in ((INSTANT, self.kernel), (BUFFER, self.buffer_kernel)):
            m = r.kind == kind
            if kernel == BOXCAR or not m.any():
                continue
            mult, gamma = kernel_multiples(kernel)
            d = r.duration_s[m]
            out[m] = tl.kernel_overlap(
                r.t1_s[m], d, mult, gamma[None, :] / d[:, None], row_sig[m], self.cols, power_w
            )
            plain &= ~m
        if self.counter_delays != NO_DELAY:
            m = r.kind == COUNTER
            if m.any():
                knots, coefs = delay_knots(r.t0_s[m], r.t1_s[m], self.counter_delays)
                frac = tl.knot_overlap(knots, coefs, row_sig[m], self.cols)
                out[m] = frac if power_w is None else frac @ power_w
                plain &= ~m
        if plain.any():
            d = r.duration_s[plain]
            coefs = np.column_stack([1.0 / d, -1.0 / d])
            out[plain] = tl.kernel_overlap(
                r.t1_s[plain], d, _BOX_MULTIPLES, coefs, row_sig[plain], self.cols, power_w
            )
        return out

    def derivatives(self, theta: np.ndarray, power_w: np.ndarray, modelled_w: np.ndarray):
        """Central differences (±`_STEP_S`) of each row's modelled power (`modelled_w`, the
        design at `theta` times `power_w`) under its own shift and, for the instant rows,
        their window's length (W/s), from the edges near its knots (`knot_design`): (d/d
        shift, d/d window; 0 where a row has none)."""
        h = _STEP_S
        r = self.placed(theta)
        row_sig = r.row_sigma_s(self.sigma_s)
        shares = self.__dict__.get("_shares")
        if shares is None:
            shares = self.__dict__["_shares"] = SegmentShares(self.timeline, self.cols)
        d_shift, d_window = np.zeros(len(r)), np.zeros(len(r))
        d = r.duration_s
        # Each kind's knots: x_k = t1 − m_k d with coefficients γ_k / d (a boxcar: m = 0, 1;
        # γ = 1, −1), or the counter's delayed copies of its interval.
        plain = np.ones(len(r), dtype=bool)
        groups = []
        for kind, kernel in ((INSTANT, self.kernel), (BUFFER, self.buffer_kernel)):
            m = r.kind == kind
            if kernel == BOXCAR or not m.any():
                continue
            groups.append((m, *kernel_multiples(kernel)))
            plain &= ~m
        if self.counter_delays != NO_DELAY:
            m = r.kind == COUNTER
            if m.any():
                knots, coefs = delay_knots(r.t0_s[m], r.t1_s[m], self.counter_delays)
                up, down = shares.increments(knots, [h, -h], row_sig[m], power_w)
                d_shift[m] = np.sum(coefs * (up - down), axis=1) / (2 * h)
                plain &= ~m
        groups.append((plain, _BOX_MULTIPLES, np.array([1.0, -1.0])))
        instant = r.kind == INSTANT
        for m, mult, gamma in groups:
            if not m.any():
                continue
            dm = d[m]
            knots = r.t1_s[m][:, None] - mult[None, :] * dm[:, None]
            coefs = gamma[None, :] / dm[:, None]
            if not instant[m].any():
                up, down = shares.increments(knots, [h, -h], row_sig[m], power_w)
                d_shift[m] = np.sum(coefs * (up - down), axis=1) / (2 * h)
                continue
            # The window moves knot k by ∓m_k h: a boxcar's two knots by 0 and ∓h, the
            # shift's own increments; another kernel's by its own.
            box = mult is _BOX_MULTIPLES
            moved = [] if box else [-mult[None, :] * h, mult[None, :] * h]
            up, down, here, *other = shares.increments(
                knots, [h, -h, 0.0, *moved], row_sig[m], power_w
            )
            d_shift[m] = np.sum(coefs * (up - down), axis=1) / (2 * h)
            if box:
                zero = np.zeros(len(dm))
                longer_inc, shorter_inc = (
                    np.column_stack([zero, down[:, 1] - here[:, 1]]),
                    (np.column_stack([zero, up[:, 1] - here[:, 1]])),
                )
            else:
                longer_inc, shorter_inc = other[0] - here, other[1] - here
            # M over a window d ± h: (d M + Σ γ_k × the increment at its moved knot) / (d ± h).
            energy = dm * modelled_w[m]
            longer = (energy + longer_inc @ gamma) / (dm + h)
            shorter = (energy + shorter_inc @ gamma) / (dm - h)
            d_window[m] = (longer - shorter) / (2 * h)
        d_window[~instant] = 0.0
        return d_shift, d_window

    def target(self, theta: np.ndarray, buffer_scale: float = 1.0) -> np.ndarray:
        """Each row's mean power with the power fields' gain taken out (W); the buffer's rows
        come already on the counter's scale, times `buffer_scale` (the systematic spread asks
        what the scale's own uncertainty would change)."""
        r = self.rows
        out = np.where(r.kind == COUNTER, r.power_w, r.power_w / (1.0 + theta[5]))
        return np.where(r.kind == BUFFER, r.power_w * buffer_scale, out)

    def full(self, power: np.ndarray) -> np.ndarray:
        """Fitted powers spread over all of timeline.names (0 where not fitted)."""
        out = np.zeros(len(self.timeline.names))
        out[self.cols] = power
        return out


def row_weights(
    pl: Placement, x: np.ndarray, power: np.ndarray, kind_w: np.ndarray, theta: np.ndarray
) -> np.ndarray:
    """Row weights ∝ configured weight / √(noise floor of its signal + its jitter variance)."""
    rows = pl.placed(theta)
    y = pl.target(theta)
    var_w2 = jitter_variance_w2(pl.timeline, rows, pl.full(power), rows.row_sigma_s(pl.sigma_s))
    base = np.zeros(len(rows))
    for k in np.unique(rows.kind):
        m = rows.kind == k
        r = y[m] - x[m] @ power
        base[m] = max(float(np.mean(r**2) - np.mean(var_w2[m])), _MIN_ROW_VAR_W2)
    w = kind_w[rows.kind] / np.sqrt(base + var_w2)
    return w / np.sqrt(np.mean(w**2))


def refine(
    pl: Placement,
    w: np.ndarray,
    theta: np.ndarray,
    prior_sd: np.ndarray,
    bounds: tuple[np.ndarray, np.ndarray],
    max_iter: int = 8,
) -> tuple[np.ndarray, np.ndarray]:
    """Gauss-Newton on θ from `theta`, prior N(0, prior_sd²), rows weighted by `w`.

    Returns:
        θ and its posterior covariance.
    """
    lam = 1.0 / prior_sd**2
    theta = np.array(theta, dtype=float)
    a = np.diag(lam)
    buffer_rows = pl.rows.kind == BUFFER
    field_rows = (pl.rows.kind != COUNTER) & ~buffer_rows
    shifts = (0, 2, 4, 6) if buffer_rows.any() else (0, 2, 4)
    for _ in range(max_iter):
        x = pl.design(theta)
        y = pl.target(theta)
        power = pl.fit_powers(x, y, w)
        modelled = x @ power
        r = (y - modelled) * w
        # The shifts' central differences (a drift's is its shift's times u).
        d_shift, d_window = pl.derivatives(theta, power, modelled)
        grads = {i: np.zeros(len(w)) for i in (0, 2, 4, 6)}
        for i in shifts:
            e = np.zeros(len(theta))
            e[i] = 1.0
            m = pl.moved_rows(e)  # only the rows the term moves: the others' derivative is 0
            grads[i][m] = (d_window if i == 4 else d_shift)[m] * w[m]
        gain = np.where(field_rows, pl.rows.power_w / (1.0 + theta[5]) ** 2, 0.0) * w
        jac = np.column_stack(
            [
                grads[0],
                grads[0] * pl.u,
                grads[2],
                grads[2] * pl.u,
                grads[4],
                gain,
                grads[6],
            ]
        )
        v = max(float(np.mean(r**2)), 1e-12)
        a = jac.T @ jac / v + np.diag(lam)
        step = np.linalg.solve(a, jac.T @ r / v - lam * theta)
        theta = np.clip(theta + step, bounds[0], bounds[1])
        if np.max(np.abs(step)) < 1e-7:
            break
    return theta, profiled_covariance(jac, x * w[:, None], v, lam)


def profiled_covariance(jac: np.ndarray, xw: np.ndarray, v: float, lam: np.ndarray) -> np.ndarray:
    """θ's posterior covariance with the phase powers fitted again at every θ (profiled).

    The steps above hold the powers fixed while θ moves, which is how Gauss-Newton on the
    residual converges; but the information the rows carry about θ is only what the powers
    cannot absorb. The power fields' gain is the plain case: a field row's target scales with
    it, and so, refitted, do the powers, so field rows say nothing about it and only the
    counter rows pin it. Counting the whole Jacobian made the gain's σ ~0.01 % on a 7 s run
    whose gain really moved by ~0.4 % (benchmarks/results/short_run_coverage). So the
    Jacobian's columns are first projected off the weighted design's span.
    """
    q, _ = np.linalg.qr(xw)
    jac_p = jac - q @ (q.T @ jac)
    return np.linalg.inv(jac_p.T @ jac_p / v + np.diag(lam))
