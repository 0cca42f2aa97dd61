"""What every attribution method shares: checked spans, the exclusive time partition, warm-up.

The partition turns spans.csv into one label per instant of the run, so that time is never
counted twice and never lost:

- Nested phases are paths ("forward/target" inside "forward"). At every instant the deepest span
  wins: a parent's time not covered by any child is labelled with the parent's own name.
- Time inside a step covered by no phase is ``"untracked"``; time outside every step is
  ``"idle"``. A step's extent is the hull of its phases (the recorder counts a phase opened
  before `step()`, such as a data fetch, with the step it feeds).
- Recorded edges carry a little noise (device timestamps mapped onto the host clock), so
  consecutive spans overlap or leave gaps of some microseconds. Overlaps between spans of the
  same depth, and gaps shorter than `gap_tolerance_s` between two phases (or two steps), are
  closed at their midpoint: the best estimate of where one ended and the next began.
- Warm-up steps are labelled ``"<warmup>"`` as a whole; methods ignore every sensor interval
  that touches them. So is time outside the steps that lasts longer than `max_idle_gap_s`
  (``"<outside>"``): a stretch of seconds between recorded steps is not idle but unrecorded
  work (the uninstrumented blocks of an overhead measurement, isolation replays, evaluation).

Warm-up rule (`auto_warmup_steps`): exclude at least the first step (allocator, cuDNN autotune,
compilation); then keep excluding until `stable_run` consecutive steps each last within
`rel_tol` of the steady-state step time (the median over the second half of the run). At most
half of the steps are excluded.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field

import numpy as np
from scipy.special import ndtr

from jouleprof.errors import AttributionError

log = logging.getLogger(__name__)

UNTRACKED = "untracked"
IDLE = "idle"
WARMUP = "<warmup>"
OUTSIDE = "<outside>"
EXCLUDED: tuple[str, ...] = (WARMUP, OUTSIDE)
"""Labels of time no method attributes: sensor intervals touching it are left out."""
_BLUR_REACH = 8.0  # edges further than this many σ from t do not move E[F(t + δ)] (< 1e-15)
GAP_TOLERANCE_S = 0.5e-3
"""Default: gaps and overlaps shorter than this between consecutive spans are recording noise."""


def check_spans(spans, samples, device: str, tolerance_s: float = GAP_TOLERANCE_S) -> None:
    """Raise AttributionError if `spans` cannot be attributed against `samples` of `device`.

    Checks: spans exist, their times are finite and ordered, and they lie inside the time range
    of the device's samples.
    """
    if spans is None or len(spans) == 0:
        raise AttributionError(
            "the run has no phase spans (spans.csv is missing or empty): record the run with the "
            "phase recorder (fine mode: `with prof.step(): with prof.phase(...)`) to attribute it"
        )
    import pandas as pd

    t0 = pd.to_numeric(spans["t0_s"], errors="coerce").to_numpy(dtype=float)
    t1 = pd.to_numeric(spans["t1_s"], errors="coerce").to_numpy(dtype=float)
    bad = ~(np.isfinite(t0) & np.isfinite(t1)) | (t1 < t0)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise AttributionError(
            f"{int(bad.sum())} span(s) have missing, unreadable or reversed times, e.g. "
            f"step {spans['step'].iloc[i]} {spans['phase'].iloc[i]!r}: "
            f"[{spans['t0_s'].iloc[i]}, {spans['t1_s'].iloc[i]}]; fix or drop those rows"
        )
    d = samples[samples["device"] == device]
    if len(d) == 0:
        raise AttributionError(f"samples.csv has no rows for device {device!r}")
    s0, s1 = float(d["t_s"].min()), float(d["t_s"].max())
    outside = (t0 < s0 - tolerance_s) | (t1 > s1 + tolerance_s)
    if outside.any():
        i = int(np.flatnonzero(outside)[0])
        raise AttributionError(
            f"{int(outside.sum())} of {len(spans)} spans lie outside the time range of "
            f"{device}'s samples [{s0:.3f}, {s1:.3f}] s, e.g. step {spans['step'].iloc[i]} "
            f"{spans['phase'].iloc[i]!r} [{t0[i]:.3f}, {t1[i]:.3f}] s: spans and samples must "
            "share one clock and the sampler must run for the whole workload"
        )


def auto_warmup_steps(
    durations_s: np.ndarray, rel_tol: float = 0.10, stable_run: int = 3, min_steps: int = 1
) -> int:
    """How many leading steps to exclude as warm-up (the rule is in the module docstring)."""
    d = np.asarray(durations_s, dtype=float)
    n = len(d)
    if n <= 1:
        return 0
    steady = float(np.median(d[n // 2 :]))
    ok = np.abs(d - steady) <= rel_tol * steady
    limit = max(min(min_steps, n - 1), n // 2)
    for i in range(min(min_steps, n - 1), limit + 1):
        if ok[i : i + stable_run].all():
            return i
    return limit


@dataclass(frozen=True)
class _Seg:
    t0_s: float
    t1_s: float
    label: str | tuple[str, ...]  # a tuple: contested between same-depth spans (by start)


def _merge(segs: list[_Seg]) -> list[_Seg]:
    out: list[_Seg] = []
    for s in segs:
        if s.t1_s <= s.t0_s:
            continue
        if out and out[-1].label == s.label and math.isclose(out[-1].t1_s, s.t0_s, abs_tol=1e-12):
            out[-1] = _Seg(out[-1].t0_s, s.t1_s, s.label)
        else:
            out.append(s)
    return out


def _step_segments(
    phases: list[tuple[str, float, float]], t0_s: float, t1_s: float, tol_s: float
) -> list[_Seg]:
    """Exclusive segments of one step covering [t0_s, t1_s] (see the module docstring)."""
    edges = sorted({t0_s, t1_s, *(p[1] for p in phases), *(p[2] for p in phases)})
    edges = [e for e in edges if t0_s <= e <= t1_s]
    segs: list[_Seg] = []
    for a, b in zip(edges[:-1], edges[1:], strict=True):
        mid = 0.5 * (a + b)
        cover = [p for p in phases if p[1] <= mid < p[2]]
        if not cover:
            segs.append(_Seg(a, b, UNTRACKED))
            continue
        depth = max(p[0].count("/") for p in cover)
        top = sorted((p for p in cover if p[0].count("/") == depth), key=lambda p: (p[1], p[2]))
        names = tuple(dict.fromkeys(p[0] for p in top))
        segs.append(_Seg(a, b, names[0] if len(names) == 1 else names))
    segs = _merge(segs)
    # Contested time (same-depth spans overlapping) is shared out in order of start.
    fixed: list[_Seg] = []
    for s in segs:
        if isinstance(s.label, tuple):
            if s.t1_s - s.t0_s > tol_s:
                log.warning(
                    "phases %s overlap by %.3f ms; the overlap is split between them",
                    " and ".join(s.label),
                    1e3 * (s.t1_s - s.t0_s),
                )
            cuts = np.linspace(s.t0_s, s.t1_s, len(s.label) + 1)
            fixed += [_Seg(cuts[i], cuts[i + 1], n) for i, n in enumerate(s.label)]
        else:
            fixed.append(s)
    segs = _merge(fixed)
    # Short untracked gaps between two phases are recording noise: close them at the midpoint.
    for i in range(1, len(segs) - 1):
        s = segs[i]
        if s.label == UNTRACKED and s.t1_s - s.t0_s <= tol_s:
            m = 0.5 * (s.t0_s + s.t1_s)
            segs[i - 1] = _Seg(segs[i - 1].t0_s, m, segs[i - 1].label)
            segs[i + 1] = _Seg(m, segs[i + 1].t1_s, segs[i + 1].label)
            segs[i] = _Seg(m, m, UNTRACKED)
    # So are short untracked ends, left where a step's boundary moved to meet its neighbour's.
    if len(segs) > 1:
        first, last = segs[0], segs[-1]
        if first.label == UNTRACKED and first.t1_s - first.t0_s <= tol_s:
            segs[0], segs[1] = (
                _Seg(first.t0_s, first.t0_s, UNTRACKED),
                _Seg(first.t0_s, segs[1].t1_s, segs[1].label),
            )
        if last.label == UNTRACKED and last.t1_s - last.t0_s <= tol_s:
            segs[-2], segs[-1] = (
                _Seg(segs[-2].t0_s, last.t1_s, segs[-2].label),
                _Seg(last.t1_s, last.t1_s, UNTRACKED),
            )
    return _merge(segs)


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
        n_near = hi - lo
        row = np.repeat(np.arange(len(raw)), n_near)
        if not len(row):
            return out
        first = np.cumsum(n_near) - n_near
        edge = lo[row] + (np.arange(len(row)) - first[row])
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
        n_near = i1 - i0
        row = np.repeat(np.arange(n), n_near)
        if not len(row):
            return out
        first = np.cumsum(n_near) - n_near
        edge = i0[row] + (np.arange(len(row)) - first[row])
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
        n_near = i1 - i0
        row = np.repeat(np.arange(n), n_near)
        if not len(row):
            return out
        first = np.cumsum(n_near) - n_near
        edge = i0[row] + (np.arange(len(row)) - first[row])
        e_rel = edges[edge] - t_ref[row]  # the edge relative to the row's t_ref
        w_row, r_row = win[row], reach[row]
        v = -e_rel / w_row
        # Knots later than the edge by more than the reach weigh it linearly (prefix sums);
        # knots within the reach, by the blurred ramp; earlier ones not at all.
        j_lo = np.searchsorted(mult, v - r_row / w_row)
        j_hi = np.searchsorted(mult, v + r_row / w_row) if blurred else j_lo
        g = p_sum[row, j_lo] - e_rel * c_sum[row, j_lo]
        n_blur = j_hi - j_lo
        if np.any(n_blur > 0):
            pair = np.repeat(np.arange(len(row)), n_blur)
            start = np.cumsum(n_blur) - n_blur
            k = j_lo[pair] + (np.arange(len(pair)) - start[pair])
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


def build_timeline(
    spans,
    start_s: float,
    end_s: float,
    warmup_steps: int | None = None,
    gap_tolerance_s: float = GAP_TOLERANCE_S,
    max_idle_gap_s: float | None = None,
) -> Timeline:
    """The exclusive partition of [start_s, end_s] (module docstring) from a spans DataFrame.

    Args:
        spans: columns step, phase, t0_s, t1_s.
        start_s, end_s: the range to cover (the samples' time range).
        warmup_steps: leading steps to exclude; None applies `auto_warmup_steps`.
        gap_tolerance_s: gaps and overlaps up to this long are treated as recording noise.
        max_idle_gap_s: time outside the steps longer than this is excluded, not idle; None:
            three median steps, at least 1 s.

    Raises:
        AttributionError: steps overlap by more than the tolerance, or no step is left to analyse.
    """
    if gap_tolerance_s < 0:
        raise ValueError(f"gap_tolerance_s must be ≥ 0, got {gap_tolerance_s}")
    by_step: dict[int, list[tuple[str, float, float]]] = {}
    for step, phase, t0, t1 in spans[["step", "phase", "t0_s", "t1_s"]].itertuples(index=False):
        by_step.setdefault(int(step), []).append((str(phase), float(t0), float(t1)))
    extents = {s: (min(p[1] for p in v), max(p[2] for p in v)) for s, v in by_step.items()}
    steps = sorted(extents, key=lambda s: extents[s])
    for a, b in zip(steps[:-1], steps[1:], strict=True):
        over = extents[a][1] - extents[b][0]
        if over > gap_tolerance_s:
            raise AttributionError(
                f"steps {a} [{extents[a][0]:.4f}, {extents[a][1]:.4f}] s and {b} "
                f"[{extents[b][0]:.4f}, {extents[b][1]:.4f}] s overlap by {1e3 * over:.2f} ms: "
                "each step's spans must lie in its own stretch of time (one process's steps per "
                "spans.csv, numbered in order)"
            )
    n = len(steps)
    if warmup_steps is None:
        durations = np.array([extents[s][1] - extents[s][0] for s in steps])
        n_warm = auto_warmup_steps(durations)
    else:
        if warmup_steps < 0:
            raise AttributionError(f"--warmup-steps must be ≥ 0, got {warmup_steps}")
        n_warm = warmup_steps
    if n_warm >= n:
        raise AttributionError(
            f"the run has {n} step(s) and {n_warm} are excluded as warm-up: nothing is left to "
            "attribute; record more steps or pass a smaller --warmup-steps"
        )
    # Step boundaries: split tiny gaps/overlaps between consecutive steps at their midpoint.
    bounds = {s: list(extents[s]) for s in steps}
    for a, b in zip(steps[:-1], steps[1:], strict=True):
        if bounds[b][0] - bounds[a][1] <= gap_tolerance_s:
            m = 0.5 * (bounds[a][1] + bounds[b][0])
            bounds[a][1], bounds[b][0] = m, m
    if max_idle_gap_s is None:
        median_step = float(np.median([extents[s][1] - extents[s][0] for s in steps]))
        max_idle_gap_s = max(1.0, 3.0 * median_step)

    def between(t0: float, t1: float) -> _Seg:
        return _Seg(t0, t1, IDLE if t1 - t0 <= max_idle_gap_s else OUTSIDE)

    segs: list[_Seg] = [between(min(start_s, bounds[steps[0]][0]), bounds[steps[0]][0])]
    warm = set(steps[:n_warm])
    order: list[str] = []
    for i, s in enumerate(steps):
        t0, t1 = bounds[s]
        if s in warm:
            segs.append(_Seg(t0, t1, WARMUP))
        else:
            step_segs = _step_segments(by_step[s], t0, t1, gap_tolerance_s)
            for g in step_segs:
                if g.label not in order:
                    order.append(g.label)  # type: ignore[arg-type]
            segs += step_segs
        nxt = bounds[steps[i + 1]][0] if i + 1 < n else max(end_s, t1)
        segs.append(between(t1, nxt))
    segs = _merge(segs)
    names = [WARMUP, OUTSIDE, IDLE, *order]
    index = {nm: j for j, nm in enumerate(names)}
    edges = np.array([segs[0].t0_s] + [g.t1_s for g in segs])
    labels = np.array([index[g.label] for g in segs], dtype=int)  # type: ignore[index]
    analysed = steps[n_warm:]
    region = (bounds[analysed[0]][0], bounds[analysed[-1]][1])
    tl = Timeline(
        edges, labels, names, analysed, steps[:n_warm], region, {s: tuple(bounds[s]) for s in steps}
    )
    occupied = tl.overlap_s(np.array([region[0]]), np.array([region[1]]))[0]
    tl.time_s = {nm: float(occupied[index[nm]]) for nm in names if nm not in EXCLUDED}
    # Runs of analysed steps: the region split wherever excluded time lies.
    runs: list[tuple[float, float]] = []
    for g in segs:
        if g.t1_s <= region[0] or g.t0_s >= region[1]:
            continue
        if g.label in EXCLUDED:
            runs.append((np.nan, np.nan))
        elif runs and not np.isnan(runs[-1][1]):
            runs[-1] = (runs[-1][0], min(g.t1_s, region[1]))
        else:
            runs.append((max(g.t0_s, region[0]), min(g.t1_s, region[1])))
    tl.runs_s = [r for r in runs if not np.isnan(r[0])]
    tl.time_s = {k: v for k, v in tl.time_s.items() if v > 0 or k != IDLE}
    has_idle = tl.time_s.get(IDLE, 0.0) > 0
    tl.order = order + ([IDLE] if has_idle else [])
    incl: dict[str, float] = {}
    per_step: dict[str, np.ndarray] = {}  # each phase's spans in each analysed step
    for i, s in enumerate(analysed):
        for phase, t0, t1 in by_step[s]:
            incl[phase] = incl.get(phase, 0.0) + (t1 - t0)
            if phase not in per_step:
                per_step[phase] = np.zeros(len(analysed), dtype=int)
            per_step[phase][i] += 1
    tl.counts = {phase: int(n.sum()) for phase, n in per_step.items()}
    tl.inclusive_time_s = incl
    # Run once in most analysed steps and more in some: a replayed phase.
    tl.repeated = {phase: n for phase, n in per_step.items() if n.max() > 1 and np.median(n) == 1}
    return tl
