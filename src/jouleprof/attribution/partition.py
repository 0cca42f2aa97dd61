"""The run's time partition (`Timeline`): one label per instant, and what the methods ask of it.

`common.build_timeline` makes it from spans.csv: each instant carries the deepest phase open
then, "untracked" inside a step outside any phase, "idle" between steps, and the excluded
labels for warm-up steps and long unrecorded stretches. The methods then ask how long each
label covers an interval, or a sensor's averaging window, and how much energy a power per
label puts before an instant, under a Gaussian jitter of the interval's edges where the
sensor's refresh instants are known only to within σ (`overlap_s`, `knot_overlap`,
`kernel_overlap`, `energy_until_j`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from scipy.special import ndtr

UNTRACKED = "untracked"
IDLE = "idle"
WARMUP = "<warmup>"
OUTSIDE = "<outside>"
EXCLUDED: tuple[str, ...] = (WARMUP, OUTSIDE)
"""Labels of time no method attributes: sensor intervals touching it are left out."""
_BLUR_REACH = 8.0  # edges further than this many σ from t do not move E[F(t + δ)] (< 1e-15)


@dataclass
class Timeline:
    """One label per instant of [edges_s[0], edges_s[-1]]: segment i is labelled names[labels[i]].

    Attributes:
        analysed_steps: steps whose phases are attributed (warm-up excluded).
        warmup_steps: the leading steps excluded.
        region_s: (start, end) of the analysed steps.
        time_s: exclusive time of each label inside the analysed region.
        counts: occurrences (spans) of each recorded phase name in the analysed steps.
        order: labels in the order they first appear in a step (display order).
    """

    edges_s: np.ndarray
    labels: np.ndarray
    names: list[str]
    analysed_steps: list[int]
    warmup_steps: list[int]
    region_s: tuple[float, float]
    step_extents_s: dict[int, tuple[float, float]]
    runs_s: list[tuple[float, float]] = field(default_factory=list)
    """Stretches of consecutive analysed steps (split where excluded time lies between)."""
    time_s: dict[str, float] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)
    inclusive_time_s: dict[str, float] = field(default_factory=dict)
    order: list[str] = field(default_factory=list)
    repeated: dict[str, np.ndarray] = field(default_factory=dict)
    """Phases that run once in most analysed steps and more often in some (a replayed phase,
    `timeline.repeat`): phase → its number of spans in each analysed step (in the order of
    analysed_steps). Bins cut such a phase per run, not across the step's total
    (`attribution.bins`)."""
    weights: np.ndarray | None = None
    """(segments, names): how each segment's time is shared among the names; None: all of
    it to its label. A segment may be split, e.g. between a phase's work and the host stalls
    inside it (`attribution.stall`); each row sums to 1."""

    def __post_init__(self) -> None:
        durations = np.diff(self.edges_s)
        if self.weights is None:
            share = np.zeros((len(self.labels), len(self.names)))
            share[np.arange(len(self.labels)), self.labels] = 1.0
        else:
            share = np.asarray(self.weights, dtype=float)
            if share.shape != (len(self.labels), len(self.names)):
                raise ValueError(
                    f"weights must be (segments, names) = {(len(self.labels), len(self.names))}, "
                    f"got {share.shape}"
                )
        cum = np.zeros((len(self.names), len(self.edges_s)))
        cum[:, 1:] = np.cumsum(share * durations[:, None], axis=0).T
        self._cum = np.ascontiguousarray(cum.T)  # (edges, names): one row per edge
        self._share = share  # each name's slope in each segment
        # Change of each name's slope (its share of the time) at every edge, outer two included;
        # sparse (an edge changes the slopes of the few names on either side of it).
        padded = np.zeros((len(self.labels) + 2, len(self.names)))
        padded[1:-1] = share
        self._dslope = _EdgeSlopes(np.diff(padded, axis=0))

    @property
    def n_steps(self) -> int:
        return len(self.analysed_steps)

    @property
    def step_time_s(self) -> float:
        """Total time of the analysed steps (phases and untracked time, not idle)."""
        return sum(v for k, v in self.time_s.items() if k != IDLE)

    def segment_steps(self) -> tuple[np.ndarray, np.ndarray]:
        """For each segment: the index (into analysed_steps) of the analysed step at or before
        its middle, and whether the segment lies inside that step."""
        mid = 0.5 * (self.edges_s[:-1] + self.edges_s[1:])
        starts = np.array([self.step_extents_s[s][0] for s in self.analysed_steps])
        ends = np.array([self.step_extents_s[s][1] for s in self.analysed_steps])
        step = np.clip(np.searchsorted(starts, mid, side="right") - 1, 0, len(starts) - 1)
        return step, (mid >= starts[step]) & (mid <= ends[step])

    def relabelled(self, edges_s, labels, names: list[str], **fields) -> Timeline:
        """A timeline of the same steps and region with other segments or names (a phase cut
        into bins, time shared with a stall column); `fields`: time_s, order, weights, ...
        (counts and inclusive times are copied unless given)."""
        fields.setdefault("counts", dict(self.counts))
        fields.setdefault("inclusive_time_s", dict(self.inclusive_time_s))
        fields.setdefault("repeated", dict(self.repeated))
        return Timeline(
            np.asarray(edges_s, dtype=float),
            np.asarray(labels, dtype=int),
            names,
            self.analysed_steps,
            self.warmup_steps,
            self.region_s,
            self.step_extents_s,
            runs_s=list(self.runs_s),
            **fields,
        )

    @property
    def in_step_labels(self) -> list[str]:
        return [n for n in self.order if n != IDLE]

    def overlap_s(self, t0_s: np.ndarray, t1_s: np.ndarray, jitter_s=0.0) -> np.ndarray:
        """Time each label covers inside each interval [t0_s[i], t1_s[i]]: (n, len(names)).

        With `jitter_s` > 0 (one σ, or one per interval) each edge is uncertain by
        N(0, jitter_s²): the expected overlap.
        """
        c1 = self.cumulative_s(t1_s, jitter_s)
        return np.maximum(c1 - self.cumulative_s(t0_s, jitter_s), 0.0)

    def cumulative_s(self, t_s: np.ndarray, jitter_s=0.0) -> np.ndarray:
        """Time each label has covered from the timeline's start to each t_s: (n, len(names)).

        With `jitter_s` > 0: the expectation over t_s + δ, δ ~ N(0, jitter_s²), in closed form.
        The cumulative time is piecewise linear, Σ_k Δslope_k · max(t − e_k, 0) over the segment
        edges e_k, and E[max(t + δ − e, 0)] = σ·ψ((t − e)/σ) with ψ(u) = u·Φ(u) + φ(u); so the
        blur adds σ·(φ(|u|) − |u|·Φ(−|u|)) · Δslope_k for each edge within a few σ of t.
        """
        raw = np.asarray(t_s, dtype=float)
        t = np.clip(raw, self.edges_s[0], self.edges_s[-1])
        # Linear within each segment: the cumulative time at its start plus its slopes × the
        # time into it (one search for every name, where np.interp searched once per name).
        k = np.clip(np.searchsorted(self.edges_s, t, side="right") - 1, 0, len(self.labels) - 1)
        out = self._cum[k] + (t - self.edges_s[k])[:, None] * self._share[k]
        sig = np.broadcast_to(np.asarray(jitter_s, dtype=float), raw.shape)
        if not np.any(sig > 0):
            return out
        sig = np.maximum(sig, 1e-12)  # a σ of 0 blurs nothing: reach 0, no edge near
        reach = _BLUR_REACH * sig
        lo = np.searchsorted(self.edges_s, raw - reach)
        hi = np.searchsorted(self.edges_s, raw + reach)
        # Every (reading, nearby edge) pair at once: the edge's blur times its slope changes.
        row, edge = _near_pairs(lo, hi)
        if not len(row):
            return out
        u = np.abs(raw[row] - self.edges_s[edge]) / sig[row]
        blur = sig[row] * (_norm_pdf(u) - u * ndtr(-u))
        out += self._dslope.spread(row, edge, blur, len(raw))
        return out

    def energy_until_j(self, t_s: np.ndarray, power_w: np.ndarray) -> np.ndarray:
        """Energy drawn from the timeline's start to each t_s at `power_w` per label (no
        jitter): `cumulative_s(t_s) @ power_w`, one interpolation instead of a row per label."""
        return np.interp(t_s, self.edges_s, self._cum @ power_w)

    def knot_overlap(
        self, knots_s: np.ndarray, coefs: np.ndarray, jitter_s, cols: list[int] | None = None
    ) -> np.ndarray:
        """Σ_m coefs[i, m] × cumulative_s(knots_s[i, m], jitter_s[i]) for each row i: (rows,
        len(cols)), the columns `cols` of timeline.names (default all).

        A row's weighing of time — a boxcar over [t0, t1] is coefs (−1/(t1 − t0), 1/(t1 − t0))
        at knots (t0, t1), a kernel of boxes one knot per box edge — makes its overlap with
        each label. Computed from the segment edges near the row's knots only: every edge
        further below them adds the same to each knot's cumulative time, which the coefs (of
        zero sum) weigh as the slope there times Σ coefs × knots. Equal to the cumulative
        form to rounding, at the cost of the row's nearby edges rather than of every label.
        """
        knots = np.asarray(knots_s, dtype=float)
        coefs = np.asarray(coefs, dtype=float)
        n = len(knots)
        cols = list(range(len(self.names))) if cols is None else list(cols)
        sig = np.broadcast_to(np.asarray(jitter_s, dtype=float), (n,))
        blurred = bool(np.any(sig > 0))
        sig = np.maximum(sig, 1e-12)
        reach = _BLUR_REACH * sig if blurred else np.zeros(n)
        edges = self.edges_s
        i0 = np.searchsorted(edges, knots.min(axis=1) - reach)
        i1 = np.searchsorted(edges, knots.max(axis=1) + reach)
        # Edges below every knot: the slope there (the share of each label) × Σ coefs × knots.
        lever = np.sum(coefs * (knots - knots[:, :1]), axis=1)  # Σ coefs × knots (Σ coefs = 0)
        out = self._slope_before(i0, cols) * lever[:, None]
        row, edge = _near_pairs(i0, i1)
        if not len(row):
            return out
        u = knots[row] - edges[edge][:, None]  # (pairs, knots)
        f = np.maximum(u, 0.0)
        if blurred:
            r = reach[row][:, None]
            near = (u > -r) & (u <= r)
            if near.any():
                s_near = np.broadcast_to(sig[row][:, None], u.shape)[near]
                a = np.abs(u[near]) / s_near
                f[near] += s_near * (_norm_pdf(a) - a * ndtr(-a))
        g = np.sum(coefs[row] * f, axis=1)
        out += self._dslope.spread(row, edge, g, n, cols)
        return out

    def kernel_overlap(
        self,
        t_ref_s: np.ndarray,
        window_s: np.ndarray,
        multiples: np.ndarray,
        coefs: np.ndarray,
        jitter_s,
        cols: list[int] | None = None,
        power_w: np.ndarray | None = None,
    ) -> np.ndarray:
        """`knot_overlap` for rows whose knots are t_ref_s − multiples × window_s, the same
        `multiples` (ascending, ≥ 0) for every row: a boxcar ((0, 1)) or a kernel of boxes.
        Each (row, nearby edge) pair then needs one search among the multiples instead of one
        term per knot; only knots within the blur's reach of an edge are evaluated one by one.

        With `power_w` (one per column of `cols`): each row's overlaps times those powers,
        (rows,), the mean power the row would read, without forming the overlaps.
        """
        t_ref = np.asarray(t_ref_s, dtype=float)
        n = len(t_ref)
        win = np.broadcast_to(np.asarray(window_s, dtype=float), (n,))
        mult = np.asarray(multiples, dtype=float)
        coefs = np.asarray(coefs, dtype=float)
        cols = list(range(len(self.names))) if cols is None else list(cols)
        sig = np.broadcast_to(np.asarray(jitter_s, dtype=float), (n,))
        blurred = bool(np.any(sig > 0))
        sig = np.maximum(sig, 1e-12)
        reach = _BLUR_REACH * sig if blurred else np.zeros(n)
        rel = -mult[None, :] * win[:, None]  # knot − t_ref, (rows, knots)
        # Prefix sums over the knots from the latest (multiple 0) back: Σ coefs, Σ coefs × rel.
        c_sum = np.zeros((n, len(mult) + 1))
        np.cumsum(coefs, axis=1, out=c_sum[:, 1:])
        p_sum = np.zeros((n, len(mult) + 1))
        np.cumsum(coefs * rel, axis=1, out=p_sum[:, 1:])
        edges = self.edges_s
        i0 = np.searchsorted(edges, t_ref + rel[:, -1] - reach)
        i1 = np.searchsorted(edges, t_ref + rel[:, 0] + reach)
        lever = p_sum[:, -1] - rel[:, 0] * c_sum[:, -1]
        if power_w is None:
            out = self._slope_before(i0, cols) * lever[:, None]
        else:
            out = self._slope_before(i0, cols, power_w) * lever
        row, edge = _near_pairs(i0, i1)
        if not len(row):
            return out
        e_rel = edges[edge] - t_ref[row]  # the edge relative to the row's t_ref
        w_row, r_row = win[row], reach[row]
        v = -e_rel / w_row
        # Knots later than the edge by more than the reach weigh it linearly (prefix sums);
        # knots within the reach, by the blurred ramp; earlier ones not at all.
        j_lo = np.searchsorted(mult, v - r_row / w_row)
        j_hi = np.searchsorted(mult, v + r_row / w_row) if blurred else j_lo
        g = p_sum[row, j_lo] - e_rel * c_sum[row, j_lo]
        if np.any(j_hi > j_lo):
            pair, k = _near_pairs(j_lo, j_hi)  # each pair's knots within the blur's reach
            u = rel[row[pair], k] - e_rel[pair]
            s_p = sig[row[pair]]
            a = np.abs(u) / s_p
            f = np.maximum(u, 0.0) + s_p * (_norm_pdf(a) - a * ndtr(-a))
            g += np.bincount(pair, weights=coefs[row[pair], k] * f, minlength=len(row))
        if power_w is None:
            out += self._dslope.spread(row, edge, g, n, cols)
        else:
            out += np.bincount(
                row, weights=g * self._dslope.weighed(cols, power_w)[edge], minlength=n
            )
        return out

    def _slope_before(self, edge_index: np.ndarray, cols: list[int], power_w=None) -> np.ndarray:
        """Each label's slope (share of the time) just below edge `edge_index` (0 before the
        first edge and after the last); with `power_w`, the power drawn there."""
        key = tuple(cols)
        cache = self.__dict__.setdefault("_slopes_by_cols", {})
        if key not in cache:
            cache.clear()
            padded = np.zeros((len(self.labels) + 2, len(cols)))
            padded[1:-1] = self._share[:, cols]
            cache[key] = [padded, None, None]
        entry = cache[key]
        if power_w is None:
            return entry[0][edge_index]
        if entry[1] is None or not np.array_equal(entry[1], power_w):
            entry[1], entry[2] = np.array(power_w, dtype=float), entry[0] @ power_w
        return entry[2][edge_index]


def _near_pairs(i0: np.ndarray, i1: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Every (row, index) with i0[row] ≤ index < i1[row], flattened row by row: the edges near
    each reading or row that its overlap is computed on (or a pair's knots near its edge)."""
    n_near = i1 - i0
    row = np.repeat(np.arange(len(i0)), n_near)
    first = np.cumsum(n_near) - n_near
    return row, i0[row] + (np.arange(len(row)) - first[row])


class _EdgeSlopes:
    """The change of each name's slope at every edge (edges × names), stored sparse."""

    def __init__(self, dslope: np.ndarray) -> None:
        from scipy.sparse import csr_matrix

        self.dense_shape = dslope.shape
        self._csr = csr_matrix(dslope)
        self._by_cols: dict = {}
        self._weighed: tuple | None = None

    def __getitem__(self, k):
        return self._csr[k].toarray()

    def _cols(self, cols: tuple[int, ...]):
        """The slope changes of the columns `cols` only (CSR, edges × cols)."""
        if cols not in self._by_cols:
            self._by_cols.clear()
            self._by_cols[cols] = self._csr[:, list(cols)].tocsr()
        return self._by_cols[cols]

    def spread(self, row: np.ndarray, edge: np.ndarray, value: np.ndarray, n_rows: int, cols=None):
        """Σ over pairs (row, edge) of value × the edge's slope changes, as a dense (n_rows,
        len(cols)) array (all names where cols is None). The pairs come grouped by row, in
        row order."""
        from scipy.sparse import csr_matrix

        slopes = self._csr if cols is None else self._cols(tuple(cols))
        indptr = np.zeros(n_rows + 1, dtype=np.int64)
        np.cumsum(np.bincount(row, minlength=n_rows), out=indptr[1:])
        pairs = csr_matrix((value, edge, indptr), shape=(n_rows, self.dense_shape[0]))
        return (pairs @ slopes).toarray()

    def weighed(self, cols, power_w: np.ndarray) -> np.ndarray:
        """Each edge's change of the power drawn (Σ slope change × power over `cols`)."""
        key = (tuple(cols), power_w.tobytes())
        if self._weighed is None or self._weighed[0] != key:
            sub = self._csr[:, list(cols)]
            self._weighed = (key, np.asarray(sub @ power_w).ravel())
        return self._weighed[1]


def _norm_pdf(u: np.ndarray) -> np.ndarray:
    return np.exp(-0.5 * u * u) / np.sqrt(2.0 * np.pi)
