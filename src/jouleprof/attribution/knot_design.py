"""How fast each row's modelled power moves when its knots move: the placement's derivatives.

A row weighs time by coefficients at knots (`Timeline.knot_overlap`): a boxcar over [t0, t1]
is (−1/d, 1/d) at (t0, t1), a kernel of boxes one knot per box edge at t1 − m × d. Its
modelled mean power is M = Σ_k coef_k × Ĝ(x_k), Ĝ the energy drawn up to x blurred by the
row's jitter σ (E[G(x + δ)], δ ~ N(0, σ²)). Moving every knot by s changes it at the rate

    dM/ds = Σ_k coef_k × P̂(x_k),   P̂(x) = E[P(x + δ)] = P(x) + Σ_e ΔP_e × (±Φ(−|x − e|/σ)),

P the power of the segment holding x and ΔP_e the change of power at each segment edge e
within 8 σ of x (+ for an edge above x, − below). Lengthening a window d (knots at
t1 − m_k d, coefs γ_k / d) changes it at dM/dd = −M/d − Σ_k coef_k m_k P̂(x_k).

The Gauss-Newton placement (`placement.refine`) needs these for every row at every step. As
central differences they took two designs of every moved row per term, eight in all; here
one look-up of P̂ at every knot gives all of them. On the committed V-JEPA2 runs the results
equal the finite differences' to ~1e-5 of an interval's half-width (halving the differences'
step moved them as much), with the same notes.
"""

from __future__ import annotations

import numpy as np
from scipy.special import ndtr

from jouleprof.attribution.common import _BLUR_REACH, Timeline


class SegmentShares:
    """Each segment's share of time per fitted label (`cols` of timeline.names), padded with
    a segment of nothing before the first edge and after the last: index q = 0 … n + 1."""

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

    def power_at(self, knots_s: np.ndarray, sigma_s: np.ndarray, power_w: np.ndarray):
        """P̂ at each knot (rows × knots): the power drawn there at `power_w` per label,
        blurred by each row's σ (`sigma_s`, one per row; 0: not blurred)."""
        knots = np.asarray(knots_s, dtype=float)
        n, n_k = knots.shape
        x = knots.ravel()
        seg_w = self.share @ np.asarray(power_w, dtype=float)
        edges = self.edges_s
        q = np.searchsorted(edges, x, side="right")
        out = seg_w[q]
        sig = np.repeat(np.broadcast_to(np.asarray(sigma_s, dtype=float), (n,)), n_k)
        if np.any(sig > 0):
            out = out + _blur(x, q, sig, edges, np.diff(seg_w))
        return out.reshape(n, n_k)


def _blur(x, q, sig, edges: np.ndarray, change: np.ndarray) -> np.ndarray:
    """What the blur adds to P̂ at each knot `x` (in segment `q`): Σ over the edges within
    reach of ΔP × Φ(−distance / σ), negative for an edge at or below the knot (the power it
    brought is partly not there yet) and positive above it. Edge i lies between padded
    segments i and i + 1 (`change[i]`)."""
    reach = _BLUR_REACH * sig
    # Most knots have no edge within reach (their σ is well below the spacing of the edges):
    # the neighbours on either side say which do, and only those search for the rest.
    n_e = len(edges)
    below = x - edges[np.clip(q - 1, 0, n_e - 1)] < reach
    above = edges[np.clip(q, 0, n_e - 1)] - x < reach
    some = np.flatnonzero((sig > 0) & ((below & (q > 0)) | (above & (q < n_e))))
    lo, hi = q.copy(), q.copy()
    lo[some] = np.searchsorted(edges, x[some] - reach[some])
    hi[some] = np.searchsorted(edges, x[some] + reach[some], side="right")
    n_near = hi - lo
    knot = np.repeat(np.arange(len(x)), n_near)
    if not len(knot):
        return np.zeros(len(x))
    first = np.cumsum(n_near) - n_near
    e = lo[knot] + (np.arange(len(knot)) - first[knot])
    u = x[knot] - edges[e]
    f = ndtr(-np.abs(u) / sig[knot]) * change[e]
    return np.bincount(knot, weights=np.where(u >= 0, -f, f), minlength=len(x))


__all__ = ["SegmentShares"]
