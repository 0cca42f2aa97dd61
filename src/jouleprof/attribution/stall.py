"""Host-paced phases: each phase's time split into its own work and the host stalls inside it.

The regression's basic model gives every phase one power, so a phase's energy grows with its
time at that power. A phase the host paces does not behave so: on one replayed batch the
V-JEPA2 backward ran 75–142 ms on an H200 while the GPU did the same work every step; the
extra time was the GPU waiting for the host between kernels, at ~120 W instead of the
phase's ~450 W. Energy per step then barely follows step time (a slope of ~130 W per extra
second against a 570 W mean), a constant power per phase books the backward low and the short
phases after it high, and the counter residual is 2.5 × what it should be
(benchmarks/results/attr_vith_b8/run4/affine_fit.md, and run2, run3).

The stall model keeps the regression's linear form and re-labels time:

- each phase's *work time* in a step is its time in its shortest steps (`quantile` of its
  per-step time over the analysed steps); in a step where it ran longer, that share of each
  of its segments is its work, at the phase's own power, and the rest is *stall*;
- all stall time, whichever phase it sits in, draws one shared power (a column "stall");
- a phase's energy is its power × its work time + the stall power × its stall time, so its
  interval comes from both columns of the same fit.

Stalls are taken as spread evenly through the phase (the host's waits fall between kernels),
which is what `Timeline.weights` expresses. Phases whose time does not vary keep almost all of
it as work.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from jouleprof.attribution.common import EXCLUDED, IDLE, UNTRACKED, Timeline
from jouleprof.attribution.memo import keep_last

STALL = "stall"
"""The shared column of stall time."""


@dataclass(frozen=True)
class StallSplit:
    """A timeline whose phases are split into work and stall, and the split's bookkeeping."""

    timeline: Timeline
    """The original timeline's names plus STALL, with `weights` splitting each phase's time."""
    work_s: dict[str, float]
    """Seconds of each phase counted as its work, over the analysed steps."""
    stall_s: dict[str, float]
    """Seconds of each phase counted as stall, over the analysed steps."""
    work_per_step_s: dict[str, float]
    """Each phase's work time in one step (the reference the split measures against)."""

    def terms(self, names, col_of: dict[str, int]) -> tuple[list[int], np.ndarray]:
        """Columns and seconds whose powers × seconds make the energy of the phases `names`:
        each phase's own column over its work time, and the stall column over their stall."""
        idx = [col_of[n] for n in names]
        t = [self.work_s.get(n, self.timeline.time_s.get(n, 0.0)) for n in names]
        stall = sum(self.stall_s.get(n, 0.0) for n in names)
        if stall > 0 and STALL in col_of:
            idx.append(col_of[STALL])
            t.append(stall)
        return idx, np.array(t)


@keep_last
def split_stalls(tl: Timeline, quantile: float = 0.05) -> StallSplit:
    """Split each recorded phase's time in the analysed steps into work and stall (module doc).

    Args:
        tl: the exclusive timeline (`build_timeline`).
        quantile: which quantile of a phase's per-step time is its work time (0: its
            shortest step; a little above 0 keeps one step's recording noise from setting it).
    """
    if not 0 <= quantile < 0.5:
        raise ValueError(f"quantile must be in [0, 0.5), got {quantile}")
    if STALL in tl.names:
        raise ValueError(f"the timeline already has a phase named {STALL!r}")
    names = [*tl.names, STALL]
    n_seg = len(tl.labels)
    weights = np.zeros((n_seg, len(names)))
    weights[np.arange(n_seg), tl.labels] = 1.0
    dur = np.diff(tl.edges_s)
    k, in_step = tl.segment_steps()
    skip = {IDLE, UNTRACKED, *EXCLUDED}
    work_s: dict[str, float] = {}
    stall_s: dict[str, float] = {}
    ref_s: dict[str, float] = {}
    n_steps = len(tl.analysed_steps)
    for j, name in enumerate(tl.names):
        if name in skip:
            continue
        mine = in_step & (tl.labels == j)
        if not mine.any():
            continue
        per_step = np.bincount(k[mine], weights=dur[mine], minlength=n_steps)
        ran = per_step[per_step > 0]
        ref = float(np.quantile(ran, quantile))
        frac_of_step = np.minimum(1.0, ref / np.maximum(per_step, 1e-15))
        frac = frac_of_step[k[mine]]
        weights[mine, j] = frac
        weights[mine, len(names) - 1] = 1.0 - frac
        work_s[name] = float(np.sum(dur[mine] * frac))
        stall_s[name] = float(np.sum(dur[mine] * (1.0 - frac)))
        ref_s[name] = ref
    split = tl.relabelled(
        tl.edges_s,
        tl.labels,
        names,
        time_s={**tl.time_s, **work_s, STALL: float(sum(stall_s.values()))},
        order=list(tl.order),
        weights=weights,
    )
    return StallSplit(split, work_s, stall_s, ref_s)


__all__ = ["STALL", "StallSplit", "split_stalls"]
