"""Long phases split into bins of time, each with its own power, for regression.

The regression's basic model gives a phase one power for its whole length. A long phase is
rarely flat: on the H200 the V-JEPA2 backward (~98 ms at batch 8) draws ~435 W in its first
half and ~630 W in its last quarter (benchmarks/results/attr_vith_b8, run6–run8). With one
power for it, the rows with an edge in the short phase after it (the 6 ms optimizer) are
modelled wrongly. The counter's rows are 100 ms long and the step ~200 ms, so a row's other
edge lands at the same point of the step every time, and the error does not average out. It
put the optimizer 23–38 % above its isolated energy on three 240 s runs; with bins, +2, −10
and +7 %.

Each recorded phase whose time per step is at least 1.5 × `bin_s` is cut into
k = round(time per step / bin_s) bins of equal time within every step: its first k-th in
the step is "name#1", and so on (a phase in several segments in a step, such as a parent
around its children, is cut along its own time, wherever the segments lie). A phase that runs
once in most steps and twice or more in some (a replayed phase, `Timeline.repeated`) is cut
per run instead: k from its time per run, and in a step with n runs its time there is taken
as n equal runs, each cut into the same k bins, so that "name#1" is the start of every run.
Each bin is a column of the fit; the phase's energy is the sum of its bins', so its interval
comes from the same fit and bootstrap (bins that trade energy cancel in the sum). Short phases
are left whole: they are what the bins are for.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from jouleprof.attribution.common import EXCLUDED, IDLE, UNTRACKED, Timeline
from jouleprof.attribution.memo import keep_last

BIN_SEP = "#"
"""Separates a phase's name from its bin's number ("backward#2")."""


@dataclass(frozen=True)
class BinSplit:
    """A timeline whose long phases are cut into bins, and which bins make each phase."""

    timeline: Timeline
    members: dict[str, list[str]]
    """Each binned phase → its bins' names, in order (phases left whole are not keys)."""

    def expand(self, names) -> list[str]:
        """`names` with every binned phase replaced by its bins."""
        return expand(self.members, names)


def expand(members: dict[str, list[str]], names) -> list[str]:
    """`names` with every phase that is a key of `members` (binned phase → its bins) replaced
    by its bins."""
    return [m for n in names for m in members.get(n, [n])]


def bin_counts(tl: Timeline, bin_s: float) -> dict[str, int]:
    """How many bins each phase gets (only phases with ≥ 2), from its time per analysed step."""
    if not bin_s > 0:
        raise ValueError(f"bin_s must be > 0 seconds, got {bin_s}")
    skip = {IDLE, UNTRACKED, *EXCLUDED}
    n_steps = max(tl.n_steps, 1)
    out: dict[str, int] = {}
    for name in tl.order:
        if name in skip or BIN_SEP in name:
            continue
        runs = int(tl.repeated[name].sum()) if name in tl.repeated else n_steps
        k = int(round(tl.time_s.get(name, 0.0) / max(runs, 1) / bin_s))
        if k >= 2:
            out[name] = k
    return out


@keep_last
def split_bins(tl: Timeline, bin_s: float) -> BinSplit:
    """Cut each long phase of the analysed steps into bins of equal time (module docstring).

    Args:
        tl: the exclusive timeline (`build_timeline`), without weights (bin before any
            stall split).
        bin_s: the bins' target length; a phase gets round(time per step / bin_s) bins when
            that is ≥ 2.
    """
    if tl.weights is not None:
        raise ValueError("split_bins needs a timeline without weights: bin before the stall split")
    k_of = bin_counts(tl, bin_s)
    if not k_of:
        return BinSplit(tl, {})
    names = list(tl.names)
    members: dict[str, list[str]] = {}
    for name, k in k_of.items():
        members[name] = [f"{name}{BIN_SEP}{m + 1}" for m in range(k)]
        names += members[name]
    index = {nm: j for j, nm in enumerate(names)}
    binned = {tl.names.index(nm): nm for nm in k_of}
    reps = {j: np.maximum(tl.repeated[nm], 1) for j, nm in binned.items() if nm in tl.repeated}

    edges, labels = tl.edges_s, tl.labels
    dur = np.diff(edges)
    step, in_step = tl.segment_steps()
    n_steps = len(tl.analysed_steps)
    # Each binned phase's total time in each step, and its time before each segment.
    total: dict[int, np.ndarray] = {}
    before = np.zeros(len(labels))
    for j in binned:
        mine = in_step & (labels == j)
        total[j] = np.bincount(step[mine], weights=dur[mine], minlength=n_steps)
        idx = np.flatnonzero(mine)
        cum = np.cumsum(dur[idx])
        first = np.r_[True, step[idx][1:] != step[idx][:-1]]
        base = np.maximum.accumulate(np.where(first, cum - dur[idx], 0.0))
        before[idx] = cum - dur[idx] - base

    new_edges: list[float] = [float(edges[0])]
    new_labels: list[int] = []
    for i, lab in enumerate(labels):
        a, b = float(edges[i]), float(edges[i + 1])
        j = int(lab)
        if j not in binned or not in_step[i] or b <= a:
            new_edges.append(b)
            new_labels.append(index[tl.names[j]])
            continue
        k = k_of[binned[j]]
        runs = reps[j][step[i]] if j in reps else 1  # equal runs, each cut into the k bins
        last = k * runs - 1
        t_step = float(total[j][step[i]])
        width = t_step / (k * runs)
        c0 = float(before[i])
        m0 = min(int(c0 // width), last)
        t = a
        m = m0
        while True:
            cut = a + (m + 1) * width - c0  # where this segment leaves bin m
            if m == last or cut >= b - 1e-15:
                new_edges.append(b)
                new_labels.append(index[members[binned[j]][m % k]])
                break
            if cut > t:
                new_edges.append(cut)
                new_labels.append(index[members[binned[j]][m % k]])
                t = cut
            m += 1

    out = tl.relabelled(new_edges, new_labels, names)
    r0, r1 = tl.region_s
    occupied = out.overlap_s(np.array([r0]), np.array([r1]))[0]
    time_s = {k_: v for k_, v in tl.time_s.items() if k_ not in k_of}
    order: list[str] = []
    for nm in tl.order:
        order += members.get(nm, [nm])
    for nm in order:
        if nm not in time_s:
            time_s[nm] = float(occupied[index[nm]])
    for nm, bins in members.items():
        for b in bins:
            out.counts[b] = tl.counts.get(nm, 0)
    out.time_s = time_s
    out.order = order
    return BinSplit(out, members)


__all__ = ["BIN_SEP", "BinSplit", "bin_counts", "expand", "split_bins"]
