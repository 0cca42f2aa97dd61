"""How each row's modelled power moves when its knots move: the placement's derivatives.

A row weighs time by coefficients at knots (`Timeline.knot_overlap`): a boxcar over [t0, t1]
is (−1/d, 1/d) at (t0, t1), a kernel of boxes one knot per box edge at t1 − m × d. Its
modelled mean power is M = Σ_k coef_k × Ĝ(x_k), Ĝ the energy drawn up to x blurred by the
row's jitter σ: Ĝ(x) = Σ_e ΔP_e × g(x − e), the sum over the segment edges e of the change of
power there times g(u) = E[max(u + δ, 0)], δ ~ N(0, σ²) (σ·Ψ(u/σ), Ψ(z) = z Φ(z) + φ(z); for
σ = 0, max(u, 0)).

The Gauss-Newton placement (`placement.refine`) takes each term's derivative as a central
difference over ±h: for a shift, [M(x + h) − M(x − h)] / 2h; for the instant window's length,
the same over d ± h. Each needs only Ĝ's increments near the knots,

    Ĝ(x + δ) − Ĝ(x) = δ × P(below) + Σ_{e near x} ΔP_e × [g(x + δ − e) − g(x − e)],

P(below) the power after every edge further below x than the blur reaches (8 σ + |δ|): the
edges further away add δ × ΔP or nothing. So one pass over the few edges near every knot
gives every term's central difference, which took two designs of every moved row per term
before (eight in all); the values are the same differences, without the cancellation of
subtracting two designs (they agree to ~1e-9 of a row's derivative).
"""

from __future__ import annotations

import numpy as np
from scipy.special import ndtr

from jouleprof.attribution.partition import _BLUR_REACH, Timeline

_SQRT_2PI = np.sqrt(2.0 * np.pi)


class SegmentShares:
    """Each segment's share of time per fitted label (`cols` of timeline.names), padded with
    a segment of nothing before the first edge and after the last: index q = 0 … n + 1;
    edge i lies between padded segments i and i + 1."""

    def __init__(self, timeline: Timeline, cols: list[int]) -> None:
        n_seg = len(timeline.labels)
        share = np.zeros((n_seg + 2, len(cols)))
        if timeline.weights is None:
            for i, c in enumerate(cols):
                share[1:-1, i] = timeline.labels == c
        else:
            share[1:-1] = np.asarray(timeline.weights, dtype=float)[:, cols]
        self.edges_s = np.asarray(timeline.edges_s, dtype=float)
        self.share = share

    def increments(self, knots_s, deltas_s, sigma_s, power_w) -> list[np.ndarray]:
        """Ĝ(x + δ) − Ĝ(x) at `power_w` per label, up to a term common to every δ of a knot
        (it cancels in any difference of two of them; take δ = 0 for the increment itself),
        for every knot x of `knots_s` (rows × knots) and each array of `deltas_s` (each
        broadcast to rows × knots, |δ| small: within the blur's reach of the knot), blurred
        by each row's σ (`sigma_s`, one per row)."""
        knots = np.asarray(knots_s, dtype=float)
        n, n_k = knots.shape
        x = knots.ravel()
        ds = [np.broadcast_to(np.asarray(d, dtype=float), (n, n_k)).ravel() for d in deltas_s]
        sig = np.repeat(np.broadcast_to(np.asarray(sigma_s, dtype=float), (n,)), n_k)
        seg_w = self.share @ np.asarray(power_w, dtype=float)
        change = np.diff(seg_w)
        edges = self.edges_s
        reach = _BLUR_REACH * sig + np.max(np.abs(ds), axis=0)
        # Most knots have no edge within reach (σ well below the edges' spacing): the
        # neighbours on either side say which do; only those search for the rest.
        n_e = len(edges)
        q = np.searchsorted(edges, x, side="right")
        below = (q > 0) & (x - edges[np.maximum(q - 1, 0)] <= reach)
        above = (q < n_e) & (edges[np.minimum(q, n_e - 1)] - x <= reach)
        some = np.flatnonzero(below | above)
        lo, hi = q.copy(), q.copy()
        lo[some] = np.searchsorted(edges, x[some] - reach[some])
        hi[some] = np.searchsorted(edges, x[some] + reach[some], side="right")
        # Every (knot, nearby edge) pair at once.
        n_near = hi - lo
        knot = np.repeat(np.arange(len(x)), n_near)
        first = np.cumsum(n_near) - n_near
        e = lo[knot] + (np.arange(len(knot)) - first[knot])
        u = x[knot] - edges[e]
        s = sig[knot]
        step = change[e]
        out = []
        for d in ds:
            pair = step * _ramp(u + d[knot], s)
            inc = d * seg_w[lo] + np.bincount(knot, weights=pair, minlength=len(x))
            out.append(inc.reshape(n, n_k))
        return out


def _ramp(u: np.ndarray, sigma: np.ndarray) -> np.ndarray:
    """g(u) = E[max(u + δ, 0)] for δ ~ N(0, σ²): σ Ψ(u/σ), or max(u, 0) where σ = 0."""
    blurred = sigma > 0
    if blurred.all():
        z = u / sigma
        return sigma * (z * ndtr(z) + np.exp(-0.5 * z * z) / _SQRT_2PI)
    out = np.maximum(u, 0.0)
    if blurred.any():
        s = sigma[blurred]
        z = u[blurred] / s
        out[blurred] = s * (z * ndtr(z) + np.exp(-0.5 * z * z) / _SQRT_2PI)
    return out


__all__ = ["SegmentShares"]
