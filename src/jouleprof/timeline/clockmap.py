"""Mapping the GPU's timeline onto the run's host clock (pure functions, no torch).

CUDA events are stamped by the GPU's own timer; samples and spans live on the host's
`perf_counter_ns` clock. The phase recorder takes *anchors*: moments whose time is known on
both clocks, each with the half-width of the host interval that brackets it. This module turns
anchors into a monotone map:

* between two anchors, linear interpolation (a linear fit through the pair): this follows a
  drift between the two clocks, and a drift whose rate changes slowly over a long run; the error
  there is never more than the anchors' own;
* beyond the last anchor (or before the first), the least-squares line through the nearest
  anchors (`fit_window` of them, more if they span less than `min_fit_span_s`), continued. An
  error in that slope grows with the distance extrapolated, so anchors spanning less than
  `min_fit_span_s` in all give no slope: the rate is then taken as exactly 1.

Anchors closer than `min_gap_s` on the GPU's timeline are thinned (the tighter one is kept),
so that two nearly simultaneous anchors cannot make the map run backwards by their bracketing
error.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ClockAnchor:
    """One moment known on both clocks."""

    gpu_s: float
    """Seconds on the GPU's timeline (relative to the recorder's first anchor)."""
    host_s: float
    """Seconds on the host clock (the run's clock), the middle of the bracketing interval."""
    halfwidth_s: float = 0.0
    """Half the width of the host interval known to contain the moment: its uncertainty."""

    def __post_init__(self) -> None:
        if not (math.isfinite(self.gpu_s) and math.isfinite(self.host_s)):
            raise ValueError(f"ClockAnchor needs finite times, got {self}")
        if not self.halfwidth_s >= 0:
            raise ValueError(f"ClockAnchor.halfwidth_s must be ≥ 0, got {self.halfwidth_s}")


def _thin(anchors: Sequence[ClockAnchor], min_gap_s: float) -> list[ClockAnchor]:
    ordered = sorted(anchors, key=lambda a: a.gpu_s)
    kept: list[ClockAnchor] = []
    for a in ordered:
        if not kept or a.gpu_s - kept[-1].gpu_s >= min_gap_s:
            kept.append(a)
        elif a.halfwidth_s < kept[-1].halfwidth_s:
            # Too close to the previous one: keep whichever is known more tightly. A later
            # anchor replacing kept[-1] only widens its gap to kept[-2].
            kept[-1] = a
    return kept


def _ls_slope(anchors: Sequence[ClockAnchor], min_span_s: float) -> float:
    n = len(anchors)
    if n < 2 or anchors[-1].gpu_s - anchors[0].gpu_s < min_span_s:
        return 1.0
    mg = sum(a.gpu_s for a in anchors) / n
    mh = sum(a.host_s for a in anchors) / n
    sxx = sum((a.gpu_s - mg) ** 2 for a in anchors)
    if sxx <= 0:
        return 1.0
    return sum((a.gpu_s - mg) * (a.host_s - mh) for a in anchors) / sxx


class ClockMap:
    """A monotone map from GPU seconds to host-clock seconds, built from anchors.

    Args:
        anchors: at least one anchor.
        min_gap_s: anchors closer than this on the GPU timeline are thinned to one.
        fit_window: how many anchors at each end fix the slope used to extrapolate.
        min_fit_span_s: the least GPU time those anchors must span to give a slope.

    Raises:
        ValueError: no anchors, or anchors that would make the map run backwards (the host
            clock going back while the GPU's goes forward: not two clocks of one machine).
    """

    def __init__(
        self,
        anchors: Sequence[ClockAnchor],
        *,
        min_gap_s: float = 1e-3,
        fit_window: int = 8,
        min_fit_span_s: float = 2.0,
    ) -> None:
        if not anchors:
            raise ValueError("ClockMap needs at least one anchor")
        if min_gap_s < 0:
            raise ValueError(f"min_gap_s must be ≥ 0, got {min_gap_s}")
        if fit_window < 2:
            raise ValueError(f"fit_window must be ≥ 2, got {fit_window}")
        self.anchors = _thin(anchors, min_gap_s)
        self._g = [a.gpu_s for a in self.anchors]
        self._h = [a.host_s for a in self.anchors]
        for i in range(1, len(self._g)):
            if self._h[i] <= self._h[i - 1]:
                raise ValueError(
                    f"anchors {i - 1} and {i} run backwards "
                    f"(gpu {self._g[i - 1]:.6f}→{self._g[i]:.6f} s, "
                    f"host {self._h[i - 1]:.6f}→{self._h[i]:.6f} s)"
                )
        g = self._g
        head = fit_window
        while head < len(g) and g[head - 1] - g[0] < min_fit_span_s:
            head += 1
        tail = fit_window
        while tail < len(g) and g[-1] - g[-tail] < min_fit_span_s:
            tail += 1
        self.slope_head = _ls_slope(self.anchors[:head], min_fit_span_s)
        self.slope_tail = _ls_slope(self.anchors[-tail:], min_fit_span_s)
        if self.slope_head <= 0 or self.slope_tail <= 0:
            raise ValueError("anchors give a non-positive clock rate: they are not of one machine")

    @property
    def rate(self) -> float:
        """Host seconds per GPU second over the whole anchored span (1.0 with one anchor)."""
        if len(self._g) < 2:
            return 1.0
        return (self._h[-1] - self._h[0]) / (self._g[-1] - self._g[0])

    @property
    def drift_ppm(self) -> float:
        """(rate − 1)·10⁶: positive when the GPU's timer runs slow against the host clock."""
        return (self.rate - 1.0) * 1e6

    def __call__(self, gpu_s: float) -> float:
        g, h = self._g, self._h
        i = bisect.bisect_right(g, gpu_s)
        if i == 0:
            return h[0] + (gpu_s - g[0]) * self.slope_head
        if i == len(g):
            return h[-1] + (gpu_s - g[-1]) * self.slope_tail
        g0, g1, h0, h1 = g[i - 1], g[i], h[i - 1], h[i]
        return h0 + (gpu_s - g0) * (h1 - h0) / (g1 - g0)
